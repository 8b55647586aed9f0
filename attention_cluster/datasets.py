"""Data models of the paper: Gaussian mixtures with centroids on the sphere.

The mixture ``(P_sigma)`` of ``math.md`` section 1 (paper, section 2):

    Z ~ Categorical(weights),   X | Z = c  ~  N(mu*_c, sigma^2 I_d),

with unit-norm centroids ``mu*_c``, mutually orthogonal by default
(``K <= d``). ``sigma = 0`` is the Dirac mixture ``(P_0)``.
"""

import numpy as np
from sklearn.utils import check_random_state

from ._validation import check_count, check_noise

__all__ = ["make_centroids", "make_mixture", "make_sequences", "make_prompts"]


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
        ``S^{d-1}``, nearly orthogonal when d is large (rebuttal, W2-iii).
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
    rng = check_random_state(random_state)
    if kind == "orthogonal":
        if n_clusters > n_features:
            raise ValueError(
                f"Orthogonal centroids need n_clusters <= n_features, got "
                f"n_clusters={n_clusters} > n_features={n_features}."
            )
        G = rng.standard_normal((n_features, n_clusters))
        Q, R = np.linalg.qr(G)
        signs = np.sign(np.diag(R))
        signs[signs == 0] = 1.0
        return np.ascontiguousarray((Q * signs).T)
    if kind == "random":
        G = rng.standard_normal((n_clusters, n_features))
        return G / np.linalg.norm(G, axis=1, keepdims=True)
    raise ValueError(f"kind must be 'orthogonal' or 'random', got {kind!r}.")


def _resolve_mixture(n_clusters, n_features, centroids, weights, rng):
    if isinstance(centroids, str):
        centroids = make_centroids(n_clusters, n_features, kind=centroids, random_state=rng)
    else:
        centroids = np.array(centroids, dtype=np.float64)
        if centroids.shape != (n_clusters, n_features):
            raise ValueError(
                f"centroids must have shape ({n_clusters}, {n_features}), got {centroids.shape}."
            )
    if weights is None:
        weights = np.full(n_clusters, 1.0 / n_clusters)
    else:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (n_clusters,) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
            raise ValueError("weights must be n_clusters non-negative numbers summing to 1.")
    return centroids, weights


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
    """Draw i.i.d. samples of the Gaussian mixture ``(P_sigma)``.

    ``x = mu*_z + noise * eps`` with ``z ~ Categorical(weights)`` and
    ``eps ~ N(0, I_d)`` (``math.md`` section 1; paper, section 2).

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
    check_noise(noise)
    rng = check_random_state(random_state)
    centroids, weights = _resolve_mixture(n_clusters, n_features, centroids, weights, rng)
    labels = rng.choice(n_clusters, size=n_samples, p=weights)
    X = centroids[labels] + noise * rng.standard_normal((n_samples, n_features))
    return X, labels, centroids


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


def make_prompts(n_prompts, sequence_length, n_features=10, n_clusters=2, *, noise=0.3, random_state=None):
    """Draw in-context prompts, each with its own random orthogonal centroids.

    The in-context model of the paper's section 5 (``math.md`` section 1):
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
    check_noise(noise)
    rng = check_random_state(random_state)
    centroids = np.stack([make_centroids(n_clusters, n_features, random_state=rng) for _ in range(n_prompts)])
    labels = rng.randint(n_clusters, size=(n_prompts, sequence_length))
    X = np.take_along_axis(centroids, labels[..., None], axis=1)
    X += noise * rng.standard_normal(X.shape)
    return X, labels, centroids
