"""The statistical model: gates, experts, mixing measures, the regression function, identifiability."""

from moestat.model.experts import ACTIVATIONS, Expert
from moestat.model.gates import GATE_KINDS, Gate, gate_scores, gate_weights, top_k_mask
from moestat.model.identifiability import check_identifiability, is_strongly_identifiable, is_weakly_identifiable
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.protocol import FunctionExpert, ProtocolGate, ProtocolModel, mlp_expert, sigmoid_gate
from moestat.model.regression import MoEModel

__all__ = [
    "ACTIVATIONS",
    "Expert",
    "GATE_KINDS",
    "Gate",
    "gate_scores",
    "gate_weights",
    "top_k_mask",
    "check_identifiability",
    "is_strongly_identifiable",
    "is_weakly_identifiable",
    "MixingMeasure",
    "ParameterBox",
    "MoEModel",
    "FunctionExpert",
    "ProtocolGate",
    "ProtocolModel",
    "mlp_expert",
    "sigmoid_gate",
]
