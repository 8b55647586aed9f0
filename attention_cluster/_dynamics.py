"""Self-attention dynamics: tokens moved by attention until clusters emerge.

The companion system of the project's sources (Geshkovski, Letrouit,
Polyanskiy and Rigollet, "The emergence of clusters in self-attention
dynamics", NeurIPS 2023; Geshkovski et al., "A mathematical perspective on
transformers", arXiv 2312.10794): a stack of attention layers with fixed
weights read as a flow in time. Formulas are in ``docs/math.md`` section 8.

``attention_flow`` integrates the flow and returns the trajectories;
``SelfAttentionDynamics`` runs it as a clustering estimator whose number of
clusters emerges from the data. The O(n^2 d) work of a step is
``_dynamics_kernels.self_attention`` (Q = K) or ``attention``: blocked
matrix products and a vectorised exponential, on a thread pool; tokens
that have met move on as weighted particles, so that the steps after the
clusters form cost little; tokens wider than twice their number step in
the coordinates of their span where a step is costly (``_span_basis``),
O(n^2 r) for r <= n.
"""

import math
import numbers
import time
from dataclasses import dataclass
from functools import cmp_to_key, partial

import numpy as np
import scipy.sparse as sp
from scipy.linalg import expm
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ._dynamics_kernels import attention, cell_plane, group_tokens, self_attention
from ._passes import (
    dense,
    dense_block,
    left_times,
    row_chunks,
    row_major,
    stored_bytes,
    taken_rows,
    unit_rows,
    usable_threads,
)
from ._scale import gram_factor
from ._validation import (
    DENSE_LIMIT_BYTES,
    InvalidParameterError,
    atomic_fit,
    check_dtypes,
    check_options,
    check_parameter_matrix,
    check_positive,
    check_sample_weight,
    check_verbose,
    gathered,
    metadata_shape,
    peak_unit,
    plain_number,
    quiet_finite_check,
    validate_seed,
    warn,
)

__all__ = ["SelfAttentionDynamics", "attention_flow"]

MODELS = ("sa", "usa", "unnormalized")
SPHERE_MODELS = ("sa", "usa")

# max_samples="auto": the exact dynamics when one step's products, n^2 d
# multiply-adds, are at most _AUTO_WORK (a fit of about ten steps then takes
# seconds); otherwise a subsample whose steps cost at most that, and whose
# tracers' labelling pass, n m d, at most ten steps' worth (benchmarks/
# dynamics.py measures both paths).
_AUTO_WORK = 2e9
_AUTO_MIN_SAMPLES = 1024
# max_samples="auto" for sparse tokens that run in their span: a step on m
# of them costs about m^3, at most this (629 tokens). As much as a step in
# the span on the tokens the dense bound gives at d = 5000 (633): TF-IDF
# documents of 5000 words keep their subsample and time (1259 tokens, at
# 2e9, took 4 times as long to the same choices), and those of 2^20
# features move 629, not 43.
_SPAN_AUTO_WORK = 2.5e8
# Steps of at least this many multiply-adds (m^2 d, about 10 ms) run on the
# tokens' coordinates in their span when d >= 2 m (_span_basis).
_SPAN_MIN_WORK = 1e8
# Tokens closer than this fraction of the grouping radius are carried as one
# weighted particle (docs/math.md section 8): a thousandth of the radius
# moves no token across it, and is far above float32's rounding of tokens
# of norm 1 (6e-8).
_MERGE_FRACTION = 1e-3
_OVERFLOW = (
    "The self-attention dynamics overflowed the floating-point range: a logit "
    "beta <Q x_i, K x_j> (for the unnormalised model, growing as exp(2t)), the "
    "factor Z_i / n of the USA model, or a token left it. Lower beta, the scale "
    "of query and key, or the horizon (number of steps x step_size)."
)


def _weight_matrix(value, name, n_features):
    """``None`` (the identity) or a finite ``(d, d)`` float64 array."""
    if value is None:
        return None
    return check_parameter_matrix(
        value, name, shape=(n_features, n_features), labels=("n_features", "n_features")
    )


def _apply(W, X):
    """Rows of X mapped by W (``x -> W x``); the identity when W is None.

    In X's dtype, but in float64 where float32 rows' products may pass
    float32's range (``d max |x| max |W|`` beyond it: a query of 1e200 on
    unit tokens), as the float64 dynamics forms them; the attention pass
    then runs in float64 (``_dynamics_kernels.attention``)."""
    if W is None:
        return X
    if X.dtype != np.float64 and X.shape[1] * peak_unit(X) * peak_unit(W) > float(
        np.finfo(X.dtype).max
    ):
        return X.astype(np.float64) @ W.T  # (dense or sparse X)
    return X @ W.T.astype(X.dtype, copy=False)


def token_weights(sample_weight, X):
    """The number of tokens each row of X stands for, from its sample weight.

    The weights are validated (``_validation.check_sample_weight``) and
    divided by the smallest positive one: only their ratios count, a row of
    the smallest positive weight is one token and a row of weight w is
    ``w / w_min`` tokens at its place (rounded to the integer within a few
    ulps of it), so integer weights whose smallest is 1 count as repeated
    rows, and a row of weight zero is no token. None (every row one token)
    when the weights are None or all equal.
    """
    weights, _ = check_sample_weight(sample_weight, X)
    if weights is None:
        return None
    positive = weights[weights > 0]
    # At most 2^1000 tokens a row: ratios beyond float64 (a subnormal weight
    # beside ones) count the lightest rows as fractions of a token.
    unit = max(float(np.min(positive)), float(np.max(positive)) * 2.0**-1000)
    weights = weights / unit
    # Ratios within a few ulps of an integer are that integer: c w gives the
    # tokens of w (0.37 w gave 2.0000000000000004 tokens for 2, which a run
    # that never settles amplifies).
    whole = np.rint(weights)
    weights = np.where(
        np.abs(weights - whole) <= 4 * np.finfo(np.float64).eps * weights, whole, weights
    )
    return None if np.all(weights == 1.0) else weights


class _Flow:
    """One Euler step of the dynamics (``docs/math.md`` section 8).

    ``model`` is ``"sa"`` or ``"usa"`` (tokens on the unit sphere) or
    ``"unnormalized"`` (the rescaled tokens ``z = exp(-tV) x`` in R^d);
    ``step_size`` is a time step, or ``"mean-shift"`` for the sphere's
    per-token step ``1 / <x_i, m_i>`` that moves ``x_i`` to ``m_i / |m_i|``.
    """

    def __init__(self, model, beta, step_size, query, key, value, chunk_size, n_threads):
        self.model = model
        self.beta = float(beta)
        self.step_size = step_size
        self.query, self.key, self.value = query, key, value
        self.chunk_size = chunk_size
        self.n_threads = usable_threads(n_threads)
        # The largest move a step's rounding may have made (usa at a numeric
        # step: see _advance), for the caller's warning.
        self.rounding = 0.0
        # The median of h <x_i, m_i> over the tokens at the last numeric step
        # on the sphere (see _advance; None before one), for the advice.
        self.reach = None

    def attention(self, queries, keys, values, log_weights=None):
        """``sum_j P_ij v_j`` and ``log Z_i`` for every query (:func:`_dynamics_kernels.attention`)."""
        return attention(
            queries,
            keys,
            values,
            self.beta,
            log_weights=log_weights,
            block_rows=self.chunk_size,
            n_threads=self.n_threads,
        )

    def self_attention(self, tokens, values, log_weights=None):
        """:meth:`attention` of the tokens over themselves when Q = K, each tile of logits
        computed once (:func:`_dynamics_kernels.self_attention`)."""
        if self.query is None and self.key is None:
            return self_attention(
                tokens,
                values,
                self.beta,
                log_weights=log_weights,
                block_rows=self.chunk_size,
                n_threads=self.n_threads,
            )
        return self.attention(
            _apply(self.query, tokens), _apply(self.key, tokens), values, log_weights
        )

    def _embed(self, Z, t):
        """Tokens whose attention is computed: x = exp(tV) z (unnormalised model), else z."""
        if self.model != "unnormalized" or t == 0:
            return Z
        growth = np.exp(t) * np.eye(Z.shape[1]) if self.value is None else expm(t * self.value)
        return Z @ growth.T.astype(Z.dtype, copy=False)

    def queries_keys(self, Z, t):
        """Queries ``Q x_i`` and keys ``K x_i`` of the tokens Z at time t, in float64."""
        X = self._embed(Z.astype(np.float64, copy=False), t)
        return _apply(self.query, X), _apply(self.key, X)

    def step(self, Z, t, weights=None):
        """Advance the tokens from time t by one step.

        Row j of Z stands for ``weights[j]`` tokens at one place (1 each when
        None): the weighted particles of ``docs/math.md`` section 8. Returns
        the new tokens and ``log Z_i`` of the tokens at time t (for the
        energy and the self-attention of each token). A step that overflows
        (a logit or a token beyond the dtype's range) raises a
        FloatingPointError instead of returning NaN.
        """
        with np.errstate(over="ignore", invalid="ignore"):  # refused below
            Z, log_norm = self._advance(Z, t, weights)
        if not np.all(np.isfinite(Z)):
            raise FloatingPointError(_OVERFLOW)
        return Z, log_norm

    def _advance(self, Z, t, weights):
        """:meth:`step` on the dtype's range, where an overflow gives inf or NaN."""
        X = self._embed(Z, t)
        values = Z if self.model == "unnormalized" else _apply(self.value, X)
        # weights of 1 add log 1 = 0 to every logit: no extra coordinate then
        log_weights = None if weights is None or np.all(weights == 1) else np.log(weights)
        mean, log_norm = self.self_attention(X, values, log_weights)
        if self.model == "unnormalized":
            # dz_i/dt = sum_j P_ij V (z_j - z_i): with V = I a token's distance
            # to its attention mean is multiplied by |1 - h| a step, as the
            # sphere's by |1 - h <x_i, m_i>| (reach; other V: not read).
            if self.value is None:
                self.reach = float(self.step_size)
            return Z + self.step_size * _apply(self.value, mean - Z), log_norm
        if isinstance(self.step_size, str):
            norms = np.linalg.norm(mean, axis=1, keepdims=True)
            # (A float64 mean of float32 tokens, of a float64 pass: _apply.)
            moved = np.where(norms > 0, mean / np.where(norms > 0, norms, 1), Z)
            return moved.astype(Z.dtype, copy=False), log_norm
        if self.model == "usa":
            # Z_i = n instead of sum_j exp(beta <q_i, k_j>)
            n = Z.shape[0] if weights is None else float(np.sum(weights))
            # In float64: the factor passes float32's range long before
            # float64's (e^100 at beta = 100 on unit tokens).
            factor = np.exp(log_norm.astype(np.float64) - math.log(n))
            # The attention mean, rounded to its dtype's epsilon, is scaled by
            # Z_i / n (up to e^beta / n), and the tangent formed by
            # cancellation: the move's rounding grows with that factor.
            self.rounding = max(
                self.rounding,
                float(self.step_size)
                * float(np.max(factor, initial=0.0))
                * float(np.max(np.abs(mean), initial=0.0))
                * float(np.finfo(mean.dtype).eps),
            )
            mean = mean.astype(np.float64) * factor[:, None]
        # h <x_i, m_i>: the Euler step over the mean-shift step 1 / <x_i, m_i>
        # that lands on the attention mean's direction. A token's distance
        # to it is multiplied by about |1 - h <x_i, m_i>|: beyond 1 the step
        # carries the token past it, from 2 on no closer (docs/math.md
        # section 8, "Numeric steps").
        along = np.sum(mean * Z, axis=1, keepdims=True)
        self.reach = _median(self.step_size * along[:, 0], weights)
        tangent = mean - along * Z
        return unit_rows(Z + self.step_size * tangent).astype(Z.dtype, copy=False), log_norm


def _median(values, weights=None):
    """The median of ``values``, each counted ``weights`` times (a particle
    stands for its tokens: ``_Flow.step``); NumPy's median without weights."""
    if weights is None:
        return float(np.median(values))
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64)[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def _lifted(C, given, W):
    """Coordinates C (rows) in the span of the tokens ``given`` as vectors of
    R^d, ``C W^T given`` (:func:`_span_basis`), dense: refused for sparse
    tokens where that passes 1 GiB (clusters of tokens that did not meet,
    one centre per token, at 2^20 features)."""
    size = C.shape[0] * given.shape[1] * 8
    # (Dense tokens hold more than their centres already.)
    if sp.issparse(given) and size > DENSE_LIMIT_BYTES:
        raise ValueError(
            f"The dynamics stopped with {C.shape[0]} clusters, whose centres in "
            f"{given.shape[1]} dimensions would take {size / 2**30:.1f} GiB as a dense array "
            f"(more than {DENSE_LIMIT_BYTES / 2**30:.0f} GiB): most tokens may not have met "
            "(lower beta, or raise max_iter), or reduce the features first "
            "(sklearn.decomposition.TruncatedSVD)."
        )
    return left_times(C @ W.T, given, np.float64)


def _takes_span(flow, m, d):
    """Whether the dynamics of m tokens in R^d runs on the coordinates of
    their span (:func:`_span_basis`)."""
    if flow.model not in SPHERE_MODELS or d < 2 * m or m * m * d < _SPAN_MIN_WORK:
        return False
    return flow.query is None and flow.key is None and flow.value is None


def _stays_sparse(X):
    """Whether sparse rows are read sparse where they run in their span
    (:func:`_span_basis`): at most one entry in 12 stored. Denser ones are
    densified, as their products run faster dense (with half their entries
    stored, the span's sparse products took three times the dense run's
    time; at 5% and below, less)."""
    return sp.issparse(X) and 12 * X.nnz < X.shape[0] * X.shape[1]


def _sparse_in_span(flow, X, m, dtype):
    """Whether m moving tokens of X, read in ``dtype``, run in their span as
    sparse rows: X sparse, the span taken (:func:`_takes_span`), and X
    storing at most one entry in 12 (:func:`_stays_sparse`) or the tokens'
    dense copy passing ``DENSE_LIMIT_BYTES`` (denser rows, which run faster
    densified, where that copy is refused)."""
    if not (sp.issparse(X) and _takes_span(flow, m, X.shape[1])):
        return False
    return _stays_sparse(X) or m * X.shape[1] * dtype.itemsize > DENSE_LIMIT_BYTES


def _auto_subsample(flow, n, d, sparse):
    """``max_samples="auto"``'s subsample of n tokens in R^d, where a step
    on all of them would pass ``_AUTO_WORK``: a step on it, ``m^2 d``, at
    most that, and the tracers' vote, ``n m d``, at most ten steps' worth
    (but for ``_AUTO_MIN_SAMPLES`` tokens). Sparse tokens that run in their
    span (:func:`_takes_span`, :func:`_stays_sparse`) may be more: there a
    step costs about ``m^3`` (the coordinates' products and the span's
    basis),
    at most ``_SPAN_AUTO_WORK``, the vote ``n m^2`` (the tracers'
    coordinates, from their sparse inner products with the tokens), at most
    ten steps of ``_AUTO_WORK``, and the tokens' Gram matrix, a sparse
    product, little beside."""
    m = min(
        n,
        math.isqrt(int(_AUTO_WORK / d)),
        max(_AUTO_MIN_SAMPLES, int(10 * _AUTO_WORK / (n * d))),
    )
    if sparse:
        wide = min(
            n,
            d // 2,
            int(_SPAN_AUTO_WORK ** (1 / 3)),
            math.isqrt(int(10 * _AUTO_WORK / n)),
        )
        if wide > m and _takes_span(flow, wide, d):
            m = wide
    return m


def _span_basis(flow, Z):
    """``(Z64, coordinates, W)``: the m tokens Z in float64 (sparse ones
    stay sparse), and their coordinates in an orthonormal basis of their
    span (:func:`~attention_cluster._scale.gram_factor`: a vector y has the
    coordinates ``(y Z64^T) W``, coordinates e are ``e W^T Z64``), when the
    dynamics may run on them (:func:`_takes_span`); else None.

    With Q = K = V the identity on the sphere, a step moves each token to a
    normalised combination of the tokens, and reads them through their
    inner products alone: the tokens stay in the span of the initial ones,
    and the dynamics of their coordinates is the dynamics of the tokens (an
    isometry; ``docs/math.md`` section 8, "Tokens wider than they are
    many"). A step then costs at most ``m^3`` multiply-adds instead of
    ``m^2 d``, after one product ``Z Z^T`` (half a step's cost; of sparse
    tokens, a sparse product) and its Cholesky factor (an eigendecomposition
    where its factor is ill conditioned): taken when
    ``d >= 2 m`` (rows far wider than there are tokens: TF-IDF documents)
    and a step's ``m^2 d`` is at least ``_SPAN_MIN_WORK``. Below that the
    steps are cheap, and the tokens are kept as given: the coordinates are
    a rotation of them, equal in exact arithmetic only, and a run that
    never settles amplifies the rounding that tells them apart (weighted
    rows and their repeats, or rows in another order, then reach other
    final states).
    """
    if not _takes_span(flow, *Z.shape):
        return None
    Z64 = Z.astype(np.float64, copy=False)
    gram = dense(Z64 @ Z64.T) if sp.issparse(Z64) else Z64 @ Z64.T
    return (Z64, *gram_factor(gram))


def attention_flow(
    X, n_steps, *, model="sa", beta=1.0, step_size=0.1, query=None, key=None, value=None
):
    """Trajectories of the tokens under the self-attention dynamics.

    Explicit Euler steps of (``docs/math.md`` section 8), the rows of X being
    the tokens and Q, K, V the identity unless given:

    - ``"sa"``: ``dx_i/dt = P_perp(x_i) sum_j P_ij V x_j`` on the unit sphere,
      ``P_ij = softmax_j(beta <Q x_i, K x_j>)``; each step is followed by
      renormalisation (as in the authors' ``sphere.py``);
    - ``"usa"``: the same with ``Z_i = n`` in place of the softmax's sum;
    - ``"unnormalized"``: ``dx_i/dt = sum_j P_ij V x_j`` in R^d, returned as
      the rescaled tokens ``z_i = exp(-tV) x_i``, which follow
      ``dz_i/dt = sum_j P_ij V (z_j - z_i)`` with P computed from the x's
      (arXiv 2305.05465).

    Parameters
    ----------
    X : array-like of shape (n_tokens, n_features)
        Initial tokens (projected on the sphere for the sphere models; a
        zero row, which has no direction, takes its attention's mean
        direction at the first step: it attends to all tokens alike, with
        logit 0, and stays zero only where that mean is zero).
    n_steps : int
        Number of steps (layers).
    model : {"sa", "usa", "unnormalized"}, default="sa"
    beta : float, default=1.0
        Inverse temperature.
    step_size : float or "mean-shift", default=0.1
        Time step; ``"mean-shift"`` (sphere models) moves each token to
        ``m_i / |m_i|``: the Euler step of size ``1 / <x_i, m_i>`` followed
        by renormalisation, a blurring mean-shift step. Where ``<x_i, m_i>
        <= 0`` (a token that the others' attention points away from, as with
        V = -I) that size is no step forward in time, and the token still
        moves to ``m_i / |m_i|``: a mean-shift step, not the flow's.
    query, key, value : array of shape (n_features, n_features), default=None
        Q, K, V; ``None`` is the identity.

    Returns
    -------
    trajectory : ndarray of shape (n_steps + 1, n_tokens, n_features)
        The tokens at times ``0, h, ..., n_steps h`` (the rescaled tokens z
        for the unnormalised model), of X's dtype (float32 stays float32; the
        steps run in float64).

    Raises
    ------
    ValueError
        If X is empty, complex, not finite or not 2-D.
    InvalidParameterError
        If a parameter is invalid (a ValueError and a TypeError).
    FloatingPointError
        If a step overflows: a logit ``beta <Q x_i, K x_j>`` beyond float64's
        range, which the unnormalised model reaches after a time of about
        ``log(1e308 / beta) / 2`` with V = I, its tokens growing as ``e^t``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster import attention_flow
    >>> X = np.random.default_rng(0).standard_normal((20, 3))
    >>> path = attention_flow(X, 50, beta=1.0, step_size=0.5)
    >>> path.shape
    (51, 20, 3)
    >>> bool(np.allclose(np.linalg.norm(path, axis=2), 1.0))
    True
    """
    X = check_dtypes(X)
    with quiet_finite_check():
        X = check_array(X, dtype=[np.float64, np.float32], input_name="X")
    n_steps = check_positive(n_steps, "n_steps", numbers.Integral, min_val=0, strict=False)
    flow = _check_flow(
        X.shape, model, beta, step_size, query, key, value, chunk_size=None, n_threads=1
    )
    # The steps run in float64 (the logits' exponentials); the path keeps X's dtype.
    path = np.empty((n_steps + 1,) + X.shape, dtype=X.dtype)
    X = X.astype(np.float64)
    Z = unit_rows(X) if model in SPHERE_MODELS else X
    path[0] = Z
    h = 1.0 if isinstance(step_size, str) else step_size
    for s in range(n_steps):
        Z = flow.step(Z, s * h)[0]
        path[s + 1] = Z
    _warn_rounding(flow)
    return path


def _nearest(C, Z):
    """Index of the closest of the limit points C of moved tokens, ``argmin_k |z -
    c_k|^2``, by the expansion ``|c_k - r|^2 - 2 <z - r, c_k - r>`` about
    the first limit point r.

    The expansion rounds at the magnitude of its terms, ``|c - r|^2``,
    not at that of the differences it compares: about the origin, tokens
    and limit points sharing a coordinate far from zero (1e8 beside a
    spread of 1 between them, or on the sphere, limit points 1e-8 apart)
    had their distances lost in the rounding of ``|c|^2``, and strays
    joined the farther point. About r the terms are of the points'
    spread (``z - r`` is exact where z and r are within a factor of two
    of each other, as in a shared coordinate). Compared at the power of
    two of the largest entry (exact), so that ``z - r`` cannot overflow,
    then at that of the largest difference, whose squares neither
    overflow nor underflow at any magnitude of the tokens or their
    spread.
    """
    C, Z = C.astype(np.float64), Z.astype(np.float64)
    unit = peak_unit(C, Z)
    C, Z = C / unit, Z / unit
    reference = C[0].copy()
    C -= reference
    Z -= reference
    unit = peak_unit(C, Z)
    C, Z = C / unit, Z / unit
    d2 = np.sum(C**2, axis=1)[None, :] - 2 * Z @ C.T
    return np.argmin(d2, axis=1).astype(np.intp)


def counting_dynamics(beta, min_cluster_size, n_threads, random_state):
    """The dynamics that counts clusters for ``n_clusters="auto"`` (``_choose_k``).

    ``SelfAttentionDynamics`` with these options and three switches of its
    own: its warnings' advice names the parameters the caller can set (not
    max_iter and step_size, fixed there); its count alone is read (no
    tracers' vote, no centres in R^d); and the rows are read in float32
    whatever X's dtype (math.md section 8, "The count in float32"): a count
    read at cluster_tol, far above float32's rounding, at half the time of
    a step. From unit rows: a row far below the largest would fall below
    float32's smallest numbers. (The dynamics casts the rows it draws: no
    float32 copy of them all.)
    """
    dynamics = SelfAttentionDynamics(
        beta=beta, min_cluster_size=min_cluster_size, n_threads=n_threads, random_state=random_state
    )
    dynamics._advice_names_steps = False
    dynamics._counts_only = True
    dynamics._token_dtype = np.float32
    return dynamics


def check_min_cluster_size(min_cluster_size):
    """Refuse a ``min_cluster_size`` that is neither an integer >= 1 nor a fraction in (0, 1)."""
    if not isinstance(min_cluster_size, numbers.Real) or isinstance(
        min_cluster_size, (bool, np.bool_)
    ):
        raise InvalidParameterError(
            "min_cluster_size must be an integer >= 1 or a fraction in (0, 1), "
            f"got {min_cluster_size!r}."
        )
    if isinstance(min_cluster_size, numbers.Integral):
        check_positive(
            min_cluster_size,
            "min_cluster_size",
            numbers.Integral,
            min_val=1,
            strict=False,
            float_range=True,
        )
    else:
        check_positive(min_cluster_size, "min_cluster_size")
        if min_cluster_size >= 1:
            raise InvalidParameterError(
                f"min_cluster_size must be an integer or a fraction below 1, got {min_cluster_size!r}."
            )


# A move whose rounding may exceed this (on unit tokens) is warned of.
_MOVE_ROUNDING = 1e-6


def _warn_rounding(flow):
    """Warn when a step's rounding may have moved tokens by more than
    ``_MOVE_ROUNDING`` (``_Flow.rounding``: usa at a numeric step)."""
    if flow.rounding > _MOVE_ROUNDING:
        warn(
            f"model='usa' at a numeric step_size scales each token's attention mean by "
            f"Z_i / n, up to e^beta / n: a step's rounding may have moved tokens by up to "
            f"{flow.rounding:.2g} (on the unit sphere), and the run is not reliable beyond "
            "that. Lower beta or step_size, or take model='sa' or step_size='mean-shift'.",
            UserWarning,
        )


def _check_flow(shape, model, beta, step_size, query, key, value, chunk_size, n_threads):
    # X's shape (a polars DataFrame or an Arrow table, checked before
    # conversion, has a shape and no ndim).
    if len(shape) != 2:
        raise ValueError(f"X must be 2-D (n_tokens, n_features), got shape {shape}.")
    check_options(model, "model", MODELS)
    check_positive(beta, "beta")
    check_positive(step_size, "step_size", also=("mean-shift",))
    if isinstance(step_size, str) and model not in SPHERE_MODELS:
        raise InvalidParameterError(
            'step_size="mean-shift" is a step on the sphere: use model="sa" '
            'or "usa", or pass a numeric step_size (0.1, say) for model="unnormalized".'
        )
    d = shape[1]
    # NumPy scalars as Python numbers (plain_number): an np.int8 chunk_size
    # overflowed the blocks' bounds, and ran another dynamics silently.
    return _Flow(
        model,
        plain_number(beta),
        plain_number(step_size),
        _weight_matrix(query, "query", d),
        _weight_matrix(key, "key", d),
        _weight_matrix(value, "value", d),
        plain_number(chunk_size),
        plain_number(n_threads),
    )


def more_time_advice(increased):
    """The advice of an unsettled run's warning that gives the tokens more
    time to meet: increase the parameters ``increased`` (of ``max_iter`` and
    ``step_size``; none where the caller cannot set them, as
    ``choose_n_clusters``), or lower beta."""
    lower = "lower beta (a coarser resolution, at which tokens meet sooner)."
    if not increased:
        return lower[0].upper() + lower[1:]
    return f"Increase {' or '.join(increased)}, or {lower}"


class SelfAttentionDynamics(ClusterMixin, BaseEstimator):
    """Clustering by self-attention dynamics: the number of clusters emerges.

    The rows of X are tokens that move under attention to each other
    (:func:`attention_flow`, ``docs/math.md`` section 8) until they gather
    into clusters; ``beta`` and the number of steps set the resolution. Along
    the way the estimator records the number of clusters and the interaction
    energy ``E_beta = (1 / (2 beta n^2)) sum_ij exp(beta <Q x_i, K x_j>)``.
    The clusters are metastable: they persist for long times before merging
    (Geshkovski et al., arXiv 2312.10794), so the number of clusters along
    time is a staircase, and the stopping time is chosen on it: the end of
    its longest plateau (``stopping="plateau"``).

    A token joins the first group whose first token lies within
    ``cluster_tol`` of it (Euclidean; relative to the largest initial norm
    for the unnormalised model), the tokens visited in an order of their
    initial places (by increasing projection on their mean), not of the
    rows (once clusters have formed, far apart compared with
    ``cluster_tol``, they are its groups); groups of
    at least ``min_cluster_size`` tokens are the clusters, whose limit
    points are ``cluster_centers_``. Tokens that the dynamics has brought
    within a thousandth of ``cluster_tol`` of each other move on as one
    weighted particle (exact for equal tokens, ``docs/math.md`` section 8),
    so that a step costs O(p^2 d) for p particles left: once clusters
    form, steps are nearly free. A row with a sample weight is such a
    particle from the start (:meth:`fit`). Tokens of smaller groups join
    the limit point nearest to where they stopped (``labels_``); any new
    point is assigned by attention to the limit points, ``argmax_k <Q x, K
    c_k>`` (:meth:`predict`).

    With ``max_samples`` below the number of rows, the dynamics of a random
    subsample of ``max_samples`` tokens is integrated exactly and the other
    rows are passive tracers, labelled once: each joins the cluster that
    its attention to the subsample's initial tokens weighs most (the
    direction of its first step). A step then costs O(max_samples^2 d)
    instead of O(n^2 d), and the tracers one pass of O(n max_samples d).
    By default (``max_samples="auto"``) the dynamics is exact unless a step
    would cost more than a few seconds; the fit then warns and takes a
    subsample.

    Sparse input (CSR, CSC; TF-IDF rows, for instance) is accepted: the
    moving tokens are held densely (the subsample only, under
    ``max_samples``), but where they run in their span (at most half as
    many as the features, ``docs/math.md`` section 8) and X stores at most
    one entry in 12: there they stay sparse, and ``max_samples="auto"``
    moves more of them than of the same rows dense (see ``max_samples``),
    whose fit may then differ. The tracers and new points stay sparse.

    Parameters
    ----------
    model : {"sa", "usa", "unnormalized"}, default="sa"
        ``"sa"``: on the unit sphere with softmax attention (layer
        normalisation; rows of X are projected on the sphere); ``"usa"``:
        the same with the normalisation ``Z_i = n``; ``"unnormalized"``: in
        R^d, through the rescaled tokens ``z = exp(-tV) x`` (arXiv
        2305.05465). With ``step_size="mean-shift"`` (the default) ``"sa"``
        and ``"usa"`` give the same run: each token moves to ``m_i /
        |m_i|``, where the normalisation cancels; they differ at a numeric
        ``step_size``, where usa's moves are sa's times ``Z_i / n``, up to
        ``e^beta / n``: unless ``step_size e^beta / n`` is small the Euler
        steps overshoot (tokens cross each other, and the run follows the
        rows' rounding: float32 and float64 rows part), and a warning says
        when the steps' rounding alone may move tokens by more than 1e-6.
    beta : float, default=10.0
        Inverse temperature: the concentration of the von Mises-Fisher
        kernel in the mean-shift reading. Larger values resolve more,
        smaller clusters.
    step_size : float or "mean-shift", default="mean-shift"
        Euler time step. ``"mean-shift"`` (sphere models) takes the step
        ``1 / <x_i, m_i>`` per token, which moves ``x_i`` to ``m_i / |m_i|``:
        a blurring mean-shift step with a von Mises-Fisher kernel (time is
        then counted in steps; where ``<x_i, m_i> <= 0``, as with V = -I,
        the move is the mean-shift step's, not an Euler step of the flow).
        The unnormalised model needs a number.
    max_iter : int, default=100
        Time horizon, in steps (layers).
    stopping : {"plateau", "horizon"}, default="plateau"
        ``"plateau"``: stop at the end of the longest plateau of the number
        of clusters, counting only the states where most tokens have met
        (groups that hold rows of two places or more, or a place of at least
        twice the mean place's tokens, hold more than half of the tokens;
        rows at one place, repeated or weighted, have otherwise met none),
        from the first of them; the run
        ends early once the current plateau, begun at step s, holds more than
        s states (it is then the longest so far), and takes no step when
        every row is the same (one cluster). ``"horizon"``: run ``max_iter``
        steps and cluster the final state.
    cluster_tol : float, default=1e-2
        Distance under which tokens are one group.
    min_cluster_size : int or float, default=0.01
        Smallest group counted as a cluster: a number of tokens, or a
        fraction of them (float below 1), rounded up to a whole token;
        with ``sample_weight``, tokens as the weights count them (see
        :meth:`fit`). When no group is that large, the largest groups count.
    query, key, value : array of shape (n_features, n_features), default=None
        Q, K, V of the attention; ``None`` is the identity.
    max_samples : int, "auto" or None, default="auto"
        Size of the subsample whose dynamics is integrated; the other rows
        are passive tracers. ``None`` integrates all rows. ``"auto"``
        integrates all rows when one step's products, ``n^2 d``
        multiply-adds, are at most 2e9 (n = 14142 at d = 10; a fit then
        takes seconds), and otherwise warns and draws a subsample of
        ``min(sqrt(2e9 / d), max(1024, 2e10 / (n d)))`` tokens; sparse
        tokens (X storing at most one entry in 12) with at least twice as
        many features as they are many run in their span (``docs/math.md``
        section 8, "Tokens wider than they are many": about ``m^3`` a
        step, and ``n m^2`` for the tracers' vote), of up to ``min(d / 2,
        629, sqrt(2e10 / n))`` tokens (629: the cube root of 2.5e8) where
        that is more. With sparse X, a
        ``ValueError`` is raised before any work when the moving tokens
        would take more than 1 GiB densely (in their span, their m x m Gram
        matrix in float64): pass a smaller ``max_samples``, or reduce the
        features first (``TruncatedSVD``). The fit holds a few arrays of
        the tokens' size besides (their float64 copies among them: about 3
        times that size in float64, 4 in float32).
    chunk_size : int, default=1024
        Most rows of queries per block of the attention products (a task of
        the thread pool); blocks are smaller when the keys are many, so that
        a block's logits stay in cache (512 tokens when Q = K, whose tiles
        of logits serve two blocks).
    n_threads : int or None, default=None
        Threads of the attention products' pool; None: as many as
        :class:`~sklearn.cluster.KMeans` uses by default (the cores this
        process may run on, at most ``OMP_NUM_THREADS`` and threadpoolctl's
        limit). The result does not depend on it.
    random_state : int, RandomState instance or None, default=None
        Draws the subsample.
    verbose : int, default=0
        Print the number of clusters and the energy at each step.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        The cluster each token reached: its group at the stopping step
        (clusters numbered by decreasing size, equal sizes in the order of
        their centres' coordinates); a token in a group smaller than
        ``min_cluster_size``, the limit point nearest to where it stopped;
        beyond ``max_samples`` and for rows of weight zero, the cluster its
        attention to the moving tokens heads for (passive tracers).
        :meth:`predict` on the same rows assigns each row by its attention,
        where it starts, to the limit points, which differs where a
        trajectory ended elsewhere.
    cluster_centers_ : ndarray of shape (``n_clusters_``, n_features)
        The limit points (mean of each cluster's tokens at the stopping
        step, weighted by ``sample_weight``; projected on the sphere for
        the sphere models; rescaled
        tokens z for the unnormalised model), of X's dtype. The sphere
        models step in X's dtype; the unnormalised model steps in float64,
        its logits growing as ``e^{2t}`` (float32's range would end its
        horizon at t ~ 44).
    n_clusters_ : int
    leaders_ : ndarray of int
        Unnormalised model: the tokens that attend to themselves with weight
        above 1/2 at the stopping step, the "leaders" at the vertices of the
        limit polytope when V = I (arXiv 2305.05465), one per vertex. Tokens
        carried as one particle are apart in the unmerged dynamics, where
        the others attend to one of them most: that one is the leader when
        the particle attends to itself, its other tokens aside, above 1/2.
        Tokens at one place from the start (a row of weight above the
        smallest, or repeated rows) are never apart, and each of them
        attends to itself by at most 1 / w: the same rule names their row,
        when the place attends to itself above 1/2 with its other tokens
        aside (as one token would; not when the place's share of their
        attention, its tokens counted, exceeds 1/2). Sorted; empty for the
        sphere models, where the theory names no leaders.
    n_clusters_path_ : ndarray of shape (``n_iter_ + 1``,)
        Number of clusters (groups of at least ``min_cluster_size`` tokens;
        0 while no group is that large) at each step, from the initial
        tokens on.
    energy_path_ : ndarray of shape (``n_iter_``,)
        ``E_beta`` at the start of each step (the subsample's under
        ``max_samples``); it overflows to ``inf`` in the unnormalised model
        once the tokens have grown, and on the sphere where ``Z_i`` passes
        float64, ``e^beta`` and more (beta above about 709).
    stopping_step_ : int
        The step whose state is clustered.
    subsample_indices_ : ndarray of int or None
        Rows whose dynamics was integrated, when a subsample was drawn or
        some rows weigh zero; None when every row moved.
    n_iter_ : int
        Steps taken.
    model_ : str
        The model of the fit, read by :meth:`predict`.
    query_, key_ : ndarray of shape (n_features, n_features) or None
        Q and K of the fit (float64; None for the identity), read by
        :meth:`predict`.
    n_features_in_ : int

    Warns
    -----
    ConvergenceWarning
        With ``stopping="plateau"``, when the run reached ``max_iter``
        without a plateau after tokens met: no tokens met, or fewer than half
        of them (increase ``max_iter`` or a numeric ``step_size``, or lower
        ``beta``: a larger beta resolves finer and keeps tokens apart
        longer), no group reached
        ``min_cluster_size`` (lower it, or give the tokens more time as
        above: groups of a few tokens may still grow), or the groups of the initial tokens
        never changed while some tokens stayed in no cluster. The final
        state is clustered. Tokens all in clusters from the start (tighter
        than ``cluster_tol``) whose clusters persist to ``max_iter`` are
        the answer, without a warning. Also when no count of clusters held
        for two steps once tokens met (a plateau of one state, the state
        taken).

    Examples
    --------
    >>> from attention_cluster import SelfAttentionDynamics
    >>> from attention_cluster.datasets import make_mixture
    >>> X, y, _ = make_mixture(600, n_features=10, n_clusters=3, noise=0.3, random_state=0)
    >>> model = SelfAttentionDynamics(random_state=0).fit(X)
    >>> model.n_clusters_
    3
    """

    def __init__(
        self,
        *,
        model="sa",
        beta=10.0,
        step_size="mean-shift",
        max_iter=100,
        stopping="plateau",
        cluster_tol=1e-2,
        min_cluster_size=0.01,
        query=None,
        key=None,
        value=None,
        max_samples="auto",
        chunk_size=1024,
        n_threads=None,
        random_state=None,
        verbose=0,
    ):
        self.model = model
        self.beta = beta
        self.step_size = step_size
        self.max_iter = max_iter
        self.stopping = stopping
        self.cluster_tol = cluster_tol
        self.min_cluster_size = min_cluster_size
        self.query = query
        self.key = key
        self.value = value
        self.max_samples = max_samples
        self.chunk_size = chunk_size
        self.n_threads = n_threads
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_params(self, shape):
        check_positive(self.max_iter, "max_iter", numbers.Integral, min_val=1, strict=False)
        check_options(self.stopping, "stopping", ["plateau", "horizon"])
        check_positive(self.cluster_tol, "cluster_tol")
        check_min_cluster_size(self.min_cluster_size)
        check_positive(
            self.max_samples,
            "max_samples",
            numbers.Integral,
            min_val=1,
            strict=False,
            also=("auto", None),
        )
        check_positive(self.chunk_size, "chunk_size", numbers.Integral, min_val=1, strict=False)
        check_verbose(self.verbose)
        check_positive(
            self.n_threads, "n_threads", numbers.Integral, min_val=1, strict=False, also=(None,)
        )
        validate_seed(self.random_state)
        return _check_flow(
            shape,
            self.model,
            self.beta,
            self.step_size,
            self.query,
            self.key,
            self.value,
            self.chunk_size,
            self.n_threads,
        )

    @atomic_fit
    def fit(self, X, y=None, sample_weight=None):
        """Run the dynamics from the rows of X and cluster the stopping state.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data: the initial tokens, held in memory (a Dask
            collection is computed, after the weights' length its graph
            shows is checked).
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: a row stands for ``w / w_min`` tokens at
            its place, ``w_min`` the smallest positive weight, carried as
            one weighted particle (``docs/math.md`` section 8, "Weighted
            particles"), so an integer weight acts as repeated rows when
            the smallest is 1. Only their ratios count (to rounding: c w
            may move a ratio that is not a whole number by an ulp, which a
            run that never settles amplifies); equal weights are no weights,
            and a row of weight above the smallest is a group of tokens at
            one place from the start, which has met no other row (the
            plateau rule counts tokens that have met by the groups holding
            rows of two places or more, or a place of at least twice the
            mean place's weight). Rows of weight zero are no tokens: they are labelled
            as passive tracers. Group sizes, ``min_cluster_size``, USA's n
            and the energy count tokens by weight; a subsample
            (``max_samples``) is drawn uniformly from the rows of positive
            weight, which keep their weights.

        Returns
        -------
        self : SelfAttentionDynamics
            Fitted estimator.

        Raises
        ------
        FloatingPointError
            If a step of the dynamics overflows (see :func:`attention_flow`),
            or the unnormalised model's logits at the stopping step; the
            estimator is then left as it was.
        """
        shape = metadata_shape(X)
        if shape is not None and len(shape) == 2:
            # The parameters read X's shape alone: checked before X's copy.
            self._check_params(shape)
        X = gathered(self, X, reset=True, sample_weight=sample_weight)
        with quiet_finite_check():
            X = validate_data(
                self, X, accept_sparse=("csr", "csc"), dtype=[np.float64, np.float32], order="C"
            )
        flow = self._check_params(X.shape)
        weights = token_weights(sample_weight, X)
        return self._run(flow, X, weights, self._subsample_size(flow, X, weights))

    def _subsample_size(self, flow, X, weights):
        """Tokens whose dynamics is integrated (n, the rows of positive weight,
        for the exact dynamics), checked before any work."""
        d = X.shape[1]
        n = X.shape[0] if weights is None else int(np.count_nonzero(weights))
        if self.max_samples is None:
            m = n
        elif self.max_samples == "auto":
            m = n if n * n * d <= _AUTO_WORK else _auto_subsample(flow, n, d, _stays_sparse(X))
            if m < n:
                what = "tokens" if weights is None else "rows of positive weight"
                warn(
                    f"The exact dynamics of {n} {what} in {d} dimensions would take long: "
                    f"integrating a subsample of {m} {what}, the others labelled as passive "
                    "tracers. Set max_samples=None for the exact dynamics, or an integer to "
                    "choose the subsample."
                )
        else:
            m = min(n, int(self.max_samples))
        if sp.issparse(X):
            # Sparse input densifies its moving tokens, but where they run in
            # their span (_stays_sparse): their m x m Gram matrix and
            # coordinates, in float64.
            # (The unnormalised model steps in float64: its logits grow as e^{2t}.)
            dtype = self._read_dtype(X)
            itemsize = 8 if self.model == "unnormalized" else dtype.itemsize
            span = _sparse_in_span(flow, X, m, dtype)
            size = m * m * 8 if span else m * d * itemsize
            if size > DENSE_LIMIT_BYTES and size > stored_bytes(X):
                held = f"their {m} x {m} Gram matrix" if span else "a dense array"
                raise ValueError(
                    f"The {m} moving tokens would take {size / 2**30:.1f} GiB as {held} "
                    f"(more than {DENSE_LIMIT_BYTES / 2**30:.0f} GiB): pass a smaller "
                    "max_samples (the other rows stay sparse, as passive tracers), or reduce "
                    "the features first (sklearn.decomposition.TruncatedSVD)."
                )
        return m

    def _read_dtype(self, X):
        """The dtype the rows are read in: ``_token_dtype``, X's own when None."""
        return X.dtype if self._token_dtype is None else np.dtype(self._token_dtype)

    def _run(self, flow, X, weights, m):
        on_sphere = self.model in SPHERE_MODELS
        n = X.shape[0]
        dtype = self._read_dtype(X)
        sparse_in_span = _sparse_in_span(flow, X, m, dtype)
        rng = check_random_state(self.random_state)
        drawn = _MovingRows.drawn(X, weights, m, dtype, rng)
        tokens = _Tokens.placed(flow, drawn, n, on_sphere, sparse_in_span, dtype)
        weights = tokens.weights
        # The number of tokens: rows count by their weight (token_weights).
        n_tokens = tokens.Z.shape[0] if weights is None else float(np.sum(weights))
        min_size = self._min_size(n_tokens)
        # (All-zero rows, of no spread: any positive radius groups them.)
        largest = 1.0 if on_sphere else _largest_norm(tokens.Z)
        radius = self.cluster_tol * (largest if largest > 0.0 else 1.0)
        h = 1.0 if isinstance(self.step_size, str) else float(self.step_size)
        state = _Particles.of(tokens.Z, radius * _MERGE_FRACTION, weights)
        steps = self._steps(flow, state, radius, min_size, n_tokens, h)
        self._warn_stop(flow, steps, radius, min_size, n_tokens)
        self.stopping_step_ = steps.saved[0]
        self.subsample_indices_ = drawn.active
        self.model_ = self.model
        # Copies: the caller's Q and K may change after the fit.
        self.query_, self.key_ = (
            None if M is None else np.array(M) for M in (flow.query, flow.key)
        )
        # The limit points of coordinates in the span, back in R^d (not for
        # a count alone, _counts_only: they stay in the span's coordinates).
        lift = None
        if tokens.span is not None and not self._counts_only:
            given, _, W = tokens.span
            lift = partial(_lifted, given=given, W=W)
        centers, token_labels, leaders = self._clusters(
            flow,
            steps.saved[1],
            radius,
            min_size,
            self.stopping_step_ * h,
            drawn.X.dtype,
            weights,
            tokens.token_rows,
            lift,
        )
        labels = np.full(n, -1, dtype=np.intp)  # (-1: tracers not voted, _counts_only)
        labels[tokens.token_rows] = token_labels
        if drawn.active is not None and not self._counts_only:
            labels[drawn.passive] = self._vote(
                flow,
                drawn.given_rows,
                drawn.passive,
                tokens.read_tracers,
                tokens.Z,
                token_labels,
                len(centers),
                weights,
            )
        self.cluster_centers_ = centers
        self.n_clusters_ = len(centers)
        self.labels_ = labels
        self.leaders_ = leaders
        self.n_clusters_path_ = np.asarray(steps.counts, dtype=np.intp)
        self.energy_path_ = np.asarray(steps.energies, dtype=np.float64)
        self.n_iter_ = steps.n_iter
        return self

    def _min_size(self, n_tokens):
        """``min_cluster_size`` as a number of the ``n_tokens`` tokens."""
        if isinstance(self.min_cluster_size, numbers.Integral):
            return int(self.min_cluster_size)
        # Rounded up, but not over the product's rounding (0.07 x 100 is
        # 7.000000000000001: groups of 7 tokens count).
        share = self.min_cluster_size * n_tokens
        return max(1, math.ceil(share * (1.0 - 4.0 * np.finfo(np.float64).eps)))

    def _steps(self, flow, state, radius, min_size, n_tokens, h):
        """The dynamics' steps from the particles ``state``, counted after each
        (:class:`_Steps`): to the end of the longest plateau, or to the
        horizon."""
        # The unnormalised model names leaders: merged particles keep the token
        # that leads them (_Particles.moved), chosen by attention at the time reached.
        leads = self.model == "unnormalized"
        # A place carrying at least this many tokens is a group on its own
        # (_met_share): twice the places' mean weight (equal rows merged).
        heavy = 2.0 * float(np.mean(state.weights))
        counts = [_count(state.Z, radius, min_size, state.weights, state.plane)[0]]
        energies = []
        best = _Plateau()
        saved = (0, state)
        run_start, n_iter = 0, 0
        was_met = True  # a plateau begins at the first state where most tokens met
        # Every token at one place from the start (all rows the same): one
        # particle, which moves as one, so one cluster at every step and the
        # plateau rule has settled at the initial state.
        settled = self.stopping == "plateau" and len(state.Z) == 1
        started = time.perf_counter()
        for s in range(0 if settled else self.max_iter):
            Z, log_norm = _step_in_order(flow, state, s * h)
            energies.append(_energy(log_norm, self.beta, state.weights))
            state = state.moved(Z, partial(flow.queries_keys, t=(s + 1) * h) if leads else None)
            count, groups, sizes = _count(state.Z, radius, min_size, state.weights, state.plane)
            n_iter = s + 1
            if count != counts[-1] or not was_met:
                run_start = n_iter
            counts.append(count)
            if self.verbose:
                print(
                    f"[SelfAttentionDynamics] step {n_iter}: {count} clusters, "
                    f"{len(state.Z)} particles, energy before the step {energies[-1]:.6g}, "
                    f"{time.perf_counter() - started:.1f} s"
                )
            # A plateau counts once tokens have met: some group reaches
            # min_size, and most tokens are in groups that hold two rows of
            # different places or more, or a heavy place (_met_share: rows
            # at one place, a weighted row or repeated rows, have otherwise
            # met no other). (Counting
            # every group of min_size, one token when a fraction of 100
            # tokens or fewer rounds up to it, a state where few had met was
            # a plateau: 2-D rows, whose tokens on the circle start close,
            # stopped at the second step with 27 "clusters" of 30.) It
            # begins at the first such state.
            met = 0 < count < n_tokens and 2.0 * _met_share(state, groups, sizes, heavy) > n_tokens
            was_met = met
            if run_start > 0 and met and best.offer(run_start, n_iter):
                saved = (n_iter, state)
            if (
                self.stopping == "plateau"
                and run_start > 0
                and met
                and n_iter - run_start + 1 > run_start
            ):
                settled = True
                break
        if self.stopping == "horizon" or best.length == 0:
            saved = (n_iter, state)
        return _Steps(counts, energies, saved, n_iter, settled, best.length, state, heavy)

    def _warn_stop(self, flow, steps, radius, min_size, n_tokens):
        """The warnings of how the steps stopped: no plateau (the last state
        kept), a longest plateau of one state, rounding, an overshoot."""
        if self.stopping == "plateau" and not steps.settled:
            if steps.longest == 0:
                self._warn_unsettled(
                    steps.counts, steps.last, radius, min_size, n_tokens, steps.heavy, flow
                )
            else:
                if self.verbose:
                    print(
                        "[SelfAttentionDynamics] horizon reached; longest plateau ends at "
                        f"step {steps.saved[0]}"
                    )
                if steps.longest == 1:
                    self._warn_one_state(steps.counts[steps.saved[0]], steps.saved[0], flow)
        _warn_rounding(flow)
        self._warn_overshoot(flow)

    # Whether the caller set max_iter and step_size, which the warnings'
    # advice then names (not where the dynamics runs inside another
    # function: _choose_k's).
    _advice_names_steps = True
    # Whether the fit stops at the count: _choose_k reads n_clusters_, its
    # path and subsample_indices_ alone, so the passive tracers are not
    # voted (labels_ -1) and the centres stay in the span's coordinates
    # (in R^d they are n_clusters_ x d, dense: 5 GB for 629 tokens apart
    # at 2^20 features).
    _counts_only = False
    # The dtype the rows are read in, X's own when None: the fit is that of
    # X in this dtype, cast as the rows are drawn (the moving tokens once,
    # the passive tracers chunk by chunk), so that a subsample has no copy
    # of all the rows in it. _choose_k counts on float64 unit rows in
    # float32 (math.md section 8, "The count in float32"): 633 of 2000
    # TF-IDF documents move, where a float32 copy of all 2000 took 40 MB.
    _token_dtype = None

    def _lengthening(self, flow):
        """The parameters whose increase gives the tokens more time to meet:
        ``max_iter``, and ``step_size`` where it is a number short of the
        mean-shift step (``flow.reach`` below 1, or the unnormalised
        model's: a longer step past it meets later, :meth:`_warn_overshoot`);
        none where the caller cannot set them (``_advice_names_steps``)."""
        if not self._advice_names_steps:
            return ()
        longer = not isinstance(self.step_size, str) and (flow.reach is None or flow.reach < 1.0)
        return ("max_iter",) + (("step_size",) if longer else ())

    def _warn_overshoot(self, flow):
        """Warn where the numeric step passes the attention means so far that
        the run may not settle (``docs/math.md`` section 8, "Numeric steps";
        SA steps of 1.98 to 2 counted 16 to 39 clusters of 3 with no other
        warning): to first order a token's distance to its attention mean is
        multiplied by ``c = |1 - h <x_i, m_i>|`` a step on the sphere
        (``|1 - h|`` for the unnormalised model with V = I; ``flow.reach``,
        the median of ``h <x_i, m_i>`` at the last step), and from 1 down to
        ``cluster_tol`` that takes ``log(cluster_tol) / log(c)`` steps: more
        than ``max_iter`` past the mean-shift step (``h <x_i, m_i>`` above
        1), or ever from 2 on (SA at ``step_size >= 2``, whose ``<x_i, m_i>``
        tends to 1). Counted from 1, not from the tokens' first distance to
        their attention means (tiny at a high beta or in high dimension,
        where tokens attend mostly to themselves, it hid runs that counted 12
        clusters of 5): runs that settle sooner are warned of too (h = 1.8
        at ``max_iter=20`` counted 3)."""
        if flow.reach is None or flow.reach <= 1.0:
            return
        factor = flow.reach - 1.0
        # SA's <x_i, m_i> tends to 1 as tokens gather: from h = 2 on, none
        # closer (its median at the last step may read just below 2).
        if factor < 1.0 and not (flow.model == "sa" and self.step_size >= 2.0):
            steps = math.log(self.cluster_tol) / math.log(factor)
            if steps <= self.max_iter:
                return
            outcome = (
                f"from 1 down to cluster_tol={self.cluster_tol!r} takes about {steps:.0f} "
                f"steps, more than max_iter={self.max_iter}: the run may not settle"
            )
        else:
            outcome = "they come no closer: they cannot meet"
        if flow.model in SPHERE_MODELS:
            tends = "; it tends to h as tokens gather" if flow.model == "sa" else ""
            rate = (
                f"|1 - h <x_i, m_i>| = {factor:.3g} a step (h <x_i, m_i> was {flow.reach:.3g} "
                f"in the median at the last step{tends})"
            )
            lower = (
                "Lower step_size (the mean-shift step, 1 / <x_i, m_i>, moves a token onto its "
                "attention mean's direction), or take step_size='mean-shift'."
            )
        else:
            rate = f"|1 - h| = {factor:.3g} a step"
            lower = "Lower step_size (1 moves a token onto its attention mean)."
        warn(
            f"step_size={self.step_size!r} carries tokens past their attention means: a "
            f"token's distance to its attention mean is multiplied by about {rate}, and "
            f"{outcome}, and the clusters counted may not be the data's. {lower}",
            UserWarning,
        )

    def _warn_one_state(self, count, step, flow):
        """The ConvergenceWarning of a run whose count of clusters held for no
        two steps once tokens met: its longest "plateau", one state, is no
        plateau (a count that rises and falls, tokens crossing each other at a
        numeric step, took one state's 33 clusters of 3 as its answer)."""
        warn(
            f"No number of clusters held for two steps once tokens met, within "
            f"max_iter={self.max_iter} steps: no plateau, and the state taken, {count} "
            f"clusters at step {step}, held for one. "
            + more_time_advice(self._lengthening(flow)[:1])
            + (
                ""
                if isinstance(self.step_size, str)
                else " A count that rises and falls from step to step comes of a "
                "step_size too large (tokens cross each other): lower it."
            ),
            ConvergenceWarning,
        )

    def _warn_unsettled(self, counts, state, radius, min_size, m, heavy, flow):
        """The ConvergenceWarning of a plateau rule that found no plateau after tokens met.

        Tokens grouped from the start (one feature, clusters tighter than
        ``cluster_tol``) whose count never changed met before the run, so the
        rule saw no plateau begin; the whole run is then one plateau. When
        its final state has every token in a cluster, that state is the
        answer and nothing is said. Stopping at once, as for equal rows,
        would not do: tokens at one place provably stay one cluster, while
        groups apart may still merge (and tokens grouped by duplicated rows
        may not be clusters yet); the steps are cheap once each group has
        merged into one particle. Otherwise the message names what gives the
        tokens more time to meet: beta sets the resolution, and a larger one
        keeps tokens apart longer.
        """
        _, groups, sizes = _count(state.Z, radius, 1, state.weights, state.plane)
        tokens = _count_text(m)
        # A plateau counts once most tokens have met (_met_share).
        paired = _met_share(state, groups, sizes, heavy)
        more_time = more_time_advice(self._lengthening(flow))
        grouped = 0 < counts[0] < m and min(counts) == max(counts)
        # Every group counted, and of two tokens or more (rows at one place
        # are a cluster from the start): the answer (sums of weights in two
        # orders differ by their rounding, so the groups are compared, not
        # sums).
        if grouped and np.all(sizes >= max(min_size, 2)):
            return
        if grouped and 2.0 * paired > m:
            clustered = float(np.sum(sizes[sizes >= max(min_size, 2)]))
            message = (
                f"The number of clusters stayed at {counts[0]}, the groups of the initial "
                f"tokens, for max_iter={self.max_iter} steps, with {m - clustered:g} of the "
                f"{tokens} tokens in no cluster: the final state is clustered. {more_time}"
            )
        elif max(counts) == 0 and sizes.max() > 1:
            # Tokens met, in groups all below the size that counts.
            message = (
                f"No group of tokens reached min_cluster_size={self.min_cluster_size!r} "
                f"({_count_text(min_size)} of the {tokens} tokens; the largest holds {sizes.max():g}) within "
                f"max_iter={self.max_iter} steps: the final state is clustered. Lower "
                + (
                    "min_cluster_size, which no group of the tokens can reach."
                    if min_size > m
                    else f"min_cluster_size, or give the tokens more time to meet: {more_time}"
                )
            )
        else:
            met = (
                "No tokens met"
                if paired == 0.0
                else f"Fewer than half of the {tokens} tokens met (groups of rows of two places "
                "or more, or holding a place of twice the mean place's tokens, hold "
                f"{paired:g}; a plateau counts once most have)"
            )
            message = (
                f"{met} within max_iter={self.max_iter} steps: the final state is "
                f"clustered. {more_time}"
            )
        warn(message, ConvergenceWarning)

    def _clusters(
        self, flow, particles, radius, min_size, t, dtype, weights, token_rows, lift=None
    ):
        """Clusters of the stopping particles: ``(centres, labels, leaders)``,
        the centres of ``dtype``, the tokens' labels in the particles' order
        of tokens.

        ``weights``: the tokens each of the particles' tokens stands for
        (None: one each), by which the groups are sized and the centres
        averaged; ``token_rows``: the row of X of each of them; ``lift``:
        the map of the particles' coordinates to R^d (``_span_basis``;
        None: they are in R^d), applied to the centres before they are
        numbered, so that the numbering is the tokens' own.
        """
        Z = particles.tokens()
        _, groups, sizes = _count(Z, radius, min_size, weights)
        kept = np.flatnonzero(sizes >= min(min_size, sizes.max()))
        centers = np.stack(
            [
                np.average(
                    Z[groups == g].astype(np.float64),
                    axis=0,
                    weights=None if weights is None else weights[groups == g],
                )
                for g in kept
            ]
        )
        if self.model in SPHERE_MODELS:  # zero tokens (zero rows) keep a zero centre
            norms = np.linalg.norm(centers, axis=1, keepdims=True)
            centers /= np.where(norms > 0, norms, 1)
        # In R^d (unit rows: the span's basis is orthonormal).
        shown = centers if lift is None else unit_rows(lift(centers))
        # Numbered by decreasing size, equal sizes by their centres'
        # coordinates: an order that does not depend on the rows' order.
        order = _size_then_coordinates(sizes[kept], shown)
        kept, centers, shown = kept[order], centers[order], shown[order]
        rank = np.full(len(sizes), -1, dtype=np.intp)
        rank[kept] = np.arange(len(kept))
        labels = rank[groups]
        stray = labels < 0
        if np.any(stray):
            # The nearest of the particles' own centres (in their coordinates).
            labels[stray] = _nearest(centers.astype(dtype), Z[stray])
        leaders = (
            self._leaders(flow, particles, t, token_rows)
            if self.model == "unnormalized"
            else np.empty(0, dtype=np.intp)
        )
        return shown.astype(dtype), labels, leaders

    def _vote(self, flow, rows, passive, read_tracers, Z0, labels, n_clusters, weights):
        """Cluster of each passive tracer, the rows ``passive`` of ``rows``:
        ``argmax_k sum_{j in cluster k} P_ij``.

        ``P_ij`` is the tracer's attention to the subsample's initial tokens
        (``docs/math.md`` section 8, at time 0; row j standing for
        ``weights[j]`` tokens, the weighted softmax of "Weighted
        particles"): the cluster its first step heads for, by the weight of
        the tokens pulling it. One attention pass with the clusters'
        indicators as values, by chunks of tracers (``read_tracers``: as the
        tokens are, on the sphere, in their dtype and their span's
        coordinates), so that the tracers' copies and attention are a
        chunk's.
        """
        indicators = np.eye(n_clusters, dtype=Z0.dtype)[labels]
        keys = _apply(flow.key, Z0)
        log_weights = None if weights is None else np.log(weights)
        votes = np.empty(len(passive), dtype=np.intp)
        for lo, hi in row_chunks(len(passive), max(rows.shape[1], n_clusters)):
            tracers = read_tracers(rows[passive[lo:hi]])
            queries = (
                tracers
                if flow.query is None
                else _apply(flow.query, dense_block(tracers, tracers.dtype))
            )
            weight, _ = flow.attention(queries, keys, indicators, log_weights)
            votes[lo:hi] = np.argmax(weight, axis=1)
        return votes

    def _leaders(self, flow, particles, t, token_rows):
        """Rows of the tokens attending to themselves above 1/2 at time t
        (``docs/math.md`` section 8); ``token_rows[i]``: token i's row of X.

        Decided per particle p of weight w_p, by its lead token i
        (:class:`_Particles`), whose attention to itself is

            P_ii = 1 / (1 + sum_{q != p} w_q exp(l_pq - l_pp)),   l_pq = beta <Q x_p, K x_q>:

        the other tokens of p, carried at p's place, are apart from i in the
        unmerged dynamics, their logits below i's by ``beta <Q x_i, K (x_i -
        x_j)>``, which grows as ``e^{2t}``. So P_ii > 1/2 when
        ``log sum_{q != p} w_q exp(l_pq - l_pp) < 0``: differences of logits,
        which decide where the logits themselves (``beta e^{2t} |z|^2`` for
        V = I, about 1e20 at t = 20 for beta = 10 and |z| = 5) round by more
        than log 2. One leader per particle, however many tokens it carries.
        """
        queries, keys = flow.queries_keys(particles.Z, t)
        log_weights = np.log(particles.weights)
        p = len(log_weights)
        with np.errstate(over="ignore", invalid="ignore"):
            self_logits = flow.beta * np.sum(queries * keys, axis=1)
            if not np.all(np.isfinite(self_logits)):
                raise FloatingPointError(_OVERFLOW)
            leading = np.empty(p, dtype=bool)
            for lo, hi in row_chunks(p, p):
                rows = np.arange(hi - lo)
                gaps = flow.beta * (queries[lo:hi] @ keys.T) - self_logits[lo:hi, None]
                gaps += log_weights
                gaps[rows, lo + rows] = -np.inf
                leading[lo:hi] = logsumexp(gaps, axis=1) < 0
        return np.sort(token_rows[particles.lead[leading]])

    def predict(self, X):
        """Cluster of each row by attention to the limit points.

        ``argmax_k softmax_k(beta <Q x, K c_k>) = argmax_k <Q x, K c_k>`` for
        the limit points ``c_k = cluster_centers_`` (rows projected on the
        sphere for the sphere models), with the model, Q and K of the fit
        (``model_``, ``query_``, ``key_``).

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data (a Dask collection is computed, after the width its
            graph shows is checked).

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = gathered(self, X, reset=False)
        with quiet_finite_check():
            X = validate_data(
                self,
                X,
                accept_sparse=("csr", "csc"),
                dtype=[np.float64, np.float32],
                order="C",
                reset=False,
            )
        # <Q x, K c_k> = <x, Q^T K c_k>: the keys mapped back by Q^T
        keys = _apply(self.key_, self.cluster_centers_.astype(np.float64))
        keys = keys if self.query_ is None else keys @ self.query_
        labels = np.empty(X.shape[0], dtype=np.intp)
        # By chunks of rows (of CSR rows: slicing CSC rows reads all of X):
        # the unit rows and their float64 copy are a chunk's.
        X = row_major(X)
        for lo, hi in row_chunks(X.shape[0], X.shape[1]):
            queries = X[lo:hi]
            if self.model_ in SPHERE_MODELS:
                queries = unit_rows(queries)
            labels[lo:hi] = np.argmax(queries.astype(np.float64) @ keys.T, axis=1)
        return labels


def _size_then_coordinates(sizes, centres):
    """Indices of the centres by decreasing size, equal sizes by their
    coordinates (lexicographically, increasing), full ties by index:
    ``np.lexsort((*centres.T[::-1], -sizes))``'s order, without its key per
    coordinate (2.8 GB of NumPy's iterators at 2^20 features)."""

    def compare(i, j):
        if sizes[i] != sizes[j]:
            return -1 if sizes[i] > sizes[j] else 1
        differ = np.flatnonzero(centres[i] != centres[j])
        if differ.size == 0:
            return -1 if i < j else int(i > j)
        first = differ[0]
        return -1 if centres[i, first] < centres[j, first] else 1

    return np.array(sorted(range(len(sizes)), key=cmp_to_key(compare)), dtype=np.intp)


@dataclass
class _MovingRows:
    """The rows that move (the tokens, in the dtype they are read in) and
    the passive tracers: ``active`` and ``passive`` are their indices in X
    (None where every row moves), ``given_rows`` X as the tracers' vote
    reads it, ``owned`` whether ``X`` is a copy of the caller's rows."""

    X: object
    weights: object
    active: object
    passive: object
    given_rows: object
    owned: bool

    @classmethod
    def drawn(cls, X, weights, m, dtype, rng):
        """Of X's rows, ``m`` drawn by ``rng`` to move where more may (rows of
        positive weight), every one otherwise."""
        n = X.shape[0]
        # The rows that may move: those of positive weight (rows of weight
        # zero are passive tracers, as the rows left out of a subsample).
        moving = None if weights is None else np.flatnonzero(weights)
        n_moving = n if moving is None else len(moving)
        if m < n_moving:
            drawn = rng.choice(n_moving, m, replace=False)
            active = np.sort(drawn if moving is None else moving[drawn])
        else:
            active = None if n_moving == n else moving
        # The passive tracers are read from the rows as given, by chunks, at
        # their vote (:meth:`_vote`): a sparse X stays sparse, and no copy
        # of them all is made.
        given_rows = passive = None
        if active is not None:
            given_rows = row_major(X)
            # (A mask, not setdiff1d: its sorts held four arrays of n indices.)
            is_passive = np.ones(n, dtype=bool)
            is_passive[active] = False
            passive = np.flatnonzero(is_passive)
            # The moving rows in the dtype they are read in (_token_dtype;
            # the passive tracers are cast chunk by chunk at their vote).
            X = taken_rows(X, active, dtype)
            weights = None if weights is None else weights[active]
        owned = active is not None
        if X.dtype != dtype:
            X, owned = X.astype(dtype), True
        return cls(X, weights, active, passive, given_rows, owned)


@dataclass
class _Tokens:
    """The moving rows as the steps take them: ``Z`` (unit rows on the
    sphere, their coordinates in their span where they run there), in an
    order of their places, ``token_rows`` their rows in X, ``weights``
    theirs, ``span`` (:func:`_span_basis`) and ``read_tracers`` (how the
    vote reads a chunk of tracers)."""

    Z: object
    token_rows: object
    weights: object
    span: object
    read_tracers: object

    @classmethod
    def placed(cls, flow, drawn, n, on_sphere, sparse_in_span, dtype):
        X, weights = drawn.X, drawn.weights
        # The sphere models' logits stay within beta |Q| |K|: they step in X's
        # dtype (float32 is faster). The unnormalised model's grow as e^{2t}
        # and leave float32's range at t ~ 44: it steps in float64, so that its
        # horizon is float64's (attention_flow's Raises), and its results take
        # X's dtype. (A copy of the moving rows made here becomes their unit
        # rows in place.)
        Z = unit_rows(X, copy=not drawn.owned) if on_sphere else X.copy()
        if sparse_in_span:
            # Sparse tokens stay sparse where they run in their span, which
            # reads them through their inner products (a token of
            # HashingVectorizer's 2^20 features takes 8 MB densely), stored
            # alike however X stored them (their sums then round alike).
            Z.sum_duplicates()
            Z.eliminate_zeros()
        else:
            Z = dense_block(Z, X.dtype if on_sphere else np.float64)
        # The tokens are ordered by their places in R^d, as given (the
        # span's coordinates, a Cholesky factor or an eigenbasis, round as
        # the rows' order has it).
        # (Before the span's float64 tokens are formed: the order's float64
        # copy and theirs are not held at once.)
        order = _place_order(Z, weights)
        span = _span_basis(flow, Z)
        # How a chunk of tracers is read at the vote (see _vote).
        read_tracers = _TracerReader(on_sphere, dtype, Z.dtype)
        if span is not None:
            # The tokens by their coordinates in the span of the initial
            # ones, and the tracers by those of their projection on it
            # (their inner products with the tokens, all their vote reads).
            given, coordinates, W = span
            read_tracers = _TracerReader(on_sphere, dtype, Z.dtype, given, W)
            Z = np.ascontiguousarray(coordinates, dtype=Z.dtype)
        # token_rows[i]: the row of X of token i.
        token_rows = np.arange(n) if drawn.active is None else drawn.active
        # The tokens in an order of their places, not of the rows.
        Z, token_rows = np.ascontiguousarray(Z[order]), token_rows[order]
        weights = None if weights is None else weights[order]
        return cls(Z, token_rows, weights, span, read_tracers)


@dataclass
class _Steps:
    """What the steps left: the count after each (``counts``, the initial
    state's first) and the energy before each, ``saved`` ``(step, state)``
    (the end of the longest plateau, or the last state), the steps taken,
    whether the plateau rule settled, the longest plateau's length, the last
    state and the weight of a heavy place (:func:`_met_share`)."""

    counts: list
    energies: list
    saved: tuple
    n_iter: int
    settled: bool
    longest: int
    last: object
    heavy: float


class _TracerReader:
    """A chunk of passive tracers as the tokens are read (``_vote``): in the
    dtype the rows are read in (``read_dtype``: ``_token_dtype``'s), unit
    rows on the sphere, in the tokens' dtype (float32 rows of the
    unnormalised model overflowed in their own), and, where the dynamics
    runs in the span of the tokens (``_span_basis``), the coordinates of
    their projection on it, ``(x Z64^T) W``."""

    def __init__(self, on_sphere, read_dtype, dtype, span_rows=None, W=None):
        self.on_sphere, self.read_dtype, self.dtype = on_sphere, read_dtype, dtype
        self.span_rows, self.W = span_rows, W

    def __call__(self, rows):
        rows = rows.astype(self.read_dtype, copy=False)
        rows = unit_rows(rows) if self.on_sphere else rows
        if rows.dtype != self.dtype:
            rows = rows.astype(self.dtype)
        if self.W is None:
            return rows
        return np.asarray(dense(rows @ self.span_rows.T) @ self.W, dtype=self.dtype)


class _Particles:
    """Tokens as weighted particles: ``Z[owner[i]]`` is token i, ``weights[j]``
    the number of tokens particle j stands for, ``lead[j]`` the token that leads them.

    After each step, particles within ``merge_radius`` of an earlier one
    (:func:`_dynamics_kernels.group_tokens`, first come first served) join
    it, at one place (:meth:`moved`): the weighted softmax of
    ``docs/math.md`` section 8 then moves the particle exactly as it moves
    its tokens when they are at one place.
    Particles keep the order of their first tokens, so that the grouping of
    the particles is the grouping of the tokens. ``plane`` is the plane of
    the grouping's cells (:func:`_dynamics_kernels.cell_plane`), taken once
    from the initial tokens: it decides the work of a grouping, not its
    groups, and the initial spread serves every step.

    The tokens of a particle are at one place for the dynamics, but not in
    the unmerged dynamics, where the others attend to one of them most: in
    the unnormalised model their logits differ by ``beta <Q x_i, K (x_j -
    x_k)>``, which grows as ``e^{2t}``, and the one they attend to is the
    leader if any of them is. ``lead`` keeps that token (see :meth:`moved`).
    """

    def __init__(self, Z, weights, owner, lead, merge_radius, plane, places=None):
        self.Z, self.weights, self.owner, self.lead = Z, weights, owner, lead
        self.merge_radius, self.plane = merge_radius, plane
        # The initial places each particle holds (one each at the start,
        # equal rows merged: :func:`_met_share`).
        self.places = np.ones(len(Z)) if places is None else places

    @classmethod
    def of(cls, Z, merge_radius, weights=None):
        """One particle per row of Z, of weight ``weights`` (1 each when None), equal rows merged."""
        n = Z.shape[0]
        tokens = np.arange(n)
        weights = np.ones(n) if weights is None else np.array(weights, dtype=np.float64)
        particles = cls(Z, weights, tokens, tokens, merge_radius, cell_plane(Z)).moved(Z)
        particles.places = np.ones(len(particles.Z))
        return particles

    def placed(self, Z, attends=None):
        """The particles at their new places Z, none merged (``attends``, which
        chooses among merged particles, goes unused: :meth:`moved`'s signature,
        for the tests that stand ``placed`` in for ``moved``)."""
        return _Particles(
            Z, self.weights, self.owner, self.lead, self.merge_radius, self.plane, self.places
        )

    def moved(self, Z, attends=None):
        """The particles at their new places Z, those within ``merge_radius`` merged.

        A merged particle takes the place and the lead of its first member;
        given ``attends(Z)``, the queries and keys of the new places, those
        of the member that the first attends to most instead, ``argmax_j <Q
        x_first, K x_j>`` (any member's query ranks them alike, up to terms
        of second order in their distance): the token the others attend to,
        the leader if any of them is, which the others then follow.
        ``attends`` is given for the unnormalised model; the sphere models
        name no leaders.
        """
        groups = np.empty(Z.shape[0], dtype=np.int64)
        n_groups = group_tokens(Z, self.merge_radius, groups, self.plane)
        if n_groups == Z.shape[0]:
            return self.placed(Z)
        firsts = np.full(n_groups, Z.shape[0], dtype=np.int64)
        np.minimum.at(firsts, groups, np.arange(Z.shape[0]))
        weights = np.bincount(groups, weights=self.weights, minlength=n_groups)
        if attends is None:
            top = firsts
        else:
            queries, keys = attends(Z)
            score = np.sum(queries[firsts[groups]] * keys, axis=1)
            # members by group, then by decreasing score: each group's first leads
            order = np.lexsort((-score, groups))
            top = order[np.searchsorted(groups[order], np.arange(n_groups))]
        return _Particles(
            Z[top],
            weights,
            groups[self.owner],
            self.lead[top],
            self.merge_radius,
            self.plane,
            np.bincount(groups, weights=self.places, minlength=n_groups),
        )

    def tokens(self):
        """Every token's place."""
        return self.Z[self.owner]


def _count_text(count):
    """A count of tokens by their weights, for a message: a whole count as it
    is, a sum of weights to six figures."""
    return f"{count:.0f}" if count == round(count) and count < 1e15 else f"{count:g}"


def _byte_order(Z):
    """The rows of Z in the order of their bytes (equal rows in the order
    given): an order of their places that does not depend on the order of
    the rows. Sparse rows by the bytes of their values, then of their
    columns (stored as CSR without duplicates or explicit zeros: a row's
    storage is its place)."""
    if sp.issparse(Z):
        Z = sp.csr_matrix(Z, copy=True)
        Z.sum_duplicates()
        Z.eliminate_zeros()
        bounds = zip(Z.indptr[:-1].tolist(), Z.indptr[1:].tolist())
        places = [(Z.data[a:b].tobytes(), Z.indices[a:b].tobytes()) for a, b in bounds]
        return np.array(sorted(range(len(places)), key=places.__getitem__), dtype=np.intp)
    Z = np.ascontiguousarray(Z)
    places = Z.view(np.dtype((np.void, Z.dtype.itemsize * Z.shape[1]))).ravel()
    return np.argsort(places, kind="stable")


def _place_order(Z, weights=None):
    """The initial tokens Z (row j standing for ``weights[j]`` tokens, 1 when
    None) by increasing ``<x_j, m>``, m their weighted mean (equal
    projections in the order given).

    The greedy grouping joins a token to the first earlier group whose
    first token lies within the radius, visiting tokens in their order, and
    particles keep the order of their first tokens (:class:`_Particles`):
    the order of the tokens decides the groups of tokens not yet gathered
    (a chain of tokens each within the radius of the next splits where the
    visit decides). Put in an order of their places that rotations, a
    power of two and the rounding of another kind of input leave as it is
    (but for near ties), the groups do not depend on the order of the rows.
    Increasing, not decreasing: on the paper's mixtures (n = 1e4, K = 2 to
    6, 6 seeds each, every K found) it takes a mean 10.1 steps, decreasing
    10.5, the rows' own order 9.9 (sorted again at every count, decreasing
    took a median 12: the tokens nearest the common mean led groups between
    the forming clusters). Computed at the power of two of the largest
    entry (exact), whose squares neither overflow nor underflow.
    """
    # Summed in the order of the rows' bytes, and ties taken in it: where
    # the mean is zero but for rounding (rows in antipodal pairs), the
    # projections are that rounding, which then depends on the rows alone.
    ranks = _byte_order(Z)
    if sp.issparse(Z):
        ordered = sp.csr_matrix(Z[ranks], dtype=np.float64)
        ordered.data /= peak_unit(Z)
        w = np.ones(len(ranks)) if weights is None else weights[ranks]
        # (Summed row by row, in the order of the rows' bytes.)
        mean = (ordered.T @ w) / np.sum(w) if len(ranks) else np.zeros(Z.shape[1])
        return ranks[np.argsort(ordered @ mean, kind="stable")]
    # (Divided chunk by chunk into the float64 copy: no copy of Z[ranks] in
    # Z's dtype, 13 MB of 633 float32 tokens of 5000 features.)
    unit = peak_unit(Z)
    ordered = np.empty(Z.shape)
    for lo, hi in row_chunks(*Z.shape):
        np.divide(Z[ranks[lo:hi]], unit, out=ordered[lo:hi], dtype=np.float64)
    w = None if weights is None else weights[ranks]
    mean = np.average(ordered, axis=0, weights=w) if len(ordered) else np.zeros(Z.shape[1])
    return ranks[np.argsort(ordered @ mean, kind="stable")]


def _step_in_order(flow, particles, t):
    """:meth:`_Flow.step` of the particles, taken in the order of their places.

    The order of a step's sums decides its rounding. Taken in an order that
    depends on the particles' places alone (that of their bytes: particles
    are at distinct places), a step does not depend on the order of the
    rows, nor on whether equal rows come repeated or as one weighted row
    (``sample_weight``); a run that has not settled would otherwise amplify
    the difference.
    """
    Z = np.ascontiguousarray(particles.Z)
    order = _byte_order(Z)
    moved, log_norm = flow.step(Z[order], t, particles.weights[order])
    Z, norms = np.empty_like(moved), np.empty_like(log_norm)
    Z[order], norms[order] = moved, log_norm
    return Z, norms


class _Plateau:
    """The longest run of a constant number of clusters seen so far."""

    def __init__(self):
        self.length = 0

    def offer(self, start, end):
        """Record the run of steps [start, end] if at least as long as the best; say if it was."""
        if end - start + 1 >= self.length:
            self.length = end - start + 1
            return True
        return False


def _met_share(particles, groups, sizes, heavy):
    """The tokens (by weight) in groups of ``_count`` (labels ``groups`` of the
    particles, token counts ``sizes``) that have met: groups that hold
    particles of at least two initial places, or ``heavy`` tokens or more
    (twice the mean weight of the initial places).

    Rows at one place from the start (repeated rows, merged into one
    particle, or a weighted row) have met no other in the dynamics, but a
    place that carries many more tokens than the mean place is a group of
    its own (aggregated rows, one per cluster, with their counts as
    weights: two places of 30 beside ten of 1, the mean place 5.8 tokens).
    Measured against the mean place, not one token: rows all repeated
    twice, or all of weight 2, are the rows once (equal weights are no
    weights), and a place of weight 2 among places of 1 and 2 (the mean
    above 1) is no group of its own.
    """
    places = np.bincount(groups, weights=particles.places, minlength=len(sizes))
    return float(np.sum(sizes[(places >= 2.0) | (sizes >= heavy)]))


def _count(Z, radius, min_size, weights=None, plane=None):
    """(number of clusters, group labels, group sizes) of a state.

    Row j of Z stands for ``weights[j]`` tokens (1 when None). The number of
    clusters counts the groups of at least ``min_size`` tokens: 0 while none
    is that large. ``plane``: that of :func:`_dynamics_kernels.group_tokens`.
    """
    labels = np.empty(Z.shape[0], dtype=np.int64)
    n_groups = group_tokens(Z, radius, labels, plane)
    sizes = np.bincount(labels, weights=weights, minlength=n_groups)
    return int(np.sum(sizes >= min_size)), labels, sizes


def _largest_norm(Z):
    """The largest norm of the rows of Z, found at the power of two of their
    largest entry (exact; ``_validation.power_of_two_unit``), whose squares
    neither overflow nor underflow at any magnitude of Z."""
    unit = peak_unit(Z)
    return float(np.linalg.norm(Z / unit, axis=1).max()) * unit


def _energy(log_norm, beta, weights=None):
    """E_beta = (1 / (2 beta n^2)) sum_i Z_i from log Z_i (``docs/math.md`` section 8).

    Row i stands for ``weights[i]`` tokens (1 when None), each with the same ``Z_i``.
    """
    log_norm = log_norm.astype(np.float64)
    n = log_norm.shape[0] if weights is None else float(np.sum(weights))
    # log sum_i w_i Z_i, shifted by the largest log Z_i (scipy's logsumexp
    # took a tenth of a step of a few particles)
    top = float(log_norm.max())
    if math.isinf(top):
        return math.inf if top > 0 else 0.0
    scaled = np.exp(log_norm - top)
    total = float(scaled.sum() if weights is None else scaled @ weights)
    with np.errstate(over="ignore"):  # the unnormalised model's logits grow like e^{2t}
        return float(np.exp(top + math.log(total) - math.log(2 * beta * n * n)))
