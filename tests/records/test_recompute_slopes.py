"""records/recompute_slopes.py: every current record's recorded slope, recomputed from its rows without
moestat (numpy and pandas only), agrees within 0.02, and the committed records/recompute_slopes.json is
that recomputation (issue 59)."""

import ast
import json
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "records" / "recompute_slopes.py"
mod = load_script(SCRIPT)


def test_the_script_imports_no_moestat():
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(n.split(".")[0] == "moestat" for n in names), names
    assert {n.split(".")[0] for n in names} <= {"__future__", "json", "sys", "tomllib", "pathlib", "numpy", "pandas", "scipy"}


def test_every_recorded_slope_is_recomputed_from_its_rows():
    folders = mod.run_folders(ROOT)
    assert len(folders) >= 40
    recorded = json.loads((ROOT / "records" / "recompute_slopes.json").read_text(encoding="utf-8"))
    assert set(recorded["runs"]) == {f.relative_to(ROOT).as_posix() for f in folders}
    bad, n = [], 0
    for folder in folders:
        now = mod.recompute(folder)
        n += len(now)
        bad += [f"{folder.relative_to(ROOT)} {e['router']} {e['loss']}: {e['recorded']} vs {e['recomputed']}"
                for e in now if not e["agrees"]]
        rec = recorded["runs"][folder.relative_to(ROOT).as_posix()]
        assert [(e["router"], e["loss"], e["statistic"], e["agrees"]) for e in now] == \
               [(e["router"], e["loss"], e["statistic"], e["agrees"]) for e in rec]
    assert not bad, "\n".join(bad)
    assert recorded["fits"] == recorded["agree"] == n and recorded["disagree"] == 0
