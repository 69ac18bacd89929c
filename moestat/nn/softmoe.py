"""Soft Mixture of Experts (Puigcerver et al. 2024) as defined in the Soft MoE implicit-bias paper (2024), Definition 1.

For an input ``X`` of ``m`` tokens in ``R^d`` and a router ``Phi`` with one column per slot,
both weight matrices come from the same logits ``L = X Phi`` (the paper, eq. 1):

- dispatch ``D = softmax(L)`` over **tokens** (each column of ``D`` sums to 1), so slot ``s``
  is the convex combination ``(D^T X)_s`` of the tokens;
- combine ``C = softmax(L)`` over **slots** (each row of ``C`` sums to 1);
- expert ``j`` is applied to its ``p`` slots, giving ``Ytilde`` (one row per slot), and the layer
  returns ``C Ytilde`` with the input's shape ``m x d``.

With one expert and one slot, ``C`` is the all-ones column and every output row equals
``f(D^T X)``: one expert applied to one softmax-weighted average of the tokens.  Theorem 1 of
the paper rests on exactly this collapse.

The router is stored in the package's gate vocabulary (:mod:`moestat.model.gates`): ``router_weight``
has one row per slot (``beta1``, shape ``[n * p, d]``) and the logits are
``gate_scores(X, router_weight, "linear")``.  The optional Puigcerver normalisation (off by
default, as in the paper) uses the ``cosine`` score times a learned scale.

Experts are two-layer MLPs ``d -> h -> d`` whose hidden width follows a total-parameter budget
(:func:`budget_hidden_width`): ``h = factor * d / n`` keeps the expert weight count
``2 * n * d * h = 2 * factor * d^2`` fixed across ``n`` (``factor = 10`` in the paper's Appendix B,
``4`` for its MNIST models).  The ``n`` experts are one :class:`~moestat.nn.expert_mlp.ExpertMLP` (stacked
weights), so that a forward pass over all experts, or over a per-example subset of ``k`` experts
(Algorithm 1), is a single batched ``einsum``.

Three small models wrap the layer: :class:`SoftMoERegressor` (the ``||X||`` experiment,
Appendix B), :class:`SoftMoEClassifier` (patch tokens, the paper's MNIST model) and
:class:`ConvSoftMoEClassifier` (conv stem -> 9 tokens -> LayerNorm -> Soft MoE without residual,
after the paper's CIFAR-10 model).  All three have linear (or summation) heads, so the output of
any expert subset is a sum of per-expert contributions (``expert_contributions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from moestat.model.gates import gate_scores
from moestat.nn.expert_mlp import ExpertMLP
from moestat.seeding import torch_generator

__all__ = [
    "budget_hidden_width",
    "expert_param_count",
    "parse_tokenisation",
    "tokenize_vector",
    "patch_tokenize",
    "SoftMoE",
    "SoftMoEOutput",
    "SoftMoERegressor",
    "SoftMoEClassifier",
    "ConvSoftMoEClassifier",
]


# --------------------------------------------------------------------------------------------
# parameter budget and tokenisation
# --------------------------------------------------------------------------------------------


def budget_hidden_width(d: int, n_experts: int, factor: float = 10.0, rounding: str = "round", min_width: int = 1) -> int:
    """Hidden width of each expert MLP under a fixed total expert budget.

    ``h = factor * d / n`` (the paper Appendix B uses ``factor = 10``; MNIST uses ``4``), so the
    total expert weight count ``2 n d h = 2 factor d^2`` does not depend on ``n`` whenever
    ``factor * d / n`` is an integer.  Otherwise it is rounded (the paper's MNIST widths
    ``784 / n`` are not integers for ``n >= 32``; it does not say how it rounded).

    Parameters
    ----------
    d : int
        Token dimension (expert input and output size).
    n_experts : int
        Number of experts ``n``.
    factor : float
        Budget factor ``c`` in ``h = c d / n``.
    rounding : {"round", "floor", "ceil"}
        Rounding policy for a non-integer width.
    min_width : int
        Smallest width returned.

    Returns
    -------
    int
        The hidden width.

    Examples
    --------
    >>> [budget_hidden_width(2, n) for n in (1, 2, 5, 10)]
    [20, 10, 4, 2]
    """
    if int(d) < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if int(n_experts) < 1:
        raise ValueError(f"n_experts must be a positive integer, got {n_experts!r}")
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"factor must be a positive finite number, got {factor!r}")
    raw = factor * d / n_experts
    if rounding == "round":
        h = int(math.floor(raw + 0.5))
    elif rounding == "floor":
        h = int(math.floor(raw + 1e-9))
    elif rounding == "ceil":
        h = int(math.ceil(raw - 1e-9))
    else:
        raise ValueError(f"rounding must be 'round', 'floor' or 'ceil', got {rounding!r}")
    return max(int(min_width), h)


def expert_param_count(d: int, hidden: int, n_experts: int, bias: bool = False) -> int:
    """Total parameter count of ``n`` expert MLPs ``d -> hidden -> d``.

    Parameters
    ----------
    d, hidden, n_experts : int
        Token dimension, hidden width, number of experts.
    bias : bool
        Count the biases too (the paper counts weights only: ``20 d^2`` in Appendix B).

    Returns
    -------
    int

    Examples
    --------
    >>> expert_param_count(2, budget_hidden_width(2, 5), 5)
    80
    """
    w = 2 * d * hidden
    if bias:
        w += hidden + d
    return int(n_experts * w)


def parse_tokenisation(spec: str) -> tuple[int, int]:
    """Parse ``"5x2"`` into ``(m, d)`` = (number of tokens, token dimension).

    Parameters
    ----------
    spec : str
        ``"<m>x<d>"`` with positive integers.

    Returns
    -------
    (int, int)
    """
    parts = str(spec).lower().split("x")
    try:
        m, d = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"tokens must look like '5x2' (tokens x dimension), got {spec!r}") from None
    if m < 1 or d < 1:
        raise ValueError(f"tokens must be positive, got {spec!r}")
    return m, d


def tokenize_vector(x: torch.Tensor, m: int, d: int) -> torch.Tensor:
    """Split vectors of length ``m * d`` into ``m`` tokens of dimension ``d`` in index order.

    Token ``i`` holds coordinates ``i d, ..., (i + 1) d - 1`` (a row-major reshape; the paper
    Appendix B splits ``R^10`` into ``5 x 2`` or ``2 x 5`` this way).

    Parameters
    ----------
    x : Tensor, shape ``[..., m * d]``
    m, d : int

    Returns
    -------
    Tensor, shape ``[..., m, d]``

    Examples
    --------
    >>> tokenize_vector(torch.arange(6.0), 3, 2).tolist()
    [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    if x.shape[-1] != m * d:
        raise ValueError(f"x has {x.shape[-1]} features but the tokenisation {m}x{d} needs {m * d}")
    return x.reshape(*x.shape[:-1], m, d)


def patch_tokenize(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut ``[b, H, W]`` images into non-overlapping ``patch x patch`` tokens in raster order.

    The Soft MoE implicit-bias paper (2024) cuts 28x28 MNIST into four 14x14 patches (``X`` in ``R^{4 x 196}``).

    Parameters
    ----------
    images : Tensor, shape ``[b, H, W]``
    patch : int
        Patch side; must divide ``H`` and ``W``.

    Returns
    -------
    Tensor, shape ``[b, (H / patch) * (W / patch), patch * patch]``
    """
    if images.dim() != 3:
        raise ValueError(f"images must have shape [b, H, W], got {tuple(images.shape)}")
    b, H, W = images.shape
    if patch < 1 or H % patch or W % patch:
        raise ValueError(f"patch={patch} must divide the image size {H}x{W}")
    t = images.reshape(b, H // patch, patch, W // patch, patch).permute(0, 1, 3, 2, 4)
    return t.reshape(b, (H // patch) * (W // patch), patch * patch)


# --------------------------------------------------------------------------------------------
# the layer
# --------------------------------------------------------------------------------------------


@dataclass
class SoftMoEOutput:
    """Everything one Soft MoE forward pass computes (shapes for a batch of ``b``).

    Attributes
    ----------
    output : Tensor ``[b, m, d]``
        ``C Yhat``.
    logits : Tensor ``[b, m, n * p]``
        ``X Phi``.
    dispatch : Tensor ``[b, m, n * p]``
        ``D``, softmax over tokens (dim 1).  With ``experts_idx`` only the kept slots' columns
        are computed and the other columns are 0.
    combine : Tensor ``[b, m, n * p]``
        ``C``, softmax over slots (dim 2).
    slots : Tensor ``[b, n, p, d]``
        ``D^T X`` grouped by expert (zero for experts not evaluated).
    expert_outputs : Tensor ``[b, n, p, d]``
        ``Yhat``: ``Ytilde`` with the rows of dropped experts set to zero.
    kept : BoolTensor ``[b, n]``
        Which experts were kept.
    """

    output: torch.Tensor
    logits: torch.Tensor
    dispatch: torch.Tensor
    combine: torch.Tensor
    slots: torch.Tensor
    expert_outputs: torch.Tensor
    kept: torch.Tensor


class SoftMoE(nn.Module):
    """Soft MoE layer (the paper, Definition 1), batched and device-aware.

    Parameters
    ----------
    d : int
        Token dimension.
    n_experts : int
        Number of experts ``n``.
    slots_per_expert : int
        ``p`` (the paper uses 1 throughout; Puigcerver et al. allow more).
    hidden : int, optional
        Expert hidden width; by default :func:`budget_hidden_width` ``(d, n, budget_factor)``.
    budget_factor : float
        ``c`` in ``hidden = c d / n``.
    activation : str
        Expert activation.
    expert_bias : bool
        Biases inside the experts.
    normalize : bool
        Puigcerver et al.'s l2 normalisation of tokens and router columns with a learned scale
        (cosine score); off by default, as in the paper (with it Theorem 1 does not apply).
    random_state : int or torch.Generator
        Seed of the initial weights.  The router starts at ``N(0, 1/d)``.

    Examples
    --------
    >>> layer = SoftMoE(d=2, n_experts=5, random_state=0)
    >>> layer(torch.zeros(3, 5, 2)).shape
    torch.Size([3, 5, 2])
    """

    def __init__(self, d: int, n_experts: int, slots_per_expert: int = 1, hidden: int | None = None,
                 budget_factor: float = 10.0, activation: str = "relu", expert_bias: bool = True,
                 normalize: bool = False, random_state: int | torch.Generator = 0,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if int(slots_per_expert) < 1:
            raise ValueError(f"slots_per_expert must be a positive integer, got {slots_per_expert!r}")
        g = torch_generator(random_state)
        self.d, self.n_experts, self.slots_per_expert = int(d), int(n_experts), int(slots_per_expert)
        if hidden is None:
            hidden = budget_hidden_width(self.d, self.n_experts, budget_factor)
        self.normalize = bool(normalize)
        # beta1 layout of moestat.model.gates: one row per slot, slot s = j * p + t belongs to expert j
        self.router_weight = nn.Parameter(torch.randn(self.n_experts * self.slots_per_expert, self.d,
                                                      generator=g, dtype=dtype) / math.sqrt(self.d))
        if self.normalize:
            self.scale = nn.Parameter(torch.ones((), dtype=dtype))
        else:
            self.register_parameter("scale", None)
        self.hidden = int(hidden)
        # n MLPs d -> hidden -> d; the weights are drawn before the biases (the order of the
        # original Soft MoE module, so seeds reproduce its initial weights)
        self.experts = ExpertMLP(self.n_experts, self.d, self.d, (self.hidden,), bias=expert_bias, activation=activation,
                                 generator=g, init_order="weights_first", dtype=dtype)

    @property
    def n_slots(self) -> int:
        """``n * p``."""
        return self.n_experts * self.slots_per_expert

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """``X Phi`` (or the scaled cosine score when ``normalize``), shape ``[b, m, n * p]``."""
        if self.normalize:
            return self.scale * gate_scores(x, self.router_weight, "cosine")
        return gate_scores(x, self.router_weight, "linear")

    def combine_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``C(X)``: softmax of the logits over slots, shape ``[b, m, n * p]`` (rows sum to 1)."""
        return torch.softmax(self.router_logits(self._check(x)), dim=-1)

    def dispatch_weights(self, x: torch.Tensor) -> torch.Tensor:
        """``D(X)``: softmax of the logits over tokens, shape ``[b, m, n * p]`` (columns sum to 1)."""
        return torch.softmax(self.router_logits(self._check(x)), dim=-2)

    def _check(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.d:
            raise ValueError(f"x must have shape [batch, tokens, {self.d}], got {tuple(x.shape)}")
        return x

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None, experts_idx: torch.Tensor | None = None,
                return_details: bool = False):
        """Soft MoE forward pass, optionally with a per-example subset of experts.

        Parameters
        ----------
        x : Tensor, shape ``[b, m, d]``
        keep : BoolTensor, shape ``[b, n]`` or ``[n]``, optional
            Experts to keep; all experts are evaluated and the rows of the others are zeroed
            (the paper Section 4.1).  ``C`` is **not** renormalised.
        experts_idx : LongTensor, shape ``[b, k]``, optional
            Distinct expert indices per example; only these ``k`` experts (and their dispatch
            columns) are computed, which is what saves compute in Algorithm 1.  Same result as
            the corresponding ``keep`` mask.
        return_details : bool
            Return a :class:`SoftMoEOutput` instead of the output tensor.

        Returns
        -------
        Tensor ``[b, m, d]`` or SoftMoEOutput
        """
        x = self._check(x)
        if keep is not None and experts_idx is not None:
            raise ValueError("pass at most one of keep and experts_idx")
        b, m, _ = x.shape
        n, p = self.n_experts, self.slots_per_expert
        logits = self.router_logits(x)
        combine = torch.softmax(logits, dim=-1)
        if experts_idx is None:
            dispatch = torch.softmax(logits, dim=-2)
            slots = (dispatch.transpose(1, 2) @ x).reshape(b, n, p, self.d)
            y = self.experts.per_expert(slots)
            if keep is None:
                kept = torch.ones(b, n, dtype=torch.bool, device=x.device)
            else:
                kept = torch.as_tensor(keep, device=x.device).to(torch.bool).expand(b, n)
                y = y * kept[:, :, None, None].to(y.dtype)
        else:
            experts_idx = torch.as_tensor(experts_idx, device=x.device).long()
            if experts_idx.dim() != 2 or experts_idx.shape[0] != b:
                raise ValueError(f"experts_idx must have shape [{b}, k], got {tuple(experts_idx.shape)}")
            if experts_idx.numel() and (experts_idx.min() < 0 or experts_idx.max() >= n):
                raise ValueError(f"experts_idx must lie in [0, {n})")
            k = experts_idx.shape[1]
            # slot columns of the kept experts: dispatch only needs these (column s of D depends
            # only on column s of X Phi), O(m d k p) instead of O(m d n p)
            cols = (experts_idx[:, :, None] * p + torch.arange(p, device=x.device)).reshape(b, k * p)
            sel_logits = logits.gather(2, cols[:, None, :].expand(b, m, k * p))
            sel_dispatch = torch.softmax(sel_logits, dim=-2)
            sel_slots = (sel_dispatch.transpose(1, 2) @ x).reshape(b, k, p, self.d)
            sel_y = self.experts.per_expert(sel_slots, experts_idx)
            y = x.new_zeros(b, n, p, self.d)
            y = y.scatter(1, experts_idx[:, :, None, None].expand(b, k, p, self.d), sel_y)
            slots = x.new_zeros(b, n, p, self.d).scatter(1, experts_idx[:, :, None, None].expand(b, k, p, self.d), sel_slots)
            dispatch = x.new_zeros(b, m, n * p).scatter(2, cols[:, None, :].expand(b, m, k * p), sel_dispatch)
            kept = torch.zeros(b, n, dtype=torch.bool, device=x.device).scatter(1, experts_idx, True)
        out = combine @ y.reshape(b, n * p, self.d)
        if return_details:
            return SoftMoEOutput(out, logits, dispatch, combine, slots, y, kept)
        return out

    def expert_contributions(self, x: torch.Tensor) -> torch.Tensor:
        """Per-expert additive parts of the output: ``out = sum_j contrib[:, j]``.

        ``contrib[:, j] = C[:, :, slots of j] Ytilde[slots of j]``; the output of any subset ``S``
        of experts (rows of the others zeroed, no renormalisation) is ``sum_{j in S} contrib[:, j]``.

        Returns
        -------
        Tensor, shape ``[b, n, m, d]``
        """
        det = self.forward(x, return_details=True)
        b, m, _ = x.shape
        C = det.combine.reshape(b, m, self.n_experts, self.slots_per_expert)
        return torch.einsum("bmjp,bjpd->bjmd", C, det.expert_outputs)


# --------------------------------------------------------------------------------------------
# small models: the ||X|| regressor (Appendix B), a patch classifier (Section 4.2) and a conv-stem
# classifier (an analogue of the CIFAR-10 model of Appendix D.2)
# --------------------------------------------------------------------------------------------


class SoftMoERegressor(nn.Module):
    """Tokeniser -> Soft MoE -> non-trainable summation head (the paper Appendix B).

    The prediction for ``x`` in ``R^{m d}`` is the sum of all ``m d`` entries of the layer's
    output; there is no residual connection and nothing else is trained.

    Parameters
    ----------
    m, d : int
        Tokenisation: ``m`` tokens of dimension ``d``.
    n_experts : int
    budget_factor : float
        Expert width ``budget_factor * d / n`` (10 in the paper).
    **layer_kwargs
        Passed to :class:`SoftMoE`.
    """

    def __init__(self, m: int, d: int, n_experts: int, budget_factor: float = 10.0, **layer_kwargs) -> None:
        super().__init__()
        self.m, self.d = int(m), int(d)
        self.layer = SoftMoE(d, n_experts, budget_factor=budget_factor, **layer_kwargs)

    @property
    def n_experts(self) -> int:
        """Number of experts."""
        return self.layer.n_experts

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``[b, m d] -> [b, m, d]``."""
        return tokenize_vector(x, self.m, self.d)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None, experts_idx: torch.Tensor | None = None) -> torch.Tensor:
        """Prediction ``[b]`` for inputs ``[b, m d]``."""
        return self.layer(self.tokens(x), keep=keep, experts_idx=experts_idx).sum(dim=(1, 2))

    def expert_contributions(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(contrib [b, n, 1], bias [1])`` with prediction ``bias + sum_{j in S} contrib[:, j]``."""
        c = self.layer.expert_contributions(self.tokens(x)).sum(dim=(2, 3))
        return c.unsqueeze(-1), x.new_zeros(1)


class SoftMoEClassifier(nn.Module):
    """Tokens -> Soft MoE -> flatten -> linear head (the paper Section 4.2 MNIST model).

    Parameters
    ----------
    m, d : int
        ``m`` tokens (patches) of dimension ``d``.
    n_experts : int
    n_classes : int
    budget_factor : float
        Expert width ``budget_factor * d / n`` (4 for the paper's MNIST models).
    random_state : int or torch.Generator
        Seed (or generator) for the layer and the head.
    **layer_kwargs
        Passed to :class:`SoftMoE`.
    """

    def __init__(self, m: int, d: int, n_experts: int, n_classes: int, budget_factor: float = 4.0,
                 random_state: int | torch.Generator = 0, **layer_kwargs) -> None:
        super().__init__()
        self.m, self.d, self.n_classes = int(m), int(d), int(n_classes)
        g = torch_generator(random_state)
        self.layer = SoftMoE(d, n_experts, budget_factor=budget_factor, random_state=g, **layer_kwargs)
        self.head = nn.Linear(m * d, n_classes)
        bound = 1 / math.sqrt(m * d)
        with torch.no_grad():
            self.head.weight.uniform_(-bound, bound, generator=g)
            self.head.bias.uniform_(-bound, bound, generator=g)

    @property
    def n_experts(self) -> int:
        """Number of experts."""
        return self.layer.n_experts

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The Soft MoE layer's input: the patch tokens ``[b, m, d]`` themselves."""
        return x

    def readout(self, out: torch.Tensor) -> torch.Tensor:
        """Linear head on the flattened layer output ``[b, m, d] -> [b, n_classes]``."""
        return self.head(out.flatten(1))

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None, experts_idx: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[b, n_classes]``; ``keep`` / ``experts_idx`` select experts as in :meth:`SoftMoE.forward`."""
        return self.readout(self.layer(self.tokens(x), keep=keep, experts_idx=experts_idx))

    def expert_contributions(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(contrib [b, n, classes], bias [classes])``; logits of subset ``S`` are
        ``bias + sum_{j in S} contrib[:, j]`` because the head is linear."""
        c = self.layer.expert_contributions(self.tokens(x))  # [b, n, m, d]
        return c.flatten(2) @ self.head.weight.T, self.head.bias


class ConvSoftMoEClassifier(SoftMoEClassifier):
    """Conv stem -> tokens -> LayerNorm -> Soft MoE (no residual) -> flatten -> linear head.

    A small analogue of the paper's CIFAR-10 model (Appendix D.2): there a convolutional backbone
    turns each image into a ``3 x 3`` grid of 768-channel features, i.e. 9 tokens, which go through
    pre-norm transformer blocks whose FFNs are replaced by Soft MoE layers **without** the residual
    connection around them.  Here the stem is ``len(channels)`` convolutions ``3 x 3`` (padding 1,
    ReLU) followed by adaptive average pooling to a ``grid x grid`` map, whose cells are the
    ``m = grid^2`` tokens of dimension ``d = channels[-1]``; a LayerNorm over the channels (the
    pre-norm of the transformer block, ``token_norm=True``) feeds one :class:`SoftMoE` layer, and
    its output is flattened into a linear head.  There is no attention block.

    The head is linear in the layer's output, so the logits of any expert subset are sums of
    per-expert contributions (:meth:`expert_contributions`), as for :class:`SoftMoEClassifier`.

    Parameters
    ----------
    n_experts : int
    n_classes : int
    in_channels : int
        Image channels (1 for digits and Fashion-MNIST); inputs ``[b, H, W]`` are read as one channel.
    channels : sequence of int
        Output channels of the stem convolutions; the last one is the token dimension ``d``.
    grid : int
        Side of the pooled feature map: ``m = grid^2`` tokens.
    budget_factor : float
        Expert width ``budget_factor * d / n`` (:func:`budget_hidden_width`): the expert weight
        count ``2 * budget_factor * d^2`` does not depend on ``n``.
    token_norm : bool
        LayerNorm (with affine parameters) on the tokens before the Soft MoE layer.
    random_state : int or torch.Generator
        Seed of every initial weight (stem, layer, head).
    **layer_kwargs
        Passed to :class:`SoftMoE` (e.g. ``normalize``, ``slots_per_expert``).

    Examples
    --------
    >>> model = ConvSoftMoEClassifier(n_experts=8, n_classes=10, random_state=0)
    >>> model.tokens(torch.zeros(2, 8, 8)).shape
    torch.Size([2, 9, 64])
    >>> model(torch.zeros(2, 8, 8)).shape
    torch.Size([2, 10])
    """

    def __init__(self, n_experts: int, n_classes: int, in_channels: int = 1, channels: tuple[int, ...] = (32, 64),
                 grid: int = 3, budget_factor: float = 4.0, token_norm: bool = True,
                 random_state: int | torch.Generator = 0, **layer_kwargs) -> None:
        channels = tuple(int(c) for c in channels)
        if not channels or min(channels) < 1:
            raise ValueError(f"channels must be a non-empty sequence of positive integers, got {channels!r}")
        for name, v in (("in_channels", in_channels), ("grid", grid), ("n_classes", n_classes)):
            if int(v) < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        g = torch_generator(random_state)
        # the stem draws first, then the layer and the head (the base class), all from ``g``
        convs, c_in = [], int(in_channels)
        for c_out in channels:
            conv = nn.Conv2d(c_in, c_out, 3, padding=1)
            bound = 1 / math.sqrt(c_in * 9)  # nn.Conv2d's default bound, drawn from our generator
            with torch.no_grad():
                conv.weight.uniform_(-bound, bound, generator=g)
                conv.bias.uniform_(-bound, bound, generator=g)
            convs += [conv, nn.ReLU()]
            c_in = c_out
        super().__init__(int(grid) ** 2, channels[-1], n_experts, n_classes, budget_factor, random_state=g, **layer_kwargs)
        self.in_channels, self.grid = int(in_channels), int(grid)
        self.stem = nn.Sequential(*convs, nn.AdaptiveAvgPool2d(self.grid))
        self.token_norm = nn.LayerNorm(self.d) if token_norm else nn.Identity()

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The Soft MoE layer's input: ``[b, H, W]`` or ``[b, C, H, W]`` images -> ``[b, grid^2, d]``.

        Tokens are the cells of the pooled feature map in raster order, after the LayerNorm.
        """
        if not isinstance(images, torch.Tensor):
            raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
        if images.dim() == 3 and self.in_channels == 1:
            images = images.unsqueeze(1)
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(f"images must have shape [b, {self.in_channels}, H, W]"
                             + (" or [b, H, W]" if self.in_channels == 1 else "") + f", got {tuple(images.shape)}")
        f = self.stem(images)  # [b, d, grid, grid]
        return self.token_norm(f.flatten(2).transpose(1, 2))
