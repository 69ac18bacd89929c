"""The scripts under studies/ and records/ refuse a bad option as the doors do: one line on stderr, exit 2, nothing written.

Each script is run as its ``__main__`` with one bad option: an unknown flag, a non-number where a
number is expected, or a missing path.  The parser is :class:`moestat.cli.common.ArgumentParser`
(the doors'), so the answer is one line (``<script>: error: <message>``) with no argparse usage
block and no traceback, and the scripts check their input and output folders before any work, so
nothing is written.

Every script imports torch (through ``moestat``), a few seconds a process on a busy machine, so
the cases run in one fresh interpreter, one after the other, each as ``python script.py`` runs it
(:mod:`runpy` as ``__main__``, ``sys.argv`` and ``sys.path[0]`` set, its own working folder,
stdout and stderr captured, an uncaught exception printed as Python prints it);
:func:`test_the_driver_answers_as_a_real_run` checks that against a real ``python script.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT  # the scripts and the run folders below are named from the repository root

#: (script, its bad command line, a word the one line must name).  ``{tmp}`` is a fresh empty folder
#: (the process's working folder too, so a relative default output would land there);
#: ``{tmp}/absent`` does not exist.
CASES = [
    ("records/catalogue/crpe_gmoe.py", ["{tmp}/absent", "--json", "{tmp}/crpe.json"], "absent"),
    ("records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py", ["sigmoid", "--json", "{tmp}/g.json", "--bogus"], "--bogus"),
    ("studies/tools/gllim_fit_vs_truth.py", ["{tmp}/absent", "--json", "{tmp}/g.json"], "absent"),
    ("studies/tools/gllim_fit_vs_truth.py", ["{tmp}", "--json", "{tmp}/g.json", "--n-jobs", "two"], "--n-jobs"),
    ("records/archive/catalogue/gmoe-over3/gmoe_over3_cell.py", ["records/catalogue/gmoe-over3/gaussian-moe", "--sizes", "abc", "--json", "{tmp}/c.json"],
     "--sizes"),
    ("records/archive/catalogue/gmoe-over3/gmoe_over3_cell.py", ["{tmp}/absent", "--range-halves", "--json", "{tmp}/c.json"], "absent"),
    ("records/archive/catalogue/gmoe-over3/gmoe_over3_cell.py", ["records/catalogue/gmoe-over3/gaussian-moe", "--range-halves", "--json", "{tmp}/absent/c.json"],
     "absent"),
    ("records/archive/catalogue/gmoe-over4/gmoe_over4_outliers.py", ["records/archive/catalogue/gmoe-over4/design40/gaussian-moe", "--top", "x", "--json", "{tmp}/o.json"],
     "--top"),
    ("studies/tools/range_halves.py", ["{tmp}/absent", "--columns", "voronoi", "--json", "{tmp}/r.json"], "absent"),
    ("studies/tools/range_halves.py", ["records/catalogue/gmoe-over4/gaussian-moe", "--columns", "nope", "--json", "{tmp}/r.json"],
     "nope"),
    ("studies/tools/range_halves.py", ["records/catalogue/gmoe-over4/gaussian-moe", "--columns", "voronoi", "--n-min", "20000",
                                   "--json", "{tmp}/r.json"], "20000"),
    ("studies/tools/grow_record.py", ["gmoe-over4", "{tmp}/absent", "{tmp}/out"], "absent"),
    ("studies/tools/grow_record.py", ["no-such-entry", "records/catalogue/gmoe-over4", "{tmp}/out"], "no-such-entry"),
    ("studies/tools/grow_record.py", ["gmoe-over3", "records/catalogue/gmoe-over4", "{tmp}/out"], "k_fit"),
    ("studies/tools/grow_record.py", ["gmoe-over4", "records/catalogue/gmoe-over4", "{tmp}/out", "--n-jobs", "two"], "--n-jobs"),
    ("studies/tools/grow_record.py", ["gmoe-over4", "records/catalogue/gmoe-over4", "{tmp}/out", "--n-jobs", "100000"], "limit of"),
    ("studies/tools/grow_record.py", ["gmoe-over4", "records/catalogue/gmoe-over4", "{tmp}/out", "--n-jobs", "0"], "--n-jobs"),
    ("studies/tools/grow_record.py", ["records/catalogue/gmoe-over4/gaussian-moe", "{tmp}/out", "--reps", "90"], "--run"),
    ("studies/tools/grow_record.py", ["--run", "records/catalogue/gmoe-over4/gaussian-moe", "{tmp}/out", "--reps", "80"], "fewer"),
    ("studies/tools/grow_record.py", ["--run", "records/catalogue/gmoe-over4/gaussian-moe", "{tmp}/out", "--n-points", "2"], "n_points"),
    ("records/catalogue/laplace-gmoe/laplace_over_outliers.py", ["{tmp}/absent", "--json", "{tmp}/o.json"], "absent"),
    ("records/catalogue/laplace-gmoe/max_iter_compare.py", ["{tmp}/absent", "{tmp}", "--json", "{tmp}/c.json"], "absent"),
    ("records/catalogue/gaussian-gated-moe/gllim_outliers.py", ["records/catalogue/gaussian-gated-moe/gllim", "--json", "{tmp}/o.json", "--bogus"], "--bogus"),
    ("records/catalogue/paired_contrasts.py", ["--bogus"], "--bogus"),
    ("records/catalogue/hypotheses/check_catalogue.py", ["--bogus"], "--bogus"),
    ("studies/figure1/figure1.py", ["--out", "{tmp}/f", "--n-mc", "abc"], "--n-mc"),
    ("studies/figure1/figure1_cells.py", ["--run", "{tmp}/absent", "--json", "{tmp}/c.json"], "absent"),
    ("records/archive/figure1/figure1_composite.py", ["--out", "{tmp}/f", "--seed", "x"], "--seed"),
    ("studies/figure1/figure1_paired.py", ["--out", "{tmp}/f", "--figure-only"], "--figure-only"),
    ("studies/figure1/figure1_paired.py", ["--root", "{tmp}/absent", "--out", "{tmp}/f"], "absent"),
    ("studies/figure1/runoff_box.py", ["--out", "{tmp}/r", "--reps", "x"], "--reps"),
    ("studies/figure1/paper_procedure.py", ["--out", "{tmp}/absent"], "absent"),
    ("studies/catalogue/protocol_table.py", ["--bogus"], "--bogus"),
    ("studies/catalogue/protocol_table.py", ["--record", "cosine-exact", "{tmp}/absent"], "absent"),
    ("studies/two_point/two_point.py", ["--out", "{tmp}/t", "--reps", "x"], "--reps"),
    ("records/archive/figure1/fig1b40_window.py", ["--json", "{tmp}/absent/w.json"], "absent"),
    ("records/archive/figure1/fig1b40w_window.py", ["--bogus"], "--bogus"),
    ("records/figure1/fig1b40w_median.py", ["--json", "{tmp}/absent/m.json"], "absent"),
    ("records/archive/figure1/fig1b_runaway.py", ["--ns", "abc", "--json", "{tmp}/r.json"], "--ns"),
    ("studies/tools/theory_full_index.py", ["--root", "{tmp}/absent"], "absent"),
    ("studies/tools/rejudge_records.py", ["--bogus"], "--bogus"),
    ("studies/probes/over_direction_cells.py", ["cosine", "abc", "4"], "abc"),
    ("studies/probes/split_triangle_probe.py", ["--bogus"], "--bogus"),
    ("studies/probes/two_point_expert_triangle_probe.py", ["--bogus"], "--bogus"),
    ("records/realdata/speed.py", ["--threads", "two", "--out", "{tmp}/s.json"], "--threads"),
    ("records/realdata/speed.py", ["--gates", "dense,bogus", "--out", "{tmp}/s.json"], "bogus"),
    ("studies/softmoe/run_all.py", ["--out", "{tmp}/o", "--only", "bogus"], "bogus"),
    ("records/selection/mixture_example/run.py", ["--out", "{tmp}/o", "--ns", "100,abc"], "--ns"),
    ("records/selection/peer_exp6/peer_counts.py", ["--bogus"], "--bogus"),
]


#: Runs each case as ``python SCRIPT ARGS`` would, in a fresh interpreter: a JSON list of
#: ``[script, args, cwd]`` in, a JSON list of ``{"rc", "stdout", "stderr", "touched"}`` out (on stdout,
#: last line); ``touched``: the files beside the script that the run created or modified.
DRIVER = r"""
import contextlib, io, json, os, runpy, sys, traceback

def beside(script):
    folder = os.path.dirname(script)
    return {f: os.stat(os.path.join(folder, f)).st_mtime_ns for f in os.listdir(folder)
            if os.path.isfile(os.path.join(folder, f))}

results = []
for script, args, cwd in json.loads(sys.stdin.read()):
    out, err = io.StringIO(), io.StringIO()
    before = beside(script)
    saved = (list(sys.argv), list(sys.path), os.getcwd())
    sys.argv, sys.path[:0] = [script, *args], [os.path.dirname(script)]  # as `python script.py` sets them
    os.chdir(cwd)
    rc = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:  # what the interpreter does with it
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            rc = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException:
            traceback.print_exc()
            rc = 1
    sys.argv, sys.path[:], _ = saved[0], saved[1], os.chdir(saved[2])
    after = beside(script)
    touched = sorted(f for f in after if before.get(f) != after[f])
    results.append({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(), "touched": touched})
print(json.dumps(results))
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # this checkout's moestat and studies


def _args(argv: list[str], tmp: Path) -> list[str]:
    """``argv`` with ``{tmp}`` filled in and a relative run folder made the recorded one (a path from the repository root)."""
    return [a.format(tmp=tmp) if "{tmp}" in a else str(SIM / a) if "/" in a and (SIM / a).exists() else a for a in argv]


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> list[dict]:
    """Every case run by :data:`DRIVER`; per case its answer and its (empty) working folder."""
    folders = [tmp_path_factory.mktemp(f"case{i}") for i in range(len(CASES))]
    todo = [[str(SIM / script), _args(argv, tmp), str(tmp)] for (script, argv, _), tmp in zip(CASES, folders)]
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(todo), env=_env(), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return [r | {"tmp": tmp} for r, tmp in zip(results, folders)]


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_bad_option_is_one_line_exit_2_and_nothing_written(answers, case):
    names = CASES[case][2]
    got = answers[case]
    err = got["stderr"].strip().splitlines()
    assert got["rc"] == 2, (got["rc"], got["stderr"][-2000:])
    assert len(err) == 1 and names in err[0], got["stderr"]  # the one line names what was refused
    assert "usage:" not in got["stderr"] and "Traceback" not in got["stderr"]
    assert list(got["tmp"].iterdir()) == [] and got["stdout"] == ""  # nothing written, nothing started
    assert got["touched"] == []  # the recorded files beside the script (some scripts write there) untouched


@pytest.mark.slow
def test_the_driver_answers_as_a_real_run(answers, tmp_path):
    # one case run for real, `python script.py ...` in its own process: the same exit status and stderr
    case = next(i for i, c in enumerate(CASES) if c[0] == "studies/figure1/figure1.py")
    script, argv, _ = CASES[case]
    proc = subprocess.run([sys.executable, str(SIM / script), *_args(argv, tmp_path)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr, proc.stdout) == (answers[case]["rc"], answers[case]["stderr"], "")


#: The scripts under studies/ and records/ not in :data:`CASES`: a module of functions (``proposals.py``,
#: ``recorded_refit.py``), or a script whose bad input another test covers (the renderers, ``boundary.py``,
#: the certificate analyses, which take one positional folder; ``recompute_slopes.py``, which takes no
#: argument and is run whole by tests/records/test_recompute_slopes.py; the sparse comparison's
#: ``make_summary.py``, likewise run whole by tests/records/test_sparse_issue_grid.py).
NOT_CASES = {
    "records/archive/catalogue/sigmoid-vs-softmax/certificate20/analyse.py",
    "records/catalogue/hypotheses/proposals.py",
    "records/catalogue/laplace-gmoe/boundary.py",
    "records/catalogue/sigmoid-vs-softmax/certificate40/analyse.py",
    "records/figure1/sparse_issue_grid/make_summary.py",
    "records/recompute_slopes.py",
    "studies/tools/recorded_refit.py",
    "studies/tools/render_catalogue_rst.py",
    "studies/tools/render_realdata_rst.py",
}


def test_every_script_of_studies_and_records_is_a_case_or_named_as_not_one():
    scripts = {p.relative_to(ROOT).as_posix() for top in ("studies", "records") for p in (ROOT / top).rglob("*.py")
               if "__pycache__" not in p.parts}
    assert scripts == {c[0] for c in CASES} | NOT_CASES
