"""
Figure 2a: final distance against the regularisation strength
=============================================================

The paper's Figure 2a: PSGD on the regularised risk ``R + rho r`` from a
random start on the sphere, the distance to the centroids at the end of
training against ``rho``, 10 runs per value. The paper reports that the
centroids are recovered for a suitable ``rho``, and that too much
regularisation hurts, more so at sigma = 1: the regulariser then overrides
the risk.

Population PGD on the regularised risk, from the starts of the first two
runs with the same step and budget, shows where the exact minimiser goes;
the dotted lines are the statistical floor of the samples.

Settings as in Figure 2b (``d = 10``, ``K = 2``, ``n = 20000``, ``L = 100``,
one sequence per step, constant step ``0.06 / (lambda K E||X||^2)``,
10000 iterations, lambda the unbiased temperature), ``rho`` on a
logarithmic grid from 0.01 to 10. The final distance of a run is the median
over its last 20 % of iterations.
"""

# %%
# Runs
# ----

import matplotlib.pyplot as plt
import numpy as np

import _figures as F

timer = F.Timer()
N_ITER = 500 if F.QUICK else 10000
REG_STRENGTHS = (0.01, 0.1, 1.0, 10.0) if F.QUICK else (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
N_RUNS = 2 if F.QUICK else F.N_RUNS
record = F.record_points(N_ITER, 50)
COLORS = {0.3: "tab:blue", 1.0: "tab:red"}

final = {}
for noise in F.NOISES:
    for rho in F.progress(REG_STRENGTHS, desc=f"Fig. 2a, sigma={noise}"):
        r = F.experiment(noise, n_iter=N_ITER, record=record, regularization="pairwise", reg_strength=rho,
                         n_runs=N_RUNS, population_runs=1 if F.QUICK else 2, desc=f"rho={rho}")
        final[noise, rho] = dict(psgd=F.plateau(r["psgd"]), pgd=r["pgd"][:, -1], floor=r["floor"],
                                 temperature=r["temperature"])

# %%
# Final distance against rho
# --------------------------

fig, ax = plt.subplots(figsize=(6.5, 4.5), layout="constrained")
rhos = np.array(REG_STRENGTHS)
for noise in F.NOISES:
    psgd = np.array([final[noise, rho]["psgd"] for rho in REG_STRENGTHS])
    lo, med, hi = np.percentile(psgd, [2.5, 50, 97.5], axis=1)
    ax.plot(rhos, med, "o-", color=COLORS[noise], label=f"PSGD, sigma = {noise}")
    ax.fill_between(rhos, lo, hi, color=COLORS[noise], alpha=0.2, linewidth=0)
    pgd = np.array([np.median(final[noise, rho]["pgd"]) for rho in REG_STRENGTHS])
    ax.plot(rhos, np.maximum(pgd, 1e-16), "s--", color=COLORS[noise], alpha=0.6, mfc="none",
            label=f"population PGD, sigma = {noise}")
    floor = np.median(np.concatenate([final[noise, rho]["floor"] for rho in REG_STRENGTHS]))
    F.hline(ax, floor, f"floor, sigma = {noise}", COLORS[noise])
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_ylim(1e-17, 10)
ax.set_xlabel("regularisation strength rho")
ax.set_ylabel("final distance to the centroids")
ax.legend(fontsize="small", loc="center left")
ax.set_title("Fig. 2a: random start, regularised risk")

# %%
# Claims
# ------
# ``rho_break`` is the smallest ``rho`` beyond the best one at which the
# median final distance is more than ten times the best median.

summaries, breaks, best = {}, {}, {}
for noise in F.NOISES:
    med = np.array([np.median(final[noise, rho]["psgd"]) for rho in REG_STRENGTHS])
    i_best = int(np.argmin(med))
    worse = [i for i in range(i_best, len(med)) if med[i] > 10 * med[i_best]]
    best[noise] = (REG_STRENGTHS[i_best], float(med[i_best]))
    breaks[noise] = REG_STRENGTHS[worse[0]] if worse else np.inf
    summaries[noise] = {str(rho): dict(psgd=F.summary(final[noise, rho]["psgd"]),
                                       pgd=F.summary(final[noise, rho]["pgd"]),
                                       floor=F.summary(final[noise, rho]["floor"]))
                        for rho in REG_STRENGTHS}
    print(f"sigma={noise}: best rho {best[noise][0]} ({F.fmt(best[noise][1])}), rho_break {breaks[noise]}")
    for rho in REG_STRENGTHS:
        s = summaries[noise][str(rho)]
        print(f"  rho={rho:<5}: PSGD {F.fmt_summary(s['psgd'])}, population PGD {F.fmt(s['pgd']['median'])}")

largest = REG_STRENGTHS[-1]
hurt = {noise: np.median(final[noise, largest]["psgd"]) > 10 * best[noise][1] for noise in F.NOISES}
claims = [
    F.claim(
        "fig2a-recovery", "2a",
        "A suitable rho recovers the centroids from a random start",
        "centroids recovered with an appropriate level of regularisation",
        "; ".join(f"sigma = {noise}: best rho {best[noise][0]:g}, median {F.fmt(best[noise][1])}"
                  for noise in F.NOISES),
        all(best[noise][1] < 10 * np.median(final[noise, best[noise][0]]["floor"]) + 0.05
            for noise in F.NOISES),
        "best median final distance below 10x the floor + 0.05",
    ),
    F.claim(
        "fig2a-too-much", "2a",
        "Too much regularisation impairs the alignment",
        "as rho grows the regulariser overrides the risk",
        "; ".join(f"sigma = {noise}: rho = {largest:g} gives {F.fmt(np.median(final[noise, largest]['psgd']))}"
                  for noise in F.NOISES),
        all(hurt.values()),
        f"median at rho = {largest:g} above 10x the best median, for both noise levels",
        "Population PGD shows the same threshold: the regularised minimiser leaves the centroids.",
    ),
    F.claim(
        "fig2a-noise", "2a",
        "The damage starts at a smaller rho when the noise is larger",
        "more pronounced at higher noise levels",
        "; ".join(f"sigma = {noise}: rho_break = {breaks[noise]:g}" for noise in F.NOISES),
        breaks[1.0] < breaks[0.3],
        "rho_break(sigma = 1) < rho_break(sigma = 0.3)",
    ),
]

F.finish(
    "fig2a_reg_strength",
    fig,
    {
        "title": "Figure 2a: final distance against rho",
        "settings": dict(
            n_samples=F.N_SAMPLES, n_features=F.N_FEATURES, n_clusters=F.N_CLUSTERS,
            sequence_length=F.SEQUENCE_LENGTH, batch_size=F.BATCH_SIZE, learning_rate=F.LEARNING_RATE,
            n_iter=N_ITER, n_runs=N_RUNS, reg_strengths=REG_STRENGTHS,
        ),
        "claims": claims,
        "data": {"by_noise": {str(k): v for k, v in summaries.items()},
                 "rho_break": {str(k): v for k, v in breaks.items()},
                 "best": {str(k): v for k, v in best.items()}},
    },
    timer,
)
