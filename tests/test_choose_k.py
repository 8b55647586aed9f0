"""Choosing the number of clusters: choose_n_clusters and n_clusters="auto"."""

import ast
import inspect
import pickle
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from fitted_state import same_state
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import adjusted_rand_score

from attention_cluster import (
    AttentionClustering,
    InvalidParameterError,
    SelfAttentionDynamics,
    _choose_k,
    _dynamics,
    choose_n_clusters,
    plot_n_clusters_scores,
)
from attention_cluster._choose_k import (
    SILHOUETTE_MARGIN,
    _centred_tokens,
    _mean_sq,
    _moment_eigenvalues,
    _rule_centres,
    _tokens,
    choose_by_silhouette,
    plateau_lengths,
    sphere_silhouette,
    sphere_silhouettes,
)
from attention_cluster._passes import rows_from
from attention_cluster._plan import (
    DEFAULT_TUNING,
    bic_penalty,
    information_criterion,
    mean_dominates,
    predict_rule,
)
from attention_cluster.datasets import make_corpus, make_embeddings, make_mixture


def plateau_lengths_reference(path, n_tokens):
    """Run-length encoding by NumPy: the longest run of each value below n_tokens."""
    path = np.asarray(path)
    starts = np.flatnonzero(np.r_[True, path[1:] != path[:-1]])
    runs = np.diff(np.r_[starts, len(path)])
    out = {}
    for value, run in zip(path[starts].tolist(), runs.tolist()):
        if value < n_tokens:
            out[value] = max(out.get(value, 0), run)
    return out


@given(st.lists(st.integers(1, 6), min_size=1, max_size=40), st.integers(2, 7))
def test_plateau_lengths_match_run_length_reference(path, n_tokens):
    assert plateau_lengths(path, n_tokens) == plateau_lengths_reference(path, n_tokens)


def test_plateau_lengths_skip_the_initial_state():
    # 5 tokens that have not met, then 3 clusters for 2 steps, 2 for 4, 3 for 1.
    assert plateau_lengths([5, 5, 5, 3, 3, 2, 2, 2, 2, 3], 5) == {3: 2, 2: 4}


def sphere_silhouette_reference(X, labels):
    """Rousseeuw's silhouette by loops over the rows, with 1 - cos as the distance."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    D = 1.0 - U @ U.T
    values = []
    for i, k in enumerate(labels):
        own = (labels == k) & (np.arange(len(X)) != i)
        if not own.any():
            values.append(0.0)
            continue
        a = D[i, own].mean()
        b = min(D[i, labels == j].mean() for j in set(labels.tolist()) - {k})
        values.append((b - a) / max(a, b))
    return float(np.mean(values))


@pytest.mark.parametrize("seed", range(5))
def test_sphere_silhouette_matches_the_loop_reference(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((30, 4))
    labels = rng.integers(0, 3, 30)
    labels[:3] = [0, 1, 2]
    labels[3] = 3  # a cluster of one row: s = 0
    assert sphere_silhouette(X, labels) == pytest.approx(
        sphere_silhouette_reference(X, labels), abs=1e-12
    )


@pytest.mark.parametrize("kind", ["dense", "csr"])
def test_sphere_silhouette_matches_scikit_learn(kind):
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 6)) + 3 * np.eye(6)[rng.integers(0, 4, 200)]
    labels = np.argmax(X, axis=1) % 4
    data = sp.csr_matrix(X) if kind == "csr" else X
    assert sphere_silhouette(data, labels) == pytest.approx(
        silhouette_score(X, labels, metric="cosine"), abs=1e-12
    )


# The seed of a property's rows and whether they are given sparse.
_DRAWS = dict(seed=st.integers(0, 2**32 - 1), sparse=st.booleans())


def _rows_with_zero_rows(seed, m, d, n_zero):
    """``(rng, X)``: m Gaussian rows in R^d, ``n_zero`` of them (at most m) zero."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    X[rng.choice(m, min(n_zero, m), replace=False)] = 0.0
    return rng, X


@settings(max_examples=30, deadline=None)
@given(m=st.integers(3, 40), d=st.integers(1, 6), n_zero=st.integers(0, 3), **_DRAWS)
def test_sphere_silhouette_matches_scikit_learn_with_zero_rows(seed, m, d, n_zero, sparse):
    # math.md section 8, "The silhouette of a choice of K": a_i's self term
    # ||u_i||^2 is 0 for a zero row (at cosine distance 1 from every row, as
    # in scikit-learn), 1 otherwise; random labels, singletons included.
    from sklearn.metrics import silhouette_score

    rng, X = _rows_with_zero_rows(seed, m, d, n_zero)
    labels = rng.integers(0, rng.integers(2, m) + 1, m)
    if not 2 <= len(np.unique(labels)) <= m - 1:
        assert sphere_silhouette(X, labels) is None
        return
    data = sp.csr_matrix(X) if sparse else X
    assert sphere_silhouette(data, labels) == pytest.approx(
        silhouette_score(X, labels, metric="cosine"), abs=1e-12
    )


@settings(max_examples=40, deadline=None)
@given(m=st.integers(2, 30), d=st.integers(1, 5), n_zero=st.integers(0, 2), **_DRAWS)
def test_weighted_sphere_silhouette_is_that_of_the_repeated_rows(seed, m, d, n_zero, sparse):
    # math.md section 8, "The silhouette of a choice of K": a row of weight
    # w_i counts w_i times (its copies at distance 1 - ||u_i||^2 from it),
    # so integer weights give the silhouette of the repeated rows, by the
    # code's unweighted path and by scikit-learn; singletons, a row of
    # weight above 1 alone in its cluster, and zero rows included.
    from sklearn.metrics import silhouette_score

    rng, X = _rows_with_zero_rows(seed, m, d, n_zero)
    labels = rng.integers(0, rng.integers(1, m) + 1, m)
    weights = rng.integers(1, 5, m).astype(float)
    repeated, repeated_labels = (
        np.repeat(X, weights.astype(int), axis=0),
        np.repeat(labels, weights.astype(int)),
    )
    data = sp.csr_matrix(X) if sparse else X
    got = sphere_silhouette(data, labels, weights)
    want = sphere_silhouette(repeated, repeated_labels)
    if want is None:
        assert got is None
        return
    # Each distance is a sum over up to M rows of unit products, rounded by
    # about M eps, and s_i = (b_i - a_i) / max(a_i, b_i) carries that over
    # max(a_i, b_i): rows whose directions nearly meet (d = 2) make it far
    # larger than 1e-12 (7e-12 at m = 28, seed 0).
    tolerance = _silhouette_rounding(repeated, repeated_labels)
    assert got == pytest.approx(want, abs=tolerance)
    assert got == pytest.approx(
        silhouette_score(repeated, repeated_labels, metric="cosine"), abs=tolerance
    )


def _silhouette_rounding(X, labels):
    """A bound on the rounding of a mean cosine silhouette of the rows X:
    ``8 M eps`` over each row's ``max(a_i, b_i)``, averaged (rows whose
    silhouette is 0 by definition, or whose distances are all zero, left
    out), at least ``1e-12``."""
    from sklearn.metrics import pairwise_distances

    M = len(X)
    D = pairwise_distances(X, metric="cosine")
    _, labels = np.unique(labels, return_inverse=True)
    terms = []
    for i in range(M):
        own = labels == labels[i]
        if own.sum() < 2:
            continue
        a = D[i, own].sum() / (own.sum() - 1)
        b = min(D[i, labels == k].mean() for k in np.unique(labels) if k != labels[i])
        if max(a, b) > 0:
            terms.append(8 * M * np.finfo(np.float64).eps / max(a, b))
    return max(1e-12, float(np.sum(terms)) / M)


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(4, 40),
    d=st.integers(1, 6),
    n_zero=st.integers(0, 2),
    weighted=st.booleans(),
    **_DRAWS,
)
def test_silhouettes_of_several_labellings_are_each_ones(seed, m, d, n_zero, weighted, sparse):
    # sphere_silhouettes scores the fits compared by n_clusters="auto"
    # together, their cluster sums stacked in one product with the rows:
    # each score is the labelling's own, undefined ones (one cluster, or
    # every row alone) included.
    rng, X = _rows_with_zero_rows(seed, m, d, n_zero)
    labellings = [rng.integers(0, rng.integers(1, m + 1), m) for _ in range(3)]
    labellings += [np.zeros(m, dtype=int), np.arange(m)]
    weights = rng.integers(1, 4, m).astype(float) if weighted else None
    data = sp.csr_matrix(X) if sparse else X
    got = sphere_silhouettes(data, labellings, weights)
    want = [sphere_silhouette(data, labels, weights) for labels in labellings]
    assert [g is None for g in got] == [w is None for w in want]
    assert [g for g in got if g is not None] == pytest.approx(
        [w for w in want if w is not None], abs=1e-12
    )


@pytest.mark.parametrize("seed", range(5))
def test_sphere_silhouette_of_unit_weights_is_the_unweighted_one(seed):
    # The weighted sums with weights of 1 are the unweighted ones; only the
    # mean is taken as sum_i w_i s_i / sum_i w_i (rounding apart).
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((50, 4))
    labels = rng.integers(0, 4, 50)
    want = sphere_silhouette(X, labels)
    assert sphere_silhouette(X, labels, np.ones(50)) == pytest.approx(want, rel=1e-14)


def test_sphere_silhouette_undefined_for_one_cluster_or_all_singletons():
    X = np.random.default_rng(0).standard_normal((5, 3))
    assert sphere_silhouette(X, np.zeros(5, dtype=int)) is None
    assert sphere_silhouette(X, np.arange(5)) is None


@pytest.mark.parametrize(
    "silhouettes, expected",
    [
        ({3: 0.50, 2: 0.52, 4: 0.40}, 3),  # within the margin: the dynamics' K
        ({3: 0.50, 2: 0.60, 4: 0.40}, 2),  # clearly higher: the neighbour
        ({3: 0.50, 2: 0.60, 4: 0.70}, 4),  # both clearly higher: the highest
        ({3: None, 2: 0.10, 4: 0.20}, 4),  # undefined at K: the highest defined
        ({1: None, 2: None}, 1),  # nothing to compare: the dynamics' K
        # Higher by exactly the margin (0.5 + 0.05 == 0.55 in float64): "more than" it.
        ({3: 0.50, 2: 0.55, 4: 0.40}, 3),
    ],
    ids=["margin", "lower", "both", "undefined", "none", "at-the-margin"],
)
def test_choose_by_silhouette(silhouettes, expected):
    k_dynamics = next(iter(silhouettes))
    assert choose_by_silhouette(k_dynamics, silhouettes, margin=0.05) == expected


@pytest.fixture(scope="module")
def mixture():
    X, y, _ = make_mixture(600, 6, 3, noise=0.2, random_state=0)
    return X, y


def test_auto_finds_the_mixture_k_and_its_curve(mixture):
    X, _ = mixture
    model = AttentionClustering("auto", random_state=0).fit(X)
    assert model.n_clusters_ == 3
    assert model.cluster_centers_.shape == (3, 6)
    assert model.predict_proba(X).shape == (600, 3)
    scores = model.n_clusters_scores_
    assert list(scores) == list(range(1, 51))
    assert max(scores, key=scores.get) == 3
    # The curve is the dynamics' own: the same run on the same rows.
    dynamics = SelfAttentionDynamics(min_cluster_size=0.02).fit(X)
    assert dynamics.n_clusters_ == 3
    assert scores[3] == plateau_lengths(dynamics.n_clusters_path_, len(X))[3]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_dynamics_counts_on_unit_rows_in_float32(mixture, dtype, monkeypatch):
    # math.md section 8, "The count in float32": the count is read at
    # cluster_tol, far above float32's rounding, and a float32 step takes
    # half the time (float64 rows were counted in float64). The rows enter
    # as unit rows, so a row 1e-40 times the others keeps its direction.
    X = mixture[0].astype(dtype)
    counted = []
    fit = SelfAttentionDynamics.fit

    def recording(self, tokens, y=None, sample_weight=None):
        fitted = fit(self, tokens, y, sample_weight)
        # (The dtype the tokens were read in: their centres'.)
        counted.append((tokens, self.cluster_centers_.dtype))
        return fitted

    monkeypatch.setattr(SelfAttentionDynamics, "fit", recording)
    X[0] *= 1e-40 if dtype == np.float64 else 1e-30
    choice = choose_n_clusters(X, AttentionClustering(random_state=0))
    assert choice.n_clusters == 3
    # (Counted on the rows as given, then centred: their mean carries more
    # than 5% of their second moment.)
    assert [read for _, read in counted] == [np.float32, np.float32]
    X = X.astype(np.float64)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(counted[0][0], unit, rtol=1e-6, atol=1e-7)


def test_auto_compares_the_neighbours_and_keeps_the_fit_at_k(mixture, recwarn):
    X, _ = mixture
    choice = choose_n_clusters(X, AttentionClustering(random_state=0))
    dynamics = SelfAttentionDynamics(min_cluster_size=0.02).fit(X)
    k = dynamics.n_clusters_
    assert list(choice.silhouettes) == [k, k - 1, k + 1]
    labels = choice.model.predict(X)
    assert choice.silhouettes[choice.n_clusters] == pytest.approx(
        sphere_silhouette_reference(X, labels), abs=1e-12
    )
    assert choice.n_clusters == choose_by_silhouette(k, choice.silhouettes, SILHOUETTE_MARGIN)
    # The fits at the K not chosen keep their warnings to themselves.
    recwarn.clear()
    AttentionClustering("auto", random_state=0).fit(X)
    assert not [w for w in recwarn if "n_clusters=4" in str(w.message)]


def test_integer_n_clusters_sets_n_clusters_(mixture):
    X, _ = mixture
    assert AttentionClustering(2, random_state=0).fit(X).n_clusters_ == 2


def test_choose_n_clusters_returns_the_fit_at_k(mixture):
    X, y = mixture
    choice = choose_n_clusters(X, AttentionClustering(random_state=0))
    assert choice.n_clusters == choice.model.n_clusters == 3
    reference = AttentionClustering(3, random_state=0).fit(X)
    np.testing.assert_array_equal(choice.model.labels_, reference.labels_)


def test_choose_n_clusters_is_the_auto_fit(mixture):
    # choose_n_clusters ran the criterion with fits of its own (a fit from
    # X per K, each reading X again), beside n_clusters="auto"'s: now it
    # is that fit, with its options, whose attributes at K are a fit at K's.
    X, _ = mixture
    weights = np.linspace(0.5, 2.0, len(X))
    auto = AttentionClustering("auto", random_state=0).fit(X, sample_weight=weights)
    choice = choose_n_clusters(X, AttentionClustering(random_state=0), sample_weight=weights)
    assert choice.n_clusters == auto.n_clusters_
    assert choice.scores == auto.n_clusters_scores_
    np.testing.assert_array_equal(choice.model.cluster_centers_, auto.cluster_centers_)
    at_k = AttentionClustering(choice.n_clusters, random_state=0).fit(X, sample_weight=weights)
    assert choice.model.get_params() == at_k.get_params()
    assert sorted(vars(choice.model)) == sorted(vars(at_k))
    np.testing.assert_array_equal(choice.model.cluster_centers_, at_k.cluster_centers_)


@pytest.mark.parametrize(
    "kind", [range, lambda a, b: (k for k in range(a, b))], ids=["range", "iterator"]
)
def test_range_clips_the_choice(mixture, kind):
    # An iterator is read once: the range checked before any work is the
    # one the choice uses (it came back empty, 'must hold positive integers').
    X, _ = mixture
    choice = choose_n_clusters(X, AttentionClustering(random_state=0), kind(1, 3))
    assert set(choice.scores) == {1, 2}
    assert choice.n_clusters in (1, 2)


@pytest.mark.parametrize("bad", [[], [0, 2], [-1]], ids=["empty", "zero", "negative"])
def test_bad_range_raises(mixture, bad):
    with pytest.raises(ValueError, match="n_clusters_range must hold positive integers"):
        choose_n_clusters(mixture[0], AttentionClustering(), bad)


def test_a_range_beyond_the_rows_raises_and_its_ks_beyond_them_are_dropped(mixture):
    # No fit has more clusters than rows: a range of such K raised a
    # KeyError after the dynamics ran; now a ValueError before it, and a
    # range that also holds such K chooses among the others.
    X = mixture[0][:40]
    with pytest.raises(ValueError, match="at most n_samples=40"):
        choose_n_clusters(X, AttentionClustering(random_state=0), [50, 500])
    choice = choose_n_clusters(X, AttentionClustering(random_state=0), [1, 2, 3, 500])
    assert set(choice.scores) == {1, 2, 3}
    assert choice.n_clusters in (1, 2, 3)
    assert choice.model.n_clusters == choice.n_clusters


@pytest.mark.parametrize("kind", ["dense", "csr", "weighted"])
@pytest.mark.parametrize("ks", [[3], [2, 41]], ids=["one", "one-of-at-most-n"])
def test_a_range_of_one_k_is_the_fit_at_k_without_the_dynamics(mixture, kind, ks, capsys):
    # A range holding one K of at most n_samples (the others above it,
    # dropped) ran the dynamics, its draw, the silhouettes and the fit at 1
    # for nothing to choose; now its fit is n_clusters=K's, attribute by
    # attribute, and nothing claims a curve or a silhouette.
    X = mixture[0][:40]
    weights = np.linspace(0.5, 2.0, len(X)) if kind == "weighted" else None
    X = sp.csr_matrix(X) if kind == "csr" else X
    choice = choose_n_clusters(
        X, AttentionClustering(random_state=0, verbose=1), ks, sample_weight=weights
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if "'auto'" in line]
    assert not [line for line in lines if "dynamics counts" in line]
    assert "nothing to choose, no dynamics" in lines[0]
    assert (choice.n_clusters, choice.scores, choice.silhouettes) == (ks[0], {}, {})
    at_k = AttentionClustering(ks[0], random_state=0, verbose=1).fit(X, sample_weight=weights)
    capsys.readouterr()
    assert choice.model.get_params() == at_k.get_params()
    assert same_state(vars(choice.model), vars(at_k))
    np.testing.assert_array_equal(choice.model.predict(X), at_k.predict(X))
    np.testing.assert_array_equal(choice.model.transform(X), at_k.transform(X))
    # A range of one K above n_samples still raises, before any fit.
    with pytest.raises(ValueError, match="at most n_samples=40"):
        choose_n_clusters(X, AttentionClustering(random_state=0), [41], sample_weight=weights)


def test_one_row_of_positive_weight_is_the_fit_at_one(mixture):
    # The default range of one row of positive weight is K = 1 alone.
    X = mixture[0][:5]
    weights = np.array([0.0, 0.0, 2.0, 0.0, 0.0])
    with warnings.catch_warnings():
        # (One row has no spread above the mixture's variance floor.)
        warnings.simplefilter("ignore", UserWarning)
        auto = AttentionClustering("auto", random_state=0).fit(X, sample_weight=weights)
        one = AttentionClustering(1, random_state=0).fit(X, sample_weight=weights)
    assert auto.n_clusters_scores_ == {}
    fitted = {k: v for k, v in vars(auto).items() if k != "n_clusters_scores_"}
    assert same_state(fitted, dict(vars(one), n_clusters="auto"))
    np.testing.assert_array_equal(auto.predict(X), one.predict(X))


def test_bad_string_raises(mixture):
    with pytest.raises(ValueError, match='n_clusters must be an integer >= 1 or "auto"'):
        AttentionClustering("many").fit(mixture[0])


@pytest.mark.parametrize(
    "estimator, n_clusters_range, error, match",
    [
        (None, 5, ValueError, "n_clusters_range must hold positive integers, got 5"),
        (None, ["a"], ValueError, "n_clusters_range must hold positive integers"),
        (None, [2.5, 3], ValueError, r"n_clusters_range must hold positive integers, got \[2.5"),
        ("kmeans", None, TypeError, "estimator must be an AttentionClustering"),
    ],
    ids=["int", "string", "half", "kmeans"],
)
def test_choose_n_clusters_refuses_its_bad_arguments_before_work(
    mixture, estimator, n_clusters_range, error, match
):
    # An int range raised "not iterable", 2.5 was truncated to 2, and a
    # KMeans ran the dynamics and fits before an AttributeError.
    estimator = KMeans(2) if estimator == "kmeans" else AttentionClustering(random_state=0)
    with pytest.raises(error, match=match):
        choose_n_clusters(mixture[0], estimator, n_clusters_range)


@pytest.mark.parametrize("kind", ["dense", "dask"])
@pytest.mark.parametrize(
    "params, match",
    [
        (
            dict(n_clusters=2, init=np.eye(6)[:2]),
            'init must be "spectral" or "random", not an array of shape',
        ),
        (dict(temperature=-1.0), "temperature must be > 0"),
        (dict(center="yes"), "center must be one of"),
    ],
    ids=["array-init", "temperature", "center"],
)
def test_choose_n_clusters_checks_the_estimator_before_any_work(
    mixture, kind, params, match, monkeypatch
):
    # The estimator's parameters were checked by the first fit, after the
    # draw and the dynamics (and, on Dask, a pass over X), and an array
    # init was reported against the dynamics' K ("init must have shape
    # (n_clusters, n_features) = (3, 6)" for a user's n_clusters=2).
    from attention_cluster import _clustering

    def no_work(*args, **kwargs):
        raise AssertionError("work began before the parameters were checked")

    monkeypatch.setattr(_clustering, "count_clusters", no_work)
    # Not even X's validation (a float64, C-order copy of a Fortran X).
    monkeypatch.setattr(_clustering, "rows_from", no_work)
    X = np.asfortranarray(mixture[0])
    if kind == "dask":
        da = pytest.importorskip("dask.array")
        X = da.from_array(X, chunks=(150, 6))
    with pytest.raises(ValueError, match=match):
        choose_n_clusters(X, AttentionClustering(random_state=0, **params))


def test_an_unsettled_dynamics_warns_its_own_diagnosis(mixture):
    # The warning said the dynamics "did not settle on a plateau within its
    # steps" whatever the cause; here no group of the 600 rows can reach
    # 700 tokens, which the dynamics says, with its advice, of the
    # parameters the caller can set (it advised increasing the dynamics'
    # max_iter, which neither choose_n_clusters nor n_clusters="auto" takes).
    with pytest.warns(ConvergenceWarning) as caught:
        choose_n_clusters(mixture[0], AttentionClustering(random_state=0), min_cluster_size=700)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any(
        "No group of tokens reached min_cluster_size=700" in m
        and "Lower min_cluster_size, which no group of the tokens can reach." in m
        and "n_clusters was read from the state it took (K = 1)" in m
        and "Increase" not in m
        for m in messages
    ), messages


def test_kept_fits_warnings_replay_under_the_callers_filters(mixture):
    # The warnings of the fit kept were replayed with warn_explicit, which
    # a filter on the caller's module did not reach.
    X = mixture[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=__name__)
        choose_n_clusters(X, AttentionClustering(max_iter=1, random_state=0))
    assert not caught
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choose_n_clusters(X, AttentionClustering(max_iter=1, random_state=0))
    assert caught and all(w.filename == __file__ for w in caught)


@pytest.mark.parametrize("kind", ["csr", "dask", "float32"])
def test_auto_on_sparse_dask_and_float32(mixture, kind):
    X, _ = mixture
    dense = AttentionClustering("auto", random_state=0).fit(X)
    if kind == "csr":
        data = sp.csr_matrix(X)
    elif kind == "dask":
        da = pytest.importorskip("dask.array")
        data = da.from_array(X, chunks=(150, 6))
    else:
        data = X.astype(np.float32)
    model = AttentionClustering("auto", random_state=0).fit(data)
    assert model.n_clusters_ == dense.n_clusters_
    assert model.n_clusters_scores_ == dense.n_clusters_scores_
    if kind == "float32":
        assert model.cluster_centers_.dtype == np.float32


def test_subsample_and_weights(mixture):
    X, y = mixture
    # Only the rows of two clusters weigh: the subsample holds no other.
    weights = (y != 0).astype(float)
    choice = choose_n_clusters(
        X, AttentionClustering(random_state=0), sample_weight=weights, max_samples=300
    )
    assert choice.n_clusters == 2


def _standardised(name):
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    return StandardScaler().fit_transform(getattr(datasets, f"load_{name}")().data)


def _weight_cases():
    yield "wine", _standardised("wine")
    yield "iris", _standardised("iris")
    for seed in range(2):
        yield f"mixture-{seed}", make_mixture(300, 6, 4, noise=0.4, random_state=seed)[0]
        yield f"blobs-{seed}", make_blobs(200, n_features=5, centers=4, random_state=seed)[0]


@pytest.mark.parametrize(
    "name, X", list(_weight_cases()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_unit_weights_choose_as_no_weights(name, X):
    # With weights, the dynamics ran on max_samples rows drawn with
    # replacement: on wine, 111 distinct of 178, rows drawn 4 times already
    # clusters at step 0, and K = 6 for unit weights against 3 without. The
    # rows of positive weight, at most max_samples, are now all taken, and
    # equal weights are no weights.
    n = len(X)
    for seed in (0, 1):
        plain = AttentionClustering("auto", random_state=seed).fit(X)
        for weights in (np.ones(n), np.full(n, 3.0)):
            weighted = AttentionClustering("auto", random_state=seed).fit(X, sample_weight=weights)
            assert weighted.n_clusters_ == plain.n_clusters_
            assert weighted.n_clusters_scores_ == plain.n_clusters_scores_
            # The fit at K with unit weights sums weighted rows: equal up to rounding.
            np.testing.assert_allclose(
                weighted.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-12
            )
    want = choose_n_clusters(X, AttentionClustering(random_state=0))
    got = choose_n_clusters(X, AttentionClustering(random_state=0), sample_weight=np.ones(n))
    assert got.silhouettes == want.silhouettes


@pytest.mark.parametrize("seed", range(4))
def test_beyond_max_samples_weighted_rows_are_drawn_as_unweighted_ones(seed):
    # Beyond max_samples rows of positive weight the tokens were drawn with
    # replacement in proportion to the weights: rows drawn twice met at step
    # 0, and weights of 1 (one of 1 + 1e-9) chose 6, 4 or 5 on wine where no
    # weights choose 3. They are now drawn as the rows without weights are,
    # uniformly and distinct, and keep their weights.
    X = _standardised("wine")
    w = np.ones(len(X))
    w[0] = 1.0 + 1e-9
    plain = choose_n_clusters(X, AttentionClustering(random_state=seed), max_samples=170)
    weighted = choose_n_clusters(
        X, AttentionClustering(random_state=seed), sample_weight=w, max_samples=170
    )
    assert weighted.n_clusters == plain.n_clusters
    assert weighted.scores == plain.scores


@pytest.mark.parametrize("name", ["wine", "iris"])
def test_rows_of_weight_zero_leave_the_choice_as_it_is(name):
    # The weighted draw counted rows of weight zero in its size (and the
    # draw with replacement then differed from the rows alone).
    X = _standardised(name)
    n, d = X.shape
    far = 10.0 * np.random.default_rng(0).standard_normal((60, d))
    padded = np.vstack([X[: n // 2], far, X[n // 2 :]])
    weights = np.r_[np.ones(n // 2), np.zeros(60), np.ones(n - n // 2)]
    want = choose_n_clusters(X, AttentionClustering(random_state=0))
    got = choose_n_clusters(padded, AttentionClustering(random_state=0), sample_weight=weights)
    assert got.n_clusters == want.n_clusters
    assert got.scores == want.scores
    assert got.silhouettes == pytest.approx(want.silhouettes, abs=1e-12)
    # The range, 1 to min(n, 50), counted the rows of weight zero in n.
    few = choose_n_clusters(X[:30], AttentionClustering(random_state=0))
    got = choose_n_clusters(
        np.vstack([X[:30], far]),
        AttentionClustering(random_state=0),
        sample_weight=np.r_[np.ones(30), np.zeros(60)],
    )
    assert list(got.scores) == list(few.scores) == list(range(1, 31))
    assert got.scores == few.scores and got.n_clusters == few.n_clusters


@pytest.mark.parametrize("name", ["wine", "iris"])
@pytest.mark.parametrize("seed", range(3))
def test_integer_weights_choose_as_repeated_rows(name, seed):
    # fit's docstring: an integer weight acts as repeated rows. The
    # dynamics and the silhouettes now see a row of weight w as w tokens
    # (rows repeated 4 times were 5 clusters on wine against 3).
    X = _standardised(name)
    weights = np.random.default_rng(seed).integers(1, 4, len(X))
    repeated = np.repeat(X, weights, axis=0)
    want = choose_n_clusters(repeated, AttentionClustering(random_state=0))
    got = choose_n_clusters(X, AttentionClustering(random_state=0), sample_weight=weights)
    assert got.n_clusters == want.n_clusters
    assert got.scores == want.scores
    # The fits at K are not compared: the EM refinement stops at the
    # statistical resolution of Kish's effective rows for weights and of the
    # rows' count for repeated rows (math.md section 7: weights are not
    # known to be counts), so the two fits agree to that resolution, not to
    # rounding (on wine, seed 1, 11 and 12 passes). The silhouette of
    # weighted rows is that of the repeated rows on equal labels
    # (test_weighted_sphere_silhouette_is_that_of_the_repeated_rows).


@pytest.mark.parametrize("shape", [(40, 200), (20, 1000)])
def test_noise_of_fewer_rows_than_features_is_one_cluster(shape, global_random_seed):
    # The dynamics found no plateau and read K = n - 1 from its last state,
    # and the test of one cluster, a BIC of more parameters than rows, kept
    # it: 39 "clusters" of 40 rows of noise. Most tokens still apart is no
    # structure the dynamics resolved.
    X = np.random.default_rng(global_random_seed).standard_normal(shape)
    with pytest.warns(ConvergenceWarning, match="most still apart: one cluster instead") as record:
        model = AttentionClustering("auto", random_state=0).fit(X)
    assert model.n_clusters_ <= 2
    # The advice names what the caller can set: beta, not the dynamics'
    # max_iter and step_size, which the K-finder fixes.
    (message,) = [str(w.message) for w in record if "most still apart" in str(w.message)]
    assert "Lower beta" in message and "Increase" not in message
    # A range that clips the dynamics' count does not hide it (it answered
    # the top of the range, 10, without the one-cluster test's fits).
    with pytest.warns(ConvergenceWarning, match="most still apart: one cluster instead"):
        ranged = choose_n_clusters(
            X, AttentionClustering(refine=None, random_state=0), range(1, 11)
        )
    assert ranged.n_clusters <= 2


def test_the_centred_count_is_kept_where_its_fit_centres_by_a_lost_cluster():
    # n_clusters's docstring: the centred rows' count is kept where the fit
    # at that count would centre them. Only center="auto"'s first rule (the
    # mean dominating the moment) was read, not its second (the rows as
    # given lose a cluster): three tight blobs off the origin chose 7 (ARI
    # 0.52), where the fit at 3 centres and is exact.
    rng = np.random.default_rng(0)
    C = rng.standard_normal((3, 4)) * 3
    y = rng.integers(0, 3, 60)
    X = C[y] + 0.3 * rng.standard_normal((60, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AttentionClustering("auto", random_state=0).fit(X)
        three = AttentionClustering(3, random_state=0).fit(X)
    assert three.center_ and model.n_clusters_ == 3
    assert adjusted_rand_score(y, model.labels_) == 1.0


@pytest.mark.parametrize("kind", ["dense", "float32", "csr"])
def test_one_cluster_chosen_is_the_fit_at_one(kind, global_random_seed):
    # The test of one cluster fits K = 1 centred where the choice's fit is;
    # that centred fit was returned, where n_clusters=1 with center="auto"
    # fits uncentred: other centres, transform and bic than the documented
    # AttentionClustering(1).fit(X), and a clone that refitted otherwise.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((500, 5)) + 2.0
    X = {"dense": X, "float32": X.astype(np.float32), "csr": sp.csr_matrix(X)}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AttentionClustering("auto", random_state=0).fit(X)
        one = AttentionClustering(1, random_state=0).fit(X)
    assert auto.n_clusters_ == 1
    assert auto.center_ == one.center_
    np.testing.assert_array_equal(auto.cluster_centers_, one.cluster_centers_)
    np.testing.assert_array_equal(auto.transform(X), one.transform(X))
    assert auto.bic(X) == one.bic(X)


def test_verbose_auto_names_its_stages(mixture, capsys):
    # Each fit printed "init 0: exact solver ..." without its K, and the
    # dynamics' stage and the K chosen printed nothing.
    X, _ = mixture
    model = AttentionClustering("auto", verbose=1, random_state=0).fit(X)
    lines = [line for line in capsys.readouterr().out.splitlines() if "'auto'" in line]
    assert "the self-attention dynamics counts the clusters" in lines[0]
    fitted = [
        int(line.rsplit("n_clusters=", 1)[1].split(",")[0])
        for line in lines
        if "the fit at" in line
    ]
    assert model.n_clusters_ in fitted
    assert f"chose n_clusters={model.n_clusters_}" in lines[-1]
    AttentionClustering("auto", random_state=0).fit(X)
    assert capsys.readouterr().out == ""


def test_auto_is_picklable_and_streams(mixture):
    X, _ = mixture
    model = AttentionClustering("auto", random_state=0).fit(X)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    model.partial_fit(X[:100])
    assert model.n_steps_ == 1 and model.cluster_centers_.shape == (3, 6)


def test_plot_helper_draws_the_curve(mixture):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = {1: 0, 2: 3, 3: 7, 4: 1}
    ax = plot_n_clusters_scores(scores, 3)
    x, h = ax.lines[0].get_data()
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    np.testing.assert_array_equal(h, [0, 3, 7, 1])
    assert ax.get_legend().get_texts()[0].get_text() == "chosen K = 3"
    plt.close(ax.figure)


@pytest.mark.parametrize(
    "scores, n_clusters, match",
    [
        ([1, 2, 3], None, "scores must be a non-empty mapping"),
        ({}, None, "scores must be a non-empty mapping"),
        ({1: 0, "2": 3}, None, "keys must be the integers K"),
        ({1: 0, 2: 3}, "x", "n_clusters must be an integer"),
        ({1: 0, 2: 3}, np.nan, "n_clusters must be an integer"),
    ],
    ids=["list", "empty", "string-key", "string-K", "nan-K"],
)
def test_plot_helper_refuses_what_is_not_a_curve_before_drawing(scores, n_clusters, match):
    # Every check of a parameter raises InvalidParameterError (docs/api.rst),
    # a ValueError and a TypeError: a bad curve raised a bare TypeError.
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = len(plt.get_fignums())
    with pytest.raises(InvalidParameterError, match=match):
        plot_n_clusters_scores(scores, n_clusters)
    assert len(plt.get_fignums()) == figures


def test_xmeans_bic_matches_the_gaussian_log_density(monkeypatch):
    # The X-means peer of benchmarks/choose_k.py: its closed form against
    # sum_i log(n_k / n) + log N(x_i; c_k, sigma^2 I) by scipy.
    from pathlib import Path

    from scipy.stats import multivariate_normal

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from choose_k import xmeans_bic

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    labels = rng.integers(0, 3, 40)
    centers = np.array([X[labels == k].mean(axis=0) for k in range(3)])
    n, d, K = 40, 3, 3
    variance = ((X - centers[labels]) ** 2).sum() / ((n - K) * d)
    loglik = sum(
        np.log(np.mean(labels == labels[i]))
        + multivariate_normal(centers[labels[i]], variance * np.eye(d)).logpdf(X[i])
        for i in range(n)
    )
    expected = -2 * loglik + K * (d + 1) * np.log(n)
    assert xmeans_bic(X, labels, centers) == pytest.approx(expected, rel=1e-10)


def test_icl_is_minus_twice_the_completed_likelihood(monkeypatch):
    # The ICL peer of benchmarks/choose_k.py: BIC + 2 EN equals
    # -2 sum_ik t_ik log(pi_k N(x_i; mu_k, sigma_k^2 I)) + p log n
    # (log L = that sum + EN), each density by scipy.
    from pathlib import Path

    from scipy.stats import multivariate_normal
    from sklearn.mixture import GaussianMixture

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from choose_k import icl

    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((30, 2)), rng.standard_normal((30, 2)) + 1.5])
    g = GaussianMixture(2, covariance_type="spherical", random_state=0).fit(X)
    t = g.predict_proba(X)
    log_joint = np.column_stack(
        [
            np.log(g.weights_[k])
            + multivariate_normal(g.means_[k], g.covariances_[k] * np.eye(2)).logpdf(X)
            for k in range(2)
        ]
    )
    n, d, K = 60, 2, 2
    p = K * d + K + (K - 1)  # means, one variance per component, weights
    expected = -2 * float(np.sum(t * log_joint)) + p * np.log(n)
    assert icl(g, X) == pytest.approx(expected, rel=1e-9)
    assert icl(g, X) > g.bic(X)  # the clusters overlap: the entropy is positive


def test_stability_is_one_on_separated_clusters(monkeypatch):
    # Fits on two subsamples of well separated clusters label every row alike.
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from choose_k import stability

    X = make_mixture(300, 5, 3, noise=0.05, random_state=0)[0]
    assert stability(X, 3) == pytest.approx(1.0)


def test_gap_statistic_finds_separated_blobs_and_none_in_uniform_data(monkeypatch):
    # The gap statistic peer of benchmarks/choose_k.py (Tibshirani, Walther
    # and Hastie 2001): three tight blobs give K = 3; uniform data, whose
    # within-cluster dispersion falls as the reference's does, give K = 1.
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from choose_k import gap_statistic

    X, _ = make_blobs(300, n_features=2, centers=3, cluster_std=0.3, random_state=0)
    assert gap_statistic(X, list(range(1, 7))) == 3
    U = np.random.default_rng(0).uniform(size=(300, 2))
    assert gap_statistic(U, list(range(1, 7))) == 1


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_the_dynamics_runs_on_max_samples_rows(kind, global_random_seed):
    # Each row entered the dynamics' subsample independently, with
    # probability max_samples / n: about max_samples rows, and none at all
    # at times for a small max_samples (max_samples=1: "Expected 2D array,
    # got 1D array"). max_samples rows are taken from a larger subsample.
    X, _, _ = make_mixture(300, 5, 3, noise=0.3, random_state=0)
    X = sp.csr_matrix(np.abs(X)) if kind == "sparse" else X
    rows = rows_from(AttentionClustering(), X, reset=True)
    rng = np.random.RandomState(global_random_seed)
    for size in (1, 2, 7, 100):
        assert _tokens(rows, size, rng)[0].shape == (size, 5)
    assert _tokens(rows, 300, rng)[0].shape == (300, 5)
    for seed in range(20):
        choose_n_clusters(X, AttentionClustering(random_state=seed), max_samples=1)


def test_the_dynamics_counts_on_the_rows_the_fit_sees(global_random_seed):
    # The dynamics clusters directions from the origin: a common mean draws
    # every row's direction towards its own. On the rows as given it counted
    # 2 for five embedding clusters sharing an offset (0 of 30 seeds right),
    # and 9 for three blobs of make_blobs (seed 0; 28 of 40 seeds right).
    # Where the mean carries more than 5% of the rows' second moment, the
    # dynamics counts on the centred rows too, and that count is kept when
    # the fit at it would centre the rows: 30 of 30, and 33 of 40 (4 or more
    # of 5 below: false failure about 1e-3).
    seeds = np.random.SeedSequence(global_random_seed).generate_state(5)
    embeddings = [
        AttentionClustering("auto", random_state=0)
        .fit(make_embeddings(2000, 64, 5, offset=3.0, noise=0.05, random_state=int(s))[0])
        .n_clusters_
        for s in seeds
    ]
    assert embeddings.count(5) >= 4, embeddings
    X = make_blobs(300, n_features=5, centers=3, random_state=0)[0]
    assert AttentionClustering("auto", random_state=0).fit(X).n_clusters_ == 3


def _tokens_dominate(tokens, k):
    """center="auto"'s rule on the dynamics' tokens at k clusters, as count_clusters applies it."""
    return _rule_centres(tokens, None, _mean_sq(tokens), k)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(30, 90),
    d=st.integers(30, 90),
    k=st.integers(1, 5),
    offset=st.floats(-2.0, 2.0),
    weighted=st.booleans(),
    **_DRAWS,
)
def test_the_centring_rule_on_the_tokens_is_that_of_their_whole_spectrum(
    seed, m, d, k, offset, weighted, sparse
):
    # math.md section 7, "Centring or not": the Ritz values of the second
    # moment on a block bound its eigenvalues from below, so the rule's "no"
    # read on them is the whole spectrum's; where they do not decide, the
    # whole spectrum does. Clusters of directions moved by a common offset
    # of 10^offset, which puts ||m||^2 / lambda_k on both sides of 10.
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k + 2, d))
    tokens = centres[rng.integers(0, k + 2, m)] + 0.3 * rng.standard_normal((m, d))
    tokens += 10.0**offset * rng.standard_normal(d)
    if sparse:
        tokens = sp.csr_matrix(tokens * (rng.random((m, d)) < 0.4))
    weights = rng.integers(1, 5, m).astype(float) if weighted else None
    mean_sq = _mean_sq(tokens, weights)
    spectrum = _moment_eigenvalues(tokens, weights)
    assert _rule_centres(tokens, weights, mean_sq, k) == mean_dominates(
        mean_sq, spectrum, k, DEFAULT_TUNING
    )


@pytest.mark.parametrize("k", [1, 3, 8])
def test_the_centring_rule_holds_at_eigenvalues_of_many_copies(k):
    # The rows of the identity, twice each, about a common offset: their
    # second moment has one eigenvalue d - 1 times over, which a block of
    # subspace iteration need not find every copy of (its Ritz values stay
    # lower bounds); the rule is the whole spectrum's on both sides.
    d = 60
    base = np.repeat(np.eye(d), 2, axis=0)
    for scale in (0.05, 0.2, 1.0, 5.0):
        tokens = base + scale * np.ones(d)
        mean_sq = _mean_sq(tokens)
        expected = mean_dominates(mean_sq, _moment_eigenvalues(tokens), k, DEFAULT_TUNING)
        assert _rule_centres(tokens, None, mean_sq, k) == expected


def test_the_centring_rule_reads_no_whole_spectrum_where_a_bound_decides(monkeypatch):
    # TF-IDF documents whose mean carries more than 5% of their second
    # moment, counted on the rows as given and centred: center="auto"'s
    # rule at the centred count read the whole spectrum of the documents'
    # second moment, 0.4 s for 2000 of them (as long as the dynamics), where
    # ||m||^2 / lambda_K is 1.5 to 6.2, below 10: a lower bound of lambda_K
    # decides it.
    texts = make_corpus(200, 4, topic_share=0.6, random_state=0)[0]
    X = TfidfVectorizer().fit_transform(texts)
    expected = AttentionClustering("auto", random_state=0).fit(X).n_clusters_

    def refused(*args):
        raise AssertionError("the whole spectrum was computed")

    monkeypatch.setattr(_choose_k, "_moment_eigenvalues", refused)
    assert AttentionClustering("auto", random_state=0).fit(X).n_clusters_ == expected == 4


def test_the_rule_that_centres_the_dynamics_rows():
    def tokens(X):
        return _tokens(
            rows_from(AttentionClustering(), X, reset=True), 2000, np.random.RandomState(0)
        )[0]

    blobs = tokens(make_blobs(300, n_features=5, centers=3, random_state=0)[0])
    assert _tokens_dominate(blobs, 9)
    np.testing.assert_allclose(_centred_tokens(blobs).mean(axis=0), 0.0, atol=1e-12)
    # The paper's mixtures are directions from the origin: their mean stays.
    paper = tokens(make_mixture(600, 6, 3, noise=0.2, random_state=0)[0])
    assert not _tokens_dominate(paper, 3)
    # Narrow sparse rows are densified, as dense rows (wide ones: see
    # test_wide_sparse_rows_are_centred_by_their_inner_products).
    narrow = sp.csr_matrix(blobs)
    np.testing.assert_array_equal(_centred_tokens(narrow), _centred_tokens(blobs))
    assert _tokens_dominate(narrow, 9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_tokens_are_centred_in_their_one_dense_copy(dtype, weighted, traced_peak):
    # The dense copy of sparse tokens is centred in place (tokens - mean
    # held a second one: 80 MB each for 2000 TF-IDF documents of 5000
    # words), to the numbers of the dense tokens' centring, bit for bit;
    # float32 tokens with float64 weights centre in float64, as dense ones.
    tokens = sp.random(300, 4000, density=0.02, format="csr", random_state=0, dtype=dtype)
    weights = np.random.default_rng(0).integers(1, 4, 300).astype(float) if weighted else None
    centred, peak = traced_peak(lambda: _centred_tokens(tokens, weights))
    expected = _centred_tokens(tokens.toarray(), weights)
    assert centred.dtype == expected.dtype
    np.testing.assert_array_equal(centred, expected)
    if centred.dtype == dtype:
        assert peak < 1.5 * centred.nbytes


@pytest.mark.parametrize("weighted", [False, True])
def test_wide_sparse_rows_are_centred_by_their_inner_products(weighted, monkeypatch):
    # Sparse tokens too wide to densify were counted uncentred: the rows of
    # _centred_tokens have the inner products of the tokens minus their
    # (weighted) mean, in at most m dimensions.
    rng = np.random.default_rng(0)
    tokens = sp.random(40, 300, density=0.05, format="lil", random_state=0)
    tokens[:, 0] = 5.0
    tokens = tokens.tocsr()
    weights = rng.integers(1, 4, 40).astype(float) if weighted else None
    dense = tokens.toarray() - np.average(tokens.toarray(), axis=0, weights=weights)
    monkeypatch.setattr(_choose_k, "_CENTRED_TOKENS_BYTES", 40 * 100 * 8)
    rows = _centred_tokens(tokens, weights)
    assert rows.shape[0] == 40 and rows.shape[1] <= 40
    np.testing.assert_allclose(rows @ rows.T, dense @ dense.T, rtol=0, atol=1e-12)


def _shared_feature_clusters(n_padding):
    """120 rows in 4 clusters of 5 features each, all sharing a large feature 0,
    and ``n_padding`` empty columns: CSR."""
    rng = np.random.default_rng(0)
    labels = np.arange(120) % 4
    X = np.zeros((120, 21 + n_padding))
    X[:, 0] = 10.0
    for i, k in enumerate(labels):
        X[i, 1 + 5 * k : 6 + 5 * k] = 1.0 + 0.3 * rng.standard_normal(5)
    return sp.csr_matrix(X)


def test_center_true_counts_wide_sparse_rows_centred(monkeypatch):
    # With center=True, sparse rows whose dense copy exceeds the limit were
    # counted as given (the 4 clusters' shared feature draws every
    # direction together): K = 2 once empty columns pass the limit, 4
    # below it. Here the limit is lowered to keep the test small.
    narrow = choose_n_clusters(
        _shared_feature_clusters(0), AttentionClustering(center=True, random_state=0)
    )
    monkeypatch.setattr(_choose_k, "_CENTRED_TOKENS_BYTES", 120 * 500 * 8)
    wide = choose_n_clusters(
        _shared_feature_clusters(979), AttentionClustering(center=True, random_state=0)
    )
    assert narrow.n_clusters == wide.n_clusters == 4
    assert wide.scores == narrow.scores
    # (The fits at the neighbours, on 21 or 1000 columns, may differ.)
    assert wide.silhouettes[4] == pytest.approx(narrow.silhouettes[4], abs=1e-9)


@pytest.mark.parametrize(
    "mean_sq, eigenvalues, k, dominates",
    [
        (10.5, [4.0, 1.0], 2, True),
        (10.0, [4.0, 1.0], 2, False),
        (10.5, [4.0, 1.0], 1, False),
        (10.5, [4.0, 1.0], 5, True),
        (1e-300, [1.0, 0.0], 2, True),
        (0.0, [1.0, 0.0], 2, False),
        (1e-300, [1.0, -1e-17], 2, True),
    ],
    ids=["above", "at", "first", "k-beyond", "zero-kth", "no-mean", "kth-below-zero"],
)
def test_the_centring_rule_by_hand(mean_sq, eigenvalues, k, dominates):
    # ||m||^2 > 10 lambda_k, strictly; lambda_k is the last eigenvalue when k
    # exceeds their number, and an eigenvalue rounded below zero is zero.
    assert mean_dominates(mean_sq, np.array(eigenvalues), k, DEFAULT_TUNING) == dominates


@pytest.mark.parametrize("share, centres", [(0.95, True), (0.92, True), (0.9, False), (0.5, False)])
def test_the_fit_and_the_dynamics_read_one_centring_rule(share, centres):
    # math.md section 7, "Centring or not": rows on two orthogonal unit
    # directions in shares w and 1 - w have ||m||^2 / lambda_2 = (w^2 + (1 -
    # w)^2) / (1 - w), 18.1, 10.66, 8.2 and 1 here, against the threshold
    # 10. The fit reads m and M on all rows at unit scale; the dynamics on
    # its tokens, from the smaller Gram matrix.
    X = np.zeros((100, 2))
    X[: round(100 * share), 0] = 1.0
    X[round(100 * share) :, 1] = 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AttentionClustering(2, random_state=0).fit(X)
    assert any("their common mean dominates" in str(w.message) for w in caught) == centres
    assert _tokens_dominate(X, 2) == centres
    assert _tokens_dominate(sp.csr_matrix(X), 2) == centres


def test_choosing_k_never_imports_the_estimator_module():
    # The estimator's module imports this one (count_clusters): an import
    # the other way, even inside a function, would close a cycle.
    tree = ast.parse(inspect.getsource(_choose_k))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not any(name and name.split(".")[-1] == "_clustering" for name in imported)


@pytest.mark.parametrize("magnitude", [1e-170, 1e160])
def test_auto_counts_at_any_magnitude(magnitude):
    # The mean's share and center="auto"'s rule squared the tokens as given:
    # 0 or NaN far from 1 (RuntimeWarnings from the package at 1e160), so
    # rows with a common mean were counted as given: 2 for 3 clusters.
    X = make_mixture(1500, 6, 3, noise=0.3, random_state=0)[0] + 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # center="auto" centres
        want = AttentionClustering("auto", random_state=0).fit(X)
        got = AttentionClustering("auto", random_state=0).fit(X * magnitude)
    assert want.n_clusters_ == 3
    assert got.n_clusters_scores_ == want.n_clusters_scores_
    np.testing.assert_array_equal(got.labels_, want.labels_)


def test_auto_on_subnormal_rows_refuses_with_the_fits_message():
    # The drawn rows were scaled by 1 / 2^e, infinite below about 1e-308:
    # "Input X contains infinity" for rows that are tiny, not infinite.
    X = make_mixture(300, 6, 3, noise=0.3, random_state=0)[0] * 1e-319
    with pytest.raises(ValueError, match="Multiply X by a power of two"):
        AttentionClustering("auto", random_state=0).fit(X)


def test_auto_leaves_numpys_global_state_alone(monkeypatch):
    # Above its work limit the dynamics integrates a subsample, which it drew
    # from NumPy's global generator: the scores depended on np.random.seed,
    # and an integer random_state advanced it.
    monkeypatch.setattr(_dynamics, "_AUTO_WORK", 600 * 600 * 8)
    X = make_mixture(1200, 8, 3, noise=0.3, random_state=0)[0]
    fits = []
    for seed in (0, 1):
        np.random.seed(seed)
        before = np.random.get_state()[1].copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fits.append(AttentionClustering("auto", random_state=0).fit(X))
        np.testing.assert_array_equal(np.random.get_state()[1], before)
    assert fits[0].n_clusters_scores_ == fits[1].n_clusters_scores_


def test_auto_on_dask_refuses_nan_with_the_fits_message(mixture):
    # The dynamics' rows were checked by SelfAttentionDynamics, whose message
    # named it and advised HistGradientBoostingClassifier.
    da = pytest.importorskip("dask.array")
    X = mixture[0][:2000].copy()
    X[::7, 1] = np.nan
    with pytest.raises(ValueError, match=r"^Input X contains NaN\.$"):
        AttentionClustering("auto", random_state=0).fit(da.from_array(X, chunks=(500, -1)))


@pytest.mark.parametrize("kind", ["dense", "csr", "dask"])
@pytest.mark.parametrize("offset", [0.0, 3.0, 1e7])
def test_auto_finds_one_cluster_in_one_gaussian(kind, offset, global_random_seed):
    # The dynamics counts metastable groups among an isotropic blob's
    # directions (5 or 6 in d = 4), and no silhouette reads K = 1: the BIC
    # test (math.md section 8, "One cluster or more") keeps one cluster.
    # At an offset of 1e7 the choice's fit is centred and the fit at 1 was
    # not (center="auto" never centres at K = 1): its variance sat at the
    # floor of the rows' norm, and the blob got 3 or 4 clusters. The fit
    # at 1 is centred as the choice's is.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((500, 4))
    X[:, 0] += offset
    if kind == "csr":
        X = sp.csr_matrix(X)
    elif kind == "dask":
        da = pytest.importorskip("dask.array")
        X = da.from_array(X, chunks=(250, 4))
    model = AttentionClustering("auto", random_state=0).fit(X)
    assert model.n_clusters_ == 1
    assert choose_n_clusters(X, AttentionClustering(random_state=0)).n_clusters == 1


@pytest.mark.parametrize(
    ("bic_one", "bic_chosen", "expected"),
    [(10.0, 11.0, 1), (11.0, 11.0, 1), (12.0, 11.0, 3), (None, 11.0, 3)],
)
def test_one_cluster_replaces_the_choice_when_its_bic_is_not_higher(
    mixture, bic_one, bic_chosen, expected, monkeypatch
):
    # count_clusters fits K = 1 after the silhouette's choice and keeps it
    # when the BIC of the fit at 1 is at most the choice's; fits without a
    # mixture (None: refine=None) skip the test and fit nothing at 1.
    X, _ = mixture
    fitted = []

    def fit_at(k, centred=None):
        fitted.append(k)
        model = AttentionClustering(k, random_state=0).fit(X)
        rule = predict_rule(model.cluster_centers_, model.mixture_, model.mean_)
        if bic_one is None:
            return model, rule, None
        return model, rule, _choose_k.FittedMixture(model.mixture_, False, model.center_)

    def bic(self, rows):
        return bic_one if len(self.mixture.centers) == 1 else bic_chosen

    monkeypatch.setattr(_choose_k.FittedMixture, "bic", bic)
    with rows_from(AttentionClustering(), X, reset=True) as rows:
        K, _, _, model = _choose_k.count_clusters(rows, fit_at, random_state=0)
    assert (1 in fitted) == (bic_one is not None)
    assert K == expected == model.n_clusters_


def test_auto_counts_tfidf_documents_on_their_centred_rows():
    # TF-IDF documents of 4 topics share their common words (the corpus'
    # default topic share, 0.3): the dynamics on the rows as given gathered
    # them into one group, the count on the centred rows (4) was not kept,
    # as the mean does not dominate the second moment as center="auto"
    # reads it, and the silhouettes then chose 2 (ARI 0.34 at 2000
    # documents, where the fit at 4 has ARI 1.00). One group on the rows as
    # given and more on the centred rows now keeps the centred count.
    texts, y = make_corpus(400, 4, n_words=2000, random_state=0)[:2]
    X = TfidfVectorizer().fit_transform(texts)
    model = AttentionClustering("auto", random_state=0).fit(X)
    assert model.n_clusters_ == 4
    assert adjusted_rand_score(y, model.labels_) > 0.9


def test_the_centred_count_of_rows_that_gather_as_given_is_compared_with_two():
    # Rows that gather into one group as given and into more once centred
    # keep the centred count (TF-IDF documents, above) only against K = 2,
    # the choice one group led to before: two overlapping blobs off the
    # origin were given 3, 4 or 1 in half of six seeds (the centred count
    # of their metastable groups), and without a mixture, hence without
    # the one-cluster test, random sparse rows were given 13 clusters.
    for seed in range(6):
        rng = np.random.RandomState(seed)
        y = rng.randint(2, size=500)
        centres = np.zeros((2, 10))
        centres[:, 0] = [1.0, -1.0]
        X = centres[y] + rng.randn(500, 10) + 0.5
        assert AttentionClustering("auto", random_state=0).fit(X).n_clusters_ == 2, seed
    noise = sp.random(600, 30, density=0.3, random_state=0, format="csr")
    psgd = AttentionClustering("auto", solver="psgd", random_state=0)
    assert psgd.fit(noise).n_clusters_ <= 2
    assert AttentionClustering("auto", random_state=0).fit(noise).n_clusters_ == 1


def test_auto_on_rows_whose_one_cluster_fit_refuses_their_scale():
    # Rows near float64's smallest numbers: the fit at 1 spreads them by less
    # than float64 can invert, and refuses them, while the fits at 2 and 3
    # hold their scales. The one-cluster test is a comparison, not made
    # then: the choice is that of the rows at unit scale (its ValueError was
    # the fit's at 1).
    X = make_mixture(200, 5, 3, noise=0.2, random_state=0)[0]
    tiny = X * 1e-308
    with pytest.raises(ValueError, match="inverse float64 cannot hold"):
        AttentionClustering(1, random_state=0).fit(tiny)
    want = AttentionClustering("auto", random_state=0).fit(X)
    with pytest.warns(UserWarning, match="was not tested against one cluster") as caught:
        got = AttentionClustering("auto", random_state=0).fit(tiny)
    assert got.n_clusters_ == want.n_clusters_ == 3
    assert got.n_clusters_scores_ == want.n_clusters_scores_
    np.testing.assert_array_equal(got.labels_, want.labels_)
    # ... and the caller hears that the choice went untested: rows of one
    # Gaussian keep the several clusters the test would have replaced.
    assert any(w.filename == __file__ for w in caught)
    blob = np.random.default_rng(0).standard_normal((500, 4))
    assert AttentionClustering("auto", random_state=0).fit(blob).n_clusters_ == 1
    with pytest.warns(UserWarning, match="may hold more clusters than the rows do"):
        AttentionClustering("auto", random_state=0).fit(blob * 1e-308)


@pytest.mark.parametrize("refused", [True, False], ids=["scale", "other"])
def test_only_the_scale_refusal_of_the_fit_at_one_skips_the_test(mixture, refused):
    # Any other ValueError of the fit at 1 is an error, and is raised.
    X, _ = mixture
    with pytest.raises(ValueError, match="inverse float64 cannot hold") as scale:
        AttentionClustering(1).fit(X * 1e-308)
    error = scale.value if refused else ValueError("another error")

    def fit_at(k, centred=None):
        if k == 1:
            raise error
        model = AttentionClustering(k, random_state=0).fit(X)
        rule = predict_rule(model.cluster_centers_, model.mixture_, model.mean_)
        return model, rule, _choose_k.FittedMixture(model.mixture_, False, model.center_)

    with rows_from(AttentionClustering(), X, reset=True) as rows:
        if refused:
            assert _choose_k.count_clusters(rows, fit_at, random_state=0)[0] == 3
        else:
            with pytest.raises(ValueError, match="^another error$"):
                _choose_k.count_clusters(rows, fit_at, random_state=0)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_rows_of_weight_zero_leave_the_bic_as_it_is(k, global_random_seed):
    # The BIC's n counts the rows of positive weight: 2700 rows of weight
    # zero beside 300 rows leave every fit's BIC as without them (n = 3000
    # multiplied the mean log-likelihood by 10, and the one-cluster test
    # then kept 8 clusters of one Gaussian).
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((300, 5)) + [4.0, 0, 0, 0, 0]
    padded = np.vstack([X, rng.standard_normal((2700, 5)) * 50.0])
    weights = np.r_[np.ones(300), np.zeros(2700)]
    gaps = []
    for rows_of in (X, padded):
        bics = {}
        for j in (1, k):
            model = AttentionClustering(j, random_state=0).fit(X)
            mixture = _choose_k.FittedMixture(model.mixture_, False, model.center_)
            w = None if rows_of is X else weights
            with rows_from(AttentionClustering(), rows_of, reset=True, sample_weight=w) as rows:
                bics[j] = mixture.bic(rows)
        gaps.append(bics[k] - bics[1])
    assert gaps[1] == pytest.approx(gaps[0], rel=1e-9)


def test_the_one_cluster_test_reads_the_fits_bic(mixture):
    # The BIC count_clusters compares is the estimator's own bic on the rows.
    X, _ = mixture
    for k in (1, 3):
        model = AttentionClustering(k, random_state=0).fit(X)
        with rows_from(AttentionClustering(), X, reset=True) as rows:
            got = information_criterion(
                rows, model.mixture_, model.centroid_norms_ == "free", model.center_, bic_penalty
            )
        assert got == pytest.approx(model.bic(X), rel=1e-12)


def test_the_k_finder_s_dynamics_counts_without_voting_or_centres_in_r_d(monkeypatch):
    # choose_n_clusters reads the dynamics' count and path alone: its
    # passive tracers were voted (the most work on wide rows beside the
    # steps) and its centres mapped back to R^d (629 x 2^20 dense where the
    # tokens had not met: 5 GB). Neither is formed now.
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    topics = rng.choice(2**16, (3, 200), replace=False)
    labels = rng.integers(0, 3, 300)
    columns = np.concatenate([rng.choice(topics[k], 30, replace=False) for k in labels])
    X = sp.csr_matrix(
        (np.ones(300 * 30), (np.repeat(np.arange(300), 30), columns)), shape=(300, 2**16)
    )
    voted = []
    monkeypatch.setattr(SelfAttentionDynamics, "_vote", lambda self, *args: voted.append(1) or None)
    monkeypatch.setattr(_dynamics, "DENSE_LIMIT_BYTES", 2 * 2**16 * 8)  # two centres
    monkeypatch.setattr(_dynamics, "_SPAN_AUTO_WORK", 100**3)  # 100 tokens move: tracers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        choice = choose_n_clusters(X, AttentionClustering(random_state=0), [1, 2, 3, 4])
    assert choice.n_clusters == 3
    assert not voted


def test_a_count_outside_the_range_takes_the_nearest_of_equal_plateaus():
    # The dynamics' K = 5 outside the range 1..3, whose plateaus are all of
    # length 0: the K of the range nearest 5.
    dynamics = SimpleNamespace(n_clusters_=5, subsample_indices_=None)
    assert _choose_k._read_count(dynamics, [], {1: 0, 2: 0, 3: 0}, 100, None, 100, 10.0, 0.02) == 3


def test_half_of_the_tokens_apart_is_not_most_of_them():
    # No plateau, and 5 groups of 10 tokens: half apart, not most, so the
    # dynamics' K stands (at 6 of 10 it is one cluster).
    unsettled = ["no plateau."]
    scores = {1: 0, 5: 3, 6: 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, expected in ((5, 5), (6, 1)):
            dynamics = SimpleNamespace(n_clusters_=k, subsample_indices_=None)
            got = _choose_k._read_count(dynamics, unsettled, scores, 10, None, 10, 10.0, 0.02)
            assert got == expected


def test_centred_tokens_are_centred_about_their_weighted_mean():
    # The centring of n_clusters="auto"'s count (and the mean's share it
    # reads) weighs the rows: integer weights are repeated rows.
    rng = np.random.default_rng(0)
    tokens = rng.standard_normal((6, 4)) + 3.0
    weights = np.array([1, 1, 1, 1, 5, 9.0])
    centred = _centred_tokens(tokens, weights)
    np.testing.assert_allclose(weights @ centred / weights.sum(), 0.0, atol=1e-12)
    repeated = np.repeat(tokens, weights.astype(int), axis=0)
    np.testing.assert_allclose(
        _choose_k._mean_sq(tokens, weights), _choose_k._mean_sq(repeated), rtol=1e-12
    )


def test_one_group_as_given_and_centred_is_not_a_merged_count(monkeypatch):
    # The count on the centred rows replaces the one on the rows as given
    # when the given rows gather into one group and the centred ones into
    # more; where both are one group it does not (the silhouettes are then
    # those of the rows as given).
    rng = np.random.default_rng(0)
    X = np.vstack(
        [
            [10.0, 0.0] + 0.01 * rng.standard_normal((295, 2)),
            [100.0, 0.0] + 0.01 * rng.standard_normal((5, 2)),
        ]
    )
    seen = []
    original = _choose_k._count_given_or_centred

    def spy(count, *args):
        counts = []

        def counted(*a, **k):
            out = count(*a, **k)
            counts.append(int(out[1].n_clusters_))
            return out

        result = original(counted, *args)
        seen.append((counts, result[3]))
        return result

    monkeypatch.setattr(_choose_k, "_count_given_or_centred", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        choose_n_clusters(X, AttentionClustering(random_state=0), n_clusters_range=range(1, 6))
    ((counts, merged),) = seen
    assert counts == [1, 1]
    assert not merged
