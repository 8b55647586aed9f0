"""Tests of attention_cluster.theory: every closed form against Monte Carlo or
exact enumeration, and the population PGD of Theorem 3.4.

Monte Carlo checks use fixed seeds and a tolerance of 5 standard errors
(two-sided false alarm rate below 1e-6); each also asserts that 5 standard
errors are at most 2.5% of the checked value, so that a constant wrong by 5%
would move the closed form out of the tolerance and fail the test.
"""

import inspect
import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import finite_difference, mixture_fourth_moment, population_pgd_steps

from attention_cluster import theory
from attention_cluster.datasets import make_centroids
from attention_cluster.metrics import centroid_distance

N_SE = 5.0
POWER = 0.025


def layer(X, heads, tau):
    """Reference linear layer of ``math.md`` section 2 on a batch of sequences.

    ``T = c A G^T`` with ``A = X U``, ``G = X^T A``, ``c = tau / L``; with
    ``heads = I_d`` it is the in-context layer.
    """
    c = tau / X.shape[1]
    A = X @ heads.T
    G = np.einsum("nld,nlk->ndk", X, A)
    return c * np.einsum("nlk,ndk->nld", A, G)


def sample(rng, n_sequences, L, centroids, noise, weights=None):
    K, d = centroids.shape
    z = rng.choice(K, size=(n_sequences, L), p=weights)
    return centroids[z] + noise * rng.standard_normal((n_sequences, L, d)), z


def assert_mc(per_sequence, exact, power=True):
    """Mean of i.i.d. per-sequence values vs a closed form (module docstring)."""
    mean = float(np.mean(per_sequence))
    se = float(np.std(per_sequence) / np.sqrt(per_sequence.size))
    if power:
        assert N_SE * se <= POWER * abs(exact), f"Monte Carlo too small: se={se:.3g}"
    assert abs(mean - exact) <= N_SE * se, f"MC {mean:.6g} +- {se:.2g} vs exact {exact:.6g}"


def random_problem(rng, n_heads=3, n_clusters=2, d=4):
    """Non-orthogonal centroids of unequal norms, unequal weights, free heads."""
    C = rng.standard_normal((n_clusters, d))
    C *= rng.uniform(0.7, 1.3, (n_clusters, 1)) / np.linalg.norm(C, axis=1, keepdims=True)
    w = rng.dirichlet(np.full(n_clusters, 3.0))
    return rng.standard_normal((n_heads, d)), C, w


# ---------------------------------------------------------------------------
# The general closed form (Prop. 3.1) and its gradient.
# ---------------------------------------------------------------------------


def dirac_risk_by_enumeration(heads, C, w, temperature, L):
    """E||X_1 - T(X)_1||^2 for sigma = 0 by enumerating the cluster counts."""
    K = C.shape[0]
    P = heads.T @ heads
    c = temperature * heads.shape[0] / L
    total = 0.0
    for a in range(K):
        for counts in itertools.product(range(L), repeat=K):
            if sum(counts) != L - 1:
                continue
            prob = math.factorial(L - 1) * np.prod(
                [w[k] ** n / math.factorial(n) for k, n in enumerate(counts)]
            )
            S = np.outer(C[a], C[a]) + sum(n * np.outer(C[k], C[k]) for k, n in enumerate(counts))
            total += w[a] * prob * np.sum((C[a] - c * S @ P @ C[a]) ** 2)
    return total


@pytest.mark.parametrize("L", [1, 2, 3, 6])
@pytest.mark.parametrize("n_clusters", [2, 3])
def test_population_risk_exact_for_dirac_mixture(L, n_clusters):
    rng = np.random.default_rng(10 * L + n_clusters)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=n_clusters, d=5)
    exact = dirac_risk_by_enumeration(heads, C, w, 0.4, L)
    assert theory.population_risk(heads, C, 0.0, 0.4, L, w) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("L", [1, 2, 5])
def test_layer_moments_against_monte_carlo(L):
    # Checks a0 = E||X_1||^2, tau a1 = E<X_1, T_1>, tau^2 a2 = E||T_1||^2 one
    # by one; L = 1 isolates the self terms T1, T3, L = 2 adds the pair terms
    # T2, T4, T5 and L = 5 the triple term T6. d = 7 exceeds the dimension 5
    # of the span of heads and centroids, where the computation runs.
    rng = np.random.default_rng(L)
    d = 7
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=2, d=d)
    noise, temperature = 0.5, 0.3
    tau = temperature * heads.shape[0]
    _, (U, means) = theory._reduce(heads, C)
    assert U.shape[1] == 5
    a0, a1, a2 = theory._LayerMoments(means, w, noise**2, d, float(L))(U.T @ U)
    # Same number of tokens for every L; L = 1 has the heaviest tails.
    X, _ = sample(rng, 1_000_000 // L, L, C, noise, w)
    T = layer(X, heads, tau)
    assert_mc(np.mean(np.sum(X * X, -1), 1), a0)
    assert_mc(np.mean(np.sum(X * T, -1), 1), tau * a1)
    assert_mc(np.mean(np.sum(T * T, -1), 1), tau**2 * a2)
    risk = theory.population_risk(heads, C, noise, temperature, L, w)
    assert_mc(np.mean(np.sum((X - T) ** 2, -1), 1), risk)


@pytest.mark.parametrize("L", [1, 4, np.inf])
def test_population_risk_gradient_matches_finite_differences(L):
    rng = np.random.default_rng(7)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=2, d=7)
    args = (C, 0.6, 0.35, L, w)
    exact = theory.population_risk_gradient(heads, *args)
    numeric = finite_difference(lambda H: theory.population_risk(H, *args), heads)
    # Central differences with eps = 1e-6 on a polynomial: error ~ 1e-9.
    np.testing.assert_allclose(exact, numeric, rtol=1e-6, atol=1e-7 * np.abs(exact).max())


def test_population_risk_limit_in_sequence_length():
    rng = np.random.default_rng(3)
    heads, C, w = random_problem(rng)
    far = theory.population_risk(heads, C, 0.4, 0.5, 1e9, w)
    assert far == pytest.approx(theory.population_risk(heads, C, 0.4, 0.5, np.inf, w), rel=1e-7)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), L=st.sampled_from([1, 3, 20, np.inf]))
def test_population_risk_invariances(seed, L):
    # R depends on the heads through U U^T, and the model is rotation invariant.
    rng = np.random.default_rng(seed)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=2, d=4)
    risk = theory.population_risk(heads, C, 0.5, 0.4, L, w)
    Q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    flipped = heads[rng.permutation(3)] * rng.choice([-1.0, 1.0], size=(3, 1))
    assert theory.population_risk(heads @ Q, C @ Q, 0.5, 0.4, L, w) == pytest.approx(
        risk, rel=1e-10
    )
    assert theory.population_risk(flipped, C, 0.5, 0.4, L, w) == pytest.approx(risk, rel=1e-10)
    assert risk >= 0.0


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    L=st.sampled_from([1, 3, 20, np.inf]),
    exponent=st.integers(-40, 40),
)
def test_population_risk_scales_with_the_heads_and_the_data(seed, L, exponent):
    # R depends on lambda U U^T only, and R(U, c C, c sigma, lambda / c^2) =
    # c^2 R: the span's rank cutoff, read on heads and centroids as given,
    # dropped the smaller one's span 1e15 times apart (a risk 4% off, PGD
    # that stopped nowhere, silently).
    rng = np.random.default_rng(seed)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=2, d=4)
    a = 10.0**exponent
    risk = theory.population_risk(heads, C, 0.5, 0.4, L, w)
    assert theory.population_risk(heads * a, C, 0.5, 0.4 / a**2, L, w) == pytest.approx(
        risk, rel=1e-9
    )
    scaled = theory.population_risk(heads, C * a, 0.5 * a, 0.4 / a**2, L, w)
    assert scaled / a**2 == pytest.approx(risk, rel=1e-9)
    gradient = theory.population_risk_gradient(heads, C, 0.5, 0.4, L, w)
    np.testing.assert_allclose(
        theory.population_risk_gradient(heads * a, C, 0.5, 0.4 / a**2, L, w) * a,
        gradient,
        rtol=1e-8,
        atol=1e-12 * np.abs(gradient).max(),
    )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), L=st.sampled_from([2, 10, np.inf]))
def test_risk_from_overlaps_is_the_risk_of_any_such_heads(seed, L):
    # Prop. 3.1: the risk of two unit heads depends on (kappa, eta, xi) only.
    rng = np.random.default_rng(seed)
    d = 6
    C = make_centroids(2, d, random_state=seed)
    heads = rng.standard_normal((2, d))
    heads /= np.linalg.norm(heads, axis=1, keepdims=True)
    (k0, e0), (e1, k1) = heads @ C.T
    xi = heads[0] @ heads[1]
    value = theory.risk_from_overlaps(k0, k1, e0, e1, xi, 0.4, 0.7, L, n_features=d)
    assert value == pytest.approx(theory.population_risk(heads, C, 0.4, 0.7, L), rel=1e-10)


def test_risk_from_overlaps_rejects_impossible_overlaps():
    with pytest.raises(ValueError, match="not realisable"):
        theory.risk_from_overlaps(0.9, 0.9, 0.9, 0.0, 0.0, 0.3, 1.0, 10, n_features=5)


_OVERLAPS = ("kappa0", "kappa1", "eta0", "eta1", "xi")


@settings(max_examples=30, deadline=None)
@given(
    which=st.sampled_from(_OVERLAPS),
    value=st.one_of(
        st.floats(min_value=1.0 + theory._COSINE_ROUNDING, exclude_min=True),
        st.floats(max_value=-1.0 - theory._COSINE_ROUNDING, exclude_max=True),
        st.just(np.nan),
    ),
)
def test_risk_from_overlaps_names_an_overlap_outside_its_range(which, value):
    # The overlaps are cosines of unit vectors (Prop. 3.1: R on [-1, 1]^5).
    # NaN gave a LinAlgError, inf "centroids must be finite" (no centroids
    # are passed), values above 1 "not realisable" without a name.
    overlaps = dict.fromkeys(_OVERLAPS, 0.0) | {which: value}
    with pytest.raises(ValueError, match=rf"^{which} must lie in \[-1, 1\]"):
        theory.risk_from_overlaps(
            **overlaps, noise=0.3, temperature=0.5, sequence_length=10, n_features=5
        )


@pytest.mark.parametrize("which", _OVERLAPS)
@pytest.mark.parametrize(
    "value, match",
    [("0.5", "must lie in"), (True, "must lie in"), ([0.1, 0.2], "must be one number")],
    ids=["text", "bool", "array"],
)
def test_risk_from_overlaps_refuses_text_bools_and_arrays_by_name(which, value, match):
    # The text "0.5" gave NumPy's UFuncTypeError from eigh, True was read as 1.
    overlaps = dict.fromkeys(_OVERLAPS, 0.0) | {which: value}
    with pytest.raises(ValueError, match=f"^{which} {match}"):
        theory.risk_from_overlaps(
            **overlaps, noise=0.3, temperature=0.5, sequence_length=10, n_features=5
        )


@pytest.mark.parametrize("ulps", [1, 2, 8])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["heads", "opposite-heads"])
def test_cosines_rounded_beyond_one_are_taken_as_one(sign, ulps):
    # Normalised float64 vectors have <v, v> up to a few ulp above 1 (with
    # the heads at make_centroids(2, 5, random_state=0), kappa_1 = 1 +
    # 2^-51): such a kappa, which risk_from_overlaps, manifold_risk and
    # manifold_heads refused as outside [-1, 1], is the kappa of heads at
    # the centroids (or opposite).
    C = np.eye(2, 5)
    kappa = sign * (1.0 + ulps * np.finfo(np.float64).eps)
    assert abs(kappa) > 1.0
    risk = theory.risk_from_overlaps(kappa, kappa, 0.0, 0.0, 0.0, 0.3, 0.9, 10, n_features=5)
    assert risk == pytest.approx(theory.population_risk(sign * C, C, 0.3, 0.9, 10), rel=1e-10)
    assert theory.manifold_risk([kappa, kappa], 0.3, 0.9, 10, n_features=5) == (
        theory.manifold_risk([sign, sign], 0.3, 0.9, 10, n_features=5)
    )
    np.testing.assert_array_equal(
        theory.manifold_heads(C, [kappa, kappa], random_state=0), sign * C
    )
    # Beyond rounding they are refused, as before.
    beyond = sign * (1.0 + 2.0 * theory._COSINE_ROUNDING)
    with pytest.raises(ValueError, match=r"^kappa1 must lie in \[-1, 1\]"):
        theory.risk_from_overlaps(kappa, beyond, 0.0, 0.0, 0.0, 0.3, 0.9, 10, n_features=5)
    with pytest.raises(ValueError, match=r"^alignment must lie in \[-1, 1\]"):
        theory.manifold_risk([kappa, beyond], 0.3, 0.9, 10, n_features=5)
    with pytest.raises(ValueError, match=r"^alignment must lie in \[-1, 1\]"):
        theory.manifold_heads(C, [kappa, beyond], random_state=0)


# ---------------------------------------------------------------------------
# The pairwise regularizer.
# ---------------------------------------------------------------------------


def test_pairwise_regularizer_against_monte_carlo():
    rng = np.random.default_rng(11)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=2, d=4)
    X, _ = sample(rng, 400_000, 1, C, 0.5, w)
    Y = (X[:, 0] @ heads.T) ** 2
    pairs = Y[:, 0] * Y[:, 1] + Y[:, 0] * Y[:, 2] + Y[:, 1] * Y[:, 2]
    assert_mc(pairs, theory.pairwise_regularizer(heads, C, 0.5, w))


def test_pairwise_regularizer_gradient_matches_finite_differences():
    rng = np.random.default_rng(12)
    heads, C, w = random_problem(rng, n_heads=3, n_clusters=3, d=5)
    exact = theory.pairwise_regularizer_gradient(heads, C, 0.7, w)
    numeric = finite_difference(lambda H: theory.pairwise_regularizer(H, C, 0.7, w), heads)
    np.testing.assert_allclose(exact, numeric, rtol=1e-6, atol=1e-7 * np.abs(exact).max())


def test_fourth_moment_of_the_mixture_against_monte_carlo():
    # math.md section 3, "Population PGD": for x ~ N(m, s I) (Isserlis),
    # E[(x^T A x) x x^T] = (m^T A m + s tr A)(m m^T + s I)
    #                      + 2 s (m m^T A + A m m^T) + 2 s^2 A,
    # averaged over the components: the N of population_pgd's default step
    # (theory._n1) and of its NumPy twin (reference.mixture_fourth_moment).
    # Each of the d (d + 1) / 2 entries within 5 standard errors of its
    # Monte Carlo mean; the trace with the module's power check (an entry
    # that vanishes has no relative power).
    rng = np.random.default_rng(13)
    _, C, w = random_problem(rng, n_clusters=3, d=4)
    B = rng.standard_normal((4, 2))
    A = B @ B.T  # as P = U U^T of two heads
    noise = 0.6
    s = noise**2
    X, _ = sample(rng, 1_000_000, 1, C, noise, w)
    x = X[:, 0]
    values = np.einsum("ni,ij,nj->n", x, A, x)[:, None, None] * x[:, :, None] * x[:, None, :]
    kappa = s * np.trace(A) + np.einsum("ci,ij,cj->c", C, A, C)
    closed = theory._average(w, theory._n1(kappa, A, C @ A, C, s, np.eye(4)))
    np.testing.assert_allclose(
        mixture_fourth_moment(A, C, w, noise), closed, rtol=1e-12, atol=1e-12
    )
    for i, j in zip(*np.triu_indices(4)):
        assert_mc(values[:, i, j], closed[i, j], power=False)
    assert_mc(np.trace(values, axis1=1, axis2=2), np.trace(closed))


# ---------------------------------------------------------------------------
# Unbiased temperatures (Prop. 4.1, 5.1).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_unbiased_temperature_against_monte_carlo(n_clusters):
    rng = np.random.default_rng(20 + n_clusters)
    d, L, noise = 6, 5, 0.5
    C = make_centroids(n_clusters, d, random_state=n_clusters)
    lam = theory.unbiased_temperature(noise, L, n_clusters=n_clusters)
    X, z = sample(rng, 40_000, L, C, noise)
    T = layer(X, C, lam * n_clusters)
    coords = T @ C.T  # coords[n, l, j] = <T_l, mu*_j>
    own = np.take_along_axis(coords, z[..., None], -1)[..., 0]
    assert_mc(own.mean(1), 1.0)  # E[<T_1, mu*_c> | Z_1 = c] = 1
    other = (coords.sum(-1) - own) / (n_clusters - 1)
    assert_mc(other.mean(1), 0.0, power=False)  # and no component on the others
    # The orthogonal complement of the centroids is left at zero mean by symmetry.


def test_in_context_unbiased_temperature_against_monte_carlo():
    rng = np.random.default_rng(30)
    n, d, L, noise = 40_000, 5, 5, 0.5
    # Each prompt has its own orthonormal pair of centroids (section 5.1).
    C = np.linalg.qr(rng.standard_normal((n, d, 2)))[0].transpose(0, 2, 1)
    z = rng.integers(2, size=(n, L))
    X = np.take_along_axis(C, z[..., None], 1) + noise * rng.standard_normal((n, L, d))
    lam = theory.in_context_unbiased_temperature(noise, L, n_features=d)
    T = layer(X, np.eye(d), 2 * lam)
    coords = np.einsum("nld,njd->nlj", T, C)
    own = np.take_along_axis(coords, z[..., None], -1)[..., 0]
    assert_mc(own.mean(1), 1.0)
    assert_mc((coords.sum(-1) - own).mean(1), 0.0, power=False)


def _tight_frame(kind, d):
    """K unit vectors of R^d with (1/K) sum_k c_k c_k^T = I / d."""
    if kind == "plus-minus":  # +-e_i, K = 2 d
        return np.vstack([np.eye(d), -np.eye(d)])
    # The vertices of a regular simplex, K = d + 1: the centred basis of
    # R^(d+1), in orthonormal coordinates of its hyperplane.
    E = np.eye(d + 1) - 1.0 / (d + 1)
    basis = np.linalg.svd(E)[2][:d]
    C = E @ basis.T
    return C / np.linalg.norm(C, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["plus-minus", "simplex"])
def test_in_context_unbiased_temperature_for_more_clusters_than_features(kind):
    # math.md section 4: centroids forming a tight frame of R^d, K > d, have
    # E[X X^T] mu_c = (1/d + sigma^2) mu_c, and the temperature with
    # 1/min(K, d) makes E[T^ctx_1 | Z_1 = c] = mu_c.
    rng = np.random.default_rng(31)
    n, d, L, noise = 40_000, 3, 6, 0.4
    frame = _tight_frame(kind, d)
    K = len(frame)
    np.testing.assert_allclose(frame.T @ frame / K, np.eye(d) / d, atol=1e-12)
    # A random rotation of the frame for each prompt.
    Q = np.linalg.qr(rng.standard_normal((n, d, d)))[0]
    C = np.einsum("kd,nde->nke", frame, Q)
    z = rng.integers(K, size=(n, L))
    X = np.take_along_axis(C, z[..., None], 1) + noise * rng.standard_normal((n, L, d))
    lam = theory.in_context_unbiased_temperature(noise, L, n_features=d, n_clusters=K)
    T = layer(X, np.eye(d), K * lam)
    # The first token's output minus its centroid, in the prompt's rotated
    # axes: zero mean in each.
    error = np.einsum("nd,nde->ne", T[:, 0] - C[np.arange(n), z[:, 0]], Q.transpose(0, 2, 1))
    own = np.einsum("nd,nd->n", T[:, 0], C[np.arange(n), z[:, 0]])
    assert_mc(own, 1.0)
    for j in range(d):
        assert_mc(error[:, j], 0.0, power=False)
    # The orthonormal centroids' form, 1/K in place of 1/d, is biased here:
    # its mean lies many standard errors from 1.
    orthonormal = (L / K) / (1 + (d + 2) * noise**2 + (L - 1) * (1 / K + noise**2))
    own_orthonormal = own * orthonormal / lam  # (the layer is linear in lambda)
    error = abs(own_orthonormal.mean() - 1.0)
    assert error > N_SE * own_orthonormal.std() / np.sqrt(n)


def test_in_context_unbiased_temperature_limit_for_more_clusters_than_features():
    # d / (K (1 + d sigma^2)) as L -> infinity (math.md section 4), and the
    # finite form at K = d is the orthonormal centroids' (1/K = 1/d).
    s = np.array([0.0, 0.3, 1.0])
    np.testing.assert_allclose(
        theory.in_context_unbiased_temperature(s, np.inf, n_features=4, n_clusters=10),
        4 / (10 * (1 + 4 * s**2)),
        rtol=1e-15,
    )
    np.testing.assert_allclose(
        theory.in_context_unbiased_temperature(s, 1e15, n_features=4, n_clusters=10),
        4 / (10 * (1 + 4 * s**2)),
        rtol=1e-12,
    )
    L = 7.0
    np.testing.assert_allclose(
        theory.in_context_unbiased_temperature(s, L, n_features=4, n_clusters=4),
        (L / 4) / (1 + 6 * s**2 + (L - 1) * (1 / 4 + s**2)),
        rtol=1e-15,
    )


def test_unbiased_temperature_limits():
    s = np.array([0.0, 0.3, 1.0])
    np.testing.assert_allclose(theory.unbiased_temperature(s, 1e12), 1 / (1 + 2 * s**2))
    np.testing.assert_allclose(
        theory.unbiased_temperature(s, np.inf, n_clusters=3), 1 / (1 + 3 * s**2)
    )
    np.testing.assert_allclose(theory.unbiased_temperature(s, 10), 10 / (11 + 2 * 13 * s**2))
    np.testing.assert_allclose(
        theory.in_context_unbiased_temperature(s, np.inf, n_features=7), 1 / (1 + 2 * s**2)
    )


def test_unbiased_temperatures_broadcast_over_sequence_lengths():
    # Arrays of L, np.inf among them, as the other curves take them: each
    # value the scalar call's. Before, float(L) refused an array with
    # "only 0-dimensional arrays can be converted to Python scalars".
    L = np.array([1.0, 3.0, 50.0, np.inf])
    noise = np.array([[0.0], [0.4]])
    for f, extra in (
        (theory.unbiased_temperature, {"n_clusters": 3}),
        (theory.in_context_unbiased_temperature, {"n_features": 7, "n_clusters": 3}),
    ):
        curve = f(noise, L, **extra)
        assert curve.shape == (2, 4)
        for i, j in np.ndindex(curve.shape):
            assert curve[i, j] == f(float(noise[i, 0]), float(L[j]), **extra)


def test_the_closed_forms_of_one_layer_take_one_setting_and_say_so():
    # population_risk and its kin take one noise, temperature and L (their
    # heads and centroids are arrays already): an array is refused by name.
    C = make_centroids(2, 5, random_state=0)
    for kwargs, name in (
        ({"noise": [0.1, 0.2], "temperature": 0.5, "sequence_length": 10}, "noise"),
        ({"noise": 0.1, "temperature": [0.5, 1.0], "sequence_length": 10}, "temperature"),
        ({"noise": 0.1, "temperature": 0.5, "sequence_length": [10, 20]}, "sequence_length"),
    ):
        with pytest.raises(ValueError, match=f"^{name} must be one number"):
            theory.population_risk(C, C, **kwargs)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"noise": [0.3, 0.4]}, "noise"), ({"sequence_length": [10, 20]}, "sequence_length")],
)
def test_auto_temperature_takes_one_setting_and_says_so(kwargs, name):
    # The estimator's rule: an array gave NumPy's "only 0-dimensional arrays
    # can be converted to Python scalars" (a TypeError from float).
    args = {"noise": 0.3, "sequence_length": 50, **kwargs}
    with pytest.raises(ValueError, match=f"^{name} must be one number"):
        theory.auto_temperature(**args, n_clusters=2, n_features=10)


def test_the_closed_forms_take_a_real_length_as_their_continuous_extension():
    # They are rational functions of L, which the figures draw as curves in
    # L (examples/plot_fig3_oracle_layer.py, plot_lambda_star.py): between
    # the integers the same formulas. Sequences (psgd_path, the data sets)
    # have whole numbers of tokens.
    L = 2.5
    assert theory.lambda_star(0.0, L) == pytest.approx((L + 1) / (L + 3), rel=1e-14)
    assert theory.unbiased_temperature(0.0, L) == pytest.approx(L / (L + 1), rel=1e-14)
    # The general moments and the manifold's polynomial agree there too.
    C = make_centroids(2, 5, random_state=0)
    heads = theory.manifold_heads(C, [0.6, -0.8], random_state=1)
    assert theory.manifold_risk([0.6, -0.8], 0.3, 0.5, L, n_features=5) == pytest.approx(
        theory.population_risk(heads, C, 0.3, 0.5, L), rel=1e-12
    )
    with pytest.raises(ValueError, match="sequence_length must be an integer >= 1"):
        theory.psgd_path(C, heads, temperature=0.5, step_size=0.1, record=[1], sequence_length=L)


# ---------------------------------------------------------------------------
# The manifold, Lemma 3.2 and lambda* (Prop. 3.3).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("K, d", [(1, 2), (2, 5), (3, 6), (4, 20)])
def test_manifold_heads_lie_on_the_manifold_from_the_centroids_own_seed(K, d):
    # make_centroids(K, d, random_state=s) orthonormalises a draw that
    # manifold_heads(..., random_state=s) drew again: projected off the
    # centroids it was rounding, and the heads left M silently (<mu_0, mu_1>
    # = -0.448 at K = 2, d = 5, s = 0).
    kappa = np.linspace(0.3, 0.7, K)
    for seed in range(5):
        C = make_centroids(K, d, random_state=seed)
        H = theory.manifold_heads(C, kappa, random_state=seed)
        np.testing.assert_allclose(H @ C.T, np.diag(kappa), atol=1e-12)
        np.testing.assert_allclose(H @ H.T, np.eye(K), atol=1e-12)


def test_manifold_risk_coefficients_are_numpy_scalars_for_one_setting():
    # As the other closed forms return them; they were 0-d arrays.
    for value in theory.manifold_risk_coefficients(0.3, 0.5, 10, n_features=5):
        assert type(value) is np.float64
    for curve in theory.manifold_risk_coefficients([0.1, 0.3], 0.5, 10, n_features=5):
        assert curve.shape == (2,)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.manifold_risk(["0.5", "0.5"], 0.3, 0.5, 10, n_features=5),
        lambda: theory.manifold_risk([True, True], 0.3, 0.5, 10, n_features=5),
        lambda: theory.manifold_heads(np.eye(2, 5), "0.5"),
        lambda: theory.manifold_heads(np.eye(2, 5), [True, False]),
    ],
    ids=["risk-text", "risk-bools", "heads-text", "heads-bools"],
)
def test_alignments_refuse_text_and_bools(call):
    # NumPy read "0.5" as 0.5 and True as 1, which the noise refuses.
    with pytest.raises(ValueError, match=r"^alignment must lie in \[-1, 1\] .*not text or bools"):
        call()


@pytest.mark.parametrize("n_clusters", [2, 3])
@pytest.mark.parametrize("noise, L", [(0.0, 7), (0.3, 10), (1.0, 3), (0.7, np.inf)])
def test_manifold_risk_is_the_population_risk_on_the_manifold(n_clusters, noise, L):
    rng = np.random.default_rng(40)
    d = 2 * n_clusters + 1
    C = make_centroids(n_clusters, d, random_state=n_clusters)
    kappa = rng.uniform(-1, 1, n_clusters)
    heads = theory.manifold_heads(C, kappa, random_state=4)
    np.testing.assert_allclose(heads @ C.T, np.diag(kappa), atol=1e-12)
    np.testing.assert_allclose(heads @ heads.T, np.eye(n_clusters), atol=1e-12)
    exact = theory.population_risk(heads, C, noise, 0.8, L)
    assert theory.manifold_risk(kappa, noise, 0.8, L, n_features=d) == pytest.approx(
        exact, rel=1e-12
    )


@settings(max_examples=50, deadline=None)
@given(
    noise=st.floats(0, 2),
    temperature=st.floats(0, 3),
    L=st.one_of(st.integers(1, 1000), st.just(np.inf)),
    d=st.integers(4, 50),
    K=st.integers(2, 4),
)
def test_manifold_risk_is_convex_in_squared_alignments(noise, temperature, L, d, K):
    A, B, C, D = theory.manifold_risk_coefficients(
        noise, temperature, L, n_features=d, n_clusters=K
    )
    assert A >= 0 and C >= 0  # so (+-1, ..., +-1) is optimal iff dR/du <= 0 there
    assert D >= 0


@pytest.mark.parametrize("L", [1, 2, 5, 10, 100, 1000])
def test_lambda_star_dirac_limit(L):
    # Paper, after Prop. 3.3: lambda*(0, L) = (L + 1) / (L + 3).
    assert theory.lambda_star(0.0, L) == pytest.approx((L + 1) / (L + 3), rel=1e-14)


@pytest.mark.parametrize("noise", [0.1, 0.3, 1.0, 2.0])
def test_lambda_star_long_sequence_limit(noise):
    # Paper, after Prop. 3.3: lambda*(sigma, inf) = (1+4s^2)/(1+5s^2+6s^4).
    s2 = noise**2
    limit = (1 + 4 * s2) / (1 + 5 * s2 + 6 * s2**2)
    assert theory.lambda_star(noise) == pytest.approx(limit, rel=1e-14)
    assert theory.lambda_star(noise, 1e9, n_features=10) == pytest.approx(limit, rel=1e-7)


@settings(max_examples=50, deadline=None)
@given(noise=st.floats(0, 3), L=st.integers(1, 10_000), d=st.integers(2, 100))
def test_lambda_star_explicit_two_cluster_form(noise, L, d):
    # The rational form written out in docs/theory.md.
    s, k = noise**2, 1 + d * noise**2
    num = L * (2 * k + 8 * s + (L - 1) * (1 + 4 * s))
    den = (
        4 * k * (1 + 4 * s)
        + 32 * s
        + 96 * s**2
        + (L - 1) * (4 + 2 * k + 40 * s + 60 * s**2 + 4 * s * k)
        + (L - 1) * (L - 2) * (1 + 5 * s + 6 * s**2)
    )
    assert theory.lambda_star(noise, L, n_features=d) == pytest.approx(num / den, rel=1e-12)


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_manifold_optimal_alignment_is_the_argmin_on_the_manifold(n_clusters):
    noise, L, d = 0.3, 100, 10
    lam_star = theory.lambda_star(noise, L, n_features=d, n_clusters=n_clusters)
    ratio = np.array([0.5, 1.0, 1.2, 1.5, 2.0, 3.0])
    kappa = theory.manifold_optimal_alignment(
        noise, ratio * lam_star, L, n_features=d, n_clusters=n_clusters
    )
    np.testing.assert_allclose(kappa[:2], 1.0, rtol=1e-12)
    assert np.all(np.diff(kappa[1:]) < 0)
    # Independent check by grid search over equal alignments, and one unequal
    # alignment cannot do better (convexity and symmetry).
    grid = np.linspace(0, 1, 20_001)
    for lam, best in zip(ratio * lam_star, kappa):
        risk = theory.manifold_risk(
            np.repeat(grid[:, None], n_clusters, 1), noise, lam, L, n_features=d
        )
        assert grid[np.argmin(risk)] == pytest.approx(best, abs=1e-4)
        uneven = np.full(n_clusters, best)
        uneven[0] = 0.5 * best
        assert theory.manifold_risk(uneven, noise, lam, L, n_features=d) > risk.min()


def test_lambda_star_closed_forms_for_k_clusters():
    L, K, s2 = np.arange(1, 50), 5, 0.49
    dirac = L * (L + K - 1) / (K**2 + 3 * K * (L - 1) + (L - 1) * (L - 2))
    np.testing.assert_allclose(theory.lambda_star(0.0, L, n_clusters=K), dirac, rtol=1e-14)
    limit = 2 * (1 + 2 * K * s2) / (2 + 5 * K * s2 + 3 * K**2 * s2**2)
    assert theory.lambda_star(0.7, np.inf, n_clusters=K) == pytest.approx(limit, rel=1e-14)


@pytest.mark.parametrize("n_clusters", [2, 3])
@pytest.mark.parametrize("noise, L", [(0.0, 10), (0.3, 10), (1.0, 100), (0.5, 3)])
def test_lambda_star_is_where_the_centroids_stop_being_optimal(n_clusters, noise, L):
    # Independent of the manifold algebra: evaluate the general risk along
    # heads tilted by a small angle out of the centroids inside M.
    d = 2 * n_clusters + 2
    C = make_centroids(n_clusters, d, random_state=0)
    lam_star = theory.lambda_star(noise, L, n_features=d, n_clusters=n_clusters)
    tilted = theory.manifold_heads(C, np.sqrt(1 - 1e-4), random_state=1)
    for factor, corner_wins in [(0.98, True), (1.02, False)]:
        lam = factor * lam_star
        at_centroids = theory.population_risk(C, C, noise, lam, L)
        assert (at_centroids < theory.population_risk(tilted, C, noise, lam, L)) == corner_wins


@pytest.mark.parametrize("noise, L", [(0.0, 5), (0.3, 10), (1.0, 100)])
def test_centroids_are_global_minimisers_on_the_manifold_at_lambda_star(noise, L):
    d = 10
    lam = theory.lambda_star(noise, L, n_features=d)
    grid = np.stack(np.meshgrid(*2 * [np.linspace(-1, 1, 81)]), -1)
    risk = theory.manifold_risk(grid, noise, lam, L, n_features=d)
    assert risk.min() >= theory.manifold_risk([1.0, 1.0], noise, lam, L, n_features=d) - 1e-12
    above = theory.manifold_risk(grid, noise, 1.1 * lam, L, n_features=d)
    assert above.min() < theory.manifold_risk([1.0, 1.0], noise, 1.1 * lam, L, n_features=d) - 1e-6


def test_lambda_star_depends_on_dimension_for_finite_sequences():
    # Not in the paper's notation lambda*(sigma, L): E||X||^2 = 1 + d sigma^2
    # enters through the token attending to itself.
    assert theory.lambda_star(0.3, 10, n_features=2) != pytest.approx(
        theory.lambda_star(0.3, 10, n_features=100), rel=1e-3
    )
    with pytest.raises(ValueError, match="n_features is required"):
        theory.lambda_star(0.3, 10)


def test_the_manifold_risk_needs_the_dimension_at_every_length_its_terms_in_kappa_do_not():
    # The risk's constant D holds E||X||^2 = 1 + d sigma^2 at L = inf too:
    # without n_features it had left d sigma^2 out (a risk of -2 at sigma =
    # 1, where population_risk gives 8). lambda* and the optimal alignment,
    # which read A, B and C alone, need no d at L = inf.
    C = make_centroids(2, 10, random_state=0)
    heads = theory.manifold_heads(C, [1.0, 1.0], random_state=0)
    exact = theory.population_risk(heads, C, 1.0, 1 / 3, np.inf)
    assert theory.manifold_risk([1.0, 1.0], 1.0, 1 / 3, n_features=10) == pytest.approx(exact)
    assert exact == pytest.approx(8.0)
    for call in (
        lambda: theory.manifold_risk([1.0, 1.0], 1.0, 1 / 3),
        lambda: theory.manifold_risk_coefficients(1.0, 1 / 3),
    ):
        with pytest.raises(ValueError, match="n_features is required for noise > 0"):
            call()
    assert theory.manifold_risk([1.0, 1.0], 0.0, 1.0) == 0.0  # sigma = 0: no d
    lam = theory.lambda_star(1.0)
    alignment = theory.manifold_optimal_alignment(1.0, 1.5 * lam)
    assert 0.0 < alignment < 1.0
    for d in (2, 50):
        assert theory.manifold_optimal_alignment(1.0, 1.5 * lam, n_features=d) == pytest.approx(
            alignment, rel=1e-12
        )


# ---------------------------------------------------------------------------
# Oracle layer (Prop. 4.2) and in-context layer (Prop. 5.2).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_oracle_risk_and_variance_against_monte_carlo(n_clusters):
    rng = np.random.default_rng(50 + n_clusters)
    d, L, noise = 5, 8, 0.5
    lam = 1 / (1 + n_clusters * noise**2)
    C = make_centroids(n_clusters, d, random_state=n_clusters)
    X, z = sample(rng, 80_000, L, C, noise)
    T = layer(X, C, lam * n_clusters)
    risk = theory.oracle_risk(noise, lam, L, n_features=d, n_clusters=n_clusters)
    assert_mc(np.mean(np.sum((X - T) ** 2, -1), 1), risk)
    # E[T_1 | Z_1 = c] = b mu*_c with b of Prop. 4.1.
    bias = lam / theory.unbiased_temperature(noise, L, n_clusters=n_clusters)
    spread = np.sum((T - bias * C[z]) ** 2, -1)
    assert_mc(
        spread.mean(1),
        theory.oracle_conditional_variance(noise, lam, L, n_features=d, n_clusters=n_clusters),
    )


def test_oracle_limits_prop_4_2():
    s = np.array([0.1, 0.3, 1.0])
    d, lam = 10, 1 / (1 + 2 * s**2)
    # Prop. 4.2's temperature is 1 / (1 + 2 sigma^2) in disguise.
    paper = (1 + 4 * s**2 + 4 * s**4) / (1 + 6 * s**2 + 12 * s**4 + 8 * s**6)
    np.testing.assert_allclose(paper, lam)
    np.testing.assert_allclose(theory.oracle_optimal_temperature(s, np.inf, n_features=d), lam)
    np.testing.assert_allclose(theory.oracle_risk(s, lam, np.inf, n_features=d), (d - 2) * s**2)
    np.testing.assert_allclose(
        theory.oracle_conditional_variance(s, lam, np.inf, n_features=d), 2 * s**2
    )
    for L in [10, 100]:
        assert theory.oracle_risk(0.3, 0.8, L, n_features=d) == pytest.approx(
            theory.population_risk(np.eye(2, d), np.eye(2, d), 0.3, 0.8, L), rel=1e-12
        )


@pytest.mark.parametrize("d", [3, 10, 50])
@pytest.mark.parametrize("noise", [0.3, 1.0])
def test_oracle_risk_falls_below_the_quantizer_as_l_grows(noise, d):
    # Prop. 4.2 at its temperature 1 / (1 + 2 sigma^2): far above d sigma^2
    # for L = 1, below it for long sequences, tending to (d - 2) sigma^2.
    lam = 1 / (1 + 2 * noise**2)
    quantizer = theory.quantizer_risk(noise, n_features=d)
    assert theory.oracle_risk(noise, lam, 1, n_features=d) > quantizer
    long = theory.oracle_risk(noise, lam, np.array([200, 10**3, 10**4, 10**6]), n_features=d)
    assert np.all(long < quantizer)
    assert long[-1] == pytest.approx((d - 2) * noise**2, rel=1e-4)


def test_oracle_risk_is_not_monotone_in_l():
    # The paper says the risk decreases with L (after Prop. 4.2); at its
    # temperature this fails when d sigma^2 is large: for sigma = 1, d = 10
    # the risk dips below its limit 8 sigma^2 around L = 20, then rises.
    risk = theory.oracle_risk(1.0, 1 / 3, np.array([10, 20, 100, np.inf]), n_features=10)
    assert risk[1] < risk[0] and risk[1] < risk[2] < risk[3] == pytest.approx(8.0)


def test_in_context_risk_and_variance_against_monte_carlo():
    rng = np.random.default_rng(60)
    n, d, L, noise, lam = 100_000, 4, 8, 0.5, 0.6
    C = np.linalg.qr(rng.standard_normal((n, d, 2)))[0].transpose(0, 2, 1)
    z = rng.integers(2, size=(n, L))
    means = np.take_along_axis(C, z[..., None], 1)
    X = means + noise * rng.standard_normal((n, L, d))
    T = layer(X, np.eye(d), 2 * lam)
    assert_mc(
        np.mean(np.sum((X - T) ** 2, -1), 1), theory.in_context_risk(noise, lam, L, n_features=d)
    )
    bias = lam / theory.in_context_unbiased_temperature(noise, L, n_features=d)
    spread = np.sum((T - bias * means) ** 2, -1)
    assert_mc(spread.mean(1), theory.in_context_conditional_variance(noise, lam, L, n_features=d))


@pytest.mark.parametrize("L", [1, 5, np.inf])
def test_in_context_risk_is_the_general_risk_with_identity_heads(L):
    d, K = 6, 3
    C = make_centroids(K, d, random_state=1)
    a0, a1, a2 = theory._LayerMoments(C, np.full(K, 1 / K), 0.49, d, float(L))(np.eye(d))
    tau = 0.7 * K
    assert theory.in_context_risk(0.7, 0.7, L, n_features=d, n_clusters=K) == pytest.approx(
        a0 - 2 * tau * a1 + tau**2 * a2, rel=1e-12
    )


def test_in_context_limits_prop_5_2():
    s, d = np.array([0.1, 0.3, 1.0]), 10
    s2 = s**2
    paper = (2 * (s2 + 0.5) ** 2 + (d - 2) * s2**2) / (2 * (2 * (s2 + 0.5) ** 3 + (d - 2) * s2**3))
    np.testing.assert_allclose(theory.in_context_optimal_temperature(s, n_features=d), paper)
    lam = 1 / (1 + 2 * s2)
    variance = theory.in_context_conditional_variance(s, lam, np.inf, n_features=d)
    np.testing.assert_allclose(variance, 2 * s2 + 4 * (d - 2) * s2**3 / (1 + 2 * s2) ** 2)
    assert np.all(variance < theory.quantizer_risk(s, n_features=d))
    best = theory.in_context_risk(s, paper, np.inf, n_features=d)
    assert np.all(best < theory.quantizer_risk(s, n_features=d))
    far = theory.in_context_risk(s, paper, 1e9, n_features=d)
    np.testing.assert_allclose(far, best, rtol=1e-6)


@pytest.mark.parametrize("layer", ["oracle", "in_context"])
@pytest.mark.parametrize(
    ("n_clusters", "d", "noise", "L"),
    [(2, 10, 0.3, 5), (2, 10, 1.0, 20), (3, 7, 0.5, 8), (4, 12, 0.8, 3)],
)
def test_optimal_temperatures_minimise_the_risk_at_finite_length(layer, n_clusters, d, noise, L):
    # Props. 4.2 and 5.2 at finite L: the optimal temperature is the
    # minimiser of the layer's risk (checked by Monte Carlo above) over
    # lambda, found here by a bounded scalar search, not from a1 / (K a2).
    kw = {"n_features": d, "n_clusters": n_clusters}
    risk = getattr(theory, f"{layer}_risk")
    optimal = float(getattr(theory, f"{layer}_optimal_temperature")(noise, L, **kw))
    found = scipy.optimize.minimize_scalar(
        lambda lam: risk(noise, lam, L, **kw),
        bounds=(1e-3, 10.0),
        method="bounded",
        options={"xatol": 1e-10},
    )
    np.testing.assert_allclose(optimal, found.x, rtol=1e-6)
    at = risk(noise, optimal, L, **kw)
    assert at < risk(noise, optimal * (1 - 1e-3), L, **kw)
    assert at < risk(noise, optimal * (1 + 1e-3), L, **kw)


@pytest.mark.parametrize("n_clusters, d", [(2, 2), (3, 7), (5, 12)])
@pytest.mark.parametrize("noise", [0.3, 1.0])
@pytest.mark.parametrize("lam", [0.2, 0.5, 0.9])
def test_long_sequence_limits_of_the_layers_are_those_of_math_md(n_clusters, d, noise, lam):
    # math.md section 4: as L -> infinity, with s = sigma^2, the oracle
    # layer's R = 1 + d s - 2 lambda (1 + K s)^2 + lambda^2 (1 + K s)^3 and
    # Var = lambda^2 (1 + K s)^2 K s, optimal at 1 / (1 + K s); the
    # in-context layer's R = 1 + d s - 2 lambda K a + (lambda K)^2 b and Var
    # = (lambda K)^2 s a, optimal at a / (K b), a = K (1/K + s)^2 + (d - K)
    # s^2, b = K (1/K + s)^3 + (d - K) s^3: any K, d and lambda (the tests
    # above take K = 2 at the optimal temperature; the finite-L forms are
    # checked by Monte Carlo).
    K, s = n_clusters, noise**2
    kw = {"n_features": d, "n_clusters": K}
    oracle = (
        theory.oracle_risk(noise, lam, np.inf, **kw),
        theory.oracle_conditional_variance(noise, lam, np.inf, **kw),
        theory.oracle_optimal_temperature(noise, np.inf, **kw),
    )
    expected = (
        1 + d * s - 2 * lam * (1 + K * s) ** 2 + lam**2 * (1 + K * s) ** 3,
        lam**2 * (1 + K * s) ** 2 * K * s,
        1 / (1 + K * s),
    )
    np.testing.assert_allclose(oracle, expected, rtol=1e-12, atol=1e-14)
    a = K * (1 / K + s) ** 2 + (d - K) * s**2
    b = K * (1 / K + s) ** 3 + (d - K) * s**3
    in_context = (
        theory.in_context_risk(noise, lam, np.inf, **kw),
        theory.in_context_conditional_variance(noise, lam, np.inf, **kw),
        theory.in_context_optimal_temperature(noise, np.inf, **kw),
    )
    expected = (
        1 + d * s - 2 * lam * K * a + (lam * K) ** 2 * b,
        (lam * K) ** 2 * s * a,
        a / (K * b),
    )
    np.testing.assert_allclose(in_context, expected, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------
# Population PGD (Thm. 3.4, Fig. 5).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("L", [10, 100])
@pytest.mark.parametrize("noise", [0.0, 0.3, 1.0])
def test_pgd_from_the_manifold_reaches_the_centroids(noise, L):
    d = 6
    C = make_centroids(2, d, random_state=0)
    heads0 = theory.manifold_heads(C, [0.3, -0.6], random_state=1)
    lam = 0.9 * theory.lambda_star(noise, L, n_features=d)
    result = theory.population_pgd(heads0, C, noise, lam, L, max_iter=5000)
    assert result.converged
    assert result.distance[-1] < 1e-8
    assert centroid_distance(result.heads, C) < 1e-8
    # A descent method: the objective never increases (up to rounding).
    assert np.all(np.diff(result.objective) <= 1e-13 * result.objective[0])


def test_pgd_three_clusters_from_the_manifold():
    d = 7
    C = make_centroids(3, d, random_state=2)
    heads0 = theory.manifold_heads(C, [0.2, -0.5, 0.7], random_state=3)
    lam = 0.9 * theory.lambda_star(0.3, 20, n_features=d, n_clusters=3)
    result = theory.population_pgd(heads0, C, 0.3, lam, 20, max_iter=5000)
    assert result.distance[-1] < 1e-8


@pytest.mark.parametrize("noise, L", [(0.0, 10), (0.3, 10), (1.0, 100), (0.3, np.inf)])
def test_pgd_above_lambda_star_tilts_out_of_the_centroid_span(noise, L):
    d = 6
    C = make_centroids(2, d, random_state=0)
    heads0 = theory.manifold_heads(C, [0.3, -0.6], random_state=1)
    lam = 1.3 * theory.lambda_star(noise, L, n_features=d)
    kappa = theory.manifold_optimal_alignment(noise, lam, L, n_features=d)
    assert kappa < 0.95
    result = theory.population_pgd(heads0, C, noise, lam, L, max_iter=5000)
    assert result.converged
    # The iterates stay on M and stop at |kappa| = kappa*: the heads leave the
    # span of the centroids, at distance 2 * 2 (1 - kappa*) from them.
    np.testing.assert_allclose(np.abs(result.heads @ C.T), kappa * np.eye(2), atol=1e-7)
    assert result.distance[-1] == pytest.approx(4 * (1 - kappa), rel=1e-6)
    assert result.objective[-1] < theory.population_risk(C, C, noise, lam, L)


def test_pgd_from_a_random_start_finds_the_span_but_not_the_centroids():
    # R depends on U only through U U^T: every orthonormal frame of the
    # centroids' span is a global minimiser, hence the regularizer.
    d, noise, L = 6, 0.3, 10
    C = make_centroids(2, d, random_state=0)
    heads0 = np.random.default_rng(5).standard_normal((2, d))
    lam = 0.9 * theory.lambda_star(noise, L, n_features=d)
    plain = theory.population_pgd(heads0, C, noise, lam, L, max_iter=5000)
    np.testing.assert_allclose(plain.heads.T @ plain.heads, C.T @ C, atol=1e-6)
    assert plain.distance[-1] > 1e-3  # this seed lands on a rotated frame
    assert plain.objective[-1] == pytest.approx(
        theory.population_risk(C, C, noise, lam, L), rel=1e-10
    )
    regularised = theory.population_pgd(heads0, C, noise, lam, L, reg_strength=0.1, max_iter=5000)
    assert regularised.distance[-1] < 1e-8


def test_pgd_too_much_regularisation_hurts_at_high_noise():
    # Fig. 2a: a strong regularizer overrides the risk, more so at sigma = 1.
    # With rho = 1 the centroids are reached at sigma = 0.3, but at sigma = 1
    # the descent converges elsewhere.
    d, L = 6, 100
    C = make_centroids(2, d, random_state=0)
    heads0 = np.random.default_rng(3).standard_normal((2, d))
    runs = {
        noise: theory.population_pgd(
            heads0,
            C,
            noise,
            0.9 * theory.lambda_star(noise, L, n_features=d),
            L,
            reg_strength=1.0,
            max_iter=10_000,
            tol=1e-6,
        )
        for noise in (0.3, 1.0)
    }
    assert runs[0.3].distance[-1] < 1e-8
    assert runs[1.0].converged and runs[1.0].distance[-1] > 0.1


@pytest.mark.parametrize(
    "heads, centroids, match",
    [
        (np.where(np.eye(2, 5) == 1, np.inf, 0.0), np.eye(2, 5), "heads must be finite"),
        (np.eye(2, 5), np.full((2, 5), np.nan), "centroids must be finite"),
        (np.eye(2, 5) + 1j, np.eye(2, 5), "Complex data not supported"),
        (np.zeros((2, 0)), np.zeros((2, 0)), "centroids must be a non-empty 2-D array"),
        (np.eye(2, 5), np.zeros((0, 5)), "centroids must be a non-empty 2-D array"),
        (np.zeros((0, 5)), np.eye(2, 5), "heads must be a non-empty 2-D array"),
    ],
    ids=["inf-heads", "nan-centroids", "complex", "no-feature", "no-centroid", "no-head"],
)
@pytest.mark.parametrize(
    "function",
    [
        lambda H, C: theory.population_risk(H, C, 0.3, 0.5, 10),
        lambda H, C: theory.population_risk_gradient(H, C, 0.3, 0.5, 10),
        lambda H, C: theory.pairwise_regularizer(H, C, 0.3),
        lambda H, C: theory.pairwise_regularizer_gradient(H, C, 0.3),
        lambda H, C: theory.population_pgd(H, C, 0.3, 0.5, 10, max_iter=1),
    ],
    ids=["risk", "gradient", "regularizer", "regularizer-gradient", "pgd"],
)
def test_closed_forms_refuse_bad_heads_and_centroids_before_work(function, heads, centroids, match):
    # An infinite head made the SVD of the span spin without end; NaN gave a
    # LinAlgError or a NaN value.
    with pytest.raises(ValueError, match=match):
        function(heads, centroids)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: theory.unbiased_temperature(0.3, 0), "sequence_length must be >= 1"),
        (lambda: theory.unbiased_temperature(0.3, np.nan), "sequence_length must be >= 1"),
        (lambda: theory.unbiased_temperature(0.3, True), "sequence_length must be >= 1"),
        (lambda: theory.lambda_star(0.3, "10"), "sequence_length must be >= 1"),
        (
            lambda: theory.unbiased_temperature(0.3, 10, n_clusters=0),
            "n_clusters must be an integer",
        ),
        (
            lambda: theory.unbiased_temperature(0.3, 10, n_clusters=2.5),
            "n_clusters must be an integer",
        ),
        (
            lambda: theory.in_context_unbiased_temperature(0.3, 10, n_features=10, n_clusters=0),
            "n_clusters must be an integer",
        ),
        (
            lambda: theory.in_context_unbiased_temperature(0.3, 10, n_features=0, n_clusters=2),
            "n_features must be an integer >= 1",
        ),
        (
            lambda: theory.manifold_risk([2.0, 0.5], 0.3, 0.5, 10, n_features=10),
            r"alignment must lie in",
        ),
        (
            lambda: theory.manifold_risk([np.nan, 0.5], 0.3, 0.5, 10, n_features=10),
            r"alignment must lie in",
        ),
        (lambda: theory.manifold_risk(0.5, 0.3, 0.5, 10, n_features=10), "one kappa per head"),
        (lambda: theory.manifold_heads(np.eye(2, 5), np.nan), r"alignment must lie in"),
        (
            lambda: theory.manifold_heads(np.eye(2, 5), [0.1, 0.2, 0.3]),
            r"alignment must be one kappa or 2, one per centroid, got shape \(3,\)",
        ),
        (lambda: theory.manifold_heads(np.eye(2, 5), [[0.1, 0.2]]), "alignment must be one kappa"),
        (lambda: theory.manifold_heads(np.ones(5), 0.5), "centroids must be a non-empty 2-D array"),
        (
            lambda: theory.auto_temperature(0.3, 10, n_clusters=2, n_features=3, eigenvalues=[]),
            "eigenvalues must be 3 finite",
        ),
        (
            lambda: theory.auto_temperature(
                0.3, 10, n_clusters=2, n_features=3, eigenvalues=[1.0, np.nan, 0.0]
            ),
            "3 finite",
        ),
        (
            lambda: theory.auto_temperature(
                0.3, 10, n_clusters=2, n_features=3, eigenvalues=[0.1, 0.5, 1.0]
            ),
            "descending order",
        ),
        # NumPy's bare "could not convert string to float", and negative
        # eigenvalues, which no second moment has, were taken (an
        # eigensolver's rounding below zero is taken as zero: tested apart).
        (
            lambda: theory.auto_temperature(
                0.3, 10, n_clusters=2, n_features=3, eigenvalues=["a", "b", "c"]
            ),
            "eigenvalues must be 3 finite numbers .* got not numbers",
        ),
        (
            lambda: theory.auto_temperature(
                0.3, 10, n_clusters=2, n_features=3, eigenvalues=[-1.0, -2.0, -3.0]
            ),
            "eigenvalues must be >= 0",
        ),
    ],
    ids=lambda v: "" if callable(v) else v[:24],
)
def test_scalar_closed_forms_refuse_impossible_settings(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _temperature_on_arrays(noise, L, K, d, eigenvalues):
    """auto_temperature's rule from the closed forms evaluated on arrays
    (0-d): the unbiased temperature, 0.95 lambda* of sigma**2 and the cap of
    the largest eigenvalue, the least positive finite one; an overflow on the
    way to any raises."""
    L = float(L)
    with np.errstate(over="raise", invalid="raise"):
        unbiased = float(theory.unbiased_temperature(noise, L, n_clusters=K))
        s = np.asarray(float(noise) ** 2)
        caps = [0.95 * float(theory._lambda_star(s, np.asarray(L), K, d))]
        if eigenvalues is not None and eigenvalues[0] > 0:
            caps.append(0.9 / (K * (eigenvalues[0] + float(np.sum(eigenvalues)) / L)))
    return min([unbiased, *[c for c in caps if np.isfinite(c) and c > 0]])


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    noise=st.one_of(
        # sigma^4 K^2 d, sigma^6 K^2 and sigma^2 K^2 leave float64's range
        # (unread terms of the moments included).
        st.sampled_from([0.0, 1e-200, 0.3, 1e30, 1e51, 5e51, 1e77, 1.2e77, 1e154, 1e200]),
        st.floats(0.0, 5.0),
        st.floats(0.0, 1e160).map(np.float64),
    ),
    L=st.one_of(
        st.sampled_from([1, 2, 1.5, 50, np.inf, 1e99, 1.3e154, 1.4e154, 1e300]),
        st.integers(1, 10**6),
        st.floats(1.0, 1e6),
    ),
    K=st.sampled_from([1, 2, 3, 5, 17, 2**17, 10**60, 10**110]),
    d=st.integers(1, 40),
    spectrum=st.sampled_from(
        [None, "ordinary", "zero", "rounding", "huge", "negative", "ascending"]
    ),
)
def test_auto_temperature_is_its_closed_forms_on_arrays(seed, noise, L, K, d, spectrum):
    # auto_temperature evaluates its one setting in float64 scalars, which
    # NumPy checks and rounds as arrays (lambda*'s coefficients one by one):
    # the value and type of the closed forms' evaluation on arrays bit for
    # bit, and their overflows as its FloatingPointError (sigma = 0, L = inf,
    # K > d, zero eigenvalues and those rounded below zero, K^3 beyond
    # float64); spectra it refuses are refused after that.
    rng = np.random.default_rng(seed)
    eigenvalues = np.sort(rng.exponential(size=d) * 10.0 ** rng.uniform(-6, 6))[::-1]
    if spectrum == "zero":
        eigenvalues[:] = 0.0
    elif spectrum == "rounding" and d > 1:
        eigenvalues[-1] = -d * np.finfo(np.float64).eps * eigenvalues[0]
    elif spectrum == "huge":
        eigenvalues = eigenvalues / eigenvalues[0] * 1e308
    elif spectrum == "negative":
        eigenvalues[-1] = -1e-3 * eigenvalues[0]
    elif spectrum == "ascending" and d > 1:
        eigenvalues = eigenvalues[::-1].copy()
    given = None if spectrum is None else eigenvalues

    def temperature():
        return theory.auto_temperature(noise, L, n_clusters=K, n_features=d, eigenvalues=given)

    try:
        expected = _temperature_on_arrays(
            noise, L, K, d, None if given is None else np.maximum(given, 0.0)
        )
    except (FloatingPointError, OverflowError):
        with pytest.raises(
            FloatingPointError, match="^auto_temperature: .* leaves float64's range"
        ):
            temperature()
        return
    if spectrum == "negative" or (spectrum == "ascending" and d > 1):
        with pytest.raises(ValueError, match=">= 0|descending order"):
            temperature()
        return
    got = temperature()
    assert type(got) is type(expected)
    assert got == expected


def test_manifold_heads_take_float32_orthonormal_centroids(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    C = np.linalg.qr(rng.standard_normal((6, 2)).astype(np.float32))[0].T
    H = theory.manifold_heads(C, [0.6, 0.8], random_state=0)
    np.testing.assert_allclose(H @ C.T.astype(np.float64), np.diag([0.6, 0.8]), atol=1e-5)


def test_risks_are_not_negative_where_they_vanish():
    # Where a risk or a variance is 0 its terms' rounding (about 1e-16) took
    # it below zero, and its square root to NaN: the oracle layer's risk
    # (d - K) sigma^2 at d = K, L = inf and the optimal temperature (also as
    # the general, the manifold and the overlaps' risk of the same heads),
    # its variance at sigma = 0, and the in-context layer's at sigma = 1e-13.
    for K in (2, 3, 5):
        C = np.eye(K)
        for noise in (1e-8, 0.1, 0.3, 1.0):
            lam = theory.oracle_optimal_temperature(noise, np.inf, n_features=K, n_clusters=K)
            assert theory.oracle_risk(noise, lam, np.inf, n_features=K, n_clusters=K) >= 0.0
            assert theory.population_risk(C, C, noise, lam, np.inf) >= 0.0
            assert theory.manifold_risk(np.ones(K), noise, lam, np.inf, n_features=K) >= 0.0
            if K == 2:
                overlaps = (1.0, 1.0, 0.0, 0.0, 0.0, noise, lam, np.inf)
                assert theory.risk_from_overlaps(*overlaps, n_features=K) >= 0.0
        variance = theory.oracle_conditional_variance(0.0, 0.3, np.inf, n_features=K, n_clusters=K)
        assert variance >= 0.0
        lam = theory.in_context_optimal_temperature(1e-13, np.inf, n_features=10, n_clusters=K)
        assert theory.in_context_risk(1e-13, lam, np.inf, n_features=10, n_clusters=K) >= 0.0
        assert (
            theory.in_context_conditional_variance(1e-13, lam, np.inf, n_features=10, n_clusters=K)
            >= 0.0
        )


# The public functions that take d or K.
_TAKE_COUNTS = [
    name
    for name in theory.__all__
    if {"n_features", "n_clusters"} & set(inspect.signature(getattr(theory, name)).parameters)
]


@pytest.mark.parametrize("name", _TAKE_COUNTS)
def test_counts_are_keyword_only(name):
    # d, K and L are all whole numbers: taken one for another they gave a
    # wrong value without an error (in_context_optimal_temperature took
    # (noise, d, L) where the others take L before d, lambda_star K before d).
    parameters = inspect.signature(getattr(theory, name)).parameters
    for count in {"n_features", "n_clusters"} & set(parameters):
        assert parameters[count].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.in_context_optimal_temperature(0.3, 10, 100),
        lambda: theory.in_context_optimal_temperature(0.3, 100, 10),
        lambda: theory.lambda_star(0.3, 10, 10, 2),
        lambda: theory.manifold_risk_coefficients(0.3, 0.5, 10, 2, 10),
        lambda: theory.oracle_risk(0.3, 0.5, 10, 2),
        lambda: theory.auto_temperature(0.3, 50, 2, 10),
        lambda: theory.in_context_unbiased_temperature(0.3, 50, 10, 2),
    ],
    ids=[
        "ctx-temperature",
        "ctx-temperature-swapped",
        "lambda-star",
        "coefficients",
        "oracle",
        "auto",
        "ctx-unbiased",
    ],
)
def test_counts_by_position_are_refused(call):
    with pytest.raises(TypeError, match="positional argument"):
        call()


@settings(max_examples=20, deadline=None)
@given(
    K=st.integers(2, 6),
    fewer=st.integers(1, 5),
    L=st.sampled_from([1, 10, np.inf]),
    noise=st.sampled_from([0.0, 0.3]),
)
def test_closed_forms_of_orthonormal_centroids_need_d_at_least_k(K, fewer, L, noise):
    # K orthonormal centroids need d >= K. lambda_star and the manifold's
    # closed forms took d < K and returned a number (lambda_star(0.3, 10,
    # K = 10, d = 2) gave 0.2195), even where d drops out (L = inf or
    # sigma = 0); the oracle and in-context ones refused it.
    d = max(K - fewer, 1)
    counts = {"n_features": d, "n_clusters": K}
    calls = [
        lambda: theory.lambda_star(noise, L, **counts),
        lambda: theory.manifold_risk_coefficients(noise, 0.5, L, **counts),
        lambda: theory.manifold_optimal_alignment(noise, 0.5, L, **counts),
        lambda: theory.manifold_risk(np.ones(K), noise, 0.5, L, n_features=d),
        lambda: theory.oracle_risk(noise, 0.5, L, **counts),
        lambda: theory.oracle_conditional_variance(noise, 0.5, L, **counts),
        lambda: theory.oracle_optimal_temperature(noise, L, **counts),
        lambda: theory.in_context_risk(noise, 0.5, L, **counts),
        lambda: theory.in_context_conditional_variance(noise, 0.5, L, **counts),
        lambda: theory.in_context_optimal_temperature(noise, L, **counts),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"n_features must be an integer >= {K}, got {d}"):
            call()


def test_the_estimators_rules_take_more_clusters_than_features():
    # AttentionClustering and InContextQuantizer fit K > d with
    # temperature="auto": the first's rule keeps lambda*'s closed form as it
    # stands there (at L = inf lambda* drops d, and at sigma = 0.1 its cap
    # 0.95 lambda* is below the unbiased temperature); Prop. 5.1's takes
    # 1/min(K, d) for 1/K (math.md section 4: centroids of a tight frame).
    unbiased = theory.unbiased_temperature(0.1, n_clusters=5)
    capped = 0.95 * theory.lambda_star(0.1, n_clusters=5)
    assert capped < unbiased
    assert theory.auto_temperature(0.1, np.inf, n_clusters=5, n_features=3) == pytest.approx(
        capped, rel=1e-14
    )
    assert (
        0.0
        < theory.auto_temperature(0.1, 10, n_clusters=5, n_features=3)
        <= theory.unbiased_temperature(0.1, 10, n_clusters=5)
    )
    assert theory.in_context_unbiased_temperature(
        0.0, 4, n_features=3, n_clusters=5
    ) == pytest.approx((4 / 5) / (1 + 3 / 3))


def test_pgd_objective_never_rises_above_lambda_star(global_random_seed):
    # At 3 lambda* the default step, fixed from the start's ||H||_2, met a
    # larger curvature on the way and cycled between two objectives
    # (1.0579 and 1.0682 from this start) without converging.
    C = np.eye(2, 10)
    lam = 3 * float(theory.lambda_star(0.3))
    for start in (0, global_random_seed):
        H = np.random.RandomState(start).standard_normal((2, 10))
        run = theory.population_pgd(H, C, 0.3, lam, max_iter=5000)
        rises = np.diff(run.objective)
        # Rises within the rounding of the terms, of magnitude E||X||^2 = 1 + d sigma^2.
        assert np.all(rises <= 1e-12 * (np.abs(run.objective[:-1]) + 1.9)), rises.max()
        assert run.converged
        fixed = theory.population_pgd(H, C, 0.3, lam, max_iter=5000, step_size=0.05)
        np.testing.assert_allclose(run.objective[-1], fixed.objective[-1], rtol=1e-8)


@pytest.mark.parametrize("weight", [0.5, 0.8])
@pytest.mark.parametrize("noise", [0.2, 0.6])
def test_one_head_lowers_the_risk_by_f_of_its_second_moment(weight, noise):
    # math.md section 3, "The regulariser's strength": at L = inf a head on
    # an eigendirection of M with eigenvalue m lowers the risk from
    # E||X||^2 = 1 + d sigma^2 by f(m) = a m^2 (2 - a m), a = lambda (one
    # head): on a centroid m = w + sigma^2, off the span m = sigma^2.
    d, lam = 6, 0.7
    C, w = np.eye(2, d), np.array([weight, 1 - weight])
    for head, m in ((C[0], weight + noise**2), (np.eye(d)[3], noise**2)):
        risk = theory.population_risk(head[None], C, noise, lam, np.inf, weights=w)
        np.testing.assert_allclose(risk, 1 + d * noise**2 - lam * m**2 * (2 - lam * m), rtol=1e-12)


def test_pgd_validates_its_parameters():
    C = np.eye(2, 4)
    with pytest.raises(ValueError, match="step_size"):
        theory.population_pgd(C, C, 0.3, 0.5, 10, step_size=0.0)
    with pytest.raises(ValueError, match="reg_strength"):
        theory.population_pgd(C, C, 0.3, 0.5, 10, reg_strength=-1.0)
    with pytest.raises(ValueError, match="sequence_length"):
        theory.population_pgd(C, C, 0.3, 0.5, 0)
    with pytest.raises(ValueError, match="noise"):
        theory.population_risk(C, C, -0.3, 0.5, 10)
    with pytest.raises(ValueError, match="heads0 must have no zero row"):
        theory.population_pgd(np.eye(2, 4) * [[1.0], [0.0]], C, 0.3, 0.5, 10)
    for name in ("reg_strength", "step_size"):
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            theory.population_pgd(C, C, 0.3, 0.5, 10, **{name: np.inf})
    for tol in (-1.0, np.nan):
        with pytest.raises(ValueError, match="tol must be"):
            theory.population_pgd(C, C, 0.3, 0.5, 10, tol=tol)


# ---------------------------------------------------------------------------
# One step of population PGD against the NumPy twin (reference.population_pgd_steps).
# ---------------------------------------------------------------------------


def _pgd_problem(seed, n_heads=2, n_clusters=2):
    # d = n_heads + n_clusters: the span of heads and centroids, where
    # population_pgd runs, is all of R^d, so that ||H||_2 is the same there.
    rng = np.random.default_rng(seed)
    heads, C, w = random_problem(rng, n_heads, n_clusters, d=n_heads + n_clusters)
    return heads / np.linalg.norm(heads, axis=1, keepdims=True), C, w


@pytest.mark.parametrize("rho", [0.0, 0.3])
@pytest.mark.parametrize("n_heads, n_clusters", [(2, 2), (3, 2)])
def test_pgd_default_step_is_half_the_inverse_curvature(
    rho, n_heads, n_clusters, global_random_seed
):
    # gamma = 0.5 / (||H||_2 + 2 rho ||N||_2) at the start (population_pgd's
    # docstring), one step and its objective, against the NumPy twin at L = inf.
    heads, C, w = _pgd_problem(global_random_seed, n_heads, n_clusters)
    noise, lam = 0.4, 0.3
    run = theory.population_pgd(heads, C, noise, lam, reg_strength=rho, weights=w, max_iter=1)
    U, _, values = population_pgd_steps(heads.T, C, w, noise, lam, 1, rho=rho)
    assert run.n_iter == 1
    # The default step descends here: no halving (the test below checks that).
    assert values[1] < values[0]
    np.testing.assert_allclose(run.objective, values, rtol=1e-10)
    np.testing.assert_allclose(run.heads, U.T, rtol=1e-10, atol=1e-13)


def _pgd_against_twin(heads, C, w, step, rho, n_steps=3):
    noise, lam = 0.3, 1.5
    run = theory.population_pgd(
        heads, C, noise, lam, reg_strength=rho, weights=w, step_size=step, max_iter=n_steps, tol=0.0
    )
    U, gamma, values = population_pgd_steps(heads.T, C, w, noise, lam, n_steps, rho=rho, step=step)
    np.testing.assert_allclose(run.objective, values, rtol=1e-10)
    np.testing.assert_allclose(run.heads, U.T, rtol=1e-10, atol=1e-12)
    return gamma


@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_pgd_halves_a_step_that_raises_the_objective(rho):
    # A step that raises the objective by more than the rounding allowance
    # (1e-12 of |objective| + E||X||^2) is halved until it does not, and the
    # halved step stays for the steps after: three steps against the twin,
    # from a step long enough to be halved several times.
    assert _pgd_against_twin(*_pgd_problem(3), 200.0, rho) <= 200.0 / 8


def test_pgd_halves_a_step_that_barely_raises_the_objective():
    # Near a minimiser a step twice the default overshoots and raises the
    # objective by a few 1e-8 of it: above the rounding allowance, so it is
    # halved all the same (six times here).
    heads, C, w = _pgd_problem(3)
    best = theory.population_pgd(heads, C, 0.3, 1.5, weights=w, max_iter=5000)
    assert best.converged
    start = best.heads + 1e-4 * np.random.default_rng(0).standard_normal(best.heads.shape)
    step = 2.0 * population_pgd_steps(start.T, C, w, 0.3, 1.5, 0)[1]
    assert _pgd_against_twin(start, C, w, step, 0.0) <= step / 8


@settings(max_examples=10, deadline=None)
@given(
    step=st.floats(0.01, 200.0),
    rho=st.sampled_from([0.0, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_pgd_steps_with_any_step_size_are_the_twins(step, rho, seed):
    _pgd_against_twin(*_pgd_problem(seed), step, rho)


_C, _BIG = np.eye(2, 4), 1e200
_BEYOND_RANGE = {
    "auto_temperature": lambda: theory.auto_temperature(_BIG, 10, n_clusters=2, n_features=4),
    "unbiased_temperature": lambda: theory.unbiased_temperature(_BIG, 10, n_clusters=2),
    "in_context_unbiased_temperature": lambda: theory.in_context_unbiased_temperature(
        _BIG, 10, n_features=4
    ),
    "population_risk": lambda: theory.population_risk(_C, _C, 0.3, _BIG, 10),
    "population_risk_gradient": lambda: theory.population_risk_gradient(_C, _C, _BIG, 0.5, 10),
    "pairwise_regularizer": lambda: theory.pairwise_regularizer(_C, _C, _BIG),
    "manifold_optimal_alignment": lambda: theory.manifold_optimal_alignment(
        0.3, _BIG, 10, n_features=4
    ),
    "lambda_star": lambda: theory.lambda_star(_BIG, 10, n_features=4),
    "quantizer_risk": lambda: theory.quantizer_risk(_BIG, n_features=4),
    "oracle_risk": lambda: theory.oracle_risk(_BIG, 0.5, 10, n_features=4),
    "oracle_conditional_variance": lambda: theory.oracle_conditional_variance(
        0.3, _BIG, 10, n_features=4
    ),
    "in_context_optimal_temperature": lambda: theory.in_context_optimal_temperature(
        _BIG, n_features=4
    ),
    "population_pgd": lambda: theory.population_pgd(_C, _C, 0.3, _BIG, 10, max_iter=3),
}


@pytest.mark.parametrize("call", list(_BEYOND_RANGE.values()), ids=list(_BEYOND_RANGE))
def test_a_value_beyond_float64_raises_one_clear_error(call):
    # A noise or temperature of 1e200 squares beyond float64. These returned
    # NaN, 0 or inf with NumPy's RuntimeWarnings, or raised Python's
    # OverflowError (34, 'Numerical result out of range').
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match="leaves float64's range"):
            call()


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: theory.unbiased_temperature(_BIG), "noise"),
        (lambda: theory.population_risk(_C, _C, 0.3, _BIG, 10), "temperature"),
        (
            lambda: theory.auto_temperature(0.3, 1e308, n_clusters=2, n_features=4),
            "sequence_length",
        ),
        (lambda: theory.auto_temperature(0.3, 10, n_clusters=1e308, n_features=4), "n_clusters"),
        (lambda: theory.in_context_risk(0.3, 1.0, 10, n_features=1e308), "n_features"),
        (lambda: theory.oracle_risk(1e300, 1e200, 10, n_features=4), "noise or temperature"),
    ],
    ids=["noise", "temperature", "sequence_length", "n_clusters", "n_features", "two"],
)
def test_the_range_error_names_the_arguments_beyond_range(call, named):
    # The advice named the scales the function takes whatever was given: a
    # sequence_length, n_clusters or n_features of 1e308 was told to lower
    # the noise. It names the arguments given beyond 1e30, the largest first.
    with pytest.raises(FloatingPointError, match=f"lower the magnitude of {named}.$"):
        call()


def test_the_range_error_names_the_scales_where_no_argument_is_large():
    # Without an argument beyond 1e30, the scales the function takes
    # (unbiased_temperature takes neither a temperature nor heads).
    @theory._in_float64_range
    def overflows(heads, noise, temperature, n_features):
        return np.float64(1e300) * np.float64(1e300) * noise

    with pytest.raises(
        FloatingPointError, match="lower the magnitude of noise, temperature or heads.$"
    ):
        overflows(np.eye(2), 0.3, 1.0, 4)

    @theory._in_float64_range
    def overflows_too(noise, sequence_length):
        return np.float64(1e300) * np.float64(1e300) * noise

    with pytest.raises(FloatingPointError, match="lower the magnitude of noise.$"):
        overflows_too(0.3, 10)


def test_the_clamp_at_zero_takes_rounding_only():
    # Mean squares and variances are set to 0 only within their terms'
    # rounding: a value further below 0 (a wrong formula) stays negative.
    assert theory._mean_square(1.0, 10.0, 1.0, 1.0) == -18.0
    assert theory._nonnegative(1.0, -1.0 - 1e-15) == 0.0
    assert theory._nonnegative(1.0, -1.0 - 1e-9) < 0.0
    assert theory._nonnegative(3.0, -1.0) == 2.0


def test_auto_temperature_takes_an_eigensolvers_rounding_below_zero():
    # eigvalsh of a rank-deficient moment gives zeros a few epsilon below 0:
    # they were refused as negative.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 12))
    eig = np.sort(np.linalg.eigvalsh(X.T @ X / 5))[::-1]
    eig[-1] = -2e-16 * eig[0]
    exact = np.maximum(eig, 0.0)
    kwargs = {"n_clusters": 2, "n_features": 12}
    assert theory.auto_temperature(0.3, 10, eigenvalues=eig, **kwargs) == theory.auto_temperature(
        0.3, 10, eigenvalues=exact, **kwargs
    )


def test_a_sequence_length_beyond_float64_is_the_infinite_limit():
    # An integer L past float64's range was refused as "sequence_length
    # must be >= 1 or np.inf" (its conversion overflowed).
    assert theory.unbiased_temperature(0.3, 10**400) == theory.unbiased_temperature(0.3, np.inf)
