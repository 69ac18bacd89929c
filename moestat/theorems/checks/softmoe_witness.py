"""Theorem 1 of the Soft MoE implicit-bias paper (2024): a single-expert Soft MoE cannot fit ``||X||_2``.

The proof's witness pairs ``(A_a, B_a)`` (Appendix A) are evaluated through the Soft MoE layer
itself (one expert, one slot; :class:`moestat.nn.softmoe.SoftMoE`): the slots ``D(X)^T X`` of
``A_a`` and ``B_a`` converge as ``a`` grows while the norm gap ``|t(A) - t(B)|`` grows like
``a``, so no Lipschitz expert and head can follow the target within ``max{1, t/20}``.

Prediction: for every router sign case (``Phi_1 > 0, < 0, = 0``) the slot gap at the largest
``a`` is below ``1e-6`` while the norm gap exceeds the sum of the two tolerances; the implied
Lipschitz constant ``L_f L_g >= (gap - tolerances) / (sqrt(m) * slot gap)`` then exceeds ``1e6``.
Rule: both hold in every case.  Also checked: the one-expert layer's combine weights are all 1.
"""

from __future__ import annotations

import math

import torch

from moestat.data.norm_target import theorem1_tolerance, witness_pairs
from moestat.theorems.checks.framework import CheckResult, Context, verdict
from moestat.nn.softmoe import SoftMoE

NAMES = ["softmoe_thm1_witness"]


def run(ctx: Context) -> list[CheckResult]:
    m, d = 4, 3
    a_values = [5.0, 10.0, 20.0, 40.0, 80.0] if ctx.quick else [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0]
    rng = ctx.rng("softmoe")
    worst_gap, worst_L = 0.0, math.inf
    per_case = {}
    combine_ok = True
    for case, sign in (("positive", 1.0), ("negative", -1.0), ("zero", 0.0)):
        layer = SoftMoE(d=d, n_experts=1, random_state=int(rng.integers(2**31)), dtype=torch.float64)
        with torch.no_grad():
            w = torch.as_tensor(rng.normal(0, 1, size=d))
            w[0] = sign * (0.5 + abs(w[0]))
            if sign == 0.0:
                w[:] = 0.0  # the Phi = 0 case of the proof: every logit is 0
            layer.router_weight.copy_(w.reshape(1, d))
        A, B, got = witness_pairs(w, m, a_values, coord=0)
        with torch.no_grad():
            outA = layer(A, return_details=True)
            outB = layer(B, return_details=True)
        combine_ok &= bool(torch.allclose(outA.combine, torch.ones_like(outA.combine)))
        slotA = outA.slots.reshape(len(a_values), d)
        slotB = outB.slots.reshape(len(a_values), d)
        slot_gap = torch.linalg.vector_norm(slotA - slotB, dim=-1)
        tA = torch.linalg.vector_norm(A.reshape(len(a_values), -1), dim=-1)
        tB = torch.linalg.vector_norm(B.reshape(len(a_values), -1), dim=-1)
        norm_gap = (tA - tB).abs()
        slack = norm_gap - theorem1_tolerance(tA) - theorem1_tolerance(tB)
        L = torch.where(slot_gap > 0, slack / (math.sqrt(m) * slot_gap), torch.full_like(slack, math.inf))
        per_case[case] = {"construction": got, "a": a_values, "slot_gap": slot_gap.tolist(), "norm_gap": norm_gap.tolist(),
                          "slack": slack.tolist(), "lipschitz_lower_bound": L.tolist()}
        worst_gap = max(worst_gap, float(slot_gap[-1]))
        worst_L = min(worst_L, float(L[-1]) if float(slack[-1]) > 0 else -math.inf)
    ok = worst_gap < 1e-6 and worst_L > 1e6 and combine_ok
    return [verdict("softmoe_thm1_witness",
                    "Soft MoE implicit-bias paper (2024), Theorem 1: one-expert Soft MoE slots of the witness pairs coincide while ||A|| - ||B|| grows like a",
                    0.0, worst_gap, None, None, ok,
                    "max slot gap at the largest a < 1e-6, implied L_f L_g > 1e6, combine weights all 1, in every sign case",
                    details={"m": m, "d": d, "cases": per_case, "min_lipschitz_lower_bound": worst_L, "combine_all_ones": combine_ok})]
