"""
More heads than clusters: three heads on two clusters
=====================================================

The authors' answers report a run with two clusters and three heads: at low
noise one head recovers a centroid while the other two align with each
other and recover the second centroid only partially; as the noise grows
the heads struggle to align with the centroids (bad local minima); and
redundant heads converging to the same parameters would be a diagnostic of
too many heads.

This script runs PSGD with three heads on the two-cluster mixture from
random starts, without regulariser and with the pairwise one (rho = 0.1;
the answers do not say which), at sigma in {0.1, 0.3, 1}, 10 runs each.
Each head keeps the paper's per-head factor ``2 lambda / L`` (two
clusters). Per run it reports the largest ``|<mu_j, mu_k>|`` between two
heads (1 when two heads merge), the alignment ``|<mu_h, mu*_c>|`` of the
best-aligned head with each centroid, and the distance of the best two
heads to the centroids. Population PGD from the first two starts shows
the exact risk's minimisers.

Settings as in Figure 2b (``d = 10``, ``n = 20000``, ``L = 100``, one
sequence per step, constant step ``0.06 / (lambda K E||X||^2)`` with
``K = 2``, 10000 iterations, lambda the unbiased temperature).
"""

# %%
# Runs
# ----

import _figures as F
import matplotlib.pyplot as plt
import numpy as np

from attention_cluster.metrics import match_centroids

timer = F.Timer()
N_ITER = 1500 if F.quick() else 10000
NOISES = (0.1, 0.3, 1.0)
SETTINGS = {
    "no regulariser": dict(regularization=None),
    "pairwise, rho = 0.1": dict(regularization="pairwise", reg_strength=0.1),
}
record = F.record_points(N_ITER, 50)
runs = {
    (noise, name): F.experiment(
        noise,
        n_iter=N_ITER,
        record=record,
        n_heads=3,
        population_runs=0 if F.quick() else 2,
        desc=f"3 heads, sigma={noise}, {name}",
        **kw,
    )
    for noise in NOISES
    for name, kw in SETTINGS.items()
}


def diagnostics(heads, centroids):
    """Largest |cos| between two heads; sorted best alignments with the centroids; distance."""
    gram = np.abs(heads @ heads.T)
    np.fill_diagonal(gram, 0.0)
    perm, _, cost = match_centroids(heads, centroids)
    align = np.sort(np.abs(np.sum(heads[perm] * centroids, axis=1)))[::-1]
    return gram.max(), align, cost.sum()


stats = {}
for key, r in runs.items():
    out = [diagnostics(H, C) for H, C in zip(r["heads"], r["centroids"])]
    pgd = [diagnostics(H, C) for H, C in zip(r["pgd_heads"], r["centroids"])]
    stats[key] = dict(
        merge=np.array([o[0] for o in out]),
        first=np.array([o[1][0] for o in out]),
        second=np.array([o[1][1] for o in out]),
        distance=np.array([o[2] for o in out]),
        pgd_merge=np.array([o[0] for o in pgd]),
        pgd_distance=np.array([o[2] for o in pgd]),
    )

# %%
# Merging, alignment and distance against the noise
# -------------------------------------------------
# Medians over the runs, with their 95 % percentile bands.

fig, axes = plt.subplots(1, 3, figsize=(13, 4), layout="constrained")
quantities = (
    ("merge", "largest |<mu_j, mu_k>| between heads"),
    ("second", "alignment with the worse-recovered centroid"),
    ("distance", "distance of the best two heads"),
)
for ax, (q, title) in zip(axes, quantities):
    for name, color in zip(SETTINGS, ("tab:blue", "tab:red")):
        v = np.array([stats[noise, name][q] for noise in NOISES])
        lo, med, hi = np.percentile(v, [2.5, 50, 97.5], axis=1)
        ax.plot(NOISES, med, "o-", color=color, label=f"PSGD, {name}")
        ax.fill_between(NOISES, lo, hi, color=color, alpha=0.2, linewidth=0)
        if not F.quick() and q in ("merge", "distance"):
            pgd = [np.median(stats[noise, name][f"pgd_{q}"]) for noise in NOISES]
            ax.plot(
                NOISES,
                pgd,
                "s--",
                color=color,
                mfc="none",
                alpha=0.7,
                label=f"population PGD, {name}",
            )
    ax.set_xscale("log")
    ax.set_xlabel("sigma")
    ax.set_title(title)
axes[2].set_yscale("log")
axes[0].legend(fontsize="x-small")
fig.suptitle("Three heads on two clusters")

# %%
# Claims
# ------
# Without regulariser the risk depends on the heads through ``U U^T`` only:
# three unit heads that gave the same ``U U^T`` as a merged pair would
# waste a head; the runs show instead three nearly orthogonal heads
# sharing the centroids' plane and one noise direction.

data = {}
for key, s in stats.items():
    data[f"{key[0]}/{key[1]}"] = {k: F.summary(v) for k, v in s.items() if v.size}
    print(
        f"sigma={key[0]}, {key[1]}: max |cos| {np.median(s['merge']):.3f}, alignments "
        f"{np.median(s['first']):.3f} / {np.median(s['second']):.3f}, distance {F.fmt(np.median(s['distance']))}"
    )

base, reg = "no regulariser", "pairwise, rho = 0.1"
low, high = NOISES[0], NOISES[-1]
merge_low = {name: float(np.median(stats[low, name]["merge"])) for name in SETTINGS}
first_low = float(np.median(stats[low, base]["first"]))
second_low = float(np.median(stats[low, base]["second"]))
dist = {
    (noise, name): float(np.median(stats[noise, name]["distance"]))
    for noise in NOISES
    for name in SETTINGS
}
claims = [
    F.claim(
        "heads3-merge",
        "rebuttal",
        f"Redundant heads converge to the same parameters at low noise (sigma = {low})",
        "two heads align with each other: a diagnostic of too many heads",
        "median largest |<mu_j, mu_k>|: "
        + ", ".join(f"{merge_low[n]:.3f} ({n})" for n in SETTINGS),
        any(v > 0.9 for v in merge_low.values()),
        "median above 0.9 with or without the regulariser",
        "The heads stay nearly orthogonal: without regulariser they form an arbitrary orthonormal "
        "frame of the centroids' plane plus one noise direction (the risk depends on U U^T only, "
        "and keeping a noise direction in U U^T lowers the reconstruction error); with it, two "
        "heads take the centroids and the third a noise direction. The answers' temperature and "
        "factor for the extra head are not given.",
    ),
    F.claim(
        "heads3-partial",
        "rebuttal",
        f"At low noise one centroid is recovered and the second only partially (sigma = {low}, no regulariser)",
        "one head recovers a centroid, the recovery of the second is partial",
        f"median alignments of the best heads {first_low:.3f} and {second_low:.3f}",
        first_low > 0.95 and second_low < 0.95,
        "best alignment above 0.95 and the second's below 0.95",
        f"With the pairwise regulariser both are recovered (distance {F.fmt(dist[low, reg])}).",
    ),
    F.claim(
        "heads3-noise",
        "rebuttal",
        "With more noise the heads struggle to align with the centroids",
        "as the noise increases the parameters struggle to align (bad local minima)",
        "median distance of the best two heads: "
        + "; ".join(
            f"{name}: {F.fmt(dist[low, name])} at sigma = {low}, {F.fmt(dist[high, name])} at sigma = {high}"
            for name in SETTINGS
        ),
        all(dist[high, name] > 3 * dist[low, name] for name in SETTINGS) or dist[high, reg] > 0.1,
        f"distance at sigma = {high} above 3x that at sigma = {low} in both settings, or above 0.1 with the regulariser",
    ),
]

F.finish(
    "appendix_redundant_heads",
    fig,
    {
        "title": "Three heads on two clusters",
        "settings": F.psgd_settings(
            n_heads=3, noises=NOISES, settings=list(SETTINGS), n_iter=N_ITER
        ),
        "claims": claims,
        "data": data,
    },
    timer,
)
