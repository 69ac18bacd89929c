"""The two-point judges of the catalogue's cosine entries (moestat.theorems.judges.cosine_two_point) and the (run, loss) keying
of an entry's instrument (moestat.rates.catalogue._report)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from moestat.theorems.judges import cosine_two_point as ctp
from moestat.theorems.judges.two_point import RATE_BAND, RATE_SLOPE, SPLIT_T_SLOPE, TwoPointCurve, rate_verdict

ROOT = Path(__file__).resolve().parents[2]
JUDGES = {"cosine-exact": ctp.judge_exact, "cosine-over": ctp.judge_over}


@pytest.mark.parametrize("key", JUDGES)
def test_the_vanilla_bound_is_flat_and_the_perturbed_one_falls(key):
    """PDE (4) makes the pair indistinguishable under the vanilla router (KL = 0, bound flat); under the
    perturbed router the same pair is told apart at n^-1/2 (Theorems 6 and 5), with the split at n^-1/4."""
    v = JUDGES[key](quick=True)
    assert set(v) == {"routers"}
    j = v["routers"]
    assert j["loss"] == "cosine voronoi" and j["category"] == "consistent"
    assert j["two_point_loss"] == ("D3" if key == "cosine-exact" else "D2")
    assert j["ratio"] == pytest.approx(1.0, abs=1e-6)  # exactly 1 up to the round-off of KL = 0
    assert j["curves"]["cosine"]["kappa_max"] < 1e-20 and j["curves"]["perturbed"]["kappa_max"] > 1e-4
    assert abs(j["perturbed"]["slope"] - RATE_SLOPE) < RATE_BAND and j["perturbed"]["tail_points"] >= 3
    if key == "cosine-over":
        assert abs(j["perturbed"]["t_star_slope"] - SPLIT_T_SLOPE) < RATE_BAND
        assert j["curves"]["cosine"]["n_t"] == 61 and j["curves"]["cosine"]["witness"] == "split"
    assert "minimax lower bound" in j["reason"] and "not the rate of the fixed-truth fit" in j["reason"]


@pytest.mark.parametrize("key", JUDGES)
def test_a_falling_vanilla_bound_is_inconsistent(key, monkeypatch):
    """The judge can fail: give the 'vanilla' row a router that sees the radius (the perturbed one)."""
    sc = ctp.entry_scenarios(key)
    monkeypatch.setattr(ctp, "entry_scenarios", lambda k: {"cosine": sc["perturbed"], "perturbed": sc["perturbed"]})
    j = JUDGES[key](quick=True)["routers"]
    assert j["category"] == "inconsistent" and not j["flat"] and j["ratio"] < 0.05


@pytest.mark.parametrize("key", JUDGES)
def test_a_perturbed_bound_that_does_not_fall_leaves_it_inconclusive(key, monkeypatch):
    """A flat vanilla bound is not enough: if the instrument sees no rate for the fast router either, it cannot decide."""
    sc = ctp.entry_scenarios(key)
    monkeypatch.setattr(ctp, "entry_scenarios", lambda k: {"cosine": sc["cosine"], "perturbed": sc["cosine"]})
    j = JUDGES[key](quick=True)["routers"]
    assert j["flat"] and not j["perturbed_falls"] and j["category"] == "inconclusive"


def _curve(slope: float, t_slope: float) -> TwoPointCurve:
    ns = np.logspace(2, 7, 11)
    lb = 0.3 * ns ** slope
    ts = np.logspace(-6, 0, 61)
    return TwoPointCurve(ns=ns, ts=ts, atoms=[0], separation=np.zeros((1, 61)), kappa=np.zeros((1, 61)),
                         kappa_se=np.zeros((1, 61)), lower_bound=lb, lower_bound_low=lb, lower_bound_high=lb,
                         t_star=0.5 * ns ** t_slope, kl_at_star=np.ones(11))


def test_the_rate_rule_refuses_a_slope_outside_its_band_and_a_wrong_split_rate():
    assert rate_verdict(_curve(-0.5, -0.25))[0] and rate_verdict(_curve(-0.5, -0.25), SPLIT_T_SLOPE)[0]
    assert not rate_verdict(_curve(-0.3, -0.25))[0]  # falls, but not at n^-1/2
    assert not rate_verdict(_curve(-0.5, -0.5), SPLIT_T_SLOPE)[0]  # the split does not shrink at n^-1/4
    assert not rate_verdict(_curve(0.0, -0.25))[0]