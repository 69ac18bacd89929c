"""Why the over-specified perturbed-router fits of Figure 1(b) run off: optimum or optimiser?

Refits a few replicates of the Figure 1(b) rate run (``moestat theory --quick`` over-specified
configuration: d = 4, k* = 3, k = 4, dense gate, GELU, nu = 0.01, tau = 0.5, near-truth start of
scale 0.05, least squares with ``max_iter = 1000``) exactly as the sweep does
(:func:`moestat.rates.sweep._draw` / ``_estimator``: same data, start and estimator streams), and
compares on the same data, per replicate, the mean squared residual of

* ``truth``: the true regression function ``g_{G*}`` (a 4-atom measure can equal it);
* ``sweep``: the sweep's fit (its largest ``||beta1_i||`` is the run-off);
* ``split-j``: least squares started *at* the truth with true atom ``j`` split into two halves
  (``beta0 - log 2`` each, no noise), ``j`` = each non-reference atom;
* ``multi``: the best of ``--starts`` more near-truth starts (scale 0.05) and as many random
  starts (:func:`moestat.estimators.starts.random_init`, data-free);
* ``box-B``: least squares from the sweep's start on the box ``|beta1_ij| <= B`` (B = 2, 3, 5,
  20, 1000; the sweep's own box is B = 10, :class:`moestat.model.mixing.ParameterBox`).

Also per replicate: whether the sweep's fit has a ``beta1`` coordinate on its box (``on_box``) and
the population distance ``||g_sweep - g_box-2||^2`` (4096 fresh inputs) beside ``nu / n``.
``--noise-free`` instead refits the sweep's fits at the first ``--ns`` on noise-free responses
``Y = g_{G*}(X)`` (20 000 fresh inputs, ``max_iter = 3000``): if the population objective has no
minimum at the box's edge, the refit returns to the truth (objective at round-off).

A run-off fit below every bounded fit's objective, with the objective still falling as the box
grows, is a genuine least-squares optimum at infinity (the estimator of eq. (10) on the box picks
the box's edge), not an optimisation failure.  Output: ``--json`` (every number)
and one line per replicate::

    OMP_NUM_THREADS=1 PYTHONPATH=. python records/archive/figure1/fig1b_runaway.py \\
        --json records/archive/figure1/fig1b_runaway.json
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser, positive_int


def _sweep_unit(args, n: int):
    """The rate run's unit at ``n`` (the Figure 1(b) configuration of the module docstring) with its
    scenario and the sweep's own data and starts: ``(unit, scenario, X, Y, starts)``."""
    from moestat.rates.config import RatesConfig
    from moestat.rates.resolve import build_scenario
    from moestat.rates.sweep import _draw, make_units

    cfg = RatesConfig.from_dict({"router": ["perturbed"], "setting": "over", "n_min": n, "n_max": n, "n_points": 1,
                                 "reps": args.reps, "estimator": "lse", "max_iter": 1000, "init": "near",
                                 "init_scale": 0.05, "seed": args.seed})
    (unit,) = make_units(cfg)
    sc = build_scenario(unit.scenario_key)
    return (unit, sc, *_draw(unit, sc))


def main(argv=None) -> int:
    import torch

    from moestat.estimators.starts import near_truth_init, random_init
    from moestat.model.mixing import MixingMeasure, ParameterBox
    from moestat.rates.sweep import _estimator

    torch.set_num_threads(1)
    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("--ns", type=positive_int, nargs="+", default=[2000, 8000])
    ap.add_argument("--reps", type=positive_int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--starts", type=positive_int, default=8, help="near-truth and random starts each, per replicate")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--noise-free", action="store_true", help="the noise-free refit of the sweep's fits only")
    args = ap.parse_args(argv)
    if not args.json.parent.is_dir():  # refused before the fits, not after them
        ap.error(f"--json {args.json}: no folder {args.json.parent}")
    if args.noise_free:
        return noise_free(args, argv)
    t0 = time.perf_counter()
    rows = []
    for n in args.ns:
        unit, sc, X, Y, starts = _sweep_unit(args, n)
        R = len(unit.replicates)
        Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)

        def objective(G: MixingMeasure) -> np.ndarray:
            return ((Yt - sc.fit_model.predict(Xt, G)) ** 2).mean(-1).numpy()

        def radius(G: MixingMeasure) -> np.ndarray:
            return np.linalg.norm(G.numpy().beta1, axis=-1).max(-1)

        def fit(init: MixingMeasure, box: ParameterBox | None = None, seed: int = 0):
            est = _estimator(unit, sc, 2)
            est.random_state = seed
            if box is not None:
                est.box = box
            est.fit(X, Y, init=init)
            return est

        truth = objective(sc.truth)
        res = {"truth": (truth, np.zeros(R))}
        est = _estimator(unit, sc, 2)
        est.fit(X, Y, init=starts)
        res["sweep"] = (est.objective_, radius(est.params_))
        T = sc.truth.numpy()
        for j in range(T.n_atoms - 1):  # split true atom j into two halves, no noise
            b0 = np.concatenate([T.beta0[:-1], [T.beta0[j]], T.beta0[-1:]])
            b0[[j, T.n_atoms - 1]] -= np.log(2.0)
            G = MixingMeasure(b0, np.concatenate([T.beta1[:-1], T.beta1[j:j + 1], T.beta1[-1:]]),
                              np.concatenate([T.eta[:-1], T.eta[j:j + 1], T.eta[-1:]]))
            assert np.allclose(objective(MixingMeasure.stack([G] * R)), truth)  # the split is the truth
            e = fit(MixingMeasure.stack([G] * R))
            res[f"split-{j}"] = (e.objective_, radius(e.params_))
        rng = np.random.default_rng(np.random.SeedSequence(args.seed, spawn_key=(n, 99)))
        best_o, best_r = np.full(R, np.inf), np.zeros(R)
        for s in range(2 * args.starts):
            G = MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 0.05, rng) if s % 2 == 0
                                     else random_init(sc.k_fit, sc.d, rng) for _ in range(R)])
            e = fit(G)
            better = e.objective_ < best_o
            best_o, best_r = np.where(better, e.objective_, best_o), np.where(better, radius(e.params_), best_r)
        res["multi"] = (best_o, best_r)
        fits = {}
        for B in (2.0, 3.0, 5.0, 20.0, 1000.0):
            e = fit(starts, box=ParameterBox(beta1=B))
            res[f"box-{B:g}"] = (e.objective_, radius(e.params_))
            fits[B] = e.params_
        on_box = np.abs(est.params_.numpy().beta1).max((-1, -2)) >= sc.box.beta1 * (1 - 1e-9)
        Xh = torch.as_tensor(sc.sample_x(4096, np.random.default_rng(np.random.SeedSequence(args.seed, spawn_key=(n, 98)))))
        pop = ((sc.fit_model.predict(Xh, est.params_) - sc.fit_model.predict(Xh, fits[2.0])) ** 2).mean(-1).numpy()
        for i, r in enumerate(unit.replicates):
            row = {"n": n, "replicate": r, "on_box": bool(on_box[i]), "pop_dist_sweep_box2": float(pop[i]),
                   "nu_over_n": sc.noise_var / n} | {k: {"objective": float(o[i]), "max_radius": float(rad[i]),
                                                  "minus_truth_x_n": float((o[i] - truth[i]) * n)}
                                               for k, (o, rad) in res.items()}
            rows.append(row)
            print(f"n={n} rep {r}: (objective - truth) x n [max radius]  "
                  + "  ".join(f"{k} {v['minus_truth_x_n']:+.3f} [{v['max_radius']:.1f}]" for k, v in row.items()
                              if isinstance(v, dict) and k != "truth")
                  + f"  on box {row['on_box']}  ||g_sweep - g_box2||^2 {row['pop_dist_sweep_box2']:.2e} (nu/n {row['nu_over_n']:.1e})",
                  flush=True)
    keys = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    summary = {"on_box": int(sum(r["on_box"] for r in rows)), "fits": len(rows)} | {k: {"mean_minus_truth_x_n": float(np.mean([r[k]["minus_truth_x_n"] for r in rows])),
                   "median_max_radius": float(np.median([r[k]["max_radius"] for r in rows]))} for k in keys}
    out = {"command": "python records/archive/figure1/fig1b_runaway.py " + " ".join(sys.argv[1:] if argv is None else argv), "ns": args.ns,
           "reps": args.reps, "seed": args.seed, "starts": args.starts, "summary": summary, "rows": rows,
           "seconds": round(time.perf_counter() - t0, 1)}
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"sweep fits with a beta1 coordinate on the box: {summary['on_box']}/{summary['fits']}")
    for k, v in list(summary.items())[2:]:
        print(f"{k:>8}: mean (objective - truth) x n {v['mean_minus_truth_x_n']:+.3f}, median max radius {v['median_max_radius']:.2f}")
    return 0


def noise_free(args, argv) -> int:
    """Refit the sweep's fits (first ``--ns``) on ``Y = g_{G*}(X)``: does the population objective
    pull the run-off atom back?"""
    import torch

    from moestat.rates.sweep import _estimator

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    n = args.ns[0]
    unit, sc, X, Y, starts = _sweep_unit(args, n)
    est = _estimator(unit, sc, 2)
    est.fit(X, Y, init=starts)
    Xp = sc.sample_x(20_000, np.random.default_rng(np.random.SeedSequence(args.seed, spawn_key=(n, 97))))
    Xp = np.stack([Xp] * len(unit.replicates))
    Yp = sc.regression_function(Xp)
    ref = _estimator(unit, sc, 2)
    ref.max_iter = 3000
    ref.fit(Xp, Yp, init=est.params_)
    rows = [{"n": n, "replicate": r, "radii_sweep": np.linalg.norm(est.params_.numpy().beta1[i], axis=-1).tolist(),
             "weights_sweep": np.exp(est.params_.numpy().beta0[i]).tolist(),
             "population_objective_sweep": float(((sc.fit_model.predict(torch.as_tensor(Xp[i]), est.params_[i]).numpy()
                                                   - Yp[i]) ** 2).mean()),
             "radii_refit": np.linalg.norm(ref.params_.numpy().beta1[i], axis=-1).tolist(),
             "weights_refit": np.exp(ref.params_.numpy().beta0[i]).tolist(),
             "objective_refit": float(ref.objective_[i]), "status_refit": ref.status_[i], "n_iter_refit": int(ref.n_iter_[i])}
            for i, r in enumerate(unit.replicates)]
    for row in rows:
        print(f"n={n} rep {row['replicate']}: radii {np.round(row['radii_sweep'], 2).tolist()} (population objective "
              f"{row['population_objective_sweep']:.2e}) -> noise-free refit radii {np.round(row['radii_refit'], 2).tolist()} "
              f"weights {np.round(row['weights_refit'], 3).tolist()} objective {row['objective_refit']:.1e} "
              f"({row['status_refit']}, {row['n_iter_refit']} iterations)")
    args.json.write_text(json.dumps({"command": "python records/archive/figure1/fig1b_runaway.py " + " ".join(sys.argv[1:] if argv is None else argv),
                                     "rows": rows, "seconds": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
