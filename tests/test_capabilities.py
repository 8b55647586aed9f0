"""The capability matrix: every public estimator x every input kind x every public method.

Each cell runs one method on one kind of input and compares it with the same
method on the same rows as a dense float64 array, within the kind's
tolerance, or checks the documented error it raises (``DOCUMENTED``). A new
estimator, input kind or method joins the matrix as one entry of
``ESTIMATORS``, ``KINDS``, ``FITTING`` or ``ON_FITTED``.

The methods of a fitted estimator (``ON_FITTED``) share one fit per
estimator and kind (``_fitted``), and each (estimator, method) pair one
dense reference (``_dense``), so that a cell costs its method's work, not
a fit: a method that changed its estimator would show in the cells after
it.
"""

import contextlib
import functools
import inspect
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
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
    "one-cluster-centred": AttentionClustering(1, center=True, random_state=0),
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


def _extension_frame(X):
    """X as a DataFrame whose columns alternate pandas' nullable ``Float64``
    and Arrow's ``double[pyarrow]``, both exact for float64 rows."""
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    dtypes = ("Float64", "double[pyarrow]")
    return frame.astype({c: dtypes[j % 2] for j, c in enumerate(frame.columns)})


def _text_frame(X):
    """X as a DataFrame of string columns (pandas' default dtype of text)."""
    return pd.DataFrame(X.astype(str), columns=[f"x{j}" for j in range(X.shape[1])])


KINDS = {
    "float32": (lambda X, tmp: X.astype(np.float32), 2e-3),
    "csr": (lambda X, tmp: sp.csr_matrix(X), 1e-6),
    "csr-array": (lambda X, tmp: sp.csr_array(X), 1e-6),
    "csc": (lambda X, tmp: sp.csc_matrix(X), 1e-6),
    "csc-array": (lambda X, tmp: sp.csc_array(X), 1e-6),
    "coo": (lambda X, tmp: sp.coo_matrix(X), 1e-6),
    "csr-float32": (lambda X, tmp: sp.csr_matrix(X.astype(np.float32)), 2e-3),
    "memmap": (_memmap, 1e-6),
    # Columns named as scikit-learn names an array's features (x0, x1, ...),
    # so that get_feature_names_out agrees with the array's.
    "pandas": (lambda X, tmp: pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])]), 1e-6),
    "dask-sync": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), 1e-6),
    "dask-cluster": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), 1e-6),
    "dask-float32": (lambda X, tmp: da.from_array(X.astype(np.float32), chunks=(100, -1)), 2e-3),
    "dask-dataframe": (
        lambda X, tmp: dd.from_pandas(pd.DataFrame(X), npartitions=3),
        1e-6,
    ),
    # Columns of pandas' extension dtypes of numbers, read as float64.
    "pandas-extension": (lambda X, tmp: _extension_frame(X), 1e-6),
    # Columns of pandas' sparse dtype, which validation reads as a sparse
    # matrix (transform's dense-output check reads their density).
    "pandas-sparse": (
        lambda X, tmp: pd.DataFrame.sparse.from_spmatrix(
            sp.csr_matrix(X), columns=[f"x{j}" for j in range(X.shape[1])]
        ),
        1e-6,
    ),
    # A table of another library, read through the dataframe interchange
    # protocol (as a polars DataFrame is): it has a shape and no ndim.
    "arrow-table": (
        lambda X, tmp: pa.table({f"x{j}": X[:, j] for j in range(X.shape[1])}),
        1e-6,
    ),
    # A polars DataFrame: its dtypes are a list of polars' own types.
    "polars": (
        lambda X, tmp: pl.DataFrame({f"x{j}": X[:, j] for j in range(X.shape[1])}),
        1e-6,
    ),
    "dask-dataframe-extension": (
        lambda X, tmp: dd.from_pandas(_extension_frame(X), npartitions=3),
        1e-6,
    ),
    # The rows as text ("0.123..."), which scikit-learn's check_array parses
    # for an explicit float dtype: a NumPy array of strings, a frame of
    # string columns, and both through Dask (whose AttentionClustering
    # refused them as "not a numeric dtype"). Float64's shortest text is
    # exact.
    "text": (lambda X, tmp: X.astype(str), 1e-6),
    "pandas-text": (lambda X, tmp: _text_frame(X), 1e-6),
    "dask-text": (lambda X, tmp: da.from_array(X.astype(str), chunks=(100, -1)), 1e-6),
    "dask-dataframe-text": (lambda X, tmp: dd.from_pandas(_text_frame(X), npartitions=3), 1e-6),
}

# -- the public methods: what each returns, materialised


def _batches(model, X, weights=None):
    if isinstance(X, dd.DataFrame):
        first, second = X.partitions[:1], X.partitions[1:]
        half = None
    else:
        half = X.shape[0] // 2
        # (COO rows have no slicing: sliced as CSR, then given as COO.)
        rows = X.tocsr() if sp.issparse(X) else X
        first, second = rows[:half], rows[half:]
        if sp.issparse(X):
            first, second = first.asformat(X.format), second.asformat(X.format)
    if weights is None:
        return model.partial_fit(first).partial_fit(second)
    # (Dask batches are refused before their weights are read.)
    head, tail = (weights, weights) if half is None else (weights[:half], weights[half:])
    return model.partial_fit(first, sample_weight=head).partial_fit(second, sample_weight=tail)


# Methods that fit: (a fresh clone of the estimator, X) -> their result.
FITTING = {
    "fit-weighted": lambda m, X: m.fit(X, sample_weight=_WEIGHTS),
    "fit_predict": lambda m, X: m.fit_predict(X),
    "fit_transform": lambda m, X: m.fit_transform(X),
    "partial_fit": _batches,
    "partial_fit-weighted": lambda m, X: _batches(m, X, _WEIGHTS),
    # Fitted on the dense float64 rows, then given X of the cell's kind.
    "predict-after-dense-fit": lambda m, X: m.fit(ROWS).predict(X),
    "transform-after-dense-fit": lambda m, X: m.fit(ROWS).transform(X),
    "predict_proba-after-dense-fit": lambda m, X: m.fit(ROWS).predict_proba(X),
}
# Methods of the estimator fitted on X: (the fitted estimator, X) -> their
# result. A variant "method-how" is a cell where the estimator has the method.
ON_FITTED = {
    "fit": lambda m, X: m,
    "predict": lambda m, X: m.predict(X),
    "transform": lambda m, X: m.transform(X),
    "predict_proba": lambda m, X: m.predict_proba(X),
    "score_samples": lambda m, X: m.score_samples(X),
    "score": lambda m, X: m.score(X),
    "score-weighted": lambda m, X: m.score(X, sample_weight=_WEIGHTS),
    "bic": lambda m, X: m.bic(X),
    "aic": lambda m, X: m.aic(X),
    "get_feature_names_out": lambda m, X: m.get_feature_names_out(),
}
METHODS = {**FITTING, **ON_FITTED}

# The rows of every cell, and their weights for the weighted methods.
ROWS = make_mixture(300, 5, 3, noise=0.15, random_state=0)[0]
_WEIGHTS = np.linspace(0.5, 2.0, len(ROWS))

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
        (name, kind, method): (TypeError, lambda e: "batches in memory" in str(e))
        for name, estimator in ESTIMATORS.items()
        if isinstance(estimator, AttentionClustering)
        for kind in KINDS
        if kind.startswith("dask")
        for method in ("partial_fit", "partial_fit-weighted")
    },
}


def _documented(name, kind, method):
    """The documented error of a cell: of its method, else of the method it
    varies ("predict_proba-after-dense-fit": predict_proba's)."""
    base = method.partition("-")[0]
    for key in ((name, kind, method), (name, "*", method), (name, kind, base), (name, "*", base)):
        if key in DOCUMENTED:
            return DOCUMENTED[key]
    return None


def _has(estimator, method):
    """Whether the estimator has the method (a "-weighted" variant: and its
    ``sample_weight``)."""
    base, _, how = method.partition("-")
    if not hasattr(type(estimator), base):
        return False
    return (
        how != "weighted"
        or "sample_weight" in inspect.signature(getattr(estimator, base)).parameters
    )


def _cells():
    for name, estimator in ESTIMATORS.items():
        for method in METHODS:
            if not _has(estimator, method):
                continue
            for kind in KINDS:
                yield pytest.param(name, kind, method, id=f"{name}-{kind}-{method}")


def _scheduler(kind, client):
    """The cluster's client is the default scheduler; the other Dask kinds run synchronously."""
    if kind == "dask-cluster":
        return client.as_current()
    if kind.startswith("dask"):
        return dask.config.set(scheduler="synchronous")
    return contextlib.nullcontext()


def _run(name, kind, method, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method in FITTING:
            model = clone(ESTIMATORS[name])
            out = FITTING[method](model, X)
        else:
            model = _fitted(name, kind, X)
            out = ON_FITTED[method](model, X)
    if out is model:
        return {a: _materialised(getattr(model, a)) for a in FITTED if hasattr(model, a)}
    return _materialised(out)


# (estimator, kind) -> the estimator fitted on X of that kind.
_FITS = {}


def _fitted(name, kind, X):
    """The estimator fitted on X, once for the cells of this estimator and kind."""
    if (name, kind) not in _FITS:
        _FITS[name, kind] = clone(ESTIMATORS[name]).fit(X)
    return _FITS[name, kind]


@functools.cache
def _dense(name, method):
    """The method on ``ROWS`` as a dense float64 array, every kind's reference."""
    return _run(name, "dense", method, ROWS)


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
    if np.ndim(want) == 0 and np.issubdtype(np.asarray(want).dtype, np.integer):
        # A count (n_clusters_): exactly.
        assert got == want, f"{what}: {got!r} != {want!r}"
        return
    if np.issubdtype(np.asarray(want).dtype, np.integer):
        # Labels: the same partition, up to the clusters' order.
        assert np.shape(got) == np.shape(want), what
        assert adjusted_rand_score(np.ravel(want), np.ravel(got)) == 1.0, what
        return
    if np.asarray(want).dtype.kind in "OU":
        # Names (get_feature_names_out): exactly.
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    want = np.asarray(want, dtype=np.float64)
    scale = float(np.max(np.abs(want))) if np.size(want) else 1.0
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=rtol * scale, err_msg=what
    )


@pytest.mark.parametrize("name, kind, method", list(_cells()))
def test_capability(name, kind, method, client, tmp_path_factory):
    convert, rtol = KINDS[kind]
    X = convert(ROWS, tmp_path_factory)
    documented = _documented(name, kind, method)
    with _scheduler(kind, client):
        if documented is not None:
            error, says = documented
            with pytest.raises(error) as raised:
                _run(name, kind, method, X)
            assert says(raised.value), str(raised.value)
            return
        got = _run(name, kind, method, X)
    want = _dense(name, method)
    _assert_close(got, want, rtol, f"{name} {method} on {kind}")
    if getattr(X, "dtype", None) == np.float32:
        outputs = got.values() if isinstance(got, dict) else [got]
        floats = [np.asarray(v).dtype for v in outputs if isinstance(v, np.ndarray)]
        assert all(t == np.float32 for t in floats if t.kind == "f"), "float32 in, float32 out"


def test_the_comparison_tells_counts_labels_and_names_apart():
    # n_clusters_ was compared as labels, by the adjusted Rand index of
    # one-element arrays: 1 for any two counts.
    with pytest.raises(AssertionError, match="n_clusters_"):
        _assert_close({"n_clusters_": 5}, {"n_clusters_": 3}, 1e-6, "fit")
    # Labels: the same partition under other names passes, another does not.
    _assert_close(np.array([2, 2, 0]), np.array([1, 1, 0]), 1e-6, "labels")
    with pytest.raises(AssertionError, match="labels"):
        _assert_close(np.array([0, 1, 1]), np.array([0, 0, 1]), 1e-6, "labels")
    with pytest.raises(AssertionError, match="names"):
        _assert_close(np.array(["x0", "x2"]), np.array(["x0", "x1"]), 1e-6, "names")
