"""scikit-learn's estimator checks over every public estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from attention_cluster import InContextQuantizer


def _expected_failed_checks(estimator):
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
    [InContextQuantizer(), InContextQuantizer(attention="softmax"), InContextQuantizer(temperature=0.5)],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
