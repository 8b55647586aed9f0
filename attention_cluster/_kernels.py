"""Chunk kernels: projected stochastic gradient descent (PSGD), the exact
objective's per-row terms, the post-hoc signs and labels, the E step of the
EM refinement, the moments' sums of few features and the weighted drawing
of rows.

Every Numba kernel is a module-level ``@njit`` function (nothing jitted is
stored on an estimator, so estimators pickle). The kernels that read data
rows work on one chunk of rows, release the GIL (``nogil``, or NumPy's
BLAS) and write into buffers the caller owns: the pass layer (``_passes``)
runs them on its thread pool and adds up their results, so no kernel uses
Numba's threading layer. The Python drivers own the loops, the step-size
schedule, the stopping rules and the verbose output. Their NumPy reference
twins live in ``tests/reference.py`` or the test files.

Numba compiles each kernel on its first call, before a first fit's result
(seconds per kernel with an empty cache). So a kernel is written in Numba
only where its loop beats NumPy on the paper's regime (d = 10, few heads:
the fused E step, the exact risk's row terms, the moments' sums, the
heads' signs and the labels' argmax, PSGD, the draws); the products of wide data are NumPy's,
and data too small to repay the compile runs NumPy forms of the default
fit's kernels (``_numpy_kernels``, chosen by ``_passes.compiles``). The kernels of a default fit allocate
no arrays (their Python wrappers pass the scratch): each allocation inside
a kernel is one more function for Numba to compile.

Notation (``math.md`` sections 2-3): a sequence is ``X`` (L x d), the heads
are the columns of ``U`` (d x K), ``c = lambda K / L``, ``A = X U``,
``G = X^T A``, ``T = c A G^T``, ``E = T - X``; the loss of one sequence is
``(1/L) ||E||_F^2`` and its gradient is
``(2c / L) X^T (E G + X (E^T A))``.
"""

import warnings

import numba
import numpy as np

# Flags that keep NaN and Inf semantics (no "nnan"/"ninf"): results stay
# comparable to the NumPy reference while allowing vectorised reductions.
# Not "nsz" either: with it (and "reassoc"), the code Numba compiles in a
# process and the code it loads from its on-disk cache differed in the last
# bits of a fit's results, so the first process of a machine (or a Dask
# worker that compiled) fitted otherwise than the next; without it they are
# the same (tests/test_kernels.py), at a cost within the machine's noise.
# With "reassoc", a loop that adds into a scalar writes no array: LLVM splits
# such a sum over vector lanes, and where the loop also stores it runs the
# vector form only after a check of the arrays' addresses, the scalar form
# (the sum in another order) when a stored array starts within a few
# vectors after a read one's start (or, for an index Numba may wrap as
# negative, its start plus the array's length). Arrays that do not overlap
# pass the check or not by where the allocator put them: moment_sums'
# column sums changed in their last bits from call to call on the same rows
# (one call in about 200 in a run of the test files), when the scratch it
# allocates lay just after the weights (tests/test_kernels.py).
FASTMATH = {"arcp", "contract", "afn", "reassoc"}
# A helper that is also called alone (by its tests, or by theory) is inlined
# into the kernels that call it (inline="always"), so that each kernel is
# compiled as one function whatever ran before it: linked as libraries of
# their own, PSGD's helpers changed its kernel's code, and its iterates, by
# whether a call of one alone (a test of token_regularizer, say) had
# compiled it first in the process that filled the cache
# (tests/test_kernels.py). The other helpers are called by their kernels
# alone, or compute without FASTMATH's flags.


def njit(**options):
    """``numba.njit(**options)``; a ``cache=True`` kernel that no place can
    cache is compiled in each process instead, with a warning.

    Numba caches a kernel in ``__pycache__`` beside the package's sources,
    or in the per-user cache directory; where both are read-only (a
    read-only image run by a user whose home is not writable) it refuses
    the kernel when it is defined, and the package's import failed.
    """
    jit = numba.njit(**options)
    if not options.get("cache"):
        return jit

    def compiled(kernel):
        try:
            return jit(kernel)
        except RuntimeError as error:
            if "cannot cache function" not in str(error):
                raise
            warnings.warn(
                "Numba has no writable place to cache attention_cluster's compiled kernels "
                "(neither the package's __pycache__ nor the per-user cache directory): each "
                "process compiles them again, seconds before its first fit. Set "
                "NUMBA_CACHE_DIR to a writable directory.",
                UserWarning,
                stacklevel=1,
            )
            return numba.njit(**{**options, "cache": False})(kernel)

    return compiled


REG_NONE = 0
REG_PAIRWISE = 1
REG_PRODUCT = 2


@njit(cache=True)
def _next_uint(state):
    """xorshift64* step on ``state[0]``; returns 53 random bits."""
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return (x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(11)


@njit(cache=True)
def _uniform(state):
    return _next_uint(state) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _draw_index(state, cum_weights):
    """Index i with probability w_i / sum(w) (binary search on cumulative weights)."""
    n = cum_weights.shape[0]
    u = _uniform(state) * cum_weights[n - 1]
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cum_weights[mid] > u:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, fastmath=FASTMATH, inline="always")
def _product(P, Q, out, accumulate):
    """``out = P Q`` (or ``out += P Q``) for small matrices, into a buffer."""
    m, r = P.shape
    c = Q.shape[1]
    for i in range(m):
        for k in range(c):
            s = out[i, k] if accumulate else 0.0
            for j in range(r):
                s += P[i, j] * Q[j, k]
            out[i, k] = s


@njit(cache=True, fastmath=FASTMATH, inline="always")
def _product_tn(P, Q, out):
    """``out = P^T Q`` into a buffer, reading P and Q row by row."""
    for j in range(out.shape[0]):
        for k in range(out.shape[1]):
            out[j, k] = 0.0
    for i in range(P.shape[0]):
        for j in range(P.shape[1]):
            p = P[i, j]
            for k in range(Q.shape[1]):
                out[j, k] += p * Q[i, k]


@njit(cache=True, fastmath=FASTMATH, inline="always")
def sequence_loss_grad(Xs, U, c, grad, A, G, E, W):
    """Loss ``(1/L)||T(X) - X||_F^2`` of one sequence; adds its gradient to ``grad``.

    ``math.md`` section 3: ``grad_U = (2c/L) X^T (E G + X (E^T A))`` with
    ``A = X U``, ``G = X^T A``, ``E = c A G^T - X``. O(L d K), no L x L
    matrix. ``A`` (L x K), ``G`` (d x K), ``E`` (L x d) and ``W`` (L x K)
    are scratch buffers.
    """
    L, d = Xs.shape
    K = U.shape[1]
    _product(Xs, U, A, False)
    _product_tn(Xs, A, G)
    loss = 0.0
    for l in range(L):
        for j in range(d):
            t = 0.0
            for k in range(K):
                t += A[l, k] * G[j, k]
            e = c * t - Xs[l, j]
            E[l, j] = e
            loss += e * e
    # W = E G + X (E^T A); G is reused for E^T A once E G is formed.
    _product(E, G, W, False)
    _product_tn(E, A, G)
    _product(Xs, G, W, True)
    scale = 2.0 * c / L
    for l in range(L):
        for j in range(d):
            x = scale * Xs[l, j]
            for k in range(K):
                grad[j, k] += x * W[l, k]
    return loss / L


@njit(cache=True, inline="always")
def token_regularizer(a, kind, coef):
    """Regulariser of one token and the coefficients of its gradient.

    With ``a = U^T x`` (``math.md`` section 3):
    pairwise ``r = sum_{j<k} a_j^2 a_k^2``, ``dr/dmu_j = 2 a_j (S - a_j^2) x``
    with ``S = sum_k a_k^2``; product ``r = prod_k a_k^2``,
    ``dr/dmu_j = 2 a_j prod_{k != j} a_k^2 x``. Writes the factors of ``x``
    into ``coef`` (length K) and returns r.
    """
    K = a.shape[0]
    if kind == REG_PAIRWISE:
        # sum_{j<k} q_j q_k as sum_k q_k (q_0 + ... + q_{k-1}): non-negative
        # terms only, no cancellation.
        S = 0.0
        r = 0.0
        for k in range(K):
            q = a[k] * a[k]
            r += q * S
            S += q
        for k in range(K):
            coef[k] = 2.0 * a[k] * (S - a[k] * a[k])
        return r
    if kind == REG_PRODUCT:
        # prod_{k != j} a_k^2 from prefix and suffix products: no division.
        prefix = 1.0
        for k in range(K):
            coef[k] = prefix
            prefix *= a[k] * a[k]
        suffix = 1.0
        for k in range(K - 1, -1, -1):
            coef[k] *= 2.0 * a[k] * suffix
            suffix *= a[k] * a[k]
        return prefix
    for k in range(K):
        coef[k] = 0.0
    return 0.0


@njit(cache=True, fastmath=FASTMATH, inline="always")
def sphere_step(U, grad, step, riemannian):
    """One step per head, then retraction onto the unit sphere.

    Riemannian (``math.md`` section 3): ``g = (I - mu mu^T) grad``,
    ``mu <- (mu - step g) / ||mu - step g||``. Euclidean (paper, Appendix
    G.3): ``mu <- (mu - step grad) / ||mu - step grad||``. A head whose
    update vanishes keeps its previous value, as does a head whose update
    overflows; returns False when one did (the caller refuses the step).
    """
    d, K = U.shape
    finite = True
    for k in range(K):
        p = 0.0
        if riemannian:
            for j in range(d):
                p += U[j, k] * grad[j, k]
        nrm = 0.0
        for j in range(d):
            v = U[j, k] - step * (grad[j, k] - p * U[j, k])
            grad[j, k] = v
            nrm += v * v
        if not np.isfinite(nrm):
            finite = False
        elif nrm > 0.0:
            inv = 1.0 / np.sqrt(nrm)
            for j in range(d):
                U[j, k] = grad[j, k] * inv
    return finite


@njit(cache=True, nogil=True)
def draw_rows(X, offset, cum_weights, inv_scale, state, out):
    """Fill ``out`` with rows of ``(X - offset) * inv_scale`` drawn with replacement.

    Row i is drawn with probability proportional to its weight (binary
    search on ``cum_weights``), from the caller's one-element uint64
    generator state ``state``. Reads and writes ``out.shape[0]`` rows.
    ``offset`` (X's dtype, subtracted in it) of length 0 means none.
    """
    d = X.shape[1]
    centred = offset.shape[0] > 0
    for r in range(out.shape[0]):
        i = _draw_index(state, cum_weights)
        for j in range(d):
            if centred:
                out[r, j] = (X[i, j] - offset[j]) * inv_scale
            else:
                out[r, j] = X[i, j] * inv_scale


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def psgd_chunk(
    rows,
    U,
    temperature,
    sequence_length,
    batch_size,
    steps,
    reg_kind,
    reg_strength,
    riemannian,
    losses,
    heads_sum,
):
    """Run ``len(steps)`` PSGD steps in place on ``U`` (d x K).

    ``rows`` holds the tokens, ``len(steps) * batch_size * sequence_length``
    rows drawn by :func:`draw_rows`: step t uses the ``batch_size``
    sequences of ``sequence_length`` consecutive rows that follow step
    t - 1's. Each step averages the per-sequence gradients of the risk
    (``math.md`` section 3) and of ``reg_strength`` times the regulariser
    evaluated on the same tokens, and takes one step of size ``steps[t]``
    on each head, projected or not (``riemannian``). ``losses[t]`` receives
    the mini-batch objective, or infinity where the step overflowed (its
    heads kept, :func:`sphere_step`). ``heads_sum`` accumulates U after
    every step, for iterate averaging.
    """
    d, K = U.shape
    L = sequence_length
    c = temperature * K / L
    A = np.empty((L, K))
    G = np.empty((d, K))
    E = np.empty((L, d))
    W = np.empty((L, K))
    grad = np.empty((d, K))
    coef = np.empty(K)
    inv_batch = 1.0 / batch_size
    # The whole gradient is divided by batch_size below: the regulariser's
    # part becomes its mean over the batch_size * L tokens.
    reg_scale = reg_strength / L
    first = 0
    for t in range(steps.shape[0]):
        for j in range(d):
            for k in range(K):
                grad[j, k] = 0.0
        loss = 0.0
        reg = 0.0
        for _ in range(batch_size):
            Xs = rows[first : first + L]
            first += L
            loss += sequence_loss_grad(Xs, U, c, grad, A, G, E, W)
            if reg_kind != REG_NONE:
                for l in range(L):
                    reg += token_regularizer(A[l], reg_kind, coef)
                    for j in range(d):
                        x = reg_scale * Xs[l, j]
                        for k in range(K):
                            grad[j, k] += x * coef[k]
        for j in range(d):
            for k in range(K):
                grad[j, k] *= inv_batch
        losses[t] = loss * inv_batch + reg_strength * reg * inv_batch / L
        if not sphere_step(U, grad, steps[t], riemannian):
            losses[t] = np.inf
        for j in range(d):
            for k in range(K):
                heads_sum[j, k] += U[j, k]


def check_psgd_losses(losses, first_step, advice):
    """Raise a FloatingPointError when :func:`psgd_chunk` reports an overflow:
    ``losses`` are its chunk's (infinite at a step whose update overflowed),
    the chunk's first step is ``first_step`` (from 0), ``advice`` what to lower."""
    if not np.all(np.isfinite(losses)):
        raise FloatingPointError(
            f"PSGD overflowed the floating-point range within steps {first_step + 1} to "
            f"{first_step + len(losses)}: {advice}."
        )


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def head_totals(X, U, weights, totals):
    """Adds to ``totals[h]`` the (weighted) projections of the rows head h wins.

    Each row goes to ``argmax_h |<x, mu_h>|`` (sign-free, ties to the first
    head) and adds ``w <x, mu_h>`` to that head's total; a head whose total
    over all rows is negative points away from its points and is flipped
    (``math.md`` section 5, post-hoc labels). ``weights`` of length 0 means
    unit weights. ``U`` is C-contiguous float64; the projections are float64
    whatever X's dtype. Loops, no product or allocation (see the module's
    docstring): one row's K projections at a time.
    """
    n, d = X.shape
    K = U.shape[1]
    for i in range(n):
        best = 0
        top = 0.0
        size = -1.0
        for k in range(K):
            p = 0.0
            for j in range(d):
                p += np.float64(X[i, j]) * U[j, k]
            if abs(p) > size:
                size = abs(p)
                top = p
                best = k
        totals[best] += top if weights.shape[0] == 0 else weights[i] * top


@njit(cache=True, nogil=True)
def argmax_rows(scores, gain, bias, weights, out, counts):
    """``out[i] = argmax_h gain_h scores[i, h] + bias_h``, ties to the first head.

    ``counts[h]`` gains the weight of each row labelled h (1 per row when
    ``weights`` has length 0): the labels' counts in the labels' pass, not
    a second read of the labels. Returns the number of rows whose largest
    value is not finite (beyond float64's range: the caller labels them,
    ``_passes._far_labels``).
    """
    n, K = scores.shape
    unit = weights.shape[0] == 0
    far = 0
    for i in range(n):
        best = 0
        top = gain[0] * scores[i, 0] + bias[0]
        for k in range(1, K):
            v = gain[k] * scores[i, k] + bias[k]
            if v > top:
                top = v
                best = k
        out[i] = best
        counts[best] += 1.0 if unit else weights[i]
        if not (-np.inf < top < np.inf):
            far += 1
    return far


def moment_sums(X, weights):
    """``(G, t)``: ``G = sum_i w_i x_i x_i^T`` (d x d) and ``t = sum_i w_i x_i`` over one chunk.

    The second moment's and the mean's sums (``_passes.DenseRows.moments``)
    in one read of the rows, float64 whatever X's dtype: rows go by blocks
    of ``_MOMENT_BLOCK``, copied transposed to float64, and each of the
    ``d (d + 1) / 2`` entries of the upper triangle is one product of two
    contiguous rows of the block (the lower triangle is copied). For few
    features (``_passes`` calls it up to ``d = 16``): there it reads the
    chunk once where BLAS's two products (``X^T X`` and ``1^T X``) read it
    twice and multiply slower at that width; wider, BLAS wins. NaN and
    infinity propagate into the sums. ``weights`` of length 0 means unit
    weights.
    """
    d = X.shape[1]
    G = np.zeros((d, d))
    t = np.zeros(d)
    _moment_block_sums(X, weights, np.empty((d, _MOMENT_BLOCK)), np.empty(_MOMENT_BLOCK), G, t)
    # The upper triangle mirrored (NumPy's: the kernel allocates nothing).
    lower = np.tril_indices(d, -1)
    G[lower] = G.T[lower]
    return G, t


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _moment_block_sums(X, weights, XT, wx, G, t):
    """:func:`moment_sums` on scratch buffers (``XT`` d x block, ``wx`` one block): adds to
    the upper triangle of ``G`` and to ``t``."""
    n, d = X.shape
    unit = weights.shape[0] == 0
    for lo in range(0, n, _MOMENT_BLOCK):
        m = n - lo if n - lo < _MOMENT_BLOCK else _MOMENT_BLOCK
        for i in range(m):
            for j in range(d):
                XT[j, i] = X[lo + i, j]
        for j in range(d):
            # wx is filled by one loop and summed by the next: see FASTMATH
            # (a sum in the loop that stored into wx took one order or
            # another by where wx lay after the weights).
            if unit:
                for i in range(m):
                    wx[i] = XT[j, i]
            else:
                for i in range(m):
                    wx[i] = weights[lo + i] * XT[j, i]
            s = 0.0
            for i in range(m):
                s += wx[i]
            t[j] += s
            for k in range(j, d):
                s = 0.0
                for i in range(m):
                    s += wx[i] * XT[k, i]
                G[j, k] += s


@njit(cache=True, fastmath=FASTMATH)
def _block_row_terms(AB, GB, nrm, W, size, identity, c, lm1, pairwise, product, SB, CB):
    """The rows' weighted terms of the exact risk and their gradient coefficients, for a block.

    Column i of ``AB`` and ``GB`` (K x block) is row i's ``a = U^T x`` and
    ``g = U^T M x``, ``nrm[i] = ||x||^2`` and ``W[i]`` its weight, for the
    first ``size`` columns. With ``s = ||a||^2``, ``h = <a, g>`` and ``e =
    identity - c s`` (``identity`` is 1, or the scaled objective's ``1 /
    gamma``: see :func:`exact_row_terms`), returns the sum of ``W (e^2 nrm - 2c(L-1) e h + rho r)`` and
    fills column i of ``CB`` (3K x block) with the coefficients of ``x^T``
    in the gradient's three sums (see :func:`exact_row_terms`). The
    regulariser r and its coefficients are :func:`token_regularizer`'s
    formulas, written along the block so that the loops over rows
    vectorise. ``SB`` (5 x block) is scratch; ``GB`` is overwritten.

    ``pairwise`` and ``product`` hold rho for the regulariser in use and
    None for the others (see :func:`_strengths`): Numba prunes the branch of
    a None argument before compiling, so a fit compiles the terms of its
    own regulariser only.
    """
    K = AB.shape[0]
    s, h, e, r, S = SB[0], SB[1], SB[2], SB[3], SB[4]
    for i in range(size):
        s[i] = 0.0
        h[i] = 0.0
        r[i] = 0.0
    for k in range(K):
        for i in range(size):
            q = AB[k, i] * AB[k, i]
            if pairwise is not None:
                # r = sum_k q_k (q_0 + ... + q_{k-1}), q = a^2: non-negative
                # terms only, no cancellation.
                r[i] += q * s[i]
            s[i] += q
            h[i] += AB[k, i] * GB[k, i]
    total = 0.0
    for i in range(size):
        ei = identity - c * s[i]
        total += W[i] * (ei * ei * nrm[i] - 2.0 * c * lm1 * ei * h[i])
        if pairwise is not None:
            # dr/dmu_k = 2 a_k (S - a_k^2) x with S = ||a||^2: r now holds
            # the factor 2 W rho, S the norm.
            total += W[i] * pairwise * r[i]
            r[i] = 2.0 * W[i] * pairwise
            S[i] = s[i]
        # s and h now hold alpha and beta of exact_row_terms' docstring.
        s[i] = W[i] * (-4.0 * c * ei * nrm[i] + 4.0 * c * c * lm1 * h[i])
        h[i] = W[i] * (-2.0 * c * lm1 * ei)
        e[i] = W[i] * nrm[i]
    for k in range(K):
        for i in range(size):
            CB[k, i] = s[i] * AB[k, i] + h[i] * GB[k, i]
            if pairwise is not None:
                CB[k, i] += r[i] * AB[k, i] * (S[i] - AB[k, i] * AB[k, i])
            CB[K + k, i] = h[i] * AB[k, i]
            CB[2 * K + k, i] = e[i] * AB[k, i]
    if product is not None:
        # r = prod_k q_k; dr/dmu_k = 2 a_k prod_{j != k} q_j x, from prefix
        # products (kept in GB, no longer needed) and suffix products: no
        # division.
        prefix, suffix = SB[0], SB[1]
        for i in range(size):
            prefix[i] = 1.0
            suffix[i] = 1.0
        for k in range(K):
            for i in range(size):
                GB[k, i] = prefix[i]
                prefix[i] *= AB[k, i] * AB[k, i]
        for i in range(size):
            total += W[i] * product * prefix[i]
        for k in range(K - 1, -1, -1):
            for i in range(size):
                CB[k, i] += W[i] * product * 2.0 * AB[k, i] * GB[k, i] * suffix[i]
                suffix[i] *= AB[k, i] * AB[k, i]
    return total


def _strengths(reg, rho):
    """``(pairwise, product)`` of :func:`_block_row_terms`: rho for the regulariser ``reg``, None for the other."""
    return (rho if reg == REG_PAIRWISE else None), (rho if reg == REG_PRODUCT else None)


def projected_row_terms(A, G, nrm, w, c, lm1, reg, rho, C, identity=1.0):
    """:func:`exact_row_terms` from the rows' projections, for sparse rows.

    ``A = X U``, ``G = X M U`` (n x K) and ``nrm`` the squared norms of the
    (scaled) rows: returns the weighted sum of the per-row terms and fills
    ``C`` (n x 3K) with each row's gradient coefficients, so that the
    gradient's sums are ``C^T X``, a product the caller makes with its
    sparse rows. ``w`` of length 0 means unit weights. By blocks of
    ``_PRODUCT_BLOCK`` rows, transposed for :func:`_block_row_terms`.
    """
    total = 0.0
    for lo in range(0, A.shape[0], _PRODUCT_BLOCK):
        hi = min(lo + _PRODUCT_BLOCK, A.shape[0])
        part, CB = _projected_block(
            A[lo:hi].T, G[lo:hi].T, nrm[lo:hi], w, lo, hi, identity, c, lm1, reg, rho
        )
        total += part
        C[lo:hi] = CB.T
    return total


def _projected_block(AB, GB, nrm, w, lo, hi, identity, c, lm1, reg, rho):
    """:func:`_block_row_terms` on rows ``lo:hi`` from their projections
    (``AB``, ``GB`` K x block, ``nrm`` the block's squared norms); ``w`` is
    every row's weights (length 0: unit weights). Returns ``(total, CB)``,
    CB (3K x block) the rows' gradient coefficients."""
    size = hi - lo
    W = np.ones(size) if w.size == 0 else np.ascontiguousarray(w[lo:hi], dtype=np.float64)
    CB = np.empty((3 * AB.shape[0], size))
    total = _block_row_terms(
        np.ascontiguousarray(AB),
        np.ascontiguousarray(GB),
        np.ascontiguousarray(nrm),
        W,
        size,
        identity,
        c,
        lm1,
        *_strengths(reg, rho),
        np.empty((5, size)),
        CB,
    )
    return total, CB


@njit(cache=True)
def repeats_a_column(indptr, indices, n_columns):
    """Whether a row of CSR structure ``(indptr, indices)`` stores a column
    twice: one pass, a mark per column (indices in any order)."""
    seen = np.full(n_columns, -1, dtype=np.int64)
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if seen[j] == i:
                return True
            seen[j] = i
    return False


def transpose_product(indptr, indices, data, A, n_columns):
    """``X^T A`` (``n_columns`` x k, float64) for the CSR rows ``X = (indptr,
    indices, data)`` (n x ``n_columns``, float32 or float64) and A (n x k,
    or n) float64.

    SciPy's ``X.T @ A`` of a float64 copy of X, bit for bit, with no copy:
    each stored value is read in float64 as it comes, and the products are
    added in SciPy's order (``csc_matvecs`` of ``X.T``: the rows in turn,
    each row's entries as stored, ``out[j] += x_ij A[i]``, from zero), each
    rounded before its sum (no fastmath: no multiply-add fused, no sum
    reordered).
    """
    out = np.zeros((n_columns, *A.shape[1:]))
    _add_transpose_product(
        indptr, indices, data, A[:, None] if A.ndim == 1 else A, out.reshape(n_columns, -1)
    )
    return out


@njit(cache=True, nogil=True)
def _add_transpose_product(indptr, indices, data, A, out):
    """``out += X^T A`` in the order of :func:`transpose_product`. The
    positions are read as unsigned (they are not negative): Numba then
    checks no index for a wrap-around, a branch per value read that made
    the kernel slower than SciPy's loop."""
    k = A.shape[1]
    for i in range(indptr.shape[0] - 1):
        a = A[i]
        for p in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            o = out[np.uint64(indices[p])]
            x = np.float64(data[p])
            for c in range(k):
                o[c] += x * a[c]


def centred_column_sums(indptr, indices, data, offset, w):
    """``(total, stored)``: ``total_j = sum_i w_i (x_ij - offset_j)`` and
    ``stored_j = sum_i w_i`` over the stored entries ``x_ij`` of the CSR rows
    ``X = (indptr, indices, data)`` (float32 or float64), in float64.

    SciPy's products ``C^T w`` and ``P^T w``, bit for bit, for C the stored
    values less the offset (in float64) and P the pattern of X (ones), with
    no copy of the values: the order of :func:`transpose_product`.
    """
    total, stored = np.zeros(offset.shape[0]), np.zeros(offset.shape[0])
    _add_centred_column_sums(indptr, indices, data, offset, w, total, stored)
    return total, stored


@njit(cache=True, nogil=True)
def _add_centred_column_sums(indptr, indices, data, offset, w, total, stored):
    """Adds :func:`centred_column_sums`' sums to ``total`` and ``stored``."""
    for i in range(indptr.shape[0] - 1):
        wi = w[i]
        for p in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            j = np.uint64(indices[p])
            total[j] += (np.float64(data[p]) - offset[j]) * wi
            stored[j] += wi


@njit(cache=True, nogil=True)
def draw_sparse_rows(indptr, indices, data, cum_weights, inv_scale, offset, state, out):
    """:func:`draw_rows` for CSR rows ``(x - offset) * inv_scale``, densified into ``out``.

    The same generator and the same draws as :func:`draw_rows`, so dense
    and sparse copies of the same data draw the same rows.
    """
    d = out.shape[1]
    for r in range(out.shape[0]):
        i = _draw_index(state, cum_weights)
        for j in range(d):
            out[r, j] = -offset[j] * inv_scale
        for p in range(indptr[i], indptr[i + 1]):
            out[r, indices[p]] += data[p] * inv_scale


def exact_row_terms(X, w, inv_scale, U, MU, c, lm1, reg, rho, P, identity=1.0):
    """Per-row part of the exact risk and of its gradient, for one chunk.

    For the rows ``x_i = X_i * inv_scale`` of the chunk (``w`` their
    weights, empty for unit weights), with ``a_i = U^T x_i``, ``g_i = U^T M
    x_i`` (``MU = M U``), ``s_i = ||a_i||^2``, ``h_i = <a_i, g_i>``,
    ``n_i = ||x_i||^2``, ``e_i = 1 - c s_i`` and ``lm1 = L - 1``: returns the
    weighted sum of ``e_i^2 n_i - 2c(L-1) e_i h_i + rho r_i`` (``math.md``
    section 3) and adds to ``P`` (3K x d), by blocks of K rows,
    ``sum_i (alpha_i a_i + beta_i g_i + rho grad r_i) x_i^T``,
    ``sum_i beta_i a_i x_i^T`` and ``sum_i n_i a_i x_i^T = n (M4 U)^T``, with
    ``alpha_i = -4c e_i n_i + 4c^2 (L-1) h_i`` and ``beta_i = -2c(L-1) e_i``
    (see :func:`attention_cluster._objective.exact_objective`). The regulariser
    ``r_i`` of each row is :func:`token_regularizer`'s. O(d K) per row, in
    float64 whatever X's dtype. With ``identity = 1 / gamma``, ``c / gamma``
    for c and ``rho / gamma^2`` for rho, every term is divided by
    ``gamma^2`` (``e_i = (1 - c s_i) / gamma``): the scaled objective of a
    large temperature or strength (``math.md`` section 3).

    Below ``_PRODUCT_MIN_WORK`` of ``d K`` (the paper's regime), one Numba
    loop kernel reads each row once (:func:`_fused_row_terms`); from there
    on, the projections and the sums over rows are BLAS products (NumPy's,
    so that Numba compiles no product) by blocks of ``_PRODUCT_BLOCK`` rows,
    and :func:`_block_row_terms` the terms.
    """
    m, d = X.shape
    K = U.shape[1]
    if d * K < _PRODUCT_MIN_WORK:
        # Unit weights: W stays all ones and the kernel, given None, compiles
        # no copy of them.
        XT, nrm, W = np.empty((d, _E_BLOCK)), np.empty(_E_BLOCK), np.ones(_E_BLOCK)
        AB, GB, CB = np.empty((K, _E_BLOCK)), np.empty((K, _E_BLOCK)), np.empty((3 * K, _E_BLOCK))
        return _fused_row_terms(
            X,
            None if w.size == 0 else w,
            inv_scale,
            U,
            MU,
            identity,
            c,
            lm1,
            *_strengths(reg, rho),
            P,
            XT,
            nrm,
            W,
            AB,
            GB,
            CB,
            np.empty((5, _E_BLOCK)),
        )
    UT, MUT = np.ascontiguousarray(U.T), np.ascontiguousarray(MU.T)
    total = 0.0
    for lo in range(0, m, _PRODUCT_BLOCK):
        hi = min(lo + _PRODUCT_BLOCK, m)
        # float64 whatever X's dtype
        XT = np.asarray(X[lo:hi], dtype=np.float64).T * inv_scale
        nrm = np.einsum("ji,ji->i", XT, XT)
        part, CB = _projected_block(
            np.dot(UT, XT), np.dot(MUT, XT), nrm, w, lo, hi, identity, c, lm1, reg, rho
        )
        total += part
        P += np.dot(CB, XT.T)
    return total


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _fused_row_terms(
    X, w, inv_scale, U, MU, identity, c, lm1, pairwise, product, P, XT, nrm, W, AB, GB, CB, SB
):
    """:func:`exact_row_terms` for small ``d K``: rows by blocks copied transposed to float64.

    The scratch (``XT`` d x block, ``nrm`` and ``W`` of the block, ``AB``,
    ``GB`` K x block, ``CB`` 3K x block, ``SB`` 5 x block) comes from the
    caller; the row terms run along contiguous memory, and the projections
    and sums are loops (at this size BLAS calls cost more than they save).
    ``w`` None means unit weights (``W`` all ones, left as it is).
    """
    m, d = X.shape
    K = U.shape[1]
    block = XT.shape[1]
    total = 0.0
    for lo in range(0, m, block):
        size = m - lo if m - lo < block else block
        for i in range(size):
            nrm[i] = 0.0
        if w is not None:
            for i in range(size):
                W[i] = w[lo + i]
        for j in range(d):
            for i in range(size):
                # float64 whatever X's dtype, compiled or not (NumPy keeps a
                # float32 scalar times a Python float in float32).
                v = np.float64(X[lo + i, j]) * inv_scale
                XT[j, i] = v
                nrm[i] += v * v
        for k in range(K):
            for i in range(size):
                AB[k, i] = 0.0
                GB[k, i] = 0.0
            for j in range(d):
                u = U[j, k]
                mu = MU[j, k]
                for i in range(size):
                    AB[k, i] += u * XT[j, i]
                    GB[k, i] += mu * XT[j, i]
        total += _block_row_terms(AB, GB, nrm, W, size, identity, c, lm1, pairwise, product, SB, CB)
        for r in range(3 * K):
            for j in range(d):
                acc = 0.0
                for i in range(size):
                    acc += CB[r, i] * XT[j, i]
                P[r, j] += acc
    return total


# Rows per block of moment_sums: its transposed block (d x block float64,
# 32 KiB at d = 16) stays in the first-level cache, where the d (d + 1) / 2
# products read it.
_MOMENT_BLOCK = 256

# Rows per block of exact_row_terms' BLAS path (d K of at least
# _PRODUCT_MIN_WORK) and of projected_row_terms.
_PRODUCT_BLOCK = 4096
_PRODUCT_MIN_WORK = 256


# Rows per block of the mixture E step: the block, transposed, and its scores
# stay in cache, and every loop over the block runs along contiguous memory,
# so that it vectorises.
_E_BLOCK = 256

# exp of the E step's shifted scores x <= 0, written out so that it vectorises
# (libm's exp is a scalar call, the E step's largest cost when it was used):
# x = q ln 2 + r with q = round(x / ln 2), |r| <= ln(2) / 2, exp(r) by its
# Taylor polynomial of degree 13 (truncation below 1e-17 relative) and 2^q
# written into the exponent bits. Below _EXP_FLOOR (exp < 3.3e-308) the
# result is 0. ln 2 rounded to a double is off by 2.3e-17, which puts r off
# by |q| times that: a relative error below (0.5 + 0.035 |x|) 1e-15 on
# [-708, 0] (tested), an absolute error below 1e-17 in any responsibility
# (e^x |x| <= 1 / e). That is where r = x - q ln 2 is one fused multiply-add
# (the kernels' "contract" flag, on a CPU with FMA); without one, q ln 2
# rounds first, off by up to 2^-53 (|x| + 0.35): below (0.6 + 0.15 |x|) 1e-15
# (tested too), under 6e-17 absolute. (A two-part ln 2 would not help: Numba
# compiles the function with the kernel's fast-math flags, which may merge
# the parts.)
_LN2 = 0.6931471805599453
_INV_LN2 = 1.4426950408889634
_EXP_FLOOR = -708.0
# 2^52 + 1023: adding it to an integer-valued q in [-1022, 0] leaves q + 1023
# as the low bits of the double (see mixture_e_step).
_EXPONENT_BIAS = 4503599627371519.0

# Rows whose normalisers z_i (each in [1, K]) are multiplied before one log:
# sum_i log z_i = log prod_i z_i, and K^32 stays finite for any K < 2^31.
_LOG_GROUP = 32


@njit(cache=True)
def _exp_reduced(x):
    """``(exp(r), q)`` with ``x = q ln 2 + r``, for ``_EXP_FLOOR <= x <= 0``.

    The polynomial is exp's Taylor polynomial of degree 13 in Horner form.
    """
    q = np.floor(x * _INV_LN2 + 0.5)
    r = x - q * _LN2
    p = 1.0 / 6227020800.0
    p = 1.0 / 479001600.0 + r * p
    p = 1.0 / 39916800.0 + r * p
    p = 1.0 / 3628800.0 + r * p
    p = 1.0 / 362880.0 + r * p
    p = 1.0 / 40320.0 + r * p
    p = 1.0 / 5040.0 + r * p
    p = 1.0 / 720.0 + r * p
    p = 1.0 / 120.0 + r * p
    p = 1.0 / 24.0 + r * p
    p = 1.0 / 6.0 + r * p
    p = 0.5 + r * p
    p = 1.0 + r * p
    return 1.0 + r * p, q


# NumPy's error model: Z >= 1 is never 0, and Python's model would put a
# check (and a raise) for ZeroDivisionError in the loop that divides by it,
# which then neither vectorises nor compiles as small.
@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _posterior_block(P, m, W, unit, top, Z, bits, powers, counts):
    """Scores to weighted responsibilities, in place, for columns ``0..m-1`` of P.

    Column i of ``P`` (K x block) holds row i's scores ``log pi_k + beta
    <mu_k, x_i>``; it becomes ``W_i softmax_k`` of them (``math.md`` section
    7), ``counts[k]`` gains their sum over the columns, and the function
    returns ``sum_i W_i logsumexp_k``. ``W`` holds the rows' weights (all
    ones when ``unit``); a row no head can take (every score -inf), or of
    zero weight, adds nothing (its column becomes zero). ``top``, ``Z`` and
    ``bits`` (int64) are scratch of at least m entries, ``powers`` the view
    of ``bits`` as float64 (see :func:`_scratch`). Every loop runs
    along a row of P, over contiguous memory, so that it vectorises: the
    maximum, the exponentials (see ``_exp_reduced``), the normalisers, one
    log per ``_LOG_GROUP`` rows for unit weights, the responsibilities.
    """
    K = P.shape[0]
    for i in range(m):
        top[i] = P[0, i]
        Z[i] = 0.0
    for k in range(1, K):
        for i in range(m):
            p = P[k, i]
            top[i] = p if p > top[i] else top[i]
    for i in range(m):
        if top[i] == -np.inf:
            # Its exponentials are all 0: Z stays 1 and its log 0.
            top[i] = 0.0
            W[i] = 0.0
            Z[i] = 1.0
    for k in range(K):
        for i in range(m):
            s = P[k, i] - top[i]
            e, q = _exp_reduced(_EXP_FLOOR if _EXP_FLOOR > s else s)
            P[k, i] = e if s > _EXP_FLOOR else 0.0
            # 2^q: q + 1023 in [1, 1023] is exact in the low bits of
            # q + 1023 + 2^52, shifted into the exponent field (no
            # float-to-integer conversion, which AVX2 lacks).
            bits[i] = np.float64(q + _EXPONENT_BIAS).view(np.int64) << 52
        for i in range(m):
            e = P[k, i] * powers[i]
            P[k, i] = e
            Z[i] += e
    # The log-likelihood, and Z becomes W / Z.
    total = 0.0
    if unit:
        for g in range(0, m, _LOG_GROUP):
            product = 1.0
            for i in range(g, g + _LOG_GROUP if g + _LOG_GROUP < m else m):
                product *= Z[i]
                total += top[i]
                Z[i] = W[i] / Z[i]
            total += np.log(product)
    else:
        for i in range(m):
            if W[i] != 0.0:
                total += W[i] * (top[i] + np.log(Z[i]))
            Z[i] = W[i] / Z[i]
    for k in range(K):
        c = 0.0
        for i in range(m):
            P[k, i] *= Z[i]
            c += P[k, i]
        counts[k] += c
    return total


def mixture_e_step(X, U, log_weights, beta, inv_scale, weights, S, counts):
    """One E step of the equal-norm spherical mixture, accumulated over X.

    ``math.md`` section 7: the responsibility of head k for row x is
    ``softmax_k(log pi_k + beta <mu_k, x / s>)``, a softmax attention of the
    point over the heads. Fills ``S[k] = sum_i w_i r_ik x_i / s`` (K x d) and
    ``counts[k] = sum_i w_i r_ik``, and returns ``sum_i w_i logsumexp_k(log pi_k
    + beta <mu_k, x_i / s>)``, the part of the log-likelihood that depends on
    the heads. ``U`` is d x K, ``s = 1 / inv_scale``; ``weights`` of length 0
    means unit weights. Sums are in float64 whatever X's dtype. One chunk
    of rows: the pass layer (``_passes``) runs chunks on its threads and
    adds their results. Rows go by blocks, copied transposed to float64:
    scores, then :func:`_posterior_block`, then the weighted sums. For
    large ``d K`` the pass layer forms the scores and sums by BLAS instead
    and calls :func:`posterior_columns` (see ``_passes.DenseRows.e_step``).
    """
    K, d = U.shape[1], X.shape[1]
    W, top, Z, bits, powers = _scratch(_E_BLOCK)
    XT, P = np.empty((d, _E_BLOCK)), np.empty((K, _E_BLOCK))
    # The zeroing and the scaling of the sums are NumPy's: loops that Numba
    # would compile for K d numbers.
    S[:] = 0.0
    counts[:] = 0.0
    total = _fused_e_step(
        X, U, log_weights, beta, inv_scale, weights, S, counts, XT, P, W, top, Z, bits, powers
    )
    S *= inv_scale
    return total


def _scratch(m):
    """Scratch of :func:`_posterior_block` for m columns: ``W, top, Z, bits, powers``.

    Allocated here, not in the kernels (see the module's docstring).
    """
    bits = np.empty(m, np.int64)
    return np.empty(m), np.empty(m), np.empty(m), bits, bits.view(np.float64)


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _fused_e_step(
    X, U, log_weights, beta, inv_scale, weights, S, counts, XT, P, W, top, Z, bits, powers
):
    """:func:`mixture_e_step` on scratch buffers (``XT`` d x block, ``P`` K x block, the rest :func:`_scratch`).

    Adds to ``S`` the sums of the unscaled rows (the caller zeroes ``S`` and
    ``counts`` before and scales ``S`` after).
    """
    n, d = X.shape
    K = U.shape[1]
    b = beta * inv_scale
    unit = weights.shape[0] == 0
    total = 0.0
    for lo in range(0, n, _E_BLOCK):
        m = n - lo if n - lo < _E_BLOCK else _E_BLOCK
        for j in range(d):
            for i in range(m):
                XT[j, i] = X[lo + i, j]
        for k in range(K):
            for i in range(m):
                P[k, i] = log_weights[k]
            for j in range(d):
                u = b * U[j, k]
                for i in range(m):
                    P[k, i] += u * XT[j, i]
        for i in range(m):
            W[i] = 1.0 if unit else weights[lo + i]
        total += _posterior_block(P, m, W, unit, top, Z, bits, powers, counts)
        for k in range(K):
            for j in range(d):
                s = 0.0
                for i in range(m):
                    s += P[k, i] * XT[j, i]
                S[k, j] += s
    return total


def posterior_columns(P, log_weights, weights, counts):
    """The E step's softmax on scores formed elsewhere (by BLAS), in place.

    Column i of ``P`` (K x m, float64, C-contiguous) holds ``beta <mu_k,
    x_i / s>``; adds ``log_weights`` and applies :func:`_posterior_block`:
    the column becomes ``w_i softmax_k(log pi_k + beta <mu_k, x_i / s>)``
    (``math.md`` section 7), ``counts[k]`` gains their sum, and the function
    returns ``sum_i w_i logsumexp_k``. ``weights`` of length 0 means unit
    weights.
    """
    m = P.shape[1]
    P += log_weights[:, None]
    W, top, Z, bits, powers = _scratch(m)
    unit = weights.shape[0] == 0
    W[:] = 1.0 if unit else weights
    return _posterior_block(P, m, W, unit, top, Z, bits, powers, counts)


@njit(cache=True, fastmath=FASTMATH, inline="always")
def pair_angle(yj, yk, weight):
    """Angle theta minimising ``sum_i weight_i (a_ij a_ik)^2`` over plane rotations, and the drop.

    After rotating columns j, k by theta, ``a_j a_k = cos(2 theta) p +
    sin(2 theta) q`` with ``p = y_j y_k`` and ``q = (y_k^2 - y_j^2) / 2``, so
    the criterion is the quadratic form ``[[A, B], [B, C]]`` (``A = sum w
    p^2``, ``B = sum w p q``, ``C = sum w q^2``) in ``(cos 2theta, sin
    2theta)``: see :func:`angle_and_drop`. ``weight`` of length 0 means
    unit weights.
    """
    unit = weight.shape[0] == 0
    A = 0.0
    B = 0.0
    C = 0.0
    for i in range(yj.shape[0]):
        p = yj[i] * yk[i]
        q = 0.5 * (yk[i] * yk[i] - yj[i] * yj[i])
        wi = 1.0 if unit else weight[i]
        A += wi * p * p
        B += wi * p * q
        C += wi * q * q
    return _angle_and_drop(A, B, C)


def angle_and_drop(A, B, C):
    """The pair's step from its sums (:func:`pair_angle`): ``(theta, drop)``.

    The quadratic form ``[[A, B], [B, C]]`` in ``(cos 2theta, sin 2theta)``
    is minimised along its eigenvector of smallest eigenvalue, at angle
    ``phi = atan2(-2B, C - A) / 2`` (the Jacobi step of kurtosis-based
    ICA). Returns ``theta = phi / 2``, the smallest such rotation, in
    [-pi/4, pi/4], and the criterion's drop ``A - lambda_min = (A - C) / 2
    + sqrt(((A - C) / 2)^2 + B^2)`` from its value at theta = 0 (A) to its
    minimum (``math.md`` section 3, the spectral start).
    """
    half = 0.5 * (A - C)
    return 0.25 * np.arctan2(-2.0 * B, C - A), half + np.sqrt(half * half + B * B)


# The kernels' form, inlined where they call it; NumPy's forms call the
# Python function above (nothing to compile).
_angle_and_drop = njit(inline="always")(angle_and_drop)


def rotation_criterion(YT, weight, product):
    """The regulariser of the rows of ``Y`` (given as ``YT``, K x n).

    ``sum_i w_i prod_k a_ik^2`` (product) or ``sum_i w_i sum_{j<k} a_ij^2
    a_ik^2 = sum_i w_i (||a_i||^4 - sum_k a_ik^4) / 2`` (pairwise; math.md
    section 3). NumPy: it is called once per sweep, and a kernel of its own
    would be one more compile in a first fit.
    """
    # Beyond float64, inf or NaN without a warning, as the compiled sweeps'.
    with np.errstate(over="ignore", invalid="ignore"):
        sq = YT * YT
        if product:
            return float(weight @ np.prod(sq, axis=0))
        # The fourth powers' sums by einsum: no second K x n temporary.
        return float(weight @ (0.5 * (np.sum(sq, axis=0) ** 2 - np.einsum("ij,ij->j", sq, sq))))


@njit(cache=True, nogil=True)
def rotate_pair(YT, R, j, k, weight, w):
    """One Jacobi step: rows j, k of ``YT`` and columns j, k of ``R`` turned
    by the pair's exact 1-D minimiser (:func:`pair_angle`); returns the angle
    and the regulariser's drop.

    Given a buffer ``w`` (product regulariser), the pair's weights are
    ``weight`` times the other rows' ``prod_m a_m^2``, formed in ``w``;
    with ``w`` None, ``weight`` (Numba prunes the other branch before
    compiling, so the pairwise start compiles only its own). The drop of the
    pair's criterion is the whole regulariser's (``math.md`` section 3): the
    rotation keeps ``a_j^2 + a_k^2``, so the pairs (j, m) and (k, m) of the
    pairwise regulariser keep their sum, and the product's other factors
    are the pair's weights.
    """
    K, n = YT.shape
    yj = YT[j]
    yk = YT[k]
    if w is not None:
        for i in range(n):
            w[i] = weight[i]
        for m in range(K):
            if m != j and m != k:
                for i in range(n):
                    w[i] *= YT[m, i] * YT[m, i]
        theta, drop = pair_angle(yj, yk, w)
    else:
        theta, drop = pair_angle(yj, yk, weight)
    c = np.cos(theta)
    s = np.sin(theta)
    for i in range(n):
        a = yj[i]
        b = yk[i]
        yj[i] = c * a + s * b
        yk[i] = -s * a + c * b
    for i in range(K):
        a = R[i, j]
        b = R[i, k]
        R[i, j] = c * a + s * b
        R[i, k] = -s * a + c * b
    return theta, drop


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def rotate_pairs(YT, R, pairs, weight, w):
    """The Jacobi steps of ``pairs`` (an int64 array of rows ``(j, k)``) in
    turn, each as :func:`rotate_pair`; returns the largest angle and the sum
    of the drops.

    ``weight`` of length 0 means unit weights (pairwise regulariser only).
    With ``w`` None (pairwise regulariser) a step whose next pair shares its
    first head j forms that pair's sums (:func:`pair_angle`'s ``A, B, C``)
    in the loop that turns rows j and k, on the turned values: row j is
    then read once for both, where the pair-by-pair steps read it twice.
    The steps are the same to rounding. With ``w`` (product regulariser)
    each pair is :func:`rotate_pair`.
    """
    K, n = YT.shape
    largest = 0.0
    dropped = 0.0
    if w is not None:
        for t in range(pairs.shape[0]):
            theta, drop = rotate_pair(YT, R, pairs[t, 0], pairs[t, 1], weight, w)
            largest = max(largest, abs(theta))
            dropped += drop
        return largest, dropped
    unit = weight.shape[0] == 0
    A = 0.0
    B = 0.0
    C = 0.0
    summed = False  # whether A, B, C hold the current pair's sums
    for t in range(pairs.shape[0]):
        j = pairs[t, 0]
        yj = YT[j]
        yk = YT[pairs[t, 1]]
        if summed:
            theta, drop = _angle_and_drop(A, B, C)
        else:
            theta, drop = pair_angle(yj, yk, weight)
        largest = max(largest, abs(theta))
        dropped += drop
        c = np.cos(theta)
        s = np.sin(theta)
        k = pairs[t, 1]
        for i in range(K):
            a = R[i, j]
            b = R[i, k]
            R[i, j] = c * a + s * b
            R[i, k] = -s * a + c * b
        summed = t + 1 < pairs.shape[0] and pairs[t + 1, 0] == j
        if summed:
            yn = YT[pairs[t + 1, 1]]
            A = 0.0
            B = 0.0
            C = 0.0
            for i in range(n):
                a = yj[i]
                b = yk[i]
                turned = c * a + s * b
                yj[i] = turned
                yk[i] = -s * a + c * b
                p = turned * yn[i]
                q = 0.5 * (yn[i] * yn[i] - turned * turned)
                wi = 1.0 if unit else weight[i]
                A += wi * p * p
                B += wi * p * q
                C += wi * q * q
        else:
            for i in range(n):
                a = yj[i]
                b = yk[i]
                yj[i] = c * a + s * b
                yk[i] = -s * a + c * b
    return largest, dropped


# Pairs of heads are turned in parallel from this many heads on (pairwise
# regulariser only), in _BLOCKS blocks of heads (see pair_schedule).
_PARALLEL_HEADS = 32
_BLOCKS = 8


def pair_schedule(K, product):
    """The pairs (j, k) of one sweep, as rounds of tasks that touch disjoint heads.

    Each round is a list of tasks, each task a list of pairs; the tasks of
    a round turn disjoint columns, so they may run on different threads in
    any order and give the same result. Below ``_PARALLEL_HEADS`` heads, and
    for the product regulariser (whose pair weights read every other
    column), one task of all pairs in cyclic order. From there on the heads
    are cut into ``_BLOCKS`` blocks: a first round turns the pairs inside
    each block, then the round-robin tournament of the blocks (the circle
    method) turns every pair of blocks once, ``_BLOCKS / 2`` disjoint
    pairings per round (disjoint pairwise steps commute, ``math.md``
    section 3). Within a task the pairs keep the cyclic order, so a
    column stays in cache across its consecutive pairs. The schedule
    depends on K only, never on the number of threads.
    """
    if product or K < _PARALLEL_HEADS:
        return [[[(j, k) for j in range(K - 1) for k in range(j + 1, K)]]]
    edges = np.linspace(0, K, _BLOCKS + 1).astype(np.int64)
    blocks = [range(edges[b], edges[b + 1]) for b in range(_BLOCKS)]
    rounds = [[[(j, k) for j in block for k in block if j < k] for block in blocks]]
    order = list(range(_BLOCKS))
    for _ in range(_BLOCKS - 1):
        pairings = [sorted((order[i], order[-1 - i])) for i in range(_BLOCKS // 2)]
        rounds.append([[(j, k) for j in blocks[a] for k in blocks[b]] for a, b in pairings])
        order = [order[0], order[-1], *order[1:-1]]
    return rounds


# The sweeps' regulariser, tracked by subtracting its pairs' drops, is
# computed anew once it has fallen below this fraction of its last computed
# value (see jacobi_rotation): the tracked value's rounding, some epsilons of
# that computed value per drop subtracted, then stays within 1 / this
# fraction of such epsilons relative to the value itself.
_RECOMPUTE_BELOW = 1e-4


def jacobi_rotation(
    Y, weight, product, max_sweeps, tol, rtol, rotate=rotate_pairs, map_tasks=None, report=None
):
    """Rotation R (K x K) such that ``Y R`` minimises the regulariser, by Jacobi sweeps.

    Sweeps over the pairs of columns (j, k) (:func:`pair_schedule`), each
    rotated by its exact 1-D minimiser (:func:`rotate_pair`, a task of
    pairs at a time by :func:`rotate_pairs`), until the
    largest angle of a sweep is below ``tol`` or, when ``rtol > 0``, a sweep
    lowered the regulariser (:func:`rotation_criterion`) by at most ``rtol``
    of its value: where the criterion is flat in some planes (the noise's
    directions) the angles there stay ill-determined long after the
    criterion has settled. The regulariser is computed once, and again
    whenever it has fallen by a factor ``1 / _RECOMPUTE_BELOW``; each sweep
    lowers it by the sum of its pairs' drops (:func:`rotate_pair`). With
    ``product`` the pair (j, k) is weighted by the other columns' ``prod_m
    a_m^2``; else the pairwise criterion. ``Y`` (n x K, float64) is rotated
    in place. ``rotate`` is a task's steps: :func:`rotate_pairs`, or its
    NumPy form (``_numpy_kernels``) on small data. ``map_tasks(fn, tasks)``
    runs ``fn(*task)`` for each task (a thread pool's map; None: in turn):
    the tasks of a round of the schedule turn disjoint heads. ``report(sweep,
    largest)``, if given, is called after each sweep with its number and
    its largest angle (the progress of a long rotation, under verbose).

    The sweeps are driven from Python, a task per call, and the kernels
    allocate nothing: one kernel that allocated its buffers and ran the
    sweeps itself took longer to compile (part of a first fit's wait, see
    the performance page's "Cold start").
    """
    K = Y.shape[1]
    R = np.eye(K)
    # The columns, copied to rows: each pair's passes run along contiguous memory.
    YT = np.ascontiguousarray(Y.T)
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    # The product regulariser's pair weights (two heads: the pairwise criterion).
    w = np.empty(Y.shape[0]) if product and K > 2 else None
    # Unit weights as an empty array: the pairwise steps then read no weights.
    task_weight = weight[:0] if w is None and np.all(weight == 1.0) else weight
    schedule = [
        [np.array(pairs, dtype=np.int64).reshape(-1, 2) for pairs in tasks]
        for tasks in pair_schedule(K, product)
    ]

    def turn(pairs):
        return rotate(YT, R, pairs, task_weight, w)

    if map_tasks is None:
        map_tasks = lambda fn, tasks: [fn(*t) for t in tasks]  # noqa: E731
    value = computed = rotation_criterion(YT, weight, product) if rtol > 0.0 else 0.0
    for sweep in range(max_sweeps):
        largest = dropped = 0.0
        for tasks in schedule:
            for task_largest, task_dropped in map_tasks(turn, [(pairs,) for pairs in tasks]):
                largest = max(largest, task_largest)
                dropped += task_dropped
        if report is not None:
            report(sweep + 1, largest)
        if largest < tol or (rtol > 0.0 and dropped <= rtol * value):
            break
        value -= dropped
        if value < _RECOMPUTE_BELOW * computed:
            # The drops' sum cancels the value it was subtracted from: its
            # rounding, relative to that value, grows as the regulariser
            # falls (the product regulariser's can fall by ten orders of
            # magnitude), so the value is computed anew.
            value = computed = rotation_criterion(YT, weight, product)
    Y[:] = YT.T
    return R
