"""The built documentation has no broken internal link or missing image.

Reads the HTML that ``make docs`` writes to docs/_build/html (``make test``
builds the documentation before running the tests); without a build, the
test builds the documentation itself, as ``make docs`` would. Every
``href`` and ``src`` that stays inside the site must name an existing file
and, when it has a fragment, an element with that id; scripts and style
sheets must be local, so that the pages (MathJax included) work offline.
"""

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

DOCS = Path(__file__).resolve().parents[1] / "docs"
BUILT = DOCS / "_build" / "html"


class _Page(HTMLParser):
    """Links, images, assets and element ids of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.images, self.assets, self.ids = [], [], [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        elif tag == "img" and attrs.get("src"):
            self.images.append(attrs["src"])
        elif tag == "script" and attrs.get("src"):
            self.assets.append(attrs["src"])
        elif tag == "link" and "stylesheet" in (attrs.get("rel") or "") and attrs.get("href"):
            self.assets.append(attrs["href"])


def _is_external(url):
    parts = urlsplit(url)
    return bool(parts.scheme or parts.netloc)


def _site():
    """The built site's root and its parsed pages, {path: _Page}."""
    root = BUILT
    if not (root / "index.html").exists():
        # Same command as `make docs`, into the same directory, so that a
        # later `make docs` reuses it.
        subprocess.run(
            [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(DOCS), str(root)],
            check=True,
            env=dict(os.environ, MPLBACKEND="Agg"),
        )
    pages = {}
    for path in root.rglob("*.html"):
        if "_static" in path.relative_to(root).parts:
            continue  # theme templates copied as assets, not pages
        page = _Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        pages[path.resolve()] = page
    assert (root / "index.html").resolve() in pages
    return root.resolve(), pages


def _resolve(page_path, url):
    """The file and fragment an internal URL of ``page_path`` points to."""
    parts = urlsplit(url)
    target = page_path if not parts.path else (page_path.parent / unquote(parts.path)).resolve()
    if target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


def _broken_links(root, pages):
    broken = []
    for path, page in pages.items():
        for kind, urls in (("link", page.links), ("image", page.images), ("asset", page.assets)):
            for url in urls:
                if _is_external(url) or url.startswith(("mailto:", "javascript:", "data:")):
                    continue
                target, fragment = _resolve(path, url)
                where = f"{path.relative_to(root)}: {kind} {url}"
                if not target.exists():
                    broken.append(f"{where} (no file)")
                elif kind == "link" and fragment and target.suffix == ".html":
                    ids = pages[target.resolve()].ids if target.resolve() in pages else set()
                    if fragment not in ids:
                        broken.append(f"{where} (no id {fragment!r})")
    return broken


def _remote_assets(root, pages):
    return [
        f"{path.relative_to(root)}: asset from the network {url}"
        for path, page in pages.items()
        for url in page.assets
        if _is_external(url)
    ]


def _maths_not_bundled(root, pages):
    path = root / "user_guide" / "model.html"
    mathjax = [url for url in pages[path].assets if "mathjax" in url.lower()]
    if not mathjax:
        return ["user_guide/model.html loads no MathJax"]
    return [
        f"user_guide/model.html: MathJax {url} is not a bundled file"
        for url in mathjax
        if _is_external(url) or not _resolve(path, url)[0].is_file()
    ]


def test_built_docs_have_no_broken_link_or_image_and_work_offline():
    # One test, not three sharing a fixture: under pytest-xdist two workers
    # could otherwise both build the documentation into the same directory.
    root, pages = _site()
    problems = (
        _broken_links(root, pages) + _remote_assets(root, pages) + _maths_not_bundled(root, pages)
    )
    assert not problems, "\n".join(sorted(problems)[:50])


def test_api_page_lists_every_public_name():
    # The API reference is written by hand (docs/api.rst): every name of
    # attention_cluster.__all__ has its entry there.
    import attention_cluster

    page = (DOCS / "api.rst").read_text()
    missing = [
        name
        for name in attention_cluster.__all__
        if name != "__version__"
        and f"~attention_cluster.{name}\n" not in page
        and f"attention_cluster.{name}\n" not in page
    ]
    assert not missing, f"not in docs/api.rst: {missing}"
