"""
A two-dimensional illustration: inputs and outputs of the trained layer
=======================================================================

The authors' answers promise "a 2-dimensional illustration showing the
input data (two point clouds around their cluster centers) and the
corresponding outputs of the trained attention layers, which form
flattened point clouds, illustrating how the attention model performs
approximate quantization".

This script trains the two heads by PSGD (random start, pairwise
regulariser, the settings of Figure 2b) on a two-cluster mixture with
sigma = 0.3, then applies the trained layer ``T(X)_l = (2 lambda / L)
sum_h sum_k <X_l, mu_h><mu_h, X_k> X_k`` to five fresh sequences of
``L = 100`` tokens, and draws inputs and outputs:

- in dimension 2 (centroids ``e_1``, ``e_2``), as the answers describe;
- in dimension 10 (centroids ``e_1``, ``e_2``), in the plane spanned by the
  line between the centroids, ``(e_1 - e_2) / sqrt(2)``, and a direction
  orthogonal to both, ``e_3``.

The flattening is measured, per cluster, as the variance of the outputs
along the second axis of the plot over that of the inputs.
"""

# %%
# Training and outputs
# --------------------

import _figures as F
import matplotlib.pyplot as plt
import numpy as np

from attention_cluster.datasets import make_sequences
from attention_cluster.layers import linear_attention
from attention_cluster.metrics import centroid_distance

timer = F.Timer()
N_ITER = 1500 if F.quick() else 10000
NOISE, REG_STRENGTH, N_SEQUENCES = 0.3, 0.1, 5
panels = {}
for d in (2, 10):
    E = np.eye(d)
    C = E[:2]
    r = F.experiment(
        NOISE,
        n_iter=N_ITER,
        record=np.array([0, N_ITER]),
        n_features=d,
        centroids=C,
        regularization="pairwise",
        reg_strength=REG_STRENGTH,
        n_runs=1,
        population_runs=0,
        desc=f"2-D illustration, d={d}",
    )
    heads, lam = r["heads"][0], r["temperature"]
    X, y, _ = make_sequences(
        N_SEQUENCES, F.SEQUENCE_LENGTH, d, 2, noise=NOISE, centroids=C, random_state=d
    )
    T = linear_attention(X, heads, temperature=lam)
    # Plot axes: the line between the centroids, then the second axis.
    axis1 = (C[0] - C[1]) / np.sqrt(2.0)
    axis2 = (C[0] + C[1]) / np.sqrt(2.0) if d == 2 else E[2]
    basis = np.array([axis1, axis2])
    X2, T2, y2 = (X.reshape(-1, d) @ basis.T, T.reshape(-1, d) @ basis.T, y.ravel())
    ratio = np.mean([np.var(T2[y2 == c, 1]) / np.var(X2[y2 == c, 1]) for c in range(2)])
    panels[d] = dict(
        X=X2,
        T=T2,
        y=y2,
        centroids=C @ basis.T,
        heads=heads @ basis.T,
        ratio=float(ratio),
        distance=centroid_distance(heads, C),
        temperature=lam,
    )

# %%
# The two panels
# --------------

fig, axes = plt.subplots(1, 2, figsize=(11, 5), layout="constrained")
labels = {
    2: ("(e1 - e2) / sqrt 2", "(e1 + e2) / sqrt 2"),
    10: ("(e1 - e2) / sqrt 2", "e3 (noise direction)"),
}
for ax, (d, p) in zip(axes, panels.items()):
    for c, color in zip(range(2), ("tab:blue", "tab:red")):
        ax.scatter(
            *p["X"][p["y"] == c].T, s=8, color=color, alpha=0.25, label=f"inputs, cluster {c}"
        )
        ax.scatter(
            *p["T"][p["y"] == c].T, s=8, color=color, marker="x", label=f"outputs, cluster {c}"
        )
    ax.scatter(
        *p["centroids"].T,
        s=150,
        facecolors="none",
        edgecolors="k",
        linewidths=1.5,
        label="centroids",
    )
    for h in p["heads"]:
        ax.annotate(
            "", xy=h, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="tab:green", lw=2)
        )
    ax.set_xlabel(labels[d][0])
    ax.set_ylabel(labels[d][1])
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(f"d = {d}: output/input variance on the second axis {p['ratio']:.2f}")
axes[0].legend(fontsize="x-small", loc="lower left")
fig.suptitle(
    f"Inputs and outputs of the trained layer (sigma = {NOISE}, L = {F.SEQUENCE_LENGTH}; arrows: heads)"
)

# %%
# Claims
# ------
# With as many heads as dimensions, the two orthonormal heads span the whole
# plane: ``U U^T = I`` and ``T(X)_l = lambda K (S / L) X_l``, which is close
# to ``X_l`` at the unbiased temperature: the layer reconstructs the plane
# rather than quantising it. The flattening of Figures 3-4 is the removal of
# the ``d - K`` directions the heads do not span.

for d, p in panels.items():
    print(
        f"d={d}: heads at distance {F.fmt(p['distance'])}, variance ratio on the second axis {p['ratio']:.3f}"
    )
claims = [
    F.claim(
        f"illustration-d{d}",
        "rebuttal",
        f"The trained layer's outputs form flattened clouds, d = {d}"
        + (" (the answers' 2-D illustration)" if d == 2 else " (seen across a noise direction)"),
        "outputs of the trained layer form flattened point clouds",
        f"output/input variance across the line between the centroids: {p['ratio']:.3f} "
        f"(heads at distance {F.fmt(p['distance'])} from the centroids)",
        p["ratio"] < 0.5,
        "variance ratio below 0.5",
        "With d = K the heads span the whole space and the layer is close to the identity: in a "
        "2-D mixture the outputs are not flattened. They are in higher dimension, across the "
        "directions the heads do not span (right panel; Figures 3-4)."
        if d == 2
        else "",
    )
    for d, p in panels.items()
]

F.finish(
    "illustration_2d",
    fig,
    {
        "title": "A two-dimensional illustration",
        "settings": dict(
            noise=NOISE,
            reg_strength=REG_STRENGTH,
            sequence_length=F.SEQUENCE_LENGTH,
            n_sequences=N_SEQUENCES,
            n_iter=N_ITER,
        ),
        "claims": claims,
        "data": {
            str(d): dict(ratio=p["ratio"], distance=p["distance"], temperature=p["temperature"])
            for d, p in panels.items()
        },
    },
    timer,
)
