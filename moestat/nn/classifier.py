"""MoE image classifier with pluggable routers, a parameter-matched plain MLP, and training.

Model (:class:`MoEClassifier`)::

    x ─▶ [shared feature extractor: Linear + ReLU, optional] ─▶ h
    h ─▶ gate: [Linear + ReLU, optional] ─▶ router (moestat.nn.routers) ─▶ weights w [n, M]
    h ─▶ expert i: Linear(d, hidden) + ReLU + Linear(hidden, C) ─▶ logits o_i [n, C]

and, following Krishnamurthy (2023), two ways of combining the experts:

- ``combine="probs"`` (default): the *output mixture* ``p(y|x) = sum_i w_i softmax(o_i)_y``
  (thesis Eq. 2.1, Jacobs et al. 1991b), computed as a log-sum-exp;
- ``combine="logits"``: the *pre-softmax* model ``softmax(sum_i w_i o_i)`` (thesis Eq. 2.9).

and two training methods (thesis Ch. 2):

- ``method="mixture"``: loss ``-log p(y|x)`` of the combined output (Eq. 2.2/2.8);
- ``method="stochastic"``: expected expert loss ``sum_i w_i l(y, o_i)`` (Eq. 2.5), inference
  with the argmax-weight expert only (Eqs. 2.3-2.4).

Training (:func:`fit_classifier`) is the package's one loop, :func:`moestat.nn.train.fit`, with
Adam, validation after every epoch and the best epoch's weights kept.

All experts are evaluated densely and the router's zero weights remove the others: on a CPU the
batched ``einsum`` over the stacked expert weights is faster than a sparse dispatch for M = 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from moestat.nn import metrics
from moestat.model.gates import canonical_name
from moestat.nn.layer import MoELayer, MoEOutput
from moestat.nn.routers import LAYER_ROUTERS, NoisyTopKRouter
from moestat.nn.train import FitResult, ShuffledBatches, fit
from moestat.seeding import torch_generator
from moestat.nn.softmoe import SoftMoEClassifier, patch_tokenize

__all__ = [
    "CLASSIFIER_METHODS",
    "COMBINES",
    "ClassifierOutput",
    "MoEClassifier",
    "MLPClassifier",
    "SoftMoEImageClassifier",
    "count_parameters",
    "matched_mlp_hidden",
    "FitResult",
    "fit_classifier",
    "evaluate_classifier",
]

#: Training rules of :class:`MoEClassifier` (the thesis methods are :data:`moestat.nn.methods.METHODS`).
CLASSIFIER_METHODS = ("mixture", "stochastic")
COMBINES = ("probs", "logits")


def _uniform_(t: torch.Tensor, fan_in: int, gen: torch.Generator) -> None:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` from ``gen`` (nn.Linear's bias rule; weights use
    the same bound as ``kaiming_uniform_(a=sqrt(5))``)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    with torch.no_grad():
        t.copy_((torch.rand(t.shape, generator=gen, dtype=t.dtype) * 2 - 1) * bound)


def _init_linear(layer: nn.Linear, gen: torch.Generator) -> None:
    _uniform_(layer.weight, layer.in_features, gen)
    if layer.bias is not None:
        _uniform_(layer.bias, layer.in_features, gen)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


@dataclass
class ClassifierOutput:
    """Forward result of :class:`MoEClassifier` (and of the Soft MoE image classifier).

    Attributes
    ----------
    log_probs : Tensor, shape ``[n, C]``
        Log class probabilities of the model's prediction rule.
    moe : MoEOutput
        The MoE layer's quantities: expert logits ``expert_out`` ``[n, M, C]``, combine
        ``weights``, selection ``mask``, full ``probs`` and the balancing ``aux_loss``.
    """

    log_probs: torch.Tensor
    moe: MoEOutput

    @property
    def expert_logits(self) -> torch.Tensor:
        """Every expert's logits ``[n, M, C]``."""
        return self.moe.expert_out


class MoEClassifier(nn.Module):
    """Mixture-of-experts classifier: an optional shared extractor, then one :class:`MoELayer`
    with MLP experts, an MLP gate body and a router of :mod:`moestat.nn.routers`.

    Parameters
    ----------
    in_features : int
        Input dimension (784 for 28x28 images).
    n_classes : int
        Number of classes ``C``.
    n_experts : int
        ``M``.
    k : int or None
        Experts per input for the sparse routers.
    router : str
        One of :data:`moestat.nn.routers.LAYER_ROUTERS` (aliases such as ``perturbed_cosine`` accepted).
    expert_hidden : int
        Hidden width of each expert.
    gate_hidden : int or None
        Hidden width of the gate MLP before the router (``None``: the router sees ``h``).
    shared_hidden : int or None
        Width of the optional shared feature extractor (``None``: experts see ``x``).
    combine : {"probs", "logits"}
        Output mixture or pre-softmax combination (module docstring).
    method : {"mixture", "stochastic"}
        Training method; also fixes the inference rule.
    router_kwargs : dict, optional
        Passed to :func:`moestat.nn.routers.make_router` (``tau``, ``temperature``,
        ``w_importance``, ``w_load``, ``k1_fix``).
    random_state : int
        Seed of the initial weights (drawn from a private ``torch.Generator``: shared extractor,
        gate, router, then experts).

    Examples
    --------
    >>> import torch
    >>> m = MoEClassifier(20, 3, n_experts=4, k=2, router="topk_mask", expert_hidden=8)
    >>> out = m(torch.rand(5, 20))
    >>> tuple(out.log_probs.shape), tuple(out.expert_logits.shape)
    ((5, 3), (5, 4, 3))
    """

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        n_experts: int = 8,
        k: int | None = 2,
        router: str = "dense",
        expert_hidden: int = 64,
        gate_hidden: int | None = None,
        shared_hidden: int | None = None,
        combine: str = "probs",
        method: str = "mixture",
        router_kwargs: dict | None = None,
        random_state: int = 0,
    ) -> None:
        super().__init__()
        for nm, v in (("in_features", in_features), ("n_classes", n_classes), ("n_experts", n_experts),
                      ("expert_hidden", expert_hidden)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}")
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        if method not in CLASSIFIER_METHODS:
            raise ValueError(f"method must be one of {CLASSIFIER_METHODS}, got {method!r}")
        try:
            router = canonical_name(router, LAYER_ROUTERS)
        except ValueError:
            raise ValueError(f"unknown router {router!r}; expected one of {LAYER_ROUTERS}") from None
        self.in_features, self.n_classes, self.n_experts = int(in_features), int(n_classes), int(n_experts)
        self.combine, self.method, self.router_name = combine, method, router
        gen = torch_generator(int(random_state))
        d = in_features
        self.shared = None
        if shared_hidden:
            self.shared = nn.Linear(in_features, int(shared_hidden))
            _init_linear(self.shared, gen)
            d = int(shared_hidden)
        # the same generator goes on to the gate body, the router and the experts, in this order
        self.layer = MoELayer(d, n_classes, n_experts, expert_hidden=(int(expert_hidden),),
                              gate_hidden=(int(gate_hidden),) if gate_hidden else (), router=router, k=k,
                              router_kwargs=router_kwargs, init_order="gate_first", random_state=gen)

    @property
    def router(self):
        """The router of the MoE layer (:mod:`moestat.nn.routers`)."""
        return self.layer.router

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Shared features ``h`` (``x`` itself without a shared extractor)."""
        return F.relu(self.shared(x)) if self.shared is not None else x

    def forward(self, x: torch.Tensor) -> ClassifierOutput:
        out = self.layer(self.features(x))
        o, w = out.expert_out, out.weights
        if self.method == "stochastic" and not self.training:
            # Eq. 2.3-2.4: inference with the single argmax-weight expert
            idx = w.argmax(dim=-1)
            lp = F.log_softmax(o[torch.arange(len(idx), device=o.device), idx], dim=-1)
        elif self.combine == "probs":
            # log sum_i w_i softmax(o_i); masked experts contribute log 0 = -inf (no NaN: the
            # clamp has zero gradient where w = 0)
            logw = torch.log(w.clamp_min(1e-30)).masked_fill(w <= 0, float("-inf"))
            lp = torch.logsumexp(logw.unsqueeze(-1) + F.log_softmax(o, dim=-1), dim=1)
        else:
            lp = F.log_softmax((w.unsqueeze(-1) * o).sum(dim=1), dim=-1)
        return ClassifierOutput(lp, out)

    def loss(self, out: ClassifierOutput, y: torch.Tensor) -> torch.Tensor:
        """Training loss of the configured method plus the router's auxiliary loss."""
        if self.method == "stochastic":
            # Eq. 2.5: sum_i p_i l(y, o_i), averaged over the batch
            ce = -F.log_softmax(out.expert_logits, dim=-1).gather(
                -1, y.view(-1, 1, 1).expand(-1, self.n_experts, 1)
            ).squeeze(-1)
            task = (out.moe.weights * ce).sum(dim=-1).mean()
        else:
            task = F.nll_loss(out.log_probs, y)
        return task + out.moe.aux_loss


class MLPClassifier(nn.Module):
    """Plain MLP ``Linear(d, H) + ReLU (+ Linear(H, H2) + ReLU ...) + Linear(., C)``.

    Parameters
    ----------
    in_features, n_classes : int
        Input dimension and classes.
    hidden : int or sequence of int
        Hidden widths.
    random_state : int
        Seed of the initial weights.
    """

    def __init__(self, in_features: int, n_classes: int, hidden=(256,), random_state: int = 0) -> None:
        super().__init__()
        hidden = [int(hidden)] if isinstance(hidden, (int, np.integer)) else [int(h) for h in hidden]
        if any(h < 1 for h in hidden):
            raise ValueError(f"hidden widths must be positive, got {hidden}")
        gen = torch_generator(int(random_state))
        dims = [int(in_features)] + hidden + [int(n_classes)]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        for layer in self.layers:
            _init_linear(layer, gen)
        self.n_classes = int(n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return F.log_softmax(self.layers[-1](x), dim=-1)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy."""
        return F.nll_loss(out, y)


def matched_mlp_hidden(n_params: int, in_features: int, n_classes: int) -> int:
    """Hidden width H of a one-hidden-layer MLP with about ``n_params`` parameters.

    ``(d + 1) H + (H + 1) C = n_params``  =>  ``H = (n_params - C) / (d + 1 + C)``, rounded.
    """
    return max(1, int(round((n_params - n_classes) / (in_features + 1 + n_classes))))


# --------------------------------------------------------------------------- metrics
def _decomposition_metrics(weights: np.ndarray, mask: np.ndarray, y: np.ndarray, n_classes: int) -> dict:
    """H_s, H_u, I(E;Y), usage entropy, count matrix and tokens per expert (thesis Ch. 4).

    Uses :mod:`moestat.nn.metrics`.  The combine weights are renormalised per row first (they sum
    to < 1 for naive top-k), so ``H_s`` is the entropy of the weights actually used to combine
    the experts; the selected expert ``E`` is the argmax weight and ``Y`` the true label.
    """
    M = weights.shape[1]
    w = np.asarray(weights, dtype=np.float64)
    row = w.sum(1, keepdims=True)
    p = np.divide(w, row, out=np.full_like(w, 1.0 / M), where=row > 0)
    sel = w.argmax(1)
    counts = metrics.count_matrix(sel, y, n_experts=M, n_classes=n_classes)
    tokens = np.asarray(mask, dtype=np.int64).sum(0)
    return dict(
        H_s=metrics.gate_sparsity(p),  # Eq. 4.1
        H_u=metrics.expert_usage(p),  # Eq. 4.2
        I_EY=metrics.mutual_information(counts),  # Eq. 4.3
        usage_entropy=float(metrics.entropy(tokens / max(tokens.sum(), 1))),  # tokens per expert
        counts=counts,
        tokens_per_expert=tokens,
    )


@torch.no_grad()
def evaluate_classifier(model: nn.Module, X: torch.Tensor, y: torch.Tensor, batch_size: int = 4096) -> dict:
    """Accuracy, mean loss and (for an MoE) decomposition metrics on ``(X, y)``.

    Parameters
    ----------
    model : MoEClassifier or MLPClassifier
        Fitted model (put into eval mode here and restored afterwards).
    X : Tensor, shape ``[n, d]``
    y : Tensor, shape ``[n]``
    batch_size : int
        Evaluation batch size.

    Returns
    -------
    dict
        ``accuracy``, ``loss``; for an MoE also ``H_s``, ``H_u``, ``I_EY`` (bits),
        ``usage_entropy`` (bits), ``counts`` (``M x C`` argmax-expert-by-class matrix) and
        ``tokens_per_expert`` (top-k assignments per expert).
    """
    was = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    ws, ms = [], []
    for i in range(0, len(y), batch_size):
        xb, yb = X[i : i + batch_size], y[i : i + batch_size]
        out = model(xb)
        lp = out.log_probs if isinstance(out, ClassifierOutput) else out
        # -log of a (possibly un-normalised, naive top-k) likelihood, clipped to stay finite
        loss_sum += float(-lp.gather(1, yb.view(-1, 1)).clamp_min(-1e4).sum())
        correct += int((lp.argmax(1) == yb).sum())
        if isinstance(out, ClassifierOutput):
            ws.append(out.moe.weights.float().cpu().numpy())
            ms.append(out.moe.mask.cpu().numpy())
    model.train(was)
    res = {"accuracy": correct / len(y), "loss": loss_sum / len(y)}
    if ws:
        res.update(_decomposition_metrics(np.concatenate(ws), np.concatenate(ms), y.cpu().numpy(), model.n_classes))
    return res


def fit_classifier(
    model: nn.Module,
    X_train: torch.Tensor,
    y_train: torch.Tensor,
    X_val: torch.Tensor | None = None,
    y_val: torch.Tensor | None = None,
    *,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    lr_schedule: str = "constant",
    random_state: int = 0,
    progress: bool | None = None,
    desc: str = "",
    callback: Callable[[dict], None] | None = None,
) -> FitResult:
    """Train with Adam (thesis Sec. 3.8: Adam, lr 1e-3) on shuffled mini-batches.

    Parameters
    ----------
    model : MoEClassifier or MLPClassifier
        Model to train in place.
    X_train, y_train : Tensor
        Training data (on the model's device).
    X_val, y_val : Tensor, optional
        Validation data; when given, the best-validation-accuracy epoch's weights are kept.
    epochs : int
        Passes over the training data.
    batch_size : int
        Mini-batch size (large batches make CPU epochs fast).
    lr, weight_decay : float
        Adam settings.
    lr_schedule : {"constant", "cosine"}
        Constant learning rate (the thesis) or cosine annealing to 0 over all steps.
    random_state : int
        Seed of the shuffling and of the routing noise (two streams spawned from
        ``numpy.random.SeedSequence(random_state)``).
    progress : bool or None
        tqdm progress bar; ``None`` = only when stderr is a terminal.
    desc : str
        Progress-bar label.
    callback : callable, optional
        Called with each epoch's history row.

    Returns
    -------
    FitResult
    """
    if len(X_train) != len(y_train) or len(y_train) == 0:
        raise ValueError("X_train and y_train must be non-empty and of equal length")
    # two streams: shuffling and routing noise (the first 32-bit word of each child sequence)
    s_shuffle, s_noise = np.random.SeedSequence(int(random_state)).spawn(2)
    g_shuffle = torch_generator(int(s_shuffle.generate_state(1)[0]))
    g_noise = torch_generator(int(s_noise.generate_state(1)[0]))
    router = getattr(model, "router", None)
    if isinstance(router, NoisyTopKRouter):
        router.set_generator(g_noise)
    validate = None
    if X_val is not None and y_val is not None and len(y_val):
        validate = lambda m: evaluate_classifier(m, X_val, y_val)["accuracy"]  # noqa: E731
    return fit(model, lambda b: model.loss(model(b.x), b.y), ShuffledBatches(X_train, y_train, batch_size, g_shuffle),
               epochs=epochs, optimizer="adam", lr=lr, weight_decay=weight_decay, lr_schedule=lr_schedule,
               validate=validate, check_finite=True, progress=progress, desc=desc, callback=callback)


class SoftMoEImageClassifier(nn.Module):
    """Soft MoE (the Soft MoE implicit-bias paper, 2024) on image patches, reporting its routing like the other gates.

    Wraps :class:`moestat.nn.softmoe.SoftMoEClassifier` (tokens -> Soft MoE layer -> flatten ->
    linear head).  Images of ``image_shape`` are cut into ``patch x patch`` tokens.  Soft MoE has
    no discrete assignment, so for the decomposition metrics an image's gate weights are its
    combine weights ``C`` averaged over its tokens and summed over each expert's slots (rows sum
    to 1); every expert is "selected" for every image (dense).

    Parameters
    ----------
    image_shape : (int, int)
        ``(H, W)`` of one image; inputs arrive flattened ``[n, H * W]``.
    n_classes, n_experts : int
        Classes and experts.
    patch : int
        Patch side (14 gives the paper's four 14x14 MNIST tokens).
    budget_factor : float
        Expert width ``budget_factor * d / n`` (the paper's MNIST models: 4).
    random_state : int
        Seed of the initial weights.
    """

    def __init__(self, image_shape, n_classes: int, n_experts: int = 8, patch: int = 14,
                 budget_factor: float = 4.0, random_state: int = 0) -> None:
        super().__init__()
        H, W = (int(v) for v in image_shape)
        if patch < 1 or H % patch or W % patch:
            raise ValueError(f"patch={patch} must divide the image size {H}x{W}")
        self.image_shape, self.patch = (H, W), int(patch)
        m, d = (H // patch) * (W // patch), patch * patch
        self.net = SoftMoEClassifier(m, d, n_experts, n_classes, budget_factor=budget_factor, random_state=int(random_state))
        self.n_experts, self.n_classes = int(n_experts), int(n_classes)
        self.method, self.router_name = "mixture", "softmoe"

    def forward(self, x: torch.Tensor) -> MoEOutput:
        tokens = patch_tokenize(x.reshape(-1, *self.image_shape), self.patch)
        det = self.net.layer(tokens, return_details=True)
        logits = self.net.head(det.output.flatten(1))
        b, m, s = det.combine.shape
        w = det.combine.reshape(b, m, self.n_experts, s // self.n_experts).sum(-1).mean(1)
        zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
        moe = MoEOutput(logits.new_zeros(b, 0, self.n_classes), det.logits.mean(1), w,
                        torch.ones_like(w, dtype=torch.bool), w, zero)
        return ClassifierOutput(F.log_softmax(logits, dim=-1), moe)

    def loss(self, out: ClassifierOutput, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy."""
        return F.nll_loss(out.log_probs, y)
