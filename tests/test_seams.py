"""Where two paths of the estimator meet: input kinds x methods, degenerate data, magnitudes.

Each test of a numbered case reproduces an input on which an earlier
estimator returned a wrong answer in silence (a positive score, probabilities
that do not sum to one, NaN parameters, a label rule that disagreed with its
own posterior), and checks the answer against an independent computation.
"""

import copy
import pickle
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from fitted_state import same_state
from scipy.special import logsumexp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

from attention_cluster import (
    AttentionClustering,
    InContextQuantizer,
    SelfAttentionDynamics,
    _passes,
    attention_flow,
    choose_n_clusters,
)
from attention_cluster.datasets import make_mixture


def _quiet(model, X, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, **kwargs)


# -- 1. the reconstruction score in float32 sparse rows at tiny and large scales


@pytest.mark.parametrize("magnitude", [1e-24, 1e22])
def test_sparse_float32_score_equals_the_dense_score(magnitude):
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((50, 3)) * magnitude).astype(np.float32)
    model = _quiet(AttentionClustering(2, random_state=0), X)
    dense, sparse = model.score(X), model.score(sp.csr_matrix(X))
    assert np.isfinite(dense) and dense < 0
    assert sparse == pytest.approx(dense, rel=1e-5)


# -- 2. a partial_fit batch at another magnitude


@pytest.mark.parametrize(
    "first, later",
    [(1e-150, 1e5), (1.0, 1e155), (1.0, 1e-150)],
    ids=["tiny-then-large", "unit-then-huge", "unit-then-tiny"],
)
def test_partial_fit_refuses_a_batch_its_statistics_cannot_hold(first, later):
    rng = np.random.default_rng(0)
    model = AttentionClustering(2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(first * rng.standard_normal((50, 4)))
        model.partial_fit(first * rng.standard_normal((50, 4)))
    before = {k: np.copy(v) for k, v in vars(model).items() if isinstance(v, np.ndarray)}
    with pytest.raises(ValueError, match="times the scale fixed by the first batch"):
        model.partial_fit(later * rng.standard_normal((10, 4)))
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(model, name), value, err_msg=name)
    assert model.n_steps_ == 2
    for name in ("cluster_centers_", "means_", "covariances_", "moment_heads_", "weights_"):
        assert np.all(np.isfinite(getattr(model, name))), name
    # The stream still takes batches at its own magnitude.
    model.partial_fit(first * rng.standard_normal((10, 4)))
    assert model.n_steps_ == 3 and np.all(np.isfinite(model.means_))


def test_partial_fit_takes_a_moderately_rescaled_batch():
    # Within the stream's range a batch at another magnitude updates the
    # model (the statistics hold it) and leaves every parameter finite.
    X = make_mixture(600, 4, 2, noise=0.2, random_state=0)[0]
    model = AttentionClustering(2, random_state=0).partial_fit(X[:300])
    model.partial_fit(1e3 * X[300:])
    for name in ("cluster_centers_", "means_", "covariances_", "moment_heads_"):
        assert np.all(np.isfinite(getattr(model, name))), name


# -- 3. a fit to equal rows


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("value", [0.0, 2.5])
def test_equal_rows_give_a_finite_normalised_mixture(K, value):
    X = np.full((4, 2), value)
    with pytest.warns(UserWarning, match="All rows of X are equal|no spread"):
        model = AttentionClustering(K, random_state=0).fit(X)
    for Z in (X, 10 * X + 1.0):
        proba = model.predict_proba(Z)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(np.isfinite(model.score_samples(Z)))
        assert np.isfinite(model.bic(Z)) and np.isfinite(model.aic(Z))
        np.testing.assert_array_equal(np.argmax(proba, axis=1), model.predict(Z))


# -- 4. rows far from the origin and close to each other


def _single_gaussian_log_likelihood(X):
    """Mean log-likelihood of the maximum-likelihood spherical Gaussian, in closed form."""
    n, d = X.shape
    variance = np.sum((X - X.mean(axis=0)) ** 2) / (n * d)
    return -0.5 * d * (np.log(2 * np.pi * variance) + 1.0)


def test_densities_of_a_tight_cloud_far_from_the_origin():
    rng = np.random.default_rng(0)
    X = np.array([-0.727, 1.28, 0.035]) + 1e-13 * rng.standard_normal((40, 3))
    model = _quiet(AttentionClustering(2, random_state=0), X)
    proba = model.predict_proba(X)
    np.testing.assert_array_equal(np.argmax(proba, axis=1), model.predict(X))
    # Two components fitted by maximum likelihood gain a few nats at most
    # over one Gaussian on a single Gaussian cloud, and lose nothing.
    gain = np.mean(model.score_samples(X)) - _single_gaussian_log_likelihood(X)
    assert -0.5 < gain < 2.0


def test_score_samples_equal_a_numpy_reference():
    X = make_mixture(500, 5, 3, noise=0.4, random_state=1)[0] * 7.0 + 3.0
    model = _quiet(AttentionClustering(3, random_state=0), X)
    # log sum_k pi_k N(x; m_k, v_k I), with the fitted attributes in the data's units.
    v = model.covariances_
    sq = ((X[:, None, :] - model.means_[None]) ** 2).sum(axis=2)
    logs = np.log(model.weights_) - sq / (2 * v) - 0.5 * X.shape[1] * np.log(2 * np.pi * v)
    np.testing.assert_allclose(model.score_samples(X), logsumexp(logs, axis=1), rtol=1e-10)
    np.testing.assert_allclose(
        model.predict_proba(X), np.exp(logs - logsumexp(logs, axis=1)[:, None]), atol=1e-10
    )


# -- 5. free norms when a centroid is the mean


def test_free_norm_centroid_at_the_mean():
    X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]]) * 5 + [3.0, 1.0]
    model = _quiet(AttentionClustering(1, centroid_norms="free", center=True, random_state=0), X)
    np.testing.assert_allclose(model.means_[0], X.mean(axis=0), atol=1e-12)


# -- 7. any finite magnitude


@pytest.mark.parametrize("exponent", [-1000, -520, -60, 60, 520, 1000])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_labels_do_not_depend_on_a_power_of_two(exponent, sparse):
    X, y, _ = make_mixture(400, 5, 3, noise=0.2, random_state=0)
    kind = sp.csr_matrix if sparse else np.asarray
    base = _quiet(AttentionClustering(3, random_state=0), kind(X))
    scaled = _quiet(AttentionClustering(3, random_state=0), kind(np.ldexp(X, exponent)))
    np.testing.assert_array_equal(scaled.labels_, base.labels_)
    assert adjusted_rand_score(y, base.labels_) > 0.9
    Z = kind(np.ldexp(X, exponent))
    assert np.all(np.isfinite(scaled.score_samples(Z)))
    np.testing.assert_allclose(scaled.predict_proba(Z), base.predict_proba(kind(X)), atol=1e-9)
    # Densities shift by -d log 2^k: the same model in other units.
    np.testing.assert_allclose(
        scaled.score_samples(Z),
        base.score_samples(kind(X)) - X.shape[1] * exponent * np.log(2.0),
        rtol=1e-9,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_variances_beyond_the_dtypes_range_are_infinite_without_a_runtime_warning(dtype):
    # covariances_ is (s tau)^2 in the data's units: past the dtype's range
    # (float32 rows of about 1e19, float64 rows of about 1e154) it is
    # infinite, as documented, and the fit says nothing from inside the
    # package; the predictions, which read the float64 mixture, stay finite.
    exponent = 80 if dtype == np.float32 else 600
    X = np.ldexp(make_mixture(400, 5, 3, noise=0.2, random_state=0)[0], exponent).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = AttentionClustering(3, random_state=0).fit(X)
    assert model.covariances_.dtype == dtype and np.all(np.isinf(model.covariances_))
    assert np.all(np.isfinite(model.score_samples(X)))
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0, rtol=1e-5)


# -- what a mixture needs, said


@pytest.mark.parametrize("kwargs", [{"refine": None}, {"solver": "psgd"}])
def test_likelihood_methods_say_they_need_the_refinement(kwargs):
    X = make_mixture(300, 4, 2, noise=0.2, random_state=0)[0]
    model = AttentionClustering(2, random_state=0, max_iter=200, **kwargs).fit(X)
    for method in ("predict_proba", "score_samples", "bic", "aic"):
        assert not hasattr(model, method)
        # scikit-learn's available_if raises its own message, caused by ours.
        with pytest.raises(AttributeError) as raised:
            getattr(model, method)(X)
        assert "refine='em'" in str(raised.value.__cause__)


@pytest.mark.parametrize(
    "fitted, set_after",
    [({"refine": None}, {"refine": "em"}), ({"solver": "psgd"}, {"solver": "full"})],
)
def test_likelihood_methods_name_the_fit_not_the_parameters_set_since(fitted, set_after):
    # After set_params the message named the parameters set since: "need the
    # EM refinement's mixture (refine='em'), and it has ... refine='em'".
    X = make_mixture(300, 4, 2, noise=0.2, random_state=0)[0]
    model = AttentionClustering(2, random_state=0, max_iter=200, **fitted).fit(X)
    model.set_params(**set_after)
    with pytest.raises(AttributeError) as raised:
        model.bic(X)
    message = str(raised.value.__cause__)
    assert f"solver_={model.solver_!r}, refine_=None" in message
    assert "fit again" in message
    # Nothing set since: nothing said of it.
    model.set_params(**fitted)
    with pytest.raises(AttributeError) as raised:
        model.bic(X)
    assert str(raised.value.__cause__).endswith(
        f"was fitted with solver_={model.solver_!r}, refine_=None."
    )


# -- tight clusters at the bottom of float64's range


@pytest.mark.parametrize("exponent", [-1015, -1010])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_tight_clusters_near_the_smallest_numbers(exponent, sparse):
    # Clusters of spread 1e-3 at 2^-1010: the E step's keys beta / s and the
    # labels' gain r / (tau^2 s) were about 1e310, beyond float64: the fit
    # raised RuntimeWarnings and found NaN heads, labels and probabilities.
    # Now the fit is that of X (the suite turns the package's RuntimeWarnings
    # into errors), but concentration_, r / (tau^2 s), which is infinite.
    X, y, _ = make_mixture(400, 5, 3, noise=0.001, random_state=0)
    kind = sp.csr_matrix if sparse else np.asarray
    base = _quiet(AttentionClustering(3, random_state=0), kind(X))
    assert adjusted_rand_score(y, base.labels_) == 1.0
    Z = kind(np.ldexp(X, exponent))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        scaled = AttentionClustering(3, random_state=0).fit(Z)
    np.testing.assert_array_equal(scaled.labels_, base.labels_)
    np.testing.assert_array_equal(scaled.predict(Z), base.labels_)
    np.testing.assert_allclose(scaled.predict_proba(Z), base.predict_proba(kind(X)), atol=1e-9)
    np.testing.assert_allclose(scaled.cluster_centers_, base.cluster_centers_, rtol=1e-9)
    np.testing.assert_allclose(np.ldexp(scaled.means_, -exponent), base.means_, rtol=1e-9)
    assert np.all(np.isinf(scaled.concentration_))


def test_tight_float32_clusters_near_the_smallest_float32_numbers():
    # Float32 rows in 10 clusters of spread 1e-3 at 2^-110 (about 8e-34),
    # wide enough that the E step goes by float32 BLAS products: its keys
    # beta / s (about 1e39) overflowed float32, and the fit labelled every
    # row alike (ARI 0). Now it is the fit of X.
    X, y, _ = make_mixture(6000, 64, 10, noise=0.001, random_state=0)
    X = X.astype(np.float32)
    base = _quiet(AttentionClustering(10, random_state=0), X)
    assert adjusted_rand_score(y, base.labels_) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        scaled = AttentionClustering(10, random_state=0).fit(np.ldexp(X, -110))
    assert scaled.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(scaled.labels_, base.labels_)


# -- rows beyond float64's range at the fit's unit scale


@pytest.mark.parametrize("noise, exponent", [(0.05, 1020), (1e-4, 1000)])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_rows_beyond_the_range_of_the_fit_scale(noise, exponent, sparse):
    # Rows 2^1020 times a fit at unit scale, whose unit-scale entries leave
    # float64's range from 2^1024, and rows 2^1000 times a fit of tight
    # clusters, whose logits (products over a variance of 1e-8) do: their
    # posterior was NaN (inf - inf in the softmax), with RuntimeWarnings.
    # Now it is the limit as the row moves out, one-hot at argmax_k r_k <x -
    # m, mu_k> (here the label of the row it scales), the label agrees, and
    # the density and the score are -inf.
    X, _, _ = make_mixture(300, 4, 3, noise=noise, random_state=0)
    kind = sp.csr_matrix if sparse else np.asarray
    model = _quiet(AttentionClustering(3, random_state=0), kind(X))
    far = kind(np.ldexp(X[:20], exponent))
    labels = model.predict(far)
    np.testing.assert_array_equal(labels, model.labels_[:20])
    proba = model.predict_proba(far)
    np.testing.assert_array_equal(proba, np.eye(3)[labels])
    np.testing.assert_array_equal(model.score_samples(far), -np.inf)
    assert model.score(far) == -np.inf


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_zero_weight_rows_beyond_the_range_of_the_fit_scale(sparse):
    # A fit at 2^-1000 with rows of zero weight at about 1e150: those rows
    # are 2^1500 times the fit's scale. The fit's last pass labels every
    # row, and their values overflowed there (RuntimeWarnings, and ties
    # among infinite values: the first head). They now take the rule's
    # limit, the largest r_k <x - m, mu_k>, and the methods answer without
    # a warning.
    X, _, _ = make_mixture(300, 4, 3, noise=0.05, random_state=0)
    rng = np.random.default_rng(0)
    Xz = np.ldexp(X, -1000)
    Xz[:3] = rng.normal(size=(3, 4)) * 1e150
    w = np.r_[np.zeros(3), np.ones(297)]
    kind = sp.csr_matrix if sparse else np.asarray
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = AttentionClustering(3, random_state=0).fit(kind(Xz), sample_weight=w)
    raw = (Xz[:3] - model.mean_) @ model.cluster_centers_.T
    np.testing.assert_array_equal(model.labels_[:3], np.argmax(raw * model.mixture_.radii, axis=1))
    np.testing.assert_array_equal(model.predict(kind(Xz)), model.labels_)
    np.testing.assert_array_equal(model.predict_proba(kind(Xz))[:3], np.eye(3)[model.labels_[:3]])
    np.testing.assert_array_equal(model.score_samples(kind(Xz))[:3], -np.inf)
    assert np.isfinite(model.score(kind(Xz), sample_weight=w))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_rows_at_a_far_mean_are_not_beyond_the_range(sparse):
    # Two equal rows at 1.7e271 (found by the property tests at 2000
    # examples): centred, their unit-scale rows are zero, within range,
    # though the rows themselves are 2^900 times the scale (1, for rows
    # with no spread). Rows are beyond the range where their unit-scale
    # terms or logits are not numbers, not where the rows are large: the
    # posterior is 0.5 each, and the density finite. (Sparse rows' terms
    # were formed about the mean, whose square, about 3e542, left float64's
    # range: -inf; a column far from its spread is now stored centred.)
    X = np.array([[1.72513026e271], [1.72513026e271]])
    kind = sp.csr_matrix if sparse else np.asarray
    model = _quiet(AttentionClustering(2, random_state=0), X)
    np.testing.assert_allclose(model.predict_proba(kind(X)), 0.5)
    scores = model.score_samples(kind(X))
    assert np.all(np.isfinite(scores))
    np.testing.assert_array_equal(scores, model.score_samples(X))


def test_wide_rows_whose_scale_has_no_inverse_are_refused_clearly():
    # Rows of 1000 features run in the principal subspace, whose iteration
    # saw its subsample over the power of two of its largest entry: for
    # subnormal rows a scale whose inverse overflows (0 x inf in the
    # products, then NumPy's LinAlgError "Eigenvalues did not converge",
    # after the iteration's work). The iteration sees them at 2^-1022 at
    # least, and the fit refuses their scale as it does narrower rows'.
    X = np.random.default_rng(0).standard_normal((300, 1000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="a scale whose inverse float64 cannot hold"):
            AttentionClustering(2, random_state=0).fit(X * 1e-310)
        near = _quiet(AttentionClustering(2, random_state=0), np.ldexp(X, -1020))
    base = _quiet(AttentionClustering(2, random_state=0), X)
    np.testing.assert_array_equal(near.labels_, base.labels_)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_rows_whose_scale_has_no_inverse_are_refused_clearly(sparse):
    # Rows spread by about 1e-311 (subnormal numbers): every pass divides
    # the rows by their scale, whose inverse overflows. The fit failed deep
    # in the solver ('Initial heads must be finite and non-zero', after
    # RuntimeWarnings); it now says why after the first pass, and what to
    # do. At 2^-1022 (the smallest normal numbers) the fit is that of X.
    X, _, _ = make_mixture(400, 4, 3, noise=0.1, random_state=0)
    kind = sp.csr_matrix if sparse else np.asarray
    base = _quiet(AttentionClustering(3, random_state=0), kind(X))
    near = _quiet(AttentionClustering(3, random_state=0), kind(np.ldexp(X, -1022)))
    np.testing.assert_array_equal(near.labels_, base.labels_)
    with pytest.raises(ValueError, match="inverse float64 cannot hold.*power of two"):
        AttentionClustering(3, random_state=0).fit(kind(np.ldexp(X, -1030)))


def test_predict_proba_of_rows_near_the_largest_float_warns_nothing():
    # Rows of 1.7e308: predict labelled them quietly, predict_proba (whose
    # far rows take the label rule's limit, LabelRule.labels_of) gave the
    # same answer with two RuntimeWarnings of its product's overflow.
    X = make_mixture(200, 5, 3, noise=0.2, random_state=0)[0]
    model = AttentionClustering(3, random_state=0).fit(X)
    far = np.full((2, 5), 1.7e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = model.predict_proba(far)
        labels = model.predict(far)
    np.testing.assert_array_equal(np.argmax(proba, axis=1), labels)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


@pytest.mark.parametrize("far", [False, True], ids=["in-range", "beyond-range"])
def test_a_head_of_weight_zero_takes_no_row_of_the_numpy_label_rule(far):
    # The label rule of sparse rows (and of any array, LabelRule.labels_of)
    # took a head of weight zero, whose bias log(0) = -inf makes its values
    # -inf, for rows beyond the range; the rule's limit then divided by the
    # largest gain, zero where no centroid has a norm: a RuntimeWarning from
    # a partial_fit of sparse rows whose weighted rows are all equal. Only a
    # row whose largest value is not finite is beyond the range, and there
    # the limit, argmax_h gain_h <x, c_h> over the heads of positive weight.
    from attention_cluster._passes import LabelRule

    rng = np.random.default_rng(0)
    C = rng.standard_normal((3, 4))
    X0 = rng.standard_normal((30, 4))
    X = X0 * (2.0**1020 if far else 1.0)
    gain, bias = np.array([1.0, 2.0, 0.5]), np.array([0.0, -np.inf, 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = LabelRule(C, gain, bias).labels_of(X)
        sparse_labels = LabelRule(C, gain, bias).labels_of(sp.csr_matrix(X))
        zero_gain = LabelRule(C, np.zeros(3), bias).labels_of(X)
    # Beyond the range the bias is below the values' rounding: the limit.
    expected = np.argmax(
        gain * (X0 @ C.T) + (np.where(bias > -np.inf, 0.0, bias) if far else bias), axis=1
    )
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(sparse_labels, expected)
    assert 1 not in labels
    np.testing.assert_array_equal(zero_gain, 2)


def test_partial_fit_of_sparse_rows_whose_weighted_rows_are_equal():
    # The case the rule above reproduces, end to end: two weighted rows, the
    # same row, of data that repeat three rows (at two clusters: three are
    # refused, more than the rows of positive weight).
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(np.repeat(rng.standard_normal((3, 5)), 20, axis=0))
    w = np.zeros(60)
    w[[35, 36]] = [1.0, 3.0]
    model = AttentionClustering(2, solver="psgd", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", RuntimeWarning)
        model.fit(X, sample_weight=w)
        model.partial_fit(X, sample_weight=w)
    np.testing.assert_array_equal(model.predict(X), model.labels_)


# -- sparse rows centred without densifying them


def _fit_recorded(X, K, sample_weight=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = AttentionClustering(K, random_state=0).fit(X, sample_weight=sample_weight)
        proba = model.predict_proba(X)
    return model, proba, caught


def test_sparse_rows_with_a_constant_column_far_from_zero_fit_as_dense_rows():
    # A column of one value, pi 1e8, beside three clusters of unit spread:
    # sparse rows are centred inside the products ((X - 1 m^T) V), whose
    # expanded second moment gave that column a variance of rounding
    # errors, of the order of the clusters' (2.2e-16 x 1e16 per row
    # summed): a spurious direction. A column of one value x has the
    # variance (x - m)^2: stored centred (_passes._centred_storage), the
    # sparse fit is the dense one, with no warning.
    rng = np.random.default_rng(0)
    clusters = np.repeat(4.0 * np.eye(3), 100, axis=0) + rng.standard_normal((300, 3))
    X = np.hstack([clusters, np.full((300, 1), np.pi * 1e8)])
    dense, _, _ = _fit_recorded(X, 3)
    sparse, _, caught = _fit_recorded(sp.csr_matrix(X), 3)
    assert not [w for w in caught if w.category is RuntimeWarning]
    assert not any("not resolved" in str(w.message) for w in caught)
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, atol=1e-6)
    assert sparse.scale_ == pytest.approx(dense.scale_, rel=1e-6)


def test_sparse_rows_whose_weighted_rows_are_copies_of_one_row_fit_as_dense_rows():
    # The rows of positive weight are copies of one row: centred on their
    # weighted mean, only its rounding was left (a unit in the last place).
    # Sparse rows saw the rounding of the expanded moment instead, about
    # sqrt(n eps) = 1e-7 of the rows, fitted it as clusters at a scale of
    # 1e-9, and, where those errors summed to a negative mean square,
    # divided by a variance floored at zero (RuntimeWarnings); then dense
    # rows kept the mean's rounding (a scale of 1e-16) and sparse rows their
    # own. The mean is now corrected by the mean of the rows about it (a
    # two-pass mean): both are the row itself, the rows' spread about it
    # zero, and the fit is that of rows all zero (scale 1).
    rng = np.random.default_rng(3)
    X = np.repeat(rng.standard_normal((3, 5)), 20, axis=0)
    w = np.zeros(60)
    w[:20] = rng.integers(0, 3, 20)
    dense, _, _ = _fit_recorded(X, 2, w)
    sparse, proba, caught = _fit_recorded(sp.csr_matrix(X), 2, w)
    assert not [w for w in caught if w.category is RuntimeWarning]
    assert not any("not resolved" in str(w.message) for w in caught)
    assert sparse.scale_ == dense.scale_ == 1.0
    np.testing.assert_array_equal(dense.mean_, X[0])
    np.testing.assert_array_equal(sparse.mean_, X[0])
    assert sparse.mixture_.variance > 0.0
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


@pytest.mark.parametrize("kind", ["float64", "float32", "sparse", "dask"])
def test_a_constant_column_far_from_zero_is_centred_away(kind):
    # A column of one value, 1e20, beside three clusters of unit spread. The
    # mean is a sum divided by n, rounded at the sum's magnitude: the
    # centred column was some units in the last place of 1e20 (about 1e4),
    # far above the clusters, and the fit clustered that rounding (ARI 0).
    # The pass that reads the centred rows' spectrum reads their mean too,
    # and the rows are centred again on the corrected mean: the column is
    # zero, and the fit is that of the rows without it.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 200)
    clusters = 4.0 * np.eye(5)[labels] + rng.standard_normal((600, 5))
    X = np.hstack([clusters, np.full((600, 1), 1e20)])
    dtype = np.float32 if kind == "float32" else np.float64
    given = X.astype(dtype)
    if kind == "dask":
        da = pytest.importorskip("dask.array")
        given = da.from_array(X, chunks=(150, 6))
    if kind == "sparse":
        # Centred inside its products, the sparse column rounded at 1e20
        # (ARI 0): it is stored centred (_passes._centred_storage).
        given = sp.csr_matrix(X)
    model = _quiet(AttentionClustering(3, random_state=0), given)
    alone = _quiet(AttentionClustering(3, center=True, random_state=0), clusters.astype(dtype))
    assert model.center_
    assert model.mean_[-1] == dtype(1e20)
    assert adjusted_rand_score(np.asarray(model.labels_), alone.labels_) == 1.0
    assert np.max(np.abs(model.cluster_centers_[:, -1])) < 1e-6
    assert model.scale_ < 10.0


def test_rows_of_weight_zero_leave_a_far_sparse_column_stored_centred():
    # Rows of weight zero that lack the constant column (1e16) outnumbered
    # the rows that hold it, and the column was left centred inside the
    # products, rounding at the clusters' size (ARI 0, where the dense rows
    # give 1): the storage counted every row. It counts the rows of
    # positive weight, as the fit does; the others' labels are the dense
    # rows' too.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 200)
    clusters = 4.0 * np.eye(5)[labels] + rng.standard_normal((600, 5))
    X = np.vstack(
        [
            np.hstack([clusters, np.full((600, 1), 1e16)]),
            np.hstack([rng.standard_normal((700, 5)), np.zeros((700, 1))]),
        ]
    )
    w = np.r_[np.ones(600), np.zeros(700)]
    dense = _quiet(AttentionClustering(3, random_state=0), X, sample_weight=w)
    sparse = _quiet(AttentionClustering(3, random_state=0), sp.csr_matrix(X), sample_weight=w)
    assert adjusted_rand_score(labels, sparse.labels_[:600]) == 1.0
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)


@pytest.mark.parametrize("big", [1e180, 1e308])
def test_far_sparse_columns_of_very_different_means_are_all_stored_centred(big):
    # The columns' spreads were weighed at the scale of the largest mean: a
    # column of clusters about 1e10 beside a constant column of 1e180 had a
    # mean and a spread that both underflowed to 0 there, was left centred
    # inside the products, and rounded at 1e20 eps, far above its spread
    # (ARI 0, where the dense rows give 1). Each column is weighed at its own
    # (a mean of 1e308, whose power of two 2^1024 float64 cannot hold, over
    # 2^1022: it had warned of an overflow and left the column as it was).
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    X = np.column_stack(
        [
            np.full(200, big),
            1e10 + (2 * y - 1) + 0.1 * rng.standard_normal(200),
            0.1 * rng.standard_normal(200),
        ]
    )
    dense = _quiet(AttentionClustering(2, center=True, random_state=0), X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sparse = AttentionClustering(2, center=True, random_state=0).fit(sp.csr_matrix(X))
    assert not [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert adjusted_rand_score(y, sparse.labels_) == 1.0
    assert sparse.scale_ == pytest.approx(dense.scale_, rel=1e-9)
    np.testing.assert_allclose(
        dense.score_samples(sp.csr_matrix(X)), dense.score_samples(X), rtol=1e-12
    )


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_transform_centres_the_rows_before_the_heads(sparse):
    # transform formed x U - mean_ U, which rounds at |x| |U|: a head whose
    # component on a constant column of -1.2e77 is a rounding's (4e-19, as
    # a fuzzed fit left one) gave an output all rounding (error 1.59 on
    # outputs of at most 1.59). Against NumPy's ((x - mean_) U) out.
    X = make_mixture(300, 5, 2, noise=0.3, random_state=0)[0]
    X = np.hstack([X, np.full((300, 1), -1.2e77)])
    model = _quiet(AttentionClustering(2, center=True, random_state=0), X)
    model.cluster_centers_[:, -1] = -4.0e-19
    heads = model.cluster_centers_.T
    expected = ((X - model.mean_) @ heads) @ (
        model.temperature_ * model.n_clusters_ * model.moment_heads_
    )
    out = model.transform(sp.csr_matrix(X) if sparse else X)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    # A row's output does not depend on the rows beside it (sparse rows
    # centred by their chunk's far columns rounded as before beside rows
    # lacking the column: they are densified with the output's chunk).
    lacking = np.hstack([X[:20, :5], np.zeros((20, 1))])
    both = np.vstack([X[:10], lacking])
    out = model.transform(sp.csr_matrix(both) if sparse else both)[:10]
    np.testing.assert_allclose(out, expected[:10], rtol=0, atol=1e-12 * np.abs(expected).max())


def _exact_transform(model, rows):
    """``((x - mean_) U) (lambda K moment_heads_)`` of each row (math.md
    section 2's layer about the mean), in exact rational arithmetic."""
    from fractions import Fraction

    heads = model.cluster_centers_.T
    last = model.temperature_ * model.n_clusters_ * model.moment_heads_

    def exact(x, j):
        y = [Fraction(a) - Fraction(m) for a, m in zip(x, model.mean_)]
        projected = [sum(a * Fraction(h) for a, h in zip(y, column)) for column in heads.T]
        return float(sum(p * Fraction(o) for p, o in zip(projected, last[:, j])))

    return np.array([[exact(x, j) for j in range(last.shape[1])] for x in rows])


@pytest.mark.parametrize("fmt", ["dense", "csr", "csc"])
@pytest.mark.parametrize("center", [True, "auto"])
@pytest.mark.parametrize("small", [1e-20, 1e-100])
def test_transform_of_features_far_below_a_constant_column(small, center, fmt):
    # Features of 1e-20 (or 1e-100) beside a constant column of 1e300: the
    # rows were divided by the power of two of |x| and |mean_| (2^997)
    # before they were centred, which sent the features to subnormal
    # numbers, an output 3e-4 off for features of 1e-20 and all zero for
    # 1e-100. Against ((x - mean_) U) out in exact rational arithmetic.
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 20)
    features = (3.0 * np.c_[labels, 1 - labels] + rng.standard_normal((40, 2))) * small
    X = np.c_[np.full(40, 1e300), features]
    model = _quiet(AttentionClustering(2, center=center, random_state=0), X)
    assert model.mean_[0] == 1e300  # the constant column centred to zero
    rows = X[:6] if fmt == "dense" else sp.csr_matrix(X[:6]).asformat(fmt)
    out = model.transform(rows)
    expected = _exact_transform(model, X[:6])
    assert np.abs(expected).max() > small  # the features' output, not zero
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-14 * np.abs(expected).max())


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_transform_of_a_row_beyond_float64_from_the_mean(sparse):
    # Rows about -1.5e308 and a row at +1.5e308: x - mean_ passes float64's
    # range, ((x - mean_) U) out does not. Centred at the power of two of
    # the scale, the output is finite, as x U - mean_ U's was.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    X = np.column_stack(
        [
            -1.5e308 + 1e305 * rng.standard_normal(300),
            1e305 * (2 * y - 1) + 1e304 * rng.standard_normal(300),
            1e304 * rng.standard_normal(300),
        ]
    )
    model = _quiet(AttentionClustering(2, center=True, random_state=0), X)
    T = X[:3].copy()
    T[0, 0] = 1.5e308
    given = T.copy()
    out = model.transform(sp.csr_matrix(T) if sparse else T)
    assert np.all(np.isfinite(out))
    # Against the exact output, where x - mean_ passes float64's range.
    expected = _exact_transform(model, given)
    assert abs(expected[0, 0]) > 1e307  # beyond where x - mean_ is finite
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-14 * np.abs(expected).max())
    np.testing.assert_array_equal(T, given)  # (the rows are centred in a copy)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("fitted, given", [(1e-300, 1e10), (1e10, 1e-300)])
def test_transform_of_rows_far_from_the_fitted_scale(fitted, given, sparse):
    # transform(c X) = c transform(X) for a fitted model, also where c X is
    # far from the scale of the rows it was fitted on: the rows centred at
    # the power of two of the fit's scale overflowed (FloatingPointError) or
    # underflowed to 0 there; a chunk is taken at its own largest entry.
    X = make_mixture(300, 8, 3, noise=0.3, random_state=0)[0]
    model = _quiet(AttentionClustering(3, random_state=0), X * fitted)
    unit = model.transform(X[:4] * fitted) / fitted
    rows = X[:4] * given
    out = model.transform(sp.csr_matrix(rows) if sparse else rows)
    np.testing.assert_allclose(out / given, unit, rtol=1e-12)


def test_auto_counts_past_a_constant_column_far_from_zero():
    # The dynamics' centred tokens kept the rounding of the 1e20 column's
    # mean (ulps of it, against features of 1 at that scale 1e-20 of it):
    # n_clusters="auto" answered 2 (ARI 0.54) where the rows without the
    # column give 3. The tokens are centred by a two-pass mean.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 200)
    clusters = 4.0 * np.eye(5)[labels] + rng.standard_normal((600, 5))
    X = np.hstack([clusters, np.full((600, 1), 1e20)])
    model = _quiet(AttentionClustering("auto", random_state=0), X)
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(labels, model.labels_) == 1.0


@pytest.mark.parametrize("seed", [2, 5, 9])
def test_sparse_rows_at_a_mean_far_beyond_their_spread_fit_as_dense_rows(seed):
    # Rows 1e8 from zero with a unit spread: centred inside the products,
    # (X - 1 m^T) V = X V - 1 (m^T V) kept no digit of the spread (terms of
    # 1e8 rounding at 1e-8 of it, the expanded moment's at 1e16 x 2.2e-16
    # per row summed), and the fit warned that the spread was not resolved.
    # Columns whose mean dwarfs their spread are stored centred
    # (_passes._centred_storage): the sparse fit is the dense one.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((50, 4)) + 1e8
    sparse, proba, caught = _fit_recorded(sp.csr_matrix(X), 2)
    dense, dense_proba, dense_caught = _fit_recorded(X, 2)
    assert [str(w.message) for w in caught] == [str(w.message) for w in dense_caught]
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    # Both centre the rows about their mean, summed in other orders: the
    # means differ by units in the last place of 1e8 (1.5e-8), a shift of
    # every centred row, and the posteriors by a few times that (at most 13
    # such units over 40 seeds on one machine; below 1 on another).
    np.testing.assert_allclose(proba, dense_proba, atol=64 * np.spacing(1e8))
    assert sparse.scale_ == pytest.approx(dense.scale_, rel=1e-9)


def test_a_sparse_stream_whose_column_is_far_from_its_spread_is_the_dense_stream():
    # A column 1e8 from zero, spread 1e-5, in the first batch of a stream
    # (read twice: the fit, then the stream's first update): its spread was
    # not resolved in sparse rows (a warning, twice). Stored centred, the
    # sparse stream is the dense one.
    rng = np.random.default_rng(0)
    X = make_mixture(400, 5, 2, noise=0.2, random_state=0)[0]
    X[:, 0] = 1e8 + 1e-5 * rng.standard_normal(400)
    models = []
    for given in (X, sp.csr_matrix(X)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = AttentionClustering(2, center=True, random_state=0)
            model.partial_fit(given[:200]).partial_fit(given[200:])
        models.append((model, [str(w.message) for w in caught]))
    (dense, dense_caught), (sparse, caught) = models
    assert caught == dense_caught
    np.testing.assert_array_equal(sparse.predict(X), dense.predict(X))
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, atol=1e-6)


def test_the_variance_floor_of_rows_whose_mean_square_rounds_below_zero():
    # MIN_VARIANCE of the mean square per feature, and of 1 where the mean
    # square is zero or (a sum of rounding errors) negative: never zero.
    from attention_cluster._model import MIN_VARIANCE, SphericalMixture

    for mean_sq in (0.0, -1e-9):
        mixture = SphericalMixture.from_heads(
            np.eye(2), np.ones(2), 0.0, np.log([0.5, 0.5]), mean_sq, np.zeros(2), 1.0
        )
        assert mixture.variance == MIN_VARIANCE


def test_the_second_moment_of_sparse_rows_about_their_mean_against_numpy():
    # math.md section 7, "Sparse rows about their mean": the expanded
    # moment, the columns whose mean is far from their spread stored
    # centred, against the weighted moment of the rows centred before they
    # are squared (NumPy). The column of one value far from zero had a
    # variance of rounding errors in the hundreds; its variance about the
    # mean (which rounding puts 1e-7 off the value) is (x - m)^2, with no
    # warning.
    from attention_cluster._passes import SparseRows

    rng = np.random.default_rng(0)
    X = np.hstack([rng.standard_normal((500, 3)) * [1.0, 2.0, 0.5], np.full((500, 1), np.pi * 1e8)])
    X[rng.random(500) < 0.3, 1] = 0.0
    w = rng.integers(1, 4, 500).astype(float)
    mean = w @ X / w.sum()
    centred = X - mean
    expected = (centred * w[:, None]).T @ centred / w.sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moment = SparseRows(sp.csr_matrix(X), w).centred(mean).second_moment()
    np.testing.assert_allclose(moment, expected, rtol=1e-10, atol=1e-12)
    assert moment[3, 3] == pytest.approx(expected[3, 3], rel=1e-6)
    assert np.all(np.linalg.eigvalsh(moment) >= -1e-12)


def _spiked_rows():
    base = np.array([-2.18, 0.0, -3.45, -4.84, 2.40, 3.19, -0.174, -5.95, -3.41, 2.32, 1.65, 0.0])
    X = np.array([base, base])
    X[0, :11] += [-0.16, 0, -0.30, -0.01, -0.05, 0.04, 0.09, -0.18, 0.04, -0.15, -0.08]
    X[:, 11] = [-2791933500.2458477, -2791933500.3103681]
    X[1, 1] = 4.0653122310205549e159
    return X


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize(
    "case",
    ["pairs", "spike"],
)
def test_rows_near_the_range_warn_of_nothing_numpy_says(case, sparse):
    # Found by fuzzing, dense and sparse alike: an L-BFGS pair whose <s, y>
    # was positive but below 1 / 1.8e308 made the two-loop's rho infinite
    # (overflow, then inf x 0); a leading eigenvalue 1e318 times the noise's
    # overflowed in spike_overlap. The pair is dropped, and the overlap of
    # a signal beyond float64 is its limit, 1.
    X = np.array([[1.0, 1e160], [0.0, 0.0], [2.0, 1e160]]) if case == "pairs" else _spiked_rows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = AttentionClustering(1, center=True, random_state=0).fit(
            sp.csr_matrix(X) if sparse else X
        )
    assert not [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert np.all(np.isfinite(model.cluster_centers_))


@pytest.mark.parametrize("n_clusters", [2, "auto"])
@pytest.mark.parametrize("heavy", [1e100, 1e300])
def test_one_row_of_overwhelming_weight_warns_of_nothing_numpy_says(heavy, n_clusters):
    # One row weighing 1e100 beside 599 of weight 1: centred on it, the
    # others lie 1e48 scales out, the exact objective's terms pass float64
    # and its gradient is infinite. The solver ran 40 overflowing halvings
    # of its line search (RuntimeWarnings from the library, 41 a fit, and
    # from the fits n_clusters="auto" compared and dropped). It stops at a
    # gradient beyond float64; the NumPy kernels overflow as the compiled
    # ones do, silently.
    X = make_mixture(600, 8, 3, noise=0.3, random_state=1)[0]
    w = np.ones(len(X))
    w[0] = heavy
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = AttentionClustering(n_clusters, random_state=0).fit(X, sample_weight=w)
        proba = model.predict_proba(X)
    assert not [str(w.message) for w in caught if w.category is RuntimeWarning]
    if n_clusters == 2:
        # The stop is said for what it is: not a line search's decrease
        # within rounding (whose advice, a larger tol, is no cure).
        stops = [str(w.message) for w in caught if w.category is ConvergenceWarning]
        assert stops and all("gradient passed float64's range" in m for m in stops)
        assert not any("increase tol" in m for m in stops)
    assert np.all(np.isfinite(model.cluster_centers_))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_a_warm_stage_whose_gradient_overflows_is_not_polished(monkeypatch):
    # Beyond WARM_START_ROWS rows the exact solver's warm stage on a
    # subsample is polished by Newton steps on all rows: after a warm stage
    # that stopped at a gradient beyond float64 (a row weighing 1e100), the
    # polish's products overflowed with NumPy's warnings (refine=None, which
    # polishes). The warm stage's stop stands.
    from attention_cluster import _exact

    monkeypatch.setattr(_exact, "WARM_START_ROWS", 100)
    X = make_mixture(600, 8, 3, noise=0.3, random_state=1)[0]
    w = np.ones(len(X))
    w[0] = 1e100
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = AttentionClustering(2, refine=None, random_state=0).fit(X, sample_weight=w)
    assert not [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert any("gradient passed float64's range" in str(w.message) for w in caught)
    assert np.all(np.isfinite(model.cluster_centers_))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_a_finite_row_far_behind_a_head_warns_of_nothing(sparse):
    # Its largest logit finite, another beyond float64: the logits'
    # division overflowed to -inf with NumPy's RuntimeWarning (pointing in
    # the library) in predict_proba, score_samples and bic. That logit is
    # -inf, its posterior 0, and nothing is warned.
    X = make_mixture(2000, 10, 3, noise=0.4, random_state=0)[0]
    model = AttentionClustering(3, random_state=0).fit(X)
    row = -1e308 * model.cluster_centers_[1:2]
    row = sp.csr_matrix(row) if sparse else row
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = model.predict_proba(row)
        scores = model.score_samples(row)
        model.bic(row)
    np.testing.assert_array_equal(proba.sum(axis=1), 1.0)
    assert proba[0, 1] == 0.0 and np.argmax(proba[0]) == model.predict(row)[0]
    assert scores[0] == -np.inf


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_rows_beyond_the_range_take_no_component_of_weight_zero(sparse):
    # A fitted component of weight zero (EM can empty one; here set so): for
    # rows beyond float64's range at the fit's scale, predict took the
    # labels' limit over the components of positive weight, while
    # predict_proba put probability 1 on the largest r_k <x - m, mu_k> of
    # all of them, the empty one included. Both now take the one limit.
    from dataclasses import replace

    X, _, _ = make_mixture(300, 4, 3, noise=0.05, random_state=0)
    kind = sp.csr_matrix if sparse else np.asarray
    model = _quiet(AttentionClustering(3, random_state=0), kind(X))
    log_weights = model.mixture_.log_weights.copy()
    log_weights[1] = -np.inf
    log_weights -= logsumexp(log_weights)
    model.mixture_ = replace(model.mixture_, log_weights=log_weights)
    far = kind(np.ldexp(X[model.labels_ == 1][:5], 1020))
    labels = model.predict(far)
    assert 1 not in labels
    np.testing.assert_array_equal(model.predict_proba(far), np.eye(3)[labels])


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_an_entry_stored_twice_counts_once(fmt):
    # scipy keeps an entry stored as several values (their sum is the
    # entry). The squared norms summed the squares of the stored values:
    # score, score_samples and bic changed sign, and the noise was 0 at K >= d.
    X = make_mixture(300, 4, 5, noise=0.3, centroids="random", random_state=0)[0]
    matrix = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    twice = matrix(_stored_twice(X, fmt), shape=X.shape)
    assert twice.nnz == 2 * np.count_nonzero(X)
    np.testing.assert_array_equal(twice.toarray(), X)
    once = sp.csr_matrix(X) if fmt == "csr" else sp.csc_matrix(X)
    got = AttentionClustering(5, random_state=0).fit(twice)
    want = AttentionClustering(5, random_state=0).fit(once)
    assert got.noise_scale_ == want.noise_scale_ > 0
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    for method in ("score_samples", "predict_proba", "transform"):
        np.testing.assert_array_equal(getattr(got, method)(twice), getattr(want, method)(once))
    assert got.score(twice) == want.score(once) and got.bic(twice) == want.bic(once)
    assert twice.nnz == 2 * np.count_nonzero(X)  # the caller's matrix is not changed


def _stored_twice(X, fmt):
    """``(data, indices, indptr)`` of X in ``fmt`` with every entry stored as two halves."""
    A = X if fmt == "csr" else X.T
    data, indices, indptr = [], [], [0]
    for row in A:
        (nz,) = np.nonzero(row)
        data += [*(0.5 * row[nz]), *(0.5 * row[nz])]
        indices += [*nz, *nz]
        indptr.append(len(indices))
    return np.array(data), np.array(indices, dtype=np.int32), np.array(indptr, dtype=np.int32)


def test_transform_beyond_the_dtypes_range_raises_as_the_layers_do():
    # A stream fixed its scale at a first batch of zeros; the second batch's
    # rows, 1e15 at that scale, are within a float32 stream's limit, and
    # their layer output (about 1e47) is not: transform returned inf without
    # a word, where InContextQuantizer and the layers raise.
    first = np.zeros((7, 3), np.float32)
    later = np.array([[1e15, 1e15, 5.6e15], [3e14, 4.7e15, 1e15], [0, 0, 1e15]], np.float32)
    model = AttentionClustering(3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # rows all equal, then 3 rows for 3 clusters
        model.partial_fit(first).partial_fit(later)
    with pytest.raises(FloatingPointError, match="overflowed"):
        model.transform(later)
    assert np.all(np.isfinite(model.transform(later.astype(np.float64))))


def test_rows_out_of_order_without_repeats_are_not_copied():
    # TF-IDF's rows hold their columns out of order: canonicalising them
    # copied and sorted every non-zero (the users' data page's 20000 x 49542
    # matrix: predict's traced peak 6 MB to 27 MB) for a case they never have.
    from attention_cluster._passes import SparseRows

    X = sp.random(300, 50, density=0.2, format="csr", random_state=0)
    reversed_rows = sp.csr_matrix((X.data.copy(), X.indices.copy(), X.indptr.copy()), shape=X.shape)
    for i in range(X.shape[0]):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        reversed_rows.indices[lo:hi] = X.indices[lo:hi][::-1]
        reversed_rows.data[lo:hi] = X.data[lo:hi][::-1]
    reversed_rows.has_sorted_indices = False
    assert np.shares_memory(SparseRows(reversed_rows)._X.data, reversed_rows.data)


@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "weighted"])
def test_the_second_moment_of_sparse_rows_shares_their_structure(weighted, traced_peak):
    # The moment made about four copies of the non-zeros (a copy of the
    # rows, their values over c, the weighted rows in COO, then in CSR): a
    # fit's traced peak was 3.0 times the rows' data and indices, weighted
    # or not. The scaled and the weighted rows share the rows' structure
    # now: 1.7 and 2.3 times (bounds 2.2 and 2.8 below).
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.random((40_000, 50)))
    w = rng.random(X.shape[0]) + 0.5 if weighted else None
    size = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    AttentionClustering(5, random_state=0).fit(
        X[:20_000], sample_weight=w[:20_000] if weighted else None
    )
    _, peak = traced_peak(lambda: AttentionClustering(5, random_state=0).fit(X, sample_weight=w))
    assert peak < (2.8 if weighted else 2.2) * size


# -- one cluster of centred rows


@pytest.mark.parametrize("refine", ["em", None])
@pytest.mark.parametrize("offset", [0.0, 3.0], ids=["near-origin", "offset"])
def test_one_centred_cluster_has_one_centre_for_every_input_kind(offset, refine):
    # The one centroid of centred rows is their mean: the EM's sum of the
    # rows, zero but for rounding (1e-17 in float64, 1e-8 in float32), gave
    # the head its direction, so float32, CSR and reversed rows had other
    # cluster_centers_, transform and score than float64 rows. The head now
    # keeps the solver's direction, at radius 0. Without the EM the head's
    # sign came from that rounding too (refine=None: the centre flipped
    # between the kinds).
    X = make_mixture(200, 4, 2, noise=0.3, random_state=0)[0] + offset
    kinds = {
        "float64": X,
        "float32": X.astype(np.float32),
        "csr": sp.csr_matrix(X),
        "reversed": X[::-1],
    }
    fits = {
        name: _quiet(AttentionClustering(1, center=True, refine=refine, random_state=0), Z)
        for name, Z in kinds.items()
    }
    reference = fits["float64"]
    for name, model in fits.items():
        np.testing.assert_allclose(
            model.cluster_centers_, reference.cluster_centers_, atol=1e-6, err_msg=name
        )
        np.testing.assert_allclose(
            model.transform(X), reference.transform(X), rtol=1e-5, atol=1e-6, err_msg=name
        )
        assert model.score(X) == pytest.approx(reference.score(X), rel=1e-6), name
    assert all(model.center_ for model in fits.values())
    if refine is not None:
        assert all(model.mixture_.radii[0] == 0.0 for model in fits.values())


# -- a fit with no step to take


@pytest.mark.parametrize("n_clusters", [1, "auto"])
def test_repeated_rows_fit_without_a_convergence_warning(n_clusters):
    # 20 copies of one row: the exact solver starts at the row's direction,
    # its gradient at rounding level (2e-16). A step forced there found no
    # decrease, and the fit warned that it had reached max_iter=500 after 0
    # iterations; the start is within the solver's tolerance: no step.
    X = np.tile([[1.0, 2.0, 3.0, 4.0]], (20, 1))
    with warnings.catch_warnings():
        # The notice that the clusters have no spread; then the solver's.
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", ConvergenceWarning)
        model = AttentionClustering(n_clusters, random_state=0).fit(X)
    assert model.n_iter_ == 0


def test_fewer_distinct_rows_than_clusters_warns_of_the_empty_clusters():
    # 300 rows of 3 binary patterns, K = 5: with the EM refinement the
    # notice that the clusters have no spread returned before the check of
    # empty clusters, and two of the five received no point unannounced
    # (refine=None, which has no mixture to floor, said so).
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, (3, 8)).astype(float)[rng.integers(0, 3, 300)]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = AttentionClustering(5, random_state=0).fit(X)
    assert np.sum(np.bincount(model.labels_, minlength=5) == 0) == 2
    messages = [str(w.message) for w in record if w.category is UserWarning]
    assert any("no spread" in m for m in messages)
    assert any(
        "2 of the n_clusters=5 clusters received fewer than" in m
        and "fewer distinct rows than n_clusters" in m
        for m in messages
    ), messages


def test_small_clusters_of_rows_at_their_centres_are_not_said_to_be_missing_rows():
    # Three distinct rows, 294, 4 and 2 times, K = 3: the fit is exact, two
    # clusters are small (the usual notice), but none is empty: X holds as
    # many distinct rows as clusters, which the advice said it might not.
    X = np.eye(3, 8)[np.repeat([0, 1, 2], [294, 4, 2])]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = AttentionClustering(3, center=False, random_state=0).fit(X)
    assert sorted(np.bincount(model.labels_, minlength=3)) == [2, 4, 294]
    messages = [str(w.message) for w in record if w.category is UserWarning]
    assert any("received fewer than" in m for m in messages), messages
    assert not any("fewer distinct rows" in m for m in messages), messages


def test_the_exact_solvers_warning_says_why_it_stopped(monkeypatch):
    # A solver that stops with no step that decreases the objective (at
    # tol=0, the rounding-level gradient of 20 copies of one row, where the
    # rounding lets no step pass: which it does depends on the machine, so
    # the line search is made to find none) says so, not that max_iter was
    # reached.
    from attention_cluster import _optimize

    rows = np.tile([[1.0, 2.0, 3.0, 4.0]], (20, 1))
    with monkeypatch.context() as patch, warnings.catch_warnings(record=True) as record:
        patch.setattr(_optimize, "_armijo", lambda *args, **kwargs: None)
        warnings.simplefilter("always")
        AttentionClustering(1, tol=0.0, random_state=0).fit(rows)
    messages = [str(w.message) for w in record if w.category is ConvergenceWarning]
    assert len(messages) == 1
    assert "stopped after 0 iterations, as no step along the gradient" in messages[0]
    assert "max_iter" not in messages[0]
    X = make_mixture(300, 5, 2, noise=0.3, random_state=0)[0]
    with pytest.warns(ConvergenceWarning, match="it reached max_iter=2 iterations"):
        AttentionClustering(2, refine=None, tol=0.0, max_iter=2, random_state=0).fit(X)
    # Before the EM refinement the solver aims at 5000 tol (_exact.START_TOL):
    # its warning quoted tol alone.
    with pytest.warns(ConvergenceWarning, match=r"reach tol=1e-09 \(x 5000 before the EM"):
        AttentionClustering(2, tol=1e-9, max_iter=1, random_state=0).fit(X)


# -- wide float32 rows near the top of float32's range


@pytest.mark.parametrize("exponent", [100, 120, 125])
@pytest.mark.parametrize("offset", [0.0, 2.0], ids=["near-origin", "offset"])
def test_wide_float32_rows_near_float32s_largest_numbers(exponent, offset):
    # Float32 rows wider than the fused kernels' 16 features are summed by
    # float32 tiles of 1024 rows: from about 3e35 their column sums (the
    # first pass's mean) and the E step's sums passed float32's range, and
    # the fit refused X ("contains infinity", after centring on an infinite
    # mean) or its centres ("must be finite"). The mean is now the scaled
    # chunk's, and the E step's rows are shifted towards x / s, as float64
    # rows are beyond 2^900: the partition of 2^k X is that of X.
    # 5000 x 64 rows: above _passes._COMPILE_MIN_SIZE numbers, so that the
    # E step runs its float32 BLAS products (3000 rows ran NumPy's float64).
    X, y, _ = make_mixture(5000, 64, 4, noise=0.2, random_state=0)
    assert X.size >= _passes._COMPILE_MIN_SIZE
    X = (X + offset).astype(np.float32)
    big = np.ldexp(X, exponent)
    assert np.max(np.abs(big)) < np.finfo(np.float32).max
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = _quiet(AttentionClustering(4, random_state=0), big)
    unit = _quiet(AttentionClustering(4, random_state=0), X)
    assert adjusted_rand_score(model.labels_, unit.labels_) == 1.0
    assert model.center_ == unit.center_ == (offset > 0)
    np.testing.assert_allclose(model.mean_, np.ldexp(unit.mean_, exponent), rtol=1e-6)


def _far_row_of_a_tight_mixture():
    rng = np.random.default_rng(0)
    X = np.vstack(
        [rng.normal(size=(50, 2)) * 1e-3 + [4, 0], rng.normal(size=(50, 2)) * 1e-3 - [4, 0]]
    )
    model = AttentionClustering(2, random_state=0).fit(X)
    far = np.array([[1e153, 0.0]])
    assert model.score_samples(far)[0] == -np.inf and model.bic(far) == np.inf


def _float32_tracers_of_the_unnormalised_model():
    from attention_cluster import SelfAttentionDynamics

    X = np.array([[2e19, 0], [2e19, 0], [0, 2e19], [0, 2e19], [2e18, 1.8e19]], dtype=np.float32)
    model = SelfAttentionDynamics(model="unnormalized", step_size=0.1, beta=1.0, max_iter=3)
    labels = model.fit(X, sample_weight=[1, 1, 1, 1, 0]).labels_
    assert labels[4] == labels[2] != labels[0]


def _a_subnormal_spread_refused():
    X = np.column_stack([np.full(6, 1e-200), np.arange(1, 7) * 1e-318])
    with pytest.raises(ValueError, match="spread about their mean"):
        AttentionClustering(2, center=True, random_state=0).fit(X)


@pytest.mark.parametrize(
    "case",
    [
        _far_row_of_a_tight_mixture,
        _float32_tracers_of_the_unnormalised_model,
        _a_subnormal_spread_refused,
    ],
    ids=["far-row-likelihood", "float32-tracers", "subnormal-spread"],
)
def test_no_runtime_warning_escapes(case):
    # A fuzzing audit's findings: numpy's RuntimeWarnings (overflow in q / 2v
    # of a far row, whose log-likelihood -inf is right; float32 tracers'
    # logits of the unnormalised model, which steps in float64; 0 x inf in
    # the moments before the ScaleError that refuses a subnormal spread).
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        case()


# -- one instance through a life: refits over input kinds and parameters


_LIFE_X = make_mixture(240, 5, 3, noise=0.3, random_state=0)[0]
_LIFE_INPUTS = {
    "dense": _LIFE_X,
    "sparse": sp.csr_matrix(_LIFE_X),
    "float32": _LIFE_X.astype(np.float32),
    "named": pd.DataFrame(_LIFE_X, columns=[f"f{i}" for i in range(5)]),
}


@pytest.mark.parametrize(
    "estimator, life",
    [
        (
            AttentionClustering(random_state=0),
            [
                ({"n_clusters": "auto"}, "named", "fit"),
                ({"n_clusters": 3, "refine": None, "center": True}, "sparse", "fit"),
                ({"n_clusters": 2, "solver": "psgd", "max_iter": 200}, "float32", "fit"),
                ({}, "named", "partial_fit"),
                (
                    {"n_clusters": 3, "solver": "auto", "refine": "auto", "center": "auto"},
                    "dense",
                    "fit",
                ),
            ],
        ),
        (
            SelfAttentionDynamics(random_state=0),
            [
                ({"model": "unnormalized", "step_size": 0.1, "beta": 1.0}, "named", "fit"),
                ({"model": "sa", "step_size": "mean-shift", "max_samples": 100}, "sparse", "fit"),
                ({"beta": 10.0, "max_samples": "auto"}, "dense", "fit"),
            ],
        ),
        (
            InContextQuantizer(),
            [
                ({"n_clusters": 3, "attention": "softmax", "temperature": 2.0}, "named", "fit"),
                ({"n_clusters": 2, "attention": "linear", "temperature": "auto"}, "dense", "fit"),
            ],
        ),
    ],
    ids=["AttentionClustering", "SelfAttentionDynamics", "InContextQuantizer"],
)
def test_a_refit_leaves_the_state_of_a_fresh_fit(estimator, life):
    # Each fit of an estimator refitted over input kinds and parameters
    # (fitted attributes, feature names, the stream's and the choice's state)
    # equals a fresh estimator's fit of the same X: nothing of an earlier fit
    # survives where the later one does not write it.
    model = clone(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for params, kind, method in life:
            getattr(model.set_params(**params), method)(_LIFE_INPUTS[kind])
            if method == "fit":
                fresh = clone(model).fit(_LIFE_INPUTS[kind])
                assert same_state(vars(model), vars(fresh)), (params, kind)
    assert not hasattr(model, "feature_names_in_")


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copy_at_any_stage_goes_on_as_the_original(how):
    # A copy taken before the first fit, after a fit or within a stream goes
    # on, by fits and batches, to the original's state, a RandomState
    # instance's draws included (the copy holds its own at the same state).
    def copied(model):
        return pickle.loads(pickle.dumps(model)) if how == "pickle" else copy.deepcopy(model)

    X = _LIFE_X
    model = AttentionClustering(3, random_state=np.random.RandomState(0), init="random")
    steps = [("fit", X), ("partial_fit", X[:80]), ("partial_fit", X[80:160]), ("fit", X[:120])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, rows in steps:
            copy_ = copied(model)
            getattr(model, method)(rows)
            getattr(copy_, method)(rows)
            assert same_state(vars(model), vars(copy_)), method


# -- tables of other libraries, and lists of dates


class _ListDtypesTable:
    """What the dtype check reads of a polars DataFrame: ``columns`` and
    ``dtypes`` as lists (the dtypes polars' own types), an Arrow ``schema``;
    its rows are a pyarrow Table's."""

    def __init__(self, table):
        self._table = table
        self.columns = list(table.column_names)
        self.dtypes = [str(t) for t in table.schema.types]
        self.schema = table.schema
        self.shape = table.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._table, dtype=dtype)


def test_tables_of_other_libraries_are_read_and_their_dates_refused():
    # The dtype check read any object with dtypes and columns as a pandas
    # frame: a polars DataFrame, whose dtypes are a list, raised
    # "AttributeError: 'list' object has no attribute 'items'" for rows of
    # numbers, and polars' or pyarrow's dates and durations, and a list of
    # NumPy's dates, were read as counts of their unit since 1970.
    pa = pytest.importorskip("pyarrow")
    X = make_mixture(60, 3, 2, noise=0.3, random_state=0)[0]
    numbers = pa.table({f"x{j}": X[:, j] for j in range(3)})
    reference = AttentionClustering(2, random_state=0).fit(X)
    # A frame whose dtypes map the columns to types of its own (no Arrow schema).
    own_types = _ListDtypesTable(numbers)
    own_types.dtypes, own_types.schema = dict(zip(own_types.columns, own_types.dtypes)), None
    for model in (AttentionClustering(2, random_state=0), SelfAttentionDynamics()):
        fitted = model.fit(_ListDtypesTable(numbers))
        model.fit(own_types)
        if isinstance(model, AttentionClustering):
            np.testing.assert_array_equal(fitted.cluster_centers_, reference.cluster_centers_)
    days = (np.arange(60) * 86400).astype("m8[s]")
    tables = {
        "date32[day]": pa.array(np.datetime64("2020-01-01") + days.astype("m8[D]")),
        "timestamp[s, tz=UTC]": pa.array(np.datetime64("2020-01-01") + days).cast(
            pa.timestamp("s", tz="UTC")
        ),
        "duration[s]": pa.array(days),
        "dictionary<values=timestamp[s], indices=int32, ordered=0>": pa.array(
            np.datetime64("2020-01-01", "s") + days
        ).dictionary_encode(),
    }
    for shown, column in tables.items():
        kind = "durations" if "duration" in shown else "dates"
        table = pa.table({"t": column, "x1": X[:, 1]})
        for rows in (table, _ListDtypesTable(table)):
            with pytest.raises(
                TypeError, match=re.escape(f"Column 't' of X has Arrow type {shown}, {kind},")
            ):
                AttentionClustering(2).fit(rows)
    dates = [[np.datetime64("2020-01-01") + i, np.datetime64("2021-01-01") - i] for i in range(60)]
    for rows in (dates, [tuple(row) for row in dates]):
        calls = (
            AttentionClustering(2).fit,
            InContextQuantizer(2).fit,
            lambda rows: attention_flow(rows, n_steps=1),
        )
        for call in calls:
            with pytest.raises(TypeError, match=r"X has dtype=datetime64\[D\], dates,"):
                call(rows)


@pytest.mark.parametrize("kind", ["dates", "durations"])
def test_numpys_dates_among_objects_are_refused_by_the_functions(kind):
    # attention_flow and choose_n_clusters read NumPy's dates or durations
    # among objects (an array, a list whose first row holds none) as the
    # counts of their unit, as NumPy's cast of objects to float64 reads them.
    X = make_mixture(60, 3, 2, noise=0.3, random_state=0)[0]
    days = [np.timedelta64(i, "D") for i in range(60)]
    values = [np.datetime64("2020-01-01") + d for d in days] if kind == "dates" else days
    objects = X.astype(object)
    objects[:, 2] = values
    listed = objects.tolist()
    listed[0] = X[0].tolist()
    calls = (
        lambda rows: attention_flow(rows, n_steps=1),
        lambda rows: choose_n_clusters(rows, AttentionClustering(), n_clusters_range=[2, 3]),
    )
    for call in calls:
        for rows in (objects, listed):
            with pytest.raises(TypeError, match=rf"Column 2 of X has dtype=object, .*, {kind},"):
                call(rows)


def test_a_list_of_rows_is_converted_once(monkeypatch):
    # check_dtypes reads a list as the array NumPy makes of it (its dates may
    # be in any row), and scikit-learn's check_array then converted the list
    # a second time. The float64 array is passed on; a list whose array is
    # not float64 (np.float32 values, read in float64 by check_array) is
    # left as it is. Counted by the conversions of a list of this length.
    from attention_cluster import _validation

    X = make_mixture(200, 3, 2, noise=0.3, random_state=0)[0]
    rows = X.tolist()
    converted = []
    asarray = np.asarray

    def counted(a, *args, **kwargs):
        if isinstance(a, list) and len(a) == len(rows):
            converted.append(1)
        return asarray(a, *args, **kwargs)

    monkeypatch.setattr(np, "asarray", counted)
    model = AttentionClustering(2, random_state=0).fit(rows)
    monkeypatch.undo()
    assert len(converted) == 1
    assert np.array_equal(
        model.cluster_centers_, AttentionClustering(2, random_state=0).fit(X).cluster_centers_
    )
    assert isinstance(_validation.check_dtypes(rows), np.ndarray)
    float32_rows = [[np.float32(v) for v in row] for row in rows]
    assert _validation.check_dtypes(float32_rows) is float32_rows
    assert (
        AttentionClustering(2, random_state=0).fit(float32_rows).cluster_centers_.dtype
        == np.float64
    )
