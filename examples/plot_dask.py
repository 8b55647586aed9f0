"""
Fitting on Dask: a LocalCluster, lazy labels and the log of passes
==================================================================

The task: data in a Dask array, too large for one machine's memory or
already spread over a cluster. :class:`~attention_cluster.AttentionClustering`
fits a Dask array where it lives: every pass over the data is one Dask
computation whose blocks return small sums (K x d, d x d at most), and
``predict`` returns a lazy Dask array. The peer a Dask user would try is
``dask_ml.cluster.KMeans``.

This example starts a :class:`distributed.LocalCluster` (two workers, in
this process: ``processes=False`` keeps the example self-contained; a real
cluster is a ``Client("tcp://scheduler:8786")`` away and the code does not
change), draws the paper's mixture on the workers, block by block, so the
rows never pass through the client, and closes the cluster at the end.
The sizes are small, so that the docs build runs it in seconds:
:doc:`/scaling_out` goes to 10\\ :sup:`8` rows from disk.
"""

# %%
# A cluster, and data drawn on its workers
# ----------------------------------------

import contextlib
import io
import re
import time
import warnings

import dask
import dask.array as da
import matplotlib.pyplot as plt
from distributed import Client, LocalCluster
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering, warm_up
from attention_cluster.datasets import make_centroids, make_mixture

N_BLOCKS, BLOCK, D, K, NOISE = 4, 25000, 10, 3, 0.5
centroids = make_centroids(K, D, random_state=0)


def block(seed):
    """One block of rows of the mixture and its labels, drawn where it runs."""
    X, y, _ = make_mixture(BLOCK, D, K, noise=NOISE, centroids=centroids, random_state=seed)
    return X, y


cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
client = Client(cluster)
parts = [dask.delayed(block)(seed) for seed in range(N_BLOCKS)]
X = da.concatenate([da.from_delayed(p[0], (BLOCK, D), float) for p in parts])
y = da.concatenate([da.from_delayed(p[1], (BLOCK,), int) for p in parts])
# Held in the workers' memory once, for everything below that reads it (a
# fit alone keeps an X that takes at most a quarter of the workers' memory
# there for its own passes, and releases it when it returns).
X, y = dask.persist(X, y)
print(f"{len(client.nthreads())} workers; the data: {X}")

# %%
# Fit, with the log of passes
# ---------------------------
# ``verbose=1`` prints each pass over the Dask array (one Dask computation
# each) with its wall time, and the solver's and the EM refinement's
# progress. The solver works on a subsample pulled to the client; the EM
# refinement then takes a few passes over all rows. ``warm_up(client)``
# first loads the Numba kernels, here and on the workers, which a
# long-running program pays once (the performance page, "Cold start").

warm_up(client, n_features=D, n_clusters=K)
log = io.StringIO()
start = time.perf_counter()
with contextlib.redirect_stdout(log):
    model = AttentionClustering(K, random_state=0, verbose=1).fit(X)
fit_seconds = time.perf_counter() - start
print(log.getvalue())
print(f"fit: {fit_seconds:.2f} s")

# %%
# Lazy labels
# -----------
# ``predict`` (and ``labels_``) return a Dask array: nothing is computed
# until it is asked for, here together with the true labels.

labels = model.predict(X)
print(labels)
labels, truth = dask.compute(labels, y)
ari = {"AttentionClustering (Dask)": adjusted_rand_score(truth, labels)}
seconds = {"AttentionClustering (Dask)": fit_seconds}

# %%
# The peers: dask-ml's KMeans, and the same fit in memory
# -------------------------------------------------------
# ``dask_ml.cluster.KMeans`` at its defaults but for two rounds of its
# k-means|| start (``init_max_iter=2``; its default start takes longer than
# this page should). The in-memory fit of the computed array is the
# reference the Dask fit should match.

from dask_ml.cluster import KMeans as DaskKMeans  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # dask-ml's own deprecation notices
    start = time.perf_counter()
    kmeans = DaskKMeans(n_clusters=K, init_max_iter=2, random_state=0).fit(X)
    seconds["dask_ml KMeans"] = time.perf_counter() - start
    ari["dask_ml KMeans"] = adjusted_rand_score(truth, kmeans.labels_.compute())

X_local = X.compute()
start = time.perf_counter()
local = AttentionClustering(K, random_state=0).fit(X_local)
seconds["AttentionClustering (in memory)"] = time.perf_counter() - start
ari["AttentionClustering (in memory)"] = adjusted_rand_score(truth, local.labels_)
print(
    "in-memory and Dask fits give the same labels on "
    f"{(local.labels_ == labels).mean():.1%} of the rows"
)
for name in ari:
    print(f"{name:34s} ARI {ari[name]:.3f}  {seconds[name]:6.2f} s")

client.close()
cluster.close()

# %%
# Passes and times
# ----------------
# Left: the wall time of each pass of the Dask fit, read from the log
# above. Right: fit time and ARI of the three fits (single runs on a
# shared machine; :doc:`/scaling_out` measures the scaling).

passes = re.findall(r"Dask pass (\d+)(?:, read \d+ of X)? \((.+?)\): ([0-9.e-]+) s", log.getvalue())
fig, (ax_pass, ax_fit) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
ax_pass.barh([f"{number}. {name}" for number, name, _ in passes], [float(t) for *_, t in passes])
ax_pass.invert_yaxis()
ax_pass.set_xlabel("wall time (s)")
ax_pass.set_title(f"{len(passes)} passes over the Dask array")
names = list(ari)
ax_fit.barh(names, [seconds[n] for n in names], color=["C0", "C1", "C2"])
for i, n in enumerate(names):
    ax_fit.text(seconds[n], i, f"  ARI {ari[n]:.2f}", va="center")
ax_fit.invert_yaxis()
ax_fit.set_xlim(right=1.4 * max(seconds.values()))
ax_fit.set_xlabel("fit time (s)")
ax_fit.set_title(f"n = {N_BLOCKS * BLOCK}, d = {D}, K = {K}")
plt.show()

# %%
# What to take from it
# --------------------
# The Dask fit gives the in-memory fit's labels. At this size its time is
# mostly the scheduler's cost of a few computations, so the in-memory fit
# is far faster: Dask pays off when the rows do not fit in one machine's
# memory or already live on a cluster, which :doc:`/scaling_out` measures
# (10\ :sup:`8` rows from disk, and dask-ml's KMeans at 2 x 10\ :sup:`7`).
