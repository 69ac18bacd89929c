"""Numerical identifiability checks (Nguyen et al. (2024), Definitions 1 and 2) and PDE residuals (eq. 4, Lemma 4).

Definitions 1 and 2 of Nguyen et al. (2024) ask whether the functions of ``x``::

    d^{|a1| + |a2|} F-bar / d beta1^{a1} d eta^{a2} (x; beta1_j, eta_j),   j in [k],
    F-bar(x; beta1, eta) = exp(s(x; beta1)) h(x, eta),

with total order ``|a1| + |a2| <= 2`` (strong identifiability, Def. 1) or ``<= 1`` (weak
identifiability, Def. 2), are linearly independent at every set of ``k`` distinct atoms.  A
finite set of functions is linearly independent exactly when, on enough sampled inputs, the
*design matrix* whose columns are the functions evaluated at those inputs has full column rank
(for analytic functions any sample from a continuous law suffices almost surely).  This module
builds that matrix with ``torch.func`` in float64 and decides its rank from its singular values.

Rank decision
-------------
Each column is scaled to unit root-mean-square (an identically zero column stays zero and is
reported as such), then the singular values ``s_1 >= ... >= s_m`` of the scaled matrix are
computed and the numerical rank is ``#{i : s_i > rtol * s_1}`` with ``rtol = 1e-10`` by default.
Exact dependencies (the PDE (4) of the cosine router, the Euler identity of homogeneous experts,
identically zero derivatives) give relative singular values at round-off level (about
``1e-15`` in float64), while the independent families of the paper's examples stay above
about ``1e-7`` on the default sample (atoms of scale 2, inputs Uniform[-1, 1]^d), so the threshold sits in a wide gap; the result object
keeps every singular value so the gap can be inspected (:attr:`IdentifiabilityResult.gap`).

A caveat worth knowing (documented in ``docs/guide/theory.rst``): experts that are homogeneous in
their parameter, ``h(x, t eta) = t^p h(x, eta)`` -- linear experts ``a^T x + b``, polynomial
experts ``(a^T x + b)^p``, ReLU, constant experts -- satisfy Euler's identity
``eta^T grad_eta F-bar = p F-bar`` (and ``eta^T grad_eta (d F-bar / d eta_u) = (p - 1) d F-bar / d eta_u``),
a linear relation between consecutive orders.  The family of Definitions 1/2 as we read
them (orders ``0..r``) is therefore dependent for them, although the paper lists linear and
polynomial experts as weakly (and polynomials of degree >= 2 as strongly) identifiable.  The
``min_order`` argument lets one inspect the family without the order-0 term.

A second caveat: for experts ``phi(a^T x + b)`` in dimension ``d >= 2``, ``dh/da_v = x_v dh/db``
and the router derivative ``dE/dbeta1_u`` is ``E`` times a linear form in ``x / (||x|| + tau2)``,
so the ``d^2`` mixed partials ``d2F/dbeta1_u da_v`` span only ``d(d+1)/2`` functions: the
order-2 family has ``d(d-1)/2`` exact relations per atom for *every* such expert (GELU, tanh,
sigmoid included).  :class:`IdentifiabilityResult` reports the deficit and the relation, so a
user can tell this structural deficit from a genuine failure.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import numpy as np
import torch
from torch.func import jacfwd, jacrev, jvp

from moestat.model.experts import Expert
from moestat.model.gates import Gate, TensorLike, gate_scores
from moestat.model.mixing import MixingMeasure
from moestat.seeding import numpy_generator

__all__ = [
    "DEFAULT_RTOL",
    "IdentifiabilityResult",
    "fbar",
    "design_matrix",
    "identifiability_rank",
    "check_identifiability",
    "is_strongly_identifiable",
    "is_weakly_identifiable",
    "random_atoms",
    "pde_residual",
    "perturbed_pde_closed_form",
    "lemma4_residual",
]

#: Default relative singular-value threshold of the rank decision (see module docstring).
DEFAULT_RTOL = 1e-10

ExpertLike = Union[Expert, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]
#: Atoms ``(beta1_j, eta_j)``: an unbatched mixing measure, or the pair ``(beta1 [k, d], eta [k, q])``.
AtomsLike = Union[MixingMeasure, tuple[TensorLike, TensorLike]]
#: A seed of :func:`moestat.seeding.numpy_generator` without ``None``.
Seed = Union[int, np.random.SeedSequence, np.random.Generator]


def _f64(a: TensorLike) -> torch.Tensor:
    """``a`` (array-like or Tensor) as a float64 tensor; tensors keep their device."""
    return torch.as_tensor(a if isinstance(a, torch.Tensor) else np.asarray(a, dtype=np.float64), dtype=torch.float64)


def _expert_fn(expert: ExpertLike) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``h(x [n, d], eta [q]) -> [n]`` for a moestat :class:`Expert` or a user callable."""
    if isinstance(expert, Expert):
        return lambda x, eta: expert(x, eta.unsqueeze(0))[..., 0]
    if callable(expert):
        return expert
    raise TypeError(f"expert must be a moestat Expert or a callable h(x, eta), got {type(expert).__name__}")


def _gate(gate: Gate | str | None) -> Gate:
    if gate is None:
        return Gate("perturbed", tau=1.0)
    if isinstance(gate, str):
        return Gate(gate, tau=1.0 if gate == "perturbed" else 0.0)
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a moestat Gate or a kind name, got {type(gate).__name__}")
    return gate


def fbar(x: torch.Tensor, beta1: torch.Tensor, eta: torch.Tensor, expert: ExpertLike, gate: Gate | str | None = None) -> torch.Tensor:
    """``F-bar(x; beta1, eta) = exp(s(x; beta1)) h(x, eta)`` for one atom.

    Parameters
    ----------
    x : Tensor, shape ``[n, d]``
    beta1 : Tensor, shape ``[d]``
    eta : Tensor, shape ``[q]``
    expert : Expert or callable
        A moestat :class:`~moestat.model.experts.Expert`, or any torch callable ``h(x, eta)`` taking
        ``x [n, d]`` and one parameter vector ``eta [q]`` and returning ``[n]``.
    gate : Gate or {"cosine", "perturbed", "linear"}, optional
        Score ``s``; default the perturbed router with ``tau1 = tau2 = 1`` (eq. 9).  Only the
        score is used (no bias, no Top-K).

    Returns
    -------
    Tensor, shape ``[n]``
    """
    g = _gate(gate)
    s = gate_scores(x, beta1.unsqueeze(0), g.kind, g.tau)[..., 0]
    return torch.exp(s) * _expert_fn(expert)(x, eta)


def random_atoms(k: int, d: int, q: int | None = None, random_state: Seed = 0, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` generic (almost surely distinct, non-zero) atoms ``(beta1 [k, d], eta [k, q])``.

    Entries are i.i.d. ``N(0, scale^2 / d)``; ``q`` defaults to ``d + 1`` (the moestat expert).
    """
    for name, v in (("k", k), ("d", d)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    q = int(d) + 1 if q is None else int(q)
    if q < 1:
        raise ValueError(f"q must be a positive integer, got {q!r}")
    rng = numpy_generator(random_state)
    sd = float(scale) / math.sqrt(d)
    b1 = torch.as_tensor(rng.normal(0.0, sd, size=(int(k), int(d))), dtype=torch.float64)
    eta = torch.as_tensor(rng.normal(0.0, sd, size=(int(k), q)), dtype=torch.float64)
    return b1, eta


def _atoms(atoms: AtomsLike | None, expert: ExpertLike, d: int | None, k: int, random_state: Seed) -> tuple[torch.Tensor, torch.Tensor]:
    if atoms is None:
        if d is None:
            raise ValueError("d is required when atoms is not given")
        return random_atoms(k, d, None, random_state)
    if isinstance(atoms, MixingMeasure):
        m = atoms.numpy()
        if m.batch_shape:
            raise ValueError("atoms must be an unbatched MixingMeasure")
        b1, eta = m.beta1, m.eta
    else:
        try:
            b1, eta = atoms
        except (TypeError, ValueError):
            raise ValueError("atoms must be a MixingMeasure or a pair (beta1 [k, d], eta [k, q])") from None
    b1 = _f64(b1)
    eta = _f64(eta)
    if b1.ndim != 2 or eta.ndim != 2 or b1.shape[0] != eta.shape[0]:
        raise ValueError(f"atoms: beta1 must be [k, d] and eta [k, q] with the same k, got {tuple(b1.shape)} and {tuple(eta.shape)}")
    return b1, eta


def _default_x(n: int, d: int, random_state: Seed) -> torch.Tensor:
    rng = numpy_generator(random_state)
    # Uniform[-1, 1]^d: the bounded input law of the scenarios (A.1).
    return torch.as_tensor(rng.uniform(-1.0, 1.0, size=(n, d)), dtype=torch.float64)


def _multi_index_label(idx: Sequence[int], d: int) -> str:
    parts = []
    for i in idx:
        parts.append(f"beta1[{i}]" if i < d else f"eta[{i - d}]")
    return "F" if not parts else "d/" + "".join("d" + p for p in parts)


def design_matrix(
    expert: ExpertLike,
    atoms: AtomsLike | None = None,
    order: int = 2,
    gate: Gate | str | None = None,
    x: TensorLike | None = None,
    *,
    k: int = 2,
    d: int | None = None,
    n_samples: int | None = None,
    min_order: int = 0,
    random_state: Seed = 0,
) -> tuple[torch.Tensor, list[str]]:
    """The sampled design matrix of the function family of Definition 1 (``order=2``) or 2 (``order=1``).

    Columns are ``d^{|alpha|} F-bar / d theta^alpha (x_i; theta_j)`` with ``theta = (beta1, eta)``,
    one column per atom ``j`` and per *unordered* multi-index ``alpha`` with
    ``min_order <= |alpha| <= order`` (each mixed partial once).

    Parameters
    ----------
    expert : Expert or callable
        See :func:`fbar`.
    atoms : MixingMeasure or (beta1 [k, d], eta [k, q]), optional
        The atoms ``(beta1_j, eta_j)`` (``beta0`` is ignored).  Default: ``k`` random atoms from
        :func:`random_atoms` (needs ``d``).
    order : {0, 1, 2}
        Highest total derivative order ``r``.
    gate : Gate or str, optional
        Router score; default perturbed with ``tau = 1``.
    x : array ``[n, d]``, optional
        Inputs; default ``n_samples`` draws from Uniform[-1, 1]^d.
    k, d : int
        Number of random atoms and input dimension when ``atoms`` is not given.
    n_samples : int, optional
        Default ``max(200, 6 * n_functions)``.
    min_order : int
        Lowest order included (0 as in the definitions; 1 drops ``F-bar`` itself).
    random_state : int or numpy Generator
        Seed of the random atoms and inputs.

    Returns
    -------
    M : Tensor, shape ``[n, m]`` (float64)
        ``M[i, c]`` = function ``c`` at ``x_i``.
    labels : list of str
        ``"atom<j>:<derivative>"`` for each column.

    Examples
    --------
    >>> M, labels = design_matrix(Expert("gelu"), order=1, d=2, k=2)
    >>> M.shape[1], labels[:2]
    (12, ['atom0:F', 'atom0:d/dbeta1[0]'])
    """
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order!r}")
    if min_order not in (0, 1, 2) or min_order > order:
        raise ValueError(f"min_order must be between 0 and order={order}, got {min_order!r}")
    g = _gate(gate)
    b1, eta = _atoms(atoms, expert, d, k, random_state)
    k_, dd = b1.shape
    q = eta.shape[1]
    p = dd + q
    n_per_atom = sum(math.comb(p + r - 1, r) for r in range(min_order, order + 1))
    if x is None:
        n = n_samples if n_samples is not None else max(200, 6 * n_per_atom * k_)
        rs = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(np.random.SeedSequence(random_state).spawn(1)[0])
        x = _default_x(int(n), dd, rs)
    x = _f64(x)
    if x.ndim != 2 or x.shape[1] != dd:
        raise ValueError(f"x must have shape [n, {dd}], got {tuple(x.shape)}")
    cols: list[torch.Tensor] = []
    labels: list[str] = []
    for j in range(k_):
        theta = torch.cat([b1[j], eta[j]])

        def f(th: torch.Tensor) -> torch.Tensor:
            return fbar(x, th[:dd], th[dd:], expert, g)

        if min_order <= 0:
            cols.append(f(theta).unsqueeze(-1))
            labels.append(f"atom{j}:F")
        if order >= 1 and min_order <= 1:
            J = jacfwd(f)(theta)  # [n, p]; forward mode: p << n
            cols.append(J)
            labels += [f"atom{j}:{_multi_index_label((u,), dd)}" for u in range(p)]
        if order >= 2:
            H = jacfwd(jacfwd(f))(theta)  # [n, p, p]; symmetric, keep u <= v (each mixed partial once)
            pairs = list(itertools.combinations_with_replacement(range(p), 2))
            cols.append(torch.stack([H[:, u, v] for u, v in pairs], dim=-1))
            labels += [f"atom{j}:{_multi_index_label(pr, dd)}" for pr in pairs]
    M = torch.cat(cols, dim=-1).detach()
    return M, labels


@dataclass
class IdentifiabilityResult:
    """Outcome of a rank check.

    Attributes
    ----------
    rank : int
        Numerical rank of the column-scaled design matrix.
    n_functions : int
        Number of functions (columns).
    singular_values : ndarray
        Singular values of the scaled matrix, descending, divided by the largest.
    rtol : float
        Relative threshold used.
    labels : list of str
        Column labels.
    zero_functions : list of str
        Functions that vanish identically on the sample (e.g. ``d2F/deta_b^2`` of a linear expert).
    dependence : dict
        The right singular vector of the smallest singular value when the family is dependent:
        label -> coefficient, the largest coefficients first (an approximate linear relation).
    """

    rank: int
    n_functions: int
    singular_values: np.ndarray
    rtol: float
    labels: list[str]
    zero_functions: list[str] = field(default_factory=list)
    dependence: dict[str, float] = field(default_factory=dict)

    @property
    def independent(self) -> bool:
        """True when the family has full column rank."""
        return self.rank == self.n_functions

    @property
    def gap(self) -> tuple[float, float]:
        """(smallest relative singular value kept, largest dropped); NaN where none."""
        sv = self.singular_values
        kept = sv[sv > self.rtol]
        dropped = sv[sv <= self.rtol]
        return (float(kept.min()) if kept.size else float("nan"), float(dropped.max()) if dropped.size else float("nan"))


def identifiability_rank(
    expert: ExpertLike,
    atoms: AtomsLike | None = None,
    order: int = 2,
    gate: Gate | str | None = None,
    x: TensorLike | None = None,
    *,
    rtol: float = DEFAULT_RTOL,
    **kwargs: Any,
) -> IdentifiabilityResult:
    """Rank of the design matrix of :func:`design_matrix` (see the module docstring for the rule).

    Parameters
    ----------
    expert, atoms, order, gate, x
        See :func:`design_matrix`.
    rtol : float
        Relative singular-value threshold (default :data:`DEFAULT_RTOL`).
    **kwargs
        Passed to :func:`design_matrix` (``k``, ``d``, ``n_samples``, ``min_order``,
        ``random_state``).

    Returns
    -------
    IdentifiabilityResult

    Examples
    --------
    >>> res = identifiability_rank(Expert("gelu"), order=1, d=2, k=2)
    >>> res.rank == res.n_functions
    True
    >>> res2 = identifiability_rank(Expert("gelu"), order=2, d=2, k=2)
    >>> res2.n_functions - res2.rank  # d(d-1)/2 = 1 mixed-partial relation per atom (module docstring)
    2
    """
    if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
        raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")
    M, labels = design_matrix(expert, atoms, order, gate, x, **kwargs)
    if M.shape[0] < M.shape[1]:
        raise ValueError(f"need at least as many samples as functions ({M.shape[1]}), got {M.shape[0]}")
    if not bool(torch.isfinite(M).all()):
        raise ValueError("the design matrix has non-finite entries (an atom with beta1 = 0 under the cosine router?)")
    rms = torch.sqrt((M * M).mean(0))
    zero = rms <= 1e-300 + 1e-14 * float(rms.max())
    Ms = M / torch.where(zero, torch.ones_like(rms), rms)
    Ms = torch.where(zero, torch.zeros_like(Ms), Ms)
    _, s, Vh = torch.linalg.svd(Ms, full_matrices=False)
    s_rel = (s / s[0]).numpy() if float(s[0]) > 0 else np.zeros(s.shape[0])
    rank = int((s_rel > rtol).sum())
    dep: dict[str, float] = {}
    if rank < M.shape[1]:
        v = Vh[-1].numpy()
        order_idx = np.argsort(-np.abs(v))
        dep = {labels[i]: float(v[i]) for i in order_idx if abs(v[i]) > 1e-3}
    return IdentifiabilityResult(
        rank=rank,
        n_functions=int(M.shape[1]),
        singular_values=s_rel,
        rtol=float(rtol),
        labels=labels,
        zero_functions=[labels[i] for i in range(len(labels)) if bool(zero[i])],
        dependence=dep,
    )


def check_identifiability(expert: ExpertLike, order: int = 2, gate: Gate | str | None = None, *, d: int = 2, k: int = 2,
                          n_atom_draws: int = 3, random_state: int = 0, rtol: float = DEFAULT_RTOL, min_order: int = 0,
                          atoms: AtomsLike | None = None, q: int | None = None, scale: float = 2.0) -> IdentifiabilityResult:
    """Rank check at several random atom sets; returns the least favourable result.

    Definition 1/2 quantify over *every* set of distinct atoms; a finite check can only sample
    some.  This draws ``n_atom_draws`` generic atom sets (seeded) and returns the result with the
    smallest rank deficit margin, so ``independent`` is True only if every draw was independent.

    Parameters
    ----------
    expert : Expert or callable
        See :func:`fbar`.
    order : {1, 2}
        1: Definition 2 (weak), 2: Definition 1 (strong).
    gate : Gate or str, optional
        Default: perturbed, ``tau = 1``.
    d, k : int
        Input dimension and number of atoms.
    n_atom_draws : int
        Number of random atom sets (ignored when ``atoms`` is given).
    random_state : int
        Seed.
    rtol : float
        Rank threshold.
    min_order : int
        See :func:`design_matrix`.
    atoms : optional
        Use these atoms instead of random ones.
    q : int, optional
        Parameter length of a user callable expert (default ``d + 1``).
    scale : float
        Scale of the random atoms (:func:`random_atoms`); moderate atoms keep the sampled
        functions well conditioned.

    Returns
    -------
    IdentifiabilityResult
    """
    if isinstance(n_atom_draws, bool) or int(n_atom_draws) != n_atom_draws or n_atom_draws < 1:
        raise ValueError(f"n_atom_draws must be a positive integer, got {n_atom_draws!r}")
    seeds = np.random.SeedSequence(random_state).spawn(int(n_atom_draws))
    worst: IdentifiabilityResult | None = None
    for ss in seeds if atoms is None else seeds[:1]:
        rng = np.random.default_rng(ss)
        at = atoms if atoms is not None else random_atoms(k, d, q, rng, scale=scale)
        res = identifiability_rank(expert, at, order, gate, None, rtol=rtol, min_order=min_order, random_state=rng)
        if worst is None or (res.n_functions - res.rank, -res.singular_values[-1]) > (worst.n_functions - worst.rank, -worst.singular_values[-1]):
            worst = res
    assert worst is not None
    return worst


def is_strongly_identifiable(expert: ExpertLike, gate: Gate | str | None = None, **kwargs: Any) -> bool:
    """Definition 1 (orders ``<= 2``) holds at the sampled atoms; see :func:`check_identifiability`.

    For ``phi(a^T x + b)`` experts with ``d >= 2`` the literal family has ``d(d-1)/2`` relations
    per atom among the mixed partials ``d2F/dbeta1_u da_v`` (module docstring), so this returns
    False for every such expert; inspect :func:`check_identifiability`'s deficit and
    ``dependence`` to see which relations remain.

    Examples
    --------
    >>> is_strongly_identifiable(Expert("identity"), n_atom_draws=1)  # d2F/db2 = 0
    False
    """
    return check_identifiability(expert, 2, gate, **kwargs).independent


def is_weakly_identifiable(expert: ExpertLike, gate: Gate | str | None = None, **kwargs: Any) -> bool:
    """Definition 2 (orders ``<= 1``) holds at the sampled atoms; see :func:`check_identifiability`.

    Examples
    --------
    >>> is_weakly_identifiable(Expert("tanh"), n_atom_draws=1), is_weakly_identifiable(Expert("tanh"), gate="cosine", n_atom_draws=1)
    (True, False)
    """
    return check_identifiability(expert, 1, gate, **kwargs).independent


# ---- PDE residuals --------------------------------------------------------------------------

def _pde_inputs(x: TensorLike, beta1: TensorLike, eta: TensorLike | None, expert: ExpertLike | None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, ExpertLike]:
    """``(x [n, d], beta1 [d], eta [q], h)`` in float64; no ``expert`` means the constant 1 expert."""
    e = torch.zeros(1, dtype=torch.float64) if eta is None else _f64(eta)
    h = expert if expert is not None else (lambda xx, ee: torch.ones(xx.shape[0], dtype=xx.dtype))
    return _f64(x), _f64(beta1), e, h


def pde_residual(x: TensorLike, beta1: TensorLike, eta: TensorLike | None = None, expert: ExpertLike | None = None, gate: Gate | str | None = "cosine") -> torch.Tensor:
    """``beta1^T grad_{beta1} F(x; beta1, eta)`` by autograd, per input.

    PDE (4) of Nguyen et al. (2024) says this is 0 for the cosine router (``F`` is homogeneous of degree 0 in
    ``beta1``); for the perturbed router it equals :func:`perturbed_pde_closed_form`.

    Parameters
    ----------
    x : array ``[n, d]``
    beta1 : array ``[d]`` (non-zero)
    eta : array ``[q]``, optional
        Expert parameter; with ``expert=None`` the expert is the constant 1 (``F = exp(s)``).
    expert : Expert or callable, optional
    gate : Gate or str
        Default ``"cosine"``.

    Returns
    -------
    Tensor ``[n]``
    """
    x, b, e, ex = _pde_inputs(x, beta1, eta, expert)
    J = jacrev(lambda bb: fbar(x, bb, e, ex, gate))(b)  # [n, d]
    return J @ b


def perturbed_pde_closed_form(x: TensorLike, beta1: TensorLike, F: TensorLike, tau: float | tuple[float, float] = 1.0) -> torch.Tensor:
    """``tau1 beta1^T x / ((||beta1|| + tau1)^2 (||x|| + tau2)) * F``: the perturbed router's residual.

    Parameters
    ----------
    x : array ``[n, d]``
    beta1 : array ``[d]``
    F : array ``[n]``
        ``F-bar(x; beta1, eta)``.
    tau : float or (float, float)

    Returns
    -------
    Tensor ``[n]``
    """
    t1, t2 = Gate("perturbed", tau=tau).tau
    x = _f64(x)
    b = _f64(beta1)
    F = _f64(F)
    return t1 * (x @ b) / ((torch.linalg.vector_norm(b) + t1) ** 2 * (torch.linalg.vector_norm(x, dim=-1) + t2)) * F


def lemma4_residual(x: TensorLike, beta1: TensorLike, r: int = 2, eta: TensorLike | None = None, expert: ExpertLike | None = None, gate: Gate | str | None = "cosine",
                    method: str = "multiindex") -> torch.Tensor:
    """``sum_{|alpha| = r} beta1^alpha / alpha! d^r F / d beta1^alpha`` (Lemma 4, eq. 50), per input.

    Parameters
    ----------
    x, beta1, eta, expert, gate
        See :func:`pde_residual`.
    r : int
        Order (1 or 2 with ``method="multiindex"``; any ``r >= 1`` with ``method="ray"``).
    method : {"multiindex", "ray"}
        ``multiindex``: the sum over multi-indices from the gradient (``r = 1``) or the Hessian
        (``r = 2``: ``beta1^T H beta1 / 2``).  ``ray``: ``(1/r!) d^r/dt^r F(x; (1 + t) beta1)`` at
        ``t = 0`` by nested forward-mode derivatives (equal to the sum by the multinomial
        theorem), for any ``r``.

    Returns
    -------
    Tensor ``[n]``
    """
    if isinstance(r, bool) or int(r) != r or r < 1:
        raise ValueError(f"r must be a positive integer, got {r!r}")
    x, b, e, ex = _pde_inputs(x, beta1, eta, expert)
    F = lambda bb: fbar(x, bb, e, ex, gate)  # noqa: E731
    if method == "multiindex":
        if r == 1:
            return jacrev(F)(b) @ b
        if r == 2:
            H = jacrev(jacrev(F))(b)  # [n, d, d]
            return 0.5 * torch.einsum("u,nuv,v->n", b, H, b)
        raise ValueError("method='multiindex' supports r = 1 or 2; use method='ray' for higher r")
    if method != "ray":
        raise ValueError(f"method must be 'multiindex' or 'ray', got {method!r}")

    def along(t: torch.Tensor) -> torch.Tensor:
        return F((1.0 + t) * b)

    fn = along
    for _ in range(int(r)):
        fn = (lambda g: (lambda t: jvp(g, (t,), (torch.ones_like(t),))[1]))(fn)
    return fn(torch.zeros((), dtype=torch.float64)) / math.factorial(int(r))
