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

__all__ = ["to_free", "from_free", "random_start", "jitter", "idle_atom_starts", "TIE_RATIO", "IDLE_DROP"]

#: A start's two closest score rows are *tied* when their distance is below this fraction of the
#: second-closest pair's (a split atom of an over-specified start: 0.07 against 2.2 or more on topk-over).
TIE_RATIO = 0.25
#: The idle atom's ``beta0``: this much below the smallest ``beta0`` of the other atoms (mass ``e^-5``
#: of the lightest, so the start's likelihood is within a fraction of a nat of the measure it re-seats).
IDLE_DROP = 5.0


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


def idle_atom_starts(model: LikelihoodModel, G) -> tuple[np.ndarray, MixingMeasure | None]:
    """Top-K starts whose split atom is re-seated as an *idle* atom: the second start of a tied pair.

    The over-specified literature starts an over-fitted mixture by splitting a true atom into copies
    that share its mass.  Under a Top-K gate the copies have (nearly) the same score, so where the
    truth leaves that atom out of its Top-K, the fitted Top-K-bar (``K-bar = K + k - k*``) must still
    activate one copy: the split start is not the truth, whatever the noise.  On topk-over (Top-2 of
    k* = 3 fitted with Top-3 of 4) the noiseless split start is 23-36 nats below the truth's
    log-likelihood at n = 2 000, and one of three design fits at n = 4 000 ended 2.96 nats below it.
    The representation of the truth in the fitted model is an idle atom instead: one with a negligible
    mass whose score is the mean of the other atoms' scores.  With one atom left out (``K-bar = k - 1``)
    it is never the lowest wherever the others' linear scores differ (their minimum is concave, hence
    below their mean), so it takes the one extra slot and the others are selected as the truth's Top-K.
    It is, in the limit of zero mass, the truth; such a start is within a fraction of a nat of it.

    For each start ``G [B]`` (flat, the model's layout) whose two closest score rows ``beta1`` are tied
    (distance below :data:`TIE_RATIO` times the second-closest pair's; needs ``k >= 3``): the pair is
    merged into its heavier atom (``beta0 = log(e^beta0_i + e^beta0_j)``, its own expert) and the lighter
    is re-seated -- ``beta1`` the mean of the other rows, ``beta0`` :data:`IDLE_DROP` below the others'
    smallest, its expert and variance kept.  A reference atom (fixed gate) is never the one re-seated.
    Not for a dense gate or an exact fit from a near-truth start (no tie: every start is kept as it is).

    Parameters
    ----------
    model : LikelihoodModel
    G : MixingMeasure
        Flat batch ``[B]``: ``beta0 [B, k]``, ``beta1 [B, k, d]``, ``eta [B, k, q]``.

    Returns
    -------
    owner : ndarray of int, shape ``[E]``
        The start each new one comes from.
    starts : MixingMeasure ``[E]`` or None
        The re-seated starts (``None`` when ``E = 0``).
    """
    gate = model.gate
    b0, b1, eta = (np.asarray(a, dtype=np.float64) for a in (G.beta0, G.beta1, G.eta))
    B, k = b0.shape
    if gate.k_active is None or gate.k_active >= k or k < 3:
        return np.zeros(0, dtype=int), None
    ref = bool(gate.reference)
    owner, out = [], []
    iu = np.triu_indices(k, 1)
    for b in range(B):
        D = np.linalg.norm(b1[b][:, None] - b1[b][None], axis=-1)[iu]
        order = np.argsort(D, kind="stable")
        if not (np.isfinite(D).all() and D[order[0]] < TIE_RATIO * D[order[1]]):
            continue
        i, j = iu[0][order[0]], iu[1][order[0]]
        if (ref and j == k - 1) or (not (ref and i == k - 1) and b0[b, j] > b0[b, i]):
            i, j = j, i  # j: the atom re-seated (the lighter one; never the reference)
        nb0, nb1 = b0[b].copy(), b1[b].copy()
        nb0[i] = np.logaddexp(b0[b, i], b0[b, j])
        others = np.arange(k) != j
        nb1[j] = b1[b][others].mean(0)
        nb0[j] = nb0[others].min() - IDLE_DROP
        if ref:  # the reference convention (the gate is invariant to a common shift of beta0)
            nb0 = nb0 - nb0[-1]
        owner.append(b)
        out.append(MixingMeasure(nb0, nb1, eta[b].copy()))
    if not out:
        return np.zeros(0, dtype=int), None
    return np.asarray(owner, dtype=int), MixingMeasure.stack(out)
