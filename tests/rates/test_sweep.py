"""``n_jobs="auto"`` of a rates sweep (issue 36): how many processes, and the same rows as one."""

import pytest

from moestat.rates import sweep
from moestat.rates.config import RatesConfig
from moestat.rates.store import RESULT_COLUMNS
from moestat.rates.sweep import auto_n_jobs, make_units, run_sweep

TINY = dict(d=2, n_min=40, n_max=90, n_points=3, reps=3, max_iter=5, holdout=256, n_boot=100, quiet=True)


def tiny(**kw):
    return RatesConfig.from_dict({**TINY, **kw}).validate()


def test_auto_uses_every_core_for_the_main_job_and_one_process_for_a_tiny_sweep(monkeypatch):
    main_job = RatesConfig.from_dict({"router": "perturbed"})  # 7 units, 5.1e6 samples x replicates
    units = make_units(main_job)
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    assert auto_n_jobs(units, main_job) == 2
    monkeypatch.setattr(sweep, "available_cores", lambda: 64)
    assert auto_n_jobs(units, main_job) == 5  # at most one process per 1e6 samples x replicates
    assert auto_n_jobs(units[:2], main_job) == 2  # at most one process per unit (3.8e6 in 2 units)
    small = tiny()  # 3 units of a few hundred samples: a worker's start-up would cost more than it saves
    assert auto_n_jobs(make_units(small), small) == 1
    # starts count as work: 5 starts make the same units 5 times the work
    assert auto_n_jobs(units[-2:], main_job) == 1  # n = 4000 and 2000, 20 replicates: 1.2e5
    assert auto_n_jobs(units[-2:], main_job.replace(starts=10)) == 1
    assert auto_n_jobs(units[-3:], main_job.replace(starts=10)) == 2  # 14000 x 20 x 10 = 2.8e6


def test_auto_is_one_process_on_an_accelerator(monkeypatch):
    cfg = RatesConfig.from_dict({"router": "perturbed"})
    monkeypatch.setattr(sweep, "available_cores", lambda: 16)
    monkeypatch.setattr(sweep, "resolve_device", lambda device: __import__("torch").device("cuda"))
    assert auto_n_jobs(make_units(cfg), cfg) == 1


def _counting_devices(monkeypatch, kind="cpu"):
    """``sweep.resolve_device`` counted (and answering ``kind``): how often the sweep resolves its device."""
    import torch

    calls = []
    monkeypatch.setattr(sweep, "resolve_device", lambda device: calls.append(device) or torch.device(kind))
    return calls


def test_the_plan_decides_units_jobs_and_forks_together_on_the_device_resolved_once(monkeypatch):
    # issue 58: one plan, the device resolved once; an adaptive round's plan does not resolve it again
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    calls = _counting_devices(monkeypatch)
    main_job = RatesConfig.from_dict({"router": "perturbed", "n_jobs": "auto"})
    plan = sweep.plan_sweep(main_job)
    assert calls == ["cpu"] and plan.on_cpu
    assert plan.units == plan.todo == tuple(make_units(main_job)) and not plan.done
    assert calls == ["cpu"]  # make_units resolves no device
    assert plan.n_jobs == 2 and plan.forks == 1  # this process and one forked worker
    grown = plan.grown(main_job.resolve().replace(reps=40), None)  # the next round of --max-reps
    assert calls == ["cpu"] and [len(u.replicates) for u in grown.units] == [40] * len(plan.units)
    one = sweep.plan_sweep(main_job.replace(n_jobs=1))
    assert one.n_jobs == 1 and one.forks == 0
    assert sweep.plan_sweep(main_job.replace(backend="dask")).forks == 0  # a cluster has its own workers


def test_the_plan_of_an_accelerator_is_one_process_and_no_fork(monkeypatch):
    monkeypatch.setattr(sweep, "available_cores", lambda: 16)
    calls = _counting_devices(monkeypatch, "cuda")
    plan = sweep.plan_sweep(RatesConfig.from_dict({"router": "perturbed", "n_jobs": "auto"}))
    assert calls == ["cpu"] and not plan.on_cpu and plan.n_jobs == 1 and plan.forks == 0


def test_a_resumed_plan_runs_the_units_left_and_counts_its_processes_on_them(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    cfg = tiny(router=["perturbed"], chunk=1, n_jobs="auto")
    monkeypatch.setattr(sweep, "AUTO_SAMPLES_PER_PROCESS", 1)  # a process per unit, up to the cores
    (tmp_path / "out").mkdir()
    run_sweep(cfg.replace(n_max=40, n_points=1), tmp_path / "out", progress=False)  # n = 40 done, replicates 0-2
    plan = sweep.plan_sweep(cfg, tmp_path / "out")
    assert {u.n for u in plan.units} == {40, 60, 90} and {u.n for u in plan.todo} == {60, 90}
    assert len(plan.done) == 3 and all(n == 40 for _, n, _ in plan.done)
    assert plan.n_jobs == 2 and plan.forks == 1
    # every unit done: nothing to fit, no process to fork
    run_sweep(cfg.replace(n_jobs=1), tmp_path / "out", resume=True, progress=False)
    left = sweep.plan_sweep(cfg, tmp_path / "out")
    assert left.todo == () and left.n_jobs == 1 and left.forks == 0


@pytest.mark.slow
def test_auto_with_two_processes_gives_the_rows_of_one(tmp_path, monkeypatch):
    # the sweep's own process and one loky worker share the units (moestat.rates.backends._execute_shared)
    monkeypatch.setattr(sweep, "AUTO_SAMPLES_PER_PROCESS", 1)
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    cfg = tiny(router=["perturbed", "cosine"], chunk=2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = run_sweep(cfg, tmp_path / "a", progress=False)
    b = run_sweep(cfg.replace(n_jobs="auto"), tmp_path / "b", progress=False)
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    key = ["router", "n", "replicate"]
    assert len(a) == 2 * 3 * 3
    assert a[cols].sort_values(key).reset_index(drop=True).equals(b[cols].sort_values(key).reset_index(drop=True))
    import json

    workers = json.loads((tmp_path / "b" / "provenance.json").read_text())["runs"][-1]["workers"]
    assert workers["processes"] == 2


@pytest.mark.parametrize("value", [0, -1, 2.5, "many", None])
def test_n_jobs_is_a_positive_integer_or_auto(value):
    with pytest.raises(ValueError, match="n_jobs must be a positive integer or 'auto'"):
        tiny(n_jobs=value)
    assert tiny(n_jobs="auto").n_jobs == "auto"


def test_a_unit_reuses_the_truths_regression_function_of_its_draw_with_the_same_rows(monkeypatch):
    """run_unit hands the truth's criterion the g_{G*}(X) of the draw (Scenario.knowing_mean, issue
    36) instead of computing it again: the rows are those of the computation."""
    from moestat.data.synthetic import Scenario
    from moestat.model.regression import MoEModel

    unit = make_units(tiny(router=["perturbed"], extra_starts=1))[0]
    calls = []
    real = MoEModel.predict

    def counted(self, x, G):
        calls.append(1)
        return real(self, x, G)

    monkeypatch.setattr(MoEModel, "predict", counted)
    reused = sweep.run_unit(unit)
    reused_calls = len(calls)
    monkeypatch.setattr(Scenario, "knowing_mean", lambda self, X, mean: self)  # the former path: computed again
    calls.clear()
    computed = sweep.run_unit(unit)
    cols = [c for c in RESULT_COLUMNS if c != "time"]
    # repr: the same float bits (and NaN equal to NaN, e.g. param_multi of an exact fit)
    assert [{c: repr(r[c]) for c in cols} for r in reused] == [{c: repr(r[c]) for c in cols} for r in computed]
    # what was saved: the truth's criterion evaluated g_{G*} once per data set of the unit
    assert len(calls) == reused_calls + len(unit.replicates)
