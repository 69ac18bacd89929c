"""Le Cam's two points for experts under a softmax gate: the over-specified split of an expert.

(The entry's fitted FFN arm is ``sigmoid(a^T x)``; the FFN curves below are
of its former truth ``eta2 * sigmoid(eta1^T x)``, kept as the instrument's control, :data:`FFN_FILE`.)

The catalogue entry ``lse-ffn-vs-linear`` (Nguyen, Ho & Rinaldo (2024), least squares, softmax
gate, ``k* = 2`` true atoms fitted with ``k = 3``) predicts that polynomial experts, linear ones
included, have estimation rates slower than any polynomial rate.  That is a statement about every
estimator, so it is judged the way such statements are proved: two truths of the over-specified
class ``G_k(Theta)`` whose data laws are as close as possible, and the separation the entry's loss
(``D2_ls``) sees between them (the instrument of :mod:`moestat.theorems.judges.two_point`).  The stored copies
of the paper hold its abstract and introduction only, so the witness below is not taken from its
proof; it is the degenerate direction that Definition 1 of Nguyen et al. (2024) names when it
excludes linear experts (a second derivative ``d2h/db2`` that is identically zero), and it is
justified by the exact computation that follows.

**Witness** (:func:`expert_split_witness`).  Split atom ``j`` of ``G`` into two atoms of half its
weight, with the *same* gate parameters and the expert parameters moved to either side along a
unit direction ``u`` of the expert's parameter space:

.. math::

    G'_t = \\sum_{i \\ne j} e^{\\beta_{0i}} \\delta_{(\\beta_{1i}, \\eta_i)}
          + \\tfrac12 e^{\\beta_{0j}} \\delta_{(\\beta_{1j},\\, \\eta_j - t u)}
          + \\tfrac12 e^{\\beta_{0j}} \\delta_{(\\beta_{1j},\\, \\eta_j + t u)}, \\qquad t > 0.

``G'_t`` has ``k* + 1 = k`` atoms, inside the compact box (checked), so both measures lie in the
over-specified class of the entry.  The two halves have equal gate scores, so the softmax gives
them equal weights that add up to atom ``j``'s, and

.. math::

    g_{G'_t}(x) - g_G(x) = \\pi_j(x)\\Big[\\tfrac12 h(x, \\eta_j - t u) + \\tfrac12 h(x, \\eta_j + t u)
                            - h(x, \\eta_j)\\Big]
                         = \\pi_j(x)\\,\\Big[\\tfrac{t^2}{2}\\, u^\\top \\nabla^2_\\eta h(x, \\eta_j)\\, u + O(t^4)\\Big].

* **Linear experts** ``h(x, (a, b)) = a^T x + b`` are affine in ``eta = (a, b)``: the bracket is
  zero for every ``t`` and every ``u``, so ``g_{G'_t} = g_G`` and ``KL = 0`` exactly.
* **FFN experts** ``eta2 * sigmoid(eta1^T x)`` are affine in ``eta2`` (``d2h/deta2^2 = 0``, the
  same degeneracy): along ``u = e_{eta2}`` the bracket is zero too, ``KL = 0``.  Along any
  ``u = (u1, u2)`` with ``u1 != 0`` it is ``t^2 / 2 [eta2 sigma''(eta1^T x) (u1^T x)^2 + 2 u2
  sigma'(eta1^T x) u1^T x] + O(t^4)``, not zero, so ``kappa(t) = a t^4 + O(t^6)`` (the odd orders
  cancel by symmetry).

**Separation.**  ``D2_ls`` (exponent 2 in a cell of two atoms, softmax mass term) gives
``D2_ls(G'_t, G) = e^{beta_{0j}} t^2`` exactly (two halves of weight ``e^{beta_{0j}} / 2``, each at
distance ``t``; the cell's mass is unchanged); the reverse order ``D2_ls(G, G'_t)`` leaves one half's
cell empty and is larger, and the smaller of the two is used.

**Bound.**  As in :mod:`moestat.theorems.judges.two_point`, ``LB(n) = max_t Delta(t) / 2 * A(n kappa(t))``,
``A`` the Pinsker/Bretagnolle-Huber affinity bound, ``kappa`` the per-sample KL
``E[(g_G - g_G')^2] / (2 nu)`` by Monte Carlo over ``m`` inputs with its standard error, and the
conservative curve with ``kappa + 2 SE``.  Where ``KL = 0`` the bound is ``Delta(t_max) / 2`` at
every ``n``: flat.  On the FFN arm along a ``u`` with ``u1 != 0`` it is ``max_t e^{beta_{0j}} t^2 / 2 *
A(n a t^4)``, of order ``n^{-1/2}`` with ``t*(n)`` of order ``n^{-1/4}`` (the shared-cell rate).

**What it proves.**  With ``C_D`` the constant of the weak triangle inequality ``D(Ghat, G) +
D(Ghat, G') >= D(G, G') / C_D`` that Le Cam's method needs (assumed, as for the split witness of
:mod:`moestat.theorems.judges.two_point`; for the flat case only ``inf_Ghat [D(Ghat, G) + D(Ghat, G'_{t_max})]
> 0`` is needed, a fixed pair): along an exact-zero split no estimator's worst-case ``D2_ls`` risk
over the pair falls with ``n`` -- the parameters of a cell that an over-specified fit splits are not
identified at all, which is the strongest form of "slower than any polynomial".  For linear experts
this holds in every direction of ``(a, b)``.  **For the FFN arm ``eta2 * sigmoid(eta1^T x)`` it holds
too, along ``eta2``**: the entry's ``D2_ls`` (which includes ``eta2``) has no uniform rate over
the over-specified class either; only along directions that move ``eta1`` does the bound fall, at
``n^{-1/2}``.  What separates the arms is therefore the set of flat directions: every direction of
``(a, b)`` for linear experts, the one coordinate ``eta2`` for the FFN expert.
**What it does not prove.**  Nothing about one estimator at one fixed truth (a fixed-truth fit
started near the truth keeps the split it started with); nothing about the PDE ``x_u dh/db =
dh/da_u`` (it holds for every ``phi(a^T x + b)`` expert and this witness does not use it; a witness
built on it would come from the paper's proof, which was not read); and a falling lower bound is
necessary for a polynomial upper rate, not sufficient.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from moestat.losses.voronoi_spec import voronoi_loss_from_spec
from moestat.model.mixing import MixingMeasure
from moestat.rates.catalogue import catalogue_file
from moestat.rates.config import RatesConfig
from moestat.rates.resolve import build_scenario
from moestat.theorems.judges import two_point
from moestat.theorems.judges.two_point import TwoPointCurve, kl_rate, kl_text, loglog_slope, maximise_bound

__all__ = ["expert_split_witness", "split_separation", "expert_split_curve", "entry_scenario", "arm_curves", "judge",
           "slope_interval", "flat_verdict", "rate_verdict", "NS", "T_MAX", "FLAT_RATIO", "SLOPE", "T_SLOPE", "BAND",
           "TAIL_N", "LINEAR_FILE", "FFN_FILE"]

#: The entry's linear arm (catalogue ``lse-ffn-vs-linear``) and the instrument's FFN control.  The control is
#: the entry's former FFN truth ``eta2 * sigmoid(eta1^T x)`` (``lse_sigmoid_over.toml``): along directions
#: that move ``eta1`` its bound falls, which is all the rule asks of a control, and along ``eta2`` it is flat
#: (the ``d2h/deta2^2 = 0`` for which the catalogue replaced it as the entry's fitted arm by
#: ``sigmoid(a^T x)``, ``lse_bare_sigmoid_over.toml``; ``moestat check`` fails it on ``expert_strong_second_order``).
LINEAR_FILE, FFN_FILE = "lse_linear_over.toml", "lse_sigmoid_over.toml"
#: Sample sizes of the bound (five decades, as the cosine router's instrument).
NS = np.logspace(2, 7, 11)
#: Largest half-distance of the split: the halves stay inside the box (``|eta| <= 10``) with room to spare.
T_MAX = 1.0
#: The rules of :mod:`moestat.theorems.judges.two_point` (the cosine routers' instrument): a flat bound may lose
#: at most ``FLAT_RATIO`` between the smallest and the largest n; a falling bound's slope ``SLOPE`` and
#: its maximising split's ``T_SLOPE`` (the split witness of a strongly identifiable direction:
#: kappa ~ t^4, Delta ~ t^2), each within ``BAND``, over the tail ``n >= TAIL_N``.
FLAT_RATIO, SLOPE, T_SLOPE, BAND, TAIL_N = (two_point.FLAT_RATIO, two_point.RATE_SLOPE, two_point.SPLIT_T_SLOPE,
                                           two_point.RATE_BAND, two_point.TAIL_N)


def expert_split_witness(truth: MixingMeasure, atom: int, ts: Sequence[float], direction: Sequence[float]) -> MixingMeasure:
    """The witness measures ``G'_t`` ``[T]``: atom ``atom`` split into two half-weight atoms at ``eta -+ t u``.

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched ``G`` with ``k`` atoms, ``eta [k, q]``.
    atom : int
        The split atom.
    ts : sequence of float, shape ``[T]``
        Half-distances of the split, each ``> 0``.
    direction : sequence of float, shape ``[q]``
        The direction ``u`` in the expert's parameter space (normalised here to unit length).

    Returns
    -------
    MixingMeasure
        Batched ``[T]`` with ``k + 1`` atoms: ``beta0 [T, k + 1]``, ``beta1 [T, k + 1, d]``,
        ``eta [T, k + 1, q]``.  Atom ``atom`` becomes the ``eta - t u`` half and the new atom
        ``atom + 1`` the ``eta + t u`` half, both with ``beta0_atom - log 2`` and ``beta1_atom``;
        the other atoms keep their order (a reference atom stays last).
    """
    G = truth.numpy()
    if G.batch_shape:
        raise ValueError("expert_split_witness needs an unbatched truth")
    if not 0 <= atom < G.n_atoms:
        raise ValueError(f"atom must be in 0..{G.n_atoms - 1}, got {atom}")
    u = np.asarray(direction, dtype=np.float64).reshape(-1)
    if u.shape != (G.eta_dim,) or not np.all(np.isfinite(u)) or not np.linalg.norm(u) > 0:
        raise ValueError(f"direction must be a finite nonzero vector of length {G.eta_dim}")
    u = u / np.linalg.norm(u)
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if ts.size == 0 or not np.all(np.isfinite(ts)) or np.any(ts <= 0):
        raise ValueError("every t must be finite and > 0")
    T = ts.size
    idx = list(range(atom + 1)) + [atom] + list(range(atom + 1, G.n_atoms))  # atom j twice, in place
    beta0 = G.beta0[idx].copy()
    beta0[[atom, atom + 1]] -= math.log(2.0)  # each half carries exp(beta0_j) / 2: the gate's total is kept
    eta = np.broadcast_to(G.eta[idx], (T, G.n_atoms + 1, G.eta_dim)).copy()
    eta[:, atom] -= ts[:, None] * u
    eta[:, atom + 1] += ts[:, None] * u
    return MixingMeasure(np.broadcast_to(beta0, (T, G.n_atoms + 1)).copy(),
                         np.broadcast_to(G.beta1[idx], (T, G.n_atoms + 1, G.dim)).copy(), eta)


def split_separation(spec, truth: MixingMeasure, alternatives: MixingMeasure) -> np.ndarray:
    """``min(D(G'_t, G), D(G, G'_t))`` ``[T]`` for the loss ``spec`` (a Voronoi loss is not symmetric)."""
    G = truth.numpy()
    T = alternatives.numpy().batch_shape[0]
    G_rep = MixingMeasure(np.broadcast_to(G.beta0, (T,) + G.beta0.shape).copy(),
                          np.broadcast_to(G.beta1, (T,) + G.beta1.shape).copy(),
                          np.broadcast_to(G.eta, (T,) + G.eta.shape).copy())
    return np.minimum(voronoi_loss_from_spec(spec, alternatives, G), voronoi_loss_from_spec(spec, G_rep, alternatives))


def expert_split_curve(scenario, direction: Sequence[float], ns: Sequence[float] = NS, ts: Sequence[float] | None = None, *,
                       atom: int = 0, n_mc: int = 20_000, seed: int = 0, chunk: int = 16) -> TwoPointCurve:
    """``LB(n)`` along :func:`expert_split_witness` for a regression scenario (module docstring).

    Parameters
    ----------
    scenario : Scenario
        A least-squares scenario (``Y = g_G(X) + N(0, nu)``) whose first loss is the one judged.
    direction : sequence of float, shape ``[q]``
        The split direction ``u`` in the expert's parameter space.
    ns : sequence of float, shape ``[N]``
    ts : sequence of float, shape ``[T]``, optional
        Default ``logspace(-6, log10(T_MAX), 121)``.
    atom : int
        The split atom (default 0, a non-reference atom of the catalogue's truths).
    n_mc : int
        Monte Carlo inputs for ``kappa`` (drawn from the scenario's input law).
    seed : int
        Root of the one Monte Carlo stream, ``SeedSequence(seed)``.
    chunk : int
        Alternatives evaluated at once (see :func:`moestat.theorems.judges.two_point.kl_rate`).

    Returns
    -------
    TwoPointCurve
        One "atom" row (``separation``, ``kappa``, ``kappa_se`` ``[1, T]``); ``info`` names the
        loss, the direction and the Monte Carlo size.
    """
    ns = np.asarray(ns, dtype=np.float64).reshape(-1)
    if ns.size == 0 or not np.all(ns >= 1):
        raise ValueError("ns must be a non-empty list of sample sizes >= 1")
    ts = np.logspace(-6, math.log10(T_MAX), 121) if ts is None else np.asarray(ts, dtype=np.float64).reshape(-1)
    G = scenario.truth.numpy()
    alt = expert_split_witness(G, atom, ts, direction)
    if not scenario.box.contains(alt):
        raise ValueError(f"the split leaves the parameter box: lower max(ts) = {ts.max():g}")
    spec = scenario.losses[0]
    sep = split_separation(spec, G, alt)
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    X = scenario.sample_x(int(n_mc), rng)
    kappa, se = kl_rate(scenario.model, G, alt, X, scenario.noise_var, chunk=chunk)

    point, idx = maximise_bound(sep, kappa, ns)
    low, _ = maximise_bound(sep, kappa + 2.0 * se, ns)
    high, _ = maximise_bound(sep, np.maximum(kappa - 2.0 * se, 0.0), ns)
    u = np.asarray(direction, np.float64) / np.linalg.norm(direction)
    return TwoPointCurve(
        ns=ns, ts=ts, atoms=[int(atom)], separation=sep[None], kappa=kappa[None], kappa_se=se[None], lower_bound=point,
        lower_bound_low=low, lower_bound_high=high, t_star=ts[idx], kl_at_star=ns * kappa[idx],
        info={"witness": "expert split (eta_j -+ t u, same gate, half weights)", "direction": u.tolist(),
              "loss": spec.name, "n_mc": int(n_mc), "seed": int(seed), "noise_var": float(scenario.noise_var),
              "scenario": scenario.name})


def entry_scenario(name: str):
    """The scenario of one of the entry's catalogue files (``LINEAR_FILE`` or ``FFN_FILE``)."""
    cfg = RatesConfig.from_dict({"scenario_file": str(catalogue_file(name)), "estimator": "lse"})
    return build_scenario(cfg.scenario_key(cfg.router[0]))


#: The split directions (expert parameters eta; linear: (a_0, a_1, b); FFN: (eta1_0, eta1_1, eta2)).
#: ``linear`` and ``ffn`` are the same construction on both arms (every coordinate moves); ``ffn_eta2``
#: moves only the coordinate in which the FFN expert is affine.
DIRECTIONS = {"linear": [1.0, 1.0, 1.0], "ffn": [1.0, 1.0, 1.0], "ffn_eta2": [0.0, 0.0, 1.0]}


def arm_curves(quick: bool = True, seed: int = 0, seeds: dict[str, int] | None = None, n_mc: int | None = None,
               n_t: int | None = None) -> dict[str, TwoPointCurve]:
    """The three curves of the entry, keyed as :data:`DIRECTIONS`: ``linear`` and ``ffn`` (the split along
    ``u = (1, 1, 1) / sqrt 3`` on each arm) and ``ffn_eta2`` (the FFN arm split along ``eta2`` alone).

    ``quick``: 5 000 Monte Carlo inputs and 61 witness points; otherwise 50 000 and 121 (``n_mc``
    and ``n_t`` override).  ``seeds`` (optional) gives each curve its own Monte Carlo root; default ``seed``.
    """
    n_mc = n_mc or (5_000 if quick else 50_000)
    n_t = n_t or (61 if quick else 121)
    ts = np.logspace(-6, math.log10(T_MAX), n_t)
    scen = {"linear": entry_scenario(LINEAR_FILE), "ffn": entry_scenario(FFN_FILE)}
    out = {}
    for key, u in DIRECTIONS.items():
        s = (seeds or {}).get(key, seed)
        out[key] = expert_split_curve(scen["linear" if key == "linear" else "ffn"], u, NS, ts, n_mc=n_mc, seed=s)
    return out


def slope_interval(curve: TwoPointCurve, values: str = "bound") -> tuple[np.ndarray, float, float, float]:
    """Tail log-log slope (``n >= TAIL_N``, interior maximiser) with its Monte Carlo interval
    (:func:`moestat.theorems.judges.two_point.tail_slope_interval`).

    Returns ``(tail mask [N], slope of the conservative bound, interval low, interval high)``;
    ``values="t_star"`` gives the slope of the maximising ``t`` instead (its interval collapses to it).
    """
    if values == "t_star":
        tail = curve.interior() & (curve.ns >= TAIL_N)
        s = loglog_slope(curve.ns, curve.t_star, tail)
        return tail, s, s, s
    return two_point.tail_slope_interval(curve)


def flat_verdict(curve: TwoPointCurve) -> tuple[bool, float]:
    """Rule (stated before any run): flat when the conservative bound at the largest ``n`` is at least
    :data:`FLAT_RATIO` times the bound at the smallest.  Returns ``(flat, ratio)``."""
    ratio = two_point.flat_ratio(curve)
    return bool(ratio >= FLAT_RATIO), ratio


def rate_verdict(curve: TwoPointCurve) -> tuple[bool, dict[str, Any]]:
    """Rule (stated before any run): the bound falls at the polynomial rate when, over ``n >= TAIL_N``
    with an interior maximiser (at least 3 points), the whole Monte Carlo interval of the bound's
    slope lies in ``SLOPE +- BAND`` and the slope of ``t*`` in ``T_SLOPE +- BAND``
    (:func:`moestat.theorems.judges.two_point.rate_verdict` with the split's ``T_SLOPE``)."""
    return two_point.rate_verdict(curve, T_SLOPE)


def judge(quick: bool = True) -> dict[str, dict[str, Any]]:
    """The two-point verdict of the entry's slow prediction (run ``linear``, loss ``D2_ls``).

    ``consistent`` when the linear arm's bound is flat (:func:`flat_verdict`) *and* the same
    construction on the FFN arm sees a rate (its split along the same ``u`` passes
    :func:`rate_verdict`); ``inconsistent`` when the linear bound is not flat; ``inconclusive`` when
    it is flat but the instrument sees no rate on the FFN arm.  The FFN arm's ``eta2`` split is reported
    beside it (``ffn_eta2``): flat too (``eta2 * sigmoid(eta1^T x)`` is affine in ``eta2``), so the FFN
    arm's ``D2_ls`` has no uniform rate over the over-specified class either; that does not decide
    the FFN arm's fixed-truth prediction, whose row is left to its slope (no ``ffn-sigmoid`` key).
    """
    c = arm_curves(quick)
    flat, r_lin = flat_verdict(c["linear"])
    falls, det = rate_verdict(c["ffn"])
    flat2, r_eta2 = flat_verdict(c["ffn_eta2"])
    cat = ("consistent" if falls else "inconclusive") if flat else "inconsistent"
    reason = (f"Le Cam bound on the minimax D2_ls risk along the over-specified split of an expert (eta -+ t u, same gate, "
              f"half weights): linear experts LB(1e7)/LB(1e2) = {r_lin:.3g} (flat if >= {FLAT_RATIO:g}; max KL per sample "
              f"{kl_text(np.abs(c['linear'].kappa).max())}); the FFN control (the former FFN truth eta2 * sigmoid(eta1^T x), "
              f"{FFN_FILE}) on the same construction falls, tail slope {det['slope']:.3f} "
              f"[{det['ci_low']:.3f}, {det['ci_high']:.3f}] (must lie in {SLOPE:g} +- {BAND:g}: the instrument sees a rate); "
              f"along eta2 the FFN bound is flat as well (ratio {r_eta2:.3g}: eta2 * sigmoid(eta1^T x) is affine in eta2)")
    return {"linear": {"category": cat, "reason": reason, "loss": "D2_ls", "ratio": r_lin,
                       "ffn": det, "ffn_eta2_ratio": r_eta2, "ffn_eta2_flat": flat2}}
