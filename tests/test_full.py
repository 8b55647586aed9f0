"""Tests of the exact solver: its objective, optimisers, spectral start and solve.

Every closed form is compared with a slow, obviously correct NumPy twin and
with a Monte Carlo average over sequences drawn with replacement
(``math.md`` sections 2 and 3).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attention_cluster import (
    AttentionClustering,
    _exact,
    _kernels,
    _numpy_kernels,
    _plan,
    _spectral,
)
from attention_cluster._exact import solve_exact
from attention_cluster._objective import exact_objective
from attention_cluster._optimize import minimize_on_spheres, polish_on_spheres
from attention_cluster._passes import DenseRows
from attention_cluster._scale import _noise_from_norms, estimate_spectrum
from attention_cluster._settings import auto_reg_strength, local_reg_strength
from attention_cluster._spectral import (
    MAX_ROWS_FACTOR,
    REFERENCE_RATIO,
    ROWS_PER_HEAD,
    SUBSAMPLE,
    spectral_init,
    start_rows,
)
from attention_cluster._sphere import project_tangent, retract
from attention_cluster.datasets import make_mixture
from attention_cluster.metrics import centroid_distance, class_means_distance
from attention_cluster.theory import pairwise_regularizer, population_risk, unbiased_temperature

REGULARIZATIONS = [None, "pairwise", "product"]


# --- NumPy twins -------------------------------------------------------------


def reference_objective(X, sample_weight, U, temperature, L, regularization, rho):
    """``math.md`` section 3, term by term, with M4 and Q formed explicitly."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    w = w / w.sum()
    K = U.shape[1]
    c = temperature * K / L
    sq = np.sum(X**2, axis=1)
    M = (X * w[:, None]).T @ X
    M4 = (X * (w * sq)[:, None]).T @ X
    Q = (L - 1) * M4 + (L - 1) * (L - 2) * M @ M
    A = X @ U
    s = np.sum(A**2, axis=1)
    h = np.sum((X @ M @ U) * A, axis=1)
    risk = (
        w @ ((1 - c * s) ** 2 * sq)
        - 2 * c * (L - 1) * (w @ ((1 - c * s) * h))
        + c**2 * np.trace(U.T @ Q @ U @ U.T @ M @ U)
    )
    if regularization == "pairwise":
        r = sum(w @ (A[:, j] ** 2 * A[:, k] ** 2) for j in range(K) for k in range(j + 1, K))
    elif regularization == "product":
        r = w @ np.prod(A**2, axis=1)
    else:
        r = 0.0
    return risk + rho * r


def sequence_losses(X, p, U, temperature, L, n_sequences, rng):
    """Per-sequence loss ``(1/L) ||S - T(S)||_F^2`` of ``math.md`` section 2,
    for sequences S of L rows of X drawn with replacement with probabilities p."""
    K = U.shape[1]
    c = temperature * K / L
    S = X[rng.choice(len(X), size=(n_sequences, L), p=p)]
    A = S @ U
    G = np.einsum("bld,blk->bdk", S, A)
    T = c * np.einsum("blk,bdk->bld", A, G)
    return np.sum((S - T) ** 2, axis=(1, 2)) / L


def second_moment(X, sample_weight=None):
    return DenseRows(X, sample_weight).second_moment()


def objective_args(X, sample_weight, U, temperature=0.7, L=10, regularization="pairwise", rho=0.3):
    data = DenseRows(X, sample_weight)
    return (data, data.second_moment(), U, temperature, L, regularization, rho)


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 5))
    U = rng.standard_normal((5, 3))
    return X, U / np.linalg.norm(U, axis=0), rng


# --- The exact objective -------------------------------------------------------


@pytest.mark.parametrize("regularization", REGULARIZATIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_objective_matches_reference(problem, regularization, weighted, dtype):
    X, U, rng = problem
    X = X.astype(dtype)
    w = rng.random(len(X)) if weighted else None
    value, _ = exact_objective(*objective_args(X, w, U, regularization=regularization))
    expected = reference_objective(X, w, U, 0.7, 10, regularization, 0.3)
    assert value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("L", [1, 2, 7])
def test_objective_matches_monte_carlo(L):
    # Few distinct rows, unequal weights and heads off the sphere: every term
    # of the closed form matters. Tolerance: 5 standard errors of the mean.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((12, 4))
    w = rng.integers(1, 5, size=12).astype(float)
    U = rng.standard_normal((4, 2))
    losses = sequence_losses(X, w / w.sum(), U, 0.6, L, 200_000, rng)
    args = objective_args(X, w, U, temperature=0.6, L=L, regularization=None, rho=0.0)
    value, _ = exact_objective(*args)
    standard_error = losses.std() / np.sqrt(losses.size)
    assert abs(value - losses.mean()) < 5 * standard_error
    assert standard_error < 1e-2 * value


@pytest.mark.parametrize("regularization", REGULARIZATIONS)
def test_gradient_matches_finite_differences(problem, regularization):
    X, U, rng = problem
    U = U * rng.uniform(0.5, 1.5, size=U.shape[1])  # the formula holds off the sphere
    args = list(objective_args(X, None, U, regularization=regularization))
    _, grad = exact_objective(*args)
    numeric = np.zeros_like(U)
    eps = 1e-6
    for idx in np.ndindex(*U.shape):
        E = np.zeros_like(U)
        E[idx] = eps
        args[2] = U + E
        up = exact_objective(*args)[0]
        args[2] = U - E
        down = exact_objective(*args)[0]
        numeric[idx] = (up - down) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7 * np.abs(numeric).max())


@pytest.mark.parametrize("regularization", ["pairwise", "product"])
def test_regularizer_gradient_alone(problem, regularization):
    # The regulariser's part is linear in rho: difference of two strengths.
    X, U, _ = problem
    v1, g1 = exact_objective(*objective_args(X, None, U, regularization=regularization, rho=1.0))
    v0, g0 = exact_objective(*objective_args(X, None, U, regularization=regularization, rho=0.0))
    A = X @ U
    if regularization == "pairwise":
        r = np.mean(np.sum(A**2, axis=1) ** 2 - np.sum(A**4, axis=1)) / 2
        grad = 2 * X.T @ (A * (np.sum(A**2, axis=1, keepdims=True) - A**2)) / len(X)
    else:
        prod = np.prod(A**2, axis=1)
        grad = np.column_stack(
            [2 * X.T @ (A[:, k] * np.prod(np.delete(A, k, axis=1) ** 2, axis=1)) for k in range(3)]
        ) / len(X)
        r = prod.mean()
    assert v1 - v0 == pytest.approx(r, rel=1e-10)
    np.testing.assert_allclose(g1 - g0, grad, rtol=1e-9, atol=1e-12)


def test_product_gradient_with_a_zero_projection(problem):
    # Prefix/suffix products, not division: a head orthogonal to a row is fine.
    X, U, _ = problem
    X = X.copy()
    X[0] -= U[:, 0] * (X[0] @ U[:, 0])
    _, grad = exact_objective(*objective_args(X, None, U, regularization="product", rho=1.0))
    assert np.all(np.isfinite(grad))


@settings(max_examples=25, deadline=None)
@given(counts=arrays(np.int64, 40, elements=st.integers(0, 3)), seed=st.integers(0, 2**16))
def test_integer_weights_equal_repeated_rows(counts, seed):
    rng = np.random.default_rng(seed)
    counts[0] = max(counts[0], 1)
    X = rng.standard_normal((40, 4))
    U = rng.standard_normal((4, 2))
    weighted = exact_objective(*objective_args(X, counts, U))
    repeated = exact_objective(*objective_args(np.repeat(X, counts, axis=0), None, U))
    assert weighted[0] == pytest.approx(repeated[0], rel=1e-12)
    np.testing.assert_allclose(weighted[1], repeated[1], rtol=1e-10, atol=1e-12)


def test_integer_weights_equal_repeated_rows_in_the_solve():
    X, _, _ = make_mixture(500, 6, 2, noise=0.3, random_state=0)
    counts = np.random.default_rng(0).integers(1, 4, size=len(X))
    kwargs = dict(reg_strength=0.1, random_state=0)
    start = _start(X, 2, "spectral", 0)
    weighted = solve_exact(DenseRows(X, counts), start, 0.8, 50, **kwargs)
    repeated = solve_exact(DenseRows(np.repeat(X, counts, axis=0)), start, 0.8, 50, **kwargs)
    np.testing.assert_allclose(weighted.heads, repeated.heads, atol=1e-8)


def test_unknown_regularization_raises(problem):
    X, U, _ = problem
    with pytest.raises(ValueError, match="regularization must be one of"):
        exact_objective(*objective_args(X, None, U, regularization="l2"))


# --- Geometry and optimisers ---------------------------------------------------


unit_heads = (
    arrays(np.float64, (4, 3), elements=st.floats(-1, 1))
    .filter(lambda U: np.all(np.linalg.norm(U, axis=0) > 1e-3))
    .map(lambda U: U / np.linalg.norm(U, axis=0))
)
tangent_like = arrays(np.float64, (4, 3), elements=st.floats(-10, 10))


@given(U=unit_heads, Z=tangent_like)
def test_projection_is_idempotent_and_tangent(U, Z):
    P = project_tangent(U, Z)
    np.testing.assert_allclose(np.sum(U * P, axis=0), 0.0, atol=1e-12 * (1 + np.abs(Z).max()))
    np.testing.assert_allclose(project_tangent(U, P), P, atol=1e-12 * (1 + np.abs(Z).max()))


@given(U=unit_heads, Z=arrays(np.float64, (3, 4, 3), elements=st.floats(-10, 10)))
def test_projection_of_a_stack_projects_each_slice(U, Z):
    # The L-BFGS pairs are moved to a new tangent space as one stack.
    P = project_tangent(U, Z)
    for Zi, Pi in zip(Z, P):
        np.testing.assert_allclose(
            Pi, project_tangent(U, Zi), rtol=0, atol=1e-12 * (1 + np.abs(Zi).max())
        )


@given(U=unit_heads, Z=tangent_like)
def test_retraction_lands_on_the_spheres(U, Z):
    V = retract(U, project_tangent(U, Z))
    np.testing.assert_allclose(np.linalg.norm(V, axis=0), 1.0, atol=1e-12)


def _recording(fun, visited):
    def wrapped(U):
        visited.append(U.copy())
        return fun(U)

    return wrapped


def test_riemannian_steps_keep_unit_heads():
    X, _, _ = make_mixture(2000, 6, 3, noise=0.3, random_state=0)
    args = list(objective_args(X, None, None, temperature=0.7, L=50, rho=0.1))

    def fun(U):
        args[2] = U
        return exact_objective(*args)

    visited = []
    U0 = np.random.default_rng(0).standard_normal((6, 3)) * 5.0
    result = minimize_on_spheres(_recording(fun, visited), U0, tol=1e-8, max_iter=200)
    assert result.converged
    assert len(visited) > result.n_iter > 5
    for U in visited + [result.heads]:
        np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, atol=1e-12)
    assert np.all(np.diff(result.objective_curve) <= 0)


def test_polish_with_the_exact_hessian_is_newton():
    X, _, _ = make_mixture(3000, 6, 2, noise=0.3, random_state=1)
    moment = second_moment(X)

    def full(U):
        return exact_objective(DenseRows(X), moment, U, 0.8, 50, "pairwise", 0.1)

    cheap_rows = X[::50]
    cheap_moment = second_moment(cheap_rows)

    def cheap(U):
        return exact_objective(DenseRows(cheap_rows), cheap_moment, U, 0.8, 50, "pairwise", 0.1)

    start = minimize_on_spheres(full, np.eye(6)[:, :2] + 0.3, tol=1e-3, max_iter=200)
    reference = minimize_on_spheres(full, start.heads, tol=1e-11, max_iter=200)
    newton = polish_on_spheres(full, full, start.heads, tol=1e-10, max_iter=20, cg_tol=1e-6)
    assert newton.converged and newton.n_iter <= 4
    np.testing.assert_allclose(np.sum(newton.heads * reference.heads, axis=0), 1.0, atol=1e-12)
    # A poor Hessian model (60 rows) is given up early, not iterated on.
    poor = polish_on_spheres(full, cheap, start.heads, tol=1e-11, max_iter=20)
    assert poor.n_iter < 4 and not poor.converged


def test_minimize_reports_non_convergence():
    X, _, _ = make_mixture(500, 5, 2, noise=0.3, random_state=0)
    args = objective_args(X, None, np.eye(5)[:, :2])

    def fun(U):
        return exact_objective(*args[:2], U, *args[3:])

    result = minimize_on_spheres(fun, np.ones((5, 2)) + np.eye(5)[:, :2], tol=0.0, max_iter=3)
    assert not result.converged and result.n_iter == 3 and result.objective_curve.size == 4


def test_a_start_within_tolerance_takes_no_step():
    X, _, _ = make_mixture(500, 5, 2, noise=0.3, random_state=0)
    args = objective_args(X, None, np.eye(5)[:, :2])
    calls = []

    def fun(U):
        calls.append(U)
        return exact_objective(*args[:2], U, *args[3:])

    U0 = np.ones((5, 2)) + np.eye(5)[:, :2]
    loose = minimize_on_spheres(fun, U0, tol=np.inf, max_iter=10)
    assert loose.converged and loose.n_iter == 0 and loose.objective_curve.size == 1
    # One evaluation, at the start: no probe of the curvature, no line search.
    assert len(calls) == 1


def test_a_fit_whose_spectral_start_is_within_the_start_tolerance_takes_no_step(monkeypatch):
    # The paper's two clusters at 10000 rows: the spectral start already
    # lies within the tolerance of a solver that only starts the EM. A step
    # forced there cost a probe of the curvature and a line search, two
    # more evaluations of the objective on all rows, for the same fit.
    import attention_cluster._exact as exact

    X, _, _ = make_mixture(10000, 10, 2, noise=0.3, random_state=0)
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return exact_objective(*args, **kwargs)

    monkeypatch.setattr(exact, "exact_objective", counted)
    model = AttentionClustering(2, random_state=0).fit(X)
    assert model.n_iter_ == 0 and model.loss_curve_.size == 1
    assert len(calls) == 1
    assert model.refine_n_iter_ >= 1


def test_no_step_is_taken_that_does_not_decrease_the_objective():
    # At the minimum, with a gradient of 1e-20 along which every step raises
    # the objective (rounding's kind of gradient): within tol the run has
    # converged where it started; at tol=0 its line search fails and it has
    # not converged, after 0 iterations.
    A = np.eye(5)[:, :2]
    E = np.random.default_rng(0).standard_normal((5, 2))

    def fun(U):
        return float(np.sum((U - A) ** 2)), 2.0 * (U - A) + 1e-20 * E

    within = minimize_on_spheres(fun, A, tol=1e-8, max_iter=10)
    assert within.converged and within.n_iter == 0
    np.testing.assert_array_equal(within.heads, A)
    stuck = minimize_on_spheres(fun, A, tol=0.0, max_iter=10)
    assert not stuck.converged and stuck.n_iter == 0


# --- Initialisation --------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(theta=st.floats(-np.pi, np.pi), seed=st.integers(0, 2**16))
def test_pair_angle_finds_the_exact_minimiser(theta, seed):
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((200, 2)) * [1.0, 0.5] + rng.standard_normal(2)
    weight = rng.random(200)
    best, drop = _kernels.pair_angle(Y[:, 0].copy(), Y[:, 1].copy(), weight)

    def criterion(t):
        a = Y @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        return weight @ (a[:, 0] * a[:, 1]) ** 2

    assert abs(best) <= np.pi / 4 + 1e-12
    assert criterion(best) <= criterion(theta) + 1e-9 * criterion(theta)
    # The drop is the criterion's, from theta = 0 to the minimiser.
    assert drop == pytest.approx(criterion(0.0) - criterion(best), rel=1e-9, abs=1e-12)
    # Weights of length 0 mean unit weights, as in the sweeps' pairwise steps.
    unit = _kernels.pair_angle(Y[:, 0].copy(), Y[:, 1].copy(), np.empty(0))
    assert unit == pytest.approx(_kernels.pair_angle(Y[:, 0].copy(), Y[:, 1].copy(), np.ones(200)))


@pytest.mark.parametrize("regularization", REGULARIZATIONS)
def test_spectral_init_finds_dirac_centroids(regularization):
    # sigma = 0: the top-K eigenspace is the centroids' span and the rotation
    # that minimises the regulariser puts a head on each centroid.
    X, _, C = make_mixture(3000, 8, 3, noise=0.0, random_state=0)
    heads = spectral_init(DenseRows(X), second_moment(X), 3, regularization, random_state=0)
    np.testing.assert_allclose(heads.T @ heads, np.eye(3), atol=1e-12)
    if regularization != "product":  # the product is blind to rotations at sigma = 0, K = 3
        # The rotation minimises a criterion whose minimum is quadratic, so
        # rounding of order eps in the moment moves it by sqrt(eps) in angle:
        # a squared distance of order eps.
        assert centroid_distance(heads.T, C) < 1e-14


def test_spectral_init_is_close_at_moderate_noise():
    X, _, C = make_mixture(20000, 10, 4, noise=0.3, random_state=0)
    heads = spectral_init(DenseRows(X), second_moment(X), 4, "pairwise", random_state=0)
    assert centroid_distance(heads.T, C) < 0.01


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    d=st.integers(2, 12),
    magnitude=st.sampled_from([1e-150, 1.0, 1e150]),
)
def test_the_spectrum_carries_the_eigenvectors_of_its_moment(seed, d, magnitude):
    # One eigendecomposition serves the spectrum and the spectral start:
    # its eigenvectors are orthonormal, each turned by the moment into its
    # eigenvalue times itself, in the eigenvalues' descending order.
    X = np.random.default_rng(seed).standard_normal((50, d)) * magnitude
    spectrum = estimate_spectrum(DenseRows(X), 2)
    V, lam, M = spectrum.eigenvectors, spectrum.eigenvalues, spectrum.moment
    np.testing.assert_allclose(V.T @ V, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(M @ V, V * lam, atol=1e-12 * lam[0])
    assert np.all(np.diff(lam) <= 0)
    # ... and the same vectors as NumPy's of M (up to sign), where the
    # eigenvalues are apart.
    reference = np.linalg.eigh(M)[1][:, ::-1]
    apart = np.min(np.abs(np.diff(lam[:2]))) > 1e-6 * lam[0]
    if apart:
        assert abs(reference[:, 0] @ V[:, 0]) == pytest.approx(1.0, abs=1e-9)


def test_the_default_start_takes_the_spectrums_eigenvectors(monkeypatch):
    # The fit decomposes its d x d moment once: the spectral start takes
    # the spectrum's top eigenvectors, no second eigh.
    calls = []

    def counting(original):
        def call(A, *args, **kwargs):
            if A.shape == (30, 30):
                calls.append(original.__name__)
            return original(A, *args, **kwargs)

        return call

    for name in ("eigh", "eigvalsh"):
        monkeypatch.setattr(np.linalg, name, counting(getattr(np.linalg, name)))
    X, _, _ = make_mixture(3000, 30, 4, noise=0.3, random_state=0)
    AttentionClustering(4, random_state=0).fit(X)
    assert len(calls) == 1


# --- The whole solve -------------------------------------------------------------


def _scaled_mixture(n, d, K, noise, seed, dtype=np.float64):
    X, y, C = make_mixture(n, d, K, noise=noise, random_state=seed)
    floor = class_means_distance(X, y, C)
    return X.astype(dtype), C, floor


def _defaults(K, noise, L=100):
    temperature = unbiased_temperature(noise, L, n_clusters=K) * (L + 1) / (L + 3)
    return temperature, L, local_reg_strength(temperature, K, "pairwise", noise)


def _start(X, K, init, seed):
    """Starting heads as the estimator chooses them: spectral or uniform."""
    rng = np.random.RandomState(seed)
    if init == "random":
        U = rng.standard_normal((X.shape[1], K))
        return U / np.linalg.norm(U, axis=0)
    return spectral_init(DenseRows(X), second_moment(X), K, "pairwise", random_state=rng)


@pytest.mark.parametrize("init", ["spectral", "random"])
@pytest.mark.parametrize("seed", [0, 1])
def test_solve_reaches_the_statistical_floor(init, seed):
    X, C, floor = _scaled_mixture(20000, 10, 2, 0.3, seed)
    temperature, L, rho = _defaults(2, 0.3)
    sol = solve_exact(
        DenseRows(X), _start(X, 2, init, seed), temperature, L, reg_strength=rho, random_state=seed
    )
    assert sol.converged
    assert centroid_distance(sol.heads.T, C) < 2 * floor


@pytest.mark.parametrize("n", [70_000, 300_000], ids=["warm-start", "polish"])
def test_solve_with_a_subsample(n):
    # Above 4 x 16384 rows L-BFGS starts on a subsample; above 16 x 16384 the
    # full data only sees Newton steps, a few passes.
    X, C, floor = _scaled_mixture(n, 5, 2, 0.3, 0)
    temperature, L, rho = _defaults(2, 0.3)
    sol = solve_exact(
        DenseRows(X), _start(X, 2, "spectral", 0), temperature, L, reg_strength=rho, random_state=0
    )
    assert sol.converged and sol.n_iter_warm > 0
    assert sol.n_iter <= (6 if n > 16 * _spectral.SUBSAMPLE else 20)
    assert centroid_distance(sol.heads.T, C) < 2 * floor


def test_lbfgs_after_the_polish_takes_the_full_data_at_its_heads_once(monkeypatch):
    # When the subsample's Newton steps stop before the tolerance, L-BFGS on
    # the full data goes on from the polished heads with the value and
    # gradient the polish took there: no pass over the data a second time
    # at (nearly) the same heads.
    n = 70_000
    X, _, _ = _scaled_mixture(n, 10, 4, 0.5, 0)
    temperature, L, rho = _defaults(4, 0.5)
    heads = []

    def recorded(rows, moment, U, *args):
        if rows.n_weighted == n:
            heads.append(np.array(U))
        return exact_objective(rows, moment, U, *args)

    monkeypatch.setattr(_exact, "exact_objective", recorded)
    sol = solve_exact(
        DenseRows(X), _start(X, 4, "spectral", 0), temperature, L, reg_strength=rho, random_state=0
    )
    assert sol.converged and sol.n_iter_warm > 0
    # The polish stopped early and L-BFGS went on (more steps than Newton takes).
    assert sol.n_iter > 6
    gaps = [np.max(np.abs(b - a)) for a, b in zip(heads, heads[1:])]
    assert min(gaps) > 1e-12


def test_solve_is_deterministic():
    X, _, _ = _scaled_mixture(70000, 5, 2, 0.5, 0)
    start = _start(X, 2, "random", 3)
    first = solve_exact(DenseRows(X), start, 0.6, 100, reg_strength=0.05, random_state=3)
    second = solve_exact(DenseRows(X), start, 0.6, 100, reg_strength=0.05, random_state=3)
    np.testing.assert_array_equal(first.heads, second.heads)
    np.testing.assert_array_equal(first.objective_curve, second.objective_curve)


def test_float32_matches_float64():
    X, _, _ = _scaled_mixture(5000, 6, 2, 0.3, 0)
    X32 = X.astype(np.float32)
    kwargs = dict(reg_strength=0.1, random_state=0)
    start = _start(X, 2, "spectral", 0)
    sol32 = solve_exact(DenseRows(X32), start, 0.8, 100, **kwargs)
    sol64 = solve_exact(DenseRows(X32.astype(np.float64)), start, 0.8, 100, **kwargs)
    np.testing.assert_allclose(sol32.heads, sol64.heads, atol=1e-9)


@pytest.mark.parametrize("init", ["spectral", "random"])
def test_more_heads_than_features(init):
    X, _, _ = _scaled_mixture(2000, 3, 3, 0.3, 0)
    sol = solve_exact(
        DenseRows(X), _start(X, 5, init, 0), 0.5, 20, reg_strength=0.1, random_state=0
    )
    assert sol.heads.shape == (3, 5)
    np.testing.assert_allclose(np.linalg.norm(sol.heads, axis=0), 1.0, atol=1e-12)
    assert np.all(np.isfinite(sol.objective_curve))


def test_zero_rows_and_zero_data():
    X, C, _ = _scaled_mixture(4000, 6, 2, 0.2, 0)
    with_zeros = np.vstack([X, np.zeros((1000, 6))])
    sol = solve_exact(
        DenseRows(with_zeros),
        _start(with_zeros, 2, "spectral", 0),
        0.8,
        100,
        reg_strength=0.1,
        random_state=0,
    )
    assert sol.converged and centroid_distance(sol.heads.T, C) < 1e-2
    zero = solve_exact(
        DenseRows(np.zeros((50, 4))), np.eye(4)[:, :2], 0.8, 100, reg_strength=0.1, random_state=0
    )
    assert zero.converged and zero.n_iter == 0
    np.testing.assert_allclose(np.linalg.norm(zero.heads, axis=0), 1.0)


def test_single_distinct_point():
    point = np.array([3.0, 4.0, 0.0, 0.0]) / 5.0
    tiled = np.tile(point, (100, 1))
    sol = solve_exact(
        DenseRows(tiled),
        _start(tiled, 2, "spectral", 0),
        0.8,
        100,
        reg_strength=0.1,
        random_state=0,
    )
    assert np.all(np.isfinite(sol.heads))
    assert np.max(np.abs(point @ sol.heads)) == pytest.approx(1.0, abs=1e-6)


def test_init_shape_is_checked():
    X, _, _ = _scaled_mixture(500, 4, 2, 0.3, 0)
    with pytest.raises(ValueError, match=r"start must have shape \(4, n_heads\)"):
        solve_exact(DenseRows(X), np.ones((2, 4)), 0.8, 10)


# --- The default regularisation strength ----------------------------------------


def _tilt_curvature(X, heads, temperature, L, rho, direction, h=1e-3):
    """Second derivative of the objective when head 0 turns towards ``direction``."""
    moment = second_moment(X)

    def at(angle):
        U = heads.copy()
        U[:, 0] = np.cos(angle) * heads[:, 0] + np.sin(angle) * direction
        return exact_objective(DenseRows(X), moment, U, temperature, L, "pairwise", rho)[0]

    return (at(h) - 2 * at(0.0) + at(-h)) / h**2


@pytest.mark.parametrize("noise", [0.5, 1.0])
def test_centroids_lose_stability_at_the_derived_strength(noise):
    # local_reg_strength is a fraction of rho_max = lambda K / (K - 1), where the
    # regulariser's negative curvature out of the centroids' span cancels the
    # risk's (L -> infinity). Check the sign change around rho_max.
    X, _, C = make_mixture(200_000, 3, 2, noise=noise, random_state=0)
    L = 1000
    temperature = float(unbiased_temperature(noise, L, n_clusters=2))
    rho_max = temperature * 2
    heads, out = C.T, np.cross(C[0], C[1])
    assert _tilt_curvature(X, heads, temperature, L, 0.7 * rho_max, out) > 0
    assert _tilt_curvature(X, heads, temperature, L, 1.3 * rho_max, out) < 0
    rho = local_reg_strength(temperature, 2, "pairwise", noise)  # the local limit of the default
    assert 0 < rho < 0.25 * rho_max


@pytest.mark.parametrize("K", [2, 3, 4])
@pytest.mark.parametrize("noise", [0.3, 0.7])
def test_tilt_curvatures_and_rho_max_match_the_population_closed_forms(K, noise):
    # math.md section 3, "The regulariser's strength": turning head 0 by phi
    # towards a noise direction, at L = inf and the unbiased temperature,
    # R'' = 2 sigma^2 beta / K and r'' = -2 sigma^2 (K - 1) / K, so rho_max =
    # -R'' / r'' = lambda K / (K - 1); the default is a tenth of it. Against
    # finite differences of theory's exact population risk and regulariser.
    d = K + 2
    C = np.eye(K, d)
    lam = float(unbiased_temperature(noise, np.inf, n_clusters=K))
    out = np.eye(d)[K]

    def heads(phi):
        H = C.copy()
        H[0] = np.cos(phi) * C[0] + np.sin(phi) * out
        return H

    def curvature(f, h=1e-3):
        return (f(h) - 2 * f(0.0) + f(-h)) / h**2

    risk = curvature(lambda p: population_risk(heads(p), C, noise, lam, np.inf))
    reg = curvature(lambda p: pairwise_regularizer(heads(p), C, noise))
    np.testing.assert_allclose(risk, 2 * noise**2 * lam * K / K, rtol=1e-5)
    np.testing.assert_allclose(reg, -2 * noise**2 * (K - 1) / K, rtol=1e-5)
    np.testing.assert_allclose(
        local_reg_strength(lam, K, "pairwise", noise), 0.1 * -risk / reg, rtol=1e-5
    )


@pytest.mark.parametrize("K", [2, 3, 4])
def test_product_tilt_curvature_matches_its_closed_form_by_monte_carlo(K):
    # math.md section 3, "The regulariser's strength": turning head 0 by phi
    # towards a noise direction, the product regulariser r = E[prod_k <mu_k,
    # x>^2] has r'' = -2 sigma^(2(K-1)) / K at the centroids (its rho_max
    # lambda K / sigma^(2(K-2)) follows with the risk's R''). The second
    # differences of each draw's product (common draws at phi = -h, 0, h:
    # a trigonometric polynomial, so O(h^2) off the derivative) are averaged
    # over 1.2 million draws, as many from each component (a stratified
    # mean, whose standard error sums the components' variances); the mean
    # is within 5 standard errors of the closed form, and 5 standard errors
    # are under 15% of it, so that a factor sigma^2 or K / (K - 1) off fails.
    rng = np.random.default_rng(K)
    d, noise, n, h = K + 2, 0.3, 1_200_000, 1e-3
    C = np.eye(K, d)
    z = np.repeat(np.arange(K), n // K)
    x = C[z] + noise * rng.standard_normal((z.size, d))
    out = np.eye(d)[K]

    def product(phi):
        H = C.copy()
        H[0] = np.cos(phi) * C[0] + np.sin(phi) * out
        return np.prod((x @ H.T) ** 2, axis=1)

    second = (product(h) - 2 * product(0.0) + product(-h)) / h**2
    exact = -2 * noise ** (2 * (K - 1)) / K
    se = np.sqrt(sum(np.var(second[z == k]) for k in range(K)) / (n // K)) / K
    assert 5 * se <= 0.15 * abs(exact)
    assert abs(second.mean() - exact) <= 5 * se


@pytest.mark.parametrize("K", [2, 3, 5])
@pytest.mark.parametrize("noise", [0.3, 0.7])
def test_pairwise_regulariser_costs_more_on_the_span_than_off_it(K, noise):
    # math.md section 3, "The regulariser's strength" (auto_reg_strength's
    # global limit): with the other K - 1 heads at their centroids, a head
    # on a centroid pays (K - 1) sigma^2 / K more of the pairwise regulariser
    # than a head on a noise direction. Against theory's population value.
    d = K + 2
    C = np.eye(K, d)
    off = C.copy()
    off[0] = np.eye(d)[K]
    gap = pairwise_regularizer(C, C, noise) - pairwise_regularizer(off, C, noise)
    np.testing.assert_allclose(gap, (K - 1) * noise**2 / K, rtol=1e-12)


def test_noise_from_the_norms_kurtosis_matches_monte_carlo(global_random_seed):
    # math.md section 7, "Scale and noise from the spectrum": with K >= d the
    # noise comes from E||x||^4 / (E||x||^2)^2 of x = s (mu + sigma g).
    rng = np.random.default_rng(global_random_seed)
    d, n, s, sigma = 3, 400_000, 2.5, 0.4
    mu = rng.standard_normal((8, d))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    X = s * (mu[rng.integers(0, 8, n)] + sigma * rng.standard_normal((n, d)))
    sq = np.sum(X * X, axis=1)
    mean_sq, mean_fourth = sq.mean(), np.mean(sq * sq)
    # The moments' closed forms, within a few Monte Carlo standard errors.
    assert abs(mean_sq - s**2 * (1 + d * sigma**2)) < 5 * sq.std() / np.sqrt(n)
    fourth = s**4 * (1 + (2 * d + 4) * sigma**2 + (d * d + 2 * d) * sigma**4)
    assert abs(mean_fourth - fourth) < 5 * np.std(sq * sq) / np.sqrt(n)
    np.testing.assert_allclose(_noise_from_norms(mean_sq, mean_fourth, d), sigma**2, rtol=0.05)


@pytest.mark.parametrize(
    "weights", [[1 / 3, 1 / 3, 1 / 3], [0.6, 0.3, 0.1]], ids=["equal", "unequal"]
)
@pytest.mark.parametrize(("scale", "noise"), [(2.5, 0.4), (1e-3, 1.2), (1e6, 0.05)])
def test_scale_and_noise_are_read_off_the_second_moments_spectrum(weights, scale, noise):
    # math.md section 7, "Scale and noise from the spectrum": M = s^2 (sum_c
    # w_c mu*_c mu*_c^T + sigma^2 I_d) has K eigenvalues s^2 (w_c + sigma^2)
    # and d - K eigenvalues s^2 sigma^2, so s^2 sigma^2 is the mean of the d -
    # K smallest and s^2 the sum of the K largest less K s^2 sigma^2. Rows
    # whose second moment is exactly M (sqrt(d lambda_i) v_i, one per
    # eigenpair) give back s and sigma to rounding, whatever the weights.
    rng = np.random.default_rng(0)
    d, K = 8, 3
    C = np.linalg.qr(rng.standard_normal((d, K)))[0].T
    M = scale**2 * ((np.asarray(weights) * C.T) @ C + noise**2 * np.eye(d))
    values, vectors = np.linalg.eigh(M)
    X = (vectors * np.sqrt(d * values)).T
    spectrum = estimate_spectrum(DenseRows(X), K)
    assert spectrum.scale == pytest.approx(scale, rel=1e-12)
    assert spectrum.noise == pytest.approx(noise, rel=1e-12)


@pytest.mark.parametrize("K", [3, 4])
@pytest.mark.parametrize("noise", [0.05, 0.3, 0.7])
def test_product_strength_is_the_pairwise_times_the_calibrated_power(K, noise):
    # math.md section 3, "The regulariser's strength": the product's default
    # is a tenth of the pairwise rho_max lambda K / (K - 1) times (0.3 /
    # max(sigma, 0.1))^(2(K - 2)); below sigma = 0.1 the factor stays at 3^(2(K - 2)).
    lam = 0.8
    factor = (0.3 / max(noise, 0.1)) ** (2 * (K - 2))
    expected = 0.1 * lam * K / (K - 1) * factor
    np.testing.assert_allclose(local_reg_strength(lam, K, "product", noise), expected, rtol=1e-14)


def _risk_drop(head, C, noise, a, weights):
    """f(m) of math.md section 3: E||X||^2 less the population risk of one head, a = lambda K."""
    d = C.shape[1]
    return 1 + d * noise**2 - population_risk(head[None], C, noise, a, np.inf, weights=weights)


@pytest.mark.parametrize(
    ("K", "noise", "lam", "weights", "limit"),
    [
        (2, 0.3, 0.5, None, "local"),
        (3, 0.3, 1 / 3, None, "local"),
        (3, 0.3, 1.417, None, "global"),
        (3, 0.6, 0.35, [0.6, 0.3, 0.1], "global"),
        (2, 0.1, 1.3, None, "cap"),
        (2, 0.3, 3.0, None, "zero"),
        (4, 0.5, 0.6, [0.4, 0.3, 0.2, 0.1], "global"),
    ],
)
def test_auto_strength_is_the_smaller_of_its_two_limits(K, noise, lam, weights, limit):
    # math.md section 3, "The regulariser's strength": rho = min(a tenth of
    # rho_max, 0.1 (f(m_K) - f(sigma^2)) / ((K - 1) sigma^2 / K), 0.25), and 0
    # when the gain is not positive. Each term from theory's population
    # values, not from the formula: f(m) as the risk a head on the lightest
    # centroid (m_K = w_K + sigma^2) or on a noise direction takes off
    # E||X||^2, and the span's extra cost as the pairwise regulariser's at
    # equal weights, as math.md states it (with unequal weights the lightest
    # head's own cost, (K - 1) w_K sigma^2, is smaller: the default is the
    # more cautious).
    d = K + 2
    C = np.eye(K, d)
    w = np.full(K, 1 / K) if weights is None else np.asarray(weights)
    lightest, off = C[np.argmin(w)], np.eye(d)[K]
    gain = _risk_drop(lightest, C, noise, lam * K, w) - _risk_drop(off, C, noise, lam * K, w)
    moved = C.copy()
    moved[0] = off
    cost = pairwise_regularizer(C, C, noise) - pairwise_regularizer(moved, C, noise)
    terms = {"local": 0.1 * lam * K / (K - 1), "global": 0.1 * max(gain, 0.0) / cost, "cap": 0.25}
    expected = min(terms.values())
    weakest = None if weights is None else float(np.min(w)) + noise**2
    rho = auto_reg_strength(noise, lam, K, "pairwise", weakest_signal=weakest)
    np.testing.assert_allclose(rho, expected, rtol=1e-12, atol=1e-300)
    # Each case exercises the limit it is named after.
    binding = "zero" if gain <= 0 else min(terms, key=terms.get)
    assert binding == limit, terms


def test_reg_strength_special_cases():
    assert local_reg_strength(0.8, 3, None, 0.3) == 0.0
    assert local_reg_strength(0.8, 1, "pairwise", 0.3) == 0.0
    # For two heads the product is the pairwise regulariser.
    assert local_reg_strength(0.8, 2, "product", 0.05) == local_reg_strength(0.8, 2, "pairwise")
    # Its curvatures carry sigma^(2(K-2)): less noise, more strength.
    assert local_reg_strength(0.8, 3, "product", 0.1) > local_reg_strength(0.8, 3, "product", 0.5)
    with pytest.raises(ValueError, match="regularization must be one of"):
        local_reg_strength(0.8, 2, "ridge")


def _jacobi_input(seed, K):
    """Rows of K columns of unequal spreads, and weights, for the Jacobi sweeps."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((300, K)) * rng.uniform(0.5, 2.0, K), rng.random(300)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(2, 5), product=st.booleans())
def test_jacobi_rotation_reaches_a_fixed_point_of_the_pair_steps(seed, K, product):
    # After the sweeps R is a rotation, Y R is what the kernel left in Y,
    # and no rotation of a pair of columns lowers that pair's criterion
    # (checked on a grid of angles; the angle itself is ill-determined where
    # the criterion is flat). The product regulariser's sweeps can crawl:
    # seed 39003, K = 5 is still falling after 200 sweeps (258 there, 234
    # from 400 on), so the sweeps get room to settle: over 5408 inputs (676
    # seeds, K = 2 to 5, both regularisers) 200 sweeps left 2 short of a
    # fixed point and 2000 none.
    Y, weight = _jacobi_input(seed, K)
    Y0 = Y.copy()
    R = _kernels.jacobi_rotation(Y, weight, product, 2000, 1e-9, 0.0)
    np.testing.assert_allclose(R.T @ R, np.eye(K), atol=1e-12)
    np.testing.assert_allclose(Y0 @ R, Y, atol=1e-10)
    angles = np.linspace(-np.pi / 4, np.pi / 4, 201)
    for j in range(K - 1):
        for k in range(j + 1, K):
            w = weight.copy()
            if product and K > 2:
                others = np.delete(Y, [j, k], axis=1)
                w = w * np.prod(others**2, axis=1)
            c, s = np.cos(angles)[:, None], np.sin(angles)[:, None]
            a_j, a_k = c * Y[:, j] + s * Y[:, k], -s * Y[:, j] + c * Y[:, k]
            values = ((a_j * a_k) ** 2) @ w
            assert values.min() >= w @ (Y[:, j] * Y[:, k]) ** 2 * (1 - 1e-9)


def _regulariser(A, weight, product):
    """NumPy twin of the regulariser of the columns of A (math.md section 3)."""
    sq = A**2
    if product:
        return weight @ np.prod(sq, axis=1)
    return weight @ (0.5 * (np.sum(sq, axis=1) ** 2 - np.sum(sq**2, axis=1)))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(2, 6), product=st.booleans())
def test_rotation_criterion_matches_the_regulariser(seed, K, product):
    # Against the definitions (math.md section 3): the product of the
    # columns' squares, or the sum over pairs j < k of a_j^2 a_k^2.
    Y, weight = _jacobi_input(seed, K)
    sq = Y**2
    pairs = sum(sq[:, j] * sq[:, k] for j in range(K - 1) for k in range(j + 1, K))
    np.testing.assert_allclose(
        _kernels.rotation_criterion(np.ascontiguousarray(Y.T), weight, product),
        weight @ (np.prod(sq, axis=1) if product else pairs),
        rtol=1e-12,
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(2, 6), product=st.booleans())
def test_a_pair_step_drops_the_regulariser_by_what_it_returns(seed, K, product):
    # The drop of one pair's step is the whole regulariser's (math.md section
    # 3): the sweeps track the regulariser by these drops.
    Y, weight = _jacobi_input(seed, K)
    YT, R = np.ascontiguousarray(Y.T), np.eye(K)
    w = np.empty(Y.shape[0]) if product and K > 2 else None
    for j in range(K - 1):
        for k in range(j + 1, K):
            before = _regulariser(YT.T, weight, product)
            _, drop = _kernels.rotate_pair(YT, R, j, k, weight, w)
            after = _regulariser(YT.T, weight, product)
            assert drop >= 0.0
            assert drop == pytest.approx(before - after, rel=1e-8, abs=1e-10 * before)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    K=st.integers(2, 6),
    product=st.booleans(),
    unit=st.booleans(),
)
def test_a_task_of_pair_steps_is_the_steps_in_turn(seed, K, product, unit):
    # rotate_pairs (Numba's, whose pairwise steps form the next pair's sums
    # while turning the current pair, and NumPy's) turns rows and R as the
    # pair steps of rotate_pair in turn, to rounding, and returns their
    # largest angle and summed drops. The task's pairs run in cyclic order
    # (consecutive pairs share their first head) with one pair out of it.
    Y, weight = _jacobi_input(seed, K)
    if unit:
        weight = np.ones_like(weight)
    pairs = [(j, k) for j in range(K - 1) for k in range(j + 1, K)] + [(K - 1, 0)]
    w = np.empty(Y.shape[0]) if product and K > 2 else None
    YT, R = np.ascontiguousarray(Y.T), np.eye(K)
    steps = [_kernels.rotate_pair(YT, R, j, k, weight, w) for j, k in pairs]
    task_weight = weight[:0] if unit and w is None else weight
    for kernels in (_kernels, _numpy_kernels):
        YT_task, R_task = np.ascontiguousarray(Y.T), np.eye(K)
        largest, dropped = kernels.rotate_pairs(
            YT_task, R_task, np.array(pairs, dtype=np.int64), task_weight, w
        )
        np.testing.assert_allclose(R_task, R, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(YT_task, YT, rtol=1e-9, atol=1e-11 * np.abs(Y).max())
        assert largest == pytest.approx(max(abs(theta) for theta, _ in steps), rel=1e-9, abs=1e-12)
        total = sum(drop for _, drop in steps)
        assert dropped == pytest.approx(total, rel=1e-9, abs=1e-12 * max(total, 1.0))


@pytest.mark.parametrize("kernels", [_kernels, _numpy_kernels], ids=["numba", "numpy"])
def test_the_sweeps_in_blocks_find_the_clusters_frame(kernels, global_random_seed):
    # 34 heads (the schedule in blocks): rows near one of 34 orthonormal
    # directions, seen in a random frame Q; the sweeps turn the frame back,
    # up to the order and signs of the directions (the regulariser's
    # minimisers, math.md section 3).
    rng = np.random.default_rng(global_random_seed)
    K = 34
    labels = rng.integers(K, size=60 * K)
    E = np.eye(K)[labels] + 0.1 * rng.standard_normal((60 * K, K))
    Q = np.linalg.qr(rng.standard_normal((K, K)))[0]
    R = _kernels.jacobi_rotation(
        E @ Q, np.ones(60 * K), False, 100, 1e-9, 1e-9, kernels.rotate_pairs
    )
    found = np.abs(Q @ R)
    assert np.all(found.max(axis=0) > 0.99)
    assert np.all(found.max(axis=1) > 0.99)


@pytest.mark.parametrize("K", [2, 7, 31, 32, 45, 200], ids=str)
@pytest.mark.parametrize("product", [False, True], ids=["pairwise", "product"])
def test_a_sweeps_schedule_turns_every_pair_once_in_rounds_of_disjoint_tasks(K, product):
    schedule = _kernels.pair_schedule(K, product)
    pairs = [pair for tasks in schedule for pairs in tasks for pair in pairs]
    assert sorted(pairs) == [(j, k) for j in range(K - 1) for k in range(j + 1, K)]
    for tasks in schedule:
        heads = [{h for pair in pairs for h in pair} for pairs in tasks]
        assert sum(map(len, heads)) == len(set().union(*heads))
    # Few heads, or the product's pair weights (every other column): one task.
    assert (len(schedule) == 1) == (product or K < 32)


@pytest.mark.parametrize("kernels", [_kernels, _numpy_kernels], ids=["numba", "numpy"])
@pytest.mark.parametrize("product", [False, True], ids=["pairwise", "product"])
def test_jacobi_rotation_on_threads_is_the_rotation_on_one(product, kernels):
    # A round's tasks turn disjoint heads: run on a pool of threads, in any
    # order, the sweeps give the rotation of the serial run, bit for bit.
    from concurrent.futures import ThreadPoolExecutor

    Y, weight = _jacobi_input(3, 40)
    serial = Y.copy()
    R = _kernels.jacobi_rotation(serial, weight, product, 6, 1e-9, 1e-6, kernels.rotate_pairs)
    with ThreadPoolExecutor(3) as pool:

        def map_tasks(fn, tasks):
            return list(pool.map(lambda t: fn(*t), tasks[::-1]))[::-1]

        threaded = Y.copy()
        R_threads = _kernels.jacobi_rotation(
            threaded, weight, product, 6, 1e-9, 1e-6, kernels.rotate_pairs, map_tasks
        )
    np.testing.assert_array_equal(R_threads, R)
    np.testing.assert_array_equal(threaded, serial)


@pytest.mark.parametrize("kernels", [_kernels, _numpy_kernels], ids=["numba", "numpy"])
@pytest.mark.parametrize("K, product", [(3, False), (4, True)], ids=["pairwise", "product"])
def test_the_start_sweeps_rows_beyond_float64s_fourth_powers_as_at_their_scale(K, product, kernels):
    # The sweeps' sums are of degree 4 in the rows (2K for the product's
    # pair weights): rows at 2^300 (the light rows of weights whose ratio
    # passes about 1e300 lie 1e150 scales out) overflowed them, a
    # RuntimeWarning in NumPy's forms (an error in this suite) and NaN
    # angles ('Initial heads must be finite and non-zero' from the fit).
    # They are now swept at the scale of their largest entry: the rotation
    # of 2^k Y is that of Y, bit for bit.
    from attention_cluster._spectral import _rotate_frame

    class Rows:
        map_tasks = None

    Rows.kernels = kernels
    Y, weight = _jacobi_input(0, K)
    regularization = "product" if product else "pairwise"
    want = _rotate_frame(Y, weight, regularization, Rows)
    np.testing.assert_array_equal(
        _rotate_frame(np.ldexp(Y, 300), weight, regularization, Rows), want
    )


@pytest.mark.parametrize("n_samples", [4000, 12000], ids=["numpy", "numba"])
def test_a_fit_with_many_heads_does_not_depend_on_threads(n_samples):
    # From 32 heads the start's sweeps turn pairs on the rows' threads; on
    # small data NumPy's forms of the kernels run (below 2^18 numbers), on
    # larger Numba's.
    X, _, _ = make_mixture(n_samples, 40, 36, noise=0.1, random_state=0)
    fits = [
        AttentionClustering(36, random_state=0, n_threads=t, max_iter=3, refine=None).fit(X)
        for t in (1, 2)
    ]
    np.testing.assert_array_equal(fits[1].cluster_centers_, fits[0].cluster_centers_)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.sampled_from([2, 3, 4, 5, 6, 33]), product=st.booleans())
def test_jacobi_rotation_stops_on_the_regulariser_settling(seed, K, product):
    # With rtol the sweeps stop after the first one that lowers the
    # regulariser by at most rtol of its value; the sweeps are deterministic,
    # so the run stopped by rtol is the run of that many sweeps.
    Y, weight = _jacobi_input(seed, K)
    rtol = 1e-3
    R = _kernels.jacobi_rotation(Y.copy(), weight, product, 200, 0.0, rtol)
    values = [_regulariser(Y, weight, product)]
    for sweeps in range(1, 201):
        R_m = _kernels.jacobi_rotation(Y.copy(), weight, product, sweeps, 0.0, 0.0)
        values.append(_regulariser(Y @ R_m, weight, product))
        assert values[-1] <= values[-2] * (1 + 1e-9)  # each sweep lowers it
        if values[-2] - values[-1] <= rtol * values[-2]:
            break
    np.testing.assert_allclose(R, R_m, rtol=0, atol=1e-12)


@pytest.mark.parametrize("K", [2, 3, 4, 5, 6, 50, 102], ids=str)
def test_the_start_keeps_its_subsample_up_to_102_heads(K):
    # The paper's regime (K = 2..6) and up to 102 heads: SUBSAMPLE rows, at
    # every d / n (the factor of d / n applies from 103 heads).
    for d, n in [(10, 10**6), (10, 10**5), (384, 10**5), (768, 2 * 10**5), (768, 4 * 10**4)]:
        assert start_rows(K, d, n) == SUBSAMPLE


@pytest.mark.parametrize("K", [103, 200, 1000], ids=str)
def test_the_start_takes_rows_per_head_beyond_102_heads(K):
    assert start_rows(K, 384, 10**5) == ROWS_PER_HEAD * K > SUBSAMPLE


@pytest.mark.parametrize(
    ("d", "n", "K"), [(768, 10**5, 200), (384, 5 * 10**4, 200), (1536, 2 * 10**5, 103)]
)
def test_the_start_takes_rows_per_head_in_proportion_to_d_over_n(d, n, K):
    # Beyond the reference's d / n each head gets ROWS_PER_HEAD times the
    # ratio of d / n to it (the spectrum holds less of each centroid).
    expected = int(np.ceil(ROWS_PER_HEAD * (d / n) / REFERENCE_RATIO * K))
    assert expected > ROWS_PER_HEAD * K
    assert start_rows(K, d, n) == expected
    assert start_rows(K, d, 2 * n) < start_rows(K, d, n)


@pytest.mark.parametrize(
    ("d", "n", "K"), [(50_000, 20_000, 120), (5000, 20_000, 103), (768, 10**4, 200)]
)
def test_the_start_takes_at_most_max_rows_factor_times_rows_per_head(d, n, K):
    # Beyond 4 times the reference's d / n (where its centroids leave the
    # spectrum) the factor stops growing.
    assert d / n > MAX_ROWS_FACTOR * REFERENCE_RATIO
    assert start_rows(K, d, n) == int(np.ceil(ROWS_PER_HEAD * MAX_ROWS_FACTOR * K))


@pytest.mark.parametrize("K", [2, 6], ids=str)
def test_a_fit_in_the_papers_regime_rotates_its_start_on_subsample_rows(K, monkeypatch):
    # The engine page's cells (d = 10, K = 2..6) keep their path: the
    # spectral start is rotated on about SUBSAMPLE rows drawn from X.
    seen = []
    original = _plan.spectral_heads

    def recording(rows, *args):
        seen.append(rows.n_samples)
        return original(rows, *args)

    monkeypatch.setattr(_plan, "spectral_heads", recording)
    X, _, _ = make_mixture(40_000, 10, K, noise=0.3, random_state=0)
    AttentionClustering(K, random_state=0).fit(X)
    assert len(seen) == 1
    # Each row is drawn with probability SUBSAMPLE / n: 6 binomial standard deviations.
    assert abs(seen[0] - SUBSAMPLE) < 6 * np.sqrt(SUBSAMPLE)


@pytest.mark.parametrize(
    "d, kwargs, subspace",
    [
        (64, {}, True),  # the default: spectral start, EM to follow
        (64, {"refine": None}, False),  # the paper's estimator: the solver's heads are the fit
        (64, {"init": "random"}, False),  # a start outside the principal subspace
        (17, {}, False),  # K + 5 = 9 does not halve d = 17
        (18, {}, True),
    ],
    ids=["default", "no-refine", "random-start", "d-17", "d-18"],
)
def test_the_start_solver_runs_in_the_principal_subspace_before_the_em(
    d, kwargs, subspace, monkeypatch
):
    # With the EM to follow, the exact solver that starts it runs on the
    # start's rows in the top K + subspace_extra eigenvectors (the
    # spectral start's span and the risk's minimisers' as L grows,
    # math.md section 3), where d is at least twice that.
    seen = _solver_widths(monkeypatch)
    X, _, _ = make_mixture(3000, d, 4, noise=0.3, random_state=0)
    model = AttentionClustering(4, random_state=0, **kwargs).fit(X)
    r = 4 + _plan.DEFAULT_TUNING.subspace_extra
    assert seen == ([(r, r)] if subspace else [(d, d)])
    assert model.cluster_centers_.shape == (4, d)


def test_the_start_solver_keeps_r_d_where_the_span_misses_the_clusters(monkeypatch):
    # Near the spectrum's threshold the top eigenvectors hold less than half
    # of each centroid's direction (_scale.spike_overlap): the solver's
    # heads in R^d leave the span towards the centroids, so R^d is kept.
    # n = 3000, d = 64, K = 4: visibility 1.2 at sigma = 1.2, 19 at 0.3.
    seen = _solver_widths(monkeypatch)
    for noise, expected in ((1.2, 64), (0.3, 4 + _plan.DEFAULT_TUNING.subspace_extra)):
        seen.clear()
        X, _, _ = make_mixture(3000, 64, 4, noise=noise, random_state=0)
        AttentionClustering(4, random_state=0).fit(X)
        assert seen == [(expected, expected)]


def _solver_widths(monkeypatch):
    """A list that each call of the plan's exact solver appends its rows' and start's widths to."""
    seen = []
    original = _plan.solve_exact

    def recording(data, start, *args, **kwargs):
        seen.append((data.n_features, start.shape[0]))
        return original(data, start, *args, **kwargs)

    monkeypatch.setattr(_plan, "solve_exact", recording)
    return seen


def test_the_em_from_the_subspace_solver_reaches_the_r_d_solvers_maximum(
    monkeypatch, global_random_seed
):
    # The solver only starts the EM: from its heads in the principal
    # subspace the EM in R^d reaches the maximum likelihood that it reaches
    # from the solver's heads in R^d, to within a small fraction of the
    # distance to the centroids, and the labels agree.
    X, y, C = make_mixture(20000, 64, 6, noise=0.45, random_state=global_random_seed)
    sub = AttentionClustering(6, random_state=0).fit(X)
    monkeypatch.setattr(_plan, "_start_basis", lambda *args: None)
    full = AttentionClustering(6, random_state=0).fit(X)

    def unit(A):
        return A / np.linalg.norm(A, axis=1, keepdims=True)

    apart = centroid_distance(unit(sub.cluster_centers_), unit(full.cluster_centers_))
    assert apart < 0.02 * centroid_distance(unit(full.cluster_centers_), C)
    assert np.mean(sub.labels_ == full.labels_) > 0.99


class _Seen(Exception):
    pass


@pytest.mark.parametrize(
    ("n", "d", "K", "expected"),
    [
        # K = 120 > 102: ROWS_PER_HEAD rows per head.
        (60_000, 128, 120, ROWS_PER_HEAD * 120),
        # d / n = 384 / 64000, 1.5625 times the reference's: 250 rows per head.
        (64_000, 384, 110, 250 * 110),
    ],
    ids=["many-heads", "wide"],
)
def test_a_fit_rotates_its_start_on_the_rows_start_rows_asks(n, d, K, expected, monkeypatch):
    # The fit draws start_rows(K, d, n) rows for the spectral start (it is
    # stopped once the start's rows are seen).
    seen = []

    def recording(rows, *args):
        seen.append(rows.n_samples)
        raise _Seen

    monkeypatch.setattr(_plan, "spectral_heads", recording)
    X, _, _ = make_mixture(n, d, K, noise=0.2, random_state=0)
    with pytest.raises(_Seen):
        AttentionClustering(K, random_state=0).fit(X.astype(np.float32))
    assert start_rows(K, d, n) == expected
    assert abs(seen[0] - expected) < 6 * np.sqrt(expected)
