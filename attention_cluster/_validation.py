"""Input and parameter checks shared by the estimators.

Built on scikit-learn's public helpers only (``check_scalar``,
``validate_data``): its private constraint classes change between releases.
A parameter's check raises :class:`InvalidParameterError`; the data's
(X, sample_weight) keep scikit-learn's ``check_array`` types.
"""

import collections
import concurrent.futures
import contextlib
import contextvars
import datetime
import functools
import importlib.util
import multiprocessing
import numbers
import os
import runpy
import sys
import threading
import warnings

import joblib
import numpy as np
import scipy.sparse as sp
import sklearn
from sklearn.utils import check_random_state, check_scalar

# Frames in these directories and files are library code, not the user's
# call (joblib runs the fits of scikit-learn's searches, in worker processes
# or threads whose outer frames are Python's own).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = (
    (_PACKAGE_DIR,)
    + tuple(
        os.path.dirname(os.path.abspath(path)) + os.sep
        for path in (
            sklearn.__file__,
            joblib.__file__,
            concurrent.futures.__file__,
            multiprocessing.__file__,
        )
    )
    + (os.path.abspath(threading.__file__), os.path.abspath(runpy.__file__))
    # Python's frozen modules (runpy, which starts loky's worker processes).
    + ("<frozen ",)
    # Dask's wrappers and searches (dask-ml's Incremental calls partial_fit
    # from its own frames), where installed: found, not imported.
    + tuple(
        os.path.dirname(os.path.abspath(spec.origin)) + os.sep
        for spec in map(importlib.util.find_spec, ("dask", "dask_ml", "distributed"))
        if spec is not None and spec.origin is not None
    )
)


class InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type or value.

    Raised by the checks of an estimator's constructor parameters (when
    ``fit`` starts, before any work on X: before X is read, but in
    :class:`~attention_cluster.SelfAttentionDynamics`, which checks X first,
    its ``query``, ``key`` and ``value`` being checked against X's width)
    and of a public function's settings:
    counts, real numbers (noise, temperature, regularisation strength...),
    choices among options, seeds, mixture weights, the generators'
    centroids, and an array parameter's shape (``init``, ``query``). The
    arrays a function works on (X, ``sample_weight``, labels, tokens, the
    heads and centroids that the layers, the metrics and the theory
    evaluate, a :class:`~attention_cluster.SphericalMixture`'s fitted arrays) keep the errors
    of scikit-learn's ``check_array``, as do the checks of a count against
    the data's (``n_clusters`` above the number of samples, as scikit-learn's
    KMeans raises it) and of the memory a setting would take.

    It subclasses both ``ValueError`` and ``TypeError``, as scikit-learn's
    own ``InvalidParameterError`` does: ``except ValueError`` and ``except
    TypeError`` both catch it, whether the value was of the wrong type (the
    text ``"2"`` for a count) or out of range (a negative temperature).

    Examples
    --------
    >>> from attention_cluster import AttentionClustering, InvalidParameterError
    >>> try:
    ...     AttentionClustering(temperature=-1.0).fit([[1.0, 0.0], [0.0, 1.0]])
    ... except ValueError as error:
    ...     print(type(error).__name__, error)
    InvalidParameterError temperature must be > 0, got -1.0.
    """


# Largest array a fit builds beyond its input's own (bytes): the dynamics'
# moving tokens densified from sparse input, PSGD's drawn sequences. Beyond
# it the fit asks for other parameters instead of the memory.
DENSE_LIMIT_BYTES = 1 << 30


def check_dense_output(X, method, row_wise=True):
    """Refuse sparse X (a SciPy matrix, or a pandas DataFrame of sparse
    columns, which validation makes one) whose dense output of its shape
    (``transform``'s ``n x d``) would take more than ``DENSE_LIMIT_BYTES``
    and more than ten times the bytes of X's non-zeros (values and column
    indices), before any work: of hashed
    features (2^20 columns), 8 MB a row, where the process was killed for
    its memory. ``row_wise``: whether each output row is its input row's
    alone (the advice then names fewer rows at a time)."""
    if sp.issparse(X):
        stored, itemsize = X.nnz, X.dtype.itemsize
    else:
        # pandas' sparse accessor, of frames whose columns are all sparse.
        accessor = getattr(X, "sparse", None) if hasattr(X, "columns") else None
        if accessor is None:
            return
        stored, itemsize = accessor.density * X.shape[0] * X.shape[1], 8
    n, d = X.shape
    size = n * d * (4 if itemsize == 4 else 8)
    stored = stored * (itemsize + 4)
    if size > DENSE_LIMIT_BYTES and size > 10 * stored:
        fewer = "pass fewer rows at a time (the output is row by row), or " if row_wise else ""
        raise ValueError(
            f"{method} of sparse X returns a dense array of its shape, {n} x {d}, which would "
            f"take {size / 2**30:.1f} GiB (more than {DENSE_LIMIT_BYTES / 2**30:.0f} GiB, and "
            f"{size / max(stored, 1):.0f} times the bytes of X's non-zeros): {fewer}reduce the features "
            "first (drop the empty columns, or sklearn.decomposition.TruncatedSVD)."
        )


def check_options(value, name, options):
    """Raise an InvalidParameterError unless ``value`` is one of ``options`` (NumPy's bools are bools)."""
    flag = bool(value) if isinstance(value, np.bool_) else value
    if not any(flag is o or (isinstance(value, str) and value == o) for o in options):
        shown = ", ".join(repr(o) for o in options)
        raise InvalidParameterError(f"{name} must be one of {shown}; got {value!r}.")
    return value


def check_positive(
    value, name, target_type=numbers.Real, *, min_val=0, strict=True, float_range=False, also=()
):
    """Check the type of a scalar parameter and its lower bound; return it,
    a NumPy scalar as the Python number it holds (:func:`plain_number`).

    ``strict`` makes the bound open (``value > min_val``). A bool is not a
    number here (Python's and NumPy's), as in scikit-learn's ``Interval``:
    ``max_iter=True`` is a mistake, not one iteration. An integer beyond
    float64 is refused where the parameter is a float, or an integer used
    as one (``float_range``: a prompt's length, a number of heads), and
    taken elsewhere (``max_iter=10**400``, as KMeans takes it). ``also``:
    the other values the parameter takes (``"auto"``, None), returned as
    they are and named when a value is neither them nor a number.
    """
    if any(value is o or (isinstance(value, str) and value == o) for o in also):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{name} must be a number, got the bool {value!r}.")
    try:
        check_scalar(value, name, target_type)
    except (TypeError, ValueError) as error:
        if also and isinstance(error, TypeError):
            sign = ">" if strict else ">="
            kind = "an integer" if issubclass(target_type, numbers.Integral) else "a number"
            shown = " or ".join(f'"{o}"' if isinstance(o, str) else repr(o) for o in also)
            raise InvalidParameterError(
                f"{name} must be {kind} {sign} {min_val} or {shown}, got {value!r}."
            ) from None
        raise InvalidParameterError(str(error)) from None
    # Integers are finite (np.isfinite refused a Python int beyond NumPy's
    # integers with its own TypeError); the other real numbers are floats,
    # Python's or NumPy's: a Fraction passed the check and failed inside
    # NumPy's ufuncs, after work had begun.
    if isinstance(value, numbers.Real) and not isinstance(
        value, (numbers.Integral, float, np.floating)
    ):
        raise InvalidParameterError(
            f"{name} must be an int or a float, got {type(value).__name__} {value!r}."
        )
    if isinstance(value, numbers.Integral) and (
        float_range or not issubclass(target_type, numbers.Integral)
    ):
        # (An integer beyond float64: OverflowError once used as a float.)
        try:
            float(value)
        except OverflowError:
            raise InvalidParameterError(
                f"{name} must be finite, got an integer beyond float64."
            ) from None
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        raise InvalidParameterError(f"{name} must be finite, got {value!r}.")
    if value < min_val or (strict and value == min_val):
        sign = ">" if strict else ">="
        raise InvalidParameterError(f"{name} must be {sign} {min_val}, got {value!r}.")
    return plain_number(value)


def plain_number(value):
    """A NumPy integer or float scalar as the Python number it holds; any
    other value as given. NumPy 2 keeps a small integer type through
    arithmetic (``np.int8(100) + 100`` overflows), which scikit-learn's
    checks accept for a count: parameters are read as Python numbers."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def validate_seed(random_state):
    """Refuse what :func:`check_seed` refuses, without making the generator.

    For the parameter checks made before a fit reads X, which discard the
    generator: making a RandomState from an int costs about 0.1 ms (NumPy
    seeds a fresh MT19937 before the legacy seeding), a twentieth of a
    default fit of 1000 rows. An int in RandomState's range, None, NumPy's
    module (its global generator) and a RandomState pass as they are; the
    rest are refused by :func:`check_seed`'s error.
    """
    if (
        random_state is None
        or random_state is np.random
        or isinstance(random_state, np.random.RandomState)
        or (isinstance(random_state, numbers.Integral) and 0 <= random_state <= 2**32 - 1)
    ):
        return
    check_seed(random_state)


def check_seed(random_state):
    """``random_state`` as scikit-learn's ``check_random_state`` reads it (None,
    an integer seed, a ``RandomState``), anything else refused as a parameter."""
    try:
        return check_random_state(random_state)
    except ValueError as error:
        # scikit-learn's text names the value, not the parameter.
        raise InvalidParameterError(
            f"random_state must be None, an integer in 0 .. 2**32 - 1 or a "
            f"numpy.random.RandomState, got {random_state!r}: {error}"
        ) from None


def check_verbose(value):
    """``verbose``: an integer >= 0, or a bool, as scikit-learn's estimators take it."""
    if not isinstance(value, (bool, np.bool_)):
        check_positive(value, "verbose", numbers.Integral, strict=False)


def finite_output(out, temperature_helps=True):
    """Refuse overflowed output rather than return inf or NaN (the layers', and
    every output computed from them: ``transform``, the PSGD loss).

    ``temperature_helps``: False for the softmax layers, whose output is a
    convex combination of the tokens and whose overflow is their inner
    products, before any temperature multiplies them, or the output's own
    magnitude (a temperature of 1e-300 on tokens of 1e160 still
    overflowed): the advice is then to rescale X alone."""
    if not np.all(np.isfinite(out)):
        raise FloatingPointError(
            "The attention layer overflowed the floating-point range; rescale X"
            + (
                " or lower the temperature."
                if temperature_helps
                else " (a lower temperature does not bring it within range)."
            )
        )
    return out


def check_n_samples(n_samples, n_clusters, n_weighted=None):
    """A clustering needs at least ``n_clusters`` samples, of positive weight
    where ``n_weighted`` counts them (rows of weight zero are as absent)."""
    if n_samples < n_clusters:
        raise ValueError(f"n_samples={n_samples} should be >= n_clusters={n_clusters}.")
    if n_weighted is not None and n_weighted < n_clusters:
        raise ValueError(
            f"X has {n_weighted} rows of positive weight (of n_samples={n_samples}), which "
            f"should be >= n_clusters={n_clusters}: rows of weight zero are as absent."
        )


def power_of_two_unit(peak):
    """The power of two ``2^e`` with ``peak / 2^e`` in [0.5, 1): values
    divided by it keep their ratios exactly, and no product or square of
    them leaves float64's range, whatever their magnitude. At ``peak >=
    2^1023``, whose ``2^e`` float64 cannot hold, ``2^(e - 2)``: the
    quotients are then 4 times those of ``peak / 2^1024``, a factor whose
    square root is exact (weights so divided give the fit of ``w`` to the
    last bit). Of an array, each entry's (an array)."""
    e = np.frexp(np.asarray(peak, dtype=np.float64))[1]
    unit = np.ldexp(1.0, np.where(e < 1024, e, e - 2))
    return float(unit) if unit.ndim == 0 else unit


def stored_values(A):
    """The numbers a matrix stores: a sparse matrix's non-zeros, a dense one's entries."""
    return A.data if sp.issparse(A) else np.asarray(A)


def quiet_finite_check():
    """The floating-point state for scikit-learn's finite checks
    (``validate_data``, ``check_array``, ``assert_all_finite``): they sum X
    first, and finite rows near the dtype's top sum to inf - inf, a NumPy
    RuntimeWarning that is not X's; NaN and infinity are still found."""
    return np.errstate(over="ignore", invalid="ignore")


def largest_magnitude(values):
    """``max |v|`` of an array (0 when empty; NaN when it holds one): two
    reductions, where ``np.abs`` would copy the values first."""
    return max(float(np.max(values)), -float(np.min(values))) if values.size else 0.0


# Factors of the layer whose largest entry lies in this range are cast to
# float32 for float32 rows (see factor_for_rows).
_FLOAT32_FACTORS = (2.0**-100, 2.0**100)


def factor_for_rows(A, dtype):
    """An attention layer's small factor A (float64: an L x L, d x d or d x K matrix) for
    its product with rows of ``dtype``: cast to float32 for float32 rows where its
    largest entry lies well within float32's normal range
    (``_FLOAT32_FACTORS``), so that the product runs in float32; beyond,
    where the cast would underflow (a silent error) or overflow (a false
    one) though the output is representable, kept float64: the product
    then runs in float64, cast to float32 after."""
    if dtype == np.float64:
        return A
    peak = largest_magnitude(A)  # (NaN propagates)
    low, high = _FLOAT32_FACTORS
    return A.astype(dtype) if peak == 0.0 or low <= peak <= high else A


def peak_unit(*arrays):
    """:func:`power_of_two_unit` of the largest ``|x|`` of ``arrays`` (dense
    arrays, or sparse matrices whose stored values are read), 1 when every
    entry is zero or there is none: arrays divided by it are the same
    numbers at a magnitude where no square or product overflows or
    underflows (exact, a power of two)."""
    peak = 0.0
    for A in arrays:
        peak = max(peak, largest_magnitude(stored_values(A)))
    return power_of_two_unit(peak)


def check_sample_weight(sample_weight, X, unit=None):
    """Validate weights: 1-D, one per row, finite, non-negative, positive sum.

    Returns ``(w / unit, unit)``: float64 weights relative to ``unit``
    (:func:`power_of_two_unit` of their largest when None: weights are relative,
    and the fit is the same for ``c w`` at any ``c > 0``), or ``(None, 1.0)``
    for unit weights (so callers can take fast unweighted paths). Given a
    unit other than 1, no weights are ones divided by it. A positive weight
    that is zero relative to the unit (at most 2^-1075 times it) is refused.
    """
    if sample_weight is None:
        if unit is None or unit == 1.0:
            return None, 1.0
        # Unit weights, relative to a stream's unit (weights on one scale).
        return np.full(X.shape[0], 1.0 / unit), unit
    w = np.asarray(sample_weight)
    if np.iscomplexobj(w):
        raise ValueError("Complex data not supported for sample_weight.")
    _refuse_weights_of_no_numbers(w)
    if w.ndim == 0:
        w = np.full(X.shape[0], float(w))
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (X.shape[0],):
        raise ValueError(f"sample_weight.shape == {w.shape}, expected {(X.shape[0],)}.")
    finite, negative = bool(np.all(np.isfinite(w))), bool(np.any(w < 0))
    if finite and not negative:
        of_stream = unit is not None
        unit = power_of_two_unit(np.max(w)) if unit is None else unit
        with np.errstate(over="ignore"):  # beyond a stream's unit: refused by the stream
            relative = w / unit
        _check_weights_held(np.count_nonzero(w) - np.count_nonzero(relative), of_stream)
        w = relative
    _check_weight_summary(finite, negative, float(np.sum(w)) if finite else 0.0)
    return w, unit


def _check_weights_held(lost, of_stream=False):
    """Refuse positive weights that are zero once read relative to the
    largest (or to a stream's first batch's): at about float64's smallest
    ratio, 2^-1074, or below (exactly: at most 2^-1075 times the unit, a
    power of two up to twice the largest), the passes would count their rows as absent (and a
    fit then counted fewer rows of positive weight than were given)."""
    if lost:
        whose = "the stream's first batch's" if of_stream else "the"
        raise ValueError(
            f"sample_weight has {lost} positive weights of at most about 2^-1074 (4.9e-324) "
            f"times {whose} largest weight, the smallest ratio float64 holds: weights are "
            "read relative to a power of two between the largest and twice it, and these "
            "would be zero. Give those rows weight 0, or weights within that ratio of the "
            "largest."
        )


def _refuse_weights_of_no_numbers(w):
    """Text is no weight (float("2") read it as 2), nor one bool for all rows,
    nor dates and durations (read as counts of nanoseconds since 1970, as X's
    are refused): refused by the dtype of ``w`` (an array, NumPy's or
    Dask's), and, for NumPy objects, by their types (pandas' strings are
    such)."""
    kind = w.dtype.kind
    text = kind in "USV" or (
        kind == "O"
        and isinstance(w, np.ndarray)
        and any(isinstance(v, (str, bytes)) for v in w.flat)
    )
    if text or kind in "mM" or (w.ndim == 0 and kind == "b"):
        shown = {"b": "a bool", "m": "durations", "M": "dates"}.get(kind, "text")
        raise ValueError(f"sample_weight must be numbers, got {shown} (dtype {w.dtype}).")


def _check_weight_summary(finite, negative, total):
    """The weights' errors, from whether all are finite, any is negative, and their sum."""
    if not finite:
        raise ValueError("sample_weight must be finite (no NaN or inf).")
    if negative:
        raise ValueError("sample_weight must be non-negative: weights are sampling probabilities.")
    if not total > 0:
        raise ValueError(
            "sample_weight must not sum to zero: at least one weight must be positive."
        )


def atomic_fit(fit):
    """Decorate ``fit`` so that a failure leaves the estimator as it was.

    ``validate_data`` records ``n_features_in_`` before later checks can
    fail; restoring the instance dictionary on error means a bad call never
    leaves a half-fitted estimator (nor spoils an earlier fit). The
    generator the fit draws from (:func:`_shared_generator`) is restored
    too: a fit may draw its subsamples' seed before the pass that finds NaN
    in X, and a call that raised would otherwise change the fits that
    follow it from the caller's ``RandomState`` (or NumPy's global one), as
    scikit-learn's, which check X before any draw, do not.
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        saved = dict(self.__dict__)
        generator = _shared_generator(self)
        state = None if generator is None else generator.get_state()
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            if generator is not None:
                generator.set_state(state)
            raise

    return wrapper


def _shared_generator(estimator):
    """The ``RandomState`` a fit of ``estimator`` draws from that outlives
    the fit: its ``random_state`` when that is an instance, NumPy's global
    one when it is None; None for a seed (each fit draws from a new
    generator) or an estimator without ``random_state``."""
    if not hasattr(estimator, "random_state"):
        return None
    seed = estimator.random_state
    if seed is None:
        return np.random.mtrand._rand
    return seed if isinstance(seed, np.random.RandomState) else None


# The package's warnings held back in this context (deferred_warnings), or
# None: a context variable, so that a fit in another thread is unaffected.
_HELD = contextvars.ContextVar("attention_cluster_held_warnings", default=None)


@contextlib.contextmanager
def deferred_warnings():
    """Hold the package's warnings (:func:`warn`) of the block instead of
    emitting them; yields their list of ``(message, category)``, for
    :func:`replay` (the warnings of the one fit kept of several tried).
    Only this thread's (this context's) warnings are held, and the global
    warning filters are not touched."""
    held = []
    token = _HELD.set(held)
    try:
        yield held
    finally:
        _HELD.reset(token)


def replay(held):
    """``(message, category)`` pairs emitted through :func:`warn`: at the
    caller's line, under the caller's filters."""
    for message, category in held:
        warn(message, category)


def warn(message, category=UserWarning):
    """``warnings.warn``, attributed to the first caller outside the library.

    A warning from ``fit`` then names the user's line, whether it was called
    directly, through ``fit_predict``, a Pipeline or a search (the frames of
    scikit-learn and joblib are skipped too), instead of a line of this
    package; in a search's worker thread or process, which has no caller
    outside them, it names the package's public method. Inside
    :func:`deferred_warnings` it is held instead.
    """
    held = _HELD.get()
    if held is not None:
        held.append((message, category))
        return
    frame = sys._getframe(1)
    level, outermost = 2, 2
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        if (
            frame.f_code.co_filename.startswith(_PACKAGE_DIR)
            and frame.f_code.co_filename != __file__
        ):
            outermost = level
        frame = frame.f_back
        level += 1
    # No caller outside the libraries (a search's worker process or thread):
    # the package's outermost frame, its public method (this module's frames
    # are checks and decorators).
    warnings.warn(message, category, stacklevel=level if frame is not None else outermost)


def is_dask_collection(X):
    """Whether X is a Dask array or DataFrame (Dask is not imported for this)."""
    dask = sys.modules.get("dask")
    return dask is not None and dask.is_dask_collection(X)


def metadata_shape(X):
    """X's shape as the parameters' checks read it before X is (None when X
    has none): ``X.shape``, but a Dask DataFrame's number of rows unknown
    (NaN) and its columns counted from its metadata. Dask's ``shape`` of a
    DataFrame counts its rows lazily from a sample it makes of each column,
    and its sample of an interval column raised Dask's own TypeError ("type
    <class 'numpy.int64'> with value 1 is not an interval") before
    :func:`check_dtypes` named the column."""
    dd = sys.modules.get("dask.dataframe")
    if dd is not None and isinstance(X, dd.DataFrame):
        return (float("nan"), len(X.columns))
    return getattr(X, "shape", None)


def check_lazy_output(estimator, X):
    """Refuse Dask X where ``set_output`` asks the estimator's ``transform``
    for a pandas or polars container: its output is a lazy Dask array, which
    polars refuses and pandas computes whole, its index lost. Called before
    any work (before the fit of ``fit_transform``)."""
    if not is_dask_collection(X):
        return
    # scikit-learn's one reader of the container set_output and set_config
    # choose (per estimator, then global): it has no public one. A change
    # there fails the capability matrix's set_output rows on Dask input.
    from sklearn.utils._set_output import _get_output_config

    container = _get_output_config("transform", estimator)["dense"]
    if container != "default":
        raise ValueError(
            f"The transform output {container!r} (set_output(transform=...) or "
            "set_config(transform_output=...)) makes an in-memory container of the output, and "
            f"{type(estimator).__name__}.transform of Dask input is a lazy Dask array: compute "
            "X (or the output) first, or keep the default output for Dask input."
        )


def gathered(estimator, X, *, reset, sample_weight=None):
    """X in memory for an estimator that holds its rows (a Dask array or
    DataFrame computed, anything else as given), what the graph shows
    checked first: the width against ``n_features_in_`` unless ``reset``,
    and the length of ``sample_weight`` (in memory) against a Dask array's
    rows, with scikit-learn's messages, so that a bad call reads nothing.
    X's dtypes are checked first, in memory or not (:func:`check_dtypes`),
    and a Dask collection's objects once computed.
    """
    X = check_dtypes(X)
    if not is_dask_collection(X):
        return X
    if len(X.shape) == 2 and not reset:
        _check_n_features(estimator, X.shape[1])
    n = X.shape[0]
    if (
        sample_weight is not None
        and not is_dask_collection(sample_weight)
        and isinstance(n, numbers.Integral)
        and np.ndim(sample_weight) == 1
        and np.shape(sample_weight) != (n,)
    ):
        raise ValueError(f"sample_weight.shape == {np.shape(sample_weight)}, expected {(n,)}!")
    X = X.compute()
    # (Its objects' types, which the graph does not show.)
    check_dtypes(X)
    if isinstance(X, np.ndarray) and not X.flags.aligned:
        # A result sent by a worker process is read in place from the
        # message's buffer, at any byte offset. Numbers not aligned to their
        # size run the kernels' unaligned variants, whose sums may round
        # otherwise (InContextQuantizer's output was a unit in the last place
        # off the same rows in memory): copied aligned, the rows are fitted
        # as the same array in memory is.
        X = X.copy(order="K")
    return X


def check_dask_array(estimator, X, *, reset, count_rows=True):
    """``validate_data`` for a Dask array or DataFrame, without computing it.

    Checks what the graph's metadata show: two dimensions, known column
    chunks, whole rows in each block, NumPy blocks, at least one row and one
    feature, a dtype of numbers, bools, text or objects (converted lazily
    to float64 unless float32, each block as ``validate_data`` converts it
    in memory: text that is no number raises when read; a DataFrame's
    columns of pandas' extension dtypes of numbers as :func:`_numpy_columns`
    converts them; dates, durations and a DataFrame's columns of other
    values than numbers and text are the caller's to refuse first, as in
    memory, by :func:`check_dtypes`; dates and durations among objects
    are refused as each block is read, :func:`check_object_values`),
    and the width
    against ``n_features_in_`` (recorded when ``reset``, with a DataFrame's
    string column names as ``feature_names_in_``). A DataFrame's row count
    is its one computation (a pass over the index), after every other
    check, and so is an array's whose row chunks are unknown
    (:func:`_with_counted_rows`); with ``count_rows=False`` (the methods
    that map each block to its outputs, lazily) rows are not counted:
    nothing is computed.
    NaN and infinity can only be seen in the data: the first pass reports
    them (``DaskRows.scaled_second_moment``). Returns a ``dask.array.Array``.
    """
    import dask.array as da

    # A Dask DataFrame's class lives in dask.dataframe: if that is not
    # imported, X is none, and its import (a third of a second) is spared.
    dd = sys.modules.get("dask.dataframe")
    name = type(estimator).__name__
    names = columns = None
    if dd is not None and isinstance(X, dd.DataFrame):
        columns = list(X.columns)
        # A pandas frame's repeated names are refused by scikit-learn's
        # validate_data (narwhals' DuplicateError, a ValueError), whatever
        # their type: so is the same Dask frame, in its message.
        counts = collections.Counter(columns)
        if any(k > 1 for k in counts.values()):
            raise ValueError(
                "Expected unique column names, got:\n"
                + "\n".join(f"- '{c}' {k} times" for c, k in counts.items() if k > 1)
            )
        # scikit-learn's rule (validate_data) for the same pandas frame: names
        # of the type str alone are names (not numpy.str_), str among other
        # types an error.
        kinds = sorted({type(c).__qualname__ for c in columns})
        if kinds == ["str"]:
            names = np.asarray(columns, dtype=object)
        elif "str" in kinds:
            raise TypeError(
                "Feature names are only supported if all input features have string names, "
                f"but your input has {kinds} as feature name / column name types. If you want "
                "feature names to be stored and validated, you must convert them all to strings, "
                "by using X.columns = X.columns.astype(str) for example. Otherwise you can "
                "remove feature / column names from your input data, or convert them all to a "
                "non-string data type."
            )
        frame = _numpy_columns(X)
        # The columns' checks on the lazy array (rows of unknown count),
        # then, when counted, lengths=True counts the partitions' rows.
        X = frame.to_dask_array()
        _check_dask_columns(estimator, X, names, reset=reset)
        if count_rows:
            X = frame.to_dask_array(lengths=True)
    elif isinstance(X, da.Array):
        _check_dask_columns(estimator, X, names, reset=reset)
    else:
        raise TypeError(
            f"{name} takes a dask.array.Array or a dask DataFrame, got {type(X).__name__}."
        )
    if count_rows and any(np.isnan(c) for c in X.chunks[0]):
        # Rows of unknown count (the lazy outputs of predict or transform on
        # a DataFrame, a boolean mask): counted here, once, as a DataFrame's
        # are, on a new array (compute_chunk_sizes would change the caller's).
        X = _with_counted_rows(X)
    if X.shape[0] == 0:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required."
        )
    if X.dtype.kind == "O":
        # Objects are read as numbers block by block, where check_dtypes'
        # rule for them refuses dates among them (_object_block).
        X = X.map_blocks(_object_block, columns, dtype=np.float64, meta=np.empty((0, 0)))
    elif X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if reset:
        estimator.n_features_in_ = X.shape[1]
        if names is None:
            estimator.__dict__.pop("feature_names_in_", None)
        else:
            estimator.feature_names_in_ = names
    else:
        fitted = getattr(estimator, "feature_names_in_", None)
        # scikit-learn's warnings (validate_data) when one side has names.
        if names is None and fitted is not None:
            warn(f"X does not have valid feature names, but {name} was fitted with feature names")
        if names is not None and fitted is None:
            warn(f"X has feature names, but {name} was fitted without feature names")
    return X


def _object_block(block, columns):
    """A Dask block of objects as float64, dates and durations among them
    refused (:func:`check_object_values`; ``columns``: a DataFrame's, or
    None), pandas' missing values (``pd.NA``, of a frame whose columns mix
    its nullable numbers with others) as NaN, which the first pass reports
    as ``validate_data`` reports them in memory (NumPy's cast refuses
    ``pd.NA`` with a TypeError)."""
    check_object_values(block, columns)
    try:
        return block.astype(np.float64)
    except TypeError:
        import pandas as pd  # (only a pandas value is no number to NumPy here)

        missing = pd.isna(block)
        if not missing.any():
            raise
        return np.where(missing, np.nan, block).astype(np.float64)


def _with_counted_rows(X):
    """The Dask array X (of rows, or 1-D: weights) with its row chunks
    counted: one computation of its blocks' lengths (X is computed once,
    each block to its length), on a new array."""
    import dask.array as da

    drop = {"drop_axis": 1} if X.ndim == 2 else {}
    lengths = X.map_blocks(
        _block_length, chunks=((1,) * X.numblocks[0],), dtype=np.int64, **drop
    ).compute()
    chunks = (tuple(int(n) for n in lengths),) + X.chunks[1:]
    return da.Array(X.dask, X.name, chunks, meta=X._meta)


def _block_length(block):
    """A block's number of rows, as a one-element array (for ``map_blocks``)."""
    return np.array([block.shape[0]], dtype=np.int64)


def check_dtypes(X):
    """Refuse X of dates or durations, or a DataFrame's column of values that
    are neither numbers nor text, from its dtypes alone: before any work, in
    memory and through Dask alike, with a TypeError that names the column
    and how to convert it.

    Read: a NumPy or Dask array's dtype, a pandas or Dask DataFrame's
    column dtypes (a categorical column's by its categories'), another
    library's table by its Arrow schema (a polars DataFrame, a pyarrow
    Table: their dates and durations alone, when pyarrow is installed), and
    a list as the array NumPy makes of it (a list of NumPy's dates is an
    array of them). Values of dtype object (a NumPy array's, a pandas
    DataFrame's column's, a list's that mixes types) are read by their
    types, :func:`check_object_values`: dates and durations among them
    (NumPy's, Python's, pandas') are refused as their dtypes are (a Dask array's objects as each
    block is read, :func:`check_dask_array`). Dates
    (datetime64 of any unit, with a time zone or not, pandas' periods,
    pyarrow's dates and timestamps) and durations (timedelta64) are refused,
    although scikit-learn's ``check_array`` reads an array or a frame that
    is all dates (or all durations) as the counts of their unit since 1970:
    those numbers depend on the unit the dates are stored in (pandas stores
    the same dates in microseconds or in nanoseconds by how they were made)
    and set the features' origin, on which the attention layers' inner
    products depend. Beside a number, with a time zone, or as periods,
    scikit-learn refuses them too, with NumPy's TypeError. A column of
    other values that are no numbers (intervals, lists, by an extension
    dtype or as objects) is refused with a TypeError that names it. Any other dtype (numbers, bools, text, objects;
    complex numbers; a frame's dtypes of a library's own types) is left to
    the rows' checks.

    Returns X, but a list whose array NumPy makes in float64 as that array:
    the rows' checks then read it as they would have read the list, without
    converting it a second time (other lists are returned as they are: a
    list of float32 values is read in float64, as scikit-learn reads it).
    """
    dtypes = getattr(X, "dtypes", None)
    if hasattr(dtypes, "items") and hasattr(X, "columns"):
        objects = []
        for position, (column, dtype) in enumerate(dtypes.items()):
            _check_dtype(dtype, f"Column {column!r} of X", f"X[{column!r}]", _PANDAS_DAY)
            if isinstance(dtype, np.dtype) and dtype.kind == "O":
                objects.append(position)
        # (A Dask DataFrame's objects, which its graph does not show, are
        # read as its blocks are: check_dask_array.)
        if objects and not is_dask_collection(X):
            check_object_values(X.iloc[:, objects].to_numpy(), list(X.columns[objects]))
    elif hasattr(getattr(X, "schema", None), "__arrow_c_schema__"):
        # (A polars DataFrame's dtypes are a list of its own types.)
        _check_arrow_schema(X.schema)
    elif isinstance(getattr(X, "dtype", None), np.dtype):
        _check_dtype(X.dtype, "X", "X", _NUMPY_DAY)
        if X.dtype.kind == "O" and isinstance(X, np.ndarray):
            check_object_values(X)
    elif isinstance(X, (list, tuple)) and len(X) > 0:
        # The array check_array makes of the list (its dates may be in any
        # row): a conversion of its own, as long as check_array's.
        try:
            values = np.asarray(X)
        except (TypeError, ValueError, OverflowError):
            return X  # (check_array's error, with its message.)
        _check_dtype(values.dtype, "X", "np.asarray(X)", _NUMPY_DAY)
        if values.dtype.kind == "O":
            check_object_values(values, array="np.asarray(X)")
        if values.dtype == np.float64:
            return values
    return X


# One day in the advice of check_dtypes' messages, of a pandas column and of
# an array.
_PANDAS_DAY, _NUMPY_DAY = "pd.Timedelta(days=1)", "np.timedelta64(1, 'D')"

# Scalars of dates and durations: NumPy's, which NumPy's cast of objects to
# float64 (check_array's, a Dask block's astype) reads as the counts of their
# unit, as it reads an array of them; and Python's and pandas' (pd.Timestamp
# and pd.Timedelta are datetime's), which it refuses with a TypeError that
# names their type but not their column (a Dask frame's categorical column of
# dates, its categories unknown until read, holds them).
_DATE_SCALARS = (np.datetime64, datetime.date)
_TIME_SCALARS = _DATE_SCALARS + (np.timedelta64, datetime.timedelta)
# Sequences among objects (a pandas column of lists, or of arrays), which
# NumPy's cast refuses with a ValueError that names no column; a 0-d array
# it reads as its number. (Other objects, dicts and sets among them, it
# refuses with float()'s TypeError, which names their type and which
# scikit-learn's checks expect.)
_SEQUENCES = (list, tuple, np.ndarray)


def _is_time(value):
    return isinstance(value, _TIME_SCALARS)


def _is_sequence(value):
    return isinstance(value, _SEQUENCES) and not (isinstance(value, np.ndarray) and value.ndim == 0)


def check_object_values(values, columns=None, *, array="X"):
    """:func:`check_dtypes`' rule for values of dtype object: dates or
    durations among them (NumPy's, Python's, pandas') are refused as an
    array of them is, and sequences (lists, tuples, arrays) with a
    TypeError, each with the
    message that names their column (its position in ``values``, or its
    name in ``columns``, a pandas DataFrame's whose columns ``values``
    are), whatever row they are in. ``array``: the expression of the
    array in the advice, when ``columns`` is None.

    The values' types are read in one pass in C (``set(map(type, ...))``,
    of the order of check_array's cast of the objects to float64, which
    reads each of them too); the column holding one on the way to the
    error alone. No other dtype's values are read.
    """
    types = set(map(type, values.ravel(order="K")))
    if any(issubclass(t, _TIME_SCALARS) for t in types):
        refused = _is_time
    elif any(issubclass(t, _SEQUENCES) for t in types):
        refused = _is_sequence
    else:
        return
    j, first = next(
        (
            (j, v)
            for j, column in enumerate(values.T if values.ndim == 2 else [values.ravel()])
            for v in column
            if refused(v)
        ),
        (None, None),
    )
    if j is None:
        return  # (NumPy's 0-d arrays, which its cast reads as numbers.)
    if values.ndim != 2:
        what, expression, day = "X", array, _NUMPY_DAY
    elif columns is None:
        what, expression, day = f"Column {j} of X", f"{array}[:, {j}]", _NUMPY_DAY
    else:
        what, expression, day = f"Column {columns[j]!r} of X", f"X[{columns[j]!r}]", _PANDAS_DAY
    name = f"{type(first).__module__}.{type(first).__name__}"
    if refused is _is_sequence:
        # (NumPy's cast raised "setting an array element with a sequence",
        # which names neither the column nor the value.)
        raise TypeError(
            f"{what} has dtype=object, values of {name}, which are neither numbers nor "
            "text; X must hold numbers (or their text): one number per cell, so "
            f"spread the values of {expression} over columns of their own."
        )
    kind = "M" if isinstance(first, _DATE_SCALARS) else "m"
    _refuse_time(what, f"dtype=object, values of {name}", kind, _advice(kind, expression, day))


def _check_arrow_schema(schema):
    """:func:`check_dtypes`' rule for a table's Arrow schema: its columns of
    dates or durations (dictionaries of them too) are refused; nothing is
    read without pyarrow, or from a schema it does not take."""
    try:
        import pyarrow as pa

        fields = list(pa.schema(schema))
    except (ImportError, TypeError, ValueError, NotImplementedError):
        return
    for field in fields:
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            _refuse_time(
                f"Column {field.name!r} of X",
                f"Arrow type {field.type}",
                "M",
                "days since an origin",
            )
        if pa.types.is_duration(kind):
            _refuse_time(f"Column {field.name!r} of X", f"Arrow type {field.type}", "m", "days")


def _check_dtype(dtype, what, values, day):
    """:func:`check_dtypes`' rule for one dtype (an array's or a column's):
    ``what`` names its values in the message, ``values`` and ``day`` are the
    expressions of the values and of one day in the advice."""
    shown, period = f"dtype={dtype}", False
    if isinstance(dtype, np.dtype):
        if dtype.kind not in "Mm":
            return
    else:
        # (NumPy's dtypes are read without pandas, which X need not use.)
        import pandas as pd

        if not isinstance(dtype, pd.api.extensions.ExtensionDtype):
            # (Another library's frame whose dtypes are its own: left to the rows' checks.)
            return
        if isinstance(dtype, pd.CategoricalDtype):
            shown += f" (categories of dtype={dtype.categories.dtype})"
            values = f"{values}.astype({values}.cat.categories.dtype)"
            dtype = dtype.categories.dtype
        period = isinstance(dtype, pd.PeriodDtype)
        if dtype.kind not in "Mm" and not period:
            # (An extension dtype's kind "O" says nothing: intervals, lists.)
            if (
                isinstance(dtype, np.dtype)
                or dtype.kind in "biufc"
                or pd.api.types.is_numeric_dtype(dtype)
                or pd.api.types.is_string_dtype(dtype)
            ):
                return
            raise TypeError(
                f"{what} has {shown}, which holds neither numbers nor text; X must hold "
                "numbers (or their text)."
            )
    start = f"{values}.dt.to_timestamp()" if period else values
    kind = "m" if dtype.kind == "m" else "M"
    _refuse_time(what, shown, kind, _advice(kind, start, day))


def _advice(kind, values, day):
    """The advice of :func:`_refuse_time` for the dates (``kind`` "M") or
    durations ("m") of the expression ``values``, ``day`` one day's."""
    if kind == "m":
        return f"days: {values} / {day}"
    return f"days since an origin: ({values} - origin) / {day}"


def _refuse_time(what, shown, kind, advice):
    """The TypeError of :func:`check_dtypes` for dates (``kind`` "M") or
    durations ("m"): ``what`` (``shown``, its type) and the ``advice``."""
    if kind == "m":
        name, since, origin = "durations", "", ""
    else:
        name, since, origin = "dates", " since 1970", " and have 1970 as their origin"
    raise TypeError(
        f"{what} has {shown}, {name}, which are not read as numbers: as counts of their "
        f"unit{since}, they would depend on the unit they are stored in{origin}. Convert them "
        f"to numbers on the scale of the other features first, e.g. {advice}."
    )


def _numpy_columns(frame):
    """A Dask DataFrame whose columns all hold numbers in pandas' extension
    dtypes (``Float64``, ``Int64``, ``Float32``, ``double[pyarrow]``), some
    of them, or NumPy's bools beside other columns, as float64 (float32
    where NumPy's columns promote to it), as ``validate_data`` converts the
    same pandas frame in memory, converted as
    each partition is read, a missing value as NaN (which the first pass
    reports). Their ``to_dask_array`` is of dtype object, whose missing
    values (``pd.NA``) NumPy's cast to float64 refuses. Any other frame is
    returned as it is."""
    import pandas as pd

    dtypes = list(frame.dtypes)
    # NumPy's bool columns beside others of numbers are numbers too, as
    # scikit-learn converts them (to_dask_array would make them objects).
    plain = all(isinstance(t, np.dtype) for t in dtypes) and (
        len(set(dtypes)) == 1 or not any(t == np.bool_ for t in dtypes)
    )
    if plain or not all(pd.api.types.is_numeric_dtype(t) for t in dtypes):
        return frame
    # float32 where NumPy's columns promote to it (float32 beside bools), as
    # validate_data keeps the same pandas frame; pandas' own dtypes in float64.
    numpy = all(isinstance(t, np.dtype) for t in dtypes)
    dtype = np.float32 if numpy and np.result_type(*dtypes) == np.float32 else np.float64
    return frame.map_partitions(_float_partition, dtype, meta=_float_partition(frame._meta, dtype))


def _float_partition(part, dtype):
    """A pandas partition's columns as ``dtype`` (float64 or float32), a
    missing value as NaN."""
    import pandas as pd

    values = part.to_numpy(dtype=dtype, na_value=np.nan)
    return pd.DataFrame(values, index=part.index, columns=part.columns)


# The dtype kinds of X that validate_data reads as float64 in memory (its
# dtype=[np.float64, np.float32] casts them): numbers, bools, and text and
# objects, whose entries NumPy parses ("1.5" is 1.5, "abc" a ValueError when
# read), as scikit-learn's check_array does for an explicit float dtype.
# (Dates and durations, which it reads as counts of their unit, are refused
# before: check_dtypes.)
_READ_AS_NUMBERS = "biufUSO"


def _check_dask_columns(estimator, X, names, *, reset):
    """The checks of :func:`check_dask_array` that the columns and the dtype
    answer, whether the rows' count is known or not."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array, got a {X.ndim}D Dask array; reshape your data.")
    if any(np.isnan(c) for c in X.chunks[1]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first.")
    if X.shape[1] == 0:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
        )
    if not isinstance(X._meta, np.ndarray):
        raise TypeError(
            f"X's blocks are {type(X._meta).__module__}.{type(X._meta).__name__}, not NumPy "
            "arrays: a Dask array of sparse blocks is not supported. Pass dense blocks "
            "(X.map_blocks(lambda b: b.toarray())) or, in memory, one scipy.sparse matrix."
        )
    if X.numblocks[1] != 1:
        raise ValueError(
            f"X is chunked along its columns ({X.numblocks[1]} column blocks): each block "
            "must hold whole rows. Rechunk with X.rechunk({1: -1})."
        )
    if np.iscomplexobj(np.empty(0, dtype=X.dtype)):
        raise ValueError("Complex data not supported.")
    if X.dtype.kind not in _READ_AS_NUMBERS:
        raise ValueError(
            f"dtype={X.dtype} is not a numeric dtype; X must hold numbers (or their text)."
        )
    if not reset:
        _check_n_features(estimator, X.shape[1])
        fitted = getattr(estimator, "feature_names_in_", None)
        if names is not None and fitted is not None and not np.array_equal(names, fitted):
            raise ValueError("The feature names should match those that were passed during fit.")


def _check_n_features(estimator, n_features):
    """The width a fitted ``estimator`` expects, with scikit-learn's message."""
    if n_features != estimator.n_features_in_:
        raise ValueError(
            f"X has {n_features} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input."
        )


def check_dask_sample_weight(sample_weight, X):
    """Validate weights for a Dask X: returns (weights chunked as X's rows,
    relative to their :func:`power_of_two_unit` as in :func:`check_sample_weight`,
    or None; their sum; the unit; the number of positive weights; the
    largest relative weight). Dask
    weights are checked in two small computations: their largest, then the
    sum of the relative weights and the count of the positive ones (of the
    relative weights and of the given ones, which :func:`check_sample_weight`'s
    refusal compares)."""
    import dask.array as da

    if sample_weight is None:
        return None, float(X.shape[0]), 1.0, X.shape[0], 1.0
    if not isinstance(sample_weight, da.Array):
        w, unit = check_sample_weight(np.asarray(sample_weight), np.empty((X.shape[0], 0)))
        positive = int(np.count_nonzero(w > 0.0))
        weights = da.from_array(w, chunks=(X.chunks[0],))
        return weights, float(np.sum(w)), unit, positive, float(np.max(w))
    if np.iscomplexobj(np.empty(0, dtype=sample_weight.dtype)):
        raise ValueError("Complex data not supported for sample_weight.")
    _refuse_weights_of_no_numbers(sample_weight)
    if sample_weight.ndim == 1 and any(np.isnan(c) for c in sample_weight.chunks[0]):
        # Counted as X's rows are (a DataFrame's column, masked as X).
        sample_weight = _with_counted_rows(sample_weight)
    if sample_weight.shape != (X.shape[0],):
        raise ValueError(f"sample_weight.shape == {sample_weight.shape}, expected {(X.shape[0],)}.")
    w = sample_weight.astype(np.float64).rechunk((X.chunks[0],))
    finite, negative, peak = da.compute(
        da.isfinite(w).all(), (w < 0).any(), w.max(), optimize_graph=False
    )
    if not finite or negative:
        _check_weight_summary(bool(finite), bool(negative), 0.0)
    unit = power_of_two_unit(peak)
    relative = w / unit
    # Of the relative weights, which cannot overflow; with the rows of
    # positive weight, which the subsamples count (and the caller's, which
    # a weight below float64's smallest ratio would not be among).
    total, positive, given = da.compute(
        relative.sum(), (relative > 0.0).sum(), (w > 0.0).sum(), optimize_graph=False
    )
    _check_weights_held(int(given) - int(positive))
    _check_weight_summary(True, False, float(total))
    w = relative
    return w, float(total), unit, int(positive), float(peak) / unit


def check_count(value, name, minimum=1):
    """An integer (or an integral float, not a bool) ``>= minimum``; returns it as int."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        # An integer, or a float integral and finite (a Fraction's or a
        # Decimal's np.isfinite was NumPy's TypeError).
        or not isinstance(value, (numbers.Integral, float, np.floating))
        or (not isinstance(value, numbers.Integral) and not np.isfinite(value))
        or int(value) != value
        or value < minimum
    ):
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def as_numbers(value):
    """``value`` as a float64 array, or None when it is not a number or an
    array of numbers: a bool, a text, a complex value, a ragged list.

    The one test behind the checks of numeric parameters (NumPy would read
    ``True`` as 1 and ``"0.5"`` as 0.5).
    """
    if isinstance(value, (bool, np.bool_, str, bytes)):
        return None
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "iufO":
            return None
        return raw.astype(np.float64, copy=False)
    except (TypeError, ValueError, OverflowError):
        return None


def check_matrix(a, name, *, shape=(None, None), labels=("n_rows", "d")):
    """``a`` as a non-empty, real, finite float64 matrix.

    ``shape`` fixes either dimension (None: any size) and ``labels`` name
    them in the message. Lighter than ``check_array`` (no copy of a float64
    matrix, scikit-learn's messages not needed).
    """
    if np.iscomplexobj(a):
        raise ValueError(f"Complex data not supported: {name} must be real.")
    m = as_numbers(a)
    if m is None:
        raise ValueError(f"{name} must be a real numeric array.")
    if m.ndim != 2 or m.size == 0 or any(s not in (None, g) for s, g in zip(shape, m.shape)):
        wanted = f"({', '.join(labels)})"
        if any(s is not None for s in shape):
            sizes = ", ".join(str(label if s is None else s) for s, label in zip(shape, labels))
            wanted += f" = ({sizes})"
        raise ValueError(
            f"{name} must be a non-empty 2-D array of shape {wanted}, got shape {m.shape}."
        )
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{name} must be finite, got NaN or infinity.")
    return m


def check_parameter_matrix(a, name, **kwargs):
    """:func:`check_matrix` of an array that is a parameter (the generators'
    centroids, the dynamics' query, key and value): refused as one."""
    try:
        return check_matrix(a, name, **kwargs)
    except ValueError as error:
        raise InvalidParameterError(str(error)) from None


def check_noise(noise, *, scalar=False):
    """sigma: finite and >= 0, as a float array (a 0-d array for a scalar);
    with ``scalar``, one number, returned as a float."""
    sigma = as_numbers(noise)
    if sigma is None or not np.isfinite(sigma).all() or not (sigma >= 0).all():
        raise InvalidParameterError(f"noise must be a finite number >= 0, got {noise!r}.")
    if scalar:
        if sigma.ndim != 0:
            raise InvalidParameterError(f"noise must be one number, got shape {sigma.shape}.")
        return float(sigma)
    return sigma


def check_temperature(temperature, *, allow_zero=False, curve=False):
    """lambda: finite and > 0 (>= 0 with ``allow_zero``), one number unless ``curve``.

    Returns a Python float for a scalar, which keeps float32 arrays in
    float32 (NEP 50), and, with ``curve`` (theory's functions, evaluated at
    many temperatures at once), a float64 array otherwise.
    """
    if not curve and np.ndim(temperature) != 0:
        raise InvalidParameterError(
            f"temperature must be one number, got shape {np.shape(temperature)}."
        )
    t = as_numbers(temperature)
    if t is None or np.any(~np.isfinite(t)) or np.any(t < 0 if allow_zero else t <= 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidParameterError(
            f"temperature must be a finite number {bound}, got {temperature!r}."
        )
    return float(t) if t.ndim == 0 else t


def check_weights(weights, n_clusters):
    """Mixture weights, uniform when None: n_clusters non-negative numbers summing to 1.

    A sum within ``np.isclose`` of 1 is taken as 1, and the weights are
    divided by it, so that what is returned sums to 1 to rounding (as
    ``RandomState.choice`` requires of its probabilities).
    """
    if weights is None:
        return np.full(n_clusters, 1.0 / n_clusters)
    weights = as_numbers(weights)
    if (
        weights is None
        or weights.shape != (n_clusters,)
        or not np.all(np.isfinite(weights))
        or np.any(weights < 0)
        or not np.isclose(weights.sum(), 1.0)
    ):
        raise InvalidParameterError("weights must be n_clusters non-negative numbers summing to 1.")
    total = float(weights.sum())
    return weights if total == 1.0 else weights / total
