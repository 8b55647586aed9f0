r"""Data models of the paper: Gaussian mixtures with centroids on the sphere.

The mixture :math:`(P_\sigma)` of :mathmd:`1` (paper, section 2):

.. math::

    Z \sim \mathrm{Categorical}(w), \qquad
    X \mid Z = c \sim \mathcal{N}(\mu^\star_c, \sigma^2 I_d),

with unit-norm centroids :math:`\mu^\star_c`, mutually orthogonal by default
(:math:`K \le d`). :math:`\sigma = 0` is the Dirac mixture :math:`(P_0)`.

Two generators mimic data that directional clustering meets in practice,
without any download: :func:`make_corpus`, documents drawn from K topics
over a Zipf vocabulary (to be vectorised by TF-IDF), and
:func:`make_embeddings`, unit vectors in directional clusters that share a
common offset direction, as sentence embeddings do.
"""

import numpy as np
import scipy.sparse as sp

from ._passes import unit_rows
from ._validation import (
    InvalidParameterError,
    check_count,
    check_noise,
    check_parameter_matrix,
    check_positive,
    check_seed,
    check_weights,
)

__all__ = [
    "make_centroids",
    "make_mixture",
    "make_sequences",
    "make_prompts",
    "make_corpus",
    "make_embeddings",
]


# The kinds of centroids make_centroids draws, as its messages name them.
_KINDS = ("orthogonal", "random")
_KINDS_SHOWN = " or ".join(repr(kind) for kind in _KINDS)


def make_centroids(n_clusters, n_features, *, kind="orthogonal", random_state=None):
    """Draw ``n_clusters`` unit-norm centroids in ``R^n_features``.

    Parameters
    ----------
    n_clusters : int
        Number of centroids K.
    n_features : int
        Dimension d.
    kind : {"orthogonal", "random"}, default="orthogonal"
        ``"orthogonal"``: a uniformly random orthonormal K-frame (the paper's
        assumption, requires ``K <= d``), obtained from the QR decomposition
        of a Gaussian matrix with the signs of R's diagonal fixed (Haar
        measure). ``"random"``: i.i.d. uniform points on the sphere
        ``S^{d-1}``, nearly orthogonal when d is large (paper, Appendix G.2;
        :doc:`/reproduction`).
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    centroids : ndarray of shape (n_clusters, n_features)
        Unit rows.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.datasets import make_centroids
    >>> C = make_centroids(3, 5, random_state=0)
    >>> bool(np.allclose(C @ C.T, np.eye(3)))
    True
    """
    n_clusters = check_count(n_clusters, "n_clusters")
    n_features = check_count(n_features, "n_features")
    rng = check_seed(random_state)
    if kind == "orthogonal":
        return _orthonormal_frames(1, n_clusters, n_features, rng)[0]
    if kind == "random":
        G = rng.standard_normal((n_clusters, n_features))
        return G / np.linalg.norm(G, axis=1, keepdims=True)
    raise InvalidParameterError(f"kind must be {_KINDS_SHOWN}, got {kind!r}.")


def _orthonormal_frames(n_frames, n_clusters, n_features, rng):
    """``n_frames`` uniformly random orthonormal K-frames of ``R^d``, (n_frames, K, d).

    Each from the QR decomposition of a d x K Gaussian matrix, the signs of
    R's diagonal fixed (Haar measure); the frames of one call are those of
    ``n_frames`` calls in turn on the same generator (one draw, stacked QR).
    InvalidParameterError, before the draw, where K > d.
    """
    if n_clusters > n_features:
        raise InvalidParameterError(
            f"Orthogonal centroids need n_clusters <= n_features, got "
            f"n_clusters={n_clusters} > n_features={n_features}."
        )
    G = rng.standard_normal((n_frames, n_features, n_clusters))
    Q, R = np.linalg.qr(G)
    signs = np.sign(np.diagonal(R, axis1=1, axis2=2))
    signs[signs == 0] = 1.0
    return np.ascontiguousarray((Q * signs[:, None, :]).transpose(0, 2, 1))


def _resolve_mixture(n_clusters, n_features, centroids, weights, rng):
    if isinstance(centroids, str):
        if centroids not in _KINDS:
            raise InvalidParameterError(
                f"centroids must be {_KINDS_SHOWN} (a kind of make_centroids) or an array "
                f"of shape (n_clusters, n_features), got {centroids!r}."
            )
        centroids = make_centroids(n_clusters, n_features, kind=centroids, random_state=rng)
    else:
        # A copy: the centroids returned are the generator's, not the caller's array.
        centroids = np.array(
            check_parameter_matrix(
                centroids, "centroids", shape=(n_clusters, n_features), labels=("K", "d")
            )
        )
    return centroids, check_weights(weights, n_clusters)


def make_mixture(
    n_samples=1000,
    n_features=10,
    n_clusters=2,
    *,
    noise=0.3,
    centroids="orthogonal",
    weights=None,
    random_state=None,
):
    r"""Draw i.i.d. samples of the Gaussian mixture :math:`(P_\sigma)`.

    :math:`x = \mu^\star_z + \sigma \varepsilon` with
    :math:`z \sim \mathrm{Categorical}(w)` (``weights``), :math:`\sigma` the
    ``noise`` and :math:`\varepsilon \sim \mathcal{N}(0, I_d)` (:mathmd:`1`;
    paper, section 2).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points n.
    n_features : int, default=10
        Dimension d.
    n_clusters : int, default=2
        Number of components K.
    noise : float, default=0.3
        Standard deviation sigma >= 0 of each component; 0 gives the Dirac
        mixture ``(P_0)``.
    centroids : {"orthogonal", "random"} or array-like of shape (K, d), default="orthogonal"
        How to draw the centroids (see :func:`make_centroids`), or the
        centroids themselves.
    weights : array-like of shape (K,), default=None
        Mixture weights; uniform when None (the paper's balanced case).
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    labels : ndarray of shape (n_samples,)
        Latent component Z of each sample.
    centroids : ndarray of shape (n_clusters, n_features)

    Examples
    --------
    >>> from attention_cluster.datasets import make_mixture
    >>> X, y, C = make_mixture(500, 10, 2, noise=0.3, random_state=0)
    >>> X.shape, y.shape, C.shape
    ((500, 10), (500,), (2, 10))
    """
    n_samples = check_count(n_samples, "n_samples")
    n_features = check_count(n_features, "n_features")
    n_clusters = check_count(n_clusters, "n_clusters")
    noise = check_noise(noise, scalar=True)
    rng = check_seed(random_state)
    centroids, weights = _resolve_mixture(n_clusters, n_features, centroids, weights, rng)
    labels = rng.choice(n_clusters, size=n_samples, p=weights)
    with np.errstate(over="ignore", invalid="ignore"):
        X = centroids[labels] + noise * rng.standard_normal((n_samples, n_features))
    _check_finite_rows(X, noise)
    return X, labels, centroids


def _check_finite_rows(X, noise):
    """Refuse rows that a finite noise put beyond float64's range."""
    if not np.all(np.isfinite(X)):
        raise InvalidParameterError(f"noise={noise!r} puts the rows beyond float64's range.")


def make_sequences(
    n_sequences,
    sequence_length,
    n_features=10,
    n_clusters=2,
    *,
    noise=0.3,
    centroids="orthogonal",
    weights=None,
    random_state=None,
):
    """Draw a batch of sequences of ``L`` i.i.d. tokens from ``(P_sigma)``.

    All sequences share the same centroids (the paper's sections 2-4); each
    token is drawn as in :func:`make_mixture`.

    Parameters
    ----------
    n_sequences : int
        Batch size.
    sequence_length : int
        Number of tokens L of each sequence.
    n_features, n_clusters, noise, centroids, weights, random_state
        As in :func:`make_mixture`.

    Returns
    -------
    X : ndarray of shape (n_sequences, sequence_length, n_features)
    labels : ndarray of shape (n_sequences, sequence_length)
    centroids : ndarray of shape (n_clusters, n_features)

    Examples
    --------
    >>> from attention_cluster.datasets import make_sequences
    >>> X, y, C = make_sequences(4, 50, 10, 2, random_state=0)
    >>> X.shape, y.shape
    ((4, 50, 10), (4, 50))
    """
    n_sequences = check_count(n_sequences, "n_sequences")
    sequence_length = check_count(sequence_length, "sequence_length")
    X, labels, centroids = make_mixture(
        n_sequences * sequence_length,
        n_features,
        n_clusters,
        noise=noise,
        centroids=centroids,
        weights=weights,
        random_state=random_state,
    )
    shape = (n_sequences, sequence_length)
    return X.reshape(*shape, -1), labels.reshape(shape), centroids


def make_prompts(
    n_prompts, sequence_length, n_features=10, n_clusters=2, *, noise=0.3, random_state=None
):
    """Draw in-context prompts, each with its own random orthogonal centroids.

    The in-context model of the paper's section 5 (:mathmd:`1`):
    prompt i has centroids ``mu*_i0, ..., mu*_i(K-1)``, a uniformly random
    orthonormal K-frame of ``R^d`` (:func:`make_centroids`), and L i.i.d.
    tokens ``X_il = mu*_{i Z_il} + noise * eps_il`` with
    ``Z_il ~ Uniform{0..K-1}`` and ``eps_il ~ N(0, I_d)``.

    Parameters
    ----------
    n_prompts : int
        Number of prompts n.
    sequence_length : int
        Number of tokens L of each prompt.
    n_features : int, default=10
        Dimension d, at least ``n_clusters``.
    n_clusters : int, default=2
        Number of components K of each prompt's mixture.
    noise : float, default=0.3
        Standard deviation sigma >= 0 of each component.
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (n_prompts, sequence_length, n_features)
    labels : ndarray of shape (n_prompts, sequence_length)
        Latent component Z of each token.
    centroids : ndarray of shape (n_prompts, n_clusters, n_features)
        Unit, mutually orthogonal rows for each prompt.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.datasets import make_prompts
    >>> X, y, C = make_prompts(3, 50, 10, 2, random_state=0)
    >>> X.shape, y.shape, C.shape
    ((3, 50, 10), (3, 50), (3, 2, 10))
    >>> bool(np.allclose(C[1] @ C[1].T, np.eye(2)))
    True
    """
    n_prompts = check_count(n_prompts, "n_prompts")
    sequence_length = check_count(sequence_length, "sequence_length")
    n_features = check_count(n_features, "n_features")
    n_clusters = check_count(n_clusters, "n_clusters")
    noise = check_noise(noise, scalar=True)
    rng = check_seed(random_state)
    centroids = _orthonormal_frames(n_prompts, n_clusters, n_features, rng)
    labels = rng.randint(n_clusters, size=(n_prompts, sequence_length))
    X = np.take_along_axis(centroids, labels[..., None], axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        X += noise * rng.standard_normal(X.shape)
    _check_finite_rows(X, noise)
    return X, labels, centroids


def _check_fraction(value, name):
    """A number in [0, 1] (not a bool or a text), as a float."""
    if check_positive(value, name, strict=False) > 1.0:
        raise InvalidParameterError(f"{name} must be a number in [0, 1], got {value!r}.")
    return float(value)


# The largest mean length of make_corpus' documents: NumPy's Poisson draws
# take means below about 9.2e18.
_LONGEST_MEAN_LENGTH = 2**62
# The most topics of make_corpus: NumPy draws the topics as int64.
_MOST_TOPICS = 2**63


def make_corpus(
    n_documents=1000,
    n_topics=5,
    *,
    n_words=5000,
    document_length=100,
    topic_share=0.3,
    zipf_exponent=1.1,
    output="texts",
    random_state=None,
):
    r"""Draw documents from K topics over a Zipf vocabulary.

    Word ``j`` of the vocabulary (``"w0"``, ``"w1"``, ...) has background
    frequency :math:`p_j \propto (j + 1)^{-s}`, Zipf's law with
    exponent :math:`s` = ``zipf_exponent``. Topic k ranks the same vocabulary in its
    own random order (a uniform permutation), with the same Zipf law over
    ranks, and its word distribution is the mixture, with :math:`a` =
    ``topic_share`` and :math:`r_k(j)` the rank topic k gives word j,

    .. math::

        \phi_k(j) = (1 - a)\, p_j + a\, p_{r_k(j)} ,

    so frequent words are shared by every topic, as stop words are, and
    each topic has its own frequent words (only the topics that hold a
    document draw their order, in increasing k, so ``n_topics`` may far exceed
    ``n_documents``). A document has a topic ``z``
    drawn uniformly, a length drawn from ``Poisson(document_length)`` (at
    least one word), and its words drawn i.i.d. from ``phi_z``
    (:mathmd:`1`, "Generators of user-like data", gives the counts' mean
    and variance).

    Parameters
    ----------
    n_documents : int, default=1000
        Number of documents n.
    n_topics : int, default=5
        Number of topics K.
    n_words : int, default=5000
        Vocabulary size V.
    document_length : int, default=100
        Mean number of words in a document.
    topic_share : float in [0, 1], default=0.3
        Share of a document's words drawn from its topic's ranking; 0 makes
        all topics alike.
    zipf_exponent : float, default=1.1
        Exponent s > 0 of the Zipf law.
    output : {"texts", "counts"}, default="texts"
        ``"texts"``: a list of strings, words separated by spaces, for a
        vectoriser such as :class:`~sklearn.feature_extraction.text.TfidfVectorizer`.
        ``"counts"``: the document-word count matrix, CSR of shape
        ``(n_documents, n_words)``, column j counting word ``"wj"``.
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    documents : list of str or scipy.sparse.csr_matrix
    labels : ndarray of shape (n_documents,)
        The topic of each document.

    Examples
    --------
    >>> from attention_cluster.datasets import make_corpus
    >>> texts, topics = make_corpus(3, 2, n_words=50, document_length=5, random_state=0)
    >>> len(texts), topics.shape
    (3, (3,))
    >>> counts, _ = make_corpus(3, 2, n_words=50, document_length=5, output="counts", random_state=0)
    >>> counts.shape
    (3, 50)
    """
    n_documents = check_count(n_documents, "n_documents")
    n_topics = check_count(n_topics, "n_topics")
    if n_topics > _MOST_TOPICS:
        # NumPy's "high is out of bounds for int64" named no parameter.
        raise InvalidParameterError(f"n_topics must be at most 2**63, got {n_topics}.")
    n_words = check_count(n_words, "n_words")
    document_length = check_count(document_length, "document_length")
    if document_length > _LONGEST_MEAN_LENGTH:
        # NumPy's Poisson draws refuse a larger mean ("lam value too large").
        raise InvalidParameterError(
            f"document_length must be at most 2**62, got {document_length}."
        )
    topic_share = _check_fraction(topic_share, "topic_share")
    zipf_exponent = check_positive(zipf_exponent, "zipf_exponent")
    if output not in ("texts", "counts"):
        raise InvalidParameterError(f"output must be 'texts' or 'counts', got {output!r}.")
    rng = check_seed(random_state)
    zipf = np.arange(1, n_words + 1, dtype=np.float64) ** -float(zipf_exponent)
    zipf /= zipf.sum()
    try:
        labels = rng.randint(n_topics, size=n_documents)
        lengths = np.maximum(rng.poisson(document_length, size=n_documents), 1)
        rows = np.repeat(np.arange(n_documents), lengths)
        words = np.empty(rows.size, dtype=np.int64)
    except (MemoryError, ValueError) as error:
        # NumPy's "array is too big" or its MemoryError named no parameter.
        raise InvalidParameterError(
            f"n_documents={n_documents} documents of document_length={document_length} words "
            f"on average hold more words than memory does ({error}): lower document_length or "
            "n_documents."
        ) from None
    # The words grouped by topic, each group in the documents' order; only the
    # topics that hold a document are drawn, in increasing order (n_topics may
    # far exceed n_documents).
    topic_of_word = labels[rows]
    by_topic = np.argsort(topic_of_word, kind="stable")
    starts = np.flatnonzero(np.diff(topic_of_word[by_topic])) + 1
    for where in np.split(by_topic, starts):
        # Word ranking[r] has rank r in topic k: phi_k(j) = (1 - a) p_j + a
        # p_{r_k(j)} (math.md section 1, "Generators of user-like data").
        ranking = rng.permutation(n_words)
        phi = (1.0 - topic_share) * zipf
        phi[ranking] += topic_share * zipf
        cdf = np.cumsum(phi)
        words[where] = np.minimum(
            np.searchsorted(cdf, rng.uniform(0.0, cdf[-1], where.size)), n_words - 1
        )
    counts = sp.csr_matrix(
        (np.ones(rows.size), (rows, words)), shape=(n_documents, n_words), dtype=np.float64
    )
    counts.sum_duplicates()
    if output == "counts":
        return counts, labels
    vocabulary = np.array([f"w{j}" for j in range(n_words)])
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    texts = [" ".join(vocabulary[words[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]
    return texts, labels


def make_embeddings(
    n_samples=1000,
    n_features=384,
    n_clusters=5,
    *,
    offset=1.0,
    noise=0.05,
    weights=None,
    random_state=None,
):
    r"""Draw unit vectors in directional clusters that share a common offset.

    Sentence embeddings are unit vectors whose pairwise cosines are mostly
    positive: they share a common direction (anisotropy), and topics are
    directions around it. Here, with :math:`a` the ``offset`` and
    :math:`\sigma` the ``noise``,

    .. math::

        x = \frac{a o + \mu_z + \sigma \varepsilon}{\| a o + \mu_z + \sigma \varepsilon \|},

    with ``o`` a random unit vector, the ``mu_c`` random unit vectors
    orthogonal to ``o`` (nearly orthogonal to each other in high
    dimension, :func:`make_centroids` with ``kind="random"``), ``z`` drawn
    from ``weights`` and ``eps ~ N(0, I_d)``. Without noise, two points of
    different clusters j, k have cosine ``(offset^2 + <mu_j, mu_k>) / (1 +
    offset^2)``, ``offset^2 / (1 + offset^2)`` on average (0.5 for the
    default offset) with standard deviation ``1 / ((1 + offset^2) sqrt(d -
    1))`` (:mathmd:`1`, "Generators of user-like data").

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points n.
    n_features : int, default=384
        Dimension d (384 is the size of small sentence-embedding models).
    n_clusters : int, default=5
        Number of clusters K, at most ``n_features - 1``.
    offset : float, default=1.0
        Length of the common offset, relative to the clusters' unit
        directions; 0 gives clusters around near-orthogonal directions.
    noise : float, default=0.05
        Standard deviation of each coordinate of the noise before
        normalisation (the noise's norm is about ``noise sqrt(d)``).
    weights : array-like of shape (n_clusters,), default=None
        Cluster weights; uniform when None.
    random_state : int, RandomState instance or None, default=None
        Seed or generator.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Unit rows.
    labels : ndarray of shape (n_samples,)
    centers : ndarray of shape (n_clusters, n_features)
        The noiseless point of each cluster, ``(offset o + mu_c) / ||offset
        o + mu_c||``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.datasets import make_embeddings
    >>> X, y, C = make_embeddings(100, 384, 4, random_state=0)
    >>> X.shape, C.shape
    ((100, 384), (4, 384))
    >>> bool(np.allclose(np.linalg.norm(X, axis=1), 1.0))
    True
    """
    n_samples = check_count(n_samples, "n_samples")
    n_features = check_count(n_features, "n_features", minimum=2)
    n_clusters = check_count(n_clusters, "n_clusters")
    if n_clusters >= n_features:
        raise InvalidParameterError(
            f"n_clusters must be < n_features, got {n_clusters} >= {n_features}."
        )
    offset = check_positive(offset, "offset", strict=False)
    noise = check_noise(noise, scalar=True)
    rng = check_seed(random_state)
    direction = make_centroids(1, n_features, kind="random", random_state=rng)[0]
    weights = check_weights(weights, n_clusters)
    # Random directions, then their component along the offset removed: the
    # centres' norm is sqrt(1 + offset^2) before normalisation and their
    # cosine (offset^2 + <mu_j, mu_k>) / (1 + offset^2) (math.md section 1,
    # "Generators of user-like data").
    directions = make_centroids(n_clusters, n_features, kind="random", random_state=rng)
    directions -= np.outer(directions @ direction, direction)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    labels = rng.choice(n_clusters, size=n_samples, p=weights)
    with np.errstate(over="ignore", invalid="ignore"):
        X = (
            offset * direction
            + directions[labels]
            + noise * rng.standard_normal((n_samples, n_features))
        )
    if not np.all(np.isfinite(X)):
        raise InvalidParameterError(
            f"noise={noise!r} or offset={offset!r} puts the rows beyond float64's range."
        )
    return _unit(X), labels, _unit(offset * direction + directions)


def _unit(rows):
    """Rows divided by their norms; by :func:`~attention_cluster._passes.unit_rows`
    (largest entry first) where a norm leaves float64's range (a noise or an
    offset of 1e200: the squares overflow, and the rows became zero)."""
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
    safe = np.isfinite(norms) & (norms > np.finfo(np.float64).tiny)
    if np.all(safe):
        return rows / norms
    return unit_rows(rows)
