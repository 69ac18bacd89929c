"""moestat: statistical simulation and estimation rates of Mixture-of-Experts models."""

from moestat.model.experts import ACTIVATIONS, Expert
from moestat.model.identifiability import check_identifiability, is_strongly_identifiable, is_weakly_identifiable
from moestat.model.gates import GATE_KINDS, Gate, gate_scores, gate_weights, top_k_mask
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel

__version__ = "0.1.0"

__all__ = [
    "ACTIVATIONS",
    "check_identifiability",
    "is_strongly_identifiable",
    "is_weakly_identifiable",
    "Expert",
    "GATE_KINDS",
    "Gate",
    "gate_scores",
    "gate_weights",
    "top_k_mask",
    "MixingMeasure",
    "ParameterBox",
    "MoEModel",
    "__version__",
]
