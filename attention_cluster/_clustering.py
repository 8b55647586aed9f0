"""AttentionClustering: K linear attention heads trained on the unit sphere."""

import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from threadpoolctl import threadpool_limits

from . import _full, _kernels, _mixture
from ._passes import DenseRows, rows_of
from ._scale import estimate_spectrum, principal_basis
from ._validation import (
    atomic_fit,
    check_auto_or_positive,
    check_n_samples,
    check_options,
    check_positive,
    check_sample_weight,
    warn_caller,
)
from .theory import lambda_star, unbiased_temperature

# PSGD bookkeeping: the driver checks convergence every _CHUNK steps, and the
# step size decays as 1 / (1 + t / _DECAY).
_CHUNK = 100
_DECAY = 200.0
_DEFAULT_TOL = {"psgd": 1e-4, "full": 1e-6}
_DEFAULT_MAX_ITER = {"psgd": 5000, "full": 500}
# The EM refinement stops when a plain EM step moves the heads by less than
# this squared distance (math.md section 5): far below the statistical error
# of the heads up to n ~ 1e7 at sigma ~ 1 (benchmarks/solvers.py).
_REFINE_TOL = 1e-8
# solver="auto" takes the exact solver (with its EM refinement) up to this many
# rows. benchmarks/solvers.py (d=10, K=2) finds it faster than PSGD up to 1e4
# rows and at most about 1.6x PSGD's time at 1e5, for 4 to 5 times PSGD's
# accuracy there; at 1e6 PSGD, whose cost does not grow with n, is 2.5 to 4
# times faster.
_AUTO_FULL_MAX_N = 200_000
# center="auto" centres the data when the squared norm of their mean exceeds
# this many times the K-th eigenvalue of their second moment. On the paper's
# mixtures the ratio stays below about 4 (weights up to 3:1; up to 8 for
# 9:1 weights at low noise); where the common mean makes the fit collapse
# it is above 12 (benchmarks/user_data.py, docs/user_data.md).
_CENTER_RATIO = 10.0
# From this many features on, the fit runs in the principal subspace of
# dimension K + _SUBSPACE_EXTRA found by subspace iteration, never forming a
# d x d matrix (switch point measured in benchmarks/user_data.py).
_SUBSPACE_MIN_FEATURES = 500
_SUBSPACE_EXTRA = 10
# A cluster that receives less than this fraction of 1/K of the points
# counts as lost: the fit warns.
_LOST_FRACTION = 0.1


def auto_temperature(noise, sequence_length, n_clusters, n_features, eigenvalues=None):
    """Default temperature for unit-scale data of estimated noise ``sigma``.

    The unbiased temperature of Prop. 4.1 (generalised to K clusters in
    :func:`attention_cluster.theory.unbiased_temperature`), so that the
    layer's output is centred on each point's centroid, capped twice:

    - at ``0.95 lambda*(sigma, L, d)`` (Prop. 3.3,
      :func:`attention_cluster.theory.lambda_star`), so that the centroids
      stay the risk's minimisers with a margin for the error of sigma;
    - at ``0.9 / (K (m_1 + tr(M) / L))``, with ``m_1`` the largest
      eigenvalue of the unit-scale second moment M (``eigenvalues``, in
      descending order). For large L a head on a direction of second moment
      m lowers the risk by ``f(m) = a m^2 (2 - a m)``, ``a = lambda K``
      (``math.md`` section 3), which grows with m only while ``a m < 4/3``;
      the token's attention to itself adds about ``tr(M) / L`` to m. With
      equal weights the cap is near the unbiased temperature; with unequal
      weights the heaviest cluster has the largest m and, without the cap,
      the risk pushes its head off its centroid. The factor 0.9 is the
      margin found with :func:`attention_cluster.theory.population_pgd`
      (weights up to 9:1, sigma up to 1).
    """
    unbiased = float(unbiased_temperature(noise, sequence_length, n_clusters))
    caps = [0.95 * float(lambda_star(noise, sequence_length, n_clusters, n_features))]
    if eigenvalues is not None and eigenvalues[0] > 0:
        effective = eigenvalues[0] + float(np.sum(eigenvalues)) / sequence_length
        caps.append(0.9 / (n_clusters * effective))
    return min([unbiased, *[c for c in caps if np.isfinite(c) and c > 0]])


def auto_reg_strength(noise, temperature, n_clusters, regularization="pairwise", weakest_signal=None):
    """Default regularisation strength rho for unit-scale data.

    Too much rho pulls heads off the centroids' span (paper, Fig. 2a). Two
    limits, each derived for large L (``math.md`` section 3), and rho is the
    smaller of the two:

    - locally, the centroids stop being a minimum at ``rho_max = lambda K /
      (K - 1)`` (pairwise), where the regulariser's negative curvature out
      of the span cancels the risk's; :func:`attention_cluster._full.
      auto_reg_strength` takes a tenth of it (scaled for the product
      regulariser);
    - globally, a head on a direction of second moment m lowers the risk by
      ``f(m) = a m^2 (2 - a m)`` with ``a = lambda K``: ``m_s`` on the span
      (``1/K + sigma^2`` for equal weights; in general the K-th eigenvalue
      of the unit-scale second moment, ``weakest_signal``, the lightest
      cluster's direction), ``sigma^2`` off it, while the pairwise
      regulariser costs ``(K - 1) sigma^2 / K`` more on the span. A tenth
      of the ratio of the two, capped at 0.25, keeps the span the minimiser
      when unequal weights make its weakest direction weak.
    """
    local = _full.auto_reg_strength(temperature, n_clusters, regularization or "none", noise)
    a = temperature * n_clusters
    s2 = noise**2
    m_s = 1.0 / n_clusters + s2 if weakest_signal is None else weakest_signal
    gain = a * m_s**2 * (2.0 - a * m_s) - a * s2**2 * (2.0 - a * s2)
    penalty = (n_clusters - 1.0) * s2 / n_clusters
    glob = 0.25 if penalty <= 0.0 else min(0.25, 0.1 * max(gain, 0.0) / penalty)
    return float(min(local, glob))


def _tail_average(chunk_sums, fallback):
    """Polyak-Ruppert average of the iterates over the second half of the run.

    Averaging removes most of the stochastic-gradient jitter around the
    minimiser; the first half is dropped as the transient.
    """
    avg = np.sum(chunk_sums[len(chunk_sums) // 2 :], axis=0)
    norms = np.linalg.norm(avg, axis=0)
    ok = norms > 0
    return np.where(ok, avg / np.where(ok, norms, 1.0), fallback)


def _random_heads(rng, n_features, n_clusters):
    """Heads drawn uniformly on the sphere (columns of a d x K array)."""
    U = rng.standard_normal((n_features, n_clusters))
    return U / np.linalg.norm(U, axis=0)


class AttentionClustering(ClusterMixin, TransformerMixin, OneToOneFeatureMixin, BaseEstimator):
    """Clustering with K linear attention heads learned on the unit sphere.

    The estimator of "Attention-based clustering" (NeurIPS 2025). Each head
    ``mu_h`` is a unit vector; the layer maps a sequence of L tokens to

        T(X)_l = (lambda K / L) sum_h sum_k <X_l, mu_h> <mu_h, X_k> X_k

    (``math.md`` section 2). The heads minimise, without labels, the risk
    ``E ||X_1 - T(X)_1||^2`` over sequences of L rows drawn from the data,
    plus ``reg_strength`` times an orthogonality regulariser (``math.md``
    section 3; paper, section 3.3), by projected stochastic gradient
    descent on the sphere or by the exact solver (``solver``). At a
    minimiser the heads are the cluster directions, and a point's cluster
    is ``argmax_h <x, mu_h>`` (the rebuttal's post-hoc rule). By default
    the exact solver's heads are then refined to the maximum-likelihood
    centroid directions of the paper's mixture, by EM whose E step is a
    softmax attention of the points over the heads (``refine``,
    ``math.md`` section 7).

    Data are divided by an estimated overall scale ``scale_`` before
    fitting, so that the centroids are near the unit sphere as the paper
    assumes; labels are unchanged when X is multiplied by a positive
    constant.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of clusters K, and of attention heads.
    temperature : "auto" or float, default="auto"
        lambda > 0, applied to data divided by ``scale_``. ``"auto"``
        estimates the noise sigma from the second-moment spectrum and takes
        the unbiased temperature of Prop. 4.1 (generalised to K clusters),
        capped at ``0.95 lambda*(sigma, L, d)``, the largest temperature at
        which the centroids minimise the risk (Prop. 3.3), and at
        ``0.9 / (K (m_1 + tr(M) / L))`` with ``m_1`` the top eigenvalue of
        the unit-scale second moment M, which keeps the heaviest of unequal
        clusters a minimiser (see the user guide).
    sequence_length : int, default=50
        L, the number of rows in each sampled sequence. Short sequences
        keep the finite-L terms that single out the centroids inside their
        span; 50 balances that against gradient noise (see the user guide).
    regularization : {"pairwise", "product"} or None, default="pairwise"
        Orthogonality regulariser: ``sum_{j<k} E[<mu_j,X>^2 <mu_k,X>^2]``
        (paper, section 3.3) or ``E[prod_k <mu_k,X>^2]`` (rebuttal). Without
        it, a random start only partially aligns with the centroids.
    reg_strength : "auto" or float, default="auto"
        rho >= 0. ``"auto"`` takes a tenth of the smaller of two limits:
        the rho at which the centroids stop being a local minimum
        (``lambda K / (K - 1)`` for the pairwise regulariser) and the rho
        at which the centroids' span loses its advantage over the noise
        directions (see ``reg_strength_`` and the user guide).
    solver : {"auto", "full", "psgd"}, default="auto"
        ``"full"``: the exact solver. For data held in memory the expected
        risk over sampled sequences has a closed form (``math.md`` section
        3), minimised deterministically by Riemannian L-BFGS on the product
        of spheres (on a subsample of 16384 rows first when n is larger,
        then Newton steps on all rows), at O(n d K) per iteration after
        O(n d^2) moments: no sampling plateau, unlike PSGD. ``"psgd"``:
        projected stochastic gradient descent (paper, Appendix F.1), whose
        cost does not depend on n. ``"auto"``: ``"full"`` up to 200000
        rows, ``"psgd"`` beyond (see ``solver_``). In ``benchmarks/solvers.py``
        the exact solver with its refinement is the faster up to 1e4 rows
        and within about 1.6x of PSGD's time at 1e5, for 4 to 5 times its
        accuracy; at 1e6 PSGD is 2.5 to 4 times faster. The exact solver is
        the more accurate at every n.
    refine : {"auto", "em"} or None, default="auto"
        ``"em"``: after the attention solver, maximise the likelihood of the
        paper's mixture (K centroids of equal norm, isotropic noise, free
        weights; ``math.md`` section 7) by expectation-maximisation started
        at the heads. Its E step is a softmax attention of each point over
        the heads. The heads of the attention risk span the principal
        subspace of the second moment, about ``1 + K sigma^2`` times
        farther from the centroids than the class means at high noise; the
        refined heads are the maximum-likelihood centroid directions, within
        2x of the class means in ``benchmarks/solvers.py``. Each iteration
        is one pass over the data. When it follows the exact solver, that
        solver stops after its subsample stage. ``None``: the attention
        heads as they are, the paper's estimator. ``"auto"``: ``"em"`` after
        the exact solver, None after PSGD (whose cost does not grow with n).
    learning_rate : float, default=1.0
        Base step size, relative to the curvature scale
        ``lambda K tr(M)`` of the risk (M the unit-scale second moment).
        Step t is ``learning_rate / (lambda K tr(M) (1 + t / 200))``.
    batch_size : int, default=2
        Number of sequences averaged in each stochastic gradient.
    max_iter : "auto" or int, default="auto"
        Maximum number of PSGD steps (``"auto"``: 5000), of iterations of
        each stage of the exact solver (``"auto"``: 500), and of passes of
        the EM refinement (``"auto"``: 500), which stops when a plain EM step
        moves the heads by less than 1e-8 (squared distance of ``math.md``
        section 5).
    tol : "auto" or float, default="auto"
        PSGD (``"auto"``: 1e-4): every 100 steps the heads averaged over the
        second half of the run so far (Polyak-Ruppert averaging) are
        compared with their previous value, and the run stops when ``sum_h
        ||mu_h - mu_h^prev||^2 < tol``, the squared distance of ``math.md``
        section 5. Exact solver (``"auto"``: 1e-6): stop when the norm of
        the Riemannian gradient is below ``tol`` times the objective's
        scale ``mean ||x||^2``.
    n_init : int, default=1
        Number of runs from different starts; the run with the lowest final
        objective is kept.
    init : {"spectral", "random"} or array-like of shape (n_clusters, n_features), default="spectral"
        ``"spectral"``: the top-K eigenvectors of the second-moment matrix
        (where the risk's minimisers lie as L grows, ``math.md`` section 3),
        rotated inside their span to minimise the regulariser (Jacobi
        sweeps, as in kurtosis-based ICA). ``"random"``: heads drawn
        uniformly on the sphere, the paper's random start. An array gives
        the starting heads (rows, normalised to unit norm).
    gradient : {"riemannian", "euclidean"}, default="riemannian"
        ``"riemannian"`` projects each head's gradient on the sphere's
        tangent space before the step (``math.md`` section 3);
        ``"euclidean"`` steps along the plain gradient, then normalises
        (paper, Appendix G.3).
    center : {"auto", True, False}, default="auto"
        Subtract the (weighted) mean of the training data before fitting, and
        from every row given to ``predict``, ``transform`` and ``score``
        (``mean_``). The model clusters directions from the origin; when a
        mean common to all rows dominates the second moment, every head sees
        it and the fit collapses into one cluster. ``"auto"`` centres when
        ``||mean||^2`` exceeds 10 times the K-th eigenvalue of the second
        moment, which the paper's mixtures (mean not zero) stay below, so
        they are fitted as they are (see the user guide, and
        ``benchmarks/user_data.py`` for the measurement). Sparse X is
        centred implicitly, never densified.
    random_state : int, RandomState instance or None, default=None
        Seeds the starts and the sampling of sequences.
    n_threads : int or None, default=None
        Threads that share each pass over the data (chunks of rows, see
        :doc:`/performance`). None: the cores this process may run on, as
        :class:`~sklearn.cluster.KMeans` uses by default. The result does not
        depend on it: the chunks and the order in which their sums are added
        are the same for any number of threads.
    verbose : int, default=0
        When positive, print the objective every 100 PSGD steps, each exact
        solver run's outcome, and the log-likelihood of each accepted EM
        iterate.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The heads, unit rows, each signed so that the points of its cluster
        project positively on it.
    labels_ : ndarray of shape (n_samples,)
        :meth:`predict` on the training data.
    n_iter_ : int
        PSGD steps, or iterations of the exact solver's last stage, of the
        kept run.
    loss_curve_ : ndarray
        PSGD: the mini-batch objective at each step. Exact solver: the
        objective of its last stage (on all rows, or on the subsample when
        the refinement follows) at the start and after each iteration.
    solver_ : str
        The solver used (``"auto"`` resolved).
    refine_ : str or None
        The refinement used (``"auto"`` resolved).
    refine_n_iter_ : int
        Passes over the data of the EM refinement (0 without it).
    weights_ : ndarray of shape (n_clusters,)
        Mixture weights: the refinement's maximum-likelihood weights, or
        the (sample-weighted) fractions of points in each cluster without
        it.
    temperature_ : float
        The temperature lambda used.
    reg_strength_ : float
        The regularisation strength rho used.
    noise_scale_ : float
        Estimated sigma (noise relative to the centroid norm).
    scale_ : float
        Estimated overall scale: the data are divided by it.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of features seen during fit, when X has string column names.

    See Also
    --------
    InContextQuantizer : the parameter-free in-context attention layer.
    sklearn.cluster.KMeans : Lloyd's algorithm.

    Examples
    --------
    >>> from attention_cluster import AttentionClustering
    >>> from attention_cluster.datasets import make_mixture
    >>> X, y, centroids = make_mixture(2000, 10, 2, noise=0.3, random_state=0)
    >>> model = AttentionClustering(n_clusters=2, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (2, 10)
    >>> from sklearn.metrics import adjusted_rand_score
    >>> adjusted_rand_score(y, model.labels_) > 0.9
    True
    """

    def __init__(
        self,
        n_clusters=2,
        *,
        temperature="auto",
        sequence_length=50,
        regularization="pairwise",
        reg_strength="auto",
        solver="auto",
        refine="auto",
        learning_rate=1.0,
        batch_size=2,
        max_iter="auto",
        tol="auto",
        n_init=1,
        init="spectral",
        gradient="riemannian",
        center="auto",
        random_state=None,
        n_threads=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.temperature = temperature
        self.sequence_length = sequence_length
        self.regularization = regularization
        self.reg_strength = reg_strength
        self.solver = solver
        self.refine = refine
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.init = init
        self.gradient = gradient
        self.center = center
        self.random_state = random_state
        self.n_threads = n_threads
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags

    def _check_params(self, X):
        check_positive(self.n_clusters, "n_clusters", numbers.Integral, min_val=1, strict=False)
        check_auto_or_positive(self.temperature, "temperature")
        check_positive(self.sequence_length, "sequence_length", numbers.Integral, min_val=1, strict=False)
        check_options(self.regularization, "regularization", ["pairwise", "product", None])
        check_auto_or_positive(self.reg_strength, "reg_strength", strict=False)
        check_options(self.solver, "solver", ["auto", "psgd", "full"])
        check_options(self.refine, "refine", ["auto", "em", None])
        check_positive(self.learning_rate, "learning_rate")
        check_positive(self.batch_size, "batch_size", numbers.Integral, min_val=1, strict=False)
        if not (isinstance(self.max_iter, str) and self.max_iter == "auto"):
            check_positive(self.max_iter, "max_iter", numbers.Integral, min_val=1, strict=False)
        check_auto_or_positive(self.tol, "tol", strict=False)
        check_positive(self.n_init, "n_init", numbers.Integral, min_val=1, strict=False)
        check_options(self.gradient, "gradient", ["riemannian", "euclidean"])
        check_options(self.center, "center", ["auto", True, False])
        if self.n_threads is not None:
            check_positive(self.n_threads, "n_threads", numbers.Integral, min_val=1, strict=False)
        check_positive(self.verbose, "verbose", numbers.Integral, strict=False)
        if isinstance(self.init, str):
            check_options(self.init, "init", ["spectral", "random"])
            return None
        init = np.array(self.init, dtype=np.float64)
        if init.shape != (self.n_clusters, X.shape[1]):
            raise ValueError(
                f"init must have shape (n_clusters, n_features) = "
                f"({self.n_clusters}, {X.shape[1]}), got {init.shape}."
            )
        norms = np.linalg.norm(init, axis=1)
        if not np.all(np.isfinite(init)) or np.any(norms == 0):
            raise ValueError("init must have finite, non-zero rows.")
        return (init / norms[:, None]).T

    @atomic_fit
    def fit(self, X, y=None, sample_weight=None):
        """Learn the heads from X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: rows are drawn with probability
            proportional to their weight, so an integer weight acts as
            repeated rows.

        Returns
        -------
        self : AttentionClustering
            Fitted estimator.
        """
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32], order="C")
        init = self._check_params(X)
        K = self.n_clusters
        check_n_samples(X, K)
        weights = check_sample_weight(sample_weight, X)
        n, d = X.shape
        if K > d:
            warnings.warn(
                f"n_clusters={K} > n_features={d}: the heads cannot be mutually "
                "orthogonal, so the clusters are separated by direction only "
                "approximately.",
                UserWarning,
                stacklevel=2,
            )
        data = rows_of(X, weights, n_threads=self.n_threads)
        # The passes' products have few columns (K to 3K) or run on the
        # pool's threads already: BLAS threads would only oversubscribe.
        with data, threadpool_limits(limits=1, user_api="blas"):
            return self._fit(data, init)

    def _fit(self, data, init):
        K = self.n_clusters
        given = data
        mean = full_mean = data.mean()
        basis = None
        if data.n_features >= _SUBSPACE_MIN_FEATURES and data.n_features > K + _SUBSPACE_EXTRA:
            # High dimension: the fit runs on the rows' coordinates in the
            # principal subspace; heads found there are heads in R^d.
            basis = principal_basis(data, K + _SUBSPACE_EXTRA)
            data = DenseRows(data.project(basis), data.sample_weight, n_threads=data.n_threads)
            mean = basis.T @ mean
            if init is not None:
                init = basis.T @ init
                init /= np.maximum(np.linalg.norm(init, axis=0), np.finfo(np.float64).tiny)
        spectrum = estimate_spectrum(data, K)
        centre, share = self._resolve_center(mean, spectrum)
        if centre and self.center == "auto":
            warn_caller(
                f"The data's common mean carries {share:.0%} of their second moment, so "
                "center='auto' centred them: the model clusters directions from the origin, "
                "and now finds directions from the mean. If the features have different "
                "units, put a StandardScaler before the estimator (see the user guide, "
                "'When to use it'); pass center=True to centre without this warning.",
                UserWarning,
            )
        if centre:
            data = data.centred(mean)
            spectrum = estimate_spectrum(data, K)
        n, d = data.n_samples, data.n_features
        L = self.sequence_length
        if isinstance(self.temperature, str):
            temperature = auto_temperature(spectrum.noise, L, K, d, spectrum.eigenvalues)
        else:
            temperature = float(self.temperature)
        if isinstance(self.reg_strength, str):
            reg_strength = auto_reg_strength(
                spectrum.noise, temperature, K, self.regularization,
                spectrum.eigenvalues[min(K, d) - 1],
            )
        else:
            reg_strength = float(self.reg_strength)
        if self.regularization is None:
            reg_strength = 0.0

        rng = check_random_state(self.random_state)
        solver = self._resolve_solver(n)
        refine = self._resolve_refine(solver)
        # The exact solver's last stage is on all rows unless a refinement
        # follows, which makes its own passes over all rows.
        polish = refine is None
        unit = data.rescaled(spectrum.scale)
        best = None
        for run in range(self.n_init):
            if solver == "full":
                result = self._full(unit, init, spectrum, temperature, reg_strength, rng, run, polish)
            else:
                U0 = init
                if U0 is None:
                    U0 = self._start(unit, spectrum, rng)
                result = self._psgd(unit, U0.copy(), spectrum, temperature, reg_strength, rng, run)
            if self.n_init > 1 and (solver == "psgd" or not polish):
                # Rank the runs by the exact objective on all rows (the exact
                # solver returns it when its last stage is on all rows).
                objective = _full.exact_objective(
                    unit, spectrum.moment, result[0], temperature, L,
                    self._regularization_name(), reg_strength,
                )[0]
                if self.verbose:
                    print(f"[AttentionClustering] init {run}: exact objective {objective:.6g}")
                result = (*result[:3], objective)
            if best is None or result[3] < best[3]:
                best = result
        heads, losses, converged, _ = best
        if not converged:
            what = "steps" if solver == "psgd" else "iterations"
            warnings.warn(
                f"The {solver} solver did not reach tol={self._tol(solver)} in "
                f"max_iter={self._max_iter(solver)} {what}; increase max_iter or tol.",
                ConvergenceWarning,
                stacklevel=2,
            )

        centers = heads.T * np.where(data.head_totals(heads) < 0, -1.0, 1.0)[:, None]
        self.refine_n_iter_ = 0
        if refine == "em":
            fit = _mixture.refine_heads(
                unit, centers.T, float(np.trace(spectrum.moment)),
                spectrum.noise, tol=_REFINE_TOL, max_iter=self._max_iter("full"),
                verbose=self.verbose,
            )
            if not fit.converged:
                warnings.warn(
                    f"The EM refinement did not converge in max_iter={self._max_iter('full')} "
                    "passes; increase max_iter.",
                    ConvergenceWarning,
                    stacklevel=2,
                )
            if self.verbose:
                print(
                    f"[AttentionClustering] EM refinement: {fit.n_iter} passes, "
                    f"mean log-likelihood {fit.log_likelihood[-1]:.6g}"
                )
            self.refine_n_iter_ = fit.n_iter
            centers = fit.heads.T
            self.weights_ = fit.weights
            # Labels: the fitted mixture's posterior mode, argmax_h log pi_h
            # + beta <mu_h, x / s> (math.md section 7).
            with np.errstate(divide="ignore"):
                self._label_bias = np.log(fit.weights)
            self._label_gain = fit.beta / spectrum.scale
        else:
            self._label_bias = np.zeros(K)
            self._label_gain = 1.0
        # T(x) = lambda K (M / s^2) U U^T x with the training data as context
        # (math.md section 2, L -> n), kept as its two factors: x -> (x U) W^T
        # with W = lambda K (M / s^2) U (d x K each, never d x d).
        MU = spectrum.moment @ centers.T
        if basis is not None:
            centers = centers @ basis.T
            MU = basis @ MU
        self.cluster_centers_ = centers.astype(given.dtype, copy=False)
        self._layer = (centers.T, temperature * K * MU)
        self.center_ = centre
        self.mean_ = full_mean if centre else np.zeros_like(full_mean)
        # The training labels are predict's, from the stored centres.
        labels = self._predict_rows(given)
        counts = np.bincount(labels, weights=given.sample_weight, minlength=K)
        if refine != "em":
            self.weights_ = counts / np.sum(counts)
        self._warn_lost_clusters(counts / np.sum(counts), spectrum, centre, share)
        self.refine_ = refine
        self.temperature_ = temperature
        self.reg_strength_ = reg_strength
        self.noise_scale_ = spectrum.noise
        self.scale_ = spectrum.scale
        self.solver_ = solver
        self.n_iter_ = int(losses.shape[0] if solver == "psgd" else losses.shape[0] - 1)
        self.loss_curve_ = losses
        self.labels_ = labels
        return self

    def _regularization_name(self):
        """The regulariser as the solvers name it (``None`` is ``"none"``)."""
        return self.regularization or "none"

    def _resolve_center(self, mean, spectrum):
        """Whether to centre, and the share ``||m||^2 / tr(M)`` of the common mean.

        ``center="auto"`` centres when ``||m||^2 > 10 lambda_K(M)`` (unit
        scale; see ``_CENTER_RATIO``).
        """
        m = mean / spectrum.scale
        mean_sq = float(m @ m)
        trace = float(np.sum(spectrum.eigenvalues))
        share = mean_sq / trace if trace > 0 else 0.0
        if self.center != "auto":
            return bool(self.center), share
        k = min(self.n_clusters, spectrum.eigenvalues.size)
        return mean_sq > _CENTER_RATIO * spectrum.eigenvalues[k - 1], share

    def _warn_lost_clusters(self, fractions, spectrum, centred, share):
        """Warn when the fit leaves clusters (nearly) empty: never one cluster in silence."""
        K = self.n_clusters
        if K == 1:
            return
        if not np.any(spectrum.eigenvalues > 0):
            warn_caller(
                "All rows of X are equal"
                + (" once centred" if centred else " (zero)")
                + f": there is nothing to cluster, and every point is in one of the "
                f"n_clusters={K} clusters.",
                UserWarning,
            )
            return
        lost = int(np.sum(fractions < _LOST_FRACTION / K))
        if lost == 0:
            return
        found = f"{lost} of the n_clusters={K} clusters received fewer than {_LOST_FRACTION / K:.1%} of the points"
        if not centred and share > 0.05:
            advice = (
                f"the data's common mean carries {share:.0%} of their second moment and every "
                "head sees it: pass center=True, or put a StandardScaler before the estimator"
            )
        else:
            advice = (
                "the clusters may not be distinct directions from the origin"
                + (" of the centred data" if centred else "")
                + ": try fewer clusters, a StandardScaler before the estimator, or KMeans"
            )
        warn_caller(f"{found}; {advice} (see the user guide, 'When to use it').", UserWarning)

    def _resolve_solver(self, n_samples):
        """``solver="auto"``: the faster solver for n rows (see _AUTO_FULL_MAX_N)."""
        if self.solver != "auto":
            return self.solver
        return "full" if n_samples <= _AUTO_FULL_MAX_N else "psgd"

    def _resolve_refine(self, solver):
        """``refine="auto"``: EM after the exact solver, none after PSGD."""
        if self.refine != "auto":
            return self.refine
        return "em" if solver == "full" else None

    def _tol(self, solver):
        return _DEFAULT_TOL[solver] if isinstance(self.tol, str) else self.tol

    def _max_iter(self, solver):
        return _DEFAULT_MAX_ITER[solver] if isinstance(self.max_iter, str) else self.max_iter

    def _start(self, data, spectrum, rng):
        """Starting heads (d x K) for ``init="spectral"`` or ``"random"``."""
        d, K = data.n_features, self.n_clusters
        if self.init == "random":
            return _random_heads(rng, d, K)
        return _full.spectral_init(
            data, spectrum.moment, K, self._regularization_name(), random_state=rng
        )

    def _full(self, data, init, spectrum, temperature, reg_strength, rng, run, polish):
        """One run of the exact solver; returns (heads, objective curve, converged, objective)."""
        start = init if init is not None else self.init
        solution = _full.solve_exact(
            data,
            self.n_clusters,
            temperature,
            self.sequence_length,
            regularization=self._regularization_name(),
            reg_strength=reg_strength,
            init=start,
            tol=self._tol("full"),
            max_iter=self._max_iter("full"),
            moment=spectrum.moment,
            random_state=rng,
            polish=polish,
        )
        curve = solution.objective_curve
        if self.verbose:
            print(
                f"[AttentionClustering] init {run}: exact solver, {solution.n_iter_warm} "
                f"iterations on a subsample, {solution.n_iter} on all rows, objective of "
                f"the last stage {curve[-1]:.6g}"
            )
        return solution.heads, curve, solution.converged, float(curve[-1])

    def _psgd(self, data, U, spectrum, temperature, reg_strength, rng, run):
        """One PSGD run; returns (heads, losses, converged, final objective)."""
        # Curvature scale of the risk; an all-zero X has none (and no gradient).
        curvature = temperature * self.n_clusters * float(np.trace(spectrum.moment)) or 1.0
        max_iter = self._max_iter("psgd")
        tol = self._tol("psgd")
        L = self.sequence_length
        state = np.array([rng.randint(1, np.iinfo(np.int64).max)], dtype=np.uint64)
        reg_kind = _full._check_regularization(self._regularization_name())
        riemannian = self.gradient == "riemannian"
        t = np.arange(max_iter, dtype=np.float64)
        steps = self.learning_rate / (curvature * (1.0 + t / _DECAY))
        losses = np.empty(max_iter)
        chunk_sums = []
        rows = np.empty((_CHUNK * self.batch_size * L, data.n_features))
        previous = None
        converged = False
        done = 0
        while done < max_iter:
            start, stop = done, min(done + _CHUNK, max_iter)
            heads_sum = np.zeros_like(U)
            tokens = data.draw(state, rows[: (stop - start) * self.batch_size * L])
            _kernels.psgd_chunk(
                tokens,
                U,
                temperature,
                L,
                self.batch_size,
                steps[start:stop],
                reg_kind,
                reg_strength,
                riemannian,
                losses[start:stop],
                heads_sum,
            )
            done = stop
            chunk_sums.append(heads_sum)
            current = _tail_average(chunk_sums, U)
            change = np.inf if previous is None else float(np.sum((current - previous) ** 2))
            previous = current
            if self.verbose:
                print(
                    f"[AttentionClustering] init {run}, step {done}: "
                    f"objective {np.mean(losses[start:done]):.6g}, "
                    f"change of the averaged heads {change:.3g}"
                )
            if change < tol:
                converged = True
                break
        heads = previous
        losses = losses[:done].copy()
        objective = float(np.mean(losses[done // 2 :]))
        return heads, losses, converged, objective

    def predict(self, X):
        """Cluster of each row: ``argmax_h <x, mu_h>``, or the posterior mode.

        Without the refinement the rule is the rebuttal's ``argmax_h <x,
        mu_h>``; after the EM refinement it is the fitted mixture's posterior
        mode ``argmax_h log pi_h + beta <mu_h, x / s>`` (``math.md`` section
        7), which differs only when the weights ``weights_`` differ.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32], order="C", reset=False)
        with rows_of(X, n_threads=self.n_threads) as data:
            return self._predict_rows(data)

    def _predict_rows(self, data):
        """Labels of a data object's rows (as given, not centred nor scaled)."""
        # <x - m, c_h> = <x, c_h> - <m, c_h>: the centring goes in the bias.
        centers = np.asarray(self.cluster_centers_, dtype=np.float64)
        bias = self._label_bias - self._label_gain * (centers @ self.mean_)
        return data.labels(centers, self._label_gain, bias)

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then return ``labels_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X):
        """The attention layer's output for each row, in context of the training data.

        ``T(x) = lambda K (M / s^2) U U^T x`` where ``M`` is the training
        data's second-moment matrix, ``s = scale_``, ``lambda =
        temperature_`` and U the heads: the layer of ``math.md`` section 2
        with the n training rows as its context (``L = n``), applied to
        ``x - mean_`` (``mean_`` is zero unless the data were centred).
        Row-wise and deterministic, of rank K; without centring linear,
        ``transform(c X) = c transform(X)``. Near the centroids the output
        is the point's centroid direction, scaled (approximate
        quantisation, paper section 4). Computed as ``((x - mean_) U) W^T``
        with ``W = lambda K (M / s^2) U``: O(d K) per row, and sparse X is
        not densified (the output is dense).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New data.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features)
            Same dtype as X.
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32], order="C", reset=False)
        heads, out = self._layer
        return (self._project(X, heads) @ out.T).astype(X.dtype, copy=False)

    def _project(self, X, V):
        """``(X - mean_) V`` in float64, for dense or sparse X."""
        return np.asarray(X @ V, dtype=np.float64) - self.mean_ @ V

    def score(self, X, y=None, sample_weight=None):
        """Negative mean squared reconstruction error ``-mean ||y - T(y)||^2``, ``y = x - mean_``.

        Expanded as ``||y||^2 - 2 <y, T(y)> + ||T(y)||^2`` from the rows'
        products with the 2K columns of the layer's factors, so that sparse
        X is never densified.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New data.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the mean.

        Returns
        -------
        score : float
            Higher is better.
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32], order="C", reset=False)
        weights = check_sample_weight(sample_weight, X)
        heads, out = self._layer
        K = heads.shape[1]
        P = self._project(X, np.hstack([heads, out]))
        A, B = P[:, :K], P[:, K:]
        if sp.issparse(X):
            sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
        else:
            sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
        sq += -2.0 * np.asarray(X @ self.mean_, dtype=np.float64) + self.mean_ @ self.mean_
        residual = sq - 2.0 * np.sum(A * B, axis=1) + np.sum((A @ (out.T @ out)) * A, axis=1)
        return -float(np.average(residual, weights=weights))
