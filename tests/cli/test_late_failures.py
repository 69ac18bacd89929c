"""Issue 24, item 4: inputs that used to fail late (exit 1, a folder left behind) are refused during
validation: exit 2, one line on stderr, nothing written.  Each case is one reproduction."""

from __future__ import annotations

import pytest

from moestat.cli.main import main as moestat

CASES = {
    "rates n-max as a huge integer": (["rates", "--n-max", "1000000000000", "--quiet"], "--n-max"),
    "theory n-max as a huge integer": (["theory", "--quick", "--n-max", "1000000000000", "--quiet"], "--n-max"),
    "softmoe empty tokens": (["softmoe", "norm-target", "--tokens", "", "--quiet"], "--tokens"),
    "softmoe empty token in a list": (["softmoe", "norm-target", "--tokens", "5x2,,10x1", "--quiet"], "--tokens"),
    "softmoe patch not dividing the image": (["softmoe", "subsets", "--arch", "patch", "--patch", "3", "--quiet"], "--patch"),
    "lm dropout above one": (["lm", "--dropout", "1.5", "--quiet"], "--dropout"),
    "toy a billion experts": (["toy", "classify", "--experts", "1000000000", "--quiet"], "--experts"),
    "toy an empty item": (["toy", "classify", "--experts", "3,,5", "--quiet"], "--experts"),
    "rates an empty router": (["rates", "--router", "perturbed,,cosine", "--quiet"], "--router"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_before_anything_is_written(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, flag = CASES[case]
    out = tmp_path / "out"
    try:
        rc = moestat([*argv, "--out", str(out)])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and flag in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_router_list_with_an_empty_name_is_refused_from_python():
    from moestat.rates.config import RatesConfig

    with pytest.raises(ValueError, match="empty name"):
        RatesConfig.from_dict({"router": "perturbed,,cosine"})


def test_moestat_without_arguments_prints_usage_to_stderr(capsys):
    rc = moestat([])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and "usage" in cap.err.lower()


def test_one_prefix_per_subcommand(tmp_path, capsys):
    # argparse's refusal and the validation layer's name the same command
    for argv in (["softmoe", "subsets", "--experts", "x"], ["softmoe", "subsets", "--arch", "patch", "--patch", "3"]):
        try:
            moestat([*argv, "--out", str(tmp_path / "o")])
        except SystemExit:
            pass
        assert capsys.readouterr().err.startswith("moestat softmoe subsets: error:")


def test_plot_of_a_file_says_it_is_not_a_folder(tmp_path, capsys):
    f = tmp_path / "results.csv"
    f.write_text("x\n")
    assert moestat(["plot", str(f)]) == 2
    assert "is a file, not a run folder" in capsys.readouterr().err


@pytest.mark.parametrize("losses", ["", "voronoi,,mass"])
def test_plot_refuses_an_empty_loss(losses, tmp_path, capsys):
    with pytest.raises(SystemExit) as ei:
        moestat(["plot", str(tmp_path), "--losses", losses])
    assert ei.value.code == 2 and "--losses" in capsys.readouterr().err


def test_the_gaussian_family_picks_its_estimator():
    import argparse

    from moestat.cli.cmd_rates import config_from_args

    ns = argparse.Namespace(family="gaussian-moe")
    assert config_from_args(ns).estimator == "mle"


def test_the_missing_dataset_message_names_the_flag():
    from moestat.data.images import find_idx_files

    with pytest.raises(FileNotFoundError, match="--data-path"):
        find_idx_files("fashion-mnist", "/nonexistent/folder")


def test_every_door_has_the_same_device_n_jobs_and_threads_defaults():
    import argparse

    from tests.cli.test_main import _parsers

    seen = {}
    for p in _parsers():
        for a in p._actions:
            for flag in ("--device", "--n-jobs", "--threads"):
                if flag in a.option_strings:
                    default = a.default if a.default is not argparse.SUPPRESS else {"--device": "cpu", "--n-jobs": 1}.get(flag)
                    seen.setdefault(flag, {})[p.prog] = default
    assert set(seen["--device"].values()) == {"cpu"}, seen["--device"]
    assert set(seen["--n-jobs"].values()) == {1}, seen["--n-jobs"]
    assert set(seen["--threads"].values()) == {0}, seen["--threads"]


def test_workers_times_threads_never_exceed_the_cores(monkeypatch):
    from moestat import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert [threads.default_threads(j) for j in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert threads.resolve_threads(0, 2) == 4 and threads.resolve_threads(3, 2) == 3


@pytest.mark.slow
def test_the_package_sets_a_passive_openmp_wait_policy():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "MOESTAT_WAIT_POLICY")}
    code = "import moestat, os; print(os.environ.get('OMP_WAIT_POLICY'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # a user's choice is kept
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "ACTIVE"
