"""The rules by which a replicate enters, runs and leaves the Top-K continuation ladder.

:class:`~moestat.estimators.lse.LeastSquaresMoE` with ``topk_temperatures="auto"`` (Nguyen et al.
(2024), eq. (9) with Top-2-of-3 routing): a replicate enters at the first temperature ``T`` within
which at most ``STAGE_ENTRY`` of its samples lie of their selection boundary, each stage ends once
a piece no longer moves the hard objective, and the ladder is left once at most ``STAGE_NEAR``
samples remain within ``T``.  The distances come from
:func:`~moestat.estimators.lse_kernel.near_boundary`, checked here against the gate's own scores.
Whether the fits reach the truth's objective is ``tests/estimators/test_lse_topk_truth.py``.
"""

import numpy as np
import pytest
import torch

from moestat.data.synthetic import make_scenario
from moestat.estimators import LeastSquaresMoE
from moestat.estimators import lse as lse_mod
from moestat.estimators.layout import pack
from moestat.estimators.lse_kernel import Design, near_boundary
from moestat.model.mixing import MixingMeasure

N, R = 600, 3


@pytest.fixture(scope="module")
def problem():
    sc = make_scenario("perturbed", "exact", d=4, k_true=3, k_active=2, expert="tanh")
    rng = np.random.default_rng(11)
    XY = [sc.sample(N, rng) for _ in range(R)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    near = MixingMeasure.stack([sc.near_truth_start(0.05, rng, n=N) for _ in range(R)])
    return sc, X, Y, near


def _half_gaps(sc, X, G) -> np.ndarray:
    """``(s_(K) - s_(K+1)) / 2`` per sample ``[R, n]`` from the gate's own scores (eq. (9))."""
    s = sc.fit_model.gate.scores(torch.as_tensor(X), torch.as_tensor(G.beta1)).numpy()  # [R, n, k]
    K = sc.fit_model.gate.k_active
    top = -np.sort(-s, axis=-1)
    return 0.5 * (top[..., K - 1] - top[..., K])


def test_near_boundary_counts_the_samples_within_the_width_of_their_selection_boundary(problem):
    sc, X, Y, near = problem
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    theta = pack(near.torch(), True)
    gaps = _half_gaps(sc, X, near)
    for chunk in (N, 128):  # one chunk and several: the same counts
        data = Design.build(sc.fit_model, Xt, Yt, chunk=chunk, n_components=sc.k_fit)
        for width in (0.0, 1e-3, 0.01, 0.1, 10.0):
            got = near_boundary(sc.fit_model, data, theta, sc.k_fit, width).numpy()
            # the kernel scales x by 1/(|x| + tau2) once per fit; equal to rounding, so compare
            # away from ties
            expect = (gaps < width).sum(-1)
            assert np.all(np.abs(got - expect) <= (np.abs(gaps - width) < 1e-12).sum(-1)), (width, got, expect)
        assert np.all(near_boundary(sc.fit_model, data, theta, sc.k_fit, 10.0).numpy() == N)  # scores in [-1, 1]
        assert np.all(near_boundary(sc.fit_model, data, theta, sc.k_fit, 0.0).numpy() == 0)


def test_near_boundary_refuses_a_dense_gate(problem):
    sc, X, Y, near = problem
    dense = sc.fit_model.__class__(sc.fit_model.gate.with_k_active(None), sc.fit_model.expert)
    data = Design.build(dense, torch.as_tensor(X), torch.as_tensor(Y), n_components=sc.k_fit)
    with pytest.raises(ValueError, match="sparse gate"):
        near_boundary(dense, data, pack(near.torch(), True), sc.k_fit, 0.1)


def _stages(monkeypatch, sc, X, Y, start):
    """Fit with the auto ladder, recording every Levenberg-Marquardt call: its temperature, the
    replicates' positions in the batch (by their responses) and its start and end."""
    calls = []
    real = lse_mod.levenberg_marquardt

    def spy(model, Xc, Yc, theta0, *a, **kw):
        out = real(model, Xc, Yc, theta0, *a, **kw)
        rows = [int(np.flatnonzero((Y == Yc[j].numpy()).all(-1))[0]) for j in range(Yc.shape[0])]
        calls.append((kw.get("temperature"), rows, theta0.clone(), out))
        return out

    monkeypatch.setattr(lse_mod, "levenberg_marquardt", spy)
    est = LeastSquaresMoE(sc.fit_model, sc.k_fit, box=sc.box).fit(X, Y, init=start)
    return est, calls


def test_a_replicate_enters_the_ladder_at_its_first_rung_that_smooths_few_of_its_samples(problem, monkeypatch):
    sc, X, Y, near = problem
    est, calls = _stages(monkeypatch, sc, X, Y, near)
    gaps = _half_gaps(sc, X, sc.box.clip(near))
    for r in range(R):
        temps = [T for T, rows, _, _ in calls if T is not None and r in rows]
        first = temps[0]
        entry = [T for T in lse_mod.AUTO_TEMPERATURES if (gaps[r] < T).mean() <= lse_mod.STAGE_ENTRY][0]
        assert first == entry, (r, temps)
        # the rungs it ran (each in one or more pieces) are consecutive on the ladder from there
        rungs = list(dict.fromkeys(temps))
        i = lse_mod.AUTO_TEMPERATURES.index(first)
        assert temps == sorted(temps, reverse=True)
        assert rungs == list(lse_mod.AUTO_TEMPERATURES[i : i + len(rungs)])


def test_a_stage_runs_in_pieces_and_the_ladder_ends_near_no_boundary(problem, monkeypatch):
    sc, X, Y, near = problem
    est, calls = _stages(monkeypatch, sc, X, Y, near)
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    for T, rows, _, out in calls:
        if T is not None:
            assert int(out["n_iter"].max()) <= lse_mod.STAGE_PIECE
    for r in range(R):
        mine = [(T, out["theta"][rows.index(r)]) for T, rows, _, out in calls if T is not None and r in rows]
        total = sum(int(out["n_iter"][rows.index(r)]) for T, rows, _, out in calls if T is not None and r in rows)
        T_last, theta_last = mine[-1]
        data = Design.build(sc.fit_model, Xt[r : r + 1], Yt[r : r + 1], n_components=sc.k_fit)
        left_near = int(near_boundary(sc.fit_model, data, theta_last[None], sc.k_fit, T_last)[0])
        if T_last != lse_mod.AUTO_TEMPERATURES[-1]:
            # it left before the last rung: near no boundary, or smoothed == hard (rarely)
            hard = lse_mod.kernel_forward(sc.fit_model, data, theta_last[None], sc.k_fit, None, keep=False)[0]
            smooth = lse_mod.kernel_forward(sc.fit_model, data, theta_last[None], sc.k_fit, T_last, keep=False)[0]
            agree = bool((smooth - hard).abs() <= lse_mod.STAGE_AGREE_RTOL * hard.abs())
            assert left_near <= lse_mod.STAGE_NEAR or agree, (r, T_last, left_near)
        # the stages' iterations are all counted in n_iter_, beside the hard stage's
        assert est.n_iter_[r] >= total
