"""What a new user meets with a scenario file: the curve is labelled by the file's ``name``, a renamed
copy resumes (or is refused for the setting that really differs), a finished run's resume says that
it only re-analyses, and a re-analysis with another statistic is written beside the first."""

import json
import shutil
from pathlib import Path

import pytest

from moestat.cli.main import main
from moestat.rates import RatesConfig, run_rates
from moestat.rates.config import file_label
from moestat.rates.resolve import Experiment

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "guide"
ARGS = ["--n-min", "200", "--n-max", "800", "--n-points", "3", "--reps", "2", "--max-iter", "20", "--n-boot", "50",
        "--figure-formats", "none"]

pytestmark = pytest.mark.usefixtures("no_figures")  # tests/rates/conftest.py


def _without_name(text: str) -> str:
    """The scenario file without its top-level ``name`` (the first one; losses have their own)."""
    return text.replace('name = "sigmoid-exact"\n', "", 1)


def test_the_label_is_the_files_name_else_its_stem(tmp_path):
    named = tmp_path / "some_file.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", named)
    assert file_label(str(named)) == "file:sigmoid-exact"
    assert RatesConfig.from_dict({"scenario_file": str(named)}).router == ("file:sigmoid-exact",)
    unnamed = tmp_path / "plain.toml"
    unnamed.write_text(_without_name(named.read_text()))
    assert file_label(str(unnamed)) == "file:plain"
    assert file_label("dir/mine.py:scenario") == "file:mine.scenario"
    # a stored run's label from its path (written before labels came from name) names its rows: kept
    stored = RatesConfig.from_dict({"router": "file:some_file", "scenario_file": str(named)})
    assert stored.router == ("file:some_file",)
    other = RatesConfig.from_dict({"router": "file:elsewhere", "scenario_file": str(named)})
    assert other.router == ("file:sigmoid-exact",)


@pytest.mark.slow
def test_a_renamed_copy_resumes_and_a_finished_resume_says_it_only_reanalyses(tmp_path, capsys):
    src = tmp_path / "a.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    out = tmp_path / "o"
    assert main(["rates", "--scenario", str(src), *ARGS, "--quiet", "--out", str(out)]) == 0
    copy = tmp_path / "b.toml"
    shutil.copy(src, copy)
    capsys.readouterr()
    assert main(["rates", "--scenario", str(copy), *ARGS, "--quiet", "--out", str(out), "--resume"]) == 0
    assert "nothing to fit: all 6 rows present; re-analysing" in capsys.readouterr().err
    summary = (out / "summary.json").read_bytes()
    # another statistic: written beside the mean's analysis, which is kept as it was
    assert main(["rates", "--scenario", str(copy), *ARGS, "--out", str(out), "--resume", "--statistic", "median"]) == 0
    captured = capsys.readouterr()
    assert (out / "summary.json").read_bytes() == summary
    median = json.loads((out / "summary_median.json").read_text())
    assert median["config"]["statistic"] == "median"
    assert "summary_median.json" in captured.err and f"wrote {out / 'summary_median.json'}" in captured.out


@pytest.mark.slow
def test_a_renamed_copy_without_name_is_refused_for_its_label_not_a_missing_digest(tmp_path, capsys):
    src = tmp_path / "a.toml"
    src.write_text(_without_name((EXAMPLES / "sigmoid_exact.toml").read_text()))
    out = tmp_path / "o"
    assert main(["rates", "--scenario", str(src), *ARGS, "--quiet", "--out", str(out)]) == 0
    copy = tmp_path / "b.toml"
    shutil.copy(src, copy)
    capsys.readouterr()
    assert main(["rates", "--scenario", str(copy), *ARGS, "--quiet", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "differs in: router, scenario_file" in err and "file:a" in err and "file:b" in err
    assert "does not record the scenario file's digest" not in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_folder_labelled_by_the_path_before_still_resumes(tmp_path, capsys):
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    out = tmp_path / "o"
    from moestat.rates.presets import scenario_file_defaults  # the CLI's defaults for a file (its chunk)

    cfg = RatesConfig.from_dict(scenario_file_defaults({"router": "file:s", "scenario_file": str(src), "n_min": 200,
                                                        "n_max": 800, "n_points": 3, "reps": 2, "max_iter": 20,
                                                        "n_boot": 50, "quiet": True}))
    assert cfg.router == ("file:s",)
    run_rates(cfg, out, figure_formats="none")
    capsys.readouterr()
    assert main(["rates", "--scenario", str(src), *ARGS, "--quiet", "--out", str(out), "--resume"]) == 0
    assert "nothing to fit: all 6 rows present" in capsys.readouterr().err


def _sigmoid_mixture(tmp_path) -> Path:
    p = tmp_path / "sig.toml"
    p.write_text('name = "sig"\n[gate]\nnormalisation = "sigmoid"\n[expert]\nkind = "linear"\n[noise]\nmodel = "mixture"\n'
                 '[[atoms]]\nbeta0 = 0.5\nbeta1 = [1.0]\neta = [1.0, 0.0]\nvariance = 0.1\n'
                 '[[atoms]]\nbeta0 = -0.5\nbeta1 = [-1.0]\neta = [-1.0, 0.5]\nvariance = 0.1\n')
    return p


def test_the_default_losses_and_the_voronoi_column_of_a_mixture_file_are_named_as_the_docs_say(tmp_path):
    ex = Experiment.of(RatesConfig.from_dict({"scenario_file": str(_sigmoid_mixture(tmp_path)), "estimator": "mle"}))
    first = ex.scenarios[ex.config.router[0]]
    assert [s.name for s in first.losses] == ["D1"] and first.losses[0].mass == "sigmoid"
    assert ex.voronoi_holds == "D1"  # the voronoi column is that loss: the figure names it
    # the pages' words, whatever the line breaks
    own_model, own_gmoe = (" ".join((DOCS / name).read_text().split()) for name in ("own_model.rst", "own_gmoe.rst"))
    assert "``gaussian_D2`` over-fitted, ``gaussian_D1`` exact" in own_model
    assert "``D1`` exact" not in own_model
    assert "Any other mixture file that declares no loss" in own_model
    assert "the default loss is ``D1``" in own_gmoe
    # the voronoi column of a mixture file is documented as its first loss, not the softmax-mass D3/D2
    assert "``noise.model = \"mixture\"`` it is the file's *first* loss" in own_model


@pytest.mark.slow
def test_plot_draws_a_cell_error_the_run_wrote_to_extras_csv(tmp_path, monkeypatch):
    """``moestat plot --losses weighted_single`` of a ``--cell-errors`` run: drawn (it was refused as
    an unknown loss), with no prediction on a scenario file (no theorem covers a user's model)."""
    import moestat.rates.figures as figures

    drawn = {}
    monkeypatch.setattr(figures, "plot_convergence", lambda df, fits, stem, **k: drawn.update(fits=fits, **k) or [])
    src = tmp_path / "s.toml"
    shutil.copy(EXAMPLES / "sigmoid_exact.toml", src)
    out = tmp_path / "o"
    assert main(["rates", "--scenario", str(src), *ARGS, "--quiet", "--cell-errors", "--out", str(out)]) == 0
    fits = {f["loss"]: f for f in json.loads((out / "summary.json").read_text())["fits"]}
    assert fits["weighted_single"]["predicted"] is None and fits["weighted_multi"]["predicted"] is None
    assert main(["plot", str(out), "--losses", "weighted_single"]) == 0
    assert drawn["losses"] == ["weighted_single"]
