"""The two solvers against n: distance to the centroids, the statistical floor, time.

For the paper's mixture (d=10, K=2, sigma in {0.3, 1}) and n from 1e3 to
1e6, fits AttentionClustering with solver="psgd", solver="full" (whose
default refine="auto" adds the EM refinement, math.md section 7) and
solver="full", refine=None (the exact minimiser of the attention risk alone)
from a random start (default settings otherwise) and compares their distance
to the centroids (math.md section 5) with

- the statistical floor: the distance reached by the true-label class means
  normalised to the sphere, on the same sample;
- GaussianMixture(covariance_type="spherical")'s means, normalised.

Warm fit times (default settings, the three configurations and
KMeans(n_init=1)) are measured side by side in one process after Numba has compiled. Also
K=5, d=50, sigma=0.5 at n=1e5. Writes benchmarks/results/solvers.json,
docs/solvers.md and docs/_static/benchmarks/solvers.png.

    python benchmarks/solvers.py [--quick]
"""

from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from _common import ROOT, quick_cli, save, side_by_side
from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance

# Configurations: name -> AttentionClustering keyword arguments.
CONFIGS = {
    "psgd": {"solver": "psgd"},
    "full": {"solver": "full"},
    "attention": {"solver": "full", "refine": None},
}


def unit_rows(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def floor_distance(X, y, C):
    """Distance of the normalised true-label class means: the statistical floor."""
    means = np.array([X[y == k].mean(axis=0) for k in range(len(C))])
    return centroid_distance(unit_rows(means), C)


def accuracy(n, d, K, noise, seeds, with_gmm):
    out = {s: [] for s in (*CONFIGS, "floor", "gmm")}
    for seed in range(seeds):
        X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed)
        for name, kwargs in CONFIGS.items():
            model = AttentionClustering(K, init="random", random_state=seed, **kwargs).fit(X)
            out[name].append(centroid_distance(model.cluster_centers_, C))
        out["floor"].append(floor_distance(X, y, C))
        if with_gmm:
            gmm = GaussianMixture(K, covariance_type="spherical", random_state=seed).fit(X)
            out["gmm"].append(centroid_distance(unit_rows(gmm.means_), C))
    return {k: float(np.median(v)) for k, v in out.items() if v} | {
        "max_" + s: float(np.max(out[s])) for s in CONFIGS
    } | {"seeds": seeds}


def timing(n, d, K, noise, repeats):
    X, _, _ = make_mixture(n, d, K, noise=noise, random_state=0)
    candidates = {
        name: (lambda kw=kwargs: AttentionClustering(K, random_state=0, **kw).fit(X))
        for name, kwargs in CONFIGS.items()
    }
    candidates["kmeans"] = lambda: KMeans(K, n_init=1, random_state=0).fit(X)
    candidates["kmeans_1thread"] = lambda: _single_threaded(KMeans(K, n_init=1, random_state=0).fit, X)
    return side_by_side(candidates, repeats)


def _single_threaded(fn, *args):
    """``fn(*args)`` with KMeans' OpenMP (and BLAS) limited to one thread, as
    AttentionClustering's kernels run: on a shared machine KMeans' default
    threads can be the slower (a thread waits for a descheduled one)."""
    with threadpool_limits(limits=1):
        return fn(*args)


def main(quick=False, out=None):
    sizes = [1000, 3000] if quick else [1000, 10_000, 100_000, 1_000_000]
    rows = []
    for noise in (0.3, 1.0):
        for n in sizes:
            seeds = 2 if quick else (10 if n <= 100_000 else 3)
            row = {"noise": noise, "n": n, "d": 10, "K": 2}
            row.update(accuracy(n, 10, 2, noise, seeds, with_gmm=n <= 100_000))
            row["seconds"] = timing(n, 10, 2, noise, 2 if quick else 5)
            rows.append(row)
            print(
                f"sigma={noise} n={n:>8d}: psgd {row['psgd']:.2e}  full {row['full']:.2e}  "
                f"attention {row['attention']:.2e}  "
                f"floor {row['floor']:.2e}  gmm {row.get('gmm', float('nan')):.2e} | "
                + "  ".join(f"{k} {v * 1e3:.0f} ms" for k, v in row["seconds"].items()),
                flush=True,
            )
    big = {"noise": 0.5, "n": 3000 if quick else 100_000, "d": 50, "K": 5}
    big.update(accuracy(big["n"], 50, 5, 0.5, 2 if quick else 10, with_gmm=True))
    print(
        f"K=5 d=50 sigma=0.5: psgd {big['psgd']:.2e}  full {big['full']:.2e}  "
        f"attention {big['attention']:.2e}  floor {big['floor']:.2e}"
    )
    payload = {"quick": quick, "rows": rows, "k5": big}
    save("solvers", payload, **({"directory": out} if out else {}))
    write_page(payload, out)
    return payload


def _verdict(ok):
    return "yes" if ok else "**no**"


def write_page(payload, out=None):
    docs = Path(out) if out else ROOT / "docs"
    figures = docs / "_static" / "benchmarks"
    figures.mkdir(parents=True, exist_ok=True)
    rows, big = payload["rows"], payload["k5"]
    plot(rows, figures / "solvers.png")
    lines = [
        "# The two solvers",
        "",
        "<!-- Generated by benchmarks/solvers.py; do not edit. -->",
        "",
        "Distance to the centroids (median over seeds, random start, default settings "
        "otherwise) of `solver=\"psgd\"`, of `solver=\"full\"` (whose default "
        "`refine=\"auto\"` follows the attention solver with the EM refinement of "
        "math.md section 7) and of `solver=\"full\", refine=None` (column *attention*: "
        "the exact minimiser of the attention risk alone), against the statistical "
        "floor (true-label class means normalised to the sphere, same sample) and "
        "`GaussianMixture(covariance_type=\"spherical\")`'s normalised means; warm fit "
        "times at default settings, side by side with `KMeans(n_init=1)` in one process, "
        "at its default threads and on one thread (AttentionClustering's kernels are "
        "single-threaded). "
        f"Produced by `python benchmarks/solvers.py{' --quick' if payload['quick'] else ''}`.",
        "",
        "![distance and time against n](_static/benchmarks/solvers.png)",
        "",
        "| sigma | n | seeds | psgd | attention | full | floor | GMM spherical | full / floor "
        "| psgd (ms) | attention (ms) | full (ms) | KMeans (ms) | KMeans, 1 thread (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["seconds"]
        gmm = f"{r['gmm']:.2e}" if "gmm" in r else "-"
        lines.append(
            f"| {r['noise']} | {r['n']:.0e} | {r['seeds']} | {r['psgd']:.2e} | {r['attention']:.2e} | "
            f"{r['full']:.2e} | {r['floor']:.2e} | {gmm} | {r['full'] / r['floor']:.2f} | "
            f"{t['psgd'] * 1e3:.0f} | {t['attention'] * 1e3:.0f} | {t['full'] * 1e3:.0f} | "
            f"{t['kmeans'] * 1e3:.0f} | {t['kmeans_1thread'] * 1e3:.0f} |"
        )
    lines += [
        "",
        f"K = 5, d = 50, sigma = 0.5, n = {big['n']:.0e} ({big['seeds']} seeds): psgd "
        f"{big['psgd']:.2e}, attention {big['attention']:.2e}, full {big['full']:.2e}, "
        f"floor {big['floor']:.2e}, GMM spherical {big['gmm']:.2e} "
        f"(full / floor = {big['full'] / big['floor']:.2f}, attention / floor = "
        f"{big['attention'] / big['floor']:.2f}).",
        "",
        "## Against the targets",
        "",
        "`full` is `solver=\"full\"` at its defaults (with the EM refinement).",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    by = {(r["noise"], r["n"]): r for r in rows}
    n5 = 100_000 if (0.3, 100_000) in by else max(r["n"] for r in rows)
    a, b = by[(0.3, n5)], by[(1.0, n5)]
    checks = [
        (f"sigma=0.3, n={n5:.0e}: full <= 1e-3", f"{a['full']:.2e}", a["full"] <= 1e-3),
        (f"sigma=1, n={n5:.0e}: full <= 2e-2", f"{b['full']:.2e}", b["full"] <= 2e-2),
        ("sigma=0.3: full within 2x of the floor", f"{a['full'] / a['floor']:.2f}x", a["full"] <= 2 * a["floor"]),
        ("sigma=1: full no worse than GMM spherical", f"{b['full']:.2e} vs {b.get('gmm', float('nan')):.2e}",
         b["full"] <= b.get("gmm", -1.0)),
        ("K=5, d=50, sigma=0.5: full within 2x of the floor", f"{big['full'] / big['floor']:.2f}x",
         big["full"] <= 2 * big["floor"]),
    ]
    for noise, r in ((0.3, a), (1.0, b)):
        ratio = r["seconds"]["full"] / r["seconds"]["kmeans"]
        checks.append((f"sigma={noise}, n={n5:.0e}: full's warm fit time <= KMeans(n_init=1)",
                       f"{ratio:.2f}x KMeans", ratio <= 1.0))
    for noise, r in ((0.3, a), (1.0, b)):
        ratio = r["seconds"]["full"] / r["seconds"]["kmeans_1thread"]
        checks.append((f"sigma={noise}, n={n5:.0e}: the same against KMeans on one thread (not a target)",
                       f"{ratio:.2f}x KMeans, 1 thread", ratio <= 1.0))
    if (0.3, 1_000_000) in by:
        c = by[(0.3, 1_000_000)]["seconds"]
        fastest = min(c["psgd"], c["full"])
        checks.append(("n=1e6: faster solver <= half of KMeans", f"{fastest / c['kmeans']:.2f}x KMeans",
                       fastest <= 0.5 * c["kmeans"]))
    lines += [f"| {t} | {m} | {_verdict(ok)} |" for t, m, ok in checks]
    lines += [
        "",
        "Why the attention heads alone stay above the floor at high noise: the exact "
        "solver minimises the attention risk plus the orthogonality regulariser, and "
        "that minimiser is a different estimator from the class means. To leading "
        "order in 1/L the risk sees the data only through their second moment M, so "
        "the heads' span is the principal subspace of M, whose error out of the "
        "centroids' span is about (1 + K sigma^2) times that of the class means: 3x at "
        "sigma = 1, K = 2, and 2.25x at sigma = 0.5, K = 5 (column *attention*). No "
        "solver of that objective can remove it. The EM refinement (default after the "
        "exact solver) maximises the mixture's likelihood from the attention heads "
        "instead: the maximum-likelihood centroids with equal norms, which use the "
        "model's constraint that GaussianMixture's free means do not.",
        "",
    ]
    behind_gmm = [r for r in rows if "gmm" in r and r["full"] > r["gmm"]]
    behind_attention = [r for r in rows if r["full"] > r["attention"]]
    if behind_gmm or behind_attention:
        lines += ["Where the default loses (same table):", ""]
        lines += [
            f"- sigma = {r['noise']}, n = {r['n']:.0e}: GMM spherical {r['gmm']:.2e} beats full "
            f"{r['full']:.2e}." for r in behind_gmm
        ]
        lines += [
            f"- sigma = {r['noise']}, n = {r['n']:.0e}: the attention heads alone "
            f"({r['attention']:.2e}) beat the refined ones ({r['full']:.2e})." for r in behind_attention
        ]
        lines.append("")
    (docs / "solvers.md").write_text("\n".join(lines))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for noise, style in ((0.3, "-"), (1.0, "--")):
        rs = [r for r in rows if r["noise"] == noise]
        ns = [r["n"] for r in rs]
        for key, color in (("psgd", "C0"), ("attention", "C4"), ("full", "C1"), ("floor", "k"), ("gmm", "C2")):
            pts = [(r["n"], r[key]) for r in rs if key in r]
            if pts:
                axes[0].loglog(*zip(*pts), style, color=color, marker="o", label=f"{key}, sigma={noise}")
        for key, color in (("psgd", "C0"), ("attention", "C4"), ("full", "C1"), ("kmeans", "C3")):
            axes[1].loglog(ns, [r["seconds"][key] for r in rs], style, color=color, marker="o",
                           label=f"{key}, sigma={noise}")
    axes[0].set(xlabel="n", ylabel="distance to the centroids", title="Accuracy")
    axes[1].set(xlabel="n", ylabel="warm fit time (s)", title="Time")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    quick_cli(__doc__, main)
