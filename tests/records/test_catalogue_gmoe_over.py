"""The over-fitted softmax-gated Gaussian MoE entries' designs (``gmoe-over3``, ``gmoe-over4``)."""

from __future__ import annotations

from moestat.rates import catalogue as cat

from script_loader import load_script


def _full(key: str) -> dict:
    (run,) = cat.entry(key).runs
    return run.full


def test_gmoe_over3_full_design_has_forty_replicates_on_gmoe_over4s_grid():
    # issue 33 scope 4: >= 40 replicates for over-specified designs; the starts and estimator are the
    # 10-replicate record's (records/archive/catalogue/gmoe-over3/ten_replicates/); then the grid grown to gmoe-over4's
    # 13 sizes (HYPOTHESES.md, "gmoe-over3 on gmoe-over4's grid"), whose first 11 are the former grid
    from moestat.rates.config import sample_sizes

    full = _full("gmoe-over3")
    assert full["reps"] == 40
    assert (full["n_min"], full["n_max"], full["n_points"], full["starts"]) == (200, 50_238, 13, 2)
    assert {k: full[k] for k in ("n_min", "n_max", "n_points")} == {k: _full("gmoe-over4")[k] for k in ("n_min", "n_max", "n_points")}
    assert sample_sizes(200, 50_238, 13)[:11] == sample_sizes(200, 20_000, 11)
    assert "13 log-spaced n from 200 to 50 238, 40 replicates" in cat.entry("gmoe-over3").paper_design
    (run,) = cat.entry("gmoe-over3").runs
    assert run.base["estimator"] == "mle" and run.base["k_fit"] == 3


def test_gmoe_over4_full_design_has_85_replicates_on_the_grown_grid():
    # the same scope 4 as K = 3 (40, from the 10-replicate record, records/archive/catalogue/gmoe-over4/ten_replicates/),
    # then 85 by the rule of the test below; then the grid grown by the next two sizes of its own ladder
    # (HYPOTHESES.md, "gmoe-over4's grid grown to 50 238"): the 11 recorded sizes are the first 11 of the new grid
    from moestat.rates.config import GridSpec, sample_sizes

    full = _full("gmoe-over4")
    assert (full["n_min"], full["n_max"], full["n_points"], full["reps"], full["starts"]) == (200, 50_238, 13, 85, 2)
    assert "13 log-spaced n from 200 to 50 238, 85 replicates" in cat.entry("gmoe-over4").paper_design
    old = sample_sizes(200, 20_000, 11)
    ladder = GridSpec(n_min=200, n_max=20_000, n_points=11, grow_n=50_238).ladder
    assert sample_sizes(200, 50_238, 13) == old + ladder == old + [31_698, 50_238]


def test_gmoe_over4_replicates_follow_the_declared_rule_from_its_recorded_plan():
    # fig1b124w's rule on the 40-replicate record (records/declarations/catalogue/README.md), its plan computed under
    # today's rules (the per-n median from the truth's n_ok; the record's summary.json was written under the
    # mean): a quarter of the largest reps_needed (+-0.05) over the judged rows, for +-0.1, rounded up to the
    # chunk of 5
    import json
    import math
    from pathlib import Path

    from moestat.rates.catalogue_views import recorded_fits

    d = Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "gmoe-over4" / "design40" / "gaussian-moe"
    config = json.loads((d / "provenance.json").read_text())["config"]
    assert config["reps"] == 40 and config["chunk"] == 5
    fits = recorded_fits(d)
    needed = max(f["plan"]["reps_needed"] for f in fits if f["predicted"] is not None)
    assert 5 * math.ceil(needed / 4 / 5) == _full("gmoe-over4")["reps"] == 85  # the entry's data file


def _cell_script():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "gmoe-over3" / "gmoe_over3_cell.py"
    return load_script(path)


def test_cell_anatomy_splits_the_recorded_block_error_into_mean_and_spread():
    # a split of model 1's first atom into masses p, 1 - p of its weight, b shifted by d1, d2 and beta1 by e1, e2:
    # the anatomy's rms is block_errors' column, rms^2 = mean^2 + spread^2, and a split with p d1 + (1 - p) d2 = 0
    # has mean 0 and spread sqrt(p (1 - p)) |d1 - d2| (the identity the diagnostic's decomposition rests on)
    import numpy as np

    from moestat.data.gaussian_scenarios import block_errors, model1_truth
    from moestat.model.mixing import MixingMeasure

    mod = _cell_script()
    T = model1_truth()
    p, d1, e1, e2 = 0.2, 0.4, 1.5, 0.5
    d2 = -p * d1 / (1 - p)
    beta0 = np.array([-8 + np.log(p), -8 + np.log(1 - p), 0.0])
    beta1 = np.array([[25 + e1], [25 + e2], [0.0]])
    eta = np.array([[-20.0, 15 + d1, 0.09], [-20.0, 15 + d2, 0.09], [20.0, -5.0, 0.16]])
    G = MixingMeasure(beta0[None], beta1[None], eta[None])
    (cell,) = mod.cell_anatomy(G, T)
    blocks = block_errors(G, T)
    assert cell["cell"] == 0 and np.isclose(cell["p_min"], p) and np.isclose(cell["cell_mass"], np.exp(-8))
    for name in mod.BLOCK_NAMES:
        c = cell[name]
        assert np.isclose(c["rms"], blocks[f"multi_{name}"][0], rtol=1e-12, atol=1e-15)
        assert np.isclose(c["rms"] ** 2, c["mean"] ** 2 + c["spread"] ** 2, rtol=1e-12, atol=1e-15)
    assert np.isclose(cell["b"]["mean"], 0.0, atol=1e-12)
    assert np.isclose(cell["b"]["spread"], np.sqrt(p * (1 - p)) * abs(d1 - d2))
    assert np.isclose(cell["beta1"]["mean"], p * e1 + (1 - p) * e2)
    assert cell["a"]["rms"] == 0.0 and cell["variance"]["rms"] == 0.0


def test_cosine_over_replicates_follow_the_declared_rule_from_its_recorded_plan():
    # fig1b124w's rule on the 40-replicate record (records/declarations/catalogue/README.md): a quarter of the largest
    # reps_needed (+-0.05) over the perturbed router's judged rows, for +-0.1, rounded up to the chunk of 4
    import json
    import math
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "cosine-over" / "design40"
    fits = json.loads((root / "routers" / "summary.json").read_text())["fits"]
    needed = max(f["plan"]["reps_needed"] for f in fits if f["predicted"] is not None and f["router"] == "perturbed")
    assert 4 * math.ceil(needed / 4 / 4) == _full("cosine-over")["reps"] == 324  # the entry's data file


def test_gmoe_over4_record_is_the_20k_record_grown_by_its_two_ladder_sizes():
    # HYPOTHESES.md, "gmoe-over4's grid grown to 50 238": the 11 recorded sizes' rows are kept as they were (streams
    # keyed by (n, replicate), no estimator change in between), the two new sizes hold 85 replicates each, and the
    # record's configuration is the entry's (so `moestat reproduce gmoe-over4 --resume` accepts it)
    import json
    from pathlib import Path

    import pandas as pd

    from moestat.rates.catalogue import plan
    from moestat.rates.config import RatesConfig, sample_sizes

    over4 = Path(__file__).resolve().parents[2] / "records" / "catalogue" / "gmoe-over4"
    grown, former = over4 / "gaussian-moe", Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "gmoe-over4" / "grid20k" / "gaussian-moe"
    for name in ("results.csv", "extras.csv"):
        new, old = pd.read_csv(grown / name), pd.read_csv(former / name)
        kept = new[new["n"].isin(old["n"].unique())].reset_index(drop=True)
        pd.testing.assert_frame_equal(kept, old)
    rows = pd.read_csv(grown / "results.csv")
    per_n = rows.groupby("n").size()
    assert list(per_n.index) == sample_sizes(200, 50_238, 13) and (per_n == 85).all()
    ((_, config),) = plan("gmoe-over4")
    prov = json.loads((grown / "provenance.json").read_text())
    assert RatesConfig.from_dict(prov["config"]).result_fields() == config.result_fields()
    from moestat.rates import grow

    assert grow.check_growable(grown, config) == []
    assert grow.check_growable(former, config) == [31_698, 50_238]


def test_gmoe_over3_record_is_the_entrys_sweep_on_the_13_sizes_every_fit_above_the_truth():
    # HYPOTHESES.md, "gmoe-over3 on gmoe-over4's grid": all 13 sizes fitted afresh, 40 replicates each, the record's
    # configuration the entry's; no fit below the truth's log-likelihood is kept as if it were converged (issue 33
    # scope 1), and a fit that did not converge is kept and counted, not dropped
    import json
    from pathlib import Path

    import pandas as pd

    from moestat.rates.catalogue import plan
    from moestat.rates.config import RatesConfig, sample_sizes

    over3 = Path(__file__).resolve().parents[2] / "records" / "catalogue" / "gmoe-over3"
    rows = pd.read_csv(over3 / "gaussian-moe" / "results.csv")
    per_n = rows.groupby("n").size()
    assert list(per_n.index) == sample_sizes(200, 50_238, 13) and (per_n == 40).all()
    assert (rows["truth_check"] == "above").all() and (rows["truth_gap"] >= 0).all()
    assert set(rows.loc[rows["converged"] == 0, "status"]) <= {"max_iter"}
    ((_, config),) = plan("gmoe-over3")
    prov = json.loads((over3 / "gaussian-moe" / "provenance.json").read_text())
    assert RatesConfig.from_dict(prov["config"]).result_fields() == config.result_fields()
    former = pd.read_csv(Path(__file__).resolve().parents[2] / "records" / "archive" / "catalogue" / "gmoe-over3" / "grid20k" / "gaussian-moe" / "results.csv")
    assert list(former.groupby("n").size().index) == sample_sizes(200, 20_000, 11)


def test_a_run_grown_by_sizes_and_replicates_has_the_rows_of_the_grown_sweep_run_afresh(tmp_path):
    # moestat.rates.grow.grow_run (moestat rates --grow-from): the record's rows are kept and only the missing
    # (n, replicate) fitted, so the grown folder must hold exactly the rows a fresh sweep of the grown configuration
    # writes (streams keyed by (seed, n, replicate), whole chunks kept); a record whose last chunk is partial is refused
    import pandas as pd
    import pytest

    from moestat.rates import grow
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import run_sweep_rows

    tiny = dict(d=2, n_min=40, n_max=160, n_points=3, reps=2, chunk=2, max_iter=5, holdout=256, n_boot=100, quiet=True,
                extra_starts=1, n_jobs=1)
    small = RatesConfig.from_dict(tiny).validate()
    for f in ("small", "fresh", "odd"):
        (tmp_path / f).mkdir()
    run_sweep_rows(small, tmp_path / "small", progress=False)
    grown = grow.grow_run(tmp_path / "small", tmp_path / "grown", n_jobs=1, n_min=20, n_points=4, reps=4)
    big = small.replace(n_min=20, n_points=4, reps=4)
    assert set(small.ns) < set(big.ns) and grown == big.ns
    run_sweep_rows(big, tmp_path / "fresh", progress=False)
    for name in ("results.csv", "extras.csv"):
        a, b = (pd.read_csv(tmp_path / f / name).sort_values(["n", "replicate"]).reset_index(drop=True)
                for f in ("grown", "fresh"))
        keep = [c for c in a.columns if c not in ("time", "crc32")]
        assert len(a) == 4 * 4
        pd.testing.assert_frame_equal(a[keep], b[keep])
    odd = RatesConfig.from_dict({**tiny, "reps": 3}).validate()
    run_sweep_rows(odd, tmp_path / "odd", progress=False)
    with pytest.raises(grow.GrowError, match="whole chunks"):
        grow.grow_run(tmp_path / "odd", tmp_path / "odd_grown", n_jobs=1, reps=4)
    assert not (tmp_path / "odd_grown").exists()
