"""The exact risk: the expected loss over sequences drawn with replacement.

For a data set ``x_1..x_n`` held in memory, the expected loss of the linear
attention layer over sequences of ``L`` tokens drawn with replacement (the
quantity the paper's PSGD estimates) has a closed form (``math.md`` section 3).
With ``c = lambda K / L``, ``a_i = U^T x_i``, ``s_i = ||a_i||^2``,
``n_i = ||x_i||^2``, ``M = mean x x^T``, ``M4 = mean ||x||^2 x x^T``,
``Q = (L-1) M4 + (L-1)(L-2) M^2`` and ``h_i = x_i^T M U a_i``::

    R(U) = mean_i (1 - c s_i)^2 n_i - 2c(L-1) mean_i (1 - c s_i) h_i
           + c^2 tr(U^T Q U U^T M U)

All means are weighted by the sample weights. The objective reads the data
only through the pass layer (``_passes``), whose data object divides the
rows by their scale (``_scale.estimate_spectrum``, whose ``moment`` is the M
needed here).
"""

import math

import numpy as np

from . import _kernels
from ._validation import InvalidParameterError

__all__ = ["exact_objective", "objective_exponent", "regularizer_code", "unscaled"]

# The regulariser as the kernels name it; None is no regulariser.
_REGULARIZERS = {
    None: _kernels.REG_NONE,
    "pairwise": _kernels.REG_PAIRWISE,
    "product": _kernels.REG_PRODUCT,
}


def regularizer_code(regularization):
    """The kernels' integer code of ``regularization`` ("pairwise", "product" or None)."""
    if (
        not (regularization is None or isinstance(regularization, str))
        or regularization not in _REGULARIZERS
    ):
        raise InvalidParameterError(
            f"regularization must be one of 'pairwise', 'product', None; got {regularization!r}."
        )
    return _REGULARIZERS[regularization]


def objective_exponent(temperature, n_heads, sequence_length, reg_strength):
    """The exponent e of the scale ``gamma = 2^e`` of the exact objective.

    ``R + rho r`` is a quadratic in ``(1, c, rho)`` (``c = lambda K / L``),
    of size ``c^2`` for a large temperature and ``rho`` for a large
    strength: the optimiser's squares of its gradient leave float64 beyond
    ``c`` of about 1e77 or ``rho`` of about 1e154, the objective itself
    beyond ``c`` of about 1e154. The solver minimises
    ``(R + rho r) / gamma^2`` instead, whose coefficients ``1 / gamma``,
    ``c / gamma`` and ``rho / gamma^2`` are at most 1 (``math.md`` section
    3, "Large temperatures and strengths"): the same minimiser, at any
    temperature and strength float64 holds. e = 0 (no scaling) while ``c <=
    1`` and ``rho <= 1``, the range of every default; above, a power of two
    above ``c`` and ``sqrt(rho)``, within a factor 4 of the larger. Divisions by a
    power of two are exact: the scaled terms are the unscaled ones divided
    by ``gamma^2`` to the last bit, wherever those are finite (and these
    above float64's subnormal numbers).
    """
    temperature, reg_strength = float(temperature), float(reg_strength)
    ratio = n_heads / float(sequence_length)
    if temperature <= 1.0 / ratio and reg_strength <= 1.0:
        return 0
    # c < 2^(e_lambda + e_ratio) and rho < 2^e_rho (frexp's mantissas are below 1).
    c_exponent = math.frexp(temperature)[1] + math.frexp(ratio)[1]
    rho_exponent = -(-math.frexp(reg_strength)[1] // 2)
    return max(0, c_exponent, rho_exponent)


def unscaled(values, exponent):
    """Objective values divided by ``4^exponent`` (:func:`objective_exponent`)
    in the objective's own units: exact (a power of two), infinity where
    the objective exceeds float64's range (a temperature above about 1e154)."""
    with np.errstate(over="ignore"):
        return np.ldexp(np.asarray(values, dtype=np.float64), 2 * exponent)


def exact_objective(
    data,
    moment,
    U,
    temperature,
    sequence_length,
    regularization="pairwise",
    reg_strength=0.0,
    exponent=0,
):
    """Exact regularised risk ``R(U) + rho r(U)`` and its Euclidean gradient,
    divided by ``4^exponent`` (:func:`objective_exponent`).

    ``R`` is the expected loss ``(1/L) ||X - T(X)||_F^2`` over sequences of
    ``L`` tokens drawn with replacement from the (weighted) rows of the
    data, in closed form (``math.md`` section 3; module docstring); ``r`` is
    the pairwise regulariser ``sum_{j<k} mean_i a_ij^2 a_ik^2`` (paper,
    section 3.3), the product ``mean_i prod_k a_ik^2`` (``math.md`` section 3; rebuttal, K = 3) or
    zero.

    The gradient (``math.md`` section 3; derived by hand, checked by
    finite differences in the tests) is, with ``e_i = 1 - c s_i``, ``g_i = U^T M x_i``,
    ``W = U^T M U`` and ``V = U^T Q U``::

        mean_i x_i (alpha_i a_i + beta_i g_i)^T + M mean_i x_i (beta_i a_i)^T
        + 2 c^2 (Q U W + M U V) + rho grad r,
        alpha_i = -4c e_i n_i + 4c^2 (L-1) h_i,   beta_i = -2c(L-1) e_i.

    ``M4`` only enters through ``M4 U = mean_i n_i x_i a_i^T``, accumulated
    in the same pass, so it is never formed (that would cost O(n d^2)). One
    pass over the data (:meth:`attention_cluster._passes.DenseRows.exact_terms`),
    O(n d K), in float64.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
        The rows ``x_i`` (divided by the data object's scale) and weights.
    moment : ndarray of shape (n_features, n_features)
        ``M``, the weighted second moment of the data (``data.second_moment()``).
    U : ndarray of shape (n_features, n_heads)
        Heads as columns (any norm: the formula holds off the sphere too).
    temperature : float
        lambda > 0.
    sequence_length : int
        L >= 1.
    regularization : {"pairwise", "product"} or None, default="pairwise"
    reg_strength : float, default=0.0
        rho >= 0.
    exponent : int, default=0
        e >= 0: the objective and its gradient are divided by ``gamma^2``,
        ``gamma = 2^e``, computed with ``e_i = 1 / gamma - (c / gamma) s_i``
        and ``rho / gamma^2``, so that no term leaves float64 where the
        objective does (``math.md`` section 3).

    Returns
    -------
    value : float
    grad : ndarray of shape (n_features, n_heads)
    """
    reg = regularizer_code(regularization)
    M = moment
    U = np.asarray(U, dtype=np.float64)
    K = U.shape[1]
    L = float(sequence_length)
    # c / gamma and rho / gamma^2: lambda / gamma first, so that lambda K
    # does not overflow on the way (lambda K / gamma <= L).
    c = math.ldexp(float(temperature), -exponent) * K / L
    rho = math.ldexp(float(reg_strength), -2 * exponent)
    lm1 = L - 1.0
    MU = M @ U
    value, P = data.exact_terms(U, MU, c, lm1, reg, rho, math.ldexp(1.0, -exponent))
    total = data.total_weight
    if total > 0:
        value /= total
        P /= total
    # A risk beyond float64 is inf or NaN, as the passes' row terms are
    # (_numpy_kernels): it grows as the square of the weights' ratio, rows
    # of weight 1e-160 beside 1 lying 1e80 scales out (3e-4 / w^2 on two
    # rows), and the optimiser stops at it (``gradient_overflow``).
    with np.errstate(over="ignore", invalid="ignore"):
        QU = lm1 * P[2 * K :].T + lm1 * (L - 2.0) * (M @ MU)
        UMU = U.T @ MU
        UQU = U.T @ QU
        value += c * c * float(np.sum(UQU * UMU))
        grad = P[:K].T + M @ P[K : 2 * K].T + 2.0 * c * c * (QU @ UMU + MU @ UQU)
    return value, grad
