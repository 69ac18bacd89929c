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


def test_redraw_accepts_aliases_and_hyphens(run_dir):
    rc = run_main(cmd_plot.main, [str(run_dir), "--losses", "voronoi,regression-l2", "--routers", "vanilla", "--name", "alias"])
    assert rc == 0
    assert (run_dir / "alias.pdf").stat().st_size > 0 and (run_dir / "alias.png").stat().st_size > 0


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
