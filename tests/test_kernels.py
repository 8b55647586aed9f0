"""Numba kernels against their NumPy twins in tests/reference.py."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import (
    XorShift,
    finite_difference,
    finite_difference_rounding,
    head_signs,
    lbfgs_direction,
    psgd_steps,
    regularizer,
    sequence_grad,
    sequence_loss,
)

from attention_cluster import _kernels as kern
from attention_cluster import _numpy_kernels
from attention_cluster._optimize import lbfgs_direction as two_loop

REG_KINDS = {"pairwise": kern.REG_PAIRWISE, "product": kern.REG_PRODUCT}


def _unit_columns(rng, d, K):
    U = rng.standard_normal((d, K))
    return U / np.linalg.norm(U, axis=0)


def _buffers(L, d, K):
    return np.empty((L, K)), np.empty((d, K)), np.empty((L, d)), np.empty((L, K))


@pytest.mark.parametrize("L, d, K", [(1, 1, 1), (7, 3, 2), (20, 10, 3), (5, 4, 6)], ids=str)
def test_sequence_loss_grad_matches_reference(L, d, K, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((L, d))
    U = _unit_columns(rng, d, K)
    lam = 0.7
    grad = np.zeros((d, K))
    loss = kern.sequence_loss_grad(X, U, lam * K / L, grad, *_buffers(L, d, K))
    np.testing.assert_allclose(loss, sequence_loss(X, U, lam), rtol=1e-10)
    np.testing.assert_allclose(grad, sequence_grad(X, U, lam), rtol=1e-9, atol=1e-12)


def test_sequence_gradient_is_the_derivative_of_the_loss(global_random_seed):
    # The closed-form gradient of math.md section 3 against finite differences
    # of the loss itself (U off the sphere: the formula is Euclidean).
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((12, 5))
    U = rng.standard_normal((5, 3))
    fd = finite_difference(lambda V: sequence_loss(X, V, 0.8), U)
    # The central difference rounds to about eps |loss| / h: 1.4e-6 at seed
    # 132, where the loss is 6270, beside its truncation's 1e-8.
    rounding = finite_difference_rounding(sequence_loss(X, U, 0.8))
    np.testing.assert_allclose(sequence_grad(X, U, 0.8), fd, rtol=1e-6, atol=1e-8 + rounding)


@pytest.mark.parametrize("kind", ["pairwise", "product"])
@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_token_regularizer_value_and_gradient(kind, K, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    d = 6
    x = rng.standard_normal(d)
    U = rng.standard_normal((d, K))
    coef = np.empty(K)
    value = kern.token_regularizer(U.T @ x, REG_KINDS[kind], coef)
    if kind == "pairwise" and K == 1:
        expected = 0.0
    else:
        expected = regularizer(x[None, :], U, kind)
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-300)
    fd = finite_difference(
        lambda V: regularizer(x[None, :], V, kind) if K > 1 or kind == "product" else 0.0, U
    )
    # The central difference rounds to about eps |r| / h: 5e-8 at seed 117,
    # where the regularizer is 210, beside its truncation's 1e-8.
    rounding = finite_difference_rounding(expected)
    np.testing.assert_allclose(np.outer(x, coef), fd, rtol=1e-6, atol=1e-8 + rounding)


def test_token_regularizer_none_is_zero():
    coef = np.ones(3)
    assert kern.token_regularizer(np.array([1.0, 2.0, 3.0]), kern.REG_NONE, coef) == 0.0
    assert np.all(coef == 0)


@given(
    seed=st.integers(0, 2**32 - 1),
    step=st.floats(1e-6, 1e3),
    riemannian=st.booleans(),
    scale=st.floats(1e-6, 1e6),
)
def test_sphere_step_lands_on_the_sphere(seed, step, riemannian, scale):
    rng = np.random.default_rng(seed)
    U = _unit_columns(rng, 5, 3)
    grad = scale * rng.standard_normal((5, 3))
    kern.sphere_step(U, grad, step, riemannian)
    np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, rtol=1e-12)


@given(seed=st.integers(0, 2**32 - 1), step=st.floats(1e-3, 10.0))
def test_riemannian_step_ignores_the_radial_gradient(seed, step):
    # (I - mu mu^T) mu = 0: a gradient along the head is projected away.
    rng = np.random.default_rng(seed)
    U = _unit_columns(rng, 4, 2)
    before = U.copy()
    kern.sphere_step(U, 3.0 * U.copy(), step, True)
    np.testing.assert_allclose(U, before, atol=1e-12)


def test_sphere_step_keeps_a_head_whose_update_vanishes():
    U = np.array([[1.0], [0.0]])
    assert kern.sphere_step(U, np.array([[1.0], [0.0]]), 1.0, False)
    np.testing.assert_array_equal(U, [[1.0], [0.0]])


def test_sphere_step_reports_an_update_that_overflows():
    # Its head is kept, and the caller told: PSGD then refuses the step
    # instead of returning the heads of the step before as the path's.
    U = np.array([[1.0, 0.0], [0.0, 1.0]])
    grad = np.array([[0.0, 1e300], [1e300, 0.0]])
    assert kern.sphere_step(U, grad, 1e10, False) is False
    np.testing.assert_array_equal(U, np.eye(2))


def test_generator_matches_its_python_twin():
    state = np.array([123456789], dtype=np.uint64)
    cum = np.cumsum([0.5, 0.0, 2.0, 1.5])
    twin = XorShift(123456789)
    drawn = [kern._draw_index(state, cum) for _ in range(200)]
    assert drawn == [twin.draw_index(cum) for _ in range(200)]
    assert 1 not in drawn  # zero weight is never drawn


@pytest.mark.parametrize("kind", [None, "pairwise", "product"])
@pytest.mark.parametrize("riemannian", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_psgd_chunk_matches_reference(kind, riemannian, dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((30, 4)).astype(dtype)
    cum = np.cumsum(rng.integers(0, 3, size=30) + 0.5)
    U0 = _unit_columns(rng, 4, 3)
    steps = np.array([0.05, 0.02, 0.01])
    seed = 987654321
    U = U0.copy()
    losses = np.empty(3)
    heads_sum = np.zeros_like(U)
    reg_kind = kern.REG_NONE if kind is None else REG_KINDS[kind]
    rows = np.empty((3 * 2 * 6, 4))
    kern.draw_rows(X, np.empty(0), cum, 0.5, np.array([seed], dtype=np.uint64), rows)
    kern.psgd_chunk(rows, U, 0.9, 6, 2, steps, reg_kind, 0.3, riemannian, losses, heads_sum)
    U_ref, losses_ref = psgd_steps(X, cum, U0, 0.5, 0.9, 6, 2, steps, kind, 0.3, riemannian, seed)
    np.testing.assert_allclose(U, U_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(losses, losses_ref, rtol=1e-6)


@given(seed=st.integers(0, 2**32 - 1), step=st.floats(1e-4, 1e2), riemannian=st.booleans())
def test_heads_stay_unit_norm_after_every_step(seed, step, riemannian):
    rng = np.random.default_rng(seed)
    X = 3.0 * rng.standard_normal((40, 5))
    U = _unit_columns(rng, 5, 2)
    cum = np.arange(1.0, 41.0)
    state = np.array([seed + 1], dtype=np.uint64)
    rows = np.empty((2 * 5, 5))
    for _ in range(10):
        kern.draw_rows(X, np.empty(0), cum, 1.0, state, rows)
        kern.psgd_chunk(
            rows,
            U,
            0.8,
            5,
            2,
            np.array([step]),
            kern.REG_PAIRWISE,
            0.1,
            riemannian,
            np.empty(1),
            np.zeros_like(U),
        )
        np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_head_signs_match_reference(weighted, dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = (rng.standard_normal((300, 5)) + np.r_[2.0, 0, 0, 0, 0]).astype(dtype)
    heads = rng.standard_normal((3, 5))
    weights = rng.uniform(0, 2, 300) if weighted else None
    totals = np.zeros(3)
    kern.head_totals(
        X, np.ascontiguousarray(heads.T), np.empty(0) if weights is None else weights, totals
    )
    signs = np.where(totals < 0, -1.0, 1.0)
    np.testing.assert_array_equal(signs, head_signs(X.astype(np.float64), heads, weights))


@given(seed=st.integers(0, 2**16), m=st.integers(1, 6), p=st.integers(1, 12))
def test_lbfgs_direction_matches_the_matrix_form(seed, m, p):
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((m, p))
    # y = A s with A positive definite: every pair has <s, y> > 0.
    B = rng.standard_normal((p, p))
    Y = S @ (B @ B.T + np.eye(p))
    g = rng.standard_normal(p)
    expected = lbfgs_direction(g, S, Y)
    np.testing.assert_allclose(
        two_loop(g, S, Y), expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max()
    )


def _row_terms_reference(X, w, inv_scale, U, MU, c, lm1, kind, rho):
    """exact_row_terms' docstring in NumPy, with the regulariser ``kind`` (or none)."""
    Z = X.astype(np.float64) * inv_scale
    A, G = Z @ U, Z @ MU
    s, h, nrm = np.sum(A * A, axis=1), np.sum(A * G, axis=1), np.sum(Z * Z, axis=1)
    e = 1.0 - c * s
    q = A * A
    if kind == "pairwise":
        S = q.sum(axis=1)
        r = (S**2 - np.sum(q * q, axis=1)) / 2.0
        grad_r = 2.0 * A * (S[:, None] - q)
    elif kind == "product":
        r = np.prod(q, axis=1)
        others = [np.prod(np.delete(q, k, axis=1), axis=1) for k in range(q.shape[1])]
        grad_r = 2.0 * A * np.column_stack(others)
    else:
        r, grad_r = np.zeros(len(A)), np.zeros_like(A)
    value = np.sum(w * (e * e * nrm - 2.0 * c * lm1 * e * h + rho * r))
    alpha = -4.0 * c * e * nrm + 4.0 * c * c * lm1 * h
    beta = -2.0 * c * lm1 * e
    first = (w[:, None] * (alpha[:, None] * A + beta[:, None] * G + rho * grad_r)).T @ Z
    second = (w[:, None] * beta[:, None] * A).T @ Z
    third = (w[:, None] * nrm[:, None] * A).T @ Z
    return value, np.vstack([first, second, third])


@pytest.mark.parametrize("kernels", [kern, _numpy_kernels], ids=["numba", "numpy"])
@pytest.mark.parametrize("kind", ["pairwise", "product", None])
@pytest.mark.parametrize("d, K", [(5, 3), (40, 8), (3, 1)], ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [True, False])
def test_exact_row_terms_match_numpy(kernels, kind, d, K, dtype, weighted, global_random_seed):
    # Both paths (d K below and above _PRODUCT_MIN_WORK), a last block
    # shorter than the others, weights and each regulariser; Numba's kernels
    # and their NumPy forms (_numpy_kernels, the passes of small data).
    rng = np.random.default_rng(global_random_seed)
    n = 2 * kern._PRODUCT_BLOCK + 77
    X = rng.standard_normal((n, d)).astype(dtype)
    w = rng.uniform(0.0, 2.0, n) if weighted else np.empty(0)
    U = _unit_columns(rng, d, K)
    MU = rng.standard_normal((d, K))
    P = np.full((3 * K, d), 0.5)  # the kernel adds to P
    code = kern.REG_NONE if kind is None else REG_KINDS[kind]
    value = kernels.exact_row_terms(X, w, 0.5, U, MU, 0.2, 9.0, code, 0.3, P)
    value_ref, P_ref = _row_terms_reference(
        X, w if weighted else np.ones(n), 0.5, U, MU, 0.2, 9.0, kind, 0.3
    )
    assert value == pytest.approx(value_ref, rel=1e-10)
    np.testing.assert_allclose(P - 0.5, P_ref, rtol=1e-9, atol=1e-9 * np.abs(P_ref).max())
    # The sparse rows' variant, from the projections, gives the same terms.
    Z = X.astype(np.float64) * 0.5
    C = np.empty((n, 3 * K))
    value_proj = kernels.projected_row_terms(
        Z @ U, Z @ MU, np.sum(Z * Z, axis=1), w, 0.2, 9.0, code, 0.3, C
    )
    assert value_proj == pytest.approx(value_ref, rel=1e-10)
    np.testing.assert_allclose(C.T @ Z, P_ref, rtol=1e-9, atol=1e-9 * np.abs(P_ref).max())


@pytest.mark.parametrize("K", [1, 2, 5], ids=str)
@pytest.mark.parametrize("weighted", [False, True])
def test_numpy_posterior_matches_the_kernel(K, weighted, global_random_seed):
    # The softmax of the E step (math.md section 7) in NumPy against Numba's,
    # rows of zero weight and rows every head scores -inf included.
    rng = np.random.default_rng(global_random_seed)
    m = 700
    P = 30.0 * rng.standard_normal((K, m))
    P[:, :3] = -np.inf
    log_weights = np.log(rng.dirichlet(np.ones(K)))
    w = rng.integers(0, 3, m).astype(float) if weighted else np.empty(0)
    counts, counts_np = np.full(K, 0.25), np.full(K, 0.25)  # both add to counts
    R, R_np = P.copy(), P.copy()
    total = kern.posterior_columns(R, log_weights, w, counts)
    total_np = _numpy_kernels.posterior_columns(R_np, log_weights, w, counts_np)
    assert total_np == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(R_np, R, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(counts_np, counts, rtol=1e-12)
    assert np.all(R_np[:, :3] == 0.0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.sampled_from([1, 2, 3, 6, 17, 30]), ties=st.booleans())
def test_numpy_argmax_rows_matches_the_kernel(seed, K, ties):
    # Ties (rounded scores) go to the first head in both; by columns up to
    # _COLUMN_HEADS heads, by np.argmax above.
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((200, K))
    if ties:
        scores = np.round(scores)
    gain, bias = rng.uniform(0.5, 2.0, K), np.round(rng.standard_normal(K))
    out, out_np = np.empty(200, np.intp), np.empty(200, np.intp)
    # Unit weights (length 0) and weights: the counts are the labels' weighted counts.
    for weights in (np.empty(0), rng.random(200)):
        counts, counts_np = np.ones(K), np.ones(K)
        kern.argmax_rows(scores, gain, bias, weights, out, counts)
        _numpy_kernels.argmax_rows(scores, gain, bias, weights, out_np, counts_np)
        np.testing.assert_array_equal(out_np, out)
        np.testing.assert_array_equal(out, np.argmax(scores * gain + bias, axis=1))
        expected = 1.0 + np.bincount(out, weights=weights if weights.size else None, minlength=K)
        np.testing.assert_allclose(counts, expected, rtol=1e-12)
        np.testing.assert_allclose(counts_np, expected, rtol=1e-12)
    # Both count the rows whose largest value leaves float64's range (the
    # labels pass relabels those rows): beyond it either way, or not.
    far = scores.copy()
    far[::7] *= 1e300
    weights, counts = np.empty(0), np.zeros(K)
    with np.errstate(over="ignore"):
        far[::7] *= 1e8
        expected = int(np.count_nonzero(~np.isfinite(np.max(far * gain + bias, axis=1))))
        assert kern.argmax_rows(far, gain, bias, weights, out, counts) == expected
        assert _numpy_kernels.argmax_rows(far, gain, bias, weights, out_np, counts) == expected


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.sampled_from([1, 2, 3, 6, 17, 30]), ties=st.booleans())
def test_abs_argmax_rows_is_argmax_of_the_magnitudes(seed, K, ties):
    # The head of largest |p| per row, ties (rounded entries, opposite signs
    # included) to the first, and that head's entry with its sign.
    rng = np.random.default_rng(seed)
    P = 2.0 * rng.standard_normal((300, K))
    if ties:
        P = np.round(P)
    best, top = _numpy_kernels.abs_argmax_rows(P)
    expected = np.argmax(np.abs(P), axis=1)
    np.testing.assert_array_equal(best, expected)
    np.testing.assert_array_equal(top, P[np.arange(300), expected])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(2, 5), product=st.booleans())
def test_numpy_rotate_pair_matches_the_kernel(seed, K, product):
    # One Jacobi step on each pair, the product regulariser's pair weights included.
    rng = np.random.default_rng(seed)
    YT = rng.standard_normal((K, 300)) * rng.uniform(0.5, 2.0, (K, 1))
    weight = rng.random(300)
    w = np.empty(300) if product and K > 2 else None
    YT_np, R, R_np = YT.copy(), np.eye(K), np.eye(K)
    for j in range(K - 1):
        for k in range(j + 1, K):
            theta, drop = kern.rotate_pair(YT, R, j, k, weight, w)
            theta_np, drop_np = _numpy_kernels.rotate_pair(YT_np, R_np, j, k, weight, w)
            assert theta_np == pytest.approx(theta, rel=1e-9, abs=1e-12)
            assert drop_np == pytest.approx(drop, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(YT_np, YT, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(R_np, R, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("d", [1, 3, 10, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [True, False])
def test_moment_sums_match_numpy(d, dtype, weighted, global_random_seed):
    # The moments pass's fused sums against the products they replace: a
    # last block shorter than the others, float32 rows summed in float64,
    # weights (zeros among them).
    rng = np.random.default_rng(global_random_seed)
    n = 3 * kern._MOMENT_BLOCK + 37
    X = (rng.standard_normal((n, d)) + rng.standard_normal(d)).astype(dtype)
    w = rng.uniform(0.0, 2.0, n) if weighted else np.empty(0)
    if weighted:
        w[:5] = 0.0
    G, t = kern.moment_sums(X, w)
    Z = X.astype(np.float64)
    ww = w if weighted else np.ones(n)
    np.testing.assert_allclose(G, (Z * ww[:, None]).T @ Z, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(t, ww @ Z, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_moment_sums_do_not_depend_on_where_their_scratch_lies(dtype, global_random_seed):
    # The column sums' loop also stored into the scratch wx, so LLVM ran its
    # vector form (the sum split over lanes, see FASTMATH) only after a
    # check of the addresses, which wx failed when it started just after the
    # weights, or after them by a block's start: the same rows gave sums
    # that differed in their last bits from call to call, by where the
    # allocator put wx. Here wx is placed at every float64 after the weights'
    # end, in one buffer with them.
    rng = np.random.default_rng(global_random_seed)
    block = kern._MOMENT_BLOCK
    n, d = 2 * block + 40, 5
    X = (rng.standard_normal((n, d)) + rng.standard_normal(d)).astype(dtype)
    buffer = np.empty(2 * n + 2 * block)
    weights = buffer[:n]
    weights[:] = rng.uniform(0.0, 2.0, n)
    XT = np.empty((d, block))
    found = set()
    for gap in range(n + block // 8):
        G, t = np.zeros((d, d)), np.zeros(d)
        wx = buffer[n + gap : n + gap + block]
        kern._moment_block_sums(X, weights, XT, wx, G, t)
        found.add((G.tobytes(), t.tobytes()))
    assert len(found) == 1


def test_moment_sums_propagate_nan_and_infinity():
    # The moments pass finds non-finite rows by the sums' diagonal.
    X = np.ones((600, 4))
    X[400, 2] = np.inf
    G, t = kern.moment_sums(X, np.empty(0))
    assert np.isinf(G[2, 2]) and np.isinf(t[2]) and np.isfinite(G[0, 0])
    X[500, 1] = np.nan
    G, _ = kern.moment_sums(X, np.empty(0))
    assert np.isnan(G[1, 1])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(0, 40),
    d=st.integers(1, 30),
    k=st.integers(1, 4),
    density=st.floats(0.0, 1.0),
    dtype=st.sampled_from([np.float32, np.float64]),
    index=st.sampled_from([np.int32, np.int64]),
    kernels=st.sampled_from([kern, _numpy_kernels]),
)
def test_sums_over_csr_rows_are_scipys_products_of_a_float64_copy(
    seed, n, d, k, density, dtype, index, kernels
):
    # SparseRows sums over float32 rows by these kernels, reading each value
    # in float64 as it comes, where it held a float64 copy of them: their
    # sums must be SciPy's X^T A of that copy bit for bit (its order, each
    # product rounded before its sum). Values over 40 binades, so that a
    # fused multiply-add or another order of the sums shows.
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data *= 2.0 ** rng.integers(-20, 20, X.nnz)
    X = sp.csr_matrix(
        (X.data.astype(dtype), X.indices.astype(index), X.indptr.astype(index)), shape=X.shape
    )
    X64 = X.astype(np.float64)
    A = rng.standard_normal((n, k)) * 2.0 ** rng.integers(-20, 20, (n, k))
    offset, w = rng.standard_normal(d), rng.uniform(0.0, 2.0, n)
    out = kernels.transpose_product(X.indptr, X.indices, X.data, A, d)
    assert out.tobytes() == (X64.T @ A).tobytes()
    vector = kernels.transpose_product(X.indptr, X.indices, X.data, A[:, 0], d)
    assert vector.shape == (d,) and vector.tobytes() == (X64.T @ A[:, 0]).tobytes()
    total, stored = kernels.centred_column_sums(X.indptr, X.indices, X.data, offset, w)
    centred = sp.csr_matrix((X64.data - offset[X.indices], X.indices, X.indptr), shape=X.shape)
    pattern = sp.csr_matrix((np.ones(X.nnz), X.indices, X.indptr), shape=X.shape)
    assert total.tobytes() == (centred.T @ w).tobytes()
    assert stored.tobytes() == (pattern.T @ w).tobytes()


_FIT_DIGEST = """
import hashlib, warnings
import numpy as np
from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
warnings.simplefilter("ignore")
digest = hashlib.sha256()
# Large enough for Numba's kernels (_passes.compiles): the fused E step and
# risk terms at d = 10, the BLAS paths at d = 64, in both dtypes.
for n, d, K in [(30000, 10, 3), (6000, 64, 10)]:
    X = make_mixture(n, d, K, noise=0.5, random_state=0)[0]
    for Z in (X, X.astype(np.float32), X + 100.0):
        model = AttentionClustering(K, random_state=0).fit(Z)
        for a in (model.cluster_centers_, model.means_, model.labels_, model.loss_curve_):
            digest.update(np.ascontiguousarray(a).tobytes())
    # PSGD's kernels (psgd_chunk and the sequence gradient it calls).
    model = AttentionClustering(K, solver="psgd", max_iter=300, random_state=0).fit(X)
    for a in (model.cluster_centers_, model.loss_curve_):
        digest.update(np.ascontiguousarray(a).tobytes())
print(digest.hexdigest())
"""


_HELPERS_FIRST = """
import numpy as np
from attention_cluster import _kernels
L, d, K = 5, 6, 2
_kernels.token_regularizer(np.array([1.0, 2.0, 3.0]), _kernels.REG_PAIRWISE, np.empty(3))
_kernels.sequence_loss_grad(
    np.ones((L, d)), np.ones((d, K)), 1.0, np.zeros((d, K)),
    np.empty((L, K)), np.empty((d, K)), np.empty((L, d)), np.empty((L, K)),
)
_kernels.sphere_step(np.ones((d, K)), np.ones((d, K)), 0.1, True)
"""


def test_a_fit_is_the_same_whether_its_kernels_are_compiled_or_loaded(tmp_path):
    # Two fresh processes share an empty Numba cache: the first compiles the
    # kernels and writes the cache, the second loads them from it. With the
    # flag "nsz" among FASTMATH, the two fitted centres differed in their
    # last bits (6 of 16 fits measured), so a fit's result depended on
    # whether its process (or Dask worker) had compiled; now they are equal.
    # A third process, on a cache of its own, calls PSGD's helpers alone
    # first, as their tests do: compiled as libraries of their own before
    # PSGD's kernel, they changed its code, and its iterates (64 features:
    # other centres); inlined into the kernel, they do not.
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(tmp_path))
    # The JIT's cache is the subject, also when this file runs without it
    # (tests/test_nojit.py).
    env.pop("NUMBA_DISABLE_JIT", None)
    assert not any(tmp_path.iterdir())

    def digest():
        run = subprocess.run(
            [sys.executable, "-c", _FIT_DIGEST], env=env, capture_output=True, text=True, check=True
        )
        return run.stdout.split()[-1]

    compiled = digest()
    assert any(tmp_path.rglob("*.nbi"))
    assert digest() == compiled
    helpers_first = tmp_path / "helpers_first"
    helpers_first.mkdir()
    env["NUMBA_CACHE_DIR"] = str(helpers_first)
    run = subprocess.run(
        [sys.executable, "-c", _HELPERS_FIRST + _FIT_DIGEST],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.split()[-1] == compiled


@given(
    st.lists(
        st.lists(st.integers(0, 6), max_size=6),
        min_size=1,
        max_size=8,
    )
)
def test_repeats_a_column_matches_a_set_per_row(rows):
    # The check behind SparseRows' canonical copy: indices in any order.
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int32)
    indices = np.array([j for r in rows for j in r], dtype=np.int32)
    expected = any(len(set(r)) < len(r) for r in rows)
    assert kern.repeats_a_column(indptr, indices, 7) == expected


def test_a_kernel_no_place_can_cache_is_compiled_with_a_warning():
    # Where neither the package's __pycache__ nor the per-user cache
    # directory is writable, Numba refuses a cache=True kernel when it is
    # defined ("no locator available"), and the package's import failed. A
    # function with no source file meets the same refusal: the kernel is
    # compiled uncached, and the warning says how to give it a cache.
    import numba

    from attention_cluster._kernels import njit

    if numba.config.DISABLE_JIT:
        pytest.skip("nothing is compiled, nor cached, with NUMBA_DISABLE_JIT=1")
    namespace = {}
    exec("def add_one(x):\n    return x + 1\n", namespace)
    with pytest.warns(UserWarning, match="NUMBA_CACHE_DIR"):
        kernel = njit(cache=True)(namespace["add_one"])
    assert kernel(1.5) == 2.5
