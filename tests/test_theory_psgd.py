"""Tests of the plain PSGD of attention_cluster.theory against the NumPy twins.

:func:`~attention_cluster.theory.sequence_loss_gradient` against the loss
and gradient of ``math.md`` section 3 written with the L x L attention
matrix, :func:`~attention_cluster.theory.psgd_path` against the step by
step reference PSGD (same generator, same rows), and the invariants of the
path: unit heads, equivariance under rotations, reproducibility.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reference import psgd_step_sizes, psgd_steps, sequence_grad, sequence_loss
from scipy.stats import ortho_group
from sklearn.exceptions import ConvergenceWarning

from attention_cluster import AttentionClustering, _kernels, theory
from attention_cluster.datasets import make_mixture


def _heads(rng, n_heads, d):
    H = rng.standard_normal((n_heads, d))
    return H / np.linalg.norm(H, axis=1, keepdims=True)


def _kernel_seed(random_state):
    """The generator state psgd_path draws from ``random_state`` (as the estimator)."""
    rng = np.random.RandomState(random_state)
    return rng.randint(1, np.iinfo(np.int64).max)


@pytest.mark.parametrize("L, d, n_heads", [(1, 1, 1), (7, 3, 2), (20, 10, 3)], ids=str)
@pytest.mark.parametrize("n_clusters", [None, 2])
def test_sequence_loss_gradient_matches_reference(L, d, n_heads, n_clusters, global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((L, d))
    H = rng.standard_normal((n_heads, d))  # off the sphere: the gradient is Euclidean
    lam = 0.7
    loss, grad = theory.sequence_loss_gradient(X, H, lam, n_clusters=n_clusters)
    # The reference's factor is lambda n_heads / L: the same lambda K / L.
    lam_ref = lam * (n_clusters or n_heads) / n_heads
    assert grad.shape == H.shape
    np.testing.assert_allclose(loss, sequence_loss(X, H.T, lam_ref), rtol=1e-10)
    np.testing.assert_allclose(grad, sequence_grad(X, H.T, lam_ref).T, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("regularization", [None, "pairwise", "product"])
@pytest.mark.parametrize("gradient", ["riemannian", "euclidean"])
@pytest.mark.parametrize("n_clusters", [None, 2])
def test_psgd_path_matches_reference(regularization, gradient, n_clusters, global_random_seed):
    # Every recorded iterate is the reference PSGD (math.md section 3, with
    # the L x L attention matrix) run for that many steps on the same rows.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((30, 4))
    H0 = _heads(rng, 3, 4)
    lam, gamma, L, batch, rho = 0.9, 0.05, 6, 2, 0.3
    record = [0, 1, 1, 3, 4]
    path = theory.psgd_path(
        X,
        H0,
        temperature=lam,
        step_size=gamma,
        record=record,
        sequence_length=L,
        batch_size=batch,
        regularization=regularization,
        reg_strength=rho,
        gradient=gradient,
        n_clusters=n_clusters,
        random_state=global_random_seed,
    )
    assert path.shape == (len(record), 3, 4)
    lam_ref = lam * (n_clusters or 3) / 3
    seed = _kernel_seed(global_random_seed)
    cum = np.arange(1.0, 31.0)
    for t, heads in zip(record, path):
        U, _ = psgd_steps(
            X,
            cum,
            H0.T,
            1.0,
            lam_ref,
            L,
            batch,
            np.full(t, gamma),
            regularization,
            rho,
            gradient == "riemannian",
            seed,
        )
        np.testing.assert_allclose(heads, U.T, rtol=1e-6, atol=1e-7)  # as in test_kernels.py


def _path(X, H0, **kwargs):
    params = dict(
        temperature=0.8,
        step_size=0.1,
        record=[0, 5, 20],
        sequence_length=5,
        regularization="pairwise",
        reg_strength=0.1,
    )
    return theory.psgd_path(X, H0, **(params | kwargs))


def test_psgd_path_is_reproducible(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((50, 4))
    H0 = _heads(rng, 2, 4)
    first = _path(X, H0, random_state=global_random_seed)
    np.testing.assert_array_equal(first, _path(X, H0, random_state=global_random_seed))
    rs = np.random.RandomState(global_random_seed)
    np.testing.assert_array_equal(first, _path(X, H0, random_state=rs))
    # The instance was advanced: its next path draws other rows.
    assert not np.array_equal(first[-1], _path(X, H0, random_state=rs)[-1])
    assert not np.array_equal(first[-1], _path(X, H0, random_state=global_random_seed + 1)[-1])


@pytest.mark.parametrize("magnitude", [1e-310, 1e-200, 1e200])
def test_starting_heads_of_any_magnitude_are_their_directions(magnitude, global_random_seed):
    # Each starting head "is normalised onto the sphere": heads of 1e-200
    # were refused as zero rows (population_pgd) or not non-zero
    # (psgd_path), heads of 1e200 as overflowing, where AttentionClustering's
    # init took them.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((50, 4))
    H0 = _heads(rng, 2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = _path(X, H0 * magnitude, random_state=global_random_seed)
    np.testing.assert_allclose(scaled, _path(X, H0, random_state=global_random_seed), atol=1e-12)
    C = np.eye(2, 4)
    want = theory.population_pgd(H0, C, 0.3, 0.5, 10).heads
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = theory.population_pgd(H0 * magnitude, C, 0.3, 0.5, 10).heads
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_psgd_path_steps_do_not_depend_on_record_or_draw_size(monkeypatch, global_random_seed):
    # The rows are drawn in blocks; the iterates only depend on the steps taken.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((50, 4))
    H0 = _heads(rng, 2, 4)
    fine = _path(X, H0, record=np.arange(41), random_state=0)
    monkeypatch.setattr(theory, "_DRAWN_ROWS", 7 * 5)
    coarse = _path(X, H0, record=[0, 40], random_state=0)
    np.testing.assert_array_equal(coarse, fine[[0, 40]])
    np.testing.assert_allclose(fine[0], H0, rtol=1e-15)


def test_psgd_path_reads_float32_and_sparse_rows_as_dense_float64(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((40, 5)).astype(np.float32)
    X[X < 0.3] = 0.0
    H0 = _heads(rng, 2, 5)
    dense = _path(X.astype(np.float64), H0, random_state=3)
    assert dense.dtype == np.float64
    np.testing.assert_array_equal(_path(X, H0, random_state=3), dense)
    np.testing.assert_allclose(_path(sp.csr_matrix(X), H0, random_state=3), dense, atol=1e-13)


def _step_response(chunk, tokens, U, args, size=1e-7, n_directions=3):
    """The largest change of a head's coordinate, per unit of a relative
    perturbation of one PSGD step's tokens and heads: finite differences of
    ``size`` (well above rounding, well within the step's linear range) in
    ``n_directions`` random directions, each token moved by ``size`` times
    its norm and each unit head by ``size``."""

    def step(tokens, U):
        U = U.copy()
        chunk(tokens, U, *(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        return U

    rng = np.random.default_rng(0)
    d = tokens.shape[1]
    base = step(tokens, U)
    norms = np.linalg.norm(tokens, axis=1, keepdims=True)
    response = 0.0
    for _ in range(n_directions):
        moved = step(
            tokens + size * norms * rng.standard_normal(tokens.shape) / np.sqrt(d),
            U + size * rng.standard_normal(U.shape) / np.sqrt(d),
        )
        response = max(response, np.abs(moved - base).max() / size)
    return response


def _steps_from(starts, responses):
    """A ``_kernels.psgd_chunk`` for one step per call whose step t starts from
    the heads ``starts[t]`` (rows), not from those of the step before, and
    appends that step's :func:`_step_response` to ``responses``."""
    chunk = _kernels.psgd_chunk

    def step_from(tokens, U, *args):
        U[:] = starts[len(responses)].T
        responses.append(_step_response(chunk, tokens, U, args))
        chunk(tokens, U, *args)

    return step_from


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_heads=st.integers(1, 4),
    gradient=st.sampled_from(["riemannian", "euclidean"]),
    regularization=st.sampled_from([None, "pairwise", "product"]),
    step=st.floats(1e-3, 1.0),
)
# Paths that 20 steps carry 4.0e-9 and 2.7e-8 from the rotated path: the
# rotation's rounding amplified 1e7 times and more.
@example(seed=315, n_heads=4, gradient="riemannian", regularization="pairwise", step=0.435)
@example(seed=298089, n_heads=1, gradient="riemannian", regularization=None, step=0.3178)
def test_psgd_path_is_rotation_equivariant_with_unit_heads(
    seed, n_heads, gradient, regularization, step
):
    # Rotating X and the start rotates every iterate: the same seed draws the
    # same rows, and the loss, the regularisers and the sphere step only see
    # inner products. Every recorded head is a unit vector.
    #
    # The path itself cannot be compared: at large steps PSGD is chaotic, and
    # 20 steps amplify the rotation's rounding by up to 1e9 (finite
    # differences over 10000 examples, the paths up to 7.6e-7 apart). Each
    # step is compared instead, the rotated run restarted at every step from
    # the rotated iterate of the first (recording every step, psgd_path
    # calls the kernel once a step): the rotated tokens and heads give the
    # rotated heads, which by induction rotates the whole path. A step's
    # difference is then its inputs' rounding (each rotated coordinate within
    # d eps of its row's norm) times the step's response to a relative
    # perturbation of them, measured by finite differences, plus the rounding
    # of the products with Q^T (the 1): 64 = 2 (both runs round) x 8 (random
    # directions see the largest response to within about sqrt(45), the
    # number of a step's inputs here) x 4 to spare. Over 26000 examples drawn
    # as here the largest difference was 3.3 d eps (1 + response), a
    # twentieth of the bound.
    rng = np.random.default_rng(seed)
    d = 5
    X = 2.0 * rng.standard_normal((30, d))
    H0 = rng.standard_normal((n_heads, d))
    Q = ortho_group.rvs(d, random_state=seed)
    kwargs = dict(
        step_size=step,
        gradient=gradient,
        regularization=regularization,
        record=np.arange(21),
        random_state=seed,
    )
    path = _path(X, H0, **kwargs)
    np.testing.assert_allclose(np.linalg.norm(path, axis=2), 1.0, rtol=1e-12)
    responses = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels, "psgd_chunk", _steps_from(path[:-1] @ Q.T, responses))
        rotated = _path(X @ Q.T, H0 @ Q.T, **kwargs)
    assert len(responses) == 20
    bound = 64 * d * np.finfo(np.float64).eps * (1.0 + np.array([0.0, *responses]))
    np.testing.assert_array_less(np.abs(rotated - path @ Q.T).max(axis=(1, 2)), bound)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(record=[0, 3, 2]), "record must be"),
        (dict(record=[-1, 2]), "record must be"),
        (dict(record=[0, 1.5]), "record must be"),
        (dict(record=[]), "record must be"),
        (dict(record=[0, np.inf]), "record must be"),
        (dict(record=[0, 1e19]), "record must be"),
        (dict(step_size=0.0), "step_size must be > 0"),
        (dict(temperature=-1.0), "temperature must be"),
        (dict(gradient="newton"), "gradient must be one of"),
        (dict(regularization="none"), "regularization must be one of"),
        (dict(reg_strength=-0.1), "reg_strength must be >= 0"),
        (dict(sequence_length=0), "sequence_length must be an integer"),
        (dict(batch_size=1.5), "batch_size must be an integer"),
        (dict(n_clusters=0), "n_clusters must be an integer"),
    ],
)
def test_psgd_path_validates_its_parameters(kwargs, match):
    X = np.ones((10, 3))
    with pytest.raises(ValueError, match=match):
        _path(X, np.eye(2, 3), **kwargs)


def test_psgd_path_and_gradient_validate_their_arrays():
    X = np.ones((10, 3))
    with pytest.raises(ValueError, match=r"heads0 must be .* \(n_heads, 3\)"):
        _path(X, np.eye(2, 4))
    with pytest.raises(ValueError, match="non-zero"):
        _path(X, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        _path(np.full((10, 3), np.nan), np.eye(2, 3))
    with pytest.raises(ValueError, match="tokens must be"):
        theory.sequence_loss_gradient(np.ones(3), np.eye(2, 3), 1.0)
    with pytest.raises(ValueError, match="heads must be finite"):
        theory.sequence_loss_gradient(X, np.full((2, 3), np.inf), 1.0)
    with pytest.raises(ValueError, match="Complex data not supported"):
        theory.sequence_loss_gradient(X + 1j, np.eye(2, 3), 1.0)


def test_overflowing_psgd_path_raises_instead_of_keeping_its_start():
    # At temperature 1e200 every step's gradient overflows: the kernel kept
    # the heads, and the path returned the start as the heads after 20 steps.
    X = make_mixture(500, 5, 2, noise=0.3, random_state=0)[0]
    with pytest.raises(FloatingPointError, match="PSGD overflowed"):
        _path(X, np.eye(2, 5) + 0.1, temperature=1e200, record=[0, 20])


def test_overflowing_psgd_fit_raises_and_leaves_the_estimator_unfitted():
    X = make_mixture(500, 5, 2, noise=0.3, random_state=0)[0]
    model = AttentionClustering(2, solver="psgd", temperature=1e200, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the settings' own overflow on the way
        with pytest.raises(FloatingPointError, match="PSGD overflowed"):
            model.fit(X)
    assert not hasattr(model, "cluster_centers_")


def test_overflowing_sequence_loss_raises_as_the_layer_does():
    X = 1e80 * np.random.default_rng(0).standard_normal((5, 3))
    with pytest.raises(FloatingPointError, match="overflowed"):
        theory.sequence_loss_gradient(X, np.eye(1, 3), 1.0)


def _recording_steps(monkeypatch):
    """Record the step sizes of every call of the PSGD kernel."""
    recorded = []
    chunk = _kernels.psgd_chunk

    def recording(tokens, U, temperature, L, batch_size, steps, *args):
        recorded.append(np.array(steps))
        return chunk(tokens, U, temperature, L, batch_size, steps, *args)

    monkeypatch.setattr(_kernels, "psgd_chunk", recording)
    return recorded


@pytest.mark.parametrize(
    "learning_rate, temperature, weighted", [(1.0, "auto", False), (0.3, 0.6, True)], ids=str
)
def test_estimator_psgd_step_sizes_decay_as_documented(
    monkeypatch, learning_rate, temperature, weighted, global_random_seed
):
    # Step t of the estimator's PSGD is learning_rate / (lambda K tr(M) (1 +
    # t / 200)), M the second moment of the rows divided by scale_ (the
    # learning_rate parameter's documentation), for t = 0 .. max_iter - 1
    # across the kernel's chunks of 100 steps.
    X, _, _ = make_mixture(600, 5, 3, noise=0.4, random_state=global_random_seed)
    rng = np.random.default_rng(global_random_seed)
    w = rng.uniform(0.5, 2.0, len(X)) if weighted else None
    recorded = _recording_steps(monkeypatch)
    model = AttentionClustering(
        3,
        solver="psgd",
        refine=None,
        center=False,
        learning_rate=learning_rate,
        temperature=temperature,
        max_iter=450,
        tol=0.0,
        random_state=global_random_seed,
    )
    with pytest.warns(ConvergenceWarning, match="did not reach tol=0.0"):
        model.fit(X, sample_weight=w)
    assert [len(s) for s in recorded] == [100, 100, 100, 100, 50]
    trace = np.average(np.sum(X**2, axis=1), weights=w) / model.scale_**2
    expected = psgd_step_sizes(learning_rate, model.temperature_, 3, trace, 450)
    np.testing.assert_allclose(np.concatenate(recorded), expected, rtol=1e-10)


@pytest.mark.parametrize("max_iter", [400, 450])
def test_estimator_psgd_returns_the_average_of_its_later_iterates(
    monkeypatch, max_iter, global_random_seed
):
    # math.md section 3, "Steps": the estimator's PSGD returns the heads
    # averaged, then normalised, over the iterates of the later half of its
    # chunks of 100 steps (the last ceil(c / 2) of c: steps 200 to 399 of
    # 400, 200 to 449 of 450), Polyak-Ruppert averaging. Each chunk is run
    # here one step at a time, recording the heads after each step, and
    # the fit's heads are the NumPy average of those (up to their signs,
    # which the estimator fixes afterwards; refine=None, center=False).
    X, _, _ = make_mixture(600, 5, 3, noise=0.4, random_state=global_random_seed)
    chunk = _kernels.psgd_chunk
    iterates = []

    def step_by_step(tokens, U, temperature, L, batch_size, steps, *args):
        kind, strength, riemannian, losses, heads_sum = args
        rows = L * batch_size
        for t in range(len(steps)):
            chunk(
                tokens[t * rows : (t + 1) * rows],
                U,
                temperature,
                L,
                batch_size,
                steps[t : t + 1],
                kind,
                strength,
                riemannian,
                losses[t : t + 1],
                heads_sum,
            )
            iterates.append(U.copy())

    monkeypatch.setattr(_kernels, "psgd_chunk", step_by_step)
    model = AttentionClustering(
        3,
        solver="psgd",
        refine=None,
        center=False,
        max_iter=max_iter,
        tol=0.0,
        random_state=global_random_seed,
    )
    with pytest.warns(ConvergenceWarning, match="did not reach tol=0.0"):
        model.fit(X)
    assert len(iterates) == max_iter
    chunks = -(-max_iter // 100)
    later = np.sum(iterates[100 * (chunks // 2) :], axis=0)
    expected = later / np.linalg.norm(later, axis=0)
    heads = model.cluster_centers_.T / np.linalg.norm(model.cluster_centers_, axis=1)
    np.testing.assert_allclose(np.abs(np.sum(heads * expected, axis=0)), 1.0, rtol=1e-10)


def test_psgd_path_step_is_constant(monkeypatch, global_random_seed):
    # psgd_path's steps are the paper's constant gamma, across its draws.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((50, 4))
    monkeypatch.setattr(theory, "_DRAWN_ROWS", 7 * 5 * 3)
    recorded = _recording_steps(monkeypatch)
    _path(X, _heads(rng, 2, 4), record=[0, 250, 500])
    steps = np.concatenate(recorded)
    assert steps.size == 500
    np.testing.assert_array_equal(steps, 0.1)


@pytest.mark.parametrize("learning_rate", [1.0, 0.99, 1000.0])
def test_psgd_s_warning_names_a_learning_rate_far_from_its_default(learning_rate):
    # Its advice was "increase max_iter or tol" alone: at learning_rate=1e3
    # it still warned at max_iter=50000 and at tol=1e-2.
    X = make_mixture(2000, 5, 3, noise=0.3, random_state=0)[0]
    model = AttentionClustering(
        3, solver="psgd", learning_rate=learning_rate, max_iter=200, random_state=0
    )
    with pytest.warns(ConvergenceWarning, match="increase max_iter or tol") as record:
        model.fit(X)
    named = "sets steps relative" in str(record[0].message)
    assert named == (learning_rate == 1000.0)


@pytest.mark.parametrize("max_iter", [201, 250])
def test_psgd_stopped_by_max_iter_between_checks_warns(max_iter):
    # The last chunk of steps was compared as a whole check: one step after
    # step 200 (whose check moved the averaged heads by 18 times tol) its
    # average barely moved, and the run stopped by max_iter said converged.
    X = make_mixture(2000, 10, 3, noise=0.3, random_state=0)[0]
    model = AttentionClustering(3, solver="psgd", max_iter=max_iter, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not reach tol"):
        model.fit(X)
    assert model.n_iter_ == max_iter
