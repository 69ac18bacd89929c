"""Issue 60 scope 2: the paper's procedure beside the converged estimator, one figure and its numbers.

Reads the four runs of ``records/declarations/figure1/07-paper-procedure.md`` -- ``moestat rates
--preset fig1_paper`` (SGD from a near-truth start, one run per replicate, Nguyen et al. (2024),
App. E.1) and ``--preset fig1_paper_lse`` (the main job's Levenberg-Marquardt least squares on the
same data and starts), each with ``--setting exact`` and ``--setting over`` -- and writes, into the
folder that holds them (``sgd_exact/``, ``sgd_over/``, ``lse_exact/``, ``lse_over/``):

* ``paper_procedure.png`` / ``.pdf``: panel (a) exact-specified (D3), panel (b) over-specified (D2);
  per router (colour) and procedure (SGD: open markers, dashed line; LSE: filled, solid) the mean
  over the 20 replicates with bars of mean +- 2 SD (:func:`moestat.rates.figures.mean_sd_bars`, the
  paper's bars; a lower end at or below 0 is drawn to the bottom edge with an open triangle) and the
  least-squares line of log(mean) on log n;
* ``summary.json``: per run, router and n the mean, SD and bar of the loss; per run and router the
  slope with its 95% interval (:func:`moestat.rates.fit.slope_with_interval`, statistic mean, 1000
  resamples, seed 0); per-fit convergence (``status`` x ``truth_check`` counts, none dropped); the
  paired contrasts (:func:`moestat.rates.verdicts.paired_slope_difference`, 2000 draws, seed 0): SGD
  minus LSE per router and setting, vanilla minus perturbed per procedure and setting.

Nothing is refitted.  Run::

    PYTHONPATH=. python studies/figure1/paper_procedure.py --out records/figure1/paper_procedure
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from moestat.cli.common import ArgumentParser

RUNS = {("sgd", "exact"): "sgd_exact", ("sgd", "over"): "sgd_over", ("lse", "exact"): "lse_exact",
        ("lse", "over"): "lse_over"}
ROUTERS = ("perturbed", "cosine")
LOSS = "voronoi"  # D3 exact, D2 over: the same formula for both routers
PAIRED_DRAWS = 2000
PROCEDURE_NAMES = {"sgd": "paper's SGD", "lse": "least squares (LM)"}
ROUTER_NAMES = {"perturbed": "perturbed cosine", "cosine": "vanilla cosine"}
LOSS_NAMES = {"exact": "D3", "over": "D2"}
#: Horizontal offsets (factors of n) of the four curves, so that their bars do not cover each other.
DODGE = {("perturbed", "sgd"): 0.93, ("cosine", "sgd"): 0.975, ("perturbed", "lse"): 1.025, ("cosine", "lse"): 1.075}


def _matrix(df, router: str, ns: list[int], reps: int) -> np.ndarray:
    """The loss ``[len(ns), reps]`` of ``router`` (NaN where a row is missing: it is then left out
    of the paired contrasts, never filled)."""
    out = np.full((len(ns), reps), np.nan)
    sub = df[df["router"] == router]
    for i, n in enumerate(ns):
        g = sub[sub["n"] == n]
        out[i, g["replicate"].to_numpy(int)] = g[LOSS].to_numpy(float)
    return out


def summarise(folder: Path) -> dict:
    """Every number of the figure and the text (see the module docstring)."""
    from moestat.rates.figures import mean_sd_bars
    from moestat.rates.fit import slope_with_interval
    from moestat.rates.store import read_results
    from moestat.rates.verdicts import paired_slope_difference

    frames = {key: read_results(folder / name / "results.csv") for key, name in RUNS.items()}
    ns = sorted(int(n) for n in frames[("sgd", "exact")]["n"].unique())
    reps = int(frames[("sgd", "exact")]["replicate"].max()) + 1
    out: dict = {"loss": {"exact": "D3", "over": "D2"}, "ns": ns, "replicates": reps, "runs": {}, "contrasts": []}
    mats = {}
    for (proc, setting), df in frames.items():
        if sorted(int(n) for n in df["n"].unique()) != ns:
            raise ValueError(f"{RUNS[(proc, setting)]}: sizes differ from sgd_exact's {ns}")
        run: dict = {}
        for router in ROUTERS:
            sub = df[df["router"] == router]
            m = _matrix(df, router, ns, reps)
            mats[(proc, setting, router)] = m
            per_n = []
            for i, n in enumerate(ns):
                mean, sd, lo, hi = mean_sd_bars(m[i])
                g = sub[sub["n"] == n]
                per_n.append({"n": n, "fits": int(len(g)), "mean": mean, "sd": sd, "bar": [lo, hi],
                              "median": float(np.nanmedian(m[i])), "converged": int(g["converged"].sum()),
                              "n_iter_median": float(g["n_iter"].median())})
            swi = slope_with_interval(ns, [m[i][np.isfinite(m[i]) & (m[i] > 0)] for i in range(len(ns))], 0, 1000, "mean")
            counts = sub.groupby(["status", "truth_check"]).size()
            run[router] = {
                "slope": swi["slope"], "ci": [swi["ci_low"], swi["ci_high"]], "per_n": per_n,
                "fits": int(len(sub)), "converged": int(sub["converged"].sum()),
                "status_truth_check": {f"{s} / {t}": int(c) for (s, t), c in counts.items()},
                "truth_gap_median": float(sub["truth_gap"].median()),
            }
        out["runs"][f"{proc}_{setting}"] = run
    for setting in ("exact", "over"):
        for router in ROUTERS:  # SGD minus LSE: the same data and start per (n, replicate)
            c = paired_slope_difference(ns, mats[("sgd", setting, router)], mats[("lse", setting, router)],
                                        n_boot=PAIRED_DRAWS, seed=0, statistic="mean")
            out["contrasts"].append({"what": f"SGD minus LSE, {ROUTER_NAMES[router]}, {setting}", **_plain(c)})
        for proc in ("sgd", "lse"):  # vanilla minus perturbed: the same data and start per (n, replicate)
            c = paired_slope_difference(ns, mats[(proc, setting, "cosine")], mats[(proc, setting, "perturbed")],
                                        n_boot=PAIRED_DRAWS, seed=0, statistic="mean")
            out["contrasts"].append({"what": f"vanilla minus perturbed, {PROCEDURE_NAMES[proc]}, {setting}", **_plain(c)})
    return out


def _plain(d: dict) -> dict:
    """JSON-ready copy (NumPy scalars and arrays to Python)."""
    return json.loads(json.dumps(d, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def draw(summary: dict, stem: Path) -> list[Path]:
    """The two-panel figure of ``summary`` as ``stem.png`` and ``stem.pdf``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.io import atomic_savefig
    from moestat.plotting import curve_handle, legend
    from moestat.rates.figures import ROUTER_COLOURS

    ns = summary["ns"]
    with plt.rc_context({"font.size": 7, "axes.labelsize": 7, "xtick.labelsize": 6, "ytick.labelsize": 6,
                         "pdf.fonttype": 42}):
        fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.9))
        clipped_any = False
        for ax, setting, tag in zip(axes, ("exact", "over"), ("(a)", "(b)")):
            handles, labels, clipped = [], [], []
            for proc in ("sgd", "lse"):
                for router in ROUTERS:
                    r = summary["runs"][f"{proc}_{setting}"][router]
                    colour = ROUTER_COLOURS[router]
                    x = np.array([p["n"] for p in r["per_n"]], float) * DODGE[(router, proc)]
                    m = np.array([p["mean"] for p in r["per_n"]])
                    lo = np.array([p["bar"][0] for p in r["per_n"]])
                    hi = np.array([p["bar"][1] for p in r["per_n"]])
                    bad = ~(lo > 0)
                    clipped += [(xi, mi, colour) for xi, mi in zip(x[bad], m[bad])]
                    ax.vlines(x, np.where(bad, m, lo), hi, color=colour, lw=0.7)
                    ax.plot(x, m, "o" if proc == "lse" else "s", ms=3.2, color=colour,
                            mfc=colour if proc == "lse" else "white", mew=0.8)
                    xs = np.array([ns[0], ns[-1]], float)
                    lm = np.polyfit(np.log(ns), np.log(m), 1)  # the slope's own line: log(mean) on log n
                    ax.plot(xs, np.exp(lm[1]) * xs ** lm[0], "-" if proc == "lse" else "--", color=colour, lw=1.0)
                    handles.append(curve_handle(colour, marker="o" if proc == "lse" else "s",
                                                line="-" if proc == "lse" else "--", bar=True, ms=3.2))
                    if proc == "sgd":  # the key's marker open, as on the panel
                        handles[-1][-1].set_markerfacecolor("white")
                    labels.append(f"{ROUTER_NAMES[router]}, {PROCEDURE_NAMES[proc]}: slope {r['slope']:+.2f} "
                                  f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]; converged {r['converged']}/{r['fits']}"
                                  .replace("-", "\u2212"))
            ax.set_xscale("log")
            ax.set_yscale("log")
            if clipped:
                clipped_any = True
                bottom = ax.get_ylim()[0]
                for xi, mi, colour in clipped:
                    ax.vlines([xi], bottom, mi, color=colour, lw=0.7)
                    ax.plot([xi], [bottom], "v", mfc="none", mec=colour, ms=3, mew=0.6, clip_on=False)
                ax.set_ylim(bottom=bottom)
            ax.set_xticks(ns)
            ax.set_xticklabels([f"{n // 1000}k" if n % 1000 == 0 else str(n) for n in ns])
            ax.minorticks_off()
            ax.set_xlabel("sample size $n$")
            ax.set_ylabel(f"{LOSS_NAMES[setting]} (Voronoi loss)")
            ax.set_title(f"{tag} {'exact-specified, k = k* = 3' if setting == 'exact' else 'over-specified, k = k* + 1 = 4'}",
                         fontsize=7)
            ax.grid(True, which="major", lw=0.3, alpha=0.5)
            legend(ax, handles, labels, fontsize=5.2, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                   handlelength=2.4)
        fig.suptitle("Figure 1 by the paper's procedure (SGD, 20 epochs, constant lr 0.01, one near-truth start)\n"
                     "beside the main job's least squares (Levenberg-Marquardt), same data and starts", fontsize=7)
        note = (f"markers: mean over {summary['replicates']} replicates (open squares: SGD, filled circles: LSE); bars: "
                "mean +- 2 SD of the replicates" + (" (a lower end at or below 0 is drawn to the bottom edge, open "
                                                    "triangle)" if clipped_any else "")
                + "; lines: least-squares fit of log mean on log n (slope, 95% CI); sparse Top-2 gate (K-bar = 3 "
                "over-specified), d = 4, GELU experts, tau = 0.5 (perturbed), 0 (vanilla); curves offset in n to "
                "keep bars apart.")
        import textwrap

        fig.text(0.5, 0.005, "\n".join(textwrap.wrap(note, 175)), ha="center", va="bottom", fontsize=5, color="0.3")
        fig.tight_layout(rect=(0, 0.04, 1, 0.95))
        files = [atomic_savefig(fig, stem.with_suffix(".png"), dpi=200), atomic_savefig(fig, stem.with_suffix(".pdf"))]
        plt.close(fig)
    return files


def main(argv=None) -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the folder holding sgd_exact/, sgd_over/, lse_exact/, lse_over/")
    ns = p.parse_args(argv)
    folder = Path(ns.out)
    missing = [name for name in RUNS.values() if not (folder / name / "results.csv").is_file()]
    if missing:
        sys.stderr.write(f"paper_procedure: {folder} lacks the runs {', '.join(missing)}\n")
        return 2
    summary = summarise(folder)
    (folder / "summary.json").write_text(json.dumps(_plain(summary), indent=1) + "\n", encoding="utf-8")
    for f in draw(summary, folder / "paper_procedure"):
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
