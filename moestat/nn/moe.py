"""A small, general Mixture-of-Experts module for the thesis's training methods (seed 000).

:class:`MoE` holds ``M`` experts and one gate and only computes *raw* quantities; how they are
turned into gate probabilities, how expert outputs are aggregated and what is trained when is
the business of :mod:`moestat.nn.methods`.  This keeps the module reusable by every method
(and by other parts of moestat, e.g. the real-data experiments).

* **Experts** (seed 000, Sec. 1.0 / Eq. 2.1): ``M`` MLPs ``f_i: R^d -> R^q`` evaluated in one
  batched ``einsum`` (weights ``[M, in, out]``).  With ``expert_hidden=()`` they are linear maps
  (the toy problems); ``expert_bias=False`` gives the bias-free 2x2 experts of the regression toy.
  Classification experts return logits (the expert softmax is applied by the methods).
* **Gate** (``gate_type="router"``): an MLP body ``g: R^d -> R^h`` (identity when
  ``gate_hidden=()``) followed by a router with weight ``W [M, h]`` and bias ``b [M]``.  The gate
  logits are ``z = s(h; W) + b`` with the score ``s`` from :func:`moestat.model.gates.gate_scores`
  (``linear``: ``W h``; ``cosine``; ``perturbed`` cosine), i.e. the same vocabulary as the
  statistical side of moestat.
* **Attentive gate** (``gate_type="attentive"``, seed 000 Ch. 7, Eqs. 7.1-7.5): query
  ``Q = h_g W_q``, keys ``K_i = h_{e,i} W_k`` and logits ``z = Q K^T / sqrt(a)``, where ``h_{e,i}``
  is the last hidden layer of expert ``i`` (its output logits when the experts are linear -- our
  extension; the thesis always has a hidden layer) and ``a`` the attention width (the thesis uses
  ``h = a = 32``; we allow rectangular ``W_q [h_g, a]``, ``W_k [h_e, a]``).

Every parameter is initialised from a ``torch.Generator`` built from ``random_state``; nothing
reads the global torch seed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from moestat.model.gates import GATE_KINDS, Gate

__all__ = ["MoE", "MoEOutput", "make_generator"]

TASKS = ("classification", "regression")
GATE_TYPES = ("router", "attentive")
_ACTS = {"relu": torch.relu, "tanh": torch.tanh, "gelu": nn.functional.gelu, "identity": lambda z: z}


def make_generator(random_state) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from an int, ``numpy.random.SeedSequence`` or Generator."""
    if isinstance(random_state, torch.Generator):
        return random_state
    if random_state is None:
        raise ValueError("random_state must be given (int or SeedSequence): no global randomness")
    if isinstance(random_state, np.random.SeedSequence):
        seed = int(random_state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
    else:
        seed = int(random_state)
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _uniform(shape, bound: float, gen: torch.Generator, dtype) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=dtype) * 2.0 - 1.0) * bound


@dataclass
class MoEOutput:
    """Raw forward quantities of :class:`MoE` for a batch of ``n`` inputs.

    Attributes
    ----------
    expert_out : Tensor, shape ``[n, M, q]``
        Expert outputs: class logits (classification) or regression outputs.
    gate_logits : Tensor, shape ``[n, M]``
        Gate logits ``z`` (router or attention scores).  For the expert-loss gate these are the
        predicted per-expert log-likelihoods (no softmax is ever applied to them).
    expert_hidden : Tensor, shape ``[n, M, h_e]``
        Representation used as attention key (last hidden layer, or ``expert_out``).
    gate_hidden : Tensor, shape ``[n, h_g]``
        Output of the gate body (the input itself when ``gate_hidden=()``).
    """

    expert_out: torch.Tensor
    gate_logits: torch.Tensor
    expert_hidden: torch.Tensor
    gate_hidden: torch.Tensor


class MoE(nn.Module):
    """Experts and one gate; see the module docstring for the maths.

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
        Router score of :mod:`moestat.model.gates`.
    gate_tau : float or (float, float)
        ``(tau1, tau2)`` of the perturbed cosine router.
    gate_type : {"router", "attentive"}
        Plain router gate or attentive gate (Ch. 7).
    attention_dim : int
        Width ``a`` of ``W_q`` and ``W_k`` for the attentive gate.
    expert_bias, gate_bias : bool
        Whether expert layers / the router have biases.
    activation : {"relu", "tanh", "gelu", "identity"}
        Hidden activation of both MLPs.
    random_state : int or SeedSequence or torch.Generator
        Initialisation seed.
    dtype : torch.dtype
        Parameter dtype (default ``float32``).

    Examples
    --------
    >>> import torch
    >>> m = MoE(2, 6, 3, random_state=0)
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
        if gate_kind not in GATE_KINDS:
            raise ValueError(f"gate_kind must be one of {GATE_KINDS}, got {gate_kind!r}")
        if activation not in _ACTS:
            raise ValueError(f"activation must be one of {tuple(_ACTS)}, got {activation!r}")
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
        self.router = Gate(gate_kind, tau=gate_tau)  # score vocabulary of moestat.model.gates
        gen = make_generator(random_state)
        M, d = self.n_experts, self.n_inputs

        # Experts: batched layers [M, in, out]; nn.Linear's default U(-1/sqrt(in), 1/sqrt(in)).
        self.expert_weights = nn.ParameterList()
        self.expert_biases = nn.ParameterList()
        widths = (d,) + expert_hidden + (self.n_outputs,)
        for a, b in zip(widths[:-1], widths[1:]):
            bound = 1.0 / math.sqrt(a)
            self.expert_weights.append(nn.Parameter(_uniform((M, a, b), bound, gen, dtype)))
            if self.expert_bias:
                self.expert_biases.append(nn.Parameter(_uniform((M, b), bound, gen, dtype)))

        # Gate body (shared MLP) + router / attention.
        self.gate_body = nn.ModuleList()
        gw = (d,) + gate_hidden
        for a, b in zip(gw[:-1], gw[1:]):
            lin = nn.Linear(a, b, dtype=dtype)
            bound = 1.0 / math.sqrt(a)
            with torch.no_grad():
                lin.weight.copy_(_uniform((b, a), bound, gen, dtype))
                lin.bias.copy_(_uniform((b,), bound, gen, dtype))
            self.gate_body.append(lin)
        h_g = gw[-1]
        if gate_type == "router":
            bound = 1.0 / math.sqrt(h_g)
            self.router_weight = nn.Parameter(_uniform((M, h_g), bound, gen, dtype))
            self.router_bias = nn.Parameter(_uniform((M,), bound, gen, dtype)) if self.gate_bias else None
            self.w_query = self.w_key = None
        else:
            h_e = expert_hidden[-1] if expert_hidden else self.n_outputs
            self.router_weight = self.router_bias = None
            self.w_query = nn.Parameter(_uniform((h_g, self.attention_dim), 1.0 / math.sqrt(h_g), gen, dtype))
            self.w_key = nn.Parameter(_uniform((h_e, self.attention_dim), 1.0 / math.sqrt(h_e), gen, dtype))

    # ---- parameter groups used by the training schedules -----------------------------------
    def expert_parameters(self) -> list[nn.Parameter]:
        """Parameters of the experts only."""
        return list(self.expert_weights) + list(self.expert_biases)

    def gate_parameters(self) -> list[nn.Parameter]:
        """Parameters of the gate (body, router or attention matrices)."""
        ids = {id(p) for p in self.expert_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]

    # ---- forward ---------------------------------------------------------------------------
    def _experts(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        act = _ACTS[self.activation]
        h = x.unsqueeze(0).expand(self.n_experts, *x.shape)  # [M, n, d]
        n_layers = len(self.expert_weights)
        hidden = None
        for i, W in enumerate(self.expert_weights):
            h = torch.einsum("mni,mio->mno", h, W)
            if self.expert_bias:
                h = h + self.expert_biases[i].unsqueeze(1)
            if i < n_layers - 1:
                h = act(h)
                hidden = h
        out = h.transpose(0, 1)  # [n, M, q]
        hidden = out if hidden is None else hidden.transpose(0, 1)
        return out, hidden

    def gate_features(self, x: torch.Tensor) -> torch.Tensor:
        """Gate body output ``h_g`` ``[n, h_g]``.

        Hidden layers use the activation; for the attentive gate the last body layer has no
        activation (Algorithm 7.2.1: ``h_g`` is a linear layer output).
        """
        act = _ACTS[self.activation]
        h = x
        for i, lin in enumerate(self.gate_body):
            h = lin(h)
            if not (self.gate_type == "attentive" and i == len(self.gate_body) - 1):
                h = act(h)
        return h

    def forward(self, x: torch.Tensor) -> MoEOutput:  # noqa: D401 - nn.Module API
        """Raw outputs for a batch ``x`` of shape ``[n, d]``; see :class:`MoEOutput`."""
        if x.ndim != 2 or x.shape[-1] != self.n_inputs:
            raise ValueError(f"x must have shape [n, {self.n_inputs}], got {tuple(x.shape)}")
        expert_out, expert_hidden = self._experts(x)
        h_g = self.gate_features(x)
        if self.gate_type == "router":
            logits = self.router.scores(h_g, self.router_weight)
            if self.router_bias is not None:
                logits = logits + self.router_bias
        else:
            q = h_g @ self.w_query  # [n, a]      Eq. 7.3
            k = expert_hidden @ self.w_key  # [n, M, a]   Eq. 7.4
            logits = torch.einsum("na,nma->nm", q, k) / math.sqrt(self.attention_dim)  # Eq. 7.5
        return MoEOutput(expert_out, logits, expert_hidden, h_g)

    # ---- derived models --------------------------------------------------------------------
    def distilled_copy(self, random_state=0) -> "MoE":
        """A plain-router MoE with copies of these experts and of the gate body (Sec. 7.2.1).

        The attention matrices are dropped and a new router (output layer) is initialised from
        ``random_state``; the gate body is initialised from this model's gate body.
        """
        new = MoE(
            self.n_inputs, self.n_outputs, self.n_experts, task=self.task,
            expert_hidden=self.expert_hidden_sizes, gate_hidden=self.gate_hidden_sizes,
            gate_kind=self.router.kind, gate_tau=self.router.tau, gate_type="router",
            attention_dim=self.attention_dim, expert_bias=self.expert_bias, gate_bias=self.gate_bias,
            activation=self.activation, random_state=random_state,
            dtype=self.expert_weights[0].dtype,
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
        return self.expert_weights[0].detach().transpose(1, 2).clone()
