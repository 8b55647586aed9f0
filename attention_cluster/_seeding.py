"""The seeded start: K centres placed among the rows, for more clusters than directions.

The spectral start (:mod:`._spectral`) places the heads on the top
eigenvectors of the second moment; when ``K >= d`` the spectrum has fewer
than K directions and the heads beyond d would be random. The mixture of
``math.md`` section 7 with one norm per centroid has its centres at
``mean_ + s r_k mu_k``, any K points of R^d, so it needs a start that places
K points, not K directions: k-means++ seeding (Arthur and Vassilvitskii,
"k-means++: the advantages of careful seeding", SODA 2007) on a subsample of
the rows, polished by Lloyd's iterations on that subsample.

The squared distances are ``||x||^2 - 2 <x, c> + ||c||^2``, of the rows
taken about a reference point where their mean lies far from the origin
(:func:`_reference`): one BLAS product per block of rows, on one BLAS thread
(the products are small, and a second thread costs more to wake than it
saves).
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._passes import one_blas_thread
from ._validation import peak_unit

__all__ = ["ROWS_PER_CENTRE", "Seeds", "kmeans_plus_plus", "lloyd", "seeded_start"]

# Lloyd's iterations on the subsample stop when the rows that change their
# centre weigh at most this share of the total, or after this many: the EM
# on all rows goes on from there (benchmarks/many_clusters.py).
_LLOYD_MAX_ITER = 50
_LLOYD_TOL = 1e-3

# Seedings on the subsample, the one of least inertia kept: as many as fit,
# up to _MAX_SEEDINGS, in _SEEDING_BUDGET multiply-adds per Lloyd iteration
# (rows x K x d each). Several pay on small samples (make_blobs with K > d,
# benchmarks/many_clusters.py); on large samples at large K one places the
# centres as well as four.
_MAX_SEEDINGS = 4
_SEEDING_BUDGET = 2**25

#: Rows per centre the seeding runs on, at most (as faiss's k-means trains on
#: at most 256 points per centroid): more rows place the same centres more
#: slowly, and the EM on all rows follows.
ROWS_PER_CENTRE = 256

# The seeding runs about a row in the coordinates where the rows' mean lies
# more than this many times their spread from zero (_reference).
_FAR_MEAN = 128.0

# Rows per BLAS product of the distances: bounds the rows x K scores held.
_BLOCK_ROWS = 4096


@dataclass(frozen=True)
class Seeds:
    """A start of the free-norm mixture (rows divided by s, as the sample's)."""

    heads: np.ndarray  #: d x K unit heads mu_k
    radii: np.ndarray  #: the centres' norms r_k, shape (K,)
    noise: float  #: tau, the noise level: sqrt(inertia / (N d))
    inertia: float  #: weighted mean squared distance to the nearest centre
    n_iter: int  #: Lloyd's iterations of the kept seeding


def _row_norms(points):
    """``||x_i||^2`` of every row."""
    return np.einsum("ij,ij->i", points, points)


def _squared_distances(points, sq_norms, centres):
    """``||x_i - c_k||^2 = ||x_i||^2 - 2 <x_i, c_k> + ||c_k||^2`` (n x K), clipped at 0."""
    sq = points @ centres.T
    sq *= -2.0
    sq += sq_norms[:, None]
    sq += _row_norms(centres)[None, :]
    return np.maximum(sq, 0.0, out=sq)


def _draw(mass, rng, size):
    """``size`` indices per row of ``mass`` (S x n), drawn with probability ``mass_si / sum_i mass_si``.

    By inversion of each row's cumulative sums, normalised and offset by the
    row's number so that one sorted search serves every row; an index of
    zero mass is never drawn. Returns an (S, size) array.
    """
    S, n = mass.shape
    cumulative = np.cumsum(mass, axis=1)
    cumulative /= cumulative[:, -1:]
    # Each row's last index of mass: u rounded up to 1 goes there.
    last = np.argmax(cumulative >= 1.0, axis=1)
    offsets = np.arange(S)[:, None]
    flat = (cumulative + offsets).ravel()
    u = rng.uniform(0.0, 1.0, (S, size)) + offsets
    # side="right": u equal to a cumulative sum skips the rows of zero mass after it.
    idx = np.searchsorted(flat, u.ravel(), side="right").reshape(S, size) - n * offsets
    return np.minimum(idx, last[:, None])


def _reference(points):
    """A point r about which the seeding's expansions ``||x - r||^2 - 2 <x - r,
    c - r> + ||c - r||^2`` keep the digits of the rows' distances: the first
    row in the coordinates where the rows' mean m lies farther than 128
    sigma from zero, sigma their spread (the root mean square of ``||x -
    m||``), 0 in the others.

    The squared distances are the same about any point, but rounded at the
    magnitude of ``||x - r||^2``: about the origin, rows sharing a
    coordinate far from zero (1e8 beside a spread of 1) lost them to
    rounding, and their labels, draws and inertia with them. About r the
    rows are as far from r in those coordinates as from the first row
    (``x - r`` rounds at its own magnitude; a coordinate the rows share is
    0 exactly, where about their mean its rounding would remain), and their
    mean is within 128 sigma of r in the others. Rows whose mean lies within
    128 sigma of the origin in every coordinate have r = 0, and their
    seeding is as it was, to the last bit: centred rows, and those
    ``center="auto"`` leaves uncentred when d >= 2 (``||m||^2`` at most 10
    times the second moment's smallest eigenvalue, ``math.md`` section 7,
    "Centring or not", which for d >= 2 is at most the rows' variance
    across m, about ``sigma^2`` or less).
    """
    mean = np.mean(points, axis=0)
    spread = float(np.sqrt(np.mean(_row_norms(points - mean))))
    return np.where(np.abs(mean) > _FAR_MEAN * spread, points[0], 0.0)


def kmeans_plus_plus(points, weights, n_clusters, rng, n_trials=None, n_seedings=1):
    """``n_seedings`` independent greedy k-means++ seedings: K rows of ``points`` each (S x K x d).

    The first centre is a row drawn with probability ``w_i / sum w``; each
    next one is drawn with probability ``w_i D(x_i)^2 / sum_j w_j
    D(x_j)^2``, ``D`` the distance to the nearest centre so far (Arthur
    and Vassilvitskii 2007, the D^2 weighting), and of ``n_trials`` such
    draws (default ``2 + floor(log K)``, their section 6) the one that
    lowers the potential ``sum_i w_i D(x_i)^2`` most is kept. Rows of zero
    weight are never drawn; when every remaining row sits on a centre the
    draws fall back to the weights alone. The seedings share each step's
    distance product.
    """
    n, d = points.shape
    S = n_seedings
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if n_trials is None:
        n_trials = 2 + int(np.log(n_clusters))
    sq_norms = _row_norms(points)
    centres = np.empty((S, n_clusters, d))
    centres[:, 0] = points[_draw(np.broadcast_to(w, (S, n)), rng, 1)[:, 0]]
    closest = _squared_distances(points, sq_norms, centres[:, 0]).T  # S x n
    seeding = np.arange(S)
    for k in range(1, n_clusters):
        mass = w * closest
        mass[np.sum(mass, axis=1) <= 0.0] = w
        candidates = _draw(mass, rng, n_trials)  # S x T
        trial = _squared_distances(points, sq_norms, points[candidates.ravel()])
        trial = np.minimum(trial.reshape(n, S, n_trials), closest.T[:, :, None])
        best = np.argmin(np.einsum("i,ist->st", w, trial), axis=1)
        centres[:, k] = points[candidates[seeding, best]]
        closest = trial[:, seeding, best].T
    return centres


def _nearest(points, sq_norms, centres):
    """``(labels, squared distances)`` (n x S each) of every row to its nearest centre of each stack.

    ``centres`` is S x K x d; ``argmin_k ||c_k||^2 - 2 <x, c_k>``, one BLAS
    product per block of rows for all S stacks; ties go to the first centre.
    """
    S, K, d = centres.shape
    flat = centres.reshape(S * K, d)
    centre_sq = _row_norms(flat)
    minus_twice = -2.0 * flat.T
    n = points.shape[0]
    labels = np.empty((n, S), dtype=np.intp)
    closest = np.empty((n, S))
    scores = np.empty((min(_BLOCK_ROWS, n), S * K))
    for lo in range(0, n, _BLOCK_ROWS):
        hi = min(lo + _BLOCK_ROWS, n)
        block = scores[: hi - lo]
        np.matmul(points[lo:hi], minus_twice, out=block)
        block += centre_sq
        stacked = block.reshape(hi - lo, S, K)
        nearest = np.argmin(stacked, axis=2)
        labels[lo:hi] = nearest
        closest[lo:hi] = np.take_along_axis(stacked, nearest[:, :, None], axis=2)[:, :, 0]
    closest += sq_norms[:, None]
    return labels, np.maximum(closest, 0.0, out=closest)


def _weighted_means(points, w, labels, centres):
    """Each centre moved to the weighted mean of its rows; a centre without rows stays.

    ``labels`` is n x S, ``centres`` S x K x d: the sums of every stack's
    labels in one sparse (S K x n) product, a row's S entries one column
    (built as it is stored: no conversion, a third of the time of a COO
    build at the fits' sizes).
    """
    S, K, d = centres.shape
    n = points.shape[0]
    groups = (labels + K * np.arange(S)).ravel()
    weights = np.repeat(w, S)
    one_hot = sp.csc_matrix((weights, groups, np.arange(0, n * S + 1, S)), shape=(S * K, n))
    sums = one_hot @ points
    mass = np.bincount(groups, weights=weights, minlength=S * K)
    alive = mass > 0.0
    moved = centres.reshape(S * K, d).copy()
    moved[alive] = sums[alive] / mass[alive, None]
    return moved.reshape(S, K, d)


def lloyd(points, weights, centres, max_iter=_LLOYD_MAX_ITER, tol=_LLOYD_TOL):
    """Lloyd's iterations from S stacks of K centres (S x K x d), run side by side.

    Returns ``(centres, labels, inertia, n_iter)``: S x K x d, n x S, (S,),
    (S,). Each iteration assigns every row to its nearest centre of each
    stack and moves each centre to the weighted mean of its rows; a centre
    that loses all its rows stays. A stack stops when the rows whose label
    changed weigh at most ``tol`` of the total (with ``tol = 0``: when no
    label changes, its centres a fixed point), or after ``max_iter``
    assignments; only the stacks still moving are computed. ``inertia`` is the weighted mean of the squared distance to the
    nearest centre at the end; ``n_iter`` counts each stack's assignments.
    """
    n = points.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    centres = np.array(centres, dtype=np.float64)
    S = centres.shape[0]
    total = float(np.sum(w))
    sq_norms = _row_norms(points)
    labels = np.empty((n, S), dtype=np.intp)
    closest = np.empty((n, S))
    n_iter = np.zeros(S, dtype=np.intp)
    moving = np.arange(S)  # the stacks not yet stopped: only they are computed
    for _ in range(max_iter):
        new, near = _nearest(points, sq_norms, centres[moving])
        n_iter[moving] += 1
        # The weight of the rows whose label changed, a share of the total.
        changed = w @ (new != labels[:, moving]) / total if n_iter[moving[0]] > 1 else None
        labels[:, moving], closest[:, moving] = new, near
        if changed is not None:
            moving = moving[changed > tol]
        if moving.size == 0:
            break
        centres[moving] = _weighted_means(points, w, labels[:, moving], centres[moving])
    else:
        labels[:, moving], closest[:, moving] = _nearest(points, sq_norms, centres[moving])
    return centres, labels, (w @ closest) / total, n_iter


def seeded_start(sample, n_clusters, rng, n_seedings=None, min_seedings=1, max_iter=None):
    """A start of the free-norm mixture from the rows of ``sample``: a :class:`Seeds`.

    On at most ``ROWS_PER_CENTRE * K`` rows of ``sample`` (drawn uniformly,
    without replacement), ``n_seedings`` greedy k-means++ seedings
    (:func:`kmeans_plus_plus`; None: as many as fit in a fixed budget of
    work per Lloyd iteration, from 1 to 4, and at least ``min_seedings``,
    the estimator's ``n_init``), each polished by :func:`lloyd` (at most
    ``_LLOYD_MAX_ITER`` iterations, and at most ``max_iter``, the
    estimator's, where given) on those rows (the seedings side by side,
    sharing each BLAS product);
    the one of least inertia gives the centres ``c_k = r_k mu_k`` (in the
    sample's coordinates: rows divided by s, centred when the sample is) and
    the noise ``tau^2 = inertia / d``, the M step of the mixture's
    variance (``math.md`` section 7) with hard assignments. ``sample`` is a
    small pass-layer data object (dense or sparse); its rows are read
    through ``project`` onto the identity, so this is for ``d`` of the order
    of K.
    """
    d = sample.n_features
    # Over the power of two of their largest entry (exact: the same draws,
    # labels and centres): rows many scales from the others, as the light
    # rows of weights whose ratio passes about 1e300 lie 1e150 scales from
    # the heavy ones, had squared distances beyond float64 (inf x weight:
    # NaN draws), and rows below 2^-511 squares that underflowed.
    points = sample.project(np.eye(d))
    unit = peak_unit(points)
    points = points / unit
    weights = sample.sample_weight
    size = ROWS_PER_CENTRE * n_clusters
    if points.shape[0] > size:
        keep = np.sort(rng.choice(points.shape[0], size, replace=False))
        points = points[keep]
        weights = None if weights is None else weights[keep]
    # About a reference point (_reference), over the power of two of the
    # largest entry about it (exact): 1 and 0 for rows near the origin.
    reference = _reference(points)
    points = points - reference
    spread_unit = peak_unit(points)
    points = points / spread_unit
    if n_seedings is None:
        work = points.shape[0] * n_clusters * d
        n_seedings = max(int(np.clip(_SEEDING_BUDGET // work, 1, _MAX_SEEDINGS)), min_seedings)
    with one_blas_thread():
        stacks = kmeans_plus_plus(points, weights, n_clusters, rng, n_seedings=n_seedings)
        most = _LLOYD_MAX_ITER if max_iter is None else min(max_iter, _LLOYD_MAX_ITER)
        stacks, _, inertia, n_iter = lloyd(points, weights, stacks, max_iter=most)
    best = int(np.argmin(inertia))
    centres, inertia, n_iter = stacks[best], float(inertia[best]), int(n_iter[best])
    centres = centres * spread_unit + reference
    radii = np.linalg.norm(centres, axis=1)
    # A centre at the origin has no direction: any unit head with r = 0.
    safe = np.where(radii > 0.0, radii, 1.0)
    heads = (centres / safe[:, None]).T
    heads[:, radii == 0.0] = np.eye(d)[:, :1]
    # Back at the rows' scale (an inertia beyond float64 is inf; its root, the noise, is not).
    radii *= unit
    unit *= spread_unit
    noise = float(np.sqrt(inertia / d)) * unit
    inertia = inertia * unit * unit
    return Seeds(
        heads=heads,
        radii=radii,
        noise=noise,
        inertia=inertia,
        n_iter=n_iter,
    )
