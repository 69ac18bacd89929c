"""Property-based tests of the structural facts the theorems of Nguyen et al. (2024) rest on.

Voronoi losses (eqs. 13, 16 and D_{1,r}), gate invariances (PDE (4) for the cosine router and
its failure for the perturbed one), Top-K selection and the scenario sampler.
"""

import math

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from moestat.model.gates import Gate, gate_scores, top_k_mask
from moestat.losses import voronoi_loss
from moestat.model.mixing import MixingMeasure
from moestat.data.synthetic import make_scenario

LOSSES = ("D1", "D2", "D3")


@st.composite
def measures(draw, k_min=2, k_max=4, d_max=3):
    k = draw(st.integers(k_min, k_max))
    d = draw(st.integers(1, d_max))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    beta0 = rng.normal(0, 0.5, k)
    beta1 = rng.normal(0, 1.0, (k, d))
    eta = rng.normal(0, 1.0, (k, d + 1))
    beta0[-1] = 0.0
    beta1[-1] = 0.0
    return MixingMeasure(beta0, beta1, eta)


@settings(max_examples=40, deadline=None)
@given(G=measures(), loss=st.sampled_from(LOSSES), K=st.sampled_from([None, 1, 2]))
def test_voronoi_zero_at_truth(G, loss, K):
    assert float(voronoi_loss(G, G, loss, k_active=K)) == 0.0


@settings(max_examples=40, deadline=None)
@given(G=measures(), seed=st.integers(0, 10_000), loss=st.sampled_from(LOSSES), scale=st.floats(0.0, 2.0))
def test_voronoi_nonnegative_and_permutation_invariant(G, seed, loss, scale):
    rng = np.random.default_rng(seed)
    m = G.numpy()
    F = MixingMeasure(m.beta0 + scale * rng.normal(size=m.beta0.shape),
                      m.beta1 + scale * rng.normal(size=m.beta1.shape),
                      m.eta + scale * rng.normal(size=m.eta.shape))
    val = float(voronoi_loss(F, G, loss))
    assert val >= 0.0
    perm = rng.permutation(G.n_atoms)
    assert math.isclose(float(voronoi_loss(F.permute(perm), G, loss)), val, rel_tol=1e-12, abs_tol=1e-14)
    perm2 = rng.permutation(G.n_atoms)
    assert math.isclose(float(voronoi_loss(F, G.permute(perm2), loss)), val, rel_tol=1e-12, abs_tol=1e-14)


@settings(max_examples=40, deadline=None)
@given(G=measures(), c=st.floats(-3.0, 3.0), seed=st.integers(0, 10_000))
def test_softmax_translation_invariance_of_beta0(G, c, seed):
    # Adding c to every beta0 leaves g_G unchanged (softmax), and .normalised() removes it, so
    # the loss of the normalised shifted measure equals the loss of the original.
    m = G.numpy()
    shifted = MixingMeasure(m.beta0 + c, m.beta1, m.eta)
    x = torch.as_tensor(np.random.default_rng(seed).uniform(-1, 1, size=(30, G.dim)))
    for K in (None, 1):
        gate = Gate("perturbed", tau=1.0, k_active=K)
        w1 = gate.weights(x, torch.as_tensor(m.beta0), torch.as_tensor(m.beta1))
        w2 = gate.weights(x, torch.as_tensor(shifted.beta0), torch.as_tensor(m.beta1))
        assert torch.allclose(w1, w2, atol=1e-12)
    for loss in LOSSES:
        assert float(voronoi_loss(shifted.normalised(), G, loss)) <= 1e-12


@settings(max_examples=40, deadline=None)
@given(G=measures(), j=st.integers(0, 3), delta=st.floats(1e-3, 1.0), block=st.sampled_from(["beta1", "eta"]),
       loss=st.sampled_from(LOSSES))
def test_voronoi_positive_when_an_atom_moves(G, j, delta, block, loss):
    j = j % (G.n_atoms - 1)  # a non-reference atom (its beta1 is free)
    m = G.numpy()
    b1, eta = m.beta1.copy(), m.eta.copy()
    if block == "beta1":
        b1[j, 0] += delta
    else:
        eta[j, 0] += delta
    F = MixingMeasure(m.beta0, b1, eta)
    assert float(voronoi_loss(F, G, loss)) > 0.0


vec3 = st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=3, max_size=3)


@settings(max_examples=50, deadline=None)
@given(B=st.lists(vec3, min_size=2, max_size=4), X=st.lists(vec3, min_size=1, max_size=6),
       a=st.floats(0.05, 20.0), c=st.floats(0.05, 20.0))
def test_cosine_scale_invariance_perturbed_not(B, X, a, c):
    B = torch.tensor(B, dtype=torch.float64)
    X = torch.tensor(X, dtype=torch.float64)
    assume(float(B.norm(dim=-1).min()) > 1e-2 and float(X.norm(dim=-1).min()) > 1e-2)
    s = gate_scores(X, B, "cosine")
    assert torch.allclose(gate_scores(X, a * B, "cosine"), s, atol=1e-12)
    assert torch.allclose(gate_scores(c * X, B, "cosine"), s, atol=1e-12)
    # The perturbed score changes under rescaling of beta1 wherever beta1^T x != 0.
    p = gate_scores(X, B, "perturbed", 1.0)
    pa = gate_scores(X, a * B, "perturbed", 1.0)
    moved = (B @ X.T).T.abs() > 1e-3
    if abs(a - 1.0) > 0.05 and bool(moved.any()):
        assert bool(((pa - p).abs() > 1e-9)[moved].all())


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 6), n=st.integers(1, 8), data=st.data())
def test_top_k_picks_the_k_largest(seed, k, n, data):
    K = data.draw(st.integers(1, k))
    s = torch.as_tensor(np.random.default_rng(seed).normal(size=(n, k)))
    mask = top_k_mask(s, K)
    assert bool((mask.sum(-1) == K).all())
    for i in range(n):
        sel, rest = s[i][mask[i]], s[i][~mask[i]]
        if rest.numel():
            assert float(sel.min()) >= float(rest.max())
    g = Gate("perturbed", tau=1.0, k_active=K)
    x = torch.as_tensor(np.random.default_rng(seed + 1).uniform(-1, 1, size=(n, 3)))
    b1 = torch.as_tensor(np.random.default_rng(seed + 2).normal(size=(k, 3)))
    w = g.weights(x, torch.zeros(k, dtype=torch.float64), b1)
    assert bool(((w > 0).sum(-1) <= K).all()) and torch.allclose(w.sum(-1), torch.ones(n, dtype=torch.float64))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), law=st.sampled_from(["uniform", "gaussian"]))
def test_sampler_moments(seed, law):
    sc = make_scenario("perturbed", "exact", input_law=law, noise_var=0.04)
    n = 20_000
    X, Y = sc.sample(n, np.random.default_rng(seed))
    assert X.shape == (n, sc.d) and Y.shape == (n,)
    assert np.all(np.abs(X) <= 1.0)
    # Both laws have mean 0 and variance 1/3 per coordinate (gaussian: N(0, 1/3) clipped, a bit less).
    se = math.sqrt(1 / 3 / n)
    assert np.all(np.abs(X.mean(0)) < 5 * se)
    var = X.var(0)
    if law == "uniform":
        assert np.all(np.abs(var - 1 / 3) < 0.02)
    else:
        assert np.all((var < 1 / 3) & (var > 0.25))
    resid = Y - sc.regression_function(X)
    assert abs(resid.mean()) < 5 * math.sqrt(0.04 / n)
    assert abs(resid.var() - 0.04) < 5 * 0.04 * math.sqrt(2 / n)
    X2, Y2 = sc.sample(n, np.random.default_rng(seed))
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
