"""scikit-learn's estimator checks on every public estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from attention_cluster import AttentionClustering, InContextQuantizer, SelfAttentionDynamics
from attention_cluster._plan import resolve_methods


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
            "Every method on sparse X is compared with dense X in tests/test_capabilities.py."
        )
        return {
            "check_estimator_sparse_array": reason,
            "check_estimator_sparse_matrix": reason,
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
