"""Render a ``summary.json`` written by ``moestat realdata`` as a reST list-table.

    python studies/tools/render_realdata_rst.py records/realdata/fmnist_compare/summary.json
"""

from __future__ import annotations

import json
import math
import sys


def fmt(e: dict, m: str, d: int) -> str:
    if f"{m}_mean" not in e:
        return "--"
    mu, sd = e[f"{m}_mean"], e.get(f"{m}_std")
    if sd is None or not math.isfinite(sd):
        return f"{mu:.{d}f}"
    return f"{mu:.{d}f} ± {sd:.{d}f}"


def render(summary: dict) -> str:
    head = ["gate", "seeds", "test accuracy", "H_s", "H_u", "I(E;Y)", "usage H", "params"]
    lines = [".. list-table::", "   :header-rows: 1", ""]
    rows = [head]
    for e in summary["gates"]:
        rows.append([
            f"``{e['gate']}``", str(e["n_seeds"]), fmt(e, "test_accuracy", 4), fmt(e, "H_s", 2), fmt(e, "H_u", 2),
            fmt(e, "I_EY", 2), fmt(e, "usage_entropy", 2), str(int(e.get("n_params_mean", 0))),
        ])
    for r in rows:
        lines.append("   * - " + r[0])
        lines += [f"     - {c}" for c in r[1:]]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        print(render(json.load(fh)))
