"""The hand-written documentation's Python blocks run as a reader runs them: in order, page by page."""

import re
import warnings
from pathlib import Path

import matplotlib
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(
    path
    for path in [*DOCS.glob("*.md"), *DOCS.glob("user_guide/*.md")]
    # Generated pages quote the scripts that write them, whose data they name.
    if "do not edit" not in path.read_text(encoding="utf-8")[:500]
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_a_pages_code_blocks_run_in_order(page):
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
    matplotlib.use("Agg")
    namespace = {"__name__": "__docs__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pages' own text says which warnings they show
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)
