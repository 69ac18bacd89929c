"""``moestat select``: a small end-to-end run, resuming, bad input, "no fit converged"."""

import json

import pytest

from moestat.cli.main import main
from moestat.selection.study import SelectConfig, SelectionError, check_selectable, read_records

ARGS = ["--k-bar", "3", "--n", "100,200,400", "--reps", "2", "--chunk", "2", "--max-iter", "60", "--quiet"]


def _strip(recs):
    return [{k: v for k, v in r.items() if k not in ("cpu_s", "wall_s")} for r in recs]


@pytest.mark.slow
def test_end_to_end_then_resume_after_a_kill(tmp_path, capsys):
    out = tmp_path / "sel"
    assert main(["select", *ARGS, "--out", str(out)]) == 0
    for name in ("config.json", "records.jsonl", "summary.csv", "summary.json", "selection_probability.png",
                 "khat_histograms.png", "merged_loss.png", "dendrograms.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    # 1 K_bar x 3 n x 5 criteria, each with the 2 replicates used or counted as failed
    assert len(summary["rows"]) == 15
    assert all(r["used"] + r["failed"] == 2 for r in summary["rows"])
    assert all(0 <= r["p_hat"] <= 1 and r["ci_low"] <= r["p_hat"] <= r["ci_high"] for r in summary["rows"] if r["used"])
    assert set(summary["rates"]["3"]) == {"D1_merged", "D2_over"}
    first = read_records(out / "records.jsonl")
    assert len(first) == 6
    # a kill: the last unit half written, its last line torn
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:25])
    assert main(["select", *ARGS, "--out", str(out), "--resume"]) == 0
    again = sorted(read_records(out / "records.jsonl"), key=lambda r: (r["n"], r["replicate"]))
    assert _strip(again) == _strip(sorted(first, key=lambda r: (r["n"], r["replicate"])))


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    for argv, msg in ((["--k-bar", "2"], "K_bar = 2 <= k* = 2"), (["--n", "10"], "at least 20"),
                      (["--k-bar", "3,3"], "must not repeat"), (["--reps", "0"], "positive integer")):
        out = tmp_path / "x"
        try:
            rc = main(["select", *argv, "--out", str(out)])
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code
        assert rc == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert not out.exists()


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    out = tmp_path / "sel"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"hash": "0" * 16, "config": {"scenario": "model1", "seed": 99}}))
    assert main(["select", *ARGS, "--out", str(out), "--resume"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_no_converged_fit_is_a_clear_error():
    cfg = SelectConfig(k_bars=(3,), ns=(100,), replicates=2)
    recs = [{"n": 100, "replicate": r, "status": {"1": "tol", "2": "tol", "3": "max_iter"},
             "per_kbar": {"3": {"dsc_converged": False, "ic_converged": False}}} for r in range(2)]
    with pytest.raises(SelectionError, match="no fit with K_bar = 3 converged at n = 100"):
        check_selectable(recs, cfg)
    recs[1]["per_kbar"]["3"]["dsc_converged"] = True
    check_selectable(recs, cfg)  # one converged replicate is enough to select


@pytest.mark.slow
def test_a_resumed_study_grows_its_grid_and_reuses_every_record(tmp_path):
    """More n and more replicates on --resume: the old records are kept as they are and only the new
    (n, replicate) are fitted; they equal a study run on the new grid from scratch."""
    small = ["--k-bar", "3", "--reps", "1", "--chunk", "1", "--max-iter", "60", "--quiet"]
    out, fresh = tmp_path / "grow", tmp_path / "fresh"
    assert main(["select", *small, "--n", "100", "--out", str(out)]) == 0
    (first,) = read_records(out / "records.jsonl")
    grown = ["--k-bar", "3", "--reps", "2", "--chunk", "2", "--max-iter", "60", "--quiet", "--n", "100,200"]
    assert main(["select", *grown, "--out", str(out), "--resume"]) == 0
    recs = read_records(out / "records.jsonl")
    assert len(recs) == 4 and recs[0] == first  # appended, the first line untouched
    assert json.loads((out / "config.json").read_text())["config"]["ns"] == [100, 200]
    assert main(["select", *grown, "--out", str(fresh)]) == 0
    key = lambda r: (r["n"], r["replicate"])  # noqa: E731
    assert _strip(sorted(recs, key=key)) == _strip(sorted(read_records(fresh / "records.jsonl"), key=key))
    summary = json.loads((out / "summary.json").read_text())
    assert {r["n"] for r in summary["rows"]} == {100, 200}
    # a change of model settings is still refused
    assert main(["select", *grown, "--seed", "1", "--out", str(out), "--resume"]) == 2


@pytest.mark.slow
def test_your_own_gaussian_moe_file_is_a_selection_scenario(tmp_path, capsys):
    """--scenario FILE: the d = 2, k* = 3 example of "Your own Gaussian MoE"; its atoms are the truth."""
    from pathlib import Path

    toml = Path(__file__).resolve().parents[2] / "examples" / "gaussian_moe_d2.toml"
    out = tmp_path / "own"
    args = ["select", "--scenario", str(toml), "--k-bar", "4", "--n", "150,300,600", "--reps", "2", "--chunk", "2",
            "--max-iter", "60", "--quiet", "--out", str(out)]
    assert main(args) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["scenario"] == str(toml) and len(cfg["scenario_sha256"]) == 64
    summary = json.loads((out / "summary.json").read_text())
    assert summary["k_star"] == 3 and {r["K_bar"] for r in summary["rows"]} == {4}
    (rec, *_) = read_records(out / "records.jsonl")
    assert set(rec["status"]) == {"1", "2", "3", "4"}
    # K_bar must exceed this file's k* = 3, and a least-squares (additive-noise) file is refused
    for argv, msg in ((["--scenario", str(toml), "--k-bar", "3"], "K_bar = 3 <= k* = 3"),
                      (["--scenario", str(toml.with_name("softmax_linear.toml"))], "drawn from the mixture"),
                      (["--scenario", str(tmp_path / "none.toml")], "no such file")):
        assert main(["select", *argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_n_jobs_gives_the_same_records_and_resume_says_this_runs_wall(tmp_path, capsys):
    """``--n-jobs`` (issue 35: the docs said every door shares it): 2 loky workers give the records of
    one, times apart.  A ``--resume`` with nothing left to fit prints its own wall beside the units'
    wall summed over the runs (it printed the cumulative one as this run's)."""
    small = ["--k-bar", "3", "--n", "100,200", "--reps", "2", "--chunk", "1", "--max-iter", "60"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["select", *small, "--quiet", "--out", str(one)]) == 0
    assert main(["select", *small, "--quiet", "--n-jobs", "2", "--out", str(two)]) == 0
    key = lambda r: (r["n"], r["replicate"])  # noqa: E731
    assert _strip(sorted(read_records(one / "records.jsonl"), key=key)) == \
        _strip(sorted(read_records(two / "records.jsonl"), key=key))
    capsys.readouterr()
    assert main(["select", *small, "--out", str(one), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "unit " not in out  # nothing was fitted again
    t = json.loads((one / "summary.json").read_text())["time"]
    assert f"wall this run {t['wall_s_this_run']:.1f} s" in out
    assert f"units' wall summed over every run {t['wall_s_total']:.1f} s" in out
    assert t["wall_s_this_run"] < t["wall_s_total"]


def test_the_n_axis_is_ticked_at_the_sample_sizes_only():
    """Issue 35: on a log axis spanning less than a decade matplotlib labelled minor ticks too and the
    labels overlapped; the selection figures now label exactly the sample sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.selection.summary import _n_axis

    fig, ax = plt.subplots()
    ax.plot([100, 400], [1, 2])
    _n_axis(ax, [100, 200, 400, 1000, 2000, 20000])
    fig.canvas.draw()
    assert list(ax.get_xticks()) == [100, 200, 400, 1000, 2000, 20000]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "200", "400", "1k", "2k", "20k"]
    assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
    plt.close(fig)
