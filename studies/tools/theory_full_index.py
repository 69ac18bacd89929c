"""One ``--full`` theory report assembled from the recorded per-module ``--full`` runs.

``moestat theory --full`` runs every check at paper scale; on the project's 2-core machine that is
several CPU-hours, so it was recorded module by module (``moestat theory --full --only MODULE``, the
folders ``records/theory/full_*``).  This gathers those reports into ``records/theory/full/`` with the
package's door, ``moestat theory --merge FOLDER... --out DIR``
(:func:`moestat.theorems.checks.runner.merge_reports`), running nothing: each check keeps the
verdict, numbers and details of the run that recorded it, and its ``note`` names that folder and
command.  Checks come in the quick report's order; a check of the quick report with no full record,
or held by two records, is refused (exit 2), so the index cannot silently drop one.

    PYTHONPATH=. python studies/tools/theory_full_index.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from moestat.cli.common import ArgumentParser
from moestat.theorems.checks.framework import CheckResult
from moestat.theorems.checks.runner import merge_reports, write_report

HERE = Path(__file__).resolve().parents[2] / "records" / "theory"


def gather(root: Path) -> tuple[list[CheckResult], list[str], float]:
    """The checks of every ``full_*`` report under ``root``, in the quick report's order."""
    order = [c["name"] for c in json.loads((root / "quick" / "theory_report.json").read_text())["checks"]]
    try:
        return merge_reports(sorted(root.glob("full_*")), order=order, mode="full")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


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
