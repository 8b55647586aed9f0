"""Metrics of the paper: distance to the centroids up to sign and relabelling.

``math.md`` section 5 (paper, section 3.2)::

    D(U, U*) = min over permutations pi and signs eps of
               sum_h || eps_h mu_{pi(h)} - mu*_h ||^2
"""

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["centroid_distance", "match_centroids"]


def _as_2d(a, name):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (one centroid per row), got shape {a.shape}.")
    return a


def match_centroids(estimated, true):
    """Best assignment of estimated heads to true centroids, up to sign.

    Solves the assignment problem of ``math.md`` section 5 exactly with the
    Hungarian method (:func:`scipy.optimize.linear_sum_assignment`) on the
    cost ``min_eps ||eps mu_j - mu*_h||^2 = ||mu_j||^2 + ||mu*_h||^2 -
    2 |<mu_j, mu*_h>|``, in O(K^3) rather than over K! permutations. When
    there are more heads than centroids, the unmatched heads are ignored.

    Parameters
    ----------
    estimated : array-like of shape (n_heads, n_features)
        Estimated heads, one per row.
    true : array-like of shape (n_clusters, n_features)
        True centroids, one per row, with ``n_clusters <= n_heads``.

    Returns
    -------
    perm : ndarray of shape (n_clusters,)
        ``estimated[perm[h]]`` is matched to ``true[h]``.
    signs : ndarray of shape (n_clusters,)
        The sign ``eps_h`` in {-1, +1} applied to ``estimated[perm[h]]``.
    cost : ndarray of shape (n_clusters,)
        ``||signs[h] * estimated[perm[h]] - true[h]||^2``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import match_centroids
    >>> perm, signs, cost = match_centroids(-np.eye(2)[::-1], np.eye(2))
    >>> perm.tolist(), signs.tolist()
    ([1, 0], [-1.0, -1.0])
    """
    est = _as_2d(estimated, "estimated")
    ref = _as_2d(true, "true")
    if est.shape[1] != ref.shape[1]:
        raise ValueError(
            f"estimated and true must have the same number of features, got "
            f"{est.shape[1]} and {ref.shape[1]}."
        )
    if est.shape[0] < ref.shape[0]:
        raise ValueError(
            f"Need at least as many estimated heads as true centroids, got "
            f"{est.shape[0]} < {ref.shape[0]}."
        )
    inner = ref @ est.T  # (n_clusters, n_heads)
    sq = np.sum(ref**2, axis=1)[:, None] + np.sum(est**2, axis=1)[None, :]
    cost = np.maximum(sq - 2.0 * np.abs(inner), 0.0)
    rows, cols = linear_sum_assignment(cost)
    signs = np.where(inner[rows, cols] >= 0, 1.0, -1.0)
    return cols, signs, cost[rows, cols]


def centroid_distance(estimated, true):
    """Distance to the centroids, invariant to relabelling and sign flips.

    ``D(U, U*) = min_{pi, eps} sum_h ||eps_h mu_{pi(h)} - mu*_h||^2``
    (``math.md`` section 5; the paper's metric of section 3.2, generalised to
    K heads). It is a sum of squared distances, as plotted in the paper's
    figures 1 and 2.

    Parameters
    ----------
    estimated : array-like of shape (n_heads, n_features)
        Estimated heads, e.g. ``AttentionClustering().cluster_centers_``.
    true : array-like of shape (n_clusters, n_features)
        True centroids.

    Returns
    -------
    distance : float

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import centroid_distance
    >>> centroid_distance([[0.0, -1.0], [1.0, 0.0]], np.eye(2))
    0.0
    """
    return float(np.sum(match_centroids(estimated, true)[2]))
