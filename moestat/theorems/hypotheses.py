"""Theorem hypotheses checked, not assumed: identifiability conditions and PDE identities of a truth.

A rate theorem applies to a truth only when the truth meets its hypotheses.  This module tests
them numerically with forward-mode autograd (:func:`torch.func.jacfwd`) in float64, at the true
atoms, on ``N`` inputs drawn from the scenario's own input law, and names which theorem's
hypotheses the truth meets (:func:`check_hypotheses`, shown by ``moestat check``).

The functions
-------------
For atom ``j`` with router parameter ``beta1_j`` and expert parameter ``eta_j`` (``q`` entries):
``h_j = h(x, eta_j)``, its derivatives ``dh/deta_m`` and ``d2h/deta_m deta_m'``, the score
``s_j = s(x; beta1_j)`` of the gate (``beta1^T x`` for softmax and sigmoid gating, the (perturbed)
cosine score of Nguyen et al. (2024), eqs. (2) and (9), or ``-||x - mu||^2 / 2v`` for a Gaussian
gate), its gradient ``ds/dbeta1_u`` and ``E_j = exp(s_j)``.  A multinomial-logistic expert's
value is the vector of class probabilities; its classes are stacked as extra rows.

Conditions (each ``holds`` True/False, or None where it does not apply)
------------------------------------------------------------------------
``expert_jacobian``
    ``{dh/deta_m(x, eta_j) : j, m}`` linearly independent: every expert parameter moves the
    function, differently across atoms (first-order identifiability of the experts).
``expert_hessian_nonzero``
    no ``d2h/deta_m deta_m'`` is identically zero (``d2h/db2 = 0`` is why linear experts are not
    strongly identifiable in Definition 1 of Nguyen et al. 2024; ``eta2 * GELU(eta1^T x)`` has
    ``d2h/deta2^2 = 0`` too).
``expert_strong_second_order``
    ``{dh/deta_m(x, eta_j), d2h/deta_m deta_m'(x, eta_j) : j, m <= m'}`` linearly independent over
    the atoms, no member identically zero: strong identifiability of the experts as this package
    reads Nguyen, Ho & Rinaldo (2024, least squares, arXiv 2402.02952; abstract and a secondary
    summary only, not the definition itself): the expert's parameter derivatives of first and second
    order independent at distinct parameters.  ``eta2 * phi(eta1^T x)`` fails it (``d2h/deta2^2 =
    0``), linear experts fail it (every second derivative is zero), ``phi(a^T x + b)`` and
    ``phi(a^T x)`` with ``phi`` sigmoid, tanh or GELU meet it.  Evidence: the smallest relative
    singular value of the column-scaled family against :func:`rank_tol` (0 with a zero member).
``expert_euler``
    ``h`` is not a combination of its own derivatives (Euler's identity of experts homogeneous in
    a parameter: constant, linear, ``eta2 * phi(eta1^T x)``).  Reported, required by no theorem here.
``gate_expert_pde``
    the gate-expert interaction: some combination of the products ``E ds/dbeta1_u dh/deta_m``
    lies in the span of ``E dh/deta_m``.  Under a linear score ``ds/dbeta1_u = x_u`` and every
    expert ``phi(a^T x + b)`` satisfies ``x_u dh/db = dh/da_u`` whatever ``phi`` -- the identity by
    which Nguyen et al. (2025, arXiv 2505.10860, Definition 1, as read from its abstract) exclude
    linear experts, and the PDE ``d2u/dbeta1 db = du/da`` behind the slow over-specified rates of
    Nguyen, Nguyen & Ho (2023).  The exact pairs found are listed by name.
``strong_linear_gate``
    ``expert_jacobian`` holds and ``gate_expert_pde`` does not: strong identifiability under a
    linear-score gate as this package reads Nguyen et al. (2025), whose example is
    ``eta2 * GELU(eta1^T x)``.
``radial_pde``
    PDE (4) of Nguyen et al. (2024): ``beta1^T ds/dbeta1 = 0`` (the cosine score depends on
    ``beta1`` only through ``beta1 / ||beta1||``), at every atom with ``beta1 != 0``.
``weak_def2`` / ``strong_def1``
    Definitions 2 and 1 of Nguyen et al. (2024) (the digest's reading): the derivatives of
    ``F-bar = exp(s(x; beta1)) h(x, eta)`` in ``(beta1, eta)`` of total order ``<= 1`` (weak) or
    ``<= 2`` (strong) linearly independent.  For order 2 relations *within* the second order
    are merged, as the proofs' multi-index Taylor expansions group equal functions (for
    ``d >= 2`` every ``phi(a^T x + b)`` expert has ``d(d-1)/2`` such relations per atom,
    :mod:`moestat.model.identifiability`); what fails Definition 1 is a zero member, a relation
    within orders ``<= 1``, or one linking the second order with the lower ones.  The
    reference atom's ``beta1 = 0`` is fixed, not a parameter (its ``beta1`` columns are left out).
``expert_depends_on_x``
    every expert varies with ``x`` (no vanishing slope ``A_j = 0``; Nguyen, Akbarian, Nguyen &
    Ho 2024).  ``expert_affine_in_x``: every expert is affine in ``x`` (linear experts, the model
    class of the Gaussian MoE theorems).  ``gate_identifiable``: the Jacobian of the centred
    logits in the free gate parameters has full rank.  ``atoms_distinct``, ``gate_input_dependent``
    (some ``beta1 != 0``, (A.4)) and ``gate_centres_nonzero`` (Gaussian gate) are read off the
    atoms.  The two x-dependence checks compare RMS ratios with 1e-12: a vanishing slope gives 0.
``fisher_nonsingular``
    only for a maximum-likelihood fit of the classical theorem's setting (exact, ``k = k*``): the
    pre-flight's Fisher information of the truth (:func:`fisher_condition`) is nonsingular.

The theorems, their model classes and the conditions each requires are data
(:data:`moestat.theorems.registry.THEOREMS`, declared in ``moestat/theorems/data/``); this module
computes the conditions and judges a truth against them.  Each theorem speaks of exact or
over-specified fits or both (:attr:`moestat.theorems.registry.Theorem.setting`); only those of the
fit's setting are listed.

Rank decision
-------------
Columns are scaled to unit root-mean-square; a family is dependent when its smallest singular
value relative to the largest is at most ``tol = max(N, m) * eps`` (``eps`` = float64 machine
epsilon, ``m`` columns): the round-off bound of a float64 SVD (the default of
:func:`numpy.linalg.matrix_rank`).  For analytic functions of ``x`` and a continuous input law,
``N >= m`` generic samples have the rank of the family almost surely, so the sample size enters
only through ``N`` in the bound; exact identities (``x_u dh/db = dh/da_u`` is computed as the
same floating-point product on both sides) leave residuals of a few ``eps`` (at most 1.1e-15 over
the catalogue's truths), while its independent families stay at 9e-4 or above (printed, so the
gap can be inspected).  Two spans intersect when the sine of their smallest principal angle is ``<= tol``.
Where a theorem's statement was not read in a digest (only its abstract), its row says so.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch
from torch.func import jacfwd

from moestat.model.experts import ACTIVATIONS, BARE_KINDS, SCALED_KINDS, Expert
from moestat.model.gate_registry import GATES
from moestat.model.gates import Gate, gate_scores
from moestat.model.likelihood import LikelihoodModel, MultinomialExpert
from moestat.model.protocol import FunctionExpert, linear_score
from moestat.estimators.fisher import fisher_information  # the pre-flight's matrix, not a second one
from moestat.theorems.registry import THEOREMS, Theorem
from moestat.theorems.registry import theorem as registry_theorem

__all__ = ["EPS", "N_X", "THEOREMS", "CLASSICAL_KEY", "CLASSICAL_CITE", "rank_tol", "independence", "conditions",
           "check_hypotheses", "fisher_condition", "in_setting", "format_hypotheses"]

EPS = float(np.finfo(np.float64).eps)
#: Inputs drawn from the scenario's law (at least 10 times the columns of the largest family).
N_X = 3000


def rank_tol(n_rows: int, n_cols: int) -> float:
    """Relative singular-value threshold ``max(N, m) * eps`` (see the module docstring)."""
    return max(int(n_rows), int(n_cols)) * EPS


# ---------------------------------------------------------------------------------------------
# the model's parts as per-atom torch functions
# ---------------------------------------------------------------------------------------------
@dataclass
class _Parts:
    score: Callable[[torch.Tensor], torch.Tensor]  # beta1 [d] -> [n]
    expert: Callable[[torch.Tensor], torch.Tensor]  # eta [q] -> [n * C]
    expert_x: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [n, d], eta [q]) -> [n, C]
    beta1: torch.Tensor  # [k, d]
    beta0: torch.Tensor  # [k]
    eta: torch.Tensor  # [k, q]
    x: torch.Tensor  # [n, d]
    classes: int
    score_kind: str  # linear | cosine | perturbed | gaussian | custom
    normalisation: str  # softmax | sigmoid | gaussian
    k_active: int | None
    likelihood: str | None  # None (least squares), gaussian or multinomial
    names: list[str]
    expert_kind: str = "custom"  # identity | gelu | ... | poly | multinomial | a user expert's name
    setting: str = "exact"  # exact | over (k fitted > k*)
    # the fitted temperature of moestat.model.temperature_gate (its reference row's beta1[-1, 0]), None
    # for every other gate; raw_score is the score before the division by it
    tau: float | None = None
    raw_score: Callable[[torch.Tensor], torch.Tensor] | None = None


def _parts(scenario, n: int, seed: int) -> _Parts:
    t = scenario.truth.numpy()
    d = t.dim
    X = torch.as_tensor(scenario.sample_x(n, np.random.default_rng(np.random.SeedSequence(seed))), dtype=torch.float64)
    b1 = torch.as_tensor(t.beta1, dtype=torch.float64)
    eta = torch.as_tensor(t.eta, dtype=torch.float64)
    if scenario.gaussian_moe:  # softmax gate, linear Gaussian experts, eta = (a, b, variance)
        gate, expert, likelihood = None, FunctionExpert(lambda x, e: x @ e[:-1] + e[-1], d + 1, "identity"), "gaussian"
    else:
        model = scenario.model
        gate, expert = model.gate, model.expert
        likelihood = model.family if isinstance(model, LikelihoodModel) else None
    classes = int(expert.classes) if isinstance(expert, MultinomialExpert) else 1
    q = expert.n_params(d) if isinstance(expert, Expert) else int(expert.n_params)
    eta = eta[:, :q]  # a Gaussian likelihood's variance is not an expert parameter

    if isinstance(expert, Expert):
        def hx(x, e):
            return expert(x, e.unsqueeze(0))[:, :1]
        kind = expert.activation
    elif isinstance(expert, MultinomialExpert):
        def hx(x, e):
            return torch.exp(expert.log_probs(x, e.unsqueeze(0)))[:, 0, :]
        kind = "multinomial"
    else:
        def hx(x, e):
            return expert.fn(x, e).reshape(x.shape[0], -1)
        kind = getattr(expert, "name", "custom")
    if kind in ACTIVATIONS and q == d + 1:
        names = [f"a_{u}" for u in range(d)] + ["b"]
    elif kind in SCALED_KINDS and q == d + 1:  # eta2 * phi(eta1^T x) (moestat.model.protocol.scaled_expert)
        names = [f"eta1_{u}" for u in range(d)] + ["eta2"]
    elif kind in BARE_KINDS and q == d:  # phi(a^T x) (moestat.model.protocol.bare_expert)
        names = [f"a_{u}" for u in range(d)]
    elif kind == "multinomial":
        names = [f"A{c}_{u}" if u < d else f"b{c}" for c in range(classes - 1) for u in range(d + 1)]
    else:
        names = [f"eta_{m}" for m in range(q)]

    if gate is None:
        score, skind, norm, kact = (lambda b: X @ b), "linear", "softmax", None
    elif isinstance(gate, Gate):
        score = lambda b: gate_scores(X, b.unsqueeze(0), gate.kind, gate.tau)[:, 0]  # noqa: E731
        skind, norm, kact = gate.kind, "softmax", gate.k_active
    else:  # ProtocolGate
        norm, kact, temp = gate.normalisation, gate.k_active, float(gate.temperature)
        if gate.family.own_score:  # a Gaussian or Laplace gate: the score is the gate's, not ``gate.score``
            score = lambda b: gate.scores(X, b.unsqueeze(0))[:, 0] / temp  # noqa: E731
            skind = norm
        else:
            score = lambda b: gate.score(X, b.unsqueeze(0))[:, 0] / temp  # noqa: E731
            skind = "linear" if gate.score is linear_score else (gate.name if gate.name in ("linear", "cosine", "perturbed") else "custom")
    b0 = torch.as_tensor(t.beta0, dtype=torch.float64)
    tau, raw = None, None
    if gate is not None and getattr(gate, "normalisation", None) == "temperature":
        # moestat.model.temperature_gate: the reference (last) row is not a router, it carries the
        # fitted temperature, tau = beta1[-1, 0], and the logits are (s_i + beta0_i) / (tau * temperature)
        # for i < k, 0 for the reference.  Read as a router row it would be a slope tau * x_0.
        tau = float(b1[-1, 0])
        raw, temp_score = score, float(tau)
        score = lambda b: raw(b) / temp_score  # noqa: E731
        b1 = b1.clone()
        b1[-1] = 0.0  # the reference atom's router: none (its logit is 0)
    return _Parts(score, lambda e: hx(X, e).reshape(-1), hx, b1, b0, eta, X, classes, skind, norm, kact, likelihood, names,
                  str(kind), str(scenario.setting), tau, raw)


# ---------------------------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------------------------
def _scale(M: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Columns at unit RMS, and the mask of identically zero columns (RMS at round-off of the largest)."""
    A = M.detach().numpy()
    rms = np.sqrt((A * A).mean(0)) if A.size else np.zeros(0)
    big = float(rms.max()) if rms.size else 0.0
    zero = rms <= max(1e-300, rank_tol(*A.shape) * big)
    return np.where(zero, 0.0, A / np.where(zero, 1.0, rms)), zero


def _smallest_rel_sv(A: np.ndarray) -> float:
    """Smallest singular value over the largest of a column-scaled matrix (0 for an empty one)."""
    if A.shape[1] == 0:
        return 1.0
    s = np.linalg.svd(A, compute_uv=False)
    return float(s[-1] / s[0]) if s[0] > 0 else 0.0


def independence(M: torch.Tensor | np.ndarray) -> tuple[bool, float, float]:
    """Whether the columns of ``M`` (functions sampled at ``N`` inputs, ``[N, m]``) are linearly independent.

    Returns
    -------
    (bool, float, float)
        The decision, the smallest singular value over the largest after scaling the columns to
        unit RMS (0 with an identically zero column), and the threshold :func:`rank_tol`.

    Examples
    --------
    >>> x = np.linspace(-1, 1, 50)
    >>> independence(np.stack([x, x ** 2, 2 * x - x ** 2], 1))[0], independence(np.stack([x, x ** 2, x ** 3], 1))[0]
    (False, True)
    """
    A, zero = _scale(torch.as_tensor(np.asarray(M, dtype=float) if not isinstance(M, torch.Tensor) else M, dtype=torch.float64))
    tol = rank_tol(*A.shape)
    sv = 0.0 if zero.any() else _smallest_rel_sv(A)
    return sv > tol, sv, tol


def _basis(A: np.ndarray, tol: float) -> np.ndarray:
    if A.shape[1] == 0:
        return A
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    return U[:, : int((s > tol * s[0]).sum())] if s[0] > 0 else U[:, :0]


def _intersection_sine(A: np.ndarray, B: np.ndarray, tol: float) -> float:
    """Sine of the smallest principal angle between the column spans of ``A`` and ``B`` (1 if one is empty)."""
    QA, QB = _basis(A, tol), _basis(B, tol)
    if QA.shape[1] == 0 or QB.shape[1] == 0:
        return 1.0
    R = QB - QA @ (QA.T @ QB)  # the part of span B outside span A
    return float(np.linalg.svd(R, compute_uv=False)[-1])


def _cond(key: str, statement: str, holds: bool | None, value: float | None, tol: float | None, detail: str = "") -> dict:
    return {"key": key, "statement": statement, "holds": holds, "value": value, "tol": tol, "detail": detail}


# ---------------------------------------------------------------------------------------------
# the conditions
# ---------------------------------------------------------------------------------------------
def conditions(scenario, n: int = N_X, seed: int = 0) -> dict[str, dict]:
    """Every condition of the module docstring for the truth of ``scenario``.

    Parameters
    ----------
    scenario : FileScenario, Scenario or GaussianMoEScenario
        Anything with ``truth``, ``sample_x`` and ``model`` (or ``gaussian_moe``).
    n : int
        Inputs drawn from the scenario's law (``SeedSequence(seed)``).
    seed : int

    Returns
    -------
    dict
        Condition key -> ``{key, statement, holds, value, tol, detail}``; ``value`` is the
        evidence (a relative singular value, a residual or a sine) compared with ``tol``.
    """
    P = _parts(scenario, n, seed)
    k, d = P.beta1.shape
    q, C = P.eta.shape[1], P.classes
    rep = (lambda v: v.repeat_interleave(C, dim=0)) if C > 1 else (lambda v: v)  # per-sample -> per (sample, class)
    h, J, H, E, G, S2 = [], [], [], [], [], []
    for j in range(k):
        e, b = P.eta[j], P.beta1[j]
        h.append(P.expert(e))
        J.append(jacfwd(P.expert)(e))  # [N, q]
        H.append(jacfwd(jacfwd(P.expert))(e))  # [N, q, q]
        s = P.score(b)
        E.append(rep(torch.exp(s - s.max())))
        ref = not bool(b.abs().sum() > 0)
        G.append(None if ref and P.score_kind in ("cosine", "perturbed") else rep(jacfwd(P.score)(b)))  # [N, d]
        S2.append(None if G[-1] is None else rep(jacfwd(jacfwd(P.score))(b)))  # [N, d, d]
    N = h[0].shape[0]
    out: dict[str, dict] = {}
    lab = lambda m: P.names[m]  # noqa: E731

    # expert_jacobian
    A, zero = _scale(torch.cat(J, 1))
    tol = rank_tol(*A.shape)
    sv = _smallest_rel_sv(A)
    zl = [f"dh/d{lab(m)} (atom {j})" for j in range(k) for m in range(q) if zero[j * q + m]]
    out["expert_jacobian"] = _cond("expert_jacobian", "expert derivatives dh/deta linearly independent over the atoms",
                                   sv > tol, sv, tol, ("zero: " + ", ".join(zl)) if zl else "")
    # expert_hessian_nonzero
    pairs = list(itertools.combinations_with_replacement(range(q), 2))
    Hm = torch.cat([torch.stack([H[j][:, u, v] for u, v in pairs], 1) for j in range(k)], 1)
    scale_ref = float(torch.sqrt((torch.cat(J, 1) ** 2).mean(0)).max())
    rms = torch.sqrt((Hm ** 2).mean(0)).numpy()
    tolh = rank_tol(N, Hm.shape[1])
    zero_h = sorted({f"d2h/d{lab(u)}d{lab(v)}" if u != v else f"d2h/d{lab(u)}^2"
                     for c, (j, (u, v)) in enumerate(itertools.product(range(k), pairs)) if rms[c] <= tolh * scale_ref})
    out["expert_hessian_nonzero"] = _cond("expert_hessian_nonzero", "no second derivative d2h/deta2 identically zero",
                                          not zero_h, float(rms.min() / scale_ref) if scale_ref > 0 else 0.0, tolh,
                                          ("identically zero: " + ", ".join(zero_h)) if zero_h else "")
    # expert_strong_second_order: first and second derivatives of h, every atom, one family
    J2 = torch.cat([torch.cat([J[j], torch.stack([H[j][:, u, v] for u, v in pairs], 1)], 1) for j in range(k)], 1)
    ok2, sv2, tol2 = independence(J2)
    why2 = []
    if not ok2:
        why2.append(f"identically zero: {', '.join(zero_h)}" if zero_h else "a linear relation among the first and "
                    "second derivatives over the atoms")
    out["expert_strong_second_order"] = _cond(
        "expert_strong_second_order", "expert derivatives of orders 1 and 2 linearly independent over the atoms "
        "(this package's reading of strong identifiability, Nguyen, Ho & Rinaldo 2024)", ok2, sv2, tol2, "; ".join(why2))
    # expert_euler
    sines = []
    for j in range(k):
        Aj, _ = _scale(J[j])
        hj, hz = _scale(h[j][:, None])
        sines.append(1.0 if hz[0] else _intersection_sine(Aj, hj, rank_tol(N, q + 1)))
    tole = rank_tol(N, q + 1)
    out["expert_euler"] = _cond("expert_euler", "h not a combination of its derivatives (no homogeneity relation)",
                                min(sines) > tole, min(sines), tole,
                                "" if min(sines) > tole else f"h in span(dh/deta) at atom(s) {[j for j, s in enumerate(sines) if s <= tole]}")
    # gate_expert_pde (and the named pairs)
    if all(g is None for g in G):
        out["gate_expert_pde"] = _cond("gate_expert_pde", "gate-expert PDE: E ds/dbeta1_u dh/deta_m in span of E dh/deta",
                                       None, None, None, "no free beta1")
    else:
        Acols = torch.cat([E[j][:, None] * J[j] for j in range(k)], 1)
        Bcols = torch.cat([(E[j][:, None, None] * G[j][:, :, None] * J[j][:, None, :]).reshape(N, d * q)
                           for j in range(k) if G[j] is not None], 1)
        As, _ = _scale(Acols)
        Bs, _ = _scale(Bcols)
        tolp = rank_tol(N, As.shape[1] + Bs.shape[1])
        sine = _intersection_sine(As, Bs, tolp)
        named = _named_pairs(J, G, P, tolp)
        out["gate_expert_pde"] = _cond("gate_expert_pde", "gate-expert PDE: E ds/dbeta1_u dh/deta_m in span of E dh/deta "
                                       "(e.g. x_u * dh/db = dh/da_u)", sine <= tolp, sine, tolp, "; ".join(named[:6]))
    ej, gp = out["expert_jacobian"], out["gate_expert_pde"]
    lin = P.score_kind == "linear"
    why = ([] if ej["holds"] else ["expert derivatives dependent" + (f" ({ej['detail']})" if ej["detail"] else "")]) + \
        ([f"violated: {gp['detail'] or 'a combination of the gate-expert products in span(dh/deta)'}"] if gp["holds"] else [])
    out["strong_linear_gate"] = _cond(
        "strong_linear_gate", "strongly identifiable under a linear-score gate (expert derivatives independent, no gate-expert PDE)",
        (bool(ej["holds"]) and gp["holds"] is False) if lin else None, None, None,
        "; ".join(why) if lin else f"score {P.score_kind}: not a linear-score gate")
    # radial_pde
    if P.score_kind == "gaussian":
        out["radial_pde"] = _cond("radial_pde", "radial PDE (4): beta1^T ds/dbeta1 = 0", None, None, None, "Gaussian gate")
    else:
        res = [float(torch.linalg.vector_norm(G[j] @ P.beta1[j]) / (torch.linalg.vector_norm(G[j]) * torch.linalg.vector_norm(P.beta1[j])))
               for j in range(k) if G[j] is not None and bool(P.beta1[j].abs().sum() > 0)]
        tolr = rank_tol(N, d)
        out["radial_pde"] = _cond("radial_pde", "radial PDE (4): beta1^T ds/dbeta1 = 0 (score depends on beta1/||beta1|| only)",
                                  (max(res) <= tolr) if res else None, max(res) if res else None, tolr)
    out.update(_definitions(h, J, H, E, G, S2, P, N))
    # the model-class and atom conditions
    dep, aff = _x_dependence(P)
    out["expert_depends_on_x"] = _cond("expert_depends_on_x", "every expert varies with x (no vanishing slope)",
                                       min(dep) > 1e-12, min(dep), 1e-12,
                                       "" if min(dep) > 1e-12 else f"constant in x at atom(s) {[j for j, v in enumerate(dep) if v <= 1e-12]}")
    out["expert_affine_in_x"] = _cond("expert_affine_in_x", "every expert affine in x (linear experts)", max(aff) <= 1e-12, max(aff), 1e-12)
    om = torch.cat([P.beta1, P.eta], 1)
    sep = min((float(torch.linalg.vector_norm(om[i] - om[j])) for i in range(k) for j in range(i + 1, k)), default=math.inf)
    out["atoms_distinct"] = _cond("atoms_distinct", "true atoms (beta1, eta) pairwise distinct (A.2)", sep > 0, sep, 0.0)
    nz = int((P.beta1.abs().sum(1) > 0).sum())
    out["gate_input_dependent"] = _cond("gate_input_dependent", "some beta1 != 0: the gate depends on x (A.4)", nz > 0, float(nz), 0.0)
    if P.score_kind == "gaussian":
        m0 = float(P.beta1.abs().min())
        out["gate_centres_nonzero"] = _cond("gate_centres_nonzero", "every Gaussian gate centre nonzero", m0 > 0, m0, 0.0)
    out["gate_identifiable"] = _gate_identifiable(P)
    return out


def _gate_identifiable(P: _Parts) -> dict:
    """The gate's free parameters move the weights independently (first order).

    The weights of a softmax (or Gaussian) gate see the logits ``s_i(x) + beta0_i`` only up to a
    function common to every atom, so the test is on the centred logits (each minus their mean
    over the atoms); a sigmoid gate sees each logit.  The free parameters are every ``(beta0_i,
    beta1_i)`` but the reference atom's (softmax: the last atom's ``beta0`` and ``beta1``; Gaussian
    gate: the last ``beta0``, as in the pre-flight).  A Gaussian gate with a known common variance
    fails: shifting every centre by ``t`` (and ``beta0_i`` by ``c_i t / v``) adds ``t x / v`` to every
    logit.  A vanilla cosine gate fails along each ``beta1_i`` (PDE (4)).
    """
    k, d = P.beta1.shape
    if P.tau is not None:
        return _temperature_identifiable(P)
    fam = GATES[P.normalisation]
    if fam.shared_expert:  # the last atom is the shared expert: no router; the gate is over the others
        k = k - 1
    ref_b1 = P.normalisation == "softmax" and not bool(P.beta1[-1].abs().sum() > 0)
    free_b0 = list(range(k - 1)) if P.normalisation == "softmax" or fam.pins_bias else list(range(k))
    free_b1 = [i for i in range(k) if not (ref_b1 and i == k - 1)]

    def logits(theta: torch.Tensor) -> torch.Tensor:
        b0 = torch.zeros(k, dtype=theta.dtype).index_put((torch.tensor(free_b0, dtype=torch.long),), theta[: len(free_b0)]) \
            if free_b0 else torch.zeros(k, dtype=theta.dtype)
        b1 = P.beta1.clone()
        rows = theta[len(free_b0):].reshape(len(free_b1), d)
        b1 = torch.stack([rows[free_b1.index(i)] if i in free_b1 else b1[i] for i in range(k)])
        # the family's logits: s + beta0, or log sigmoid(s + beta0) for a normalised sigmoid gate
        L = fam.logits(_UNIT_T, torch.stack([P.score(b1[i]) for i in range(k)], 1), b0)  # [n, k]
        if fam.normalised:
            L = L - L.mean(1, keepdim=True)
        return L.reshape(-1)

    theta0 = torch.cat([torch.zeros(len(free_b0), dtype=torch.float64), P.beta1[free_b1].reshape(-1)])
    if free_b0:
        theta0[: len(free_b0)] = torch.as_tensor(P.beta0[free_b0], dtype=torch.float64)
    ok, sv, tol = independence(jacfwd(logits)(theta0))
    return _cond("gate_identifiable", "gate parameters identifiable to first order (centred logits' Jacobian full rank)",
                 ok, sv, tol, "" if ok else "a direction of the gate parameters leaves the weights unchanged")


#: a gate configuration with unit temperature, for :meth:`GateFamily.logits`
_UNIT_T = SimpleNamespace(temperature=1.0)


def _temperature_identifiable(P: _Parts) -> dict:
    """:func:`_gate_identifiable` for the gate with a fitted temperature (:mod:`moestat.model.temperature_gate`).

    Free parameters: ``(beta1_i, beta0_i)`` for ``i < k`` and ``tau`` (the reference row's
    ``beta1[-1, 0]``); logits ``(s_i + beta0_i) / tau`` for ``i < k`` and 0 for the reference, centred.
    With a linear score the ray ``c (beta1, beta0, tau)`` leaves every logit unchanged, so the
    Jacobian is singular along the parameter vector itself; the detail says so when that is the
    direction found.
    """
    k, d = P.beta1.shape
    raw = P.raw_score

    def logits(theta: torch.Tensor) -> torch.Tensor:
        b1 = theta[: (k - 1) * d].reshape(k - 1, d)
        b0 = theta[(k - 1) * d: (k - 1) * (d + 1)]
        tau = theta[-1]
        L = torch.stack([(raw(b1[i]) + b0[i]) / tau for i in range(k - 1)] + [torch.zeros_like(P.x[:, 0])], 1)
        return (L - L.mean(1, keepdim=True)).reshape(-1)

    theta0 = torch.cat([P.beta1[:-1].reshape(-1), P.beta0[:-1], torch.tensor([P.tau], dtype=torch.float64)])
    Jac = jacfwd(logits)(theta0)
    ok, sv, tol = independence(Jac)
    detail = ""
    if not ok:
        # the ray: d/dc logits(c theta0) at c = 1 is Jac @ theta0
        ray = float(torch.linalg.vector_norm(Jac @ theta0) / (torch.linalg.vector_norm(Jac) * torch.linalg.vector_norm(theta0)))
        detail = ("the ray c (beta1, beta0, tau) leaves the weights unchanged (relative residual "
                  f"{ray:.2g}): the temperature-parameter PDE" if ray <= tol else
                  "a direction of the gate parameters leaves the weights unchanged")
    return _cond("gate_identifiable", "gate parameters identifiable to first order (centred logits' Jacobian full rank; "
                 f"the temperature tau = {P.tau:.6g} a parameter)", ok, sv, tol, detail)


def _named_pairs(J, G, P: _Parts, tol: float) -> list[str]:
    """Exact pairs ``ds/dbeta1_u dh/deta_m = c dh/deta_m'`` at one atom, named (``x_u * dh/db = dh/da_u``)."""
    found = []
    for j, (Jj, Gj) in enumerate(zip(J, G)):
        if Gj is None:
            continue
        Jn = Jj.detach().numpy()
        Gn = Gj.detach().numpy()
        for u in range(Gn.shape[1]):
            for m in range(Jn.shape[1]):
                bcol = Gn[:, u] * Jn[:, m]
                nb = float(np.linalg.norm(bcol))
                if nb == 0.0:
                    continue
                for m2 in range(Jn.shape[1]):
                    a = Jn[:, m2]
                    na2 = float(a @ a)
                    if na2 == 0.0:
                        continue
                    c = float(a @ bcol) / na2
                    if np.linalg.norm(bcol - c * a) <= tol * nb:
                        # under a fitted temperature ds/dbeta1_u = x_u / tau, not x_u
                        gate = f"x_{u}" if P.score_kind == "linear" and P.tau is None else f"ds/dbeta1_{u}"
                        coef = "" if abs(c - 1.0) <= 1e-12 else f"{c:.6g} * "
                        s = f"{gate} * dh/d{P.names[m]} = {coef}dh/d{P.names[m2]}"
                        if s not in found:
                            found.append(s)
    return found


def _definitions(h, J, H, E, G, S2, P: _Parts, N: int) -> dict[str, dict]:
    """Definitions 2 (orders <= 1) and 1 (orders <= 2, within-order relations merged) of Nguyen et al. (2024)."""
    k, q = len(h), P.eta.shape[1]
    o0, o1, o2 = [], [], []
    for j in range(k):
        Ej, hj = E[j], h[j]
        o0.append((Ej * hj)[:, None])
        cols1 = [Ej[:, None] * J[j]]
        cols2 = [torch.stack([Ej * H[j][:, u, v] for u, v in itertools.combinations_with_replacement(range(q), 2)], 1)]
        if G[j] is not None:
            g = G[j]
            cols1.insert(0, Ej[:, None] * g * hj[:, None])
            gg = g[:, :, None] * g[:, None, :] + S2[j]  # d2 exp(s) / dbeta1 dbeta1 = E (grad grad^T + Hess s)
            iu = list(itertools.combinations_with_replacement(range(g.shape[1]), 2))
            cols2.append(torch.stack([Ej * gg[:, u, v] * hj for u, v in iu], 1))
            cols2.append((Ej[:, None, None] * g[:, :, None] * J[j][:, None, :]).reshape(N, -1))
        o1.append(torch.cat(cols1, 1))
        o2.append(torch.cat(cols2, 1))
    L, zl = _scale(torch.cat(o0 + o1, 1))
    tol1 = rank_tol(*L.shape)
    sv1 = _smallest_rel_sv(L)
    weak = _cond("weak_def2", "Definition 2 (Nguyen et al. 2024): F-bar derivatives of order <= 1 linearly independent",
                 sv1 > tol1, sv1, tol1, "a zero member" if zl.any() else "")
    Q, z2 = _scale(torch.cat(o2, 1))
    tol2 = rank_tol(N, L.shape[1] + Q.shape[1])
    sine = _intersection_sine(L, Q, tol2)
    sv2 = _smallest_rel_sv(Q[:, ~z2]) if (~z2).any() else 1.0
    merged = int((~z2).sum()) - _basis(Q[:, ~z2], tol2).shape[1]
    ok = bool(sv1 > tol1 and not z2.any() and sine > tol2)
    why = []
    if sv1 <= tol1:
        why.append("orders <= 1 dependent")
    if z2.any():
        why.append(f"{int(z2.sum())} second-order member(s) identically zero")
    if sine <= tol2:
        why.append("a second-order member in the span of orders <= 1")
    why.append(f"{merged} within-order-2 relation(s) merged (smallest order-2 singular value {sv2:.2g})")
    strong = _cond("strong_def1", "Definition 1 (Nguyen et al. 2024): F-bar derivatives of order <= 2 independent "
                   "(within-order relations merged)", ok, min(sv1, sine), tol2, "; ".join(why))
    return {"weak_def2": weak, "strong_def1": strong}


def _x_dependence(P: _Parts) -> tuple[list[float], list[float]]:
    """Per atom: RMS of ``dh/dx`` relative to ``h`` (0: constant in x) and of ``d2h/dx2`` (0: affine in x)."""
    x = P.x[:400]
    dep, aff = [], []
    for j in range(P.eta.shape[0]):
        e = P.eta[j]

        def f(xi: torch.Tensor) -> torch.Tensor:
            return P.expert_x(xi.unsqueeze(0), e)[0]  # [C]

        Jx = torch.vmap(jacfwd(f))(x)  # [n, C, d]
        Hx = torch.vmap(jacfwd(jacfwd(f)))(x)  # [n, C, d, d]
        ref = float(torch.sqrt((P.expert_x(x, e) ** 2).mean())) + float(torch.sqrt((Jx ** 2).mean())) + 1e-300
        dep.append(float(torch.sqrt((Jx ** 2).mean())) / ref)
        aff.append(float(torch.sqrt((Hx ** 2).mean())) / ref)
    return dep, aff


# ---------------------------------------------------------------------------------------------
# the theorems
# ---------------------------------------------------------------------------------------------
#: The classical theorem (its data file ``moestat/theorems/data/99-classical-mle.toml``): an exact fit
#: (``k = k*``) by maximum likelihood whose Fisher information is nonsingular at the truth is
#: asymptotically normal at ``n^-1/2`` in every parameter; :mod:`moestat.theorems.file_theorems` fills
#: the losses no named theorem speaks of with it.
CLASSICAL_KEY = "classical-mle"
CLASSICAL_CITE = registry_theorem(CLASSICAL_KEY).cite
#: Monte Carlo draws of the Fisher information behind ``fisher_nonsingular`` (an exact singularity -- a
#: model invariant along a direction -- leaves an eigenvalue at round-off whatever the draws).
FISHER_DRAWS = 4000

_BY_KEY = {t.key: t for t in THEOREMS}
_SETTING_WORDS = {"exact": "exact fits (k = k*)", "over": "over-specified fits (k > k*)"}


def in_setting(th: Theorem, setting: str) -> bool:
    """Whether ``th`` speaks of fits of ``setting`` (``"exact"`` or ``"over"``)."""
    return th.setting in ("any", setting)


def fisher_condition(scenario, m: int = FISHER_DRAWS, seed: int = 0) -> dict:
    """``fisher_nonsingular``: the Fisher information of the truth (:func:`moestat.estimators.fisher.fisher_information`,
    ``m`` draws) is nonsingular.

    The matrix is scaled to unit diagonal (a zero diagonal entry, a parameter the likelihood does not
    see, is singular) and its smallest eigenvalue over the largest compared with ``rank_tol(m, P)``:
    an exact invariance of the model makes every sampled score ``s`` orthogonal to one direction, so
    ``E[s s^T]`` keeps an eigenvalue at round-off; an identified truth, even ill-conditioned
    (condition numbers up to 1e8 over the catalogue's truths), stays far above it.
    """
    info, _ = fisher_information(scenario, m=m, seed=seed)
    info = 0.5 * (info + info.T)
    diag = np.diag(info)
    tol = rank_tol(m, info.shape[0])
    if np.any(diag <= 0):
        return _cond("fisher_nonsingular", "Fisher information of the truth nonsingular (regular maximum likelihood)",
                     False, 0.0, tol, "a parameter with zero Fisher information")
    c = info / np.sqrt(np.outer(diag, diag))
    w = np.linalg.eigvalsh(c)
    ratio = float(w[0] / w[-1])
    return _cond("fisher_nonsingular", "Fisher information of the truth nonsingular (regular maximum likelihood)",
                 ratio > tol, ratio, tol, f"{m} draws; smallest over largest eigenvalue at unit diagonal"
                 + ("" if ratio > tol else ": at round-off, a direction of the parameters the likelihood does not see"))


def _judge(th: Theorem, conds: dict[str, dict], P: _Parts) -> dict[str, Any]:
    failing = [f"{c} {'holds' if conds[c]['holds'] else 'fails'} (needs {'holds' if want else 'fails'})"
               + (f": {conds[c]['detail']}" if conds[c]["detail"] else "")
               for c, want in th.requires.items() if c in conds and conds[c]["holds"] is not None and conds[c]["holds"] != want]
    missing = [f"{c} not applicable" for c in th.requires if c not in conds or conds[c]["holds"] is None]
    other = [] if th.applies(P) else [f"the model is not of the theorem's class ({th.claim.split(':')[0]})"]
    if not in_setting(th, P.setting):
        other.append(f"the fit is {_SETTING_WORDS[P.setting]}; the theorem speaks of {_SETTING_WORDS[th.setting]}")
    return {"theorem": th.key, "cite": th.cite, "claim": th.claim, "read": th.read, "setting": th.setting,
            "requires": {c: ("holds" if w else "fails") for c, w in th.requires.items()},
            "met": not failing and not missing and not other, "failing": other + failing + missing}


def check_hypotheses(scenario, *, n: int = N_X, seed: int = 0, theorem: str | None = None) -> dict[str, Any]:
    """The conditions of the truth and the theorems whose hypotheses it meets.

    Parameters
    ----------
    scenario : FileScenario, Scenario or GaussianMoEScenario
    n, seed : int
        Inputs drawn from the scenario's law.
    theorem : str, optional
        A key of :data:`THEOREMS` to judge (the truth's "own" theorem, e.g. a catalogue entry's);
        otherwise every theorem whose model class is the scenario's and whose setting (exact or
        over-specified, :attr:`moestat.theorems.registry.Theorem.setting`) is the fit's.  A theorem requiring
        ``fisher_nonsingular`` (the classical one) adds that condition (:func:`fisher_condition`).

    Returns
    -------
    dict
        ``conditions`` (key -> condition), ``theorems`` (list of ``{theorem, cite, claim, read,
        requires, met, failing}``), ``met`` (keys of the theorems met), ``n_inputs``,
        ``score``, ``normalisation``.
    """
    if theorem is not None and theorem not in _BY_KEY:
        raise ValueError(f"unknown theorem {theorem!r}; expected one of {', '.join(_BY_KEY)}")
    if scenario.gllim:  # x is modelled too: no conditional gate-expert pair to differentiate
        return {"n_inputs": 0, "seed": int(seed), "score": "gaussian", "normalisation": "joint GLLiM",
                "conditions": {}, "theorems": [], "met": [],
                "not_checked": "the joint GLLiM models (x, y) together; these conditions are written for a "
                               "conditional gate-expert model g(x) = sum w_i(x) h(x, eta_i), so none is checked"}
    conds = conditions(scenario, n=n, seed=seed)
    P = _parts(scenario, 8, seed)
    ths = [_BY_KEY[theorem]] if theorem is not None else [t for t in THEOREMS if t.applies(P) and in_setting(t, P.setting)]
    if any("fisher_nonsingular" in t.requires and t.applies(P) and in_setting(t, P.setting) for t in ths):
        conds = {**conds, "fisher_nonsingular": fisher_condition(scenario, seed=seed)}
    judged = [_judge(t, conds, P) for t in ths]
    return {"n_inputs": int(n), "seed": int(seed), "score": P.score_kind, "normalisation": P.normalisation,
            "conditions": conds, "theorems": judged, "met": [j["theorem"] for j in judged if j["met"]]}


def _v(c: dict) -> str:
    return "n/a" if c["holds"] is None else ("holds" if c["holds"] else "fails")


def format_hypotheses(rep: dict[str, Any]) -> str:
    """The printed table: one line per condition (evidence against its threshold), then one per theorem."""
    if rep.get("not_checked"):
        return f"hypotheses of the truth: not checked: {rep['not_checked']}"
    lines = [f"hypotheses of the truth ({rep['score']} score, {rep['normalisation']}; {rep['n_inputs']} inputs of the "
             "scenario's law, autograd in float64; evidence <= tol means an exact relation)",
             f"{'condition':<24} {'':<6} {'evidence':>10} {'tol':>9}  statement"]
    for c in rep["conditions"].values():
        ev = "-" if c["value"] is None else f"{c['value']:.3g}"
        tol = "-" if c["tol"] is None else f"{c['tol']:.2g}"
        lines.append(f"{c['key']:<24} {_v(c):<6} {ev:>10} {tol:>9}  {c['statement']}" + (f" [{c['detail']}]" if c["detail"] else ""))
    if not rep["theorems"]:
        lines.append("no catalogue theorem speaks of this model class")
    for t in rep["theorems"]:
        head = f"{'MEETS' if t['met'] else 'FAILS'} {t['cite']}: {t['claim']}"
        lines.append(head + ("" if t["met"] else " -- " + "; ".join(t["failing"])) + f" (read: {t['read']})")
    return "\n".join(lines)
