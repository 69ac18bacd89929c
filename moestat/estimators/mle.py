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
* **Gate** by one Newton/IRLS step on the concave ``Q_g(V) = sum_ni r_ni log pi_i(x_n; V)`` over
  the free rows ``V_1..V_{k-1}``, halved until the observed log-likelihood does not decrease.

The expert and variance updates are exact maximisers of the expected complete-data
log-likelihood, so with the gate held fixed (the last resort of the halving) the observed
log-likelihood cannot decrease (Dempster, Laird & Rubin 1977); the step control makes every
accepted iterate at least as likely as the last -- a hypothesis test checks every trace.  A start
stops when the per-sample log-likelihood changes by at most ``tol``.

Every iteration is one pass over the data (:func:`_em_pass`: the log-likelihood and all the
sufficient statistics of the next M-step), fused by ``torch.compile`` on the CPU for large
problems.
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
#: Newton iterations after EM for an over-fitted Gaussian-MoE scenario (the rates pipeline's rule)
OVER_POLISH_ITER = 100


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
    random_state : None, int, SeedSequence or Generator
        Seeds the random starts and jitters.
    device : str
        ``cpu`` (default), ``cuda[:N]`` or ``auto``.
    compile : bool or "auto"
        Fuse the EM pass with ``torch.compile`` (:func:`fit_em`); ``"auto"`` (default) compiles on
        the CPU for problems of at least :data:`COMPILE_MIN_SAMPLES` samples x starts.
    accelerate : bool
        SQUAREM extrapolation (Varadhan & Roland 2008) between pairs of EM steps, kept only where
        it does not lower the log-likelihood; for over-fitted models, where EM is sublinear.
    polish_iter : int
        Damped Newton iterations (:mod:`moestat.estimators.mle_newton`) after EM, for every finite
        start; a start that reaches the second-order certificate (negative Hessian positive
        definite, Newton decrement <= ``tol * n``) gets status ``"newton"``; the others keep EM's
        status.  0 (default): EM alone.

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
        Of the best start: ``"tol"`` (EM's stopping rule), ``"newton"`` (the Newton polish's
        certificate), ``"max_iter"`` or ``"nonfinite"``; ``converged_`` is ``"tol"`` or ``"newton"``.
    n_newton_ : ndarray, shape ``[R]``
        Accepted Newton steps of the best start (included in ``n_iter_``).
    kernel_ : str
        ``"compiled"`` or ``"eager"``: how the EM pass ran.

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
        random_state=0,
        device: str = "cpu",
        compile: bool | str = "auto",
        accelerate: bool = False,
        polish_iter: int = 0,
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
        self.random_state = random_state
        self.device = device
        self.compile = compile
        self.accelerate = accelerate
        self.polish_iter = polish_iter

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "MLEGaussianMoE":
        # a Gaussian-MoE scenario has atoms (a, b, sigma^2); a regression scenario has (a, b)
        gaussian = bool(getattr(scenario, "gaussian_moe", False))
        model = None if gaussian else scenario.fit_model
        # over-fitted Gaussian MoE: EM is sublinear where atoms share a cell, so SQUAREM steps, then
        # Newton steps to the second-order certificate, which EM alone does not reach above n ~ 3 000
        # in 5 000 iterations (docs/guide/gaussian_moe.rst); exact fits converge in a few EM steps
        over = gaussian and scenario.setting == "over"
        return cls(model, scenario.k_fit, eta_variance=gaussian, max_iter=max_iter, random_state=random_state,
                   device=device, n_init=getattr(scenario, "n_starts", 1), accelerate=over,
                   polish_iter=OVER_POLISH_ITER if over else 0)

    def _k(self) -> int:
        model, k = self.model, self.n_components
        if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
            if k is not None:
                raise ValueError("give the number of experts once: MLEGaussianMoE(model, n_components) or MLEGaussianMoE(k)")
            k = model
        return 2 if k is None else k

    def _check_params(self) -> None:
        k = self._k()
        for nm, v in (("n_components", k), ("max_iter", self.max_iter), ("n_init", self.n_init)):
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
        if isinstance(self.polish_iter, bool) or not isinstance(self.polish_iter, (int, np.integer)) or self.polish_iter < 0:
            raise ValueError(f"polish_iter must be an integer >= 0, got {self.polish_iter!r}")
        if not isinstance(self.accelerate, (bool, np.bool_)):
            raise ValueError(f"accelerate must be True or False, got {self.accelerate!r}")
        if self.compile not in (True, False, "auto"):
            raise ValueError(f"compile must be True, False or 'auto', got {self.compile!r}")
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
            var_floor=float(self.var_floor), compile=self.compile, accelerate=bool(self.accelerate),
            polish_iter=int(self.polish_iter),
        )
        self.kernel_ = res["kernel"]
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
        self.n_newton_ = res["n_newton"][pick]
        self.params_, self.n_features_in_ = params.numpy(), d
        objective = np.mean((Yn - self.predict(Xn)) ** 2, axis=1)
        self._set_fit(params, objective, np.array([s in ("tol", "newton") for s in status]), res["n_iter"][pick], status, d)
        return self

    def predict(self, X) -> np.ndarray:
        """Fitted mean function ``sum_i pi_i(x) (a_i^T x + b_i)``, shape ``[R, n]``."""
        Xt = self._check_X(X)
        p = self.params_
        G = MixingMeasure(p.beta0, p.beta1, np.concatenate([p.eta[..., : self.n_features_in_ + 1],
                                                            self.variances_[..., None]], axis=-1))
        return mean_function(Xt, G)


# ---- the batched EM ------------------------------------------------------------------------------
# One EM iteration is ONE pass over the data: at the current parameters the pass returns the
# log-likelihood and every sufficient statistic the next M-step needs (moments of the
# responsibilities against x~, of the residuals under the current experts, and of the gate
# probabilities), so the M-step itself is a few [B, k, p, p] solves.  The pass at the candidate
# parameters is at once the acceptance test of the step and the statistics of the next iteration.
# Under ``torch.compile`` the pass is one fused loop over the samples (no [B, k, n] temporaries
# written back to memory): about 5x faster than the same code in eager mode on the CPU
# (docs/guide/gaussian_moe.rst, "Speed").
def _em_pass(Xd: torch.Tensor, y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor):
    """Log-likelihood and the M-step's sufficient statistics at ``(V, E, s2)``.

    Parameters
    ----------
    Xd : Tensor, shape ``[B, d, n]``
    y : Tensor, shape ``[B, n]``
    V, E : Tensor, shape ``[B, k, p]``, ``p = d + 1``
        Gate rows ``(beta1, beta0)`` and experts ``(a, b)``.
    s2 : Tensor, shape ``[B, k]``

    Returns
    -------
    ll : ``[B]``, the observed-data log-likelihood (sum over samples);
    M : ``[B, k, p, p]``, ``sum_n r_i x~ x~^T``;  g : ``[B, k, p]``, ``sum_n r_i e_i x~``;
    q : ``[B, k]``, ``sum_n r_i e_i^2`` (``e_i = y - E_i^T x~``, the residual under the current expert);
    gg : ``[B, k-1, p]``, ``sum_n (r_i - pi_i) x~`` (gradient of ``Q_g`` in the free gate rows);
    H : ``[B, k-1, k-1, p, p]``, ``sum_n pi_i (delta_ij - pi_j) x~ x~^T`` (minus its Hessian).
    """
    d = Xd.shape[1]
    k = V.shape[1]
    p = d + 1
    xs = [Xd[:, j] for j in range(d)]  # the features of x~ = (x, 1), [B, n]; None: the constant 1

    def feat(a, ndim):  # feature a shaped to broadcast against a [B, ..., n] weight of ndim dimensions
        return None if a == d else xs[a].reshape(xs[a].shape[:1] + (1,) * (ndim - 2) + xs[a].shape[1:])

    def affine(P):
        out = P[..., d : d + 1]
        for j in range(d):
            out = out + P[..., j : j + 1] * feat(j, 3)
        return out

    def moments(w, scale=None):
        """``sum_n w f_a f_b`` for every ``a, b`` (the symmetric ``[..., p, p]``), from the upper triangle."""
        rows = []
        cache = {}
        for a in range(p):
            row = []
            for b in range(p):
                if (b, a) in cache:
                    row.append(cache[(b, a)])
                    continue
                t = w
                for c in (a, b):
                    if c < d:
                        t = t * feat(c, w.ndim)
                cache[(a, b)] = t.sum(-1)
                row.append(cache[(a, b)])
            rows.append(torch.stack(row, -1))
        return torch.stack(rows, -2)

    def firsts(w):
        return torch.stack([(w if a == d else w * feat(a, w.ndim)).sum(-1) for a in range(p)], -1)

    # softmax and the responsibilities written out (k exponentials and one log each) rather than
    # logsumexp + exp, which costs twice the exponentials in the fused loop
    L = affine(V)  # [B, k, n]
    L = L - L.amax(1, keepdim=True)
    z = torch.exp(L)
    sz = z.sum(1, keepdim=True)
    pi = z / sz
    e = y.unsqueeze(1) - affine(E)
    lj = L - 0.5 * torch.log(s2).unsqueeze(-1) - 0.5 * e * e / s2.unsqueeze(-1)  # log pi + log N + log sz + log(2 pi)/2
    m = lj.amax(1, keepdim=True)
    w = torch.exp(lj - m)
    sw = w.sum(1, keepdim=True)
    r = w / sw
    lln = m + torch.log(sw) - torch.log(sz) - 0.5 * _LOG2PI
    re = r * e
    M = moments(r)
    g = firsts(re)
    q = (re * e).sum(-1)
    gg = firsts(r[:, :-1] - pi[:, :-1])
    P = pi[:, :-1]
    eye = torch.eye(k - 1, dtype=P.dtype, device=P.device)
    W = P.unsqueeze(2) * (eye.unsqueeze(-1) - P.unsqueeze(1))  # [B, k-1, k-1, n]
    H = moments(W)
    return lln.sum((1, 2)), M, g, q, gg, H


_COMPILED: dict = {}
#: ``compile="auto"`` compiles the pass when ``B * n`` reaches this: compiling costs 5 to 15 s once
#: per process (dynamic shapes: one compilation serves every later size), which a fit of fewer
#: samples x starts does not win back unless it runs thousands of iterations.
COMPILE_MIN_SAMPLES = 50_000


def _pass_function(compile: bool | str, size: int, device: torch.device):
    """The pass to use: ``torch.compile``-d (fused loops) or eager; ``(function, "compiled" | "eager")``."""
    want = compile is True or (compile == "auto" and size >= COMPILE_MIN_SAMPLES and device.type == "cpu")
    if not want:
        return _em_pass, "eager"
    if "fn" not in _COMPILED:
        compiled = torch.compile(_em_pass, dynamic=True, fullgraph=True)

        def run(Xd, y, V, E, s2):
            # the batch shrinks to 1 as starts converge; dynamo would specialise on B = 1 and compile
            # again (~10 s), so a lone entry is run twice over and its first copy kept
            if Xd.shape[0] == 1:
                return tuple(o[:1] for o in compiled(*(torch.cat([t, t]) for t in (Xd, y, V, E, s2))))
            return compiled(Xd, y, V, E, s2)

        _COMPILED["fn"] = run
    return _COMPILED["fn"], "compiled"


def _m_step(stats, V, E, s2, floor, shared: bool, n: int):
    """Experts (weighted least squares on the residuals), floored variances, and the gate's Newton step.

    Returns ``E, s2`` (the exact maximisers of the expected complete-data log-likelihood over the
    experts and the floored variances) and the Newton direction ``[B, k-1, p]`` of ``Q_g``.
    """
    _, M, g, q, gg, H = stats
    B, k, p = E.shape
    eye = torch.eye(p, dtype=E.dtype, device=E.device)
    # a relative ridge of 1e-12 only guards exactly singular systems (an atom on < p distinct x)
    tr = M.diagonal(dim1=-2, dim2=-1).sum(-1)
    delta, info = torch.linalg.solve_ex(M + (1e-12 * tr + 1e-300)[..., None, None] * eye, g.unsqueeze(-1))
    delta = delta.squeeze(-1)
    mass = M[..., p - 1, p - 1]
    ok = (info == 0) & (mass > 1e-8 * n) & torch.isfinite(delta).all(-1)
    delta = torch.where(ok.unsqueeze(-1), delta, torch.zeros_like(delta))  # an empty atom keeps its expert
    E = E + delta
    # sum_n r (e - delta^T x~)^2 = q - 2 delta^T g + delta^T M delta = q - delta^T g, as M delta = g
    wss = (q - (delta * g).sum(-1)).clamp_min(0.0)
    if shared:
        new = (wss.sum(-1, keepdim=True) / n).expand(-1, k)
    else:
        new = torch.where(ok, wss / mass.clamp_min(1e-300), s2)
    s2 = torch.maximum(new, floor.unsqueeze(-1))
    if k == 1:
        return E, s2, torch.zeros_like(V[:, :0])
    m = (k - 1) * p
    Hm = H.permute(0, 1, 3, 2, 4).reshape(B, m, m)
    trh = Hm.diagonal(dim1=-2, dim2=-1).sum(-1)
    Hm = Hm + (1e-10 * trh / m + 1e-300)[:, None, None] * torch.eye(m, dtype=H.dtype, device=H.device)
    step, info = torch.linalg.solve_ex(Hm, gg.reshape(B, m, 1))
    ok = (info == 0) & torch.isfinite(step).all(-2).squeeze(-1)
    step = torch.where(ok[:, None], step.squeeze(-1), torch.zeros_like(step.squeeze(-1)))
    return E, s2, step.reshape(B, k - 1, p)


def _with_gate_step(V, step, t):
    """``V`` with ``t * step`` added to its free rows (the reference row stays 0)."""
    out = V.clone()
    out[:, :-1] += t[:, None, None] * step
    return out


_MAX_HALVINGS = 30


def fit_em(X, Y, V, E, s2=None, *, shared=False, max_iter=1000, tol=1e-10, var_floor=1e-6, compile="auto",
           accelerate: bool = False, polish_iter: int = 0) -> dict:
    """Batched EM from ``S`` starts per replicate.

    Each iteration: the experts and variances by their exact M-step (weighted least squares on
    the residuals, floored variances), the gate by one Newton step of ``Q_g`` (IRLS), halved until
    the observed log-likelihood does not decrease (at most 30 halvings; then the gate keeps its
    value and the update of the experts alone, an exact EM step, cannot decrease it).  Every
    accepted iterate is evaluated by :func:`_em_pass`, which also gives the next M-step's statistics.

    Parameters
    ----------
    X : Tensor, shape ``[R, n, d]``
    Y : Tensor, shape ``[R, n]``
    V, E : Tensor, shape ``[R, S, k, d + 1]``
        Gate ``(beta1, beta0)`` (last row 0) and experts ``(a, b)`` of every start.
    s2 : Tensor, shape ``[R, S, k]``, optional
        Starting variances; default (and always with ``shared``) the responsibility-weighted
        residual variances under the start.
    compile : bool or "auto"
        Fuse the pass with ``torch.compile`` (``"auto"``: on the CPU for ``R S n >=``
        :data:`COMPILE_MIN_SAMPLES`).  Without a working compiler the eager pass is used and
        ``"eager"`` is reported.
    polish_iter : int
        Newton iterations (:func:`moestat.estimators.mle_newton.polish`) for every finite start after
        EM; one that reaches the Newton-decrement certificate gets status ``"newton"``, the others
        keep EM's.  0 (default): none.

    Returns
    -------
    dict
        NumPy, flat over ``B = R S`` (replicate-major): ``V, E [B, k, p]``, ``s2 [B, k]``,
        ``loglik [B]``, ``n_iter [B]`` (EM iterations plus accepted Newton steps), ``n_newton
        [B]``, ``status`` (list), ``paths`` (list of ``[n_iter + 1]``), ``kernel`` (``"compiled"``
        or ``"eager"``).
    """
    R, n, d = X.shape
    S, k, p = V.shape[1], V.shape[2], d + 1
    B = R * S
    rep = torch.arange(R, device=X.device).repeat_interleave(S)
    # [B, d, n] with the default strides, also for d = 1 (a compiled pass is specialised on strides)
    Xd = torch.empty((B, d, n), dtype=X.dtype, device=X.device).copy_(X.transpose(1, 2)[rep])
    ya = Y[rep].contiguous()
    fa = (var_floor * Y.var(dim=1).clamp_min(1e-300))[rep]
    V, E = V.reshape(B, k, p).clone(), E.reshape(B, k, p).clone()
    if s2 is None or shared:  # a shared-variance EM starts inside its model: one pooled variance
        ones = torch.ones_like(ya).unsqueeze(-1)
        Xe = torch.cat([Xd.transpose(1, 2), ones], -1)  # [B, n, p]
        pi = torch.softmax(Xe @ V.transpose(1, 2), -1).transpose(1, 2)
        wr2 = pi * (ya.unsqueeze(1) - (Xe @ E.transpose(1, 2)).transpose(1, 2)) ** 2
        del Xe, ones
        if shared:
            s2 = (wr2.sum((1, 2)) / n).unsqueeze(-1).expand(-1, k)
        else:
            s2 = wr2.sum(-1) / pi.sum(-1).clamp_min(1e-300)
    s2 = torch.maximum(s2.reshape(B, k), fa.unsqueeze(-1)).clone()
    em_pass, kernel = _pass_function(compile, B * n, X.device)
    try:
        stats = em_pass(Xd, ya, V, E, s2)
    except torch._dynamo.exc.BackendCompilerFailed as exc:  # no working C++ compiler: the same pass, eager
        if compile is True:
            raise
        import warnings

        warnings.warn(f"torch.compile is unavailable ({type(exc).__name__}); the EM pass runs eagerly", RuntimeWarning)
        _COMPILED["fn"] = _em_pass
        em_pass, kernel = _em_pass, "eager"
        stats = em_pass(Xd, ya, V, E, s2)
    status = ["max_iter"] * B
    act = torch.arange(B, device=X.device)  # active batch entries (indices into 0..B-1)
    Va, Ea, s2a = V, E, s2
    ll = stats[0]
    trace = [(act.cpu().numpy(), ll.cpu().numpy())]

    def em_step(Va, Ea, s2a, stats):
        """One EM iteration of the active entries: M-step, gate step halved on the log-likelihood."""
        ll = stats[0]
        E1, s21, step = _m_step(stats, Va, Ea, s2a, fa, shared, n)
        t = torch.ones(Va.shape[0], dtype=X.dtype, device=X.device)
        V1 = _with_gate_step(Va, step, t)
        new = list(em_pass(Xd, ya, V1, E1, s21))
        # rounding allowance: a step that changes nothing may lower the sum of n logs in its last bits
        slack = 1e-13 * (ll.abs() + n)
        for h in range(_MAX_HALVINGS + 1):
            low = ~(new[0] >= ll - slack)  # NaN counts as low
            if not bool(low.any()):
                break
            idx = torch.nonzero(low).flatten()
            t[idx] = 0.0 if h == _MAX_HALVINGS else t[idx] * 0.5
            V1[idx] = _with_gate_step(Va[idx], step[idx], t[idx])
            sub = em_pass(Xd[idx], ya[idx], V1[idx], E1[idx], s21[idx])
            for a, b in zip(new, sub):
                a[idx] = b
        trace.append((act.cpu().numpy(), new[0].cpu().numpy()))
        return V1, E1, s21, tuple(new)

    it = 0
    while act.numel() and it < max_iter:
        ll0 = ll
        if accelerate:
            # SQUAREM (Varadhan & Roland 2008, scheme SqS3): two EM steps, then the extrapolation
            # theta0 - 2 alpha r + alpha^2 v along them, kept only where it is at least as likely
            # as the second step (so the trace stays monotone); alpha <= -1 (alpha = -1: the step itself)
            it += 2
            V1, E1, s21, st1 = em_step(Va, Ea, s2a, stats)
            V2, E2, s22, st2 = em_step(V1, E1, s21, st1)
            ll0, ll = st1[0], st2[0]
            th = [torch.cat([W[:, :-1].flatten(1), F.flatten(1), torch.log(q)], 1)
                  for W, F, q in ((Va, Ea, s2a), (V1, E1, s21), (V2, E2, s22))]
            r, v = th[1] - th[0], th[2] - 2 * th[1] + th[0]
            alpha = -(r.norm(dim=1) / v.norm(dim=1).clamp_min(1e-300)).clamp_min(1.0)
            ext = th[0] - 2 * alpha[:, None] * r + alpha[:, None] ** 2 * v
            m = (k - 1) * p
            Vx = torch.cat([ext[:, :m].reshape(-1, k - 1, p), torch.zeros_like(V2[:, -1:])], 1)
            Ex = ext[:, m : m + k * p].reshape(-1, k, p)
            s2x = torch.maximum(torch.exp(ext[:, m + k * p :]), fa.unsqueeze(-1))
            stx = em_pass(Xd, ya, Vx, Ex, s2x)
            # not at a converged pair of steps, and no worse than the second step
            take = (stx[0] >= ll) & ((ll - ll0).abs() > tol * n)
            Va, Ea, s2a = (torch.where(take.reshape(-1, *([1] * (a.dim() - 1))), a, b)
                           for a, b in ((Vx, V2), (Ex, E2), (s2x, s22)))
            stats = tuple(torch.where(take.reshape(-1, *([1] * (a.dim() - 1))), a, b) for a, b in zip(stx, st2))
            if bool(take.any()):
                trace.append((act[take].cpu().numpy(), stx[0][take].cpu().numpy()))
            # convergence is judged on the EM steps (ll0 -> ll: the second step's change), never on
            # an extrapolation, which may gain little far from the optimum
        else:
            it += 1
            Va, Ea, s2a, stats = em_step(Va, Ea, s2a, stats)
        V[act], E[act], s2[act] = Va, Ea, s2a
        ll = stats[0] if not accelerate else torch.where(torch.isfinite(stats[0]), ll, stats[0])
        bad = ~torch.isfinite(ll)
        done = bad | ((ll - ll0).abs() <= tol * n)
        if bool(done.any()):
            for j in torch.nonzero(done).flatten().tolist():
                status[int(act[j])] = "nonfinite" if bool(bad[j]) else "tol"
            keep = torch.nonzero(~done).flatten()
            act, Xd, ya, fa, ll = act[keep], Xd[keep], ya[keep], fa[keep], ll[keep]
            Va, Ea, s2a = Va[keep], Ea[keep], s2a[keep]
            stats = tuple(s[keep] for s in stats)
    n_newton = np.zeros(B, dtype=int)
    if polish_iter > 0:
        from moestat.estimators.mle_newton import polish_starts

        n_newton = polish_starts(X, Y, rep, V, E, s2, status, trace, var_floor=var_floor, tol=tol,
                                 max_iter=int(polish_iter), shared=shared)
    paths: list[list[float]] = [[] for _ in range(B)]
    for idx, vals in trace:
        for b, v in zip(idx.tolist(), vals.tolist()):
            paths[b].append(v)
    return {
        "V": V.cpu().numpy(), "E": E.cpu().numpy(), "s2": s2.cpu().numpy(),
        "loglik": np.array([pth[-1] for pth in paths]), "n_iter": np.array([len(pth) - 1 for pth in paths]),
        "status": status, "n_newton": n_newton,
        "paths": [np.array(pth) for pth in paths], "kernel": kernel,
    }
