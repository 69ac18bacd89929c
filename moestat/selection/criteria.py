"""How many experts: the dendrogram selection criterion (DSC) beside AIC, BIC and ICL.

* **DSC** (Do, Do, McKinley, Terhorst & Nguyen 2024; their section numbers are not cited: the
  paper was read through excerpts and its peer code): from one over-fitted fit with ``K`` atoms
  and its dendrogram (:mod:`moestat.selection.dendrogram`), level ``k`` (``2 <= k <= K``) scores::

      DSC(k) = -( h(k) + omega_n * lbar(k) ),      k_hat = argmin_k DSC(k)

  with ``h(k)`` the height of the merge that takes ``k`` atoms to ``k - 1``, ``lbar(k)`` the
  average log-likelihood ``(1/n) sum_i log p_{G_k}(y_i | x_i)`` of the merged measure of level
  ``k`` and ``omega_n = log n`` (any ``omega_n -> infinity`` slowly enough gives consistency; the
  Dendrogram_SGMoE code uses ``log n`` too).  Above ``k*`` the heights vanish and the likelihoods
  agree, at ``k*`` the height stays bounded away from 0, below ``k*`` the likelihood drops by a
  constant that ``omega_n`` inflates.  One fit, no refit; ``k = 1`` cannot be selected.
* **AIC** ``-2 l + 2 p``, **BIC** ``-2 l + p log n`` (Schwarz 1978) and **ICL** ``BIC + 2 EN(tau)``
  with ``EN(tau) = -sum_{i,j} tau_ij log tau_ij`` the entropy of the posterior responsibilities
  (Biernacki, Celeux & Govaert 2000, in its BIC-approximation form): one maximum-likelihood refit
  per ``k = 1..K`` (:func:`fit_ladder`, the batched estimator), ``k_hat`` the minimiser.  ``p =
  (k - 1)(d + 1) + k (d + 2)`` free parameters of a softmax-gated Gaussian MoE (gate rows of the
  non-reference atoms; expert slope, intercept and variance of every atom).

BIC assumes a regular model (it is not: over-fitted mixtures have singular Fisher information,
so its penalty is only heuristic there); ICL adds a penalty for overlapping experts and so prefers
well-separated components; AIC targets prediction, not ``k*``, and over-selects.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.model.gaussian_moe import component_log_joint
from moestat.model.mixing import MixingMeasure
from moestat.selection.dendrogram import Dendrogram, dsc_levels
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.starts import near_truth_init, random_partition_init

__all__ = ["CRITERIA", "CONVERGED", "n_parameters", "information_criteria", "dsc_path", "pick", "fit_ladder"]

CRITERIA = ("DSC", "AIC", "BIC", "ICL")
#: estimator statuses that count as a converged fit (:class:`~moestat.estimators.mle.MLEGaussianMoE`)
CONVERGED = ("tol", "newton")


def n_parameters(k: int, d: int) -> int:
    """Free parameters of a ``k``-expert softmax-gated Gaussian MoE on ``d`` inputs."""
    return (k - 1) * (d + 1) + k * (d + 2)


def _loglik_and_entropy(X: np.ndarray, Y: np.ndarray, G: MixingMeasure) -> tuple[np.ndarray, np.ndarray]:
    lj = component_log_joint(X, Y, G)  # [..., n, k]
    ll = torch.logsumexp(lj, -1, keepdim=True)
    logtau = lj - ll
    ent = -(torch.exp(logtau) * logtau).nan_to_num(0.0).sum((-1, -2))
    return ll.squeeze(-1).sum(-1).numpy(), ent.numpy()


def information_criteria(X, Y, G: MixingMeasure) -> dict[str, np.ndarray]:
    """Log-likelihood, AIC, BIC and ICL of fitted measures.

    Parameters
    ----------
    X : array, shape ``[R, n, d]`` (or ``[n, d]``)
    Y : array, shape ``[R, n]`` (or ``[n]``)
    G : MixingMeasure
        Batch shape ``(R,)`` (or unbatched), ``eta [..., k, d + 2]``.

    Returns
    -------
    dict of ndarray, each ``[R]`` (or scalar arrays): ``loglik``, ``AIC``, ``BIC``, ``ICL``, ``entropy``.
    """
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    n, d = X.shape[-2], X.shape[-1]
    ll, ent = _loglik_and_entropy(X, Y, G.numpy())
    p = n_parameters(G.n_atoms, d)
    bic = -2 * ll + p * math.log(n)
    return {"loglik": ll, "AIC": -2 * ll + 2 * p, "BIC": bic, "ICL": bic + 2 * ent, "entropy": ent}


def dsc_path(dend: Dendrogram, X, Y, omega: float | None = None) -> dict[str, np.ndarray]:
    """DSC of every level ``k = 2..K`` of one dendrogram (module docstring).

    Parameters
    ----------
    dend : Dendrogram
        Of a Gaussian-MoE fit (the likelihood is the Gaussian MoE's).
    X : array, shape ``[n, d]``
    Y : array, shape ``[n]``
    omega : float, optional
        The weight ``omega_n`` of the likelihood; default ``log n``.

    Returns
    -------
    dict
        ``k [K - 1]`` (``K, K-1, ..., 2``), ``height``, ``mean_loglik``, ``dsc`` (same length) and
        ``k_hat`` (int).
    """
    if dend.family != "gaussian":
        raise ValueError("DSC needs the likelihood: build the dendrogram with family='gaussian'")
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    n = X.shape[0]
    out = dsc_levels(dend, lambda G: _loglik_and_entropy(X, Y, G)[0] / n, n, omega)
    del out["omega"]
    return out


def pick(scores: dict[int, float]) -> int:
    """The ``k`` of least score (ties: the smallest ``k``); non-finite scores never win."""
    ks = sorted(k for k, v in scores.items() if np.isfinite(v))
    if not ks:
        raise ValueError("no finite criterion value: every fit failed")
    return min(ks, key=lambda k: (scores[k], k))


def fit_ladder(X, Y, ks, *, truth: MixingMeasure | None, streams, n_starts: int = 2, init_scale: float = 0.1,
               max_iter: int = 1000, polish_iter: int = 100, compile: bool | str = "auto") -> dict[int, dict]:
    """Maximum-likelihood fits with ``k`` experts for every ``k`` in ``ks``, batched over replicates x starts.

    Starts: with ``truth`` and ``k >= k*``, near the truth (:func:`~moestat.estimators.starts.near_truth_init`,
    noise ``init_scale``: the "oracle neighbourhood" of the rates presets and the peers'
    ``favourable`` setting); otherwise (``k < k*`` or no truth) random partitions
    (:func:`~moestat.estimators.starts.random_partition_init`).  Every fit runs SQUAREM EM then the
    Newton polish to its certificate (the over-fitted rule of the rates pipeline, for every ``k >= 2``:
    selection does not know which ``k`` is over-fitted).

    Parameters
    ----------
    X : ndarray, shape ``[R, n, d]``
    Y : ndarray, shape ``[R, n]``
    ks : iterable of int
    truth : MixingMeasure or None
    streams : callable ``(r, k, s) -> numpy.random.SeedSequence``
        The stream of start ``s`` of replicate ``r`` (row ``r`` of the batch) at ``k``; a replicate's
        fit therefore does not depend on the other rows of the batch.
    n_starts : int
        Starts per replicate; the estimator keeps the most likely.

    Returns
    -------
    dict ``k -> {"params": MixingMeasure [R], "status": list, "loglik": ndarray [R]}``
    """
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    R = X.shape[0]
    out = {}
    for k in ks:
        k = int(k)
        rows = []
        for r in range(R):
            starts = []
            for s in range(n_starts):
                rng = np.random.default_rng(streams(r, k, s))
                if truth is not None and k >= truth.n_atoms:
                    starts.append(near_truth_init(truth, k, init_scale, rng, log_last=True))
                else:
                    starts.append(random_partition_init(X[r], Y[r], k, rng))
            rows.append(MixingMeasure.stack(starts))
        init = MixingMeasure.stack(rows)  # [R, S]
        est = MLEGaussianMoE(k, max_iter=max_iter, accelerate=k >= 2, polish_iter=polish_iter if k >= 2 else 0,
                             compile=compile).fit(X, Y, init=init)
        out[k] = {"params": est.params_, "status": list(est.status_), "loglik": np.asarray(est.loglik_)}
    return out
