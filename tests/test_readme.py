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
