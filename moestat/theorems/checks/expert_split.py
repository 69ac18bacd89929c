"""Linear vs FFN experts under a softmax gate (Nguyen, Ho & Rinaldo (2024), catalogue ``lse-ffn-vs-linear``)
as minimax statements: Le Cam's two points along the over-specified split of an expert.

The entry's slow prediction (linear experts: no polynomial rate) bounds every estimator, so it is
checked with :func:`moestat.theorems.judges.expert_two_point.expert_split_curve`: atom 0 of the entry's truth
(``k* = 2``) split into two half-weight atoms with the same gate and experts ``eta -+ t u``
(``k* + 1 = k = 3`` atoms, the entry's over-specified class), KL by Monte Carlo over the scenario's
inputs, the bound on the minimax ``D2_ls`` risk maximised over the split grid, ``n = 1e2 .. 1e7``.
No fitting.  Predictions and rules, written before the first run:

- ``lecam_linear_expert_flat``: linear experts ``a^T x + b`` are affine in ``(a, b)``, so the split
  leaves the regression function unchanged (``KL = 0``): the bound does not fall.  Rule: the
  conservative bound (KL + 2 SE) at ``n = 1e7`` is at least half of the bound at ``n = 1e2``
  (predicted ratio 1).  It fails for an expert that is not affine along ``u`` (the FFN arm's
  ratio on the same ``u`` is about 3e-3).
- ``lecam_ffn_expert_rate``: the same construction (same ``u = (1, 1, 1) / sqrt 3``) on the FFN
  arm ``eta2 * sigmoid(eta1^T x)``: the first-order terms cancel (symmetric split) and the second
  do not (``u`` moves ``eta1``), so ``kappa ~ t^4`` while ``D2_ls ~ t^2``: the bound falls like
  ``n^{-1/2}`` with the maximising split ``t* ~ n^{-1/4}`` (the rates of the strongly identifiable
  class).  Rule: over ``n >= 1e5`` with an interior maximiser (>= 3 points), the whole interval of
  the bound's slope (the slopes with KL -+ 2 SE) inside ``-1/2 +- 0.1`` and the slope of ``t*``
  inside ``-1/4 +- 0.1``.  It fails for a flat bound (slope 0, no interior maximiser).
- ``lecam_ffn_expert_eta2_flat``: the FFN expert is affine in ``eta2`` (``d2h/deta2^2 = 0``, reported
  by ``moestat check`` as ``expert_hessian_nonzero fails``), so the split along ``eta2`` alone is
  exact as well and its bound is flat: the entry's ``D2_ls`` has no uniform rate over the
  over-specified class for the FFN arm either.  Rule: as ``lecam_linear_expert_flat``.

What they prove and do not: see :mod:`moestat.theorems.judges.expert_two_point` (a minimax lower bound over
the pair, with the weak triangle constant ``C_D`` assumed; nothing about one estimator at one fixed
truth, nor about the PDE ``x_u dh/db = dh/da_u``, which this witness does not use).
"""

from __future__ import annotations

import numpy as np

from moestat.theorems.checks.framework import CheckResult, Context, verdict
from moestat.theorems.judges.expert_two_point import (BAND, FLAT_RATIO, SLOPE, T_SLOPE, TAIL_N, arm_curves, flat_verdict,
                                            rate_verdict)

NAMES = ["lecam_linear_expert_flat", "lecam_ffn_expert_rate", "lecam_ffn_expert_eta2_flat"]


def curves(ctx: Context) -> dict:
    """The three split curves (computed once per run): quick 10 000 inputs and 61 split sizes, full 200 000 and 121."""
    n_mc, n_t = (10_000, 61) if ctx.quick else (200_000, 121)

    def compute():
        seeds = {k: int(ctx.rng(f"lecam-expert-{k}").integers(2**63 - 1)) for k in ("linear", "ffn", "ffn_eta2")}
        return arm_curves(ctx.quick, seeds=seeds, n_mc=n_mc, n_t=n_t)

    return ctx.memo("two_point-expert-split", compute)


def _details(curve) -> dict:
    return {"n": curve.ns.tolist(), "lower_bound": curve.lower_bound.tolist(),
            "lower_bound_conservative": curve.lower_bound_low.tolist(), "t_star": curve.t_star.tolist(),
            "kappa_max": float(np.abs(curve.kappa).max()), "kappa_se_max": float(curve.kappa_se.max()), **curve.info}


def run(ctx: Context) -> list[CheckResult]:
    c = curves(ctx)
    flat_rule = f"conservative bound at n = 1e7 / bound at n = 1e2 >= {FLAT_RATIO:g}"
    ok, ratio = flat_verdict(c["linear"])
    r1 = verdict("lecam_linear_expert_flat",
                 "Nguyen, Ho & Rinaldo (2024): linear experts under a softmax gate have no polynomial rate; the two-point "
                 "lower bound on the minimax D2_ls risk does not fall along the over-specified split of an expert "
                 "(a^T x + b is affine in (a, b): KL = 0)", 1.0, ratio, None, None, ok, flat_rule, details=_details(c["linear"]))
    ok, det = rate_verdict(c["ffn"])
    r2 = verdict("lecam_ffn_expert_rate",
                 "the same split on the FFN arm eta2 * sigmoid(eta1^T x) (u moves eta1): the two-point bound on the minimax "
                 "D2_ls risk falls like n^-1/2 and the split t* like n^-1/4",
                 SLOPE, det["slope"], det["ci_low"], det["ci_high"], ok,
                 f"over n >= {TAIL_N:g} (interior maximiser, >= 3 points): the interval of the conservative bound's slope "
                 f"(slopes with KL -+ 2 SE) inside {SLOPE:g} +- {BAND:g} and the slope of t* inside {T_SLOPE:g} +- {BAND:g}",
                 details={**_details(c["ffn"]), **det})
    ok, ratio = flat_verdict(c["ffn_eta2"])
    r3 = verdict("lecam_ffn_expert_eta2_flat",
                 "the FFN expert eta2 * sigmoid(eta1^T x) is affine in eta2 (d2h/deta2^2 = 0): along the split in eta2 alone "
                 "the two-point bound on the minimax D2_ls risk does not fall (no uniform rate over the over-specified class)",
                 1.0, ratio, None, None, ok, flat_rule, details=_details(c["ffn_eta2"]))
    return [r1, r2, r3]
