"""The fit plan: from rows and parameters to one :class:`FitResult`, without an estimator.

One direction, read top to bottom in :func:`fit_plan`:

1. **prepare** the rows (:func:`_prepare`): in high dimension the principal
   subspace, then the spectrum (scale, noise, unit-scale second moment) and
   the weight of the rows' common mean;
2. **centre or not** (``center``), with the retry on centred rows when an
   uncentred fit loses clusters to a common mean;
3. **settings** (:func:`resolve_methods`, :func:`_settings`): solver,
   refinement, temperature, regulariser strength, tolerances, resolved once;
4. **runs** of the attention solver from their starts (:func:`_start`,
   :func:`_run`), the best kept;
5. **refinement** by EM (:func:`attention_cluster._mixture.refine_heads`)
   into the fitted mixture (:class:`attention_cluster._model.SphericalMixture`);
6. **labels** by the fitted rule, and the warnings a user needs.

The estimator validates X into rows (``_passes.rows_from``), calls
:func:`fit_plan` and writes the result's fields as its fitted attributes in
one method. The user guide's "How a fit runs" page draws this plan.
"""

from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from . import _kernels
from ._draws import first_draw
from ._exact import START_TOL, WARM_START_ROWS, solve_exact
from ._mixture import head_signs, mixture_parameters, refine_heads, subsample_sizes
from ._model import MIN_VARIANCE, SphericalMixture
from ._objective import exact_objective, objective_exponent, regularizer_code, unscaled
from ._passes import DenseRows, LabelRule, unit_terms
from ._scale import BASIS_ROWS, estimate_spectrum, principal_basis, spike_overlap
from ._seeding import seeded_start
from ._settings import auto_reg_strength
from ._spectral import SUBSAMPLE, spectral_heads, start_rows
from ._sphere import normalize_heads, random_heads
from ._validation import DENSE_LIMIT_BYTES, InvalidParameterError, deferred_warnings, replay, warn
from .theory import auto_temperature

__all__ = [
    "DEFAULT_TUNING",
    "FitResult",
    "Settings",
    "Tuning",
    "bic_penalty",
    "block_log_likelihoods",
    "check_psgd_draws",
    "check_width",
    "fit_plan",
    "information_criterion",
    "mean_dominates",
    "mean_ratio",
    "mean_share",
    "near_terms",
    "predict_rule",
    "resolve_methods",
]


@dataclass(frozen=True)
class Tuning:
    """The fit's tuning values: documented fields, set by replacing the object.

    The values are chosen by the benchmark pages named beside each field;
    tests and benchmarks that need others replace ``DEFAULT_TUNING`` by
    ``replace(DEFAULT_TUNING, ...)``.
    """

    #: PSGD checks convergence every this many steps (user guide, "The model": PSGD).
    steps_per_check: int = 100
    #: PSGD's step size decays as ``1 / (1 + t / decay)``.
    decay: float = 200.0
    #: ``center="auto"`` centres when ``||mean||^2`` exceeds this many times
    #: the K-th eigenvalue of the second moment, at unit scale
    #: (benchmarks/user_data.py, docs/user_data.md; ``math.md`` section 7,
    #: "Centring or not").
    center_ratio: float = 10.0
    #: From this many features on, the solver runs in the principal subspace
    #: of dimension K + ``subspace_extra`` and the EM refinement on the rows
    #: in R^d (benchmarks/user_data.py times both paths), ...
    subspace_min_features: int = 1000
    #: ... except dense rows below this width with more than
    #: ``subspace_rows_ratio`` times the subspace's rows (``_scale.BASIS_ROWS``):
    #: that subspace is found on a subsample, which at high noise with many
    #: clusters misses the centroids' directions that all rows show, and the
    #: EM crawls from the poor start; there the d x d moment of all rows costs
    #: less (the user data page's second switch table). Sparse rows keep the
    #: subspace: their passes cost O(nnz K), the d x d path's
    #: eigendecomposition d^3 whatever the non-zeros.
    dense_subspace_min_features: int = 2000
    subspace_rows_ratio: int = 4
    subspace_extra: int = 5
    #: The exact solver that starts the EM runs in the top K + subspace_extra
    #: eigenvectors only when they hold at least this share of the K-th
    #: direction (its estimated squared cosine, ``_scale.spike_overlap``):
    #: at less, the solver's heads in R^d leave the span towards the
    #: centroids, and from the span the EM crawls (the user data page's
    #: many-clusters table, d = 1536, sigma = 0.45: 426 passes against 65).
    start_subspace_min_overlap: float = 0.5
    #: Dask rows never take the subspace path, which holds the rows'
    #: projections in memory: they run the d x d path up to this width.
    dask_max_features: int = 4000
    #: A cluster with less than this fraction of 1/K of the points is lost.
    lost_fraction: float = 0.1
    #: ``center="auto"`` fits the centred rows again when an uncentred fit
    #: loses clusters while the mean carries more than this share of the
    #: second moment (TF-IDF rows, benchmarks/user_data.py).
    share_to_retry: float = 0.05
    #: Relative spread of the squared row norms under which the rows lie on
    #: one sphere, where ``centroid_norms="auto"`` keeps equal norms.
    one_norm_rtol: float = 1e-3


DEFAULT_TUNING = Tuning()

# The solvers' defaults of tol and max_iter ("auto").
_DEFAULT_TOL = {"psgd": 1e-4, "full": 1e-6}
_DEFAULT_MAX_ITER = {"psgd": 5000, "full": 500}


def resolve_methods(solver, refine):
    """``(solver, refine)`` with ``"auto"`` resolved: the one place that chooses them.

    ``solver="auto"`` is the exact solver (``"full"``), the more accurate at
    every n; ``refine="auto"`` is the EM refinement after it and none after
    PSGD.
    """
    solver = "full" if solver == "auto" else solver
    refine = ("em" if solver == "full" else None) if refine == "auto" else refine
    return solver, refine


@dataclass(frozen=True)
class Settings:
    """The settings of one fit, resolved once from the parameters and the spectrum."""

    temperature: float
    reg_strength: float
    solver: str  #: "full" or "psgd"
    refine: object  #: "em" or None
    tol: float
    max_iter: int


@dataclass(frozen=True)
class FitResult:
    """Everything a fit found; the estimator's fitted attributes are its fields.

    Every array is float64 and in the data's coordinates (R^d, not the
    principal subspace); the estimator casts to the input's dtype.
    """

    centers: np.ndarray  #: (K, d) unit heads, signed towards their points
    mixture: object  #: the EM refinement's SphericalMixture, or None without it
    weights: np.ndarray  #: (K,) mixture weights, or label fractions without the EM
    moment_heads: np.ndarray  #: (K, d) ``M c_h`` at unit scale
    mean: np.ndarray  #: (d,) the mean subtracted (zeros when not centred)
    centred: bool
    settings: Settings
    noise: float  #: the spectrum's sigma
    scale: float  #: s
    n_iter: int  #: PSGD steps or the exact solver's iterations
    loss_curve: np.ndarray
    refine_n_iter: int  #: E steps of the EM refinement on all rows
    free_norms: object  #: True or False with the EM refinement, None without
    labels: object  #: predict's labels of the training rows (lazy for Dask rows)
    fractions: np.ndarray = field(repr=False)  #: (K,) size of each cluster
    #: (K,) the rows' mean responsibilities, each row once (a stream's rows'
    #: shares after the fit): the mixture's weights for unweighted rows; None
    #: for weighted rows or without a mixture
    row_fractions: object = field(default=None, repr=False)


@dataclass(frozen=True)
class _Prepared:
    """The rows a fit runs on, before the centring decision."""

    data: object  #: rows (the principal-subspace rows in high dimension)
    basis: object  #: (d, r) orthonormal basis of that subspace, or None
    spectrum: object  #: spectrum of ``data`` (not centred)
    mean: np.ndarray  #: mean of ``data``'s rows
    full_mean: np.ndarray  #: mean of the rows in R^d
    mean_sq: float  #: ||m||^2 at unit scale, m in R^d
    share: float  #: ||m||^2 / tr(M) at unit scale (:func:`mean_share`)


@dataclass
class _Run:
    """Outcome of one run of a solver."""

    heads: np.ndarray  #: (d, K) unit columns
    loss_curve: np.ndarray
    n_iter: int  #: PSGD steps, or iterations of the exact solver (all stages)
    converged: bool
    #: float used to rank runs, None until computed: the exact objective
    #: divided by 4^e (``_objective.objective_exponent``, the same for every run)
    objective: object
    #: the exact solver stopped at a gradient beyond float64's range
    gradient_overflow: bool = False


@dataclass
class _Kept:
    """The run a fit keeps (:func:`_kept_run`) and where it started."""

    run: _Run
    #: the spectral start's rows it ran from (None for the seeded start)
    sample: object
    #: the seeded start (:func:`seeded_start`), which replaces the runs; else None
    seeds: object


def fit_plan(rows, params, init=None):
    """Fit the rows; returns a :class:`FitResult`.

    Parameters
    ----------
    rows : pass-layer rows (``_passes.rows_from``), unit scale
    params : object
        The estimator's parameters as attributes (``n_clusters``,
        ``center``, ``solver``, ...), already validated.
    init : ndarray of shape (d, K) or None
        Validated starting heads (unit columns) when ``params.init`` is an array.

    The tuning values are :data:`DEFAULT_TUNING`'s, read at each call.
    """
    tuning = DEFAULT_TUNING
    K = params.n_clusters
    d = rows.n_features
    subspace = _in_subspace(rows, K, tuning)
    solver, refine = resolve_methods(params.solver, params.refine)
    if solver == "psgd":
        # Before any pass, at the width PSGD runs at (the subspace's).
        width = K + tuning.subspace_extra if subspace else d
        check_psgd_draws(params.batch_size, params.sequence_length, width, params.max_iter, tuning)
    if subspace:
        rows.check_finite()
    # Whether the start places K points for the free-norm mixture (K >= d;
    # never in the principal subspace, which needs d > K).
    seeded = _seeds_centres(params, d, init, refine)
    if K > d and not seeded:
        # Only heads that stay directions (no mixture with free norms to
        # carry seeded centres) are crowded by K > d.
        warn(
            f"n_clusters={K} > n_features={d}: the heads cannot be mutually "
            "orthogonal, so the clusters are separated by direction only "
            "approximately (the default init, refine and centroid_norms place "
            "K centres instead)."
        )
    if params.n_init == 1:
        # Nested subsamples: one draw serves the start's rows and the EM's
        # stages (one read of X on Dask data; _draws).
        rows.prepare_subsamples(
            first_draw(params.random_state, 2**31 - 1),
            max(
                [start_rows(K, d, rows.n_weighted)]
                + [
                    size
                    for free in (False, True)
                    for size in subsample_sizes(rows.n_weighted, mixture_parameters(d, K, free))
                ]
            ),
        )
    prepared = _prepare(rows, K, tuning)
    if params.center == "auto":
        centre = mean_dominates(prepared.mean_sq, prepared.spectrum.eigenvalues, K, tuning)
        # The rule's own terms: the mean is compared with the K-th direction
        # of the second moment, not with all of it (a mean of 1% of the
        # trace may outweigh that direction many times).
        reason = (
            "their common mean dominates the second moment: "
            f"{_ratio_text(prepared.mean_sq, prepared.spectrum.eigenvalues, K, tuning)} "
            f"(the rule: more than {tuning.center_ratio:g} times)"
        )
    else:
        centre, reason = bool(params.center), None
    # Only the warnings of the fit kept reach the caller (the retry below
    # discards the first).
    with deferred_warnings() as held:
        result = _fit_once(rows, prepared, params, init, centre, seeded, tuning)
    lost = int(np.sum(result.fractions < tuning.lost_fraction / K))
    retried = False
    if (
        params.center == "auto"
        and not centre
        and lost
        and prepared.share > tuning.share_to_retry
        and not seeded
    ):
        # The uncentred fit lost clusters to a common mean below the
        # ratio's threshold (TF-IDF rows, say): fit the centred rows too, and
        # keep the centred fit unless the uncentred one is the more likely
        # (both mixtures are K spherical Gaussians in R^d, two local optima
        # of one model: a small true cluster is lost by a fit at its optimum).
        # Not after the seeded start: its centres are any K points of R^d,
        # placed by k-means++ from the rows' distances to each other (the same
        # about any origin), so that the mean pulls no head, and the centred
        # fit is the same model from the same start, to the same optimum
        # (math.md section 7, "Centring or not").
        if params.verbose:
            print(
                f"[AttentionClustering] center='auto': the fit lost {lost} of the "
                f"n_clusters={K} clusters; fitting the centred rows too"
            )
        with deferred_warnings() as held_centred:
            centred = _fit_once(rows, prepared, params, init, True, seeded, tuning)
        retried = True
        if _more_likely(rows, result, centred):
            replay(held)
        else:
            replay(held_centred)
            centre, result = True, centred
            reason = f"the uncentred fit lost {lost} of the n_clusters={K} clusters"
        if params.verbose:
            kept = "centred fit" if centre else "uncentred fit, the more likely on the rows"
            print(f"[AttentionClustering] center='auto': kept the {kept}")
    else:
        replay(held)
    if params.center == "auto" and centre:
        warn(
            f"center='auto' centred the data ({reason}; the mean carries {prepared.share:.0%} "
            "of the second moment): the model clusters directions from the origin, and now "
            "finds directions from the mean. If the features have different units, put a "
            "StandardScaler before the estimator (see the user guide, 'When to use it'); "
            "pass center=True to centre without this warning.",
            UserWarning,
        )
    _warn_lost_clusters(result, K, prepared.share, tuning, retried, seeded)
    return result


def _more_likely(rows, result, other):
    """Whether ``result``'s EM mixture is more likely on ``rows`` (as given)
    than ``other``'s: their mean log-likelihoods, one pass each (False
    without the EM refinement)."""
    if result.mixture is None or other.mixture is None:
        return False
    a, b = (rows.weighted_mean(block_log_likelihoods, f.mixture) for f in (result, other))
    return a > b


def information_criterion(rows, mixture, free_norms, centred, penalty):
    """``-2 sum_i log p(x_i) + penalty(p, n)`` of ``mixture`` on ``rows`` as
    given (weighted by their sample weights), p its free parameters
    (:meth:`~attention_cluster._model.SphericalMixture.n_parameters`,
    ``math.md`` section 7), n the count of rows of positive weight (rows
    of weight zero are left out, as from the fit): one pass (one Dask
    computation). The estimator's ``bic`` and ``aic``, and
    ``n_clusters="auto"``'s test of one cluster (where n counts rows, not
    weights: a row of weight w is not w rows there, as it is for the
    dynamics)."""
    mean = rows.weighted_mean(block_log_likelihoods, mixture)
    n = rows.n_weighted
    return float(-2.0 * n * mean + penalty(mixture.n_parameters(free_norms, centred), n))


def bic_penalty(n_parameters, n_samples):
    """BIC's penalty ``p log n`` (Schwarz 1978)."""
    return n_parameters * np.log(n_samples)


def block_log_likelihoods(rows, mixture):
    """``log p(x)`` (float64) of every row of a block under ``mixture`` (see
    :mod:`._model`): ``score_samples``' values, and ``center="auto"``'s
    comparison of two fits.

    ``-inf`` for rows beyond float64's range at the mixture's unit scale
    (:func:`near_terms`), whose density is below any float.
    """
    far, P, q = near_terms(rows, mixture)
    out = np.full(far.shape, -np.inf)
    out[~far] = mixture.log_likelihoods(P, q)
    return out


def near_terms(rows, mixture):
    """``(far, P, q)``: :func:`_passes.unit_terms` of a block's rows, and
    which rows are beyond float64's range at the mixture's unit scale.

    Those rows' unit-scale terms, or their logits (products with the heads
    over a variance down to ``1e-12``), are not finite numbers; the other
    rows' ``P`` and ``q`` are returned, in order.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        P, q = unit_terms(rows, mixture.centers, mixture.offset, mixture.scale)
        top = np.max(mixture.logits(P), axis=1)
    far = ~(np.isfinite(P).all(axis=1) & np.isfinite(top))
    return far, P[~far], q[~far]


def check_width(n_features, in_memory):
    """Refuse Dask rows too wide for the d x d moment, before any pass (also
    before ``n_clusters="auto"``'s dynamics, and before a Dask fit's weights
    are checked): the estimator calls it before :func:`fit_plan` and
    ``count_clusters``."""
    d, limit = n_features, DEFAULT_TUNING.dask_max_features
    if not in_memory and d >= limit:
        raise ValueError(
            f"Dask input with n_features={d} >= {limit} is not supported: "
            "the principal-subspace path that wide data need holds the rows' projections "
            "in memory. Reduce the features first (dask_ml.decomposition.TruncatedSVD or "
            "PCA), or pass X.compute() if it fits in memory."
        )


def _in_subspace(rows, n_clusters, tuning):
    """Whether a fit runs in the principal subspace (never for Dask rows)."""
    d = rows.n_features
    if not (rows.in_memory and d > n_clusters + tuning.subspace_extra):
        return False
    # Rows of positive weight: rows of weight zero change no choice of the path.
    many_rows = rows.n_weighted > tuning.subspace_rows_ratio * BASIS_ROWS
    minimum = (
        tuning.dense_subspace_min_features
        if many_rows and not rows.sparse
        else tuning.subspace_min_features
    )
    return d >= minimum


def _prepare(data, K, tuning):
    """The rows the solvers see, their spectrum, and the common mean's weight.

    In high dimension the rows are replaced by their coordinates in the
    principal subspace of dimension K + ``subspace_extra``
    (:func:`~attention_cluster._scale.principal_basis`), computed without a
    d x d matrix. ``||m||^2`` and ``share`` ``||m||^2 / tr(M)`` of the mean
    m, at unit scale, with the spectrum's eigenvalues, are what
    ``center="auto"`` reads (:func:`mean_dominates`, :func:`mean_share`;
    in the subspace too, m in R^d and the trace of M in R^d,
    ``Spectrum.completed``, so that the choice is the d x d path's).
    """
    if _in_subspace(data, K, tuning):
        full_mean = data.mean()
        basis = principal_basis(data, K + tuning.subspace_extra, K)
        given, data = data, _projected(data, basis)
        mean = basis.T @ full_mean
        spectrum = estimate_spectrum(data, K, full=given)
    else:
        # The spectrum's pass comes first: it finds NaN and infinity
        # before any other pass, and the rows' mean in the same read.
        basis = None
        peak, moment, mean = data.moments()
        full_mean = mean
        spectrum = estimate_spectrum(data, K, moment=(peak, moment))
    m = full_mean / spectrum.scale
    mean_sq = float(m @ m)
    return _Prepared(
        data=data,
        basis=basis,
        spectrum=spectrum,
        mean=mean,
        full_mean=full_mean,
        mean_sq=mean_sq,
        share=mean_share(mean_sq, float(np.sum(spectrum.completed()))),
    )


def mean_dominates(mean_sq, eigenvalues, n_clusters, tuning):
    """``center="auto"``'s rule: whether the rows' common mean m dominates their
    second moment M, ``||m||^2 > center_ratio lambda_K(M)`` (``math.md``
    section 7, "Centring or not"; ``center_ratio`` of ``tuning``).

    ``mean_sq`` is ``||m||^2`` and ``eigenvalues`` are M's, descending, at
    one scale (the ratio ``||m||^2 / lambda_K`` does not depend on it);
    lambda_K is the last of them when K exceeds their number, counts as
    zero when rounding put it below, and at zero leaves the ratio infinite
    unless m = 0. The fit reads them on all rows at unit scale (:func:`_prepare`);
    ``n_clusters="auto"`` on the dynamics' rows, at the count it would keep
    (``_choose_k.count_clusters``).
    """
    return mean_ratio(mean_sq, eigenvalues, n_clusters) > tuning.center_ratio


def mean_ratio(mean_sq, eigenvalues, n_clusters):
    """``||m||^2 / lambda_K(M)``, the ratio :func:`mean_dominates` compares
    with ``center_ratio`` (its arguments, and its conventions at
    ``lambda_K = 0``)."""
    kth = max(float(eigenvalues[min(n_clusters, len(eigenvalues)) - 1]), 0.0)
    return mean_sq / kth if kth > 0 else (np.inf if mean_sq > 0 else 0.0)


def _ratio_text(mean_sq, eigenvalues, n_clusters, tuning):
    """What :func:`mean_dominates` read, for a message: the ratio
    :func:`mean_ratio` to three figures, or a lower bound where lambda_K is
    within the moment's rounding (about m eps lambda_1, m the eigenvalues
    given: rows far from zero with little spread), whose figures would be
    that rounding's (sparse and dense rows gave 8e15 and 1.2e16 for one
    data set). Where that bound is no more than the rule's, lambda_K is
    zero to the rounding (rows that span fewer than K directions), and the
    rule took any mean for dominant: the message says so."""
    eigenvalues = np.asarray(eigenvalues, dtype=np.float64)
    kth = float(eigenvalues[min(n_clusters, len(eigenvalues)) - 1])
    floor = len(eigenvalues) * np.finfo(np.float64).eps * float(eigenvalues[0])
    eigenvalue = "the moment's n_clusters-th largest eigenvalue"
    if kth > floor:
        ratio = mean_ratio(mean_sq, eigenvalues, n_clusters)
        return f"its squared norm is {ratio:.3g} times {eigenvalue}"
    if floor > 0 and mean_sq / floor > tuning.center_ratio:
        return f"its squared norm is more than {mean_sq / floor:.1g} times {eigenvalue}"
    return (
        f"{eigenvalue} is zero to the moment's rounding (the rows span fewer than "
        "n_clusters directions), and any mean outweighs it"
    )


def mean_share(mean_sq, trace):
    """The share ``||m||^2 / tr(M)`` of the second moment M that the rows'
    common mean m carries (0 for rows all zero), which ``center="auto"``
    compares with ``share_to_retry`` (``math.md`` section 7, "Centring or
    not"): where the fit refits the centred rows, and where
    ``n_clusters="auto"`` counts on them too."""
    return mean_sq / trace if trace > 0 else 0.0


# The share of the centred rows' second moment their own mean may carry
# before :func:`_centred` takes it as the first mean's rounding.
_RESIDUAL_SHARE = 1e-6


def _centred(prepared, K):
    """``(rows, spectrum, prepared)``: the rows in R^d about their mean, their
    spectrum, and ``prepared`` with the mean the rows are centred on.

    The mean, a sum divided by the weight, is rounded at the magnitude of
    the sum: a column far from zero beside small ones (a constant 1e20
    beside features of 1) comes out of the subtraction as the mean's
    rounding, ulps of 1e20 that dwarf the features and would be fitted as
    signal. The pass that reads the centred rows' spectrum also reads
    their mean r (``moments``, one read), zero but for that rounding; when
    it carries more than ``_RESIDUAL_SHARE`` of their second moment, the
    rows are centred again on ``mean + r`` (a second pass, a corrected
    two-pass mean): the mean of the rows ``x - m`` is computed without the
    magnitude of ``m`` (``math.md`` section 7, "Centring or not").
    """
    data = prepared.data.centred(prepared.mean)
    peak, moment, residual = data.moments()
    if peak > 0.0:
        shift = residual / peak
        if float(shift @ shift) > _RESIDUAL_SHARE * float(np.trace(moment)):
            mean = prepared.mean + residual
            prepared = replace(prepared, mean=mean, full_mean=mean)
            data = prepared.data.centred(mean)
            peak, moment, _ = data.moments()
    return data, estimate_spectrum(data, K, moment=(peak, moment)), prepared


def _fit_once(given, prepared, params, init, centre, seeded, tuning):
    """One fit of the prepared rows, centred or not; ``seeded``: whether its
    start is :func:`seeded_start`'s (:func:`_seeds_centres`, decided by
    :func:`fit_plan`)."""
    K = params.n_clusters
    data, basis, spectrum = prepared.data, prepared.basis, prepared.spectrum
    if centre:
        if basis is None:
            data, spectrum, prepared = _centred(prepared, K)
        else:
            data = data.centred(prepared.mean)
            spectrum = estimate_spectrum(data, K, full=given.centred(prepared.full_mean))
    _check_scale(spectrum.scale, "their mean" if centre else "the origin")
    if basis is not None and init is not None:
        init = basis.T @ init
        init /= np.maximum(np.linalg.norm(init, axis=0), np.finfo(np.float64).tiny)
    settings = _settings(params, given.n_features, spectrum)
    unit = data.rescaled(spectrum.scale)
    rng = check_random_state(params.random_state)
    kept = _kept_run(params, given, unit, seeded, spectrum, settings, init, rng, tuning)
    best = kept.run
    if not best.converged:
        _warn_not_converged(best, settings, params)
    mean = prepared.full_mean if centre else np.zeros_like(prepared.full_mean)
    refined = None
    if settings.refine == "em":
        refined = _refined(
            params, given, prepared, unit, spectrum, settings, kept, rng, centre, mean, tuning
        )
        if refined is None:  # beyond float64's range: the start's heads
            settings = replace(settings, refine=None)
    if refined is not None:
        mixture, moment_heads, refine_n_iter, free_norms = refined
        centers = mixture.centers
    else:
        centers, moment_heads = _unrefined(unit, basis, spectrum, best)
        mixture, refine_n_iter, free_norms = None, 0, None
    rule = predict_rule(centers, mixture, mean, given.dtype)
    # The labels' shares decide the lost clusters (center="auto"'s retry and
    # its warning) for every kind of rows alike: on Dask rows, whose labels
    # stay lazy, counting them is one pass of its own.
    labels, counts = given.labels_and_counts(*rule)
    fractions = counts / np.sum(counts)
    weights = fractions if mixture is None else np.exp(mixture.log_weights)
    return FitResult(
        centers=centers,
        mixture=mixture,
        weights=weights,
        moment_heads=moment_heads,
        mean=mean,
        centred=bool(centre),
        settings=settings,
        noise=spectrum.noise,
        scale=spectrum.scale,
        n_iter=best.n_iter,
        loss_curve=best.loss_curve,
        refine_n_iter=refine_n_iter,
        free_norms=free_norms,
        labels=labels,
        # A cluster is as large as the smaller of its share of the labels and
        # its fitted weight (EM can empty a cluster that still wins a few points).
        fractions=np.minimum(fractions, weights),
        # Unweighted rows' mean responsibilities are the fitted weights.
        row_fractions=weights if given.sample_weight is None and mixture is not None else None,
    )


def _check_scale(scale, where):
    """Refuse a scale the passes cannot divide the rows by (``where``: about
    what the rows spread), nor one beyond float64's range."""
    with np.errstate(over="ignore"):
        inverse = 1.0 / scale
    # Every pass divides the rows by the scale (``_passes``).
    if not np.isfinite(inverse):
        raise ScaleError(
            f"X's rows spread about {where} by about {scale:.3g}, a scale whose "
            "inverse float64 cannot hold (below about 5.6e-309): the fit divides the rows "
            "by it. Multiply X by a power of two: 2**k * X has the partition of X."
        )
    if not np.isfinite(scale):
        raise _too_large(where)


def _kept_run(params, given, unit, seeded, spectrum, settings, init, rng, tuning):
    """The solver's runs on the unit-scale rows ``unit`` and the one of least
    objective, or the seeded start where it places the centres instead
    (``seeded``): a :class:`_Kept`."""
    K = params.n_clusters
    n_init = params.n_init
    # The start's rows: their count reads the width of the rows whose
    # second moment gave the eigenvectors (all of X's features, also when
    # the fit runs in the principal subspace).
    start_size = start_rows(K, given.n_features, given.n_weighted)
    if n_init > 1 and not seeded and not _runs_can_differ(params, unit, settings, start_size):
        # As KMeans does with an explicit start: one run, and say why.
        warn(
            f"n_init={n_init} would repeat one identical run: on data of this "
            "size the exact solver from a deterministic start (init='spectral' "
            "or an array) draws nothing at random. Performing one run; pass "
            "init='random' for different starts."
        )
        n_init = 1
    best = seeds = best_sample = None
    if seeded:
        # K points among the rows for the free-norm mixture, no attention
        # solver (see _seeds_centres); n_init > 1 seedings, as KMeans' n_init,
        # the one of least inertia kept.
        seeds = seeded_start(
            unit.subsample(rng, SUBSAMPLE),
            K,
            rng,
            min_seedings=n_init,
            max_iter=settings.max_iter,
        )
        best, n_init = _Run(seeds.heads, np.empty(0), seeds.n_iter, True, None), 0
    for index in range(n_init):
        # The spectral start's rows, on which the exact solver's first stage runs too.
        sample = unit.subsample(rng, start_size)
        start = _start(params, sample, spectrum, init, rng)
        run = _run(params, unit, sample, spectrum, settings, start, rng, index, n_init > 1, tuning)
        if best is None or run.objective < best.objective:
            best, best_sample = run, sample
    return _Kept(best, best_sample, seeds)


def _refined(params, given, prepared, unit, spectrum, settings, kept, rng, centre, mean, tuning):
    """The EM refinement from the kept run's heads (``math.md`` section 7):
    ``(mixture, moment_heads, n_iter, free_norms)``, the mixture about
    ``mean`` in X's units; None, with a ConvergenceWarning, where the
    mixture passed float64's range (the caller keeps the start's heads)."""
    basis = prepared.basis
    rows, heads, mean_sq = unit, kept.run.heads, float(np.trace(spectrum.moment))
    # centroid_norms="auto" asks whether the rows as given have one norm,
    # read at the fit's scale (the fourth powers of rows as given
    # underflow, or overflow, far from 1, and the test would depend on a
    # power of two): a pass of its own, unless one formed their moments.
    # Only an uncentred fit asks: centred rows of one norm lie on a sphere
    # about minus the mean, not about the model's origin, and their
    # clusters' means lie at different distances from it (iris after
    # Normalizer: ARI 0.57 with equal norms, one cluster empty, against
    # 0.90 with free ones; math.md section 7, "One norm per centroid").
    as_given, given_moments = given.rescaled(spectrum.scale), None
    if basis is not None:
        # In high dimension the EM runs on the rows in R^d, from the
        # subspace's heads, which it moves out of the principal subspace:
        # that subspace is estimated with the noise, and at high noise a
        # fit confined to it loses most of its accuracy
        # (benchmarks/user_data.py). From here on the centres are in R^d.
        rows = (given.centred(prepared.full_mean) if centre else given).rescaled(spectrum.scale)
        moments = rows.norm_moments()
        heads, mean_sq = basis @ kept.run.heads, moments[0]
        if not centre:
            # These are the rows as given at the fit's scale: this pass.
            given_moments = moments
    # The heads are turned towards their points on the start's rows,
    # which are in R^d unless the start ran in the principal subspace.
    sign_rows = kept.sample if basis is None else None
    # Rows many scales from the others at the rows' scale (light rows of
    # sample weights whose ratios reach 1e150) give the mixture's terms
    # (r_k <mu_k, x> / tau^2, r_k^2) beyond float64's range: its
    # parameters then come out infinite, NaN or off the sphere, which the
    # mixture's checks refuse, and the fit keeps the heads the refinement
    # started from (the solver's, or the seeded start's at K >= d).
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fit = _refine(
            params,
            rows,
            spectrum,
            heads,
            settings,
            rng,
            mean_sq,
            None
            if centre
            else lambda: _one_norm(
                as_given.norm_moments() if given_moments is None else given_moments,
                tuning.one_norm_rtol,
            ),
            kept.seeds,
            sign_rows,
        )
        try:
            mixture = SphericalMixture.from_heads(
                fit.heads, fit.radii, fit.variance, _log(fit.weights), mean_sq, mean, spectrum.scale
            )
        except ValueError:
            warn(
                "The EM refinement's mixture passed float64's range (rows many scales "
                "from the others at the rows' scale, as with sample weights whose ratios "
                "reach 1e150): the fit keeps the heads the refinement started from "
                "(refine_=None) and fits no likelihood. Bring the weights' ratios within "
                "range.",
                ConvergenceWarning,
            )
            return None
    moment_heads = _moment_heads(rows, unit, spectrum, mixture.centers)
    return mixture, moment_heads, fit.n_iter, bool(fit.free)


def _unrefined(unit, basis, spectrum, best):
    """The kept run's heads as the centres, without the refinement:
    ``(centers, moment_heads)``, in R^d."""
    # Each head turned towards the points it wins, as the EM's start is
    # (the rows' mean squared norm at unit scale: the trace of M / s^2).
    signs = head_signs(unit, best.heads, float(np.sum(spectrum.eigenvalues)))
    centers = (best.heads * signs).T
    moment_heads = _moment_heads(unit, unit, spectrum, centers)
    if basis is not None:
        # Heads in the principal subspace are heads in R^d.
        centers, moment_heads = centers @ basis.T, moment_heads @ basis.T
    return centers, moment_heads


def _warn_not_converged(best, settings, params):
    """The ConvergenceWarning of a run whose solver stopped short of tol, saying why."""
    # The exact solver's last stage (its curve: the start, then each
    # iteration) stops before max_iter only at a gradient beyond float64,
    # or when no step along the gradient decreases the objective
    # (_optimize.minimize_on_spheres).
    taken = len(best.loss_curve) - 1
    if best.gradient_overflow:
        why = (
            f"it stopped after {taken} iterations, as the objective's gradient passed "
            "float64's range (rows many scales from the others at the rows' scale, as "
            "with sample weights whose ratios reach 1e90); bring the weights' ratios "
            "within range."
        )
    elif settings.solver == "full" and taken < settings.max_iter:
        why = (
            f"it stopped after {taken} iterations, as no step along the gradient "
            "decreased the objective (the line search failed: at this tol the decrease "
            "is within the objective's rounding); increase tol."
        )
    else:
        what = "steps" if settings.solver == "psgd" else "iterations"
        why = f"it reached max_iter={settings.max_iter} {what}; increase max_iter or tol."
        if settings.solver == "psgd" and not 0.1 <= params.learning_rate <= 10.0:
            # Steps relative to the risk's curvature: an order of
            # magnitude or more from 1, long ones overshoot and short
            # ones crawl (300 steps at 1, 23000 at 300).
            why += (
                f" learning_rate={params.learning_rate!r} sets steps relative to the risk's "
                "curvature: an order of magnitude from 1.0, the default, they overshoot "
                "(above) or crawl (below)."
            )
    target = f"tol={settings.tol}"
    if settings.solver == "full" and settings.refine is not None:
        # It only starts the EM refinement (_exact.START_TOL).
        target += f" (x {START_TOL:g} before the EM refinement)"
    warn(f"The {settings.solver} solver did not reach {target}: {why}", ConvergenceWarning)


def _log(weights):
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(weights, dtype=np.float64))


def _moment_heads(rows, unit, spectrum, centers):
    """``M c_h`` (rows) at unit scale: from the spectrum's moment when ``rows``
    are the rows it was taken on, else by one pass."""
    if rows is unit:
        return (spectrum.moment @ centers.T).T
    return rows.moment_action(centers.T).T


def predict_rule(centers, mixture, mean, dtype=np.float64):
    """The labels' rule (:class:`_passes.LabelRule`): ``argmax_h (gain_h / s) <x - m, c_h> + bias_h``.

    ``centers`` and ``mean`` are taken as the fitted attributes keep them,
    in X's ``dtype`` (``cluster_centers_``, ``mean_``), so that the fit's
    labels and :meth:`~AttentionClustering.predict`'s come from the same
    numbers.

    Without the EM refinement, ``argmax_h <x - m, c_h>`` (gain 1, scale 1);
    with it, the fitted mixture's posterior mode, ``log pi_h + (r_h <y,
    mu_h> - r_h^2 / 2) / tau^2`` with ``y = (x - m) / s`` (``math.md``
    section 7; the logits of :meth:`SphericalMixture.logits`), whose gain
    ``r_h / tau^2`` and bias are at unit scale. The rows' ``labels`` pass
    puts the centring in the bias and multiplies float32 rows about ``m``
    (:meth:`_passes.DenseRows.labels`).
    """
    centers, mean = (
        np.asarray(a, dtype=np.float64).astype(dtype).astype(np.float64) for a in (centers, mean)
    )
    K = len(centers)
    if mixture is None:
        return LabelRule(centers, np.ones(K), np.zeros(K), mean, 1.0)
    r, v = mixture.radii, mixture.variance
    return LabelRule(centers, r / v, mixture.log_weights - 0.5 * r * r / v, mean, mixture.scale)


def _settings(params, d, spectrum):
    """Every data-dependent setting, resolved once from the spectrum."""
    K, L = params.n_clusters, params.sequence_length
    if isinstance(params.temperature, str):
        temperature = auto_temperature(
            spectrum.noise, L, n_clusters=K, n_features=d, eigenvalues=spectrum.completed()
        )
    else:
        temperature = float(params.temperature)
    if params.regularization is None:
        reg_strength = 0.0
    elif isinstance(params.reg_strength, str):
        reg_strength = auto_reg_strength(
            spectrum.noise,
            temperature,
            K,
            params.regularization,
            spectrum.eigenvalues[min(K, d) - 1],
        )
    else:
        reg_strength = float(params.reg_strength)
    solver, refine = resolve_methods(params.solver, params.refine)
    return Settings(
        temperature=temperature,
        reg_strength=reg_strength,
        solver=solver,
        refine=refine,
        tol=_DEFAULT_TOL[solver] if isinstance(params.tol, str) else params.tol,
        max_iter=_DEFAULT_MAX_ITER[solver] if isinstance(params.max_iter, str) else params.max_iter,
    )


def _runs_can_differ(params, data, settings, start_size):
    """Whether two runs can differ: only through what they draw at random.

    They draw a random start or PSGD's sequences; the spectral start, its
    rows when the data have more than ``start_size``
    (:func:`~attention_cluster._spectral.start_rows`) and its heads beyond
    d; the exact solver from an array, the rows of its first stage, which
    it takes from a subsample above ``WARM_START_ROWS`` rows alone
    (:func:`~attention_cluster._exact.solve_exact`).
    """
    if settings.solver == "psgd" or isinstance(params.init, str) and params.init == "random":
        return True
    if isinstance(params.init, str):
        return data.n_weighted > start_size or params.n_clusters > data.n_features
    return data.n_weighted > WARM_START_ROWS


def _seeds_centres(params, n_features, init, refine):
    """Whether the start is seeded (:func:`seeded_start`) instead of spectral.

    When ``n_clusters >= n_features`` the spectrum has fewer than K
    directions: the default start then places K points among the rows
    (k-means++ on a subsample), which the mixture with one norm per
    centroid carries as its centres ``mean_ + s r_k mu_k`` (math.md
    section 7); the attention solver, whose heads are directions, is
    skipped. Only with the EM refinement and norms that may be free.
    """
    return (
        init is None
        and params.init == "spectral"
        and refine == "em"
        and params.centroid_norms != "equal"
        and 1 < params.n_clusters
        and n_features <= params.n_clusters
    )


def _start(params, sample, spectrum, init, rng):
    """The starting heads (d x K) of the solvers' runs: the one place that chooses them
    (the free-norm mixture's seeded centres, which no solver runs from, are
    :func:`_seeds_centres`' choice in :func:`fit_plan`).

    ``init`` is the validated array (unit columns) or None; ``"random"``
    draws heads uniformly on the spheres; ``"spectral"`` rotates the top
    eigenvectors of the second moment on the rows of ``sample``.
    """
    if init is not None:
        return init.copy()
    if params.init == "random":
        return random_heads(rng, sample.n_features, params.n_clusters)
    return spectral_heads(
        sample,
        spectrum.eigenvectors,
        params.n_clusters,
        params.regularization,
        rng,
        params.verbose,
    )


def _run(params, unit, sample, spectrum, settings, start, rng, index, rank, tuning):
    """One run of the chosen solver from ``start``; returns a :class:`_Run`.

    ``rank``: the run is one of several, ranked by the exact objective on
    all rows (computed here when the solver did not end on all rows).
    """
    if settings.solver == "psgd":
        run = _psgd(params, unit, start, spectrum, settings, rng, index, tuning)
    else:
        # The exact solver's last stage is on all rows unless the
        # refinement follows, which makes its own passes over all rows.
        polish = settings.refine is None
        basis = None if polish else _start_basis(params, sample, spectrum, tuning, unit.n_weighted)
        exact = dict(
            regularization=params.regularization,
            reg_strength=settings.reg_strength,
            tol=settings.tol,
            max_iter=settings.max_iter,
        )
        if basis is None:
            solution = solve_exact(
                unit,
                start,
                settings.temperature,
                params.sequence_length,
                moment=spectrum.moment,
                sample=sample,
                polish=polish,
                **exact,
            )
            heads, where = solution.heads, f"{sample.n_samples} rows"
        else:
            # The solver only starts the EM: it runs on the start's rows in
            # the principal subspace that holds the spectral start (see
            # _start_basis), with their own moment there, and its heads
            # are lifted back to R^d.
            rows = _projected(sample, basis)
            solution = solve_exact(
                rows,
                normalize_heads(basis.T @ start),
                settings.temperature,
                params.sequence_length,
                sample=rows,
                polish=False,
                **exact,
            )
            heads = normalize_heads(basis @ solution.heads)
            where = (
                f"{sample.n_samples} rows in the principal subspace of dimension {basis.shape[1]}"
            )
        # The solver's objective is scaled (by 1 at every default); its
        # curve is reported in the objective's units.
        curve = unscaled(solution.objective_curve, solution.exponent)
        if params.verbose:
            stages = f"{solution.n_iter} iterations on " + ("all rows" if basis is None else where)
            if solution.n_iter_warm:
                stages = f"{solution.n_iter_warm} iterations on {where}" + (
                    f", then {stages}" if polish else ""
                )
            print(
                f"[AttentionClustering] init {index}: exact solver, {stages}, objective {curve[-1]:.6g}"
            )
        on_all_rows = basis is None and (polish or not solution.n_iter_warm)
        run = _Run(
            heads,
            curve,
            solution.n_iter + solution.n_iter_warm,
            solution.converged,
            float(solution.objective_curve[-1]) if on_all_rows else None,
            solution.gradient_overflow,
        )
    if rank and run.objective is None:
        # Rank the runs by the exact objective on all rows.
        exponent = objective_exponent(
            settings.temperature, run.heads.shape[1], params.sequence_length, settings.reg_strength
        )
        run.objective = exact_objective(
            unit,
            spectrum.moment,
            run.heads,
            settings.temperature,
            params.sequence_length,
            params.regularization,
            settings.reg_strength,
            exponent,
        )[0]
        if params.verbose:
            print(
                f"[AttentionClustering] init {index}: exact objective on all rows "
                f"{float(unscaled(run.objective, exponent)):.6g}"
            )
    return run


def _start_basis(params, sample, spectrum, tuning, n_rows):
    """The top ``K + subspace_extra`` eigenvectors of the second moment, where
    the exact solver that starts the EM runs, or None to run it in R^d.

    The spectral start lies in the top-K eigenspace, and as L grows the
    risk's minimisers span it (``math.md`` section 3): with the EM to
    follow, the solver gains nothing from the other directions, whose terms
    cost O(d K) per row and per step, and the start's rows take one product
    to enter the subspace (a fifth less time at d = 64 to 768, n = 1e5,
    benchmarks/peers.py). Where the subspace does not halve d at least, that
    product costs what it saves (the paper's d = 10, K = 2: as fast at n =
    1e5, 8% slower at 1e4), and R^d is kept; so are other starts (random,
    or the caller's heads), rows not in memory, and a fit already in the
    principal subspace (its d is K + subspace_extra). And R^d is kept where
    the span holds less than ``start_subspace_min_overlap`` of the K-th
    direction, estimated from its eigenvalue over the noise on the
    ``n_rows`` rows of positive weight (``_scale.spike_overlap``).
    """
    K, d = params.n_clusters, spectrum.eigenvectors.shape[0]
    if not (isinstance(params.init, str) and params.init == "spectral" and sample.in_memory):
        return None
    r = K + tuning.subspace_extra
    if d < 2 * r:
        return None
    overlap = spike_overlap(spectrum.eigenvalues[K - 1], spectrum.noise**2, d, n_rows)
    if overlap < tuning.start_subspace_min_overlap:
        return None
    return np.ascontiguousarray(spectrum.eigenvectors[:, :r])


def _projected(rows, basis):
    """The rows' coordinates in ``basis`` (d x r, orthonormal columns), as in-memory rows.

    Coordinates beyond float64 (rows whose norms are, at their scale) are
    refused with a ValueError: no scale of the fit could hold them.
    """
    coordinates = rows.project(basis)
    if not np.isfinite(coordinates).all():
        raise _too_large()
    return DenseRows(
        coordinates, rows.sample_weight, n_threads=rows.n_threads, compiled=rows.compiled
    )


class ScaleError(ValueError):
    """The fit's refusal of rows whose spread (its scale), or the scale's
    inverse, float64 cannot hold: raised after the spectrum, before the
    fit's work."""


def _too_large(where="the origin"):
    """The :class:`ScaleError` of rows that spread beyond float64's largest number."""
    return ScaleError(
        f"X's rows spread about {where} by more than float64's largest number (about "
        "1.8e308), a scale it cannot hold: the fit divides the rows by it. Multiply X by "
        "a power of two: 2**-k * X has the partition of X."
    )


def _refine(
    params,
    unit,
    spectrum,
    heads,
    settings,
    rng,
    mean_sq,
    one_norm,
    seeds=None,
    sign_rows=None,
):
    """The EM refinement (math.md section 7); returns the :class:`~attention_cluster._mixture.MixtureFit`.

    ``mean_sq`` is the rows' mean ``||x / s||^2``; ``one_norm()`` (None for
    a centred fit), whether the rows as given have one norm
    (:func:`_one_norm`), is asked by ``centroid_norms="auto"`` (see
    :func:`refine_heads`); ``seeds``, a
    seeded start (:func:`seeded_start`), gives the starting norms and
    noise; ``sign_rows``, rows on which the heads' signs are found (see
    :func:`refine_heads`).
    """
    fit = refine_heads(
        unit,
        heads,
        mean_sq,
        spectrum.noise if seeds is None else seeds.noise,
        norms=params.centroid_norms,
        radii=None if seeds is None else seeds.radii,
        spherical_rows=one_norm,
        sign_rows=sign_rows,
        max_iter=settings.max_iter,
        random_state=rng,
        verbose=params.verbose,
    )
    if not fit.converged:
        warn(
            f"The EM refinement did not converge in max_iter={settings.max_iter} "
            "E steps; increase max_iter.",
            ConvergenceWarning,
        )
    if params.verbose:
        passes = f"{fit.n_iter} pass{'' if fit.n_iter == 1 else 'es'} over all rows"
        print(
            f"[AttentionClustering] EM refinement: {passes}"
            + (
                f", mean log-likelihood {fit.log_likelihood[-1]:.6g}"
                if fit.log_likelihood.size
                else ""
            )
        )
    return fit


def _one_norm(moments, rtol):
    """Whether rows all have one norm, from their :meth:`norm_moments`
    ``(m2, m4)``: the spread of ``||x||^2`` under ``rtol`` of its mean (unit
    rows in float32 included)."""
    m2, m4 = moments
    return m2 > 0.0 and np.sqrt(max(m4 - m2 * m2, 0.0)) <= rtol * m2


def _tail_average(chunk_sums, fallback):
    """Polyak-Ruppert average of the iterates over the later half of the run.

    ``chunk_sums[i]`` is the sum of the heads after each step of chunk i:
    the sum over the last ``ceil(c / 2)`` of the c chunks, each head
    normalised (``math.md`` section 3, "Steps"). Averaging removes most of
    the stochastic-gradient jitter around the minimiser; the first half is
    dropped as the transient.
    """
    avg = np.sum(chunk_sums[len(chunk_sums) // 2 :], axis=0)
    norms = np.linalg.norm(avg, axis=0)
    ok = norms > 0
    return np.where(ok, avg / np.where(ok, norms, 1.0), fallback)


def check_psgd_draws(
    batch_size, sequence_length, n_features, max_iter, tuning=DEFAULT_TUNING, narrowest=False
):
    """Refuse PSGD parameters whose drawn tokens would pass
    ``DENSE_LIMIT_BYTES``: :func:`_psgd` holds one chunk of steps' tokens,
    ``min(steps_per_check, max_iter) * batch_size * sequence_length`` rows
    of ``n_features`` float64 numbers: checked before X is read at the
    narrowest width PSGD may run at (the estimator's parameters' check),
    then by :func:`fit_plan`, before any pass, at the width it runs at (the
    principal subspace's in high dimension). batch_size=10**6 asked NumPy
    for 186 GiB at d = 5, and its MemoryError named no parameter.
    ``narrowest``: ``n_features`` is the narrowest width, and the message
    says "at least"."""
    steps = (
        tuning.steps_per_check
        if isinstance(max_iter, str)
        else min(tuning.steps_per_check, max_iter)
    )
    size = 8.0 * steps * batch_size * sequence_length * n_features
    if size > DENSE_LIMIT_BYTES:
        at_least, which = ("at least ", " (the narrowest it may run at)") if narrowest else ("", "")
        raise InvalidParameterError(
            f"solver='psgd' draws {steps} steps of batch_size={batch_size} sequences of "
            f"sequence_length={sequence_length} tokens at a time, {at_least}"
            f"{size / 2**30:.3g} GiB of {n_features} features{which}, more than "
            f"{DENSE_LIMIT_BYTES / 2**30:.0f} GiB: lower batch_size or sequence_length."
        )


def _psgd(params, data, U, spectrum, settings, rng, index, tuning):
    """One PSGD run from U (d x K); returns a :class:`_Run`."""
    # Curvature scale of the risk; an all-zero X has none (and no gradient).
    curvature = settings.temperature * params.n_clusters * float(np.trace(spectrum.moment)) or 1.0
    max_iter, tol = settings.max_iter, settings.tol
    L, batch_size, per_check = params.sequence_length, params.batch_size, tuning.steps_per_check
    state = np.array([rng.randint(1, np.iinfo(np.int64).max)], dtype=np.uint64)
    reg_kind = regularizer_code(params.regularization)
    riemannian = params.gradient == "riemannian"
    # Memory of one chunk of steps (its tokens, step sizes and losses), not
    # of max_iter steps: max_iter may be far above the steps taken.
    chunk_losses = []
    chunk_sums = []
    rows = np.empty((min(per_check, max_iter) * batch_size * L, data.n_features))
    previous = None
    converged = False
    done = 0
    while done < max_iter:
        start, stop = done, min(done + per_check, max_iter)
        t = np.arange(start, stop, dtype=np.float64)
        # gamma_t = eta / (lambda K tr(M) (1 + t / decay)) (math.md section 3, "Steps").
        steps = params.learning_rate / (curvature * (1.0 + t / tuning.decay))
        losses = np.empty(stop - start)
        heads_sum = np.zeros_like(U)
        tokens = data.draw(state, rows[: (stop - start) * batch_size * L])
        _kernels.psgd_chunk(
            tokens,
            U,
            settings.temperature,
            L,
            batch_size,
            steps,
            reg_kind,
            settings.reg_strength,
            riemannian,
            losses,
            heads_sum,
        )
        _kernels.check_psgd_losses(losses, start, "lower the temperature or the learning rate")
        done = stop
        chunk_losses.append(losses)
        chunk_sums.append(heads_sum)
        current = _tail_average(chunk_sums, U)
        change = None if previous is None else float(np.sum((current - previous) ** 2))
        previous = current
        if params.verbose:
            moved = "" if change is None else f", change of the averaged heads {change:.3g}"
            print(
                f"[AttentionClustering] init {index}, step {done}: "
                f"objective {np.mean(losses):.6g}{moved}"
            )
        # A comparison of whole checks only: the average of a last, shorter
        # chunk (max_iter not a multiple of steps_per_check) barely moves in
        # a few steps, and stopped runs far from the tolerance as converged.
        if change is not None and change < tol and stop - start == per_check:
            converged = True
            break
    losses = np.concatenate(chunk_losses)
    # Ranked among several runs by the exact objective at the averaged heads
    # it returns (_run): the mini-batch losses are noisy, and of the iterates.
    return _Run(previous, losses, done, converged, None)


def _warn_lost_clusters(result, K, share, tuning, retried=False, seeded=False):
    """Warn when the fit leaves clusters (nearly) empty, or has nothing to cluster.

    ``retried``: center="auto" also fitted the centred rows, and kept this
    uncentred fit as the more likely. ``seeded``: the fit started from
    :func:`seeded_start`'s points (K >= d), whose centres are points of R^d,
    not directions from the origin."""
    floored = result.mixture is not None and result.mixture.variance <= MIN_VARIANCE * (
        1.0 + float(np.max(result.mixture.radii, initial=0.0)) ** 2
    )
    if floored:
        what = (
            "All rows of X are equal" + (" once centred" if result.centred else "")
            if not np.any(result.moment_heads)
            else (
                "The fitted clusters have no spread above the variance floor (each row lies "
                f"within about {np.sqrt(MIN_VARIANCE):g} of its cluster's centre, relative to "
                "the rows' norms)"
            )
        )
        warn(
            f"{what}: the mixture's variance is floored at "
            f"{MIN_VARIANCE:g} of the rows' mean squared norm per feature, and score_samples, "
            "bic and aic measure that floor.",
            UserWarning,
        )
        # Rows at their clusters' centres may still leave clusters empty
        # (fewer distinct rows than clusters): said below.
        if not np.any(result.moment_heads):
            return
    if K == 1:
        return
    if not np.any(result.moment_heads):
        warn(
            "All rows of X are equal"
            + (" once centred" if result.centred else " (zero)")
            + f": there is nothing to cluster, and every point is in one of the "
            f"n_clusters={K} clusters.",
            UserWarning,
        )
        return
    lost = int(np.sum(result.fractions < tuning.lost_fraction / K))
    if lost == 0:
        return
    found = f"{lost} of the n_clusters={K} clusters received fewer than {tuning.lost_fraction / K:.1%} of the points"
    if floored and np.any(result.fractions == 0.0):
        # Every row at its cluster's centre, and a cluster with no row.
        advice = (
            "every row equals its cluster's centre, so X may hold fewer distinct rows than "
            "n_clusters: try fewer clusters"
        )
    elif seeded:
        advice = (
            "the cluster may be small, or the clusters overlap, or n_clusters is too large "
            "for the data (its centres are points, found alike with or without centring): "
            "try fewer clusters"
        )
    elif retried and not result.centred:
        advice = (
            "a fit of the centred rows was tried and is less likely (center='auto'): "
            "the cluster may be small, or n_clusters too large for the data"
        )
    elif not result.centred and share > tuning.share_to_retry:
        advice = (
            f"the data's common mean carries {share:.0%} of their second moment and "
            "every head sees it: pass center=True, or put a StandardScaler before the estimator"
        )
    else:
        advice = (
            "the clusters may not be distinct directions from the origin"
            + (" of the centred data" if result.centred else "")
            + ": try fewer clusters, a StandardScaler before the estimator, or KMeans"
        )
    warn(f"{found}; {advice} (see the user guide, 'When to use it').", UserWarning)
