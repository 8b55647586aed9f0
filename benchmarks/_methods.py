"""The methods compared by ``run.py``, the data they run on, and their scores.

Every method is a scikit-learn estimator (or Pipeline) with the library's
default settings, so the comparison is of what a user gets without tuning.
Every solver the installed AttentionClustering accepts is compared.
"""

import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn import datasets as sk_datasets
from sklearn.cluster import KMeans, MiniBatchKMeans, SpectralClustering
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.mixture import GaussianMixture
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import Normalizer, StandardScaler

from attention_cluster import AttentionClustering, InContextQuantizer
from attention_cluster.datasets import make_centroids, make_mixture
from attention_cluster.metrics import bayes_error as rule_error
from attention_cluster.metrics import centroid_distance

# The solvers compared; solver="auto" is the exact solver ("full") at every
# n, so it is not run apart.
SOLVERS = ("psgd", "full")
# SpectralClustering builds an n x n affinity graph and its eigenvectors.
SPECTRAL_MAX_N = 3000
# One pass over the data: the floor no method can beat.
FLOOR = "floor: X @ W (one pass)"


def available_solvers():
    """The solvers compared, each fitted once on a small data set.

    The fit compiles (or loads from the cache) every Numba kernel the solver
    uses, so that later timings are warm.
    """
    X, _, _ = make_mixture(200, 5, 2, noise=0.3, random_state=0)
    for solver in SOLVERS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            AttentionClustering(2, solver=solver, random_state=0).fit(X)
    return list(SOLVERS)


def candidates(n_clusters, n_samples, solvers, seed=0):
    """Name -> factory of a fresh, unfitted estimator, for K clusters and n rows."""
    K = n_clusters
    out = {
        f"AttentionClustering(solver={s!r})": (
            lambda s=s: AttentionClustering(K, solver=s, random_state=seed)
        )
        for s in solvers
    }
    out["InContextQuantizer -> KMeans"] = lambda: make_pipeline(
        InContextQuantizer(K), KMeans(K, random_state=seed)
    )
    out["KMeans"] = lambda: KMeans(K, random_state=seed)
    out["MiniBatchKMeans"] = lambda: MiniBatchKMeans(K, random_state=seed)
    out["GaussianMixture(spherical)"] = lambda: GaussianMixture(
        K, covariance_type="spherical", random_state=seed
    )
    out["GaussianMixture(full)"] = lambda: GaussianMixture(
        K, covariance_type="full", random_state=seed
    )
    if n_samples <= SPECTRAL_MAX_N:
        # A k-nearest-neighbour graph: the default RBF kernel with gamma=1 is
        # all zeros off the diagonal once squared distances reach ~100 (d=100).
        out["SpectralClustering"] = lambda: SpectralClustering(
            K, affinity="nearest_neighbors", random_state=seed
        )
    return out


def centers_of(estimator):
    """Estimated centroids of a fitted estimator, or None (spectral clustering)."""
    last = estimator[-1] if isinstance(estimator, Pipeline) else estimator
    for attribute in ("cluster_centers_", "means_"):
        if hasattr(last, attribute):
            return np.asarray(getattr(last, attribute), dtype=np.float64)
    return None


# ---------------------------------------------------------------- data


# Centroids orthogonal (the paper's assumption) or uniform on the sphere, and
# weights equal (the paper's) or growing linearly up to `skew` times the
# smallest: a 2 x 2 design, so each departure from the paper is seen alone.
DESIGNS = {
    "orthogonal, balanced": dict(kind="orthogonal", skew=1.0),
    "orthogonal, unbalanced": dict(kind="orthogonal", skew=3.0),
    "random, balanced": dict(kind="random", skew=1.0),
    "random, unbalanced": dict(kind="random", skew=3.0),
}


def mixture_parameters(design, n_features, n_clusters, seed):
    """Centroids and weights of a design: the largest weight is ``skew`` times the smallest."""
    spec = DESIGNS[design]
    C = make_centroids(n_clusters, n_features, kind=spec["kind"], random_state=seed)
    w = np.linspace(1.0, spec["skew"], n_clusters)
    return C, w / w.sum()


def make_data(design, n_samples, n_features, n_clusters, noise, seed):
    """A draw of the mixture ``(P_sigma)`` of a design; returns X, y, C, weights."""
    C, w = mixture_parameters(design, n_features, n_clusters, seed)
    X, y, _ = make_mixture(
        n_samples,
        n_features,
        n_clusters,
        noise=noise,
        centroids=C,
        weights=w,
        random_state=seed + 1,
    )
    return X, y, C, w


def bayes_labels(X, centroids, weights, noise):
    """The Bayes rule of the mixture: ``argmax_c log w_c - ||x - mu_c||^2 / (2 sigma^2)``."""
    logits = X @ centroids.T - 0.5 * np.sum(centroids**2, axis=1)
    if noise == 0:
        return np.argmax(logits, axis=1)
    return np.argmax(logits / noise**2 + np.log(weights), axis=1)


def bayes_error(centroids, weights, noise, n_draws, seed, chunk=100_000):
    """Error rate of the Bayes rule and its standard error.

    With equal weights and unit centroids the Bayes rule is ``argmax_c <x,
    mu_c>``, whose error :func:`attention_cluster.metrics.bayes_error`
    computes exactly. Otherwise (unequal weights shift the rule by ``sigma^2
    log w_c``) a Monte Carlo estimate over ``n_draws`` fresh samples of the
    same mixture. Returns (error, standard error, source).
    """
    if np.allclose(weights, weights[0]):
        return float(rule_error(centroids, noise)), 0.0, "formula"
    K, d = centroids.shape
    wrong = 0
    for i, start in enumerate(range(0, n_draws, chunk)):
        m = min(chunk, n_draws - start)
        X, y, _ = make_mixture(
            m, d, K, noise=noise, centroids=centroids, weights=weights, random_state=seed + 1000 + i
        )
        wrong += int(np.sum(bayes_labels(X, centroids, weights, noise) != y))
    p = wrong / n_draws
    return p, float(np.sqrt(max(p * (1 - p), 1.0 / n_draws) / n_draws)), "monte carlo"


# ---------------------------------------------------------------- scores


def matched_error(labels_true, labels_pred):
    """Misclassification rate after the best one-to-one relabelling (Hungarian)."""
    table = contingency_matrix(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(-table)
    return 1.0 - table[rows, cols].sum() / table.sum()


def scores(labels_true, labels_pred, centers=None, true_centroids=None):
    """ARI, NMI, matched error and, when both are known, the distance to the centroids.

    Centers are normalised to the unit sphere before :func:`centroid_distance`
    (the true centroids have unit norm; AttentionClustering's heads are unit
    vectors), so the distance compares directions for every method.
    """
    out = {
        "ari": float(adjusted_rand_score(labels_true, labels_pred)),
        "nmi": float(normalized_mutual_info_score(labels_true, labels_pred)),
        "error": float(matched_error(labels_true, labels_pred)),
        "distance": None,
    }
    if centers is not None and true_centroids is not None and len(centers) >= len(true_centroids):
        norms = np.linalg.norm(centers, axis=1, keepdims=True)
        unit = centers / np.where(norms > 0, norms, 1.0)
        out["distance"] = centroid_distance(unit, true_centroids)
    return out


def max_abs_cosine(directions):
    """Largest |cos| between two distinct rows: 0 for orthogonal directions."""
    D = np.asarray(directions, dtype=np.float64)
    D = D / np.linalg.norm(D, axis=1, keepdims=True)
    G = np.abs(D @ D.T)
    np.fill_diagonal(G, 0.0)
    return float(G.max()) if len(D) > 1 else 0.0


# ---------------------------------------------------------------- real data

# The labelled data sets that ship inside scikit-learn (no download).
REAL_DATASETS = ("iris", "wine", "breast_cancer", "digits")


def load_real(name):
    """X, y of a scikit-learn toy data set; K is its number of classes."""
    X, y = getattr(sk_datasets, f"load_{name}")(return_X_y=True)
    return np.ascontiguousarray(X, dtype=np.float64), y


# Preprocessings applied to the data before every method: name -> factory of
# a transformer for K classes (None: the raw data). After centring, the K
# class means span at most K - 1 directions, hence PCA(K - 1); PCA(K) keeps
# one more. Normalizer puts every point on the unit sphere, where the
# model's clusters live.
VIEWS = {
    "raw": None,
    "StandardScaler": lambda K: StandardScaler(),
    "Normalizer": lambda K: Normalizer(),
    "StandardScaler, Normalizer": lambda K: make_pipeline(StandardScaler(), Normalizer()),
    "StandardScaler, PCA(K-1), Normalizer": lambda K: make_pipeline(
        StandardScaler(), PCA(max(K - 1, 1), random_state=0), Normalizer()
    ),
    "StandardScaler, PCA(K), Normalizer": lambda K: make_pipeline(
        StandardScaler(), PCA(K, random_state=0), Normalizer()
    ),
}


def view_diagnostics(X, y):
    """How far a view of labelled data is from the model's assumptions.

    ``mean_share = ||mean x||^2 / mean ||x||^2`` is the part of the second
    moment carried by the common mean: near 1, every point points the same
    way. ``max_cos`` is the largest |cos| between two class means seen as
    directions from the origin: the model wants them near-orthogonal (0).
    """
    mean = X.mean(axis=0)
    second = float(np.mean(np.sum(X**2, axis=1)))
    class_means = np.array([X[y == c].mean(axis=0) for c in np.unique(y)])
    return {
        "mean_share": float(mean @ mean / second) if second > 0 else 0.0,
        "max_cos": max_abs_cosine(class_means),
    }
