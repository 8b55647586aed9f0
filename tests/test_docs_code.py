"""The documentation's Python blocks run as a reader runs them: in order, page by page."""

import re
import warnings
from pathlib import Path

import matplotlib
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Hand-written and generated pages alike: a generated page's snippets make
# their own data (they had named data of the scripts that write the pages,
# and did not run).
PAGES = sorted([*DOCS.glob("*.md"), *DOCS.glob("user_guide/*.md")])
# Modules of the optional extras the pages' snippets import (pyproject.toml's
# [dask] extra); the others are the package's dependencies or [test]'s.
OPTIONAL_EXTRAS = {"dask", "dask_ml", "distributed", "zarr"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_a_pages_code_blocks_run_in_order(page, tmp_path, monkeypatch):
    # Files a snippet writes (a Zarr store) go to a directory of the test's.
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
    # A page on an optional extra (Dask's) runs where the extra is installed.
    code = "".join(blocks)
    imported = set(re.findall(r"^(?:from|import) (\w+)", code, re.M))
    # Dask's to_zarr and from_zarr import zarr themselves.
    if "_zarr(" in code:
        imported.add("zarr")
    for module in sorted(imported & OPTIONAL_EXTRAS):
        pytest.importorskip(module)
    matplotlib.use("Agg")
    namespace = {"__name__": "__docs__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pages' own text says which warnings they show
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)
