"""``moestat plot DIR``: the run folder is checked as input (exit 2), the drawing is work (exit 1)."""

import pytest

from moestat.cli import cmd_plot
from moestat.cli.common import run_main
from moestat.rates import RatesConfig, run_rates

TINY = dict(d=2, n_min=40, n_max=90, n_points=3, reps=3, max_iter=5, holdout=256, n_boot=100, quiet=True)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "run"
    run_rates(RatesConfig.from_dict({**TINY, "router": "perturbed,cosine"}), out)
    return out


@pytest.mark.slow
def test_redraw_accepts_aliases_and_hyphens(run_dir):
    rc = run_main(cmd_plot.main, [str(run_dir), "--losses", "voronoi,regression-l2", "--routers", "vanilla", "--name", "alias"])
    assert rc == 0
    assert (run_dir / "alias.pdf").stat().st_size > 0 and (run_dir / "alias.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv,word",
    [(["--losses", "nonsense"], "unknown loss"), (["--routers", "linear"], "not in"), (["--name", "../x"], "--name")],
)
def test_bad_input_exits_2_with_one_line(run_dir, argv, word, capsys):
    assert run_main(cmd_plot.main, [str(run_dir), *argv], prog="moestat plot") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and word in err, err


def test_missing_folder_exits_2(tmp_path, capsys):
    assert run_main(cmd_plot.main, [str(tmp_path / "nowhere")], prog="moestat plot") == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_bug_while_drawing_exits_1_with_a_traceback(run_dir, capsys, monkeypatch):
    import moestat.rates.figures as figures

    def broken(*args, **kwargs):
        raise ValueError("boom while drawing")

    monkeypatch.setattr(figures, "plot_convergence", broken)
    assert run_main(cmd_plot.main, [str(run_dir), "--name", "never"], prog="moestat plot") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "boom while drawing" in err
    assert not (run_dir / "never.pdf").exists()


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    # a scenario file that declares its loss (D1) with its own predicted_exponent (-0.49)
    from pathlib import Path

    toml = Path(__file__).resolve().parents[2] / "moestat" / "rates" / "catalogue_files" / "laplace_gmoe_exact.toml"
    out = tmp_path_factory.mktemp("plotfile") / "run"
    tiny = {k: v for k, v in TINY.items() if k != "d"}  # the file states its own dimension
    run_rates(RatesConfig.from_dict({**tiny, "scenario_file": str(toml), "estimator": "mle", "n_min": 200, "n_max": 400,
                                     "max_iter": 30, "reps": 2}), out)
    return out


@pytest.mark.slow
def test_a_scenario_file_run_is_redrawn_with_its_declared_loss_and_prediction(file_run, capsys):
    from moestat.rates.redraw import prepare_redraw

    plan = prepare_redraw(file_run)  # the default: the run's headline, as the sweep's own figure
    assert plan.losses == ("D1",) and "D1" in plan.df.columns and plan.predicted["D1"] == -0.49
    assert run_main(cmd_plot.main, [str(file_run), "--name", "declared"], prog="moestat plot") == 0
    assert (file_run / "declared.png").stat().st_size > 0
    assert run_main(cmd_plot.main, [str(file_run), "--losses", "D1,regression_l2", "--name", "two"], prog="moestat plot") == 0
    assert run_main(cmd_plot.main, [str(file_run), "--losses", "D9"], prog="moestat plot") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown loss 'D9'" in err and "D1" in err


@pytest.mark.slow
def test_a_refit_redraw_uses_the_files_predictions(file_run, tmp_path):
    import shutil

    from moestat.rates.redraw import draw_redraw, prepare_redraw

    run = tmp_path / "run"
    shutil.copytree(file_run, run)
    (run / "summary.json").unlink()  # no fits recorded: the redraw refits
    plan = prepare_redraw(run, name="refit")
    assert plan.fits is None
    import moestat.rates.figures as figures

    seen = {}
    real = figures.plot_convergence

    def spy(df, fits, *args, **kwargs):
        seen.update({f["loss"]: f.get("predicted") for f in fits})
        return real(df, fits, *args, **kwargs)

    figures.plot_convergence = spy
    try:
        draw_redraw(plan)
    finally:
        figures.plot_convergence = real
    assert seen == {"D1": -0.49}


def test_a_run_whose_scenario_file_is_gone_is_one_line_of_bad_input(file_run, tmp_path, capsys):
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(file_run, run)
    prov = json.loads((run / "provenance.json").read_text())
    prov["config"]["scenario_file"] = str(tmp_path / "gone.toml")
    (run / "provenance.json").write_text(json.dumps(prov))
    assert run_main(cmd_plot.main, [str(run)], prog="moestat plot") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gone.toml" in err and "cannot be read" in err
    assert not list(run.glob("convergence_replot.*"))


def test_a_declared_loss_without_finite_values_names_extras_csv(file_run, tmp_path):
    """A declared loss lives in extras.csv: when it has no finite value, the message names that file."""
    import shutil

    import pandas as pd

    from moestat.rates.redraw import prepare_redraw

    run = tmp_path / "run"
    shutil.copytree(file_run, run)
    ex = pd.read_csv(run / "extras.csv")
    ex["D1"] = float("nan")
    ex.to_csv(run / "extras.csv", index=False)
    with pytest.raises(ValueError, match=r"no finite values in \S*extras\.csv \(") as exc:
        prepare_redraw(run, losses=["D1"], name="x")
    assert "results.csv" not in str(exc.value)
