"""Overall scale and noise level of a data set, from its second-moment spectrum.

``math.md`` section 7, "Scale and noise from the spectrum". Under the
mixture of ``math.md`` section 1 scaled by ``s > 0`` (``x = s (mu*_z
+ sigma eps)``, orthogonal unit centroids, weights ``w_c``), the second-moment
matrix ``M = E[x x^T] = s^2 (sum_c w_c mu*_c mu*_c^T + sigma^2 I_d)`` has K
eigenvalues ``s^2 (w_c + sigma^2)`` and ``d - K`` eigenvalues ``s^2 sigma^2``.
Hence ``s^2 sigma^2`` is the mean of the ``d - K`` smallest eigenvalues and
``s^2 = sum of the K largest - K s^2 sigma^2`` (the weights sum to one).
"""

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ._validation import power_of_two_unit


@dataclass(frozen=True)
class Spectrum:
    """Scale, noise and unit-scale second moment of a data set."""

    scale: float  #: s, the overall scale (centroid norm)
    noise: float  #: sigma, the noise level relative to s
    moment: np.ndarray  #: M / s^2 in float64, shape (d, d)
    eigenvalues: np.ndarray  #: eigenvalues of ``moment``, descending
    #: their eigenvectors (columns, in the same order): the spectral start's
    #: top K, so that one eigendecomposition of the d x d moment serves both
    eigenvectors: np.ndarray
    #: the number and the sum of the eigenvalues of the rows' moment in R^d
    #: beyond those held: none, unless the rows are their coordinates in a
    #: principal subspace (``estimate_spectrum``'s ``full``)
    rest: tuple = (0, 0.0)

    def completed(self):
        """The eigenvalues of the moment in R^d, descending: those held, and
        the rest's mean in place of each of the rest (the noise's, under the
        model; it can exceed the least held, found on a subsample's basis)."""
        count, total = self.rest
        if count == 0:
            return self.eigenvalues
        return np.sort(np.concatenate([self.eigenvalues, np.full(count, total / count)]))[::-1]


# Relative distance from the kurtosis' upper end under which sigma is infinite
# (:func:`_noise_from_norms`): a rounding error of eps in r then moves the
# estimate by at most about eps / sqrt(_NOISE_END) ~ 1e-12 relative.
_NOISE_END = 1e-8


def _noise_from_norms(mean_sq, mean_fourth, d):
    """sigma^2 from the kurtosis of the norms, for unit centroids (K >= d).

    ``math.md`` section 7, "Scale and noise from the spectrum".

    With ``x = s (mu + sigma g)``, ``||mu|| = 1``: ``E||x||^2 = s^2 (1 + d
    sigma^2)`` and ``E||x||^4 = s^4 (1 + (2d + 4) sigma^2 + (d^2 + 2d)
    sigma^4)`` (Gaussian moments), so ``r = E||x||^4 / (E||x||^2)^2``, which
    does not depend on s, solves ``a t^2 + b t + c = 0`` in ``t = sigma^2``
    with ``a = d^2 (r - 1) - 2d``, ``b = 2d (r - 1) - 4``, ``c = r - 1``.
    ``r`` grows from 1 (sigma = 0) to ``1 + 2/d`` (sigma -> infinity); a
    value outside that range is clipped to its ends. Near the upper end the
    root moves as ``1 / sqrt(2/d - (r - 1))``, so rounding in ``r`` is
    amplified without bound there: within a relative ``_NOISE_END`` of the
    end, sigma is taken as infinite.
    """
    if mean_sq <= 0.0:
        return 0.0
    r = mean_fourth / mean_sq**2 - 1.0  # r - 1
    if r <= 0.0:
        return 0.0
    if r >= (2.0 / d) * (1.0 - _NOISE_END):
        return np.inf
    a, b, c = d * d * r - 2.0 * d, 2.0 * d * r - 4.0, r
    if a == 0.0:
        return -c / b
    disc = max(b * b - 4.0 * a * c, 0.0)
    roots = [(-b - np.sqrt(disc)) / (2.0 * a), (-b + np.sqrt(disc)) / (2.0 * a)]
    positive = [t for t in roots if t >= 0.0]
    return min(positive) if positive else 0.0


def estimate_spectrum(data, n_clusters, moment=None, full=None):
    """Estimate the scale s and the noise sigma of the data (see the module docstring).

    ``data`` is a pass-layer object (``_passes``) seen at scale 1. Its
    second moment comes with a scale of the rows found in the same pass
    (``data.scaled_second_moment()``, or ``moment`` when the caller has
    it already, from ``data.moments()``), so the estimate neither overflows nor
    underflows for finite data of any magnitude. When ``n_clusters >=
    n_features`` the spectrum cannot separate signal from noise, and sigma
    comes from the spread of the squared norms instead
    (:func:`_noise_from_norms`), at most the smallest eigenvalue's
    ``s^2 sigma^2`` (each eigenvalue is ``s^2 (w_c + sigma^2)`` or more).
    Data whose rows are all zero get scale 1 (the passes read the rows of
    positive weight alone: ``_passes._positive``).

    ``full``: the rows in R^D of which ``data`` holds the coordinates in a
    principal subspace (``_plan._prepare``), as seen at their own scale.
    Its top eigenvalues are the
    moment's in R^D, but its other ones are the largest of the noise's, at
    the bulk's upper edge, up to ``(1 + sqrt(D / n))^2`` times its mean: the
    noise is then the mean of the ``D - K`` smallest eigenvalues in R^D, from
    the trace of the rows in R^D (their mean squared norm, one pass), as the
    d x d path takes it, and ``Spectrum.rest`` holds what the subspace
    leaves out.

    Returns
    -------
    Spectrum
    """
    peak, M = data.scaled_second_moment() if moment is None else moment
    d = data.n_features
    if peak == 0.0:
        return Spectrum(
            scale=1.0,
            noise=0.0,
            moment=np.zeros((d, d)),
            eigenvalues=np.zeros(d),
            eigenvectors=np.eye(d),
            # (Coordinates in a principal subspace: the rest of R^D is zero too.)
            rest=(0, 0.0) if full is None else (full.n_features - d, 0.0),
        )
    prescaled = data.rescaled(peak)
    eig, vectors = np.linalg.eigh(M)
    eig, vectors = np.clip(eig[::-1], 0.0, None), vectors[:, ::-1]
    k = min(n_clusters, d)
    trace = float(np.sum(eig))
    rest = (0, 0.0)
    if full is not None:
        total = max(full.rescaled(full.scale * peak).norm_moments()[0], trace)
        rest = (full.n_features - d, total - trace)
        # At least 0: where the top k eigenvalues hold the whole trace (k at
        # the rows' rank) the two sums, in other orders, differ by rounding.
        noise_var = max((total - float(np.sum(eig[:k]))) / (full.n_features - k), 0.0)
    elif k < d:
        noise_var = float(np.mean(eig[k:]))
    else:
        # trace = s^2 (1 + d sigma^2) gives s^2 sigma^2 once sigma is known.
        sigma2 = _noise_from_norms(trace, prescaled.norm_moments()[1], d)
        noise_var = trace / d if np.isinf(sigma2) else trace * sigma2 / (1.0 + d * sigma2)
        # Every eigenvalue is s^2 (signal + sigma^2): the noise is at most the
        # smallest. Norms spread past the model's range (one dominant
        # direction, say) would otherwise call everything noise.
        noise_var = min(noise_var, float(eig[-1]))
    signal = max(float(np.sum(eig[:k])) - k * noise_var, 1e-12 * trace)
    scale_unit = np.sqrt(signal)
    noise = np.sqrt(noise_var) / scale_unit
    with np.errstate(over="ignore"):  # rows beyond float64: the fit refuses an infinite scale
        scale = peak * scale_unit
    return Spectrum(
        scale=scale,
        noise=float(noise),
        moment=M / signal,
        eigenvalues=eig / signal,
        eigenvectors=vectors,
        rest=(rest[0], rest[1] / signal),
    )


def gram_coordinates(gram):
    """Rows of R^r, r <= m, whose inner products are ``gram`` (m x m,
    symmetric positive semi-definite but for rounding): ``E = V diag(sqrt(l))``
    from its eigendecomposition ``V diag(l) V^T``, on the eigenvalues above
    rounding (those at most ``m eps l_max``, and those rounded below zero,
    are zero; one zero column when all are). A method that reads rows
    through their inner products alone (the sphere's dynamics, the spectrum
    of their second moment) reads these as it reads the rows, however wide.
    """
    return gram_basis(gram)[0]


def gram_basis(gram):
    """``(E, W)``: :func:`gram_coordinates` ``E`` of rows Z whose inner
    products are ``gram``, and W (m x r) that maps inner products to
    coordinates: a vector y of R^d has the coordinates ``(y Z^T) W`` in the
    orthonormal basis ``Z^T W`` of the rows' span (``E = gram W``, a row's
    own), and coordinates e are the vector ``e W^T Z`` of R^d. W is
    ``V diag(1 / sqrt(l))`` on the eigenvalues kept (a zero column when none
    is).
    """
    m = gram.shape[0]
    values, vectors = np.linalg.eigh(gram)
    kept = values > m * np.finfo(np.float64).eps * max(values[-1], 0.0)
    if not np.any(kept):
        return np.zeros((m, 1)), np.zeros((m, 1))
    roots = np.sqrt(values[kept])
    return vectors[:, kept] * roots, vectors[:, kept] / roots


# Largest estimated condition number of the Cholesky factor L that
# gram_factor takes (LAPACK's 1-norm estimate, which may exceed the 2-norm
# condition: its square overstated cond(G) 30 to 1500 times at m = 50 to
# 400, so that G is refused from a cond(G) of about 1e6 on): far below the
# 1 / (m eps) at which gram_basis starts to leave eigenvalues out.
_GRAM_CHOLESKY_MAX_COND = 1e4


def gram_factor(gram):
    """``(E, W)`` with :func:`gram_basis`'s meaning, from the Cholesky factor
    ``gram = L L^T`` where ``gram`` is well conditioned: ``E = L`` and
    ``W = L^-T``, so that ``B = Z^T W`` is orthonormal (``B^T B = W^T G W =
    L^-1 L L^T L^-T = I``) and ``E = G W = L`` (``docs/math.md`` section 8,
    "Tokens wider than they are many": any orthonormal basis of the span
    will do). About ``m^3 / 3`` multiply-adds for the factor and as many for
    ``W``, where the eigendecomposition takes several times ``m^3``. A Gram
    matrix that is singular, or whose factor's estimated condition number
    passes ``_GRAM_CHOLESKY_MAX_COND`` (rows nearly dependent, where
    :func:`gram_basis` would leave eigenvalues out), takes :func:`gram_basis`.
    """
    try:
        L = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        return gram_basis(gram)
    # LAPACK's estimate of 1 / cond_1(L), O(m^2).
    reciprocal = scipy.linalg.lapack.dtrcon(L, norm="1", uplo="L")[0]
    if not reciprocal * _GRAM_CHOLESKY_MAX_COND >= 1.0:
        return gram_basis(gram)
    # L^-1 by LAPACK's triangular inverse (m^3 / 3), zero above its
    # diagonal as L is.
    inverse, info = scipy.linalg.lapack.dtrtri(L, lower=1)
    if info != 0:
        return gram_basis(gram)
    return L, inverse.T


def spike_overlap(eigenvalue, noise_variance, n_features, n_samples):
    """Squared cosine between a sample eigenvector and the direction it estimates.

    For a sample second moment of n rows in d dimensions over isotropic
    noise of variance v, ``gamma = d / n``: an eigenvalue ``lambda`` at or
    below the noise's bulk edge ``v (1 + sqrt(gamma))^2`` carries no trace of
    a direction (0); above it, it is ``v (1 + ell) (1 + gamma / ell)`` for
    the signal ``ell v``, solved here for ell, and the squared cosine is
    ``(1 - gamma / ell^2) / (1 + gamma / ell)`` (``math.md`` section 7,
    "When the spectrum shows the clusters").
    """
    gamma = n_features / n_samples
    if not noise_variance > 0.0:
        return 1.0
    x = float(eigenvalue) / float(noise_variance)  # (Python floats: inf past float64)
    if x == math.inf:
        # A signal beyond float64 over the noise: its limit, the direction.
        return 1.0
    if not x > (1.0 + math.sqrt(gamma)) ** 2:
        return 0.0
    b = x - 1.0 - gamma
    # (Python floats: b^2 beyond float64 is inf, where ell is b to rounding.)
    square = b * b
    ell = 0.5 * (b + math.sqrt(max(square - 4.0 * gamma, 0.0))) if square < math.inf else b
    return max((1.0 - gamma / (ell * ell)) / (1.0 + gamma / ell), 0.0)


# Rows on which principal_basis finds the principal subspace.
BASIS_ROWS = 8192


_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)


def principal_basis(
    data, n_components, n_leading, n_rows=BASIS_ROWS, max_iter=10, tol=1e-2, random_state=0
):
    """Orthonormal basis (d x r) of the top eigenvectors of the second moment.

    Block subspace iteration (the randomised range finder of Halko,
    Martinsson and Tropp, 2011, Alg. 4.4) on the operator ``V -> M V``
    (:meth:`~attention_cluster._passes.DenseRows.moment_action`, two products
    of the rows with r vectors, never the d x d matrix), from a Gaussian
    start, on about ``n_rows`` rows drawn uniformly (all rows when there
    are fewer), then a Rayleigh-Ritz step. It stops when the span of the
    ``n_leading`` leading Ritz vectors (those of the largest eigenvalues of
    ``Q^T M Q``; the other columns only speed up their convergence) turns
    by less than ``tol`` between two iterations, the sine of the largest
    principal angle between the two spans (:func:`largest_sine`,
    :func:`sine_at_most`), or after
    ``max_iter`` iterations: few when the spectrum has a gap after the
    leading eigenvalues, more at high noise, where the subspace decides the
    accuracy (``benchmarks/user_data.py``). The span is what the fit uses:
    leading eigenvalues that nearly coincide (clusters of equal weight) turn
    their vectors within it from one iteration to the next, and a test on
    each vector would wait for them. The columns come in decreasing order of
    their Rayleigh quotients. Seeded (``random_state``) so that the basis
    does not depend on the estimator's random state.

    The basis does not depend on the rows' scale: the subsample is seen
    divided by the power of two of its largest entry (exact;
    ``_validation.power_of_two_unit``; at least ``2^-1022``, whose inverse
    float64 holds), so that
    the products ``X^T (X Q)``, which overflow from entries of about 1e154
    as given, are formed at unit scale, and the rows and ``2^k`` times the
    rows give the same basis (sparse rows form their second product at the
    rows' magnitude, ``SparseRows.moment_action``).
    """
    rng = np.random.RandomState(random_state)
    rows = data.subsample(rng, n_rows)
    peak = rows.peak()
    if peak > 0.0:
        # At least 2^-1022, whose inverse float64 holds (the passes divide by
        # the scale): subnormal rows are then seen below unit scale.
        rows = rows.rescaled(rows.scale * max(power_of_two_unit(peak), _SMALLEST_NORMAL))
    # Two products with the rows an iteration, on the same rows: sparse ones
    # sum over rows from a copy of them by columns (SparseRows.for_repeated_sums).
    rows = rows.for_repeated_sums()
    # The basis lies in the columns where some row may be non-zero (M's
    # other rows and columns are zero): it is found there, from the dense
    # rows' start there (_gaussian_rows), and is zero in the others. Of
    # hashed features (2^20 columns, most of them empty) the d x r products
    # of each iteration took most of a fit's time. Rows that may be non-zero
    # in every column take all of them.
    support = rows.column_support()
    d = data.n_features
    # (Fewer columns than the basis' r, or none, all rows zero there: taken
    # as dense rows are, in every column.)
    if support is not None and not n_components <= len(support) < d:
        support = None

    def in_r_d(Q):  # Q's rows at the support's columns, zero elsewhere
        if support is None:
            return Q
        full = np.zeros((d, Q.shape[1]))
        full[support] = Q
        return full

    def action(Q):  # M Q, on the support's rows
        MQ = rows.moment_action(in_r_d(Q))
        return MQ if support is None else MQ[support]

    Q = orthonormal(_gaussian_rows(rng, d, n_components, support))
    previous = None
    for _ in range(max_iter):
        MQ = action(Q)
        leading = Q @ _ritz_vectors(Q, MQ)[:, :n_leading]
        Q = orthonormal(MQ)
        if previous is not None and sine_at_most(previous, leading, tol):
            break
        previous = leading
    return in_r_d(Q @ _ritz_vectors(Q, action(Q)))


def _gaussian_rows(rng, d, r, support=None):
    """The rows ``support`` (all when None) of a d x r standard Gaussian
    drawn by ``rng``: the same numbers whatever the support, so that the
    start of rows that are zero outside it is the dense rows' start there
    (M G is then the same). Drawn by blocks of rows (the same stream), so
    that no d x r array is held for a small support."""
    if support is None:
        return rng.standard_normal((d, r))
    out = np.empty((len(support), r))
    step = max(1, (1 << 20) // max(r, 1))
    for lo in range(0, d, step):
        block = rng.standard_normal((min(step, d - lo), r))
        a, b = np.searchsorted(support, [lo, lo + len(block)])
        out[a:b] = block[support[a:b] - lo]
    return out


# Above this condition number of the Cholesky factor (cond(A)), orthonormal
# takes Householder's QR.
_CHOLESKY_QR_MAX_COND = 1e6


def orthonormal(A):
    """An orthonormal basis (d x r) of the columns of A (d x r, d >> r, full rank).

    Cholesky QR twice (CholeskyQR2: Fukaya, Nakatsukasa, Yanagisawa and
    Yamamoto, 2014): ``R = chol(A^T A)^T``, ``Q = A R^-1``, then the same on
    Q, which makes it orthonormal to rounding when ``cond(A)`` is below
    about ``1e8``. Two products with A, where Householder's QR of a tall,
    thin matrix is several times slower. Householder's QR
    (``np.linalg.qr``) when A's columns are closer to dependent
    (``_CHOLESKY_QR_MAX_COND``).
    """
    Q = A
    for step in range(2):
        try:
            L = np.linalg.cholesky(Q.T @ Q)
        except np.linalg.LinAlgError:
            return np.linalg.qr(A)[0]
        # cond(L) = cond(A), from the r x r factor (its diagonal's ratio can
        # be far from it: 1.4e-12 from orthonormal at cond(A) = 1e12).
        if not np.linalg.cond(L) < _CHOLESKY_QR_MAX_COND:
            return np.linalg.qr(A)[0]
        # The second solve overwrites the first one's Q, its own (the same
        # numbers, one d x r copy fewer; A, the fallback's, is never written).
        Q = scipy.linalg.solve_triangular(
            L, Q.T, lower=True, check_finite=False, overwrite_b=step == 1
        ).T
    return Q


def _ritz_vectors(Q, MQ):
    """Eigenvectors of ``Q^T M Q`` (from ``MQ = M Q``), by decreasing eigenvalue (Rayleigh-Ritz)."""
    B = Q.T @ MQ
    return np.linalg.eigh(0.5 * (B + B.T))[1][:, ::-1]


def largest_sine(A, B):
    """Sine of the largest principal angle between the spans of two d x k
    matrices with orthonormal columns: the largest singular value of ``B -
    A (A^T B)``, the part of B's span outside A's (Golub and Van Loan,
    Matrix Computations, 4th ed., section 2.5.3; accurate for small angles,
    where ``sqrt(1 - cos^2)`` loses half the digits)."""
    return float(np.linalg.norm(B - A @ (A.T @ B), ord=2))


# The relative error of sine_at_most's reading of the largest singular value,
# within which of ``tol`` it takes the SVD's.
_GRAM_MARGIN = 1e-6


def sine_at_most(A, B, tol):
    """Whether ``largest_sine(A, B) <= tol``, with :func:`largest_sine`'s answer.

    The largest singular value of ``M = B - A (A^T B)`` (d x k) is read as
    the root of the largest eigenvalue of its k x k Gram matrix ``M^T M``,
    where the SVD of M took about eight times as long (1.5 ms at d = 20000,
    k = 10).
    The Gram matrix's sums of d terms err by at most ``d eps ||M||_F^2 <=
    d k eps ||M||_2^2`` (Higham, Accuracy and Stability of Numerical
    Algorithms, 2nd ed., section 3.5), so that the root errs relatively by
    about ``d k eps / 2``, 3e-9 at a million features and k = 50, and the
    SVD's own by a small multiple of eps: the two give one answer unless
    the root lies within ``_GRAM_MARGIN`` of ``tol``, where the SVD's
    value, :func:`largest_sine`'s, decides.
    """
    M = B - A @ (A.T @ B)
    gram = M.T @ M
    if np.all(np.isfinite(gram)):
        root = float(np.sqrt(max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)))
        if abs(root - tol) > _GRAM_MARGIN * tol:
            return root <= tol
    return float(np.linalg.norm(M, ord=2)) <= tol
