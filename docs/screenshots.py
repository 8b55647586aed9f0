"""Screenshots of the built documentation, taken by headless Chromium.

Run after ``make docs``::

    python docs/screenshots.py [--html docs/_build/html] [--out docs/_build/screenshots]

Each page is opened from disk (``file://``) with networking disabled, so
what the PNGs show is what a reader without internet sees: the maths must
be rendered by the bundled MathJax. Two viewports are taken: a laptop screen
(1366 px wide) and a narrow window (900 px). Needs a ``chromium`` (or
``chromium-browser``, ``google-chrome``) executable; not part of the tests.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent

# name -> page, relative to the HTML root.
PAGES = {
    "index": "index.html",
    "user_guide": "user_guide/model.html",
    "user_guide_index": "user_guide/index.html",
    "api": "api.html",
    "api_class": "generated/attention_cluster.AttentionClustering.html",
    "gallery": "auto_examples/index.html",
    "quickstart": "auto_examples/plot_quickstart.html",
    "comparison": "benchmarks.html",
}
VIEWPORTS = {"laptop": (1366, 2000), "narrow": (900, 1600)}


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium executable found (Debian: apt-get install chromium)")


def screenshot(browser, url, png, size):
    """One PNG of ``url`` at ``size`` (width, height), from a fresh profile."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            # Any request off the disk fails: the pages must work offline.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--window-size={size[0]},{size[1]}",
            # Lets MathJax typeset before the picture is taken.
            "--virtual-time-budget=10000",
            f"--screenshot={png}",
            url,
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=DOCS / "_build" / "html")
    parser.add_argument("--out", type=Path, default=DOCS / "_build" / "screenshots")
    args = parser.parse_args(argv)
    browser = find_browser()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, page in PAGES.items():
        path = (args.html / page).resolve()
        if not path.exists():
            sys.exit(f"{path} is missing: run `make docs` first")
        for view, size in VIEWPORTS.items():
            png = args.out / f"{name}_{view}.png"
            screenshot(browser, path.as_uri(), png, size)
            print(png)


if __name__ == "__main__":
    main()
