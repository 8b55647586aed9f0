"""The EM refinement (math.md section 7) against NumPy/scipy references and Monte Carlo."""

import itertools
import warnings
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from reference import (
    mixture_e_step,
    mixture_em_step,
    mixture_from_vector,
    mixture_vector,
    squarem_point,
)
from reference import mixture_log_likelihood as reference_log_likelihood
from scipy.stats import ortho_group
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster import _kernels as kern
from attention_cluster import _mixture as mixture
from attention_cluster._mixture import _EM, _Params, mixture_log_likelihood, refine_heads
from attention_cluster._passes import DenseRows
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import (
    centroid_distance,
    class_means_distance,
    information_limit,
    match_centroids,
)


def _problem(seed, n=600, d=5, K=3, noise=0.6, weights=None):
    X, y, C = make_mixture(n, d, K, noise=noise, weights=weights, random_state=seed)
    return X, y, C


def _kernel_e_step(X, U, log_pi, beta, inv_scale=1.0, weights=None):
    K, d = U.shape[1], X.shape[1]
    S, counts = np.empty((K, d)), np.empty(K)
    w = np.empty(0) if weights is None else weights
    partial = kern.mixture_e_step(X, U, log_pi, beta, inv_scale, w, S, counts)
    return S, counts, partial


@pytest.mark.parametrize("n, d, K", [(1, 1, 1), (50, 3, 2), (300, 10, 4), (40000, 4, 3)], ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
def test_e_step_matches_reference(n, d, K, dtype, weighted, global_random_seed):
    # n = 40000 spans many blocks of rows.
    rng = np.random.default_rng(global_random_seed)
    X = (2.0 * rng.standard_normal((n, d))).astype(dtype)
    U = rng.standard_normal((d, K))
    U /= np.linalg.norm(U, axis=0)
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    weights = None
    if weighted:
        weights = rng.integers(0, 4, size=n).astype(float)
        weights[0] = 1.0
    inv_scale = 0.5
    S, counts, partial = _kernel_e_step(X, U, log_pi, 1.7, inv_scale, weights)
    S_ref, counts_ref, partial_ref = mixture_e_step(
        X.astype(np.float64) * inv_scale, U, log_pi, 1.7, weights
    )
    rtol = 1e-9 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(S, S_ref, rtol=rtol, atol=rtol * n)
    np.testing.assert_allclose(counts, counts_ref, rtol=rtol)
    np.testing.assert_allclose(partial, partial_ref, rtol=rtol)


def _rows(X, weights, scale, offset, sparse, n_threads=1, compiled=None):
    import scipy.sparse as sparse_matrix

    from attention_cluster._passes import SparseRows

    if sparse:
        return SparseRows(sparse_matrix.csr_matrix(X), weights, scale, offset, compiled=compiled)
    data = DenseRows(X, weights, scale, n_threads=n_threads, compiled=compiled)
    return data if offset is None else data.centred(offset)


@pytest.mark.parametrize("path", ["blas", "fused", "numpy"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("centred", [False, True])
def test_pass_e_step_matches_reference(
    path, sparse, dtype, weighted, centred, monkeypatch, global_random_seed
):
    # The E step of the pass layer (BLAS tiles, or the fused kernel, or on
    # small data NumPy's forms; sparse rows by tiles of sparse products)
    # against the NumPy reference, on the rows (x - m) / s, with weights;
    # several tiles and chunks of rows.
    from attention_cluster import _passes

    monkeypatch.setattr(_passes, "_BLAS_MIN_WORK", 0 if path == "blas" else 10**9)
    monkeypatch.setattr(_passes, "_BLAS_MIN_FEATURES", 0 if path == "blas" else 10**9)
    monkeypatch.setattr(_passes, "_E_TILE", 100)
    monkeypatch.setattr(_passes, "_SPARSE_TILE", 300)
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 256 * 8 * 40)
    rng = np.random.default_rng(global_random_seed)
    n, d, K = 1500, 40, 7
    X = rng.standard_normal((n, d)) + 1.5
    if sparse:
        X[rng.random((n, d)) < 0.7] = 0.0
    X = X.astype(dtype)
    U = rng.standard_normal((d, K))
    U /= np.linalg.norm(U, axis=0)
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    weights = rng.integers(0, 4, size=n).astype(float) if weighted else None
    offset = X.astype(np.float64).mean(axis=0) if centred else None
    scale, beta = 2.0, 3.0
    compiled = path != "numpy"
    data = _rows(X, weights, scale, offset, sparse, n_threads=2, compiled=compiled)
    S, counts, partial = data.e_step(U, log_pi, beta)
    # Dense rows are centred in X's dtype, as the pass layer does.
    Z = X.astype(np.float64)
    if centred:
        Z = (X - offset.astype(dtype)).astype(np.float64) if not sparse else Z - offset
    S_ref, counts_ref, partial_ref = mixture_e_step(Z / scale, U, log_pi, beta, weights)
    # float32 rows are multiplied in float32 (_passes._blas_e_step): scores
    # and sums carry float32 rounding.
    rtol = 1e-10 if dtype == np.float64 or sparse or path != "blas" else 2e-5
    np.testing.assert_allclose(S, S_ref, rtol=rtol, atol=rtol * np.abs(S_ref).max())
    np.testing.assert_allclose(counts, counts_ref, rtol=rtol, atol=rtol * n)
    assert partial == pytest.approx(partial_ref, rel=rtol)
    if not sparse:
        # The same result on one thread as on two: fixed chunks and tiles,
        # added in order.
        one = _rows(X, weights, scale, offset, sparse, 1, compiled).e_step(U, log_pi, beta)
        for a, b in zip(one, (S, counts, partial)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_blas_e_step_keeps_rows_no_head_takes_out(compiled, global_random_seed):
    # Rows of zero weight, and rows every head scores -inf (a head of
    # log-weight -inf everywhere but one), add nothing, as in the fused
    # kernel; with Numba's softmax and with its NumPy form.
    from attention_cluster import _numpy_kernels, _passes

    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((300, 64))
    U = rng.standard_normal((64, 5))
    U /= np.linalg.norm(U, axis=0)
    log_pi = np.array([-np.inf, np.log(0.5), -np.inf, np.log(0.5), -np.inf])
    weights = rng.integers(0, 3, size=300).astype(float)
    posterior = (kern if compiled else _numpy_kernels).posterior_columns
    S, counts, partial = _passes._blas_e_step(
        X, weights, np.ascontiguousarray(2.0 * U.T), log_pi, 1.0, posterior, 128
    )
    S_ref, counts_ref, partial_ref = mixture_e_step(X, U, log_pi, 2.0, weights)
    np.testing.assert_allclose(S, S_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(counts, counts_ref, rtol=1e-10)
    assert partial == pytest.approx(partial_ref, rel=1e-10)
    assert np.all(S[[0, 2, 4]] == 0.0)


@pytest.mark.parametrize("free", [False, True])
def test_log_likelihood_matches_scipy(free, global_random_seed):
    # The E step of _Params.attention (keys r_k / r0 mu_k, biases) and
    # mixture_log_likelihood against scipy's densities of N(r_k mu_k, tau^2 I).
    X, _, _ = _problem(global_random_seed)
    rng = np.random.default_rng(global_random_seed)
    d, K = X.shape[1], 3
    U = rng.standard_normal((d, K))
    U /= np.linalg.norm(U, axis=0)
    pi, tau = rng.dirichlet(np.ones(K)), 0.7
    radii = rng.uniform(0.3, 2.0, size=K) if free else np.full(K, 0.9)
    p = _Params(U, radii, tau**2, np.log(pi), free)
    keys, bias, beta, r0 = p.attention()
    _, _, partial = _kernel_e_step(X, np.ascontiguousarray(keys), bias, beta)
    mean_sq = float(np.mean(np.sum(X**2, axis=1)))
    ours = mixture_log_likelihood(partial / len(X), mean_sq, r0, tau**2, d)
    assert ours == pytest.approx(reference_log_likelihood(X, None, U, pi, radii, tau), rel=1e-10)


def test_posterior_is_calibrated_monte_carlo(global_random_seed):
    # Bayes: for x drawn from the model, E[gamma_k(x)] = pi_k and
    # E[gamma_k(x) | z = k] > E[gamma_k(x) | z != k]; Monte Carlo over 2e5 draws.
    weights = np.array([0.2, 0.3, 0.5])
    noise = 0.8
    X, y, C = make_mixture(
        200_000, 4, 3, noise=noise, weights=weights, random_state=global_random_seed
    )
    S, counts, _ = _kernel_e_step(X, np.ascontiguousarray(C.T), np.log(weights), 1.0 / noise**2)
    share = counts / len(X)
    # The responsibilities are bounded by 1: standard error <= 0.5 / sqrt(n).
    np.testing.assert_allclose(share, weights, atol=5 * 0.5 / np.sqrt(len(X)))
    # And the responsibility-weighted sums are the posterior means: S_k / N =
    # E[gamma_k x] = pi_k mu_k by the tower rule (noise has mean zero).
    np.testing.assert_allclose(
        S / len(X), weights[:, None] * C, atol=5 * 2 * noise / np.sqrt(len(X))
    )


@pytest.mark.parametrize("free", [False, True])
def test_m_step_matches_reference(free, global_random_seed):
    # The code's closed forms (tau^2 = (m2 - r^2) / d, r = sum ||S_k|| / N;
    # with free norms r_k = ||S_k|| / N_k, tau^2 = (m2 - sum ||S_k||^2 /
    # (N_k N)) / d) against the maximiser of the expected complete
    # log-likelihood written out.
    X, _, C = _problem(global_random_seed)
    rng = np.random.default_rng(global_random_seed + 1)
    w = rng.uniform(0.5, 2.0, size=len(X))
    U = C.T + 0.3 * rng.standard_normal(C.T.shape)
    U /= np.linalg.norm(U, axis=0)
    pi, tau = np.array([0.5, 0.3, 0.2]), 0.5
    radii = np.array([0.8, 1.1, 1.6]) if free else np.full(3, 1.1)
    em = _EM(DenseRows(X, w), float(np.average(np.sum(X**2, axis=1), weights=w)))
    p = _Params(U, radii, tau**2, np.log(pi), free)
    S, counts, _ = em.expect(p)
    new = em.maximize(S, counts, p)
    U_ref, pi_ref, r_ref, tau_ref = mixture_em_step(X, w, U, pi, radii, tau, free=free)
    np.testing.assert_allclose(new.U, U_ref, rtol=1e-10)
    np.testing.assert_allclose(np.exp(new.log_pi), pi_ref, rtol=1e-10)
    np.testing.assert_allclose(new.radii, r_ref, rtol=1e-10)
    assert new.variance == pytest.approx(tau_ref**2, rel=1e-9)


def test_free_norm_gain_bounds_the_likelihood_gain(global_random_seed):
    # free_norm_gain is what the free M step gains in the expected complete
    # log-likelihood over the equal-norm one, from the same E step; EM's
    # likelihood (scipy reference) gains at least that much.
    X, y, C = make_mixture(2000, 5, 3, noise=0.4, random_state=global_random_seed)
    X = X * np.array([0.6, 1.0, 1.8])[y, None]
    em = _EM(DenseRows(X), float(np.mean(np.sum(X**2, axis=1))))
    p = _Params(np.ascontiguousarray(C.T), np.ones(3), 0.4**2, np.full(3, -np.log(3)))
    S, counts, ll = em.expect(p)
    gain = mixture.free_norm_gain(S, counts, p.variance)
    free = mixture._maximize(S, counts, em.total, em.mean_sq, em.floor, replace(p, free=True))
    ll_free = reference_log_likelihood(
        X, None, free.U, np.exp(free.log_pi), free.radii, np.sqrt(free.variance)
    )
    assert gain > 10.0
    assert len(X) * (ll_free - ll) >= gain * (1 - 1e-9)


def test_parted_norms_are_the_means_of_a_normal_s_equal_slices(global_random_seed):
    # math.md section 7, "Coinciding centres": a group of m coinciding
    # centres takes the norms r + tau z_i, z_i the means of the m
    # equal-mass slices of N(0, 1); Monte Carlo estimate of those means.
    rng = np.random.default_rng(global_random_seed)
    z = np.sort(rng.standard_normal(400_000))
    d, tau, r = 4, 0.1, 2.0
    head = np.eye(d)[:, :1]
    for m in (2, 3, 5):
        p = _Params(np.tile(head, m), np.full(m, r), tau**2, np.full(m, -np.log(m)), True)
        parted = mixture.parted(p, 1000.0)
        slices = np.array([part.mean() for part in np.array_split(z, m)])
        np.testing.assert_allclose((parted.radii - r) / tau, slices, atol=0.01)
    # A pair: the halves' means of a Gaussian, +-sqrt(2 / pi).
    p = _Params(np.tile(head, 2), np.full(2, r), tau**2, np.full(2, -np.log(2)), True)
    np.testing.assert_allclose(
        mixture.parted(p, 1000.0).radii, r + tau * np.sqrt(2 / np.pi) * np.array([-1, 1])
    )


@given(
    seed=st.integers(0, 2**32 - 1),
    K=st.integers(2, 6),
    copies=st.integers(2, 3),
    scale=st.floats(1e-3, 1e3),
    n=st.floats(10.0, 1e7),
)
def test_parted_moves_only_coinciding_centres_along_their_direction(seed, K, copies, scale, n):
    # Components apart keep their parameters; each coinciding group keeps
    # its heads, weights and variance and parts along its direction, its
    # mean norm kept (no norm reaches 0 here). Centres coincide within
    # min(d (1 / N_j + 1 / N_k), 1) tau^2 of each other, N_k = pi_k n: read
    # in units of tau, the same at any scale of the rows.
    rng = np.random.default_rng(seed)
    d = K + 2
    U = np.linalg.qr(rng.standard_normal((d, K)))[0]
    radii = rng.uniform(1.0, 2.0, K) * scale
    U = np.hstack([U, np.tile(U[:, :1], copies - 1)])
    radii = np.concatenate([radii, np.full(copies - 1, radii[0])])
    weights = rng.uniform(0.5, 1.5, K + copies - 1)
    log_pi = np.log(weights / weights.sum())
    tau = 0.05 * scale
    p = _Params(U, radii, tau**2, log_pi, True)
    parted = mixture.parted(p, n)
    group = np.r_[0, np.arange(K, K + copies - 1)]
    apart = np.arange(1, K)
    np.testing.assert_array_equal(parted.U, p.U)
    np.testing.assert_array_equal(parted.log_pi, p.log_pi)
    assert parted.variance == p.variance
    np.testing.assert_array_equal(parted.radii[apart], radii[apart])
    assert np.mean(parted.radii[group]) == pytest.approx(radii[0], rel=1e-12)
    assert np.min(np.diff(np.sort(parted.radii[group]))) > 0.5 * tau
    # Centres just beyond that distance (on one ray, in their order) do not coincide.
    pi = np.exp(log_pi)
    gaps = tau * np.sqrt(np.minimum(d * (1 / pi[group[:-1]] + 1 / pi[group[1:]]) / n, 1.0))
    far = replace(p, radii=np.concatenate([radii[:K], radii[0] + np.cumsum(1.01 * gaps)]))
    assert mixture.parted(far, n) is far


def test_coinciding_centres_are_a_fixed_point_that_parting_leaves(global_random_seed):
    # math.md section 7, "Coinciding centres": two components at one centre
    # get one centre again from EM's M step, whatever the rows; parted,
    # EM's likelihood rises above the fixed point's. Rows: two clusters on
    # one ray (norms 1 and 3) and one on another.
    rng = np.random.default_rng(global_random_seed)
    d, n = 3, 3000
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    X = np.concatenate([np.outer(np.full(n, r), e) for r, e in ((1.0, e1), (3.0, e1), (2.0, e2))])
    X += 0.2 * rng.standard_normal(X.shape)
    em = _EM(DenseRows(X), float(np.mean(np.sum(X**2, axis=1))))
    U = np.stack([e1, e1, e2], axis=1)
    p = _Params(U, np.array([2.0, 2.0, 2.0]), 0.5, np.log([0.3, 0.4, 0.3]), True)
    for _ in range(5):
        S, counts, ll_fixed = em.expect(p)
        p = em.maximize(S, counts, p)
        np.testing.assert_allclose(p.U[:, 0], p.U[:, 1], atol=1e-12)
        assert p.radii[0] == pytest.approx(p.radii[1], rel=1e-12)
    q = mixture.parted(p, em.n_effective)
    for _ in range(50):
        S, counts, ll = em.expect(q)
        q = em.maximize(S, counts, q)
    assert ll > ll_fixed + 0.1
    np.testing.assert_allclose(np.sort(q.radii[:2]), [1.0, 3.0], atol=0.05)


def _refined(X, C, weights=None, noise=0.6, **kwargs):
    # The subsamples' rows from a seeded generator, not NumPy's global one.
    kwargs.setdefault("random_state", 0)
    mean_sq = float(np.average(np.sum(X**2, axis=1), weights=weights))
    return refine_heads(DenseRows(X, weights), np.ascontiguousarray(C.T), mean_sq, noise, **kwargs)


@pytest.mark.parametrize("norms", ["equal", "free"])
def test_fixed_point_is_the_likelihood_maximum(norms, global_random_seed):
    # At convergence every derivative of the likelihood (scipy reference) in the
    # heads (tangent to the spheres), r (each r_k when free), tau and the
    # weights vanishes; at the starting point they do not.
    X, _, C = _problem(global_random_seed, n=2000)
    rng = np.random.default_rng(global_random_seed)
    start = C + 0.15 * rng.standard_normal(C.shape)
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    fit = _refined(X, start, norms=norms, tol=1e-20, max_iter=2000)
    assert fit.converged and fit.free == (norms == "free")

    def derivatives(U, pi, radius, tau, eps=1e-5):
        ll = lambda *p: reference_log_likelihood(X, None, *p)  # noqa: E731
        out = []
        for k in range(U.shape[1]):
            v = rng.standard_normal(U.shape[0])
            v -= U[:, k] * (U[:, k] @ v)
            v /= np.linalg.norm(v)
            moved = [U.copy(), U.copy()]
            for sign, V in zip((1, -1), moved):
                V[:, k] = np.cos(eps) * U[:, k] + sign * np.sin(eps) * v
            out.append((ll(moved[0], pi, radius, tau) - ll(moved[1], pi, radius, tau)) / (2 * eps))
        moves = np.eye(3) if norms == "free" else np.ones((1, 3))
        for e in eps * moves:
            out.append((ll(U, pi, radius + e, tau) - ll(U, pi, radius - e, tau)) / (2 * eps))
        out.append((ll(U, pi, radius, tau + eps) - ll(U, pi, radius, tau - eps)) / (2 * eps))
        shift = np.array([eps, -eps, 0.0])
        out.append((ll(U, pi + shift, radius, tau) - ll(U, pi - shift, radius, tau)) / (2 * eps))
        return np.abs(out)

    at_fit = derivatives(fit.heads, fit.weights, fit.radii, np.sqrt(fit.variance))
    at_start = derivatives(np.ascontiguousarray(start.T), np.full(3, 1 / 3), np.ones(3), 0.6)
    assert np.max(at_fit) < 1e-6
    assert np.max(at_start) > 1e-3


@given(
    seed=st.integers(0, 2**31 - 1),
    noise=st.floats(0.05, 1.5),
    K=st.integers(1, 4),
    norms=st.sampled_from(["equal", "free"]),
)
def test_log_likelihood_never_decreases(seed, noise, K, norms):
    rng = np.random.default_rng(seed)
    X, _, _ = make_mixture(300, 4, K, noise=noise, centroids="random", random_state=seed)
    start = rng.standard_normal((K, 4))
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    fit = _refined(X, start, noise=noise, norms=norms, tol=1e-12, max_iter=60)
    assert np.all(np.diff(fit.log_likelihood) >= -1e-12 * np.abs(fit.log_likelihood[:-1]))
    np.testing.assert_allclose(np.linalg.norm(fit.heads, axis=0), 1.0, rtol=1e-12)
    assert fit.weights.sum() == pytest.approx(1.0) and fit.variance > 0
    assert np.all(fit.radii >= 0) and fit.free == (norms == "free")
    if norms == "equal":
        assert np.all(fit.radii == fit.radii[0])


def _newton_like_system(seed, n, slow):
    # I - J with J symmetric of spectral radius below 1 and a few slow
    # directions, as the EM map's Jacobian has (mixture.gmres' systems).
    rng = np.random.default_rng(seed)
    Q = ortho_group.rvs(n, random_state=seed)
    rates = rng.uniform(0.0, 0.2, n)
    rates[:slow] = rng.uniform(0.5, 0.95, slow)
    return np.eye(n) - (Q * rates) @ Q.T, rng.standard_normal(n)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 30), slow=st.integers(0, 3))
def test_gmres_matches_a_direct_solve(seed, n, slow):
    A, b = _newton_like_system(seed, n, min(slow, n))
    x, reached = mixture.gmres(lambda y: A @ y, b, 1e-12, 40)
    assert reached
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=0, atol=1e-9 * np.linalg.norm(b))


@given(
    seed=st.integers(0, 2**31 - 1),
    steps=st.integers(1, 6),
    rtol=st.sampled_from([1e-1, 1e-2, 1e-3, 0.0]),
)
def test_gmres_minimises_the_residual_over_its_krylov_space(seed, steps, rtol):
    # Stopped by max_steps or by rtol, x is the least-squares solution over
    # span(b, A b, ..., A^(k-1) b), k its steps: NumPy's lstsq on that basis.
    A, b = _newton_like_system(seed, 20, 20)
    products = []

    def product(y):
        products.append(y)
        return A @ y

    x, reached = mixture.gmres(product, b, rtol, steps)
    k = len(products)
    assert 1 <= k <= steps
    basis = np.column_stack([np.linalg.matrix_power(A, i) @ b for i in range(k)])
    coef = np.linalg.lstsq(A @ basis, b, rcond=None)[0]
    best = np.linalg.norm(A @ basis @ coef - b)
    residual = np.linalg.norm(A @ x - b)
    assert residual <= best + 1e-9 * np.linalg.norm(b)
    assert reached == (residual <= rtol * np.linalg.norm(b) * (1 + 1e-9))
    if k < steps:
        assert reached


def test_gmres_edge_cases():
    x, reached = mixture.gmres(lambda y: 2.0 * y, np.zeros(3), 1e-2, 40)
    assert reached and np.all(x == 0.0)
    x, reached = mixture.gmres(lambda y: np.full_like(y, np.nan), np.ones(3), 1e-2, 40)
    assert not reached and np.all(np.isnan(x))


@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-3, 1e3))
def test_equivariances(seed, scale):
    # Rotating the data rotates the fitted heads; permuting the starting heads
    # permutes them; the fit of (c X, s = c) equals that of (X, s = 1). Each
    # run goes to the fixed point (tol far below rounding), so they agree to
    # rounding.
    X, _, C = make_mixture(400, 4, 3, noise=0.5, random_state=seed)
    Q = ortho_group.rvs(4, random_state=seed)
    exact = {"tol": 1e-28, "max_iter": 2000}
    fit = _refined(X, C, **exact)
    rotated = _refined(X @ Q.T, C @ Q.T, **exact)
    np.testing.assert_allclose(rotated.heads, Q @ fit.heads, atol=1e-9)
    perm = np.array([2, 0, 1])
    permuted = _refined(X, C[perm], **exact)
    np.testing.assert_allclose(permuted.heads, fit.heads[:, perm], atol=1e-9)
    mean_sq = float(np.mean(np.sum(X**2, axis=1)))
    scaled = refine_heads(
        DenseRows(scale * X, scale=scale), np.ascontiguousarray(C.T), mean_sq, 0.5, **exact
    )
    np.testing.assert_allclose(scaled.heads, fit.heads, atol=1e-9)


def test_integer_weights_equal_repeated_rows(global_random_seed):
    X, _, C = _problem(global_random_seed, n=300)
    counts = np.random.default_rng(global_random_seed).integers(0, 4, size=len(X))
    weighted = _refined(X, C, weights=counts.astype(float), tol=1e-28, max_iter=2000)
    repeated = _refined(np.repeat(X, counts, axis=0), C, tol=1e-28, max_iter=2000)
    np.testing.assert_allclose(weighted.heads, repeated.heads, atol=1e-9)
    np.testing.assert_allclose(weighted.weights, repeated.weights, atol=1e-9)


def test_point_clusters_are_recovered_exactly():
    # sigma = 0: the variance hits its floor and the E step is a hard argmax.
    X, _, C = make_mixture(200, 6, 3, noise=0.0, random_state=0)
    start = C + 0.05
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    fit = _refined(X, start, noise=0.0)
    assert fit.converged and np.all(np.isfinite(fit.heads))
    # Exact up to the rounding of the sums (the E step adds rows in blocks).
    perm, signs, _ = match_centroids(fit.heads.T, C)
    heads = signs[:, None] * fit.heads.T[perm]
    np.testing.assert_allclose(heads, C, rtol=0, atol=8 * np.finfo(float).eps)


# --- The estimator's refine option ------------------------------------------


def test_refine_resolution_and_attributes():
    X, _, _ = make_mixture(500, 5, 2, noise=0.3, random_state=0)
    full = AttentionClustering(2, solver="full", random_state=0).fit(X)
    assert full.refine_ == "em" and full.refine_n_iter_ > 0
    assert full.weights_.shape == (2,) and full.weights_.sum() == pytest.approx(1.0)
    psgd = AttentionClustering(2, solver="psgd", random_state=0).fit(X)
    assert psgd.refine_ is None and psgd.refine_n_iter_ == 0
    np.testing.assert_allclose(psgd.weights_, np.bincount(psgd.labels_, minlength=2) / len(X))
    both = AttentionClustering(2, solver="psgd", refine="em", random_state=0).fit(X)
    assert both.refine_ == "em" and both.refine_n_iter_ > 0


def test_refine_rejects_unknown_values():
    with pytest.raises(ValueError, match="refine"):
        AttentionClustering(refine="newton").fit(np.eye(4))


def test_refine_warns_when_it_does_not_converge():
    X, _, _ = make_mixture(500, 5, 2, noise=1.0, random_state=0)
    with pytest.warns(ConvergenceWarning, match="EM refinement"):
        AttentionClustering(2, solver="full", max_iter=2, tol=1.0, random_state=0).fit(X)


def test_refine_finds_unequal_weights(global_random_seed):
    X, y, C = make_mixture(
        20_000, 6, 2, noise=0.5, weights=[0.25, 0.75], random_state=global_random_seed
    )
    model = AttentionClustering(2, solver="full", random_state=global_random_seed).fit(X)
    # weights_ follows the heads' order: match the heads to the centroids.
    order = np.argmax(np.abs(model.cluster_centers_ @ C.T), axis=1)
    np.testing.assert_allclose(model.weights_, np.array([0.25, 0.75])[order], atol=0.03)


def test_refine_beats_the_attention_heads_at_high_noise(global_random_seed):
    # sigma = 1, K = 2: the attention heads' distance is several times the
    # class means' (1 + K sigma^2 and more), the refined heads' is at the
    # efficient limit, D_eff (2.06 times the class means' here; math.md
    # section 7, "The information limit"). Distances scatter like chi-squares:
    # over 150 seeds the refined heads were farther than the attention heads
    # on 5% of the data sets and at 3.5 D_eff at most, so the claims are
    # medians over nine data sets (a failure chance below 1e-4 for either,
    # resampling those 150).
    refined_over_plain, refined_over_limit = [], []
    for seed in np.random.default_rng(global_random_seed).integers(2**31 - 1, size=9):
        X, y, C = make_mixture(20_000, 10, 2, noise=1.0, random_state=int(seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            refined = AttentionClustering(2, solver="full", random_state=0).fit(X)
            plain = AttentionClustering(2, solver="full", refine=None, random_state=0).fit(X)
        distance = centroid_distance(refined.cluster_centers_, C)
        refined_over_plain.append(distance / centroid_distance(plain.cluster_centers_, C))
        refined_over_limit.append(distance / information_limit(C, 1.0, 20_000, n_draws=100_000)[0])
    assert np.median(refined_over_plain) < 1.0
    assert np.median(refined_over_limit) < 2.0


def test_posterior_labels_beat_the_direction_rule_with_unequal_weights(global_random_seed):
    # With weights 1:3 the Bayes rule shifts the boundary towards the light
    # cluster; the refined model's posterior mode follows it.
    X, y, C = make_mixture(
        20_000, 6, 2, noise=0.6, weights=[0.25, 0.75], random_state=global_random_seed
    )
    model = AttentionClustering(2, solver="full", random_state=global_random_seed).fit(X)
    order = np.argmax(np.abs(model.cluster_centers_ @ C.T), axis=1)  # head -> cluster
    posterior = np.mean(order[model.labels_] == y)
    direction = np.mean(order[np.argmax(X @ model.cluster_centers_.T, axis=1)] == y)
    assert posterior > direction + 0.01


def test_refine_reports_progress_when_verbose(capsys):
    X, _, _ = make_mixture(500, 5, 2, noise=1.0, random_state=0)
    model = AttentionClustering(2, solver="full", verbose=1, random_state=0).fit(X)
    out = capsys.readouterr().out
    assert out.count("[AttentionClustering] EM on all rows, E step") >= 1
    assert f"EM refinement: {model.refine_n_iter_} passes" in out


# At K = 5 the product regulariser's objective is flat enough that the exact
# solver may stop on max_iter, and warns; the refinement is what is tested.
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_refine_recovers_the_centroids_from_the_product_regulariser(global_random_seed):
    # The product regulariser's automatic strength is calibrated at K = 3; at
    # K = 5 the refinement must still end within 2x of the class means.
    X, y, C = make_mixture(20_000, 20, 5, noise=0.3, random_state=global_random_seed)
    floor = class_means_distance(X, y, C)
    model = AttentionClustering(5, regularization="product", random_state=global_random_seed).fit(X)
    assert centroid_distance(model.cluster_centers_, C) < 2 * floor


@njit(fastmath={"contract"})
def _multiply_add(a, b, c):
    return a * b + c


def _fused_multiply_add():
    """Whether Numba's kernels fuse ``a * b + c`` (a CPU with FMA, and a target that uses it)."""
    return _multiply_add(1.0 + 2.0**-30, 1.0 - 2.0**-30, -1.0) != 0.0


@given(st.floats(min_value=-800.0, max_value=0.0))
def test_e_step_exponential_matches_numpy(x):
    # The E step's vectorised exp (range reduction and a Taylor polynomial):
    # relative error within the bound stated in _kernels, 0 below the floor;
    # the bound without a fused multiply-add is looser (Numba's generic
    # target, which fuses nothing: up to 3.9 times the fused bound, at x
    # near -522; 0.92 times its own on a grid of [-708, 0]).
    X = np.array([[0.0], [1.0]])
    U = np.ones((1, 2))
    # beta = 0: both rows' scores are (0, x), and their responsibilities
    # (1, e^x) / (1 + e^x).
    log_pi = np.array([0.0, x])
    S, counts, partial = _kernel_e_step(X, U, log_pi, 0.0)
    expected = np.exp(x) if x > kern._EXP_FLOOR else 0.0
    bound = (0.5 + 0.035 * abs(x) if _fused_multiply_add() else 0.6 + 0.15 * abs(x)) * 1e-15
    assert counts[1] / 2.0 == pytest.approx(expected / (1.0 + expected), rel=bound, abs=0.0)
    # logsumexp is top + log(z), z = 1 + e^x: exact to rounding in absolute terms.
    assert partial == pytest.approx(2.0 * np.log1p(expected), rel=bound, abs=1e-15)


# --- Newton's steps on all rows after the subsample stage ------------------


def _newton_problem(seed, noise=1.0):
    # Above 4 x _MIN_SUBSAMPLE rows the EM runs on a subsample first, then
    # by Newton's steps on all rows.
    n = 5 * mixture._MIN_SUBSAMPLE
    X, _, C = make_mixture(n, 6, 2, noise=noise, random_state=seed)
    return X, C


def _plain_maximum(X, start, noise):
    # SQUAREM on all rows, run far below the statistical resolution.
    data = DenseRows(X)
    mean_sq = float(np.mean(np.sum(X**2, axis=1)))
    em = _EM(data, mean_sq)
    p = _Params(np.ascontiguousarray(start.T), np.ones(2), noise**2, np.full(2, -np.log(2)))
    p, converged, _ = mixture._run_em(em, p, 1e-20, 5000, 0.9, lambda em, ll: None)
    assert converged
    return p, em


def test_em_stopped_after_one_e_step_returns_its_m_step():
    # The run's last E step was computed and dropped: with max_iter=1 the
    # start came back as it was (weights 1/3 each where the data's are 0.6,
    # 0.3, 0.1). Its M step costs no pass.
    X, _, C = make_mixture(3000, 10, 3, noise=0.4, weights=[0.6, 0.3, 0.1], random_state=0)
    data = DenseRows(X)
    em = _EM(data, float(np.mean(np.sum(X**2, axis=1))))
    start = _Params(np.ascontiguousarray(C.T), np.ones(3), 0.16, np.full(3, -np.log(3)))
    p, converged, _ = mixture._run_em(em, start, 1e-20, 1, 0.9, lambda em, ll: None)
    assert not converged and em.passes == 1
    S, counts, _ = em.expect(start)
    expected = em.maximize(S, counts, start)
    np.testing.assert_array_equal(p.U, expected.U)
    np.testing.assert_array_equal(p.log_pi, expected.log_pi)
    assert np.exp(p.log_pi) == pytest.approx([0.6, 0.3, 0.1], abs=0.05)


def test_newton_em_stopped_after_one_e_step_returns_its_m_step():
    # As _run_em's: the stage on all rows, by Newton's steps, computed its
    # last E step and returned the point it was taken at (max_iter=1: the
    # start, weights 1/3 each).
    X, _, C = make_mixture(6000, 10, 3, noise=0.4, weights=[0.6, 0.3, 0.1], random_state=0)
    start = _Params(np.ascontiguousarray(C.T), np.ones(3), 0.16, np.full(3, -np.log(3)))
    sub = DenseRows(X[:2000])
    sub_em = _EM(sub, float(np.mean(np.sum(X[:2000] ** 2, axis=1))))
    p_sub, converged, rho = mixture._run_em(sub_em, start, 1e-6, 500, 0.9, lambda em, ll: None)
    assert converged
    em = _EM(DenseRows(X), float(np.mean(np.sum(X**2, axis=1))))
    p, converged, _ = mixture._newton_em(
        em, start, _EM(sub, sub_em.mean_sq), p_sub, 1e-20, 1, rho, lambda em, ll: None, 2000
    )
    assert not converged and em.passes == 1
    S, counts, _ = em.expect(start)
    expected = em.maximize(S, counts, start)
    np.testing.assert_array_equal(p.U, expected.U)
    np.testing.assert_array_equal(p.log_pi, expected.log_pi)


@pytest.mark.parametrize("noise", [0.4, 1.0])
def test_newton_steps_reach_the_likelihood_maximum(noise, global_random_seed):
    X, C = _newton_problem(global_random_seed, noise)
    fit = _refined(X, C, noise=noise)
    assert fit.converged
    best, em = _plain_maximum(X, C, noise)
    # Within sqrt(tol) = 0.03 standard errors asked; a tenth is checked.
    se2 = mixture.standard_error(best, em.n_effective)
    assert np.sum((fit.heads - best.U) ** 2) < 0.01 * se2
    assert np.all(np.diff(fit.log_likelihood) >= -1e-12 * np.abs(fit.log_likelihood[1:]))


def test_subsample_stages():
    # The last stage as before the smaller ones (an eighth of the rows, at
    # most 65536, times 16 while under a quarter of the rows); smaller
    # stages before it, an eighth each, down to the floor (8192 rows, 256 a
    # parameter).
    assert mixture.subsample_sizes(10**5, 24) == [12500]
    assert mixture.subsample_sizes(10**6, 24) == [8192, 65536]
    assert mixture.subsample_sizes(10**7, 24) == [8192, 65536, 1048576]
    assert mixture.subsample_sizes(10**6, 100) == [65536]  # floor 25600
    assert mixture.subsample_sizes(30000, 24) == []


@pytest.mark.parametrize("noise", [0.4, 1.0])
def test_newton_steps_carry_each_stage_to_the_next(monkeypatch, noise, global_random_seed):
    # Two subsample stages (the smaller half the larger here, not an
    # eighth, to keep the data small): the second, like all rows, is reached
    # by Newton's steps from the first's fit; the fit ends at the maximum on
    # all rows, as close as with one stage
    # (test_newton_steps_reach_the_likelihood_maximum).
    monkeypatch.setattr(mixture, "_PRE_GROWTH", 2)
    n = 20 * mixture._MIN_SUBSAMPLE
    X, _, C = make_mixture(n, 6, 2, noise=noise, random_state=global_random_seed)
    assert mixture.subsample_sizes(n, mixture.mixture_parameters(6, 2)) == [n // 16, n // 8]
    stages = []
    newton = mixture._newton_em

    def recorded(em, *args, **kwargs):
        stages.append(em.data.n_samples)
        return newton(em, *args, **kwargs)

    monkeypatch.setattr(mixture, "_newton_em", recorded)
    fit = _refined(X, C, noise=noise)
    assert fit.converged
    assert len(stages) == 2 and stages[1] == n and 0.8 < stages[0] / (n // 8) < 1.2
    best, em = _plain_maximum(X, C, noise)
    se2 = mixture.standard_error(best, em.n_effective)
    assert np.sum((fit.heads - best.U) ** 2) < 0.01 * se2


@pytest.mark.parametrize("shift", [0.0, 2.0])
def test_auto_norms_are_read_at_the_first_subsample_fit(monkeypatch, shift, global_random_seed):
    # norms="auto" with subsample stages: the test is read at the first
    # subsample's equal-norm fit, and where it passes there (rows shifted off
    # the origin: clusters at different norms) every later stage, all rows
    # among them, starts free; where it does not (the paper's mixture, one
    # norm) every stage stays equal, and so does the fit.
    n = 4 * mixture._SUBSAMPLE + 8
    X, _, C = make_mixture(n, 5, 3, noise=0.7, random_state=global_random_seed)
    X = X + shift / np.sqrt(5)
    C = C + shift / np.sqrt(5)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    assert mixture.subsample_sizes(n, mixture.mixture_parameters(5, 3))
    entering = []
    newton = mixture._newton_em

    def recorded(em, p0, *args, **kwargs):
        entering.append(p0.free)
        return newton(em, p0, *args, **kwargs)

    monkeypatch.setattr(mixture, "_newton_em", recorded)
    tight = dict(noise=0.7, tol=1e-12, max_iter=2000, random_state=global_random_seed)
    fit = _refined(X, C, norms="auto", **tight)
    assert entering and fit.free == bool(shift)
    assert entering == [bool(shift)] * len(entering)
    # Freed early, the fit reaches the maximum of the free model on all rows,
    # as a fit with free norms from the start does.
    if shift:
        free = _refined(X, C, norms="free", **tight)
        assert np.sum((fit.heads - free.heads) ** 2) < 1e-3 * mixture.standard_error(
            mixture._Params(fit.heads, fit.radii, fit.variance, np.log(fit.weights), True),
            X.shape[0],
        )


def test_auto_norms_ask_whether_the_rows_have_one_norm_once():
    # spherical_rows reads the rows: asked when the test first passes (on the
    # first subsample), its answer stands for all rows too.
    n = 4 * mixture._SUBSAMPLE + 8
    X, _, C = make_mixture(n, 5, 3, noise=0.7, random_state=0)
    X = X + 2.0 / np.sqrt(5)
    asked = []

    def spherical_rows():
        asked.append(True)
        return True

    fit = _refined(X, C, noise=0.7, norms="auto", spherical_rows=spherical_rows)
    assert not fit.free and asked == [True]


@pytest.mark.parametrize("tol", [1e-3, 1.0])
def test_subsample_stages_stop_at_their_own_resolution(monkeypatch, tol, global_random_seed):
    # Every stage before the last (SQUAREM on the smallest subsample, Newton's
    # steps to the larger) runs to max(tol, _STAGE_TOL); only all rows to tol.
    monkeypatch.setattr(mixture, "_PRE_GROWTH", 2)
    n = 20 * mixture._MIN_SUBSAMPLE
    X, _, C = make_mixture(n, 6, 2, noise=1.0, random_state=global_random_seed)
    calls = []

    def recording(name, original):
        def run(em, *args, **kwargs):
            # tol is the fourth argument from the end in both signatures.
            calls.append((name, em.data.n_samples, args[-4]))
            return original(em, *args, **kwargs)

        return run

    monkeypatch.setattr(mixture, "_run_em", recording("em", mixture._run_em))
    monkeypatch.setattr(mixture, "_newton_em", recording("newton", mixture._newton_em))
    fit = _refined(X, C, noise=1.0, tol=tol, random_state=global_random_seed)
    assert fit.converged
    stage_tol = max(tol, mixture._STAGE_TOL)
    assert [name for name, _, _ in calls[:3]] == ["em", "newton", "newton"]
    assert [rows < n for _, rows, _ in calls[:3]] == [True, True, False]
    # (SQUAREM that takes over from a rejected Newton step keeps its stage's tol.)
    assert all(tol_ == (tol if rows == n else stage_tol) for _, rows, tol_ in calls)


def test_newton_falls_back_to_em_when_a_step_loses_likelihood(monkeypatch, global_random_seed):
    # A solver that returns a wild step: the likelihood check rejects it and
    # SQUAREM finishes at the same maximum.
    X, C = _newton_problem(global_random_seed)

    def wild(product, b, rtol, max_steps):
        return 50.0 * b, True

    monkeypatch.setattr(mixture, "gmres", wild)
    fit = _refined(X, C, noise=1.0, random_state=global_random_seed)
    assert fit.converged
    best, em = _plain_maximum(X, C, 1.0)
    # SQUAREM's own stop: its likelihood-gain rule leaves the heads a
    # fraction of a standard error from the maximum (see _run_em; over 300
    # subsample draws at seed 0: median 0.01, largest 0.36 squared standard
    # errors), within the statistical resolution.
    assert np.sum((fit.heads - best.U) ** 2) < mixture.standard_error(best, em.n_effective)
    assert np.all(np.diff(fit.log_likelihood) >= -1e-12 * np.abs(fit.log_likelihood[1:]))


def _first_split_steps(monkeypatch, noise, seeds):
    # Each seed's first Newton step on all rows: (estimated squared error of
    # the heads, without the safety factor; actual squared distance of the
    # step's end to the maximum; that maximum's squared standard error).
    recorded = []
    solve = mixture._SplitNewton.solve

    def recording(self, r):
        x, error = solve(self, r)
        recorded.append((self, r, x))
        return x, error

    monkeypatch.setattr(mixture._SplitNewton, "solve", recording)
    out = []
    for seed in seeds:
        recorded.clear()
        X, C = _newton_problem(seed, noise)
        _refined(X, C, noise=noise, random_state=seed)
        solver, r, x = recorded[0]
        steps = [system.solve(r, mixture._SPLIT_RTOL)[0] for system in solver.systems]
        heads = slice(0, solver.n_heads)
        spread = float(np.sum((steps[0][heads] - steps[1][heads]) ** 2)) / 4.0
        best, em = _plain_maximum(X, C, noise)
        # The step's end, as _newton_em forms it from the subsample's fit.
        start = solver.systems[0].p
        end = start.from_vector(start.vector() + x, em.floor)
        se2 = mixture.standard_error(best, em.n_effective)
        out.append((spread, float(np.sum((end.U - best.U) ** 2)), se2))
    return out


@pytest.mark.parametrize("noise", [0.4, 1.0])
def test_split_half_estimate_tracks_the_newton_steps_error(monkeypatch, noise):
    # _SplitNewton: ||x_1 - x_2||^2 / 4 estimates the squared error of the
    # mean step on the heads (the Jacobian's sampling error). One draw's
    # estimate scatters by a factor of a few either way; over ten draws its
    # median is within a factor 5 of the actual error's (halves that shared
    # their rows would give 0, a wrong scale a factor 4 or 16 more).
    out = _first_split_steps(monkeypatch, noise, range(10))
    spread, actual, _ = (np.array(v) for v in zip(*out))
    assert 1 / 5 < np.median(spread) / np.median(actual) < 5


def test_one_pass_over_all_rows_when_the_first_step_is_resolved(global_random_seed):
    # Well-separated clusters: the first Newton step's estimated error is
    # below sqrt(tol) standard errors, and the refinement stops there, one E
    # step on all rows, within a tenth of a standard error of the maximum.
    # The estimate is a random variable: on 5 of 400 of the test's draws it
    # falls above and a second pass stops at the maximum, so the count is
    # over 20 draws (4 or more second passes: probability about 1e-4).
    passes = []
    for seed in np.random.SeedSequence(global_random_seed).generate_state(20):
        X, C = _newton_problem(int(seed), 0.3)
        fit = _refined(X, C, noise=0.3, random_state=int(seed))
        assert fit.converged
        passes.append(fit.n_iter)
        best, em = _plain_maximum(X, C, 0.3)
        error = np.sum((fit.heads - best.U) ** 2)
        assert error < 0.01 * mixture.standard_error(best, em.n_effective)
    assert max(passes) <= 2 and passes.count(1) >= 17, passes


# --- Stopping rules ----------------------------------------------------------


@pytest.mark.parametrize("free", [False, True])
def test_free_parameters_are_the_bic_count(free):
    # math.md section 7: p = K d + 1 with a common norm, K d + K with free norms.
    d, K = 7, 4
    p = _Params(np.eye(d)[:, :K], np.ones(K), 0.5, np.full(K, -np.log(K)), free)
    assert mixture.free_parameters(p) == (K * d + K if free else K * d + 1)


@pytest.mark.parametrize("free", [False, True])
def test_standard_error_of_a_head_of_almost_no_weight_is_infinite(free):
    # math.md section 7: sum_k 1 / pi_k. A head whose weight underflows to a
    # subnormal number (exp(-740)) has an infinite standard error: inf, not a
    # RuntimeWarning (the suite turns the package's into errors).
    d, K = 5, 3
    p = _Params(np.eye(d)[:, :K], np.ones(K), 0.5, np.array([-740.0, -0.7, -0.7]), free)
    assert mixture.standard_error(p, 1000.0) == np.inf
    p = _Params(np.eye(d)[:, :K], np.ones(K), 0.5, np.full(K, -np.log(K)), free)
    assert mixture.standard_error(p, 1000.0) == pytest.approx((d - 1) * 0.5 / 1000.0 * K * K)


@pytest.mark.parametrize("free", [False, True])
def test_standard_error_is_the_spread_of_the_class_means_directions(free):
    # math.md section 7, "Stopping at the statistical resolution": a head
    # estimated from the N pi_k points of its cluster, the mean of noise of
    # variance tau^2 seen at radius r_k, errs by (d - 1) tau^2 / (N pi_k
    # r_k^2) in squared distance on the sphere, so that SE^2 = (d - 1) tau^2
    # / N sum_k 1 / (pi_k r_k^2) (free norms; r_k = r for the common norm).
    # Against the mean squared distance of the normalised class means,
    # drawn directly as N(r_k mu_k, tau^2 / (N pi_k) I), over 20 000
    # samples: within 5 of its standard errors (5 standard errors are 1.7%
    # of it, under the 2.5% asserted; the distance's second-order term,
    # about tau^2 / (N pi_k r_k^2) relative, is at most 2e-3 of it). A
    # common radius for free norms, or d for d - 1, is off by 50 standard
    # errors or more.
    rng = np.random.default_rng(3)
    d, K, N, tau, draws = 6, 3, 4000.0, 0.8, 20_000
    U = np.linalg.qr(rng.standard_normal((d, K)))[0]
    pi = np.array([0.5, 0.3, 0.2])
    radii = np.array([1.0, 1.6, 0.7]) if free else np.full(K, 1.3)
    p = _Params(U, radii, tau**2, np.log(pi), free)
    sd = tau / np.sqrt(N * pi)
    means = radii * U + sd * rng.standard_normal((draws, d, K))
    heads = means / np.linalg.norm(means, axis=1, keepdims=True)
    squared = np.sum((heads - U) ** 2, axis=(1, 2))
    se = squared.std() / np.sqrt(draws)
    exact = mixture.standard_error(p, N)
    assert 5 * se <= 0.025 * exact
    assert abs(squared.mean() - exact) <= 5 * se


@given(
    st.floats(min_value=0.01, max_value=0.999),
    st.floats(min_value=0.1, max_value=10.0),
    st.floats(min_value=0.1, max_value=10.0),
)
def test_remaining_gain_of_a_linear_iteration(rho, curvature, start):
    # EM near its fixed point: x_{t+1} = rho x_t on the gap a x^2 / 2. A step
    # that gains g leaves the sum of all later gains, which is the gap after it.
    def gap(x):
        return curvature * x * x / 2.0

    gain = gap(start) - gap(rho * start)
    later = sum(gap(rho**t * start) - gap(rho ** (t + 1) * start) for t in range(1, 20_000))
    assert mixture.remaining_gain(gain, rho) == pytest.approx(later, rel=1e-6, abs=1e-12)
    assert mixture.remaining_gain(-1.0, rho) == 0.0


def test_signs_from_the_rows_given_and_no_pass_over_all_rows(monkeypatch, global_random_seed):
    # Heads that start with wrong signs are turned on the rows given as
    # sign_rows (a subsample), with no pass of head_totals over all rows,
    # and the fit is the one that turns them on all rows (at d = 24 the
    # mixture's 256 rows per parameter leave no subsample stage at this n).
    # The default fit turns them on its start's rows: no such pass either.
    X, _, C = make_mixture(70_000, 24, 3, noise=0.4, random_state=global_random_seed)
    assert mixture.subsample_sizes(len(X), mixture.mixture_parameters(24, 3, False)) == []
    flipped = C * np.array([-1.0, 1.0, -1.0])[:, None]
    calls = []
    original = DenseRows.head_totals

    def counted(self, U):
        calls.append(self.n_samples)
        return original(self, U)

    monkeypatch.setattr(DenseRows, "head_totals", counted)
    rows = DenseRows(X)
    mean_sq = float(np.mean(np.sum(X**2, axis=1)))
    sample = rows.subsample(np.random.RandomState(global_random_seed), 16384)
    assert sample.n_samples < len(X)
    given_rows = refine_heads(rows, flipped.T.copy(), mean_sq, 0.4, sign_rows=sample)
    assert calls == [sample.n_samples]
    on_all = refine_heads(rows, flipped.T.copy(), mean_sq, 0.4)
    assert calls[-1] == len(X)
    np.testing.assert_allclose(given_rows.heads, on_all.heads, atol=1e-9)
    assert np.all(np.sum(given_rows.heads * C.T, axis=0) > 0.9)
    calls.clear()
    AttentionClustering(3, random_state=global_random_seed).fit(X)
    assert len(X) not in calls


# --- SQUAREM's step ----------------------------------------------------------


def _squarem_start(seed, free, weighted, tau0):
    """The SQUAREM tests' rows and start: ``(X, w, (U0, pi0, radii0), em, p0)``."""
    X, _, C = _problem(seed, n=800, d=5, K=3, noise=0.7)
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.2, 2.0, len(X)) if weighted else None
    U0 = C.T + 0.4 * rng.standard_normal(C.T.shape)
    U0 /= np.linalg.norm(U0, axis=0)
    pi0 = np.array([0.5, 0.3, 0.2])
    radii0 = np.array([0.8, 1.1, 1.0]) if free else np.full(3, 0.9)
    mean_sq = float(np.average(np.sum(X**2, axis=1), weights=w))
    em = _EM(DenseRows(X, w, n_threads=1), mean_sq)
    p0 = _Params(U0.copy(), radii0.copy(), tau0**2, np.log(pi0), free)
    return X, w, (U0, pi0, radii0), em, p0


def _squarem_case(seed, free, weighted, tau0, passes):
    """SQUAREM iterations of _run_em and their NumPy twin; ``(p, expected, record)``.

    ``passes`` E steps from one start: the twin takes two EM steps of the
    written-out M step, SqS3's point in the parameter vector (heads, r, log
    tau^2, log pi) of math.md section 7 at a step length bounded by
    ``step_max`` (1 at first, times 4 after a kept point at the bound,
    divided by 4, not below 1, after a refused one), kept if its likelihood
    is at least the first EM iterate's, else the second EM iterate, and
    counts the E steps as the run does (one at the start, one at each EM
    iterate and each point). ``record`` holds, for each point, ``(ratio,
    step_max, kept)``: ``||r|| / ||v||``, SqS3's step length before its
    bounds, and the bound it met.
    """
    X, w, (U0, pi0, radii0), em, p0 = _squarem_start(seed, free, weighted, tau0)
    p, converged, _ = mixture._run_em(em, p0, 0.0, passes, 0.9, lambda em, ll: None)
    assert em.passes == passes and not converged

    def vector(q):
        U, pi, radii, tau = q
        return mixture_vector(U, radii, tau**2, pi, free)

    q, used, step_max, record = (U0, pi0, radii0, tau0), 1, 1.0, []
    while used < passes:
        q1 = mixture_em_step(X, w, *q, free=free)
        used += 1
        q2 = mixture_em_step(X, w, *q1, free=free)
        v0, v1, v2 = vector(q), vector(q1), vector(q2)
        ratio = np.linalg.norm(v1 - v0) / np.linalg.norm(v2 - 2.0 * v1 + v0)
        point, length = squarem_point(v0, v1, v2, step_max)
        if used < passes:
            used += 1
            U, radii, tau2, pi = mixture_from_vector(point, 5, 3, free)
            kept = reference_log_likelihood(
                X, w, U, pi, radii, np.sqrt(tau2)
            ) >= reference_log_likelihood(X, w, *q1)
            record.append((ratio, step_max, kept))
            if kept:
                step_max = step_max * 4.0 if length == step_max else step_max
                q = (U, pi, radii, np.sqrt(tau2))
                continue
            step_max = max(step_max / 4.0, 1.0) if length == step_max else step_max
        q = q2
        if used >= passes:
            break
        used += 1
    else:
        # The run stops at its last E step and returns that E step's M step
        # (it costs no pass).
        q = mixture_em_step(X, w, *q, free=free)
    U, pi, radii, tau = q
    return p, (U, radii, tau**2, pi), record


# A start at tau = 0.55 takes SqS3's step -alpha = ||r|| / ||v|| > 1 at
# first; at tau = 1.5, ||r|| < ||v||, and the step is clipped to alpha = -1
# (whose point is the second EM iterate). Eleven E steps: the first point,
# at step_max = 1, is always the second EM iterate; the later ones meet
# larger bounds.
_SQUAREM_STARTS = {"unclipped": 0.55, "clipped": 1.5}
_SQUAREM_PASSES = 11


@pytest.mark.parametrize("start", _SQUAREM_STARTS)
@pytest.mark.parametrize("free", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_squarem_steps_are_sqs3_with_step_length_control(start, free, weighted, global_random_seed):
    p, (U, radii, tau2, pi), _ = _squarem_case(
        global_random_seed, free, weighted, _SQUAREM_STARTS[start], _SQUAREM_PASSES
    )
    np.testing.assert_allclose(p.U, U, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.radii, radii, rtol=1e-10)
    np.testing.assert_allclose(p.variance, tau2, rtol=1e-10)
    np.testing.assert_allclose(np.exp(p.log_pi), pi, rtol=1e-10)


@pytest.mark.parametrize("free", [False, True])
def test_squarem_starts_reach_every_step_length(free):
    # The test above reaches (at seed 0) each case of the step length: below
    # 1 (clipped to 1), between 1 and step_max (SqS3's own), above step_max
    # (bounded) with step_max > 1, and a refused point, after which the
    # bound shrinks.
    record = [
        r
        for tau0 in _SQUAREM_STARTS.values()
        for weighted in (False, True)
        for r in _squarem_case(0, free, weighted, tau0, _SQUAREM_PASSES)[2]
    ]
    assert any(ratio < 1.0 for ratio, _, _ in record)
    assert any(1.0 < ratio < bound for ratio, bound, _ in record)
    assert any(ratio > bound > 1.0 for ratio, bound, _ in record)
    assert not all(kept for _, _, kept in record)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("free", [False, True], ids=["equal", "free"])
def test_m_step_of_one_head_on_centred_rows_keeps_its_direction(dtype, free):
    # The one centroid of rows centred at their mean is the mean: the E
    # step's sum of the rows is the rounding of that mean, and gave the head
    # its direction. Within _sum_rounding the head keeps its direction, at
    # radius 0. Two heads on the same rows have sums far above it: their M
    # step is the one without the rule.
    X = make_mixture(500, 4, 2, noise=0.3, random_state=0)[0].astype(dtype)
    rows = DenseRows(X).centred(np.mean(X.astype(np.float64), axis=0))
    em = _EM(rows, rows.norm_moments()[0])
    one = _Params(np.eye(4, 1), np.ones(1), 0.1, np.zeros(1), free)
    S, counts, _ = em.expect(one)
    assert np.linalg.norm(S) > 0.0
    new = em.maximize(S, counts, one)
    np.testing.assert_array_equal(new.U, one.U)
    assert new.radii[0] == 0.0 and new.variance == pytest.approx(em.mean_sq / 4, rel=1e-12)
    two = _Params(np.eye(4, 2), np.ones(2), 0.1, np.log([0.5, 0.5]), free)
    S, counts, _ = em.expect(two)
    with_rule, without = (
        em.maximize(S, counts, two),
        mixture._maximize(S, counts, em.total, em.mean_sq, em.floor, two),
    )
    np.testing.assert_array_equal(with_rule.vector(), without.vector())


@pytest.mark.parametrize("free", [False, True], ids=["equal", "free"])
@pytest.mark.parametrize("magnitude", [1e-160, 1e-300, 1e-320])
def test_m_step_heads_are_unit_at_any_magnitude_of_their_sums(free, magnitude):
    # A component of weight near e^-370 has sums S_k of about 1e-160, whose
    # squares underflow: its head came out 0.1% off the sphere, and
    # SphericalMixture refused the fit (default fit of make_embeddings,
    # offset 2, K = 10, center=False).
    rng = np.random.default_rng(0)
    S = rng.standard_normal((3, 6))
    S[1] *= magnitude
    counts = np.array([0.6, magnitude, 0.4])
    previous = _Params(np.eye(6, 3), np.ones(3), 0.1, np.log(np.full(3, 1 / 3)), free)
    with np.errstate(under="ignore"):
        p = mixture._maximize(S, counts, 1.0, 5.0, 1e-12, previous)
    np.testing.assert_allclose(np.linalg.norm(p.U, axis=0), 1.0, rtol=1e-14)
    # Subnormal sums hold a few bits: their direction is as exact as they are.
    direction = S[1] / np.linalg.norm(S[1] / magnitude) / magnitude
    np.testing.assert_allclose(p.U[:, 1], direction, rtol=1e-13 if magnitude > 1e-300 else 0.05)


@pytest.mark.parametrize(
    "n_clusters, noise, options",
    [(3, 0.5, {"init": "random"}), (12, 0.3, {"center": True})],
    ids=["exact solver", "EM"],
)
def test_a_fit_that_converges_at_max_iter_does_not_warn(n_clusters, noise, options):
    # The exact solver's last step and the EM's last M step were not tested
    # against tol: a fit whose heads reached the unbounded fit's, exactly,
    # at max_iter warned that it had not converged.
    X = make_mixture(2000, 10, 3, noise=noise, random_state=0)[0]

    def fit(**more):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            model = AttentionClustering(n_clusters, random_state=0, **options, **more).fit(X)
        return model, [w for w in record if issubclass(w.category, ConvergenceWarning)]

    unbounded, warned = fit()
    assert not warned
    for max_iter in range(1, 100):
        model, warned = fit(max_iter=max_iter)
        if np.array_equal(model.cluster_centers_, unbounded.cluster_centers_):
            break
    else:
        pytest.fail("no max_iter below 100 reaches the unbounded fit")
    assert not warned, [str(w.message) for w in warned]


@pytest.mark.parametrize("center, bound", [(False, 12.0), (True, 14.5)])
def test_the_em_on_wide_sparse_rows_holds_few_arrays_of_the_centres_size(
    center, bound, traced_peak
):
    # At 2^18 (or HashingVectorizer's 2^20) features the fit's memory is
    # arrays of K x d: the sparse E step formed an outer product and a
    # difference beside its own sums and held the last tile's sums while the
    # next one's were formed; SQUAREM's vectors made five temporaries; the
    # equal-norm fit and its sums were held through the free-norm run. The
    # fit held 15 (21 centred) arrays of K x d float64 at its peak, 11 (13.4)
    # now, the principal subspace's basis, d x (K + 5), among them.
    rng = np.random.default_rng(0)
    n, d, K = 5000, 2**18, 5
    topics = [rng.choice(d, 2000, replace=False) for _ in range(K)]
    labels = rng.integers(0, K, n)
    columns = np.concatenate([rng.choice(topics[k], 50, replace=False) for k in labels])
    X = sp.csr_matrix((rng.random(n * 50), (np.repeat(np.arange(n), 50), columns)), shape=(n, d))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, peak = traced_peak(
            lambda: AttentionClustering(K, center=center, n_threads=1, random_state=0).fit(X)
        )
    assert peak < bound * K * d * 8
    assert adjusted_rand_score(labels, model.labels_) == 1.0


def _default_and_tight_runs(seed):
    """The true means and the refinement at the default tol and at tol =
    1e-14, from the same start, on 3000 overlapping rows."""
    X, _, C = make_mixture(3000, 5, 3, noise=1.0, centroids="random", random_state=seed)
    rng = np.random.default_rng(seed)
    start = C + 0.3 * rng.standard_normal(C.shape)
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    fit = _refined(X, start, noise=1.0)
    tight = _refined(X, start, noise=1.0, tol=1e-14, max_iter=5000)
    assert fit.converged and tight.converged
    return C, fit, tight, len(X) * (tight.log_likelihood[-1] - fit.log_likelihood[-1])


@pytest.mark.parametrize("seed", [0, 1, 3, 4, 5])
def test_the_default_tolerance_stops_within_a_fraction_of_a_nat_of_the_maximum(seed):
    # The stopping rules (the heads' move against their standard error, the
    # remaining gain against tol p / 2 nats) on 3000 overlapping rows: the
    # run ends within 0.25 nats of a run to tol = 1e-14 from the same start
    # (0.02 to 0.16 measured). A rate without its square root, or a
    # remaining-gain bound four times larger, stopped them 0.4 to 2.5 nats
    # short. (Seed 2 is the case the stopping rule's docstring states: a
    # rate read after an extrapolation stops it 3.5 nats short.)
    assert _default_and_tight_runs(seed)[-1] < 0.25


@pytest.mark.parametrize("seed", [2, 25, 34])
def test_a_run_that_stops_short_is_not_farther_from_the_true_means(seed):
    # The cases of _run_em's docstring that stop 3.5 to 4.9 nats below the
    # maximum: the maximum's summed squared distance to the true means is
    # larger than the run's (0.36 to 1.38 against 0.08 to 0.17).
    C, fit, tight, gap = _default_and_tight_runs(seed)

    def distance(run):
        means = (run.heads * run.radii).T
        return min(
            float(np.sum((means[list(order)] - C) ** 2))
            for order in itertools.permutations(range(len(C)))
        )

    assert gap > 3.0
    assert distance(fit) < distance(tight)


def test_the_rate_read_after_an_extrapolation_lets_a_crawl_stop():
    # Where the clusters barely separate, EM crawls at a rate near 1 and the
    # rate read on the two EM steps from a kept SQUAREM point lets the rules
    # stop (_run_em's docstring): 55 passes here. Keeping instead the last
    # rate read from an EM iterate ran 446 (and 30000 rows, d = 384, K = 50
    # ran to max_iter, 500 against 50, for the same ARI).
    X, _, _ = make_mixture(5000, 100, 20, noise=0.5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = AttentionClustering(20, random_state=0).fit(X)
    assert model.refine_n_iter_ <= 100


def test_squarem_keeps_a_point_only_as_likely_as_the_first_em_iterate(monkeypatch):
    # math.md section 7: SQUAREM's point is kept when its likelihood is at
    # least the first EM iterate's, else the run goes on from the second EM
    # iterate. A point halfway from the start to the first iterate, more
    # likely than the start and less than that iterate, is refused (a rule
    # against the start's likelihood kept it; the twin test above meets no
    # such point).
    *_, em, p0 = _squarem_start(0, free=False, weighted=False, tau0=0.55)
    points = []

    def halfway(p, v1, p2, step_max, floor):
        point = p.from_vector((p.vector() + v1) / 2.0, floor)
        points.append((p, point, p2))
        return point, 1.0

    monkeypatch.setattr(mixture, "_squarem_point", halfway)
    reported = []
    mixture._run_em(em, p0, 0.0, 4, 0.9, lambda em, ll: reported.append(ll))
    ((start, point, second),) = points[:1]
    first = em.maximize(*em.expect(start)[:2], start)
    ll = {
        name: em.expect(q)[2]
        for name, q in [("start", start), ("point", point), ("first", first), ("second", second)]
    }
    assert ll["start"] < ll["point"] < ll["first"]
    # The run's second report is the likelihood it goes on from: the second iterate's.
    assert reported[1] == ll["second"] != ll["point"]
