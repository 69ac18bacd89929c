"""The ``moestat`` command: dispatch, version, and the exit-status contract shared by every door."""

import subprocess
import sys
from pathlib import Path

import pytest

import moestat
from moestat.cli.common import UsageError, name_choice, run_main, usage_errors
from moestat.cli.main import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"  {name} " in out
    assert set(SUBCOMMANDS) >= {"rates", "plot", "theory", "softmoe", "toy", "realdata", "tagging", "lm"}


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"moestat {moestat.__version__}"


def test_unknown_subcommand_is_one_line_exit_2(capsys):
    assert main(["fit-everything"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown subcommand" in err and "rates" in err


def test_no_subcommand_prints_a_short_usage_to_stderr_and_exits_2(capsys):
    from moestat.cli.main import SUBCOMMANDS

    assert main([]) == 2
    cap = capsys.readouterr()
    # one line, as every usage error: every subcommand and where the rest is
    assert cap.out == "" and cap.err.count("\n") == 1 and "moestat --help" in cap.err
    assert cap.err.startswith("moestat: error: ")
    assert all(name in cap.err for name in SUBCOMMANDS)


def test_subcommand_help_names_the_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["rates", "--help"])
    assert exc.value.code == 0
    assert "usage: moestat rates" in capsys.readouterr().out


def test_usage_error_is_one_line_exit_2(capsys):
    def bad(argv):
        with usage_errors():
            raise ValueError("--reps must be >= 2\nsecond line is dropped")

    assert run_main(bad, [], prog="moestat x") == 2
    err = capsys.readouterr().err
    assert err == "moestat x: error: --reps must be >= 2\n"


def test_missing_file_during_validation_is_a_usage_error(tmp_path, capsys):
    def bad(argv):
        with usage_errors():
            open(tmp_path / "nope.toml", encoding="utf-8")

    assert run_main(bad, [], prog="moestat x") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.toml" in err


def test_error_after_the_work_started_is_internal_exit_1_with_traceback(capsys):
    def buggy(argv):
        with usage_errors():
            pass  # arguments were fine
        raise ValueError("shape mismatch deep inside a sweep")

    assert run_main(buggy, [], prog="moestat x") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error (ValueError)" in err and "not a problem with your input" in err


def test_interrupt_exits_130(capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    assert run_main(interrupted, [], prog="moestat x") == 130
    assert "interrupted" in capsys.readouterr().err


def test_debug_shows_the_traceback_of_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("MOESTAT_DEBUG", "1")

    def bad(argv):
        raise UsageError("bad flag")

    assert run_main(bad, [], prog="moestat x") == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("moestat x: error: bad flag")


def test_name_choice_accepts_hyphen_underscore_and_aliases():
    parse = name_choice(("perturbed", "cosine", "linear"), many=True)
    assert parse("perturbed-cosine, vanilla,linear") == ["perturbed", "cosine", "linear"]
    one = name_choice(("output_mixture", "stochastic"))
    assert one("output-mixture") == "output_mixture"
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="expected one of"):
        one("mixtur")


@pytest.mark.slow
def test_module_doors_outside_the_repository(tmp_path):
    # the installed package carries every door, the theory checks included
    r = subprocess.run([sys.executable, "-m", "moestat", "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and "theory" in r.stdout
    r = subprocess.run([sys.executable, "-m", "moestat.rates", "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and "usage: moestat rates" in r.stdout
    r = subprocess.run([sys.executable, "-m", "moestat", "theory", "--only", "pde", "--out", str(tmp_path / "th")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "th" / "theory_report.md").exists()


def _parsers():
    import argparse
    import importlib

    for name, (mod, _) in SUBCOMMANDS.items():
        p = importlib.import_module(mod).build_parser()
        yield p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                yield from a.choices.values()


def test_every_option_of_every_subcommand_has_help():
    import argparse

    missing = [f"{p.prog} {a.option_strings[0] if a.option_strings else a.dest}"
               for p in _parsers() for a in p._actions
               if not a.help and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    assert not missing, f"options without help text: {missing}"


def test_shared_options_mean_the_same_everywhere():
    # --seed, --out, --n-jobs, --device, --quiet, --resume, --threads: parsed by the same type
    # (defaults may differ per subcommand and are shown in --help)
    seen = {}
    for p in _parsers():
        for a in p._actions:
            for opt in ("--seed", "--n-jobs", "--device", "--quiet", "--resume", "--out", "--threads"):
                if opt in a.option_strings:
                    seen.setdefault(opt, []).append((p.prog, a.type, type(a).__name__))
    assert set(seen) == {"--seed", "--n-jobs", "--device", "--quiet", "--resume", "--out", "--threads"}
    for opt, uses in seen.items():
        kinds = {(t, k) for _, t, k in uses}
        assert len(kinds) == 1, f"{opt} is parsed differently across subcommands: {uses}"


def test_threads_is_on_every_door_that_computes_in_its_own_process():
    # README "Threads on a shared machine": the rate sweeps pin one thread per unit instead
    have = {p.prog.split()[1] for p in _parsers() for a in p._actions if "--threads" in a.option_strings}
    assert have == {"realdata", "lm", "tagging", "softmoe", "toy", "select"}


def test_every_option_of_every_subcommand_shows_its_default():
    # an option that takes a value says what it is when not given: argparse's default through the
    # shared formatter, or the help text's own "default ..." (computed defaults, "the preset's")
    import argparse

    from moestat.cli.common import HelpFormatter

    missing = []
    for p in _parsers():
        fmt = HelpFormatter(p.prog)
        for a in p._actions:
            if not a.option_strings or a.nargs == 0 or a.required or a.help == argparse.SUPPRESS:
                continue  # positionals, flags, required options, hidden aliases
            if "default" not in fmt._get_help_string(a):
                missing.append(f"{p.prog} {a.option_strings[0]}")
    assert not missing, f"options whose help shows no default: {missing}"


@pytest.mark.slow
def test_release_for_exit_shuts_the_loky_pool_down_and_freezes_the_heap():
    # issue 36: an idle loky pool's threads and the final garbage collection cost about 2.9 s of
    # the main job's exit; release_for_exit ends the pool (its workers with it) and freezes the heap
    import gc

    from joblib import Parallel, delayed
    from joblib.externals.loky import reusable_executor

    from moestat.cli.main import release_for_exit

    assert Parallel(n_jobs=2, backend="loky")(delayed(abs)(-i) for i in range(4)) == [0, 1, 2, 3]
    executor = reusable_executor._executor
    assert executor is not None
    workers = list(executor._processes.values())
    try:
        release_for_exit()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process goes on
    for p in workers:
        p.join(timeout=30)
        assert not p.is_alive()


def test_exit_process_exits_with_the_status(monkeypatch):
    import moestat.cli.main as cli_main

    called = []
    monkeypatch.setattr(cli_main, "release_for_exit", lambda: called.append(True))
    monkeypatch.setattr(cli_main, "may_end_now", lambda: False)  # else it would end this test process
    with pytest.raises(SystemExit) as exc:
        cli_main.exit_process(3)
    assert exc.value.code == 3 and called == [True]


def _exit_script(body: str) -> list[str]:
    """A Python process that ends through :func:`moestat.cli.main.exit_process` after ``body``."""
    import textwrap

    return [sys.executable, "-c", "import atexit, sys, threading, time\n"
            "from moestat.cli.main import exit_process\n" + textwrap.dedent(body)]


@pytest.mark.slow
def test_exit_process_runs_the_atexit_handlers_flushes_the_streams_and_keeps_the_status(tmp_path):
    # issue 36: the door's exit skips the interpreter's teardown (os._exit) but not what an exit
    # must do: atexit handlers, buffered output (no newline, so no line-buffered flush), the status
    import subprocess

    mark = tmp_path / "atexit.txt"
    done = subprocess.run(_exit_script(f"""
        atexit.register(lambda: open({str(mark)!r}, "w").write("ran"))
        sys.stdout.write("x" * 100000)
        sys.stderr.write("tail without a newline")
        exit_process(3)
    """), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "x" * 100000 and done.stderr == "tail without a newline"
    assert mark.read_text() == "ran"


@pytest.mark.slow
def test_exit_process_waits_for_a_working_non_daemon_thread(tmp_path):
    # a non-daemon thread still working: the fast end is not taken, the interpreter joins the thread
    import subprocess

    from moestat.cli.main import may_end_now

    assert may_end_now()  # this test process: only daemon threads besides the main one, if any
    mark = tmp_path / "thread.txt"
    done = subprocess.run(_exit_script(f"""
        from moestat.cli.main import may_end_now
        t = threading.Thread(target=lambda: (time.sleep(1.0), open({str(mark)!r}, "w").write("done")))
        t.start()
        print(may_end_now())
        exit_process(0)
    """), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["False"]
    assert mark.read_text() == "done"
