"""The seeded start for K >= d: k-means++ draws, Lloyd's iterations, the mixture's start."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_cluster._passes import DenseRows, SparseRows
from attention_cluster._seeding import kmeans_plus_plus, lloyd, seeded_start


def test_kmeans_plus_plus_draws_by_squared_distance():
    # Monte Carlo against the D^2 weighting (Arthur and Vassilvitskii 2007):
    # with one trial, P(first = i, second = j) = w_i / W * w_j D_ij^2 / sum_l w_l D_il^2.
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [2.0, 2.0]])
    w = np.array([1.0, 2.0, 0.5, 1.5])
    D2 = ((points[:, None] - points[None]) ** 2).sum(-1)
    expected = (w / w.sum())[:, None] * (w[None] * D2) / (D2 @ w)[:, None]
    rng = np.random.RandomState(0)
    draws = 20000
    counts = np.zeros((4, 4))
    for _ in range(draws):
        c = kmeans_plus_plus(points, w, 2, rng, n_trials=1)[0]
        i = np.flatnonzero((points == c[0]).all(1))[0]
        j = np.flatnonzero((points == c[1]).all(1))[0]
        counts[i, j] += 1
    freq = counts / draws
    sd = np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(freq - expected) <= 5 * sd + 1e-12)
    assert np.all(counts[np.arange(4), np.arange(4)] == 0)  # D = 0: never drawn twice


def test_kmeans_plus_plus_greedy_keeps_the_best_trial():
    # Two far groups: the greedy draw's second centre is in the other group.
    rng = np.random.RandomState(1)
    points = np.r_[rng.standard_normal((50, 2)), 100.0 + rng.standard_normal((50, 2))]
    for _ in range(20):
        c = kmeans_plus_plus(points, None, 2, rng)[0]
        assert (c[0, 0] > 50) != (c[1, 0] > 50)


def _reference_lloyd(points, centres, n_iter):
    """Plain Lloyd's iterations, one point at a time."""
    centres = centres.copy()
    for _ in range(n_iter):
        labels = [int(np.argmin([np.sum((x - c) ** 2) for c in centres])) for x in points]
        for k in range(len(centres)):
            mine = [x for x, lab in zip(points, labels) if lab == k]
            if mine:
                centres[k] = np.mean(mine, axis=0)
    return centres


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 5))
def test_lloyd_matches_reference_and_lowers_inertia(seed, K):
    rng = np.random.RandomState(seed)
    points = rng.standard_normal((40, 3))
    start = points[rng.choice(40, K, replace=False)]
    centres, labels, inertia, n_iter = lloyd(points, None, start[None], max_iter=3)
    (centres,), labels, (inertia,), (n_iter,) = centres, labels[:, 0], inertia, n_iter
    assert 1 <= n_iter <= 3
    np.testing.assert_allclose(centres, _reference_lloyd(points, start, 3), atol=1e-10)
    d2 = ((points[:, None] - centres[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, np.argmin(d2, axis=1))
    assert inertia == pytest.approx(np.mean(d2.min(1)))
    start_inertia = np.mean(((points[:, None] - start[None]) ** 2).sum(-1).min(1))
    assert inertia <= start_inertia + 1e-12


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_seeded_start_finds_the_centres_of_separated_clusters(kind, global_random_seed):
    rng = np.random.RandomState(global_random_seed)
    d, K = 2, 6
    centres = 10.0 * rng.standard_normal((K, d))
    while np.min(np.linalg.norm(centres[:, None] - centres[None], axis=-1) + 1e9 * np.eye(K)) < 3:
        centres = 10.0 * rng.standard_normal((K, d))
    y = np.repeat(np.arange(K), 200)
    X = centres[y] + 0.1 * rng.standard_normal((len(y), d))
    rows = DenseRows(X) if kind == "dense" else SparseRows(X)
    seeds = seeded_start(rows, K, np.random.RandomState(global_random_seed))
    found = (seeds.heads * seeds.radii).T
    np.testing.assert_allclose(np.linalg.norm(seeds.heads, axis=0), 1.0)
    # Every true centre has a seed within a few noise levels.
    gaps = np.linalg.norm(centres[:, None] - found[None], axis=-1).min(1)
    assert np.all(gaps < 0.1)
    # tau^2 = inertia / d: the noise variance per coordinate, 0.1^2.
    assert seeds.noise == pytest.approx(np.sqrt(seeds.inertia / d))
    # (Over 30 seeds its relative error has a standard deviation of 1.6%,
    # the largest 3.6%: five of them.)
    assert seeds.noise == pytest.approx(0.1, rel=0.08)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.floats(0.0, 3.0))
def test_noise_at_as_many_clusters_as_features_is_below_every_eigenvalue(seed, d, stretch):
    # math.md section 1: every eigenvalue of M is s^2 (w_c + sigma^2) or
    # more when K >= d, so s^2 sigma^2 <= the smallest; rows stretched
    # along one axis (norms spread past the isotropic model's range) once
    # gave sigma = infinity and a scale of 1e-6 of the data's.
    from attention_cluster._scale import estimate_spectrum

    rng = np.random.RandomState(seed)
    X = rng.standard_normal((300, d))
    X[:, 0] *= 10.0**stretch
    spectrum = estimate_spectrum(DenseRows(X), d)
    M = X.T @ X / len(X)
    smallest = np.linalg.eigvalsh(M)[0] / spectrum.scale**2
    assert spectrum.noise**2 <= smallest * (1 + 1e-9)
    # the signal, s^2 = tr(M) - d s^2 sigma^2, is the rest of the trace
    assert spectrum.scale**2 == pytest.approx(
        np.trace(M) - d * (spectrum.noise * spectrum.scale) ** 2
    )


def _blobs(seed, d, K, per, gap=1e3):
    """K clusters of ``per`` rows of unit noise, ``gap`` apart: with a large gap
    any sane seeding finds them all."""
    rng = np.random.RandomState(seed)
    # At least ``gap`` apart: spaced by gap along the first axis.
    centres = gap * rng.standard_normal((K, d))
    centres[:, 0] = gap * rng.permutation(K)
    y = np.repeat(np.arange(K), per)
    return centres[y] + rng.standard_normal((len(y), d)), y


def _sorted_rows(A):
    return A[np.lexsort(A.T[::-1])]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(2, 8))
def test_seeded_start_finds_the_same_centres_for_any_order_of_the_rows(seed, d, K):
    # With clusters far apart every seeding covers them all, and Lloyd's
    # iterations end on the clusters' means: the centres as a set do not
    # depend on the rows' order (nor on the draws).
    X, y = _blobs(seed, d, K, 30)
    order = np.random.RandomState(seed + 1).permutation(len(X))
    found = []
    for rows in (X, X[order]):
        seeds = seeded_start(DenseRows(rows), K, np.random.RandomState(seed))
        found.append(_sorted_rows((seeds.heads * seeds.radii).T))
    means = _sorted_rows(np.array([X[y == k].mean(0) for k in range(K)]))
    np.testing.assert_allclose(found[0], means, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(found[1], means, rtol=1e-9, atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(2, 6), st.integers(1, 40))
def test_rows_of_zero_weight_are_ignored(seed, d, K, n_zero):
    # Rows of zero weight, anywhere and anywhere in space, change nothing:
    # they are never drawn, move no mean and weigh nothing in the inertia or
    # in the share of labels that changed.
    rng = np.random.RandomState(seed)
    X = rng.standard_normal((60, d)) * rng.uniform(0.5, 3.0, d)
    w = rng.uniform(0.1, 2.0, 60)
    outliers = 1e3 * rng.standard_normal((n_zero, d))
    at = np.sort(rng.randint(0, 61, n_zero))
    X_more = np.insert(X, at, outliers, axis=0)
    w_more = np.insert(w, at, 0.0)
    a = seeded_start(DenseRows(X, w), K, np.random.RandomState(seed))
    b = seeded_start(DenseRows(X_more, w_more), K, np.random.RandomState(seed))
    np.testing.assert_allclose(b.heads * b.radii, a.heads * a.radii, rtol=1e-9, atol=1e-12)
    assert b.inertia == pytest.approx(a.inertia, rel=1e-9)
    assert b.n_iter == a.n_iter


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(2, 12), st.integers(1, 4))
def test_kmeans_plus_plus_draws_k_distinct_rows_of_positive_weight(seed, d, K, n_seedings):
    # Few distinct rows, many copies and some of zero weight: each seeding
    # still draws K distinct rows of positive weight (a row at distance 0 has
    # no D^2 mass), as long as there are K of them.
    rng = np.random.RandomState(seed)
    distinct = rng.standard_normal((K + 1, d))
    X = distinct[rng.randint(0, K + 1, 80)]
    X[: K + 1] = distinct
    w = rng.uniform(0.0, 1.0, 80)
    w[: K + 1] = 1.0
    w[rng.rand(80) < 0.3] = 0.0
    w[: K + 1] = np.maximum(w[: K + 1], 0.5)
    stacks = kmeans_plus_plus(X, w, K, rng, n_seedings=n_seedings)
    assert stacks.shape == (n_seedings, K, d)
    positive = X[w > 0]
    for centres in stacks:
        assert len(np.unique(centres, axis=0)) == K
        assert all(np.any(np.all(positive == c, axis=1)) for c in centres)


def test_lloyd_stops_each_stack_on_the_share_of_changed_labels(global_random_seed):
    # Stacks run side by side give what each gives alone, and a tolerance
    # stops a stack no later than exact stability does.
    X, _ = _blobs(global_random_seed, 3, 5, 40, gap=3.0)
    rng = np.random.RandomState(global_random_seed)
    starts = np.stack([X[rng.choice(len(X), 5, replace=False)] for _ in range(3)])
    together = lloyd(X, None, starts, tol=0.0)
    for s in range(3):
        alone = lloyd(X, None, starts[s : s + 1], tol=0.0)
        np.testing.assert_allclose(together[0][s], alone[0][0], atol=1e-10)
        np.testing.assert_array_equal(together[1][:, s], alone[1][:, 0])
        assert together[3][s] == alone[3][0]
    loose = lloyd(X, None, starts, tol=0.05)
    assert np.all(loose[3] <= together[3])


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("exponent", [-530, 530])
def test_seeded_start_of_rows_scaled_by_a_power_of_two_is_scaled_alike(kind, exponent):
    # Rows many scales from the others (the light rows of weights whose
    # ratio passes about 1e300 lie 1e150 scales from the heavy ones) had
    # squared distances beyond float64: inf (an overflow RuntimeWarning in
    # the distances' product, an error in this suite), and the draws' mass
    # inf x w; rows below 2^-511 had squares that underflowed, and other
    # seeds. The seeding now runs on the rows over the power of two of their
    # largest entry: 2^k X gives the seeds of X times 2^k, to the last bit.
    rng = np.random.RandomState(0)
    X = np.r_[rng.standard_normal((40, 2)), 8.0 + rng.standard_normal((40, 2))]
    w = rng.uniform(0.1, 2.0, 80)
    rows = {"dense": DenseRows, "sparse": SparseRows}[kind]
    want = seeded_start(rows(X, w), 3, np.random.RandomState(1))
    got = seeded_start(rows(np.ldexp(X, exponent), w), 3, np.random.RandomState(1))
    np.testing.assert_array_equal(got.heads, want.heads)
    np.testing.assert_array_equal(got.radii, np.ldexp(want.radii, exponent))
    assert got.noise == np.ldexp(want.noise, exponent)
    assert got.inertia == (np.inf if exponent > 0 else np.ldexp(want.inertia, 2 * exponent))
    assert got.n_iter == want.n_iter


@settings(max_examples=20, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 3),
    st.integers(2, 6),
    st.sampled_from([1e8, -1e12, 1e200]),
)
def test_seeded_start_beside_a_far_constant_column_is_that_of_the_other_columns(seed, d, K, far):
    # Rows of clusters 1e3 apart with a column of one value far from zero
    # beside them: their distances are those of the other columns. Expanded
    # about the origin, ||x||^2 - 2 <x, c> + ||c||^2 rounded at far^2: at
    # 1e8 the inertia (the noise of the mixture's start) was off by up to
    # 47%, at 1e12 and 1e200 the centres were lost (by up to 4e3).
    X, y = _blobs(seed, d, K, 30)
    want = seeded_start(DenseRows(X), K, np.random.RandomState(seed))
    got = seeded_start(DenseRows(np.c_[np.full(len(X), far), X]), K, np.random.RandomState(seed))
    found = (got.heads * got.radii).T
    np.testing.assert_allclose(found[:, 0], far, rtol=1e-14)
    means = _sorted_rows(np.array([X[y == k].mean(0) for k in range(K)]))
    np.testing.assert_allclose(_sorted_rows(found[:, 1:]), means, rtol=1e-9, atol=1e-9)
    assert got.inertia == pytest.approx(want.inertia, rel=1e-9)
    assert got.n_iter == want.n_iter


def test_the_estimators_max_iter_bounds_lloyds_iterations():
    # n_iter_ counts Lloyd's iterations at a seeded start (K > d), which ran
    # up to their own bound of 50 whatever max_iter: 34 at max_iter=1, 2 or 5.
    from sklearn.datasets import make_blobs

    from attention_cluster import AttentionClustering

    X = make_blobs(600, n_features=2, centers=8, cluster_std=2.0, random_state=0)[0]
    free = AttentionClustering(8, random_state=0).fit(X).n_iter_
    assert free > 3  # (a bound of 3 below binds)
    for max_iter in (1, 3):
        model = AttentionClustering(8, max_iter=max_iter, random_state=0)
        assert model.fit(X).n_iter_ <= max_iter
