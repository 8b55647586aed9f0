"""AttentionClustering against KMeans, GaussianMixture and friends.

Runs every method of ``_methods.candidates`` (AttentionClustering with each
solver the installed version accepts, InContextQuantizer -> KMeans when it
exists, KMeans, MiniBatchKMeans, GaussianMixture spherical and full,
SpectralClustering for n <= 3000) on the same data in the same process, and
writes ``results/comparison.{json,csv}`` and the page ``docs/benchmarks.md``
with its figures in ``docs/_static/benchmarks/``. Three sections:

- ``synthetic``: the paper's mixture over sigma, d and K, in a 2 x 2 design
  (orthogonal or random centroids, equal or unequal weights): ARI, NMI,
  misclassification error against the Bayes error, and distance to the
  true centroids;
- ``scaling``: fit time and peak memory as n, d and K grow, with log-log
  slopes, against one pass over the data (``X @ W``);
- ``real``: the labelled data sets shipped with scikit-learn, raw and
  preprocessed, with the number of classes as K.

A compile time (empty Numba cache, fresh process) is measured apart.

Why plain scripts rather than asv: the comparison is a ratio between
methods on the same data, measured in one process, interleaved round by
round after Numba has compiled, so a shared and noisy machine affects every
method alike. asv times each benchmark in its own process, one after the
other, and tracks one function across commits, not several side by side.

Timing: "fit time" is the median warm wall time of ``fit_predict(X)``
(fit, then label the training data). Memory: the tracemalloc peak during
one extra fit, above what was allocated before it (so not the data
itself); it counts NumPy arrays and Python objects, and Numba's arrays when
``numba_allocations_traced`` says so (recorded in the results), but not
BLAS or OpenMP work buffers. Methods whose predicted fit time exceeds
``--budget`` seconds are skipped at that size.

    python benchmarks/run.py                 # full run (FULL below), about an hour or more
    python benchmarks/run.py --medium        # a few minutes per section, one thread
    python benchmarks/run.py --quick         # tiny grid, under a minute (the tests run it)
    python benchmarks/run.py --medium --sections real   # update one section of a run
    python benchmarks/run.py --quick --out DIR          # write everything under DIR
    python benchmarks/run.py --render-only   # the page again, from the saved results

Timings depend on the load: on a shared machine, pass ``--threads 1`` (the
quick and medium modes do), since OpenMP threads waiting for busy cores can
make a millisecond KMeans fit take a second.
"""

import argparse
import csv
import datetime
import json
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import _methods as M
import numpy as np
from _common import (
    RESULTS,
    ROOT,
    cold_start_times,
    library_versions,
    numba_allocations_traced,
    peak_memory,
    save,
    side_by_side,
)
from _report import render
from threadpoolctl import threadpool_info, threadpool_limits
from tqdm import tqdm

SECTIONS = ("synthetic", "scaling", "real", "cold_start")

FULL = {
    "synthetic": {
        "designs": list(M.DESIGNS),
        "noises": [0.1, 0.3, 0.6, 1.0],
        "features": [10, 100],
        "clusters": [2, 3, 10],
        "n_samples": [3000],
        "seeds": [0, 1, 2],
        "bayes_draws": 200_000,
        "repeats": 1,
    },
    "scaling": {
        "design": "random, balanced",
        "noise": 0.3,
        "sweeps": [
            {
                "vary": "n_samples",
                "values": [10**3, 10**4, 10**5, 10**6, 10**7],
                "n_features": 10,
                "n_clusters": 3,
            },
            {
                "vary": "n_samples",
                "values": [10**3, 10**4, 10**5, 10**6],
                "n_features": 100,
                "n_clusters": 10,
            },
            {
                "vary": "n_features",
                "values": [10, 30, 100, 300, 1000],
                "n_samples": 10**5,
                "n_clusters": 3,
            },
            {
                "vary": "n_clusters",
                "values": [2, 3, 5, 10, 20, 50],
                "n_samples": 10**5,
                "n_features": 100,
            },
        ],
    },
    "real": {"datasets": list(M.REAL_DATASETS), "views": list(M.VIEWS)},
    "cold_start": {"all_solvers": True},
    "repeats": 3,
    "budget": 120.0,
    "max_gb": 1.0,
    "threads": None,
}

QUICK = {
    "synthetic": {
        "designs": list(M.DESIGNS),
        "noises": [0.3],
        "features": [10],
        "clusters": [2, 3],
        "n_samples": [500],
        "seeds": [0],
        "bayes_draws": 20_000,
    },
    "scaling": {
        "design": "random, balanced",
        "noise": 0.3,
        "sweeps": [
            {"vary": "n_samples", "values": [300, 1000, 2000], "n_features": 10, "n_clusters": 2},
            {"vary": "n_features", "values": [5, 10, 20], "n_samples": 1000, "n_clusters": 2},
            {"vary": "n_clusters", "values": [2, 3, 4], "n_samples": 1000, "n_features": 10},
        ],
    },
    "real": {"datasets": ["iris", "wine"], "views": list(M.VIEWS)},
    "cold_start": {"all_solvers": False},
    "repeats": 1,
    "budget": 5.0,
    "max_gb": 0.1,
    "threads": 1,
}

# What a shared two-core machine affords in a few minutes per section.
MEDIUM = {
    "synthetic": dict(FULL["synthetic"], n_samples=[1000], seeds=[0], bayes_draws=100_000),
    "scaling": {
        "design": "random, balanced",
        "noise": 0.3,
        "sweeps": [
            {
                "vary": "n_samples",
                "values": [10**3, 10**4, 10**5, 10**6],
                "n_features": 10,
                "n_clusters": 3,
            },
            {
                "vary": "n_features",
                "values": [10, 30, 100, 300],
                "n_samples": 10**4,
                "n_clusters": 3,
            },
            {
                "vary": "n_clusters",
                "values": [2, 3, 5, 10, 20],
                "n_samples": 10**4,
                "n_features": 100,
            },
        ],
    },
    "real": FULL["real"],
    "cold_start": FULL["cold_start"],
    "repeats": 3,
    "budget": 10.0,
    "max_gb": 0.2,
    "threads": 1,
}
MODES = {"quick": QUICK, "medium": MEDIUM, "full": FULL}

SIZE_KEYS = {"n_samples": "n", "n_features": "d", "n_clusters": "K"}


# ---------------------------------------------------------------- measuring


def fit_labels(estimator, X):
    """Fit and label the training data; returns (estimator, labels)."""
    return estimator, estimator.fit_predict(X)


def measure(X, methods, repeats, budget, floor=None):
    """Fit every method on X: labels, centers, peak memory and warm fit time.

    Each method is fitted once under tracemalloc (its labels and centers
    are scored), then all are timed side by side in interleaved rounds,
    as many as fit in ``budget`` seconds, between 1 and ``repeats``. With a
    d x K matrix ``floor``, ``X @ floor`` (one pass over the data) is
    measured alongside as ``_methods.FLOOR``.
    """
    calls = {name: (lambda f=factory: fit_labels(f(), X)) for name, factory in methods.items()}
    if floor is not None:
        calls[M.FLOOR] = lambda: (None, X @ floor)
    out = {}
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            peak, (est, labels) = peak_memory(call)
            traced = time.perf_counter() - start
        out[name] = {
            "peak_mb": peak / 1e6,
            "labels": None if est is None else labels,
            "centers": None if est is None else M.centers_of(est),
            "traced_s": traced,
            "warnings": sorted({w.category.__name__ for w in caught}),
            # Whether AttentionClustering's center="auto" centred X (None: another method).
            "centered": bool(est.center_) if hasattr(est, "center_") else None,
        }
    rounds = int(
        min(repeats, max(1, budget // max(sum(r["traced_s"] for r in out.values()), 1e-9)))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = side_by_side(calls, rounds, warmup=False)
    for name in out:
        out[name]["fit_s"] = times[name]
        out[name]["repeats"] = rounds
    return out


# ---------------------------------------------------------------- sections


def run_synthetic(cfg, ctx, bar):
    rows = []
    for design in cfg["designs"]:
        for d in cfg["features"]:
            for K in cfg["clusters"]:
                for noise in cfg["noises"]:
                    for seed in cfg["seeds"]:
                        C, w = M.mixture_parameters(design, d, K, seed)
                        bayes, bayes_se, source = M.bayes_error(
                            C, w, noise, cfg["bayes_draws"], seed
                        )
                        for n in cfg["n_samples"]:
                            bar.set_postfix_str(f"{design} sigma={noise} d={d} K={K} n={n}")
                            X, y, C, w = M.make_data(design, n, d, K, noise, seed)
                            dataset = {
                                "section": "synthetic",
                                "design": design,
                                "noise": noise,
                                "n_samples": n,
                                "n_features": d,
                                "n_clusters": K,
                                "seed": seed,
                                "bayes_error": bayes,
                                "bayes_error_se": bayes_se,
                                "bayes_error_source": source,
                                "bayes_ari": M.scores(y, M.bayes_labels(X, C, w, noise))["ari"],
                                "max_cos_centroids": M.max_abs_cosine(C),
                            }
                            methods = M.candidates(K, n, ctx["solvers"], seed)
                            results = measure(X, methods, ctx["repeats"], ctx["budget"])
                            rows += finish_rows(dataset, results, X, y, C)
                            bar.update()
    return rows


def finish_rows(dataset, results, X, y, C=None):
    rows = []
    for name, r in results.items():
        row = dict(dataset, method=name, skipped=None, data_mb=X.nbytes / 1e6)
        row.update({k: r[k] for k in ("fit_s", "repeats", "peak_mb", "warnings", "centered")})
        if r["labels"] is not None:
            row.update(M.scores(y, r["labels"], r["centers"], C))
        rows.append(row)
    return rows


def predicted_time(history, size):
    """Fit time at ``size`` extrapolated from the last two measured sizes.

    The growth exponent is the last local log-log slope, at least 1 (no
    method reads n rows in less than linear time).
    """
    if not history:
        return 0.0
    (s1, t1) = history[-1]
    slope = 1.0
    if len(history) > 1:
        (s0, t0) = history[-2]
        if t0 > 0 and t1 > 0 and s1 > s0:
            slope = max(1.0, math.log(t1 / t0) / math.log(s1 / s0))
    return t1 * (size / s1) ** slope


def run_scaling(cfg, ctx, bar):
    rows = []
    for sweep in cfg["sweeps"]:
        vary = sweep["vary"]
        fixed = {k: v for k, v in sweep.items() if k not in ("vary", "values")}
        label = f"{SIZE_KEYS[vary]} ({', '.join(f'{SIZE_KEYS[k]}={v}' for k, v in fixed.items())})"
        history, skipped_from = {}, {}
        for value in sweep["values"]:
            shape = dict(fixed, **{vary: value})
            n, d, K = shape["n_samples"], shape["n_features"], shape["n_clusters"]
            bar.set_postfix_str(f"{label}: {SIZE_KEYS[vary]}={value}")
            dataset = {
                "section": "scaling",
                "sweep": label,
                "vary": vary,
                "size": value,
                "design": cfg["design"],
                "noise": cfg["noise"],
                "n_samples": n,
                "n_features": d,
                "n_clusters": K,
                "seed": 0,
            }
            methods = M.candidates(K, n, ctx["solvers"])
            if n * d * 8 > ctx["max_gb"] * 1e9:
                why = f"X larger than {ctx['max_gb']:g} GB at {SIZE_KEYS[vary]}={value}"
                rows += [dict(dataset, method=name, skipped=why) for name in [*methods, M.FLOOR]]
                bar.update()
                continue
            skipped = {}
            for name in list(methods):
                if name in skipped_from:
                    skipped[name] = skipped_from[name]
                    del methods[name]
                    continue
                guess = predicted_time(history.get(name, []), value)
                if guess > ctx["budget"]:
                    skipped[name] = skipped_from[name] = (
                        f"predicted fit time {guess:.3g} s at {SIZE_KEYS[vary]}={value} "
                        f"> budget {ctx['budget']:g} s"
                    )
                    del methods[name]
            X, y, C, _ = M.make_data(cfg["design"], n, d, K, cfg["noise"], 0)
            W = np.random.default_rng(0).standard_normal((d, K))
            results = measure(X, methods, ctx["repeats"], ctx["budget"], floor=W)
            for name, r in results.items():
                history.setdefault(name, []).append((value, r["fit_s"]))
            rows += finish_rows(dataset, results, X, y, C)
            rows += [dict(dataset, method=name, skipped=why) for name, why in skipped.items()]
            del X
            bar.update()
    return rows


def run_real(cfg, ctx, bar):
    rows = []
    for name in cfg["datasets"]:
        X_raw, y = M.load_real(name)
        K = len(np.unique(y))
        for view in cfg["views"]:
            bar.set_postfix_str(f"{name}, {view}")
            factory = M.VIEWS[view]
            X = X_raw if factory is None else np.ascontiguousarray(factory(K).fit_transform(X_raw))
            dataset = {
                "section": "real",
                "dataset": name,
                "view": view,
                "n_samples": X.shape[0],
                "n_features": X.shape[1],
                "n_clusters": K,
                **M.view_diagnostics(X, y),
            }
            methods = M.candidates(K, X.shape[0], ctx["solvers"])
            results = measure(X, methods, ctx["repeats"], ctx["budget"])
            rows += finish_rows(dataset, results, X, y)
            bar.update()
    return rows


def run_cold_start(cfg, ctx, bar):
    """Import and first-fit time in a fresh process with an empty Numba cache.

    The compile time is the first fit minus a warm fit of the same data,
    timed here after the kernels were compiled.
    """
    rows = []
    solvers = ctx["solvers"] if cfg["all_solvers"] else ctx["solvers"][:1]
    X, _, _ = M.make_mixture(1000, 10, 2, random_state=0)
    for solver in solvers:
        bar.set_postfix_str(f"cold start, solver={solver!r}")
        fit = f"attention_cluster.AttentionClustering(2, solver={solver!r}, random_state=0).fit(X)"
        cold = cold_start_times(
            "from attention_cluster.datasets import make_mixture\n"
            "X, _, _ = make_mixture(1000, 10, 2, random_state=0)\n" + fit
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warm = side_by_side(
                {
                    "warm": lambda s=solver: M.AttentionClustering(2, solver=s, random_state=0).fit(
                        X
                    )
                },
                3,
            )
        rows.append(
            {
                "section": "cold_start",
                "method": f"AttentionClustering(solver={solver!r})",
                "n_samples": 1000,
                "n_features": 10,
                "n_clusters": 2,
                "import_s": cold["import_s"],
                "first_fit_s": cold["first_call_s"],
                "warm_fit_s": warm["warm"],
                "compile_s": max(cold["first_call_s"] - warm["warm"], 0.0),
            }
        )
        bar.update()
    return rows


RUNNERS = {
    "synthetic": run_synthetic,
    "scaling": run_scaling,
    "real": run_real,
    "cold_start": run_cold_start,
}


def n_tasks(section, cfg, n_solvers):
    if section == "synthetic":
        return math.prod(
            len(cfg[k]) for k in ("designs", "features", "clusters", "noises", "seeds", "n_samples")
        )
    if section == "scaling":
        return sum(len(s["values"]) for s in cfg["sweeps"])
    if section == "real":
        return len(cfg["datasets"]) * len(cfg["views"])
    return n_solvers if cfg["all_solvers"] else 1


# ---------------------------------------------------------------- output


def environment():
    """Versions and thread pools: what the timings depend on (no paths, no host)."""
    versions = library_versions()
    return {
        "python": versions.pop("Python"),
        **versions,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "thread_pools": [
            {k: p.get(k) for k in ("internal_api", "num_threads", "version")}
            for p in threadpool_info()
        ],
    }


def write_csv(rows, path):
    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (";".join(v) if isinstance(v, list) else v) for k, v in r.items()})


def output_paths(out):
    """(results dir, page, figures dir): the repository's, or all under ``out``."""
    if out is None:
        docs = ROOT / "docs"
        return RESULTS, docs / "benchmarks.md", docs / "_static" / "benchmarks"
    out = Path(out)
    return out / "results", out / "benchmarks.md", out / "_static" / "benchmarks"


def command_line(args):
    """The command that reproduces this run (without --out, a local path)."""
    parts = ["python benchmarks/run.py"]
    if args.mode != "full":
        parts.append(f"--{args.mode}")
    if args.sections != list(SECTIONS):
        parts += ["--sections", *args.sections]
    for flag in ("budget", "repeats", "max_gb", "threads"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    return " ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="tiny grid (the test suite runs it)",
    )
    modes.add_argument(
        "--medium",
        dest="mode",
        action="store_const",
        const="medium",
        help="a few minutes per section",
    )
    parser.set_defaults(mode="full")
    parser.add_argument("--out", help="write results, page and figures under this directory")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--budget", type=float, help="seconds per fit before a method is skipped")
    parser.add_argument("--repeats", type=int, help="most timing rounds per data set")
    parser.add_argument("--max-gb", type=float, help="largest data set, in GB")
    parser.add_argument(
        "--threads", type=int, help="BLAS and OpenMP threads (default: all; --quick, --medium: 1)"
    )
    parser.add_argument(
        "--render-only", action="store_true", help="regenerate the page from saved results"
    )
    args = parser.parse_args(argv)

    results_dir, page, figures = output_paths(args.out)
    saved = results_dir / "comparison.json"
    if args.render_only:
        render(json.loads(saved.read_text()), page, figures)
        print(f"wrote {page}")
        return

    config = MODES[args.mode]
    ctx = {
        "budget": args.budget or config["budget"],
        "max_gb": args.max_gb or config["max_gb"],
        "threads": args.threads or config["threads"],
    }
    # Sections run alone update their part of an earlier run of the same mode.
    payload = json.loads(saved.read_text()) if saved.exists() else {}
    if payload.get("meta", {}).get("mode") != args.mode:
        payload = {"rows": [], "meta": {"sections": {}}}
    with threadpool_limits(limits=ctx["threads"]):
        run(args, config, ctx, payload)
    save("comparison", payload, results_dir)
    write_csv(payload["rows"], results_dir / "comparison.csv")
    render(payload, page, figures)
    print(f"wrote {saved}, {results_dir / 'comparison.csv'} and {page}")


def run(args, config, ctx, payload):
    """Run the sections asked for, updating ``payload`` in place."""
    ctx["solvers"] = M.available_solvers()
    payload["meta"].update(
        mode=args.mode,
        environment=environment(),
        solvers=ctx["solvers"],
        numba_allocations_traced=numba_allocations_traced(),
        spectral_max_n=M.SPECTRAL_MAX_N,
    )
    total = sum(n_tasks(s, config[s], len(ctx["solvers"])) for s in args.sections)
    with tqdm(total=total, desc="benchmarks", file=sys.stderr) as bar:
        for section in args.sections:
            start, load_before = time.perf_counter(), os.getloadavg()
            # A section may time fewer rounds (the synthetic grid is about accuracy).
            repeats = args.repeats or config[section].get("repeats", config["repeats"])
            section_ctx = dict(ctx, repeats=repeats)
            rows = RUNNERS[section](config[section], section_ctx, bar)
            payload["rows"] = [r for r in payload["rows"] if r["section"] != section] + rows
            payload["meta"]["sections"][section] = {
                "command": command_line(args),
                "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "seconds": time.perf_counter() - start,
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "config": config[section],
                **{k: section_ctx[k] for k in ("repeats", "budget", "max_gb", "threads")},
            }


if __name__ == "__main__":
    main()
