"""Numba kernels of the self-attention dynamics (``SelfAttentionDynamics``).

A module of its own rather than a section of ``_kernels.py``: the mixture
kernels there are being reorganised around the pass engine, and these
kernels share nothing with them but the fastmath flags.

Each kernel works on a row range ``[start, stop)`` of the queries, so the
driver in ``_dynamics.py`` can split one step into chunks (and run them on
threads: the kernels release the GIL). Their NumPy reference twins live in
``tests/reference.py``.

Notation (``docs/math.md`` section 8): tokens ``x_i``, queries
``q_i = Q x_i``, keys ``k_j = K x_j``, values ``v_j = V x_j``, inverse
temperature ``beta``; the attention of token i on token j is
``P_ij = exp(beta <q_i, k_j>) / Z_i`` with ``Z_i = sum_j exp(beta <q_i, k_j>)``.
"""

import numpy as np
from numba import njit

from ._kernels import FASTMATH


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def attention_rows(queries, keys_t, values_t, key_bias, beta, start, stop, out, log_norm):
    """Softmax attention of the queries ``start..stop-1`` over all keys.

    ``out[i - start] = sum_j P_ij v_j`` and ``log_norm[i - start] = log Z_i``
    with ``P_ij = exp(b_j + beta <q_i, k_j>) / Z_i`` (``docs/math.md``
    section 8). The key bias ``b_j`` is 0 for plain tokens and the log of
    the multiplicity when one key stands for several coincident tokens
    (the passive tracers' pass). Keys and values are passed transposed
    (d x n) so the loops over the tokens run on contiguous memory; the
    row maximum is subtracted before ``exp``, so any ``beta`` and any norm
    of the tokens is safe. O((stop - start) n d) work, an n-long buffer.
    """
    d, n = keys_t.shape
    dv = values_t.shape[0]
    logits = np.empty(n, dtype=keys_t.dtype)
    for i in range(start, stop):
        for j in range(n):
            logits[j] = key_bias[j]
        for k in range(d):
            q = beta * queries[i, k]
            for j in range(n):
                logits[j] += q * keys_t[k, j]
        top = logits[0]
        for j in range(1, n):
            if logits[j] > top:
                top = logits[j]
        total = 0.0
        for j in range(n):
            w = np.exp(logits[j] - top)
            logits[j] = w
            total += w
        for k in range(dv):
            s = 0.0
            for j in range(n):
                s += logits[j] * values_t[k, j]
            out[i - start, k] = s / total
        log_norm[i - start] = top + np.log(total)


@njit(cache=True)
def group_tokens(X, radius, labels):
    """Greedy grouping: token i joins the first earlier group whose first
    token lies within ``radius`` (Euclidean), else it starts a new group.

    Writes ``labels`` and returns the number of groups. Clusters of the
    dynamics collapse to points far apart compared with ``radius``, so the
    order in which tokens are visited does not matter once they have
    formed. O(n g d) for g groups.
    """
    n, d = X.shape
    firsts = np.empty(n, dtype=np.int64)
    n_groups = 0
    r2 = radius * radius
    for i in range(n):
        found = -1
        for g in range(n_groups):
            f = firsts[g]
            s = 0.0
            for k in range(d):
                diff = X[i, k] - X[f, k]
                s += diff * diff
            if s <= r2:
                found = g
                break
        if found < 0:
            firsts[n_groups] = i
            found = n_groups
            n_groups += 1
        labels[i] = found
    return n_groups
