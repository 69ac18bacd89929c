"""The shape of the house: rules of the package layout that a reader can check and defend.

What makes a module (docs/architecture.rst explains each rule):

* one job, stated in the first line of its docstring;
* its imports at the top, so that the import lines are the module's real dependencies;
  an import of the package's own modules inside a function is allowed only for a reason
  written in :data:`LAZY_IMPORTS` (an optional heavy dependency behind it, or the command
  line's lazy boundary);
* no import cycle: the modules form a layered graph (imports inside functions and under
  ``TYPE_CHECKING`` count too -- a cycle hidden in a function is still a cycle);
* the command layer (``moestat/cli``) is imported by no library module.

These replace the old size limits (650 lines per module, 250 per ``cmd_*.py``): a size limit made
modules split where the count fell, not where the job ended (``estimators/generic_refine`` was cut
out of ``mle_generic`` to stay under it and called back into it, a cycle).
"""

import pytest
import ast
import functools
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "moestat"

MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)

#: (importing module, imported module) -> why the import sits inside a function.  Two reasons are
#: accepted: the imported module pulls in an optional heavy dependency (matplotlib, scikit-learn,
#: dask, statsmodels) that the importing module's users must not pay for, or it is the command
#: line's lazy boundary (a subcommand's module loaded only when that subcommand runs -- the
#: dispatcher does that with ``importlib`` in ``moestat/cli/main.py``).  A true import cycle is no
#: reason: the cycle test fails on it whether the import is lazy or not.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("moestat.rates.figures", "moestat.plotting"): "moestat.plotting imports matplotlib; the rates door loads it "
                                                    "only when it draws (issue 36: figures were a fifth of the main job)",
}

#: Third-party packages that the ``moestat rates`` door must not load when it starts (issue 36:
#: scikit-learn alone was ~11% of the main job's profile); they are imported where they are used.
HEAVY = ("sklearn", "matplotlib", "dask", "distributed", "statsmodels")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {_module_name(p): p for p in MODULES}


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The package's own modules that one import statement names (``[]`` for anything else).

    ``from moestat.rates import catalogue`` names the submodule ``moestat.rates.catalogue``;
    ``from moestat.rates.store import x`` names ``moestat.rates.store``.
    """
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "moestat"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: resolved against the importing module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "moestat":
        return []
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in NAMES else source for a in node.names]


@functools.lru_cache(maxsize=1)
def _imports() -> tuple[tuple[str, str, int, bool], ...]:
    """Every import of a package module: ``(importer, imported, line, inside a function)``."""
    out = []
    for name, path in NAMES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        for node in ast.walk(tree):
            for target in _imported(node, name, path.name == "__init__.py"):
                if target != name:
                    out.append((name, target, node.lineno, id(node) in in_function))
    return tuple(out)


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), i.e. the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(NAMES):
        if v not in index:
            visit(v)
    return found


def _cycle_path(component: frozenset[str], edges: dict[str, set[str]]) -> str:
    """One closed walk through a cycle, ``a -> b -> a``, to name it in a failure."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in edges[path[-1]] if w in component)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return " -> ".join(path + [start])
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return " -> ".join(path + [nxt[0]])
        path.append(fresh[0])
        seen.add(fresh[0])


@pytest.mark.slow
def test_the_import_graph_finds_imports_inside_functions_and_cycles():
    # the checks below are only as good as the graph: a cycle made through a lazy import is found
    tree = ast.parse("def f():\n    from moestat.io import x\n", filename="<t>")
    node = tree.body[0].body[0]
    assert _imported(node, "moestat.faults", False) == ["moestat.io"]
    rel = ast.parse("from ..io import x\nfrom . import gates\n").body
    assert _imported(rel[0], "moestat.rates.store", False) == ["moestat.io"]
    assert _imported(rel[1], "moestat.model", True) == ["moestat.model.gates"]
    assert _cycles({"moestat.io": {"moestat.faults"}, "moestat.faults": {"moestat.io"}}) == [
        frozenset({"moestat.io", "moestat.faults"})]
    assert _cycles({"moestat.io": {"moestat.faults"}}) == []
    assert any(inside for *_, inside in _imports()) == bool(LAZY_IMPORTS)


@pytest.mark.slow
def test_no_import_cycles():
    edges: dict[str, set[str]] = {}
    for importer, imported, _, _ in _imports():
        edges.setdefault(importer, set()).add(imported)
    cycles = _cycles(edges)
    assert not cycles, "import cycles (imports inside functions count too):\n" + "\n".join(
        _cycle_path(c, edges) for c in cycles)


def test_package_imports_sit_at_module_level_unless_a_reason_is_written():
    found: dict[tuple[str, str], list[str]] = {}
    for importer, imported, line, inside in _imports():
        if inside:
            found.setdefault((importer, imported), []).append(f"{NAMES[importer].relative_to(ROOT)}:{line}")
    bad = [f"{where[0]}: imports {imported} inside a function" for (importer, imported), where in sorted(found.items())
           if (importer, imported) not in LAZY_IMPORTS]
    assert not bad, ("move these imports to the top of the module, or write the reason in LAZY_IMPORTS "
                     "(an optional heavy dependency, the command line's lazy boundary):\n" + "\n".join(bad))
    stale = sorted(set(LAZY_IMPORTS) - set(found))
    assert not stale, f"no longer imported inside a function: remove from LAZY_IMPORTS: {stale}"
    assert all(reason.strip() for reason in LAZY_IMPORTS.values())


@pytest.mark.slow
def test_every_module_states_its_job_in_its_first_docstring_line():
    missing = []
    for path in MODULES:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not doc or not doc.strip().splitlines()[0].strip():
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"modules without a first docstring line saying what they hold: {missing}"


def test_only_the_command_layer_imports_the_command_line():
    # moestat/cli parses arguments and calls the library; a library module importing it would run
    # backwards (the work callable from Python only through argparse).  The __main__ files are doors.
    wrong = [f"{NAMES[importer].relative_to(ROOT)}:{line}" for importer, imported, line, _ in _imports()
             if imported.startswith("moestat.cli") and not importer.startswith("moestat.cli")
             and not importer.endswith("__main__")]
    assert not wrong, f"library modules importing moestat.cli: {wrong}"


def test_command_modules_compute_nothing():
    # cli/ parses and validates arguments; the work lives in library modules callable from Python.
    # A command module that imports torch or numpy is doing the work itself (replaces a size limit).
    numeric = re.compile(r"^\s*(import|from) (torch|numpy)\b", re.M)
    wrong = [str(p.relative_to(ROOT)) for p in sorted((PKG / "cli").glob("*.py"))
             if numeric.search(p.read_text(encoding="utf-8"))]
    assert not wrong, f"command modules doing numerical work (move it into the library): {wrong}"


@pytest.mark.slow
def test_the_rates_door_starts_without_the_heavy_optional_packages():
    code = ("import sys, moestat.cli.cmd_rates; "
            f"print(' '.join(h for h in {HEAVY!r} if h in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [], f"`moestat rates` loads {out.stdout.split()} when it starts"


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for p in MODULES if p.name not in ("__init__.py", "__main__.py"))
    shared = {n: [str(p.relative_to(ROOT)) for p in MODULES if p.name == n] for n, c in names.items() if c > 1}
    assert not shared, f"modules sharing a file name: {shared}"


def test_every_package_folder_is_a_package():
    for folder in {p.parent for p in MODULES}:
        assert (folder / "__init__.py").exists(), f"{folder} has modules but no __init__.py"


def test_papers_are_named_by_authors_not_by_seed_numbers():
    # "seed 004" etc. were internal file names of the source texts; users never see them.
    pattern = re.compile(r"\bseeds? 00\d", re.IGNORECASE)
    texts = [*MODULES, ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.rst")), *sorted((ROOT / "records").rglob("*.md")), *sorted((ROOT / "studies").rglob("*.md"))]
    hits = []
    for path in texts:
        if "_build" in path.parts or not path.exists():
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not hits, "seed numbers in user-facing text:\n" + "\n".join(hits[:40])


if __name__ == "__main__":
    # `python tests/test_layout.py` prints the package imports that sit inside functions now and the
    # import cycles (what the two tests above judge).
    current: dict[str, set[str]] = {}
    graph: dict[str, set[str]] = {}
    for _importer, _imported, _, _inside in _imports():
        graph.setdefault(_importer, set()).add(_imported)
        if _inside:
            current.setdefault(_importer, set()).add(_imported)
    for _importer in sorted(current):
        print(f"    {_importer!r}: {tuple(sorted(current[_importer]))!r},")
    for _cycle in _cycles(graph):
        print("cycle:", _cycle_path(_cycle, graph))


#: ``moestat/rates/`` in its jobs (docs/architecture.rst, "The rates folder's jobs").  The engine plans,
#: runs and stores the sweep; the analysis fits and judges slopes and draws them; the drivers chain
#: the two (``run_rates`` reads, fits and draws in the parent after the sweep); the catalogue runs the
#: registry's entries through the drivers.  ``labels`` is the vocabulary both sides speak (loss,
#: router and statistic names; it imports nothing).
RATES_JOBS = {
    "engine": ("config", "spec_checks", "presets", "resolve", "sweep", "backends", "forked", "worker_env", "store",
               "truth_check", "extras", "gmoe_blocks"),
    "vocabulary": ("labels",),
    "analysis": ("fit", "interval_rule", "verdicts", "stability", "figures", "run_summary"),
    "drivers": ("experiment", "grow", "replay", "redraw"),
    "catalogue": ("catalogue", "catalogue_config", "catalogue_grow", "catalogue_protocol", "catalogue_views"),
    "instruments": ("preflight",),
    "doors": ("__init__", "__main__"),
}


def _rates_job(module: str) -> str | None:
    if not module.startswith("moestat.rates"):
        return None
    short = module[len("moestat.rates."):] if module != "moestat.rates" else "__init__"
    return next((job for job, names in RATES_JOBS.items() if short in names), "unclassified")


def test_every_rates_module_has_one_job():
    listed = [m for names in RATES_JOBS.values() for m in names]
    assert len(listed) == len(set(listed)), "a module listed under two jobs"
    here = {p.stem for p in (PKG / "rates").glob("*.py")}
    assert here == set(listed), f"rates modules not in RATES_JOBS: {sorted(here - set(listed))}; " \
                                f"listed but gone: {sorted(set(listed) - here)}"


def test_the_engine_imports_neither_the_analysis_nor_the_theorems():
    # The engine takes what the theorems and the analysis make as data (a scenario file's theorems and
    # its pre-flight are handed to run_rates by the doors), so the theorem registry can import the
    # engine without a two-way dependency, and a change to a rule cannot change a sweep.
    wrong = []
    for importer, imported, line, _ in _imports():
        job = _rates_job(importer)
        if job == "engine" and (_rates_job(imported) not in ("engine", "vocabulary", None)
                                or imported.startswith("moestat.theorems")):
            wrong.append(f"{NAMES[importer].relative_to(ROOT)}:{line} imports {imported} ({_rates_job(imported) or 'theorems'})")
        elif job in ("analysis", "drivers", "vocabulary") and imported.startswith("moestat.theorems"):
            wrong.append(f"{NAMES[importer].relative_to(ROOT)}:{line} imports {imported} (theorems)")
        elif job in ("engine", "analysis", "vocabulary") and _rates_job(imported) in ("drivers", "catalogue", "doors"):
            wrong.append(f"{NAMES[importer].relative_to(ROOT)}:{line} imports {imported} ({_rates_job(imported)})")
    assert not wrong, "imports against the rates folder's jobs:\n" + "\n".join(wrong)


def test_the_statistics_vocabulary_is_the_one_the_fits_compute():
    from moestat.rates.labels import STATISTIC_NAMES
    from moestat.rates.verdicts import STATISTICS

    assert tuple(STATISTICS) == STATISTIC_NAMES
