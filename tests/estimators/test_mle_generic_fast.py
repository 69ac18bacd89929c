"""The fast paths of the generic EM (issue 33) against the reference computations they replace: the
separable gates' closed-form gate step against :func:`torch.func.jacfwd`, and the atom-major scores
against the gate's own formula."""

import copy

import numpy as np
import pytest
import torch

from moestat.estimators.mle_generic import GenericEM, Posterior, gate_fisher
from moestat.model.likelihood import LikelihoodModel, linear_expert
from moestat.model.protocol import ProtocolGate

GATES = {
    "laplace": dict(normalisation="laplace"),
    "laplace_T": dict(normalisation="laplace", temperature=0.5),
    "laplace_topk": dict(normalisation="laplace", k_active=2),
    "gaussian": dict(normalisation="gaussian", variance=0.7),
}


def _em(case, k=3, d=2, row=True):
    em = GenericEM(LikelihoodModel(ProtocolGate(**GATES[case]), linear_expert(d)), k, d)
    if not row:  # the reference: the generic branch (jacfwd of the gate's own log-weights)
        em = copy.copy(em)
        em.row_gate = False
    return em


@pytest.mark.parametrize("case", list(GATES))
def test_separable_gate_step_equals_the_jacfwd_one(case):
    """Gradient and Fisher curvature of Q_g from the family's atom-major score derivative equal
    torch.func's over every free parameter (block-diagonal Jacobian: each logit depends on its own row)."""
    em, ref = _em(case), _em(case, row=False)
    assert em.row_gate and not ref.row_gate
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.uniform(-1, 1, size=(4, 300, 2)))
    fv = torch.as_tensor(rng.normal(size=(4, em.mg)))
    X[0, 0] = fv[0, : em.d]  # a sample on atom 0's centre (fv starts with beta1_0): safe_norm's zero derivative
    u = em.log_u(fv, X)
    u_ref = ref.log_u(fv, X)
    assert torch.equal(torch.isinf(u), torch.isinf(u_ref))
    fin = torch.isfinite(u_ref)
    assert torch.allclose(u[fin], u_ref[fin], rtol=1e-13, atol=1e-13)
    pi = torch.softmax(u_ref, -2)
    r = torch.softmax(u_ref + torch.as_tensor(rng.normal(size=u.shape)), -2)
    post = Posterior(r, None, None, None, None, None, None, None, pi, u_ref)
    g1, C1 = gate_fisher(em, fv, X, post)
    g2, C2 = gate_fisher(ref, fv, X, post)
    assert g1.shape == (4, em.mg) and C1.shape == (4, em.mg, em.mg)
    assert torch.allclose(g1, g2, rtol=1e-10, atol=1e-10) and torch.allclose(C1, C2, rtol=1e-10, atol=1e-10)
    assert float(g1.abs().max()) > 1.0 and float(C1.abs().max()) > 1.0  # not a comparison of zeros
    if case == "laplace_topk":
        assert bool(torch.isinf(u).any())
