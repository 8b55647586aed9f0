"""The README's example runs as written, and its links lead somewhere."""

import re
from pathlib import Path

from sklearn.metrics import adjusted_rand_score

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_usage_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a Python example"
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["heads"].shape == (3, 10)
    assert adjusted_rand_score(namespace["y"], namespace["labels"]) > 0.9


def test_readme_is_short_and_its_links_exist():
    text = README.read_text()
    assert len(text.splitlines()) < 100, "the README is read in two minutes"
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if "://" not in t and not t.startswith("#")]
    assert local, "the README links to its results pages"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_install_is_one_path():
    # pip, then what to run with it; the two make targets, which build
    # their own environment, stay in the quick start.
    install = README.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```console\n(.*?)```", install, flags=re.S)
    assert commands, "the install section shows its commands"
    first = [line.split("#")[0].strip() for line in commands[0].splitlines()]
    assert first[:2] == ["pip install .", "python -m attention_cluster"]
    assert (ROOT / "attention_cluster" / "__main__.py").exists()
    later = "\n".join(commands[1:])
    assert "make demo" in later and "make test" in later
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, flags=re.M) and re.search(r"^test:", makefile, flags=re.M)


def test_readme_names_the_peers_settings_of_its_real_data_claim():
    # The claim about scikit-learn's tabular data sets says which
    # GaussianMixture it is measured against: the default (full
    # covariances) a user would run, and the spherical one.
    row = next(line for line in README.read_text().splitlines() if "real data sets" in line)
    assert "GaussianMixture()" in row and "full covariances" in row
    assert 'covariance_type="spherical"' in row


def _printed(value, text):
    """Whether ``value`` (a decimal as the README writes it) is printed in
    ``text``: as it is, or as a number of ``text`` rounded to its decimals."""
    if re.search(rf"(?<![\d.]){re.escape(value)}(?!\d)", text):
        return True
    decimals = len(value.split(".")[1]) if "." in value else 0
    return any(
        round(float(number), decimals) == float(value)
        for number in re.findall(r"(?<![\d.])\d+\.\d+(?!\d)", text)
    )


def test_readme_figures_are_those_of_the_pages_they_cite():
    # A results row quotes its pages: each figure with a unit ("1.16 ×",
    # "22 s", "0.47 GB") is printed on one of the pages the row links, as it
    # is or to more decimals, and each count "N of M" as "N of M" or "N /
    # M", so a rerun page that moves a figure shows the README's copy as
    # stale. (Before, ratios alone were checked, and "36 of 41" could
    # become "30 of 41" unseen.)
    stale = []
    for row in README.read_text().splitlines():
        pages = [ROOT / t for t in re.findall(r"\]\(([^)\s#]+\.md)", row) if (ROOT / t).exists()]
        if not row.startswith("|") or not pages:
            continue
        text = "\n".join(page.read_text() for page in pages)
        for value in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?) ?(?:×|s|ms|GB|MB|GiB|MiB)(?!\w)", row):
            if not _printed(value, text):
                stale.append((value, [page.name for page in pages]))
        for count, total in re.findall(r"(?<![\d.])(\d+) of (\d+)(?!\d)", row):
            if not re.search(rf"(?<![\d.]){count}(?: of | / ){total}(?!\d)", text):
                stale.append((f"{count} of {total}", [page.name for page in pages]))
    assert not stale, f"figures in the README that its pages do not print: {stale}"


def _row(heading, start):
    """The README's table row that starts with ``start`` under ``## heading``."""
    section = README.read_text().split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return next(line for line in section.splitlines() if line.startswith(f"| {start}"))


def test_readme_tabular_advice_names_its_kmeans_and_its_loss():
    # "level with or ahead of KMeans" held against KMeans(n_init=10) only: the
    # default KMeans() is ahead on digits after StandardScaler, and the row
    # says so with the ARIs its linked pages print.
    row = _row("When to use it", "measurements in different units")
    assert "`KMeans(n_init=10)`" in row and "`KMeans()`" in row
    pages = [ROOT / t for t in re.findall(r"\]\(([^)\s#]+\.md)", row)]
    assert pages, "the row links the pages that measure it"
    text = "\n".join(page.read_text() for page in pages)
    decimals = re.findall(r"(?<![\w.])\d\.\d\d(?!\d)", row)
    assert decimals and all(_printed(value, text) for value in decimals)


def test_readme_crawl_range_is_that_of_the_cells_it_describes():
    # The many-clusters row quotes the range of KMeans(n_init=1)'s speed-up
    # over the cells where the EM refinement crawls with K > d, not over
    # every cell of that table (two of which have K <= d).
    import json

    crawl = json.loads((ROOT / "benchmarks" / "results" / "many_clusters.json").read_text())[
        "crawl"
    ]
    ratios = [c["time"]["ours"] / c["time"]["kmeans_1"] for c in crawl if c["K"] > c["d"]]
    row = _row("When to use it", "more clusters than features")
    assert f"{min(ratios):.1f} to {max(ratios):.1f} ×" in row
