"""docs/architecture.rst's table of modules names every module of the package, each under its own package."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.rst"
PACKAGE = ROOT / "moestat"


def _table_rows() -> set[tuple[str, str]]:
    """``(package, file name)`` of every row of the page's module table; the package is the bold
    heading row above it (``moestat/`` for the top level, ``theorems/checks/`` for a subpackage)."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"module\s+holds$", line))
    border = lines[start - 1]
    width = len(border.split()[0]) + 2  # the first column and the two spaces after it
    rows, package = set(), None
    for line in lines[start + 2:]:
        if line == border:
            break
        first = line[:width].strip()
        if m := re.fullmatch(r"\*\*(.+/)\*\*", first):
            package = m.group(1)
        elif m := re.fullmatch(r"``(\w+\.py)``", first):
            assert package is not None, f"{first} stands above every package heading"
            rows.add((package, m.group(1)))
    return rows


def _modules() -> set[tuple[str, str]]:
    """``(package, file name)`` of every module of ``moestat/``, ``__init__.py`` of subpackages aside."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        package = "moestat/" if len(rel.parts) == 1 else "/".join(rel.parts[:-1]) + "/"
        if path.name == "__init__.py" and package != "moestat/":
            continue  # a subpackage's __init__ re-exports; its package heading stands for it
        out.add((package, path.name))
    return out


def test_the_table_parses():
    rows = _table_rows()
    assert ("moestat/", "io.py") in rows and ("rates/", "sweep.py") in rows
    assert ("theorems/checks/", "over_strong.py") in rows


def test_the_architecture_page_names_every_module():
    missing = sorted(f"moestat/{p if p != 'moestat/' else ''}{name}" for p, name in _modules() - _table_rows())
    assert not missing, f"docs/architecture.rst does not list the modules {missing}"


def test_the_architecture_page_names_no_module_that_does_not_exist():
    stale = sorted(f"{p}{name}" for p, name in _table_rows() - _modules())
    assert not stale, f"docs/architecture.rst lists modules that do not exist: {stale}"
