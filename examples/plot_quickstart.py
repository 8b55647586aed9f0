"""
Quick start: attention heads and KMeans on the paper's mixture
==============================================================

Draw the two-cluster Gaussian mixture of the paper (orthogonal unit
centroids in dimension 10) at low and high interference, fit
:class:`~attention_cluster.AttentionClustering` and
:class:`~sklearn.cluster.KMeans` on the same data, and compare them:
labels against the true components (adjusted Rand index), centroids
against the true ones (the distance of the paper's section 3.2, up to
relabelling and sign). The plot shows the data in a 2-D PCA plane, the
learned heads as arrows from the origin, and the KMeans centres.

Run ``python examples/plot_quickstart.py --save`` to also write the figure
to ``docs/_static/headline.png`` (the figure of the README).
"""

# %%
# Data and models
# ---------------
# ``ATTENTION_CLUSTER_QUICK`` selects a smaller data set (the docs build sets
# it). At either size the default fit runs the exact solver, then the EM
# refinement, on all rows (``solver="auto"`` is ``"full"`` at every n).

import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance

QUICK = bool(os.environ.get("ATTENTION_CLUSTER_QUICK"))
N_SAMPLES = 2000 if QUICK else 20000
N_FEATURES, N_CLUSTERS = 10, 2
NOISES = (0.3, 1.0)  # the paper's low- and high-interference settings

results = []
for noise in NOISES:
    X, y, centroids = make_mixture(N_SAMPLES, N_FEATURES, N_CLUSTERS, noise=noise, random_state=0)
    attention = AttentionClustering(N_CLUSTERS, random_state=0).fit(X)
    kmeans = KMeans(N_CLUSTERS, n_init=1, random_state=0).fit(X)
    # The rule argmax_c <x, mu*_c> with the true centroids: the best any
    # direction-based labelling can do.
    oracle = np.argmax(X @ centroids.T, axis=1)
    results.append((noise, X, y, centroids, attention, kmeans, oracle))
    print(f"sigma = {noise}, n = {N_SAMPLES}")
    print(f"  {'':22s} {'ARI':>6s} {'distance to centroids':>22s}")
    for name, labels, centers in [
        ("AttentionClustering", attention.labels_, attention.cluster_centers_),
        ("KMeans", kmeans.labels_, kmeans.cluster_centers_),
        ("oracle rule", oracle, centroids),
    ]:
        ari = adjusted_rand_score(y, labels)
        print(f"  {name:22s} {ari:6.3f} {centroid_distance(centers, centroids):22.2e}")

# %%
# The heads are the centroids' directions
# ---------------------------------------
# The plane is that of the two principal axes of the uncentred second
# moment ``mean x x^T`` (a PCA without centring), the matrix the model's
# risk is built from: its top eigenvectors span the centroids, and the
# origin, through which the heads pass, stays at the origin. The heads are
# unit vectors drawn as arrows from it.

fig, axes = plt.subplots(1, len(NOISES), figsize=(9, 4.2), layout="constrained")
for ax, (noise, X, y, centroids, attention, kmeans, _) in zip(axes, results):
    pca = TruncatedSVD(n_components=2, algorithm="arpack", random_state=0).fit(X)
    Z = pca.transform(X)
    ax.scatter(Z[:, 0], Z[:, 1], c=attention.labels_, s=3, alpha=0.3, cmap="coolwarm")
    true = pca.transform(centroids)
    ax.scatter(
        true[:, 0],
        true[:, 1],
        marker="o",
        s=160,
        facecolors="none",
        edgecolors="k",
        linewidths=1.5,
        label="true centroids",
        zorder=3,
    )
    for head in pca.transform(attention.cluster_centers_):
        ax.annotate(
            "",
            xy=head,
            xytext=(0.0, 0.0),
            arrowprops=dict(arrowstyle="-|>", lw=2, color="tab:green"),
            zorder=4,
        )
    ax.plot([], [], color="tab:green", lw=2, label="attention heads")
    km = pca.transform(kmeans.cluster_centers_)
    ax.scatter(
        km[:, 0],
        km[:, 1],
        marker="x",
        s=120,
        lw=2.5,
        c="tab:orange",
        label="KMeans centres",
        zorder=5,
    )
    ax.set_title(
        f"sigma = {noise}: ARI {adjusted_rand_score(y, attention.labels_):.3f} "
        f"(KMeans {adjusted_rand_score(y, kmeans.labels_):.3f})"
    )
    ax.set_xlabel("axis 1")
    ax.set_ylabel("axis 2")
    ax.set_aspect("equal", adjustable="datalim")
axes[0].legend(loc="lower left", fontsize="small")
fig.suptitle(f"AttentionClustering on the paper's mixture (d = {N_FEATURES}, n = {N_SAMPLES})")

if "--save" in sys.argv[1:]:
    out = Path(__file__).resolve().parents[1] / "docs" / "_static" / "headline.png"
    fig.savefig(out, dpi=100)
    print(f"saved {out}")
plt.show()
