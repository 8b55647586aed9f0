"""Users' data as it comes: sparse input, a common mean, bad rows, high dimension.

The sparse fit is compared with the dense fit of the same matrix; the
centring rule, the warnings and the principal-subspace path are checked on
small data with fixed seeds.
"""

import warnings
from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import adjusted_rand_score

import attention_cluster._plan as _plan
import attention_cluster._scale as _scale
from attention_cluster import AttentionClustering
from attention_cluster._passes import DenseRows, SparseRows
from attention_cluster._scale import (
    BASIS_ROWS,
    largest_sine,
    orthonormal,
    principal_basis,
    sine_at_most,
)
from attention_cluster.datasets import make_corpus, make_embeddings, make_mixture
from attention_cluster.metrics import centroid_distance


def _sparse_mixture(seed, n=800, d=12, K=3):
    X, y, _ = make_mixture(n, d, K, noise=0.2, random_state=seed)
    X[np.abs(X) < 0.15] = 0.0
    return X, sp.csr_matrix(X), y


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("center", [False, True])
def test_sparse_fit_equals_the_dense_fit(fmt, center, global_random_seed):
    X, S, _ = _sparse_mixture(global_random_seed)
    S = S.asformat(fmt)
    dense = AttentionClustering(3, center=center, random_state=0).fit(X)
    sparse = AttentionClustering(3, center=center, random_state=0).fit(S)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, atol=1e-8)
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    np.testing.assert_array_equal(sparse.predict(S), dense.predict(X))
    np.testing.assert_allclose(sparse.transform(S), dense.transform(X), atol=1e-7)
    assert sparse.score(S) == pytest.approx(dense.score(X), rel=1e-9)


def test_sparse_psgd_draws_the_dense_rows(global_random_seed):
    X, S, _ = _sparse_mixture(global_random_seed)
    dense = AttentionClustering(3, solver="psgd", max_iter=300, random_state=0).fit(X)
    sparse = AttentionClustering(3, solver="psgd", max_iter=300, random_state=0).fit(S)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, atol=1e-8)


def test_score_and_transform_follow_their_formulas(global_random_seed):
    X, _, _ = _sparse_mixture(global_random_seed)
    X = X + 2.0
    model = AttentionClustering(3, center=True, random_state=0).fit(X)
    Y = X - model.mean_
    U = model.cluster_centers_.T
    M = Y.T @ Y / len(Y) / model.scale_**2
    T = model.temperature_ * 3 * (Y @ U) @ U.T @ M
    np.testing.assert_allclose(model.transform(X), T, rtol=1e-8, atol=1e-10)
    assert model.score(X) == pytest.approx(-np.mean(np.sum((Y - T) ** 2, axis=1)), rel=1e-9)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_sparse_nan_and_inf_get_the_dense_errors(bad):
    X = np.eye(5)
    X[2, 3] = bad
    with pytest.raises(ValueError) as dense_error:
        AttentionClustering(2).fit(X)
    with pytest.raises(ValueError) as sparse_error:
        AttentionClustering(2).fit(sp.csr_matrix(X))
    assert str(sparse_error.value) == str(dense_error.value)
    model = AttentionClustering(2, random_state=0).fit(np.eye(5))
    with pytest.raises(ValueError, match="NaN|infinity"):
        model.predict(sp.csr_matrix(X))


@pytest.mark.parametrize("refine", [None, "em"])
def test_all_zero_rows_get_the_documented_label(refine, global_random_seed):
    # No direction: the label of the largest bias, the heaviest cluster after
    # the refinement and cluster 0 without it.
    X, S, _ = _sparse_mixture(global_random_seed)
    model = AttentionClustering(3, center=False, refine=refine, random_state=0).fit(S)
    zeros = sp.csr_matrix((4, X.shape[1]))
    expected = 0 if refine is None else int(np.argmax(model.weights_))
    np.testing.assert_array_equal(model.predict(zeros), expected)
    with_zeros = sp.vstack([S, zeros]).tocsr()
    refit = AttentionClustering(3, center=False, refine=refine, random_state=0).fit(with_zeros)
    assert np.all(np.isfinite(refit.cluster_centers_))


def test_constant_data_warn():
    with pytest.warns(UserWarning, match="All rows of X are equal") as record:
        model = AttentionClustering(2, random_state=0).fit(np.ones((50, 3)))
    assert len(set(model.labels_)) == 1
    # The warning points at the caller's line, not inside the package.
    assert all(w.filename == __file__ for w in record)


def test_collapse_warns_and_names_the_fix():
    # A common offset that dominates the second moment: every head sees it.
    X, y, _ = make_embeddings(600, 64, 4, offset=3.0, noise=0.05, random_state=0)
    with pytest.warns(UserWarning, match="pass center=True"):
        collapsed = AttentionClustering(4, center=False, random_state=0).fit(X)
    assert adjusted_rand_score(y, collapsed.labels_) < 0.5
    with pytest.warns(UserWarning, match="center='auto' centred the data"):
        auto = AttentionClustering(4, random_state=0).fit(X)
    assert auto.center_ and adjusted_rand_score(y, auto.labels_) > 0.95
    np.testing.assert_allclose(auto.mean_, X.mean(axis=0))


@pytest.mark.parametrize(
    ("centroids", "layer_fails"),
    [
        # Both heads of the layer lie near the one axis (heads are defined
        # up to sign): its labels split the two sides or not by the draw.
        pytest.param([[1.0, 0.0], [-1.0, 0.0]], False, id="opposite"),
        pytest.param([[4.0, 1.0], [4.0, -1.0]], True, id="away-from-the-origin"),
        pytest.param([[1.0, 0.0], [3.0, 0.0]], True, id="one-direction-two-norms"),
    ],
)
def test_default_finds_what_the_attention_layer_alone_misses(
    centroids, layer_fails, global_random_seed
):
    # The user guide's poor fits of the attention layer (heads are axes
    # through the origin) that the default estimator's centring and EM
    # refinement turn into good ones.
    C = np.zeros((2, 10))
    C[:, :2] = centroids
    X, y, _ = make_mixture(2000, 10, 2, noise=0.3, centroids=C, random_state=global_random_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        default = AttentionClustering(2, random_state=0).fit(X)
    assert adjusted_rand_score(y, default.labels_) > 0.95
    if layer_fails:
        layer = AttentionClustering(2, center=False, refine=None, random_state=0).fit(X)
        assert adjusted_rand_score(y, layer.labels_) < 0.2


@pytest.mark.parametrize("weights", [None, [0.75, 0.25], [0.9, 0.1]])
def test_auto_keeps_the_papers_mixtures(weights, global_random_seed):
    X, y, _ = make_mixture(2000, 10, 2, noise=0.3, weights=weights, random_state=global_random_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = AttentionClustering(2, random_state=0).fit(X)
    assert not model.center_
    np.testing.assert_array_equal(model.mean_, 0.0)


@settings(max_examples=10, deadline=None)
@given(shift=st.floats(-50, 50), seed=st.integers(0, 2**16))
def test_centred_fit_is_translation_invariant(shift, seed):
    X, _, _ = make_mixture(400, 5, 2, noise=0.2, random_state=seed)
    one = AttentionClustering(2, center=True, random_state=0).fit(X)
    two = AttentionClustering(2, center=True, random_state=0).fit(X + shift)
    agree = adjusted_rand_score(one.labels_, two.labels_)
    assert agree > 0.99
    np.testing.assert_allclose(two.mean_ - one.mean_, shift, atol=1e-8 * (1 + abs(shift)))


def test_principal_basis_spans_the_top_eigenvectors(global_random_seed):
    X, _, C = make_mixture(3000, 40, 3, noise=0.1, random_state=global_random_seed)
    B = principal_basis(DenseRows(X), 8, 3)
    np.testing.assert_allclose(B.T @ B, np.eye(8), atol=1e-10)
    top = np.linalg.eigh(X.T @ X / len(X))[1][:, -3:]
    # The top three eigenvectors lie in the span of the basis.
    np.testing.assert_allclose(np.linalg.norm(B.T @ top, axis=0), 1.0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    d=st.integers(3, 12),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    mix=st.floats(0.0, 1.0),
)
def test_largest_sine_is_scipys_largest_principal_angle(d, k, seed, mix):
    # Against SciPy's principal angles; invariant to a change of basis of
    # either span; zero between a span and itself.
    rng = np.random.default_rng(seed)
    A = np.linalg.qr(rng.standard_normal((d, k)))[0]
    B = np.linalg.qr(A + mix * rng.standard_normal((d, k)))[0]
    expected = np.sin(np.max(scipy.linalg.subspace_angles(A, B)))
    assert largest_sine(A, B) == pytest.approx(expected, abs=1e-7)
    R = np.linalg.qr(rng.standard_normal((k, k)))[0]
    assert largest_sine(A @ R, B) == pytest.approx(largest_sine(A, B), abs=1e-7)
    assert largest_sine(A, A @ R) < 1e-6


@settings(max_examples=40, deadline=None)
@given(
    d=st.integers(3, 400),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
    mix=st.floats(0.0, 1.0),
    place=st.sampled_from([-1e-3, -1e-9, -1e-15, 0.0, 1e-15, 1e-9, 1e-3, None]),
)
def test_sine_at_most_is_largest_sines_answer(d, k, seed, mix, place):
    # The Gram matrix's reading of the largest singular value answers as
    # the SVD's wherever it stands from tol, and the SVD answers within
    # _GRAM_MARGIN of it: at tol equal to the sine, a few ulps off, and
    # far off (None: the iteration's tol).
    k = min(k, d - 1)
    rng = np.random.default_rng(seed)
    A = np.linalg.qr(rng.standard_normal((d, k)))[0]
    B = np.linalg.qr(A + mix * rng.standard_normal((d, k)))[0]
    sine = largest_sine(A, B)
    tol = 1e-2 if place is None else sine * (1.0 + place)
    assert sine_at_most(A, B, tol) == (sine <= tol)
    assert sine_at_most(A, A, 1e-2)


@settings(max_examples=40, deadline=None)
@given(
    r=st.integers(1, 8),
    log_cond=st.floats(0.0, 12.0),
    seed=st.integers(0, 2**32 - 1),
)
@example(r=5, log_cond=11.998074201167992, seed=5)
def test_orthonormal_spans_the_columns_as_householder_qr(r, log_cond, seed):
    # Orthonormal columns with the span of Householder's QR (NumPy's), from
    # well conditioned columns (Cholesky QR twice) to nearly dependent ones
    # (Householder's fallback). The example: the Cholesky factor's diagonal,
    # which chose the fallback, took cond(A) = 1e12 for 1e6 (1.4e-12 from
    # orthonormal); its condition number chooses now.
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((200, r)))[0]
    V = np.linalg.qr(rng.standard_normal((r, r)))[0]
    A = (U * np.logspace(0, -log_cond, r)) @ V.T
    given = A.copy()
    Q = orthonormal(A)
    np.testing.assert_array_equal(A, given)  # (solved in place: its own copies alone)
    np.testing.assert_allclose(Q.T @ Q, np.eye(r), atol=1e-12)
    assert largest_sine(Q, np.linalg.qr(A)[0]) < 1e-8 * 10**log_cond


class _CountedRows(SparseRows):
    """Sparse rows that count their moment products."""

    products = 0

    def moment_action(self, V):
        _CountedRows.products += 1
        return super().moment_action(V)


def test_principal_basis_stops_when_the_leading_span_settles():
    # TF-IDF of topics of equal weight: the leading eigenvalues nearly
    # coincide, so the iteration turns their vectors within their span long
    # after the span has settled (a test on the vectors' Rayleigh quotients
    # took 9 iterations here). The test is on the span: at most six
    # iterations and the Rayleigh-Ritz product, and the basis holds the top
    # eigenvectors.
    docs = make_corpus(2000, n_topics=10, n_words=5000, document_length=100, random_state=0)[0]
    X = TfidfVectorizer().fit_transform(docs)
    _CountedRows.products = 0
    B = principal_basis(_CountedRows(X), 15, 10)
    assert _CountedRows.products <= 7
    top = np.linalg.eigh((X.T @ X).toarray() / X.shape[0])[1][:, -10:]
    np.testing.assert_allclose(np.linalg.norm(B.T @ top, axis=0), 1.0, atol=1e-6)


@pytest.mark.parametrize("rows", [600, 9000])
def test_principal_basis_of_sparse_rows_is_the_dense_rows_with_empty_columns(rows):
    # The start was drawn on the sparse rows' filled columns alone: the same
    # rows dense (which have no support) started elsewhere, and the basis,
    # stopped before it forgets its start, differed by 0.4 (ARI 0.75 between
    # the fits). Beyond 8192 rows the subsample lacks rare columns that the
    # full rows fill. The start is the dense one's, on the filled columns.
    X, _, _ = make_mixture(rows, n_features=1200, n_clusters=4, noise=0.3, random_state=0)
    X[:, :10] = 0.0
    if rows > BASIS_ROWS:
        X[:, 10:60] = 0.0
        X[np.arange(50) * 97, np.arange(10, 60)] = 1.0  # one entry each
    dense = principal_basis(DenseRows(X), 9, 4)
    sparse = principal_basis(SparseRows(sp.csr_matrix(X)), 9, 4)
    assert largest_sine(dense, sparse) < 1e-10
    assert not np.any(sparse[:10])  # zero in the empty columns


def test_principal_basis_of_hashed_rows_works_in_their_filled_columns(monkeypatch):
    # Of hashed features (2^20 columns, most empty) the iteration's d x r
    # products took most of a fit's time: they are taken on the columns that
    # may hold an entry, from the dense start's rows there.
    docs = make_corpus(2000, n_topics=10, n_words=3000, document_length=30, random_state=0)[0]
    X = TfidfVectorizer().fit_transform(docs)
    columns = np.sort(np.random.default_rng(0).choice(2**18, X.shape[1], replace=False))
    wide = sp.csr_matrix((X.data, columns[X.indices], X.indptr), shape=(X.shape[0], 2**18))
    shapes = []
    orthonormal_of = _scale.orthonormal
    monkeypatch.setattr(
        _scale, "orthonormal", lambda A: shapes.append(A.shape) or orthonormal_of(A)
    )
    basis = principal_basis(SparseRows(wide), 15, 10)
    assert shapes and all(shape == (X.shape[1], 15) for shape in shapes)
    assert basis.shape == (2**18, 15)
    np.testing.assert_allclose(basis[columns].T @ basis[columns], np.eye(15), atol=1e-10)


def test_high_dimension_runs_in_the_subspace(monkeypatch, global_random_seed):
    X, y, _ = make_mixture(1500, 80, 3, noise=0.05, random_state=global_random_seed)
    low = AttentionClustering(3, random_state=0).fit(X)
    monkeypatch.setattr(
        _plan, "DEFAULT_TUNING", replace(_plan.DEFAULT_TUNING, subspace_min_features=50)
    )
    high = AttentionClustering(3, random_state=0).fit(X)
    assert high.cluster_centers_.shape == (3, 80) and high.moment_heads_.shape == (3, 80)
    # Both EM refinements run on the rows in R^d and meet at one maximum:
    # the same labels, and heads equal to rounding (|cos| within 4.4e-16 of 1
    # over 30 seeds).
    assert adjusted_rand_score(low.labels_, high.labels_) == 1.0
    np.testing.assert_array_equal(high.predict(X), high.labels_)
    np.testing.assert_allclose(
        np.abs(np.sum(high.cluster_centers_ * low.cluster_centers_, axis=1)), 1.0, atol=1e-12
    )


def test_high_dimension_refines_out_of_the_subspace(monkeypatch, global_random_seed):
    # The EM after the subspace's solver runs on the rows in R^d: its centres
    # leave the principal subspace (whose directions are estimated with the
    # noise) and reach the maximum likelihood the d x d path reaches, to
    # within a small fraction of their distance to the centroids.
    X, _, C = make_mixture(4000, 120, 3, noise=0.5, random_state=global_random_seed)
    low = AttentionClustering(3, random_state=0).fit(X)
    monkeypatch.setattr(
        _plan, "DEFAULT_TUNING", replace(_plan.DEFAULT_TUNING, subspace_min_features=50)
    )
    high = AttentionClustering(3, random_state=0).fit(X)
    B = principal_basis(DenseRows(X), 3 + _plan.DEFAULT_TUNING.subspace_extra, 3)
    outside = high.cluster_centers_ - (high.cluster_centers_ @ B) @ B.T
    assert np.linalg.norm(outside) > 1e-3
    assert centroid_distance(
        high.cluster_centers_, low.cluster_centers_
    ) < 0.05 * centroid_distance(low.cluster_centers_, C)
    np.testing.assert_array_equal(high.predict(X), high.labels_)


@pytest.mark.parametrize("center", [False, True])
def test_the_subspace_estimates_the_spectrum_of_the_rows_in_r_d(
    monkeypatch, center, global_random_seed
):
    # The subspace's eigenvalues beyond the K-th are the largest of the
    # noise's, at the bulk's edge (about (1 + sqrt(d / n))^2 = 1.5 times its
    # mean here): the noise came out 1.2 to 1.6 times sigma, and the scale,
    # the temperature and with them transform and score differed from the d x
    # d path's (in memory against Dask, dense against sparse). The noise is
    # now the mean of the d - K smallest eigenvalues in R^d, from the rows'
    # trace, and the temperature sees the whole spectrum: within 1.5% of the
    # d x d path's over seeds 0 to 59 (the subspace's basis is iterated to a
    # tolerance).
    X, _, _ = make_mixture(1000, 200, 3, noise=0.3, random_state=global_random_seed)
    X = X + 2.0 * center
    low = AttentionClustering(3, random_state=0, center=center).fit(X)
    monkeypatch.setattr(
        _plan, "DEFAULT_TUNING", replace(_plan.DEFAULT_TUNING, subspace_min_features=50)
    )
    high = AttentionClustering(3, random_state=0, center=center).fit(X)
    for name in ("scale_", "noise_scale_", "temperature_"):
        assert getattr(high, name) == pytest.approx(getattr(low, name), rel=0.03), name
    if not center:  # relative to the centroids' norm, which centring changes
        assert high.noise_scale_ == pytest.approx(0.3, rel=0.1)
    assert high.score(X) == pytest.approx(low.score(X), rel=0.03)


@pytest.mark.parametrize(
    "n_samples, kind, expected",
    [
        (4 * BASIS_ROWS, "dense", True),  # few rows: the subsample sees what all rows see
        (4 * BASIS_ROWS + 1, "dense", False),  # many: the d x d moment of all rows
        (4 * BASIS_ROWS + 1, "sparse", True),  # sparse: O(nnz K) passes, d^3 eigh
    ],
    ids=["dense-few-rows", "dense-many-rows", "sparse-many-rows"],
)
def test_the_subspace_path_between_the_two_widths(monkeypatch, n_samples, kind, expected):
    # Between subspace_min_features and dense_subspace_min_features (here
    # 20 and 40 features, the rule's two widths scaled down), the subspace
    # path takes sparse rows and dense rows of at most 4 x BASIS_ROWS; at
    # and above the dense width every in-memory kind takes it.
    monkeypatch.setattr(
        _plan,
        "DEFAULT_TUNING",
        replace(_plan.DEFAULT_TUNING, subspace_min_features=20, dense_subspace_min_features=40),
    )
    taken = []

    def recording(rows, n_components, n_leading):
        taken.append(rows.sparse)
        raise _Taken

    monkeypatch.setattr(_plan, "principal_basis", recording)
    for d, subspace in ((30, expected), (40, True)):
        taken.clear()
        rng = np.random.default_rng(0)
        X = rng.random((n_samples, d)) * (rng.random((n_samples, d)) < 0.2)
        X = sp.csr_matrix(X) if kind == "sparse" else X
        try:
            AttentionClustering(2, random_state=0, max_iter=1).fit(X)
        except _Taken:
            pass
        assert taken == ([kind == "sparse"] if subspace else [])


class _Taken(Exception):
    pass


def test_tfidf_fit_never_forms_a_dense_matrix(traced_peak):
    # Over 15000 columns: a d x d float64 matrix would take 1.8 GB or more,
    # the dense rows 240 MB; the traced peak of the fit stays far below both.
    texts, y = make_corpus(2000, 3, n_words=60000, document_length=80, random_state=0)
    X = TfidfVectorizer().fit_transform(texts)
    assert X.shape[1] > 15000
    model = AttentionClustering(3, random_state=0)
    model.fit(X[:50])  # compile outside the traced fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, peak = traced_peak(lambda: model.fit(X))
    assert peak < 50 * 2**20
    assert adjusted_rand_score(y, model.labels_) > 0.9


@pytest.mark.parametrize("center", [False, True])
def test_the_subspace_fit_reads_the_norms_of_the_rows_once(monkeypatch, center):
    # In the principal subspace the EM runs on the rows in R^d at the fit's
    # scale, from their mean squared norm (one pass); uncentred, those are
    # the rows as given whose norms the test of one norm reads: one pass for
    # both, where it took a third. The spectrum's pass is the other (the
    # trace at the spectrum's scale). Centred, the centred rows' spectrum
    # is a third, and there is no test of one norm (centred rows do not lie
    # on a sphere about the origin).
    docs = make_corpus(2000, n_topics=5, n_words=3000, document_length=60, random_state=0)[0]
    X = TfidfVectorizer().fit_transform(docs)
    passes, norms = [], []
    pass_, one_norm = SparseRows.norm_moments, _plan._one_norm
    monkeypatch.setattr(SparseRows, "norm_moments", lambda self: passes.append(1) or pass_(self))
    monkeypatch.setattr(_plan, "_one_norm", lambda *a: norms.append(a) or one_norm(*a))
    model = AttentionClustering(5, center=center, random_state=0).fit(X)
    assert len(norms) == (0 if center else 1)
    assert model.n_features_in_ >= _plan.DEFAULT_TUNING.subspace_min_features
    assert len(passes) == (3 if center else 2)


@pytest.mark.parametrize("temperature", ["auto", 0.5])
def test_quantizer_on_sparse_tokens_equals_the_dense_layer(temperature, global_random_seed):
    from attention_cluster import InContextQuantizer

    X, S, _ = _sparse_mixture(global_random_seed, n=300)
    dense = InContextQuantizer(3, temperature=temperature).fit(X).transform(X)
    sparse = InContextQuantizer(3, temperature=temperature).fit(S).transform(S)
    np.testing.assert_allclose(sparse, dense, rtol=1e-9, atol=1e-12)
    # The softmax layer's output is dense: it reads a sparse prompt densely.
    softmax = InContextQuantizer(3, attention="softmax")
    np.testing.assert_allclose(
        softmax.fit(S).transform(S), softmax.fit(X).transform(X), rtol=1e-9, atol=1e-12
    )


@pytest.mark.slow
def test_auto_refits_centred_when_the_uncentred_fit_loses_clusters(monkeypatch):
    # The second rule of center="auto" on its own: with the ratio's rule
    # switched off, an uncentred fit that loses clusters to a common offset
    # while the mean carries more than share_to_retry of the second moment
    # is done again on the centred rows.
    monkeypatch.setattr(_plan, "DEFAULT_TUNING", replace(_plan.DEFAULT_TUNING, center_ratio=np.inf))
    X, y = make_embeddings(3000, 64, 5, offset=2.0, noise=0.1, random_state=0)[:2]
    with pytest.warns(UserWarning, match="pass center=True"):
        plain = AttentionClustering(5, center=False, random_state=0).fit(X)
    with pytest.warns(UserWarning, match="the uncentred fit lost"):
        auto = AttentionClustering(5, random_state=0).fit(X)
    assert auto.center_
    assert adjusted_rand_score(y, auto.labels_) > adjusted_rand_score(y, plain.labels_)
