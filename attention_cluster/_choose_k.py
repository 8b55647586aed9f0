"""Choosing the number of clusters: the dynamics' clock, then the silhouette of its neighbours.

``count_clusters`` reads a first K off :class:`SelfAttentionDynamics` run on
(a subsample of) the rows: the number of clusters of the dynamics' longest
plateau (``docs/math.md`` section 8, "Stopping time"; the curve ``scores``
gives, for each K, the longest run of steps that held K clusters). Groups of
fewer than ``min_cluster_size`` of the rows are outliers, not clusters, and
are not counted (section 8, "Clusters"). The dynamics is often one off on
real data, so :class:`AttentionClustering` is fitted at that K and at its
two neighbours, and each fit's labels of the dynamics' rows are scored by
their silhouette on the sphere (Rousseeuw, J. Comput. Appl. Math. 1987,
with the cosine distance, the dynamics' geometry): a neighbour replaces the
dynamics' K only when its silhouette is higher by more than
``SILHOUETTE_MARGIN`` (when the dynamics' K has none, K = 1, the
neighbour with a defined silhouette). Last, the rows may hold no clusters
at all: the dynamics of an isotropic blob's directions still forms
metastable groups, and a silhouette needs two clusters, so K = 1 is tested
apart, by BIC, when the fits have an EM mixture: the fit at 1 replaces the
chosen one when its BIC is not higher (BIC, which keeps too many clusters
on real data, then finds no evidence for more than one). The fit at the
chosen K is the one kept (a range of one K leaves nothing to choose: the
fit at it alone, with none of these stages). Sample weights make the dynamics' rows weighted
tokens and weigh the silhouette (a row of weight w standing for w / w_min
rows). The choice
and its peers are measured on labelled real data and on the paper's
mixtures in ``benchmarks/choose_k.py`` (the "Choosing K" page).
"""

import functools
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import assert_all_finite, check_random_state

from ._dynamics import (
    check_min_cluster_size,
    counting_dynamics,
    token_weights,
)
from ._passes import (
    dense,
    densified_bytes,
    entry_squares,
    gram_matrix,
    left_times,
    row_squared_norms,
    rows_times,
    times_power_of_two,
    unit_rows,
)
from ._plan import (
    DEFAULT_TUNING,
    ScaleError,
    bic_penalty,
    fit_plan,
    information_criterion,
    mean_dominates,
    mean_share,
    predict_rule,
)
from ._scale import gram_coordinates, orthonormal
from ._validation import (
    InvalidParameterError,
    check_count,
    check_positive,
    deferred_warnings,
    plain_number,
    quiet_finite_check,
    replay,
    stored_values,
    warn,
)

# Inverse temperature of the dynamics on the unit sphere (its default).
DYNAMICS_BETA = 10.0
# Groups holding fewer than this fraction of the rows are not clusters.
MIN_CLUSTER_SIZE = 0.02
# The dynamics costs O(m^2 d) per step on m rows: it runs on a subsample.
MAX_SAMPLES = 2000
# Largest K tried by default (at most the number of rows).
MAX_CLUSTERS = 50
# A neighbour of the dynamics' K is chosen only when its mean silhouette is
# higher by more than this (on the silhouette's scale of -1 to 1): chosen on
# the tuning part of the real-data panel of benchmarks/choose_k.py, whose
# page lists the silhouettes compared.
SILHOUETTE_MARGIN = 0.05


@dataclass(frozen=True)
class ClusterCount:
    """The outcome of :func:`choose_n_clusters`.

    Attributes
    ----------
    n_clusters : int
        The chosen number of clusters.
    scores : dict of int to int
        For each K of the range, the longest run of steps of the dynamics
        that held K clusters (0 for a K it never held); empty where the
        range held one K of at most n_samples (nothing to choose: no
        dynamics ran).
    silhouettes : dict of int to float or None
        The mean silhouette, on the sphere, of the fits at the dynamics' K
        and at its neighbours (the K compared); None where it is undefined
        (K = 1, or labels of fewer than 2 clusters); empty where the range
        held one K of at most n_samples (none compared).
    model : AttentionClustering
        The estimator fitted at ``n_clusters``.
    """

    n_clusters: int
    scores: dict
    silhouettes: dict
    model: object


@dataclass(frozen=True)
class FittedMixture:
    """A fit's EM mixture with what its free parameters depend on: whether
    each centroid has its own norm and whether the rows were centred."""

    mixture: object  #: SphericalMixture
    free_norms: bool
    centred: bool

    def bic(self, rows):
        """The mixture's BIC on ``rows`` (``_plan.information_criterion``)."""
        return information_criterion(rows, self.mixture, self.free_norms, self.centred, bic_penalty)


def plan_fit_at(rows, params, init):
    """``fit_at(k, centred=None)`` for :func:`count_clusters`: the fit plan at K = k.

    ``params`` are the estimator's (``n_clusters="auto"``), read once;
    ``centred`` (a bool) takes the place of ``center="auto"`` for a fit
    compared with one that centred or not. Returns ``(FitResult, LabelRule,
    FittedMixture or None)``.
    """

    def fit_at(k, centred=None):
        center = params.center
        if centred is not None and isinstance(center, str):
            center = centred  # center="auto": as the fit it is compared with
        if params.verbose:
            print(
                f"[AttentionClustering] n_clusters='auto': the fit at n_clusters={k}"
                + ("" if center is params.center else f", center={center}")
            )
        result = fit_plan(
            rows, SimpleNamespace(**{**vars(params), "n_clusters": k, "center": center}), init
        )
        rule = predict_rule(result.centers, result.mixture, result.mean, rows.dtype)
        mixture = None
        if result.mixture is not None:
            mixture = FittedMixture(result.mixture, bool(result.free_norms), result.centred)
        return result, rule, mixture

    return fit_at


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


def sphere_silhouette(tokens, labels, weights=None, *, normalised=False):
    """Mean silhouette of ``labels`` on the rows ``tokens`` with the cosine
    distance ``1 - <u_i, u_j>``, ``u = x / |x|`` (Rousseeuw 1987):

        s_i = (b_i - a_i) / max(a_i, b_i),

    a_i the mean distance from row i to the other rows of its cluster c,
    b_i the smallest mean distance to the rows of another cluster; s_i = 0
    for a row alone in its cluster. Both means are linear in u_i, so with
    the sums S_k = sum_{j in k} w_j u_j and the sizes n_k = sum_{j in k}
    w_j they cost O(m d K), not O(m^2 d):

        a_i = (n_c - 1 - <u_i, S_c> + |u_i|^2) / (n_c - 1),
        mean distance to cluster k != c = 1 - <u_i, S_k> / n_k,

    ``|u_i|^2`` being 1, or 0 for a zero row, and the score the mean of s_i
    with row i counted ``w_i`` times, ``sum_i w_i s_i / sum_i w_i``
    (``docs/math.md`` section 8, "The silhouette of a choice of K").
    ``weights`` are numbers of rows (``_dynamics.token_weights``): row i
    stands for ``w_i`` rows at its place, so integer weights give the
    silhouette of the repeated rows; None for one each (w_i = 1).

    None when the labels do not hold 2 to m - 1 clusters, m = sum_i w_i
    (the silhouette is then undefined). ``tokens`` may be sparse;
    ``normalised``: they are ``u`` already (``_passes.unit_rows``), as when
    several labellings of the same rows are compared
    (:func:`sphere_silhouettes`).
    """
    return sphere_silhouettes(tokens, [labels], weights, normalised=normalised)[0]


def sphere_silhouettes(tokens, labellings, weights=None, *, normalised=False):
    """:func:`sphere_silhouette` of each labelling of ``labellings`` on the
    same rows, which are read twice in all: once for the sums S_k of every
    labelling's clusters, stacked, once for the rows' inner products with
    them (2000 dense rows of 5000 centred TF-IDF columns, 80 MB, were read
    three times a labelling)."""
    m = tokens.shape[0]
    n_rows = m if weights is None else float(np.sum(weights))
    w = np.ones(m) if weights is None else weights
    # Each labelling's clusters 0..K-1, and its first row among the stacked sums.
    scored, first = [], 0
    for labels in labellings:
        _, labels = np.unique(labels, return_inverse=True)
        K = int(labels.max()) + 1
        defined = 2 <= K <= n_rows - 1
        scored.append((labels, K, first) if defined else None)
        first += K if defined else 0
    if first == 0:
        return [None] * len(scored)
    U = tokens if normalised else unit_rows(tokens)
    kept = [part for part in scored if part is not None]
    # Row at + k: labelling's cluster k, the weights of its rows (a dense
    # product: a sparse one read the rows once a labelling).
    members = np.zeros((first, m))
    for labels, _, at in kept:
        members[labels + at, np.arange(m)] = w
    sums = left_times(members, U, np.float64)
    all_cosines = np.asarray(U @ sums.T)
    self_cosine = row_squared_norms(U)
    rows = np.arange(m)
    scores = []
    for part in scored:
        if part is None:
            scores.append(None)
            continue
        labels, K, at = part
        counts = np.bincount(labels, weights=weights, minlength=K).astype(np.float64)
        cosines = all_cosines[:, at : at + K]
        own = counts[labels]
        a = (own - 1 - cosines[rows, labels] + self_cosine) / np.where(own > 1, own - 1, 1.0)
        others = 1.0 - cosines / counts
        others[rows, labels] = np.inf
        b = others.min(axis=1)
        top = np.maximum(a, b)
        s = np.where((own > 1) & (top > 0), (b - a) / np.where(top > 0, top, 1.0), 0.0)
        scores.append(float(np.mean(s)) if weights is None else float(weights @ s / n_rows))
    return scores


def choose_by_silhouette(k_dynamics, silhouettes, margin=SILHOUETTE_MARGIN):
    """The dynamics' K, or the neighbour whose silhouette beats it by more than ``margin``.

    ``silhouettes`` maps each K compared to its silhouette (None where
    undefined). With no silhouette at the dynamics' K (K = 1 always: a
    silhouette needs two clusters), the neighbour with the highest defined
    one, whatever its value, negative included; the dynamics' K when no
    neighbour has one.
    """
    own = silhouettes.get(k_dynamics)
    bar = -np.inf if own is None else own + margin
    better = {k: s for k, s in silhouettes.items() if s is not None and s > bar}
    return max(better, key=better.get) if better else k_dynamics


def _tokens(rows, size, rng):
    """``(tokens, weights)``: rows of the data, as given, for the dynamics,
    and the number of tokens each stands for (``_dynamics.token_weights``;
    None for one each).

    At most ``size`` rows of positive weight: all of them, with their
    weights (X's dtype; rows of weight zero left out, as absent). More:
    ``size`` distinct rows of positive weight drawn uniformly (float64),
    with their weights, as ``SelfAttentionDynamics`` subsamples its rows.

    A subsample draws each row independently, so it holds about ``size``
    rows, and none at times when ``size`` is small: ``size`` of a
    subsample of ``2 size + 16`` rows are taken, at random (fewer than
    ``size`` with probability below about ``exp(-size / 4 - 4)``).
    """
    if rows.n_weighted <= size:
        taken = rows.subsample(rng, size)
        # (Dask rows beyond what the client holds come back whole: drawn below.)
        if taken.n_samples <= size:
            tokens = taken.map_rows(_as_given).astype(rows.dtype, copy=False)
            return tokens, token_weights(taken.sample_weight, tokens)
    taken = rows.subsample(rng, 2 * size + 16)
    drawn, weights = taken.map_rows(_as_given), taken.sample_weight
    if drawn.shape[0] > size:
        keep = np.sort(rng.permutation(drawn.shape[0])[:size])
        drawn, weights = drawn[keep], None if weights is None else weights[keep]
    return drawn, token_weights(weights, drawn)


def _as_given(block):
    return block


def _unit_scaled(tokens):
    """The tokens divided by the power of two of their largest absolute
    entry (exact; the tokens themselves when they are all zero)."""
    peak = float(np.max(np.abs(stored_values(tokens)), initial=0.0))
    if peak == 0.0:
        return tokens
    # ldexp, not a division by _validation.peak_unit: float32 tokens near
    # float32's top have a power of two float32 cannot hold (2^128), which a
    # division would cast to infinity (and 2^-e itself leaves float64 for
    # tokens below about 1e-308).
    return times_power_of_two(tokens, -int(np.frexp(peak)[1]))


def _mean(tokens, weights):
    """The tokens' mean, each row counted ``weights[i]`` times (once when None)."""
    if weights is None:
        return np.asarray(tokens.mean(axis=0)).ravel()
    return np.asarray(tokens.T @ weights).ravel() / np.sum(weights)


def _centred_tokens(tokens, weights=None):
    """The tokens minus their mean (:func:`_mean`, two-pass), dense; for sparse tokens
    whose dense copy would exceed ``_CENTRED_TOKENS_BYTES``, m rows of R^r
    with the same inner products (:func:`_gram_rows`, r <= m): the dynamics
    and the silhouette read the tokens' inner products alone."""
    if densified_bytes(tokens) > _CENTRED_TOKENS_BYTES:
        return _gram_rows(tokens, weights)
    owned = sp.issparse(tokens)
    tokens = dense(tokens)
    mean = _mean(tokens, weights)
    if owned and np.result_type(tokens.dtype, mean.dtype) == tokens.dtype:
        # Sparse tokens' dense copy is centred in place: no second copy of
        # them all (80 MB of 2000 TF-IDF documents of 5000 words).
        centred = tokens
        centred -= mean
    else:
        centred = tokens - mean
    # Less the mean of the centred tokens, the first mean's rounding (a
    # two-pass mean): a column far from zero beside small ones kept ulps of
    # its magnitude, which dwarfed them (math.md section 7, "Centring or
    # not").
    centred -= _mean(centred, weights)
    return centred


def _gram_rows(tokens, weights):
    """Rows E of R^r, r <= m, whose inner products are those of the m
    tokens minus their mean: ``E E^T = C G C^T``.

    ``G = T T^T`` is the tokens' Gram matrix (m x m, from the sparse rows)
    and ``C = I - 1 p^T``, ``p = w / sum w`` (``1 / m`` each without
    weights), subtracts the mean, so ``C G C^T = G - g 1^T - 1 g^T + (p^T
    g) 1 1^T`` with ``g = G p``; E are its :func:`~attention_cluster._scale.gram_coordinates`
    (one zero column when every token is the mean): ``docs/math.md``
    section 8, "Centred tokens from their inner products".
    """
    m = tokens.shape[0]
    gram = gram_matrix(tokens)
    p = np.full(m, 1.0 / m) if weights is None else weights / np.sum(weights)
    g = gram @ p
    return gram_coordinates(gram - g[:, None] - g[None, :] + p @ g)


def _mean_sq(tokens, weights=None):
    """``||m||^2``, m the tokens' mean (:func:`_mean`)."""
    mean = _mean(tokens, weights)
    return float(mean @ mean)


def _moment_trace(tokens, weights=None):
    """``tr(M)``, M the tokens' second moment ``T^T W T / sum w`` (W = I
    without weights): their mean squared norm."""
    squares = entry_squares(tokens)
    if weights is None:
        return float(squares.sum()) / tokens.shape[0]
    return float(np.asarray(squares.sum(axis=1)).ravel() @ weights) / np.sum(weights)


def _moment_eigenvalues(tokens, weights=None):
    """The eigenvalues of the tokens' second moment ``T^T W T / sum w``
    (:func:`_moment_trace`), descending: the ``min(m, d)`` of the smaller of
    ``S^T S`` and ``S S^T``, ``S = W^(1/2) T`` (the others are zero)."""
    m, d = tokens.shape
    total = m
    if weights is not None:
        roots = np.sqrt(weights)
        tokens = rows_times(tokens, roots)
        total = np.sum(weights)
    gram = tokens.T @ tokens if d <= m else tokens @ tokens.T
    gram = dense(gram)
    return np.sort(np.linalg.eigvalsh(gram / total))[::-1]


def _rule_centres(tokens, weights, mean_sq, k):
    """``center="auto"``'s rule (``_plan.mean_dominates``) on the tokens at k
    clusters, ``||m||^2 > center_ratio lambda_k(M)``, M their second moment
    (:func:`_moment_eigenvalues`), ``mean_sq`` ``||m||^2``.

    Its whole spectrum costs the eigenvalues of a ``min(m, d)``-square
    matrix (0.4 s for 2000 TF-IDF documents, as long as the dynamics' count),
    where a lower bound of lambda_k mostly decides: the Ritz values theta_1
    >= theta_2 >= ... of M on any orthonormal block Q, the eigenvalues of
    ``Q^T M Q``, are at most M's (Cauchy's interlacing: theta_k <=
    lambda_k), so ``||m||^2 <= center_ratio theta_k`` (theta_k > 0) is the
    rule's "no" exactly. The block, of k + ``_RITZ_EXTRA`` columns from a
    seeded Gaussian start, takes up to ``_RITZ_ITERATIONS`` steps of
    subspace iteration (Halko, Martinsson and Tropp, 2011, Alg. 4.4), fewer
    where theta_k stalls, on the smaller of ``S S^T`` and ``S^T S``, ``S =
    W^(1/2) T`` (two products with the tokens a step, sparse ones kept
    sparse); the full spectrum
    decides where the bound has not (the mean dominates, or nearly), and
    where the block is not small beside ``min(m, d)`` (``docs/math.md``
    section 7, "Centring or not").
    """
    m, d = tokens.shape
    size, block = min(m, d), k + _RITZ_EXTRA
    if 2 * block <= size:
        S, total = tokens, m
        if weights is not None:
            S, total = rows_times(tokens, np.sqrt(weights)), np.sum(weights)
        # The block on the smaller side: Q^T S S^T Q = B^T B with B = S^T Q
        # (m <= d), or Q^T S^T S Q with B = S Q.
        inner, outer = (S.T, S) if m <= d else (S, S.T)
        bound = DEFAULT_TUNING.center_ratio
        Q = orthonormal(np.random.RandomState(0).standard_normal((size, block)))
        previous = 0.0
        for _ in range(_RITZ_ITERATIONS):
            B = dense(inner @ Q)
            kth = float(np.linalg.eigvalsh(B.T @ B / total)[-k])
            if kth > 0.0 and mean_sq <= bound * kth:
                return False
            if kth <= (1.0 + _RITZ_STALL) * previous:
                # Converged below the bound's reach: the spectrum decides.
                break
            previous = kth
            Q = orthonormal(dense(outer @ B))
    return mean_dominates(mean_sq, _moment_eigenvalues(tokens, weights), k, DEFAULT_TUNING)


# Columns beyond k, and steps of subspace iteration, of the block whose
# Ritz values bound lambda_k from below (_rule_centres): on the choosing-K
# page's TF-IDF documents one step decides. It stops where theta_k grew by
# less than _RITZ_STALL in a step.
_RITZ_EXTRA = 10
_RITZ_ITERATIONS = 10
_RITZ_STALL = 1e-3


# Largest dense copy of sparse tokens that the dynamics centres (2000 rows
# of up to 8192 features); beyond it, rows with the centred tokens' inner
# products (_gram_rows).
_CENTRED_TOKENS_BYTES = 2000 * 8192 * 8


def check_choice(n_clusters_range, beta, min_cluster_size, max_samples):
    """Refuse invalid options of :func:`count_clusters` before any work;
    returns ``n_clusters_range``'s K, sorted and distinct (None: the default range)."""
    check_positive(beta, "beta")
    check_min_cluster_size(min_cluster_size)
    check_positive(max_samples, "max_samples", numbers.Integral, min_val=1, strict=False)
    if n_clusters_range is None:
        return None
    try:
        ks = sorted({check_count(k, "K") for k in n_clusters_range})
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"n_clusters_range must hold positive integers, got {n_clusters_range!r}."
        ) from None
    if not ks:
        raise InvalidParameterError(f"n_clusters_range must hold positive integers, got {ks!r}.")
    return ks


def count_clusters(
    rows,
    fit_at,
    *,
    random_state=None,
    n_threads=None,
    n_clusters_range=None,
    beta=DYNAMICS_BETA,
    min_cluster_size=MIN_CLUSTER_SIZE,
    max_samples=MAX_SAMPLES,
    center="auto",
    say=None,
):
    """K, the plateau lengths by K, the silhouettes compared and the fit at K.

    Runs ``SelfAttentionDynamics(beta=beta, min_cluster_size=min_cluster_size)``,
    in float32 (``docs/math.md`` section 8, "The count in float32"),
    on ``max_samples`` rows (all when there are fewer; with sample weights,
    all rows of positive weight as weighted tokens when there are at most
    ``max_samples``, else ``max_samples`` of them drawn uniformly, with
    their weights: :func:`_tokens`), centred with ``center=True`` (about their weighted
    mean; wide sparse rows as rows with the centred rows' inner products,
    :func:`_centred_tokens`). With ``"auto"``, where the rows' mean carries more than
    ``share_to_retry`` of their second moment (``_plan.mean_share``), it
    counts on the centred rows too, and that count is kept when
    ``center="auto"``'s rule (``_plan.mean_dominates``), read on these rows
    at that count, would centre them, or when the rows as given gave one
    cluster and the centred rows more: a common mean draws every row's
    direction towards its own, and the dynamics on the rows as given then
    counts the groups in one narrow cap (or one group: TF-IDF documents
    sharing their common words, whose mean does not dominate the second
    moment as that rule reads it). In that last case K = 2, the choice one
    group leads to, joins the K compared by their silhouettes, and fits
    without a mixture (no one-cluster test below) keep it: the centred
    rows of a blob with no clusters also hold metastable groups. Its
    number of clusters at the end of the longest plateau of its clock
    (``docs/math.md`` section 8), clipped
    to ``n_clusters_range`` (if outside, the K of the range held longest),
    is the dynamics' K. ``fit_at(k, centred=None)`` returns ``(fit, rule,
    mixture)``, a fit at k, its labels' rule (``_passes.LabelRule``, of
    ``_plan.predict_rule``) and its :class:`FittedMixture` (None without the
    EM refinement), centred as ``centred`` says where ``center="auto"``
    (None: by its rule); it is called at the dynamics' K and at its neighbours in
    the range, and :func:`choose_by_silhouette` picks among them by the
    silhouette of each rule's labels of the dynamics' rows (weighted as
    its tokens): a neighbour only when its silhouette is higher by more
    than ``SILHOUETTE_MARGIN``, or, when the dynamics' K has none (K = 1),
    the neighbour with the highest defined one. When the range holds 1,
    the choice is more and its fit has a mixture, the fit at 1 is kept if
    its BIC on ``rows`` is at most the choice's: no evidence of clusters
    (``math.md`` section 8, "One cluster or more"); without a mixture
    (``refine=None``, PSGD's default) that test is not made; the fit at 1
    is centred where the choice's fit is (the same model either way, but
    rows far from the origin lose their spread uncentred), and, where it
    is kept, fitted again as ``center="auto"`` fits one cluster
    (uncentred) for the fit returned; where the fit
    at 1 refuses the rows' scale (``_plan.ScaleError``: rows near float64's
    smallest numbers, whose spread about one centre is below what float64
    inverts, though the fit at the choice holds its own) it cannot be, and
    a UserWarning says so. When the
    dynamics finds no plateau, its ConvergenceWarning's diagnosis is
    warned again, with the K read from the state it took, or one cluster
    where that state holds more than half of the tokens apart (no structure
    the dynamics resolved). ``rows`` are
    pass-layer rows (``_passes.rows_from``) of any kind; ``say``, where
    given, is called with a line naming each stage (the estimator's
    verbose output).

    A range holding one K of at most n, the rows of positive weight (its
    other K, if any, above n: a fit needs as many rows as clusters), leaves
    nothing to choose: that K is returned with ``fit_at(K)``'s fit, its
    warnings the caller's as they arise, and empty scores and silhouettes;
    no tokens are drawn, no dynamics runs, no silhouette is taken and no
    fit at 1 is compared, so that the fit is ``n_clusters=K``'s.

    Returns
    -------
    n_clusters : int
    scores : dict of int to int
    silhouettes : dict of int to float or None
    fit : the ``fit_at(n_clusters)`` fit
    """
    ks = check_choice(n_clusters_range, beta, min_cluster_size, max_samples)
    # Python numbers (plain_number: an np.int8 max_samples' 2 m + 16 overflowed).
    beta, min_cluster_size, max_samples = map(plain_number, (beta, min_cluster_size, max_samples))
    say = say or (lambda line: None)
    # Rows of weight zero are as absent: n counts the others.
    n = rows.n_weighted
    if ks is None:
        ks = list(range(1, min(n, MAX_CLUSTERS) + 1))
    # A fit needs at least as many rows as clusters.
    fitted = [k for k in ks if k <= n]
    if len(fitted) == 1:
        # Nothing to choose: the fit at the one K, as n_clusters=K fits it
        # (no draw from random_state, no deferred warnings).
        say(
            f"n_clusters={fitted[0]} is the one K of the range of at most n_samples={n} "
            "(the rows of positive weight): nothing to choose, no dynamics"
        )
        fit, _, _ = fit_at(fitted[0])
        return fitted[0], {}, {}, fit
    say("the self-attention dynamics counts the clusters")
    # The rows the tokens' draw brings into memory (_tokens): every row of
    # positive weight, or a subsample of 2 max_samples + 16 to take them from.
    drawn = n if n <= max_samples else 2 * max_samples + 16
    if drawn > rows.most_rows_in_memory:
        raise ValueError(
            f"max_samples={max_samples} of the {n} rows of positive weight draws {drawn} rows, "
            f"more than a fit brings into memory from Dask input ({rows.most_rows_in_memory}): "
            "the dynamics holds its tokens in memory. Pass a smaller max_samples."
        )
    if ks[0] > n:
        raise ValueError(
            f"n_clusters_range must hold a K of at most n_samples={n} (the rows of positive "
            f"weight), got {ks!r}."
        )
    ks = fitted
    rng = check_random_state(random_state)
    tokens, weights = _tokens(rows, max_samples, rng)
    # Dask rows are checked by their passes, of which this draw is the
    # first: its rows, with the fit's message (the rest by the fit's first pass).
    with quiet_finite_check():
        assert_all_finite(stored_values(tokens), input_name="X")
    # The dynamics, the mean's share and center="auto"'s rule read the
    # tokens at a power of two near their largest entry (exactly the
    # directions of the tokens as given, at any magnitude: their squares
    # neither overflow nor underflow); the fits' labels read them as given.
    scaled = _unit_scaled(tokens)
    # A seed of the dynamics' own subsample (above 500 features it
    # integrates fewer than max_samples tokens), never NumPy's global state.
    seed = rng.randint(np.iinfo(np.int32).max)
    # The dynamics' number of tokens (rows counted by their weights).
    m = tokens.shape[0] if weights is None else float(np.sum(weights))
    count = functools.partial(_dynamics_count, beta, min_cluster_size, n_threads, seed, weights)
    seen, dynamics, unsettled, merged, prefit = _count_given_or_centred(
        count, scaled, weights, center, ks, fit_at
    )
    lengths = plateau_lengths(dynamics.n_clusters_path_, m)
    scores = {k: lengths.get(k, 0) for k in ks}
    K = _read_count(
        dynamics, unsettled, scores, m, weights, tokens.shape[0], beta, min_cluster_size
    )
    fits, mixtures, labellings, held = {}, {}, {}, {}
    # A silhouette needs 2 to m - 1 clusters of the m tokens it is taken on.
    for k in dict.fromkeys((K, K - 1, K + 1, *((2,) if merged else ()))):
        if k in scores and k <= n and (k == K or 2 <= k < m):
            # Only the warnings of the fit kept reach the caller.
            if k in prefit:
                (fits[k], rule, mixtures[k]), held[k] = prefit[k]
            else:
                with deferred_warnings() as held[k]:
                    fits[k], rule, mixtures[k] = fit_at(k)
            labellings[k] = rule.labels_of(tokens)
    # The fits' labels scored together: the rows are read twice for them all.
    silhouettes = dict(
        zip(
            labellings,
            sphere_silhouettes(seen, list(labellings.values()), weights, normalised=True),
        )
    )
    K = choose_by_silhouette(K, silhouettes)
    if merged and mixtures[K] is None and 2 in fits:
        # Fits without a mixture have no one-cluster test to guard the
        # centred count against a blob's metastable groups: the choice one
        # group on the rows as given leads to.
        K = 2
    if K > 1 and 1 in scores and mixtures[K] is not None:
        K = _test_one_cluster(K, rows, fits, mixtures, held, center, fit_at)
    replay(held[K])
    return K, scores, silhouettes, fits[K]


def _dynamics_count(beta, min_cluster_size, n_threads, seed, weights, rows_seen, owned=False):
    """``(directions, dynamics, warnings)``: the dynamics' count of
    :func:`count_clusters` (its options first) on ``rows_seen``, and those
    rows as unit rows (the silhouettes' rows); ``owned``: rows made here and
    read no more, made unit rows in place."""
    directions = unit_rows(rows_seen, copy=not owned)
    dynamics = counting_dynamics(beta, min_cluster_size, n_threads, seed)
    with deferred_warnings() as held:
        dynamics.fit(directions, sample_weight=weights)
    return directions, dynamics, held


def _count_given_or_centred(count, scaled, weights, center, ks, fit_at):
    """The count :func:`count_clusters` reads, on the tokens as given or centred.

    Returns ``(seen, dynamics, unsettled, merged, prefit)``: the rows the
    kept count ran on, as unit rows; its dynamics and the messages of its
    ConvergenceWarnings (no plateau found; its other warnings are dropped);
    whether the rows as given gathered into one group where the centred
    ones held more (``merged``); and the fits made to decide, by K
    (``((fit, rule, mixture), warnings)``), for the comparisons.
    """
    given_centre = center is True or center is np.True_
    prefit = {}
    mean_sq = _mean_sq(scaled, weights)
    # With center="auto", the centred rows only where the mean may dominate.
    centred = (
        _centred_tokens(scaled, weights)
        if given_centre
        or (
            isinstance(center, str)
            and mean_share(mean_sq, _moment_trace(scaled, weights)) > DEFAULT_TUNING.share_to_retry
        )
        else None
    )
    # seen: the rows the dynamics counted on, as unit rows.
    # (The centred rows are counted once, and become their unit rows.)
    seen, dynamics, held = count(centred, owned=True) if given_centre else count(scaled)
    merged = False
    if not given_centre and centred is not None:
        # Counted again on the centred rows; kept if the fit at that count
        # would centre the rows, or if the rows as given gathered into one
        # group and the centred ones into more: a component common to every
        # row (the shared words of TF-IDF documents) draws all directions
        # into one cap without dominating the second moment as center="auto"'s
        # rule reads it. (A blob with no clusters also gives more groups
        # once centred, metastable ones: K = 2, the choice one group leads
        # to, is then compared too, in count_clusters.)
        other = count(centred, owned=True)
        k_centred = int(other[1].n_clusters_)
        merged = int(dynamics.n_clusters_) == 1 and k_centred > 1
        if merged or _rule_centres(scaled, weights, mean_sq, k_centred):
            seen, dynamics, held = other
        elif k_centred != int(dynamics.n_clusters_) and k_centred in ks:
            # center="auto"'s other rule: the fit at the centred count centres
            # the rows where the rows as given lose a cluster there. That fit
            # is kept for the comparisons.
            with deferred_warnings() as prefit_held:
                prefit = {k_centred: (fit_at(k_centred), prefit_held)}
            if prefit[k_centred][0][0].centred:
                seen, dynamics, held = other
    unsettled = [message for message, category in held if issubclass(category, ConvergenceWarning)]
    return seen, dynamics, unsettled, merged, prefit


def _read_count(dynamics, unsettled, scores, m, weights, n_drawn, beta, min_cluster_size):
    """The dynamics' K clipped to the range (``scores``' K): the K of the
    range held longest when it falls outside; where the dynamics found no
    plateau (``unsettled``: its ConvergenceWarnings' messages), one cluster
    when most of the ``m`` tokens it moved are still apart, and its
    diagnosis warned again with the K read (naming ``n_drawn``, the number of
    rows drawn as tokens)."""
    K = int(dynamics.n_clusters_)
    if K not in scores:
        K = max(scores, key=lambda k: (scores[k], -abs(k - K)))
    # The tokens that moved: a subsample of them where a step on all would
    # pass the dynamics' work bound (43 of 2000 dense rows of 2^20
    # features, of which 42 groups were fitted as the count, at 10 GB).
    moving = dynamics.subsample_indices_
    moved = m
    if moving is not None:
        moved = len(moving) if weights is None else float(np.sum(weights[moving]))
    if unsettled and int(dynamics.n_clusters_) > moved / 2 and 1 in scores:
        # No plateau, and most tokens still apart (the dynamics' own count,
        # before any range clips it): no structure the dynamics resolved
        # (rows of noise fewer than their features: K = m - 1, and a BIC of
        # more parameters than rows kept it); one cluster, compared with its
        # neighbour K = 2 by count_clusters.
        K = 1
    if unsettled:
        k_dynamics = int(dynamics.n_clusters_)
        if K == k_dynamics:
            taken = f"K = {K}"
        elif K == 1 and k_dynamics > moved / 2:
            taken = f"K = {k_dynamics} of {moved:g} tokens, most still apart: one cluster instead"
        else:
            taken = (
                f"K = {k_dynamics}, outside n_clusters_range: the K of the range held "
                f"longest, {K}, instead"
            )
        warn(
            f"The self-attention dynamics that chooses n_clusters, SelfAttentionDynamics(beta="
            f"{beta!r}, min_cluster_size={min_cluster_size!r}) on {n_drawn} rows, found "
            f"no plateau: {unsettled[0]} n_clusters was read from the state it took ({taken}), "
            "then compared with its neighbours by their silhouettes (beta and "
            "min_cluster_size are parameters of choose_n_clusters).",
            ConvergenceWarning,
        )
    return K


def _test_one_cluster(K, rows, fits, mixtures, held, center, fit_at):
    """K, or 1 where the fit at one cluster has a BIC on ``rows`` at most the
    fit at K's (``math.md`` section 8, "One cluster or more"); the fit at 1
    (and its warnings) joins ``fits``, ``mixtures`` and ``held``."""
    if 1 not in fits:
        try:
            with deferred_warnings() as held[1]:
                # Centred as the choice's fit: at K = 1, center="auto"'s
                # rule never centres (lambda_1 holds ||m||^2), and rows
                # far from the origin (1e7 times their spread) then fit
                # one cluster at the variance floor of their norm.
                fits[1], _, mixtures[1] = fit_at(1, centred=mixtures[K].centred)
        except ScaleError as error:
            # No fit at 1 to compare: the choice stands untested, and
            # the caller is told so (rows of one cluster would keep it).
            warn(
                f"n_clusters={K} was not tested against one cluster: the fit at "
                f"n_clusters=1 refused X's rows: {error} The choice may hold more "
                "clusters than the rows do.",
                UserWarning,
            )
    if 1 in fits and mixtures[1].bic(rows) <= mixtures[K].bic(rows):
        K = 1
        if isinstance(center, str) and mixtures[1].centred:
            # The fit returned is n_clusters=1's, which center="auto"
            # leaves uncentred (the model of one direction from the
            # origin), as the caller fitting it would: the centred one
            # was the test's.
            with deferred_warnings() as held[1]:
                fits[1], _, mixtures[1] = fit_at(1)
    return K


def plot_n_clusters_scores(scores, n_clusters=None, ax=None):
    """Plot the criterion's curve: the plateau length of each K.

    Parameters
    ----------
    scores : dict of int to int or float
        ``AttentionClustering(n_clusters="auto").fit(X).n_clusters_scores_``,
        or ``choose_n_clusters(...).scores`` (empty, and refused, where the
        range held one K: no dynamics ran, there is no curve).
    n_clusters : int, default=None
        The chosen K, marked on the curve.
    ax : matplotlib Axes, default=None
        Where to draw; a new figure's axes by default.

    Returns
    -------
    ax : matplotlib Axes

    Raises
    ------
    InvalidParameterError
        If ``scores`` is not a non-empty mapping with integer keys, or
        ``n_clusters`` is not an integer >= 1 (a ValueError and a TypeError).
    """
    if not isinstance(scores, Mapping) or not scores:
        raise InvalidParameterError(
            "scores must be a non-empty mapping of K to its score, such as "
            "n_clusters_scores_ or choose_n_clusters(...).scores (empty where the range held "
            f"one K: no dynamics ran); got {type(scores).__name__}."
        )
    if not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) for k in scores):
        raise InvalidParameterError("scores' keys must be the integers K.")
    if n_clusters is not None:
        n_clusters = check_count(n_clusters, "n_clusters")
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
