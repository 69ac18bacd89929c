"""The one training loop of moestat's neural-network side.

:func:`fit` runs epochs of optimizer steps on mini-batches and knows nothing about MoE: what a
step computes (the loss of a thesis method, a classifier's cross-entropy, a Soft MoE regressor's
squared error) is the ``step`` function passed in, and where the batches come from is the
``batches`` object (:class:`ShuffledBatches` over a fixed training set, or :class:`FreshBatches`
drawn anew at every step).  It is used by

* the thesis training methods (:func:`moestat.nn.methods.train_moe`): each phase of a schedule is
  one call, with its own parameter group and hooks for temperatures and E-steps;
* the real-data classifiers (:func:`moestat.nn.classifier.fit_classifier`): Adam, optional cosine
  learning rate, progress bar, validation after every epoch and best-epoch keeping;
* the Soft MoE models (:func:`moestat.experiments.softmoe_subsets.fit_classifier`,
  :func:`moestat.experiments.softmoe_norm_target.fit_regressor`).

It is a plain function: ``nn.Module.train`` is never overridden.  The model is put in training
mode at the start of every epoch and in evaluation mode at the end.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

__all__ = [
    "OPTIMIZERS",
    "LR_SCHEDULES",
    "Batch",
    "ShuffledBatches",
    "FreshBatches",
    "FitResult",
    "make_optimizer",
    "fit",
]

OPTIMIZERS = ("adam", "rmsprop", "sgd")
LR_SCHEDULES = ("constant", "cosine")


@dataclass
class Batch:
    """One mini-batch: inputs ``x`` ``[b, ...]``, targets ``y`` ``[b, ...]`` and, for batches of a
    fixed training set, their row indices ``idx`` ``[b]`` (the EM schedule looks responsibilities
    up by them)."""

    x: torch.Tensor
    y: torch.Tensor
    idx: torch.Tensor | None = None


class ShuffledBatches:
    """Mini-batches of ``(x, y)`` in a fresh random order every epoch (the last one may be smaller).

    Parameters
    ----------
    x, y : Tensor
        Training inputs ``[n, ...]`` and targets ``[n, ...]``.
    batch_size : int
    generator : torch.Generator
        Source of the permutations (drawn on the CPU, one ``randperm`` per epoch).
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator) -> None:
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if len(x) != len(y) or len(y) == 0:
            raise ValueError("the training inputs and targets must be non-empty and of equal length")
        self.x, self.y, self.batch_size, self.generator = x, y, int(batch_size), generator

    def __len__(self) -> int:
        return math.ceil(len(self.y) / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        perm = torch.randperm(len(self.y), generator=self.generator).to(self.x.device)
        for start in range(0, len(self.y), self.batch_size):
            idx = perm[start:start + self.batch_size]
            yield Batch(self.x[idx], self.y[idx], idx)


class FreshBatches:
    """``steps`` batches per epoch, each a fresh sample ``sample(batch_size, generator) -> (x, y)``
    (the Soft MoE ``||X||`` regressor: its training loss is also a test loss)."""

    def __init__(self, sample: Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                 steps: int, generator: torch.Generator) -> None:
        for name, v in (("batch_size", batch_size), ("steps", steps)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.sample, self.batch_size, self.steps, self.generator = sample, int(batch_size), int(steps), generator

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Batch]:
        for _ in range(self.steps):
            x, y = self.sample(self.batch_size, self.generator)
            yield Batch(x, y)


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    model : nn.Module
        The trained model (with the best validation epoch's weights when ``validate`` was given).
    history : list of dict
        Per epoch: ``epoch`` (1-based), ``train_loss`` (mean over the epoch's examples),
        ``seconds`` (training wall time), ``val_accuracy`` (with ``validate``) and whatever
        ``epoch_info`` added.
    best_epoch : int
        1-based epoch whose weights were kept (the last one without validation).
    seconds_per_epoch : float
        Mean wall-clock training time per epoch (evaluation excluded).
    cpu_seconds_per_epoch : float
        Mean process CPU time per epoch (all threads); unlike the wall clock it does not grow
        when other jobs share the cores.
    step_losses : ndarray, shape ``[epochs * steps]``, or None
        Every step's loss (``record_steps=True``).
    """

    model: nn.Module
    history: list = field(default_factory=list)
    best_epoch: int = 0
    seconds_per_epoch: float = float("nan")
    cpu_seconds_per_epoch: float = float("nan")
    step_losses: np.ndarray | None = None


def make_optimizer(params: Iterable[nn.Parameter], name: str = "adam", lr: float = 1e-3,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """An optimizer over the parameters that require a gradient.

    Parameters
    ----------
    params : iterable of Parameter
    name : {"adam", "rmsprop", "sgd"}
        Adam (Krishnamurthy 2023 Ch. 3-9, the Soft MoE paper), RMSProp (the thesis toy runs) or
        plain SGD; every other setting is PyTorch's default.
    lr, weight_decay : float
    """
    params = [p for p in params if p.requires_grad]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def _check_positive_int(name: str, v) -> None:
    if isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _progress_bar(progress: bool | None, total: int, desc: str):
    """A tqdm bar over ``total`` steps (``None`` when ``progress`` is False; tqdm decides, from
    whether stderr is a terminal, when ``progress`` is None)."""
    if progress is False:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc or None, disable=None if progress is None else not progress,
                leave=False, mininterval=1.0)


def _one_epoch(step, batches, opt, sched, bar) -> tuple[list[torch.Tensor], list[int]]:
    """One pass over ``batches``: ``step(batch)`` gives the loss, one optimiser (and scheduler) step
    each.  Returns the detached losses (kept as tensors: no device synchronisation per step) and
    the batch sizes."""
    losses, sizes = [], []
    for batch in batches:
        loss = step(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.detach())
        sizes.append(len(batch.y))
        if bar is not None:
            bar.update(1)
    return losses, sizes


def fit(
    model: nn.Module,
    step: Callable[[Batch], torch.Tensor],
    batches,
    *,
    epochs: int,
    params: Iterable[nn.Parameter] | None = None,
    optimizer: str = "adam",
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    lr_schedule: str = "constant",
    on_epoch_start: Callable[[int], None] | None = None,
    epoch_info: Callable[[int], dict] | None = None,
    validate: Callable[[nn.Module], float] | None = None,
    check_finite: bool = False,
    record_steps: bool = False,
    progress: bool | None = False,
    desc: str = "",
    callback: Callable[[dict], None] | None = None,
) -> FitResult:
    """Train ``model`` in place: ``epochs`` passes over ``batches``, one optimizer step per batch.

    Parameters
    ----------
    model : nn.Module
        Put in training mode at every epoch start and in evaluation mode at the end.
    step : callable
        ``step(batch) -> loss``: the scalar loss of one :class:`Batch` (a forward pass of the
        model); the loop does ``zero_grad``, ``backward`` and the optimizer step.
    batches : ShuffledBatches or FreshBatches
        Iterable once per epoch, with ``len`` the number of steps per epoch.
    epochs : int
    params : iterable of Parameter, optional
        Parameters to optimise (default: all of ``model``; a schedule phase passes a group).
    optimizer : {"adam", "rmsprop", "sgd"}
    lr, weight_decay : float
    lr_schedule : {"constant", "cosine"}
        Constant learning rate, or cosine annealing to 0 over all steps.
    on_epoch_start : callable, optional
        ``on_epoch_start(e)`` with the 0-based epoch, before its first batch (temperatures,
        E-steps).
    epoch_info : callable, optional
        ``epoch_info(e) -> dict`` merged into the epoch's history row.
    validate : callable, optional
        ``validate(model) -> score`` (higher is better) after every epoch; the weights of the best
        epoch are restored at the end.
    check_finite : bool
        Raise ``FloatingPointError`` when an epoch's training loss is not finite.
    record_steps : bool
        Keep every step's loss in :attr:`FitResult.step_losses`.
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
    _check_positive_int("epochs", epochs)
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {lr_schedule!r}")
    opt = make_optimizer(model.parameters() if params is None else params, optimizer, lr, weight_decay)
    n_steps = len(batches)
    sched = None
    if lr_schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(epochs) * n_steps)
    bar = _progress_bar(progress, int(epochs) * n_steps, desc)
    res = FitResult(model=model)
    all_steps: list[torch.Tensor] = []
    best, best_state, t_train, c_train = -math.inf, None, 0.0, 0.0
    try:
        for e in range(int(epochs)):
            model.train()
            if on_epoch_start is not None:
                on_epoch_start(e)
            t0, c0 = time.perf_counter(), time.process_time()
            losses, sizes = _one_epoch(step, batches, opt, sched, bar)
            dt = time.perf_counter() - t0
            t_train += dt
            c_train += time.process_time() - c0
            tot = 0.0
            for v, b in zip(losses, sizes):
                tot += float(v) * b
            row = {"epoch": e + 1, "train_loss": tot / sum(sizes), "seconds": dt}
            if record_steps:
                all_steps += losses
            if epoch_info is not None:
                row.update(epoch_info(e))
            if validate is not None:
                score = float(validate(model))
                row["val_accuracy"] = score
                if score > best:
                    best, res.best_epoch = score, e + 1
                    best_state = copy.deepcopy(model.state_dict())
            else:
                res.best_epoch = e + 1
            if check_finite and not math.isfinite(row["train_loss"]):
                raise FloatingPointError(f"training loss became {row['train_loss']} at epoch {e + 1}")
            res.history.append(row)
            if bar is not None:
                bar.set_postfix({k: round(v, 4) for k, v in row.items() if k in ("train_loss", "val_accuracy")})
            if callback is not None:
                callback(row)
    finally:
        if bar is not None:
            bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    res.seconds_per_epoch = t_train / int(epochs)
    res.cpu_seconds_per_epoch = c_train / int(epochs)
    if record_steps:
        res.step_losses = torch.stack(all_steps).cpu().numpy()
    return res
