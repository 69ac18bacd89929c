"""The benchmarks run with moestat's passive OpenMP waiting (moestat.threads).

torch's OpenMP runtime reads ``OMP_WAIT_POLICY`` once, when torch is first imported; a script that
imports torch before moestat keeps the runtime's spinning default, and its 2-thread fit collapsed
beside a busy process (``benchmarks/busy_ab.py``, docs/guide/performance.rst).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from script_loader import ROOT

BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def _first_import_line(tree: ast.Module, package: str) -> int | None:
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        if any(nm.split(".")[0] == package for nm in names):
            return node.lineno
    return None


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_benchmark_imports_moestat_before_torch(path):
    tree = ast.parse(path.read_text())
    torch_line = _first_import_line(tree, "torch")
    if torch_line is None:
        return
    moestat_line = _first_import_line(tree, "moestat")
    assert moestat_line is not None and moestat_line < torch_line, (
        f"{path.name} imports torch (line {torch_line}) before moestat: its OpenMP threads would spin")


def _spin_count(prelude: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MOESTAT_WAIT_POLICY")}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"  # libgomp prints the settings it read, at load time
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    code = prelude + "import runpy; runpy.run_path(%r, run_name='bench')" % str(ROOT / "benchmarks" / "lse_batched_vs_scipy.py")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    lines = [ln for ln in out.stderr.splitlines() if "GOMP_SPINCOUNT" in ln]
    if not lines:
        pytest.skip("torch's OpenMP runtime is not libgomp (no GOMP_SPINCOUNT displayed)")
    return lines[0].split("=", 1)[1].strip().strip("'")


def test_lse_benchmark_threads_wait_passively():
    # PASSIVE makes libgomp's spin count 0; the runtime's default spins 300 000 times per wait
    assert _spin_count("") == "0"
    # the former import order, for contrast: the check can tell the two apart
    assert _spin_count("import torch; ") != "0"
