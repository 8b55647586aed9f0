"""partial_fit: the streaming contract and the online EM of math.md section 7."""

import copy
import pickle
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import online_em, online_em_step_sizes
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering, InvalidParameterError
from attention_cluster._mixture import (
    LinearisedEM,
    OnlineEM,
    _maximize,
    held_statistics,
    refine_heads,
)
from attention_cluster._passes import DenseRows
from attention_cluster.datasets import make_embeddings, make_mixture
from attention_cluster.metrics import centroid_distance


def _batches(X, size):
    return [X[i : i + size] for i in range(0, len(X), size)]


def _stream(model, batches, weights=None):
    for i, batch in enumerate(batches):
        model.partial_fit(batch, sample_weight=None if weights is None else weights[i])
    return model


def _over_the_fit_in_memory(seeds, draw, split, kind=OnlineEM):
    """For each seed, the distance to the centroids of one pass of partial_fit
    over the batches ``split(X)`` of ``X, _, C = draw(seed)``, over that of
    the fit of X in memory; every stream ends as ``kind``."""
    ratios = []
    for seed in seeds:
        X, _, C = draw(int(seed))
        K = len(C)
        full = AttentionClustering(K, random_state=0).fit(X)
        model = _stream(AttentionClustering(K, random_state=0), split(X))
        assert isinstance(model._stream, kind)
        ratios.append(
            centroid_distance(model.cluster_centers_, C)
            / centroid_distance(full.cluster_centers_, C)
        )
    return ratios


@pytest.fixture(scope="module")
def stream_data():
    return make_mixture(20_000, 6, 2, noise=0.5, random_state=0)


def test_first_call_initialises_and_steps_count(stream_data):
    X, y, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(X[:2000])
    first = AttentionClustering(random_state=0).fit(X[:2000])
    assert model.n_steps_ == 1
    assert model.scale_ == first.scale_ and model.temperature_ == first.temperature_
    model.partial_fit(X[2000:4000]).partial_fit(X[4000:6000])
    assert model.n_steps_ == 3
    # labels_ describes the last batch only, as predict does.
    np.testing.assert_array_equal(model.labels_, model.predict(X[4000:6000]))


@pytest.mark.parametrize(
    "order, noise, size",
    [("drawn", 0.6, 1000), ("by cluster", 0.6, 1000), ("drawn, then by cluster", 0.3, 250)],
    ids=["drawn", "by-cluster", "by-cluster-ordered"],
)
def test_updates_are_online_em(order, noise, size, global_random_seed, monkeypatch):
    # Later steps against the written-out recursion, from the same start;
    # rows sorted by cluster take the step of batches that are not samples
    # of the stream (math.md section 7) after the first cluster's batches;
    # after a first batch drawn from the whole stream, where the clusters
    # separate, the stream is ordered.
    X, y, C = make_mixture(6000, 5, 3, noise=noise, random_state=global_random_seed)
    if order == "by cluster":
        X = X[np.argsort(y, kind="stable")]
    elif order == "drawn, then by cluster":
        X = np.r_[X[:size], X[size:][np.argsort(y[size:], kind="stable")]]
    rng = np.random.default_rng(global_random_seed)
    U = C.T + 0.2 * rng.standard_normal(C.T.shape)
    U /= np.linalg.norm(U, axis=0)
    pi, tau, scale = np.array([0.5, 0.3, 0.2]), 0.5, 1.25
    batches = _batches(X, size)
    online = OnlineEM(U, pi, tau, alpha=0.7, gain=2.0)
    component_steps = []
    step = OnlineEM._component_step
    monkeypatch.setattr(
        OnlineEM,
        "_component_step",
        lambda self, *a: component_steps.append(1) or step(self, *a),
    )
    # The first E step is at r = 1 and tau, as the reference starts.
    for batch in batches:
        params = online.update(DenseRows(batch, scale=scale, n_threads=1))
    if order == "by cluster":
        assert len(component_steps) >= 2
    assert online.ordered == (order == "drawn, then by cluster")
    expected = online_em(batches, U, pi, 1.0, tau, 1.0 / scale, alpha=0.7, gain=2.0)
    np.testing.assert_allclose(params.U.T, expected, rtol=1e-9, atol=1e-12)


def test_pickles_and_resumes(stream_data):
    X, _, _ = stream_data
    batches = _batches(X, 2000)
    straight = _stream(AttentionClustering(random_state=0), batches)
    resumed = _stream(AttentionClustering(random_state=0), batches[:4])
    resumed = _stream(pickle.loads(pickle.dumps(resumed)), batches[4:])
    np.testing.assert_array_equal(resumed.cluster_centers_, straight.cluster_centers_)
    assert resumed.n_steps_ == straight.n_steps_ == len(batches)


def test_a_stream_is_reproduced_by_its_batches_in_their_order(stream_data):
    # The user guide's "Reproducibility": the same batches in the same order
    # with the same random_state give the same model, bit for bit; the same
    # rows cut into other batches after the first, or those batches in
    # another order, give another model, near it at the scale of the
    # stream's error (here 0.0004 and 0.002 of its squared distance to the
    # centroids; bound 0.25).
    X, _, C = stream_data
    batches = _batches(X, 2000)
    straight = _stream(AttentionClustering(random_state=0), batches)
    again = _stream(AttentionClustering(random_state=0), batches)
    np.testing.assert_array_equal(again.cluster_centers_, straight.cluster_centers_)
    error = centroid_distance(straight.cluster_centers_, C)
    recut = [X[:2000], X[2000:3000], *_batches(X[3000:], 2000)]
    reordered = [batches[0], *batches[:0:-1]]
    for other in (recut, reordered):
        model = _stream(AttentionClustering(random_state=0), other)
        assert not np.array_equal(model.cluster_centers_, straight.cluster_centers_)
        assert centroid_distance(model.cluster_centers_, straight.cluster_centers_) < 0.25 * error


def test_wrong_width_raises_and_keeps_the_state(stream_data):
    X, _, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(X[:2000])
    centers = model.cluster_centers_.copy()
    with pytest.raises(
        ValueError, match="X has 5 features, but AttentionClustering is expecting 6"
    ):
        model.partial_fit(X[:100, :5])
    with pytest.raises(ValueError, match="NaN"):
        model.partial_fit(np.full((10, 6), np.nan))
    assert model.n_steps_ == 1
    np.testing.assert_array_equal(model.cluster_centers_, centers)


@pytest.mark.parametrize("exponent", [-1070, -600, 600, 1020])
def test_batch_weights_count_by_their_ratios_at_any_magnitude(stream_data, exponent):
    # The batches' weights are divided by the first batch's power of two: a
    # stream of 2^k w is the stream of w to the last bit.
    X, _, _ = stream_data
    batches = _batches(X[:6000], 2000)
    w = np.random.default_rng(0).integers(1, 4, (3, 2000)).astype(float)
    want = _stream(AttentionClustering(random_state=0), batches, w)
    got = _stream(AttentionClustering(random_state=0), batches, np.ldexp(w, exponent))
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    np.testing.assert_array_equal(got.labels_, want.labels_)


def test_unweighted_batches_weigh_one_on_the_first_batch_scale(stream_data):
    # No weights are unit weights in the caller's units, also after a first
    # batch weighted 2^-100: the stream divides both by its first unit.
    X, _, _ = stream_data
    batches = _batches(X[:6000], 2000)
    w = np.ldexp(np.random.default_rng(1).integers(1, 4, 2000).astype(float), -100)
    want = _stream(AttentionClustering(random_state=0), batches, [w, np.ones(2000), np.ones(2000)])
    got = _stream(AttentionClustering(random_state=0), batches, [w, None, None])
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)


@pytest.mark.parametrize(
    "first, factor",
    [(1.0, 1e-120), (1.0, 1e120), (1e-200, 1e200)],
    ids=["light", "heavy", "beyond"],
)
def test_a_batch_weighted_far_from_the_first_raises_and_keeps_the_state(stream_data, first, factor):
    # "beyond": the batch's weights relative to the first's exceed float64.
    X, _, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(
        X[:2000], sample_weight=np.full(2000, first)
    )
    centers = model.cluster_centers_.copy()
    with pytest.raises(
        ValueError,
        match="largest weight is (more than 1e308|[0-9.]+e[-+][0-9]+) times the first batch's",
    ):
        model.partial_fit(X[2000:2100], sample_weight=np.full(100, factor))
    assert model.n_steps_ == 1
    np.testing.assert_array_equal(model.cluster_centers_, centers)
    # Within the range:
    model.partial_fit(X[2000:2100], sample_weight=np.full(100, 1e-90 * first))


@pytest.mark.parametrize("largest", [1.0, 1.9, 1.5e-7])
def test_the_weight_limit_is_relative_to_the_first_batchs_largest_weight(stream_data, largest):
    # The weights are held relative to a power of two between the first
    # batch's largest weight and twice that; the limit and the message are
    # of the largest weights as given (a weight of 1.9 first, and batches at
    # 1.9e100 and 1.9e-100 times it, were taken for 0.95e100 and 0.95e-100).
    X, _, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(
        X[:2000], sample_weight=np.r_[np.full(1999, largest / 3), largest]
    )
    for ratio in (0.9e100, 1.1e-100):
        model.partial_fit(X[2000:2100], sample_weight=np.full(100, ratio * largest))
    for ratio, shown in ((1.1e100, "1.1e\\+100"), (0.9e-100, "9e-101")):
        with pytest.raises(ValueError, match=f"largest weight is {shown} times the first batch's"):
            model.partial_fit(X[2000:2100], sample_weight=np.full(100, ratio * largest))
    assert model.n_steps_ == 3


def test_fit_starts_over(stream_data):
    X, _, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(X[:2000]).partial_fit(X[2000:4000])
    model.fit(X[:3000])
    assert not hasattr(model, "n_steps_")
    model.partial_fit(X[:2000])
    assert model.n_steps_ == 1


def test_integer_weights_act_as_repeated_rows(stream_data):
    X, _, _ = stream_data
    rng = np.random.default_rng(0)
    batches = _batches(X[:8000], 2000)
    weights = [rng.integers(0, 3, size=len(b)).astype(float) for b in batches]
    weighted = _stream(AttentionClustering(solver="full", random_state=0), batches, weights)
    repeated = _stream(
        AttentionClustering(solver="full", random_state=0),
        [np.repeat(b, w.astype(int), axis=0) for b, w in zip(batches, weights)],
    )
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(stream_data, dtype):
    # Without a warning: the float32 bound on a batch's magnitude was compared
    # with float64's 1e100 in float32, which overflowed at every later batch.
    X, _, _ = stream_data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = _stream(AttentionClustering(random_state=0), _batches(X[:6000].astype(dtype), 2000))
    assert model.cluster_centers_.dtype == dtype
    assert model.transform(X[:5].astype(dtype)).dtype == dtype


def test_fitted_arrays_take_each_batchs_dtype_over_float64_statistics(stream_data):
    # As partial_fit's docstring says: a float64 batch after a float32 one
    # gives float64 centres, a float32 batch float32 ones; the mixture the
    # stream holds is float64 either way, and differs only by the batch's
    # rounding to float32.
    X, _, _ = stream_data
    first = X[:2000].astype(np.float32)
    mixed = AttentionClustering(random_state=0).partial_fit(first).partial_fit(X[2000:4000])
    kept = AttentionClustering(random_state=0).partial_fit(first)
    kept.partial_fit(X[2000:4000].astype(np.float32))
    assert mixed.cluster_centers_.dtype == np.float64
    assert kept.cluster_centers_.dtype == np.float32
    assert mixed.mixture_.centers.dtype == kept.mixture_.centers.dtype == np.float64
    np.testing.assert_allclose(mixed.mixture_.centers, kept.mixture_.centers, atol=1e-5)
    mixed.partial_fit(X[4000:6000].astype(np.float32))
    assert mixed.cluster_centers_.dtype == np.float32


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_a_batch_far_above_the_first_batchs_scale_updates_without_warnings(stream_data, sparse):
    # Batches are taken up to 1e100 times the first batch's scale: one at
    # 1e90 times warned of an overflow from its fourth moment of norms,
    # which the stream does not read.
    X, _, _ = stream_data
    as_kind = sp.csr_matrix if sparse else np.asarray
    model = AttentionClustering(random_state=0).partial_fit(as_kind(X[:2000]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.partial_fit(as_kind(X[2000:4000] * 1e90))
    assert np.all(np.isfinite(model.cluster_centers_))


def test_one_pass_reaches_the_class_means(global_random_seed):
    # sigma = 0.3: one pass within 2x of the stream's class-means floor
    # (benchmarks/streaming.py measures 1e6 rows and sigma = 1).
    X, y, C = make_mixture(200_000, 10, 2, noise=0.3, random_state=global_random_seed)
    model = _stream(AttentionClustering(random_state=global_random_seed), _batches(X, 10_000))
    means = np.array([X[y == k].mean(axis=0) for k in range(2)])
    floor = centroid_distance(means / np.linalg.norm(means, axis=1, keepdims=True), C)
    assert centroid_distance(model.cluster_centers_, C) < 2.0 * floor
    assert adjusted_rand_score(y[-10_000:], model.labels_) > 0.9


def test_linearised_em_on_a_repeated_batch_converges_to_its_maximum(global_random_seed):
    # The same batch again and again: its statistics are one function of the
    # parameters, the linearisation's error is of second order in how far
    # the parameters each copy saw are from the maximum, and its weight
    # falls as 1 / m, so the published heads reach the batch's
    # maximum-likelihood heads at that rate. The stream starts where
    # partial_fit starts it, at a first batch's fit (here its first 300 rows'
    # maximum); from heads far outside the linearisation's reach (a random
    # turn of squared distance about 1 from the maximum) the first copy's
    # fixed point lands far, and its weight of 1 / m holds the heads off
    # for longer than 64 copies (3 of seeds 0 to 79).
    X, _, C = make_mixture(3000, 5, 3, noise=0.6, random_state=global_random_seed)
    rng = np.random.default_rng(global_random_seed)
    U = C.T + 0.2 * rng.standard_normal(C.T.shape)
    U /= np.linalg.norm(U, axis=0)
    first = X[:300]
    U = refine_heads(
        DenseRows(first), U, float(np.mean(np.sum(first**2, axis=1))), 0.6, tol=1e-20, max_iter=5000
    ).heads
    mean_sq = float(np.mean(np.sum(X**2, axis=1)))
    best = refine_heads(DenseRows(X), U, mean_sq, 0.6, tol=1e-20, max_iter=5000)
    stream = LinearisedEM(U, np.full(3, 1.0 / 3.0), 0.6)
    errors = {}
    for m in range(1, 65):
        params = stream.update(DenseRows(X, n_threads=1))
        errors[m] = float(np.sum((params.U - best.heads) ** 2))
    assert errors[64] < 1e-4
    assert errors[64] < errors[16] / 2.0


def test_a_small_first_batch_does_not_hold_the_stream_off(global_random_seed):
    # partial_fit's stream starts at the first batch's fit; from 20 rows it
    # can lie far from the stream's maximum, and kept in the mean the far
    # batches' statistics fade as 1 / m: after 20 batches of 1000 the median
    # distance was 85 times the in-memory fit's (above 5 times on 53 of seeds
    # 0 to 59). The second batch, of 50 times the weight seen, starts the
    # stream anew at its own fit (and 1000 rows for 24 parameters make it
    # online EM): a median of 1.3 over seeds 0 to 59 (at most 2.3), 7 of the
    # 600 streams above 5 times (5 or more of 10 above: probability about
    # 1e-7).
    ratios = _over_the_fit_in_memory(
        np.random.SeedSequence(global_random_seed).generate_state(10),
        lambda seed: make_mixture(20_020, 10, 2, noise=1.0, random_state=seed),
        lambda X: [X[:20], *_batches(X[20:], 1000)],
    )
    assert np.median(ratios) < 5.0, ratios


def test_a_small_first_batch_does_not_hold_online_em_off(global_random_seed):
    # Above 512 parameters the stream is online EM, which climbs slowly from
    # a first batch too small to resolve the clusters (100 rows for 612
    # parameters): 10 batches of 2000 ended at a median of 37 times the
    # in-memory fit's distance (6 streams). A batch of more than 4 times the
    # weight seen starts the stream anew at its own fit: 1.3 times now,
    # above 3 times on 2 of 60 streams (4 or more of 7 above: probability
    # about 4e-5).
    ratios = _over_the_fit_in_memory(
        np.random.SeedSequence(global_random_seed).generate_state(7),
        lambda seed: make_mixture(20_100, 60, 10, noise=0.5, random_state=seed),
        lambda X: [X[:100], *_batches(X[100:], 2000)],
    )
    assert np.median(ratios) < 3.0, ratios


def test_a_batch_that_outweighs_the_stream_starts_it_anew():
    # More than 4 times the weight seen: the batch is fitted as a first batch
    # would be, at the stream's K, and the stream restarts at that fit.
    X, _, _ = make_mixture(6000, 5, 3, noise=0.3, random_state=0)
    first, big = X[:1000], X[1000:]
    model = AttentionClustering("auto", random_state=0).partial_fit(first)
    scores = model.n_clusters_scores_
    model.partial_fit(big)
    fitted = AttentionClustering(model.n_clusters_, random_state=0).partial_fit(big)
    np.testing.assert_array_equal(model.cluster_centers_, fitted.cluster_centers_)
    assert model.scale_ == fitted.scale_
    assert model.n_steps_ == 2
    assert model.n_clusters_scores_ is scores
    assert model._stream.seen == len(big)
    # Weights count, not rows: the same batch weighted down is an update.
    light = AttentionClustering(3, random_state=0).partial_fit(first)
    light.partial_fit(big, sample_weight=np.full(len(big), 0.5))
    assert light._stream.seen == len(first) + 0.5 * len(big)


@pytest.mark.parametrize(
    "n, d, K, first, batch, kind",
    [(6000, 10, 3, 300, 1500, OnlineEM), (10_000, 5, 2, 1000, 4500, LinearisedEM)],
    ids=["online", "linearised"],
)
def test_a_heavy_batch_of_one_class_updates_the_stream(
    n, d, K, first, batch, kind, global_random_seed
):
    # A shuffled first batch, then the other rows sorted by class in batches
    # the first of which outweighs the stream so far but is no sample of it.
    # Starting the stream anew at the fit of one class's rows lost the other
    # classes (median ARI 0.17 over seeds 0 to 19, at most 0.44, online; 0.002
    # over seeds 0 to 9, linearised); such a batch updates the stream
    # instead, as its rows' shares among the clusters (each row once, or the
    # weighted shares against the mixture's weights where the stream has no
    # rows' shares) refuse it as a sample (0.94 to 0.97 over those seeds).
    X, y, _ = make_mixture(n, d, K, noise=0.3, random_state=global_random_seed)
    rest = first + np.argsort(y[first:], kind="stable")
    model = AttentionClustering(K, random_state=global_random_seed).partial_fit(X[:first])
    assert isinstance(model._stream, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stream taken for an ordered one
        for start in range(0, len(rest), batch):
            model.partial_fit(X[rest[start : start + batch]])
    assert model._stream.seen == n  # (a restart would have dropped the first rows)
    assert adjusted_rand_score(y, model.predict(X)) > 0.8


@pytest.mark.parametrize("parameter, value", [("n_clusters", -1), ("solver", "bogus"), ("tol", -5)])
def test_a_bad_parameter_set_between_batches_is_refused_at_the_next(parameter, value):
    # Only a batch that started the stream anew checked the parameters: a
    # bad one set between batches passed ordinary batches and failed later,
    # by the weight of the batch.
    X, _, _ = make_mixture(300, 5, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    model.set_params(**{parameter: value})
    with pytest.raises(InvalidParameterError, match=parameter):
        model.partial_fit(X[100:200])
    assert model.n_steps_ == 1


@pytest.mark.parametrize("start", ["fit", "partial_fit"])
@pytest.mark.parametrize("batch", [100, 250], ids=["update", "heavy"])
def test_a_number_of_clusters_set_between_batches_is_refused(start, batch):
    # partial_fit went on at the fitted number of clusters whatever n_clusters
    # said, and a heavy batch restarted the stream at the old number with the
    # other parameters set since: n_clusters=2 left three clusters.
    X, _, _ = make_mixture(400, 5, 3, noise=0.3, random_state=0)
    model = getattr(AttentionClustering(3, random_state=0), start)(X[:50])
    model.set_params(n_clusters=2)
    with pytest.raises(InvalidParameterError, match="n_clusters=2"):
        model.partial_fit(X[50 : 50 + batch])
    assert model.cluster_centers_.shape == (3, 5)
    # The fitted number, or "auto" (the number the stream holds), goes on.
    for n_clusters in (3, "auto"):
        model.set_params(n_clusters=n_clusters).partial_fit(X[50 : 50 + batch])
        assert model.n_clusters_ == 3


# For each parameter that shapes a stream, a value other than the default
# and the parameters under which a fit reads it (PSGD's learning_rate,
# batch_size and gradient; n_init and random_state a random start's). Set
# between batches, each was ignored by the updates and applied by a batch
# heavy enough to start the stream anew.
_SHAPING = {
    "temperature": (0.5, {}),
    "sequence_length": (20, {}),
    "regularization": ("product", {}),
    "reg_strength": (0.1, {}),
    "solver": ("psgd", {}),
    "refine": (None, {}),
    "centroid_norms": ("free", {}),
    "learning_rate": (0.5, {"solver": "psgd"}),
    "batch_size": (4, {"solver": "psgd"}),
    "max_iter": (1, {}),
    "tol": (0.5, {}),
    "n_init": (3, {"init": "random"}),
    "init": ("random", {}),
    "gradient": ("euclidean", {"solver": "psgd"}),
    "center": (True, {}),
    "random_state": (1, {"init": "random"}),
}
# The parameters that change no number of a fit or a stream.
_FREE = {"verbose": 1, "n_threads": 2}


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def test_every_parameter_shapes_the_stream_or_changes_no_number():
    # A parameter added to the estimator is placed here, and so tested below.
    assert {"n_clusters", *_SHAPING, *_FREE} == set(AttentionClustering().get_params())


@pytest.mark.parametrize("batch", [100, 600], ids=["update", "heavy"])
@pytest.mark.parametrize("parameter", list(_SHAPING))
def test_a_parameter_that_shapes_the_stream_set_between_batches_is_refused(parameter, batch):
    # An ordinary batch ignored a parameter set since the stream started, and
    # a batch of more than 4 times the weight seen started the stream anew
    # with it: when it took effect hung on the batches' weights. The call is
    # refused, naming both values, and set back the stream goes on as if it
    # had never changed.
    value, params = _SHAPING[parameter]
    X = make_mixture(800, 5, 3, noise=0.4, random_state=0)[0]
    model = _quiet(lambda: AttentionClustering(3, random_state=0, **params).partial_fit(X[:100]))
    untouched = _quiet(lambda: copy.deepcopy(model).partial_fit(X[100 : 100 + batch]))
    started = model.get_params()[parameter]
    model.set_params(**{parameter: value})
    named = re.escape(f"{parameter}={value!r} (the stream's: {started!r})")
    with pytest.raises(InvalidParameterError, match=named):
        model.partial_fit(X[100 : 100 + batch])
    assert model.n_steps_ == 1
    model.set_params(**{parameter: started})
    _quiet(lambda: model.partial_fit(X[100 : 100 + batch]))
    np.testing.assert_array_equal(model.cluster_centers_, untouched.cluster_centers_)
    assert model.mixture_.variance == untouched.mixture_.variance


def test_the_parameters_are_checked_before_the_batch_is_read():
    # A batch of another width after a change is refused for the change,
    # and every parameter changed is named.
    X = make_mixture(200, 5, 3, noise=0.4, random_state=0)[0]
    model = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    model.set_params(tol=0.5, center=False, verbose=0)
    with pytest.raises(InvalidParameterError, match="center=False .*, tol=0.5 ") as refused:
        model.partial_fit(X[100:, :4])
    assert "verbose" not in str(refused.value)


@pytest.mark.parametrize("parameter", list(_FREE))
def test_a_parameter_that_changes_no_number_may_change_between_batches(parameter):
    # verbose prints, and the passes' chunks and the order of their sums do
    # not depend on the threads: the stream, through an update and a batch
    # that starts it anew over two chunks of rows, is the one without the
    # change, bit for bit.
    X = make_mixture(9000, 100, 3, noise=0.4, random_state=0)[0]
    batches = [X[:1000], X[1000:1500], X[1500:]]
    untouched = _stream(AttentionClustering(3, random_state=0), batches)
    model = AttentionClustering(3, random_state=0).partial_fit(batches[0])
    model.set_params(**{parameter: _FREE[parameter]})
    _stream(model, batches[1:])
    assert model._stream.seen == len(batches[2])  # (started anew)
    np.testing.assert_array_equal(model.cluster_centers_, untouched.cluster_centers_)
    np.testing.assert_array_equal(model.moment_heads_, untouched.moment_heads_)
    assert model.mixture_.variance == untouched.mixture_.variance


def test_a_stream_keeps_its_random_state():
    # As MiniBatchKMeans keeps its first call's random state: an integer
    # seeds a restart as it seeded the start, and an instance goes on
    # drawing, so the same seed, or the same instance, goes on; another
    # seed, or another instance however seeded, is refused (it would take
    # effect only at a batch that starts the stream anew).
    X = make_mixture(300, 5, 3, noise=0.4, random_state=0)[0]
    generator = np.random.RandomState(0)
    for start, same, other in [
        (0, np.int64(0), 1),
        (generator, generator, np.random.RandomState(0)),
    ]:
        model = AttentionClustering(3, init="random", random_state=start).partial_fit(X[:100])
        model.set_params(random_state=other)
        with pytest.raises(InvalidParameterError, match="random_state="):
            model.partial_fit(X[100:200])
        model.set_params(random_state=same).partial_fit(X[100:200])
        assert model.n_steps_ == 2


def test_an_init_changed_since_the_stream_started_is_named_by_an_entry_that_differs():
    # Two arrays of one shape read alike in the refusal ("init=<array of
    # shape (3, 5)> (the stream's: <array of shape (3, 5)>)"), and an init
    # written in place, or rounded to float32, differs from the stream's in
    # its values alone: the refusal names the first entry that differs.
    X = make_mixture(300, 5, 3, noise=0.4, random_state=0)[0]
    init = X[:3].copy()
    model = AttentionClustering(3, init=init, random_state=0).partial_fit(X[:100])
    init[1, 2] = 7.0
    stream = re.escape(f"init[1, 2] = 7.0, the stream's: {float(X[1, 2])!r})")
    with pytest.raises(InvalidParameterError, match=rf"init=<array of shape \(3, 5\)> \({stream}"):
        model.partial_fit(X[100:200])
    model.set_params(init=X[:3].astype(np.float32))
    with pytest.raises(InvalidParameterError, match=r"init\[0, 0\] = "):
        model.partial_fit(X[100:200])
    # The same numbers in a list go on.
    model.set_params(init=X[:3].tolist()).partial_fit(X[100:200])
    assert model.n_steps_ == 2


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_a_stream_s_parameters_survive_copies_and_fit_starts_them_anew(how):
    copied = {
        "pickle": lambda m: pickle.loads(pickle.dumps(m)),
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
    }[how]
    X = make_mixture(300, 5, 3, noise=0.4, random_state=0)[0]
    model = AttentionClustering(3, init="random", random_state=np.random.RandomState(0))
    model = copied(model.partial_fit(X[:100]))
    model.set_params(tol=0.5)
    with pytest.raises(InvalidParameterError, match="tol=0.5"):
        model.partial_fit(X[100:200])
    # The copy's random_state is the stream's generator.
    model.set_params(tol="auto").partial_fit(X[100:200])
    # fit starts a stream with the parameters set since.
    model.set_params(tol=0.5).fit(X[:100])
    model = copied(model).partial_fit(X[100:200])
    with pytest.raises(InvalidParameterError, match="tol='auto' \\(the stream's: 0.5\\)"):
        model.set_params(tol="auto").partial_fit(X[200:])


def test_a_stream_pickled_before_its_parameters_were_kept_keeps_those_of_its_next_batch():
    X = make_mixture(300, 5, 3, noise=0.4, random_state=0)[0]
    model = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    del model.__dict__["_stream_params"]
    model = pickle.loads(pickle.dumps(model)).set_params(tol=0.5)
    model.partial_fit(X[100:200])
    with pytest.raises(InvalidParameterError, match="tol='auto'"):
        model.set_params(tol="auto").partial_fit(X[200:])


@pytest.mark.parametrize("kind", [np.asarray, sp.csr_matrix], ids=["dense", "sparse"])
def test_a_batch_equal_to_a_first_batch_of_equal_rows_is_taken(kind):
    # The first batch's rows are all one row: centred, they are zero, and
    # the scale is 1. A sparse batch equal to it was refused as "2e+17 times
    # the scale" (a bound on its centred peak, |x| + |m|), the dense one taken.
    b = np.repeat(np.r_[1e17, np.zeros(9)][None], 50, 0).astype(np.float32)
    model = AttentionClustering(3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # equal rows, centred
        model.partial_fit(kind(b)).partial_fit(kind(b))
    assert model.n_steps_ == 2


@pytest.mark.parametrize("kind", [np.asarray, sp.csr_matrix], ids=["dense", "sparse"])
def test_score_after_a_batch_far_above_the_first_batch_s_scale(kind):
    # A batch 1e20 to 1e99 times the first batch's scale (accepted up to
    # 1e100) makes moment_heads_ large at unit scale: score's expansion
    # overflowed into inf - inf, a NaN score. Now the error of the NumPy
    # formula ||y - T(y)||^2 (in extended precision), and -inf where that
    # mean passes float64's range.
    # Rows along a feature the training rows lack (no head sees them: the
    # error is their squared norm) scored 0 once that norm was divided by
    # the power of two of moment_heads_.
    X, _, _ = make_mixture(1000, 10, 3, noise=0.3, random_state=0)
    X[:, -1] = 0.0
    unseen = np.zeros((3, 10))
    unseen[:, -1] = [1.0, 2.0, 3.0]
    for factor in (1e20, 1e40, 1e85):
        model = AttentionClustering(3, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the far batch's centring
            model.partial_fit(kind(X[:500])).partial_fit(kind(X[500:] * factor))
        for Z in (X[500:] * factor, X[500:], X[:500] * 1e-60, unseen, unseen * 1e-100):
            # (Rows of 1e-60 after the batch of 1e85: their terms in
            # moment_heads_ pass float64 at their own scale, not at the data's.)
            Y = (Z - model.mean_).astype(np.longdouble)
            out = model.temperature_ * model.n_clusters_ * model.moment_heads_
            T = (Y @ model.cluster_centers_.T) @ out.astype(np.longdouble)
            with np.errstate(over="ignore"):
                expected = float(-np.mean(np.sum((Y - T) ** 2, axis=1)))
            assert model.score(kind(Z)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", [2, 11])
def test_a_heavy_sample_restarts_a_stream_that_drifted(seed):
    # A first batch of 30 rows, then 2070 rows sorted by class in batches of
    # 100: the stream drifts (ARI 0.18, a component at 2.7% of the weight).
    # A batch of the 9900 other rows is a sample of the stream and starts it
    # anew. The restart's test compared its shares with online EM's running
    # shares, taken at earlier parameters, and refused it (ARI 0.075 and
    # 0.30 for these seeds, 0.64 restarted); it compares them with the
    # mixture's weights at the current ones (23 of seeds 0 to 23 restart).
    X, y, _ = make_mixture(12_000, 10, 3, noise=0.5, random_state=seed)
    order = 30 + np.argsort(y[30:2100], kind="stable")
    model = AttentionClustering(3, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stream taken for an ordered one, centring
        model.partial_fit(X[:30])
        for start in range(0, len(order), 100):
            model.partial_fit(X[order[start : start + 100]])
        model.partial_fit(X[2100:])
    assert model._stream.seen == 9900


@pytest.mark.parametrize("seed", [8, 10])
def test_a_weighted_sample_restarts_a_stream_counted_by_effective_rows(seed):
    # 3000 rows drawn as the first 1000, 10 of them weighing 1e4 whatever
    # their rows: a sample of the stream, 100 times its weight. Its weighted
    # shares were tested as if of 3000 rows (refused for these seeds, 2 of
    # seeds 0 to 11); each side counts its effective rows, (sum w)^2 / sum
    # w^2 (about 10 here), and the batch starts the stream anew.
    X, _, _ = make_mixture(4000, 3, 2, noise=0.3, random_state=seed)
    w = np.ones(3000)
    w[np.random.default_rng(seed).choice(3000, 10, replace=False)] = 1e4
    model = AttentionClustering(2, random_state=seed).partial_fit(X[:1000])
    assert isinstance(model._stream, LinearisedEM)
    assert model._stream._effective_rows_seen() == pytest.approx(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # centring
        model.partial_fit(X[1000:], sample_weight=w)
    assert model._stream.seen == pytest.approx(w.sum())
    assert model._stream._effective_rows_seen() == pytest.approx(w.sum() ** 2 / np.dot(w, w))


@pytest.mark.parametrize("seed", [0, 2])
def test_a_heavy_sample_after_small_batches_restarts_the_stream(seed):
    # A first batch of 60 rows, three of 20, then a sample of 720 rows, 6
    # times the stream's. Against the mixture's weights at online EM's
    # running parameters, which small batches swing (0.52 beside 0.02 where
    # the published weights were 0.23 and 0.15), it was refused for 6 of 40
    # seeds, these among them; against the published ones, 0.
    X, _, _ = make_mixture(3960, 5, 3, noise=0.5, random_state=seed)
    model = AttentionClustering(3, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # centring
        model.partial_fit(X[:60])
        for start in (60, 80, 100):
            model.partial_fit(X[start : start + 20])
        model.partial_fit(X[120:840])
    assert model._stream.rows_seen == 720


@pytest.mark.parametrize("K, spread", [(3, 3.0), (5, 2.5)])
def test_a_batch_of_one_class_with_heavy_tailed_weights_updates_the_stream(K, spread):
    # 1500 rows of one class, their weights lognormal (effective rows about
    # 4): its weighted shares counted by its effective rows pooled every
    # component expected fewer than 5 times into one, and the batch passed
    # for a sample (5 of 10 seeds restarted, ARI 0.95 to 0.08). Each row
    # counts once: it is refused.
    X, y, _ = make_mixture(6300, 10, K, noise=0.3, random_state=1)
    one = X[300:][y[300:] == 0][:1500]
    w = np.random.default_rng(1).lognormal(0.0, spread, len(one))
    model = AttentionClustering(K, random_state=1).partial_fit(X[:300])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(one, sample_weight=w)
    assert model._stream.rows_seen == 300 + len(one)


def test_running_shares_of_a_few_rows_do_not_let_a_one_class_batch_restart():
    # After a weighted fit online EM's running shares start again at the
    # next batch: 5 rows' shares refused almost nothing, and a batch of 5000
    # rows of one class, refused against the published weights, restarted
    # the stream there (16 of 30 streams, ARI 0.93 to 0.11). They are read
    # only where they hold at least half the stream's rows.
    X, y, _ = make_mixture(20_000, 10, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0).fit(X[:1000], sample_weight=np.ones(1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(X[1000:1005])
        model.partial_fit(X[1005:][y[1005:] == 0][:5000])
    assert model._stream.rows_seen == 6005
    assert adjusted_rand_score(y[1000:4000], model.predict(X[1000:4000])) > 0.8


def test_a_stream_pickled_before_its_squared_weights_counts_its_rows():
    # A stream pickled before weight_squares existed took the squares of the
    # batches after it alone: 10201 effective rows of 101 (5 of 60 samples
    # then refused). It counts its rows until its squares are whole.
    X, _, _ = make_mixture(700, 10, 3, noise=1.0, random_state=0)
    model = AttentionClustering(3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(X[:60]).partial_fit(X[60:100])
        del model._stream.__dict__["weight_squares"]
        model = pickle.loads(pickle.dumps(model))
        model.partial_fit(X[100:101])
    assert model._stream._effective_rows_seen() == 101


def test_a_few_heavy_rows_update_the_stream_and_do_not_restart_it():
    # A batch that outweighs the stream but holds fewer rows of positive
    # weight than clusters cannot be fitted on its own: it updates the
    # stream. Before, the restart refitted it and raised "n_samples=2 should
    # be >= n_clusters=3", and two unweighted rows were accepted.
    X, _, _ = make_mixture(2000, 5, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0).partial_fit(X[:100])
    before = model.scale_
    model.partial_fit(X[100:103], sample_weight=[300.0, 300.0, 0.0])
    assert model.n_steps_ == 2
    assert model._stream.seen == 100 + 600
    assert model.scale_ == before
    assert np.all(np.isfinite(model.cluster_centers_))


def test_two_equal_rows_then_another_line_update_to_finite_values():
    # Hypothesis found it: two equal rows, then rows along another line. The
    # first batch's fit leaves one of two heads without points (log pi =
    # -inf); the next batch reseeds it and the update stays finite (it had
    # raised an AttributeError in a restart of the linearised stream).
    row = np.array([0.12573022, -0.13210486, 0.64042265])
    model = AttentionClustering(2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two equal rows for two clusters
        model.partial_fit(np.vstack([row, row]))
        model.partial_fit(2.0 * np.resize(row[:, None], (3, 3)))
    assert model.n_steps_ == 2
    assert np.all(np.isfinite(model.cluster_centers_))
    np.testing.assert_allclose(model.weights_.sum(), 1.0)


def test_many_parameters_stream_by_online_em():
    # Above _LINEARISED_MAX_PARAMETERS the Jacobian would cost too many E
    # steps per batch: partial_fit updates by online EM.
    X, _, C = make_mixture(4000, 120, 5, noise=0.1, random_state=0)
    model = _stream(AttentionClustering(5, random_state=0), _batches(X, 2000))
    assert isinstance(model._stream, OnlineEM)
    assert centroid_distance(model.cluster_centers_, C) < 0.1
    small = _stream(AttentionClustering(2, random_state=0), _batches(X[:, :10], 2000))
    assert isinstance(small._stream, LinearisedEM)


def test_free_norms_stream_to_the_in_memory_fit(global_random_seed):
    # Centroids at norms 0.6, 1 and 1.6: the first batch's fit takes one norm
    # per centroid (centroid_norms="auto"), and one pass over ten batches
    # ends as close to the centroids as the fit of all rows in memory. On
    # one data set the ratio of the two distances exceeds 1.25 for about 5%
    # of the seeds (a small distance of the fit in memory); summed over five
    # data sets, 200 seeds (global_random_seed 0 to 199) gave a mean ratio
    # of 1.02, standard deviation 0.055, and a tail: above 1.15 on 3, the
    # largest 1.29 (seed 39), which a bound of 1.25 failed.
    norms = np.array([0.6, 1.0, 1.6])
    distances = np.zeros(2)
    for seed in np.random.default_rng(global_random_seed).integers(2**31 - 1, size=5):
        X, y, C = make_mixture(20_000, 5, 3, noise=0.5, random_state=int(seed))
        X = X + (norms - 1.0)[y, None] * C[y]
        stream = _stream(AttentionClustering(3, random_state=0), _batches(X, 2000))
        whole = AttentionClustering(3, random_state=0).fit(X)
        assert stream.centroid_norms_ == whole.centroid_norms_ == "free"
        assert isinstance(stream._stream, LinearisedEM)
        distances += [
            centroid_distance(stream.cluster_centers_, C),
            centroid_distance(whole.cluster_centers_, C),
        ]
        fitted = np.sort(np.linalg.norm(stream.means_ - stream.mean_, axis=1))
        np.testing.assert_allclose(fitted, norms, atol=0.05)
    assert distances[0] / distances[1] < 1.4


def test_a_centred_stream_updates_on_centred_rows(global_random_seed):
    # A common offset makes the first batch's fit centre the data
    # (center="auto"); the later batches are centred on the same mean_, so
    # one pass ends at the in-memory fit's centres, not at those of the
    # uncentred rows.
    X, y, _ = make_embeddings(6000, 64, 4, offset=3.0, noise=0.05, random_state=global_random_seed)
    with pytest.warns(UserWarning, match="centred the data"):
        stream = _stream(AttentionClustering(4, random_state=0), _batches(X, 1000))
        whole = AttentionClustering(4, random_state=0).fit(X)
    assert stream.center_ and whole.center_
    assert adjusted_rand_score(y, stream.predict(X)) > 0.99
    order = [np.argmax(whole.means_ @ m) for m in stream.means_]
    assert sorted(order) == list(range(4))
    np.testing.assert_allclose(stream.means_, whole.means_[order], atol=0.02)


def test_a_centred_stream_labels_its_last_batch_as_predict_does(global_random_seed):
    # predict's rule puts mean_ in the bias, so labels_ must be taken on the
    # rows as given; on rows centred first, mean_ would count twice (2% of
    # the labels differ at this noise).
    X, _, _ = make_embeddings(6000, 64, 4, offset=3.0, noise=0.4, random_state=global_random_seed)
    with pytest.warns(UserWarning, match="centred the data"):
        stream = _stream(AttentionClustering(4, random_state=0), _batches(X, 1000))
    assert stream.center_
    np.testing.assert_array_equal(stream.labels_, stream.predict(X[-1000:]))


@pytest.mark.parametrize("params", [{"refine": None}, {"solver": "psgd"}], ids=str)
def test_a_stream_is_refined_whatever_refine(params):
    # Every update is the EM refinement's: after partial_fit the attributes
    # say so (refine_ read None beside a fitted mixture_ and predict_proba).
    X = make_mixture(400, 4, 2, random_state=0)[0]
    model = AttentionClustering(2, random_state=0, **params).partial_fit(X)
    assert model.refine_ == "em" and model.mixture_ is not None
    np.testing.assert_array_equal(model.predict(X), np.argmax(model.predict_proba(X), axis=1))


# --- Small batches, lost components, wide rows, partial_fit after fit -------


def test_small_batches_stream_by_online_em(global_random_seed):
    # Batches of 100 rows for 24 parameters (d = 10, K = 2, sigma = 1): the
    # linearised stream took its Jacobian by forward differences on one such
    # batch, whose sampling error sent the fixed point out of its domain,
    # and restarted at the batch, discarding the stream (20 to 90 restarts
    # per stream): one pass ended at a median of 31 to 230 times the
    # in-memory fit's distance to the centroids (5 streams, seeds 0 to 2).
    # Below 64 rows per parameter the stream is online EM: a median of 1.4
    # (at most 2.0 over seeds 0 to 59).
    ratios = _over_the_fit_in_memory(
        np.random.SeedSequence(global_random_seed).generate_state(5),
        lambda seed: make_mixture(10_000, 10, 2, noise=1.0, random_state=seed),
        lambda X: _batches(X, 100),
    )
    assert np.median(ratios) < 3.0, ratios


@pytest.mark.parametrize(
    "batch, weighted", [(100, False), (50, False), (100, True)], ids=["100", "50", "100-weighted"]
)
def test_streams_sorted_by_cluster_keep_every_cluster(batch, weighted, global_random_seed):
    # Rows sorted by cluster after a shuffled first batch, online EM: each
    # batch of one cluster was a plain EM step on its rows while gamma_n is
    # 1, and the clusters it lacked lost their statistics (ARI 0.25 to 0.48
    # on seeds 0 to 2 in batches of 100, a cluster reseeded in each). A
    # batch that is not a sample of the stream moves each component by its
    # own share, and a stream of such batches is ordered (math.md section
    # 7): the sorted stream ends with the shuffled one's ARI. In batches of
    # 50, the running weights followed the sorted stream until its batches
    # passed for samples (median ARI 0.75 over 10 seeds); lognormal(0, 1.5)
    # weights, tested by Kish's effective rows, let most pass (0.46).
    # Three streams: the changes before lost on one to three of seeds 0 to 4.
    for seed in global_random_seed + np.arange(3):
        X, y, C = make_mixture(3000, 10, 3, noise=0.3, random_state=seed)
        rng = np.random.default_rng(seed)
        w = rng.lognormal(0.0, 1.5, len(X)) if weighted else np.ones(len(X))
        order = rng.permutation(len(X))
        first, rest = order[:300], order[300:]
        ends = {}
        for name, rows in (
            ("shuffled", rest),
            ("sorted", rest[np.argsort(y[rest], kind="stable")]),
        ):
            model = AttentionClustering(3, random_state=0)
            model.partial_fit(X[first], sample_weight=w[first])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for i in range(0, len(rows), batch):
                    model.partial_fit(X[rows[i : i + batch]], sample_weight=w[rows[i : i + batch]])
            # The sorted stream is said to be ordered, once, at the caller's line.
            said = [c for c in caught if "clusters' order" in str(c.message)]
            assert len(said) == (name == "sorted"), (seed, name, [str(c.message) for c in caught])
            assert all(c.filename == __file__ for c in said)
            assert isinstance(model._stream, OnlineEM)
            ends[name] = adjusted_rand_score(y, model.predict(X))
        assert ends["sorted"] > 0.9, (seed, ends)
        assert abs(ends["sorted"] - ends["shuffled"]) < 0.02, (seed, ends)


def test_large_batches_a_little_off_the_running_weights_are_samples():
    # Shares 0.05 off the running weights over 10^6 rows: significant, but
    # an effect of 0.015, the running weights' lag while the parameters move
    # (math.md section 7): a sample; a share of 1 is not.
    U = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 3)))[0]
    refused = []
    for shares in ([0.4, 0.3, 0.3], [1.0, 0.0, 0.0]):
        online = OnlineEM(U, np.full(3, 1 / 3), 0.5)
        online.update(_GivenStatistics(1e6, np.eye(3, 4), np.full(3, 1 / 3), n_weighted=10**6))
        online.update(_GivenStatistics(1e6, np.eye(3, 4), np.array(shares), n_weighted=10**6))
        refused.append(online.refused)
    assert refused == [0, 1]


def _stream_at(weights, earlier_rows=10**9):
    """An online EM stream whose running weights and rows' shares are
    ``weights``, after ``earlier_rows`` rows of as much weight."""
    U = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 3)))[0]
    online = OnlineEM(U, np.full(3, 1 / 3), 0.5)
    online.stats = (np.asarray(weights)[:, None] * np.eye(3, 4), np.asarray(weights, dtype=float))
    online.row_shares = np.asarray(weights, dtype=float)
    online.seen, online.rows_seen, online.row_rows = float(earlier_rows), earlier_rows, earlier_rows
    return online


def test_the_sample_test_counts_rows_and_the_running_shares_own_noise():
    # math.md section 7: shares with an effect of 0.215 against equal
    # shares; Pearson's statistic is n / (1 + n / N) times it, N the earlier
    # rows, against 9.21 (chi-square, 2 degrees of freedom, 1%).
    online, shares = _stream_at([1 / 3, 1 / 3, 1 / 3]), np.array([0.55, 0.25, 0.2])
    assert not online._is_sample(shares, 100.0, np.inf)  # 21.5
    assert online._is_sample(shares, 20.0, np.inf)  # 4.3: fewer rows
    assert not online._is_sample(shares, 60.0, np.inf)  # 12.9
    assert online._is_sample(shares, 60.0, 60.0)  # 6.4: the running shares' own noise


def test_the_sample_test_counts_each_row_once_whatever_its_weight():
    # A batch is a sample of the stream's rows, and its weights fall on
    # them: 100 rows in the stream's shares, one of which weighs as much as
    # the 99 others (weighted shares 0.55, 0.25, 0.2), pass; rows off the
    # stream's shares (0.55, 0.25, 0.2 of 100 rows) do not, whatever their
    # weights. Kish's effective number of rows (about 4 here) took the
    # first for a sample only by taking 100 rows for 4, which let batches of
    # one cluster pass too.
    refused = []
    for weighted, rows in (
        ([0.55, 0.25, 0.2], [1 / 3, 1 / 3, 1 / 3]),
        ([1 / 3] * 3, [0.55, 0.25, 0.2]),
    ):
        stream = _stream_at([1 / 3, 1 / 3, 1 / 3])
        stream.update(_GivenStatistics(100.0, np.eye(3, 4), np.array(weighted), 100, rows))
        refused.append(stream.refused)
    assert refused == [0, 1]
    # The rows' shares are counted by a pass over the rows at unit weights.
    X = np.ones((100, 4))
    w = np.r_[99.0, np.ones(98), 0.0]
    unit = DenseRows(X, w).unit_weighted()
    assert unit.total_weight == 99.0 and unit.n_weighted == 99
    np.testing.assert_array_equal(unit.sample_weight, np.r_[np.ones(99), 0.0])
    assert DenseRows(X).unit_weighted().sample_weight is None


def test_a_stream_refused_more_often_than_the_level_explains_is_ordered():
    # math.md section 7: refusals are at most a share `significance` of the
    # batches of a sample; P(Binomial(tested, 0.01) >= lacking) below 1e-4,
    # lacking the refused batches that lack a cluster, takes the stream for
    # one in the clusters' order, whose later batches all move the
    # components by their shares (here the sample's).
    stream = _stream_at([1 / 3, 1 / 3, 1 / 3])
    even = np.full(3, 1 / 3)
    for shares in (even, [1.0, 0.0, 0.0], even, [0.0, 1.0, 0.0]):
        stream.update(_GivenStatistics(100.0, np.eye(3, 4), np.array(shares), 100))
    # 2 of 4: a tail of 6e-4.
    assert (stream.tested, stream.refused, stream.lacking, stream.ordered) == (4, 2, 2, False)
    stream.update(_GivenStatistics(100.0, np.eye(3, 4), np.array([0.0, 0.0, 1.0]), 100))
    # 3 of 5: 1e-5.
    assert (stream.tested, stream.refused, stream.lacking, stream.ordered) == (5, 3, 3, True)
    stream.update(_GivenStatistics(100.0, np.eye(3, 4), even, 100))
    assert (stream.tested, stream.refused) == (5, 4)
    # The test off: no batch is refused, no stream ordered.
    stream = _stream_at([1 / 3, 1 / 3, 1 / 3])
    stream.significance = 0.0
    for k in range(3):
        stream.update(_GivenStatistics(100.0, np.eye(3, 4), np.eye(3)[k], 100))
    assert (stream.tested, stream.refused, stream.ordered) == (0, 0, False)


def test_refused_batches_that_lack_no_cluster_do_not_order_the_stream():
    # Shares off the stream's that hold every cluster (the parameters moving
    # while a first fit's misplaced heads settle, or a few batches of an
    # overlapping mixture): refused, each a component step, but the stream
    # is not taken for an ordered one. Counting them ordered shuffled
    # streams from small first batches (K = 8, batches of 50: 2 of 6 streams,
    # 5 times the distance with the test off).
    stream = _stream_at([1 / 3, 1 / 3, 1 / 3], earlier_rows=10**9)
    for _ in range(8):
        stream.update(_GivenStatistics(100.0, np.eye(3, 4), np.array([0.55, 0.25, 0.2]), 100))
    assert (stream.tested, stream.refused, stream.lacking, stream.ordered) == (8, 8, 0, False)


def test_the_rows_shares_are_not_a_weighted_fits_shares():
    # After a fit whose weights differ between clusters (class-balanced
    # weights), the running rows' shares started at the fit's weighted
    # shares: every shuffled batch was refused and the stream ordered within
    # 3 to 5 batches (3 to 10 times the distance with the test off); they
    # start at the first batch after such a fit. After a first batch of
    # zero rows, which no E step reads, the shares summed to less than 1 and
    # shuffled streams were ordered too.
    from sklearn.utils.class_weight import compute_sample_weight

    X, y, C = make_mixture(6000, 10, 3, noise=0.5, weights=[0.6, 0.2, 0.2], random_state=0)
    w = compute_sample_weight("balanced", y)
    model = AttentionClustering(3, random_state=0).fit(X[:3000], sample_weight=w[:3000])
    for i in range(3000, 6000, 100):
        model.partial_fit(X[i : i + 100], sample_weight=w[i : i + 100])
    stream = model._stream
    assert not stream.ordered and stream.refused <= 3, (stream.refused, stream.tested)
    model = AttentionClustering(3, random_state=0).partial_fit(np.zeros((200, 10)))
    for i in range(0, 3000, 100):
        model.partial_fit(X[i : i + 100])
    stream = model._stream
    assert not stream.ordered and stream.lacking == 0, (stream.refused, stream.tested)
    np.testing.assert_allclose(stream.row_shares.sum(), 1.0)


def test_the_sample_test_pools_components_expected_fewer_than_five_times():
    # Weights 0.96, 0.02, 0.02 on 100 rows: the two light components are
    # expected twice each, pooled into one (expected 4). Shares 0.92, 0.08,
    # 0: an effect of 0.20, but pooled Pearson's statistic 4.2 against 6.63
    # (1 degree of freedom); unpooled it was 20.
    online = _stream_at([0.96, 0.02, 0.02])
    assert online._is_sample(np.array([0.92, 0.08, 0.0]), 100.0, np.inf)
    assert not online._is_sample(np.array([0.5, 0.5, 0.0]), 100.0, np.inf)


def test_a_batch_that_is_not_a_sample_moves_the_components_it_reaches():
    # math.md section 7: the weights are the running mean of the batches'
    # shares; a component the batch does not reach keeps its mean row, in
    # the running statistics and in their average; a reached one moves by
    # the batch's part of its weight seen.
    U = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 3)))[0]
    online = OnlineEM(U, np.full(3, 1 / 3), 0.5)
    rng = np.random.default_rng(3)
    first = [rng.uniform(-1.0, 1.0, (3, 4)), np.full(3, 1 / 3)]
    online.update(_GivenStatistics(300.0, *first, n_weighted=300))
    (S, pi), (S_avg, pi_avg), W = online.stats, online.averaged, online.average_weight
    batch_mean = rng.uniform(-1.0, 1.0, (3, 4))
    shares = np.array([1.0, 0.0, 0.0])
    online.update(_GivenStatistics(100.0, shares[:, None] * batch_mean, shares, n_weighted=100))
    pi_new = pi + 0.25 * (shares - pi)
    np.testing.assert_allclose(online.stats[1], pi_new, rtol=1e-12)
    np.testing.assert_allclose(online.averaged[1], pi_new, rtol=1e-12)
    for k in (1, 2):
        np.testing.assert_allclose(online.stats[0][k] / pi_new[k], S[k] / pi[k], rtol=1e-12)
        np.testing.assert_allclose(
            online.averaged[0][k] / pi_new[k], S_avg[k] / pi_avg[k], rtol=1e-12
        )
    part = 100.0 / (pi_new[0] * 400.0)
    running = S[0] / pi[0] + part * (batch_mean[0] - S[0] / pi[0])
    np.testing.assert_allclose(online.stats[0][0] / pi_new[0], running, rtol=1e-12)
    rate = 100.0 / (pi_avg[0] * W + 100.0)
    averaged = S_avg[0] / pi_avg[0] + rate * (running - S_avg[0] / pi_avg[0])
    np.testing.assert_allclose(online.averaged[0][0] / pi_new[0], averaged, rtol=1e-12)


def test_the_linearised_stream_takes_its_jacobian_on_large_batches_only():
    # A stream started on a batch of 64 rows per parameter or more is
    # linearised; later small batches neither renew its Jacobian (due once
    # the weight seen has doubled) nor restart the stream.
    X, _, _ = make_mixture(22_000, 10, 2, noise=1.0, random_state=0)
    model = AttentionClustering(2, random_state=0).partial_fit(X[:10_000])
    assert isinstance(model._stream, LinearisedEM)
    jacobian = model._stream.jacobian.copy()
    _stream(model, _batches(X[10_000:], 100))
    assert model._stream.seen >= 2 * 10_000
    np.testing.assert_array_equal(model._stream.jacobian, jacobian)
    assert model._stream.mean_weight == model._stream.seen == len(X)
    small = AttentionClustering(2, random_state=0).partial_fit(X[: 64 * 24 - 1])
    assert isinstance(small._stream, OnlineEM)


def test_the_linearised_stream_renews_its_jacobian_when_the_weight_seen_doubles():
    # math.md section 7: the Jacobian of the E step's statistics is taken on
    # the first batch and again each time the weight seen has doubled, so a
    # stream of equal batches renews it after batches 1, 2, 4 and 8 (at
    # every batch, 8 batches of d = 5, K = 3 rows took 168 statistics
    # passes instead of 108).
    X, _, _ = make_mixture(16_000, 5, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0)
    renewed, last = [], None
    for b, batch in enumerate(_batches(X, 2000), start=1):
        model.partial_fit(batch)
        assert isinstance(model._stream, LinearisedEM)
        if model._stream.jacobian is not last:
            renewed.append(b)
        last = model._stream.jacobian
    assert renewed == [1, 2, 4, 8]


@pytest.mark.parametrize("size", [50, 2500], ids=["online", "linearised"])
def test_a_lost_component_is_reseeded(size, global_random_seed):
    # A first batch of one repeated row leaves two of three components
    # without points (log pi = -inf), and EM keeps a zero weight at zero:
    # every later row went to one cluster, silently (distance 2.8 to the
    # centroids). The next batch reseeds them at its rows worst explained,
    # with a warning; the stream then finds the three clusters. The
    # linearised stream (batches of 2500, 64 rows per parameter and more)
    # goes on as online EM.
    X, _, C = make_mixture(20 * size, 10, 3, noise=0.3, random_state=global_random_seed)
    row = np.zeros(10)
    row[:3] = [0.5, 1.0, -0.25]
    model = AttentionClustering(3, center=False, random_state=0)
    with pytest.warns(UserWarning, match="no spread"):
        model.partial_fit(np.tile(row, (size, 1)))
    assert np.sum(np.isneginf(model.mixture_.log_weights)) == 2
    with pytest.warns(UserWarning, match="reseeded 2 of the n_clusters=3 clusters"):
        model.partial_fit(X[:size])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Early batches of 50 rows are plain EM steps of online EM, which
        # can empty a component again: it is reseeded again.
        _stream(model, _batches(X[size:], size))
    assert all("reseeded" in str(w.message) for w in caught)
    assert isinstance(model._stream, OnlineEM)
    assert np.all(np.bincount(model.predict(X), minlength=3) > 0.2 * len(X))
    assert centroid_distance(model.cluster_centers_, C) < 0.3


def test_one_row_batches_keep_every_cluster(global_random_seed):
    # While gamma_n is 1 (the first 16 batches of equal weight) a batch's
    # statistics replace the stream's: a batch of one row, a plain EM step
    # on it, gives its component all the weight, and after a first batch of
    # two rows per cluster every later row went to one component (ARI 0,
    # silently; MiniBatchKMeans 0.94): a lone row never reseeded the lost
    # components. It does where the mixture explains it badly.
    X, y, _ = make_mixture(1500, 6, 3, noise=0.3, random_state=global_random_seed)
    first = np.concatenate([np.flatnonzero(y == k)[:2] for k in range(3)])
    model = AttentionClustering(3, random_state=0).partial_fit(X[first])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in np.setdiff1d(np.arange(len(X)), first):
            model.partial_fit(X[i : i + 1])
    assert all("reseeded 1 of the n_clusters=3" in str(w.message) for w in caught)
    assert np.all(model.weights_ > 0.25)
    assert adjusted_rand_score(y, model.predict(X)) > 0.9


def test_a_lone_row_reseeds_a_lost_component(global_random_seed):
    # A batch of one row is explained alike by itself: the rule of the
    # worst explained of a batch's rows never reseeded from one, and the
    # components a first batch of one repeated row left without points
    # stayed lost. A lone row reseeds where the mixture's rows rarely lie.
    X, _, _ = make_mixture(300, 10, 3, noise=0.3, random_state=global_random_seed)
    row = np.zeros(10)
    row[:3] = [0.5, 1.0, -0.25]
    model = AttentionClustering(3, center=False, random_state=0)
    with pytest.warns(UserWarning, match="no spread"):
        model.partial_fit(np.tile(row, (50, 1)))
    assert len(model._stream.lost()) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(len(X)):
            model.partial_fit(X[i : i + 1])
    assert caught and all("reseeded 1 of the n_clusters=3" in str(w.message) for w in caught)
    assert len(model._stream.lost()) == 0
    # A lone row the mixture explains reseeds nothing.
    U = np.eye(3)[:, :2]
    stream = OnlineEM(U, np.array([1.0, 0.0]), 0.3)
    points = np.array([[1.0, 0.1, 0.0], [0.9, 0.0, 0.1], [1.1, 0.0, 0.0]])
    stream.update(DenseRows(points, n_threads=1))
    assert list(stream.lost()) == [1]
    assert stream.reseed(points[:1])[1] == 0
    assert stream.reseed(np.array([[0.0, 0.2, 1.5]]))[1] == 1


def test_a_lone_row_reseeds_a_component_that_regains_no_row():
    # A component regains rows by the E step only where it takes most of a
    # row at its own centre. Reseeding any lost one from lone rows reseeded
    # components of little weight but apart at every other row; reseeding
    # those of zero weight alone left weights of 1e-8 beside one component
    # that had taken every row (K = 6, one-row batches: ARI 0.001, silently).
    from attention_cluster._mixture import _Params, _regains_rows

    U = np.eye(4)[:, :3]
    log_pi = np.log([1.0 - 2e-9, 1e-9, 1e-9])
    apart = _Params(U=U, radii=np.ones(3), variance=0.01, log_pi=log_pi, free=False)
    assert _regains_rows(apart, 1) and _regains_rows(apart, 0)
    blurred = _Params(U=U, radii=np.ones(3), variance=1.0, log_pi=log_pi, free=False)
    assert not _regains_rows(blurred, 1) and _regains_rows(blurred, 0)
    X, y, _ = make_mixture(600, 8, 6, noise=0.3, random_state=2)
    model = AttentionClustering(6, random_state=0).partial_fit(X[:20])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(20, 600):
            model.partial_fit(X[i : i + 1])
    assert all("reseeded 1 of the n_clusters=6" in str(w.message) for w in caught)
    assert np.all(model.weights_ > 0.05)
    assert adjusted_rand_score(y, model.predict(X)) > 0.6


def test_reseeding_takes_the_worst_explained_point():
    # Heads e1 and e2, the second lost: it moves to the point least likely
    # under the mixture, with the weight of the lightest component kept, and
    # the M step of the statistics gives back the reseeded parameters.
    U = np.eye(3)[:, :2]
    stream = OnlineEM(U, np.array([1.0, 0.0]), 0.3)
    points = np.array([[1.0, 0.1, 0.0], [0.9, 0.0, 0.1], [0.0, 0.2, 1.5], [1.1, 0.0, 0.0]])
    stream.update(DenseRows(points, n_threads=1))
    assert list(stream.lost()) == [1]
    reseeded, count = stream.reseed(points)
    assert count == 1 and reseeded is stream
    np.testing.assert_allclose(stream.params.U[:, 1], points[2] / np.linalg.norm(points[2]))
    np.testing.assert_allclose(np.exp(stream.params.log_pi), [0.5, 0.5])
    again = stream.stats
    np.testing.assert_allclose(again[1] / again[1].sum(), [0.5, 0.5])
    np.testing.assert_allclose(again[0][1] / np.linalg.norm(again[0][1]), stream.params.U[:, 1])
    # Equal points are all explained alike: nothing to reseed.
    same = OnlineEM(U, np.array([1.0, 0.0]), 0.3)
    same.update(DenseRows(np.tile(points[:1], (4, 1)), n_threads=1))
    assert same.reseed(np.tile(points[:1], (4, 1)))[1] == 0


def test_a_wide_sparse_stream_holds_no_d_by_d_matrix(traced_peak):
    # The stream kept the d x d second moment (and deep-copied it every
    # batch), for its trace and its product with the heads: 0.2 GB at d =
    # 5000, 4 GB and 4 to 9 s a batch at d = 10 000. It keeps the mean
    # squared norm and M U: a later batch's memory is that of the batch.
    d = 5000
    X = sp.random(1500, d, density=20 / d, format="csr", random_state=0)
    model = AttentionClustering(3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(X[:500])
        _, peak = traced_peak(lambda: model.partial_fit(X[500:1000]))
    assert peak < 20e6, peak
    assert model.moment_heads_.shape == (3, d)


def test_moment_heads_of_a_repeated_batch_are_exact(global_random_seed):
    # moment_heads_ = M c_h is kept as A <- (1 - w) A + M_b (U_new - (1 - w)
    # U_old), the batch's moment standing for the earlier ones' in the heads'
    # change: exact when the batches share one second moment, as the same
    # batch again does, whatever the heads did.
    X, _, _ = make_mixture(3000, 6, 3, noise=0.5, random_state=global_random_seed)
    model = _stream(AttentionClustering(3, random_state=0), [X] * 4)
    Y = (X - model.mean_) / model.scale_
    expected = (Y.T @ Y / len(Y) @ model.cluster_centers_.T).T
    np.testing.assert_allclose(model.moment_heads_, expected, rtol=1e-9, atol=1e-12)


def test_moment_heads_of_a_stream_are_near_its_second_moment(global_random_seed):
    # Batches of one distribution: the batch's moment stands for the earlier
    # ones' up to its sampling error, times the heads' change (0.6 to 0.7%
    # on seeds 0 to 19, under the sampling error of M U itself, about
    # sqrt(d / n) = 2%).
    X, _, _ = make_mixture(20_000, 10, 3, noise=0.5, random_state=global_random_seed)
    model = _stream(AttentionClustering(3, random_state=0), _batches(X, 500))
    Y = (X - model.mean_) / model.scale_
    expected = (Y.T @ Y / len(Y) @ model.cluster_centers_.T).T
    error = np.linalg.norm(model.moment_heads_ - expected) / np.linalg.norm(expected)
    assert error < 2e-2, error


def test_partial_fit_after_fit_continues_from_the_fit(stream_data):
    # It had fitted the batch alone, throwing the fit away (20 rows after a
    # fit on 19 980: 640 times farther from the centroids), and reset
    # n_features_in_. As MiniBatchKMeans.partial_fit, it continues from the
    # fitted centres, the fit's rows counted in by their weight, and refuses
    # another width.
    X, _, C = make_mixture(20_000, 10, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0).fit(X[:-20])
    fitted = model.cluster_centers_.copy()
    model.partial_fit(X[-20:])
    assert model.n_steps_ == 1
    assert model._stream.seen == len(X)
    assert np.max(np.abs(model.cluster_centers_ - fitted)) < 1e-3
    assert centroid_distance(model.cluster_centers_, C) < 1.1 * centroid_distance(fitted, C)
    with pytest.raises(
        ValueError, match="X has 4 features, but AttentionClustering is expecting 10"
    ):
        model.partial_fit(X[:20, :4])
    assert model.n_features_in_ == 10 and model.n_steps_ == 1


@pytest.mark.parametrize("size", [100, 2000], ids=["online", "linearised"])
def test_a_stream_after_fit_reaches_the_fit_of_all_rows(size, global_random_seed):
    # A fit on 5000 rows, then 40 000 more in batches: one pass ends as near
    # the centroids as the in-memory fit of all 45 000 (within 1.4 times on
    # seeds 0 to 3), not at the first fit's distance (6 to 20 times).
    X, _, C = make_mixture(45_000, 10, 2, noise=1.0, random_state=global_random_seed)
    model = _stream(AttentionClustering(2, random_state=0).fit(X[:5000]), _batches(X[5000:], size))
    assert isinstance(model._stream, OnlineEM if size == 100 else LinearisedEM)
    full = AttentionClustering(2, random_state=0).fit(X)
    ratio = centroid_distance(model.cluster_centers_, C) / centroid_distance(
        full.cluster_centers_, C
    )
    assert ratio < 3.0, ratio


@pytest.mark.parametrize("online", [False, True], ids=["linearised", "online"])
def test_held_statistics_map_back_to_the_parameters(online, global_random_seed):
    # A fit's rows are counted in without being read: their statistics are
    # those the M step maps to the fitted parameters, at the mean squared
    # norm the parameters imply (math.md section 7).
    rng = np.random.default_rng(global_random_seed)
    U = np.linalg.qr(rng.standard_normal((5, 3)))[0]
    pi, radii, tau = np.array([0.5, 0.3, 0.2]), np.array([0.8, 1.0, 1.3]), 0.4
    stream = (OnlineEM if online else LinearisedEM)(U, pi, tau, radii)
    stream.hold(100.0, 100, np.zeros((5, 3)))
    S, counts = held_statistics(stream.params)
    p = _maximize(S, counts, 1.0, stream.mean_sq, 0.0, stream.params)
    np.testing.assert_allclose(p.U, U, atol=1e-12)
    np.testing.assert_allclose(p.radii, radii)
    np.testing.assert_allclose(np.exp(p.log_pi), pi)
    np.testing.assert_allclose(p.variance, tau**2)


# --- Online EM's step sizes ---------------------------------------------------


class _GivenStatistics:
    """A batch of weight ``weight`` whose E step gives the mean statistics
    ``(S / N, counts / N) = (S, counts)``, whatever the parameters: the
    online EM's stochastic approximation is then seen alone."""

    dtype = np.dtype(np.float64)  # (the rows' dtype, whose rounding the M step reads)

    def __init__(self, weight, S, counts, n_weighted=1, row_shares=None):
        self.total_weight = float(weight)
        self.n_weighted = n_weighted
        self.weight_squares = self.total_weight**2 / n_weighted  # (rows of equal weight)
        self.n_features = S.shape[1]
        self._S, self._counts = S, counts
        # The rows' shares among the components, each row once (the
        # weighted shares ``counts`` unless given).
        self._row_shares = counts if row_shares is None else np.asarray(row_shares)

    def unit_weighted(self):
        return _GivenStatistics(self.n_weighted, self._S, self._row_shares, self.n_weighted)

    def norm_moments(self):
        return 4.0 * self.n_features, None  # m2 = 4 d, above any r^2 of the statistics

    def moment_action(self, V):
        return 4.0 * V

    def e_step(self, keys, bias, beta):
        return self._S * self.total_weight, self._counts * self.total_weight, 0.0


def _check_online_steps(online, batch_weights, gammas, omegas, seed):
    # s_n = s_{n-1} + gamma_n (sbar_n - s_{n-1}) from s_0 = 0, and the average
    # of the s_n with weights omega_n, after each batch.
    K, d = online.stats[0].shape
    rng = np.random.default_rng(seed)
    s = [np.zeros((K, d)), np.zeros(K)]
    weighted = [np.zeros((K, d)), np.zeros(K)]
    # Every batch holds the components in the shares of the stream's
    # weights: it passes for a sample.
    shares = rng.uniform(0.5, 1.0, K)
    shares /= shares.sum()
    for weight, gamma, omega, total in zip(
        batch_weights, gammas, omegas, np.cumsum(omegas), strict=True
    ):
        sbar = [rng.uniform(-1.0, 1.0, (K, d)), shares]
        online.update(_GivenStatistics(weight, *sbar))
        s = [v + gamma * (new - v) for v, new in zip(s, sbar)]
        weighted = [a + omega * v for a, v in zip(weighted, s)]
        for got, want in zip(online.stats, s):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        for got, want in zip(online.averaged, weighted):
            np.testing.assert_allclose(got, want / total, rtol=1e-12, atol=1e-14)


def test_online_em_default_step_sizes_are_those_of_math_md(global_random_seed):
    # math.md section 7: gamma_n = min(1, 16 / n)^0.6 for equal batches, the
    # s_n averaged with equal weights; 40 batches reach past n = 16.
    U = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 3)))[0]
    online = OnlineEM(U, np.full(3, 1 / 3), 0.5)
    n = np.arange(1, 41)
    weights = np.full(n.size, 250.0)
    _check_online_steps(
        online, weights, np.minimum(1.0, 16.0 / n) ** 0.6, weights, global_random_seed
    )


@settings(max_examples=15, deadline=None)
@given(
    batch_weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=30),
    alpha=st.floats(0.5, 1.0),
    gain=st.floats(0.5, 32.0),
    eta=st.floats(-1.0, 1.0),
)
def test_online_em_step_sizes_of_weighted_batches(batch_weights, alpha, gain, eta):
    # gamma_n = min(1, g W_b / W_n)^alpha, the average weighted by W_b W_n^eta.
    U = np.linalg.qr(np.random.default_rng(1).standard_normal((4, 3)))[0]
    online = OnlineEM(U, np.full(3, 1 / 3), 0.5, alpha=alpha, gain=gain, eta=eta)
    gammas, omegas = online_em_step_sizes(batch_weights, alpha, gain, eta)
    _check_online_steps(online, batch_weights, gammas, omegas, len(batch_weights))


@pytest.mark.parametrize(
    "params", [{"refine": None}, {"solver": "psgd"}], ids=["refine-none", "psgd"]
)
def test_partial_fit_after_a_fit_without_a_mixture_holds_nothing(params):
    # A fit without the EM refinement fits no mixture: its rows were held as
    # the statistics of one at norm 1 and the spectrum's noise, which online
    # EM's average kept (3.9 times the fit in memory's distance at worst).
    # The stream now starts at the fit's centres, from the next batch.
    X = make_mixture(3000, 10, 2, noise=0.8, random_state=0)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AttentionClustering(2, random_state=0, **params).fit(X[:2000])
    model.partial_fit(X[2000:2500])
    assert model._stream.seen == 500.0
    model.partial_fit(X[2500:])
    assert model._stream.seen == 1000.0 and model.n_steps_ == 2


def test_a_stream_pickled_before_the_rows_test_resumes():
    # A stream pickled before the rows' shares and the test's counters has
    # none of them: it resumes with the shares starting at its next batch.
    X, _, _ = make_mixture(2000, 5, 3, noise=0.3, random_state=0)
    model = AttentionClustering(3, random_state=0).partial_fit(X[:300])
    for name in ("row_shares", "row_rows", "tested", "lacking", "ordered"):
        del model._stream.__dict__[name]
    model = pickle.loads(pickle.dumps(model))
    model.partial_fit(X[300:400]).partial_fit(X[400:500])
    stream = model._stream
    assert stream.row_rows == 200 and stream.tested == 1
    np.testing.assert_allclose(stream.row_shares.sum(), 1.0)


def test_a_stream_after_fit_keeps_its_clusters_on_sorted_batches():
    # After fit the rows' shares start at the fit's labels' shares: they
    # started at the first batch, and after a first batch of one cluster the
    # next ones of that cluster passed for samples and took the others'
    # statistics (ARI 0 to 0.46 on 8 seeds, batches of 50).
    for seed in (0, 1):
        X, y, C = make_mixture(9000, 10, 3, noise=0.3, random_state=seed)
        rest = np.arange(3000, len(X))
        rest = rest[np.argsort(y[rest], kind="stable")]
        model = AttentionClustering(3, random_state=0).fit(X[:3000])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(0, len(rest), 50):
                model.partial_fit(X[rest[i : i + 50]])
        assert model._stream.ordered
        assert adjusted_rand_score(y, model.predict(X)) > 0.9


def test_a_reseeded_component_does_not_order_a_shuffled_stream():
    # K = 4 heads on 3 clusters: a head loses its rows and is reseeded. Its
    # running rows' share was set at the lightest weight, which every later
    # batch lacked: shuffled streams were taken for ordered ones (5 of 20,
    # 3 to 10 times the distance with the test off).
    reseeded = 0
    for seed in (3, 4):
        X, _, _ = make_mixture(6000, 10, 3, noise=0.3, random_state=seed)
        model = AttentionClustering(4, random_state=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.partial_fit(X[:200])
            for i in range(200, len(X), 100):
                model.partial_fit(X[i : i + 100])
        reseeded += any("reseeded" in str(c.message) for c in caught)
        assert not model._stream.ordered
    assert reseeded


def test_a_refused_batch_keeps_the_averaged_mixtures_noise():
    # A refused batch set the averaged statistics' weights to the running
    # ones, a noisier stochastic approximation after sample steps: with
    # tight clusters the published noise, a small difference of large
    # terms, collapsed (held-out mean log-likelihood 7.19, then -160 and
    # -5e10 after the first refused batch).
    X, _, _ = make_mixture(8000, 5, 2, noise=0.05, random_state=2)
    model = AttentionClustering(6, random_state=2).partial_fit(X[:2000])
    held_out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2000, 2400, 50):
            model.partial_fit(X[i : i + 50])
            held_out.append(model.score_samples(X[2000:]).mean())
    assert model._stream.refused >= 1
    assert min(held_out) > 7.0, held_out


def test_the_rows_shares_start_again_after_a_reseed():
    # A first batch of one repeated row: its rows' share was all one
    # component's, and kept after the reseed every later batch lacked that
    # component (seed 19: the stream ordered, distance 1.8 to the centroids).
    X, _, C = make_mixture(1000, 10, 3, noise=0.3, random_state=19)
    row = np.zeros(10)
    row[:3] = [0.5, 1.0, -0.25]
    model = AttentionClustering(3, center=False, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.partial_fit(np.tile(row, (50, 1)))
        model.partial_fit(X[:50])
        # The reseeding batch's rows alone: the repeated row's are forgotten.
        assert model._stream.row_rows == 50
        for i in range(50, len(X), 50):
            model.partial_fit(X[i : i + 50])
    assert not model._stream.ordered
    assert centroid_distance(model.cluster_centers_, C) < 0.3


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], ids=["zero", "equal"])
def test_a_first_batch_with_no_spread_publishes_the_fit_of_its_rows(row, K):
    # Rows all zero at unit scale (zero, or equal rows centred): the fit's
    # M step puts every centroid at the origin (radius 0), while the
    # stream, with no likelihood to maximise, published its start's norm
    # 1 (means_ a scale away from every row).
    X = np.tile(row, (20, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = AttentionClustering(K, center=True, random_state=0).fit(X)
        streamed = AttentionClustering(K, center=True, random_state=0).partial_fit(X)
    np.testing.assert_array_equal(streamed.mixture_.radii, fitted.mixture_.radii)
    np.testing.assert_allclose(streamed.means_, fitted.means_)
    np.testing.assert_allclose(streamed.means_, X[:K])


@pytest.mark.parametrize("batches", [1, 3])
def test_one_centred_cluster_streams_the_same_head_for_every_kind(batches):
    # Centred rows' one centroid is their mean (radius 0), and the stream's
    # M step took its head from the direction of their sum, zero but for
    # rounding: dense, CSR and dense x (1 + 2^-50) rows streamed three
    # unrelated heads (transform 0.72, 0.015 and -0.31 where fit gives
    # 1.59 for all). A head whose sum is within its rounding keeps its
    # direction, as in the fit's EM.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5)) * [5, 1, 1, 1, 1]
    heads, outputs = [], []
    for rows in (X, sp.csr_matrix(X), X * (1 + 2.0**-50)):
        model = AttentionClustering(1, center=True, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for part in np.array_split(np.arange(300), batches):
                model.partial_fit(rows[part])
        heads.append(model.cluster_centers_[0])
        outputs.append(np.ravel(model.transform(rows[:1]))[0])
    np.testing.assert_allclose(heads[1], heads[0], atol=1e-12)
    np.testing.assert_allclose(heads[2], heads[0], atol=1e-12)
    np.testing.assert_allclose(outputs, outputs[0], rtol=1e-9)


def test_a_float32_batch_among_float64_ones_keeps_the_head_of_one_centred_cluster():
    # The rounding a stream's M step allows a sum was the last batch's dtype:
    # float64 batches after a float32 one (whose rounding its statistics
    # keep) gave back the direction of that rounding. It is the largest of
    # the batches'.
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(2000, 4)) * [3, 1, 1, 1] + 5).astype(np.float32)
    heads = []
    for kinds in ([np.float32] * 3, [np.float32, np.float64, np.float64]):
        model = AttentionClustering(1, center=True, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for dtype in kinds:
                model.partial_fit(X.astype(dtype))
        heads.append(model.cluster_centers_[0].astype(np.float64))
    # Float32 rounding apart (3e-8 at most over six seeds of X).
    np.testing.assert_allclose(heads[1], heads[0], atol=1e-6)


def test_a_linearised_stream_turned_online_keeps_its_rounding():
    # A linearised stream becomes online EM where it reseeds (_online): the
    # new stream started at the class's rounding of 0, and a float32
    # stream's rounding was lost to the float64 batches after it.
    from attention_cluster._mixture import new_stream

    stream = new_stream(np.eye(3)[:, :3], np.full(3, 1 / 3), 0.3, 100_000)
    stream.eps = float(np.finfo(np.float32).eps)
    assert stream._online().eps == stream.eps


def test_a_batch_that_fails_after_its_update_leaves_the_stream_as_it_was(stream_data, monkeypatch):
    # The update runs on a shallow copy of the stream (a deep copy took its
    # K x d arrays at every batch): it must bind new arrays, never write
    # into the stream's. A batch that fails once the update has run leaves
    # every array of the stream as it was, and the next batch goes on.
    import copy

    from attention_cluster import _clustering

    X, _, _ = stream_data
    model = AttentionClustering(random_state=0).partial_fit(X[:2000]).partial_fit(X[2000:4000])
    before = pickle.dumps(model._stream.__dict__)
    reference = copy.deepcopy(model)

    def fail(*args, **kwargs):
        raise FloatingPointError("after the update")

    with monkeypatch.context() as patch:
        patch.setattr(_clustering.SphericalMixture, "from_heads", fail)
        with pytest.raises(FloatingPointError, match="after the update"):
            model.partial_fit(X[4000:6000])
    assert pickle.dumps(model._stream.__dict__) == before
    model.partial_fit(X[4000:6000])
    reference.partial_fit(X[4000:6000])
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)


def _fitted_numbers(model):
    return {
        name: np.asarray(value)
        for name, value in vars(model).items()
        if name.endswith("_") and isinstance(value, (np.ndarray, float, int))
    }


def _assert_same_fit(got, want):
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.fixture(scope="module")
def wide_batches():
    X = make_mixture(3000, 1200, 3, noise=0.5, random_state=1)[0]
    return _batches(X, 1000)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("refine", ["auto", None])
def test_partial_fit_after_a_pickled_or_repeated_fit_is_the_fit_s(wide_batches, refine, dtype):
    # The stream after a fit starts from the fit's private state: the same
    # numbers after a pickle round trip, and after a fit that follows a
    # stream (which replaced that state) as after a first fit.
    batches = [b.astype(dtype) for b in wide_batches]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = AttentionClustering(3, refine=refine, random_state=0).fit(batches[0])
        copied = pickle.loads(pickle.dumps(model))
        _assert_same_fit(_fitted_numbers(copied), _fitted_numbers(model))
        want = _fitted_numbers(model.partial_fit(batches[1]))
        _assert_same_fit(_fitted_numbers(copied.partial_fit(batches[1])), want)
        model.partial_fit(batches[2]).fit(batches[0]).partial_fit(batches[1])
    _assert_same_fit(_fitted_numbers(model), want)
    np.testing.assert_array_equal(copied.predict_proba(batches[2]), model.predict_proba(batches[2]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("refine", ["auto", None])
def test_a_write_into_the_fitted_arrays_does_not_reach_partial_fit(wide_batches, refine, dtype):
    # The fitted arrays are the estimator's own, which a user may write into:
    # cluster_centers_ is predict's and transform's, moment_heads_ is
    # transform's, and mixture_ (read-only) predict_proba's; partial_fit's
    # stream starts from mixture_ and float64 arrays of its own, which no
    # write into a fitted array changes.
    batches = [b.astype(dtype) for b in wide_batches]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = AttentionClustering(3, refine=refine, random_state=0).fit(batches[0])
        untouched = pickle.loads(pickle.dumps(model))
        labels, output = model.predict(batches[1]), model.transform(batches[1])
        model.cluster_centers_[:] = model.cluster_centers_[::-1]
        model.moment_heads_ *= 2.0
        assert not np.array_equal(model.predict(batches[1]), labels)
        assert not np.array_equal(model.transform(batches[1]), output)
        if model.mixture_ is not None:
            np.testing.assert_array_equal(
                model.predict_proba(batches[1]), untouched.predict_proba(batches[1])
            )
        model.partial_fit(batches[1])
        _assert_same_fit(_fitted_numbers(model), _fitted_numbers(untouched.partial_fit(batches[1])))
