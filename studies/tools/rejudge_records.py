"""Re-judge every current record's rates run folder, and the recorded theory report, under today's rules (issue 59).

No model is refitted and no row of ``results.csv`` / ``extras.csv`` changes:

* every folder under a record of ``records/index.toml`` with status ``current`` that holds ``results.csv``,
  ``provenance.json`` and ``summary.json`` is re-judged by :func:`moestat.rates.experiment.rejudge_run`
  (its ``summary.json`` rewritten with the new fits and a ``rejudged`` field);
* ``records/theory/quick/theory_report.json`` (and ``.md``): the five Theorem 5 checks of
  :mod:`moestat.theorems.checks.over_strong` recomputed from the re-judged
  ``rates/quick-over-thm5/summary.json`` beside it, exactly as
  ``tests/records/test_over_strong_causes_records.py`` recomputes them; the report's other checks were
  judged on runs whose rows were not kept, and are left as recorded (the report's ``rejudged`` field
  names which were re-judged).

The catalogue's ``catalogue.json`` / ``table.txt`` are the reports as the runs printed them, and stay
so: ``docs/guide/catalogue.rst`` renders the current verdicts (``render_catalogue_rst.py --write``) and
says "recorded as X when it ran" against them.

Usage (from the repository root)::

    PYTHONPATH=$PWD python studies/tools/rejudge_records.py [--date 2026-12-06] [--dry-run]
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THEORY = ROOT / "records" / "theory" / "quick"


def current_run_folders(root: Path = ROOT) -> list[Path]:
    """Every rates run folder under a current record of ``records/index.toml`` (nested records listed once)."""
    index = tomllib.loads((root / "records" / "index.toml").read_text(encoding="utf-8"))["record"]
    found: set[Path] = set()
    for rec in index:
        path = root / rec["path"]
        if rec["status"] != "current" or not path.is_dir():
            continue
        for s in path.rglob("summary.json"):
            d = s.parent
            if (d / "results.csv").is_file() and (d / "provenance.json").is_file():
                found.add(d)
    return sorted(found)


def rejudge_theory_report(folder: Path, key: str, date: str) -> dict:
    """Recompute the over_strong checks of ``folder/theory_report.json`` from ``rates/<key>/summary.json``
    and rewrite the report (json and md); returns the new report."""
    from moestat.theorems.checks import over_strong
    from moestat.theorems.checks.framework import CheckResult, Context
    from moestat.theorems.checks.runner import write_report

    old = json.loads((folder / "theory_report.json").read_text(encoding="utf-8"))
    summary = json.loads((folder / "rates" / key / "summary.json").read_text(encoding="utf-8"))
    saved = over_strong.thm5_run
    over_strong.thm5_run = lambda c: (key, summary)
    try:
        now = {x.name: x for x in over_strong.run(Context(old["mode"], folder))}
    finally:
        over_strong.thm5_run = saved
    fields = {f.name for f in dataclasses.fields(CheckResult)}
    results = []
    before = {}
    for c in old["checks"]:
        if c["name"] in now:
            before[c["name"]] = c["status"]
            results.append(now[c["name"]])
        else:
            results.append(CheckResult(**{k: v for k, v in c.items() if k in fields}))
    import tempfile

    from moestat.io import atomic_write_json, atomic_write_text

    with tempfile.TemporaryDirectory() as tmp:  # the markdown as the runner writes it
        write_report(results, tmp, old["mode"], old["command"], old["elapsed_s"])
        md = (Path(tmp) / "theory_report.md").read_text(encoding="utf-8")
    checks = [json.loads(json.dumps(now[c["name"]].to_dict(), default=str)) if c["name"] in now else c
              for c in old["checks"]]  # the other checks exactly as recorded
    statuses = [c["status"] for c in checks]
    rep = {k: v for k, v in old.items() if k != "checks"}
    rep.update(n_passed=statuses.count("passed"), n_failed=sum(s in ("failed", "error") for s in statuses),
               n_near=statuses.count("near"), n_inconclusive=statuses.count("inconclusive"),
               n_skipped=statuses.count("skipped"))
    rep["rejudged"] = {
        "rule": summary["rejudged"]["rule"], "date": date,
        "checks": {n: {"before": before[n], "after": now[n].status} for n in now},
        "not_rejudged": "the report's other checks: their runs' rows were not kept (how.json), so they stand as recorded",
    }
    rep["checks"] = checks
    atomic_write_json(folder / "theory_report.json", rep)
    atomic_write_text(folder / "theory_report.md", md)
    return rep


def main() -> int:
    from moestat.cli.common import ArgumentParser

    ap = ArgumentParser(description=__doc__.split("\n\n")[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("--date", default=None, help="the date recorded in each 'rejudged' field (default: now, UTC)")
    ap.add_argument("--dry-run", action="store_true", help="list the folders, write nothing")
    args = ap.parse_args()
    from datetime import datetime, timezone

    from moestat.rates.experiment import rejudge_run
    from moestat.theorems.file_theorems import scenario_theorems

    date = args.date or datetime.now(timezone.utc).isoformat(timespec="seconds")
    folders = current_run_folders()
    for d in folders:
        if args.dry_run:
            print(d.relative_to(ROOT))
            continue
        s = rejudge_run(d, date=date, theorems=scenario_theorems)
        print(f"{d.relative_to(ROOT)}: {s['rejudged']['categories_before']} -> {s['rejudged']['categories_after']}", flush=True)
    if not args.dry_run:
        rep = rejudge_theory_report(THEORY, "quick-over-thm5", date)
        print(f"{THEORY.relative_to(ROOT)}/theory_report.json: {rep['rejudged']['checks']}")
    print(f"{len(folders)} run folders")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
