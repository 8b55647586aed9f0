"""
Which one when: AttentionClustering, KMeans and GaussianMixture side by side
============================================================================

The README's "When to use it" table, shown on data. Five small data sets
in two dimensions, so that the plots show them as they are, each clustered
by :class:`~attention_cluster.AttentionClustering` at its defaults,
:class:`~sklearn.cluster.KMeans` (``n_init=10``),
:class:`~sklearn.mixture.GaussianMixture` at scikit-learn's defaults (full
covariances), and AttentionClustering after a
:class:`~sklearn.preprocessing.Normalizer` (the table's advice when the
clusters are directions and the norms carry none). Each panel's title gives the adjusted Rand index (ARI)
against the true clusters, and a mark when the estimator warned.

1. ``make_blobs``: three round blobs of equal spread, the textbook case;
   three clusters in two dimensions is more clusters than features, outside
   the paper's model (the estimator then starts from seeds among the rows
   and gives each centre its own norm);
2. anisotropic blobs: the same blobs sheared, elongated clusters;
3. blobs of different spreads;
4. directions: two clusters of rows along two directions from the origin,
   each row with a random norm; the clusters are the directions, the norms
   carry no cluster;
5. uncentred data: three blobs far from the origin, as embeddings and
   TF-IDF rows are (they share a common direction).
"""

# %%
# Five data sets and three estimators
# -----------------------------------

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

from attention_cluster import AttentionClustering

N = 1000
rng = np.random.default_rng(0)
X_blobs, y_blobs = make_blobs(N, centers=3, random_state=170)
angles = np.array([0.3, 1.5])
y_dir = rng.integers(2, size=N)
theta = angles[y_dir] + 0.12 * rng.standard_normal(N)
radius = rng.lognormal(mean=0.0, sigma=0.8, size=N)
datasets = {
    "1. blobs": (X_blobs, y_blobs),
    "2. anisotropic blobs": (X_blobs @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y_blobs),
    "3. different spreads": make_blobs(N, cluster_std=[1.0, 2.5, 0.5], random_state=170),
    "4. directions, any norm": (radius[:, None] * np.c_[np.cos(theta), np.sin(theta)], y_dir),
    "5. far from the origin": make_blobs(
        N, centers=[[9.0, 10.0], [11.0, 10.0], [10.0, 12.0]], cluster_std=0.4, random_state=0
    ),
}
estimators = {
    "AttentionClustering": lambda K: AttentionClustering(K, random_state=0),
    "KMeans": lambda K: KMeans(K, n_init=10, random_state=0),
    "GaussianMixture": lambda K: GaussianMixture(K, random_state=0),
    "Normalizer + AttentionClustering": lambda K: make_pipeline(
        Normalizer(), AttentionClustering(K, random_state=0)
    ),
}

results = {}
for data, (X, y) in datasets.items():
    K = len(np.unique(y))
    for name, make in estimators.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            labels = make(K).fit_predict(X)
        messages = [str(w.message) for w in caught]
        results[data, name] = (labels, adjusted_rand_score(y, labels), messages)

short = {"Normalizer + AttentionClustering": "after Normalizer"}
print(f"{'':26s}" + "".join(f"{short.get(name, name):>20s}" for name in estimators))
for data in datasets:
    print(f"{data:26s}" + "".join(f"{results[data, name][1]:20.2f}" for name in estimators))
X_dir, y_dir = datasets["4. directions, any norm"]
solver_alone = AttentionClustering(2, refine=None, random_state=0).fit_predict(X_dir)
print(
    "\n4. directions, AttentionClustering's attention solver alone (refine=None): "
    f"ARI {adjusted_rand_score(y_dir, solver_alone):.2f}"
)
print("\nAttentionClustering's warnings:")
for data in datasets:
    for message in results[data, "AttentionClustering"][2]:
        print(f"  {data}: {message[:150]}...")

# %%
# The clusterings
# ---------------
# One row per data set, one column per estimator; the cross marks the
# origin, through which AttentionClustering's heads pass.

fig, axes = plt.subplots(len(datasets), len(estimators), figsize=(11, 13), layout="constrained")
for row, (data, (X, _)) in zip(axes, datasets.items()):
    for ax, name in zip(row, estimators):
        labels, ari, messages = results[data, name]
        ax.scatter(X[:, 0], X[:, 1], c=labels, s=2, cmap="tab10", vmax=9)
        ax.plot(0, 0, "k+", ms=10)
        title = name.replace(" + ", " +\n")
        ax.set_title(f"{title}\nARI {ari:.2f}" + (" (warned)" if messages else ""), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    row[0].set_ylabel(data)
plt.show()

# %%
# What the figure says
# --------------------
# - **Round blobs** (1): all three find them. With more clusters than
#   features AttentionClustering starts from seeds among the rows, as
#   k-means++ does, and fits each centre as a point (one norm per centroid).
# - **Elongated clusters and different spreads** (2, 3): GaussianMixture
#   with full covariances fits the shapes; AttentionClustering, whose
#   mixture has one spherical variance, does no better than KMeans there.
#   This is also what happens on scikit-learn's tabular data sets after a
#   StandardScaler (:doc:`/user_data`): GaussianMixture with full
#   covariances leads on iris and breast_cancer.
# - **Directions** (4): the clusters are rays from the origin and the norms
#   spread along them, over a factor of ten: KMeans cuts the rays by norm;
#   GaussianMixture's full covariances can stretch along a ray, but whether
#   its fit does depends on its start (with 1500 rows of the same data it
#   cut them by norm too). AttentionClustering at its defaults cuts them by
#   norm as well, and warns that a cluster was lost: its EM refinement fits
#   round clusters around points, and such rays are fitted better, as a
#   mixture, by one component for the short rows and one for the long. Its
#   attention solver alone (``refine=None``), which reads the directions of
#   the second moment, separates the rays (printed above), and so
#   does the estimator after a Normalizer, which keeps only the directions:
#   the README's advice for clusters that are directions whose norms carry
#   nothing.
# - **Far from the origin** (5): AttentionClustering sees the common mean,
#   centres the data and says so in a warning; KMeans, GaussianMixture and
#   it find the blobs.
# - **The Normalizer** is no default: it throws away the rows' positions,
#   which tell the clusters apart in 1, 3 and 5 (on the elongated clusters of
#   2 it happens to cost nothing).
#
# The README's table and the user guide's :doc:`/user_guide/when_to_use`
# give the same advice in words.
