"""Le Cam two-point lower bounds along the witness sequence of Theorems 2 and 3 (Nguyen et al. (2024)).

Theorems 2 and 3 of Nguyen et al. (2024) are **minimax** statements: an infimum over estimators
and a supremum over truths.  A slope measured at one fixed truth cannot test them.  Their proof
(App. B.2, Lemma 2) uses Le Cam's two-point method along a witness sequence that rescales one
router vector along its own direction,

.. math::

    G'_t = G \\text{ with } \\beta_{1j} \\mapsto (1 + t)\\,\\beta_{1j}, \\qquad t > 0,

and this module evaluates that method numerically.

**The data side.**  For the Gaussian regression model (1), ``Y = g_G(X) + eps`` with
``eps ~ N(0, nu)`` and ``X ~ mu``, the Kullback-Leibler divergence between the laws of ``n``
i.i.d. pairs is exactly

.. math::

    \\mathrm{KL}(P_G^{\\otimes n} \\,\\|\\, P_{G'}^{\\otimes n}) = n\\,\\kappa(G, G'), \\qquad
    \\kappa(G, G') = \\frac{\\mathbb{E}_{X\\sim\\mu}\\big[(g_G(X) - g_{G'}(X))^2\\big]}{2\\nu},

(the ``X`` marginals are equal and cancel; Lemma 2 uses the same identity).  ``kappa`` is computed
by Monte Carlo over ``m`` inputs drawn from ``mu``, the same inputs for every ``t`` (common random
numbers), with its standard error.  For the vanilla cosine router PDE (4) makes ``g`` homogeneous
of degree 0 in ``beta1``, so ``kappa(G, G'_t) = 0`` for every ``t``: the computed value is round-off.
For the perturbed router (eq. 9) ``beta1 -> beta1 / (||beta1|| + tau1)`` is injective, so
``kappa > 0`` for ``t != 0``.

**The bound.**  For any estimator ``hat G`` and a loss ``D`` with ``D(hat G, G) + D(hat G, G')
>= D(G, G') / C_D``,

.. math::

    \\inf_{\\hat G}\\ \\max_{H \\in \\{G, G'\\}} \\mathbb{E}_H\\, D(\\hat G, H)
    \\;\\ge\\; \\frac{D(G, G')}{2\\,C_D}\\,\\big(1 - \\mathrm{TV}(P_G^{\\otimes n}, P_{G'}^{\\otimes n})\\big),
    \\qquad 1 - \\mathrm{TV} \\ge \\max\\Big(1 - \\sqrt{\\mathrm{KL}/2},\\ \\tfrac12 e^{-\\mathrm{KL}}\\Big)

(Pinsker; Bretagnolle-Huber).  This module reports ``LB(n) = max_t D(G'_t, G) / 2 * A(n kappa(t))``
with ``A`` the right-hand affinity bound and ``D(G'_t, G)`` replaced by the smaller of the two
orders of the arguments (a Voronoi loss is not symmetric), i.e. the bound **for** ``C_D = 1``.  For the pairs built
here (one atom moved, equal masses, singleton Voronoi cells) ``C_D = 1`` holds for ``D_3`` and
``D_{1,1}`` whenever the estimate's Voronoi cells agree under ``G`` and ``G'`` and ``||t beta1|| <= 2``
(``M t b + 2 |M - w| >= w t b`` for every cell mass ``M``); for ``D_{1,r}``, ``r > 1``, ``C_D =
2^{r-1}``.  ``C_D`` is a constant: it moves the curve, not its dependence on ``n``.

**What it proves.**  A lower bound on the minimax risk over the two-point class ``{G, G'_t}``
(hence over any class containing it, e.g. the theorem's ``E_{k*}(Theta)``): for the vanilla router
the bound does not decrease with ``n`` at all -- the radius of ``beta1`` is not identified, so no
estimator has any rate for the paper's loss uniformly over a class containing a radial segment
(stronger than Theorem 2's ``n^{-1/2}``); for the perturbed router it falls like ``n^{-1/2}``,
matching the upper rate ``(log n / n)^{1/2}`` of Theorem 6 up to the log factor.
**What it does not prove.**  Nothing about one estimator at one fixed truth (an estimator that
happens to output the true radius has zero radial error there); nothing about the directional
parameters or the experts, whose slow rates in Theorems 2 and 3 come from the Taylor witness of
eq. (26) and are not measured here; and it is a lower bound only -- its size depends on the
length ``t_max`` of the witness segment (the compact ``Theta``), which the vanilla flat value
inherits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from moestat.estimators.starts import near_truth_init
from moestat.losses.cell_errors import beta1_decomposition
from moestat.losses.voronoi import voronoi_loss
from moestat.model.mixing import MixingMeasure
from moestat.rates.resolve import build_estimator
from moestat.rates.sweep import replicate_streams

__all__ = [
    "radial_witness",
    "split_witness",
    "kl_rate",
    "affinity_lower_bound",
    "maximise_bound",
    "TwoPointCurve",
    "two_point_curve",
    "loglog_slope",
    "radial_mechanism",
    "FLAT_RATIO",
    "RATE_SLOPE",
    "RATE_BAND",
    "TAIL_N",
    "SPLIT_T_SLOPE",
    "SPLIT_T_MAX",
    "flat_ratio",
    "tail_slope_interval",
    "rate_verdict",
    "router_pair_verdict",
]


def _witness_truth(truth: MixingMeasure, atom: int, who: str) -> MixingMeasure:
    """The unbatched numpy truth a witness moves, after checking ``atom`` has a direction to move along."""
    G = truth.numpy()
    if G.batch_shape:
        raise ValueError(f"{who} needs an unbatched truth")
    if not 0 <= atom < G.n_atoms:
        raise ValueError(f"atom must be in 0..{G.n_atoms - 1}, got {atom}")
    if not np.linalg.norm(G.beta1[atom]) > 0:
        raise ValueError(f"atom {atom} has beta1 = 0: there is no direction to rescale along")
    return G


def alternative_chunks(alternatives: MixingMeasure, chunk: int):
    """``(a, b, sub)`` over a batched ``[T]`` measure in slices of at most ``chunk`` alternatives
    (``sub`` = alternatives ``a:b``), so that a ``[chunk, m]`` evaluation bounds the memory."""
    alt = alternatives.numpy()
    T = alt.batch_shape[0]
    for a in range(0, T, chunk):
        b = min(a + chunk, T)
        yield a, b, MixingMeasure(alt.beta0[a:b], alt.beta1[a:b], alt.eta[a:b])


def radial_witness(truth: MixingMeasure, atom: int, ts: Sequence[float]) -> MixingMeasure:
    """The witness measures ``G'_t``: atom ``atom``'s ``beta1`` rescaled by ``1 + t``.

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched measure ``G`` with ``k`` atoms, ``beta1 [k, d]``.
    atom : int
        Index of the atom whose router vector is rescaled; it must have ``beta1 != 0`` (the
        reference atom of (A.3) has no direction to rescale along).
    ts : sequence of float, shape ``[T]``
        Relative changes of the radius, each ``> -1``.

    Returns
    -------
    MixingMeasure
        Batched ``[T]``: ``beta0 [T, k]``, ``beta1 [T, k, d]``, ``eta [T, k, q]``; only
        ``beta1[:, atom]`` differs from ``G``, equal to ``(1 + t) beta1_atom``.
    """
    G = _witness_truth(truth, atom, "radial_witness")
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(ts)) or np.any(ts <= -1):
        raise ValueError("every t must be finite and > -1")
    T = ts.shape[0]
    beta1 = np.broadcast_to(G.beta1, (T,) + G.beta1.shape).copy()
    beta1[:, atom] *= (1.0 + ts)[:, None]
    return MixingMeasure(np.broadcast_to(G.beta0, (T,) + G.beta0.shape).copy(), beta1,
                         np.broadcast_to(G.eta, (T,) + G.eta.shape).copy())


def split_witness(truth: MixingMeasure, atom: int, ts: Sequence[float]) -> MixingMeasure:
    """The over-specified witness ``G'_t``: atom ``atom`` split into two half-mass atoms at radii ``1 -+ t``.

    Theorem 3's proof (Nguyen et al. (2024), App. B.3) puts two atoms of a ``k* + 1``-atom measure
    on one true atom, with the atom's weight split in half, and applies the radial rescaling of
    App. B.2 to them.  This builds the symmetric version

    .. math::

        G'_t = \\sum_{i \\ne j} e^{\\beta_{0i}} \\delta_{(\\beta_{1i}, \\eta_i)}
              + \\tfrac12 e^{\\beta_{0j}} \\delta_{((1-t)\\beta_{1j}, \\eta_j)}
              + \\tfrac12 e^{\\beta_{0j}} \\delta_{((1+t)\\beta_{1j}, \\eta_j)},
        \\qquad 0 < t < 1,

    i.e. ``beta0 -> beta0 - log 2`` for both halves.  Under a dense gate the two halves have the
    same expert, and under the vanilla router (PDE (4)) the same score, so their softmax weights
    add up to the original atom's: ``g_{G'_t} = g_G`` exactly and ``KL = 0``.  Under the perturbed
    router the two scores differ, but symmetrically: the first-order terms of ``g_{G'_t} - g_G`` in
    ``t`` cancel, so ``kappa(t) = a t^4 + O(t^5)`` -- the merging pair behind the ``n^{-1/4}`` rate of
    atoms that share a Voronoi cell (Theorem 5).

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched ``G`` with ``k`` atoms, ``beta1 [k, d]``.
    atom : int
        The split atom; it must have ``beta1 != 0``.
    ts : sequence of float, shape ``[T]``
        Half-distances of the split, each in ``(0, 1)`` (radius ``1 - t`` stays positive).

    Returns
    -------
    MixingMeasure
        Batched ``[T]`` with ``k + 1`` atoms: ``beta0 [T, k + 1]``, ``beta1 [T, k + 1, d]``,
        ``eta [T, k + 1, q]``.  Atom ``atom`` becomes the ``(1 - t)`` half and the new last atom
        is the ``(1 + t)`` half; the other atoms keep their index.
    """
    G = _witness_truth(truth, atom, "split_witness")
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(ts)) or np.any(ts <= 0) or np.any(ts >= 1):
        raise ValueError("every t must be in (0, 1)")
    T = ts.shape[0]
    beta0 = np.concatenate([G.beta0, G.beta0[atom:atom + 1]])
    beta0[[atom, -1]] -= math.log(2.0)  # each half carries exp(beta0_j) / 2
    beta0 = np.broadcast_to(beta0, (T,) + beta0.shape).copy()
    beta1 = np.broadcast_to(np.concatenate([G.beta1, G.beta1[atom:atom + 1]]), (T, G.n_atoms + 1, G.beta1.shape[-1])).copy()
    beta1[:, atom] *= (1.0 - ts)[:, None]
    beta1[:, -1] *= (1.0 + ts)[:, None]
    eta = np.broadcast_to(np.concatenate([G.eta, G.eta[atom:atom + 1]]), (T, G.n_atoms + 1, G.eta.shape[-1])).copy()
    return MixingMeasure(beta0, beta1, eta)


def kl_rate(model, truth: MixingMeasure, alternatives: MixingMeasure, X: np.ndarray, noise_var: float,
            chunk: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample KL ``kappa = E_X[(g_G(X) - g_G'(X))^2] / (2 nu)`` by Monte Carlo, with its standard error.

    Parameters
    ----------
    model : MoEModel
        Gate and experts of the regression function (e.g. ``scenario.model``).
    truth : MixingMeasure
        Unbatched ``G``.
    alternatives : MixingMeasure
        Batched ``[T]`` alternatives ``G'``.
    X : ndarray, shape ``[m, d]``
        Monte Carlo inputs, drawn from ``mu``; the same for every alternative (common random
        numbers, so differences between alternatives carry no Monte Carlo noise of their own).
    noise_var : float
        ``nu`` of eq. (1).
    chunk : int
        Alternatives evaluated at once (memory ``chunk * m * k`` float64 values).

    Returns
    -------
    kappa, se : ndarray, shape ``[T]``
        The Monte Carlo mean and its standard error ``sd / sqrt(m)``; ``KL`` of ``n`` samples is
        ``n * kappa`` exactly (the ``X`` marginals cancel).
    """
    if not (math.isfinite(noise_var) and noise_var > 0):
        raise ValueError(f"noise_var must be positive, got {noise_var!r}")
    X = np.asarray(X, dtype=np.float64)
    m = X.shape[0]
    if m < 2:
        raise ValueError("need at least 2 Monte Carlo inputs for a standard error")
    Xt = torch.as_tensor(X)
    f0 = model.predict(Xt, truth.numpy())  # [m]
    T = alternatives.numpy().batch_shape[0]
    kappa, se = np.empty(T), np.empty(T)
    for a, b, sub in alternative_chunks(alternatives, chunk):
        sq = ((model.predict(Xt, sub) - f0) ** 2).numpy()  # [c, m]
        kappa[a:b] = sq.mean(axis=1) / (2.0 * noise_var)
        se[a:b] = sq.std(axis=1, ddof=1) / math.sqrt(m) / (2.0 * noise_var)
    return kappa, se


def affinity_lower_bound(kl: np.ndarray | float) -> np.ndarray:
    """A lower bound on ``1 - TV`` from ``KL``: ``max(1 - sqrt(KL / 2), exp(-KL) / 2)``, clipped at 0.

    Pinsker (``TV <= sqrt(KL / 2)``) is the better bound for small ``KL``, Bretagnolle-Huber
    (``1 - TV >= exp(-KL) / 2``) for large; both are valid, so is their maximum.  The result is
    1 at ``KL = 0`` and non-increasing in ``KL``.

    Parameters
    ----------
    kl : float or ndarray, any shape
        Non-negative divergences (tiny negative round-off is treated as 0).

    Returns
    -------
    ndarray
        Same shape as ``kl``, values in ``(0, 1]``.
    """
    kl = np.maximum(np.asarray(kl, dtype=np.float64), 0.0)
    return np.maximum(np.maximum(1.0 - np.sqrt(kl / 2.0), 0.0), 0.5 * np.exp(-kl))


@dataclass
class TwoPointCurve:
    """The two-point lower bound ``LB(n)`` of one scenario along the radial witness.

    Attributes
    ----------
    ns : ndarray, shape ``[N]``
        Sample sizes.
    ts : ndarray, shape ``[T]``
        Witness grid (relative radius changes).
    atoms : list of int
        Atoms whose radius is varied (the bound maximises over atom and ``t``).
    separation : ndarray, shape ``[A, T]``
        ``min(D(G'_t, G), D(G, G'_t))`` for each atom and ``t``.
    kappa, kappa_se : ndarray, shape ``[A, T]``
        Per-sample KL and its Monte Carlo standard error.
    lower_bound : ndarray, shape ``[N]``
        ``LB(n)`` with the Monte Carlo point estimate of ``kappa``.
    lower_bound_low, lower_bound_high : ndarray, shape ``[N]``
        The same with ``kappa + 2 se`` (conservative: holds whenever the true ``kappa`` is below
        that) and ``max(kappa - 2 se, 0)``; ``LB`` is non-increasing in ``kappa``.
    t_star : ndarray, shape ``[N]``
        The maximising ``t`` (at the end of the grid: the bound saturates on the segment).
    kl_at_star : ndarray, shape ``[N]``
        ``n kappa(t_star)``.
    info : dict
        Loss, router, Monte Carlo size and seed.
    """

    ns: np.ndarray
    ts: np.ndarray
    atoms: list[int]
    separation: np.ndarray
    kappa: np.ndarray
    kappa_se: np.ndarray
    lower_bound: np.ndarray
    lower_bound_low: np.ndarray
    lower_bound_high: np.ndarray
    t_star: np.ndarray
    kl_at_star: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def interior(self) -> np.ndarray:
        """``[N]`` bool: the maximiser is strictly inside the witness grid (not saturated at an end)."""
        return (self.t_star > self.ts.min()) & (self.t_star < self.ts.max())

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable record (lists of floats)."""
        out = {k: np.asarray(getattr(self, k)).tolist() for k in (
            "ns", "ts", "separation", "kappa", "kappa_se", "lower_bound", "lower_bound_low", "lower_bound_high",
            "t_star", "kl_at_star")}
        out["atoms"] = list(self.atoms)
        out["interior"] = self.interior().tolist()
        out["info"] = dict(self.info)
        return out


def maximise_bound(sep: np.ndarray, kappa: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Le Cam's bound at each ``n``: the ``max`` over the flattened witness grid of ``sep / 2 * A(n kappa)``
    (``sep``, ``kappa`` of one shape, e.g. ``[T]`` or ``[A, T]``; ``ns [N]``): values and argmax, ``[N]``."""
    s, k = sep.reshape(-1), kappa.reshape(-1)
    lb = 0.5 * s[None, :] * affinity_lower_bound(ns[:, None] * k[None, :])  # [N, A*T]
    idx = lb.argmax(axis=1)
    return lb[np.arange(len(ns)), idx], idx


def two_point_curve(scenario, ns: Sequence[int], ts: Sequence[float] | None = None, *, atoms: Sequence[int] | None = None,
                    loss: str | None = None, r: float = 1.0, n_mc: int = 100_000, seed: int = 0,
                    chunk: int = 16, witness: str = "radial") -> TwoPointCurve:
    """Le Cam's two-point lower bound on the minimax risk of the paper's loss, as a function of ``n``.

    Parameters
    ----------
    scenario : Scenario
        Supplies ``G`` (``scenario.truth``), the model, ``nu`` and the input law ``mu``.
    ns : sequence of int, shape ``[N]``
        Sample sizes.
    ts : sequence of float, shape ``[T]``, optional
        Witness grid; default ``logspace(-6, 0, 241)`` (radius up to doubled) for the radial
        witness and ``logspace(-6, log10(0.5), 241)`` for the split witness.  The pairs must lie
        in the theorem's compact class: ``(1 + max t) beta1`` is checked against ``scenario.box``.
    atoms : sequence of int, optional
        Atoms whose radius is varied; default every atom with ``beta1 != 0``.
    loss : {"D1", "D2", "D3"}, optional
        Voronoi loss (:func:`moestat.losses.voronoi.voronoi_loss`); default ``D1`` (``D_{1,r}``,
        Theorems 2 and 3) for the cosine router, otherwise ``D3`` (eq. 16, Theorem 6) for the
        radial witness and ``D2`` (eq. 13, Theorem 5) for the split witness.
    r : float
        The ``r`` of ``D_{1,r}``.
    n_mc : int
        Monte Carlo inputs for ``kappa``.
    seed : int
        Root of the one Monte Carlo stream, ``SeedSequence(seed)``.
    chunk : int
        See :func:`kl_rate`.
    witness : {"radial", "split"}
        ``radial``: :func:`radial_witness`, the exact-specified pair of Theorem 2 (App. B.2; both
        measures have ``k*`` atoms).  ``split``: :func:`split_witness`, the over-specified pair of
        Theorem 3 (App. B.3; ``G'_t`` has ``k* + 1`` atoms, two of them sharing atom ``j``'s cell).

    Returns
    -------
    TwoPointCurve

    Examples
    --------
    >>> from moestat.data.synthetic import make_scenario
    >>> c = two_point_curve(make_scenario("cosine", "exact"), [100, 10_000], n_mc=2000)
    >>> bool(c.lower_bound[1] == c.lower_bound[0])   # vanilla: the pair is never distinguished
    True
    """
    ns = np.asarray(ns, dtype=np.float64).reshape(-1)
    if ns.size == 0 or not np.all(ns >= 1):
        raise ValueError("ns must be a non-empty list of sample sizes >= 1")
    if witness not in ("radial", "split"):
        raise ValueError(f"witness must be 'radial' or 'split', got {witness!r}")
    if ts is None:
        ts = np.logspace(-6, 0, 241) if witness == "radial" else np.logspace(-6, math.log10(0.5), 241)
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if ts.size == 0 or not np.all(ts > 0):
        raise ValueError("the witness grid ts must be non-empty and positive")
    G = scenario.truth.numpy()
    if atoms is None:
        atoms = [j for j in range(G.n_atoms) if np.linalg.norm(G.beta1[j]) > 0]
    atoms = [int(a) for a in atoms]
    if not atoms:
        raise ValueError("no atom with beta1 != 0: the radial witness needs one")
    router = scenario.router
    loss = loss or ("D1" if router == "cosine" else ("D3" if witness == "radial" else "D2"))
    build = radial_witness if witness == "radial" else split_witness
    K = scenario.model.gate.k_active
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    X = scenario.sample_x(int(n_mc), rng)
    seps, kap, kse = [], [], []
    for a in atoms:
        alt = build(G, a, ts)
        if not scenario.box.contains(alt):
            raise ValueError(f"the witness leaves the parameter box at atom {a}: lower max(ts) = {ts.max():g}")
        # D is not symmetric in general (cells and weights come from its first argument): keep the smaller
        G_rep = radial_witness(G, a, np.zeros(ts.size))  # G itself, batched [T] to pair with alt
        seps.append(np.minimum(voronoi_loss(alt, G, loss, K, r=r), voronoi_loss(G_rep, alt, loss, K, r=r)))
        k_, s_ = kl_rate(scenario.model, G, alt, X, scenario.noise_var, chunk=chunk)
        kap.append(k_)
        kse.append(s_)
    sep, kappa, kappa_se = np.stack(seps), np.stack(kap), np.stack(kse)
    lb, idx = maximise_bound(sep, kappa, ns)
    lb_low, _ = maximise_bound(sep, kappa + 2.0 * kappa_se, ns)
    lb_high, _ = maximise_bound(sep, np.maximum(kappa - 2.0 * kappa_se, 0.0), ns)
    t_star = np.tile(ts, len(atoms))[idx]
    return TwoPointCurve(
        ns=ns, ts=ts, atoms=atoms, separation=sep, kappa=kappa, kappa_se=kappa_se, lower_bound=lb,
        lower_bound_low=lb_low, lower_bound_high=lb_high, t_star=t_star, kl_at_star=ns * kappa.reshape(-1)[idx],
        info={"router": router, "loss": loss, "witness": witness, "r": float(r), "n_mc": int(n_mc), "seed": int(seed),
              "noise_var": float(scenario.noise_var), "scenario": scenario.name, "k_active": K},
    )


def loglog_slope(ns: np.ndarray, values: np.ndarray, mask: np.ndarray | None = None) -> float:
    """OLS slope of ``log values`` on ``log ns`` over ``mask`` (all points by default); NaN under 2 points.

    Parameters
    ----------
    ns, values : ndarray, shape ``[N]``
        Positive sample sizes and values.
    mask : ndarray of bool, shape ``[N]``, optional
        Points to use.
    """
    ns, values = np.asarray(ns, np.float64), np.asarray(values, np.float64)
    keep = (values > 0) & np.isfinite(values) if mask is None else (np.asarray(mask, bool) & (values > 0) & np.isfinite(values))
    if keep.sum() < 2:
        return float("nan")
    x, y = np.log(ns[keep]), np.log(values[keep])
    return float(np.polyfit(x, y, 1)[0])


def radial_mechanism(scenario, n: int, reps: int, *, seed: int = 0, init_scale: float = 0.05, estimator: str = "lse",
                     max_iter: int = 200) -> dict[str, np.ndarray]:
    """Radial and directional beta1 errors of the start and of the fit, paired per replicate.

    Each replicate ``r`` uses the rates engine's streams (:func:`moestat.rates.sweep.replicate_streams`:
    data from ``spawn_key=(n, r, 0)``, the near-truth start ``truth + N(0, init_scale^2)`` from
    ``(n, r, 1)``), so the data and starts are those of ``moestat rates`` with the same seed; the
    replicates are fitted in one batched call of ``estimator`` (the estimator's own stream is the
    engine's for a unit that starts at replicate 0, i.e. ``chunk = reps``).

    Parameters
    ----------
    scenario : Scenario
        A built-in scenario (e.g. ``make_scenario("cosine", "exact")``).
    n, reps : int
        Sample size and number of replicates.
    seed : int
        Root seed of the engine's streams.
    init_scale : float
        Start noise (the engine's ``init_scale``; its default is 0.05).
    estimator : str
        Key of the rates engine's estimator registry.
    max_iter : int
        Iteration budget.

    Returns
    -------
    dict of str to ndarray
        ``start_radial``, ``fit_radial``, ``start_direction``, ``fit_direction``,
        ``start_directional_part``, ``fit_directional_part``, ``start_error``, ``fit_error``: each
        ``[reps, k]`` from :func:`moestat.losses.cell_errors.beta1_decomposition` (``radial``
        signed); ``start_loss``/``fit_loss`` (the setting's Voronoi loss, ``[reps]``) and
        ``start_loss_true_radius``/``fit_loss_true_radius`` (the same after rescaling every
        ``beta1_i`` to the norm of its true atom); ``converged [reps]``.
    """

    for name, v in (("n", n), ("reps", reps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not (math.isfinite(init_scale) and init_scale >= 0):
        raise ValueError(f"init_scale must be a finite number >= 0, got {init_scale!r}")
    Xs, Ys, starts = [], [], []
    for r in range(int(reps)):
        data_ss, init_ss = replicate_streams(seed, n, r)
        X, Y = scenario.sample(n, np.random.default_rng(data_ss))
        Xs.append(X)
        Ys.append(Y)
        starts.append(near_truth_init(scenario.truth, scenario.k_fit, init_scale, np.random.default_rng(init_ss), n=n))
    G0 = MixingMeasure.stack(starts)
    est_ss = np.random.SeedSequence(seed, spawn_key=(int(n), 0, 2))  # the engine's estimator stream for a unit at replicate 0
    est = build_estimator(estimator, scenario, max_iter, int(est_ss.generate_state(1)[0]), "cpu")
    est.fit(np.stack(Xs), np.stack(Ys), init=G0)
    out: dict[str, np.ndarray] = {"converged": np.asarray(est.converged_, bool)}
    name = "D3" if scenario.setting == "exact" else "D2"  # D3 = D_{1,1} in the exact setting
    K = scenario.model.gate.k_active
    for tag, G in (("start", G0.numpy()), ("fit", est.params_.numpy())):
        dec = beta1_decomposition(G, scenario.truth)
        for key in ("radial", "direction", "directional_part", "error"):
            out[f"{tag}_{key}"] = dec[key]
        out[f"{tag}_loss"] = voronoi_loss(G, scenario.truth, name, K)
        # the same measure with every radius set to its true atom's: what is left of the loss
        # once the (for the vanilla router unidentified) radial part is removed
        true_norm = np.linalg.norm(scenario.truth.beta1, axis=-1)[dec["cell"]]  # [reps, k]
        own_norm = np.linalg.norm(G.beta1, axis=-1)
        fac = np.divide(true_norm, own_norm, out=np.ones_like(own_norm), where=own_norm > 0)
        out[f"{tag}_loss_true_radius"] = voronoi_loss(MixingMeasure(G.beta0, G.beta1 * fac[..., None], G.eta),
                                                      scenario.truth, name, K)
    return out


# ---------------------------------------------------------------------------------------------
# the verdict of a pair of routers on one construction (the catalogue's cosine entries)
# ---------------------------------------------------------------------------------------------
#: A flat bound may lose at most this factor between the smallest and the largest n (the rule of
#: ``lecam_vanilla_flat``, of the expert split and of the temperature entry).
FLAT_RATIO = 0.5
#: Predicted slope of a falling bound (Theorems 5 and 6: the upper rates (log n / n)^{1/2}) and the
#: half-width of the accepted band (the rule of ``lecam_perturbed_rate``).
RATE_SLOPE, RATE_BAND = -0.5, 0.1
#: The tail used for slopes: n >= TAIL_N, where the maximising t is inside the witness grid.
TAIL_N = 1e5
#: Predicted slope of the maximising split t*(n) of the split witness (Theorem 5, atoms sharing a cell).
SPLIT_T_SLOPE = -0.25
#: Largest half-distance of the split witness (radius 1 - t must stay positive).
SPLIT_T_MAX = 0.5
#: A KL rate below this is float64 round-off of an exact zero (PDE (4): the pair's regression functions
#: agree to the last digits, so the squared difference is of order 1e-30 and its digits are the
#: machine's); reported as a bound, not as digits that differ from one BLAS build to another.
KL_ROUNDOFF = 1e-20


def kl_text(kappa: float) -> str:
    """A KL rate for a report: two significant digits, or ``"< 1e-20 (round-off)"`` below :data:`KL_ROUNDOFF`."""
    kappa = float(kappa)
    return f"< {KL_ROUNDOFF:.0e} (round-off)" if abs(kappa) < KL_ROUNDOFF else f"{kappa:.2g}"


def flat_ratio(curve: TwoPointCurve) -> float:
    """The conservative bound (``kappa + 2 SE``) at the largest ``n`` over the bound at the smallest
    (1 for a flat bound, about ``(n_max / n_min)^{-1/2}`` for one that falls at ``n^{-1/2}``)."""
    return float(curve.lower_bound_low[-1] / curve.lower_bound[0])


def tail_slope_interval(curve: TwoPointCurve) -> tuple[np.ndarray, float, float, float]:
    """Tail log-log slope of the bound (``n >= TAIL_N``, interior maximiser) with its Monte Carlo interval.

    Returns ``(tail mask [N], slope of the conservative bound, interval low, interval high)``; the
    interval spans the slopes of the bounds with ``kappa -+ 2 SE`` (NaN with fewer than 2 points).
    """
    tail = curve.interior() & (curve.ns >= TAIL_N)
    s_lo = loglog_slope(curve.ns, curve.lower_bound_low, tail)
    s_hi = loglog_slope(curve.ns, curve.lower_bound_high, tail)
    return tail, s_lo, min(s_lo, s_hi), max(s_lo, s_hi)


def rate_verdict(curve: TwoPointCurve, t_slope: float | None = None) -> tuple[bool, dict[str, Any]]:
    """Whether the bound falls at the polynomial rate :data:`RATE_SLOPE` (rule stated before any run).

    Over ``n >= TAIL_N`` with an interior maximiser (at least 3 points), the whole Monte Carlo
    interval of the bound's log-log slope (the slopes of the bounds with ``kappa -+ 2 SE``) lies in
    ``RATE_SLOPE +- RATE_BAND``; with ``t_slope`` given, the slope of the maximiser ``t*(n)`` over
    the same points lies in ``t_slope +- RATE_BAND`` too (the split witness: ``-1/4``).

    Returns
    -------
    ok : bool
    details : dict
        ``slope`` (conservative bound), ``ci_low``, ``ci_high``, ``t_star_slope`` (NaN unless
        asked), ``tail_points``.
    """
    tail, s_lo, lo, hi = tail_slope_interval(curve)
    s_t = loglog_slope(curve.ns, curve.t_star, tail) if t_slope is not None else float("nan")
    ok = bool(tail.sum() >= 3 and np.isfinite(lo) and np.isfinite(hi)
              and RATE_SLOPE - RATE_BAND <= lo and hi <= RATE_SLOPE + RATE_BAND
              and (t_slope is None or (np.isfinite(s_t) and abs(s_t - t_slope) <= RATE_BAND)))
    return ok, {"slope": s_lo, "ci_low": lo, "ci_high": hi, "t_star_slope": s_t, "tail_points": int(tail.sum())}


def router_pair_verdict(scenarios: dict, witness: str, loss: str, quick: bool = True, seed: int = 0) -> dict[str, Any]:
    """The two-point verdict on the vanilla router's "no polynomial rate", checked against the perturbed router.

    Both routers' bounds are computed by :func:`two_point_curve` on the same construction (witness,
    loss, Monte Carlo inputs, grid): the vanilla one must be flat (:func:`flat_ratio` at least
    :data:`FLAT_RATIO`), the perturbed one must fall at the polynomial rate (:func:`rate_verdict`;
    with the split witness its maximiser also at :data:`SPLIT_T_SLOPE`), which shows that the
    instrument can see a rate where there is one.

    Parameters
    ----------
    scenarios : dict
        ``{"cosine": Scenario, "perturbed": Scenario}``, the same truth under the two routers.
    witness : {"radial", "split"}
        The exact-specified pair of Theorem 2 (App. B.2) or the over-specified one of Theorem 3 (App. B.3).
    loss : {"D1", "D2", "D3"}
        The Voronoi loss of the judged row (the rates pipeline's ``voronoi``: ``D3`` exact, ``D2`` over).
    quick : bool
        5 000 Monte Carlo inputs and 61 witness points (``--quick`` runs, under a second); otherwise
        20 000 and 121 (a few seconds).
    seed : int
        Root of the Monte Carlo stream, ``SeedSequence(seed)`` (the same inputs for both routers).

    Returns
    -------
    dict
        ``category``: ``consistent`` (vanilla flat and perturbed falling), ``inconsistent`` (the
        vanilla bound falls: the pair is told apart, against PDE (4)), ``inconclusive`` (flat, but
        the instrument sees no rate for the perturbed router); ``reason`` (what it proves and what
        not), ``ratio``, ``perturbed`` (:func:`rate_verdict`'s details), ``curves`` (per router: the
        bound, its conservative version and ``t*`` at each ``n``, the largest ``kappa``).
    """
    n_mc, n_t = (5_000, 61) if quick else (20_000, 121)
    ts = np.logspace(-6, 0, n_t) if witness == "radial" else np.logspace(-6, math.log10(SPLIT_T_MAX), n_t)
    ns = np.logspace(2, 7, 11)
    c = {r: two_point_curve(scenarios[r], ns, ts, loss=loss, n_mc=n_mc, seed=seed, witness=witness)
         for r in ("cosine", "perturbed")}
    ratio = flat_ratio(c["cosine"])
    falls, det = rate_verdict(c["perturbed"], SPLIT_T_SLOPE if witness == "split" else None)
    flat = ratio >= FLAT_RATIO
    cat = ("consistent" if falls else "inconclusive") if flat else "inconsistent"
    pair = ("beta1_j -> (1 + t) beta1_j (App. B.2)" if witness == "radial"
            else "atom j split into two half-mass atoms at radii 1 -+ t (App. B.3)")
    t_part = (f", t* slope {det['t_star_slope']:.3f} (must lie in {SPLIT_T_SLOPE:g} +- {RATE_BAND:g})"
              if witness == "split" else "")
    van, per = c["cosine"], c["perturbed"]
    reason = (f"Le Cam bound on the minimax {loss} risk over the pair G, G'_t with {pair}, {n_mc} Monte Carlo inputs, "
              f"n = 1e2..1e7: the vanilla router's LB {van.lower_bound[0]:.3g} -> {van.lower_bound_low[-1]:.3g}, "
              f"ratio {ratio:.3g} (flat if >= {FLAT_RATIO:g}; max KL per sample {kl_text(np.abs(van.kappa).max())}: PDE (4)); "
              f"the perturbed router's on the same construction {per.lower_bound[0]:.3g} -> {per.lower_bound_low[-1]:.3g}, "
              f"tail slope {det['slope']:.3f} [{det['ci_low']:.3f}, {det['ci_high']:.3f}] (must lie in {RATE_SLOPE:g} +- "
              f"{RATE_BAND:g}: the instrument sees a rate){t_part}. It proves a minimax lower bound along the proof's "
              f"witness (no estimator's worst-case {loss} over the pair falls with n), not the rate of the fixed-truth fit "
              f"(its slope is reported beside) nor anything about the directional or expert parameters")
    return {"category": cat, "reason": reason, "two_point_loss": loss, "ratio": ratio, "flat": bool(flat), "perturbed": det,
            "perturbed_falls": bool(falls), "curves": {r: _summary(v) for r, v in c.items()}}


def _summary(curve: TwoPointCurve) -> dict[str, Any]:
    """The numbers of a curve that a verdict's report keeps (JSON-ready; not the ``[A, T]`` grids)."""
    return {"n": curve.ns.tolist(), "lower_bound": curve.lower_bound.tolist(),
            "lower_bound_conservative": curve.lower_bound_low.tolist(), "t_star": curve.t_star.tolist(),
            "interior": curve.interior().tolist(), "kappa_max": float(np.abs(curve.kappa).max()),
            "kappa_se_max": float(curve.kappa_se.max()), "n_t": int(curve.ts.size), **curve.info}
