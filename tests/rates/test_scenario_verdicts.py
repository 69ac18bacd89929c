"""Scenarios other than the default (d, k*, expert, Top-K gate): no verdict confidently wrong.

Small sweeps (seconds): every loss with a polynomial prediction must get a category that agrees
with the prediction or says why it cannot tell yet -- never ``inconsistent`` -- and every reason
is one line.  The larger runs of the same four variants are in records/rates/history.rst.
"""

import pytest

from moestat.rates import RatesConfig
from moestat.rates.fit import fit_rates
from moestat.rates.sweep import run_sweep

SMALL = {"router": "perturbed", "n_min": 200, "n_max": 800, "n_points": 3, "reps": 3, "max_iter": 40,
         "holdout": 256, "n_boot": 100, "quiet": True}


@pytest.mark.slow
@pytest.mark.parametrize("variant", [{"d": 2}, {"k_true": 2}, {"expert": "tanh"}, {"k_active": 2}],
                         ids=["d2", "kstar2", "tanh", "top2"])
def test_no_confidently_wrong_verdict(variant, tmp_path):
    cfg = RatesConfig.from_dict({**SMALL, **variant})
    cfg.validate()
    (tmp_path / "run").mkdir()
    df = run_sweep(cfg, tmp_path / "run", progress=False)  # the sweep and the fit of run_rates, no figures
    fits = fit_rates(df, setting=cfg.setting, estimator=cfg.estimator, routers=cfg.router, n_boot=cfg.n_boot, seed=cfg.seed)
    assert {f["loss"] for f in fits} >= {"voronoi", "regression_l2"}
    for f in fits:
        assert "\n" not in (f["reason"] or "")
        if f["predicted"] is None:
            continue
        assert f["category"] != "inconsistent", (variant, f["loss"], f["reason"])
