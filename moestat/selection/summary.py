"""Summaries and figures of a selection study (:mod:`moestat.selection.study`).

* ``summary.csv``: per ``(K_bar, n, criterion)`` the replicates used (their fits converged), the
  failed ones, the hits ``k_hat = k*``, ``P(k_hat = k*)`` with its 95% Wilson interval
  (:func:`statsmodels.stats.proportion.proportion_confint`) and the counts of every ``k_hat``.
* ``summary.json``: the same, plus per ``K_bar`` the rate fits of the merged measure's D1 and the
  unmerged fit's D2 (:func:`moestat.rates.fit.slope_with_interval`, verdict by
  :func:`moestat.rates.verdicts.categorize`, whose interval rule is
  :func:`moestat.rates.verdicts.judge_interval`; predicted exponent -1/2, two-sided for both, Nguyen, Nguyen & Ho
  2023, Theorems 1 and 2, the merged measure being an exact-fit estimate by Do et al. 2024) and the
  core (process) and wall time per replicate.  The judged slope is that of the per-``n`` medians
  (``statistic="median"``): the theorems are ``O_P`` bounds, statements about quantiles, and a few
  dendrograms that merge the wrong atoms put single losses orders of magnitude above the rest; the
  log-of-mean slope and its category are kept beside it (``"mean"``).
* figures: ``selection_probability.png``, ``khat_histograms.png``, ``merged_loss.png``,
  ``dendrograms.png``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from moestat.rates.fit import slope_with_interval
from moestat.rates.verdicts import DEFAULT_TOLERANCE, categorize

__all__ = ["summarise", "write_summary", "write_figures", "CRITERIA"]

#: the columns of the study: DSC (masses at the mean input), DSC0 (the paper's rule, masses at x = 0)
CRITERIA = ("DSC", "DSC0", "AIC", "BIC", "ICL")
PREDICTED = -0.5
#: How :data:`PREDICTED` is tested (:func:`moestat.rates.verdicts.judge_interval`): the parametric rate of an
#: exact-fit estimate (D1 of the merged measure) and of the Voronoi loss D2, which the MLE attains: two-sided
SIDED = "two"


def _cells(records, K, n, crit):
    key = "dsc_converged" if crit.startswith("DSC") else "ic_converged"
    es = [r["per_kbar"][str(K)] for r in records if r["n"] == n]
    used = [e[crit] for e in es if e[key] and e.get(crit) is not None]
    return used, len(es) - len(used)


def summarise(records: list[dict], config, n_boot: int = 1000) -> dict:
    """Table rows and rate fits (module docstring)."""
    from statsmodels.stats.proportion import proportion_confint

    k_star = config.truth().n_atoms
    rows = []
    for K in config.k_bars:
        for n in config.ns:
            for crit in CRITERIA:
                used, failed = _cells(records, K, n, crit)
                hits = int(sum(k == k_star for k in used))
                lo, hi = proportion_confint(hits, len(used), method="wilson") if used else (np.nan, np.nan)
                counts = {str(k): int(sum(u == k for u in used)) for k in range(1, K + 1)}
                rows.append({"K_bar": K, "n": n, "criterion": crit, "used": len(used), "failed": failed, "hits": hits,
                             "p_hat": hits / len(used) if used else float("nan"), "ci_low": float(lo), "ci_high": float(hi),
                             "counts": counts})
    rates = {}
    for K in config.k_bars:
        rates[str(K)] = {}
        for loss in ("D1_merged", "D2_over"):
            ns, vals = [], []
            for n in config.ns:
                v = np.array([r["per_kbar"][str(K)][loss] for r in records if r["n"] == n
                              and r["per_kbar"][str(K)]["dsc_converged"] and r["per_kbar"][str(K)][loss] is not None], float)
                v = v[np.isfinite(v) & (v > 0)]
                if v.size >= 2:
                    ns.append(n)
                    vals.append(v)
            if len(ns) < 3:
                rates[str(K)][loss] = {"slope": None, "reason": f"{len(ns)} sample sizes with >= 2 losses (3 needed)"}
                continue
            conv = (sum(v.size for v in vals), sum(1 for r in records if r["n"] in ns))
            judged = {}
            for stat in ("median", "mean"):
                rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(K, 99)))
                fit = slope_with_interval(ns, vals, rng, n_boot, statistic=stat)
                cat = categorize(predicted=PREDICTED, slope=fit["slope"], ci=(fit["ci_low"], fit["ci_high"]), ns=ns,
                                 values=vals, tolerance=DEFAULT_TOLERANCE, converged=conv, sided=SIDED)
                judged[stat] = {"slope": fit["slope"], "ci_low": fit["ci_low"], "ci_high": fit["ci_high"],
                                "category": cat.get("category"), "reason": cat.get("reason")}
            # The theorems bound the losses in probability (O_P): a statement about quantiles, so the
            # median's slope is the one judged.  The log-of-mean slope (the rates door's) is kept
            # beside it: a few merges of the wrong atoms (losses 1e3 to 1e24) rule every mean.
            rates[str(K)][loss] = {**judged["median"], "statistic": "median", "predicted": PREDICTED, "sided": SIDED,
                                   "mean": judged["mean"], "ns": ns, "used": [int(v.size) for v in vals],
                                   "medians": [float(np.median(v)) for v in vals],
                                   "means": [float(np.mean(v)) for v in vals]}
    cpu = [r["cpu_s"] for r in records]
    wall = [r["wall_s"] for r in records]
    per_n = {str(n): float(np.mean([r["cpu_s"] for r in records if r["n"] == n])) for n in config.ns
             if any(r["n"] == n for r in records)}
    return {"k_star": k_star, "rows": rows, "rates": rates,
            "time": {"cpu_s_total": float(np.sum(cpu)), "wall_s_total": float(np.sum(wall)),
                     "cpu_s_per_replicate_and_n": per_n,
                     "cpu_s_per_replicate_all_n": float(np.sum(cpu)) / max(config.replicates, 1)}}


def write_summary(summary: dict, out: str | Path, config) -> list[Path]:
    """``summary.csv`` and ``summary.json`` in ``out``."""
    out = Path(out)
    cols = ["K_bar", "n", "criterion", "used", "failed", "hits", "p_hat", "ci_low", "ci_high", "counts"]
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for row in summary["rows"]:
            w.writerow([json.dumps(row[c], sort_keys=True) if c == "counts" else
                        (f"{row[c]:.4f}" if isinstance(row[c], float) else row[c]) for c in cols])
    (out / "summary.json").write_text(json.dumps({"config": config.to_dict(), **summary}, indent=1, sort_keys=True) + "\n")
    return [out / "summary.csv", out / "summary.json"]


def _n_label(n: int) -> str:
    """``2000`` -> ``2k``, ``20000`` -> ``20k``, ``400`` -> ``400`` (short tick labels)."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def _n_axis(ax, ns: list[int]) -> None:
    """A log ``n`` axis ticked at the sample sizes only.  Matplotlib's default labels minor ticks
    when the range spans less than a decade or so, and those labels overlapped."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(ns)
    ax.set_xticklabels([_n_label(n) for n in ns], rotation=45 if len(ns) > 4 else 0, fontsize=8)


def write_figures(summary: dict, records: list[dict], out: str | Path, config) -> list[Path]:
    """The four figures of the module docstring; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    Ks, ns = list(config.k_bars), list(config.ns)
    return [_plot_selection_probability(plt, summary, Ks, ns, out), _plot_khat_histograms(plt, summary, Ks, ns, out),
            _plot_merged_loss(plt, summary, records, Ks, ns, out), _plot_dendrograms(plt, records, Ks, ns, out)]


def _plot_selection_probability(plt, summary: dict, Ks: list[int], ns: list[int], out: Path) -> Path:
    """1. ``P(k_hat = k*)`` against ``n``, one panel per ``K_bar``, with 95% Wilson intervals."""
    k_star = summary["k_star"]
    fig, axes = plt.subplots(1, len(Ks), figsize=(4.2 * len(Ks), 3.4), sharey=True, squeeze=False)
    for ax, K in zip(axes[0], Ks):
        for j, crit in enumerate(CRITERIA):
            rs = [r for r in summary["rows"] if r["K_bar"] == K and r["criterion"] == crit]
            x = np.array([r["n"] for r in rs], float) * (1 + 0.04 * (j - 2))  # dodge the bars
            p = np.array([r["p_hat"] for r in rs])
            # clipped at 0: Wilson's bound at p_hat = 1 is 1 - 1e-16 in floating point
            err = np.clip(np.array([[r["p_hat"] - r["ci_low"] for r in rs], [r["ci_high"] - r["p_hat"] for r in rs]]), 0, None)
            ax.errorbar(x, p, yerr=err, marker="os^Dv"[j], capsize=3, label="DSC (x = 0)" if crit == "DSC0" else crit)
        _n_axis(ax, ns)
        ax.set_ylim(-0.03, 1.03)
        ax.axhline(0.9, color="0.7", lw=0.8, ls=":")
        ax.set_title(f"K_bar = {K} (k* = {k_star})", fontsize=10)
        ax.set_xlabel("n")
    axes[0][0].set_ylabel(f"P(k_hat = {k_star}), 95% Wilson CI")
    # one legend below the panels: inside an axes it covered points whatever the corner
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(CRITERIA), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = out / "selection_probability.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plot_khat_histograms(plt, summary: dict, Ks: list[int], ns: list[int], out: Path) -> Path:
    """2. Histograms of ``k_hat`` of every criterion at every ``(K_bar, n)``."""
    fig, axes = plt.subplots(len(Ks), len(ns), figsize=(2.8 * len(ns), 2.2 * len(Ks)), squeeze=False, sharey=True)
    for a, K in enumerate(Ks):
        for b, n in enumerate(ns):
            ax = axes[a][b]
            for j, crit in enumerate(CRITERIA):
                row = next(r for r in summary["rows"] if r["K_bar"] == K and r["n"] == n and r["criterion"] == crit)
                ks = np.arange(1, K + 1)
                ax.bar(ks + 0.16 * (j - 2), [row["counts"][str(k)] for k in ks], width=0.16, label=crit, color=f"C{j}")
            ax.set_xticks(np.arange(1, K + 1))
            ax.set_title(f"K_bar = {K}, n = {n}", fontsize=8)
            if b == 0:
                ax.set_ylabel("replicates")
            if a == len(Ks) - 1:
                ax.set_xlabel("k_hat")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(CRITERIA), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12 / len(Ks), 1, 1))
    path = out / "khat_histograms.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_merged_loss(plt, summary: dict, records: list[dict], Ks: list[int], ns: list[int], out: Path) -> Path:
    """3. Merged D1 and unmerged D2 against ``n``: every replicate and the medians (the means can be
    ruled by a few catastrophic merges; the y range is the replicates' 2-98% quantiles)."""
    fig, axes = plt.subplots(1, len(Ks), figsize=(4.6 * len(Ks), 4.6), sharey=True, squeeze=False)
    allv = [r["per_kbar"][str(K)][loss] for K in Ks for loss in ("D1_merged", "D2_over") for r in records
            if r["per_kbar"][str(K)].get(loss)]
    for ax, K in zip(axes[0], Ks):
        unfitted = []  # (name, reason) of a loss without a fitted rate: named in the legend's title
        for j, (loss, lab, short) in enumerate((("D1_merged", "merged to k*, D1", "merged"),
                                                ("D2_over", "unmerged, D2", "unmerged"))):
            f = summary["rates"][str(K)][loss]
            fitted = f.get("slope") is not None
            if not fitted:
                unfitted.append((short, f.get("reason", "no slope")))
            for n in ns:
                v = [r["per_kbar"][str(K)][loss] for r in records if r["n"] == n and r["per_kbar"][str(K)][loss]]
                ax.scatter(np.full(len(v), n) * (1 + 0.06 * (j - 0.5)), v, s=5, alpha=0.3, color=f"C{j}",
                           label=f"{lab}: replicates" if n == ns[0] and not fitted else None)
            if fitted:
                x = np.array(f["ns"], float)
                ax.plot(x, f["medians"], "o-", color=f"C{j}",
                        label=f"{lab}: medians, slope {f['slope']:.2f} [{f['ci_low']:.2f}, {f['ci_high']:.2f}]: "
                              f"{f['category']}\n  (log-of-mean slope {f['mean']['slope']:.2f}: {f['mean']['category']})")
        _n_axis(ax, ns)
        ax.set_yscale("log")
        if allv:
            ax.set_ylim(np.quantile(allv, 0.02) / 2, np.quantile(allv, 0.98) * 2)
        ax.set_title(f"K_bar = {K} (predicted slope -0.5)", fontsize=10)
        ax.set_xlabel("n")
        # a loss without a fitted rate is named by its replicates' points and its reason (an empty
        # legend would put a matplotlib warning on the user's screen)
        title = ("no rate fitted:\n" + "\n".join(f"{lab}: {why}" for lab, why in unfitted)) if unfitted else None
        if ax.get_legend_handles_labels()[0]:  # below the axes (the data fill them), the reason as its title
            ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), title=title, title_fontsize=6.5)
    axes[0][0].set_ylabel("Voronoi loss")
    fig.tight_layout()
    path = out / "merged_loss.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plot_dendrograms(plt, records: list[dict], Ks: list[int], ns: list[int], out: Path) -> Path:
    """4. The dendrogram of replicate 0 at the largest ``n``, for every ``K_bar``."""
    from scipy.cluster.hierarchy import dendrogram

    fig, axes = plt.subplots(1, len(Ks), figsize=(3.8 * len(Ks), 3.2), squeeze=False)
    rec = next((r for r in records if r["n"] == max(ns) and r["replicate"] == 0), None)
    for ax, K in zip(axes[0], Ks):
        e = rec["per_kbar"][str(K)] if rec else None
        if e and e.get("linkage"):
            dendrogram(np.array(e["linkage"]), ax=ax, color_threshold=0, above_threshold_color="C0")
            ax.set_title(f"K_bar = {K}, n = {max(ns)}, replicate 0: DSC picks {e['DSC']}", fontsize=8)
            ax.set_yscale("symlog", linthresh=1e-4)
            ax.set_ylabel("merge height")
            ax.set_xlabel("fitted atom")
    fig.tight_layout()
    path = out / "dendrograms.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def format_table(summary: dict) -> str:
    """The printed table: one line per ``(K_bar, n)``, ``P(k_hat = k*)`` of every criterion, then the rates."""
    lines = [f"P(k_hat = {summary['k_star']}) [95% Wilson CI]  (used/failed replicates)"]
    head = f"{'K_bar':>5} {'n':>7}  " + "  ".join(f"{c:>19}" for c in CRITERIA)
    lines.append(head)
    keys = sorted({(r["K_bar"], r["n"]) for r in summary["rows"]})
    for K, n in keys:
        cells = []
        for c in CRITERIA:
            r = next(x for x in summary["rows"] if (x["K_bar"], x["n"], x["criterion"]) == (K, n, c))
            cells.append(f"{r['p_hat']:.2f} [{r['ci_low']:.2f},{r['ci_high']:.2f}]" + (f"/{r['failed']}f" if r["failed"] else ""))
        lines.append(f"{K:>5} {n:>7}  " + "  ".join(f"{c:>19}" for c in cells))
    lines.append("rates (predicted -0.5, two-sided): slope of the medians [95% CI] category; the log-of-mean slope beside it")
    for K, fits in summary["rates"].items():
        for loss, f in fits.items():
            if f.get("slope") is None:
                lines.append(f"  K_bar = {K} {loss}: no fit ({f['reason']})")
            else:
                m = f["mean"]
                lines.append(f"  K_bar = {K} {loss}: {f['slope']:.3f} [{f['ci_low']:.3f}, {f['ci_high']:.3f}] {f['category']}; "
                             f"log-of-mean {m['slope']:.3f} [{m['ci_low']:.3f}, {m['ci_high']:.3f}] {m['category']}")
    t = summary["time"]
    # a resumed study's records hold the units of earlier runs too: this run's wall is said apart
    this = f"wall this run {t['wall_s_this_run']:.1f} s, " if "wall_s_this_run" in t else ""
    lines.append(f"core time {t['cpu_s_total']:.1f} s ({t['cpu_s_per_replicate_all_n']:.2f} s per replicate over every n), "
                 f"{this}units' wall summed over every run {t['wall_s_total']:.1f} s")
    return "\n".join(lines)
