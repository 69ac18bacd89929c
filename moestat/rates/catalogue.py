"""The rate catalogue: the field's MoE parameter-rate theorems, each reproduced in one command.

An :class:`Entry` is one published theorem with a simulation study: the paper (authors, year,
title), the theorem and figure numbers, the model (gate, expert, truth), the estimator, the paper's
own design, and one or more :class:`Run` s -- a rates configuration (a preset of
:mod:`moestat.rates.presets` or a scenario file shipped in ``moestat/rates/catalogue_files/``) with
the full grid (the paper's design, or moestat's recorded design where the paper's could not be
used) and a reduced ``--quick`` grid (at most 5 minutes on 2 cores; measured wall times in
docs/guide/catalogue.rst).  Every run goes through :func:`moestat.rates.run_rates` (same store,
resume, verdicts and figures as ``moestat rates``); :func:`reproduce` writes each run into
``OUT/<run label>/`` and the entry's report into ``OUT/catalogue.json``.

Each entry states, for every loss it reports, the predicted exponent of ``n`` or the prediction
"slower than any polynomial rate" (:class:`Prediction`).  The exponents are the ones the rates
pipeline applies (a test checks they agree); a "slower than any polynomial" prediction has no
interval to fall in, so it is judged by **contrast** with the entry's fast case on the same loss
(:attr:`Entry.contrast`): consistent when the replicate-paired bootstrap interval of the slope
difference (slow minus fast, on the rows of both runs paired on ``(n, replicate)``, i.e. the same
data streams; :func:`moestat.rates.verdicts.paired_contrast`) lies above 0.  Where the rates pipeline itself judged the slow fit by its
slow-rate rule (:mod:`moestat.rates.stability`: curvature, the fast router in the same run, split
halves -- the vanilla cosine router's Voronoi loss), that category is taken as it is.  An
entry may name a judging instrument (:attr:`Entry.judge`, e.g. the two-point bounds of
:mod:`moestat.theorems.judges.temperature_two_point` and :mod:`moestat.theorems.judges.cosine_two_point`, the latter for
the vanilla cosine router's row in place of the slow-rate rule); its category and reason then replace the slope's and
the contrast's for the one row of each ``(run, loss)`` it names, whose fixed-truth verdict stays in
the report beside it (``fixed_truth``).

An entry whose model moestat cannot fit yet is listed with its status ``needs: ...``
(:func:`entry_status`, computed by building its configuration, never hard-coded as runnable) and
refused by :func:`reproduce`; nothing is faked.
"""


from __future__ import annotations

import importlib
import json
import math
import time
from pathlib import Path
from typing import Any, Mapping

from moestat.io import atomic_write_json
from moestat.theorems.registry import (ENTRIES, REPORT_SCHEMA, SLOWER, STANDINGS, STATISTIC, THEOREM_STANDING,
                                             UNREAD_STANDING, Entry, Paper, Prediction, Run, catalogue_file, entry)
from moestat.rates.catalogue_config import run_config
from moestat.theorems.catalogue_hypotheses import run_hypotheses
from moestat.theorems.file_theorems import scenario_theorems
from moestat.rates.experiment import run_rates
from moestat.rates.extras import merge_extras
from moestat.rates.preflight import preflight, scenario_preflight
from moestat.rates.resolve import Experiment
from moestat.rates.store import read_results
from moestat.rates.verdicts import paired_arrays, paired_contrast

__all__ = [
    "Paper",
    "Prediction",
    "Run",
    "Entry",
    "ENTRIES",
    "entry",
    "catalogue_file",
    "run_config",
    "entry_status",
    "plan",
    "reproduce",
    "contrast_verdict",
    "category_counts",
    "standing_counts",
    "format_standing_counts",
    "STANDINGS",
    "format_report",
]


def entry_status(e: Entry) -> str:
    """``"runnable"`` or ``"needs: ..."`` -- found by building and validating each run's quick
    configuration (and, for a run on a mixture-noise scenario file, checking that the file really
    declares the mixture), never assumed."""
    if e.blocked:
        return f"needs: {e.blocked}"
    if not e.runs:
        return "needs: a run definition"
    for run in e.runs:
        try:
            cfg = run_config(run, quick=True)
            cfg.validate()
            if run.requires and not _declares_mixture(cfg):
                raise ValueError("the scenario is read as additive noise")
        except (ValueError, FileNotFoundError, TypeError, KeyError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"needs: {run.requires or 'a working configuration'} ({why})"
    return "runnable"


def _declares_mixture(cfg) -> bool:
    """Whether the run's scenario draws y from the mixture (the likelihood entries need it)."""
    if cfg.family == "gaussian-moe":
        return True
    return bool(Experiment.of(cfg).scenarios[cfg.router[0]].mixture_data)


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------
def _fit_of(summary: dict, loss: str, router: str | None = None) -> dict | None:
    for f in summary["fits"]:
        if f["loss"] == loss and (router is None or f["router"] == router):
            return f
    return None


def contrast_verdict(slow: dict | None, fast: dict | None, paired: dict | None = None,
                     paired_mean: dict | None = None) -> dict[str, Any]:
    """Judge a "slower than any polynomial rate" fit against the fast case's fit of the same loss.

    A slow fit that the rates pipeline already judged by its slow-rate rule (it carries
    ``slow_rule``, :mod:`moestat.rates.stability`) keeps that category and reason.  Otherwise the
    verdict is ``paired`` (:func:`moestat.rates.verdicts.paired_contrast` on the two runs' rows):
    ``consistent`` when the replicate-paired interval of ``slope(slow) - slope(fast)`` excludes 0
    above, ``inconsistent`` below, ``inconclusive`` when it contains 0 -- never a fixed margin.
    Without the paired interval (or a slope) the contrast is ``inconclusive``.  ``paired_mean``
    (the same contrast on the per-``n`` means, when ``paired`` is on the medians) is reported
    beside it as ``mean_statistic``.
    """
    if slow and slow.get("slow_rule") and slow.get("category"):
        return {"category": slow["category"], "slow_slope": slow.get("slope"),
                "fast_slope": None if not fast else fast.get("slope"),
                "reason": f"the rates pipeline's slow-rate rule: {slow.get('reason', '')}"}
    if not slow or not fast or slow.get("slope") is None or fast.get("slope") is None:
        return {"category": "inconclusive", "reason": "a slope is missing"}
    if paired is None:
        return {"category": "inconclusive", "slow_slope": slow["slope"], "fast_slope": fast["slope"],
                "reason": "no paired rows: a contrast is decided by the replicate-paired interval of the slope difference"}
    out = {"category": paired["category"], "slow_slope": slow["slope"], "fast_slope": fast["slope"],
           "paired": {k: paired.get(k) for k in ("difference", "ci", "level", "n_boot", "replicates", "pairs", "ns", "seed",
                                                 "statistic")},
           "reason": paired["reason"]}
    if paired_mean is not None:
        out["mean_statistic"] = {"category": paired_mean["category"], "reason": paired_mean["reason"]}
    return out


def _paired(out: Path, slow: str, fast: str, loss: str, fs: dict | None, ff: dict | None,
            statistic: str = STATISTIC) -> tuple[dict, dict | None] | None:
    """The replicate-paired contrast of two runs written under ``out`` (their rows and file losses)
    on ``statistic``, and on the mean beside it (``None`` when ``statistic`` is the mean)."""

    if not fs or not ff or not fs.get("window") or not ff.get("window"):
        return None
    rows = [merge_extras(read_results(out / r / "results.csv"), out / r / "extras.csv") for r in (slow, fast)]
    if any(loss not in df for df in rows):
        return None
    window = (max(fs["window"][0], ff["window"][0]), min(fs["window"][1], ff["window"][1]))
    arrays = paired_arrays(rows[0], rows[1], loss, window)
    return (paired_contrast(*arrays, seed=0, statistic=statistic),
            None if statistic == "mean" else paired_contrast(*arrays, seed=0, statistic="mean"))


def router_n_oks(run) -> dict[str, float | None]:
    """Router -> the pre-flight ``n_ok`` of its scenario on the run's grid (``None``: a singular Fisher
    information); ``run`` is a configuration or its :class:`~moestat.rates.resolve.Experiment`."""
    experiment = run if isinstance(run, Experiment) else Experiment.of(run)
    cfg = experiment.config
    return {r: preflight(experiment.scenarios[r], cfg.ns)["n_ok"] for r in cfg.router}


def preflight_window(run) -> tuple[int | None, int | None]:
    """``(window_min, n_ok)``: the catalogue's fitting window of a run; ``run`` is its configuration or,
    resolved already, its :class:`~moestat.rates.resolve.Experiment`.

    ``n_ok`` is the largest finite pre-flight ``n_ok`` of the run's routers
    (:func:`moestat.rates.preflight.preflight`: the smallest ``n`` at which every block's
    Cramér-Rao sd is below a tenth of the atoms' separation; a router with a singular Fisher
    information -- a slow case, judged by its instrument -- has none and does not count).
    ``window_min`` is the first grid size at or above it, or ``None`` when the grid already starts
    there, no router has a finite ``n_ok``, or fewer than 3 sizes would remain (the whole grid is
    then kept).
    """
    experiment = run if isinstance(run, Experiment) else Experiment.of(run)
    cfg = experiment.config
    oks = router_n_oks(experiment).values()
    finite = [int(n) for n in oks if n is not None]
    if not finite:
        return None, None
    n_ok = max(finite)
    above = [n for n in cfg.ns if n >= n_ok]
    return (above[0] if len(above) >= 3 and above[0] > cfg.ns[0] else None), n_ok


def with_preflight_window(run):
    """``run`` (a configuration or an :class:`~moestat.rates.resolve.Experiment`, returned as the same
    kind) with the catalogue's window (:func:`preflight_window`) unless it declares its own ``window_min``."""
    cfg = run.config if isinstance(run, Experiment) else run
    if cfg.window_min is not None:
        return run
    window_min, _ = preflight_window(run)
    return run if window_min is None else run.replace(window_min=window_min)


def plan(key: str, *, quick: bool = False, **execution: Any) -> list[tuple[Run, Any]]:
    """The validated configuration of every run of entry ``key`` (nothing is written), each
    judged over the catalogue's window above its pre-flight ``n_ok`` (:func:`with_preflight_window`).

    Raises
    ------
    ValueError
        Unknown key, an entry that cannot run (its ``needs: ...`` status), or a bad execution key.
    """
    e = entry(key)
    status = entry_status(e)
    if status != "runnable":
        raise ValueError(f"catalogue entry {key} cannot run: {status}")
    return [(run, with_preflight_window(run_config(run, quick, **execution).validate())) for run in e.runs
            if run.label not in e.untested]


def reproduce(key: str, out, *, quick: bool = False, n_jobs: int = 1, resume: bool = False,
              quiet: bool = True, runs: list[tuple[Run, Any]] | None = None, protocol: str | None = None) -> dict[str, Any]:
    """Run catalogue entry ``key`` into ``out`` and return the report written to ``out/catalogue.json``.

    Parameters
    ----------
    key : str
        A key of :data:`ENTRIES`.
    out : path-like
        Output folder; each run writes ``out/<label>/`` (``results.csv``, ``summary.json``,
        figures, exactly as ``moestat rates``).
    quick : bool
        The reduced grid (at most 5 minutes on 2 cores) instead of the full one.
    n_jobs : int
        Parallel work units of each run (results do not depend on it).
    resume : bool
        Continue runs already in ``out`` (the rates resume guard applies to each).
    runs : list, optional
        The output of :func:`plan` (the command validates first, then runs), or of
        :func:`moestat.rates.catalogue_protocol.protocol_plan` with ``protocol``.
    protocol : str, optional
        The statement of the protocol ``runs`` were planned under
        (:func:`moestat.rates.catalogue_protocol.reproduce_protocol` passes it with its plan); the
        report's ``mode`` is then ``"protocol"`` and ``protocol`` holds the statement.

    Raises
    ------
    ValueError
        Unknown key, or an entry that cannot run (its ``needs: ...`` status).
    """

    e = entry(key)
    if protocol and quick:
        raise ValueError("the protocol is a full design: give protocol or quick, not both")
    if protocol and runs is None:
        raise ValueError("a protocol run needs its plan (moestat.rates.catalogue_protocol.reproduce_protocol)")
    if runs is None:
        runs = plan(key, quick=quick, n_jobs=n_jobs, quiet=quiet)
    out = Path(out)
    done = []
    for run, cfg in runs:
        t0 = time.perf_counter()
        pre = scenario_preflight(Experiment.of(cfg)) if cfg.scenario_file else None  # as the rates door does
        summary = run_rates(cfg, out / run.label, resume=resume, preflight=pre, theorems=scenario_theorems)
        wall = time.perf_counter() - t0
        done.append({"label": run.label, "wall_s": round(wall, 2), "counts": summary["counts"],
                     "sample_sizes": summary["sample_sizes"], "reps": cfg.reps, "summary": summary,
                     "hypotheses": run_hypotheses_of(e.key, run.label, cfg)})
    report = _report(e, quick, done, out)
    if protocol:
        report["mode"], report["protocol"] = "protocol", protocol
    atomic_write_json(out / "catalogue.json", report)
    return report


def run_hypotheses_of(key: str, label: str, run) -> list[dict[str, Any]]:
    """The computed hypotheses of a run's truth (:func:`moestat.theorems.catalogue_hypotheses.run_hypotheses`),
    without the full condition tables: ``router``, ``theorem``, ``cite``, ``met``, ``failing``.
    ``run`` is the run's configuration or its :class:`~moestat.rates.resolve.Experiment`."""
    ex = run if isinstance(run, Experiment) else Experiment.of(run)
    return [{k: v for k, v in h.items() if k != "report"} for h in run_hypotheses(key, label, ex)]


def untested_reason(e: Entry, label: str, quick: bool = False) -> str:
    """Why run ``label`` of ``e`` is untested (:attr:`Entry.untested`), with its pre-flight computed now:
    ``n_ok``, the smallest eigenvalue and the condition number of the Fisher information per sample."""
    run = next(r for r in e.runs if r.label == label)
    cfg = run_config(run, quick)
    ex = Experiment.of(cfg)
    pf = preflight(ex.scenarios[cfg.router[0]], cfg.ns)
    n_ok = "none (singular)" if pf["n_ok"] is None else f"{int(pf['n_ok'])}"
    return (f"untested: {e.untested[label]} (pre-flight: n_ok {n_ok}, smallest Fisher eigenvalue "
            f"{pf['min_eigenvalue']:.3g}, condition number {pf['condition_number']:.3g})")


#: The category of a row whose run's truth fails the hypotheses of its theorem (computed by
#: :func:`moestat.theorems.catalogue_hypotheses.run_hypotheses`): not judged, counted apart.
UNMET_CATEGORY = "hypotheses not met"
#: The category of a row of an untested run (:attr:`Entry.untested`): not fitted, never judged.
UNTESTED = "untested"


def _failing_hypotheses(runs: list[dict], label: str, router: str | None) -> str | None:
    """The reason a run (one router of it, or any when ``router`` is None) is not judged, or None."""
    for r in runs:
        if r["label"] != label:
            continue
        for h in r.get("hypotheses") or []:
            if h.get("met") is False and (router is None or h["router"] == router or len(r["hypotheses"]) == 1):
                return f"the truth fails the hypotheses of {h['theorem']} ({h['cite']}): " + "; ".join(h["failing"])
    return None


def _report(e: Entry, quick: bool, runs: list[dict], out: Path | None = None) -> dict[str, Any]:
    by_label = {r["label"]: r["summary"] for r in runs}
    untested = {label: untested_reason(e, label, quick) for label in e.untested}
    rows = []
    for p in e.predictions:
        s = by_label.get(p.run)
        if p.run in untested:
            rows.append({"run": p.run, "loss": p.loss, "predicted": p.exponent, "prediction": p.text, "source": p.source,
                         "standing": p.standing, "by_contrast": False, "sided": None, "sided_reason": None,
                         "slope": None, "ci": None, "category": UNTESTED, "reason": untested[p.run]})
            continue
        if s is None:
            continue
        router, loss = (p.loss.split(" ", 1) if " " in p.loss else (None, p.loss))
        f = _fit_of(s, loss, router)
        row = {"run": p.run, "loss": p.loss, "predicted": p.exponent, "prediction": p.text, "source": p.source,
               "standing": p.standing,
               "by_contrast": p.by_contrast, "sided": None if p.exponent is None else p.sided,
               "sided_reason": None if p.exponent is None else p.sided_reason,
               "slope": None, "ci": None, "category": None, "reason": "loss not in the run's fits"}
        if f is not None:
            row.update(slope=f.get("slope"), ci=[f.get("ci_low"), f.get("ci_high")], pipeline_predicted=f.get("predicted"),
                       pipeline_sided=f.get("sided"), category=f.get("category"), reason=f.get("reason"), window=f.get("window"))
            if f.get("mean_statistic"):  # the expected loss's slope and category, reported beside the verdict
                row["mean_statistic"] = f["mean_statistic"]
        rows.append(row)
    contrast = None
    if e.contrast is not None:
        slow, fast, loss = e.contrast
        fs, ff = _fit_of(by_label.get(slow, {"fits": []}), loss), _fit_of(by_label.get(fast, {"fits": []}), loss)
        # on the statistic the two fits were made with (a report of runs fitted before the median rule: the mean)
        stat = (fs or {}).get("statistic", "mean")
        both = (_paired(out, slow, fast, loss, fs, ff, stat) if out is not None and slow in by_label and fast in by_label
                else None)
        contrast = {"slow": slow, "fast": fast, "loss": loss, **contrast_verdict(fs, ff, *(both or (None,)))}
        if slow in untested or fast in untested:
            contrast = {"slow": slow, "fast": fast, "loss": loss, "category": UNTESTED,
                        "reason": untested.get(slow) or untested[fast]}
        for row in rows:  # the slow case's prediction is judged by the contrast
            if row["by_contrast"]:
                row.update(category=contrast["category"], reason="contrast: " + contrast["reason"])
                if contrast.get("mean_statistic"):
                    row["mean_statistic"] = {**contrast["mean_statistic"], "reason": "contrast: " + contrast["mean_statistic"]["reason"]}
    instrument = None
    if e.judge:
        mod, fn = e.judge.split(":")
        instrument = getattr(importlib.import_module(mod), fn)(quick)
        for run, j in instrument.items():
            # keyed by (run, loss): a verdict that does not name its row would replace every row of its run
            if "loss" not in j:
                raise ValueError(f"the instrument {e.judge} gives run {run!r} a verdict without its loss")
        for row in rows:
            j = instrument.get(row["run"])
            # an instrument speaks of one loss of its run (e.g. D2_ls, or "cosine voronoi" beside the
            # perturbed router's rows of the same run), not of the run's other rows
            if j is not None and j["loss"] == row["loss"]:
                row["fixed_truth"] = {"category": row["category"], "reason": row["reason"]}
                row.update(category=j["category"], reason="two-point: " + j["reason"])
    # a run whose truth fails its theorem's hypotheses is not judged against it: its rows (and a contrast
    # naming it) say which condition failed; the verdict the rules would have given is kept as `unjudged`
    for row in rows:
        router = row["loss"].split(" ", 1)[0] if " " in row["loss"] else None
        why = _failing_hypotheses(runs, row["run"], router)
        # a row the contrast decides is not judged when either arm fails; one an instrument decided does not
        # depend on the contrast's arms (the two-point bound of its own run's truth)
        if why is None and row["by_contrast"] and contrast is not None and not row.get("fixed_truth"):
            why = _failing_hypotheses(runs, contrast["slow"], None) or _failing_hypotheses(runs, contrast["fast"], None)
        if why is not None:
            row["unjudged"] = {"category": row["category"], "reason": row["reason"]}
            row.update(category=UNMET_CATEGORY, reason=why)
    if contrast is not None and contrast["category"] != UNTESTED:
        why = _failing_hypotheses(runs, contrast["slow"], None) or _failing_hypotheses(runs, contrast["fast"], None)
        if why is not None:
            contrast["unjudged"] = {"category": contrast["category"], "reason": contrast["reason"]}
            contrast.update(category=UNMET_CATEGORY, reason=why)
    hypotheses = {r["label"]: r["hypotheses"] for r in runs if r.get("hypotheses") is not None}
    return {
        "schema": REPORT_SCHEMA, "key": e.key, "mode": "quick" if quick else "full",
        "paper": {"authors": e.paper.authors, "year": e.paper.year, "title": e.paper.title, "venue": e.paper.venue,
                  "arxiv": e.paper.arxiv, "read_at": e.paper.read_at},
        "theorem": e.theorem, "figure": e.figure, "model": e.model, "estimator": e.estimator,
        "paper_design": e.paper_design, "notes": e.notes,
        "runs": [{k: v for k, v in r.items() if k != "summary"} for r in runs],
        "hypotheses": hypotheses, "untested": untested,
        "predictions": rows, "counts": category_counts(rows), "standing_counts": standing_counts(rows), "contrast": contrast, "instrument": instrument,
        "wall_s": round(sum(r["wall_s"] for r in runs), 2),
    }


#: The order of :func:`category_counts` (``none``: a row without a category, e.g. a rate not stated).
COUNTED = ("consistent", "near", "inconsistent", "inconclusive", "floor", "pre-asymptotic", UNMET_CATEGORY, UNTESTED,
           "none")


def category_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many prediction rows reached each category, ``consistent`` and ``near`` apart.

    Only ``consistent`` counts as reproduced: ``near`` (the interval excludes the prediction, within
    the tolerance; :func:`moestat.rates.verdicts.judge_interval`) is counted on its own.
    """
    out = dict.fromkeys(COUNTED, 0)
    for r in rows:
        c = r.get("category") or "none"
        out[c if c in out else "none"] += 1
    out["reproduced"] = out["consistent"]
    return out


def standing_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The prediction rows split by where they come from (:data:`STANDINGS`).

    ``theorem_reproductions``: rows ``consistent`` whose standing is :data:`THEOREM_STANDING` (a
    theorem read in full); ``lower_standing``: rows of any other standing read (a qualitative claim,
    an abstract, a digest, a figure's slope, moestat's own derivation), ``lower_consistent`` those
    of them ``consistent``; ``unread``: rows whose exponent could not be read
    (:data:`UNREAD_STANDING`).  ``by_standing`` counts the rows of each standing; a row without a
    standing (a report written before the field) is counted as ``unstated``, in none of the three.
    """
    by = dict.fromkeys(STANDINGS, 0)
    out = {"theorem_reproductions": 0, "theorem_rows": 0, "lower_consistent": 0, "lower_standing": 0, "unread": 0,
           "unstated": 0}
    for r in rows:
        st, ok = r.get("standing"), r.get("category") == "consistent"
        if st not in by:
            out["unstated"] += 1
            continue
        by[st] += 1
        if st == THEOREM_STANDING:
            out["theorem_rows"] += 1
            out["theorem_reproductions"] += ok
        elif st == UNREAD_STANDING:
            out["unread"] += 1
        else:
            out["lower_standing"] += 1
            out["lower_consistent"] += ok
    out["by_standing"] = by
    return out


def format_standing_counts(counts: Mapping[str, Any]) -> str:
    """The count line of :func:`standing_counts`: theorem reproductions, lower standing, unread."""
    by = counts["by_standing"]
    lower = ", ".join(f"{k} {by[k]}" for k in STANDINGS if k not in (THEOREM_STANDING, UNREAD_STANDING) and by[k])
    line = (f"sources: theorem reproductions {counts['theorem_reproductions']} of {counts['theorem_rows']} rows read in "
            f"{THEOREM_STANDING}; qualitative claims / lower standing {counts['lower_consistent']} consistent of "
            f"{counts['lower_standing']} rows" + (f" ({lower})" if lower else "")
            + f"; exponent not read {counts['unread']} rows")
    return line + (f"; source not stated {counts['unstated']} rows" if counts.get("unstated") else "")


def _fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"


#: Characters of the ``predicted`` column of :func:`format_report`; a longer prediction text is
#: shortened there (its full text is in ``catalogue.json``), so that the columns after it stay aligned.
PREDICTION_WIDTH = 36


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def quick_grid_note(report: dict[str, Any]) -> str | None:
    """One line when a ``--quick`` report's intervals are too wide to decide a rate, else ``None``.

    What separates the predictions is the smallest gap between the entry's distinct predicted
    exponents, or, with one, its distance from 0 (no decay): an interval wider than that holds
    both readings, so no category of this grid can tell them apart -- whatever it says, the full
    run is what can."""
    if report.get("mode") != "quick":
        return None
    preds = sorted({float(r["predicted"]) for r in report["predictions"] if r.get("predicted") is not None})
    gaps = [b - a for a, b in zip(preds, preds[1:])]
    sep = min(gaps) if gaps else (abs(preds[0]) if preds and preds[0] != 0 else None)
    widths = [r["ci"][1] - r["ci"][0] for r in report["predictions"]
              if r.get("ci") and all(v is not None and math.isfinite(v) for v in r["ci"])]
    if sep is None or not widths:
        return None
    wide = [w for w in widths if w > sep]
    if not wide:
        return None
    what = "the predictions" if gaps else "the prediction from no decay (0)"
    return (f"quick grid: {len(wide)} of {len(widths)} intervals are wider (up to {max(wide):.2f}) than the "
            f"{sep:.2f} that separates {what}: this grid cannot decide a rate; the full run (without --quick) is the test")


def format_report(report: dict[str, Any]) -> str:
    """The table printed by ``moestat reproduce``: one line per prediction, then the contrast.

    Columns are as wide as their content (``source``: the prediction's standing, :data:`STANDINGS`;
    the count line after the categories splits the rows by it, :func:`standing_counts`), the prediction text shortened to
    :data:`PREDICTION_WIDTH` characters (full in ``catalogue.json``).  Where an instrument (a
    two-point bound) decides a row, its verdict and the slope rule's stand in two columns,
    ``two-point`` and ``slope rule``; a ``--quick`` report whose intervals cannot separate the
    predictions says so in one line (:func:`quick_grid_note`)."""
    preds = report["predictions"]
    instrument = any(r.get("fixed_truth") for r in preds)
    cells = []
    for r in preds:
        ci = f"[{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]" if r.get("ci") else "-"
        if instrument:
            ft = r.get("fixed_truth")
            verdicts = ((ft["category"] if ft else r["category"]) or "-", (r["category"] if ft else None) or "-")
        else:
            verdicts = (r["category"] or "-",)
        cells.append((str(r["run"]), str(r["loss"]), _short(str(r["prediction"]), PREDICTION_WIDTH), r.get("standing") or "-",
                      r.get("sided") or "-", _fmt(r["slope"]), ci, *verdicts))
    titles = ("run", "loss", "predicted", "source", "sided", "slope", "95% CI",
              *(("slope rule", "two-point") if instrument else ("category",)))
    w = [max([len(t)] + [len(c[i]) for c in cells]) for i, t in enumerate(titles)]

    def row(c) -> str:
        out = (f"{c[0]:<{w[0]}} {c[1]:<{w[1]}} {c[2]:<{w[2]}} {c[3]:<{w[3]}} {c[4]:<{w[4]}} {c[5]:>{w[5]}}  "
               f"{c[6]:<{w[6]}} {c[7]:<{w[7]}}")
        return (out + (f" {c[8]}" if len(c) > 8 else "")).rstrip()

    head = row(titles)
    lines = [f"{report['key']} ({report['mode']}): {report['paper']['authors']} ({report['paper']['year']}), "
             f"{report['figure']}", head, "-" * len(head)]
    if any(r.get("mean_statistic") for r in preds):
        lines.insert(1, "slopes of the per-n median over the window above the truth's pre-flight n_ok (the theorems' O_P "
                        "form); the mean's verdict follows each reason")
    lines += [row(c) for c in cells]
    if any(len(str(r["prediction"])) > PREDICTION_WIDTH for r in preds):
        lines.append("(predictions shortened to fit; the full texts are in catalogue.json)")
    note = quick_grid_note(report)
    if note:
        lines.append(note)
    for r in report["predictions"]:
        lines.append(f"  {r['run']} {r['loss']}: {r['reason'] or '-'}")
        if r.get("fixed_truth"):  # an instrument decided the row: the slope's own verdict is still shown
            ft = r["fixed_truth"]
            lines.append(f"  {r['run']} {r['loss']} (fixed-truth rule, reported): {ft['category'] or '-'} -- {ft['reason'] or '-'}")
        m = r.get("mean_statistic")
        if m:  # the slopes above are of the per-n median (STATISTIC); the expected loss's verdict beside it
            slope = f"slope {_fmt(m.get('slope'))} [{_fmt(m.get('ci_low'))}, {_fmt(m.get('ci_high'))}], " if m.get("slope") is not None else ""
            lines.append(f"  {r['run']} {r['loss']} (the mean, reported): {slope}{m.get('category') or '-'}")
    for label, hs in (report.get("hypotheses") or {}).items():  # the computed hypotheses of each run's truth
        for h in hs:
            who = label if len(hs) == 1 else f"{label} {h['router']}"
            state = "not checked" if h["met"] is None else ("MEETS" if h["met"] else "FAILS")
            lines.append(f"hypotheses: {who} {state} {h['theorem'] or '-'}"
                         + ("" if h["met"] else " -- " + "; ".join(h["failing"])))
    if report.get("contrast"):
        c = report["contrast"]
        what = "fixed-truth contrast (reported; the two-point instrument decides)" if report.get("instrument") else "contrast"
        lines.append(f"{what} ({c['slow']} vs {c['fast']}, {c['loss']}): {c['category']} -- {c['reason']}")
    counts = report.get("counts") or category_counts(report["predictions"])
    lines.append("categories: " + ", ".join(f"{k} {counts[k]}" for k in COUNTED if counts.get(k))
                 + " (only consistent counts as reproduced; near: the interval excludes the prediction, within the tolerance)")
    lines.append(format_standing_counts(report.get("standing_counts") or standing_counts(report["predictions"])))
    # a report re-judged from recorded rows (rejudge_recorded) fitted nothing: its runs carry no counts
    runs = ", ".join(f"{r['label']} {r['wall_s']:.1f} s ({r['counts']['converged']}/{r['counts']['expected']} converged)"
                     if r.get("counts") else f"{r['label']} (judged from its recorded rows)" for r in report["runs"])
    lines.append(f"wall: {report['wall_s']:.1f} s; {runs}")
    return "\n".join(lines)


def report_json(report: Mapping[str, Any]) -> str:  # pragma: no cover - convenience for docs
    return json.dumps(report, indent=2, sort_keys=True)
