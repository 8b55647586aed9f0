"""The example scripts run in quick mode and write their figure and results.

Every ``examples/plot_*.py`` script runs in this process (``runpy``), with
``ATTENTION_CLUSTER_QUICK`` set and its outputs sent to a temporary
directory, so the suite keeps the examples and the reproduction pipeline
alive. Running in-process pays the imports (Numba, scikit-learn,
matplotlib) once rather than once per script.
"""

import ast
import importlib
import json
import os
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("plot_*.py"))


@pytest.fixture(scope="module")
def quick_env(tmp_path_factory):
    """Quick mode, outputs in a temporary directory, ``examples/`` importable."""
    out = tmp_path_factory.mktemp("figures")
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTENTION_CLUSTER_QUICK", "1")
    mp.setenv("ATTENTION_CLUSTER_OUTPUT", str(out))
    mp.setenv("MPLBACKEND", "Agg")
    mp.syspath_prepend(str(EXAMPLES))
    mp.chdir(out)
    import matplotlib

    matplotlib.use("Agg")
    yield out
    mp.undo()


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs_in_quick_mode(script, quick_env):
    import matplotlib.pyplot as plt

    try:
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        plt.close("all")
    # An example that starts a Dask cluster closes it: no client is left
    # behind for the next script (or the docs build, which runs them all in
    # one process).
    if "distributed" in sys.modules:
        assert sys.modules["distributed"].client._get_global_client() is None
    if "import _figures" not in (EXAMPLES / script).read_text():
        return  # an example that is not a figure of the paper: nothing to write
    # A figure script writes its results and its figure (a script that
    # stopped writing them passed while the check read "if it wrote them").
    name = script[len("plot_") : -len(".py")]
    results = quick_env / f"{name}.json"
    assert results.exists(), f"{script} wrote no {results.name}"
    assert (quick_env / f"{name}.png").stat().st_size > 0
    data = json.loads(results.read_text())
    assert data["quick"] is True and data["claims"]
    for claim in data["claims"]:
        assert claim["verdict"] in {"agrees", "differs"}
        assert claim["paper"] and claim["measured"] and claim["criterion"]


def test_every_figure_script_is_listed():
    # The figure scripts are those built on the shared module; make figures
    # must run every one of them.
    from examples.make_figures import SCRIPTS as listed

    figures = {
        s[len("plot_") : -len(".py")]
        for s in SCRIPTS
        if "import _figures" in (EXAMPLES / s).read_text()
    }
    assert set(listed) == figures


def test_page_has_one_row_per_claim(tmp_path):
    from examples.make_figures import write_page

    claim = dict(
        key="k",
        figure="1",
        statement="a | b",
        paper="near 1e-2",
        measured="mu*_0 <x>",
        verdict="differs",
        criterion="within x3",
        explanation="why",
    )
    results = {
        "fig1_psgd_manifold": dict(title="Figure 1", seconds=1.0, quick=False, claims=[claim] * 2)
    }
    page = tmp_path / "page.md"
    write_page(results, {"wall_seconds": 1.0, "jobs": 1, "cpu_count": 2}, page)
    text = page.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 2
    assert "a \\| b" in rows[0] and "mu\\*\\_0 \\<x\\>" in rows[0]
    assert "**differs** (note 1)" in rows[0] and "0 of 2 claims agree" in text
    assert os.path.basename("_static/figures/fig1_psgd_manifold.png") in text


def _private_imports(source):
    """Private names of attention_cluster imported by a script: modules or objects."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attention_cluster"):
            names = node.module.split(".") + [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [part for alias in node.names for part in alias.name.split(".")]
            names = names if names[:1] == ["attention_cluster"] else []
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = [node.attr] if node.value.id == "attention_cluster" else []
        else:
            continue
        found += [name for name in names if name.startswith("_") and name != "__version__"]
    return found


def test_examples_use_the_public_api_only():
    assert _private_imports("from attention_cluster import AttentionClustering, _kernels") == [
        "_kernels"
    ]
    assert _private_imports("import attention_cluster._passes") == ["_passes"]
    offenders = {
        p.name: _private_imports(p.read_text())
        for p in sorted(EXAMPLES.glob("*.py"))
        if _private_imports(p.read_text())
    }
    assert offenders == {}


def test_figures_module_reads_the_environment_when_asked(monkeypatch):
    # Importing the shared module fixes no setting: a script that sets the
    # environment after the import (or a test) still gets what it asked for.
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delenv("ATTENTION_CLUSTER_QUICK", raising=False)
    monkeypatch.delenv("ATTENTION_CLUSTER_OUTPUT", raising=False)
    F = importlib.import_module("_figures")
    assert not F.quick() and F.output_dir() is None and F.sample_size() == 20000
    monkeypatch.setenv("ATTENTION_CLUSTER_QUICK", "1")
    monkeypatch.setenv("ATTENTION_CLUSTER_OUTPUT", "out")
    assert F.quick() and F.output_dir() == "out" and F.sample_size() == 2000


def test_gallery_lists_the_tasks_first():
    # docs/gallery_order.py puts the examples of users' tasks before the
    # paper's figures: every name it lists exists, and every example that is
    # not one of the paper's figures (built on _figures) is listed.
    sys.path.insert(0, str(EXAMPLES.parent / "docs"))
    try:
        order = importlib.import_module("gallery_order")
    finally:
        sys.path.remove(str(EXAMPLES.parent / "docs"))
    assert set(order.TASKS) <= set(SCRIPTS)
    paper = {s for s in SCRIPTS if "import _figures" in (EXAMPLES / s).read_text()}
    assert set(SCRIPTS) - paper <= set(order.TASKS)
    ranked = sorted(SCRIPTS, key=order.tasks_first)
    assert ranked[: len(order.TASKS)] == list(order.TASKS)
