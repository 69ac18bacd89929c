"""Render the catalogue's recorded runs as the RST tables of docs/guide/catalogue.rst.

Reads ``simulations/catalogue/<key>/catalogue.json`` (full runs, ``moestat reproduce KEY --out``)
and ``simulations/catalogue/quick_times.json`` (the ``--quick`` runs); prints two list-tables.

Usage::

    python simulations/catalogue/render_rst.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _num(v, spec="+.2f"):
    return "-" if v is None else format(v, spec)


def _rows(report: dict) -> list[list[str]]:
    rows = []
    for r in report["predictions"]:
        ci = f"[{_num(r['ci'][0])}, {_num(r['ci'][1])}]" if r.get("ci") and r["ci"][0] is not None else ""
        rows.append([f"{r['run']} ``{r['loss']}``", r["prediction"], f"{_num(r['slope'])} {ci}".strip(), r["category"] or "-"])
    return rows


def _table(title: str, header: list[str], rows: list[list[str]], widths: str) -> str:
    out = [f".. list-table:: {title}", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        out.append("   * - " + row[0])
        out.extend(f"     - {c}" for c in row[1:])
    return "\n".join(out)


def main() -> None:
    rows = []
    for path in sorted(HERE.glob("*/catalogue.json")):
        rep = json.loads(path.read_text())
        sweep = path.parent / "sweep.json"  # a report re-fitted from a recorded sweep: its time is the sweep's
        wall = json.loads(sweep.read_text())["sweep_elapsed_s"] if sweep.is_file() else rep["wall_s"]
        first = True
        for r in _rows(rep):
            rows.append([f"``{rep['key']}``" if first else "", *r, f"{wall:.0f} s" if first else ""])
            first = False
    if rows:
        print(_table("Full runs (recorded in simulations/catalogue/)", ["entry", "run and loss", "prediction", "measured slope [95% CI]",
                                                                         "category", "wall"], rows, "14 22 18 22 14 10"))
        print()
    q = HERE / "quick_times.json"
    if q.is_file():
        data = json.loads(q.read_text())
        qrows = [[f"``{r['key']}``", str(r["fits"]), f"{r['wall_s']:.0f}", f"{r['cpu_s']:.0f}", r["load"], r["categories"]]
                 for r in data["runs"]]
        print(_table("--quick runs: wall and CPU time", ["entry", "fits", "wall (s)", "CPU user+sys (s)", "load average (1 min) at start/end",
                                                          "categories"], qrows, "18 8 10 12 18 34"))


if __name__ == "__main__":
    main()
