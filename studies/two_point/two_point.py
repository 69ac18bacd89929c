"""Theorems 2/3 vs Theorem 6 of Nguyen et al. (2024), tested the way they are stated.

Two measurements, both routers, the default exact-specified scenario (``make_scenario(router,
"exact")``: d = 4, k* = 3, dense gate, GELU experts, nu = 0.01, tau = 0.5):

1. **Le Cam two-point lower bound** along the proof's radial witness (App. B.2):
   :func:`moestat.theorems.judges.two_point.two_point_curve` for n = 1e2 .. 1e7 (no fitting: the bound is a
   property of the model).  Loss ``D_{1,1}`` for the vanilla router (Theorem 2), ``D_3`` (eq. 16,
   Theorem 6) for the perturbed one.
2. **The mechanism per fit**: :func:`moestat.theorems.judges.two_point.radial_mechanism` -- the radial and
   directional beta1 errors of the near-truth start and of the least-squares fit, paired per
   replicate, on the rates engine's streams.

Writes ``two_point.json`` and ``two_point.png`` (and ``.pdf``) into ``--out``::

    OMP_NUM_THREADS=1 python studies/two_point/two_point.py --out records/two_point
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser, positive_int
from moestat.data.synthetic import make_scenario
from moestat.io import atomic_write_json
from moestat.rates.fit import slope_with_interval
from moestat.theorems.judges.two_point import loglog_slope, radial_mechanism, two_point_curve

ROUTERS = ("cosine", "perturbed")
LABEL = {"cosine": "vanilla cosine", "perturbed": "perturbed cosine (tau = 0.5)"}


def _mean_2se(a: np.ndarray) -> tuple[float, float]:
    a = np.asarray(a, np.float64)
    return float(a.mean()), float(2.0 * a.std(ddof=1) / np.sqrt(a.size))


def bound_part(args) -> dict:
    ns = np.logspace(2, 7, 21)
    ts = np.logspace(-6, 0, args.n_t)
    out = {}
    for router in ROUTERS:
        t0 = time.perf_counter()
        c = two_point_curve(make_scenario(router, "exact"), ns, ts, n_mc=args.n_mc, seed=args.seed)
        rec = c.to_dict()
        inner = c.interior()
        tail = inner & (c.ns >= 1e5)
        rec["slope_interior"] = loglog_slope(c.ns, c.lower_bound, inner)
        rec["slope_tail_n_ge_1e5"] = loglog_slope(c.ns, c.lower_bound, tail)
        rec["slope_tail_conservative"] = loglog_slope(c.ns, c.lower_bound_low, tail)
        rec["ratio_last_first"] = float(c.lower_bound[-1] / c.lower_bound[0])
        rec["kappa_max"] = float(c.kappa.max())
        rec["kappa_se_max"] = float(c.kappa_se.max())
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        out[router] = rec
        print(f"[two-point] {router}: LB {c.lower_bound[0]:.4g} (n=1e2) -> {c.lower_bound[-1]:.4g} (n=1e7), "
              f"slope interior {rec['slope_interior']:.3f}, tail {rec['slope_tail_n_ge_1e5']:.3f}, "
              f"max kappa {rec['kappa_max']:.3g} ({rec['seconds']} s)", flush=True)
    return out


def mechanism_part(args) -> dict:
    ns = [int(v) for v in np.unique(np.round(np.logspace(3, np.log10(args.n_max), args.n_points)))]
    out = {"ns": ns, "reps": args.reps, "init_scale": args.init_scale, "seed": args.seed, "routers": {}}
    for router in ROUTERS:
        sc = make_scenario(router, "exact")
        free = [j for j in range(sc.truth.n_atoms) if np.linalg.norm(sc.truth.beta1[j]) > 0]
        rows = []
        per_n = {k: [] for k in ("start_radial", "fit_radial", "start_direction", "fit_direction", "fit_loss",
                                 "fit_loss_true_radius")}
        for n in ns:
            t0 = time.perf_counter()
            m = radial_mechanism(sc, n, args.reps, seed=args.seed, init_scale=args.init_scale, max_iter=args.max_iter)
            # per replicate: the largest over the atoms with a direction (the reference's beta1 = 0 is fixed)
            v = {k: np.abs(m[k][:, free]).max(axis=1) for k in ("start_radial", "fit_radial", "start_direction",
                                                                  "fit_direction")}
            v["fit_loss"], v["fit_loss_true_radius"] = m["fit_loss"], m["fit_loss_true_radius"]
            for k in per_n:
                per_n[k].append(v[k])
            moved = np.abs(m["fit_radial"][:, free] - m["start_radial"][:, free])  # [reps, atoms]
            diff = v["fit_radial"] - v["start_radial"]
            row = {"n": n, "converged": int(m["converged"].sum()), "seconds": round(time.perf_counter() - t0, 1),
                   "radius_moved_max": float(moved.max()), "radius_moved_median": float(np.median(moved)),
                   # strictly below, beyond round-off (a fit that keeps the radius ties with its start)
                   "fit_radial_below_start": int((v["fit_radial"] < v["start_radial"] - 1e-12).sum()),
                   "fit_radial_above_start": int((v["fit_radial"] > v["start_radial"] + 1e-12).sum()),
                   "paired_radial_diff": _mean_2se(diff)}
            for k, a in v.items():
                row[k] = _mean_2se(a)
            rows.append(row)
            print(f"[mechanism] {router} n={n}: |radial| start {row['start_radial'][0]:.4f} fit {row['fit_radial'][0]:.4f} "
                  f"(paired diff {diff.mean():+.4f} +- {row['paired_radial_diff'][1]:.4f}, radius moved max "
                  f"{row['radius_moved_max']:.2e}); direction start {row['start_direction'][0]:.4f} fit "
                  f"{row['fit_direction'][0]:.4f}; {row['converged']}/{args.reps} converged ({row['seconds']} s)", flush=True)
        rng = np.random.default_rng(np.random.SeedSequence([args.seed, 34]))
        slopes = {}
        for k in ("fit_radial", "fit_direction", "fit_loss", "fit_loss_true_radius"):
            s = slope_with_interval(ns, per_n[k], rng, n_boot=1000)
            slopes[k] = {"slope": s["slope"], "ci_low": s["ci_low"], "ci_high": s["ci_high"]}
        out["routers"][router] = {"rows": rows, "slopes": slopes,
                                  "per_replicate": {k: [a.tolist() for a in vals] for k, vals in per_n.items()}}
        print(f"[mechanism] {router} slopes: " + ", ".join(f"{k} {v['slope']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"
                                                           for k, v in slopes.items()), flush=True)
    # the least-squares fit (Levenberg-Marquardt) of the vanilla router keeps each radius by design
    # (levenberg_marquardt._retract_radius: the objective is flat along it); plain SGD has no such
    # step, so it shows what the gradient alone does to the radius (PDE (4): orthogonal to beta1)
    sc = make_scenario("cosine", "exact")
    free = [j for j in range(sc.truth.n_atoms) if np.linalg.norm(sc.truth.beta1[j]) > 0]
    m = radial_mechanism(sc, args.sgd_n, args.sgd_reps, seed=args.seed, init_scale=args.init_scale, estimator="sgd",
                         max_iter=args.max_iter)
    step = (m["fit_radial"] - m["start_radial"])[:, free]
    out["sgd_cosine"] = {"n": args.sgd_n, "reps": args.sgd_reps, "radius_change_min": float(step.min()),
                         "radius_change_max": float(step.max()), "radius_change_mean": float(step.mean()),
                         "start_direction": _mean_2se(m["start_direction"][:, free].max(axis=1)),
                         "fit_direction": _mean_2se(m["fit_direction"][:, free].max(axis=1)),
                         "converged": int(m["converged"].sum())}
    print(f"[mechanism] cosine, sgd, n={args.sgd_n}: radius change per atom in [{step.min():.2e}, {step.max():.2e}]", flush=True)
    return out


def figure(rec: dict, stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.plotting import PALETTE, curve_handle, legend, save_figure

    col = {"cosine": PALETTE[1], "perturbed": PALETTE[0]}
    fig, axes = plt.subplots(2, 2, figsize=(11.5, 8.6))
    axes = axes.ravel()
    ax = axes[0]
    hs, ls = [], []
    for router in ROUTERS:
        b = rec["two_point"][router]
        ns, lb = np.array(b["ns"]), np.array(b["lower_bound"])
        ax.fill_between(ns, b["lower_bound_low"], b["lower_bound_high"], color=col[router], alpha=0.25, lw=0)
        ax.plot(ns, lb, "o-", color=col[router], ms=3.5, lw=1.1)
        hs.append(curve_handle(col[router], band=True))
        slope = b["slope_tail_n_ge_1e5"]
        ls.append(f"{LABEL[router]}" + ("" if slope is None or not np.isfinite(slope) else f": slope {slope:.3f} (n >= 1e5)")
                  + (": flat, KL = 0" if router == "cosine" else ""))
    ref = rec["two_point"]["perturbed"]
    n0 = np.array(ref["ns"])
    ax.plot(n0, ref["lower_bound"][-1] * (n0 / n0[-1]) ** -0.5, ":", color="0.4", lw=1)
    hs.append(curve_handle("0.4", marker=None, line=":"))
    ls.append("n^-1/2 (Theorem 6's rate)")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="two-point lower bound on minimax E D",
           title="(a) Le Cam bound along the radial witness")
    legend(ax, hs, ls, fontsize=7.5, loc="lower left")
    mech = rec["mechanism"]
    ns = np.array(mech["ns"])
    for ax, key, title in ((axes[1], "radial", "(b) radial error | ||b1_hat|| - ||b1*|| |"),
                           (axes[2], "direction", "(c) direction error || u_hat - u* ||")):
        hs, ls = [], []
        # both routers start from the same draws (the engine's streams do not depend on the router)
        curves = [("start", "cosine", "0.45", "s", "--", "start (both routers)", 0.93)]
        curves += [("fit", r, col[r], "o", "-", f"{LABEL[r].split(' (')[0]}, fit", f) for r, f in zip(ROUTERS, (1.0, 1.07))]
        for tag, router, c, mk, lsty, label, shift in curves:
            rows = mech["routers"][router]["rows"]
            m = np.array([r[f"{tag}_{key}"][0] for r in rows])
            e = np.array([r[f"{tag}_{key}"][1] for r in rows])
            lower = np.minimum(e, 0.9 * m)  # a log axis cannot show mean - 2 SE <= 0: the bar stops at 10% of the mean
            ax.errorbar(ns * shift, m, yerr=[lower, e], fmt=mk + lsty, color=c, ms=3.5, lw=1.1, capsize=2,
                        mfc="white" if tag == "start" else c)  # shifted side by side, not on top of each other
            hs.append(curve_handle(c, marker=mk, line=lsty, bar=True))
            sl = mech["routers"][router]["slopes"].get(f"fit_{key}") if tag == "fit" else None
            ls.append(label + (f": slope {sl['slope']:.2f} [{sl['ci_low']:.2f}, {sl['ci_high']:.2f}]" if sl else ""))
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="max over atoms, mean ± 2 SE", title=title)
        legend(ax, hs, ls, fontsize=7.5, loc="upper right" if key == "radial" else "lower left")
    # (d) the paper's loss of the fit, and the same loss once every radius is reset to the truth's:
    # the difference is the part of the loss that the vanilla router's data cannot identify
    ax = axes[3]
    hs, ls = [], []
    for router, shift in zip(ROUTERS, (1.0, 1.07)):
        rows, sl = mech["routers"][router]["rows"], mech["routers"][router]["slopes"]
        for key, lsty, mk, what in (("fit_loss", "-", "o", "fit"), ("fit_loss_true_radius", ":", "^", "fit, radius reset")):
            m = np.array([r[key][0] for r in rows])
            e = np.array([r[key][1] for r in rows])
            ax.errorbar(ns * shift, m, yerr=[np.minimum(e, 0.9 * m), e], fmt=mk + lsty, color=col[router], ms=3.5, lw=1.1,
                        capsize=2, mfc="white" if key != "fit_loss" else col[router])
            hs.append(curve_handle(col[router], marker=mk, line=lsty, bar=True))
            ls.append(f"{LABEL[router].split(' (')[0]}, {what}: slope {sl[key]['slope']:.2f} "
                      f"[{sl[key]['ci_low']:.2f}, {sl[key]['ci_high']:.2f}]")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="D_3 = D_{1,1}, mean ± 2 SE",
           title="(d) the paper's loss: fit vs radius reset to the truth")
    legend(ax, hs, ls, fontsize=7.5, loc="lower left")
    fig.suptitle(f"Nguyen et al. (2024), exact-specified (d = 4, k* = 3, GELU): start noise {mech['init_scale']}, "
                 f"{mech['reps']} replicates per n, paired start/fit", fontsize=10)
    fig.tight_layout()
    save_figure(fig, stem, formats=("png", "pdf"), min_px=1800)
    plt.close(fig)


def main(argv=None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    p.add_argument("--out", type=Path, default=Path("records/two_point"))
    p.add_argument("--n-mc", type=positive_int, default=100_000, help="Monte Carlo inputs for the KL rate")
    p.add_argument("--n-t", type=positive_int, default=121, help="points of the witness grid t in [1e-6, 1]")
    p.add_argument("--n-max", type=positive_int, default=100_000)
    p.add_argument("--n-points", type=positive_int, default=5)
    p.add_argument("--reps", type=positive_int, default=20)
    p.add_argument("--init-scale", type=float, default=0.05)
    p.add_argument("--max-iter", type=positive_int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sgd-n", type=positive_int, default=10_000, help="sample size of the SGD cross-check of the vanilla radius")
    p.add_argument("--sgd-reps", type=positive_int, default=5)
    p.add_argument("--figure-only", action="store_true", help="redraw the figure from <out>/two_point.json")
    args = p.parse_args(argv)
    if args.reps < 2 or args.sgd_reps < 2 or args.n_t < 2 or args.n_max < 1000:
        p.error("--reps, --sgd-reps and --n-t need at least 2 (standard errors, a grid); --n-max at least 1000")
    if not (np.isfinite(args.init_scale) and args.init_scale >= 0):
        p.error(f"--init-scale must be a finite number >= 0, got {args.init_scale}")
    path = args.out / "two_point.json"
    if args.figure_only and not path.is_file():
        p.error(f"--figure-only needs {path}; run without it first")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        figure(json.loads(path.read_text()), args.out / "two_point")
        return 0
    t0 = time.perf_counter()
    rec = {"command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
           "python": platform.python_version(), "two_point": bound_part(args), "mechanism": mechanism_part(args)}
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    atomic_write_json(path, rec)
    figure(rec, args.out / "two_point")
    print(f"wrote {path} and two_point.png/.pdf in {rec['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
