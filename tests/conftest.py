import contextlib
import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("default", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_SEED = os.environ.get("ATTENTION_CLUSTER_TEST_SEED", "0")
GLOBAL_SEED = int(np.random.SeedSequence().entropy % 2**31) if _SEED == "random" else int(_SEED)


def pytest_report_header(config):
    return f"attention_cluster global_random_seed={GLOBAL_SEED} (ATTENTION_CLUSTER_TEST_SEED=<int>|random)"


def pytest_addoption(parser):
    parser.addoption(
        "--seeded-only",
        action="store_true",
        help="run only the tests that take global_random_seed (a sweep of seeds: make test-seeds)",
    )


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--seeded-only"):
        return
    kept, dropped = [], []
    for item in items:
        seeded = "global_random_seed" in getattr(item, "fixturenames", ())
        (kept if seeded else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.fixture
def global_random_seed():
    """Seed for tests whose numbers must hold for any seed.

    Set ATTENTION_CLUSTER_TEST_SEED to an integer, or to "random", to run the
    suite under another seed.
    """
    return GLOBAL_SEED


@contextlib.contextmanager
def _local_cluster(n_workers):
    """A real distributed.LocalCluster of worker processes of one thread each, and its client."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield cluster, client


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two worker processes, and its client (one per module)."""
    with _local_cluster(2) as (_, client):
        yield client


@pytest.fixture
def fresh_cluster():
    """A new LocalCluster of one worker process, and its client, for one test."""
    with _local_cluster(1) as pair:
        yield pair


@pytest.fixture
def traced_peak():
    """``measure(fn)``: ``fn()``'s result and the peak of the memory traced while it ran, in bytes."""

    def measure(fn):
        tracemalloc.start()
        try:
            out = fn()
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    return measure
