"""A small decoder-only, character-level Transformer whose feed-forward layers are MoE layers.

The backbone is the pre-LayerNorm GPT block (causal multi-head self-attention, then a
feed-forward layer, each inside a residual branch); every feed-forward layer is a Mixture of
Experts as in the Switch Transformer (Fedus et al. 2022) and X-MoE (Chi et al. 2022): a token
router of :mod:`moestat.nn.lm_routers` picks ``k`` of ``M`` two-layer experts and mixes their
outputs with the renormalised top-k weights.

The experts are one :class:`moestat.nn.expert_mlp.ExpertMLP` (``d -> h -> d``, GELU) per layer,
the batched expert MLP of :class:`moestat.nn.layer.MoELayer`; the layer itself is not reused
because its gate head takes only the classifier routers of :mod:`moestat.nn.routers`, not the
projected cosine routers of the language model.  Every expert is evaluated on every token and the
unselected ones get weight 0 (exact top-k output; the dense evaluation costs ``M / k`` times the
sparse FLOPs, the price of no dispatch code at the CPU sizes this package trains).

Parameters are drawn from one ``torch.Generator`` (:func:`moestat.seeding.torch_generator`):
linear and embedding weights ``N(0, 0.02^2)`` (GPT-2), biases 0, LayerNorm weights 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from moestat.nn.expert_mlp import ExpertMLP
from moestat.nn.lm_routers import LMRouter, RoutedTokens
from moestat.seeding import torch_generator

__all__ = ["LMConfig", "MoEFeedForward", "MoETransformerLM", "LMOutput"]


@dataclass
class LMConfig:
    """Size and routing of :class:`MoETransformerLM`.

    Attributes
    ----------
    vocab_size, context : int
        Number of symbols and the maximum sequence length ``T``.
    d_model, n_layers, n_heads : int
        Width, depth (every layer has an MoE feed-forward) and attention heads.
    n_experts, k, expert_hidden : int
        Experts per layer ``M``, experts per token, hidden width of each expert.
    router : {"linear", "cosine", "perturbed"}
    router_dim, temperature, tau, balance_coef
        See :class:`moestat.nn.lm_routers.LMRouter`.
    dropout : float
        Dropout on attention weights and residual branches.
    """

    vocab_size: int = 256
    context: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_experts: int = 4
    k: int = 2
    expert_hidden: int = 128
    router: str = "linear"
    router_dim: int = 8
    temperature: float = 0.3
    tau: float = 0.1
    balance_coef: float = 0.01
    dropout: float = 0.0
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "d_model", "n_layers", "n_heads", "n_experts", "k", "expert_hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")


@dataclass
class LMOutput:
    """Forward quantities of :class:`MoETransformerLM` for ``x`` of shape ``[B, T]``.

    Attributes
    ----------
    logits : Tensor, shape ``[B, T, V]``
        Next-symbol logits.
    aux_loss : Tensor, scalar
        Sum over layers of the routers' balance losses.
    routing : list of RoutedTokens
        One per layer, over the ``B T`` tokens (``[B T, M]`` tensors).
    """

    logits: torch.Tensor
    aux_loss: torch.Tensor
    routing: list


class MoEFeedForward(nn.Module):
    """Router x ``M`` GELU experts ``d -> h -> d``: ``[n, d] -> ([n, d], RoutedTokens)``."""

    def __init__(self, cfg: LMConfig, gen: torch.Generator) -> None:
        super().__init__()
        self.router = LMRouter(cfg.d_model, cfg.n_experts, cfg.k, kind=cfg.router, router_dim=cfg.router_dim,
                               temperature=cfg.temperature, tau=cfg.tau, balance_coef=cfg.balance_coef,
                               random_state=gen)
        self.experts = ExpertMLP(cfg.n_experts, cfg.d_model, cfg.d_model, (cfg.expert_hidden,), activation="gelu",
                                 generator=gen)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, RoutedTokens]:
        r = self.router(x)
        out = torch.einsum("nm,nmd->nd", r.weights, self.experts(x))
        return out, r


class _Block(nn.Module):
    def __init__(self, cfg: LMConfig, gen: torch.Generator) -> None:
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ffn = MoEFeedForward(cfg, gen)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, RoutedTokens]:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, D)))
        h, r = self.ffn(self.ln2(x).reshape(B * T, D))
        return x + self.drop(h.view(B, T, D)), r


class MoETransformerLM(nn.Module):
    """Decoder-only character-level MoE Transformer; see the module docstring.

    Parameters
    ----------
    cfg : LMConfig
    random_state : int, SeedSequence or torch.Generator
        Initialisation seed.

    Examples
    --------
    >>> m = MoETransformerLM(LMConfig(vocab_size=10, context=8, d_model=16, n_heads=2), random_state=0)
    >>> out = m(torch.zeros(3, 8, dtype=torch.long))
    >>> tuple(out.logits.shape), len(out.routing), tuple(out.routing[0].weights.shape)
    ((3, 8, 10), 2, (24, 4))
    """

    def __init__(self, cfg: LMConfig, random_state=0) -> None:
        super().__init__()
        self.cfg = cfg
        gen = torch_generator(random_state)
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList([_Block(cfg, gen) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.drop = nn.Dropout(cfg.dropout)
        # the routers and experts drew their own parameters from gen; the rest is redrawn here so that
        # nothing depends on torch's global generator
        with torch.no_grad():
            for mod in self.modules():
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * 0.02)
                    if getattr(mod, "bias", None) is not None:
                        mod.bias.zero_()

    def n_parameters(self) -> int:
        """Number of trainable parameters (all experts counted)."""
        return int(sum(p.numel() for p in self.parameters()))

    def forward(self, x: torch.Tensor) -> LMOutput:  # noqa: D401 - nn.Module API
        """Logits and routing of a batch of symbol ids ``x`` ``[B, T]`` (``T <= context``)."""
        if x.ndim != 2 or x.shape[1] > self.cfg.context:
            raise ValueError(f"x must have shape [B, T] with T <= {self.cfg.context}, got {tuple(x.shape)}")
        T = x.shape[1]
        h = self.drop(self.tok(x) + self.pos(torch.arange(T, device=x.device)))
        routing, aux = [], h.new_zeros(())
        for blk in self.blocks:
            h, r = blk(h)
            routing.append(r)
            aux = aux + r.aux_loss
        return LMOutput(self.head(self.ln_f(h)), aux, routing)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, LMOutput]:
        """``(cross-entropy in nats, cross-entropy + balance loss, output)`` of targets ``y`` ``[B, T]``."""
        out = self(x)
        ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1))
        return ce, ce + out.aux_loss, out
