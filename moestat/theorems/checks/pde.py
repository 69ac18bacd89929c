"""PDE (4) and Lemma 4 of Nguyen et al. (2024), checked with autograd at random points.

- ``pde4_cosine``: ``max |beta1^T grad_{beta1} F| / max |F|`` over random ``(x, beta1, eta)`` for
  the vanilla cosine router; predicted 0 (F is homogeneous of degree 0 in beta1).  Verdict:
  below ``1e-10`` (float64 round-off is about ``1e-15``).
- ``lemma4_cosine_order2``: the order-2 sum of Lemma 4, ``beta1^T H beta1 / 2``, same rule.
- ``pde4_perturbed_nonzero``: the same residual for the perturbed router is *not* 0: its median
  relative size over the random points exceeds ``1e-3`` (predicted: of order ``tau1 |beta1^T x|
  / ((||beta1|| + tau1)^2 (||x|| + tau2))``).
- ``lemma4_perturbed_closed_form``: the perturbed residual equals the closed form
  ``tau1 beta1^T x / ((||beta1|| + tau1)^2 (||x|| + tau2)) F``; max relative deviation below
  ``1e-10``.
"""

from __future__ import annotations

import numpy as np
import torch

from moestat.model.experts import Expert
from moestat.model.gates import Gate
from moestat.model.identifiability import fbar, lemma4_residual, pde_residual, perturbed_pde_closed_form

from moestat.theorems.checks.framework import CheckResult, Context, verdict

NAMES = ["pde4_cosine", "lemma4_cosine_order2", "pde4_perturbed_nonzero", "lemma4_perturbed_closed_form"]
TOL = 1e-10


def _points(ctx: Context, n_points: int, d: int):
    rng = ctx.rng("pde")
    for _ in range(n_points):
        b = torch.as_tensor(rng.normal(0, 1.5, size=d))
        x = torch.as_tensor(rng.uniform(-1, 1, size=(16, d)))
        eta = torch.as_tensor(rng.normal(0, 1, size=d + 1))
        tau = float(rng.uniform(0.1, 2.0))
        yield b, x, eta, tau


def run(ctx: Context) -> list[CheckResult]:
    n_points = 50 if ctx.quick else 500
    d = 4
    h = Expert("gelu")
    cos_res, cos_l4, pert_rel, cf_dev = [], [], [], []
    for b, x, eta, tau in _points(ctx, n_points, d):
        F_c = fbar(x, b, eta, h, "cosine")
        scale = float(F_c.abs().max())
        cos_res.append(float(pde_residual(x, b, eta, h, "cosine").abs().max()) / scale)
        cos_l4.append(float(lemma4_residual(x, b, 2, eta, h, "cosine").abs().max()) / scale)
        g = Gate("perturbed", tau=tau)
        F_p = fbar(x, b, eta, h, g)
        r_p = pde_residual(x, b, eta, h, g)
        pert_rel.append(float(r_p.abs().max()) / float(F_p.abs().max()))
        cf = perturbed_pde_closed_form(x, b, F_p, tau)
        cf_dev.append(float((r_p - cf).abs().max()) / (float(cf.abs().max()) + 1e-300))
    det = {"n_points": n_points, "d": d, "expert": "gelu", "inputs_per_point": 16}
    out = [
        verdict("pde4_cosine", "PDE (4): beta1^T dF/dbeta1 = 0 for the cosine router", 0.0, max(cos_res), None, None,
                max(cos_res) < TOL, f"max relative residual < {TOL:g}", details=det),
        verdict("lemma4_cosine_order2", "Lemma 4 (r = 2): sum_{|a|=2} beta1^a/a! d^a F = 0 for the cosine router", 0.0,
                max(cos_l4), None, None, max(cos_l4) < TOL, f"max relative residual < {TOL:g}", details=det),
        verdict("pde4_perturbed_nonzero", "The perturbed router breaks PDE (4): beta1^T dF/dbeta1 != 0", None,
                float(np.median(pert_rel)), float(np.min(pert_rel)), float(np.max(pert_rel)), float(np.median(pert_rel)) > 1e-3,
                "median relative residual > 1e-3 (interval: min and max over points)",
                details={**det, "tau_range": [0.1, 2.0]}),
        verdict("lemma4_perturbed_closed_form",
                "beta1^T dF/dbeta1 = tau1 beta1^T x / ((|beta1| + tau1)^2 (|x| + tau2)) F for the perturbed router",
                0.0, max(cf_dev), None, None, max(cf_dev) < TOL, f"max relative deviation from the closed form < {TOL:g}",
                details=det),
    ]
    return out
