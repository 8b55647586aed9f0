"""AttentionClustering's mixture likelihood (math.md section 7) against SciPy and Monte Carlo."""

import copy
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.preprocessing import Normalizer

from attention_cluster import AttentionClustering, SphericalMixture
from attention_cluster._model import MIN_VARIANCE
from attention_cluster.datasets import make_mixture


def _unequal_norms(n=3000, seed=0):
    """The paper's mixture (d = 5, noise 0.4) with its centroids at norms 0.6, 1 and 1.8."""
    _, y, C = make_mixture(
        n, n_features=5, n_clusters=3, noise=0.0, weights=[0.2, 0.3, 0.5], random_state=seed
    )
    noise = 0.4 * np.random.default_rng(seed).standard_normal((n, 5))
    return np.array([0.6, 1.0, 1.8])[y, None] * C[y] + noise, y, C


@pytest.fixture(scope="module", params=["equal", "free"])
def fitted(request):
    # The default fit on the paper's mixture (equal norms), and the fit with
    # one norm per centroid on clusters at three norms.
    if request.param == "equal":
        X, y, C = make_mixture(
            3000, n_features=5, n_clusters=3, noise=0.4, weights=[0.2, 0.3, 0.5], random_state=0
        )
        return AttentionClustering(3, random_state=0).fit(X), X
    X, _, _ = _unequal_norms()
    return AttentionClustering(3, centroid_norms="free", random_state=0).fit(X), X


def _scipy_components(model, X):
    """log pi_k + log N(x; m_k, v_k I), one column per component, from scipy.stats."""
    d = X.shape[1]
    return np.column_stack(
        [
            np.log(w) + multivariate_normal(mean=m, cov=v * np.eye(d)).logpdf(X)
            for w, m, v in zip(model.weights_, model.means_, model.covariances_)
        ]
    )


def test_score_samples_is_the_mixture_density(fitted):
    model, X = fitted
    np.testing.assert_allclose(
        model.score_samples(X[:200]),
        logsumexp(_scipy_components(model, X[:200]), axis=1),
        rtol=1e-10,
    )


def test_predict_proba_is_the_posterior(fitted):
    model, X = fitted
    comp = _scipy_components(model, X[:200])
    posterior = np.exp(comp - logsumexp(comp, axis=1, keepdims=True))
    proba = model.predict_proba(X[:200])
    np.testing.assert_allclose(proba, posterior, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(np.argmax(proba, axis=1), model.predict(X[:200]))


def test_bic_and_aic_count_the_free_parameters(fitted):
    model, X = fitted
    n, d = X.shape
    loglik = np.sum(logsumexp(_scipy_components(model, X), axis=1))
    free = model.centroid_norms_ == "free"
    # The means' degrees of freedom (any 3 points with free norms, or about
    # the mean when 3 <= d + 1; else 3 directions, the norm and the mean),
    # noise, weights.
    if free or (model.center_ and 3 <= d + 1):
        means = 3 * d
    else:
        means = 3 * (d - 1) + 1 + (d if model.center_ else 0)
    p = means + 1 + (3 - 1)
    np.testing.assert_allclose(model.bic(X), -2 * loglik + p * np.log(n), rtol=1e-10)
    np.testing.assert_allclose(model.aic(X), -2 * loglik + 2 * p, rtol=1e-10)


@pytest.mark.parametrize("free", [False, True])
def test_one_gaussian_centred_or_not_has_one_bic(free, global_random_seed):
    # The same density (one spherical Gaussian) about the origin or about the
    # mean counted d more parameters centred: BIC d log n higher. It is
    # scikit-learn's GaussianMixture(1, "spherical")'s, d + 1 parameters.
    X = np.random.default_rng(global_random_seed).normal(size=(1000, 10)) + 3.0
    norms = {"centroid_norms": "free" if free else "equal"}
    plain = AttentionClustering(1, center=False, random_state=0, **norms).fit(X)
    centred = AttentionClustering(1, center=True, random_state=0, **norms).fit(X)
    assert centred.bic(X) == pytest.approx(plain.bic(X), rel=1e-9)
    gaussian = GaussianMixture(1, covariance_type="spherical").fit(X)
    assert centred.bic(X) == pytest.approx(gaussian.bic(X), rel=1e-6)


def test_fitted_mixture_structure(fitted):
    model, _ = fitted
    offsets = model.means_ - model.mean_
    norms = np.linalg.norm(offsets, axis=1)
    if model.centroid_norms_ == "equal":
        np.testing.assert_allclose(norms, norms[0], rtol=1e-10)  # one common norm r
    else:
        assert np.ptp(norms) > 0.5 * np.max(norms)  # norms 0.6, 1 and 1.8 (times 1 / s)
    np.testing.assert_allclose(offsets / norms[:, None], model.cluster_centers_, atol=1e-12)
    assert np.ptp(model.covariances_) == 0
    # concentration_ is r_h / (tau^2 s): ||m_h - mean_|| / covariances_.
    np.testing.assert_allclose(model.concentration_, norms / model.covariances_, rtol=1e-10)


def test_auto_norms_follow_the_data(global_random_seed):
    # centroid_norms="auto": equal on the paper's mixture, free on clusters at
    # norms 0.6, 1 and 1.8, where free norms find the classes better.
    X, y, _ = make_mixture(
        3000, n_features=5, n_clusters=3, noise=0.4, random_state=global_random_seed
    )
    assert AttentionClustering(3, random_state=0).fit(X).centroid_norms_ == "equal"
    X, y, _ = _unequal_norms(seed=global_random_seed)
    auto = AttentionClustering(3, random_state=0).fit(X)
    equal = AttentionClustering(3, centroid_norms="equal", random_state=0).fit(X)
    assert auto.centroid_norms_ == "free" and equal.centroid_norms_ == "equal"
    assert auto.bic(X) < equal.bic(X)
    assert adjusted_rand_score(y, auto.labels_) > adjusted_rand_score(y, equal.labels_)


def test_density_integrates_to_one(global_random_seed):
    # Monte Carlo: E_q[p(x) / q(x)] = 1 for a wide Gaussian proposal q.
    X, _, _ = make_mixture(
        2000, n_features=2, n_clusters=2, noise=0.3, random_state=global_random_seed
    )
    model = AttentionClustering(2, random_state=0).fit(X)
    q = multivariate_normal(mean=np.zeros(2), cov=4 * np.eye(2))
    draws = q.rvs(size=200_000, random_state=global_random_seed)
    ratio = np.exp(model.score_samples(draws) - q.logpdf(draws))
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / np.sqrt(len(ratio)) + 1e-3


def test_mean_log_likelihood_near_the_true_models(global_random_seed):
    # n = 20000 points of the model itself: the fitted density's mean
    # log-likelihood on new points is within 0.01 nats of the true density's.
    rng = np.random.default_rng(global_random_seed)
    X, _, C = make_mixture(
        20000, n_features=6, n_clusters=3, noise=0.5, random_state=global_random_seed
    )
    model = AttentionClustering(3, random_state=0).fit(X)
    Xnew, _, _ = make_mixture(
        20000,
        n_features=6,
        n_clusters=3,
        noise=0.5,
        centroids=C,
        random_state=int(rng.integers(2**31)),
    )
    true = logsumexp(
        [np.log(1 / 3) + multivariate_normal(mean=c, cov=0.25 * np.eye(6)).logpdf(Xnew) for c in C],
        axis=0,
    )
    assert abs(model.score_samples(Xnew).mean() - true.mean()) < 0.01


def test_bic_chooses_the_number_of_clusters(global_random_seed):
    X, _, _ = make_mixture(
        4000, n_features=8, n_clusters=3, noise=0.4, random_state=global_random_seed
    )
    bics = [AttentionClustering(K, random_state=0).fit(X).bic(X) for K in range(1, 6)]
    assert int(np.argmin(bics)) + 1 == 3


def test_no_likelihood_without_the_refinement():
    model = AttentionClustering(2, solver="full", refine=None, random_state=0)
    assert not hasattr(model, "score_samples")
    model.fit(make_mixture(300, n_features=4, n_clusters=2, random_state=0)[0])
    for name in ("score_samples", "predict_proba", "bic", "aic"):
        assert not hasattr(model, name)
    assert model.centroid_norms_ is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_auto_norms_stay_equal_on_rows_of_one_norm(dtype):
    # On a sphere a cluster's mean norm measures its spread, not its place:
    # rows of one norm (TF-IDF, Normalizer's output) keep equal norms under
    # "auto"; "free" is still honoured.
    X, _, _ = _unequal_norms()
    unit = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(dtype)
    assert AttentionClustering(3, random_state=0).fit(unit).centroid_norms_ == "equal"
    free = AttentionClustering(3, centroid_norms="free", random_state=0).fit(unit)
    assert free.centroid_norms_ == "free"
    # The same rows at three norms: the test of the norms decides again.
    scaled = unit * np.array([1.0, 2.0, 3.0])[np.arange(len(unit)) % 3, None]
    assert AttentionClustering(3, random_state=0).fit(scaled).centroid_norms_ == "free"


def test_auto_norms_of_centred_rows_of_one_norm_are_the_likelihood_s():
    # Rows of one norm, centred, lie on a sphere about minus the mean, not
    # about the model's origin: the test of the norms decides (math.md
    # section 7, "One norm per centroid"). Iris after Normalizer, centred by
    # center="auto", kept equal norms and left one cluster empty (ARI 0.57).
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    unit = Normalizer().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the centring notice
        model = AttentionClustering(3, random_state=0).fit(unit)
        uncentred = AttentionClustering(3, center=False, random_state=0).fit(unit)
    assert model.center_ and model.centroid_norms_ == "free"
    assert np.bincount(model.labels_, minlength=3).min() >= 0.1 * len(X) / 3
    kmeans = KMeans(3, n_init=10, random_state=0).fit(unit)
    assert adjusted_rand_score(y, model.labels_) >= adjusted_rand_score(y, kmeans.labels_) - 0.02
    assert uncentred.centroid_norms_ == "equal"


def _mixture_arguments(fitted):
    mixture = fitted[0].mixture_
    return {
        name: getattr(mixture, name)
        for name in ("centers", "radii", "variance", "log_weights", "offset", "scale")
    }


@pytest.mark.parametrize(
    "change, match",
    [
        ({"variance": -1.0}, "variance must be one positive number"),
        ({"variance": np.nan}, "variance must be finite"),
        ({"scale": 0.0}, "scale must be one positive number"),
        ({"scale": np.ones(3)}, "scale must be one positive number"),
        ({"radii": np.ones(2)}, r"radii must have shape \(3,\)"),
        ({"offset": np.zeros(4)}, r"offset must have shape \(5,\)"),
        ({"centers": np.ones(5)}, "centers must have shape"),
        ({"centers": 1.0}, r"centers must have shape \(n_clusters, n_features\), got \(\)"),
        ({"log_weights": np.full(3, -np.inf)}, "one finite at least"),
        ({"log_weights": np.array([0.0, np.nan, 0.0])}, "log_weights must be finite or -inf"),
        ({"log_weights": np.array([0.0, np.inf, -np.inf])}, "log_weights must be finite or -inf"),
        (
            {"log_weights": np.array([np.nan, -np.inf, -np.inf])},
            "log_weights must be finite or -inf",
        ),
        ({"offset": np.array([0.0, np.nan, 0.0, 0.0, 0.0])}, "offset must be finite"),
        ({"scale": np.inf}, "scale must be finite"),
        ({"variance": np.array([0.1])}, "variance must be one positive number"),
        ({"log_weights": np.zeros(3)}, "must sum to one"),
        ({"centers": 3.0 * np.eye(3, 5)}, "centers must be unit vectors"),
        ({"radii": np.array([1.0, -1.0, 1.0])}, "radii must be >= 0"),
        ({"radii": np.ones(3) + 1j}, "radii must be real numbers"),
        ({"variance": "0.1"}, "variance must be real numbers"),
        ({"centers": [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0]]}, "centers must be real numbers"),
        ({"offset": [0.0, [0.0, 0.0]]}, "offset must be real numbers"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_mixture_of_invalid_parameters_raises(fitted, change, match):
    # Its methods would return NaN (a negative or NaN variance, no component
    # of positive weight), broadcast arrays of other shapes, complex numbers,
    # or a density that is not one (weights not summing to one, centers
    # whose norm the formulas take as 1: 13.30 for the density's -5.70).
    with pytest.raises(ValueError, match=match):
        SphericalMixture(**{**_mixture_arguments(fitted), **change})


@pytest.mark.parametrize(
    "method, P_shape, q_shape",
    [
        ("labels", (5, 1), None),
        ("posteriors", (5, 2), None),
        ("logits", (5,), None),
        ("log_likelihoods", (5, 3), (5, 1)),
        ("log_likelihoods", (5, 4), (5,)),
    ],
)
def test_mixture_methods_refuse_terms_of_other_shapes(method, P_shape, q_shape):
    # One column of P was broadcast over the K components (labels all 0),
    # and q of shape (n, 1) gave an (n, n) array of log-likelihoods.
    mixture = SphericalMixture(
        np.eye(3, 4), np.ones(3), 0.1, np.log(np.full(3, 1 / 3)), np.zeros(4), 1.0
    )
    args = [np.ones(P_shape)] + ([] if q_shape is None else [np.ones(q_shape)])
    with pytest.raises(ValueError, match="must have shape"):
        getattr(mixture, method)(*args)
    # The shapes it takes:
    assert mixture.log_likelihoods(np.ones((5, 3)), np.ones(5)).shape == (5,)


def test_mixture_keeps_read_only_copies_of_its_arrays():
    # The mixture shared its caller's arrays: a later change to them reached
    # it past its checks (centers that are not unit vectors).
    given = {
        "centers": np.eye(2, 3),
        "radii": np.ones(2),
        "log_weights": np.log([0.25, 0.75]),
        "offset": np.zeros(3),
    }
    kept = {name: a.copy() for name, a in given.items()}
    mixture = SphericalMixture(**given, variance=0.1, scale=1.0)
    for name, a in given.items():
        a[0] = 5.0
        np.testing.assert_array_equal(getattr(mixture, name), kept[name])
        with pytest.raises(ValueError, match="read-only"):
            getattr(mixture, name)[0] = 5.0
        # Nor can they be made writeable again (a read-only copy could).
        with pytest.raises(ValueError, match="WRITEABLE"):
            getattr(mixture, name).setflags(write=True)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copied_mixture_is_checked_and_read_only_again(fitted, how):
    # Pickling (joblib.dump of a fitted estimator) and deepcopy restored the
    # arrays writeable, past the constructor's checks: centres set to 3
    # gave a positive log-density.
    import pickle

    mixture = fitted[0].mixture_
    copied = pickle.loads(pickle.dumps(mixture)) if how == "pickle" else copy.deepcopy(mixture)
    assert copied is not mixture
    for name in ("centers", "radii", "log_weights", "offset"):
        np.testing.assert_array_equal(getattr(copied, name), getattr(mixture, name))
        with pytest.raises(ValueError, match="read-only"):
            getattr(copied, name)[0] = 3.0
    assert (copied.variance, copied.scale) == (mixture.variance, mixture.scale)


def test_mixture_means_overflow_to_infinity_not_nan():
    # s r_k beyond float64 times a zero coordinate of mu_k gave NaN (and a
    # RuntimeWarning): the mean m + s r_k mu_k is infinite only where it is.
    mixture = SphericalMixture(
        centers=np.eye(2),
        radii=[2.0, 2.0],
        variance=0.1,
        log_weights=np.log([0.5, 0.5]),
        offset=[0.0, 1.0],
        scale=1e308,
    )
    np.testing.assert_array_equal(mixture.means, [[np.inf, 1.0], [0.0, np.inf]])


def test_mixture_compares_and_hashes_by_identity(fitted):
    mixture = fitted[0].mixture_
    assert mixture == mixture and mixture != copy.deepcopy(mixture)
    assert len({mixture, mixture}) == 1


def test_mixture_covariance_of_a_python_float_scale_overflows_to_infinity(fitted):
    mixture = SphericalMixture(**{**_mixture_arguments(fitted), "scale": 1e200})
    assert np.all(mixture.covariances == np.inf)


def test_mixture_covariance_is_finite_where_it_fits_in_float64(fitted):
    # (s tau)^2 was s^2 tau^2, and s^2 overflowed alone: 1e155 tight clusters
    # gave infinite covariances where they are about 1e304.
    arguments = _mixture_arguments(fitted)
    mixture = SphericalMixture(**{**arguments, "scale": 1e155, "variance": 1e-6})
    np.testing.assert_allclose(mixture.covariances, 1e304, rtol=1e-12)


def test_the_floor_s_warning_does_not_say_distinct_rows_are_equal():
    # Clusters of distinct rows whose spread is below the variance floor
    # were said to have "every row equal to its cluster's centre".
    rng = np.random.default_rng(0)
    X = np.vstack([100 * np.eye(3)[k] + 1e-5 * rng.normal(size=(100, 3)) for k in range(2)])
    with pytest.warns(UserWarning, match="no spread above the variance floor") as record:
        AttentionClustering(2, random_state=0).fit(X)
    assert not any("every row equals" in str(w.message) for w in record)


@pytest.mark.parametrize(
    "heads, match",
    [
        (1.0, r"heads must have shape \(n_features, n_clusters\), got \(\)"),
        (np.ones(3), r"heads must have shape .*, got \(3,\)"),
        (np.ones((3, 0)), r"heads must have shape .*, got \(3, 0\)"),
        (np.ones((2, 3, 1)), r"heads must have shape .*, got \(2, 3, 1\)"),
        ("heads", "heads must be real numbers, got str"),
        ([[1.0, 0.0], [0.0]], "heads must be real numbers, got list"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_mixture_from_heads_of_the_wrong_shape_raises(heads, match):
    # A heads matrix of no second axis gave an IndexError (one number) or a
    # message about the centers the caller did not pass.
    with pytest.raises(ValueError, match=match):
        SphericalMixture.from_heads(heads, np.ones(1), 0.1, np.zeros(1), 1.0, np.zeros(3), 1.0)


def test_point_clusters_variance_is_the_floor_of_the_rows_mean_square():
    # SphericalMixture.from_heads' one floor: MIN_VARIANCE times the rows'
    # mean squared norm over d, per coordinate (a factor d off went unseen).
    rng = np.random.default_rng(0)
    d = 4
    X = 5.0 * np.eye(d)[:3][rng.integers(0, 3, 300)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AttentionClustering(3, random_state=0).fit(X)
    floor = MIN_VARIANCE * np.mean(np.sum(X * X, axis=1)) / d
    np.testing.assert_allclose(model.covariances_, floor, rtol=1e-9)
