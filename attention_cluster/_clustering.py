"""AttentionClustering: K linear attention heads trained on the unit sphere.

The estimator is a shell: it validates X into pass-layer rows
(``_passes.rows_from``), hands them to the fit plan (``_plan.fit_plan``) and
writes the plan's one result as its fitted attributes (``_write``). Every
prediction is one call on the rows of X with the fitted mixture
(``_model.SphericalMixture``), whatever the input kind.
"""

import copy
import numbers
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._choose_k import count_clusters, plan_fit_at
from ._mixture import new_stream
from ._model import MIN_VARIANCE, SphericalMixture
from ._passes import (
    centred_projection,
    dense_block,
    one_blas_thread,
    rows_from,
    unit_storage,
    unit_term_exponents,
    unit_terms,
)
from ._plan import (
    DEFAULT_TUNING,
    bic_penalty,
    block_log_likelihoods,
    check_psgd_draws,
    check_width,
    fit_plan,
    information_criterion,
    near_terms,
    predict_rule,
    resolve_methods,
)
from ._sphere import normalize_heads
from ._validation import (
    InvalidParameterError,
    as_numbers,
    atomic_fit,
    check_dense_output,
    check_lazy_output,
    check_n_samples,
    check_options,
    check_positive,
    check_verbose,
    deferred_warnings,
    finite_output,
    is_dask_collection,
    metadata_shape,
    plain_number,
    replay,
    validate_seed,
    warn,
)

# ``_write``'s ``scores`` that leaves ``n_clusters_scores_`` as it is.
_KEEP_SCORES = object()


class AttentionClustering(ClusterMixin, TransformerMixin, OneToOneFeatureMixin, BaseEstimator):
    r"""Clustering with K linear attention heads learned on the unit sphere.

    Used like KMeans (``fit``, ``predict``, ``labels_``,
    ``cluster_centers_``), with two differences a KMeans user meets first:
    ``cluster_centers_`` are unit vectors, the directions of the clusters
    from the origin, and :meth:`transform` returns the attention layer's
    output (each point moved towards its cluster's centre, same shape as X),
    not the distances to the centres that KMeans' ``transform`` returns.

    The estimator of "Attention-based clustering" (NeurIPS 2025). Each head
    :math:`\mu_h` is a unit vector; the layer maps a sequence of L tokens to

    .. math::

        T(X)_l = \frac{\lambda K}{L} \sum_h \sum_k
        \langle X_l, \mu_h \rangle \langle \mu_h, X_k \rangle X_k

    (:mathmd:`2`). The heads minimise, without labels, the risk
    :math:`\mathbb{E} \| X_1 - T(X)_1 \|^2` over sequences of L rows drawn from the data,
    plus ``reg_strength`` times an orthogonality regulariser (:mathmd:`3`; paper, section 3.3), by projected stochastic gradient
    descent on the sphere or by the exact solver (``solver``). At a
    minimiser the heads are the cluster directions, and a point's cluster
    is ``argmax_h <x, mu_h>`` (user guide, :doc:`/user_guide/model`, "From
    heads to labels and outputs"). By default
    the exact solver's heads are then refined to the maximum-likelihood
    centroid directions of the paper's mixture, by EM whose E step is a
    softmax attention of the points over the heads (``refine``,
    :mathmd:`7`).

    Data are divided by an estimated overall scale ``scale_`` before
    fitting, so that the centroids are near the unit sphere as the paper
    assumes; labels are unchanged when X is multiplied by a positive
    constant, up to the rounding of ``X / scale_`` (in the last bits), which
    decides where an objective flat near its minimum stops: with
    ``refine=None`` at a K the data do not hold, the exact solver's heads
    may then differ between X and ``c X`` (one stops where the gradient
    falls below ``tol``; a smaller ``tol``, or the default EM refinement,
    brings them to the same fit).

    Input and preprocessing: X may be dense or sparse (CSR/CSC, never
    densified). A mean common to all rows is subtracted when it dominates
    (``center``), with a warning; a fit that leaves clusters nearly empty
    warns and names the fix. With d >= 1000 features (dense rows beyond
    32768 of them: d >= 2000) the solver runs in the principal subspace of
    dimension K + 5, found by subspace iteration without a d x d matrix,
    and the EM refinement on the rows in R^d; that path holds the rows'
    projections in memory, so Dask input takes the d x d moment and is
    refused from 4000 features. Rows
    that are measurements in different units (scikit-learn's tabular data
    sets) suit the model after a
    :class:`~sklearn.preprocessing.StandardScaler`; TF-IDF rows and
    embeddings need none (see the user guide, "When to use it", and
    :doc:`/user_data`). A row with no direction (all zeros, or equal to
    ``mean_``) gets the label with the largest bias, ``log weights_ - r_k^2
    / (2 tau^2)`` after the EM refinement (the heaviest cluster when the
    norms are equal), cluster 0 without it, up to rounding: float64 rows
    enter the scores uncentred, ``<x, c_k> - <mean_, c_k>``, so that a row
    equal to ``mean_`` has scores of rounding's size, not zeros, and
    without the refinement may take another cluster, by the batch it is in
    (float32 rows, centred first, do not).

    Every fitted array has X's dtype (float32 stays float32), except those
    of ``mixture_`` and ``loss_curve_``, which keep float64. How a fit runs, stage by stage,
    and where each attribute comes from: the user guide, :doc:`/user_guide/fit`.

    Parameters
    ----------
    n_clusters : int or "auto", default=2
        Number of clusters K, and of attention heads. ``"auto"`` takes the
        K of the self-attention dynamics' longest plateau on at most 2000
        rows (:mathmd:`8`; a subsample of them moving, the others passive
        tracers, where a step on all would pass 2e9 multiply-adds, as
        ``SelfAttentionDynamics(max_samples="auto")`` moves them: 2000 rows
        of more than 500 features; groups of at least 2% of them count as
        clusters; on the centred rows with ``center=True``, and with
        ``"auto"`` where the rows' mean carries more than 5% of their
        second moment and the fit at the centred rows' count would centre
        them, or the rows as given gather into one group and the centred
        rows into more, where K = 2 is compared too and, for fits without
        a mixture, kept; with ``sample_weight``, every row of positive weight as a
        weighted token when they are at most 2000; K = 1 where the dynamics
        finds no plateau and ends with more than half of the tokens apart),
        fits at that K and at its two neighbours, and keeps a neighbour only
        when the silhouette
        of its labels on those rows, on the sphere, is higher by more than
        0.05 (when the dynamics' K is 1, which has no silhouette, the
        neighbour 2 whenever its silhouette is defined, whatever its
        value). With the EM refinement (``refine="em"``, the default after
        the exact solver), one cluster then replaces that choice when the
        BIC of a fit at K = 1 is not higher; without it (``refine=None``,
        or ``solver="psgd"``) that test is not made
        (:func:`~attention_cluster.choose_n_clusters`): see ``n_clusters_``
        and ``n_clusters_scores_``. The K tried are 1 to ``min(n_samples,
        50)``, n_samples counting the rows of positive weight
        (``choose_n_clusters``' ``n_clusters_range``); where that range
        holds one K (a single row of positive weight) there is nothing to
        choose, and the fit is ``n_clusters=K``'s, with none of these
        stages.
    temperature : "auto" or float, default="auto"
        lambda > 0, applied to data divided by ``scale_``. ``"auto"``
        estimates the noise sigma from the second-moment spectrum and takes
        the unbiased temperature of Prop. 4.1 (generalised to K clusters),
        capped at ``0.95 lambda*(sigma, L, d)``, the largest temperature at
        which the centroids minimise the risk (Prop. 3.3), and at
        ``0.9 / (K (m_1 + tr(M) / L))`` with ``m_1`` the top eigenvalue of
        the unit-scale second moment M, which keeps the heaviest of unequal
        clusters a minimiser (see the user guide). Any finite value is
        computed within float64 by the exact solver (its objective scaled
        where ``lambda K / L > 1``, :mathmd:`3`); above ``lambda*`` its
        minimisers leave the centroids, and as lambda grows they tend to
        the heads along which the layer's output is smallest. PSGD raises a
        FloatingPointError where its loss overflows (lambda of about
        ``1e154 L / K``).
    sequence_length : int, default=50
        L, the number of rows in each sampled sequence. Short sequences
        keep the finite-L terms that single out the centroids inside their
        span; 50 balances that against gradient noise (see the user guide).
    regularization : {"pairwise", "product"} or None, default="pairwise"
        Orthogonality regulariser: ``sum_{j<k} E[<mu_j,X>^2 <mu_k,X>^2]``
        (paper, section 3.3) or ``E[prod_k <mu_k,X>^2]`` (``math.md``
        section 3, from the rebuttal; user guide, :doc:`/user_guide/model`,
        "The regularisers"). Without
        it, a random start only partially aligns with the centroids.
    reg_strength : "auto" or float, default="auto"
        rho >= 0. ``"auto"`` takes a tenth of the smaller of two limits:
        the rho at which the centroids stop being a local minimum
        (``lambda K / (K - 1)`` for the pairwise regulariser) and the rho
        at which the centroids' span loses its advantage over the noise
        directions (see ``reg_strength_`` and the user guide). As the
        temperature, any finite value (the exact solver's objective scaled
        above 1); as rho grows the heads tend to the regulariser's minimisers.
    solver : {"auto", "full", "psgd"}, default="auto"
        ``"full"``: the exact solver. For data held in memory the expected
        risk over sampled sequences has a closed form (:mathmd:`3`), minimised deterministically by Riemannian L-BFGS on the product
        of spheres (on a subsample of 16384 rows first when n exceeds 4 x
        16384, then Newton steps on all rows), at O(n d K) per iteration after
        O(n d^2) moments: no sampling plateau, unlike PSGD. ``"psgd"``:
        projected stochastic gradient descent (paper, Appendix F.1), whose
        cost does not depend on n. ``"auto"``: ``"full"`` at every n (see
        ``solver_``), the more accurate of the two; its cost at large n is a
        few passes over the data (see :doc:`/performance`).
    refine : {"auto", "em"} or None, default="auto"
        ``"em"``: after the attention solver, maximise the likelihood of the
        paper's mixture (K centroids of equal norm, or one norm each with
        ``centroid_norms``; isotropic noise, free weights; :mathmd:`7`) by expectation-maximisation started
        at the heads. Its E step is a softmax attention of each point over
        the heads. The heads of the attention risk span the principal
        subspace of the second moment, about ``1 + K sigma^2`` times
        farther from the centroids than the class means at high noise; the
        refined heads are the maximum-likelihood centroid directions. Each
        E step is one pass over the data; on large data EM first
        runs on subsamples, then takes Newton's steps on all rows with the
        subsample's Jacobian, and every stage stops when the heads are
        estimated to be within a small fraction of their standard error of
        the fixed point (:mathmd:`7`). When it follows the exact
        solver, that solver stops after its subsample stage. ``None``: the
        attention heads as they are, the paper's estimator. ``"auto"``:
        ``"em"`` after the exact solver, None after PSGD.
    centroid_norms : {"auto", "equal", "free"}, default="auto"
        The norms of the EM refinement's centroids. ``"equal"``: one common
        norm, the paper's mixture. ``"free"``: one norm per centroid (a
        Gaussian mixture with one shared spherical variance; :mathmd:`7`, "One norm per centroid"). ``"auto"``: equal, unless at
        the equal-norm fit one EM step with free norms gains more than the
        Bayesian information criterion's price of the ``K - 1`` extra
        norms, ``(K - 1) log(n) / 2`` nats (with ``sample_weight``, the gain
        and n count Kish's effective rows, ``(sum w)^2 / sum w^2``, as the
        EM's stopping rule: integer weights and the repeated rows may then
        choose differently near the price), read at the first subsample's fit
        where EM runs on subsamples first, else, or if it failed there, on
        all rows; the refinement then goes on with free norms
        (``centroid_norms_``). An uncentred fit of rows that all have one
        norm (TF-IDF, embeddings, ``Normalizer``'s output) keeps equal
        norms: there a cluster's mean norm measures its spread, not its
        place. Clusters at different distances from the mean, such as
        standardised wine's (:doc:`/user_data`), take free norms; the
        paper's mixtures keep equal ones. Used only with the EM refinement.
    learning_rate : float, default=1.0
        Base step size, relative to the curvature scale
        ``lambda K tr(M)`` of the risk (M the unit-scale second moment).
        Step t is ``learning_rate / (lambda K tr(M) (1 + t / 200))``.
    batch_size : int, default=2
        Number of sequences averaged in each stochastic gradient.
    max_iter : "auto" or int, default="auto"
        Maximum number of PSGD steps (``"auto"``: 5000), of iterations of
        each stage of the exact solver (``"auto"``: 500), of Lloyd's
        iterations of the seeded start at K >= d (at most 50 whatever
        ``max_iter``), and of E steps of
        each stage of the EM refinement (``"auto"``: the solver's, 500
        after the exact solver and 5000 after PSGD).
    tol : "auto" or float, default="auto"
        PSGD (``"auto"``: 1e-4): every 100 steps the heads averaged over the
        later half of the run's chunks of 100 steps so far (Polyak-Ruppert
        averaging, :mathmd:`3`, "Steps") are
        compared with their previous value, and the run stops when ``sum_h
        ||mu_h - mu_h^prev||^2 < tol`` (each head against its own
        previous value: no matching, unlike the distance of :mathmd:`5`).
        Exact solver (``"auto"``: 1e-6): stop when the norm of
        the Riemannian gradient is below ``tol`` times the objective's
        scale ``mean ||x||^2``; when the EM refinement follows, which only
        needs a start in the right basin, below 5000 ``tol`` (no step
        where the start is within it). The EM refinement has its own rule, at the
        statistical resolution of the heads (:mathmd:`7`), which ``tol``
        does not set.
    n_init : int, default=1
        Number of runs from different starts; the run with the lowest final
        objective (the exact one on all rows, at the heads each run returns)
        is kept. Runs differ only by what they draw at random (a random
        start, PSGD's sequences, the spectral start's rows beyond about
        16384 and its heads beyond d, the exact solver's first stage from
        an array beyond 4 x 16384 rows): where they cannot differ one run is
        made, with a warning, as KMeans does for an explicit start. Where
        the start is seeded (see ``init``) it is the least number of
        k-means++ seedings, the one of least inertia kept, as KMeans'
        ``n_init``.
    init : {"spectral", "random"} or array-like of shape (n_clusters, n_features), default="spectral"
        ``"spectral"``: the top-K eigenvectors of the second-moment matrix
        (where the risk's minimisers lie as L grows, :mathmd:`3`),
        rotated inside their span to minimise the regulariser (Jacobi
        sweeps, as in kurtosis-based ICA). ``"random"``: heads drawn
        uniformly on the sphere, the paper's random start. An array gives
        the starting heads (rows, normalised to unit norm; where the fit
        runs in the principal subspace, from a thousand features, their
        projections on it). The start is *seeded* when ``init="spectral"``,
        ``1 < n_clusters``, ``n_clusters >= n_features`` (the spectrum has
        fewer than K directions), the EM refinement follows (``refine``
        ``"em"``, or ``"auto"`` with the exact solver) and
        ``centroid_norms`` is not ``"equal"``: K centres are then placed
        among the rows (k-means++ on a subsample, polished by Lloyd's
        iterations), which the EM refinement carries with one norm per
        centroid; no attention solver runs, and ``solver``,
        ``temperature``, ``sequence_length``, ``regularization``,
        ``learning_rate``, ``batch_size`` and ``gradient`` do not move the
        fit (``n_iter_`` counts Lloyd's iterations, ``loss_curve_`` is
        empty, ``solver_`` names the solver ``solver`` resolves to, and
        ``transform`` and ``score``, the attention layer's, still read
        ``temperature_``).
    gradient : {"riemannian", "euclidean"}, default="riemannian"
        PSGD's step (the exact solver's is Riemannian).
        ``"riemannian"`` projects each head's gradient on the sphere's
        tangent space before the step (:mathmd:`3`);
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
        are fitted as they are; and it fits the centred rows too when the
        uncentred fit leaves clusters nearly empty while the mean carries
        more than 5% of the second moment (TF-IDF rows, say), keeping the
        centred fit unless the uncentred one is the more likely (with the
        EM refinement; a small cluster is left nearly empty by a fit at
        its optimum too), but after the seeded start of ``n_clusters >=
        n_features``, whose centres are points, not directions, and reach
        the same optimum centred or not. Sparse X is centred implicitly, never
        densified. See :doc:`/user_data` for the measurement and the user
        guide for the advice on preprocessing.
    random_state : int, RandomState instance or None, default=None
        Seeds the starts and the sampling of sequences.
    n_threads : int or None, default=None
        Threads that share each pass over the data (chunks of rows, see
        :doc:`/performance`). None: as many as
        :class:`~sklearn.cluster.KMeans` uses by default, the cores this
        process may run on, at most ``OMP_NUM_THREADS`` and threadpoolctl's
        limit (a search's ``n_jobs`` workers share the cores). The result does not
        depend on it: the chunks and the order in which their sums are added
        are the same for any number of threads.
    verbose : int, default=0
        When positive, print each sweep of the spectral start's rotation,
        the objective every 100 PSGD steps, each exact solver run's outcome,
        and the log-likelihood of each accepted EM iterate; on Dask data
        also each pass over the data and its time; with
        ``n_clusters="auto"``, the stages of the choice (the dynamics, each
        fit's K, the K chosen).

    Attributes
    ----------
    n_clusters_ : int
        The number of clusters fitted: ``n_clusters``, or the K chosen when
        it is ``"auto"``.
    n_clusters_scores_ : dict of int to int
        Only with ``n_clusters="auto"``: the curve of its first stage, for
        each K the longest run of the dynamics' steps that held K clusters
        (plotted by :func:`~attention_cluster.plot_n_clusters_scores`); the
        silhouettes of the second stage are ``choose_n_clusters(...).silhouettes``.
        Empty where the range of K held one K of at most n_samples (a
        single row of positive weight, or a ``choose_n_clusters`` range of
        one such K): nothing was chosen, and no dynamics ran. In a stream,
        the curve of the choice that gave ``n_clusters_``, at :meth:`fit` or
        the first batch: a batch that starts the stream anew keeps that K
        (see :meth:`partial_fit`), and the curve with it.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The heads, unit rows. Without the EM refinement each is signed so
        that the points it wins without the sign (the largest ``|<x,
        mu_h>|``) project positively on it in total (``math.md`` section 5);
        points that project negatively on every head still take one, so
        some of a head's labelled points may lie behind it. With the
        refinement, the mixture's centroid directions.
    labels_ : ndarray of shape (n_samples,)
        :meth:`predict` on the training data (a lazy Dask array when X is
        one; after :meth:`partial_fit`, the last batch's).
    n_iter_ : int
        PSGD steps, or iterations of the exact solver (all its stages), of
        the kept run: 0 where the EM refinement follows and the spectral
        start is already within the solver's tolerance (see ``tol``); with
        the seeded start at K >= d, Lloyd's iterations of the seeding.
    loss_curve_ : ndarray of float64
        PSGD: the mini-batch objective at each step. Exact solver: the
        objective of its last stage (on all rows, or on the subsample when
        the refinement follows) at the start and after each iteration;
        infinite where it passes float64's range (``lambda K / L`` above
        about 1e154, where the solver minimises it scaled, :mathmd:`3`).
        Empty after a seeded start (see ``init``).
    solver_ : str
        The solver used (``"auto"`` resolved; after a seeded start, which
        runs none, the one it resolves to: see ``init``).
    refine_ : str or None
        The refinement used (``"auto"`` resolved): None also where the EM
        refinement's mixture passed float64's range (sample weights whose
        ratios reach about 1e150), which warns and keeps its start.
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
        ``centroid_norms_`` is ``"free"`` (:mathmd:`7`). Absent without
        it (as GaussianMixture's ``means_`` before a fit), where the ``None``
        attributes below are None.
    covariances_ : ndarray of shape (n_clusters,)
        With the EM refinement: the variance ``(s tau)^2`` of each
        component, one value shared by all (spherical, as
        :class:`~sklearn.mixture.GaussianMixture`'s ``"spherical"``);
        infinite where it exceeds the dtype's range (rows beyond about
        ``1e154`` in float64, ``1e19`` in float32), and zero or subnormal
        where it falls below it (rows spread by less than about ``1e-154``
        in float64, ``1e-19`` in float32), which no prediction reads: they
        use ``mixture_``. Absent without the refinement.
    mixture_ : SphericalMixture or None
        The fitted mixture at unit scale, ``(x - mean_) / scale_ | Z = k ~
        N(r_k mu_k, tau^2 I)`` (:mathmd:`7`), whose methods give
        :meth:`predict_proba`, :meth:`score_samples`, :meth:`bic` and
        :meth:`aic` from one centred formula, with its variance floored at
        ``1e-12`` of the rows' mean squared norm per feature; float64. None
        without the EM refinement.
    concentration_ : ndarray of shape (n_clusters,) or None
        After the EM refinement, ``r_h / (tau^2 scale_)`` for each centre,
        with ``r_h / tau^2`` the inverse temperature of the fitted
        mixture's posterior (:mathmd:`7`; one value shared by all
        when the norms are equal): :meth:`predict` takes ``argmax_h
        concentration_[h] <x - mean_, c_h> - concentration_[h]^2
        covariances_[h] / 2 + log weights_[h]``. None without the
        refinement, where :meth:`predict` takes ``argmax_h <x - mean_,
        c_h>``. Infinite where it overflows X's dtype (tight clusters of
        data of about 1e-300 in float64, of about 1e-26 in float32, or
        a single row); :meth:`predict` takes the same rule at unit scale.
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
        :meth:`transform`. After :meth:`partial_fit`, a running product of
        each batch's moment with the moving centres (:mathmd:`7`, "One pass
        over a stream"), exact when the batches share one second moment.
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

    def _check_params(self, n_features, in_memory=True):
        """Validate the parameters; returns the starting heads (d x K unit columns) of an array ``init``, else None.

        ``in_memory``: whether the rows may take the principal subspace
        (Dask rows do not), for PSGD's memory check.
        """
        check_positive(
            self.n_clusters, "n_clusters", numbers.Integral, min_val=1, strict=False, also=("auto",)
        )
        check_positive(self.temperature, "temperature", also=("auto",))
        check_positive(
            self.sequence_length,
            "sequence_length",
            numbers.Integral,
            min_val=1,
            strict=False,
            float_range=True,
        )
        check_options(self.regularization, "regularization", ["pairwise", "product", None])
        check_positive(self.reg_strength, "reg_strength", strict=False, also=("auto",))
        check_options(self.solver, "solver", ["auto", "psgd", "full"])
        check_options(self.refine, "refine", ["auto", "em", None])
        check_options(self.centroid_norms, "centroid_norms", ["auto", "equal", "free"])
        check_positive(self.learning_rate, "learning_rate")
        check_positive(self.batch_size, "batch_size", numbers.Integral, min_val=1, strict=False)
        check_positive(
            self.max_iter, "max_iter", numbers.Integral, min_val=1, strict=False, also=("auto",)
        )
        check_positive(self.tol, "tol", strict=False, also=("auto",))
        check_positive(self.n_init, "n_init", numbers.Integral, min_val=1, strict=False)
        check_options(self.gradient, "gradient", ["riemannian", "euclidean"])
        check_options(self.center, "center", ["auto", True, False])
        check_positive(
            self.n_threads, "n_threads", numbers.Integral, min_val=1, strict=False, also=(None,)
        )
        check_verbose(self.verbose)
        validate_seed(self.random_state)  # with n_init > 1 first read after a pass
        if resolve_methods(self.solver, self.refine)[0] == "psgd":
            # Before X is read, at the narrowest width PSGD may run at (the
            # principal subspace's in memory; Dask rows never take it, and
            # run at their own); the fit plan checks the width it takes.
            K = 1 if isinstance(self.n_clusters, str) else self.n_clusters
            narrowest = min(n_features, K + DEFAULT_TUNING.subspace_extra)
            narrowest = narrowest if in_memory else n_features
            check_psgd_draws(
                self.batch_size,
                self.sequence_length,
                narrowest,
                self.max_iter,
                narrowest=narrowest < n_features,
            )
        if isinstance(self.init, str):
            check_options(self.init, "init", ["spectral", "random"])
            return None
        if isinstance(self.n_clusters, str):
            raise InvalidParameterError('An array init needs an integer n_clusters, not "auto".')
        init = as_numbers(self.init)
        if init is None or np.asarray(self.init).dtype.kind == "b":
            # Text, bools and complex numbers, which NumPy would read as numbers.
            raise InvalidParameterError(
                f"init must be an array of real numbers, got {self.init!r}."
            )
        if init.shape != (self.n_clusters, n_features):
            raise InvalidParameterError(
                f"init must have shape (n_clusters, n_features) = "
                f"({self.n_clusters}, {n_features}), got {init.shape}."
            )
        if not np.all(np.isfinite(init)) or not np.all(np.any(init != 0, axis=1)):
            raise InvalidParameterError("init must have finite, non-zero rows.")
        # Rows of any finite magnitude (1e300, 1e-300) are their directions.
        return normalize_heads(init.T)

    def _check_params_before_reading(self, X):
        """:meth:`_check_params` at X's width when its shape shows it (arrays,
        sparse, pandas, Dask): before any work on X (a copy in float64 or C
        order, the Dask weights' checks, which compute: ``rows_from``).

        Returns ``(n_features, in_memory, init)`` of the check, for
        :meth:`_fit_rows` to take instead of checking again at that width,
        or None when X's shape does not show its width.
        """
        shape = metadata_shape(X)
        if shape is None and isinstance(X, (list, tuple)) and X:
            # A list of rows: its first row's width, without converting it
            # (71 ms for 300000 x 10 before the error).
            first = X[0]
            shape = (len(X), len(first)) if isinstance(first, (list, tuple)) else None
        if shape is not None and len(shape) == 2:
            # (Dask rows at their width: the refusal came after their rows were counted.)
            in_memory = not is_dask_collection(X)
            return shape[1], in_memory, self._check_params(shape[1], in_memory=in_memory)
        return None

    def _rows(
        self,
        X,
        *,
        reset=False,
        sample_weight=None,
        defer_finite=False,
        weight_unit=None,
        check_shape=None,
        in_memory=False,
        count_rows=True,
    ):
        """X as pass-layer rows (``_passes.rows_from``), validated against this estimator."""
        return rows_from(
            self,
            X,
            reset=reset,
            sample_weight=sample_weight,
            n_threads=plain_number(self.n_threads),
            verbose=self.verbose,
            defer_finite=defer_finite,
            weight_unit=weight_unit,
            check_shape=check_shape,
            in_memory=in_memory,
            count_rows=count_rows,
        )

    def _check_shape(self, n_samples, n_features, in_memory):
        """The fit's checks of X's shape, before its weights are read
        (``rows_from``'s ``check_shape``): the width the rows' kind can
        hold, and ``n_samples >= n_clusters`` for a given K."""
        check_width(n_features, in_memory)
        if n_samples > 0 and not isinstance(self.n_clusters, str):
            check_n_samples(n_samples, self.n_clusters)

    @atomic_fit
    def fit(self, X, y=None, sample_weight=None):
        """Learn the heads from X.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data. A Dask array (chunked along rows only) or DataFrame
            is read by passes, one Dask computation each, and never gathered
            (see the "Scaling out" page); ``labels_`` is then a lazy Dask array.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: rows are drawn with probability
            proportional to their weight, so an integer weight acts as
            repeated rows, but in the rules that count rows: the choices of
            the fit's path and of its subsamples' sizes, which count the
            rows of positive weight (so that rows of zero weight change
            none of them), ``n_clusters="auto"``'s test of one cluster, whose
            BIC counts rows, not weights, and the EM refinement's stop,
            whose statistical error counts Kish's
            effective rows ``(sum w)^2 / sum w^2`` (weights are not known to
            be counts), so that it may stop a step or two from where the
            repeated rows stop, within its tolerance. Only their ratios
            count: ``c * sample_weight`` gives the same fit for a power of
            two ``c > 0`` at any magnitude, and for other ``c``, whose
            products round, within the fit's tolerance; a positive weight
            of at most about 2^-1074 times the largest, which float64
            cannot hold relative to it, is refused.

        Returns
        -------
        self : AttentionClustering
            Fitted estimator.
        """
        self._fit(X, sample_weight)
        return self

    def _fit(self, X, sample_weight=None, choice=None):
        """:meth:`fit`'s work; returns ``n_clusters="auto"``'s choice, ``(K,
        scores, silhouettes)`` (:func:`~attention_cluster._choose_k.count_clusters`),
        or None. ``choice``: count_clusters' options (``choose_n_clusters``')."""
        checked = self._check_params_before_reading(X)
        # NaN and infinity in dense rows are found by the fit's first pass
        # (DenseRows.moments) instead of a pass of their own.
        rows = self._rows(
            X,
            reset=True,
            sample_weight=sample_weight,
            defer_finite=True,
            check_shape=self._check_shape,
        )
        self.__dict__.pop("n_steps_", None)
        # The parameters read once, for the fit and the stream's record of them.
        given = self.get_params(deep=False)
        chosen = self._fit_rows(rows, choice=choice, checked=checked, given=given)
        # A later partial_fit continues from this fit, its rows counted in by
        # their weight (none held: the stream is made at that batch).
        self._start_stream(rows, given=given)
        self._fit_weight = (rows.total_weight, rows.n_weighted)
        return chosen

    def _fit_rows(self, rows, n_clusters=None, choice=None, checked=None, given=None):
        """validate the parameters -> K (``n_clusters="auto"``) -> the fit plan -> the fitted attributes.

        ``n_clusters``: K in place of the parameter's (a stream's restart
        keeps its K). ``choice``: options of ``count_clusters`` (its range,
        beta, min_cluster_size, max_samples). ``checked``:
        :meth:`_check_params_before_reading`'s result, taken when it checked
        at the rows' width and kind (the parameters are not checked twice).
        ``given``: ``get_params(deep=False)``, when the caller read it.
        Returns ``n_clusters="auto"``'s ``(K, scores, silhouettes)``, else None.
        """
        if checked is not None and checked[:2] == (rows.n_features, rows.in_memory):
            init = checked[2]
        else:
            init = self._check_params(rows.n_features, rows.in_memory)
        if given is None:
            given = self.get_params(deep=False)
        # NumPy scalars as Python numbers (plain_number: an np.int8 count's
        # sums overflowed in the solvers).
        params = SimpleNamespace(**{name: plain_number(value) for name, value in given.items()})
        if n_clusters is not None:
            params.n_clusters = n_clusters
        chosen = None
        # The passes run on the pool's threads already: BLAS threads in each
        # chunk's products would only oversubscribe the cores.
        with rows, one_blas_thread():
            check_width(rows.n_features, rows.in_memory)
            if params.n_clusters == "auto":
                rows.check_finite()

                def say(line):
                    if params.verbose:
                        print(f"[AttentionClustering] n_clusters='auto': {line}")

                K, scores, silhouettes, result = count_clusters(
                    rows,
                    plan_fit_at(rows, params, init),
                    random_state=self.random_state,
                    n_threads=params.n_threads,
                    center=self.center,
                    say=say,
                    **(choice or {}),
                )
                say(
                    f"chose n_clusters={K} "
                    + (f"(plateau lengths by K: {scores})" if scores else "(the range's one K)")
                )
                chosen = K, scores, silhouettes
            else:
                check_n_samples(rows.n_samples, params.n_clusters, rows.n_weighted)
                result = fit_plan(rows, params, init)
        if chosen is not None:
            # choose_n_clusters' model (``choice``) is the fit at K, as
            # AttentionClustering(K).fit(X) leaves it: no curve.
            scores = chosen[1] if choice is None else None
        else:
            # A stream's restart (``n_clusters``) keeps its K and the curve that chose it.
            scores = None if n_clusters is None else _KEEP_SCORES
        self._write(result, rows.dtype, scores)
        return chosen

    def _write(self, result, dtype, scores=None):
        """The one place that writes the fitted attributes, from a :class:`~attention_cluster._plan.FitResult`.

        Arrays take the input's dtype (float32 stays float32); ``mixture_``
        keeps float64, the precision of the predictions' arithmetic.
        ``scores``: ``n_clusters_scores_``, None for none, or
        ``_KEEP_SCORES`` to leave the curve as it is (a stream's update or
        restart keeps the K of the stream and the curve that chose it).
        """
        mixture = result.mixture

        def cast(a):
            # A copy: the fitted arrays are the estimator's own, writable,
            # never views of the (read-only) mixture's.
            return np.array(_in_dtype(np.asarray(a, dtype=np.float64), dtype))

        self.n_clusters_ = len(result.centers)
        self.cluster_centers_ = cast(result.centers)
        self.labels_ = result.labels
        self.weights_ = cast(result.weights)
        self.mixture_ = mixture
        if mixture is None:
            self.concentration_ = None
            self.centroid_norms_ = None
            for name in ("means_", "covariances_"):
                self.__dict__.pop(name, None)
        else:
            self.concentration_ = cast(mixture.concentration)
            self.centroid_norms_ = "free" if result.free_norms else "equal"
            self.means_ = cast(mixture.means)
            self.covariances_ = cast(mixture.covariances)
        self.center_ = result.centred
        self.mean_ = cast(result.mean)
        self.moment_heads_ = cast(result.moment_heads)
        # Python floats, as documented (the settings may hold NumPy scalars).
        self.temperature_ = float(result.settings.temperature)
        self.reg_strength_ = float(result.settings.reg_strength)
        self.solver_ = result.settings.solver
        self.refine_ = result.settings.refine
        self.noise_scale_ = float(result.noise)
        self.scale_ = float(result.scale)
        self.n_iter_ = result.n_iter
        self.loss_curve_ = result.loss_curve
        self.refine_n_iter_ = result.refine_n_iter
        if scores is None:
            self.__dict__.pop("n_clusters_scores_", None)
        elif scores is not _KEEP_SCORES:
            self.n_clusters_scores_ = scores
        # What partial_fit's stream starts from and updates (labels_ holds the labels).
        self._result = replace(result, labels=None)

    def predict(self, X):
        r"""Cluster of each row: the head most aligned with it, or the posterior mode.

        Without the refinement the rule is
        :math:`\arg\max_h \langle x - m, c_h \rangle` with ``m = mean_``
        (user guide, :doc:`/user_guide/model`); after the EM refinement it
        is the fitted mixture's posterior mode, the argmax of
        :meth:`predict_proba`,
        :math:`\arg\max_h \log \pi_h + (r_h \langle \mu_h, y \rangle - r_h^2 / 2) / \tau^2`
        with :math:`y = (x - m) / s`, ``s = scale_`` (:mathmd:`7`; see
        ``mixture_``), which differs from the direction rule only when the
        weights or the norms differ.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A lazy Dask array for Dask input.
        """
        check_is_fitted(self)
        with self._rows(X, count_rows=False) as rows, one_blas_thread():
            return rows.labels(*predict_rule(self.cluster_centers_, self.mixture_, self.mean_))

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then return ``labels_``.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
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
        the first call fits the batch as :meth:`fit` does, which fixes the
        scale ``scale_``, the temperature, the random state's use, the
        centring (``center_`` and ``mean_``: later batches are centred on
        the first batch's mean) and, with ``n_clusters="auto"``, the number
        of clusters (chosen on that batch), then updates the stream, started
        at that fit, with the same batch (so
        its centres are the stream's EM update, not exactly ``fit``'s); each
        later call updates the mixture of :mathmd:`7` with the batch. After
        :meth:`fit`, the stream continues from the fitted mixture, its rows
        counted in by their total weight without being read again (their
        statistics are those the M step maps to the fitted parameters; a fit
        without the EM refinement, ``refine=None`` or PSGD's, has no
        statistics to hold, and the stream starts at its centres from the
        batch), and a batch of another width raises ValueError. A stream
        keeps the parameters it started with (at :meth:`fit` or the first
        call): a call after ``set_params`` changed any of them raises
        InvalidParameterError naming each, before the batch is read
        (:meth:`fit`, or ``partial_fit`` on a clone, starts a stream with
        new ones), but ``verbose`` and ``n_threads``, which change no
        number, may change. ``n_clusters`` may be ``n_clusters_`` or
        ``"auto"`` (the number the stream holds); ``random_state`` is kept
        as MiniBatchKMeans keeps the random state of its first call: an
        integer seeds a restart (below) as it seeded the start, an instance
        goes on drawing. A batch of more than 4 times the weight seen
        before it, and of at least ``n_clusters_`` rows of positive weight,
        starts the stream anew: it is fitted as the first was, with the
        stream's parameters and number of clusters, and fixes the scale,
        the centring and the temperature
        again (a small first batch's fit would otherwise hold the stream
        where it lies), unless its rows' shares among the clusters show it
        is not a sample of the stream (against the mixture's weights and
        online EM's running shares, at level 1e-4: a batch of one class's
        rows would start the stream at that class's fit), when it updates
        the stream. The model clusters
        directions from ``mean_``: a first batch whose mean lies within one
        cluster (its rows drawn from that cluster alone, say) leaves that
        cluster no direction for the rest of the stream, so the first batch
        should be drawn from the whole stream (a shuffled sample), or
        ``center=False`` passed for rows already centred. Later batches
        may come in any order where the clusters separate: under online EM
        (below) a batch whose rows' shares among the clusters the stream's
        rows do not explain (a chi-square test, each row of positive weight
        counted once; rows sorted by class or by time) moves each cluster
        by its own share, as MiniBatchKMeans's per-centre counts do, and
        the clusters it lacks keep their statistics; once more batches
        lacking a cluster are refused than the test's level explains, the
        stream is taken for one in the clusters' order, with a warning, and
        every later batch moves the clusters so. After a fit with sample
        weights the test starts from the first batch, which should then be
        drawn from the whole stream too. The test cannot see a batch of a
        cluster holding more than 10/11 of the rows, nor batches of fewer
        than about 5 rows per cluster; where the clusters overlap, sorted
        batches lose accuracy (:mathmd:`7`, "A batch that is not a sample of
        the stream").
        ``n_iter_``, ``refine_n_iter_``,
        ``loss_curve_``, ``solver_`` and ``noise_scale_`` describe the fit
        that started the stream. The fitted arrays take each batch's dtype,
        as ``labels_`` is the batch's: a float64 batch after float32 ones
        gives float64 centres (the stream's statistics are float64 whatever
        the batches').

        When the batch that starts the stream has at least 64 rows per
        parameter of the mixture (``K d + K + 2``, ``K d + 2 K + 1`` with free
        norms; at most 512), each batch's
        E-step statistics, taken at the parameters of its time, are kept as
        their running mean together with their Jacobian in the parameters,
        so that the centres solve the M step of the whole stream's
        statistics linearised around the parameters each batch saw: one
        pass ends near the maximum likelihood of the whole stream
        (:mathmd:`7`, "One pass over a stream"). The Jacobian costs one E
        step on a batch per parameter, taken at the first update and
        whenever the weight seen has doubled, on a batch with those rows.
        Otherwise (smaller batches, whose Jacobian errs too much, or more
        parameters) the update is online EM (Cappe and Moulines 2009), with
        ``gamma_n = min(1, 16 / n)^0.6`` and averaging. A component whose
        weight falls below one row of the stream is reseeded, before the
        batch's update, at the batch's row worst explained by the mixture
        (as MiniBatchKMeans reassigns an empty centre; a batch of one row,
        where the mixture's rows rarely lie), with a warning; a
        linearised stream then goes on as online EM. Every update is the EM
        refinement's, whatever ``refine`` and ``solver`` (they set the first
        batch's fit): after ``partial_fit``, ``refine_`` is ``"em"`` and
        ``mixture_`` is the stream's mixture. Nothing of earlier batches is
        kept but these statistics, O(K d) numbers and the Jacobian (at most
        512 x 512), never a d x d matrix: ``moment_heads_`` (for
        :meth:`transform`) is a running product of each batch's second
        moment with the moving heads. The updates are compared in
        ``benchmarks/streaming.py`` (see the "Scaling out" page).

        The stream's statistics are held at the scale ``scale_`` of the
        first batch: a later batch whose rows are more than ``1e100`` times
        that scale (``1.8e16`` for float32 rows), or non-zero and less than
        about ``1e-145`` times it, raises ValueError and leaves the estimator
        as it was; so does a batch whose largest weight is more than ``1e100``
        times the first batch's, or less than ``1e-100`` times it.
        Sparse batches are not densified, but at a reseeding: the batch whose
        rows reseed a lost component is formed densely once (n x d float64).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            One batch; at least ``n_clusters`` rows in the first.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the batch's rows, on one scale across
            the batches (unit weights when None).

        Returns
        -------
        self : AttentionClustering
            The updated estimator; ``n_steps_`` counts the calls (since the
            last :meth:`fit`) and ``labels_`` labels the last batch.
        """
        first = not hasattr(self, "_stream_weight_unit")
        checked = None
        if first:
            # Before the batch is converted or copied, as in fit.
            checked = self._check_params_before_reading(X)
        else:
            # Every call checks the parameters (set_params between batches),
            # not only those whose batch starts the stream anew.
            self._check_params(self.n_features_in_)
            self._check_stream_params()
        rows = self._rows(
            X,
            reset=first,
            sample_weight=sample_weight,
            defer_finite=first,
            weight_unit=None if first else self._stream_weight_unit,
            in_memory=True,
        )
        # The first batch is read twice, by its fit and by the stream's first
        # update: a warning about its rows is given once.
        held = []
        try:
            with deferred_warnings() as held:
                if first:
                    given = self.get_params(deep=False)
                    self._fit_rows(rows, checked=checked, given=given)
                    self._start_stream(rows, _new_stream(self._result, rows), given)
                    self.n_steps_ = 0
                else:
                    self._check_batch(rows)
                    if self._stream is None:
                        # After fit: the stream holds the fitted mixture's
                        # rows; a fit without one (refine=None, PSGD) has no
                        # statistics to hold, and its heads start the stream
                        # as a first batch's fit does, read from this batch.
                        fitted = None if self._result.mixture is None else self._fit_weight
                        self._stream = _new_stream(self._result, rows, held=fitted)
                        self.n_steps_ = 0
                    if (
                        self._stream.seen
                        and rows.total_weight > _STREAM_RESTART * self._stream.seen
                        and rows.n_weighted >= self.n_clusters_
                        and self._stream.passes_for_sample(self._unit_rows(rows))
                    ):
                        # This batch outweighs the stream so far, has the
                        # rows of a fit and passes for a sample of the
                        # stream: its own fit starts the stream anew, at the
                        # stream's K (a few heavy rows update it; a batch of
                        # one class's rows, the stream sorted, is an update).
                        self._fit_rows(rows, n_clusters=self.n_clusters_)
                        self._stream = _new_stream(self._result, rows)
                with rows, one_blas_thread():
                    self._write(self._stream_update(rows), rows.dtype, _KEEP_SCORES)
        finally:
            replay(dict.fromkeys(held))
        self.n_steps_ += 1
        return self

    def _start_stream(self, rows, stream=None, given=None):
        """Make the state :meth:`partial_fit` continues, at a fit's result
        (fit's and the first batch's: the one place it is made).

        ``stream``: None after :meth:`fit` (the next batch makes it from the
        fit). The later batches' weights are divided by ``rows``' unit
        (``rows_from``), and the parameters that shape the stream are kept:
        :meth:`_check_stream_params` refuses a batch after they change.
        ``given``: ``get_params(deep=False)``, when the caller read it.
        """
        self._stream = stream
        self._stream_weight_unit = rows.weight_unit
        # The largest weight, relative to that unit (:meth:`_check_batch`).
        self._stream_heaviest = rows.heaviest_weight
        self._stream_params = self._stream_parameters(given)

    def _stream_parameters(self, given=None):
        """The parameters that shape a stream (all but ``_FREE_STREAM_PARAMS``),
        as they are now (``given``: ``get_params(deep=False)``, read by the
        caller): ``n_clusters`` as the fitted number (the one ``"auto"``
        chose), the others copied, but ``random_state``, kept as itself (an
        instance is the generator the stream draws from), and the values
        that cannot change (text, numbers, None: no copy to make)."""
        if given is None:
            given = self.get_params(deep=False)
        params = {
            name: value
            if name == "random_state" or type(value) in _IMMUTABLE
            else copy.deepcopy(value)
            for name, value in given.items()
            if name not in _FREE_STREAM_PARAMS
        }
        params["n_clusters"] = self.n_clusters_
        return params

    def _check_stream_params(self):
        """Refuse a batch after ``set_params`` changed a parameter that shapes
        the stream (InvalidParameterError naming each, its value and the
        stream's), before the batch is read.

        The updates never read the parameters, and a batch that starts the
        stream anew is fitted as its first was: a parameter set since would
        take effect only at such a batch, by its weight. ``n_clusters="auto"``
        stands for the stream's number. IncrementalPCA refuses a changed
        ``n_components`` alike.
        """
        started = getattr(self, "_stream_params", None)
        if started is None:
            # A stream pickled before its parameters were kept keeps those of now.
            self._stream_params = started = self._stream_parameters()
        now = self.get_params(deep=False)
        changed = [
            _change(name, now[name], value)
            for name, value in started.items()
            if not (
                _same_setting(now[name], value)
                or (name == "n_clusters" and _same_setting(now[name], "auto"))
            )
        ]
        if changed:
            raise InvalidParameterError(
                "partial_fit continues a stream that keeps the parameters it started with "
                f"(at fit or the first partial_fit), and these were set since: "
                f"{', '.join(changed)}. Set them back to go on, or call fit, or partial_fit on "
                "a clone, to start a stream with the new values."
            )

    def _unit_rows(self, rows):
        """The batch as the stream's statistics see it: centred on the
        stream's fit's ``mean_`` when it centred, divided by ``scale_``."""
        result = self._result
        return (rows.centred(result.mean) if result.centred else rows).rescaled(result.scale)

    def _check_batch(self, rows):
        """Refuse a later batch the stream's statistics cannot hold (ValueError), before any work."""
        result = self._result
        peak = self._unit_rows(rows).peak()
        # Squares of the rows at unit scale (moment_heads_) must stay finite in X's dtype.
        limit = min(_STREAM_MAX_MAGNITUDE, 1e-3 * float(np.sqrt(np.finfo(rows.dtype).max)))
        # Non-zero rows far below it would floor the variance (MIN_VARIANCE
        # of their mean square) under float64's smallest normal number.
        if not (peak <= limit and (peak == 0.0 or peak >= _STREAM_MIN_MAGNITUDE)):
            raise ValueError(
                f"This batch's rows reach {peak:.3g} times the scale fixed by the first batch "
                f"(scale_={result.scale:.3g}): the stream's statistics cannot hold both "
                "magnitudes. Scale the batches alike (one scaler fitted on a first batch), "
                "or call fit on data at the new magnitude."
            )
        # Both relative to the first batch's weight unit (a power of two
        # between its largest weight and twice that): their ratio is the
        # ratio of the largest weights as given.
        heaviest = rows.heaviest_weight / self._stream_heaviest
        if not (heaviest <= _STREAM_MAX_WEIGHT and heaviest >= 1.0 / _STREAM_MAX_WEIGHT):
            ratio = f"{heaviest:.3g}" if np.isfinite(heaviest) else "more than 1e308"
            raise ValueError(
                f"This batch's largest weight is {ratio} times the first batch's: "
                "the stream's statistics cannot hold both magnitudes. Give the batches "
                "weights on one scale."
            )

    def _stream_update(self, rows):
        """The stream updated with the batch ``rows``: a new :class:`FitResult`.

        The stream's statistics are those of the rows as the fit it started
        at saw them (:meth:`_unit_rows`). Components that lost their weight
        are first reseeded at the batch's rows (``_mixture._OneBatch.reseed``).
        The update runs on a copy, kept only when it succeeds.
        """
        result = self._result
        unit = self._unit_rows(rows)
        # A shallow copy: an update binds new arrays to the stream's
        # attributes and never writes into its arrays, so the stream kept on
        # failure is untouched (a deep copy took its K x d arrays at every
        # batch: 400 MB at K = 10 and 2^20 features).
        stream = copy.copy(self._stream)
        if stream.lost().size:
            points = rows.map_rows(_unit_points, result.mean, result.scale, columns=rows.n_features)
            stream, reseeded = stream.reseed(points, rows.sample_weight)
            if reseeded:
                warn(
                    f"partial_fit reseeded {reseeded} of the n_clusters={len(result.centers)} "
                    "clusters, whose weight had fallen below one row of the stream, at this "
                    "batch's rows worst explained by the mixture.",
                    UserWarning,
                )
        was_ordered = getattr(stream, "ordered", False)
        p = stream.update(unit)
        if getattr(stream, "ordered", False) and not was_ordered:
            warn(
                f"partial_fit: {stream.refused} of the {stream.tested} batches tested were not "
                "samples of the stream (their rows' shares among the clusters differ from the "
                "stream's): the batches are taken to come in the clusters' order (rows sorted "
                "by class or by time), and each batch from now on updates the clusters by its "
                "own rows. Shuffle the rows across batches if they are not ordered.",
                UserWarning,
            )
        mixture = SphericalMixture.from_heads(
            p.U, p.radii, p.variance, p.log_pi, stream.mean_sq, result.mean, result.scale
        )
        labels = rows.labels(*predict_rule(mixture.centers, mixture, result.mean, rows.dtype))
        self._stream = stream
        return replace(
            result,
            # The stream's update is the EM refinement's, whatever refine.
            settings=replace(result.settings, refine="em"),
            centers=mixture.centers,
            mixture=mixture,
            weights=np.exp(mixture.log_weights),
            moment_heads=stream.moment_heads.T,
            free_norms=bool(p.free),
            labels=labels,
        )

    def fit_transform(self, X, y=None, **fit_params):
        """Fit, then return :meth:`transform` of X.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.
        **fit_params : dict
            Passed to :meth:`fit` (``sample_weight``).

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features)
            As :meth:`transform`; a lazy Dask array for Dask input.

        Raises
        ------
        ValueError
            For Dask input where ``set_output`` asks for a pandas or polars
            container (see :meth:`transform`), before the fit; for sparse X
            whose dense output would pass 1 GiB (see :meth:`transform`),
            before the fit.
        """
        check_lazy_output(self, X)
        check_dense_output(X, "fit_transform")
        return self.fit(X, y, **fit_params).transform(X)

    def transform(self, X):
        r"""The attention layer's output for each row, in context of the training data.

        Not distances to the centres, unlike KMeans' ``transform``: the
        output has the shape of X, each row moved towards its centroid.
        :math:`T(x) = \lambda K (M / s^2) U U^\top y` with ``y = x - mean_`` (``mean_``
        is zero unless the data were centred), where ``M`` is the second
        moment of the (centred) training data, ``s = scale_``, ``lambda =
        temperature_`` and U the heads (computed as ``lambda K (y^T U)
        moment_heads_``, never a d x d matrix): the layer of :mathmd:`2` with the n training rows as its context (``L = n``).
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

        Raises
        ------
        FloatingPointError
            Where the output leaves X's dtype's range (float32 rows at the
            edge of their range, or far from a stream's first batch's
            scale), as the attention layers of :mod:`attention_cluster.layers`;
            on Dask input, when the output is computed.
        ValueError
            For Dask input where ``set_output`` asks for a pandas or polars
            container: the output is lazy (compute X or the output first).
            For sparse X whose dense output would take more than 1 GiB and
            more than ten times the bytes of X's non-zeros (hashed features: 8 MB a
            row), before any work: pass fewer rows at a time.
        """
        check_is_fitted(self)
        check_lazy_output(self, X)
        check_dense_output(X, "transform")
        with self._rows(X, count_rows=False) as rows, one_blas_thread():
            heads = np.asarray(self.cluster_centers_, dtype=np.float64).T
            out = self.temperature_ * self.n_clusters_ * np.asarray(self.moment_heads_, np.float64)
            return rows.map_rows(
                _layer_output,
                heads,
                np.asarray(self.mean_, dtype=np.float64),
                out,
                rows.dtype,
                dtype=rows.dtype,
                columns=rows.n_features,
            )

    def _check_mixture(self):
        """Whether the fit is (or will be) the EM refinement's mixture; else an AttributeError that says why."""
        refine = (
            self.refine_
            if hasattr(self, "refine_")
            else resolve_methods(self.solver, self.refine)[1]
        )
        if refine != "em" and getattr(self, "mixture_", None) is None:
            # A fitted estimator is described by its fit, not by parameters
            # set since (set_params takes effect at the next fit).
            if not hasattr(self, "refine_"):
                has = f"has solver={self.solver!r}, refine={self.refine!r}"
            else:
                has = f"was fitted with solver_={self.solver_!r}, refine_={self.refine_!r}"
                if resolve_methods(self.solver, self.refine)[1] == "em":
                    has += (
                        f" (solver={self.solver!r}, refine={self.refine!r}, set since, take "
                        "effect when you fit again)"
                    )
            raise AttributeError(
                "This AttentionClustering fits no likelihood: predict_proba, score_samples, bic "
                f"and aic need the EM refinement's mixture (refine='em'), and it {has}."
            )
        return True

    def _mixture_rows(self, X, fn, per_cluster=False):
        """``fn(rows, mixture_)`` on the rows of X, one value (or one per cluster) per row, in X's dtype."""
        check_is_fitted(self)
        self._check_mixture()
        columns = self.n_clusters_ if per_cluster else None
        with self._rows(X, count_rows=False) as rows, one_blas_thread():
            return rows.map_rows(fn, self.mixture_, rows.dtype, dtype=rows.dtype, columns=columns)

    @available_if(_check_mixture)
    def score_samples(self, X):
        r"""Log-likelihood of each row under the fitted mixture.

        :math:`\log p(x) = \operatorname{logsumexp}_k \bigl(\log \pi_k
        + \log \mathcal{N}(x; m_k, (s \tau)^2 I)\bigr)` with
        :math:`m_k = m + s r_k \mu_k`: the mixture of :mathmd:`7` fitted by the EM refinement (only with it; ``refine=None`` and
        PSGD without refinement fit no likelihood), computed from the
        centred rows at unit scale (``mixture_``).

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            A lazy Dask array for Dask input. In X's dtype: for float32 X,
            ``-inf`` where the value is below float32's range.
        """
        return self._mixture_rows(X, _log_likelihoods)

    @available_if(_check_mixture)
    def predict_proba(self, X):
        r"""Posterior probability of each cluster under the fitted mixture.

        :math:`\gamma_k(x) = \operatorname{softmax}_k \bigl(\log \pi_k
        + (r_k \langle \mu_k, y \rangle - r_k^2 / 2) / \tau^2\bigr)` with
        :math:`y = (x - m) / s` (:mathmd:`7`): a softmax attention of the
        point, as query, over the heads, as keys (with one norm r,
        :math:`\operatorname{softmax}_k(\log \pi_k + \beta \langle \mu_k, y \rangle)`,
        :math:`\beta = r / \tau^2`). Each row sums to one; its argmax is
        :meth:`predict`, but where a row's two best clusters tie within
        rounding: the probabilities are float64 products, the labels of
        float32 X float32 products (:meth:`predict`), so that such a row
        may take the other label.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
            New data.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_clusters)
            A lazy Dask array for Dask input.
        """
        return self._mixture_rows(X, _posteriors, per_cluster=True)

    def _information(self, X, penalty):
        """``-2 sum_i log p(x_i) + penalty(p, n)`` (one Dask computation for Dask input)."""
        check_is_fitted(self)
        self._check_mixture()
        with self._rows(X) as rows, one_blas_thread():
            return information_criterion(
                rows, self.mixture_, self.centroid_norms_ == "free", self.center_, penalty
            )

    @available_if(_check_mixture)
    def bic(self, X):
        r"""Bayesian information criterion of the fitted mixture on X (lower is better).

        :math:`\mathrm{BIC} = -2 \sum_i \log p(x_i) + p \log n` with ``p = K d + 1`` free
        parameters: K unit directions (d - 1 each), the common norm r, the
        noise tau and K - 1 weights (:mathmd:`7`); ``p = K d + K`` when each
        centroid has its own norm (``centroid_norms_``), or when the data
        were centred (``center_``) and ``K <= d + 1`` (about the mean the
        means are then any K points; beyond, ``K d + d + 1``). Fit one
        estimator per candidate K and keep the K of the smallest BIC (see
        the user guide, "Choosing K").

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)

        Returns
        -------
        bic : float
        """
        return self._information(X, bic_penalty)

    @available_if(_check_mixture)
    def aic(self, X):
        r"""Akaike information criterion of the fitted mixture on X (lower is better).

        :math:`\mathrm{AIC} = -2 \sum_i \log p(x_i) + 2 p` with p as in :meth:`bic`.

        Parameters
        ----------
        X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)

        Returns
        -------
        aic : float
        """
        return self._information(X, lambda p, n: 2.0 * p)

    def score(self, X, y=None, sample_weight=None):
        """Negative mean squared reconstruction error ``-mean ||y - T(y)||^2``, ``y = x - mean_``.

        Each row's error is computed at unit scale from its products with
        the heads and ``moment_heads_`` (:func:`_passes.unit_terms`), so that
        sparse X is never densified and nothing is squared at the data's
        magnitude. The errors are summed at the data's magnitude divided by
        ``2^b``, ``2^b > 32 n`` (powers of two: exact), so that neither a
        row's term nor the sum overflows unless the mean does: rows far
        beyond ``scale_`` score finite wherever the score is. The cost is at
        the other end of float64's range: a mean below about ``2^b`` times
        float64's smallest normal number (2.2e-308) is summed from subnormal
        numbers, to an absolute error of about ``2^b`` times 5e-324. For
        Dask input the mean is one Dask computation (a reduction over the
        blocks): X is not gathered.

        The attention layer's own objective (the paper's risk, with the
        training data as context; see :meth:`transform`), not a likelihood:
        unlike :meth:`sklearn.mixture.GaussianMixture.score` it is not the
        mean of :meth:`score_samples`, and unlike
        :meth:`sklearn.cluster.KMeans.score` it is not the negative sum of
        squared distances to the centres. It does not penalise a point for
        being far from every head along the heads' span, and it is not
        comparable across K as a model selection score. For the mixture's
        log-likelihood use :meth:`score_samples` (its mean) and, to choose
        K, :meth:`bic`.

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
            Higher is better. ``-inf`` when the mean squared error exceeds
            float64's range (rows beyond about 1e154), as squares there do;
            also when one row's error does and its weight is below an eighth
            of the largest (its term is formed before its weight applies).
        """
        check_is_fitted(self)
        heads = np.asarray(self.cluster_centers_, dtype=np.float64)
        out = self.temperature_ * self.n_clusters_ * np.asarray(self.moment_heads_, np.float64)
        f, e = np.frexp(float(self.scale_))
        with self._rows(X, sample_weight=sample_weight) as rows, one_blas_thread():
            # Each row's error at unit scale times 2^(2e - b): at most its
            # error at the data's magnitude (times f^2 >= 1/4) over
            # 2^(b - 2) > 8 n. The weights are below 4 (power_of_two_unit),
            # so neither the weighted sum nor the term of a row of weight
            # above an eighth of the largest exceeds the mean: the sum
            # overflows only where the score is -inf.
            b = int(np.frexp(float(rows.n_samples))[1]) + 5
            with np.errstate(over="ignore"):
                error = rows.weighted_mean(
                    _reconstruction_errors, heads, out, self.mean_, self.scale_, 2 * int(e) - b
                )
        # The mean times f^2 2^b, by mantissa and exponent: it overflows only
        # where the score does.
        m, e_m = np.frexp(error)
        with np.errstate(over="ignore"):
            return -float(np.ldexp(m * (f * f), int(e_m) + b))


# Rows within 2^this of the scale are squared at unit scale without overflow
# (their squared norms stay below about 1e200 times the features).
_SQUARE_SAFE_EXPONENT = 332
# A partial_fit batch whose rows, divided by the first batch's scale, exceed
# this magnitude would overflow the stream's squared statistics.
_STREAM_MAX_MAGNITUDE = 1e100
# A non-zero batch whose largest entry, divided by the first batch's scale, is
# below this would floor the stream's variance (MIN_VARIANCE times the rows'
# mean square) below float64's smallest normal number, where it rounds to 0:
# 1e3 sqrt(tiny / MIN_VARIANCE), about 1.5e-145.
_STREAM_MIN_MAGNITUDE = 1e3 * float(np.sqrt(np.finfo(np.float64).tiny / MIN_VARIANCE))
# A partial_fit batch whose largest weight is beyond this factor of the first
# batch's (above or below) is refused: the stream's weighted statistics would
# lose the lighter batches' rows to rounding, or overflow.
_STREAM_MAX_WEIGHT = 1e100
# A partial_fit batch whose weight exceeds this factor of the weight seen
# before it starts the stream anew, by a fit of its own rows.
_STREAM_RESTART = 4.0
# The parameters that change no number of a fit or a stream (the chunks of a
# pass and the order their sums are added in do not depend on the threads):
# set_params may change them between partial_fit's batches. Every other
# parameter shapes the stream (_check_stream_params).
_FREE_STREAM_PARAMS = ("n_threads", "verbose")

# Types of parameter values a stream keeps as they are (deepcopy returns them).
_IMMUTABLE = frozenset((str, int, float, bool, type(None)))


def _same_setting(a, b):
    """Whether two values of a parameter fit alike: equal text, numbers, None
    or arrays (``init``); a RandomState instance only itself (another one,
    however seeded, draws other numbers from here on)."""
    if a is b:
        return True
    if isinstance(a, np.random.RandomState) or isinstance(b, np.random.RandomState):
        return False
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return bool(np.array_equal(a, b))


def _shown(value):
    """A parameter's value in a message: an array (``init``) by its shape."""
    if not isinstance(value, str) and np.ndim(value) > 0:
        return f"<array of shape {np.shape(value)}>"
    return repr(value)


def _change(name, value, started):
    """A parameter set since a stream started, in the refusal: its value and
    the stream's, two arrays (``init``) of one shape by the first entry at
    which they differ (their shapes alone would read alike)."""
    if not any(isinstance(v, str) for v in (value, started)) and np.ndim(value) > 0:
        now, then = np.asarray(value), np.asarray(started)
        differ = np.argwhere(now != then) if now.shape == then.shape else ()
        if len(differ):
            at = tuple(int(i) for i in differ[0])
            return (
                f"{name}={_shown(value)} ({name}[{', '.join(map(str, at))}] = "
                f"{now[at].item()!r}, the stream's: {then[at].item()!r})"
            )
    return f"{name}={_shown(value)} (the stream's: {_shown(started)})"


def _new_stream(result, rows, held=None):
    """partial_fit's stream (``_mixture.new_stream``) at a fit's result, for batches like ``rows``.

    ``held``: ``(weight, n_rows)`` of the fit's own rows, which the stream
    then counts in without reading them (partial_fit after a fit with the EM
    refinement), at the fitted mixture's parameters; None for a stream whose
    first update reads its rows, started as the fit's EM was (norm 1, the
    spectrum's noise).
    """
    mixture = result.mixture
    if held is None:
        radii = mixture.radii if result.free_norms else None
        return new_stream(result.centers.T, result.weights, result.noise, rows.n_weighted, radii)
    stream = new_stream(
        result.centers.T,
        result.weights,
        np.sqrt(mixture.variance),
        rows.n_weighted,
        mixture.radii,
        free=result.free_norms,
    )
    return stream.hold(*held, result.moment_heads.T, result.row_fractions)


def _unit_points(rows, offset, scale):
    """A block's rows at unit scale, ``(x - offset) / scale``, dense float64
    (where a stream reseeds its lost components)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (dense_block(rows, np.float64) - offset) / scale


def _in_dtype(a, dtype):
    """``a`` in ``dtype``: infinite where a value exceeds the dtype's range, as
    documented (``covariances_``, float32 log-likelihoods), not a
    RuntimeWarning from inside the package."""
    with np.errstate(over="ignore"):
        return a.astype(dtype, copy=False)


def _layer_output(rows, heads, mean, out, dtype):
    """``((x - mean_) U) out`` for a block of rows (see :meth:`AttentionClustering.transform`):
    FloatingPointError where it leaves X's dtype's range, as the layers' (``_validation.finite_output``).

    The rows are centred before the product, then divided by the power of
    two of the centred block's largest entry (``_passes.centred_projection``):
    ``x U - mean_ U`` rounds at ``|x| |U|``, which a column far from zero
    makes far larger than the output (a head's rounding-level component on
    a constant column of 1e77 gave an output all rounding)."""
    with np.errstate(over="ignore", invalid="ignore"):
        projected, unit = centred_projection(rows, mean, heads)
        return finite_output(((projected @ out) * unit).astype(dtype))


def _log_likelihoods(rows, mixture, dtype):
    """:func:`~._plan.block_log_likelihoods` in ``dtype``."""
    return _in_dtype(block_log_likelihoods(rows, mixture), dtype)


def _posteriors(rows, mixture, dtype):
    """Posterior probabilities of the components for every row of a block.

    Rows beyond float64's range at the mixture's unit scale
    (:func:`~._plan.near_terms`) have one component of probability 1: the limit
    of the posterior as the row moves out, which is the labels' rule's
    there (``_passes._far_labels``: ``argmax_k r_k <x, mu_k>`` over the
    components of positive weight; the logits' other terms are below their
    rounding).
    """
    far, P, _ = near_terms(rows, mixture)
    out = np.zeros((len(far), len(mixture.radii)))
    out[~far] = mixture.posteriors(P)
    if far.any():
        limit = predict_rule(mixture.centers, mixture, mixture.offset).labels_of(rows[far])
        out[np.flatnonzero(far), limit] = 1.0
    return out.astype(dtype, copy=False)


def _reconstruction_errors(rows, heads, out, mean, scale, shift):
    """``2^shift ||y - T(y)||^2 / s^2`` for every row of a block, ``y = x - mean``.

    ``T(y) = out^T heads y`` (see :meth:`AttentionClustering.score`), expanded
    as ``||y||^2 - 2 <y, T(y)> + ||T(y)||^2`` from the rows' products with
    ``heads`` (K x d) and ``out`` (K x d), so that sparse rows are never
    densified. Rows far beyond the scale, whose squares at unit scale would
    overflow into inf - inf, or far below it, whose squares would underflow,
    are read at a power of two 2^e of their own
    magnitude (rows within a factor 2^64 of each other together): their
    errors are 4^e times those, and ``2^shift`` is folded into that power of
    two (see :meth:`AttentionClustering.score`), so that a row's value
    overflows to inf only where its error times ``2^shift`` does; the other
    rows' errors are not touched by theirs (a row of zero weight far away
    left the mean of the others).
    """
    # T(y) is |out| times y's magnitude: out is read over 2^k, its power of
    # two, and the terms in it are formed over 4^k (_errors_at; a stream's
    # batch far above its first batch's scale makes out large, and its terms
    # overflowed into inf - inf, a NaN score); rows are grouped by the
    # magnitude of those terms.
    top = max(float(np.max(out, initial=0.0)), -float(np.min(out, initial=0.0)))
    k = max(0, int(np.frexp(top)[1]))
    # Sparse rows stored about the mean once, for their extent and their terms.
    rows, mean = unit_storage(rows, mean)
    exponents = unit_term_exponents(rows, mean, scale)
    # Rows whose terms pass float64 at unit scale, or whose squares (and
    # products with out) underflow there, are read at their own magnitude.
    far = (exponents + k > _SQUARE_SAFE_EXPONENT) | (exponents < -_SQUARE_SAFE_EXPONENT)
    unit = np.iinfo(np.int64).min  # the group of the rows read at unit scale
    groups = np.where(far, exponents // 64, unit)
    errors = np.empty(len(exponents))
    for group in np.unique(groups):
        idx = np.flatnonzero(groups == group)
        e = 0 if group == unit else int(np.max(exponents[idx]))
        block = rows if len(idx) == len(exponents) else rows[idx]
        errors[idx] = _errors_at(block, heads, out, mean, np.ldexp(scale, e), 2 * e + shift, k)
    return errors


def _errors_at(rows, heads, out, mean, scale, e, k=0):
    """:func:`_reconstruction_errors` of rows read at ``scale``, times
    ``2^e``, with ``out`` read over ``2^k`` (``rows`` and ``mean`` stored by
    :func:`_passes.unit_storage`): the error is ``q + 4^k D``, ``D
    = ||A out||^2 - 2 <A, B> / 2^k`` formed at that scale (B the products
    with that ``out``) and ``q`` taken as it is (over ``4^k`` it underflowed
    where the heads do not see a row, A = 0, and the error is ``q``); where
    ``4^k D`` passes float64, ``(q / 4^k + D)`` times ``2^(e + 2k)``, q then
    below D's rounding."""
    K = len(heads)
    C = np.vstack([heads, out])  # (out over 2^k scaled in this copy)
    out = np.ldexp(C[K:], -k, out=C[K:])
    P, q = unit_terms(rows, C, mean, scale, stored=True)
    A, B = P[:, :K], P[:, K:]
    # (By einsum and in place: no n x K temporary beyond A (out out^T).)
    D = np.einsum("ij,ij->i", A @ (out @ out.T), A)
    cross = np.einsum("ij,ij->i", A, B)
    with np.errstate(over="ignore", under="ignore"):
        D -= np.ldexp(cross, 1 - k, out=cross)
        errors = q + np.ldexp(D, 2 * k)
        # (D overflows only upwards: below zero it is at least -||y||^2.)
        far = np.isinf(errors)
        errors = np.ldexp(errors, e)
        if far.any():
            errors[far] = np.ldexp(np.ldexp(q[far], -2 * k) + D[far], e + 2 * k)
        # A squared norm: the expansion's cancellation may round it below zero.
        return np.maximum(errors, 0.0, out=errors)
