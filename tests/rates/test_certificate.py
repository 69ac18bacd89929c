"""Optimum certificate and cell errors in extras.csv: results.csv unchanged, chunking-independent."""

import pandas as pd

from moestat.rates import RatesConfig
from moestat.rates.sweep import run_sweep

BASE = {"n_min": 100, "n_max": 400, "n_points": 3, "reps": 2, "max_iter": 15, "holdout": 256, "n_boot": 50, "quiet": True}


def _sweep(tmp_path, name, **kw):
    """The sweep alone (no rate fit, no figures): enough for results.csv and extras.csv."""
    cfg = RatesConfig.from_dict({**BASE, **kw})
    cfg.validate()
    (tmp_path / name).mkdir()
    run_sweep(cfg, tmp_path / name, progress=False)
    return tmp_path / name


def test_certificate_leaves_results_alone_and_does_not_depend_on_chunking(tmp_path):
    d0 = _sweep(tmp_path, "plain")
    d1 = _sweep(tmp_path, "cert", extra_starts=3, cell_errors=True)
    d2 = _sweep(tmp_path, "cert_chunked", extra_starts=3, cell_errors=True, chunk=1)
    assert not (d0 / "extras.csv").exists()
    r0, r1 = (pd.read_csv(d / "results.csv").drop(columns="time") for d in (d0, d1))
    assert r0.equals(r1)  # the near-truth fits are untouched by the extra starts
    e1 = pd.read_csv(d1 / "extras.csv").sort_values(["n", "replicate"]).reset_index(drop=True)
    e2 = pd.read_csv(d2 / "extras.csv").sort_values(["n", "replicate"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(e1, e2)
    m = r1.merge(e1, on=["router", "n", "replicate"])
    assert len(m) == 6 and (m["n_starts"] == 4).all() and m["beaten"].isin([0, 1]).all()
    assert (m["best_objective"] <= m["objective"] * (1 + 1e-12)).all()
    same = m["beaten"] == 0
    assert (m.loc[same, "best_voronoi"] == m.loc[same, "voronoi"]).all()  # no better minimum: the same fit
    # what run_rates does with it (without drawing figures): the per-n certificate and the extra losses
    from moestat.rates.extras import certificate_summary, extra_columns, merge_extras
    from moestat.rates.fit import fit_rates
    from moestat.rates.store import read_results

    cfg = RatesConfig.from_dict({**BASE, "extra_starts": 3, "cell_errors": True})
    df = merge_extras(read_results(d1 / "results.csv"), d1 / "extras.csv")
    rows = certificate_summary(df, cfg.router, cfg.extra_starts)["by_router"]["perturbed"]
    assert [r["n"] for r in rows] == [100, 200, 400] and sum(r["certified"] for r in rows) == 6
    assert sum(r["beaten"] for r in rows) == int(m["beaten"].sum())
    # the run read back once (what run_rates summarises): the same rows, certificate, counts and digest
    from moestat.rates.store import audit_results, read_run

    run = read_run(d1, cfg)
    pd.testing.assert_frame_equal(run.df, df)
    assert run.certificate == certificate_summary(df, cfg.router, cfg.extra_starts)
    assert run.audit.digest == audit_results(d1 / "results.csv", cfg)[1].digest and run.audit.rows == 6
    assert run.counts["fits"] == run.counts["expected"] == 6 and run.counts["by_router"]["perturbed"]["fits"] == 6
    assert sum(run.truth_check["perturbed"][k] for k in ("found", "above", "unknown", "not_comparable")) <= 6
    extra = [c for c in extra_columns(3, True) if c.startswith(("best_", "weighted", "beta1")) and c != "best_objective"
             and c != "best_start"]
    fits = fit_rates(df, setting="exact", estimator="lse", losses=extra, n_boot=50)
    assert {f["loss"] for f in fits} == set(extra) and all("category" in f for f in fits)


def _file_sweep(tmp_path, name, source, **kw):
    return _sweep(tmp_path, name, scenario_file=source, **kw)


def test_certificate_starts_follow_a_scenario_files_conventions(tmp_path):
    """The extra starts of a scenario file are drawn in its own conventions (issue 33): a gate
    without a reference atom (sigmoid), a mixture-noise file with per-atom variances and a Laplace gate,
    and an MLP expert of q != d + 1 parameters -- each of them was an internal error when the
    certificate drew the built-in regression model's starts."""
    from pathlib import Path

    ex = Path(__file__).resolve().parents[2] / "examples"
    runs = {
        "sigmoid": (str(ex / "sigmoid_over.toml"), {}),
        "laplace": (str(ex / "laplace_moe_d2.toml"), {"estimator": "mle"}),
        "mlp": (f"{ex / 'mlp_expert.py'}:scenario", {"init": "random"}),
    }
    for name, (source, kw) in runs.items():
        d = _file_sweep(tmp_path, name, source, extra_starts=2, **kw)
        m = pd.read_csv(d / "results.csv").merge(pd.read_csv(d / "extras.csv"), on=["router", "n", "replicate"])
        assert len(m) == 6 and (m["n_starts"] == 3).all(), name
        # the best of the three starts is never worse than the reported fit (both criteria are minimised)
        assert (m["best_objective"] <= m["objective"] + 1e-12 * m["objective"].abs()).all(), name


def test_a_file_scenarios_random_start_has_its_experts_width():
    import numpy as np

    from moestat.data.scenario_files import load_scenario
    from pathlib import Path

    ex = Path(__file__).resolve().parents[2] / "examples"
    sc = load_scenario(f"{ex / 'mlp_expert.py'}:scenario")
    G = sc.random_start(None, None, np.random.default_rng(0))
    assert G.eta.shape == (sc.k_fit, sc.model.n_expert_params(sc.d)) and sc.model.n_expert_params(sc.d) != sc.d + 1
    # a built-in width draws the start it always drew
    from moestat.estimators.starts import random_init

    lin = load_scenario(str(ex / "softmax_linear.toml"))
    a, b = lin.random_start(None, None, np.random.default_rng(3)), random_init(lin.k_fit, lin.d, np.random.default_rng(3))
    assert np.array_equal(a.eta, b.eta) and np.array_equal(a.beta1, b.beta1)
