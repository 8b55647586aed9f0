"""The chunk kernels of a default fit in NumPy, for data too small to repay Numba's compile.

Numba compiles a kernel at its first call: with an empty cache the kernels
of a default fit take seconds to compile, a wait longer than the whole fit
of a few tens of thousands of rows in NumPy (see the performance page's
"Cold start"). The pass layer (``_passes``, :func:`~attention_cluster._passes.compiles`)
runs these forms on such data, and :mod:`._kernels`' Numba kernels on larger
data, where their fused loops beat NumPy's calls. Each function here
computes what its ``_kernels`` namesake computes, to rounding (tested
against it and against the NumPy references of ``tests/reference.py``):
the formulas' places in ``math.md`` are those of the namesakes.
"""

import functools

import numpy as np
import scipy.sparse as sp

from ._kernels import REG_PAIRWISE, REG_PRODUCT, angle_and_drop

# Rows per block of these forms: a block's temporaries (a few K x BLOCK
# float64 arrays) stay in cache, where a whole chunk's would not and costs
# several times as much per row.
BLOCK = 4096

# Heads up to which the argmax of a row runs by columns (see argmax_rows):
# at 20000 rows the columns take a third of np.argmax's time at 2 or 3
# heads, half at 10, as much at about 30.
_COLUMN_HEADS = 16

__all__ = [
    "abs_argmax_rows",
    "argmax_rows",
    "centred_column_sums",
    "exact_row_terms",
    "posterior_columns",
    "projected_row_terms",
    "rotate_pair",
    "rotate_pairs",
    "scaled_blocks",
    "transpose_product",
]


def posterior_columns(P, log_weights, weights, counts):
    """:func:`._kernels.posterior_columns`: the E step's softmax on scores formed by BLAS.

    Column i of ``P`` (K x m, float64) holds ``beta <mu_k, x_i / s>``; it
    becomes ``w_i softmax_k(log pi_k + beta <mu_k, x_i / s>)`` (``math.md``
    section 7), ``counts[k]`` gains the sum of row k, and the function
    returns ``sum_i w_i logsumexp_k``. A row no head can take (every score
    -inf), or of zero weight, adds nothing. ``weights`` of length 0 means
    unit weights.
    """
    P += log_weights[:, None]
    top = P.max(axis=0)
    dead = top == -np.inf
    any_dead = bool(dead.any())
    if any_dead:
        top[dead] = 0.0
    P -= top
    np.exp(P, out=P)
    Z = P.sum(axis=0)
    if any_dead:
        # A dead row's exponentials are all 0: Z = 1, its log 0.
        Z[dead] = 1.0
    if weights.shape[0] == 0:
        total = float(np.sum(top) + np.sum(np.log(Z)))
        P /= Z
    else:
        total = float(weights @ (top + np.log(Z)))
        P *= weights / Z
    counts += P.sum(axis=1)
    return total


# Terms beyond float64 are inf or NaN without NumPy's warnings, as in the
# compiled kernels (rows many scales out: a row weighing 1e100 beside rows of
# weight 1 puts them 1e48 scales from it).
# (A fresh errstate each call: one shared instance keeps its saved state on
# itself under NumPy 1, across the passes' threads.)
def _as_compiled(kernel):
    @functools.wraps(kernel)
    def quiet(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore"):
            return kernel(*args, **kwargs)

    return quiet


@_as_compiled
def projected_row_terms(A, G, nrm, w, c, lm1, reg, rho, C, identity=1.0):
    """:func:`._kernels.projected_row_terms`: the exact risk's row terms from the projections.

    ``A = X U``, ``G = X M U`` (n x K) and ``nrm`` the rows' squared norms;
    with ``s = ||a||^2``, ``h = <a, g>``, ``e = 1 - c s`` returns ``sum_i
    w_i (e_i^2 nrm_i - 2c(L-1) e_i h_i + rho r_i)`` and fills ``C`` (n x
    3K) with each row's gradient coefficients ``(alpha a + beta g + rho grad
    r, beta a, w nrm a)`` (``math.md`` section 3; the regulariser ``r`` as
    :func:`._kernels.token_regularizer`). ``w`` of length 0 means unit
    weights. By blocks of ``BLOCK`` rows.
    """
    total = 0.0
    for lo in range(0, A.shape[0], BLOCK):
        hi = lo + BLOCK
        part, CT = _row_terms(
            np.ascontiguousarray(A[lo:hi].T),
            np.ascontiguousarray(G[lo:hi].T),
            nrm[lo:hi],
            w[lo:hi] if w.size else w,
            identity,
            c,
            lm1,
            reg,
            rho,
        )
        total += part
        C[lo:hi] = CT.T
    return total


def _row_terms(AT, GT, nrm, w, identity, c, lm1, reg, rho):
    """:func:`projected_row_terms` on the transposed projections ``AT``, ``GT`` (K x n).

    Returns ``(total, CT)``, CT (3K x n) the transposed coefficients: every
    operation runs along a row of n numbers, as the kernel's loops do. The
    three parts of CT are one product of the rows ``(alpha, beta, w nrm)``
    with ``AT``; unit weights multiply nothing.
    """
    K, n = AT.shape
    unit = w.size == 0
    W = np.ones(n) if unit else np.asarray(w, dtype=np.float64)
    Q = AT * AT
    s = Q.sum(axis=0)
    h = np.einsum("ki,ki->i", AT, GT)
    e = identity - c * s
    coef = np.empty((3, n))
    alpha, beta, wn = coef
    # 2c(L-1) e; beta is minus it (times w): (-2c)(L-1) = -(2c(L-1)) exactly.
    ke = (2.0 * c * lm1) * e
    terms = e * e
    terms *= nrm
    terms -= ke * h
    total = float(W @ terms)
    np.multiply(-4.0 * c * e, nrm, out=alpha)
    alpha += (4.0 * c * c * lm1) * h
    np.negative(ke, out=beta)
    if unit:
        wn[:] = nrm
    else:
        alpha *= W
        beta *= W
        np.multiply(W, nrm, out=wn)
    # (alpha a, beta a, w nrm a), then beta g added to the first.
    CT = (coef[:, None, :] * AT).reshape(3 * K, n)
    first = CT[:K]
    first += GT * beta
    if reg == REG_PAIRWISE:
        # r = sum_k q_k (q_0 + ... + q_{k-1}), q = a^2: non-negative terms
        # only, no cancellation; dr/dmu_k = 2 a_k (s - q_k) x.
        r = np.zeros(n)
        partial = np.zeros(n)
        for k in range(K):
            r += Q[k] * partial
            partial += Q[k]
        total += rho * float(W @ r)
        grad = (2.0 * rho) * AT if unit else (2.0 * rho * W) * AT
        grad *= np.subtract(s, Q, out=Q)
        first += grad
    elif reg == REG_PRODUCT:
        # r = prod_k q_k; dr/dmu_k = 2 a_k prod_{j != k} q_j x, from prefix
        # and suffix products (no division).
        prefix = np.empty((K, n))
        prefix[0] = 1.0
        for k in range(1, K):
            np.multiply(prefix[k - 1], Q[k - 1], out=prefix[k])
        suffix = np.ones(n)
        for k in range(K - 1, -1, -1):
            prefix[k] *= suffix
            suffix = suffix * Q[k]
        total += rho * float(W @ suffix)
        grad = (2.0 * rho) * AT if unit else (2.0 * rho * W) * AT
        grad *= prefix
        first += grad
    return total, CT


def argmax_rows(scores, gain, bias, weights, out, counts):
    """:func:`._kernels.argmax_rows`: ``out[i] = argmax_h gain_h scores[i, h] + bias_h``, ties to
    the first head, and ``counts[h]`` gains the weight of the rows labelled h.

    Up to ``_COLUMN_HEADS`` heads by columns (a running maximum, a head
    taking a row only when strictly above it): ``np.argmax`` along rows of
    a few numbers costs a call per row. Finite scores; returns the number of
    rows whose largest value is not finite.
    """
    K = scores.shape[1]
    # Values beyond float64's range are infinite (the caller relabels those
    # rows), and NaN where an infinite product meets the bias -inf of a head
    # of weight zero. By columns such a value never takes a row, as in the
    # compiled loop; np.argmax takes it, and its row, whose largest value is
    # then not finite, is relabelled by the caller as well.
    with np.errstate(over="ignore", invalid="ignore"):
        if K > _COLUMN_HEADS:
            values = scores * gain + bias
            np.argmax(values, axis=1, out=out)
            top = values[np.arange(len(out)), out]
        else:
            top = scores[:, 0] * gain[0] + bias[0]
            out[:] = 0
            for k in range(1, K):
                column = scores[:, k] * gain[k] + bias[k]
                taken = column > top
                np.copyto(out, k, where=taken)
                np.copyto(top, column, where=taken)
    counts += np.bincount(out, weights=weights if weights.size else None, minlength=len(counts))
    return int(np.count_nonzero(~np.isfinite(top)))


def abs_argmax_rows(P):
    """``(best, top)``: per row of ``P`` (n x K) the head of largest ``|P|`` (ties to the first) and its entry.

    As :func:`argmax_rows`, by columns up to ``_COLUMN_HEADS`` heads.
    """
    n, K = P.shape
    if K > _COLUMN_HEADS:
        best = np.argmax(np.abs(P), axis=1)
        return best, P[np.arange(n), best]
    top = P[:, 0].copy()
    size = np.abs(top)
    best = np.zeros(n, dtype=np.intp)
    for k in range(1, K):
        column = P[:, k]
        column_size = np.abs(column)
        wins = column_size > size
        np.copyto(best, k, where=wins)
        np.copyto(top, column, where=wins)
        np.maximum(size, column_size, out=size)
    return best, top


def rotate_pair(YT, R, j, k, weight, w):
    """:func:`._kernels.rotate_pair`: one Jacobi step on rows j, k of ``YT`` and columns j, k of ``R``.

    The pair's exact 1-D minimiser (:func:`._kernels.pair_angle`: its sums
    by NumPy, its angle by :func:`._kernels.angle_and_drop`);
    given a buffer ``w`` (product regulariser) the pair's weights are
    ``weight`` times the other rows' ``prod_m a_m^2``, formed in ``w``.
    Returns the angle and the regulariser's drop. The rows turn in place.
    """
    if w is not None:
        others = None
        for m in range(YT.shape[0]):
            if m != j and m != k:
                if others is None:
                    others = YT[m] * YT[m]
                else:
                    others *= YT[m] * YT[m]
        weight = np.multiply(weight, others, out=w)
    a, b = YT[j], YT[k]
    p = a * b
    q = b * b
    q -= a * a
    q *= 0.5
    wp = weight * p
    theta, drop = angle_and_drop(float(wp @ p), float(wp @ q), float((weight * q) @ q))
    co, si = np.cos(theta), np.sin(theta)
    turned = co * a
    turned += si * b
    b *= co
    b -= si * a
    a[:] = turned
    R[:, [j, k]] = R[:, [j, k]] @ np.array([[co, -si], [si, co]])
    return theta, drop


def rotate_pairs(YT, R, pairs, weight, w):
    """:func:`._kernels.rotate_pairs`: the Jacobi steps of ``pairs`` in turn
    (:func:`rotate_pair`); returns the largest angle and the sum of the
    drops. ``weight`` of length 0 means unit weights."""
    if weight.shape[0] == 0:
        weight = np.ones(YT.shape[1])
    largest = dropped = 0.0
    for j, k in pairs:
        theta, drop = rotate_pair(YT, R, j, k, weight, w)
        largest = max(largest, abs(theta))
        dropped += drop
    return largest, dropped


def scaled_blocks(X, inv_scale):
    """The blocks of :func:`exact_row_terms`: per ``BLOCK`` rows, ``(XT, nrm)``.

    ``XT`` (d x block, float64) is the block's rows ``x / s`` transposed and
    ``nrm`` their squared norms: they depend on the rows alone, so a caller
    that evaluates the risk again on the same rows (the exact solver's
    steps) keeps them (``_passes.DenseRows.exact_terms``).
    """
    blocks = []
    for lo in range(0, X.shape[0], BLOCK):
        XT = np.asarray(X[lo : lo + BLOCK], dtype=np.float64).T * inv_scale
        blocks.append((XT, np.einsum("ji,ji->i", XT, XT)))
    return blocks


@_as_compiled
def exact_row_terms(X, w, inv_scale, U, MU, c, lm1, reg, rho, P, blocks=None, identity=1.0):
    """:func:`._kernels.exact_row_terms`: the exact risk's per-row part and its gradient's sums, one chunk.

    By blocks of ``BLOCK`` rows: the projections ``A = X U / s``, ``G = X M
    U / s`` and the sums ``C^T X`` by BLAS, the row terms by
    :func:`_row_terms`; adds the sums to ``P`` (3K x d) and returns the
    weighted sum of the terms. Float64 whatever X's dtype. ``blocks``: the
    chunk's :func:`scaled_blocks`, if kept (None: formed here).
    """
    if blocks is None:
        blocks = scaled_blocks(X, inv_scale)
    K = U.shape[1]
    keys = np.vstack([U.T, MU.T])
    total = 0.0
    for i, (XT, nrm) in enumerate(blocks):
        lo = i * BLOCK
        AG = keys @ XT  # A^T over G^T, one product
        part, CT = _row_terms(
            AG[:K], AG[K:], nrm, w[lo : lo + BLOCK] if w.size else w, identity, c, lm1, reg, rho
        )
        total += part
        P += CT @ XT.T
    return total


def _transposed(indptr, indices, values, n_columns):
    """The transpose of the CSR rows ``(indptr, indices, values)`` of
    ``n_columns`` columns, as CSC on the same arrays (no copy)."""
    return sp.csc_matrix((values, indices, indptr), shape=(n_columns, indptr.shape[0] - 1))


def transpose_product(indptr, indices, data, A, n_columns):
    """:func:`._kernels.transpose_product`: SciPy's ``X.T @ A`` of a float64
    copy of the rows (of none, for float64 rows)."""
    return _transposed(indptr, indices, np.asarray(data, dtype=np.float64), n_columns) @ A


def centred_column_sums(indptr, indices, data, offset, w):
    """:func:`._kernels.centred_column_sums`: SciPy's products ``C^T w`` and
    ``P^T w`` of copies of the values (in float64, less the offset) and of
    the pattern."""
    n_columns = offset.shape[0]
    values = np.asarray(data, dtype=np.float64) - offset[indices]
    total = _transposed(indptr, indices, values, n_columns) @ w
    return total, _transposed(indptr, indices, np.ones_like(values), n_columns) @ w
