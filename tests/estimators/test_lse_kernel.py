"""The least-squares kernel's in-place forward pass against its out-of-place formulas.

Issue 36 made the kernel write its intermediates in place.  Each in-place step is the same
elementwise IEEE operation on the same operands as the out-of-place form, so the results must be
*equal*, not merely close: that is what keeps the main job's rows identical.  The references below are the formulas as they were
written before (out of place).
"""

import pytest
import torch

from moestat import Expert, Gate, MoEModel
from moestat.estimators import lse_kernel as K
from moestat.estimators.layout import n_params, unpack


def _setup(kind: str, activation: str, k: int = 3, d: int = 4, R: int = 3, n: int = 700, k_active=None, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    model = MoEModel(Gate(kind, tau=0.5, k_active=k_active), Expert(activation))
    X = torch.rand(R, n, d, generator=g, dtype=torch.float64) * 2 - 1
    Y = torch.randn(R, n, generator=g, dtype=torch.float64)
    theta = torch.randn(R, n_params(k, d, d + 1, True), generator=g, dtype=torch.float64)
    return model, K.Design.build(model, X, Y, chunk=n, n_components=k), theta


def _forward_reference(model, xs, xe, beta0, beta1, eta, sig, k_active, k):
    """``_chunk_forward`` of the hard/dense gate as written before issue 36 (out of place)."""
    s = beta1 @ xs
    if sig is not None:
        s = s * sig.unsqueeze(-1)
    logits = s + beta0.unsqueeze(-1)
    z = eta @ xe
    h, dh = model.expert.phi(z), model.expert.dphi(z)
    if model.expert.activation == "gelu":  # the shared-transcendental form phi_and_dphi had
        cdf = torch.erf(z * 0.7071067811865476).add_(1.0).mul_(0.5)
        h = z * cdf
        dh = cdf.add_(z * torch.exp(-0.5 * z * z).mul_(0.3989422804014327))
    elif model.expert.activation == "tanh":
        t = torch.tanh(z)
        h, dh = t, 1.0 - t * t
    elif model.expert.activation == "sigmoid":
        sg = torch.sigmoid(z)
        h, dh = sg, sg * (1.0 - sg)
    if k_active is not None and k_active < k:
        idx = torch.topk(s, k_active, dim=1).indices
        keep = torch.zeros_like(s, dtype=torch.bool).scatter_(1, idx, True)
        logits = logits.masked_fill(~keep, float("-inf"))
    e = torch.exp(logits - logits.amax(1, keepdim=True))
    w = e / e.sum(1, keepdim=True)
    f = (w * h).sum(1)
    u_b = w * (h - f.unsqueeze(1))
    return f, (u_b, u_b, w * dh, s)


@pytest.mark.parametrize("activation", ["gelu", "tanh", "sigmoid", "identity", "relu", "poly"])
@pytest.mark.parametrize("kind,k_active", [("perturbed", None), ("cosine", None), ("linear", None), ("perturbed", 2)])
def test_in_place_forward_equals_out_of_place(kind, k_active, activation):
    model, data, theta = _setup(kind, activation, k_active=k_active)
    k, d = 3, 4
    beta0, beta1, eta = unpack(theta, k, d, d + 1, True)
    sig, _ = K._router_factors(model, beta1)
    xs, xe = data.xs[0], data.xe[0]
    f, parts = K._chunk_forward(model, xs, xe, beta0, beta1, eta, sig, k_active, k, None, True)
    f_ref, parts_ref = _forward_reference(model, xs, xe, beta0, beta1, eta, sig, k_active, k)
    assert torch.equal(f, f_ref)
    for a, b in zip(parts, parts_ref):
        assert torch.equal(a, b)
    # the residual-only pass gives the same prediction
    f_only, none = K._chunk_forward(model, xs, xe, beta0, beta1, eta, sig, k_active, k, None, False)
    assert none is None and torch.equal(f_only, f_ref)


def test_gelu_phi_and_dphi_equal_phi_and_dphi_separately():
    z = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    h, dh = Expert("gelu").phi_and_dphi(z)
    # phi: the same product z Phi(z) as torch's exact gelu up to rounding; phi' analytic
    assert torch.allclose(h, torch.nn.functional.gelu(z), rtol=1e-14, atol=1e-15)
    assert torch.allclose(dh, Expert("gelu").dphi(z), rtol=1e-14, atol=1e-15)
    assert torch.equal(z, torch.linspace(-8, 8, 4001, dtype=torch.float64))  # the input is left alone


@pytest.mark.parametrize("kind", ["perturbed", "cosine", "linear"])
def test_jacobian_t_from_the_in_place_forward(kind):
    """J^T built from the in-place forward's coefficients is the block formula of the
    levenberg_marquardt module docstring, exactly."""
    model, data, theta = _setup(kind, "gelu", R=2, n=517)
    k, d = 3, 4
    _, cache = K.forward(model, data, theta, k)
    _, beta1, _ = unpack(theta, k, d, d + 1, True)
    sig, cb = K.score_derivative_factors(model, beta1, k)
    a, us = K.router_coefficients(cache.u_s[0], cache.s[0], sig, cb, k)
    Jt = K.jacobian_t(data.xs[0], data.xe[0], cache.u_b[0], a, us, cache.v[0], cb, k)
    xs, xe = data.xs[0], data.xe[0]
    J1 = a.unsqueeze(2) * xs.unsqueeze(1)
    if cb is not None:
        J1 = J1 - us.unsqueeze(2) * cb.unsqueeze(-1)
    R, n_c = xs.shape[0], xs.shape[-1]
    ref = torch.cat([cache.u_b[0][:, : k - 1], J1.reshape(R, -1, n_c), (cache.v[0].unsqueeze(2) * xe.unsqueeze(1)).reshape(R, -1, n_c)], 1)
    assert torch.equal(Jt, ref)
