"""warm_up: the kernels of a fit loaded beforehand, here and on a real LocalCluster's workers.

A kernel loaded (or compiled) by Numba has the signature of its call in its
dispatcher's ``signatures``: after the warm-up, a fit of such data adds
none, in the process that warmed up and on every worker, including one
that joined the cluster after the warm-up.
"""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_cluster import AttentionClustering, warm_up
from attention_cluster.datasets import make_mixture

ROOT = Path(__file__).resolve().parent.parent


def _signatures():
    """The signatures each kernel of ``_kernels`` has loaded in this process."""
    from numba.core.registry import CPUDispatcher

    from attention_cluster import _kernels

    return {
        name: sorted(map(str, f.signatures))
        for name, f in vars(_kernels).items()
        if isinstance(f, CPUDispatcher) and f.signatures
    }


@pytest.mark.parametrize(
    "value, match",
    [
        (dict(dtype="int64"), "dtype must be"),
        (dict(n_clusters=0), "n_clusters must be"),
        (dict(n_features=2.5), "n_features must be"),
        (dict(dtype=None), "dtype must be"),
        (dict(n_features=np.nan), "n_features must be"),
        (dict(n_clusters=np.inf), "n_clusters must be"),
    ],
    ids=["dtype", "n_clusters", "n_features", "dtype-none", "nan-features", "inf-clusters"],
)
def test_invalid_arguments_raise_before_any_work(value, match):
    with pytest.raises(ValueError, match=match):
        warm_up(**value)


def test_a_count_beyond_float64_is_still_a_count():
    # Counts are checked finite for floats only: an int needs no conversion,
    # and 10**400 made the finiteness test raise a TypeError.
    with pytest.raises(ValueError, match="n_clusters must be an integer >= 1"):
        warm_up(n_clusters=-(10**400))


def test_the_warm_up_warns_of_nothing():
    # Its throwaway fit of 2 features for 50 clusters warned that a cluster
    # received fewer than 0.2% of the points, at the caller's line, of data
    # the caller never gave (an error under -W error).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warm_up(n_features=2, n_clusters=50)


@pytest.mark.parametrize("client", ["x", 1])
def test_what_is_not_a_client_raises_before_any_work(client):
    with pytest.raises(TypeError, match="client must be a distributed.Client or None"):
        warm_up(client)


def test_a_fit_after_the_warm_up_loads_no_kernel():
    # A fresh process (this one has run other fits): after warm_up, float32
    # fits of another size and seed with the same width and clusters, in
    # memory and of a Dask array, large enough to run Numba's kernels
    # (_passes.compiles), load no kernel; the Dask fit imports no
    # module of Dask's DataFrames (a third of a second) either.
    code = (
        "import json, sys\n"
        "import dask, dask.array as da\n"
        "from attention_cluster import AttentionClustering, warm_up\n"
        "from attention_cluster.datasets import make_mixture\n"
        + inspect.getsource(_signatures)
        + "warm_up(n_features=3, n_clusters=2, dtype='float32')\n"
        "before = _signatures()\n"
        "X = make_mixture(100000, 3, 2, noise=0.4, random_state=1)[0].astype('float32')\n"
        "AttentionClustering(2, random_state=1).fit(X).predict(X)\n"
        "with dask.config.set(scheduler='sync'):\n"
        "    AttentionClustering(2, random_state=1).fit(da.from_array(X, chunks=25000))\n"
        "print(json.dumps([before, _signatures(), 'dask.dataframe' in sys.modules]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    before, after, dataframes = json.loads(out.strip().splitlines()[-1])
    assert any("float32" in s for sigs in before.values() for s in sigs)
    assert after == before
    assert not dataframes


def test_workers_present_and_joining_later_warm_up(fresh_cluster):
    # A real LocalCluster of one worker: warm_up() takes the default client
    # and registers its plugin with the scheduler. A worker started
    # afterwards has the kernels before its first task, and a Dask fit on
    # both then loads no kernel on either, nor in this process. (Which
    # signatures a process lists depends on whether it compiled the kernels
    # or loaded them from the cache, so each process is compared with
    # itself.)
    da = pytest.importorskip("dask.array")
    cluster, client = fresh_cluster
    warm_up(n_features=4, n_clusters=2)
    plugins = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    assert "attention_cluster-warm-up-4-2-float64" in plugins
    old = set(client.nthreads())
    cluster.scale(2)
    client.wait_for_workers(2)
    (new,) = set(client.nthreads()) - old
    # A task reaches a worker once its plugins are set up.
    joined = client.submit(_signatures, workers=[new], pure=False).result()
    assert {"_fused_e_step", "_fused_row_terms", "head_totals", "argmax_rows"} <= set(joined)
    before, mine = client.run(_signatures), _signatures()
    # Data large enough to run Numba's kernels (_passes.compiles).
    X = make_mixture(70000, 4, 2, noise=0.4, random_state=0)[0]
    model = AttentionClustering(2, random_state=0).fit(da.from_array(X, chunks=(17500, -1)))
    model.labels_.compute()
    assert client.run(_signatures) == before
    assert _signatures() == mine
    assert np.isfinite(model.cluster_centers_).all()
