"""Training methods for task decomposition (Krishnamurthy 2023) as one design: gate x aggregation x schedule.

A :class:`Method` is three independent choices plus hyper-parameters:

* **gate** -- how the per-expert weights are produced:
  ``softmax`` (router logits ``z``, ``p = softmax(z)``; Sec. 1.0), ``attentive`` (Ch. 7,
  Eqs. 7.1-7.5; needs ``MoELayer(gate_type="attentive")``), ``entropy`` (no gate: the expert with the
  lowest prediction entropy, Eqs. 6.1-6.5) and ``expert_loss`` (the gate regresses each expert's
  log-likelihood of the true class, Eqs. 8.1-8.5).
* **aggregation** -- how expert outputs ``o_i`` are combined and which loss is minimised:
  ``mixture`` (output mixture, ``y_hat = sum_i p_i o_i``, Eqs. 2.1-2.2), ``expected_loss``
  (the stochastic model, ``L = sum_i p_i l(y, o_i)``, Eq. 2.5, inference ``o_argmax p``,
  Eqs. 2.3-2.4), ``top_k`` (``softmax(KeepTopK(z, k))``, Eqs. 2.6-2.8), ``pre_softmax``
  (``softmax(sum_i p_i logits_i)``, Eqs. 2.9-2.10), ``posterior`` (single-level EM of Kirsch et
  al. 2018, exact enumeration of the latent expert) and ``select`` (hard selection by the
  ``entropy`` / ``expert_loss`` gates).
* **schedule** -- what is trained when: ``end_to_end``; ``dual_temperature`` (Algorithm 5.1.1,
  Eqs. 5.4-5.5); ``em`` (E-step responsibilities, partial M-step); ``loudest`` (piecewise-constant
  temperature, Algorithm 6.2.1); ``peeking`` (Step 1 winner-take-all on the surprisal
  ``-log o_iy``, Eqs. 6.6-6.9; Step 2 reverse distillation of a gate with frozen, then unfrozen
  experts, Algorithm 6.3.2); ``distill`` (attentive training, then a plain router gate initialised
  from the attentive gate body and trained on frozen experts, Sec. 7.2.1); ``expert_loss``
  (gate L1 regression on detached targets + selected-expert loss, Algorithm 8.2.1).

Regularisers (:mod:`moestat.nn.regularizers`) are added to the task loss through
``Method.importance`` (``L_importance``) and ``Method.similarity`` (``L_s``); they act on the full
softmax ``p = softmax(z)`` of the gate (the thesis does not say which ``p`` it uses with top-k).

Separate optimisers ``O_e`` / ``O_g`` (dual temperature, expert-loss gate) are realised by one
per-parameter optimiser (RMSProp/Adam) on a loss whose expert part is computed with a detached gate
and whose gate part with detached experts: for element-wise optimisers this is exactly the same
update as two optimisers over disjoint parameter sets.

:func:`train_moe` is a plain function: every phase of a schedule is one call of the package's one
training loop, :func:`moestat.nn.train.fit`, with the phase's parameter group, step and hooks.

Classification loss ``l`` is the cross-entropy ``-log o_iy`` of the expert softmax; regression loss
is the squared error summed over outputs (the thesis does not write ``l`` down; inferred).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from moestat.model.gates import canonical_name, top_k_mask
from moestat.nn.layer import MoELayer
from moestat.nn.regularizers import importance_loss, similarity_loss
from moestat.nn.train import OPTIMIZERS, Batch, ShuffledBatches, fit
from moestat.seeding import torch_generator

__all__ = [
    "Method",
    "METHODS",
    "get_method",
    "train_moe",
    "TrainResult",
    "per_expert_loss",
    "expert_loglik",
    "aggregate_loss",
]

GATES = ("softmax", "attentive", "entropy", "expert_loss")
AGGREGATIONS = ("mixture", "expected_loss", "top_k", "pre_softmax", "posterior", "select")
SCHEDULES = ("end_to_end", "dual_temperature", "em", "loudest", "peeking", "distill", "expert_loss")
_SOFT_GATES = ("softmax", "attentive")
_HARD_AGGS = ("expected_loss", "posterior", "select")  # argmax inference (Eqs. 2.3-2.4, 6.4, 8.1)


@dataclass(frozen=True)
class Method:
    """One training method = gate x aggregation x schedule (+ hyper-parameters).

    Parameters
    ----------
    name : str
        Label used in tables.
    gate : {"softmax", "attentive", "entropy", "expert_loss"}
    aggregation : {"mixture", "expected_loss", "top_k", "pre_softmax", "posterior", "select"}
        For ``peeking`` it is the Step-2 aggregation; for ``distill`` both phases use it.
    schedule : {"end_to_end", "dual_temperature", "em", "loudest", "peeking", "distill", "expert_loss"}
    k : int, optional
        Number of experts kept by ``top_k``.
    temperature : float
        Dual temperature: the experts' temperature ``T > 1`` (Eq. 5.5).
    temperature_decay : float
        Dual temperature: ``T_decay``; from epoch ``decay_start`` on,
        ``T_e = max(1, T (1 + T_decay)^-(e - decay_start))`` -- our reading of the garbled
        formula of Sec. 5.3 (a geometric decay per epoch, floored at the gate's ``T = 1``).
    decay_start : float
        Dual temperature: first decaying epoch as a fraction of ``epochs`` (thesis 25/100).
    loudest_temperatures : tuple of float
        Loudest expert: temperatures of equal-length epoch blocks (thesis ``10, 1, 0.01, 0.001``).
    step1_fraction : float
        Peeking: fraction of ``epochs`` for Step 1 (thesis 20 of 120).
    split_fraction : float
        Peeking: fraction of the Step-2 epochs with frozen experts (``epochs_split``; not given in
        the thesis).
    distill_fraction : float
        Distill: fraction of ``epochs`` spent training the distilled gate.
    importance : float
        ``w_importance`` of :func:`~moestat.nn.regularizers.importance_loss` (0: off).
    similarity : (float, float), optional
        ``(beta_s, beta_d)`` of :func:`~moestat.nn.regularizers.similarity_loss` (None: off).
    """

    name: str = "custom"
    gate: str = "softmax"
    aggregation: str = "mixture"
    schedule: str = "end_to_end"
    k: int | None = None
    temperature: float = 2.0
    temperature_decay: float = 0.1
    decay_start: float = 0.25
    loudest_temperatures: tuple[float, ...] = (10.0, 1.0, 0.01, 0.001)
    step1_fraction: float = 1.0 / 6.0
    split_fraction: float = 0.25
    distill_fraction: float = 0.3
    importance: float = 0.0
    similarity: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {self.gate!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        hard_gate = self.gate in ("entropy", "expert_loss")
        if hard_gate != (self.aggregation == "select"):
            raise ValueError("aggregation 'select' goes with the 'entropy' and 'expert_loss' gates, and only with them")
        if (self.gate == "entropy") != (self.schedule == "loudest"):
            raise ValueError("the 'entropy' gate goes with the 'loudest' schedule, and only with it")
        if (self.gate == "expert_loss") != (self.schedule == "expert_loss"):
            raise ValueError("the 'expert_loss' gate goes with the 'expert_loss' schedule, and only with it")
        if (self.aggregation == "posterior") != (self.schedule == "em"):
            raise ValueError("aggregation 'posterior' goes with the 'em' schedule, and only with it")
        if self.schedule == "distill" and self.gate != "attentive":
            raise ValueError("the 'distill' schedule distils an attentive gate: use gate='attentive'")
        if self.aggregation == "top_k":
            if self.k is None or isinstance(self.k, bool) or int(self.k) != self.k or self.k < 1:
                raise ValueError(f"top_k aggregation needs a positive integer k, got {self.k!r}")
        if not self.temperature > 0 or not self.temperature_decay >= 0:
            raise ValueError("temperature must be > 0 and temperature_decay >= 0")
        if not self.loudest_temperatures or any(not t > 0 for t in self.loudest_temperatures):
            raise ValueError("loudest_temperatures must be a non-empty tuple of positive numbers")
        for nm in ("decay_start", "step1_fraction", "split_fraction", "distill_fraction"):
            v = getattr(self, nm)
            if not 0 <= v < 1:
                raise ValueError(f"{nm} must be in [0, 1), got {v!r}")
        if self.importance < 0:
            raise ValueError(f"importance must be >= 0, got {self.importance!r}")
        if self.similarity is not None and (len(self.similarity) != 2 or min(self.similarity) < 0):
            raise ValueError("similarity must be None or a pair (beta_s, beta_d) of non-negative numbers")
        if (self.importance > 0 or self.similarity is not None) and self.gate not in _SOFT_GATES:
            raise ValueError("regularisers need a softmax or attentive gate")

    def to_dict(self) -> dict:
        """JSON-friendly description."""
        return asdict(self)


#: The named methods of the thesis (Ch. 2-9).  ``get_method(name, **overrides)`` builds variants.
METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("output_mixture", "softmax", "mixture"),
        Method("stochastic", "softmax", "expected_loss"),
        Method("top1", "softmax", "top_k", k=1),
        Method("top2", "softmax", "top_k", k=2),
        Method("pre_softmax", "softmax", "pre_softmax"),
        Method("em", "softmax", "posterior", "em"),
        Method("dual_temperature", "softmax", "mixture", "dual_temperature"),
        Method("dual_temperature_stochastic", "softmax", "expected_loss", "dual_temperature"),
        Method("loudest_expert", "entropy", "select", "loudest"),
        Method("peeking_expert", "softmax", "expected_loss", "peeking"),
        Method("attentive", "attentive", "mixture"),
        Method("attentive_distilled", "attentive", "mixture", "distill"),
        Method("expert_loss", "expert_loss", "select", "expert_loss"),
        Method("output_mixture_importance", "softmax", "mixture", importance=0.4),
        Method("top2_importance", "softmax", "top_k", k=2, importance=0.4),
        Method("output_mixture_similarity", "softmax", "mixture", similarity=(1e-2, 1e-2)),
    ]
}


def get_method(method: "str | Method", **overrides: Any) -> Method:
    """Look up a named method (see :data:`METHODS`) and optionally override fields.

    Examples
    --------
    >>> get_method("top2").k
    2
    >>> get_method("attentive_distilled", aggregation="top_k", k=2).schedule
    'distill'
    """
    if isinstance(method, Method):
        return replace(method, **overrides) if overrides else method
    try:
        method = canonical_name(method, tuple(METHODS))  # output-mixture == output_mixture
    except ValueError:
        raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}") from None
    return replace(METHODS[method], **overrides) if overrides else METHODS[method]


# ---- losses and aggregation ----------------------------------------------------------------
def per_expert_loss(expert_out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """``l(y, o_i)`` for every expert: ``[n, M]`` (cross-entropy, or squared error summed over outputs)."""
    if task == "classification":
        logp = F.log_softmax(expert_out, dim=-1)
        return -logp.gather(-1, y.view(-1, 1, 1).expand(-1, expert_out.shape[1], 1)).squeeze(-1)
    return (expert_out - y.unsqueeze(1)).pow(2).sum(-1)


def expert_loglik(expert_out: torch.Tensor, y: torch.Tensor, task: str, noise_var: float = 1.0) -> torch.Tensor:
    """``log p(y | x, expert i)``: ``[n, M]``; log ``o_iy`` or an isotropic Gaussian log-density."""
    if task == "classification":
        return -per_expert_loss(expert_out, y, task)
    q = expert_out.shape[-1]
    return -per_expert_loss(expert_out, y, task) / (2 * noise_var) - 0.5 * q * math.log(2 * math.pi * noise_var)


def _log_weights(z: torch.Tensor, aggregation: str, k: int | None, temperature: float = 1.0) -> torch.Tensor:
    """Log combination weights during training: ``log softmax(z / T)``, KeepTopK first for top-k (Eq. 2.6)."""
    if aggregation == "top_k":
        mask = top_k_mask(z.detach(), k)
        z = z.masked_fill(~mask, float("-inf"))
    return F.log_softmax(z / temperature, dim=-1)


def aggregate_loss(expert_out: torch.Tensor, log_w: torch.Tensor, y: torch.Tensor, task: str, aggregation: str) -> torch.Tensor:
    """Batch-mean task loss of an aggregation, given log combination weights ``[n, M]``.

    ``mixture``/``top_k``: ``l(y, sum_i w_i o_i)`` (Eqs. 2.2, 2.8; classification mixes the expert
    *probabilities*); ``pre_softmax``: ``l(y, softmax(sum_i w_i logits_i))`` (Eq. 2.10);
    ``expected_loss``: ``sum_i w_i l(y, o_i)`` (Eq. 2.5).
    """
    if aggregation == "expected_loss":
        w = log_w.exp()
        return (w * per_expert_loss(expert_out, y, task)).sum(1).mean()
    if task == "classification":
        if aggregation == "pre_softmax":
            logits = (log_w.exp().unsqueeze(-1) * expert_out).sum(1)
            return F.cross_entropy(logits, y)
        ll = -per_expert_loss(expert_out, y, task)  # log o_iy
        return -torch.logsumexp(log_w + ll, dim=1).mean()
    y_hat = (log_w.exp().unsqueeze(-1) * expert_out).sum(1)
    return (y_hat - y).pow(2).sum(-1).mean()


def _prediction_entropy(expert_out: torch.Tensor) -> torch.Tensor:
    """``H(o_i)`` of each expert's class distribution (Eq. 6.1), nats: ``[n, M]``."""
    logp = F.log_softmax(expert_out, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _regulariser(x: torch.Tensor, z: torch.Tensor, method: Method) -> torch.Tensor:
    reg = z.new_zeros(())
    if method.importance > 0 or method.similarity is not None:
        p = torch.softmax(z, dim=-1)
        if method.importance > 0:
            reg = reg + importance_loss(p, method.importance)
        if method.similarity is not None and x.shape[0] > 1:
            reg = reg + similarity_loss(x, p, *method.similarity)
    return reg


# ---- training ------------------------------------------------------------------------------
@dataclass
class TrainResult:
    """What :func:`train_moe` returns.

    Attributes
    ----------
    model : MoELayer
        The model to use for inference (for ``distill`` the distilled plain-gate model).
    method : Method
    history : list of dict
        Per epoch: ``epoch``, ``phase``, ``loss`` (mean training loss), ``temperature`` and
        ``gate_mass`` (mean training combination weight of each expert).
    teacher : MoELayer or None
        The attentive model a distilled gate was trained from.
    noise_var : float or None
        EM on regression: the fitted noise variance of the expert likelihood.
    """

    model: MoELayer
    method: Method
    history: list[dict] = field(default_factory=list)
    teacher: MoELayer | None = None
    noise_var: float | None = None


def _as_tensors(data, model: MoELayer) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(data, "x_train"):
        x, y = data.x_train, data.y_train
    else:
        try:
            x, y = data
        except (TypeError, ValueError):
            raise ValueError("data must be a ToyData or a pair (x, y)") from None
    dtype = model.experts.weights[0].dtype
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).to(dtype)
    if x.ndim != 2 or x.shape[1] != model.n_inputs:
        raise ValueError(f"x must have shape [n, {model.n_inputs}], got {tuple(x.shape)}")
    if model.task == "classification":
        y = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y).long().view(-1)
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= model.n_outputs):
            raise ValueError(f"class labels must lie in 0..{model.n_outputs - 1}")
    else:
        y = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y).to(dtype)
        y = y.view(-1, 1) if y.ndim == 1 else y
        if y.shape[1] != model.n_outputs:
            raise ValueError(f"y must have {model.n_outputs} columns, got {y.shape[1]}")
    if y.shape[0] != x.shape[0] or x.shape[0] == 0:
        raise ValueError(f"x and y must have the same positive number of rows, got {x.shape[0]} and {y.shape[0]}")
    return x, y


def _check_compat(model: MoELayer, method: Method) -> None:
    if method.gate == "attentive" and model.gate_type != "attentive":
        raise ValueError(f"method {method.name!r} needs MoELayer(gate_type='attentive')")
    if method.gate != "attentive" and model.gate_type != "router":
        raise ValueError(f"method {method.name!r} needs a router gate, the model has gate_type={model.gate_type!r}")
    if method.gate == "entropy" and model.task != "classification":
        raise ValueError("the loudest-expert method needs class distributions (classification only)")
    if method.aggregation == "top_k" and method.k > model.n_experts:
        raise ValueError(f"k={method.k} exceeds the number of experts {model.n_experts}")


def _split_epochs(total: int, fraction: float) -> tuple[int, int]:
    first = int(round(total * fraction))
    first = min(max(first, 1 if fraction > 0 else 0), total - 1) if total > 1 else (0 if fraction == 0 else total)
    return first, total - first


def _check_training_args(epochs, batch_size, lr, optimizer) -> None:
    """``ValueError`` (one line) for a bad ``epochs``, ``batch_size``, ``lr`` or ``optimizer`` of :func:`train_moe`."""
    for nm, v in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")


class _Training:
    """One :func:`train_moe` call: the phases it runs and the loss of a mini-batch under each method.

    Every ``step_*`` takes ``(mod, xb [b, d], yb, out, temp)`` (``out`` the layer's
    :class:`~moestat.nn.layer.MoEOutput` on ``xb``, ``temp`` the epoch's temperature) and returns
    ``(loss, w [b, M])``, ``w`` the combination weight each expert received (for ``gate_mass``).
    ``state`` holds what persists across steps: the EM responsibilities and noise variance, and the
    indices of the current mini-batch.
    """

    def __init__(self, method: Method, task: str, x: torch.Tensor, y: torch.Tensor, batches: ShuffledBatches,
                 optimizer: str, lr: float, result: TrainResult):
        self.method, self.task, self.x, self.y = method, task, x, y
        self.batches, self.optimizer, self.lr, self.result = batches, optimizer, lr, result
        self.n = x.shape[0]
        self.agg, self.k = method.aggregation, method.k
        self.state = {"noise_var": float(y.var()) if task == "regression" else None}

    def run_phase(self, mod: MoELayer, n_epochs: int, phase: str, params, step_fn, temp_fn=lambda e: 1.0,
                  epoch_start=None) -> None:
        """``n_epochs`` of ``step_fn`` on ``params`` of ``mod``; one history row per epoch."""
        if n_epochs == 0:
            return
        cur: dict = {}
        state, n, result = self.state, self.n, self.result

        def on_epoch_start(e: int) -> None:
            cur["temp"] = temp_fn(e)
            if epoch_start is not None:
                epoch_start(mod)
            cur["mass"] = torch.zeros(mod.n_experts, dtype=torch.float64)

        def step(batch: Batch) -> torch.Tensor:
            state["idx"] = batch.idx
            out = mod(batch.x)
            loss, w = step_fn(mod, batch.x, batch.y, out, cur["temp"])
            cur["mass"] += w.detach().to(torch.float64).sum(0)
            return loss

        fitted = fit(mod, step, self.batches, epochs=n_epochs, params=params, optimizer=self.optimizer, lr=self.lr,
                     on_epoch_start=on_epoch_start,
                     epoch_info=lambda e: {"temperature": cur["temp"], "gate_mass": (cur["mass"] / n).tolist()})
        for row in fitted.history:
            result.history.append({
                "epoch": len(result.history) + 1, "phase": phase, "loss": row["train_loss"],
                "temperature": row["temperature"], "gate_mass": row["gate_mass"],
            })

    def step_end_to_end(self, mod, xb, yb, out, temp):
        log_w = _log_weights(out.gate_logits, self.agg, self.k)
        loss = (aggregate_loss(out.expert_out, log_w, yb, self.task, self.agg)
                + _regulariser(xb, out.gate_logits, self.method))
        return loss, log_w.exp()

    def step_frozen_experts(self, mod, xb, yb, out, temp):
        log_w = _log_weights(out.gate_logits, self.agg, self.k)
        loss = (aggregate_loss(out.expert_out.detach(), log_w, yb, self.task, self.agg)
                + _regulariser(xb, out.gate_logits, self.method))
        return loss, log_w.exp()

    def step_dual(self, mod, xb, yb, out, temp):
        # Eq. 5.5: experts learn from the soft p' = softmax(z/T) (gate detached);
        # Eq. 5.4: the gate learns from p = softmax(z) (experts detached).
        agg, k, task = self.agg, self.k, self.task
        log_wt = _log_weights(out.gate_logits.detach(), agg, k, temp)
        log_w = _log_weights(out.gate_logits, agg, k)
        loss_e = aggregate_loss(out.expert_out, log_wt, yb, task, agg)
        loss_g = aggregate_loss(out.expert_out.detach(), log_w, yb, task, agg)
        return loss_e + loss_g + _regulariser(xb, out.gate_logits, self.method), log_wt.exp()

    @torch.no_grad()
    def e_step(self, mod):
        # E-step over the whole training set (Kirsch et al. 2018, single level, exact enumeration of
        # the latent expert a): r_a = p(a|x) p(y|x,a) / sum_b p(b|x) p(y|x,b).  The responsibilities
        # stay fixed for the epoch's gradient steps (partial M-step: generalised EM).  Recomputing
        # them every mini-batch would make the update identical to the output-mixture gradient
        # (Fisher's identity), since the output mixture *is* the marginal likelihood here.
        x, y, task, state = self.x, self.y, self.task, self.state
        out = mod(x)
        log_p = F.log_softmax(out.gate_logits, dim=-1)
        if task == "regression":  # closed-form M-step of the shared noise variance
            r0 = torch.softmax(log_p + expert_loglik(out.expert_out, y, task, state["noise_var"]), -1)
            sq = per_expert_loss(out.expert_out, y, task)
            state["noise_var"] = max(float((r0 * sq).sum() / (self.n * y.shape[1])), 1e-8)
        ll = expert_loglik(out.expert_out, y, task, state["noise_var"] or 1.0)
        state["resp"] = torch.softmax(log_p + ll, dim=-1)

    def step_em(self, mod, xb, yb, out, temp):
        # Partial M-step: one gradient step on Q = sum_a r_a [log p(a|x) + log p(y|x,a)].
        log_p = F.log_softmax(out.gate_logits, dim=-1)
        ll = expert_loglik(out.expert_out, yb, self.task, self.state["noise_var"] or 1.0)
        r = self.state["resp"][self.state["idx"]]
        loss = -(r * (log_p + ll)).sum(1).mean() + _regulariser(xb, out.gate_logits, self.method)
        return loss, r

    def step_loudest(self, mod, xb, yb, out, temp):
        # Eqs. 6.1-6.3: w = softmin(H(o_i)/T), no gradient through w.
        w = torch.softmax(-_prediction_entropy(out.expert_out).detach() / temp, dim=-1)
        return (w * per_expert_loss(out.expert_out, yb, self.task)).sum(1).mean(), w

    def step_peek(self, mod, xb, yb, out, temp):
        # Eqs. 6.6-6.9: the expert with the lowest surprisal -log o_iy (lowest squared error for
        # regression, the thesis's Sec. 6.5 proposal) is the only one trained on the sample.
        le = per_expert_loss(out.expert_out, yb, self.task)
        sel = le.detach().argmin(1)
        w = F.one_hot(sel, mod.n_experts).to(le.dtype)
        return (w * le).sum(1).mean(), w

    def step_expert_loss(self, mod, xb, yb, out, temp):
        # Eqs. 8.3-8.5: the gate regresses L_ei = log o_iy (detached) with an L1 loss; the expert
        # with the largest predicted log-likelihood is selected and alone trained on l(y, o_I).
        # Classification: -l = log o_iy exactly; regression: minus the squared error.
        target = -per_expert_loss(out.expert_out.detach(), yb, self.task)
        loss_g = (out.gate_logits - target).abs().sum(1).mean()
        sel = out.gate_logits.detach().argmax(1)
        w = F.one_hot(sel, mod.n_experts).to(target.dtype)
        loss_e = (w * per_expert_loss(out.expert_out, yb, self.task)).sum(1).mean()
        return loss_e + loss_g, w


def train_moe(
    model: MoELayer,
    data,
    method: "str | Method",
    *,
    epochs: int = 40,
    batch_size: int = 64,
    lr: float = 0.01,
    optimizer: str = "rmsprop",
    random_state=0,
) -> TrainResult:
    """Train ``model`` with ``method`` (a plain function; ``nn.Module.train`` is untouched).

    Parameters
    ----------
    model : MoELayer
        Trained in place (and, for ``distill``, used as the teacher).
    data : ToyData or (x, y)
        Training inputs ``[n, d]`` and labels ``[n]`` (classification) or targets ``[n, q]``.
    method : str or Method
        A name from :data:`METHODS` or a :class:`Method`.
    epochs : int
        Total number of passes over the data, shared by the phases of multi-phase schedules.
    batch_size : int
        Mini-batch size.
    lr : float
        Learning rate (the thesis's toy runs use RMSProp; Ch. 5-9 use Adam with 1e-3).
    optimizer : {"rmsprop", "adam", "sgd"}
    random_state : int or SeedSequence
        Seeds mini-batch shuffling and any newly initialised gate.

    Returns
    -------
    TrainResult

    Examples
    --------
    >>> from moestat.data.toy import make_toy_classification
    >>> d = make_toy_classification(600, 60, random_state=0)
    >>> m = MoELayer(2, 6, 3, random_state=0)
    >>> res = train_moe(m, d, "stochastic", epochs=5, random_state=0)
    >>> len(res.history)
    5
    """
    method = get_method(method)
    _check_compat(model, method)
    _check_training_args(epochs, batch_size, lr, optimizer)
    x, y = _as_tensors(data, model)
    ss = random_state if isinstance(random_state, np.random.SeedSequence) else np.random.SeedSequence(int(random_state))
    shuffle_ss, init_ss = ss.spawn(2)
    # one shuffling stream for all phases of a schedule
    batches = ShuffledBatches(x, y, batch_size, torch_generator(shuffle_ss))
    result = TrainResult(model, method)
    t = _Training(method, model.task, x, y, batches, optimizer, lr, result)
    sch = method.schedule
    if sch == "end_to_end":
        t.run_phase(model, epochs, "end_to_end", model.parameters(), t.step_end_to_end)
    elif sch == "dual_temperature":
        start = int(round(method.decay_start * epochs))

        def temp_fn(e):
            if e < start:
                return method.temperature
            return max(1.0, method.temperature * (1.0 + method.temperature_decay) ** (-(e - start)))

        t.run_phase(model, epochs, "dual_temperature", model.parameters(), t.step_dual, temp_fn)
    elif sch == "em":
        t.run_phase(model, epochs, "em", model.parameters(), t.step_em, epoch_start=t.e_step)
        result.noise_var = t.state["noise_var"]
    elif sch == "loudest":
        temps = method.loudest_temperatures
        t.run_phase(model, epochs, "loudest", model.expert_parameters(), t.step_loudest,
                    lambda e: temps[min(e * len(temps) // epochs, len(temps) - 1)])
    elif sch == "peeking":
        e1, e2 = _split_epochs(epochs, method.step1_fraction)
        t.run_phase(model, e1, "peeking_step1", model.expert_parameters(), t.step_peek)
        e_frozen, e_joint = _split_epochs(e2, method.split_fraction) if e2 > 0 else (0, 0)
        t.run_phase(model, e_frozen, "peeking_gate_frozen_experts", model.gate_parameters(), t.step_frozen_experts)
        t.run_phase(model, e_joint, "peeking_joint", model.parameters(), t.step_end_to_end)
    elif sch == "distill":
        e_distil, e_att = _split_epochs(epochs, method.distill_fraction)
        t.run_phase(model, e_att, "attentive", model.parameters(), t.step_end_to_end)
        student = model.distilled_copy(random_state=torch_generator(init_ss))
        t.run_phase(student, e_distil, "distill_gate", student.gate_parameters(), t.step_frozen_experts)
        result.teacher, result.model = model, student
    elif sch == "expert_loss":
        t.run_phase(model, epochs, "expert_loss", model.parameters(), t.step_expert_loss)
    return result
