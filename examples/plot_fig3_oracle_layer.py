"""
Figure 3: the oracle linear layer as an approximate quantiser
=============================================================

The paper's Figure 3: one sequence of ``L = 500`` tokens of the mixture
with ``d = 10``, ``sigma = 0.3``, ``mu*_0 = e_10``, ``mu*_1 = -e_1``, and
the outputs of the linear attention layer whose two heads are the
centroids (the oracle layer, section 4) at ``lambda = 1 / (1 + 2
sigma^2)``; a PCA fitted on the input tokens projects both to 2-D. The
paper reports that the outputs are flattened clouds close to the
centroids, approximate projections of the inputs on the line between the
two centroids, with a lower variance than the inputs.

Section 4 quantifies it: with the temperature of Prop. 4.1 the layer is
unbiased, ``E[T(X)_1 | Z_1 = c] = mu*_c``; by Prop. 4.2 its conditional
variance tends to ``2 sigma^2`` whatever d, and its risk falls below the
optimal quantiser's ``d sigma^2`` as L grows. This script measures these
by Monte Carlo over many sequences and compares them with the exact
closed forms of :mod:`attention_cluster.theory`.
"""

# %%
# The figure: one sequence, inputs and outputs
# --------------------------------------------

import _figures as F
import matplotlib.pyplot as plt
import numpy as np

from attention_cluster import theory
from attention_cluster.datasets import make_sequences
from attention_cluster.layers import linear_attention

timer = F.Timer()
D, NOISE, L = 10, 0.3, 500
LAMBDA = 1.0 / (1.0 + 2.0 * NOISE**2)
E = np.eye(D)
CENTROIDS = np.array([E[9], -E[0]])  # mu*_0 = e_10, mu*_1 = -e_1
N_SEQUENCES = 40 if F.quick() else 400


def oracle(X, temperature=LAMBDA, centroids=CENTROIDS):
    return linear_attention(X, centroids, temperature=temperature)


X1, y1, _ = make_sequences(1, L, D, 2, noise=NOISE, centroids=CENTROIDS, random_state=0)
T1 = oracle(X1)

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
# Risk against the sequence length
# --------------------------------
# Monte Carlo estimates (points, with two standard errors) against the
# exact risk (line), and the optimal quantiser's risk ``d sigma^2``.

lengths = (10, 30, 100, 500) if F.quick() else (10, 30, 100, 300, 500, 1000)
mc = {}
for length in F.progress(lengths, desc="Fig. 3, Monte Carlo"):
    X, y, _ = make_sequences(
        N_SEQUENCES, length, D, 2, noise=NOISE, centroids=CENTROIDS, random_state=length
    )
    mc[length] = F.layer_monte_carlo(oracle, X, y, CENTROIDS)
Ls = np.logspace(0.7, 3.2, 100)
ax2.plot(
    Ls,
    theory.oracle_risk(NOISE, LAMBDA, Ls, n_features=D),
    color="tab:blue",
    label="exact risk (theory)",
)
ax2.errorbar(
    lengths,
    [mc[k]["risk"]["mean"] for k in lengths],
    yerr=[2 * mc[k]["risk"]["se"] for k in lengths],
    fmt="o",
    color="tab:blue",
    mfc="none",
    label="Monte Carlo",
)
quantizer = float(theory.quantizer_risk(NOISE, n_features=D))
F.hline(ax2, quantizer, "optimal quantiser, d sigma^2", "k", "--")
F.hline(ax2, (D - 2) * NOISE**2, "L -> inf limit, (d - 2) sigma^2", "0.5")
ax2.set_xscale("log")
ax2.set_xlabel("sequence length L")
ax2.set_ylabel("risk E||X_1 - T(X)_1||^2")
ax2.set_title("oracle layer, lambda = 1/(1 + 2 sigma^2)")
ax2.legend(fontsize="small")
fig.suptitle("Fig. 3: inputs and outputs of the oracle linear layer")

# %%
# Bias and conditional variance at L = 500
# ----------------------------------------
# At the unbiased temperature of Prop. 4.1, and the conditional variance
# in d = 10 and d = 50 (Prop. 4.2: its limit 2 sigma^2 does not depend on d).

lam_unbiased = float(theory.unbiased_temperature(NOISE, L))
X, y, _ = make_sequences(N_SEQUENCES, L, D, 2, noise=NOISE, centroids=CENTROIDS, random_state=1)
unbiased = F.layer_monte_carlo(lambda Z: oracle(Z, lam_unbiased), X, y, CENTROIDS)
at_500 = mc[500]
D_HIGH = 50
C_high = np.eye(2, D_HIGH)
Xh, yh, _ = make_sequences(N_SEQUENCES, L, D_HIGH, 2, noise=NOISE, centroids=C_high, random_state=2)
high = F.layer_monte_carlo(lambda Z: oracle(Z, LAMBDA, C_high), Xh, yh, C_high)
var_theory = {
    d: float(theory.oracle_conditional_variance(NOISE, LAMBDA, L, n_features=d))
    for d in (D, D_HIGH)
}
LONG = 10_000
var_long = {
    d: float(theory.oracle_conditional_variance(NOISE, LAMBDA, LONG, n_features=d))
    for d in (D, D_HIGH)
}
risk_theory = float(theory.oracle_risk(NOISE, LAMBDA, L, n_features=D))


def pm(e):
    return f"{e['mean']:.4f} +- {2 * e['se']:.4f}"


print(f"risk at L={L}: {pm(at_500['risk'])} (theory {risk_theory:.4f}, quantiser {quantizer:.2f})")
print(f"scale b at lambda={lam_unbiased:.4f}: {pm(unbiased['scale'])}")
print(
    f"conditional variance d={D}: {pm(at_500['conditional_variance'])} (theory {var_theory[D]:.4f}); "
    f"d={D_HIGH}: {pm(high['conditional_variance'])} (theory {var_theory[D_HIGH]:.4f})"
)

# %%
# Claims
# ------

risk = at_500["risk"]
var, var_high = at_500["conditional_variance"], high["conditional_variance"]
scale = unbiased["scale"]
below = [k for k in lengths if mc[k]["risk"]["mean"] + 2 * mc[k]["risk"]["se"] < quantizer]
claims = [
    F.claim(
        "fig3-flattened",
        "3",
        "The oracle layer's outputs are flattened clouds near the centroids (d = 10, sigma = 0.3, L = 500)",
        "outputs: approximate projections on the line between the centroids, with a lower variance than the inputs",
        f"conditional variance of the outputs {pm(var)} against the inputs' d sigma^2 = {quantizer:.2f}",
        var["mean"] + 2 * var["se"] < quantizer,
        "Monte Carlo conditional variance (+2 s.e.) below d sigma^2",
        "The layer keeps the noise inside the centroids' plane and removes the rest: seen through a "
        "PCA of the inputs, whose second axis is a noise direction, the outputs collapse onto the "
        "first axis, the line between the centroids.",
    ),
    F.claim(
        "prop41-unbiased",
        "Prop. 4.1",
        "The oracle layer is unbiased at lambda = L / ((L + 1) + 2 (L + 3) sigma^2)",
        "E[T(X)_1 | Z_1 = c] = mu*_c",
        f"b in E[T | Z] = b mu*: {pm(scale)} at L = {L}, lambda = {lam_unbiased:.4f}",
        abs(scale["mean"] - 1.0) < 3 * scale["se"] + 1e-3,
        "|b - 1| within 3 standard errors",
    ),
    F.claim(
        "prop42-risk",
        "Prop. 4.2",
        "The oracle layer's risk falls below the optimal quantiser's d sigma^2 as L grows",
        "risk < d sigma^2 for L large",
        f"risk {pm(risk)} at L = {L} (exact {risk_theory:.4f}) against d sigma^2 = {quantizer:.2f}; "
        f"below it from L = {min(below) if below else 'none'} on the grid {lengths}",
        risk["mean"] + 2 * risk["se"] < quantizer
        and abs(risk["mean"] - risk_theory) < 3 * risk["se"],
        "Monte Carlo risk (+2 s.e.) below d sigma^2, and within 3 s.e. of the exact value",
    ),
    F.claim(
        "prop42-variance",
        "Prop. 4.2",
        "The oracle layer's conditional variance tends to 2 sigma^2, whatever d",
        "conditional variance asymptotically independent of d",
        f"Monte Carlo at L = {L}: {pm(var)} (d = {D}), {pm(var_high)} (d = {D_HIGH}), exact "
        f"{var_theory[D]:.4f}, {var_theory[D_HIGH]:.4f}; exact at L = {LONG}: {var_long[D]:.4f}, "
        f"{var_long[D_HIGH]:.4f}; 2 sigma^2 = {2 * NOISE**2:.2f}",
        all(abs(e["mean"] - var_theory[d]) < 3 * e["se"] for e, d in ((var, D), (var_high, D_HIGH)))
        and all(abs(v - 2 * NOISE**2) < 0.02 * 2 * NOISE**2 for v in var_long.values()),
        f"Monte Carlo within 3 s.e. of the exact value at L = {L}, and the exact value within 2 % of "
        f"2 sigma^2 at L = {LONG} for both d",
        "The finite-L excess grows with d (a token attending to itself carries its d sigma^2 of noise) "
        "and vanishes as L grows.",
    ),
]

F.finish(
    "fig3_oracle_layer",
    fig,
    {
        "title": "Figure 3: the oracle linear layer",
        "settings": dict(
            n_features=D,
            noise=NOISE,
            sequence_length=L,
            temperature=LAMBDA,
            n_sequences=N_SEQUENCES,
            lengths=lengths,
        ),
        "claims": claims,
        "data": dict(
            risk={str(k): v["risk"] for k, v in mc.items()},
            risk_theory={
                str(k): float(theory.oracle_risk(NOISE, LAMBDA, k, n_features=D)) for k in lengths
            },
            conditional_variance={str(D): var, str(D_HIGH): var_high},
            conditional_variance_theory={str(k): v for k, v in var_theory.items()},
            conditional_variance_theory_long={str(k): v for k, v in var_long.items()},
            unbiased_scale=scale,
        ),
    },
    timer,
)
