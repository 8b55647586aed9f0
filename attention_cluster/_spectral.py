"""The spectral start: top eigenvectors of the second moment, rotated by the regulariser.

As L grows the risk depends on the heads through ``U U^T`` only and its
minimisers span the top-K eigenspace of ``M`` (``math.md`` section 3); inside
that span the regulariser picks the directions (Jacobi sweeps, as in
kurtosis-based ICA).
"""

import time

import numpy as np
from sklearn.utils import check_random_state

from . import _kernels
from ._objective import regularizer_code
from ._sphere import random_heads
from ._validation import largest_magnitude, power_of_two_unit

__all__ = [
    "MAX_ROWS_FACTOR",
    "REFERENCE_RATIO",
    "ROWS_PER_HEAD",
    "SUBSAMPLE",
    "spectral_heads",
    "spectral_init",
    "start_rows",
]

# Rows on which the start is rotated (and the exact solver's first stage runs).
SUBSAMPLE = 16384

#: Rows per head the rotation needs: with many heads SUBSAMPLE rows are too
#: few. On ``make_mixture`` at d = 384, sigma = 0.2, n = 1e5 (float32), 82
#: rows per head (K = 200 on SUBSAMPLE rows) left 3 to 5 of the 200 heads
#: within 45 degrees of a centroid after the sweeps, so that the EM on all
#: rows had to find the clusters itself (19 to 29 passes, 4 to 8 clusters
#: still merged); 164 rows per head (K = 100 on SUBSAMPLE rows, K = 200 on
#: 32768) left every head there, and the EM stopped after 4 passes at the
#: distance it reaches from the true centroids (benchmarks/peers.py).
ROWS_PER_HEAD = 160

#: ``d / n`` up to which ROWS_PER_HEAD rows per head suffice (the cells
#: above: 384 / 1e5); beyond it the start takes rows per head in proportion
#: to ``d / n``. The top eigenvectors of the second moment hold less of each
#: centroid as ``gamma = d / n`` grows (``math.md`` section 7, "When the
#: spectrum shows the clusters"), and the rotation must find the heads among
#: rows whose projections carry less of them. Measured on ``make_mixture`` at
#: K = 200, sigma = 0.2, n = 1e5 (float32): a centroid's mean squared cosine
#: with the span of the top 200 eigenvectors is 0.87 at d = 384 and 0.66 at d
#: = 768, and at d = 768 the sweeps' optimum leaves 9 of the 200 heads within
#: 45 degrees of a centroid (in that span) on 160 rows per head, 191 on 320.
#: The EM on all rows then took 37 to 46 passes from 160 rows per head, 27
#: to 33 from 240 and 8 to 14 from 320 (seeds 0 to 2 of the data), at equal
#: or higher likelihood; at d = 384, n = 5e4 (the same d / n), 26 passes
#: from 160 and 9 from 320 (ARI 0.91 and 0.94). The factor applies where
#: ROWS_PER_HEAD rows per head already exceed SUBSAMPLE (from 103 heads), the
#: regime measured: with fewer heads SUBSAMPLE rows give each more than
#: ROWS_PER_HEAD, and at d = 768, n = 4e4, K = 60 the factor cost 2.8 times
#: the fit's time and twice its memory for no gain (ARI 0.979 either way at
#: sigma = 0.2, 0.559 against 0.534 at 0.3).
REFERENCE_RATIO = 384 / 1e5

#: Largest factor on ROWS_PER_HEAD: at 4 times REFERENCE_RATIO the reference
#: mixture's centroids leave the spectrum (``ell = 0.125 <= sqrt(gamma)``),
#: where no number of rows helps the rotation; mixtures whose centroids still
#: show there stand further above the noise and need fewer. It also keeps
#: wide data (d near or above n, as text is) at SUBSAMPLE rows for few heads.
MAX_ROWS_FACTOR = 4.0


def start_rows(n_clusters, n_features, n_samples):
    """Rows of the spectral start's subsample: ``SUBSAMPLE``, or more for many heads.

    Up to 102 heads (the paper's regime among them) ``SUBSAMPLE`` rows;
    from 103 on, ``ROWS_PER_HEAD`` rows per head, times ``(d / n) /
    REFERENCE_RATIO`` where that exceeds 1 (at most ``MAX_ROWS_FACTOR``).
    ``n_samples`` counts the rows of positive weight, ``n_features`` is the
    width of the rows whose second moment gave the eigenvectors.
    """
    if ROWS_PER_HEAD * n_clusters <= SUBSAMPLE:
        return SUBSAMPLE
    ratio = n_features / (max(n_samples, 1.0) * REFERENCE_RATIO)
    per_head = ROWS_PER_HEAD * min(max(1.0, ratio), MAX_ROWS_FACTOR)
    return int(np.ceil(per_head * n_clusters))


# Jacobi sweeps of the start stop when no pair turns by more than this (rad),
# or when a sweep lowers the regulariser by at most _SWEEP_RTOL of its value:
# the exact solver then polishes the heads.
_SWEEP_TOL = 1e-6
_SWEEP_RTOL = 1e-4
# Rows whose largest entry, to the power of the sweeps' degree, reaches 2^this
# are swept at the scale of that entry (2^64 below float64's top: the sums
# add up to 2^64 such terms).
_SWEEP_MAX_EXPONENT = 960


def _rotate_frame(Y, weight, regularization, rows, report=None):
    """Rotation R (K x K) such that ``Y R`` minimises the regulariser.

    Jacobi sweeps over the pairs of heads, each an exact 1-D minimisation
    (:func:`~attention_cluster._kernels.jacobi_rotation`). For the pairwise
    regulariser ``sum_{j<k} a_j^2 a_k^2 = (||a||^4 - sum_k a_k^4) / 2``
    with ``||a||`` fixed by the rotation, so this maximises ``sum_k mean
    a_k^4``: kurtosis-based ICA restricted to the span (``math.md`` section
    3: the regulariser picks the directions inside the span). The pair (j,
    k) of the product regulariser is weighted by the other heads' ``prod
    a_m^2``; None uses the pairwise criterion. ``rows``: the data object
    whose rows gave ``Y``; its ``kernels`` turn each task's pairs
    (``rotate_pairs``) and its threads the disjoint tasks of a round
    (``map_tasks``). ``report(sweep, largest)`` follows the sweeps.
    """
    Y = np.array(Y, dtype=np.float64, order="C")
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    # The sweeps' sums are of degree 4 in the rows (2K with the product's
    # pair weights, from three heads), and turn Y by the same angles at any
    # scale: rows whose sums would pass float64 (the light rows of weights
    # whose ratio passes about 1e300 lie 1e150 scales out) are divided by the
    # power of two of their largest entry (exact), where they overflowed (inf
    # and NaN angles, "Initial heads must be finite"); other rows are read as
    # they are.
    degree = 2 * Y.shape[1] if regularization == "product" and Y.shape[1] > 2 else 4
    peak = largest_magnitude(Y)
    if np.frexp(peak)[1] * degree > _SWEEP_MAX_EXPONENT:
        Y /= power_of_two_unit(peak)
    return _kernels.jacobi_rotation(
        Y,
        weight,
        regularization == "product",
        100,
        _SWEEP_TOL,
        _SWEEP_RTOL,
        rows.kernels.rotate_pairs,
        rows.map_tasks,
        report,
    )


def spectral_heads(rows, eigenvectors, n_clusters, regularization, rng, verbose=0):
    """The top-K ``eigenvectors`` of the second moment (d x d, columns by
    decreasing eigenvalue), rotated on ``rows`` (a small data object);
    with ``verbose``, each sweep of the rotation is printed."""
    d = eigenvectors.shape[0]
    k = min(n_clusters, d)
    V = eigenvectors[:, :k]
    if k > 1:
        weight = np.ones(rows.n_samples) if rows.sample_weight is None else rows.sample_weight
        report = _sweep_report(k, rows.n_samples) if verbose else None
        V = V @ _rotate_frame(rows.project(V), weight, regularization, rows, report)
    if n_clusters > d:
        V = np.hstack([V, random_heads(rng, d, n_clusters - d)])
    return V


def _sweep_report(n_heads, n_rows):
    """``report(sweep, largest)`` for :func:`_rotate_frame`: a line per sweep, with its time."""
    started = time.perf_counter()

    def report(sweep, largest):
        print(
            f"[AttentionClustering] spectral start: sweep {sweep} over the pairs of "
            f"{n_heads} heads on {n_rows} rows, largest turn {largest:.3g} rad, "
            f"{time.perf_counter() - started:.1f} s"
        )

    return report


def spectral_init(data, moment, n_clusters, regularization="pairwise", random_state=None):
    """Spectral start: top eigenvectors of M, rotated by the regulariser.

    As L grows the risk depends on the heads through ``U U^T`` only and its
    minimisers span the top-K eigenspace of ``M`` (``math.md`` section 3);
    inside that span the regulariser picks the directions. So the start is
    the top-K eigenvectors of M, rotated by Jacobi sweeps that minimise the
    regulariser (:func:`_rotate_frame`) on about 16384 rows drawn with
    ``random_state`` (more for many heads, :func:`start_rows`). When
    ``n_clusters`` exceeds ``d``, the d eigenvectors are completed by random
    unit heads.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
    moment : ndarray of shape (n_features, n_features)
        M, the weighted second moment of the data.
    n_clusters : int
        Number of heads K.
    regularization : {"pairwise", "product"} or None, default="pairwise"
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    heads : ndarray of shape (n_features, n_clusters)
        Unit columns, orthonormal when ``n_clusters <= n_features``.
    """
    regularizer_code(regularization)
    rng = check_random_state(random_state)
    rows = data.subsample(rng, start_rows(n_clusters, data.n_features, data.n_weighted))
    eigenvectors = np.linalg.eigh(moment)[1][:, ::-1]
    return spectral_heads(rows, eigenvectors, n_clusters, regularization, rng)
