"""
Figure 2b: PSGD from a random start, with the pairwise regulariser
==================================================================

The paper's Figure 2b: PSGD on the regularised risk ``R + rho r`` with
``r(mu_0, mu_1) = E[<mu_0, X>^2 <mu_1, X>^2]`` at a fixed ``rho``, started
uniformly on the sphere (off the manifold), 10 runs with 95 % percentile
bands. The paper reports linear convergence over ~4e3 iterations, then a
plateau near 1e-3 (sigma = 0.3) and 1e-1 (sigma = 1).

Population PGD on the regularised risk (no sampling) runs from the same
starts with the same step; the dotted line is the statistical floor of the
samples (true-label class means, normalised).

Settings as in Figure 1 (``d = 10``, ``K = 2``, ``n = 20000``, ``L = 100``,
one sequence per step, constant step ``0.06 / (lambda K E||X||^2)``,
lambda the unbiased temperature), 10000 iterations, and ``rho = 0.1``:
the paper's value is not given; Figure 2a shows the population minimiser
staying at the centroids up to ``rho = 1`` (sigma = 0.3) and ``rho = 0.3``
(sigma = 1), and 0.1 lies below both.
"""

# %%
# Runs
# ----

import _figures as F
import numpy as np

timer = F.Timer()
N_ITER = 1500 if F.quick() else 10000
REG_STRENGTH = 0.1
record = F.record_points(N_ITER)
PAPER_PLATEAU = {0.3: 1e-3, 1.0: 1e-1}

runs = {
    noise: F.experiment(
        noise,
        n_iter=N_ITER,
        record=record,
        regularization="pairwise",
        reg_strength=REG_STRENGTH,
        desc=f"Fig. 2b, sigma={noise}",
    )
    for noise in F.NOISES
}

# %%
# Distance to the centroids against iterations
# --------------------------------------------

fig, axes = F.distance_panels("Fig. 2b: PSGD from a random start, pairwise regulariser")
for ax, noise in zip(axes, F.NOISES):
    F.draw_runs(ax, runs[noise], "PSGD", "tab:blue")
    F.hline(ax, PAPER_PLATEAU[noise], "paper's plateau", "0.6", "-")
    ax.set_title(
        f"sigma = {noise}, lambda = {runs[noise]['temperature']:.3f}, rho = {REG_STRENGTH}"
    )
F.finish_distance_axes(axes)

# %%
# Claims
# ------
# The regulariser breaks the rotation symmetry of the risk inside the
# centroids' plane (Figure 1), so that the heads are pulled to the
# centroids themselves from any start.

claims = []
for noise in F.NOISES:
    r = runs[noise]
    claims += F.curve_claims(
        f"fig2b-{noise}",
        "2b",
        f"random start, rho = {REG_STRENGTH}, sigma = {noise}",
        r,
        PAPER_PLATEAU[noise],
        "linear convergence over ~4e3 iterations",
        3 * 4000,
    )
    pgd_final = r["pgd_final"]
    progress_ratio = r["pgd"][:, -1] / r["pgd"][:, 0]
    claims.append(
        F.claim(
            f"fig2b-population-{noise}",
            "2b",
            f"From random starts the regularised population PGD reaches the centroids, sigma = {noise}",
            "the regulariser compensates for starts off the manifold",
            f"final distance of population PGD {F.fmt_summary(pgd_final)}",
            pgd_final["median"] < 1e-6 and np.all(progress_ratio < 1e-2),
            f"median below 1e-6 after {N_ITER} iterations, every run at least 100x below its start",
            "Starts near a saddle of the risk (e.g. both heads nearly on the same centroid) take longer "
            "to leave it, which sets the upper edge of the band.",
        )
    )
    full, floor = F.summary(r["full"]), r["floor_summary"]
    claims.append(
        F.claim(
            f"fig2b-exact-{noise}",
            "2b",
            f"Beyond the paper: the exact full-batch solver, same start and objective, sigma = {noise}",
            "(not in the paper: PSGD's plateau is attributed to sampling noise)",
            f"exact solver {F.fmt_summary(full)}; PSGD plateau {F.fmt(r['plateau']['median'])}; "
            f"floor {F.fmt(floor['median'])}",
            full["median"] < r["plateau"]["median"],
            "median distance of the exact solver below PSGD's plateau",
            "The exact solver minimises the same regularised risk without sampling, so the distance "
            "between it and PSGD's plateau is the sampling noise; what remains above the floor is the "
            "objective's own statistical error (docs/solvers.md).",
        )
    )
for noise in F.NOISES:
    r = runs[noise]
    print(
        f"sigma={noise}: plateau {F.fmt_summary(r['plateau'])}, floor {F.fmt_summary(r['floor_summary'])}, "
        f"population PGD {F.fmt_summary(r['pgd_final'])}"
    )

F.finish(
    "fig2b_regularised",
    fig,
    {
        "title": "Figure 2b: PSGD from a random start, pairwise regulariser",
        "settings": F.psgd_settings(
            n_iter=N_ITER,
            reg_strength=REG_STRENGTH,
            temperature={str(k): v["temperature"] for k, v in runs.items()},
            step={str(k): v["step"] for k, v in runs.items()},
        ),
        "claims": claims,
        "data": {
            str(k): {
                key: v[key]
                for key in ("plateau", "floor_summary", "t_hit", "rate", "r2", "pgd_final")
            }
            for k, v in runs.items()
        },
    },
    timer,
)
