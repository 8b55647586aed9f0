"""partial_fit: the streaming contract and the online EM of math.md section 7."""

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import online_em, online_em_step_sizes
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering
from attention_cluster._mixture import LinearisedEM, OnlineEM, refine_heads
from attention_cluster._passes import DenseRows
from attention_cluster.datasets import make_embeddings, make_mixture
from attention_cluster.metrics import centroid_distance


def _batches(X, size):
    return [X[i : i + size] for i in range(0, len(X), size)]


def _stream(model, batches, weights=None):
    for i, batch in enumerate(batches):
        model.partial_fit(batch, sample_weight=None if weights is None else weights[i])
    return model


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


def test_updates_are_online_em(stream_data, global_random_seed):
    # Later steps against the written-out recursion, from the same start.
    X, _, C = make_mixture(6000, 5, 3, noise=0.6, random_state=global_random_seed)
    rng = np.random.default_rng(global_random_seed)
    U = C.T + 0.2 * rng.standard_normal(C.T.shape)
    U /= np.linalg.norm(U, axis=0)
    pi, tau, scale = np.array([0.5, 0.3, 0.2]), 0.5, 1.25
    batches = _batches(X, 1000)
    online = OnlineEM(U, pi, tau, alpha=0.7, gain=2.0)
    # The first E step is at r = 1 and tau, as the reference starts.
    for batch in batches:
        params = online.update(DenseRows(batch, scale=scale, n_threads=1))
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
    # can lie far from the stream's maximum. Where the linearised statistics
    # do not reach the parameters, the stream restarts at the batch at hand
    # (EM on its rows, then its statistics). It had kept the far batches'
    # statistics in its mean, which fade as 1 / m: after 20 batches of 1000
    # the median distance was 85 times the in-memory fit's (above 5 times
    # on 53 of seeds 0 to 59); it is 1.1 now, above 5 times on 4 (5 or more of 10
    # draws above: probability about 2e-4).
    ratios = []
    for seed in np.random.SeedSequence(global_random_seed).generate_state(10):
        X, _, C = make_mixture(20_020, 10, 2, noise=1.0, random_state=int(seed))
        full = AttentionClustering(2, random_state=0).fit(X)
        model = _stream(AttentionClustering(2, random_state=0), [X[:20], *_batches(X[20:], 1000)])
        ratios.append(
            centroid_distance(model.cluster_centers_, C)
            / centroid_distance(full.cluster_centers_, C)
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
    ratios = []
    for seed in np.random.SeedSequence(global_random_seed).generate_state(7):
        X, _, C = make_mixture(20_100, 60, 10, noise=0.5, random_state=int(seed))
        full = AttentionClustering(10, random_state=0).fit(X)
        model = _stream(
            AttentionClustering(10, random_state=0), [X[:100], *_batches(X[100:], 2000)]
        )
        assert isinstance(model._stream, OnlineEM)
        ratios.append(
            centroid_distance(model.cluster_centers_, C)
            / centroid_distance(full.cluster_centers_, C)
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


def test_a_restart_that_leaves_a_head_without_points_keeps_the_mean():
    # Hypothesis found it: two equal rows, then rows along another line. The
    # batch's EM leaves one of two heads without points (log pi = -inf), so
    # the stream cannot restart its means there, and it had raised an
    # AttributeError; it takes the M step of the running mean instead.
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
    # data sets, 150 seeds measured gave a mean ratio of 1.01, standard
    # deviation 0.05.
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
    assert distances[0] / distances[1] < 1.25


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


# --- Online EM's step sizes ---------------------------------------------------


class _GivenStatistics:
    """A batch of weight ``weight`` whose E step gives the mean statistics
    ``(S / N, counts / N) = (S, counts)``, whatever the parameters: the
    online EM's stochastic approximation is then seen alone."""

    def __init__(self, weight, S, counts):
        self.total_weight = float(weight)
        self.n_features = S.shape[1]
        self._S, self._counts = S, counts

    def second_moment(self):
        return 4.0 * np.eye(self.n_features)  # m2 = 4 d, above any r^2 of the statistics

    def e_step(self, keys, bias, beta):
        return self._S * self.total_weight, self._counts * self.total_weight, 0.0


def _check_online_steps(online, batch_weights, gammas, omegas, seed):
    # s_n = s_{n-1} + gamma_n (sbar_n - s_{n-1}) from s_0 = 0, and the average
    # of the s_n with weights omega_n, after each batch.
    K, d = online.stats[0].shape
    rng = np.random.default_rng(seed)
    s = [np.zeros((K, d)), np.zeros(K)]
    weighted = [np.zeros((K, d)), np.zeros(K)]
    for weight, gamma, omega, total in zip(
        batch_weights, gammas, omegas, np.cumsum(omegas), strict=True
    ):
        sbar = [rng.uniform(-1.0, 1.0, (K, d)), rng.uniform(0.1, 1.0, K)]
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
