r"""Metrics of the paper: distance to the centroids, error of the labelling rule,
and the limits of the distance (class means with labels, efficient estimator).

The distance of :mathmd:`5` (paper, section 3.2), over permutations
:math:`\pi` and signs :math:`\varepsilon`,

.. math::

    D(U, U^\star) = \min_{\pi, \varepsilon} \sum_h
    \| \varepsilon_h \mu_{\pi(h)} - \mu^\star_h \|^2 ,

and the error rate of the post-hoc labelling rule
:math:`\arg\max_h \langle x, \mu_h \rangle`
(:mathmd:`1` and :mathmd:`5`; the paper's interference I(sigma), section
3.2; the authors' answer W3). The limits of the distance that the
benchmarks measure against: :func:`class_means_distance` on a sample, and
:func:`information_limit` in expectation (:mathmd:`7`, "The
information limit"); and whether the second moment of n rows shows the
clusters at all, :func:`spectral_visibility` (:mathmd:`7`, "When the
spectrum shows the clusters").
"""

import numpy as np
from scipy import integrate, special, stats
from scipy.optimize import linear_sum_assignment
from sklearn.utils.validation import check_array, column_or_1d

from ._passes import unit_rows
from ._validation import (
    InvalidParameterError,
    check_count,
    check_matrix,
    check_noise,
    check_seed,
    check_weights,
    peak_unit,
    quiet_finite_check,
)

__all__ = [
    "centroid_distance",
    "class_means_distance",
    "match_centroids",
    "bayes_error",
    "interference",
    "information_limit",
    "spectral_visibility",
]


def _as_2d(a, name):
    """Centroids or heads, one per row."""
    return check_matrix(a, name, labels=("n_clusters", "d"))


def _positive_noise(noise, why_not_zero):
    """sigma as one positive float, or a ValueError that says why zero is excluded."""
    sigma = check_noise(noise, scalar=True)
    if not sigma > 0:
        raise InvalidParameterError(f"noise must be positive: {why_not_zero}.")
    return sigma


def match_centroids(estimated, true):
    """Best assignment of estimated heads to true centroids, up to sign.

    Solves the assignment problem of :mathmd:`5` exactly with the
    Hungarian method (:func:`scipy.optimize.linear_sum_assignment`) on the
    cost ``min_eps ||eps mu_j - mu*_h||^2 = ||mu_j||^2 + ||mu*_h||^2 -
    2 |<mu_j, mu*_h>|``, in O(K^3) rather than over K! permutations. When
    there are more heads than centroids, the unmatched heads are ignored.

    Parameters
    ----------
    estimated : array-like of shape (n_heads, n_features)
        Estimated heads, one per row.
    true : array-like of shape (n_clusters, n_features)
        True centroids, one per row, with ``n_clusters <= n_heads``.

    Returns
    -------
    perm : ndarray of shape (n_clusters,)
        ``estimated[perm[h]]`` is matched to ``true[h]``.
    signs : ndarray of shape (n_clusters,)
        The sign ``eps_h`` in {-1, +1} applied to ``estimated[perm[h]]``.
    cost : ndarray of shape (n_clusters,)
        ``||signs[h] * estimated[perm[h]] - true[h]||^2``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import match_centroids
    >>> perm, signs, cost = match_centroids(-np.eye(2)[::-1], np.eye(2))
    >>> perm.tolist(), signs.tolist()
    ([1, 0], [-1.0, -1.0])
    """
    est = _as_2d(estimated, "estimated")
    ref = _as_2d(true, "true")
    if est.shape[1] != ref.shape[1]:
        raise ValueError(
            f"estimated and true must have the same number of features, got "
            f"{est.shape[1]} and {ref.shape[1]}."
        )
    if est.shape[0] < ref.shape[0]:
        raise ValueError(
            f"Need at least as many estimated heads as true centroids, got "
            f"{est.shape[0]} < {ref.shape[0]}."
        )
    # At the scale of their largest entry (a power of two: exact), so that
    # no square overflows or underflows; the costs are scaled back at the end.
    unit = peak_unit(est, ref)
    est, ref = est / unit, ref / unit
    inner = ref @ est.T  # (n_clusters, n_heads)
    sq = np.sum(ref**2, axis=1)[:, None] + np.sum(est**2, axis=1)[None, :]
    cost = np.maximum(sq - 2.0 * np.abs(inner), 0.0)
    rows, cols = linear_sum_assignment(cost)
    signs = np.where(inner[rows, cols] >= 0, 1.0, -1.0)
    # The matched pairs' costs from their differences: the expansion above
    # leaves rounding of the norms' size where the heads equal the centroids.
    matched = np.sum((signs[:, None] * est[cols] - ref[rows]) ** 2, axis=1)
    with np.errstate(over="ignore"):  # a distance beyond float64: infinite
        return cols, signs, matched * unit * unit


def centroid_distance(estimated, true):
    r"""Distance to the centroids, invariant to relabelling and sign flips.

    :math:`D(U, U^\star) = \min_{\pi, \varepsilon} \sum_h \|\varepsilon_h \mu_{\pi(h)} - \mu^\star_h\|^2`
    (:mathmd:`5`; the paper's metric of section 3.2, generalised to
    K heads). It is a sum of squared distances, as plotted in the paper's
    figures 1 and 2.

    Parameters
    ----------
    estimated : array-like of shape (n_heads, n_features)
        Estimated heads, e.g. ``AttentionClustering().cluster_centers_``.
    true : array-like of shape (n_clusters, n_features)
        True centroids.

    Returns
    -------
    distance : float

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import centroid_distance
    >>> centroid_distance([[0.0, -1.0], [1.0, 0.0]], np.eye(2))
    0.0
    """
    return float(np.sum(match_centroids(estimated, true)[2]))


def class_means_distance(X, labels, centroids):
    """Distance of the true-label class means, normalised: the statistical floor.

    The centroid of each component estimated from its own points (labels
    known), projected on the sphere, and its :func:`centroid_distance` to
    the centroids' directions (the centroids normalised, as
    :func:`information_limit` takes them at any common norm): what no
    estimator of the directions, which does not see the labels, can beat by
    much on this sample.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    labels : array-like of shape (n_samples,)
        True component of each row, in ``0 .. n_clusters - 1``, each present.
    centroids : array-like of shape (n_clusters, n_features)

    Returns
    -------
    distance : float

    Raises
    ------
    ValueError
        If X is not finite or not 2-D, the labels are not one integer in
        ``0 .. n_clusters - 1`` per row, a class has no row, or a centroid
        is zero (it has no direction).

    Examples
    --------
    >>> from attention_cluster.datasets import make_mixture
    >>> from attention_cluster.metrics import class_means_distance
    >>> X, y, C = make_mixture(2000, 10, 2, noise=0.3, random_state=0)
    >>> class_means_distance(X, y, C) < 0.01
    True
    """
    centroids = _as_2d(centroids, "centroids")
    K = len(centroids)
    # Directions: each centroid over its largest entry, then its norm.
    peaks = np.max(np.abs(centroids), axis=1, keepdims=True)
    if not np.all(peaks > 0.0):
        raise ValueError(
            f"centroids {np.flatnonzero(peaks[:, 0] == 0).tolist()} are zero: "
            "a zero centroid has no direction to compare the class means with."
        )
    centroids = unit_rows(centroids)
    with quiet_finite_check():
        X = check_array(X, dtype=np.float64, input_name="X")
    if X.shape[1] != centroids.shape[1]:
        raise ValueError(
            f"X has {X.shape[1]} features and centroids {centroids.shape[1]}: they must agree."
        )
    labels = column_or_1d(labels)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"labels must have one entry per row of X, got shape {labels.shape}.")
    if labels.dtype.kind not in "iubf":
        raise ValueError(f"labels must be integers in 0 .. {K - 1}, got dtype {labels.dtype}.")
    if labels.dtype.kind == "f":
        whole = np.isfinite(labels) & (labels == np.floor(labels))
        if not np.all(whole):
            raise ValueError(
                f"labels must be integers in 0 .. {K - 1}, got {labels[~whole][0].item()!r}."
            )
    # In range before the cast to intp, which would wrap 1e20 to a negative.
    outside = (labels < 0) | (labels >= K)
    if np.any(outside):
        raise ValueError(
            f"labels must be in 0 .. {K - 1} (one per centroid), got {labels[outside][0].item()!r}."
        )
    labels = labels.astype(np.intp)
    counts = np.bincount(labels, minlength=K)
    if np.any(counts == 0):
        raise ValueError(
            f"Every class needs a row: no row has the labels {np.flatnonzero(counts == 0).tolist()}."
        )
    # The rows at the scale of X's largest entry (a power of two: exact), so
    # that no sum overflows, and each mean divided by its own largest entry,
    # so that no square in its norm overflows or underflows.
    unit = peak_unit(X)
    means = np.empty((K, X.shape[1]))
    for c in range(K):
        rows = X[labels == c]  # a copy: scaled in place
        rows /= unit
        means[c] = rows.mean(axis=0)
    return centroid_distance(unit_rows(means), centroids)


def _error_independent(gap, scale_c, scale_others, multiplicity=1):
    """``P(max_j y_j >= y_c)`` for independent Gaussians, by quadrature.

    ``y_c = scale_c t`` with ``t ~ N(0, 1)`` and ``y_j ~ N(-gap_j,
    scale_others_j^2)``, so the error is ``E_t[1 - prod_j Phi((gap_j +
    scale_c t) / scale_others_j)]``. The product is formed in log space
    (``log_ndtr``) and ``1 - exp`` with ``expm1``, so tiny error rates keep
    their relative accuracy; the integrand is concentrated where some
    ``gap_j + scale_c t`` is near 0, and the integral runs over
    ``t in [-max_j gap_j / scale_c - 40, 40]`` around those points. Each
    ``y_j`` stands for ``multiplicity`` independent copies of itself (the
    K - 1 equal scores of :func:`interference`, without arrays of K - 1).
    """

    def integrand(t):
        log_correct = multiplicity * np.sum(special.log_ndtr((gap + scale_c * t) / scale_others))
        return -np.expm1(log_correct) * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)

    centres = -gap / scale_c
    lo, hi = min(np.min(centres), 0.0) - 40.0, 40.0
    points = np.concatenate([centres / 2.0, centres, [0.0]])
    value, _ = integrate.quad(
        integrand,
        lo,
        hi,
        points=points[(points > lo) & (points < hi)],
        limit=200,
        epsabs=0.0,
        epsrel=1e-10,
    )
    return value


# Largest correlation between the heads' scores (relative to their squared
# norm) that bayes_error takes for zero: a correlation rho moves the error
# rate by O(rho), here below the 1e-5 accuracy of the correlated path, and
# orthonormal heads rounded to float32 (off-diagonal about 1e-8) stay on the
# independent path, a thousand times faster.
_INDEPENDENT = 1e-6

# Standardised margin beyond which an error is below float64's range:
# Phi(-40) = 3.7e-350.
_BEYOND = 40.0

# Relative difference of the norms that information_limit takes for a common
# norm r in float64 (100 epsilon of float32 for float32 centroids; 4 epsilon
# of float16, _COARSEST_NORM, for float16 ones: their rounding).
_COMMON_NORM = 1e-8
_COARSEST_NORM = 4.0 * float(np.finfo(np.float16).eps)


def bayes_error(centroids, noise, weights=None, heads=None):
    r"""Error rate of the labelling rule ``argmax_c <x, mu_c>`` on a mixture.

    For the mixture :math:`Z \sim \mathrm{Categorical}(w)`,
    :math:`X \mid Z = c \sim \mathcal{N}(\mu^\star_c, \sigma^2 I)` (:mathmd:`1`), the rule labels x with
    :math:`\arg\max_c \langle x, \mu_c \rangle`, where ``mu_c = heads[c]`` (default: the
    centroids themselves), and errs with probability
    :math:`\sum_c w_c \mathbb{P}(\arg\max_j \langle X, \mu_j \rangle \ne c \mid Z = c)`. With equal weights and
    equal-norm centroids this rule is the Bayes classifier and the value is
    the Bayes error; otherwise it is the error of the rule the paper uses.

    - Two labels: ``P(error | Z = c) = Phi(-<mu*_c, kappa_c> / (sigma
      ||kappa_c||))`` with ``kappa_c = mu_c - mu_{1-c}``. For two orthogonal
      unit centroids as heads it is the paper's interference ``I(sigma) =
      Phi(-1 / (sqrt(2) sigma))`` (section 3.2). With estimated heads this is
      the formula of the authors' answer (W3), ``Phi(mu*_1^T kappa / sigma)
      + Phi(-mu*_0^T kappa / sigma)``, ``kappa = (mu_0 - mu_1) / ||mu_0 -
      mu_1||``, which is the sum of the two conditional errors; this function
      weighs them by ``w_c`` (half the sum for equal weights).
    - Mutually orthogonal heads of equal norm (``heads @ heads.T`` diagonal
      and constant to 1e-6 of the norm squared, e.g. orthonormal centroids,
      also rounded to float32, any K): the scores
      ``<X, mu_j>`` are independent and the error is a 1-D integral,
      ``1 - E_t[prod_{j != c} Phi(t + <mu*_c, mu_c - mu_j> / (sigma ||mu||))]``,
      evaluated by adaptive quadrature (relative accuracy about 1e-10).
    - Otherwise (K > 2, correlated scores): a multivariate normal orthant
      probability, computed by :func:`scipy.stats.multivariate_normal.cdf`
      (Genz's quasi-Monte Carlo, absolute accuracy about 1e-5, with a fixed
      seed so the value is reproducible). Its cost grows fast with K:
      seconds at K = 10, minutes from about K = 15.

    Heads are matched to clusters by their index: align estimated heads
    first, e.g. with :func:`match_centroids` (which also fixes their signs).

    Parameters
    ----------
    centroids : array-like of shape (n_clusters, n_features)
        Centroids ``mu*_c``.
    noise : float
        sigma >= 0. For sigma = 0 the error is the weight of the clusters
        whose centroid the rule does not label correctly (ties count as
        errors).
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights, uniform when None.
    heads : array-like of shape (n_clusters, n_features), default=None
        Directions ``mu_c`` of the rule; the centroids when None.

    Returns
    -------
    error : float

    See Also
    --------
    interference : the equal-weight orthonormal case, vectorised in sigma.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import bayes_error
    >>> round(bayes_error(np.eye(2, 10), 1.0), 4)  # I(1)
    0.2398
    >>> round(bayes_error(np.eye(3, 10), 1.0), 4)  # three clusters
    0.3663
    """
    centroids = _as_2d(centroids, "centroids")
    K = centroids.shape[0]
    heads = centroids if heads is None else _as_2d(heads, "heads")
    if heads.shape != centroids.shape:
        raise ValueError(
            f"heads must have the shape of centroids {centroids.shape}, got {heads.shape}."
        )
    weights = check_weights(weights, K)
    sigma = check_noise(noise, scalar=True)
    if K == 1:
        return 0.0
    # The error depends on the centroids and sigma through their ratio, and on
    # the heads through their directions: divided by powers of two (exact),
    # the centroids and sigma at most 1 and the heads' largest entry in
    # [0.5, 1), no product below over- or underflows. A positive sigma stays
    # positive (its ratio to the centroids beyond float64's range).
    heads = heads / peak_unit(heads)
    unit = peak_unit(centroids, sigma)
    centroids = centroids / unit
    if sigma > 0:
        sigma = max(sigma / unit, np.finfo(np.float64).smallest_subnormal)
    scores = centroids @ heads.T  # scores[c, j] = <mu*_c, mu_j>
    gram = heads @ heads.T
    errors = np.empty(K)
    for c in range(K):
        others = np.delete(np.arange(K), c)
        gap = scores[c, c] - scores[c, others]  # mean of <X, mu_c - mu_j>
        # Covariance of <X, mu_c - mu_j>, j != c, divided by sigma^2.
        cov = gram[c, c] - gram[c, others][:, None] - gram[others, c][None, :]
        cov = cov + gram[np.ix_(others, others)]
        sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        if sigma == 0.0 or np.any((sd == 0.0) & (gap <= 0.0)):
            errors[c] = float(np.any(gap <= 0.0)) if sigma == 0.0 else 1.0
            continue
        keep = sd > 0.0  # a zero-variance difference with gap > 0 always holds
        gap, cov, sd = gap[keep], cov[np.ix_(keep, keep)], sd[keep]
        with np.errstate(over="ignore"):  # a ratio beyond float64: infinite
            z = gap / sd / sigma  # the differences' means in standard deviations
        # The rule errs on a difference beyond _BEYOND standard deviations with
        # probability below Phi(-_BEYOND), under float64's smallest number: a
        # negative one makes the error 1, positive ones leave the union of the
        # others' (the quadrature would not see them either).
        if np.any(z < -_BEYOND):
            errors[c] = 1.0
            continue
        near = z <= _BEYOND
        if not np.any(near):
            errors[c] = 0.0
            continue
        gap, cov, sd, z = gap[near], cov[np.ix_(near, near)], sd[near], z[near]
        if gap.size == 1:
            errors[c] = special.ndtr(-z[0])
        elif np.allclose(gram, gram[0, 0] * np.eye(K), atol=_INDEPENDENT * gram[0, 0]):
            scale = np.sqrt(gram[0, 0]) * sigma
            errors[c] = _error_independent(gap, scale, np.full(gap.size, scale))
        else:
            corr = cov / np.outer(sd, sd)
            correct = stats.multivariate_normal(
                mean=np.zeros(gap.size), cov=corr, allow_singular=True
            ).cdf(z, rng=np.random.default_rng(0))
            errors[c] = 1.0 - correct
    return float(weights @ errors)


def interference(noise, n_clusters=2):
    r"""The paper's interference I(sigma), for K orthonormal clusters.

    Error of the rule :math:`\arg\max_c \langle x, \mu^\star_c \rangle` on the equal-weight mixture of
    K orthonormal centroids (:mathmd:`1`; paper, section 3.2)

    .. math::

        I(\sigma) = \mathbb{P}\big(\mathcal{N}(0, \sigma^2) \ge \tfrac{\sqrt 2}{2}\big)
        = \Phi\Big(-\frac{1}{\sqrt 2\, \sigma}\Big)

    for K = 2, and for any K the 1-D integral
    :math:`1 - \mathbb{E}_t[\Phi(t + 1 / \sigma)^{K - 1}]`, :math:`t \sim \mathcal{N}(0, 1)` (the scores are
    independent), as in :func:`bayes_error`. ``I(0.3) ~ 0.0092`` (low
    interference) and ``I(1) ~ 0.240`` (high interference).

    Parameters
    ----------
    noise : float or array-like
        sigma >= 0.
    n_clusters : int, default=2
        K >= 1.

    Returns
    -------
    error : float or ndarray

    Examples
    --------
    >>> from attention_cluster.metrics import interference
    >>> [round(float(interference(s)), 4) for s in (0.3, 1.0)]
    [0.0092, 0.2398]
    """
    sigma = check_noise(noise)
    K = check_count(n_clusters, "n_clusters")
    if K == 1:
        return np.zeros_like(sigma)[()]
    # The score differences' means in standard deviations, 1 / (sqrt(2) sigma):
    # infinite for subnormal sigma, whose error is then 0 (bayes_error's rule).
    with np.errstate(divide="ignore", over="ignore"):
        z = 1.0 / (np.sqrt(2.0) * sigma)
    if K == 2:
        return special.ndtr(-z)[()]
    # The K - 1 other scores are alike: one, K - 1 times (K of 1e9 held
    # arrays of K).
    out = [
        _error_independent(np.ones(1), s, np.full(1, s), K - 1) if margin <= _BEYOND else 0.0
        for s, margin in zip(sigma.ravel(), z.ravel())
    ]
    return np.reshape(out, sigma.shape)[()]


def information_limit(centroids, noise, n_samples, weights=None, n_draws=1_000_000, random_state=0):
    """Expected distance to the centroids of an efficient estimator, and of the class means.

    For the mixture ``X | Z = k ~ N(mu*_k, sigma^2 I)`` with centroids of a
    common norm r (the model of the EM refinement, :mathmd:`7`,
    "The information limit"): the Cramer-Rao value ``D_eff``, the expected
    :func:`centroid_distance` at ``n_samples`` points of an asymptotically
    efficient estimator of the directions (the maximum likelihood), from
    the Fisher information of the directions, r, sigma^2 and the weights,
    estimated as the mean outer product of the scores over ``n_draws``
    draws of the mixture; and ``D_floor``, that of the class means with
    the labels known, normalised (:func:`class_means_distance`), in closed
    form. ``D_eff / D_floor`` is what the labels are worth: no estimator
    that does not see them does better at large n.

    Parameters
    ----------
    centroids : array-like of shape (n_clusters, n_features)
        True centroids, all of the same norm: to a relative 1e-8, or to
        their dtype's rounding: 100 epsilon (1.2e-5) for float32
        centroids, 4 epsilon (3.9e-3) for float16 ones.
    noise : float
        sigma > 0.
    n_samples : int
        Number of points n the estimators see.
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights, all positive; uniform when None.
    n_draws : int, default=1_000_000
        Draws of the Monte Carlo mean. Each entry of the information is
        a mean over all draws, but a cluster's directions are informed by
        its own, about ``pi_k n_draws`` of them: ``D_eff``'s relative
        error is of the order of ``1 / sqrt(pi_min n_draws)``, larger for
        light clusters than the entries' ``1 / sqrt(n_draws)``. The cost is
        ``O(n_draws p^2)`` for ``p = K (d - 1) + K + 1`` parameters, and
        ``n_draws`` should be well above ``p`` and ``1 / min(weights)``.
    random_state : int, RandomState instance or None, default=0
        Draws of the Monte Carlo mean.

    Returns
    -------
    efficient : float
        ``D_eff``.
    class_means : float
        ``D_floor``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import information_limit
    >>> eff, floor = information_limit(np.eye(10)[:2], 1.0, 10**6, n_draws=200_000)
    >>> round(eff / floor, 1)
    2.1
    """
    given = centroids
    centroids = _as_2d(centroids, "centroids")
    K, d = centroids.shape
    sigma = _positive_noise(noise, "at sigma = 0 every estimator is exact")
    n = check_count(n_samples, "n_samples")
    n_draws = check_count(n_draws, "n_draws")
    pi = check_weights(weights, K)
    if np.any(pi <= 0):
        raise InvalidParameterError("weights must all be positive.")
    # D_eff and D_floor depend on the centroids and sigma through sigma / r
    # only (the directions are unit vectors; D_floor = (d - 1) sigma^2 /
    # (n pi_k r^2)): at the scale of the centroids' largest entry (a power of
    # two: exact) no norm or square below over- or underflows.
    unit = peak_unit(centroids)
    centroids, sigma = centroids / unit, sigma / unit
    norms = np.linalg.norm(centroids, axis=1)
    r = float(norms[0])
    # A norm common to the rounding of the centroids' own dtype, read before
    # the cast to float64: float32 centroids (a fit on float32 rows, say)
    # have norms some 2e-8 apart, float16 ones some 2e-4. At most a few of
    # float16's epsilon: the directions are taken as C / r, and 100 of them
    # (0.098) would take norms 9.8% apart for one.
    dtype = np.asarray(given).dtype
    rounding = float(np.finfo(dtype).eps) if dtype.kind == "f" else 0.0
    rtol = max(_COMMON_NORM, min(100.0 * rounding, _COARSEST_NORM))
    if not r > 0 or not np.allclose(norms, r, rtol=rtol, atol=0.0):
        with np.errstate(over="ignore"):  # norms beyond float64's range: infinite
            low, high = np.min(norms) * unit, np.max(norms) * unit
        raise ValueError(
            "centroids must be non-zero and of a common norm (the model's r): their norms "
            f"range from {low:.10g} to {high:.10g}, further apart than the relative "
            f"tolerance {rtol:.1e} for {dtype} centroids."
        )
    mu = centroids / r
    # Coinciding centroids (equal directions, up to rounding) make the
    # information singular whatever n_draws: said before the draws.
    directions = centroids / norms[:, None]  # each its own norm: float32 norms differ
    overlaps = np.triu(directions @ directions.T, 1)
    if np.any(overlaps >= 1.0 - 1e-12):
        i, j = np.argwhere(overlaps >= 1.0 - 1e-12)[0]
        raise ValueError(
            f"centroids {i} and {j} coincide: the mixture cannot tell them apart, and its "
            "Fisher information is singular."
        )
    # The scores hold squared residuals over tau^4 at the centroids' scale:
    # sigma / r beyond 2^+-200 leaves float64's range there (they raised a
    # ZeroDivisionError or LinAlgError).
    if not 2.0**-200 <= sigma / r <= 2.0**200:
        raise ValueError(
            f"noise / norm of the centroids = {sigma / r:.3g} is beyond what the information's "
            "Monte Carlo scores hold in float64 (2^-200 to 2^200): at such a ratio the clusters "
            "are either apart beyond any overlap (D_eff = D_floor) or beyond telling apart."
        )
    tau2 = sigma * sigma
    # E_k: orthonormal basis of mu_k's complement (the last d - 1 left
    # singular vectors of the column mu_k).
    bases = [np.linalg.svd(mu[k][:, None])[0][:, 1:] for k in range(K)]
    n_params = K * (d - 1) + 2 + (K - 1)
    if n_draws < n_params:
        raise InvalidParameterError(
            f"n_draws={n_draws} is below the p={n_params} parameters: the information's "
            "estimate would be singular. Draw well above p."
        )
    information = np.zeros((n_params, n_params))
    rng = check_seed(random_state)
    step = max(1, 2**22 // (K * d + n_params))
    for lo in range(0, n_draws, step):
        m = min(step, n_draws - lo)
        z = rng.choice(K, size=m, p=pi)
        X = centroids[z] + sigma * rng.standard_normal((m, d))
        resid = X[:, None, :] - r * mu[None]  # m x K x d
        sq = np.einsum("ikj,ikj->ik", resid, resid)
        gamma = special.softmax(np.log(pi)[None] - sq / (2 * tau2), axis=1)
        scores = [gamma[:, [k]] * (r / tau2) * (resid[:, k] @ bases[k]) for k in range(K)]
        scores.append(np.sum(gamma * np.einsum("ikj,kj->ik", resid, mu), axis=1)[:, None] / tau2)
        scores.append(np.sum(gamma * (sq / (2 * tau2 * tau2) - d / (2 * tau2)), axis=1)[:, None])
        scores.append(gamma[:, 1:] - pi[None, 1:])
        S = np.hstack(scores)
        information += S.T @ S
    information /= n_draws
    spectrum = np.linalg.eigvalsh(information)
    if not spectrum[0] > n_params * np.finfo(np.float64).eps * spectrum[-1]:
        # A light cluster's directions are informed by its own draws, about
        # pi_min n_draws of them (see n_draws above).
        raise ValueError(
            "The Fisher information is singular: the directions cannot be estimated "
            f"(centroids that nearly coincide), or n_draws={n_draws} is too small for the "
            f"p={n_params} parameters or for the lightest cluster, of weight {pi.min():.3g} "
            f"(about {n_draws * pi.min():.3g} of the draws): draw well over "
            f"1 / min(weights) = {1.0 / pi.min():.3g}."
        )
    covariance = np.linalg.inv(information)
    directions = K * (d - 1)
    efficient = float(np.trace(covariance[:directions, :directions])) / n
    class_means = float(np.sum((d - 1) * tau2 / (n * pi * r * r)))
    return efficient, class_means


def spectral_visibility(centroids, noise, n_samples, weights=None):
    """How far above the noise the second moment of ``n_samples`` rows shows each direction.

    For the mixture ``X | Z = k ~ N(c_k, sigma^2 I_d)`` the second moment is
    ``sum_k pi_k c_k c_k^T + sigma^2 I``: a signal matrix of rank at most K
    over isotropic noise. In the sample second moment of n rows an
    eigenvalue ``ell sigma^2`` of the signal (``ell`` its ratio to the
    noise variance) separates from the noise's bulk, which ends at ``sigma^2
    (1 + sqrt(d / n))^2``, only when ``ell > sqrt(d / n)``; below that its
    eigenvalue sits at the bulk's edge and its eigenvector carries no trace
    of the direction (:mathmd:`7`, "When the spectrum shows the clusters";
    Baik, Ben Arous and Peche, Ann. Probab. 2005). Every method that starts
    from the spectrum, the default fit's included, then starts blind.

    Parameters
    ----------
    centroids : array-like of shape (n_clusters, n_features)
        The centroids ``c_k`` (any norms and angles).
    noise : float
        sigma > 0.
    n_samples : int
        Number of rows n.
    weights : array-like of shape (n_clusters,), default=None
        Mixture weights; uniform when None.

    Returns
    -------
    ndarray of shape (min(n_clusters, n_features),)
        The signal's largest eigenvalues over ``sigma^2 sqrt(d / n)``,
        descending: above 1 the direction shows in the sample spectrum
        (infinite where that ratio is beyond float64's range).
        For orthogonal centroids, ``pi_k ||c_k||^2 / (sigma^2 sqrt(d /
        n))``.

    Examples
    --------
    >>> import numpy as np
    >>> from attention_cluster.metrics import spectral_visibility
    >>> # 20 orthogonal unit centroids in d = 1536 at sigma = 0.45: all rows
    >>> # of 50000 show them, the 8192 of a subsample do not.
    >>> C = np.eye(1536)[:20]
    >>> float(spectral_visibility(C, 0.45, 50000)[-1].round(2))
    1.41
    >>> float(spectral_visibility(C, 0.45, 8192)[-1].round(2))
    0.57
    """
    centroids = _as_2d(centroids, "centroids")
    K, d = centroids.shape
    sigma = _positive_noise(noise, "without noise every direction shows")
    n = check_count(n_samples, "n_samples")
    pi = check_weights(weights, K)
    # The signal's non-zero eigenvalues are those of the K x K matrix
    # sqrt(pi) C C^T sqrt(pi) (same non-zero spectrum as C^T diag(pi) C),
    # computed at the scale of the centroids' largest entry (a power of two:
    # exact) so that no product overflows or underflows; the scale comes
    # back in (unit / sigma)^2.
    unit = peak_unit(centroids)
    root = np.sqrt(pi)[:, None] * (centroids / unit)
    signal = np.clip(np.linalg.eigvalsh(root @ root.T)[::-1][: min(K, d)], 0.0, None)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float64's range: infinite
        ratio = unit / sigma
        visibility = signal / np.sqrt(d / n) * ratio * ratio
    return np.where(signal > 0, visibility, 0.0)
