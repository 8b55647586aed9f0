"""Tests of attention_cluster.datasets: the mixture (P_sigma) of math.md
section 1 and its generators.

Statistical checks use fixed seeds and 5 standard errors (false alarm below
1e-6 each).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_cluster.datasets import (
    make_centroids,
    make_corpus,
    make_embeddings,
    make_mixture,
    make_prompts,
    make_sequences,
)

seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=50, deadline=None)
@given(d=st.integers(1, 12), data=st.data(), seed=seeds)
def test_orthogonal_centroids_are_orthonormal(d, data, seed):
    K = data.draw(st.integers(1, d))
    C = make_centroids(K, d, random_state=seed)
    assert C.shape == (K, d)
    np.testing.assert_allclose(C @ C.T, np.eye(K), atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(K=st.integers(1, 8), d=st.integers(1, 8), seed=seeds)
def test_random_centroids_are_unit_vectors(K, d, seed):
    C = make_centroids(K, d, kind="random", random_state=seed)
    np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0, atol=1e-12)


def test_orthogonal_centroids_are_uniform_on_the_sphere():
    # Haar frames: each row is uniform on S^{d-1}, so E[mu] = 0 and
    # E[mu mu^T] = I / d. Entry variance of mu_i mu_j is at most 3 / d^2.
    rng = np.random.RandomState(0)
    d, n = 4, 20_000
    rows = np.concatenate([make_centroids(2, d, random_state=rng) for _ in range(n)])
    se = np.sqrt(3.0 / d**2 / rows.shape[0])
    np.testing.assert_allclose(rows.mean(0), 0.0, atol=5 * np.sqrt(1 / d / rows.shape[0]))
    np.testing.assert_allclose(rows.T @ rows / rows.shape[0], np.eye(d) / d, atol=5 * se)


@pytest.mark.parametrize("weights", [None, [0.2, 0.3, 0.5]])
def test_labels_follow_the_weights(weights):
    n = 200_000
    _, y, _ = make_mixture(n, 5, 3, weights=weights, random_state=1)
    p = np.full(3, 1 / 3) if weights is None else np.asarray(weights)
    freq = np.bincount(y, minlength=3) / n
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n))


@settings(max_examples=20, deadline=None)
@given(K=st.integers(1, 4), seed=seeds)
def test_dirac_mixture_puts_every_point_on_its_centroid(K, seed):
    X, y, C = make_mixture(50, 6, K, noise=0.0, random_state=seed)
    np.testing.assert_array_equal(X, C[y])


def test_noise_is_isotropic_with_variance_sigma_squared():
    n, d, sigma = 100_000, 5, 0.7
    X, y, C = make_mixture(n, d, 2, noise=sigma, random_state=2)
    eps = (X - C[y]) / sigma
    np.testing.assert_allclose(eps.mean(0), 0.0, atol=5 / np.sqrt(n))
    # Var of eps_i eps_j is 1 off the diagonal, 2 on it.
    np.testing.assert_allclose(eps.T @ eps / n, np.eye(d), atol=5 * np.sqrt(2 / n))


def test_given_centroids_are_used_as_is():
    C = np.array([[3.0, 0.0], [0.0, -2.0]])
    X, y, C_out = make_mixture(10, 2, 2, noise=0.0, centroids=C, random_state=0)
    np.testing.assert_array_equal(C_out, C)
    np.testing.assert_array_equal(X, C[y])


def test_sequences_share_centroids_and_are_reproducible():
    X, y, C = make_sequences(30, 7, 4, 2, noise=0.0, random_state=3)
    assert X.shape == (30, 7, 4) and y.shape == (30, 7)
    np.testing.assert_array_equal(X, C[y])
    X2, y2, C2 = make_sequences(30, 7, 4, 2, noise=0.0, random_state=3)
    np.testing.assert_array_equal(X, X2)
    X3, _, _ = make_sequences(30, 7, 4, 2, random_state=4)
    assert not np.array_equal(X, X3)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: make_centroids(3, 2), "n_clusters <= n_features"),
        (lambda: make_centroids(2, 3, kind="nope"), "kind"),
        (lambda: make_centroids(0, 3), "n_clusters"),
        (lambda: make_mixture(10, 3, 2, noise=-1.0), "noise"),
        (lambda: make_mixture(10, 3, 2, weights=[0.5, 0.6]), "weights"),
        (
            lambda: make_mixture(10, 3, 2, centroids=np.eye(3)),
            r"centroids must be a non-empty 2-D array of shape \(K, d\) = \(2, 3\), got shape \(3, 3\)",
        ),
        (
            lambda: make_mixture(10, 2, 2, centroids=[["1", "0"], ["0", "1"]]),
            "centroids must be a real",
        ),
        (
            lambda: make_mixture(10, 2, 2, centroids=np.eye(2, dtype=bool)),
            "centroids must be a real",
        ),
        (lambda: make_sequences(0, 5), "n_sequences"),
        (lambda: make_sequences(2, 1.5), "sequence_length"),
        (lambda: make_mixture(10, 3, 2, noise="0.3"), "noise must be a finite number"),
        (lambda: make_mixture(10, 3, 2, noise=[0.1, 0.2]), "noise must be one number"),
        (lambda: make_mixture(10, 3, 2, noise=np.full(3, 0.1)), "noise must be one number"),
        (lambda: make_prompts(2, 5, noise=[0.1, 0.2]), "noise must be one number"),
        (lambda: make_embeddings(10, 5, 2, noise=True), "noise must be a finite number"),
        (
            lambda: make_mixture(10, 2, 2, centroids=[[np.nan, 0.0], [0.0, 1.0]]),
            "centroids must be finite, got NaN or infinity",
        ),
        (lambda: make_mixture(10, 2, 2, centroids=np.eye(2) + 1j), "Complex data not supported"),
    ],
)
def test_generators_reject_invalid_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_corpus_counts_and_texts_agree():
    from sklearn.feature_extraction.text import CountVectorizer

    counts, y = make_corpus(
        200, 4, n_words=300, document_length=40, output="counts", random_state=5
    )
    texts, y2 = make_corpus(200, 4, n_words=300, document_length=40, random_state=5)
    np.testing.assert_array_equal(y, y2)
    vectorizer = CountVectorizer(vocabulary=[f"w{j}" for j in range(300)])
    np.testing.assert_array_equal(vectorizer.fit_transform(texts).toarray(), counts.toarray())
    assert counts.shape == (200, 300) and np.all(counts.sum(axis=1) >= 1)


def test_corpus_follows_its_topic_distributions():
    # Word frequencies of topic k's documents: phi_k = (1 - a) p + a p o pi_k.
    # Topic share 0: every topic draws the background Zipf law.
    counts, _ = make_corpus(
        4000, 2, n_words=50, document_length=50, topic_share=0.0, output="counts", random_state=0
    )
    freq = np.asarray(counts.sum(axis=0)).ravel()
    total = freq.sum()
    p = np.arange(1, 51, dtype=float) ** -1.1
    p /= p.sum()
    np.testing.assert_allclose(freq / total, p, atol=5 * np.sqrt(p * (1 - p) / total).max())
    # Mean document length is the Poisson mean (lengths of at least one word).
    assert abs(total / 4000 - 50) < 5 * np.sqrt(50 / 4000)


def test_corpus_topics_are_separable_with_a_large_topic_share():
    counts, y = make_corpus(
        300, 3, n_words=400, document_length=200, topic_share=0.9, output="counts", random_state=1
    )
    centroids = np.array([np.asarray(counts[y == k].mean(axis=0)).ravel() for k in range(3)])
    nearest = np.argmax(counts @ centroids.T, axis=1)
    assert np.mean(nearest == y) > 0.95


@settings(max_examples=20, deadline=None)
@given(K=st.integers(1, 6), offset=st.floats(0, 5), seed=seeds)
def test_embeddings_are_unit_rows_around_a_shared_offset(K, offset, seed):
    X, y, C = make_embeddings(60, 2000, K, offset=offset, noise=0.0, random_state=seed)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(X, C[y], atol=1e-12)
    # Two centres have cosine (offset^2 + <mu_j, mu_k>) / (1 + offset^2), and
    # random directions in d = 2000 have |<mu_j, mu_k>| < 0.15 (6.7 standard
    # deviations).
    if K > 1:
        cos = C @ C.T
        off_diagonal = cos[~np.eye(K, dtype=bool)]
        np.testing.assert_allclose(
            off_diagonal, offset**2 / (1 + offset**2), atol=0.15 / (1 + offset**2)
        )


def test_embeddings_mean_share_grows_with_the_offset():
    shares = []
    for offset in (0.0, 1.0, 3.0):
        X, _, _ = make_embeddings(2000, 384, 5, offset=offset, random_state=0)
        m = X.mean(axis=0)
        shares.append(m @ m)
    assert shares[0] < shares[1] < shares[2] and shares[2] > 0.5


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: make_corpus(10, 2, topic_share=1.5), "topic_share"),
        (lambda: make_corpus(10, 2, zipf_exponent=0), "zipf_exponent"),
        (lambda: make_corpus(10, 2, output="tfidf"), "output"),
        (lambda: make_corpus(0, 2), "n_documents"),
        (lambda: make_embeddings(10, 4, 4), "n_clusters must be < n_features"),
        (lambda: make_embeddings(10, 8, 2, offset=-1), "offset"),
        (lambda: make_embeddings(10, 8, 2, weights=[1.0, 0.5]), "weights"),
    ],
)
def test_user_data_generators_reject_invalid_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_mixture(10, 3, 2, centroids="Orthogonal"),
        lambda: make_sequences(2, 3, 3, 2, centroids="rand"),
    ],
    ids=["mixture", "sequences"],
)
def test_an_unknown_kind_of_centroids_is_named_centroids(call):
    # The message named make_centroids' kind, a parameter these have not.
    match = r"^centroids must be 'orthogonal' or 'random' .* or an array of shape"
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: make_embeddings(5, 8, 2, offset=True), "offset"),
        (lambda: make_embeddings(5, 8, 2, offset="1"), "offset"),
        (lambda: make_corpus(3, 2, topic_share=True), "topic_share"),
        (lambda: make_corpus(3, 2, topic_share="0.5"), "topic_share"),
        (lambda: make_corpus(3, 2, zipf_exponent=True), "zipf_exponent"),
    ],
    ids=["offset-bool", "offset-text", "share-bool", "share-text", "zipf-bool"],
)
def test_user_data_generators_refuse_bools_and_text_as_numbers(call, name):
    # As noise=True is refused: True was read as 1 (text was refused with a
    # ValueError, now the TypeError of the package's number check).
    with pytest.raises(TypeError, match=f"^{name} must be"):
        call()


@pytest.mark.parametrize(
    "generate",
    [
        lambda w: make_mixture(400, 3, 2, weights=w, random_state=0)[1],
        lambda w: make_embeddings(400, 5, 2, weights=w, random_state=0)[1],
    ],
    ids=["mixture", "embeddings"],
)
def test_weights_that_sum_to_one_within_the_check_are_drawn(generate):
    # np.isclose takes a sum of 1 + 1e-7 as 1; RandomState.choice refused it.
    labels = generate([0.5 + 1e-7, 0.5])
    assert set(np.unique(labels)) == {0, 1}


class _RecordingState(np.random.RandomState):
    """A RandomState that keeps the permutations it draws (the topics' orders)."""

    def __init__(self, seed):
        super().__init__(seed)
        self.permutations = []

    def permutation(self, x):
        out = super().permutation(x)
        self.permutations.append(out)
        return out


def test_corpus_word_counts_match_the_topic_model():
    # math.md section 1, "Generators of user-like data": given its topic k, a
    # document's count of word j has mean E[N] phi_k(j) and variance
    # E[N] phi_k (1 - phi_k) + Var[N] phi_k^2, with
    # phi_k(j) = (1 - a) p_j + a p_{r_k(j)}, r_k the rank topic k gives word
    # j (word pi_k(r) has rank r), and N = max(Poisson(lambda), 1). A short
    # mean length makes the lengths' floor of one word count (e^-2 = 0.135).
    n_docs, K, V, lam, a, s = 200_000, 3, 30, 2, 0.4, 1.1
    rng = _RecordingState(0)
    counts, topics = make_corpus(
        n_docs,
        K,
        n_words=V,
        document_length=lam,
        topic_share=a,
        zipf_exponent=s,
        output="counts",
        random_state=rng,
    )
    assert len(rng.permutations) == K
    p = np.arange(1, V + 1, dtype=float) ** -s
    p /= p.sum()
    mean_n = lam + np.exp(-lam)
    var_n = lam + lam**2 + np.exp(-lam) - mean_n**2
    for k, order in enumerate(rng.permutations):
        rank = np.empty(V, dtype=int)
        rank[order] = np.arange(V)
        phi = (1 - a) * p + a * p[rank]
        docs = topics == k
        n_k = docs.sum()
        observed = np.asarray(counts[docs].sum(axis=0)).ravel()
        expected = n_k * mean_n * phi
        se = np.sqrt(n_k * (mean_n * phi * (1 - phi) + var_n * phi**2))
        # 5 standard errors on each of the K V sums (false alarm below 1e-4 in all).
        assert np.max(np.abs(observed - expected) / se) < 5


@pytest.mark.parametrize("n_topics", [2**14, 10**9], ids=["2^14", "1e9"])
def test_corpus_draws_only_the_topics_that_hold_a_document(n_topics):
    # Every topic drew its ranking and scanned every word, 10^9 of each for
    # n_topics = 10^9 (hours) where 30 documents hold at most 30 topics. A
    # Zipf exponent of 50 and a topic share of 1 put all of topic k's words on
    # its first-ranked word (the next has probability 2^-50), so each
    # document's words show which recorded ranking its topic received.
    rng = _RecordingState(0)
    counts, topics = make_corpus(
        30,
        n_topics,
        n_words=50,
        document_length=5,
        topic_share=1.0,
        zipf_exponent=50,
        output="counts",
        random_state=rng,
    )
    present = np.unique(topics)
    assert len(rng.permutations) == present.size
    first_word = {k: order[0] for k, order in zip(present, rng.permutations)}
    for i, k in enumerate(topics):
        assert counts[i].indices.tolist() == [first_word[k]]


def test_corpus_of_a_seed_is_pinned():
    # The words a seed draws when every topic holds a document (the
    # docstring's example), as they were before the words were grouped by
    # topic.
    texts, topics = make_corpus(3, 2, n_words=50, document_length=5, random_state=0)
    assert texts == ["w4 w6 w14 w2 w17 w2", "w0 w43 w0 w20 w1 w27", "w47 w1 w12 w14 w12 w1 w47"]
    np.testing.assert_array_equal(topics, [0, 1, 1])


@pytest.mark.parametrize("offset", [0.5, 1.0, 3.0])
def test_embeddings_centres_cosine_matches_its_law(offset):
    # math.md section 1, "Generators of user-like data": two centres have
    # cosine (a^2 + t) / (1 + a^2), t = <mu_j, mu_k> the inner product of two
    # independent uniform points of the unit sphere of R^m, m = d - 1, so
    # t = (1 + a^2) cos - a^2 has E t = 0, E t^2 = 1/m, E t^4 = 3 / (m (m + 2)),
    # uncorrelated over the pairs, as are the t^2. A small d makes the 1/m
    # terms visible.
    d, K, n_draws = 20, 19, 100
    m = d - 1
    pairs = np.triu_indices(K, 1)
    t = np.concatenate(
        [
            (1 + offset**2) * (C @ C.T)[pairs] - offset**2
            for C in (
                make_embeddings(1, d, K, offset=offset, random_state=seed)[2]
                for seed in range(n_draws)
            )
        ]
    )
    n = t.size
    # 5 standard errors (false alarm below 1e-6 each).
    assert abs(t.mean()) < 5 * np.sqrt(1 / m / n)
    var_t2 = 3 / (m * (m + 2)) - 1 / m**2
    assert abs(np.mean(t**2) - 1 / m) < 5 * np.sqrt(var_t2 / n)


@pytest.mark.parametrize("noise, offset", [(1e200, 1.0), (0.1, 1e200)])
def test_embeddings_are_unit_rows_at_any_magnitude(noise, offset):
    # The rows' squares overflowed at a noise or an offset of 1e200, and the
    # rows (or the centres) came out zero.
    X, _, centers = make_embeddings(200, 8, 3, noise=noise, offset=offset, random_state=0)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(centers, axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("make", ["mixture", "sequences", "prompts", "embeddings"])
def test_generators_refuse_rows_beyond_float64(make):
    # make_mixture, make_sequences and make_prompts returned infinite rows
    # (with the package's RuntimeWarning) for a finite noise of 1e308.
    generate = {
        "mixture": lambda: make_mixture(200, 8, 3, noise=1e308, random_state=0),
        "sequences": lambda: make_sequences(4, 50, 8, 3, noise=1e308, random_state=0),
        "prompts": lambda: make_prompts(4, 50, 8, 3, noise=1e308, random_state=0),
        "embeddings": lambda: make_embeddings(200, 8, 3, noise=1e308, random_state=0),
    }[make]
    with pytest.raises(ValueError, match="beyond float64's range"):
        generate()


def test_given_centroids_are_copied_and_may_be_integers():
    C = np.eye(2, dtype=int)
    X, _, centroids = make_mixture(20, 2, 2, centroids=C, random_state=0)
    assert centroids.dtype == np.float64 and np.array_equal(centroids, C)
    C64 = np.eye(2)
    centroids = make_mixture(20, 2, 2, centroids=C64, random_state=0)[2]
    centroids[0, 0] = 5.0
    assert C64[0, 0] == 1.0


def test_a_document_length_beyond_numpy_s_poisson_names_itself():
    # NumPy's "lam value too large" named no parameter.
    with pytest.raises(ValueError, match="document_length must be at most"):
        make_corpus(2, 2, n_words=10, document_length=10**19)
    # Below it, words beyond memory: "array is too big" named nothing.
    with pytest.raises(ValueError, match="lower document_length or n_documents"):
        make_corpus(2, 2, n_words=10, document_length=2**62)
    with pytest.raises(ValueError, match="lower document_length or n_documents"):
        make_corpus(10**13, 2, n_words=10, document_length=10)


def test_more_topics_than_int64_holds_names_n_topics():
    # NumPy's "high is out of bounds for int64" was reported as words beyond
    # memory, naming n_documents and document_length.
    with pytest.raises(
        ValueError, match=r"n_topics must be at most 2\*\*63, got 9223372036854775809\.$"
    ):
        make_corpus(10, 2**63 + 1, n_words=10)
    _, topics = make_corpus(10, 2**63, n_words=10, random_state=0)
    assert topics.dtype == np.int64 and topics.min() >= 0
