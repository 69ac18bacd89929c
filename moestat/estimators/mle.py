"""Maximum likelihood for the softmax-gated Gaussian mixture of experts: batched EM in torch.

Model (:mod:`moestat.model.gaussian_moe`), with ``x~ = (x, 1)`` and the last atom the reference
(``beta0_k = 0``, ``beta1_k = 0``)::

    p(y | x) = sum_i softmax_i(V_i^T x~) N(y; E_i^T x~, sigma_i^2),   V_i = (beta1_i, beta0_i),
                                                                      E_i = (a_i, b_i).

Every replicate and every start of it is one entry of a leading batch axis ``B = R x S``; one
EM iteration is a handful of batched matrix products over that axis (no Python loop over
replicates), and a start that has converged leaves the batch (compaction), so the slowest start
alone sets the cost of the last iterations.  One iteration:

* **E-step** in log space: ``r_ni = exp(log pi_i + log N_i - logsumexp_j(...))``.
* **Experts** by batched weighted least squares (normal equations ``(X~^T R_i X~) E_i =
  X~^T R_i y``, one ``[p, p]`` solve per atom), then ``sigma_i^2 = sum_n r_ni (y_n - E_i^T
  x~_n)^2 / sum_n r_ni`` (``variance="per_expert"``) or the pooled ``sum_ni r_ni (...)^2 / n``
  (``"shared"``).  The variance is floored at ``var_floor * var(y)``: the likelihood of a
  Gaussian mixture is unbounded (a component collapsing on one point), and the floored update is
  still the exact maximiser of the expected complete-data log-likelihood over the allowed set
  (it is unimodal in ``sigma^2``), so the floor keeps EM monotone.
* **Gate** by Newton/IRLS steps on the concave ``Q_g(V) = sum_ni r_ni log pi_i(x_n; V)`` over
  the free rows ``V_1..V_{k-1}``, each step halved until ``Q_g`` does not decrease.

Each M-step does not decrease the expected complete-data log-likelihood, so the observed
log-likelihood never decreases (generalised EM; Dempster, Laird & Rubin 1977) -- a hypothesis
test checks every trace.  A start stops when the per-sample log-likelihood changes by at most
``tol``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.estimators.base import MoEEstimator
from moestat.estimators.validation import prepare_data
from moestat.model.gaussian_moe import mean_function
from moestat.model.mixing import MixingMeasure

__all__ = ["MLEGaussianMoE", "VARIANCES"]

VARIANCES = ("per_expert", "shared")
_LOG2PI = math.log(2.0 * math.pi)


def _check_model(model, k: int) -> None:
    if model is None:
        return
    gate, expert = getattr(model, "gate", None), getattr(model, "expert", None)
    if gate is None or expert is None:
        raise ValueError(f"model must be a moestat.model.regression.MoEModel (gate, expert) or None, got {model!r}")
    kind, k_active = getattr(gate, "kind", None), getattr(gate, "k_active", None)
    # Top-K with K >= k activates every expert: the dense gate
    dense = k_active is None or k_active >= k
    if kind != "linear" or not dense or getattr(expert, "activation", None) != "identity":
        raise ValueError(
            f"the Gaussian-MoE MLE needs the dense linear softmax gate with identity (linear) experts, got {model!r}; "
            "use the least-squares estimator for cosine/perturbed or Top-K gates"
        )


class MLEGaussianMoE(MoEEstimator):
    """Maximum-likelihood (EM) estimator of a softmax-gated Gaussian MoE, batched over replicates and starts.

    Parameters
    ----------
    model : MoEModel or None
        ``None`` or a dense ``linear`` gate with ``identity`` experts (the only model this
        likelihood is written for); an integer here is read as ``n_components``.
    n_components : int
        Number of atoms ``k`` (default 2).
    variance : {"per_expert", "shared"}
        One variance per expert (Nguyen, Nguyen & Ho 2023) or one for all (Jordan & Jacobs 1994).
    eta_variance : bool
        ``True``: ``params_.eta`` is ``(a, b, sigma^2)`` per atom (``[R, k, d + 2]``, the
        Gaussian-MoE measure); ``False``: ``(a, b)`` only (``[R, k, d + 1]``, the regression
        measure of the other estimators) with the variances in ``variances_``.
    max_iter : int
        EM iterations per start.
    tol : float
        A start has converged when the per-sample log-likelihood changes by at most ``tol``.
    n_init : int
        Starts per replicate.  Without ``init``: random-partition starts; with an ``init [R]``:
        the given start plus ``n_init - 1`` jittered copies (``init_jitter``).  An ``init`` of batch
        shape ``[R, S]`` gives the ``S`` starts explicitly and ``n_init`` is ignored.
    init_jitter : float
        Standard deviation of the noise of the jittered copies (on ``beta0``, ``beta1``, ``a``,
        ``b`` and ``log sigma^2``).
    var_floor : float
        Floor of every variance, relative to ``var(y)`` of the replicate.
    gate_newton_steps : int
        Newton steps of the gate per M-step.
    random_state : None, int, SeedSequence or Generator
        Seeds the random starts and jitters.
    device : str
        ``cpu`` (default), ``cuda[:N]`` or ``auto``.

    Attributes
    ----------
    params_ : MixingMeasure
        Best start of each replicate: ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]``
        (or ``d + 1``, see ``eta_variance``); last atom the reference.  NaN where the fit failed.
    variances_ : ndarray, shape ``[R, k]``
    loglik_ : ndarray, shape ``[R]``
        Final observed-data log-likelihood (sum over samples) of the best start.
    loglik_path_ : list of ndarray
        Log-likelihood after every EM iteration (the start first) of the best start, per replicate.
    objective_ : ndarray, shape ``[R]``
        Mean squared residual of the fitted mean function (the estimator contract).
    converged_, n_iter_, status_
        Of the best start: ``"tol"``, ``"max_iter"`` or ``"nonfinite"``.

    Examples
    --------
    >>> import numpy as np
    >>> from moestat.data.gaussian_scenarios import model1_scenario
    >>> sc = model1_scenario("exact")
    >>> X, Y = sc.sample(500, np.random.default_rng(0))
    >>> est = MLEGaussianMoE(n_components=2, random_state=0, n_init=3).fit(X, Y)
    >>> est.params_.eta.shape, est.status_
    ((1, 2, 3), ['tol'])
    """

    def __init__(
        self,
        model=None,
        n_components: int | None = None,
        *,
        variance: str = "per_expert",
        eta_variance: bool = True,
        max_iter: int = 1000,
        tol: float = 1e-10,
        n_init: int = 1,
        init_jitter: float = 0.1,
        var_floor: float = 1e-6,
        gate_newton_steps: int = 1,
        random_state=0,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.variance = variance
        self.eta_variance = eta_variance
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.init_jitter = init_jitter
        self.var_floor = var_floor
        self.gate_newton_steps = gate_newton_steps
        self.random_state = random_state
        self.device = device

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "MLEGaussianMoE":
        # a Gaussian-MoE scenario has atoms (a, b, sigma^2); a regression scenario has (a, b)
        gaussian = bool(getattr(scenario, "gaussian_moe", False))
        model = None if gaussian else scenario.fit_model
        return cls(model, scenario.k_fit, eta_variance=gaussian, max_iter=max_iter, random_state=random_state,
                   device=device, n_init=getattr(scenario, "n_starts", 1))

    def _k(self) -> int:
        model, k = self.model, self.n_components
        if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
            if k is not None:
                raise ValueError("give the number of experts once: MLEGaussianMoE(model, n_components) or MLEGaussianMoE(k)")
            k = model
        return 2 if k is None else k

    def _check_params(self) -> None:
        k = self._k()
        for nm, v in (("n_components", k), ("max_iter", self.max_iter), ("n_init", self.n_init),
                      ("gate_newton_steps", self.gate_newton_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}")
        if not isinstance(self.model, (int, np.integer)):
            _check_model(self.model, int(k))
        if self.variance not in VARIANCES:
            raise ValueError(f"variance must be one of {', '.join(VARIANCES)}, got {self.variance!r}")
        for nm, v, pos in (("tol", self.tol, False), ("init_jitter", self.init_jitter, False),
                           ("var_floor", self.var_floor, True)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (pos and v == 0):
                raise ValueError(f"{nm} must be a finite number {'> 0' if pos else '>= 0'}, got {v!r}")
        resolve_device(self.device)
        self._rng()

    # ---- starts ----------------------------------------------------------------------------
    def _starts(self, X: np.ndarray, Y: np.ndarray, init, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Batched starts ``V [R, S, k, p]``, ``E [R, S, k, p]``, ``s2 [R, S, k]`` (``None``: from the data)."""
        from moestat.estimators.starts import random_partition_init

        R, n, d = X.shape
        rng = self._rng()
        if init is None:
            G = MixingMeasure.stack([
                MixingMeasure.stack([random_partition_init(X[r], Y[r], k, g) for g in rng.spawn(self.n_init)])
                for r in range(R)
            ])
        else:
            G = init.numpy()
            if G.n_atoms != k or G.dim != d or G.eta_dim not in (d + 1, d + 2):
                raise ValueError(
                    f"init must have k={k} atoms, beta1 [..., {k}, {d}] and eta [..., {k}, {d + 1} or {d + 2}], "
                    f"got beta1 {G.beta1.shape}, eta {G.eta.shape}"
                )
            bs = G.batch_shape
            if bs == ():
                G = MixingMeasure(*(np.broadcast_to(a, (R, 1) + a.shape) for a in (G.beta0, G.beta1, G.eta)))
            elif bs == (R,):
                G = MixingMeasure(*(a[:, None] for a in (G.beta0, G.beta1, G.eta)))
            elif len(bs) != 2 or bs[0] != R:
                raise ValueError(f"init must have batch shape (), ({R},) or ({R}, S), got {bs}")
            if len(bs) < 2 and self.n_init > 1:
                G = self._jitter(G, self.n_init, rng)
        V = np.concatenate([G.beta1, G.beta0[..., None]], axis=-1)
        V = V - V[..., -1:, :]  # reference convention (softmax is invariant to a common shift)
        E = np.ascontiguousarray(G.eta[..., : d + 1])
        s2 = np.ascontiguousarray(G.eta[..., d + 1]) if G.eta_dim == d + 2 else None
        return V, E, s2

    def _jitter(self, G: MixingMeasure, S: int, rng: np.random.Generator) -> MixingMeasure:
        """``G [R, 1]`` and ``S - 1`` noisy copies of it, ``[R, S]``; variances jittered on the log scale."""
        R, _, k = G.beta0.shape
        sd = self.init_jitter
        b0 = np.repeat(G.beta0, S, axis=1) + sd * rng.standard_normal((R, S, k))
        b1 = np.repeat(G.beta1, S, axis=1) + sd * rng.standard_normal((R, S) + G.beta1.shape[2:])
        eta = np.repeat(G.eta, S, axis=1).copy()
        d = G.dim
        eta[..., : d + 1] += sd * rng.standard_normal(eta[..., : d + 1].shape)
        if G.eta_dim == d + 2:
            eta[..., d + 1] *= np.exp(sd * rng.standard_normal(eta.shape[:-1]))
        for a, ref in ((b0, G.beta0), (b1, G.beta1), (eta, G.eta)):
            a[:, 0] = ref[:, 0]  # the given start itself is start 0
        return MixingMeasure(b0, b1, eta)

    # ---- fitting ---------------------------------------------------------------------------
    def fit(self, X, Y, init: MixingMeasure | None = None) -> "MLEGaussianMoE":
        """Fit every replicate (every start batched) and keep the best start of each.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]``)
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            Batch shape ``()``, ``(R,)`` or ``(R, S)``; ``eta`` with ``d + 2`` columns (a, b,
            sigma^2) or ``d + 1`` (a, b; the starting variances are then the weighted residual
            variances under the start).

        Returns
        -------
        MLEGaussianMoE
        """
        self._check_params()
        k = int(self._k())
        dev = resolve_device(self.device)
        Xt, Yt = prepare_data(X, Y, k, torch.device("cpu"), min_samples=2)
        Xn, Yn = Xt.numpy(), Yt.numpy()
        R, n, d = Xn.shape
        V0, E0, s20 = self._starts(Xn, Yn, init, k)
        S = V0.shape[1]
        res = fit_em(
            Xt.to(dev), Yt.to(dev), torch.as_tensor(V0, device=dev), torch.as_tensor(E0, device=dev),
            None if s20 is None else torch.as_tensor(s20, device=dev),
            shared=self.variance == "shared", max_iter=int(self.max_iter), tol=float(self.tol),
            var_floor=float(self.var_floor), newton_steps=int(self.gate_newton_steps),
        )
        ll = res["loglik"].reshape(R, S)
        best = np.argmax(np.where(np.isfinite(ll), ll, -np.inf), axis=1)
        pick = np.arange(R) * S + best
        V, E, s2 = res["V"][pick], res["E"][pick], res["s2"][pick]
        eta = np.concatenate([E, s2[..., None]], axis=-1) if self.eta_variance else E
        params = MixingMeasure(V[..., -1], V[..., :-1], eta)
        self.variances_ = s2
        self.loglik_ = ll[np.arange(R), best]
        self.loglik_path_ = [res["paths"][i] for i in pick]
        self.n_starts_ = S
        status = [res["status"][i] for i in pick]
        self.params_, self.n_features_in_ = params.numpy(), d
        objective = np.mean((Yn - self.predict(Xn)) ** 2, axis=1)
        self._set_fit(params, objective, np.array([s == "tol" for s in status]), res["n_iter"][pick], status, d)
        return self

    def predict(self, X) -> np.ndarray:
        """Fitted mean function ``sum_i pi_i(x) (a_i^T x + b_i)``, shape ``[R, n]``."""
        Xt = self._check_X(X)
        p = self.params_
        G = MixingMeasure(p.beta0, p.beta1, np.concatenate([p.eta[..., : self.n_features_in_ + 1],
                                                            self.variances_[..., None]], axis=-1))
        return mean_function(Xt, G)


# ---- the batched EM ------------------------------------------------------------------------------
# Layout: per-sample arrays are [B, k, n] (atoms before samples), so that every elementwise pass and
# every reduction over the k atoms runs on contiguous rows of n; the sums over samples are GEMMs
# with the long n as the inner dimension ([B, k, n] @ [B, n, p^2]).  (A [B, n, k] layout with
# torch.logsumexp over a last dimension of size 2 was 3-5 times slower on the CPU.)
def _affine(P, Xd):
    """``P[..., :d] . x + P[..., d]`` for every atom and sample: ``P [B, k, p]``, ``Xd [B, d, n]`` -> ``[B, k, n]``."""
    d = Xd.shape[1]
    out = P[..., d:].expand(-1, -1, Xd.shape[2]).clone()
    for j in range(d):  # d is small here: d fused multiply-adds beat a GEMM with inner size d
        out.addcmul_(P[..., j : j + 1], Xd[:, j : j + 1, :])
    return out


def _log_softmax_atoms(L):
    """Log-softmax over the atoms (dim 1) of ``L [B, k, n]``."""
    z = L - L.amax(1, keepdim=True)
    return z - torch.log(torch.exp(z).sum(1, keepdim=True))


def _e_step(Xd, y, V, E, s2, log_pi=None):
    """``log pi + log N`` ``[B, k, n]``, the per-sample log-likelihood ``[B, 1, n]`` and ``log pi``."""
    if log_pi is None:
        log_pi = _log_softmax_atoms(_affine(V, Xd))
    resid = y.unsqueeze(1) - _affine(E, Xd)
    lj = log_pi - 0.5 * (_LOG2PI + torch.log(s2)).unsqueeze(-1) - 0.5 * resid**2 / s2.unsqueeze(-1)
    m = lj.amax(1, keepdim=True)
    return lj, m + torch.log(torch.exp(lj - m).sum(1, keepdim=True)), log_pi


def _m_experts(Xd, XX, Xy, y, r, E, s2, floor, shared):
    """Weighted least squares per atom, then the (floored) variances; an empty atom keeps its expert."""
    B, k, n = r.shape
    p = Xd.shape[1] + 1
    A = (r @ XX).reshape(B, k, p, p)
    rhs = r @ Xy  # [B, k, p]
    eye = torch.eye(p, dtype=r.dtype, device=r.device)
    # a relative ridge of 1e-12 only guards exactly singular systems (an atom on < p distinct x)
    tr = A.diagonal(dim1=-2, dim2=-1).sum(-1)
    sol, info = torch.linalg.solve_ex(A + (1e-12 * tr + 1e-300)[..., None, None] * eye, rhs.unsqueeze(-1))
    mass = r.sum(-1)  # [B, k]
    ok = (info == 0) & (mass > 1e-8 * n) & torch.isfinite(sol).all(-2).squeeze(-1)
    E = torch.where(ok.unsqueeze(-1), sol.squeeze(-1), E)
    wss = (r * (y.unsqueeze(1) - _affine(E, Xd)) ** 2).sum(-1)
    if shared:
        new = (wss.sum(-1, keepdim=True) / n).expand(-1, k)
    else:
        new = torch.where(ok, wss / mass.clamp_min(1e-300), s2)
    return E, torch.maximum(new, floor.unsqueeze(-1))


def _m_gate(Xd, Xe, XX, r, V, log_pi, steps):
    """Newton steps with halving on ``Q_g(V) = sum r log pi(V)`` over rows ``0..k-2``; returns ``V, log_pi``."""
    B, k, n = r.shape
    p = Xe.shape[2]
    if k == 1:
        return V, log_pi
    m = (k - 1) * p
    cur = (r * log_pi).sum((1, 2))
    for _ in range(steps):
        P = log_pi[:, :-1].exp()  # [B, k-1, n]
        g = ((r[:, :-1] - P) @ Xe).reshape(B, m)
        # Hessian of -Q_g: blocks X~^T diag(pi_i (delta_ij - pi_j)) X~
        W = P.unsqueeze(2) * (torch.eye(k - 1, dtype=P.dtype, device=P.device).unsqueeze(-1) - P.unsqueeze(1))
        H = (W.reshape(B, (k - 1) ** 2, n) @ XX).reshape(B, k - 1, k - 1, p, p)
        H = H.permute(0, 1, 3, 2, 4).reshape(B, m, m)
        tr = H.diagonal(dim1=-2, dim2=-1).sum(-1)
        H = H + (1e-10 * tr / m + 1e-300)[:, None, None] * torch.eye(m, dtype=H.dtype, device=H.device)
        step, info = torch.linalg.solve_ex(H, g.unsqueeze(-1))
        step = torch.where((info == 0)[:, None], step.squeeze(-1), torch.zeros_like(g)).reshape(B, k - 1, p)
        t = torch.ones(B, dtype=V.dtype, device=V.device)
        todo = torch.arange(B, device=V.device)
        newV, newlp = V.clone(), log_pi.clone()
        for _ in range(40):  # halve until Q_g does not decrease (it is concave: a small step ascends)
            Vc = V[todo].clone()
            Vc[:, :-1] += t[todo, None, None] * step[todo]
            lp = _log_softmax_atoms(_affine(Vc, Xd[todo]))
            q = (r[todo] * lp).sum((1, 2))
            acc = q >= cur[todo]
            idx = todo[acc]
            newV[idx], newlp[idx], cur[idx] = Vc[acc], lp[acc], q[acc]
            todo = todo[~acc]
            if todo.numel() == 0:
                break
            t[todo] *= 0.5
        V, log_pi = newV, newlp  # a batch entry never accepted keeps its V (a zero step)
    return V, log_pi


def fit_em(X, Y, V, E, s2=None, *, shared=False, max_iter=1000, tol=1e-10, var_floor=1e-6, newton_steps=1) -> dict:
    """Batched EM from ``S`` starts per replicate.

    Parameters
    ----------
    X : Tensor, shape ``[R, n, d]``
    Y : Tensor, shape ``[R, n]``
    V, E : Tensor, shape ``[R, S, k, d + 1]``
        Gate ``(beta1, beta0)`` (last row 0) and experts ``(a, b)`` of every start.
    s2 : Tensor, shape ``[R, S, k]``, optional
        Starting variances; default (and always with ``shared``) the responsibility-weighted
        residual variances under the start.

    Returns
    -------
    dict
        NumPy, flat over ``B = R S`` (replicate-major): ``V, E [B, k, p]``, ``s2 [B, k]``,
        ``loglik [B]``, ``n_iter [B]``, ``status`` (list), ``paths`` (list of ``[n_iter + 1]``).
    """
    R, n, d = X.shape
    S, k, p = V.shape[1], V.shape[2], d + 1
    B = R * S
    rep = torch.arange(R, device=X.device).repeat_interleave(S)
    Xe = torch.cat([X, torch.ones(R, n, 1, dtype=X.dtype, device=X.device)], dim=-1)[rep]  # [B, n, p]
    Xd = X.transpose(1, 2).contiguous()[rep]  # [B, d, n]
    ya = Y[rep]
    XX = (Xe.unsqueeze(-1) * Xe.unsqueeze(-2)).reshape(B, n, p * p)
    Xy = Xe * ya.unsqueeze(-1)
    fa = (var_floor * Y.var(dim=1).clamp_min(1e-300))[rep]
    V, E = V.reshape(B, k, p).clone(), E.reshape(B, k, p).clone()
    if s2 is None or shared:  # a shared-variance EM starts inside its model: one pooled variance
        pi = torch.exp(_log_softmax_atoms(_affine(V, Xd)))
        wr2 = pi * (ya.unsqueeze(1) - _affine(E, Xd)) ** 2
        if shared:
            s2 = (wr2.sum((1, 2)) / n).unsqueeze(-1).expand(-1, k)
        else:
            s2 = wr2.sum(-1) / pi.sum(-1).clamp_min(1e-300)
    s2 = torch.maximum(s2.reshape(B, k), fa.unsqueeze(-1)).clone()
    n_iter = np.zeros(B, dtype=np.int64)
    status = ["max_iter"] * B
    act = torch.arange(B, device=X.device)  # active batch entries (indices into 0..B-1)
    lj, ll_n, log_pi = _e_step(Xd, ya, V, E, s2)
    ll = ll_n.sum((1, 2))
    trace = [(act.cpu().numpy(), ll.cpu().numpy())]
    it = 0
    while act.numel() and it < max_iter:
        it += 1
        r = torch.exp(lj - ll_n)
        Ea, s2a = _m_experts(Xd, XX, Xy, ya, r, E[act], s2[act], fa, shared)
        Va, log_pi = _m_gate(Xd, Xe, XX, r, V[act], log_pi, newton_steps)
        E[act], s2[act], V[act] = Ea, s2a, Va
        lj, ll_n, log_pi = _e_step(Xd, ya, Va, Ea, s2a, log_pi)
        ll_new = ll_n.sum((1, 2))
        trace.append((act.cpu().numpy(), ll_new.cpu().numpy()))
        bad = ~torch.isfinite(ll_new)
        done = bad | ((ll_new - ll).abs() <= tol * n)
        ll = ll_new
        if bool(done.any()):
            for j in torch.nonzero(done).flatten().tolist():
                b = int(act[j])
                status[b] = "nonfinite" if bool(bad[j]) else "tol"
                n_iter[b] = it
            keep = ~done
            act, Xd, Xe, XX, Xy, ya, fa = act[keep], Xd[keep], Xe[keep], XX[keep], Xy[keep], ya[keep], fa[keep]
            lj, log_pi, ll_n, ll = lj[keep], log_pi[keep], ll_n[keep], ll[keep]
    for b in act.tolist():
        n_iter[b] = it
    paths: list[list[float]] = [[] for _ in range(B)]
    for idx, vals in trace:
        for b, v in zip(idx.tolist(), vals.tolist()):
            paths[b].append(v)
    return {
        "V": V.cpu().numpy(), "E": E.cpu().numpy(), "s2": s2.cpu().numpy(),
        "loglik": np.array([pth[-1] for pth in paths]), "n_iter": n_iter, "status": status,
        "paths": [np.array(pth) for pth in paths],
    }
