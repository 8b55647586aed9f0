"""
Figure 4: the parameter-free in-context layer
=============================================

The paper's Figure 4: the same sequence as in Figure 3 (``d = 10``,
``sigma = 0.3``, ``L = 500``, ``mu*_0 = e_10``, ``mu*_1 = -e_1``) and the
outputs of the in-context layer ``T^ctx(X)_l = (2 lambda / L) (X^T X) X_l``
(``d`` orthonormal heads, no trainable parameter, section 5) at ``lambda =
1 / (1 + 2 sigma^2)``, projected on the inputs' first two principal axes.
The paper reports flattened clouds close to the centroids, as in Figure 3,
without any learned parameter.

Section 5 quantifies it for prompts whose centroids are drawn afresh:
the layer is unbiased at the temperature of Prop. 5.1; by Prop. 5.2 its
risk falls below the optimal quantiser's ``d sigma^2`` for a suitable
lambda, and at ``lambda = 1 / (1 + 2 sigma^2)`` its conditional variance
tends to ``2 sigma^2 + 4 (d - 2) sigma^6 / (1 + 2 sigma^2)^2 < d sigma^2``.
This script measures these by Monte Carlo on prompts from
:func:`attention_cluster.datasets.make_prompts` and compares them with the
exact closed forms of :mod:`attention_cluster.theory`.
"""

# %%
# The figure: one sequence, inputs and outputs
# --------------------------------------------

import _figures as F
import matplotlib.pyplot as plt
import numpy as np

from attention_cluster import theory
from attention_cluster.datasets import make_prompts, make_sequences
from attention_cluster.layers import in_context_attention

timer = F.Timer()
D, NOISE, L = 10, 0.3, 500
LAMBDA = 1.0 / (1.0 + 2.0 * NOISE**2)
E = np.eye(D)
CENTROIDS = np.array([E[9], -E[0]])  # mu*_0 = e_10, mu*_1 = -e_1
N_PROMPTS = 40 if F.quick() else 400


def in_context(X, temperature=LAMBDA):
    return in_context_attention(X, temperature=temperature)


X1, y1, _ = make_sequences(1, L, D, 2, noise=NOISE, centroids=CENTROIDS, random_state=0)
T1 = in_context(X1)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
F.pca_comparison(
    ax1,
    X1[0],
    T1[0],
    y1[0],
    CENTROIDS,
    f"d = {D}, sigma = {NOISE}, L = {L}, lambda = 1/(1 + 2 sigma^2)",
)

# %%
# Risk against the sequence length, prompts with their own centroids
# ------------------------------------------------------------------

lam_opt = float(theory.in_context_optimal_temperature(NOISE, n_features=D))
lengths = (10, 30, 100, 500) if F.quick() else (10, 30, 100, 300, 500, 1000)
mc = {}
for length in F.progress(lengths, desc="Fig. 4, Monte Carlo"):
    X, y, C = make_prompts(N_PROMPTS, length, D, 2, noise=NOISE, random_state=length)
    mc[length] = {
        name: F.layer_monte_carlo(lambda Z, lam=lam: in_context(Z, lam), X, y, C)
        for name, lam in (("fig", LAMBDA), ("optimal", lam_opt))
    }
Ls = np.logspace(0.7, 3.2, 100)
for name, lam, color in (("fig", LAMBDA, "tab:blue"), ("optimal", lam_opt, "tab:purple")):
    label = "lambda = 1/(1 + 2 sigma^2)" if name == "fig" else f"Prop. 5.2's lambda = {lam_opt:.3f}"
    ax2.plot(
        Ls,
        theory.in_context_risk(NOISE, lam, Ls, n_features=D),
        color=color,
        label=f"exact risk, {label}",
    )
    ax2.errorbar(
        lengths,
        [mc[k][name]["risk"]["mean"] for k in lengths],
        yerr=[2 * mc[k][name]["risk"]["se"] for k in lengths],
        fmt="o",
        color=color,
        mfc="none",
    )
quantizer = float(theory.quantizer_risk(NOISE, n_features=D))
F.hline(ax2, quantizer, "optimal quantiser, d sigma^2", "k", "--")
ax2.set_xscale("log")
ax2.set_xlabel("sequence length L")
ax2.set_ylabel("risk E||X_1 - T^ctx(X)_1||^2")
ax2.set_title("in-context layer (points: Monte Carlo, +-2 s.e.)")
ax2.legend(fontsize="small")
fig.suptitle("Fig. 4: inputs and outputs of the in-context layer")

# %%
# Bias and conditional variance at L = 500
# ----------------------------------------

lam_unbiased = float(theory.in_context_unbiased_temperature(NOISE, L, n_features=D))
X, y, C = make_prompts(N_PROMPTS, L, D, 2, noise=NOISE, random_state=1)
unbiased = F.layer_monte_carlo(lambda Z: in_context(Z, lam_unbiased), X, y, C)
at_500 = mc[500]["fig"]
var_theory = float(theory.in_context_conditional_variance(NOISE, LAMBDA, L, n_features=D))
var_limit = 2 * NOISE**2 + 4 * (D - 2) * NOISE**6 / (1 + 2 * NOISE**2) ** 2
risk_theory = {
    name: float(theory.in_context_risk(NOISE, lam, L, n_features=D))
    for name, lam in (("fig", LAMBDA), ("optimal", lam_opt))
}


def pm(e):
    return f"{e['mean']:.4f} +- {2 * e['se']:.4f}"


print(
    f"risk at L={L}: {pm(at_500['risk'])} (theory {risk_theory['fig']:.4f}); at the optimal "
    f"lambda: {pm(mc[500]['optimal']['risk'])} (theory {risk_theory['optimal']:.4f}); quantiser {quantizer:.2f}"
)
print(f"scale b at lambda={lam_unbiased:.4f}: {pm(unbiased['scale'])}")
print(
    f"conditional variance: {pm(at_500['conditional_variance'])} (theory {var_theory:.4f}, "
    f"L -> inf {var_limit:.4f})"
)

# %%
# Claims
# ------

var, scale = at_500["conditional_variance"], unbiased["scale"]
risk_fig, risk_opt = at_500["risk"], mc[500]["optimal"]["risk"]
claims = [
    F.claim(
        "fig4-flattened",
        "4",
        "The in-context layer's outputs are flattened clouds near the centroids (d = 10, sigma = 0.3, L = 500)",
        "flattened clouds close to the centroids, with no learned parameter",
        f"conditional variance of the outputs {pm(var)} against the inputs' d sigma^2 = {quantizer:.2f} "
        f"(exact {var_theory:.4f}; L -> inf {var_limit:.4f})",
        var["mean"] + 2 * var["se"] < quantizer and abs(var["mean"] - var_theory) < 3 * var["se"],
        "Monte Carlo conditional variance (+2 s.e.) below d sigma^2 and within 3 s.e. of the exact value",
        "The layer shrinks the noise outside the centroids' plane by 2 sigma^2 / (1 + 2 sigma^2) "
        "instead of removing it, so its clouds are less flat than the oracle layer's (Figure 3).",
    ),
    F.claim(
        "prop51-unbiased",
        "Prop. 5.1",
        "The in-context layer is unbiased at lambda = (L/2) / (1 + (d + 2) sigma^2 + (L - 1)(1/2 + sigma^2))",
        "E[T^ctx(X)_1 | Z_1 = c] = mu*_c",
        f"b in E[T | mu*, Z] = b mu*: {pm(scale)} at L = {L}, lambda = {lam_unbiased:.4f}",
        abs(scale["mean"] - 1.0) < 3 * scale["se"] + 1e-3,
        "|b - 1| within 3 standard errors",
    ),
    F.claim(
        "prop52-risk",
        "Prop. 5.2",
        "Without parameters, the in-context layer's risk is below d sigma^2",
        "risk < d sigma^2 for a suitable lambda, L large",
        f"at L = {L}: {pm(risk_opt)} at Prop. 5.2's lambda = {lam_opt:.3f} (exact "
        f"{risk_theory['optimal']:.4f}), {pm(risk_fig)} at 1/(1 + 2 sigma^2); d sigma^2 = {quantizer:.2f}",
        risk_opt["mean"] + 2 * risk_opt["se"] < quantizer
        and abs(risk_opt["mean"] - risk_theory["optimal"]) < 3 * risk_opt["se"],
        "Monte Carlo risk (+2 s.e.) below d sigma^2, and within 3 s.e. of the exact value",
    ),
]

F.finish(
    "fig4_in_context_layer",
    fig,
    {
        "title": "Figure 4: the in-context layer",
        "settings": dict(
            n_features=D,
            noise=NOISE,
            sequence_length=L,
            temperature=LAMBDA,
            optimal_temperature=lam_opt,
            n_prompts=N_PROMPTS,
            lengths=lengths,
        ),
        "claims": claims,
        "data": dict(
            risk={str(k): v["fig"]["risk"] for k, v in mc.items()},
            risk_optimal={str(k): v["optimal"]["risk"] for k, v in mc.items()},
            risk_theory=risk_theory,
            conditional_variance=var,
            conditional_variance_theory=var_theory,
            unbiased_scale=scale,
        ),
    },
    timer,
)
