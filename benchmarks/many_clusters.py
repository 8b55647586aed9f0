"""More clusters than features: make_blobs with K > d, against KMeans.

For each (d, K) of the panel (K/d = 5/2, 10/5, 20/10, 50/10) and 10 seeds,
``sklearn.datasets.make_blobs(3000, n_features=d, centers=K,
random_state=seed)`` is fitted by ``AttentionClustering(K,
random_state=seed)`` at its defaults (for K >= d: the seeded start carried
by the free-norm mixture, math.md section 7), ``KMeans(K, n_init=1)`` and
``KMeans(K)`` (scikit-learn's default ``n_init``), each with
``random_state=seed``, in one process, one after the other. The page gives
the median ARI against the blobs' labels over the seeds, the median fit
time (one fit per seed: indications, the methods are not interleaved), and
every distinct warning AttentionClustering raised with how many seeds
raised it. A second table is the BIC over K = 1..8 of standardised copies of
one variable (``z 1^T + 0.1 eps``, d = 5, n = 200): the curve must have no
wall at K = d. A third gives the cells of overlapping clusters where the EM
refinement crawls (``CRAWL_CELLS``), timed against ``KMeans(n_init=1)`` in
interleaved rounds. The load average (``os.getloadavg``) is written on the page
before and after the run.

Writes ``results/many_clusters.json`` and ``docs/many_clusters.md``.

    python benchmarks/many_clusters.py [--quick] [--out DIR]
"""

import contextlib
import io
import os
import re
import time
import warnings
from pathlib import Path

import numpy as np
from _common import ROOT, load_numbers, quick_cli, run_conditions, run_facts, save, verdict
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture

PANEL = ((2, 5), (5, 10), (10, 20), (10, 50))
# Overlapping clusters where the EM refinement crawls (found by a sweep of
# make_mixture cells against KMeans): (n, d, K, noise, weights), random unit
# centroids where K > d (no orthogonal ones), orthogonal ones otherwise.
_GEOMETRIC = tuple(float(w) for w in 0.5 ** np.arange(8) / np.sum(0.5 ** np.arange(8)))
CRAWL_CELLS = (
    (20000, 2, 16, 0.1, None),
    (20000, 2, 32, 0.1, None),
    (20000, 3, 8, 0.6, None),
    (20000, 30, 31, 0.1, None),
    (20000, 3, 3, 1.0, (0.9, 0.05, 0.05)),
    (100000, 10, 8, 0.3, _GEOMETRIC),
)
CRAWL_ROUNDS = 7
# The EM passes after which a run's climb is read (_em_runs).
LATE_PASS = 10
N_SAMPLES = 3000
SEEDS = tuple(range(10))
BIC_KS = tuple(range(1, 9))


def _fit(make):
    start = time.perf_counter()
    model = make()
    return time.perf_counter() - start, model


def cell(d, K, seed):
    """One seed of one cell: ARI and time of each method, our warnings."""
    X, y = make_blobs(N_SAMPLES, n_features=d, centers=K, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t_ours, ours = _fit(lambda: AttentionClustering(K, random_state=seed).fit(X))
    t_one, one = _fit(lambda: KMeans(K, n_init=1, random_state=seed).fit(X))
    t_default, default = _fit(lambda: KMeans(K, random_state=seed).fit(X))
    return dict(
        seed=seed,
        ari=dict(
            ours=adjusted_rand_score(y, ours.labels_),
            kmeans_1=adjusted_rand_score(y, one.labels_),
            kmeans_default=adjusted_rand_score(y, default.labels_),
        ),
        time=dict(ours=t_ours, kmeans_1=t_one, kmeans_default=t_default),
        warnings=[f"{w.category.__name__}: {w.message}" for w in caught],
    )


def _em_runs(fit):
    """The EM refinement's runs over all rows in ``fit()``, from its verbose
    log: every fit's, a ``center="auto"`` refit's and the fit it replaced.

    For each, its passes over all rows and what the passes after the
    ``LATE_PASS``-th bought: the rise of the mean log-likelihood from the
    last iterate logged at or before that pass to the last one, and the
    largest rise between two consecutive logged iterates after it (nats per
    row). A run that creeps has the two small and alike; one whose fit
    changes late has most of its late rise in one step.
    """
    log = io.StringIO()
    with contextlib.redirect_stdout(log), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit()
    runs, iterates = [], []
    for line in log.getvalue().splitlines():
        step = re.search(r"EM on all rows, E step (\d+): mean log-likelihood (\S+)", line)
        if step:
            iterates.append((int(step.group(1)), float(step.group(2))))
        done = re.search(r"EM refinement: (\d+) passes over all rows", line)
        if done:
            passes = [k for k, _ in iterates]
            ll = np.array([v for _, v in iterates])
            early = [i for i, k in enumerate(passes) if k <= LATE_PASS]
            base = early[-1] if early else 0
            rises = np.diff(ll[base:])
            runs.append(
                dict(
                    passes=int(done.group(1)),
                    late_rise=float(ll[-1] - ll[base]) if len(ll) else 0.0,
                    largest_late_step=float(rises.max()) if rises.size else 0.0,
                    # the pass whose iterate ends that step
                    largest_late_step_pass=passes[base + 1 + int(np.argmax(rises))]
                    if rises.size
                    else None,
                )
            )
            iterates = []
    return runs


def crawl_cell(n, d, K, noise, weights, rounds):
    """Interleaved rounds (after one fit of each) of the default fit and KMeans(n_init=1), seed 0."""
    kind = "random" if K > d else "orthogonal"
    X, y, _ = make_mixture(n, d, K, noise=noise, weights=weights, centroids=kind, random_state=0)
    methods = {
        "ours": lambda: AttentionClustering(K, random_state=0),
        "kmeans_1": lambda: KMeans(K, n_init=1, random_state=0),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = {name: make().fit(X) for name, make in methods.items()}
        times = {name: [] for name in methods}
        for _ in range(rounds):
            for name, make in methods.items():
                t, models[name] = _fit(lambda make=make: make().fit(X))
                times[name].append(t)
    return dict(
        n=n,
        d=d,
        K=K,
        noise=noise,
        centroids=kind,
        weights=None if weights is None else list(weights),
        time={name: float(np.median(t)) for name, t in times.items()},
        ari={name: adjusted_rand_score(y, m.labels_) for name, m in models.items()},
        em=_em_runs(lambda: AttentionClustering(K, random_state=0, verbose=1).fit(X)),
        kmeans_iterations=int(models["kmeans_1"].n_iter_),
    )


def bic_curve():
    """BIC over K on standardised copies of one variable (d = 5)."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((200, 1))
    X = z @ np.ones((1, 5)) + 0.1 * rng.standard_normal((200, 5))
    X = (X - X.mean(0)) / X.std(0)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in BIC_KS:
            m = AttentionClustering(k, random_state=0).fit(X)
            rows.append(dict(k=k, bic=m.bic(X), scale=m.scale_, temperature=m.temperature_))
    return rows


def main(quick=False, out=None):
    load_before = os.getloadavg()
    started = time.perf_counter()
    seeds = SEEDS[:2] if quick else SEEDS
    cells = []
    for d, K in PANEL:
        runs = [cell(d, K, seed) for seed in seeds]
        med = {m: float(np.median([r["ari"][m] for r in runs])) for m in runs[0]["ari"]}
        tmed = {m: float(np.median([r["time"][m] for r in runs])) for m in runs[0]["time"]}
        counts = {}
        for r in runs:
            for w in set(r["warnings"]):
                counts[w] = counts.get(w, 0) + 1
        cells.append(dict(d=d, K=K, median_ari=med, median_time=tmed, warnings=counts, runs=runs))
    curve = bic_curve()
    # Quick mode: one round of the cell that takes least time.
    cells_run = CRAWL_CELLS[2:3] if quick else CRAWL_CELLS
    crawl = [crawl_cell(*c, rounds=1 if quick else CRAWL_ROUNDS) for c in cells_run]
    payload = dict(
        seeds=list(seeds),
        n_samples=N_SAMPLES,
        cells=cells,
        crawl=crawl,
        bic_curve=curve,
        **run_conditions(load_before),
        minutes=(time.perf_counter() - started) / 60,
        quick=quick,
    )
    save("many_clusters", payload, **({"directory": Path(out)} if out else {}))
    docs = Path(out) if out else ROOT / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "many_clusters.md").write_text(page(payload))
    return payload


# A rise of the mean log-likelihood between two logged EM iterates above
# this (nats per row) is read as a jump, not a creep (_crawl_reading).
JUMP = 0.01


def _crawl_reading(crawl):
    """The crawl table's reading, from its numbers: how the late passes rose,
    and what the fits cost and bought against KMeans(n_init=1)."""
    late = [(c, run) for c in crawl for run in c["em"] if run["passes"] > LATE_PASS]
    jumps = [(c, run) for c, run in late if run["largest_late_step"] > JUMP]
    ratios = [c["time"]["ours"] / c["time"]["kmeans_1"] for c in crawl]
    ahead = sum(c["ari"]["ours"] > c["ari"]["kmeans_1"] for c in crawl)
    text = (
        f"{len(late) - len(jumps)} of the {len(late)} fits that ran more than {LATE_PASS} "
        f"passes rose by at most {JUMP:g} nats per row between two logged iterates after "
        "them: where the clusters overlap the likelihood creeps up for tens to hundreds of "
        "steps, and the refinement's stopping rule (math.md section 7) waits for those steps' "
        "gain to fall below its floor; SQUAREM's extrapolation, its step length bounded and "
        "grown along the climb (math.md section 7), shortens it but does not remove it."
    )
    if jumps:
        named = "; ".join(
            f"n = {c['n']:.0e}, d = {c['d']}, K = {c['K']}: {run['largest_late_step']:.2g} of "
            f"{run['late_rise']:.2g} nats per row at pass {run['largest_late_step_pass']} of "
            f"{run['passes']}"
            for c, run in jumps
        )
        text += (
            f" In {len(jumps)} most of the late rise came in one step ({named}), which the "
            "creeping steps before it did not announce: there the late passes bought more than "
            "digits of the fit."
        )
    text += (
        f" The fit takes {min(ratios):.1f} to {max(ratios):.1f} times KMeans(n_init=1)'s time, "
        f"at a higher ARI in {ahead} of the {len(crawl)} cells."
    )
    return text


def page(p):
    lines = [
        "# More clusters than features",
        "",
        "<!-- Generated by benchmarks/many_clusters.py from "
        "benchmarks/results/many_clusters.json; do not edit. -->",
        "",
        f"``make_blobs({p['n_samples']}, n_features=d, centers=K, random_state=seed)`` for "
        f"{len(p['seeds'])} seeds; medians over the seeds. AttentionClustering at its defaults "
        "(for K >= d the seeded start, k-means++ on a subsample and Lloyd's iterations there, "
        "carried by the mixture with one norm per centroid, math.md section 7) against "
        "``KMeans(n_init=1)`` and ``KMeans()`` (scikit-learn's default ``n_init``). Times are "
        "one fit per seed, not interleaved: indications only (the last column is the ratio "
        "of the median times).",
        "",
        f"Load average (1, 5, 15 min) before: {load_numbers(p['load_before'])}; "
        f"after: {load_numbers(p['load_after'])}; "
        f"{p['minutes']:.1f} min"
        + (" (quick mode)" if p["quick"] else "")
        + "."
        + run_facts(p, load=False),
        "",
        "| d | K | ARI ours | ARI KMeans(n_init=1) | ARI KMeans() | target: ours >= both | "
        "time ours | time KMeans(n_init=1) | time KMeans() | time ours / KMeans(n_init=1) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in p["cells"]:
        a, t = c["median_ari"], c["median_time"]
        ok = a["ours"] >= max(a["kmeans_1"], a["kmeans_default"]) - 1e-12
        lines.append(
            f"| {c['d']} | {c['K']} | {a['ours']:.3f} | {a['kmeans_1']:.3f} | "
            f"{a['kmeans_default']:.3f} | {verdict(ok)} | {1e3 * t['ours']:.0f} ms | "
            f"{1e3 * t['kmeans_1']:.0f} ms | {1e3 * t['kmeans_default']:.0f} ms | "
            f"{t['ours'] / t['kmeans_1']:.1f} |"
        )
    lines += ["", "## Warnings of AttentionClustering", ""]
    any_warning = False
    for c in p["cells"]:
        for w, count in sorted(c["warnings"].items()):
            any_warning = True
            lines.append(f"- d = {c['d']}, K = {c['K']}, {count} of {len(p['seeds'])} seeds: {w}")
    if not any_warning:
        lines.append("None.")
    lines += [
        "",
        "## Where the EM refinement crawls",
        "",
        "``datasets.make_mixture(n, d, K, noise=noise, weights=weights, centroids=centroids, "
        "random_state=0)`` "
        "(random unit centroids where K > d, orthogonal ones otherwise): clusters that "
        "overlap, most of them with more clusters than features. AttentionClustering at its "
        "defaults against ``KMeans(n_init=1)``, both with ``random_state=0``, in interleaved "
        "rounds after one fit of each (medians). *EM passes* are the EM refinement's E steps "
        "on all rows, from the verbose log, for each fit that a ``fit`` call makes: two "
        'numbers where ``center="auto"`` found that the uncentred fit had lost a cluster and '
        "fitted the centred rows too (the uncentred fit's passes first, then the centred "
        "fit's; the less likely fit is discarded, its passes spent). *Late rise* is what a "
        f"fit's passes after the {LATE_PASS}th bought, from the same log: the rise of the mean "
        f"log-likelihood (nats per row) from the iterate logged at pass {LATE_PASS} or before "
        "to the last, and in brackets the largest rise between two consecutive logged "
        "iterates after it; a dash for a fit that stopped by then.",
        "",
        "| n | d | K | noise | weights | time ours | time KMeans(n_init=1) | "
        "time ours / KMeans(n_init=1) | EM passes (each fit) | late rise (largest step), "
        "each fit | KMeans' iterations | ARI ours | ARI KMeans |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    crawl = p.get("crawl", [])
    for c in crawl:
        t, a = c["time"], c["ari"]
        weights = (
            "equal"
            if c["weights"] is None
            else "geometric, ratio 1/2"
            if len(c["weights"]) > 3
            else ", ".join(f"{w:g}" for w in c["weights"])
        )
        passes = " + ".join(str(run["passes"]) for run in c["em"])
        late = " + ".join(
            f"{run['late_rise']:.2g} ({run['largest_late_step']:.2g})"
            if run["passes"] > LATE_PASS
            else "-"
            for run in c["em"]
        )
        lines.append(
            f"| {c['n']:.0e} | {c['d']} | {c['K']} | {c['noise']} | {weights} | {t['ours']:.2f} s | "
            f"{t['kmeans_1']:.3f} s | {t['ours'] / t['kmeans_1']:.1f} | {passes} | {late} | "
            f"{c['kmeans_iterations']} | {a['ours']:.3f} | {a['kmeans_1']:.3f} |"
        )
    if crawl:
        lines += ["", _crawl_reading(crawl)]
    lines += [
        "",
        "## BIC over K, one variable in d = 5 standardised copies",
        "",
        "``z 1^T + 0.1 eps`` (n = 200, d = 5), standardised; ``AttentionClustering(k, "
        "random_state=0)``. Before the noise level at K >= d was bounded by the smallest "
        "eigenvalue, the fit at K >= d took the whole spectrum for noise (scale about 1e-6).",
        "",
        "| K | BIC | scale_ | temperature_ |",
        "|---|---|---|---|",
    ]
    for r in p["bic_curve"]:
        lines.append(f"| {r['k']} | {r['bic']:.1f} | {r['scale']:.4g} | {r['temperature']:.4g} |")
    bic = {r["k"]: r["bic"] for r in p["bic_curve"]}
    if bic[5] < bic[4]:
        lines += [
            "",
            f"The curve has no wall at K = d = 5 (the scale stays that of the data), but it drops "
            f"there ({bic[4]:.0f} to {bic[5]:.0f}): below d the start is spectral and its heads "
            "are directions, so two centres cannot share the variable's one direction; from d on "
            "the seeded start places K points along it, which the mixture with one norm per "
            "centroid carries. The BIC then chooses the largest K tried: a line of Gaussian "
            "points is no mixture of spherical clusters.",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    quick_cli(__doc__, main)
