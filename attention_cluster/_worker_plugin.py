"""The worker plugin of :func:`attention_cluster.warm_up` (imports ``distributed``).

Apart from ``_warm_up`` so that ``import attention_cluster`` does not import
``distributed``: a plugin must subclass :class:`distributed.WorkerPlugin`,
and workers unpickle it by reference to this module.
"""

import asyncio

from distributed import WorkerPlugin


class KernelWarmUp(WorkerPlugin):
    """Run ``load(n_features, n_clusters, dtype)`` on each worker.

    ``load`` is :func:`._warm_up.load_kernels`, which loads the kernels of a
    default fit; given by the caller (it pickles by reference, and workers
    import it when they unpickle the plugin), so that this module imports
    nothing of the package's. The scheduler keeps a registered plugin and
    sets it up on every worker present and on every worker that registers
    later. The loading runs in a thread, so that the worker's event loop
    goes on answering the scheduler meanwhile; a worker that joins later
    takes its first task once it is done.
    One plugin per data kind (its name), registered once (``idempotent``).
    """

    idempotent = True

    def __init__(self, load, n_features, n_clusters, dtype):
        self.load = load
        self.args = n_features, n_clusters, dtype
        self.name = f"attention_cluster-warm-up-{n_features}-{n_clusters}-{dtype}"

    async def setup(self, worker):
        await asyncio.to_thread(self.load, *self.args)
