"""Maximum-likelihood refinement of the heads: EM for the paper's mixture.

The heads that minimise the attention risk span the principal subspace of the
second moment, which at high noise estimates the centroids' span less
efficiently than the mixture's likelihood does (``math.md`` section 7).
Started at the heads, expectation-maximisation for the data model of
``math.md`` section 7 (K centroids of equal norm, isotropic noise) moves them
to the maximum-likelihood centroids. Its E step is a softmax attention of
each point over the heads; its M step normalises the attention-weighted sums.
Plain EM crawls along the mixture weights when the clusters overlap, so the
iterations are accelerated by SQUAREM (Varadhan and Roland, Scand. J. Stat.
2008), which keeps EM's monotone likelihood; on large data, after a
subsample stage, by Newton's steps with the subsample's Jacobian of the EM
map (:func:`_newton_em`), kept only when the likelihood does not decrease.
"""

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import pdist, squareform
from scipy.special import logsumexp, ndtri
from scipy.stats import binom, chi2
from sklearn.utils import check_random_state

from ._model import MIN_VARIANCE


@dataclass(frozen=True)
class MixtureFit:
    """Result of :func:`refine_heads` (parameters of the data divided by s)."""

    heads: np.ndarray  #: d x K unit heads mu_k
    weights: np.ndarray  #: mixture weights pi, shape (K,)
    radii: np.ndarray  #: centroid norms r_k, shape (K,): all equal unless ``free``
    variance: float  #: noise variance tau^2
    free: bool  #: whether each centroid has its own norm (``math.md`` section 7)
    log_likelihood: np.ndarray  #: mean log-likelihood of each accepted iterate
    n_iter: int  #: E steps (passes over the data)
    converged: bool


@dataclass(frozen=True)
class _Params:
    U: np.ndarray  # d x K unit heads
    radii: np.ndarray  # K centroid norms; all equal unless free
    variance: float
    log_pi: np.ndarray  # K
    free: bool = False  # one norm per centroid (math.md section 7, "One norm per centroid")

    def vector(self):
        """The parameter vector (heads, r, log tau^2, log pi), with r the K norms
        when they are free and the common norm otherwise."""
        radii = self.radii if self.free else self.radii[:1]
        return np.concatenate([self.U.ravel(), radii, [np.log(self.variance)], self.log_pi])

    def from_vector(self, v, floor):
        """Parameters of this model from an extrapolated vector (see :meth:`vector`), or None."""
        # Called for each E step of Newton's and SQUAREM's steps: array
        # methods and a few operations, not NumPy's general functions.
        d, K = self.U.shape
        m = K if self.free else 1
        if not np.isfinite(v).all():
            return None
        U = v[: d * K].reshape(d, K)
        norms = np.sqrt((U * U).sum(axis=0))
        radii = v[d * K : d * K + K].copy() if self.free else np.full(K, v[d * K])
        # A zero norm is a centroid at the mean; a negative one is off the model.
        if not (norms.min() > 0.0 and radii.min() >= 0.0):
            return None
        tail = v[d * K + m + 1 :]
        top = tail.max()
        log_pi = tail - (top + math.log(np.exp(tail - top).sum()))
        variance = max(float(np.exp(v[d * K + m])), floor)
        return _Params(U / norms, radii, variance, log_pi, self.free)

    def attention(self):
        """The E step's softmax ``softmax_k(b_k + beta <key_k, x>)`` at these parameters.

        Returns ``(keys, b, beta, r0)``: the posterior ``softmax_k(log pi_k
        + (r_k <mu_k, x> - r_k^2 / 2) / tau^2)`` (``math.md`` section 7) is
        written with ``r0 = max_k r_k``, ``beta = r0 / tau^2``, ``key_k =
        (r_k / r0) mu_k`` and ``b_k = log pi_k - (r_k^2 - r0^2) / (2
        tau^2)``; with a common norm the keys are the heads and ``b = log
        pi``, and the mean log-likelihood is :func:`mixture_log_likelihood`
        with ``radius = r0``.
        """
        r0 = float(np.max(self.radii))
        if not r0 > 0.0:
            return self.U, self.log_pi, 0.0, 0.0
        keys = self.U * (self.radii / r0)
        # (r0 * r0, not r0**2: a float's power raises OverflowError where
        # the product is inf, which the caller's range check reads.)
        bias = self.log_pi - (self.radii * self.radii - r0 * r0) / (2.0 * self.variance)
        return keys, bias, r0 / self.variance, r0


def mixture_log_likelihood(partial, mean_sq, radius, variance, d):
    """Mean log-likelihood from the E step's ``partial`` (``math.md`` section 7).

    ``l = partial - (m2 + r^2) / (2 tau^2) - (d / 2) log(2 pi tau^2)`` with
    ``partial = mean_i logsumexp_k(b_k + (r / tau^2) <key_k, x_i>)``, the
    E step of :meth:`_Params.attention` at ``radius = r0`` (``b = log pi``
    and the keys the heads when the norms are equal).
    """
    return (
        partial
        - (mean_sq + radius * radius) / (2.0 * variance)
        - 0.5 * d * np.log(2.0 * np.pi * variance)
    )


class _EM:
    """The E and M steps on one data set (``math.md`` section 7)."""

    def __init__(self, data, mean_sq):
        self.data = data
        self.total = data.total_weight
        self.mean_sq = mean_sq
        self.d = data.n_features
        w = data.sample_weight
        # Weights are relative to a power of two near the largest (rows_from):
        # their squares stay in float64's range.
        self.n_effective = (
            data.n_samples if w is None else _effective_rows(self.total, float(np.sum(w * w)))
        )
        self.floor = MIN_VARIANCE * mean_sq / self.d
        self.eps = _rounding_unit(data)
        self.passes = 0

    def expect(self, p):
        """E step at ``p``: (S, counts, mean log-likelihood of p), also kept as ``last``."""
        keys, bias, beta, r0 = p.attention()
        S, counts, partial = self.data.e_step(keys, bias, beta)
        self.passes += 1
        ll = mixture_log_likelihood(partial / self.total, self.mean_sq, r0, p.variance, self.d)
        self.last = (p, S, counts)
        return S, counts, ll

    def maximize(self, S, counts, previous):
        """M step from the E step's sums over the data (see :func:`_maximize`)."""
        return _maximize(S, counts, self.total, self.mean_sq, self.floor, previous, self.eps)


def _row_norms(S):
    """``||S_k||`` of each row; a row whose squares underflow (a component of
    weight near e^-370: its head came out 0.1% off the sphere) is divided by
    its largest entry first."""
    with np.errstate(under="ignore"):
        norms = np.sqrt((S * S).sum(axis=1))
    small = ~(norms > 1e-150)
    if small.any():
        peaks = np.max(np.abs(S[small]), axis=1, initial=0.0)
        scaled = S[small] / np.where(peaks > 0.0, peaks, 1.0)[:, None]
        norms[small] = peaks * np.sqrt((scaled * scaled).sum(axis=1))
    return norms


def _rounding_unit(data):
    """The machine epsilon of the rows' dtype (float32 rows are centred and
    summed in float32): the unit of :func:`_sum_rounding`."""
    return float(np.finfo(data.dtype).eps)


def _sum_rounding(eps, weight, mean_sq):
    """The rounding of a weighted sum of rows of weight ``weight``, about
    ``_SUM_ROUNDING eps weight sqrt(m2)``, ``m2`` the rows' mean squared norm.

    A sum ``S = sum_i w_i y_i`` of rows ``y_i`` computed to a relative
    ``eps`` errs by about ``eps sum_i w_i ||y_i||`` times the growth of its
    chunked sums (Higham, *Accuracy and Stability of Numerical Algorithms*,
    2002, section 4.2), and ``sum_i w_i ||y_i|| <= weight sqrt(m2)`` when
    the rows' squared norms average m2 (Cauchy-Schwarz). Rows centred at
    their mean add the rounding of the mean subtracted, about ``eps ||m||``
    per row, which the sums' users do not see. Measured on K = 1 fits of
    centred rows (dense float64 and float32, CSR, either row order, 50 to
    20000 rows, means up to 1e5 sqrt(m2) from the origin), the sum of all
    rows, zero but for rounding, stayed below ``26 eps W (sqrt(m2) +
    ||m||)``: ``_SUM_ROUNDING`` covers a mean up to about 40 sqrt(m2) from
    the origin.
    """
    return _SUM_ROUNDING * eps * weight * math.sqrt(mean_sq)


# Units of eps W sqrt(m2) of _sum_rounding. A sum within it is a centroid
# (S_k / N_k) within 2.3e-13 sqrt(m2) of the origin in float64, 1.2e-4 in
# float32, where a cluster of fewer than about 7e7 tau^2 / m2 rows has a
# standard error tau / sqrt(N_k) above that distance: no fit resolves such a
# centroid from the origin.
_SUM_ROUNDING = 2.0**10


def head_signs(rows, U, mean_sq):
    """-1 or 1 per head of ``U`` (d x K): each turned towards the points it
    wins (``math.md`` section 5), by the sign of :meth:`~attention_cluster._passes.DenseRows.head_totals`.

    A total within its rounding (:func:`_sum_rounding`, at ``mean_sq``, the
    mean squared norm of ``rows`` at their scale; the totals are of the
    rows as given, times the scale s) has no sign: the head is kept as it
    is (K = 1 on centred rows, whose total is the rounding of their mean,
    which differs between float32, CSR and reversed rows).
    """
    rounding = _sum_rounding(_rounding_unit(rows), rows.total_weight, mean_sq) * rows.scale
    return np.where(rows.head_totals(U) < -rounding, -1.0, 1.0)


def _maximize(S, counts, total, mean_sq, floor, previous, eps=0.0):
    """M step: ``mu_k = S_k / ||S_k||``, ``pi_k = counts_k / N`` and, with a
    common norm, ``r = sum_k ||S_k|| / N``, ``tau^2 = (m2 - r^2) / d``; with
    one norm per centroid (``previous.free``), ``r_k = ||S_k|| / N_k``,
    ``tau^2 = (m2 - sum_k ||S_k||^2 / (N_k N)) / d`` (``math.md`` section
    7), from sums ``S``, ``counts`` over a total weight ``N``. A head whose
    sum is within its rounding, :func:`_sum_rounding` of ``counts_k`` with
    ``eps`` the rows' :func:`_rounding_unit` (a stream's: the largest of its
    batches'; 0: only a sum of zero), has no direction: it keeps the one in
    ``previous`` and its sum counts as zero (K = 1 on centred rows, whose
    sum is the rounding of their mean: its direction came from that
    rounding, and differed between float32, CSR and reversed rows); with free norms its norm is ``||S_k|| /
    N_k = 0`` when points take it (its centroid is the mean) and the
    previous one when none does; ``tau^2`` is at least ``floor``."""
    norms = _row_norms(S)
    alive = norms > _sum_rounding(eps, counts, mean_sq)
    norms = np.where(alive, norms, 0.0)
    if alive.all():
        U = np.ascontiguousarray((S / norms[:, None]).T)
    else:
        U = previous.U.copy()
        U[:, alive] = (S[alive] / norms[alive, None]).T
    # Sums in the subnormal range hold a few bits: their directions are
    # made unit again (a head 0.4% off the sphere otherwise).
    faint = alive & ~(norms > 1e-290)
    if faint.any():
        U[:, faint] /= np.sqrt(np.einsum("ij,ij->j", U[:, faint], U[:, faint]))
    if previous.free:
        taken = counts > 0.0
        radii = previous.radii.copy()
        radii[taken] = norms[taken] / counts[taken]
        explained = float(np.sum(norms[taken] ** 2 / counts[taken])) / total
    else:
        radius = float(np.sum(norms)) / total
        radii = np.full(S.shape[0], radius)
        explained = radius**2
    variance = max((mean_sq - explained) / S.shape[1], floor)
    if counts.min() > 0.0:
        log_pi = np.log(counts / total)
    else:
        with np.errstate(divide="ignore"):
            log_pi = np.log(counts / total)
    return _Params(U, radii, variance, log_pi, previous.free)


def free_norm_gain(S, counts, variance):
    """Nats of total log-likelihood that one norm per centroid gains, at least, in one EM step.

    From the E step's sums at the equal-norm fit, the M step with free
    norms raises the expected complete log-likelihood above the equal-norm
    M step's by ``(sum_k ||S_k||^2 / N_k - (sum_k ||S_k||)^2 / N) / (2
    tau^2)`` at the same ``tau^2`` (``math.md`` section 7, "One norm per
    centroid"); EM's likelihood gains at least that much.
    """
    norms = np.linalg.norm(S, axis=1)
    alive = norms > 0.0
    spread = float(np.sum(norms[alive] ** 2 / counts[alive])) - float(np.sum(norms)) ** 2 / float(
        np.sum(counts)
    )
    return max(spread, 0.0) / (2.0 * variance)


def parted(p, n_effective):
    """``p`` (free norms) with each group of coinciding centres spread along its direction.

    The equal-norm model has one centre per direction, so its fit may put two
    or more components at one centre, ``r mu`` (raw wine: three components,
    two on the proline feature's negative side). With free norms such a
    group is a fixed point of EM that EM does not leave: every row's
    posterior splits among the group in one ratio, so the M step gives them
    one centre again, although the likelihood rises where they part
    (``math.md`` section 7, "Coinciding centres"). Two centres coincide
    when their squared distance is below ``d tau^2 (1 / N_j + 1 / N_k)``,
    ``N_k = pi_k n_effective`` (the expected squared distance between two
    estimates of one centre from their rows: the rows do not tell them
    apart), and below ``tau^2`` (few rows in many dimensions would
    otherwise take distinct centres for one). Coinciding centres
    (transitively) form a group; its ``m`` members keep their directions
    and take the norms ``r + tau z_i``, ``r`` their mean norm and ``z_i``
    the means of the ``m`` equal-mass slices of a standard normal (``+-sqrt(2
    / pi)`` for a pair: the halves' means of a Gaussian of variance
    ``tau^2`` along the direction), at least 0. Other components are
    unchanged.
    """
    centres = (p.U * p.radii).T
    K = centres.shape[0]
    if K < 2:
        return p
    with np.errstate(divide="ignore"):
        inverse_rows = 1.0 / (np.exp(p.log_pi) * n_effective)
    resolution = p.variance * np.minimum(
        centres.shape[1] * (inverse_rows[:, None] + inverse_rows[None, :]), 1.0
    )
    near = squareform(pdist(centres, "sqeuclidean")) < resolution
    n_groups, group = connected_components(near, directed=False)
    if n_groups == K:
        return p
    radii, tau = p.radii.copy(), math.sqrt(p.variance)
    for g in range(n_groups):
        members = np.flatnonzero(group == g)
        m = members.size
        if m < 2:
            continue
        # Slice i of N(0, 1) between the quantiles i/m and (i+1)/m has mean
        # m (phi(q_i) - phi(q_{i+1})).
        edges = ndtri(np.arange(m + 1) / m)
        density = np.exp(-0.5 * edges * edges) / math.sqrt(2.0 * math.pi)
        slice_means = m * (density[:-1] - density[1:])
        radii[members] = np.maximum(np.mean(p.radii[members]) + tau * slice_means, 0.0)
    return replace(p, radii=radii)


def standard_error(p, n_effective):
    """Squared standard error of the heads at ``p`` (``math.md`` section 7).

    A head estimated from the ``n pi_k`` points of its cluster has, in each
    of the ``d - 1`` directions tangent to the sphere, the variance
    ``tau^2 / (n pi_k r^2)`` of a mean of noise of variance ``tau^2`` seen
    at radius r, so that ``sum_k E||mu_k - mu_k*||^2 = (d - 1) tau^2 / (n
    r^2) sum_k 1 / pi_k`` (clusters that overlap lose information, so this
    is a lower bound, and a stopping rule based on it is conservative).
    """
    d = p.U.shape[0]
    pi = np.exp(p.log_pi)
    alive = pi > 0
    if not np.any(alive) or not np.all(p.radii[alive] > 0.0):
        return 0.0
    # A head of weight or radius near zero (a cluster of almost no points, or
    # none seen from the origin) has an infinite standard error, as it should:
    # inf, not a RuntimeWarning.
    with np.errstate(over="ignore", divide="ignore"):
        if p.free:
            # Each head at its own radius: sum_k 1 / (pi_k r_k^2).
            return (
                (d - 1)
                * p.variance
                / n_effective
                * float(np.sum(1.0 / (pi[alive] * p.radii[alive] ** 2)))
            )
        r = p.radii[0]
        return (d - 1) * p.variance / (n_effective * r**2) * float(np.sum(1.0 / pi[alive]))


def free_parameters(p):
    """Free parameters of the mixture at ``p``: ``K (d - 1)`` for the unit
    heads, one norm (or K), the variance and ``K - 1`` weights (``math.md``
    section 7)."""
    d, K = p.U.shape
    return K * (d - 1) + (K if p.free else 1) + 1 + (K - 1)


def remaining_gain(gain, rho):
    """Nats of total log-likelihood still to be gained after a plain EM step that gained ``gain``.

    EM converges linearly at rate ``rho`` on the parameters, so near the
    maximum the likelihood's gap (quadratic in the distance) falls by
    ``rho^2`` per step: a step that gains ``g`` leaves ``g rho^2 / (1 -
    rho^2)`` (``math.md`` section 7).
    """
    if not gain > 0.0:
        return 0.0
    return gain * rho**2 / (1.0 - rho**2)


def _run_em(em, p0, tol, max_iter, rho, report):
    """SQUAREM iterations on one data set; returns ``(params, converged, rho)``.

    A plain EM step from ``p0`` to ``p1`` moves the heads by ``delta``; EM
    converges linearly with some rate ``rho``, so ``p0`` is about ``delta /
    (1 - rho)`` from the fixed point. ``rho`` is also the fraction of the
    information that the labels would add (Dempster, Laird and Rubin 1977)
    along the slow direction, where the standard error is therefore the
    complete-data one (:func:`standard_error`) times ``1 / sqrt(1 - rho)``.
    The run stops, returning ``p1``, when the distance squared is below
    ``tol`` times that squared standard error, ``delta^2 / (1 - rho)^2 <=
    tol SE^2 / (1 - rho)``, i.e. ``delta^2 <= tol SE^2 (1 - rho)``
    (``math.md`` section 7): further passes would move the heads by much
    less than their statistical error. It also stops when the likelihood
    that remains to be gained, :func:`remaining_gain`, is below ``tol p / 2``
    nats, ``p`` the free parameters (:func:`free_parameters`): in the
    Fisher metric the squared distance to the maximum is twice the remaining
    gain, and the maximum's own squared error has mean ``p``, so this is the
    same ``tol`` fraction of the squared standard error, in the metric that
    accounts for the overlap of the clusters in every direction. ``rho`` is
    estimated from the two EM steps of each SQUAREM iteration (the caller's
    value, from a previous data set or a cautious 0.9, until then), and the
    rule is checked after each of the two. After a kept extrapolation those
    two steps also see the fast directions it left, and their ratio can read
    below the slow direction's rate, so that the rules can stop short of
    ``tol``. Reading the rate only on two EM steps from an EM iterate would
    hold the runs to ``tol``, at several times the passes where the
    likelihood is flat along many directions: the rate is read as it comes.

    Along a direction the data barely determine (clusters that overlap),
    EM crawls and ``rho`` near 1 makes that rule wait long for a step that
    buys nothing: the run also stops when a plain EM step gains less than
    ``g = 10 tol`` nats of total log-likelihood (``n`` times the mean; 0.01
    at the default tol). In the Fisher metric, which accounts for the
    overlap, a gain ``g`` per step at rate ``rho`` leaves the heads about
    ``sqrt(2 g rho / (1 - rho))`` standard errors from the maximum: 0.4 at
    ``g = 0.01`` and ``rho = 0.9``, which adds 4% to the heads' mean squared
    error. This is an order of magnitude, not a bound: the standard error
    is isotropic (:func:`standard_error`) where the likelihood's curvature
    is not. On 3000 rows (d = 5, K = 3, sigma = 1, random centroids, seeds 0
    to 39 of ``datasets.make_mixture``) the runs stopped 0.001 to 0.9 nats
    below the maximum but for five:
    - seed 2, 3.5 nats (2.6 standard errors in the Fisher metric), where
      the two steps after a kept extrapolation read rho = 0.08 and the slow
      direction's is about 0.85;
    - seeds 12, 25, 32 and 34, 1.5 to 4.9 nats, also with every rate
      since the last EM iterate kept at its largest: a direction slower
      than the steps read shows only after the faster ones have died out
      (seed 25 stopped after 24 passes reading 0.46, or after 26 reading
      0.96 with the largest kept; the last 4.9 nats took 174 more).
    The maximum is not nearer the true means there: in each of the five
    its summed squared distance to them was larger than the run's (0.24 to
    1.38 against 0.06 to 0.17), and over the 40 seeds it averaged 0.16
    against the runs' 0.06 (the runs nearer on 27).
    Keeping, after a kept extrapolation, the larger of the reading and the
    last one from an EM iterate stops seed 2 0.63 nats short, but runs EM to
    ``max_iter`` where the clusters do not separate: 30000 rows, d = 384,
    K = 50, sigma = 0.5 took 500 passes against 50, for the same ARI (0.003)
    and centroids no nearer. The rates are read as they come.
    """
    S0, c0, ll0 = em.expect(p0)
    report(em, ll0)
    start = em.passes - 1
    step_max = 1.0
    while em.passes - start < max_iter:
        p1, delta, settled = _em_step(em, S0, c0, p0, tol, rho)
        if settled:
            return p1, True, rho
        S1, c1, ll1 = em.expect(p1)
        p2 = em.maximize(S1, c1, p1)
        delta2 = float(np.sum((p2.U - p1.U) ** 2))
        rho = min(float(np.sqrt(delta2 / delta)), 0.99) if delta > 0 else rho
        if delta2 <= tol * standard_error(p2, em.n_effective) * (1.0 - rho):
            return p2, True, rho
        # EM does not lose likelihood: a loss is rounding. A threshold below
        # the likelihood's rounding leaves the stop to the rule on the heads
        # (near the maximum the likelihood is flat to second order, so its
        # rounding hides moves of the heads of order sqrt(eps)).
        rounding = 1e-12 * em.n_effective * (1.0 + abs(ll1))
        gain = em.n_effective * (ll1 - ll0)
        rest = tol * free_parameters(p2) / 2.0
        if rest > rounding and remaining_gain(gain, rho) <= rest:
            return p2, True, rho
        min_gain = _GAIN_PER_TOL * tol
        if min_gain > rounding and abs(gain) < min_gain:
            return p2, True, rho
        # SQUAREM's point from p0 and its two EM steps, then one EM step from
        # there; fall back to the second EM iterate if the point's likelihood
        # is below p1's. step_max starts at 1 (the point is then p2), grows 4
        # times when a step of that length is kept and shrinks 4 times when
        # it is not: where EM drifts along a direction at a near-constant
        # speed the unbounded step overshoots every time (EM then went on at
        # three passes per two steps; the crawl cells of
        # benchmarks/many_clusters.py).
        v1 = p1.vector()
        del p1, S0, S1  # (what the rest of the iteration does not read)
        candidate, length = _squarem_point(p0, v1, p2, step_max, em.floor)
        del v1
        if candidate is not None and em.passes - start < max_iter:
            Sc, cc, llc = em.expect(candidate)
            if llc >= ll1:
                if length == step_max:
                    step_max *= _STEP_GROWTH
                p0, S0, c0, ll0 = candidate, Sc, cc, llc
                report(em, ll0)
                continue
            if length == step_max:
                step_max = max(step_max / _STEP_GROWTH, 1.0)
        p0 = p2
        if em.passes - start >= max_iter:
            return p0, False, rho
        S0, c0, ll0 = em.expect(p0)
        report(em, ll0)
    # max_iter E steps, the last at p0: its M step costs no pass, and a run
    # that reaches tol there has converged (it warned of max_iter).
    p1, _, settled = _em_step(em, S0, c0, p0, tol, rho)
    return p1, settled, rho


def _squarem_point(p0, v1, p2, step_max, floor):
    """SQUAREM's point (Varadhan and Roland's SqS3; ``math.md`` section 7):
    ``(params, length)``, or ``(None, 1.0)`` where there is none.

    With ``r = v1 - v0`` and ``v = v2 - 2 v1 + v0`` in the parameter vector
    (heads, r, log tau^2, log pi) of ``p0`` and its two EM steps (``v1``,
    the first's vector, which this overwrites, and ``p2``), the point ``v0
    - 2 alpha r + alpha^2 v``, ``alpha = -length``, ``length =
    min(max(||r|| / ||v||, 1), step_max)`` (``alpha = -1`` is ``v2``); none
    where a norm is not finite (a head that no point takes has ``log pi =
    -inf``) or ``v`` is zero. In place, the same numbers: at 2^20 features
    each vector is K arrays of 8 MB, and their temporaries were five more
    (the caller holds the first step's vector, not its parameters).
    """
    v0, v2 = p0.vector(), p2.vector()
    with np.errstate(invalid="ignore"):
        r = v1 - v0
        v = np.multiply(v1, 2.0, out=v1)
        v = np.subtract(v2, v, out=v)
        v += v0
    del v1, v2
    nr, nv = np.linalg.norm(r), np.linalg.norm(v)
    if not (np.isfinite(nr) and np.isfinite(nv) and nv > 0.0):
        return None, 1.0
    length = min(max(nr / nv, 1.0), step_max)
    alpha = -length
    point = np.multiply(r, 2.0 * alpha, out=r)
    point = np.subtract(v0, point, out=point)
    point += np.multiply(v, alpha**2, out=v)
    return p0.from_vector(point, floor), length


def _em_step(em, S, counts, p, tol, rho):
    """``(p1, delta, settled)``: the M step from the E step at p, its move
    of the heads (squared), and whether that meets :func:`_run_em`'s rule
    (or no head has a norm)."""
    p1 = em.maximize(S, counts, p)
    delta = float(np.sum((p1.U - p.U) ** 2))
    settled = delta <= tol * standard_error(p1, em.n_effective) * (1.0 - rho)
    return p1, delta, settled or not np.max(p1.radii) > 0.0


def _em_map(em, like, v):
    """The EM map on parameter vectors (:meth:`_Params.vector`) of the model of
    ``like``: one E step and the M step."""
    p = like.from_vector(v, em.floor)
    S, counts, _ = em.expect(p)
    return em.maximize(S, counts, p).vector()


def gmres(product, b, rtol, max_steps):
    """``(x, reached)``: GMRES for ``A x = b`` from ``x = 0``, ``product(y) = A y``.

    At most ``max_steps`` Arnoldi steps (one cycle, no restart; Saad and
    Schultz, SIAM J. Sci. Stat. Comput. 7, 1986): x minimises ``||A x -
    b||`` over the Krylov space of ``b``, and the steps stop once that
    residual is at most ``rtol ||b||`` (``reached``) or the space is
    invariant; a product that is not finite gives NaN. Each new basis
    vector is orthogonalised twice (classical Gram-Schmidt by matrix
    products, repeated: orthogonal to rounding), and Givens rotations keep
    the small least-squares problem triangular, its residual at hand. The systems of
    Newton's steps are small (the mixture's parameters) and solved many
    times per fit, so the solver is this loop, without a general solver's
    operator wrapping and restart bookkeeping.
    """
    size = float(np.linalg.norm(b))
    if size == 0.0:
        return np.zeros_like(b), True
    m = min(max_steps, b.size)
    V = np.empty((m + 1, b.size))
    V[0] = b / size
    # H's columns, made upper triangular by the Givens rotations (cos, sin)
    # as they come; g: the rotated right-hand side size e_1, whose last
    # entry is the residual of the least-squares solution.
    R = np.zeros((m, m))
    cos, sin, g = np.zeros(m), np.zeros(m), np.zeros(m + 1)
    g[0] = size
    steps, reached = 0, False
    for j in range(m):
        w = product(V[j])
        if not np.all(np.isfinite(w)):
            return np.full_like(b, np.nan), False
        h = V[: j + 1] @ w
        w = w - h @ V[: j + 1]
        again = V[: j + 1] @ w
        w -= again @ V[: j + 1]
        h += again
        norm = float(np.linalg.norm(w))
        for i in range(j):
            h[i], h[i + 1] = cos[i] * h[i] + sin[i] * h[i + 1], cos[i] * h[i + 1] - sin[i] * h[i]
        radius = float(np.hypot(h[j], norm))
        cos[j], sin[j] = h[j] / radius, norm / radius
        R[: j + 1, j] = h
        R[j, j] = radius
        g[j], g[j + 1] = cos[j] * g[j], -sin[j] * g[j]
        steps = j + 1
        reached = abs(g[j + 1]) <= rtol * size
        if reached or norm <= 1e-14 * size:
            break
        V[j + 1] = w / norm
    y = np.linalg.solve(R[:steps, :steps], g[:steps]) if steps else np.zeros(0)
    return y @ V[:steps], reached


class _NewtonSystem:
    """``(I - J) x = r`` for Newton's steps, J the EM map's Jacobian on a subsample.

    A product ``J y`` is a forward difference of the EM map at the
    subsample's fixed point ``v``: one E step on the subsample. The system is
    solved by GMRES (:func:`gmres`) to a relative residual of
    ``_NEWTON_RTOL``: the Jacobian of EM is close to low rank (its few slow
    directions), so GMRES needs few products. (Reusing the products of
    earlier steps as a starting subspace was measured to need more
    products, not fewer.)
    """

    def __init__(self, sub, p):
        self.sub, self.p = sub, p
        self.v = v = p.vector()
        self.g = _em_map(sub, p, v)
        self.eps = 1e-7 * (1.0 + np.linalg.norm(v))

    def _product(self, y):
        size = np.linalg.norm(y)
        if size == 0.0:
            return y
        eps = self.eps / size
        return y - (_em_map(self.sub, self.p, self.v + eps * y) - self.g) / eps

    def solve(self, r, rtol):
        """``(x, reached)``: x with ``||(I - J) x - r|| <= rtol ||r||`` when
        ``reached`` (else GMRES's best), or ``(None, False)``."""
        x, reached = gmres(self._product, r, rtol, _GMRES_STEPS)
        if not np.all(np.isfinite(x)):
            return None, False
        return x, reached


class _SplitNewton:
    """Newton's step as the mean of two, each with the Jacobian of one half of the rows.

    The step's error comes mostly from the Jacobian's sampling error, which
    is independent between two disjoint halves of the subsample
    (:meth:`~._passes._Rows.halves`); each half's step errs about twice as
    much in variance as a step with the Jacobian of all the subsample's rows,
    their mean as much as it, and ``||x_1 - x_2||^2 / 4`` estimates the mean's
    squared error on the heads (the split-half estimate of a sampling
    variance; ``math.md`` section 7). GMRES's own error, at most its
    relative residual (``_SPLIT_RTOL``) times ``||x|| (1 + rho) / (1 - rho)``
    (``||(I - J)^-1|| <= 1 / (1 - rho)``, rho the EM map's rate), is added.
    The split-half estimate is taken twice (``_SPLIT_SAFETY``): one draw's
    estimate scatters by a factor of a few either way around the error
    (``tests/test_mixture.py``), and the stop asks for a squared error of
    ``tol`` (a thousandth) of the estimator's own, so that an error a few
    times the estimate still leaves the fit within a hundredth of it.
    Rows not in memory, or too few to halve: one system on all of them, and
    no estimate (infinity).
    """

    def __init__(self, sub, p, rho):
        data = sub.data
        if data.in_memory and data.n_weighted >= 2 * _MIN_HALF_ROWS:
            # The halves take the subsample's mean squared norm: the EM map
            # depends on it only through tau^2's constant term (math.md
            # section 7), which the Jacobian's differences cancel.
            self.systems = [_NewtonSystem(_EM(half, sub.mean_sq), p) for half in data.halves()]
        else:
            self.systems = [_NewtonSystem(sub, p)]
        self.n_heads = p.U.size
        self.amplification = (1.0 + rho) / (1.0 - rho)

    def solve(self, r):
        """``(x, error)``: the step and its estimated squared error on the heads, or (None, None)."""
        rtol = _SPLIT_RTOL if len(self.systems) == 2 else _NEWTON_RTOL
        solved = [system.solve(r, rtol) for system in self.systems]
        if any(x is None for x, _ in solved):
            return None, None
        steps = [x for x, _ in solved]
        x = np.mean(steps, axis=0)
        if len(steps) == 1 or not all(reached for _, reached in solved):
            return x, np.inf
        heads = slice(0, self.n_heads)
        spread = float(np.sum((steps[0][heads] - steps[1][heads]) ** 2)) / 4.0
        gmres = (rtol * self.amplification * float(np.linalg.norm(x))) ** 2
        return x, _SPLIT_SAFETY * spread + gmres


def _newton_em(em, p0, sub, p_sub, tol, max_iter, rho, report, n_stage):
    """Newton iterations on all rows for the fixed point of EM; ``(params, converged, rho)``.

    The maximum on all rows is the fixed point of the EM map G: ``G(v) =
    v``. From the subsample's fixed point, Newton's step solves ``(I - J) x =
    G(v) - v`` with J the EM map's Jacobian (``math.md`` section 7), taken on
    the subsample ``sub`` at its fixed point ``p_sub``, where a product ``J
    y`` costs one E step on the subsample (a forward difference) and the
    solve is GMRES. J differs from the Jacobian on all rows by the sampling
    error of the subsample, so each Newton step contracts the error by a
    small factor ``c`` instead of EM's rate, close to 1 when the clusters
    overlap. A step is kept only if the likelihood on all rows does not
    decrease (checked by the next E step); otherwise, or when a step cannot
    be formed, the run goes on by SQUAREM (:func:`_run_em`) from the EM
    step. It stops when the estimated distance of the new iterate to the
    fixed point, ``c / (1 - c)`` times the step on the heads, is below
    ``sqrt(tol)`` standard errors, or when a step gains less than ``10 tol``
    nats, as :func:`_run_em` does. It also stops, without the E step at its
    end, after a step whose error estimated from two halves of the
    Jacobian's rows (:class:`_SplitNewton`) is below ``sqrt(tol)`` standard
    errors, when the step is within ``sqrt(_SPLIT_TRUST)`` standard errors
    of the fit on the stage's subsample of ``n_stage`` rows (inflated by
    ``1 / (1 - rho)``): there the EM map is close to linear and the
    Jacobian's sampling error is the step's error; on well-separated
    clusters one E step on all rows then suffices.
    """
    v_sub = p_sub.vector()
    S, counts, ll = em.expect(p0)
    report(em, ll)
    start = em.passes - 1
    p = p0
    if not np.all(np.isfinite(v_sub)):
        # A head that no point takes (log pi = -inf): no derivative there.
        return _run_em(em, p, tol, max_iter - 1, rho, report)
    solver = _SplitNewton(sub, p_sub, rho)
    rate, previous = 0.5, None
    while em.passes - start < max_iter:
        p_em = em.maximize(S, counts, p)
        residual = p_em.vector() - p.vector()
        step, error = solver.solve(residual) if np.all(np.isfinite(residual)) else (None, None)
        candidate = None if step is None else p.from_vector(p.vector() + step, em.floor)
        if candidate is None:
            return _run_em(em, p_em, tol, max_iter - (em.passes - start), rho, report)
        moved = float(np.sum((candidate.U - p.U) ** 2))
        if previous is not None and previous > 0.0:
            rate = min(float(np.sqrt(moved / previous)), 0.9)
        se = tol * standard_error(candidate, em.n_effective)
        if moved * (rate / (1.0 - rate)) ** 2 <= se:
            return candidate, True, rho
        # The step's estimated error is trusted for a step within the
        # statistical error of the subsample's fit, where the EM map is
        # close to linear: a larger one is checked by the next E step.
        within = moved <= _SPLIT_TRUST * standard_error(p, n_stage) / (1.0 - rho)
        if within and error <= se:
            return candidate, True, rho
        S1, counts1, ll1 = em.expect(candidate)
        if ll1 < ll - 1e-12 * (1.0 + abs(ll)):
            # The step lost likelihood: EM's monotone steps from here on.
            return _run_em(em, p_em, tol, max_iter - (em.passes - start), rho, report)
        report(em, ll1)
        gained = em.n_effective * (ll1 - ll)
        p, S, counts, ll, previous = candidate, S1, counts1, ll1, moved
        if gained < _GAIN_PER_TOL * tol:
            return p, True, rho
    # max_iter E steps, the last at p: its M step costs no pass, tested as _run_em's.
    p1, _, settled = _em_step(em, S, counts, p, tol, rho)
    return p1, settled, rho


# Most GMRES steps of one Newton step's solve (one cycle, no restart).
_GMRES_STEPS = 40

# Relative residual of the GMRES solve of each Newton step: the Jacobian is
# the subsample's, off by its sampling error, so a closer solve buys nothing.
_NEWTON_RTOL = 1e-2

# Fewest rows in each half of the Jacobian's rows (_SplitNewton), and the
# relative residual of each half's GMRES solve: closer than _NEWTON_RTOL, so
# that the solve's error stays below the statistical stop.
_MIN_HALF_ROWS = 1024
_SPLIT_RTOL = 1e-3
_SPLIT_SAFETY = 2.0

# Largest first Newton step, in squared standard errors of the subsample's
# fit (inflated by 1 / (1 - rho) where the clusters overlap), whose
# estimated error _newton_em trusts without an E step at its end: 3
# standard errors.
_SPLIT_TRUST = 9.0


# Smallest gain of total log-likelihood (nats) worth another EM pass, per
# unit of tol (the fraction of the squared standard error).
_GAIN_PER_TOL = 10.0

# SQUAREM's step-length control (Du and Varadhan, J. Stat. Softw. 92(7), 2020,
# the SQUAREM package's step.max0 = 1 and mstep = 4; math.md section 7).
_STEP_GROWTH = 4.0

# Rows of the first subsample of the EM: _SUBSAMPLE, or an eighth of the rows
# when that is smaller, but at least _MIN_SUBSAMPLE rows and
# _ROWS_PER_PARAMETER rows per parameter of the mixture (below that, the
# subsample's Jacobian is too far from the one on all rows for Newton's steps
# to beat SQUAREM's); each further one is _GROWTH times larger, up to a
# quarter of the rows, then all rows; before the first, stages _PRE_GROWTH
# times smaller while they keep the floor (subsample_sizes).
_SUBSAMPLE = 65536
_MIN_SUBSAMPLE = 8192
_ROWS_PER_PARAMETER = 256
_GROWTH = 16
_PRE_GROWTH = 8

# tol of every stage before the last (all rows), at least the fit's: a
# subsample's fixed point is off the maximum on all rows by its own sampling
# error, about its standard error SE_m on its m rows, so a stage run to
# sqrt(tol) SE_m buys nothing the next stage keeps. Stopped within
# sqrt(_STAGE_TOL) = 1/2 SE_m of its fixed point, in a direction independent
# of that error, it starts the next stage about a quarter farther in squared
# distance (math.md section 7, "Subsample, then Newton's steps").
_STAGE_TOL = 0.25

# refine_heads' default resolution (its tol) and pass budget.
_EM_TOL = 1e-3
_EM_MAX_ITER = 500

# Rows on which Newton's steps take the EM map's Jacobian (at least
# _ROWS_PER_PARAMETER per parameter, at most the last subsample's): each
# product is an E step on them.
_JACOBIAN_ROWS = 16384


def mixture_parameters(n_features, n_clusters, free=False):
    """Parameters of the mixture, counted for the subsample sizes: K heads in R^d,
    the norm(s), tau^2 and the K weights (``math.md`` section 7, "Subsample,
    then Newton's steps": 256 rows per parameter)."""
    return n_features * n_clusters + 2 + n_clusters + (n_clusters - 1 if free else 0)


def subsample_sizes(n_samples, n_parameters):
    """Rows of :func:`refine_heads`' subsample stages, smallest first (see its docstring)."""
    sizes = []
    size = max(
        min(_SUBSAMPLE, n_samples // 8),
        _MIN_SUBSAMPLE,
        _ROWS_PER_PARAMETER * n_parameters,
    )
    while 4 * size < n_samples:
        sizes.append(size)
        size *= _GROWTH
    # Before the first, stages _PRE_GROWTH times smaller while they keep
    # the floor: the first stage's EM crawls where the clusters overlap,
    # and on the smaller rows its passes cost less, Newton's steps then
    # carrying each fit to the next stage.
    floor = max(_MIN_SUBSAMPLE, _ROWS_PER_PARAMETER * n_parameters)
    while sizes and sizes[0] // _PRE_GROWTH >= floor:
        sizes.insert(0, sizes[0] // _PRE_GROWTH)
    return sizes


def refine_heads(
    data,
    heads,
    mean_sq,
    noise,
    *,
    norms="equal",
    radii=None,
    spherical_rows=None,
    sign_rows=None,
    tol=_EM_TOL,
    max_iter=_EM_MAX_ITER,
    random_state=None,
    verbose=0,
):
    """EM for the spherical mixture of centroids of equal (or free) norms, started at ``heads``.

    Passes are spent where they buy accuracy: when the data have more than
    4 times the first subsample's rows, the fit goes through subsamples
    first (:func:`subsample_sizes`: 65536 rows, or an eighth of the rows if
    that is smaller, but at least 8192 and 256 per parameter of the
    mixture; then subsamples 16 times larger while they are under a quarter
    of the rows; and before the first, subsamples an eighth as large while
    they keep that floor), each to its own statistical resolution, so that
    the passes over all rows start within a few standard errors of the
    maximum. EM (SQUAREM) runs on the smallest only; each later stage, all
    rows last, is reached by Newton's steps with the previous stage's
    Jacobian of the EM map (:func:`_newton_em`), a few passes where EM would
    crawl. The iterations stop when the heads are estimated to be within
    ``sqrt(tol)`` standard errors of the fixed point (:func:`_run_em`,
    ``math.md`` section 7) on all rows, and within half of their own
    standard error on each subsample (``tol`` at least ``_STAGE_TOL``): a
    subsample's fit only starts the next stage.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
        The rows ``x / s`` (s the data object's scale) and their weights;
        each E step is one pass.
    heads : ndarray of shape (d, K)
        Unit starting heads, of either sign.
    mean_sq : float
        ``m2``, the weighted mean of ``||x / s||^2``.
    noise : float
        Starting noise level (the centroids' norm starts at 1, the weights
        equal).
    norms : {"equal", "free", "auto"}, default="equal"
        ``"equal"``: the paper's centroids of one common norm. ``"free"``:
        one norm per centroid. ``"auto"``: equal, then free when, at the
        equal-norm fit on all rows, the free M step gains more than the
        Bayesian information criterion's price of the ``K - 1`` extra
        norms, ``(K - 1) log(n) / 2`` nats (:func:`free_norm_gain`, a lower
        bound on the likelihood ratio; ``math.md`` section 7, "One norm per
        centroid"); EM then goes on with free norms from that M step. With
        subsample stages the test is made first at the first subsample's
        fit (its rows for n), where passing it frees the norms of every
        later stage.
    radii : ndarray of shape (n_clusters,) or None, default=None
        Starting norms, one per centroid (a seeded start,
        :func:`~attention_cluster._seeding.seeded_start`): the norms are
        then free from the start, whatever ``norms``, and the heads keep
        their signs (the centres ``r_k mu_k`` are points, not directions).
    spherical_rows : callable or None, default=None
        With ``norms="auto"``, called (once, and only when the free norms
        pass the test) to ask whether the rows, as the user gave them, all
        have one norm; then the norms stay equal. On a sphere the norm of a
        cluster's mean measures how spread the cluster is, not how far it
        lies: a centroid of small norm collects the points of weak
        direction from every cluster (TF-IDF rows of short documents,
        ``benchmarks/user_data.py``).
    sign_rows : pass-layer data object or None, default=None
        Rows of ``data`` (a subsample the caller holds, at ``data``'s scale)
        on which each head is first turned towards the points it wins; None
        takes the first stage's rows (all rows when there is no subsample
        stage). Unused with ``radii``.
    tol : float, default=1e-3
        Stop when the estimated squared distance to the fixed point is below
        ``tol`` times the squared standard error of the heads, or when a step
        gains less than ``10 tol`` nats of total log-likelihood (:func:`_run_em`).
    max_iter : int, default=500
        Maximum number of E steps on each data set.
    random_state : int, RandomState instance or None, default=None
        Draws the subsamples.
    verbose : int, default=0
        Print the log-likelihood of each accepted iterate when positive.

    Returns
    -------
    MixtureFit
    """
    d, K = heads.shape
    if not mean_sq > 0.0:
        # All-zero data: no likelihood to maximise; the heads stay.
        return MixtureFit(
            np.array(heads, dtype=np.float64),
            np.full(K, 1.0 / K),
            np.zeros(K),
            0.0,
            norms == "free",
            np.empty(0),
            0,
            True,
        )
    rng = check_random_state(random_state)
    free = norms == "free" or radii is not None
    n_parameters = mixture_parameters(d, K, free)
    sizes = subsample_sizes(data.n_weighted, n_parameters)
    curve = []

    def report(em, ll):
        if em.data is data:
            curve.append(ll)
        if verbose:
            where = "all rows" if em.data is data else f"{em.data.n_samples} rows"
            print(
                f"[AttentionClustering] EM on {where}, E step {em.passes}: mean log-likelihood {ll:.8g}"
            )

    stages = [data.subsample(rng, size) for size in sizes] + [data]
    # Each head is turned towards the points it wins (head_signs), on a
    # subsample (sign_rows, or the first stage's rows): EM then finds the
    # signs again from its points at every stage.
    U = np.array(heads, dtype=np.float64)
    if radii is None:
        U *= head_signs(stages[0] if sign_rows is None else sign_rows, U, mean_sq)
    p = _Params(
        U,
        np.ones(K) if radii is None else np.array(radii, dtype=np.float64),
        max(float(noise) ** 2, mean_sq * MIN_VARIANCE / d),
        np.full(K, -np.log(K)),
        free=free,
    )
    del U  # (held by p alone: freed once the stages replace it)
    rho = 0.9
    ems = [_EM(sub, float(sub.norm_moments()[0])) for sub in stages[:-1]] + [_EM(data, mean_sq)]
    # A subsample stage only starts the next one (see _STAGE_TOL): all rows
    # alone are held to tol.
    tols = [max(tol, _STAGE_TOL)] * (len(ems) - 1) + [tol]
    # spherical_rows reads the rows: asked once, its answer kept for both tests.
    one_norm = None if spherical_rows is None else functools.cache(spherical_rows)

    def frees_norms(em):
        """norms="auto"'s test at ``em``'s last E step, an equal-norm fit
        (``math.md`` section 7, "One norm per centroid"): the free M step
        from it, or None to keep one norm."""
        at, S, counts = em.last
        gain = free_norm_gain(S, counts, at.variance) * em.n_effective / em.total
        if not 2.0 * gain > (K - 1) * np.log(em.n_effective):
            return None
        if one_norm is not None and one_norm():
            return None
        return parted(em.maximize(S, counts, replace(at, free=True)), em.n_effective)

    em = ems[0]
    p, converged, rho = _run_em(em, p, tols[0], max_iter, rho, report)
    if norms == "auto" and K > 1 and len(ems) > 1 and not p.free:
        # The test on the first subsample's fit too: where it passes there,
        # the free norms carry every later stage, and the passes over all
        # rows do not first climb the equal-norm model, whose fit on all
        # rows the test below would then leave (math.md section 7, "One
        # norm per centroid").
        freed = frees_norms(em)
        if freed is not None:
            em.last = p = None
            p, converged, rho = _run_em(em, freed, tols[0], max_iter, rho, report)
            n_parameters = mixture_parameters(d, K, True)
    for em, previous, stage_tol in zip(ems[1:], ems[:-1], tols[1:]):
        rows = previous.data.subsample(rng, max(_JACOBIAN_ROWS, _ROWS_PER_PARAMETER * n_parameters))
        # Only the Jacobian of the EM map on these rows is used, which does
        # not depend on their mean squared norm (see _SplitNewton).
        jacobian_em = _EM(rows, previous.mean_sq)
        p, converged, rho = _newton_em(
            em,
            p,
            jacobian_em,
            p,
            stage_tol,
            max_iter,
            rho,
            report,
            n_stage=previous.n_effective,
        )
    if norms == "auto" and K > 1 and not p.free:
        freed = frees_norms(em)
        if freed is not None:
            # (The equal-norm fit and its last E step's sums, which the free
            # run replaces, are not held beside the free run's own.)
            em.last = p = None
            p, converged, _ = _run_em(em, freed, tol, max_iter, rho, report)
    return MixtureFit(
        heads=p.U,
        weights=np.exp(p.log_pi),
        radii=p.radii,
        variance=p.variance,
        free=p.free,
        log_likelihood=np.array(curve),
        n_iter=em.passes,
        converged=converged,
    )


def held_statistics(p):
    """The mean E-step statistics ``(S / N, counts / N)`` that the M step maps to ``p``.

    ``S_k / N = pi_k r_k mu_k`` and ``counts_k / N = pi_k``: the M step of
    ``math.md`` section 7 gives back the heads, the norms and the weights of
    ``p`` (and ``tau^2`` from the mean squared norm ``d tau^2 + sum_k pi_k
    r_k^2``). A stream holds them for rows it no longer reads: a fit's that
    it continues, a reseeded component's (``math.md`` section 7, "One pass
    over a stream").
    """
    pi = np.exp(p.log_pi)
    return (pi * p.radii)[:, None] * p.U.T, pi


def _regains_rows(p, k):
    """Whether component k of ``p`` would take most of a row at its own centre
    ``c_k = r_k mu_k``: ``log pi_k`` above ``logsumexp_j (log pi_j - ||c_k -
    c_j||^2 / (2 tau^2))`` over the others (the E step's logits there;
    ``math.md`` section 7, "A component that loses its points"). One
    that does not regains no row: its weight, zero or not, stays (weights of
    1e-8 beside one component that had taken every row stayed so for 1000
    rows)."""
    centres = (p.U * p.radii).T
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logits = p.log_pi - np.sum((centres - centres[k]) ** 2, axis=1) / (2.0 * p.variance)
    others = np.delete(logits, k)
    return bool(others.size == 0 or p.log_pi[k] > logsumexp(others))


def _reseeded(S, counts, k, weight, centre):
    """Statistics ``(S, counts)`` (counts summing to 1) with component k's
    those of a component of weight ``weight`` at the point ``centre``
    (``r_k mu_k``), all then divided by the new total, as if ``weight`` more
    were held there (``math.md`` section 7, "A component that loses its
    points")."""
    S, counts = S.copy(), counts.copy()
    S[k], counts[k] = weight * centre, weight
    total = float(np.sum(counts))
    return S / total, counts / total


class _OneBatch:
    """What :class:`OnlineEM` and :class:`LinearisedEM` share: the parameters,
    the exact running means of the squared norm and of the weight seen, the
    second moment's products with the published heads, and the reseeding of
    the components that lost their weight (``math.md`` section 7, "One pass
    over a stream").

    ``radii``: the starting norms, None for all 1; ``free``: whether each
    centroid has its own norm (default: when ``radii`` are given).
    """

    # The rows' rounding unit (:func:`_rounding_unit`, the largest of the
    # batches' dtypes): a head whose sum is within its rounding keeps its direction in
    # the M step, as the fit's EM (:func:`_maximize`; 0 in streams pickled
    # before it, whose M step took the rounding's direction).
    eps = 0.0

    def __init__(self, heads, weights, noise, radii=None, free=None):
        with np.errstate(divide="ignore"):
            log_pi = np.log(np.asarray(weights, dtype=np.float64))
        free = radii is not None if free is None else bool(free)
        radii = np.ones(len(log_pi)) if radii is None else np.array(radii, dtype=np.float64)
        self.params = _Params(
            np.array(heads, dtype=np.float64), radii, max(float(noise) ** 2, 0.0), log_pi, free
        )
        # The parameters last returned, whose heads moment_heads multiplies.
        self.published = self.params
        self.seen = 0.0
        self.rows_seen = 0
        # The sum of the squared weights seen (the stream's effective rows).
        self.weight_squares = 0.0
        self.mean_sq = 0.0
        self.moment_heads = np.zeros_like(self.params.U)

    def hold(self, weight, rows, moment_heads, row_shares=None):
        """Count in a fit of ``rows`` rows of total ``weight`` at the current
        parameters, without its rows (partial_fit after fit).

        Its statistics are :func:`held_statistics`, its mean squared norm
        ``d tau^2 + sum_k pi_k r_k^2`` (what the M step implies at its fixed
        point) and ``moment_heads`` (d x K) its second moment times the heads;
        ``row_shares`` its rows' shares among the components, each row once
        (None: unknown, and online EM's test starts its rows' shares at the
        next batch).
        """
        p = self.params
        self.seen, self.rows_seen = float(weight), int(rows)
        # (The fit's rows taken as of equal weight: its squares are not kept.)
        self.weight_squares = self.seen**2 / max(self.rows_seen, 1)
        self.mean_sq = p.U.shape[0] * p.variance + float(np.exp(p.log_pi) @ p.radii**2)
        self.moment_heads = np.array(moment_heads, dtype=np.float64)
        self._hold(held_statistics(p), self.seen, row_shares)
        return self

    def update(self, data):
        """One batch ``data``: its statistics, then the parameters; returns the published ones.

        Besides the update's E steps, one pass for the mean squared norm and
        one for the second moment's product with the heads: the running
        ``A = M U`` at the published heads U is renewed with the batch's
        moment ``M_b`` standing for the earlier batches' in the heads' change,
        ``A <- (1 - w) A + M_b (U_new - (1 - w) U_old)``, w the batch's share
        of the weight seen (``math.md`` section 7): no d x d matrix is held.
        """
        batch = data.total_weight
        # (The largest of the batches': the statistics hold every batch's
        # rounding, a float32 batch's after float64 ones too.)
        self.eps = max(self.eps, _rounding_unit(data))
        self.seen += batch
        self.rows_seen += data.n_weighted
        if "weight_squares" in self.__dict__:  # (not in a stream pickled before it)
            self.weight_squares += data.weight_squares
        share = batch / self.seen
        self.mean_sq += share * (data.norm_moments()[0] - self.mean_sq)
        # Until a row is not zero there is no likelihood to maximise: every
        # row is at the origin, and so is every centroid (radius 0, as the
        # fit's M step gives rows all zero).
        published = replace(self.published, radii=np.zeros_like(self.published.radii))
        if self.mean_sq > 0.0:
            floor = MIN_VARIANCE * self.mean_sq / data.n_features
            p = self.params
            if p.variance < floor:
                p = replace(p, variance=floor)
            published = self._step(data, batch, share, floor, p)
        kept = 1.0 - share
        self.moment_heads = kept * self.moment_heads + data.moment_action(
            published.U - kept * self.published.U
        )
        self.published = published
        return published

    def passes_for_sample(self, data):
        """Whether the batch ``data`` (at unit scale) passes for a sample of
        the stream, the stream left as it was: partial_fit's check before a
        batch that outweighs the stream starts it anew (a batch of one
        class's rows would start it at that class's fit).

        Online EM's test (:func:`_passes_for_sample`), at the level
        ``_RESTART_LEVEL``, of the batch's rows' shares among the components
        (each row of positive weight once: a few heavy rows of one class are
        not a sample's worth of rows), against two references; the batch is
        refused only when it fails both: the published mixture's weights,
        its shares taken at the published parameters, counted as the
        stream's rows (its effective rows ``(sum w)^2 / sum w^2`` where
        fewer), which follows a stream whose running parameters drifted from
        the rows it saw; and online EM's running rows' shares, its shares
        taken at the running parameters, where online EM has them for at
        least half the stream's rows, which follows a stream whose weights
        differ by cluster. Never once online
        EM took the stream for an ordered one; always when the test is off
        (``significance=0``) or before a row that is not zero.
        """
        if getattr(self, "ordered", False):
            return False
        if getattr(self, "significance", _SIGNIFICANCE) <= 0.0 or not self.mean_sq > 0.0:
            return True
        rows = data.unit_weighted()
        floor = MIN_VARIANCE * self.mean_sq / data.n_features

        def shares(p):
            counts = rows.e_step(*replace(p, variance=max(p.variance, floor)).attention()[:3])[1]
            return counts / float(np.sum(counts))

        def passes(p, rho, earlier):
            return _passes_for_sample(
                shares(p),
                rows.n_weighted,
                rho,
                earlier,
                _RESTART_LEVEL,
                getattr(self, "min_effect", _MIN_EFFECT),
            )

        published = self.published
        if passes(published, np.exp(published.log_pi), self._effective_rows_seen()):
            return True
        # The running shares only where they hold most of the stream's rows
        # (after a weighted fit or a reseed they start again: a few rows'
        # shares refuse almost nothing, and let a batch of one class pass).
        row_rows = getattr(self, "row_rows", 0)
        return 2 * row_rows >= self.rows_seen and passes(self.params, self.row_shares, row_rows)

    def _effective_rows_seen(self):
        """The stream's rows, or its effective rows ``(sum w)^2 / sum w^2``
        where fewer (not for a stream pickled before its squared weights
        were counted)."""
        squares = self.__dict__.get("weight_squares")
        if not squares:
            return float(self.rows_seen)
        return min(float(self.rows_seen), _effective_rows(self.seen, squares))

    def lost(self):
        """The components whose weight holds less than one row of the stream (none before a row)."""
        if not self.rows_seen:
            return np.empty(0, dtype=np.intp)
        return np.flatnonzero(np.exp(self.params.log_pi) * self.rows_seen < 1.0)

    def reseed(self, points, weights=None):
        """Reseed the lost components (:meth:`lost`) at the worst explained of
        ``points`` (a batch's rows at unit scale, n x d); returns ``(stream,
        count)``, the stream that goes on and how many were reseeded.

        EM keeps a weight of zero at zero, so a component that lost its points
        never regains them. Each lost component in turn, as MiniBatchKMeans
        reassigns an empty centre, moves to the point of positive weight (in
        ``weights``) of least likelihood under the mixture, the components
        reseeded before it included (a far point, as k-means++ picks), with
        the weight of the lightest component not lost, held in the running
        statistics (:func:`_reseeded`) as if that much more weight had been
        seen there. The stream goes on as online EM (:class:`OnlineEM`, from
        the statistics it held; a reseeded head lies beyond the reach of
        :class:`LinearisedEM`'s linearisation), whose average restarts: its
        past holds the lost components' statistics (``math.md`` section 7).
        Nothing is reseeded when the points are all explained alike (equal
        rows), are zero, or every component is lost; one point (a batch of
        one row) reseeds one component that regains no row
        (:func:`_regains_rows`), where it is as unlikely under the mixture
        as ``_LONE_ROW_LEVEL`` of the mixture's own rows. Online EM's running
        rows' shares start again from the batch that reseeds: they were the
        shares of the components before (a reseeded component's set at the lightest
        weight, every later batch lacked it; kept, a first batch of one
        repeated row, whose rows' share was all one component's, made every
        later batch lack that one: both took shuffled streams for ordered
        ones).
        """
        usable = np.all(np.isfinite(points), axis=1)
        if weights is not None:
            usable &= weights > 0.0
        points = points[usable]
        if not (points.size and self.mean_sq > 0.0):
            return self, 0
        floor = MIN_VARIANCE * self.mean_sq / points.shape[1]
        squares = np.einsum("ij,ij->i", points, points)
        p, seeds = self.params, []
        for k in self.lost():
            pi = np.exp(p.log_pi)
            kept = pi * self.rows_seen >= 1.0
            if not kept.any():
                break
            # log p(y) up to a constant (math.md section 7): the E step's
            # logsumexp and -||y||^2 / (2 tau^2), that is log sum_k pi_k
            # exp(-||y - r_k mu_k||^2 / (2 tau^2)) + r0^2 / (2 tau^2).
            at = replace(p, variance=max(p.variance, floor))
            keys, bias, beta, r0 = at.attention()
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                fits = logsumexp(bias + beta * (points @ keys), axis=1) - squares / (
                    2.0 * at.variance
                )
            i = int(np.argmin(fits))
            if len(fits) > 1:
                unexplained = fits[i] < np.max(fits)
            elif seeds:
                break  # (one component at one row; a shared norm leaves it far)
            elif _regains_rows(at, k):
                # A component that takes most of a row at its own centre
                # regains rows by the E step where they are its own: a lone
                # row reseeds only one that cannot (reseeding every lost one
                # also reseeded components apart from the others, which
                # would have regained their rows).
                continue
            else:
                # A batch of one row: reseeded at where the mixture's own rows
                # rarely lie, farther from every centre (in tau's units, squared)
                # than the chi-square tail _LONE_ROW_LEVEL with d degrees.
                limit = chi2.isf(_LONE_ROW_LEVEL, points.shape[1])
                unexplained = fits[i] - r0 * r0 / (2.0 * at.variance) < -0.5 * limit
            if not (unexplained and squares[i] > 0.0):
                break
            weight = float(np.min(pi[kept]))
            norm = float(np.sqrt(squares[i]))
            U, radii = p.U.copy(), p.radii.copy()
            U[:, k] = points[i] / norm
            if p.free:
                radii[k] = norm
            pi[k] = weight
            with np.errstate(divide="ignore"):
                p = replace(p, U=U, radii=radii, log_pi=np.log(pi / np.sum(pi)))
            seeds.append((k, weight, radii[k] * U[:, k]))
        if not seeds:
            return self, 0
        stream = self._online()
        for k, weight, centre in seeds:
            stream.stats = _reseeded(*stream.stats, k, weight, centre)
        # The rows' shares were of the components before: they start again
        # from this batch.
        stream.row_rows = 0
        stream.params = p
        stream.average_weight = 0.0
        return stream, len(seeds)


# A batch of one row reseeds a lost component only at a row this unlikely
# under the mixture (OnlineEM.reseed): farther from every centre than its
# rows lie but for this share of them.
_LONE_ROW_LEVEL = 1e-3
# Least expected count of a component in Pearson's test of a batch
# (OnlineEM._is_sample): components expected fewer times in the batch are
# pooled into one, as the chi-square approximation needs.
_MIN_EXPECTED = 5.0
# A stream whose refused batches that lack a cluster are more than the
# test's level explains, at this level (a binomial tail), is taken for one in
# the clusters' order (OnlineEM.ordered). A batch lacks a cluster it holds
# below this share of the stream's rows' share, expected at least
# _MIN_EXPECTED times.
_ORDERED_LEVEL = 1e-4
_LACKING = 0.1
# The test's level and floor of its effect (benchmarks/stream_order.py).
_SIGNIFICANCE = 0.01
_MIN_EFFECT = 0.1
# The level of the test of a batch that would start the stream anew
# (_OneBatch.passes_for_sample): a batch of one class's rows is refused far
# beyond any level, while a batch drawn from the whole stream, the restart's
# purpose, is refused this rarely.
_RESTART_LEVEL = 1e-4


def _effective_rows(total, squares):
    """Kish's effective number of rows, ``(sum w)^2 / sum w^2`` (``math.md``
    section 7, "Stopping at the statistical resolution")."""
    return total * total / squares


def _passes_for_sample(shares, n_rows, rho, earlier_rows, significance, min_effect):
    """Whether a batch of ``n_rows`` rows whose shares among the components
    are ``shares`` (summing to 1) passes for a sample of ``earlier_rows``
    rows whose shares are ``rho`` (``math.md`` section 7, "A batch that is
    not a sample of the stream").

    It does unless both its effect ``sum_k (c_k - rho_k)^2 / rho_k``, over
    the components of positive share ``rho_k``, exceeds ``min_effect`` and
    Pearson's statistic exceeds its ``1 - significance`` quantile. The
    shares ``rho`` are a mean of the earlier rows, whose variance adds
    ``n_rows / earlier_rows`` of the batch's, so the statistic is ``n / (1 +
    n / N) sum_k (c_k - rho_k)^2 / rho_k``, components expected fewer than
    ``_MIN_EXPECTED`` times pooled into one."""
    held = rho > 0.0
    if np.count_nonzero(held) < 2:
        return True
    c, rho = shares[held], rho[held]
    if float(np.sum((c - rho) ** 2 / rho)) <= min_effect:
        return True
    rare = n_rows * rho < _MIN_EXPECTED
    if rare.any():
        c = np.append(c[~rare], np.sum(c[rare]))
        rho = np.append(rho[~rare], np.sum(rho[rare]))
    if rho.size < 2:
        return True
    pearson = n_rows / (1.0 + n_rows / earlier_rows) * float(np.sum((c - rho) ** 2 / rho))
    return pearson <= chi2.isf(significance, rho.size - 1)


class OnlineEM(_OneBatch):
    """Online EM for the mixture of ``math.md`` section 7, one batch at a time.

    Cappe and Moulines (J. R. Stat. Soc. B, 2009): the E step's sufficient
    statistics ``s = (S / N, counts / N)`` are a stochastic approximation,

        s_n = s_{n-1} + gamma_n (sbar(batch_n; theta_{n-1}) - s_{n-1}),

    where ``sbar`` is the batch's weighted mean of the E-step statistics at
    the current parameters and ``theta_n`` is the M step at ``s_n``. The
    step is ``gamma_n = min(1, g W_b / W_n)^alpha``, ``W_b`` the batch's
    weight and ``W_n`` the weight seen so far: ``min(1, g / n)^alpha`` for
    equal batches, ``alpha`` in (1/2, 1]. The gain ``g`` makes the first
    ``g`` batches plain EM steps, each on its batch: the running statistics
    contract towards their fixed point at EM's rate, slow when the clusters
    overlap, and with ``g = 1`` the error of the first batches' statistics
    outlives a pass of 100 batches at sigma = 1. The published parameters
    are the M step at the average of the ``s_n`` (Polyak-Ruppert), weighted
    by ``W_b W_n^eta``. The mean squared norm ``m2`` does not depend on the
    parameters: it is an exact running mean. Data are seen through
    pass-layer data objects (``_passes``) whose scale ``s`` is fixed at the
    first batch. Plain attributes: pickles between calls.

    The recursion takes each batch for a sample of the stream. A batch whose
    rows' shares among the components the stream's rows do not explain (a
    chi-square test at level ``significance``, with an effect above
    ``min_effect``; rows sorted by class or by time) updates each component
    by its own share instead (:meth:`_component_step`): the clusters it
    lacks keep their statistics. A stream whose refused batches that lack a
    cluster are more than the level explains is taken for one in the
    clusters' order (``ordered``), and every later batch updates the
    components by their shares. ``significance=0`` takes every batch for a
    sample. ``refused`` counts the batches not taken for samples, ``tested``
    those tested, ``lacking`` the refused that lack a cluster.

    ``alpha``, ``g`` and ``eta`` are chosen in ``benchmarks/streaming.py``,
    ``significance`` and ``min_effect`` in ``benchmarks/stream_order.py``
    (``math.md`` section 7, "One pass over a stream": ``gamma_n = min(1, g
    W_b / W_n)^alpha``, averaged with weights ``W_b W_n^eta``; "A batch that
    is not a sample of the stream").
    """

    # The test's settings, counters and running shares, for streams pickled
    # before them (their defaults start empty).
    significance = _SIGNIFICANCE
    min_effect = _MIN_EFFECT
    refused = tested = lacking = row_rows = 0
    row_shares = 0.0
    ordered = False

    def __init__(
        self,
        heads,
        weights,
        noise,
        radii=None,
        free=None,
        alpha=0.6,
        gain=16.0,
        eta=0.0,
        significance=_SIGNIFICANCE,
        min_effect=_MIN_EFFECT,
    ):
        super().__init__(heads, weights, noise, radii, free)
        d, K = heads.shape
        self.alpha = alpha
        self.eta = eta
        self.gain = gain
        self.significance = significance
        self.min_effect = min_effect
        self.refused = 0
        self.tested = 0
        self.lacking = 0
        self.ordered = False
        self.stats = (np.zeros((K, d)), np.zeros(K))
        self.averaged = (np.zeros((K, d)), np.zeros(K))
        self.average_weight = 0.0
        # The running mean of the batches' rows' shares among the components,
        # each row of positive weight counted once (see _step), over row_rows
        # rows (0: none yet).
        self.row_shares = np.zeros(K)
        self.row_rows = 0

    def _hold(self, stats, weight, row_shares):
        # The fit as one step of weight W_b = W_n = weight, with its rows'
        # shares where they are known.
        self.stats = self.averaged = stats
        self.average_weight = weight * weight**self.eta
        if row_shares is not None:
            self.row_shares = np.array(row_shares, dtype=np.float64)
            self.row_rows = self.rows_seen

    def _online(self):
        return self

    def _step(self, data, batch, share, floor, p):
        """One online EM step on the batch (one E-step pass, two for weighted
        rows); returns the averaged parameters."""
        attention = p.attention()[:3]
        S, counts, _ = data.e_step(*attention)
        # s_0 = 0 until a batch off the origin (update): a first step after
        # batches at the origin takes its batch's statistics whole, as
        # gamma_1 = 1 does for a first batch (a smaller one left weights
        # summing to gamma, which the mixture refused).
        after_origin = share < 1.0 and not np.any(self.stats[1])
        gamma = 1.0 if after_origin else min(1.0, self.gain * share) ** self.alpha
        # The test counts rows, each of positive weight once: a batch is a
        # sample of the stream's rows whatever their weights, whose shares
        # vary as a few heavy rows fall (math.md section 7).
        rows = data.unit_weighted()
        n_rows = rows.n_weighted
        row_shares = (counts if rows is data else rows.e_step(*attention)[1]) / n_rows
        earlier_rows = self.row_rows
        sample = self._takes_for_sample(row_shares, n_rows, earlier_rows)
        self.row_rows += n_rows
        self.row_shares = self.row_shares + (n_rows / self.row_rows) * (
            row_shares - self.row_shares
        )
        if not sample:
            return self._component_step(S, counts, batch, share, floor, p)
        sbar = (S / batch, counts / batch)
        self.stats = tuple(s + gamma * (b - s) for s, b in zip(self.stats, sbar))
        self.params = _maximize(*self.stats, 1.0, self.mean_sq, floor, p, self.eps)
        step = batch * self.seen**self.eta
        self.average_weight += step
        rate = step / self.average_weight
        self.averaged = tuple(a + rate * (s - a) for a, s in zip(self.averaged, self.stats))
        return _maximize(*self.averaged, 1.0, self.mean_sq, floor, self.params, self.eps)

    def _takes_for_sample(self, shares, n_rows, earlier_rows):
        """Whether the batch is taken for a sample of the stream: not once
        the stream is ``ordered``, else by :meth:`_is_sample`; counts the
        batches tested, refused and refused lacking a cluster (one the batch
        holds below ``_LACKING`` of its running share, expected at least
        ``_MIN_EXPECTED`` times), and takes the stream for an ordered one
        when ``P(Binomial(tested, significance) >= lacking)`` falls below
        ``_ORDERED_LEVEL`` (``math.md`` section 7, "A batch that is not a
        sample of the stream")."""
        if self.ordered:
            self.refused += 1
            return False
        if self.significance <= 0.0 or not earlier_rows:  # (no shares yet)
            return True
        self.tested += 1
        if self._is_sample(shares, n_rows, earlier_rows):
            return True
        self.refused += 1
        rho = self.row_shares
        if np.any((n_rows * rho >= _MIN_EXPECTED) & (shares < _LACKING * rho)):
            self.lacking += 1
            tail = binom.sf(self.lacking - 1, self.tested, self.significance)
            self.ordered = bool(tail < _ORDERED_LEVEL)
        return False

    def _is_sample(self, shares, n_rows, earlier_rows):
        """Whether a batch of ``n_rows`` rows whose shares among the
        components are ``shares`` passes for a sample of the stream's
        ``earlier_rows`` rows, whose shares are ``row_shares``, at the
        stream's ``significance`` (:func:`_passes_for_sample`)."""
        return _passes_for_sample(
            shares, n_rows, self.row_shares, earlier_rows, self.significance, self.min_effect
        )

    def _component_step(self, S, counts, batch, share, floor, p):
        """The step of a batch that is not a sample of the stream: each
        component by its own share (``math.md`` section 7, "A batch that is
        not a sample of the stream"); returns the averaged parameters.

        The weights are the exact running mean of the batches' shares,
        ``pi_k <- pi_k + (W_b / W_n) (c_k - pi_k)``; each component's mean row
        ``m_k = (S_k / N) / pi_k`` moves by the batch's part of the
        component's weight seen, ``m_k <- m_k + (counts_k / (pi_k W_n))
        (S_k^b / counts_k - m_k)`` (a running mean per component, as
        MiniBatchKMeans' per-centre counts); the average's weights move alike
        from their own values, and each component's mean row is averaged
        with weights ``counts_k W_n^eta``. A component the batch does not
        reach keeps its mean row, in the running and the averaged statistics.
        """
        if not self.average_weight:  # the average restarts (reseed): at the statistics
            self.averaged = self.stats
        pi = self.stats[1]
        pi_new = pi + share * (counts / batch - pi)
        step = counts * self.seen**self.eta
        reached = counts > 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            running, averaged = (
                np.where(p_held[:, None] > 0.0, S_held / p_held[:, None], 0.0)
                for S_held, p_held in (self.stats, self.averaged)
            )
            batch_mean = S[reached] / counts[reached, None]
        running[reached] += (counts[reached] / (pi_new[reached] * self.seen))[:, None] * (
            batch_mean - running[reached]
        )
        # Each component's mean row averaged with weights counts_k W_n^eta.
        rate = step[reached] / (self.averaged[1][reached] * self.average_weight + step[reached])
        averaged[reached] += rate[:, None] * (running[reached] - averaged[reached])
        # The average's weights move as the running mean does, from their own
        # values: after sample steps the running weights are a stochastic
        # approximation, noisier than their average.
        averaged_pi = self.averaged[1] + share * (counts / batch - self.averaged[1])
        self.stats = (pi_new[:, None] * running, pi_new)
        self.averaged = (averaged_pi[:, None] * averaged, averaged_pi)
        self.average_weight += batch * self.seen**self.eta
        self.params = _maximize(*self.stats, 1.0, self.mean_sq, floor, p, self.eps)
        return _maximize(*self.averaged, 1.0, self.mean_sq, floor, self.params, self.eps)


class LinearisedEM(_OneBatch):
    """One-pass EM whose batches' E-step statistics are linearised in the parameters.

    The maximum-likelihood parameters of a whole stream solve ``v = M(s(v))``
    (``math.md`` section 7), ``s(v)`` the stream's mean E-step statistics
    ``(S / N, counts / N)`` at the parameter vector v (:meth:`_Params.vector`)
    and M the M step. A stream is read once, so each batch's statistics are
    known only at the parameters of its time, ``v_{i-1}``; to first order
    ``s_i(v) = s_i(v_{i-1}) + D (v - v_{i-1})``, D the Jacobian of the
    statistics, the same for every batch up to sampling error. Averaged over
    the batches with their weights,

        s(v) ~ sbar + D (v - vbar),   sbar = mean_i s_i(v_{i-1}),   vbar = mean_i v_{i-1},

    and the published parameters solve ``v = M(sbar + D (v - vbar))`` by
    Newton's method, which reads no data. D is taken by forward differences
    on the batch at hand (one E step per parameter), at the first batch and
    whenever the weight seen has doubled, on a batch of at least
    ``_STREAM_ROWS_PER_PARAMETER`` rows per parameter (a smaller batch's D
    errs so much that the fixed point leaves the linearisation's reach;
    below, the stream is online EM: :func:`new_stream`). The linearisation
    errs at second order in ``v_{i-1} - v``, which shrinks as the parameters
    settle, so one pass ends near the maximum likelihood of the whole
    stream, where online EM's stochastic approximation (:class:`OnlineEM`)
    ends at its step sizes' noise (``benchmarks/streaming.py``). Where the
    linearised statistics leave their domain, or before any D, the
    parameters are the M step of ``sbar`` (D's zeroth order), and D is
    renewed at the next batch that has the rows for it (``math.md`` section
    7). The mean squared norm does not depend on the parameters: an exact
    running mean. Plain attributes: pickles between calls. Each batch costs
    one E step, or ``1 + n_parameters`` when D is renewed.
    """

    def __init__(self, heads, weights, noise, radii=None, free=None):
        super().__init__(heads, weights, noise, radii, free)
        self.mean_stats = None
        self.mean_params = None
        # The weight of the batches in those means.
        self.mean_weight = 0.0
        self.jacobian = None
        self.renew_at = 0.0

    def _hold(self, stats, weight, row_shares):
        # (A linearised stream tests no batch: its rows' shares start when it
        # goes on as online EM.)
        self.mean_stats = np.concatenate([stats[0].ravel(), stats[1]])
        self.mean_params = self.params.vector()
        self.mean_weight = weight

    def _online(self):
        """Online EM from here on: these parameters and running means, and
        for its statistics ``sbar`` (or, before any, those the parameters
        hold); its rows' shares start at the next batch."""
        p = self.params
        online = OnlineEM(p.U, np.exp(p.log_pi), np.sqrt(p.variance), p.radii, p.free)
        online.published, online.seen, online.rows_seen = self.published, self.seen, self.rows_seen
        if "weight_squares" in self.__dict__:
            online.weight_squares = self.weight_squares
        else:  # (a stream pickled before its squared weights were counted)
            del online.weight_squares
        online.mean_sq, online.moment_heads = self.mean_sq, self.moment_heads
        online.eps = self.eps  # (the rounding its statistics carry)
        if self.mean_stats is None:
            online.stats = held_statistics(p)
        else:
            d, K = p.U.shape
            online.stats = (self.mean_stats[: d * K].reshape(K, d), self.mean_stats[d * K :])
        return online

    def _statistics(self, data, v, floor):
        p = self.params.from_vector(v, floor)
        S, counts, _ = data.e_step(*p.attention()[:3])
        return np.concatenate([S.ravel(), counts]) / data.total_weight

    def _m_step(self, s, floor, previous):
        d, K = previous.U.shape
        return _maximize(
            s[: d * K].reshape(K, d), s[d * K :], 1.0, self.mean_sq, floor, previous, self.eps
        )

    def _step(self, data, batch, share, floor, p):
        """The batch's statistics, D when due, then the fixed point."""
        v = p.vector()
        if not np.all(np.isfinite(v)):
            # A head no point takes (log pi = -inf): no derivative there;
            # the batch's plain EM step.
            S, counts, _ = data.e_step(*p.attention()[:3])
            self.params = _maximize(S, counts, batch, self.mean_sq, floor, p, self.eps)
            return self.params
        s = self._statistics(data, v, floor)
        due = self.jacobian is None or self.seen >= self.renew_at
        if due and data.n_weighted >= _STREAM_ROWS_PER_PARAMETER * v.size:
            eps = _FORWARD_STEP * (1.0 + np.abs(v))
            self.jacobian = np.column_stack(
                [
                    (self._statistics(data, v + e * eye, floor) - s) / e
                    for e, eye in zip(eps, np.eye(v.size))
                ]
            )
            self.renew_at = 2.0 * self.seen
        if self.mean_stats is None:
            self.mean_stats, self.mean_params, self.mean_weight = s, v, self.seen
        else:
            self.mean_weight += batch
            weight = batch / self.mean_weight
            self.mean_stats = self.mean_stats + weight * (s - self.mean_stats)
            self.mean_params = self.mean_params + weight * (v - self.mean_params)
        q = None if self.jacobian is None else self._fixed_point(p, floor)
        if q is None:
            if self.jacobian is not None:
                # Beyond the linearisation's reach: a D taken at the
                # parameters the stream has reached is due.
                self.renew_at = 0.0
            q = self._m_step(self.mean_stats, floor, p)
        self.params = q
        return q

    def _fixed_point(self, p, floor):
        """``v = M(sbar + D (v - vbar))`` from ``p`` (no data), or None.

        Newton's chord method: the Jacobian of the right-hand side, by
        forward differences (one M step per parameter), is taken once, at
        the first iterate. None when the linearised statistics leave their
        domain (a weight not positive, a value not finite) on the way: far
        from the parameters the batches saw, the linearisation does not hold.
        """
        d, K = p.U.shape

        def G(v, previous):
            s = self.mean_stats + self.jacobian @ (v - self.mean_params)
            if not (np.all(np.isfinite(s)) and np.all(s[d * K :] > 0.0)):
                raise _OutOfDomain
            return self._m_step(s, floor, previous)

        # Far from the batches' parameters the iterates may overflow: that is
        # the domain's edge, returned as None below, not a RuntimeWarning.
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                q = G(p.vector(), p)
                v = q.vector()
                g = G(v, q).vector()
                eps = _FORWARD_STEP * (1.0 + np.abs(v))
                J = np.column_stack(
                    [(G(v + e * eye, q).vector() - g) / e for e, eye in zip(eps, np.eye(v.size))]
                )
                system = np.eye(v.size) - J
                for _ in range(_NEWTON_STEPS):
                    step = np.linalg.lstsq(system, g - v, rcond=None)[0]
                    q = q.from_vector(v + step, floor)
                    if q is None:
                        return None
                    v = q.vector()
                    if np.linalg.norm(step) <= 1e-12 * (1.0 + np.linalg.norm(v)):
                        break
                    g = G(v, q).vector()
            except (_OutOfDomain, np.linalg.LinAlgError):
                return None
            return q if np.all(np.isfinite(q.vector())) else None


class _OutOfDomain(Exception):
    """The linearised statistics of :class:`LinearisedEM` left their domain."""


# Relative forward-difference step of LinearisedEM's Jacobians, and the chord
# steps it takes for its fixed point (no data: each is one M step).
_FORWARD_STEP = 1e-7
_NEWTON_STEPS = 8

# Rows per parameter of the mixture a batch needs for LinearisedEM's
# Jacobian: from 100-row batches at d = 10, K = 2 (24 parameters, 4 rows
# each) one pass ended 11 to 500 times farther from the centroids than the
# in-memory fit; at 17 to 25 rows per parameter up to 280 times, at 29 and
# more within 1.8 times (math.md section 7). Twice that, for the margin.
_STREAM_ROWS_PER_PARAMETER = 64

# Largest number of mixture parameters (K d + K + 2; K d + 2K + 1 with free
# norms) for which a stream
# linearises the batches' statistics (LinearisedEM, whose Jacobian costs one
# E step per parameter); above it, online EM.
_LINEARISED_MAX_PARAMETERS = 512


def new_stream(heads, weights, noise, n_rows, radii=None, free=None):
    """The stream of ``partial_fit``, started at these parameters, for batches like one of ``n_rows`` rows.

    :class:`LinearisedEM` when the mixture has at most 512 parameters and
    the batch at least ``_STREAM_ROWS_PER_PARAMETER`` rows for each, else
    :class:`OnlineEM` (``math.md`` section 7, "One pass over a stream").
    """
    d, K = np.shape(heads)
    free = radii is not None if free is None else free
    n_parameters = mixture_parameters(d, K, free)
    linearised = (
        n_parameters <= _LINEARISED_MAX_PARAMETERS
        and n_rows >= _STREAM_ROWS_PER_PARAMETER * n_parameters
    )
    stream = LinearisedEM if linearised else OnlineEM
    return stream(heads, weights, noise, radii, free)
