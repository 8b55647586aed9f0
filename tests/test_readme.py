"""The README's usage example runs as written."""

import re
from pathlib import Path

from sklearn.metrics import adjusted_rand_score

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_usage_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a Python example"
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["heads"].shape == (3, 10)
    assert adjusted_rand_score(namespace["y"], namespace["labels"]) > 0.9
