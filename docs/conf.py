"""Sphinx configuration of the spherepde documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (no internet, no GPU).
The reference pages (configuration keys, diagnostics columns, command line, Python API) are
written from the code into ``docs/reference/`` before each build by ``_ext/spherepde_reference.py``;
the results pages are written from the committed reports into ``docs/results/`` by
``_ext/spherepde_results.py``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

from spherepde_gallery import GalleryArgs  # noqa: E402
from spherepde_reference import write_reference  # noqa: E402
from spherepde_results import write_results  # noqa: E402

import spherepde  # noqa: E402

write_reference(HERE / "reference")
write_results(HERE / "results")

project = "spherepde"
author = "The spherepde developers"
copyright = "2026, The spherepde developers"
release = version = spherepde.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "sphinx-mathjax-offline",  # MathJax 3 copied into the site: formulas render without the internet
]

# The gallery: every script in examples/ runs at its gallery size (``--size gallery``) while
# the site is built, and its Matplotlib figures are shown under its code. The test suite
# runs the same scripts at their tiny size (tests/test_examples.py).
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": str(HERE / "gallery"),
    "filename_pattern": r".*\.py$",
    "reset_argv": GalleryArgs(),
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
}

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store", "gallery/*.ipynb", "gallery/*.py", "gallery/*.zip", "gallery/*.json"]
templates_path: list[str] = []

# MyST: $...$ and $$...$$ maths and amsmath environments render with MathJax; headings get
# anchors so that pages can link to sections ([text](page.md#a-section)).
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference: one page per public name, generated at build time.
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc sections carry the types; signatures stay short
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
html_title = f"spherepde {release}"
html_static_path: list[str] = []

# The docstrings write absolute values and norms as |x| (plain text reads better); in
# reStructuredText |x| would be a substitution reference, so such bars are escaped when the
# docstring is rendered (code spans and :math: roles are left alone).
_LITERAL = re.compile(r"(``.+?``|`[^`]+`)")
_BARS = re.compile(r"(?<![\\|])\|(?=[^\s|])([^|]*?[^\s\\|])\|(?!\|)")


def _escape_bars(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        if "|" not in line or line.lstrip().startswith(("|", "+")):  # line blocks and tables
            continue
        parts = _LITERAL.split(line)
        lines[i] = "".join(p if k % 2 else _BARS.sub(r"\\|\1\\|", p) for k, p in enumerate(parts))


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars)
