"""One ``--full`` theory report assembled from the recorded per-module ``--full`` runs.

``moestat theory --full`` runs every check at paper scale; on the project's 2-core machine that is
several CPU-hours, so it was recorded module by module (``moestat theory --full --only MODULE``, the
folders ``records/theory/full_*``).  This script gathers those reports into one
(``theory_reports/full/theory_report.{md,json}``) in the order of the quick report, without running
anything: each check keeps the verdict, numbers and details of the run that recorded it, and its
``note`` names that folder and command.  It fails (exit 1) when a check of the quick report has no
full record or when two records hold the same check, so the index cannot silently drop one.

    PYTHONPATH=. python studies/tools/theory_full_index.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from moestat.cli.common import ArgumentParser
from moestat.experiments.theory.framework import CheckResult
from moestat.experiments.theory.runner import write_report

HERE = Path(__file__).resolve().parents[2] / "records" / "theory"


def gather(root: Path) -> tuple[list[CheckResult], list[str], float]:
    """The checks of every ``full_*`` report under ``root``, in the quick report's order."""
    order = [c["name"] for c in json.loads((root / "quick" / "theory_report.json").read_text())["checks"]]
    found: dict[str, CheckResult] = {}
    commands, elapsed = [], 0.0
    for folder in sorted(root.glob("full_*")):
        rep = json.loads((folder / "theory_report.json").read_text())
        if rep.get("mode") != "full":
            raise SystemExit(f"{folder}: not a --full report (mode {rep.get('mode')!r})")
        commands.append(rep["command"])
        elapsed += float(rep["elapsed_s"])
        for c in rep["checks"]:
            if c["name"] in found:
                raise SystemExit(f"check {c['name']} recorded twice (second in {folder.name})")
            r = CheckResult(**c)
            src = f"recorded in {folder.name}/ by `{rep['command']}`"
            r.note = f"{r.note}; {src}" if r.note else src
            found[c["name"]] = r
    missing = [n for n in order if n not in found]
    if missing:
        raise SystemExit(f"no --full record for: {', '.join(missing)}")
    extra = sorted(set(found) - set(order))
    return [found[n] for n in order + extra], commands, elapsed


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("--root", type=Path, default=HERE, help="the theory reports' folder (default: records/theory)")
    args = ap.parse_args(argv)
    if not (args.root / "quick" / "theory_report.json").is_file():
        ap.error(f"{args.root}: no quick/theory_report.json (the folder of the recorded theory reports)")
    results, commands, elapsed = gather(args.root)
    command = "assembled from " + str(len(commands)) + " module runs: " + " ; ".join(commands)
    (args.root / "full").mkdir(exist_ok=True)
    mpath, _ = write_report(results, args.root / "full", "full", command, elapsed)
    print(f"wrote {mpath}: {len(results)} checks, elapsed {elapsed:.0f} s summed over the module runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
