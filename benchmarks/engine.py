"""The pass engine's figures: default fit against KMeans, one-pass equivalents, threads, float32.

Every figure of the fit-time page, measured in one run after Numba's
compile (the first fit's compile is cold_start.py's section of the page):

- d=10, K=2, sigma in {0.3, 1}, n in {1e5, 1e6}: the default fit's time
  against KMeans(n_init=1) (at its default threads and on one thread) and
  against one pass ``X @ W`` (W of shape (d, K), one BLAS thread), side by
  side in interleaved rounds, medians; the median distance to the centroids
  over 10 seeds against the class-means floor;
- d=100, K=10, orthogonal centroids, sigma=0.5, n=1e5: time against KMeans,
  distance against the floor;
- n=1e4 (d=10, K=2): time against KMeans;
- threads: one E-step pass and the whole fit on 1 and 2 threads at n=1e6,
  and whether fits on 2 threads, in a thread and after ``fork`` equal the
  serial fit bit for bit;
- float32 input against float64: time and distance at n=1e6.

Writes benchmarks/results/engine.json and docs/performance.md (the sections
that peers.py and cold_start.py write into that page are kept).

    python benchmarks/engine.py [--quick] [--out DIR]
"""

import multiprocessing
import os
import threading
import warnings
from pathlib import Path

import numpy as np
from _common import (
    MAX_ROUNDS,
    ROOT,
    before_other_pages,
    marked_sections,
    mixture_limits,
    one_thread,
    quick_cli,
    run_conditions,
    run_facts,
    save,
    side_by_side,
    verdict,
    where_passes_go,
)
from sklearn.cluster import KMeans

from attention_cluster import AttentionClustering
from attention_cluster._passes import DenseRows
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance, class_means_distance

# One pass is timed as a run of _PASSES products inside one thread limit,
# whose setting costs about a millisecond, more than a pass over 1e5 rows.
_PASSES = 10


def one_pass(X, K):
    """_PASSES reads of X: ``X @ W`` with W of shape (d, K), on one BLAS thread."""
    W = np.ones((X.shape[1], K))
    return lambda: one_thread(lambda: [np.dot(X, W) for _ in range(_PASSES)])


def timed_passes(times):
    """``times`` with the one-pass entry divided by the products it ran."""
    return {k: (v / _PASSES if k == "one_pass" else v) for k, v in times.items()}


def accuracy(n, d, K, noise, seeds, **data):
    """Median distance of the default fit and of the class-means floor over seeds."""
    fits, floors, passes = [], [], []
    for seed in range(seeds):
        X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed, **data)
        model = AttentionClustering(K, random_state=seed).fit(X)
        fits.append(centroid_distance(model.cluster_centers_, C))
        floors.append(class_means_distance(X, y, C))
        passes.append(model.refine_n_iter_)
    # The expected distance of an efficient estimator over the floor's.
    efficient, floor = mixture_limits(n, d, K, noise)
    return {
        "distance": float(np.median(fits)),
        "floor": float(np.median(floors)),
        "distance_over_floor": float(np.median(fits) / np.median(floors)),
        "information_limit": efficient / floor,
        "em_passes_median": float(np.median(passes)),
        "seeds": seeds,
    }


def _limit(row):
    """The efficient limit's cell (runs before it was measured have none)."""
    return f"{row['information_limit']:.2f}" if "information_limit" in row else ""


# Seconds of interleaved rounds that side_by_side aims at for one timing.
_ROUNDS_SECONDS = 2.0


def timing(X, K, repeats):
    """Interleaved medians: default fit, KMeans(n_init=1) and one pass."""
    times = side_by_side(
        {
            "default": lambda: AttentionClustering(K, random_state=0).fit(X),
            "kmeans": lambda: KMeans(K, n_init=1, random_state=0).fit(X),
            "kmeans_1thread": lambda: one_thread(KMeans(K, n_init=1, random_state=0).fit, X),
            "one_pass": one_pass(X, K),
        },
        repeats,
        seconds=_ROUNDS_SECONDS,
    )
    times = timed_passes(times)
    return {
        "seconds": times,
        "ratio_to_kmeans": times["default"] / times["kmeans"],
        "ratio_to_kmeans_1thread": times["default"] / times["kmeans_1thread"],
        "one_pass_equivalents": times["default"] / times["one_pass"],
    }


def bundled(repeats):
    """scikit-learn's bundled data sets, raw and standardised: time against
    KMeans(n_init=1) and the ConvergenceWarnings of the default fit."""
    from sklearn import datasets
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.preprocessing import StandardScaler

    rows = []
    for name in ("iris", "wine", "breast_cancer", "digits"):
        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        K = len(np.unique(y))
        for view, data in (("raw", X), ("standardised", StandardScaler().fit_transform(X))):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                AttentionClustering(K, random_state=0).fit(data)
            row = {"data": name, "view": view, "K": K}
            row["convergence_warnings"] = sum(
                issubclass(w.category, ConvergenceWarning) for w in caught
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row.update(timing(data, K, repeats))
            rows.append(row)
            print(
                f"{name} ({view}): {row['ratio_to_kmeans']:.2f}x KMeans, "
                f"{row['convergence_warnings']} ConvergenceWarning(s)"
            )
    return rows


def _centers(X, n_threads):
    return AttentionClustering(2, random_state=0, n_threads=n_threads).fit(X).cluster_centers_


def _forked(X, queue):
    queue.put(_centers(X, None))


def threads(n, repeats):
    """Pass and fit on 1 and 2 threads; identical results in threads and after fork."""
    X, _, C = make_mixture(n, 10, 2, noise=1.0, random_state=0)
    U = np.ascontiguousarray(C.T)
    log_pi = np.log([0.5, 0.5])
    serial, pooled = DenseRows(X, n_threads=1), DenseRows(X, n_threads=2)
    times = side_by_side(
        {
            "e_step_1thread": lambda: serial.e_step(U, log_pi, 1.0),
            "e_step_2threads": lambda: pooled.e_step(U, log_pi, 1.0),
            "fit_1thread": lambda: AttentionClustering(2, random_state=0, n_threads=1).fit(X),
            "fit_2threads": lambda: AttentionClustering(2, random_state=0, n_threads=2).fit(X),
            "one_pass": one_pass(X, 2),
        },
        repeats,
    )
    times = timed_passes(times)
    pooled.close()
    reference = _centers(X, 1)
    in_thread = []
    worker = threading.Thread(target=lambda: in_thread.append(_centers(X, 2)))
    worker.start()
    worker.join()
    # Pairs, in the page's order: a results file saved with sorted keys
    # would lose a mapping's.
    identical = [
        ["2_threads", bool(np.array_equal(_centers(X, 2), reference))],
        ["in_a_thread", bool(np.array_equal(in_thread[0], reference))],
    ]
    if "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_forked, args=(X, queue))
        child.start()
        identical.append(["after_fork", bool(np.array_equal(queue.get(timeout=600), reference))])
        child.join()
    return {
        "n": n,
        "seconds": times,
        "e_step_speedup": times["e_step_1thread"] / times["e_step_2threads"],
        "fit_speedup": times["fit_1thread"] / times["fit_2threads"],
        "identical_to_serial": identical,
    }


def float32(n, seeds, repeats):
    """float32 against float64 input: fit time (interleaved) and distance."""
    out = []
    for noise in (0.3, 1.0):
        X, _, _ = make_mixture(n, 10, 2, noise=noise, random_state=0)
        X32 = X.astype(np.float32)
        times = side_by_side(
            {
                "float64": lambda: AttentionClustering(2, random_state=0).fit(X),
                "float32": lambda: AttentionClustering(2, random_state=0).fit(X32),
            },
            repeats,
        )
        d64, d32 = [], []
        for seed in range(seeds):
            X, _, C = make_mixture(n, 10, 2, noise=noise, random_state=seed)
            d64.append(
                centroid_distance(
                    AttentionClustering(2, random_state=seed).fit(X).cluster_centers_, C
                )
            )
            X32 = X.astype(np.float32)
            d32.append(
                centroid_distance(
                    AttentionClustering(2, random_state=seed).fit(X32).cluster_centers_, C
                )
            )
        out.append(
            {
                "noise": noise,
                "n": n,
                "seconds": times,
                "time_ratio_32_to_64": times["float32"] / times["float64"],
                "distance_float64": float(np.median(d64)),
                "distance_float32": float(np.median(d32)),
                "seeds": seeds,
            }
        )
    return out


def main(quick=False, out=None):
    load_before = os.getloadavg()
    # Quick: 3e5 numbers, above _passes._COMPILE_MIN_SIZE, so that the
    # threads' and fork's checks run Numba's kernels, as the full run does.
    big = 30_000 if quick else 1_000_000
    mid = 5_000 if quick else 100_000
    seeds = 2 if quick else 10
    repeats = 2 if quick else 5
    grid = []
    for n, target in ((mid, 0.5), (big, 0.2)):
        for noise in (0.3, 1.0):
            X, _, _ = make_mixture(n, 10, 2, noise=noise, random_state=0)
            row = {"n": n, "d": 10, "K": 2, "noise": noise, "target_ratio": target}
            row.update(timing(X, 2, repeats))
            row.update(accuracy(n, 10, 2, noise, seeds))
            grid.append(row)
            print(
                f"n={n:>8d} sigma={noise}: {row['ratio_to_kmeans']:.2f}x KMeans "
                f"({row['ratio_to_kmeans_1thread']:.2f}x on one thread), "
                f"{row['one_pass_equivalents']:.1f} passes, distance {row['distance_over_floor']:.2f}x floor"
            )
    X, _, _ = make_mixture(mid, 100, 10, noise=0.5, random_state=0)
    wide = {"n": mid, "d": 100, "K": 10, "noise": 0.5, "target_ratio": 1.0}
    wide.update(timing(X, 10, repeats))
    wide.update(accuracy(mid, 100, 10, 0.5, seeds))
    print(
        f"d=100 K=10: {wide['ratio_to_kmeans']:.2f}x KMeans, distance {wide['distance_over_floor']:.2f}x floor"
    )
    small = []
    for noise in (0.3, 1.0):
        X, _, _ = make_mixture(10_000, 10, 2, noise=noise, random_state=0)
        row = {"n": 10_000, "d": 10, "K": 2, "noise": noise, "target_ratio": 1.0}
        row.update(timing(X, 2, repeats))
        small.append(row)
        print(f"n=1e4 sigma={noise}: {row['ratio_to_kmeans']:.2f}x KMeans")
    real = bundled(repeats)
    breakdown = {}
    for noise in (0.3, 1.0):
        X, _, _ = make_mixture(big, 10, 2, noise=noise, random_state=0)
        breakdown[str(noise)] = where_passes_go(X, 2)
    thread = threads(big, repeats)
    print(
        f"threads: E step x{thread['e_step_speedup']:.2f}, fit x{thread['fit_speedup']:.2f}, "
        f"identical {thread['identical_to_serial']}"
    )
    single = float32(big, 2 if quick else 3, repeats)
    for r in single:
        print(
            f"float32 sigma={r['noise']}: time x{r['time_ratio_32_to_64']:.2f}, "
            f"distance {r['distance_float32']:.3g} vs {r['distance_float64']:.3g}"
        )
    payload = {
        "mode": "quick" if quick else "full",
        "repeats": repeats,
        "grid": grid,
        "wide": wide,
        "small": small,
        "bundled": real,
        "breakdown": breakdown,
        "threads": thread,
        "float32": single,
        **run_conditions(load_before),
    }
    save("engine", payload, **({"directory": out} if out else {}))
    write_page(payload, out)
    return payload


def write_page(p, out=None):
    docs = Path(out) if out else ROOT / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Fit time and accuracy of AttentionClustering",
        "",
        "This page is written by `benchmarks/engine.py` (results in",
        "`benchmarks/results/engine.json`); rerun it to measure your machine:",
        "",
        "```console",
        "python benchmarks/engine.py",
        "```",
        "",
        "Times are medians of interleaved rounds in one process, after Numba's",
        f"compile, on a shared machine (2 cores): at least {p['repeats']} rounds, and up to",
        f"{MAX_ROUNDS} for fits of a few milliseconds, about {_ROUNDS_SECONDS:.0f} s of rounds in all.",
        run_facts(p).lstrip(),
        "The estimator runs with its",
        'defaults (`solver="auto"`, the exact path with the EM refinement, and',
        "`n_threads=None`, every usable core). KMeans is `KMeans(n_init=1)` at its",
        "default threads and on one thread. One pass is `X @ W`, W of shape",
        "(d, K), on one BLAS thread: the time to read X once. Distances are the",
        "squared distances to the centroids ({func}`~attention_cluster.metrics.centroid_distance`),",
        "median over seeds, against the floor: the class means of the true labels,",
        "normalised, on the same sample.",
        "",
        "## Paper's mixture, d = 10, K = 2",
        "",
        "| n | sigma | default | KMeans | x KMeans | x KMeans, 1 thread | x the faster (target) | one pass | passes | distance / floor | efficient limit | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in p["grid"]:
        s = r["seconds"]
        # Judged against the faster of KMeans' two configurations.
        faster = max(r["ratio_to_kmeans"], r["ratio_to_kmeans_1thread"])
        ok = faster <= r["target_ratio"] and r["distance_over_floor"] <= 2.0
        if r["n"] >= 1_000_000:
            ok = ok and r["one_pass_equivalents"] <= 15
        lines.append(
            f"| {r['n']:.0e} | {r['noise']} | {s['default'] * 1e3:.0f} ms | {s['kmeans'] * 1e3:.0f} ms | "
            f"{r['ratio_to_kmeans']:.2f} | {r['ratio_to_kmeans_1thread']:.2f} | "
            f"{faster:.2f} (<= {r['target_ratio']}) | "
            f"{s['one_pass'] * 1e3:.1f} ms | {r['one_pass_equivalents']:.1f} | "
            f"{r['distance_over_floor']:.2f} | {_limit(r)} | {verdict(ok)} |"
        )
    lines += [
        "",
        "Targets: at most 0.5x KMeans at n = 1e5 and 0.2x at n = 1e6 (against the faster",
        "of its two configurations: on this shared machine its default threads can be",
        "the slower), at most 15",
        "one-pass equivalents at n = 1e6, distance within 2x of the floor.",
        "At sigma = 1 the clusters overlap: the model's maximum-likelihood",
        "centroids, which the EM refinement estimates, lose information against",
        "the class means of the true labels, which no unsupervised method sees",
        "({doc}`solvers` compares `GaussianMixture`'s with the same floor).",
        "*efficient limit* is how much: the expected distance of an efficient",
        "estimator over the floor's, from the mixture's Fisher information",
        "({func}`~attention_cluster.metrics.information_limit`, math.md section 7,",
        '"The information limit"). No estimator that does not see the labels',
        "beats it in expectation; a median over 10 seeds falls on either side.",
        "",
        "## Where the time goes",
        "",
        "One default fit at the largest n, every pass of the pass layer logged",
        "(count and ms of wall time, by the pass layer's method; passes over",
        "subsamples added up). The EM refinement",
        "runs on subsamples first (EM on the smallest, Newton's steps to each",
        "larger), then takes Newton's steps on all rows with the last",
        "subsample's Jacobian of the EM map (math.md section 7), so that",
        "few E steps read all rows; the E step's kernel reads each block of",
        "rows once, transposed, with a vectorised exponential.",
        "",
    ]
    breakdown = p.get("breakdown", {})
    names = [k for b in breakdown.values() for k, _, _ in b["passes"] if k != "subsample passes"]
    names = list(dict.fromkeys(names)) + ["subsample passes"]
    lines += [
        "| sigma | fit | " + " | ".join(name.replace("_", " ") for name in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for noise, b in breakdown.items():
        cells = []
        passes = {name: (count, ms) for name, count, ms in b["passes"]}
        for name in names:
            count, ms = passes.get(name, (0, 0.0))
            cells.append(f"{count} x, {ms:.0f} ms" if count else "-")
        lines.append(f"| {noise} | {b['fit_ms']:.0f} ms | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Wider data, small data",
        "",
        "| n | d | K | sigma | default | KMeans | x KMeans (target) | distance / floor | efficient limit | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    w = p["wide"]
    lines.append(
        f"| {w['n']:.0e} | {w['d']} | {w['K']} | {w['noise']} | {w['seconds']['default'] * 1e3:.0f} ms | "
        f"{w['seconds']['kmeans'] * 1e3:.0f} ms | {w['ratio_to_kmeans']:.2f} (<= 1) | "
        f"{w['distance_over_floor']:.2f} | {_limit(w)} | "
        f"{verdict(w['ratio_to_kmeans'] <= 1 and w['distance_over_floor'] <= 2)} |"
    )
    for r in p["small"]:
        lines.append(
            f"| {r['n']:.0e} | {r['d']} | {r['K']} | {r['noise']} | {r['seconds']['default'] * 1e3:.1f} ms | "
            f"{r['seconds']['kmeans'] * 1e3:.1f} ms | {r['ratio_to_kmeans']:.2f} (<= 1) | | | "
            f"{verdict(r['ratio_to_kmeans'] <= 1)} |"
        )
    lines += [
        "",
        "## scikit-learn's bundled data sets",
        "",
        "The default fit with `n_clusters` the number of classes, raw and after",
        "`StandardScaler`, against `KMeans(n_init=1)`; ConvergenceWarnings of the",
        "default fit counted (the centring notice of raw data is not one).",
        "",
        "| data | view | K | default | KMeans | x KMeans | ConvergenceWarnings |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in p.get("bundled", []):
        s = r["seconds"]
        lines.append(
            f"| {r['data']} | {r['view']} | {r['K']} | {s['default'] * 1e3:.1f} ms | "
            f"{s['kmeans'] * 1e3:.1f} ms | {r['ratio_to_kmeans']:.2f} | {r['convergence_warnings']} |"
        )
    t = p["threads"]
    s = t["seconds"]
    lines += [
        "",
        "## Threads",
        "",
        f"At n = {t['n']:.0e} (d = 10, K = 2, sigma = 1), one E-step pass takes",
        f"{s['e_step_1thread'] * 1e3:.0f} ms on one thread and {s['e_step_2threads'] * 1e3:.0f} ms on two",
        f"(x{t['e_step_speedup']:.2f}); the whole fit {s['fit_1thread'] * 1e3:.0f} ms and",
        f"{s['fit_2threads'] * 1e3:.0f} ms (x{t['fit_speedup']:.2f}). One pass `X @ W` takes",
        f"{s['one_pass'] * 1e3:.1f} ms. The machine's two cores are shared with other jobs, which",
        "hides part of the speed-up a dedicated machine would show.",
        "",
        "Fits equal the serial fit bit for bit: "
        + ", ".join(f"{k.replace('_', ' ')}: {verdict(v)}" for k, v in t["identical_to_serial"])
        + " (the chunks, and the order in which their sums are added, do not",
        "depend on the number of threads).",
        "",
        "## float32 input",
        "",
        "| n | sigma | float64 | float32 | time ratio | distance float64 | distance float32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in p["float32"]:
        lines.append(
            f"| {r['n']:.0e} | {r['noise']} | {r['seconds']['float64'] * 1e3:.0f} ms | "
            f"{r['seconds']['float32'] * 1e3:.0f} ms | {r['time_ratio_32_to_64']:.2f} | "
            f"{r['distance_float64']:.3g} | {r['distance_float32']:.3g} |"
        )
    lines += [
        "",
        "float32 rows are read as float32 (half the bytes per pass); at this",
        "width the moments and the E steps accumulate in float64 and the labels'",
        "scores are float32 products (the user guide's *Precision* says which",
        "passes multiply in float32).",
        "",
        "## Compile time",
        "",
        "Every time above is measured after Numba's compile. The compile a first",
        "fit pays with an empty cache, on both sides of the size where the passes",
        "switch from NumPy's forms of the kernels to Numba's, is the section",
        '"Cold start" below (`benchmarks/cold_start.py`).',
        "",
        "## Other pages",
        "",
        "`benchmarks/fit_time.py` (solvers against KMeans at n = 1e5) and",
        "`benchmarks/psgd_accuracy.py` (PSGD from random starts) write",
        "`benchmarks/results/fit_time.json` and `psgd_accuracy.json`; the solvers",
        "against n are in {doc}`solvers`, the defaults across sigma, d, K and n in",
        "{doc}`defaults`, the comparison with other methods in {doc}`benchmarks`.",
        "",
    ]
    page = docs / "performance.md"
    text = "\n".join(lines)
    # The sections of other scripts (peers, cold start) stay on the page.
    for block in marked_sections(page.read_text() if page.exists() else ""):
        text = before_other_pages(text, block)
    page.write_text(text)


if __name__ == "__main__":
    quick_cli(__doc__, main)
