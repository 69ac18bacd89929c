"""The likelihood fits' memory budget: chunks of entries give the same fits as one batch.

Bitwise, not to a tolerance: every entry (replicate x start) of a batch runs its own EM steps,
stopping rule, SQUAREM extrapolation and Newton polish on its own rows of the batched tensors,
its start is drawn before the batch is cut, and the compile decision is the whole batch's; on one
thread a batched operation computes an entry's row with the same operations in the same order
whatever the batch size, so the numbers are the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from moestat.data.gaussian_scenarios import model1_scenario
from moestat.data.scenario_files import load_scenario
from moestat.estimators import estimator_for, memory, mle_fused, mle_generic
from moestat.estimators.mle import MLEGaussianMoE
from moestat.model.mixing import MixingMeasure

SIGMOID_GMOE = """
name = "sigmoid-gmoe-test"
[gate]
score = "linear"
normalisation = "sigmoid"
[expert]
kind = "linear"
[noise]
model = "mixture"
[fit]
k = 2
[[atoms]]
beta0 = 0.5
beta1 = [1.5, -1.0]
eta = [1.0, -2.0, 0.5]
variance = 0.09
[[atoms]]
beta0 = -0.3
beta1 = [-1.0, 2.0]
eta = [-2.0, 1.0, -1.0]
variance = 0.16
"""


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # the sweep's arithmetic (run_unit)
    yield
    torch.set_num_threads(old)


def _same_fit(a: MLEGaussianMoE, b: MLEGaussianMoE) -> None:
    for name in ("beta0", "beta1", "eta"):
        np.testing.assert_array_equal(getattr(a.params_, name), getattr(b.params_, name))
    np.testing.assert_array_equal(a.loglik_, b.loglik_)
    np.testing.assert_array_equal(a.variances_, b.variances_)
    np.testing.assert_array_equal(a.objective_, b.objective_)
    np.testing.assert_array_equal(a.n_iter_, b.n_iter_)
    assert list(a.status_) == list(b.status_) and a.kernel_ == b.kernel_
    for pa, pb in zip(a.loglik_path_, b.loglik_path_):
        np.testing.assert_array_equal(pa, pb)


def _sigmoid_data(tmp_path, R: int, n: int):
    path = tmp_path / "sigmoid_gmoe.toml"
    path.write_text(SIGMOID_GMOE)
    sc = load_scenario(str(path))
    rng = np.random.default_rng(3)
    XY = [sc.sample(n, rng) for _ in range(R)]
    G0 = MixingMeasure.stack([sc.near_truth_start(0.3, rng) for _ in range(R)])
    return sc, np.stack([x for x, _ in XY]), np.stack([y for _, y in XY]), G0


@pytest.mark.parametrize("budget", [1, "1.2M"])
def test_generic_em_chunks_give_the_same_fits(tmp_path, budget):
    sc, X, Y, G0 = _sigmoid_data(tmp_path, R=5, n=300)
    # budget 1 byte: one entry per chunk; 1.2 MB: two (8 x 300 x 200 bytes = 480 kB each)
    whole = estimator_for(sc, "mle", max_iter=200, random_state=0, device="cpu")
    whole.set_params(n_init=2, max_memory="1T", keep_starts=True)  # jittered starts: drawn before any chunk
    cut = estimator_for(sc, "mle", max_iter=200, random_state=0, device="cpu")
    cut.set_params(n_init=2, max_memory=budget, keep_starts=True)
    whole.fit(X, Y, init=G0)
    cut.fit(X, Y, init=G0)
    _same_fit(whole, cut)
    np.testing.assert_array_equal(whole.starts_.loglik, cut.starts_.loglik)
    assert whole.kernel_ == "generic"


def test_fused_em_chunks_give_the_same_fits():
    sc = model1_scenario("over")
    rng = np.random.default_rng(5)
    XY = [sc.sample(400, rng) for _ in range(4)]
    X, Y = np.stack([x for x, _ in XY]), np.stack([y for _, y in XY])
    kw = dict(n_init=3, random_state=1, max_iter=300, accelerate=True, polish_iter=20, compile=False)
    whole = MLEGaussianMoE(sc.k_fit, max_memory="1T", **kw).fit(X, Y)
    cut = MLEGaussianMoE(sc.k_fit, max_memory=1, **kw).fit(X, Y)  # one replicate (3 starts) per chunk
    _same_fit(whole, cut)


def test_chunks_take_the_whole_batch_compile_decision(tmp_path, monkeypatch):
    sc, X, Y, G0 = _sigmoid_data(tmp_path, R=4, n=200)
    seen = []
    real = mle_generic.use_compiled

    def spy(em, compile, size, device):
        seen.append(size)
        return real(em, False, size, device)  # record the size judged; stay eager (no compiler needed)

    monkeypatch.setattr(mle_generic, "use_compiled", spy)
    est = estimator_for(sc, "mle", max_iter=50, random_state=0, device="cpu")
    est.set_params(max_memory=1).fit(X, Y, init=G0)
    assert seen == [4 * 200] * 4  # four chunks of one entry, each judged as the batch of four

    sizes = []
    real_pass = mle_fused._pass_function
    monkeypatch.setattr(mle_fused, "_pass_function", lambda c, size, dev: (sizes.append(size), real_pass(False, size, dev))[1])
    Xm = np.stack([model1_scenario("exact").sample(100, np.random.default_rng(i))[0] for i in range(3)])
    Ym = np.stack([model1_scenario("exact").sample(100, np.random.default_rng(i))[1] for i in range(3)])
    MLEGaussianMoE(2, n_init=2, max_memory=1, max_iter=20).fit(Xm, Ym)
    assert sizes == [3 * 2 * 100] * 3


def test_sweep_rows_do_not_depend_on_max_memory(tmp_path):
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import make_units, run_unit

    path = tmp_path / "sigmoid_gmoe.toml"
    path.write_text(SIGMOID_GMOE)
    rows = {}
    for budget in ("1T", 1):
        cfg = RatesConfig.from_dict({"scenario_file": str(path), "n_min": 200, "n_max": 400, "n_points": 3, "reps": 3,
                                     "max_iter": 100, "max_memory": budget, "estimator": "mle"})
        unit = [u for u in make_units(cfg.resolve()) if u.n == 200][0]
        assert unit.max_memory == budget
        rows[budget] = [{k: v for k, v in r.items() if k != "time"} for r in run_unit(unit)]
    np.testing.assert_equal(rows[1], rows["1T"])  # every column but the time, NaN (no criterion) equal to NaN


def test_parse_memory_and_chunk_rule():
    assert memory.parse_memory("1.5G") == int(1.5 * 2**30)
    assert memory.parse_memory("800MB") == 800 * 10**6
    assert memory.parse_memory(2048) == 2048
    assert memory.parse_memory("auto") == "auto"
    for bad in ("-1G", "lots", "0", True):
        with pytest.raises(ValueError, match="max_memory"):
            memory.parse_memory(bad)
    per = memory.fit_bytes(128_000, 1, 2, 2)
    assert memory.entries_per_chunk(128_000, 2, 2, 5 * per) == 5
    assert memory.entries_per_chunk(10**6, 2, 2, 1) == 1  # never fewer than one entry
    assert memory.chunks(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert 1 <= memory.resolve_max_memory("auto") <= memory.DEFAULT_MAX_MEMORY


def test_max_memory_is_validated():
    with pytest.raises(ValueError, match="max_memory"):
        MLEGaussianMoE(2, max_memory="a lot").fit(np.zeros((1, 50, 1)), np.zeros((1, 50)))


def test_check_and_rates_print_the_estimate(tmp_path, capsys):
    from moestat.cli.cmd_check import main as check_main
    from moestat.rates import RatesConfig, run_rates

    path = tmp_path / "sigmoid_gmoe.toml"
    path.write_text(SIGMOID_GMOE)
    check_main([str(path), "--draws", "500", "--n-max", "1000000", "--max-memory", "1.5G"])
    out = capsys.readouterr().out
    assert "memory: the likelihood fit of 20 replicates x starts at n = 1000000 (k = 2, d = 2)" in out
    assert "fitted 1 at a time under --max-memory 1.5 GiB" in out
    cfg = RatesConfig.from_dict({"scenario_file": str(path), "estimator": "mle", "n_min": 200, "n_max": 400, "n_points": 3,
                                 "reps": 2, "max_iter": 50, "max_memory": "1G"})
    run_rates(cfg, tmp_path / "out", figure_formats="none")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("memory:")]
    assert lines == ["memory: the likelihood fit of 2 replicates x starts at n = 400 (k = 2, d = 2) holds about 0.00119 GiB "
                     "of per-sample arrays; fitted in one batch within --max-memory 1 GiB"]
