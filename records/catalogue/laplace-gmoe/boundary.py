"""Which fits of a recorded laplace-gmoe over-arm run lie on the boundary of the compact gate set.

The sweep does not write the fitted parameters, so a fit's contact with the box ``[box]`` of
``laplace_gmoe_over_box.toml`` (``|beta1_ic| <= 2``, ``|beta0_i| <= 10``; issue 33,
``records/declarations/catalogue/README.md``, last section) is found by refitting every work unit of the
run from its own streams, exactly as the sweep did (``recorded_refit.refit_keeping_starts``: the
unit's data, starts and estimator seed, one thread).  Each refit is checked against the recorded
row (its log-likelihood ``fit_objective`` and D2 must be the recorded ones, else the row says so);
then the reported fit's largest ``|beta1_ic|`` and ``|beta0_i|`` and whether one of them is on its
bound (within 1e-9 relative: the projection puts a coordinate exactly on it).

Units are refitted from the smallest ``n`` up and each row is appended to the CSV as soon as its
unit is done, so a stopped run keeps what it finished; ``--resume`` skips the units already in it.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python records/catalogue/laplace-gmoe/boundary.py RUN_DIR OUT.csv [--resume]
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CATALOGUE_FILES = ROOT / "moestat" / "rates" / "catalogue_files"
FIELDS = ["n", "replicate", "status", "truth_check", "fit_objective", "recorded_fit_objective", "D2", "recorded_D2",
          "same_as_recorded", "max_abs_beta1", "max_abs_beta0", "on_box", "cpu_s_unit"]
#: the bound counts as reached within this relative distance (the projection sets it exactly)
RTOL = 1e-9


def _recorded_refit():
    spec = importlib.util.spec_from_file_location("recorded_refit", ROOT / "studies" / "tools" / "recorded_refit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def box_contact(beta0: np.ndarray, beta1: np.ndarray, box) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per fit ``[R]``: the largest ``|beta1_ic|``, the largest ``|beta0_i|`` and whether either reaches
    its bound of ``box`` (a :class:`~moestat.model.mixing.ParameterBox`); ``beta0 [R, k]``, ``beta1 [R, k, d]``."""
    b1 = np.abs(beta1).reshape(beta1.shape[0], -1).max(-1)
    b0 = np.abs(beta0).max(-1)
    return b1, b0, (b1 >= box.beta1 * (1 - RTOL)) | (b0 >= box.beta0 * (1 - RTOL))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    resume = "--resume" in argv
    args = [a for a in argv if a != "--resume"]
    if len(args) != 2:
        print("usage: boundary.py RUN_DIR OUT.csv [--resume]", file=sys.stderr)
        return 2
    run, out = Path(args[0]), Path(args[1])
    # the configuration: summary.json once the run has finished, provenance.json (written first) while it runs
    meta = next((run / f for f in ("summary.json", "provenance.json") if (run / f).is_file()), None)
    if meta is None or not (run / "results.csv").is_file():
        print(f"{run}: not a recorded run (no summary.json or provenance.json, or no results.csv)", file=sys.stderr)
        return 2
    from moestat.rates.config import RatesConfig
    from moestat.rates.resolve import Experiment
    from moestat.rates.sweep import make_units

    config = {k: v for k, v in json.loads(meta.read_text())["config"].items() if k != "n_jobs"}
    if config.get("scenario_file") and not Path(config["scenario_file"]).is_file():
        config["scenario_file"] = str(CATALOGUE_FILES / Path(config["scenario_file"]).name)
    units = sorted(make_units(Experiment.of(RatesConfig.from_dict(config))), key=lambda u: (u.n, u.replicates[0]))
    rows = pd.read_csv(run / "results.csv").set_index(["n", "replicate"])
    extras = pd.read_csv(run / "extras.csv").set_index(["n", "replicate"])
    done = set()
    if resume and out.is_file():
        done = {(int(r["n"]), int(r["replicate"])) for r in csv.DictReader(out.open())}
    new = not (resume and out.is_file())
    rr = _recorded_refit()
    with out.open("w" if new else "a", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        if new:
            w.writeheader()
        for unit in units:
            if all((unit.n, r) in done for r in unit.replicates):
                continue
            if not all((unit.n, r) in rows.index for r in unit.replicates):  # not recorded (yet): a later --resume
                print(f"n = {unit.n}: not in the run's results.csv, skipped", flush=True)
                continue
            t0 = time.process_time()
            r = rr.refit_keeping_starts(unit)
            cpu = time.process_time() - t0
            sc, state, losses = r["scenario"], r["state"], r["losses"]
            P = state["params"]
            b1, b0, on = box_contact(np.asarray(P.beta0), np.asarray(P.beta1), sc.box)
            for i, rep in enumerate(unit.replicates):
                rec, ex = rows.loc[(unit.n, rep)], extras.loc[(unit.n, rep)]
                fo, d2 = float(state["truth"][i]["fit_objective"]), float(losses["D2"][i])
                same = bool(np.isclose(fo, rec["fit_objective"], rtol=1e-9, atol=1e-9)
                            and np.isclose(d2, ex["D2"], rtol=1e-6, equal_nan=True))
                w.writerow({"n": unit.n, "replicate": rep, "status": state["status"][i],
                            "truth_check": state["truth"][i]["truth_check"], "fit_objective": fo,
                            "recorded_fit_objective": float(rec["fit_objective"]), "D2": d2, "recorded_D2": float(ex["D2"]),
                            "same_as_recorded": same, "max_abs_beta1": float(b1[i]), "max_abs_beta0": float(b0[i]),
                            "on_box": bool(on[i]), "cpu_s_unit": round(cpu, 1)})
            fh.flush()
            print(f"n = {unit.n}, replicates {unit.replicates[0]}..{unit.replicates[-1]}: {int(on.sum())} on the box, "
                  f"{cpu:.0f} CPU-s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
