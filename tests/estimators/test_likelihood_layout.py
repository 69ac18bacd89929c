"""The likelihood estimators' one parameter layout (issue 32).

The generic EM (:func:`moestat.estimators.generic_starts.to_free`, ``_State.vector``: SQUAREM's and
the Newton polish's coordinates) and the fused softmax-Gaussian polish
(:func:`moestat.estimators.mle_newton.pack`) write a measure as the gate's free rows
``(beta1_i, beta0_i)`` (the gate's own free mask: a softmax drops its reference row), then every
expert's ``eta_i``, then the log-variances.  The fused polish packs the linear-softmax case of that
layout without a :class:`GenericEM` at hand; this checks that it is the same vector.
(The least-squares estimators have theirs in :mod:`moestat.estimators.layout`.)
"""

from __future__ import annotations

import numpy as np
import torch

from moestat.estimators import mle_newton
from moestat.estimators.generic_starts import from_free, to_free
from moestat.estimators.mle_generic import GenericEM, _State
from moestat.model.likelihood import LikelihoodModel, linear_expert
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate


def _measure(B=3, k=3, d=2, seed=0):
    rng = np.random.default_rng(seed)
    b0, b1 = rng.normal(size=(B, k)), rng.normal(size=(B, k, d))
    b0[:, -1], b1[:, -1] = 0.0, 0.0  # the softmax reference atom
    eta = np.concatenate([rng.normal(size=(B, k, d + 1)), rng.uniform(0.5, 2.0, size=(B, k, 1))], -1)
    return MixingMeasure(b0, b1, eta)


def test_the_fused_polish_packs_the_generic_ems_layout():
    B, k, d = 3, 3, 2
    G = _measure(B, k, d)
    em = GenericEM(LikelihoodModel(ProtocolGate(name="linear"), linear_expert(d)), k, d)
    fv, eta, ls2 = to_free(em, G)
    zero = torch.zeros(B, dtype=torch.float64)
    generic = _State(fv, eta, ls2, zero, torch.zeros(B, k, dtype=torch.float64), zero).vector()
    V = torch.as_tensor(np.concatenate([G.beta1, G.beta0[..., None]], -1))
    fused = mle_newton.pack(V, torch.as_tensor(G.eta[..., : d + 1]), torch.as_tensor(G.eta[..., d + 1]))
    torch.testing.assert_close(fused, generic, rtol=0, atol=0)
    # and back: both unpack to the same measure
    V1, E1, s21 = mle_newton.unpack(fused, k, d + 1)
    H = from_free(em, fv.numpy(), eta.numpy(), ls2.numpy())
    np.testing.assert_allclose(H.eta[..., -1], s21.numpy(), rtol=1e-15)
    np.testing.assert_allclose(H.beta1, V1[..., :-1].numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(H.eta[..., : d + 1], E1.numpy(), rtol=0, atol=0)
