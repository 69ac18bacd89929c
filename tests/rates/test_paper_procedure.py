"""The paper's procedure as a rates sweep (issue 60): SGD as the estimator of ``moestat rates`` with
its settings, fits reported from their one start (``answer = false``), and the mean +- 2 SD bars of
Nguyen et al. (2024), Figure 1 (``bars = "sd2"``)."""

import math

import numpy as np
import pandas as pd
import pytest

from moestat.cli.cmd_rates import build_parser, config_from_args
from moestat.rates import run_rates
from moestat.rates.config import RatesConfig
from moestat.rates.figures import _note, _per_n, mean_sd_bars
from moestat.rates.presets import PRESETS
from moestat.rates.resolve import Experiment
from moestat.rates.sweep import make_units
from moestat.rates.truth_check import unit_estimator

TINY = dict(d=2, n_min=60, n_max=120, n_points=3, reps=3, n_boot=100, quiet=True, holdout=256)


def test_mean_sd_bars_on_numbers_worked_by_hand():
    # mean 2, sample sd 1 (ddof = 1): the bar is 2 -+ 2
    assert mean_sd_bars([1.0, 2.0, 3.0]) == (2.0, 1.0, 0.0, 4.0)
    # 0.1, 0.1, 0.1, 0.5: mean 0.2, sd sqrt(0.12 / 3) = 0.2, so the lower end is -0.2 (below 0)
    m, sd, lo, hi = mean_sd_bars([0.1, 0.1, 0.1, 0.5])
    assert (m, sd, lo, hi) == pytest.approx((0.2, 0.2, -0.2, 0.6))
    assert mean_sd_bars([1.0, 3.0], k=1.0) == pytest.approx((2.0, math.sqrt(2), 2 - math.sqrt(2), 2 + math.sqrt(2)))
    assert mean_sd_bars([1.0, np.nan, 3.0])[0] == 2.0  # a non-finite value is left out
    with pytest.raises(ValueError, match="at least 2"):
        mean_sd_bars([1.0, np.inf])
    with pytest.raises(ValueError, match="k must be"):
        mean_sd_bars([1.0, 2.0], k=-1.0)


def test_the_figures_per_n_rows_with_sd2_bars_are_mean_sd_bars_of_each_size():
    rng = np.random.default_rng(0)
    rows = [{"router": "perturbed", "n": n, "voronoi": float(v)} for n in (100, 200, 400) for v in rng.lognormal(0, 1, 7)]
    df = pd.DataFrame(rows)
    got = _per_n(df, "voronoi", "perturbed", bars="sd2")
    for n, m, lo, hi, count in got:
        v = df.loc[df["n"] == n, "voronoi"].to_numpy()
        want = mean_sd_bars(v)
        assert (m, lo, hi, count) == pytest.approx((want[0], want[2], want[3], 7))
    # the default bars are still the 10th-90th percentile band
    n, m, lo, hi, _ = _per_n(df, "voronoi", "perturbed")[0]
    v = df.loc[df["n"] == 100, "voronoi"].to_numpy()
    assert (lo, hi) == pytest.approx(tuple(np.percentile(v, (10, 90))))
    assert "2 standard deviations" in _note(7, True, set(), bars="sd2", clipped=True)
    assert "bottom edge" in _note(7, True, set(), bars="sd2", clipped=True)
    assert "percentile" in _note(7, True, set())


def test_sgd_settings_reach_every_units_estimator_and_need_the_sgd_estimator():
    cfg = RatesConfig.from_dict({**TINY, "estimator": "sgd", "sgd_lr": 0.05, "sgd_batch": 16, "sgd_epochs": 3,
                                 "sgd_schedule": "constant", "answer": False})
    exp = Experiment.of(cfg.validate())
    units = make_units(exp)
    assert all(not u.answer for u in units)
    est = unit_estimator(units[0], exp.scenarios[units[0].router], 2)
    assert (est.lr, est.batch_size, est.epochs, est.lr_schedule) == (0.05, 16, 3, "constant")
    with pytest.raises(ValueError, match="sgd_epochs applies to --estimator sgd only"):
        RatesConfig.from_dict({**TINY, "sgd_epochs": 3}).validate()
    with pytest.raises(ValueError, match="sgd_schedule"):
        RatesConfig.from_dict({**TINY, "estimator": "sgd", "sgd_schedule": "warm"}).validate()
    with pytest.raises(ValueError, match="sgd_lr"):
        RatesConfig.from_dict({**TINY, "estimator": "sgd", "sgd_lr": 0.0}).validate()
    with pytest.raises(ValueError, match="bars"):
        RatesConfig.from_dict({**TINY, "bars": "iqr"}).validate()


def test_the_new_keys_at_their_defaults_leave_the_result_hash_of_earlier_runs_unchanged():
    fields = RatesConfig().result_fields()
    assert not {"answer", "sgd_lr", "sgd_batch", "sgd_epochs", "sgd_schedule", "bars"} & set(fields)
    assert "sgd_epochs" in RatesConfig().replace(estimator="sgd", sgd_epochs=5).result_fields()
    assert "answer" in RatesConfig().replace(answer=False).result_fields()


def test_a_tiny_sgd_sweep_reports_every_fit_with_its_own_stop(tmp_path):
    cfg = RatesConfig.from_dict({**TINY, "router": "perturbed,cosine", "k_active": 2, "estimator": "sgd",
                                 "sgd_epochs": 2, "sgd_batch": 32, "sgd_schedule": "constant", "answer": False,
                                 "bars": "sd2"})
    summary = run_rates(cfg, tmp_path / "run")
    df = pd.read_csv(tmp_path / "run" / "results.csv", comment="#")
    assert len(df) == 2 * 3 * 3  # every fit is a row: none dropped
    # SGD has no stopping rule: every fit ran its whole budget of epochs x ceil(n / batch) steps
    assert (df["n_iter"] == 2 * np.ceil(df["n"] / 32)).all()
    assert set(df["status"]) <= {"grad_tol", "max_epochs", "below_truth"}
    assert (df["converged"] == (df["status"] == "grad_tol")).all()
    # no answer: each fit is its one start's, judged against the truth as it is
    assert "answered" not in set(df["truth_check"])
    assert (df["first_gap"] == df["truth_gap"]).all()
    assert summary["counts"]["fits"] == 18 and summary["counts"]["converged"] == int(df["converged"].sum())
    assert (tmp_path / "run" / "convergence.png").exists()


def test_the_cli_flags_of_the_paper_procedure():
    ns = build_parser().parse_args(["--preset", "fig1_paper", "--setting", "over", "--sgd-epochs", "5", "--bars", "percentile"])
    c = config_from_args(ns)
    assert (c.estimator, c.answer, c.sgd_epochs, c.sgd_lr, c.sgd_schedule, c.bars, c.setting) == \
        ("sgd", False, 5, 0.01, "constant", "percentile", "over")
    c = config_from_args(build_parser().parse_args(["--estimator", "sgd", "--no-answer", "--sgd-lr", "0.2"]))
    assert (c.answer, c.sgd_lr) == (False, 0.2)


def test_the_two_paper_presets_differ_only_in_the_estimator_and_its_settings():
    sgd, lse = PRESETS["fig1_paper"], PRESETS["fig1_paper_lse"]
    own = {"estimator", "answer", "sgd_lr", "sgd_batch", "sgd_epochs", "sgd_schedule", "max_iter"}
    assert {k: v for k, v in sgd.items() if k not in own} == {k: v for k, v in lse.items() if k not in own}
    # the same data and starts: the streams are keyed by (seed, n, replicate), the router and
    # estimator are not part of them, and the two presets share seed, grid and starts
    for name in ("fig1_paper", "fig1_paper_lse"):
        c = RatesConfig.from_preset(name).validate()
        assert c.reps == 20 and c.k_active == 2 and c.bars == "sd2" and c.statistic == "mean"
        assert c.router == ("perturbed", "cosine")
    assert RatesConfig.from_preset("fig1_paper").replace(setting="over").validate().setting == "over"
