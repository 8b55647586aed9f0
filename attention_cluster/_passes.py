"""The pass layer: the only code that reads the rows of the data.

The solvers never index the data array. They ask a *data object* for passes:
statistics that are a map over chunks of rows followed by a reduction of small
results (a ``d x d`` matrix at most). The object is built once in ``fit``
from the validated X, its sample weights and the overall scale ``s``; every
pass sees the rows ``x_i / s`` and the weights ``w_i``, and returns float64
results whatever X's dtype.

Interface (what a backend implements)
-------------------------------------
Attributes ``n_samples``, ``n_features``, ``dtype``, ``scale``,
``total_weight`` (``sum_i w_i``, ``n`` for unit weights),
``sample_weight`` (float64 array, or None for unit weights),
``weight_unit`` (what the weights given were divided by), ``n_weighted``
(rows of positive weight), ``in_memory`` and ``sparse``; the context
manager's :meth:`close`; :meth:`~DenseRows.check_finite` (NaN and infinity,
where a backend checks them before its passes), and:

- :meth:`~DenseRows.moments` (the scaled second moment and the mean in one
  pass, with NaN and infinity found), :meth:`~DenseRows.map_rows` (a function
  of each block of rows: the predictions) and :meth:`~DenseRows.weighted_mean`
  (of such a function's values: ``score``, ``bic``);
- :meth:`~DenseRows.prepare_subsamples` (one nested draw for every subsample
  of a fit, ``_draws``);

- :meth:`~DenseRows.rescaled` (the same rows divided by another scale, sharing
  the thread pool);
- :meth:`~DenseRows.mean` and :meth:`~DenseRows.centred` (the rows minus a
  vector, subtracted as each pass reads the rows: X is never copied);
- :meth:`~DenseRows.second_moment` (``sum_i w_i x_i x_i^T / sum_i w_i``),
  :meth:`~DenseRows.scaled_second_moment` (the same with a scale that keeps
  it finite for data of any magnitude) and :meth:`~DenseRows.moment_action`
  (the same applied to K vectors, without forming the d x d matrix);
- :meth:`~DenseRows.norm_moments` (weighted means of ``||x||^2`` and
  ``||x||^4``);
- :meth:`~DenseRows.exact_terms` (the per-row part of the exact risk and of its
  gradient, ``math.md`` section 3);
- :meth:`~DenseRows.e_step` (the EM refinement's sufficient statistics and
  log-likelihood, ``math.md`` section 7);
- :meth:`~DenseRows.head_totals` (the post-hoc signs' sums),
  :meth:`~DenseRows.labels` and :meth:`~DenseRows.labels_and_counts` (with
  their weighted counts, in the same pass where the backend can);
- :meth:`~DenseRows.subsample` (a data object on about ``size`` rows drawn
  uniformly, held in memory; for Dask data, on the workers when it is larger
  than the client's budget), :meth:`~DenseRows.project` (``X V``; rows in
  memory only) and :meth:`~DenseRows.draw` (rows drawn with
  probability proportional to their weight, for PSGD's sequences).

:class:`SparseRows` implements the same methods for CSR/CSC data (with the
centring applied inside its products) and :class:`DaskRows` the passes of a
fit for Dask arrays (each pass one Dask computation over the blocks); nothing
else changes: this module is the one place where dense, sparse and Dask data
differ (:func:`rows_from` validates any accepted X and picks the class). The chunks'
results are added in the chunks' order, and the chunks do not depend on the
number of threads, so a fit gives the same result on one thread or many, in a
thread or after ``fork``.

Threads
-------
Chunks run on a :class:`concurrent.futures.ThreadPoolExecutor` whose kernels
release the GIL (``nogil`` Numba functions in ``_kernels``, or NumPy's BLAS
calls for the second moment); Numba's own threading layer is not used, so
fits stay safe in threads and in forked processes. The pool is created at the
first pass that has more than one chunk and shut down by :meth:`close` (the
object is a context manager).
"""

import copy
import functools
import numbers
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import threadpoolctl
from sklearn.preprocessing import normalize
from sklearn.utils import assert_all_finite
from sklearn.utils.validation import validate_data

from . import _kernels, _numpy_kernels
from ._draws import NestedDraw, nested_rows
from ._validation import (
    check_dask_array,
    check_dask_sample_weight,
    check_dtypes,
    check_sample_weight,
    is_dask_collection,
    largest_magnitude,
    power_of_two_unit,
    quiet_finite_check,
    warn,
)

__all__ = [
    "DaskRows",
    "DenseRows",
    "SparseRows",
    "one_blas_thread",
    "dense_block",
    "row_major",
    "row_chunks",
    "rows_from",
    "stored_bytes",
    "unit_rows",
    "unit_terms",
    "usable_threads",
]

# Bytes of X per chunk: large enough that a pass has few chunks (each costs a
# task on the pool), small enough that a float64 copy of a chunk stays small.
_CHUNK_BYTES = 1 << 22


def usable_threads(n_threads=None):
    """Threads a pass may use: ``n_threads``, or as many as scikit-learn's
    ``KMeans`` runs by default: the cores this process may run on, at most
    ``OMP_NUM_THREADS`` and threadpoolctl's limit on OpenMP (joblib's
    workers set both to their share of the cores, so that a search with
    ``n_jobs`` does not run ``n_jobs`` times the cores' threads)."""
    if n_threads is not None:
        return int(n_threads)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    # OpenMP's runtime reads OMP_NUM_THREADS at its start; threadpoolctl's
    # limits change it later. Without an OpenMP runtime, the variable itself.
    openmp = _threadpool_controller().select(user_api="openmp").info()
    limits = [lib["num_threads"] for lib in openmp]
    if not limits and os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        limits = [int(os.environ["OMP_NUM_THREADS"])]
    return max(1, min([cores, *limits]))


@functools.cache
def _threadpool_controller():
    # Finding the loaded BLAS libraries costs about a millisecond: done once
    # per process, as scikit-learn does.
    return threadpoolctl.ThreadpoolController()


class _OneBlasThread:
    """The process's BLAS on one thread while any fit, predict or score runs.

    BLAS's thread count belongs to the process, not to a thread: fits that
    overlap in threads (a search on joblib's threading backend) each limiting
    it and restoring what they found would leave it at one thread when the
    first to start ends first. The first to enter limits it, the last to
    leave restores it.

    threadpoolctl (from 3.8) lets one thread at a time set the count of an
    OpenBLAS that runs its own threads, the first to set it, until that
    thread gives it up. A thread gives it up when its outermost context
    ends (contexts nest: a fit's seeding runs in one), so that the last to
    leave, or a later fit in another thread, can set it: kept, the thread of
    a process's first fit held it for good, and every later fit in another
    thread ran BLAS on all its threads. A thread that held it before its
    outermost context began (inside a ``threadpool_limits`` block of its
    own) keeps it, as that block does.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._limiter = None
        # Per thread: its contexts open, and whether it keeps the right to
        # set the count when the outermost ends.
        self._thread = threading.local()

    def __enter__(self):
        depth = getattr(self._thread, "depth", 0)
        if not depth:
            self._thread.keeps = _holds_blas_control()
        self._thread.depth = depth + 1
        with self._lock:
            if not self._users:
                self._limiter = _threadpool_controller().limit(limits=1, user_api="blas")
            self._users += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._users -= 1
            if not self._users:
                self._limiter.restore_original_limits()
                self._limiter = None
            self._thread.depth = getattr(self._thread, "depth", 1) - 1
            if not self._thread.depth and not getattr(self._thread, "keeps", False):
                _give_up_blas_control()
        return False

    def _after_fork(self):
        # A child forked while another thread held the lock would wait on
        # it forever; the child's own fits start from no user, and from the
        # BLAS threads the process had before the parent's fits limited them.
        if self._users:
            self._limiter.restore_original_limits()
            _give_up_blas_control()
        self.__init__()


def _holds_blas_control():
    """Whether this thread holds the right to set OpenBLAS's count already
    (threadpoolctl 3.8's controlling thread, its state read where it keeps
    it; before 3.8, no thread holds such a right)."""
    state = getattr(threadpoolctl.OpenBLASController, "_SHARED_STATE", None)
    return getattr(state, "controlling_thread", None) is threading.current_thread()


def _give_up_blas_control():
    """Let other threads set OpenBLAS's thread count, if this one holds it
    (threadpoolctl 3.8's rule; a no-op before it, and in other threads)."""
    clear = getattr(threadpoolctl.OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear()


_ONE_BLAS_THREAD = _OneBlasThread()
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_ONE_BLAS_THREAD._after_fork)


def one_blas_thread():
    """Context in which BLAS runs on one thread (the pool's threads share the
    cores), the process's thread count restored when the last such context
    in any thread ends."""
    return _ONE_BLAS_THREAD


def _chunk_rows(n_features):
    """Rows per chunk: about ``_CHUNK_BYTES`` of float64, a multiple of 256."""
    rows = _CHUNK_BYTES // (8 * max(n_features, 1))
    return max(256, rows - rows % 256)


def _chunk_bounds(n_samples, step):
    """``(lo, hi)`` of the chunks of ``step`` rows (the last one shorter)."""
    return [(lo, min(lo + step, n_samples)) for lo in range(0, n_samples, step)]


def row_chunks(n_samples, width):
    """``(lo, hi)`` of the chunks of rows of ``width`` numbers each that a pass takes in turn."""
    return _chunk_bounds(n_samples, _chunk_rows(width))


def _stacked(block_result, bounds, run, empty):
    """The per-row results ``block_result(lo, hi)`` of the chunks ``bounds``, in order.

    Dense results are written into one array, allocated at the dtype and
    width of the result for the first row (joining the chunks' arrays held
    them and the whole: twice the output); sparse ones are stacked as CSR.
    ``run(fn, bounds)`` runs the chunks (on a pool, or in turn); ``empty``
    is returned for no rows.
    """
    if not bounds:
        return empty
    probe = block_result(0, 1)
    if sp.issparse(probe):
        return sp.vstack(run(block_result, bounds), format="csr")
    out = np.empty((bounds[-1][1], *probe.shape[1:]), dtype=probe.dtype)

    def fill(lo, hi):
        out[lo:hi] = block_result(lo, hi)

    run(fill, bounds)
    return out


class _Pool:
    """A thread pool created on first use, shared by rescaled copies."""

    def __init__(self, n_threads):
        self.n_threads = n_threads
        self.executor = None

    def map(self, fn, tasks):
        if self.n_threads <= 1 or len(tasks) <= 1:
            return [fn(*t) for t in tasks]
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=self.n_threads)
        return list(self.executor.map(lambda t: fn(*t), tasks))

    def close(self):
        if self.executor is not None:
            self.executor.shutdown()
            self.executor = None


# Seeds of the subsamples' draws are drawn below this.
_SEED_LIMIT = 2**31 - 1


class _Rows:
    """What every backend shares: it is a context manager (see ``close``), and
    its subsamples are nested draws (:mod:`._draws`)."""

    _nested = None  # the NestedDraw of prepare_subsamples, shared by copies
    # The rows' weights are the caller's sample_weight divided by this power
    # of two (rows_from): weights are relative, and so never overflow.
    weight_unit = 1.0
    # The largest weight, relative to that unit (rows_from; 1 for unit
    # weights): a stream's limit on its batches' weights.
    heaviest_weight = 1.0
    # Whether its passes run Numba's kernels or NumPy's forms (see compiles).
    compiled = True
    # Whether the rows are a sparse matrix (SparseRows: passes cost O(nnz K)).
    sparse = False
    # Most rows a subsample brings into memory (DaskRows: the client's bound).
    most_rows_in_memory = float("inf")

    # (the weights counted, the count) of n_weighted: copies that keep the
    # weights keep the count, and a subsample's weights are counted anew.
    _weighted_count = None

    @property
    def kernels(self):
        """The module of the chunk kernels its passes run: Numba's, or NumPy's forms."""
        return _kernels if self.compiled else _numpy_kernels

    def column_support(self):
        """The columns in which a row the passes see may be non-zero, the
        others zero in every row (:class:`SparseRows`'), or None: any column."""
        return None

    @property
    def n_weighted(self):
        """The number of rows of positive weight (all rows for unit
        weights): the rows subsamples are drawn from, and the stages sized."""
        w = self.sample_weight
        if w is None:
            return self.n_samples
        if self._weighted_count is None or self._weighted_count[0] is not w:
            self._weighted_count = (w, self._count_positive(w))
        return self._weighted_count[1]

    def _count_positive(self, w):
        return int(np.count_nonzero(w > 0.0))

    @property
    def weight_squares(self):
        """``sum_i w_i^2`` (the rows of positive weight for unit weights):
        with ``total_weight``, Kish's effective number of rows ``(sum w)^2 /
        sum w^2``. Rows in memory only (a stream's batches)."""
        w = self.sample_weight
        return float(self.n_weighted) if w is None else float(np.dot(w, w))

    def unit_weighted(self):
        """The same rows, each of positive weight weighing one and the others
        none (the rows themselves for unit weights): a pass then counts rows,
        not weight. Rows in memory only (a stream's batches)."""
        if not self.in_memory:
            raise TypeError("unit_weighted takes rows in memory (a stream's batches).")
        if self.sample_weight is None:
            return self
        other = copy.copy(self)
        other.sample_weight = (self.sample_weight > 0.0).astype(np.float64)
        other.total_weight = float(self.n_weighted)
        # The caches of the weights (the draws' cumulative weights, the
        # sparse rows of positive weight with theirs).
        other._cum_weights = other._kept = None
        return other

    def map_tasks(self, fn, tasks):
        """``[fn(*task) for task in tasks]``, on the rows' threads where they have a pool.

        For work on the rows' own scale that is not a pass (the Jacobi sweeps
        of the start turn disjoint pairs of heads in parallel); ``fn`` must
        release the GIL to gain from the threads.
        """
        return [fn(*task) for task in tasks]

    def prepare_subsamples(self, seed, size):
        """Draw every later subsample of at most ``size`` rows from one nested draw.

        The subsamples are then nested (a smaller one is a subset of a
        larger) and seeded by ``seed``, not by the ``rng`` passed to
        :meth:`subsample`; on Dask data the rows of the largest are taken in
        one read of X. Copies made after this call (rescaled, centred) share
        the draw.
        """
        self._nested = NestedDraw(seed, min(size / max(self.n_weighted, 1), 1.0))

    def _draw_for(self, rng, size):
        """``(draw, fraction)`` for a subsample of about ``size`` rows: the
        prepared draw when it holds them, else a draw of its own seeded by
        ``rng`` (one integer drawn). ``size`` counts rows of positive weight:
        the rows' keys are drawn below ``size / n_weighted``."""
        fraction = size / self.n_weighted
        if self._nested is not None and fraction <= self._nested.fraction:
            return self._nested, fraction
        return NestedDraw(rng.randint(_SEED_LIMIT), fraction), fraction

    def subsample(self, rng, size):
        """About ``size`` distinct rows drawn uniformly, with their weights, or self.

        The rows whose keys are below ``size / n`` (:mod:`._draws`: each row
        drawn with that probability, independently), from the prepared draw
        (:meth:`prepare_subsamples`) or from one seeded by ``rng``, as
        :meth:`_taken` keeps them (:class:`DenseRows`: a copy in X's dtype
        that its passes read in float64, with the same scale, whose passes
        run on this one's thread pool, by the same chunks whatever the
        threads, so the sums do not depend on them; :class:`SparseRows`: CSR
        rows). A subsample holds no row of zero
        weight (:func:`_positive`): those drawn are left out, and ``size``
        counts rows of positive weight (:attr:`n_weighted`). With at most
        ``size`` of them, every row of positive weight: ``self`` when no
        weight is zero. (:class:`DaskRows` has its own.)
        """
        if self.n_weighted > size:
            return self._taken(self._subsample_indices(rng, size))
        if _all_positive(self.sample_weight):
            return self
        return self._taken(np.arange(self.n_samples))

    def _weighted_indices(self, idx):
        """Of the row indices ``idx``, those of positive weight (:func:`_positive`)."""
        w = self.sample_weight
        return idx if w is None else idx[w[idx] > 0.0]

    def _subsample_indices(self, rng, size):
        """Indices (increasing) of the rows of a subsample of about ``size``
        rows, for the backends in memory."""
        draw, fraction = self._draw_for(rng, size)
        if draw.taken is None:
            draw.taken = nested_rows(draw.seed, self.n_samples, 0, self.n_samples, draw.fraction)
        idx, keys = draw.taken
        return idx[keys < np.float32(fraction)]

    def halves(self):
        """The rows at even and at odd positions, for the backends in memory.

        Of a subsample (rows drawn independently, kept in their order), two
        disjoint subsamples of half its size, independent of each other.
        """
        idx = np.arange(self.n_samples)
        return self._taken(idx[0::2]), self._taken(idx[1::2])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def moments(self):
        """``(c, M / c^2, mean)``: :meth:`scaled_second_moment` and :meth:`mean`
        (two passes; one where a backend computes both together)."""
        c, M = self.scaled_second_moment()
        return c, M, self.mean()

    def label_counts(self, labels, minlength):
        """The weighted counts of ``labels`` (of :meth:`labels`), float64."""
        counts = np.bincount(labels, weights=self.sample_weight, minlength=minlength)
        return counts.astype(np.float64, copy=False)

    def labels_and_counts(self, centers, gain, bias, origin=None, scale=1.0):
        """``(labels, counts)``: :meth:`labels` and :meth:`label_counts` (one
        pass where a backend counts as it labels)."""
        labels = self.labels(centers, gain, bias, origin, scale)
        return labels, self.label_counts(labels, len(centers))

    def rescaled(self, scale):
        """The same rows seen divided by ``scale`` (sharing a thread pool, if any)."""
        other = copy.copy(self)
        other.scale = float(scale)
        return other

    def for_repeated_sums(self):
        """The same rows, for a caller of many passes over them (the principal
        subspace's iteration): self (:class:`SparseRows` keep a copy of X
        by columns)."""
        return self

    def _cumulative_weights(self):
        """Cumulative weights for :meth:`draw` (unit weights: 1, 2, ..., n), computed once."""
        if self._cum_weights is None:
            self._cum_weights = (
                np.arange(1.0, self.n_samples + 1.0)
                if self.sample_weight is None
                else np.cumsum(self.sample_weight)
            )
        return self._cum_weights


class DenseRows(_Rows):
    """Dense rows in memory (a C-contiguous float32 or float64 array).

    ``in_memory`` is True: the rows can be indexed, projected and streamed.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Validated data, float32 or float64. Never copied, never modified.
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Validated non-negative weights (``_validation.check_sample_weight``);
        None for unit weights.
    scale : float, default=1.0
        ``s``: every pass sees ``x / s``.
    n_threads : int or None, default=None
        Threads of the pool; None: the cores this process may use.
    pool : _Pool or None, default=None
        A pool to share (a subsample's passes run on its parent's threads);
        None: a pool of ``n_threads`` of its own.
    compiled : bool or None, default=None
        Whether the passes run Numba's kernels or NumPy's forms (a subsample
        runs its parent's); None: :func:`compiles` X's size.
    dtype : dtype or None, default=None
        The dtype in which the passes read the rows; None: X's. float64 for
        float32 X (:meth:`_taken`'s subsamples): each chunk is cast as a pass
        reads it, so that the passes give the numbers of a float64 copy of
        X, which is not made.
    """

    in_memory = True

    def __init__(
        self,
        X,
        sample_weight=None,
        scale=1.0,
        n_threads=None,
        pool=None,
        compiled=None,
        dtype=None,
    ):
        self._X = X
        self.sample_weight = (
            None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        )
        self.n_samples, self.n_features = X.shape
        self.dtype = X.dtype if dtype is None else np.dtype(dtype)
        self.scale = float(scale)
        self.total_weight = (
            float(self.n_samples)
            if self.sample_weight is None
            else float(np.sum(self.sample_weight))
        )
        self._pool = _Pool(usable_threads(n_threads)) if pool is None else pool
        self._bounds = row_chunks(self.n_samples, self.n_features)
        self.compiled = compiles(X.size) if compiled is None else compiled
        self._cum_weights = None
        # The rows are X - _offset (see centred); an empty offset is none.
        self._offset = np.empty(0, dtype=self.dtype)
        # max |X|, read by centred once for rows narrower than float64.
        self._stored_peak = None
        # NumPy's forms: each chunk's scaled blocks, by the chunk's first row
        # (see exact_terms); a copy seeing other rows starts without.
        self._scaled_blocks = {}

    # -- life cycle ---------------------------------------------------------

    def close(self):
        """Shut down the thread pool (a later pass starts a new one)."""
        self._pool.close()

    @property
    def n_threads(self):
        return self._pool.n_threads

    # -- helpers ------------------------------------------------------------

    def _weights(self, lo, hi):
        return np.empty(0) if self.sample_weight is None else self.sample_weight[lo:hi]

    def _given(self, lo, hi, cast=True):
        """Rows lo..hi as given (neither centred nor scaled), in the passes'
        dtype (``cast=False``: as stored, in X's)."""
        B = self._X[lo:hi]
        return B.astype(self.dtype, copy=False) if cast else B

    def _rows(self, lo, hi, cast=True):
        """Rows lo..hi as the passes see them (centred, unscaled): centred,
        in the passes' dtype whatever ``cast`` (the offset holds it, and the
        difference takes it: a float32 chunk is not cast apart first)."""
        if self._offset.size:
            return self._X[lo:hi] - self._offset
        return self._given(lo, hi, cast)

    def map_tasks(self, fn, tasks):
        return self._pool.map(fn, tasks)

    def _map(self, fn, bounds=None, positive=False, cast=True):
        """``fn(rows, weights, lo, hi)`` on every chunk (``bounds``, default the
        passes' chunks), results in chunk order.

        ``positive``: the chunk's rows of positive weight alone, for the
        passes that sum over rows (:func:`_positive`). ``cast``: the rows in
        the passes' dtype; False: as stored, for a pass that reads any dtype
        as float64 itself (a float32 subsample read in float64, ``dtype``, is
        then not converted twice).
        """

        def run(lo, hi):
            B, w = self._rows(lo, hi, cast), self._weights(lo, hi)
            return fn(*(_positive(B, w) if positive else (B, w)), lo, hi)

        return self._pool.map(run, self._bounds if bounds is None else bounds)

    # -- passes -------------------------------------------------------------

    def scaled_second_moment(self):
        """``(c, M / c^2)``: the second moment M (see :meth:`second_moment`) and a scale.

        ``c > 0`` is the largest root sum of squares of a column over a chunk
        of rows (``c = 0`` for all-zero data, with a zero matrix), found in the
        same pass, so that ``M / c^2`` is computed without overflow or
        underflow for finite data of any magnitude: a chunk whose product
        overflows is divided by its largest entry first. float64 chunks are
        multiplied as they are; float32 chunks are converted to float64 up
        to ``_MOMENT_MAX_FEATURES`` features, and wider ones multiplied in
        float32 by tiles whose sums are added in float64
        (:func:`_blas_moment_sums`).
        """
        c, M, _ = self.moments()
        return c, M

    def moments(self):
        """``(c, M / c^2, mean)``: :meth:`scaled_second_moment` and :meth:`mean` in one pass.

        Raises ValueError, with scikit-learn's messages, when X holds NaN or
        infinity: a non-finite entry makes its column's sum of squares
        non-finite, and the largest entry of the chunk then tells which. The
        estimator's ``fit`` leaves this check to this pass, its first. Each
        chunk's sums are :func:`_kernels.moment_sums` (one read) up to
        ``_MOMENT_MAX_FEATURES`` features when the passes run Numba's
        kernels, else two BLAS products (:func:`_blas_moment_sums`).
        """
        inv = 1.0 / self.scale
        scratch = {}  # a float64 buffer per thread, for narrow float32 chunks
        # Few features: one Numba kernel reads each chunk once (see moment_sums).
        fused = self.compiled and self.n_features <= _MOMENT_MAX_FEATURES
        # A chunk whose largest column sum of squares is below ``tiny`` is
        # divided by its largest entry first: its entries' squares may lie
        # under the smallest normal number of the products' dtype (float32
        # for wide float32 chunks, see _blas_moment_sums).
        float32 = self.dtype == np.float32 and self.n_features > _MOMENT_MAX_FEATURES
        tiny = _FLOAT32_TINY if float32 else 1e-250

        def sums(B, w):
            return _kernels.moment_sums(B, w) if fused else _blas_moment_sums(B, w, scratch)

        def chunk(B, w, lo, hi):
            # (error, (c of the chunk as c' 2^k: (c', k)), its scaled moment,
            # its column sums over 2^e, e): the column sums of rows beyond
            # 2^900 are summed at the scale of their largest entry, as their
            # products are, and c is kept as a pair: a column's root sum of
            # squares over a chunk of rows near float64's largest numbers
            # passes it.
            G, total = sums(B, w)
            top = float(np.max(np.diag(G))) if G.size else 0.0
            if not (np.isfinite(top) and top > tiny):
                peak = largest_magnitude(B)
                if not np.isfinite(peak):  # NaN propagates through max and min
                    return ("NaN" if np.isnan(peak) else "infinity"), (0.0, 0), G, total, 0
                if peak == 0.0:
                    return None, (0.0, 0), G, total, 0
                # The chunk divided by the power of two nearest its largest
                # entry (the column sums kept from above), by the same
                # products: exact, so that the moments of X and of 2^k X
                # differ by 4^k to the last bit on either branch. Wide
                # float32 chunks, whose plain products are float32 tiles, are
                # multiplied in float64 here (their squares left float32's
                # range).
                exponent = int(np.frexp(peak)[1])
                G, scaled = sums(
                    np.ldexp(np.asarray(B, np.float64) if float32 else B, -exponent), w
                )
                top = float(np.max(np.diag(G)))
                if top == 0.0:  # only zero-weight rows
                    return None, (0.0, 0), G, total, 0
                shift = _huge_exponent(peak)
                if shift:
                    total = scaled
                elif not np.all(np.isfinite(total)):
                    # Wide float32 chunks' column sums, by float32 tiles,
                    # pass float32 from about 3e35 (1024 rows): the scaled
                    # chunk's, in float64, at its power of two.
                    total, shift = scaled, exponent
                G /= top
                return None, (np.sqrt(top), exponent), G, total, shift
            # (In place: the chunk's sums are its own, and the pass holds one
            # d x d matrix a chunk until they are added.)
            G /= top
            return None, (np.sqrt(top), 0), G, total, 0

        step = _chunk_rows(self.n_features)
        if not fused:
            # Each chunk's d x d sums are scaled and added apart: chunks of
            # at least _MOMENT_ROWS_PER_FEATURE d rows keep that O(d^2)
            # memory traffic below the chunk's products (rows d^2 / 2).
            step = max(step, _MOMENT_ROWS_PER_FEATURE * self.n_features)
        found = self._map(chunk, _chunk_bounds(self.n_samples, step), positive=True)
        bad = {b for b, *_ in found} | {_finiteness(_dropped(self._X, self.sample_weight))}
        if "NaN" in bad:
            raise ValueError("Input X contains NaN.")
        if "infinity" in bad:
            raise ValueError(f"Input X contains infinity or a value too large for {self.dtype!r}.")
        total, top_shift = _sum_at_common_shift([(t, e) for *_, t, e in found], self.n_features)
        mean = np.ldexp(total * inv / self.total_weight, top_shift)
        d = self.n_features
        # The chunks' c at the power of two of the largest (exact): the
        # ratios p / c are the same numbers as from c itself, which may
        # exceed float64.
        alive = [(p, k, G) for _, (p, k), G, _, _ in found if p > 0.0]
        if not alive:
            return 0.0, np.zeros((d, d)), mean
        top = max(k + int(np.frexp(p)[1]) for p, k, _ in alive)
        parts = [(np.ldexp(p, k - top), G) for p, k, G in alive]
        c = max(p for p, _ in parts)
        # Added in place, in chunk order: no d x d temporary beside the parts.
        M = np.zeros((d, d))
        for p, G in parts:
            G *= (p / c) ** 2
            M += G
        M /= self.total_weight
        # c 2^top / s, unless it exceeds float64 (rows near its largest
        # numbers, many per chunk): then c / s is returned 2^j times smaller
        # and M 4^j times larger, the same product c^2 M.
        j = max(0, top + int(np.frexp(c * inv)[1]) - _MAX_EXPONENT)
        return float(np.ldexp(c * inv, top - j)), np.ldexp(M, 2 * j, out=M), mean

    def mean(self):
        """Weighted mean of the rows ``x / s`` (float64).

        A chunk whose column sums exceed ``_HUGE_ROWS`` (the chunks' sum
        could overflow) is summed again times ``2^-e``, ``e`` the
        :func:`_huge_exponent` of its largest entry, and the chunks' sums are
        added at the largest such power of two, as :meth:`moments` adds its
        column sums: the mean of finite rows of any magnitude is finite.
        """
        inv = 1.0 / self.scale

        def chunk(B, w, lo, hi):
            # (the chunk's column sums over 2^e, divided by s; e). A product
            # with the weights (ones) reads the rows as BLAS does;
            # B.sum(axis=0) reads a C-ordered B about three times slower.
            B = np.asarray(B, dtype=np.float64)
            w = np.ones(B.shape[0]) if w.size == 0 else w
            with np.errstate(over="ignore", invalid="ignore"):
                total = w @ B
            if np.max(np.abs(total), initial=0.0) <= _HUGE_ROWS:
                return total * inv, 0
            shift = _huge_exponent(largest_magnitude(B))
            return (w @ np.ldexp(B, -shift)) * inv, shift

        total, top_shift = _sum_at_common_shift(
            self._map(chunk, positive=True, cast=False), self.n_features
        )
        return np.ldexp(total / self.total_weight, top_shift)

    def centred(self, offset):
        """The rows ``x - offset`` (``offset`` unscaled), never a centred copy of X.

        Each pass subtracts ``offset`` (in X's dtype) from the chunk it reads,
        so the memory of a centred fit stays that of X plus a chunk per thread.
        Float32 rows whose difference with the offset may pass float32's
        range (``max |x| + max |offset|`` beyond it: rows near 3e38 about a
        mean of the other sign) are centred in float64, the passes' dtype
        then, as a float32 subsample is (:meth:`_taken`).
        """
        offset = np.asarray(offset, dtype=np.float64)
        dtype = self.dtype
        if dtype != np.float64:
            if self._stored_peak is None:
                self._stored_peak = largest_magnitude(self._X)
            total = self._offset + offset if self._offset.size else offset
            if self._stored_peak + largest_magnitude(total) > float(np.finfo(dtype).max):
                dtype = np.dtype(np.float64)
        other = copy.copy(self)
        other.dtype = dtype
        offset = offset.astype(dtype)
        other._offset = self._offset + offset if self._offset.size else offset
        other._scaled_blocks = {}
        return other

    def rescaled(self, scale):
        """The same rows seen divided by ``scale`` (sharing the thread pool)."""
        other = super().rescaled(scale)
        other._scaled_blocks = {}
        return other

    def second_moment(self):
        """``M = sum_i w_i x_i x_i^T / sum_i w_i`` (d x d, float64), one pass."""
        c, M = self.scaled_second_moment()
        return c * c * M

    def moment_action(self, V):
        """``M V = sum_i w_i x_i (x_i^T V) / sum_i w_i`` for V of shape (d, K)."""
        V = np.asarray(V, dtype=np.float64)
        inv = 1.0 / self.scale

        def chunk(B, w, lo, hi):
            B = np.asarray(B, dtype=np.float64) * inv
            A = B @ V
            return B.T @ (A if w.size == 0 else A * w[:, None])

        parts = self._map(chunk, positive=True, cast=False)
        return sum(parts, np.zeros(V.shape)) / self.total_weight

    def norm_moments(self):
        """Weighted means of ``||x||^2`` and ``||x||^4`` (float64).

        The fourth moment of rows beyond about 1e77 times the scale is
        infinite (a stream's batch may be up to 1e100 times its first batch's
        scale); its callers read it at the rows' own scale.
        """
        inv = 1.0 / self.scale

        def chunk(B, w, lo, hi):
            # (At a subnormal scale inv is inf, and zero entries times it NaN:
            # such a scale is refused by the fit that reads these moments,
            # _plan's ScaleError, without numpy's warning before it.)
            with np.errstate(over="ignore", invalid="ignore"):
                B = np.asarray(B, dtype=np.float64) * inv
                sq = np.einsum("ij,ij->i", B, B)
                ww = np.ones_like(sq) if w.size == 0 else w
                return np.array([ww @ sq, ww @ (sq * sq)])

        total = sum(self._map(chunk, positive=True, cast=False), np.zeros(2)) / self.total_weight
        return float(total[0]), float(total[1])

    def exact_terms(self, U, MU, c, lm1, reg, rho, identity=1.0):
        """Row sums of the exact risk: ``(value, P)``, see :func:`_kernels.exact_row_terms`.

        ``value`` is the weighted sum of the per-row terms and ``P`` (3K x d)
        the weighted sums of the gradient's outer products, both *not* yet
        divided by ``total_weight``. ``identity``: the constant of ``e = 1 -
        c s``, ``1 / gamma`` for the objective divided by ``gamma^2``.
        """
        U = np.ascontiguousarray(U, dtype=np.float64)
        MU = np.ascontiguousarray(MU, dtype=np.float64)
        K = U.shape[1]
        inv = 1.0 / self.scale

        def chunk(B, w, lo, hi):
            P = np.zeros((3 * K, self.n_features))
            if self.compiled:
                value = _kernels.exact_row_terms(
                    B, w, inv, U, MU, c, lm1, reg, rho, P, identity=identity
                )
            else:
                # The scaled blocks are kept: the solver's steps evaluate the
                # risk again on the same rows.
                blocks = self._scaled_blocks.get(lo)
                if blocks is None:
                    blocks = self._scaled_blocks[lo] = _numpy_kernels.scaled_blocks(B, inv)
                value = _numpy_kernels.exact_row_terms(
                    B, w, inv, U, MU, c, lm1, reg, rho, P, blocks, identity=identity
                )
            return value, P

        parts = self._map(chunk, positive=True, cast=False)
        return sum(v for v, _ in parts), sum(
            (P for _, P in parts), np.zeros((3 * K, self.n_features))
        )

    def e_step(self, U, log_weights, beta):
        """E step of the mixture (``math.md`` section 7).

        Returns ``(S, counts, partial)``: ``S[k] = sum_i w_i r_ik x_i``
        (K x d), ``counts[k] = sum_i w_i r_ik`` and ``partial = sum_i w_i
        logsumexp_k(log pi_k + beta <mu_k, x_i>)``. Small ``d K``: the fused
        kernel :func:`_kernels.mixture_e_step`; else by matrix products
        (:func:`_blas_e_step`), see :func:`_uses_blas`; on small data
        (:func:`compiles`) by float64 matrix products and NumPy's softmax.
        """
        U = np.ascontiguousarray(U, dtype=np.float64)
        log_weights = np.asarray(log_weights, dtype=np.float64)
        K, d = U.shape[1], self.n_features
        blas = self.compiled and _uses_blas(d, K)
        # The rows times 2^k and 1 / s divided by it (k = 0 but at the ends
        # of the range; see _key_shift).
        k = _key_shift(beta, 1.0 / self.scale, self.dtype if blas else np.float64)
        inv = np.ldexp(1.0 / self.scale, -k)
        if not self.compiled:
            # Float64 products, as the fused kernel's, by the NumPy forms' blocks.
            keys = (beta * inv) * U.T
            posterior = _numpy_kernels.posterior_columns

            def chunk(B, w, lo, hi):
                B = _shifted(np.asarray(B, dtype=np.float64), k)
                return _blas_e_step(B, w, keys, log_weights, inv, posterior, _numpy_kernels.BLOCK)

        elif blas:
            keys = np.ascontiguousarray((beta * inv) * U.T, dtype=self.dtype)

            def chunk(B, w, lo, hi):
                return _blas_e_step(
                    _shifted(B, k),
                    w,
                    keys,
                    log_weights,
                    inv,
                    _kernels.posterior_columns,
                    _E_TILE,
                )

        else:

            def chunk(B, w, lo, hi):
                S = np.empty((K, d))
                counts = np.empty(K)
                B = _shifted(B, k)
                partial = _kernels.mixture_e_step(B, U, log_weights, beta, inv, w, S, counts)
                return S, counts, partial

        parts = self._map(chunk, positive=True)
        S = sum((p[0] for p in parts), np.zeros((K, d)))
        counts = sum((p[1] for p in parts), np.zeros(K))
        return S, counts, float(sum(p[2] for p in parts))

    def head_totals(self, U):
        """Per head, the weighted sum of ``<x, mu_h>`` over the rows it wins by ``|<x, mu_h>|``.

        See :func:`_kernels.head_totals`; the scale does not change the signs,
        so the sums are of X's rows as they are. Where the E step goes by
        matrix products (:func:`_uses_blas`), or the data is small
        (:func:`compiles`), so do the projections
        (:func:`_blas_head_totals`): the kernel's loops take the time of
        several BLAS E steps at hundreds of features and heads.
        """
        with np.errstate(over="ignore"):
            return _shifted(self.scaled_head_totals(U), _huge_exponent(self.scale))

    def scaled_head_totals(self, U):
        """:meth:`head_totals` times ``2^-e``, e the :func:`_huge_exponent` of
        the scale: rows at a scale beyond ``_HUGE_ROWS`` are summed times
        ``2^-e`` (exact), and the totals are given back times ``2^e`` by the
        caller, infinite, of their sign, beyond float64's range (SparseRows'
        too); Dask's blocks add theirs before (a block's infinite total
        beside another's of the other sign would give NaN)."""
        U = np.ascontiguousarray(U, dtype=np.float64)
        K = U.shape[1]
        blas = _uses_blas(self.n_features, K) or not self.compiled
        e = _huge_exponent(self.scale)

        def chunk(B, w, lo, hi):
            if e:
                B = np.ldexp(np.asarray(B, dtype=np.float64), -e)
            if blas:
                return _blas_head_totals(B, w, U)
            totals = np.zeros(K)
            _kernels.head_totals(B, U, w, totals)
            return totals

        return sum(self._map(chunk, positive=True), np.zeros(K))

    def labels(self, centers, gain, bias, origin=None, scale=1.0):
        """``argmax_h (gain_h / s) <x - o, c_h> + bias_h`` for every row (:class:`LabelRule`).

        ``centers`` has shape (K, d), ``gain`` is one number or one per
        head, ``o`` the ``origin`` (None: zero) and ``s`` the ``scale``;
        ties go to the first head. The scores ``<x, c_h>`` are one BLAS
        product per chunk in X's dtype (float32 rows are not copied to
        float64: as scikit-learn's KMeans labels them), then
        :func:`_kernels.argmax_rows` adds gain and bias in float64, with
        ``(gain_h / s) <o, c_h>`` in the bias. Float32 rows are multiplied
        as ``x - o'``, ``o'`` the origin in float32, whose products go in the
        bias too: the same scores up to rounding, whose float32 part then
        scales with the rows' spread about the origin instead of their
        distance from zero (data far from zero would lose the digits that
        separate its clusters); an origin beyond float32's range (a float64
        fit's) goes in the bias alone. Where ``gain / s`` leaves float64's range
        (rows of about 1e-300 in tight clusters), the scores and the origin
        are multiplied by a power of two first (:func:`_label_terms`), and rows
        beyond float64's range at the scale take the rule's limit
        (:func:`_far_labels`).
        """
        return self.labels_and_counts(centers, gain, bias, origin, scale)[0]

    def labels_and_counts(self, centers, gain, bias, origin=None, scale=1.0):
        """``(labels, counts)``: :meth:`labels` and their weighted counts
        (:meth:`label_counts`), counted in the same pass."""
        C64 = np.asarray(centers, dtype=np.float64).T
        # In X's dtype: a float64 C would have BLAS copy each float32 chunk
        # to float64 first, which took about as long as an E step.
        C = C64.astype(self.dtype)
        K = C.shape[1]
        gain, bias, origin, k = _label_terms(C64, gain, bias, origin, scale)
        out = np.empty(self.n_samples, dtype=np.intp)
        shift = None
        if self.dtype != np.float64 and origin is not None and np.any(origin):
            with np.errstate(over="ignore"):
                shift = origin.astype(self.dtype)
            if np.isfinite(shift).all():
                # The rows centred in X's dtype about the origin (as
                # :meth:`centred`, each chunk as it is read), whose products
                # go in the bias.
                bias = bias + gain * (_shifted(shift.astype(np.float64), k) @ C64)
            else:
                # An origin beyond X's dtype's range (a float64 fit's mean_
                # for float32 rows) is in the bias alone.
                shift = None

        def chunk(B, w, lo, hi):
            counts = np.zeros(K)
            with np.errstate(over="ignore", invalid="ignore"):
                if shift is not None:
                    B = B - shift
                scores = B @ C
            if scores.dtype != np.float64 and not np.isfinite(scores).all():
                # float32's range exceeded (|x - o| |c_h| beyond about 3e38,
                # or x - o itself): in float64, from the rows as read.
                B = np.asarray(self._rows(lo, hi), dtype=np.float64)
                scores = (B if shift is None else B - shift) @ C64
            raw = scores
            if k:
                with np.errstate(over="ignore"):
                    scores = _shifted(np.asarray(scores, dtype=np.float64), k)
            if self.kernels.argmax_rows(scores, gain, bias, w, out[lo:hi], counts):
                with np.errstate(over="ignore", invalid="ignore"):
                    values = gain * scores + bias
                _far_labels(raw, values, gain, bias, out[lo:hi])
                counts = np.bincount(out[lo:hi], weights=w if w.size else None, minlength=K)
            return counts

        return out, sum(self._map(chunk), np.zeros(K))

    # -- rows for subsamples and sampled sequences --------------------------

    def _taken(self, idx):
        """The rows ``idx`` of positive weight (centred) as a :class:`DenseRows` on this pool.

        Its passes read the rows in float64 (``dtype``): a float32 subsample
        is held as it is and each chunk cast as a pass reads it, the same
        numbers as a float64 copy of the subsample, at half its memory.
        """
        idx = self._weighted_indices(idx)
        weight = None if self.sample_weight is None else self.sample_weight[idx]
        rows = np.take(self._X, idx, axis=0)
        if self._offset.size:
            # A float32 subsample centred in float64 (its passes' dtype) is
            # taken in float64: the centred rows rounded to float32 would lose
            # the digits the centring cancels.
            if self._offset.dtype != rows.dtype:
                rows = rows.astype(np.result_type(rows, self._offset))
            rows -= self._offset
        return DenseRows(
            rows,
            weight,
            self.scale,
            pool=self._pool,
            compiled=self.compiled,
            dtype=np.float64,
        )

    def project(self, V):
        """``(X / s) V`` for V of shape (d, K): an (n, K) array, by chunks (no float64 copy of X).

        Coordinates beyond float64 are infinite, without a warning: the
        caller refuses them (``_plan._projected``).
        """
        V = np.asarray(V, dtype=np.float64)
        inv = 1.0 / self.scale
        # Rows at a scale beyond _HUGE_ROWS are multiplied times 2^-e, the
        # scale's power of two (exact: the same numbers), so that a row whose
        # norm passes float64 while its coordinates at unit scale do not
        # keeps them finite.
        e = _huge_exponent(self.scale)

        def chunk(B, w, lo, hi):
            B = np.asarray(B, dtype=np.float64)
            with np.errstate(over="ignore"):  # per thread: NumPy's error state is not shared
                if e:
                    return (np.ldexp(B, -e) @ V) * np.ldexp(inv, e)
                return (B @ V) * inv

        parts = self._map(chunk, cast=False)
        return np.concatenate(parts) if parts else np.empty((0, V.shape[1]))

    def peak(self):
        """The largest ``|x_ij| / s`` of the rows as the passes see them (centred)."""
        tops = self._map(
            lambda B, w, lo, hi: float(np.max(np.abs(B))) if B.size else 0.0,
            positive=True,
            cast=False,
        )
        return max(tops, default=0.0) / self.scale

    def map_rows(self, fn, *args, dtype=np.float64, columns=None):
        """``fn(rows, *args)`` on the rows as given (neither centred nor scaled), by chunks.

        ``fn`` returns one value per row (``columns=None``) or ``columns``
        values per row; the chunks' results are stacked in order.
        """
        return _stacked(
            lambda lo, hi: fn(self._given(lo, hi), *args),
            self._bounds,
            self._pool.map,
            np.empty((0,) if columns is None else (0, columns), dtype=dtype),
        )

    def weighted_mean(self, fn, *args):
        """The weighted mean over the rows of ``fn(rows, *args)`` (one value per row; a float)."""
        values = self.map_rows(fn, *args)
        w = self.sample_weight
        # Rows of zero weight left out: an infinite value would weigh 0 x inf.
        total = np.sum(values) if w is None else values[w > 0.0] @ w[w > 0.0]
        return float(total) / self.total_weight

    def check_finite(self):
        """Raise ValueError, with scikit-learn's message, when X holds NaN or infinity."""
        with quiet_finite_check():
            assert_all_finite(self._X, input_name="X")

    def draw(self, state, out):
        """Fill ``out`` (m x d, float64) with rows ``x / s`` drawn with replacement.

        Row i is drawn with probability ``w_i / sum w`` from the one-element
        uint64 generator state ``state`` (see :func:`_kernels.draw_rows`).
        """
        with _wrapping_generator():
            _kernels.draw_rows(
                self._X, self._offset, self._cumulative_weights(), 1.0 / self.scale, state, out
            )
        return out


def _wrapping_generator():
    """The floating-point state of the draws' generator (``_kernels._next_uint``),
    whose uint64 products wrap by design: compiled they are silent, but run
    uncompiled (``NUMBA_DISABLE_JIT=1``) NumPy's scalars warn of an overflow."""
    return np.errstate(over="ignore")


def compiles(size):
    """Whether passes over data of ``size`` numbers (dense: n d; sparse: the non-zeros) run Numba's kernels.

    NumPy's forms of them (:mod:`._numpy_kernels`) below ``_COMPILE_MIN_SIZE``
    numbers, Numba's (:mod:`._kernels`) from there on: on small data NumPy's forms take less time than
    the seconds of Numba's compile that a first fit with an empty cache
    pays, and from there on Numba's fused loops repay it. The choice
    depends on the data's size alone (a subsample runs its parent's), so
    the same data always runs the same code.
    """
    return size >= _COMPILE_MIN_SIZE


# Numbers in X below which the passes run NumPy's forms of the kernels (see compiles).
_COMPILE_MIN_SIZE = 1 << 18


def _uses_blas(d, K):
    """Whether the E step of ``d`` features and K heads goes by matrix products.

    The fused kernel reads each row once and keeps the scores in cache, but
    its products are Numba loops; BLAS multiplies faster, but the E step
    then passes over a tile's scores four times (the product, the softmax,
    the cast, the second product) and pays a few calls per tile. Measured
    on both dtypes, both paths on one thread over 1e5 rows, for d from 10 to
    384 and K from 2 to 50: the fused kernel wins at few features (d = 10,
    any K up to 50), BLAS from ``d`` of a few tens with ``d K`` of a few
    hundred on, by a factor that grows with ``d K``.
    """
    return d >= _BLAS_MIN_FEATURES and d * K >= _BLAS_MIN_WORK


# Smallest d and d K for which the E step goes by BLAS (see _uses_blas).
_BLAS_MIN_FEATURES = 32
_BLAS_MIN_WORK = 256

# Widest data whose moments pass runs the fused kernel _kernels.moment_sums
# (BLAS's products from there on; measured on one thread over 1e7 numbers:
# 1.4x faster at d = 10, 1.3x at 16, slower from about 24 on).
_MOMENT_MAX_FEATURES = 16

# Rows per chunk of the moments pass by BLAS, per feature (DenseRows.moments):
# its chunks' d x d sums are scaled and added apart, which the passes' 4 MB
# chunks made cost more than the products from a few hundred features on
# (timed at d = 384 and 768 on two threads; 16 gained little more than 8).
_MOMENT_ROWS_PER_FEATURE = 8

# Rows per tile of SparseRows.e_step: its scores are tile x K float64.
_SPARSE_TILE = 8192

# Rows per tile of the BLAS E step and moments pass: each tile's sums are
# formed in the rows' dtype, then added in float64, so that float32 rows'
# sums carry the rounding of at most this many terms.
_E_TILE = 1024

# A float32 chunk whose largest column sum of squares is below this is
# divided by its largest entry before its products (see DenseRows.moments):
# float32's smallest normal number is 1.2e-38.
_FLOAT32_TINY = 1e-30


def _blas_moment_sums(B, w, scratch):
    """``(G, t)`` of :func:`_kernels.moment_sums` for one chunk, by BLAS products.

    float64 chunks: ``B^T (w B)`` and ``w B``. float32 chunks of more than
    ``_MOMENT_MAX_FEATURES`` features: by tiles of ``_E_TILE`` rows, as the
    E step's sums (:func:`_blas_e_step`): each tile's two products in
    float32 (twice the float64 rate, and no float64 copy of the chunk),
    added in float64, so that an entry carries the float32 rounding of one
    tile's terms: at most ``_E_TILE`` times float32's epsilon (``6e-5``)
    relative to ``sqrt(G_ii G_jj)``, about the square root of that for
    rounding errors of either sign. Narrower float32 chunks are converted
    to float64 first, into a buffer per thread kept in ``scratch`` (a
    dict), as :func:`_kernels.moment_sums` sums them: a fit's passes then
    give the same moments to rounding on either kernel path. NaN, infinity
    and overflow propagate into the sums, without warnings.
    """
    if B.dtype != np.float64 and B.shape[1] <= _MOMENT_MAX_FEATURES:
        # Copied into a buffer the thread reuses: a new array per chunk is
        # mapped afresh when the allocator hands freed memory back to the
        # system at once (as Dask's workers have it do), and its page
        # faults cost more than the products.
        buffer = scratch.get(threading.get_ident())
        if buffer is None or len(buffer) < len(B):
            buffer = scratch[threading.get_ident()] = np.empty(B.shape)
        np.copyto(buffer[: len(B)], B)
        B = buffer[: len(B)]
    # np.dot, not B.T @ B: matmul's product of an array with its own
    # transpose holds the GIL, so the pool's threads would take their
    # chunks in turn.
    with np.errstate(over="ignore", invalid="ignore"):
        if B.dtype == np.float64:
            wB = B if w.size == 0 else B * w[:, None]
            return np.dot(B.T, wB), np.dot(np.ones(B.shape[0]) if w.size == 0 else w, B)
        d = B.shape[1]
        G, total = np.zeros((d, d)), np.zeros(d)
        ones = np.ones(min(len(B), _E_TILE), dtype=B.dtype)
        w = w.astype(B.dtype)
        for lo in range(0, B.shape[0], _E_TILE):
            T = B[lo : lo + _E_TILE]
            if w.size:
                v = w[lo : lo + _E_TILE]
                G += np.dot(T.T, T * v[:, None])
            else:
                # The product of T with its own transpose: BLAS's syrk, half the work.
                v = ones[: len(T)]
                G += np.dot(T.T, T)
            total += np.dot(v, T)
    return G, total


def _blas_head_totals(B, w, U):
    """:func:`_kernels.head_totals` of one chunk, its projections ``B U`` formed by BLAS.

    The projections are float64 (``U`` is), as the kernel's; each row goes
    to ``argmax_h |<x, mu_h>|`` (ties to the first head, as ``np.argmax``)
    and adds ``w <x, mu_h>`` to that head's total. ``w`` of length 0 means
    unit weights.
    """
    best, top = _numpy_kernels.abs_argmax_rows(B @ U)
    return np.bincount(best, weights=top * w if w.size else top, minlength=U.shape[1])


def _within_range(value, dtype=np.float64):
    """Whether ``value`` lies within ``2^±(maxexp - 2)`` of ``dtype``: far from
    overflow, and from the subnormal numbers that lose digits."""
    limit = 2.0 ** (np.finfo(dtype).maxexp - 2)
    return 1.0 / limit <= value <= limit


# Rows beyond this magnitude sum past float64 over few of them: the E step
# shifts them when their scale s exceeds it (see _key_shift), and the
# moments' pass sums a chunk's columns at its scale when its largest entry
# does, as the sparse passes that sum over rows do (see _huge_exponent).
_HUGE_ROWS = 2.0**900
_HUGE_FLOAT32_ROWS = 2.0**100
# The largest exponent e of a scale c = c' 2^e (c' in [1/2, 1)) that the
# moments' pass returns: c^2 M then holds the second moment with c a few
# powers of two below float64's largest number.
_MAX_EXPONENT = 1020


def _sum_at_common_shift(parts, size):
    """``(S, e)``: the sum of the values ``t 2^e_t`` of ``parts``, pairs ``(t,
    e_t)`` of ``size`` numbers, as ``S 2^e`` with e the largest ``e_t``
    (0 for no parts): sums of rows beyond ``_HUGE_ROWS``, each taken at the
    scale of its largest entry (:func:`_huge_exponent`), added without
    overflow; exactly the plain sum when every ``e_t`` is 0."""
    top = max((e for _, e in parts), default=0)
    return sum((np.ldexp(t, e - top) for t, e in parts), np.zeros(size)), top


def _huge_exponent(peak):
    """``e`` such that rows whose largest entry is ``peak`` are summed times ``2^-e``.

    The exponent of ``peak`` beyond ``_HUGE_ROWS`` (the rows then lie within
    ``[-1, 1]``, exact but for entries below ``2^-1022`` of ``peak``, which
    become subnormal), else 0: rows are summed as they are.
    """
    return int(np.frexp(peak)[1]) if peak > _HUGE_ROWS else 0


def _key_shift(beta, inv_scale, dtype):
    """``k`` such that the E step's keys ``(beta / s) 2^-k`` times the heads lie in ``dtype``'s range.

    The keys' factor ``beta / s`` multiplies X's rows, whose unit-scale
    values ``x / s`` are moderate, but at the ends of float64's range (rows
    of about 1e-300, clusters tight: beta / s beyond 1e308; or the reverse)
    the factor itself overflows or underflows, and float32 keys (the BLAS
    path) from about 1e38. There the rows are multiplied by ``2^k`` (exact)
    and the factor divided by it, so that the scores ``beta <mu, x / s>``
    are the same numbers; elsewhere ``k = 0``.
    """
    with np.errstate(over="ignore", under="ignore"):
        factor = beta * inv_scale
    # Rows of scale s beyond 2^900 sum past float64 over few of them (the
    # E step's sums S_k, taken before the factor): shifted towards x / s.
    # Float32 tiles (the BLAS path) sum past float32 from about 3e35 (a
    # tile of 1024 rows): shifted from 2^100.
    huge = inv_scale < 1.0 / (_HUGE_ROWS if dtype == np.float64 else _HUGE_FLOAT32_ROWS)
    if not huge and (beta == 0.0 or _within_range(factor, dtype)):
        return 0
    return (int(np.frexp(beta)[1]) if beta != 0.0 else 0) + int(np.frexp(inv_scale)[1])


def _shifted(B, k):
    """``B 2^k`` (a copy; exact unless it leaves the dtype's range), B itself when ``k = 0``."""
    return np.ldexp(B, k) if k else B


class LabelRule(NamedTuple):
    """The labels ``argmax_h (gain_h / scale) <x - origin, c_h> + bias_h``.

    The arguments of the rows' ``labels`` (:meth:`DenseRows.labels`), in
    their order: ``rows.labels(*rule)``. ``centers`` (K x d), ``gain`` and
    ``bias`` (K), ``origin`` (d, or None for zero), ``scale`` a positive
    number; the gain stays at the unit scale of the rows ``(x - origin) /
    scale``, where it is a moderate number, and the labels pass divides it
    by the scale (:func:`_label_terms`).
    """

    centers: np.ndarray
    gain: np.ndarray
    bias: np.ndarray
    origin: np.ndarray = None
    scale: float = 1.0

    def labels_of(self, X):
        """The labels of an in-memory array (dense or sparse), by float64 products."""
        C64 = np.asarray(self.centers, dtype=np.float64).T
        gain, bias, _, k = _label_terms(C64, self.gain, self.bias, self.origin, self.scale)
        # Rows beyond float64's range give products that overflow: their
        # labels are _far_labels', as in the labels pass (no RuntimeWarning).
        with np.errstate(over="ignore", invalid="ignore"):
            raw = np.asarray(X @ C64, dtype=np.float64)
        return _rule_labels(raw, gain, bias, k)


def _rule_labels(raw, gain, bias, k):
    """``argmax_h gain_h raw_ih 2^k + bias_h`` by NumPy (float64 ``raw``), far rows by :func:`_far_labels`."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = gain * _shifted(raw, k) + bias
    labels = np.argmax(values, axis=1)
    _far_labels(raw, values, gain, bias, labels)
    return labels


def _far_labels(raw, values, gain, bias, labels):
    """Relabel, in place, the rows whose largest value ``values_ih = gain_h
    raw_ih 2^k + bias_h`` is not finite.

    Rows beyond float64's range at the rule's scale (about 1e308 times it
    and more), whose values overflow and tie: their label is the limit of
    the rule, ``argmax_h gain_h raw_ih``, from their products ``raw`` as
    computed: the bias is below those values' rounding. A head of weight
    zero (bias -inf, whose values are -inf for every row) takes no row,
    there as everywhere.
    """
    far = ~np.isfinite(np.max(values, axis=1, initial=-np.inf))
    if not far.any():
        return
    with np.errstate(over="ignore", invalid="ignore"):
        limit = np.asarray(raw[far], dtype=np.float64) * (gain / np.max(np.abs(gain)))
    labels[far] = np.argmax(np.where(np.isnan(limit) | (bias == -np.inf), -np.inf, limit), axis=1)


def _label_terms(C64, gain, bias, origin, scale):
    """``(gain, bias, origin, k)`` of :meth:`DenseRows.labels` in the terms its kernel adds.

    ``argmax_h (gain_h / s) <x - o, c_h> + bias_h`` is taken as ``argmax_h
    g_h 2^k <x, c_h> + b_h``: ``g = gain / (s 2^k)`` and ``b = bias - g 2^k
    <o, c_h>``; ``k = 0`` unless ``gain / s`` leaves float64's range (rows
    of about 1e-300 in tight clusters, whose gain ``r / (tau^2 s)`` then
    overflows, or the reverse), where ``s 2^k`` is about 1 and the
    scores ``<x, c_h>`` (moderate numbers of the rows' magnitude) and the
    origin are multiplied by ``2^k``. ``origin`` comes back as float64, or
    None.
    """
    K = C64.shape[1]
    gain = _per_head(gain, K)
    scale = float(scale)
    with np.errstate(over="ignore", under="ignore"):
        unit = gain / scale
    peak = float(np.max(np.abs(unit), initial=0.0))
    k = 0
    if np.any(gain) and not _within_range(peak):
        k = -int(np.frexp(scale)[1])
        unit = gain / np.ldexp(scale, k)
    bias = np.asarray(bias, dtype=np.float64)
    if origin is not None:
        origin = np.asarray(origin, dtype=np.float64)
        bias = bias - unit * (_shifted(C64.T @ origin, k))
    return unit, bias, origin, k


def _blas_e_step(B, w, keys, log_weights, inv_scale, posterior, tile):
    """The E step of one chunk of dense rows by matrix products: ``(S, counts, partial)``.

    ``keys`` (K x d, B's dtype) is ``beta / s`` times the heads. By tiles of
    ``tile`` rows: the scores ``keys T^T`` (K x tile, one BLAS product
    in B's dtype, float32 for float32 rows), converted to float64 for the
    softmax and the log-likelihood (``posterior``: :func:`_kernels.posterior_columns`
    or its NumPy form), then the tile's sums ``R T`` (a second product, in B's dtype), added to
    S in float64. Float32 rows are thus multiplied in float32 (twice the
    float64 rate) and everything else is float64: the scores carry float32
    rounding (relative ``1e-7`` of ``beta |<mu, x>|``), the sums that of a
    tile's rows.
    """
    K, d = keys.shape
    S = np.zeros((K, d))
    counts = np.zeros(K)
    partial = 0.0
    for lo in range(0, B.shape[0], tile):
        T = B[lo : lo + tile]
        # np.dot releases the GIL (the pool's threads multiply at once).
        P = np.asarray(np.dot(keys, T.T), dtype=np.float64)
        partial += posterior(P, log_weights, w[lo : lo + tile] if w.size else w, counts)
        S += np.dot(P.astype(B.dtype, copy=False), T)
    return S * inv_scale, counts, partial


def _all_positive(w):
    """Whether no weight is zero (None or length 0: unit weights)."""
    return w is None or w.size == 0 or bool(np.all(w > 0.0))


def _positive(B, w):
    """``(B, w)`` without the rows of zero weight (``w`` of length 0: unit weights).

    The passes that sum over rows read these alone: a row of zero weight
    adds nothing, but its terms are still computed, and a row far beyond
    the weighted rows' scale squares to infinity there (0 x inf: NaN).
    Subsamples do not hold them either (:meth:`DenseRows.subsample`).
    """
    if _all_positive(w):
        return B, w
    keep = w > 0.0
    return B[keep], w[keep]


def _dropped(X, w):
    """The rows of zero weight that :func:`_positive` leaves out (X's first rows, none, when none)."""
    return X[:0] if _all_positive(w) else X[w <= 0.0]


def _finiteness(B):
    """``"NaN"`` or ``"infinity"`` when B holds one (NaN first), else None.

    NaN propagates through max and min, and an infinity is the max or the
    min: two scans find both.
    """
    peak = largest_magnitude(B)
    if np.isfinite(peak):
        return None
    return "NaN" if np.isnan(peak) else "infinity"


def _block_rows(block, weights, scale, offset, compiled):
    """The block's rows of positive weight (:func:`_positive`) as
    :class:`DenseRows` on one thread, centred when ``offset`` is given.

    For the passes that sum over rows, and the subsamples; the labels of
    every row are a pass of their own (:func:`_labels`).
    """
    block, weights = _positive(block, weights)
    rows = DenseRows(np.ascontiguousarray(block), weights, scale, n_threads=1, compiled=compiled)
    return rows if offset is None else rows.centred(offset)


def _block_pass(block, weights, scale, offset, compiled, name, args):
    """One pass of :class:`DenseRows` on one Dask block: ``(weight, result)``.

    Module level, so workers unpickle it (and the Numba kernels it calls) by
    reference. The block's pass runs on one thread: Dask's workers are the
    parallelism. ``compiled``: the fit's choice of kernels (:func:`compiles`
    the whole array), not the block's.
    """
    rows = _block_rows(block, weights, scale, offset, compiled)
    if rows.total_weight == 0.0 and name in _MEAN_PASSES:
        return 0.0, None
    return rows.total_weight, getattr(rows, name)(*args)


def _block_moment(block, weights, scale, offset, compiled):
    """The first pass on one Dask block: (NaN seen, inf seen, weight,
    :meth:`DenseRows.scaled_second_moment`, the block's weighted mean), from
    :meth:`DenseRows.moments`.

    The block's NaN and infinity (rows of zero weight included) are found
    before the moment is computed (:func:`_finiteness`).
    """
    bad = _finiteness(block)
    if bad is not None:
        return bad == "NaN", bad == "infinity", 0.0, None, None
    rows = _block_rows(block, weights, scale, offset, compiled)
    if rows.total_weight == 0.0:
        return False, False, 0.0, None, None
    c, M, mean = rows.moments()
    return False, False, rows.total_weight, (c, M), mean


def _same_block(block):
    return block


def _renamed(array):
    """``array``'s blocks under keys of their own: kept in the workers' memory
    (:meth:`DaskRows.moments`), they cannot meet a later computation of the
    caller's array under the same keys with another graph (``distributed``
    warns of such keys, and they can deadlock it)."""
    from dask.base import tokenize

    return array.map_blocks(
        _same_block, dtype=array.dtype, name="attention-cluster-kept-" + tokenize(array)
    )


def _block_map(block, fn, *args):
    """``fn(block, *args)`` on one Dask block once it is checked finite (for ``map_blocks``)."""
    if not np.isfinite(block).all():
        raise ValueError("Input X contains NaN or infinity.")
    return fn(np.ascontiguousarray(block), *args)


def _mapped(X, fn, args, dtype, columns):
    """``fn(block, *args)`` on every block of the Dask array X, checked finite
    (:func:`_block_map`): one value per row (``columns=None``) or ``columns``."""
    if columns is None:
        return X.map_blocks(_block_map, fn, *args, dtype=dtype, drop_axis=1)
    return X.map_blocks(_block_map, fn, *args, dtype=dtype, chunks=(X.chunks[0], (columns,)))


def _block_label_counts(block, weights, centers, gain, bias, origin, scale, compiled, minlength):
    """One block's weighted label counts, as a row, its rows labelled as
    :func:`_labels` does (for :meth:`DaskRows.labels_and_counts`)."""
    labels = _labels(np.ascontiguousarray(block), centers, gain, bias, origin, scale, compiled)
    weights = None if weights is None else np.asarray(weights)
    return np.bincount(labels, weights=weights, minlength=minlength)[None, :].astype(np.float64)


def _per_head(gain, K):
    """``gain`` (one number or one per head) as K float64 values."""
    return np.ascontiguousarray(np.broadcast_to(np.asarray(gain, dtype=np.float64), (K,)))


def _labels(rows, centers, gain, bias, origin, scale, compiled):
    """:meth:`DenseRows.labels` of dense rows, on one thread, with the whole array's kernels (``compiled``)."""
    return DenseRows(rows, n_threads=1, compiled=compiled).labels(
        centers, gain, bias, origin, scale
    )


# Rows of a subsample that DaskRows pulls to the client (80 MB at d = 10 in
# float64, 40 MB in float32): a larger subsample stays on the workers, so that the client's
# memory does not grow with n (the EM's subsamples grow with n). PSGD's draws
# on Dask data come from a subsample of this many rows (DaskRows.draw). It
# must exceed the solvers' own subsamples (16384 rows: _spectral, _exact),
# which they project in memory.
_CLIENT_ROWS = 1 << 20


def _block_nested(block, weights, lo, hi, seed, n_samples, fraction):
    """The rows ``lo:hi`` of one Dask block whose keys are below ``fraction``
    (:func:`~._draws.nested_rows`) and whose weight is not zero (a subsample
    holds none, :meth:`DenseRows.subsample`): ``(rows in X's dtype, their
    weights or None, their keys)``."""
    idx, keys = nested_rows(seed, n_samples, lo, hi, fraction)
    idx -= lo
    w = None
    if weights is not None:
        w = np.asarray(np.asarray(weights)[idx], dtype=np.float64)
        idx, keys, w = idx[w > 0.0], keys[w > 0.0], w[w > 0.0]
    # X's dtype (as the in-memory backends' subsamples, DenseRows._taken):
    # float32 rows travel to the client, or stay on the workers, in half the
    # bytes.
    return np.asarray(block)[idx], w, keys


def _drawn_count(part, fraction):
    """The number of one block's drawn rows (:func:`_block_nested`) whose keys are below ``fraction``."""
    return int(np.count_nonzero(part[2] < np.float32(fraction)))


def _drawn_below(part, fraction):
    """``(rows, weights)`` of one block's drawn rows whose keys are below ``fraction``."""
    keep = part[2] < np.float32(fraction)
    return part[0][keep], None if part[1] is None else part[1][keep]


def _item(pair, i):
    return pair[i]


@dataclass
class _Drawn:
    """What one read of X kept of a nested draw (:meth:`DaskRows.subsample`):
    the rows, weights and keys on the client, or the blocks' parts (rows,
    weights and keys) persisted on the workers (``parts``; the others None)."""

    rows: np.ndarray | None
    weights: np.ndarray | None
    keys: np.ndarray | None
    parts: list | None


def _persisted(*collections):
    """The collections persisted (None stays None), once they are in the workers' memory."""
    import dask

    out = dask.persist(*collections, optimize_graph=False)
    try:
        from distributed import futures_of, wait
    except ImportError:  # the local schedulers persist before returning
        return out
    futures = [f for c in out if c is not None for f in futures_of(c)]
    if futures:  # persisted by a distributed client, in the background
        wait(futures)
    return out


# Passes that return weighted means, combined across blocks by their weights.
_MEAN_PASSES = ("mean", "moment_action", "norm_moments")

# Dask data of at most this fraction of the memory of a distributed cluster's
# workers are kept in that memory after their first read (DaskRows.moments),
# so that the fit's later passes do not read their source again: each read
# of a file (a Zarr store, say) costs about as much as loading it. Larger
# data are read at each pass (a few reads in all: _draws, _mixture).
_HOLD_FRACTION = 0.25


def running_client():
    """The current ``distributed`` client, or None. A client runs only once
    ``distributed`` is imported; this never imports it (a second or so)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        return distributed.default_client()
    except ValueError:  # no client running
        return None


def _scheduling_client():
    """The ``distributed`` client that Dask's computations go to now, or None.

    ``dask.config``'s scheduler when one is set (a local scheduler inside
    ``dask.config.set(scheduler="threads")``, though a client runs), else
    the default client. A client runs only once ``distributed`` is
    imported; this never imports it (a second or so).
    """
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    from dask.base import get_scheduler

    client = getattr(get_scheduler(), "__self__", None)
    return client if isinstance(client, distributed.Client) else None


def _workers_memory():
    """The summed memory limits of the workers of the ``distributed`` client
    that Dask's computations go to (:func:`_scheduling_client`), or None (a
    local scheduler, a worker without a limit, or no workers)."""
    client = _scheduling_client()
    if client is None:
        return None
    # Asked of the scheduler itself: ``client.scheduler_info()`` returns the
    # client's cached copy, which its periodic refresh can replace, between
    # the update and the return, by one that lists no workers.
    workers = client.sync(client.scheduler.identity, n_workers=-1)["workers"]
    limits = [worker.get("memory_limit") or 0 for worker in workers.values()]
    return sum(limits) if limits and all(limits) else None


class DaskRows(_Rows):
    """Rows of a Dask array, possibly larger than memory or spread over a cluster.

    The same interface as :class:`DenseRows`. Each pass is one Dask
    computation: the :class:`DenseRows` pass runs on every block where the
    block lives (a worker of a ``distributed`` cluster, or a thread of the
    local scheduler), and only the blocks' small results (``d x d`` at most)
    come back to the client, which adds them in the blocks' order. The data
    are never gathered; :meth:`subsample` pulls the rows of a subsample of at
    most ``_CLIENT_ROWS`` rows once and keeps a larger one on the workers.
    On a ``distributed`` cluster whose workers' memory holds X with room to
    spare (``_HOLD_FRACTION``), the first pass (:meth:`moments`) keeps X's
    blocks there, and the later passes of the fit read them from memory, not
    from X's source; :meth:`close` releases them. Lazy outputs
    (:meth:`map_rows`, :meth:`labels`) are built on X itself, so that a
    fitted estimator holds nothing on the workers.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        Float32 or float64, chunked along rows only, with known chunk sizes
        (``_validation.check_dask_array``), but for rows that are only mapped
        block by block (:meth:`map_rows`, :meth:`labels`), whose row chunks
        may be unknown (a Dask DataFrame's rows, not counted).
    sample_weight : dask.array.Array of shape (n_samples,) or None
        Validated non-negative weights chunked as X's rows
        (``_validation.check_dask_sample_weight``); None for unit weights.
    scale : float, default=1.0
        ``s``: every pass sees ``x / s``.
    total_weight : float or None
        ``sum_i w_i`` when already known (else one small computation).
    n_weighted : int or None
        The number of positive weights when already known (else one small
        computation, when a subsample first needs it: :attr:`n_weighted`).
    verbose : int, default=0
        When positive, print each pass's name and wall time (``n_passes``
        counts them).
    """

    in_memory = False

    @property
    def most_rows_in_memory(self):
        return _CLIENT_ROWS

    def __init__(
        self, X, sample_weight=None, scale=1.0, total_weight=None, n_weighted=None, verbose=0
    ):
        self._X = self._lazy_X = X
        self.sample_weight = self._lazy_weight = sample_weight
        if sample_weight is not None and n_weighted is not None:
            self._weighted_count = (sample_weight, n_weighted)
        self.n_samples, self.n_features = X.shape
        self.dtype = X.dtype
        self.scale = float(scale)
        # Rows of unknown count (count_rows=False in rows_from) are only mapped
        # block by block: each block then runs the kernels of its own size.
        self.compiled = compiles(X.size) if np.isfinite(X.size) else None
        if total_weight is None:
            total_weight = (
                float(self.n_samples)
                if sample_weight is None
                else float(sample_weight.sum().compute())
            )
        self.total_weight = total_weight
        self._passes = [0, 0]  # computations and reads of X, shared with copies
        self._reads_x = True  # False for a subsample kept on the workers
        self.verbose = verbose
        self._drawn = None
        self.offset = None
        self._where = ""  # names a subsample's passes under verbose

    def close(self):
        """Release X's blocks kept in the workers' memory (:meth:`moments`);
        the scheduler belongs to the caller."""
        self._X, self.sample_weight = self._lazy_X, self._lazy_weight

    def _hold(self):
        """Whether X (and its weights) are kept in the workers' memory by the
        next read: when they fit there with room to spare (``_HOLD_FRACTION``).
        They are then persisted (without waiting), and the passes on them
        read each block once, as it is kept."""
        memory = _workers_memory()
        size = self._X.nbytes + (0 if self.sample_weight is None else self.sample_weight.nbytes)
        if memory is None or size > _HOLD_FRACTION * memory:
            return False
        import dask

        self._X, self.sample_weight = dask.persist(
            _renamed(self._X),
            None if self.sample_weight is None else _renamed(self.sample_weight),
            optimize_graph=False,
        )
        return True

    @property
    def n_passes(self):
        """Dask computations so far, by this object and its rescaled copies."""
        return self._passes[0]

    @property
    def n_reads(self):
        """Of :attr:`n_passes`, the computations that read X (every block of
        it), not a subsample or the rows a draw kept."""
        return self._passes[1]

    def _tasks(self, fn, *args, bounds=False):
        """``fn(block, weights, *args)`` for every block, as delayed tasks in
        block order; with ``bounds``, ``fn(block, weights, lo, hi, *args)``."""
        import dask

        blocks = self._X.to_delayed(optimize_graph=False).ravel()
        if self.sample_weight is None:
            weights = [None] * len(blocks)
        else:
            weights = self.sample_weight.to_delayed(optimize_graph=False).ravel()
        task = dask.delayed(fn, pure=True)
        if not bounds:
            return [task(b, w, *args) for b, w in zip(blocks, weights)]
        edges = np.cumsum((0,) + self._X.chunks[0])
        return [
            task(b, w, int(lo), int(hi), *args)
            for b, w, lo, hi in zip(blocks, weights, edges, edges[1:])
        ]

    def _blocks(self, name, fn, *args):
        """``fn(block, weights, *args)`` on every block, computed at once, in block order."""
        return self._compute(name, *self._tasks(fn, *args))

    def _count_positive(self, w):
        return int(self._compute("positive weights", (w > 0.0).sum(), read=False)[0])

    def _compute(self, name, *collections, read=True):
        """One Dask computation, counted as a pass and reported under verbose."""
        import dask

        return self._counted(
            name, functools.partial(dask.compute, optimize_graph=False), *collections, read=read
        )

    def _counted(self, name, run, *args, read=True):
        """``run(*args)``, counted as a pass and reported under verbose.

        ``read``: whether the pass reads X (not a subsample kept on the
        workers, nor the rows a draw kept); the verbose line of a read says
        which read of X it is.
        """
        start = time.perf_counter()
        out = run(*args)
        self._passes[0] += 1
        read = read and self._reads_x
        self._passes[1] += read
        if self.verbose:
            what = f", read {self.n_reads} of X" if read else ""
            print(
                f"[AttentionClustering] Dask pass {self.n_passes}{what} ({name}{self._where}): "
                f"{time.perf_counter() - start:.3g} s"
            )
        return out

    def _pass(self, name, *args):
        """A :class:`DenseRows` pass over every block, combined: sums are added,
        weighted means averaged by the blocks' weights."""
        parts = self._blocks(name, _block_pass, self.scale, self.offset, self.compiled, name, args)
        if name in _MEAN_PASSES:
            parts = [(w, r) for w, r in parts if w > 0.0]
            total = sum(w for w, _ in parts)
            # Each block's share times its mean: a mean near float64's
            # largest numbers times a block's weight would overflow.
            if isinstance(parts[0][1], tuple):
                return tuple(
                    sum((w / total) * v[j] for w, v in parts) for j in range(len(parts[0][1]))
                )
            return sum((w / total) * r for w, r in parts)
        results = [r for _, r in parts]
        if isinstance(results[0], tuple):
            return tuple(sum(r[j] for r in results) for j in range(len(results[0])))
        return sum(results)

    def moments(self):
        """``(c, M / c^2, mean)`` as :meth:`DenseRows.moments`, in one pass;
        raises ValueError on NaN or infinity.

        The first pass of a fit, so bad values are reported before the
        others, with scikit-learn's messages. Each block has its own scale
        ``c_b``; with ``c = max_b c_b`` the blocks' ``M_b / c_b^2`` add up as
        ``sum_b W_b (c_b / c)^2 (M_b / c_b^2) / sum_b W_b``, and their means
        as ``sum_b W_b mean_b / sum_b W_b``.
        """
        held = self._reads_x and self._hold()
        kept = ", X kept in the workers' memory" if held else ""
        tasks = self._tasks(_block_moment, self.scale, self.offset, self.compiled)
        draw = self._nested
        if draw is not None and draw.taken is None and draw.fraction < 1.0:
            # The prepared draw's rows are taken in the same read of X.
            parts = self._take_draw(draw, tasks, "second moment, mean, finiteness and ", kept)
        else:
            parts = self._compute("second moment, mean and finiteness" + kept, *tasks)
        if held:
            self._reads_x = False  # X's source is not read again
        if any(nan for nan, _, _, _, _ in parts):
            raise ValueError("Input X contains NaN.")
        if any(inf for _, inf, _, _, _ in parts):
            raise ValueError(f"Input X contains infinity or a value too large for {self.dtype!r}.")
        parts = [(w, *moment, mean) for _, _, w, moment, mean in parts if w > 0.0]
        d = self.n_features
        # Each block's share times its mean (see _pass).
        mean = sum(((w / self.total_weight) * m for w, _, _, m in parts), np.zeros(d))
        parts = [(w, c, M) for w, c, M, _ in parts if c > 0.0]
        if not parts:
            return 0.0, np.zeros((d, d)), mean
        c = max(c for _, c, _ in parts)
        return c, sum(w * (cb / c) ** 2 * M for w, cb, M in parts) / self.total_weight, mean

    def scaled_second_moment(self):
        """``(c, M / c^2)`` of :meth:`moments` (the same one pass)."""
        c, M, _ = self.moments()
        return c, M

    def second_moment(self):
        c, M = self.scaled_second_moment()
        return c * c * M

    def mean(self):
        return self._pass("mean")

    def centred(self, offset):
        """The rows minus ``offset`` (unscaled), subtracted in every block's pass."""
        other = copy.copy(self)
        offset = np.asarray(offset, dtype=np.float64)
        other.offset = offset if self.offset is None else self.offset + offset
        other._drawn = None
        return other

    def rescaled(self, scale):
        """The same rows seen divided by ``scale``; the subsample :meth:`draw`
        keeps (rows at the old scale) is drawn again."""
        other = super().rescaled(scale)
        other._drawn = None
        return other

    def moment_action(self, V):
        return self._pass("moment_action", np.asarray(V, dtype=np.float64))

    def norm_moments(self):
        return self._pass("norm_moments")

    def exact_terms(self, U, MU, c, lm1, reg, rho, identity=1.0):
        return self._pass("exact_terms", U, MU, c, lm1, reg, rho, identity)

    def e_step(self, U, log_weights, beta):
        S, counts, partial = self._pass("e_step", U, log_weights, beta)
        return S, counts, float(partial)

    def head_totals(self, U):
        """As :meth:`DenseRows.head_totals`: the blocks' totals added at the
        scale's power of two, then given back (see
        :meth:`DenseRows.scaled_head_totals`)."""
        with np.errstate(over="ignore"):
            return _shifted(self._pass("scaled_head_totals", U), _huge_exponent(self.scale))

    def map_rows(self, fn, *args, dtype=np.float64, columns=None):
        """``fn(block, *args)`` on every block as a lazy Dask array (one ``map_blocks``).

        ``fn`` (a module-level function, so that workers unpickle it by
        reference) returns one value per row (``columns=None``) or
        ``columns`` values per row; the result is chunked as X's rows. A
        block with NaN or infinity raises ValueError when computed.
        """
        return _mapped(self._lazy_X, fn, args, dtype, columns)

    def weighted_mean(self, fn, *args):
        """As :meth:`DenseRows.weighted_mean`: one Dask computation (a reduction
        over the blocks the passes read: X's blocks in the workers' memory when
        the fit keeps them there, so that X's source is not read again)."""
        import dask.array as da

        values = _mapped(self._X, fn, args, np.float64, None)
        w = self.sample_weight
        # Rows of zero weight left out, as in memory.
        total = values.sum() if w is None else da.where(w > 0.0, values, 0.0) @ w
        return float(self._compute("weighted mean", total)[0]) / self.total_weight

    def check_finite(self):
        """Nothing before the passes: the first pass of every fit, :meth:`moments`,
        raises ValueError on a block with NaN or infinity, and so do the lazy
        results of :meth:`map_rows` (labels, transforms) when computed."""

    def labels_and_counts(self, centers, gain, bias, origin=None, scale=1.0):
        """``(labels, counts)``: the lazy :meth:`labels` on X, and their
        weighted counts in one pass over the blocks the passes read (X's
        blocks in the workers' memory when the fit keeps them there: X is
        not read again), each block labelling and counting its rows."""
        rule = self._block_rule(centers, gain, bias, origin, scale)
        parts = self._blocks("labels' counts", _block_label_counts, *rule, len(centers))
        return self.labels(centers, gain, bias, origin, scale), np.sum(parts, axis=0).ravel()

    def labels(self, centers, gain, bias, origin=None, scale=1.0):
        """Labels as a lazy Dask array (:meth:`DenseRows.labels` on each block)."""
        return self.map_rows(
            _labels, *self._block_rule(centers, gain, bias, origin, scale), dtype=np.intp
        )

    def _block_rule(self, centers, gain, bias, origin, scale):
        """The label rule's arguments as each block's :func:`_labels` takes them.

        The blocks are X's own: rows centred on an offset (:meth:`centred`)
        are labelled as ``x - offset`` about the origin, that is as ``x``
        about ``origin + offset``, as :meth:`DenseRows.labels` labels its
        centred rows.
        """
        if self.offset is not None:
            origin = self.offset if origin is None else np.asarray(origin) + self.offset
        return (
            np.asarray(centers, dtype=np.float64),
            _per_head(gain, len(centers)),
            np.asarray(bias, dtype=np.float64),
            None if origin is None else np.asarray(origin, dtype=np.float64),
            float(scale),
            self.compiled,
        )

    def subsample(self, rng, size):
        """About ``size`` distinct rows drawn uniformly, with their weights, or self.

        The rows whose keys are below ``size / n``, as
        :meth:`DenseRows.subsample` draws them (the same ``rng``, or the same
        prepared draw, gives the same rows as the NumPy array). Each block
        draws the keys of its own rows from the draw's seed and the rows'
        indices (:func:`~._draws.nested_rows`), so nothing of size n is on
        the client. The first subsample of a prepared draw
        (:meth:`prepare_subsamples`) reads X once and keeps the rows of the
        draw's largest fraction with their keys; every later subsample of
        that draw is taken from them without reading X. Rows kept are pulled
        to the client when they are at most ``_CLIENT_ROWS`` (expected), else
        persisted on the workers. A subsample of at most ``_CLIENT_ROWS``
        rows is returned as a :class:`DenseRows` (in memory, one thread); a
        larger one stays on the workers, as a :class:`DaskRows` whose passes
        are Dask computations over its blocks. ``size`` counts rows of
        positive weight, as :meth:`DenseRows.subsample`'s: with at most
        ``size`` of them, every one, pulled in one read of X (the rows of
        zero weight left on the workers) when they are at most
        ``_CLIENT_ROWS``, else ``self``, however many rows of zero weight X
        holds besides.
        """
        if self.n_weighted <= size:
            if self.n_weighted > _CLIENT_ROWS:
                return self
            parts = self._blocks("subsample of the rows of positive weight", _positive)
            weight = None if self.sample_weight is None else np.concatenate([w for _, w in parts])
            rows = np.concatenate([r for r, _ in parts])
            return _block_rows(rows, weight, self.scale, self.offset, self.compiled)
        draw, fraction = self._draw_for(rng, size)
        if draw.taken is None:
            self._take_draw(draw)
        return self._drawn_subsample(draw.taken, fraction)

    def _take_draw(self, draw, tasks=(), name="", suffix=""):
        """One read of X: every block's rows of keys below ``draw.fraction``,
        kept as ``draw.taken`` (a :class:`_Drawn`); returns the results of
        ``tasks``, delayed tasks on the same blocks computed in the same read
        (``name`` prefixes the pass's name, ``suffix`` ends it)."""
        parts = self._tasks(_block_nested, draw.seed, self.n_samples, draw.fraction, bounds=True)
        name += "nested subsamples drawn" + suffix
        if draw.fraction * self.n_samples <= _CLIENT_ROWS:
            out = self._compute(name, *parts, *tasks)
            parts, results = out[: len(parts)], out[len(parts) :]
            weights = (
                None if self.sample_weight is None else np.concatenate([w for _, w, _ in parts])
            )
            draw.taken = _Drawn(
                np.concatenate([r for r, _, _ in parts]),
                weights,
                np.concatenate([k for _, _, k in parts]),
                None,
            )
            return results
        out = self._counted(name + ", kept on the workers", _persisted, *parts, *tasks)
        parts, results = list(out[: len(parts)]), out[len(parts) :]
        results = self._compute("results of that read", *results, read=False) if tasks else ()
        draw.taken = _Drawn(None, None, None, parts)
        return results

    def _drawn_subsample(self, drawn, fraction):
        """The subsample of the rows in ``drawn`` whose keys are below ``fraction``."""
        if drawn.parts is None:
            keep = drawn.keys < np.float32(fraction)
            weight = None if drawn.weights is None else drawn.weights[keep]
            return _block_rows(drawn.rows[keep], weight, self.scale, self.offset, self.compiled)
        import dask
        import dask.array as da

        # Counted where the parts are: their keys are as many as the rows kept.
        count = dask.delayed(_drawn_count, pure=True)
        counts = self._compute(
            "rows of the drawn rows below the subsample's fraction",
            *[count(p, fraction) for p in drawn.parts],
            read=False,
        )
        select = dask.delayed(_drawn_below, pure=True)
        chosen = [select(p, fraction) for p in drawn.parts]
        where = f" of {sum(counts)} rows from the drawn rows"
        if sum(counts) <= _CLIENT_ROWS:
            pairs = self._compute("subsample" + where, *chosen, read=False)
            rows = np.concatenate([r for r, _ in pairs])
            weight = None if self.sample_weight is None else np.concatenate([w for _, w in pairs])
            return _block_rows(rows, weight, self.scale, self.offset, self.compiled)
        item = dask.delayed(_item, pure=True)

        def taken(i, shape, dtype):
            return da.concatenate(
                [
                    da.from_delayed(item(c, i), shape=(m, *shape), dtype=dtype)
                    for c, m in zip(chosen, counts)
                    if m
                ]
            )

        rows = taken(0, (self.n_features,), self.dtype)
        weight = None if self.sample_weight is None else taken(1, (), np.float64)
        rows, weight = self._counted(
            "subsample" + where + ", kept on the workers", _persisted, rows, weight, read=False
        )
        other = copy.copy(self)
        other._X, other.sample_weight, other._drawn = rows, weight, None
        other._lazy_X, other._lazy_weight = rows, weight
        other._nested, other._reads_x = None, False
        other.n_samples = rows.shape[0]
        other._where = f" on the subsample of {other.n_samples} rows"
        other.total_weight = (
            float(other.n_samples) if weight is None else float(weight.sum().compute())
        )
        if weight is not None:  # a subsample holds rows of positive weight alone
            other._weighted_count = (weight, other.n_samples)
        return other

    def draw(self, state, out):
        """PSGD's rows, drawn from ``_CLIENT_ROWS`` rows pulled once (:meth:`subsample`).

        A sequence's rows cannot be fetched one at a time from a cluster;
        PSGD's plateau is far above the statistical error of 2^20 rows.
        The subsample's indices are seeded from ``state``.
        """
        if self._drawn is None:
            rng = np.random.RandomState(int(state[0]) % (2**32))
            self._drawn = self.subsample(rng, _CLIENT_ROWS)
        return self._drawn.draw(state, out)


def _on_weighted_rows(method):
    """A :class:`SparseRows` pass that sums over rows, run on its rows of positive weight.

    See :func:`_positive`; :meth:`SparseRows._weighted_rows` keeps them.
    """

    @functools.wraps(method)
    def wrapper(self, *args):
        return method(self._weighted_rows(), *args)

    return wrapper


class SparseRows(_Rows):
    """Sparse rows (CSR), optionally centred, never densified.

    The rows the passes see are ``(x_i - m) / s`` for an ``offset`` m (the
    mean, when the estimator centres; zero otherwise): the centring is
    applied inside the products, ``(X - 1 m^T) V = X V - 1 (m^T V)`` and
    ``(X - 1 m^T)^T A = X^T A - m (1^T A)``, so every pass costs O(nnz K)
    plus O((n + d) K) and no dense n x d array is formed (only
    :meth:`second_moment`, for small d, forms a d x d matrix). The passes
    are sparse products, by blocks, run on the calling thread; their
    per-row arithmetic is the dense kernels' (``_kernels``), on the rows'
    projections. Same interface as :class:`DenseRows`.

    The non-zeros are kept in X's dtype: float32 ones are read in float64
    as each pass takes them (by blocks of rows for the products ``X V``,
    :func:`_csr_rows`; one at a time by the sums over rows ``X^T A``,
    :meth:`_sums_over_rows`), so that the passes give the numbers of a
    float64 copy of X, bit for bit, without one.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (n_samples, n_features)
        Validated CSR or CSC data, float32 or float64 (CSR kept as it is,
        CSC converted to CSR in its dtype; an entry stored more than once
        is summed, in a float64 copy).
    sample_weight : ndarray of shape (n_samples,) or None, default=None
    scale : float, default=1.0
    offset : ndarray of shape (n_features,) or None, default=None
        m, subtracted from every row (None: no centring), in the products
        as X is stored; :meth:`centred` also stores the columns whose mean
        is far from their spread centred (:func:`_centred_storage`).
    n_threads : int or None, default=None
        Kept for the interface; the sparse products run on one thread.
    compiled : bool or None, default=None
        As :class:`DenseRows`' (None: :func:`compiles` the non-zeros).
    dtype : dtype or None, default=None
        The dtype the rows report (their outputs' and rounding unit's); None:
        X's. float64 for the rows taken of float32 X (:meth:`_taken`'s
        subsamples, :meth:`_weighted_rows`), as :class:`DenseRows`'
        subsamples: kept float32 and read in float64, as those of a float64
        copy of X.
    """

    in_memory = True
    sparse = True

    def __init__(
        self,
        X,
        sample_weight=None,
        scale=1.0,
        offset=None,
        n_threads=None,
        compiled=None,
        dtype=None,
    ):
        self.dtype = X.dtype if dtype is None else np.dtype(dtype)
        self._X = sp.csr_matrix(X)
        if _stores_an_entry_twice(self._X):
            # An entry stored as several values is their sum; the passes that
            # square the stored values (the norms) need each entry once. (Summed
            # in float64, as a float64 copy of X sums them.)
            self._X = self._X.astype(np.float64)
            self._X.sum_duplicates()
        self.sample_weight = (
            None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        )
        self.n_samples, self.n_features = X.shape
        self.scale = float(scale)
        self.offset = (
            np.zeros(self.n_features) if offset is None else np.asarray(offset, dtype=np.float64)
        )
        self.total_weight = (
            float(self.n_samples)
            if self.sample_weight is None
            else float(np.sum(self.sample_weight))
        )
        self.n_threads = 1
        self.compiled = compiles(self._X.nnz) if compiled is None else compiled
        self._cum_weights = None

    def close(self):
        """Nothing to release: no thread pool."""

    def column_support(self):
        """The columns holding a stored entry or an offset: in the others
        every row the passes see, ``(x - m) / s``, is zero (of hashed
        features, 2^20 columns, most are)."""
        counts = _column_counts(self._X.indices, self.n_features)
        return np.flatnonzero((counts > 0) | (self.offset != 0.0))

    # -- helpers ------------------------------------------------------------

    def _w(self):
        return np.ones(self.n_samples) if self.sample_weight is None else self.sample_weight

    # The rows of positive weight and their weights, when some weight is
    # zero: computed once, shared by the centred and rescaled copies.
    _kept = None

    def _weighted_rows(self):
        """Self, or its rows of positive weight with the same scale and offset (:func:`_positive`)."""
        w = self.sample_weight
        if _all_positive(w):
            return self
        if self._kept is None:
            self._kept = (self._X[w > 0.0], w[w > 0.0])
        X, w = self._kept
        return SparseRows(X, w, self.scale, self.offset, compiled=self.compiled, dtype=np.float64)

    def _project(self, V):
        """``(X - 1 m^T) V`` (unscaled), V of shape (d, k), by blocks of rows
        read in float64 (:func:`_csr_rows`; a row's product is the whole
        matrix's, the same numbers)."""
        X = self._X
        width = max(X.nnz // max(self.n_samples, 1), 1)
        XV = _stacked(
            lambda lo, hi: _csr_rows(X, lo, hi) @ V,
            _chunk_bounds(self.n_samples, max(16, _CHUNK_BYTES // (8 * width))),
            lambda run, bounds: [run(lo, hi) for lo, hi in bounds],
            np.empty((0, *np.shape(V)[1:])),
        )
        if np.any(self.offset):
            # (Uncentred, the same numbers without it: the products, summed
            # from +0, are never -0, which alone subtracting a zero changes.)
            XV -= self.offset @ V
        return XV

    def _sum_kernels(self):
        """The module whose ``transpose_product`` and ``centred_column_sums``
        sum over the rows. Either gives SciPy's product of a float64 copy of
        X, bit for bit: the compiled ones (:attr:`kernels`, for float32 X)
        read float32 non-zeros in float64 one at a time, with no copy of
        them; float64 X runs SciPy's product (NumPy's forms), which copies
        no float64 values and takes less time than the kernel on them."""
        return _numpy_kernels if self._X.dtype == np.float64 else self.kernels

    # (X, X^T as CSR) of for_repeated_sums, kept by the copies that keep X.
    _by_columns = None

    def for_repeated_sums(self):
        """The same rows with a copy of float64 X by columns (CSR of X^T),
        which :meth:`_sums_over_rows` reads: the sums over rows gather the
        rows' projections by column, where SciPy's product of ``X.T`` (CSC)
        scatters into the d x k output, about twice the time on TF-IDF rows
        of 50000 words. The copy costs about one such product and X's
        memory: for a caller of many passes (the principal subspace's, on
        its subsample). Float32 X, read by the kernels, is kept as it is."""
        if self._X.dtype != np.float64 or (
            self._by_columns is not None and self._by_columns[0] is self._X
        ):
            return self
        other = copy.copy(self)
        other._by_columns = (self._X, self._X.T.tocsr())
        return other

    def _sums_over_rows(self, A):
        """``X^T A`` (unscaled, the offset not subtracted), A float64 of
        shape (n, k) or (n,): one row of output per column."""
        X = self._X
        if self._by_columns is not None and self._by_columns[0] is X:
            # Each row of X^T holds a column's entries in the order of X's
            # rows (csr_tocsc): its sums are CSC's, term by term from zero,
            # in the same order (the same numbers).
            return self._by_columns[1] @ A
        return self._sum_kernels().transpose_product(
            X.indptr, X.indices, X.data, A, self.n_features
        )

    def _transpose_product(self, A):
        """``(X - 1 m^T)^T A`` (unscaled), A of shape (n, k)."""
        sums = self._sums_over_rows(A)
        if np.any(self.offset):  # (as in _project)
            sums -= np.outer(self.offset, A.sum(axis=0))
        return sums

    # (the stored values, their largest |x_ij|) of _magnitudes: copies that
    # keep the values (centred, rescaled) keep it.
    _top = None

    def _magnitudes(self):
        """``(max |x_ij|, max |m_j|)``, of the stored values and of the offset (0 when empty)."""
        data = self._X.data
        if self._top is None or self._top[0] is not data:
            top = largest_magnitude(data)
            self._top = (data, top)
        off = largest_magnitude(self.offset)
        return self._top[1], off

    def _summed(self):
        """``(rows, e)``: the same rows ``(x - m) / s`` with x, m and s times
        ``2^-e``, for the passes that sum over rows (self when ``e = 0``).

        ``e`` is :func:`_huge_exponent` of the larger of ``max |x_ij|`` and
        ``max |m_j|``: 0 unless the rows exceed ``_HUGE_ROWS``, where their
        products with the weights or with their projections sum past float64
        over few of them; they are then summed at the scale of the largest
        entry, as :meth:`DenseRows.moments` sums a chunk's columns. A power
        of two is exact, so the passes' results are the same numbers.
        """
        e = _huge_exponent(max(self._magnitudes()))
        if not e:
            return self, 0
        other = copy.copy(self)
        other._X = _with_values(self._X, np.ldexp(np.asarray(self._X.data, np.float64), -e))
        other.offset = np.ldexp(self.offset, -e)
        other.scale = float(np.ldexp(self.scale, -e))
        other._kept = None
        return other, e

    def _squared_norms(self):
        """``||(x_i - m) / s||^2``, computed at unit scale (:func:`unit_terms`), by chunks of rows."""
        return self.map_rows(_unit_squared_norms, self.offset, self.scale)

    # -- passes -------------------------------------------------------------

    @_on_weighted_rows
    def mean(self):
        """Weighted mean of the rows ``(x - m) / s``, summed as :meth:`_summed` takes them.

        With an offset m, the sum of ``x - m`` itself (the stored entries'
        ``x_ij - m_j``, and ``-m_j`` for each row not storing column j), not
        the rows' mean less m: centred on a mean b rounded at the magnitude
        of its sum (a column of one value far from zero), the rows' mean is
        that rounding, which ``_plan._centred`` adds back to b, as for dense
        rows, and not zero.
        """
        rows, _ = self._summed()
        w, m = self._w(), rows.offset
        if not np.any(m):
            return rows._sums_over_rows(w) / self.total_weight / rows.scale
        X = rows._X
        total, stored = rows._sum_kernels().centred_column_sums(X.indptr, X.indices, X.data, m, w)
        total -= m * (self.total_weight - stored)
        return total / self.total_weight / rows.scale

    def centred(self, offset):
        """The same rows with ``offset`` (unscaled) subtracted, implicitly
        (the columns whose mean is far from their spread stored centred:
        :func:`_centred_storage`)."""
        other = copy.copy(self)
        other._X, other.offset = _centred_storage(
            self._X, self.offset + np.asarray(offset, dtype=np.float64), self.sample_weight
        )
        if other._X is not self._X:
            other._kept = None
        return other

    def scaled_second_moment(self):
        """``(c, M / c^2)`` as :meth:`DenseRows.scaled_second_moment`, c the largest diagonal's root.

        The first pass of a fit: raises ValueError on NaN or infinity, and
        forms the products at the magnitude of the largest entry
        (:meth:`_moment_at`), so that finite rows of any magnitude neither
        overflow nor underflow.
        """
        with quiet_finite_check():
            assert_all_finite(self._X.data, input_name="X")
        peak = max(self.peak() * self.scale, 0.0)
        if not peak > 0.0:
            return 0.0, np.zeros((self.n_features, self.n_features))
        c = power_of_two_unit(peak)
        M = self._weighted_rows()._moment_at(c)
        top = float(np.max(np.diag(M)))
        if not top > 0.0:
            return 0.0, np.zeros_like(M)
        return c * np.sqrt(top) / self.scale, M / top

    def _moment_at(self, c):
        """The second moment of the rows ``(x - m) / c``, c a power of two:
        ``X^T W X / W - b m^T - m b^T + m m^T`` at that scale, b the weighted
        mean. The expansion's terms are of m's magnitude and round at it:
        nothing against a column's spread about m_j, as the columns whose
        mean is far from it are stored centred (:func:`_centred_storage`,
        ``math.md`` section 7, "Sparse rows about their mean").
        """
        # All the values in float64 at once (a copy of float32 ones, held
        # during this pass: a d x d product of sparse matrices is not split
        # by blocks without changing its sums). The rows at scale c, and with
        # their weights, share the structure of the rows: one array of values
        # each (a copy of the non-zeros' structure per product is scipy's).
        X = _csr_rows(self._X, 0, self.n_samples)
        X = _with_values(X, X.data / c)
        w, m = self._w(), self.offset / c
        wX = X if self.sample_weight is None else _with_values(X, X.data * _row_values(X, w))
        S = (X.T @ wX).toarray() / self.total_weight
        if not np.any(m):
            return S
        b = X.T @ w / self.total_weight
        return S - np.outer(b, m) - np.outer(m, b) + np.outer(m, m)

    @_on_weighted_rows
    def second_moment(self):
        """``M`` (d x d, float64) of the rows ``(x - m) / s``."""
        c = power_of_two_unit(self.scale)
        return self._moment_at(c) * (c / self.scale) ** 2

    @_on_weighted_rows
    def peak(self):
        """The largest ``|x_ij - m_j| / s`` of the rows as the passes see
        them (centred), as :meth:`DenseRows.peak`: over the stored entries,
        and over the offsets of the columns where a row stores no entry (its
        zero, centred, is ``-m_j``), by chunks of the stored entries. (It
        was the bound ``(max |x_ij| + max |m_j|) / s``, twice the peak of
        rows equal to their mean: a stream's batch of such rows was refused
        as beyond its scale where the same dense rows were not.)"""
        top, off = self._magnitudes()
        if off == 0.0:
            return top / self.scale
        X, m = self._X, self.offset
        step = max(1, _CHUNK_BYTES // 8)
        with np.errstate(over="ignore"):  # rows beyond float64 once centred: inf, as dense
            peak = max(
                (
                    float(np.max(np.abs(X.data[lo : lo + step] - m[X.indices[lo : lo + step]])))
                    for lo in range(0, X.nnz, step)
                ),
                default=0.0,
            )
        gaps = _column_counts(X.indices, X.shape[1]) < X.shape[0]
        if gaps.any():
            peak = max(peak, float(np.max(np.abs(m[gaps]))))
        return peak / self.scale

    @_on_weighted_rows
    def moment_action(self, V):
        """``M V`` for V of shape (d, K), in two sparse products (:meth:`_summed`).

        The projections ``(x - m)^T V`` are taken over ``2^e``, the power
        of two of the scale ``s`` (``_validation.power_of_two_unit``; exact),
        so that the second product is
        formed at the rows' magnitude, not at its square, and ``s^2`` is
        never taken: the same numbers where neither overflows, and finite
        up to float64's largest rows (the principal subspace's iteration
        sees its subsample divided by the power of two of its largest entry,
        ``_scale.principal_basis``).
        """
        V = np.asarray(V, dtype=np.float64)
        rows, _ = self._summed()
        p = power_of_two_unit(rows.scale)
        # In place, in the same order (d x K temporaries of wide rows each
        # cost their page faults); weights of one multiply by nothing.
        A = rows._project(V)
        A /= p
        if self.sample_weight is not None:
            A *= self.sample_weight[:, None]
        MV = rows._transpose_product(A)
        MV /= p
        MV /= self.total_weight * (rows.scale / p) ** 2
        return MV

    @_on_weighted_rows
    def norm_moments(self):
        """Weighted means of ``||x||^2`` and ``||x||^4``."""
        sq = self._squared_norms()
        w = self._w()
        with np.errstate(over="ignore"):  # the fourth moment: see DenseRows.norm_moments
            return float(w @ sq / self.total_weight), float(w @ (sq * sq) / self.total_weight)

    @_on_weighted_rows
    def exact_terms(self, U, MU, c, lm1, reg, rho, identity=1.0):
        """As :meth:`DenseRows.exact_terms`, with :func:`_kernels.projected_row_terms`
        (the products with the rows summed by :meth:`_summed`)."""
        U = np.asarray(U, dtype=np.float64)
        K = U.shape[1]
        rows, _ = self._summed()
        AG = rows._project(np.hstack([U, np.asarray(MU, dtype=np.float64)])) / rows.scale
        A, G = np.ascontiguousarray(AG[:, :K]), np.ascontiguousarray(AG[:, K:])
        nrm = self._squared_norms()
        w = np.empty(0) if self.sample_weight is None else self.sample_weight
        C = np.empty((self.n_samples, 3 * K))
        value = self.kernels.projected_row_terms(A, G, nrm, w, c, lm1, reg, rho, C, identity)
        # Row terms beyond float64 (rows many scales out) are inf, and their
        # sums inf or NaN, as the dense kernels' (_numpy_kernels), without
        # the RuntimeWarning of inf x 0 in the centring's product.
        with np.errstate(over="ignore", invalid="ignore"):
            return value, rows._transpose_product(C).T / rows.scale

    @_on_weighted_rows
    def e_step(self, U, log_weights, beta):
        """As :meth:`DenseRows.e_step` (``math.md`` section 7), by tiles of rows.

        Per tile of ``_SPARSE_TILE`` rows: the scores by a sparse product
        with the centring applied (``(X - 1 m^T) V = X V - 1 m^T V``), the
        softmax by :func:`_kernels.posterior_columns`, and the sums ``R^T (X
        - 1 m^T) = R^T X - counts m^T`` by a second sparse product: memory
        O(tile K), not O(n K).
        """
        U = np.asarray(U, dtype=np.float64)
        log_weights = np.asarray(log_weights, dtype=np.float64)
        K = U.shape[1]
        # The rows and the scale times 2^k (see _key_shift).
        k = _key_shift(beta, 1.0 / self.scale, np.float64)
        scale = np.ldexp(self.scale, k)
        keys = (beta / scale) * U
        offset = _shifted(self.offset, k)
        centred = bool(np.any(offset))
        shift = offset @ keys
        S = np.zeros((K, self.n_features))
        counts = np.zeros(K)
        partial = 0.0
        w = np.empty(0) if self.sample_weight is None else self.sample_weight
        for lo in range(0, self.n_samples, _SPARSE_TILE):
            T = _csr_rows(self._X, lo, min(lo + _SPARSE_TILE, self.n_samples))
            if k:
                T = _with_values(T, _shifted(T.data, k))
            TK = T @ keys
            if centred:  # (uncentred, a zero shift: the same numbers, as in _project)
                TK -= shift
            P = np.ascontiguousarray(TK.T)
            before = counts.copy()
            partial += self.kernels.posterior_columns(
                P, log_weights, w[lo : lo + _SPARSE_TILE] if w.size else w, counts
            )
            # R^T X - counts m^T, formed in the product's own d x K array by
            # blocks of features (an outer product and the difference beside
            # it were two more arrays of S's size: 400 MB each at K = 50 and
            # 2^20 features); the same numbers as the outer product's.
            tile_sums = _csr_on(T.data, T.indices, T.indptr, T.shape[::-1], sp.csc_matrix) @ P.T
            if centred:
                taken = counts - before
                for a, b in row_chunks(self.n_features, K):
                    tile_sums[a:b] -= offset[a:b, None] * taken
            S += tile_sums.T
            del tile_sums  # (not held while the next tile's is formed)
        return S / scale, counts, partial

    @_on_weighted_rows
    def head_totals(self, U):
        """As :meth:`DenseRows.head_totals`, summed by :meth:`_summed` (sums
        beyond float64's range are infinite, of their sign)."""
        rows, e = self._summed()
        P = rows._project(np.asarray(U, dtype=np.float64))
        best = np.argmax(np.abs(P), axis=1)
        wins = P[np.arange(self.n_samples), best] * self._w()
        with np.errstate(over="ignore"):
            return _shifted(np.bincount(best, weights=wins, minlength=P.shape[1]), e)

    def labels(self, centers, gain, bias, origin=None, scale=1.0):
        """As :meth:`DenseRows.labels`, the rows' own offset ``m`` subtracted
        (``argmax_h (gain_h / s) <x - m - o, c_h> + bias_h``; ties to the first
        head). The products are float64: the origin goes in the bias."""
        C = np.asarray(centers, dtype=np.float64).T
        gain, bias, _, k = _label_terms(C, gain, bias, origin, scale)
        shift = self.offset @ C
        # By chunks of rows, as map_rows: the scores' temporaries (n x K
        # each, three of them) are a chunk's.
        X = self._X
        width = max(X.nnz // max(self.n_samples, 1), C.shape[1], 1)
        return _stacked(
            lambda lo, hi: _rule_labels(_csr_rows(X, lo, hi) @ C - shift, gain, bias, k),
            _chunk_bounds(self.n_samples, max(16, _CHUNK_BYTES // (8 * width))),
            lambda run, bounds: [run(lo, hi) for lo, hi in bounds],
            np.empty(0, dtype=np.intp),
        )

    def map_rows(self, fn, *args, dtype=np.float64, columns=None):
        """``fn(rows, *args)`` on the rows as given (CSR, read in float64 by
        :func:`_csr_rows`; the offset not subtracted), by chunks of rows: the
        temporaries of ``fn`` (a copy of the rows, a dense block of
        ``columns`` values a row) are a chunk's."""
        X = self._X
        # About _CHUNK_BYTES of non-zeros or of output a chunk; a wide output
        # (transform's n x d) takes fewer rows than dense passes' 256.
        width = max(X.nnz // max(self.n_samples, 1), columns or 1, 1)
        return _stacked(
            lambda lo, hi: fn(_csr_rows(X, lo, hi), *args),
            _chunk_bounds(self.n_samples, max(16, _CHUNK_BYTES // (8 * width))),
            lambda run, bounds: [run(lo, hi) for lo, hi in bounds],
            np.empty((0,) if columns is None else (0, columns), dtype=dtype),
        )

    def weighted_mean(self, fn, *args):
        """As :meth:`DenseRows.weighted_mean` (rows of zero weight left out)."""
        w, values = self._w(), self.map_rows(fn, *args)
        return float(values[w > 0.0] @ w[w > 0.0]) / self.total_weight

    def check_finite(self):
        """As :meth:`DenseRows.check_finite` (on the stored non-zeros)."""
        with quiet_finite_check():
            assert_all_finite(self._X.data, input_name="X")

    def _taken(self, idx):
        """The rows ``idx`` of positive weight as a :class:`SparseRows` with the same offset and scale."""
        idx = self._weighted_indices(idx)
        weight = None if self.sample_weight is None else self.sample_weight[idx]
        return SparseRows(
            self._X[idx], weight, self.scale, self.offset, compiled=self.compiled, dtype=np.float64
        )

    def project(self, V):
        """``((X - 1 m^T) / s) V``: an (n, K) array (infinite beyond float64, as
        :meth:`DenseRows.project`)."""
        rows, _ = self._summed()  # beyond _HUGE_ROWS, at a power of two (exact)
        with np.errstate(over="ignore", invalid="ignore"):
            return rows._project(np.asarray(V, dtype=np.float64)) / rows.scale

    def draw(self, state, out):
        """As :meth:`DenseRows.draw`, each drawn row densified into ``out``."""
        X = self._X
        with _wrapping_generator():
            _kernels.draw_sparse_rows(
                X.indptr,
                X.indices,
                X.data,
                self._cumulative_weights(),
                1.0 / self.scale,
                self.offset,
                state,
                out,
            )
        return out


def rows_from(
    estimator,
    X,
    *,
    reset,
    sample_weight=None,
    n_threads=None,
    verbose=0,
    defer_finite=False,
    weight_unit=None,
    check_shape=None,
    in_memory=False,
    count_rows=True,
):
    """The data object for any X an estimator accepts: the one place that asks what X is.

    ndarray, memmap, pandas DataFrame and lists give :class:`DenseRows`;
    CSR and CSC matrices :class:`SparseRows`; a Dask array or DataFrame
    :class:`DaskRows` (never computed here). X is validated against
    ``estimator`` (its dtypes by ``_validation.check_dtypes``, then
    ``validate_data``, or ``_validation.check_dask_array`` for Dask),
    recording ``n_features_in_`` when ``reset``; float32 stays float32,
    anything else becomes float64.

    Parameters
    ----------
    estimator : BaseEstimator
    X : array-like, sparse matrix, dask array or dask DataFrame of shape (n_samples, n_features)
    reset : bool
        True in ``fit`` (records the features), False after.
    sample_weight : array-like of shape (n_samples,) or None, default=None
    n_threads : int or None, default=None
        Threads of the passes over in-memory rows.
    verbose : int, default=0
        Dask passes are reported when positive.
    defer_finite : bool, default=False
        Leave the check for NaN and infinity of dense rows to the caller's
        first pass (:meth:`DenseRows.moments` raises the same errors), or to
        :meth:`DenseRows.check_finite`.
    weight_unit : float or None, default=None
        The rows' weights are ``sample_weight / weight_unit``
        (:attr:`_Rows.weight_unit`); None for the power of two of the largest
        weight (``_validation.power_of_two_unit``). A stream passes its first
        batch's, so that its batches' weights keep their ratios.
    check_shape : callable or None, default=None
        ``check_shape(n_samples, n_features, in_memory)``, the caller's checks
        of X's shape: a Dask collection's from its graph, before any other
        check computes (``n_samples`` 0 when the graph does not know it, as
        a DataFrame's); rows in memory after their weights' checks.
    in_memory : bool, default=False
        Take rows in memory only: a Dask collection is refused (TypeError)
        before anything is read (``partial_fit``'s batches).
    count_rows : bool, default=True
        False for the methods that only map each block to its outputs
        (:meth:`DaskRows.map_rows`, :meth:`DaskRows.labels`): a Dask
        DataFrame's rows are then not counted, nor need a Dask array's row
        chunks be known, so that nothing is computed until the outputs are
        (``_validation.check_dask_array``).
    """
    X = check_dtypes(X)
    if is_dask_collection(X):
        if in_memory:
            raise TypeError(
                "partial_fit takes batches in memory (arrays or sparse matrices); "
                "fit reads a Dask array in passes."
            )
        if check_shape is not None and len(X.shape) == 2:
            # From the graph, before its checks (a DataFrame's counts its rows).
            n = X.shape[0] if isinstance(X.shape[0], numbers.Integral) else 0
            check_shape(n, X.shape[1], False)
        X = check_dask_array(estimator, X, reset=reset, count_rows=count_rows)
        weights, total, unit, positive, heaviest = check_dask_sample_weight(sample_weight, X)
        if weights is not None and not is_dask_collection(sample_weight):
            weights = _scattered(weights, X.chunks[0])
        rows = DaskRows(X, weights, total_weight=total, n_weighted=positive, verbose=verbose)
        rows.weight_unit, rows.heaviest_weight = unit, heaviest
        return rows
    X = validate_data(
        estimator,
        X,
        accept_sparse=["csr", "csc"],
        dtype=[np.float64, np.float32],
        order="C",
        reset=reset,
        ensure_all_finite=False,
    )
    weights, unit = check_sample_weight(sample_weight, X, weight_unit)
    if check_shape is not None:
        check_shape(X.shape[0], X.shape[1], True)
    rows = rows_of(X, weights, n_threads=n_threads)
    rows.weight_unit = unit
    rows.heaviest_weight = 1.0 if weights is None else float(np.max(weights))
    if not defer_finite:
        rows.check_finite()
    return rows


def _scattered(weights, chunks):
    """In-memory weights (a Dask array on a NumPy array) sent once to the
    workers of the client that computes, chunked as ``chunks``: in each pass's
    graph they were sent with every computation (distributed's "Sending
    large graph" warning, at 2e6 rows). Unchanged without a client."""
    import dask.array as da

    client = _scheduling_client()
    if client is None:
        return weights
    values = weights.compute(scheduler="sync")
    edges = np.cumsum((0,) + tuple(chunks))
    # (Keys of their own: hashed, a later call's same weights met the release
    # of the earlier futures under the same keys, "lost dependencies".)
    futures = client.scatter([values[lo:hi] for lo, hi in zip(edges, edges[1:])], hash=False)
    return da.concatenate(
        [
            da.from_delayed(future, shape=(hi - lo,), dtype=values.dtype)
            for future, lo, hi in zip(futures, edges, edges[1:])
        ]
    )


def rows_of(X, sample_weight=None, n_threads=None):
    """The data object for validated in-memory X: :class:`SparseRows` for a
    sparse matrix, else :class:`DenseRows` (see :func:`rows_from`)."""
    if sp.issparse(X):
        return SparseRows(X, sample_weight, n_threads=n_threads)
    return DenseRows(X, sample_weight, n_threads=n_threads)


def _csr_on(data, indices, indptr, shape, kind=sp.csr_matrix):
    """The CSR matrix (``kind``: or CSC) of these arrays, on them (none
    copied nor checked: the caller's are a valid matrix's). SciPy's
    constructor copies the values and indices of a block of rows, views of
    less than half of a larger matrix's arrays (its ``prune``): two copies
    of each block a pass read, which cost their page faults."""
    A = kind(shape, dtype=data.dtype)
    A.data, A.indices, A.indptr = data, indices, indptr
    return A


def _with_values(X, data):
    """CSR X's structure (shared, not copied) with the values ``data``."""
    return _csr_on(data, X.indices, X.indptr, X.shape)


def _row_values(X, values):
    """``values[i]`` for each stored entry of CSR X's row i."""
    return np.repeat(values, np.diff(X.indptr))


def _stores_an_entry_twice(X):
    """Whether CSR X stores an entry as several values (scipy allows it).

    Canonical X (sorted, no repeats) does not; sorted X that is not
    canonical does. Rows whose indices are out of order (TF-IDF's, say)
    are read once, without a copy: sorting them would copy X, for a case
    that is rare.
    """
    if X.has_canonical_format:
        return False
    if X.has_sorted_indices:
        return True
    if compiles(X.nnz):
        return bool(_kernels.repeats_a_column(X.indptr, X.indices, X.shape[1]))
    canonical = X.copy()
    canonical.sum_duplicates()
    return canonical.nnz < X.nnz


def dense_block(rows, dtype):
    """A block of rows as given (dense or sparse) as a C-contiguous dense array of ``dtype``."""
    return np.ascontiguousarray(dense(rows), dtype=dtype)


def taken_rows(rows, indices, dtype):
    """The rows ``indices`` of a dense or sparse matrix, in ``dtype``: dense
    ones cast chunk by chunk, without a copy of them in their own dtype (633
    of 2000 float64 rows of 5000 features read in float32: 25 MB)."""
    if sp.issparse(rows) or rows.dtype == dtype:
        return rows[indices].astype(dtype, copy=False)
    taken = np.empty((len(indices), rows.shape[1]), dtype=dtype)
    for lo, hi in row_chunks(len(indices), rows.shape[1]):
        taken[lo:hi] = rows[indices[lo:hi]]
    return taken


def row_major(rows):
    """The rows in row-major storage (CSR when sparse, C-contiguous when dense),
    so that a block of rows is a slice of contiguous memory."""
    return rows.tocsr() if sp.issparse(rows) else np.ascontiguousarray(rows)


def dense(A):
    """A matrix (or a product of matrices) as a NumPy array: sparse ones densified."""
    return A.toarray() if sp.issparse(A) else np.asarray(A)


def densified_bytes(A, itemsize=8):
    """The memory a dense copy of a sparse matrix would take at ``itemsize``
    bytes an entry; 0 for a dense matrix, which is dense already."""
    return A.shape[0] * A.shape[1] * itemsize if sp.issparse(A) else 0


def entry_squares(A):
    """The entries' squares ``A * A``, sparse for a sparse matrix."""
    return A.multiply(A) if sp.issparse(A) else np.square(A)


def row_squared_norms(A):
    """``||a_i||^2`` of each row of a dense or sparse matrix."""
    if not sp.issparse(A):
        A = np.asarray(A)
    if sp.issparse(A) or A.shape[0] == 0:
        return np.asarray(entry_squares(A).sum(axis=1)).ravel()
    # By chunks of rows: no full-size array of squares (unit_rows' reason).
    return np.concatenate(
        [np.square(A[lo:hi]).sum(axis=1) for lo, hi in row_chunks(A.shape[0], A.shape[1])]
    )


def rows_times(A, factors):
    """``diag(factors) A``: each row of a dense or sparse matrix times its factor."""
    return sp.diags(factors) @ A if sp.issparse(A) else factors[:, None] * A


def times_power_of_two(A, exponent, dtype=None):
    """``A 2^exponent`` (``np.ldexp``: exact but where it leaves the dtype's
    range), dense or sparse (a sparse one's stored entries, in a copy), in
    ``dtype`` (A's when None).

    In float64, where ``2^exponent`` is a normal number, by one
    multiplication: both are the correctly rounded product, the same
    numbers, at a tenth of ldexp's time on a million values."""
    dtype = A.dtype if dtype is None else np.dtype(dtype)
    if sp.issparse(A):
        scaled = A.astype(dtype)  # a copy
        scaled.data = _values_times_power_of_two(scaled.data, exponent, dtype)
        return scaled
    return _values_times_power_of_two(np.asarray(A), exponent, dtype)


def _values_times_power_of_two(values, exponent, dtype):
    """:func:`times_power_of_two` of an array, a new array in ``dtype`` (the
    product in float64 converts float32 values as it reads them: no copy
    of them in float64 first)."""
    if dtype == np.float64 and -1022 <= exponent <= 1023:
        return np.multiply(values, 2.0**exponent, dtype=np.float64)
    return np.ldexp(np.asarray(values, dtype=dtype), exponent).astype(dtype, copy=False)


def gram_matrix(A, exponent=0):
    """``B B^T``, ``B = A 2^exponent`` in float64, of a dense or sparse
    matrix's rows, dense (a sparse product, densified). Dense A is read by
    blocks of columns, each cast and scaled in turn: no float64 copy of A
    (of float32 prompts wider than long, twice their size) is formed."""
    if sp.issparse(A):
        B = times_power_of_two(A, exponent, np.float64)
        return dense(B @ B.T)
    n, d = A.shape
    G = np.zeros((n, n))
    step = max(1, _CHUNK_BYTES // (8 * max(n, 1)))
    for lo in range(0, d, step):
        B = np.ldexp(np.asarray(A[:, lo : lo + step], dtype=np.float64), exponent)
        G += B @ B.T
    return G


def left_times(B, A, dtype):
    """``B @ A`` as a dense C-contiguous array of ``dtype``: a sparse A
    multiplied in float64 (as :class:`SparseRows` reads it), a dense one in
    the dtype of the product."""
    if sp.issparse(A):
        # By blocks of A's columns (rows of A^T in CSR), each product cast
        # into the output: no float64 or transposed copy of all of it.
        B = np.asarray(B, dtype=np.float64)
        At = sp.csr_matrix(A.T)
        out = np.empty((B.shape[0], A.shape[1]), dtype=dtype)
        for lo, hi in row_chunks(At.shape[0], B.shape[0]):
            out[:, lo:hi] = (_csr_rows(At, lo, hi) @ B.T).T
        return out
    return np.asarray(B @ A).astype(dtype, copy=False)


def _column_counts(indices, n_columns):
    """The number of entries in each column of a sparse matrix's column
    ``indices``: ``np.bincount(indices, minlength=n_columns)``, by chunks of
    entries (bincount takes the indices as 64-bit integers: a copy of them
    all, twice the int32 indices' size, where a chunk's now; integer sums,
    the same counts)."""
    counts = np.zeros(n_columns, dtype=np.intp)
    step = _CHUNK_BYTES // 8
    for lo in range(0, len(indices), step):
        counts += np.bincount(indices[lo : lo + step], minlength=n_columns)
    return counts


def unit_rows(rows, copy=True):
    """Rows projected on the unit sphere; a zero row, which has no direction, stays zero.

    Sparse rows stay sparse (CSR); dense rows keep their dtype. Each row is
    divided by its largest entry before its norm is taken, so that squares
    neither overflow nor underflow at any magnitude of the dtype (a float32
    row at 1e30 would otherwise have an infinite norm and become zero).
    ``copy=False``: rows the caller owns and reads no more, a float array
    or a CSR matrix, are divided in place (the same numbers, without a
    copy of them all: 80 MB of 2000 dense rows of 5000 features).
    """
    if sp.issparse(rows):
        rows = rows.tocsr(copy=copy)
        # An entry stored twice is their sum (the norm of the stored values
        # took 2 e_0 stored as 1 + 1 for norm sqrt 2).
        rows.sum_duplicates()
        peaks = row_peaks(rows)
        rows.data /= _row_values(rows, np.where(peaks > 0, peaks, 1))
        return normalize(rows, copy=False)
    peaks = row_peaks(rows)[:, None]
    # One copy of the rows at most, divided in place: each full-size
    # temporary of a wide block (2000 centred TF-IDF documents of 5000
    # words: 80 MB) costs its page faults, which took most of the time.
    if copy:
        rows = rows / np.where(peaks > 0, peaks, 1)
    else:
        rows /= np.where(peaks > 0, peaks, 1)
    norms = np.empty((rows.shape[0], 1), dtype=rows.dtype)
    for lo, hi in row_chunks(rows.shape[0], rows.shape[1]):
        norms[lo:hi] = np.linalg.norm(rows[lo:hi], axis=1, keepdims=True)
    rows /= np.where(norms > 0, norms, 1)
    return rows


def _csr_rows(X, lo, hi):
    """Rows ``lo:hi`` of the CSR matrix X on X's own index arrays (``X[lo:hi]``
    copies them), their values in float64: X's own when float64, else a copy
    of the block's (the one place float32 non-zeros are read in float64, so
    that the passes give the numbers of a float64 copy of X)."""
    a, b = X.indptr[lo], X.indptr[hi]
    return _csr_on(
        np.asarray(X.data[a:b], dtype=np.float64),
        X.indices[a:b],
        X.indptr[lo : hi + 1] - a,
        (hi - lo, X.shape[1]),
    )


def _unit_squared_norms(rows, offset, scale):
    """``||(x_i - offset) / scale||^2`` of a block of rows, by :func:`unit_terms`."""
    return unit_terms(rows, np.empty((0, rows.shape[1])), offset, scale)[1]


def row_peaks(rows):
    """The largest ``|x_ij|`` of each row of a dense block or a CSR matrix (0 for a zero row)."""
    if sp.issparse(rows):
        return _row_reduce(np.maximum, np.abs(rows.data), rows.indptr)
    if rows.dtype.kind != "f":
        return np.max(np.abs(rows), axis=1, initial=0)
    # Floats: the larger of the row's largest entry and minus its smallest,
    # no full-size copy of |x| (0 - min, not -min: a zero row's peak is +0).
    return np.maximum(np.max(rows, axis=1, initial=0.0), 0.0 - np.min(rows, axis=1, initial=0.0))


def stored_bytes(rows):
    """The memory a block of rows takes as it is stored (the non-zeros and their indices when sparse)."""
    if sp.issparse(rows):
        rows = rows.tocsr()
        return rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes
    return np.asarray(rows).nbytes


def _row_reduce(ufunc, values, indptr):
    """Per row of a CSR matrix, ``ufunc``'s reduction (``np.add``, ``np.maximum``)
    of ``values`` (one per stored entry); 0 for an empty row."""
    out = np.zeros(len(indptr) - 1, dtype=values.dtype)
    filled = indptr[:-1] < indptr[1:]
    # Between the starts of two rows that hold entries lie only the first one's.
    out[filled] = ufunc.reduceat(values, indptr[:-1][filled]) if values.size else 0.0
    return out


# A column of sparse rows whose mean is more than this many times its rows'
# root mean square about it is stored centred (:func:`_centred_storage`).
_FAR_MEAN = 10.0


def _centred_storage(X, m, sample_weight=None):
    """``(Y, r)``: CSR Y and an offset r with ``Y - 1 r^T = X - 1 m^T``, the
    columns whose mean is far from their spread stored centred.

    Sparse rows are centred inside the products, ``(X - 1 m^T) V = X V - 1
    (m^T V)``, whose terms are of m's magnitude and round at it: about eps
    |m_j| a column, nothing against the column's spread about m_j unless
    the mean dwarfs it (a column of one value 1e16 beside features of 1
    rounds at the features' size, and is fitted as signal). Such a column
    (``|m_j|`` above ``_FAR_MEAN`` times the root weighted mean square of
    ``x_ij - m_j``, its gaps counting ``m_j^2``) is stored as ``x_ij - m_j``,
    with ``-m_j`` stored in the rows that hold no entry of it, and
    ``r_j = 0``: its products are those of dense rows centred first. The
    rows lacking it weigh less than ``1 / _FAR_MEAN^2`` of the weight
    (their mean square about m_j alone is their share times ``m_j^2``);
    a column that more rows of positive weight lack than hold (rows of
    little weight) stays as it is, and so do the far columns beyond those
    of fewest gaps whose gaps (rows of weight zero among them: the sums
    leave them out, but their labels read them) fit within X's entries, so
    that Y stores at most twice X's entries.
    X itself (no copy) where no column is far (``math.md`` section 7,
    "Sparse rows about their mean").
    """
    if not np.any(m):
        return X, m
    n, d = X.shape
    # The rows of positive weight (those the sums read: rows of weight zero
    # are as absent), and the count of their entries in each column.
    if sample_weight is None or _all_positive(sample_weight):
        n_rows, count = n, _column_counts(X.indices, d)
    else:
        positive = sample_weight > 0.0
        n_rows = int(np.count_nonzero(positive))
        count = _column_counts(X.indices[_row_values(X, positive)], d)
    # Stored in at least half those rows, and off zero: the columns that may be far.
    candidate = (2 * count >= n_rows) & (m != 0.0)
    if not np.any(candidate):
        return X, m
    w = np.ones(n) if sample_weight is None else sample_weight
    total = float(np.sum(w))
    # Each column over the power of two of its own |m_j| (exact; one scale
    # for all let a column 1e162 times smaller underflow to a spread and a
    # mean of 0, not far), summed by blocks of rows (temporaries of a
    # block's entries, not of X's).
    own = power_of_two_unit(np.abs(np.where(candidate, m, 1.0)))
    unit = np.where(candidate, m, 0.0) / own
    spread, held = np.zeros(d), np.zeros(d)
    per_row = max(1, X.nnz // max(n, 1))
    rows_per_block = max(1, _CHUNK_BYTES // (8 * per_row))
    with np.errstate(over="ignore", invalid="ignore"):
        for lo in range(0, n, rows_per_block):
            hi = min(n, lo + rows_per_block)
            a, b = X.indptr[lo], X.indptr[hi]
            at = X.indices[a:b]
            kept = candidate[at]
            at = at[kept]
            row_w = np.repeat(w[lo:hi], np.diff(X.indptr[lo : hi + 1]))[kept]
            gap = X.data[a:b][kept] / own[at] - unit[at]
            spread += np.bincount(at, weights=row_w * gap * gap, minlength=d)
            held += np.bincount(at, weights=row_w, minlength=d)
        spread += np.maximum(total - held, 0.0) * unit * unit
        far = candidate & (unit * unit * total > _FAR_MEAN**2 * spread)
    if not np.any(far):
        return X, m
    # Every row lacking a far column stores -m_j, those of weight zero too:
    # the far columns of fewest gaps are taken while the gaps stay within
    # X's entries (Y at most twice X).
    gaps = n - _column_counts(X.indices, d)
    columns = np.flatnonzero(far)
    columns = columns[np.argsort(gaps[columns], kind="stable")]
    left = columns[np.cumsum(gaps[columns]) > X.nnz]
    if left.size:
        far[left] = False
        shown = ", ".join(str(j) for j in np.sort(left)[:10]) + (", ..." if left.size > 10 else "")
        warn(
            f"X is sparse, and {left.size} of its columns (columns {shown}) have a mean far "
            "from their spread that the rows of weight zero lacking them are too many to "
            "store centred (within X's entries): their products round at the mean's "
            "magnitude, and may lose their spread. Leave the rows of weight zero out of X, "
            "or pass X dense.",
            UserWarning,
        )
    if not np.any(far):
        return X, m
    data = X.data.astype(np.float64)  # a copy, centred in float64 whatever X's dtype
    entries = far[X.indices]
    data[entries] -= m[X.indices[entries]]
    Y = sp.csr_matrix((data, X.indices, X.indptr), shape=X.shape)
    gaps_rows, gaps_columns = _gaps(X, np.flatnonzero(far))
    if gaps_rows.size:
        gaps = sp.csr_matrix((-m[gaps_columns], (gaps_rows, gaps_columns)), shape=X.shape)
        Y = (Y + gaps).tocsr()  # disjoint patterns: the values as they are
    return Y, np.where(far, 0.0, m)


def _gaps(X, columns):
    """``(rows, columns)`` of the entries of CSR X in ``columns`` it does not
    store, by blocks of rows (a dense mask of a block's rows by ``columns``)."""
    n = X.shape[0]
    position = np.full(X.shape[1], -1)
    position[columns] = np.arange(len(columns))
    step = max(1, _CHUNK_BYTES // max(len(columns), 1))
    found_rows, found_columns = [], []
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        at = position[X.indices[X.indptr[lo] : X.indptr[hi]]]
        kept = at >= 0
        rows = np.repeat(np.arange(hi - lo), np.diff(X.indptr[lo : hi + 1]))[kept]
        missing = np.ones((hi - lo, len(columns)), dtype=bool)
        missing[rows, at[kept]] = False
        r, c = np.nonzero(missing)
        found_rows.append(r + lo)
        found_columns.append(columns[c])
    return np.concatenate(found_rows), np.concatenate(found_columns)


# Below this share of ||m||^2, a sparse row's ||y - m||^2 from ||m||^2 less
# its stored columns' m_j^2 would lose more than about 1e-12 of its value.
_CANCELLED = 1e-4


def _sparse_centred_squares(Y, m):
    """``||y_i - m||^2`` of CSR rows without densifying them.

    The stored entries' ``(y_j - m_j)^2``, plus ``sum_j m_j^2`` over the
    row's other columns: ``||m||^2`` less the stored columns' share, a
    difference that loses digits only where the result is a small part of
    ``||m||^2`` (below ``_CANCELLED``); there it is summed over the other
    columns directly (a mask of the row's columns, in blocks of rows).
    """
    squares = m * m
    diff = Y.data - m[Y.indices]
    stored = _row_reduce(np.add, diff * diff, Y.indptr)
    held = _row_reduce(np.add, squares[Y.indices], Y.indptr)
    total = float(np.sum(squares))
    rest = total - held
    heavy = np.flatnonzero(stored + rest < _CANCELLED * total)
    d = Y.shape[1]
    step = max(1, _CHUNK_BYTES // max(d, 1))
    for lo in range(0, len(heavy), step):
        rows = heavy[lo : lo + step]
        block = Y[rows]
        other = np.ones((len(rows), d), dtype=bool)
        other[_row_values(block, np.arange(len(rows))), block.indices] = False
        rest[rows] = other @ squares
    return stored + rest


def centred_projection(rows, offset, V):
    """``(P, u)``: ``P = ((x - offset) / u) V`` (float64) of a dense or
    sparse block of rows, ``u`` the power of two of the block's largest
    centred ``|x_ij - offset_j|`` (exact; 1 for zeros), so that ``u P`` is
    ``(x - offset) V``.

    The block is centred before the product, in a dense float64 copy of it
    (sparse rows densified, for a caller whose output is dense:
    ``transform``'s): ``x V - offset V`` rounds at ``|x| |V|``, far above
    the result when a column is far from zero. It is centred at its own
    magnitude and divided after: divided first by the power of two of
    ``|x|`` and ``|offset|``, a constant column of 1e300 sent features of
    1e-20 beside it to subnormal numbers (``transform`` 3e-4 off) and
    features of 1e-100 to zero. Where ``x - offset`` passes float64's range
    the block is centred halved, ``x / 2 - offset / 2`` (finite), and
    ``u`` is twice that block's unit (the caller multiplies ``u`` back
    where its result holds it).
    """
    # A float64 copy of the block (never the caller's rows: centred in place).
    block = rows.toarray() if sp.issparse(rows) else np.array(rows, dtype=np.float64)
    block = block.astype(np.float64, copy=False)
    offset = np.asarray(offset, dtype=np.float64)
    with np.errstate(over="ignore"):
        block -= offset
    peak = largest_magnitude(block)
    halved = bool(np.isinf(peak))
    if halved:
        # Finite rows centred beyond float64 (inf): halved, the same numbers
        # over 2 but for entries below 2^-1021, far below such a row.
        block = np.ldexp(np.asarray(dense(rows), dtype=np.float64), -1)
        block -= np.ldexp(offset, -1)
        peak = largest_magnitude(block)
    unit = power_of_two_unit(peak)
    block /= unit
    return block @ np.asarray(V, dtype=np.float64), 2.0 * unit if halved else unit


def unit_storage(rows, offset):
    """``(Y, r)``, ``Y - 1 r^T = X - 1 offset^T``: a block of rows stored as
    :func:`unit_terms` forms their terms, for a caller that reads the terms'
    extent (:func:`unit_term_exponents`) before it forms them (:func:`unit_terms`
    with ``stored=True``), with one storage of the block.

    Sparse rows as float64 CSR, the columns whose mean is far from their
    spread over the block stored centred (:func:`_centred_storage`, ``r_j =
    0`` there); dense rows, which those functions centre, and the offset as
    given (float64).
    """
    offset = np.asarray(offset, dtype=np.float64)
    if not sp.issparse(rows):
        return rows, offset
    # (CSR as it is: SciPy's constructor copies a block of a larger matrix.)
    return _centred_storage(rows.tocsr().astype(np.float64, copy=False), offset)


def unit_term_exponents(rows, mean, scale):
    """Per row of a block, the power of two (frexp's exponent) of its extent over ``scale``.

    The extent is that of the terms :func:`unit_terms` forms: of the
    centred row ``max_j |x_ij - mean_j|`` for dense rows, and for sparse
    rows, whose terms are formed of their stored entries and of the mean
    apart, ``max(max_j |x_ij|, max_j |mean_j|)`` of the rows and mean
    stored by :func:`unit_storage` (of rows as given, a constant column of
    1e300 beside features of 1 would put the rows at 1e300 times the scale,
    where the features' squares underflow). Taken without dividing by the
    scale, which overflows for rows beyond float64's range there (the
    reconstruction errors of ``AttentionClustering.score`` group rows by it).
    """
    if sp.issparse(rows):
        extent = np.maximum(row_peaks(rows), float(np.max(np.abs(mean), initial=0.0)))
    else:
        # One float64 block: a copy of the rows (never the caller's), in
        # float64 whatever their dtype, centred in place.
        centred = np.array(rows, dtype=np.float64)
        with np.errstate(over="ignore"):
            centred -= mean
        extent = row_peaks(centred)
    return np.frexp(extent)[1] - np.frexp(float(scale))[1]


def unit_terms(rows, centers, offset, scale, stored=False):
    """``P = Y C^T`` and ``q_i = ||y_i||^2`` (float64) of the rows ``y = (x - offset) / scale``.

    The two per-row terms of every formula of the fitted mixture
    (:mod:`attention_cluster._model`) and of the reconstruction error, for a
    dense or sparse block of rows as given. The block is divided by the
    power of two ``2^e`` nearest ``scale`` (exact; after centring where
    ``scale`` is below 1, where the division multiplies, and before it
    above), so that nothing is squared at the data's magnitude: no overflow
    or underflow for finite rows of any magnitude near ``scale``, nor for
    rows far from zero about a spread near it. Dense rows are centred before the
    products; sparse rows are not densified (the columns whose mean is far
    from their spread stored centred, :func:`_centred_storage`; with
    ``stored``, the rows and offset are :func:`unit_storage`'s, stored so
    already, and are divided after): their ``q`` is the sum of
    ``(x_j - m_j)^2`` over the row's stored entries and of ``m_j^2`` over
    its other columns (:func:`_sparse_centred_squares`), with no
    ``||x||^2 - 2 <x, m> + ||m||^2`` to cancel far from the origin.
    """
    C = np.asarray(centers, dtype=np.float64)
    f, e = np.frexp(float(scale))
    offset = np.asarray(offset, dtype=np.float64)
    if sp.issparse(rows):
        # A float64 copy of the block, divided in place: stored and divided
        # in the order of the dense rows below, for the same reason (below a
        # scale of 1, divided first, a column of 1e20 at a scale of 1e-290
        # stored inf and its mean inf, and the row's terms were inf - inf);
        # unit_storage's rows, stored already, are divided after at any scale.
        Y = rows.tocsr()  # (CSR as it is: SciPy's constructor copies a block)
        if not np.any(offset):
            # About the origin no column is stored centred, and the order
            # does not matter: the terms are the stored entries' alone
            # (``(y - 0)^2``, the other columns adding zeros), of one copy of
            # the values divided by 2^e on the block's structure, squared in
            # place after the products. The copy of the indices, ldexp and
            # the gathers of a zero mean took three quarters of the squared
            # norms' time on TF-IDF rows, and each full-size temporary of a
            # block costs its page faults. (The products, summed from +0, are
            # never -0: less a zero offset's, the same numbers.)
            values = times_power_of_two(Y.data, -e, np.float64)
            P = np.asarray(_with_values(Y, values) @ C.T)
            with np.errstate(over="ignore", invalid="ignore"):
                np.multiply(values, values, out=values)
                q = _row_reduce(np.add, values, Y.indptr)
        else:
            Y = sp.csr_matrix(Y, dtype=np.float64, copy=True)
            if e > 0 and not stored:
                np.ldexp(Y.data, -e, out=Y.data)
                Y, m = _centred_storage(Y, np.ldexp(offset, -e))
            else:
                Y, m = (Y, offset) if stored else _centred_storage(Y, offset)
                np.ldexp(Y.data, -e, out=Y.data)
                m = np.ldexp(m, -e)
            P = np.asarray(Y @ C.T) - m @ C.T
            # Rows beyond about 1e154 times the scale square to inf, as the
            # dense rows' terms do.
            with np.errstate(over="ignore", invalid="ignore"):
                q = _sparse_centred_squares(Y, m)
        q = np.where(np.isnan(q), np.inf, q)
    else:
        # One float64 copy of the block, scaled and centred in place (the
        # same numbers as ldexp(x) - m: a power of two is exact). Below a
        # scale of 1 it is centred first: scaled first, rows far from zero
        # about a tight spread (1e20 at a scale of 1e-290) passed float64's
        # range, x 2^-e - m 2^-e = inf - inf, where their centred terms do
        # not; above it, scaled first, as rows near float64's top.
        Y = np.array(rows, dtype=np.float64)
        if e > 0:
            np.ldexp(Y, -e, out=Y)
            Y -= np.ldexp(offset, -e)
        else:
            Y -= offset
            np.ldexp(Y, -e, out=Y)
        P = Y @ C.T
        q = np.einsum("ij,ij->i", Y, Y)
    return P / f, q / (f * f)
