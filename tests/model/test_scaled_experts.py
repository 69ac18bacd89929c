"""The expert ``eta2 * phi(eta1^T x)`` (no bias inside the activation) and its scenario-file kinds (issue 33)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import erf, expit

from moestat.data.scenario_files import ScenarioFileError, scenario_from_mapping
from moestat.model.experts import SCALED_KINDS
from moestat.model.protocol import scaled_expert
from moestat.model.protocol import FunctionExpert, ProtocolModel


ROOT = Path(__file__).resolve().parents[2]
PHI = {"scaled_gelu": lambda z: 0.5 * z * (1.0 + erf(z / np.sqrt(2.0))), "scaled_tanh": np.tanh, "scaled_sigmoid": expit}


@pytest.mark.parametrize("kind", SCALED_KINDS)
def test_scaled_expert_is_eta2_times_phi_of_eta1_x(kind):
    rng = np.random.default_rng(0)
    x, eta = rng.uniform(-1, 1, (50, 3)), rng.normal(size=(2, 4))
    h = scaled_expert(kind, 3)(torch.as_tensor(x), torch.as_tensor(eta)).numpy()
    want = np.stack([eta[j, 3] * PHI[kind](x @ eta[j, :3]) for j in range(2)], axis=-1)
    np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-14)
    # no bias inside phi: at x = 0 every expert is eta2 * phi(0), whatever eta1
    h0 = scaled_expert(kind, 3)(torch.zeros(1, 3, dtype=torch.float64), torch.as_tensor(eta)).numpy()
    np.testing.assert_allclose(h0[0], eta[:, 3] * PHI[kind](0.0), rtol=1e-12, atol=1e-15)


def test_scaled_expert_refuses_an_unknown_kind_or_dimension():
    with pytest.raises(ValueError, match="scaled expert kind"):
        scaled_expert("gelu", 2)
    with pytest.raises(ValueError, match="positive integer"):
        scaled_expert("scaled_gelu", 0)


def _mapping(kind: str, normalisation: str = "softmax") -> dict:
    b1 = [0.0, 0.0] if normalisation == "softmax" else [-1.0, 2.0]
    return {"name": "t", "gate": {"score": "linear", "normalisation": normalisation}, "expert": {"kind": kind},
            "fit": {"k": 3}, "atoms": [{"beta0": 0.4, "beta1": [1.5, -1.0], "eta": [2.0, 1.0, 1.5]},
                                       {"beta0": 0.0, "beta1": b1, "eta": [-1.4, 2.4, -1.0]}]}


@pytest.mark.parametrize("normalisation", ["softmax", "sigmoid"])
@pytest.mark.parametrize("kind", SCALED_KINDS)
def test_a_scenario_file_kind_builds_the_scaled_expert(kind, normalisation):
    """A softmax gate with a scaled expert is a protocol model (the built-in MoEModel's experts have a bias)."""
    sc = scenario_from_mapping(_mapping(kind, normalisation))
    assert isinstance(sc.model, ProtocolModel) and isinstance(sc.model.expert, FunctionExpert)
    assert sc.model.expert.name == kind and sc.model.expert.n_params == 3
    X = np.random.default_rng(1).uniform(-1, 1, (40, 2))
    z = X @ sc.truth.beta1.T + sc.truth.beta0
    w = np.exp(z - z.max(1, keepdims=True)) / np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True) \
        if normalisation == "softmax" else expit(z)
    h = np.stack([e[2] * PHI[kind](X @ e[:2]) for e in sc.truth.eta], axis=-1)
    np.testing.assert_allclose(sc.regression_function(X), (w * h).sum(1), rtol=1e-12, atol=1e-14)


def test_the_former_kinds_are_unchanged_and_a_misspelt_kind_is_named():
    from moestat.model.regression import MoEModel

    assert isinstance(scenario_from_mapping(_mapping("gelu")).model, MoEModel)  # the analytic built-in path
    with pytest.raises(ScenarioFileError, match="scaled_gelu"):  # the error lists the new kinds
        scenario_from_mapping(_mapping("scaled_relu"))