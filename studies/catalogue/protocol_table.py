"""The catalogue under the one protocol, entry by entry: writes ``records/catalogue_protocol/summary.json``
and ``table.txt`` from each entry's ``records/catalogue_protocol/KEY/catalogue.json``.

Per entry and per prediction: the category as it fell, the prediction's standing (where its exponent
comes from), and the hypotheses of each run's truth as ``moestat check`` computes them for the run's
own theorem (:func:`moestat.rates.catalogue_hypotheses.catalogue_hypotheses`, on this checkout's
package; a report that carries its own hypotheses is read as it is).  The count: entries whose every
prediction is ``consistent``, and prediction rows by category, split by standing.  An entry not run
yet is listed as such; nothing is counted for it.

Usage (from the repository root)::

    PYTHONPATH=. python studies/catalogue/protocol_table.py
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "records" / "catalogue_protocol"


def _hypotheses(key: str, report: dict) -> list[dict]:
    carried = [{"run": r["label"], **r["hypotheses"]} for r in report.get("runs", []) if r.get("hypotheses")]
    if carried:
        return carried
    from moestat.rates.catalogue_hypotheses import catalogue_hypotheses

    return [{"run": h["run"], "router": h["router"], "theorem": h["theorem"], "met": h["met"], "failing": h["failing"]}
            for h in catalogue_hypotheses([key])]


def build() -> dict:
    from moestat.rates.catalogue import ENTRIES
    from moestat.rates.catalogue_protocol import describe

    entries, rows_all = [], []
    for key in ENTRIES:
        path = RECORD / key / "catalogue.json"
        if not path.is_file():
            entries.append({"key": key, "run": False})
            continue
        rep = json.loads(path.read_text(encoding="utf-8"))
        if rep.get("mode") != "protocol":
            raise ValueError(f"{path} was not written under the protocol (mode {rep.get('mode')!r})")
        rows = [{"entry": key, **{k: p.get(k) for k in ("run", "loss", "prediction", "standing", "sided", "slope", "ci",
                                                        "category", "reason")},
                 "fixed_truth": (p.get("fixed_truth") or {}).get("category")} for p in rep["predictions"]]
        rows_all += rows
        entries.append({"key": key, "run": True, "paper": f"{rep['paper']['authors']} ({rep['paper']['year']})",
                        "all_consistent": bool(rows) and all(r["category"] == "consistent" for r in rows),
                        "counts": rep["counts"], "wall_s": rep.get("wall_s"),
                        "grid": [{"run": r["label"], "sample_sizes": r["sample_sizes"], "reps": r["reps"]} for r in rep["runs"]],
                        "hypotheses": _hypotheses(key, rep), "predictions": rows})
    ran = [e for e in entries if e["run"]]
    by_standing: dict[str, Counter] = {}
    for r in rows_all:
        by_standing.setdefault(r["standing"] or "unstated", Counter())[r["category"] or "none"] += 1
    return {"protocol": describe(), "entries_run": len(ran), "entries_total": len(entries),
            "not_run": [e["key"] for e in entries if not e["run"]],
            "entries_all_consistent": [e["key"] for e in ran if e["all_consistent"]],
            "rows_by_category": dict(Counter(r["category"] or "none" for r in rows_all)),
            "rows_by_standing_and_category": {k: dict(v) for k, v in by_standing.items()},
            "entries": entries}


def table(summary: dict) -> str:
    lines = [f"The catalogue under the one protocol ({summary['protocol']})",
             f"entries run: {summary['entries_run']} of {summary['entries_total']}"
             + (f" (not run: {', '.join(summary['not_run'])})" if summary["not_run"] else ""),
             f"entries whose every prediction is consistent: {len(summary['entries_all_consistent'])} of "
             f"{summary['entries_run']} run ({', '.join(summary['entries_all_consistent']) or 'none'})",
             "prediction rows by category: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["rows_by_category"].items())),
             "by standing: " + "; ".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                                         for s, c in summary["rows_by_standing_and_category"].items()), ""]
    head = f"{'entry':<20} {'run':<14} {'loss':<26} {'prediction':<34} {'standing':<14} {'slope':>7}  {'95% CI':<17} category"
    lines += [head, "-" * len(head)]
    for e in summary["entries"]:
        if not e["run"]:
            lines.append(f"{e['key']:<20} (not run yet)")
            continue
        for r in e["predictions"]:
            ci = "-" if not r["ci"] or r["ci"][0] is None else f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
            sl = "-" if r["slope"] is None else f"{r['slope']:+.3f}"
            lines.append(f"{e['key']:<20} {r['run']:<14} {r['loss']:<26} {r['prediction'][:34]:<34} {r['standing']:<14} "
                         f"{sl:>7}  {ci:<17} {r['category']}"
                         + (f" (by its two-point judge; the fixed-truth fit's own: {r['fixed_truth']})" if r["fixed_truth"] else ""))
        for h in e["hypotheses"]:
            met = {True: "met", False: "NOT met", None: "not checked"}[h["met"]]
            lines.append(f"{'':<20} hypotheses of {h['run']}{' ' + h['router'] if h.get('router') else ''} "
                         f"against {h['theorem']}: {met}" + ("" if h["met"] else f" ({'; '.join(h['failing'])[:160]})"))
    return "\n".join(lines) + "\n"


def main() -> int:
    summary = build()
    RECORD.mkdir(parents=True, exist_ok=True)
    (RECORD / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    text = table(summary)
    (RECORD / "table.txt").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
