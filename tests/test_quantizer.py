"""InContextQuantizer and make_prompts: formulas, Monte Carlo, symmetries, bad input."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.cluster import KMeans
from sklearn.pipeline import make_pipeline

from attention_cluster import InContextQuantizer
from attention_cluster._passes import DenseRows
from attention_cluster._scale import estimate_spectrum
from attention_cluster.datasets import make_centroids, make_mixture, make_prompts
from attention_cluster.layers import in_context_attention
from attention_cluster.metrics import interference
from attention_cluster.theory import (
    in_context_conditional_variance,
    in_context_optimal_temperature,
    in_context_risk,
    in_context_unbiased_temperature,
    quantizer_risk,
)

# ---------------------------------------------------------------------------
# make_prompts


def test_make_prompts_draws_one_orthonormal_frame_per_prompt(global_random_seed):
    X, labels, C = make_prompts(300, 40, 6, 3, noise=0.5, random_state=global_random_seed)
    assert X.shape == (300, 40, 6) and labels.shape == (300, 40) and C.shape == (300, 3, 6)
    np.testing.assert_allclose(
        C @ np.swapaxes(C, 1, 2), np.broadcast_to(np.eye(3), (300, 3, 3)), atol=1e-12
    )
    # Prompts have different centroids, isotropic on average: E[mu mu^T] = I / d.
    np.testing.assert_allclose(np.einsum("nkd,nke->de", C, C) / (300 * 3), np.eye(6) / 6, atol=0.03)
    assert set(np.unique(labels)) == {0, 1, 2}
    residual = X - np.take_along_axis(C, labels[..., None], axis=1)
    assert residual.std() == pytest.approx(0.5, rel=0.02)


def test_make_prompts_is_reproducible_and_noise_free_at_zero():
    a = make_prompts(3, 5, 4, random_state=7)
    b = make_prompts(3, 5, 4, random_state=np.random.RandomState(7))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    X, labels, C = make_prompts(3, 5, 4, noise=0.0, random_state=1)
    np.testing.assert_array_equal(X, np.take_along_axis(C, labels[..., None], axis=1))


@pytest.mark.parametrize("n_features, n_clusters", [(6, 3), (4, 4), (1, 1), (64, 10)])
def test_make_prompts_frames_are_make_centroids_draws_in_turn(n_features, n_clusters):
    # The frames of all prompts come from one draw and one stacked QR: the
    # same numbers as make_centroids called once per prompt on the
    # generator, before the labels and the noise are drawn.
    rng = np.random.RandomState(3)
    expected = [make_centroids(n_clusters, n_features, random_state=rng) for _ in range(20)]
    expected_labels = rng.randint(n_clusters, size=(20, 5))
    _, labels, C = make_prompts(20, 5, n_features, n_clusters, random_state=3)
    np.testing.assert_allclose(C, np.stack(expected), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(labels, expected_labels)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_prompts": 0}, "n_prompts must be an integer >= 1"),
        ({"sequence_length": 2.5}, "sequence_length must be an integer >= 1"),
        ({"n_clusters": 5, "n_features": 3}, "n_clusters <= n_features"),
        ({"noise": -0.1}, r"noise must be a finite number >= 0, got -0\.1\."),
        ({"noise": np.nan}, "noise must be a finite number >= 0"),
    ],
)
def test_make_prompts_rejects_bad_arguments(kwargs, match):
    args = {"n_prompts": 2, "sequence_length": 3, "n_features": 4} | kwargs
    with pytest.raises(ValueError, match=match):
        make_prompts(**args)


# ---------------------------------------------------------------------------
# The transform against direct formulas


def test_k_cluster_temperature_reduces_to_prop_5_1():
    noise = np.array([0.0, 0.3, 1.0, 2.5])
    for L in [1, 7, 500]:
        for d in [2, 10]:
            paper = (L / 2) / (1 + (d + 2) * noise**2 + (L - 1) * (0.5 + noise**2))
            np.testing.assert_allclose(
                in_context_unbiased_temperature(noise, L, n_features=d, n_clusters=2),
                paper,
                rtol=1e-14,
            )


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_auto_transform_is_the_layer_on_the_unit_scale_prompt(dtype, global_random_seed):
    rng = np.random.default_rng([global_random_seed, 0])
    X = (40.0 * rng.standard_normal((60, 5))).astype(dtype)
    X64 = X.astype(np.float64)
    spectrum = estimate_spectrum(DenseRows(X64), 3)
    temperature = in_context_unbiased_temperature(spectrum.noise, 60, n_features=5, n_clusters=3)
    Xs = X64 / spectrum.scale
    c = spectrum.scale * (temperature * 3 / 60)
    expected = c * np.einsum("lk,kd->ld", Xs @ Xs.T, Xs)
    out = InContextQuantizer(3).fit(X).transform(X)
    assert out.dtype == dtype
    # An entry sums 60 products of inner products of 5 terms: its rounding
    # is relative to the sum of the terms' magnitudes (the forward error
    # bound of a dot product, gamma_n |x| . |y|, n = 65), not to the entry,
    # which can cancel to near zero (0.002 among entries of 100).
    magnitude = c * np.einsum("lk,kd->ld", np.abs(Xs) @ np.abs(Xs).T, np.abs(Xs))
    rtol = 1e-4 if dtype == np.float32 else 1e-11
    allowed = rtol * np.abs(expected) + 65 * np.finfo(dtype).eps * magnitude
    assert np.all(np.abs(out - expected) <= allowed)


def test_numeric_temperature_is_the_layer_on_x(global_random_seed):
    X = np.random.default_rng([global_random_seed, 1]).standard_normal((30, 4))
    out = InContextQuantizer(3, temperature=0.4).fit_transform(X)
    # Each output is a weighted sum of the 30 rows: its rounding error scales
    # with the rows' size, not with the output's (an entry near 0 is a
    # cancellation; seen at 1e-16 on an entry of 3e-3).
    np.testing.assert_allclose(
        out,
        in_context_attention(X, temperature=0.4, n_clusters=3),
        rtol=1e-14,
        atol=1e-14 * np.abs(X).max(),
    )
    np.testing.assert_allclose(
        InContextQuantizer(3, temperature=0.4).fit_transform(2.0 * X), 8.0 * out, rtol=1e-12
    )


def _d_by_d_layer(X, n_clusters, temperature):
    """The linear layer through the prompt's d x d second moment, a reference
    for the L x L route: ``(lambda K / L) X (X^T X)`` at a given temperature;
    with "auto", ``s T^ctx(X / s) = lambda K X M / s^2``, ``M = X^T X / L``,
    with s and lambda from the eigenvalues of the d x d matrix M / s^2
    (``estimate_spectrum``)."""
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    L, d = X.shape
    if temperature != "auto":
        return X @ ((temperature * n_clusters / L) * (X.T @ X))
    spectrum = estimate_spectrum(DenseRows(X), n_clusters)
    temperature = in_context_unbiased_temperature(
        spectrum.noise, L, n_features=d, n_clusters=n_clusters
    )
    return temperature * n_clusters * (X @ spectrum.moment)


@pytest.mark.parametrize("temperature", ["auto", 0.4])
@pytest.mark.parametrize("kind", ["dense", "sparse", "float32", "sparse-float32"])
@pytest.mark.parametrize(
    "L, d, K",
    [(1, 6, 2), (4, 30, 2), (4, 30, 6), (4, 30, 40), (30, 6, 2), (30, 6, 8)],
    ids=["L=1", "L<d", "L<K<d", "d<K", "L>d", "L>d,K>d"],
)
def test_linear_layer_equals_the_d_by_d_route(L, d, K, kind, temperature, global_random_seed):
    # With L < d the layer and the auto temperature's spectrum come from the
    # L x L Gram matrix: the same numbers, to rounding, as from the d x d
    # second moment (its other d - L eigenvalues are zeros), for dense, sparse
    # and float32 prompts, K below L, between L and d and above d.
    rng = np.random.default_rng([global_random_seed, 4])
    X = 3.0 * rng.standard_normal((L, d))
    if kind.startswith("sparse"):
        X[rng.random((L, d)) < 0.7] = 0.0
        X = sp.csr_matrix(X)
    dtype = np.float32 if kind.endswith("float32") else np.float64
    X = X.astype(dtype)
    out = InContextQuantizer(K, temperature=temperature).fit(X).transform(X)
    assert out.dtype == dtype and out.shape == (L, d)
    expected = _d_by_d_layer(X, K, temperature)
    # Sums of L d products: rounding relative to the output's scale.
    rtol = 1e-5 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


@pytest.mark.parametrize("temperature", ["auto", 0.5])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_short_prompt_of_many_features_holds_no_d_by_d_matrix(
    sparse, temperature, traced_peak, global_random_seed
):
    # L = 30 tokens of d = 20000 features: the d x d second moment takes
    # 3.2 GB and its eigendecomposition O(d^3) time (before: unfinished after
    # 10 minutes; at d = 2000, a peak of 96 MB at a given temperature and
    # 128 MB with "auto", 200 and 267 times the output, and 1 s). The L x L
    # route holds the output, and for sparse X one more array of its size
    # (the sparse product's transpose), besides L x L matrices (dense X was
    # copied to float64 once divided by its power of two: the Gram matrix is
    # now formed by blocks of columns).
    rng = np.random.default_rng([global_random_seed, 5])
    X = sp.random(30, 20_000, density=0.01, random_state=rng, format="csr")
    tokens = X.toarray()
    quantizer = InContextQuantizer(2, temperature=temperature).fit(X)
    out, peak = traced_peak(lambda: quantizer.transform(X if sparse else tokens))
    assert out.shape == X.shape and np.all(np.isfinite(out))
    assert peak < (3 if sparse else 1.5) * out.nbytes
    if temperature != "auto":
        expected = (temperature * 2 / 30) * ((tokens @ tokens.T) @ tokens)
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


@pytest.mark.parametrize("attention, bound", [("linear", 2.5), ("softmax", 3.5)])
def test_wide_float32_prompts_are_not_copied_to_float64(attention, bound, traced_peak):
    # 60 float32 tokens of 50000 features: transform held a float64 copy of
    # X / unit for the Gram matrix (twice X), and the softmax layer a dense
    # copy of X besides its unit-scale copy: peaks of 4 and 6 times X. Now
    # 2 and 3: the output, for the softmax layer the unit-scale tokens, and
    # a pass's chunk of at least 256 rows in float64 (the spectrum's norms).
    X = np.random.default_rng(0).standard_normal((60, 50_000), dtype=np.float32)
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    out, peak = traced_peak(lambda: quantizer.transform(X))
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    assert peak < bound * X.nbytes, peak / X.nbytes


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_given_temperature_holds_few_d_by_d_matrices(dtype, traced_peak):
    # 600 tokens of 300 features at a given temperature (one chunk of rows):
    # besides the output and its chunk's product (the output's size), transform
    # held the second moment and the context lambda K M formed from it in
    # float64: 1.5 (float32: the context cast) and 2 d x d float64 matrices.
    # Now the moment is multiplied in place: 0.5 and 1 (the same numbers).
    X = np.random.default_rng(0).standard_normal((600, 300)).astype(dtype)
    quantizer = InContextQuantizer(2, temperature=0.01).fit(X)
    out, peak = traced_peak(lambda: quantizer.transform(X))
    assert out.dtype == dtype and np.all(np.isfinite(out))
    d_by_d = 8 * 300 * 300
    held = (peak - 2 * out.nbytes) / d_by_d
    assert held < 1.25, held


@pytest.mark.parametrize("shape", [(30, 4), (4, 30)], ids=["L>d", "L<d"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_numeric_temperature_with_a_moment_beyond_the_range(sparse, shape, global_random_seed):
    # The linear layer is cubic in X: at a temperature of 2^-1000 the rows
    # times 2^540 give 2^620 times the output at temperature 1, although
    # their second moment and Gram matrix (2^1080 times X's) are beyond
    # float64's range; the context is built from the unit-scale moment or
    # Gram matrix. Where the output itself leaves the range,
    # FloatingPointError says so, without a RuntimeWarning.
    X = np.abs(np.random.default_rng([global_random_seed, 2]).standard_normal(shape))
    wrap = sp.csr_matrix if sparse else np.asarray
    want = InContextQuantizer(3, temperature=1.0).fit_transform(wrap(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = InContextQuantizer(3, temperature=2.0**-1000).fit_transform(wrap(np.ldexp(X, 540)))
        np.testing.assert_allclose(got, np.ldexp(want, 620), rtol=1e-12)
        with pytest.raises(FloatingPointError, match="overflowed"):
            InContextQuantizer(3, temperature=0.5).fit_transform(wrap(np.ldexp(X, 540)))


# ---------------------------------------------------------------------------
# Monte Carlo (d = 10, sigma = 0.3, L = 500; many prompts)

D, SIGMA, L = 10, 0.3, 500


def _frame_statistics(T, labels, C):
    """Mean projections of each output on its token's centroid and on the others.

    The centroids differ between prompts, so outputs are averaged in each
    prompt's own frame; per-prompt means are independent, which gives the
    standard errors.
    """
    K = C.shape[1]
    proj = np.einsum("nld,nkd->nlk", T, C)
    own_mask = labels[..., None] == np.arange(K)
    own = np.sum(proj * own_mask, axis=-1)
    other = np.sum(proj * ~own_mask, axis=-1) / (K - 1)
    n = T.shape[0]
    own_p, other_p = own.mean(axis=1), other.mean(axis=1)
    return own_p.mean(), own_p.std() / np.sqrt(n), other_p.mean(), other_p.std() / np.sqrt(n)


def _own_centroid(labels, C):
    return np.take_along_axis(C, labels[..., None], axis=1)


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_prop_5_1_temperature_is_exactly_unbiased(n_clusters, global_random_seed):
    # Prop. 5.1 holds at every L: with the true sigma the only error is
    # Monte Carlo error.
    X, labels, C = make_prompts(
        400, L, D, n_clusters, noise=SIGMA, random_state=global_random_seed + 10 + n_clusters
    )
    temperature = in_context_unbiased_temperature(SIGMA, L, n_features=D, n_clusters=n_clusters)
    T = in_context_attention(X, temperature=temperature, n_clusters=n_clusters)
    own, own_se, other, other_se = _frame_statistics(T, labels, C)
    assert abs(own - 1.0) < 5 * own_se
    assert abs(other) < 5 * other_se


def test_auto_temperature_is_unbiased_up_to_plug_in_error(global_random_seed):
    # With sigma and s estimated from the prompt, the output is unbiased up
    # to the plug-in error, O(1/L) (about 0.003 at L = 500), plus Monte Carlo
    # error (standard error about 0.001): tolerance 0.01.
    X, labels, C = make_prompts(400, L, D, 2, noise=SIGMA, random_state=global_random_seed + 20)
    quantizer = InContextQuantizer(2)
    T = np.stack([quantizer.fit_transform(prompt) for prompt in X])
    own, own_se, other, other_se = _frame_statistics(T, labels, C)
    assert own_se < 0.002 and other_se < 0.003
    assert abs(own - 1.0) < 0.01
    assert abs(other) < 0.01


def test_more_clusters_than_features_warns_and_is_unbiased_on_a_tight_frame(global_random_seed):
    # math.md section 4: K >= d centroids span R^d, and a linear map fixing
    # them is the identity. On a tight frame (+-e_i, K = 2 d) "auto" is
    # unbiased, each cluster's mean output its centroid (up to the plug-in
    # and Monte Carlo errors: at most 0.019 a coordinate over 60 seeds at
    # L = 6000); the orthonormal centroids' temperature gave 2.4 to 2.9
    # times the centroid, silently. The clusters are of equal size, so that
    # the prompt's own frame is tight: labels drawn at random leave the axes'
    # shares about 2% apart, and the outputs' norms with them (0.056 off).
    rng = np.random.default_rng(global_random_seed)
    d, L = 3, 6000
    frame = np.linalg.qr(rng.standard_normal((d, d)))[0] @ np.hstack([np.eye(d), -np.eye(d)])
    labels = rng.permutation(np.repeat(np.arange(2 * d), L // (2 * d)))
    X = frame.T[labels] + 0.1 * rng.standard_normal((L, d))
    with pytest.warns(UserWarning, match="as many clusters as features or more"):
        T = InContextQuantizer(2 * d).fit_transform(X)
    with pytest.warns(UserWarning, match="as many clusters as features or more"):
        InContextQuantizer(d).fit(X)  # as many: the boundary
    for c in range(2 * d):
        np.testing.assert_allclose(T[labels == c].mean(0), frame[:, c], atol=0.03)
    # No warning with fewer clusters than features, a given temperature or
    # the softmax layer (no linear map).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        InContextQuantizer(d - 1).fit(X)
        InContextQuantizer(2 * d, temperature=0.5).fit(X)
        InContextQuantizer(2 * d, attention="softmax").fit(X)


def test_auto_temperature_shrinks_the_output_of_a_short_noisy_prompt(global_random_seed):
    # The docstring's caveat: at L = 20, d = 10, sigma = 1 the plug-in noise
    # (the mean of the smallest sample eigenvalues) is far below sigma^2
    # and the output is shrunk to about 0.7 of the centroid, while the true
    # sigma's temperature stays unbiased.
    X, labels, C = make_prompts(1000, 20, 10, 2, noise=1.0, random_state=global_random_seed + 30)
    quantizer = InContextQuantizer(2)
    T = np.stack([quantizer.fit_transform(prompt) for prompt in X])
    own, own_se, _, _ = _frame_statistics(T, labels, C)
    assert own_se < 0.02
    assert 0.6 < own < 0.8
    exact = in_context_attention(
        X, temperature=in_context_unbiased_temperature(1.0, 20, n_features=10, n_clusters=2)
    )
    own, own_se, _, _ = _frame_statistics(exact, labels, C)
    assert abs(own - 1.0) < 5 * own_se


@pytest.mark.parametrize("sequence_length", [5, 20, L])
def test_risk_matches_prop_5_2_and_falls_below_the_optimal_quantizer(
    sequence_length, global_random_seed
):
    # Prop. 5.2: the risk E||X_1 - T^ctx(X)_1||^2 (theory.in_context_risk,
    # exact at every L) against d sigma^2, the risk of the optimal quantizer
    # T*(X)_l = mu*_{Z_l}; at the unbiased temperature of Prop. 5.1 and at
    # the risk-optimal one of Prop. 5.2.
    n_prompts = 100_000 // sequence_length
    X, labels, C = make_prompts(
        n_prompts, sequence_length, D, 2, noise=SIGMA, random_state=global_random_seed + 30
    )
    empirical_quantizer_risk = np.mean(np.sum((X - _own_centroid(labels, C)) ** 2, axis=-1))
    assert empirical_quantizer_risk == pytest.approx(quantizer_risk(SIGMA, n_features=D), rel=0.02)
    for temperature in [
        in_context_unbiased_temperature(SIGMA, sequence_length, n_features=D, n_clusters=2),
        in_context_optimal_temperature(SIGMA, sequence_length, n_features=D),
    ]:
        errors = np.sum((X - in_context_attention(X, temperature=temperature)) ** 2, axis=-1)
        per_prompt = errors.mean(axis=1)
        se = per_prompt.std() / np.sqrt(n_prompts)
        assert (
            abs(
                per_prompt.mean()
                - in_context_risk(SIGMA, temperature, sequence_length, n_features=D)
            )
            < 5 * se
        )
        assert per_prompt.mean() < 0.7 * quantizer_risk(SIGMA, n_features=D)


def _conditional_variance(T, labels, C):
    """E||T_1 - E[T_1 | mu*, Z_1]||^2, the conditional mean in each prompt's frame.

    The mean has components along the centroids only (the rest vanishes by
    symmetry), estimated by :func:`_frame_statistics`.
    """
    own, _, other, _ = _frame_statistics(T, labels, C)
    mse = np.mean(np.sum((T - _own_centroid(labels, C)) ** 2, axis=-1))
    return mse - (own - 1.0) ** 2 - other**2


def test_conditional_variance_matches_prop_5_2(global_random_seed):
    X, labels, C = make_prompts(400, L, D, 2, noise=SIGMA, random_state=global_random_seed + 40)
    temperature = in_context_unbiased_temperature(SIGMA, L, n_features=D, n_clusters=2)
    T = in_context_attention(X, temperature=temperature)
    per_prompt = np.sum((T - _own_centroid(labels, C)) ** 2, axis=-1).mean(axis=1)
    se = per_prompt.std() / np.sqrt(len(per_prompt))
    expected = in_context_conditional_variance(SIGMA, temperature, L, n_features=D)
    assert abs(_conditional_variance(T, labels, C) - expected) < 5 * se
    assert expected < 0.25 * quantizer_risk(SIGMA, n_features=D)


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_auto_output_has_less_conditional_variance_than_the_input(attention, global_random_seed):
    n_prompts = 200 if attention == "linear" else 40
    X, labels, C = make_prompts(
        n_prompts, L, D, 2, noise=SIGMA, random_state=global_random_seed + 45
    )
    quantizer = InContextQuantizer(2, attention=attention)
    T = np.stack([quantizer.fit_transform(prompt) for prompt in X])
    variance = _conditional_variance(T, labels, C)
    assert variance < 0.5 * _conditional_variance(X, labels, C)
    if attention == "linear":
        # The plug-in temperature moves it by O(1/L) from Prop. 5.2's value.
        expected = in_context_conditional_variance(
            SIGMA,
            in_context_unbiased_temperature(SIGMA, L, n_features=D, n_clusters=2),
            L,
            n_features=D,
        )
        assert variance == pytest.approx(expected, abs=0.01)


def test_pipeline_recipe_labels_tokens_as_well_as_the_oracle_rule(global_random_seed):
    # The recipe of the Notes: KMeans on the quantised tokens. Its error is
    # compared with the oracle rule argmax_c <x, mu*_c> (Bayes error I(sigma),
    # math.md section 1) on the same tokens.
    X, labels, C = make_prompts(20, L, D, 2, noise=SIGMA, random_state=global_random_seed + 50)
    errors, oracle = [], []
    for prompt, y, centroids in zip(X, labels, C):
        model = make_pipeline(
            InContextQuantizer(2), KMeans(2, n_init=3, random_state=global_random_seed)
        )
        wrong = np.mean(model.fit_predict(prompt) != y)
        errors.append(min(wrong, 1 - wrong))
        oracle.append(np.mean(np.argmax(prompt @ centroids.T, axis=1) != y))
    assert np.mean(oracle) == pytest.approx(interference(SIGMA), abs=0.004)
    assert np.mean(errors) < np.mean(oracle) + 0.005


# ---------------------------------------------------------------------------
# Symmetries of the auto temperature, by Hypothesis

# Prompts of fewer tokens than features as well as more (the L x L and the
# d x d routes).
prompts = st.tuples(st.integers(1, 12), st.integers(1, 8)).flatmap(
    lambda shape: hnp.arrays(
        np.float64, shape, elements=st.floats(-3.0, 3.0, allow_subnormal=False)
    )
)


def _close(actual, expected, spacing=0.0):
    """Equal to 1e-8 relatively, or within ``spacing``, an absolute error the
    outputs carry whatever the method (float64's spacing where they fall
    below its normal numbers)."""
    atol = max(1e-9 * max(1e-300, float(np.abs(expected).max())), spacing)
    np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=atol)


@given(
    X=prompts,
    exponent=st.integers(-140, 140),
    mantissa=st.floats(1.0, 10.0),
    attention=st.sampled_from(["linear", "softmax"]),
)
def test_auto_is_scale_equivariant(X, exponent, mantissa, attention):
    c = mantissa * 10.0**exponent
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    _close(quantizer.transform(c * X), c * quantizer.transform(X))


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_auto_is_scale_equivariant_at_the_kurtosis_end(attention):
    # One non-zero token of two in d = 2: the norms' kurtosis sits exactly at
    # its upper end (infinite noise), where rounding in it used to move the
    # noise estimate by 1e-8 between scales.
    X = np.array([[1.0330552710570582, 0.0], [0.0, 0.0]])
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    for c in [1e14, 3.0, 1e-7]:
        _close(quantizer.transform(c * X), c * quantizer.transform(X))


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_auto_is_scale_equivariant_for_rows_whose_norms_pass_float64(attention):
    # Entries of 1e308 in 4 features: each finite, the rows' norms and their
    # scale s not. The spectrum is taken at the power of two of the largest
    # entry (exact), where s is finite. Before, the softmax layer divided
    # the tokens by s / peak = inf and returned NaN, with a RuntimeWarning.
    X = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [1.0, 1.0, 1.0, 0.9]])
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        far = quantizer.transform(1e308 * X)
    _close(far / 1e308, quantizer.transform(X))


@given(
    X=prompts,
    n_clusters=st.integers(1, 14),
    exponent=st.integers(-140, 140),
    temperature=st.sampled_from(["auto", 0.7]),
)
@example(X=np.array([[8.34153373e-100]]), n_clusters=1, exponent=-19, temperature=0.7)
def test_linear_layer_equals_the_d_by_d_route_on_any_prompt(X, n_clusters, exponent, temperature):
    # Repeated tokens, zero tokens and features, K above L or d, L = 1, at
    # any normal magnitude (the documented range): the L x L route against
    # the d x d one. The reference is taken at X's scale (c X at temperature
    # lambda / c^2 gives c times the output at lambda), where its own
    # products neither overflow nor underflow. Outputs at scale c may fall
    # below float64's normal numbers however normal the tokens (one token of
    # 8.3e-119 at temperature 7e37 gives 4.1e-317): there they round to
    # float64's spacing 2^-1074, a relative 3.5e-8 of that one, which the
    # comparison at X's scale allows for (a few spacings, over c).
    c = 10.0**exponent
    assume(np.all((X == 0.0) | (np.abs(c * X) >= np.finfo(np.float64).tiny)))
    given_temperature = temperature if temperature == "auto" else temperature / c**2
    quantizer = InContextQuantizer(n_clusters, temperature=given_temperature).fit(X)
    _close(
        quantizer.transform(c * X) / c,
        _d_by_d_layer(X, n_clusters, temperature),
        spacing=4.0 * 2.0**-1074 / c,
    )


@given(X=prompts, seed=st.integers(0, 2**32 - 1), attention=st.sampled_from(["linear", "softmax"]))
def test_auto_is_rotation_and_permutation_equivariant(X, seed, attention):
    rng = np.random.default_rng(seed)
    R = np.linalg.qr(rng.standard_normal((X.shape[1], X.shape[1])))[0]
    perm = rng.permutation(X.shape[0])
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    out = quantizer.transform(X)
    _close(quantizer.transform(X @ R), out @ R)
    _close(quantizer.transform(X[perm]), out[perm])


# ---------------------------------------------------------------------------
# Extreme scales and bad input


@pytest.mark.parametrize("shape", [(50, 4), (8, 50)], ids=["L>d", "L<d"])
@pytest.mark.parametrize("attention", ["linear", "softmax"])
@pytest.mark.parametrize(
    "scale, dtype",
    [
        (1e-150, np.float64),
        (1e150, np.float64),
        (1e-300, np.float64),
        (1e-15, np.float32),
        (1e15, np.float32),
    ],
)
def test_extreme_scales_and_zero_rows_stay_finite(
    scale, dtype, attention, shape, global_random_seed
):
    X = np.random.default_rng([global_random_seed, 2]).standard_normal(shape)
    X[::7] = 0.0
    quantizer = InContextQuantizer(2, attention=attention).fit(X)
    reference = quantizer.transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = quantizer.transform((scale * X).astype(dtype))
    assert out.dtype == dtype
    assert np.all(np.isfinite(out))
    # In float32 an output near 0 is a cancellation in a sum over the 50
    # rows: its rounding error is on the rows' scale (seen at 1e-8 on an
    # entry of 6e-5).
    float32_rounding = 50 * np.finfo(np.float32).eps * np.abs(X).max()
    np.testing.assert_allclose(
        out / scale,
        reference,
        rtol=1e-4 if dtype == np.float32 else 1e-9,
        atol=float32_rounding if dtype == np.float32 else 1e-12,
    )
    if attention == "linear":  # T^ctx(X)_l = lambda K M X_l vanishes with X_l
        assert np.all(out[::7] == 0.0)


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_all_zero_prompt_maps_to_zero(attention):
    X = np.zeros((5, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = InContextQuantizer(attention=attention).fit_transform(X)
    np.testing.assert_array_equal(out, X)


def test_numeric_temperature_overflow_is_an_error_not_nan():
    X = np.full((3, 2), 1e150)
    quantizer = InContextQuantizer(temperature=1.0).fit(X)
    with pytest.raises(FloatingPointError, match="overflowed"):
        quantizer.transform(X)


@pytest.mark.parametrize(
    "X, match",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "infinity"),
        (np.zeros((0, 2)), "0 sample"),
        (np.zeros((3, 0)), "0 feature"),
        (np.ones(2), "Expected 2D array"),
        (np.ones((3, 2), dtype=complex), "Complex data not supported"),
    ],
    ids=["nan", "inf", "no-token", "no-feature", "1d", "complex"],
)
@pytest.mark.parametrize("method", ["fit", "transform"])
def test_bad_input_raises(X, match, method):
    quantizer = InContextQuantizer().fit(np.ones((4, 2)))
    with pytest.raises(ValueError, match=match):
        getattr(quantizer, method)(X)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_clusters": 0}, "n_clusters"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": "cold"}, "temperature"),
        ({"attention": "quadratic"}, "attention"),
    ],
)
def test_bad_parameters_raise_at_fit(params, match):
    with pytest.raises(ValueError, match=match):
        InContextQuantizer(**params).fit(np.ones((4, 3)))
    # Nor does a bad parameter set after a fit pass the next one.
    quantizer = InContextQuantizer().fit(np.ones((4, 3))).set_params(**params)
    with pytest.raises(ValueError, match=match):
        quantizer.fit(np.ones((4, 3)))


@pytest.mark.parametrize(
    "params",
    [
        {"attention": "bogus"},
        {"attention": "softmax"},
        {"n_clusters": 0},
        {"temperature": "cold"},
        {"temperature": 0.5},
    ],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()),
)
def test_transform_uses_the_parameters_validated_at_fit(params, global_random_seed):
    # transform read the parameters when called: set_params(attention="bogus")
    # after fit ran the softmax layer, unvalidated. Parameters set after fit
    # take effect at the next fit, as in scikit-learn's estimators.
    X, _, _ = make_mixture(60, 4, 2, noise=0.3, random_state=global_random_seed)
    quantizer = InContextQuantizer(2).fit(X)
    want = quantizer.transform(X)
    quantizer.set_params(**params)
    np.testing.assert_array_equal(quantizer.transform(X), want)
    fitted = (quantizer.n_clusters_, quantizer.temperature_, quantizer.attention_)
    assert fitted == (2, "auto", "linear")


@pytest.mark.parametrize("attention", ["linear", "softmax"])
@pytest.mark.parametrize("layout", ["fortran", "read-only-memmap", "strided"])
def test_memory_layout_does_not_change_the_output(tmp_path, layout, attention, global_random_seed):
    X = np.random.default_rng([global_random_seed, 3]).standard_normal((40, 8))
    expected = InContextQuantizer(attention=attention).fit_transform(
        np.ascontiguousarray(X[:, ::2])
    )
    if layout == "fortran":
        Y = np.asfortranarray(X[:, ::2])
    elif layout == "read-only-memmap":
        np.save(tmp_path / "X.npy", X[:, ::2])
        Y = np.load(tmp_path / "X.npy", mmap_mode="r")
    else:
        Y = X[:, ::2]
    # BLAS sums in an order that depends on the layout: the rounding is
    # relative to the output's scale, not to an entry that cancels (seed 16:
    # 8e-17 on 2e-5).
    np.testing.assert_allclose(
        InContextQuantizer(attention=attention).fit_transform(Y),
        expected,
        rtol=1e-12,
        atol=1e-12 * np.abs(expected).max(),
    )


def test_auto_keeps_the_centroids_span_and_shrinks_the_rest(global_random_seed):
    # With temperature="auto" and L large, T^ctx = lambda K M is one linear
    # map: 1 on the centroids' span (lambda K (1/K + sigma^2) = 1) and
    # K sigma^2 / (1 + K sigma^2) on the noise directions (math.md section 4,
    # the in-context unbiased temperature's limit). The map, recovered by
    # least squares from the output, against those values (Monte Carlo). On
    # centroid k the map is lambda K (w_k + sigma^2), w_k the sample's share
    # of cluster k: 1 for w_k = 1/K, and 1.011 for the share 0.5059 of seed 86.
    K, d, sigma = 2, 10, 0.3
    X, y, C = make_mixture(100_000, d, K, noise=sigma, random_state=global_random_seed)
    shares = np.bincount(y, minlength=K) / len(y)
    T = InContextQuantizer(K).fit(X).transform(X)
    A = np.linalg.lstsq(X, T, rcond=None)[0]  # T = X A
    rng = np.random.default_rng(global_random_seed)
    basis = np.linalg.qr(np.vstack([C, rng.standard_normal((d - K, d))]).T)[0]
    noise = basis[:, K:]
    np.testing.assert_allclose(
        np.diag(C @ A @ C.T), (shares + sigma**2) / (1 / K + sigma**2), atol=0.01
    )
    np.testing.assert_allclose(
        np.diag(noise.T @ A @ noise), K * sigma**2 / (1 + K * sigma**2), atol=0.005
    )


def test_a_dask_dataframes_column_names_are_its_feature_names():
    # A Dask DataFrame went through validate_data, which read no names from
    # it: fitted on one, the quantizer had no feature_names_in_, and fitted
    # on the pandas frame, it warned that the Dask frame had none. It is now
    # checked as AttentionClustering checks it.
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X = make_prompts(1, 40, 4, 2, noise=0.2, random_state=0)[0][0]
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    lazy = dd.from_pandas(frame, npartitions=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = InContextQuantizer().fit(lazy)
        np.testing.assert_array_equal(fitted.feature_names_in_, frame.columns)
        model = InContextQuantizer().fit(frame)
        np.testing.assert_array_equal(model.transform(lazy), model.transform(frame))
    with pytest.warns(UserWarning, match="was fitted with feature names"):
        model.transform(lazy.to_dask_array(lengths=True))
    # A prompt is computed into memory: Dask arrays of unknown row counts or
    # chunked along their columns, which the Dask passes refuse, are taken.
    da = pytest.importorskip("dask.array")
    for tokens_given in (lazy.values, da.from_array(X, chunks=(20, 2))):
        np.testing.assert_array_equal(
            InContextQuantizer().fit_transform(tokens_given), InContextQuantizer().fit_transform(X)
        )


@pytest.mark.parametrize(
    "magnitude, temperature, tokens",
    [(1e30, 1e-105, 30), (1e-30, 1e105, 30), (1e30, 1e-105, 3), (1e-30, 1e105, 3)],
    ids=["moment-small", "moment-large", "gram-small", "gram-large"],
)
def test_a_float32_prompt_whose_layer_factor_leaves_float32(magnitude, temperature, tokens):
    # A given temperature on float32 tokens: the layer's d x d (or, with
    # fewer tokens than features, L x L) factor was cast to float32, where
    # it underflowed (the output 40% off, silently) or overflowed (a false
    # FloatingPointError), though the output lies well within float32. The
    # factor is now cast at its power of two, applied to the product.
    X = (magnitude * np.random.default_rng(0).standard_normal((tokens, 4))).astype(np.float32)
    want = in_context_attention(X.astype(np.float64), temperature=temperature)
    assert 1e-30 < np.max(np.abs(want)) < 1e30
    for tokens_given in (X, sp.csr_matrix(X)):
        got = InContextQuantizer(temperature=temperature).fit_transform(tokens_given)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * np.max(np.abs(want)))


@pytest.mark.parametrize("shape", [(16, 32), (64, 32), (64, 8)])
def test_a_float32_prompt_near_float32s_largest_numbers(shape):
    # Near float32's top (2^125 X), the layer's factor is about 1 / L of X's
    # squared scale's inverse and its product with X of X's magnitude: cast
    # to float32 as it is, the product holds. (Scaled first to a largest
    # entry of about 1, as a fix for factors beyond float32 once did, the
    # product summed L or d terms past float32: a false FloatingPointError
    # at the default settings.)
    X0 = 1.0 + 0.1 * np.random.default_rng(0).standard_normal(shape)
    want = InContextQuantizer().fit_transform(X0)
    got = InContextQuantizer().fit_transform((2.0**125 * X0).astype(np.float32))
    np.testing.assert_allclose(got / 2.0**125, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_the_softmax_layer_of_a_wide_prompt_holds_its_output_few_times(sparse, traced_peak):
    # With d >> L each block's product of weights and values was the size of
    # the output (a peak of 2.2 outputs for the layer), and the quantizer
    # took |tokens| and a unit-scale copy of the densified sparse tokens
    # besides (3.8 outputs dense, 4.8 sparse). The product is written in
    # place and the densified tokens are scaled in place: 1.25, 2.9 and 2.9.
    from attention_cluster.layers import in_context_softmax_attention

    rng = np.random.default_rng(0)
    X = sp.random(300, 20_000, density=0.01, random_state=rng, format="csr", dtype=np.float32)
    tokens = X.toarray()
    unit = tokens / np.maximum(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-30)
    out, peak = traced_peak(lambda: in_context_softmax_attention(unit, temperature=1.0))
    assert peak < 1.6 * out.nbytes
    quantizer = InContextQuantizer(2, attention="softmax").fit(X)
    out, peak = traced_peak(lambda: quantizer.transform(X if sparse else tokens))
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    assert peak < 3.3 * out.nbytes, peak / out.nbytes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_short_sparse_prompt_is_multiplied_by_blocks_of_columns(dtype, traced_peak):
    # (lambda K / L) (X X^T) X for a sparse X of fewer tokens than features:
    # the product was formed whole in float64, transposed and cast (3.4 and
    # 2.2 outputs, float32 and float64); by blocks of X's columns, cast into
    # the output, 1.3 to 1.6 here.
    X = sp.random(200, 20_000, density=0.0025, random_state=0, format="csr", dtype=dtype)
    quantizer = InContextQuantizer(2, temperature=0.5).fit(X)
    out, peak = traced_peak(lambda: quantizer.transform(X))
    assert out.dtype == dtype
    assert peak < 2.0 * out.nbytes, peak / out.nbytes
    tokens = X.toarray().astype(np.float64)
    expected = (0.5 * 2 / 200) * ((tokens @ tokens.T) @ tokens)
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=0)


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_a_softmax_layer_on_a_long_prompt_warns_before_it_starts(monkeypatch, attention):
    # The softmax layer's L^2 d work: beyond _SOFTMAX_WARN_WORK transform
    # says so at the caller's line before it starts (a 2e6-row prompt ran
    # for hours in silence); the linear layer's L d min(L, d) never warns.
    from attention_cluster import _quantizer

    X, _, _ = make_mixture(200, 5, 2, noise=0.3, random_state=0)
    model = InContextQuantizer(attention=attention).fit(X)
    monkeypatch.setattr(_quantizer, "_SOFTMAX_WARN_WORK", 200.0 * 200 * 5 - 1)
    started = []
    monkeypatch.setattr(
        _quantizer,
        "in_context_softmax_attention",
        lambda *a, **k: started.append(len(w)) or np.zeros_like(X),
    )
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model.transform(X)
    said = [x for x in w if "L^2 d = 2e+05 multiply-adds" in str(x.message)]
    if attention == "linear":
        assert not said
        return
    assert len(said) == 1 and said[0].filename == __file__
    assert started == [1]  # warned before the layer ran
    monkeypatch.setattr(_quantizer, "_SOFTMAX_WARN_WORK", 200.0 * 200 * 5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model.transform(X)
    assert not [x for x in w if "L^2 d" in str(x.message)]
