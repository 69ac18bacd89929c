"""Inference and evaluation of a MoE trained by a thesis method (Krishnamurthy 2023).

:func:`predict_moe` applies the inference rule of a :class:`~moestat.nn.methods.Method` (soft
mixture, argmax expert, top-k, pre-softmax, hard selection by entropy or predicted loss);
:func:`evaluate_moe` adds accuracy (or MSE) and the decomposition metrics of the thesis's Ch. 4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from moestat.nn.layer import MoELayer
from moestat.nn.methods import _HARD_AGGS, _SOFT_GATES, Method, _check_compat, _log_weights, _prediction_entropy, get_method
from moestat.nn.metrics import (
    count_matrix,
    error_attribution,
    expert_usage,
    gate_sparsity,
    mutual_information,
    usage_counts,
)

__all__ = ["Prediction", "predict_moe", "evaluate_moe"]


# ---- inference and evaluation ----------------------------------------------------------------
@dataclass
class Prediction:
    """Inference of a trained MoE (NumPy arrays).

    Attributes
    ----------
    output : ndarray, shape ``[n, q]``
        Class probabilities or regression outputs of the MoE.
    weights : ndarray, shape ``[n, M]``
        Combination weights actually used at inference (one-hot for hard-selection methods).
    gate_probs : ndarray, shape ``[n, M]``
        The gate's soft distribution ``softmax(z)`` (equal to ``weights`` for gate-less methods).
    selected : ndarray of int, shape ``[n]``
        ``argmax`` of ``weights`` (the expert "selected" for I(E;Y)).
    expert_outputs : ndarray, shape ``[n, M, q]``
        Each expert's class probabilities or regression output.
    """

    output: np.ndarray
    weights: np.ndarray
    gate_probs: np.ndarray
    selected: np.ndarray
    expert_outputs: np.ndarray

    @property
    def y_pred(self) -> np.ndarray:
        """Predicted classes ``argmax`` of :attr:`output`."""
        return self.output.argmax(-1)

    @property
    def expert_predictions(self) -> np.ndarray:
        """Each expert's predicted class ``[n, M]``."""
        return self.expert_outputs.argmax(-1)


@torch.no_grad()
def predict_moe(model: MoELayer, x, method: "str | Method") -> Prediction:
    """Inference rule of ``method`` (Eqs. 2.1, 2.3-2.4, 2.7, 2.9, 5.2, 6.4-6.5, 8.1-8.2).

    Parameters
    ----------
    model : MoELayer
        A trained model (``TrainResult.model``).
    x : array, shape ``[n, d]``
    method : str or Method

    Returns
    -------
    Prediction
    """
    method = get_method(method)
    dtype = model.experts.weights[0].dtype
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).to(dtype)
    if method.schedule == "distill" and model.gate_type == "router":
        method = replace(method, gate="softmax", schedule="end_to_end")
    _check_compat(model, method)
    out = model(x)
    o, z, M = out.expert_out, out.gate_logits, model.n_experts
    if method.gate == "entropy":
        score = -_prediction_entropy(o)  # Eq. 6.4: argmin H(o_i)
    else:
        score = z  # Eq. 8.1 for the expert-loss gate; argmax p for softmax gates
    gate_probs = torch.softmax(z, -1) if method.gate in _SOFT_GATES else None
    if method.aggregation in _HARD_AGGS:
        w = F.one_hot(score.argmax(1), M).to(o.dtype)
    else:
        w = _log_weights(z, method.aggregation, method.k).exp()
    if gate_probs is None:
        gate_probs = w
    if model.task == "classification":
        probs = torch.softmax(o, -1)
        if method.aggregation == "pre_softmax":
            output = torch.softmax((w.unsqueeze(-1) * o).sum(1), -1)
        else:
            output = (w.unsqueeze(-1) * probs).sum(1)
        eo = probs
    else:
        output = (w.unsqueeze(-1) * o).sum(1)
        eo = o
    c = lambda t: t.detach().cpu().numpy().astype(np.float64)  # noqa: E731
    return Prediction(c(output), c(w), c(gate_probs), w.argmax(1).cpu().numpy(), c(eo))


def evaluate_moe(model: MoELayer, x, y, method: "str | Method", labels=None) -> dict:
    """Accuracy (or MSE) and the decomposition metrics of Krishnamurthy (2023), Ch. 4, on ``(x, y)``.

    Parameters
    ----------
    model : MoELayer
    x : array, shape ``[n, d]``
    y : array
        Class labels (classification) or targets ``[n, q]``.
    method : str or Method
    labels : array of int, shape ``[n]``, optional
        Labels for the count matrix / I(E;Y); default ``y`` for classification.  For regression
        pass the latent component (e.g. ``ToyData.s_test``); without it I(E;Y) is NaN.

    Returns
    -------
    dict
        ``accuracy`` (%; classification) or ``mse``; ``H_s`` (entropy of the combination weights
        used), ``H_s_gate`` (entropy of the gate's softmax), ``H_u``, ``I_EY``, ``usage`` (samples
        per expert), ``counts`` (matrix C) and, for classification, ``attribution``
        (see :func:`moestat.nn.metrics.error_attribution`).
    """
    pred = predict_moe(model, x, method)
    res: dict[str, Any] = {
        "H_s": gate_sparsity(pred.weights),
        "H_s_gate": gate_sparsity(pred.gate_probs),
        "H_u": expert_usage(pred.weights),
        "usage": usage_counts(pred.selected, model.n_experts).tolist(),
    }
    y_np = np.asarray(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y)
    if model.task == "classification":
        res["accuracy"] = 100.0 * float((pred.y_pred == y_np).mean())
        res["attribution"] = error_attribution(pred.expert_predictions, y_np, y_pred=pred.y_pred)
        labels = y_np if labels is None else labels
    else:
        yy = y_np.reshape(len(y_np), -1)
        res["mse"] = float(((pred.output - yy) ** 2).sum(1).mean())
    if labels is not None:
        C = count_matrix(pred.selected, labels, model.n_experts)
        res["counts"] = C.tolist()
        res["I_EY"] = mutual_information(C)
    else:
        res["I_EY"] = float("nan")
    return res
