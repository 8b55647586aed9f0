"""Cold start: the wait before the first result, and where Numba's compile goes.

Each figure is measured in fresh Python processes (the median of
``--repeats`` of them), Numba's on-disk cache pointed at a new empty
directory unless said otherwise:

- the import of ``attention_cluster``;
- the first default ``AttentionClustering`` fit with an empty cache
  (target: at most 3 s), then the first fit of a new process from that
  cache: at n = 20000 (d = 10, 2e5 numbers), where the passes run NumPy's
  forms of the kernels (``_passes.compiles``), and at n = 1e5 (1e6
  numbers), where they run Numba's;
- the cost of NumPy's forms once everything is loaded: the n = 20000 fit
  with them and forced onto Numba's kernels, in one process, interleaved;
- the first fit on float32 input, and with ``solver="psgd"``, empty cache;
- the first fit of ``SelfAttentionDynamics``, empty cache;
- the first Dask fit of the n = 1e5 data on a fresh
  ``distributed.LocalCluster`` (2 workers, one thread each, the kernels
  already in the cache) against a second fit
  on the same cluster, without a warm-up and after
  ``attention_cluster.warm_up(client)`` (whose own time is reported, with
  the cluster's start), interleaved;
- the compile time of each Numba kernel in the first default fit at n =
  1e5 (Numba's compile events, inclusive of the kernels each one calls).

It writes ``results/cold_start.json`` and the "Cold start" section of
``docs/performance.md`` (between its markers, the rest of the page left as
it is), with the load average of the machine before and after and the
versions of the libraries measured. Run
``python benchmarks/cold_start.py`` (``--quick``: one process per figure,
into ``--out``).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    DASK_LIBRARIES,
    ROOT,
    quick_cli,
    run_conditions,
    run_facts,
    save,
    section_markers,
    splice_section,
)

TARGET_S = 3.0
SECTION = "Cold start"
MARKERS = section_markers(SECTION, "cold_start.py")

DATA = (
    "from attention_cluster.datasets import make_mixture\n"
    "X = make_mixture(20000, n_features=10, n_clusters=3, noise=0.5, random_state=0)[0]\n"
)
# Data whose passes run Numba's kernels (1e6 numbers, see _passes.compiles).
LARGE = DATA.replace("20000", "100000")

SNIPPETS = {
    "default": "from attention_cluster import AttentionClustering\n"
    "AttentionClustering(3, random_state=0).fit(X)\n",
    "float32": "from attention_cluster import AttentionClustering\n"
    "AttentionClustering(3, random_state=0).fit(X.astype('float32'))\n",
    "psgd": "from attention_cluster import AttentionClustering\n"
    "AttentionClustering(3, solver='psgd', random_state=0).fit(X)\n",
    "dynamics": "from attention_cluster import SelfAttentionDynamics\n"
    "SelfAttentionDynamics().fit(X[:2000])\n",
}

# The fit of the snippet timed in a child process: import, data, first fit.
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import attention_cluster
t1 = time.perf_counter()
{data}
t2 = time.perf_counter()
{snippet}
t3 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, fit_s=t3 - t2)))
"""

DASK_CHILD = """
import json, time
from distributed import Client, LocalCluster, wait
import dask.array as da
import attention_cluster
from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_mixture
X = make_mixture(100000, n_features=10, n_clusters=3, noise=0.5, random_state=0)[0]
t = time.perf_counter()
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
    out = dict(cluster_s=time.perf_counter() - t)
    if {warm}:
        t = time.perf_counter()
        attention_cluster.warm_up(client)
        out["warm_up_s"] = time.perf_counter() - t
    Xd = da.from_array(X, chunks=25000).persist()
    wait(Xd)
    for key in ("first_s", "second_s"):
        t = time.perf_counter()
        AttentionClustering(3, random_state=0).fit(Xd)
        out[key] = time.perf_counter() - t
print(json.dumps(out))
"""
DASK_KEYS = ("cluster_s", "first_s", "second_s")

# Compile time of each dispatcher in the first default fit (Numba's events).
COMPILE_CHILD = """
import json, time
from numba.core import event
{data}
from attention_cluster import AttentionClustering
starts, totals = {{}}, {{}}
class Timer(event.Listener):
    def on_start(self, ev):
        starts[id(ev.data["dispatcher"]), str(ev.data["args"])] = time.perf_counter()
    def on_end(self, ev):
        key = id(ev.data["dispatcher"]), str(ev.data["args"])
        d = ev.data["dispatcher"]
        name = d.py_func.__module__.rsplit(".", 1)[-1] + "." + d.py_func.__name__
        totals.setdefault(name, []).append(time.perf_counter() - starts.pop(key))
event.register("numba:compile", Timer())
t = time.perf_counter()
AttentionClustering(3, random_state=0).fit(X)
fit_s = time.perf_counter() - t
print(json.dumps(dict(fit_s=fit_s, kernels={{k: [sum(v), len(v)] for k, v in totals.items()}})))
"""

# The n = 20000 fit on NumPy's forms of the kernels and forced onto Numba's,
# everything loaded, interleaved: seconds per fit, medians.
WARM_CHILD = """
import json, time
import numpy as np
from attention_cluster import AttentionClustering, _passes
{data}
default = _passes._COMPILE_MIN_SIZE
times = dict(numpy=[], numba=[])
for r in range(12):
    for name, size in (("numpy", default), ("numba", 0)):
        _passes._COMPILE_MIN_SIZE = size
        t = time.perf_counter()
        AttentionClustering(3, random_state=0).fit(X)
        if r:  # the first round loads the kernels
            times[name].append(time.perf_counter() - t)
print(json.dumps({{k: float(np.median(v)) for k, v in times.items()}}))
"""

# The kernels of the E step and of the exact risk (inclusive of the kernels
# they call): their shares are reported.
E_STEP_KERNEL = "_kernels._fused_e_step"
EXACT_KERNEL = "_kernels._fused_row_terms"


def _run(code, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _median(runs, key):
    return float(np.median([r[key] for r in runs]))


def measure(repeats):
    """Every figure, each the median over ``repeats`` fresh processes."""
    out = {"repeats": repeats}
    empty, cached, imports = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            first = _run(CHILD.format(data=DATA, snippet=SNIPPETS["default"]), cache)
            empty.append(first)
            cached.append(_run(CHILD.format(data=DATA, snippet=SNIPPETS["default"]), cache))
            imports.append(first["import_s"])
    out["import_s"] = float(np.median(imports))
    out["default_empty_s"] = _median(empty, "fit_s")
    out["default_cached_s"] = _median(cached, "fit_s")
    empty, cached = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            empty.append(_run(CHILD.format(data=LARGE, snippet=SNIPPETS["default"]), cache))
            cached.append(_run(CHILD.format(data=LARGE, snippet=SNIPPETS["default"]), cache))
    out["large_empty_s"] = _median(empty, "fit_s")
    out["large_cached_s"] = _median(cached, "fit_s")
    print(
        f"import {out['import_s']:.2f} s; first default fit {out['default_empty_s']:.2f} s "
        f"(empty cache), {out['default_cached_s']:.2f} s (from the cache); n = 1e5: "
        f"{out['large_empty_s']:.2f} s, {out['large_cached_s']:.2f} s",
        flush=True,
    )
    for name in ("float32", "psgd", "dynamics"):
        runs = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as cache:
                runs.append(_run(CHILD.format(data=DATA, snippet=SNIPPETS[name]), cache))
        out[f"{name}_empty_s"] = _median(runs, "fit_s")
        print(f"first {name} fit, empty cache: {out[f'{name}_empty_s']:.2f} s", flush=True)
    with tempfile.TemporaryDirectory() as cache:
        out["warm"] = _run(WARM_CHILD.format(data=DATA), cache)
        print(
            f"warm fits, n = 20000: NumPy's forms {1e3 * out['warm']['numpy']:.1f} ms, "
            f"Numba's kernels {1e3 * out['warm']['numba']:.1f} ms",
            flush=True,
        )
    with tempfile.TemporaryDirectory() as cache:
        out["compile"] = _run(COMPILE_CHILD.format(data=LARGE), cache)
        _run(CHILD.format(data=LARGE, snippet=SNIPPETS["default"]), cache)  # fill the cache
        try:
            dask, warmed = [], []
            for _ in range(repeats):  # interleaved, so that both see the same load
                dask.append(_run(DASK_CHILD.format(warm=False), cache))
                warmed.append(_run(DASK_CHILD.format(warm=True), cache))
            out["dask"] = {k: _median(dask, k) for k in DASK_KEYS}
            out["dask_warm_up"] = {k: _median(warmed, k) for k in DASK_KEYS + ("warm_up_s",)}
            for name, d in (("no warm-up", out["dask"]), ("warm_up", out["dask_warm_up"])):
                print(
                    f"Dask LocalCluster, {name}: cluster start {d['cluster_s']:.2f} s, "
                    + (f"warm_up {d['warm_up_s']:.2f} s, " if "warm_up_s" in d else "")
                    + f"first fit {d['first_s']:.2f} s, second {d['second_s']:.2f} s",
                    flush=True,
                )
        except subprocess.CalledProcessError as err:  # distributed not installed
            out["dask"] = {"error": err.stderr.strip().splitlines()[-1]}
    return out


def main(quick=False, out=None):
    load_before = os.getloadavg()
    payload = {"quick": quick, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    payload.update(measure(1 if quick else 3))
    payload.update(run_conditions(load_before, DASK_LIBRARIES))
    save("cold_start", payload, **({"directory": out} if out else {}))
    write_section(payload, out)
    return payload


def section(payload):
    """The "Cold start" section of the performance page, as lines."""
    p = payload
    kernels = sorted(p["compile"]["kernels"].items(), key=lambda kv: -kv[1][0])
    compiled = dict(kernels)
    e_step = compiled.get(E_STEP_KERNEL, [0.0])[0]
    exact = compiled.get(EXACT_KERNEL, [0.0])[0]
    met = p["default_empty_s"] <= TARGET_S
    lines = [
        f"## {SECTION}",
        "",
        f"Written by `python benchmarks/cold_start.py{' --quick' if p['quick'] else ''}` (run started "
        f"{p['started']}; results in `benchmarks/results/cold_start.json`). Each figure is the median "
        f"of {p['repeats']} fresh Python processes, Numba's cache (`NUMBA_CACHE_DIR`) a new empty "
        "directory unless said otherwise; the data: the paper's mixture, n = 20000, d = 10, K = 3, "
        "unless said otherwise." + run_facts(p),
        "",
        "| what | seconds |",
        "|---|---|",
        f"| `import attention_cluster` | {p['import_s']:.2f} |",
        f"| first default fit, empty cache | **{p['default_empty_s']:.2f}** |",
        f"| first default fit of a new process, from the cache | {p['default_cached_s']:.2f} |",
        f"| first default fit at n = 1e5, empty cache | {p['large_empty_s']:.2f} |",
        f"| first default fit at n = 1e5 of a new process, from the cache | "
        f"{p['large_cached_s']:.2f} |",
        f"| first fit on float32 input, empty cache | {p['float32_empty_s']:.2f} |",
        f'| first fit with `solver="psgd"`, empty cache | {p["psgd_empty_s"]:.2f} |',
        f"| first `SelfAttentionDynamics` fit (n = 2000), empty cache | {p['dynamics_empty_s']:.2f} |",
    ]
    dask = p["dask"]
    if "error" in dask:
        lines.append(f"| Dask `LocalCluster` | not measured: {dask['error']} |")
    lines += [
        "",
        f"Target: the first default fit with an empty cache in at most {TARGET_S:.0f} s: "
        f"**{'met' if met else 'not met'}** at n = 20000; at n = 1e5 it takes "
        f"{p['large_empty_s']:.1f} s.",
        "",
        "Data of fewer than 2^18 numbers (n d, or the non-zeros of a sparse matrix; "
        "n = 20000 at d = 10 has 2e5) runs NumPy's forms of the kernels, which need no "
        "compile; larger data runs Numba's, which a first fit with an empty cache compiles. "
        "Once everything is loaded, NumPy's forms cost more per fit: the n = 20000 fit takes "
        f"{1e3 * p['warm']['numpy']:.1f} ms with them against {1e3 * p['warm']['numba']:.1f} ms "
        f"on Numba's kernels ({p['warm']['numpy'] / p['warm']['numba']:.1f}x; medians of 11 "
        "interleaved fits in one process).",
        "",
    ]
    if "error" not in dask:
        warm = p["dask_warm_up"]
        lines += [
            "The first Dask fits of the n = 1e5 data (4 blocks, Numba's kernels) on a fresh "
            "`distributed.LocalCluster` (2 worker processes of one "
            "thread, the kernels in Numba's cache; the data persisted on the workers), without a "
            "warm-up and after `attention_cluster.warm_up(client)` right after the cluster's start "
            "(the workers import the package and load the kernels, and so does the client; "
            "[Scaling out](scaling_out.md)):",
            "",
            "| | cluster start | `warm_up(client)` | first fit | second fit | first / second |",
            "|---|---|---|---|---|---|",
        ]
        for name, d in (("no warm-up", dask), ("`warm_up(client)` first", warm)):
            lines.append(
                f"| {name} | {d['cluster_s']:.2f} | "
                + (f"{d['warm_up_s']:.2f}" if "warm_up_s" in d else "")
                + f" | {d['first_s']:.2f} | {d['second_s']:.2f} | "
                f"{d['first_s'] / d['second_s']:.1f}x |"
            )
        ratio = warm["first_s"] / warm["second_s"]
        lines += [
            "",
            "Target: after the warm-up, the first Dask fit at most twice the second: "
            f"**{'met' if ratio <= 2 else 'not met'}** ({ratio:.1f}x; without the warm-up "
            f"{dask['first_s'] / dask['second_s']:.1f}x, the workers importing the package and "
            "loading the kernels during the first fit).",
            "",
        ]
    lines += [
        "Where the compile goes in the first default fit at n = 1e5 "
        f"({p['compile']['fit_s']:.2f} s in all; "
        "Numba's compile events, each kernel's time including the kernels it calls, so the column "
        f"does not add up; the E step's kernel `{E_STEP_KERNEL}` takes {e_step:.2f} s, the exact "
        f"risk's `{EXACT_KERNEL}` {exact:.2f} s, both with the kernels they call):",
        "",
        "| kernel | compile (s) | signatures |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {t:.2f} | {count} |" for name, (t, count) in kernels]
    lines += [""]
    return lines


def write_section(payload, out=None):
    """Put the section in the performance page, the rest of the page left as it is."""
    page = (Path(out) if out else ROOT / "docs") / "performance.md"
    splice_section(page, MARKERS, section(payload))


if __name__ == "__main__":
    quick_cli(__doc__, main)
