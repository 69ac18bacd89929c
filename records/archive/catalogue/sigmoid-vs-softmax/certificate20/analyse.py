"""Summarise the 20-replicate best-of-five certificate of sigmoid-vs-softmax (declared in HYPOTHESES.md at f6487e2).

Usage: ``python records/archive/catalogue/sigmoid-vs-softmax/certificate20/analyse.py`` (the folder's ``sigmoid/`` and
``softmax/`` runs; prints the JSON quoted in ``how.json``'s ``found``).  The paired contrasts are
:func:`moestat.rates.verdicts.paired_contrast` of softmax (the arm the paper calls slower) against sigmoid.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
from moestat.rates.verdicts import paired_arrays, paired_contrast

out = {}
t = {}
HERE = Path(__file__).resolve().parent
PILOT = HERE.parent / "certificate_pilot"
for a in ("sigmoid", "softmax"):
    r = pd.read_csv(HERE / a / "results.csv"); e = pd.read_csv(HERE / a / "extras.csv")
    m = r.merge(e, on=["router", "n", "replicate"]); t[a] = m
    pilot = pd.read_csv(PILOT / a / "results.csv")
    pe = pd.read_csv(PILOT / a / "extras.csv")
    pm = r.merge(pilot, on=["n", "replicate"], suffixes=("", "_p"))
    em = e.merge(pe, on=["n", "replicate"], suffixes=("", "_p"))
    per_n = {}
    for n, g in m.groupby("n"):
        b = g[g.beaten == 1]
        per_n[int(n)] = {"fits": len(g), "converged": int(g.converged.sum()), "beaten": int(g.beaten.sum()),
                         "median_relative_gain_of_the_beaten": float(np.median((b.objective - b.best_objective) / b.objective)) if len(b) else None,
                         "beaten_farther_in_param_multi": int((b.best_param_multi > b.param_multi).sum()),
                         "param_multi_median": [float(g.param_multi.median()), float(g.best_param_multi.median())],
                         "D2_gate_median": [float(g.D2_gate.median()), float(g.best_D2_gate.median())]}
    out[a] = {"per_n": per_n, "statuses": m.status.value_counts().to_dict(),
              "starts_converged": f"{int(m.n_starts_converged.sum())}/{int(m.n_starts.sum())}",
              "pilot_rows_equal": {"rows": len(pm), "max_rel_objective": float((abs(pm.objective - pm.objective_p) / abs(pm.objective_p)).max()),
                                   "max_rel_param_multi": float((abs(pm.param_multi - pm.param_multi_p) / abs(pm.param_multi_p)).max()),
                                   "extras_best_objective_max_rel": float((abs(em.best_objective - em.best_objective_p) / abs(em.best_objective_p)).max()),
                                   "n_iter_equal": bool((pm.n_iter == pm.n_iter_p).all())}}
contrasts = {}
for loss in ("param_multi", "best_param_multi", "D2_gate", "best_D2_gate"):
    ns, slow, fast = paired_arrays(t["softmax"], t["sigmoid"], loss)
    for st in ("median", "mean"):
        r = paired_contrast(ns, slow, fast, statistic=st)
        contrasts[f"{loss} ({st})"] = {k: r.get(k) for k in ("category", "slope_a", "slope_b", "difference", "ci", "n_boot", "pairs")}
out["paired_contrasts_softmax_minus_sigmoid"] = contrasts
print(json.dumps(out, indent=1))
