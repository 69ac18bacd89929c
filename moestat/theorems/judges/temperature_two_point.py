"""Le Cam's two points along the temperature's scale ray (Nguyen, Akbarian & Ho (2024); the instrument
of :mod:`moestat.theorems.judges.two_point` for a likelihood model).

The slow rate of the dense-to-sparse gate with a fitted temperature (:mod:`moestat.model.temperature_gate`)
is a statement about every estimator, so it is judged the way such statements are proved: a pair
of truths in the model's class whose data laws are as close as possible, and the separation the
loss sees between them.

**Witness.**  From the truth ``G`` (gate rows ``V_i = (beta1_i, beta0_i)``, the last row carrying
``tau``) scale every gate row: ``G'_t: V -> (1 + t) V``, the expert parameters unchanged
(:func:`scale_witness`).  Under the linear score the logits ``(beta1_i^T x + beta0_i) / tau`` do
not change, so ``p_{G'_t}(y | x) = p_G(y | x)``: ``KL = 0`` exactly.  Under the activation gate
``(tanh(beta1_i^T x) + beta0_i) / tau`` they do, and ``KL > 0``.

**Information.**  ``kappa(t) = E_{(X, Y) ~ P_G}[log p_G(Y | X) - log p_{G'_t}(Y | X)]``, the
per-sample KL (the ``X`` marginals agree and cancel), by Monte Carlo over ``m`` draws of ``P_G``
(the same draws for every ``t``) as the mean of ``r - 1 - log r``, ``r = p_{G'_t} / p_G`` (the same
expectation, since ``E[r] = 1``, with non-negative terms), with its standard error.

**Bound.**  As in docs/guide/two_point.rst: ``LB(n) = max_t Delta(t) / 2 * A(n kappa(t))`` with
``Delta(t) = min(D(G'_t, G), D(G, G'_t))`` for the scenario's first loss (``D1``) and
``A(.)`` the affinity bound of :func:`moestat.theorems.judges.two_point.affinity_lower_bound` (Pinsker /
Bretagnolle--Huber); ``kappa + 2 SE`` gives the conservative bound.

What it proves: a flat ``LB(n)`` says that *no* estimator's worst-case ``D1`` risk over the pair
falls with ``n`` -- the loss on ``(beta1, tau)`` separately has no rate at all (the ray is not
identified), which is the strongest form of "slower than any polynomial".  What it does not: the
"as slow as ``1/log n``" of the abstract (an upper bound, and a statement about the paper's own
loss, which was not read); nor the activation gate's polynomial upper rate (a falling lower bound
is necessary for it, not sufficient).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from moestat.losses.voronoi_spec import voronoi_loss_from_spec
from moestat.model.mixing import MixingMeasure
from moestat.rates.catalogue import catalogue_file
from moestat.rates.config import RatesConfig
from moestat.rates.resolve import build_scenario
from moestat.theorems.judges.two_point import alternative_chunks, kl_text, loglog_slope, maximise_bound

__all__ = ["scale_witness", "kl_rate_likelihood", "scale_two_point", "judge", "FLAT_RATIO", "FALL_RATIO"]

#: a flat bound may lose at most this factor between the smallest and the largest n (as thm2's part (a))
FLAT_RATIO = 0.5
#: the activation gate's bound must fall at least this far over the same n (the instrument can see a rate)
FALL_RATIO = 0.1
#: sample sizes of the bound (five decades, as the cosine router's)
NS = np.logspace(2, 7, 11)


def scale_witness(truth: MixingMeasure, ts: Sequence[float]) -> MixingMeasure:
    """``G'_t`` ``[T]``: every gate row of ``truth`` (``beta0``, ``beta1`` and the temperature row) times ``1 + t``.

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched, in the temperature gate's layout (``beta1[-1, 0] = tau``).
    ts : sequence of float, shape ``[T]``

    Returns
    -------
    MixingMeasure
        Batched ``[T]``; ``eta`` unchanged.
    """
    G = truth.numpy()
    c = 1.0 + np.asarray(ts, dtype=np.float64).reshape(-1)
    T = c.size
    return MixingMeasure(c[:, None] * G.beta0[None], c[:, None, None] * G.beta1[None],
                         np.broadcast_to(G.eta, (T,) + G.eta.shape).copy())


def kl_rate_likelihood(model, truth: MixingMeasure, alternatives: MixingMeasure, X: np.ndarray, Y: np.ndarray,
                       chunk: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample ``KL(P_G || P_G')`` ``[T]`` by Monte Carlo over draws ``(X [m, d], Y [m])`` of ``P_G``, and its SE.

    ``model`` is a :class:`~moestat.model.likelihood.LikelihoodModel`; ``alternatives`` batched ``[T]``.
    """
    m = X.shape[0]
    if m < 2:
        raise ValueError("need at least 2 Monte Carlo draws for a standard error")
    Xt, Yt = torch.as_tensor(np.asarray(X, np.float64)), torch.as_tensor(np.asarray(Y, np.float64))
    l0 = model.log_density(Xt, Yt, truth.numpy())  # [m]
    T = alternatives.numpy().batch_shape[0]
    kappa, se = np.empty(T), np.empty(T)
    for a, b, sub in alternative_chunks(alternatives, chunk):
        lr = (model.log_density(Xt.expand(b - a, -1, -1), Yt.expand(b - a, -1), sub) - l0).numpy()  # log q/p [c, m]
        # KL = E_p[-log(q/p)] = E_p[q/p - 1 - log(q/p)] (E_p[q/p] = 1): every term >= 0 and O(t^2),
        # so the Monte Carlo error is relative; the plain mean of -log(q/p) carries an O(t / sqrt(m))
        # noise from the score term, which swamps t^2 at small t
        term = np.expm1(lr) - lr
        kappa[a:b] = term.mean(axis=1)
        se[a:b] = term.std(axis=1, ddof=1) / math.sqrt(m)
    return kappa, se


def scale_two_point(scenario, ns: Sequence[float] = NS, ts: Sequence[float] | None = None, *, n_mc: int = 20_000,
                    seed: int = 0) -> dict[str, Any]:
    """``LB(n)`` along :func:`scale_witness` for a temperature-gate scenario (module docstring).

    Parameters
    ----------
    scenario : Scenario
        A scenario file's scenario with ``noise.model = "mixture"`` (``scenario.model`` a likelihood
        model) and its first loss the one judged.
    ns : sequence of float, shape ``[N]``
    ts : sequence of float, shape ``[T]``, optional
        Default ``logspace(-7, 0, 141)`` (the gate doubled at most).
    n_mc : int
        Monte Carlo draws of ``P_G`` for ``kappa``.
    seed : int
        Root of the one Monte Carlo stream, ``SeedSequence(seed)``.

    Returns
    -------
    dict
        ``n, lower_bound, lower_bound_conservative, t_star [N]``, ``kappa_max``, ``kappa_se_max``, ``loss``.
    """
    ns = np.asarray(ns, dtype=np.float64).reshape(-1)
    ts = np.logspace(-7, 0, 141) if ts is None else np.asarray(ts, dtype=np.float64).reshape(-1)
    G = scenario.truth.numpy()
    alt = scale_witness(G, ts)
    spec = scenario.losses[0]
    G_rep = scale_witness(G, np.zeros(ts.size))
    sep = np.minimum(voronoi_loss_from_spec(spec, alt, G), voronoi_loss_from_spec(spec, G_rep, alt))
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    X, Y = scenario.sample(int(n_mc), rng)
    kappa, se = kl_rate_likelihood(scenario.model, G, alt, X, Y)

    low, _ = maximise_bound(sep, kappa + 2.0 * se, ns)
    point, idx = maximise_bound(sep, kappa, ns)
    return {"n": ns.tolist(), "lower_bound": point.tolist(), "lower_bound_conservative": low.tolist(),
            "t_star": ts[idx].tolist(), "interior": ((ts[idx] > ts.min()) & (ts[idx] < ts.max())).tolist(), "kappa_max": float(np.max(np.abs(kappa))), "kappa_se_max": float(se.max()),
            "loss": spec.name, "n_mc": int(n_mc), "seed": int(seed), "witness": "scale (1 + t) of every gate row"}


def judge(quick: bool = True) -> dict[str, dict[str, Any]]:
    """The two-point verdicts of the catalogue entry ``temperature-gmoe``, per run label.

    ``temperature`` (no polynomial rate): ``consistent`` when the conservative bound at the largest
    ``n`` is at least :data:`FLAT_RATIO` times the bound at the smallest, *and* the activation
    gate's bound on the same construction falls below :data:`FALL_RATIO` of its start (the
    instrument can see a rate); ``inconsistent`` when the temperature bound falls below
    :data:`FLAT_RATIO`; ``inconclusive`` when the bound is flat but the activation's does not fall.
    ``activation`` (polynomial): ``consistent`` when its bound falls below :data:`FALL_RATIO` (a
    necessary condition for a polynomial upper rate), ``inconclusive`` otherwise (a flat lower bound
    would contradict it: ``inconsistent`` when its ratio is at least :data:`FLAT_RATIO`).
    ``quick`` uses 5 000 Monte Carlo draws instead of 20 000.
    """
    curves = {}
    for label, name in (("temperature", "temperature_gmoe.toml"), ("activation", "temperature_activation.toml")):
        cfg = RatesConfig.from_dict({"scenario_file": str(catalogue_file(name)), "estimator": "mle"})
        curves[label] = scale_two_point(build_scenario(cfg.scenario_key(cfg.router[0])), n_mc=5_000 if quick else 20_000)
    tem, act = curves["temperature"], curves["activation"]
    r_t = tem["lower_bound_conservative"][-1] / tem["lower_bound"][0]
    r_a = act["lower_bound_conservative"][-1] / act["lower_bound"][0]
    # slope over the sizes whose maximiser is inside the witness grid (not saturated at an end)
    s_a = loglog_slope(np.array(act["n"]), np.array(act["lower_bound_conservative"]), np.array(act["interior"]))
    n0, n1 = f"{tem['n'][0]:.0e}", f"{tem['n'][-1]:.0e}"
    what = f"two-point (Le Cam) bound on the minimax {tem['loss']} risk along (beta1, beta0, tau) -> (1 + t)(beta1, beta0, tau)"
    if r_t < FLAT_RATIO:
        cat_t = "inconsistent"
    else:
        cat_t = "consistent" if r_a <= FALL_RATIO else "inconclusive"
    reason_t = (f"{what}: LB({n1}) / LB({n0}) = {r_t:.3g} (flat if >= {FLAT_RATIO:g}; max |KL| per sample "
                f"{kl_text(tem['kappa_max'])}, SE {kl_text(tem['kappa_se_max'])}); the activation gate's ratio on the same "
                f"construction {r_a:.3g} (must be <= {FALL_RATIO:g}: the instrument sees a rate)")
    cat_a = "consistent" if r_a <= FALL_RATIO else ("inconsistent" if r_a >= FLAT_RATIO else "inconclusive")
    reason_a = (f"{what}: LB({n1}) / LB({n0}) = {r_a:.3g} (falls if <= {FALL_RATIO:g}), log-log slope "
                f"{s_a:.3f} (interior maximisers): a falling lower bound is necessary for a polynomial rate, not sufficient")
    # the instrument names its row (run, loss): the catalogue applies it to that prediction only
    return {"temperature": {"category": cat_t, "reason": reason_t, "loss": tem["loss"], "ratio": r_t, "curve": tem},
            "activation": {"category": cat_a, "reason": reason_a, "loss": act["loss"], "ratio": r_a, "slope": s_a,
                           "curve": act}}
