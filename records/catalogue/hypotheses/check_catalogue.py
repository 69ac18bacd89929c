"""Every catalogue run's truth against its own theorem's hypotheses, and the proposed replacements.

Runs :func:`moestat.theorems.catalogue_hypotheses.catalogue_hypotheses` (the shipped truths, as ``moestat
reproduce`` builds them) and :func:`moestat.theorems.hypotheses.check_hypotheses` on the proposals of
``proposals.py``; writes ``hypotheses.json`` next to this file and prints one line per run
(see ``records/declarations/catalogue/README.md``)::

    PYTHONPATH=. python records/catalogue/hypotheses/check_catalogue.py   # from the repository root
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from moestat.cli.common import ArgumentParser
from moestat.io import atomic_write_json
from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses
from moestat.theorems.hypotheses import check_hypotheses

HERE = Path(__file__).resolve().parent
#: proposal function -> (entry, run, theorem)
PROPOSALS = {
    "lse_ffn_scaled_sigmoid": ("lse-ffn-vs-linear", "ffn-sigmoid", "lse-strong"),
    "sigmoid_gate_scaled_gelu": ("sigmoid-vs-softmax", "sigmoid", "sigmoid-strong"),
    "softmax_gate_scaled_gelu": ("sigmoid-vs-softmax", "softmax", "lse-strong"),
}


def _short(rep: dict) -> dict:
    return {k: {"holds": c["holds"], "value": c["value"], "tol": c["tol"], "detail": c["detail"]} for k, c in rep["conditions"].items()}


def main(argv: list[str] | None = None) -> dict:
    # no options: anything given is refused (one line, exit 2) before hypotheses.json is rewritten
    ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = []
    for r in catalogue_hypotheses():
        rows.append({k: r[k] for k in ("entry", "run", "router", "theorem", "cite", "met", "failing")} | {"conditions": _short(r["report"])})
        print(f"{r['entry']:<20} {r['run'] + ('/' + r['router'] if r['router'] else ''):<20} {r['theorem']:<26} "
              f"{'NOT CHECKED' if r['met'] is None else 'MEETS' if r['met'] else 'FAILS'} {'; '.join(r['failing'])}")
    spec = importlib.util.spec_from_file_location("moestat_proposals", HERE / "proposals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    props = []
    for fn, (entry, run, th) in PROPOSALS.items():
        rep = check_hypotheses(getattr(mod, fn)(), theorem=th)
        t = rep["theorems"][0]
        props.append({"proposal": f"proposals.py:{fn}", "entry": entry, "run": run, "theorem": th, "met": t["met"],
                      "failing": t["failing"], "conditions": _short(rep)})
        print(f"proposal {fn:<28} {entry}/{run}: {th} {'MEETS' if t['met'] else 'FAILS'} {'; '.join(t['failing'])}")
    out = {"rule": "moestat.theorems.hypotheses", "runs": rows, "proposals": props}
    atomic_write_json(HERE / "hypotheses.json", out)
    return out


if __name__ == "__main__":
    main()
