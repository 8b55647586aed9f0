"""Sphinx configuration of the attention_cluster documentation.

Build with ``make docs`` (warnings are errors). The gallery runs every
``examples/plot_*.py`` script in quick mode unless ATTENTION_CLUSTER_DOCS_FULL
is set, so the build stays fast enough for ``make test``.
"""

import os
import re
import sys
from pathlib import Path

from docutils import nodes
from sphinx.util.nodes import split_explicit_title

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
# docs/gallery_order.py, named by the gallery's configuration below.
sys.path.insert(0, str(DOCS))

import attention_cluster  # noqa: E402

# The example scripts read ATTENTION_CLUSTER_QUICK; sphinx-gallery runs them
# in this process, so setting it here reaches them.
if not os.environ.get("ATTENTION_CLUSTER_DOCS_FULL"):
    os.environ["ATTENTION_CLUSTER_QUICK"] = "1"
# Figures are rendered off-screen.
os.environ.setdefault("MPLBACKEND", "Agg")

project = "attention_cluster"
author = "attention_cluster developers"
copyright = "attention_cluster developers"
release = attention_cluster.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # Serves MathJax from _static/mathjax: the maths render without network.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

# API reference: autosummary writes one stub page per object into
# docs/generated (not tracked by git).
autosummary_generate = True
# Module pages list what the module's __all__ exports.
autosummary_ignore_module_all = False
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# numpydoc turns "See Also" entries into cross-references; an unresolved one
# is not a warning because nitpicky mode is off.

# MyST: $...$ and $$...$$ math, rendered in the browser by the bundled MathJax.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# No network during the build: no intersphinx.

sphinx_gallery_conf = {
    "examples_dirs": [str(ROOT / "examples")],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"[\\/]plot_",
    # Only plot_*.py files are gallery examples; helper modules that live in
    # examples/ (shared code, figure drivers) are neither run nor listed.
    "ignore_pattern": r"^(?!plot_)",
    # The tasks users bring first, then the paper's figures.
    "within_subsection_order": "gallery_order.tasks_first",
    "download_all_examples": False,
    "remove_config_comments": True,
    "plot_gallery": "True",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "write_computation_times": False,
    "show_memory": False,
}

html_theme = "pydata_sphinx_theme"
html_title = f"attention_cluster {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 5,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False
html_css_files = ["custom.css"]
# Every page shows the whole navigation (docs/_templates/sidebar-global.html).
html_sidebars = {"**": ["sidebar-global"]}
# The contents panel names methods without their class (fit(), not
# AttentionClustering.fit()).
toc_object_entries_show_parents = "hide"


def _skip_metadata_request_setters(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated ``set_{method}_request`` methods.

    scikit-learn attaches them to every estimator for metadata routing; their
    docstrings point into scikit-learn's own documentation (glossary, user
    guide labels), which this build cannot resolve.
    """
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return skip


def _math_sections():
    """``{"7": "likelihood-refinement-beyond-the-paper", ...}``: the id of each
    numbered section of docs/math.md ("## 7. Title"), as docutils makes it."""
    text = (DOCS / "math.md").read_text(encoding="utf-8")
    return {
        m.group(1): nodes.make_id(m.group(0)[3:])
        for m in re.finditer(r"^## (\d+)\. .+$", text, flags=re.M)
    }


MATH_SECTIONS = _math_sections()


def math_section_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:mathmd:`7``` is a link "math.md section 7" to that section of the maths page.

    ``:mathmd:`sections 2-3 <2>``` gives its own text and links to section 2;
    ``:mathmd:`2-3``` reads "math.md section 2-3". An unknown section is an
    error of the build.
    """
    has_title, title, target = split_explicit_title(text)
    number = target.split("-")[0].strip()
    if number not in MATH_SECTIONS:
        message = inliner.reporter.error(f"docs/math.md has no section {target!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    env = inliner.document.settings.env
    uri = env.app.builder.get_relative_uri(env.docname, "math") + "#" + MATH_SECTIONS[number]
    label = title if has_title else f"math.md section {target}"
    return [nodes.reference(rawtext, label, refuri=uri)], []


def setup(app):
    app.connect("autodoc-skip-member", _skip_metadata_request_setters)
    app.add_role("mathmd", math_section_role)
