"""A custom scenario in Python: softmax gate, one-hidden-layer MLP experts (autograd path).

    moestat rates --scenario examples/mlp_expert.py:scenario --out runs/mlp
"""

import numpy as np

from moestat.data.scenario_files import FileScenario
from moestat.losses.voronoi_spec import builtin_spec
from moestat.model.mixing import MixingMeasure
from moestat.model.protocol import ProtocolGate, ProtocolModel, linear_score, mlp_expert


def scenario() -> FileScenario:
    d, hidden = 2, 2
    expert = mlp_expert(d, hidden)  # eta = [W (2x2), b (2), v (2), c]: 9 parameters
    model = ProtocolModel(ProtocolGate(linear_score, "softmax"), expert)
    eta = np.array([
        [1.0, -0.5, 0.3, 0.8, 0.1, -0.2, 1.2, -0.8, 0.3],
        [-0.6, 0.9, 0.7, 0.4, -0.3, 0.2, 0.9, 1.1, -0.5],
    ])
    truth = MixingMeasure(np.array([0.3, 0.0]), np.array([[1.5, -1.0], [0.0, 0.0]]), eta)
    # D3 on the flat MLP vector: an MLP is identified only up to hidden-unit permutation and
    # sign flips, so no theorem predicts this loss's rate; the regression error is n^{-1/2}.
    return FileScenario(truth, model, noise_var=0.01, losses=(builtin_spec("D3"),), predicted={"D3": None}, name="mlp-expert")
