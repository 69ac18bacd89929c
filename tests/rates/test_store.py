"""Seed streams, work units, the resumable CSV store and determinism of the sweep runner."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from moestat.rates.config import RatesConfig, sample_sizes
from moestat.rates.store import LOSS_NAMES, RESULT_COLUMNS, ResultStore, read_results
from moestat.rates.sweep import build_scenario, make_units, replicate_streams, run_sweep

TINY = dict(d=2, n_min=40, n_max=90, n_points=3, reps=3, max_iter=5, holdout=256, n_boot=100, quiet=True)


def tiny(**kw):
    return RatesConfig.from_dict({**TINY, **kw}).validate()


def _frame(df):
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    return df[cols].sort_values(["router", "n", "replicate"]).reset_index(drop=True)


@settings(max_examples=40)
@given(lo=st.integers(1, 5000), span=st.integers(0, 100000), k=st.integers(1, 30))
def test_sample_sizes_are_sorted_distinct_and_span_the_range(lo, span, k):
    hi = lo + span
    ns = sample_sizes(lo, hi, k)
    assert ns == sorted(set(ns))
    assert ns[0] == lo and ns[-1] == hi or len(ns) == 1
    assert len(ns) <= k


def test_data_stream_does_not_depend_on_router_and_init_stream_differs():
    cfg = tiny(router=["perturbed", "cosine"])
    a = build_scenario(cfg.scenario_key("perturbed"))
    b = build_scenario(cfg.scenario_key("cosine"))
    d0, i0 = replicate_streams(0, 40, 1)
    Xa, _ = a.sample(40, np.random.default_rng(d0))
    Xb, _ = b.sample(40, np.random.default_rng(replicate_streams(0, 40, 1)[0]))
    np.testing.assert_array_equal(Xa, Xb)
    assert not np.array_equal(np.random.default_rng(d0).random(5), np.random.default_rng(i0).random(5))
    assert replicate_streams(0, 40, 1)[0].entropy == replicate_streams(0, 40, 2)[0].entropy
    assert not np.array_equal(
        np.random.default_rng(replicate_streams(0, 40, 1)[0]).random(3),
        np.random.default_rng(replicate_streams(0, 40, 2)[0]).random(3),
    )


def test_units_have_a_fixed_composition():
    cfg = tiny(reps=5, chunk=2, router=["perturbed", "cosine"])
    units = make_units(cfg)
    assert sorted(len(u.replicates) for u in units if u.router == "perturbed" and u.n == 40) == [1, 2, 2]
    assert make_units(cfg.replace(n_jobs=2)) == units
    covered = {(u.router, u.n, r) for u in units for r in u.replicates}
    assert len(covered) == 2 * 3 * 5


def test_store_roundtrip_is_exact_and_skips_torn_lines(tmp_path):
    store = ResultStore(tmp_path / "results.csv")
    store.create()
    row = {c: 0 for c in RESULT_COLUMNS}
    row.update(scenario="s,with comma", router="perturbed", setting="exact", estimator="lse", status="ftol", converged=True)
    vals = {name: float(np.float64(1) / 3 + i) for i, name in enumerate(LOSS_NAMES)}
    row.update(vals, objective=0.1 + 0.2, time=1.5, n=10, replicate=2, n_iter=3)
    store.append([row])
    with open(store.path, "a") as fh:
        fh.write("s,perturbed,exact,10,3")  # a row torn by a kill, no newline
    df = read_results(store.path)
    assert len(df) == 1
    assert df.loc[0, "scenario"] == "s,with comma"
    for name, v in vals.items():
        assert df.loc[0, name] == v  # bit-exact round trip
    assert df.loc[0, "objective"] == 0.1 + 0.2 and bool(df.loc[0, "converged"])
    assert store.done() == {("perturbed", 10, 2)}


@pytest.mark.slow
def test_done_reads_no_dataframe_and_refuses_what_read_refuses(tmp_path):
    # issue 36: done() runs before the sweep's first unit; a pandas import there delayed it
    import subprocess
    import sys

    store = ResultStore(tmp_path / "results.csv")
    store.create()
    row = {c: 0 for c in RESULT_COLUMNS}
    row.update(scenario="s", router="cosine", setting="exact", estimator="lse", status="ftol", converged=True,
               n=20, replicate=4)
    store.append([row])
    code = ("import sys; from moestat.rates.store import ResultStore; "
            f"d = ResultStore({str(store.path)!r}).done(); "
            "assert d == {('cosine', 20, 4)}, d; assert 'pandas' not in sys.modules, 'pandas imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    with open(store.path, "a") as fh:  # a duplicate (router, n, replicate): read() refuses it, so must done()
        fh.write(store.path.read_text().splitlines()[1] + "\n")
    with pytest.raises(ValueError):
        store.read()
    with pytest.raises(ValueError):
        store.done()


@pytest.mark.slow
def test_n_jobs_1_and_2_give_identical_results(tmp_path):
    cfg = tiny(router=["perturbed", "cosine"], chunk=2)
    a = run_sweep(cfg, tmp_path / "a", progress=False) if (tmp_path / "a").mkdir() is None else None
    b = run_sweep(cfg.replace(n_jobs=2), tmp_path / "b", progress=False) if (tmp_path / "b").mkdir() is None else None
    assert len(a) == 2 * 3 * 3
    assert _frame(a).equals(_frame(b))
    # byte for byte (issue 13): the same rows in the same order in the file (the time column is a
    # wall-clock measurement) and the same fits, bootstrap intervals included
    t = RESULT_COLUMNS.index("time")

    def no_time(path):
        return [",".join(line.split(",")[:t]) for line in path.read_text().splitlines()]

    assert no_time(tmp_path / "a" / "results.csv") == no_time(tmp_path / "b" / "results.csv")
    from moestat.rates.fit import fit_rates

    kw = dict(setting=cfg.setting, estimator=cfg.estimator, routers=cfg.router, n_boot=cfg.n_boot, seed=cfg.seed)
    assert json.dumps(fit_rates(a, **kw), sort_keys=True) == json.dumps(fit_rates(b, **kw), sort_keys=True)
    # common random numbers: both routers fitted the same data, so the objectives differ only by the router
    assert set(a["router"]) == {"perturbed", "cosine"}


def test_resume_after_a_partial_run_equals_an_uninterrupted_run(tmp_path):
    cfg = tiny(chunk=2)
    (tmp_path / "full").mkdir()
    full = run_sweep(cfg, tmp_path / "full", progress=False)
    # Simulate a kill: keep the header, the first 4 rows and half of the 5th row.
    lines = (tmp_path / "full" / "results.csv").read_text().splitlines(keepends=True)
    part = tmp_path / "part"
    part.mkdir()
    (part / "results.csv").write_text("".join(lines[:5]) + lines[5][:20])
    (part / "provenance.json").write_text((tmp_path / "full" / "provenance.json").read_text())
    resumed = run_sweep(cfg, part, resume=True, progress=False)
    assert _frame(resumed).equals(_frame(full))
    # nothing recomputed twice: every (router, n, replicate) once among the complete lines
    assert len(read_results(part / "results.csv")) == len(full)


def test_the_rates_guide_lists_every_preset():
    from pathlib import Path

    from moestat.rates.presets import PRESETS

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "rates.rst").read_text(encoding="utf-8")
    missing = [name for name in PRESETS if f"``{name}``" not in text]
    assert not missing, f"docs/guide/rates.rst does not list the presets {missing}"


def test_provenance_names_the_cpu_kernels_the_rows_came_from(tmp_path, monkeypatch):
    # a fit on a flat ridge stops at another round-off on another CPU (MKL and ATen choose kernels by
    # the CPU): the environment recorded for the client and every worker must say which, so that two
    # records' rows can be told apart
    import torch

    from moestat.rates.worker_env import COMPARED, environment

    environment.cache_clear()
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    try:
        (tmp_path / "run").mkdir()
        run_sweep(tiny(reps=2), tmp_path / "run", progress=False)
        client = json.loads((tmp_path / "run" / "provenance.json").read_text())["runs"][-1]["workers"]["client"]
        assert client["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert client["mkl_cbwr"] == "COMPATIBLE"
        assert isinstance(client["cpu_model"], str)
        environment.cache_clear()
        monkeypatch.delenv("MKL_CBWR")
        assert environment()["mkl_cbwr"] is None
    finally:
        environment.cache_clear()
    # recorded, not compared: another CPU changes round-off, not the code a worker runs
    assert not {"cpu_model", "cpu_capability", "mkl_cbwr"} & set(COMPARED)
