"""Routers of moestat.nn.routers: forward/backward, the formulas of Datta (2024), the k = 1 problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from moestat.model.gates import Gate
from moestat.nn.regularizers import importance_loss
from moestat.nn.routers import (
    LAYER_ROUTERS,
    NoisyTopKRouter,
    cv_squared,
    load_loss,
    make_router,
    noisy_top_k_load,
)


def _router(name, k=2, **kw):
    torch.manual_seed(0)  # only for the default init of the non-noisy routers in this test
    r = make_router(name, 5, 4, k, **kw)
    if isinstance(r, NoisyTopKRouter):
        r.set_generator(torch.Generator().manual_seed(1))
        with torch.no_grad():  # move away from the all-zero start so that the logits differ
            r.weight.copy_(torch.randn(4, 5, generator=torch.Generator().manual_seed(2)))
    return r


@pytest.mark.parametrize("name", LAYER_ROUTERS)
def test_forward_backward_tiny_batch(name):
    r = _router(name, k=2, w_importance=0.1, w_load=0.1 if name == "noisy_topk" else 0.0)
    x = torch.rand(6, 5, generator=torch.Generator().manual_seed(3))
    out = r(x)
    assert out.weights.shape == (6, 4) and out.mask.shape == (6, 4)
    assert torch.all(out.weights >= 0)
    assert torch.all(out.weights[~out.mask] == 0)
    expected_k = 4 if name == "dense" else 2
    assert torch.all(out.mask.sum(1) == expected_k)
    sums = out.weights.sum(1)
    if name == "naive_topk":
        assert torch.all(sums < 1) and torch.all(sums > 0)
    else:
        assert torch.allclose(sums, torch.ones(6), atol=1e-6)
    assert torch.allclose(out.probs.sum(1), torch.ones(6), atol=1e-6)
    target = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    loss = (out.weights * target).sum() + out.aux_loss
    loss.backward()
    g = r.weight.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
    assert out.aux_loss.item() > 0  # importance (and load) switched on and the batch is not balanced


def test_topk_mask_is_gate_weights_and_naive_is_unrenormalised():
    r = _router("topk_mask", k=2)
    n = _router("naive_topk", k=2)
    with torch.no_grad():
        n.weight.copy_(r.weight)
    x = torch.rand(7, 5, generator=torch.Generator().manual_seed(0))
    w_mask, w_naive = r(x).weights, n(x).weights
    ref = Gate("linear", k_active=2).weights(x, torch.zeros(4), r.weight)
    assert torch.allclose(w_mask, ref, atol=1e-6)
    # naive = full softmax restricted to the top-k; renormalising it gives the mask gate
    full = torch.softmax(x @ r.weight.T, dim=-1)
    assert torch.allclose(w_naive, full * (w_naive > 0), atol=1e-6)
    assert torch.allclose(w_naive / w_naive.sum(1, keepdim=True), w_mask, atol=1e-6)


@pytest.mark.parametrize("tau", [None, 0.5, (0.3, 2.0)])
def test_cosine_routers_match_core_gate(tau):
    name = "cosine" if tau is None else "perturbed"
    r = make_router(name, 5, 4, 2, tau=tau if tau is not None else 1.0)
    with torch.no_grad():
        r.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    kind, t = ("cosine", 0.0) if tau is None else ("perturbed", tau)
    ref = Gate(kind, tau=t, k_active=2).weights(x, r.bias, r.weight)
    assert torch.allclose(r(x).weights, ref, atol=1e-6)


def test_importance_loss_hand_computation():
    w = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    imp = np.array([1.7, 0.8, 0.5])
    cv2 = (imp.std(ddof=0) / imp.mean()) ** 2
    assert importance_loss(w, 0.1, squared=True).item() == pytest.approx(0.1 * cv2, rel=1e-6)
    assert cv_squared(torch.tensor([2.0, 2.0, 2.0])).item() == pytest.approx(0.0, abs=1e-12)


def _kth_excluding(v, k, i):
    others = np.delete(v, i)
    return np.sort(others)[::-1][k - 1]


def test_noisy_load_loss_hand_computation():
    clean = np.array([[1.0, 0.2, -0.5, 0.3], [0.0, 0.4, 0.1, -1.0]])
    noisy = np.array([[1.3, -0.1, -0.2, 0.6], [0.2, 0.9, 0.0, -0.7]])
    std = np.array([[0.7, 0.5, 1.2, 0.9], [0.3, 0.8, 0.6, 1.1]])
    k = 2
    P = np.zeros_like(clean)
    for n in range(2):
        for i in range(4):
            P[n, i] = norm.cdf((clean[n, i] - _kth_excluding(noisy[n], k, i)) / std[n, i])
    load = P.sum(0)
    expected = 0.1 * (load.std(ddof=0) / load.mean()) ** 2
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    got_p = noisy_top_k_load(t(clean), t(noisy), t(std), k).numpy()
    np.testing.assert_allclose(got_p, P, rtol=1e-10)
    assert load_loss(t(clean), t(noisy), t(std), k, 0.1).item() == pytest.approx(expected, rel=1e-8)  # eps = 1e-10 in CV


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 10_000))
def test_load_threshold_is_kth_excluding(M, k, seed):
    k = min(k, M - 1)
    g = torch.Generator().manual_seed(seed)
    clean = torch.randn(5, M, generator=g, dtype=torch.float64)
    noisy = clean + torch.randn(5, M, generator=g, dtype=torch.float64)
    std = torch.rand(5, M, generator=g, dtype=torch.float64) + 0.1
    P = noisy_top_k_load(clean, noisy, std, k).numpy()
    c, h, s = clean.numpy(), noisy.numpy(), std.numpy()
    for n in range(5):
        for i in range(M):
            assert P[n, i] == pytest.approx(norm.cdf((c[n, i] - _kth_excluding(h[n], k, i)) / s[n, i]), abs=1e-9)


def test_noisy_router_zero_init_and_eval_is_deterministic():
    r = make_router("noisy_topk", 5, 4, 2, w_load=0.1)
    assert torch.all(r.weight == 0) and torch.all(r.w_noise == 0)
    x = torch.rand(6, 5, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="Generator"):
        r(x)
    a = r(x, generator=torch.Generator().manual_seed(5)).weights
    b = r(x, generator=torch.Generator().manual_seed(5)).weights
    c = r(x, generator=torch.Generator().manual_seed(6)).weights
    assert torch.equal(a, b) and not torch.equal(a, c)
    r.eval()
    out = r(x)
    assert out.aux_loss.item() == 0.0 and torch.equal(out.weights, r(x).weights)


@pytest.mark.parametrize("name", ["topk_mask", "noisy_topk", "cosine", "perturbed", "perturbed_cosine"])
def test_k1_zero_gradient_problem_and_fix(name):
    """k = 1: softmax over one kept logit is constant 1, so the gate gets no gradient unless fixed."""
    x = torch.rand(6, 5, generator=torch.Generator().manual_seed(0))
    target = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    grads = {}
    for fix in (False, True):
        r = _router(name, k=1, k1_fix=fix)
        out = r(x)
        (out.weights * target).sum().backward()
        grads[fix] = r.weight.grad.abs().sum().item() if r.weight.grad is not None else 0.0
        if not fix:
            assert torch.all(out.weights[out.mask] == 1)
    assert grads[False] == 0.0
    assert grads[True] > 0.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown router"):
        make_router("switch", 5, 4, 2)
    with pytest.raises(ValueError, match="k must be"):
        make_router("topk_mask", 5, 4, 5)
    with pytest.raises(ValueError, match="tau > 0"):
        make_router("perturbed_cosine", 5, 4, 2, tau=0.0)
    with pytest.raises(ValueError, match="k must satisfy"):
        noisy_top_k_load(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), 3)
    assert math.isclose(cv_squared(torch.tensor([1.0])).item(), 0.0)
