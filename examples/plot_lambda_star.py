"""
The temperature threshold lambda*(sigma, L)
===========================================

Proposition 3.3 and Theorem 3.4: on the manifold ``M`` the heads at the
centroids are global minimisers of the risk, and PGD from ``M`` converges
to them, when ``lambda <= lambda*(sigma, L)``. The paper gives two limits
of ``lambda*`` (its closed form, Appendix C, is not available):

- ``lambda*(sigma, L) -> (L + 1) / (L + 3)`` as ``sigma -> 0`` (the Dirac
  case's threshold);
- ``lambda*(sigma, L) -> (1 + 4 sigma^2) / (1 + 5 sigma^2 + 6 sigma^4)``
  as ``L -> infinity``.

This script measures the threshold from the exact population risk
(:func:`attention_cluster.theory.population_risk`, the Gaussian-moment
engine tested against Monte Carlo), without the closed form of
:func:`attention_cluster.theory.lambda_star`: on ``M`` with both
alignments equal to ``kappa``, the risk is a quadratic polynomial in
``u = kappa^2`` (Lemma 3.2), the centroids (``u = 1``) are the minimisers
exactly when its slope at ``u = 1`` is non-positive, and the threshold is
the root in lambda of that slope. It then runs population PGD from ``M``
on both sides of the threshold. ``d = 10`` throughout: for finite L and
sigma > 0 the threshold also depends on d (a token attending to itself
brings ``E||X||^2 = 1 + d sigma^2`` into the risk).
"""

# %%
# The threshold from the exact risk
# ---------------------------------

import _figures as F
import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import brentq

from attention_cluster import theory

timer = F.Timer()
C = np.eye(2, F.N_FEATURES)


def slope_at_centroids(lam, noise, L):
    """dR/du at u = 1, from the quadratic through u = 0, 1/2, 1 (exact for a quadratic)."""
    risk = [
        theory.population_risk(
            theory.manifold_heads(C, np.sqrt(u), random_state=0), C, noise, lam, L
        )
        for u in (0.0, 0.5, 1.0)
    ]
    return 3.0 * risk[2] - 4.0 * risk[1] + risk[0]


def measured_threshold(noise, L):
    return brentq(slope_at_centroids, 1e-3, 2.0, args=(noise, L), xtol=1e-13, rtol=1e-13)


def paper_sigma0(L):
    return (L + 1.0) / (L + 3.0)


def paper_L_inf(noise):
    s2 = noise**2
    return (1 + 4 * s2) / (1 + 5 * s2 + 6 * s2**2)


LENGTHS = (3, 10, 30, 100, 300, 1000, 10000)
NOISES = (0.0, 0.3, 1.0)
measured = {(noise, L): measured_threshold(noise, L) for noise in NOISES for L in LENGTHS}
measured_inf = {noise: measured_threshold(noise, np.inf) for noise in NOISES}
measured_small_noise = {L: measured_threshold(1e-4, L) for L in LENGTHS}

# %%
# PGD from the manifold on both sides of the threshold
# ----------------------------------------------------
# sigma = 0.3, L = 100: below lambda* the iterates reach the centroids;
# above, they stop at the alignment kappa* < 1 that minimises the risk on M
# (:func:`attention_cluster.theory.manifold_optimal_alignment`).

PGD_NOISE, PGD_L = 0.3, 100
lam_star = measured[PGD_NOISE, PGD_L]
ratios = (0.5, 0.9, 1.1, 1.5) if F.quick() else (0.5, 0.7, 0.9, 0.95, 1.05, 1.1, 1.3, 1.5, 2.0)
pgd_alignment, pgd_distance, optimal = [], [], []
for ratio in F.progress(ratios, desc="PGD around lambda*"):
    H0 = theory.manifold_heads(C, [0.5, -0.6], random_state=1)
    res = theory.population_pgd(
        H0, C, PGD_NOISE, ratio * lam_star, PGD_L, max_iter=20000, tol=1e-12
    )
    pgd_alignment.append(float(np.mean(np.abs(np.sum(res.heads * C, axis=1)))))
    pgd_distance.append(float(res.distance[-1]))
    optimal.append(
        float(
            theory.manifold_optimal_alignment(
                PGD_NOISE, ratio * lam_star, PGD_L, n_features=F.N_FEATURES
            )
        )
    )

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
Ls = np.logspace(np.log10(2), 4.3, 200)
for noise, color in zip(NOISES, ("k", "tab:blue", "tab:red")):
    ax1.plot(
        Ls,
        theory.lambda_star(noise, Ls, n_features=F.N_FEATURES),
        color=color,
        lw=1,
        label=f"closed form, sigma = {noise}",
    )
    ax1.plot(
        LENGTHS,
        [measured[noise, L] for L in LENGTHS],
        "o",
        color=color,
        mfc="none",
        label=f"root of the exact risk's slope, sigma = {noise}",
    )
    ax1.axhline(paper_L_inf(noise), color=color, ls=":", lw=1)
ax1.plot(
    Ls,
    paper_sigma0(Ls),
    color="tab:green",
    lw=4,
    alpha=0.4,
    zorder=0,
    label="paper's sigma -> 0 limit (L + 1) / (L + 3)",
)
ax1.set_xscale("log")
ax1.set_xlabel("sequence length L")
ax1.set_ylabel("lambda*")
ax1.set_title("lambda*(sigma, L), d = 10; dotted: paper's L -> inf limit")
ax1.legend(fontsize="x-small")
grid = np.linspace(min(ratios), max(ratios), 200)
ax2.plot(
    grid,
    theory.manifold_optimal_alignment(PGD_NOISE, grid * lam_star, PGD_L, n_features=F.N_FEATURES),
    "-",
    color="0.5",
    label="kappa* minimising the risk on M",
)
ax2.plot(
    ratios, pgd_alignment, "o", color="tab:orange", label="population PGD from M, final |kappa|"
)
ax2.axvline(1.0, color="k", ls=":", lw=1)
ax2.set_xlabel("lambda / lambda*")
ax2.set_ylabel("alignment |<mu_h, mu*_h>|")
ax2.set_title(f"sigma = {PGD_NOISE}, L = {PGD_L}: lambda* = {lam_star:.4f}")
ax2.legend(fontsize="small")

# %%
# Claims
# ------

err0 = max(abs(measured[0.0, L] - paper_sigma0(L)) / paper_sigma0(L) for L in LENGTHS)
err_small = max(abs(measured_small_noise[L] - paper_sigma0(L)) / paper_sigma0(L) for L in LENGTHS)
err_inf = max(
    abs(measured_inf[noise] - paper_L_inf(noise)) / paper_L_inf(noise) for noise in NOISES
)
err_closed = max(
    abs(measured[k] - float(theory.lambda_star(k[0], k[1], n_features=F.N_FEATURES))) / measured[k]
    for k in measured
)
gap_long = {noise: measured[noise, 10000] / paper_L_inf(noise) - 1 for noise in NOISES}
below = [d for r, d in zip(ratios, pgd_distance) if r < 1]
above = [(d, k) for r, d, k in zip(ratios, pgd_distance, optimal) if r > 1]
pgd_vs_optimal = max(abs(a - k) for r, a, k in zip(ratios, pgd_alignment, optimal))
print(f"sigma = 0: max relative gap to (L+1)/(L+3) over L = {LENGTHS}: {err0:.2e}")
print(
    f"sigma = 1e-4: {err_small:.2e}; L = inf: max relative gap to the paper's limit {err_inf:.2e}"
)
print(f"closed form theory.lambda_star against the roots: {err_closed:.2e}")
print(f"L = 10000 against the L -> inf limit: {gap_long}")
print(f"PGD: below lambda* distances {below}; above: {above}")

claims = [
    F.claim(
        "lambda-star-sigma0",
        "Prop. 3.3",
        "lambda*(sigma, L) tends to (L + 1) / (L + 3) as sigma -> 0",
        "lambda*_0 = (L + 1) / (L + 3)",
        f"threshold of the exact risk at sigma = 0 and 1e-4, L = {', '.join(map(str, LENGTHS))}: "
        f"largest relative gap {max(err0, err_small):.1e}",
        max(err0, err_small) < 1e-4,
        "relative gap below 1e-4 for every L",
    ),
    F.claim(
        "lambda-star-L-inf",
        "Prop. 3.3",
        "lambda*(sigma, L) tends to (1 + 4 sigma^2) / (1 + 5 sigma^2 + 6 sigma^4) as L -> infinity",
        "lambda*_inf = (1 + 4 sigma^2) / (1 + 5 sigma^2 + 6 sigma^4)",
        f"threshold of the exact risk at L = inf, sigma in {NOISES}: largest relative gap {err_inf:.1e}; "
        f"at L = 10000: " + ", ".join(f"{100 * g:+.3f} %" for g in gap_long.values()),
        err_inf < 1e-6 and max(abs(g) for g in gap_long.values()) < 1e-2,
        "relative gap below 1e-6 at L = inf, and below 1 % at L = 10000",
    ),
    F.claim(
        "lambda-star-pgd",
        "Thm. 3.4",
        f"PGD from M reaches the centroids for lambda < lambda*, not above (sigma = {PGD_NOISE}, L = {PGD_L})",
        "convergence to the centroids for lambda in (0, lambda*]",
        f"final distance {F.fmt(max(below))} at most below lambda*; above, |kappa| stops within "
        f"{pgd_vs_optimal:.1e} of the risk's minimiser on M (kappa* = "
        + ", ".join(f"{k:.3f}" for _, k in above)
        + ")",
        max(below) < 1e-8 and all(d > 1e-4 for d, _ in above) and pgd_vs_optimal < 1e-3,
        "below lambda*: distance < 1e-8; above: distance > 1e-4 and |kappa| within 1e-3 of kappa*",
        "Above lambda* the heads tilt out of the centroids' plane: the threshold is sharp.",
    ),
]

F.finish(
    "lambda_star",
    fig,
    {
        "title": "The temperature threshold lambda*(sigma, L)",
        "settings": dict(
            n_features=F.N_FEATURES,
            lengths=LENGTHS,
            noises=NOISES,
            pgd_noise=PGD_NOISE,
            pgd_sequence_length=PGD_L,
            ratios=ratios,
        ),
        "claims": claims,
        "data": dict(
            measured={f"{k[0]}/{k[1]}": v for k, v in measured.items()},
            measured_inf={str(k): v for k, v in measured_inf.items()},
            closed_form_max_relative_gap=err_closed,
            pgd=dict(
                ratios=ratios, alignment=pgd_alignment, distance=pgd_distance, optimal=optimal
            ),
        ),
        "observations": [
            f"The closed form theory.lambda_star matches the roots of the exact risk's slope to "
            f"{err_closed:.1e} (relative) over sigma in {NOISES} and L in {LENGTHS}.",
        ],
    },
    timer,
)
