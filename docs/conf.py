"""Sphinx configuration of connscale's documentation (``make docs``).

The build is offline: no intersphinx (no package installed here ships its
``objects.inv``, and fetching one needs the network), no remote assets.
Warnings are errors (``-W --keep-going`` in the Makefile).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the gallery's figures, drawn without a display

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "src"))  # document this checkout's connscale
sys.path.insert(0, str(DOCS))  # the api_pages helper

from _api_pages import write_api_pages  # noqa: E402

import connscale  # noqa: E402

project = "connscale"
author = "connscale developers"
copyright = "connscale developers, BSD-3-Clause"  # noqa: A001
release = connscale.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "myst_parser",
    "numpydoc",
    "sphinxarg.ext",
    "sphinx_gallery.gen_gallery",
]

# The API pages (one per public module, from its __all__) are written at each
# build, so that a name added to __all__ is documented without editing docs/.
write_api_pages(DOCS / "api")

exclude_patterns = ["_build", "tools", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb"]
templates_path = ["_templates"]

# Cross-references: every reference to connscale's own objects must resolve
# (nitpicky). References into other projects (numpy, torch, nibabel, nilearn,
# scikit-learn...) cannot resolve without intersphinx, which would need the
# network: they are left as text (nitpick_ignore_regex). The references of the
# docstrings that name connscale's internal (undocumented) objects are listed
# in nitpick-exceptions.txt, each to be made public or reworded; any other
# broken reference fails the build.
nitpicky = True
_EXTERNAL = (
    "numpy|np|scipy|torch|nibabel|nilearn|sklearn|pandas|h5py|dask|distributed|dask_jobqueue"
    "|pyspark|matplotlib|bids|dipy|templateflow|xarray|teneto|triton|yaml|tqdm|isal|threadpoolctl"
    "|abc|argparse|collections|concurrent|contextlib|contextvars|dataclasses|enum|io|json|logging|multiprocessing"
    "|os|pathlib|subprocess|tempfile|threading|types|typing|warnings"
)
nitpick_ignore_regex = [(r"py:.*", rf"({_EXTERNAL})(\..*)?")]
nitpick_ignore = [
    tuple(line.split(None, 1))
    for line in (DOCS / "nitpick-exceptions.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
# MyST asks every domain to resolve its Markdown links; sphinx-argparse's
# domain does not implement that hook and says so for each link.
suppress_warnings = ["myst.domains"]
default_role = "py:obj"

# Docstrings and examples write absolute values and set sizes as |r|, which
# reStructuredText reads as a substitution: each one used is defined here as
# its own text (a new one fails the build, "Undefined substitution").
_ABSOLUTE = ("r", "coef", "weight", "X_k", "P₁ ∩ P₂", "P₂", "P1 ∩ P2", "P2")
rst_prolog = "\n".join(f".. |{t}| replace:: \\|{t}\\|" for t in _ABSOLUTE) + "\n"

# The user guide is Markdown (MyST): its pages came from README.md's sections.
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# Equations: the build writes them as TeX for MathJax, which the reader's
# browser loads (Sphinx's default); offline they show as their TeX source.

html_theme = "pydata_sphinx_theme"
html_title = f"connscale {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_end": ["navbar-icon-links"],
}
html_show_sourcelink = False

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*\.py$",  # every example runs: its figures come from the build
    "ignore_pattern": r"(^|/)_",  # helper modules of the examples
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": False,  # every failing example listed, then the build fails
    "only_warn_on_example_error": False,
    "show_memory": False,
    "reference_url": {"connscale": None},
    "within_subsection_order": "FileNameSortKey",
    "min_reported_time": 1,
}


def _skip_sklearn_routing(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated ``set_<method>_request`` methods.

    scikit-learn adds them to every estimator (metadata routing); their
    docstrings refer to scikit-learn's own glossary and are documented there.
    """
    if re.fullmatch(r"set_\w+_request", name):
        return True
    return None


def setup(app):
    """Connect the member filter."""
    app.connect("autodoc-skip-member", _skip_sklearn_routing)
