"""Choosing the number of clusters by the self-attention dynamics' clock.

``choose_n_clusters`` reads K off :class:`SelfAttentionDynamics` run on (a
subsample of) the rows, then fits :class:`AttentionClustering` at that K.
The dynamics' number of clusters along its steps is a staircase of
metastable states; the state it clusters is the last of the longest plateau
(``docs/math.md`` section 8, "Stopping time"), and the plateau's length is
the criterion: the curve ``scores`` gives, for each K, the longest run of
steps that held K clusters. Groups of fewer than ``min_cluster_size`` of the
rows are outliers, not clusters, and are not counted (section 8,
"Clusters"). The choice and its peers are measured on labelled real data and
on the paper's mixtures in ``benchmarks/choose_k.py`` (the "Choosing K"
page).
"""

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ._dynamics import SelfAttentionDynamics
from ._passes import rows_from
from ._validation import check_positive, warn

# Inverse temperature of the dynamics on the unit sphere (its default).
DYNAMICS_BETA = 10.0
# Groups holding fewer than this fraction of the rows are not clusters.
MIN_CLUSTER_SIZE = 0.02
# The dynamics costs O(m^2 d) per step on m rows: it runs on a subsample.
MAX_SAMPLES = 2000
# Largest K tried by default (at most the number of rows).
MAX_CLUSTERS = 50


@dataclass(frozen=True)
class ClusterCount:
    """The outcome of :func:`choose_n_clusters`.

    Attributes
    ----------
    n_clusters : int
        The chosen number of clusters.
    scores : dict of int to int
        For each K of the range, the longest run of steps of the dynamics
        that held K clusters (0 for a K it never held).
    model : AttentionClustering
        The estimator fitted at ``n_clusters``.
    """

    n_clusters: int
    scores: dict
    model: object


def plateau_lengths(path, n_tokens):
    """Longest run of each count along a path of numbers of clusters.

    The initial state, where no tokens have met (``n_tokens`` clusters), is
    not a plateau (``docs/math.md`` section 8, "Stopping time").
    """
    lengths, run, previous = {}, 0, None
    for count in np.asarray(path).tolist():
        run = run + 1 if count == previous else 1
        previous = count
        if count < n_tokens:
            lengths[count] = max(lengths.get(count, 0), run)
    return lengths


def _tokens(rows, size, rng):
    """At most ``size`` rows of the data, as given, for the dynamics: distinct
    rows drawn uniformly (all of them when there are fewer), or, with sample
    weights, drawn in proportion to their weights (float64)."""
    if rows.sample_weight is None:
        return rows.subsample(rng, size).map_rows(_as_given)
    state = np.array([rng.randint(1, np.iinfo(np.int64).max)], dtype=np.uint64)
    return rows.draw(state, np.empty((min(size, rows.n_samples), rows.n_features)))


def _as_given(block):
    return block


def count_clusters(
    rows,
    *,
    random_state=None,
    n_threads=None,
    n_clusters_range=None,
    beta=DYNAMICS_BETA,
    min_cluster_size=MIN_CLUSTER_SIZE,
    max_samples=MAX_SAMPLES,
):
    """K and the plateau lengths by K, read off the dynamics on (a subsample of) ``rows``.

    Runs ``SelfAttentionDynamics(beta=beta, min_cluster_size=min_cluster_size)``
    on at most ``max_samples`` rows; its number of clusters at the end of
    the longest plateau of its clock is K (``docs/math.md`` section 8),
    clipped to ``n_clusters_range`` (if outside, the K of the range held
    longest). ``rows`` are pass-layer rows (``_passes.rows_from``) of any kind.
    """
    check_positive(max_samples, "max_samples", numbers.Integral, min_val=1, strict=False)
    n = rows.n_samples
    if n_clusters_range is None:
        ks = list(range(1, min(n, MAX_CLUSTERS) + 1))
    else:
        ks = sorted({int(k) for k in n_clusters_range})
    if not ks or ks[0] < 1:
        raise ValueError(f"n_clusters_range must hold positive integers, got {ks!r}.")
    tokens = _tokens(rows, max_samples, check_random_state(random_state))
    dynamics = SelfAttentionDynamics(
        beta=beta, min_cluster_size=min_cluster_size, n_threads=n_threads
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        dynamics.fit(tokens)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        warn(
            "the self-attention dynamics that chooses n_clusters did not settle on a plateau "
            "within its steps; n_clusters is read from its last state.",
            ConvergenceWarning,
        )
    lengths = plateau_lengths(dynamics.n_clusters_path_, tokens.shape[0])
    scores = {k: lengths.get(k, 0) for k in ks}
    K = int(dynamics.n_clusters_)
    if K not in scores:
        K = max(scores, key=lambda k: (scores[k], -abs(k - K)))
    return K, scores


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
    """Choose K by the dynamics' longest plateau, and fit the estimator at K.

    :func:`count_clusters` on X's rows, then a clone of ``estimator`` with
    ``n_clusters=K`` fitted on X.

    Parameters
    ----------
    X : {array-like, sparse matrix}, dask array or dask DataFrame of shape (n_samples, n_features)
        Training data.
    estimator : AttentionClustering
        Its parameters (other than ``n_clusters``) are those of the fit at K;
        its ``random_state`` draws the subsample.
    n_clusters_range : iterable of int, default=None
        The K allowed; by default 1 to ``min(n_samples, 50)``.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the rows: the subsample is drawn in proportion to them.
    beta : float, default=10.0
        Inverse temperature of the dynamics.
    min_cluster_size : float, default=0.02
        Fraction of the subsample's rows below which a group is not a cluster.
    max_samples : int, default=2000
        Rows the dynamics runs on.

    Returns
    -------
    ClusterCount
        The chosen K, the plateau lengths by K and the fitted estimator.
    """
    model = clone(estimator)
    params = model.get_params(deep=False)
    with rows_from(model, X, reset=True, sample_weight=sample_weight) as rows:
        K, scores = count_clusters(
            rows,
            random_state=params.get("random_state"),
            n_threads=params.get("n_threads"),
            n_clusters_range=n_clusters_range,
            beta=beta,
            min_cluster_size=min_cluster_size,
            max_samples=max_samples,
        )
    model.set_params(n_clusters=K).fit(X, sample_weight=sample_weight)
    return ClusterCount(n_clusters=K, scores=scores, model=model)


def plot_n_clusters_scores(scores, n_clusters=None, ax=None):
    """Plot the criterion's curve: the plateau length of each K.

    Parameters
    ----------
    scores : dict of int to float
        ``AttentionClustering(n_clusters="auto").fit(X).n_clusters_scores_``,
        or ``choose_n_clusters(...).scores``.
    n_clusters : int, default=None
        The chosen K, marked on the curve.
    ax : matplotlib Axes, default=None
        Where to draw; a new figure's axes by default.

    Returns
    -------
    ax : matplotlib Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        ax = plt.figure(figsize=(5, 3)).gca()
    ks = sorted(scores)
    ax.plot(ks, [scores[k] for k in ks], "o-", color="C0")
    if n_clusters is not None:
        ax.axvline(n_clusters, color="C3", linestyle="--", label=f"chosen K = {n_clusters}")
        ax.legend()
    ax.set_xlabel("number of clusters K")
    ax.set_ylabel("longest plateau (steps)")
    return ax
