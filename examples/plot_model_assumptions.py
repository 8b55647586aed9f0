"""
When the model fits the data, and when it does not
==================================================

:class:`~attention_cluster.AttentionClustering` clusters by direction: a
head ``mu`` scores a pair of points by ``<x_l, mu> <mu, x_k>``, and a point
goes to the head it is most aligned with. The paper's model has this
shape: clusters around unit centroids that are orthogonal, i.e. directions
through the origin. This example draws five data sets in dimension 10,
with the centroids in the plane of the first two coordinates (so the plots
show the origin and the clusters as they are), and compares
AttentionClustering at its defaults, the paper's estimator alone (the
attention layer's heads, directions from the origin: ``center=False,
refine=None``), AttentionClustering after a
:class:`~sklearn.preprocessing.Normalizer`, and :class:`~sklearn.cluster.KMeans`:

1. the paper's model: orthogonal unit centroids;
2. the same directions, each point multiplied by a random positive radius:
   the clusters are directions, their norms are noise;
3. two clusters in the same direction at different norms;
4. two clusters away from the origin, seen from it under a small angle;
5. two clusters on opposite sides of the origin.
"""

# %%
# Five data sets
# --------------

import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture

QUICK = bool(os.environ.get("ATTENTION_CLUSTER_QUICK"))
N_SAMPLES = 2000 if QUICK else 20000
N_FEATURES = 10
NOISE = 0.3
rng = np.random.default_rng(0)
e1, e2 = np.eye(N_FEATURES)[:2]


def mixture(centroids):
    return make_mixture(
        N_SAMPLES, N_FEATURES, len(centroids), noise=NOISE, centroids=centroids, random_state=0
    )[:2]


X_dir, y_dir = mixture([e1, e2])
radius = rng.lognormal(mean=0.0, sigma=1.0, size=(N_SAMPLES, 1))
datasets = {
    "1. orthogonal directions": (X_dir, y_dir),
    "2. directions, random norms": (radius * X_dir, y_dir),
    "3. one direction, two norms": mixture([e1, 3 * e1]),
    "4. away from the origin": mixture([4 * e1 + e2, 4 * e1 - e2]),
    "5. opposite directions": mixture([e1, -e1]),
}

models = {
    "AttentionClustering": lambda: AttentionClustering(2, random_state=0),
    "attention layer alone": lambda: AttentionClustering(
        2, center=False, refine=None, random_state=0
    ),
    "Normalizer + AttentionClustering": lambda: make_pipeline(
        Normalizer(), AttentionClustering(2, random_state=0)
    ),
    "KMeans": lambda: KMeans(2, n_init=1, random_state=0),
}

# %%
# Adjusted Rand index of each method
# ----------------------------------
# 1 is a perfect labelling, 0 is chance.

labels = {}
print(f"{'':30s}" + "".join(f"{name:>34s}" for name in models))
for data_name, (X, y) in datasets.items():
    row = []
    for model_name, make in models.items():
        labels[data_name, model_name] = make().fit_predict(X)
        row.append(adjusted_rand_score(y, labels[data_name, model_name]))
    print(f"{data_name:30s}" + "".join(f"{ari:34.3f}" for ari in row))

# %%
# What each method sees
# ---------------------
# Points in the plane of the centroids, one row per method, coloured by its
# labels; the black cross is the origin.
#
# - 1: every method finds the clusters.
# - 2: the norms spread the clusters along rays. KMeans, which compares
#   distances, cuts the rays by norm. The attention layer alone is
#   unreliable: its risk is a polynomial of degree six in the data, so the
#   few rows of large norm dominate it. The default estimator's EM
#   refinement labels by direction and finds the clusters, as does the
#   layer after a Normalizer, which puts every point on the sphere.
# - 3 and 4: the clusters differ by position, not by direction from the
#   origin, and the attention layer alone cannot tell them apart. Their
#   common mean dominates the second moment, so the default
#   (``center="auto"``) subtracts it, says so in a warning, and finds the
#   clusters as directions from the mean (the centred centres lie at one
#   distance from it, and the fit keeps their norms equal or nearly so). A
#   Normalizer destroys the difference in 3:
#   both clusters become one direction.
# - 5: one axis through the origin carries both clusters. The attention
#   layer's heads are axes (defined up to sign) and both lie near that one,
#   so whether its labels split the two sides depends on the draw; the EM
#   refinement's centroids are vectors, not axes, and separate them.

fig, axes = plt.subplots(len(models), len(datasets), figsize=(15, 12), layout="constrained")
for col, (data_name, (X, y)) in enumerate(datasets.items()):
    for row, model_name in enumerate(models):
        ax = axes[row, col]
        lab = labels[data_name, model_name]
        ax.scatter(X[:, 0], X[:, 1], c=lab, s=2, alpha=0.3, cmap="coolwarm")
        ax.scatter([0], [0], marker="+", s=150, c="k")
        ax.set_title(
            f"{data_name}\n{model_name}: ARI {adjusted_rand_score(y, lab):.2f}",
            fontsize="small",
        )
        # Frame the origin and the bulk of the points (data set 2 has a long tail).
        lo, hi = np.percentile(X[:, :2], [0.5, 99.5], axis=0)
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
        pad = 0.1 * (hi - lo)
        ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
        ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
        ax.set_aspect("equal", adjustable="box")
plt.show()
