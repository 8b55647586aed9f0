"""Every parameter check raises InvalidParameterError, caught as ValueError and as TypeError.

The grid is generated: each public estimator and function, each of its
parameters (its signature's names that are not data), a value of the wrong
type and a wrong value. A new parameter or a new public function fails
:func:`test_every_parameter_has_its_bad_values` until it is given its
entries here.
"""

import inspect
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.cluster import KMeans

import attention_cluster
from attention_cluster import (
    AttentionClustering,
    InContextQuantizer,
    InvalidParameterError,
    SelfAttentionDynamics,
    attention_flow,
    choose_n_clusters,
    datasets,
    layers,
    metrics,
    plot_n_clusters_scores,
    theory,
    warm_up,
)

X = datasets.make_mixture(60, 4, 2, noise=0.1, random_state=0)[0]
CENTROIDS = np.eye(2, 4)
HEADS = np.eye(2, 4)[::-1]

# Arguments that are the data a function works on, not parameters: their
# errors are check_array's (ValueError), tested with each function.
DATA = {
    "X",
    "sample_weight",
    "tokens",
    "heads",
    "heads0",
    "centroids",
    "estimated",
    "true",
    "labels",
    "scores",
    "ax",
    "eigenvalues",
}

# A value of the wrong type and a wrong value of each parameter (by name;
# NO_WRONG_VALUE where every value of the right type is valid).
NO_WRONG_VALUE = object()
BAD = {
    "n_clusters": ("2", 0),
    "n_features": ("4", 0),
    "n_samples": ("60", 0),
    "n_sequences": ("2", 0),
    "n_prompts": ("2", 0),
    "n_documents": ("10", 0),
    "n_topics": ("2", 0),
    "n_words": ("50", 0),
    "document_length": ("5", 0),
    "n_draws": ("1000", 1),
    "n_steps": ("2", -1),
    "sequence_length": ("50", 0),
    "batch_size": ("2", 0),
    "max_iter": ("100", -1),
    "n_init": ("1", 0),
    "n_threads": (1.5, 0),
    "chunk_size": ("1024", 0),
    "max_samples": ("all", 0),
    "verbose": ("loud", -1),
    "noise": ("0.3", -1.0),
    "temperature": ("hot", -1.0),
    "beta": ("1", 0.0),
    "reg_strength": ("strong", -1.0),
    "learning_rate": ("1", 0.0),
    "step_size": ([0.1], 0.0),
    "tol": ([1e-4], -1.0),
    "cluster_tol": ("0.01", 0.0),
    "min_cluster_size": ("2%", 2.5),
    "offset": ("1", -1.0),
    "topic_share": ("0.3", 1.5),
    "zipf_exponent": ("1.1", 0.0),
    "alignment": ("0.5", 2.0),
    "kappa0": ("0.5", 2.0),
    "kappa1": ("0.5", 2.0),
    "eta0": ("0", 2.0),
    "eta1": ("0", 2.0),
    "xi": ("0", 2.0),
    "weights": ("uniform", [0.9, 0.9]),
    "random_state": ("seed", -1),
    "regularization": (1, "l2"),
    "solver": (1, "adam"),
    "refine": (1, "kmeans"),
    "centroid_norms": (1, "unit"),
    "gradient": (1, "newton"),
    "center": (1.5, "yes"),
    "init": (1.5, "k-means++"),
    "attention": (1, "relu"),
    "model": (1, "transformer"),
    "stopping": (1, "never"),
    "kind": (1, "grid"),
    "output": (1, "tokens"),
    "dtype": (3.5, "int64"),
    "query": ("identity", np.eye(3)),
    "key": ("identity", np.eye(3)),
    "value": ("identity", np.eye(3)),
    "record": ("all", [2, 1]),
    "n_clusters_range": (5, [0, 2]),
    "estimator": (KMeans(2), AttentionClustering(init=CENTROIDS)),
    "client": ("localhost", NO_WRONG_VALUE),
}
# Where a name's wrong value differs by function.
BAD_IN = {
    ("make_centroids", "kind"): (1, "grid"),
    ("make_mixture", "centroids"): (1.5, "grid"),
    ("make_sequences", "centroids"): (1.5, "grid"),
    ("information_limit", "weights"): ("uniform", [0.0, 1.0]),
    ("information_limit", "noise"): ("0.3", 0.0),
}

# Each public callable: how to call it with its valid arguments, ``kwargs``
# overriding them. Estimators are fitted on X.
CALLS = {
    "AttentionClustering": lambda **kw: AttentionClustering(**kw).fit(X),
    "InContextQuantizer": lambda **kw: InContextQuantizer(**kw).fit(X),
    "SelfAttentionDynamics": lambda **kw: SelfAttentionDynamics(**kw).fit(X),
    "attention_flow": lambda **kw: attention_flow(**{"X": X, "n_steps": 2, **kw}),
    "choose_n_clusters": lambda **kw: choose_n_clusters(
        **{"X": X, "estimator": AttentionClustering(random_state=0), **kw}
    ),
    "plot_n_clusters_scores": lambda **kw: plot_n_clusters_scores(**{"scores": {1: 3}, **kw}),
    "warm_up": warm_up,
    "make_centroids": lambda **kw: datasets.make_centroids(
        **{"n_clusters": 2, "n_features": 4, **kw}
    ),
    "make_mixture": lambda **kw: datasets.make_mixture(**{"n_samples": 20, "n_features": 4, **kw}),
    "make_sequences": lambda **kw: datasets.make_sequences(
        **{"n_sequences": 2, "sequence_length": 5, **kw}
    ),
    "make_prompts": lambda **kw: datasets.make_prompts(
        **{"n_prompts": 2, "sequence_length": 5, **kw}
    ),
    "make_corpus": lambda **kw: datasets.make_corpus(
        **{"n_documents": 10, "n_words": 50, "document_length": 5, **kw}
    ),
    "make_embeddings": lambda **kw: datasets.make_embeddings(
        **{"n_samples": 20, "n_features": 8, **kw}
    ),
    "linear_attention": lambda **kw: layers.linear_attention(X[:10], HEADS, **kw),
    "softmax_attention": lambda **kw: layers.softmax_attention(X[:10], HEADS, **kw),
    "in_context_attention": lambda **kw: layers.in_context_attention(X[:10], **kw),
    "in_context_softmax_attention": lambda **kw: layers.in_context_softmax_attention(X[:10], **kw),
    "centroid_distance": lambda **kw: metrics.centroid_distance(HEADS, CENTROIDS),
    "class_means_distance": lambda **kw: metrics.class_means_distance(
        X, np.arange(60) % 2, CENTROIDS
    ),
    "match_centroids": lambda **kw: metrics.match_centroids(HEADS, CENTROIDS),
    "bayes_error": lambda **kw: metrics.bayes_error(**{"centroids": CENTROIDS, "noise": 0.3, **kw}),
    "interference": lambda **kw: metrics.interference(**{"noise": 0.3, **kw}),
    "information_limit": lambda **kw: metrics.information_limit(
        **{"centroids": CENTROIDS, "noise": 0.3, "n_samples": 100, "n_draws": 1000, **kw}
    ),
    "spectral_visibility": lambda **kw: metrics.spectral_visibility(
        **{"centroids": CENTROIDS, "noise": 0.3, "n_samples": 100, **kw}
    ),
}
_NOISE_L = {"noise": 0.3, "sequence_length": 50}
_NOISE_T_L = {**_NOISE_L, "temperature": 0.5}
_THEORY_ARGS = {
    "auto_temperature": {**_NOISE_L, "n_clusters": 2, "n_features": 4},
    "unbiased_temperature": _NOISE_L,
    "in_context_unbiased_temperature": {**_NOISE_L, "n_features": 4},
    "population_risk": {"heads": HEADS, "centroids": CENTROIDS, **_NOISE_T_L},
    "population_risk_gradient": {"heads": HEADS, "centroids": CENTROIDS, **_NOISE_T_L},
    "risk_from_overlaps": {
        **dict(kappa0=0.5, kappa1=0.5, eta0=0.0, eta1=0.0, xi=0.0),
        **_NOISE_T_L,
        "n_features": 4,
    },
    "pairwise_regularizer": {"heads": HEADS, "centroids": CENTROIDS, "noise": 0.3},
    "pairwise_regularizer_gradient": {"heads": HEADS, "centroids": CENTROIDS, "noise": 0.3},
    "manifold_heads": {"centroids": CENTROIDS, "alignment": 0.5},
    "manifold_risk_coefficients": {**_NOISE_T_L, "n_features": 4},
    "manifold_risk": {"alignment": [0.5, 0.5], **_NOISE_T_L, "n_features": 4},
    "manifold_optimal_alignment": {**_NOISE_T_L, "n_features": 4},
    "lambda_star": {**_NOISE_L, "n_features": 4},
    "quantizer_risk": {"noise": 0.3, "n_features": 4},
    "oracle_risk": {**_NOISE_T_L, "n_features": 4},
    "oracle_conditional_variance": {**_NOISE_T_L, "n_features": 4},
    "oracle_optimal_temperature": {**_NOISE_L, "n_features": 4},
    "in_context_risk": {**_NOISE_T_L, "n_features": 4},
    "in_context_conditional_variance": {**_NOISE_T_L, "n_features": 4},
    "in_context_optimal_temperature": {**_NOISE_L, "n_features": 4},
    "population_pgd": {
        "heads0": HEADS + 0.1,
        "centroids": CENTROIDS,
        **_NOISE_T_L,
        "max_iter": 2,
    },
    "sequence_loss_gradient": {"tokens": X[:10], "heads": HEADS, "temperature": 0.5},
    "psgd_path": {"X": X, "heads0": HEADS, "temperature": 0.5, "step_size": 0.1, "record": [1]},
}


def _theory_call(name, args):
    function = getattr(theory, name)
    return lambda **kw: function(**{**args, **kw})


CALLS.update({name: _theory_call(name, args) for name, args in _THEORY_ARGS.items()})

# Public names that are no estimator nor function taking parameters:
# results and the fitted mixture (whose checks are of fitted arrays).
NOT_CALLS = {"SphericalMixture", "InvalidParameterError", "PGDResult"}
# Parameters whose message is another library's or another object's.
UNNAMED = {"estimator"}


def _public():
    """(name, callable) of every public estimator and function."""
    for module in (attention_cluster, datasets, layers, metrics, theory):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not inspect.ismodule(obj) and name not in NOT_CALLS:
                yield name, obj


def _cases():
    for name, obj in _public():
        for parameter in inspect.signature(obj).parameters:
            if parameter in DATA:
                continue
            wrong_type, wrong_value = BAD_IN.get((name, parameter), BAD.get(parameter, (None,) * 2))
            yield pytest.param(name, parameter, wrong_type, id=f"{name}-{parameter}-type")
            if wrong_value is not NO_WRONG_VALUE:
                yield pytest.param(name, parameter, wrong_value, id=f"{name}-{parameter}-value")


def test_every_parameter_has_its_bad_values():
    missing = [
        f"{name}({parameter})"
        for name, obj in _public()
        for parameter in inspect.signature(obj).parameters
        if parameter not in DATA and parameter not in BAD and (name, parameter) not in BAD_IN
    ]
    assert not missing, f"parameters without bad values in this file: {missing}"
    assert not [name for name, _ in _public() if name not in CALLS]


@pytest.mark.parametrize("name, parameter, value", list(_cases()))
def test_a_bad_parameter_raises_one_class_caught_as_value_and_type_error(name, parameter, value):
    call = CALLS[name]
    for caught in (ValueError, TypeError):
        try:
            call(**{parameter: value})
        except caught as error:
            assert type(error) is InvalidParameterError, f"{type(error).__name__}: {error}"
            # The message names the parameter (NumPy's and scikit-learn's
            # for a seed, the estimator's own for an estimator's).
            assert parameter in str(error) or parameter in UNNAMED, str(error)
        else:
            pytest.fail(f"{name}({parameter}={value!r}) raised nothing")


def test_the_valid_calls_of_the_grid_run():
    # The grid's base calls are valid: each failure above is the parameter's.
    import matplotlib.pyplot as plt

    for name, call in CALLS.items():
        if name not in ("warm_up", "choose_n_clusters", "information_limit"):
            call()
    plt.close("all")


def test_integers_beyond_numpy_s_are_checked_as_integers_and_fractions_refused():
    # A Python int beyond int64 reached np.isfinite, which raised its own
    # TypeError ("ufunc 'isfinite' not supported"): such an integer is a
    # number like any other, valid above its bound (KMeans takes
    # max_iter=10**20 too) and refused below it, beyond float64 too.
    assert AttentionClustering(2, max_iter=10**400, random_state=0).fit(X).n_iter_ >= 1
    with pytest.raises(InvalidParameterError, match="max_iter"):
        AttentionClustering(2, max_iter=-(10**400)).fit(X)
    # A float parameter given as such an integer is no finite float: refused
    # by name (it raised Python's OverflowError once used, after work).
    with pytest.raises(InvalidParameterError, match="tol must be finite"):
        AttentionClustering(2, tol=10**400).fit(X)
    with pytest.raises(InvalidParameterError, match="beta must be finite"):
        SelfAttentionDynamics(beta=10**400).fit(X)
    # A Fraction is refused by name: it raised NumPy's TypeError, and passed
    # as math.isfinite takes it, to fail inside NumPy's ufuncs after work had
    # begun (a step_size of the dynamics).
    for call in (
        lambda: AttentionClustering(2, temperature=Fraction(1, 2)).fit(X),
        lambda: SelfAttentionDynamics(step_size=Fraction(1, 2)).fit(X),
    ):
        with pytest.raises(InvalidParameterError, match="must be an int or a float, got Fraction"):
            call()
    with pytest.raises(InvalidParameterError, match="max_iter"):
        AttentionClustering(2, max_iter=-(10**20)).fit(X)
    with pytest.raises(InvalidParameterError, match="n_steps"):
        attention_flow(X, -(10**20))


def test_numpy_integers_are_read_as_python_integers():
    # NumPy 2 keeps a small integer type through arithmetic, which
    # scikit-learn's checks accept for a count (KMeans(np.int8(3)) fits): an
    # np.int8 n_clusters overflowed the spectral start's rows, np.int16
    # PSGD draws gave negative dimensions, and an np.int8 chunk_size ran
    # another dynamics silently (an audit's findings).
    Y = datasets.make_mixture(20000, 5, 3, noise=0.2, random_state=0)[0]
    given = AttentionClustering(3, random_state=0).fit(Y).cluster_centers_
    for n_clusters in (np.int8(3), np.uint8(3), np.int16(3)):
        fitted = AttentionClustering(n_clusters, random_state=0).fit(Y)
        np.testing.assert_array_equal(fitted.cluster_centers_, given)
    psgd = dict(solver="psgd", max_iter=300, random_state=0)
    given = AttentionClustering(3, sequence_length=50, batch_size=8, **psgd).fit(X)
    small = AttentionClustering(3, sequence_length=np.int16(50), batch_size=np.int16(8), **psgd)
    np.testing.assert_array_equal(small.fit(X).cluster_centers_, given.cluster_centers_)
    AttentionClustering(3, batch_size=np.uint8(2), **psgd).fit(X)
    given = SelfAttentionDynamics(chunk_size=40, random_state=0).fit(X)
    small = SelfAttentionDynamics(chunk_size=np.int8(40), random_state=0).fit(X)
    np.testing.assert_array_equal(small.energy_path_, given.energy_path_)
    assert attention_flow(X, np.int8(127)).shape == (128, *X.shape)
    assert attention_flow(X, np.uint8(255)).shape == (256, *X.shape)
    model = AttentionClustering(random_state=0)
    assert choose_n_clusters(X, model, max_samples=np.int8(100)).n_clusters >= 1
    # An integer strength beyond int64 reached a Numba kernel.
    path = theory.psgd_path(
        X, HEADS, temperature=1.0, step_size=0.1, record=[0, 2], reg_strength=2**63
    )
    assert np.all(np.isfinite(path))


def test_counts_used_as_floats_and_text_weights_are_refused_by_name():
    # Integers beyond float64 where they enter a float (OverflowError after
    # the checks), Fractions as counts (NumPy's TypeError), a text or one
    # bool as the weights (read as a number), a batch of PSGD's path beyond
    # memory (drawn for minutes): each refused by name, before any work.
    cases = [
        (lambda: AttentionClustering(2, sequence_length=10**400).fit(X), "sequence_length"),
        (lambda: SelfAttentionDynamics(min_cluster_size=10**400).fit(X), "min_cluster_size"),
        (lambda: InContextQuantizer(10**400).fit(X), "n_clusters"),
        (lambda: datasets.make_mixture(Fraction(100), 4, 2), "n_samples"),
        (lambda: metrics.interference(0.3, n_clusters=Fraction(3)), "n_clusters"),
        (
            lambda: AttentionClustering(2, temperature=None).fit(X),
            'temperature must be a number > 0 or "auto"',
        ),
        (
            lambda: theory.psgd_path(
                X, HEADS, temperature=1.0, step_size=0.1, record=[0, 1], batch_size=10**6
            ),
            "lower batch_size",
        ),
    ]
    for call, message in cases:
        with pytest.raises(InvalidParameterError, match=message):
            call()
    pd = pytest.importorskip("pandas")
    da = pytest.importorskip("dask.array")
    n = len(X)
    texts = ["1"] * n
    for weights in (
        "2",
        b"2",
        np.True_,
        texts,
        np.array(texts, dtype=object),
        pd.Series(texts, dtype="string"),
    ):
        with pytest.raises(
            ValueError, match=r"sample_weight must be numbers, got (text|a bool) \("
        ):
            AttentionClustering(2).fit(X, sample_weight=weights)
    with pytest.raises(ValueError, match="sample_weight must be numbers"):
        AttentionClustering(2).fit(
            da.from_array(X, chunks=(20, -1)), sample_weight=da.from_array(np.array(texts))
        )
    # Dates and durations, as X's are refused (they were read as counts of
    # nanoseconds since 1970), in memory and on Dask.
    dates = pd.Series(pd.date_range("2020", periods=n))
    for weights, shown in (
        (dates, "dates"),
        (dates - dates[0], "durations"),
        (da.from_array(dates.to_numpy(), chunks=20), "dates"),
    ):
        given = da.from_array(X, chunks=(20, -1)) if isinstance(weights, da.Array) else X
        with pytest.raises(ValueError, match=f"sample_weight must be numbers, got {shown} \\("):
            AttentionClustering(2).fit(given, sample_weight=weights)
    # One bool per row is a weight of 0 or 1, as scikit-learn reads it.
    mask = np.arange(len(X)) % 2 == 0
    np.testing.assert_array_equal(
        AttentionClustering(2, random_state=0).fit(X, sample_weight=mask).cluster_centers_,
        AttentionClustering(2, random_state=0).fit(X, sample_weight=mask * 1.0).cluster_centers_,
    )


@pytest.mark.parametrize(
    "estimator, message",
    [
        (AttentionClustering(max_iter="Auto"), 'max_iter must be an integer >= 1 or "auto"'),
        (AttentionClustering(n_clusters=None), 'n_clusters must be an integer >= 1 or "auto"'),
        (AttentionClustering(n_clusters=0.5), 'n_clusters must be an integer >= 1 or "auto"'),
        (AttentionClustering(n_threads="x"), "n_threads must be an integer >= 1 or None"),
        (SelfAttentionDynamics(n_threads="x"), "n_threads must be an integer >= 1 or None"),
        (
            SelfAttentionDynamics(max_samples=1.5),
            'max_samples must be an integer >= 1 or "auto" or None',
        ),
        (SelfAttentionDynamics(step_size="x"), 'step_size must be a number > 0 or "mean-shift"'),
        (
            SelfAttentionDynamics(min_cluster_size="x"),
            r"min_cluster_size must be an integer >= 1 or a fraction in \(0, 1\)",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_a_parameter_of_several_kinds_names_them_all_when_refused(estimator, message):
    # Parameters that take a number or a word ("auto", None) were refused
    # by the number's check alone: max_iter="Auto" read "max_iter must be an
    # instance of int, not str", of "auto", its default, not a word.
    X = np.random.default_rng(0).standard_normal((50, 3))
    with pytest.raises(ValueError, match=message):
        estimator.fit(X)


@given(
    seed=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.integers(min_value=-(2**40), max_value=2**40).map(np.int64),
        st.integers(min_value=0, max_value=2**64 - 1).map(np.uint64),
        st.floats(allow_nan=True),
        st.text(max_size=3),
        st.just(np.random),
        st.just(np.random.RandomState(0)),
        st.just(np.random.default_rng(0)),
    )
)
def test_the_seed_check_before_reading_refuses_what_the_generator_refuses(seed):
    # The parameter checks made before X is read validate random_state without
    # making its generator (validate_seed), and must refuse exactly the values
    # the fit's generator (check_seed) refuses, with its error.
    from attention_cluster._validation import check_seed, validate_seed

    try:
        check_seed(seed)
    except InvalidParameterError as error:
        with pytest.raises(InvalidParameterError, match=re.escape(str(error))):
            validate_seed(seed)
    else:
        assert validate_seed(seed) is None
