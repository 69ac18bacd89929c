"""The registry of gates: one dict from a gate's name to the object that owns its parameterisation.

:data:`GATES` maps the name a scenario file writes (``[gate] normalisation = "..."``) and that
:class:`~moestat.model.protocol.ProtocolGate` takes to a :class:`~moestat.model.gate_families.GateFamily`:
its weight formula, free-parameter mask and reference convention, canonical form and random starts.
:data:`SCORES` names the built-in routers' scores (``[gate] score``, :data:`moestat.model.gates.GATE_KINDS`),
which the softmax and sigmoid gates take.

Adding a gate is one module with a :class:`~moestat.model.gate_families.GateFamily` subclass and its
entry here.
"""

from __future__ import annotations

from typing import Sequence

from moestat.model.gate_families import GAUSSIAN, SIGMOID, SOFTMAX, GateFamily
from moestat.model.gates import GATE_KINDS, ScoreFn, cosine_score, linear_score, perturbed_score
from moestat.model.laplace_gate import LAPLACE
from moestat.model.sigmoid_normalised import NORMALISED_SIGMOID, SHARED_SIGMOID
from moestat.model.temperature_gate import TEMPERATURE

__all__ = ["GATES", "SCORES", "gate_family", "score_function"]

#: every gate of the package, by name
GATES: dict[str, GateFamily] = {
    "softmax": SOFTMAX,
    "sigmoid": SIGMOID,
    "gaussian": GAUSSIAN,
    "laplace": LAPLACE,
    "temperature": TEMPERATURE,
    "normalised-sigmoid": NORMALISED_SIGMOID,
    "shared-sigmoid": SHARED_SIGMOID,
}

#: the built-in routers' scores: a score function, or (``perturbed``) a factory of ``(tau1, tau2)``
SCORES = {"linear": linear_score, "cosine": cosine_score, "perturbed": perturbed_score}
assert tuple(sorted(SCORES)) == tuple(sorted(GATE_KINDS))  # one vocabulary with the built-in routers


def gate_family(name: str) -> GateFamily:
    """The registered gate called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return GATES[name]
    except KeyError:
        raise ValueError(f"unknown gate {name!r}; expected one of {', '.join(GATES)}") from None


def score_function(name: str, tau: float | Sequence[float] = 1.0) -> ScoreFn:
    """The score function of the built-in router ``name`` (``tau``: the perturbed router's ``(tau1, tau2)``,
    a single number for both)."""
    if name == "perturbed":
        t = (float(tau), float(tau)) if isinstance(tau, (int, float)) else tuple(float(v) for v in tau)
        return perturbed_score(*t)
    return SCORES[name]
