"""``choose_n_clusters``: K chosen for an :class:`AttentionClustering` and fitted.

The criterion is :func:`~attention_cluster._choose_k.count_clusters`, run by
the estimator's own ``n_clusters="auto"`` fit; this module gives that fit the
criterion's options and returns its choice with the fit at K (data flow:
this module, then ``_clustering``, then ``_choose_k``).
"""

import numpy as np
from sklearn.base import clone

from ._choose_k import DYNAMICS_BETA, MAX_SAMPLES, MIN_CLUSTER_SIZE, ClusterCount, check_choice
from ._clustering import AttentionClustering
from ._validation import InvalidParameterError

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

    A clone of ``estimator`` fitted with ``n_clusters="auto"`` and these
    options (:func:`~attention_cluster._choose_k.count_clusters` on X's
    rows, with the estimator's fits at the K compared, on the same rows);
    its fit at the chosen K is returned, as ``n_clusters=K`` fitted on X
    leaves it. The dynamics' K
    (``K_dyn``) is replaced by a neighbour whose silhouette is higher by
    more than 0.05; when ``K_dyn`` has no silhouette (``K_dyn = 1``: a
    silhouette needs two clusters), by the neighbour with the highest
    defined silhouette, whatever its value. Where the rows as given
    gather into one group and their centred rows into more (the dynamics'
    K is then the centred rows'), K = 2 is compared too, as a neighbour is
    (a blob with no clusters also gives more groups once centred,
    metastable ones); fits without an EM mixture then keep K = 2, which
    have no test of one cluster to follow. When the fits have an EM
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
        counting the rows of positive weight. K above n_samples are dropped
        (a fit needs as many rows as clusters). Where the dynamics' K falls
        outside the range, the K of the range it held longest (the highest
        score, the nearest to its K among ties) is ``K_dyn``, whose
        neighbours in the range are then compared as above. Where one K is left there
        is nothing to choose: the estimator is fitted at that K directly,
        its model that of ``n_clusters=K`` with the same other parameters
        fitted on X (every fitted attribute the same), without the
        dynamics, its draw of rows, the silhouettes or the fit at K = 1,
        and ``scores`` and ``silhouettes`` are empty.
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
        Rows the dynamics runs on, and the silhouettes are taken on. Of
        these the dynamics moves a subsample (the others are passive
        tracers, which its count does not read), where a step on all would
        pass 2e9 multiply-adds
        (``SelfAttentionDynamics(max_samples="auto")``: 2000 rows of more
        than 500 features).

    Returns
    -------
    ClusterCount
        The chosen K, the plateau lengths by K, the silhouettes compared
        and the fitted estimator.

    Raises
    ------
    InvalidParameterError
        A ValueError and a TypeError, before any work: if ``estimator`` is
        not an :class:`AttentionClustering`, a parameter of ``estimator`` is
        invalid, with the estimator's message, or ``init`` is an array
        (several K are fitted); if ``n_clusters_range`` holds no positive
        integer, ``max_samples`` is not an integer >= 1, ``beta`` is not
        positive, or ``min_cluster_size`` is neither an integer >= 1 nor a
        fraction in (0, 1).
    ValueError
        Before any work: if ``n_clusters_range`` holds no K of at most
        n_samples, or on Dask
        X draws more rows than a fit brings into memory (2^20: every row of
        positive weight when there are at most ``max_samples``, else ``2
        max_samples + 16``; no rows are drawn where the range holds one K
        of at most n_samples); on X the estimator refuses.

    Warns
    -----
    ConvergenceWarning
        When the dynamics found no plateau: its own diagnosis (and advice),
        and the K read from the state it took, or one cluster where that state
        holds more than half of the tokens apart.
    UserWarning
        When the one-cluster test could not be made: the fit at K = 1
        refused X's rows, whose spread about one centre float64 cannot
        invert (rows near its smallest numbers).
    """
    if not isinstance(estimator, AttentionClustering):
        raise InvalidParameterError(
            f"estimator must be an AttentionClustering, got {type(estimator).__name__}."
        )
    params = estimator.get_params(deep=False)
    if not isinstance(params["init"], str):
        raise InvalidParameterError(
            "choose_n_clusters fits several numbers of clusters: the estimator's init must be "
            f'"spectral" or "random", not an array of shape {np.shape(params["init"])}.'
        )
    # Its options, before the estimator reads X (the rows of Dask X are read
    # by the dynamics' draw of tokens); the range goes on as the list checked,
    # since an iterator is read once.
    n_clusters_range = check_choice(n_clusters_range, beta, min_cluster_size, max_samples)
    # The estimator's own n_clusters="auto" fit, with these options.
    model = clone(estimator).set_params(n_clusters="auto")
    K, scores, silhouettes = model._fit(
        X,
        sample_weight,
        choice=dict(
            n_clusters_range=n_clusters_range,
            beta=beta,
            min_cluster_size=min_cluster_size,
            max_samples=max_samples,
        ),
    )
    # Its fit is the fit at K: as AttentionClustering(n_clusters=K).fit(X) leaves it.
    model.set_params(n_clusters=K)
    return ClusterCount(n_clusters=K, scores=scores, silhouettes=silhouettes, model=model)
