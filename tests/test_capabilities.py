"""The capability matrix: every public estimator x every input kind x every public method.

Each cell runs one method on one kind of input and compares it with the same
method on the same rows as a dense float64 array (fit_predict and
fit_transform: with what they are defined as, ``DEFINED``), within the kind's
tolerance, or checks the documented error it raises (``DOCUMENTED``). A new
estimator, input kind or method joins the matrix as one entry of
``ESTIMATORS``, ``KINDS``, ``FITTING`` or ``ON_FITTED``; a public method
without its row fails ``test_every_public_method_has_its_rows``. The `fit`
cell compares every public fitted attribute the dense fit has (but those of
``NOT_FITTED_STATE``).

The methods of a fitted estimator (``ON_FITTED``) share one fit per
estimator and kind (``_fitted``), and each (estimator, method) pair one
dense reference (``_dense``), so that a cell costs its method's work, not
a fit: a method that changed its estimator would show in the cells after
it.
"""

import contextlib
import copy
import fnmatch
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
#
# Each tolerance is what its kind must differ by, measured: every cell's
# worst |got - want| / (|want| + max |want|) (_assert_close's criterion)
# against the dense float64 cell, in three runs (one and two BLAS threads).
# - EXACT: the same float64 rows reach the same arithmetic (a memmap, the
#   frames, the text): 0 in every cell.
# - FLOAT64: sparse and Dask rows are summed in another order: at most
#   6.1e-15 sparse and 5.3e-15 dask-sync (score_samples), the same each run;
#   dask-cluster, whose workers' order varies between runs, 7.0e-15 to
#   8.2e-15. The former 1e-6 let sparse rows rounded to float32 pass (1.6e-7).
# - FLOAT32: rows and arithmetic in float32: at most 9.5e-7
#   (SelfAttentionDynamics' cluster_centers_ on csr-float32; 8.1e-7 on
#   float32 and dask-float32; 3.5e-7 for the other estimators). The former
#   2e-3 let the quantizer's prompts rounded to float16 pass (1.2e-4 to 2e-4).
EXACT, FLOAT64, FLOAT32 = 0.0, 1e-13, 4e-6


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


def _int64_indices(A):
    """A with int64 index arrays, as SciPy makes them past 2**31 - 1 entries
    (its constructors choose int32 below)."""
    if A.format == "coo":
        A.coords = tuple(c.astype(np.int64) for c in A.coords)
    else:
        A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    return A


def _index_dtype(A):
    """The dtype of a CSR, CSC, BSR or COO matrix's indices, else None."""
    if A.format == "coo":
        return A.coords[0].dtype
    return A.indices.dtype if A.format in ("csr", "csc", "bsr") else None


def _dia(X):
    """X as a DIA matrix (all its 2n - 1 diagonals: SciPy warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        return sp.dia_matrix(X)


KINDS = {
    "float32": (lambda X, tmp: X.astype(np.float32), FLOAT32),
    "csr": (lambda X, tmp: sp.csr_matrix(X), FLOAT64),
    "csr-array": (lambda X, tmp: sp.csr_array(X), FLOAT64),
    "csc": (lambda X, tmp: sp.csc_matrix(X), FLOAT64),
    "csc-array": (lambda X, tmp: sp.csc_array(X), FLOAT64),
    "coo": (lambda X, tmp: sp.coo_matrix(X), FLOAT64),
    # SciPy's other formats, which validation converts to CSR.
    "lil": (lambda X, tmp: sp.lil_matrix(X), FLOAT64),
    "dok": (lambda X, tmp: sp.dok_matrix(X), FLOAT64),
    "bsr": (lambda X, tmp: sp.bsr_matrix(X), FLOAT64),
    "dia": (lambda X, tmp: _dia(X), FLOAT64),
    # Index arrays of int64 (accept_large_sparse), not SciPy's int32.
    "csr-int64": (lambda X, tmp: _int64_indices(sp.csr_matrix(X)), FLOAT64),
    "csc-int64": (lambda X, tmp: _int64_indices(sp.csc_matrix(X)), FLOAT64),
    "coo-int64": (lambda X, tmp: _int64_indices(sp.coo_matrix(X)), FLOAT64),
    "csr-float32": (lambda X, tmp: sp.csr_matrix(X.astype(np.float32)), FLOAT32),
    "memmap": (_memmap, EXACT),
    # Columns named as scikit-learn names an array's features (x0, x1, ...),
    # so that get_feature_names_out agrees with the array's.
    "pandas": (lambda X, tmp: pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])]), EXACT),
    "dask-sync": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), FLOAT64),
    "dask-cluster": (lambda X, tmp: da.from_array(X, chunks=(100, -1)), FLOAT64),
    "dask-float32": (lambda X, tmp: da.from_array(X.astype(np.float32), chunks=(100, -1)), FLOAT32),
    "dask-dataframe": (
        lambda X, tmp: dd.from_pandas(pd.DataFrame(X), npartitions=3),
        FLOAT64,
    ),
    # Columns of pandas' extension dtypes of numbers, read as float64.
    "pandas-extension": (lambda X, tmp: _extension_frame(X), EXACT),
    # Columns of pandas' sparse dtype, which validation reads as a sparse
    # matrix (transform's dense-output check reads their density).
    "pandas-sparse": (
        lambda X, tmp: pd.DataFrame.sparse.from_spmatrix(
            sp.csr_matrix(X), columns=[f"x{j}" for j in range(X.shape[1])]
        ),
        FLOAT64,
    ),
    # A table of another library, read through the dataframe interchange
    # protocol (as a polars DataFrame is): it has a shape and no ndim.
    "arrow-table": (
        lambda X, tmp: pa.table({f"x{j}": X[:, j] for j in range(X.shape[1])}),
        EXACT,
    ),
    # A polars DataFrame: its dtypes are a list of polars' own types.
    "polars": (
        lambda X, tmp: pl.DataFrame({f"x{j}": X[:, j] for j in range(X.shape[1])}),
        EXACT,
    ),
    "dask-dataframe-extension": (
        lambda X, tmp: dd.from_pandas(_extension_frame(X), npartitions=3),
        FLOAT64,
    ),
    # The rows as text ("0.123..."), which scikit-learn's check_array parses
    # for an explicit float dtype: a NumPy array of strings, a frame of
    # string columns, and both through Dask (whose AttentionClustering
    # refused them as "not a numeric dtype"). Float64's shortest text is
    # exact.
    "text": (lambda X, tmp: X.astype(str), EXACT),
    "pandas-text": (lambda X, tmp: _text_frame(X), EXACT),
    "dask-text": (lambda X, tmp: da.from_array(X.astype(str), chunks=(100, -1)), FLOAT64),
    "dask-dataframe-text": (lambda X, tmp: dd.from_pandas(_text_frame(X), npartitions=3), FLOAT64),
}

# -- the public methods: what each returns, materialised


def _batches(model, X, weights=None):
    if isinstance(X, dd.DataFrame):
        first, second = X.partitions[:1], X.partitions[1:]
        half = None
    else:
        half = X.shape[0] // 2
        # (Sparse rows are sliced as CSR, then given in X's format and with
        # its index dtype: COO, DIA and BSR have no slicing.)
        rows = X.tocsr() if sp.issparse(X) else X
        first, second = rows[:half], rows[half:]
        if sp.issparse(X):
            first, second = first.asformat(X.format), second.asformat(X.format)
            if _index_dtype(X) == np.int64:
                first, second = _int64_indices(first), _int64_indices(second)
    if weights is None:
        return model.partial_fit(first).partial_fit(second)
    # (Dask batches are refused before their weights are read.)
    head, tail = (weights, weights) if half is None else (weights[:half], weights[half:])
    return model.partial_fit(first, sample_weight=head).partial_fit(second, sample_weight=tail)


# Methods that fit: (a fresh clone of the estimator, X) -> their result.
FITTING = {
    "fit-weighted": lambda m, X: m.fit(X, sample_weight=_WEIGHTS),
    # The shortcuts: what they return and the fit they leave (see DEFINED).
    "fit_predict": lambda m, X: _with_fit(m, m.fit_predict(X)),
    "fit_predict-weighted": lambda m, X: _with_fit(m, m.fit_predict(X, sample_weight=_WEIGHTS)),
    "fit_transform": lambda m, X: _with_fit(m, m.fit_transform(X)),
    "fit_transform-weighted": lambda m, X: _with_fit(m, m.fit_transform(X, sample_weight=_WEIGHTS)),
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
    # transform's output in the container set_output asks for (on a copy of
    # the shared fit, whose output stays the default).
    "set_output-pandas": lambda m, X: _transformed_as(m, X, "pandas"),
    "set_output-polars": lambda m, X: _transformed_as(m, X, "polars"),
}
METHODS = {**FITTING, **ON_FITTED}

# Rows whose dense reference is what the method is defined as, not the
# method: a cell compares a kind with dense rows, and a break common to all
# kinds (a fit_predict that dropped its weights) passes every comparison.
# (Its labels alone would not tell: these weights leave the partition.)
DEFINED = {
    "fit_predict": lambda m, X: _with_fit(m, m.fit(X).labels_),
    "fit_predict-weighted": lambda m, X: _with_fit(m, m.fit(X, sample_weight=_WEIGHTS).labels_),
    "fit_transform": lambda m, X: _with_fit(m, m.fit(X).transform(X)),
    "fit_transform-weighted": lambda m, X: _with_fit(
        m, m.fit(X, sample_weight=_WEIGHTS).transform(X)
    ),
}


def _with_fit(model, returned):
    """What a method returned, and the fitted state it left the model in."""
    return {"returned": _materialised(returned), **_fitted_state(model)}


def _transformed_as(model, X, container):
    """transform's output with ``set_output(transform=container)``: the
    container's type and its columns (compared exactly), and its values."""
    out = copy.deepcopy(model).set_output(transform=container).transform(X)
    return {
        "type": f"{type(out).__module__.partition('.')[0]}.{type(out).__name__}",
        "columns": np.asarray(list(out.columns), dtype=str),
        "values": out.to_numpy(),
    }


# Public methods with no row: scikit-learn's plumbing, which reads or sets
# the estimator's parameters and requests, no data (fnmatch patterns).
NOT_METHODS = {
    "get_params": "the constructor's parameters (scikit-learn's check_get_params_invariance)",
    "set_params": "sets constructor parameters; no data",
    "get_metadata_routing": "metadata routing's requests (tests/test_common.py)",
    "set_*_request": "metadata routing's requests (tests/test_common.py)",
}

# The rows of every cell, and their weights for the weighted methods.
ROWS = make_mixture(300, 5, 3, noise=0.15, random_state=0)[0]
_WEIGHTS = np.linspace(0.5, 2.0, len(ROWS))

# Public fitted attributes (a trailing underscore) the `fit` cell does not
# compare, each with its reason; it compares every other that is an array, a
# number, a count, a string or None (a fitted setting such as solver_), as
# the dense float64 fit has them. (Objects are not compared: mixture_'s
# parameters are means_, covariances_, weights_ and concentration_.)
NOT_FITTED_STATE = {
    "feature_names_in_": "only frames with string column names have it (scikit-learn's)",
}
# Fitted arrays in float64 for float32 X too: the objective along the fit.
FLOAT64_PATHS = ("loss_curve_", "energy_path_")

# -- documented errors: (estimator, kind, method) with "*" for any


def _needs_refinement(error):
    return "refine='em'" in str(error.__cause__)


def _refused_on_dask(methods, error, says):
    """The cells of AttentionClustering's ``methods`` on every Dask kind,
    documented as raising ``error`` whose message ``says`` a phrase."""
    return {
        (name, kind, method): (error, lambda e: says in str(e))
        for name, estimator in ESTIMATORS.items()
        if isinstance(estimator, AttentionClustering)
        for kind in KINDS
        if kind.startswith("dask")
        for method in methods
    }


DOCUMENTED = {
    ("no-refinement", "*", "predict_proba"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "score_samples"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "bic"): (AttributeError, _needs_refinement),
    ("no-refinement", "*", "aic"): (AttributeError, _needs_refinement),
    ("psgd", "*", "predict_proba"): (AttributeError, _needs_refinement),
    ("psgd", "*", "score_samples"): (AttributeError, _needs_refinement),
    ("psgd", "*", "bic"): (AttributeError, _needs_refinement),
    ("psgd", "*", "aic"): (AttributeError, _needs_refinement),
    # transform's output of Dask X is lazy: no in-memory container.
    **_refused_on_dask(("set_output-pandas", "set_output-polars"), ValueError, "lazy Dask array"),
    # A stream's batches are in memory; fit reads Dask arrays in passes.
    **_refused_on_dask(("partial_fit", "partial_fit-weighted"), TypeError, "batches in memory"),
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
    return how != "weighted" or _takes_weights(estimator, base)


def _takes_weights(estimator, method):
    """Whether the method takes ``sample_weight``: by name, or through the
    ``**fit_params`` that fit_predict and fit_transform pass on to fit."""
    parameters = inspect.signature(getattr(type(estimator), method)).parameters
    if "sample_weight" in parameters:
        return True
    passed_on = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    return passed_on and method.startswith("fit_") and _takes_weights(estimator, "fit")


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
        return _fitted_state(model)
    return _materialised(out)


def _fitted_state(model):
    """The model's public fitted attributes that the `fit` cell compares."""
    return {
        name: _materialised(value)
        for name, value in vars(model).items()
        if name.endswith("_")
        and not name.startswith("_")
        and name not in NOT_FITTED_STATE
        and _comparable(value)
    }


def _comparable(value):
    if isinstance(value, dict):
        return all(_comparable(v) for v in value.values())
    if dask.is_dask_collection(value):
        return True
    return value is None or isinstance(value, (np.ndarray, np.generic, int, float, str))


# (estimator, kind) -> the estimator fitted on X of that kind.
_FITS = {}


def _fitted(name, kind, X):
    """The estimator fitted on X, once for the cells of this estimator and kind."""
    if (name, kind) not in _FITS:
        _FITS[name, kind] = clone(ESTIMATORS[name]).fit(X)
    return _FITS[name, kind]


@functools.cache
def _dense(name, method):
    """The method on ``ROWS`` as a dense float64 array (or its definition,
    ``DEFINED``), every kind's reference."""
    if method in DEFINED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DEFINED[method](clone(ESTIMATORS[name]), ROWS)
    return _run(name, "dense", method, ROWS)


def _materialised(value):
    if dask.is_dask_collection(value):
        value = value.compute()
    return value if isinstance(value, dict) or np.isscalar(value) else np.asarray(value)


def _assert_close(got, want, rtol, what, labels=True):
    """got as want: floats within rtol (of each value and of want's largest),
    labels (integer arrays where ``labels``) up to the clusters' order, and
    anything else exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{what}: {set(got) ^ set(want)}"
        for key in want:
            # Of the integer arrays of a fitted state, labels_ (and what
            # fit_predict returned) alone are labels: leaders_ are row
            # indices, n_clusters_path_ counts.
            labels = key in ("labels_", "returned")
            _assert_close(got[key], want[key], rtol, f"{what}.{key}", labels)
        return
    if np.ndim(want) == 0 and np.issubdtype(np.asarray(want).dtype, np.integer):
        # A count (n_clusters_): exactly.
        assert got == want, f"{what}: {got!r} != {want!r}"
        return
    if labels and np.issubdtype(np.asarray(want).dtype, np.integer):
        # Labels: the same partition, up to the clusters' order.
        assert np.shape(got) == np.shape(want), what
        assert adjusted_rand_score(np.ravel(want), np.ravel(got)) == 1.0, what
        return
    if np.asarray(want).dtype.kind not in "fc":
        # Names (get_feature_names_out), settings, indices, flags: exactly.
        assert np.shape(got) == np.shape(want), what
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
    # Float32 in, float32 arrays out; anything else (float64, text,
    # extension dtypes), float64 arrays and numbers out. (Float32's numbers,
    # such as score and temperature_, and objective paths are float64.)
    float32 = getattr(X, "dtype", None) == np.float32
    outputs = got.items() if isinstance(got, dict) else [(method, got)]
    floats = {
        key: np.asarray(value).dtype
        for key, value in outputs
        if isinstance(value, np.ndarray if float32 else (np.ndarray, np.floating))
        and np.asarray(value).dtype.kind == "f"
        and not (float32 and key in FLOAT64_PATHS)
    }
    want_dtype = np.float32 if float32 else np.float64
    assert all(t == want_dtype for t in floats.values()), f"{floats}: not {want_dtype.__name__}"


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_public_method_has_its_rows(name):
    # A public method joins the matrix as a row (its name, or "name-how"),
    # and one that takes sample_weight as a "name-weighted" row too:
    # fit_predict's weights had no row, and a fit_predict that dropped them
    # passed the whole suite.
    estimator = ESTIMATORS[name]
    public = [
        method
        for method, member in inspect.getmembers(type(estimator), callable)
        if not method.startswith("_")
        and not any(fnmatch.fnmatchcase(method, p) for p in NOT_METHODS)
    ]
    rows = {row for row in METHODS if _has(estimator, row)}
    bases = {row.partition("-")[0] for row in rows}
    missing = [method for method in public if method not in bases]
    missing += [
        f"{method}-weighted"
        for method in public
        if _takes_weights(estimator, method) and f"{method}-weighted" not in rows
    ]
    assert not missing, f"{name}: no row for {missing}"


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
    # In a fitted state, labels_ are labels; other integer arrays (row
    # indices, counts) are compared exactly.
    _assert_close({"labels_": np.array([1, 0])}, {"labels_": np.array([0, 1])}, 0.0, "fit")
    with pytest.raises(AssertionError, match="leaders_"):
        _assert_close({"leaders_": np.array([1, 0])}, {"leaders_": np.array([0, 1])}, 0.0, "fit")
    # An attribute the reference has and the cell's fit has not, or another.
    with pytest.raises(AssertionError, match="mean_"):
        _assert_close({"scale_": 1.0}, {"scale_": 1.0, "mean_": np.zeros(2)}, 0.0, "fit")
