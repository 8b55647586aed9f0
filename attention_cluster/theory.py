"""Closed forms of the paper's theory: temperatures, risks, population PGD.

Every function cites the proposition of the paper (or the section of
``math.md``) it implements and is tested against a Monte Carlo estimate in
``tests/test_theory.py``. ``noise`` is the mixture's sigma, ``sequence_length``
its L, for the two-cluster model with orthogonal unit centroids unless stated.
"""

import numpy as np

__all__ = [
    "unbiased_temperature",
    "in_context_unbiased_temperature",
]


def _noise_array(noise):
    noise = np.asarray(noise, dtype=np.float64)
    if np.any(~np.isfinite(noise)) or np.any(noise < 0):
        raise ValueError("noise must be finite and >= 0.")
    return noise


def unbiased_temperature(noise, sequence_length=np.inf, n_clusters=2):
    """Temperature that makes the oracle linear layer unbiased (Prop. 4.1).

    For K equal-weight clusters with orthonormal centroids and K heads at the
    centroids, ``E[T(X)_1 | Z_1 = c] = (lambda K / L) [(1 + (K + 2) sigma^2)
    + (L - 1)(1/K + sigma^2)] mu*_c``, so the unbiased temperature is

        lambda = L / (K (1 + (K + 2) sigma^2) + (L - 1)(1 + K sigma^2)),

    which for the paper's K = 2 is ``L / ((L + 1) + 2 (L + 3) sigma^2)``
    (Prop. 4.1, ``math.md`` section 4) and tends to ``1 / (1 + K sigma^2)``
    as ``L -> infinity``. The K-cluster form is derived the same way
    (Isserlis: ``E[||P X||^2 X | Z = c] = (1 + (K + 2) sigma^2) mu*_c`` for
    the projection P onto the centroids' span).

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float, default=inf
        L >= 1, or ``np.inf`` for the limit.
    n_clusters : int, default=2
        K, the number of clusters and heads.

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import unbiased_temperature
    >>> round(float(unbiased_temperature(0.0, 9)), 6)
    0.9
    """
    s2 = _noise_array(noise) ** 2
    L = float(sequence_length)
    K = float(n_clusters)
    if np.isinf(L):
        return 1.0 / (1.0 + K * s2)
    return L / (K * (1.0 + (K + 2.0) * s2) + (L - 1.0) * (1.0 + K * s2))


def in_context_unbiased_temperature(noise, sequence_length, n_features):
    """Temperature that makes the in-context layer unbiased (Prop. 5.1).

    ``lambda = (L / 2) / (1 + (d + 2) sigma^2 + (L - 1)(1/2 + sigma^2))``,
    tending to ``1 / (1 + 2 sigma^2)`` as ``L -> infinity`` (``math.md``
    section 4). With it, ``E[T^ctx(X)_1 | Z_1 = c] = mu*_c``.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float
        L >= 1, or ``np.inf``.
    n_features : int
        Dimension d.

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import in_context_unbiased_temperature
    >>> round(float(in_context_unbiased_temperature(0.0, 3, 10)), 6)
    0.75
    """
    s2 = _noise_array(noise) ** 2
    L = float(sequence_length)
    if np.isinf(L):
        return 1.0 / (1.0 + 2.0 * s2)
    return (L / 2.0) / (1.0 + (n_features + 2.0) * s2 + (L - 1.0) * (0.5 + s2))
