"""Why the sigmoid arm's multi-atom error of ``sigmoid-vs-softmax`` does not fall: its fits refitted.

The recorded run (``records/catalogue/sigmoid-vs-softmax``, issue 33) has a flat ``param_multi``
for the sigmoid gate (slope +0.01 [-0.34, 0.36]) and a falling one for the softmax gate (-0.40
[-0.81, 0.01]).  ``param_multi`` (:func:`moestat.losses.voronoi.cell_parameter_errors`) is, over the
Voronoi cells of ``omega = (beta1, eta)`` shared by several fitted atoms, the largest root mean square
distance ``sqrt(sum_{A_j} w_i ||omega_i - omega*_j||^2 / sum_{A_j} w_i)`` with ``w_i = exp(beta0_i)``
for *both* gates: the softmax mass of Nguyen, Ho & Rinaldo (2024), eq. (13).  A sigmoid gate has no
normalisation and no reference atom; its atom ``i`` is switched on at ``x`` by
``sigmoid(beta0_i + beta1_i^T x)``, which ``exp(beta0_i)`` does not measure.

Rule, fixed before any fitted parameter was looked at: **all 12 replicates at n = 1 000 and at
n = 32 000 of both arms** (the smallest and the largest n of the run; the sigmoid arm first), each
refitted exactly as the sweep fitted it, its whole work unit at once (:func:`refit_unit`:
:func:`moestat.rates.sweep.run_unit`'s steps, from :func:`moestat.rates.sweep.recorded_unit`).  Every
refit's loss columns, objective and truth sum of squares are compared with its ``results.csv`` row
(``max_rel_diff``) before anything is reported.

Hypotheses, written before the refits (counted per arm and n by :func:`summarise`):

* **H1** the extra atom is switched off and its arbitrary parameters carry ``param_multi``: the atom
  with the largest share ``w_i ||omega_i - omega*_j||^2`` of the worst shared cell (the *carrier*) has
  a mean gate weight over the sample below :data:`OFF_WEIGHT`;
* **H2** two atoms share a cell with comparable weights and their split does not shrink: not H1, and
  the shared cell's atoms all have mean gate weight >= :data:`OFF_WEIGHT` with smallest / largest
  >= :data:`COMPARABLE`; whether the split shrinks is read from the per-n medians of the
  carrier's distance;
* **H3** anything else (counted; the fits are listed for a description).

Per fit: the fitted atoms, each atom's mean gate weight on its own sample (the gate's
``weights``: ``sigmoid(beta0 + beta1^T x)``, or the softmax probability), ``exp(beta0)``, its
Voronoi cell, its distance to the cell's true atom per block (``beta1``, ``eta``) and together, the
carrier, the fit's and the truth's sum of squares, and the multi-atom error with the mean gate
weight in place of ``exp(beta0)`` (``weighted_multi_gate``), whose slope over the refitted n is
reported (median per n, log-log; two n give the slope of the medians).  The summary also counts
the fits with a parameter on the estimator's box (:data:`BOX`) and gives the truth's own mean gate
weights on the run's held-out inputs, for scale.  ``--resummarise`` recomputes the summary from the
fits already stored (it refits nothing).

Added after the sigmoid arm's n = 1 000 fits had been read (so not part of the rule above; the
n = 32 000 fits were not yet fitted): the expert ``eta2 * GELU(eta1^T x)`` is linear in ``eta2``,
so a true atom split into two atoms with its ``beta1`` and ``eta1`` and ``eta2`` values that combine
to ``eta2*`` reproduces the truth's regression function exactly, for *both* gates (:func:`flat_set`,
checked numerically by :func:`flat_set_losses`).  Under the softmax gate the split can put both
atoms on the true atom (mass split, ``param_multi = 0``); under the sigmoid gate each atom must keep
the whole true gate and ``eta2_a + eta2_b = eta2*``, so ``param_multi >= |eta2*| / 2 = 0.75`` on that
set unless an atom's ``exp(beta0)`` vanishes.  :func:`pair_metrics` measures each fit's shared cell
against that set.

Usage (from the repository root; about 15 CPU-minutes per arm at load, the n = 32 000 units dominate)::

    OMP_NUM_THREADS=1 nice -n 10 python records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py sigmoid \\
        --json records/catalogue/sigmoid-vs-softmax/gate_contrast_diag_sigmoid.json
    OMP_NUM_THREADS=1 nice -n 10 python records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py softmax \\
        --json records/catalogue/sigmoid-vs-softmax/gate_contrast_diag_softmax.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
RUNS = ROOT / "records" / "catalogue" / "sigmoid-vs-softmax"
SCENARIO_DIR = ROOT / "moestat" / "rates" / "catalogue_files"
#: The refitted sample sizes and replicates (the rule of the module docstring).
NS = (1000, 32000)
REPLICATES = tuple(range(12))
#: A mean gate weight below this is "switched off" (H1); the truth's atoms have mean weights 0.3-0.7.
OFF_WEIGHT = 0.05
#: Smallest / largest mean gate weight of a shared cell at or above this is "comparable" (H2).
COMPARABLE = 0.2
#: The estimator's parameter box of both arms (``ParameterBox(10, 10, 10)``: every |coordinate| <= 10).
BOX = 10.0
#: The shared cell's distances to the set of exact representations (:func:`pair_metrics`).
PAIR_KEYS = ("beta1_err", "eta1_err", "beta0_err", "eta2_err", "cell_gate_sum", "far_gate_weight", "far_abs_eta2",
             "far_exp_beta0", "far_dist")
#: Post hoc (chosen after the n = 32 000 fits were read): the far atom's expert is "off" when its gate is on
#: (mean weight >= OFF_WEIGHT) and ``|eta2| < EXPERT_OFF * |eta2*|`` (a quarter of the true atom's scale).
EXPERT_OFF = 0.25
#: The columns compared with the recorded row.
COMPARED = ("objective", "voronoi", "param_single", "param_multi", "mass", "regression_l2", "fit_objective",
            "truth_objective")


def refit_unit(unit) -> dict:
    """Fit ``unit`` (a :class:`moestat.rates.sweep.WorkUnit`) as :func:`moestat.rates.sweep.run_unit` does.

    Returns ``X [R, n, d]``, the scenario, ``state`` (:func:`moestat.rates.truth_check.against_truth`:
    the reported fits ``params`` ``[R]`` and their truth columns) and ``losses`` (each ``[R]``).
    """
    from moestat.rates import truth_check as tc
    from moestat.rates.sweep import _draw_with_mean, _holdout, _scenario, compute_losses
    from studies.tools.recorded_refit import one_thread

    with one_thread():  # the sweep's single-thread arithmetic, hence its numbers
        sc = _scenario(unit.scenario_key)
        holdout = _holdout(unit.scenario_key, unit.holdout)
        X, Y, G0, mean = _draw_with_mean(unit, sc)
        est = tc.fit_starts(unit, sc, X, Y, G0, 2)
        state = tc.against_truth(unit, sc if mean is None else sc.knowing_mean(X, mean), X, Y, est)
        tc.more_starts(unit, sc, X, Y, state, holdout)  # nothing for this run (no extra starts); kept as the sweep
        losses = compute_losses(sc, state["params"], holdout)
    return {"X": X, "scenario": sc, "state": state, "losses": losses}


def mean_gate_weights(scenario, X: np.ndarray, G) -> np.ndarray:
    """Each atom's gate weight averaged over the sample ``X [n, d]``, ``[k]`` (unbatched ``G``)."""
    import torch

    gate = scenario.fit_model.gate
    w = gate.weights(torch.as_tensor(X), torch.as_tensor(G.beta0), torch.as_tensor(G.beta1))
    return w.mean(dim=-2).numpy()


def anatomy(scenario, X: np.ndarray, G) -> dict:
    """One fit ``G`` (unbatched) against the truth: per atom, cells and the multi-atom errors."""
    from moestat.losses.voronoi import _distances, _prepare, cell_sizes, weighted_multi_error

    T = scenario.truth
    F, Tn = _prepare(G, T, False)
    db1, deta, dist = _distances(F, Tn, "euclidean")
    cells = np.argmin(dist, axis=-1)
    sizes = cell_sizes(cells, Tn.n_atoms)
    own = dist[np.arange(len(cells)), cells]
    exp_b0 = np.exp(F.beta0)
    gw = mean_gate_weights(scenario, X, F)
    shared = [j for j in range(Tn.n_atoms) if sizes[j] > 1]
    # the worst shared cell as param_multi takes it (exp(beta0) weights) and its largest share
    carrier, worst, share = None, None, None
    if shared:
        rms = {j: np.sqrt((exp_b0 * own**2)[cells == j].sum() / exp_b0[cells == j].sum()) for j in shared}
        worst = max(rms, key=rms.get)
        members = np.flatnonzero(cells == worst)
        contrib = exp_b0[members] * own[members] ** 2
        carrier = int(members[np.argmax(contrib)])
        share = float(contrib.max() / contrib.sum())
    atoms = [{"beta0": float(F.beta0[i]), "beta1": F.beta1[i].tolist(), "eta": F.eta[i].tolist(),
              "exp_beta0": float(exp_b0[i]), "mean_gate_weight": float(gw[i]), "cell": int(cells[i]),
              "cell_size": int(sizes[cells[i]]), "dist_beta1": float(db1[i, cells[i]]),
              "dist_eta": float(deta[i, cells[i]]), "dist": float(own[i])} for i in range(len(cells))]
    return {"atoms": atoms, "shared_cell": None if worst is None else int(worst), "carrier": carrier,
            "carrier_share": share,
            "param_multi_recomputed": float(weighted_multi_error(own, exp_b0, cells, sizes)),
            "weighted_multi_gate": float(weighted_multi_error(own, gw, cells, sizes))}


def truth_atoms(arm: str) -> list[dict]:
    """The arm's true atoms as plain numbers (``beta0``, ``beta1``, ``eta``)."""
    sc = _arm_scenario(arm)[1]
    T = sc.truth
    return [{"beta0": float(T.beta0[j]), "beta1": T.beta1[j].tolist(), "eta": T.eta[j].tolist()} for j in range(T.n_atoms)]


def _arm_scenario(arm: str):
    from moestat.rates.sweep import _scenario, recorded_unit

    unit, _ = recorded_unit(RUNS / arm, NS[0], 0, scenario_dir=SCENARIO_DIR)
    return unit, _scenario(unit.scenario_key)


def pair_metrics(fit: dict, truth: list[dict], arm: str) -> dict:
    """How far the shared cell of ``fit`` is from the set of exact representations of the true atom.

    The expert ``eta2 * GELU(eta1^T x)`` is linear in ``eta2``, so the true regression function is
    reproduced exactly by two atoms with the true atom's ``beta1`` and ``eta1`` whose ``eta2`` combine
    to ``eta2*`` (:func:`flat_set`): with a sigmoid gate each keeps the *whole* true gate (same
    ``beta0`` too) and ``eta2_a + eta2_b = eta2*``; with a softmax gate their masses add up,
    ``exp(beta0_a) + exp(beta0_b) = exp(beta0*)``, and the mass-weighted mean of ``eta2`` is ``eta2*``.
    Returned (``None`` where the fit has no shared cell): ``beta1_err`` and ``eta1_err`` (largest over
    the cell's atoms), ``beta0_err`` (sigmoid: largest ``|beta0_i - beta0*|``; softmax: the mass gap
    ``|sum exp(beta0_i) - exp(beta0*)|``), ``eta2_err`` (sigmoid: ``sum eta2_i - eta2*``; softmax:
    mass-weighted mean minus ``eta2*``) and the cell's summed mean gate weight ``cell_gate_sum``.
    """
    j = fit["shared_cell"]
    if j is None:
        return None
    t = truth[j]
    cell = [a for a in fit["atoms"] if a["cell"] == j]
    b1 = max(float(np.linalg.norm(np.subtract(a["beta1"], t["beta1"]))) for a in cell)
    e1 = max(float(np.linalg.norm(np.subtract(a["eta"][:-1], t["eta"][:-1]))) for a in cell)
    m = np.array([a["exp_beta0"] for a in cell])
    e2 = np.array([a["eta"][-1] for a in cell])
    if arm == "sigmoid":
        b0 = max(abs(a["beta0"] - t["beta0"]) for a in cell)
        eta2 = float(e2.sum() - t["eta"][-1])
    else:
        b0 = float(abs(m.sum() - np.exp(t["beta0"])))
        eta2 = float((m * e2).sum() / m.sum() - t["eta"][-1])
    far = max(cell, key=lambda a: a["dist"])  # the cell's atom farthest from the true atom
    return {"beta1_err": b1, "eta1_err": e1, "beta0_err": float(b0), "eta2_err": eta2,
            "cell_gate_sum": float(sum(a["mean_gate_weight"] for a in cell)),
            "far_gate_weight": far["mean_gate_weight"], "far_abs_eta2": abs(far["eta"][-1]),
            "far_exp_beta0": far["exp_beta0"], "far_dist": far["dist"], "eta2_star": t["eta"][-1]}


def flat_set(arm: str, t: float):
    """A three-atom measure with the truth's regression function whose first true atom is split in two.

    Sigmoid: two copies of atom 0 with ``eta2 = t`` and ``eta2* - t`` (each with the whole true gate)
    and atom 1.  Softmax: two copies of atom 0 with masses ``p = 1/2`` of ``exp(beta0*)`` each and
    ``eta2 = t``, ``2 eta2* - t`` (mean ``eta2*``), and the reference last.  ``t = eta2*`` (softmax)
    puts both copies on the true atom; no ``t`` does for the sigmoid gate.
    """
    from moestat.model.mixing import MixingMeasure

    T = _arm_scenario(arm)[1].truth
    e = T.eta[0].copy()
    a, b = e.copy(), e.copy()
    if arm == "sigmoid":
        a[-1], b[-1] = t, e[-1] - t
        return MixingMeasure(np.r_[T.beta0[0], T.beta0[0], T.beta0[1]], np.vstack([T.beta1[0], T.beta1[0], T.beta1[1]]),
                             np.vstack([a, b, T.eta[1]]))
    a[-1], b[-1] = t, 2 * e[-1] - t
    half = T.beta0[0] + np.log(0.5)
    return MixingMeasure(np.r_[half, half, T.beta0[1]], np.vstack([T.beta1[0], T.beta1[0], T.beta1[1]]),
                         np.vstack([a, b, T.eta[1]]))


def flat_set_losses(arm: str, ts=(-2.0, 0.0, 0.75, 1.5, 3.0)) -> list[dict]:
    """The run's loss columns of :func:`flat_set` for each ``t``, on the run's held-out inputs."""
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.sweep import _holdout

    unit, sc = _arm_scenario(arm)
    H = _holdout(unit.scenario_key, unit.holdout)
    out = []
    for t in ts:
        G = flat_set(arm, t)
        lc = sc.loss_columns(MixingMeasure.stack([G]), H)
        out.append({"t": float(t), **{k: float(lc[k][0]) for k in ("regression_l2", "param_multi", "D2_gate")}})
    return out


def hypothesis(fit: dict) -> str:
    """H1, H2 or H3 for one fit record (the rules of the module docstring)."""
    if fit["carrier"] is None:
        return "H3"
    atoms = fit["atoms"]
    if atoms[fit["carrier"]]["mean_gate_weight"] < OFF_WEIGHT:
        return "H1"
    w = [a["mean_gate_weight"] for a in atoms if a["cell"] == fit["shared_cell"]]
    if min(w) >= OFF_WEIGHT and min(w) / max(w) >= COMPARABLE:
        return "H2"
    return "H3"


def at_box(fit: dict, bound: float = BOX) -> bool:
    """Whether any fitted parameter of ``fit`` lies on the estimator's box ``|value| <= bound`` (to 1e-6)."""
    return any(abs(v) >= bound - 1e-6 for a in fit["atoms"] for v in [a["beta0"], *a["beta1"], *a["eta"]])


def log_slope(ns, values) -> float:
    """Least-squares slope of ``log(median value per n)`` on ``log n``."""
    ns = np.asarray(ns, float)
    return float(np.polyfit(np.log(ns), np.log(np.asarray(values, float)), 1)[0])


def summarise(fits: list[dict]) -> dict:
    """Per n: hypothesis counts, medians of the carrier's weight and distance, of ``param_multi`` and of
    the gate-weighted multi-atom error; and the slopes of those medians over the refitted n."""
    df = pd.DataFrame([{"n": f["n"], "h": hypothesis(f), "pm": f["refit"]["param_multi"],
                        "wg": f["weighted_multi_gate"],
                        "cw": np.nan if f["carrier"] is None else f["atoms"][f["carrier"]]["mean_gate_weight"],
                        "cd": np.nan if f["carrier"] is None else f["atoms"][f["carrier"]]["dist"],
                        "ce": np.nan if f["carrier"] is None else f["atoms"][f["carrier"]]["exp_beta0"],
                        "minw": min(a["mean_gate_weight"] for a in f["atoms"]),
                        "near": min((a["dist"] for a in f["atoms"] if a["cell"] == f["shared_cell"]), default=np.nan),
                        "box": at_box(f), "e2star": abs(f["pair"]["eta2_star"]) if f.get("pair") else np.nan,
                        **{k: (np.nan if not f.get("pair") else f["pair"][k]) for k in PAIR_KEYS}} for f in fits])
    per_n = {}
    for n, g in df.groupby("n"):
        per_n[str(int(n))] = {
            "fits": int(len(g)), **{h: int((g.h == h).sum()) for h in ("H1", "H2", "H3")},
            "median_param_multi": float(g.pm.median()), "median_weighted_multi_gate": float(g.wg.median()),
            "median_carrier_gate_weight": float(g.cw.median()), "median_carrier_exp_beta0": float(g.ce.median()),
            "median_carrier_dist": float(g.cd.median()), "median_smallest_gate_weight": float(g.minw.median()),
            "median_nearest_shared_dist": float(g.near.median()),
            "fits_with_an_atom_at_the_box": int(g.box.sum()),
            "gate_on_expert_off": int(((g.far_gate_weight >= OFF_WEIGHT) & (g.far_abs_eta2 < EXPERT_OFF * g.e2star)).sum()),
            **{f"median_abs_{k}": float(g[k].abs().median()) for k in PAIR_KEYS if g[k].notna().any()},
        }
    ns = sorted(int(n) for n in per_n)
    slopes = {}
    if len(ns) > 1:
        slopes = {"param_multi": log_slope(ns, [per_n[str(n)]["median_param_multi"] for n in ns]),
                  "weighted_multi_gate": log_slope(ns, [per_n[str(n)]["median_weighted_multi_gate"] for n in ns])}
    return {"per_n": per_n, "slopes_of_medians": slopes}


def diagnose(arm: str, ns=NS, replicates=REPLICATES) -> list[dict]:
    """Refit every unit of ``arm`` holding ``replicates`` at ``ns``; one record per fit of those units.

    A unit is refitted whole (its replicates share one batched fit), so a smaller ``replicates``
    (the test's) still gives every replicate of the units that hold them.
    """
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.sweep import recorded_unit

    run = RUNS / arm
    rec = pd.read_csv(run / "results.csv").set_index(["n", "replicate"])
    fits = []
    for n in ns:
        done = set()
        for r in replicates:
            if r in done:
                continue
            unit, _ = recorded_unit(run, n, r, scenario_dir=SCENARIO_DIR)
            done.update(unit.replicates)
            t0 = time.perf_counter()
            out = refit_unit(unit)
            secs = time.perf_counter() - t0
            sc, state, losses = out["scenario"], out["state"], out["losses"]
            P = state["params"]
            for i, rr in enumerate(unit.replicates):
                G = MixingMeasure(P.beta0[i], P.beta1[i], P.eta[i])
                refit = {c: float(losses[c][i]) for c in COMPARED if c in losses}
                refit["objective"] = float(state["objective"][i])
                refit["fit_objective"] = float(state["truth"][i]["fit_objective"])
                refit["truth_objective"] = float(state["truth"][i]["truth_objective"])
                recorded = {c: float(rec.loc[(n, rr), c]) for c in COMPARED}
                rel = max(abs(refit[c] - recorded[c]) / max(abs(recorded[c]), 1e-300) for c in COMPARED)
                fits.append({"arm": arm, "n": n, "replicate": rr, "status": str(state["status"][i]),
                             "refit": refit, "recorded": recorded, "max_rel_diff": float(rel),
                             "unit_seconds": secs, **anatomy(sc, out["X"][i], G)})
            print(f"{arm} n={n} replicates {unit.replicates}: {secs:.1f} s, max rel diff "
                  f"{max(f['max_rel_diff'] for f in fits[-len(unit.replicates):]):.2e}", file=sys.stderr, flush=True)
    return fits


def truth_gate_weights(arm: str) -> list[float]:
    """The true atoms' mean gate weights on the run's held-out inputs (4 096 draws of the input law)."""
    from moestat.rates.sweep import _holdout, _scenario, recorded_unit

    unit, _ = recorded_unit(RUNS / arm, NS[0], 0, scenario_dir=SCENARIO_DIR)
    sc = _scenario(unit.scenario_key)
    return [float(v) for v in mean_gate_weights(sc, _holdout(unit.scenario_key, unit.holdout), sc.truth)]


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))  # this checkout's moestat
    from moestat.cli.common import ArgumentParser

    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("arm", choices=("sigmoid", "softmax"), help="the run folder of sigmoid-vs-softmax to refit")
    p.add_argument("--json", required=True, type=Path, help="where to write the findings (standard JSON)")
    p.add_argument("--resummarise", action="store_true",
                   help="refit nothing: recompute the summary of the fits already in --json (a pure function of them)")
    p.add_argument("--ns", default=",".join(str(n) for n in NS), help="comma list of n (default: the rule's)")
    args = p.parse_args(argv)
    try:
        ns = tuple(int(v) for v in args.ns.split(","))
    except ValueError:
        print(f"gate_contrast_diag: --ns must be a comma list of integers, got {args.ns!r}", file=sys.stderr)
        return 2
    if not args.json.parent.is_dir():
        print(f"gate_contrast_diag: no folder {args.json.parent}", file=sys.stderr)
        return 2
    if args.resummarise:
        if not args.json.is_file():
            print(f"gate_contrast_diag: no {args.json} to resummarise", file=sys.stderr)
            return 2
        out = json.loads(args.json.read_text())
        out["truth"] = truth_atoms(args.arm)
        for f in out["fits"]:
            f["pair"] = pair_metrics(f, out["truth"], args.arm)
        out["summary"] = summarise(out["fits"])
        out["truth_mean_gate_weight"] = truth_gate_weights(args.arm)
        out["flat_set"] = flat_set_losses(args.arm)
        out["summary_by"] = {"command": "python records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py " + " ".join(
            sys.argv[1:] if argv is None else argv), "code_commit": _commit(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        args.json.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
        return 0
    t0, cpu0 = time.time(), time.process_time()
    fits = diagnose(args.arm, ns)
    for f in fits:
        f["pair"] = pair_metrics(f, truth_atoms(args.arm), args.arm)
    out = {
        "command": "OMP_NUM_THREADS=1 nice -n 10 python records/catalogue/sigmoid-vs-softmax/gate_contrast_diag.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "code_commit": _commit(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t0)),
        "wall_s": time.time() - t0, "cpu_s": time.process_time() - cpu0,
        "rule": "all 12 replicates at n = 1 000 and at n = 32 000 (fixed before any fitted parameter was read)",
        "off_weight": OFF_WEIGHT, "comparable": COMPARABLE,
        "max_rel_diff": max(f["max_rel_diff"] for f in fits),
        "truth_mean_gate_weight": truth_gate_weights(args.arm), "truth": truth_atoms(args.arm),
        "flat_set": flat_set_losses(args.arm), "summary": summarise(fits), "fits": fits,
    }
    args.json.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
