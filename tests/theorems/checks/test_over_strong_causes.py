"""moestat.theorems.checks.over_strong: the causes each thm5 check measures on its own fits (issue 34).

Constructed fits whose shares, counts and means are known by hand: a fit whose D2 is all shared-cell
term gives a share of 1, a singleton beyond rho/2 is counted once, the mean without the largest fit
drops exactly that fit.  The verdict is not touched by any of it.
"""

import numpy as np
import pandas as pd
import pytest

from moestat.theorems.checks import over_strong
from moestat.theorems.checks.framework import Context

RHO = 2.0  # a constructed separation: threshold rho/2 = 1


def _fits() -> pd.DataFrame:
    """Two sizes.  n = 100: fit 0 has a run-off shared-cell atom (D2 = weighted_multi = 50) and a
    singleton at 1.5 > rho/2; fit 1 has D2 = 2 of which 1 is shared; fit 2 has no shared cell (NaN).
    n = 400: every D2 is its shared term, no singleton beyond rho/2 (one exactly at rho/2: not beyond)."""
    return pd.DataFrame({
        "n": [100, 100, 100, 400, 400],
        "voronoi": [50.0, 2.0, 1.0, 4.0, 4.0],
        "weighted_multi": [50.0, 1.0, np.nan, 4.0, 4.0],
        "param_single": [1.5, 0.2, 0.3, 1.0, np.nan],
    })


def test_one_run_off_fit_gives_share_one_and_count_one():
    one = pd.DataFrame({"n": [100], "voronoi": [97.9], "weighted_multi": [97.9], "param_single": [6.0]})
    c = over_strong.thm5_causes(one, "voronoi", RHO)
    r = c["by_n"][100]
    assert r["shared_share_of_D2"] == 1.0 and r["singleton_run_off"] == 1 and r["fits"] == 1
    assert c["singleton_run_off"] == 1 and c["fits"] == 1 and c["threshold"] == 1.0
    assert r["mean"] == r["largest"] == 97.9 and r["mean_without_largest"] is None  # nothing left to average


def test_shares_counts_and_means_per_n():
    c = over_strong.thm5_causes(_fits(), "voronoi", RHO)
    a, b = c["by_n"][100], c["by_n"][400]
    assert a["shared_share_of_D2"] == pytest.approx(51.0 / 53.0)  # a ratio of sums (of means), NaN term = 0
    assert b["shared_share_of_D2"] == pytest.approx(1.0)
    assert (a["singleton_run_off"], b["singleton_run_off"]) == (1, 0)  # 1.0 is not beyond rho/2; NaN is not counted
    assert c["singleton_run_off"] == 1 and c["fits"] == 5
    assert c["shared_share_range"] == pytest.approx([51.0 / 53.0, 1.0])
    assert a["mean"] == pytest.approx(53.0 / 3) and a["largest"] == 50.0 and a["mean_without_largest"] == pytest.approx(1.5)
    assert b["mean_without_largest"] == pytest.approx(4.0)
    # log-log slopes over the two sizes: (log 4 - log(53/3)) / log 4 and (log 4 - log 1.5) / log 4
    assert c["slope_mean"] == pytest.approx(np.log(4 / (53 / 3)) / np.log(4))
    assert c["slope_without_largest"] == pytest.approx(np.log(4 / 1.5) / np.log(4))
    # another loss: the means are of that column, the shares and counts are the same fits'
    p = over_strong.thm5_causes(_fits(), "param_single", RHO)
    assert p["by_n"][100]["mean_without_largest"] == pytest.approx(0.25) and p["by_n"][400]["mean"] == 1.0
    assert p["by_n"][400]["mean_without_largest"] is None  # one finite value at n = 400


def test_missing_columns_leave_their_quantity_out():
    c = over_strong.thm5_causes(_fits()[["n", "voronoi"]], "voronoi", RHO)
    assert "shared_share_range" not in c and "singleton_run_off" not in c
    assert "shared_share_of_D2" not in c["by_n"][100] and c["by_n"][100]["mean"] == pytest.approx(53.0 / 3)
    assert over_strong.thm5_causes(_fits().iloc[:0], "voronoi", RHO) == {}
    assert over_strong.thm5_causes(None, "voronoi", RHO) == {}


def test_sentence_quotes_the_computed_numbers():
    c = over_strong.thm5_causes(_fits(), "voronoi", RHO)
    s = over_strong._causes_sentence(c, "voronoi")
    assert "carries 0.962-1.000 of the mean D2 per n (0.962, 1.000)" in s
    assert "1/5 fits have a singleton atom outside the ball of radius rho/2 = 1" in s and "per n 1/3, 0/2" in s
    assert "17.7 -> 1.5, 4 -> 4" in s
    assert over_strong._causes_sentence({}, "voronoi") == ""


def test_truth_separation_is_the_smallest_pairwise_distance():
    from moestat.data.synthetic import make_scenario

    t = make_scenario("perturbed", "over").truth.numpy()
    om = np.concatenate([t.beta1, t.eta], axis=-1)
    pairs = [np.linalg.norm(om[i] - om[j]) for i in range(len(om)) for j in range(i + 1, len(om))]
    assert over_strong.truth_separation() == pytest.approx(min(pairs)) and min(pairs) > 0


def test_checks_carry_the_causes_in_details_and_in_the_reason_only_when_not_passed(tmp_path, monkeypatch):
    d = tmp_path / "rates" / "quick-over"
    d.mkdir(parents=True)
    rho = over_strong.truth_separation()
    rows = ["router,n,replicate,voronoi,param_single,param_multi"]
    extras = ["router,n,replicate,weighted_single,weighted_multi,beta1_radial,beta1_direction"]
    for n in (8000, 16000, 32000):
        for r in range(3):
            off = n == 8000 and r == 0  # one singleton beyond rho/2, at the smallest n
            rows.append(f"perturbed,{n},{r},{10.0 + r},{rho if off else 0.1},3.0")
            extras.append(f"perturbed,{n},{r},0.5,{9.0 + r},9.0,0.1")
            rows.append(f"cosine,{n},{r},99.0,99.0,99.0")  # the other router's fits are not counted
            extras.append(f"cosine,{n},{r},0.5,99.0,9.0,0.1")
    (d / "results.csv").write_text("\n".join(rows) + "\n")
    (d / "extras.csv").write_text("\n".join(extras) + "\n")
    fit = {"router": "perturbed", "ci_low": -2.0, "ci_high": 0.8, "predicted": -0.5, "reason": "wide"}
    losses = ("voronoi", "param_single", "param_multi", "weighted_single", "weighted_multi")
    summary = {"fits": [dict(fit, loss=loss, slope=-0.6, category="inconclusive") for loss in losses]}
    monkeypatch.setattr(over_strong, "thm5_run", lambda c: ("quick-over", summary))
    res = {x.name: x for x in over_strong.run(Context("quick", tmp_path))}
    d2 = res["thm5_over_D2"]
    assert d2.status == "inconclusive" and d2.measured == -0.6  # the verdict is the rule's
    c = d2.details["causes"]
    assert c["singleton_run_off"] == 1 and c["fits"] == 9 and c["by_n"][8000]["singleton_run_off"] == 1
    assert c["by_n"][8000]["shared_share_of_D2"] == pytest.approx(30.0 / 33.0)
    assert c["by_n"][8000]["mean_without_largest"] == pytest.approx(10.5)
    assert "causes measured on these fits" in d2.reason and "1/9 fits have a singleton atom" in d2.reason
    assert d2.details["reason"] == d2.reason
    # a passing check keeps its reason; its details still hold the numbers
    ok = {**fit, "ci_low": -0.6, "ci_high": -0.4, "category": "consistent", "reason": "fine"}
    summary["fits"] = [dict(ok, loss=loss, slope=-0.5) for loss in losses]
    passed = {x.name: x for x in over_strong.run(Context("quick", tmp_path))}
    assert passed["thm5_over_D2"].status == "passed"
    assert "causes measured" not in passed["thm5_over_D2"].reason and passed["thm5_over_D2"].details["causes"] == c


class _RecordingContext(Context):
    def rates(self, key, **cfg):
        self.calls = getattr(self, "calls", []) + [(key, cfg)]
        return {"fits": []}


def test_thm5_run_is_its_own_perturbed_run_only_in_quick_mode_without_reps(tmp_path):
    from moestat.theorems.checks.grids import OVER_QUICK_N_MIN, THM5_QUICK_REPS, over_run, thm5_run

    quick = _RecordingContext("quick", tmp_path)
    key, _ = thm5_run(quick)
    (k, cfg), = quick.calls
    assert key == "quick-over-thm5" and k == "over-thm5"
    assert cfg["router"] == ["perturbed"] and cfg["reps"] == THM5_QUICK_REPS and cfg["n_min"] == OVER_QUICK_N_MIN
    over_run(quick)  # the same grid, budget and scenario as the over run; only routers and replicates differ
    _, ocfg = quick.calls[-1]
    assert {a: b for a, b in cfg.items() if a not in ("router", "reps")} == \
        {a: b for a, b in ocfg.items() if a not in ("router", "reps")}
    for ctx in (_RecordingContext("full", tmp_path), _RecordingContext("quick", tmp_path, reps=4)):
        key, _ = thm5_run(ctx)  # --full or a --reps override: the over run itself
        assert key.endswith("-over") and ctx.calls[0][0] == "over" and ctx.calls[0][1]["router"] == ["perturbed", "cosine"]
