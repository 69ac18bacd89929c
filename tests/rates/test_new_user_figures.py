"""What a new user meets in the figures and the printed table: a y-axis that names the Voronoi loss,
a caption that says where the dashed line is anchored, a loss with no value dropped with a reason,
a title clear of a tall grid's panels, columns as wide as their content."""

import numpy as np
import pytest

from moestat.rates import labels
from moestat.rates.experiment import format_table
from moestat.rates.figures import DASHED_LIFT, draw_convergence

from tests.rates.test_figures import _df, _fits


def _note(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts).replace("\n", " ")


def test_the_y_axis_names_the_voronoi_loss_and_the_caption_the_dashed_lines_anchor():
    import matplotlib.pyplot as plt

    df = _df(setting="exact")
    f = draw_convergence(df, _fits(df, ("voronoi",)), losses=["voronoi"])
    try:
        assert f.axes[0].get_ylabel() == "Voronoi loss D3"
        assert f"drawn from {DASHED_LIFT:g} x the first curve's mean at its smallest n" in _note(f)
    finally:
        plt.close(f)
    assert labels.axis_label("voronoi", "over") == "Voronoi loss D2"
    assert labels.axis_label("voronoi_direction", "exact") == "Voronoi loss D3, directions only"
    assert labels.axis_label("voronoi", "exact", likelihood=True) == "Voronoi loss D1"
    assert labels.axis_label("mass", "exact") == "mass error"


def test_a_mixture_files_voronoi_panel_names_the_loss_it_holds():
    """A mixture-noise file's ``voronoi`` column is its first declared loss (sigmoid mass and all),
    not the Gaussian MoE's D1: legend and axis say so."""
    import matplotlib.pyplot as plt

    df = _df(setting="exact", routers=("file:mine",))
    df["estimator"] = "mle"
    f = draw_convergence(df, _fits(df, ("voronoi",)), losses=["voronoi"], voronoi_holds="D_sigmoid")
    try:
        assert f.axes[0].get_ylabel() == "Voronoi loss D_sigmoid"
        texts = [t.get_text() for t in f.axes[0].get_legend().get_texts()]
        assert any(t.startswith("file:mine, D_sigmoid: slope") for t in texts), texts
    finally:
        plt.close(f)


def test_an_undefined_loss_is_one_line_not_a_row_of_dashes_and_the_figure_says_it_is_not_drawn():
    import matplotlib.pyplot as plt

    fit = {"router": "perturbed", "setting": "exact", "loss": "voronoi", "slope": -0.5, "ci_low": -0.6,
           "ci_high": -0.4, "predicted": -0.5, "category": "consistent", "window": [100, 400], "reason": "ok"}
    undefined = {"router": "perturbed", "setting": "exact", "loss": "param_multi", "slope": None, "ci_low": None,
                 "ci_high": None, "predicted": None, "category": None, "window": None,
                 "reason": "not defined in this setting (no finite positive value)"}
    summary = {"fits": [fit, undefined], "counts": {"fits": 2, "expected": 2, "converged": 2, "failed": 0, "nonfinite": 0},
               "tolerance": 0.15}
    text = format_table(summary)
    assert "not shown: param_multi: no shared cells in an exact fit" in text
    assert not any(line.startswith("perturbed param_multi") for line in text.splitlines())
    assert "  perturbed param_multi:" not in text
    df = _df(setting="exact")
    f = draw_convergence(df, _fits(df, ("voronoi",)), losses=["voronoi"],
                         not_drawn=["param_multi (no shared cells in an exact fit)"])
    try:
        assert "not drawn: param_multi (no shared cells in an exact fit)" in _note(f)
    finally:
        plt.close(f)


def test_table_columns_are_as_wide_as_a_long_router_label():
    fits = [{"router": "file:a-rather-long-scenario-name", "loss": "D_sigmoid_declared", "slope": -0.5, "ci_low": -0.6,
             "ci_high": -0.4, "predicted": -0.5, "category": "consistent", "window": [100, 400]},
            {"router": "file:a-rather-long-scenario-name", "loss": "voronoi", "slope": -0.25, "ci_low": -1.0,
             "ci_high": 0.5, "predicted": None, "category": None, "window": [100, 400]}]
    summary = {"fits": fits, "counts": {"fits": 2, "expected": 2, "converged": 2, "failed": 0, "nonfinite": 0},
               "tolerance": 0.15}
    lines = format_table(summary).splitlines()
    head, rows = lines[0], lines[2:4]
    for col in ("slope", "pred", "window"):  # every row's cell ends (or starts) under its title
        at = head.index(col)
        assert all(len(r) >= at for r in rows)
    assert rows[0].index("-0.500") == rows[1].index("-0.250")  # the slope column is aligned
    assert rows[0].index("consistent") == head.index("category")


@pytest.mark.slow
@pytest.mark.parametrize("n_panels", [11])
def test_a_tall_grid_keeps_its_title_above_every_panel(n_panels):
    import matplotlib.pyplot as plt

    df = _df()
    losses = []
    for i in range(n_panels):
        df[f"l{i}"] = df["voronoi"] * (i + 1)
        losses.append(f"l{i}")
    f = draw_convergence(df, _fits(df, losses), losses=losses)
    try:
        f.canvas.draw()
        r = f.canvas.get_renderer()
        title = f._suptitle.get_window_extent(r)
        for ax in f.axes:
            assert ax.get_tightbbox(r).y1 < title.y0, ax.get_ylabel()
    finally:
        plt.close(f)
