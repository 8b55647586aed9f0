"""
Choosing the number of clusters: the dynamics, BIC, and KMeans' elbow
=====================================================================

The task: clusters are there, but how many? Three answers, on the paper's
mixture with four clusters in dimension 10 at noise 0.5 (the setting of
:doc:`/choose_k` and :doc:`/dynamics`, where each is measured over seeds):

- :class:`~attention_cluster.SelfAttentionDynamics` lets the tokens move
  under self-attention until they gather; the number of clusters is read
  off the staircase of the number of groups against time, with no K given;
- :class:`~attention_cluster.AttentionClustering` fitted for each candidate
  K, keeping the K of the lowest Bayesian information criterion
  (:meth:`~attention_cluster.AttentionClustering.bic`, the fitted
  mixture's);
- the peers a user would try: the BIC of
  :class:`~sklearn.mixture.GaussianMixture` (``covariance_type="spherical"``,
  the covariance of the paper's mixture; scikit-learn's default full
  covariances pay ``d (d + 1) / 2`` parameters per cluster), and the
  "elbow" of :class:`~sklearn.cluster.KMeans`' inertia, which has no
  minimum to read.
"""

# %%
# The data and the dynamics
# -------------------------

import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture

from attention_cluster import AttentionClustering, SelfAttentionDynamics, choose_n_clusters
from attention_cluster.datasets import make_mixture

TRUE_K = 4
X, y, _ = make_mixture(2000, 10, TRUE_K, noise=0.5, random_state=0)

start = time.perf_counter()
dynamics = SelfAttentionDynamics(random_state=0).fit(X)
print(
    f"SelfAttentionDynamics: {dynamics.n_clusters_} clusters, stopped at step "
    f"{dynamics.stopping_step_} ({time.perf_counter() - start:.1f} s, Numba compilation "
    f"included), ARI {adjusted_rand_score(y, dynamics.labels_):.2f}"
)

# %%
# One fit per candidate K
# -----------------------
# An over-specified K may warn: the fit finds clusters nearly empty and
# centres the data to look for more, or a solver stops short of its tolerance.
# Those warnings are themselves a sign that K is too large; they are
# counted here, and the criteria read all the same.

CANDIDATES = np.arange(1, 9)
bic, bic_gmm, inertia, fits = [], [], [], {}
warned = {}
for k in CANDIDATES:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fits[k] = AttentionClustering(k, random_state=0).fit(X)
        warned[k] = len(caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        bic.append(fits[k].bic(X))
        gmm = GaussianMixture(k, covariance_type="spherical", random_state=0).fit(X)
        bic_gmm.append(gmm.bic(X))
        inertia.append(KMeans(k, random_state=0).fit(X).inertia_)
best = int(CANDIDATES[np.argmin(bic)])
best_gmm = int(CANDIDATES[np.argmin(bic_gmm)])
print("warnings of AttentionClustering per K:", {int(k): n for k, n in warned.items()})
print(f"lowest BIC: AttentionClustering K = {best}, GaussianMixture(spherical) K = {best_gmm}")
print(f"ARI of AttentionClustering at K = {best}: {adjusted_rand_score(y, fits[best].labels_):.2f}")

# %%
# The automatic choice
# --------------------
# ``AttentionClustering(n_clusters="auto")`` replaces the loop above: it
# takes the dynamics' K (on at most 2000 rows), fits at that K and at its
# two neighbours, and keeps a neighbour only when the silhouette of its
# labels on the sphere is clearly higher (:doc:`/choose_k`, "The
# criterion"). :func:`~attention_cluster.choose_n_clusters` returns the
# silhouettes it compared.

auto = AttentionClustering("auto", random_state=0).fit(X)
choice = choose_n_clusters(X, AttentionClustering(random_state=0))
print(
    f'n_clusters="auto": K = {auto.n_clusters_}, ARI {adjusted_rand_score(y, auto.labels_):.2f}; '
    "silhouettes compared: "
    + ", ".join(f"K = {k}: {s:.3f}" for k, s in choice.silhouettes.items() if s is not None)
)

# %%
# The criteria's curves
# ---------------------
# Left: the dynamics' number of groups at each step (a staircase; the
# chosen stopping time is the end of its longest plateau). Middle: BIC
# against K for both mixtures, lowest at the marked K; the two curves are
# close because both fit spherical clusters. Right: KMeans' inertia, which
# decreases with K; its bend at the true K is visible here, but there is no
# rule in it to read.

fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), layout="constrained")
ax = axes[0]
path = dynamics.n_clusters_path_
ax.step(np.arange(len(path)), path, where="post")
ax.axvline(dynamics.stopping_step_, color="k", ls=":", label="stopping step")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("number of groups")
ax.set_title(f"SelfAttentionDynamics: {dynamics.n_clusters_} clusters")
ax.legend()
ax = axes[1]
ax.plot(CANDIDATES, bic, "o-", label="AttentionClustering")
ax.plot(CANDIDATES, bic_gmm, "s--", label="GaussianMixture(spherical)")
ax.plot(best, min(bic), "k*", ms=14, label=f"lowest: K = {best}")
ax.axvline(TRUE_K, color="grey", lw=0.8)
ax.set_xlabel("K")
ax.set_ylabel("BIC (lower is better)")
ax.set_title("BIC over K")
ax.legend(fontsize=8)
ax = axes[2]
ax.plot(CANDIDATES, inertia, "o-", color="C2")
ax.axvline(TRUE_K, color="grey", lw=0.8)
ax.set_xlabel("K")
ax.set_ylabel("inertia")
ax.set_title("KMeans: the elbow")
plt.show()

# %%
# How often each finds K
# ----------------------
# One data set proves little: :doc:`/choose_k` counts how often BIC and
# ``n_clusters="auto"`` find the true K over seeds and K = 2 to 6, and on a
# panel of labelled real data sets against the peers; :doc:`/dynamics` does the same
# for the dynamics, against MeanShift, HDBSCAN, DBSCAN and
# AffinityPropagation. Both need clusters that are distinct directions:
# the same caveats as :doc:`/user_guide/when_to_use`.
