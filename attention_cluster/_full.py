"""Exact full-batch solver: the risk over sequences drawn with replacement.

For a data set ``x_1..x_n`` held in memory, the expected loss of the linear
attention layer over sequences of ``L`` tokens drawn with replacement (the
quantity the paper's PSGD estimates) has a closed form (``math.md`` section 3).
With ``c = lambda K / L``, ``a_i = U^T x_i``, ``s_i = ||a_i||^2``,
``n_i = ||x_i||^2``, ``M = mean x x^T``, ``M4 = mean ||x||^2 x x^T``,
``Q = (L-1) M4 + (L-1)(L-2) M^2`` and ``h_i = x_i^T M U a_i``::

    R(U) = mean_i (1 - c s_i)^2 n_i - 2c(L-1) mean_i (1 - c s_i) h_i
           + c^2 tr(U^T Q U U^T M U)

It is minimised, plus ``rho r(U)``, over the product of unit spheres (one
sphere per head, the columns of the ``d x K`` matrix U): spectral start,
Riemannian L-BFGS, and for large n a subsampled Newton polish. All means
are weighted by ``sample_weight``. The solver reads the data only through
the pass layer (``_passes``), whose data object divides the rows by their
scale (``_scale.estimate_spectrum``, whose ``moment`` is the M needed here).
"""

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from . import _kernels

__all__ = [
    "auto_reg_strength",
    "exact_objective",
    "minimize_on_spheres",
    "polish_on_spheres",
    "solve_exact",
    "spectral_init",
]

_REGULARIZERS = {
    "none": _kernels.REG_NONE,
    "pairwise": _kernels.REG_PAIRWISE,
    "product": _kernels.REG_PRODUCT,
}
_SUBSAMPLE = 16384


def _check_regularization(regularization):
    if regularization not in _REGULARIZERS:
        raise ValueError(
            f"regularization must be one of {sorted(_REGULARIZERS)}, got {regularization!r}."
        )
    return _REGULARIZERS[regularization]


def exact_objective(
    data,
    moment,
    U,
    temperature,
    sequence_length,
    regularization="pairwise",
    reg_strength=0.0,
):
    """Exact regularised risk ``R(U) + rho r(U)`` and its Euclidean gradient.

    ``R`` is the expected loss ``(1/L) ||X - T(X)||_F^2`` over sequences of
    ``L`` tokens drawn with replacement from the (weighted) rows of the
    data, in closed form (``math.md`` section 3; module docstring); ``r`` is
    the pairwise regulariser ``sum_{j<k} mean_i a_ij^2 a_ik^2`` (paper,
    section 3.3), the product ``mean_i prod_k a_ik^2`` (rebuttal, K = 3) or
    zero.

    The gradient (derived by hand, checked by finite differences in the
    tests) is, with ``e_i = 1 - c s_i``, ``g_i = U^T M x_i``,
    ``W = U^T M U`` and ``V = U^T Q U``::

        mean_i x_i (alpha_i a_i + beta_i g_i)^T + M mean_i x_i (beta_i a_i)^T
        + 2 c^2 (Q U W + M U V) + rho grad r,
        alpha_i = -4c e_i n_i + 4c^2 (L-1) h_i,   beta_i = -2c(L-1) e_i.

    ``M4`` only enters through ``M4 U = mean_i n_i x_i a_i^T``, accumulated
    in the same pass, so it is never formed (that would cost O(n d^2)). One
    pass over the data (:meth:`attention_cluster._passes.DenseRows.exact_terms`),
    O(n d K), in float64.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
        The rows ``x_i`` (divided by the data object's scale) and weights.
    moment : ndarray of shape (n_features, n_features)
        ``M``, the weighted second moment of the data (``data.second_moment()``).
    U : ndarray of shape (n_features, n_heads)
        Heads as columns (any norm: the formula holds off the sphere too).
    temperature : float
        lambda > 0.
    sequence_length : int
        L >= 1.
    regularization : {"pairwise", "product", "none"}, default="pairwise"
    reg_strength : float, default=0.0
        rho >= 0.

    Returns
    -------
    value : float
    grad : ndarray of shape (n_features, n_heads)
    """
    reg = _check_regularization(regularization)
    M = moment
    U = np.asarray(U, dtype=np.float64)
    K = U.shape[1]
    L = float(sequence_length)
    c = temperature * K / L
    lm1 = L - 1.0
    MU = M @ U
    value, P = data.exact_terms(U, MU, c, lm1, reg, reg_strength)
    total = data.total_weight
    if total > 0:
        value /= total
        P /= total
    QU = lm1 * P[2 * K :].T + lm1 * (L - 2.0) * (M @ MU)
    UMU = U.T @ MU
    UQU = U.T @ QU
    value += c * c * float(np.sum(UQU * UMU))
    grad = P[:K].T + M @ P[K : 2 * K].T + 2.0 * c * c * (QU @ UMU + MU @ UQU)
    return value, grad


_REG_FRACTION = 0.1


def auto_reg_strength(temperature, n_clusters, regularization="pairwise", noise=0.0):
    """Default rho: a tenth of the strength at which the centroids turn unstable.

    The regulariser is only needed to break the rotation symmetry of the risk
    inside the centroids' span (``math.md`` section 3); its cost is a
    negative curvature out of the span, which beyond some rho turns the
    centroids into a saddle and biases the heads (paper, Fig. 2a). Both
    curvatures follow in closed form for the mixture of ``math.md`` section 1
    (unit orthogonal centroids, weights 1/K, noise sigma) as L -> infinity,
    turning head k by an angle phi towards a noise direction, with
    ``beta = lambda K`` and the unbiased temperature (``beta (1/K + sigma^2)
    = 1``):

        risk:        d^2 R / d phi^2 = 2 sigma^2 beta / K
        pairwise r:  d^2 r / d phi^2 = -2 sigma^2 (K - 1) / K
        product r:   d^2 r / d phi^2 = -2 sigma^(2(K-1)) / K

    so the centroids stay a minimum while ``rho < rho_max = lambda K / (K - 1)``
    (pairwise; sigma cancels) or ``lambda K / sigma^(2(K-2))`` (product).
    The default is ``rho = 0.1 rho_max`` for the pairwise regulariser: the
    out-of-span curvature keeps 90% of its value, so the statistical error
    is hardly inflated (it grows as ``(1 - rho/rho_max)^-2``), while inside
    the span the regulariser's curvature, about ``2 rho / K`` per pair of
    heads, dominates the risk's, which vanishes as L grows. On mixtures
    (d = 10..50, K = 2..5, sigma = 0.3..1.2, L = 100) the final distance is
    flat for ``rho / rho_max`` between 0.03 and 0.1 and grows from 0.2 on.
    The product regulariser, whose curvatures both carry an extra
    ``sigma^(2(K-2))``, gets ``rho_pairwise (0.3 / max(sigma, 0.1))^(2(K-2))``,
    calibrated at K = 3 (rebuttal) for sigma in [0.1, 0.5]. "none" gets 0.

    Parameters
    ----------
    temperature : float
        lambda.
    n_clusters : int
        K, the number of heads.
    regularization : {"pairwise", "product", "none"}, default="pairwise"
    noise : float, default=0.0
        sigma relative to the centroids' scale (``Spectrum.noise``); used by
        the product regulariser only.

    Returns
    -------
    reg_strength : float
    """
    _check_regularization(regularization)
    if regularization == "none" or n_clusters < 2:
        return 0.0
    rho = _REG_FRACTION * temperature * n_clusters / (n_clusters - 1)
    if regularization == "product":
        rho *= (0.3 / max(noise, 0.1)) ** (2 * (n_clusters - 2))
    return float(rho)


# --- Geometry of the product of spheres (math.md section 3) ---------------


def project_tangent(U, Z):
    """Project Z onto the tangent space at U: ``z_h - <u_h, z_h> u_h`` per head."""
    return Z - U * np.sum(U * Z, axis=0)


def retract(U, Z):
    """Retraction by normalisation: ``(u_h + z_h) / ||u_h + z_h||`` per head."""
    V = U + Z
    return V / np.linalg.norm(V, axis=0)


def _normalize_heads(U):
    U = np.array(U, dtype=np.float64)
    norms = np.linalg.norm(U, axis=0)
    if np.any(norms == 0) or not np.all(np.isfinite(norms)):
        raise ValueError("Initial heads must be finite and non-zero.")
    return U / norms


@dataclass
class SphereResult:
    """Outcome of :func:`minimize_on_spheres` and :func:`polish_on_spheres`."""

    heads: np.ndarray  #: (d, K) unit columns
    objective_curve: np.ndarray  #: objective at the start and after each iteration
    n_iter: int
    converged: bool
    memory: tuple = ()  #: L-BFGS pairs (s, y), tangent at ``heads``, for a warm start


def _norm(Z):
    return float(np.sqrt(np.sum(Z * Z)))


def _armijo(fun, U, f, g, p, max_halvings=40):
    """Backtracking (Armijo) along the retraction: largest ``t = 2^-j`` with
    ``f(R_U(t p)) <= f + 1e-4 t <g, p>``. Returns ``(t, U, f, G)`` or None."""
    slope = np.sum(g * p)
    t = 1.0
    for _ in range(max_halvings):
        U_new = retract(U, t * p)
        f_new, G_new = fun(U_new)
        if f_new <= f + 1e-4 * t * slope:
            return t, U_new, f_new, G_new
        t *= 0.5
    return None


def _curvature_ok(s, y):
    return np.sum(s * y) > 1e-12 * _norm(s) * _norm(y)


def _two_loop(g, pairs):
    """L-BFGS two-loop recursion: ``-H g`` with the inverse-Hessian model of ``pairs``."""
    q = g.copy()
    rhos = [1.0 / np.sum(s * y) for s, y in pairs]
    alphas = []
    for (s, y), rho in zip(reversed(pairs), reversed(rhos)):
        a = rho * np.sum(s * q)
        q -= a * y
        alphas.append(a)
    s, y = pairs[-1]
    q *= np.sum(s * y) / np.sum(y * y)
    for (s, y), rho, a in zip(pairs, rhos, reversed(alphas)):
        q += (a - rho * np.sum(y * q)) * s
    return -q


def _probe_pair(fun, U, g, step):
    """A curvature pair (s, y) from a step of ``step`` radians along ``-g``."""
    s = -g * (step / _norm(g))
    U_probe = retract(U, s)
    y = project_tangent(U, project_tangent(U_probe, fun(U_probe)[1])) - g
    return s, y


def minimize_on_spheres(fun, U0, *, tol, max_iter, memory_size=10, memory=()):
    """Riemannian L-BFGS on the product of unit spheres, with Armijo backtracking.

    The Riemannian gradient is the Euclidean one projected on each head's
    tangent space (``math.md`` section 3), the retraction normalises each
    head and the stored pairs are moved to the new tangent space by
    projection (vector transport), as with pymanopt's ``Sphere``; a pair is
    dropped when ``<s, y>`` is not positive (Armijo alone does not enforce
    the curvature condition). Without memory (first iteration, or after a
    failed line search) the inverse-Hessian model is seeded by a
    finite-difference pair along the gradient, which scales the first step
    to the local curvature.

    Stops, ``converged=True``, when the Frobenius norm of the Riemannian
    gradient (all heads together) is at most ``tol``; ``converged=False``
    after ``max_iter`` iterations or when no step decreases the objective.

    Parameters
    ----------
    fun : callable
        ``fun(U) -> (value, euclidean_gradient)``.
    U0 : ndarray of shape (d, K)
        Start; each column is normalised.
    tol : float
        Tolerance on the Riemannian gradient norm.
    max_iter : int
    memory_size : int, default=10
        Number of stored pairs.
    memory : tuple, default=()
        Pairs from a previous run, tangent at U0 (warm start).

    Returns
    -------
    SphereResult
    """
    U = _normalize_heads(U0)
    f, G = fun(U)
    g = project_tangent(U, G)
    pairs = list(memory)
    curve = [f]
    converged = False
    n_iter = 0
    while n_iter < max_iter:
        gnorm = _norm(g)
        if gnorm <= tol:
            converged = True
            break
        fresh = not pairs
        if fresh:
            probe = _probe_pair(fun, U, g, min(1e-3, gnorm))
            pairs = [probe] if _curvature_ok(*probe) else []
        p = _two_loop(g, pairs) if pairs else -g
        if np.sum(p * g) >= 0.0:
            p = -g
        step = _armijo(fun, U, f, g, p)
        if step is None:
            if fresh:
                break
            pairs = []  # the model misleads: start afresh from here
            continue
        t, U_new, f_new, G_new = step
        n_iter += 1
        g_new = project_tangent(U_new, G_new)
        s = project_tangent(U_new, t * p)
        y = g_new - project_tangent(U_new, g)
        moved = [(project_tangent(U_new, a), project_tangent(U_new, b)) for a, b in pairs]
        pairs = [(a, b) for a, b in moved + [(s, y)] if _curvature_ok(a, b)][-memory_size:]
        U, f, g = U_new, f_new, g_new
        curve.append(f)
    return SphereResult(U, np.asarray(curve), n_iter, converged, tuple(pairs))


def _truncated_cg(hvp, g, rtol, max_iter):
    """Approximate Newton direction: solve ``H p = -g`` by conjugate gradients.

    Returns ``(p, reliable)``: stops when the residual is below
    ``rtol ||g||`` (reliable), or at ``max_iter`` or on a direction of
    non-positive curvature (not reliable, p is the iterate so far).
    """
    p = np.zeros_like(g)
    r = -g
    d = r.copy()
    rr = np.sum(r * r)
    for _ in range(max_iter):
        Hd = hvp(d)
        dHd = np.sum(d * Hd)
        if dHd <= 0.0:
            break
        a = rr / dHd
        p += a * d
        r -= a * Hd
        rr_new = np.sum(r * r)
        if np.sqrt(rr_new) <= rtol * _norm(g):
            return p, True
        d = r + (rr_new / rr) * d
        rr = rr_new
    return p, False


def _hessian_product(fun, U):
    """``xi -> Hess f(U)[xi]``: forward difference of the Riemannian gradient
    along the retraction, moved back to the tangent space at U by projection
    (the projection of the difference adds the sphere's Weingarten term)."""
    base = project_tangent(U, fun(U)[1])

    def product(xi):
        h = 1e-7 / _norm(xi)
        U_h = retract(U, h * xi)
        return (project_tangent(U, project_tangent(U_h, fun(U_h)[1])) - base) / h

    return product


def polish_on_spheres(fun, hessian_fun, U0, *, tol, max_iter, cg_tol=0.1, max_cg=50):
    """Riemannian Newton-CG whose Hessian comes from a cheaper objective.

    For the last stage on the full data: each iteration takes one full
    gradient, solves ``H p = -grad`` by truncated CG where ``H`` is the
    Riemannian Hessian of ``hessian_fun`` (the same objective on a
    subsample), applied by finite differences of its Riemannian gradient
    (:func:`_hessian_product`), then does an Armijo step on ``fun``. When the
    subsample's Hessian is within a few percent of the full one, each step
    divides the gradient norm by about that factor, for one pass over the
    data (a subsampled Newton method; Byrd, Chin, Neveitt and Nocedal, SIAM
    J. Optim. 2011).

    Stops, ``converged=True``, as :func:`minimize_on_spheres`; stops early,
    ``converged=False``, as soon as the subsample's Hessian stops being a
    good model: CG meets non-positive curvature or does not converge, the
    full step is not accepted, or the gradient norm is not halved.
    The caller then goes on with :func:`minimize_on_spheres`.
    """
    U = _normalize_heads(U0)
    f, G = fun(U)
    g = project_tangent(U, G)
    curve = [f]
    n_iter = 0
    while n_iter < max_iter:
        gnorm = _norm(g)
        if gnorm <= tol:
            return SphereResult(U, np.asarray(curve), n_iter, True)
        p, reliable = _truncated_cg(_hessian_product(hessian_fun, U), g, cg_tol, max_cg)
        if not reliable:
            break
        step = _armijo(fun, U, f, g, p, max_halvings=1)
        if step is None:
            break
        _, U, f, G = step
        g = project_tangent(U, G)
        n_iter += 1
        curve.append(f)
        if _norm(g) > gnorm / 2:
            break
    return SphereResult(U, np.asarray(curve), n_iter, _norm(g) <= tol)


# --- Spectral initialisation -----------------------------------------------


def _pair_angle(yj, yk, weight):
    """Angle theta minimising ``sum_i weight_i (a_ij a_ik)^2`` over plane rotations.

    After rotating columns j, k by theta, ``a_j a_k = cos(2 theta) p +
    sin(2 theta) q`` with ``p = y_j y_k`` and ``q = (y_k^2 - y_j^2) / 2``, so
    the criterion is a quadratic form in ``(cos 2theta, sin 2theta)``,
    minimised by its eigenvector of smallest eigenvalue (the Jacobi step of
    kurtosis-based ICA). Returns the smallest such rotation, in
    [-pi/4, pi/4].
    """
    p = yj * yk
    q = (yk * yk - yj * yj) / 2.0
    wp, wq = weight * p, weight * q
    B = np.array([[wp @ p, wp @ q], [wp @ q, wq @ q]])
    vec = np.linalg.eigh(B)[1][:, 0]
    if vec[0] < 0:
        vec = -vec
    return np.arctan2(vec[1], vec[0]) / 2.0


def _rotate_frame(Y, weight, regularization, max_sweeps=100, tol=1e-10):
    """Rotation R (K x K) such that ``Y R`` minimises the regulariser.

    Jacobi sweeps over the pairs of heads, each an exact 1-D minimisation
    (:func:`_pair_angle`). For the pairwise regulariser
    ``sum_{j<k} a_j^2 a_k^2 = (||a||^4 - sum_k a_k^4) / 2`` with ``||a||``
    fixed by the rotation, so this maximises ``sum_k mean a_k^4``:
    kurtosis-based ICA restricted to the span (``math.md`` section 3: the
    regulariser picks the directions inside the span). The pair (j, k) of
    the product regulariser is weighted by the other heads' ``prod a_m^2``;
    "none" uses the pairwise criterion.
    """
    K = Y.shape[1]
    Y = Y.copy()
    R = np.eye(K)
    for _ in range(max_sweeps):
        largest = 0.0
        for j in range(K - 1):
            for k in range(j + 1, K):
                pair_weight = weight
                if regularization == "product" and K > 2:
                    others = np.delete(Y, [j, k], axis=1)
                    pair_weight = weight * np.prod(others * others, axis=1)
                theta = _pair_angle(Y[:, j], Y[:, k], pair_weight)
                largest = max(largest, abs(theta))
                rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
                Y[:, [j, k]] = Y[:, [j, k]] @ rot
                R[:, [j, k]] = R[:, [j, k]] @ rot
        if largest < tol:
            break
    return R


def _spectral_heads(rows, moment, n_clusters, regularization, rng):
    """Top-K eigenvectors of ``moment``, rotated on ``rows`` (a small data object)."""
    d = moment.shape[0]
    k = min(n_clusters, d)
    V = np.linalg.eigh(moment)[1][:, ::-1][:, :k]
    if k > 1:
        weight = np.ones(rows.n_samples) if rows.sample_weight is None else rows.sample_weight
        V = V @ _rotate_frame(rows.project(V), weight, regularization)
    if n_clusters > d:
        extra = rng.standard_normal((d, n_clusters - d))
        V = np.hstack([V, extra / np.linalg.norm(extra, axis=0)])
    return V


def spectral_init(data, moment, n_clusters, regularization="pairwise", random_state=None):
    """Spectral start: top eigenvectors of M, rotated by the regulariser.

    As L grows the risk depends on the heads through ``U U^T`` only and its
    minimisers span the top-K eigenspace of ``M`` (``math.md`` section 3);
    inside that span the regulariser picks the directions. So the start is
    the top-K eigenvectors of M, rotated by Jacobi sweeps that minimise the
    regulariser (:func:`_rotate_frame`) on about 16384 rows drawn with
    ``random_state``. When ``n_clusters`` exceeds ``d``, the d eigenvectors
    are completed by random unit heads.

    Parameters
    ----------
    data : pass-layer data object (``_passes``)
    moment : ndarray of shape (n_features, n_features)
        M, the weighted second moment of the data.
    n_clusters : int
        Number of heads K.
    regularization : {"pairwise", "product", "none"}, default="pairwise"
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    heads : ndarray of shape (n_features, n_clusters)
        Unit columns, orthonormal when ``n_clusters <= n_features``.
    """
    _check_regularization(regularization)
    rng = check_random_state(random_state)
    rows = data.subsample(rng, _SUBSAMPLE)
    return _spectral_heads(rows, moment, n_clusters, regularization, rng)


# --- The whole solve --------------------------------------------------------


@dataclass
class ExactSolution:
    """Outcome of :func:`solve_exact`."""

    heads: np.ndarray  #: (d, K) unit columns
    #: objective of the last stage, start then each iteration: on the full
    #: data, or on the subsample when ``polish=False`` stopped there
    objective_curve: np.ndarray
    n_iter: int  #: iterations on the full data
    n_iter_warm: int  #: iterations on the subsample (warm start), 0 if none
    converged: bool


def solve_exact(
    data,
    n_clusters,
    temperature,
    sequence_length,
    *,
    regularization="pairwise",
    reg_strength=0.0,
    init="spectral",
    tol=1e-6,
    max_iter=500,
    moment=None,
    random_state=None,
    polish=True,
):
    """Minimise the exact regularised risk over K unit heads.

    Start (``"spectral"``: :func:`spectral_init`; ``"random"``: uniform on
    the spheres; or an array of shape (d, K)), then Riemannian L-BFGS
    (:func:`minimize_on_spheres`) on :func:`exact_objective`. When n exceeds
    4 x 16384, L-BFGS runs on about 16384 rows drawn with ``random_state``
    (with their own moment), and the full data only sees the few steps of
    :func:`polish_on_spheres`, whose Newton systems use the Hessian of that
    subsample. ``polish=False`` stops after the subsample (for a caller that
    refines the heads on all rows by other means).

    ``tol`` is relative: each stage stops when the norm of the Riemannian
    gradient is at most ``tol * mean ||x_i||^2``, the objective's scale (the
    risk of heads that see nothing). ``max_iter`` bounds each stage.

    Returns
    -------
    ExactSolution
    """
    rng = check_random_state(random_state)
    n, d = data.n_samples, data.n_features
    if moment is None:
        moment = data.second_moment()
    tol_abs = tol * max(float(np.trace(moment)), np.finfo(np.float64).tiny)
    rows = data.subsample(rng, _SUBSAMPLE)
    if isinstance(init, str) and init == "spectral":
        U0 = _spectral_heads(rows, moment, n_clusters, regularization, rng)
    elif isinstance(init, str) and init == "random":
        U0 = rng.standard_normal((d, n_clusters))
    else:
        U0 = np.asarray(init, dtype=np.float64)
        if U0.shape != (d, n_clusters):
            raise ValueError(f"init must have shape ({d}, {n_clusters}), got {U0.shape}.")

    def objective(rows_, moment_):
        def fun(U):
            return exact_objective(
                rows_, moment_, U, temperature, sequence_length, regularization, reg_strength
            )

        return fun

    full = objective(data, moment)
    if n <= 4 * _SUBSAMPLE:
        # When the EM refinement follows (no polish), it moves the heads far
        # more than tol: the looser tolerance of the subsample stage suffices.
        result = minimize_on_spheres(full, U0, tol=tol_abs if polish else 100 * tol_abs, max_iter=max_iter)
        return ExactSolution(
            result.heads, result.objective_curve, result.n_iter, 0, result.converged
        )
    # The subsample keeps its own moment: the full data's would break the
    # rotation symmetry of the L -> infinity risk at order one (not 1/L) and
    # send the warm start astray inside the span.
    sub = objective(rows, rows.second_moment())
    # Its optimum is off the full data's by the subsample's sampling error,
    # far above tol: a looser tolerance loses nothing.
    warm = minimize_on_spheres(sub, U0, tol=100 * tol_abs, max_iter=max_iter)
    if not polish:
        return ExactSolution(warm.heads, warm.objective_curve, 0, warm.n_iter, warm.converged)
    polish = polish_on_spheres(full, sub, warm.heads, tol=tol_abs, max_iter=max_iter)
    if polish.converged:
        return ExactSolution(polish.heads, polish.objective_curve, polish.n_iter, warm.n_iter, True)
    # The subsample's Hessian is a poor model here: L-BFGS on the full data.
    memory = () if polish.n_iter else warm.memory
    result = minimize_on_spheres(
        full, polish.heads, tol=tol_abs, max_iter=max_iter - polish.n_iter, memory=memory
    )
    curve = np.concatenate([polish.objective_curve[:-1], result.objective_curve])
    n_iter = polish.n_iter + result.n_iter
    return ExactSolution(result.heads, curve, n_iter, warm.n_iter, result.converged)
