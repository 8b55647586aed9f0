"""scikit-learn's estimator checks on every public estimator, and its meta-estimators around them."""

import inspect

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning, UnsetMetadataPassedError
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from attention_cluster import AttentionClustering, InContextQuantizer, SelfAttentionDynamics
from attention_cluster._plan import resolve_methods
from attention_cluster.datasets import make_mixture


def _expected_failed_checks(estimator):
    """Checks that fail by design, each with its reason."""
    refined = isinstance(estimator, AttentionClustering) and (
        resolve_methods(estimator.solver, estimator.refine)[1] == "em"
    )
    if refined:
        # The refined estimator has predict_proba, and takes sparse X in every method.
        reason = (
            "scikit-learn's sparse checks read the classifier tags of any estimator with "
            "predict_proba and expect one column per class; a clusterer has no classifier "
            "tags, so the check stops on an AttributeError after fit and predict succeed. "
            "Every method on X of the checks' formats (CSR, CSC, COO, DOK, LIL, DIA, BSR, "
            "64-bit indices; as arrays, CSR and CSC) is compared with dense X in "
            "tests/test_capabilities.py."
        )
        return {
            "check_estimator_sparse_array": reason,
            "check_estimator_sparse_matrix": reason,
            "check_transformer_n_iter": (
                "n_iter_ counts the exact solver's steps. Where the EM refinement "
                "follows, the solver only needs a start in the refinement's basin, and "
                "a spectral start already within that tolerance takes no step (the "
                "check's two tight blobs): n_iter_ is then 0, and the refinement's "
                "passes are refine_n_iter_ (tested in tests/test_full.py)."
            ),
        }
    if isinstance(estimator, AttentionClustering) and estimator.solver == "psgd":
        reason = (
            "PSGD draws rows with probability proportional to their weight: "
            "integer weights equal repeated rows in distribution, but the "
            "check shuffles the rows, so the random draws differ."
        )
        return {
            "check_sample_weight_equivalence_on_dense_data": reason,
            "check_sample_weight_equivalence_on_sparse_data": reason,
        }
    if isinstance(estimator, InContextQuantizer):
        return {
            "check_methods_subset_invariance": (
                "The output of a token depends on the whole prompt by design "
                "(paper, section 5): transforming a subset of the rows is not "
                "the subset of the transformed rows."
            ),
        }
    return {}


@parametrize_with_checks(
    [
        AttentionClustering(random_state=0),
        AttentionClustering(solver="full", random_state=0),
        AttentionClustering(solver="full", refine=None, random_state=0),
        AttentionClustering(solver="psgd", random_state=0),
        AttentionClustering(n_clusters="auto", random_state=0),
        InContextQuantizer(),
        InContextQuantizer(attention="softmax"),
        InContextQuantizer(temperature=0.5),
        SelfAttentionDynamics(),
        SelfAttentionDynamics(model="usa", beta=3.0, step_size=0.5),
        SelfAttentionDynamics(model="unnormalized", beta=0.5, step_size=0.1),
        SelfAttentionDynamics(max_samples=10, random_state=0),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# -- scikit-learn's meta-estimators: metadata routing, searches in worker processes

_WEIGHTED_ESTIMATORS = [
    AttentionClustering(2, center=True, random_state=0),
    SelfAttentionDynamics(random_state=0),
]


def _weighted_blobs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    X[:60] += 4.0
    return X, rng.uniform(0.1, 3.0, size=120)


def _fitted_state(model):
    """What a fit learned: the heads where the estimator has them, else its labels."""
    return getattr(model, "cluster_centers_", model.labels_)


@pytest.mark.parametrize(
    "estimator", [AttentionClustering(), SelfAttentionDynamics(), InContextQuantizer()]
)
def test_every_method_that_takes_sample_weight_can_request_it(estimator):
    # Metadata routing reads the methods' signatures: each method that takes
    # sample_weight has its set_<method>_request, and the request is what the
    # estimator says it consumes. fit_predict and fit_transform take the fit's.
    weighted = [
        name
        for name, method in inspect.getmembers(estimator, inspect.ismethod)
        if not name.startswith("_") and "sample_weight" in inspect.signature(method).parameters
    ]
    with sklearn.config_context(enable_metadata_routing=True):
        for name in weighted:
            if name in ("fit_predict", "fit_transform"):
                assert "fit" in weighted
                continue
            model = getattr(clone(estimator), f"set_{name}_request")(sample_weight=True)
            assert model.get_metadata_routing().consumes(name, ["sample_weight"]) == {
                "sample_weight"
            }
    fits_with_weights = not isinstance(estimator, InContextQuantizer)
    assert ("fit" in weighted) == fits_with_weights


@pytest.mark.parametrize("estimator", _WEIGHTED_ESTIMATORS, ids=lambda e: type(e).__name__)
def test_a_pipeline_passes_the_weights_to_the_fit_with_and_without_routing(estimator):
    # The weights a Pipeline routes (or passes as step__sample_weight) give
    # the direct fit with the same weights, which differs from the unweighted
    # fit; weights the estimator has not requested are refused, as KMeans'.
    X, w = _weighted_blobs()
    scaled = StandardScaler().fit_transform(X)
    direct = _fitted_state(clone(estimator).fit(scaled, sample_weight=w))
    assert not np.array_equal(direct, _fitted_state(clone(estimator).fit(scaled)))
    step = type(estimator).__name__.lower()
    pipeline = make_pipeline(StandardScaler(), clone(estimator))
    pipeline.fit(X, **{f"{step}__sample_weight": w})
    np.testing.assert_array_equal(_fitted_state(pipeline[-1]), direct)
    with sklearn.config_context(enable_metadata_routing=True):
        routed = make_pipeline(
            StandardScaler().set_fit_request(sample_weight=False),
            clone(estimator).set_fit_request(sample_weight=True),
        ).fit(X, sample_weight=w)
        np.testing.assert_array_equal(_fitted_state(routed[-1]), direct)
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            make_pipeline(clone(estimator)).fit(X, sample_weight=w)
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            GridSearchCV(clone(estimator), {"random_state": [0]}, scoring=_no_score).fit(
                X, sample_weight=w
            )


def test_cross_validate_routes_the_weights_to_fit_and_to_score():
    # Each fold's score is the weighted score of the weighted fit on the other
    # folds; with score's request declined, the unweighted score of that fit.
    X, w = _weighted_blobs()
    estimator = AttentionClustering(2, center=True, random_state=0)
    folds = KFold(3, shuffle=True, random_state=0)
    fits = [clone(estimator).fit(X[train], sample_weight=w[train]) for train, _ in folds.split(X)]
    tests = [test for _, test in folds.split(X)]
    weighted = [fit.score(X[test], sample_weight=w[test]) for fit, test in zip(fits, tests)]
    unweighted = [fit.score(X[test]) for fit, test in zip(fits, tests)]
    assert not np.allclose(weighted, unweighted)
    with sklearn.config_context(enable_metadata_routing=True):
        for score_request, expected in [(True, weighted), (False, unweighted)]:
            model = clone(estimator).set_fit_request(sample_weight=True)
            model.set_score_request(sample_weight=score_request)
            scores = cross_validate(model, X, params={"sample_weight": w}, cv=folds)["test_score"]
            np.testing.assert_allclose(scores, expected, rtol=1e-12)


def _no_score(estimator, X, y=None):
    return 0.0


def _minus_bic(estimator, X, y=None):
    # BIC is lower for the better model; a scorer is higher for it.
    return -estimator.bic(X)


@pytest.mark.filterwarnings("ignore:One or more of the test scores are non-finite")
def test_a_search_in_worker_processes_is_the_search_in_this_process():
    # The estimators travel to loky's worker processes by pickle and fit there
    # as here; a candidate whose parameter is refused scores error_score (NaN)
    # with scikit-learn's FitFailedWarning, which names the parameter.
    X, _, _ = make_mixture(150, 4, 3, noise=0.3, random_state=0)
    folds = KFold(2, shuffle=True, random_state=0)

    def search(n_jobs):
        search = GridSearchCV(
            AttentionClustering(random_state=0),
            {"n_clusters": [2, 3, 0]},
            scoring=_minus_bic,
            cv=folds,
            n_jobs=n_jobs,
        )
        with pytest.warns(FitFailedWarning, match="n_clusters must be >= 1"):
            return search.fit(X)

    in_workers, here = search(2), search(1)
    np.testing.assert_array_equal(
        in_workers.cv_results_["mean_test_score"], here.cv_results_["mean_test_score"]
    )
    assert np.isnan(here.cv_results_["mean_test_score"][2])
    assert in_workers.best_params_ == {"n_clusters": 3}
    dynamics = SelfAttentionDynamics(random_state=0)
    runs = [
        cross_validate(
            dynamics, X, cv=folds, scoring=_no_score, n_jobs=n_jobs, return_estimator=True
        )
        for n_jobs in (2, 1)
    ]
    for in_worker, in_process in zip(*(run["estimator"] for run in runs)):
        np.testing.assert_array_equal(in_worker.predict(X), in_process.predict(X))
