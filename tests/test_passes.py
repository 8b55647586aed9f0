"""Tests of the pass layer (``attention_cluster._passes``).

Every pass is compared with its NumPy twin on the whole array, with chunks
small enough that the data span several of them, and a pass on several
threads must equal the serial one bit for bit.
"""

import contextlib
import functools
import math
import multiprocessing
import os
import threading
import tracemalloc
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reference import head_signs, mixture_e_step
from sklearn.utils import check_random_state

from attention_cluster import AttentionClustering, _passes
from attention_cluster._draws import first_draw, nested_rows
from attention_cluster._passes import DenseRows, SparseRows, rows_of
from attention_cluster.datasets import make_mixture


@pytest.fixture
def small_chunks(monkeypatch):
    # 256-row chunks at d = 4: a 1000-row array spans four of them.
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 256 * 8 * 4)


def _data(seed, n=1000, d=4, dtype=np.float64, weighted=True):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) + np.r_[2.0, np.zeros(d - 1)]).astype(dtype)
    w = rng.uniform(0, 2, n) if weighted else None
    return X, w, rng


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_passes_match_numpy(small_chunks, weighted, dtype, compiled, global_random_seed):
    # Numba's kernels, and their NumPy forms (the passes of small data).
    X, w, rng = _data(global_random_seed, dtype=dtype, weighted=weighted)
    scale = 1.7
    data = DenseRows(X, w, scale=scale, n_threads=2, compiled=compiled)
    assert len(data._bounds) == 4
    Z = X.astype(np.float64) / scale
    ww = np.ones(len(X)) if w is None else w
    M = (Z * ww[:, None]).T @ Z / ww.sum()
    # An off-diagonal entry can cancel (seed 36: -2.3e-5 among entries of
    # 1): its rounding is that of the sum of |terms|, as for the mean below.
    m_atol = 1e-12 * float(np.max((np.abs(Z) * ww[:, None]).T @ np.abs(Z) / ww.sum()))
    np.testing.assert_allclose(data.second_moment(), M, rtol=1e-12, atol=m_atol)
    V = rng.standard_normal((4, 3))
    np.testing.assert_allclose(data.moment_action(V), M @ V, rtol=1e-10, atol=1e-12)
    sq = np.sum(Z**2, axis=1)
    np.testing.assert_allclose(
        data.norm_moments(), [ww @ sq / ww.sum(), ww @ sq**2 / ww.sum()], rtol=1e-12
    )
    c, M_c = data.scaled_second_moment()
    np.testing.assert_allclose(c * c * M_c, M, rtol=1e-12, atol=m_atol)
    mean = ww @ Z / ww.sum()
    # Relative to the terms' size, not the mean's: a column whose mean is
    # near zero cancels, and its rounding is that of the sum of |terms|.
    size = ww @ np.abs(Z) / ww.sum()
    np.testing.assert_allclose(data.mean(), mean, rtol=0, atol=1e-12 * size.max())
    c_m, M_m, mean_m = data.moments()
    assert c_m == c
    np.testing.assert_array_equal(M_m, M_c)
    np.testing.assert_allclose(mean_m, mean, rtol=0, atol=1e-12 * size.max())
    tiny = DenseRows(X.astype(np.float64) * 1e-200, w, scale=scale * 1e-200)
    np.testing.assert_allclose(tiny.second_moment(), M, rtol=1e-12, atol=m_atol)
    U = rng.standard_normal((4, 3))
    U /= np.linalg.norm(U, axis=0)
    log_pi = np.log([0.2, 0.3, 0.5])
    S, counts, partial = data.e_step(U, log_pi, 1.3)
    S_ref, counts_ref, partial_ref = mixture_e_step(Z, U, log_pi, 1.3, w)
    np.testing.assert_allclose(S, S_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(counts, counts_ref, rtol=1e-9)
    assert partial == pytest.approx(partial_ref, rel=1e-9)
    totals = data.head_totals(U)
    np.testing.assert_array_equal(
        np.where(totals < 0, -1.0, 1.0), head_signs(X.astype(np.float64), U.T, w)
    )
    bias = np.log([0.5, 0.2, 0.3])
    _assert_labels(data.labels(U.T, 2.0, bias), X, U, 2.0, bias)
    gains = np.array([0.5, 2.0, 3.5])  # one per head (centroids of free norms)
    _assert_labels(data.labels(U.T, gains, bias), X, U, gains, bias)


def _assert_labels(labels, X, U, gain, bias):
    # The float64 argmax, except on rows whose two best scores are closer
    # than the rounding of the scores' products in X's dtype (float32 rows
    # are labelled by float32 products): d eps |x| |u_h| (Higham's bound
    # for an inner product of length d) times the gain, for each of the two.
    scores = gain * (X.astype(np.float64) @ U) + bias
    expected = np.argmax(scores, axis=1)
    top2 = np.sort(scores, axis=1)[:, -2:]
    eps = np.finfo(X.dtype).eps
    rounding = X.shape[1] * eps * np.linalg.norm(X.astype(np.float64), axis=1)
    rounding = rounding * np.max(np.abs(gain) * np.linalg.norm(U, axis=0))
    clear = top2[:, 1] - top2[:, 0] > 2 * rounding
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(labels[clear], expected[clear])


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_float32_labels_about_the_origin_keep_the_digits_of_far_rows(compiled):
    # Rows 1e4 from zero with a spread of 1: their float32 products with the
    # centres round at about 1e4 eps, which flips labels near the clusters'
    # boundaries; about the origin (the fit's mean) they round at eps, and
    # the labels are the float64 argmax but within that bound of a tie.
    rng = np.random.default_rng(0)
    offset = np.full(16, 1e4)
    X = (rng.standard_normal((20000, 16)) + offset).astype(np.float32)
    U = rng.standard_normal((16, 5))
    U /= np.linalg.norm(U, axis=0)
    bias = np.log([0.1, 0.2, 0.3, 0.2, 0.2])
    data = DenseRows(X, n_threads=2, compiled=compiled)
    labels = data.labels(U.T, 2.0, bias, origin=offset)
    _assert_labels(labels, X - offset.astype(np.float32), U, 2.0, bias)
    # The same rule with the origin's term in the bias and the rows' float32
    # products taken from zero rounds as the far rows do: labels differ.
    assert np.any(data.labels(U.T, 2.0, bias - 2.0 * (offset @ U)) != labels)
    # A zero origin is no origin.
    np.testing.assert_array_equal(
        data.labels(U.T, 2.0, bias, origin=np.zeros(16)), data.labels(U.T, 2.0, bias)
    )


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_float32_labels_beyond_float32_products_range(compiled):
    # Rows whose scores <x, c_h> exceed float32's range (about 3.4e38) are
    # scored in float64: the float32 products would be infinite and tie.
    rng = np.random.default_rng(0)
    X = (rng.uniform(1.0, 3.0, (600, 4)) * 1e38).astype(np.float32)
    U = np.abs(rng.standard_normal((4, 3)))
    U /= np.linalg.norm(U, axis=0)
    with np.errstate(over="ignore"):
        assert not np.isfinite(X @ U.astype(np.float32)).all()
    data = DenseRows(X, n_threads=2, compiled=compiled)
    labels, counts = data.labels_and_counts(U.T, 1.0, np.zeros(3))
    np.testing.assert_array_equal(labels, np.argmax(X.astype(np.float64) @ U, axis=1))
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=3))


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize(
    "origin, spread, offset",
    [(1e150, 1.0, 0.0), (-3e38, 1e36, 3e38)],
    ids=["origin-beyond-float32", "rows-less-origin-beyond-float32"],
)
def test_float32_labels_about_an_origin_beyond_float32s_range(compiled, origin, spread, offset):
    # A float64 fit's mean_ beyond float32's range (1e150), or float32 rows
    # whose difference with it is (3e38 less -3e38): the rows are labelled
    # as in float64, without a RuntimeWarning. (Cast to float32 the origin
    # was infinite, every bias NaN and every label 0; the rows less it
    # overflowed, and their labels were those of infinite rows.)
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((300, 3)) * spread + offset).astype(np.float32)
    o = np.array([1.0, -0.5, 0.25]) * origin
    U = rng.standard_normal((3, 4))
    U /= np.linalg.norm(U, axis=0)
    bias = np.log([0.1, 0.2, 0.3, 0.4])
    expected = np.argmax((X.astype(np.float64) - o) @ U + bias, axis=1)
    data = DenseRows(X, n_threads=2, compiled=compiled)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        labels, counts = data.labels_and_counts(U.T, 1.0, bias, origin=o)
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(counts, np.bincount(expected, minlength=4))


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_moments_of_a_power_of_two_times_x_are_exact(compiled):
    # Rows near 1e-110 square to 1e-219 and take the moments' plain branch;
    # 2^-60 of them square below its floor (1e-250) and are divided by a
    # power of two first: c scales by exactly 2^-60 and M / c^2 is the same
    # to the last bit. (Divided by their largest entry instead, the two
    # branches rounded apart, and a fit of 2^-60 X found another optimum.)
    rng = np.random.default_rng(0)
    X = np.ldexp(rng.standard_normal((200, 5)) + [0.1, 4.0, 2.0, 0.0, -1.0], -365)
    c, M, mean = DenseRows(X, compiled=compiled).moments()
    c_small, M_small, mean_small = DenseRows(np.ldexp(X, -60), compiled=compiled).moments()
    assert np.max(np.sum(np.ldexp(X, -60) ** 2, axis=0)) < 1e-250 < np.max(np.sum(X**2, axis=0))
    assert c_small == np.ldexp(c, -60)
    np.testing.assert_array_equal(M_small, M)
    np.testing.assert_array_equal(mean_small, np.ldexp(mean, -60))


@pytest.mark.parametrize("weighted", [False, True])
def test_wide_float32_moments_within_their_tile_rounding(
    small_chunks, weighted, global_random_seed
):
    # Above _MOMENT_MAX_FEATURES, float32 chunks are multiplied in float32
    # by tiles of at most _E_TILE rows, added in float64: each entry of the
    # second moment is within (tile + 1) float32 epsilons of sqrt(M_ii M_jj)
    # of the float64 reference (the tile's sum of |w x_i x_j|, by
    # Cauchy-Schwarz; one more epsilon for the weights in float32). The
    # pass spans several chunks, and is the same on one and three threads.
    d = 40
    assert d > _passes._MOMENT_MAX_FEATURES
    X, w, _ = _data(global_random_seed, n=3000, d=d, dtype=np.float32, weighted=weighted)
    scale = 1.7
    data = DenseRows(X, w, scale=scale, n_threads=3)
    Z = X.astype(np.float64) / scale
    ww = np.ones(len(X)) if w is None else w
    M = (Z * ww[:, None]).T @ Z / ww.sum()
    got = data.second_moment()
    eps = np.finfo(np.float32).eps
    bound = (_passes._E_TILE + 1) * eps * np.sqrt(np.outer(np.diag(M), np.diag(M)))
    assert np.all(np.abs(got - M) <= bound)
    # The mean: by float64 products in its own pass, in float32 tiles in
    # the moments pass (sums of w x, within the same bound of the column's
    # root mean square sqrt(M_ii)).
    rms = np.sqrt(np.diag(M))
    mean = ww @ Z / ww.sum()
    assert np.all(np.abs(data.mean() - mean) <= 1e-12 * rms)
    assert np.all(np.abs(data.moments()[2] - mean) <= (_passes._E_TILE + 1) * eps * rms)
    serial = DenseRows(X, w, scale=scale, n_threads=1)
    np.testing.assert_array_equal(serial.second_moment(), got)
    # Squares under float32's smallest normal number, or past its largest:
    # those chunks go by float64, divided by their largest entry, to
    # float64's rounding of the terms' scale sqrt(M_ii M_jj) (an entry
    # far below it is a cancellation).
    for factor in (1e-25, 1e25):
        Y = (X.astype(np.float64) * factor).astype(np.float32)
        Zy = Y.astype(np.float64)
        My = (Zy * ww[:, None]).T @ Zy / ww.sum()
        scale = np.sqrt(np.outer(np.diag(My), np.diag(My)))
        assert np.all(np.abs(DenseRows(Y, w).second_moment() - My) <= 1e-12 * scale)


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_threads_give_the_serial_result(small_chunks, compiled, global_random_seed):
    X, w, rng = _data(global_random_seed)
    U = rng.standard_normal((4, 2))
    serial = DenseRows(X, w, n_threads=1, compiled=compiled)
    threaded = DenseRows(X, w, n_threads=3, compiled=compiled)
    for one, many in [
        (serial.second_moment(), threaded.second_moment()),
        (
            serial.exact_terms(U, U, 0.1, 9.0, 1, 0.2)[1],
            threaded.exact_terms(U, U, 0.1, 9.0, 1, 0.2)[1],
        ),
        (
            serial.e_step(U, np.log([0.4, 0.6]), 2.0)[0],
            threaded.e_step(U, np.log([0.4, 0.6]), 2.0)[0],
        ),
    ]:
        np.testing.assert_array_equal(one, many)
    threaded.close()


def test_subsample_and_draw(global_random_seed):
    X, w, rng = _data(global_random_seed)
    data = DenseRows(X, w, scale=2.0)
    assert data.subsample(np.random.RandomState(0), 5000) is data
    sub = data.subsample(np.random.RandomState(0), 100)
    # About 100 rows: each drawn with probability 100 / n (sd < 10).
    assert abs(sub.n_samples - 100) < 50
    assert sub.scale == 2.0 and sub.sample_weight.shape == (sub.n_samples,)
    rows = data.draw(np.array([12345], dtype=np.uint64), np.empty((20, 4)))
    # Each drawn row is a row of X / s.
    assert all(np.any(np.all(np.isclose(X / 2.0, r), axis=1)) for r in rows)


def _fit_labels(queue=None):
    from attention_cluster import AttentionClustering

    X, _, _ = make_mixture(3000, 5, 2, noise=0.5, random_state=0)
    centers = AttentionClustering(random_state=0, n_threads=2).fit(X).cluster_centers_
    if queue is not None:
        queue.put(centers)
    return centers


def test_fits_in_threads_and_after_fork_match_the_serial_fit():
    serial = _fit_labels()
    results = []
    thread = threading.Thread(target=lambda: results.append(_fit_labels()))
    thread.start()
    thread.join()
    np.testing.assert_array_equal(results[0], serial)
    if "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_fit_labels, args=(queue,))
        child.start()
        forked = queue.get(timeout=120)
        child.join()
        np.testing.assert_array_equal(forked, serial)


def _sparse_copy(X, rng, density=0.3):
    """X with most entries zeroed, dense and as CSR."""
    X = np.where(rng.uniform(size=X.shape) < density, X, 0.0).astype(X.dtype)
    return X, sp.csr_matrix(X)


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_rows_match_dense_rows(weighted, centred, global_random_seed):
    # The sparse backend, with its centring applied inside the products, is
    # the dense backend on the explicitly centred dense array.
    X, w, rng = _data(global_random_seed, n=600, d=6, weighted=weighted)
    X, S = _sparse_copy(X + 1.0, rng)
    sparse = SparseRows(S, w, scale=1.3)
    dense = DenseRows(X, w, scale=1.3)
    if centred:
        m = dense.mean() * 1.3
        sparse, dense = sparse.centred(m), dense.centred(m)
        np.testing.assert_allclose(dense.mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(sparse.mean(), dense.mean(), atol=1e-12)
    np.testing.assert_allclose(sparse.moments()[2], dense.moments()[2], atol=1e-12)
    np.testing.assert_allclose(
        sparse.second_moment(), dense.second_moment(), rtol=1e-10, atol=1e-12
    )
    c, M = sparse.scaled_second_moment()
    np.testing.assert_allclose(c * c * M, dense.second_moment(), rtol=1e-10, atol=1e-12)
    U = rng.standard_normal((6, 3))
    U /= np.linalg.norm(U, axis=0)
    np.testing.assert_allclose(
        sparse.moment_action(U), dense.moment_action(U), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(sparse.norm_moments(), dense.norm_moments(), rtol=1e-10)
    # (Centred, the sparse peak was a bound, up to twice the dense one.)
    assert sparse.peak() == pytest.approx(dense.peak(), rel=1e-12)
    MU = dense.moment_action(U)
    for reg in (0, 1, 2):
        v_s, P_s = sparse.exact_terms(U, MU, 0.06, 49.0, reg, 0.3)
        v_d, P_d = dense.exact_terms(U, MU, 0.06, 49.0, reg, 0.3)
        assert v_s == pytest.approx(v_d, rel=1e-9)
        np.testing.assert_allclose(P_s, P_d, rtol=1e-9, atol=1e-10)
    log_pi = np.log([0.2, 0.3, 0.5])
    for one, two in zip(sparse.e_step(U, log_pi, 1.7), dense.e_step(U, log_pi, 1.7)):
        np.testing.assert_allclose(one, two, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.head_totals(U), dense.head_totals(U), rtol=1e-9, atol=1e-12)
    for gain in (2.0, np.array([0.5, 2.0, 3.5])):
        np.testing.assert_array_equal(
            sparse.labels(U.T, gain, log_pi), dense.labels(U.T, gain, log_pi)
        )
    np.testing.assert_allclose(sparse.project(U), dense.project(U), rtol=1e-10, atol=1e-12)
    # Same generator, same draws: the same rows, densified.
    one = sparse.draw(np.array([99], dtype=np.uint64), np.empty((30, 6)))
    two = dense.draw(np.array([99], dtype=np.uint64), np.empty((30, 6)))
    np.testing.assert_allclose(one, two, atol=1e-12)
    sub = sparse.subsample(np.random.RandomState(0), 100)
    assert isinstance(sub, SparseRows) and abs(sub.n_samples - 100) < 50
    assert sub.scale == sparse.scale


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("centring", ["none", "mean", "far column"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_float32_sparse_rows_give_the_passes_of_their_float64_copy(
    fmt, centring, weighted, compiled, monkeypatch, global_random_seed
):
    # SparseRows keeps float32 non-zeros as they are (it held one float64
    # copy of them) and reads each block of rows in float64, or each value
    # as it comes for the sums over rows (compiled; NumPy's forms cast them
    # all, on data too small to compile for): every pass gives bit for bit
    # what it gives on a float64 copy. Blocks of 4 KiB: about 40 rows.
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 1 << 12)
    X, w, rng = _data(global_random_seed, n=1000, d=40, dtype=np.float32, weighted=weighted)
    X, S = _sparse_copy(X, rng)
    if centring == "far column":
        # A mean more than 10 times its spread: stored centred, in float64.
        X[:, 1] = (1e4 + 1e-2 * rng.standard_normal(len(X))).astype(np.float32)
        S = sp.csr_matrix(X)
    S = S.asformat(fmt)
    rows = SparseRows(S, w, scale=1.7, compiled=compiled)
    ref = SparseRows(S.astype(np.float64), w, scale=1.7, compiled=compiled)
    if fmt == "csr":
        assert np.shares_memory(rows._X.data, S.data)  # no copy
    if centring != "none":
        m = ref.mean() * 1.7
        rows, ref = rows.centred(m), ref.centred(m)
    assert rows.dtype == np.float32
    K = 4
    U = np.linalg.qr(rng.standard_normal((40, K)))[0]
    V = rng.standard_normal((40, 3))
    origin = rng.standard_normal(40)

    def passes(r):
        sub = r.subsample(np.random.RandomState(0), 300)
        assert sub.dtype == np.float64  # read in float64, as DenseRows' subsamples
        return [
            *r.moments(),
            r.second_moment(),
            r.moment_action(V),
            r.norm_moments(),
            *r.exact_terms(U, U * 0.9, 0.1, 9.0, 1, 0.2),
            *r.e_step(U, np.log(np.full(K, 1.0 / K)), 2.0),
            r.head_totals(U),
            *r.labels_and_counts(U.T, 1.3, np.zeros(K), origin=origin, scale=1.7),
            r.project(V),
            r.peak(),
            r.map_rows(lambda B: B.toarray()[:, :3]),
            r.draw(np.array([7], dtype=np.uint64), np.empty((20, 40))),
            *sub.moments(),
            sub.project(V),
        ]

    for got, want in zip(passes(rows), passes(ref), strict=True):
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype


@pytest.mark.parametrize("centred", [False, True])
def test_sums_over_float32_sparse_rows_copy_none_of_their_values(centred):
    # The sums over float32 rows (X^T A, the mean) read each value in float64
    # as it comes: they held a float64 copy of the values of a block of
    # columns at a time, with a copy of its indices (X[:, a:b]); now only
    # their outputs (a few d x k arrays) and the rows' unit weights.
    rng = np.random.default_rng(0)
    n, d, k = 5000, 400, 2
    X = sp.random(n, d, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    offset = rng.standard_normal(d) if centred else None  # the mean's other sums
    rows = SparseRows(X, offset=offset, compiled=True)
    A = rng.standard_normal((n, k))
    rows._transpose_product(A), rows.mean()  # compiled before they are traced
    for pass_ in (lambda: rows._transpose_product(A), rows.mean):
        tracemalloc.start()
        try:
            pass_()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < X.nnz // 4, peak


def _tfidf_like(rng, n, d, density, dtype=np.float64):
    """CSR rows of unit norm whose indices are out of order within each row,
    as TfidfVectorizer stores them."""
    X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    for i in range(n):
        a, b = X.indptr[i], X.indptr[i + 1]
        order = rng.permutation(b - a)
        X.indices[a:b], X.data[a:b] = X.indices[a:b][order], X.data[a:b][order]
    X.has_sorted_indices = False
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X.data /= np.repeat(np.where(norms > 0, norms, 1.0), np.diff(X.indptr))
    return X.astype(dtype)


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_rows_for_repeated_sums_give_the_same_passes(centred, weighted, global_random_seed):
    # The copy of X by columns (CSR of X^T) sums each column's entries in
    # the order of the rows, as SciPy's product of X.T (CSC) does: every
    # pass gives the same numbers, bit for bit, on rows whose indices are
    # out of order (TF-IDF's) and with a column stored twice in a row.
    rng = np.random.default_rng(global_random_seed)
    n, d, K = 700, 60, 3
    X = _tfidf_like(rng, n, d, 0.2)
    w = rng.uniform(0.0, 2.0, n) if weighted else None
    if weighted:
        w[::9] = 0.0
    rows = SparseRows(X, w, scale=0.7)
    if centred:
        rows = rows.centred(rows.mean() * 0.7)
    again = rows.for_repeated_sums()
    assert again._by_columns is not None and again._by_columns[0] is rows._X
    assert again.for_repeated_sums() is again  # (formed once)
    U = np.linalg.qr(rng.standard_normal((d, K)))[0]
    A = rng.standard_normal((n, K))

    def passes(r):
        return [
            r.mean(),
            r._sums_over_rows(A),
            r._sums_over_rows(A[:, 0]),
            r._transpose_product(A),
            r.moment_action(U),
            *r.exact_terms(U, U * 0.9, 0.1, 9.0, 1, 0.2),
            r.rescaled(1.9).moment_action(U),
        ]

    for got, want in zip(passes(again), passes(rows), strict=True):
        np.testing.assert_array_equal(got, want)
    # A row storing a column twice: summed once by the rows (the passes
    # square the stored values), then copied by columns.
    twice = sp.csr_matrix(
        (np.array([0.5, 0.25, 1.0]), np.array([3, 3, 1]), np.array([0, 2, 3])), shape=(2, 5)
    )
    rows = SparseRows(twice)
    np.testing.assert_array_equal(
        rows.for_repeated_sums()._transpose_product(A[:2]), rows._transpose_product(A[:2])
    )
    # Float32 rows are summed by the kernels, reading them in float64: kept.
    single = SparseRows(X.astype(np.float32))
    assert single.for_repeated_sums() is single


def test_blocks_of_sparse_rows_share_the_rows_arrays():
    # A block of rows is a view of X's values and indices, and its
    # transpose and values of its own are views of the block's: SciPy's
    # constructor copied both of a block under half of X (its prune), and
    # the squared norms of uncentred rows held three more copies of a block
    # (its indices, its values divided, their squares): one now.
    rng = np.random.default_rng(0)
    X = sp.random(20000, 2000, density=0.02, format="csr", random_state=rng)
    block = _passes._csr_rows(X, 100, 2000)
    assert np.shares_memory(block.data, X.data) and np.shares_memory(block.indices, X.indices)
    np.testing.assert_array_equal(block.toarray(), X[100:2000].toarray())
    other = _passes._with_values(block, -block.data)
    assert np.shares_memory(other.indices, X.indices)
    np.testing.assert_array_equal(other.toarray(), -X[100:2000].toarray())
    rows = SparseRows(X).rescaled(0.37)
    rows.norm_moments()
    tracemalloc.start()
    try:
        rows.norm_moments()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * _passes._CHUNK_BYTES, peak


@settings(deadline=None)
@given(
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=20),
    exponent=st.integers(-1100, 1100),
)
@example(values=[5e-324, -2.2250738585072014e-308, 1.5, -0.0], exponent=-1)
@example(values=[3.0e-308, 1.7976931348623157e308], exponent=1023)
def test_times_power_of_two_is_ldexp(values, exponent):
    # One product by 2^k rounds as ldexp does (both correctly rounded:
    # subnormal results, overflow to inf, signed zeros and NaN alike).
    with np.errstate(over="ignore"):
        for x in (np.array(values), np.array(values).astype(np.float32)):
            got = _passes.times_power_of_two(x, exponent, np.float64)
            want = np.ldexp(x.astype(np.float64), exponent)
            assert got.dtype == np.float64
            nan = np.isnan(want)
            np.testing.assert_array_equal(np.isnan(got), nan)
            np.testing.assert_array_equal(got[~nan].view(np.int64), want[~nan].view(np.int64))


@settings(deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 30),
    density=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    scale_exponent=st.integers(-1070, 1020),
    seed=st.integers(0, 2**32 - 1),
)
def test_uncentred_sparse_unit_terms_are_the_stored_entries(n, d, density, scale_exponent, seed):
    # About the origin, a sparse block's terms are those of its stored
    # entries alone, divided by the scale's power of two: bit for bit the
    # terms of every row's entries less a zero mean (a copy of the block
    # divided by ldexp, (y - 0)^2 summed with the other columns' zeros),
    # at scales from the subnormal range to float64's top.
    rng = np.random.default_rng(seed)
    X = _tfidf_like(rng, n, d, density)
    X.data *= 2.0 ** (scale_exponent + int(rng.integers(-3, 4)))
    scale = float(rng.uniform(0.5, 2.0)) * 2.0**scale_exponent
    C = rng.standard_normal((2, d))
    f, e = np.frexp(scale)
    Y = sp.csr_matrix(X, dtype=np.float64, copy=True)
    np.ldexp(Y.data, -e, out=Y.data)
    zero = np.zeros(d)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = Y.data - zero[Y.indices]
        q = _passes._row_reduce(np.add, diff * diff, Y.indptr)
        q = q + (0.0 - _passes._row_reduce(np.add, zero[Y.indices], Y.indptr))
        P, got = _passes.unit_terms(X, C, zero, scale)
    np.testing.assert_array_equal(P, (np.asarray(Y @ C.T) - zero @ C.T) / f)
    np.testing.assert_array_equal(got, np.where(np.isnan(q), np.inf, q) / (f * f))
    _, stored = _passes.unit_terms(X, C, zero, scale, stored=True)
    np.testing.assert_array_equal(stored, got)


def test_rows_of_picks_the_backend():
    X = np.eye(3)
    assert isinstance(rows_of(X), DenseRows)
    assert isinstance(rows_of(sp.csc_matrix(X)), SparseRows)


@given(
    n=st.integers(1, 300_000),
    fractions=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2),
    cuts=st.lists(st.integers(0, 300_000), max_size=6),
    seed=st.integers(0, 2**31 - 1),
)
def test_nested_rows_are_nested_and_do_not_depend_on_the_chunks(n, fractions, cuts, seed):
    # _draws: the draw over rows lo:hi is the whole draw restricted to them
    # (any chunking gives the same rows), and the rows of a smaller fraction
    # are those of a larger one with keys below it.
    small, large = sorted(fractions)
    rows, keys = nested_rows(seed, n, 0, n, large)
    assert np.all(np.diff(rows) > 0) and np.all(keys < np.float32(large))
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    pieces = [nested_rows(seed, n, lo, hi, large) for lo, hi in zip(bounds, bounds[1:])]
    np.testing.assert_array_equal(np.concatenate([r for r, _ in pieces]), rows)
    np.testing.assert_array_equal(np.concatenate([k for _, k in pieces]), keys)
    fewer, _ = nested_rows(seed, n, 0, n, small)
    np.testing.assert_array_equal(fewer, rows[keys < np.float32(small)])


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, np.int64(12345)], ids=str)
def test_first_draw_is_that_of_check_random_state(seed):
    # An int's draw is kept (the same number every call); a generator is
    # advanced by the one draw, as check_random_state(...).randint would.
    expected = check_random_state(seed).randint(2**31 - 1)
    assert first_draw(seed, 2**31 - 1) == expected
    assert first_draw(seed, 2**31 - 1) == expected
    generator, twin = np.random.RandomState(7), np.random.RandomState(7)
    assert first_draw(generator, 1000) == twin.randint(1000)
    assert generator.randint(1000) == twin.randint(1000)
    with pytest.raises(ValueError, match="Seed must be between"):
        first_draw(-1, 10)


def test_nested_rows_draw_each_row_with_its_fraction():
    # Monte Carlo: over seeds, each row is drawn with probability f,
    # independently of the others (pairs drawn together with f^2), and the
    # keys of the rows drawn are uniform below f.
    n, f, seeds = 100, 0.3, 4000
    drawn = np.zeros((seeds, n), dtype=bool)
    keys = []
    for seed in range(seeds):
        rows, k = nested_rows(seed, n, 0, n, f)
        drawn[seed, rows] = True
        keys.append(k)
    freq = drawn.mean(axis=0)
    assert np.all(np.abs(freq - f) < 5 * np.sqrt(f * (1 - f) / seeds))
    pairs = (drawn[:, 0] & drawn[:, 1]).mean()
    assert abs(pairs - f * f) < 5 * np.sqrt(f * f * (1 - f * f) / seeds)
    keys = np.concatenate(keys) / f
    assert abs(np.mean(keys) - 0.5) < 5 * np.sqrt(1 / 12 / len(keys))


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_prepared_subsamples_are_nested_and_ignore_the_generator(kind):
    # After prepare_subsamples every subsample is a part of one draw: the
    # smaller are subsets of the larger, whatever generator is passed, and
    # a centred copy shares the draw.
    X = np.arange(200_000, dtype=np.float64).reshape(-1, 2)
    rows = DenseRows(X) if kind == "dense" else SparseRows(sp.csr_matrix(X))
    rows.prepare_subsamples(7, 20_000)
    big = rows.subsample(np.random.RandomState(1), 20_000).project(np.eye(2))
    small = rows.centred(np.zeros(2)).subsample(np.random.RandomState(2), 3000).project(np.eye(2))
    assert abs(len(big) - 20_000) < 5 * np.sqrt(20_000) and abs(len(small) - 3000) < 300
    assert set(small[:, 0]) <= set(big[:, 0])
    # Unprepared: a draw of its own, seeded by the generator.
    other = DenseRows(X) if kind == "dense" else SparseRows(sp.csr_matrix(X))
    one = other.subsample(np.random.RandomState(1), 3000).project(np.eye(2))
    two = other.subsample(np.random.RandomState(1), 3000).project(np.eye(2))
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
def test_moments_report_nan_before_infinity(small_chunks, dtype, weighted, compiled):
    # The fit's first pass finds NaN and infinity in any chunk, even on rows
    # of zero weight, with scikit-learn's messages (NaN first, as it does),
    # by the fused sums of few features and by BLAS's products.
    X, w, _ = _data(0, dtype=dtype, weighted=weighted)
    if weighted:
        w[[10, 900]] = 0.0
    X[900, 1] = np.inf
    with pytest.raises(ValueError, match="^Input X contains infinity or a value too large"):
        DenseRows(X, w, n_threads=2, compiled=compiled).moments()
    X[10, 3] = np.nan
    with pytest.raises(ValueError, match="^Input X contains NaN.$"):
        DenseRows(X, w, n_threads=2, compiled=compiled).moments()


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("magnitude", [1e-200, 1e200])
def test_moments_of_any_magnitude(small_chunks, magnitude, compiled):
    # Squares that underflow or overflow float64 are rescaled by the
    # chunk's largest entry: the moments of finite data of any magnitude.
    X, w, _ = _data(0)
    ref = DenseRows(X, w, compiled=compiled)
    data = DenseRows(X * magnitude, w, scale=magnitude, compiled=compiled)
    np.testing.assert_allclose(data.second_moment(), ref.second_moment(), rtol=1e-12)
    np.testing.assert_allclose(data.moments()[2], ref.moments()[2], rtol=1e-12)


@given(
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([np.float64, np.float32]),
    weighted=st.booleans(),
)
def test_centred_rows_read_as_a_centred_copy(seed, dtype, weighted):
    # DenseRows.centred subtracts the offset from each chunk as a pass reads
    # it (in X's dtype): every pass gives bit for bit what it gives on the
    # centred copy of X, which is never made.
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((700, 5)) + 3.0).astype(dtype)
    w = rng.uniform(0.5, 2.0, 700) if weighted else None
    m = X.mean(axis=0)
    lazy = DenseRows(X, w, scale=1.7, n_threads=1).centred(m)
    copy = DenseRows(X - m.astype(dtype), w, scale=1.7, n_threads=1)
    U = np.linalg.qr(rng.standard_normal((5, 3)))[0]
    same = np.testing.assert_array_equal
    for a, b in zip(lazy.moments(), copy.moments()):
        same(a, b)
    for a, b in zip(
        lazy.e_step(U, np.log([0.2, 0.3, 0.5]), 2.0), copy.e_step(U, np.log([0.2, 0.3, 0.5]), 2.0)
    ):
        same(a, b)
    same(lazy.head_totals(U), copy.head_totals(U))
    same(lazy.labels(U.T, 1.0, np.zeros(3)), copy.labels(U.T, 1.0, np.zeros(3)))
    same(lazy.moment_action(U), copy.moment_action(U))
    same(lazy.norm_moments(), copy.norm_moments())
    same(lazy.project(U), copy.project(U))
    for a, b in zip(
        lazy.exact_terms(U, U, 0.1, 9.0, 1, 0.1), copy.exact_terms(U, U, 0.1, 9.0, 1, 0.1)
    ):
        same(a, b)
    same(
        lazy.subsample(np.random.RandomState(0), 100)._X,
        copy.subsample(np.random.RandomState(0), 100)._X,
    )
    state = np.array([seed + 1], dtype=np.uint64)
    drawn = lazy.draw(state.copy(), np.empty((50, 5)))
    same(drawn, copy.draw(state.copy(), np.empty((50, 5))))


@pytest.mark.parametrize("weighted", [False, True])
def test_kept_scaled_blocks_follow_the_rows(weighted, global_random_seed):
    # NumPy's forms keep each chunk's scaled blocks between evaluations of
    # the exact risk: a second evaluation gives the first's numbers, and a
    # rescaled or centred copy made after one (its rows differ) gives those
    # of a fresh object on its rows.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((3 * 4096 + 55, 5)) + 1.0
    w = rng.uniform(0.5, 2.0, X.shape[0]) if weighted else None
    U = np.linalg.qr(rng.standard_normal((5, 3)))[0]
    MU = rng.standard_normal((5, 3))

    def terms(rows):
        return rows.exact_terms(U, MU, 0.1, 9.0, 1, 0.1)

    def same(a, b):
        assert a[0] == b[0]
        np.testing.assert_array_equal(a[1], b[1])

    rows = DenseRows(X, w, scale=1.7, n_threads=1, compiled=False)
    first = terms(rows)
    same(terms(rows), first)
    same(first, terms(DenseRows(X, w, scale=1.7, n_threads=1, compiled=False)))
    rescaled, centred = rows.rescaled(0.6), rows.centred(X.mean(axis=0))
    same(terms(rescaled), terms(DenseRows(X, w, scale=0.6, n_threads=1, compiled=False)))
    fresh = DenseRows(X, w, scale=1.7, n_threads=1, compiled=False).centred(X.mean(axis=0))
    same(terms(centred), terms(fresh))
    assert not np.isclose(terms(rescaled)[0], first[0])


def test_a_centred_fit_never_copies_X(traced_peak):
    # The traced peak of a centred fit stays far below the size of X (the
    # centring happens chunk by chunk, the subsamples are small).
    X = make_mixture(400_000, 20, 3, noise=0.5, random_state=0)[0] + 2.0
    model = AttentionClustering(3, center=True, random_state=0)
    # Compile outside the traced fit: Numba's kernels run from _COMPILE_MIN_SIZE
    # numbers on (a smaller warm-up left the compile, 20 MB, in the trace).
    model.fit(X[:20000])
    _, peak = traced_peak(lambda: model.fit(X))
    assert peak < 0.5 * X.nbytes


def test_a_wide_float32_fit_holds_no_float64_copy_of_its_subsamples(traced_peak):
    # The principal subspace's rows (8192 of these 10000) were copied to
    # float64: the fit's peak was 2.46 times X (a float64 subsample and its
    # float32 take), 0.96 times X with the subsample read in float64 by
    # chunks (DenseRows._taken).
    X = make_mixture(10_000, 1000, 5, random_state=0)[0].astype(np.float32)
    model = AttentionClustering(5, random_state=0)
    model.fit(X)  # Numba's compile outside the trace
    _, peak = traced_peak(lambda: model.fit(X))
    assert peak < 1.25 * X.nbytes


def test_the_score_of_float32_rows_holds_one_float64_block(traced_peak):
    # score groups the rows by their extent about mean_ (unit_term_exponents):
    # a float32 block was cast to float64, then centred into another, two
    # float64 blocks of rows (2.0 chunks of _CHUNK_BYTES), where float64 rows
    # take one (1.05); centred as they are cast, float32 rows take one too.
    # One thread: each thread holds a block of its own.
    X = make_mixture(6000, 1000, 5, random_state=0)[0].astype(np.float32)
    model = AttentionClustering(5, random_state=0, n_threads=1).fit(X)
    model.score(X)
    _, peak = traced_peak(lambda: model.score(X))
    assert peak < 1.5 * _passes._CHUNK_BYTES


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_the_moments_pass_scales_and_adds_in_place(dtype, traced_peak):
    # One chunk of 600 rows of 300 features: the pass held the chunk's sums,
    # their copy divided by the largest diagonal entry, and the total beside
    # each term's temporary, 3 d x d float64 matrices at its peak. Scaled and
    # added in place, 2: the chunk's sums and the total (the same numbers).
    X = np.random.default_rng(0).standard_normal((600, 300)).astype(dtype)
    rows = rows_of(X, n_threads=1)
    _, peak = traced_peak(rows.moments)
    held = peak / (8 * 300 * 300)
    assert held < 2.5, held


@pytest.mark.parametrize(
    ("d", "compiled"),
    [(8, False), (8, True), (40, False), (40, True)],
    ids=["8-numpy", "8-numba", "40-numpy", "40-numba"],
)
def test_a_float32_subsample_is_read_in_float64_without_a_float64_copy(
    d, compiled, traced_peak, global_random_seed
):
    # DenseRows._taken: a float32 subsample (centred in float32, as the
    # fit's) is held as float32 and cast chunk by chunk, so that every pass
    # gives the numbers of a float64 copy of it, bit for bit (d = 40: the
    # moments' and E step's BLAS products, which float32 rows would form in
    # float32), while taking it holds the float32 rows alone.
    X, w, rng = _data(global_random_seed, n=6000, d=d, dtype=np.float32)
    offset = X[:100].mean(axis=0)
    rows = DenseRows(X, w, scale=1.7, n_threads=2, compiled=compiled).centred(offset)
    idx = np.sort(rng.choice(len(X), 4000, replace=False))
    sub, peak = traced_peak(lambda: rows._taken(idx))
    kept = idx[w[idx] > 0.0]
    copy64 = (X[kept] - offset.astype(np.float32)).astype(np.float64)
    # (A float64 copy held both: 1.5 times its size at least.)
    assert peak < copy64.nbytes
    ref = DenseRows(copy64, w[kept], scale=1.7, n_threads=2, compiled=compiled)
    assert sub.dtype == np.float64
    K = 4 if d == 8 else 8
    U = np.linalg.qr(rng.standard_normal((d, K)))[0]
    V = rng.standard_normal((d, 3))

    def passes(r):
        return [
            *r.moments(),
            r.moment_action(V),
            r.norm_moments(),
            *r.exact_terms(U, U * 0.9, 0.1, 9.0, 1, 0.2),
            *r.e_step(U, np.log(np.full(K, 1.0 / K)), 2.0),
            r.head_totals(U),
            *r.labels_and_counts(U.T, 1.3, np.zeros(K), origin=offset, scale=1.7),
            r.project(V),
            r.peak(),
            *r.centred(offset / 3).moments(),
            r.map_rows(lambda B: B[:, 0]),
        ]

    for got, want in zip(passes(sub), passes(ref), strict=True):
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype


def _far_apart_float32_rows(seed):
    # Rows near 3e38 and -1e38 beside one at -3e38: float32 rows whose
    # differences with their mean (9e37) reach 3.9e38, past float32's range.
    rng = np.random.default_rng(seed)
    centres = np.repeat([[3e38, 3e38], [-1e38, -1e38]], 11, axis=0)
    X = np.r_[centres + 1e37 * rng.standard_normal((22, 2)), [[-3e38, -3e38]]]
    return X.astype(np.float32)


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_float32_rows_centred_past_float32s_range_are_centred_in_float64(compiled):
    # The rows less the offset, formed in float32, overflowed: a
    # RuntimeWarning, then "Input X contains infinity" from the moments of
    # finite rows. Where they may pass float32's range (|x| + |offset|
    # beyond it) the offset is held in float64, as a float32 subsample's
    # (_taken), and the passes read the rows as a float64 copy's.
    X = _far_apart_float32_rows(0)
    offset = np.average(X.astype(np.float64), axis=0)
    ref = DenseRows(X.astype(np.float64), compiled=compiled).centred(offset)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rows = DenseRows(X, compiled=compiled).centred(offset)
        got = rows.moments()
    assert rows.dtype == np.float64
    for a, b in zip(got, ref.moments(), strict=True):
        np.testing.assert_array_equal(a, b)
    # Rows within float32's range about the offset stay float32.
    assert DenseRows(X / 4, compiled=compiled).centred(offset / 4).dtype == np.float32


def test_a_centred_fit_of_float32_rows_far_apart_is_the_float64_fit():
    X = _far_apart_float32_rows(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        single = AttentionClustering(2, center=True, random_state=0).fit(X)
    double = AttentionClustering(2, center=True, random_state=0).fit(X.astype(np.float64))
    assert single.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(single.labels_, double.labels_)
    assert len(set(single.labels_)) == 2


def test_a_float32_subsample_centred_again_is_taken_as_its_float64_copy(global_random_seed):
    # A float32 subsample is centred in float64, its passes' dtype: its own
    # subsamples and halves take the rows centred in float64, as those of a
    # float64 copy, not rounded to float32 after the centring (rows near 1000
    # centred by a mean: errors of 6e-5 on rows of unit size).
    X, w, rng = _data(global_random_seed, n=3000, d=6, dtype=np.float32)
    X = X + np.float32(1000.0)
    idx = np.sort(rng.choice(len(X), 1000, replace=False))
    sub = DenseRows(X, w)._taken(idx)
    kept = idx[w[idx] > 0.0]
    ref = DenseRows(X[kept].astype(np.float64), w[kept])
    offset = np.full(6, 1000.0) + rng.standard_normal(6) / 7
    V = rng.standard_normal((6, 2))
    for got, want in zip(sub.centred(offset).halves(), ref.centred(offset).halves(), strict=True):
        np.testing.assert_array_equal(got.project(V), want.project(V))
        np.testing.assert_array_equal(got.mean(), want.mean())
    got = sub.centred(offset)._taken(np.arange(0, len(kept), 3))
    want = ref.centred(offset)._taken(np.arange(0, len(kept), 3))
    np.testing.assert_array_equal(got.project(V), want.project(V))


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_halves_are_the_even_and_odd_rows_as_the_passes_see_them(kind, global_random_seed):
    # _Rows.halves: two disjoint halves whose passes are those of the even
    # and odd rows, centred and scaled as the whole.
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((9, 4))
    w = rng.uniform(0.5, 2.0, 9)
    mean = X.mean(axis=0)
    rows = rows_of(sp.csr_matrix(X) if kind == "sparse" else X, sample_weight=w)
    rows = rows.centred(mean).rescaled(2.0)
    even, odd = rows.halves()
    for half, part in ((even, slice(0, None, 2)), (odd, slice(1, None, 2))):
        np.testing.assert_allclose(half.sample_weight, w[part])
        V = rng.standard_normal((4, 2))
        np.testing.assert_allclose(half.project(V), (X[part] - mean) / 2.0 @ V, atol=1e-12)


@given(
    n=st.integers(1, 30),
    d=st.integers(1, 12),
    density=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    magnitude=st.sampled_from([1e-200, 1e-3, 1.0, 1e5, 1e200]),
    seed=st.integers(0, 2**32 - 1),
)
def test_unit_terms_of_sparse_rows_are_those_of_the_dense_rows(n, d, density, magnitude, seed):
    # The sparse block's q (the stored entries' (x_j - m_j)^2 and the other
    # columns' m_j^2, empty rows included) and its products equal the dense
    # block's, at any magnitude near the scale.
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.nnz) * magnitude
    C = rng.standard_normal((3, d))
    offset = rng.standard_normal(d) * magnitude * 0.1
    P, q = _passes.unit_terms(X, C, offset, magnitude)
    P_dense, q_dense = _passes.unit_terms(X.toarray(), C, offset, magnitude)
    np.testing.assert_allclose(P, P_dense, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(q, q_dense, rtol=1e-9, atol=1e-9)


@given(
    n=st.integers(1, 30),
    d=st.integers(1, 12),
    density=st.sampled_from([0.3, 0.9, 1.0]),
    far=st.sampled_from([1e3, 1e8]),
    seed=st.integers(0, 2**32 - 1),
)
def test_unit_terms_of_sparse_rows_near_a_far_mean(n, d, density, far, seed):
    # Rows about a mean far from the origin (far times their spread): q
    # expanded as ||x||^2 - 2 <x, m> + ||m||^2 cancelled (score_samples of
    # CSR rows 134 nats off the dense rows' at a mean of 1e8); each row's q
    # is now the dense q to the rounding of its own terms.
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    offset = far * rng.standard_normal(d)
    X.data = offset[X.indices] + rng.standard_normal(X.nnz)
    C = rng.standard_normal((3, d))
    P, q = _passes.unit_terms(X, C, offset, 1.0)
    P_dense, q_dense = _passes.unit_terms(X.toarray(), C, offset, 1.0)
    # A row's q from ||m||^2 less its stored columns' share is kept only when
    # q is above _CANCELLED ||m||^2: its d terms' rounding, d eps ||m||^2, is
    # then at most d eps / _CANCELLED of q (below, the mask sums it exactly).
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(q, q_dense, rtol=4 * d * eps / _passes._CANCELLED, atol=1e-12)
    # <x, c> - <m, c>: rounding of the products, about eps far |c| sqrt(d).
    np.testing.assert_allclose(P, P_dense, rtol=0, atol=1e-13 * far * np.sqrt(d) * np.abs(C).max())


# The draws of _spread_about_far_columns' rows (and a seed of the rest).
_FAR_COLUMNS = dict(
    scale_exponent=st.integers(-1000, 1000),
    far=st.sampled_from([0.0, 1.0, 1e20, 1e200, 1e300]),
    seed=st.integers(0, 2**32 - 1),
)


def _spread_about_far_columns(rng, scale_exponent, far):
    """``(centred, offset)``: 5 rows of 3 columns spread at ``2^scale_exponent``
    in the middle column about an offset ``(far, 0, -far)``, whose outer
    columns are constant (the rows are ``centred + offset``; x - offset exact)."""
    offset = np.array([far, 0.0, -far])
    centred = np.ldexp(rng.standard_normal((5, 3)), scale_exponent)
    centred[:, [0, 2]] = 0.0
    return centred, offset


def test_the_score_of_tight_rows_far_from_zero_is_finite():
    X = np.c_[np.full(20, 1e20), np.r_[np.zeros(10), np.ones(10)] * 1e-290]
    X[:, 1] += np.random.default_rng(0).uniform(0, 1e-300, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the mean dominates
        warnings.simplefilter("error", RuntimeWarning)
        model = AttentionClustering(2, random_state=0).fit(X)
        assert np.isfinite(model.score(X))
        assert np.all(np.isfinite(model.score_samples(X)))


@pytest.mark.parametrize("fmt", ["dense", "csr", "csc"])
@given(**_FAR_COLUMNS)
def test_unit_terms_are_those_of_the_centred_rows(fmt, scale_exponent, far, seed):
    # Rows at the offset plus a spread of about the scale: their terms are
    # those of the centred rows (exactly: the offset is the rows'
    # coordinate, x - m exact; sparse rows store the columns at +-far
    # centred, _centred_storage, and each row's one non-zero centred entry
    # makes both sums exact), whatever the offset's magnitude over the
    # scale. (Scaled first, x 2^-e and m 2^-e overflowed into inf - inf where
    # the scale is far below the rows: a constant column of 1e20 beside one
    # of spread 1e-290 gave AttentionClustering.score a RuntimeWarning and
    # score_samples NaN, dense rows first, then sparse ones; P and q were
    # NaN or inf.)
    rng = np.random.default_rng(seed)
    scale = math.ldexp(1.0, scale_exponent)
    centred, offset = _spread_about_far_columns(rng, scale_exponent, far)
    X = centred + offset
    X = X if fmt == "dense" else sp.csr_matrix(X).asformat(fmt)
    C = np.linalg.qr(rng.standard_normal((3, 2)))[0].T
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        P, q = _passes.unit_terms(X, C, offset, scale)
    P_ref, q_ref = _passes.unit_terms(centred, C, np.zeros(3), scale)
    np.testing.assert_array_equal(P, P_ref)
    np.testing.assert_array_equal(q, q_ref)


@pytest.mark.parametrize("fmt", ["dense", "csr", "csc"])
@given(**_FAR_COLUMNS)
@example(scale_exponent=-300, far=1e300, seed=0)  # the features' digits lost, always
def test_centred_projection_is_that_of_the_centred_rows(fmt, scale_exponent, far, seed):
    # The rows above (a spread of 2^scale_exponent about columns at +-far):
    # u P, the product of the rows centred, is that of the centred rows
    # themselves, whatever far is over the spread. (Divided by the power of
    # two of |x| and |offset| before they were centred, the spread beside
    # far = 1e300 went subnormal, or to zero, below 2^-100 or so: transform
    # lost its digits there.) The same numbers: x - offset is exact here.
    rng = np.random.default_rng(seed)
    centred, offset = _spread_about_far_columns(rng, scale_exponent, far)
    X = centred + offset
    X = X if fmt == "dense" else sp.csr_matrix(X).asformat(fmt)
    V = rng.standard_normal((3, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        P, u = _passes.centred_projection(X, offset, V)
    P_ref, u_ref = _passes.centred_projection(centred, np.zeros(3), V)
    # u P against u_ref P_ref at u_ref's power of two (exact where P's
    # digits are kept; u P itself may leave float64's range).
    shift = np.frexp(u)[1] - np.frexp(u_ref)[1]
    np.testing.assert_array_equal(np.ldexp(P, shift), P_ref)


@given(**_FAR_COLUMNS)
def test_sparse_unit_term_exponents_are_those_of_the_centred_rows(scale_exponent, far, seed):
    # The rows above as CSR: the extent of their terms, stored as
    # unit_terms stores them (unit_storage: the columns at +-far centred),
    # is that of the centred rows. (Taken of the rows as given, it was
    # far's: a constant column of 1e300 beside features of 1 read the rows
    # at 2^998 times the scale, where the features' squares underflow, and
    # a centred fit's score of CSR rows was -0.0 where the dense rows' is
    # -0.145.)
    rng = np.random.default_rng(seed)
    scale = math.ldexp(1.0, scale_exponent)
    centred, offset = _spread_about_far_columns(rng, scale_exponent, far)
    X = sp.csr_matrix(centred + offset)
    expected = _passes.unit_term_exponents(centred, np.zeros(3), scale)
    stored, mean = _passes.unit_storage(X, offset)
    np.testing.assert_array_equal(_passes.unit_term_exponents(stored, mean, scale), expected)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_rows_about_a_far_mean_score_as_dense_rows(fmt):
    # A centred fit on features of about 1 beside a constant column of
    # 1e300: the reconstruction error of the sparse rows is the dense rows'.
    rng = np.random.default_rng(0)
    labels = np.r_[np.zeros(10), np.ones(10)]
    X = np.c_[np.full(20, 1e300), labels + rng.uniform(0, 0.1, 20), rng.uniform(0, 0.1, 20)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the mean dominates
        warnings.simplefilter("error", RuntimeWarning)
        model = AttentionClustering(2, center=True, random_state=0).fit(X)
        expected = model.score(X)
        assert expected < -0.1
        np.testing.assert_allclose(
            model.score(sp.csr_matrix(X).asformat(fmt)), expected, rtol=1e-12
        )


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_tight_rows_far_from_zero_score_as_dense_rows(fmt):
    # The rows above as a sparse matrix: score_samples was -inf (their
    # terms inf - inf), where the dense rows' is about 1362.68 nats a row;
    # the posteriors came from the far rows' limit, not from the mixture.
    X = np.c_[np.full(20, 1e20), np.r_[np.zeros(10), np.ones(10)] * 1e-290]
    X[:, 1] += np.random.default_rng(0).uniform(0, 1e-300, 20)
    Z = sp.csr_matrix(X).asformat(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the mean dominates
        warnings.simplefilter("error", RuntimeWarning)
        model = AttentionClustering(2, random_state=0).fit(X)
        expected = model.score_samples(X)
        np.testing.assert_allclose(model.score_samples(Z), expected, rtol=1e-12)
        np.testing.assert_allclose(model.predict_proba(Z), model.predict_proba(X), atol=1e-12)
        np.testing.assert_array_equal(model.predict(Z), model.predict(X))
        np.testing.assert_array_equal(model.transform(Z), model.transform(X))
        assert model.score(Z) == model.score(X)
    np.testing.assert_allclose(expected, 1362.68, atol=0.01)


@given(
    n=st.integers(1, 40),
    d=st.integers(1, 8),
    density=st.sampled_from([0.0, 0.3, 0.97, 1.0]),
    far=st.sampled_from([0.0, 1.0, 1e8, 1e200]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_centred_storage_represents_the_centred_rows(n, d, density, far, weighted, seed):
    # math.md section 7, "Sparse rows about their mean": Y - 1 r^T is
    # X - 1 m^T entry for entry (the same subtractions as NumPy's), the
    # columns stored centred have r_j = 0 and a mean more than _FAR_MEAN
    # times their spread, and Y holds at most twice X's entries.
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    m = far * rng.standard_normal(d)
    X.data = m[X.indices] + rng.standard_normal(X.nnz) * rng.choice([1e-9, 1.0], d)[X.indices]
    w = rng.integers(0, 4, n).astype(float) if weighted else None
    if weighted:
        w[0] = max(w[0], 1.0)
    Y, r = _passes._centred_storage(X, m, w)
    np.testing.assert_array_equal(Y.toarray() - r, X.toarray() - m)
    stored = r != m
    assert Y.nnz <= 2 * X.nnz
    assert not np.any(r[stored])
    weights = np.ones(n) if w is None else w
    # At each column's own power of two (exact), whose squares stay in range.
    unit = np.ldexp(1.0, np.frexp(np.where(m != 0.0, m, 1.0))[1])
    mean_square = weights @ ((X.toarray() - m) / unit) ** 2 / weights.sum()
    assert np.all((m / unit)[stored] ** 2 > _passes._FAR_MEAN**2 * mean_square[stored])


@given(
    n=st.integers(1, 20),
    d=st.integers(1, 12),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    dtype=st.sampled_from([np.float64, np.float32]),
    exponent=st.integers(-1000, 1000),
    seed=st.integers(0, 2**32 - 1),
)
def test_unit_rows_at_any_magnitude_of_the_dtype(n, d, density, dtype, exponent, seed):
    # unit_rows(2^k X) is unit_rows(X) for every k at which 2^k X is normal
    # in the dtype (float32 rows up to about 1e38 and down to 1e-38, where
    # their squares overflow or underflow): the unit rows of a NumPy
    # reference in float64, zero rows kept zero, dense and sparse alike.
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.standard_normal(X.nnz) * 2.0 ** rng.integers(-4, 5, X.nnz)
    info = np.finfo(dtype)
    exponent = int(np.clip(exponent, info.minexp + 10, info.maxexp - 10))
    dense = X.toarray()
    norms = np.linalg.norm(dense, axis=1, keepdims=True)
    want = dense / np.where(norms > 0, norms, 1)
    scaled = (dense * 2.0**exponent).astype(dtype)
    for rows in (scaled, sp.csr_matrix(scaled)):
        got = _passes.unit_rows(rows)
        got = got.toarray() if sp.issparse(got) else got
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=8 * info.eps, atol=8 * info.eps)


@settings(max_examples=40)
@given(
    n=st.integers(0, 700),
    d=st.integers(0, 4),
    dtype=st.sampled_from([np.float64, np.float32]),
    specials=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_peaks_and_squared_norms_are_numpys_by_chunks(n, d, dtype, specials, seed):
    # Dense rows' peaks (max and minus min, no |x| copy) and squared norms
    # (chunk by chunk) are NumPy's max |x_ij| and sum x_ij^2 bit for bit, a
    # zero row's peak +0, across chunks of 256 rows (a small chunk size):
    # signed zeros, infinities and NaN included.
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * 2.0 ** rng.integers(-30, 30, (n, d))).astype(dtype)
    if specials and X.size:
        X.flat[rng.integers(0, X.size, 5)] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], 5)
    with monkeypatch_chunk_bytes(8 * 256):
        peaks = _passes.row_peaks(X)
        squares = _passes.row_squared_norms(X)
    want = np.max(np.abs(X), axis=1, initial=0.0)
    np.testing.assert_array_equal(peaks, want)
    assert peaks.dtype == dtype and not np.any(np.signbit(peaks[peaks == 0.0]))
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(squares, np.square(X).sum(axis=1))
    assert squares.dtype == dtype


@contextlib.contextmanager
def monkeypatch_chunk_bytes(size):
    """The pass layer's chunks at ``size`` bytes of float64 rows for the block."""
    saved = _passes._CHUNK_BYTES
    _passes._CHUNK_BYTES = size
    try:
        yield
    finally:
        _passes._CHUNK_BYTES = saved


@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "weighted"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_head_totals_by_blas_match_the_kernel(dtype, weighted, global_random_seed):
    # At d = 64, K = 8 the projections go by BLAS (_uses_blas): the totals
    # are the kernel's, up to the order of the sums, and the signs the
    # NumPy reference's.
    rng = np.random.default_rng(global_random_seed)
    d, K = 64, 8
    assert _passes._uses_blas(d, K)
    X = (rng.standard_normal((3000, d)) + 0.5).astype(dtype)
    w = rng.uniform(0.0, 2.0, 3000) if weighted else None
    U = rng.standard_normal((d, K))
    U /= np.linalg.norm(U, axis=0)
    totals = DenseRows(X, w, n_threads=2).head_totals(U)
    expected = np.zeros(K)
    _passes._kernels.head_totals(X, U, np.empty(0) if w is None else w, expected)
    np.testing.assert_allclose(totals, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(
        np.where(totals < 0, -1.0, 1.0), head_signs(X.astype(np.float64), U.T, w)
    )


@pytest.mark.parametrize("kind", ["dense", "float32", "sparse", "weighted", "free_norms", "dask"])
@pytest.mark.parametrize("regularization", ["pairwise", "product"])
def test_small_data_fits_as_the_compiled_kernels_do(
    kind, regularization, monkeypatch, global_random_seed
):
    # Data below _COMPILE_MIN_SIZE numbers runs NumPy's forms of the kernels
    # (_passes.compiles); the whole fit, forced onto Numba's, is the same to
    # rounding: centres, labels and soft assignments. Dask blocks run the
    # choice made for the whole array.
    X, _, _ = make_mixture(2000, 6, 3, noise=0.4, random_state=global_random_seed)
    size, w = X.size, None
    if kind == "float32":
        X = X.astype(np.float32)
    elif kind == "sparse":
        X[np.abs(X) < 0.3] = 0.0
        X = sp.csr_matrix(X)
        size = X.nnz
    elif kind == "weighted":
        w = np.random.default_rng(global_random_seed).uniform(0.0, 2.0, X.shape[0])
    elif kind == "dask":
        dask = pytest.importorskip("dask")
        X = pytest.importorskip("dask.array").from_array(X, chunks=(500, -1))
    params = dict(regularization=regularization, random_state=0)
    if kind == "free_norms":
        params["centroid_norms"] = "free"
    assert not _passes.compiles(size)

    def fit():
        model = AttentionClustering(3, **params).fit(X, sample_weight=w)
        return model, np.asarray(model.labels_), np.asarray(model.predict_proba(X))

    with dask.config.set(scheduler="sync") if kind == "dask" else contextlib.nullcontext():
        small, labels, proba = fit()
        monkeypatch.setattr(_passes, "_COMPILE_MIN_SIZE", 0)
        compiled, labels_compiled, proba_compiled = fit()
    np.testing.assert_allclose(small.cluster_centers_, compiled.cluster_centers_, atol=1e-9)
    np.testing.assert_array_equal(labels, labels_compiled)
    np.testing.assert_allclose(proba, proba_compiled, atol=1e-9)
    assert small.n_iter_ == compiled.n_iter_


# Paths of the E step and the labels: (compiled, d, K, dtype or "csr").
# The keys' factor beta / s and the labels' gain / s leave the dtype's range
# at rows 2^e X of scale 2^e s: beyond 2^1022 (float64) or 2^126 (float32,
# the BLAS path's keys) at e < 0, below their inverse at e > 0.
_FAR_PATHS = {
    "numpy": (False, 5, 3, np.float64),
    "fused": (True, 5, 3, np.float64),
    "blas": (True, 64, 10, np.float64),
    "blas-float32": (True, 64, 10, np.float32),
    "sparse": (False, 5, 3, "csr"),
}


@pytest.mark.parametrize(
    "path, side",
    # At the top of float64's range no moderate beta underflows far; float32
    # keys do (subnormal, losing digits), from beta / s below 2^-126.
    [(path, "tiny") for path in _FAR_PATHS] + [("blas-float32", "huge")],
)
def test_e_step_and_labels_at_the_ends_of_the_range(path, side):
    # Rows 2^e X seen at scale 2^e s give the unit-scale numbers of X at
    # scale s to the last bit: the E step's sums (at unit scale), counts and
    # log-likelihood, and the labels of the same rule (the origin 2^e o).
    # Before, the keys' factor overflowed (NaN sums) or, in float32,
    # underflowed (keys that lost their digits), and the labels' gain
    # overflowed (NaN scores, every row the first head's).
    compiled, d, K, kind = _FAR_PATHS[path]
    dtype = np.float32 if kind is np.float32 else np.float64
    top = np.finfo(dtype).maxexp
    # Entries of magnitude 1/4 to 4: the far rows stay normal numbers.
    rng = np.random.default_rng(0)
    X = rng.uniform(0.25, 4.0, (3000, d)) * rng.choice([-1.0, 1.0], (3000, d))
    X = X.astype(dtype)
    e, beta = (-(top - 30), 2.0**40) if side == "tiny" else (top - 30, 2.0**-40)
    far = np.ldexp(X, e)
    assert far.dtype == dtype and np.all(np.abs(far) >= np.finfo(dtype).tiny)
    scale = 3.0
    if kind == "csr":
        near_rows = SparseRows(sp.csr_matrix(X), scale=scale, compiled=compiled)
        far_rows = SparseRows(sp.csr_matrix(far), scale=np.ldexp(scale, e), compiled=compiled)
    else:
        near_rows = DenseRows(X, scale=scale, compiled=compiled)
        far_rows = DenseRows(far, scale=np.ldexp(scale, e), compiled=compiled)
    assert near_rows.compiled == compiled and _passes._uses_blas(d, K) == (d == 64)
    limit = 2.0 ** (top - 2)
    with np.errstate(over="ignore", under="ignore"):
        assert not 1.0 / limit <= beta / np.ldexp(scale, e) <= limit
    U = rng.standard_normal((d, K))
    U /= np.linalg.norm(U, axis=0)
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    for one, two in zip(near_rows.e_step(U, log_pi, beta), far_rows.e_step(U, log_pi, beta)):
        np.testing.assert_array_equal(one, two)
    # The labels' gain and bias on beta's scale: the scores decide them.
    gain = rng.uniform(0.5, 2.0, K) * beta
    bias = 0.1 * beta * np.log(rng.dirichlet(np.ones(K)))
    origin = X[:50].mean(axis=0).astype(np.float64)
    labels = near_rows.labels(U.T, gain, bias, origin, scale)
    assert len(np.unique(labels)) == K
    np.testing.assert_array_equal(
        far_rows.labels(U.T, gain, bias, np.ldexp(origin, e), np.ldexp(scale, e)), labels
    )


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "weighted"])
@pytest.mark.parametrize("centred", [False, True], ids=["origin", "centred"])
def test_sparse_passes_of_rows_whose_sums_overflow(centred, weighted, compiled):
    # Rows 2^e X near 2^1015, seen at scale 2^e s, give the passes of X at
    # scale s to the last bit: 3000 of them sum past float64, and the passes
    # that sum over rows take those sums at the scale of their largest entry
    # (_passes._huge_exponent), as the dense moments do. Before, the mean,
    # M V and the exact risk's gradient overflowed.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 6)) + [3.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    X, S = _sparse_copy(X, rng, density=0.7)
    e = 1015 - int(np.frexp(np.abs(X).max())[1])
    far = sp.csr_matrix(np.ldexp(X, e))
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(np.abs(far).sum(axis=0)))
    w = rng.uniform(0.0, 2.0, len(X)) if weighted else None
    scale = 3.0
    near_rows = SparseRows(S, w, scale=scale, compiled=compiled)
    far_rows = SparseRows(far, w, scale=np.ldexp(scale, e), compiled=compiled)
    if centred:
        m = X[:50].mean(axis=0)
        near_rows, far_rows = near_rows.centred(m), far_rows.centred(np.ldexp(m, e))
    for one, two in zip(near_rows.moments(), far_rows.moments()):
        np.testing.assert_array_equal(one, two)
    U = rng.standard_normal((6, 3))
    U /= np.linalg.norm(U, axis=0)
    MU = near_rows.moment_action(U)
    np.testing.assert_array_equal(far_rows.moment_action(U), MU)
    for reg in (0, 1, 2):
        for one, two in zip(
            near_rows.exact_terms(U, MU, 0.06, 49.0, reg, 0.3),
            far_rows.exact_terms(U, MU, 0.06, 49.0, reg, 0.3),
        ):
            np.testing.assert_array_equal(one, two)
    log_pi = np.log([0.2, 0.3, 0.5])
    for one, two in zip(near_rows.e_step(U, log_pi, 1.7), far_rows.e_step(U, log_pi, 1.7)):
        np.testing.assert_array_equal(one, two)
    # The heads' totals are of the rows as given: 2^e times, infinite where
    # that overflows, of the same signs.
    totals = near_rows.head_totals(U)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(far_rows.head_totals(U), np.ldexp(totals, e))


def test_sparse_head_totals_keep_their_sign_beyond_float64():
    # A head's wins whose running sum overflows before the later ones turn
    # it: summed as given, +inf (the head's sign read positive); at the
    # scale of the largest entry, 2^1023 (1 + 1 - 1 - 1 - 1) exactly.
    rows = SparseRows(sp.csr_matrix(np.ldexp([[1.0], [1.0], [-1.0], [-1.0], [-1.0]], 1023)))
    assert rows.head_totals(np.ones((1, 1)))[0] == -np.ldexp(1.0, 1023)


@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "weighted"])
def test_dense_mean_of_rows_whose_sums_overflow(small_chunks, weighted):
    # Rows 2^e X near 2^1020 give 2^e times the mean of X to the last bit:
    # the chunks' column sums exceed _HUGE_ROWS and are taken at the scale
    # of each chunk's largest entry (_passes._huge_exponent), as the
    # moments' pass takes them. Before, they were summed as given and the
    # mean overflowed.
    X, w, _ = _data(0, weighted=weighted)
    e = 1020 - int(np.frexp(np.abs(X).max())[1])
    far = np.ldexp(X, e)
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(far.sum(axis=0)))
    near_rows, far_rows = DenseRows(X, w, n_threads=2), DenseRows(far, w, n_threads=2)
    assert len(far_rows._bounds) == 4
    mean = near_rows.mean()
    np.testing.assert_allclose(mean, np.average(X, axis=0, weights=w), rtol=1e-12)
    np.testing.assert_array_equal(far_rows.mean(), np.ldexp(mean, e))
    np.testing.assert_array_equal(far_rows.mean(), far_rows.moments()[2])


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize(
    "kind, top",
    [("dense", 600), ("dense", 1018), ("sparse", 600), ("sparse", 800), ("sparse", 1018)],
    ids=str,
)
def test_fit_in_the_principal_subspace_of_rows_near_the_top_of_float64(kind, top, center):
    # 1000 features take the principal-subspace path. Rows whose largest
    # entry is near 2^top fit as X does, to the last bit: the subspace is
    # found on the subsample seen at the power of two above its largest
    # entry (_scale.principal_basis), the mean summed as the moments are.
    # Before, the products X^T (X Q) overflowed from entries of about 1e154
    # ("Eigenvalues did not converge"), and the mean near float64's largest
    # numbers; sparse rows between 2^512 and 2^900 overflowed in their
    # moment_action, which now forms its second product at the rows'
    # magnitude (OverflowError).
    X = make_mixture(600, 1000, 3, noise=0.1, random_state=0)[0]
    e = top - int(np.frexp(np.abs(X).max())[1])
    wrap = sp.csr_matrix if kind == "sparse" else np.asarray
    want = AttentionClustering(3, center=center, random_state=0).fit(wrap(X))
    got = AttentionClustering(3, center=center, random_state=0).fit(wrap(np.ldexp(X, e)))
    assert len(np.unique(want.labels_)) == 3
    np.testing.assert_array_equal(got.labels_, want.labels_)
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    np.testing.assert_array_equal(got.means_, np.ldexp(want.means_, e))
    np.testing.assert_array_equal(got.mean_, np.ldexp(want.mean_, e))


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("top", [1020, 1023])
def test_moments_whose_column_root_sum_of_squares_passes_float64(compiled, top):
    # Many rows with entries near 2^top: a column's root sum of squares over
    # a chunk passes float64's largest number, while the second moment (a
    # mean) does not. The scale c is returned 2^j times smaller and M 4^j
    # times larger: c^2 M is 4^e times X's. Before, c was infinite and M
    # zero (a fit of such rows: "Eigenvalues did not converge").
    X, w, _ = _data(0)
    X = np.repeat(X, 20, axis=0)
    w = np.repeat(w, 20)
    e = top - int(np.frexp(np.abs(X).max())[1])
    near = DenseRows(X, w, compiled=compiled).moments()
    far = DenseRows(np.ldexp(X, e), w, compiled=compiled).moments()
    assert np.isfinite(far[0]) and np.all(np.isfinite(far[1]))
    j = int(np.frexp(far[0])[1]) - int(np.frexp(near[0])[1]) - e  # c's lost powers of two
    assert j < 0
    np.testing.assert_allclose(np.ldexp(far[1], 2 * j), near[1], rtol=1e-12)
    np.testing.assert_allclose(far[2], np.ldexp(near[2], e), rtol=1e-12)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("n, d, top", [(20000, 10, 1022), (600, 1200, 1022)], ids=str)
def test_fit_of_many_rows_near_the_top_of_float64(kind, n, d, top):
    # 20000 rows of 10 features near 2^1022 (their columns' sums of squares
    # over a chunk pass float64), and 600 rows of 1200 features there (the
    # principal subspace: their coordinates hold what the features spread
    # over): the labels and centres of X. Before, dense rows failed in both
    # and sparse rows in the subspace ("Eigenvalues did not converge").
    X = make_mixture(n, d, 3, noise=0.1, random_state=0)[0]
    e = top - int(np.frexp(np.abs(X).max())[1])
    wrap = sp.csr_matrix if kind == "sparse" else np.asarray
    want = AttentionClustering(3, random_state=0).fit(wrap(X))
    got = AttentionClustering(3, random_state=0).fit(wrap(np.ldexp(X, e)))
    np.testing.assert_array_equal(got.labels_, want.labels_)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_rows_whose_norms_pass_float64_at_a_finite_scale_fit_as_x(kind):
    # A fifth of the rows near 0.95e308 (1, 1, 1, 1, 0), norms 1.9e308, the
    # rest near 1e308 e_5: every entry and the scale finite. The start's
    # projections and the heads' totals were taken at the rows' magnitude
    # (inf - inf in the rotation: "Initial heads must be finite and
    # non-zero"); beyond 2^900 they are now taken at the scale's power of
    # two, exactly.
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.2).astype(int)
    X = np.where(y[:, None] == 1, [0.95, 0.95, 0.95, 0.95, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0])
    X = X + 1e-3 * rng.standard_normal((400, 5))
    assert np.all(np.isfinite(X * 1e308))
    assert not np.all(np.isfinite(np.linalg.norm(X * 1e308, axis=1)))
    wrap = sp.csr_matrix if kind == "sparse" else np.asarray
    want = AttentionClustering(2, random_state=0).fit(wrap(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = AttentionClustering(2, random_state=0).fit(wrap(X * 1e308))
    np.testing.assert_array_equal(got.labels_, want.labels_)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("n, d, top", [(20000, 10, 1024), (600, 1200, 1023)], ids=str)
def test_rows_beyond_float64_are_refused_with_their_reason(kind, n, d, top):
    # Rows whose norms float64 cannot hold (20000 x 10 with entries near
    # 2^1023; 1200 features near 2^1022, whose coordinates in the principal
    # subspace overflow): no scale of the fit holds them. Before: "Initial
    # heads must be finite", "Input X contains infinity" (it holds none),
    # or, from entries of 2^1023, labels of a subspace found on rows divided
    # by infinity (2^1024, the power of two above them).
    X = make_mixture(n, d, 3, noise=0.1, random_state=0)[0]
    X = np.ldexp(X, top - int(np.frexp(np.abs(X).max())[1]))
    assert np.all(np.isfinite(X))
    wrap = sp.csr_matrix if kind == "sparse" else np.asarray
    with pytest.raises(ValueError, match="by more than float64's largest number.*2\\*\\*-k"):
        AttentionClustering(3, random_state=0).fit(wrap(X))


# --- Memory of the methods on sparse rows -----------------------------------


def _csr_bytes(X):
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_methods_work_by_chunks_of_rows(dtype, monkeypatch, traced_peak):
    # Their outputs are n x K (or n); each once copied the whole matrix in
    # float64 and squared its non-zeros at once: 1.7 X for float64, 3.5 X for
    # float32. A chunk's copy is now the temporaries'. float32 rows were then
    # held in float64, a copy of their non-zeros and indices (1.2 X of data
    # and indices for predict, 1.5 X for score); each chunk is now read in
    # float64 as a pass takes it (0.2 X, and 0.5 X for score).
    X = sp.random(4000, 20000, density=0.01, format="csr", random_state=0, dtype=dtype)
    model = AttentionClustering(3, random_state=0).fit(X)
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 1 << 16)  # chunks of 40 rows
    bound = (0.35 if dtype == np.float64 else 0.75) * _csr_bytes(X)
    for method in ("predict", "predict_proba", "score_samples", "score"):
        _, peak = traced_peak(functools.partial(getattr(model, method), X))
        assert peak < bound, method


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_transform_holds_the_dense_output_once(dtype, traced_peak):
    # transform's n x d output is dense; it was computed for the whole matrix
    # in float64 and then cast: 3 times the float32 output.
    X = sp.random(1000, 20000, density=0.01, format="csr", random_state=0, dtype=dtype)
    model = AttentionClustering(3, random_state=0).fit(X)
    out, peak = traced_peak(lambda: model.transform(X))
    assert out.dtype == dtype
    assert peak < 1.15 * out.nbytes + 2 * _csr_bytes(X)


def test_default_threads_follow_the_openmp_limit():
    # n_threads=None took every core the process may run on, whatever
    # OMP_NUM_THREADS or threadpoolctl said: a search's n_jobs workers (joblib
    # limits each to its share) each ran a pool of all the cores.

    from threadpoolctl import threadpool_limits

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cores or 1) < 2:
        pytest.skip("one core: every limit is one thread")
    with threadpool_limits(limits=1, user_api="openmp"):
        assert _passes.usable_threads() == 1
        with DenseRows(np.ones((8, 2))) as rows:
            assert rows.n_threads == 1
    assert _passes.usable_threads(3) == 3


def test_overlapping_fits_in_threads_restore_the_blas_threads():
    # Each fit limited BLAS to one thread and restored what it found: a fit
    # that started second and ended last restored one thread for good.
    from threadpoolctl import ThreadpoolController, threadpool_limits

    controller = ThreadpoolController().select(user_api="blas")
    if not controller.lib_controllers:
        pytest.skip("no BLAS library to limit")
    with threadpool_limits(limits=2, user_api="blas"):
        first, second = _passes.one_blas_thread(), _passes.one_blas_thread()
        first.__enter__()
        second.__enter__()
        assert {lib["num_threads"] for lib in controller.info()} == {1}
        first.__exit__(None, None, None)
        assert {lib["num_threads"] for lib in controller.info()} == {1}
        second.__exit__(None, None, None)
        assert {lib["num_threads"] for lib in controller.info()} == {2}


def _blas_threads_set_to_two(controller):
    """BLAS's count set to two threads, no thread holding the right to set
    it (threadpoolctl 3.8's rule for an OpenBLAS running its own threads)."""
    controller.limit(limits=2, user_api="blas")
    _release_blas_control()


@pytest.fixture
def blas_controller():
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController().select(user_api="blas")
    if not controller.lib_controllers:
        pytest.skip("no BLAS library to limit")
    before = controller.info()
    _blas_threads_set_to_two(controller)
    yield controller
    _release_blas_control()  # (a failed test may leave it to another thread)
    for lib, info in zip(controller.lib_controllers, before):
        lib.set_num_threads(info["num_threads"])
    _release_blas_control()


def _release_blas_control():
    import threadpoolctl

    clear = getattr(threadpoolctl.OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


@pytest.fixture
def one_blas_setter(blas_controller):
    """``blas_controller``, where one thread at a time may set the count:
    OpenBLAS on its own threads, under threadpoolctl 3.8's rule."""
    import threadpoolctl

    if not hasattr(threadpoolctl.OpenBLASController, "clear_controlling_thread") or any(
        lib["internal_api"] != "openblas" or lib.get("threading_layer") == "openmp"
        for lib in blas_controller.info()
    ):
        pytest.skip("any thread may set the BLAS count here")
    return blas_controller


def _blas_threads(controller):
    return {lib["num_threads"] for lib in controller.info()}


def test_a_fit_in_a_thread_after_one_in_the_main_thread_has_blas_on_one_thread(blas_controller):
    # threadpoolctl 3.8 lets the first thread to set OpenBLAS's count set it
    # until it gives that up: the main thread's first fit kept it, and every
    # later fit in another thread (a web server's, a GUI's) ran BLAS on all
    # its threads, its sums in another order than the main thread's.
    with _passes.one_blas_thread():
        pass

    def in_a_thread():
        with _passes.one_blas_thread():
            return _blas_threads(blas_controller)

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(in_a_thread).result() == {1}
    assert _blas_threads(blas_controller) == {2}


def test_fits_overlapping_in_threads_restore_blas_from_the_thread_that_ends_last(blas_controller):
    # The first fit limits the count, the last restores it: in another
    # thread than the first's, which held the right to set it.
    from threadpoolctl import threadpool_limits

    context = _passes.one_blas_thread()
    with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
        first.submit(context.__enter__).result()
        second.submit(context.__enter__).result()
        first.submit(context.__exit__, None, None, None).result()
        assert _blas_threads(blas_controller) == {1}
        second.submit(context.__exit__, None, None, None).result()
        assert _blas_threads(blas_controller) == {2}

        def the_callers_own_limit():  # no thread of a fit holds the right
            with threadpool_limits(limits=1, user_api="blas"):
                return _blas_threads(blas_controller)

        assert first.submit(the_callers_own_limit).result() == {1}
        assert second.submit(the_callers_own_limit).result() == {1}


def _another_thread_s_limit(controller, limits):
    """BLAS's count while another thread sets it in a block of its own."""
    from threadpoolctl import threadpool_limits

    def block():
        with threadpool_limits(limits=limits, user_api="blas"):
            return _blas_threads(controller)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(block).result()


def test_nested_contexts_keep_blas_on_one_thread_until_the_outermost_ends(one_blas_setter):
    # A fit's seeding runs in a context of its own, inside the fit's: its
    # end gave up the right to set the count, and another thread's block
    # set BLAS on two threads for the rest of the fit.
    outer, inner = _passes.one_blas_thread(), _passes.one_blas_thread()
    with outer:
        with inner:
            pass
        assert _another_thread_s_limit(one_blas_setter, 2) == {1}
    assert _blas_threads(one_blas_setter) == {2}
    assert _another_thread_s_limit(one_blas_setter, 1) == {1}


def test_a_fit_inside_the_callers_own_limit_keeps_the_callers_right(one_blas_setter):
    # The fit gave up the right its thread held by the caller's block:
    # another thread then set the count while the block was still open.
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        with _passes.one_blas_thread():
            pass
        assert _another_thread_s_limit(one_blas_setter, 2) == {1}
    assert _blas_threads(one_blas_setter) == {2}


def test_a_fit_inside_an_openmp_only_block_gives_up_the_blas_right(one_blas_setter):
    # A thread inside any threadpool_limits block (one of OpenMP's alone)
    # was taken to hold BLAS's right and kept the one its fit took: a later
    # fit in another thread ran BLAS on all its threads.
    from threadpoolctl import threadpool_limits

    def a_fit():
        with _passes.one_blas_thread():
            return _blas_threads(one_blas_setter)

    with threadpool_limits(limits=1, user_api="openmp"):
        a_fit()
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(a_fit).result() == {1}
    assert _blas_threads(one_blas_setter) == {2}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_during_a_fit_has_the_processs_blas_threads():
    # The child inherited the fit's limit of one thread, and its own first
    # fit took that for the process's count and restored it.
    from threadpoolctl import ThreadpoolController, threadpool_limits

    controller = ThreadpoolController().select(user_api="blas")
    if not controller.lib_controllers:
        pytest.skip("no BLAS library to limit")
    with threadpool_limits(limits=2, user_api="blas"), _passes.one_blas_thread():
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when BLAS is back at two threads
            threads = {lib["num_threads"] for lib in controller.info()}
            with _passes.one_blas_thread():
                pass
            after = {lib["num_threads"] for lib in controller.info()}
            os._exit(0 if threads == after == {2} else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_sparse_predict_works_by_chunks_of_rows(monkeypatch, traced_peak):
    # The labels' scores (X C^T, less the offset's, then gain * raw + bias:
    # three n x K float64 arrays) were formed for all rows at once: at K =
    # 50 a peak of 10 times X's non-zeros for an output of n integers. They
    # are a chunk's now, as predict_proba's.
    X = sp.random(20000, 2000, density=0.005, format="csr", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AttentionClustering(50, random_state=0).fit(X[:3000])
    expected = model.predict(X)
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 1 << 16)
    labels, peak = traced_peak(lambda: model.predict(X))
    np.testing.assert_array_equal(labels, expected)
    assert peak < _csr_bytes(X) + labels.nbytes  # (0.77 X measured; 10 X before)


def test_centred_storage_of_far_columns_that_rows_of_weight_zero_lack_is_capped():
    # Far columns are chosen by the rows of positive weight, but every row
    # lacking one stores -m_j, rows of weight zero too: 100 weighted rows
    # holding 20 columns about 1e8 beside 5000 unweighted rows of 2 entries
    # grew Y to 100000 entries (60 times X's). The far columns of fewest
    # gaps are stored centred while the gaps stay within X's entries, and
    # the others are named in a warning (their spread may be lost).
    rng = np.random.default_rng(0)
    held = 1e8 + rng.standard_normal((100, 20))
    X = sp.vstack(
        [sp.csr_matrix(held), sp.random(5000, 20, density=0.1, format="csr", random_state=1)],
        format="csr",
    )
    w = np.r_[np.ones(100), np.zeros(5000)]
    m = w @ X.toarray() / w.sum()
    with pytest.warns(UserWarning, match="the rows of weight zero lacking them are too many"):
        Y, r = _passes._centred_storage(X, m, w)
    assert Y.nnz <= 2 * X.nnz
    np.testing.assert_array_equal(Y.toarray() - r, X.toarray() - m)


@pytest.mark.parametrize("n_columns", [1, 7, 300])
def test_column_counts_are_bincount_s_by_chunks(n_columns, monkeypatch):
    # Sparse centring counted each column's entries by np.bincount of all
    # the indices at once, which casts them to 64 bits: a copy twice the
    # int32 indices' size. By chunks now, the same integer counts.
    rng = np.random.default_rng(0)
    indices = rng.integers(0, n_columns, 10_000).astype(np.int32)
    monkeypatch.setattr(_passes, "_CHUNK_BYTES", 8 * 999)
    np.testing.assert_array_equal(
        _passes._column_counts(indices, n_columns), np.bincount(indices, minlength=n_columns)
    )
    assert _passes._column_counts(indices[:0], n_columns).tolist() == [0] * n_columns


def test_column_counts_hold_no_64_bit_copy_of_all_the_indices(traced_peak):
    indices = np.random.default_rng(0).integers(0, 100, 2_000_000).astype(np.int32)
    counts, peak = traced_peak(lambda: _passes._column_counts(indices, 100))
    assert counts.sum() == indices.size
    assert peak < 0.75 * indices.nbytes  # (a chunk's cast; all of them: 2 x)


@given(
    n=st.integers(1, 40),
    d=st.integers(1, 30),
    magnitude=st.integers(-30, 30),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_unit_rows_in_place_are_the_unit_rows_of_a_copy(n, d, magnitude, density, seed, dtype):
    # copy=False divides rows the caller owns in place (count_clusters'
    # centred rows, 80 MB of 2000 TF-IDF documents): the same numbers, bit
    # for bit, dense (zero rows included) and sparse.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * 10.0**magnitude * (rng.random((n, d)) < density)
    X = X.astype(dtype)
    expected = _passes.unit_rows(X)
    owned = X.copy()
    got = _passes.unit_rows(owned, copy=False)
    assert got is owned and got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    sparse = sp.csr_matrix(X)
    expected = _passes.unit_rows(sparse)
    got = _passes.unit_rows(sparse, copy=False)
    assert got is sparse
    np.testing.assert_array_equal(got.toarray(), expected.toarray())


def test_unit_rows_of_a_copy_leave_the_rows_as_they_are():
    X = np.array([[3.0, 4.0], [0.0, 0.0]])
    sparse = sp.csr_matrix(X)
    _passes.unit_rows(X)
    _passes.unit_rows(sparse)
    np.testing.assert_array_equal(X, [[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_array_equal(sparse.toarray(), X)
