"""Shared machinery of the theory checks: the result record, the run context, verdicts.

Slopes with intervals come from :func:`moestat.rates.fit.slope_with_interval`, the same
implementation as the rates engine.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from moestat.rates import RatesConfig, run_rates
from moestat.rates.extras import merge_extras
from moestat.rates.verdicts import MAX_CI_WIDTH, judge_interval
from moestat.theorems.file_theorems import scenario_theorems

__all__ = ["CheckResult", "Context", "MODES", "skipped"]

MODES = ("quick", "full")
#: A check's status.  ``near``: the slope's interval excludes the prediction within the tolerance
#: (:func:`moestat.rates.verdicts.judge_interval`): not passed, and counted apart from the failures.
STATUSES = ("passed", "failed", "near", "inconclusive", "skipped", "error")


@dataclass
class CheckResult:
    """One claim, its prediction, its measurement and the verdict.

    ``passed`` is ``True``/``False`` for a decided check and ``None`` for a skipped one
    (``status == "skipped"``); a skip is never counted as a pass.  ``inconclusive`` (``passed``
    False) marks a slope check whose verdict category (:mod:`moestat.rates.verdicts`, the same
    categories as ``moestat rates``) is ``inconclusive`` or ``pre-asymptotic`` (see
    :func:`slope_verdict`); ``near`` (``passed`` False) one whose interval excludes the prediction
    within the tolerance.  ``category`` and ``reason`` carry that category and its one-line
    reason; a check without a slope gets ``consistent``/``inconsistent`` from its own rule.
    """

    name: str
    claim: str
    predicted: float | None
    measured: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    passed: bool | None = None
    status: str = "failed"  # passed | failed | inconclusive | skipped | error
    rule: str = ""
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    category: str | None = None
    reason: str = ""
    #: how the prediction was tested (:func:`moestat.rates.verdicts.judge_interval`): "two" or "upper"
    sided: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("predicted", "measured", "ci_low", "ci_high"):
            v = d[k]
            d[k] = None if v is None or not math.isfinite(float(v)) else float(v)
        return d

    def line(self) -> str:
        """One printed line: name, prediction, measurement (CI), verdict."""
        f = lambda v: "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.4g}"  # noqa: E731
        ci = "" if self.ci_low is None and self.ci_high is None else f" [{f(self.ci_low)}, {f(self.ci_high)}]"
        cat = f" [{self.category}: {self.reason}]" if self.category and self.reason else ""
        return f"{self.name}: predicted {f(self.predicted)}, measured {f(self.measured)}{ci} -> {self.status.upper()}{cat}"


def verdict(name: str, claim: str, predicted, measured, ci_low, ci_high, ok: bool, rule: str, note: str = "",
            details: dict | None = None) -> CheckResult:
    """A decided :class:`CheckResult` (``ok`` already evaluated by the check's stated rule)."""
    ok = bool(ok)
    return CheckResult(name, claim, predicted, measured, ci_low, ci_high, ok, "passed" if ok else "failed", rule, note,
                       details or {}, category="consistent" if ok else "inconsistent",
                       reason="the check's rule holds" if ok else "the check's rule fails")


def skipped(name: str, claim: str, reason: str, predicted=None) -> CheckResult:
    """A skipped check: ``passed`` is ``None`` and the reason is in ``note``."""
    return CheckResult(name, claim, predicted, None, None, None, None, "skipped", "", f"skipped: {reason}")


class Context:
    """What every check receives: the mode, an output folder and a cache of rate runs.

    Parameters
    ----------
    mode : {"quick", "full"}
    out_dir : Path
        Where rate runs write their files (``<out_dir>/rates/<key>/``).
    seed : int
        Root seed; every check derives its streams from it.
    n_jobs : int
        Parallel work units for the rates engine.
    reps, n_max : int, optional
        Overrides of the mode's replicate count and largest sample size (recorded in the report).
    resume : bool
        Let the rates engine resume runs already in ``<out_dir>/rates/<mode>-<key>/`` (same
        configuration only; the engine refuses another one).
    """

    def __init__(self, mode: str, out_dir: Path, seed: int = 0, n_jobs: int = 1, log: Callable[[str], None] | None = None,
                 reps: int | None = None, n_max: int | None = None, resume: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.out_dir = Path(out_dir)
        self.seed = int(seed)
        self.n_jobs = int(n_jobs)
        self.log = log or (lambda s: None)
        self.reps = reps  # optional override of every check's replicate count
        self.n_max = n_max  # optional override of the largest sample size
        self.resume = bool(resume)  # reuse finished fits in <out_dir>/rates/<mode>-<key>/
        self._rates: dict[str, Any] = {}
        self._memo: dict[str, Any] = {}

    @property
    def quick(self) -> bool:
        return self.mode == "quick"

    def rng(self, name: str) -> np.random.Generator:
        """A generator for check ``name``, independent of the order checks run in."""
        key = [ord(c) for c in name]
        return np.random.default_rng(np.random.SeedSequence([self.seed, *key]))

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per run and ``key`` (e.g. a two-point curve that several checks read)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def rates(self, key: str, **cfg) -> dict[str, Any]:
        """Run (once per key) ``run_rates(RatesConfig.from_dict(cfg))`` and return its summary.

        ``cfg`` holds flat config keys (see :mod:`moestat.rates.config`).
        """
        if key in self._rates:
            return self._rates[key]
        cfg.setdefault("seed", self.seed)
        cfg.setdefault("n_jobs", self.n_jobs)
        cfg.setdefault("quiet", True)
        self.log(f"  rates run {key!r}: {cfg}")
        summary = run_rates(RatesConfig.from_dict(cfg), self.out_dir / "rates" / f"{self.mode}-{key}", resume=self.resume,
                            theorems=scenario_theorems)
        self._rates[key] = summary
        return summary


def find_fit(summary: dict[str, Any], router: str, loss: str) -> dict[str, Any] | None:
    """The ``fits`` entry of a rates summary for ``router`` and exactly ``loss``."""
    for f in summary.get("fits", []):
        if f.get("router") == router and f.get("loss") == loss:
            return f
    return None


def per_n_means(summary: dict[str, Any], out_dir: Path, key: str, router: str, column: str) -> dict[int, float]:
    """Mean of ``column`` per sample size from ``<out_dir>/rates/<key>/results.csv`` (for reports).

    ``key`` is the folder name, ``<mode>-<run key>`` as returned by the ``*_run`` helpers of
    :mod:`moestat.theorems.checks.grids`.
    """
    import pandas as pd


    path = Path(out_dir) / "rates" / key / "results.csv"
    if not path.exists():
        return {}
    df = merge_extras(pd.read_csv(path), path.parent / "extras.csv")  # cell errors live in extras.csv
    if column not in df:
        return {}
    sub = df[df["router"] == router]
    return {int(n): float(v) for n, v in sub.groupby("n")[column].mean().items()}


def run_guarded(fn: Callable[[Context], list[CheckResult]], ctx: Context, names: list[str]) -> list[CheckResult]:
    """Run one check module; an unexpected exception becomes an ``error`` result (not a pass)."""
    try:
        return fn(ctx)
    except Exception as exc:  # noqa: BLE001 - reported, counted as a failure
        tb = traceback.format_exc(limit=3)
        return [CheckResult(n, "", None, None, None, None, False, "error", "", f"error: {type(exc).__name__}: {exc}",
                            {"traceback": tb}) for n in names]


#: Verdict category -> check status (a category that is not ``consistent`` never passes).
CATEGORY_STATUS = {"consistent": "passed", "near": "near", "inconsistent": "failed", "floor": "failed",
                   "inconclusive": "inconclusive", "pre-asymptotic": "inconclusive"}


def apply_category(res: CheckResult, fit: dict | None, *, passing: tuple[str, ...] = ("consistent",)) -> CheckResult:
    """Attach the engine's category and reason of ``fit`` to ``res`` and let it only tighten the verdict.

    A check that passed by its own rule stays passed only when the category is one of ``passing``;
    otherwise its status follows :data:`CATEGORY_STATUS`, as does the status of a check that did not
    pass (``inconclusive``/``pre-asymptotic``: ``inconclusive``; ``near``: ``near``; ``floor``/``inconsistent``:
    ``failed``; never passed).
    """
    if fit is None or fit.get("category") is None:
        return res
    cat, why = fit["category"], fit.get("reason", "")
    res.category, res.reason = cat, why
    res.details["category"], res.details["reason"] = cat, why
    if fit.get("plan"):
        res.details["plan"] = fit["plan"].get("line")
    if res.passed and cat not in passing:
        res.passed = False
        res.status = CATEGORY_STATUS.get(cat, "failed")
    elif not res.passed and cat not in passing:
        # the engine's category decides the status of a check that did not pass (a floor fails
        # a check whose own interval rule said near)
        res.status = CATEGORY_STATUS.get(cat, "failed")
    elif not res.passed and cat in passing:
        # the engine judged by its own rule; the check's stricter rule failed
        res.category, res.reason = "inconsistent", f"the check's rule fails ({res.rule}); engine: {cat}: {why}"
        res.details["category"], res.details["reason"] = res.category, res.reason
    return res


def slope_verdict(name: str, claim: str, fit: dict | None, predicted: float, tolerance: float, extra: dict | None = None,
                  note: str = "", sided: str | None = None) -> CheckResult:
    """Verdict for a predicted log-log slope, by the one interval rule of ``moestat rates``.

    :func:`moestat.rates.verdicts.judge_interval` on the fit's 95% interval: passed only when it
    covers the prediction (``sided="upper"``: reaches the bound or its steep side), is at most
    :data:`moestat.rates.verdicts.MAX_CI_WIDTH` wide, and the engine's verdict category
    (:func:`moestat.rates.verdicts.categorize`, the same prediction and tolerance) is
    ``consistent``; ``near`` (not passed) when the interval excludes the prediction by at most
    ``tolerance``; ``inconclusive`` (not passed) when the interval is wider than the cap or the
    category is ``inconclusive`` or ``pre-asymptotic``; failed otherwise (a ``floor`` or an
    ``inconsistent`` slope).  ``sided`` defaults to the engine's for the same prediction, else ``"two"``.
    """
    same = fit is not None and fit.get("predicted") is not None and float(fit["predicted"]) == float(predicted)
    sided = sided or (fit.get("sided") if same else None) or "two"
    rule = (f"moestat.rates.verdicts.judge_interval ({sided}-sided): the 95% CI covers the predicted slope, at most "
            f"{MAX_CI_WIDTH:g} wide (else inconclusive); excluded by at most {tolerance:g}: near (not passed); and verdict "
            f"category 'consistent'")
    if fit is None or fit.get("slope") is None:
        return CheckResult(name, claim, predicted, None, None, None, False, "failed", rule,
                           "no slope in the rates summary for this loss" + (f"; {note}" if note else ""), extra or {},
                           category="inconclusive", reason="no slope in the rates summary for this loss", sided=sided)
    s, lo, hi = float(fit["slope"]), fit.get("ci_low"), fit.get("ci_high")
    lo = float("nan") if lo is None else float(lo)
    hi = float("nan") if hi is None else float(hi)
    j = judge_interval(predicted, lo, hi, sided=sided, tolerance=tolerance)
    ok = j["category"] == "consistent"
    det = {"engine_predicted": fit.get("predicted"), "engine_consistent": fit.get("consistent")}
    det.update(extra or {})
    res = verdict(name, claim, predicted, s, lo, hi, ok, rule, note, det)
    res.sided = sided
    res.category, res.reason = j["category"], j["reason"]
    if j["category"] in ("inconclusive", "near"):
        res.status = j["category"]
        if j["category"] == "inconclusive":
            res.note = (note + "; " if note else "") + j["reason"]
    if same:
        apply_category(res, fit)
    else:  # the engine judged another prediction: its category does not apply to this claim
        res.category = None
        res.reason = f"engine category is for predicted {fit.get('predicted')}, not {predicted:g}"
    return res
