"""Joint maximum likelihood of the Gaussian-gated MoE (GLLiM): a batched closed-form EM in torch.

The model of Nguyen, Nguyen, Nguyen & Ho (2024, "Towards Convergence Rates for Parameter
Estimation in Gaussian-gated Mixture of Experts", AISTATS 2024) is the *joint* Gaussian locally
linear mapping (GLLiM; Deleforge, Forbes & Horaud 2015) of ``(x, y)``::

    x ~ sum_i pi_i N(c_i, Gamma_i),      y | x, i ~ N(a_i^T x + b_i, nu_i),

so that ``p(y | x)`` is a mixture of linear experts whose gate ``pi_i N(x; c_i, Gamma_i) / sum_j
pi_j N(x; c_j, Gamma_j)`` has one covariance ``Gamma_i`` per atom.  The estimator of the paper's
theorems is the maximiser of the **joint** log-likelihood::

    l(G) = sum_n log sum_i pi_i N(x_n; c_i, Gamma_i) N(y_n; a_i^T x_n + b_i, nu_i).

(Fitting only ``p(y | x)`` with a known common kernel variance, as moestat's conditional Gaussian
gate does, is a softmax gate in disguise: a common shift of the centres leaves it unchanged, so it is
not identifiable -- docs/guide/catalogue.rst, ``gaussian-gated-moe``.)

Every M-step is in closed form, so EM is exact here (Dempster, Laird & Rubin 1977):

* **E-step** in log space, ``r_ni = exp(log pi_i + log N(x_n; c_i, Gamma_i) + log N(y_n; ...) -
  logsumexp_j(...))``, with a Cholesky factor of each ``Gamma_i``;
* ``pi_i = (1/n) sum_n r_ni``; ``c_i`` the ``r``-weighted mean of ``x``; ``Gamma_i`` the weighted
  covariance ``S_i`` with its eigenvalues floored at ``gamma_floor * var(x)`` (the mean coordinate
  variance of the replicate's ``x``): the likelihood is unbounded when an atom collapses on a point,
  and clamping the eigenvalues of ``S_i`` at the floor is the exact maximiser of ``-log det Gamma -
  tr(Gamma^{-1} S_i)`` over ``{Gamma : eigenvalues >= floor}``, so the floored EM stays monotone;
  every M-step where the floor binds is counted in ``n_floored`` (reported, never hidden);
* ``(a_i, b_i)`` by weighted least squares in centred form, ``a_i = S_i^{-1} s_{xy,i}`` and ``b_i =
  ybar_i - a_i^T c_i`` (``S_i`` unfloored: the least-squares solution, not the floored covariance);
* ``nu_i`` the weighted residual variance, floored at ``var_floor * var(y)`` (unimodal in ``nu``:
  the clamp is the constrained maximiser).

Every replicate and every start is one entry of a leading batch axis ``B``; one iteration is a few
batched tensor operations (no Python loop over entries).  An entry stops with status ``tol`` when
its log-likelihood changed by at most ``tol * n``, ``max_iter`` at the budget, ``nonfinite`` when
the log-likelihood is not finite and ``linalg_error`` when a weighted covariance ``S_i`` is singular
(an atom emptied out); a stopped entry leaves the batch (retirement) and keeps its last finite
parameters and status -- nothing is dropped.

The measure layout (:class:`~moestat.model.mixing.MixingMeasure`): ``beta0 = log pi``, ``beta1 =
c``, ``eta = (a [d], b, nu, vec Gamma [d*d])`` (row-major), so ``eta[:d]``, ``eta[d]``,
``eta[d+1]`` and ``eta[d+2:]`` are the blocks of the D-bar loss (:mod:`moestat.data.gllim_scenarios`);
the model's layout, density and mean function are :mod:`moestat.model.gllim_model`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.estimators.base import MoEEstimator
from moestat.estimators.validation import prepare_data
from moestat.model.gllim_model import gllim_loglik, gllim_mean, join_measure, split_measure
from moestat.model.mixing import MixingMeasure

__all__ = ["GLLiMEM", "fit_gllim_em", "random_gllim_start"]

_LOG2PI = math.log(2.0 * math.pi)


# ---- the EM -----------------------------------------------------------------------------------
# Every log-component is a quadratic form in (x, y): with the features
#   F_n = (1, x_n, x_ni x_nj (i <= j), y_n, y_n x_n, y_n^2)            [p = 2 + 2d + d(d+1)/2 + 1]
# it is F_n . W_i for a coefficient row W_i of (pi_i, c_i, Gamma_i, a_i, b_i, nu_i), so the E-step is
# one batched product [B, n, p] x [B, p, k]; and the M-step's sufficient statistics are the
# responsibility-weighted sums of the same features, one product [B, k, n] x [B, n, p].  The data
# are centred first (the model is translation-equivariant) so the expanded squares lose little.
def _features(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``F [B, n, p]`` (comment above)."""
    d = X.shape[-1]
    iu = torch.triu_indices(d, d)
    xx = X[..., iu[0]] * X[..., iu[1]]
    return torch.cat([torch.ones_like(Y)[..., None], X, xx, Y[..., None], Y[..., None] * X, (Y * Y)[..., None]], -1)


def _coefficients(logpi, c, Gamma, A, b, nu):
    """``W [B, k, p]`` with ``F_n . W_i = log pi_i + log N(x_n; c_i, Gamma_i) + log N(y_n; a_i^T x_n + b_i, nu_i)``;
    also ``bad [B]``: an entry with a covariance that is not positive definite or a variance <= 0."""
    d = c.shape[-1]
    L, info = torch.linalg.cholesky_ex(Gamma)
    bad = (info != 0).any(-1) | ~(nu > 0).all(-1)
    eye = torch.eye(d, dtype=Gamma.dtype).expand_as(Gamma)
    L = torch.where((info != 0)[..., None, None], eye, L)
    nu = torch.where(nu > 0, nu, torch.ones_like(nu))
    P = torch.cholesky_inverse(L)  # Gamma^{-1}
    logdet = 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
    Pc = (P @ c[..., None])[..., 0]
    const = logpi - 0.5 * (d * _LOG2PI + logdet + (c * Pc).sum(-1)) - 0.5 * (_LOG2PI + torch.log(nu) + b * b / nu)
    lin = Pc - (b / nu)[..., None] * A
    M = P + A[..., :, None] * A[..., None, :] / nu[..., None, None]
    iu = torch.triu_indices(d, d)
    quad = -0.5 * M[..., iu[0], iu[1]] * torch.where(iu[0] == iu[1], 1.0, 2.0).to(M.dtype)
    W = torch.cat([const[..., None], lin, quad, (b / nu)[..., None], A / nu[..., None], (-0.5 / nu)[..., None]], -1)
    return W, bad


def _m_step(T: torch.Tensor, d: int, n: int, gfloor: torch.Tensor, vfloor: torch.Tensor):
    """Closed-form M-step from the weighted feature sums ``T = r^T F [B, k, p]`` (module docstring).

    Returns ``(logpi, c, Gamma, A, b, nu, floored [B], singular [B])``.
    """
    m = d * (d + 1) // 2
    Nk = T[..., 0]
    Nsafe = torch.where(Nk > 0, Nk, torch.ones_like(Nk))
    c = T[..., 1:1 + d] / Nsafe[..., None]
    iu = torch.triu_indices(d, d)
    Sxx = torch.zeros(T.shape[:-1] + (d, d), dtype=T.dtype)
    Sxx[..., iu[0], iu[1]] = T[..., 1 + d:1 + d + m]
    Sxx[..., iu[1], iu[0]] = T[..., 1 + d:1 + d + m]
    o = 1 + d + m
    ybar = T[..., o] / Nsafe
    S = Sxx / Nsafe[..., None, None] - c[..., :, None] * c[..., None, :]
    sxy = T[..., o + 1:o + 1 + d] / Nsafe[..., None] - c * ybar[..., None]
    syy = T[..., o + 1 + d] / Nsafe - ybar * ybar
    logpi = torch.log(Nk / n)
    sol, info = torch.linalg.solve_ex(S, sxy[..., None])
    A = sol[..., 0]
    singular = (info != 0).any(-1) | (Nk <= 0).any(-1) | ~torch.isfinite(A).all(-1).all(-1)
    b = ybar - (A * c).sum(-1)
    nu_raw = syy - 2.0 * (A * sxy).sum(-1) + (A * (S @ A[..., None])[..., 0]).sum(-1)
    nu = torch.maximum(nu_raw, vfloor[:, None])
    evals, evecs = torch.linalg.eigh(S)
    low = evals < gfloor[:, None, None]
    Gamma = (evecs * torch.maximum(evals, gfloor[:, None, None])[..., None, :]) @ evecs.transpose(-1, -2)
    floored = low.any(-1).any(-1) | (nu_raw < vfloor[:, None]).any(-1)
    return logpi, c, Gamma, A, b, nu, floored, singular


def _e_step(F: torch.Tensor, params) -> tuple[torch.Tensor, torch.Tensor]:
    """Joint log-likelihood ``[b]`` (``-inf`` where a ``Gamma_i`` or ``nu_i`` is not positive
    definite) and the next M-step's sums ``sum_n r_ni F_n`` ``[b, k, p]``, from the features
    ``F [b, n, p]`` and ``params = [logpi, c, Gamma, A, b, nu]``."""
    W, bad = _coefficients(*params)
    lc = torch.bmm(F, W.transpose(1, 2))  # [b, n, k]
    lse = torch.logsumexp(lc, dim=-1)  # [b, n]
    ll = torch.where(bad, torch.full_like(lse[:, 0], -math.inf), lse.sum(-1))
    r = torch.exp(lc - lse[..., None])
    return ll, torch.bmm(r.transpose(1, 2), F)


def _centred(X: torch.Tensor, Y: torch.Tensor, logpi, c, Gamma, A, b, nu):
    """The EM's coordinates: centred data ``(x - mx, y - my)`` (better conditioned moments), where a
    start has ``c - mx`` and ``b + A^T mx - my`` and the same likelihood.

    Returns the features ``F [B, n, p]`` of the centred data, ``mx [B, d]``, ``my [B]`` and the
    start ``[logpi (normalised), c, Gamma, A, b, nu]`` in those coordinates (float64 copies).
    """
    dt = torch.float64
    mx, my = X.mean(1), Y.mean(1)  # [B, d], [B]
    F = _features(X - mx[:, None, :], Y - my[:, None])  # [B, n, p]
    lp0, c0, G0, A0, b0, nu0 = (t.to(dt).clone() for t in (logpi, c, Gamma, A, b, nu))
    lp0 = lp0 - torch.logsumexp(lp0, -1, keepdim=True)
    return F, mx, my, [lp0, c0 - mx[:, None, :], G0, A0, b0 + (A0 * mx[:, None, :]).sum(-1) - my[:, None], nu0]


def _uncentred(params: list, mx: torch.Tensor, my: torch.Tensor) -> dict:
    """Inverse of :func:`_centred` on ``[logpi, c, Gamma, A, b, nu]``: NumPy arrays by name, in the data's coordinates."""
    lp, cc, G, AA, bb, nn = params
    cc = cc + mx[:, None, :]
    bb = bb + my[:, None] - (AA * mx[:, None, :]).sum(-1)
    return {name: t.numpy() for name, t in zip(("logpi", "c", "Gamma", "A", "b", "nu"), (lp, cc, G, AA, bb, nn))}


def fit_gllim_em(X: torch.Tensor, Y: torch.Tensor, logpi, c, Gamma, A, b, nu, *, max_iter: int = 2000,
                 tol: float = 1e-8, gamma_floor: float = 1e-6, var_floor: float = 1e-6, keep_path: bool = True) -> dict:
    """Run the joint EM from every start of a batch (module docstring).

    Parameters
    ----------
    X : Tensor ``[B, n, d]``, float64
    Y : Tensor ``[B, n]``
    logpi, c, Gamma, A, b, nu : Tensor
        Starts, ``[B, k]``, ``[B, k, d]``, ``[B, k, d, d]``, ``[B, k, d]``, ``[B, k]``, ``[B, k]``
        (``logpi`` is normalised first).
    max_iter : int
        EM iterations per entry.
    tol : float
        An entry stops when its log-likelihood changes by at most ``tol * n`` in one iteration.
    gamma_floor, var_floor : float
        Floors of the eigenvalues of ``Gamma_i`` and of ``nu_i``, relative to the replicate's mean
        coordinate variance of ``x`` and variance of ``y``.
    keep_path : bool
        Record every entry's log-likelihood after each iteration.

    Returns
    -------
    dict
        ``logpi, c, Gamma, A, b, nu`` (NumPy, the entries' final parameters: the last finite
        iterate), ``loglik [B]`` (at those parameters), ``n_iter [B]``, ``status`` (list of ``B``
        str: ``tol``, ``max_iter``, ``nonfinite``, ``linalg_error``), ``n_floored [B]`` (M-steps in
        which a floor bound) and ``paths`` (list of ``B`` arrays: the log-likelihood at the start
        and after each iteration).
    """
    B, n, d = X.shape
    dt = torch.float64
    X, Y = X.to(dt), Y.to(dt)
    F, mx, my, cur = _centred(X, Y, logpi, c, Gamma, A, b, nu)
    gfloor = gamma_floor * X.var(dim=1, unbiased=False).mean(-1)  # [B]
    vfloor = var_floor * Y.var(dim=1, unbiased=False)
    out = [t.clone() for t in cur]
    loglik = torch.full((B,), -math.inf, dtype=dt)
    n_iter = np.zeros(B, dtype=np.int64)
    n_floored = np.zeros(B, dtype=np.int64)
    status = ["max_iter"] * B
    paths: list[list[float]] = [[] for _ in range(B)]
    act = torch.arange(B)

    ll_prev, T = _e_step(F[act], cur)
    for j, e in enumerate(act.tolist()):
        paths[e].append(float(ll_prev[j]))
    start_bad = ~torch.isfinite(ll_prev)
    if bool(start_bad.any()):
        for j in torch.nonzero(start_bad).flatten().tolist():
            status[int(act[j])] = "nonfinite"
        keep = torch.nonzero(~start_bad).flatten()
        act, cur, ll_prev, T = act[keep], [t[keep] for t in cur], ll_prev[keep], T[keep]
    loglik[act] = ll_prev
    for it in range(1, max_iter + 1):
        if act.numel() == 0:
            break
        *new, floored, singular = _m_step(T, d, n, gfloor[act], vfloor[act])
        ll, T = _e_step(F[act], new)
        n_floored[act.numpy()] += floored.numpy().astype(np.int64)
        bad = singular | ~torch.isfinite(ll)
        good = ~bad
        # an entry whose step failed keeps its previous (finite) iterate and log-likelihood
        for t_out, t_prev, t_new in zip(out, cur, new):
            t_out[act] = torch.where(good.reshape((-1,) + (1,) * (t_new.ndim - 1)), t_new, t_prev)
        loglik[act] = torch.where(good, ll, ll_prev)
        a_np = act.numpy()
        n_iter[a_np] = it
        if keep_path:
            ll_np, good_np = ll.numpy(), good.numpy()
            for j, e in enumerate(a_np.tolist()):
                if good_np[j]:
                    paths[e].append(float(ll_np[j]))
        done = bad | ((ll - ll_prev).abs() <= tol * n)
        for j in torch.nonzero(done).flatten().tolist():
            status[int(act[j])] = "linalg_error" if bool(singular[j]) else ("nonfinite" if bool(bad[j]) else "tol")
        keep = torch.nonzero(~done).flatten()
        act = act[keep]
        cur = [t[keep] for t in new]
        ll_prev, T = ll[keep], T[keep]
    res = _uncentred(out, mx, my)
    res.update(loglik=loglik.numpy(), n_iter=n_iter, status=status, n_floored=n_floored,
               paths=[np.asarray(p) for p in paths])
    return res


def random_gllim_start(X: np.ndarray, Y: np.ndarray, k: int, rng: np.random.Generator, hard: float = 0.9) -> MixingMeasure:
    """A data-driven random start: ``k`` distinct sample points of the standardised ``(x, y)``
    drawn as seeds, each point given to its nearest seed with weight ``hard`` (the rest spread
    evenly, so no atom is empty), then one closed-form M-step.

    Parameters
    ----------
    X : ndarray ``[n, d]``
    Y : ndarray ``[n]``
    k : int
    rng : numpy Generator

    Returns
    -------
    MixingMeasure (unbatched, GLLiM layout)
    """
    n, d = X.shape
    Z = np.column_stack([X, Y])
    Z = (Z - Z.mean(0)) / np.where(Z.std(0) > 0, Z.std(0), 1.0)
    seeds = Z[rng.choice(n, size=k, replace=False)]
    near = np.argmin(((Z[:, None, :] - seeds[None]) ** 2).sum(-1), axis=1)
    r = np.full((k, n), (1.0 - hard) / k)
    r[near, np.arange(n)] += hard
    Xt, Yt = torch.as_tensor(X[None]), torch.as_tensor(Y[None])
    T = torch.as_tensor(r[None]) @ _features(Xt, Yt)
    gf = 1e-6 * Xt.var(dim=1, unbiased=False).mean(-1)
    vf = 1e-6 * Yt.var(dim=1, unbiased=False)
    lp, c, G, A, b, nu, _, _ = _m_step(T, d, n, gf, vf)
    return join_measure(*(t[0].numpy() for t in (lp, c, G, A, b, nu)))


class GLLiMEM(MoEEstimator):
    """Joint maximum likelihood of the Gaussian-gated MoE (GLLiM) by closed-form EM, batched.

    Parameters
    ----------
    n_components : int
        Number of atoms ``k``.
    max_iter : int
        EM iterations per start.
    tol : float
        A start has converged when its log-likelihood changes by at most ``tol * n`` per iteration.
    n_init : int
        Starts per replicate.  With an ``init`` of batch ``()`` or ``(R,)``: the given start plus
        ``n_init - 1`` random starts (:func:`random_gllim_start`); without ``init``: ``n_init``
        random starts; an ``init [R, S]`` gives the starts explicitly.
    gamma_floor, var_floor : float
        Relative floors of the eigenvalues of ``Gamma_i`` and of ``nu_i`` (:func:`fit_gllim_em`).
    random_state : None, int, SeedSequence or Generator
        Seeds the random starts.
    device : str
        Only ``cpu`` (the EM is small dense algebra).

    Attributes
    ----------
    params_ : MixingMeasure
        ``beta0 = log pi [R, k]``, ``beta1 = c [R, k, d]``, ``eta = (a, b, nu, vec Gamma)`` ``[R, k,
        d + 2 + d*d]``: the best start of each replicate by log-likelihood.
    loglik_ : ndarray ``[R]``
        Joint log-likelihood of the best start.
    loglik_starts_ : ndarray ``[R, S]``
        Every start's final log-likelihood.
    loglik_path_ : list of ndarray
        The best start's log-likelihood at its start and after each iteration.
    status_ : list of str
        The best start's: ``tol`` (converged), ``max_iter``, ``nonfinite``, ``linalg_error``.
    n_floored_ : ndarray ``[R]``
        M-steps of the best start in which a covariance or variance floor bound (0: the floors
        never changed the fit).
    objective_ : ndarray ``[R]``
        The contract's mean squared residual of ``E[y | x]`` (:func:`~moestat.model.gllim_model.gllim_mean`).
    converged_, n_iter_, n_starts_
    """

    def __init__(self, n_components: int = 2, *, max_iter: int = 2000, tol: float = 1e-8, n_init: int = 1,
                 gamma_floor: float = 1e-6, var_floor: float = 1e-6, random_state=0, device: str = "cpu") -> None:
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.gamma_floor = gamma_floor
        self.var_floor = var_floor
        self.random_state = random_state
        self.device = device

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "GLLiMEM":
        return cls(int(scenario.k_fit), max_iter=max_iter, n_init=scenario.declaration.n_starts,
                   gamma_floor=float(getattr(scenario, "gamma_floor", 1e-6)), random_state=random_state, device=device)

    def _check_params(self) -> None:
        for nm, v in (("n_components", self.n_components), ("max_iter", self.max_iter), ("n_init", self.n_init)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}")
        for nm, v in (("tol", self.tol), ("gamma_floor", self.gamma_floor), ("var_floor", self.var_floor)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (nm != "tol" and v == 0):
                raise ValueError(f"{nm} must be a finite number {'>= 0' if nm == 'tol' else '> 0'}, got {v!r}")
        if str(self.device) not in ("cpu", "auto"):
            raise ValueError(f"the GLLiM EM runs on the CPU, got device {self.device!r}")
        self._rng()

    def _starts(self, X: np.ndarray, Y: np.ndarray, init, k: int) -> MixingMeasure:
        """Starts ``[R, S]`` (class docstring)."""
        R, n, d = X.shape
        rng = self._rng()
        q = d + 2 + d * d
        if init is None:
            return MixingMeasure.stack([MixingMeasure.stack([random_gllim_start(X[r], Y[r], k, g) for g in rng.spawn(self.n_init)])
                                        for r in range(R)])
        G = init.numpy()
        if G.n_atoms != k or G.dim != d or G.eta_dim != q:
            raise ValueError(f"init must have k={k} atoms, beta1 [..., {k}, {d}] and eta [..., {k}, {q}] (a, b, nu, vec Gamma), "
                             f"got beta1 {G.beta1.shape}, eta {G.eta.shape}")
        bs = G.batch_shape
        if len(bs) == 2 and bs[0] == R:
            return G
        if bs not in ((), (R,)):
            raise ValueError(f"init must have batch shape (), ({R},) or ({R}, S), got {bs}")
        G = MixingMeasure(*(np.broadcast_to(a, (R,) + a.shape[len(bs):]) for a in (G.beta0, G.beta1, G.eta)))
        rows = []
        for r in range(R):
            given = MixingMeasure(G.beta0[r], G.beta1[r], G.eta[r])
            rows.append(MixingMeasure.stack([given] + [random_gllim_start(X[r], Y[r], k, g) for g in rng.spawn(self.n_init - 1)]))
        return MixingMeasure.stack(rows)

    def fit(self, X, Y, init: MixingMeasure | None = None) -> "GLLiMEM":
        """Fit every replicate (all starts in one batch) and keep each replicate's best start.

        Parameters
        ----------
        X : array or Tensor ``[R, n, d]`` (or ``[n, d]``)
        Y : array or Tensor ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            Batch ``()``, ``(R,)`` or ``(R, S)``, GLLiM layout (:func:`~moestat.model.gllim_model.split_measure`).

        Returns
        -------
        GLLiMEM
        """

        self._check_params()
        k = int(self.n_components)
        Xt, Yt = prepare_data(X, Y, k, torch.device("cpu"), min_samples=max(2, k))
        Xn, Yn = Xt.numpy(), Yt.numpy()
        R, n, d = Xn.shape
        G = self._starts(Xn, Yn, init, k)
        S = G.beta0.shape[1]
        flat = MixingMeasure(*(np.ascontiguousarray(a.reshape((R * S,) + a.shape[2:])) for a in (G.beta0, G.beta1, G.eta)))
        parts = [torch.as_tensor(np.ascontiguousarray(p)) for p in split_measure(flat, d)]
        rep = torch.arange(R).repeat_interleave(S)
        res = fit_gllim_em(Xt[rep], Yt[rep], *parts, max_iter=int(self.max_iter), tol=float(self.tol),
                           gamma_floor=float(self.gamma_floor), var_floor=float(self.var_floor))
        ll = res["loglik"].reshape(R, S)
        best = np.argmax(np.where(np.isfinite(ll), ll, -np.inf), axis=1)
        pick = np.arange(R) * S + best
        params = join_measure(*(res[nm][pick] for nm in ("logpi", "c", "Gamma", "A", "b", "nu")))
        self.loglik_ = ll[np.arange(R), best]
        self.loglik_starts_ = ll
        self.loglik_path_ = [res["paths"][i] for i in pick]
        self.n_floored_ = res["n_floored"][pick]
        self.n_starts_ = S
        self.best_start_ = best
        status = [res["status"][i] for i in pick]
        self.params_, self.n_features_in_ = params.numpy(), d
        objective = np.mean((Yn - self.predict(Xn)) ** 2, axis=1)
        objective = np.where(np.isfinite(self.loglik_), objective, np.nan)
        self._set_fit(params, objective, np.array([s == "tol" for s in status]), res["n_iter"][pick], status, d)
        return self

    def predict(self, X) -> np.ndarray:
        """The fitted regression function ``E[y | x]`` (:func:`~moestat.model.gllim_model.gllim_mean`), ``[R, n]``."""
        Xt = self._check_X(X)
        return gllim_mean(Xt.numpy(), self.params_)

    def loglik(self, X, Y) -> np.ndarray:
        """The joint log-likelihood of the fit on ``(X, Y)`` (:func:`~moestat.model.gllim_model.gllim_loglik`), ``[R]``."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "params_")
        return gllim_loglik(X, Y, self.params_)
