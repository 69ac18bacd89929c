"""moestat.rates.sweep.recorded_unit on the recorded runs of records/catalogue."""

import pytest


def test_recorded_unit_rebuilds_the_unit_of_a_recorded_run(tmp_path):
    """recorded_unit: the unit of a recorded run holding (n, replicate) is the sweep's own (same
    replicates, seed and n); a recorded scenario file missing on this machine is found by name in
    ``scenario_dir``; an (n, replicate) the run does not hold is an error naming it."""
    import json
    from pathlib import Path

    from moestat.data.scenario_tables import ScenarioFileError
    from moestat.rates.sweep import recorded_unit

    root = Path(__file__).resolve().parents[2]
    over4 = root / "records" / "catalogue" / "gmoe-over4" / "gaussian-moe"
    unit, pos = recorded_unit(over4, 2000, 7)
    assert unit.n == 2000 and unit.replicates[pos] == 7 and len(unit.replicates) == 5  # chunk 5 of 40
    summary = json.loads((over4 / "summary.json").read_text())
    assert unit.seed == summary["config"]["seed"]
    with pytest.raises(ValueError, match="n = 2001, replicate 7"):
        recorded_unit(over4, 2001, 7)

    # a run recorded in another checkout: its scenario file's absolute path does not exist here
    summary = json.loads((root / "records" / "catalogue" / "laplace-gmoe" / "quick_over" / "summary.json").read_text())
    summary["config"]["scenario_file"] = str(tmp_path / "gone" / "laplace_gmoe_over.toml")
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ScenarioFileError, match="cannot be read"):
        recorded_unit(tmp_path, 1000, 4)
    unit, pos = recorded_unit(tmp_path, 1000, 4, scenario_dir=root / "moestat" / "rates" / "catalogue_files")
    assert unit.n == 1000 and unit.replicates[pos] == 4
