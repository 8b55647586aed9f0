"""The spectral start: top eigenvectors of the second moment, rotated by the regulariser.

As L grows the risk depends on the heads through ``U U^T`` only and its
minimisers span the top-K eigenspace of ``M`` (``math.md`` section 3); inside
that span the regulariser picks the directions (Jacobi sweeps, as in
kurtosis-based ICA).
"""

import numpy as np
from sklearn.utils import check_random_state

from ._objective import regularizer_code

__all__ = ["SUBSAMPLE", "spectral_heads", "spectral_init"]

# Rows on which the start is rotated (and the exact solver's first stage runs).
SUBSAMPLE = 16384


def _pair_angle(yj, yk, weight):
    """Angle theta minimising ``sum_i weight_i (a_ij a_ik)^2`` over plane rotations.

    After rotating columns j, k by theta, ``a_j a_k = cos(2 theta) p +
    sin(2 theta) q`` with ``p = y_j y_k`` and ``q = (y_k^2 - y_j^2) / 2``, so
    the criterion is a quadratic form in ``(cos 2theta, sin 2theta)``,
    minimised by its eigenvector of smallest eigenvalue (the Jacobi step of
    kurtosis-based ICA). Returns the smallest such rotation, in
    [-pi/4, pi/4].
    """
    p = yj * yk
    q = (yk * yk - yj * yj) / 2.0
    wp, wq = weight * p, weight * q
    B = np.array([[wp @ p, wp @ q], [wp @ q, wq @ q]])
    vec = np.linalg.eigh(B)[1][:, 0]
    if vec[0] < 0:
        vec = -vec
    return np.arctan2(vec[1], vec[0]) / 2.0


def _rotate_frame(Y, weight, regularization, max_sweeps=100, tol=1e-6):
    """Rotation R (K x K) such that ``Y R`` minimises the regulariser.

    Jacobi sweeps over the pairs of heads, each an exact 1-D minimisation
    (:func:`_pair_angle`). For the pairwise regulariser
    ``sum_{j<k} a_j^2 a_k^2 = (||a||^4 - sum_k a_k^4) / 2`` with ``||a||``
    fixed by the rotation, so this maximises ``sum_k mean a_k^4``:
    kurtosis-based ICA restricted to the span (``math.md`` section 3: the
    regulariser picks the directions inside the span). The pair (j, k) of
    the product regulariser is weighted by the other heads' ``prod a_m^2``;
    None uses the pairwise criterion.
    """
    K = Y.shape[1]
    Y = Y.copy()
    R = np.eye(K)
    for _ in range(max_sweeps):
        largest = 0.0
        for j in range(K - 1):
            for k in range(j + 1, K):
                pair_weight = weight
                if regularization == "product" and K > 2:
                    others = np.delete(Y, [j, k], axis=1)
                    pair_weight = weight * np.prod(others * others, axis=1)
                theta = _pair_angle(Y[:, j], Y[:, k], pair_weight)
                largest = max(largest, abs(theta))
                rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
                Y[:, [j, k]] = Y[:, [j, k]] @ rot
                R[:, [j, k]] = R[:, [j, k]] @ rot
        if largest < tol:
            break
    return R


def spectral_heads(rows, moment, n_clusters, regularization, rng):
    """Top-K eigenvectors of ``moment``, rotated on ``rows`` (a small data object)."""
    d = moment.shape[0]
    k = min(n_clusters, d)
    V = np.linalg.eigh(moment)[1][:, ::-1][:, :k]
    if k > 1:
        weight = np.ones(rows.n_samples) if rows.sample_weight is None else rows.sample_weight
        V = V @ _rotate_frame(rows.project(V), weight, regularization)
    if n_clusters > d:
        extra = rng.standard_normal((d, n_clusters - d))
        V = np.hstack([V, extra / np.linalg.norm(extra, axis=0)])
    return V


def spectral_init(data, moment, n_clusters, regularization="pairwise", random_state=None):
    """Spectral start: top eigenvectors of M, rotated by the regulariser.

    As L grows the risk depends on the heads through ``U U^T`` only and its
    minimisers span the top-K eigenspace of ``M`` (``math.md`` section 3);
    inside that span the regulariser picks the directions. So the start is
    the top-K eigenvectors of M, rotated by Jacobi sweeps that minimise the
    regulariser (:func:`_rotate_frame`) on about 16384 rows drawn with
    ``random_state``. When ``n_clusters`` exceeds ``d``, the d eigenvectors
    are completed by random unit heads.

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
    rows = data.subsample(rng, SUBSAMPLE)
    return spectral_heads(rows, moment, n_clusters, regularization, rng)
