"""Tests of attention_cluster.metrics: the centroid distance (properties and
exhaustive search) and the error of the labelling rule (Monte Carlo).

Monte Carlo error rates are checked within 5 binomial standard errors (false
alarm below 1e-6), with enough samples that 5 standard errors are at most
2.5% of the checked rate: a formula off by 5% fails.
"""

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.stats import norm

from attention_cluster import AttentionClustering, metrics
from attention_cluster._scale import spike_overlap
from attention_cluster.datasets import make_centroids, make_mixture
from attention_cluster.metrics import (
    bayes_error,
    centroid_distance,
    class_means_distance,
    information_limit,
    interference,
    match_centroids,
    spectral_visibility,
)

# ---------------------------------------------------------------------------
# centroid_distance
# ---------------------------------------------------------------------------


def brute_force_distance(estimated, true):
    """min over all injective assignments and signs, by enumeration."""
    K = true.shape[0]
    best = np.inf
    for perm in itertools.permutations(range(estimated.shape[0]), K):
        chosen = estimated[list(perm)]
        cost = sum(
            min(np.sum((chosen[h] - true[h]) ** 2), np.sum((chosen[h] + true[h]) ** 2))
            for h in range(K)
        )
        best = min(best, cost)
    return best


def signed_permutation(data, a):
    """Apply a random permutation and random signs, drawn by Hypothesis."""
    K = a.shape[0]
    perm = data.draw(st.permutations(range(K)))
    signs = np.array(data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=K, max_size=K)))
    return a[list(perm)] * signs[:, None]


def canonical(a):
    """Rows up to sign (first nonzero entry positive), sorted."""
    rows = []
    for row in a:
        nz = np.flatnonzero(row)
        rows.append(tuple(row * (np.sign(row[nz[0]]) if nz.size else 1.0)))
    return sorted(rows)


# Small integer entries make every distance exact in floating point.
small_ints = hnp.arrays(
    np.float64, st.tuples(st.integers(1, 4), st.integers(1, 4)), elements=st.integers(-2, 2)
)


@settings(max_examples=200, deadline=None)
@given(U=small_ints, data=st.data())
def test_distance_is_zero_iff_equal_up_to_sign_and_permutation(U, data):
    V = signed_permutation(data, U)
    if data.draw(st.booleans()):  # sometimes change one entry
        i = data.draw(st.integers(0, V.shape[0] - 1))
        j = data.draw(st.integers(0, V.shape[1] - 1))
        V[i, j] += data.draw(st.sampled_from([-1.0, 1.0]))
    assert (centroid_distance(V, U) == 0.0) == (canonical(V) == canonical(U))


@settings(max_examples=200, deadline=None)
@given(U=small_ints, data=st.data())
def test_distance_invariances_and_symmetry(U, data):
    V = data.draw(hnp.arrays(np.float64, U.shape, elements=st.integers(-2, 2)))
    d = centroid_distance(V, U)
    assert d >= 0.0
    assert centroid_distance(signed_permutation(data, V), U) == d
    assert centroid_distance(V, signed_permutation(data, U)) == d
    assert centroid_distance(U, V) == d  # symmetric for equal numbers of rows
    assert d == brute_force_distance(V, U)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), extra=st.integers(0, 2))
def test_distance_matches_exhaustive_search_with_extra_heads(seed, extra):
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((3, 4))
    estimated = rng.standard_normal((3 + extra, 4))
    assert centroid_distance(estimated, true) == pytest.approx(
        brute_force_distance(estimated, true), abs=1e-12
    )


def test_match_centroids_reports_the_optimal_assignment():
    true = np.eye(3, 5)
    estimated = np.array(
        [[0, 0, -1.1, 0, 0], [0.9, 0, 0, 0, 0], [0, 1, 0, 0, 0.1], [0, 0, 0, 1, 0]]
    )
    perm, signs, cost = match_centroids(estimated, true)
    assert perm.tolist() == [1, 2, 0] and signs.tolist() == [1.0, 1.0, -1.0]
    np.testing.assert_allclose(cost, [0.01, 0.01, 0.01])
    with pytest.raises(ValueError, match="at least as many"):
        match_centroids(estimated[:2], true)
    with pytest.raises(ValueError, match="same number of features"):
        match_centroids(estimated[:, :4], true)
    with pytest.raises(ValueError, match="2-D"):
        centroid_distance(np.zeros(3), true)


# ---------------------------------------------------------------------------
# Error of the labelling rule argmax_c <x, mu_c>
# ---------------------------------------------------------------------------


def monte_carlo_error(centroids, heads, noise, weights, n, seed):
    rng = np.random.default_rng(seed)
    K, d = centroids.shape
    z = rng.choice(K, size=n, p=weights)
    X = centroids[z] + noise * rng.standard_normal((n, d))
    return np.mean(np.argmax(X @ heads.T, axis=1) != z)


def assert_rate(rate, n, exact):
    se = np.sqrt(exact * (1 - exact) / n)
    assert 5 * se <= 0.025 * exact, "Monte Carlo too small"
    assert abs(rate - exact) <= 5 * se


def test_interference_matches_the_paper():
    # math.md section 1: I(0.3) ~ 0.0092, I(1) ~ 0.240.
    assert interference(0.3) == pytest.approx(0.0092, abs=5e-5)
    assert interference(1.0) == pytest.approx(0.2398, abs=5e-5)
    sigma = np.array([0.1, 0.3, 1.0, 3.0])
    np.testing.assert_allclose(interference(sigma), norm.cdf(-1 / (np.sqrt(2) * sigma)), rtol=1e-14)
    assert interference(0.0) == 0.0


@pytest.mark.parametrize("K", [2, 3, 5])
def test_interference_of_subnormal_noise_is_zero_as_bayes_error_says(K):
    # 1 / sigma overflowed: K > 2 raised SciPy's "Infinity inputs cannot be
    # used with break points", K = 2 warned of an overflow.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(interference(np.array([1e-309, 1e-310, 0.0]), K), 0.0)
        assert interference(1e-310, K) == bayes_error(np.eye(K, K + 1), 1e-310) == 0.0


@pytest.mark.parametrize("sigma", [0.05, 0.1, 0.3, 1.0, 5.0])
def test_quadrature_reproduces_the_two_cluster_closed_form(sigma):
    # The 1-D integral used for K > 2, run with K = 2 (one competitor), keeps
    # its relative accuracy down to error rates of 1e-45.
    value = metrics._error_independent(np.array([1.0]), sigma, np.array([sigma]))
    assert value == pytest.approx(norm.cdf(-1 / (np.sqrt(2) * sigma)), rel=1e-8)


@pytest.mark.parametrize("K, sigma", [(3, 0.5), (3, 1.0), (5, 0.7)])
def test_interference_k_clusters_against_monte_carlo(K, sigma):
    exact = interference(sigma, K)
    rate = monte_carlo_error(np.eye(K, K + 1), np.eye(K, K + 1), sigma, None, 400_000, K)
    assert_rate(rate, 400_000, exact)
    assert bayes_error(np.eye(K, K + 2), sigma) == pytest.approx(exact, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(K=st.integers(2, 6), sigma=st.floats(0.05, 20.0))
def test_interference_grows_with_noise_to_chance_level(K, sigma):
    low, high = interference(np.array([sigma, 1.1 * sigma]), K)
    assert 0.0 < low < high < (K - 1) / K
    # For small sigma a union bound over the K - 1 competitors is tight.
    assert interference(0.1, K) == pytest.approx((K - 1) * interference(0.1), rel=1e-6)


def test_bayes_error_with_estimated_heads_rebuttal_formula():
    # Authors' answer W3: Phi(mu*_1 . kappa / s) + Phi(-mu*_0 . kappa / s),
    # kappa = (mu_0 - mu_1) / ||mu_0 - mu_1||, the sum of the conditional errors.
    rng = np.random.default_rng(1)
    C = np.eye(2, 6)
    heads = C + 0.4 * rng.standard_normal((2, 6))
    sigma = 0.6
    kappa = (heads[0] - heads[1]) / np.linalg.norm(heads[0] - heads[1])
    rebuttal = norm.cdf(C[1] @ kappa / sigma) + norm.cdf(-(C[0] @ kappa) / sigma)
    assert bayes_error(C, sigma, heads=heads) == pytest.approx(rebuttal / 2, rel=1e-12)
    w = np.array([0.3, 0.7])
    exact = bayes_error(C, sigma, w, heads)
    assert_rate(monte_carlo_error(C, heads, sigma, w, 400_000, 2), 400_000, exact)


def test_bayes_error_correlated_heads_against_monte_carlo():
    # K = 3 with non-orthogonal heads: the multivariate normal orthant path.
    rng = np.random.default_rng(3)
    C = np.eye(3, 5)
    heads = C + 0.3 * rng.standard_normal((3, 5))
    w = np.array([0.2, 0.3, 0.5])
    exact = bayes_error(C, 0.7, w, heads)
    assert_rate(monte_carlo_error(C, heads, 0.7, w, 400_000, 4), 400_000, exact)
    assert bayes_error(C, 0.7, w, heads) == exact  # reproducible


def test_bayes_error_degenerate_cases():
    C = np.eye(3, 4)
    assert bayes_error(C, 0.0) == 0.0
    # sigma = 0: a cluster whose centroid scores higher on another head is lost.
    heads = np.array([[1.0, 0, 0, 0], [1.0, 0.5, 0, 0], [0, 0, 1.0, 0]])
    assert bayes_error(C, 0.0, heads=heads) == pytest.approx(1 / 3)
    # Two equal heads tie forever: both clusters are always wrong.
    assert bayes_error(C, 0.5, heads=np.array([C[0], C[0], C[2]])) >= 2 / 3
    assert bayes_error(C[:1], 1.0) == 0.0
    with pytest.raises(ValueError, match="heads must have the shape"):
        bayes_error(C, 0.3, heads=C[:2])
    with pytest.raises(ValueError, match="weights"):
        bayes_error(C, 0.3, weights=[0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="noise"):
        bayes_error(C, -1.0)
    with pytest.raises(ValueError, match="n_clusters"):
        interference(0.3, 0)


# ---------------------------------------------------------------------------
# information_limit
# ---------------------------------------------------------------------------


def test_information_limit_is_the_spread_of_the_maximum_likelihood_and_of_the_class_means():
    # Over 150 samples of the mixture, the mean distance of the default fit
    # (whose EM ends at the maximum likelihood) and of the class means match
    # the two limits within 4 standard errors of the mean (about 11% here):
    # a limit off by a factor (d - 1) / d or 2 fails.
    d, noise, n = 10, 1.0, 20_000
    efficient, floor = information_limit(np.eye(d)[:2], noise, n, n_draws=300_000)
    fitted, means = [], []
    for seed in range(150):
        X, y, C = make_mixture(n, d, 2, noise=noise, random_state=seed)
        fit = AttentionClustering(2, random_state=0).fit(X)
        fitted.append(centroid_distance(fit.cluster_centers_, C))
        means.append(class_means_distance(X, y, C))
    for values, limit in ((fitted, efficient), (means, floor)):
        values = np.asarray(values)
        se = values.std(ddof=1) / np.sqrt(values.size)
        assert abs(values.mean() - limit) <= 4 * se
    assert efficient / floor > 1.9  # sigma = 1: the labels are worth about 2x


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), K=st.integers(2, 3), noise=st.floats(0.3, 1.5))
def test_information_limit_ignores_a_rotation_and_a_relabelling(seed, K, noise):
    rng = np.random.default_rng(seed)
    C = np.eye(4)[:K]
    Q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    weights = rng.dirichlet(np.full(K, 5.0))
    order = rng.permutation(K)
    base = information_limit(C, noise, 1000, weights, n_draws=400_000)
    moved = information_limit((C @ Q)[order], noise, 1000, weights[order], n_draws=400_000)
    # The class means' limit is exact; the efficient one is a Monte Carlo
    # mean over other draws. Its relative error grows as a weight shrinks
    # (a light component's information comes from few draws): with weights
    # 0.75, 0.046, 0.20 at sigma = 0.5 it was 2.0% at 1e5 draws (20 seeds),
    # which made the two estimates' 5% agreement a 1.8-sigma test (it failed
    # at seed 531); at 4e5 draws it is 0.55% (6 seeds).
    assert moved[1] == pytest.approx(base[1], rel=1e-12)
    assert moved[0] == pytest.approx(base[0], rel=0.05)
    assert base[0] >= base[1] * (1 - 0.02)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("which", ["estimated", "true"])
def test_centroid_distance_names_non_finite_centroids(which, bad):
    args = {"estimated": np.eye(3), "true": np.eye(3)}
    args[which] = np.where(np.eye(3) > 0, bad, 0.0)
    with pytest.raises(ValueError, match=f"{which} must be finite"):
        centroid_distance(**args)


@pytest.mark.parametrize(
    "estimated, true, match",
    [
        (np.eye(2) + 1j, np.eye(2), "Complex data not supported: estimated"),
        (np.eye(2), np.eye(2) - 1j, "Complex data not supported: true"),
        (np.empty((0, 3)), np.empty((0, 3)), "estimated must be a non-empty 2-D array"),
        (np.empty((2, 0)), np.empty((2, 0)), "estimated must be a non-empty 2-D array"),
    ],
    ids=["complex-estimated", "complex-true", "no-centroid", "no-feature"],
)
def test_centroid_distance_refuses_what_has_no_distance(estimated, true, match):
    with pytest.raises(ValueError, match=match):
        centroid_distance(estimated, true)


@pytest.mark.parametrize(
    "call, match",
    [
        # NumPy reads the text "1" as 1.0 and True as 1.0: both are refused.
        (
            lambda: centroid_distance(np.array([["1", "0"]]), np.eye(1, 2)),
            "estimated must be a real",
        ),
        (lambda: centroid_distance(np.eye(2, dtype=bool), np.eye(2)), "estimated must be a real"),
        (lambda: metrics.bayes_error(np.eye(2), 0.3, weights=["0.5", "0.5"]), "weights must be"),
        (lambda: metrics.bayes_error(np.eye(2), "0.3"), "noise must be a finite number"),
        (lambda: metrics.bayes_error(np.eye(2), [True]), "noise must be a finite number"),
    ],
    ids=["text-centroids", "bool-centroids", "text-weights", "text-noise", "bool-array-noise"],
)
def test_metrics_refuse_text_and_bools_as_numbers(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("scale", [1e-200, 1.0, 1e160, 1e300])
def test_centroid_distance_of_equal_centroids_is_zero_at_any_magnitude(scale, global_random_seed):
    # The expansion ||a||^2 + ||b||^2 - 2 |<a, b>| left rounding of the norms'
    # size (2.9e-15 at K = 20, d = 1536), and squares beyond float64 at 1e160.
    C = scale * make_centroids(20, 1536, random_state=global_random_seed)
    assert centroid_distance(C, C) == 0.0
    assert centroid_distance(-C[::-1], C) == 0.0


def test_centroid_distance_is_the_sum_of_the_matched_squared_differences(global_random_seed):
    rng = np.random.default_rng(global_random_seed)
    true, estimated = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    perm, signs, cost = match_centroids(estimated, true)
    np.testing.assert_allclose(
        cost, np.sum((signs[:, None] * estimated[perm] - true) ** 2, axis=1), rtol=1e-15
    )
    # Scaled by 2^-600: the same match, the costs scaled by its square.
    small = match_centroids(estimated * 2.0**-600, true * 2.0**-600)
    np.testing.assert_array_equal(small[0], perm)
    np.testing.assert_array_equal(small[2], cost * 2.0**-1200)


@pytest.mark.parametrize(
    "X, labels, match",
    [
        (None, "out of range", r"labels must be in 0 \.\. 1"),
        (None, "short", "one entry per row of X"),
        (None, "one class", r"no row has the labels \[1\]"),
        (None, "halves", "labels must be integers"),
        (None, "infinite", r"labels must be integers in 0 \.\. 1, got inf"),
        (None, "huge", r"labels must be in 0 \.\. 1 \(one per centroid\), got 1e\+20"),
        (None, "negative", r"labels must be in 0 \.\. 1 \(one per centroid\), got -1"),
        ("wide", None, "X has 3 features and centroids 5"),
        ("inf", None, "infinity"),
        ("complex", None, "Complex data not supported"),
    ],
    ids=[
        "out-of-range",
        "short",
        "empty-class",
        "non-integer",
        "infinite-label",
        "huge-label",
        "negative-label",
        "width",
        "inf",
        "complex",
    ],
)
def test_class_means_distance_refuses_labels_and_rows_it_cannot_average(X, labels, match):
    # A label outside the range dropped its rows silently; an empty class gave
    # "Mean of empty slice" and an error about an argument it does not take;
    # labels of inf or 1e20 passed as integers, then failed in the cast to
    # intp with a warning and a NumPy error about a "'list' argument".
    X0, y, C = make_mixture(200, 5, 2, noise=0.3, random_state=0)
    rows = {
        None: X0,
        "wide": X0[:, :3],
        "inf": np.where(np.arange(5) == 0, np.inf, X0),
        "complex": X0 + 1j,
    }[X]
    y2 = {
        None: y,
        "out of range": np.where(np.arange(200) < 60, 2, y),
        "short": y[:-1],
        "one class": np.zeros_like(y),
        "halves": y + 0.5,
        "infinite": np.where(np.arange(200) == 3, np.inf, y),
        "huge": np.where(np.arange(200) == 3, 1e20, y),
        "negative": np.where(np.arange(200) == 3, -1, y),
    }[labels]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=match):
            class_means_distance(rows, y2, C)


def test_bayes_error_of_float32_orthonormal_heads_takes_the_independent_path():
    # Rounded to float32, orthonormal centroids are correlated by about 1e-8,
    # which took the multivariate normal path (8.5 s at K = 15, minutes at 30):
    # the same error to 1e-8, the integral's accuracy.
    C = make_centroids(15, 40, random_state=0)
    exact = bayes_error(C, 0.5)
    rounded = bayes_error(C.astype(np.float32), 0.5)
    np.testing.assert_allclose(rounded, exact, rtol=1e-6)


def test_spectral_visibility_beyond_float64_is_infinite_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(spectral_visibility(np.eye(2), 1e-200, 10), np.inf)


def test_bayes_error_takes_one_noise():
    with pytest.raises(ValueError, match="noise must be one number"):
        bayes_error(np.eye(2), [[0.3]])


@pytest.mark.parametrize(
    "centroids, n_draws, match",
    [
        (np.eye(2, 4), 5, "n_draws=5 is below the p=9 parameters"),
        # Said before the draws (10^12 of them would take hours): it came
        # after the whole Monte Carlo run.
        ([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], 10**12, "centroids 0 and 2 coincide"),
    ],
    ids=["few-draws", "equal-centroids"],
)
def test_information_limit_refuses_a_singular_information(centroids, n_draws, match):
    with pytest.raises(ValueError, match=match):
        information_limit(centroids, 1.0, 100, n_draws=n_draws)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"centroids": [[1.0, 0.0], [0.0, 2.0]]}, "common norm.*norms range from 1 to 2"),
        ({"noise": 0.0}, "noise must be positive"),
        ({"noise": [0.5, 0.6]}, "noise must be one number"),
        ({"weights": [1.0, 0.0]}, "weights must all be positive"),
        ({"centroids": [1.0, 0.0]}, "2-D array"),
    ],
)
def test_information_limit_rejects_what_its_model_excludes(kwargs, message):
    args = {"centroids": np.eye(2), "noise": 0.5, "n_samples": 100, **kwargs}
    with pytest.raises(ValueError, match=message):
        information_limit(**args)


@pytest.mark.parametrize("centroids, noise", [(1.0, 1e-300), (1e300, 0.3), (1.0, 1e160)])
def test_information_limit_refuses_a_ratio_beyond_its_scores_range(centroids, noise):
    # sigma / r of 1e-300 or 1e160: a ZeroDivisionError or a LinAlgError
    # ("Eigenvalues did not converge") from inside, with RuntimeWarnings.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="noise / norm of the centroids"):
            information_limit(centroids * np.eye(2), noise, 1000, n_draws=20_000)


def test_information_limit_takes_close_float32_centroids():
    # Two centroids 0.004 rad apart in float32, their norms 1e-5 apart
    # (within the common norm's tolerance): the check for coinciding
    # centroids divided both by the first norm and called them equal.
    angle = 0.004
    C = np.array([[1.0, 0.0, 0.0], [np.cos(angle), np.sin(angle), 0.0]]) * [[1.0], [1.0 + 1e-5]]
    efficient, floor = information_limit(C.astype(np.float32), 1e-3, 1000, n_draws=20_000)
    assert 0.0 < floor <= efficient


def test_information_limit_takes_float32_centroids():
    # Rounded to float32, unit centroids have norms some 2e-8 apart, which the
    # float64 tolerance 1e-8 refused as "not of a common norm" (bayes_error
    # took them): made ones, and the centres of a fit on float32 rows.
    C = make_centroids(3, 6, random_state=0)
    rounded = information_limit(C.astype(np.float32), 0.5, 100, n_draws=20_000)
    # The same draws: the limits move by the centroids' rounding only.
    np.testing.assert_allclose(rounded, information_limit(C, 0.5, 100, n_draws=20_000), rtol=1e-6)
    X, _, _ = make_mixture(2000, 6, 3, noise=0.3, random_state=0)
    centres = AttentionClustering(n_clusters=3, random_state=0).fit(X.astype(np.float32))
    fitted = centres.cluster_centers_
    assert fitted.dtype == np.float32
    unit = fitted / np.linalg.norm(fitted.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(
        information_limit(fitted, 0.3, 2000, n_draws=20_000),
        information_limit(unit, 0.3, 2000, n_draws=20_000),
        rtol=1e-6,
    )


def test_information_limit_names_the_norms_that_differ():
    # The float64 tolerance stays 1e-8, and the message shows the norms.
    C = np.diag([1.0, 1.0 + 2e-8])
    with pytest.raises(ValueError, match=r"norms range from 1 to 1\.00000002, .* 1\.0e-08"):
        information_limit(C, 0.5, 100)


def test_information_limit_holds_float16_centroids_to_their_rounding():
    # 100 epsilon of float16 is 0.098: norms 9% apart were taken for one, and
    # the centroids over the first norm for unit directions.
    C = np.diag([1.0, 1.09]).astype(np.float16)
    with pytest.raises(
        ValueError, match=r"norms range from 1 to 1\.08984375, .* 3\.9e-03 for float16"
    ):
        information_limit(C, 0.5, 100, n_draws=20_000)
    # Equal float16 norms are taken, with the float64 centroids' limits.
    exact = np.eye(2, 3)
    np.testing.assert_array_equal(
        information_limit(exact.astype(np.float16), 0.5, 100, n_draws=20_000),
        information_limit(exact, 0.5, 100, n_draws=20_000),
    )
    # ... and unit centroids rounded to float16, their norms some 2e-4 apart
    # (100 epsilon of float32 refused them).
    drawn = make_centroids(3, 10, random_state=0)
    half = drawn.astype(np.float16)
    assert np.ptp(np.linalg.norm(half.astype(np.float64), axis=1)) > 1e-4
    assert information_limit(half, 0.5, 100, n_draws=20_000)[0] == pytest.approx(
        information_limit(drawn, 0.5, 100, n_draws=20_000)[0], rel=0.05
    )


def test_information_limit_names_a_weight_too_light_for_the_draws():
    # A cluster of weight 1e-9 gets no draw of 20000: its directions are not
    # informed, and the message says what to draw.
    with pytest.raises(ValueError, match=r"singular.* 1 / min\(weights\) = 1e\+09"):
        information_limit(np.eye(2, 3), 0.5, 100, weights=[1e-9, 1 - 1e-9], n_draws=20_000)


@pytest.mark.parametrize("noise, quoted", [(0.3, 1.02), (1.0, 2.06)])
def test_information_limit_values_quoted_in_the_docs(noise, quoted):
    # math.md section 7 and the user guide quote these ratios for the
    # paper's d = 10, K = 2 (Monte Carlo error about 0.1% at 1e6 draws).
    efficient, floor = information_limit(np.eye(10)[:2], noise, 10**6)
    assert efficient / floor == pytest.approx(quoted, abs=0.01)


# ---------------------------------------------------------------------------
# spectral_visibility


def test_spectral_visibility_is_the_signals_spectrum_over_the_threshold():
    # NumPy reference: the d x d signal sum_k pi_k c_k c_k^T, decomposed,
    # over sigma^2 sqrt(d / n); for orthogonal centroids pi_k r_k^2 / (...).
    rng = np.random.default_rng(0)
    C, weights = rng.standard_normal((4, 7)), rng.dirichlet(np.ones(4))
    signal = np.linalg.eigvalsh(C.T @ np.diag(weights) @ C)[::-1][:4]
    expected = signal / (0.3**2 * np.sqrt(7 / 500))
    np.testing.assert_allclose(spectral_visibility(C, 0.3, 500, weights), expected, rtol=1e-10)
    orthogonal = spectral_visibility(2.0 * np.eye(7)[:3], 0.5, 700, [0.5, 0.3, 0.2])
    np.testing.assert_allclose(orthogonal, np.array([0.5, 0.3, 0.2]) * 4 / (0.25 * 0.1))
    # More clusters than features: at most d directions.
    assert spectral_visibility(np.eye(3)[[0, 1, 2, 0]], 0.5, 100).shape == (3,)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    K=st.integers(1, 4),
    scale=st.floats(0.01, 100.0),
)
def test_spectral_visibility_ignores_a_rotation_a_relabelling_and_a_scale(seed, K, scale):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((K, 5))
    Q = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    weights, order = rng.dirichlet(np.ones(K)), rng.permutation(K)
    base = spectral_visibility(C, 0.7, 300, weights)
    moved = spectral_visibility(scale * (C @ Q)[order], 0.7 * scale, 300, weights[order])
    np.testing.assert_allclose(moved, base, rtol=1e-8, atol=1e-12 * base[0])


@pytest.mark.parametrize("visibility", [0.5, 2.0], ids=["hidden", "shown"])
def test_spectral_visibility_tells_where_the_sample_spectrum_shows_the_clusters(visibility):
    # Monte Carlo of math.md section 7, "When the spectrum shows the
    # clusters": two orthogonal unit centroids, n = 8000 rows in d = 800
    # (gamma = 0.1), sigma set so that ell = visibility * sqrt(gamma). Shown:
    # the two top eigenvalues of the sample second moment at sigma^2 (1 +
    # ell)(1 + gamma / ell), apart from the bulk; hidden: at the bulk's edge
    # sigma^2 (1 + sqrt(gamma))^2. Finite-size deviations of the edge are
    # O(n^(-2/3)), a fraction of a percent here.
    n, d, K = 8000, 800, 2
    gamma = d / n
    ell = visibility * np.sqrt(gamma)
    sigma = np.sqrt((1.0 / K) / ell)
    C = np.eye(d)[:K]
    assert spectral_visibility(C, sigma, n)[-1] == pytest.approx(visibility)
    X, _, centroids = make_mixture(n, d, K, noise=sigma, random_state=0)
    values, vectors = np.linalg.eigh(X.T @ X / n)
    top, V = values[::-1][: K + 1], vectors[:, ::-1][:, :K]
    edge = sigma**2 * (1 + np.sqrt(gamma)) ** 2
    # The eigenvectors' squared cosine with the centroids' span, against
    # _scale.spike_overlap read from the spikes' mean eigenvalue (0 when
    # hidden). Both scatter by a few hundredths at n = 8000 (0.034 at most
    # over four seeds).
    cosine = np.linalg.norm(V.T @ centroids.T) ** 2 / K
    overlap = spike_overlap(np.mean(top[:K]), sigma**2, d, n)
    if visibility > 1:
        spike = sigma**2 * (1 + ell) * (1 + gamma / ell)
        np.testing.assert_allclose(top[:K], spike, rtol=0.02)
        assert top[K] == pytest.approx(edge, rel=0.02)
        assert top[K - 1] > 1.04 * edge
        expected = (1 - gamma / (ell * ell)) / (1 + gamma / ell)
        assert overlap == pytest.approx(expected, abs=0.05)
        assert cosine == pytest.approx(expected, abs=0.05)
    else:
        np.testing.assert_allclose(top, edge, rtol=0.02)
        assert overlap == 0.0 and cosine < 0.05


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"noise": 0.0}, "noise must be positive"),
        ({"noise": [0.5, 0.6]}, "noise must be one number"),
        ({"centroids": [1.0, 0.0]}, "2-D array"),
        ({"n_samples": 0}, "n_samples"),
    ],
)
def test_spectral_visibility_rejects_what_it_cannot_measure(kwargs, message):
    args = {"centroids": np.eye(2), "noise": 0.5, "n_samples": 100, **kwargs}
    with pytest.raises(ValueError, match=message):
        spectral_visibility(**args)


# ---------------------------------------------------------------------------
# Magnitude: every metric is a function of ratios of its arguments, so
# scaling them together changes nothing at any magnitude of float64 (the
# products on the way overflowed or underflowed from about 1e154 and 1e-154).

# Three clusters with unequal weights: orthonormal centroids (the independent
# path of bayes_error), the same with estimated heads (the orthant path), and
# two clusters (the closed form).
_BAYES_CASES = {
    "independent": (np.eye(3, 5), None, [0.5, 0.3, 0.2]),
    "correlated": (np.eye(3, 5), "perturbed", [0.5, 0.3, 0.2]),
    "two-clusters": (np.eye(2), None, None),
}


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from(list(_BAYES_CASES)),
    centroid_exponent=st.integers(-300, 300),
    head_exponent=st.integers(-300, 300),
)
@example(case="two-clusters", centroid_exponent=160, head_exponent=0)
@example(case="independent", centroid_exponent=-170, head_exponent=0)
@example(case="correlated", centroid_exponent=0, head_exponent=-170)
@example(case="correlated", centroid_exponent=160, head_exponent=160)
def test_bayes_error_ignores_the_scale_of_centroids_with_noise_and_of_heads(
    case, centroid_exponent, head_exponent
):
    # math.md section 5: the error depends on <mu*_c, kappa> / sigma and on
    # the heads' directions only. At 1e-170 it was 1.0, at 1e160 NaN or a
    # SciPy error, heads at 1e-170 raised "zero-size array".
    C, heads, weights = _BAYES_CASES[case]
    if heads is not None:
        heads = C + 0.3 * np.random.default_rng(0).standard_normal(C.shape)
    base = bayes_error(C, 0.5, weights, heads)
    c, h = 10.0**centroid_exponent, 10.0**head_exponent
    scaled = bayes_error(c * C, 0.5 * c, weights, None if heads is None else h * heads)
    assert scaled == pytest.approx(base, rel=1e-8)


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("sigma", [1e-30, 1e-300, 5e-324])
def test_bayes_error_at_a_noise_below_float64s_range_is_the_noiseless_error(K, sigma):
    # Margins of 1e300 standard deviations and more (the quadrature's points
    # overflowed): the error is that of sigma = 0, ties aside. 0 for the
    # centroids as heads, 1 / K with one head turned away, and for perturbed
    # heads what they get wrong without noise (at K = 3 one cluster, by a
    # margin of 4e-4).
    C = 1e300 * np.eye(K, K + 2)
    assert bayes_error(C, sigma) == 0.0
    away = np.eye(K, K + 2) * np.r_[np.ones(K - 1), -1.0][:, None]
    assert bayes_error(C, sigma, heads=away) == pytest.approx(1 / K, rel=1e-15)
    heads = np.eye(K, K + 2) + 0.6 * np.random.default_rng(K).standard_normal((K, K + 2))
    assert bayes_error(C, sigma, heads=heads) == bayes_error(C, 0.0, heads=heads)


@settings(max_examples=20, deadline=None)
@given(exponent=st.integers(-300, 307))
@example(exponent=160)
@example(exponent=-300)
@example(exponent=307)
def test_class_means_distance_ignores_the_scale_of_x(exponent):
    # The norms of the class means overflowed from 1e154 (distance 2) and
    # underflowed below 1e-154; at 1e307 the sums of the rows overflowed.
    X, y, C = make_mixture(2000, 10, 2, noise=0.3, random_state=0)
    base = class_means_distance(X, y, C)
    assert class_means_distance(X * 10.0**exponent, y, C) == pytest.approx(base, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(exponent=st.integers(-300, 300))
@example(exponent=1)
def test_class_means_distance_compares_directions_at_any_norm_of_the_centroids(exponent):
    # The class means are normalised; the centroids were not: at 10 C the
    # "floor" was 162 (the norms' mismatch), where information_limit takes
    # centroids of any common norm and names this floor.
    X, y, C = make_mixture(2000, 10, 2, noise=0.3, random_state=0)
    base = class_means_distance(X, y, C)
    scaled = class_means_distance(X * 10.0**exponent, y, C * 10.0**exponent)
    assert scaled == pytest.approx(base, rel=1e-9)
    with pytest.raises(ValueError, match=r"centroids \[1\] are zero"):
        class_means_distance(X, y, np.vstack([C[0], np.zeros(10)]))


@settings(max_examples=20, deadline=None)
@given(exponent=st.integers(-300, 300), K=st.integers(1, 4), seed=st.integers(0, 2**16))
@example(exponent=160, K=2, seed=0)
@example(exponent=-200, K=2, seed=0)
def test_spectral_visibility_ignores_the_scale_of_centroids_with_noise(exponent, K, seed):
    # NaN from 1e154 (the signal's products overflowed).
    rng = np.random.default_rng(seed)
    C, weights = rng.standard_normal((K, 5)), rng.dirichlet(np.ones(K))
    base = spectral_visibility(C, 0.7, 300, weights)
    c = 10.0**exponent
    scaled = spectral_visibility(c * C, 0.7 * c, 300, weights)
    np.testing.assert_allclose(scaled, base, rtol=1e-8, atol=1e-12 * base[0])


def test_spectral_visibility_of_a_missing_direction_is_zero_at_any_noise():
    # A zero eigenvalue of the signal over a noise of 5e-324 is 0, not 0 / 0.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        visible = spectral_visibility(np.eye(2)[[0, 0]], 5e-324, 10)
    np.testing.assert_array_equal(visible, [np.inf, 0.0])


@pytest.mark.parametrize("exponent", [-1000, -600, 600, 1000])
def test_information_limit_ignores_the_scale_of_centroids_with_noise(exponent):
    # Both limits depend on sigma / r only (D_floor = (d - 1) sigma^2 /
    # (n pi_k r^2); the directions are unit vectors). r = 1e-200 was refused
    # as "not of a common norm", r = 1e200 ran the Monte Carlo into a
    # LinAlgError. Scaled by a power of two, the draws are the same numbers
    # scaled: the limits are equal to the last bit.
    C, weights = np.eye(4)[:2], [0.3, 0.7]
    base = information_limit(C, 0.8, 100, weights, n_draws=5000)
    c = 2.0**exponent
    assert information_limit(c * C, 0.8 * c, 100, weights, n_draws=5000) == base


@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_information_limit_at_extreme_centroid_norms(scale):
    C = np.eye(10)[:2]
    base = information_limit(C, 1.0, 1000, n_draws=20_000)
    np.testing.assert_allclose(
        information_limit(C * scale, scale, 1000, n_draws=20_000), base, rtol=1e-9
    )


def test_centroid_distance_near_float64s_largest_is_exact_or_infinite():
    # Entries of 1e308 (above 2^1023) gave NaN; a distance beyond float64's
    # range is infinite, without a warning.
    C = np.array([[1e308, 0.0], [0.0, 1e308]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert centroid_distance(C, C) == 0.0
        assert centroid_distance(-C[::-1], C) == 0.0
        assert centroid_distance(C, 0.5 * C) == np.inf
        perm, signs, cost = match_centroids(-C[::-1], 0.999 * C)
    assert perm.tolist() == [1, 0] and signs.tolist() == [-1.0, -1.0]
    np.testing.assert_array_equal(cost, [np.inf, np.inf])  # (1e305)^2 each


@pytest.mark.parametrize("gamma", [0.01, 0.5, 4.0])
def test_spike_overlap_against_its_formula_and_at_its_limit(gamma):
    # math.md section 7, "When the spectrum shows the clusters": the ell
    # solving lambda / v = (1 + ell)(1 + gamma / ell), then the squared
    # cosine, against NumPy's roots of that quadratic; a ratio lambda / v
    # beyond float64 is the limit, 1 (it overflowed, with NumPy's warning).
    d, n = int(gamma * 1000), 1000
    for x in (1.5 * (1 + np.sqrt(gamma)) ** 2, 10.0, 1e3, 1e150):
        if not x > (1 + np.sqrt(gamma)) ** 2:
            continue
        ell = max(np.roots([1.0, 1.0 + gamma - x, gamma]).real)
        expected = (1 - gamma / (ell * ell)) / (1 + gamma / ell)
        assert spike_overlap(x * 2.0, 2.0, d, n) == pytest.approx(expected, rel=1e-9)
    assert spike_overlap(0.5 * (1 + np.sqrt(gamma)) ** 2, 1.0, d, n) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spike_overlap(np.float64(1e300), np.float64(1e-20), d, n) == 1.0
        # b^2 beyond float64, lambda / v not: ell is b.
        assert spike_overlap(np.float64(1e200), np.float64(1.0), d, n) == pytest.approx(1.0)


@pytest.mark.parametrize(("n_features", "signal"), [(250, 1.0), (500, 2.0)])
def test_spike_overlap_is_the_sample_eigenvectors_squared_cosine(n_features, signal):
    # math.md section 7, "When the spectrum shows the clusters": for n rows
    # of a signal ell sigma^2 along e_1 over isotropic noise, the top sample
    # eigenvalue stands at sigma^2 (1 + ell)(1 + gamma / ell) and its
    # eigenvector's squared cosine with e_1 is (1 - gamma / ell^2) / (1 +
    # gamma / ell), gamma = d / n: spike_overlap, read off the sample
    # eigenvalue, against the squared cosine of its eigenvector, over 40
    # samples of 1000 rows (gamma = 0.25 and 0.5, cosines 0.6 and 0.7).
    # The formula is the limit of large n and d: the mean difference is
    # within 5 of its standard errors (measured over 4 seeds it lay within
    # 2.6; the limit's finite-size bias is below that resolution here); a
    # cosine without the factor 1 / (1 + gamma / ell), or the eigenvalue
    # read as the signal's, is off by more than 10.
    rng = np.random.default_rng(0)
    n, draws = 1000, 40
    differences = []
    for _ in range(draws):
        X = rng.standard_normal((n, n_features))
        X[:, 0] *= np.sqrt(1.0 + signal)
        values, vectors = np.linalg.eigh(X.T @ X / n)
        differences.append(vectors[0, -1] ** 2 - spike_overlap(values[-1], 1.0, n_features, n))
    differences = np.asarray(differences)
    se = differences.std(ddof=1) / np.sqrt(draws)
    assert abs(differences.mean()) <= 5 * se


def test_interference_of_many_clusters_holds_no_arrays_of_k():
    # The K - 1 other scores are alike: one integrand, K - 1 times (K = 1e9
    # allocated arrays of K, and took the memory of the machine).
    many = interference(0.3, n_clusters=10**9)
    assert 0.99 < many < 1.0
    np.testing.assert_allclose(
        interference(0.3, n_clusters=10), bayes_error(np.eye(10, 12), 0.3), rtol=1e-12
    )
    assert interference(0.3, 10) < interference(0.3, 1000) < many
