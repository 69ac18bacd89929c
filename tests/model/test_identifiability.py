"""Rank checks of the function families of Nguyen et al. (2024), Definitions 1/2, and the PDE residuals.

The expected ranks below are derived by hand (see docs/guide/theory.rst), not copied from a run:
PDE (4) removes one function per atom under the cosine router; Euler's identity for experts
homogeneous in eta removes one per atom at orders {0, 1}; the linear expert has the zero
function d2F/db2; for phi(a^T x + b) experts in d = 2 the mixed partials d2F/dbeta1_u da_v obey
one relation per atom (d(d-1)/2 in general).
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moestat.model.experts import Expert
from moestat.model.gates import Gate
from moestat.model.identifiability import (
    check_identifiability,
    design_matrix,
    fbar,
    identifiability_rank,
    is_strongly_identifiable,
    is_weakly_identifiable,
    lemma4_residual,
    pde_residual,
    perturbed_pde_closed_form,
    random_atoms,
)

K, D = 2, 2


def const_expert(x, eta):
    return eta[0] * torch.ones(x.shape[0], dtype=x.dtype)


@pytest.mark.parametrize("act", ["gelu", "tanh", "sigmoid"])
def test_smooth_experts_weakly_identifiable_under_perturbed_router(act):
    res = check_identifiability(Expert(act), order=1, gate="perturbed", d=D, k=K, n_atom_draws=1)
    assert res.independent and res.rank == K * (1 + 2 * D + 1)
    lo, hi = res.gap
    assert lo > 1e3 * res.rtol  # a clear gap, not a borderline decision


@pytest.mark.parametrize("act", ["gelu", "identity"])
def test_cosine_router_loses_one_function_per_atom(act):
    # PDE (4): beta1^T grad_beta1 F = 0, for every expert.
    res = check_identifiability(Expert(act), order=1, gate="cosine", d=D, k=K, n_atom_draws=1, min_order=1)
    assert res.n_functions - res.rank == K
    assert all("beta1" in lab for lab in res.dependence)


def test_constant_expert_not_weakly_identifiable():
    res = check_identifiability(const_expert, order=1, d=D, k=K, q=1, n_atom_draws=1)
    assert not res.independent and res.n_functions - res.rank == K
    assert not is_weakly_identifiable(const_expert, d=D, k=K, q=1, n_atom_draws=1)


def test_linear_expert_not_strongly_identifiable_zero_function():
    res = check_identifiability(Expert("identity"), order=2, d=D, k=K, n_atom_draws=1)
    assert not res.independent
    assert any(lab.endswith(f"deta[{D}]deta[{D}]") for lab in res.zero_functions)  # d2F/db2 = 0
    assert not is_strongly_identifiable(Expert("identity"), d=D, k=K, n_atom_draws=1)


@pytest.mark.parametrize("expert,p", [(Expert("identity"), 1), (Expert("poly", 2), 2), (Expert("poly", 3), 3)])
def test_homogeneous_experts_euler_relation(expert, p):
    # eta^T grad_eta F = p F: the literal order-{0,1} family is dependent (one relation per atom)...
    b1, eta = random_atoms(K, D, random_state=3, scale=2.0)
    x = torch.as_tensor(np.random.default_rng(4).uniform(-1, 1, size=(50, D)))
    F = lambda e: fbar(x, b1[0], e, expert)  # noqa: E731
    J = torch.func.jacfwd(F)(eta[0])
    assert torch.allclose(J @ eta[0], p * F(eta[0]), atol=1e-10, rtol=1e-10)
    res = identifiability_rank(expert, (b1, eta), 1, x=None, random_state=5)
    assert res.n_functions - res.rank == K
    # ... while the family without the order-0 term is independent.
    assert is_weakly_identifiable(expert, d=D, k=K, n_atom_draws=1, min_order=1)


@pytest.mark.parametrize("act", ["gelu", "tanh"])
def test_smooth_experts_order2_deficit_is_the_mixed_block_symmetry(act):
    # d2F/dbeta1_u da_v = dE/dbeta1_u * x_v phi': d^2 products x_v L_u(x) live in the d(d+1)/2
    # quadratic forms, so d(d-1)/2 relations per atom, and nothing else.
    res = check_identifiability(Expert(act), order=2, gate="perturbed", d=D, k=K, n_atom_draws=1)
    assert res.n_functions - res.rank == K * D * (D - 1) // 2
    for lab in res.dependence:
        assert "beta1" in lab and "eta" in lab


def test_user_callable_matches_expert():
    b1, eta = random_atoms(K, D, random_state=0)
    h = lambda x, e: torch.tanh(x @ e[:D] + e[D])  # noqa: E731
    M1, l1 = design_matrix(Expert("tanh"), (b1, eta), 2, n_samples=60)
    M2, l2 = design_matrix(h, (b1, eta), 2, n_samples=60)
    assert l1 == l2 and torch.allclose(M1, M2, atol=1e-12)


def test_bad_inputs():
    with pytest.raises(ValueError, match="order"):
        design_matrix(Expert("gelu"), order=3, d=2)
    with pytest.raises(ValueError, match="rtol"):
        identifiability_rank(Expert("gelu"), order=1, d=2, rtol=2.0)
    with pytest.raises(TypeError, match="expert"):
        design_matrix(3, order=1, d=2)


vec = st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=3, max_size=3)


@settings(max_examples=25, deadline=None)
@given(b=vec, xs=st.lists(vec, min_size=2, max_size=5), e=vec)
def test_pde4_and_lemma4_cosine(b, xs, e):
    b = torch.tensor(b, dtype=torch.float64)
    x = torch.tensor(xs, dtype=torch.float64)
    if float(b.norm()) < 1e-2 or float(x.norm(dim=-1).min()) < 1e-2:
        return
    eta = torch.tensor(e + [0.3], dtype=torch.float64)
    F = fbar(x, b, eta, Expert("gelu"), "cosine")
    scale = 1.0 + float(F.abs().max())
    assert float(pde_residual(x, b, eta, Expert("gelu"), "cosine").abs().max()) <= 1e-10 * scale
    assert float(lemma4_residual(x, b, 2, eta, Expert("gelu"), "cosine").abs().max()) <= 1e-8 * scale


@settings(max_examples=25, deadline=None)
@given(b=vec, xs=st.lists(vec, min_size=2, max_size=5), tau=st.floats(0.1, 3.0))
def test_perturbed_pde_closed_form(b, xs, tau):
    b = torch.tensor(b, dtype=torch.float64)
    x = torch.tensor(xs, dtype=torch.float64)
    g = Gate("perturbed", tau=tau)
    eta = torch.tensor([0.5, -0.2, 0.1, 0.3], dtype=torch.float64)
    F = fbar(x, b, eta, Expert("gelu"), g)
    lhs = pde_residual(x, b, eta, Expert("gelu"), g)
    rhs = perturbed_pde_closed_form(x, b, F, tau)
    assert torch.allclose(lhs, rhs, atol=1e-10, rtol=1e-8)


def test_lemma4_ray_matches_multiindex_and_perturbed_nonzero():
    b = torch.tensor([0.8, -0.5, 0.3], dtype=torch.float64)
    x = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, size=(20, 3)))
    for gate in ("cosine", Gate("perturbed", tau=0.5)):
        r_mi = lemma4_residual(x, b, 2, gate=gate, method="multiindex")
        r_ray = lemma4_residual(x, b, 2, gate=gate, method="ray")
        assert torch.allclose(r_mi, r_ray, atol=1e-10)
    assert float(lemma4_residual(x, b, 3, gate="cosine", method="ray").abs().max()) < 1e-10
    assert float(lemma4_residual(x, b, 2, gate=Gate("perturbed", tau=0.5)).abs().max()) > 1e-3
