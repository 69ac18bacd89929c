"""The plain finite-mixture example of the dendrogram of mixing measures (Do et al. 2024).

Do, Do, McKinley, Terhorst & Nguyen (2024), "Dendrogram of mixing measures", introduce the
dendrogram on plain finite mixtures ``p_G(x) = sum_i p_i f(x | theta_i)``.  This module is their
strongly identifiable example: the **location Gaussian mixture with known covariance** ``I_d``
(``f(x | theta) = N(x; theta, I_d)``), the setting of their first convergence-rate simulation
(k* = 3 bivariate atoms fitted with K_bar = 5).

* **Fit**: maximum likelihood by EM, batched over starts (:func:`fit_location_mixture`); each start
  stops when the mean log-likelihood gains less than ``tol`` per iteration (status ``"tol"``) or at
  ``max_iter`` (``"max_iter"``); the most likely start is kept and every start's status returned.
  scikit-learn's ``GaussianMixture`` is not used: it always estimates the covariances (its
  ``spherical`` type still fits a variance per atom), so it cannot fit a mixture whose covariance
  is known -- a different model with a different (weakly identifiable) theory.
* **Dendrogram** (:func:`mixture_dendrogram`): at each level merge the pair of least::

      d(i, j) = p_i p_j / (p_i + p_j) * ||theta_i - theta_j||^2

  (the paper's dissimilarity for strongly identifiable families: the cost of moving the two atoms
  to their barycentre in the squared ``W_2`` sense), into ``p = p_i + p_j``, ``theta = (p_i
  theta_i + p_j theta_j) / p``.  Masses add and the mixture's mean ``sum_i p_i theta_i`` is kept at
  every level.  :mod:`moestat.selection.dendrogram` is not reused for the tree: it builds on the
  softmax gate of a :class:`~moestat.model.mixing.MixingMeasure` (gate slopes, masses at a centre,
  the reference convention, expert blocks with their Voronoi exponents) which a plain mixture does
  not have; its :func:`~moestat.selection.dendrogram.plot_dendrogram` draws this module's trees
  (same ``linkage`` and ``masses`` attributes).
* **DSC** (:func:`dsc_scores`): ``DSC(k) = -(h(k) + omega_n lbar(k))`` for ``k = 2..K``, with
  ``h(k)`` the height of the merge from ``k`` to ``k - 1`` atoms and ``lbar(k)`` the mean
  log-likelihood of level ``k``, ``omega_n = log n`` (as :func:`moestat.selection.criteria.dsc_path`);
  ``k_hat = argmin``.  Also the *rescaled* form of the authors' later reproduction scripts
  (dendroMixR, ``code_reproduce_paper``): ``-(omega_n lbar(k) / |lbar(K)| + h(k) / max h)``, free
  of the units of ``theta``.
* **AIC / BIC** (:func:`information_criteria`) from one refit per ``k = 1..K``:
  ``(k - 1) + k d`` free parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.special import logsumexp

from moestat.selection.dendrogram import dsc_levels, tree_height, tree_level

__all__ = ["MixtureFit", "MixtureDendrogram", "ExampleConfig", "fit_location_mixture", "fit_ladder",
           "mixture_loglik", "mixture_dendrogram", "dsc_scores", "information_criteria", "wasserstein",
           "sample_location_mixture", "run_replicate", "PAPER_EXAMPLE"]

_LOG2PI = math.log(2.0 * math.pi)


def _check_X(X) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a 2-D array [n, d] with n, d >= 1, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X has non-finite entries")
    return X


def _check_measure(weights, means) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(weights, dtype=float).reshape(-1)
    mu = np.asarray(means, dtype=float)
    if mu.ndim == 1:
        mu = mu[:, None]
    if mu.ndim != 2 or mu.shape[0] != w.size:
        raise ValueError(f"means must be [k, d] with k = {w.size} weights, got shape {mu.shape}")
    if not (np.isfinite(w).all() and np.isfinite(mu).all()):
        raise ValueError("the measure has non-finite atoms (a failed fit)")
    if np.any(w <= 0) or not np.isclose(w.sum(), 1.0, rtol=0, atol=1e-8):
        raise ValueError(f"weights must be positive and sum to 1, got {w.tolist()}")
    return w, mu


def _sq_dist(X: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``||x_i - mu_..j||^2`` for ``X [n, d]`` and ``mu [..., k, d]``: shape ``[..., n, k]``."""
    xx = np.einsum("nd,nd->n", X, X)[:, None]
    mm = np.einsum("...kd,...kd->...k", mu, mu)[..., None, :]
    return np.maximum(xx - 2.0 * np.einsum("nd,...kd->...nk", X, mu) + mm, 0.0)


def mixture_loglik(X, weights, means) -> float:
    """Total log-likelihood ``sum_i log sum_j p_j N(x_i; theta_j, I_d)``."""
    X = _check_X(X)
    w, mu = _check_measure(weights, means)
    lj = np.log(w)[None, :] - 0.5 * _sq_dist(X, mu) - 0.5 * X.shape[1] * _LOG2PI
    return float(logsumexp(lj, axis=-1).sum())


@dataclass(frozen=True)
class MixtureFit:
    """A maximum-likelihood fit with ``k`` atoms (the most likely of its starts).

    Attributes
    ----------
    weights : ndarray, shape ``[k]``
    means : ndarray, shape ``[k, d]``
    loglik : float
        Total log-likelihood.
    status : str
        ``"tol"`` (converged) or ``"max_iter"`` of the kept start; ``"closed_form"`` for ``k = 1``.
    n_iter : int
        EM iterations of the kept start.
    start_status, start_loglik : tuple
        Every start's status and log-likelihood (none is dropped).
    """

    weights: np.ndarray
    means: np.ndarray
    loglik: float
    status: str
    n_iter: int
    start_status: tuple = field(default=())
    start_loglik: tuple = field(default=())

    @property
    def converged(self) -> bool:
        return self.status in ("tol", "closed_form")


def fit_location_mixture(X, k: int, streams: Sequence[np.random.SeedSequence], tol: float = 1e-10,
                         max_iter: int = 5000) -> MixtureFit:
    """EM for ``sum_j p_j N(theta_j, I_d)``, one start per seed stream, batched over starts.

    Start ``s``: ``k`` distinct data points drawn with ``streams[s]`` as the means, equal weights
    (the initialisation of the authors' reproduction scripts).

    Parameters
    ----------
    X : array, shape ``[n, d]``
    k : int
        Atoms, ``1 <= k <= n``.
    streams : sequence of numpy.random.SeedSequence
        One per start (at least one).
    tol : float
        Stop a start when its mean log-likelihood (per observation) gains less than ``tol``.
    max_iter : int

    Returns
    -------
    MixtureFit
    """
    X = _check_X(X)
    n, d = X.shape
    if not (isinstance(k, (int, np.integer)) and 1 <= k <= n):
        raise ValueError(f"k must be an integer in 1..n={n}, got {k!r}")
    if k == 1:  # the MLE is the sample mean
        mu = X.mean(0, keepdims=True)
        ll = mixture_loglik(X, [1.0], mu)
        return MixtureFit(np.ones(1), mu, ll, "closed_form", 0, ("closed_form",), (ll,))
    streams = list(streams)
    if not streams:
        raise ValueError("need at least one start stream")
    S = len(streams)
    mu = np.stack([X[np.random.default_rng(s).choice(n, size=k, replace=False)] for s in streams])  # [S, k, d]
    logw = np.full((S, k), -math.log(k))
    prev = np.full(S, -np.inf)
    active = np.ones(S, dtype=bool)
    iters = np.zeros(S, dtype=int)
    const = -0.5 * d * _LOG2PI
    for it in range(1, max_iter + 1):
        lj = logw[:, None, :] - 0.5 * _sq_dist(X, mu) + const  # [S, n, k]
        ll_i = logsumexp(lj, axis=-1)  # [S, n]
        cur = ll_i.mean(-1)
        # EM is monotone: a start whose gain fell below tol is stopped (its parameters are those
        # that produced ``cur``, so the reported log-likelihood is the one of the returned fit)
        done = active & (cur - prev < tol)
        active &= ~done
        prev = np.where(active | done, cur, prev)
        if not active.any():
            break
        r = np.exp(lj - ll_i[..., None])
        Nk = r.sum(1)  # [S, k]
        new_mu = np.einsum("snk,nd->skd", r, X) / np.maximum(Nk, 1e-300)[..., None]
        new_logw = np.log(np.maximum(Nk, 1e-300) / n)
        mu = np.where(active[:, None, None], new_mu, mu)
        logw = np.where(active[:, None], new_logw, logw)
        iters += active
    status = np.where(active, "max_iter", "tol")
    # the stopped ones hold their last evaluated parameters; re-evaluate every start once (cheap)
    lls = np.array([mixture_loglik(X, np.exp(logw[s] - logsumexp(logw[s])), mu[s]) for s in range(S)])
    best = int(np.argmax(lls))
    w = np.exp(logw[best] - logsumexp(logw[best]))
    return MixtureFit(w, mu[best].copy(), float(lls[best]), str(status[best]), int(iters[best]),
                      tuple(str(v) for v in status), tuple(float(v) for v in lls))


def fit_ladder(X, k_max: int, streams: Callable[[int, int], np.random.SeedSequence], n_starts: int = 5,
               **kw) -> dict[int, MixtureFit]:
    """One fit per ``k = 1..k_max``; ``streams(k, s)`` is the seed of start ``s`` at ``k``."""
    return {k: fit_location_mixture(X, k, [streams(k, s) for s in range(n_starts)], **kw) for k in range(1, k_max + 1)}


@dataclass(frozen=True)
class MixtureDendrogram:
    """The merge tree of one fitted plain mixture.

    Attributes
    ----------
    levels : tuple of (ndarray [K - t], ndarray [K - t, d])
        ``levels[t]``: weights and means after ``t`` merges.
    heights : ndarray, shape ``[K - 1]``
        ``heights[t]``: dissimilarity of the pair merged from level ``t`` to ``t + 1``.
    linkage : ndarray, shape ``[K - 1, 4]``
        SciPy's linkage matrix (leaves ``0..K-1``, merge ``t`` creates ``K + t``).
    members : tuple
        ``members[t][i]``: the leaves merged into atom ``i`` of level ``t``.
    masses : tuple of ndarray
        ``masses[t]`` = ``levels[t][0]`` (the attribute :func:`~moestat.selection.dendrogram.plot_dendrogram` reads).
    """

    levels: tuple
    heights: np.ndarray
    linkage: np.ndarray
    members: tuple
    masses: tuple

    @property
    def n_leaves(self) -> int:
        return int(self.levels[0][0].size)

    def level(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Weights and means of the merged measure with ``k`` atoms (``1 <= k <= K``)."""
        return tree_level(self, k)

    def height(self, k: int) -> float:
        """Height of the merge that takes ``k`` atoms to ``k - 1`` (``2 <= k <= K``)."""
        return tree_height(self, k)


def mixture_dendrogram(weights, means) -> MixtureDendrogram:
    """Merge the pair of least ``p_i p_j / (p_i + p_j) ||theta_i - theta_j||^2``, ``K - 1`` times.

    Parameters
    ----------
    weights : array, shape ``[K]``
        Positive, summing to 1.
    means : array, shape ``[K, d]`` (or ``[K]`` for ``d = 1``)

    Returns
    -------
    MixtureDendrogram
    """
    w, mu = _check_measure(weights, means)
    K = w.size
    if K < 2:
        raise ValueError(f"a dendrogram needs at least 2 atoms, got {K}")
    ids, groups = list(range(K)), [(i,) for i in range(K)]
    levels, members, heights, rows = [(w.copy(), mu.copy())], [tuple(groups)], [], []
    for t in range(K - 1):
        k = w.size
        D = (w[:, None] * w[None, :] / (w[:, None] + w[None, :])) * _sq_dist(mu, mu)
        D[np.diag_indices(k)] = np.inf
        i, j = np.unravel_index(int(np.argmin(D)), D.shape)  # first of ties, i < j by symmetry
        i, j = min(i, j), max(i, j)
        h = float(D[i, j])
        rows.append([min(ids[i], ids[j]), max(ids[i], ids[j]), h, len(groups[i]) + len(groups[j])])
        heights.append(h)
        p = w[i] + w[j]
        theta = (w[i] * mu[i] + w[j] * mu[j]) / p
        keep = [a for a in range(k) if a != j]
        w, mu = w.copy(), mu.copy()
        w[i], mu[i] = p, theta
        w, mu = w[keep], mu[keep]
        groups = [tuple(sorted(groups[i] + groups[j])) if a == i else g for a, g in enumerate(groups) if a != j]
        ids = [K + t if a == i else c for a, c in enumerate(ids) if a != j]
        levels.append((w, mu))
        members.append(tuple(groups))
    return MixtureDendrogram(tuple(levels), np.asarray(heights), np.asarray(rows, dtype=float), tuple(members),
                             tuple(lv[0] for lv in levels))


def dsc_scores(dend: MixtureDendrogram, X, omega: float | None = None) -> dict:
    """DSC of every level ``k = K..2`` (module docstring), plain and rescaled.

    Returns
    -------
    dict
        ``k``, ``height``, ``mean_loglik``, ``dsc``, ``dsc_rescaled`` (arrays over ``k = K..2``),
        ``k_hat`` and ``k_hat_rescaled``.
    """
    X = _check_X(X)
    n = X.shape[0]
    out = dsc_levels(dend, lambda level: mixture_loglik(X, *level) / n, n, omega)
    ks, h, lbar, om = out["k"], out["height"], out["mean_loglik"], out.pop("omega")
    hmax = float(h.max())
    dsc_r = -(om * lbar / abs(lbar[0]) + (h / hmax if hmax > 0 else 0.0 * h))
    return {**out, "dsc_rescaled": dsc_r, "k_hat_rescaled": int(ks[int(np.argmin(dsc_r))])}


def information_criteria(loglik: float, k: int, d: int, n: int) -> dict[str, float]:
    """AIC ``-2 l + 2 p`` and BIC ``-2 l + p log n`` with ``p = (k - 1) + k d``."""
    p = (k - 1) + k * d
    return {"AIC": -2.0 * loglik + 2.0 * p, "BIC": -2.0 * loglik + p * math.log(n), "n_params": p}


def wasserstein(w1, A, w2, B, r: float = 1.0) -> float:
    """``W_r`` between ``sum w1_i delta_{A_i}`` and ``sum w2_j delta_{B_j}`` (Euclidean ground metric), by LP."""
    w1, A = _check_measure(w1, A)
    w2, B = _check_measure(w2, B)
    k1, k2 = w1.size, w2.size
    C = np.sqrt(_sq_dist(A, B)) ** r  # [k1, k2]
    A_eq = np.zeros((k1 + k2, k1 * k2))
    for i in range(k1):
        A_eq[i, i * k2:(i + 1) * k2] = 1.0
    for j in range(k2):
        A_eq[k1 + j, j::k2] = 1.0
    # the two marginals are each normalised: the LP is feasible up to rounding of the last bit
    b = np.concatenate([w1 / w1.sum(), w2 / w2.sum()])
    res = linprog(C.ravel(), A_eq=A_eq[:-1], b_eq=b[:-1], bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"optimal transport LP failed: {res.message}")
    return float(max(res.fun, 0.0) ** (1.0 / r))


# --------------------------------------------------------------------------------------------------
# the example's design

@dataclass(frozen=True)
class ExampleConfig:
    """One design of the location-mixture example.

    ``PAPER_EXAMPLE``: k* = 3 atoms ``(2, 1), (0, 6), (-2, 1)`` with weights 1/3 and covariance
    ``I_2``, fitted with ``K_bar = 5`` (the strongly identifiable simulation of Do et al. 2024, as
    set in the authors' reproduction script ``test_convergence_rate_strong.R``).
    """

    weights: tuple = (1 / 3, 1 / 3, 1 / 3)
    means: tuple = ((2.0, 1.0), (0.0, 6.0), (-2.0, 1.0))
    k_bar: int = 5
    n_starts: int = 5
    tol: float = 1e-10
    max_iter: int = 5000
    seed: int = 0

    def __post_init__(self) -> None:
        w, mu = _check_measure(self.weights, self.means)
        if not (isinstance(self.k_bar, int) and self.k_bar > w.size):
            raise ValueError(f"K_bar must be an integer > k* = {w.size} (an over-fitted fit), got {self.k_bar!r}")
        if self.n_starts < 1 or self.max_iter < 1 or not self.tol > 0:
            raise ValueError("n_starts and max_iter must be >= 1 and tol > 0")

    @property
    def k_star(self) -> int:
        return len(self.weights)


PAPER_EXAMPLE = ExampleConfig()


def sample_location_mixture(n: int, weights, means, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of ``sum_j p_j N(theta_j, I_d)``: shape ``[n, d]``."""
    w, mu = _check_measure(weights, means)
    z = rng.choice(w.size, size=n, p=w)
    return mu[z] + rng.standard_normal((n, mu.shape[1]))


def run_replicate(config: ExampleConfig, n: int, r: int) -> dict:
    """One replicate: data, the fit ladder ``k = 1..K_bar``, dendrogram, DSC/AIC/BIC, losses.

    Seeds: data ``SeedSequence(seed, spawn_key=(n, r, 0))``; start ``s`` of the fit with ``k``
    atoms ``SeedSequence(seed, spawn_key=(n, r, 10 + k, s))`` (as :mod:`moestat.selection.study`),
    so a replicate's record does not depend on which others are run, or in what order.
    """
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    w0, mu0 = np.asarray(config.weights, float), np.asarray(config.means, float)
    X = sample_location_mixture(n, w0, mu0, np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(n, r, 0))))
    fits = fit_ladder(X, config.k_bar, lambda k, s: np.random.SeedSequence(config.seed, spawn_key=(n, r, 10 + k, s)),
                      n_starts=config.n_starts, tol=config.tol, max_iter=config.max_iter)
    d = X.shape[1]
    ic = {k: information_criteria(f.loglik, k, d, n) for k, f in fits.items()}
    over = fits[config.k_bar]
    dend = mixture_dendrogram(over.weights, over.means)
    dsc = dsc_scores(dend, X)
    k_star = config.k_star
    wm, mm = dend.level(k_star)
    ex = fits[k_star]
    return {
        "n": int(n), "replicate": int(r), "k_star": k_star, "k_bar": config.k_bar,
        "k_hat": {"DSC": dsc["k_hat"], "DSC_rescaled": dsc["k_hat_rescaled"],
                  "AIC": min(ic, key=lambda k: (ic[k]["AIC"], k)), "BIC": min(ic, key=lambda k: (ic[k]["BIC"], k))},
        "status": {str(k): f.status for k, f in fits.items()},
        "start_status": {str(k): list(f.start_status) for k, f in fits.items()},
        "n_iter": {str(k): f.n_iter for k, f in fits.items()},
        "loglik": {str(k): f.loglik for k, f in fits.items()},
        "heights": dend.heights.tolist(),
        "loss": {"W1_merged": wasserstein(wm, mm, w0, mu0, 1), "W1_exact": wasserstein(ex.weights, ex.means, w0, mu0, 1),
                 "W2_over": wasserstein(over.weights, over.means, w0, mu0, 2),
                 "W1_over": wasserstein(over.weights, over.means, w0, mu0, 1)},
        "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
    }
