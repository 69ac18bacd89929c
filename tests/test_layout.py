"""The shape of the house: invariants of the package layout that reviews kept asking for."""

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "moestat"
MAX_LINES = 650  # "no module over ~600 lines"

MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for p in MODULES if p.name not in ("__init__.py", "__main__.py"))
    shared = {n: [str(p.relative_to(ROOT)) for p in MODULES if p.name == n] for n, c in names.items() if c > 1}
    assert not shared, f"modules sharing a file name: {shared}"


def test_no_module_is_over_the_size_limit():
    big = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_every_package_folder_is_a_package():
    for folder in {p.parent for p in MODULES}:
        assert (folder / "__init__.py").exists(), f"{folder} has modules but no __init__.py"


def test_papers_are_named_by_authors_not_by_seed_numbers():
    # "seed 004" etc. were internal file names of the source texts; users never see them.
    pattern = re.compile(r"\bseeds? 00\d", re.IGNORECASE)
    texts = [*MODULES, ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.rst")), *sorted((ROOT / "simulations").rglob("*.md"))]
    hits = []
    for path in texts:
        if "_build" in path.parts or not path.exists():
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not hits, "seed numbers in user-facing text:\n" + "\n".join(hits[:40])


def test_command_modules_only_parse():
    # cli/ holds argument parsing; the work lives in library modules callable from Python.
    for p in sorted((PKG / "cli").glob("cmd_*.py")):
        n = len(p.read_text(encoding="utf-8").splitlines())
        assert n <= 250, f"{p.name} has {n} lines: move logic into the library"
