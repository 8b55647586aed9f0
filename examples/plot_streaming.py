"""
A stream of batches: partial_fit against MiniBatchKMeans
========================================================

The task: the data arrive in batches (a log, a sensor, a crawl) and are not
kept. scikit-learn's answer is :meth:`sklearn.cluster.MiniBatchKMeans.partial_fit`:
one call per batch, the centres updated each time.
:meth:`attention_cluster.AttentionClustering.partial_fit` keeps the same
contract (the first call fits the batch, each later call is one update,
``n_steps_`` counts them, ``labels_`` labels the last batch only).

Here the stream is the paper's mixture with three clusters in dimension 10
at noise 0.6 (high interference, where estimates differ), in batches of
500 rows. After each batch, both estimators label a held-out set drawn
from the same mixture and their centres are compared with the true
centroids (the distance of :func:`attention_cluster.metrics.centroid_distance`,
between directions). The fit of the whole stream held in memory, and the
true-label class means, are the references.
"""

# %%
# The stream and the two learners
# -------------------------------

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance

K, D, NOISE = 3, 10, 0.6
N_BATCHES, BATCH = 40, 500
X_all, y_all, centroids = make_mixture((N_BATCHES + 4) * BATCH, D, K, noise=NOISE, random_state=0)
X_test, y_test = X_all[-4 * BATCH :], y_all[-4 * BATCH :]
batches = np.array_split(X_all[: N_BATCHES * BATCH], N_BATCHES)

stream = AttentionClustering(K, random_state=0)
minibatch = MiniBatchKMeans(K, random_state=0)
curves = {"AttentionClustering.partial_fit": [], "MiniBatchKMeans.partial_fit": []}
seconds = dict.fromkeys(curves, 0.0)
for batch in batches:
    for name, model in zip(curves, (stream, minibatch)):
        start = time.perf_counter()
        model.partial_fit(batch)
        seconds[name] += time.perf_counter() - start
        curves[name].append(
            (
                adjusted_rand_score(y_test, model.predict(X_test)),
                centroid_distance(model.cluster_centers_, centroids),
            )
        )
print(f"after {stream.n_steps_} batches of {BATCH} rows:")
for name, curve in curves.items():
    ari, distance = curve[-1]
    print(f"  {name:32s} ARI {ari:.3f}  distance {distance:.4f}  ({seconds[name]:.2f} s in all)")

# %%
# References: the whole stream in memory
# --------------------------------------
# What one would get by keeping every batch: ``fit`` of
# AttentionClustering and of KMeans on all the rows, and the class means of
# the true labels (a reference that is told the labels).

X_seen = X_all[: N_BATCHES * BATCH]
y_seen = y_all[: N_BATCHES * BATCH]
in_memory = {
    "AttentionClustering.fit": AttentionClustering(K, random_state=0).fit(X_seen),
    "KMeans.fit": KMeans(K, random_state=0).fit(X_seen),
}
class_means = np.array([X_seen[y_seen == k].mean(axis=0) for k in range(K)])
references = {
    name: (
        adjusted_rand_score(y_test, model.predict(X_test)),
        centroid_distance(model.cluster_centers_, centroids),
    )
    for name, model in in_memory.items()
}
references["class means"] = (np.nan, centroid_distance(class_means, centroids))
for name, (ari, distance) in references.items():
    print(f"  {name:32s} ARI {ari:.3f}  distance {distance:.4f}")

# %%
# After each batch
# ----------------
# Left: ARI on the held-out set. Right: distance of the centres' directions
# to the true centroids (log scale), with the in-memory fits and the class
# means as horizontal lines.

steps = np.arange(1, N_BATCHES + 1)
fig, (ax_ari, ax_dist) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
for i, (name, curve) in enumerate(curves.items()):
    curve = np.array(curve)
    ax_ari.plot(steps, curve[:, 0], color=f"C{i}", label=name)
    ax_dist.plot(steps, curve[:, 1], color=f"C{i}", label=name)
styles = {"AttentionClustering.fit": "C0", "KMeans.fit": "C1", "class means": "k"}
for name, (ari, distance) in references.items():
    if np.isfinite(ari):
        ax_ari.axhline(ari, color=styles[name], ls=":", label=name)
    ax_dist.axhline(distance, color=styles[name], ls=":", label=name)
ax_ari.set_xlabel("batches seen")
ax_ari.set_ylabel("held-out ARI")
ax_ari.legend(fontsize=8)
ax_dist.set_xlabel("batches seen")
ax_dist.set_ylabel("distance to the true centroids")
ax_dist.set_yscale("log")
ax_dist.legend(fontsize=8)
plt.show()

# %%
# What to take from it
# --------------------
# At this noise the partial fit's labels and centres approach those of the
# fit of the whole stream held in memory as the batches add up (the
# distances above); MiniBatchKMeans'
# centres are KMeans' (cluster means, biased towards each other where
# clusters overlap), which is why its distance to the centroids levels off
# higher even though its labels are close. :doc:`/scaling_out` measures the
# one-pass accuracy over noise levels against the in-memory fit and the
# limit of an estimator that does not know the labels.
