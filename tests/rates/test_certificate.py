"""Optimum certificate and cell errors in extras.csv: results.csv unchanged, chunking-independent."""

import pandas as pd

from moestat.rates import RatesConfig, run_rates

BASE = {"n_min": 100, "n_max": 400, "n_points": 3, "reps": 2, "max_iter": 15, "holdout": 256, "n_boot": 50, "quiet": True}


def _run(tmp_path, name, **kw):
    s = run_rates(RatesConfig.from_dict({**BASE, **kw}), tmp_path / name)
    return s, tmp_path / name


def test_certificate_leaves_results_alone_and_does_not_depend_on_chunking(tmp_path):
    s0, d0 = _run(tmp_path, "plain")
    s1, d1 = _run(tmp_path, "cert", extra_starts=3, cell_errors=True)
    s2, d2 = _run(tmp_path, "cert_chunked", extra_starts=3, cell_errors=True, chunk=1)
    assert not (d0 / "extras.csv").exists() and s0["certificate"] is None
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
    rows = s1["certificate"]["by_router"]["perturbed"]
    assert [r["n"] for r in rows] == [100, 200, 400] and sum(r["certified"] for r in rows) == 6
    losses = {f["loss"] for f in s1["fits"]}
    assert {"best_voronoi", "weighted_single", "beta1_radial", "beta1_direction"} <= losses
