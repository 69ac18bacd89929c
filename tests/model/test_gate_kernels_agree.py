"""The specialised softmax-Gaussian kernels compute the registered softmax gate's formula.

The gate's weight formula lives once, in :class:`moestat.model.gate_families.GateFamily`
(issue 32).  Three hot loops of the softmax Gaussian MoE keep a fused form of it for speed, on
the augmented design ``x~ = (x, 1)`` with the gate rows ``V_i = (beta1_i, beta0_i)``: the fused EM
(:mod:`moestat.estimators.mle_fused`), its Newton polish (:mod:`moestat.estimators.mle_newton`) and
the model's own density (:mod:`moestat.model.gaussian_moe`).  They must stay the same function
as the family's ``log_weights``; these checks fail if one of them drifts.
"""

from __future__ import annotations

import numpy as np
import torch

from moestat.estimators import mle_fused, mle_newton
from moestat.model.gaussian_moe import component_log_joint
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate

TOL = dict(rtol=1e-12, atol=1e-12)


def _design(seed=0, B=3, n=50, d=2, k=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    b1 = torch.randn(B, k, d, generator=g, dtype=torch.float64)
    b0 = torch.randn(B, k, generator=g, dtype=torch.float64)
    b1[:, -1], b0[:, -1] = 0.0, 0.0  # the reference atom
    return X, b0, b1


def _family_log_weights(X, b0, b1):
    return ProtocolGate(name="linear").log_weights(X, b0, b1)


def test_the_models_density_uses_the_softmax_gates_weights():
    X, b0, b1 = _design()
    B, n, _ = X.shape
    k = b0.shape[1]
    eta = torch.cat([torch.zeros(B, k, X.shape[-1] + 1, dtype=torch.float64), torch.ones(B, k, 1, dtype=torch.float64)], -1)
    G = MixingMeasure(b0.numpy(), b1.numpy(), eta.numpy())
    # with zero experts and unit variances the joint is log pi - log(2 pi)/2 - y^2/2 at y = 0
    lj = component_log_joint(X, torch.zeros(B, n, dtype=torch.float64), G)
    torch.testing.assert_close(lj + 0.5 * np.log(2 * np.pi), _family_log_weights(X, b0, b1), **TOL)


def test_the_fused_em_and_the_newton_polish_use_the_softmax_gates_weights():
    X, b0, b1 = _design(seed=1)
    B, n, d = X.shape
    k = b0.shape[1]
    V = torch.cat([b1, b0.unsqueeze(-1)], -1)  # [B, k, d + 1]
    Xe = torch.cat([X, torch.ones(B, n, 1, dtype=torch.float64)], -1)
    E = torch.zeros(B, k, d + 1, dtype=torch.float64)
    y = torch.zeros(B, n, dtype=torch.float64)
    ref = _family_log_weights(X, b0, b1)
    pi, _, _, _ = mle_newton._parts(Xe, y, V, E, torch.ones(B, k, dtype=torch.float64))
    torch.testing.assert_close(torch.log(pi), ref, **TOL)
    # the fused EM's start variances weight squared residuals by the gate: with y = 1 and zero
    # experts every residual is 1, so the weighted mean is 1 whatever pi; with y = x_0 it is
    # sum_n pi_ni x_n0^2 / sum_n pi_ni, which needs pi itself
    ya = X[..., 0]
    s2 = mle_fused._start_variances(X.transpose(1, 2), ya, V, E, shared=False)
    w = ref.exp()
    torch.testing.assert_close(s2, (w * ya.unsqueeze(-1) ** 2).sum(1) / w.sum(1), **TOL)
