"""The guide's Python page (docs/guide/python_api.rst) runs as printed: a scenario file to a fitted
rate with its interval and a figure in ten lines, and the whole sweep in one call."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "python_api.rst"


def _blocks() -> list[str]:
    # the same extraction as tests/docs/test_guide_examples.py
    text = PAGE.read_text(encoding="utf-8")
    pattern = r"^\.\. example-run\n\n\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)"
    return ["\n".join(line[3:] for line in m.group(1).split("\n")) for m in re.finditer(pattern, text, flags=re.M)]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "softmax_linear.toml", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    import matplotlib

    matplotlib.use("Agg")
    return tmp_path


def test_the_ten_line_example_runs_as_printed(in_tmp, capsys):
    code = _blocks()[0]
    body = [line for line in code.splitlines() if line.strip() and not line.startswith(("import ", "from "))]
    assert len(body) <= 11, body  # ten lines, the loop's body included (and the print)
    scope = {"__name__": "guide_example"}
    exec(compile(code, str(PAGE), "exec"), scope)
    out = capsys.readouterr().out.strip()
    assert re.fullmatch(r"D3: slope -?\d+\.\d\d \[-?\d+\.\d\d, -?\d+\.\d\d\], predicted -0\.5", out), out
    assert (in_tmp / "rate.png").stat().st_size > 0
    rate = scope["rate"]
    assert rate["ci_low"] <= rate["slope"] <= rate["ci_high"] and len(scope["losses"]) == 4
    assert all(np.asarray(v).shape == (4,) for v in scope["losses"])
    import matplotlib.pyplot as plt

    plt.close("all")


def test_the_sweep_example_runs_as_printed(in_tmp, capsys, monkeypatch):
    import moestat.rates.figures as figures

    monkeypatch.setattr(figures, "plot_convergence", lambda *a, **k: [])  # the figure is not under test here
    exec(compile(_blocks()[1], str(PAGE), "exec"), {"__name__": "guide_example"})
    out = capsys.readouterr().out.strip()
    assert out == "True -0.5 ['by_router', 'converged', 'expected', 'failed', 'fits', 'nonfinite']"
    assert f"``{out}``" in PAGE.read_text()
    assert (in_tmp / "runs" / "softmax_linear" / "results.csv").is_file()


def test_every_argument_a_user_need_not_choose_has_a_default():
    import inspect

    from moestat.data.scenario_files import FileScenario
    from moestat.estimators import estimator_for
    from moestat.rates.fit import slope_with_interval

    for fn, names in ((estimator_for, ("name", "max_iter", "random_state", "device")),
                      (FileScenario.near_truth_start, ("scale", "rng")),
                      (slope_with_interval, ("rng", "n_boot", "statistic"))):
        params = inspect.signature(fn).parameters
        assert all(params[n].default is not inspect.Parameter.empty for n in names), fn
