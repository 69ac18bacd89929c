"""The ||X||_2 target and Theorem 1's witness pairs (the Soft MoE implicit-bias paper, 2024, Section 3, Appendices A and B)."""

import math

import pytest
import torch

from moestat.data.norm_target import (
    chi_mean,
    constant_predictor_mse,
    sample_norm_target,
    slot_gap,
    theorem1_tolerance,
    witness_pairs,
)
from moestat.nn.softmoe import SoftMoERegressor
from moestat.experiments.softmoe_norm_target import fit_regressor, witness_check


def test_sampler_is_seeded_and_labels_are_norms():
    X1, y1 = sample_norm_target(5000, torch.Generator().manual_seed(4))
    X2, y2 = sample_norm_target(5000, torch.Generator().manual_seed(4))
    assert torch.equal(X1, X2) and torch.equal(y1, y2)
    torch.testing.assert_close(y1, X1.norm(dim=1))
    assert abs(float(X1.var()) - 5.0) < 0.15  # 5 is the variance
    with pytest.raises(ValueError, match="variance"):
        sample_norm_target(3, torch.Generator(), variance=-1.0)


def test_constant_predictor_mse_is_var_of_the_norm():
    X, y = sample_norm_target(400_000, torch.Generator().manual_seed(0), dtype=torch.float64)
    assert abs(float(y.mean()) - math.sqrt(5) * chi_mean(10)) < 0.02
    assert abs(float(y.var()) - constant_predictor_mse(10, 5.0)) < 0.03
    assert abs(chi_mean(1) - math.sqrt(2 / math.pi)) < 1e-12


@pytest.mark.parametrize("phi1,case,ratio", [(0.7, "positive", math.sqrt(2) - 1), (-0.4, "negative", math.sqrt(2) - 1),
                                             (0.0, "zero", 1 - 1 / math.sqrt(2))])
def test_witness_pairs_follow_the_proof(phi1, case, ratio):
    phi = torch.tensor([phi1, 0.3 if phi1 == 0 else 0.0, -0.2 if phi1 == 0 else 0.0])
    coord = 0
    a = [5.0, 20.0, 50.0]
    A, B, got = witness_pairs(phi, 4, a, coord=coord)
    assert got == case and A.shape == (3, 4, 3)
    gap_t = (A.flatten(1).norm(dim=1) - B.flatten(1).norm(dim=1)).abs()
    torch.testing.assert_close(gap_t, torch.tensor(a, dtype=torch.float64) * ratio)
    gaps = slot_gap(phi, A, B)
    if case == "zero":
        assert float(gaps.abs().max()) == 0.0  # identical slots for every a
    else:
        # slots converge like a * exp(-a |phi_1|) while the norm gap grows like a
        assert gaps[0] > gaps[1] > gaps[2] and float(gaps[2]) < 1e-5


@pytest.mark.slow
def test_single_expert_cannot_separate_the_pairs_but_the_bound_is_tight_only_for_n1():
    """For n = 1 the prediction gap on the pairs vanishes, so the error is at least ~norm gap / 2,
    far above Theorem 1's tolerance max{1, t/20} (holds for any weights, trained or not)."""
    model = SoftMoERegressor(5, 2, 1, random_state=0)
    fit_regressor(model, steps=100, batch_size=128, random_state=1)
    rows = witness_check(model, (20.0, 80.0))
    last = rows[-1]
    assert last["pred_gap"] / last["norm_gap"] < 1e-3
    assert last["pair_error"] >= last["lower_bound"] > last["tolerance"]
    assert rows[0]["slot_gap"] > rows[1]["slot_gap"]


def test_tolerance():
    torch.testing.assert_close(theorem1_tolerance(torch.tensor([5.0, 40.0])), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="m must"):
        witness_pairs(torch.tensor([1.0]), 1, [1.0])


@pytest.mark.slow
def test_one_expert_is_worse_than_many_on_the_norm_target():
    """Appendix B's claim in miniature (5x2 tokens, 2 seeds, 1500 steps): n = 1 ends above the
    best of n in {2, 5}.  Only the ordering n = 1 vs best n > 1 is asserted, not monotonicity."""
    from moestat.experiments.softmoe_norm_target import norm_target_table, run_norm_target

    res = run_norm_target(tokens=("5x2",), experts=(1, 2, 5), steps=1500, seeds=2, eval_size=5000, random_state=11,
                          a_values=(20.0,))
    table = {r["n_experts"]: r["mean"] for r in norm_target_table(res)}
    assert table[1] > min(table[2], table[5])
