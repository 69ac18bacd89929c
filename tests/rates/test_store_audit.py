"""What the result store reads back is checked (issue 13): rows outside the grid, duplicates and
garbage are reported in one line naming the file and never enter a summary; the file and the
summary do not depend on ``--n-jobs``."""

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from moestat.cli.cmd_rates import main
from moestat.cli.common import run_main
from moestat.rates import RatesConfig, run_rates
from moestat.rates.store import audit_results, read_results

TINY = ["--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5",
        "--n-boot", "100", "--quiet"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "run"
    assert run_main(main, TINY + ["--out", str(out)]) == 0
    return out


@pytest.fixture
def run(finished, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(finished, dst)
    return dst


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def _line(fields) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


def _resume(out, capsys):
    rc = run_main(main, TINY + ["--out", str(out), "--resume"], prog="moestat rates")
    return rc, capsys.readouterr().err


def _tamper(out: Path, kind: str) -> None:
    path = out / "results.csv"
    rows = _rows(path)
    header, first = rows[0], rows[1]
    col = {c: i for i, c in enumerate(header)}
    extra = list(first)
    if kind == "replicate":  # the reproduction: replicate 25 of a 3-replicate sweep
        extra[col["replicate"]] = "25"
        extra[col["voronoi"]] = "1e-9"
    elif kind == "n":
        extra[col["n"]] = "12345"
    elif kind == "router":
        extra[col["router"]] = "linear"
    elif kind == "duplicate":
        pass
    elif kind == "garbage":
        with open(path, "a") as fh:
            fh.write("this is not a row\n")
        return
    with open(path, "a") as fh:
        fh.write(_line(extra))


@pytest.mark.slow
@pytest.mark.parametrize("kind,word", [("replicate", "replicate 25"), ("n", "n = 12345"), ("router", "router 'linear'"),
                                       ("duplicate", "duplicate"), ("garbage", "unreadable")])
def test_resume_refuses_a_store_with_foreign_rows_in_one_line_and_runs_nothing(run, kind, word, capsys):
    _tamper(run, kind)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    rc, err = _resume(run, capsys)
    assert rc == 2
    assert err.count("\n") == 1
    assert str(run / "results.csv") in err and "1 row(s)" in err and word in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing written


@pytest.mark.slow
def test_a_foreign_row_never_enters_a_summary(run):
    cfg = RatesConfig.from_dict(json.loads((run / "summary.json").read_text())["config"])
    _tamper(run, "replicate")
    with pytest.raises(ValueError, match="outside the configured grid"):
        run_rates(cfg, run, resume=True)
    with pytest.raises(ValueError, match="outside the configured grid"):
        read_results(run / "results.csv", cfg)
    # without the configuration (no grid to compare with), garbage and duplicates are still errors
    _tamper(run, "duplicate")
    with pytest.raises(ValueError, match="duplicate"):
        read_results(run / "results.csv")


def test_a_torn_last_line_is_dropped_not_reported(run):
    with open(run / "results.csv", "a") as fh:
        fh.write("perturbed-exact,perturbed,ex")
    rows, audit = audit_results(run / "results.csv")
    assert audit.torn and audit.message() is None and len(rows) == 9
