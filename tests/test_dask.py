"""Dask input on a real distributed.LocalCluster: same fit as NumPy, lazy outputs, faults.

The cluster has 2 worker processes of 1 thread each, started once for the
module and closed at its end. Arrays are persisted on the workers first (as
a user would data that fit in the cluster's memory), so each pass ships a
small graph rather than the data.
"""

import functools
import os
import re
import signal
import threading
import time
import uuid
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.pipeline import make_pipeline

from attention_cluster import (
    AttentionClustering,
    InContextQuantizer,
    InvalidParameterError,
    SelfAttentionDynamics,
    _clustering,
    _mixture,
    _passes,
    choose_n_clusters,
)
from attention_cluster._passes import DaskRows, DenseRows
from attention_cluster._validation import gathered
from attention_cluster.datasets import make_mixture

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
Callback = pytest.importorskip("dask.callbacks").Callback


class _Computations(Callback):
    """Counts the Dask computations started while it is active (``with``)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def _start(self, dsk):
        self.count += 1


distributed = pytest.importorskip("distributed")

# Blocks add their partial sums in another grouping than the NumPy path's
# chunks: the centres agree up to rounding (docs/scaling.md). Float64 fits
# were measured 2e-12 apart at most.
ATOL = {np.float64: 1e-9, np.float32: 1e-4}


def _on_cluster(X, chunks):
    return da.from_array(X, chunks=chunks).persist()


@pytest.fixture(scope="module")
def mixture():
    # More rows than the exact solver's subsample, so the rows are pulled.
    return make_mixture(40_000, 6, 2, noise=0.6, random_state=0)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_every_pass_matches_dense_rows(weighted, global_random_seed):
    # The Dask backend against the NumPy one, pass by pass (local scheduler).
    import dask

    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((3000, 5))
    w = rng.integers(0, 3, size=3000).astype(float) if weighted else None
    dense = DenseRows(X, w, scale=2.0, n_threads=1)
    Xd = da.from_array(X, chunks=(700, -1))
    wd = None if w is None else da.from_array(w, chunks=(Xd.chunks[0],))
    total = dense.total_weight
    U = np.linalg.qr(rng.standard_normal((5, 2)))[0]
    with dask.config.set(scheduler="sync"):
        lazy = DaskRows(Xd, wd, scale=2.0, total_weight=total, n_weighted=dense.n_weighted)
        # The scale c depends on the chunks; c^2 (M / c^2) does not.
        c, M = lazy.scaled_second_moment()
        pairs = [
            (c * c * M, dense.second_moment()),
            (lazy.moment_action(U), dense.moment_action(U)),
            (lazy.norm_moments(), dense.norm_moments()),
            (
                lazy.exact_terms(U, U, 0.1, 9.0, 1, 0.2)[1],
                dense.exact_terms(U, U, 0.1, 9.0, 1, 0.2)[1],
            ),
            (
                lazy.e_step(U, np.log([0.3, 0.7]), 1.5)[0],
                dense.e_step(U, np.log([0.3, 0.7]), 1.5)[0],
            ),
            (lazy.head_totals(U), dense.head_totals(U)),
        ]
        for a, b in pairs:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        gains = np.array([0.5, 2.0])  # one per head
        np.testing.assert_array_equal(
            lazy.labels(U.T, gains, np.zeros(2)).compute(), dense.labels(U.T, gains, np.zeros(2))
        )
        # The rule's origin and scale reach each block (the far rows' terms:
        # tests/test_passes.py).
        rule = (U.T, gains, np.log([0.3, 0.7]), X[:10].mean(axis=0), 0.25)
        np.testing.assert_array_equal(lazy.labels(*rule).compute(), dense.labels(*rule))
        sub_lazy = lazy.subsample(np.random.RandomState(0), 500)
        sub_dense = dense.subsample(np.random.RandomState(0), 500)
        np.testing.assert_array_equal(sub_lazy.project(U), sub_dense.project(U))
        assert lazy.n_passes == 7


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_subsample_above_the_client_budget_stays_on_the_workers(
    client, monkeypatch, weighted, global_random_seed
):
    # A subsample of more rows than the client holds is persisted on the
    # workers: the same rows, weights and passes as the NumPy subsample, and
    # the random state moves on as it does there.
    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 1000)
    rng = np.random.default_rng(global_random_seed)
    X = rng.standard_normal((20_000, 5))
    w = rng.integers(0, 3, size=len(X)).astype(float) if weighted else None
    dense = DenseRows(X, w, scale=2.0, n_threads=1).centred(np.full(5, 0.25))
    Xd = _on_cluster(X, (3001, -1))
    wd = None if w is None else _on_cluster(w, (Xd.chunks[0],))
    lazy = DaskRows(Xd, wd, scale=2.0).centred(np.full(5, 0.25))
    seeds = np.random.RandomState(global_random_seed), np.random.RandomState(global_random_seed)
    sub_dense, sub_lazy = dense.subsample(seeds[0], 5000), lazy.subsample(seeds[1], 5000)
    assert isinstance(sub_lazy, DaskRows)
    # Persisted: the subsample's blocks are futures on the workers.
    assert distributed.futures_of(sub_lazy._X)
    assert sub_lazy.n_samples == sub_dense.n_samples > 1000
    assert sub_lazy.total_weight == sub_dense.total_weight
    assert seeds[0].randint(2**31) == seeds[1].randint(2**31)
    U = np.linalg.qr(rng.standard_normal((5, 2)))[0]
    for a, b in [
        (sub_lazy.e_step(U, np.log([0.3, 0.7]), 1.5), sub_dense.e_step(U, np.log([0.3, 0.7]), 1.5)),
        (sub_lazy.norm_moments(), sub_dense.norm_moments()),
        (sub_lazy.head_totals(U), sub_dense.head_totals(U)),
        (sub_lazy.second_moment(), sub_dense.second_moment()),
    ]:
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    # At most the budget: pulled to the client, the same rows.
    small = lazy.subsample(np.random.RandomState(1), 900)
    assert isinstance(small, DenseRows)
    np.testing.assert_array_equal(
        small.project(U), dense.subsample(np.random.RandomState(1), 900).project(U)
    )


def _numbers(out):
    """How many numbers a computation brought to the client (a persisted collection: one)."""
    if isinstance(out, np.ndarray):
        return out.size
    if isinstance(out, (tuple, list)):
        return sum(_numbers(part) for part in out)
    return 1


def test_a_draw_kept_on_the_workers_sends_only_counts_to_the_client(
    client, monkeypatch, global_random_seed
):
    # The rows of a draw larger than the client's budget are kept on the
    # workers; the client pulled their keys (a float32 per row: 1 GiB at
    # 1.1e9 rows) to count each block's rows below a subsample's fraction.
    # The blocks count them: only the counts come back, and the subsamples
    # are the NumPy backend's.
    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 1000)
    X = np.random.default_rng(global_random_seed).standard_normal((20_000, 5))
    dense, lazy = DenseRows(X, n_threads=1), DaskRows(_on_cluster(X, (3001, -1)))
    for rows in (dense, lazy):
        rows.prepare_subsamples(7, 10_000)
    pulled = []
    counted = DaskRows._counted

    def recorded(self, name, run, *args, read=True):
        out = counted(self, name, run, *args, read=read)
        pulled.append(_numbers(out))
        return out

    with monkeypatch.context() as m:
        m.setattr(DaskRows, "_counted", recorded)
        subsamples = [lazy.subsample(np.random.RandomState(0), size) for size in (5000, 2500)]
    assert lazy._nested.taken.parts is not None
    assert max(pulled) <= lazy._X.numblocks[0]
    small = lazy.subsample(np.random.RandomState(0), 800)
    for size, sub in zip((5000, 2500, 800), subsamples + [small]):
        rows = sub._X.compute() if isinstance(sub, DaskRows) else sub._X
        np.testing.assert_array_equal(rows, dense.subsample(np.random.RandomState(0), size)._X)
    assert isinstance(subsamples[1], DaskRows) and isinstance(small, DenseRows)


def test_fit_with_subsamples_on_the_workers_as_numpy(client, monkeypatch, capsys):
    # The EM's subsample stages above the client's budget run on the
    # workers; the fit equals the NumPy fit (budget and first stage made
    # small, the budget still above the exact solver's subsample of about 16384 rows,
    # whose size varies with the draw).
    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 18_000)
    monkeypatch.setattr(_mixture, "_SUBSAMPLE", 20_000)
    monkeypatch.setattr(_mixture, "_MIN_SUBSAMPLE", 20_000)
    X = make_mixture(100_000, 6, 2, noise=0.8, random_state=2)[0]
    dense = AttentionClustering(random_state=0).fit(X)
    lazy = AttentionClustering(random_state=0, verbose=1).fit(_on_cluster(X, (12_500, -1)))
    out = capsys.readouterr().out
    assert "kept on the workers)" in out and "(e_step on the subsample of" in out
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)
    assert lazy.refine_n_iter_ == dense.refine_n_iter_


@pytest.mark.parametrize("n_clusters", [2, "auto"])
def test_few_weighted_rows_of_many_are_pulled_as_numpy_takes_them(client, monkeypatch, n_clusters):
    # More rows than the client holds, of which at most a subsample's have
    # positive weight: the subsample was X itself, kept on the workers, and
    # the start, which projects its rows in memory, raised AttributeError
    # ("auto": TypeError). The rows of positive weight are pulled, and the
    # fit is NumPy's.
    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 18_000)
    X = make_mixture(40_000, 2, 2, noise=0.5, random_state=6)[0].astype(np.float32)
    w = np.zeros(len(X))
    w[::100] = 1.0 + np.arange(400) % 3
    dense = AttentionClustering(n_clusters, random_state=0).fit(X, sample_weight=w)
    lazy = AttentionClustering(n_clusters, random_state=0).fit(
        _on_cluster(X, (10_000, -1)), sample_weight=_on_cluster(w, 10_000)
    )
    assert lazy.n_clusters_ == dense.n_clusters_
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float32])
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)


def test_more_tokens_than_the_client_holds_are_refused(monkeypatch):
    # choose_n_clusters on Dask rows with max_samples whose draw of tokens
    # exceeds the rows a fit brings to the client: the draw stayed a Dask
    # array and the dynamics failed on it ("could not broadcast input
    # array"). The budget stays above the exact solver's subsample.
    from attention_cluster import choose_n_clusters

    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 18_000)
    X = make_mixture(40_000, 4, 3, noise=0.3, random_state=0)[0]
    lazy = da.from_array(X, chunks=10_000)
    for max_samples, drawn in ((50_000, 40_000), (9000, 18_016)):
        with pytest.raises(ValueError, match=rf"max_samples={max_samples} .* draws {drawn} rows"):
            choose_n_clusters(lazy, AttentionClustering(), max_samples=max_samples)
    options = {"n_clusters_range": (2, 3, 4), "max_samples": 500}
    small = choose_n_clusters(lazy, AttentionClustering(random_state=0), **options)
    assert (
        small.n_clusters
        == choose_n_clusters(X, AttentionClustering(random_state=0), **options).n_clusters
    )


def _read_block(X, lo, hi):
    return X[lo:hi].copy()


def test_fit_of_a_lazily_read_array_with_a_subsample_on_the_workers(client, monkeypatch, capsys):
    # Blocks made by tasks (as a file read lazily: from_delayed, then
    # concatenate) and not persisted: the passes over X after a subsample
    # was persisted on the workers resubmit X's tasks, which the scheduler
    # still knows; they must not deadlock (they did when the graphs were
    # optimised differently from pass to pass). The fit equals NumPy's.
    import dask

    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 18_000)
    monkeypatch.setattr(_passes, "_HOLD_FRACTION", 0.0)  # X read at each pass
    monkeypatch.setattr(_mixture, "_SUBSAMPLE", 20_000)
    monkeypatch.setattr(_mixture, "_MIN_SUBSAMPLE", 20_000)
    X = make_mixture(100_000, 6, 2, noise=0.8, random_state=3)[0]
    blocks = [
        da.from_delayed(dask.delayed(_read_block)(X, lo, lo + 12_500), (12_500, 6), X.dtype)
        for lo in range(0, len(X), 12_500)
    ]
    result = {}

    def fit():
        result["model"] = AttentionClustering(random_state=0, verbose=1).fit(da.concatenate(blocks))

    worker = threading.Thread(target=fit, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the Dask fit did not finish: a deadlock"
    assert "kept on the workers)" in capsys.readouterr().out
    dense = AttentionClustering(random_state=0).fit(X)
    np.testing.assert_allclose(
        result["model"].cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64]
    )


@pytest.mark.parametrize(
    "params, dtype",
    [
        ({"solver": "full"}, np.float64),
        ({"solver": "full"}, np.float32),
        ({"solver": "full", "refine": None}, np.float64),
        ({"solver": "psgd"}, np.float64),
    ],
    ids=["full-em", "full-em-float32", "full", "psgd"],
)
def test_same_fit_as_numpy(client, mixture, params, dtype):
    X = mixture[0].astype(dtype)
    dense = AttentionClustering(random_state=0, **params).fit(X)
    lazy = AttentionClustering(random_state=0, **params).fit(_on_cluster(X, (7000, -1)))
    assert lazy.cluster_centers_.dtype == dtype
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[dtype])
    # labels_ is lazy, as dask-ml's; computed it equals the NumPy fit's.
    assert isinstance(lazy.labels_, da.Array)
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)
    np.testing.assert_allclose(lazy.weights_, dense.weights_, atol=ATOL[dtype])
    assert lazy.scale_ == pytest.approx(dense.scale_, rel=1e-12)


def test_the_same_blocks_give_the_same_fit(client, mixture):
    # The user guide's "Reproducibility": a fit of X in the same blocks is
    # the same on every call, bit for bit, whichever worker computes which
    # block; other blocks group the partial sums otherwise, and the centres
    # agree to rounding (test_same_fit_as_numpy).
    X = mixture[0]
    fits = [AttentionClustering(random_state=0).fit(_on_cluster(X, (7000, -1))) for _ in range(3)]
    for fit in fits[1:]:
        np.testing.assert_array_equal(fit.cluster_centers_, fits[0].cluster_centers_)
        assert fit.scale_ == fits[0].scale_


def test_centred_fit_as_numpy(client, mixture):
    # A common offset: center=True removes the mean inside every block's
    # pass; fit, labels and the lazy transform equal the NumPy ones.
    X = mixture[0] + 3.0
    Xd = _on_cluster(X, (7000, -1))
    dense = AttentionClustering(center=True, random_state=0).fit(X)
    lazy = AttentionClustering(center=True, random_state=0).fit(Xd)
    np.testing.assert_allclose(lazy.mean_, dense.mean_, rtol=1e-12)
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)
    np.testing.assert_allclose(
        dense.transform(Xd).compute(), dense.transform(X), rtol=1e-10, atol=1e-12
    )


def test_free_norms_as_numpy(client):
    # Centroids at norms 0.6, 1 and 1.6: both fits take one norm per
    # centroid and agree; the same rows scaled to one norm keep equal norms
    # (the test of the rows' norms is a pass on the workers).
    X, y, C = make_mixture(20_000, 5, 3, noise=0.4, random_state=4)
    X = X + np.array([-0.4, 0.0, 0.6])[y, None] * C[y]
    dense = AttentionClustering(3, random_state=0).fit(X)
    lazy = AttentionClustering(3, random_state=0).fit(_on_cluster(X, (7000, -1)))
    assert dense.centroid_norms_ == lazy.centroid_norms_ == "free"
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    np.testing.assert_allclose(lazy.means_, dense.means_, atol=1e-8)
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    lazy_unit = AttentionClustering(3, random_state=0).fit(_on_cluster(unit, (7000, -1)))
    assert lazy_unit.centroid_norms_ == "equal"


def test_predict_transform_fit_predict_are_lazy(client, mixture):
    X = mixture[0]
    Xd = _on_cluster(X, (9000, -1))
    model = AttentionClustering(random_state=0).fit(X)
    labels, out = model.predict(Xd), model.transform(Xd)
    assert isinstance(labels, da.Array) and isinstance(out, da.Array)
    assert out.chunks == Xd.chunks
    np.testing.assert_array_equal(labels.compute(), model.predict(X))
    np.testing.assert_allclose(out.compute(), model.transform(X), rtol=1e-12)
    fitted = AttentionClustering(random_state=0).fit_predict(Xd)
    assert isinstance(fitted, da.Array)
    np.testing.assert_array_equal(fitted.compute(), model.labels_)


def test_score_and_likelihoods_are_reductions_on_the_workers(client, mixture, monkeypatch):
    # score, bic and aic are one Dask reduction each: only scalars come to
    # the client (computing anything with as many values as X has rows
    # fails here); score_samples and predict_proba are lazy. All equal NumPy's.
    X = mixture[0] + 2.0
    w = np.random.default_rng(0).integers(0, 3, size=len(X)).astype(float)
    Xd, wd = _on_cluster(X, (7000, -1)), _on_cluster(w, 5000)
    model = AttentionClustering(center=True, random_state=0).fit(X)
    compute = da.Array.compute

    def no_rows(self, **kwargs):
        assert self.size < len(X), "rows of X were computed on the client"
        return compute(self, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(da.Array, "compute", no_rows)
        m.setattr(da.Array, "__array__", None)
        scores = [model.score(Xd), model.score(Xd, sample_weight=wd), model.bic(Xd), model.aic(Xd)]
        log_p, proba = model.score_samples(Xd), model.predict_proba(Xd)
    expected = [model.score(X), model.score(X, sample_weight=w), model.bic(X), model.aic(X)]
    np.testing.assert_allclose(scores, expected, rtol=1e-10)
    assert isinstance(log_p, da.Array) and isinstance(proba, da.Array)
    assert proba.chunks == (Xd.chunks[0], (2,))
    np.testing.assert_allclose(log_p.compute(), model.score_samples(X), rtol=1e-12)
    np.testing.assert_allclose(proba.compute(), model.predict_proba(X), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="NaN or infinity"):
        model.score(da.from_array(_with(X, 7, np.nan), chunks=(500, -1)))


def test_weighted_fit_as_numpy(client, mixture):
    X = mixture[0]
    w = np.random.default_rng(0).integers(0, 3, size=len(X)).astype(float)
    dense = AttentionClustering(solver="full", random_state=0).fit(X, sample_weight=w)
    lazy = AttentionClustering(solver="full", random_state=0).fit(
        _on_cluster(X, (7000, -1)), sample_weight=_on_cluster(w, 5000)
    )
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])


def test_verbose_reports_each_pass(client, mixture, capsys):
    X = _on_cluster(mixture[0], (10_000, -1))
    model = AttentionClustering(solver="full", random_state=0, verbose=1).fit(X)
    passes = [line for line in capsys.readouterr().out.splitlines() if "Dask pass" in line]
    assert [int(line.split()[3].rstrip(",")) for line in passes] == list(range(1, len(passes) + 1))
    assert (
        "read 1 of X (second moment, mean, finiteness and nested subsamples drawn, "
        "X kept in the workers' memory)" in passes[0]
    )
    assert sum(" of X " in line for line in passes) == 1
    assert sum("(e_step)" in line for line in passes) == model.refine_n_iter_


def _reads(out):
    """The names of the verbose passes that read X, checked numbered 1, 2, ..."""
    lines = [line for line in out.splitlines() if "Dask pass" in line and " of X " in line]
    assert [int(line.split(" of X ")[0].rsplit(" ", 1)[1]) for line in lines] == list(
        range(1, len(lines) + 1)
    )
    return [line.split("(", 1)[1].rsplit(")", 1)[0] for line in lines]


@pytest.mark.parametrize("on_workers", [False, True], ids=["pulled", "kept-on-workers"])
def test_one_read_draws_every_subsample_on_any_chunking(client, monkeypatch, capsys, on_workers):
    # The start's rows (16384) and the EM's subsample stage (made small
    # here: 12500 rows) come from one nested draw, taken in the read of X
    # that finds the moments; the other reads are the E steps' and the
    # labels' counts (the lost clusters are judged by the labels' shares, as
    # in memory), X being too large to be
    # kept in the workers' memory (made so here). Each block draws its own
    # rows' keys from the fit's seed and the rows' indices: two chunkings
    # give the same fit, equal to the NumPy fit's.
    monkeypatch.setattr(_passes, "_HOLD_FRACTION", 0.0)
    if on_workers:
        monkeypatch.setattr(_passes, "_CLIENT_ROWS", 18_000)
    monkeypatch.setattr(_mixture, "_SUBSAMPLE", 20_000)
    monkeypatch.setattr(_mixture, "_MIN_SUBSAMPLE", 4_000)
    X = make_mixture(100_000, 6, 2, noise=0.8, random_state=4)[0]
    dense = AttentionClustering(random_state=0).fit(X)
    AttentionClustering(refine=None, random_state=0, verbose=1).fit(_on_cluster(X, (12_500, -1)))
    assert _reads(capsys.readouterr().out)[-1] == "labels' counts"
    fits = []
    for chunks in [(12_500, -1), ((30_000, 5_000, 41_000, 24_000), -1)]:
        fits.append(AttentionClustering(random_state=0, verbose=1).fit(_on_cluster(X, chunks)))
        reads = _reads(capsys.readouterr().out)
        assert reads == ["second moment, mean, finiteness and nested subsamples drawn"] + [
            "e_step"
        ] * fits[-1].refine_n_iter_ + ["labels' counts"]
    for lazy in fits:
        np.testing.assert_allclose(
            lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64]
        )
        assert lazy.refine_n_iter_ == dense.refine_n_iter_
    np.testing.assert_allclose(
        fits[0].cluster_centers_, fits[1].cluster_centers_, atol=ATOL[np.float64]
    )


def _blocks_on_workers(client):
    """The keys of the data the workers hold (a set)."""
    held = client.run(lambda dask_worker: [str(key) for key in dask_worker.data])
    return {key for keys in held.values() for key in keys}


def test_x_kept_in_the_workers_memory_is_read_once_and_released(client, monkeypatch, capsys):
    # X fits in the workers' memory: the first pass keeps its blocks there
    # (X's tasks run once), the later passes read them, and the fit is
    # NumPy's. The fitted estimator's lazy labels are built on X itself:
    # once the fit returns, nothing of it is left on the workers.
    import dask

    monkeypatch.setattr(_mixture, "_SUBSAMPLE", 20_000)
    monkeypatch.setattr(_mixture, "_MIN_SUBSAMPLE", 4_000)
    X = make_mixture(100_000, 6, 2, noise=0.8, random_state=5)[0]
    Xd = da.concatenate(
        [
            da.from_delayed(dask.delayed(_read_block)(X, lo, lo + 12_500), (12_500, 6), X.dtype)
            for lo in range(0, len(X), 12_500)
        ]
    )
    before = _blocks_on_workers(client)
    dense = AttentionClustering(random_state=0).fit(X)
    lazy = AttentionClustering(random_state=0, verbose=1).fit(Xd)
    assert lazy.refine_n_iter_ == dense.refine_n_iter_ > 0
    assert _reads(capsys.readouterr().out) == [
        "second moment, mean, finiteness and nested subsamples drawn, X kept in the workers' memory"
    ]
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    # The scheduler releases the blocks asynchronously: up to a minute on a
    # loaded machine (the loop ends as soon as they are).
    deadline = time.monotonic() + 60
    # (Blocks of earlier tests may be released meanwhile: the fit's own are
    # those not held before it; it counted all, and failed when those left.)
    while _blocks_on_workers(client) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _blocks_on_workers(client) - before
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)


def test_weights_chunked_unlike_x_leave_nothing_on_the_workers(client):
    # Integer weights chunked unlike X are cast and rechunked: their checks
    # computed those keys by an optimised graph and the passes by another,
    # and the scheduler logged "Detected different `run_spec`" (which can
    # deadlock it), and kept some of the weights' blocks after the fit.
    import logging

    X = make_mixture(20_000, 4, 2, noise=0.6, random_state=2)[0]
    Xd = da.from_array(X, chunks=(5000, -1))
    w = np.random.default_rng(0).integers(0, 4, len(X))
    expected = AttentionClustering(2, random_state=0).fit(X, sample_weight=w)
    before = _blocks_on_workers(client)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("distributed.scheduler")
    logger.addHandler(handler)
    try:
        for _ in range(3):
            lazy = AttentionClustering(2, random_state=0).fit(
                Xd, sample_weight=da.from_array(w, chunks=9000)
            )
            np.testing.assert_allclose(
                lazy.cluster_centers_, expected.cluster_centers_, atol=ATOL[np.float64]
            )
    finally:
        logger.removeHandler(handler)
    assert not [r.getMessage() for r in records if "run_spec" in r.getMessage()]
    # The scheduler releases the blocks asynchronously: up to a minute on a
    # loaded machine (the loop ends as soon as they are).
    deadline = time.monotonic() + 60
    while _blocks_on_workers(client) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _blocks_on_workers(client) - before


def test_center_auto_retry_reads_x_kept_in_the_workers_memory(client, capsys):
    # center="auto" refits the centred rows and compares the two fits'
    # log-likelihoods: those two passes read X's source again (each block
    # read 3 times in all), though X was kept in the workers' memory, and
    # the verbose log counted one read.
    import dask

    X = make_mixture(4000, 6, 4, noise=0.7, random_state=0)[0]
    Xd = da.concatenate(
        [
            da.from_delayed(dask.delayed(_read_block)(X, lo, lo + 1000), (1000, 6), X.dtype)
            for lo in range(0, len(X), 1000)
        ]
    )
    with pytest.warns(UserWarning), distributed.get_task_stream(client) as tasks:
        lazy = AttentionClustering(5, center="auto", random_state=0, verbose=1).fit(Xd)
    assert lazy.center_
    assert _reads(capsys.readouterr().out) == [
        "second moment, mean and finiteness, X kept in the workers' memory"
    ]
    reads = [task["key"] for task in tasks.data if "_read_block" in str(task["key"])]
    assert len(reads) == 4


def test_x_is_kept_only_by_the_scheduler_dask_computes_on(client, mixture):
    # Inside dask.config.set(scheduler="threads") Dask computes locally,
    # though a client runs: X was "kept" by a persist on the threads, that is
    # computed into the client's memory. It is kept on the client's workers
    # only when Dask's computations go to that client.
    import dask

    Xd = da.from_array(mixture[0][:8000], chunks=(2000, -1))
    rows = DaskRows(Xd)
    assert rows._hold() and distributed.futures_of(rows._X)
    rows.close()
    with dask.config.set(scheduler="threads"):
        rows = DaskRows(Xd)
        assert not rows._hold()
        assert rows._X is Xd
    with dask.config.set(scheduler=client):
        rows = DaskRows(Xd)
        assert rows._hold() and distributed.futures_of(rows._X)
        rows.close()


def test_x_is_kept_while_the_client_refreshes_its_scheduler_info(client, mixture):
    # The client refreshes its cached scheduler_info() in the background,
    # every 2 s by default, with a copy that lists no workers. A client that
    # refreshes every millisecond makes the race frequent: each fit must still
    # see the workers' memory and keep X there.
    import dask
    import distributed

    X = _on_cluster(mixture[0][:8000], (2000, -1))
    with (
        dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}),
        distributed.Client(client.scheduler.address) as refreshing,
    ):
        assert distributed.default_client() is refreshing
        for _ in range(20):
            rows = DaskRows(X)
            rows.moments()
            rows.moments()  # from the workers' memory, when the first kept X there
            assert (rows.n_passes, rows.n_reads) == (2, 1)
            rows.close()


def test_dataframe(client, mixture):
    pd = pytest.importorskip("pandas")
    X = mixture[0]
    columns = [f"f{j}" for j in range(X.shape[1])]
    frame = dd.from_pandas(pd.DataFrame(X, columns=columns), npartitions=4).persist()
    dense = AttentionClustering(random_state=0).fit(pd.DataFrame(X, columns=columns))
    lazy = AttentionClustering(random_state=0).fit(frame)
    np.testing.assert_array_equal(lazy.feature_names_in_, columns)
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    np.testing.assert_array_equal(lazy.predict(frame).compute(), dense.labels_)
    with pytest.raises(ValueError, match="feature names should match"):
        lazy.predict(frame.rename(columns={"f0": "g0"}))
    # scikit-learn's warnings when one side has names, as for arrays in memory.
    with pytest.warns(UserWarning, match="X does not have valid feature names") as record:
        lazy.predict(da.from_array(X, chunks=(500, X.shape[1])))
    assert record[0].filename == __file__
    unnamed = AttentionClustering(random_state=0).fit(X)
    with pytest.warns(UserWarning, match="X has feature names, but AttentionClustering"):
        unnamed.predict(frame)


@pytest.mark.parametrize("dtype", ["Float64", "Int64", "double[pyarrow]", "Float32"])
def test_dataframe_of_pandas_extension_dtypes(client, dtype):
    # Columns of pandas' extension dtypes made to_dask_array's dtype object,
    # refused as "not a numeric dtype", where the same frame in memory fits.
    # They fit as the frame in memory does (float64, Float32 too), and a
    # missing value is NaN, which the first pass reports.
    pd = pytest.importorskip("pandas")
    if "pyarrow" in dtype:
        pytest.importorskip("pyarrow")
    X = make_mixture(3000, 4, 2, noise=0.5, random_state=0)[0]
    if dtype == "Int64":
        X = np.round(10.0 * X)
    frame = pd.DataFrame(X, columns=list("abcd")).astype(dtype)
    dense = AttentionClustering(2, random_state=0).fit(frame)
    lazy = AttentionClustering(2, random_state=0).fit(dd.from_pandas(frame, npartitions=3))
    expected = np.float64
    assert lazy.cluster_centers_.dtype == dense.cluster_centers_.dtype == expected
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[expected])
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)
    frame.iloc[1700, 2] = pd.NA
    with pytest.raises(ValueError, match="Input X contains NaN"):
        AttentionClustering(2, random_state=0).fit(dd.from_pandas(frame, npartitions=3))


def test_dataframes_of_mixed_columns_read_as_the_same_frame_in_memory(client):
    # A missing value beside a column of another kind (a categorical one)
    # reached NumPy's cast as pd.NA (a TypeError from inside a computation,
    # where in memory it is "Input X contains NaN"); float32 beside bools
    # was read in float64 (validate_data keeps float32); a Dask column of
    # dates as categories not yet known (its dtype says objects) met NumPy's
    # TypeError on a pandas.Timestamp, without the column's name.
    pd = pytest.importorskip("pandas")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    frame = pd.DataFrame(X[:, :2], columns=["a", "b"]).astype("Float64")
    frame.loc[7, "a"] = pd.NA
    frame["s"] = pd.Categorical(np.where(X[:, 2] > 0, 1.0, 2.0))
    for rows in (frame, dd.from_pandas(frame, npartitions=3)):
        with pytest.raises(ValueError, match="Input X contains NaN"):
            AttentionClustering(2, random_state=0).fit(rows)

    flagged = pd.DataFrame(X.astype(np.float32), columns=list("abc"))
    flagged["flag"] = X[:, 0] > 0
    dense = AttentionClustering(2, random_state=0).fit(flagged)
    lazy = AttentionClustering(2, random_state=0).fit(dd.from_pandas(flagged, npartitions=3))
    assert lazy.cluster_centers_.dtype == dense.cluster_centers_.dtype == np.float32
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float32])

    dated = pd.DataFrame(X, columns=list("abc"))
    dated["d"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(np.arange(300) % 3, unit="D")
    lazy = dd.from_pandas(dated, npartitions=3)
    lazy["d"] = lazy["d"].astype("category")
    assert not lazy["d"].cat.known
    with pytest.raises(TypeError, match="Column 'd' of X .* dates, which are not read as numbers"):
        AttentionClustering(2, random_state=0).fit(lazy)


def test_what_needs_no_data_is_refused_before_the_weights_compute(mixture):
    # With Dask weights, fit computed them twice (their checks) before it
    # checked the parameters, the width and n_samples >= n_clusters, and
    # partial_fit before it refused Dask input: weights made from X are two
    # reads of X before an error that needed no data.
    computations = _Computations()
    X = da.from_array(mixture[0][:2000], chunks=(500, -1))
    w = abs(X[:, 0]) + 0.1
    wide = da.zeros((100, 4000), chunks=(50, -1))
    cases = [
        (lambda: AttentionClustering(n_clusters=0).fit(X, sample_weight=w), "n_clusters"),
        (lambda: AttentionClustering(temperature=-1).fit(X, sample_weight=w), "temperature"),
        (lambda: AttentionClustering().fit(wide, sample_weight=wide[:, 0] + 1), "n_features=4000"),
        (lambda: AttentionClustering(30).fit(X[:20], sample_weight=w[:20]), "n_samples=20"),
        (lambda: AttentionClustering().partial_fit(X, sample_weight=w), "batches in memory"),
    ]
    for call, message in cases:
        with computations, pytest.raises((ValueError, TypeError), match=message):
            call()
    assert computations.count == 0


def test_choose_n_clusters_refuses_its_options_before_reading_x(mixture):
    # beta and min_cluster_size were checked by the dynamics, after its draw
    # of tokens had read Dask X; n_clusters_range after Dask weights' checks
    # had computed them: a typo cost a read of X.
    computations = _Computations()
    X = da.from_array(mixture[0][:2000], chunks=(500, -1))
    w = abs(X[:, 0]) + 0.1
    estimator = AttentionClustering(random_state=0)
    cases = [
        (dict(beta=-1.0), "beta"),
        (dict(beta=float("nan")), "beta"),
        (dict(min_cluster_size=1.5), "min_cluster_size"),
        (dict(min_cluster_size=0), "min_cluster_size"),
        (dict(n_clusters_range=[2.5]), "n_clusters_range"),
        (dict(max_samples=0), "max_samples"),
    ]
    for options, message in cases:
        with computations, pytest.raises(InvalidParameterError, match=message):
            choose_n_clusters(X, estimator, sample_weight=w, **options)
    assert computations.count == 0


def test_dataframe_columns_are_checked_before_its_rows_are_counted(mixture):
    # A DataFrame's width, names and dtype are in its metadata; they were
    # checked after to_dask_array(lengths=True) had read every partition.
    pd = pytest.importorskip("pandas")
    computations = _Computations()
    X = mixture[0][:2000]
    columns = [f"f{j}" for j in range(X.shape[1])]

    def frame(data, names):
        return dd.from_pandas(pd.DataFrame(data, columns=names), npartitions=4)

    model = AttentionClustering(random_state=0).fit(frame(X, columns))
    cases = [
        (
            lambda: model.predict(frame(X[:, 1:], columns[1:])),
            ValueError,
            "features, but AttentionClustering",
        ),
        (
            lambda: model.predict(frame(X, [c.upper() for c in columns])),
            ValueError,
            "feature names should match",
        ),
        (
            lambda: AttentionClustering().fit(frame(X, columns).assign(t=pd.Timestamp(0))),
            TypeError,
            r"Column 't' of X has dtype=datetime64\[\w+\], dates, which are not read as numbers",
        ),
    ]
    for call, error, message in cases:
        with computations, pytest.raises(error, match=message):
            call()
    assert computations.count == 0


@pytest.mark.parametrize("method", ["predict", "transform", "predict_proba", "score_samples"])
def test_dataframe_outputs_are_lazy(mixture, method):
    # predict and the other methods that map blocks counted a DataFrame's
    # rows (to_dask_array(lengths=True), which reads every partition) when
    # called, before the lazy output read them again.
    pd = pytest.importorskip("pandas")
    X = mixture[0][:3000]
    columns = [f"f{j}" for j in range(X.shape[1])]
    model = AttentionClustering(3, random_state=0).fit(pd.DataFrame(X, columns=columns))
    frame = dd.from_pandas(pd.DataFrame(X.astype(np.float32), columns=columns), npartitions=3)
    computations = _Computations()
    # (The local scheduler, whose computations the callback sees, where
    # another test of the module left a client as the default.)
    with dask.config.set(scheduler="sync"), computations:
        out = getattr(model, method)(frame)
    assert computations.count == 0
    assert out.dtype == np.float32 or method == "predict"
    expected = getattr(model, method)(pd.DataFrame(X.astype(np.float32), columns=columns))
    np.testing.assert_array_equal(out.compute(), expected)


@pytest.mark.parametrize("kind", ["array", "dataframe"])
def test_set_output_containers_of_lazy_outputs_are_refused_before_work(mixture, kind):
    # transform of Dask input is a lazy Dask array: set_output's polars
    # container refused it after fit_transform's fit, and pandas' computed
    # it whole, its index lost (an audit's finding). Refused before any
    # computation, fit_transform before its fit.
    pd = pytest.importorskip("pandas")
    X = mixture[0][:3000]
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    lazy = (
        da.from_array(X, chunks=(1000, -1))
        if kind == "array"
        else dd.from_pandas(frame.set_axis(range(1000, 4000)), npartitions=3)
    )
    fitted = AttentionClustering(3, center=True, random_state=0).fit(
        frame if kind == "dataframe" else X
    )
    model = AttentionClustering(3, center=True, random_state=0).set_output(transform="pandas")
    computations = _Computations()
    with dask.config.set(scheduler="sync"), computations:
        with pytest.raises(ValueError, match=r"output 'pandas' \(set_output.*lazy Dask array"):
            model.fit_transform(lazy)
        with pytest.raises(ValueError, match="compute X"):
            fitted.set_output(transform="pandas").transform(lazy)
    assert computations.count == 0 and not hasattr(model, "cluster_centers_")
    # The default container keeps the lazy output.
    assert isinstance(fitted.set_output(transform="default").transform(lazy), da.Array)


def test_a_pipeline_on_a_dataframe_fits_the_lazy_outputs(mixture):
    # transform's lazy output on a DataFrame has rows of unknown count, which
    # the next step's fit refused ("call X.compute_chunk_sizes() first").
    pd = pytest.importorskip("pandas")
    X = mixture[0][:3000]
    columns = [f"f{j}" for j in range(X.shape[1])]
    frame = pd.DataFrame(X, columns=columns)
    steps = [AttentionClustering(3, center=True, random_state=0) for _ in range(2)]
    lazy = make_pipeline(*map(clone, steps)).fit(dd.from_pandas(frame, npartitions=3))
    dense = make_pipeline(*map(clone, steps)).fit(frame)
    np.testing.assert_allclose(
        lazy[-1].cluster_centers_, dense[-1].cluster_centers_, atol=ATOL[np.float64]
    )


def test_dataframe_bool_columns_and_mixed_names_as_in_pandas(mixture):
    # A Dask DataFrame with a NumPy bool column beside columns of floats was
    # refused ("dtype=object is not a numeric dtype": to_dask_array makes
    # them objects), where scikit-learn fits the same pandas frame as
    # float64; column names of strings and integers were dropped silently,
    # where scikit-learn raises a TypeError (an audit's findings).
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(mixture[0][:2000, :3], columns=list("abc"))
    frame["flag"] = frame["a"] > 0
    dense = AttentionClustering(2, random_state=0).fit(frame)
    lazy = AttentionClustering(2, random_state=0).fit(dd.from_pandas(frame, npartitions=3))
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=1e-10)
    assert list(lazy.feature_names_in_) == ["a", "b", "c", "flag"]
    for columns in (["a", "b", 3, 4], ["a", "b", "c", np.str_("d")]):
        mixed = frame.set_axis(pd.Index(columns, dtype=object), axis=1)
        for X in (mixed, dd.from_pandas(mixed, npartitions=3)):
            with pytest.raises(TypeError, match="Feature names are only supported if all"):
                AttentionClustering(2).fit(X)
    # Repeated names, of any type: scikit-learn refuses the pandas frame
    # (narwhals' DuplicateError, a ValueError); the Dask frame was fitted,
    # its feature_names_in_ repeated, and the model then refused the same
    # frame in memory (an audit's finding).
    for columns in (["a", "a", "b", "c"], [0, 0, 1, 2]):
        repeated = frame.set_axis(pd.Index(columns, dtype=object), axis=1)
        messages = []
        for X in (repeated, dd.from_pandas(repeated, npartitions=3)):
            with pytest.raises(ValueError, match="Expected unique column names") as caught:
                AttentionClustering(2).fit(X)
            messages.append(str(caught.value))
        assert messages[0] == messages[1]
    # numpy.str_ names alone are no names, for scikit-learn as here (two
    # partitions: Dask's token of these names is that of the str ones
    # above, and a frame of the same token comes back with their meta).
    numpy_names = frame.set_axis(pd.Index([np.str_(c) for c in "abcd"], dtype=object), axis=1)
    model = AttentionClustering(2, random_state=0).fit(dd.from_pandas(numpy_names, npartitions=2))
    assert not hasattr(model, "feature_names_in_")


def _outputs(estimator, rows):
    """``predict`` (or ``transform``, which InContextQuantizer has alone) of
    ``rows`` by a clone of ``estimator`` fitted on them, in memory."""
    model = clone(estimator).fit(rows)
    out = model.predict(rows) if hasattr(model, "predict") else model.transform(rows)
    return np.asarray(out.compute() if dask.is_dask_collection(out) else out)


@pytest.mark.parametrize(
    "estimator", [SelfAttentionDynamics(), InContextQuantizer(2)], ids=["dynamics", "quantizer"]
)
def test_rows_computed_off_their_alignment_are_fitted_as_the_same_rows_in_memory(client, estimator):
    # A Dask result sent by a worker process is read in place from the
    # message's buffer, at any byte offset (seen: 37): the estimators that
    # compute X took it unaligned, and InContextQuantizer's output was a unit
    # in the last place off that of the same rows in memory (on one machine;
    # others round alike either way, and the copy is then all that shows).
    X = make_mixture(600, 4, 2, noise=0.3, random_state=0)[0]
    lazy = da.from_array(X, chunks=(200, -1))
    np.testing.assert_array_equal(_outputs(estimator, lazy), _outputs(estimator, X))
    assert gathered(clone(estimator).fit(X), lazy, reset=False).flags.aligned


@pytest.mark.parametrize(
    "estimator",
    [AttentionClustering(2, random_state=0), SelfAttentionDynamics(), InContextQuantizer(2)],
    ids=["clustering", "dynamics", "quantizer"],
)
def test_text_is_read_as_the_numbers_it_spells_by_every_estimator(client, estimator):
    # scikit-learn's check_array parses text for an explicit float dtype, and
    # every estimator did in memory, SelfAttentionDynamics and
    # InContextQuantizer through Dask too (they compute X first), where
    # AttentionClustering refused a Dask array or DataFrame of text as "not a
    # numeric dtype". Text that is no number raises NumPy's error, for Dask
    # X when its block is read; the estimator is left as it was.
    pd = pytest.importorskip("pandas")
    X = make_mixture(600, 4, 2, noise=0.3, random_state=0)[0]
    columns = [f"x{j}" for j in range(X.shape[1])]
    kinds = {
        "numpy": lambda rows: rows,
        "dask": lambda rows: da.from_array(rows, chunks=(200, -1)),
        "dask-dataframe": lambda rows: dd.from_pandas(
            pd.DataFrame(rows, columns=columns), npartitions=3
        ),
    }

    text = X.astype(str)
    bad = text.copy()
    bad[450, 1] = "abc"
    for kind, make in kinds.items():
        np.testing.assert_array_equal(
            _outputs(estimator, make(text)), _outputs(estimator, make(X)), err_msg=kind
        )
        model = clone(estimator)
        with pytest.raises(ValueError, match="could not convert string to float: .*'abc'"):
            model.fit(make(bad))
        assert not hasattr(model, "n_features_in_"), kind


# Each estimator's public methods that read X, with the ones fitted first.
_FITTED = {"predict", "transform", "predict_proba", "score_samples", "score"}
_METHODS = (
    [
        (AttentionClustering(2, random_state=0), method)
        for method in (
            "fit",
            "fit_predict",
            "fit_transform",
            "partial_fit",
            "predict",
            "transform",
            "predict_proba",
            "score_samples",
            "score",
        )
    ]
    + [(SelfAttentionDynamics(), method) for method in ("fit", "fit_predict", "predict")]
    + [(InContextQuantizer(2), method) for method in ("fit", "fit_transform", "transform")]
)


def _model_and_state(estimator, method, X):
    """A clone of ``estimator``, fitted on X when ``method`` needs a fitted
    one, and a copy of its attributes: a refused call leaves them as they are."""
    model = clone(estimator)
    if method in _FITTED:
        model.fit(X)
    return model, dict(model.__dict__)


def _computed(*args, **kwargs):
    """A Dask scheduler that fails: the refusals come before any computation."""
    raise AssertionError("computed")


@pytest.mark.parametrize(
    "estimator, method",
    _METHODS,
    ids=[f"{type(e).__name__}.{m}" for e, m in _METHODS],
)
def test_dates_and_durations_are_refused_alike_in_memory_and_through_dask(
    client, estimator, method
):
    # scikit-learn's check_array reads an array or a frame that is all dates
    # (or all durations) as the counts of their unit since 1970, and refuses
    # them with NumPy's TypeError beside a number, with a time zone, as
    # periods. The estimators read them so in memory and, but for
    # AttentionClustering, through Dask, whose AttentionClustering refused
    # them all with a ValueError. Every method of every estimator now
    # refuses them all, with one TypeError naming the column and how to
    # convert it, before any computation.
    pd = pytest.importorskip("pandas")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    origin = pd.Timestamp("2020-01-01")
    days = {f"t{j}": pd.Series(pd.to_timedelta(X[:, j] * 30, unit="D")) for j in range(3)}
    dates = {c: origin + d for c, d in days.items()}
    numbers = {f"t{j}": X[:, j] for j in range(1, 3)}
    frames = {
        "dates": pd.DataFrame(dates),
        "dates beside numbers": pd.DataFrame({"t0": dates["t0"], **numbers}),
        "durations": pd.DataFrame(days),
        "dates with a time zone": pd.DataFrame(
            {"t0": dates["t0"].dt.tz_localize("UTC"), **numbers}
        ),
        "periods": pd.DataFrame({c: d.dt.to_period("D") for c, d in dates.items()}),
        "categories of dates": pd.DataFrame({c: d.astype("category") for c, d in dates.items()}),
    }
    arrays = {
        "datetime64": pd.DataFrame(dates).to_numpy(),
        "timedelta64": pd.DataFrame(days).to_numpy(),
    }
    kinds = {}
    for name, frame in frames.items():
        kinds[name] = (frame, dd.from_pandas(frame, npartitions=3))
    for name, array in arrays.items():
        kinds[name] = (array, da.from_array(array, chunks=(100, -1)))
    model, state = _model_and_state(estimator, method, X)

    for name, (in_memory, lazy) in kinds.items():
        messages = []
        for rows in (in_memory, lazy):
            with (
                dask.config.set(scheduler=_computed),
                pytest.raises(
                    TypeError, match=r"(dates|durations), which are not read as numbers"
                ) as error,
            ):
                getattr(model, method)(rows)
            messages.append(str(error.value))
            assert model.__dict__.keys() == state.keys(), name
        assert messages[0] == messages[1], name
        assert "e.g. days" in messages[0], name


@pytest.mark.parametrize(
    "estimator, method",
    _METHODS,
    ids=[f"{type(e).__name__}.{m}" for e, m in _METHODS],
)
def test_columns_of_no_numbers_are_refused_alike_in_memory_and_through_dask(
    client, estimator, method
):
    # A column of intervals or of lists is refused by its dtype in memory.
    # Through Dask the fits read the DataFrame's shape first (the parameters'
    # checks at its width), whose row count Dask builds from a sample of
    # each column: of intervals, it raised Dask's own "TypeError: type
    # <class 'numpy.int64'> with value 1 is not an interval". Every method
    # now refuses both alike, naming the column, before any computation.
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    numbers = {"x1": X[:, 1], "x2": X[:, 2]}
    columns = {
        "interval[int64, right]": pd.arrays.IntervalArray.from_breaks(np.arange(301)),
        "list<item: int64>[pyarrow]": pd.array(
            [[i] for i in range(300)], dtype=pd.ArrowDtype(pa.list_(pa.int64()))
        ),
    }
    model, state = _model_and_state(estimator, method, X)

    for shown, column in columns.items():
        frame = pd.DataFrame({"c": column, **numbers})
        message = re.escape(f"Column 'c' of X has dtype={shown}, which holds neither numbers")
        for rows in (frame, dd.from_pandas(frame, npartitions=3)):
            with dask.config.set(scheduler=_computed), pytest.raises(TypeError, match=message):
                getattr(model, method)(rows)
            assert model.__dict__.keys() == state.keys(), shown


@pytest.mark.parametrize(
    "estimator, method",
    _METHODS,
    ids=[f"{type(e).__name__}.{m}" for e, m in _METHODS],
)
def test_numpys_dates_among_objects_are_refused_in_memory_and_through_dask(
    client, estimator, method
):
    # NumPy's cast of objects to float64 (check_array's, a Dask block's)
    # reads NumPy's dates and durations among them as the counts of their
    # unit: an array of objects, a pandas column of objects, a list whose
    # first row holds none of them, and a Dask array or DataFrame of objects
    # were fitted and predicted on those numbers. Every method of every estimator now
    # refuses them as it refuses an array of them, naming the column: in
    # memory before any work, through Dask as its blocks are read.
    pd = pytest.importorskip("pandas")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    days = [np.timedelta64(int(v), "D") for v in np.round(X[:, 1] * 30)]
    model, state = _model_and_state(estimator, method, X)
    for kind, values in (
        ("dates", [np.datetime64("2020-01-01") + d for d in days]),
        ("durations", days),
    ):
        name = "datetime64" if kind == "dates" else "timedelta64"
        shown = f"has dtype=object, values of numpy.{name}, {kind}, which are not read as numbers"
        objects = X.astype(object)
        objects[:, 1] = values
        frame = pd.DataFrame({"x0": X[:, 0], "t": pd.Series(values, dtype=object), "x2": X[:, 2]})
        rows = objects.tolist()
        rows[0] = X[0].tolist()
        cases = [
            (objects, f"Column 1 of X {shown}", "X[:, 1]"),
            (frame, f"Column 't' of X {shown}", "X['t']"),
            (rows, f"Column 1 of X {shown}", "np.asarray(X)[:, 1]"),
        ]
        if method != "partial_fit":  # (batches in memory alone)
            # (A DataFrame's objects kept as objects, not made text.)
            with dask.config.set({"dataframe.convert-string": False}):
                lazy_frame = dd.from_pandas(frame, npartitions=3)
            cases += [
                (da.from_array(objects, chunks=(100, -1)), f"Column 1 of X {shown}", "X[:, 1]"),
                (lazy_frame, f"Column 't' of X {shown}", "X['t']"),
            ]
        for rows, message, expression in cases:
            with pytest.raises(TypeError, match=re.escape(message)) as error:
                # (Dask's lazy outputs are read here.)
                dask.compute(getattr(model, method)(rows))
            assert "e.g. days" in str(error.value) and expression in str(error.value)
            assert model.__dict__.keys() == state.keys(), (kind, type(rows))


@pytest.mark.parametrize(
    "estimator, method",
    _METHODS,
    ids=[f"{type(e).__name__}.{m}" for e, m in _METHODS],
)
def test_sequences_among_objects_are_refused_naming_their_column(client, estimator, method):
    # A pandas column of lists (or of arrays: embeddings kept one array per
    # cell) raised NumPy's "setting an array element with a sequence", which
    # names neither the column nor the value. Every method of every
    # estimator now refuses it with a TypeError that names the column, in
    # memory before any work, through Dask as its blocks are read; a column
    # of 0-d arrays is read as its numbers, as scikit-learn reads it.
    pd = pytest.importorskip("pandas")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    model, state = _model_and_state(estimator, method, X)
    for kind, values in (
        ("builtins.list", [[v, -v] for v in X[:, 1]]),
        ("numpy.ndarray", [np.array([v, -v]) for v in X[:, 1]]),
    ):
        shown = f"has dtype=object, values of {kind}, which are neither numbers nor text"
        objects = X.astype(object)
        objects[:, 1] = pd.Series(values, dtype=object).to_numpy()
        frame = pd.DataFrame({"x0": X[:, 0], "c": pd.Series(values, dtype=object), "x2": X[:, 2]})
        cases = [
            (objects, f"Column 1 of X {shown}", "X[:, 1]"),
            (frame, f"Column 'c' of X {shown}", "X['c']"),
        ]
        if method != "partial_fit":  # (batches in memory alone)
            with dask.config.set({"dataframe.convert-string": False}):
                lazy_frame = dd.from_pandas(frame, npartitions=3)
            cases.append((lazy_frame, f"Column 'c' of X {shown}", "X['c']"))
        for rows, message, expression in cases:
            with pytest.raises(TypeError, match=re.escape(message)) as error:
                dask.compute(getattr(model, method)(rows))
            assert f"spread the values of {expression}" in str(error.value)
            assert model.__dict__.keys() == state.keys(), (kind, type(rows))
    scalars = X.astype(object)
    scalars[:, 1] = pd.Series([np.array(v) for v in X[:, 1]], dtype=object).to_numpy()
    dask.compute(getattr(model, method)(scalars))


@pytest.mark.parametrize(
    "estimator",
    [AttentionClustering(2, random_state=0), SelfAttentionDynamics(), InContextQuantizer(2)],
    ids=["clustering", "dynamics", "quantizer"],
)
def test_bools_decimals_and_fractions_are_read_as_their_numbers_by_every_estimator(
    client, estimator
):
    # As scikit-learn's check_array reads them in memory: bools as 0 and 1
    # (NumPy's, pandas' nullable and pyarrow's, the latter refused through
    # Dask by AttentionClustering as "not a numeric dtype"), Decimals and
    # Fractions (objects) as the floats they round to.
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    X = make_mixture(300, 3, 2, noise=0.3, random_state=0)[0]
    flags = np.column_stack([X[:, 0] > 0, X[:, 1:]])
    bools = X > 0
    decimals = np.array([[Decimal(repr(float(v))) for v in row] for row in X], dtype=object)
    fractions = np.array([[Fraction(float(v)) for v in row] for row in X], dtype=object)
    named = {"t1": X[:, 1], "t2": X[:, 2]}
    cases = [
        (bools, bools.astype(float)),
        (decimals, X),
        (fractions, X),
        (pd.DataFrame(bools, columns=["t0", "t1", "t2"]), bools.astype(float)),
        (pd.DataFrame({"t0": X[:, 0] > 0, **named}), flags),
        (pd.DataFrame({"t0": pd.array(X[:, 0] > 0, dtype="boolean"), **named}), flags),
        (pd.DataFrame({"t0": pd.array(X[:, 0] > 0, dtype="bool[pyarrow]"), **named}), flags),
        (pd.DataFrame({"t0": decimals[:, 0], **named}), X),
        (pd.DataFrame({"t0": fractions[:, 0], **named}), X),
    ]

    # (Dask's from_pandas would store the objects as their text, which
    # NumPy does not read as a Fraction's number.)
    with dask.config.set({"dataframe.convert-string": False}):
        for rows, expected in cases:
            if isinstance(rows, np.ndarray):
                lazy = da.from_array(rows, chunks=(100, -1))
            else:
                lazy = dd.from_pandas(rows, npartitions=3)
            want = _outputs(estimator, expected)
            np.testing.assert_array_equal(_outputs(estimator, rows), want)
            np.testing.assert_array_equal(_outputs(estimator, lazy), want)


def _with(X, row, value):
    X = X[:2000].copy()
    X[row, 1] = value
    return X


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda X: da.from_array(_with(X, 1500, np.nan), chunks=(500, -1)), "contains NaN"),
        (lambda X: da.from_array(_with(X, 3, np.inf), chunks=(500, -1)), "contains infinity"),
        (lambda X: da.from_array(X[:2000], chunks=(500, 3)), "chunked along its columns"),
        (lambda X: da.from_array(X[:2000, 0], chunks=500), "Expected a 2D array"),
        (lambda X: da.from_array(X[:2000, :0], chunks=(500, -1)), "0 feature"),
        (lambda X: da.from_array(X[:2000].astype(complex), chunks=(500, -1)), "Complex data"),
    ],
    ids=["nan", "inf", "column-chunks", "1d", "no-features", "complex"],
)
def test_bad_input_raises_the_numpy_errors_and_leaves_no_state(client, mixture, make, match):
    model = AttentionClustering(random_state=0)
    with pytest.raises(ValueError, match=match):
        model.fit(make(mixture[0]))
    assert not hasattr(model, "n_features_in_")


def test_wide_dask_arrays_take_the_d_x_d_path_up_to_its_limit(client, monkeypatch):
    # Between the subspace switch and dask_max_features a Dask array takes
    # the d x d path (in memory the subspace path): the same centres as a
    # NumPy fit on that path. Wider Dask arrays are refused before any pass.
    from dataclasses import replace

    from attention_cluster import _clustering, _plan, choose_n_clusters

    d = _plan.DEFAULT_TUNING.subspace_min_features
    X = make_mixture(600, d, 2, noise=0.1, random_state=0)[0]
    lazy = AttentionClustering(2, random_state=0).fit(da.from_array(X, chunks=(200, -1)))
    monkeypatch.setattr(
        _plan, "DEFAULT_TUNING", replace(_plan.DEFAULT_TUNING, subspace_min_features=10**9)
    )
    dense = AttentionClustering(2, random_state=0).fit(X)
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=1e-6)
    wide = da.zeros((100, _plan.DEFAULT_TUNING.dask_max_features), chunks=(50, -1))
    with pytest.raises(ValueError, match="is not supported"):
        AttentionClustering(2).fit(wide)
    # Before n_clusters="auto"'s dynamics, which ran first (20 s at 1500 rows).
    calls = []
    # (choose_n_clusters is the estimator's n_clusters="auto" fit: one criterion.)
    monkeypatch.setattr(_clustering, "count_clusters", lambda *a, **k: calls.append(a))
    with pytest.raises(ValueError, match="is not supported.*TruncatedSVD"):
        AttentionClustering("auto").fit(wide)
    with pytest.raises(ValueError, match="is not supported"):
        choose_n_clusters(wide, AttentionClustering())
    assert not calls


def test_bad_input_at_predict(client, mixture):
    X = mixture[0]
    model = AttentionClustering(random_state=0).fit(X[:2000])
    with pytest.raises(
        ValueError, match="X has 5 features, but AttentionClustering is expecting 6"
    ):
        model.predict(da.from_array(X[:100, :5], chunks=50))
    with pytest.raises(ValueError, match="NaN or infinity"):
        model.predict(da.from_array(_with(X, 7, np.nan), chunks=(500, -1))).compute()
    # Rows of unknown count: predict's blocks need no count; a fit counts
    # them, on its own array (the caller's keeps its unknown chunks).
    kept = da.from_array(X[:2000], chunks=500)[da.from_array(X[:2000, 0]) > 0]
    in_memory = X[:2000][X[:2000, 0] > 0]
    np.testing.assert_array_equal(model.predict(kept).compute(), model.predict(in_memory))
    refitted = AttentionClustering(random_state=0).fit(kept)
    want = AttentionClustering(random_state=0).fit(in_memory)
    np.testing.assert_allclose(
        refitted.cluster_centers_, want.cluster_centers_, atol=ATOL[np.float64]
    )
    assert np.isnan(kept.chunks[0][0])
    with pytest.raises(ValueError, match="sample_weight must be non-negative"):
        model.fit(
            da.from_array(X[:1000], chunks=(500, -1)), sample_weight=da.from_array(-np.ones(1000))
        )


def test_numpy_weights_are_sent_to_the_workers_once(client, mixture):
    # In-memory weights beside a Dask X were embedded in every pass's graph:
    # distributed warned "Sending large graph" at each computation (15 MiB
    # at 2e6 rows; here with the threshold lowered to the weights' size).
    X, w = mixture[0], np.random.default_rng(0).uniform(0.5, 2.0, len(mixture[0]))
    Xd = _on_cluster(X, (10_000, -1))
    want = AttentionClustering(2, random_state=0).fit(X, sample_weight=w)
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "100kB"}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = AttentionClustering(2, random_state=0).fit(Xd, sample_weight=w)
            score = model.score(Xd, sample_weight=w)
    np.testing.assert_allclose(model.cluster_centers_, want.cluster_centers_, atol=ATOL[np.float64])
    assert score == pytest.approx(want.score(X, sample_weight=w), rel=1e-9)


def test_dask_weights_refused_as_numpy_weights_are(mixture):
    # Complex Dask weights were cast to their real part (NumPy's warning 48
    # times, from Dask's chunks).
    X = mixture[0][:2000]
    Xd = da.from_array(X, chunks=(500, -1))
    w = da.from_array(np.ones(2000), chunks=500)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="Complex data not supported for sample_weight"):
            AttentionClustering(random_state=0).fit(Xd, sample_weight=w.astype(complex))


def test_psgd_s_draws_on_dask_rows_are_refused_before_any_computation():
    # Dask rows run PSGD at their own width (never the principal subspace's):
    # the refusal of its draws beyond 1 GiB came after their rows, of
    # unknown count, were counted.
    X = np.random.default_rng(0).normal(size=(200, 3000))
    masked = da.from_array(X, chunks=(50, -1))[da.from_array(X[:, 0]) > -10]
    computations = _Computations()
    with dask.config.set(scheduler="sync"), computations:
        with pytest.raises(ValueError, match="lower batch_size or sequence_length"):
            AttentionClustering(3, solver="psgd", batch_size=10).fit(masked)
    assert computations.count == 0


def test_dask_weights_of_unknown_chunks_are_counted_as_x_is(mixture):
    # Weights masked as X is (a DataFrame's column) had unknown chunks,
    # refused ("call compute_chunk_sizes()") where such X is counted.
    X = mixture[0][:2000]
    w = np.random.default_rng(0).uniform(0.5, 2.0, 2000)
    mask = X[:, 0] > 0
    lazy_mask = da.from_array(mask, chunks=500)
    Xd = da.from_array(X, chunks=(500, -1))[lazy_mask]
    wd = da.from_array(w, chunks=500)[lazy_mask]
    model = AttentionClustering(random_state=0).fit(Xd, sample_weight=wd)
    want = AttentionClustering(random_state=0).fit(X[mask], sample_weight=w[mask])
    np.testing.assert_allclose(model.cluster_centers_, want.cluster_centers_, atol=ATOL[np.float64])
    assert np.isnan(wd.chunks[0][0])


@pytest.mark.parametrize("method", ["fit", "predict", "score"])
def test_what_the_graph_shows_is_refused_before_any_pass(mixture, method):
    # Sparse blocks raised "not enough values to unpack" in fit and a NumPy
    # TypeError in predict; columns of unknown size raised a TypeError from
    # np.zeros; an empty array gave ZeroDivisionError in score (NumPy and
    # sparse X of 0 rows: scikit-learn's ValueError).
    X = mixture[0][:2000]
    model = AttentionClustering(random_state=0).fit(X)
    blocks = da.from_array(X, chunks=(500, -1))
    cases = [
        (blocks.map_blocks(sp.csr_matrix), TypeError, "a Dask array of sparse blocks"),
        (da.zeros((0, 6), chunks=(0, 6)), ValueError, "0 sample"),
        (
            blocks.map_blocks(lambda b: b, chunks=(blocks.chunks[0], (np.nan,))),
            ValueError,
            "unknown chunk sizes",
        ),
    ]
    for D, error, message in cases:
        with pytest.raises(error, match=message):
            if method == "fit":
                AttentionClustering(random_state=0).fit(D)
            else:
                getattr(model, method)(D)


def test_incremental_is_partial_fit_on_the_blocks(client, mixture):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    X = mixture[0][:24_000]
    Xd = _on_cluster(X, (6000, -1))
    wrapped = wrappers.Incremental(AttentionClustering(random_state=0), shuffle_blocks=False).fit(
        Xd
    )
    stream = AttentionClustering(random_state=0)
    for start in range(0, len(X), 6000):
        stream.partial_fit(X[start : start + 6000])
    assert wrapped.estimator_.n_steps_ == 4
    # The workers' BLAS may round the batches' moments differently, and the
    # update's Jacobian, a forward difference of relative step 1e-7,
    # multiplies such rounding (1e-16) by 1e7.
    np.testing.assert_allclose(
        wrapped.estimator_.cluster_centers_, stream.cluster_centers_, rtol=1e-8, atol=1e-10
    )


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_incremental_s_warnings_name_the_caller_or_the_method(scheduler, mixture):
    # dask-ml calls partial_fit from its own frames: a warning named a line
    # of dask_ml/_partial.py, which a filter on the caller's module misses.
    # Run in the caller's thread it names the caller's line; in a worker
    # thread, which has no caller, the package's public method (on a
    # distributed worker process it goes to that worker's log).
    wrappers = pytest.importorskip("dask_ml.wrappers")
    Xd = da.from_array(mixture[0][:12_000] + 10.0, chunks=(6000, -1))
    model = wrappers.Incremental(AttentionClustering(random_state=0), shuffle_blocks=False)
    with dask.config.set(scheduler=scheduler):
        with pytest.warns(UserWarning, match="centred the data") as record:
            model.fit(Xd)
    expected = __file__ if scheduler == "sync" else _clustering.__file__
    assert {w.filename for w in record} == {expected}


def _gated(block, name):
    """``block``, once the distributed Event ``name`` is set."""
    from distributed import Event

    Event(name).wait()
    return block


def test_killed_worker_does_not_change_the_fit(client):
    # A fit of several EM passes on many blocks; a worker process is killed
    # while it runs. Dask recomputes the lost blocks and the fit is the same.
    from distributed import Event

    X, _, _ = make_mixture(100_000, 6, 2, noise=1.0, random_state=1)
    # X's blocks wait for an event before the fit reads them: the kill lands
    # while the first pass runs, however fast the machine (a race before,
    # "make it longer"). The event is set after the kill.
    gate = Event(f"gate-{uuid.uuid4().hex}", client=client)
    # (meta given: map_blocks would call _gated on an empty block, and wait.)
    gated = functools.partial(_gated, name=gate.name)
    Xd = _on_cluster(X, (2500, -1)).map_blocks(gated, meta=np.empty((0, 6), X.dtype))
    expected = AttentionClustering(solver="full", random_state=0).fit(X)
    result = {}

    def fit():
        try:
            result["model"] = AttentionClustering(solver="full", random_state=0).fit(Xd)
        except Exception as error:  # re-raised below, in the test's thread
            result["error"] = error

    worker = threading.Thread(target=fit, daemon=True)
    worker.start()
    pids = list(client.run(os.getpid).values())
    # The kill lands while one of the fit's passes runs on the workers.
    deadline = time.monotonic() + 120
    while worker.is_alive() and time.monotonic() < deadline:
        if any(client.processing().values()):
            break
        time.sleep(0.005)
    try:
        assert worker.is_alive(), "the fit ended before its first pass read X"
        os.kill(pids[0], signal.SIGKILL)
    finally:
        gate.set()
    worker.join(timeout=300)
    assert not worker.is_alive(), "the fit did not finish after the kill"
    if "error" in result:
        raise result["error"]
    np.testing.assert_allclose(
        result["model"].cluster_centers_, expected.cluster_centers_, atol=ATOL[np.float64]
    )
    assert result["model"].refine_n_iter_ == expected.refine_n_iter_


@pytest.mark.parametrize("center", ["auto", False])
def test_lost_clusters_are_judged_by_the_labels_shares_as_in_memory(client, center):
    # One cluster more than the data hold: the fitted weight of the extra
    # component is 0.04, its share of the labels 0.0055. Dask fits read the
    # weight for the share (to spare a pass), so center="auto" did not refit
    # the centred rows as the NumPy fit does (centres 1.5 apart, 3078 of
    # 4000 labels different), and no fit warned of the lost cluster.
    X = make_mixture(4000, 6, 4, noise=0.7, random_state=0)[0]
    with pytest.warns(UserWarning) as dense_warnings:
        dense = AttentionClustering(5, center=center, random_state=0).fit(X)
    with pytest.warns(UserWarning) as lazy_warnings:
        lazy = AttentionClustering(5, center=center, random_state=0).fit(_on_cluster(X, (1000, -1)))
    assert [str(w.message) for w in lazy_warnings] == [str(w.message) for w in dense_warnings]
    assert lazy.center_ == dense.center_
    np.testing.assert_allclose(lazy.cluster_centers_, dense.cluster_centers_, atol=ATOL[np.float64])
    np.testing.assert_array_equal(lazy.labels_.compute(), dense.labels_)


def test_centred_dask_rows_label_and_count_as_centred_dense_rows():
    # The passes of centred rows see x - m; Dask's labels read X's blocks
    # as they are and left the offset out (every row to one head here),
    # where the dense and sparse rows label x - m.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3)) + [5.0, 0.0, -5.0]
    m = X.mean(axis=0)
    dense = DenseRows(X, n_threads=1).centred(m)
    lazy = DaskRows(da.from_array(X, chunks=(50, -1))).centred(m)
    C, bias, origin = np.eye(3), np.zeros(3), np.array([0.1, -0.2, 0.3])
    for args in ((C, 1.0, bias), (C, 1.0, bias, origin)):
        want, want_counts = dense.labels_and_counts(*args)
        got, counts = lazy.labels_and_counts(*args)
        np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(counts, want_counts)
        np.testing.assert_array_equal(np.asarray(lazy.labels(*args)), want)
    assert len(set(want.tolist())) == 3


def test_rescaled_dask_rows_draw_at_their_scale(monkeypatch):
    # The client's subsample that draw reads was kept by rescaled copies:
    # their draws were at the old scale (twice the rows of scale 2).
    monkeypatch.setattr(_passes, "_CLIENT_ROWS", 100)
    X = np.random.default_rng(0).standard_normal((1000, 4))
    lazy = DaskRows(da.from_array(X, chunks=(250, -1)))
    first = np.empty((8, 4))
    lazy.draw(np.array([12345], dtype=np.uint64), first)
    half = np.empty((8, 4))
    lazy.rescaled(2.0).draw(np.array([12345], dtype=np.uint64), half)
    np.testing.assert_allclose(half, first / 2.0)


def test_label_counts_are_float64_for_every_kind():
    X = np.random.default_rng(0).standard_normal((30, 3))
    labels = np.arange(30) % 3
    for rows in (DenseRows(X), _passes.SparseRows(sp.csr_matrix(X))):
        counts = rows.label_counts(labels, 3)
        assert counts.dtype == np.float64
        np.testing.assert_array_equal(counts, [10.0, 10.0, 10.0])


def test_dask_head_totals_near_float64s_largest_numbers():
    # Each block gave its totals back at 2^e, the scale's power of two:
    # a block's -inf beside another's +inf summed to NaN (rows of 2^1023 in
    # blocks of two), where dense rows give the total, -2^1023. The blocks'
    # totals are added before they are given back.
    X = np.ldexp(np.array([[1.0], [1.0], [-1.0], [-1.0], [-1.0]]), 1023)
    scale = np.ldexp(1.0, 1023)
    U = np.ones((1, 1))
    want = DenseRows(X, scale=scale).head_totals(U)
    lazy = DaskRows(da.from_array(X, chunks=(2, -1)), scale=scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = lazy.head_totals(U)
    np.testing.assert_array_equal(got, want)
    assert want[0] == -np.ldexp(1.0, 1023)


@pytest.mark.parametrize(
    "call",
    ["dynamics.predict", "dynamics.fit weights", "quantizer.transform"],
)
def test_estimators_holding_their_rows_check_the_graph_before_reading_x(client, call):
    # SelfAttentionDynamics and InContextQuantizer hold X in memory: they
    # computed a Dask X whole, then refused a width or weights its graph
    # shows (every block read for an error; 647 MiB on the client for a
    # 200 MB array). They now refuse it having read nothing.
    import dask

    X = make_mixture(600, 5, 3, noise=0.3, random_state=0)[0]
    Xd = da.concatenate(
        [
            da.from_delayed(dask.delayed(_read_block)(X, lo, lo + 100), (100, 5), X.dtype)
            for lo in range(0, len(X), 100)
        ]
    )
    narrow = X[:, :4]
    calls = {
        "dynamics.predict": (
            lambda: SelfAttentionDynamics().fit(narrow).predict(Xd),
            "X has 5 features, but SelfAttentionDynamics is expecting 4",
        ),
        "dynamics.fit weights": (
            lambda: SelfAttentionDynamics().fit(Xd, sample_weight=np.ones(7)),
            r"sample_weight.shape == \(7,\), expected \(600,\)",
        ),
        "quantizer.transform": (
            lambda: InContextQuantizer(3).fit(narrow).transform(Xd),
            "X has 5 features, but InContextQuantizer is expecting 4",
        ),
    }
    run, message = calls[call]
    with distributed.get_task_stream(client) as tasks, pytest.raises(ValueError, match=message):
        run()
    assert not tasks.data  # no task ran: nothing of X was read
