"""The catalogue's one protocol: the same rule for every entry, its sizes from the truth's pre-flight."""

from __future__ import annotations

import pytest

from moestat.cli.main import main as moestat_main
from moestat.rates import catalogue_protocol as cp
from moestat.rates.catalogue import ENTRIES


@pytest.mark.parametrize("key", ["cosine-exact", "lse-ffn-vs-linear", "multinomial-moe"])
def test_grid_starts_on_the_ladder_at_the_largest_finite_n_ok(key):
    grid = cp.protocol_grid(ENTRIES[key])
    n_ok = grid["n_ok"]
    assert n_ok is not None and n_ok <= cp.N_OK_CAP
    # the first size of the ladder N_FLOOR * 2**j at or above n_ok: at or above it, and its half below it
    assert grid["n_min"] >= max(n_ok, cp.N_FLOOR)
    assert grid["n_min"] == cp.N_FLOOR or grid["n_min"] // 2 < n_ok
    assert (grid["n_min"] // cp.N_FLOOR) & (grid["n_min"] // cp.N_FLOOR - 1) == 0  # a power of two times the floor
    assert grid["n_max"] == cp.SPAN * grid["n_min"]
    finite = [v for oks in grid["n_ok_by_run"].values() for v in oks.values() if v is not None and v <= cp.N_OK_CAP]
    assert n_ok == pytest.approx(max(finite), abs=1)


def test_every_run_of_an_entry_gets_the_same_sizes_and_keeps_its_estimator_keys():
    planned = cp.protocol_plan("gmoe-exact")
    (run, cfg), = planned
    assert cfg.ns == planned[0][1].ns and len(cfg.ns) == cp.N_POINTS
    assert cfg.ns[-1] == cp.SPAN * cfg.ns[0]
    assert (cfg.reps, cfg.max_reps, cfg.halfwidth) == (cp.REPS, cp.MAX_REPS, cp.HALFWIDTH)
    assert cfg.starts == run.full["starts"]  # the estimator's starts are the entry's, not the protocol's
    two = cp.protocol_plan("lse-ffn-vs-linear")
    assert len(two) == 2 and two[0][1].ns == two[1][1].ns  # contrasts pair on (n, replicate)


def test_target_width_is_below_the_categories_cap():
    from moestat.rates.verdicts import MAX_CI_WIDTH

    assert 2 * cp.HALFWIDTH < MAX_CI_WIDTH
    assert cp.REPS <= cp.MAX_REPS


def test_cli_refuses_protocol_with_quick(capsys, tmp_path):
    assert moestat_main(["reproduce", "cosine-exact", "--protocol", "--quick", "--out", str(tmp_path / "o")]) == 2
    assert "--protocol or --quick" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_untested_run_is_neither_planned_nor_counted_in_the_grid():
    e = ENTRIES["multinomial-moe"]
    assert e.untested, "the entry leaves its slow arm untested"
    assert [run.label for run, _ in cp.protocol_plan("multinomial-moe")] == [r.label for r in e.runs if r.label not in e.untested]
    assert set(cp.protocol_grid(e)["n_ok_by_run"]) == {r.label for r in e.runs} - set(e.untested)


def test_a_protocol_report_needs_its_plan(tmp_path):
    from moestat.rates.catalogue import reproduce

    with pytest.raises(ValueError, match="needs its plan"):
        reproduce("cosine-exact", tmp_path / "o", protocol=cp.describe())
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_the_door_runs_an_entry_on_the_protocol_grid(tmp_path, capsys):
    import json

    out = tmp_path / "o"
    assert moestat_main(["reproduce", "cosine-exact", "--protocol", "--quiet", "--n-jobs", "1", "--out", str(out)]) == 0
    rep = json.loads((out / "catalogue.json").read_text())
    grid = cp.protocol_grid(ENTRIES["cosine-exact"])
    assert rep["mode"] == "protocol" and rep["protocol"] == cp.describe()
    (run,) = rep["runs"]
    assert run["sample_sizes"][0] == grid["n_min"] and run["sample_sizes"][-1] == grid["n_max"]
    assert cp.REPS <= run["reps"] <= cp.MAX_REPS


def test_the_protocol_grid_needs_no_preflight_window():
    # the grid starts at or above every router's n_ok, so the catalogue's pre-flight window keeps it whole
    from moestat.rates.catalogue import with_preflight_window

    for run, cfg in cp.protocol_plan("lse-ffn-vs-linear"):
        assert cfg.window_min is None and with_preflight_window(cfg) == cfg, run.label
