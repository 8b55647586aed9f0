"""Out of core: fit a float32 array on disk through Dask, against loading it and dask-ml.

Writes the paper's mixture (d=10, K=2, sigma=0.5; ``--rows`` rows, 2e7 by
default, 800 MB of float32; ``--quick``: 2e5 rows) to a ``.npy`` file in a
temporary directory (deleted at the end), opens it lazily as a Dask array
whose blocks are read from the file by the task that uses them, and on a
``distributed.LocalCluster`` of 2 worker processes with 1 thread each (the
machine has 2 cores) measures, side by side in interleaved rounds after
Numba's compile (medians):

- ``AttentionClustering(solver="full")`` on the Dask array: its passes (each
  one Dask computation, counted and timed under ``verbose``, in every round)
  and the client process's peak resident memory during a first fit (sampled
  every 5 ms; ``ru_maxrss`` of the whole run also counts writing the file
  through a memory map);
- one read of the array (``X.sum(axis=0)``, one pass through the same
  scheduler): the time per pass is compared with it;
- loading the array into the client's memory (``np.load``) and fitting it
  there (``DenseRows`` on the machine's threads);
- ``dask_ml.cluster.KMeans(n_clusters=2)`` on the same Dask array, in the
  first ``--kmeans-rounds`` rounds only (all by default; 0: not run, for
  sizes where its time does not fit in the session).

Distances to the centroids (math.md section 5; KMeans' centres normalised)
are compared with the class-means floor of the whole array. The file is
written by this process and is then in the operating system's page cache
(the machine's memory is larger than the file): a "read" is a read of the
page cache, not of the disk. Each size's results (with the load average
before and after and the versions of the libraries measured) are kept under
its number of rows in benchmarks/results/out_of_core.json (a run replaces
only its own size's), then docs/scaling_out.md (with
benchmarks/results/streaming.json) and its figure are written with every
size measured.

With ``--source zarr`` the rows are written to a Zarr store (chunks of
``BLOCK_ROWS`` rows, the docs' own example source) and read by
``da.from_zarr``; on the same cluster, in interleaved rounds, the Dask fit
(its reads of X counted from the verbose pass log, which numbers every
pass that reads X) is compared with opening the store, loading it into the
client's memory and fitting there; the client's peak resident memory is
sampled during a first fit, and the load average (``os.getloadavg``) is
recorded before and after, with the versions (zarr's among them). The
results go under ``zarr`` in the same JSON, and the page gets a section of
their own.

    python benchmarks/out_of_core.py [--quick] [--rows N] [--rounds R] [--kmeans-rounds R]
    python benchmarks/out_of_core.py --source zarr [--quick] [--rows N] [--rounds R]
"""

import contextlib
import io
import json
import os
import resource
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import psutil
from _common import DASK_LIBRARIES, RESULTS, ROOT, quick_cli, run_conditions, save, timed, unit_rows

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_centroids, make_mixture
from attention_cluster.metrics import centroid_distance

D, K, NOISE = 10, 2, 0.5
WRITE_ROWS = 1_000_000
BLOCK_ROWS = 1_000_000


def write(path, n, seed=0):
    """Write the mixture to ``path`` block by block; return (centroids, floor)."""
    C = make_centroids(K, D, random_state=seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, D))
    sums, counts = np.zeros((K, D)), np.zeros(K)
    for i, lo in enumerate(range(0, n, WRITE_ROWS)):
        hi = min(lo + WRITE_ROWS, n)
        X, y, _ = make_mixture(hi - lo, D, K, noise=NOISE, centroids=C, random_state=seed + 1 + i)
        out[lo:hi] = X
        for k in range(K):
            sums[k] += X[y == k].sum(axis=0)
            counts[k] += np.sum(y == k)
    out.flush()
    del out
    return C, centroid_distance(unit_rows(sums / counts[:, None]), C)


def read_rows(path, lo, hi):
    """Rows lo:hi of the .npy file, read by the task that needs them."""
    return np.array(np.load(path, mmap_mode="r")[lo:hi])


def lazy_array(path, n):
    import dask
    import dask.array as da

    blocks = [
        da.from_delayed(
            dask.delayed(read_rows)(path, lo, min(lo + BLOCK_ROWS, n)),
            shape=(min(lo + BLOCK_ROWS, n) - lo, D),
            dtype=np.float32,
        )
        for lo in range(0, n, BLOCK_ROWS)
    ]
    return da.concatenate(blocks)


class PeakRSS:
    """Peak resident memory of this process while the block runs (sampled)."""

    def __enter__(self):
        self.peak = psutil.Process().memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        proc = psutil.Process()
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def fit_dask(X, reads=False):
    """The Dask fit, with its verbose lines captured: (model, pass times), and
    with ``reads`` the names of the passes that read X (numbered "read N of X")."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        model = AttentionClustering(K, solver="full", random_state=0, verbose=1).fit(X)
    lines = [line for line in buffer.getvalue().splitlines() if "Dask pass" in line]
    passes = [float(line.rsplit(":", 1)[1].split()[0]) for line in lines]
    if reads:
        return (
            model,
            passes,
            [line.split("(", 1)[1].rsplit(")", 1)[0] for line in lines if " of X " in line],
        )
    return model, passes


def _save(payload, out, keep):
    """Print ``payload``, ``keep`` it in results/out_of_core.json (the other
    results stay), write the page; returns ``payload``."""
    print({k: v for k, v in payload.items() if k not in ("times", "pass_s")}, flush=True)
    directory = Path(out) if out else RESULTS
    saved = directory / "out_of_core.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    keep(results)
    save("out_of_core", results, directory)
    from _scaling_page import write_page

    write_page(directory, Path(out) if out else ROOT / "docs")
    return payload


def _setting(quick, n, rounds):
    """The payload's description of the data and the run."""
    return {
        "quick": quick,
        "n": n,
        "d": D,
        "K": K,
        "noise": NOISE,
        "block_rows": BLOCK_ROWS,
        "gigabytes": n * D * 4 / 1e9,
        "rounds": rounds,
    }


def write_zarr(path, n, seed=0):
    """Write the mixture to a Zarr store at ``path`` in chunks of BLOCK_ROWS rows."""
    import zarr

    C = make_centroids(K, D, random_state=seed)
    store = zarr.create_array(path, shape=(n, D), chunks=(BLOCK_ROWS, D), dtype="f4")
    for i, lo in enumerate(range(0, n, WRITE_ROWS)):
        hi = min(lo + WRITE_ROWS, n)
        X, _, _ = make_mixture(hi - lo, D, K, noise=NOISE, centroids=C, random_state=seed + 1 + i)
        store[lo:hi] = X
    return C


def main_zarr(quick, out, n, rounds):
    """The Zarr case: reads of X, time against loading and fitting in memory, client peak."""
    import dask.array as da
    import distributed
    import zarr

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="attention_cluster_zarr_"))
    try:
        path = str(tmp / "mixture.zarr")
        seconds_write, C = timed(lambda: write_zarr(path, n))
        print(f"wrote {n} x {D} float32 to Zarr in {seconds_write:.1f} s", flush=True)
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            distributed.Client(cluster),
        ):
            X = da.from_zarr(path)
            small = X[: min(n, 2 * BLOCK_ROWS)]
            fit_dask(small)  # compile on the workers and in the client
            AttentionClustering(K, solver="full", random_state=0).fit(small.compute())
            memory_before = psutil.Process().memory_info().rss
            with PeakRSS() as rss:
                model, passes, reads = fit_dask(X, reads=True)
            print(f"first dask fit: reads of X {reads}, peak {rss.peak / 1e9:.2f} GB", flush=True)
            candidates = {
                "dask fit": lambda: fit_dask(X, reads=True),
                "load and fit": lambda: AttentionClustering(K, solver="full", random_state=0).fit(
                    zarr.open_array(path, mode="r")[:]
                ),
            }
            times = {name: [] for name in candidates}
            results = {}
            for r in range(rounds):
                for name, fn in candidates.items():
                    seconds, results[name] = timed(fn)
                    times[name].append(seconds)
                    print(f"round {r} {name}: {seconds:.1f} s", flush=True)
        seconds = {name: float(np.median(t)) for name, t in times.items()}
        in_memory = results["load and fit"]
        payload = {
            **_setting(quick, n, rounds),
            "write_s": seconds_write,
            "seconds": seconds,
            "times": times,
            "ratio": seconds["dask fit"] / seconds["load and fit"],
            "reads": reads,
            "passes": len(passes),
            "pass_s": passes,
            "client_rss_before": memory_before,
            "client_rss_peak": rss.peak,
            "distance": {
                "dask fit": centroid_distance(model.cluster_centers_, C),
                "load and fit": centroid_distance(in_memory.cluster_centers_, C),
            },
            "same_centres_max_abs": float(
                np.max(np.abs(model.cluster_centers_ - in_memory.cluster_centers_))
            ),
            **run_conditions(load_before, {**DASK_LIBRARIES, "zarr": "zarr"}),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def keep(results):
        results["zarr"] = payload

    return _save(payload, out, keep)


def main(quick=False, out=None, rows=None, rounds=None, kmeans_rounds=None, source=None):
    n = int(rows) if rows else (200_000 if quick else 20_000_000)
    rounds = rounds or (2 if quick else 3)
    if source == "zarr":
        return main_zarr(quick, out, n, rounds)
    import distributed
    from dask_ml.cluster import KMeans

    load_before = os.getloadavg()
    kmeans_rounds = rounds if kmeans_rounds is None else min(kmeans_rounds, rounds)
    tmp = Path(tempfile.mkdtemp(prefix="attention_cluster_ooc_"))
    try:
        path = str(tmp / "mixture.npy")
        seconds_write, (C, floor) = timed(lambda: write(path, n))
        print(
            f"wrote {n} x {D} float32 ({n * D * 4 / 1e9:.2f} GB) in {seconds_write:.1f} s",
            flush=True,
        )
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            distributed.Client(cluster),
        ):
            X = lazy_array(path, n)
            small = lazy_array(path, min(n, 2 * BLOCK_ROWS))
            fit_dask(small)  # compile on the workers and in the client
            AttentionClustering(K, solver="full", random_state=0).fit(small.compute())
            if kmeans_rounds:
                # dask-ml's first fit compiles its Numba kernel on the workers.
                KMeans(n_clusters=K, random_state=0).fit(small)
            memory_before = psutil.Process().memory_info().rss
            with PeakRSS() as rss:
                model, passes, reads = fit_dask(X, reads=True)
            print(
                f"first dask fit: {len(passes)} passes, reads of X {reads}, "
                f"peak {rss.peak / 1e9:.2f} GB",
                flush=True,
            )
            maxrss_after_dask = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            candidates = {
                "read once": lambda: X.sum(axis=0).compute(),
                "dask fit": lambda: fit_dask(X),
                "load and fit": lambda: AttentionClustering(K, solver="full", random_state=0).fit(
                    np.load(path)
                ),
                "dask-ml KMeans": lambda: KMeans(n_clusters=K, random_state=0).fit(X),
            }
            times = {name: [] for name in candidates}
            results, round_passes = {}, []
            for r in range(rounds):
                for name, fn in candidates.items():
                    if name == "dask-ml KMeans" and r >= kmeans_rounds:
                        continue
                    seconds, results[name] = timed(fn)
                    times[name].append(seconds)
                    if name == "dask fit":
                        round_passes.append(results[name][1])
                    print(f"round {r} {name}: {seconds:.1f} s", flush=True)
            times = {name: t for name, t in times.items() if t}
            seconds = {name: float(np.median(t)) for name, t in times.items()}
        model = results["dask fit"][0]
        in_memory = results["load and fit"]
        distance = {
            "dask fit": centroid_distance(model.cluster_centers_, C),
            "load and fit": centroid_distance(in_memory.cluster_centers_, C),
        }
        kmeans = results.get("dask-ml KMeans")
        if kmeans is not None:
            distance["dask-ml KMeans"] = centroid_distance(
                unit_rows(np.asarray(kmeans.cluster_centers_)), C
            )
        payload = {
            **_setting(quick, n, rounds),
            "kmeans_rounds": kmeans_rounds,
            "kmeans_warmed": bool(kmeans_rounds),
            "write_s": seconds_write,
            "seconds": seconds,
            "times": times,
            "passes": len(passes),
            "reads": reads,
            "pass_s": passes,
            "round_pass_s": round_passes,
            "client_rss_before": memory_before,
            "client_rss_peak": rss.peak,
            "client_maxrss_after_dask_fit": maxrss_after_dask,
            "floor": floor,
            "distance": distance,
            "same_centres_max_abs": float(
                np.max(np.abs(model.cluster_centers_ - in_memory.cluster_centers_))
            ),
            "kmeans_n_iter": None if kmeans is None else int(kmeans.n_iter_),
            **run_conditions(
                load_before, {**DASK_LIBRARIES, **({"dask-ml": "dask_ml"} if kmeans_rounds else {})}
            ),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def keep(results):
        runs = results.get("runs", {})
        runs[str(n)] = payload
        results["runs"] = dict(sorted(runs.items(), key=lambda r: int(r[0])))

    return _save(payload, out, keep)


if __name__ == "__main__":
    quick_cli(
        __doc__,
        main,
        rows=dict(type=float, help="rows of the array (default 2e7; 2e5 with --quick)"),
        rounds=dict(type=int, help="interleaved rounds (default 3; 2 with --quick)"),
        kmeans_rounds=dict(type=int, help="rounds that also time dask-ml KMeans (0: none)"),
        source=dict(choices=["npy", "zarr"], help="npy (default) or the Zarr case"),
    )
