"""The attention pass and the grouping of the self-attention dynamics.

A module of its own rather than a section of ``_kernels.py``: the mixture
kernels there are organised around the pass engine. The one idea both
use, a vectorised exponential by range reduction and the exponent's bits,
is written here for softmax attention's shifted logits (:func:`exp_shifted`,
exact to float32's or float64's rounding) and there for the E step's
(``_kernels._exp_reduced``); the first is tested against NumPy's
exponential directly, the second through the E step's NumPy reference.

:func:`attention` is the O(n m d) work of a step: softmax attention of n
queries over m keys, as blocked matrix products. The logits of a tile of
queries x keys come from one BLAS product (the keys' log-weights, when
tokens are carried as weighted particles, entering it as one more
coordinate), their exponentials from one vectorised pass (the Numba
kernels :func:`exp_shifted` in float64 and :func:`exp_shifted_f32` in
float32, where NumPy's exponential is a scalar loop or a slower vector
one), and the values' weighted sums and the normaliser from a second BLAS
product (the values with a column of ones), accumulated over the tiles of
keys in float64. Tiles of queries run on a thread
pool with BLAS on one thread, each tile's reduction over the keys in a
fixed order, so the result does not depend on the number of threads.
:func:`self_attention` is the same pass for tokens attending to
themselves with Q = K (the dynamics' default): its logits are symmetric,
so each tile is computed and exponentiated once for the two blocks of
tokens it joins. The NumPy reference twins are ``tests/reference.py``'s
``attention_rows`` and the tests in ``tests/test_dynamics.py``.

Notation (``docs/math.md`` section 8): tokens ``x_i``, queries
``q_i = Q x_i``, keys ``k_j = K x_j``, values ``v_j = V x_j``, inverse
temperature ``beta``; the attention of token i on token j is
``P_ij = exp(beta <q_i, k_j>) / Z_i`` with ``Z_i = sum_j exp(beta <q_i, k_j>)``.
"""

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._kernels import njit
from ._passes import dense_block, one_blas_thread, row_major
from ._validation import peak_unit, power_of_two_unit

# Logits per tile (queries x keys): 2^18 entries (2 MB in float64) stay in
# cache between the two products and the exponential, and make each tile's
# handful of NumPy calls cheap beside its work (smaller tiles measured
# slower, from the calls' overhead, at n = 1e4 and 1e5).
_TILE_ENTRIES = 1 << 18
# Keys per tile: enough that the products are long, few enough that
# ``_TILE_ENTRIES`` leaves room for a block of queries.
_TILE_KEYS = 4096

# Constants of exp(x) = 2^k exp(r), x = k ln 2 + r, |r| <= ln(2) / 2 (Cody
# and Waite's range reduction, ln 2 split in a high part exact in k ln2_hi
# and a low part); adding 1.5 * 2^52 rounds x log2(e) to the integer k held
# in the low bits of the sum.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_ROUND = 6755399441055744.0  # 1.5 * 2^52
_ROUND_BITS = 0x4338000000000000  # its bit pattern
# exp(-708) is the smallest exponential that stays a normal float64.
_EXP_FLOOR = -708.0
# The same in float32: adding 1.5 * 2^23 rounds to the integer in the low
# bits, ln 2 split so that k * _LN2_HI_F32 is exact for |k| < 2^8, and
# exp(-87) the smallest exponential that stays a normal float32.
_F32 = np.float32
_ROUND_F32 = _F32(12582912.0)  # 1.5 * 2^23
_ROUND_BITS_F32 = np.int32(0x4B400000)  # its bit pattern
_LN2_HI_F32 = _F32(0.693359375)
_LN2_LO_F32 = _F32(-2.12194440e-4)
_LOG2E_F32 = _F32(_LOG2E)
_EXP_FLOOR_F32 = _F32(-87.0)


@njit(cache=True, nogil=True, fastmath={"contract"})
def exp_shifted(logits, top, buffer):
    """``logits[i, j] <- exp(logits[i, j] - top[i])`` in float64, for ``logits <= top``.

    ``exp(x) = 2^k p(r)`` with ``k = round(x / ln 2)``, ``r = x - k ln 2``
    and ``p`` the Taylor polynomial of degree 12 (its remainder
    ``|r|^13 / 13! < 2e-16`` for ``|r| <= ln(2) / 2``); ``2^k`` is built
    from its bits, so the loops hold no call and vectorise. Arguments below
    -708 count as -708 (an exponential below 3e-308, next to the row's
    largest, which is 1). Without ``reassoc`` in the flags: the rounding
    by ``_ROUND`` must not be simplified away. ``buffer`` holds one row
    (float64, at least ``logits.shape[1]`` entries).
    """
    b, m = logits.shape
    bits = buffer.view(np.int64)
    for i in range(b):
        shift = top[i]
        for j in range(m):
            x = max(logits[i, j] - shift, _EXP_FLOOR)
            t = x * _LOG2E + _ROUND
            k = t - _ROUND
            r = x - k * _LN2_HI - k * _LN2_LO
            p = 1.0 / 479001600.0
            p = p * r + 1.0 / 39916800.0
            p = p * r + 1.0 / 3628800.0
            p = p * r + 1.0 / 362880.0
            p = p * r + 1.0 / 40320.0
            p = p * r + 1.0 / 5040.0
            p = p * r + 1.0 / 720.0
            p = p * r + 1.0 / 120.0
            p = p * r + 1.0 / 24.0
            p = p * r + 1.0 / 6.0
            p = p * r + 0.5
            p = p * r + 1.0
            logits[i, j] = p * r + 1.0
            buffer[j] = t
        for j in range(m):
            # the low bits of t hold k: 2^k has the exponent field k + 1023
            bits[j] = (bits[j] - _ROUND_BITS + 1023) << 52
        for j in range(m):
            logits[i, j] *= buffer[j]


@njit(cache=True, nogil=True, fastmath={"contract"})
def exp_shifted_f32(logits, top, buffer):
    """:func:`exp_shifted` in float32: ``logits[i, j] <- exp(logits[i, j] - top[i])``.

    The same range reduction in float32 arithmetic, ``p`` the Taylor
    polynomial of degree 7 (its remainder ``|r|^8 / 8! < 5e-9`` for
    ``|r| <= ln(2) / 2``, below float32's rounding, 6e-8); arguments below
    -87 count as -87 (an exponential below 2e-38, next to the row's largest,
    1). ``buffer`` holds one row (float32, at least ``logits.shape[1]``
    entries).
    """
    b, m = logits.shape
    bits = buffer.view(np.int32)
    for i in range(b):
        shift = top[i]
        for j in range(m):
            x = max(logits[i, j] - shift, _EXP_FLOOR_F32)
            t = x * _LOG2E_F32 + _ROUND_F32
            k = t - _ROUND_F32
            r = x - k * _LN2_HI_F32 - k * _LN2_LO_F32
            p = _F32(1.0 / 5040.0)
            p = p * r + _F32(1.0 / 720.0)
            p = p * r + _F32(1.0 / 120.0)
            p = p * r + _F32(1.0 / 24.0)
            p = p * r + _F32(1.0 / 6.0)
            p = p * r + _F32(0.5)
            p = p * r + _F32(1.0)
            logits[i, j] = p * r + _F32(1.0)
            buffer[j] = t
        for j in range(m):
            # the low bits of t hold k: 2^k has the exponent field k + 127
            bits[j] = (bits[j] - _ROUND_BITS_F32 + np.int32(127)) << np.int32(23)
        for j in range(m):
            logits[i, j] *= buffer[j]


def _exp_rows(tile, top, buffer):
    """``tile <- exp(tile - top[:, None])``, vectorised in either dtype."""
    if tile.dtype == np.float64:
        exp_shifted(tile, top, buffer)
    else:
        exp_shifted_f32(tile, top, buffer)


def _attend_block(queries, keys_t, values, out, log_norm):
    """Softmax attention of one block of queries over all keys, tile by tile.

    Online softmax over the tiles of keys, in their order: the running row
    maximum ``top``, and ``sum_j exp(logit_ij - top_i) [v_j, 1]`` (in
    float64), rescaled by ``exp(old top - new top)`` when the maximum grows
    (``docs/math.md`` section 8's ``Z_i`` and ``sum_j P_ij v_j``). The last
    column of ``values`` is ones: its sum is ``Z_i``.
    """
    b, m = queries.shape[0], keys_t.shape[1]
    dtype = queries.dtype
    step = min(m, _TILE_KEYS)
    # one flat buffer, so that every tile, the last one narrower, is C-contiguous
    # (one compiled specialisation of the exponential, vectorised)
    tile_buffer = np.empty(b * step, dtype=dtype)
    buffer = np.empty(step, dtype=dtype)
    top = np.full(b, -np.inf, dtype=dtype)
    acc = np.zeros((b, values.shape[1]), dtype=np.float64)
    for lo in range(0, m, step):
        hi = min(lo + step, m)
        tile = tile_buffer[: b * (hi - lo)].reshape(b, hi - lo)
        np.matmul(queries, keys_t[:, lo:hi], out=tile)
        new_top = np.maximum(top, tile.max(axis=1))
        if lo > 0:
            acc *= np.exp((top - new_top).astype(np.float64))[:, None]
        top = new_top
        _exp_rows(tile, top, buffer)
        acc += tile @ values[lo:hi]
    total = acc[:, -1]
    out[...] = acc[:, :-1] / total[:, None]
    log_norm[...] = top + np.log(total)


def attention(queries, keys, values, beta, log_weights=None, block_rows=None, n_threads=1):
    """``sum_j P_ij v_j`` and ``log Z_i`` for every query (``docs/math.md`` section 8).

    ``P_ij = w_j exp(beta <q_i, k_j>) / Z_i``, ``Z_i = sum_j w_j exp(beta
    <q_i, k_j>)``, with the keys' weights ``w_j = exp(log_weights[j])`` (1
    when None): key j stands for ``w_j`` tokens at one place (``docs/math.md``
    section 8, weighted particles). ``log w_j`` is one more coordinate of
    the keys, against a coordinate 1 of the queries, so that the logits of
    the BLAS product hold it. Keys and values are cast to the queries'
    dtype, which the results keep (``log Z_i`` infinite beyond its range;
    the outputs float64 where they may pass a quarter of it,
    :func:`_in_dtype`: then their dtype is not the queries'), unless the
    logits, or a tile's sums of values, may pass a quarter of float32's range (``|logit| <= (d + 1) max |q| max |beta k|``, beta of
    about 1e37 on unit tokens; ``4096 max |v|``): the pass then runs in
    float64 (:func:`_float32_fits`). The row
    maximum is subtracted before the exponential, so any ``beta`` and any
    norm of the tokens is safe. Blocks of at most ``block_rows`` queries (fewer when the keys are
    many, so that a block's logits stay in cache) run on ``n_threads``
    threads; the result does not depend on their number. Sparse queries
    (CSR) are densified one block at a time.

    Parameters
    ----------
    queries : ndarray or CSR matrix of shape (n, d), float32 or float64
    keys : ndarray of shape (m, d)
    values : ndarray of shape (m, d_v)
    beta : float
    log_weights : ndarray of shape (m,) or None
    block_rows : int or None
    n_threads : int

    Returns
    -------
    out : ndarray of shape (n, d_v)
    log_norm : ndarray of shape (n,)
    """
    queries = row_major(queries)
    dtype = queries.dtype
    n, m = queries.shape[0], keys.shape[0]
    keys_t = (beta * np.asarray(keys, dtype=np.float64)).T
    if log_weights is not None:
        keys_t = np.vstack([keys_t, np.asarray(log_weights, dtype=np.float64)[None, :]])
    peak = max(peak_unit(queries), 1.0 if log_weights is not None else 0.0)
    logits = keys_t.shape[0] * peak * peak_unit(keys_t)
    if not _float32_fits(dtype, max(logits, _TILE_KEYS * peak_unit(values))):
        return _in_dtype(
            attention(
                queries.astype(np.float64), keys, values, beta, log_weights, block_rows, n_threads
            ),
            dtype,
        )
    keys_t = np.ascontiguousarray(keys_t, dtype=dtype)
    values = np.column_stack([np.asarray(values, dtype=dtype), np.ones(m, dtype=dtype)])
    out = np.empty((n, values.shape[1] - 1), dtype=dtype)
    log_norm = np.empty(n, dtype=dtype)
    rows = max(8, _TILE_ENTRIES // min(max(m, 1), _TILE_KEYS))
    if block_rows is not None:
        rows = min(rows, block_rows)
    blocks = list(range(0, n, rows))

    def run(task):
        # every n_tasks-th block; the blocks do not depend on the number of threads
        for lo in blocks[task::n_tasks]:
            hi = min(lo + rows, n)
            q = dense_block(queries[lo:hi], dtype)
            if log_weights is not None:
                q = np.column_stack([q, np.ones(hi - lo, dtype=dtype)])
            _attend_block(q, keys_t, values, out[lo:hi], log_norm[lo:hi])

    n_tasks = max(1, min(n_threads, len(blocks)))
    with one_blas_thread():
        if n_tasks == 1:
            run(0)
        else:
            with ThreadPoolExecutor(max_workers=n_tasks) as pool:
                list(pool.map(run, range(n_tasks)))
    return out, log_norm


def _float32_fits(dtype, bound):
    """Whether an attention pass whose logits and products of values reach
    ``bound`` in magnitude runs in ``dtype``: float64 always (beyond its
    range the dynamics raises), float32 within a quarter of its range,
    whose sums, maxima and differences then stay finite. Past it (logits of
    the hard argmax, values of 1e200) the pass runs in float64."""
    return dtype == np.float64 or bound <= float(np.finfo(dtype).max) / 4


def _in_dtype(result, dtype):
    """``(out, log_norm)`` of a float64 pass in ``dtype`` (float32): ``log
    Z_i`` beyond its range infinite; the outputs, means of the values, kept
    in float64 where their largest entry may pass a quarter of its range
    (:func:`_float32_fits`; values of 1e200, a value map's): ``out`` then
    float64 beside a float32 ``log_norm``."""
    out, log_norm = result
    with np.errstate(over="ignore"):
        log_norm = log_norm.astype(dtype)
    return (out.astype(dtype) if _float32_fits(dtype, peak_unit(out)) else out), log_norm


# Tokens per block of the symmetric pass: a tile of 512 x 512 logits (1 MB
# in float32) stays in cache between its product, its exponential and the
# two products with the values.
_SELF_BLOCK = 512
# Largest spread of the shifts s_i + log w_i for which the symmetric pass
# is used: every row keeps its own term exp(-spread) above float's
# underflow by more than float's precision.
_SELF_SPREAD = {np.dtype(np.float32): 60.0, np.dtype(np.float64): 600.0}
# Multiply-adds of a symmetric pass, n^2 (d + columns of the values), below
# which it runs on the calling thread: the pool's threads cost a few tenths
# of a millisecond to start, and below about two full blocks of tokens one
# tile holds most of the work (at d = 30, 569 tokens ran no faster on two
# threads than on one).
_SELF_PARALLEL_WORK = 1 << 25


def self_attention(tokens, values, beta, log_weights=None, block_rows=None, n_threads=1):
    """:func:`attention` of the tokens over themselves (queries = keys), each tile of
    logits computed once for the two blocks it joins (``docs/math.md`` section 8).

    With ``s_i = beta |x_i|^2 / 2``, ``beta <x_i, x_j> - s_i - s_j = -beta
    |x_i - x_j|^2 / 2 <= 0``, so ``E_ij = exp(beta <x_i, x_j> - s_i - s_j)``
    is symmetric and at most 1, and

        sum_j w_j exp(beta <x_i, x_j>) [v_j, 1] = exp(s_i + S) sum_j E_ij u_j [v_j, 1]

    with ``u_j = w_j exp(s_j - S) <= 1``, ``S = max_j (s_j + log w_j)``: a tile
    ``E_IJ`` of blocks I, J gives row block I ``E_IJ U_J`` and row block J
    ``E_IJ^T U_I``. Row i holds its own term ``E_ii u_i = u_i``, the largest
    up to ``exp(S - s_i - log w_i)``: when that spread exceeds
    ``_SELF_SPREAD`` (float underflow could then lose a row), or when the
    rounding of ``E_ij``, formed by cancellation of terms up to ``4 s_i``,
    may pass 1 (``16 eps max s_i``: beta beyond about 1e15 on unit tokens in
    float64, 1e6 in float32), this is :func:`attention`. Blocks have ``_SELF_BLOCK`` tokens, or ``block_rows``
    if fewer. Row block I sums its tiles in the order of J, whatever the
    number of threads; ``x_i`` enter the products as ``[sqrt(beta) x_i,
    -s_i, 1]`` against ``[sqrt(beta) x_j, 1, -s_j]``.

    Float32 tokens whose products' terms may pass a quarter of float32's
    range (``2 beta |x_i|^2``, beta of about 4e37 on unit tokens) take the
    float64 pass (:func:`_float32_fits`), as do values whose tile sums may
    (``512 max |v|``).

    Returns ``sum_j P_ij v_j`` and ``log Z_i`` as :func:`attention` does.
    """
    tokens = np.ascontiguousarray(tokens)
    dtype = tokens.dtype
    n, d = tokens.shape
    step = _SELF_BLOCK if block_rows is None else min(block_rows, _SELF_BLOCK)
    blocks = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    # s_i and sqrt(beta) x_i in float64, rounded once to the tokens' dtype,
    # by blocks of tokens: float32 tokens have no float64 copy of them all.
    half = np.empty(n)
    rows = np.empty((n, d + 2), dtype=dtype)
    sums = step * peak_unit(values)
    for lo, hi in blocks:
        X = np.asarray(tokens[lo:hi], dtype=np.float64)
        half[lo:hi] = 0.5 * beta * np.einsum("ij,ij->i", X, X)
        # The products' terms reach 2 beta |x|^2 = 4 s_i.
        if not _float32_fits(dtype, max(4.0 * np.max(half[lo:hi]), sums)):
            return _in_dtype(
                self_attention(
                    np.asarray(tokens, dtype=np.float64),
                    values,
                    beta,
                    log_weights,
                    block_rows,
                    n_threads,
                ),
                dtype,
            )
        rows[lo:hi, :d] = math.sqrt(beta) * X
    shift = half if log_weights is None else half + np.asarray(log_weights, dtype=np.float64)
    top = shift.max()
    # E_ij sums terms of up to 2 beta |x|^2 = 4 s to a number <= 0: its
    # rounding, about 16 eps max s, passes 1 from beta of about 1e15 on
    # unit tokens (1e6 in float32), where a row's own term exp(E_ii) = 1
    # came out anywhere from 0 to inf (NaN rows); attention() subtracts
    # each row's largest logit instead.
    rounding = 16.0 * float(np.finfo(dtype).eps) * float(np.max(half))
    if top - shift.min() > _SELF_SPREAD[dtype] or rounding > 1.0:
        return attention(tokens, tokens, values, beta, log_weights, block_rows, n_threads)
    rows[:, d] = -half
    rows[:, d + 1] = 1.0
    cols_t = np.empty((d + 2, n), dtype=dtype)
    cols_t[:d] = rows[:, :d].T
    cols_t[d] = 1.0
    cols_t[d + 1] = -half
    u = np.exp(shift - top)
    d_v = values.shape[1]
    # [u_j v_j, u_j], padded with zeros to a multiple of 8 columns: BLAS's
    # products with the tiles measured a quarter faster so (11 -> 16 at d = 10)
    U = np.zeros((n, -(-(d_v + 1) // 8) * 8), dtype=dtype)
    for lo, hi in blocks:
        U[lo:hi, :d_v] = np.asarray(values[lo:hi], dtype=np.float64) * u[lo:hi, None]
    U[:, d_v] = u
    acc = np.zeros((n, U.shape[1]), dtype=np.float64)

    def tile(first, other):
        (a, b), (c, d) = blocks[first], blocks[other]
        E = rows[a:b] @ cols_t[:, c:d]
        _exp_rows(E, np.zeros(b - a, dtype=dtype), np.empty(d - c, dtype=dtype))
        return E @ U[c:d], (E.T @ U[a:b] if other != first else None)

    def rows_of(first, each):
        # row block `first` against the later blocks: the earlier ones gave it their share
        others = range(first, len(blocks))
        for other, (mine, theirs) in zip(others, each(tile, [first] * len(others), others)):
            a, b = blocks[first]
            acc[a:b] += mine
            if theirs is not None:
                c, d = blocks[other]
                acc[c:d] += theirs

    with one_blas_thread():
        # starting the pool's threads costs more than they save on little work
        if n_threads <= 1 or n * n * (tokens.shape[1] + U.shape[1]) < _SELF_PARALLEL_WORK:
            for first in range(len(blocks)):
                rows_of(first, map)
        else:
            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                for first in range(len(blocks)):
                    rows_of(first, pool.map)
    total = acc[:, d_v]
    out = np.empty((n, d_v), dtype=dtype)
    for lo, hi in blocks:
        out[lo:hi] = acc[lo:hi, :d_v] / total[lo:hi, None]
    log_norm = (half + top + np.log(total)).astype(dtype)
    return out, log_norm


# Power iterations for the plane of the grouping's cells (:func:`cell_plane`):
# the plane need not be the principal one, only spread the tokens well.
_PLANE_ITERATIONS = 3


def cell_plane(X):
    """An orthonormal basis V (d, 2), float64, of a plane in which the rows of X spread widely.

    About the top two principal directions of the rows: subspace iteration
    from the two coordinates of largest variance, the covariance applied as
    ``X^T (X V) - n mu (mu^T V)`` so that X is never centred. The rows are
    seen divided by the power of two of their largest entry (exact;
    ``_validation.power_of_two_unit``), in float64, so that the squares
    neither overflow nor underflow at any magnitude of X. With one feature
    the second column is 0. Any orthonormal V will do for
    :func:`group_tokens`: the plane decides which tokens are compared, not
    the groups.
    """
    n, d = X.shape
    V = np.zeros((d, 2))
    if d == 1:
        V[0, 0] = 1.0
        return V
    X = np.divide(X, peak_unit(X), dtype=np.float64)
    mean = X.mean(axis=0)
    variance = np.einsum("ij,ij->j", X, X) / max(n, 1) - mean * mean
    V[np.argsort(-variance, kind="stable")[:2], [0, 1]] = 1.0
    for _ in range(_PLANE_ITERATIONS):
        W = X.T @ (X @ V) - n * np.outer(mean, mean @ V)
        W, R = np.linalg.qr(W)
        # no spread left outside a line: keep the last plane
        if not np.all(np.isfinite(W)) or abs(R[1, 1]) <= 1e-12 * abs(R[0, 0]):
            break
        V = W
    return V


def group_tokens(X, radius, labels, plane=None):
    """Greedy grouping: token i joins the first earlier group whose first
    token lies within ``radius`` (Euclidean), else it starts a new group.

    Writes ``labels`` and returns the number of groups. Clusters of the
    dynamics collapse to points far apart compared with ``radius``, so the
    order in which tokens are visited does not matter once they have
    formed. Only the first tokens of groups filed in the token's cell of a
    grid on a plane, and in the 8 cells around it, are compared with it
    (:func:`_group_in_cells`): a projection on a plane shortens distances,
    so a first token within ``radius`` lies there (``docs/math.md`` section
    8, "Clusters"). ``plane`` is an orthonormal basis (d, 2) of that plane,
    :func:`cell_plane` of X by default; the groups do not depend on it, the
    work does.

    The cells: of width at least ``radius`` in each coordinate of the plane
    (slightly more, for the rounding of the coordinates, and at least a
    4n-th of the span so that a cell's number fits), numbered row by row;
    the cells that hold tokens are kept sorted, so the three cells of a row
    of neighbours are one binary search and a scan. Found here, with the
    kernel's scratch, so that the kernel compiles no array function.
    """
    n = X.shape[0]
    if n == 0:
        return 0
    if plane is None:
        plane = cell_plane(X)
    # in float64: the rounding of the coordinates stays far below the cells' margin;
    # halved (exact), with the radius, so that the span of coordinates on
    # either side of zero near float64's largest numbers (the unnormalised
    # model's tokens, growing as e^t) does not overflow
    P = 0.5 * (X.astype(np.float64, copy=False) @ plane)
    low, high = P.min(axis=0), P.max(axis=0)
    top = np.abs(P).max(axis=0)
    span = high - low
    # the margins keep neighbours within radius in adjacent cells despite rounding
    width = np.maximum(
        np.maximum(0.5 * radius * (1.0 + 1e-6) + 1e-9 * top, span / (4.0 * n)), 0.5e-300
    )
    sizes = (span / width).astype(np.int64) + 1
    grid = np.minimum(((P - low) / width).astype(np.int64), sizes - 1)
    keys = grid[:, 0] * sizes[1] + grid[:, 1]
    cells = np.unique(keys)
    # Squared distances at the radius's power of two (exact): near the radius
    # they neither overflow nor underflow, at any magnitude of X (the power at
    # least the dtype's smallest normal number, whose inverse the dtype holds).
    scale = 1.0 / max(power_of_two_unit(radius), float(np.finfo(X.dtype).tiny))
    return _group_in_cells(
        X,
        keys,
        int(sizes[0]),
        int(sizes[1]),
        cells,
        np.searchsorted(cells, keys),
        (radius * scale) ** 2,
        X.dtype.type(scale),
        labels,
        np.full(len(cells), -1, dtype=np.int64),
        np.full(len(cells), -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.empty(n, dtype=np.int64),
    )


@njit(cache=True)
def _group_in_cells(
    X, keys, rows, columns, cells, own, r2, scale, labels, head, tail, following, firsts
):
    """:func:`group_tokens`' greedy grouping over the cells found there.

    ``keys`` (n) numbers each token's cell ``row * columns + column`` in a
    grid of ``rows`` x ``columns``; ``cells`` are the distinct keys, sorted,
    and ``own`` each token's index among them. The groups' first tokens are
    filed in their cell in the order the groups were made (``head``,
    ``tail`` per cell and ``following`` per group, -1 at first; ``firsts``
    the first token of each group), and token i searches its cell and the 8
    around it for the earliest group within ``sqrt(r2)``, distances measured
    in units of ``1 / scale``. A squared distance stops being summed once
    past ``r2``: its partial sums of squares only grow, rounded too, so the
    decision is the full sum's (tokens of hundreds of coordinates, spread
    over the sphere with few cells between them, pass it within a few
    coordinates: 633 TF-IDF documents in their span, grouped at the radius
    1e-2, took 4 ms, now 0.5 ms). O(n log n + n c d) for c first tokens met
    per search: O(n log n + n d) when the tokens are spread out in the
    plane, O(n g d) for g groups at worst (all in nine cells).
    """
    n, d = X.shape
    n_cells = cells.shape[0]
    n_groups = 0
    for i in range(n):
        c0, c1 = keys[i] // columns, keys[i] % columns
        found = -1
        for n0 in range(max(c0 - 1, 0), min(c0 + 2, rows)):
            # the cells (n0, c1 - 1), (n0, c1), (n0, c1 + 1): consecutive keys
            last = n0 * columns + min(c1 + 1, columns - 1)
            c = _first_at_least(cells, n0 * columns + max(c1 - 1, 0))
            while c < n_cells and cells[c] <= last:
                g = head[c]
                while g >= 0 and (found < 0 or g < found):
                    f = firsts[g]
                    s = 0.0
                    for k in range(d):
                        diff = (X[i, k] - X[f, k]) * scale
                        s += diff * diff
                        if s > r2:
                            break
                    if s <= r2:
                        found = g
                        break
                    g = following[g]
                c += 1
        if found < 0:
            found = n_groups
            firsts[found] = i
            c = own[i]
            if head[c] < 0:
                head[c] = found
            else:
                following[tail[c]] = found
            tail[c] = found
            n_groups += 1
        labels[i] = found
    return n_groups


@njit(cache=True)
def _first_at_least(sorted_keys, key):
    """Index of the first entry of ``sorted_keys`` that is at least ``key`` (its length if none)."""
    lo, hi = 0, sorted_keys.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo
