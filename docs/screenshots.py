"""Screenshots of the built documentation, and a check that nothing overflows.

Run after ``make docs``::

    python docs/screenshots.py [--html docs/_build/html] [--out docs/_build/screenshots]

Each page is opened from disk (``file://``) by headless Chromium with
networking disabled, so what the PNGs show is what a reader without
internet sees: the maths must be rendered by the bundled MathJax. The pages
are taken at 1280 px, a laptop's width, and each is checked, element by
element, for tables and display formulas wider than the room they are
given: an element whose content is wider than its own box (``scrollWidth``
above ``clientWidth``: it scrolls), or whose right edge (``left +
scrollWidth``) runs past the viewport's width or the edge of an ancestor
that clips or scrolls it (a table cut by its scrolling container).
The script prints every such element and exits with status 1 when there is
one. Needs a ``chromium`` (or ``chromium-browser``, ``google-chrome``)
executable; a development tool, not part of the tests.
"""

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent

# name -> page, relative to the HTML root.
PAGES = {
    "index": "index.html",
    "user_guide": "user_guide/index.html",
    "model": "user_guide/model.html",
    "api": "api.html",
    "api_class": "generated/attention_cluster.AttentionClustering.html",
    "gallery": "auto_examples/index.html",
    "performance": "performance.html",
    "example": "auto_examples/plot_which_one_when.html",
}
WIDTH, HEIGHT = 1280, 2000

# The elements checked: tables, and display formulas as MathJax renders
# them (its container, and Sphinx's div.math around it).
CHECKED = "table, mjx-container[display='true'], div.math"

# Appended to a copy of the page: once MathJax has typeset (or at once
# without MathJax), measure every checked element and write the offenders,
# as JSON, into an element that --dump-dom prints.
PROBE = """
<script>
(function () {
  function describe(el) {
    var text = (el.textContent || "").replace(/\\s+/g, " ").trim();
    var heading = "";
    for (var p = el; p && !heading; p = p.parentElement) {
      var h = p.querySelector && p.querySelector("h1, h2, h3");
      if (p.tagName === "SECTION" && h) heading = h.textContent.replace(/#$/, "").trim();
    }
    return el.tagName.toLowerCase() + " in '" + heading + "': " + text.slice(0, 60);
  }
  function measure() {
    var view = document.documentElement.clientWidth, found = [];
    document.querySelectorAll(%(selector)s).forEach(function (el) {
      if (!el.offsetParent) return;  // not displayed
      var rect = el.getBoundingClientRect();
      var right = rect.left + Math.max(el.scrollWidth, rect.width);
      // The room: the viewport, and every ancestor that clips or scrolls
      // (a table in a scrolling container is cut at the container's edge).
      var room = view;
      for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== "visible") {
          room = Math.min(room, p.getBoundingClientRect().left + p.clientWidth);
        }
      }
      if (el.scrollWidth > el.clientWidth + 1 || right > room + 1) {
        found.push({element: describe(el), left: Math.round(rect.left),
                    right: Math.round(right), room: Math.round(room), viewport: view});
      }
    });
    var out = document.createElement("pre");
    out.id = "overflow-report";
    out.textContent = JSON.stringify({viewport: view, overflow: found});
    document.body.appendChild(out);
  }
  window.addEventListener("load", function () {
    var ready = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (ready ? MathJax.startup.promise : Promise.resolve()).then(function () {
      setTimeout(measure, 500);
    });
  });
})();
</script>
"""


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium executable found (Debian: apt-get install chromium)")


def _chromium(browser, profile, *arguments):
    """Run headless Chromium offline at the checked width; return its stdout."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        # Any request off the disk fails: the pages must work offline.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--window-size={WIDTH},{HEIGHT}",
        # Lets MathJax typeset before the picture or the DOM is taken.
        "--virtual-time-budget=15000",
        *arguments,
    ]
    result = subprocess.run(command, check=True, capture_output=True, timeout=180, text=True)
    return result.stdout


def screenshot(browser, page, png):
    """One PNG of ``page`` (a file) at the checked width."""
    with tempfile.TemporaryDirectory() as profile:
        _chromium(browser, profile, f"--screenshot={png}", page.as_uri())


def overflow(browser, page):
    """The tables and formulas of ``page`` that overflow, as dicts.

    The probe runs in a copy of the page written next to it (so that its
    relative links resolve), removed afterwards.
    """
    probe = PROBE % {"selector": json.dumps(CHECKED)}
    text = page.read_text(encoding="utf-8")
    copy = page.with_name(f".overflow-probe-{page.name}")
    copy.write_text(text.replace("</body>", probe + "</body>", 1), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as profile:
            dom = _chromium(browser, profile, "--dump-dom", copy.as_uri())
    finally:
        copy.unlink()
    match = re.search(r'<pre id="overflow-report">(.*?)</pre>', dom, flags=re.S)
    if match is None:
        return [{"element": "the page: the probe did not report (a script error?)"}]
    return json.loads(html.unescape(match.group(1)))["overflow"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=DOCS / "_build" / "html")
    parser.add_argument("--out", type=Path, default=DOCS / "_build" / "screenshots")
    args = parser.parse_args(argv)
    browser = find_browser()
    args.out.mkdir(parents=True, exist_ok=True)
    problems = 0
    for name, relative in PAGES.items():
        page = (args.html / relative).resolve()
        if not page.exists():
            sys.exit(f"{page} is missing: run `make docs` first")
        png = args.out / f"{name}_{WIDTH}.png"
        screenshot(browser, page, png)
        found = overflow(browser, page)
        problems += len(found)
        print(f"{png}: {'no overflow' if not found else f'{len(found)} overflowing'}")
        for item in found:
            print(f"  {json.dumps(item)}")
    if problems:
        print(f"{problems} tables or formulas overflow at {WIDTH} px")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
