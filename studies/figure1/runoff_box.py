"""Issue 60 scope 1: the run-off atom of the over-specified Figure 1(b) fits, explained by measurement.

Does the least-squares estimate itself run off to the parameter box at these ``n`` (then the
compactness constant of the theorem is the story and the box is part of the setting), or does the
optimiser stop in a valley?  Declared in ``records/declarations/figure1/06-runoff-box.md`` before
the run; writes ``records/figure1/runoff_box/``.

The scenario and starts are the ``fig1b`` preset's perturbed-router unit (d = 4, k* = 3 fitted with
k = 4, dense gate, GELU experts, nu = 0.01, least squares by Levenberg-Marquardt, ``max_iter`` 1000,
near-truth start of scale 0.05), rebuilt with :func:`moestat.rates.sweep.make_units` and drawn with
:func:`moestat.rates.sweep.draw_unit`: the data and start of ``(n, replicate)`` come from
``SeedSequence(seed, spawn_key=(n, replicate, 0 | 1))``, the sweep's own streams, so every arm below
fits the very same ``(X, Y)``.  Arms, per ``(n, replicate)``, each a plain fit of the unit's estimator
(:func:`moestat.rates.truth_check.unit_estimator`, stream 2; no answer-below-truth refit):

* ``B10``, ``B30``, ``B100``: from the sweep's near-truth start on the box ``|beta1_ij| <= B``
  (``ParameterBox(beta1=B)``; beta0 and eta keep the scenario's bounds, 10); ``B10`` is the sweep's fit;
* ``split0``, ``split1`` (box 10): from the truth with true atom ``j`` split into two halves
  (``beta0 - log 2`` each, same ``beta1`` and ``eta``), ``j`` = each non-reference true atom;
* ``extra0`` .. ``extra3`` (box 10): from 4 more near-truth starts of the sweep's scale, streams
  ``SeedSequence(seed, spawn_key=(n, replicate, 3, s))`` (the certificate's start streams).

Per fit: ``(objective - truth's objective on the same data) * n``, ``on_box`` (a ``beta1``
coordinate within ``ON_BOX_RTOL`` = 1e-9 of ``B``, the estimator's own tolerance; ``any_on_box``:
the estimator's ``on_box_``, any free parameter on its bound), ``max_radius``
(``max_i ||beta1_i||``), ``D2`` (:func:`moestat.losses.voronoi.voronoi_loss` with ``"D2"``, the
over-specified loss of the rates' ``voronoi`` column), ``converged``.  The summary
(``--summarise``) gives the objective table, the decision rule's result and the D2 slope per box
bound (:func:`moestat.rates.fit.slope_with_interval`, statistic median, 1000 bootstrap resamples).

Run (two processes, one per size group, then the summary)::

    OMP_NUM_THREADS=1 PYTHONPATH=. nice -n 10 python studies/figure1/runoff_box.py --ns 32000 --out records/figure1/runoff_box
    OMP_NUM_THREADS=1 PYTHONPATH=. nice -n 10 python studies/figure1/runoff_box.py --ns 2000 4000 8000 16000 --out records/figure1/runoff_box
    OMP_NUM_THREADS=1 PYTHONPATH=. python studies/figure1/runoff_box.py --summarise --out records/figure1/runoff_box
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser, positive_int

BOXES = (10.0, 30.0, 100.0)
N_EXTRA = 4
#: ``(objective - truth) * n`` differences below this count as ties (LM stops on ftol).
TOL = 1e-3


def _unit(n: int, reps: int, seed: int):
    """The ``fig1b`` perturbed unit at ``n`` (all replicates in one unit), its scenario, data and starts."""
    from moestat.rates.config import RatesConfig
    from moestat.rates.presets import preset_dict
    from moestat.rates.resolve import build_scenario
    from moestat.rates.sweep import draw_unit, make_units

    d = preset_dict("fig1b") | {"router": ["perturbed"], "n_min": n, "n_max": n, "n_points": 1, "reps": reps,
                                "chunk": reps, "seed": seed}
    (unit,) = make_units(RatesConfig.from_dict(d))
    sc = build_scenario(unit.scenario_key)
    return (unit, sc, *draw_unit(unit, sc))


def _split(T, j: int):
    """The truth with true atom ``j`` split into two halves (the extra atom before the reference)."""
    from moestat.model.mixing import MixingMeasure

    b0 = np.concatenate([T.beta0[:-1], [T.beta0[j]], T.beta0[-1:]])
    b0[[j, T.n_atoms - 1]] -= np.log(2.0)
    return MixingMeasure(b0, np.concatenate([T.beta1[:-1], T.beta1[j:j + 1], T.beta1[-1:]]),
                         np.concatenate([T.eta[:-1], T.eta[j:j + 1], T.eta[-1:]]))


def fit_sizes(args) -> int:
    import torch

    from dataclasses import replace

    from moestat.estimators.lse import ON_BOX_RTOL
    from moestat.losses.voronoi import voronoi_loss
    from moestat.model.mixing import MixingMeasure
    from moestat.rates.truth_check import unit_estimator, unit_start

    torch.set_num_threads(1)
    (args.out / "units").mkdir(parents=True, exist_ok=True)
    for n in args.ns:
        path = args.out / "units" / f"n{n}.json"
        if path.exists():
            print(f"n = {n}: {path} exists, kept", flush=True)
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        unit, sc, X, Y, starts = _unit(n, args.reps, args.seed)
        R = len(unit.replicates)
        Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
        truth_obj = ((Yt - sc.fit_model.predict(Xt, sc.truth)) ** 2).mean(-1).numpy()
        K = sc.model.gate.k_active
        T = sc.truth.numpy()
        arms = {}

        def run(name, init, B=10.0):
            est = unit_estimator(unit, sc, 2)
            est.box = replace(sc.box, beta1=B)
            est.fit(X, Y, init=init)
            P = est.params_
            G = MixingMeasure(np.asarray(P.beta0, float), np.asarray(P.beta1, float), np.asarray(P.eta, float))
            arms[name] = {"B": B, "minus_truth_x_n": ((np.asarray(est.objective_, float) - truth_obj) * n).tolist(),
                          "objective": np.asarray(est.objective_, float).tolist(),
                          "on_box": (np.abs(G.beta1).max((-1, -2)) >= B * (1 - ON_BOX_RTOL)).tolist(),
                          "any_on_box": np.asarray(est.on_box_, bool).tolist(),
                          "max_radius": np.linalg.norm(G.beta1, axis=-1).max(-1).tolist(),
                          "D2": voronoi_loss(G, sc.truth, "D2", K).tolist(),
                          "converged": np.asarray(est.converged_, bool).tolist(),
                          "status": [str(s) for s in est.status_], "n_iter": np.asarray(est.n_iter_, int).tolist()}
            print(f"n = {n} {name}: median (obj - truth) x n {np.median(arms[name]['minus_truth_x_n']):+.4f}, "
                  f"on box {sum(arms[name]['on_box'])}/{R}, median D2 {np.median(arms[name]['D2']):.4g} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)

        for B in BOXES:
            run(f"B{B:g}", starts, B)
        for j in range(T.n_atoms - 1):
            G = _split(T, j)
            assert np.allclose(((Yt - sc.fit_model.predict(Xt, MixingMeasure.stack([G] * R))) ** 2).mean(-1).numpy(), truth_obj)
            run(f"split{j}", MixingMeasure.stack([G] * R))
        for s in range(N_EXTRA):
            ex = [unit_start(unit, sc, n, np.random.default_rng(np.random.SeedSequence(unit.seed, spawn_key=(n, r, 3, s))))
                  for r in unit.replicates]
            run(f"extra{s}", MixingMeasure.stack(ex))
        out = {"n": n, "replicates": list(unit.replicates), "seed": unit.seed, "truth_objective": truth_obj.tolist(),
               "box": {"beta0": sc.box.beta0, "eta": sc.box.eta}, "arms": arms,
               "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"n = {n}: written {path} (wall {out['wall_s']} s, CPU {out['cpu_s']} s)", flush=True)
    return 0


def _classify(u: dict) -> list[dict]:
    """Per replicate of one size: the rule's quantities (all in (objective - truth) * n)."""
    a = u["arms"]
    b10 = ["B10"] + [k for k in a if k.startswith(("split", "extra"))]
    rows = []
    for i, r in enumerate(u["replicates"]):
        on = [a[k]["minus_truth_x_n"][i] for k in b10 if a[k]["on_box"][i]]
        ins = [a[k]["minus_truth_x_n"][i] for k in b10 if not a[k]["on_box"][i]]
        alt = [a[k]["minus_truth_x_n"][i] for k in b10 if k != "B10"]
        best_on, best_in = (min(on) if on else None), (min(ins) if ins else None)
        rows.append({"replicate": r, "B10_on_box": a["B10"]["on_box"][i], "best_on_box": best_on, "best_inside": best_in,
                     "valley": best_on is not None and best_in is not None and best_in < best_on - TOL,
                     "B10_vs_best_start": a["B10"]["minus_truth_x_n"][i] - min(alt),
                     "B": {k: a[k]["minus_truth_x_n"][i] for k in ("B10", "B30", "B100")},
                     # descriptive, not part of the rule: is the inside optimum below the box-100 fit too?
                     "inside_below_B100": best_in is not None and best_in < a["B100"]["minus_truth_x_n"][i] - TOL})
    return rows


def _best7(u: dict) -> dict:
    """Per replicate, the lowest-objective fit among the seven box-10 fits: its D2, radius, on_box, arm."""
    a = u["arms"]
    keys = ["B10"] + [k for k in a if k.startswith(("split", "extra"))]
    idx = [min(keys, key=lambda k: a[k]["minus_truth_x_n"][i]) for i in range(len(u["replicates"]))]
    return {f: [a[k][f][i] for i, k in enumerate(idx)] for f in ("D2", "max_radius", "on_box", "minus_truth_x_n")} | {"arm": idx}


def summarise(args) -> int:
    from moestat.rates.fit import slope_with_interval

    units = sorted((json.loads(p.read_text()) for p in (args.out / "units").glob("n*.json")), key=lambda u: u["n"])
    if not units:
        raise SystemExit(f"no units under {args.out / 'units'}")
    ns = [u["n"] for u in units]
    med = lambda v: float(np.median(v)) if len(v) else None  # noqa: E731
    per_n, lines = [], []
    hdr = (f"{'n':>6} {'on/R':>5} {'run-off':>9} {'stayed':>9} {'#in':>4} {'B10':>8} {'B30':>8} {'B100':>8} "
           f"{'split':>8} {'extra':>8} {'on-in':>8} {'valley':>6} {'<B100':>5} {'B100-B10':>9} {'falls':>6}")
    lines += ["Medians of (objective - truth's objective) * n on the same data, per n (replicates in the JSON):",
              "  run-off / stayed: every box-10 fit (sweep start, 2 splits, 4 extra starts) with / without an atom on the box",
              "  B10 B30 B100: the sweep's start on box B; split / extra: best of the 2 split / 4 extra starts (box 10)",
              "  on-in: median over replicates having both of (best on-box - best inside) box-10 objective; valley: replicates",
              "  whose best inside-box fit is lower than every on-box fit by more than 1e-3; falls: run-off replicates (B10 on",
              "  box) with B10 >= B30 >= B100 (within 1e-3) and B100 < B10 - 1e-3.  valley is out of the replicates having both",
              "  kinds; <B100 (descriptive, not in the rule): valley replicates whose best inside fit is below the B100 fit too", hdr]
    for u in units:
        a, R = u["arms"], len(u["replicates"])
        b10 = ["B10"] + [k for k in a if k.startswith(("split", "extra"))]
        on = [a[k]["minus_truth_x_n"][i] for k in b10 for i in range(R) if a[k]["on_box"][i]]
        ins = [a[k]["minus_truth_x_n"][i] for k in b10 for i in range(R) if not a[k]["on_box"][i]]
        best = lambda pre: [min(a[k]["minus_truth_x_n"][i] for k in a if k.startswith(pre)) for i in range(R)]  # noqa: E731
        cls = _classify(u)
        diffs = [c["best_on_box"] - c["best_inside"] for c in cls if c["best_on_box"] is not None and c["best_inside"] is not None]
        roff = [c for c in cls if c["B10_on_box"]]
        falls = [c["B"]["B30"] <= c["B"]["B10"] + TOL and c["B"]["B100"] <= c["B"]["B30"] + TOL and c["B"]["B100"] < c["B"]["B10"] - TOL
                 for c in roff]
        row = {"n": u["n"], "replicates": R, "B10_on_box": sum(a["B10"]["on_box"]),
               "on_box_per_arm": {k: sum(v["on_box"]) for k, v in a.items()},
               "converged_per_arm": {k: sum(v["converged"]) for k, v in a.items()},
               "median_runoff_fits": med(on), "n_runoff_fits": len(on), "median_stayed_fits": med(ins), "n_stayed_fits": len(ins),
               "median_arm": {k: med(a[k]["minus_truth_x_n"]) for k in ("B10", "B30", "B100")} | {"split": med(best("split")), "extra": med(best("extra"))},
               "median_max_radius": {k: med(v["max_radius"]) for k, v in a.items()},
               "median_D2": {k: med(a[k]["D2"]) for k in ("B10", "B30", "B100")},
               "median_on_minus_inside": med(diffs), "n_both": len(diffs), "valley_replicates": sum(c["valley"] for c in cls),
               "valley_and_below_B100": sum(c["valley"] and c["inside_below_B100"] for c in cls),
               "median_B100_minus_B10_runoff": med([c["B"]["B100"] - c["B"]["B10"] for c in roff]),
               "median_B30_minus_B10_runoff": med([c["B"]["B30"] - c["B"]["B10"] for c in roff]),
               "falls_replicates": int(sum(falls)), "runoff_replicates": len(roff), "replicate_rows": cls,
               "wall_s": u["wall_s"], "cpu_s": u["cpu_s"]}
        per_n.append(row)
        f = lambda x, w=8: f"{x:+{w}.4f}" if x is not None else f"{'-':>{w}}"  # noqa: E731
        lines.append(f"{u['n']:>6} {row['B10_on_box']:>2}/{R:<2} {f(row['median_runoff_fits'], 9)} {f(row['median_stayed_fits'], 9)} "
                     f"{len(ins):>4} {f(row['median_arm']['B10'])} {f(row['median_arm']['B30'])} {f(row['median_arm']['B100'])} "
                     f"{f(row['median_arm']['split'])} {f(row['median_arm']['extra'])} {f(row['median_on_minus_inside'])} "
                     f"{row['valley_replicates']:>3}/{len(diffs):<2} {row['valley_and_below_B100']:>3} {f(row['median_B100_minus_B10_runoff'], 9)} {row['falls_replicates']:>3}/{len(roff):<2}")
    # the declared rule
    runs_off = all((r["median_on_minus_inside"] is None or r["median_on_minus_inside"] <= TOL)
                   and r["median_B100_minus_B10_runoff"] is not None and r["median_B100_minus_B10_runoff"] < -TOL
                   and r["median_B30_minus_B10_runoff"] <= TOL for r in per_n)
    valley_ns = [r["n"] for r in per_n if r["median_on_minus_inside"] is not None and r["median_on_minus_inside"] > TOL]
    valley = len(valley_ns) > len(per_n) / 2
    verdict = "the estimate runs off" if runs_off else ("optimiser valley" if valley else "mixed")
    slopes = {}
    rng = np.random.default_rng(0)
    for k in ("B10", "B30", "B100"):
        s = slope_with_interval(ns, [np.asarray(u["arms"][k]["D2"]) for u in units], rng, 1000, "median")
        slopes[k] = {"slope": s["slope"], "ci_low": s["ci_low"], "ci_high": s["ci_high"]}
    # descriptive, not part of the declared rule: the lowest-objective box-10 fit of the seven per replicate
    best7 = [_best7(u) for u in units]
    s = slope_with_interval(ns, [np.asarray(b["D2"]) for b in best7], np.random.default_rng(0), 1000, "median")
    best7_slope = {"slope": s["slope"], "ci_low": s["ci_low"], "ci_high": s["ci_high"]}
    for row, b in zip(per_n, best7):
        row["best7"] = {"on_box": int(sum(b["on_box"])), "median_D2": med(b["D2"]), "median_max_radius": med(b["max_radius"]),
                        "median_minus_truth_x_n": med(b["minus_truth_x_n"]), "arm": b["arm"]}
    lines += ["", "D2 slope on log n of the per-n median (OLS, 95% interval: bootstrap and t envelope), sweep start:"]
    lines += [f"  box {k[1:]:>3}: {v['slope']:+.3f} [{v['ci_low']:+.3f}, {v['ci_high']:+.3f}]   (theorem: -0.5)" for k, v in slopes.items()]
    lines += [f"  best of the 7 box-10 fits (descriptive): {best7_slope['slope']:+.3f} [{best7_slope['ci_low']:+.3f}, "
              f"{best7_slope['ci_high']:+.3f}]; on the box in " + ", ".join(f"{r['best7']['on_box']}/{r['replicates']}" for r in per_n)
              + " replicates (n = " + ", ".join(str(n) for n in ns) + "), median D2 "
              + ", ".join(f"{r['best7']['median_D2']:.3g}" for r in per_n)]
    lines += ["", f"Decision (declared rule): {verdict}"
              + (f" (valley at n = {valley_ns})" if valley_ns else "")]
    tot_wall, tot_cpu = sum(u["wall_s"] for u in units), sum(u["cpu_s"] for u in units)
    lines.append(f"fits: {sum(len(u['arms']) * len(u['replicates']) for u in units)}; wall {tot_wall:.0f} s, CPU {tot_cpu:.0f} s (summed over sizes)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    (args.out / "table.txt").write_text(text)
    out = {"command": "python studies/figure1/runoff_box.py " + " ".join(sys.argv[1:]), "ns": ns, "tol": TOL, "boxes": BOXES,
           "decision": verdict, "valley_ns": valley_ns, "d2_slopes": slopes, "d2_slope_best7": best7_slope, "per_n": per_n,
           "declaration": "records/declarations/figure1/06-runoff-box.md"}
    (args.out / "runoff_box.json").write_text(json.dumps(out, indent=1) + "\n")
    _figure(args.out / "runoff_box.png", per_n, slopes)
    return 0


def _figure(path: Path, per_n: list[dict], slopes: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ns = np.array([r["n"] for r in per_n], float)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for k, m in zip(("B10", "B30", "B100"), ("o", "s", "^")):
        y = np.array([r["median_D2"][k] for r in per_n])
        s = slopes[k]
        ax.loglog(ns, y, marker=m, label=f"box {k[1:]}: slope {s['slope']:+.2f} [{s['ci_low']:+.2f}, {s['ci_high']:+.2f}]")
    if "best7" in per_n[0]:
        ax.loglog(ns, [r["best7"]["median_D2"] for r in per_n], color="0.5", ls=":", marker="x",
                  label="lowest of the 7 box-10 fits (descriptive)")
    y0 = per_n[0]["median_D2"]["B10"]
    ax.loglog(ns, y0 * (ns / ns[0]) ** -0.5, "k--", lw=1, label="slope -1/2 (Theorem 5)")
    ax.set_xticks(ns, [f"{int(n):,}".replace(",", " ") for n in ns])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("n")
    ax.set_ylabel("median D2 (sweep's near-truth start)")
    ax.set_title("Figure 1(b) over-specified perturbed fit: D2 by box bound |beta1_ij| <= B", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=positive_int, nargs="+", default=[2000, 4000, 8000, 16000, 32000])
    ap.add_argument("--reps", type=positive_int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--summarise", action="store_true", help="read OUT/units/ and write the table, JSON and figure")
    args = ap.parse_args(argv)
    return summarise(args) if args.summarise else fit_sizes(args)


if __name__ == "__main__":
    raise SystemExit(main())
