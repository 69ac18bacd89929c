"""``M`` expert MLPs evaluated together: one batched ``einsum`` per layer over stacked weights.

Every neural MoE of moestat uses this one module for its experts: the MoE layer of the thesis toy
tasks and of the real-data classifier (:class:`moestat.nn.layer.MoELayer`, all experts see the
same input) and the Soft MoE layer (:class:`moestat.nn.softmoe.SoftMoE`, every expert sees its own
slots, optionally only ``k`` experts per example).

Layer ``l`` of expert ``i`` is ``h -> act(h W_l[i] + b_l[i])`` with ``W_l`` of shape
``[M, in, out]`` and ``b_l`` of shape ``[M, out]``; the last layer has no activation.  With
``hidden=()`` the experts are affine (linear with ``bias=False``) maps.

Initialisation is PyTorch's ``nn.Linear`` rule, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights
and biases alike, drawn from a ``torch.Generator`` (never the global seed).  ``init_order`` says in
which order the tensors are drawn: ``"layerwise"`` (``W_1, b_1, W_2, b_2, ...``, the MoE layer) or
``"weights_first"`` (``W_1, W_2, ..., b_1, b_2, ...``, Soft MoE).  Both orders are kept so that a
seed gives the same initial weights as it did before the three network stacks were merged.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from moestat.model.experts import activation_fn

__all__ = ["ExpertMLP", "INIT_ORDERS"]

INIT_ORDERS = ("layerwise", "weights_first")


class ExpertMLP(nn.Module):
    """``M`` MLPs ``R^in -> R^out`` with stacked weights ``[M, in, out]``.

    Parameters
    ----------
    n_experts : int
        Number of experts ``M``.
    n_inputs, n_outputs : int
        Input and output dimension of every expert.
    hidden : sequence of int
        Hidden widths (``()``: one affine layer).
    bias : bool
        Learn a bias in every layer.
    activation : str
        Hidden activation, one of :data:`moestat.model.experts.ACTIVATIONS`.
    generator : torch.Generator
        Source of the initial weights.
    init_order : {"layerwise", "weights_first"}
        Order in which the tensors are drawn from ``generator`` (module docstring).
    dtype : torch.dtype

    Examples
    --------
    >>> import torch
    >>> e = ExpertMLP(3, 2, 5, hidden=(4,), generator=torch.Generator().manual_seed(0))
    >>> e(torch.zeros(7, 2)).shape
    torch.Size([7, 3, 5])
    >>> e.per_expert(torch.zeros(7, 3, 1, 2)).shape
    torch.Size([7, 3, 1, 5])
    """

    def __init__(self, n_experts: int, n_inputs: int, n_outputs: int, hidden: Sequence[int] = (), *,
                 bias: bool = True, activation: str = "relu", generator: torch.Generator | None = None,
                 init_order: str = "layerwise", dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        hidden = tuple(int(h) for h in hidden)
        for name, v in (("n_experts", n_experts), ("n_inputs", n_inputs), ("n_outputs", n_outputs)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if any(h < 1 for h in hidden):
            raise ValueError(f"hidden widths must be positive integers, got {hidden!r}")
        if init_order not in INIT_ORDERS:
            raise ValueError(f"init_order must be one of {INIT_ORDERS}, got {init_order!r}")
        self._act = activation_fn(activation)  # raises on an unknown name
        self.n_experts, self.n_inputs, self.n_outputs = int(n_experts), int(n_inputs), int(n_outputs)
        self.hidden_sizes, self.activation, self.bias = hidden, activation, bool(bias)
        widths = (self.n_inputs,) + hidden + (self.n_outputs,)
        shapes = list(zip(widths[:-1], widths[1:]))
        g = generator if generator is not None else torch.Generator().manual_seed(0)

        def draw(shape, fan_in):
            bound = 1.0 / math.sqrt(fan_in)
            return nn.Parameter((torch.rand(shape, generator=g, dtype=dtype) * 2.0 - 1.0) * bound)

        M = self.n_experts
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        if init_order == "layerwise":
            for a, b in shapes:
                self.weights.append(draw((M, a, b), a))
                if self.bias:
                    self.biases.append(draw((M, b), a))
        else:
            for a, b in shapes:
                self.weights.append(draw((M, a, b), a))
            if self.bias:
                for a, b in shapes:
                    self.biases.append(draw((M, b), a))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every expert on the same inputs: ``[n, in] -> [n, M, out]``."""
        return self.forward_with_hidden(x)[0]

    def forward_with_hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(out [n, M, out], last hidden layer [n, M, h])``; the hidden layer is ``out`` itself
        for affine experts (the attention key of the attentive gate)."""
        n_layers = len(self.weights)
        hidden = None
        # the first layer contracts the shared input once ([n, in] x [M, in, h]) instead of
        # copying it per expert
        h = torch.einsum("ni,mio->nmo", x, self.weights[0])
        for i in range(n_layers):
            if i > 0:
                h = torch.einsum("nmi,mio->nmo", h, self.weights[i])
            if self.bias:
                h = h + self.biases[i]
            if i < n_layers - 1:
                h = self._act(h)
                hidden = h
        return h, (h if hidden is None else hidden)

    def per_expert(self, x: torch.Tensor, experts_idx: torch.Tensor | None = None) -> torch.Tensor:
        """Every expert on its own inputs (Soft MoE slots).

        Parameters
        ----------
        x : Tensor, shape ``[b, M, p, in]`` or, with ``experts_idx``, ``[b, k, p, in]``
            Row ``(j, s)`` is fed to expert ``j`` (or to expert ``experts_idx[:, j]``).
        experts_idx : LongTensor, shape ``[b, k]``, optional
            Per-example expert indices: only these ``k`` experts are evaluated.

        Returns
        -------
        Tensor, shape ``[b, M or k, p, out]``
        """
        n_layers = len(self.weights)
        h = x
        for i in range(n_layers):
            if experts_idx is None:
                # shared weights: M matrix products [b p, in] x [in, out] (no per-example copy)
                h = torch.einsum("bjpd,jdh->bjph", h, self.weights[i])
                if self.bias:
                    h = h + self.biases[i][None, :, None, :]
            else:
                h = torch.einsum("bjpd,bjdh->bjph", h, self.weights[i][experts_idx])
                if self.bias:
                    h = h + self.biases[i][experts_idx].unsqueeze(2)
            if i < n_layers - 1:
                h = self._act(h)
        return h

    def n_weights(self, bias: bool = False) -> int:
        """Number of expert parameters: weights only (how the Soft MoE paper counts), or with biases."""
        total = sum(w.numel() for w in self.weights)
        if bias:
            total += sum(b.numel() for b in self.biases)
        return int(total)

    def extra_repr(self) -> str:
        return (f"n_experts={self.n_experts}, n_inputs={self.n_inputs}, n_outputs={self.n_outputs}, "
                f"hidden={self.hidden_sizes}, bias={self.bias}, activation={self.activation}")
