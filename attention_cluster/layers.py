r"""Attention layers of the paper as functions of one prompt or a batch of prompts.

A prompt is an ``(L, d)`` array of tokens ``X = (X_1, ..., X_L)``; a batch is
an ``(n_prompts, L, d)`` array. Every function returns an array of the same
shape and dtype (float32 stays float32, other real input becomes float64).
Heads are given one per row, ``heads[h] = mu_h`` (shape ``(n_heads, d)``), as
in ``cluster_centers_`` of the estimators.

The layers (:mathmd:`2`; paper, sections 2 and 5), with temperature
``lambda`` and ``K`` clusters:

- :func:`linear_attention`, the predictor with linear heads :math:`\mu_h`,
  :math:`T(X)_\ell = \frac{\lambda K}{L} \sum_h \sum_k \langle X_\ell, \mu_h \rangle \langle \mu_h, X_k \rangle X_k`;
- :func:`softmax_attention`, the same heads with softmax scores,
  :math:`\sum_h \sum_k \mathrm{softmax}_k(\lambda \langle X_\ell, \mu_h \rangle \langle \mu_h, X_k \rangle) X_k`;
- :func:`in_context_attention`, ``d`` orthonormal linear heads, i.e. keys,
  queries and values equal to the identity (section 5),
  :math:`T^{\mathrm{ctx}}(X)_\ell = \frac{\lambda K}{L} (X^\top X) X_\ell`;
- :func:`in_context_softmax_attention`, its softmax counterpart,
  :math:`\sum_k \mathrm{softmax}_k(\lambda \langle X_\ell, X_k \rangle) X_k`.

The linear layers cost ``O(L d K)`` and ``O(L d min(L, d))`` per prompt. The
predictor never forms the ``L x L`` attention matrix; the in-context layer
forms it only for prompts of fewer tokens than features, where it is the
smaller of its two exact routes. The softmax layers must form attention
scores; they do so by blocks of rows (bounded memory) with the log-sum-exp
shift, so ``L = 10000`` neither overflows nor exhausts memory.
"""

import numpy as np
import scipy.sparse as sp

from ._validation import (
    check_count,
    check_matrix,
    check_temperature,
    factor_for_rows,
    finite_output,
)

__all__ = [
    "linear_attention",
    "softmax_attention",
    "in_context_attention",
    "in_context_softmax_attention",
]

# Largest number of attention scores held at once by the softmax layers, and
# of entries of the prompts' Gram matrices by the in-context linear layer
# (32 MiB in float64).
_SCORE_BUDGET = 1 << 22


def _check_prompts(X):
    """Validate one prompt (L, d) or a batch (n, L, d); return a 3-D view."""
    if sp.issparse(X):
        raise TypeError(
            "The attention layer functions take dense prompts only, got a SciPy sparse "
            "X: pass X.toarray() (InContextQuantizer, the in-context layer as an "
            "estimator, accepts sparse X)."
        )
    try:
        X = np.asarray(X)
    except ValueError:
        raise ValueError(
            "X must be one prompt of shape (L, d) or a batch of prompts of one shape "
            "(n_prompts, L, d): pass prompts of different lengths in separate calls."
        ) from None
    if np.iscomplexobj(X):
        raise ValueError("Complex data not supported: X must be real.")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must be a real numeric array, got dtype {X.dtype}.")
    if X.ndim not in (2, 3):
        raise ValueError(
            f"X must be one prompt of shape (L, d) or a batch of shape "
            f"(n_prompts, L, d), got an array of shape {X.shape}."
        )
    if X.size == 0:
        raise ValueError(f"X is empty (shape {X.shape}): need at least one token and one feature.")
    if X.dtype != np.float32:
        X = X.astype(np.float64, copy=False)
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinity.")
    return X if X.ndim == 3 else X[None]


def _check_heads(heads, n_features, dtype):
    heads = check_matrix(heads, "heads", shape=(None, n_features), labels=("n_heads", "d"))
    with np.errstate(over="ignore"):
        cast = heads.astype(dtype, copy=False)
    if not np.all(np.isfinite(cast)):
        raise ValueError(
            f"heads exceed the range of X's dtype ({np.dtype(dtype).name}): pass X as float64."
        )
    return cast


def _finish(out, original_ndim, temperature_helps=True):
    """:func:`finite_output`, one prompt returned as a 2-D array."""
    finite_output(out, temperature_helps)
    return out if original_ndim == 3 else out[0]


def linear_attention(X, heads, *, temperature=1.0, n_clusters=None):
    r"""Predictor with linear attention heads, on one prompt or a batch.

    :math:`T(X)_\ell = \frac{\lambda K}{L} \sum_h \sum_k \langle X_\ell, \mu_h \rangle \langle \mu_h, X_k \rangle X_k`
    (:mathmd:`2`; paper, section 2, where ``K = 2`` gives the
    factor ``2 / L``). With ``U = heads.T`` it is computed as ``A = X U``,
    ``G = X^T A``, ``T = (lambda K / L) A G^T``: ``O(L d K)`` per prompt, no
    ``L x L`` matrix.

    Parameters
    ----------
    X : array-like of shape (L, d) or (n_prompts, L, d)
        One prompt of L tokens, or a batch of prompts.
    heads : array-like of shape (n_heads, d)
        The head parameters ``mu_h``, one per row (unit norm in the paper).
    temperature : float, default=1.0
        lambda > 0.
    n_clusters : int, default=None
        K in the factor ``lambda K / L``; the number of heads when None.

    Returns
    -------
    T : ndarray of the shape of X
        float32 if X is float32, float64 otherwise.

    Raises
    ------
    ValueError
        If X or heads is empty, complex, not finite or of the wrong shape.
    TypeError
        If X is a SciPy sparse matrix or array (pass ``X.toarray()``).
    FloatingPointError
        If the output, or a product on the way to it, overflows. (A product
        that underflows is not refused: float32 prompts whose squared
        entries fall below float32's smallest normal number, entries below
        about 1e-19, lose precision there; give them as float64.)

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.layers import linear_attention
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> linear_attention(X, np.eye(2), temperature=0.5)
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    X3 = _check_prompts(X)
    heads = _check_heads(heads, X3.shape[2], X3.dtype)
    temperature = check_temperature(temperature)
    n_clusters = heads.shape[0] if n_clusters is None else check_count(n_clusters, "n_clusters")
    L = X3.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by _finish
        A = X3 @ heads.T  # (n, L, K): <X_l, mu_h>
        G = np.swapaxes(X3, 1, 2) @ A  # (n, d, K): sum_k <mu_h, X_k> X_k
        # Scaling the small d x K factor spares a pass over the output; it is
        # scaled in float64 (a temperature beyond float32's range is not inf).
        F = factor_for_rows(
            (temperature * n_clusters / L) * np.swapaxes(G, 1, 2).astype(np.float64), X3.dtype
        )
        out = (A @ F).astype(X3.dtype, copy=False)
    return _finish(out, np.ndim(X))


def in_context_attention(X, *, temperature=1.0, n_clusters=2):
    r"""In-context linear attention layer, without any learned parameter.

    :math:`T^{\mathrm{ctx}}(X)_\ell = \frac{\lambda K}{L} \sum_k \langle X_\ell, X_k \rangle X_k
    = \frac{\lambda K}{L} (X^\top X) X_\ell` (:mathmd:`2`; paper, section 5): the sum of
    ``d`` orthonormal linear heads, i.e. keys, queries and values equal to
    the identity. It is computed by the cheaper of its two exact forms,
    ``(X X^T) X`` through the ``L x L`` Gram matrix when ``L < d`` and
    ``X (X^T X)`` through the ``d x d`` one otherwise: ``O(L d min(L, d))``
    time per prompt. Prompts are taken by blocks whose Gram matrices take
    bounded memory together; a prompt whose own exceeds the bound is taken
    alone, its ``min(L, d)^2`` numbers at most the prompt's ``L d``.
    At a fixed temperature it is cubic in X: :math:`T^{\mathrm{ctx}}(c X) = c^3 T^{\mathrm{ctx}}(X)`.
    Prop. 5.1 gives the temperature that centres ``T^ctx(X)_l`` on the
    centroid of token l (see :class:`attention_cluster.InContextQuantizer`).

    Parameters
    ----------
    X : array-like of shape (L, d) or (n_prompts, L, d)
        One prompt of L tokens, or a batch of prompts.
    temperature : float, default=1.0
        lambda > 0.
    n_clusters : int, default=2
        K in the factor ``lambda K / L`` (the paper's K = 2).

    Returns
    -------
    T : ndarray of the shape of X
        float32 if X is float32, float64 otherwise.

    Raises
    ------
    ValueError
        If X is empty, complex, not finite or not 2-D or 3-D.
    TypeError
        If X is a SciPy sparse matrix or array (pass ``X.toarray()``).
    FloatingPointError
        If the output, or a product on the way to it, overflows. (A product
        that underflows is not refused: float32 prompts whose squared
        entries fall below float32's smallest normal number, entries below
        about 1e-19, lose precision there; give them as float64.)

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.layers import in_context_attention
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> in_context_attention(X, temperature=0.5)
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    X3 = _check_prompts(X)
    temperature = check_temperature(temperature)
    n_clusters = check_count(n_clusters, "n_clusters")
    n, L, d = X3.shape
    factor = temperature * n_clusters / L
    out = np.empty(X3.shape, dtype=X3.dtype)
    step = max(1, _SCORE_BUDGET // min(L, d) ** 2)
    for p in range(0, n, step):
        P = X3[p : p + step]
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by _finish
            # (X X^T) X or X (X^T X): the smaller Gram matrix, scaled first
            # in float64 (a temperature beyond float32's range is not inf).
            if L < d:
                gram = factor_for_rows(
                    factor * (P @ np.swapaxes(P, 1, 2)).astype(np.float64), P.dtype
                )
                np.matmul(gram, P, out=out[p : p + step])
            else:
                gram = factor_for_rows(
                    factor * (np.swapaxes(P, 1, 2) @ P).astype(np.float64), P.dtype
                )
                np.matmul(P, gram, out=out[p : p + step])
    return _finish(out, np.ndim(X))


def _softmax_aggregate(queries, keys, values, temperature):
    """``sum_k softmax_k(lambda <q_l, k_k>) v_k``, summed over the head axis.

    ``queries`` and ``keys`` have shape (n, H, L, r), ``values`` (n, 1, L, d),
    one set of values for every head; returns (n, L, d). Scores are formed by blocks of prompts and rows holding
    at most ``_SCORE_BUDGET`` numbers, shifted by their row maximum before
    the temperature multiplies them and ``exp`` (log-sum-exp): no score
    overflows, and at a temperature whose scores pass float64's range each
    softmax is its limit, the hard argmax (uniform over the tied keys).
    """
    n, H, L, _ = queries.shape
    out = np.empty((n, L, values.shape[-1]), dtype=values.dtype)
    if H * L * L <= _SCORE_BUDGET:
        prompt_step, row_step = max(1, _SCORE_BUDGET // (H * L * L)), L
    else:
        prompt_step, row_step = 1, max(1, _SCORE_BUDGET // (H * L))
    keys_t = np.swapaxes(keys, -1, -2)
    for p in range(0, n, prompt_step):
        P = slice(p, p + prompt_step)
        for r in range(0, L, row_step):
            R = slice(r, r + row_step)
            # An overflow of the products is refused by _finish; a shifted
            # score times lambda beyond -1.8e308 is -inf, whose exp is 0 (the
            # limit lambda -> infinity).
            with np.errstate(over="ignore", invalid="ignore"):
                scores = queries[P, :, R] @ keys_t[P]  # (np, H, nr, L)
                scores -= np.max(scores, axis=-1, keepdims=True)
                if temperature > np.finfo(scores.dtype).max:
                    # In float32 lambda would be inf, and a score's shift of
                    # zero times it NaN: the block steps in float64.
                    scores = scores.astype(np.float64)
                scores *= temperature
                np.exp(scores, out=scores)
                scores /= np.sum(scores, axis=-1, keepdims=True)  # each head's softmax
                # The heads share the values: their weights are summed
                # first, so no (np, H, nr, d) array is formed, and the
                # product is written in place (with d >> L the block's
                # (np, nr, d) product is the size of the output).
                np.matmul(np.sum(scores, axis=1), values[P, 0], out=out[P, R])
    return out


def softmax_attention(X, heads, *, temperature=1.0):
    r"""Softmax attention heads, summed over the heads, on one prompt or a batch.

    :math:`T^{\mathrm{soft}}(X)_\ell = \sum_h \sum_k \mathrm{softmax}_k(\lambda \langle X_\ell, \mu_h \rangle \langle \mu_h, X_k \rangle) X_k`
    (:mathmd:`2`: the practical head ``H^soft_mu`` that the paper
    simplifies into a linear head, summed over heads like the linear
    predictor). The softmax normalises each head, so no ``K / L`` factor
    appears. The ``L x L`` scores of each head are formed by blocks of rows
    with the log-sum-exp shift: ``O(L^2 (K + d))`` time, bounded memory.

    Parameters
    ----------
    X : array-like of shape (L, d) or (n_prompts, L, d)
        One prompt of L tokens, or a batch of prompts.
    heads : array-like of shape (n_heads, d)
        The head parameters ``mu_h``, one per row.
    temperature : float, default=1.0
        lambda > 0.

    Returns
    -------
    T : ndarray of the shape of X
        float32 if X is float32, float64 otherwise.

    Raises
    ------
    ValueError
        If X or heads is empty, complex, not finite or of the wrong shape.
    TypeError
        If X is a SciPy sparse matrix or array (pass ``X.toarray()``).
    FloatingPointError
        If a product of the tokens overflows (entries of X beyond about
        1e154); at a temperature whose scores pass float64's range the
        weights are their limit, the hard argmax.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.layers import softmax_attention
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> softmax_attention(X, [[1.0, 0.0]], temperature=np.log(3.0)).round(6)
    array([[0.75, 0.25],
           [0.5 , 0.5 ]])
    """
    X3 = _check_prompts(X)
    heads = _check_heads(heads, X3.shape[2], X3.dtype)
    temperature = check_temperature(temperature)
    with np.errstate(over="ignore", invalid="ignore"):  # refused by _finish
        projections = np.swapaxes(X3 @ heads.T, 1, 2)[..., None]  # (n, K, L, 1)
    out = _softmax_aggregate(projections, projections, X3[:, None], temperature)
    return _finish(out, np.ndim(X), temperature_helps=False)


def in_context_softmax_attention(X, *, temperature=1.0):
    r"""Softmax attention with keys, queries and values equal to the identity.

    :math:`T^{\mathrm{soft,ctx}}(X)_\ell = \sum_k \mathrm{softmax}_k(\lambda \langle X_\ell, X_k \rangle) X_k`: the softmax
    counterpart of :func:`in_context_attention` (:mathmd:`2`; paper, section 5, before the
    linear simplification). Unlike the linear layer it is not a sum of
    ``d`` one-dimensional heads; it is one head whose query-key matrix is the
    identity, so it is equivariant to rotations of the features. Scores are
    formed by blocks of rows with the log-sum-exp shift: ``O(L^2 d)`` time,
    bounded memory.

    Parameters
    ----------
    X : array-like of shape (L, d) or (n_prompts, L, d)
        One prompt of L tokens, or a batch of prompts.
    temperature : float, default=1.0
        lambda > 0.

    Returns
    -------
    T : ndarray of the shape of X
        float32 if X is float32, float64 otherwise.

    Raises
    ------
    ValueError
        If X is empty, complex, not finite or not 2-D or 3-D.
    TypeError
        If X is a SciPy sparse matrix or array (pass ``X.toarray()``).
    FloatingPointError
        If a product of the tokens overflows (entries of X beyond about
        1e154); at a temperature whose scores pass float64's range the
        weights are their limit, the hard argmax.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.layers import in_context_softmax_attention
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> in_context_softmax_attention(X, temperature=np.log(3.0)).round(6)
    array([[0.75, 0.25],
           [0.25, 0.75]])
    """
    X3 = _check_prompts(X)
    temperature = check_temperature(temperature)
    tokens = X3[:, None]
    out = _softmax_aggregate(tokens, tokens, tokens, temperature)
    return _finish(out, np.ndim(X), temperature_helps=False)
