"""The exact solver: the exact risk minimised over K unit heads.

Riemannian L-BFGS (``_optimize``) on the exact regularised risk
(``_objective``) from a start chosen by the caller (``_plan._start``,
e.g. ``_spectral``'s), and for large n a first stage on a
subsample and a subsampled Newton polish on all rows.
"""

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from ._objective import exact_objective, objective_exponent
from ._optimize import minimize_on_spheres, polish_on_spheres
from ._spectral import SUBSAMPLE

__all__ = ["ExactSolution", "START_TOL", "WARM_START_ROWS", "solve_exact"]

# Rows of positive weight above which the solver's first stage runs on a
# subsample (``sample``): below, on all rows.
WARM_START_ROWS = 4 * SUBSAMPLE

# Tolerance of a run that only starts the EM refinement (polish=False), in
# units of tol (a relative gradient norm of 5e-3 at the default tol): the
# refinement needs a start in the right basin, not the risk's minimiser. On
# the bundled data sets and the defaults grid (benchmarks/engine.py,
# benchmarks/defaults.py) tighter ones spent most of the fit creeping along
# flat directions of the risk for the same clusters.
START_TOL = 5000.0


@dataclass
class ExactSolution:
    """Outcome of :func:`solve_exact`."""

    heads: np.ndarray  #: (d, K) unit columns
    #: objective of the last stage, start then each iteration: on the full
    #: data, or on the subsample when ``polish=False`` stopped there;
    #: divided by ``4^exponent``
    objective_curve: np.ndarray
    n_iter: int  #: iterations on the full data
    n_iter_warm: int  #: iterations on the subsample (warm start), 0 if none
    converged: bool
    #: the scale of the objective minimised (``_objective.objective_exponent``)
    exponent: int
    #: the last stage stopped at a gradient beyond float64's range
    gradient_overflow: bool = False


def solve_exact(
    data,
    start,
    temperature,
    sequence_length,
    *,
    regularization="pairwise",
    reg_strength=0.0,
    tol=1e-6,
    max_iter=500,
    moment=None,
    sample=None,
    random_state=None,
    polish=True,
):
    """Minimise the exact regularised risk over K unit heads, from ``start``.

    Riemannian L-BFGS (:func:`~attention_cluster._optimize.minimize_on_spheres`)
    on :func:`~attention_cluster._objective.exact_objective`. When the rows
    of positive weight exceed 4 x 16384, L-BFGS runs on the rows of ``sample`` (about 16384 rows, with
    their own moment), and the full data only sees the few steps of
    :func:`~attention_cluster._optimize.polish_on_spheres`, whose Newton
    systems use the Hessian of that subsample. ``polish=False`` stops after
    the subsample (for a caller that refines the heads on all rows by other
    means), and for smaller n stops at the subsample stage's tolerance.

    The objective minimised is divided by ``gamma^2``
    (:func:`~attention_cluster._objective.objective_exponent`: 1 while ``c =
    lambda K / L <= 1`` and ``rho <= 1``, else of the order of the larger of
    ``c^2`` and ``rho``), the same minimiser computed within float64 at any
    temperature and strength (``math.md`` section 3, "Large temperatures and
    strengths"). ``tol`` is relative: each stage stops when the norm of the
    Riemannian gradient of that objective is at most ``tol * mean
    ||x_i||^2``, the objective's scale (the risk of heads that see nothing,
    times ``gamma^2``: the risk's terms in ``c^2`` and ``rho`` dominate it
    there, and their rounding would keep a tolerance on the unscaled
    gradient out of reach). ``max_iter`` bounds each stage.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
    start : ndarray of shape (n_features, n_heads)
        Starting heads (columns, normalised here).
    temperature, sequence_length, regularization, reg_strength
        As in :func:`~attention_cluster._objective.exact_objective`.
    tol : float, default=1e-6
    max_iter : int, default=500
    moment : ndarray of shape (n_features, n_features), default=None
        The data's second moment (one pass computes it when None).
    sample : pass-layer data object, default=None
        The rows of the first stage; None draws them with ``random_state``
        (``data.subsample``).
    random_state : int, RandomState instance or None, default=None
    polish : bool, default=True

    Returns
    -------
    ExactSolution
    """
    d = data.n_features
    U0 = np.asarray(start, dtype=np.float64)
    if U0.ndim != 2 or U0.shape[0] != d:
        raise ValueError(f"start must have shape ({d}, n_heads), got {U0.shape}.")
    exponent = objective_exponent(temperature, U0.shape[1], sequence_length, reg_strength)
    if moment is None:
        moment = data.second_moment()
    tol_abs = tol * max(float(np.trace(moment)), np.finfo(np.float64).tiny)
    rows = data.subsample(check_random_state(random_state), SUBSAMPLE) if sample is None else sample

    def objective(rows_, moment_):
        def fun(U):
            return exact_objective(
                rows_,
                moment_,
                U,
                temperature,
                sequence_length,
                regularization,
                reg_strength,
                exponent,
            )

        return fun

    full = objective(data, moment)
    # Without the polish a refinement follows and only needs a start in the
    # right basin (START_TOL): a start already within it takes no step.
    start_tol = tol_abs if polish else START_TOL * tol_abs
    if data.n_weighted <= WARM_START_ROWS:
        result = minimize_on_spheres(full, U0, tol=start_tol, max_iter=max_iter)
        return ExactSolution(
            result.heads,
            result.objective_curve,
            result.n_iter,
            0,
            result.converged,
            exponent,
            result.gradient_overflow,
        )
    # The subsample keeps its own moment: the full data's would break the
    # rotation symmetry of the L -> infinity risk at order one (not 1/L) and
    # send the warm start astray inside the span.
    sub = objective(rows, rows.second_moment())
    # Its optimum is off the full data's by the subsample's sampling error,
    # far above tol: a looser tolerance loses nothing.
    warm = minimize_on_spheres(sub, U0, tol=max(100 * tol_abs, start_tol), max_iter=max_iter)
    # (A gradient beyond float64 has no Newton step either: the warm stage's
    # stop stands.)
    if not polish or warm.gradient_overflow:
        return ExactSolution(
            warm.heads,
            warm.objective_curve,
            0,
            warm.n_iter,
            warm.converged,
            exponent,
            warm.gradient_overflow,
        )
    polish = polish_on_spheres(full, sub, warm.heads, tol=tol_abs, max_iter=max_iter)
    if polish.converged:
        return ExactSolution(
            polish.heads, polish.objective_curve, polish.n_iter, warm.n_iter, True, exponent
        )
    # The subsample's Hessian is a poor model here: L-BFGS on the full data.
    memory = None if polish.n_iter else warm.memory
    result = minimize_on_spheres(
        full,
        polish.heads,
        tol=tol_abs,
        max_iter=max_iter - polish.n_iter,
        memory=memory,
        evaluated=(polish.objective_curve[-1], polish.gradient),
    )
    curve = np.concatenate([polish.objective_curve[:-1], result.objective_curve])
    n_iter = polish.n_iter + result.n_iter
    return ExactSolution(
        result.heads,
        curve,
        n_iter,
        warm.n_iter,
        result.converged,
        exponent,
        result.gradient_overflow,
    )
