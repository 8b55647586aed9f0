"""The fitted mixture: one object whose methods give every prediction of the estimator.

The EM refinement fits the mixture of :mathmd:`7` to the rows
``y = (x - m) / s`` (m the mean the fit subtracted, zero when it did not
centre; s the overall scale):

    y | Z = k ~ N(r_k mu_k, tau^2 I),   P(Z = k) = pi_k.

Every formula below is written in ``y``, never in the data's units, so that
no square of an entry of X is formed: the same labels, posteriors and
likelihoods (shifted by ``-d log s``) for X and ``c X`` at any finite
magnitude, and no cancellation in ``||x||^2 - 2 <x, m_k> + ||m_k||^2`` for
rows far from the origin and close to each other. From the two per-row terms
``P_ik = <y_i, mu_k>`` and ``q_i = ||y_i||^2``
(:func:`attention_cluster._passes.unit_terms`, one product with the K heads):

- logits ``a_ik = log pi_k + (r_k P_ik - r_k^2 / 2) / tau^2``, the posterior
  ``softmax_k(a_ik)`` and the label ``argmax_k a_ik`` (:mathmd:`7`);
- ``log p(x_i) = logsumexp_k(a_ik) - q_i / (2 tau^2) - (d / 2) log(2 pi
  tau^2) - d log s``, the density of x in the data's units.
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp, softmax

from ._validation import as_numbers

__all__ = ["SphericalMixture", "MIN_VARIANCE"]

# Smallest variance tau^2, relative to the mean squared norm per feature of the
# rows y: a mixture fitted to equal rows (all zero once centred) has no spread,
# and its density stays finite at this floor. The EM refinement floors its
# iterates at the same value (attention_cluster._mixture).
MIN_VARIANCE = 1e-12

# Tolerance of the unit norms of the centers and of the weights' sum.
_RTOL = 1e-6


@dataclass(frozen=True, eq=False)
class SphericalMixture:
    """A spherical Gaussian mixture in the unit coordinates ``y = (x - offset) / scale``.

    The fitted model of :class:`~attention_cluster.AttentionClustering` (its ``mixture_``),
    from which every prediction of the estimator is computed.

    Parameters
    ----------
    centers : ndarray of shape (n_clusters, n_features)
        Unit directions mu_k (rows).
    radii : ndarray of shape (n_clusters,)
        Norms r_k of the centroids ``r_k mu_k`` (all equal unless each
        centroid has its own norm).
    variance : float
        tau^2 > 0, the variance of each coordinate of y.
    log_weights : ndarray of shape (n_clusters,)
        log pi_k (-inf for an empty component).
    offset : ndarray of shape (n_features,)
        m, the mean subtracted from the rows (zeros when none was).
    scale : float
        s > 0.

    Raises
    ------
    ValueError
        If a parameter is not real numbers or the shapes disagree, a
        parameter is not finite (but a log weight of -inf), a radius is
        negative, ``variance`` or
        ``scale`` is not positive, no component has a positive weight, the
        weights do not sum to one or the centers are not unit vectors (to
        1e-6: the formulas assume both).

    Notes
    -----
    The arrays are read-only float64 copies of those given: changing the
    caller's arrays later does not change the mixture, nor can its own be
    changed past the checks. Two mixtures compare equal only when they are
    the same object (its parameters are arrays); it hashes by identity.
    """

    centers: np.ndarray
    radii: np.ndarray
    variance: float
    log_weights: np.ndarray
    offset: np.ndarray
    scale: float

    def __post_init__(self):
        # Real float64 arrays, read-only copies of the caller's, so that the
        # checks below hold for the mixture's life (a frozen dataclass: set
        # through object.__setattr__). as_numbers refuses complex numbers and
        # ragged lists alike.
        for name in ("centers", "radii", "log_weights", "offset", "variance", "scale"):
            given = getattr(self, name)
            value = as_numbers(given)
            if value is None:
                raise ValueError(f"{name} must be real numbers, got {given!r}.")
            if value.ndim == 0:
                value = float(value)
            else:
                # Over immutable bytes: NumPy refuses setflags(write=True) on
                # such an array (a copy made read-only could be made writeable
                # again, and the mixture changed past its checks).
                value = np.frombuffer(value.tobytes(), dtype=value.dtype).reshape(value.shape)
            object.__setattr__(self, name, value)
        centers = self.centers
        # (One number is kept as a float, of shape ().)
        if np.ndim(centers) != 2 or centers.shape[0] == 0:
            raise ValueError(
                f"centers must have shape (n_clusters, n_features), got {np.shape(centers)}."
            )
        K, d = centers.shape
        for name, shape in (("radii", (K,)), ("log_weights", (K,)), ("offset", (d,))):
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(
                    f"{name} must have shape {shape}, got {np.shape(getattr(self, name))}."
                )
        # The checks read the float64 values above once each, by their
        # methods (a NumPy function call on a small array costs more than
        # the check): a number is a float here and an array of numbers an
        # ndarray.
        for name in ("centers", "radii", "offset", "variance", "scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) if isinstance(value, float) else np.isfinite(value).all()):
                raise ValueError(f"{name} must be finite.")
        if (self.radii < 0.0).any():
            raise ValueError(f"radii must be >= 0 (the centroids' norms), got {self.radii}.")
        for name in ("variance", "scale"):
            if not isinstance(getattr(self, name), float) or not getattr(self, name) > 0:
                raise ValueError(
                    f"{name} must be one positive number, got {getattr(self, name)!r}."
                )
        # No NaN, no +inf and one finite at least: the largest is finite (a
        # NaN is the largest of NumPy's max).
        top = float(self.log_weights.max())
        if not math.isfinite(top):
            raise ValueError(
                "log_weights must be finite or -inf (an empty component), with one finite at least."
            )
        total = float(np.exp(self.log_weights - top).sum())
        if not abs(top + np.log(total)) <= _RTOL:
            raise ValueError(
                f"the weights exp(log_weights) must sum to one, got {total * np.exp(top)!r}."
            )
        norms = np.sqrt(np.einsum("ij,ij->i", centers, centers))
        if not np.abs(norms - 1.0).max() <= _RTOL:
            raise ValueError(f"centers must be unit vectors (rows), got norms {norms}.")

    @classmethod
    def from_heads(cls, heads, radii, variance, log_weights, mean_sq, offset, scale):
        """The mixture of the EM's parameters: heads as columns (d x K), tau^2 floored.

        The one variance floor: ``MIN_VARIANCE`` times the rows' mean squared
        norm per feature ``mean_sq / d`` at unit scale (times 1 for all-zero
        rows, whose scale is 1).

        Raises
        ------
        ValueError
            If ``heads`` is not a matrix of real numbers with one column at
            least, or a parameter fails the constructor's checks.
        """
        given = heads
        heads = as_numbers(given)
        if heads is None:
            raise ValueError(f"heads must be real numbers, got {type(given).__name__}.")
        if heads.ndim != 2 or heads.shape[1] == 0:
            raise ValueError(f"heads must have shape (n_features, n_clusters), got {heads.shape}.")
        d = heads.shape[0]
        return cls(
            centers=heads.T,
            radii=radii,
            variance=max(float(variance), MIN_VARIANCE * (mean_sq / d if mean_sq > 0.0 else 1.0)),
            log_weights=log_weights,
            offset=offset,
            scale=scale,
        )

    # -- the parameters in the data's units ---------------------------------

    def __reduce__(self):
        # Through the constructor: a pickled or deep-copied mixture is
        # checked again and its arrays are read-only again (the default
        # would restore them writeable, past the checks).
        return (
            type(self),
            (self.centers, self.radii, self.variance, self.log_weights, self.offset, self.scale),
        )

    @property
    def means(self):
        """``m + s r_k mu_k`` (n_clusters, n_features); infinite where it overflows."""
        with np.errstate(over="ignore", invalid="ignore"):
            means = self.offset + (self.scale * self.radii)[:, None] * self.centers
            lost = ~np.isfinite(means)
            if lost.any():
                # s r_k beyond float64 times a zero coordinate gave NaN:
                # s (r_k mu_k) is infinite only where the mean is.
                means[lost] = (self.offset + self.scale * (self.radii[:, None] * self.centers))[
                    lost
                ]
        return means

    @property
    def covariances(self):
        """``(s tau)^2`` for each component (spherical); infinite where it overflows."""
        with np.errstate(over="ignore"):
            # s (s tau^2): s^2 alone may overflow where the product does not.
            return np.full(len(self.radii), self.scale * (self.scale * self.variance))

    @property
    def concentration(self):
        """``r_k / (tau^2 s)``: the gain of ``<x - m, mu_k>`` in the logits; infinite where it overflows."""
        with np.errstate(over="ignore"):
            return self.radii / self.variance / self.scale

    # -- per-row quantities from the unit terms (P, q) -----------------------

    def logits(self, P):
        """``a_ik = log pi_k + (r_k P_ik - r_k^2 / 2) / tau^2`` (:mathmd:`7`).

        Parameters
        ----------
        P : ndarray of shape (n_samples, n_clusters)
            ``P_ik = <y_i, mu_k>``, the rows' projections on the unit heads at
            unit coordinates (:func:`attention_cluster._passes.unit_terms`).
        """
        P = self._checked_projections(P)
        r, v = self.radii, self.variance
        # A logit beyond float64 is infinite, of its sign (a row far behind
        # a head: -inf there, its posterior 0; rows whose largest logit is
        # infinite are far rows, given the posterior's limit by the estimator).
        with np.errstate(over="ignore"):
            return self.log_weights + (P * r - 0.5 * r * r) / v

    def _checked_projections(self, P):
        """``P`` as an array of shape (n_samples, n_clusters), else ValueError:
        a column per component, which broadcasting would otherwise stretch
        (one column read as every component's)."""
        P = np.asarray(P)
        K = len(self.radii)
        if P.ndim != 2 or P.shape[1] != K:
            raise ValueError(
                f"P must have shape (n_samples, n_clusters) with n_clusters={K}, the rows' "
                f"projections on the heads; got shape {P.shape}."
            )
        return P

    def labels(self, P):
        """``argmax_k a_ik``: the posterior mode (ties to the first component).

        Parameters
        ----------
        P : ndarray of shape (n_samples, n_clusters)
            ``P_ik = <y_i, mu_k>``, the rows' projections on the unit heads at
            unit coordinates (:func:`attention_cluster._passes.unit_terms`).
        """
        return np.argmax(self.logits(P), axis=1)

    def posteriors(self, P):
        """``softmax_k(a_ik)``; each row whose logits are finite sums to one.

        Rows beyond float64's range at unit scale have infinite logits; the
        estimator's :meth:`~attention_cluster.AttentionClustering.predict_proba`
        gives them the posterior's limit from the rows themselves.

        Parameters
        ----------
        P : ndarray of shape (n_samples, n_clusters)
            ``P_ik = <y_i, mu_k>``, the rows' projections on the unit heads at
            unit coordinates (:func:`attention_cluster._passes.unit_terms`).
        """
        return softmax(self.logits(P), axis=1)

    def log_likelihoods(self, P, q):
        """``log p(x_i)`` in the data's units (see the module docstring).

        Parameters
        ----------
        P : ndarray of shape (n_samples, n_clusters)
            ``P_ik = <y_i, mu_k>`` (see :meth:`logits`).
        q : ndarray of shape (n_samples,)
            ``q_i = ||y_i||^2``, the rows' squared norms at unit coordinates.
        """
        logits = self.logits(P)  # (P's shape checked there)
        q = np.asarray(q)
        if q.shape != logits.shape[:1]:
            raise ValueError(
                f"q must have shape (n_samples,) = ({logits.shape[0]},), one squared norm per "
                f"row of P; got shape {q.shape}."
            )
        d = self.centers.shape[1]
        v = self.variance
        # A row whose q / (2 v) passes float64 (far from a tight mixture,
        # its logits finite) has the log-likelihood -inf: its density is
        # below any float.
        with np.errstate(over="ignore"):
            distance = q / (2.0 * v)
        return (
            logsumexp(logits, axis=1)
            - distance
            - 0.5 * d * np.log(2.0 * np.pi * v)
            - d * np.log(self.scale)
        )

    def n_parameters(self, free_norms, centred):
        """Free parameters: the K means' degrees of freedom, tau and K - 1
        weights (:mathmd:`7`, "Likelihood tools"). The means ``r mu_k`` take
        K (d - 1) directions and one norm, K d with free norms (any K
        points); about the rows' mean m, ``m + r mu_k`` takes any K points
        when K <= d + 1 (K points lie on a sphere about some centre), K d,
        and K (d - 1) + 1 + d beyond (the d of m adding d - K + 1 where they
        would not: one Gaussian centred counted 2 d + 1 parameters for the
        same density as uncentred, d + 1).

        Parameters
        ----------
        free_norms : bool
            Whether each centroid has its own norm (``centroid_norms_ == "free"``).
        centred : bool
            Whether the fit subtracted the rows' mean (``center_``).
        """
        K, d = self.centers.shape
        if free_norms or (centred and K <= d + 1):
            means = K * d
        else:
            means = K * (d - 1) + 1 + (d if centred else 0)
        return means + 1 + (K - 1)
