r"""Closed forms of the paper's theory: temperatures, risks, population PGD.

Every function cites the proposition of the paper (or the section of
:mathmd:`math.md <1>`) it implements and is tested against a Monte Carlo estimate or an
exact enumeration in ``tests/test_theory.py``; ``docs/theory.md`` gives the
derivations. ``noise`` is the mixture's sigma, ``temperature`` the lambda of
the layer and ``sequence_length`` the sequences' L (``np.inf`` for the limit),
in this order, after a function's heads, centroids or overlaps. The closed
forms are rational functions of L and take any real ``L >= 1``: a
non-integer L is their continuous extension, which the figures draw as
curves in L (:func:`psgd_path` and the data sets, which draw sequences,
take whole numbers of tokens).
The counts ``n_features`` (d) and ``n_clusters`` (K) are keyword-only, so
that a d, a K and an L cannot be swapped unnoticed (the rules of the
estimators' ``temperature="auto"``, :func:`auto_temperature` and
:func:`in_context_unbiased_temperature`, take any K and d). Unless stated otherwise, the mixture has ``n_clusters``
equal-weight orthonormal centroids (:mathmd:`1`), so that ``n_features >=
n_clusters`` is required, and the linear layer with K heads
:math:`U = [\mu_1, \dots, \mu_K]` is (:mathmd:`2`)

.. math::

    T(X)_\ell = \frac{\lambda K}{L} \sum_{k=1}^{L} X_k X_k^\top U U^\top X_\ell .

All the risks below are exact: they come from one computation, the Gaussian
moments of :math:`\mathbb{E} \|X_1 - T(X)_1\|^2` (Isserlis' theorem, through the cumulants
of Gaussian quadratic forms), written out in ``docs/theory.md``. Where a
quantity on the way to a value leaves float64's range (a noise or a
temperature of 1e200, say), the function raises a FloatingPointError.
"""

import functools
import inspect
import numbers
from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_array

from . import _kernels
from ._objective import regularizer_code
from ._passes import rows_of, unit_rows
from ._sphere import normalize_heads, project_tangent, retract
from ._validation import (
    DENSE_LIMIT_BYTES,
    InvalidParameterError,
    as_numbers,
    check_count,
    check_matrix,
    check_noise,
    check_options,
    check_positive,
    check_seed,
    check_temperature,
    check_weights,
    finite_output,
)
from .metrics import centroid_distance

__all__ = [
    "auto_temperature",
    "unbiased_temperature",
    "in_context_unbiased_temperature",
    "population_risk",
    "population_risk_gradient",
    "risk_from_overlaps",
    "pairwise_regularizer",
    "pairwise_regularizer_gradient",
    "manifold_heads",
    "manifold_risk_coefficients",
    "manifold_risk",
    "manifold_optimal_alignment",
    "lambda_star",
    "quantizer_risk",
    "oracle_risk",
    "oracle_conditional_variance",
    "oracle_optimal_temperature",
    "in_context_risk",
    "in_context_conditional_variance",
    "in_context_optimal_temperature",
    "PGDResult",
    "population_pgd",
    "sequence_loss_gradient",
    "psgd_path",
]


def _in_float64_range(function):
    """``function`` with an overflow on the way to its value raised as one
    FloatingPointError that says so, not an OverflowError of Python's floats,
    NaN or a wrong 0 or inf returned with NumPy's RuntimeWarnings (a noise or
    temperature of 1e200 squares beyond float64)."""

    # The advice names the arguments given beyond _LARGE_ARGUMENT, largest
    # first (a sequence_length or n_features of 1e308 overflows as a noise of
    # 1e200 does); where none is, the scales the function takes
    # (unbiased_temperature takes neither a temperature nor heads).
    signature = inspect.signature(function)
    scales = [
        p
        for p in ("noise", "temperature", "heads", "heads0", "centroids")
        if p in signature.parameters
    ]

    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            with np.errstate(over="raise", invalid="raise"):
                return function(*args, **kwargs)
        except (OverflowError, FloatingPointError) as error:
            names = _large_arguments(signature, args, kwargs) or scales
            advice = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
            raise FloatingPointError(
                f"{function.__name__}: a quantity on the way to the result leaves float64's "
                f"range; lower the magnitude of {advice or 'the arguments'}."
            ) from error

    return checked


# An argument of the theory's functions beyond this magnitude is named as the
# cause of an overflow (the closed forms hold powers up to the sixth of a
# noise or a temperature, and products of them with L, d and K).
_LARGE_ARGUMENT = 1e30


def _large_arguments(signature, args, kwargs):
    """The names of the arguments (of ``signature``, bound to ``args`` and
    ``kwargs``) holding a finite number beyond ``_LARGE_ARGUMENT`` in
    magnitude, the largest first."""
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return []
    peaks = {}
    for name, value in bound.items():
        values = as_numbers(value)
        if values is not None and values.size:
            finite = np.abs(values[np.isfinite(values)])
            if finite.size and finite.max() > _LARGE_ARGUMENT:
                peaks[name] = float(finite.max())
    return sorted(peaks, key=peaks.get, reverse=True)


def _check_length(sequence_length, scalar=False):
    """L >= 1 or inf, as a float array; with ``scalar``, one number, as a float.

    Any real L >= 1: the closed forms are rational functions of L, and a
    non-integer L is their continuous extension (the figures' curves in L).
    """
    L = as_numbers(sequence_length)
    if (
        L is None
        and isinstance(sequence_length, numbers.Integral)
        and not isinstance(sequence_length, (bool, np.bool_))
        and sequence_length > 0
    ):
        # An integer beyond float64 (10**400): the L -> inf limit, to float64.
        L = np.asarray(np.inf)
    if L is None or not (L >= 1).all():
        raise InvalidParameterError(
            f"sequence_length must be >= 1 or np.inf, got {sequence_length!r}."
        )
    if scalar:
        if L.ndim != 0:
            raise InvalidParameterError(
                f"sequence_length must be one number here, got shape {L.shape}."
            )
        return float(L)
    return L


# How far beyond [-1, 1] a cosine of float64 unit vectors may lie by rounding
# (<v, v> of a normalised v is often 1 + 2^-52): such a cosine is taken as
# +-1. The same allowance as risk_from_overlaps' check of their Gram matrix,
# so that no overlaps it realises are refused before it.
_COSINE_ROUNDING = 1e-10


def _cosines(value, name, meaning, *, scalar=False):
    """Cosines of unit vectors (alignments, overlaps), real numbers in [-1, 1]
    up to rounding (``_COSINE_ROUNDING``), clipped to [-1, 1], as a float
    array; with ``scalar``, one number, as a float. Text and bools are
    refused, as for the noise (:func:`~attention_cluster._validation.as_numbers`)."""
    c = as_numbers(value)
    if c is None or not np.all(np.abs(c) <= 1.0 + _COSINE_ROUNDING):
        raise InvalidParameterError(
            f"{name} must lie in [-1, 1] ({meaning}; numbers, not text or bools), got {value!r}."
        )
    c = np.clip(c, -1.0, 1.0)
    if scalar:
        if c.ndim != 0:
            raise InvalidParameterError(f"{name} must be one number, got shape {c.shape}.")
        return float(c)
    return c


def _temperatures(temperature):
    """lambda >= 0 as a float array (theory's curves take arrays)."""
    return np.asarray(check_temperature(temperature, allow_zero=True, curve=True), dtype=np.float64)


def _finite_length(L):
    """``(Lf, where)``: L with 1 in place of inf, and ``where(limit, value)``,
    the limit where L is inf and the value elsewhere.

    Arrays, or for one L given as a float (:func:`auto_temperature`'s) a
    float64 scalar and the one value: NumPy's scalar arithmetic checks
    overflow and rounds as that of arrays, at a tenth of the cost. The
    closed forms in L evaluate at Lf, so that the L = inf they replace by
    their limit meets no inf / inf.
    """
    if isinstance(L, float):
        inf = L == np.inf

        def where(limit, value):
            return limit if inf else value

        return np.float64(1.0 if inf else L), where
    inf = np.isinf(L)
    return np.where(inf, 1.0, L), functools.partial(np.where, inf)


def _length_weights(L):
    """Weights of the self and cross terms, divided by L (first) and L^2 (second).

    ``a1 / L = w1 . (T1, T2)`` and ``a2 / L^2 = w2 . (T3, T4, T5, T6)`` in the
    notation of ``docs/theory.md``; the ``L -> infinity`` limit keeps the
    cross terms ``T2`` and ``T6`` only.
    """
    Lf, where = _finite_length(L)
    # Lf * Lf: NumPy's Lf**2 of an array (a float64 scalar's ** is C's pow,
    # which can round the last bit apart).
    L2 = Lf * Lf
    w1 = np.array([where(0.0, 1.0 / Lf), where(1.0, (Lf - 1.0) / Lf)])
    w2 = np.array(
        [
            where(0.0, 1.0 / L2),
            where(0.0, 2.0 * (Lf - 1.0) / L2),
            where(0.0, (Lf - 1.0) / L2),
            where(1.0, (Lf - 1.0) * (Lf - 2.0) / L2),
        ]
    )
    return w1, w2


@_in_float64_range
def unbiased_temperature(noise, sequence_length=np.inf, *, n_clusters=2):
    """Temperature that makes the oracle linear layer unbiased (Prop. 4.1).

    For K equal-weight clusters with orthonormal centroids and K heads at the
    centroids, ``E[T(X)_1 | Z_1 = c] = (lambda K / L) [(1 + (K + 2) sigma^2)
    + (L - 1)(1/K + sigma^2)] mu*_c``, so the unbiased temperature is

        lambda = L / (K (1 + (K + 2) sigma^2) + (L - 1)(1 + K sigma^2)),

    which for the paper's K = 2 is ``L / ((L + 1) + 2 (L + 3) sigma^2)``
    (Prop. 4.1, :mathmd:`4`) and tends to ``1 / (1 + K sigma^2)``
    as ``L -> infinity``. The K-cluster form is derived the same way
    (Isserlis: ``E[||P X||^2 X | Z = c] = (1 + (K + 2) sigma^2) mu*_c`` for
    the projection P onto the centroids' span).

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float or array-like, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf`` for the limit; broadcast with ``noise``.
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
    s2 = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    return _unbiased_temperature(s2, L, float(check_count(n_clusters, "n_clusters")))


def _unbiased_temperature(s2, L, K):
    """:func:`unbiased_temperature` for ``s2 = sigma^2``, unchecked: arrays,
    or a float64 for one setting given as a float64 ``s2`` and a float L
    (:func:`_finite_length`)."""
    Lf, where = _finite_length(L)
    limit = 1.0 / (1.0 + K * s2)
    finite = Lf / (K * (1.0 + (K + 2.0) * s2) + (Lf - 1.0) * (1.0 + K * s2))
    return where(limit, finite)[()]


@_in_float64_range
def in_context_unbiased_temperature(noise, sequence_length, *, n_features, n_clusters=2):
    """Temperature that makes the in-context layer unbiased (Prop. 5.1).

    For K equal-weight clusters with orthonormal unit centroids,
    ``E[T^ctx(X)_1 | Z_1 = c] = (lambda K / L) [(1 + (d + 2) sigma^2)
    + (L - 1)(1/K + sigma^2)] mu*_c``: the first term is
    ``E[||X_1||^2 X_1 | Z_1 = c]`` (Isserlis), the second ``(L - 1)
    E[X X^T] mu*_c``. Hence

        lambda = (L / K) / (1 + (d + 2) sigma^2 + (L - 1)(1/K + sigma^2)),

    which for the paper's K = 2 is Prop. 5.1, ``(L / 2) / (1 + (d + 2)
    sigma^2 + (L - 1)(1/2 + sigma^2))`` (:mathmd:`4`), and tends
    to ``1 / (1 + K sigma^2)`` as ``L -> infinity``. With it,
    ``E[T^ctx(X)_1 | Z_1 = c] = mu*_c``.

    More clusters than features (K > d): K unit centroids cannot be
    orthonormal. For centroids that form a tight frame of R^d (equal
    weights, ``(1/K) sum_k mu*_k mu*_k^T = I / d``: the vertices of a
    regular simplex, ``+-e_i``; K random directions approximately),
    ``E[X X^T] mu*_c = (1/d + sigma^2) mu*_c``, and the same derivation
    gives the formula with ``1/d`` in place of ``1/K`` in its last term:
    ``1/min(K, d)`` in general (:mathmd:`4`), tending to ``d / (K (1 + d
    sigma^2))``. At that temperature the layer's map ``lambda K E[X X^T]``
    is the identity as L grows: a linear map that fixes K centroids
    spanning R^d fixes every point, so the layer is unbiased but moves no
    token towards its centroid.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float or array-like
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``; broadcast with ``noise``.
    n_features : int
        Dimension d, any d >= 1.
    n_clusters : int, default=2
        K, the number of clusters of the prompt; any K >= 1, K > d too
        (centroids of a tight frame, above).

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import in_context_unbiased_temperature
    >>> round(float(in_context_unbiased_temperature(0.0, 3, n_features=10)), 6)
    0.75
    """
    s2 = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    n_features = check_count(n_features, "n_features")
    # Each centroid's eigenvalue of the centroids' second moment: 1/K for
    # orthonormal ones, 1/d for a tight frame of R^d (math.md section 4).
    m = min(K, n_features)
    share = 1.0 / m
    limit = 1.0 / (K / m + K * s2)  # (1/K) / (share + sigma^2)
    with np.errstate(invalid="ignore"):  # inf / inf where L = inf, replaced by the limit
        finite = (L / K) / (1.0 + (n_features + 2.0) * s2 + (L - 1.0) * (share + s2))
    return np.where(np.isinf(L), limit, finite)[()]


# ---------------------------------------------------------------------------
# The general closed form: any heads, any centroids and weights.
# ---------------------------------------------------------------------------


def _sym(A):
    return 0.5 * (A + A.T)


def _reduce(*arrays):
    """Orthonormal coordinates of the span of the rows of ``arrays``.

    The risk of heads ``U`` for centroids ``C`` only involves the span of
    their rows (plus the ambient dimension d through ``tr I_d``), so every
    computation runs in r <= n_heads + n_clusters dimensions. The span is
    that of the rows' directions (:func:`~._passes.unit_rows`): the rank's
    cutoff, relative to the largest singular value, read on the rows as
    given, dropped the span of heads 1e15 times smaller than the centroids
    (or larger), whose risk depends on lambda U U^T alone.
    """
    stacked = unit_rows(np.vstack(arrays))
    _, sv, vt = np.linalg.svd(stacked, full_matrices=False)
    tol = sv[0] * max(stacked.shape) * np.finfo(np.float64).eps
    basis = vt[: max(int(np.sum(sv > tol)), 1)]
    return basis, [a @ basis.T for a in arrays]


def _n1(kappa, A, Am, means, s, eye):
    """``E_c[(x^T A x) x x^T]`` for each component, x ~ N(m_c, s I).

    ``kappa[c] = s tr A + m_c^T A m_c`` and ``Am[c] = A m_c``.
    """
    outer = means[:, :, None] * means[:, None, :]
    cross = Am[:, :, None] * means[:, None, :]
    return (
        kappa[:, None, None] * (s * eye + outer)
        + 2.0 * s**2 * A
        + 2.0 * s * (cross + cross.transpose(0, 2, 1))
    )


def _average(weights, arrays):
    """``sum_c weights[c] arrays[c]``, faster than tensordot for small arrays."""
    return (weights @ arrays.reshape(len(weights), -1)).reshape(arrays.shape[1:])


class _LayerMoments:
    """Exact moments of the linear layer, normalised by the temperature.

    With ``tau = lambda K`` (so that ``c = tau / L``),

        E||X_1 - T(X)_1||^2 = a0 - 2 tau a1 + tau^2 a2,

    ``a0 = E||X_1||^2``, ``tau a1 = E<X_1, T(X)_1>``, ``tau^2 a2 = E||T(X)_1||^2``
    (``docs/theory.md``, "General closed form", with ``M_x = M``). The means
    are in orthonormal coordinates of a subspace containing the heads and the
    centroids; ``n_features`` is the ambient d, which enters only through
    ``E||x||^2``. What does not depend on the heads is computed once.
    """

    def __init__(self, means, weights, s, n_features, L):
        eye = np.eye(means.shape[1])
        self.means, self.weights, self.s, self.eye = means, weights, s, eye
        self.w1, self.w2 = _length_weights(L)
        self.outer = means[:, :, None] * means[:, None, :]
        self.k_id = s * n_features + np.sum(means**2, axis=1)  # E_c||x||^2, ambient trace
        self.M = _average(weights, self.outer) + s * eye
        self.M4 = _average(weights, _n1(self.k_id, eye, means, means, s, eye))
        self.M2 = self.M @ self.M
        self.a0 = weights @ self.k_id
        self.d_id = 2.0 * s**2 * eye + 4.0 * s * self.outer

    def __call__(self, P, gradient=False):
        """``(a0, a1, a2)`` for ``P = U U^T``, and with ``gradient=True`` also
        the symmetric matrices ``(g1, g2)``, the gradients of a1, a2 in P."""
        means, s, eye, w, k_id = self.means, self.s, self.eye, self.weights, self.k_id
        M, M4, M2 = self.M, self.M4, self.M2
        w1, w2 = self.w1, self.w2
        Pm = means @ P
        p = np.sum(means * Pm, axis=1)
        q = np.sum(Pm * Pm, axis=1)
        trP = np.trace(P)
        trP2 = np.sum(P * P)
        # Cumulants of the quadratic forms x^T P x and ||x||^2 (docs/theory.md).
        k_p = s * trP + p
        k_pi = 2.0 * s**2 * trP + 4.0 * s * p
        k_pp = 2.0 * s**2 * trP2 + 4.0 * s * q
        k_ppi = 8.0 * s**3 * trP2 + 24.0 * s**2 * q
        n1_p = _n1(k_p, P, Pm, means, s, eye)
        PM = P @ M
        T1 = w @ (k_p * k_id + k_pi)
        T2 = np.sum(P * M2)
        T3 = w @ (k_p**2 * k_id + k_pp * k_id + 2.0 * k_pi * k_p + k_ppi)
        T4 = w @ np.sum(PM[None] * n1_p, axis=(1, 2))
        T5 = np.sum((P @ M4 @ P) * M)
        T6 = np.sum((P @ M2 @ P) * M)
        a1 = w1[0] * T1 + w1[1] * T2
        a2 = w2[0] * T3 + w2[1] * T4 + w2[2] * T5 + w2[3] * T6
        if not gradient:
            return self.a0, a1, a2
        # d/dP of each term (docs/theory.md, "Gradient").
        mPm = Pm[:, :, None] * means[:, None, :]
        mPm = mPm + mPm.transpose(0, 2, 1)
        n2 = (
            (k_p * k_id + k_pi)[:, None, None] * (s * eye + self.outer)
            + k_p[:, None, None] * self.d_id
            + k_id[:, None, None] * (2.0 * s**2 * P + 2.0 * s * mPm)
            + (8.0 * s**3 * P + 12.0 * s**2 * mPm)
        )
        S = _sym(PM)
        Sm = means @ S
        k_s = s * np.trace(S) + np.sum(means * Sm, axis=1)
        dT3 = 2.0 * _average(w, n2)
        dT4 = _average(w, _n1(k_s, S, Sm, means, s, eye)) + _sym(_average(w, n1_p) @ M)
        dT5 = M4 @ P @ M
        dT6 = M2 @ P @ M
        g1 = w1[0] * M4 + w1[1] * M2
        g2 = w2[0] * dT3 + w2[1] * dT4 + w2[2] * (dT5 + dT5.T) + w2[3] * (dT6 + dT6.T)
        return self.a0, a1, a2, g1, g2


def _problem(heads, centroids, noise, temperature, sequence_length, weights):
    centroids = check_matrix(centroids, "centroids", labels=("n_clusters", "d"))
    heads = check_matrix(heads, "heads", shape=(None, centroids.shape[1]), labels=("n_heads", "d"))
    weights = check_weights(weights, centroids.shape[0])
    # One setting of the layer: its heads and centroids are arrays already.
    s = check_noise(noise, scalar=True) ** 2
    tau = check_temperature(temperature, allow_zero=True) * heads.shape[0]
    return heads, centroids, weights, s, tau, _check_length(sequence_length, scalar=True)


def _nonnegative(*terms):
    """``sum(terms)``, a mean square or a variance: 0 where it is negative by
    no more than its terms' rounding (64 eps times the sum of their absolute
    values), where the exact value is 0 (the oracle layer's ``(d - K)
    sigma^2`` at ``d = K``, ``L = inf`` and its optimal temperature came out
    at -2e-16); a value further below 0 is returned as it is, an error to
    see rather than hide."""
    value = sum(terms)
    rounding = 64.0 * np.finfo(np.float64).eps * sum(np.abs(t) for t in terms)
    # [()]: a scalar for scalar terms, as NumPy's arithmetic gives.
    return np.where((value < 0.0) & (value >= -rounding), 0.0, value)[()]


def _mean_square(a0, a1, a2, tau):
    """The risk ``a0 - 2 tau a1 + tau^2 a2`` from the layer's moments
    (:func:`_nonnegative`)."""
    return _nonnegative(a0, -2.0 * tau * a1, tau**2 * a2)


def _risk_and_gradient(moments, U, tau):
    """Risk and the symmetric H with ``grad_U R = H U`` (heads as columns).

    The risk is the smooth polynomial whose gradient H is (not clamped at 0
    as :func:`_mean_square` is), the objective of :func:`population_pgd`.
    """
    a0, a1, a2, g1, g2 = moments(U @ U.T, gradient=True)
    risk = a0 - 2.0 * tau * a1 + tau**2 * a2
    return risk, 2.0 * (tau**2 * g2 - 2.0 * tau * g1)


@_in_float64_range
def population_risk(heads, centroids, noise, temperature, sequence_length=np.inf, weights=None):
    """Exact population risk of the linear attention layer (Prop. 3.1).

    ``R(U) = E[(1/L) sum_l ||X_l - T(X)_l||^2] = E||X_1 - T(X)_1||^2`` for the
    layer ``T(X)_l = (lambda K / L) sum_k X_k X_k^T U U^T X_l`` with K heads
    (:mathmd:`math.md sections 2-3 <2>`) and i.i.d. tokens from the Gaussian mixture
    with the given centroids, weights and noise (:mathmd:`1`).

    The paper gives this risk as a polynomial in the overlaps of the heads
    with the centroids (Prop. 3.1; its Appendix C.1 is not available). Here it
    is computed for arbitrary heads, centroids and weights from the Gaussian
    moments of the mixture (Isserlis' theorem)::

        R = E||X_1||^2 - 2c [T1 + (L-1) T2]
            + c^2 [T3 + 2(L-1) T4 + (L-1) T5 + (L-1)(L-2) T6],   c = lambda K / L,

    where ``T1, T3`` come from the token attending to itself and the others
    from pairs and triples of distinct tokens (derivation in
    ``docs/theory.md``). The heads need not be unit vectors.

    Parameters
    ----------
    heads : array-like of shape (n_heads, n_features)
        One head ``mu_h`` per row.
    centroids : array-like of shape (n_clusters, n_features)
        Centroids ``mu*_c`` (any norms, not necessarily orthogonal).
    noise : float
        sigma >= 0.
    temperature : float
        lambda >= 0.
    sequence_length : float, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf`` for the limit ``E||X_1 - lambda K M U U^T X_1||^2`` with
        ``M = E[X X^T]``.
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights, uniform when None.

    Returns
    -------
    risk : float

    See Also
    --------
    population_risk_gradient, manifold_risk, risk_from_overlaps

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import population_risk
    >>> C = np.eye(2, 6)
    >>> round(population_risk(C, C, 0.0, 1.0, 1), 6)  # X_1 = mu*: T_1 = 2 X_1
    1.0
    """
    heads, centroids, weights, s, tau, L = _problem(
        heads, centroids, noise, temperature, sequence_length, weights
    )
    _, (U, means) = _reduce(heads, centroids)
    a0, a1, a2 = _LayerMoments(means, weights, s, heads.shape[1], L)(U.T @ U)
    return float(_mean_square(a0, a1, a2, tau))


@_in_float64_range
def population_risk_gradient(
    heads, centroids, noise, temperature, sequence_length=np.inf, weights=None
):
    """Euclidean gradient of :func:`population_risk` in the heads.

    ``R`` depends on the heads through ``P = U U^T`` only, so
    ``grad_U R = 2 G U`` with ``G = dR/dP`` (``docs/theory.md``, "Gradient").
    The Riemannian gradient on the sphere used by PGD (:mathmd:`math.md
    section 3 <3>`) is its projection ``(I - mu_h mu_h^T) grad_{mu_h}``.

    Parameters
    ----------
    heads, centroids, noise, temperature, sequence_length, weights
        As in :func:`population_risk`.

    Returns
    -------
    gradient : ndarray of shape (n_heads, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import population_risk_gradient
    >>> C = np.eye(2, 6)
    >>> g = population_risk_gradient(C, C, 0.3, 0.5, 10)
    >>> bool(np.allclose(g - np.diag(np.diag(g @ C.T)) @ C, 0))  # radial at the centroids
    True
    """
    heads, centroids, weights, s, tau, L = _problem(
        heads, centroids, noise, temperature, sequence_length, weights
    )
    basis, (U, means) = _reduce(heads, centroids)
    moments = _LayerMoments(means, weights, s, heads.shape[1], L)
    H = _risk_and_gradient(moments, U.T, tau)[1]
    return U @ H @ basis


@_in_float64_range
def risk_from_overlaps(
    kappa0, kappa1, eta0, eta1, xi, noise, temperature, sequence_length, *, n_features
):
    """Risk of two unit heads as a function of their five overlaps (Prop. 3.1).

    Prop. 3.1: for two orthogonal unit centroids with equal weights, the risk
    of two unit heads only depends on ``kappa_i = <mu_i, mu*_i>``,
    ``eta_0 = <mu_0, mu*_1>``, ``eta_1 = <mu_1, mu*_0>`` and
    ``xi = <mu_0, mu_1>``. The heads are realised from the Gram matrix of
    ``(mu*_0, mu*_1, mu_0, mu_1)`` and the risk evaluated exactly with
    :func:`population_risk`. On the manifold M (``eta = xi = 0``) this is
    :func:`manifold_risk`.

    Parameters
    ----------
    kappa0, kappa1, eta0, eta1, xi : float
        Overlaps, cosines of unit vectors in [-1, 1] (Prop. 3.1's
        ``R : [-1, 1]^5 -> R``; one beyond by 1e-10 at most, rounding, is
        taken as +-1); the Gram matrix they define must be positive
        semi-definite with rank at most ``n_features``.
    noise, temperature, sequence_length : float
        sigma, lambda and L.
    n_features : int
        Dimension d.

    Returns
    -------
    risk : float

    Examples
    --------
    >>> from attention_cluster.theory import risk_from_overlaps, manifold_risk
    >>> r = risk_from_overlaps(0.6, 0.8, 0.0, 0.0, 0.0, 0.3, 0.9, 10, n_features=5)
    >>> bool(abs(r - manifold_risk([0.6, 0.8], 0.3, 0.9, 10, n_features=5)) < 1e-12)
    True
    """
    n_features = check_count(n_features, "n_features", 2)
    # The overlaps are cosines of unit vectors (Prop. 3.1's R : [-1, 1]^5 -> R).
    kappa0, kappa1, eta0, eta1, xi = (
        _cosines(value, name, f"<{pair}>", scalar=True)
        for value, name, pair in (
            (kappa0, "kappa0", "mu_0, mu*_0"),
            (kappa1, "kappa1", "mu_1, mu*_1"),
            (eta0, "eta0", "mu_0, mu*_1"),
            (eta1, "eta1", "mu_1, mu*_0"),
            (xi, "xi", "mu_0, mu_1"),
        )
    )
    gram = np.array(
        [
            [1.0, 0.0, kappa0, eta1],
            [0.0, 1.0, eta0, kappa1],
            [kappa0, eta0, 1.0, xi],
            [eta1, kappa1, xi, 1.0],
        ]
    )
    vals, vecs = np.linalg.eigh(gram)
    tol = _COSINE_ROUNDING
    if vals[0] < -tol or np.sum(vals > tol) > n_features:
        raise InvalidParameterError(
            "The overlaps are not realisable by unit vectors in R^n_features."
        )
    coords = vecs * np.sqrt(np.clip(vals, 0.0, None))
    centroids, heads = coords[:2], coords[2:]
    _, _, weights, s, tau, L = _problem(heads, centroids, noise, temperature, sequence_length, None)
    a0, a1, a2 = _LayerMoments(centroids, weights, s, n_features, L)(heads.T @ heads)
    return float(_mean_square(a0, a1, a2, tau))


# ---------------------------------------------------------------------------
# The pairwise regularizer.
# ---------------------------------------------------------------------------


def _pairwise_terms(U, centroids, weights, s):
    """Value and gradient of ``sum_{j<k} E[<u_j, x>^2 <u_k, x>^2]`` (``math.md`` section 3).

    For one component, ``y = U^T x ~ N(alpha, s G)`` with ``alpha = U^T m``,
    ``G = U^T U``, and Isserlis gives ``E[y_j^2 y_k^2] = v_j v_k
    + 2 s^2 G_jk^2 + 4 s alpha_j alpha_k G_jk`` with ``v = alpha^2 + s diag G``.
    The gradient in ``u_j`` is ``2 sum_{k != j} E[<u_k, x>^2 x x^T] u_j``.
    """
    G = U.T @ U
    off = 1.0 - np.eye(G.shape[0])
    value = 0.0
    grad = np.zeros_like(U)
    for m, w in zip(centroids, weights):
        alpha = U.T @ m
        v = alpha**2 + s * np.diag(G)
        pair = np.outer(v, v) + 2.0 * s**2 * G**2 + 4.0 * s * np.outer(alpha, alpha) * G
        value += w * 0.5 * np.sum(pair * off)
        others = off @ v  # sum_{k != j} E<u_k, x>^2
        grad += w * (
            s * U * others
            + np.outer(m, alpha * others)
            + 2.0 * s**2 * U @ (G * off)
            + 2.0 * s * U @ (np.outer(alpha, alpha) * off)
            + 2.0 * s * np.outer(m, alpha @ (G * off))
        )
    return value, 2.0 * grad


@_in_float64_range
def pairwise_regularizer(heads, centroids, noise, weights=None):
    """Population value of the pairwise regularizer (:mathmd:`3`).

    ``r(U) = sum_{j<k} E[<mu_j, X>^2 <mu_k, X>^2]`` for X drawn from the
    mixture (paper, section 3.3: ``r(mu_0, mu_1) = E[<mu_0, X_1>^2
    <mu_1, X_1>^2]``, and its K-head version of section 3.3 "More
    clusters"). Closed form from Isserlis' theorem: with ``alpha = U^T m``,
    ``G = U^T U`` and ``v = alpha^2 + sigma^2 diag G`` for a component of
    mean m, ``E[<u_j,X>^2 <u_k,X>^2] = v_j v_k + 2 sigma^4 G_jk^2
    + 4 sigma^2 alpha_j alpha_k G_jk``.

    Parameters
    ----------
    heads : array-like of shape (n_heads, n_features)
    centroids : array-like of shape (n_clusters, n_features)
    noise : float
        sigma >= 0.
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights, uniform when None.

    Returns
    -------
    value : float

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import pairwise_regularizer
    >>> C = np.eye(2, 4)
    >>> pairwise_regularizer(C, C, 0.0)  # orthogonal heads at the centroids
    0.0
    """
    heads, centroids, weights, s, _, _ = _problem(heads, centroids, noise, 0.0, 1, weights)
    return float(_pairwise_terms(heads.T, centroids, weights, s)[0])


@_in_float64_range
def pairwise_regularizer_gradient(heads, centroids, noise, weights=None):
    """Euclidean gradient of :func:`pairwise_regularizer` in the heads.

    ``grad_{mu_j} r = 2 sum_{k != j} E[<mu_k, X>^2 X X^T] mu_j``
    (:mathmd:`3`; closed form in ``docs/theory.md``).

    Parameters
    ----------
    heads, centroids, noise, weights
        As in :func:`pairwise_regularizer`.

    Returns
    -------
    gradient : ndarray of shape (n_heads, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import pairwise_regularizer_gradient
    >>> C = np.eye(2, 4)
    >>> pairwise_regularizer_gradient(C, C, 0.0).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    heads, centroids, weights, s, _, _ = _problem(heads, centroids, noise, 0.0, 1, weights)
    return _pairwise_terms(heads.T, centroids, weights, s)[1].T


# ---------------------------------------------------------------------------
# The manifold M, lambda*(sigma, L) and the oracle layer (Lemma 3.2, Prop. 3.3,
# Prop. 4.2), for K orthonormal equal-weight centroids and K heads.
# ---------------------------------------------------------------------------


def _manifold_terms(s, n_features, K):
    """``k``, a zero and the rows ``(t0, t1, t2, t3)`` of ``T1 ... T6`` on the
    manifold (:func:`_manifold_moments`), of s's shape: arrays, or float64
    scalars for a float s (:func:`_finite_length`)."""
    if isinstance(s, float):
        s = np.float64(s)
        zero, one = np.float64(0.0), np.float64(1.0)
    else:
        s = np.asarray(s, dtype=np.float64)
        zero, one = np.zeros_like(s), np.ones_like(s)
    k = 1.0 + n_features * s
    # s * s: NumPy's s**2 of an array (as Lf * Lf in _length_weights).
    s2 = s * s
    rows = [
        [s * K * k + 2 * s2 * K, (k + 4 * s) / K, zero, zero],
        [s2 * K, (1 + 2 * K * s) / K**2 * one, zero, zero],
        [s2 * K * (K + 2) * (k + 4 * s), 2 * s * (K + 2) * (k + 6 * s) / K, (k + 8 * s) / K, zero],
        [
            s**3 * K * (K + 2),
            (3 * K * s2 + s + 6 * s2 + 2 * s / K) / K,
            (1 + K * s + 2 * s) / K**2,
            s / K**2,
        ],
        [s2 * K * (k + 2 * s), 2 * s * (k + 3 * s) / K, (k + 4 * s) / K**2, zero],
        [s**3 * K, s * (1 + 3 * K * s) / K**2, (1 + 2 * K * s) / K**3, zero],
    ]
    return k, zero, rows


def _weigh(w1, w2, T):
    """``a1 = w1 . (T1, T2)`` and ``a2 = w2 . (T3, T4, T5, T6)``, the terms
    weighed by :func:`_length_weights`."""
    return w1[0] * T[0] + w1[1] * T[1], w2[0] * T[2] + w2[1] * T[3] + w2[2] * T[4] + w2[3] * T[5]


def _manifold_moments(s, n_features, K, L):
    """Coefficients of ``a0, a1, a2`` as polynomials in the alignments.

    On the manifold M (head h orthogonal to the other centroids and to the
    other heads), with ``u_h = kappa_h^2``, ``S1 = sum u`` and
    ``S2 = sum u^2``, each term of :class:`_LayerMoments` is
    ``t0 + t1 S1 + t2 S2 + t3 S1^2``; the rows of :func:`_manifold_terms` are
    ``(t0, t1, t2, t3)`` for ``T1 ... T6`` (derivation in ``docs/theory.md``,
    "The manifold"); the returned ``a0, a1, a2`` carry them on their last
    axis. ``k = 1 + d sigma^2`` is the cumulant of ``||X||^2``.
    """
    k, zero, rows = _manifold_terms(s, n_features, K)
    T = np.moveaxis(np.array(rows), 1, -1)  # (6, ..., 4): coefficients last, to broadcast with L
    a1, a2 = _weigh(*(w[..., None] for w in _length_weights(L)), T)
    return np.stack([k, zero, zero, zero], axis=-1), a1, a2


def _needs_dimension(s, L, n_features, K, constant=False):
    """d of the manifold's closed forms: at least K (K orthonormal centroids),
    and required unless it drops out (``sigma = 0``, or ``L = inf`` for the
    risk's terms in kappa; 0 then). ``constant``: the risk's constant D is
    wanted, which holds ``E||X||^2 = 1 + d sigma^2`` at every L."""
    if n_features is None:
        if not np.any(s > 0) or (not constant and np.all(np.isinf(L))):
            return 0
        if constant:
            raise InvalidParameterError(
                "n_features is required for noise > 0: the risk's constant holds "
                "E||X||^2 = 1 + d sigma^2."
            )
        raise InvalidParameterError(
            "n_features is required for a finite sequence_length and noise > 0: the "
            "token attending to itself brings E||X||^2 = 1 + d sigma^2 into the risk."
        )
    return check_count(n_features, "n_features", K)


def _manifold_coefficients(s, L, K, d, temperature):
    """``(A, B, C, D)`` of :func:`manifold_risk_coefficients` for ``s =
    sigma^2``, checked L, K and d."""
    tau = _temperatures(temperature) * K
    a0, a1, a2 = _manifold_moments(s, d, K, L)
    tau = tau[..., None]
    coef = a0 - 2.0 * tau * a1 + tau**2 * a2
    # [()]: NumPy scalars for scalar settings, as the other closed forms give.
    return coef[..., 2][()], -coef[..., 1][()], coef[..., 3][()], coef[..., 0][()]


@_in_float64_range
def manifold_risk_coefficients(
    noise, temperature, sequence_length=np.inf, *, n_features=None, n_clusters=2
):
    r"""Constants of the risk restricted to the manifold M (Lemma 3.2).

    On ``M = {heads with <mu_h, mu*_j> = 0 and <mu_h, mu_j> = 0 for j != h}``
    the risk only depends on the alignments :math:`\kappa_h = \langle \mu_h, \mu^\star_h \rangle`

    .. math::

        R(\kappa) = D - B \sum_h \kappa_h^2 + A \sum_h \kappa_h^4
        + C \Big(\sum_h \kappa_h^2\Big)^2

    (Lemma 3.2 for K = 2; the paper's explicit constants, Lemma C.1, are not
    available and were re-derived, :mathmd:`4`; the constants in
    ``docs/theory.md``). ``A, C >= 0``,
    so R is convex in ``(kappa_h^2)_h``. For sigma > 0, D depends on d
    through ``E||X||^2 = 1 + d sigma^2``, and for finite L so do A, B and C.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    temperature : float or array-like
        lambda >= 0.
    sequence_length : float, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``.
    n_features : int, default=None
        d >= K; required when sigma > 0 (D holds ``d sigma^2``).
    n_clusters : int, default=2
        K, the number of orthonormal equal-weight centroids and of heads.

    Returns
    -------
    A, B, C, D : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import manifold_risk_coefficients
    >>> A, B, C, D = manifold_risk_coefficients(0.0, 1.0)
    >>> float(A), float(B), float(C), float(D)
    (0.5, 1.0, 0.0, 1.0)
    """
    s = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    d = _needs_dimension(s, L, n_features, K, constant=True)
    return _manifold_coefficients(s, L, K, d, temperature)


@_in_float64_range
def manifold_risk(alignment, noise, temperature, sequence_length=np.inf, *, n_features=None):
    """Risk on the manifold M as a function of the alignments (Lemma 3.2).

    ``R(kappa) = D - B sum kappa_h^2 + A sum kappa_h^4 + C (sum kappa_h^2)^2``
    with the constants of :func:`manifold_risk_coefficients`; equal to
    :func:`population_risk` for heads ``mu_h = kappa_h mu*_h +
    sqrt(1 - kappa_h^2) v_h`` with orthonormal ``v_h`` orthogonal to the
    centroids (see :func:`manifold_heads`).

    Parameters
    ----------
    alignment : array-like of shape (..., n_clusters)
        ``kappa_h = <mu_h, mu*_h>`` in [-1, 1] (beyond by 1e-10 at most,
        rounding: taken as +-1), one per head (the paper's
        ``(kappa_0, kappa_1)`` for K = 2); leading axes broadcast.
    noise, temperature, sequence_length, n_features
        As in :func:`manifold_risk_coefficients`.

    Returns
    -------
    risk : float or ndarray of shape (...)

    Examples
    --------
    >>> from attention_cluster.theory import manifold_risk
    >>> float(manifold_risk([1.0, 1.0], 0.0, 1.0))  # L = inf, sigma = 0: T = X
    0.0
    """
    kappa = _cosines(alignment, "alignment", "kappa_h = <mu_h, mu*_h>, unit vectors")
    if kappa.ndim == 0 or kappa.shape[-1] == 0:
        raise InvalidParameterError(
            f"alignment must hold one kappa per head along its last axis, got shape {kappa.shape}."
        )
    u = kappa**2
    A, B, C, D = manifold_risk_coefficients(
        noise, temperature, sequence_length, n_features=n_features, n_clusters=u.shape[-1]
    )
    S1 = np.sum(u, axis=-1)
    return _nonnegative(D, -B * S1, A * np.sum(u**2, axis=-1), C * S1**2)


@_in_float64_range
def manifold_optimal_alignment(
    noise, temperature, sequence_length=np.inf, *, n_features=None, n_clusters=2
):
    """Alignment ``|kappa|`` of the minimiser of the risk on M (Prop. 3.3).

    R is convex in ``u = (kappa_h^2)_h`` on ``[0, 1]^K`` and symmetric, so its
    minimiser has equal coordinates, ``u* = B / (2 (A + K C))`` clipped to
    ``[0, 1]`` (constants of :func:`manifold_risk_coefficients`;
    :mathmd:`4`). It is 1
    (heads at the centroids) exactly when ``lambda <= lambda*``
    (:func:`lambda_star`); above, the heads tilt out of the centroids' span
    towards their orthogonal directions ``v_h``, to ``kappa* = sqrt(u*)``.
    Plotting ``kappa*`` against ``lambda / lambda*`` shows this transition;
    :func:`population_pgd` started on M converges to it.

    Parameters
    ----------
    noise, temperature, sequence_length
        As in :func:`manifold_risk_coefficients`.
    n_features : int, default=None
        d >= K; required when L is finite and sigma > 0 (the constant D,
        which holds d at every L, plays no part).
    n_clusters : int, default=2
        As in :func:`manifold_risk_coefficients`.

    Returns
    -------
    alignment : float or ndarray
        ``kappa* in [0, 1]``.

    Examples
    --------
    >>> from attention_cluster.theory import lambda_star, manifold_optimal_alignment
    >>> lam = float(lambda_star(0.3, 100, n_features=10))
    >>> float(manifold_optimal_alignment(0.3, lam, 100, n_features=10))
    1.0
    >>> round(float(manifold_optimal_alignment(0.3, 1.5 * lam, 100, n_features=10)), 4)
    0.7942
    """
    s = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    # The constant D, which alone needs d at L = inf, plays no part.
    A, B, C, _ = _manifold_coefficients(s, L, K, _needs_dimension(s, L, n_features, K), temperature)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(A + K * C > 0, B / (2.0 * (A + K * C)), 1.0)
    return np.sqrt(np.clip(u, 0.0, 1.0))


@_in_float64_range
def lambda_star(noise, sequence_length=np.inf, *, n_features=None, n_clusters=2):
    r"""Largest temperature with the heads at the centroids as minimisers on M.

    Prop. 3.3 (explicit form in the paper's Prop. C.2, not available,
    re-derived here): on the manifold M the risk is convex in
    ``u = (kappa_h^2)_h`` (:func:`manifold_risk_coefficients`), so the
    corners ``kappa_h = +-1`` are its global minimisers iff
    ``dR/du_h <= 0`` at ``u = 1``, i.e. iff :math:`\lambda \le \lambda^\star` with

    .. math::

        \lambda^\star = \frac{2}{K} \, \frac{a_1'}{a_2' + 2 a_2'' + 2 K a_2'''} ,

    where ``a1'`` and ``a2', a2'', a2'''`` are the coefficients of
    ``S1 = sum u``, ``S2 = sum u^2`` and ``S1^2`` in the two moments of the
    layer (:mathmd:`4`; ``docs/theory.md``, "lambda*"). This is a closed form, exact for
    any K (orthonormal equal-weight centroids, K heads, factor
    ``c = lambda K / L``). Special cases:

    .. math::

        \sigma = 0: \quad \lambda^\star &= \frac{L (L + K - 1)}{K^2 + 3K(L-1) + (L-1)(L-2)}
        = \frac{L + 1}{L + 3} \quad (K = 2), \\
        L \to \infty: \quad \lambda^\star &= \frac{2 (1 + 2K\sigma^2)}{2 + 5K\sigma^2 + 3K^2\sigma^4}
        = \frac{1 + 4\sigma^2}{1 + 5\sigma^2 + 6\sigma^4} \quad (K = 2).

    For finite L and sigma > 0, lambda* also depends on d (the paper writes
    ``lambda*(sigma, L)``): the token attending to itself brings
    ``E||X||^2 = 1 + d sigma^2`` into the risk.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``.
    n_features : int, default=None
        d >= K; required when L is finite and sigma > 0.
    n_clusters : int, default=2
        K.

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import lambda_star
    >>> round(float(lambda_star(0.0, 9)), 6)  # (L + 1) / (L + 3)
    0.833333
    >>> round(float(lambda_star(1.0)), 6)  # (1 + 4) / (1 + 5 + 6)
    0.416667
    """
    s = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    return _lambda_star(s, L, K, _needs_dimension(s, L, n_features, K))


def _lambda_star(s, L, K, d):
    """lambda*'s closed form (:func:`lambda_star`) for ``s = sigma^2``, unchecked.

    For one setting given as floats (:func:`auto_temperature`'s), the
    moments' coefficients one by one in float64 scalars (every one, as for
    arrays: an overflow on the way to any is an error of the closed forms).
    """
    if isinstance(s, float) and isinstance(L, float):
        w1, w2 = _length_weights(L)
        a1, a2 = zip(*(_weigh(w1, w2, T) for T in zip(*_manifold_terms(s, d, K)[2])))
    else:
        _, a1, a2 = (np.moveaxis(a, -1, 0) for a in _manifold_moments(s, d, K, L))
    return 2.0 * a1[1] / (K * (a2[1] + 2.0 * a2[2] + 2.0 * K * a2[3]))


@_in_float64_range
def auto_temperature(noise, sequence_length, *, n_clusters, n_features, eigenvalues=None):
    """The rule of ``AttentionClustering(temperature="auto")``, for unit-scale data of noise sigma.

    The unbiased temperature of Prop. 4.1 (generalised to K clusters in
    :func:`attention_cluster.theory.unbiased_temperature`), so that the
    layer's output is centred on each point's centroid, capped twice:

    - at ``0.95 lambda*(sigma, L, d)`` (Prop. 3.3,
      :func:`attention_cluster.theory.lambda_star`), so that the centroids
      stay the risk's minimisers with a margin for the error of sigma;
    - at ``0.9 / (K (m_1 + tr(M) / L))``, with ``m_1`` the largest
      eigenvalue of the unit-scale second moment M (``eigenvalues``, in
      descending order). For large L a head on a direction of second moment
      m lowers the risk by ``f(m) = a m^2 (2 - a m)``, ``a = lambda K``
      (:mathmd:`3`, "The regulariser's strength"; the cap, :mathmd:`4`),
      which grows with m only while ``a m < 4/3``;
      the token's attention to itself adds about ``tr(M) / L`` to m. With
      unequal weights the heaviest cluster has the largest m and, without
      the cap, the risk pushes its head off its centroid. With equal weights
      it is mostly the least too (lambda* can be the least for K = 4 with L <=
      23 and sigma <= 0.1, K = 5 with L <= 40 and sigma <= 0.17): 0.64 to 0.90 times the unbiased temperature on the
      paper's mixtures (d = 10, K = 2 to 5, L = 10 to 200, sigma 0 to 1). The factor 0.9 is the
      margin found with :func:`attention_cluster.theory.population_pgd`
      (weights up to 9:1, sigma up to 1).

    Parameters
    ----------
    noise : float
        sigma, the noise level relative to the centroids' norm.
    sequence_length : int
        L (or any real L >= 1, or ``np.inf``, as the closed forms take it).
    n_clusters : int
        K.
    n_features : int
        d. Any K and d: with K > d (no orthonormal centroids; the estimator
        fits more clusters than features) lambda*'s closed form is taken as
        it stands.
    eigenvalues : array-like of shape (n_features,), default=None
        Eigenvalues of the unit-scale second moment, in descending order;
        None leaves out the second cap.

    Returns
    -------
    temperature : float

    Examples
    --------
    >>> from attention_cluster.theory import auto_temperature, unbiased_temperature
    >>> lam = auto_temperature(0.3, 50, n_clusters=2, n_features=10)
    >>> bool(lam <= unbiased_temperature(0.3, 50, n_clusters=2))
    True
    """
    # One setting (the estimator's): an array is refused by name.
    sigma = check_noise(noise, scalar=True)
    L = _check_length(sequence_length, scalar=True)
    K = check_count(n_clusters, "n_clusters")
    d = check_count(n_features, "n_features")
    # sigma^2 as unbiased_temperature squares it (NumPy's product) and as
    # lambda* is given it (Python's **, C's pow): the two can differ in the
    # last bit.
    root = np.float64(sigma)
    unbiased = float(_unbiased_temperature(root * root, L, float(K)))
    caps = [0.95 * float(_lambda_star(sigma**2, L, K, d))]
    if eigenvalues is not None:
        numbers = as_numbers(eigenvalues)
        if numbers is None or numbers.shape != (n_features,) or not np.isfinite(numbers).all():
            shape = "not numbers" if numbers is None else f"shape {numbers.shape}"
            raise ValueError(
                f"eigenvalues must be {n_features} finite numbers (one per feature), got {shape}."
            )
        # A second moment's eigenvalues are >= 0; an eigensolver's rounding
        # leaves zeros a few epsilon of the largest below it (taken as 0).
        least, largest = numbers.min(), numbers.max()
        rounding = 4.0 * n_features * np.finfo(np.float64).eps * float(max(largest, -least))
        if least < -rounding:
            raise ValueError(
                f"eigenvalues must be >= 0: they are those of a second moment, got {least:.3g}."
            )
        eigenvalues = np.maximum(numbers, 0.0)
        if (eigenvalues[1:] > eigenvalues[:-1]).any():
            raise ValueError("eigenvalues must be in descending order: the first is the largest.")
    if eigenvalues is not None and eigenvalues[0] > 0:
        effective = eigenvalues[0] + float(eigenvalues.sum()) / L
        caps.append(0.9 / (K * effective))
    return min([unbiased, *[c for c in caps if np.isfinite(c) and c > 0]])


def manifold_heads(centroids, alignment, random_state=None):
    """Heads on the manifold M with the given alignments (section 3.1).

    ``mu_h = kappa_h mu*_h + sqrt(1 - kappa_h^2) v_h`` with ``v_h`` a random
    orthonormal family orthogonal to the centroids, so that
    ``<mu_h, mu*_j> = 0`` and ``<mu_h, mu_j> = 0`` for ``j != h`` (the
    paper's M: ``eta_0 = eta_1 = xi = 0``). A start of PGD on M (Thm. 3.4,
    Fig. 1).

    Parameters
    ----------
    centroids : array-like of shape (n_clusters, n_features)
        Orthonormal centroids, ``n_features >= 2 n_clusters``.
    alignment : float or array-like of shape (n_clusters,)
        ``kappa_h`` in [-1, 1] (beyond by 1e-10 at most, rounding: taken
        as +-1).
    random_state : int, RandomState instance or None, default=None
        Seed or generator for the directions ``v_h``.

    Returns
    -------
    heads : ndarray of shape (n_clusters, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import manifold_heads
    >>> C = np.eye(2, 5)
    >>> H = manifold_heads(C, [0.6, 0.8], random_state=0)
    >>> np.round(H @ C.T, 12).tolist(), round(float(H[0] @ H[1]), 12)
    ([[0.6, 0.0], [0.0, 0.8]], 0.0)
    """
    given = np.asarray(centroids)
    centroids = check_matrix(centroids, "centroids", labels=("n_clusters", "d"))
    K, d = centroids.shape
    # Orthonormal to the rounding of the centroids' dtype (float32 from a
    # float32 QR, say).
    rounding = 1e-10 if given.dtype != np.float32 else 1e-5
    if not np.allclose(centroids @ centroids.T, np.eye(K), atol=rounding):
        raise ValueError("centroids must be orthonormal rows.")
    if d < 2 * K:
        raise ValueError(f"The manifold needs n_features >= 2 n_clusters, got {d} < {2 * K}.")
    kappa = _cosines(alignment, "alignment", "kappa_h = <mu_h, mu*_h>, unit vectors")
    if kappa.ndim > 1 or kappa.size not in (1, K):
        raise InvalidParameterError(
            f"alignment must be one kappa or {K}, one per centroid, got shape {kappa.shape}."
        )
    kappa = np.broadcast_to(kappa, (K,))
    rng = check_seed(random_state)
    G = rng.standard_normal((d, K))
    drawn = G.copy()
    G -= centroids.T @ (centroids @ G)
    V = np.linalg.qr(G)[0].T
    V -= (V @ centroids.T) @ centroids
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    if not (
        np.allclose(V @ centroids.T, 0.0, atol=1e-10)
        and np.allclose(V @ V.T, np.eye(K), atol=1e-10)
    ):
        # The draw lay in the centroids' span (the seed that drew them, as
        # make_centroids does, draws the same matrix): its projection was
        # rounding, whose directions are neither orthonormal nor orthogonal
        # to the centroids. The directions after the centroids' in the QR
        # of [centroids^T, draw] are, whatever the draw.
        V = np.linalg.qr(np.hstack([centroids.T, drawn]))[0][:, K : 2 * K].T
    return kappa[:, None] * centroids + np.sqrt(1.0 - kappa**2)[:, None] * V


@_in_float64_range
def quantizer_risk(noise, *, n_features):
    """Risk of the optimal quantizer ``T*(X)_l = mu*_{Z_l}`` (section 4).

    ``E||X_1 - mu*_{Z_1}||^2 = d sigma^2``, the benchmark of Prop. 4.2 and
    Prop. 5.2 (:mathmd:`4`).

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    n_features : int
        d.

    Returns
    -------
    risk : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import quantizer_risk
    >>> round(float(quantizer_risk(0.3, n_features=10)), 6)
    0.9
    """
    return check_count(n_features, "n_features") * check_noise(noise) ** 2


def _oracle(noise, temperature, sequence_length, n_features, n_clusters):
    s = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    d = check_count(n_features, "n_features", K)
    at_one = np.array([1.0, K, K, K**2])  # (1, S1, S2, S1^2) at kappa = 1
    a0, a1, a2 = (a @ at_one for a in _manifold_moments(s, d, K, L))
    return a0, a1, a2, s, L, K, _temperatures(temperature) * K


@_in_float64_range
def oracle_risk(noise, temperature, sequence_length, *, n_features, n_clusters=2):
    r"""Risk of the oracle linear layer, heads at the centroids (Prop. 4.2).

    ``R = a0 - 2 lambda K a1 + (lambda K)^2 a2``: the manifold risk
    (:func:`manifold_risk`) at ``kappa = 1``, for any temperature and finite
    or infinite L (``docs/theory.md``, "Oracle layer"). As L -> infinity
    (:mathmd:`4`),
    with :math:`s = \sigma^2`

    .. math::

        R_\infty(\lambda) = 1 + d s - 2 \lambda (1 + K s)^2 + \lambda^2 (1 + K s)^3 ,

    minimal at ``lambda = 1 / (1 + K s)`` (Prop. 4.2's
    ``(1 + 4s + 4s^2) / (1 + 6s + 12s^2 + 8s^3)`` for K = 2) where it equals
    ``(d - K) sigma^2 < d sigma^2``, the optimal quantizer's risk.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    temperature : float or array-like
        lambda >= 0.
    sequence_length : float
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``.
    n_features : int
        d >= K.
    n_clusters : int, default=2
        K.

    Returns
    -------
    risk : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import oracle_risk
    >>> lam = 1 / (1 + 2 * 0.09)
    >>> round(float(oracle_risk(0.3, lam, float("inf"), n_features=10)), 6)  # (d - 2) s
    0.72
    """
    a0, a1, a2, _, _, _, tau = _oracle(noise, temperature, sequence_length, n_features, n_clusters)
    return _mean_square(a0, a1, a2, tau)


@_in_float64_range
def oracle_conditional_variance(noise, temperature, sequence_length, *, n_features, n_clusters=2):
    """Conditional variance of the oracle layer's output (Prop. 4.2).

    ``E[||T(X)_1 - E[T(X)_1 | Z_1 = c]||^2 | Z_1 = c]``, the same for every
    c, equal to ``(lambda K)^2 a2 - b^2`` with ``b mu*_c = E[T(X)_1 | Z_1 = c]``
    (Prop. 4.1, :func:`unbiased_temperature`). As L -> infinity it tends to
    ``lambda^2 (1 + K sigma^2)^2 K sigma^2`` (:mathmd:`4`), i.e. ``K sigma^2`` (2 sigma^2
    in the paper) at ``lambda = 1 / (1 + K sigma^2)``, independent of d.

    Parameters
    ----------
    noise, temperature, sequence_length, n_features, n_clusters
        As in :func:`oracle_risk`.

    Returns
    -------
    variance : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import oracle_conditional_variance
    >>> round(float(oracle_conditional_variance(0.3, 1 / 1.18, float("inf"), n_features=10)), 6)
    0.18
    """
    _, _, a2, s, L, K, tau = _oracle(noise, temperature, sequence_length, n_features, n_clusters)
    w1, _ = _length_weights(L)
    bias = tau * (w1[0] * (1.0 + (K + 2.0) * s) + w1[1] * (1.0 / K + s))
    return _nonnegative(tau**2 * a2, -(bias**2))


@_in_float64_range
def oracle_optimal_temperature(noise, sequence_length, *, n_features, n_clusters=2):
    """Temperature minimising :func:`oracle_risk` (Prop. 4.2).

    The risk is quadratic in ``tau = lambda K``, minimal at
    ``tau = a1 / a2``; as L -> infinity, ``lambda = 1 / (1 + K sigma^2)``,
    the unbiased temperature of Prop. 4.1 (:mathmd:`4`).

    Parameters
    ----------
    noise, sequence_length, n_features, n_clusters
        As in :func:`oracle_risk`.

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import oracle_optimal_temperature
    >>> round(float(oracle_optimal_temperature(1.0, float("inf"), n_features=10)), 6)
    0.333333
    """
    _, a1, a2, _, _, K, _ = _oracle(noise, 0.0, sequence_length, n_features, n_clusters)
    return a1 / (K * a2)


# ---------------------------------------------------------------------------
# The in-context layer T^ctx(X)_l = (lambda K / L) (X^T X) X_l (section 5).
# ---------------------------------------------------------------------------


def _in_context(noise, temperature, sequence_length, n_features, n_clusters):
    """Moments ``a0, a1, a2`` of the in-context layer (``P = I_d``).

    The terms of :class:`_LayerMoments` with ``P = I``, K orthonormal
    equal-weight centroids, ``M = E/K + s I`` (E the projection on the
    centroids), ``k = 1 + d s`` (``docs/theory.md``, "In-context layer").
    """
    s = check_noise(noise) ** 2
    L = _check_length(sequence_length)
    K = check_count(n_clusters, "n_clusters")
    d = check_count(n_features, "n_features", K)
    k = 1.0 + d * s
    trM = 1.0 + d * s
    T1 = k**2 + 2 * s**2 * d + 4 * s
    T2 = K * (1 / K + s) ** 2 + (d - K) * s**2
    T3 = k**3 + 3 * k * (2 * s**2 * d + 4 * s) + 8 * s**3 * d + 24 * s**2
    T4 = k * (s * trM + 1 / K + s) + 2 * s**2 * trM + 4 * s * (1 / K + s)
    T5 = (s * k + 2 * s**2) * trM + (k + 4 * s) / K * (1 + K * s)
    T6 = K * (1 / K + s) ** 3 + (d - K) * s**3
    w1, w2 = _length_weights(L)
    a1 = w1[0] * T1 + w1[1] * T2
    a2 = w2[0] * T3 + w2[1] * T4 + w2[2] * T5 + w2[3] * T6
    return k, a1, a2, s, L, K, d, _temperatures(temperature) * K


@_in_float64_range
def in_context_risk(noise, temperature, sequence_length, *, n_features, n_clusters=2):
    r"""Risk of the parameter-free in-context layer (Prop. 5.2).

    ``T^ctx(X)_l = (lambda K / L) (X^T X) X_l`` (:mathmd:`2`, the
    sum of d orthonormal heads, K = 2 in the paper) on prompts whose
    orthonormal centroids are drawn afresh for each prompt. The layer is
    rotation invariant, so the risk is that of any fixed centroids:
    ``a0 - 2 lambda K a1 + (lambda K)^2 a2`` for finite or infinite L and any
    temperature (``docs/theory.md``, "In-context layer"). As L -> infinity
    (:mathmd:`4`), with :math:`s = \sigma^2`

    .. math::

        R_\infty = 1 + d s - 2 \lambda K \big[K (1/K + s)^2 + (d - K) s^2\big]
        + (\lambda K)^2 \big[K (1/K + s)^3 + (d - K) s^3\big] ,

    below ``d sigma^2`` for a range of temperatures around
    :func:`in_context_optimal_temperature`.

    Parameters
    ----------
    noise, temperature, sequence_length, n_features, n_clusters
        As in :func:`oracle_risk`.

    Returns
    -------
    risk : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import in_context_risk, quantizer_risk
    >>> risk = in_context_risk(1.0, 0.35, float("inf"), n_features=10)
    >>> bool(risk < quantizer_risk(1.0, n_features=10))
    True
    """
    a0, a1, a2, *_, tau = _in_context(noise, temperature, sequence_length, n_features, n_clusters)
    return _mean_square(a0, a1, a2, tau)


@_in_float64_range
def in_context_conditional_variance(
    noise, temperature, sequence_length, *, n_features, n_clusters=2
):
    """Conditional variance of the in-context layer's output (Prop. 5.2).

    ``E[||T^ctx(X)_1 - E[T^ctx(X)_1 | mu*, Z_1]||^2 | mu*, Z_1 = c]``, given
    the prompt's centroids and the first token's cluster (the same for all
    draws, by rotation invariance); ``E[T^ctx(X)_1 | mu*, Z_1 = c] =
    b mu*_c`` with b of Prop. 5.1. As L -> infinity it tends to
    ``(lambda K)^2 sigma^2 [K (1/K + s)^2 + (d - K) s^2]`` (:mathmd:`4`), i.e. for K = 2 and
    ``lambda = 1 / (1 + 2 sigma^2)``: ``2 sigma^2 + 4 (d - 2) sigma^6 /
    (1 + 2 sigma^2)^2 < d sigma^2``.

    Parameters
    ----------
    noise, temperature, sequence_length, n_features, n_clusters
        As in :func:`in_context_risk`.

    Returns
    -------
    variance : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import in_context_conditional_variance
    >>> # Dirac mixture: only the cluster counts vary, (4 / L^2) * (L - 1) / 4
    >>> round(float(in_context_conditional_variance(0.0, 1.0, 50, n_features=10)), 12)
    0.0196
    """
    _, _, a2, s, L, K, d, tau = _in_context(
        noise, temperature, sequence_length, n_features, n_clusters
    )
    w1, _ = _length_weights(L)
    bias = tau * (w1[0] * (1.0 + (d + 2.0) * s) + w1[1] * (1.0 / K + s))
    return _nonnegative(tau**2 * a2, -(bias**2))


@_in_float64_range
def in_context_optimal_temperature(noise, sequence_length=np.inf, *, n_features, n_clusters=2):
    r"""Temperature minimising :func:`in_context_risk` (Prop. 5.2).

    ``lambda K = a1 / a2``; as L -> infinity (:mathmd:`4`), for K = 2

    .. math::

        \lambda = \frac{2 (\sigma^2 + 1/2)^2 + (d - 2) \sigma^4}
        {2 \big[2 (\sigma^2 + 1/2)^3 + (d - 2) \sigma^6\big]} ,

    the temperature of Prop. 5.2.

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    sequence_length : float, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``.
    n_features : int
        d >= K.
    n_clusters : int, default=2
        K.

    Returns
    -------
    temperature : float or ndarray

    Examples
    --------
    >>> from attention_cluster.theory import in_context_optimal_temperature
    >>> round(float(in_context_optimal_temperature(0.0, n_features=10)), 6)
    1.0
    """
    _, a1, a2, _, _, K, _, _ = _in_context(noise, 0.0, sequence_length, n_features, n_clusters)
    return a1 / (K * a2)


# ---------------------------------------------------------------------------
# Population projected gradient descent (Thm. 3.4, Fig. 5).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PGDResult:
    """Outcome of :func:`population_pgd`."""

    heads: np.ndarray  #: final heads, shape (n_heads, n_features), unit rows
    distance: np.ndarray  #: centroid_distance to the centroids, per iterate
    objective: np.ndarray  #: R + reg_strength * r, per iterate
    n_iter: int  #: number of steps taken
    converged: bool  #: whether the Riemannian gradient fell below tol


@_in_float64_range
def population_pgd(
    heads0,
    centroids,
    noise,
    temperature,
    sequence_length=np.inf,
    *,
    reg_strength=0.0,
    step_size=None,
    max_iter=10000,
    tol=1e-10,
    weights=None,
):
    r"""Projected (Riemannian) gradient descent on the exact population risk.

    The paper's (PGD) iterates (section 2; :mathmd:`3`) on the
    closed-form objective ``R(U) + rho r(U)`` (:func:`population_risk`,
    :func:`pairwise_regularizer`), with no sampling:

    .. math::

        g_h = (I - \mu_h \mu_h^\top) \nabla_{\mu_h}, \qquad
        \mu_h \leftarrow \frac{\mu_h - \gamma g_h}{\|\mu_h - \gamma g_h\|} .

    Started on the manifold M with ``lambda <= lambda*`` (Thm. 3.4) the
    heads converge to the centroids up to sign; with ``sigma = 0`` this is
    the Dirac case of Fig. 5. The gradient maps the span of the centroids and
    the heads into itself, so the iterates never leave the span of
    ``centroids`` and ``heads0``; the descent runs in orthonormal coordinates
    of that span (dimension at most ``n_heads + n_clusters``), at a cost
    independent of d.

    Parameters
    ----------
    heads0 : array-like of shape (n_heads, n_features)
        Starting heads; each row is normalised onto the sphere. At least
        ``n_clusters`` of them: ``distance`` matches a head to each centroid.
    centroids : array-like of shape (n_clusters, n_features)
        Centroids of the mixture.
    noise : float
        sigma >= 0.
    temperature : float
        lambda >= 0.
    sequence_length : float, default=inf
        Any real L >= 1 (a non-integer L: the continuous extension), or
        ``np.inf``.
    reg_strength : float, default=0.0
        rho >= 0, weight of the pairwise regularizer.
    step_size : float, default=None
        gamma > 0. None takes ``gamma = 0.5 / (||H||_2 + 2 rho ||N||_2)`` at
        the start, where ``grad_U R = H U`` and ``N = E[(X^T U U^T X) X X^T]``
        bounds the regularizer's ``grad_{mu_j} r = 2 sum_{k != j}
        E[<mu_k, X>^2 X X^T] mu_j``: a scale-free step (the iteration
        diverged for ``gamma ||H||_2`` above about 1). ``||H||_2`` can grow
        along the way (temperatures above ``lambda*``): a step that would
        raise the objective is halved, for that step and the ones after,
        until it does not, so the objective never rises.
    max_iter : int, default=10000
        Maximum number of steps.
    tol : float, default=1e-10
        Stop when the Frobenius norm of the Riemannian gradient is below tol.
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights, uniform when None.

    Returns
    -------
    result : PGDResult
        Final heads, and ``distance`` / ``objective`` of every iterate
        (``n_iter + 1`` values, the first for ``heads0``).

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import lambda_star, manifold_heads, population_pgd
    >>> C = np.eye(2, 6)
    >>> H0 = manifold_heads(C, [0.3, -0.5], random_state=0)
    >>> lam = 0.9 * float(lambda_star(0.3, 10, n_features=6))
    >>> res = population_pgd(H0, C, 0.3, lam, 10, max_iter=5000)
    >>> res.converged, bool(res.distance[-1] < 1e-8)
    (True, True)
    """
    heads0, centroids, weights, s, tau, L = _problem(
        heads0, centroids, noise, temperature, sequence_length, weights
    )
    if not np.all(np.any(heads0 != 0, axis=1)):
        raise ValueError("heads0 must have no zero row: each head is normalised onto the sphere.")
    heads0 = normalize_heads(heads0.T).T
    reg_strength = check_positive(reg_strength, "reg_strength", strict=False)
    if step_size is not None:
        step_size = check_positive(step_size, "step_size")
    tol = check_positive(tol, "tol", strict=False)
    max_iter = check_count(max_iter, "max_iter", 0)
    basis, (H, means) = _reduce(heads0, centroids)
    U = H.T
    moments = _LayerMoments(means, weights, s, heads0.shape[1], L)

    def objective(U):
        risk, H = _risk_and_gradient(moments, U, tau)
        grad = H @ U
        if reg_strength:
            reg, reg_grad = _pairwise_terms(U, means, weights, s)
            risk, grad = risk + reg_strength * reg, grad + reg_strength * reg_grad
        return risk, grad

    if step_size is None:
        # gamma = 0.5 / (||H||_2 + 2 rho ||N||_2), H = 2 grad_P R on the span
        # where the descent runs (math.md section 3, "Steps").
        scale = np.linalg.norm(_risk_and_gradient(moments, U, tau)[1], 2)
        if reg_strength:
            P = U @ U.T
            Pm = means @ P
            k_p = s * np.trace(P) + np.sum(means * Pm, axis=1)
            N = _average(weights, _n1(k_p, P, Pm, means, s, moments.eye))
            scale += 2.0 * reg_strength * np.linalg.norm(N, 2)
        step_size = 0.5 / scale if scale > 0 else 1.0  # scale 0: lambda = rho = 0
    value, grad = objective(U)
    values = [value]
    distances = [centroid_distance(U.T, means)]
    converged = False
    n_iter = 0
    while True:
        riem = project_tangent(U, grad)
        if np.linalg.norm(riem) <= tol:
            converged = True
            break
        if n_iter == max_iter:
            break
        # A step that raises the objective (a step too long for the
        # curvature met on the way, where the iterates would settle into a
        # cycle) is halved until it does not; every step taken descends.
        while True:
            V = retract(U, -step_size * riem)
            new_value, new_grad = objective(V)
            if new_value <= value + _ROUNDING * (abs(value) + moments.a0):
                break
            step_size *= 0.5
        U, value, grad = V, new_value, new_grad
        values.append(value)
        n_iter += 1
        distances.append(centroid_distance(U.T, means))
    return PGDResult(
        heads=U.T @ basis,
        distance=np.array(distances),
        objective=np.array(values),
        n_iter=n_iter,
        converged=converged,
    )


# Rise of the population objective, relative to its terms' magnitude (E||X||^2
# and the objective), that population_pgd takes for rounding, not for a step
# too long: near a minimum a step changes the objective by less than that.
_ROUNDING = 1e-12


# ---------------------------------------------------------------------------
# Projected stochastic gradient descent on sampled sequences (section 3.2,
# Appendix F.1).
# ---------------------------------------------------------------------------

# Rows drawn at once by psgd_path (8 MiB at d = 16): bounds its memory
# whatever the gap between two recorded iterations.
_DRAWN_ROWS = 1 << 16


def sequence_loss_gradient(tokens, heads, temperature, *, n_clusters=None):
    r"""Loss of the linear layer on one sequence and its Euclidean gradient in the heads.

    For a sequence ``X`` of L tokens (L x d) and the heads as the columns of
    U, the loss is ``(1/L) ||T(X) - X||_F^2`` with the linear layer
    ``T(X) = c X U U^T X^T X``, ``c = lambda K / L``; with ``A = X U``,
    ``G = X^T A`` and ``E = c A G^T - X``, its gradient is (:mathmd:`math.md
    section 3 <3>`)

    .. math::

        \nabla_U = \frac{2c}{L} X^\top \big(E G + X (E^\top A)\big) ,

    the per-sequence gradient that PSGD averages (:func:`psgd_path`),
    computed by the same kernel in O(L d K), without the L x L attention
    matrix. The heads need not be unit vectors.

    Parameters
    ----------
    tokens : array-like of shape (sequence_length, n_features)
        One sequence X.
    heads : array-like of shape (n_heads, n_features)
        One head ``mu_h`` per row.
    temperature : float
        lambda > 0.
    n_clusters : int, default=None
        The K of ``c = lambda K / L``; the number of heads when None.

    Returns
    -------
    loss : float
    gradient : ndarray of shape (n_heads, n_features)
        The Euclidean gradient, one row per head.

    Raises
    ------
    FloatingPointError
        If the loss or the gradient overflows, as the layer does.

    See Also
    --------
    attention_cluster.layers.linear_attention : the layer T itself.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.theory import sequence_loss_gradient
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> loss, grad = sequence_loss_gradient(X, [[1.0, 0.0]], 1.0)
    >>> loss  # c = 1/2, T(X) = X U U^T / 2: squared errors 1/4 and 1, over L = 2
    0.625
    """
    X = np.ascontiguousarray(check_matrix(tokens, "tokens", labels=("L", "d")))
    L, d = X.shape
    heads = check_matrix(heads, "heads", shape=(None, d), labels=("n_heads", "d"))
    n_heads = heads.shape[0]
    K = n_heads if n_clusters is None else check_count(n_clusters, "n_clusters")
    c = check_temperature(temperature) * K / L
    U = np.ascontiguousarray(heads.T)
    grad = np.zeros_like(U)
    A, G, E, W = (np.empty(shape) for shape in ((L, n_heads), (d, n_heads), (L, d), (L, n_heads)))
    loss = _kernels.sequence_loss_grad(X, U, c, grad, A, G, E, W)
    # The layer's own refusal (_validation.finite_output), for the loss and its gradient.
    finite_output(np.append(grad.ravel(), loss))
    return float(loss), grad.T


def psgd_path(
    X,
    heads0,
    *,
    temperature,
    step_size,
    record,
    sequence_length=50,
    batch_size=1,
    regularization=None,
    reg_strength=0.0,
    gradient="riemannian",
    n_clusters=None,
    random_state=None,
):
    r"""The paper's PSGD with a constant step, and the heads it passes through.

    The (PSGD) iterates of the paper (section 3.2 and Appendix F.1, the
    sampled counterpart of section 2's PGD; :mathmd:`3`) on
    sequences of ``sequence_length`` tokens drawn uniformly with replacement
    from the rows of X: step t averages the gradient of the sequence loss
    (:func:`sequence_loss_gradient`) and of ``reg_strength`` times the
    regulariser ``r`` on the same tokens over ``batch_size`` sequences, then
    moves each head on its sphere:

    .. math::

        g_h = (I - \mu_h \mu_h^\top) \nabla_{\mu_h}, \qquad
        \mu_h \leftarrow \frac{\mu_h - \gamma g_h}{\|\mu_h - \gamma g_h\|} .

    These are the plain iterates: a constant step gamma, no iterate
    averaging, no stopping rule and no rescaling of X, all of which
    :class:`~attention_cluster.AttentionClustering` adds (its PSGD runs the
    same kernel). Use it to study the dynamics (Figures 1-2 of the paper);
    use the estimator to cluster.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        The points the tokens are drawn from, used as they are (float32 or
        float64; the steps compute in float64).
    heads0 : array-like of shape (n_heads, n_features)
        Starting heads, one per row; each is normalised onto the sphere.
    temperature : float
        lambda > 0.
    step_size : float
        gamma > 0, the same at every step.
    record : array-like of int
        Non-decreasing iterations (numbers of steps taken, 0 for the start)
        at which the heads are returned; the run stops at the last one.
    sequence_length : int, default=50
        L, the tokens of one sequence.
    batch_size : int, default=1
        Sequences averaged in each step.
    regularization : {"pairwise", "product"} or None, default=None
        The regulariser r (:mathmd:`3`); None for the risk alone.
    reg_strength : float, default=0.0
        rho >= 0, the weight of r.
    gradient : {"riemannian", "euclidean"}, default="riemannian"
        ``"riemannian"`` projects each head's gradient on the sphere's
        tangent space before the step, as above; ``"euclidean"`` steps along
        the plain gradient, then normalises (paper, Appendix G.3).
    n_clusters : int, default=None
        The K of the layer's factor ``lambda K / L``; the number of heads
        when None (more heads than clusters keep the clusters' factor).
    random_state : int, RandomState instance or None, default=None
        Seeds the draw of the sequences. The same seed, X and steps give the
        same iterates.

    Returns
    -------
    heads : ndarray of shape (len(record), n_heads, n_features)
        The heads after ``record[i]`` steps, unit rows.

    Raises
    ------
    FloatingPointError
        If a step overflows (its gradient or loss beyond float64's range),
        rather than keep the heads of the step before.

    See Also
    --------
    population_pgd : the same step on the exact population risk, no sampling.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.datasets import make_mixture
    >>> from attention_cluster.metrics import centroid_distance
    >>> from attention_cluster.theory import psgd_path, unbiased_temperature
    >>> X, _, C = make_mixture(2000, 6, 2, noise=0.1, random_state=0)
    >>> lam = float(unbiased_temperature(0.1, 50))
    >>> rng = np.random.RandomState(0)
    >>> path = psgd_path(X, rng.standard_normal((2, 6)), temperature=lam,
    ...                  step_size=0.05, record=[0, 2000], regularization="pairwise",
    ...                  reg_strength=0.1, random_state=0)
    >>> path.shape
    (2, 2, 6)
    >>> bool(centroid_distance(path[-1], C) < 0.1 * centroid_distance(path[0], C))
    True
    """
    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32], order="C")
    n_features = X.shape[1]
    U = np.ascontiguousarray(
        normalize_heads(
            check_matrix(heads0, "heads0", shape=(None, n_features), labels=("n_heads", "d")).T
        )
    )
    n_heads = U.shape[1]
    temperature = check_temperature(temperature)
    step_size = check_positive(step_size, "step_size")
    # A ragged list or a text is no sequence of steps (NumPy would raise its own error).
    given, record = record, np.asarray(record if as_numbers(record) is not None else [])
    if (
        record.ndim != 1
        or record.size == 0
        or record.dtype.kind not in "iuf"
        or not np.all(np.isfinite(record))
        or np.any(record >= 2.0**63)
        or np.any(record != np.floor(record))
        or np.any(record < 0)
        or np.any(np.diff(record) < 0)
    ):
        raise InvalidParameterError(
            f"record must be a non-empty sequence of non-decreasing integers >= 0, got {given!r}."
        )
    L = check_count(sequence_length, "sequence_length")
    batch_size = check_count(batch_size, "batch_size")
    reg_kind = regularizer_code(regularization)
    # A float for the kernel (an integer beyond int64 was Numba's OverflowError).
    reg_strength = float(check_positive(reg_strength, "reg_strength", strict=False))
    riemannian = check_options(gradient, "gradient", ["riemannian", "euclidean"]) == "riemannian"
    # The kernel's factor is lambda n_heads / L: rescale lambda to keep lambda K / L.
    K = n_heads if n_clusters is None else check_count(n_clusters, "n_clusters")
    kernel_temperature = temperature * K / n_heads
    rng = check_seed(random_state)
    state = np.array([rng.randint(1, np.iinfo(np.int64).max)], dtype=np.uint64)

    rows_per_step = batch_size * L
    if 8.0 * rows_per_step * n_features > DENSE_LIMIT_BYTES:
        # The tokens of a step at least are drawn at once (batch_size=10**6
        # drew for minutes).
        raise InvalidParameterError(
            f"One step draws batch_size={batch_size} sequences of sequence_length={L} tokens, "
            f"{8.0 * rows_per_step * n_features / 2**30:.3g} GiB of {n_features} features, more "
            f"than {DENSE_LIMIT_BYTES / 2**30:.0f} GiB: lower batch_size or sequence_length."
        )
    # Steps drawn at once: _DRAWN_ROWS rows, within DENSE_LIMIT_BYTES.
    steps_per_draw = max(
        1,
        min(_DRAWN_ROWS // rows_per_step, DENSE_LIMIT_BYTES // (8 * rows_per_step * n_features)),
    )
    rows = np.empty((steps_per_draw * rows_per_step, n_features))
    steps = np.full(steps_per_draw, float(step_size))
    losses = np.empty(steps_per_draw)
    heads_sum = np.zeros_like(U)  # the kernel's running sum, unused: no averaging
    path = np.empty((record.size, n_heads, n_features))
    done = 0
    with rows_of(X, n_threads=1) as data:
        for i, stop in enumerate(record.astype(np.int64)):
            while done < stop:
                m = min(stop - done, steps_per_draw)
                tokens = data.draw(state, rows[: m * rows_per_step])
                _kernels.psgd_chunk(
                    tokens,
                    U,
                    kernel_temperature,
                    L,
                    batch_size,
                    steps[:m],
                    reg_kind,
                    reg_strength,
                    riemannian,
                    losses[:m],
                    heads_sum,
                )
                _kernels.check_psgd_losses(
                    losses[:m], done, "lower the temperature or the step size, or rescale X"
                )
                done += m
            path[i] = U.T
    return path
