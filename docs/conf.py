"""Sphinx configuration for moestat.  Built with ``sphinx-build -W`` (warnings are errors).

The API reference is generated at build time from the package's numpydoc docstrings: every
public module of ``moestat`` gets an ``automodule`` entry, so a new module cannot be forgotten.
"""

import os
import pkgutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("MPLBACKEND", "Agg")

import moestat  # noqa: E402

project = "moestat"
author = "moestat developers"
release = moestat.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
# scikit-learn generates ``set_*_request`` methods (metadata routing) on every estimator subclass;
# their docstrings point into scikit-learn's own glossary, so they are left to scikit-learn's docs.
autodoc_default_options = {
    "members": True,
    "undoc-members": False,
    "show-inheritance": False,
    "exclude-members": "set_fit_request,set_score_request,set_predict_request,set_output",
}
autodoc_typehints = "none"
autodoc_member_order = "bysource"
suppress_warnings = ["autodoc.import_object"]
nitpicky = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
templates_path = []


def _write_api_pages() -> None:
    names = sorted(
        m.name
        for m in pkgutil.walk_packages(moestat.__path__, prefix="moestat.")
        if not m.name.endswith("__main__") and ".presets." not in m.name
    )
    lines = [
        "API reference",
        "=============",
        "",
        "Generated from the numpydoc docstrings of every module (see ``docs/conf.py``).",
        "",
    ]
    for name in ["moestat", *names]:
        lines += [name, "-" * len(name), "", f".. automodule:: {name}", "   :no-index:" if name == "moestat" else "", ""]
    (HERE / "api.rst").write_text("\n".join(lines) + "\n", encoding="utf-8")


_write_api_pages()
