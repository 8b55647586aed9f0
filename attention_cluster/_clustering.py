"""AttentionClustering: K linear attention heads trained on the unit sphere."""

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import assert_all_finite, check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _kernels
from ._exact import solve_exact
from ._mixture import (
    LinearisedEM,
    OnlineEM,
    mixture_parameters,
    refine_heads,
    subsample_sizes,
)
from ._objective import exact_objective, regularizer_code
from ._passes import DaskRows, DenseRows, one_blas_thread, rows_of
from ._scale import estimate_spectrum, principal_basis
from ._seeding import seeded_start
from ._settings import auto_reg_strength
from ._spectral import SUBSAMPLE, spectral_heads
from ._validation import (
    atomic_fit,
    check_auto_or_positive,
    check_dask_array,
    check_dask_sample_weight,
    check_n_samples,
    check_options,
    check_positive,
    check_sample_weight,
    is_dask_collection,
    warn,
)
from .theory import auto_temperature

# PSGD bookkeeping: the driver checks convergence every _STEPS_PER_CHECK
# steps, and the step size decays as 1 / (1 + t / _DECAY).
_STEPS_PER_CHECK = 100
_DECAY = 200.0
_DEFAULT_TOL = {"psgd": 1e-4, "full": 1e-6}
_DEFAULT_MAX_ITER = {"psgd": 5000, "full": 500}
# center="auto" centres the data when the squared norm of their mean exceeds
# this many times the K-th eigenvalue of their second moment. On the paper's
# mixtures the ratio stays below 10 (weights up to 9:1, sigma >= 0.1); where
# the common mean makes the fit collapse it is above 12 (benchmarks/user_data.py,
# docs/user_data.md).
_CENTER_RATIO = 10.0
# From this many features on, the solver runs in the principal subspace of
# dimension K + _SUBSPACE_EXTRA found by subspace iteration, never forming a
# d x d matrix, and the EM refinement on the rows in R^d.
# benchmarks/user_data.py times both paths and compares their ARI: the same
# up to d = 1000 once the EM leaves the subspace (lower at d = 2000 and high
# noise, where both are near chance); the subspace path is the faster from
# d = 1000 on (the d x d path's O(n d^2) against the EM's passes in R^d,
# which high noise makes more numerous).
_SUBSPACE_MIN_FEATURES = 1000
_SUBSPACE_EXTRA = 5
# Dask data never take the subspace path, which needs the rows' projections
# in memory: they run the d x d path, up to this many features.
_DASK_MAX_FEATURES = 2000


def _in_subspace(n_features, n_clusters, lazy=False):
    """Whether a fit runs in the principal subspace (``_SUBSPACE_MIN_FEATURES``; never for Dask data)."""
    return (
        not lazy
        and n_features >= _SUBSPACE_MIN_FEATURES
        and n_features > n_clusters + _SUBSPACE_EXTRA
    )


# A cluster that receives less than this fraction of 1/K of the points
# counts as lost: the fit warns. With center="auto", a fit that loses
# clusters while the mean carries more than _SHARE_TO_RETRY of the second
# moment is done again on the centred rows (TF-IDF rows, whose ratio lies
# among the paper's unequal mixtures', benchmarks/user_data.py).
_LOST_FRACTION = 0.1
_SHARE_TO_RETRY = 0.05
# Largest number of mixture parameters (K d + K + 2) for which partial_fit
# linearises the batches' statistics (LinearisedEM, whose Jacobian costs one E
# step per parameter); above it, online EM.
_LINEARISED_MAX_PARAMETERS = 512

# Relative spread of the squared row norms under which the rows lie on one
# sphere, where centroid_norms="auto" keeps equal norms (see refine_heads).
_ONE_NORM_RTOL = 1e-3


@dataclass(frozen=True)
class _Settings:
    """The settings of one fit, resolved once from the parameters and the spectrum."""

    temperature: float
    reg_strength: float
    solver: str  #: "full" or "psgd"
    refine: object  #: "em" or None
    tol: float
    max_iter: int


@dataclass(frozen=True)
class _Prepared:
    """The rows a fit runs on, before the centring decision."""

    data: object  #: pass-layer data object (the principal-subspace rows in high dimension)
    basis: object  #: (d, r) orthonormal basis of that subspace, or None
    spectrum: object  #: spectrum of ``data`` (not centred)
    mean: np.ndarray  #: mean of ``data``'s rows
    full_mean: np.ndarray  #: mean of the rows in R^d
    share: float  #: ||m||^2 / tr(M) at unit scale
    ratio: float  #: ||m||^2 / lambda_K(M) at unit scale


@dataclass
class _Run:
    """Outcome of one run of a solver."""

    heads: np.ndarray  #: (d, K) unit columns
    loss_curve: np.ndarray
    n_iter: int  #: PSGD steps, or iterations of the exact solver (all stages)
    converged: bool
    objective: object  #: float used to rank runs, None until computed


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

    Used like KMeans (``fit``, ``predict``, ``labels_``,
    ``cluster_centers_``), with two differences a KMeans user meets first:
    ``cluster_centers_`` are unit vectors, the directions of the clusters
    from the origin, and :meth:`transform` returns the attention layer's
    output (each point moved towards its cluster's centre, same shape as X),
    not the distances to the centres that KMeans' ``transform`` returns.

    The estimator of "Attention-based clustering" (NeurIPS 2025). Each head
    ``mu_h`` is a unit vector; the layer maps a sequence of L tokens to

        T(X)_l = (lambda K / L) sum_h sum_k <X_l, mu_h> <mu_h, X_k> X_k

    (``math.md`` section 2). The heads minimise, without labels, the risk
    ``E ||X_1 - T(X)_1||^2`` over sequences of L rows drawn from the data,
    plus ``reg_strength`` times an orthogonality regulariser (``math.md``
    section 3; paper, section 3.3), by projected stochastic gradient
    descent on the sphere or by the exact solver (``solver``). At a
    minimiser the heads are the cluster directions, and a point's cluster
    is ``argmax_h <x, mu_h>`` (user guide, :doc:`/user_guide/model`, "From
    heads to labels and outputs"). By default
    the exact solver's heads are then refined to the maximum-likelihood
    centroid directions of the paper's mixture, by EM whose E step is a
    softmax attention of the points over the heads (``refine``,
    ``math.md`` section 7).

    Data are divided by an estimated overall scale ``scale_`` before
    fitting, so that the centroids are near the unit sphere as the paper
    assumes; labels are unchanged when X is multiplied by a positive
    constant.

    Input and preprocessing: X may be dense or sparse (CSR/CSC, never
    densified). A mean common to all rows is subtracted when it dominates
    (``center``), with a warning; a fit that leaves clusters nearly empty
    warns and names the fix. With d >= 1000 features the solver runs in the
    principal subspace of dimension K + 5, found by subspace iteration
    without a d x d matrix, and the EM refinement on the rows in R^d. Rows
    that are measurements in different units (scikit-learn's tabular data
    sets) suit the model after a
    :class:`~sklearn.preprocessing.StandardScaler`; TF-IDF rows and
    embeddings need none (see the user guide, "When to use it", and
    :doc:`/user_data`). A row with no direction (all zeros, or equal to
    ``mean_``) gets the label with the largest bias: the heaviest cluster
    after the EM refinement, cluster 0 without it.

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
        (paper, section 3.3) or ``E[prod_k <mu_k,X>^2]`` (user guide,
        :doc:`/user_guide/model`, "The regularisers"). Without
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
        cost does not depend on n. ``"auto"``: ``"full"`` at every n (see
        ``solver_``), the more accurate of the two; its cost at large n is a
        few passes over the data (see :doc:`/performance`).
    refine : {"auto", "em"} or None, default="auto"
        ``"em"``: after the attention solver, maximise the likelihood of the
        paper's mixture (K centroids of equal norm, or one norm each with
        ``centroid_norms``; isotropic noise, free weights; ``math.md``
        section 7) by expectation-maximisation started
        at the heads. Its E step is a softmax attention of each point over
        the heads. The heads of the attention risk span the principal
        subspace of the second moment, about ``1 + K sigma^2`` times
        farther from the centroids than the class means at high noise; the
        refined heads are the maximum-likelihood centroid directions. Each
        E step is one pass over the data; on large data EM first
        runs on subsamples, then takes Newton's steps on all rows with the
        subsample's Jacobian, and every stage stops when the heads are
        estimated to be within a small fraction of their standard error of
        the fixed point (``math.md`` section 7). When it follows the exact
        solver, that solver stops after its subsample stage. ``None``: the
        attention heads as they are, the paper's estimator. ``"auto"``:
        ``"em"`` after the exact solver, None after PSGD.
    centroid_norms : {"auto", "equal", "free"}, default="auto"
        The norms of the EM refinement's centroids. ``"equal"``: one common
        norm, the paper's mixture. ``"free"``: one norm per centroid (a
        Gaussian mixture with one shared spherical variance; ``math.md``
        section 7, "One norm per centroid"). ``"auto"``: equal, unless at
        the equal-norm fit one EM step with free norms gains more than the
        Bayesian information criterion's price of the ``K - 1`` extra
        norms, ``(K - 1) log(n) / 2`` nats; the refinement then goes on with
        free norms (``centroid_norms_``). Clusters at different distances
        from the mean, such as standardised wine's (:doc:`/user_data`),
        take free norms; the paper's mixtures keep equal ones. Used only
        with the EM refinement.
    learning_rate : float, default=1.0
        Base step size, relative to the curvature scale
        ``lambda K tr(M)`` of the risk (M the unit-scale second moment).
        Step t is ``learning_rate / (lambda K tr(M) (1 + t / 200))``.
    batch_size : int, default=2
        Number of sequences averaged in each stochastic gradient.
    max_iter : "auto" or int, default="auto"
        Maximum number of PSGD steps (``"auto"``: 5000), of iterations of
        each stage of the exact solver (``"auto"``: 500), and of E steps of
        each stage of the EM refinement (``"auto"``: 500).
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
        objective is kept. Runs differ only by what they draw at random (a
        random start, PSGD's sequences, the exact solver's subsample of more
        than 16384 rows): where they cannot differ (the exact solver from
        ``init="spectral"`` or an array on fewer rows) one run is made, with
        a warning, as KMeans does for an explicit start.
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
        Subtract the (weighted) mean of the training data before fitting,
        and ``mean_`` from every row given to :meth:`predict`,
        :meth:`transform` and :meth:`score`. The model clusters directions
        from the origin; when a mean common to all rows dominates the second
        moment every head sees it and the fit collapses into one cluster.
        ``"auto"`` centres, with a warning, when ``||mean||^2`` exceeds 10
        times the K-th eigenvalue of the second moment (at unit scale),
        which the paper's mixtures (whose mean is not zero) stay below: they
        are fitted as they are; and it fits the centred rows again when the
        uncentred fit leaves clusters nearly empty while the mean carries
        more than 5% of the second moment (TF-IDF rows, say). Sparse X is centred implicitly, never
        densified. See :doc:`/user_data` for the measurement and the user
        guide for the advice on preprocessing.
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
        iterate; on Dask data also each pass over the data and its time.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The heads, unit rows, each signed so that the points of its cluster
        project positively on it.
    labels_ : ndarray of shape (n_samples,)
        :meth:`predict` on the training data (a lazy Dask array when X is
        one; after :meth:`partial_fit`, the last batch's).
    n_iter_ : int
        PSGD steps, or iterations of the exact solver (all its stages), of
        the kept run.
    loss_curve_ : ndarray
        PSGD: the mini-batch objective at each step. Exact solver: the
        objective of its last stage (on all rows, or on the subsample when
        the refinement follows) at the start and after each iteration.
    solver_ : str
        The solver used (``"auto"`` resolved).
    refine_ : str or None
        The refinement used (``"auto"`` resolved).
    refine_n_iter_ : int
        E steps of the EM refinement on all rows, each one pass over the
        data (0 without it; E steps on subsamples are not counted).
    weights_ : ndarray of shape (n_clusters,)
        Mixture weights: the refinement's maximum-likelihood weights, or
        the (sample-weighted) fractions of points in each cluster without
        it.
    means_ : ndarray of shape (n_clusters, n_features)
        With the EM refinement: the fitted mixture's means ``mean_ + s r_k
        mu_k``, all at one distance from ``mean_`` unless
        ``centroid_norms_`` is ``"free"`` (``math.md`` section 7).
    covariances_ : ndarray of shape (n_clusters,)
        With the EM refinement: the variance ``(s tau)^2`` of each
        component, one value shared by all (spherical, as
        :class:`~sklearn.mixture.GaussianMixture`'s ``"spherical"``).
    concentration_ : ndarray of shape (n_clusters,) or None
        After the EM refinement, ``r_h / (tau^2 scale_)`` for each centre,
        with ``r_h / tau^2`` the inverse temperature of the fitted
        mixture's posterior (``math.md`` section 7; one value shared by all
        when the norms are equal): :meth:`predict` takes ``argmax_h
        concentration_[h] <x - mean_, c_h> - concentration_[h]^2
        covariances_[h] / 2 + log weights_[h]``. None without the
        refinement, where :meth:`predict` takes ``argmax_h <x - mean_,
        c_h>``.
    centroid_norms_ : str or None
        ``"equal"`` or ``"free"``: the norms of the fitted mixture's
        centroids (``centroid_norms="auto"`` resolved); None without the
        EM refinement.
    center_ : bool
        Whether the data were centred (``center="auto"`` resolved).
    mean_ : ndarray of shape (n_features,)
        The (weighted) mean subtracted from every row; zeros when the data
        were not centred.
    moment_heads_ : ndarray of shape (n_clusters, n_features)
        ``M c_h`` for each centre ``c_h`` (rows), M the second moment of the
        training data divided by ``scale_^2``: the context of
        :meth:`transform`.
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
    n_steps_ : int
        Batches seen by :meth:`partial_fit` (absent after :meth:`fit`).
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
        centroid_norms="auto",
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
        self.centroid_norms = centroid_norms
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
        check_positive(
            self.sequence_length, "sequence_length", numbers.Integral, min_val=1, strict=False
        )
        check_options(self.regularization, "regularization", ["pairwise", "product", None])
        check_auto_or_positive(self.reg_strength, "reg_strength", strict=False)
        check_options(self.solver, "solver", ["auto", "psgd", "full"])
        check_options(self.refine, "refine", ["auto", "em", None])
        check_options(self.centroid_norms, "centroid_norms", ["auto", "equal", "free"])
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
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data. A Dask array (chunked along rows only) or DataFrame
            is read by passes, one Dask computation each, and never gathered
            (see the "Scaling out" page); ``labels_`` is then a lazy Dask array.
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
        lazy = is_dask_collection(X)
        if lazy:
            X = check_dask_array(self, X, reset=True)
        else:
            # NaN and infinity in a dense X are found by the first pass
            # (DenseRows.moments) instead of a pass of their own, except on
            # the principal-subspace path, which starts with other passes.
            X = validate_data(
                self,
                X,
                accept_sparse=["csr", "csc"],
                dtype=[np.float64, np.float32],
                order="C",
                ensure_all_finite=False,
            )
            if sp.issparse(X) or _in_subspace(X.shape[1], self.n_clusters):
                assert_all_finite(X, input_name="X")
        # A fit starts over: the next partial_fit starts a new stream.
        self.__dict__.pop("n_steps_", None)
        init = self._check_params(X)
        K = self.n_clusters
        check_n_samples(X, K)
        if lazy:
            weights, total = check_dask_sample_weight(sample_weight, X)
            data = DaskRows(X, weights, total_weight=total, verbose=self.verbose)
        else:
            data = rows_of(X, check_sample_weight(sample_weight, X), n_threads=self.n_threads)
        n, d = X.shape
        if lazy and d >= _DASK_MAX_FEATURES:
            raise ValueError(
                f"Dask input with n_features={d} >= {_DASK_MAX_FEATURES} is not supported: "
                "the principal-subspace path that wide data need holds the rows' projections "
                "in memory."
            )
        if K > d and not self._seeds_centres(d, init, self._solver_and_refine()[1]):
            # Only heads that stay directions (no mixture with free norms to
            # carry seeded centres) are crowded by K > d.
            warn(
                f"n_clusters={K} > n_features={d}: the heads cannot be mutually "
                "orthogonal, so the clusters are separated by direction only "
                "approximately (the default init, refine and centroid_norms place "
                "K centres instead)."
            )
        if self.n_init == 1:
            # Nested subsamples: one draw serves the start's rows and the
            # EM's stages (one read of X on Dask data; _draws).
            data.prepare_subsamples(
                check_random_state(self.random_state).randint(2**31 - 1),
                max(
                    [SUBSAMPLE]
                    + [
                        size
                        for free in (False, True)
                        for size in subsample_sizes(n, mixture_parameters(d, K, free))
                    ]
                ),
            )
        # The passes run on the pool's threads already: BLAS threads in each
        # chunk's products would only oversubscribe the cores.
        with data, one_blas_thread():
            return self._fit(data, init)

    def _fit(self, data, init):
        """validate -> subspace and centring -> settings from the spectrum -> runs -> refinement -> attributes."""
        prepared = self._prepare(data)
        if self.center == "auto":
            centre, reason = (
                prepared.ratio > _CENTER_RATIO,
                "their common mean dominates the second moment",
            )
        else:
            centre, reason = bool(self.center), None
        fractions, spectrum = self._fit_prepared(data, prepared, init, centre)
        lost = np.sum(fractions < _LOST_FRACTION / self.n_clusters)
        if self.center == "auto" and not centre and lost and prepared.share > _SHARE_TO_RETRY:
            # The uncentred fit lost clusters to a common mean below the
            # ratio's threshold (TF-IDF rows, say): fit the centred rows.
            centre, reason = (
                True,
                f"the uncentred fit lost {lost} of the n_clusters={self.n_clusters} clusters",
            )
            fractions, spectrum = self._fit_prepared(data, prepared, init, centre)
        if self.center == "auto" and centre:
            warn(
                f"center='auto' centred the data ({reason}; the mean carries {prepared.share:.0%} "
                "of the second moment): the model clusters directions from the origin, and now "
                "finds directions from the mean. If the features have different units, put a "
                "StandardScaler before the estimator (see the user guide, 'When to use it'); "
                "pass center=True to centre without this warning.",
                UserWarning,
            )
        self._warn_lost_clusters(fractions, spectrum, centre, prepared.share)
        return self

    def _fit_prepared(self, given, prepared, init, centre):
        """One fit of the prepared rows, centred or not; sets every fitted attribute.

        Returns the size of each cluster (the smaller of its fraction of the
        weighted points and its weight) and the spectrum the settings came
        from.
        """
        data, basis, spectrum = prepared.data, prepared.basis, prepared.spectrum
        if centre:
            data = data.centred(prepared.mean)
            spectrum = estimate_spectrum(data, self.n_clusters)
        if basis is not None and init is not None:
            init = basis.T @ init
            init /= np.maximum(np.linalg.norm(init, axis=0), np.finfo(np.float64).tiny)
        settings = self._settings(data, spectrum)
        unit = data.rescaled(spectrum.scale)
        rng = check_random_state(self.random_state)
        n_init = self.n_init
        if n_init > 1 and not self._runs_can_differ(data, settings):
            # As KMeans does with an explicit start: one run, and say why.
            warn(
                f"n_init={n_init} would repeat one identical run: on data of this "
                "size the exact solver from a deterministic start (init='spectral' "
                "or an array) draws nothing at random. Performing one run; pass "
                "init='random' for different starts."
            )
            n_init = 1
        best = seeds = None
        # The seeded start: K >= d points for the free-norm mixture, no
        # attention solver (see _seeds_centres).
        if basis is None and self._seeds_centres(data.n_features, init, settings.refine):
            seeds = seeded_start(unit.subsample(rng, SUBSAMPLE), self.n_clusters, rng)
            best, n_init = _Run(seeds.heads, np.empty(0), 0, True, None), 0
        for index in range(n_init):
            sample = unit.subsample(rng, SUBSAMPLE)
            start = self._start(sample, spectrum, init, rng)
            run = self._run(unit, sample, spectrum, settings, start, rng, index, rank=n_init > 1)
            if best is None or run.objective < best.objective:
                best = run
        if not best.converged:
            what = "steps" if settings.solver == "psgd" else "iterations"
            warn(
                f"The {settings.solver} solver did not reach tol={settings.tol} in "
                f"max_iter={settings.max_iter} {what}; increase max_iter or tol.",
                ConvergenceWarning,
            )
        rows = unit
        if settings.refine == "em":
            heads, mean_sq = best.heads, None
            if basis is not None:
                # In high dimension the EM runs on the rows in R^d, from the
                # subspace's heads, which it moves out of the principal
                # subspace: that subspace is estimated with the noise, and at
                # high noise a fit confined to it loses most of its accuracy
                # (benchmarks/user_data.py). From here on the centres are in R^d.
                rows = (given.centred(prepared.full_mean) if centre else given).rescaled(
                    spectrum.scale
                )
                heads, mean_sq, basis = basis @ best.heads, rows.norm_moments()[0], None
            self._refine(
                rows, spectrum, heads, settings, rng, mean_sq, lambda: _one_norm(given), seeds
            )
        else:
            # Each head turned towards the points it wins (math.md section 5).
            signs = np.where(unit.head_totals(best.heads) < 0, -1.0, 1.0)
            self.cluster_centers_ = (best.heads * signs).T
            self.concentration_ = None
            self.centroid_norms_ = None
            self.refine_n_iter_ = 0
        centers = np.asarray(self.cluster_centers_, dtype=np.float64)
        if rows is unit:
            moment_heads = (spectrum.moment @ centers.T).T
        else:
            moment_heads = rows.moment_action(centers.T).T
        if basis is not None:
            # Heads in the principal subspace are heads in R^d.
            centers, moment_heads = centers @ basis.T, moment_heads @ basis.T
        self.cluster_centers_ = centers.astype(given.dtype, copy=False)
        self.moment_heads_ = moment_heads
        self.center_ = bool(centre)
        self.mean_ = prepared.full_mean if centre else np.zeros_like(prepared.full_mean)
        if settings.refine == "em":
            # The mixture in the data's coordinates: out of the principal
            # subspace, plus the mean the centring removed.
            means = self.means_ if basis is None else self.means_ @ basis.T
            self.means_ = means + self.mean_
        # The training labels are predict's, from the stored attributes.
        self.labels_ = self._labels(given)
        if isinstance(given, DaskRows) and settings.refine == "em":
            # The fitted weights stand for the labels' shares: counting the
            # lazy labels would read X once more.
            counts = self.weights_ * given.total_weight
        elif isinstance(given, DaskRows):
            # One counted pass over the lazy labels.
            counts = given.label_counts(self.labels_, self.n_clusters)
        else:
            counts = np.bincount(
                self.labels_, weights=given.sample_weight, minlength=self.n_clusters
            )
        if settings.refine is None:
            self.weights_ = counts / np.sum(counts)
        self.temperature_ = settings.temperature
        self.reg_strength_ = settings.reg_strength
        self.solver_ = settings.solver
        self.refine_ = settings.refine
        self.noise_scale_ = spectrum.noise
        self.scale_ = spectrum.scale
        self.n_iter_ = best.n_iter
        self.loss_curve_ = best.loss_curve
        # A cluster is as large as the smaller of its share of the labels and
        # its fitted weight (EM can empty a cluster that still wins a few points).
        return np.minimum(counts / np.sum(counts), self.weights_), spectrum

    def _prepare(self, data):
        """The rows the solvers see, their spectrum, and the common mean's weight.

        In high dimension (``_SUBSPACE_MIN_FEATURES``) the rows are replaced
        by their coordinates in the principal subspace of dimension
        K + ``_SUBSPACE_EXTRA`` (:func:`~attention_cluster._scale.principal_basis`),
        computed without a d x d matrix. Returns a :class:`_Prepared`: the
        ``ratio`` ``||m||^2 / lambda_K`` and the ``share`` ``||m||^2 /
        tr(M)`` of the mean m, at unit scale, that ``center="auto"`` reads.
        """
        K = self.n_clusters
        if _in_subspace(data.n_features, K, lazy=isinstance(data, DaskRows)):
            full_mean = data.mean()
            basis = principal_basis(data, K + _SUBSPACE_EXTRA, K)
            data = DenseRows(data.project(basis), data.sample_weight, n_threads=data.n_threads)
            mean = basis.T @ full_mean
            spectrum = estimate_spectrum(data, K)
        else:
            # The spectrum's pass comes first: it finds NaN and infinity
            # before any other pass, and the rows' mean in the same read.
            basis = None
            peak, moment, mean = data.moments()
            full_mean = mean
            spectrum = estimate_spectrum(data, K, moment=(peak, moment))
        m = mean / spectrum.scale
        mean_sq = float(m @ m)
        trace = float(np.sum(spectrum.eigenvalues))
        kth = float(spectrum.eigenvalues[min(K, data.n_features) - 1])
        return _Prepared(
            data=data,
            basis=basis,
            spectrum=spectrum,
            mean=mean,
            full_mean=full_mean,
            share=mean_sq / trace if trace > 0 else 0.0,
            ratio=mean_sq / kth if kth > 0 else (np.inf if mean_sq > 0 else 0.0),
        )

    def _warn_lost_clusters(self, fractions, spectrum, centred, share):
        """Warn when the fit leaves clusters (nearly) empty: never one cluster in silence."""
        K = self.n_clusters
        if K == 1:
            return
        if not np.any(spectrum.eigenvalues > 0):
            warn(
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
        if not centred and share > _SHARE_TO_RETRY:
            advice = (
                f"the data's common mean carries {share:.0%} of their second moment and "
                "every head sees it: pass center=True, or put a StandardScaler before the estimator"
            )
        else:
            advice = (
                "the clusters may not be distinct directions from the origin"
                + (" of the centred data" if centred else "")
                + ": try fewer clusters, a StandardScaler before the estimator, or KMeans"
            )
        warn(f"{found}; {advice} (see the user guide, 'When to use it').", UserWarning)

    def _settings(self, data, spectrum):
        """Every data-dependent setting, resolved once from the spectrum."""
        K, d, L = self.n_clusters, data.n_features, self.sequence_length
        if isinstance(self.temperature, str):
            temperature = auto_temperature(spectrum.noise, L, K, d, spectrum.eigenvalues)
        else:
            temperature = float(self.temperature)
        if self.regularization is None:
            reg_strength = 0.0
        elif isinstance(self.reg_strength, str):
            reg_strength = auto_reg_strength(
                spectrum.noise,
                temperature,
                K,
                self.regularization,
                spectrum.eigenvalues[min(K, d) - 1],
            )
        else:
            reg_strength = float(self.reg_strength)
        solver, refine = self._solver_and_refine()
        return _Settings(
            temperature=temperature,
            reg_strength=reg_strength,
            solver=solver,
            refine=refine,
            tol=_DEFAULT_TOL[solver] if isinstance(self.tol, str) else self.tol,
            max_iter=_DEFAULT_MAX_ITER[solver] if isinstance(self.max_iter, str) else self.max_iter,
        )

    def _solver_and_refine(self):
        """The solver and refinement ``"auto"`` resolves to.

        solver="auto" is the exact solver, the more accurate at every n;
        refine="auto" adds EM after it, none after PSGD.
        """
        solver = "full" if self.solver == "auto" else self.solver
        refine = ("em" if solver == "full" else None) if self.refine == "auto" else self.refine
        return solver, refine

    def _runs_can_differ(self, data, settings):
        """Whether two runs can differ: only through what they draw at random.

        They draw a random start, PSGD's sequences, the subsample of more than
        ``SUBSAMPLE`` rows (the spectral start's rows and the exact solver's
        first stage) and the spectral start's heads beyond d.
        """
        random_start = isinstance(self.init, str) and self.init == "random"
        return (
            random_start
            or settings.solver == "psgd"
            or data.n_samples > SUBSAMPLE
            or self.n_clusters > data.n_features
        )

    def _seeds_centres(self, n_features, init, refine):
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
            and self.init == "spectral"
            and refine == "em"
            and self.centroid_norms != "equal"
            and 1 < self.n_clusters
            and n_features <= self.n_clusters
        )

    def _start(self, sample, spectrum, init, rng):
        """The starting heads (d x K), for every solver: the one place that chooses them.

        ``init`` is the validated array (unit columns) or None; ``"random"``
        draws heads uniformly on the spheres; ``"spectral"`` rotates the top
        eigenvectors of the second moment on the rows of ``sample``.
        """
        if init is not None:
            return init.copy()
        if self.init == "random":
            return _random_heads(rng, sample.n_features, self.n_clusters)
        return spectral_heads(sample, spectrum.moment, self.n_clusters, self.regularization, rng)

    def _run(self, unit, sample, spectrum, settings, start, rng, index, rank):
        """One run of the chosen solver from ``start``; returns a :class:`_Run`.

        ``rank``: the run is one of several, ranked by the exact objective on
        all rows (computed here when the solver did not end on all rows).
        """
        if settings.solver == "psgd":
            run = self._psgd(unit, start, spectrum, settings, rng, index)
        else:
            # The exact solver's last stage is on all rows unless the
            # refinement follows, which makes its own passes over all rows.
            polish = settings.refine is None
            solution = solve_exact(
                unit,
                start,
                settings.temperature,
                self.sequence_length,
                regularization=self.regularization,
                reg_strength=settings.reg_strength,
                tol=settings.tol,
                max_iter=settings.max_iter,
                moment=spectrum.moment,
                sample=sample,
                polish=polish,
            )
            curve = solution.objective_curve
            if self.verbose:
                stages = f"{solution.n_iter} iterations on all rows"
                if solution.n_iter_warm:
                    stages = f"{solution.n_iter_warm} iterations on {sample.n_samples} rows" + (
                        f", then {stages}" if polish else ""
                    )
                print(
                    f"[AttentionClustering] init {index}: exact solver, {stages}, objective {curve[-1]:.6g}"
                )
            run = _Run(
                solution.heads,
                curve,
                solution.n_iter + solution.n_iter_warm,
                solution.converged,
                float(curve[-1]) if polish or not solution.n_iter_warm else None,
            )
        if rank and run.objective is None:
            # Rank the runs by the exact objective on all rows.
            run.objective = exact_objective(
                unit,
                spectrum.moment,
                run.heads,
                settings.temperature,
                self.sequence_length,
                self.regularization,
                settings.reg_strength,
            )[0]
            if self.verbose:
                print(
                    f"[AttentionClustering] init {index}: exact objective on all rows {run.objective:.6g}"
                )
        return run

    def _refine(
        self, unit, spectrum, heads, settings, rng, mean_sq=None, spherical_rows=None, seeds=None
    ):
        """The EM refinement (math.md section 7): centres, weights and the posterior's concentration.

        ``mean_sq`` is the rows' mean ``||x / s||^2`` (default: the trace of
        the spectrum's moment, when ``unit`` holds the rows it was taken on);
        ``spherical_rows`` tells ``centroid_norms="auto"`` whether the rows
        as given have one norm (see :func:`refine_heads`); ``seeds``, a
        seeded start (:func:`seeded_start`), gives the starting norms and noise.
        """
        fit = refine_heads(
            unit,
            heads,
            float(np.trace(spectrum.moment)) if mean_sq is None else float(mean_sq),
            spectrum.noise if seeds is None else seeds.noise,
            norms=self.centroid_norms,
            radii=None if seeds is None else seeds.radii,
            spherical_rows=spherical_rows,
            max_iter=settings.max_iter,
            random_state=rng,
            verbose=self.verbose,
        )
        if not fit.converged:
            warn(
                f"The EM refinement did not converge in max_iter={settings.max_iter} "
                "E steps; increase max_iter.",
                ConvergenceWarning,
            )
        if self.verbose:
            print(
                f"[AttentionClustering] EM refinement: {fit.n_iter} passes over all rows, "
                f"mean log-likelihood {fit.log_likelihood[-1]:.6g}"
            )
        self.cluster_centers_ = fit.heads.T.astype(unit.dtype, copy=False)
        self.weights_ = fit.weights
        self.concentration_ = _concentration(fit.radii, fit.variance, spectrum.scale)
        self.centroid_norms_ = "free" if fit.free else "equal"
        self.refine_n_iter_ = fit.n_iter
        # The fitted mixture in the data's units (math.md section 7):
        # X | Z = k ~ N(s r_k mu_k, (s tau)^2 I).
        scale = spectrum.scale
        self.means_ = (scale * fit.radii[:, None]) * fit.heads.T
        self.covariances_ = np.full(
            self.n_clusters, max(scale**2 * fit.variance, np.finfo(float).tiny)
        )

    def _psgd(self, data, U, spectrum, settings, rng, index):
        """One PSGD run from U (d x K); returns a :class:`_Run`."""
        # Curvature scale of the risk; an all-zero X has none (and no gradient).
        curvature = settings.temperature * self.n_clusters * float(np.trace(spectrum.moment)) or 1.0
        max_iter, tol = settings.max_iter, settings.tol
        L = self.sequence_length
        state = np.array([rng.randint(1, np.iinfo(np.int64).max)], dtype=np.uint64)
        reg_kind = regularizer_code(self.regularization)
        riemannian = self.gradient == "riemannian"
        t = np.arange(max_iter, dtype=np.float64)
        steps = self.learning_rate / (curvature * (1.0 + t / _DECAY))
        losses = np.empty(max_iter)
        chunk_sums = []
        rows = np.empty((_STEPS_PER_CHECK * self.batch_size * L, data.n_features))
        previous = None
        converged = False
        done = 0
        while done < max_iter:
            start, stop = done, min(done + _STEPS_PER_CHECK, max_iter)
            heads_sum = np.zeros_like(U)
            tokens = data.draw(state, rows[: (stop - start) * self.batch_size * L])
            _kernels.psgd_chunk(
                tokens,
                U,
                settings.temperature,
                L,
                self.batch_size,
                steps[start:stop],
                reg_kind,
                settings.reg_strength,
                riemannian,
                losses[start:stop],
                heads_sum,
            )
            done = stop
            chunk_sums.append(heads_sum)
            current = _tail_average(chunk_sums, U)
            change = None if previous is None else float(np.sum((current - previous) ** 2))
            previous = current
            if self.verbose:
                moved = "" if change is None else f", change of the averaged heads {change:.3g}"
                print(
                    f"[AttentionClustering] init {index}, step {done}: "
                    f"objective {np.mean(losses[start:done]):.6g}{moved}"
                )
            if change is not None and change < tol:
                converged = True
                break
        losses = losses[:done].copy()
        return _Run(previous, losses, done, converged, float(np.mean(losses[done // 2 :])))

    def _check_new_data(self, X):
        """``(X, lazy)`` for predict, transform and score: a checked Dask array
        (``lazy``), or validated dense or sparse rows."""
        if is_dask_collection(X):
            return check_dask_array(self, X, reset=False), True
        X = validate_data(
            self,
            X,
            accept_sparse=["csr", "csc"],
            dtype=[np.float64, np.float32],
            order="C",
            reset=False,
        )
        return X, False

    def _labels(self, data):
        """predict's rule on the rows of ``data`` (as given): see :meth:`predict`."""
        if self.concentration_ is None:
            gain, bias = np.ones(self.n_clusters), np.zeros(self.n_clusters)
        else:
            # log pi_h - ||m_h||^2 / (2 v) with ||m_h|| = s r_h and v = (s tau)^2
            # (math.md section 7): concentration_[h]^2 v / 2.
            gain = self.concentration_
            with np.errstate(divide="ignore"):
                bias = np.log(self.weights_) - 0.5 * gain**2 * self.covariances_
        # <x - m, c_h> = <x, c_h> - <m, c_h>: the centring goes in the bias.
        bias = bias - gain * (np.asarray(self.cluster_centers_, dtype=np.float64) @ self.mean_)
        return data.labels(self.cluster_centers_, gain, bias)

    def predict(self, X):
        """Cluster of each row: ``argmax_h <x, mu_h>``, or the posterior mode.

        Without the refinement the rule is ``argmax_h <x, mu_h>`` (user
        guide, :doc:`/user_guide/model`); after the EM refinement it is the fitted mixture's posterior
        mode ``argmax_h log pi_h + (r_h <mu_h, x / s> - r_h^2 / 2) / tau^2``
        (``math.md`` section 7), that is ``argmax_h concentration_[h] <x,
        c_h> - concentration_[h]^2 covariances_[h] / 2 + log weights_[h]``
        from the fitted attributes (for data that were not centred), which
        differs from the direction rule only when the weights or the norms
        differ.

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A lazy Dask array for Dask input.
        """
        check_is_fitted(self)
        X, lazy = self._check_new_data(X)
        if lazy:
            return self._labels(DaskRows(X))
        with rows_of(X, n_threads=self.n_threads) as data:
            return self._labels(data)

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then return ``labels_``.

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A lazy Dask array for Dask input.
        """
        return self.fit(X, sample_weight=sample_weight).labels_

    @atomic_fit
    def partial_fit(self, X, y=None, sample_weight=None):
        """Update the fit with one batch of a stream.

        The contract of :meth:`sklearn.cluster.MiniBatchKMeans.partial_fit`:
        the first call (or the first after :meth:`fit`) fits the batch as
        :meth:`fit` does, which fixes the scale ``scale_``, the temperature
        and the random state's use; each later call updates the mixture of
        ``math.md`` section 7 with the batch. Each batch's E-step statistics,
        taken at the parameters of its time, are kept as their running mean
        together with their Jacobian in the parameters, so that the centres
        solve the M step of the whole stream's statistics linearised around
        the parameters each batch saw: one pass ends near the maximum
        likelihood of the whole stream (``math.md`` section 7, "One pass
        over a stream"). The Jacobian costs one E step on the batch per
        parameter of the mixture (``K d + K + 2``), at the first update and
        whenever the weight seen has doubled; above 512 parameters the
        update is online EM (Cappe and Moulines 2009) instead, with
        ``gamma_n = min(1, 16 / n)^0.6`` and averaging. Nothing of earlier
        batches is kept but these statistics and the d x d second moment
        (for :meth:`transform`). The updates are compared in
        ``benchmarks/streaming.py`` (see the "Scaling out" page).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            One batch; at least ``n_clusters`` rows in the first.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the batch's rows.

        Returns
        -------
        self : AttentionClustering
            The updated estimator; ``n_steps_`` counts the calls and
            ``labels_`` labels the last batch.
        """
        if not hasattr(self, "n_steps_"):
            self.fit(X, sample_weight=sample_weight)
            d, K = self.cluster_centers_.shape[1], self.n_clusters
            radii = None
            if self.centroid_norms_ == "free":
                # The fitted norms r_k, of the data divided by scale_.
                radii = np.linalg.norm(self.means_ - self.mean_, axis=1) / self.scale_
            n_parameters = d * K + 2 + K + (0 if radii is None else K - 1)
            stream = LinearisedEM if n_parameters <= _LINEARISED_MAX_PARAMETERS else OnlineEM
            self._stream = stream(self.cluster_centers_.T, self.weights_, self.noise_scale_, radii)
            self.n_steps_ = 0
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=False)
        weights = check_sample_weight(sample_weight, X)
        with DenseRows(X, weights, self.scale_, self.n_threads) as rows, one_blas_thread():
            # The stream's statistics are those of the rows the first fit
            # clustered: centred on its mean_ when it centred. The labels
            # take the rows as given (predict's rule puts mean_ in the bias).
            p = self._stream.update(rows.centred(self.mean_) if self.center_ else rows)
            self.cluster_centers_ = p.U.T.astype(X.dtype, copy=False)
            self.weights_ = np.exp(p.log_pi)
            self.concentration_ = _concentration(p.radii, p.variance, self.scale_)
            self.means_ = (self.scale_ * p.radii[:, None]) * p.U.T + self.mean_
            self.covariances_ = np.full(
                self.n_clusters, max(self.scale_**2 * p.variance, np.finfo(float).tiny)
            )
            self.labels_ = self._labels(rows)
        self.moment_heads_ = (self._stream.moment @ p.U).T
        self.n_steps_ += 1
        return self

    def transform(self, X):
        """The attention layer's output for each row, in context of the training data.

        Not distances to the centres, unlike KMeans' ``transform``: the
        output has the shape of X, each row moved towards its centroid.
        ``T(x) = lambda K (M / s^2) U U^T y`` with ``y = x - mean_`` (``mean_``
        is zero unless the data were centred), where ``M`` is the second
        moment of the (centred) training data, ``s = scale_``, ``lambda =
        temperature_`` and U the heads (computed as ``lambda K (y^T U)
        moment_heads_``, never a d x d matrix): the layer of ``math.md``
        section 2 with the n training rows as its context (``L = n``).
        Row-wise and deterministic, of rank K; without centring linear,
        ``transform(c X) = c transform(X)``. Near the centroids the output
        is the point's centroid direction, scaled (approximate
        quantisation, paper section 4). Sparse X is not densified; the
        output is dense.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features)
            Same dtype as X; a lazy Dask array, chunked as X, for Dask input.
        """
        check_is_fitted(self)
        X, lazy = self._check_new_data(X)
        K = self.n_clusters
        moment_heads = (self.temperature_ * K * self.moment_heads_).astype(X.dtype, copy=False)
        if lazy:
            heads = self.cluster_centers_.T.astype(X.dtype, copy=False)
            shift = (self.mean_ @ heads).astype(X.dtype)
            return DaskRows(X).product(heads, shift, moment_heads)
        return self._heads_projection(X) @ moment_heads

    def _heads_projection(self, X):
        """``(X - mean_) U`` (n x K) in X's dtype, for dense or sparse X."""
        heads = self.cluster_centers_.T.astype(X.dtype, copy=False)
        return np.asarray(X @ heads) - (self.mean_ @ heads).astype(X.dtype)

    def _has_mixture(self):
        """Whether the fit is (or will be) the EM refinement's mixture."""
        if hasattr(self, "refine_"):
            return self.refine_ == "em"
        return self.refine == "em" or (self.refine == "auto" and self.solver != "psgd")

    def _mixture_rows(self, X, fn, columns=None):
        """``fn(X, means_, variance, weights_)`` on the validated rows of X; for
        Dask input a lazy Dask array (``fn`` on each block)."""
        check_is_fitted(self)
        mixture = (self.means_, float(self.covariances_[0]), self.weights_)
        if is_dask_collection(X):
            X = check_dask_array(self, X, reset=False)
            return DaskRows(X).map_rows(fn, *mixture, columns=columns)
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=False)
        return fn(X, *mixture)

    @available_if(_has_mixture)
    def score_samples(self, X):
        """Log-likelihood of each row under the fitted mixture.

        ``log p(x) = logsumexp_k(log pi_k + log N(x; s r_k mu_k, (s tau)^2 I))``:
        the mixture of ``math.md`` section 7 fitted by the EM refinement
        (only with it; ``refine=None`` and PSGD without refinement fit no
        likelihood).

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            A lazy Dask array for Dask input.
        """
        return self._mixture_rows(X, _log_likelihoods)

    @available_if(_has_mixture)
    def predict_proba(self, X):
        """Posterior probability of each cluster under the fitted mixture.

        ``gamma_k(x) = softmax_k(log pi_k + (r_k <mu_k, x / s> - r_k^2 / 2) /
        tau^2)`` (``math.md`` section 7): a softmax attention of the point,
        as query, over the heads, as keys (with one norm r, ``softmax_k(log
        pi_k + beta <mu_k, x / s>)``, ``beta = r / tau^2``). Its argmax is
        :meth:`predict`.

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_clusters)
            A lazy Dask array for Dask input.
        """
        return self._mixture_rows(X, _posteriors, columns=self.n_clusters)

    def _deviance(self, X):
        """``-2 sum_i log p(x_i)`` under the fitted mixture (one Dask computation for Dask input)."""
        total = self.score_samples(X).sum()
        return -2 * float(total.compute() if is_dask_collection(total) else total)

    def _n_parameters(self):
        """Free parameters of the mixture: K (d - 1) directions, r, tau, K - 1 weights = K d + 1,
        K - 1 more norms when they are free, and the d coordinates of the mean
        when the data were centred (``math.md`` section 7)."""
        d, K = self.n_features_in_, self.n_clusters
        free = K - 1 if self.centroid_norms_ == "free" else 0
        return K * d + 1 + free + (d if self.center_ else 0)

    @available_if(_has_mixture)
    def bic(self, X):
        """Bayesian information criterion of the fitted mixture on X (lower is better).

        ``BIC = -2 sum_i log p(x_i) + p log n`` with ``p = K d + 1`` free
        parameters: K unit directions (d - 1 each), the common norm r, the
        noise tau and K - 1 weights (``math.md`` section 7), ``K - 1`` more
        when each centroid has its own norm (``centroid_norms_``), and d
        more for the mean when the data were centred (``center_``). Fit one
        estimator per candidate K and keep the K of the smallest BIC (see
        the user guide, "Choosing K").

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)

        Returns
        -------
        bic : float
        """
        return self._deviance(X) + self._n_parameters() * np.log(X.shape[0])

    @available_if(_has_mixture)
    def aic(self, X):
        """Akaike information criterion of the fitted mixture on X (lower is better).

        ``AIC = -2 sum_i log p(x_i) + 2 p`` with p as in :meth:`bic`.

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (n_samples, n_features)

        Returns
        -------
        aic : float
        """
        return self._deviance(X) + 2 * self._n_parameters()

    def score(self, X, y=None, sample_weight=None):
        """Negative mean squared reconstruction error ``-mean ||y - T(y)||^2``, ``y = x - mean_``.

        Expanded as ``||y||^2 - 2 <y, T(y)> + ||T(y)||^2`` from the rows'
        products with the heads and ``moment_heads_`` (2K columns), so that
        sparse X is never densified. For Dask input the mean is one Dask
        computation (a reduction over the blocks): X is not gathered.

        The attention layer's own objective (the paper's risk, with the
        training data as context; see :meth:`transform`), not a likelihood:
        it does not penalise a point for being far from every head along
        the heads' span, and it is not comparable across K as a model
        selection score. For the mixture's log-likelihood use
        :meth:`score_samples` (its mean) and, to choose K, :meth:`bic`.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Weights of the mean.

        Returns
        -------
        score : float
            Higher is better.
        """
        check_is_fitted(self)
        X, lazy = self._check_new_data(X)
        K = self.n_clusters
        heads = np.asarray(self.cluster_centers_, dtype=np.float64).T
        out = self.temperature_ * K * self.moment_heads_
        args = (heads, out, self.mean_)
        if not lazy:
            weights = check_sample_weight(sample_weight, X)
            return -float(np.average(_reconstruction_errors(X, *args), weights=weights))
        # One Dask computation: the rows' errors and their weighted mean.
        weights, total = check_dask_sample_weight(sample_weight, X)
        errors = DaskRows(X).map_rows(_reconstruction_errors, *args)
        error = errors.sum() if weights is None else (errors * weights).sum()
        return -float(error.compute()) / total


def _one_norm(data):
    """Whether the rows of ``data`` all have one norm (one pass): the spread of
    ``||x||^2`` under 1e-3 of its mean (unit rows in float32 included)."""
    m2, m4 = data.norm_moments()
    return m2 > 0.0 and np.sqrt(max(m4 - m2 * m2, 0.0)) <= _ONE_NORM_RTOL * m2


def _concentration(radii, variance, scale):
    """``r_h / (tau^2 s)`` for each centre (see ``concentration_``); 1 / s for
    a mixture without noise (all-zero data), where the rule is the direction."""
    if not variance > 0.0:
        return np.full(len(radii), 1.0 / scale)
    return radii / variance / scale


def _reconstruction_errors(X, heads, out, mean):
    """``||y - T(y)||^2`` for every row of X (dense or sparse), ``y = x - mean``
    and ``T(y) = out^T heads^T y`` (see :meth:`AttentionClustering.score`), float64.

    Expanded as ``||y||^2 - 2 <y, T(y)> + ||T(y)||^2`` from the rows' products
    with ``heads`` (d x K) and ``out`` (K x d), so that sparse X is never
    densified.
    """
    K = heads.shape[1]
    both = np.hstack([heads, out.T])
    P = np.asarray(X @ both, dtype=np.float64) - mean @ both
    A, B = P[:, :K], P[:, K:]
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    sq += mean @ mean - 2.0 * np.asarray(X @ mean, dtype=np.float64).ravel()
    return sq - 2.0 * np.sum(A * B, axis=1) + np.sum((A @ (out @ out.T)) * A, axis=1)


def _component_scores(X, means, variance, weights):
    """``log pi_k + log N(x; m_k, v I)`` for every row of dense X and every component (float64)."""
    X = np.asarray(X, dtype=np.float64)
    sq = np.sum(X**2, axis=1)[:, None] - 2 * X @ means.T + np.sum(means**2, axis=1)[None, :]
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    return log_w[None, :] - sq / (2 * variance) - 0.5 * X.shape[1] * np.log(2 * np.pi * variance)


def _log_likelihoods(X, *mixture):
    """``log p(x)`` of every row under the mixture ``(means, variance, weights)``."""
    return logsumexp(_component_scores(X, *mixture), axis=1)


def _posteriors(X, *mixture):
    """Posterior probabilities of the components for every row."""
    scores = _component_scores(X, *mixture)
    return np.exp(scores - logsumexp(scores, axis=1, keepdims=True))
