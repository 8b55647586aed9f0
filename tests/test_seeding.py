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
        c = kmeans_plus_plus(points, w, 2, rng, n_trials=1)
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
        c = kmeans_plus_plus(points, None, 2, rng)
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
    centres, labels, inertia, n_iter = lloyd(points, None, start, max_iter=3)
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
    assert seeds.noise == pytest.approx(0.1, rel=0.15)


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
