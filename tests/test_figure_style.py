"""Figures a reviewer accepts (issue 24, item 6), checked on every door's figures.

The checker (:func:`moestat.plotting.figure_problems`) is tested first on figures that break each
rule, so that a check which cannot fail would show here; then every door's figure is drawn from
small made-up results (or a tiny run) and must pass it.  Tables: one seed is "(1 seed)", never
"± nan" or "± 0".
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from moestat.plotting import PRINT_WIDTH_PX, SYNTHETIC, figure_problems, mean_sd, panel_grid, tick_style  # noqa: E402


@pytest.fixture
def saved(monkeypatch):
    """Every figure saved during the test: ``(figure, path, dpi)`` (the figure stays drawable)."""
    got = []
    original = Figure.savefig

    def record(self, fname, *args, **kwargs):
        got.append((self, str(fname), kwargs.get("dpi")))
        return original(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    yield got
    plt.close("all")


def _pngs(saved, name: str | None = None):
    return [(f, p, d) for f, p, d in saved if p.endswith(".png") and (name is None or name in Path(p).name)]


def _bad_table_cells(text: str) -> list[str]:
    import re

    return re.findall(r"(?:±|\+-)\s*(?:nan|0(?:\.0+)?)(?![\d.])", text)


# --- the checker itself fails on what it must catch -------------------------------------------

@pytest.mark.slow
def test_the_checker_finds_a_blank_slot_and_panel_grid_leaves_none():
    fig, axes = plt.subplots(2, 3)
    for ax in axes.flat[:5]:
        ax.plot([1, 2], [1, 2])
    assert any("empty" in p for p in figure_problems(fig))
    fig2 = plt.figure()
    axs = panel_grid(fig2, 5, 3)
    for ax in axs:
        ax.plot([1, 2], [1, 2])
    assert len(fig2.axes) == 5 and not figure_problems(fig2)
    # the short last row is centred: its two panels sit half a panel in from either side
    x0 = sorted(round(ax.get_position().x0, 3) for ax in axs[3:])
    first_row = sorted(round(ax.get_position().x0, 3) for ax in axs[:3])
    assert first_row[0] < x0[0] < first_row[1] < x0[1] < first_row[2]
    plt.close("all")


@pytest.mark.slow
def test_the_checker_finds_mixed_tick_styles_legend_counts_width_and_titles():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([2000, 2245, 4000], [1, 2, 3], label="a")
    ax.set_xticks([2000, 2245, 4000], ["2k", "2245", "4k"])  # the old rates axis
    ax.legend()
    problems = figure_problems(fig, min_px=PRINT_WIDTH_PX, dpi=150, curves=2, title_contains=SYNTHETIC)
    assert any("x tick labels in several styles" in p for p in problems)
    assert any("1 entries for 2 curves" in p for p in problems)
    assert any("600 px wide" in p for p in problems)
    assert any(SYNTHETIC in p for p in problems)
    assert tick_style("$5\\times10^{-2}$") == "power" and tick_style("2k") == "suffix" and tick_style("0.05") == "plain"
    assert tick_style("expert") is None
    plt.close(fig)


def test_mean_sd_says_one_seed_instead_of_a_spread():
    assert mean_sd(0.8123, float("nan"), 1) == "0.8123 (1 seed)"
    assert mean_sd(0.8123, 0.0, 1) == "0.8123 (1 seed)"
    assert mean_sd(0.8123, 0.01, 3) == "0.8123 ± 0.0100"
    assert mean_sd(1.0, 0.5, 2, 1, pm="+-") == "1.0 +- 0.5"
    assert mean_sd(float("nan"), 0.1, 3) == "-"
    assert _bad_table_cells("| 2.48 ± nan | 2.49 ± 0.0000 | 1.0 +- 0.000 |") == ["± nan", "± 0.0000", "+- 0.000"]
    assert not _bad_table_cells("| 2.48 ± 0.03 | 2.49 (1 seed) | 1.0 +- 0.05 |")


# --- rates ------------------------------------------------------------------------------------

def _rates_df(routers=("perturbed", "cosine"), ns=(2000, 2245, 2520, 2828, 3175, 3564, 4000), reps=4):
    import pandas as pd

    from moestat.rates.store import RESULT_COLUMNS

    rng = np.random.default_rng(0)
    rows = []
    for router in routers:
        for n in ns:
            for r in range(reps):
                row = {c: 0 for c in RESULT_COLUMNS}
                v = n ** -0.5 * rng.lognormal(0, 0.3)
                row.update(scenario="s", router=router, setting="exact", n=n, replicate=r, estimator="lse",
                           converged=True, status="ftol", voronoi=v, voronoi_direction=v, param_single=v,
                           mass=30 * v, regression_l2=0.3 * v)
                rows.append(row)
    return pd.DataFrame(rows)


def _rates_fits(df, losses, slope=True):
    return [{"router": r, "loss": loss, "slope": -0.5 if slope else None, "ci_low": -0.6, "ci_high": -0.4,
             "predicted": -0.5, "window": [2000, 4000], "log_mean": {"slope": -0.5, "intercept": 0.0}}
            for r in df["router"].unique() for loss in losses]


def test_a_scenario_files_slope_is_labelled_predicted_not_theorem():
    # a loss a scenario file declares with its own predicted_exponent carries its author's slope
    # (catalogue laplace-gmoe: a slope read off a paper's figure, not a theorem's exponent); a
    # built-in loss's exponent, or a theorem named by default for the file, is the theorem's
    from moestat.rates.figures import draw_convergence

    df = _rates_df()
    df["router"] = df["router"].map({"perturbed": "file:laplace_gmoe_over_box", "cosine": "cosine"})
    df["D2"] = df["voronoi"]
    file_only = ["file:laplace_gmoe_over_box"]
    fig = draw_convergence(df, _rates_fits(df, ["D2"]), losses=["D2"], routers=file_only)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert texts[-1] == "predicted: slope \u22121/2" and not any("theorem" in t for t in texts)
    notes = " ".join(" ".join(t.get_text().split()) for t in fig.texts)  # the note is wrapped
    assert "dashed: the slope the scenario file predicts" in notes and "theorem" not in notes
    plt.close(fig)
    fits = [{**f, "prediction_source": "Theorem 1 of a paper"} for f in _rates_fits(df, ["D2"])]
    fig = draw_convergence(df, fits, losses=["D2"], routers=file_only)  # a theorem named by default
    assert fig.axes[0].get_legend().get_texts()[-1].get_text() == "theorem: slope \u22121/2"
    plt.close(fig)
    fig = draw_convergence(df, _rates_fits(df, ["voronoi"]), losses=["voronoi"], routers=file_only)  # a built-in loss
    assert fig.axes[0].get_legend().get_texts()[-1].get_text() == "theorem: slope \u22121/2"
    plt.close(fig)
    df.loc[df["router"] == "cosine", "D2"] = df["voronoi"]
    fig = draw_convergence(df, _rates_fits(df, ["D2"]), losses=["D2"])  # both kinds on one dashed line
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sorted(texts[-1].split(":")[0].split(" and ")) == ["predicted", "theorem"]
    plt.close(fig)


@pytest.mark.slow
def test_rates_figure_one_key_per_router_no_blank_slot_one_tick_style():
    from moestat.rates.figures import draw_convergence

    losses = ["voronoi", "voronoi_direction", "param_single", "mass", "regression_l2"]
    df = _rates_df()
    fig = draw_convergence(df, _rates_fits(df, losses), losses=losses)
    # two routers and the theorem's line: three keys per panel, each router's marker, bar and line in one
    assert not figure_problems(fig, curves=3)
    assert len(fig.axes) == 5
    leg = fig.axes[0].get_legend()
    assert [t.get_text().split(",")[0] for t in leg.get_texts()] == ["perturbed cosine", "vanilla cosine", "theorem: slope \u22121/2"]
    xt = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert xt == ["2000", "2245", "2520", "2828", "3175", "3564", "4000"]  # not 2k beside 2245
    plt.close(fig)


def test_rates_note_names_only_the_lines_drawn():
    from moestat.rates.figures import draw_convergence

    df = _rates_df()
    note = lambda f: " ".join(" ".join(t.get_text() for t in f.texts).split())  # noqa: E731
    fig = draw_convergence(df, _rates_fits(df, ["voronoi"]), losses=["voronoi"])
    assert "solid: least-squares fit" in note(fig) and "dashed: the theorem" in note(fig)
    plt.close(fig)
    fig = draw_convergence(df, _rates_fits(df, ["voronoi"], slope=False), losses=["voronoi"])
    assert "solid" not in note(fig) and "dashed" not in note(fig)  # no fit drawn: no line named
    assert not [line for line in fig.axes[0].lines if line.get_linestyle() in ("-", "--") and len(line.get_xdata()) > 2]
    assert not figure_problems(fig, curves=2)
    plt.close(fig)


# --- realdata ---------------------------------------------------------------------------------

def _realdata_rows(gates=("dense", "noisy_topk_load", "cosine", "perturbed", "softmoe"), seeds=1, experts=4, classes=10):
    rng = np.random.default_rng(1)
    return [{"gate": g, "seed": s, "tokens_per_expert": rng.integers(1, 100, experts).tolist(),
             "counts": rng.integers(0, 30, (experts, classes)).tolist()} for g in gates for s in range(seeds)]


@pytest.mark.slow
def test_realdata_figures_print_size_labelled_no_blank_slot(tmp_path, saved):
    from moestat.experiments.realdata import plot_class_heatmaps, plot_router_distribution

    rows = _realdata_rows(seeds=1)
    plot_router_distribution(rows, tmp_path / "router_distribution", dataset="digits")
    plot_class_heatmaps(rows, tmp_path / "class_expert_heatmaps", dataset="digits")
    for name in ("router_distribution", "class_expert_heatmaps"):
        (fig, _, dpi), = _pngs(saved, name)
        assert plt.imread(tmp_path / f"{name}.png").shape[1] >= PRINT_WIDTH_PX  # the written file, not only the settings
        assert not figure_problems(fig, min_px=PRINT_WIDTH_PX, dpi=dpi), name
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.get_title()]
        assert len(panels) == 5
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in panels), name
    assert "1 seed" in _pngs(saved, "router_distribution")[0][0]._suptitle.get_text()
    heat = _pngs(saved, "class_expert_heatmaps")[0][0]
    assert any(ax.get_ylabel() == "share of the class" for ax in heat.axes)  # the colour bar


def test_realdata_table_says_one_seed():
    from moestat.experiments.realdata import format_table, summarise

    rows = [{"gate": "dense", "test_accuracy": 0.9, "H_s": 1.0, "H_u": 1.5, "I_EY": 0.5, "usage_entropy": 2.0,
             "n_params": 100, "seconds_per_epoch": 0.1}]
    text = format_table(summarise(rows), markdown=True)
    assert "0.9000 (1 seed)" in text and not _bad_table_cells(text)


# --- toy --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_toy_figures_have_legends_and_colour_bars_and_tables_say_one_seed(tmp_path, saved):
    from moestat.cli.cmd_toy import main

    out = tmp_path / "toy"
    assert main(["classify", "--method", "top1", "--experts", "3", "--runs", "1", "--epochs", "1", "--quiet",
                 "--out", str(out)]) == 0
    (fig, _, _), = _pngs(saved, "regions_top1_M3")
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert [f"class {c}" for c in range(1, 7)] == texts[:6] and "misclassified" in texts
    assert "decision regions" in fig._suptitle.get_text()
    assert "(1 seed)" in (out / "classify_table.md").read_text()
    assert not _bad_table_cells((out / "classify_table.md").read_text())
    reg = tmp_path / "reg"
    assert main(["regress", "--method", "output_mixture", "--runs", "1", "--epochs", "1", "--quiet", "--out", str(reg)]) == 0
    (fig, _, _), = _pngs(saved, "expert_matrices")
    assert any(ax.get_ylabel() == "matrix entry" for ax in fig.axes)  # a colour bar
    assert fig._suptitle is not None and "rotation R" in fig._suptitle.get_text()
    assert not _bad_table_cells((reg / "regress_table.md").read_text())


# --- Soft MoE ---------------------------------------------------------------------------------

def _norm_result(seeds=1):
    runs = []
    for t in ("5x2", "2x5"):
        for n in (1, 2, 5):
            for s in range(seeds):
                runs.append({"tokens": t, "n_experts": n, "seed_index": s, "curve": list(np.linspace(50, 2, 20) / n),
                             "curve_steps": list(range(1, 21)),
                             "witness": [{"a": a, "relative_pair_error": 0.5 + 1 / a + 0.1 * n} for a in (10, 20, 40)]})
    return {"config": {"tokens": ["5x2", "2x5"], "experts": [1, 2, 5]}, "runs": runs, "constant_mse": 2.4}


@pytest.mark.slow
def test_softmoe_figures_are_titled_and_say_experts(tmp_path, saved):
    from moestat.experiments.softmoe_norm_target import plot_norm_target, plot_witness

    r = _norm_result()
    plot_norm_target(r, tmp_path / "loss")
    plot_witness(r, tmp_path / "witness")
    for name in ("loss", "witness"):
        (fig, _, _), = _pngs(saved, name)
        assert fig._suptitle is not None and fig._suptitle.get_text(), name
        leg = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert leg[:3] == ["1 expert", "2 experts", "5 experts"] and not any(t.startswith("n=") for t in leg)
        # one colour per number of experts, the same in both panels
        colours = [[line.get_color() for line in ax.get_lines() if line.get_color() not in ("k", "black")] for ax in fig.axes]
        assert colours[0] == colours[1] and len(set(colours[0])) == 3
        assert not figure_problems(fig)


def test_softmoe_tables_say_experts_and_one_seed(tmp_path):
    from moestat.experiments.softmoe_subsets import write_subset_outputs

    rows = [{"n_experts": 4, "k": 1, "seed_index": 0, "full": 0.8, "alg1": 0.6, "random_mean": 0.3, "random_sd": 0.02,
             "oracle": 0.85, "pct_retained": 70.0, "random_pct_retained": 40.0, "z": 9.0, "csum_share": 0.5,
             "evals_saved": 0.75}]
    result = {"config": {"dataset": "digits", "model_seeds": 1, "n_test": 360}, "models": [], "rows": rows}
    write_subset_outputs(result, tmp_path, echo=False)
    text = (tmp_path / "subsets_table.rst").read_text()
    assert "0.8000 (1 seed)" in text and "experts" in text.splitlines()[3] and not _bad_table_cells(text)


# --- tagging ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_tagging_demo_figures_say_synthetic_demo(tmp_path, saved):
    from moestat.experiments.tagging import format_table, load_task, run_experiment

    task = load_task("conll", demo_train=24, demo_val=8)
    s = run_experiment(task, ["baseline", "load"], tmp_path, epochs=1, progress=False, verbose=False)
    figs = _pngs(saved)
    assert {Path(p).name.split(".")[1] for _, p, _ in figs} == {"expert_usage", "loss_curves"}
    for fig, p, _ in figs:
        assert not figure_problems(fig, title_contains=SYNTHETIC), p
    curves = next(f for f, p, _ in figs if "loss_curves" in p)
    assert not figure_problems(curves, curves=2)  # one legend entry per gate
    text = format_table(s)
    assert "(1 seed)" in text and not _bad_table_cells(text)


def test_tagging_figures_of_real_data_do_not_say_synthetic(tmp_path, saved):
    from moestat.experiments.tagging import plot_curves

    rows = [{"gate": "load", "seed": 0, "history": [{"epoch": 1, "val_loss": 2.0}, {"epoch": 2, "val_loss": 1.5}]}]
    plot_curves(rows, tmp_path / "loss_curves", what="CoNLL-2003 from data/")
    (fig, _, _), = _pngs(saved)
    assert SYNTHETIC not in fig.axes[0].get_title() and "CoNLL-2003" in fig.axes[0].get_title()


# --- lm ---------------------------------------------------------------------------------------

def _lm_rows(routers=("linear", "cosine", "perturbed"), seeds=2, evals=10):
    rng = np.random.default_rng(2)
    rows = []
    for router in routers:
        for s in range(seeds):
            curve = [{"step": 100 * (e + 1), "val_bpc": 3.4 - 0.1 * e + 0.01 * rng.random(), "H_s": [1.5, 1.2],
                      "H_u": [1.9, 1.95]} for e in range(evals)]
            rows.append({"router": router, "seed": s, "curve": curve, "val_bpc": 2.3 + 0.01 * s, "test_bpc": 2.3,
                         "wall_seconds": 10.0, "tokens_per_second": 1000.0, "n_params": 1000, "test_H_s": [1.0, 1.0],
                         "test_H_u": [2.0, 2.0]})
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("evals", [2, 10])
def test_lm_curves_one_colour_per_router_and_few_points_said(tmp_path, saved, evals):
    from moestat.experiments.lm import MIN_EVAL_POINTS, _plots

    _plots(_lm_rows(evals=evals), tmp_path)
    (curves, _, _), = _pngs(saved, "curves")
    (routing, _, _), = _pngs(saved, "routing")
    assert not figure_problems(curves, curves=3)
    lines = curves.axes[0].get_lines()
    assert len({line.get_color() for line in lines}) == 3 and all(line.get_marker() == "o" for line in lines)
    assert ("evaluation point" in curves.axes[0].get_title()) == (evals < MIN_EVAL_POINTS)
    by_router: dict = {}
    for ax in routing.axes:
        for line in ax.get_lines():
            by_router.setdefault(line.get_color(), 0)
            by_router[line.get_color()] += 1
    assert len(by_router) == 3 and set(by_router.values()) == {4}  # 2 layers x 2 panels per router, one colour
    assert not figure_problems(routing)


def test_lm_table_says_one_seed_not_nan():
    from moestat.experiments.lm import format_table, summarise

    text = format_table(summarise(_lm_rows(seeds=1)))
    assert "2.3000 (1 seed)" in text and "nan" not in text and not _bad_table_cells(text)
    text = format_table(summarise(_lm_rows(seeds=2)))
    assert "2.3050 ± 0.0071" in text


@pytest.mark.slow
def test_tight_layout_measuring_each_box_once_gives_the_same_bytes_and_restores_matplotlib():
    """moestat.plotting.tight_layout keeps the first pass's layout boxes for the second pass (nothing
    moves between them): the subplot parameters, hence the PNG, are those of fig.tight_layout."""
    import io

    import matplotlib
    import matplotlib.artist as martist

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moestat.plotting import legend, panel_grid, tight_layout

    def draw(layout):
        fig = plt.figure(figsize=(6.2, 5.0))
        axes = panel_grid(fig, 3, 2)
        for i, ax in enumerate(axes):
            x = np.array([1e3, 2e3, 4e3, 8e3])
            (h,) = ax.loglog(x, (i + 1) * x ** -0.5, "o-")
            ax.set_xlabel("sample size $n$")
            ax.set_ylabel(f"loss {i}")
            legend(ax, [h], [f"curve {i}: slope -0.5"], loc="upper center", bbox_to_anchor=(0.5, -0.2))
        fig.suptitle("a title\non two lines")
        fig.text(0.5, 0.01, "a note under the panels", ha="center")
        layout(fig, rect=(0, 0.05, 1, 1))
        pars = fig.subplotpars
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        return (pars.left, pars.right, pars.bottom, pars.top, pars.wspace, pars.hspace), buf.getvalue()

    measure = martist._get_tightbbox_for_layout_only
    once = draw(tight_layout)
    assert martist._get_tightbbox_for_layout_only is measure  # put back after the call
    plain = draw(lambda fig, **kw: fig.tight_layout(**kw))
    assert once[0] == plain[0] and once[1] == plain[1]

    def fails(**kw):
        raise RuntimeError("a layout that fails")

    fig = plt.figure()
    fig.add_subplot()
    fig.tight_layout = fails
    with pytest.raises(RuntimeError):
        tight_layout(fig, rect=(0, 0, 1, 1))
    plt.close(fig)
    assert martist._get_tightbbox_for_layout_only is measure  # put back after a failure too
