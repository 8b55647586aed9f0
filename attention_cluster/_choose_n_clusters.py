"""``choose_n_clusters``: K chosen for an :class:`AttentionClustering` and fitted.

The criterion is :func:`~attention_cluster._choose_k.count_clusters`, which
``n_clusters="auto"`` runs too; this module gives it the rows and the
estimator's fits, so that the estimator's module need not be imported by the
criterion's (data flow: this module, then ``_clustering``, then
``_choose_k``).
"""

import numpy as np
from sklearn.base import clone

from ._choose_k import (
    DYNAMICS_BETA,
    MAX_SAMPLES,
    MIN_CLUSTER_SIZE,
    ClusterCount,
    FittedMixture,
    count_clusters,
)
from ._clustering import AttentionClustering
from ._passes import rows_from
from ._plan import check_width, predict_rule

__all__ = ["choose_n_clusters"]


def choose_n_clusters(
    X,
    estimator,
    n_clusters_range=None,
    *,
    sample_weight=None,
    beta=DYNAMICS_BETA,
    min_cluster_size=MIN_CLUSTER_SIZE,
    max_samples=MAX_SAMPLES,
):
    """Choose K by the dynamics' longest plateau and the silhouette of its neighbours; fit at K.

    :func:`~attention_cluster._choose_k.count_clusters` on X's rows, with
    clones of ``estimator`` at ``n_clusters=k`` fitted on X for the K
    compared; the clone at the chosen K is returned. The dynamics' K
    (``K_dyn``) is replaced by a neighbour whose silhouette is higher by
    more than 0.05; when ``K_dyn`` has no silhouette (``K_dyn = 1``: a
    silhouette needs two clusters), by the neighbour with the highest
    defined silhouette, whatever its value. When the fits have an EM
    mixture (``refine="em"``, which ``refine="auto"`` resolves to unless
    ``solver="psgd"``), a fit at K = 1 then replaces the choice when its
    BIC on X's rows is not higher; fits without one (``refine=None``, or
    ``solver="psgd"`` with ``refine="auto"``) skip that test, and the
    choice may then be more than one cluster for rows that hold none.

    Parameters
    ----------
    X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
        Training data.
    estimator : AttentionClustering
        Its parameters (other than ``n_clusters``) are those of the fits;
        its ``random_state`` draws the subsample.
    n_clusters_range : iterable of int, default=None
        The K allowed; by default 1 to ``min(n_samples, 50)``, n_samples
        counting the rows of positive weight.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the rows, as the estimator's fit takes them. With at
        most ``max_samples`` rows of positive weight, the dynamics runs on
        all of them, each row a weighted particle standing for ``w /
        w_min`` tokens (``SelfAttentionDynamics.fit``; equal weights are
        no weights, rows of weight zero are absent), and the silhouettes
        count row i ``w_i / w_min`` times; with more, ``max_samples`` of
        them are drawn uniformly, with their weights.
    beta : float, default=10.0
        Inverse temperature of the dynamics.
    min_cluster_size : float or int, default=0.02
        Smallest group of the dynamics counted as a cluster: a fraction
        (float below 1) of its tokens, or a number of them (int; at most
        ``max_samples`` rows, each counted by its weight), as
        :class:`SelfAttentionDynamics` takes it.
    max_samples : int, default=2000
        Rows the dynamics runs on, and the silhouettes are taken on.

    Returns
    -------
    ClusterCount
        The chosen K, the plateau lengths by K, the silhouettes compared
        and the fitted estimator.

    Raises
    ------
    TypeError
        If ``estimator`` is not an :class:`AttentionClustering`.
    ValueError
        Before any work: if a parameter of ``estimator`` is invalid, with
        the estimator's message, or ``init`` is an array (several K are
        fitted); if
        ``n_clusters_range`` holds no positive integer, or none of at most
        n_samples; if ``max_samples`` is not an integer >= 1; on X the
        estimator refuses.

    Warns
    -----
    ConvergenceWarning
        When the dynamics found no plateau: its own diagnosis (and advice),
        and the K read from its last state.
    """
    if not isinstance(estimator, AttentionClustering):
        raise TypeError(
            f"estimator must be an AttentionClustering, got {type(estimator).__name__}."
        )
    params = estimator.get_params(deep=False)
    if not isinstance(params["init"], str):
        raise ValueError(
            "choose_n_clusters fits several numbers of clusters: the estimator's init must be "
            f'"spectral" or "random", not an array of shape {np.shape(params["init"])}.'
        )
    # The estimator's parameters are checked as its fit with n_clusters="auto"
    # checks them, before any work on X, as fit does.
    auto = clone(estimator).set_params(n_clusters="auto")
    auto._check_params_before_reading(X)

    def fit_at(k):
        model = clone(estimator).set_params(n_clusters=k).fit(X, sample_weight=sample_weight)
        rule = predict_rule(model.cluster_centers_, model.mixture_, model.mean_)
        free = model.centroid_norms_ == "free"
        mixture = (
            None if model.mixture_ is None else FittedMixture(model.mixture_, free, model.center_)
        )
        return model, rule, mixture

    with rows_from(auto, X, reset=True, sample_weight=sample_weight, defer_finite=True) as rows:
        auto._check_params(rows.n_features)
        check_width(rows.n_features, rows.in_memory)
        rows.check_finite()
        K, scores, silhouettes, model = count_clusters(
            rows,
            fit_at,
            random_state=params.get("random_state"),
            n_threads=params.get("n_threads"),
            n_clusters_range=n_clusters_range,
            beta=beta,
            min_cluster_size=min_cluster_size,
            max_samples=max_samples,
            center=params.get("center", "auto"),
        )
    return ClusterCount(n_clusters=K, scores=scores, silhouettes=silhouettes, model=model)
