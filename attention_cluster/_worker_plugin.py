"""The worker plugin of :func:`attention_cluster.warm_up` (imports ``distributed``).

Apart from ``_warm_up`` so that ``import attention_cluster`` does not import
``distributed``: a plugin must subclass :class:`distributed.WorkerPlugin`,
and workers unpickle it by reference to this module.
"""

import asyncio

from distributed import WorkerPlugin

from ._warm_up import load_kernels


class KernelWarmUp(WorkerPlugin):
    """Load the kernels of a default fit (:func:`._warm_up.load_kernels`) on each worker.

    The scheduler keeps a registered plugin and sets it up on every worker
    present and on every worker that registers later. The loading runs in
    a thread, so that the worker's event loop goes on answering the
    scheduler meanwhile; a worker that joins later takes its first task
    once it is done.
    One plugin per data kind (its name), registered once (``idempotent``).
    """

    idempotent = True

    def __init__(self, n_features, n_clusters, dtype):
        self.args = n_features, n_clusters, dtype
        self.name = f"attention_cluster-warm-up-{n_features}-{n_clusters}-{dtype}"

    async def setup(self, worker):
        await asyncio.to_thread(load_kernels, *self.args)
