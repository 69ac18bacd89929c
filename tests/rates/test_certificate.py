"""Optimum certificate and cell errors in extras.csv: results.csv unchanged, chunking-independent."""

import pytest
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


@pytest.mark.slow
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


@pytest.mark.slow
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

    from moestat.estimators import random_start_for

    ex = Path(__file__).resolve().parents[2] / "examples"
    sc = load_scenario(f"{ex / 'mlp_expert.py'}:scenario")
    G = random_start_for(sc.declaration, None, None, np.random.default_rng(0))
    assert G.eta.shape == (sc.k_fit, sc.model.n_expert_params(sc.d)) and sc.model.n_expert_params(sc.d) != sc.d + 1
    # a built-in width draws the start it always drew
    from moestat.estimators.starts import random_init

    lin = load_scenario(str(ex / "softmax_linear.toml"))
    a, b = random_start_for(lin.declaration, None, None, np.random.default_rng(3)), random_init(lin.k_fit, lin.d, np.random.default_rng(3))
    assert np.array_equal(a.eta, b.eta) and np.array_equal(a.beta1, b.beta1)


@pytest.mark.slow
def test_declared_losses_at_the_best_fit_and_a_resume_of_an_older_extras_file(tmp_path, capsys):
    """A scenario file's declared losses get their ``best_<loss>`` column too (the loss at the
    certificate's best fit; the same value where no extra start won), as the last columns; an
    ``extras.csv`` written before those columns existed is resumed with its own header."""
    from pathlib import Path

    import numpy as np

    from moestat.rates.extras import KEY, extra_columns, legacy_columns
    from moestat.rates.fit import fit_experiment
    from moestat.rates.resolve import Experiment

    ex = Path(__file__).resolve().parents[2] / "examples"
    d = _file_sweep(tmp_path, "new", str(ex / "sigmoid_over.toml"), extra_starts=2)
    e = pd.read_csv(d / "extras.csv")
    assert list(e.columns)[-1] == "best_D2_sigmoid" and list(e.columns) == list(extra_columns(2, False, ("D2_sigmoid",)))
    same = e["beaten"] == 0
    assert same.any() and (e.loc[same, "best_D2_sigmoid"] == e.loc[same, "D2_sigmoid"]).all()
    assert np.isfinite(e["best_D2_sigmoid"]).all()

    # the same sweep, its extras.csv rewritten as an earlier moestat wrote it and its last unit lost
    old = tmp_path / "old"
    old.mkdir()
    cols = legacy_columns(tuple(e.columns), ("D2_sigmoid",))
    assert "best_D2_sigmoid" not in cols and len(cols) == len(e.columns) - 1
    last = e["n"] == e["n"].max()
    e.loc[~last, list(cols)].to_csv(old / "extras.csv", index=False)
    res = pd.read_csv(d / "results.csv")
    lines = (d / "results.csv").read_text().splitlines(keepends=True)
    (old / "results.csv").write_text("".join(lines[:1] + [ln for ln, n in zip(lines[1:], res["n"]) if n != e["n"].max()]))
    for f in d.iterdir():
        if f.name not in ("results.csv", "extras.csv"):
            (old / f.name).write_bytes(f.read_bytes())
    cfg = RatesConfig.from_dict({**BASE, "scenario_file": str(ex / "sigmoid_over.toml"), "extra_starts": 2})
    cfg.validate()
    df = run_sweep(cfg, old, resume=True, progress=False)
    assert "continued with its own columns" in capsys.readouterr().err
    again = pd.read_csv(old / "extras.csv")
    assert list(again.columns) == list(cols) and len(again) == len(e)  # the old header, the lost unit rerun
    key = list(KEY)
    a = again.sort_values(key).reset_index(drop=True)
    b = e[list(cols)].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
    fits = fit_experiment(df, Experiment.of(cfg))  # every loss fitted but the absent column
    losses = {f["loss"] for f in fits}
    assert "best_D2_sigmoid" not in losses and {"D2_sigmoid", "best_voronoi"} <= losses


def test_a_declared_losses_best_column_has_its_prediction():
    from moestat.rates.fit import predicted_exponent

    predicted = {"voronoi": None, "regression_l2": -0.5, "D2_x": -0.25}
    assert predicted_exponent("file:x", "over", "best_D2_x", "lse", predicted) == -0.25
    assert predicted_exponent("file:x", "over", "best_voronoi", "lse", predicted) is None
    assert predicted_exponent("file:x", "over", "best_regression_l2", "lse", predicted) == -0.5
