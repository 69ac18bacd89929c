"""One loader for the tests that call a repository script's functions (``studies/``, ``records/``, ``benchmarks/``).

Those scripts are files, not modules of the package, so a test loads each from its path: a fresh
module per call (no test sees another's monkeypatching), not registered in ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str | Path) -> ModuleType:
    """The module of the script at ``relpath`` (relative to the repository root, or absolute), executed once.

    Parameters
    ----------
    relpath : str or Path
        E.g. ``"studies/tools/render_catalogue_rst.py"``.
    """
    path = Path(relpath) if Path(relpath).is_absolute() else ROOT / relpath
    spec = importlib.util.spec_from_file_location(f"script_{path.parent.name}_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no script at {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
