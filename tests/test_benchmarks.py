"""The benchmark harness: its quick mode runs and writes well-formed outputs.

``benchmarks/run.py --quick`` runs in a subprocess into a temporary
directory (``--out``), so the committed results are left alone.
"""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def bench_modules(monkeypatch):
    """The benchmark helpers, importable as the scripts import them."""
    monkeypatch.syspath_prepend(str(BENCH))
    import _methods
    import _report
    import run

    return _methods, _report, run


@pytest.mark.parametrize("noise", [0.3, 1.0])
def test_bayes_error_matches_the_two_cluster_formula(bench_modules, noise, global_random_seed):
    # Two orthogonal unit centroids. Equal weights: the formula, math.md
    # section 1, I(sigma) = Phi(-1 / (sqrt(2) sigma)). Weights (w0, w1): the
    # Bayes rule labels 0 where t = <x, mu_0 - mu_1> > -a, a = sigma^2
    # log(w0 / w1), and t | Z = c ~ N(+-1, 2 sigma^2), so the error is
    # w0 Phi(-(1 + a) / (sqrt(2) sigma)) + w1 Phi(-(1 - a) / (sqrt(2) sigma)),
    # which the Monte Carlo path must match within 5 standard errors (false
    # alarm below 1e-6; the equal-weight rule's error is 11 or more away).
    _methods, _, _ = bench_modules
    C = np.eye(10)[:2]
    p, se, source = _methods.bayes_error(
        C, np.array([0.5, 0.5]), noise, 200_000, seed=global_random_seed
    )
    assert (source, se) == ("formula", 0.0)
    assert p == pytest.approx(norm.cdf(-1 / (math.sqrt(2) * noise)), rel=1e-12)
    w = np.array([0.2, 0.8])
    a = noise**2 * math.log(w[0] / w[1])
    exact = w[0] * norm.cdf(-(1 + a) / (math.sqrt(2) * noise))
    exact += w[1] * norm.cdf(-(1 - a) / (math.sqrt(2) * noise))
    p, se, source = _methods.bayes_error(C, w, noise, 200_000, seed=global_random_seed)
    assert source == "monte carlo" and 0 < se < 0.05 * exact
    assert abs(p - exact) < 5 * se


@pytest.mark.parametrize(
    "pred, expected",
    [([1, 1, 0, 0], 0.0), ([0, 1, 1, 1], 0.25), ([2, 2, 2, 2], 0.5)],
    ids=["relabelled", "one-wrong", "one-cluster"],
)
def test_matched_error(bench_modules, pred, expected):
    _methods, _, _ = bench_modules
    assert _methods.matched_error([0, 0, 1, 1], pred) == pytest.approx(expected)


def test_predicted_time_is_at_least_linear(bench_modules):
    _, _, run = bench_modules
    assert run.predicted_time([], 10) == 0.0
    assert run.predicted_time([(1e3, 1.0), (1e4, 2.0)], 1e5) == pytest.approx(20.0)
    assert run.predicted_time([(1e3, 1.0), (1e4, 100.0)], 1e5) == pytest.approx(1e4)


def _rows_ok(rows):
    for r in rows:
        if r.get("skipped") or r["method"].startswith("floor"):
            continue
        assert r["fit_s"] > 0 and math.isfinite(r["fit_s"]), r
        assert r["peak_mb"] >= 0, r
        assert -1 <= r["ari"] <= 1 and 0 <= r["nmi"] <= 1 + 1e-12 and 0 <= r["error"] <= 1, r


@pytest.mark.slow
def test_quick_run_writes_results_and_page(tmp_path, bench_modules):
    _methods, _report, _ = bench_modules
    committed = BENCH / "results" / "comparison.json"
    before = committed.read_bytes() if committed.exists() else None
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--out", str(tmp_path)],
        check=True,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
    )
    assert (committed.read_bytes() if committed.exists() else None) == before

    payload = json.loads((tmp_path / "results" / "comparison.json").read_text())
    assert payload["meta"]["mode"] == "quick"
    assert set(payload["meta"]["sections"]) == {"synthetic", "scaling", "real", "cold_start"}
    rows = payload["rows"]
    by_section = {s: [r for r in rows if r["section"] == s] for s in payload["meta"]["sections"]}
    assert all(by_section.values())
    # Each section records how busy the machine was, and the page says it.
    for info in payload["meta"]["sections"].values():
        assert len(info["load_before"]) == len(info["load_after"]) == 3
    page = (tmp_path / "benchmarks.md").read_text()
    assert page.count("load average (1, 5, 15 min)") == 4

    synthetic = by_section["synthetic"]
    methods = {r["method"] for r in synthetic}
    assert {
        "KMeans",
        "MiniBatchKMeans",
        "GaussianMixture(spherical)",
        "GaussianMixture(full)",
        "SpectralClustering",
    } <= methods
    assert {f"AttentionClustering(solver={s!r})" for s in payload["meta"]["solvers"]} <= methods
    _rows_ok(synthetic + by_section["scaling"] + by_section["real"])
    for r in synthetic:
        assert 0 <= r["bayes_error"] <= 1
        if r["method"].startswith("AttentionClustering"):
            assert r["distance"] >= 0
    assert _methods.FLOOR in {r["method"] for r in by_section["scaling"]}
    assert {r["dataset"] for r in by_section["real"]} and {
        r["view"] for r in by_section["real"]
    } == set(_methods.VIEWS)
    assert all(r["compile_s"] >= 0 for r in by_section["cold_start"])

    csv_lines = (tmp_path / "results" / "comparison.csv").read_text().strip().splitlines()
    assert len(csv_lines) == len(rows) + 1

    page = (tmp_path / "benchmarks.md").read_text()
    for heading in (
        "## Synthetic mixtures",
        "## Scaling with n, d and K",
        "## Compile time",
        "## Real data",
    ):
        assert heading in page
    assert str(tmp_path) not in page
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert images
    for image in images:
        assert (tmp_path / image).read_bytes()[:8] == PNG_MAGIC

    # The page is a function of the numbers: re-rendered, it is the same;
    # with AttentionClustering's ARIs changed, its verdicts change.
    again = tmp_path / "again"
    _report.render(payload, again / "benchmarks.md", again / "_static" / "benchmarks")
    assert (again / "benchmarks.md").read_text() == page
    for ari, verdict in ((1.0, "No loss of more than"), (-0.5, "Measured losses of more than")):
        for r in rows:
            if r["method"].startswith("AttentionClustering") and r.get("ari") is not None:
                r["ari"] = ari
        _report.render(payload, again / "benchmarks.md", again / "_static" / "benchmarks")
        assert verdict in (again / "benchmarks.md").read_text()


def _run_quick(script, out):
    """Run ``benchmarks/<script>``'s ``main(quick=True, out=out)`` in this
    process; returns (the script's namespace, its payload)."""
    import runpy

    env_path = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        module = runpy.run_path(str(BENCH / script))
        return module, module["main"](quick=True, out=str(out))
    finally:
        sys.path[:] = env_path


def test_solvers_benchmark_quick_mode(tmp_path):
    # benchmarks/solvers.py (the figures of the exact solver) in quick mode:
    # the page and its figure are written and the targets table is filled.
    _, payload = _run_quick("solvers.py", tmp_path)
    assert {r["noise"] for r in payload["rows"]} == {0.3, 1.0}
    for r in payload["rows"]:
        assert 0 <= r["floor"] and 0 <= r["full"] and 0 <= r["attention"]
        assert set(r["seconds"]) == {"psgd", "full", "attention", "kmeans", "kmeans_1thread"}
    page = (tmp_path / "solvers.md").read_text()
    assert (
        "## Against the targets" in page and page.count("| yes |") + page.count("| **no** |") >= 7
    )
    assert "Load average of the machine" in page and "Versions: Python" in page
    assert (tmp_path / "_static" / "benchmarks" / "solvers.png").stat().st_size > 0


def test_defaults_benchmark_quick_mode(tmp_path):
    # benchmarks/defaults.py (the defaults across sigma, d, K and n) in quick
    # mode: every cell is measured and judged, and the page lists the failures.
    module, payload = _run_quick("defaults.py", tmp_path)
    rows = payload["grid"] + payload["sweep"]
    assert len(rows) == 8
    for r in rows:
        assert r["ac"] >= 0 and r["floor"] >= 0 and -1 <= r["ac_ari"] <= 1
        assert r["works"] == module["works"](r)
    page = (tmp_path / "defaults.md").read_text()
    n_works = sum(r["works"] for r in rows)
    assert f"**{n_works} of {len(rows)} cells work.**" in page
    assert page.count("| **no** |") == len(rows) - n_works
    assert "Load average of the machine" in page and "Versions: Python" in page


@pytest.mark.slow
def test_scaling_benchmarks_quick_mode(tmp_path):
    # benchmarks/streaming.py then benchmarks/out_of_core.py (the scaling
    # page's figures) in quick mode: every candidate is measured, the temporary file
    # is gone, and the page judges every target.
    pytest.importorskip("dask_ml")
    stream = _run_quick("streaming.py", tmp_path)[1]
    for r in stream["rows"]:
        assert r["floor"] > 0 and r["partial_fit"] > 0 and r["PSGD"] > 0 and r["fit in memory"] > 0
    # benchmarks/stream_order.py: every mixture, batch size and order, both models.
    script, order = _run_quick("stream_order.py", tmp_path)
    assert {(r["batch"], r["order"]) for r in order["rows"]} == {
        (b, o) for b in script["BATCHES"] for o in ("shuffled", "sorted")
    }
    for r in order["rows"]:
        assert 0 <= r["refused"] <= r["batches"] and isinstance(r["ordered"], bool)
        for model in ("partial_fit", "test off", "MiniBatchKMeans"):
            assert -1.0 <= r[model + " ARI"] <= 1.0 and r[model + " distance"] > 0
    module, ooc = _run_quick("out_of_core.py", tmp_path)
    assert set(ooc["seconds"]) == {"read once", "dask fit", "load and fit", "dask-ml KMeans"}
    # At least the first read (moments and subsamples) and one E step on all rows.
    assert ooc["passes"] >= 2 and len(ooc["pass_s"]) == ooc["passes"]
    assert ooc["same_centres_max_abs"] < 1e-4
    assert {"dask", "distributed", "dask-ml", "attention_cluster"} <= set(ooc["versions"])
    # The Zarr case: its reads of X counted from the verbose log.
    with pytest.MonkeyPatch.context() as m:
        m.syspath_prepend(str(BENCH))
        zarr_run = module["main"](quick=True, out=str(tmp_path), source="zarr")
    # The quick store takes far less than a quarter of the workers' memory:
    # the first read keeps it there, and no other pass reads it.
    assert zarr_run["reads"] == [
        "second moment, mean, finiteness and nested subsamples drawn, X kept in the workers' memory"
    ]
    assert zarr_run["passes"] >= 2
    assert {"dask", "distributed", "zarr"} <= set(zarr_run["versions"])
    page = (tmp_path / "scaling_out.md").read_text()
    assert "Load average" in page and "### A Zarr store" in page
    assert "### Batches in the clusters' order: measured" in page
    assert page.split("## Out of core: measured", 1)[1].count("Versions: Python") == 2
    assert (
        "## Against the targets" in page and page.count("| yes |") + page.count("| **no** |") == 9
    )
    assert (tmp_path / "_static" / "benchmarks" / "scaling_out.png").stat().st_size > 0


def test_engine_benchmark_quick_mode(tmp_path):
    # benchmarks/engine.py (the pass engine's figures) in quick mode: every
    # figure is measured and the page judges each target.
    module, payload = _run_quick("engine.py", tmp_path)
    assert len(payload["grid"]) == 4 and len(payload["small"]) == 2 and len(payload["float32"]) == 2
    for r in payload["grid"] + [payload["wide"]] + payload["small"]:
        assert r["ratio_to_kmeans"] > 0 and set(r["seconds"]) == {
            "default",
            "kmeans",
            "kmeans_1thread",
            "one_pass",
        }
    assert all(same for _, same in payload["threads"]["identical_to_serial"])
    # ... on rows the fit reads with Numba's kernels (their NumPy forms run
    # below _COMPILE_MIN_SIZE numbers: quick mode checked those alone).
    from attention_cluster import _passes

    assert payload["threads"]["n"] * 10 >= _passes._COMPILE_MIN_SIZE
    page = (tmp_path / "performance.md").read_text()
    assert page.count("| yes |") + page.count("| **no** |") == 7
    assert {"Python", "numpy", "scikit-learn", "attention_cluster"} <= set(payload["versions"])
    assert "Versions: Python" in page
    # The page rendered again from its results file (saved with sorted keys)
    # is the page the run wrote: no column or list takes the file's order.
    module["write_page"](json.loads((tmp_path / "engine.json").read_text()), str(tmp_path))
    assert (tmp_path / "performance.md").read_text() == page


def test_shared_page_keeps_each_scripts_section(tmp_path, bench_modules):
    # docs/performance.md is written by three scripts: engine.py writes the
    # page, peers.py and cold_start.py their sections between markers. Any
    # order of runs leaves every section on the page, once.
    import _common

    page = tmp_path / "performance.md"
    page.write_text("# Engine\n\nfigures 1\n\n## Other pages\n\nlinks\n")
    peers = _common.section_markers("Peers", "peers.py")
    cold = _common.section_markers("Cold start", "cold_start.py")
    _common.splice_section(page, peers, ["## Peers", "", "run 1"])
    _common.splice_section(page, cold, ["## Cold start", "", "run 1"])
    _common.splice_section(page, peers, ["## Peers", "", "run 2"])
    text = page.read_text()
    assert text.count(peers[0]) == 1 and "run 2" in text and "Peers\n\nrun 1" not in text
    assert text.index("## Peers") < text.index("## Other pages")
    assert text.index("## Cold start") < text.index("## Other pages")
    # Writing a section again as it is leaves the page as it is.
    _common.splice_section(page, cold, ["## Cold start", "", "run 1"])
    assert page.read_text() == text
    # The engine's page written anew around the marked sections.
    blocks = _common.marked_sections(text)
    assert [b.splitlines()[0] for b in blocks] == [peers[0], cold[0]]
    fresh = "# Engine\n\nfigures 2\n\n## Other pages\n\nlinks\n"
    for block in blocks:
        fresh = _common.before_other_pages(fresh, block)
    assert _common.marked_sections(fresh) == blocks and "figures 2" in fresh


def test_performance_page_holds_every_scripts_section():
    # The committed page: engine.py's run after peers.py once dropped the
    # peers' section that the README links to.
    text = (ROOT / "docs" / "performance.md").read_text()
    for heading in ("## Cold start", "## Against faiss and scikit-learn-intelex"):
        assert text.count(heading) == 1, heading


@pytest.mark.slow
def test_dynamics_benchmark_quick_mode(tmp_path):
    # benchmarks/dynamics.py (the figures for SelfAttentionDynamics)
    # in quick mode: every section filled, the page and its plots written.
    _, payload = _run_quick("dynamics.py", tmp_path)
    assert sorted({r["K"] for r in payload["k_recovery"]}) == [2, 3, 4, 5, 6]
    assert payload["speed"]["ratio"] > 0 and payload["large"]["seconds"] > 0
    assert {r["method"] for r in payload["peers"]} >= {
        "SelfAttentionDynamics",
        "MeanShift",
        "HDBSCAN",
    }
    assert "Target" in (tmp_path / "dynamics.md").read_text()
    for name in ("dynamics_clusters.png", "dynamics_peers.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_choose_k_benchmark_quick_mode(tmp_path):
    # benchmarks/choose_k.py (BIC, AIC, redundant heads, n_clusters="auto"; the
    # real-data panel) in quick mode.
    module, payload = _run_quick("choose_k.py", tmp_path)
    assert all(set(r["picks"]) == {"bic", "aic", "redundant", "auto"} for r in payload["runs"])
    assert len(payload["panel"]) >= 12
    assert sum(p["held_out"] for p in payload["panel"]) == 4
    page = (tmp_path / "choose_k.md").read_text()
    assert "BIC target" in page and "natural clusters?" in page and "at most 10x" in page
    # The TF-IDF part: sparse rows, every method of it measured in each cell.
    assert payload["text"] and all(
        set(c["picks"]) == set(module["TEXT_METHODS"]) for c in payload["text"]
    )
    assert "## On TF-IDF documents (sparse)" in page


@pytest.mark.slow
def test_many_clusters_benchmark_quick_mode(tmp_path):
    # benchmarks/many_clusters.py (make_blobs with K > d) in quick mode:
    # every cell measured and judged, the load average on the page.
    _, payload = _run_quick("many_clusters.py", tmp_path)
    assert [(c["d"], c["K"]) for c in payload["cells"]] == [(2, 5), (5, 10), (10, 20), (10, 50)]
    assert len(payload["bic_curve"]) == 8
    assert [(c["d"], c["K"]) for c in payload["crawl"]] == [(3, 8)]
    assert sum(run["passes"] for run in payload["crawl"][0]["em"]) >= 1
    # The late passes' climb, read from the verbose log: logged iterates do
    # not lose likelihood, so no one step rises more than all of them.
    for run in payload["crawl"][0]["em"]:
        assert 0.0 <= run["largest_late_step"] <= run["late_rise"] + 1e-9
    text = (tmp_path / "many_clusters.md").read_text()
    assert "Load average" in text and "target: ours >= both" in text
    assert "Where the EM refinement crawls" in text and "late rise (largest step)" in text


@pytest.mark.slow
def test_user_data_benchmark_quick_mode(tmp_path):
    # benchmarks/user_data.py (the users' data page) in quick mode: every
    # section is measured, judged on the page, and the figure is written.
    _, payload = _run_quick("user_data.py", tmp_path)
    assert {"centring", "real", "text", "embeddings", "high_dimension"} <= set(payload)
    assert all(-1 <= r["ari"] <= 1 and isinstance(r["met"], bool) for r in payload["real"])
    page = (tmp_path / "user_data.md").read_text()
    assert (
        f"**{sum(r['met'] for r in payload['real'])} of {len(payload['real'])} targets met.**"
        in page
    )
    assert (tmp_path / "_static" / "benchmarks" / "user_data_text.png").stat().st_size > 0


def test_quantizer_pipeline_benchmark_quick_mode(tmp_path):
    # benchmarks/quantizer_pipeline.py wrote its page alone, with a reading
    # typed by hand: now its results file too, and the reading's figures
    # come from it.
    _, payload = _run_quick("quantizer_pipeline.py", tmp_path)
    saved = json.loads((tmp_path / "quantizer_pipeline.json").read_text())
    assert saved["mixtures"] == payload["mixtures"]
    for cell in payload["mixtures"]:
        assert set(cell["ari"]) == {"KMeans", "linear + KMeans", "softmax + KMeans", "oracle rule"}
        assert all(len(v) == payload["draws"] for v in cell["ari"].values())
    page = (tmp_path / "quantizer_pipeline.md").read_text()
    hardest = max(payload["mixtures"], key=lambda c: c["noise"])
    ceiling = np.mean(hardest["ari"]["oracle rule"])
    assert f"against the ceiling's {ceiling:.3f}" in page
    raw_iris = next(c for c in payload["datasets"] if c["name"] == "iris" and not c["scaled"])
    assert f"| {raw_iris['ari']['KMeans']:.3f} |" in page
    # Its run's load average and versions, as every page's.
    assert "Load average of the machine" in page and "Versions: Python" in page


def test_library_versions_are_taken_at_run_time_and_printed_from_the_payload(bench_modules):
    # The versions a page prints are those its run recorded: a page rendered
    # from results that predate them says nothing about versions.
    import _common

    found = _common.library_versions({"no such peer": "no_such_module_for_this_test"})
    assert list(found)[: 1 + len(_common.LIBRARIES)] == ["Python", *_common.LIBRARIES]
    assert "no such peer" not in found
    assert _common.versions_sentence({}) == "" and _common.run_facts({}) == ""
    recorded = {"versions": {"dask-ml": "9.9", "numpy": "0.0.1", "Python": "3.0"}}
    assert _common.versions_sentence(recorded) == "Versions: Python 3.0, numpy 0.0.1, dask-ml 9.9."
    load = {"load_before": [1.0, 2.0, 3.0], "load_after": [0.5, 0.5, 0.5]}
    assert _common.run_facts(load | recorded) == (
        " " + _common.load_sentence(load) + " " + _common.versions_sentence(recorded)
    )
    assert (
        _common.run_facts(load | recorded, load=False)
        == " Versions: Python 3.0, numpy 0.0.1, dask-ml 9.9."
    )


def _script(name):
    """The namespace of ``benchmarks/<name>``, loaded as the scripts load."""
    import runpy

    env_path = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        return runpy.run_path(str(BENCH / name))
    finally:
        sys.path[:] = env_path


def _page_of(script, payload, out):
    """The text of the page ``benchmarks/<script>`` writes from ``payload``."""
    module = _script(script)
    name = script.removesuffix(".py")
    if "page" in module and "write_page" not in module:
        return module["page"](payload)
    module["write_page"](payload, str(out))
    return (out / f"{name}.md").read_text()


@pytest.mark.parametrize(
    "script, prints_load",
    [
        ("solvers.py", True),
        ("defaults.py", True),
        ("dynamics.py", False),
        ("choose_k.py", False),
        ("many_clusters.py", False),
        ("user_data.py", True),
    ],
)
def test_pages_print_the_versions_and_load_their_results_record(tmp_path, script, prints_load):
    # Rendered from the committed results, which record no versions, a page
    # names none (never today's); given a run's versions and load average, it
    # prints those. (solvers.py and defaults.py recorded no load before.)
    committed = json.loads((BENCH / "results" / script.replace(".py", ".json")).read_text())
    old = {k: v for k, v in committed.items() if k not in ("versions", "load_before", "load_after")}
    if not prints_load:
        old |= {k: committed[k] for k in ("load_before", "load_after") if k in committed}
    page = _page_of(script, old, tmp_path / "old")
    assert "Versions:" not in page
    if prints_load:
        assert "Load average" not in page
    run = dict(old, versions={"Python": "3.0", "numpy": "0.0.1", "scikit-learn": "0.0.2"})
    if prints_load:
        run |= {"load_before": [1.25, 1.5, 1.75], "load_after": [2.25, 2.5, 2.75]}
    page = _page_of(script, run, tmp_path / "new")
    assert "Versions: Python 3.0, numpy 0.0.1, scikit-learn 0.0.2." in page
    if prints_load:
        assert "1.25, 1.50, 1.75 before the run, 2.25, 2.50, 2.75 after" in page


def test_streaming_section_prints_the_versions_and_load_its_results_record(tmp_path, bench_modules):
    # The streaming section of the scaling-out page (written by
    # _scaling_page.write_page from streaming.json) named neither.
    import shutil

    import _scaling_page

    results, docs = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    shutil.copy(BENCH / "results" / "out_of_core.json", results)
    committed = json.loads((BENCH / "results" / "streaming.json").read_text())
    old = {k: v for k, v in committed.items() if k not in ("versions", "load_before", "load_after")}
    (results / "streaming.json").write_text(json.dumps(old))
    _scaling_page.write_page(results, docs)
    section = (docs / "scaling_out.md").read_text().split("### Which update: measured", 1)[1]
    section = section.split("\n### ", 1)[0]
    assert "Versions:" not in section and "Load average" not in section
    run = dict(
        old,
        versions={"Python": "3.0", "numpy": "0.0.1"},
        load_before=[1.25, 1.5, 1.75],
        load_after=[2.25, 2.5, 2.75],
    )
    (results / "streaming.json").write_text(json.dumps(run))
    _scaling_page.write_page(results, docs)
    section = (docs / "scaling_out.md").read_text().split("### Which update: measured", 1)[1]
    section = section.split("\n### ", 1)[0]
    assert "Versions: Python 3.0, numpy 0.0.1." in section
    assert "1.25, 1.50, 1.75 before the run, 2.25, 2.50, 2.75 after" in section


def _performance_section(script, payload, out):
    """What ``benchmarks/<script>`` writes of docs/performance.md from ``payload``:
    its marked section, or (engine.py) the page without the other scripts'."""
    import _common

    module = _script(script)
    module.get("write_page", module.get("write_section"))(payload, str(out))
    page = (out / "performance.md").read_text()
    for block in _common.marked_sections(page):
        if f"written by benchmarks/{script} -->" in block.splitlines()[0]:
            return block
        page = page.replace(block, "")
    return page


@pytest.mark.parametrize("script", ["engine.py", "cold_start.py"])
def test_performance_sections_print_the_versions_their_results_record(
    tmp_path, bench_modules, script
):
    # engine.py's and cold_start.py's sections of the performance page named
    # no versions: from the committed results, which record none, they still
    # name none (never today's); given a run's versions, they print those.
    committed = json.loads((BENCH / "results" / script.replace(".py", ".json")).read_text())
    old = {k: v for k, v in committed.items() if k != "versions"}
    section = _performance_section(script, old, tmp_path / "old")
    assert "Versions:" not in section and "Load average of the machine" in section
    run = dict(old, versions={"Python": "3.0", "numpy": "0.0.1", "dask": "0.0.3"})
    section = _performance_section(script, run, tmp_path / "new")
    assert "Versions: Python 3.0, numpy 0.0.1, dask 0.0.3." in section


def _run_line(section):
    """The peers section's sentence on how the run went (mode, cores, versions, load)."""
    return next(line for line in section.splitlines() if line.startswith("Mode:"))


def test_peers_section_prints_the_versions_its_results_record(tmp_path, bench_modules):
    # peers.py kept versions of its own (Python under "python", the cores
    # among them); a run now records the shared library_versions and the
    # cores apart. Results in either form print the same facts; results
    # without versions print none.
    committed = json.loads((BENCH / "results" / "peers.json").read_text())
    versions = dict(committed["versions"])
    python, cores = versions.pop("Python"), committed["cores"]
    old_form = {k: v for k, v in committed.items() if k != "cores"}
    old_form["versions"] = {"python": python, "cores": cores, **versions}
    for name, run in (("new", committed), ("old", old_form)):
        line = _run_line(_performance_section("peers.py", run, tmp_path / name))
        assert f"first call; {cores} cores. Versions: Python {python}, " in line
        for library in ("numpy", "numba", "scikit-learn", "scikit-learn-intelex", "faiss-cpu"):
            assert f"{library} {versions[library]}" in line
        assert "python" not in line and "cores" not in line.split("Versions:", 1)[1]
    bare = {k: v for k, v in committed.items() if k not in ("versions", "cores")}
    line = _run_line(_performance_section("peers.py", bare, tmp_path / "bare"))
    assert "Versions:" not in line and "cores" not in line
    run = dict(bare, cores=3, versions={"Python": "3.0", "numpy": "0.0.1", "faiss-cpu": "0.0.2"})
    line = _run_line(_performance_section("peers.py", run, tmp_path / "run"))
    assert "first call; 3 cores. Versions: Python 3.0, numpy 0.0.1, faiss-cpu 0.0.2. Load" in line


def test_peers_section_says_whether_faiss_time_holds_its_float32_copy(tmp_path, bench_modules):
    # Runs before faiss was given float32 rows timed the copy inside faiss'
    # time; the page said it was timed apart whatever the results held.
    committed = json.loads((BENCH / "results" / "peers.json").read_text())
    page = _performance_section("peers.py", committed, tmp_path / "committed")
    assert "which is timed apart" in page and "its time includes the copy" not in page
    old = json.loads(json.dumps(committed))
    for cell in old["cells"]:
        cell["seconds"].pop("float32_copy", None)
    page = _performance_section("peers.py", old, tmp_path / "old")
    assert "its time includes the copy" in page and "which is timed apart" not in page


def test_peers_bound_is_the_larger_part_of_the_logged_fit(tmp_path, bench_modules):
    # A cell whose passes over all rows alone outlast the fastest peer was
    # labelled *full passes* however long the rest took (d = 768, K = 200:
    # 3.4 s of passes, 16.3 s of the rest). After the one-read check the
    # label is the larger part of the logged fit.
    committed = json.loads((BENCH / "results" / "peers.json").read_text())
    base = committed["cells"][0]
    peers = {"sklearn": 9.0, "sklearnex": 8.0, "faiss": 1.0, "faiss_spherical": 1.5}

    def made_up(one_pass, full, rest):
        seconds = dict(base["seconds"], attention=20.0, one_pass=one_pass, **peers)
        return dict(base, seconds=seconds, full_pass_seconds=full, rest_seconds=rest)

    cells = {
        "the rest": made_up(0.1, 3.0, 16.0),  # passes longer than the fastest peer
        "full passes": made_up(0.1, 0.6, 0.3),  # passes shorter than the fastest peer
        "one read": made_up(1.2, 3.0, 16.0),
    }
    section = _performance_section(
        "peers.py", dict(committed, cells=list(cells.values())), tmp_path
    )
    table = section.split("### What bounds the time", 1)[1].split("\n\n")[2]
    bounds = [line.rsplit("|", 2)[1].strip() for line in table.splitlines()[2:]]
    assert bounds == list(cells)
    assert "the larger part of the logged fit" in section
    assert "whatever the rest takes" not in section


def test_out_of_core_sections_print_the_versions_their_results_record(tmp_path, bench_modules):
    # The out-of-core sections of the scaling-out page (npy runs and the
    # Zarr case) named no versions: from results without them they still
    # name none; given each run's versions, each section prints its own.
    import shutil

    import _scaling_page

    results, docs = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    shutil.copy(BENCH / "results" / "streaming.json", results)
    committed = json.loads((BENCH / "results" / "out_of_core.json").read_text())
    runs = {
        n: {k: v for k, v in r.items() if k != "versions"} for n, r in committed["runs"].items()
    }
    zarr = {k: v for k, v in committed["zarr"].items() if k != "versions"}

    def sections(ooc):
        (results / "out_of_core.json").write_text(json.dumps(ooc))
        _scaling_page.write_page(results, docs)
        text = (docs / "scaling_out.md").read_text().split("## Out of core: measured", 1)[1]
        return text.split("## Against the targets", 1)[0].split("\n### ")[1:]

    old = sections({"runs": runs, "zarr": zarr})
    assert len(old) == len(runs) + 1
    assert all("Versions:" not in s and "Load average" in s for s in old)
    new = {
        "runs": {
            n: dict(r, versions={"Python": "3.0", "dask-ml": f"0.{n}"}) for n, r in runs.items()
        },
        "zarr": dict(zarr, versions={"Python": "3.0", "zarr": "0.0.2"}),
    }
    found = sections(new)
    for n, section in zip(runs, found):
        assert f"Versions: Python 3.0, dask-ml 0.{n}." in section
    assert found[-1].startswith("A Zarr store") and "Versions: Python 3.0, zarr 0.0.2." in found[-1]


@pytest.mark.parametrize(
    "module, page",
    [
        ("_scaling_page", "scaling_out.md"),
        ("choose_k", "choose_k.md"),
        ("defaults", "defaults.md"),
        ("quantizer_pipeline", "quantizer_pipeline.md"),
        ("solvers", "solvers.md"),
    ],
)
def test_generated_pages_are_their_writers_output(tmp_path, bench_modules, module, page):
    # A generated page edited by hand loses the edit at the next run: the
    # scaling-out page held six paragraphs its writer did not (rounding on
    # Dask, the checks of unknown chunks, text read as numbers). Each page,
    # rendered from the committed results, is the committed page.
    import importlib

    writer = importlib.import_module(module)
    if module == "_scaling_page":
        writer.write_page(BENCH / "results", tmp_path)
    else:
        payload = json.loads((BENCH / "results" / f"{module}.json").read_text())
        writer.write_page(payload, tmp_path)
    assert (tmp_path / page).read_text() == (ROOT / "docs" / page).read_text()


def _mixture_cell(d, noise, **means):
    """A made-up mixture cell: two draws of each method's ARI around ``means``."""
    return dict(d=d, noise=noise, ari={m: [v - 0.01, v + 0.01] for m, v in means.items()})


def _quantizer_reading(mixtures):
    module = _script("quantizer_pipeline.py")
    return "\n".join(module["reading"]({"mixtures": mixtures, "datasets": []}))


def test_quantizer_reading_follows_the_gap_to_the_ceiling():
    # The reading said "the layer has little to add there" whatever KMeans
    # alone's gap to the oracle ceiling, and took KMeans alone for "the best
    # pipeline". Made-up results: a small gap, a large one that no pipeline
    # closes, a large one that a pipeline narrows.
    names = ("KMeans", "linear + KMeans", "softmax + KMeans", "oracle rule")

    def cells(resolved):
        noisy = dict(zip(names, (0.5, 0.3, 0.4, 0.6)))
        return [
            _mixture_cell(10, 0.3, **dict(zip(names, resolved))),
            _mixture_cell(10, 1.0, **noisy),
        ]

    small = _quantizer_reading(cells((0.95, 0.94, 0.94, 0.97)))
    assert "at most 0.020 below the oracle ceiling's: the layer has little to add there." in small
    # KMeans alone (0.5) is no pipeline: the best pipeline is softmax's 0.4.
    assert "the best pipeline's mean ARI is 0.400 against the ceiling's 0.600" in small
    large = _quantizer_reading(cells((0.6, 0.55, 0.58, 0.9)))
    assert "little to add" not in large
    assert (
        "is up to 0.300 below the oracle ceiling's (d = 10, sigma = 0.3: 0.600 against 0.900); "
        "no pipeline is nearer the ceiling there" in large
    )
    narrowed = _quantizer_reading(cells((0.6, 0.7, 0.58, 0.9)))
    assert "little to add" not in narrowed
    assert "there linear + KMeans reaches 0.700, closing 0.100 of that gap." in narrowed


def test_user_data_page_labels_its_binary_megabytes(tmp_path):
    # The users' data page counts memory in units of 2^20 bytes: it says MiB.
    committed = json.loads((BENCH / "results" / "user_data.json").read_text())
    page = _page_of("user_data.py", committed, tmp_path)
    text = page.split("## Text: TF-IDF", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\d MB\b| MB \|", text) is None
    large = committed["text"]["large"]
    assert f"fit {large['fit_peak_mb']:.0f} MiB" in text and "| AC MiB | KMeans MiB |" in text


def _real_sentences(report, rows, **changes):
    """The comparison page's sentences on the raw and best views of each real
    data set, with ``changes`` set on AttentionClustering's rows."""
    rows = [
        dict(r, **changes) if report.is_ac(r["method"]) else r
        for r in rows
        if r["section"] == "real"
    ]
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        d_rows = [r for r in rows if r["dataset"] == dataset]
        views = list(dict.fromkeys(r["view"] for r in d_rows))
        by = report.group(d_rows, ("view",))
        out += report.real_sentences(dataset, d_rows, views, report.methods_in(d_rows), by, [])
    return [s for s in out if s.startswith("- **AC")]


def test_comparison_page_says_whether_the_fit_centred_the_raw_data(bench_modules):
    # Raw data whose common mean dominates are centred by the default
    # center="auto" (with a warning): the page says so where the run recorded
    # it, says it does not know where the run recorded only a warning, and
    # keeps the uncentred reading where the fit did not centre. (The
    # recorded rows say which, or, of runs before center_ was kept, None.)
    _, _report, _ = bench_modules
    rows = json.loads((BENCH / "results" / "comparison.json").read_text())["rows"]
    unknown = _real_sentences(_report, rows, centered=None)
    assert unknown and all("did not record whether it centred" in s for s in unknown)
    assert not any("still differ in direction" in s for s in unknown)
    centred = _real_sentences(_report, rows, centered=True)
    assert all('``center="auto"`` subtracted it' in s for s in centred)
    assert not any("did not record" in s or "still differ in direction" in s for s in centred)
    uncentred = _real_sentences(_report, rows, centered=False)
    assert not any("center=" in s for s in uncentred)
    assert any("still differ in direction" in s for s in uncentred)
    # No warning and nothing recorded: the fit did not centre ("auto" warns when it does).
    assert _real_sentences(_report, rows, centered=None, warnings=[]) == uncentred


def test_comparison_run_records_whether_it_centred(bench_modules):
    # run.py keeps AttentionClustering's center_ with each row (None for the
    # other methods), so the page reads it instead of guessing from warnings.
    from sklearn.cluster import KMeans

    from attention_cluster import AttentionClustering

    _, _, run = bench_modules
    X = np.random.default_rng(0).standard_normal((300, 4)) + 10.0
    methods = {
        "AttentionClustering": lambda: AttentionClustering(2, random_state=0),
        "KMeans": lambda: KMeans(2, random_state=0),
    }
    out = run.measure(X, methods, repeats=1, budget=1)
    assert out["AttentionClustering"]["centered"] is True and out["KMeans"]["centered"] is None
    assert "UserWarning" in out["AttentionClustering"]["warnings"]
    rows = run.finish_rows({"section": "real"}, out, X, np.zeros(300, dtype=int))
    assert [r["centered"] for r in rows] == [True, None]


@pytest.mark.parametrize(
    "script, checks",
    [
        ("fit_time.py", lambda p: {r["method"] for r in p["rows"]} >= {"KMeans(n_init=1)"}),
        ("psgd_accuracy.py", lambda p: len(p["rows"]) == 3 and p["seeds"] == 2),
        ("quantizer_speed.py", lambda p: len(p["seconds"]) == 4),
    ],
    ids=["fit_time", "psgd_accuracy", "quantizer_speed"],
)
def test_scripts_without_a_page_record_load_and_versions_in_quick_mode(tmp_path, script, checks):
    # fit_time.py, psgd_accuracy.py and quantizer_speed.py write no page: their
    # results record the machine's load and the versions measured, and a quick
    # mode writes them under --out, the committed results left alone.
    name = script.removesuffix(".py")
    committed = BENCH / "results" / f"{name}.json"
    before = committed.read_bytes()
    _, payload = _run_quick(script, tmp_path)
    assert committed.read_bytes() == before
    assert json.loads((tmp_path / f"{name}.json").read_text()) == payload
    assert payload["quick"] and checks(payload)
    assert len(payload["load_before"]) == len(payload["load_after"]) == 3
    assert {"Python", "numpy", "scikit-learn", "attention_cluster"} <= set(payload["versions"])
