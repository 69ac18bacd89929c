"""The one Mixture-of-Experts layer of moestat's neural-network side: a gate times ``M`` experts.

Used by the thesis toy tasks and training methods (Krishnamurthy 2023; :mod:`moestat.nn.methods`)
and by the real-data classifier (:class:`moestat.nn.classifier.MoEClassifier`).

* **Experts**: ``M`` MLPs ``f_i: R^d -> R^q`` in one :class:`~moestat.nn.expert_mlp.ExpertMLP`
  (Krishnamurthy 2023, Sec. 1.0 / Eq. 2.1).  ``expert_hidden=()`` gives linear experts (the toy
  problems); ``expert_bias=False`` the bias-free 2x2 experts of the regression toy.
  Classification experts return logits.
* **Gate body**: an MLP ``g: R^d -> R^h`` (identity when ``gate_hidden=()``).
* **Gate head**, one of

  - the *score router* (``router=None, gate_type="router"``): logits ``z = s(h; W) + b`` with the
    score ``s`` of :func:`moestat.model.gates.gate_scores` (``linear``, ``cosine``, ``perturbed``
    cosine), the vocabulary of the statistical side; how ``z`` becomes combination weights is the
    training method's choice (:mod:`moestat.nn.methods`);
  - a *router* of :mod:`moestat.nn.routers` (``router="topk_mask"``, ``"noisy_topk"``, ...), which
    computes sparse combination weights and balancing losses itself (the real-data gates);
  - the *attentive gate* (``gate_type="attentive"``, Krishnamurthy 2023 Ch. 7, Eqs. 7.1-7.5):
    query ``Q = h_g W_q``, keys ``K_i = h_{e,i} W_k``, logits ``z = Q K^T / sqrt(a)``, where
    ``h_{e,i}`` is the last hidden layer of expert ``i`` (its output when the experts are linear
    -- our extension; the thesis always has a hidden layer) and ``a`` the attention width.

Every parameter is drawn from one ``torch.Generator`` built by :func:`moestat.seeding.torch_generator`.
``init_order`` fixes the drawing order: ``"experts_first"`` (experts, gate body, gate head; the
thesis toy tasks) or ``"gate_first"`` (gate body, gate head, experts; the real-data classifier),
so that seeded runs reproduce the results recorded before the stacks were merged.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from moestat.model.experts import activation_fn
from moestat.model.gates import GATE_KINDS, Gate, canonical_name
from moestat.nn.expert_mlp import ExpertMLP
from moestat.nn.routers import NoisyTopKRouter, make_router
from moestat.seeding import torch_generator

__all__ = ["MoELayer", "MoEOutput", "TASKS", "GATE_TYPES", "INIT_ORDERS"]

TASKS = ("classification", "regression")
GATE_TYPES = ("router", "attentive")
INIT_ORDERS = ("experts_first", "gate_first")


def _uniform(shape, fan_in: int, gen: torch.Generator, dtype) -> torch.Tensor:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (``nn.Linear``'s bound) drawn from ``gen``."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return (torch.rand(shape, generator=gen, dtype=dtype) * 2.0 - 1.0) * bound


@dataclass
class MoEOutput:
    """Forward quantities of :class:`MoELayer` for a batch of ``n`` inputs.

    Attributes
    ----------
    expert_out : Tensor, shape ``[n, M, q]``
        Expert outputs: class logits (classification) or regression outputs.
    gate_logits : Tensor, shape ``[n, M]``
        Gate logits ``z`` (score, router or attention logits).  For the expert-loss gate these are
        the predicted per-expert log-likelihoods (no softmax is ever applied to them).
    weights : Tensor, shape ``[n, M]``
        Combination weights of the gate head: the router's (sparse) weights, else ``softmax(z)``
        (the thesis methods recompute theirs from ``gate_logits``).
    mask : BoolTensor, shape ``[n, M]``
        Experts selected by the router (all ``True`` for dense gates).
    probs : Tensor, shape ``[n, M]``
        Full softmax probabilities of the gate.
    aux_loss : Tensor, scalar
        The router's balancing losses (0 without them).
    expert_hidden : Tensor, shape ``[n, M, h_e]``
        Last hidden layer of the experts (``expert_out`` for linear experts): the attention key.
    gate_hidden : Tensor, shape ``[n, h_g]``
        Output of the gate body (the input itself when ``gate_hidden=()``).
    """

    expert_out: torch.Tensor
    gate_logits: torch.Tensor
    weights: torch.Tensor
    mask: torch.Tensor
    probs: torch.Tensor
    aux_loss: torch.Tensor
    expert_hidden: torch.Tensor | None = None
    gate_hidden: torch.Tensor | None = None


class MoELayer(nn.Module):
    """Gate x experts; see the module docstring for the maths.

    Parameters
    ----------
    n_inputs : int
        Input dimension ``d``.
    n_outputs : int
        Number of classes ``K`` (classification) or output dimension ``q`` (regression).
    n_experts : int
        Number of experts ``M``.
    task : {"classification", "regression"}
    expert_hidden, gate_hidden : sequence of int
        Hidden widths of the expert and gate MLPs (``()``: linear).
    gate_kind : {"linear", "cosine", "perturbed"}
        Score of the score router (:mod:`moestat.model.gates`; ``perturbed_cosine`` is accepted).
    gate_tau : float or (float, float)
        ``(tau1, tau2)`` of the perturbed cosine score.
    gate_type : {"router", "attentive"}
        Router gate or attentive gate (Ch. 7).
    attention_dim : int
        Width ``a`` of ``W_q`` and ``W_k`` for the attentive gate.
    expert_bias, gate_bias : bool
        Whether expert layers / the score router have biases.
    activation : str
        Hidden activation of both MLPs (:data:`moestat.model.experts.ACTIVATIONS`).
    router : str, optional
        A router of :data:`moestat.nn.routers.LAYER_ROUTERS` as gate head instead of the score router.
    k : int, optional
        Experts per input of a sparse ``router``.
    router_kwargs : dict, optional
        Passed to :func:`moestat.nn.routers.make_router`.
    init_order : {"experts_first", "gate_first"}
        Order in which the parameters are drawn (module docstring).
    random_state : int, SeedSequence or torch.Generator
        Initialisation seed (a generator is used, and advanced, as it is).
    dtype : torch.dtype

    Examples
    --------
    >>> import torch
    >>> m = MoELayer(2, 6, 3, random_state=0)
    >>> out = m(torch.zeros(5, 2))
    >>> tuple(out.expert_out.shape), tuple(out.gate_logits.shape)
    ((5, 3, 6), (5, 3))
    """

    def __init__(
        self,
        n_inputs: int,
        n_outputs: int,
        n_experts: int,
        *,
        task: str = "classification",
        expert_hidden: Sequence[int] = (),
        gate_hidden: Sequence[int] = (),
        gate_kind: str = "linear",
        gate_tau: float | tuple[float, float] = 1.0,
        gate_type: str = "router",
        attention_dim: int = 32,
        expert_bias: bool = True,
        gate_bias: bool = True,
        activation: str = "relu",
        router: str | None = None,
        k: int | None = None,
        router_kwargs: dict | None = None,
        init_order: str = "experts_first",
        random_state=0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        for name, v in (("n_inputs", n_inputs), ("n_outputs", n_outputs), ("n_experts", n_experts),
                        ("attention_dim", attention_dim)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if gate_type not in GATE_TYPES:
            raise ValueError(f"gate_type must be one of {GATE_TYPES}, got {gate_type!r}")
        try:
            gate_kind = canonical_name(gate_kind, GATE_KINDS)
        except ValueError:
            raise ValueError(f"gate_kind must be one of {GATE_KINDS}, got {gate_kind!r}") from None
        if init_order not in INIT_ORDERS:
            raise ValueError(f"init_order must be one of {INIT_ORDERS}, got {init_order!r}")
        if router is not None and gate_type != "router":
            raise ValueError("a named router replaces the score router; it cannot be combined with the attentive gate")
        self._act = activation_fn(activation)
        expert_hidden = tuple(int(h) for h in expert_hidden)
        gate_hidden = tuple(int(h) for h in gate_hidden)
        if any(h < 1 for h in expert_hidden + gate_hidden):
            raise ValueError("hidden widths must be positive integers")
        if task == "classification" and n_outputs < 2:
            raise ValueError(f"n_outputs (number of classes) must be >= 2, got {n_outputs}")
        self.n_inputs, self.n_outputs, self.n_experts = int(n_inputs), int(n_outputs), int(n_experts)
        self.task, self.gate_type, self.activation = task, gate_type, activation
        self.expert_hidden_sizes, self.gate_hidden_sizes = expert_hidden, gate_hidden
        self.attention_dim, self.expert_bias, self.gate_bias = int(attention_dim), bool(expert_bias), bool(gate_bias)
        self.gate_kind, self.gate_tau, self.init_order = gate_kind, gate_tau, init_order
        self.score = Gate(gate_kind, tau=gate_tau)  # score vocabulary of moestat.model.gates
        gen = torch_generator(random_state)
        M, d = self.n_experts, self.n_inputs

        def make_experts():
            self.experts = ExpertMLP(M, d, self.n_outputs, expert_hidden, bias=self.expert_bias,
                                     activation=activation, generator=gen, init_order="layerwise", dtype=dtype)

        if init_order == "experts_first":
            make_experts()
        # gate body: Linear layers drawn weight then bias, nn.Linear's bound
        self.gate_body = nn.ModuleList()
        gw = (d,) + gate_hidden
        for a, b in zip(gw[:-1], gw[1:]):
            lin = nn.Linear(a, b, dtype=dtype)
            with torch.no_grad():
                lin.weight.copy_(_uniform((b, a), a, gen, dtype))
                lin.bias.copy_(_uniform((b,), a, gen, dtype))
            self.gate_body.append(lin)
        h_g = gw[-1]
        self.router = None
        self.router_weight = self.router_bias = self.w_query = self.w_key = None
        if router is not None:
            self.router = make_router(router, h_g, M, k, **(router_kwargs or {}))
            if not isinstance(self.router, NoisyTopKRouter):  # Datta (2024): the noisy gate starts at 0
                with torch.no_grad():
                    self.router.weight.copy_(_uniform(self.router.weight.shape, h_g, gen, self.router.weight.dtype))
        elif gate_type == "router":
            self.router_weight = nn.Parameter(_uniform((M, h_g), h_g, gen, dtype))
            self.router_bias = nn.Parameter(_uniform((M,), h_g, gen, dtype)) if self.gate_bias else None
        else:
            h_e = expert_hidden[-1] if expert_hidden else self.n_outputs
            self.w_query = nn.Parameter(_uniform((h_g, self.attention_dim), h_g, gen, dtype))
            self.w_key = nn.Parameter(_uniform((h_e, self.attention_dim), h_e, gen, dtype))
        if init_order == "gate_first":
            make_experts()

    # ---- parameter groups used by the training schedules -----------------------------------
    def expert_parameters(self) -> list[nn.Parameter]:
        """Parameters of the experts only."""
        return list(self.experts.parameters())

    def gate_parameters(self) -> list[nn.Parameter]:
        """Parameters of the gate (body, router or attention matrices)."""
        ids = {id(p) for p in self.expert_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]

    # ---- forward ---------------------------------------------------------------------------
    def gate_features(self, x: torch.Tensor) -> torch.Tensor:
        """Gate body output ``h_g`` ``[n, h_g]``.

        Hidden layers use the activation; for the attentive gate the last body layer has no
        activation (Algorithm 7.2.1: ``h_g`` is a linear layer output).
        """
        h = x
        for i, lin in enumerate(self.gate_body):
            h = lin(h)
            if not (self.gate_type == "attentive" and i == len(self.gate_body) - 1):
                h = self._act(h)
        return h

    def forward(self, x: torch.Tensor) -> MoEOutput:  # noqa: D401 - nn.Module API
        """Forward quantities for a batch ``x`` of shape ``[n, d]``; see :class:`MoEOutput`."""
        if x.ndim != 2 or x.shape[-1] != self.n_inputs:
            raise ValueError(f"x must have shape [n, {self.n_inputs}], got {tuple(x.shape)}")
        h_g = self.gate_features(x)
        expert_out, expert_hidden = self.experts.forward_with_hidden(x)
        if self.router is not None:
            r = self.router(h_g)
            return MoEOutput(expert_out, r.logits, r.weights, r.mask, r.probs, r.aux_loss, expert_hidden, h_g)
        if self.gate_type == "router":
            logits = self.score.scores(h_g, self.router_weight)
            if self.router_bias is not None:
                logits = logits + self.router_bias
        else:
            q = h_g @ self.w_query  # [n, a]      Eq. 7.3
            k = expert_hidden @ self.w_key  # [n, M, a]   Eq. 7.4
            logits = torch.einsum("na,nma->nm", q, k) / math.sqrt(self.attention_dim)  # Eq. 7.5
        p = torch.softmax(logits, dim=-1)
        return MoEOutput(expert_out, logits, p, torch.ones_like(p, dtype=torch.bool), p, logits.new_zeros(()),
                         expert_hidden, h_g)

    # ---- derived models --------------------------------------------------------------------
    def distilled_copy(self, random_state=0) -> "MoELayer":
        """A score-router layer with copies of these experts and of the gate body (Sec. 7.2.1).

        The attention matrices are dropped and a new router (output layer) is initialised from
        ``random_state``; the gate body is initialised from this model's gate body.
        """
        if self.router is not None:
            raise ValueError("distilled_copy distils the attentive gate into a score router")
        new = MoELayer(
            self.n_inputs, self.n_outputs, self.n_experts, task=self.task,
            expert_hidden=self.expert_hidden_sizes, gate_hidden=self.gate_hidden_sizes,
            gate_kind=self.gate_kind, gate_tau=self.gate_tau, gate_type="router",
            attention_dim=self.attention_dim, expert_bias=self.expert_bias, gate_bias=self.gate_bias,
            activation=self.activation, random_state=random_state,
            dtype=self.experts.weights[0].dtype,
        )
        with torch.no_grad():
            for a, b in zip(new.expert_parameters(), self.expert_parameters()):
                a.copy_(b)
            for a, b in zip(new.gate_body, self.gate_body):
                a.load_state_dict(copy.deepcopy(b.state_dict()))
        return new

    def expert_matrices(self) -> torch.Tensor:
        """For linear experts: the maps ``A_i`` with ``f_i(x) = A_i x (+ b_i)``, shape ``[M, q, d]``."""
        if self.expert_hidden_sizes:
            raise ValueError("expert_matrices needs linear experts (expert_hidden=())")
        return self.experts.weights[0].detach().transpose(1, 2).clone()
