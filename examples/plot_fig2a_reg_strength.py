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

import _figures as F
import matplotlib.pyplot as plt
import numpy as np

timer = F.Timer()
N_ITER = 500 if F.quick() else 10000
REG_STRENGTHS = (0.01, 0.1, 1.0, 10.0) if F.quick() else (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
N_RUNS = 2 if F.quick() else F.run_count()
record = F.record_points(N_ITER, 50)
COLORS = {0.3: "tab:blue", 1.0: "tab:red"}

final = {}
for noise in F.NOISES:
    for rho in F.progress(REG_STRENGTHS, desc=f"Fig. 2a, sigma={noise}"):
        r = F.experiment(
            noise,
            n_iter=N_ITER,
            record=record,
            regularization="pairwise",
            reg_strength=rho,
            n_runs=N_RUNS,
            population_runs=1 if F.quick() else 2,
            desc=f"rho={rho}",
        )
        final[noise, rho] = dict(
            psgd=F.plateau(r["psgd"]),
            pgd=r["pgd"][:, -1],
            floor=r["floor"],
            temperature=r["temperature"],
        )

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
    ax.plot(
        rhos,
        np.maximum(pgd, 1e-16),
        "s--",
        color=COLORS[noise],
        alpha=0.6,
        mfc="none",
        label=f"population PGD, sigma = {noise}",
    )
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
# The alignment is "impaired" when the median final distance exceeds 0.1
# (about 13 degrees for each of the two heads); ``rho_fail`` is the
# smallest ``rho`` beyond the best one where that happens.

RECOVERED = 0.1


def first_failure(medians, start):
    worse = [i for i in range(start + 1, len(medians)) if medians[i] > RECOVERED]
    return REG_STRENGTHS[worse[0]] if worse else np.inf


summaries, fail, fail_pgd, best = {}, {}, {}, {}
for noise in F.NOISES:
    med = np.array([np.median(final[noise, rho]["psgd"]) for rho in REG_STRENGTHS])
    med_pgd = np.array([np.median(final[noise, rho]["pgd"]) for rho in REG_STRENGTHS])
    i_best = int(np.argmin(med))
    best[noise] = (REG_STRENGTHS[i_best], float(med[i_best]))
    fail[noise] = first_failure(med, i_best)
    fail_pgd[noise] = first_failure(med_pgd, int(np.argmin(med_pgd)))
    summaries[noise] = {
        str(rho): dict(
            psgd=F.summary(final[noise, rho]["psgd"]),
            pgd=F.summary(final[noise, rho]["pgd"]),
            floor=F.summary(final[noise, rho]["floor"]),
        )
        for rho in REG_STRENGTHS
    }
    print(
        f"sigma={noise}: best rho {best[noise][0]} ({F.fmt(best[noise][1])}), rho_fail {fail[noise]} "
        f"(population PGD: {fail_pgd[noise]})"
    )
    for rho in REG_STRENGTHS:
        s = summaries[noise][str(rho)]
        print(
            f"  rho={rho:<5}: PSGD {F.fmt_summary(s['psgd'])}, population PGD {F.fmt(s['pgd']['median'])}"
        )

claims = [
    F.claim(
        "fig2a-recovery",
        "2a",
        "A suitable rho recovers the centroids from a random start",
        "centroids recovered with an appropriate level of regularisation",
        "; ".join(
            f"sigma = {noise}: best rho {best[noise][0]:g}, median {F.fmt(best[noise][1])}"
            for noise in F.NOISES
        ),
        all(best[noise][1] < RECOVERED for noise in F.NOISES),
        f"best median final distance below {RECOVERED}",
    ),
    F.claim(
        "fig2a-too-much",
        "2a",
        "Too much regularisation impairs the alignment",
        "as rho grows the regulariser overrides the risk",
        "; ".join(
            f"sigma = {noise}: from rho = {fail[noise]:g} on (population PGD: {fail_pgd[noise]:g})"
            for noise in F.NOISES
        ),
        all(np.isfinite(list(fail.values()))),
        f"for both noise levels some rho above the best gives a median above {RECOVERED}",
        "Population PGD fails at the same rho: the regularised minimiser itself leaves the centroids.",
    ),
    F.claim(
        "fig2a-noise",
        "2a",
        "The damage starts at a smaller rho when the noise is larger",
        "more pronounced at higher noise levels",
        "; ".join(f"sigma = {noise}: rho_fail = {fail[noise]:g}" for noise in F.NOISES),
        fail[1.0] < fail[0.3],
        "rho_fail(sigma = 1) < rho_fail(sigma = 0.3)",
    ),
]

F.finish(
    "fig2a_reg_strength",
    fig,
    {
        "title": "Figure 2a: final distance against rho",
        "settings": F.psgd_settings(n_iter=N_ITER, n_runs=N_RUNS, reg_strengths=REG_STRENGTHS),
        "claims": claims,
        "data": {
            "by_noise": {str(k): v for k, v in summaries.items()},
            "rho_fail": {str(k): v for k, v in fail.items()},
            "rho_fail_population": {str(k): v for k, v in fail_pgd.items()},
            "best": {str(k): v for k, v in best.items()},
        },
    },
    timer,
)
