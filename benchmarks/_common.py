"""Shared helpers of the benchmark scripts: side-by-side timing and output."""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from attention_cluster import AttentionClustering
from attention_cluster._passes import DenseRows

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]


def timed(fn):
    """Run ``fn()`` once; return (seconds, result)."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def one_thread(fn, *args):
    """``fn(*args)`` with OpenMP and BLAS limited to one thread, as
    AttentionClustering's kernels run: on a shared machine KMeans' default
    threads can be the slower (a thread waits for a descheduled one)."""
    with threadpool_limits(limits=1):
        return fn(*args)


def unit_rows(A):
    """Rows of A scaled to unit norm (zero rows left as they are)."""
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(norms > 0, norms, 1.0)


def verdict(ok):
    """A target's cell in a page's table: "yes", or a bold "no"."""
    return "yes" if ok else "**no**"


def mixture_limits(n, d, K, noise, n_draws=200_000):
    """``(efficient, floor)`` of :func:`attention_cluster.metrics.information_limit`
    for the paper's mixture (orthogonal unit centroids, equal weights) at n
    points: the expected distance of an efficient estimator and of the class
    means (math.md section 7, "The information limit"). Both are invariant
    to a rotation of the centroids, so they are taken at the first K unit
    vectors."""
    from attention_cluster.metrics import information_limit

    return information_limit(np.eye(d)[:K], noise, n, n_draws=n_draws)


# Most interleaved rounds that side_by_side adds to reach its ``seconds``.
MAX_ROUNDS = 101


def side_by_side(candidates, repeats=7, warmup=True, seconds=0.0):
    """Median wall time of each callable, interleaved round by round.

    The machine is shared and noisy: interleaving the candidates in every
    round exposes them to the same load, so their ratio is meaningful even
    when absolute times drift. Each callable is run once first (warm-up)
    unless ``warmup`` is False, for callers that have just run them. At
    least ``repeats`` rounds, and more (up to ``MAX_ROUNDS``) until the rounds add up
    to about ``seconds``, as the warm-up round's time predicts: a fit of a
    few milliseconds gets enough rounds for a stable median.
    """
    rounds = repeats
    if warmup:
        start = time.perf_counter()
        for fn in candidates.values():
            fn()
        per_round = time.perf_counter() - start
        if per_round > 0:
            rounds = max(repeats, min(MAX_ROUNDS, math.ceil(seconds / per_round)))
    times = {name: [] for name in candidates}
    for _ in range(rounds):
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


def peak_memory(fn):
    """Run ``fn()`` under tracemalloc; return (peak bytes allocated, result).

    The peak is counted from the memory traced when ``fn`` starts, so
    arrays that already exist (the data) are not included. tracemalloc sees
    the allocations that go through Python's and NumPy's allocators; see
    :func:`numba_allocations_traced` for Numba's.
    """
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return max(peak - base, 0), out


def numba_allocations_traced(n_bytes=8_000_000):
    """Whether an array allocated inside an ``@njit`` function shows in tracemalloc.

    Numba's runtime (NRT) allocates arrays itself rather than through
    NumPy, so the benchmark checks whether tracemalloc sees them instead of
    assuming it either way.
    """
    import numba

    @numba.njit
    def scratch(n):
        return np.ones(n).sum()

    scratch(1)
    peak, _ = peak_memory(lambda: scratch(n_bytes // 8))
    return bool(peak >= n_bytes // 2)


def loglog_slope(sizes, values):
    """Least-squares slope of log(values) against log(sizes); None if under 2 points."""
    x = np.log(np.asarray(sizes, dtype=float))
    y = np.log(np.asarray(values, dtype=float))
    if x.size < 2 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def map_runs(fn, tasks, workers):
    """``[fn(*t) for t in tasks]``, on ``workers`` processes when above 1.

    For independent runs whose times are not compared with each other. One
    worker runs in this process (the quick-mode tests load the scripts with
    ``runpy``, whose functions other processes cannot import).
    """
    if workers <= 1:
        return [fn(*t) for t in tasks]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, *zip(*tasks)))


def save(name, payload, directory=RESULTS):
    """Write ``<directory>/<name>.json`` (default ``results/``) and return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path


def quick_cli(doc, main, **options):
    """Command line of a script with ``main(quick, out, **options)``: ``[--quick] [--out DIR]``
    and ``--name VALUE`` for each option (``argparse`` keywords; None when not given).

    UserWarnings of the fits (e.g. more clusters than features) are silenced:
    the scripts report what they measure, not the estimator's advice.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="directory for the results and the page")
    for name, kwargs in options.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, **kwargs)
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        main(args.quick, args.out, **{name: getattr(args, name) for name in options})


def where_passes_go(X, K, warm=True):
    """One default fit with every pass of the pass layer logged.

    Returns ``{"fit_ms": ms, "passes": [[pass, count, ms], ...]}``, the
    passes in the order the fit first ran them: a list, as a results file
    saved with sorted keys would lose a mapping's order. A pass over all
    rows is logged under its method's name; passes over subsamples are
    added up under "subsample passes". ``warm``: fit once unlogged first
    (Numba's kernels loaded).
    """
    log = {}
    original = DenseRows._map

    def logged(self, fn, *args, **kwargs):
        start = time.perf_counter()
        out = original(self, fn, *args, **kwargs)
        seconds = time.perf_counter() - start
        name = sys._getframe(1).f_code.co_name
        key = name if self.n_samples == X.shape[0] else "subsample passes"
        entry = log.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds * 1e3
        return out

    if warm:
        AttentionClustering(K, random_state=0).fit(X)
    DenseRows._map = logged
    try:
        start = time.perf_counter()
        AttentionClustering(K, random_state=0).fit(X)
        total = (time.perf_counter() - start) * 1e3
    finally:
        DenseRows._map = original
    return {"fit_ms": total, "passes": [[key, count, ms] for key, (count, ms) in log.items()]}


def load_numbers(load):
    """The three load averages of ``os.getloadavg()``, as a page prints them."""
    return ", ".join(f"{x:.2f}" for x in load)


def load_sentence(payload):
    """The page's sentence on how busy the machine was, from the payload's
    ``load_before`` and ``load_after`` (``os.getloadavg()``); empty for
    results that predate them."""
    if "load_before" not in payload:
        return ""
    return (
        f"Load average of the machine (1, 5, 15 min): {load_numbers(payload['load_before'])} "
        f"before the run, {load_numbers(payload['load_after'])} after (2 cores)."
    )


# The libraries every page measures: the name each is installed under, and
# the module it is imported as.
LIBRARIES = {
    "numpy": "numpy",
    "scipy": "scipy",
    "scikit-learn": "sklearn",
    "numba": "numba",
    "attention_cluster": "attention_cluster",
}


# The libraries of the pages' Dask runs, as library_versions' peers (dask-ml
# and zarr added where a run uses them).
DASK_LIBRARIES = {"dask": "dask", "distributed": "distributed"}


def library_versions(peers=None):
    """The versions of the libraries a run measures, to keep in its payload
    under ``"versions"``: Python, :data:`LIBRARIES`, then ``peers`` (a mapping
    of installed name to module, e.g. ``{"dask-ml": "dask_ml"}``), each only if
    it imports. Taken at run time: a page printed later from the results must
    show these, not the versions installed then."""
    import importlib
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"Python": platform.python_version()}
    for name, module in {**LIBRARIES, **(peers or {})}.items():
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = str(getattr(imported, "__version__", "unknown"))
    return out


def run_conditions(load_before, peers=None):
    """What a payload records of how its run went, at the run's end: the load
    average at its start (``load_before``, ``os.getloadavg()``) and now, and
    :func:`library_versions` (with ``peers``)."""
    return {
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "versions": library_versions(peers),
    }


def versions_sentence(payload):
    """The page's sentence on the versions measured, from the payload's
    ``versions`` (:func:`library_versions`), Python and :data:`LIBRARIES`
    first, then the peers by name; empty for results that predate them."""
    found = payload.get("versions")
    if not found:
        return ""
    order = ["Python", *LIBRARIES]
    names = [n for n in order if n in found] + sorted(n for n in found if n not in order)
    return "Versions: " + ", ".join(f"{name} {found[name]}" for name in names) + "."


def run_facts(payload, load=True):
    """The load and versions sentences of a page (:func:`load_sentence`,
    :func:`versions_sentence`), each after a space, to follow the sentence
    that names the command; empty for results that record neither.
    ``load=False``: the versions alone, for a page that words the load its own way."""
    sentences = (load_sentence(payload) if load else "", versions_sentence(payload))
    return "".join(f" {s}" for s in sentences if s)


def section_markers(name, script):
    """The comments that bound the section ``name`` a script writes into a shared page."""
    return f"<!-- {name}: written by benchmarks/{script} -->", f"<!-- end of {name} -->"


_MARKED = re.compile(r"<!-- (.+?): written by benchmarks/\S+ -->.*?<!-- end of \1 -->\n?", re.S)


def marked_sections(text):
    """Every marked section of a page's text, in order, each with its markers."""
    return [m.group(0).rstrip("\n") for m in _MARKED.finditer(text)]


def before_other_pages(text, block):
    """``text`` with ``block`` put before its "## Other pages" heading, or at its end."""
    if "## Other pages" in text:
        head, rest = text.split("## Other pages", 1)
        return head + block.rstrip("\n") + "\n\n## Other pages" + rest
    return text.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"


def splice_section(page, markers, lines):
    """Write the section ``lines`` into ``page`` between ``markers``.

    The section replaces its previous version, or goes before "## Other
    pages", or at the end; the rest of the page, other scripts' sections
    among it, is left as it is. A page not yet in ``page``'s folder (a
    ``--out`` run) starts from the repository's copy of it.
    """
    begin, end = markers
    source = page if page.exists() else ROOT / "docs" / page.name
    text = source.read_text() if source.exists() else ""
    block = "\n".join([begin, *lines, end]) + "\n"
    previous = [old for old in marked_sections(text) if old.startswith(begin)]
    if previous:
        head, rest = text.split(previous[0], 1)
        tail = rest.lstrip("\n")
        # One blank line after the section, as where it was first put.
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = before_other_pages(text, block)
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
