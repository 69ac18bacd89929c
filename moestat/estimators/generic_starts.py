"""Starts of the generic EM (:mod:`moestat.estimators.mle_generic`) and the layout of its
parameters: a :class:`~moestat.model.mixing.MixingMeasure` to and from the free gate parameters,
the expert parameters and the log-variances."""

from __future__ import annotations

import numpy as np
import torch

from moestat.estimators.mle_generic import GenericEM
from moestat.estimators.starts import random_partition_init
from moestat.model.likelihood import LikelihoodModel
from moestat.model.mixing import MixingMeasure

__all__ = ["to_free", "from_free", "random_start", "jitter"]


def to_free(em: GenericEM, G) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(fv [B, mg], eta [B, k, q], ls2 [B, k])`` from a flat batch ``G [B]`` (its ``eta`` ends with
    the variance for the Gaussian family); the gate is moved to :class:`GenericEM`'s convention."""
    V = np.concatenate([G.beta1, G.beta0[..., None]], axis=-1)  # [B, k, p]
    gate = em.model.gate
    V = gate.family.to_convention(V, bool(gate.reference))  # the shift the gate is invariant to
    fv = torch.as_tensor(V.reshape(V.shape[0], -1)[:, em.free.numpy()].copy())
    eta = torch.as_tensor(np.array(G.eta[..., : em.q], dtype=np.float64))
    B, k = G.beta0.shape
    ls2 = torch.as_tensor(np.log(G.eta[..., em.q])) if em.gaussian else torch.zeros(B, k, dtype=torch.float64)
    return fv, eta, ls2


def from_free(em: GenericEM, fv: np.ndarray, eta: np.ndarray, ls2: np.ndarray):
    """The :class:`MixingMeasure` ``[B]`` of :func:`to_free`'s layout (a Gaussian gate's ``exp(beta0)`` summing to one)."""

    B = fv.shape[0]
    V = np.zeros((B, em.k * em.p))
    V[:, em.free.numpy()] = fv
    V = V.reshape(B, em.k, em.p)
    b0, b1 = em.model.gate.family.canonical_bias(V[..., -1].copy()), V[..., :-1].copy()
    full = np.concatenate([eta, np.exp(ls2)[..., None]], -1) if em.gaussian else eta
    return MixingMeasure(b0, b1, full)


def random_start(model: LikelihoodModel, X: np.ndarray, Y: np.ndarray, k: int, rng: np.random.Generator):
    """A data-driven random start (unbatched :class:`MixingMeasure` in the model's layout).

    Linear Gaussian experts: a random partition of ``(x, y)``
    (:func:`moestat.estimators.starts.random_partition_init`); other experts: ``eta ~ N(0, 1)`` and
    the variance ``var(y)``.  The gate starts uniform; a Gaussian gate is centred on random inputs.
    """

    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    n, d = X.shape
    if model.family == "gaussian" and getattr(model.expert, "name", "") == "identity":
        G = random_partition_init(X, Y, k, rng)
        b0, b1, eta = G.beta0, G.beta1, G.eta
    else:
        b0, b1 = np.zeros(k), np.zeros((k, d))
        eta = rng.normal(size=(k, model.n_expert_params(d)))
        if model.family == "gaussian":
            eta = np.column_stack([eta, np.full(k, max(float(np.var(Y)), 1e-12))])
    b0, b1 = model.gate.family.random_router(X, k, rng, b0, b1)  # e.g. Gaussian/Laplace centres on inputs
    return MixingMeasure(b0, b1, eta)


def jitter(G, S: int, sd: float, rng: np.random.Generator, gaussian: bool):
    """``G [R, 1]`` and ``S - 1`` copies with ``N(0, sd^2)`` noise (variances on the log scale), ``[R, S]``."""

    R, _, k = G.beta0.shape
    b0 = np.repeat(G.beta0, S, axis=1) + sd * rng.standard_normal((R, S, k))
    b1 = np.repeat(G.beta1, S, axis=1) + sd * rng.standard_normal((R, S) + G.beta1.shape[2:])
    eta = np.repeat(G.eta, S, axis=1).copy()
    m = eta.shape[-1] - (1 if gaussian else 0)
    eta[..., :m] += sd * rng.standard_normal(eta[..., :m].shape)
    if gaussian:
        eta[..., m] *= np.exp(sd * rng.standard_normal(eta.shape[:-1]))
    for a, ref in ((b0, G.beta0), (b1, G.beta1), (eta, G.eta)):
        a[:, 0] = ref[:, 0]  # the given start itself is start 0
    return MixingMeasure(b0, b1, eta)
