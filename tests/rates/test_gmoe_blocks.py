"""Per-block errors of the Gaussian MoE's over-fitted cells (Theorem 2 of Nguyen, Nguyen & Ho 2023, block by block)."""

from __future__ import annotations

import numpy as np
import pytest

from moestat.data.gaussian_scenarios import gaussian_voronoi, model1_truth
from moestat.model.mixing import MixingMeasure
from moestat.rates.gmoe_blocks import BLOCKS, block_errors, block_predictions

T = model1_truth()  # d = 1, k* = 2: eta = (a, b, variance)


def _split(R: int, scale: float, seed: int = 0) -> MixingMeasure:
    """K = 3 fits near model 1: atom 0 split in two (half its weight each), the reference atom last."""
    rng = np.random.default_rng(seed)
    b0 = np.array([-8.0 - np.log(2), -8.0 - np.log(2), 0.0]) + scale * rng.normal(size=(R, 3)) * [1, 1, 0]
    b1 = np.array([[25.0], [25.0], [0.0]]) + scale * rng.normal(size=(R, 3, 1)) * np.array([[1], [1], [0]])
    eta = np.array([[-20.0, 15.0, 0.09], [-20.0, 15.0, 0.09], [20.0, -5.0, 0.16]]) + scale * rng.normal(size=(R, 3, 3)) * [1, 1, 0.01]
    return MixingMeasure(b0, b1, eta)


def test_the_blocks_split_param_multi():
    """One shared cell: the four blocks' squared weighted RMS errors add up to param_multi's square."""
    G = _split(25, 0.05)
    be, pm = block_errors(G, T), gaussian_voronoi(G, T, "D2")["param_multi"]
    assert set(be) == set(BLOCKS) and all(v.shape == (25,) for v in be.values())
    np.testing.assert_allclose(np.sqrt(sum(v**2 for v in be.values())), pm, rtol=1e-10)
    assert all(np.all(v <= pm * (1 + 1e-12)) for v in be.values())


@pytest.mark.parametrize("col, where", [("multi_beta1", ("beta1", 0)), ("multi_a", ("eta", 0)), ("multi_b", ("eta", 1)),
                                        ("multi_variance", ("eta", 2))])
def test_an_offset_of_one_block_shows_in_its_column_only(col, where):
    G = _split(1, 0.0)
    arrays = {"beta0": G.beta0.copy(), "beta1": G.beta1.copy(), "eta": G.eta.copy()}
    arrays[where[0]][0, :2, where[1]] += 0.03  # both atoms of the shared cell, the same offset
    be = block_errors(MixingMeasure(arrays["beta0"], arrays["beta1"], arrays["eta"]), T)
    for c, v in be.items():
        assert v[0] == pytest.approx(0.03 if c == col else 0.0, abs=1e-12), c


def test_softmax_common_shift_leaves_every_block_unchanged():
    G = _split(10, 0.05, seed=3)
    H = MixingMeasure(G.beta0 + 1.7, G.beta1 + np.array([-0.4]), G.eta)
    for c, v in block_errors(G, T).items():
        np.testing.assert_allclose(block_errors(H, T)[c], v, rtol=1e-9, atol=1e-12)


def test_no_shared_cell_or_a_non_finite_fit_gives_nan():
    exact = block_errors(MixingMeasure(T.beta0, T.beta1, T.eta), T)
    assert all(np.isnan(v).all() for v in exact.values())
    G = _split(2, 0.05)
    beta0 = G.beta0.copy()
    beta0[1, 0] = np.nan
    be = block_errors(MixingMeasure(beta0, G.beta1, G.eta), T)
    assert all(np.isnan(v[1]) and np.isfinite(v[0]) for v in be.values())


def test_predicted_exponents_are_theorem_2s():
    assert block_predictions(2) == {"multi_beta1": -1 / 8, "multi_b": -1 / 8, "multi_a": -1 / 4, "multi_variance": -1 / 4}
    assert block_predictions(3) == {"multi_beta1": -1 / 12, "multi_b": -1 / 12, "multi_a": -1 / 6, "multi_variance": -1 / 6}
    with pytest.raises(ValueError, match="2 or 3"):
        block_predictions(4)


# ---- the sweep's wiring: columns, values and predictions of one scenario ---------------------------------
def test_an_over_fitted_model_1_has_the_block_columns_with_a_cell_of_two_predicted_for_k3():
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.rates.gmoe_blocks import block_columns, block_predicted

    sc3, sc4 = model1_scenario("over", 3), model1_scenario("over", 4)
    assert block_columns(sc3) == block_columns(sc4) == tuple(BLOCKS)
    assert block_predicted(sc3) == block_predictions(2)
    assert block_predicted(sc4) == {c: None for c in BLOCKS}  # 2 + 2 or 3 + 1: the fit's cells, not the design's
    G = _split(4, 0.05, seed=1)
    got = sc3.loss_columns(G, np.zeros((5, T.dim)))  # the scenario's own columns, beside param_multi
    for c, v in block_errors(G, T).items():
        np.testing.assert_array_equal(got[c], v)


def test_an_exact_fit_or_another_model_gets_no_block_column():
    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.rates.config import RatesConfig
    from moestat.rates.gmoe_blocks import block_columns, block_predicted
    from moestat.rates.resolve import Experiment

    exact = model1_scenario("exact")
    G = MixingMeasure(T.beta0, T.beta1, T.eta)
    assert block_columns(exact) == () and block_predicted(exact) == {}
    assert not set(BLOCKS) & set(exact.loss_columns(G, np.zeros((5, T.dim))))
    # the default regression scenario over-specified: no Gaussian MoE, no column
    reg = next(iter(Experiment.of(RatesConfig.from_dict({"setting": "over"})).scenarios.values()))
    assert reg.setting == "over" and block_columns(reg) == () and block_predicted(reg) == {}


@pytest.mark.slow
def test_a_sweep_of_an_over_fitted_model_1_records_the_blocks_with_their_predictions(tmp_path):
    """The sweep writes the four columns to extras.csv, they are the fits' own (their squares add up to
    results.csv's param_multi, K = 3: one shared cell) and they are fitted with Theorem 2's exponents."""
    import pandas as pd

    from moestat.rates.config import RatesConfig
    from moestat.rates.experiment import run_rates

    cfg = RatesConfig.from_dict({"family": "gaussian-moe", "setting": "over", "k_fit": 3, "estimator": "mle",
                                 "n_min": 300, "n_max": 600, "n_points": 3, "reps": 2, "max_iter": 100, "quiet": True})
    summary = run_rates(cfg, tmp_path, figure_formats=())
    res, ex = pd.read_csv(tmp_path / "results.csv"), pd.read_csv(tmp_path / "extras.csv")
    assert list(ex.columns) == ["router", "n", "replicate", *BLOCKS] and len(ex) == len(res) == 6
    both = res.merge(ex, on=["router", "n", "replicate"])
    np.testing.assert_allclose(np.sqrt(sum(both[c] ** 2 for c in BLOCKS)), both["param_multi"], rtol=1e-9)
    fits = {f["loss"]: f for f in summary["fits"]}
    assert {c: fits[c]["predicted"] for c in BLOCKS} == block_predictions(2)
