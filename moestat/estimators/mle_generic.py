"""Maximum likelihood for any gate and expert of the protocol: batched generalised EM in torch.

The model is a :class:`~moestat.model.likelihood.LikelihoodModel`, ``p(y | x) = sum_i w_i(x)
f(y | x, eta_i)`` (softmax -- dense, Top-K, with a temperature or an activated score --, Gaussian or
normalised-sigmoid gates; linear, polynomial, FFN, MLP or your own experts with one Gaussian
variance per atom, or multinomial-logistic experts).  Every replicate and every start is one entry
of a batch axis ``B = R x S``; the entries are independent, so one
forward-mode pass over a perturbation shared by every entry gives all their derivatives at once.

One EM iteration (Dempster, Laird & Rubin 1977; the M-step generalised):

* **E-step** in log space: ``r_ni = exp(log w_i + log f_i - logsumexp_j(...))``.
* **Experts**: linear experts with Gaussian noise by weighted least squares (the closed form,
  exact maximiser); any other expert by one Levenberg--Marquardt-damped Newton step on its
  ``Q_i(eta_i) = sum_n r_ni log f(y_n | x_n, eta_i)`` (gradient and Hessian by :mod:`torch.func`),
  kept only where ``Q_i`` increases.  Then ``sigma_i^2 = sum_n r_ni (y_n - h_i)^2 / sum_n r_ni``
  (exact), floored at ``var_floor * var(y)`` (the likelihood is unbounded without a floor).
* **Gate**: one damped Newton step on ``Q_g = sum_ni r_ni log w_i(x_n)`` over the free gate
  parameters, kept only where ``Q_g`` increases.

Each accepted update increases the expected complete-data log-likelihood, so the observed
log-likelihood never decreases (generalised EM); the tests check every trace.  Free gate
parameters: softmax with a reference atom -- every row but the last (``beta0_k = 0``, ``beta1_k =
0``); a Gaussian gate -- every centre and ``beta0_1 .. beta0_{k-1}`` (``beta0`` is renormalised to
``logsumexp = 0`` in the result: ``exp(beta0)`` are the mixing weights); a sigmoid gate -- all.

SQUAREM (Varadhan & Roland 2008) and the Newton polish with its second-order certificate
(:func:`~moestat.estimators.generic_refine.polish`: damped Newton on the observed log-likelihood, Hessian by :mod:`torch.func`) work
as in :mod:`moestat.estimators.mle`, whose fused EM stays the fit of the dense linear softmax gate
with linear experts (model 1 of Nguyen, Nguyen & Ho (2023)).

Speed.  Per-sample tensors are atom-major, ``[B, k, n]``.  The E-step returns a :class:`Posterior`
with everything of the M-step that is a pass over the samples; where a step has a closed form
(linear experts, an affine gate) already summed over them, the sums written as products of feature
rows (:func:`~moestat.estimators.mle_fused.feature_moments`), so that the M-step itself is small
matrix algebra.  The E-step and the gate objective run under ``torch.compile`` for large problems
(:func:`use_compiled`): one fused loop.  On model 1 the generic EM takes 1.2-1.6x the fused EM's
time, with the same fits (``benchmarks/mle_generic_vs_fused.py``, docs/guide/own_gmoe.rst).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch.func import grad, jacfwd

from moestat.estimators.mle_fused import expert_wls, feature_affine, feature_firsts, feature_moments, feature_rows, retire_finished
from moestat.model.likelihood import LikelihoodModel, log_gate

__all__ = ["GenericEM", "Posterior", "fit_generic", "gate_fisher", "multinomial_expert_fisher", "use_compiled"]

_LAM0, _LAM_MAX = 1e-6, 1e12
#: up to this many features ``p = d + 1``, affine maps and sums over the samples are written as
#: products of ``[B, n]`` feature rows (one fused loop under torch.compile); above, as matmuls
_ROWWISE_MAX_P = 5


def _lse_atoms(u: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` over the atoms of ``u [B, k, n]`` -> ``[B, n]`` (without torch.logsumexp's
    handling of infinite maxima, which costs a pass: a row of ``u`` always has a finite entry)."""
    m = u.amax(-2, keepdim=True)
    return (m + torch.log(torch.exp(u - m).sum(-2, keepdim=True))).squeeze(-2)


def _features(X: torch.Tensor) -> list | None:
    """Feature rows of ``X [B, n, d]`` for :func:`feature_affine` and the sums below, or ``None``
    (matmuls) for many features."""
    return feature_rows(X.transpose(-1, -2)) if X.shape[-1] + 1 <= _ROWWISE_MAX_P else None


def _firsts(w: torch.Tensor, X: torch.Tensor, xs: list | None) -> torch.Tensor:
    """``sum_n w_mn xt_n`` ``[B, m, p]`` for weights ``w [B, m, n]``, ``xt = (x, 1)``."""
    if xs is not None:
        return feature_firsts(w, xs)
    return torch.cat([w @ X, w.sum(-1, keepdim=True)], -1)


def _moments(w: torch.Tensor, X: torch.Tensor, xs: list | None) -> torch.Tensor:
    """``sum_n w_mn xt_n xt_n^T`` ``[B, m, p, p]`` for weights ``w [B, m, n]``."""
    if xs is not None:
        return feature_moments(w, xs)
    Xe = torch.cat([X, torch.ones_like(X[..., :1])], -1)  # [B, n, p]
    return (w.unsqueeze(-2) * Xe.transpose(-1, -2).unsqueeze(-3)) @ Xe.unsqueeze(-3)


def _gaussian_log_f(e: torch.Tensor, ls2: torch.Tensor) -> torch.Tensor:
    """``log N(e; 0, exp(ls2_i))`` for residuals ``e [B, k, n]`` and log-variances ``ls2 [B, k]``."""
    return -0.5 * (math.log(2 * math.pi) + ls2.unsqueeze(-1) + e * e * torch.exp(-ls2).unsqueeze(-1))


class GenericEM:
    """The per-entry functions of one :class:`LikelihoodModel` and their batched derivatives.

    Parameters
    ----------
    model : LikelihoodModel
    k, d : int
        Atoms and input dimension.
    """

    def __init__(self, model: LikelihoodModel, k: int, d: int, dtype=torch.float64) -> None:
        self.model, self.k, self.d, self.p = model, k, d, d + 1
        self.gaussian = model.family == "gaussian"
        self.q = model.n_expert_params(d)
        self.linear = self.gaussian and getattr(model.expert, "name", "") == "identity"
        self.multinomial = model.family == "multinomial"
        g = model.gate
        from moestat.model.protocol import linear_score

        # logits (beta0 + beta1^T x) / tau, softmax-normalised (dense or Top-K): affine in the gate
        # parameters, so du/dtheta is the data and the gate's Fisher scoring step has a closed form
        self.affine_gate = g.normalisation == "softmax" and g.score is linear_score
        self.topk = g.k_active is not None and g.k_active < k
        #: whether a step needs the per-sample responsibilities; not when every step has a closed
        #: form from sums over the samples (linear experts, a dense affine gate)
        self.need_r = not (self.linear and self.affine_gate and not self.topk)
        free = torch.ones(k, d + 1, dtype=torch.bool)
        if g.reference:  # softmax: the last row is the reference
            free[-1] = False
        elif g.normalisation == "gaussian":  # invariant to a common shift of beta0 only
            free[-1, d] = False
        self.free = free.flatten()
        self.mg = int(self.free.sum())
        #: the gate rows with a free parameter, and the embedding restricted to them [mg, f p]
        self.free_rows = torch.nonzero(free.any(-1)).flatten()
        self.n_free_rows = len(self.free_rows)
        if self.affine_gate and self.free_rows.tolist() != list(range(self.n_free_rows)):
            raise AssertionError("the closed-form gate step assumes the free rows come first")
        # one-hot embedding of the free gate parameters into V [k, p] (a matmul: differentiable, no scatter)
        self.embed = torch.zeros(self.mg, k * (d + 1), dtype=dtype)
        self.embed[torch.arange(self.mg), torch.nonzero(self.free).flatten()] = 1.0
        self.embed_rows = self.embed.reshape(self.mg, k, d + 1)[:, self.free_rows].reshape(self.mg, -1)

    # ---- batched pieces (leading batch axis B; entries independent) ------------------------
    # Layout: atom-major, ``[B, k, n]``.  Every softmax, logsumexp and sum over the atoms is then a
    # reduction over a middle axis of contiguous length-n rows, which vectorises; over a trailing
    # axis of length k (2 or 3 here) the same reductions run 4-20x slower on the CPU.
    def gate_V(self, fv: torch.Tensor) -> torch.Tensor:
        """``V [B, k, p]`` = ``(beta1, beta0)`` rows from the free gate parameters ``fv [B, mg]``."""
        return (fv @ self.embed.to(fv)).reshape(fv.shape[:-1] + (self.k, self.p))

    def log_u(self, fv: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Unnormalised log-weights ``u [B, k, n]``, ``log w = log_softmax(u, -2)`` (Top-K zeros ``-inf``)."""
        V = self.gate_V(fv)
        g = self.model.gate
        if self.affine_gate:  # the linear score beta1^T x, atom-major, by feature rows (one fused loop)
            xs = _features(X)
            if xs is None:
                s = V[..., : self.d] @ X.transpose(-1, -2)
            else:
                s = feature_affine(torch.cat([V[..., : self.d], torch.zeros_like(V[..., :1])], -1), xs)
            # the gate's own formula on that score (bias, temperature, Top-K; the logits, not normalised)
            return g.family.log_weights_from_scores(g, s, V[..., self.d], normalise=False, atom_axis=-2)
        return log_gate(g, X, V[..., self.d], V[..., : self.d], normalise=False).transpose(-1, -2)

    @staticmethod
    def softmax_lse(u: torch.Tensor):
        """``softmax(u)`` over the atoms ``[B, k, n]`` and ``logsumexp(u)`` ``[B, n]`` from one
        exponential per entry (``torch.logsumexp`` and ``torch.softmax`` take one each)."""
        m = u.amax(-2, keepdim=True)
        z = torch.exp(u - m)
        s = z.sum(-2, keepdim=True)
        return z / s, (m + torch.log(s)).squeeze(-2)

    def means(self, eta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Expert means ``h(x_n, eta_i)`` ``[B, k, n]`` (Gaussian family)."""
        if self.linear:
            xs = _features(X)
            return eta[..., :-1] @ X.transpose(-1, -2) + eta[..., -1:] if xs is None else feature_affine(eta, xs)
        return self.model.expert(X, eta).transpose(-1, -2)

    def log_f(self, eta, ls2, X, Y):
        """``log f(y_n | x_n, eta_i)`` ``[B, k, n]``."""
        if self.gaussian:
            return _gaussian_log_f(Y.unsqueeze(-2) - self.means(eta, X), ls2)
        lp = self.model.expert.log_probs(X, eta)  # [B, n, k, C]
        idx = Y.long()[..., None, None].expand(lp.shape[:-1] + (1,))
        return lp.gather(-1, idx).squeeze(-1).transpose(-1, -2)

    def loglik(self, fv, eta, ls2, X, Y):
        """Observed log-likelihood ``[B]``."""
        u = self.log_u(fv, X)
        return (torch.logsumexp(u + self.log_f(eta, ls2, X, Y), -2) - torch.logsumexp(u, -2)).sum(-1)

    def q_gate(self, fv, X, r):
        """``Q_g [B]`` (``0 log 0 = 0`` where a Top-K gate switches an expert off)."""
        u = self.log_u(fv, X)
        return self.q_gate_u(u, _lse_atoms(u), r)

    def q_gate_affine(self, fv, X, rA):
        """``Q_g [B]`` of a dense affine gate from ``rA = sum_n r_ni xt_n`` ``[B, f, p]`` over the free
        rows: ``sum_ni r_ni u_ni = sum_i V_i . rA_i / tau`` (the reference row is zero), so only the
        ``logsumexp`` of the logits is a pass over the samples."""
        u = self.log_u(fv, X)
        V = self.gate_V(fv)[:, : rA.shape[1]]
        return (V * rA).sum((-2, -1)) / self.model.gate.temperature - _lse_atoms(u).sum(-1)

    def q_gate_u(self, u, lse_u, r):
        """``Q_g = sum_ni r_ni (u_ni - lse_n)`` ``[B]`` from the logits ``u [B, k, n]`` and their
        ``logsumexp`` over the atoms ``[B, n]`` (``sum_i r_ni = 1``)."""
        if self.topk:  # u = -inf where r = 0
            ru = torch.where(r > 0, r * u, torch.zeros_like(u)).sum((-2, -1))
        else:  # as a batched dot product: no [B, k, n] temporary
            ru = (r.reshape(r.shape[0], 1, -1) @ u.reshape(u.shape[0], -1, 1)).reshape(-1)
        return ru - lse_u.sum(-1)

    def q_expert(self, eta, ls2, X, Y, r):
        """``Q_i [B, k]``, one per atom."""
        return (r * self.log_f(eta, ls2, X, Y)).sum(-1)

    def estep(self, th, X, Y) -> tuple[torch.Tensor, "Posterior"]:
        """Observed log-likelihood ``[B]`` and the :class:`Posterior` at ``th``: everything of the
        M-step that is a pass over the samples -- for the closed forms, already summed over them --
        so that a compiled E-step is one fused loop."""
        fv, eta, ls2 = th
        xs = _features(X)
        u = self.log_u(fv, X)
        pi, lse_u = self.softmax_lse(u)
        if self.linear:  # log_f, keeping the residuals for the experts' step
            e = Y.unsqueeze(-2) - self.means(eta, X)
            lf = _gaussian_log_f(e, ls2)
        else:
            lf = self.log_f(eta, ls2, X, Y)
        r, lse_j = self.softmax_lse(u + lf)  # log sum_i exp(u_i) f_i
        M = ge = q = gV = Wm = rA = None
        if self.linear:  # the weighted least squares of the experts, in residual form (_m_step)
            re = r * e
            M, ge, q = _moments(r, X, xs), _firsts(re, X, xs), (re * e).sum(-1)
        f0 = None
        if self.affine_gate:  # the closed-form gate step (gate_fisher): pi and u are not kept
            dr, w = self.gate_weights(r, pi)
            if dr is not None:
                gV, Wm = _firsts(dr, X, xs), _moments(w, X, xs)
                f = self.n_free_rows
                rA = M[:, :f, :, -1] if M is not None else _firsts(r[:, :f], X, xs)
                if not self.topk:  # Q_g from rA as in q_gate_affine: no product of r and u over the samples
                    f0 = (self.gate_V(fv)[:, :f] * rA).sum((-2, -1)) / self.model.gate.temperature - lse_u.sum(-1)
        if f0 is None:
            f0 = self.q_gate_u(u, lse_u, r)
        keep_gate = not self.affine_gate  # the other gates' step differentiates the logits (jacfwd)
        return (lse_j - lse_u).sum(-1), Posterior(r if self.need_r else None, f0, M, ge, q, gV, Wm, rA,
                                                  pi if keep_gate else None, u if keep_gate else None)

    def gate_weights(self, r, pi):
        """``r - pi`` ``[B, f, n]`` and ``pi_i (delta_ij - pi_j)`` ``[B, f (f + 1) / 2, n]`` over the
        ``f`` free gate rows ``i <= j`` (``None`` when no row is free): the weights of the closed-form
        gate step (:func:`gate_fisher`)."""
        f = self.n_free_rows
        if f == 0:
            return None, None
        w = [pi[:, i] * ((1.0 if i == j else 0.0) - pi[:, j]) for i in range(f) for j in range(i, f)]
        return r[:, :f] - pi[:, :f], torch.stack(w, 1)


class Posterior(NamedTuple):
    """What the M-step needs from the E-step at the same parameters (:meth:`GenericEM.estep`);
    ``None`` where the model does not need it.  The closed forms take sums over the samples
    (``xt = (x, 1)``, ``p = d + 1``), the other steps per-sample tensors.

    Attributes
    ----------
    r : Tensor or None
        ``[B, k, n]``, the responsibilities (``None`` when every step has a closed form).
    f0 : Tensor
        ``Q_g`` ``[B]`` at the current gate.
    M, ge, q : Tensor or None
        ``sum_n r_i xt xt^T`` ``[B, k, p, p]``, ``sum_n r_i e_i xt`` ``[B, k, p]`` and ``sum_n r_i e_i^2``
        ``[B, k]``, ``e_i = y - h_i`` (linear Gaussian experts).
    gV, Wm, rA : Tensor or None
        Over the ``f`` free gate rows (affine gates): ``sum_n (r_i - pi_i) xt`` ``[B, f, p]``,
        ``sum_n pi_i (delta_ij - pi_j) xt xt^T`` over ``i <= j`` ``[B, f (f + 1) / 2, p, p]`` and
        ``sum_n r_i xt`` ``[B, f, p]``.
    pi, u : Tensor or None
        The gate weights and logits ``[B, k, n]`` (other gates: :func:`torch.func.jacfwd`).
    """

    r: torch.Tensor | None
    f0: torch.Tensor
    M: torch.Tensor | None
    ge: torch.Tensor | None
    q: torch.Tensor | None
    gV: torch.Tensor | None
    Wm: torch.Tensor | None
    rA: torch.Tensor | None
    pi: torch.Tensor | None
    u: torch.Tensor | None

    def take(self, idx) -> "Posterior":
        return Posterior(*(None if a is None else a[idx] for a in self))

    def where(self, take: torch.Tensor, other: "Posterior") -> "Posterior":
        """Entry-wise ``self`` where ``take [B]``, else ``other``."""
        return Posterior(*(None if a is None else torch.where(take.reshape((-1,) + (1,) * (a.dim() - 1)), a, b)
                           for a, b in zip(self, other)))


_COMPILED: dict = {}


def _estep_fn(em, fv, eta, ls2, X, Y):
    return GenericEM.estep(em, (fv, eta, ls2), X, Y)


def _q_gate_fn(em, fv, X, r):
    return GenericEM.q_gate(em, fv, X, r)


def _q_gate_affine_fn(em, fv, X, rA):
    return GenericEM.q_gate_affine(em, fv, X, rA)


def _compiled(name: str, fn):
    """``fn(em, *tensors)`` under ``torch.compile`` (dynamic shapes; one compilation per process and
    kind of model), with the lone-entry guard of :func:`moestat.estimators.mle_fused._pass_function`:
    a batch of one is run twice over, so dynamo does not specialise on ``B = 1`` and compile again."""
    if name not in _COMPILED:
        from moestat.devices import prepare_compile

        prepare_compile()  # Inductor's caches under ~/.cache/moestat, not $TMPDIR (issue 35)
        c = torch.compile(fn, dynamic=True)

        def run(em, *ts):
            if ts[0].shape[0] == 1:
                out = c(em, *(torch.cat([t, t]) for t in ts))
                return torch.utils._pytree.tree_map(lambda o: None if o is None else o[:1], out)
            return c(em, *ts)

        _COMPILED[name] = run
    return _COMPILED[name]


def use_compiled(em: "GenericEM", compile, size: int, device) -> bool:
    """Run ``em``'s E-step and gate objective -- the passes over ``[B, k, n]`` of every EM step --
    under ``torch.compile`` (fused loops instead of a dozen eager temporaries) when ``compile`` is
    ``True``, or ``"auto"`` and ``size = B n`` reaches
    :data:`~moestat.estimators.mle_fused.COMPILE_MIN_SAMPLES` on the CPU (the fused EM's rule).
    Returns whether it does; the methods are replaced on this instance only."""
    from moestat.estimators.mle_fused import COMPILE_MIN_SAMPLES

    want = compile is True or (compile == "auto" and size >= COMPILE_MIN_SAMPLES and torch.device(device).type == "cpu"
                               and not _COMPILED.get("unavailable"))
    if want:
        est, qg, qa = _compiled("estep", _estep_fn), _compiled("q_gate", _q_gate_fn), _compiled("q_gate_affine", _q_gate_affine_fn)
        em.q_gate_affine = lambda fv, X, rA: qa(em, fv, X, rA)
        em.estep = lambda th, X, Y: est(em, *th, X, Y)
        em.q_gate = lambda fv, X, r: qg(em, fv, X, r)
    return bool(want)


def _grad_hess(F, theta: torch.Tensor):
    """Per-entry gradient ``[..., m]`` and Hessian ``[..., m, m]`` of ``F(theta [..., m]) -> [...]``
    whose entries are independent: the gradient of the sum, then one forward-mode pass per
    coordinate of a perturbation shared by every entry (:func:`torch.func.jacfwd`)."""
    gsum = grad(lambda t: F(t).sum())
    g = gsum(theta)
    H = jacfwd(lambda dl: gsum(theta + dl))(theta.new_zeros(theta.shape[-1]))
    return g, H


def _ascent(F, theta, lam, g, C, tries: int = 8, f0=None):
    """One Levenberg--Marquardt-damped ascent step of ``F`` per entry: solve ``(C + lam (|diag C|
    + 1e-12) I) s = g`` (``C``: minus the Hessian, or its PSD part); a step that does not increase
    ``F`` is retried with ``10 lam`` (up to ``tries`` times) and dropped after that.  ``f0``: ``F(theta)``
    when the caller has it.  Returns the new ``theta`` and ``lam``."""
    if theta.shape[-1] == 0:
        return theta, lam
    f0 = F(theta) if f0 is None else f0
    eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
    D = C.diagonal(dim1=-2, dim2=-1).abs() + 1e-12
    out, lam = theta.clone(), lam.clone()
    todo = torch.isfinite(f0) & torch.isfinite(g).all(-1) & torch.isfinite(C).all((-2, -1))
    for _ in range(tries):
        if not bool(todo.any()):
            break
        s, info = torch.linalg.solve_ex(C + lam[..., None, None] * (D.unsqueeze(-1) * eye), g.unsqueeze(-1))
        s = s.squeeze(-1)
        cand = theta + torch.where(torch.isfinite(s) & todo.unsqueeze(-1), s, torch.zeros_like(s))
        f1 = F(cand)
        ok = todo & (info == 0) & torch.isfinite(f1) & (f1 >= f0)
        out = torch.where(ok.unsqueeze(-1), cand, out)
        lam = torch.where(ok, (lam / 3).clamp_min(1e-12), torch.where(todo, (lam * 10).clamp_max(_LAM_MAX), lam))
        todo = todo & ~ok
    return out, lam


def multinomial_expert_fisher(em: GenericEM, eta, X, Y, r):
    """``r``: responsibilities ``[B, k, n]``.  Gradient ``[B, k, q]`` and minus the Hessian ``[B, k, q, q]`` of every atom's
    ``Q_i = sum_n r_ni log P(y_n | x_n, eta_i)`` for multinomial-logistic experts.

    The logits ``z_c = W_c^T (x, 1)`` (class ``C`` the reference, ``eta_i = vec(W_i)`` as in
    :class:`~moestat.model.likelihood.MultinomialExpert`) are affine in ``eta_i``, so with ``p =
    softmax(z)``: gradient ``sum_n r_ni (e_{y_n} - p)_c xt_n``, minus the Hessian ``sum_n r_ni
    (diag p - p p^T)_{ce} xt_n xt_n^T`` over the free classes -- the Newton--Raphson (IRLS) step of a
    weighted multinomial logistic regression.
    """
    B, n, d = X.shape
    k, C = eta.shape[1], em.model.expert.classes
    r = r.transpose(-1, -2)  # [B, n, k]: the class axis below is innermost
    A = torch.cat([X, torch.ones_like(X[..., :1])], -1)  # [B, n, p]
    P = torch.exp(em.model.expert.log_probs(X, eta))[..., : C - 1]  # [B, n, k, C-1]
    T = torch.nn.functional.one_hot(Y.long(), C)[..., : C - 1].to(X.dtype)  # [B, n, C-1]
    g = torch.einsum("bnk,bnkc,bna->bkca", r, T.unsqueeze(-2) - P, A).reshape(B, k, -1)
    rA = r.unsqueeze(-1) * A.unsqueeze(-2)  # [B, n, k, p]
    diag = torch.einsum("bnkc,bnka,bnf->bkcaf", P, rA, A)  # [B, k, C-1, p, p]
    PA = (P.unsqueeze(-1) * A[:, :, None, None, :]).reshape(B, n, k, -1)  # [B, n, k, (C-1) p]
    Cm = -torch.einsum("bnkx,bnky->bkxy", r.unsqueeze(-1) * PA, PA)
    p = A.shape[-1]
    for c in range(C - 1):
        Cm[:, :, c * p:(c + 1) * p, c * p:(c + 1) * p] += diag[:, :, c]
    return g, Cm


def gate_fisher(em: GenericEM, fv, X, post: Posterior):
    """Gradient ``[B, mg]`` and Fisher curvature ``[B, mg, mg]`` of ``Q_g`` at ``fv`` (see
    :func:`_gate_step`) from the E-step's :class:`Posterior` there.  An affine gate (``post.Wm`` given)
    uses ``du/dtheta`` = the data in closed form; any other, :func:`torch.func.jacfwd` of the logits
    (``post.pi``, ``post.u``); the tests check that both agree."""
    if post.Wm is not None:
        # du_i/dV_jc = delta_ij xt_c / tau with xt = (x, 1): gradient and curvature in the rows
        # V = (beta1, beta0) from the E-step's sums over n, then onto the free parameters (fv = V embed^T).
        # Only the blocks of rows with a free parameter are formed (k - 1 of them for a softmax
        # with a reference atom): block (i, j) = sum_n pi_i (delta_ij - pi_j) xt xt^T / tau^2.
        # Where a Top-K gate switches expert i off, pi_i = r_i = 0 and its terms vanish.
        B_, p, f = post.Wm.shape[0], em.p, em.n_free_rows
        tau = em.model.gate.temperature
        gV = post.gV.reshape(B_, f * p) / tau
        mom = post.Wm / tau**2  # [B, f (f + 1) / 2, p, p]
        I, J = torch.triu_indices(f, f)
        CV = mom.new_zeros(B_, f, f, p, p)
        CV[:, I, J] = mom
        CV[:, J, I] = mom.transpose(-1, -2)
        CV = CV.transpose(2, 3).reshape(B_, f * p, f * p)
        E = em.embed_rows.to(fv)  # [mg, f p]
        return gV @ E.T, E @ CV @ E.T
    r, u, pi = post.r, post.u, post.pi
    J = jacfwd(lambda dl: em.log_u(fv + dl, X))(fv.new_zeros(fv.shape[-1]))  # [B, k, n, mg]
    J = torch.where(torch.isfinite(u).unsqueeze(-1), J, torch.zeros_like(J))
    g = torch.einsum("bina,bin->ba", J, r - pi)
    Jp = torch.einsum("bina,bin->bna", J, pi)
    C = torch.einsum("bina,bin,binc->bac", J, pi, J) - torch.einsum("bna,bnc->bac", Jp, Jp)
    return g, C


def _gate_step(em: GenericEM, fv, lam, X, post):
    """One damped Gauss--Newton (Fisher scoring) ascent step of ``Q_g`` per batch entry.

    With ``J = du/dtheta`` ``[B, k, n, mg]`` (:func:`torch.func.jacfwd`; the data itself for the
    softmax of a linear score, then in closed form) and ``pi = softmax(u)``:
    gradient ``sum_n J^T (r - pi)``, curvature ``sum_n J^T (diag pi - pi pi^T) J`` -- minus the
    Hessian where ``u`` is linear in the parameters (a linear-score softmax: IRLS), its positive
    semi-definite part otherwise; kept only where ``Q_g`` increases (:func:`_ascent`).
    """
    if fv.shape[-1] == 0:
        return fv, lam
    g, C = gate_fisher(em, fv, X, post)
    if post.rA is not None and not em.topk:  # Q_g from sum_n r xt: no pass over r per trial step
        return _ascent(lambda t: em.q_gate_affine(t, X, post.rA), fv, lam, g, C, f0=post.f0)
    return _ascent(lambda t: em.q_gate(t, X, post.r), fv, lam, g, C, f0=post.f0)


class _State:
    """Parameters of the active entries: free gate ``fv [B, mg]``, ``eta [B, k, q]``, ``ls2 [B, k]``
    (log-variances; zeros and unused for the multinomial family) and the damping of every block."""

    def __init__(self, fv, eta, ls2, lam_g, lam_e):
        self.fv, self.eta, self.ls2, self.lam_g, self.lam_e = fv, eta, ls2, lam_g, lam_e

    @property
    def th(self):
        return (self.fv, self.eta, self.ls2)

    def flat(self):
        return torch.cat([self.fv, self.eta.flatten(1), self.ls2], 1)

    def take(self, idx):
        return _State(*(a[idx] for a in (self.fv, self.eta, self.ls2, self.lam_g, self.lam_e)))


def _m_step(em: GenericEM, st: _State, X, Y, post: Posterior, floor):
    """One generalised M-step (experts, variances, gate) from the E-step's :class:`Posterior`
    (:meth:`GenericEM.estep`) at ``st``, for the data ``X [B, n, d]``, ``Y [B, n]``."""
    r = post.r
    n = X.shape[1]
    eta, ls2 = st.eta, st.ls2
    wss = None
    if em.linear:  # weighted least squares from the E-step's sums: the exact maximiser, as a correction
        delta, wss, _ = expert_wls(post.M, post.ge, post.q, n)
        eta = eta + delta
    else:
        F = lambda e: em.q_expert(e, ls2, X, Y, r)  # noqa: E731  [B, k], one objective per atom
        if em.multinomial:  # logits affine in eta: the IRLS gradient and (exact) Hessian from the data
            g, C = multinomial_expert_fisher(em, eta, X, Y, r)
        else:
            g, H = _grad_hess(F, eta)
            C = -H
        eta, st.lam_e = _ascent(F, eta, st.lam_e, g, C)
    if em.gaussian:
        mass = post.M[..., -1, -1] if em.linear else r.sum(-1)
        if wss is None:
            wss = (r * (Y.unsqueeze(-2) - em.means(eta, X)) ** 2).sum(-1)
        s2 = torch.where(mass > 1e-8 * n, wss / mass.clamp_min(1e-300), torch.exp(ls2))
        ls2 = torch.log(torch.maximum(s2, floor.unsqueeze(-1)))
    fv, lam_g = _gate_step(em, st.fv, st.lam_g, X, post)
    return _State(fv, eta, ls2, lam_g, st.lam_e)


def fit_generic(model: LikelihoodModel, X, Y, fv, eta, ls2, *, max_iter=1000, tol=1e-10, var_floor=1e-6,
                accelerate=False, polish_iter=0, search_rounds: int = 50, compile="auto") -> dict:
    """Batched generalised EM (see the module docstring) from ``B`` starts.

    Parameters
    ----------
    model : LikelihoodModel
    X : Tensor, shape ``[B, n, d]``
    Y : Tensor, shape ``[B, n]``
    fv : Tensor, shape ``[B, mg]``
        Free gate parameters (:class:`GenericEM`'s layout).
    eta : Tensor, shape ``[B, k, q]``
    ls2 : Tensor, shape ``[B, k]``
        Log-variances (ignored for the multinomial family).
    compile : bool or "auto"
        Compile the E-step and the gate objective (:func:`use_compiled`).

    Returns
    -------
    dict
        NumPy: ``fv, eta, ls2``, ``loglik [B]``, ``n_iter [B]``, ``n_newton [B]``, ``status``
        (list: ``tol``, ``newton``, ``max_iter`` or ``nonfinite``), ``paths`` (list of ``[n_iter + 1]``),
        ``kernel`` (``"generic"`` or ``"generic-compiled"``).
    """
    B, n, d = X.shape
    k = eta.shape[1]
    em = GenericEM(model, k, d, X.dtype)
    compiled = use_compiled(em, compile, B * n, X.device)
    floor = var_floor * Y.var(dim=1).clamp_min(1e-300)
    if not em.gaussian:
        ls2 = torch.zeros(B, k, dtype=X.dtype)
    ls2 = torch.log(torch.maximum(torch.exp(ls2), floor.unsqueeze(-1))) if em.gaussian else ls2
    lam0 = torch.full((B,), _LAM0, dtype=X.dtype)
    full = _State(fv.clone(), eta.clone(), ls2.clone(), lam0, torch.full((B, k), _LAM0, dtype=X.dtype))
    status = ["max_iter"] * B
    paths: list[list[float]] = [[] for _ in range(B)]
    act = torch.arange(B)
    st, Xa, Ya, fa = full.take(act), X, Y, floor  # a copy: full is written into below
    try:
        ll, r = em.estep(st.th, Xa, Ya)
    except torch._dynamo.exc.BackendCompilerFailed as exc:  # no working C++ compiler: the same steps, eager
        if compile is True:
            raise
        import warnings

        warnings.warn(f"torch.compile is unavailable ({type(exc).__name__}); the generic EM runs eagerly", RuntimeWarning)
        _COMPILED["unavailable"] = True  # "auto" does not try again in this process
        em, compiled = GenericEM(model, k, d, X.dtype), False
        ll, r = em.estep(st.th, Xa, Ya)  # r: the posterior (Posterior)
    for b, v in zip(act.tolist(), ll.tolist()):
        paths[b].append(v)

    def step(s, r):
        s1 = _m_step(em, s, Xa, Ya, r, fa)
        return s1, *em.estep(s1.th, Xa, Ya)

    it = 0
    while act.numel() and it < max_iter:
        ll0 = ll
        if accelerate:  # SQUAREM (SqS3) along two GEM steps, kept where no worse than the second step
            it += 2
            s1, l1, r1 = step(st, r)
            s2_, l2, r2 = step(s1, r1)
            t0, t1, t2 = st.flat(), s1.flat(), s2_.flat()
            rr, v = t1 - t0, t2 - 2 * t1 + t0
            alpha = -(rr.norm(dim=1) / v.norm(dim=1).clamp_min(1e-300)).clamp_min(1.0)
            ext = t0 - 2 * alpha[:, None] * rr + alpha[:, None] ** 2 * v
            mg, kq = em.mg, k * eta.shape[-1]
            ls2x = ext[:, mg + kq :]
            if em.gaussian:
                ls2x = torch.maximum(ls2x, torch.log(fa).unsqueeze(-1))
            sx = _State(ext[:, :mg], ext[:, mg : mg + kq].reshape(-1, k, eta.shape[-1]), ls2x, s2_.lam_g, s2_.lam_e)
            lx, rx = em.estep(sx.th, Xa, Ya)
            take = torch.isfinite(lx) & (lx >= l2) & ((l2 - l1).abs() > tol * n)
            w = lambda a, b: torch.where(take.reshape(-1, *([1] * (a.dim() - 1))), a, b)  # noqa: E731
            st = _State(*(w(a, b) for a, b in zip((sx.fv, sx.eta, sx.ls2), (s2_.fv, s2_.eta, s2_.ls2))), s2_.lam_g, s2_.lam_e)
            for b, v1, v2, vx, tk in zip(act.tolist(), l1.tolist(), l2.tolist(), lx.tolist(), take.tolist()):
                paths[b] += [v1, v2] + ([vx] if tk else [])
            ll0, ll, r = l1, torch.where(take, lx, l2), rx.where(take, r2)
        else:
            it += 1
            st, ll, r = step(st, r)
            for b, v in zip(act.tolist(), ll.tolist()):
                paths[b].append(v)
        full.fv[act], full.eta[act], full.ls2[act] = st.fv, st.eta, st.ls2
        keep = retire_finished(ll, ll0, tol, n, act, status)
        if keep is not None:
            act, Xa, Ya, fa, ll = act[keep], Xa[keep], Ya[keep], fa[keep], ll[keep]
            r = r.take(keep)
            st = st.take(keep)
    from moestat.estimators.generic_refine import polish, topk_search

    if em.topk and search_rounds > 0:
        topk_search(model, em, full, X, Y, status, paths, rounds=search_rounds, max_iter=max_iter, tol=tol,
                     var_floor=var_floor, accelerate=accelerate, compile=compile if compiled else False)
    n_newton = np.zeros(B, dtype=int)
    if polish_iter > 0:
        n_newton = polish(em, full, X, Y, floor, status, paths, tol=tol, max_iter=polish_iter)
    return {
        "fv": full.fv.numpy(), "eta": full.eta.numpy(), "ls2": full.ls2.numpy(), "status": status,
        "loglik": np.array([p[-1] for p in paths]), "n_iter": np.array([len(p) - 1 for p in paths]),
        "n_newton": n_newton, "paths": [np.array(p) for p in paths], "kernel": "generic-compiled" if compiled else "generic",
    }
