"""Issue 59: no current record's summary.json states a verdict its own interval contradicts.

Every run folder under a current record of ``records/index.toml`` (a folder with ``results.csv``,
``provenance.json`` and ``summary.json``) was re-judged under the interval rule
(:func:`moestat.rates.experiment.rejudge_run`).  Slopes are negative: the *slow* side of a predicted
exponent is the flatter one (greater numbers), the *fast* side the steeper one.  A fit judged
``consistent`` must not have an interval lying wholly on the slow side of its prediction, nor, for a
two-sided prediction, wholly on its fast side; ``consistent``, ``near`` and ``inconsistent`` are only
given to an interval no wider than :data:`~moestat.rates.verdicts.MAX_CI_WIDTH`; ``near`` excludes the
prediction by at most the tolerance, ``inconsistent`` by more.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moestat.rates.verdicts import DEFAULT_TOLERANCE, MAX_CI_WIDTH
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
#: Rounding allowance of the comparisons (the rule compares the same floats; JSON keeps them exactly).
EPS = 1e-9


def fit_problems(fit: dict, tolerance: float = DEFAULT_TOLERANCE, max_width: float = MAX_CI_WIDTH) -> list[str]:
    """What is wrong with one fit's category under the interval rule (empty: nothing)."""
    cat, p = fit.get("category"), fit.get("predicted")
    if cat not in ("consistent", "near", "inconsistent") or p is None:
        return []
    lo, hi = fit["ci_low"], fit["ci_high"]
    steep, flat = fit.get("prediction_interval") or (p, p)
    sided = fit.get("sided") or "two"
    what = f"{fit['router']} {fit['loss']}: {cat}, CI [{lo:.3f}, {hi:.3f}], predicted {p:g} ({sided})"
    out = []
    if lo is None or hi is None or hi - lo > max_width + EPS:
        return [f"{what}: the interval is wider than {max_width:g}"]
    slow = lo > flat + EPS  # wholly flatter than the prediction
    fast = hi < steep - EPS  # wholly steeper
    gap = max(lo - flat, 0.0) if sided == "upper" else max(lo - flat, steep - hi, 0.0)
    if cat == "consistent":
        if slow:
            out.append(f"{what}: the interval lies wholly on the slow side")
        if fast and sided == "two":
            out.append(f"{what}: the interval lies wholly on the fast side of a two-sided prediction")
    elif cat == "near" and not (EPS < gap <= tolerance + EPS):
        out.append(f"{what}: near, but the gap is {gap:.3f}")
    elif cat == "inconsistent" and not gap > tolerance - EPS:
        out.append(f"{what}: inconsistent, but the gap is {gap:.3f}")
    return out


#: the folders the re-judging tool walks: the test checks exactly what it re-judged
FOLDERS = load_script(ROOT / "studies" / "tools" / "rejudge_records.py").current_run_folders(ROOT)


def test_the_walk_finds_the_recorded_runs():
    assert len(FOLDERS) >= 40  # 48 when the records were re-judged (issue 59)
    assert ROOT / "records/theory/quick/rates/quick-over-thm5" in FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(ROOT / "records")) for f in FOLDERS])
def test_no_recorded_verdict_contradicts_its_interval(folder):
    s = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    # written before the interval rule: re-judged (rejudge_run); written under it: its summary states the cap
    assert s.get("rejudged") or "max_ci_width" in s, \
        f"{folder}: not judged under the interval rule (re-judge it: moestat.rates.experiment.rejudge_run)"
    assert s["max_ci_width"] == MAX_CI_WIDTH
    problems = [p for f in s["fits"] for p in fit_problems(f, s.get("tolerance") or DEFAULT_TOLERANCE)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_what_the_old_rule_let_through():
    base = {"router": "r", "loss": "l", "predicted": -0.5}
    # the old rule: -0.5 inside [-0.40, -0.30] widened by 0.15: consistent, though wholly on the slow side
    assert "slow side" in fit_problems({**base, "category": "consistent", "ci_low": -0.40, "ci_high": -0.30})[0]
    assert "fast side" in fit_problems({**base, "category": "consistent", "ci_low": -0.70, "ci_high": -0.60})[0]
    assert not fit_problems({**base, "category": "consistent", "ci_low": -0.70, "ci_high": -0.60, "sided": "upper"})
    assert "wider" in fit_problems({**base, "category": "consistent", "ci_low": -0.90, "ci_high": -0.30})[0]
    assert not fit_problems({**base, "category": "near", "ci_low": -0.40, "ci_high": -0.30})
    assert fit_problems({**base, "category": "near", "ci_low": -0.30, "ci_high": -0.20})  # 0.20 away
    assert not fit_problems({**base, "category": "consistent", "ci_low": -0.55, "ci_high": -0.45})
