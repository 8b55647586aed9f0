"""Self-attention dynamics: kernels against NumPy twins, the flow's invariants, the estimator."""

import math
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import attention_rows, group_tokens, sphere_euler_step
from scipy.linalg import expm
from scipy.special import logsumexp
from scipy.stats import special_ortho_group
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

from attention_cluster import (
    AttentionClustering,
    InvalidParameterError,
    SelfAttentionDynamics,
    _dynamics,
    _passes,
    attention_flow,
)
from attention_cluster import _dynamics_kernels as kern
from attention_cluster.datasets import make_mixture


def _unit(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n, m, d", [(1, 1, 1), (7, 5, 3), (40, 9000, 10)], ids=str)
def test_attention_matches_reference(n, m, d, dtype, global_random_seed):
    # 9000 keys: three tiles of keys, the online softmax's rescaling.
    rng = np.random.default_rng(global_random_seed)
    Q = rng.standard_normal((n, d)).astype(dtype)
    K, V = (rng.standard_normal((m, d)).astype(dtype) for _ in range(2))
    out, log_norm = kern.attention(Q, K, V, 3.0)
    assert out.dtype == log_norm.dtype == dtype
    ref, ref_log = attention_rows(Q, K, V, np.zeros(m), 3.0)
    rtol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(log_norm, ref_log, rtol=rtol)


def test_attention_survives_huge_logits():
    # beta <q, k> of 1e4 overflows exp without the row maximum subtracted.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]])
    out, log_norm = kern.attention(X, X, X, 1e4)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, X, atol=1e-12)
    np.testing.assert_allclose(log_norm, 1e4, rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["equal", "weighted"])
def test_float32_attention_past_float32s_logits_is_float64s(weighted):
    # beta = 1e39 on unit tokens: logits beyond float32's range (3.4e38) are
    # formed in float64, and each token attends to itself alone, as in
    # float64; log Z_i = beta is infinite in float32. (The keys beta k_j
    # and the shifts beta |x|^2 / 2 were cast to float32, infinite: every
    # output was NaN, with a RuntimeWarning.)
    rng = np.random.default_rng(0)
    X = _unit(rng, 30, 3).astype(np.float32)
    log_w = np.log(rng.integers(1, 5, 30).astype(np.float64)) if weighted else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        crossed = kern.attention(X[:10], X, X, 1e39, log_w)
        itself = kern.self_attention(X, X, 1e39, log_w)
    for (out, log_norm), expected in ((crossed, X[:10]), (itself, X)):
        assert out.dtype == log_norm.dtype == np.float32
        np.testing.assert_array_equal(out, expected)
        assert np.all(np.isposinf(log_norm))


@given(
    st.lists(st.floats(-800.0, 0.0), min_size=1, max_size=40),
    st.floats(-50.0, 50.0),
)
def test_exp_shifted_is_numpy_exp(xs, top):
    # exp(x - top) within 1e-15 of NumPy's; below exp(-708) it may stay at
    # the floor exp(-708) (3e-308), next to the row's largest entry 1.
    logits = np.array([xs]) + top
    expected = np.exp(logits - top)
    got = logits.copy()
    kern.exp_shifted(got, np.array([top]), np.empty(len(xs)))
    normal = logits - top >= -708.0
    np.testing.assert_allclose(got[normal], expected[normal], rtol=1e-15, atol=0)
    assert np.all(got[~normal] <= np.exp(-708.0) * (1 + 1e-15))


@pytest.mark.parametrize("block_rows", [1, 7, 1000])
def test_attention_matches_reference_on_any_blocks(block_rows, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    Q, K, V = (
        rng.standard_normal((30, 4)),
        rng.standard_normal((12, 4)),
        rng.standard_normal((12, 2)),
    )
    out, log_norm = kern.attention(Q, K, V, 1.5, block_rows=block_rows, n_threads=2)
    ref, ref_log = attention_rows(Q, K, V, np.zeros(12), 1.5)
    np.testing.assert_allclose(out, ref, rtol=1e-10)
    np.testing.assert_allclose(log_norm, ref_log, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_attention_does_not_depend_on_threads(dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    Q, K, V = (rng.standard_normal((3000, 6)).astype(dtype) for _ in range(3))
    one = kern.attention(Q, K, V, 2.0, n_threads=1)
    three = kern.attention(Q, K, V, 2.0, n_threads=3)
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)


def test_attention_of_sparse_queries_is_dense_attention(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    Q = sp.random(50, 8, density=0.3, format="csr", random_state=global_random_seed)
    K, V = rng.standard_normal((20, 8)), rng.standard_normal((20, 3))
    for a, b in zip(kern.attention(Q, K, V, 2.0), kern.attention(Q.toarray(), K, V, 2.0)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def _assert_groups_match_reference(X, radius, plane=None):
    """The kernel's groups are the reference loop's; returns their number."""
    labels = np.empty(len(X), dtype=np.int64)
    n_groups = kern.group_tokens(X, radius, labels, plane)
    ref_labels, ref_groups = group_tokens(X, radius)
    assert n_groups == ref_groups
    np.testing.assert_array_equal(labels, ref_labels)
    return n_groups


def test_group_tokens_matches_reference(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = np.repeat(rng.standard_normal((5, 3)), 4, axis=0) + 1e-4 * rng.standard_normal((20, 3))
    assert _assert_groups_match_reference(X[rng.permutation(20)], 0.05) == 5


@given(
    st.integers(1, 60),
    st.integers(1, 5),
    st.floats(1e-3, 2.0),
    st.floats(1e-4, 1.0),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.booleans(),
)
def test_group_tokens_matches_reference_on_any_spread(
    n, d, spread, radius, seed, constant, any_plane
):
    # Tokens near a few centres at any spread and radius, maybe one
    # coordinate constant, the cells on the default plane or any other: the
    # plane of the cells decides which tokens are compared, not the groups.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((3, d))[rng.integers(0, 3, n)] + spread * rng.standard_normal((n, d))
    if constant:
        X[:, 0] = 0.5
    plane = np.linalg.qr(rng.standard_normal((d, 2)))[0] if any_plane and d > 1 else None
    _assert_groups_match_reference(X, radius, plane)


@pytest.mark.parametrize("radius", [0.02, 0.05, 0.2])
def test_group_tokens_across_many_cells_matches_reference(radius, global_random_seed):
    # Tokens spread over a square, the groups' first tokens in every cell of
    # the grid and its neighbours: the binary searches and scans of the rows
    # of cells find the earliest group as the reference's loop does.
    rng = np.random.default_rng(global_random_seed)
    X = rng.uniform(0.0, 1.0, (400, 3)) * [1.0, 1.0, 0.01]
    assert _assert_groups_match_reference(X, radius) > 10


@pytest.mark.parametrize("d", [8, 40, 300])
def test_group_tokens_in_many_dimensions_matches_reference_at_the_radius(d, global_random_seed):
    # A squared distance is summed only until it passes the radius's square
    # (its partial sums only grow): points of an integer lattice, exactly at
    # the radius 2 from each other where they differ by 1 in four
    # coordinates or 2 in one (they join), beyond it where they differ in
    # more, anywhere among d coordinates, and tokens spread over the sphere
    # in d dimensions, few cells apart.
    rng = np.random.default_rng(global_random_seed)
    lattice = np.zeros((60, d))
    for row in lattice[1:]:
        row[rng.choice(d, rng.integers(1, 7), replace=False)] = rng.choice([1.0, 2.0, -1.0])
    _assert_groups_match_reference(lattice[rng.permutation(60)], 2.0)
    sphere = _unit(rng, 200, d)
    for radius in (0.01, 1.0, 1.4):
        _assert_groups_match_reference(sphere, radius)


def test_cell_plane_spans_the_top_principal_directions(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    basis = special_ortho_group.rvs(12, random_state=global_random_seed)
    X = 3.0 + (rng.standard_normal((500, 12)) * ([5.0, 4.0] + [0.1] * 10)) @ basis.T
    V = kern.cell_plane(X)
    np.testing.assert_allclose(V.T @ V, np.eye(2), atol=1e-12)
    top = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)[2][:2]
    # the cosines of the principal angles between the two planes
    np.testing.assert_allclose(np.linalg.svd(top @ V, compute_uv=False), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "X",
    [np.arange(5.0)[:, None], np.outer(np.arange(6.0), [1.0, 2.0, 0.0]), np.ones((4, 3))],
    ids=["one feature", "on a line", "one point"],
)
def test_cell_plane_is_orthonormal_without_spread(X):
    V = kern.cell_plane(X)
    assert V.shape == (X.shape[1], 2)
    expected = np.diag([1.0, 0.0]) if X.shape[1] == 1 else np.eye(2)
    np.testing.assert_allclose(V.T @ V, expected, atol=1e-12)
    _assert_groups_match_reference(X, 0.5, V)


@pytest.mark.parametrize("exponent", [530, -560], ids=["2^530", "2^-560"])
def test_grouping_of_rows_at_any_magnitude(exponent, global_random_seed):
    # 2^k X at the radius 2^k r groups as X at r, and spreads on the same
    # plane, also where the squares of the rows and of the radius pass
    # float64's range (2^530, about 1e160) or underflow to zero (2^-560).
    # Groups of 4 tokens, their centres 1 apart on a line, at the radius 0.7:
    # neighbouring groups lie in neighbouring cells, and are compared.
    rng = np.random.default_rng(global_random_seed)
    line = np.repeat(np.arange(5.0), 4)[:, None] * _unit(rng, 1, 3)
    X = line + 1e-2 * rng.standard_normal((20, 3))
    want, got = np.empty(20, dtype=np.int64), np.empty(20, dtype=np.int64)
    assert kern.group_tokens(X, 0.7, want) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kern.group_tokens(np.ldexp(X, exponent), np.ldexp(0.7, exponent), got) == 5
        plane = kern.cell_plane(np.ldexp(X, exponent))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(plane, kern.cell_plane(X))


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_euler_step_matches_reference(model, global_random_seed):
    X = _unit(np.random.default_rng(global_random_seed), 15, 4)
    path = attention_flow(X, 1, model=model, beta=2.5, step_size=0.3)
    np.testing.assert_allclose(
        path[1], sphere_euler_step(X, 2.5, 0.3, normalised=model == "sa"), rtol=1e-10
    )


@pytest.mark.parametrize("model", ["sa", "usa", "unnormalized"])
def test_flow_keeps_float32_and_steps_in_float64(model, global_random_seed):
    # The path has X's dtype; its steps are the float64 path's, rounded.
    X = _unit(np.random.default_rng(global_random_seed), 15, 4)
    X32 = X.astype(np.float32)
    path = attention_flow(X32, 3, model=model, beta=2.5, step_size=0.3)
    assert path.dtype == np.float32
    wide = attention_flow(X32.astype(np.float64), 3, model=model, beta=2.5, step_size=0.3)
    np.testing.assert_array_equal(path, wide.astype(np.float32))


def test_mean_shift_step_is_euler_step_of_size_one_over_inner_product(global_random_seed):
    # dynamics.md: x + h P_perp(x) m = (1 - h <x, m>) x + h m, so h_i = 1 / <x_i, m_i>
    # lands on m_i / |m_i|: the blurring mean-shift step with a vMF kernel.
    rng = np.random.default_rng(global_random_seed)
    X = _unit(rng, 30, 5)
    X[:, 0] += 3.0  # a cap, so that <x_i, m_i> > 0
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    beta = 4.0
    W = np.exp(beta * X @ X.T)
    M = W @ X / W.sum(axis=1, keepdims=True)
    h = 1.0 / np.sum(X * M, axis=1)
    assert np.all(h > 0)
    euler = sphere_euler_step(X, beta, h)
    vmf_kernel = np.exp(beta * X @ X.T) @ X  # von Mises-Fisher blurring mean shift
    mean_shift = vmf_kernel / np.linalg.norm(vmf_kernel, axis=1, keepdims=True)
    flow = attention_flow(X, 1, beta=beta, step_size="mean-shift")[1]
    np.testing.assert_allclose(euler, mean_shift, atol=1e-12)
    np.testing.assert_allclose(flow, mean_shift, atol=1e-12)


@pytest.mark.parametrize("reach", [0.5, 1.0, 1.5, 1.9, 2.5])
def test_a_step_multiplies_the_angle_to_the_attention_mean_by_one_less_its_reach(reach):
    # math.md section 8, "Numeric steps" (the overshoot warning's count):
    # to first order, with the attention mean m held, the Euler step on the
    # sphere multiplies a token's angle to m / |m| by 1 - h <x, m>: short of
    # it below 1, past it above, no closer from 2 on. Against the step
    # itself, at angles of 1e-2 and 1e-3: off by at most 4.4e-4 at the first,
    # and the error, of second order, 100 times less at the second (the
    # unnormalised model's factor 1 - h would be off by 0.2 h, |m| = 0.8).
    rng = np.random.default_rng(0)
    m = 0.8 * _unit(rng, 1, 6)[0]
    target = m / np.linalg.norm(m)
    side = _unit(rng, 1, 6)[0]
    side -= (side @ target) * target
    side /= np.linalg.norm(side)
    errors = []
    for angle in (1e-2, 1e-3):
        x = np.cos(angle) * target + np.sin(angle) * side
        h = reach / (x @ m)
        moved = x + h * (m - (x @ m) * x)
        moved /= np.linalg.norm(moved)
        after = np.arctan2(moved @ side, moved @ target)
        errors.append(abs(after / angle - (1.0 - h * (x @ m))))
    assert errors[0] < 1e-3 and errors[1] <= 0.02 * errors[0] + 1e-12


def test_unnormalised_flow_is_rescaled_euler(global_random_seed):
    # z' = sum_j P_ij V (z_j - z_i), P from x = exp(tV) z: at t = 0, x = z.
    rng = np.random.default_rng(global_random_seed)
    Z = rng.standard_normal((8, 3))
    V = rng.standard_normal((3, 3))
    step = attention_flow(Z, 1, model="unnormalized", step_size=0.1, value=V)[1]
    P, _ = attention_rows(Z, Z, np.eye(8), np.zeros(8), 1.0)
    np.testing.assert_allclose(step, Z + 0.1 * (P @ Z - Z) @ V.T, rtol=1e-10)


def test_unnormalised_identity_value_matches_direct_flow():
    # With V = I, x = e^t z solves dx/dt = sum_j P_ij x_j: compare with small
    # steps on x directly.
    rng = np.random.default_rng(0)
    X0 = rng.uniform(-1, 1, (6, 2))
    h, steps = 1e-4, 5000
    X = X0.copy()
    for _ in range(steps):
        P, _ = attention_rows(X, X, np.eye(6), np.zeros(6), 1.0)
        X = X + h * P @ X
    Z = attention_flow(X0, steps, model="unnormalized", step_size=h)[-1]
    np.testing.assert_allclose(Z * np.exp(h * steps), X, rtol=1e-3)


def _numpy_flow(X, n_steps, model, beta, step_size, Q, K, V):
    """The flows of math.md section 8, written out: P_ij = softmax_j(beta <Q x_i, K x_j>);
    on the sphere x_i <- unit(x_i + h P_perp(x_i) m_i), m_i = sum_j P_ij V x_j (times
    Z_i / n for USA; unit(m_i) for the mean-shift step); unnormalised, z_i <- z_i + h
    sum_j P_ij V (z_j - z_i) with P from x_j = exp(tV) z_j."""
    h = 1.0 if step_size == "mean-shift" else step_size
    Z = X / np.linalg.norm(X, axis=1, keepdims=True) if model != "unnormalized" else X.copy()
    path = [Z]
    for s in range(n_steps):
        x = Z @ expm(s * h * V).T if model == "unnormalized" else Z
        logits = beta * (x @ Q.T) @ (x @ K.T).T
        log_norm = logsumexp(logits, axis=1)
        P = np.exp(logits - log_norm[:, None])
        if model == "unnormalized":
            Z = Z + h * (P @ Z - Z) @ V.T
        else:
            m = P @ x @ V.T
            if model == "usa":
                m *= np.exp(log_norm - np.log(len(Z)))[:, None]
            if step_size != "mean-shift":
                m = Z + h * (m - np.sum(m * Z, axis=1, keepdims=True) * Z)
            Z = m / np.linalg.norm(m, axis=1, keepdims=True)
        path.append(Z)
    return np.array(path)


@pytest.mark.parametrize(
    "model, step_size",
    [("sa", 0.3), ("usa", 0.2), ("sa", "mean-shift"), ("usa", "mean-shift"), ("unnormalized", 0.1)],
    ids=str,
)
def test_flow_with_query_key_value_matches_numpy_flow(model, step_size, global_random_seed):
    # Random non-symmetric Q, K, V: swapping Q and K, or transposing a
    # matrix (exp(tV) among them), changes the path.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((9, 3))
    Q, K, V = rng.standard_normal((3, 3, 3))
    path = attention_flow(X, 6, model=model, beta=1.7, step_size=step_size, query=Q, key=K, value=V)
    expected = _numpy_flow(X, 6, model, 1.7, step_size, Q, K, V)
    np.testing.assert_allclose(path, expected, rtol=1e-9, atol=1e-12)


tokens = st.integers(2, 12).flatmap(
    lambda n: st.integers(2, 5).flatmap(
        lambda d: st.tuples(st.just(n), st.just(d), st.integers(0, 2**32 - 1))
    )
)
models = st.sampled_from([("sa", 0.2), ("usa", 0.2), ("sa", "mean-shift"), ("unnormalized", 0.05)])


@given(tokens, models, st.floats(0.1, 8.0))
def test_trajectories_are_rotation_equivariant(shape, model_step, beta):
    n, d, seed = shape
    model, step = model_step
    X = np.random.default_rng(seed).standard_normal((n, d))
    R = special_ortho_group.rvs(d, random_state=seed) if d > 1 else np.eye(1)
    path = attention_flow(X, 5, model=model, beta=beta, step_size=step)
    rotated = attention_flow(X @ R.T, 5, model=model, beta=beta, step_size=step)
    np.testing.assert_allclose(rotated, path @ R.T, atol=1e-9)


@given(tokens, models, st.floats(0.1, 8.0))
def test_trajectories_ignore_token_order(shape, model_step, beta):
    n, d, seed = shape
    model, step = model_step
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    perm = rng.permutation(n)
    path = attention_flow(X, 5, model=model, beta=beta, step_size=step)
    permuted = attention_flow(X[perm], 5, model=model, beta=beta, step_size=step)
    np.testing.assert_allclose(permuted, path[:, perm], atol=1e-10)


@given(
    tokens,
    st.sampled_from(["sa", "usa"]),
    st.sampled_from([0.01, 0.5, 3.0, "mean-shift"]),
    st.floats(0.1, 30.0),
)
def test_every_iterate_is_on_the_sphere(shape, model, step, beta):
    n, d, seed = shape
    X = 5.0 * np.random.default_rng(seed).standard_normal((n, d))
    path = attention_flow(X, 8, model=model, beta=beta, step_size=step)
    np.testing.assert_allclose(np.linalg.norm(path, axis=2), 1.0, atol=1e-12)


@pytest.fixture(scope="module")
def mixture():
    X, y, _ = make_mixture(1500, n_features=10, n_clusters=4, noise=0.3, random_state=0)
    return X, y


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_finds_the_number_of_clusters(mixture, dtype):
    X, y = mixture
    model = SelfAttentionDynamics().fit(X.astype(dtype))
    assert model.n_clusters_ == 4
    assert adjusted_rand_score(y, model.labels_) > 0.9
    assert model.cluster_centers_.dtype == dtype
    np.testing.assert_allclose(np.linalg.norm(model.cluster_centers_, axis=1), 1.0, rtol=1e-5)
    # The stopping step ends the longest plateau, at the fitted count.
    path = model.n_clusters_path_
    assert path[model.stopping_step_] == 4
    assert len(model.energy_path_) == model.n_iter_ == len(path) - 1


def test_predict_attends_to_limit_points(mixture):
    X, y = mixture
    model = SelfAttentionDynamics().fit(X)
    assert adjusted_rand_score(model.labels_, model.predict(X)) > 0.95
    # predict is the rule argmax_k <x, c_k> on the sphere
    Xs = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_array_equal(
        model.predict(X[:50]), np.argmax(Xs[:50] @ model.cluster_centers_.T, axis=1)
    )


def _query_key_fit(seed):
    """A sphere fit with non-symmetric Q and K (two limit points), and new rows to label."""
    X = make_mixture(300, n_features=4, n_clusters=3, noise=0.2, random_state=0)[0]
    Q, K = np.eye(4) + 0.5 * np.random.default_rng(0).standard_normal((2, 4, 4))
    model = SelfAttentionDynamics(query=Q, key=K, random_state=0).fit(X)
    assert model.n_clusters_ >= 2
    return model, Q, K, np.random.default_rng(seed).standard_normal((200, 4))


def test_predict_attends_with_query_and_key(global_random_seed):
    # argmax_k <Q x, K c_k> for the unit rows x (math.md section 8)
    model, Q, K, new = _query_key_fit(global_random_seed)
    unit = new / np.linalg.norm(new, axis=1, keepdims=True)
    expected = np.argmax((unit @ Q.T) @ (model.cluster_centers_ @ K.T).T, axis=1)
    np.testing.assert_array_equal(model.predict(new), expected)


def test_predict_reads_the_fit_not_the_parameters(global_random_seed):
    # set_params after fit changed predict's Q, K and model, with the old fit's limit points.
    model, Q, K, new = _query_key_fit(global_random_seed)
    labels = model.predict(new)
    model.set_params(query=None, key=None, model="unnormalized")
    np.testing.assert_array_equal(model.predict(new), labels)
    assert model.model_ == "sa"
    np.testing.assert_array_equal(model.query_, Q)
    np.testing.assert_array_equal(model.key_, K)
    # nor does a change of the caller's arrays: the fit holds copies.
    Q[:] = -Q
    K[:] = 2.0 * K
    np.testing.assert_array_equal(model.predict(new), labels)


def test_energy_is_the_sum_of_the_normalisers(global_random_seed):
    # E_beta = (1 / (2 beta n^2)) sum_i w_i Z_i (math.md section 8), from log Z_i.
    rng = np.random.default_rng(global_random_seed)
    log_norm = rng.uniform(-5.0, 30.0, 20)
    weights = rng.integers(1, 6, 20).astype(np.float64)
    n = weights.sum()
    expected = np.sum(weights * np.exp(log_norm)) / (2 * 3.0 * n * n)
    assert _dynamics._energy(log_norm, 3.0, weights) == pytest.approx(expected, rel=1e-12)
    assert _dynamics._energy(log_norm, 3.0) == pytest.approx(
        np.sum(np.exp(log_norm)) / (2 * 3.0 * 400), rel=1e-12
    )
    # beyond float's range: infinite, as the normalisers are
    assert _dynamics._energy(np.array([1.0, np.inf]), 3.0) == np.inf
    assert _dynamics._energy(np.array([1e3, 2e3]), 3.0) == np.inf


def test_energy_rises_along_usa(global_random_seed):
    # arXiv 2312.10794: E_beta increases along USA (Q = K = V = I).
    X = np.random.default_rng(global_random_seed).standard_normal((40, 3))
    model = SelfAttentionDynamics(
        model="usa", beta=2.0, step_size=0.1, max_iter=60, stopping="horizon"
    ).fit(X)
    assert np.all(np.diff(model.energy_path_) >= -1e-12)


def test_subsample_with_tracers_agrees_with_exact(mixture, global_random_seed):
    X, _ = mixture
    exact = SelfAttentionDynamics().fit(X)
    sub = SelfAttentionDynamics(max_samples=400, random_state=global_random_seed).fit(X)
    assert sub.n_clusters_ == exact.n_clusters_
    assert adjusted_rand_score(exact.labels_, sub.labels_) > 0.9
    assert len(sub.subsample_indices_) == 400


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_passive_tracers_go_where_their_attention_at_time_zero_pulls(mixture, weighted):
    # math.md section 8, "Passive tracers": a row outside the subsample is
    # labelled argmax_k sum_{j in cluster k} P_ij, P_ij = softmax_j(beta
    # <x_i, x_j> + log w_j) over the subsample's initial tokens (unit rows,
    # row j standing for w_j tokens, "Weighted particles"). Against that
    # NumPy vote from the fit's subsample and its tokens' labels.
    X, _ = mixture
    rng = np.random.default_rng(1)
    w = rng.uniform(0.5, 3.0, len(X)) if weighted else None
    model = SelfAttentionDynamics(max_samples=300, random_state=0).fit(X, sample_weight=w)
    sub = model.subsample_indices_
    passive = np.setdiff1d(np.arange(len(X)), sub)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    logits = model.beta * U[passive] @ U[sub].T
    if weighted:
        logits += np.log(w[sub])
    P = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    votes = P @ np.eye(model.n_clusters_)[model.labels_[sub]]
    assert len(passive) == len(X) - 300
    np.testing.assert_array_equal(model.labels_[passive], np.argmax(votes, axis=1))


def test_leaders_of_the_unnormalised_model():
    # V = I: the rescaled tokens go to the vertices of a polytope; the tokens
    # that end there attend to themselves (the leaders).
    rng = np.random.default_rng(0)
    X = rng.uniform(-5, 5, (20, 2))
    model = SelfAttentionDynamics(
        model="unnormalized", step_size=0.1, max_iter=50, stopping="horizon"
    ).fit(X)
    assert len(model.leaders_) >= 2
    assert model.n_clusters_ == len(model.leaders_)
    # each leader barely moves: it starts within 1% of the box from its limit
    # point, the limit points being a box's width apart
    for i in model.leaders_:
        assert np.min(np.linalg.norm(model.cluster_centers_ - X[i], axis=1)) < 0.1


def _flow_leaders(X, n_steps, h, beta, Q, K):
    """Leaders of the unmerged flow (V = I): P_ii = 1 / (1 + sum_{j != i} exp(l_ij - l_ii)) > 1/2,
    l_ij = beta <Q x_i, K x_j>, from the differences of the logits."""
    Z = attention_flow(X, n_steps, model="unnormalized", beta=beta, step_size=h, query=Q, key=K)
    x = np.exp(n_steps * h) * Z[-1]
    q, k = x @ Q.T, x @ K.T
    gaps = beta * (q @ k.T - np.sum(q * k, axis=1)[:, None])
    np.fill_diagonal(gaps, -np.inf)
    return np.flatnonzero(logsumexp(gaps, axis=1) < 0)


@pytest.mark.parametrize("n_steps", [100, 150, 200], ids=["t=10", "t=15", "t=20"])
@pytest.mark.parametrize(
    "seed, beta, query_key", [(0, 10.0, False), (6, 1.0, True)], ids=["identity", "query-key"]
)
def test_leaders_of_merged_particles_are_those_of_the_unmerged_flow(n_steps, seed, beta, query_key):
    # Tokens carried as one particle sit at one place: each attended to
    # itself with at most 1/w of the particle's weight, so vertices lost their
    # leader (t = 10), and from t ~ 20 the logits (~1e20) made the test of
    # P_ii > 1/2 rounding noise. One leader per vertex of the polytope.
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, (20, 2))
    Q, K = np.eye(2) + 0.3 * rng.standard_normal((2, 2, 2)) if query_key else (np.eye(2),) * 2
    model = SelfAttentionDynamics(
        model="unnormalized",
        beta=beta,
        step_size=0.1,
        max_iter=n_steps,
        stopping="horizon",
        query=Q if query_key else None,
        key=K if query_key else None,
    ).fit(X)
    np.testing.assert_array_equal(model.leaders_, _flow_leaders(X, n_steps, 0.1, beta, Q, K))
    assert model.n_clusters_ == len(model.leaders_)


def test_unnormalised_float32_fits_past_float32s_range():
    # Its logits grow as e^{2t} and left float32's range at t ~ 44: the steps
    # run in float64 (horizon log(1e308 / beta) / 2), the results keep float32.
    X = np.random.default_rng(0).uniform(-1, 1, (40, 2)).astype(np.float32)
    params = dict(model="unnormalized", beta=1.0, step_size=0.5, max_iter=100, stopping="horizon")
    narrow = SelfAttentionDynamics(**params).fit(X)  # t = 50
    wide = SelfAttentionDynamics(**params).fit(X.astype(np.float64))
    assert narrow.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(narrow.cluster_centers_, wide.cluster_centers_.astype(np.float32))
    np.testing.assert_array_equal(narrow.labels_, wide.labels_)
    np.testing.assert_array_equal(narrow.leaders_, wide.leaders_)


def test_verbose_reports_steps(mixture, capsys):
    SelfAttentionDynamics(verbose=1, max_iter=3, stopping="horizon").fit(mixture[0][:100])
    out = capsys.readouterr().out
    assert out.count("[SelfAttentionDynamics] step") == 3


def test_no_meeting_warns_at_callers_line():
    X = np.eye(5)
    with pytest.warns(ConvergenceWarning, match="No tokens met") as record:
        SelfAttentionDynamics(beta=50.0, max_iter=2).fit(X)
    assert record[0].filename == __file__


@pytest.mark.parametrize(
    "step_size, advice",
    [
        ("mean-shift", "Increase max_iter, or lower beta"),
        (0.01, "max_iter or step_size, or lower beta"),
    ],
    ids=["mean-shift", "numeric"],
)
def test_no_meeting_advises_what_lets_tokens_meet(step_size, advice):
    # It advised a larger beta, which resolves finer and keeps tokens apart
    # longer, and a larger step_size where the mean-shift step has none.
    with pytest.warns(ConvergenceWarning, match="No tokens met") as record:
        SelfAttentionDynamics(beta=50.0, max_iter=2, step_size=step_size).fit(np.eye(5))
    assert advice in str(record[0].message)


@pytest.mark.parametrize("case", ["tight-clusters", "one-feature"])
def test_tokens_clustered_from_the_start_are_the_answer_without_a_warning(case):
    # Groups at step 0 that never change (three clusters tighter than
    # cluster_tol; one feature, where the unit tokens are +1 and -1): the fit
    # warned that the count stayed, and advised what could not help.
    if case == "tight-clusters":
        X, y, _ = make_mixture(600, 10, 3, noise=0.001, random_state=0)
    else:
        X, y, _ = make_mixture(300, 5, 2, random_state=0)
        X = X[:, :1]
        y = X[:, 0] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = SelfAttentionDynamics(random_state=0).fit(X)
    assert model.n_clusters_ == len(np.unique(y))
    assert adjusted_rand_score(y, model.labels_) == 1.0
    np.testing.assert_array_equal(model.n_clusters_path_, model.n_clusters_)


def test_tokens_grouped_from_the_start_with_others_in_no_cluster_warn():
    # Three tight clusters and three stray tokens, two of which have joined no
    # cluster after two steps: the count never changed, the state is not all clustered.
    X = make_mixture(600, 10, 3, noise=0.001, random_state=0)[0]
    X = np.vstack([X, np.random.default_rng(1).standard_normal((3, 10))])
    with pytest.warns(ConvergenceWarning, match="stayed at 3.*2 of the 603 tokens in no cluster"):
        model = SelfAttentionDynamics(max_iter=2).fit(X)
    assert model.n_clusters_ == 3


@pytest.mark.parametrize("far", [1e8, 1e10])
@pytest.mark.parametrize("model", ["sa", "unnormalized"])
def test_stray_tokens_join_the_nearest_limit_point_beside_a_far_coordinate(model, far):
    # Two groups of three tokens one apart and single tokens between them,
    # every row at `far` in its first coordinate (V = 0: the tokens stay
    # where they start). Compared as |c|^2 - 2 <z, c>, whose terms are of
    # far^2, the strays' distances were lost in the rounding: 4 of the 8
    # joined the farther point, on the sphere too (limit points 1/far apart).
    group = np.array([[0.0, 0.0], [0.001, 0.0], [0.0, 0.001]])
    strays = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    Y = np.vstack([group, group + [1.0, 0.0], np.c_[strays, np.zeros(8)]])
    X = np.c_[np.full(len(Y), far), Y]
    model = SelfAttentionDynamics(
        model=model,
        step_size=0.1,
        value=np.zeros((3, 3)),
        stopping="horizon",
        max_iter=1,
        cluster_tol=1e-2 / far,
        min_cluster_size=2,
    ).fit(X)
    assert model.n_clusters_ == 2
    left, right = model.labels_[0], model.labels_[3]
    np.testing.assert_array_equal(model.labels_[:6], [left] * 3 + [right] * 3)
    np.testing.assert_array_equal(model.labels_[6:], np.where(strays < 0.5, left, right))


@given(
    k=st.integers(1, 5),
    d=st.integers(1, 4),
    shift=st.lists(st.integers(-(2**40), 2**40), min_size=4, max_size=4),
    exponent=st.integers(-900, 900),
    seed=st.integers(0, 2**32 - 1),
)
def test_nearest_limit_point_is_shift_and_scale_invariant(k, d, shift, exponent, seed):
    # Tokens and limit points on a grid of 2^-10 within [-4, 4], moved by
    # the same vector of integers up to 2^40 and scaled by 2^exponent (all
    # exact): each token's pick is its nearest point in exact arithmetic (ties
    # to any of them), as it is unmoved. About the origin, a shift of 1e8
    # lost the distances in the rounding of |c|^2.
    rng = np.random.default_rng(seed)
    C_grid = rng.integers(-4096, 4097, (k, d))
    Z_grid = rng.integers(-4096, 4097, (12, d))
    v = np.array(shift[:d], dtype=np.float64)
    picks = _dynamics._nearest(
        np.ldexp(C_grid / 1024.0 + v, exponent), np.ldexp(Z_grid / 1024.0 + v, exponent)
    )
    exact = [[sum(int(a - b) ** 2 for a, b in zip(z, c)) for c in C_grid] for z in Z_grid]
    assert [row[p] for row, p in zip(exact, picks)] == [min(row) for row in exact]


def test_fit_is_reproducible_and_pickles(mixture):
    X = mixture[0]
    a = SelfAttentionDynamics(max_samples=300, random_state=3).fit(X)
    b = pickle.loads(pickle.dumps(SelfAttentionDynamics(max_samples=300, random_state=3))).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"model": "spin"}, "model must be one of"),
        ({"beta": 0.0}, "beta must be > 0"),
        ({"step_size": "big"}, 'step_size must be a number > 0 or "mean-shift"'),
        ({"model": "unnormalized"}, "mean-shift.*is a step on the sphere.*numeric step_size"),
        ({"stopping": "never"}, "stopping must be one of"),
        ({"min_cluster_size": 1.5}, "fraction below 1"),
        ({"max_iter": 0}, "max_iter must be >= 1"),
        ({"value": np.eye(2)}, r"value must be .* of shape \(n_features, n_features\)"),
        ({"query": np.full((3, 3), np.nan)}, "query must be finite"),
    ],
)
def test_bad_parameters_raise(params, match):
    with pytest.raises(ValueError, match=match):
        SelfAttentionDynamics(**params).fit(np.eye(3))


def test_a_step_past_the_attention_means_is_warned_of(global_random_seed):
    # SA's Euler step multiplies a token's distance to its attention mean by
    # about |1 - h <x_i, m_i>|, and <x_i, m_i> -> 1 as tokens gather: at h = 2
    # they could not meet, 39 clusters of 3 were counted without a warning,
    # and a larger step's warning advised increasing step_size.
    X, _, _ = make_mixture(300, 5, 3, noise=0.3, random_state=global_random_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SelfAttentionDynamics(step_size=1.0, random_state=0).fit(X).n_clusters_ == 3
    # Just below 2 the distance's factor |1 - h <x_i, m_i>| is near 1: from 1
    # to cluster_tol takes more than max_iter steps (16 to 36 clusters were
    # counted at 1.98 and 1.99, silently).
    with pytest.warns(UserWarning, match="may not settle.*Lower step_size"):
        SelfAttentionDynamics(step_size=1.99, random_state=0).fit(X)
    # Counted from 1: tokens that attend mostly to themselves (beta = 30, d =
    # 50) start within cluster_tol of their attention means, and a count
    # from there hid 12 clusters of 5 at h = 1.99.
    W, _, _ = make_mixture(300, 50, 5, noise=0.3, random_state=global_random_seed)
    with pytest.warns(UserWarning, match="may not settle"):
        SelfAttentionDynamics(step_size=1.99, random_state=0).fit(W)
    # SA at h = 2 comes no closer, though its last median reads below 2.
    with pytest.warns(UserWarning, match="cannot meet"):
        SelfAttentionDynamics(step_size=2.0, beta=20.0, random_state=0).fit(X)
    for model, step in [("sa", 10.0), ("usa", 0.05), ("unnormalized", 2.5)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            SelfAttentionDynamics(model=model, step_size=step, random_state=0).fit(X)
        messages = [str(w.message) for w in caught]
        assert any("cannot meet" in message for message in messages)
        assert not any("or step_size" in message for message in messages)


def test_attention_flow_does_not_call_mean_shift_its_default():
    # The message shared with SelfAttentionDynamics said "(the default)",
    # where attention_flow's default step is 0.1.
    with pytest.raises(ValueError, match="is a step on the sphere") as error:
        attention_flow(np.eye(3), 5, model="unnormalized", step_size="mean-shift")
    assert "default" not in str(error.value)


@pytest.mark.parametrize(
    "X, kwargs, match",
    [
        (np.full((3, 2), np.nan), {}, "NaN"),
        ([[np.inf, 0.0], [1.0, 1.0]], {}, "infinity"),
        (np.eye(3) + 1j, {}, "Complex data not supported"),
        (np.ones((0, 3)), {}, "0 sample"),
        (np.ones((3, 0)), {}, "0 feature"),
        (np.eye(3), {"query": np.eye(3) + 1j}, "query must be real"),
    ],
    ids=["nan", "inf", "complex", "no-token", "no-feature", "complex-query"],
)
def test_flow_of_bad_tokens_raises_before_work(X, kwargs, match):
    # As SelfAttentionDynamics.fit refuses them: never a trajectory of NaN.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=match):
            attention_flow(X, 2, **kwargs)


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[ns]"])
def test_flow_of_dates_or_durations_raises_as_the_dynamics_do(dtype):
    # scikit-learn's check_array read them as counts of their unit, and so
    # did attention_flow; every estimator refuses them (_validation.check_dtypes).
    X = np.arange(6).reshape(3, 2).astype(dtype)
    with pytest.raises(TypeError, match="durations|dates") as error:
        attention_flow(X, 2)
    with pytest.raises(TypeError) as fitted:
        SelfAttentionDynamics().fit(X)
    assert str(error.value) == str(fitted.value)


@pytest.mark.parametrize(
    "n_steps, kwargs",
    [
        # USA's factor Z_i / n = exp(beta <x_i, x_j>) / n beyond float64.
        (3, {"model": "usa", "beta": 800.0}),
        # The unnormalised model's logits grow as exp(2t): t = 400.
        (400, {"model": "unnormalized", "step_size": 1.0}),
        # Logits beta <Q x_i, K x_j> beyond float64.
        (2, {"query": 1e200 * np.eye(3), "key": 1e200 * np.eye(3)}),
    ],
    ids=["usa", "unnormalized-horizon", "sa-logits"],
)
def test_overflowing_flow_raises_instead_of_returning_nan(n_steps, kwargs, global_random_seed):
    X = np.random.default_rng(global_random_seed).standard_normal((6, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match="overflowed"):
            attention_flow(X, n_steps, **kwargs)


def test_overflowing_dynamics_raises_and_leaves_the_estimator_unfitted(global_random_seed):
    X = np.random.default_rng(global_random_seed).standard_normal((6, 3))
    model = SelfAttentionDynamics(model="usa", beta=800.0, step_size=0.1, max_iter=5)
    with pytest.raises(FloatingPointError, match="overflowed"):
        model.fit(X)
    assert not hasattr(model, "cluster_centers_")


def test_overflowing_rows_raise_the_documented_error_alone(global_random_seed):
    # Rows of about 1e160: their squares (the logits, and the norms and
    # products that set the grouping's radius and plane) pass float64's
    # range. The fit's FloatingPointError, as attention_flow's, and no
    # warning before it.
    X = np.random.default_rng(global_random_seed).standard_normal((20, 5)) * 1e160
    model = SelfAttentionDynamics(model="unnormalized", step_size=0.1, max_iter=30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FloatingPointError, match="overflowed"):
            model.fit(X)
        with pytest.raises(FloatingPointError, match="overflowed"):
            attention_flow(X, 30, model="unnormalized", step_size=0.1)
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


@pytest.mark.parametrize("exponent", [530, -530, -1010], ids=["2^530", "2^-530", "2^-1010"])
def test_unnormalized_dynamics_of_rows_at_any_magnitude(exponent, global_random_seed):
    # 2^k X with Q = K = 2^-k I has the logits of X with Q = K = I, and the
    # unnormalised model moves its tokens linearly given their attention:
    # the same run, its tokens 2^k times X's (exactly), also where their
    # squares pass float64's range (2^530, about 1e160) or underflow (2^-530),
    # and near float64's smallest numbers (2^-1010, where a floor of 1e-300
    # on the grouping radius merged every token).
    # Groups of fewer than 5 tokens are labelled by their nearest cluster.
    X = make_mixture(60, 4, 3, noise=0.2, random_state=global_random_seed)[0]

    def fit(rows, scale):
        M = np.ldexp(np.eye(4), scale)
        return SelfAttentionDynamics(
            model="unnormalized", step_size=0.5, max_iter=60, query=M, key=M, min_cluster_size=5
        ).fit(rows)

    want, got = fit(X, 0), fit(np.ldexp(X, exponent), -exponent)
    assert want.n_clusters_ > 1
    for name in ("labels_", "leaders_", "n_clusters_path_"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    # Exactly 2^k times X's, but for coordinates below float64's smallest
    # normal number (2^-1010 times a small one), which the steps round at
    # the subnormal scale: a few of its units (seed 101: one). That
    # rounding enters the logits, and over the steps the energies and the
    # other coordinates (seeds 0 to 299: at most 1.1e-13 and 4.5 units of
    # their last place, seed 29 three).
    subnormal = exponent < -1000
    np.testing.assert_allclose(
        got.energy_path_, want.energy_path_, rtol=1e-12 if subnormal else 0, atol=0
    )
    np.testing.assert_allclose(
        got.cluster_centers_,
        np.ldexp(want.cluster_centers_, exponent),
        rtol=1e-14 if subnormal else 0,
        atol=8 * np.finfo(np.float64).smallest_subnormal,
    )


def test_zero_row_has_no_direction():
    # A zero token attends to all tokens alike and moves to their mean's direction.
    X = np.array([[1.0, 0.1], [1.0, -0.1], [0.0, 0.0]])
    path = attention_flow(X, 1, beta=1.0, step_size="mean-shift")
    np.testing.assert_allclose(path[0, 2], 0.0)
    np.testing.assert_allclose(path[1, 2], [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_sphere_dynamics_at_any_magnitude_of_float32(mixture, scale):
    # The sphere models read directions only: float32 rows whose squares
    # underflow or overflow (1e-30, 1e30) give the fit of the rows at unit scale.
    X = mixture[0][:300].astype(np.float32)
    want = SelfAttentionDynamics().fit(X)
    got = SelfAttentionDynamics().fit(X * np.float32(scale))
    np.testing.assert_array_equal(got.labels_, want.labels_)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, atol=1e-6)


@settings(deadline=None)
@given(
    n=st.integers(1, 700),
    d=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([np.float64, np.float32]),
    weighted=st.booleans(),
)
def test_place_order_divides_its_float64_rows_by_chunks_as_at_once(n, d, seed, dtype, weighted):
    # _place_order's float64 copy of the ranked tokens is divided by chunks
    # of rows (no copy of Z[ranks] in Z's dtype): the order of the tokens
    # divided at once, bit for bit (the mean sums the same rows in turn).
    rng = np.random.default_rng(seed)
    Z = (rng.standard_normal((n, d)) * 10.0 ** rng.integers(-3, 4, (n, 1))).astype(dtype)
    weights = rng.integers(1, 4, n).astype(float) if weighted else None
    ranks = _dynamics._byte_order(Z)
    ordered = np.divide(Z[ranks], _dynamics.peak_unit(Z), dtype=np.float64)
    w = None if weights is None else weights[ranks]
    expected = ranks[np.argsort(ordered @ np.average(ordered, axis=0, weights=w), kind="stable")]
    with pytest.MonkeyPatch.context() as patch:
        # (Chunks of 256 rows: up to three of them.)
        patch.setattr(_passes, "_CHUNK_BYTES", 8 * 256)
        np.testing.assert_array_equal(_dynamics._place_order(Z, weights), expected)


@pytest.mark.parametrize("span", [False, True], ids=["as-given", "span"])
@pytest.mark.parametrize(
    "kind, options",
    [
        ("dense", {}),
        ("dense", {"max_samples": 60}),
        ("sparse", {"max_samples": 60}),
        ("weighted", {"max_samples": 60}),
        ("dense", {"model": "unnormalized", "step_size": 0.5, "max_iter": 30, "max_samples": 60}),
    ],
    ids=["dense", "subsample", "sparse", "weighted", "unnormalized"],
)
def test_rows_read_in_float32_fit_as_the_rows_cast_first(kind, options, span, monkeypatch):
    # _token_dtype (count_clusters' count in float32): float64 rows read in
    # float32, cast as they are drawn (the moving tokens once, the tracers
    # chunk by chunk), are the fit of the rows cast first, bit for bit, with
    # no float32 copy of all the rows.
    if span:
        monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", 1.0)
    rng = np.random.default_rng(0)
    X = make_mixture(200, n_features=150, n_clusters=3, noise=0.3, random_state=0)[0]
    weights = None
    if kind == "sparse":
        X = sp.csr_matrix(X * (rng.random(X.shape) < 0.05))
    if kind == "weighted":
        weights = rng.integers(0, 4, len(X)).astype(float)
    want = SelfAttentionDynamics(random_state=0, **options)
    got = SelfAttentionDynamics(random_state=0, **options)
    got._token_dtype = np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want.fit(X.astype(np.float32), sample_weight=weights)
        got.fit(X, sample_weight=weights)
    assert got.cluster_centers_.dtype == np.float32
    fitted = sorted(name for name in vars(want) if name.endswith("_"))
    assert fitted == sorted(name for name in vars(got) if name.endswith("_"))
    for name in fitted:
        if isinstance(getattr(want, name), np.ndarray):
            assert getattr(got, name).dtype == getattr(want, name).dtype, name
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        else:
            assert getattr(got, name) == getattr(want, name), name
    # The tracers' chunks too, whose votes (an argmax) seldom show their
    # rounding: unit rows of the rows cast first.
    on_sphere = got.model in _dynamics.SPHERE_MODELS
    read = _dynamics._TracerReader(on_sphere, np.dtype(np.float32), np.dtype(np.float32))
    chunk = read(X[:50])
    assert chunk.dtype == np.float32
    np.testing.assert_array_equal(
        _passes.dense(chunk), _passes.dense(read(X[:50].astype(np.float32)))
    )


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_all_zero_rows_are_one_cluster_with_a_zero_centre(kind):
    # Zero rows have no direction: on the sphere they stay zero tokens (no
    # token pulls them anywhere), one cluster whose centre is zero, not 0 / 0.
    X = np.zeros((20, 3)) if kind == "dense" else sp.csr_matrix((20, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = SelfAttentionDynamics().fit(X)
    assert model.n_clusters_ == 1
    np.testing.assert_array_equal(model.cluster_centers_, np.zeros((1, 3)))
    np.testing.assert_array_equal(model.labels_, np.zeros(20))


def test_horizon_and_plateau_agree_once_settled(mixture):
    X = mixture[0][:600]
    plateau = SelfAttentionDynamics().fit(X)
    horizon = SelfAttentionDynamics(stopping="horizon", max_iter=plateau.n_iter_).fit(X)
    np.testing.assert_array_equal(plateau.labels_, horizon.labels_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SelfAttentionDynamics().fit(X)


def test_threads_do_not_change_the_fit(mixture):
    X = mixture[0][:800]
    one = SelfAttentionDynamics(n_threads=1, chunk_size=64).fit(X)
    two = SelfAttentionDynamics(n_threads=2, chunk_size=64).fit(X)
    np.testing.assert_array_equal(one.labels_, two.labels_)
    np.testing.assert_array_equal(one.energy_path_, two.energy_path_)


def test_n_clusters_path_counts_groups_of_min_cluster_size(mixture):
    # The docstring's quantity from the first step: the initial tokens are
    # apart (no group of 1 % of the tokens), and every entry is a count of
    # groups of at least min_cluster_size tokens.
    X = mixture[0][:600]
    model = SelfAttentionDynamics(max_samples=None).fit(X)
    path = model.n_clusters_path_
    assert path[0] == 0
    assert np.all(path <= 600 // 6)
    assert path[model.stopping_step_] == model.n_clusters_
    each = SelfAttentionDynamics(min_cluster_size=1, max_iter=2, stopping="horizon").fit(X)
    assert each.n_clusters_path_[0] == 600  # every token a group of one


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_input_fits_like_dense(fmt, global_random_seed):
    # Rows on the sphere with zeros (TF-IDF-like): the same dynamics as the
    # dense array, up to rounding in the order of the products.
    X = make_mixture(800, n_features=10, n_clusters=3, noise=0.3, random_state=0)[0]
    X = np.where(np.abs(X) < 0.2, 0.0, X)
    dense = SelfAttentionDynamics(max_samples=None).fit(X)
    sparse = SelfAttentionDynamics(max_samples=None).fit(sp.csr_matrix(X).asformat(fmt))
    assert sparse.n_clusters_ == dense.n_clusters_
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, atol=1e-10)
    np.testing.assert_array_equal(sparse.predict(sp.csr_matrix(X[:100])), dense.predict(X[:100]))
    sub = dict(max_samples=300, random_state=global_random_seed)
    a = SelfAttentionDynamics(**sub).fit(X)
    b = SelfAttentionDynamics(**sub).fit(sp.csr_matrix(X).asformat(fmt))
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_sparse_input_too_large_to_densify_raises_before_work():
    # 2^15 x 2^13 float64 is 2 GiB densely: refused at once, naming the ways out.
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(
        (rng.random(3000), (rng.integers(0, 2**15, 3000), rng.integers(0, 2**13, 3000))),
        shape=(2**15, 2**13),
    )
    with pytest.raises(ValueError, match="max_samples.*TruncatedSVD"):
        SelfAttentionDynamics(max_samples=None).fit(X)
    with pytest.raises(ValueError, match="GiB"):
        SelfAttentionDynamics(max_samples=2**14 + 1).fit(X)


def test_auto_subsample_warns_and_records_it(mixture, monkeypatch):
    X = mixture[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exact = SelfAttentionDynamics().fit(X)  # 1500^2 x 10: exact, silently
    assert exact.subsample_indices_ is None
    # a budget of 400^2 x 10 per step: a subsample of sqrt(budget / d) = 400
    monkeypatch.setattr(_dynamics, "_AUTO_WORK", 400**2 * 10)
    with pytest.warns(UserWarning, match="subsample of 400 tokens.*max_samples=None") as record:
        model = SelfAttentionDynamics(random_state=0).fit(X)
    assert record[0].filename == __file__
    assert len(model.subsample_indices_) == 400
    assert adjusted_rand_score(exact.labels_, model.labels_) > 0.9


def _topic_documents(n, n_features, n_topics, rng, words=30, vocabulary=200):
    """Sparse binary documents of ``words`` words each, drawn from the
    ``vocabulary`` words of their topic (disjoint topics), and their topics."""
    topics = rng.choice(n_features, (n_topics, vocabulary), replace=False)
    labels = rng.integers(0, n_topics, n)
    columns = np.concatenate([rng.choice(topics[k], words, replace=False) for k in labels])
    rows = np.repeat(np.arange(n), words)
    X = sp.csr_matrix((np.ones(n * words), (rows, columns)), shape=(n, n_features))
    return X, labels


def test_wide_sparse_tokens_move_in_their_span_without_a_dense_copy(traced_peak):
    # A step on 500 documents of HashingVectorizer's 2^20 features passed
    # max_samples="auto"'s work bound, m^2 d, at 43 tokens: the 43 moving
    # documents (8 MB each densely) made 9 clusters of 3 topics, with 1 GB.
    # Sparse tokens run in their span (m^3 a step), from their sparse Gram
    # matrix: all 500 move, without a dense copy of them.
    X, topics = _topic_documents(500, 2**20, 3, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all tokens move: no subsample's warning
        model, peak = traced_peak(lambda: SelfAttentionDynamics(random_state=0).fit(X))
    assert model.subsample_indices_ is None
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(topics, model.labels_) == 1.0
    assert peak < 100 * 2**20  # (71 MB measured; one dense token is 8 MB)
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_auto_subsample_of_wide_sparse_tokens_follows_the_span_s_cost():
    # A step in the span costs about m^3, at most 2.5e8 (629 tokens), and
    # the tracers' vote n m^2 (their coordinates), at most 2e10: 629 tokens
    # of 3000 at 2^20 features, where a step on dense tokens, m^2 d, bounds
    # them at 43 (dense rows, or the unnormalised model, which does not run
    # in the span).
    from attention_cluster._dynamics import _auto_subsample, _Flow

    sphere = _Flow("sa", 1.0, 0.1, None, None, None, 1024, 1)
    assert _auto_subsample(sphere, 3000, 2**20, sparse=True) == 629
    assert _auto_subsample(sphere, 3000, 2**20, sparse=False) == 43
    unnormalized = _Flow("unnormalized", 1.0, 0.1, None, None, None, 1024, 1)
    assert _auto_subsample(unnormalized, 3000, 2**20, sparse=True) == 43
    # Many tracers: their vote bounds the subsample, sqrt(2e10 / n).
    assert _auto_subsample(sphere, 10**6, 2**20, sparse=True) == math.isqrt(2 * 10**4)
    # TF-IDF documents of 5000 words: the dense bound, as many (633), holds.
    assert _auto_subsample(sphere, 2000, 5000, sparse=True) == math.isqrt(int(2e9 / 5000))


def test_sparse_tokens_in_their_span_are_grouped_alike_in_any_order(monkeypatch):
    # Sparse tokens are ordered by the bytes of their stored values and
    # columns (the dense ones by the bytes of their rows): the same rows in
    # another order, or stored otherwise (unsorted columns, explicit zeros),
    # run alike. Antipodal pairs make the mean zero but for rounding.
    monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", 0.0)
    rng = np.random.default_rng(1)
    Y = sp.random(30, 200, density=0.05, format="csr", random_state=rng)
    X = sp.vstack([Y, -Y, Y[:3]], format="csr")
    assert _dynamics._stays_sparse(X)
    want = SelfAttentionDynamics(beta=5.0).fit(X)
    for _ in range(3):
        order = rng.permutation(X.shape[0])
        shuffled = X[order].tocoo()
        entries = rng.permutation(shuffled.nnz)
        stored = sp.csr_matrix(
            (
                np.append(shuffled.data[entries], 0.0),
                (np.append(shuffled.row[entries], 0), np.append(shuffled.col[entries], 0)),
            ),
            shape=X.shape,
        )
        got = SelfAttentionDynamics(beta=5.0).fit(stored)
        np.testing.assert_array_equal(got.n_clusters_path_, want.n_clusters_path_)
        np.testing.assert_array_equal(got.labels_, want.labels_[order])


def test_centres_of_sparse_tokens_that_did_not_meet_are_refused_in_r_d(monkeypatch):
    # Wide sparse tokens that never met end as one cluster each, whose
    # centres in R^d were mapped back densely: 629 x 2^20 (5 GB) at beta =
    # 20 on 2000 hashed documents, past the machine's memory. Refused, the
    # estimator left unfitted, where they pass 1 GiB (here a smaller bound).
    monkeypatch.setattr(_dynamics, "DENSE_LIMIT_BYTES", 40 * 2**16 * 8)
    X, _ = _topic_documents(60, 2**16, 3, np.random.default_rng(0))
    model = SelfAttentionDynamics(beta=200.0, max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="stopped with 60 clusters, whose centres"):
            model.fit(X)
        assert not hasattr(model, "labels_")
        fitted = SelfAttentionDynamics(random_state=0).fit(X)  # three clusters pass
    assert fitted.n_clusters_ == 3


def test_sparse_tokens_refused_by_their_span_s_gram_matrix():
    # Sparse tokens in their span hold their m x m Gram matrix (and
    # coordinates) in float64, not their dense copy: refused before any
    # work where that passes 1 GiB.
    X, _ = _topic_documents(12_000, 2**20, 3, np.random.default_rng(0), words=5)
    with pytest.raises(ValueError, match="12000 x 12000 Gram matrix"):
        SelfAttentionDynamics(max_samples=None).fit(X)


@given(
    st.lists(st.floats(-100.0, 0.0, width=32), min_size=1, max_size=40),
    st.floats(-20.0, 20.0, width=32),
)
def test_exp_shifted_f32_is_numpy_exp(xs, top):
    # exp(x - top) in float32 within a few of float32's roundings of the
    # float64 exponential of the same float32 differences; below exp(-87)
    # it may stay at the floor exp(-87) (2e-38), next to the row's largest, 1.
    logits = np.array([xs], dtype=np.float32) + np.float32(top)
    top32 = np.array([top], dtype=np.float32)
    shifted = (logits - top32[:, None]).astype(np.float64)
    got = logits.copy()
    kern.exp_shifted_f32(got, top32, np.empty(len(xs), dtype=np.float32))
    normal = shifted >= -87.0
    np.testing.assert_allclose(got[normal], np.exp(shifted[normal]), rtol=3e-7, atol=0)
    assert np.all(got[~normal] <= np.exp(-87.0) * (1 + 1e-6))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_weighted_keys_match_reference(dtype, global_random_seed):
    # P_ij = softmax_j(beta <q_i, k_j> + log w_j) (math.md section 8, weighted particles).
    rng = np.random.default_rng(global_random_seed)
    Q = rng.standard_normal((30, 5)).astype(dtype)
    K, V = (rng.standard_normal((9000, 5)).astype(dtype) for _ in range(2))
    log_w = np.log(rng.integers(1, 50, 9000).astype(np.float64))
    out, log_norm = kern.attention(Q, K, V, 2.0, log_weights=log_w)
    ref, ref_log = attention_rows(Q, K, V, log_w, 2.0)
    rtol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(log_norm, ref_log, rtol=rtol)


@given(
    st.integers(1, 12),
    st.lists(st.integers(1, 5), min_size=1, max_size=12),
    st.sampled_from(["sa", "usa", "unnormalized"]),
    st.integers(0, 2**16),
)
def test_weighted_particle_steps_as_its_tokens(n_queries, multiplicity, model, seed):
    # A particle of weight w moves the others as w equal tokens would, and
    # moves as each of them: one step of the weighted particles is the step
    # of the tokens repeated.
    rng = np.random.default_rng(seed)
    Z = _unit(rng, len(multiplicity), 3)
    weights = np.asarray(multiplicity, dtype=np.float64)
    flow = _dynamics._check_flow(Z.shape, model, 2.0, 0.3, None, None, None, None, 1)
    moved, log_norm = flow.step(Z, 0.5, weights)
    tokens = np.repeat(Z, multiplicity, axis=0)
    ref, ref_log = flow.step(tokens, 0.5)
    np.testing.assert_allclose(np.repeat(moved, multiplicity, axis=0), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.repeat(log_norm, multiplicity), ref_log, rtol=1e-10)
    energy = _dynamics._energy(log_norm, 2.0, weights)
    np.testing.assert_allclose(energy, _dynamics._energy(ref_log, 2.0), rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n_clusters, noise", [(3, 0.3), (5, 0.5)], ids=str)
def test_merged_particles_fit_as_unmerged_dynamics(n_clusters, noise, dtype, monkeypatch):
    X = make_mixture(1500, n_features=10, n_clusters=n_clusters, noise=noise, random_state=1)[0]
    X = X.astype(dtype)
    merged = SelfAttentionDynamics().fit(X)
    with monkeypatch.context() as patch:
        patch.setattr(_dynamics._Particles, "moved", _dynamics._Particles.placed)
        exact = SelfAttentionDynamics().fit(X)
    assert merged.n_clusters_ == exact.n_clusters_
    np.testing.assert_array_equal(merged.labels_, exact.labels_)
    np.testing.assert_array_equal(merged.n_clusters_path_, exact.n_clusters_path_)
    rtol = 1e-6 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(merged.energy_path_, exact.energy_path_, rtol=rtol)
    np.testing.assert_allclose(merged.cluster_centers_, exact.cluster_centers_, atol=1e-4)


@given(st.integers(0, 2**16), st.integers(2, 5), st.sampled_from([5.0, 10.0, 20.0]))
def test_merging_keeps_the_clusters_of_the_unmerged_dynamics(seed, n_clusters, beta):
    X = make_mixture(300, n_features=6, n_clusters=n_clusters, noise=0.4, random_state=seed)[0]
    params = dict(beta=beta, stopping="horizon", max_iter=15)
    merged = SelfAttentionDynamics(**params).fit(X)
    original = _dynamics._Particles.moved
    try:
        _dynamics._Particles.moved = _dynamics._Particles.placed
        exact = SelfAttentionDynamics(**params).fit(X)
    finally:
        _dynamics._Particles.moved = original
    assert merged.n_clusters_ == exact.n_clusters_
    assert adjusted_rand_score(merged.labels_, exact.labels_) == 1.0
    np.testing.assert_array_equal(merged.n_clusters_path_, exact.n_clusters_path_)


@pytest.mark.parametrize("model", ["sa", "usa", "unnormalized"])
def test_equal_rows_are_one_cluster_without_a_step(model):
    # Every row the same: the tokens start as one particle, which moves as
    # one, so the plateau rule stops at the initial state; before, it ran to
    # max_iter and warned that no tokens had met.
    X = np.tile([[0.3, -1.2, 0.5]], (40, 1))
    # The mean-shift step (the default) is a step on the sphere.
    step = {"step_size": 0.1} if model == "unnormalized" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        dynamics = SelfAttentionDynamics(model=model, random_state=0, **step).fit(X)
    assert dynamics.n_clusters_ == 1 and dynamics.n_iter_ == dynamics.stopping_step_ == 0
    np.testing.assert_array_equal(dynamics.labels_, 0)
    np.testing.assert_array_equal(dynamics.n_clusters_path_, [1])
    # The horizon rule still runs its steps, to the same single cluster.
    horizon = SelfAttentionDynamics(model=model, stopping="horizon", max_iter=3, **step).fit(X)
    assert horizon.n_clusters_ == 1 and horizon.n_iter_ == 3


def test_choosing_k_on_equal_rows_gives_one_cluster_without_a_convergence_warning():
    X = np.ones((50, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)  # the fit's own: the rows have no spread
        model = AttentionClustering("auto", random_state=0).fit(X)
    assert model.n_clusters_ == 1 and model.n_clusters_scores_[1] > 0


def test_equal_tokens_are_one_particle_from_the_start():
    # Duplicated rows: the fit is that of the distinct rows, each counted with its copies.
    X = make_mixture(400, n_features=5, n_clusters=3, noise=0.3, random_state=0)[0]
    twice = np.vstack([X, X])
    once = SelfAttentionDynamics(min_cluster_size=8, stopping="horizon", max_iter=12).fit(X)
    both = SelfAttentionDynamics(min_cluster_size=16, stopping="horizon", max_iter=12).fit(twice)
    np.testing.assert_array_equal(both.labels_, np.tile(once.labels_, 2))
    np.testing.assert_allclose(both.energy_path_, once.energy_path_, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("weighted", [False, True], ids=["equal", "weighted"])
@pytest.mark.parametrize("block_rows", [None, 7], ids=["blocks", "small blocks"])
def test_self_attention_matches_reference(block_rows, weighted, dtype, global_random_seed):
    # Queries = keys, each symmetric tile used for both of its blocks (600
    # tokens: two blocks of at most 512, or 86 of 7).
    rng = np.random.default_rng(global_random_seed)
    X = (_unit(rng, 600, 5) * rng.uniform(0.5, 1.5, (600, 1))).astype(dtype)
    V = rng.standard_normal((600, 3)).astype(dtype)
    log_w = np.log(rng.integers(1, 30, 600).astype(np.float64)) if weighted else None
    out, log_norm = kern.self_attention(X, V, 4.0, log_w, block_rows=block_rows, n_threads=2)
    assert out.dtype == log_norm.dtype == dtype
    ref, ref_log = attention_rows(X, X, V, np.zeros(600) if log_w is None else log_w, 4.0)
    rtol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(log_norm, ref_log, rtol=rtol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_self_attention_does_not_depend_on_threads(dtype, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = _unit(rng, 2100, 6).astype(dtype)
    log_w = np.log(rng.integers(1, 9, 2100).astype(np.float64))
    one = kern.self_attention(X, X, 10.0, log_w, n_threads=1)
    three = kern.self_attention(X, X, 10.0, log_w, n_threads=3)
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)


def test_self_attention_of_float32_tokens_holds_no_float64_copy_of_them(traced_peak):
    # The tokens' squared norms and sqrt(beta) x_i are formed in float64 by
    # blocks of tokens, and so is the output's division: float32 tokens
    # whose float64 copies (the tokens, their scaled copy, the products'
    # rows and the output) were held whole peaked at 12 times their size,
    # 7.1 times by blocks; float64 ones 7.0 and 5.3 times theirs.
    rng = np.random.default_rng(0)
    X = _unit(rng, 2048, 512).astype(np.float32)
    kern.self_attention(X, X, 10.0)
    (out, _), peak = traced_peak(lambda: kern.self_attention(X, X, 10.0))
    assert out.dtype == np.float32
    assert peak < 9 * X.nbytes


def test_self_attention_of_far_spread_norms_is_attention(monkeypatch):
    # Norms 1 and 12 at beta 1: the shifts beta |x|^2 / 2 spread over 71, more than
    # float32 allows: the rows are attended over with their own maxima instead.
    rng = np.random.default_rng(0)
    X = (_unit(rng, 50, 3) * np.where(np.arange(50) < 25, 1.0, 12.0)[:, None]).astype(np.float32)
    calls = []
    attention = kern.attention
    monkeypatch.setattr(kern, "attention", lambda *args: calls.append(1) or attention(*args))
    out, log_norm = kern.self_attention(X, X, 1.0)
    assert calls == [1]
    ref, ref_log = attention_rows(X, X, X, np.zeros(50), 1.0)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(log_norm, ref_log, rtol=2e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_self_attention_at_a_beta_past_its_logits_rounding_is_the_hard_argmax(n, dtype):
    # E_ij = beta <x_i, x_j> - s_i - s_j is formed by cancellation of terms
    # of 2 beta |x|^2: at beta 1e20 to 1e300 on unit tokens its rounding,
    # about eps beta, made a token's own term exp(E_ii) infinite or zero
    # (NaN rows: attention_flow of one token raised FloatingPointError at
    # beta = 1e50) or weighted the tokens wrongly. Each token attends to
    # itself alone there, as attention() finds with its rows' maxima.
    betas = 10.0 ** np.arange(8, 301, 4)
    for seed in range(5):
        X = _unit(np.random.default_rng(seed), n, 3).astype(dtype)
        for beta in betas:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                out, _ = kern.self_attention(X, X, beta)
            np.testing.assert_allclose(out, X, rtol=1e-6, atol=1e-6)
    out = attention_flow(_unit(np.random.default_rng(0), 1, 3), 2, beta=1e50)
    np.testing.assert_allclose(out[-1], out[0], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_predict_works_by_chunks_of_rows(dtype, monkeypatch, traced_peak):
    # Labels are n integers; predict held the unit rows twice and their
    # float64 copy, for all rows at once: 2.5 X for float64, 4 X for float32.
    X = make_mixture(40000, 20, 3, noise=0.3, random_state=0)[0].astype(dtype)
    model = SelfAttentionDynamics(random_state=0, max_samples=500).fit(X[:500])
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 1 << 16)  # chunks of 256 rows
    labels, peak = traced_peak(lambda: model.predict(X))
    assert peak < 0.5 * X.nbytes + 2 * labels.nbytes


@pytest.mark.parametrize("params", [dict(beta=-1.0), dict(max_iter=0), dict(query=np.eye(3))])
def test_bad_parameters_are_refused_before_x_is_read(params, monkeypatch):
    # fit validated (copied) X first: 0.1 s for 2e6 x 20 integers before a
    # bad beta was refused.
    def no_reading(*args, **kwargs):
        raise AssertionError("X was read")

    monkeypatch.setattr(_dynamics, "validate_data", no_reading)
    with pytest.raises(InvalidParameterError):
        SelfAttentionDynamics(**params).fit(np.ones((10, 4)))


def test_usa_at_a_numeric_step_warns_where_its_rounding_moves_tokens():
    # usa scales each attention mean by Z_i / n, up to e^beta / n, and forms
    # the tangent by cancellation: at beta = 100 a step of attention_flow was
    # 1.37 off an exact one on the unit sphere, at beta = 10 float32 rows gave
    # 9 clusters where their float64 copy gave 7, silently.
    X = np.random.default_rng(0).normal(size=(24, 3))
    with pytest.warns(UserWarning, match="a step's rounding may have moved tokens") as record:
        attention_flow(X, 7, model="usa", beta=100.0, step_size=1.0)
    assert record[0].filename == __file__
    kw = dict(model="usa", beta=10.0, step_size=1.0, max_iter=7, stopping="horizon")
    with pytest.warns(UserWarning, match="a step's rounding may have moved tokens"):
        SelfAttentionDynamics(**kw).fit(X.astype(np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # float64 rounding times e^10 / 24: below 1e-6
        SelfAttentionDynamics(**kw).fit(X)
    # (The step passes the attention means, h <x_i, m_i> far above 2: warned of.)
    assert not any("rounding" in str(w.message) for w in caught)
    assert any("cannot meet" in str(w.message) for w in caught)


def test_a_count_that_changes_at_every_step_warns():
    # Tokens crossing each other at a numeric step: once they met, the count
    # rose and fell at every step (0, 12, 2, 6, 7, 17, ...), and the longest
    # "plateau", one state of 33 clusters on a mixture of 3, was the answer
    # without a warning.
    X, _, _ = make_mixture(300, 4, 3, noise=0.3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="held for two steps once tokens met") as record:
        model = SelfAttentionDynamics(model="usa", beta=3.0, step_size=0.5).fit(X)
    message = str(record[0].message)
    assert f"{model.n_clusters_} clusters at step {model.stopping_step_}, held for one" in message
    assert "step_size too large" in message
    assert record[0].filename == __file__


def test_groups_below_min_cluster_size_are_named_as_such():
    # Three groups of about 100 tokens meet, none of 150: the warning said
    # "No tokens met", and the fix it gave (more steps, a larger beta) cannot help.
    X, _, _ = make_mixture(300, 5, 3, noise=0.3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="No group of tokens reached min_cluster_size=150"):
        SelfAttentionDynamics(min_cluster_size=150).fit(X)
    # More than the tokens: no time lets a group reach it, and none is advised.
    with pytest.warns(ConvergenceWarning, match="which no group of the tokens can reach") as record:
        SelfAttentionDynamics(min_cluster_size=400).fit(X)
    assert "max_iter" not in str(record[0].message).split("clustered.")[1]


def test_groups_below_min_cluster_size_after_few_steps_advise_more_time():
    # After 2 steps the largest group holds 2 of the 2000 tokens: the warning
    # advised only a lower min_cluster_size, after which the run still stops
    # unsettled; 5 steps find the 3 clusters.
    X, _, _ = make_mixture(2000, 10, 3, noise=0.3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="No group of tokens reached") as record:
        SelfAttentionDynamics(model="usa", max_iter=2, random_state=0).fit(X)
    assert "Lower min_cluster_size, or give the tokens more time" in str(record[0].message)
    assert "Increase max_iter, or lower beta" in str(record[0].message)


# -- sample weights: a row of weight w is w tokens at one place


_MODELS = [
    dict(),
    dict(model="usa", beta=3.0, step_size=0.5),
    dict(model="unnormalized", beta=0.5, step_size=0.1),
]


def _weighted_rows(seed):
    """15 rows in 30 dimensions (scikit-learn's weight check's) and integer
    weights from 0 to 4, the first 1."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(15, 30))
    weights = rng.integers(0, 5, 15)
    weights[0] = 1
    return X, weights


@pytest.mark.parametrize("params", _MODELS, ids=["sa", "usa", "unnormalized"])
@pytest.mark.parametrize("seed", range(3))
def test_integer_weights_fit_as_repeated_rows(params, seed):
    # fit had no sample_weight; a row of weight w now starts as a particle
    # of w tokens, which is what w repeated rows become at step 0.
    X, weights = _weighted_rows(seed)
    repeated = SelfAttentionDynamics(random_state=0, **params).fit(np.repeat(X, weights, axis=0))
    weighted = SelfAttentionDynamics(random_state=0, **params).fit(X, sample_weight=weights)
    np.testing.assert_array_equal(weighted.n_clusters_path_, repeated.n_clusters_path_)
    np.testing.assert_allclose(
        weighted.cluster_centers_, repeated.cluster_centers_, rtol=1e-12, atol=1e-12
    )
    kept = weights > 0
    np.testing.assert_array_equal(
        weighted.labels_[kept], repeated.labels_[np.cumsum(weights)[kept] - 1]
    )
    # The unnormalised model's leaders: the rows of the repeated rows' leaders.
    np.testing.assert_array_equal(
        weighted.leaders_, np.repeat(np.arange(15), weights)[repeated.leaders_]
    )


@pytest.mark.parametrize("params", _MODELS[:2], ids=["sa", "usa"])
@pytest.mark.parametrize("seed", range(3))
def test_the_order_of_the_rows_leaves_the_fit_as_it_is(params, seed):
    # The steps are taken in an order of the particles' places, so the
    # rows' order does not change their sums: the usa run here never
    # settles, and rounding, amplified over its 100 steps, moved its
    # centres by 0.1 when the rows came in another order, and with them
    # the weighted rows' fit from the repeated rows' (scikit-learn's
    # check_sample_weight_equivalence shuffles the rows). The order still
    # decides which token starts a group (the counts on the way may
    # differ) and where tokens that meet merge, at the place of the first
    # (math.md section 8, "Weighted particles"): the centres agree within
    # the merge radius, cluster_tol / 1000.
    X, weights = _weighted_rows(seed)
    order = np.random.default_rng(seed).permutation(15)
    repeated = np.repeat(X, weights, axis=0)
    want = SelfAttentionDynamics(random_state=0, **params).fit(repeated)
    for got in (
        SelfAttentionDynamics(random_state=0, **params).fit(repeated[::-1]),
        SelfAttentionDynamics(random_state=0, **params).fit(X[order], sample_weight=weights[order]),
    ):
        assert got.n_clusters_ == want.n_clusters_
        np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(got.predict(X), want.predict(X))


def test_rows_of_equal_weight_fit_as_no_weights(mixture):
    X = mixture[0][:500]
    plain = SelfAttentionDynamics(random_state=0).fit(X)
    for weights in (np.ones(500), np.full(500, 0.3), np.full(500, 7.0)):
        weighted = SelfAttentionDynamics(random_state=0).fit(X, sample_weight=weights)
        np.testing.assert_array_equal(weighted.cluster_centers_, plain.cluster_centers_)
        np.testing.assert_array_equal(weighted.labels_, plain.labels_)
        np.testing.assert_array_equal(weighted.n_clusters_path_, plain.n_clusters_path_)
        np.testing.assert_array_equal(weighted.energy_path_, plain.energy_path_)


def test_rows_of_weight_zero_are_absent_and_labelled_as_tracers(mixture):
    X = mixture[0][:400]
    far = 50.0 * np.random.default_rng(0).standard_normal((40, X.shape[1]))
    padded = np.vstack([X[:200], far, X[200:]])
    weights = np.r_[np.ones(200), np.zeros(40), np.ones(200)]
    plain = SelfAttentionDynamics(random_state=0).fit(X)
    weighted = SelfAttentionDynamics(random_state=0).fit(padded, sample_weight=weights)
    np.testing.assert_array_equal(weighted.cluster_centers_, plain.cluster_centers_)
    np.testing.assert_array_equal(weighted.n_clusters_path_, plain.n_clusters_path_)
    np.testing.assert_array_equal(weighted.labels_[weights > 0], plain.labels_)
    np.testing.assert_array_equal(weighted.subsample_indices_, np.flatnonzero(weights))
    assert set(weighted.labels_[200:240]) <= set(range(weighted.n_clusters_))


def test_weights_count_tokens_for_min_cluster_size():
    # Two rows, one of weight 9: with min_cluster_size=0.5 only the heavy
    # row is a cluster of the 10 tokens until the two meet.
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    path = (
        SelfAttentionDynamics(min_cluster_size=0.5, stopping="horizon", max_iter=1)
        .fit(X, sample_weight=[9.0, 1.0])
        .n_clusters_path_
    )
    assert path[0] == 1
    assert (
        SelfAttentionDynamics(min_cluster_size=0.5, stopping="horizon", max_iter=1)
        .fit(X)
        .n_clusters_path_[0]
        == 2
    )


def test_a_subsample_holds_rows_of_positive_weight_with_their_weights(mixture):
    X = mixture[0][:600]
    weights = np.r_[np.zeros(200), np.random.default_rng(0).integers(1, 4, 400)]
    model = SelfAttentionDynamics(max_samples=150, random_state=0).fit(X, sample_weight=weights)
    assert len(model.subsample_indices_) == 150
    assert np.all(model.subsample_indices_ >= 200)
    assert model.labels_.shape == (600,)


@pytest.mark.parametrize(
    "weights, match",
    [
        (np.zeros(20), "must not sum to zero"),
        (-np.ones(20), "non-negative"),
        (np.ones(19), "sample_weight.shape"),
    ],
    ids=["zero", "negative", "shape"],
)
def test_bad_weights_raise(weights, match):
    X = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.raises(ValueError, match=match):
        SelfAttentionDynamics().fit(X, sample_weight=weights)


@pytest.mark.parametrize("factor", [0.37, 3.0, 1e-5, 7e11])
def test_token_weights_count_tokens_by_the_weights_ratios_alone(factor):
    # w / w_min of c w rounded off an integer (0.37 w: 65 of 178 tokens
    # counted 2.0000000000000004), which a run that never settles amplified
    # (K 3 against 5): ratios within a few ulps of an integer are it.
    from attention_cluster._dynamics import token_weights

    X = np.zeros((300, 2))
    w = np.random.default_rng(0).integers(1, 5, 300).astype(float)
    np.testing.assert_array_equal(token_weights(factor * w, X), w)


def test_token_weights_of_ratios_beyond_float64_stay_finite():
    # A subnormal weight beside ones: w / w_min overflowed, and the K-finder
    # refused finite weights ("sample_weight must be finite"). The lightest
    # rows now count as fractions of a token, at most 2^1000 tokens a row.
    from attention_cluster._dynamics import token_weights

    X = np.zeros((3, 2))
    tokens = token_weights(np.array([1e-310, 1.0, 2.0]), X)
    assert tokens[2] == 2.0 * tokens[1] and tokens[2] == 2.0**1000
    assert 0.0 < tokens[0] < 1.0


def test_a_fraction_of_the_tokens_is_rounded_up_from_the_exact_product():
    # 0.07 x 100 is 7.000000000000001 in float64, which the ceiling took to
    # 8: groups of exactly 7 tokens did not count (with weights too).
    rng = np.random.default_rng(0)
    C = rng.standard_normal((7, 20))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    X = np.vstack([np.repeat(C, 7, axis=0), rng.standard_normal((51, 20))])
    params = dict(stopping="horizon", max_iter=1, beta=50.0)
    by_fraction = SelfAttentionDynamics(min_cluster_size=0.07, **params).fit(X)
    by_count = SelfAttentionDynamics(min_cluster_size=7, **params).fit(X)
    assert by_fraction.n_clusters_path_[0] == by_count.n_clusters_path_[0] == 7
    weighted = SelfAttentionDynamics(min_cluster_size=0.07, **params).fit(
        np.vstack([C, X[49:]]), sample_weight=np.r_[np.full(7, 7.0), np.ones(51)]
    )
    assert weighted.n_clusters_path_[0] == 7


def test_weights_of_any_ratio_warn_only_when_tokens_are_left_out():
    # Three tight clusters, every token counted after 2 steps: with weights
    # from [1, 2] the check compared two sums of the weights taken in
    # different orders and warned of 1e-13 tokens "in no cluster" (16 of 20
    # seeds).
    X = make_mixture(600, 10, 3, noise=0.001, random_state=0)[0]
    for seed in range(5):
        w = np.random.default_rng(seed).uniform(1, 2, 600)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            SelfAttentionDynamics(max_iter=2).fit(X, sample_weight=w)


# -- tokens wider than they are many: the dynamics of their coordinates


def test_gram_basis_against_numpy(global_random_seed):
    # docs/math.md section 8, "Tokens wider than they are many": B = Z^T W
    # is an orthonormal basis of the rows' span, E = Z B = G W, a vector's
    # coordinates are (y Z^T) W, and coordinates e the vector e W^T Z.
    from attention_cluster._scale import gram_basis

    rng = np.random.default_rng(global_random_seed)
    Z = rng.standard_normal((6, 3)) @ rng.standard_normal((3, 40))  # rank 3
    E, W = gram_basis(Z @ Z.T)
    assert E.shape == W.shape == (6, 3)
    B = Z.T @ W
    np.testing.assert_allclose(B.T @ B, np.eye(3), atol=1e-10)
    np.testing.assert_allclose(E, Z @ B, atol=1e-10)
    np.testing.assert_allclose(E @ E.T, Z @ Z.T, atol=1e-10)
    y = rng.standard_normal((2, 40))
    coordinates = (y @ Z.T) @ W
    np.testing.assert_allclose(coordinates @ E.T, y @ Z.T, atol=1e-10)
    # A vector of the span is its coordinates mapped back.
    v = rng.standard_normal((2, 6)) @ Z
    np.testing.assert_allclose(((v @ Z.T) @ W) @ W.T @ Z, v, atol=1e-10)


@given(st.integers(0, 2**16), st.integers(1, 30), st.integers(0, 3))
@settings(max_examples=30, deadline=None)
def test_gram_factor_is_a_basis_of_the_span(seed, m, deficient):
    # docs/math.md section 8, "Tokens wider than they are many": whichever
    # factor is taken (Cholesky's of a well-conditioned Gram matrix, the
    # eigendecomposition of a singular one), B = Z^T W is an orthonormal
    # basis of the span, E = Z B = G W, and E E^T = G.
    from attention_cluster._scale import gram_factor

    rng = np.random.default_rng(seed)
    rank = max(m - deficient, 1)
    # Rows of that rank whose singular values lie in [1, 10] (a condition
    # number of at most 100 on the span: the rounding of W stays near eps).
    U = np.linalg.qr(rng.standard_normal((m, rank)))[0]
    V = np.linalg.qr(rng.standard_normal((2 * m + 5, rank)))[0]
    Z = (U * rng.uniform(1.0, 10.0, rank)) @ V.T
    E, W = gram_factor(Z @ Z.T)
    assert E.shape == W.shape == (m, rank)
    B = Z.T @ W
    np.testing.assert_allclose(B.T @ B, np.eye(rank), atol=1e-10)
    np.testing.assert_allclose(E, Z @ B, atol=1e-10)
    np.testing.assert_allclose(E @ E.T, Z @ Z.T, atol=1e-10)


def test_a_well_conditioned_span_takes_no_eigendecomposition(monkeypatch):
    # The span's basis is the Cholesky factor of the tokens' Gram matrix:
    # its eigendecomposition took 70 to 90 ms of 633 TF-IDF documents, where
    # the factor takes 10 ms. A singular Gram matrix (rows in antipodal pairs)
    # still takes the eigendecomposition.
    from attention_cluster import _scale

    calls = []
    eigh = np.linalg.eigh

    def counted(a):
        calls.append(a.shape)
        return eigh(a)

    monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", 0.0)
    monkeypatch.setattr(_scale.np.linalg, "eigh", counted)
    Y = np.random.default_rng(0).standard_normal((30, 130))
    SelfAttentionDynamics(beta=5.0).fit(Y)
    assert calls == []
    SelfAttentionDynamics(beta=5.0).fit(np.vstack([Y, -Y]))
    assert calls == [(60, 60)]


@pytest.mark.parametrize(
    "kind, weighted, max_samples",
    [
        ("float64", False, None),
        ("float32", False, None),
        ("sparse", True, None),
        ("thin sparse", True, None),
        ("thin sparse", False, 80),
        ("float64", True, 80),
    ],
)
def test_wide_tokens_run_on_their_coordinates_as_on_themselves(
    kind, weighted, max_samples, monkeypatch
):
    # d >= 2 m: the run in the coordinates of the tokens' span is the run on
    # the tokens (an isometry; rounding apart), with the same clusters, the
    # same staircase, and limit points back in R^d; the tracers beyond
    # max_samples vote by their inner products with the tokens, kept.
    X, _, _ = make_mixture(120, n_features=400, n_clusters=3, noise=0.05, random_state=0)
    X = X.astype(np.float32) if kind == "float32" else X
    X = sp.csr_matrix(np.where(np.abs(X) > 0.05, X, 0.0)) if kind == "sparse" else X
    # (5% of the entries: the tokens stay sparse in their span, _stays_sparse.)
    X = sp.csr_matrix(np.where(np.abs(X) > 0.14, X, 0.0)) if kind == "thin sparse" else X
    assert _dynamics._stays_sparse(X) == (kind == "thin sparse")
    w = np.random.default_rng(0).integers(1, 4, 120).astype(float) if weighted else None
    calls = []
    basis = _dynamics.gram_factor

    def counted(gram):
        calls.append(gram.shape)
        return basis(gram)

    monkeypatch.setattr(_dynamics, "gram_factor", counted)
    fits = {}
    for name, work in (("given", np.inf), ("coordinates", 0.0)):
        monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", work)
        model = SelfAttentionDynamics(beta=10.0, max_samples=max_samples, random_state=0)
        fits[name] = model.fit(X, sample_weight=w)
    assert calls == [(max_samples or 120,) * 2]
    given, coordinates = fits["given"], fits["coordinates"]
    assert given.n_clusters_ == 3
    assert coordinates.n_clusters_ == given.n_clusters_
    np.testing.assert_array_equal(coordinates.labels_, given.labels_)
    np.testing.assert_array_equal(coordinates.n_clusters_path_, given.n_clusters_path_)
    assert coordinates.cluster_centers_.dtype == given.cluster_centers_.dtype
    atol = 1e-4 if kind == "float32" else 1e-8
    np.testing.assert_allclose(coordinates.cluster_centers_, given.cluster_centers_, atol=atol)
    np.testing.assert_array_equal(coordinates.predict(X), given.predict(X))


@pytest.mark.parametrize("n, d", [(45, 2), (61, 3), (30, 5)])
def test_the_grouping_does_not_depend_on_the_order_of_the_rows(n, d, global_random_seed):
    # The greedy grouping joins a token to the first group whose first
    # token is within cluster_tol: visited in the rows' order, a chain of
    # close tokens split where the rows put it, and the same rows in
    # another order gave other counts along the way, another stopping step
    # and another number of clusters (2 against 40 on 45 rows in 2-D, 5
    # against 2 on 61 rows in 3-D). Tokens are now visited in the order of
    # their places.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((n, d))
    want = SelfAttentionDynamics(beta=5.0).fit(X)
    for _ in range(2):
        order = rng.permutation(n)
        got = SelfAttentionDynamics(beta=5.0).fit(X[order])
        np.testing.assert_array_equal(got.n_clusters_path_, want.n_clusters_path_)
        assert got.stopping_step_ == want.stopping_step_
        np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
        np.testing.assert_array_equal(got.labels_, want.labels_[order])


@pytest.mark.parametrize("width, draws", [(2, 5), (130, 3)], ids=["narrow", "wide"])
def test_rows_in_antipodal_pairs_are_grouped_alike_in_any_order(width, draws, monkeypatch):
    # Their mean is zero but for rounding, which depended on the order the
    # rows were summed in, and so did the projections that order the
    # tokens: the counts on the way differed in 13 of 20 draws. The mean is
    # now summed in the order of the rows' bytes, and wide rows, which step
    # in the span's coordinates (here an eigenbasis, of their singular Gram
    # matrix, whose rounding follows the rows' order), are ordered in R^d.
    monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", 0.0)
    rng = np.random.default_rng(1)
    for _ in range(draws):
        Y = rng.standard_normal((30, width))
        X = np.vstack([Y, -Y])
        want = SelfAttentionDynamics(beta=5.0).fit(X)
        for _ in range(3):
            order = rng.permutation(len(X))
            got = SelfAttentionDynamics(beta=5.0).fit(X[order])
            np.testing.assert_array_equal(got.n_clusters_path_, want.n_clusters_path_)
            np.testing.assert_array_equal(got.labels_, want.labels_[order])


def test_wide_tokens_are_numbered_alike_in_any_order(monkeypatch):
    # Equal clusters are numbered by their centres' coordinates: in the
    # span's coordinates (an eigenbasis, whose signs follow the rows'
    # order, or a Cholesky factor, which follows it) the numbering depended
    # on the rows' order; the centres are numbered in R^d.
    monkeypatch.setattr(_dynamics, "_SPAN_MIN_WORK", 0.0)
    rng = np.random.default_rng(0)
    C = rng.standard_normal((2, 200))
    X = np.repeat(C, 30, axis=0) + 0.3 * rng.standard_normal((60, 200))
    want = SelfAttentionDynamics().fit(X)
    assert want.n_clusters_ == 2 and np.all(np.bincount(want.labels_) == 30)
    for seed in range(4):
        order = np.random.default_rng(seed).permutation(60)
        got = SelfAttentionDynamics().fit(X[order])
        np.testing.assert_array_equal(got.labels_, want.labels_[order])
        np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, atol=1e-12)


def test_a_chain_of_close_tokens_is_grouped_alike_in_any_order():
    # Tokens at angles 0, 0.008, 0.016 (each within cluster_tol = 0.01 of
    # the next, the ends 0.016 apart) and one far away: in the order given
    # the middle one joined the first and the third started a group; given
    # first, it took both.
    t = np.array([0.0, 0.008, 0.016, 2.0])
    X = np.c_[np.cos(t), np.sin(t)]
    params = dict(beta=1e-6, step_size=1e-9, stopping="horizon", max_iter=1, min_cluster_size=1)
    counts = {
        tuple(order): SelfAttentionDynamics(**params).fit(X[order]).n_clusters_
        for order in ([0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [3, 1, 2, 0])
    }
    assert len(set(counts.values())) == 1, counts


def test_the_dense_limit_is_for_sparse_rows_alone(monkeypatch):
    # Dense float32 rows under the unnormalised model (which steps in
    # float64) were refused with the sparse rows' message ("the other rows
    # stay sparse"): the float64 copy is the model's own, of rows already in
    # memory. Sparse rows are still refused before any step.
    monkeypatch.setattr(_dynamics, "DENSE_LIMIT_BYTES", 4000)
    X = np.random.default_rng(0).standard_normal((100, 3))  # 2400 bytes in float64
    params = dict(model="unnormalized", step_size=0.1, max_iter=5, stopping="horizon")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        single = SelfAttentionDynamics(**params).fit(X.astype(np.float32))
        double = SelfAttentionDynamics(**params).fit(X)
    assert single.n_clusters_ == double.n_clusters_
    wide = sp.random(100, 50, density=0.02, random_state=0, format="csr")  # 40000 bytes dense
    with pytest.raises(ValueError, match="as a dense array"):
        SelfAttentionDynamics(max_samples=None).fit(wide)


@pytest.mark.parametrize("step_size", ["mean-shift", 0.5])
def test_float32_dynamics_past_float32s_logits_is_float64s(step_size):
    # beta = 1e39, logits beyond float32's range: the float32 fit is the
    # float64 one, its rows of weight zero (passive tracers) labelled alike
    # and its energy infinite. (Its steps' attention was NaN: a numeric step
    # raised FloatingPointError, the energy was NaN, and every tracer took
    # label 0, with a RuntimeWarning.)
    X = np.random.default_rng(0).standard_normal((40, 3))
    weights = np.r_[np.zeros(10), np.ones(30)]
    params = dict(beta=1e39, step_size=step_size, max_iter=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("error", RuntimeWarning)
        double = SelfAttentionDynamics(**params).fit(X, sample_weight=weights)
        single = SelfAttentionDynamics(**params).fit(X.astype(np.float32), sample_weight=weights)
    assert single.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(single.labels_, double.labels_)
    assert len(set(double.labels_[:10])) > 1
    np.testing.assert_array_equal(single.energy_path_, double.energy_path_)


@pytest.mark.parametrize("step_size", ["mean-shift", 0.5])
@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_float32_dynamics_of_a_map_past_float32s_range_is_float64s(name, step_size):
    # A query, key or value of 1e200: float32 tokens' products with it are
    # formed in float64, and the float32 fit is the float64 one. (Cast to
    # float32 the map was infinite: the tracers' vote warned of it, the
    # tokens' attention was NaN, a numeric step raised FloatingPointError
    # and a mean-shift step left every token where it was: 40 clusters of
    # one token where the float64 fit of the value map found one.)
    X = np.random.default_rng(0).standard_normal((40, 3))
    weights = np.r_[np.zeros(10), np.ones(30)]
    params = {name: 1e200 * np.eye(3), "step_size": step_size, "max_iter": 5, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)  # a step past the attention means
        warnings.simplefilter("error", RuntimeWarning)
        for w in (None, weights):
            double = SelfAttentionDynamics(**params).fit(X, sample_weight=w)
            single = SelfAttentionDynamics(**params).fit(X.astype(np.float32), sample_weight=w)
            assert single.cluster_centers_.dtype == np.float32
            np.testing.assert_array_equal(single.labels_, double.labels_)


def test_usa_in_float32_steps_where_float64_does():
    # USA's factor Z_i / n was cast to float32, which it leaves at e^88:
    # beta = 100 on unit tokens raised FloatingPointError in float32 alone.
    # The step makes h Z_i / n about 0.5, a contraction: tokens merge (37
    # clusters of 50). At step_size=1e-40 (h Z_i / n about 54) each step
    # multiplied a token's distance to its attention mean by about 54, and
    # after 20 steps the counts of float32 and float64 tokens were their
    # roundings', amplified: equal on one machine, 50 against 49 on another.
    X = np.random.default_rng(0).standard_normal((50, 3))
    params = dict(model="usa", beta=100.0, step_size=1e-42, max_iter=20, stopping="horizon")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        double = SelfAttentionDynamics(**params).fit(X)
        single = SelfAttentionDynamics(**params).fit(X.astype(np.float32))
    assert single.cluster_centers_.dtype == np.float32
    assert single.n_clusters_ == double.n_clusters_
    assert adjusted_rand_score(single.labels_, double.labels_) == 1.0


@pytest.mark.parametrize("n, seed", [(30, 37), (50, 102), (100, 65)])
def test_a_plateau_counts_once_most_tokens_have_met(n, seed):
    # Of 100 tokens or fewer, min_cluster_size=0.01 is one token: every
    # group counted as a cluster, and a state where a few pairs had met was
    # a plateau. 2-D rows (on the circle, where tokens start close) stopped
    # at the second step with about n "clusters" (27 of 30, 45 of 50, 83 of
    # 100), with no warning. A plateau now counts once groups of more than
    # one token hold most tokens.
    # Weighted rows alike: tokens are counted by their weights, and a row
    # of weight 1.5 alone has met no other (counting groups of more than
    # one token, any row heavier than the lightest had).
    # Rows at one place (repeated, or one row of weight 2) have met no
    # other: counting groups of two tokens by weight, every row repeated
    # twice had met from the start.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    one_lighter = np.r_[0.99, np.ones(n - 1)]
    ones_and_twos = rng.integers(1, 3, n).astype(float)
    fits = [
        (X, weights) for weights in (None, one_lighter, rng.uniform(1.0, 2.0, n), ones_and_twos)
    ] + [(np.repeat(X, 2, axis=0), None)]
    for rows, weights in fits:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            model = SelfAttentionDynamics().fit(rows, sample_weight=weights)
        assert model.n_clusters_ <= 10
        assert model.stopping_step_ > 2
        sizes = np.bincount(model.labels_[: len(X)])
        assert np.sum(sizes[sizes > 1]) > n / 2


def test_a_plateau_begins_at_the_first_state_where_most_tokens_met():
    # 12 tokens near a pole, 28 spread away from it, clusters of 10 tokens
    # or more: one cluster from the first step, while the tokens that had
    # met grew from 11 to 26 of 40; the plateau was measured from the first
    # step and stopped at the third (K = 1), where the run goes on to two
    # clusters held from the fifth step. It now begins once most have met.
    rng = np.random.default_rng(0)
    A = np.array([0, 0, 1.0]) + 0.08 * rng.standard_normal((12, 3))
    B = rng.standard_normal((28, 3))
    B[:, 2] = -np.abs(B[:, 2]) - 0.3
    model = SelfAttentionDynamics(beta=4.0, min_cluster_size=10).fit(np.vstack([A, B]))
    assert model.n_clusters_ == 2
    assert model.stopping_step_ > 5


@pytest.mark.parametrize(
    "weighted, match",
    [
        (False, r"Fewer than half of the 100 tokens met .* hold 20"),
        (True, r"Fewer than half of the 114.143 tokens met"),
    ],
    ids=["unweighted", "weighted"],
)
def test_a_run_where_few_tokens_met_says_so(weighted, match):
    # Ten pairs of nearly equal rows (two places 5e-3 apart, within
    # cluster_tol, beyond the merging of tokens at a thousandth of it) among
    # 80 rows apart, in 50 dimensions, at a resolution where none of the
    # others meet: the pairs met, most tokens did not, and no plateau
    # counts; the warning said nothing, the count having never changed.
    # With sample weights the tokens are counted by their weights, whose sum
    # the warning printed to 15 places ("5390.49466896178 tokens"): now 6.
    rng = np.random.default_rng(0)
    pairs = np.repeat(rng.standard_normal((10, 50)), 2, axis=0)
    pairs += 5e-4 * rng.standard_normal(pairs.shape)
    X = np.vstack([pairs, rng.standard_normal((80, 50))])
    w = 1.0 + np.arange(len(X)) % 3 / 7.0 if weighted else None
    with pytest.warns(ConvergenceWarning, match=match):
        SelfAttentionDynamics(beta=200.0, max_iter=5).fit(X, sample_weight=w)


def test_aggregated_rows_are_groups_of_their_own():
    # Two rows of 30 copies each (or of weight 30) and ten noisy rows near a
    # third direction: counting only groups of two places as met, the heavy
    # places never met, no plateau counted, and the run went to max_iter
    # with a warning to lower beta (which merges the real clusters). A
    # place of twice the mean place's tokens is a group of its own.
    rng = np.random.default_rng(0)
    d = 5
    A, B, C = np.eye(d)[0], np.eye(d)[1], -np.ones(d) / np.sqrt(d)
    C = C + 0.05 * rng.standard_normal((10, d))
    repeated = np.vstack([np.repeat(A[None], 30, 0), np.repeat(B[None], 30, 0), C])
    weighted, w = np.vstack([A, B, C]), np.r_[30.0, 30.0, np.ones(10)]
    for rows, weights in ((repeated, None), (weighted, w)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            model = SelfAttentionDynamics().fit(rows, sample_weight=weights)
        assert model.n_clusters_ == 3
        assert model.n_iter_ < 20


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_passive_tracers_are_voted_by_chunks(kind, traced_peak):
    # The tracers (rows outside max_samples) were copied whole as unit rows,
    # and, where the dynamics runs in the tokens' span, projected into two
    # dense (n - m) x m arrays: a fit of sparse rows peaked at 12.5 times X
    # (the docstring: "the tracers and new points stay sparse"), of dense
    # rows at 2.1 times. They are read, projected and voted by chunks of
    # rows: 2.7 and 1.15 times.
    X = sp.random(40_000, 5_000, density=0.005, format="csr", random_state=np.random.default_rng(0))
    if kind == "dense":
        X = X[:, :50].toarray()
        size, bound = X.nbytes, 1.6
    else:
        size, bound = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes, 4.0
    SelfAttentionDynamics(random_state=0, max_samples=200).fit(X[:1000])
    model, peak = traced_peak(lambda: SelfAttentionDynamics(random_state=0, max_samples=200).fit(X))
    assert peak < bound * size
    assert model.labels_.shape == (X.shape[0],)


def test_the_moving_tokens_of_sparse_rows_are_held_few_times(traced_peak):
    # The 1 GiB refusal counts the moving tokens once, densely; the fit held
    # 6.1 times that size for float32 rows (the place order's copy and its
    # float64 copy beside the span's float64 tokens). The order is taken
    # before the span's tokens are formed: 4 times (3 in float64), as the
    # docstring of max_samples says.
    X = sp.random(400, 20_000, density=0.0025, format="csr", random_state=0, dtype=np.float32)
    _, peak = traced_peak(lambda: SelfAttentionDynamics(max_samples=None, random_state=0).fit(X))
    assert peak < 4.5 * X.shape[0] * X.shape[1] * 4


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.floats(-10, 10), min_size=1, max_size=20),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_step_s_median_counts_each_particle_s_tokens(values, seed):
    # A particle stands for its tokens: the median of h <x_i, m_i> counts
    # each as many times (it counted particles alike).
    from attention_cluster._dynamics import _median

    values = np.asarray(values)
    weights = np.random.default_rng(seed).integers(1, 5, values.size)
    if np.sum(weights) % 2 == 0:
        weights[0] += 1  # an odd count: the median is one of the values
    assert _median(values, weights) == np.median(np.repeat(values, weights))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_centres_are_ordered_as_lexsort_orders_them(K, d, seed):
    # The clusters' numbering: decreasing size, then the centres'
    # coordinates, full ties by index, as np.lexsort with a key per
    # coordinate ordered them (2.8 GB of its iterators at 2^20 features).
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, K).astype(float)
    centres = rng.integers(-2, 3, (K, d)).astype(float)
    centres[rng.integers(0, K)] = -0.0
    want = np.lexsort((*centres.T[::-1], -sizes))
    np.testing.assert_array_equal(_dynamics._size_then_coordinates(sizes, centres), want)


def test_sparse_rows_storing_an_entry_twice_are_their_sums_on_the_sphere():
    # unit_rows divided by the norm of the stored values: 2 e_0 stored as
    # 1 + 1 had norm sqrt 2, a token off the sphere (fit and predict).
    twice = sp.csr_matrix((np.ones(4), np.array([0, 0, 0, 1]), np.array([0, 2, 4])), shape=(2, 40))
    once = twice.copy()
    once.sum_duplicates()
    options = dict(beta=1.0, max_iter=1, stopping="horizon", step_size=0.5, cluster_tol=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = SelfAttentionDynamics(min_cluster_size=1, **options).fit(once)
        got = SelfAttentionDynamics(min_cluster_size=1, **options).fit(twice)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, atol=1e-15)
    np.testing.assert_array_equal(got.predict(twice), want.predict(once))


def test_denser_sparse_rows_run_sparse_in_their_span_where_their_dense_copy_is_refused(
    monkeypatch,
):
    # Rows storing more than one entry in 12 are densified (their products
    # run faster dense), and a dense copy beyond 1 GiB was refused: 2000 x
    # 70000 rows, 9% stored, that had run in their span's 2000 x 2000 Gram
    # matrix. They run there again, sparse (here under a smaller bound).
    X, _ = _topic_documents(200, 3000, 3, np.random.default_rng(0), words=300, vocabulary=1000)
    assert not _dynamics._stays_sparse(X)
    want = SelfAttentionDynamics(max_samples=None, random_state=0).fit(X)
    monkeypatch.setattr(_dynamics, "DENSE_LIMIT_BYTES", 200 * 3000 * 8 - 1)
    got = SelfAttentionDynamics(max_samples=None, random_state=0).fit(X)
    assert got.n_clusters_ == want.n_clusters_ == 3
    np.testing.assert_array_equal(got.labels_, want.labels_)


def test_a_fraction_of_tokens_is_rounded_up_to_the_group_size_it_asks():
    # min_cluster_size=0.1 of 25 tokens asks for groups of 2.5 tokens or
    # more: of groups of 11, 12 and 2 tokens, two are clusters (the bound's
    # other tests take fractions whose product is an integer).
    rng = np.random.default_rng(0)
    C = rng.standard_normal((3, 20))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    X = np.repeat(C, [11, 12, 2], axis=0)
    model = SelfAttentionDynamics(
        min_cluster_size=0.1, stopping="horizon", max_iter=1, beta=50.0
    ).fit(X)
    assert model.n_clusters_path_[0] == 2
    assert model.n_clusters_ == 2


def test_a_run_as_long_as_the_longest_replaces_it():
    # _Plateau's rule (an equal run is the later plateau): the dynamics
    # stops at the latest of equally long runs.
    plateau = _dynamics._Plateau()
    assert plateau.offer(1, 1) and plateau.offer(3, 3)
    assert not plateau.offer(5, 4)
    assert plateau.offer(6, 7) and plateau.length == 2


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_sphere_models_centres_are_unit_vectors(model):
    X = make_mixture(300, 5, 3, noise=0.3, random_state=0)[0]
    fitted = SelfAttentionDynamics(model=model, stopping="horizon", max_iter=3).fit(X)
    np.testing.assert_allclose(np.linalg.norm(fitted.cluster_centers_, axis=1), 1.0, rtol=1e-12)


def _pair_and_apart(n_apart):
    """Two unit tokens within cluster_tol of each other (beyond the merge
    radius), and n_apart orthonormal ones far from them and each other."""
    B = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 6)))[0]
    b = B[0] + 5e-2 * B[1]
    return np.vstack([B[0], b / np.linalg.norm(b), B[2 : 2 + n_apart]])


def test_half_of_the_tokens_met_is_no_plateau():
    # A plateau begins once most tokens (by weight) have met: a pair of 4
    # tokens is half of them, so the dynamics runs to max_iter and warns.
    with pytest.warns(ConvergenceWarning):
        model = SelfAttentionDynamics(beta=8.0, min_cluster_size=1, max_iter=12).fit(
            _pair_and_apart(2)
        )
    assert model.n_iter_ == 12


def test_a_pair_of_two_places_has_met_below_the_heavy_weight():
    # Weights 1, 1, 1, 1, 4: a place is heavy (a group of its own) from
    # twice the mean place, 3.2 tokens. The pair, of weight 2, has met as two
    # places, and with the row of weight 4 they are most of the 8 tokens.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = SelfAttentionDynamics(beta=8.0, min_cluster_size=1, max_iter=12).fit(
            _pair_and_apart(3), sample_weight=np.array([1, 1, 1, 1, 4.0])
        )
    assert model.stopping_step_ == 2 and model.n_iter_ < 12
