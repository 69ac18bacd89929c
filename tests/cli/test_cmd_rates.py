"""The ``python -m moestat.rates`` / ````moestat plot`` doors: bad input, summary schema, presets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moestat.cli.common import run_main
from moestat.rates.presets import PRESETS, load_toml
from moestat.cli import cmd_plot as plot_cli
from moestat.cli.cmd_rates import main
from moestat.rates import RatesConfig, run_rates

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d", "2", "--n-min", "40", "--n-max", "90", "--n-points", "3", "--reps", "3", "--max-iter", "5", "--n-boot", "100", "--quiet"]


def _run(argv, capsys):
    try:
        rc = run_main(main, argv, prog="moestat rates")
    except SystemExit as exc:  # argparse-level errors exit from the parser itself
        rc = exc.code
    err = capsys.readouterr().err
    return rc, err


def _listing(path: Path):
    return sorted((str(p.relative_to(path)), p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*")) if path.exists() else None


BAD = [
    (["--n-min", "-5"], "n-min"),
    (["--n-max", "2.5"], "n-max"),
    (["--n-min", "5000", "--n-max", "100"], "n_min"),
    (["--router", "foo"], "router"),
    (["--router", "perturbed,perturbed"], "router"),
    (["--tau", "-1"], "tau"),
    (["--tau", "0"], "tau"),
    (["--k-active", "5"], "k_active"),
    (["--k-active", "two"], "k-active"),
    (["--reps", "1"], "reps"),
    (["--n-points", "2"], "n_points"),
    (["--setting", "under"], "setting"),
    (["--estimator", "magic"], "estimator"),
    (["--init", "far"], "init"),
    (["--backend", "dask"], "scheduler"),
    (["--backend", "spark"], "backend"),
    (["--device", "tpu"], "device"),
    (["--preset", "nope"], "preset"),
    (["--window-min", "85"], "window"),
    (["--n-jobs", "0"], "n-jobs"),
    (["--extra-starts", "-1"], "extra-starts"),
    (["--extra-starts", "100"], "extra_starts"),
    (["--halfwidth", "0"], "halfwidth"),
    (["--figure-formats", "pdf,bmp"], "figure format"),
]


@pytest.mark.parametrize("argv,word", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_values_exit_2_with_one_line_and_write_nothing(argv, word, tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = _run(TINY + argv + ["--out", str(out)], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and word in err, err
    assert not out.exists()


def test_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, err = _run(TINY + ["--out", str(blocker / "sub")], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(blocker) in err
    rc, err = _run(TINY + ["--out", str(blocker)], capsys)
    assert rc == 2 and "not a directory" in err
    assert blocker.read_text() == "x"


@pytest.mark.parametrize(
    "text,word",
    [("reps = [1, 2", "malformed TOML"), ("reps = 3\nbogus = 1\n", "bogus"), ("[rates]\ntau = -2\n", "tau"), ('router = "perturbed,nope"\n', "router")],
)
def test_bad_toml(text, word, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    rc, err = _run(TINY + ["--config", str(cfg), "--out", str(out)], capsys)
    assert rc == 2 and err.count("\n") == 1 and word in err, err
    assert not out.exists()
    rc, err = _run(["--config", str(tmp_path / "missing.toml"), "--out", str(out)], capsys)
    assert rc == 2 and "missing.toml" in err


@pytest.mark.slow
def test_summary_schema_resume_guard_and_redraw(tmp_path, capsys):
    out = tmp_path / "run"
    rc, err = _run(TINY + ["--router", "perturbed,cosine", "--out", str(out)], capsys)
    assert rc == 0, err
    summary = json.loads((out / "summary.json").read_text())
    for name in ("results.csv", "provenance.json", "convergence.png", "convergence_all.png"):
        assert (out / name).stat().st_size > 0
    # issue 36: the figures in the default format only (png); the pdfs cost more than the pngs to write
    assert not list(out.glob("*.pdf"))
    assert summary["counts"]["fits"] == summary["counts"]["expected"] == 2 * 3 * 3
    assert {"converged", "failed", "nonfinite", "by_router"} <= set(summary["counts"])
    keys = {"router", "setting", "loss", "slope", "ci_low", "ci_high", "predicted", "consistent"}
    losses = set()
    for f in summary["fits"]:
        assert keys <= set(f)
        losses.add(f["loss"])
        if f["slope"] is not None:
            assert f["ci_low"] <= f["slope"] <= f["ci_high"]
    for word in ("voronoi", "single", "multi", "direction", "regression"):
        assert any(word in name for name in losses)
    prov = json.loads((out / "provenance.json").read_text())
    assert {"version", "git_commit", "config", "platform", "torch", "runs"} <= set(prov)
    assert prov["runs"][-1]["finished"] is not None

    # the same folder without --resume, or with --resume but another config, is refused untouched
    before = _listing(out)
    rc, err = _run(TINY + ["--router", "perturbed,cosine", "--out", str(out)], capsys)
    assert rc == 2 and "--resume" in err
    rc, err = _run(TINY + ["--router", "perturbed,cosine", "--seed", "1", "--out", str(out), "--resume"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "seed" in err
    assert _listing(out) == before
    # resuming a finished run recomputes nothing and returns the same fits
    again = run_rates(RatesConfig.from_dict({**summary["config"]}), out, resume=True)
    assert again["fits"] == summary["fits"]

    assert run_main(plot_cli.main, [str(out), "--losses", "voronoi,regression_l2", "--routers", "cosine", "--name", "re"]) == 0
    assert (out / "re.pdf").exists() and (out / "re.png").exists()
    assert run_main(plot_cli.main, [str(out), "--losses", "nonsense"]) == 2
    assert run_main(plot_cli.main, [str(tmp_path / "nowhere")]) == 2


@pytest.mark.slow
def test_help_has_examples():
    r = subprocess.run([sys.executable, "-m", "moestat.rates", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and "examples:" in r.stdout and "--scheduler" in r.stdout


@pytest.mark.parametrize("name", ["fig1a", "fig1b", "fig1a1e6"])
def test_simulation_toml_mirrors_preset(name):
    data = load_toml(ROOT / "studies" / "figure1" / f"{name}.toml")
    assert data == PRESETS[name]
    assert RatesConfig.from_preset(name) == RatesConfig.from_toml(ROOT / "studies" / "figure1" / f"{name}.toml")


def test_flags_override_config_which_overrides_preset(tmp_path):
    from moestat.cli.cmd_rates import build_parser, config_from_args

    cfg = tmp_path / "c.toml"
    cfg.write_text("reps = 7\nn_points = 5\n")
    ns = build_parser().parse_args(["--preset", "fig1a", "--config", str(cfg), "--n-points", "4"])
    c = config_from_args(ns)
    assert (c.reps, c.n_points, c.router, c.n_max) == (7, 4, ("perturbed", "cosine"), 128000)


def test_estimator_model_mismatch_is_caught_before_writing(tmp_path, capsys):
    from moestat.rates.sweep import estimator_registry

    if "em" not in estimator_registry():
        pytest.skip("EM estimator not available")
    out = tmp_path / "out"
    rc, err = _run(TINY + ["--estimator", "em", "--out", str(out)], capsys)  # EM needs a dense linear gate
    assert rc == 2 and err.count("\n") == 1
    assert not out.exists()


def test_a_bug_in_the_middle_of_a_sweep_exits_1_with_a_traceback(tmp_path, capsys, monkeypatch):
    """A ValueError raised while the sweep runs is an internal error, never "bad input" (exit 2)."""
    import moestat.rates.sweep as sweep

    def broken(*args, **kwargs):
        raise ValueError("boom inside run_unit")

    monkeypatch.setattr(sweep, "compute_losses", broken)
    rc, err = _run(TINY + ["--out", str(tmp_path / "out")], capsys)
    assert rc == 1
    assert "Traceback" in err and "boom inside run_unit" in err and "internal error" in err


def test_config_is_normalised_when_built_and_validate_does_not_mutate(tmp_path):
    cfg = RatesConfig.from_dict({"router": "perturbed-cosine, vanilla", "tau": 1, "k_active": None, "setting": "over"})
    assert cfg.router == ("perturbed", "cosine")
    assert cfg.tau == 1.0 and isinstance(cfg.tau, float)
    assert cfg.k_active == "dense" and cfg.scenario.k_active == "dense"
    before = cfg.to_dict()
    assert cfg.validate() is cfg
    assert cfg.to_dict() == before
    # TOML may spell routers and settings with hyphens or aliases
    toml = tmp_path / "c.toml"
    toml.write_text('[rates]\nrouter = ["perturbed-cosine", "softmax"]\n')
    assert RatesConfig.from_toml(toml).router == ("perturbed", "linear")
    # frozen: a change is a new object
    with pytest.raises(AttributeError):
        cfg.reps = 3
    assert cfg.replace(reps=3).reps == 3 and cfg.reps == 20
    # flat keys round-trip through to_dict (what summary.json and provenance.json hold)
    assert RatesConfig.from_dict(cfg.to_dict()) == cfg
    import pickle

    assert pickle.loads(pickle.dumps(cfg)) == cfg  # the flat-key attribute lookup survives pickling
    with pytest.raises(ValueError, match="unknown config key"):
        RatesConfig.from_dict({"bogus": 1})


@pytest.mark.slow
def test_figure_formats_write_only_the_files_asked_for_and_change_no_number(tmp_path, capsys):
    """Each convergence figure is drawn once and saved per format; ``none`` writes no figure; the
    results and the configuration (hash) do not depend on the flag."""
    runs = {}
    for formats in ("png", "none"):
        out = tmp_path / formats
        rc, err = _run(TINY + ["--figure-formats", formats, "--out", str(out)], capsys)
        assert rc == 0, err
        runs[formats] = out
    assert sorted(p.name for p in runs["png"].glob("convergence*")) == ["convergence.png", "convergence_all.png"]
    assert not list(runs["none"].glob("convergence*"))
    a, b = (json.loads((runs[f] / "summary.json").read_text()) for f in ("png", "none"))
    assert a["config_hash"] == b["config_hash"] and a["rows"] == b["rows"]  # same rows (sha256 of results.csv's)


def test_a_mixture_noise_file_is_fitted_by_mle_unless_told_otherwise():
    """Issue 35: ``--family gaussian-moe`` picked mle but a mixture-noise scenario file needed
    ``--estimator mle`` spelled out; now the file's noise picks it, an explicit flag still wins."""
    from moestat.cli.cmd_rates import build_parser, config_from_args

    p = build_parser()
    mix, additive = str(ROOT / "examples" / "gaussian_moe_d2.toml"), str(ROOT / "examples" / "sigmoid_exact.toml")
    assert config_from_args(p.parse_args(["--scenario", mix])).fitting.estimator == "mle"
    assert config_from_args(p.parse_args(["--scenario", mix, "--estimator", "em"])).fitting.estimator == "em"
    assert config_from_args(p.parse_args(["--scenario", additive])).fitting.estimator == "lse"


def test_n_jobs_is_auto_unless_given_and_bad_values_are_one_line(tmp_path, capsys):
    # issue 36: the command's default is auto (one process per usable core, capped by the work)
    from moestat.cli.cmd_rates import build_parser, config_from_args

    assert config_from_args(build_parser().parse_args(["--out", str(tmp_path / "o")])).n_jobs == "auto"
    assert config_from_args(build_parser().parse_args(["--n-jobs", "1", "--out", str(tmp_path / "o")])).n_jobs == 1
    assert "default auto" in " ".join(build_parser().format_help().split())
    for bad in ("many", "0", "-2", "auto"):  # auto is the default, not a value of the shared --n-jobs type
        out = tmp_path / f"bad{bad}"
        rc, err = _run(TINY + ["--n-jobs", bad, "--out", str(out)], capsys)
        assert rc == 2 and err.count("\n") == 1 and "--n-jobs" in err, err
        assert not out.exists()


def test_fig1a1e6_is_fig1a_with_its_grid_continued():
    """Only the grid differs from fig1a (and the cell errors are recorded): its factor-2 grid continued
    to 1 024 000, so the first seven sizes (and, streams being keyed by (n, replicate), their fits) are
    fig1a's."""
    new, old = RatesConfig.from_preset("fig1a1e6"), RatesConfig.from_preset("fig1a")
    assert list(new.grid.ns) == list(old.grid.ns) + [256_000, 512_000, 1_024_000]
    assert new.cell_errors and not old.cell_errors
    assert new.replace(grid=old.grid, cell_errors=False) == old
