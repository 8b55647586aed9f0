"""The seeded start: K centres placed among the rows, for more clusters than directions.

The spectral start (:mod:`._spectral`) places the heads on the top
eigenvectors of the second moment; when ``K >= d`` the spectrum has fewer
than K directions and the heads beyond d would be random. The mixture of
``math.md`` section 7 with one norm per centroid has its centres at
``mean_ + s r_k mu_k``, any K points of R^d, so it needs a start that places
K points, not K directions: k-means++ seeding (Arthur and Vassilvitskii,
"k-means++: the advantages of careful seeding", SODA 2007) on a subsample of
the rows, polished by Lloyd's iterations on that subsample.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Seeds", "kmeans_plus_plus", "lloyd", "seeded_start"]

# Lloyd's iterations on the subsample stop when no point changes its
# centre, or after this many: the EM on all rows goes on from there.
_LLOYD_MAX_ITER = 100

# Seedings on the subsample, the one of least inertia kept: each costs
# O(n K d) on the subsample's rows, far less than one pass over large data.
_N_SEEDINGS = 4


@dataclass(frozen=True)
class Seeds:
    """A start of the free-norm mixture (rows divided by s, as the sample's)."""

    heads: np.ndarray  #: d x K unit heads mu_k
    radii: np.ndarray  #: the centres' norms r_k, shape (K,)
    noise: float  #: tau, the noise level: sqrt(inertia / (N d))
    inertia: float  #: weighted mean squared distance to the nearest centre
    n_iter: int  #: Lloyd's iterations of the kept seeding


def _squared_distances(points, centres):
    """``||x_i - c_k||^2`` (n x K), clipped at 0 against rounding."""
    sq = (
        np.einsum("ij,ij->i", points, points)[:, None]
        - 2.0 * points @ centres.T
        + np.einsum("ij,ij->i", centres, centres)[None, :]
    )
    return np.maximum(sq, 0.0)


def kmeans_plus_plus(points, weights, n_clusters, rng, n_trials=None):
    """K rows of ``points`` drawn by greedy k-means++ seeding (K x d).

    The first centre is a row drawn with probability ``w_i / sum w``; each
    next one is drawn with probability ``w_i D(x_i)^2 / sum_j w_j
    D(x_j)^2``, ``D`` the distance to the nearest centre so far (Arthur
    and Vassilvitskii 2007, the D^2 weighting), and of ``n_trials`` such
    draws (default ``2 + floor(log K)``, their section 6) the one that
    lowers the potential ``sum_i w_i D(x_i)^2`` most is kept. Rows of zero
    weight are never drawn; when every remaining row sits on a centre the
    draws fall back to the weights alone.
    """
    n = points.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if n_trials is None:
        n_trials = 2 + int(np.log(n_clusters))
    centres = np.empty((n_clusters, points.shape[1]))
    first = rng.choice(n, p=w / np.sum(w))
    centres[0] = points[first]
    closest = _squared_distances(points, centres[:1])[:, 0]
    for k in range(1, n_clusters):
        mass = w * closest
        total = float(np.sum(mass))
        p = mass / total if total > 0.0 else w / np.sum(w)
        candidates = rng.choice(n, size=n_trials, p=p)
        trial = np.minimum(closest[:, None], _squared_distances(points, points[candidates]))
        best = int(np.argmin(w @ trial))
        centres[k] = points[candidates[best]]
        closest = trial[:, best]
    return centres


def lloyd(points, weights, centres, max_iter=_LLOYD_MAX_ITER):
    """Lloyd's iterations from ``centres`` (K x d): ``(centres, labels, inertia, n_iter)``.

    Each iteration assigns every row to its nearest centre and moves each
    centre to the weighted mean of its rows; a centre that loses all its
    rows stays. Stops when no label changes. ``inertia`` is the weighted
    mean of the squared distance to the nearest centre at the end;
    ``n_iter`` counts the assignments made.
    """
    n = points.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    K = centres.shape[0]
    centres = np.array(centres, dtype=np.float64)
    labels = None
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        new = np.argmin(_squared_distances(points, centres), axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        mass = np.bincount(labels, weights=w, minlength=K)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, w[:, None] * points)
        alive = mass > 0.0
        centres[alive] = sums[alive] / mass[alive, None]
    sq = _squared_distances(points, centres)
    labels = np.argmin(sq, axis=1)
    inertia = float(w @ sq[np.arange(n), labels]) / float(np.sum(w))
    return centres, labels, inertia, n_iter


def seeded_start(sample, n_clusters, rng, n_seedings=_N_SEEDINGS):
    """A start of the free-norm mixture from the rows of ``sample``: a :class:`Seeds`.

    ``n_seedings`` greedy k-means++ seedings (:func:`kmeans_plus_plus`) of
    the sample's rows, each polished by :func:`lloyd` on those rows; the
    one of least inertia gives the centres ``c_k = r_k mu_k`` (in the
    sample's coordinates: rows divided by s, centred when the sample is) and
    the noise ``tau^2 = inertia / d``, the M step of the mixture's variance
    (``math.md`` section 7) with hard assignments. ``sample`` is a small
    pass-layer data object (dense or sparse); its rows are read through
    ``project`` onto the identity, so this is for ``d`` of the order of K.
    """
    d = sample.n_features
    points = sample.project(np.eye(d))
    weights = sample.sample_weight
    best = None
    for _ in range(n_seedings):
        centres = kmeans_plus_plus(points, weights, n_clusters, rng)
        centres, _, inertia, n_iter = lloyd(points, weights, centres)
        if best is None or inertia < best[1]:
            best = centres, inertia, n_iter
    centres, inertia, n_iter = best
    radii = np.linalg.norm(centres, axis=1)
    # A centre at the origin has no direction: any unit head with r = 0.
    safe = np.where(radii > 0.0, radii, 1.0)
    heads = (centres / safe[:, None]).T
    heads[:, radii == 0.0] = np.eye(d)[:, :1]
    return Seeds(
        heads=heads,
        radii=radii,
        noise=float(np.sqrt(inertia / d)),
        inertia=inertia,
        n_iter=n_iter,
    )
