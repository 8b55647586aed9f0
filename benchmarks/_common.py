"""Shared helpers of the benchmark scripts: side-by-side timing and output."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]


def timed(fn):
    """Run ``fn()`` once; return (seconds, result)."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def side_by_side(candidates, repeats=7):
    """Median wall time of each callable, interleaved round by round.

    The machine is shared and noisy: interleaving the candidates in every
    round exposes them to the same load, so their ratio is meaningful even
    when absolute times drift. Each callable is run once first (warm-up).
    """
    for fn in candidates.values():
        fn()
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            times[name].append(timed(fn)[0])
    return {name: float(np.median(t)) for name, t in times.items()}


def cold_start_times(snippet):
    """Import time and first-call time of ``snippet`` in a fresh process.

    Numba's on-disk cache is pointed at an empty directory, so the first
    call includes the full compile. Returns a dict of seconds.
    """
    code = (
        "import time; t0 = time.perf_counter()\n"
        "import attention_cluster\n"
        "t1 = time.perf_counter()\n"
        f"{snippet}\n"
        "t2 = time.perf_counter()\n"
        "print(t1 - t0, t2 - t1)\n"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
    return {"import_s": float(out[0]), "first_call_s": float(out[1])}


def save(name, payload):
    """Write ``results/<name>.json`` and return its path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path
