"""EM for the softmax-gated Gaussian mixture of (linear) experts (Jordan & Jacobs, 1994).

Model, with ``x~ = (x, 1)`` and the last atom the reference (Nguyen et al. (2024), A.3:
``beta0_k = 0``, ``beta1_k = 0``)::

    p(y | x) = sum_i pi_i(x) N(y; a_i^T x + b_i, sigma^2),
    pi_i(x)  = softmax_i(beta1_i^T x + beta0_i),     eta_i = (a_i, b_i).

One EM iteration:

* **E-step** -- responsibilities ``r_ni = pi_i(x_n) N(y_n; mu_ni, s^2) / sum_j pi_j(x_n) N(y_n; mu_nj, s^2)``.
* **M-step, experts** -- weighted least squares ``eta_i = argmin sum_n r_ni (y_n - eta_i^T x~_n)^2``
  (solved by ``lstsq`` on ``sqrt(r)``-weighted rows) and
  ``s^2 = (1/n) sum_n sum_i r_ni (y_n - mu_ni)^2``.
* **M-step, gate** -- a multinomial logistic regression with soft targets ``r``: Newton/IRLS steps
  on ``Q_g(V) = sum_n sum_i r_ni log pi_i(x_n; V)`` (concave) over the free rows ``V_1..V_{k-1}``,
  each step accepted only if ``Q_g`` increases (step halving).

Both M-steps increase the expected complete-data log-likelihood, so the observed log-likelihood
never decreases (generalised EM; Dempster, Laird & Rubin 1977) -- the tests check this over seeds.
The fitted mean function ``g(x) = sum_i pi_i(x) (a_i^T x + b_i)`` is the regression function of
Nguyen et al. (2024), so :attr:`EMGaussianMoE.objective_` -- its mean squared residual, as for
every estimator -- is comparable with the least-squares estimator's objective.

Only dense linear softmax gates with identity (linear) experts are supported; other gates or
experts raise ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import logsumexp, softmax

from moestat.model.experts import Expert
from moestat.model.gates import Gate
from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel
from moestat.estimators.base import MoEEstimator
from moestat.estimators.validation import prepare_data, prepare_init

__all__ = ["EMGaussianMoE"]

_LOG2PI = float(np.log(2.0 * np.pi))


def _check_model(model, n_components: int) -> None:
    gate, expert = getattr(model, "gate", None), getattr(model, "expert", None)
    if gate is None or expert is None:
        raise ValueError(f"model must be a moestat.model.regression.MoEModel (gate, expert) or None, got {model!r}")
    k_active = getattr(gate, "k_active", None)
    # Top-K with K >= k activates every expert: the dense gate.
    if getattr(gate, "kind", None) != "linear" or (k_active is not None and k_active < n_components):
        raise ValueError(
            f"EMGaussianMoE supports only the dense linear softmax gate, got {gate!r}; "
            "use the least-squares estimator for cosine/perturbed or Top-K gates"
        )
    if getattr(expert, "activation", None) != "identity":
        raise ValueError(f"EMGaussianMoE supports only identity (linear) experts, got {expert!r}")


@dataclass
class _Fit:
    V: np.ndarray  # [k, d+1] gate (beta1, beta0); last row 0
    E: np.ndarray  # [k, d+1] experts (a, b)
    s2: float
    path: list
    converged: bool
    n_iter: int

    @staticmethod
    def failed(k: int, q: int) -> "_Fit":
        """Placeholder of a failed replicate: NaN parameters, no path."""
        return _Fit(np.full((k, q), np.nan), np.full((k, q), np.nan), np.nan, [], False, 0)


class EMGaussianMoE(MoEEstimator):
    """EM estimator of a softmax-gated Gaussian MoE regression, batched over replicates.

    Parameters
    ----------
    model : moestat.model.regression.MoEModel, optional
        Must have the dense ``linear`` gate and ``identity`` experts (the default when ``None``).
        Passed first like every estimator's, ``EMGaussianMoE(model, k, ...)``; an integer
        here is read as ``n_components`` (``EMGaussianMoE(3)``).
    n_components : int
        Number of experts ``k`` (default 2).
    max_iter : int
        Maximum EM iterations per start.
    tol : float
        Convergence when the per-sample log-likelihood changes by less than ``tol``.
    random_state : None, int, SeedSequence or Generator
        Seeds the random starts: one independent stream per replicate (``spawn``) and one per
        start within it (see :class:`~moestat.estimators.base.MoEEstimator`).
    n_init : int
        Random starts per replicate (ignored when ``init`` is given); the best log-likelihood wins.
    gate_newton_steps : int
        Newton/IRLS steps of the gate per M-step.
    min_noise_var : float
        Floor of the noise variance relative to ``var(Y)`` (guards against a collapsing
        component on a single point).

    Attributes
    ----------
    params_ : MixingMeasure
        Batched fit: ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d+1]``; last atom is the
        reference (``beta0 = beta1 = 0``); NaN for a replicate whose fit failed.
    objective_ : ndarray, shape ``[R]``
        Mean squared residual ``(1/n) sum_i (Y_i - g(X_i))^2`` of the fitted mean function
        (:meth:`predict`), NaN where the fit failed.
    converged_ : ndarray of bool, shape ``[R]``
    n_iter_ : ndarray of int, shape ``[R]``
        EM iterations of the winning start.
    status_ : list of str
        ``"tol"`` (converged), ``"max_iter"``, ``"nonfinite"`` (the data overflow, or the fit
        became non-finite) or ``"linalg_error"`` (a least-squares solve failed).
    noise_var_ : ndarray, shape ``[R]``
    loglik_ : ndarray, shape ``[R]``
        Final observed-data log-likelihood (sum over samples).
    loglik_path_ : list of list of float
        Log-likelihood after every E-step of the winning start, per replicate.
    n_features_in_ : int

    Notes
    -----
    :meth:`for_scenario` uses ``max_iter`` and ``random_state``; EM runs in NumPy on the CPU
    (no ``device``) and is unconstrained (no box).  It refuses a scenario whose fitted model
    is not the dense linear gate with identity experts.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-2, 2, size=(1, 400, 1))
    >>> Y = np.where(X[..., 0] > 0, 2 * X[..., 0], -1.0) + 0.1 * rng.standard_normal((1, 400))
    >>> em = EMGaussianMoE(n_components=2, random_state=0, n_init=3).fit(X, Y)
    >>> em.params_.eta.shape, bool(em.converged_[0])
    ((1, 2, 2), True)
    """

    def __init__(
        self,
        model=None,
        n_components: int | None = None,
        *,
        max_iter: int = 500,
        tol: float = 1e-8,
        random_state=0,
        n_init: int = 3,
        gate_newton_steps: int = 3,
        min_noise_var: float = 1e-10,
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.n_init = n_init
        self.gate_newton_steps = gate_newton_steps
        self.min_noise_var = min_noise_var

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "EMGaussianMoE":
        return cls(scenario.fit_model, scenario.k_fit, max_iter=max_iter, random_state=random_state)

    def _resolved(self) -> tuple[MoEModel, int]:
        """``(model, k)`` with the defaults and the ``EMGaussianMoE(k)`` shorthand applied."""
        model, k = self.model, self.n_components
        if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
            if k is not None:
                raise ValueError(
                    "give the number of experts once: EMGaussianMoE(model, n_components) or EMGaussianMoE(n_components)"
                )
            model, k = None, model
        k = 2 if k is None else k
        if model is None:
            model = MoEModel(Gate("linear"), Expert("identity"))
        return model, k

    def _check_params(self) -> None:
        model, k = self._resolved()
        for nm, v in (("n_components", k), ("max_iter", self.max_iter), ("n_init", self.n_init),
                      ("gate_newton_steps", self.gate_newton_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}")
        _check_model(model, int(k))
        if not (self.tol >= 0 and np.isfinite(self.tol)):
            raise ValueError(f"tol must be a non-negative number, got {self.tol!r}")
        if not self.min_noise_var > 0:
            raise ValueError(f"min_noise_var must be positive, got {self.min_noise_var!r}")
        self._rng()

    # ---- public API --------------------------------------------------------------------------
    def fit(self, X, Y, init: MixingMeasure | None = None) -> "EMGaussianMoE":
        """Fit every replicate.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]`` for one replicate)
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            Batched starting point (``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d+1]``);
            an unbatched one is used for every replicate.  Without it, ``n_init`` random starts.

        Returns
        -------
        EMGaussianMoE
            ``self``, with the fitted attributes set.
        """
        self._check_params()
        _, k = self._resolved()
        k = int(k)
        Xt, Yt = prepare_data(X, Y, k, torch.device("cpu"), min_samples=2)
        X, Y = Xt.numpy(), Yt.numpy()
        R, n, d = X.shape
        inits = None if init is None else prepare_init(init, R, k, d, reference=False)
        # one stream per replicate, then one per start (as SeedSequence.spawn: Generator.spawn
        # spawns the generator's seed sequence)
        streams = self._rng().spawn(R)
        fits, status = [], []
        for r in range(R):
            Xe = np.concatenate([X[r], np.ones((n, 1))], axis=1)
            with np.errstate(over="ignore", invalid="ignore"):
                # data so large that its squares overflow make every step below non-finite
                finite = np.isfinite(np.sum(Xe**2)) and np.isfinite(np.sum(Y[r] ** 2))
            f = None
            if finite:
                try:
                    f = self._fit_replicate(Xe, Y[r], None if inits is None else inits[r], streams[r])
                except np.linalg.LinAlgError:
                    status.append("linalg_error")
                else:
                    ok = all(np.isfinite(a).all() for a in (f.V, f.E, f.s2, f.path[-1]))
                    status.append(("tol" if f.converged else "max_iter") if ok else "nonfinite")
                    f = f if ok else None
            else:
                status.append("nonfinite")
            fits.append(f if f is not None else _Fit.failed(k, d + 1))
        params = MixingMeasure(
            np.stack([f.V[:, -1] for f in fits]), np.stack([f.V[:, :-1] for f in fits]), np.stack([f.E for f in fits])
        )
        self.noise_var_ = np.array([f.s2 for f in fits])
        self.loglik_ = np.array([f.path[-1] if f.path else np.nan for f in fits])
        self.loglik_path_ = [list(f.path) for f in fits]
        # objective_ from predict itself: the mean squared residual of the fitted mean function
        self.params_, self.n_features_in_ = params, d
        objective = np.mean((Y - self.predict(X)) ** 2, axis=1)
        converged = np.array([f.converged for f in fits], dtype=bool)
        n_iter = np.array([f.n_iter for f in fits], dtype=np.int64)
        self._set_fit(params, objective, converged, n_iter, status, d)
        return self

    def _fit_replicate(self, Xe, y, init: MixingMeasure | None, rng: np.random.Generator) -> "_Fit":
        """The EM fit of one replicate: from ``init``, or the best of ``n_init`` random starts."""
        if init is not None:
            V0 = np.concatenate([init.beta1, init.beta0[:, None]], axis=1)
            return self._run(Xe, y, V0 - V0[-1], init.eta.copy(), None)
        best = None
        for start_rng in rng.spawn(self.n_init):
            V0, E0 = self._random_start(Xe, y, start_rng)
            f = self._run(Xe, y, V0, E0, None)
            if best is None or f.path[-1] > best.path[-1]:
                best = f
        return best

    def predict(self, X) -> np.ndarray:
        """Fitted mean function ``g(x) = sum_i pi_i(x) (a_i^T x + b_i)``.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` or ``[n, d]``

        Returns
        -------
        ndarray, shape ``[R, n]``
        """
        X = self._check_X(X).numpy()
        p = self.params_
        logits = np.einsum("rnd,rkd->rnk", X, p.beta1) + p.beta0[:, None, :]
        mu = np.einsum("rnd,rkd->rnk", X, p.eta[..., :-1]) + p.eta[:, None, :, -1]
        return (softmax(logits, axis=-1) * mu).sum(-1)

    # ---- one EM run ----------------------------------------------------------------------------
    @staticmethod
    def _loglik_parts(Xt, y, V, E, s2):
        log_pi = Xt @ V.T
        log_pi = log_pi - logsumexp(log_pi, axis=1, keepdims=True)
        resid = y[:, None] - Xt @ E.T
        log_f = -0.5 * (_LOG2PI + np.log(s2)) - 0.5 * resid**2 / s2
        joint = log_pi + log_f
        ll_n = logsumexp(joint, axis=1)
        return float(ll_n.sum()), np.exp(joint - ll_n[:, None]), resid

    def _random_start(self, Xt, y, rng):
        """Hard partition from a few Lloyd iterations on standardised (x, y), k-means++ seeding."""
        n, k = Xt.shape[0], int(self._resolved()[1])
        Z = np.concatenate([Xt[:, :-1], y[:, None]], axis=1)
        Z = (Z - Z.mean(0)) / np.where(Z.std(0) > 0, Z.std(0), 1.0)
        centres = [Z[rng.integers(n)]]
        for _ in range(1, k):
            dist = np.min([((Z - c) ** 2).sum(1) for c in centres], axis=0)
            prob = dist / dist.sum() if dist.sum() > 0 else np.full(n, 1.0 / n)
            centres.append(Z[rng.choice(n, p=prob)])
        C = np.array(centres)
        for _ in range(5):
            lab = ((Z[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
            C = np.array([Z[lab == j].mean(0) if np.any(lab == j) else C[j] for j in range(k)])
        r = np.full((n, k), 0.05 / max(k - 1, 1))
        r[np.arange(n), lab] = 0.95 if k > 1 else 1.0
        r /= r.sum(1, keepdims=True)
        E = self._m_experts(Xt, y, r, None)
        V = self._m_gate(Xt, r, np.zeros((k, Xt.shape[1])))
        return V, E

    @staticmethod
    def _m_experts(Xt, y, r, E_old):
        k = r.shape[1]
        E = np.empty((k, Xt.shape[1]))
        for i in range(k):
            w = np.sqrt(r[:, i])
            if w.sum() <= 0 and E_old is not None:  # an empty component keeps its expert
                E[i] = E_old[i]
                continue
            E[i] = np.linalg.lstsq(Xt * w[:, None], y * w, rcond=None)[0]
        return E

    def _m_gate(self, Xt, r, V):
        """Newton/IRLS ascent of Q_g(V) = sum r log softmax(Xt V^T) over rows 0..k-2 (row k-1 = 0)."""
        k, p = V.shape
        if k == 1:
            return V

        def q(Vm):
            lg = Xt @ Vm.T
            return float((r * (lg - logsumexp(lg, axis=1, keepdims=True))).sum())

        cur = q(V)
        for _ in range(self.gate_newton_steps):
            pi = softmax(Xt @ V.T, axis=1)
            g = ((r - pi)[:, :-1].T @ Xt).ravel()  # [(k-1) p]
            P = pi[:, :-1]
            # Hessian of -Q_g: blocks X^T diag(pi_i (delta_ij - pi_j)) X.
            W = P[:, :, None] * (np.eye(k - 1)[None] - P[:, None, :])  # [n, k-1, k-1]
            H = np.einsum("nij,na,nb->iajb", W, Xt, Xt).reshape((k - 1) * p, (k - 1) * p)
            H += 1e-9 * (np.trace(H) / H.shape[0] + 1.0) * np.eye(H.shape[0])
            try:
                step = np.linalg.solve(H, g)
            except np.linalg.LinAlgError:
                step = np.linalg.lstsq(H, g, rcond=None)[0]
            t, improved = 1.0, False
            for _ in range(30):
                Vn = V.copy()
                Vn[:-1] += t * step.reshape(k - 1, p)
                qn = q(Vn)
                if qn >= cur:
                    improved = qn > cur
                    V, cur = Vn, qn
                    break
                t *= 0.5
            if not improved:
                break
        return V

    def _run(self, Xt, y, V, E, s2) -> _Fit:
        n = Xt.shape[0]
        floor = self.min_noise_var * max(float(np.var(y)), 1e-300)
        if s2 is None:  # residual variance of the starting mixture
            pi = softmax(Xt @ V.T, axis=1)
            s2 = max(float((pi * (y[:, None] - Xt @ E.T) ** 2).sum() / n), floor)
        ll, r, _ = self._loglik_parts(Xt, y, V, E, s2)
        path, converged, it = [ll], False, 0
        for it in range(1, self.max_iter + 1):
            E = self._m_experts(Xt, y, r, E)
            resid = y[:, None] - Xt @ E.T
            s2 = max(float((r * resid**2).sum() / n), floor)
            V = self._m_gate(Xt, r, V)
            ll, r, _ = self._loglik_parts(Xt, y, V, E, s2)
            path.append(ll)
            if abs(path[-1] - path[-2]) <= self.tol * n:  # tol is per sample
                converged = True
                break
        return _Fit(V, E, s2, path, converged, it)
