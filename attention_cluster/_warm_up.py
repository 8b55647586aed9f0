"""Warm-up: the Numba kernels of a fit loaded before the first fit needs them.

Numba compiles a kernel at its first call, or loads it from its on-disk
cache: the first fit of a process pays for it, and on a Dask cluster every
worker process pays again at its first task (after importing the package),
while the client's own first Dask fit pays for the kernels of the subsample
fits it runs in memory. :func:`warm_up` moves that wait to a moment the user
chooses, for this process and for the workers of a cluster, present and
future (a :class:`distributed.WorkerPlugin`, ``_worker_plugin``).
"""

import numpy as np

from ._clustering import AttentionClustering
from ._passes import running_client
from ._validation import InvalidParameterError, check_count, deferred_warnings
from .datasets import make_mixture

__all__ = ["warm_up"]

# Rows of the warm-up fit (at least 20 per cluster): few enough that its
# arithmetic costs nothing next to the kernels' loading.
_ROWS = 256


def load_kernels(n_features=10, n_clusters=3, dtype="float64"):
    """Load (or compile) in this process the kernels of a default fit of such data.

    One default :class:`~attention_cluster.AttentionClustering` fit of a
    small mixture of that width, number of clusters and dtype, its passes
    set to run Numba's kernels (data that small would run NumPy's forms of
    them, :func:`~attention_cluster._passes.compiles`), and for float32 the
    same fit in float64, the dtype of the subsamples of larger data in
    memory: the kernels and their signatures are those of a fit of any size
    with those three that runs Numba's kernels (the passes over a Dask
    array's blocks run the same kernels on the workers, and its subsamples,
    in X's dtype, the first fit's). The fits are thrown away.
    """
    n_samples = max(_ROWS, 20 * n_clusters)
    X = make_mixture(
        n_samples, n_features, n_clusters, noise=0.3, centroids="random", random_state=0
    )[0]
    # The subsamples of larger data in memory are float64 copies, whatever
    # X's dtype (a Dask array's keep its dtype: the first fit's kernels).
    for kind in dict.fromkeys([dtype, "float64"]):
        model = AttentionClustering(n_clusters, random_state=0)
        rows = model._rows(X.astype(kind), reset=True)
        rows.compiled = True
        # The throwaway fits' warnings (of few features for many clusters,
        # say) are the package's own data's: held, and dropped.
        with deferred_warnings():
            model._fit_rows(rows)  # closes the rows


def warm_up(client=None, *, n_features=10, n_clusters=3, dtype="float64"):
    """Load the package's Numba kernels now, here and on a Dask cluster's workers.

    The first fit of a process waits for Numba to compile its kernels, or
    to load them from its on-disk cache when an earlier process compiled
    them; on a ``distributed`` cluster each worker process waits at its
    first task, after importing the package (see the performance page,
    "Cold start"). ``warm_up`` runs that wait at a moment of your choosing:
    in this process, and, given a client, on each worker of its cluster,
    through a :class:`distributed.WorkerPlugin` registered with the
    scheduler, so that workers that join later, or replace a worker that
    died, load the kernels when they start, before their first task.

    The kernels are those of a default fit of data of ``n_features``
    columns, ``n_clusters`` clusters and ``dtype``: other widths and numbers
    of clusters use the same kernels, except where they switch a pass to
    matrix products (wide data, many clusters), and float32 data use
    kernels of their own.

    Parameters
    ----------
    client : distributed.Client or None, default=None
        The cluster whose workers warm up; None: the default client when
        ``distributed`` is imported and one is running, else this process
        only.
    n_features : int, default=10
        Width of the data the fits will see. The warm-up fits a dense
        mixture of at least 256 rows of that width (2 KiB a feature in
        float64).
    n_clusters : int, default=3
        Number of clusters the fits will ask for.
    dtype : {"float64", "float32"}, default="float64"
        The data's dtype.

    Examples
    --------
    Before the first fit on a cluster (here a ``LocalCluster``)::

        from distributed import Client
        import attention_cluster

        client = Client(n_workers=2, threads_per_worker=1)
        attention_cluster.warm_up(client)
        # the cluster's first fit now runs as fast as its second

    Without a client, this process alone:

    >>> from attention_cluster import warm_up
    >>> warm_up(n_features=5, n_clusters=2)
    """
    n_features = check_count(n_features, "n_features")
    n_clusters = check_count(n_clusters, "n_clusters")
    try:
        known = dtype is not None and np.dtype(dtype) in (np.float32, np.float64)
    except TypeError:  # NumPy's refusal of a name it does not know
        known = False
    if not known:
        raise InvalidParameterError(f'dtype must be "float64" or "float32", got {dtype!r}.')
    dtype = np.dtype(dtype).name
    if client is not None and not callable(getattr(client, "register_plugin", None)):
        raise InvalidParameterError(
            f"client must be a distributed.Client or None, got {type(client).__name__}."
        )
    if client is None:
        client = running_client()
    if client is not None:
        from ._worker_plugin import KernelWarmUp

        client.register_plugin(KernelWarmUp(load_kernels, n_features, n_clusters, dtype))
    load_kernels(n_features, n_clusters, dtype)
