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
  exact maximiser); multinomial-logistic experts by Newton-IRLS with a line search to the maximiser
  of their concave ``Q_i(eta_i) = sum_n r_ni log f(y_n | x_n, eta_i)`` (:data:`MSTEP_TOL`);
  any other expert by one Levenberg--Marquardt-damped Newton step on its ``Q_i`` (gradient and
  Hessian by :mod:`torch.func`), kept only where ``Q_i`` increases.  Then ``sigma_i^2 = sum_n r_ni (y_n - h_i)^2 / sum_n r_ni``
  (exact), floored at ``var_floor * var(y)`` (the likelihood is unbounded without a floor).
* **Gate**: one damped Newton step on ``Q_g = sum_ni r_ni log w_i(x_n)`` over the free gate
  parameters, kept only where ``Q_g`` increases (with multinomial-logistic experts, the dense
  linear-score softmax gate's concave ``Q_g`` maximised like the experts').  A Top-K gate in two blocks (:func:`_topk_gate_step`):
  the biases on ``Q_g``, the scores kept where the observed log-likelihood increases (ECME).

Each accepted update increases the expected complete-data log-likelihood, so the observed
log-likelihood never decreases (generalised EM); the tests check every trace.  Free gate
parameters: softmax with a reference atom -- every row but the last (``beta0_k = 0``, ``beta1_k =
0``); a Gaussian gate -- every centre and ``beta0_1 .. beta0_{k-1}`` (``beta0`` is renormalised to
``logsumexp = 0`` in the result: ``exp(beta0)`` are the mixing weights); a sigmoid gate -- all.

The loop (SQUAREM, retirement, traces) is :mod:`moestat.estimators.em_driver`'s, the Newton polish
:mod:`moestat.estimators.newton`'s (Hessian by :mod:`torch.func`), as for the fused EM of
:mod:`moestat.estimators.mle` (the dense linear softmax gate with linear experts).

Speed.  Per-sample tensors are atom-major, ``[B, k, n]``.  The E-step returns a :class:`Posterior`
with everything of the M-step that is a pass over the samples; where a step has a closed form
(linear experts, an affine gate) already summed over them, the sums written as products of feature
rows (:func:`~moestat.estimators.mle_fused.feature_moments`), so that the M-step itself is small
matrix algebra.  The E-step and the gate objective run under ``torch.compile`` for large problems
(:func:`use_compiled`): one fused loop.  On model 1 the generic EM takes 1.2-1.6x the fused EM's
time, with the same fits (``benchmarks/mle_generic_vs_fused.py``, docs/guide/own_gmoe.rst).
A gate whose atom ``i`` scores with its own ``beta1_i`` alone (the Laplace and Gaussian gates:
``GateFamily.separable_score``) gives its scores atom-major with their derivatives
(``GateFamily.score_rows``), and its Fisher-scoring step is then formed from ``d`` derivative rows
(:func:`_row_gate_fisher`) instead of a :func:`torch.func.jacfwd` over every free gate parameter; a
Top-K gate's mask is counted atom-major, and a search over the gate alone evaluates the experts'
densities once (``benchmarks/bench_generic_em.py``).  The score search evaluates a
coordinate's steps in one batch, recomputing only the moved score row (:func:`_search_logliks`), and
only for the entries the previous round moved; a damped step (:func:`~moestat.estimators.newton.ascent`)
tries only the entries still trying, never the same step twice (``benchmarks/bench_topk_em.py``: the
same fits, bitwise).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch.func import jacfwd

from moestat.estimators import mle_fused, newton
from moestat.estimators.em_driver import compile_batched, run_em
from moestat.estimators.mle_fused import expert_wls, feature_affine, feature_firsts, feature_moments, feature_rows
from moestat.estimators.newton import ascent, grad_hess
from moestat.model.gate_families import GateFamily, top_k_mask
from moestat.model.likelihood import LikelihoodModel
from moestat.model.protocol import linear_score

__all__ = ["GenericEM", "Posterior", "fit_generic", "gate_fisher", "multinomial_expert_fisher", "use_compiled", "score_search",
           "topk_search", "polish"]

_LAM0 = 1e-6
#: The exact M-step of multinomial-logistic experts and of their affine softmax gate: Newton
#: steps until the Newton decrement of each concave ``Q`` is at most ``MSTEP_TOL * n`` -- a hundredth of
#: the change ``tol * n`` (``tol = 1e-10``) at which EM stops, so the M-step's own error never decides
#: EM's stopping -- and at most ``MSTEP_MAX_STEPS`` (a class separated within an atom's weights has its
#: maximiser at infinity, which no number of steps reaches).
MSTEP_TOL = 1e-12
MSTEP_MAX_STEPS = 25
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


def _coordinate_rows(X: torch.Tensor) -> list:
    """The ``d`` input coordinates of ``X [B, n, d]`` as rows ``[B, n]``."""
    return [X[..., c] for c in range(X.shape[-1])]


def _affine(P: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``P_i . xt_n`` ``[B, k, n]`` for rows ``P [B, k, p]`` (last entry the intercept) and ``X [B, n, d]``:
    by feature rows (:func:`feature_affine`, one fused loop under torch.compile), or a matmul for many features."""
    xs = _features(X)
    if xs is None:
        return P[..., :-1] @ X.transpose(-1, -2) + P[..., -1:]
    return feature_affine(P, xs)


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

    def __init__(self, model: LikelihoodModel, k: int, d: int, dtype=torch.float64, gate_box=None) -> None:
        self.model, self.k, self.d, self.p = model, k, d, d + 1
        self.gaussian = model.family == "gaussian"
        self.q = model.n_expert_params(d)
        self.linear = self.gaussian and getattr(model.expert, "name", "") == "identity"
        self.multinomial = model.family == "multinomial"
        g = model.gate

        # logits (beta0 + beta1^T x) / tau, softmax-normalised (dense or Top-K): affine in the gate
        # parameters, so du/dtheta is the data and the gate's Fisher scoring step has a closed form
        self.affine_gate = g.normalisation == "softmax" and g.score is linear_score
        self.topk = g.k_active is not None and g.k_active < k
        #: atom i's score a function of beta1_i alone, written atom-major with its derivative by the gate's
        #: family (GateFamily.score_rows: the Laplace and Gaussian gates): the gate step's Jacobian in closed form
        self.row_gate = not self.affine_gate and bool(getattr(g.family, "separable_score", False))
        #: whether a step needs the per-sample responsibilities; not when every step has a closed
        #: form from sums over the samples (linear experts, a dense affine gate)
        self.need_r = not (self.linear and self.affine_gate and not self.topk)
        free = torch.as_tensor(g.free_mask(k, d))  # the gate's own reference convention
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
        #: positions in ``fv`` of the free biases ``beta0`` and of the free score parameters ``beta1``
        col = (torch.nonzero(self.free).flatten() % (d + 1)).tolist()
        self.bias_coords = [j for j, c in enumerate(col) if c == d]
        self.score_coords = [j for j, c in enumerate(col) if c < d]
        #: a compact set of the free gate parameters, ``|fv_j| <= gate_hi_j`` (the gate family's
        #: ``box_limits`` of a ParameterBox ``gate_box``), or ``None``: maximum likelihood over all of R^mg
        self.gate_box, self.gate_hi = gate_box, None
        if gate_box is not None:
            limits = getattr(g.family, "box_limits", None)
            if limits is None or self.topk or (self.multinomial and self.affine_gate):
                raise ValueError(f"gate_box: the {g.normalisation} gate (dense, with its own box_limits) only")
            self.gate_hi = torch.as_tensor(np.asarray(limits(k, d, gate_box), dtype=float), dtype=dtype).flatten()[self.free]

    def clamp_gate(self, fv: torch.Tensor) -> torch.Tensor:
        """``fv [B, mg]`` projected onto the gate's box (the nearest point: coordinate-wise); unchanged without one."""
        return fv if self.gate_hi is None else torch.minimum(torch.maximum(fv, -self.gate_hi), self.gate_hi)

    def face(self, theta: torch.Tensor, g: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The projected Newton system of Bertsekas (1982) on the gate's box (unchanged without one).

        ``theta [B, m]`` starts with the ``mg`` free gate parameters, ``g [B, m]`` is the gradient and
        ``C [B, m, m]`` minus the Hessian (or its positive semi-definite part).  A gate coordinate on
        its bound with the gradient pointing out of the box is held: its gradient set to 0 and its
        curvature decoupled (a unit diagonal), so the damped step moves the other coordinates by the
        Newton step on that face, and the projection then keeps them in the box.  Without it, a
        projected full Newton step mixes in the held coordinates' outward pull and crawls (a bounded
        fit stopped 1.7e-5 nats short of L-BFGS-B's maximum).  At a Karush--Kuhn--Tucker point the
        reduced gradient is 0, so :func:`moestat.estimators.newton.certificate` on the reduced system
        certifies a maximum over the box.
        """
        if self.gate_hi is None:
            return g, C
        mg, x, hi = self.mg, theta[:, : self.mg], self.gate_hi
        held = torch.zeros_like(g, dtype=torch.bool)
        held[:, :mg] = ((x >= hi) & (g[:, :mg] > 0)) | ((x <= -hi) & (g[:, :mg] < 0))
        keep = ~held
        C = torch.where(keep.unsqueeze(-1) & keep.unsqueeze(-2), C, torch.zeros_like(C)) + torch.diag_embed(held.to(C.dtype))
        return torch.where(held, torch.zeros_like(g), g), C

    def on_box(self, fv: torch.Tensor) -> np.ndarray:
        """Whether a free gate parameter of each entry ``fv [B, mg]`` lies on the box's boundary (``[B]``
        bool; a projected coordinate equals its bound exactly, within 1e-9 relative for a later
        step that moved along the face); all ``False`` without a box."""
        if self.gate_hi is None:
            return np.zeros(fv.shape[0], dtype=bool)
        return (fv.abs() >= self.gate_hi * (1 - 1e-9)).any(-1).numpy()

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
        if self.affine_gate:  # the linear score beta1^T x (no intercept), atom-major
            s = _affine(torch.cat([V[..., : self.d], torch.zeros_like(V[..., :1])], -1), X)
            # the gate's own formula on that score (bias, temperature, Top-K; the logits, not normalised)
            return g.family.log_weights_from_scores(g, s, V[..., self.d], normalise=False, atom_axis=-2)
        if self.row_gate:  # the family's own atom-major score (GateFamily.score_rows): no [B, n, k, d] temporary
            s, _ = g.family.score_rows(g, _coordinate_rows(X), V[..., : self.d])
            return g.family.log_weights_from_scores(g, s, V[..., self.d], normalise=False, atom_axis=-2)
        return g.log_weights(X, V[..., self.d], V[..., : self.d], normalise=False).transpose(-1, -2)

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
            return _affine(eta, X)
        return self.model.expert(X, eta).transpose(-1, -2)

    def log_f(self, eta, ls2, X, Y):
        """``log f(y_n | x_n, eta_i)`` ``[B, k, n]``."""
        if self.gaussian:
            return _gaussian_log_f(Y.unsqueeze(-2) - self.means(eta, X), ls2)
        lp = self.model.expert.log_probs(X, eta)  # [B, n, k, C]
        idx = Y.long()[..., None, None].expand(lp.shape[:-1] + (1,))
        return lp.gather(-1, idx).squeeze(-1).transpose(-1, -2)

    def loglik(self, fv, eta, ls2, X, Y, lf=None):
        """Observed log-likelihood ``[B]``; ``lf``: :meth:`log_f` at ``(eta, ls2)`` when the caller has it
        (a search over the gate alone evaluates the experts' densities once, not per trial)."""
        u = self.log_u(fv, X)
        if lf is None:
            lf = self.log_f(eta, ls2, X, Y)
        return self.loglik_from(u, lf)

    @staticmethod
    def loglik_from(u: torch.Tensor, lf: torch.Tensor) -> torch.Tensor:
        """Observed log-likelihood ``[...]`` from the logits ``u`` and the experts' log-densities ``lf``
        ``[..., k, n]``: ``sum_n lse_i(u + lf) - lse_i(u)``."""
        return (torch.logsumexp(u + lf, -2) - torch.logsumexp(u, -2)).sum(-1)

    def affine_scores(self, fv, X):
        """The linear scores ``beta1_i^T x`` ``[B, k, n]`` of an affine gate at ``fv`` and their Top-K mask
        (``None`` for a dense gate): what :meth:`log_u` computes before the bias."""
        V = self.gate_V(fv)
        s = _affine(torch.cat([V[..., : self.d], torch.zeros_like(V[..., :1])], -1), X)
        g = self.model.gate
        return s, (top_k_mask(s, g.k_active, dim=-2) if self.topk else None)

    def log_u_biases(self, s, mask, fv):
        """:meth:`log_u` of an affine gate at ``fv`` from its scores and mask (:meth:`affine_scores`) at a
        gate with the same ``beta1``: only the biases of ``fv`` are read (the same arithmetic)."""
        g = self.model.gate
        return g.family.log_weights_from_scores(g, s, self.gate_V(fv)[..., self.d], normalise=False, atom_axis=-2,
                                                mask=mask)

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


_COMPILED: dict = {}


def _estep_fn(em, fv, eta, ls2, X, Y):
    return GenericEM.estep(em, (fv, eta, ls2), X, Y)


def _q_gate_fn(em, fv, X, r):
    return GenericEM.q_gate(em, fv, X, r)


def _q_gate_affine_fn(em, fv, X, rA):
    return GenericEM.q_gate_affine(em, fv, X, rA)


def _compiled(name: str, fn):
    """``fn(em, *tensors)`` under ``torch.compile`` (:func:`~moestat.estimators.em_driver.compile_batched`;
    one compilation per process and kind of model)."""
    if name not in _COMPILED:
        _COMPILED[name] = compile_batched(fn, lead=1)
    return _COMPILED[name]


def use_compiled(em: "GenericEM", compile, size: int, device) -> bool:
    """Run ``em``'s E-step and gate objective -- the passes over ``[B, k, n]`` of every EM step --
    under ``torch.compile`` (fused loops instead of a dozen eager temporaries) when ``compile`` is
    ``True``, or ``"auto"`` (or a sweep's ``"all"``, which the fused EM alone reads as "any size")
    and ``size = B n`` reaches :data:`~moestat.estimators.mle_fused.COMPILE_MIN_SAMPLES` on the CPU
    (the fused EM's rule).
    Returns whether it does; the methods are replaced on this instance only."""
    want = compile is True or (compile in ("auto", "all") and size >= mle_fused.COMPILE_MIN_SAMPLES and torch.device(device).type == "cpu"
                               and not _COMPILED.get("unavailable"))
    if want:
        est, qg, qa = _compiled("estep", _estep_fn), _compiled("q_gate", _q_gate_fn), _compiled("q_gate_affine", _q_gate_affine_fn)
        em.q_gate_affine = lambda fv, X, rA: qa(em, fv, X, rA)
        em.estep = lambda th, X, Y: est(em, *th, X, Y)
        em.q_gate = lambda fv, X, r: qg(em, fv, X, r)
    return bool(want)


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
    if em.row_gate:
        return _row_gate_fisher(em, fv, X, r, u, pi)
    J = jacfwd(lambda dl: em.log_u(fv + dl, X))(fv.new_zeros(fv.shape[-1]))  # [B, k, n, mg]
    J = torch.where(torch.isfinite(u).unsqueeze(-1), J, torch.zeros_like(J))
    g = torch.einsum("bina,bin->ba", J, r - pi)
    Jp = torch.einsum("bina,bin->bna", J, pi)
    C = torch.einsum("bina,bin,binc->bac", J, pi, J) - torch.einsum("bna,bnc->bac", Jp, Jp)
    return g, C


def _row_gate_fisher(em: GenericEM, fv, X, r, u, pi):
    """:func:`gate_fisher` of a gate whose score is separable (``em.row_gate``): gradient ``[B, mg]`` and
    Fisher curvature ``[B, mg, mg]`` of ``Q_g`` from the family's atom-major score derivative.

    Atom ``i``'s logit ``u_i = (s_i(x; beta1_i) + beta0_i) / tau`` depends on its own row ``V_i =
    (beta1_i, beta0_i)`` alone, with ``du_i / dV_i = z_i(x) / tau``, ``z_i = (ds_i / dbeta1_i, 1)``
    ``[p]``.  The Jacobian that :func:`torch.func.jacfwd` would build over every free parameter,
    ``[B, k, n, mg]``, is thus block-diagonal, and the sums of the generic branch become, per pair of
    rows: gradient ``sum_n (r_i - pi_i) z_i / tau``, curvature ``sum_n pi_i (delta_ij z_i z_i^T -
    pi_j z_i z_j^T) / tau^2`` -- the same quantities (the tests compare them with the
    :func:`~torch.func.jacfwd` branch), from ``d`` derivative rows instead of ``mg`` forward passes.
    """
    g = em.model.gate
    B, k, n = pi.shape
    p = em.p
    _, ds = g.family.score_rows(g, _coordinate_rows(X), em.gate_V(fv)[..., : em.d], grad=True)
    Z = torch.stack(ds + [torch.ones_like(ds[0])], 2)  # [B, k, p, n]
    if em.topk:  # an atom switched off: u = -inf, its derivative taken as 0 (the generic branch's rule)
        Z = torch.where(torch.isfinite(u).unsqueeze(2), Z, torch.zeros_like(Z))
    tau = g.temperature
    Pz = pi.unsqueeze(2) * Z  # pi_i z_i [B, k, p, n]
    gV = ((r - pi).unsqueeze(2) * Z).sum(-1)  # [B, k, p]
    diag = Pz @ Z.transpose(-1, -2)  # sum_n pi_i z_i z_i^T [B, k, p, p]
    Pf = Pz.reshape(B, k * p, n)
    CV = -(Pf @ Pf.transpose(-1, -2))  # - sum_n (pi_i z_i)(pi_j z_j)^T [B, k p, k p]
    CV = CV.reshape(B, k, p, k, p)
    idx = torch.arange(k)
    CV[:, idx, :, idx, :] += diag.transpose(0, 1)  # advanced indices first: [k, B, p, p]
    rows = em.free_rows
    gV, CV = gV[:, rows], CV[:, rows][:, :, :, rows]
    f = len(rows)
    gV, CV = gV.reshape(B, f * p), CV.reshape(B, f * p, f * p)
    if tau != 1.0:
        gV, CV = gV / tau, CV / tau**2
    E = em.embed_rows.to(fv)  # [mg, f p]
    return gV @ E.T, E @ CV @ E.T


def _gate_step(em: GenericEM, fv, lam, X, post):
    """One damped Gauss--Newton (Fisher scoring) ascent step of ``Q_g`` per batch entry.

    With ``J = du/dtheta`` ``[B, k, n, mg]`` (:func:`torch.func.jacfwd`; the data itself for the
    softmax of a linear score, then in closed form) and ``pi = softmax(u)``:
    gradient ``sum_n J^T (r - pi)``, curvature ``sum_n J^T (diag pi - pi pi^T) J`` -- minus the
    Hessian where ``u`` is linear in the parameters (a linear-score softmax: IRLS), its positive
    semi-definite part otherwise; kept only where ``Q_g`` increases (:func:`~moestat.estimators.newton.ascent`).
    A Top-K gate takes :func:`_topk_gate_step` instead.
    """
    if fv.shape[-1] == 0:
        return fv, lam
    g, C = gate_fisher(em, fv, X, post)
    if em.gate_hi is not None:  # projected Newton step, judged at the projected point: Q_g never decreases
        c = em.clamp_gate
        g, C = em.face(fv, g, C)
        out, lam = ascent(lambda t: em.q_gate(c(t), X, post.r), fv, lam, g, C, f0=post.f0)
        return c(out), lam
    if post.rA is not None and not em.topk:  # Q_g from sum_n r xt: no pass over r per trial step
        return ascent(lambda t: em.q_gate_affine(t, X, post.rA), fv, lam, g, C, f0=post.f0)
    return ascent(lambda t: em.q_gate(t, X, post.r), fv, lam, g, C, f0=post.f0)


def _exact_gate_step(em: GenericEM, fv, X, post):
    """The maximiser of ``Q_g`` over the free parameters of a dense softmax gate with a linear score
    (``em.affine_gate``, no Top-K): a weighted multinomial-logistic regression of the responsibilities
    on ``(x, 1)``, concave, so Newton-IRLS with a line search (:func:`~moestat.estimators.newton.maximise_concave`)
    reaches it.  The first step uses the E-step's sums (:func:`gate_fisher`); the next ones recompute
    ``pi`` and the same sums at the new gate (one pass over the samples each)."""
    if fv.shape[-1] == 0:
        return fv
    r, rA = post.r, post.rA
    xs = _features(X)

    def terms(t):
        if t is fv:  # the E-step's own sums at the current gate
            return gate_fisher(em, t, X, post)
        pi, _ = em.softmax_lse(em.log_u(t, X))
        dr, w = em.gate_weights(r, pi)
        return gate_fisher(em, t, X, post._replace(gV=_firsts(dr, X, xs), Wm=_moments(w, X, xs)))

    F = lambda t: em.q_gate_affine(t, X, rA)  # noqa: E731
    n = X.shape[1]
    out, _, _ = newton.maximise_concave(F, fv, terms, tol=MSTEP_TOL * n, max_steps=MSTEP_MAX_STEPS, f0=post.f0)
    return out


def _topk_gate_step(em: GenericEM, fv, lam, lam_s, X, Y, post, eta, ls2):
    """The gate's M-step of a Top-K gate, in two blocks; returns ``fv [B, mg]`` and both dampings ``[B]``.

    ``Q_g`` cannot judge a step that moves a Top-K boundary: where a sample's active set loses
    expert ``i`` while ``r_ni > 0`` (every sample: Gaussian responsibilities are positive),
    ``r_ni log w_i = -inf``.  A joint Newton step of the whole gate on ``Q_g`` was therefore always
    rejected, and the gate -- ``beta0`` too -- stayed at its start (topk-gmoe, n = 16 000: every
    fitted ``beta0`` equal to its start's to 1e-3, 2-28 nats below the truth's likelihood).

    1. **Biases** ``beta0``: the active sets are the Top-K of the score *before* the bias (eq. (2)
       of Nguyen, Akbarian, Yan & Ho 2024), so ``Q_g`` is finite and concave in ``beta0``: the
       Fisher-scoring step on that block, kept where ``Q_g`` increases (generalised EM).
    2. **Scores** ``beta1``: the same Fisher-scoring direction on that block (at the current
       parameters the gradient of ``Q_g`` is the observed score's on the smooth piece, Fisher's
       identity), kept where the *observed* log-likelihood at the updated experts ``eta, ls2``
       increases: an ECME conditional maximisation (Liu & Rubin 1994), still monotone, which may
       move boundaries.  What a derivative cannot see (the likelihood jumps at a boundary) is
       left to :func:`score_search`.
    """
    if fv.shape[-1] == 0:
        return fv, lam, lam_s
    g, C = gate_fisher(em, fv, X, post)
    bias, score = em.bias_coords, em.score_coords
    s0 = mask0 = None
    if len(bias):
        ix = torch.as_tensor(bias)
        # the scores and their Top-K mask do not move with the biases: computed once, not per trial
        s0, mask0 = em.affine_scores(fv, X)

        def q_b(t):
            full = fv.clone()
            full[:, ix] = t
            u = em.log_u_biases(s0, mask0, full)
            return em.q_gate_u(u, _lse_atoms(u), post.r)

        tb, lam = ascent(q_b, fv[:, ix], lam, g[:, ix], C[:, ix][:, :, ix], f0=post.f0)
        fv = fv.clone()
        fv[:, ix] = tb
    if len(score):
        ix = torch.as_tensor(score)
        lf = em.log_f(eta, ls2, X, Y)  # the experts are fixed in this block: their densities once
        B = fv.shape[0]

        def l_s(t, rows):  # the entries ``rows`` only: a try costs the entries still trying
            if len(rows) == B:
                full, e, l2, x, y, f = fv.clone(), eta, ls2, X, Y, lf
            else:
                full, e, l2, x, y, f = fv[rows], eta[rows], ls2[rows], X[rows], Y[rows], lf[rows]
            full[:, ix] = t
            return em.loglik(full, e, l2, x, y, f)

        # the block starts at the biases' step, whose scores and mask are still s0's: no new Top-K there
        f0 = None if s0 is None else em.loglik_from(em.log_u_biases(s0, mask0, fv), lf)
        ts, lam_s = ascent(l_s, fv[:, ix], lam_s, g[:, ix], C[:, ix][:, :, ix], f0=f0, subset=True)
        fv = fv.clone()
        fv[:, ix] = ts
    return fv, lam, lam_s


class _State(NamedTuple):
    """Parameters of the active entries: free gate ``fv [B, mg]``, ``eta [B, k, q]``, ``ls2 [B, k]``
    (log-variances; zeros and unused for the multinomial family) and the dampings of the gate
    ``lam_g [B]``, of the experts ``lam_e [B, k]`` and of a Top-K gate's score block ``lam_s [B]``
    (:func:`_topk_gate_step`; unused otherwise)."""

    fv: torch.Tensor
    eta: torch.Tensor
    ls2: torch.Tensor
    lam_g: torch.Tensor
    lam_e: torch.Tensor
    lam_s: torch.Tensor

    @property
    def th(self):
        return (self.fv, self.eta, self.ls2)

    def vector(self, ls2: bool = True) -> torch.Tensor:
        """The one layout ``(fv, vec(eta), ls2)`` ``[B, mg + k q (+ k)]`` of SQUAREM and the Newton polish
        (:func:`moestat.estimators.mle_newton.pack`'s for the linear softmax); ``ls2=False``: without ``ls2``."""
        return torch.cat([self.fv, self.eta.flatten(1)] + ([self.ls2] if ls2 else []), 1)


def _m_step(em: GenericEM, st: _State, X, Y, post: Posterior, floor):
    """One generalised M-step (experts, variances, gate) from the E-step's :class:`Posterior`
    (:meth:`GenericEM.estep`) at ``st``, for the data ``X [B, n, d]``, ``Y [B, n]``."""
    r = post.r
    n = X.shape[1]
    eta, ls2, lam_e = st.eta, st.ls2, st.lam_e
    wss = None
    if em.linear:  # weighted least squares from the E-step's sums: the exact maximiser, as a correction
        delta, wss, _ = expert_wls(post.M, post.ge, post.q, n)
        eta = eta + delta
    else:
        F = lambda e: em.q_expert(e, ls2, X, Y, r)  # noqa: E731  [B, k], one objective per atom
        if em.multinomial:  # logits affine in eta: Q_i concave, maximised by Newton-IRLS (exact M-step)
            eta, _, _ = newton.maximise_concave(F, eta, lambda e: multinomial_expert_fisher(em, e, X, Y, r),
                                                tol=MSTEP_TOL * n, max_steps=MSTEP_MAX_STEPS)
        else:
            g, H = grad_hess(F, eta)
            eta, lam_e = ascent(F, eta, st.lam_e, g, -H)
    if em.gaussian:
        mass = post.M[..., -1, -1] if em.linear else r.sum(-1)
        if wss is None:
            wss = (r * (Y.unsqueeze(-2) - em.means(eta, X)) ** 2).sum(-1)
        s2 = torch.where(mass > 1e-8 * n, wss / mass.clamp_min(1e-300), torch.exp(ls2))
        ls2 = torch.log(torch.maximum(s2, floor.unsqueeze(-1)))
    if em.topk:
        fv, lam_g, lam_s = _topk_gate_step(em, st.fv, st.lam_g, st.lam_s, X, Y, post, eta, ls2)
        return _State(fv, eta, ls2, lam_g, lam_e, lam_s)
    if em.multinomial and em.affine_gate:  # Q_g concave too: maximised, not one step (_exact_gate_step)
        return _State(_exact_gate_step(em, st.fv, X, post), eta, ls2, st.lam_g, lam_e, st.lam_s)
    fv, lam_g = _gate_step(em, st.fv, st.lam_g, X, post)
    return _State(fv, eta, ls2, lam_g, lam_e, st.lam_s)


class _GenericSteps:
    """The generic EM's hooks for :func:`moestat.estimators.em_driver.run_em` on the data ``X [B, n, d]``,
    ``Y [B, n]`` with variance floors ``floor [B]``: the state is a :class:`_State`, the posterior a
    :class:`Posterior`, SQUAREM's coordinates ``(fv, eta, ls2)``; ``compiled``: whether ``em``'s
    E-step and gate objective run compiled (:func:`use_compiled`)."""

    name = "the generic EM"

    def __init__(self, em: GenericEM, X, Y, floor, compiled: bool) -> None:
        self.em, self.X, self.Y, self.floor, self.compiled = em, X, Y, floor, compiled

    def estep(self, st: _State):
        return self.em.estep(st.th, self.X, self.Y)

    def step(self, st: _State, post: Posterior):
        s1 = _m_step(self.em, st, self.X, self.Y, post, self.floor)
        return s1, *self.em.estep(s1.th, self.X, self.Y)

    def to_vector(self, st: _State):
        return st.vector()

    def from_vector(self, ext, like: _State) -> _State:
        mg, k, q = self.em.mg, like.eta.shape[1], like.eta.shape[2]
        ls2 = ext[:, mg + k * q :]
        if self.em.gaussian:
            ls2 = torch.maximum(ls2, torch.log(self.floor).unsqueeze(-1))
        # onto the gate's box (if any): SQUAREM keeps the extrapolation only where it does not lower the likelihood
        fv = self.em.clamp_gate(ext[:, :mg])
        return _State(fv, ext[:, mg : mg + k * q].reshape(-1, k, q), ls2, like.lam_g, like.lam_e, like.lam_s)

    def compact(self, keep) -> None:
        self.X, self.Y, self.floor = self.X[keep], self.Y[keep], self.floor[keep]

    def eager(self) -> "_GenericSteps":
        _COMPILED["unavailable"] = True  # "auto" does not try again in this process
        em = self.em
        return _GenericSteps(GenericEM(em.model, em.k, em.d, self.X.dtype, em.gate_box), self.X, self.Y, self.floor, False)


def fit_generic(model: LikelihoodModel, X, Y, fv, eta, ls2, *, max_iter=1000, tol=1e-10, var_floor=1e-6,
                accelerate=False, polish_iter=0, search_rounds: int = 50, compile="auto", gate_box=None,
                compile_size: int | None = None) -> dict:
    """Batched generalised EM (module docstring) from ``B`` starts by :func:`~moestat.estimators.em_driver.run_em`;
    then :func:`topk_search` for a Top-K gate, and the Newton polish (:func:`polish`).

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
    gate_box : ParameterBox or None
        Maximise over the compact set the gate family's ``box_limits`` take from it (a dense gate,
        e.g. :class:`~moestat.model.laplace_gate.LaplaceGate`): the starts, every gate step, SQUAREM's
        extrapolations and the polish's steps projected onto it.  ``None``: over all of ``R^mg``.
    compile_size : int or None
        The size :func:`use_compiled` judges (default ``B n``): a chunk of a larger batch passes the
        whole batch's, so that it runs the E-step the whole batch would
        (:class:`~moestat.estimators.mle.MLEGaussianMoE`'s ``max_memory``).

    Returns
    -------
    dict
        NumPy: ``fv, eta, ls2``, ``loglik [B]``, ``n_iter [B]``, ``n_newton [B]``, ``status``
        (list: ``tol``, ``newton``, ``max_iter`` or ``nonfinite``), ``paths`` (list of ``[n_iter + 1]``),
        ``kernel`` (``"generic"`` or ``"generic-compiled"``), ``on_box [B]`` (:meth:`GenericEM.on_box`).
    """
    B, n, d = X.shape
    k = eta.shape[1]
    em = GenericEM(model, k, d, X.dtype, gate_box)
    fv = em.clamp_gate(fv)
    compiled = use_compiled(em, compile, B * n if compile_size is None else int(compile_size), X.device)
    floor = var_floor * Y.var(dim=1).clamp_min(1e-300)
    ls2 = torch.log(torch.maximum(torch.exp(ls2), floor.unsqueeze(-1))) if em.gaussian else torch.zeros(B, k, dtype=X.dtype)
    lam0 = torch.full((B,), _LAM0, dtype=X.dtype)
    start = _State(fv, eta, ls2, lam0, torch.full((B, k), _LAM0, dtype=X.dtype), lam0.clone())
    out = run_em(_GenericSteps(em, X, Y, floor, compiled), start, n=n, max_iter=max_iter, tol=tol,
                 accelerate=accelerate, compile=compile)
    full, status, paths, steps = out["state"], out["status"], out["paths"], out["steps"]
    em, compiled = steps.em, steps.compiled
    if em.topk and search_rounds > 0:
        topk_search(model, em, full, X, Y, status, paths, rounds=search_rounds, max_iter=max_iter, tol=tol,
                    var_floor=var_floor, accelerate=accelerate, compile=compile if compiled else False)
    n_newton = np.zeros(B, dtype=int)
    if polish_iter > 0:
        full, n_newton = polish(em, full, X, Y, floor, status, paths, tol=tol, max_iter=polish_iter)
    return {
        "fv": full.fv.numpy(), "eta": full.eta.numpy(), "ls2": full.ls2.numpy(), "status": status,
        "loglik": np.array([p[-1] for p in paths]), "n_iter": np.array([len(p) - 1 for p in paths]),
        "n_newton": n_newton, "paths": [np.array(p) for p in paths], "kernel": "generic-compiled" if compiled else "generic",
        "on_box": em.on_box(full.fv),
    }


# ---- after EM: the Top-K score search and the Newton polish ------------------------------------
#: Relative steps of the score search (times ``|theta_j| + 0.1``), both signs, from 1e-3 to 1.
_SEARCH_STEPS = np.concatenate([-np.geomspace(1e-3, 1.0, 12), np.geomspace(1e-3, 1.0, 12)])


def score_search(em: GenericEM, fv, eta, ls2, X, Y, ll):
    """One sweep of coordinate search over the gate's *score* parameters (``beta1``) on the observed
    log-likelihood: for each coordinate in turn, the best of :data:`_SEARCH_STEPS` if it increases
    the likelihood, per batch entry.

    A Top-K gate activates the experts of the K largest scores ``beta1_i^T x``: which experts are
    active is piecewise constant in ``beta1``, so no derivative sees a boundary move and EM keeps
    its start's active sets.  A derivative-free move of ``beta1`` can cross them (the coordinate
    descent that Nguyen, Akbarian, Yan & Ho (2024, Appendix D) use beside EM).  Returns the new
    ``fv [B, mg]`` and the gain in log-likelihood ``[B]``.
    """
    idx = torch.nonzero(em.free).flatten()
    coords = [j for j, flat in enumerate(idx.tolist()) if flat % em.p < em.d]
    fv, best = fv.clone(), ll.clone()
    lf = em.log_f(eta, ls2, X, Y)  # the experts are fixed during the search: their densities once
    fam = em.model.gate.family
    # _search_logliks repeats GateFamily.log_weights_from_scores' arithmetic (softmax logits, Top-K zeros)
    rows = (em.affine_gate and em.topk and fam.normalised and _features(X) is not None
            and type(fam).log_weights_from_scores is GateFamily.log_weights_from_scores)
    for j in coords:
        scale = fv[:, j].abs() + 0.1
        col, top = fv[:, j].clone(), best.clone()
        steps = [fv[:, j] + float(t) * scale for t in _SEARCH_STEPS]
        if rows:  # every step at once, only the moved score row recomputed (the same numbers)
            vals = _search_logliks(em, fv, j, steps, X, lf)
        for t, step in enumerate(steps):
            if rows:
                v = vals[t]
            else:
                cand = fv.clone()
                cand[:, j] = step
                v = em.loglik(cand, eta, ls2, X, Y, lf)
            better = torch.isfinite(v) & (v > top)
            top, col = torch.where(better, v, top), torch.where(better, step, col)
        fv[:, j], best = col, top
    return fv, best - ll


#: :func:`_search_logliks` evaluates at most this many ``[steps, B, k, n]`` values at once (16 MB per temporary)
_SEARCH_CHUNK = 1 << 21


def _search_logliks(em: GenericEM, fv, j: int, steps: list, X, lf) -> torch.Tensor:
    """Observed log-likelihoods ``[T, B]`` of an affine Top-K gate (``em.affine_gate``, few features) at
    ``fv`` with its free coordinate ``j`` -- a score coordinate ``beta1_ic`` -- set to each of the ``T``
    values ``steps`` (``[B]`` each): :meth:`GenericEM.loglik` of each candidate, the same arithmetic
    (the tests compare them), for every step in one batch.

    Only atom ``i``'s score row changes between the candidates: the other rows, and the ranks among
    them, are computed once; row ``i`` is formed as :func:`~moestat.estimators.mle_fused.feature_affine`
    forms it (intercept, then the coordinates in order), and its Top-K mask counted against the
    others (:func:`~moestat.model.gate_families.top_k_mask` of the whole candidate wherever a score
    ties, so the mask is always its).  ``lf``: the experts' log-densities ``[B, k, n]``.
    """
    g = em.model.gate
    d, k, K = em.d, em.k, g.k_active
    flat = int(torch.nonzero(em.free).flatten()[j])
    i, c = divmod(flat, em.p)
    V = em.gate_V(fv)
    s0 = _affine(torch.cat([V[..., :d], torch.zeros_like(V[..., :1])], -1), X)  # [B, k, n], as log_u
    beta0 = V[..., d]
    L0 = g.family.logits(g, s0, beta0, atom_axis=-2)
    xs = _coordinate_rows(X)
    others = [a for a in range(k) if a != i]
    # ranks among the other atoms: above_o[a] = #{b != a, i : s_b > s_a}; a tie among them -> top_k_mask
    above_o = {a: torch.zeros_like(s0[:, 0], dtype=torch.uint8) for a in others}
    clean = True
    for x, a in enumerate(others):
        for b in others[x + 1 :]:
            gt, lt = s0[:, b] > s0[:, a], s0[:, b] < s0[:, a]
            above_o[a] += gt
            above_o[b] += lt
            clean = clean and bool((gt | lt).all())
    B, n = s0.shape[0], s0.shape[-1]
    chunk = max(1, _SEARCH_CHUNK // max(1, B * k * n))
    out = []
    for t0 in range(0, len(steps), chunk):
        P = V[:, i, :d].unsqueeze(0).repeat(len(steps[t0 : t0 + chunk]), 1, 1)  # [T, B, d]
        P[..., c] = torch.stack(steps[t0 : t0 + chunk])
        row = torch.zeros_like(P[..., :1])  # the zero intercept of the score, then each coordinate (feature_affine)
        for e in range(d):
            row = row + P[..., e : e + 1] * xs[e]
        # the logits (s + beta0) / tau as log_weights_from_scores forms them: the other rows' once (L0)
        u = L0.unsqueeze(0).repeat(row.shape[0], 1, 1, 1)  # [T, B, k, n]
        u[:, :, i : i + 1] = g.family.logits(g, row.unsqueeze(-2), beta0[:, i : i + 1], atom_axis=-2)
        mask = None
        if clean:
            above_i = torch.zeros_like(row, dtype=torch.uint8)
            cols = [None] * k
            tied = False
            for a in others:
                gt, lt = row > s0[:, a], row < s0[:, a]
                above_i += lt
                cols[a] = (above_o[a] + gt) < K
                tied = tied or not bool((gt | lt).all())
            if not tied:
                cols[i] = above_i < K
                mask = torch.stack(cols, -2)
        if mask is None:  # a tie: the whole candidates' scores to top_k_mask (torch.topk decides)
            S = s0.unsqueeze(0).repeat(row.shape[0], 1, 1, 1)
            S[:, :, i] = row
            mask = top_k_mask(S, K, dim=-2)
        u.masked_fill_(~mask, float("-inf"))  # the Top-K zeros (a softmax gate: u are the logits)
        out.append(em.loglik_from(u, lf))
    return torch.cat(out)


def topk_search(model, em: GenericEM, full: _State, X, Y, status, paths, *, rounds, max_iter, tol, var_floor,
                accelerate, compile="auto") -> None:
    """Alternate :func:`score_search` and EM (:func:`fit_generic`) until no entry gains more than
    ``tol * n``; updates ``full``'s tensors, ``status`` and ``paths`` in place (every accepted move
    and EM step is on the trace, so it still never decreases).

    Only the entries moved by the previous round are searched again: an entry that did not move
    keeps its parameters, and its search -- a deterministic function of them -- would find the same
    steps and the same gain (at most ``tol * n``) in every later round (after the first rounds most
    entries of a batch have stopped moving)."""
    n = X.shape[1]
    again = torch.ones(X.shape[0], dtype=torch.bool)  # the entries whose parameters changed
    for _ in range(int(rounds)):
        ok = torch.tensor([s != "nonfinite" for s in status]) & again
        if not bool(ok.any()):
            return
        act = torch.nonzero(ok).flatten()
        ll = em.loglik(full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act])
        fv, gain = score_search(em, full.fv[act], full.eta[act], full.ls2[act], X[act], Y[act], ll)
        moved = torch.isfinite(gain) & (gain > tol * n)
        if not bool(moved.any()):
            return
        sel = act[moved]
        again = torch.zeros_like(again)
        again[sel] = True
        sub = fit_generic(model, X[sel], Y[sel], fv[moved], full.eta[sel], full.ls2[sel], max_iter=max_iter, tol=tol,
                          var_floor=var_floor, accelerate=accelerate, polish_iter=0, search_rounds=0, compile=compile)
        full.fv[sel] = torch.as_tensor(sub["fv"], dtype=X.dtype)
        full.eta[sel] = torch.as_tensor(sub["eta"], dtype=X.dtype)
        full.ls2[sel] = torch.as_tensor(sub["ls2"], dtype=X.dtype)
        for j, b in enumerate(sel.tolist()):
            paths[b] += sub["paths"][j].tolist()  # starts at the searched point
            status[b] = sub["status"][j]


def row_linear_newton_terms(em: GenericEM, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor):
    """Gradient ``[B, m]`` and Hessian ``[B, m, m]`` of the observed log-likelihood in the polish's
    coordinates ``theta = (fv, vec(eta), ls2)`` for a separable gate (``em.row_gate``, dense) with
    linear Gaussian experts, in closed form: what :func:`~moestat.estimators.newton.grad_hess` gives
    by a forward-over-reverse pass (the tests compare them), without its ``m`` tangents of every
    intermediate.

    Per sample, ``l = lse_i(A_i) - lse_i(u_i)`` with ``A_i = u_i + log f_i``, so (Louis 1982, the
    mixture's observed information from the complete-data terms) ``grad l = sum_i (r_i - pi_i)
    grad u_i + r_i grad log f_i`` and ``hess l = sum_i [(r_i - pi_i) hess u_i + r_i hess log f_i
    + r_i grad A_i grad A_i^T - pi_i grad u_i grad u_i^T] - gbar gbar^T + ubar ubar^T`` with
    ``gbar = sum_i r_i grad A_i`` and ``ubar = sum_i pi_i grad u_i``.  Each ``A_i`` depends on atom
    ``i``'s own coordinates only -- its gate row ``V_i = (beta1_i, beta0_i)`` (``grad u_i = z_i =
    (ds_i / dbeta1_i, 1) / tau``, :meth:`~moestat.model.gate_families.GateFamily.score_rows_hessian`)
    and its expert ``(eta_i, ls2_i)`` (``log f_i = -(log 2 pi + ls2_i + e_i^2 exp(-ls2_i)) / 2``,
    ``e_i = y - eta_i . xt``) -- so the sums are ``k`` blocks of ``l = 2 p + 1`` local coordinates,
    then mapped onto ``theta`` (the free gate coordinates, the pinned ones dropped).
    """
    mg, k, p, d = em.mg, em.k, em.p, em.d
    B, n, _ = X.shape
    q, l = p, 2 * p + 1
    fv, eta, ls2 = theta[:, :mg], theta[:, mg : mg + k * q].reshape(B, k, q), theta[:, mg + k * q :]
    g = em.model.gate
    tau = g.temperature
    V = em.gate_V(fv)
    xs = _coordinate_rows(X)
    s, ds, dds = g.family.score_rows_hessian(g, xs, V[..., :d])
    u = g.family.log_weights_from_scores(g, s, V[..., d], normalise=False, atom_axis=-2)
    pi, _ = em.softmax_lse(u)
    e = Y.unsqueeze(-2) - _affine(eta, X)
    r, _ = em.softmax_lse(u + _gaussian_log_f(e, ls2))
    om = torch.exp(-ls2).unsqueeze(-1)  # 1 / sigma^2 [B, k, 1]
    ones = torch.ones_like(e)
    xt = [x.unsqueeze(-2).expand_as(e) for x in xs] + [ones]
    Z = torch.stack([D / tau for D in ds] + [ones / tau], 2)  # grad u_i in V_i [B, k, p, n]
    eo = e * om
    # grad A_i in atom i's local coordinates (V_i, eta_i, ls2_i) [B, k, l, n]
    L = torch.cat([Z, torch.stack([eo * x for x in xt] + [0.5 * e * eo - 0.5], 2)], 2)
    grad = torch.cat([((r - pi).unsqueeze(2) * Z).sum(-1), (r.unsqueeze(2) * L[:, :, p:]).sum(-1)], 2)  # [B, k, l]
    RL = r.unsqueeze(2) * L
    PZ = pi.unsqueeze(2) * Z
    H = -(RL.reshape(B, k * l, n) @ RL.reshape(B, k * l, n).transpose(-1, -2)).reshape(B, k, l, k, l)  # - gbar gbar^T
    H[:, :, :p, :, :p] += (PZ.reshape(B, k * p, n) @ PZ.reshape(B, k * p, n).transpose(-1, -2)).reshape(B, k, p, k, p)
    blk = RL @ L.transpose(-1, -2)  # sum_n r_i grad A_i grad A_i^T [B, k, l, l]
    blk[:, :, :p, :p] -= PZ @ Z.transpose(-1, -2)  # - sum_n pi_i z_i z_i^T
    w = (r - pi) / tau  # (r_i - pi_i) hess u_i: the score's curvature in beta1_i
    for c in range(d):
        for c2 in range(d):
            blk[:, :, c, c2] += (w * dds[c][c2]).sum(-1)
    # r_i hess log f_i: eta-eta -om xt xt^T, eta-ls2 -om e xt, ls2-ls2 -om e^2 / 2
    re = r * eo
    Mr = torch.stack([torch.stack([(r * xa * xb).sum(-1) for xb in xt], -1) for xa in xt], -2)  # [B, k, q, q]
    blk[:, :, p : p + q, p : p + q] -= om.unsqueeze(-1) * Mr
    cross = -torch.stack([(re * x).sum(-1) for x in xt], -1)  # [B, k, q]
    blk[:, :, p : p + q, p + q] += cross
    blk[:, :, p + q, p : p + q] += cross
    blk[:, :, p + q, p + q] -= 0.5 * (re * e).sum(-1)
    idx = torch.arange(k)
    H[:, idx, :, idx, :] += blk.transpose(0, 1)  # advanced indices first: [k, B, l, l]
    # onto theta = (fv, vec(eta), ls2): free gate coordinates (i, c) -> i l + c
    pos = torch.nonzero(em.free).flatten()
    sel = torch.cat([(pos // p) * l + pos % p,
                     (torch.arange(k)[:, None] * l + p + torch.arange(q)[None, :]).flatten(), torch.arange(k) * l + p + q])
    H = H.reshape(B, k * l, k * l)
    return grad.reshape(B, k * l)[:, sel], H[:, sel][:, :, sel]


#: the Newton polish forms the gradient and Hessian of at most this many samples x entries at once
#: (:func:`polish`): with m = 20 parameters (the Laplace over fit) the forward-over-reverse pass of
#: 40 entries at n = 16 000 would hold 20 x 1.9e6 values per intermediate (307 MB each)
POLISH_CHUNK_SAMPLES = 200_000


def polish(em: GenericEM, st: _State, X, Y, floor, status, paths, *, tol, max_iter) -> tuple[_State, np.ndarray]:
    """Damped Newton on the observed log-likelihood for every finite start, with the certificate
    (:func:`moestat.estimators.newton.polish`, steps by :func:`~moestat.estimators.newton.ascent`).

    Coordinates ``(free gate, eta, log sigma^2)``; a step is kept only if the log-likelihood does
    not decrease.  A start that reaches the certificate gets status ``"newton"``; the others keep
    EM's.  Updates ``status`` and ``paths`` in place; returns the polished state and the accepted
    steps per start ``[B]``.
    """
    B, n, _ = X.shape
    k, qe = st.eta.shape[1], st.eta.shape[2]
    mg, kq, gauss = em.mg, k * qe, em.gaussian

    def f(theta, x, y):
        ls2 = theta[..., mg + kq :] if gauss else theta.new_zeros(theta.shape[:-1] + (k,))
        return em.loglik(theta[..., :mg], theta[..., mg : mg + kq].reshape(theta.shape[:-1] + (k, qe)), ls2, x, y)

    theta = st.vector(ls2=gauss)  # the multinomial family has no variance
    lam = torch.full((B,), 1e-8, dtype=X.dtype)
    # a separable dense gate with linear Gaussian experts: the closed-form terms (row_linear_newton_terms)
    analytic = em.row_gate and em.linear and not em.topk

    def terms(act, th):
        # entries are independent: the Hessian's forward-over-reverse pass holds m tangents of every
        # [b, k, n] intermediate, so it runs over chunks of entries (the same numbers, bounded memory)
        step = max(1, POLISH_CHUNK_SAMPLES // n)
        if analytic:
            parts = [row_linear_newton_terms(em, th[i : i + step], X[act[i : i + step]], Y[act[i : i + step]])
                     for i in range(0, len(act), step)]
        else:
            parts = [grad_hess(lambda t, a=act[i : i + step]: f(t, X[a], Y[a]), th[i : i + step])
                     for i in range(0, len(act), step)]
        g, H = torch.cat([g for g, _ in parts]), torch.cat([H for _, H in parts])
        if em.gate_hi is None:
            return g, H
        # on the gate's box: the projected Newton system (GenericEM.face), so the certificate is the
        # maximum over the box's face (KKT) and the step moves along it
        g, C = em.face(th, g, -H)
        return g, -C

    def onto_box(t):  # the gate's box (if any): a step is judged at its projection
        return t if em.gate_hi is None else torch.cat([em.clamp_gate(t[:, :mg]), t[:, mg:]], 1)

    def ascend(act, th, g, C):
        x, y = X[act], Y[act]
        new, lam[act] = ascent(lambda t: f(onto_box(t), x, y), th, lam[act], g, C)
        new = onto_box(new)
        if gauss:  # the variance floor of EM
            lo = torch.log(floor[act]).unsqueeze(-1)
            new = torch.cat([new[:, : mg + kq], torch.maximum(new[:, mg + kq :], lo)], 1)
        l_new, l_old = f(new, x, y), f(th, x, y)
        moved = torch.isfinite(l_new) & (l_new >= l_old) & (new != th).any(-1)
        return new, moved, l_new

    act = torch.nonzero(torch.tensor([s != "nonfinite" for s in status])).flatten()
    out = newton.polish(theta, act, terms, ascend, tol_n=tol * n, max_iter=max_iter, final_step=True)
    for b in torch.nonzero(out["certified"]).flatten().tolist():
        status[b] = "newton"
    for b, p in enumerate(out["paths"]):
        paths[b] += p
    th = out["theta"]
    ls2 = th[:, mg + kq :] if gauss else st.ls2
    return st._replace(fv=th[:, :mg], eta=th[:, mg : mg + kq].reshape(B, k, qe), ls2=ls2), out["n_iter"].numpy()
