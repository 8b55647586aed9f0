"""Riemannian optimisers on the product of unit spheres.

L-BFGS with Armijo backtracking (:func:`minimize_on_spheres`) and a
subsampled Newton-CG (:func:`polish_on_spheres`), for any objective
``fun(U) -> (value, euclidean_gradient)`` of ``d x K`` heads; the geometry
is ``_sphere``'s. The exact solver (``_exact``) applies them to the exact
risk (``_objective``).
"""

from dataclasses import dataclass

import numpy as np

from ._sphere import normalize_heads, project_tangent, retract

__all__ = ["SphereResult", "minimize_on_spheres", "polish_on_spheres"]


@dataclass
class SphereResult:
    """Outcome of :func:`minimize_on_spheres` and :func:`polish_on_spheres`."""

    heads: np.ndarray  #: (d, K) unit columns
    objective_curve: np.ndarray  #: objective at the start and after each iteration
    n_iter: int
    converged: bool
    #: the objective's Euclidean gradient at ``heads`` (its value is the
    #: curve's last), so that a next stage from ``heads`` need not take it again
    gradient: np.ndarray = None
    #: L-BFGS pairs ``(S, Y)``, each m x d x K (oldest first), tangent at
    #: ``heads``, for a warm start; None if there are none
    memory: tuple = None
    #: True when L-BFGS stopped at a gradient beyond float64's range
    gradient_overflow: bool = False


def _dot(A, B):
    """Frobenius inner product ``<A, B>`` (np.vdot flattens; faster than np.sum(A * B))."""
    return float(np.vdot(A, B))


def _norm(Z):
    return float(np.sqrt(_dot(Z, Z)))


def _tangent_gradient(U, G):
    """The Riemannian gradient: the Euclidean gradient ``G`` projected on the
    tangent space at U; infinite where ``G`` is not finite. A gradient beyond
    float64 (the exact risk grows as the square of the weights' ratio: 3e-4
    / w^2 on two rows of weights 1 and w) has no direction to project: its
    projection was inf - inf, NaN with a RuntimeWarning, where the loop
    reads an infinite norm as the overflow it is."""
    if np.all(np.isfinite(G)):
        return project_tangent(U, G)
    return np.full_like(G, np.inf)


def _armijo(fun, U, f, g, p, max_halvings=40):
    """Backtracking (Armijo) along the retraction: largest ``t = 2^-j`` with
    ``f(R_U(t p)) <= f + 1e-4 t <g, p>``. Returns ``(t, U, f, G)`` or None."""
    slope = _dot(g, p)
    t = 1.0
    for _ in range(max_halvings):
        U_new = retract(U, t * p)
        f_new, G_new = fun(U_new)
        if f_new <= f + 1e-4 * t * slope:
            return t, U_new, f_new, G_new
        t *= 0.5
    return None


def _kept_pairs(U, memory, s, y, memory_size):
    """The stored pairs moved to the tangent space at U, then ``(s, y)`` (tangent there).

    ``memory`` is ``(S, Y)`` (m x d x K each) or None. The stored pairs are
    projected (vector transport by projection); a pair whose ``<s, y>`` is
    not positive (or whose inverse float64 cannot hold) is dropped, and the
    newest ``memory_size`` are kept.
    Returns ``(S, Y)``, or None when no pair is left.
    """
    if memory is None:
        S, Y = s[None], y[None]
    else:
        S = np.concatenate([project_tangent(U, memory[0]), s[None]])
        Y = np.concatenate([project_tangent(U, memory[1]), y[None]])
    sy = np.einsum("ijk,ijk->i", S, Y)
    with np.errstate(over="ignore", divide="ignore"):
        # |s| |y| as a product of roots (the squares' product overflows
        # first), and a <s, y> whose inverse, the two-loop's rho, float64
        # holds.
        bound = (
            1e-12 * np.sqrt(np.einsum("ijk,ijk->i", S, S)) * np.sqrt(np.einsum("ijk,ijk->i", Y, Y))
        )
        keep = (sy > bound) & np.isfinite(1.0 / sy)
    if not np.all(keep):
        S, Y = S[keep], Y[keep]
    if len(S) == 0:
        return None
    return S[-memory_size:], Y[-memory_size:]


def lbfgs_direction(g, S, Y):
    """L-BFGS two-loop recursion: ``-H g`` with the inverse-Hessian model of the pairs.

    ``g`` is the gradient and the rows of ``S`` and ``Y`` (m x p, oldest
    first, ``<s_i, y_i> > 0``) the pairs, all flattened (Nocedal and Wright,
    *Numerical Optimization*, algorithm 7.4, with the initial scaling
    ``<s, y> / <y, y>`` of the newest pair). NumPy: p is d K, and m at most
    the memory's size.
    """
    m = S.shape[0]
    q = np.array(g, dtype=np.float64)
    rho = 1.0 / np.einsum("ij,ij->i", S, Y)
    alpha = np.empty(m)
    for i in range(m - 1, -1, -1):
        alpha[i] = rho[i] * (S[i] @ q)
        q -= alpha[i] * Y[i]
    q *= (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1])
    for i in range(m):
        q += (alpha[i] - rho[i] * (Y[i] @ q)) * S[i]
    return -q


def _two_loop(g, memory):
    """``-H g`` with the L-BFGS inverse-Hessian model of the pairs (:func:`lbfgs_direction`)."""
    S, Y = memory
    m = S.shape[0]
    return lbfgs_direction(g.ravel(), S.reshape(m, -1), Y.reshape(m, -1)).reshape(g.shape)


def _probe_pair(fun, U, g, step):
    """A curvature pair (s, y) from a step of ``step`` radians along ``-g``."""
    s = -g * (step / _norm(g))
    U_probe = retract(U, s)
    y = project_tangent(U, project_tangent(U_probe, fun(U_probe)[1])) - g
    return s, y


def minimize_on_spheres(fun, U0, *, tol, max_iter, memory_size=10, memory=None, evaluated=None):
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
    gradient (all heads together) is at most ``tol``: at the start, with no
    step taken, when ``U0`` is within it (after ``max_iter`` iterations too,
    the last one's gradient tested so). ``converged=False`` after
    ``max_iter`` iterations whose last gradient is above ``tol``, or earlier
    when no step decreases the objective (the line search fails without
    memory, along the gradient; the caller's warning tells the two apart by
    the iterations taken), or at a gradient beyond float64's range
    (``gradient_overflow``).

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
    memory : tuple or None, default=None
        Pairs ``(S, Y)`` from a previous run, tangent at U0 (warm start).
    evaluated : tuple or None, default=None
        ``fun(U0)`` when a previous stage has it, ``U0`` then being that
        stage's unit heads, taken as they are: a pass over the data saved.

    Returns
    -------
    SphereResult
    """
    if evaluated is None:
        U = normalize_heads(U0)
        f, G = fun(U)
    else:
        U = U0
        f, G = evaluated
    g = _tangent_gradient(U, G)
    curve = [f]
    converged = overflow = False
    n_iter = 0
    while n_iter < max_iter:
        with np.errstate(over="ignore"):
            gnorm = _norm(g)
        if gnorm <= tol:
            converged = True
            break
        if not np.isfinite(gnorm):
            # A gradient beyond float64 (rows of weights 1e100 apart, whose
            # light rows lie 1e48 scales from the heavy one) has no step to
            # take along it: every trial step overflowed, 40 halvings each.
            overflow = True
            break
        fresh = memory is None
        if fresh:
            memory = _kept_pairs(U, None, *_probe_pair(fun, U, g, min(1e-3, gnorm)), memory_size)
        p = -g if memory is None else _two_loop(g, memory)
        if _dot(p, g) >= 0.0:
            p = -g
        step = _armijo(fun, U, f, g, p)
        if step is None:
            if fresh:
                break
            memory = None  # the model misleads: start afresh from here
            continue
        t, U_new, f_new, G_new = step
        n_iter += 1
        g_new = _tangent_gradient(U_new, G_new)
        s = project_tangent(U_new, t * p)
        y = g_new - project_tangent(U_new, g)
        memory = _kept_pairs(U_new, memory, s, y, memory_size)
        U, f, G, g = U_new, f_new, G_new, g_new
        curve.append(f)
    else:
        # max_iter steps: the last one's gradient, at the heads returned, is
        # tested as every step's (a run that reaches tol there has converged).
        with np.errstate(over="ignore"):
            gnorm = _norm(g)
        converged = bool(gnorm <= tol)
    return SphereResult(U, np.asarray(curve), n_iter, converged, G, memory, overflow)


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
    U = normalize_heads(U0)
    f, G = fun(U)
    g = project_tangent(U, G)
    curve = [f]
    n_iter = 0
    while n_iter < max_iter:
        gnorm = _norm(g)
        if gnorm <= tol:
            return SphereResult(U, np.asarray(curve), n_iter, True, G)
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
    return SphereResult(U, np.asarray(curve), n_iter, _norm(g) <= tol, G)
