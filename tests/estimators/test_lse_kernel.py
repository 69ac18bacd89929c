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


@pytest.mark.parametrize("activation", ["gelu", "identity"])
@pytest.mark.parametrize("kind,k_active", [("perturbed", None), ("cosine", None), ("linear", None), ("perturbed", 2)])
def test_in_place_passes_leave_their_inputs_alone(kind, k_active, activation):
    """The in-place steps write only the pass's own arrays: the design (features, responses,
    in three chunks), the parameters and a first pass's cache are unchanged by later passes, and
    a second evaluation at the same point gives the same objective, J^T J and J^T r."""
    model, data, theta = _setup(kind, activation, k_active=k_active, n=700)
    g = torch.Generator().manual_seed(1)
    X = torch.rand(3, 700, 4, generator=g, dtype=torch.float64)
    data = K.Design.build(model, X, torch.randn(3, 700, generator=g, dtype=torch.float64), chunk=300, n_components=3)
    before = [t.clone() for t in (*data.xs, *data.xe, *data.y, theta)]
    F1, A1, g1 = K.evaluate(model, data, theta, 3)
    F0, cache = K.forward(model, data, theta, 3)
    kept = [t.clone() for lst in (cache.u_b, cache.v, cache.s, cache.r) for t in lst]
    F2, A2, g2 = K.evaluate(model, data, theta, 3)
    assert all(torch.equal(a, b) for a, b in zip(before, (*data.xs, *data.xe, *data.y, theta)))
    assert all(torch.equal(a, b) for a, b in zip(kept, [t for lst in (cache.u_b, cache.v, cache.s, cache.r) for t in lst]))
    assert torch.equal(F0, F1) and torch.equal(F1, F2) and torch.equal(A1, A2) and torch.equal(g1, g2)


@pytest.mark.parametrize("temperature", [None, 0.3])
@pytest.mark.parametrize("kind,k_active", [("perturbed", None), ("cosine", None), ("linear", None), ("perturbed", 2)])
def test_gradient_and_diagonal_are_those_of_gauss_newton(kind, k_active, temperature):
    # issue 36: a replicate's last Levenberg-Marquardt iterate needs J^T r and diag(J^T J) only.
    # The gradient is formed by the same operations (equal); the diagonal is the same sums of
    # squares summed in another order (close: float64 rounding of sums of ~1e3 positive terms).
    model, data, theta = _setup(kind, "gelu", k_active=k_active)
    two = K.Design.build(model, _x(data), data.y[0], chunk=300, n_components=3)  # three chunks: sums over chunks too
    for design in (data, two):
        _, cache = K.forward(model, design, theta, 3, temperature)
        A, g = K.gauss_newton(model, design, theta, 3, cache, temperature)
        D, g2 = K.gradient_and_diagonal(model, design, theta, 3, cache, temperature)
        assert torch.equal(g2, g)
        torch.testing.assert_close(D, torch.diagonal(A, dim1=-2, dim2=-1), rtol=1e-11, atol=0.0)
        D3, g3 = K.gradient_and_diagonal(model, design, theta, 3, None, temperature)  # cache recomputed
        assert torch.equal(g3, g) and torch.equal(D3, D)


def _x(data):
    """The inputs ``X [R, n, d]`` back from a one-chunk design's expert features ``[x; 1]``."""
    return data.xe[0][:, :-1].transpose(1, 2)


@pytest.mark.parametrize("kind", ["perturbed", "cosine", "linear"])
@pytest.mark.parametrize("chunk", [None, 256, 700])
def test_design_chunks_equal_the_whole_array_features(kind, chunk):
    # issue 36: the features are built chunk by chunk, without the scaled X and [X, 1] of the
    # whole batch; each value is the same elementwise operation on the same operands as before
    g = torch.Generator().manual_seed(1)
    model = MoEModel(Gate(kind, tau=0.5), Expert("gelu"))
    X = torch.rand(3, 700, 4, generator=g, dtype=torch.float64) * 2 - 1
    X[0, 5] = 0.0  # a zero input: the cosine router's zero-norm convention
    Y = torch.randn(3, 700, generator=g, dtype=torch.float64)
    data = K.Design.build(model, X, Y, chunk=chunk, n_components=3)
    taus = K.score_taus(model)
    Xs = X if taus is None else X * K._safe_recip(X.norm(dim=-1, keepdim=True) + taus[1])  # the formula as it was
    Xe = torch.cat([X, X.new_ones(3, 700, 1)], dim=-1)
    assert torch.equal(torch.cat(data.xs, -1), Xs.transpose(1, 2))
    assert torch.equal(torch.cat(data.xe, -1), Xe.transpose(1, 2))
    assert torch.equal(torch.cat(data.y, -1), Y)
    assert all(a.is_contiguous() for a in data.xs + data.xe + data.y)
    assert len(data.xs) == (1 if chunk in (None, 700) else 3)


@pytest.mark.parametrize("kind,k_active", [("perturbed", None), ("cosine", None), ("linear", None), ("perturbed", 2)])
def test_per_replicate_gauss_newton_equals_the_batched_product(kind, k_active, monkeypatch):
    # issue 36: above PER_REPLICATE_BYTES gauss_newton forms J^T and J^T J one replicate at a time
    # (the chunk's J^T read while cached).  Each replicate's J^T J is its own matrix product, so
    # both forms compute the same sums; torch's CPU kernels give the same bits here (the main job's
    # rows are identical, benchmarks/main_job.py), but a BLAS may block a batched product differently,
    # so the test asks for agreement to rounding, over one chunk and over several.
    model, data, theta = _setup(kind, "gelu", k_active=k_active, R=4)
    two = K.Design.build(model, _x(data), data.y[0], chunk=300, n_components=3)
    P = theta.shape[1]
    for design in (data, two):
        _, cache = K.forward(model, design, theta, 3)
        monkeypatch.setattr(K, "PER_REPLICATE_BYTES", 1 << 62)  # never: the batched product
        A0, g0 = K.gauss_newton(model, design, theta, 3, cache)
        monkeypatch.setattr(K, "PER_REPLICATE_BYTES", 0)  # always (more than one replicate, CPU)
        assert K.per_replicate(4, P, 300, theta)
        A1, g1 = K.gauss_newton(model, design, theta, 3, cache)
        torch.testing.assert_close(A1, A0, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-12)
        # the last iterate's gradient (always batched) is still gauss_newton's
        torch.testing.assert_close(K.gradient_and_diagonal(model, design, theta, 3, cache)[1], g1, rtol=1e-12, atol=1e-12)
        # and J^T J is what it should be: the product of the Jacobian with itself (not only equal forms)
        Jt = torch.cat([K.residual_and_jacobian(model, design.chunk(c), theta, 3)[1].transpose(1, 2)
                        for c in range(len(design.xs))], dim=-1)
        torch.testing.assert_close(A1, Jt @ Jt.transpose(1, 2), rtol=1e-11, atol=1e-11)


def test_per_replicate_only_for_large_cpu_chunks_of_several_replicates():
    like = torch.zeros(1, dtype=torch.float64)
    big = K.PER_REPLICATE_BYTES // (25 * 8) + 1  # samples of one replicate's J^T above the bound
    assert K.per_replicate(2, 25, big, like)
    assert not K.per_replicate(1, 25, 10 * big, like)  # one replicate: nothing to split
    assert not K.per_replicate(2, 25, 8, like)  # small chunk: the loop's overhead is not paid back
