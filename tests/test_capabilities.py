"""The capability matrix: every public estimator x every input kind x every public method.

Each cell runs one method on one kind of input and compares it with the same
method on the same rows as a dense float64 array, within the kind's
tolerance, or checks the documented error it raises (``DOCUMENTED``). A new
estimator, input kind or method joins the matrix as one entry of
``ESTIMATORS``, ``KINDS`` or ``METHODS``.
"""

import contextlib
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score

from attention_cluster import AttentionClustering, InContextQuantizer, SelfAttentionDynamics
from attention_cluster.datasets import make_mixture

# -- the estimators (one line each)

ESTIMATORS = {
    "default": AttentionClustering(3, random_state=0),
    "free-norms": AttentionClustering(3, centroid_norms="free", random_state=0),
    "no-refinement": AttentionClustering(3, refine=None, random_state=0),
    "psgd": AttentionClustering(3, solver="psgd", max_iter=500, random_state=0),
    "psgd-em": AttentionClustering(3, solver="psgd", refine="em", max_iter=500, random_state=0),
    "auto-k": AttentionClustering("auto", random_state=0),
    "dynamics": SelfAttentionDynamics(),
    "quantizer": InContextQuantizer(3),
    "quantizer-softmax": InContextQuantizer(3, attention="softmax"),
}

# -- the input kinds: (convert the float64 rows, relative tolerance)


def _memmap(X, tmp_path_factory):
    path = tmp_path_factory.mktemp("memmap") / "X.dat"
    out = np.memmap(path, dtype=X.dtype, mode="w+", shape=X.shape)
    out[:] = X
    out.flush()
    return np.memmap(path, dtype=X.dtype, mode="r", shape=X.shape)


KINDS = {
    "float32": (lambda X, tmp: X.astype(np.float32), 2e-3),
    "csr": (lambda X, tmp: sp.csr_matrix(X), 1e-6),
    "csc": (lambda X, tmp: sp.csc_matrix(X), 1e-6),
    "csr-float32": (lambda X, tmp: sp.csr_matrix(X.astype(np.float32)), 2e-3),
    "memmap": (_memmap, 1e-6),
    "pandas": (lambda X, tmp: pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), 1e-6),
    "dask-sync": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), 1e-6),
    "dask-cluster": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), 1e-6),
    "dask-float32": (lambda X, tmp: da.from_array(X.astype(np.float32), chunks=(100, -1)), 2e-3),
    "dask-dataframe": (
        lambda X, tmp: dd.from_pandas(pd.DataFrame(X), npartitions=3),
        1e-6,
    ),
}

# -- the public methods: what each returns, materialised


def _fitted(model, X):
    return model.fit(X)


def _batches(model, X):
    if isinstance(X, dd.DataFrame):
        first, second = X.partitions[:1], X.partitions[1:]
    else:
        half = X.shape[0] // 2
        first, second = X[:half], X[half:]
    return model.partial_fit(first).partial_fit(second)


METHODS = {
    "fit": lambda m, X: _fitted(m, X),
    "fit_predict": lambda m, X: m.fit_predict(X),
    "fit_transform": lambda m, X: m.fit_transform(X),
    "predict": lambda m, X: _fitted(m, X).predict(X),
    "transform": lambda m, X: _fitted(m, X).transform(X),
    "predict_proba": lambda m, X: _fitted(m, X).predict_proba(X),
    "score_samples": lambda m, X: _fitted(m, X).score_samples(X),
    "score": lambda m, X: _fitted(m, X).score(X),
    "bic": lambda m, X: _fitted(m, X).bic(X),
    "aic": lambda m, X: _fitted(m, X).aic(X),
    "partial_fit": _batches,
}

# What a fitted estimator is compared by (the other methods return arrays).
FITTED = ("labels_", "cluster_centers_", "means_", "weights_", "n_clusters_")

# -- documented errors: (estimator, kind, method) with "*" for any


def _needs_refinement(error):
    return "refine='em'" in str(error.__cause__)


DOCUMENTED = {
    ("no-refinement", "*", "predict_proba"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "score_samples"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "bic"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "aic"): (AttributeError, _needs_refinement),
    ("psgd", "*", "predict_proba"): (AttributeError, _needs_refinement),
    ("psgd", "*", "score_samples"): (AttributeError, _needs_refinement),
    ("psgd", "*", "bic"): (AttributeError, _needs_refinement),
    ("psgd", "*", "aic"): (AttributeError, _needs_refinement),
    # A stream's batches are in memory; fit reads Dask arrays in passes.
    **{
        (name, kind, "partial_fit"): (TypeError, lambda e: "batches in memory" in str(e))
        for name in ("default", "free-norms", "no-refinement", "psgd", "psgd-em", "auto-k")
        for kind in ("dask-sync", "dask-cluster", "dask-float32", "dask-dataframe")
    },
}


def _documented(name, kind, method):
    for key in ((name, kind, method), (name, "*", method)):
        if key in DOCUMENTED:
            return DOCUMENTED[key]
    return None


def _cells():
    for name, estimator in ESTIMATORS.items():
        for method in METHODS:
            if not hasattr(type(estimator), method):
                continue
            for kind in KINDS:
                yield pytest.param(name, kind, method, id=f"{name}-{kind}-{method}")


@pytest.fixture(scope="module")
def rows():
    return make_mixture(300, 5, 3, noise=0.15, random_state=0)[0]


def _scheduler(kind, client):
    """The cluster's client is the default scheduler; the other Dask kinds run synchronously."""
    if kind == "dask-cluster":
        return client.as_current()
    if kind.startswith("dask"):
        return dask.config.set(scheduler="synchronous")
    return contextlib.nullcontext()


def _run(name, method, X):
    model = clone(ESTIMATORS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = METHODS[method](model, X)
    if out is model:
        return {a: _materialised(getattr(model, a)) for a in FITTED if hasattr(model, a)}
    return _materialised(out)


def _materialised(value):
    if dask.is_dask_collection(value):
        value = value.compute()
    return value if isinstance(value, dict) or np.isscalar(value) else np.asarray(value)


def _assert_close(got, want, rtol, what):
    if isinstance(want, dict):
        assert set(got) == set(want), what
        for key in want:
            _assert_close(got[key], want[key], rtol, f"{what}.{key}")
        return
    if np.issubdtype(np.asarray(want).dtype, np.integer):
        assert adjusted_rand_score(np.ravel(want), np.ravel(got)) == 1.0, what
        return
    want = np.asarray(want, dtype=np.float64)
    scale = float(np.max(np.abs(want))) if np.size(want) else 1.0
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=rtol * scale, err_msg=what
    )


@pytest.mark.parametrize("name, kind, method", list(_cells()))
def test_capability(name, kind, method, rows, client, tmp_path_factory):
    convert, rtol = KINDS[kind]
    X = convert(rows, tmp_path_factory)
    documented = _documented(name, kind, method)
    with _scheduler(kind, client):
        if documented is not None:
            error, says = documented
            with pytest.raises(error) as raised:
                _run(name, method, X)
            assert says(raised.value), str(raised.value)
            return
        got = _run(name, method, X)
    want = _run(name, method, rows)
    _assert_close(got, want, rtol, f"{name} {method} on {kind}")
    if getattr(X, "dtype", None) == np.float32:
        outputs = got.values() if isinstance(got, dict) else [got]
        floats = [np.asarray(v).dtype for v in outputs if isinstance(v, np.ndarray)]
        assert all(t == np.float32 for t in floats if t.kind == "f"), "float32 in, float32 out"
