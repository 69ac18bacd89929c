"""Convergence figures say what they show (issue 13): percentile bars without clipping, names in
words from one table, the loss of every curve, slope and 95% CI in the legend, ticks, legends off
the data, titles in words."""

import numpy as np
import pandas as pd
import pytest

from moestat.rates import labels
from moestat.rates.figures import BAND, draw_convergence
from moestat.rates.store import RESULT_COLUMNS


def _df(setting="over", routers=("perturbed", "cosine"), ns=(1000, 2000, 4000, 8000), reps=12, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for router in routers:
        scale = 100.0 if router == "perturbed" else 1.0  # two levels 100x apart, as in Figure 1(b)
        for n in ns:
            for r in range(reps):
                v = scale * n ** -0.5 * rng.lognormal(0, 1.0)
                row = {c: 0 for c in RESULT_COLUMNS}
                row.update(scenario="s", router=router, setting=setting, n=n, replicate=r, estimator="lse",
                           converged=True, status="ftol", voronoi=v, regression_l2=0.01 * n ** -0.5 * (1 + 0.05 * rng.random()))
                rows.append(row)
    return pd.DataFrame(rows)


def _fits(df, losses=("voronoi", "regression_l2")):
    out = []
    for router in df["router"].unique():
        for loss in losses:
            out.append({"router": router, "loss": loss, "slope": -0.56, "ci_low": -0.62, "ci_high": -0.49,
                        "predicted": -0.5, "window": [1000, 8000], "log_mean": {"slope": -0.5, "intercept": 0.0}})
    return out


@pytest.fixture
def fig():
    df = _df()
    f = draw_convergence(df, _fits(df), losses=["voronoi", "regression_l2"], title="over-specified, lse")
    yield f, df
    import matplotlib.pyplot as plt

    plt.close(f)


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_legends_name_router_and_loss_in_words_with_slope_and_ci(fig):
    f, _ = fig
    vor, reg = f.axes[:2]
    texts = _legend_texts(vor)
    assert "perturbed cosine, D2: slope \u22120.56 (95% CI \u22120.62, \u22120.49)" in texts
    assert any(t.startswith("vanilla cosine, D2: slope") for t in texts)
    assert not any(t.startswith(("perturbed:", "cosine:")) for t in texts)  # no internal names
    assert any(t.startswith("perturbed cosine: slope") for t in _legend_texts(reg))  # not a Voronoi loss: no D


@pytest.mark.slow
def test_bars_are_the_replicate_percentiles_and_never_clipped(fig):
    f, df = fig
    ax = f.axes[0]
    segs = [s for c in ax.collections for s in c.get_segments()]
    sub = df[(df["router"] == "perturbed") & (df["n"] == 1000)]["voronoi"].to_numpy()
    lo, hi = np.percentile(sub, BAND)
    assert any(np.allclose(s[:, 1], [lo, hi]) for s in segs)
    assert all(s[:, 1].min() > 0 for s in segs)  # positive: drawn on the log axis as computed
    assert "10th to 90th percentile" in " ".join(t.get_text() for t in f.texts)


@pytest.mark.slow
def test_ticks_title_and_legend_placement(fig):
    f, _ = fig
    ax_reg = f.axes[1]
    f.canvas.draw()
    xt = [t.get_text() for t in f.axes[0].get_xticklabels() if t.get_text()]
    assert xt == ["1k", "2k", "4k", "8k"]
    lo, hi = ax_reg.get_ylim()
    labelled = [t for t in ax_reg.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert len(labelled) >= 2  # a short y range still gets labelled ticks
    assert "against sample size" in f._suptitle.get_text() and "least squares" in f._suptitle.get_text()
    for ax in f.axes[:2]:  # the legend lies below the axes, off the data
        leg = ax.get_legend().get_window_extent()
        assert leg.y1 <= ax.get_window_extent().y0


@pytest.mark.slow
@pytest.mark.parametrize("losses", [["voronoi"], ["voronoi", "regression_l2"], ["voronoi"] * 4])
def test_the_legend_lies_under_the_x_label_and_the_note_under_the_legend(losses):
    """One panel, one row and two rows: the legend starts below the x-label (the old anchor, a
    fraction of the axes' height, put it on the label once the layout had shrunk the axes) and ends
    above the note, each box apart from the next."""
    import matplotlib.pyplot as plt

    df = _df()
    f = draw_convergence(df, _fits(df), losses=losses)
    try:
        r = f.canvas.get_renderer()
        f.canvas.draw()
        note = min((t.get_window_extent(r) for t in f.texts), key=lambda b: b.y0)  # the note, at the bottom
        for ax in f.axes:
            leg = ax.get_legend().get_window_extent(r)
            label = ax.xaxis.label.get_window_extent(r)
            assert leg.y1 < label.y0, (leg, label)
            assert note.y1 < leg.y0, (note, leg)
        # no blank band: the lowest legend ends within a quarter inch of the note
        lowest = min(ax.get_legend().get_window_extent(r).y0 for ax in f.axes)
        assert 0 < lowest - note.y1 < 0.25 * f.dpi
    finally:
        plt.close(f)


def test_on_a_dense_grid_the_fitted_line_is_drawn_over_the_markers():
    """With the peers' 150 sizes the markers hid the fitted line: it is now drawn above them."""
    import matplotlib.pyplot as plt

    from moestat.rates.figures import DENSE_SIZES

    ns = tuple(int(x) for x in np.unique(np.rint(np.geomspace(1000, 8000, DENSE_SIZES + 10))))
    df = _df(routers=("perturbed",), ns=ns, reps=4)
    f = draw_convergence(df, _fits(df, ("voronoi",)), losses=["voronoi"])
    try:
        ax = f.axes[0]
        markers = [ln for ln in ax.lines if ln.get_marker() == "o"]
        fitted = [ln for ln in ax.lines if ln.get_linestyle() == "-" and ln.get_marker() in ("None", "", None)]
        assert markers and fitted
        assert min(ln.get_zorder() for ln in fitted) > max(ln.get_zorder() for ln in markers + list(ax.collections))
        assert max(ln.get_markersize() for ln in markers) < 3
    finally:
        plt.close(f)


def test_the_voronoi_variant_of_the_labels_is_the_one_the_sweep_computes():
    from moestat.losses import voronoi_loss
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import build_scenario, compute_losses

    for setting in ("exact", "over"):
        cfg = RatesConfig.from_dict({"setting": setting, "d": 2})
        sc = build_scenario(cfg.scenario_key("perturbed"))
        rng = np.random.default_rng(1)
        from moestat.estimators import near_truth_init

        G = near_truth_init(sc.truth, sc.k_fit, 0.1, rng)
        got = compute_losses(sc, G, sc.holdout(64))["voronoi"]
        want = voronoi_loss(G, sc.truth, labels.VORONOI_VARIANT[setting], sc.model.gate.k_active)
        np.testing.assert_allclose(got, want)


def test_a_dense_grid_is_labelled_by_decades():
    # the peers' design has 150 sizes: one label per size would overprint into a smear
    import matplotlib.pyplot as plt

    from moestat.rates.figures import _log_ticks

    f, ax = plt.subplots()
    ns = np.unique(np.rint(np.geomspace(100, 100_000, 150)).astype(int))
    ax.loglog(ns, 1 / np.sqrt(ns))
    _log_ticks(ax, ns)
    f.canvas.draw()
    lo, hi = ax.get_xlim()
    shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert shown == ["100", "1k", "10k", "100k"]
    plt.close(f)


def test_a_grid_of_eleven_sizes_labels_every_other_size():
    import matplotlib.pyplot as plt

    from moestat.rates.config import sample_sizes
    from moestat.rates.figures import _log_ticks

    f, ax = plt.subplots()
    ns = sample_sizes(200, 20_000, 11)
    ax.loglog(ns, 1 / np.sqrt(ns))
    _log_ticks(ax, ns)
    f.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 11 and labels[::2] == ["200", "502", "1262", "3170", "7962", "20000"]  # one style: not 7962 beside 20k
    assert not any(labels[1::2])
    plt.close(f)


def test_plot_run_draws_the_headline_and_every_loss_with_a_slope(monkeypatch, tmp_path):
    """``convergence`` shows the headline losses; ``convergence_all`` every loss of the first router
    that has a slope, and is not drawn when none has."""
    from moestat.rates import figures

    calls = []
    monkeypatch.setattr(figures, "plot_convergence", lambda df, fits, stem, **kw: calls.append((stem.name, kw["losses"])))
    # both figures in this process, where the calls are recorded (run_rates draws the second in a
    # forked child: moestat.rates.forked.draw_in_fork, tested in test_forked.py)
    df = _df()
    fits = _fits(df, losses=("voronoi", "regression_l2", "mass"))
    fits[2]["slope"] = None  # perturbed mass: no slope, so not in convergence_all
    figures.plot_run(df, fits, tmp_path, headline=("voronoi",), routers=("perturbed", "cosine"))
    assert calls == [("convergence", ["voronoi"]), ("convergence_all", ["voronoi", "regression_l2"])]
    calls.clear()
    figures.plot_run(df, [dict(f, slope=None) for f in fits], tmp_path, headline=("voronoi",), routers=("perturbed",))
    assert calls == [("convergence", ["voronoi"])]


def _png(f) -> bytes:
    import io

    buf = io.BytesIO()
    f.savefig(buf, format="png", dpi=200)
    return buf.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("rc", [{}, {"figure.autolayout": True}, {"figure.constrained_layout.use": True}])
def test_the_figure_leaves_without_a_layout_engine_and_saves_the_same_pixels(rc):
    """Issue 36: ``tight_layout`` left a placeholder layout engine on the figure, and ``savefig``,
    finding an engine, laid the whole figure out once more before rendering it (about 15% of the
    main job's ``convergence_all.png``).  The figure now leaves :func:`draw_convergence` without
    one -- whatever a matplotlibrc asks for -- and its PNG has the same bytes as with the placeholder."""
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    df = _df()
    with matplotlib.rc_context(rc):
        f = draw_convergence(df, _fits(df), losses=["voronoi", "regression_l2"], title="over-specified, lse")
        assert f.get_layout_engine() is None
        fast = _png(f)
        f.set_layout_engine(PlaceHolderLayoutEngine(True, True))  # what tight_layout leaves behind
        assert fast == _png(f)
    plt.close(f)


@pytest.mark.slow
@pytest.mark.parametrize("ncols", [1, 3])
def test_a_long_y_label_stays_below_the_title(ncols):
    """param_multi's label ("parameter error, multi-atom cells (mass-weighted RMS)") ran up into the
    figure's title on a three-column grid (convergence_all.png of gmoe-over4): every y-label is now no
    taller than its axes and ends below the title; a mathtext label is kept whole."""
    import matplotlib.pyplot as plt

    from moestat.rates.figures import Y_LABEL_CHARS, _axis_label

    df = _df()
    df["param_multi"] = df["voronoi"] * 0.5
    losses = ["param_multi"] if ncols == 1 else ["voronoi", "regression_l2", "param_multi"]
    f = draw_convergence(df, _fits(df, losses), losses=losses)
    try:
        r = f.canvas.get_renderer()
        f.canvas.draw()
        title = f._suptitle.get_window_extent(r)
        for ax in f.axes:
            label = ax.yaxis.label.get_window_extent(r)
            assert label.height <= ax.get_window_extent(r).height, ax.yaxis.label.get_text()
            assert label.y1 < title.y0, ax.yaxis.label.get_text()
    finally:
        plt.close(f)
    wrapped = _axis_label(labels.loss_name("param_multi"))
    assert "\n" in wrapped and all(len(line) <= Y_LABEL_CHARS for line in wrapped.split("\n"))
    assert _axis_label(labels.loss_name("regression_l2")) == labels.loss_name("regression_l2")
    assert _axis_label("Voronoi loss, directions only") == "Voronoi loss,\ndirections only"  # no word alone
    assert _axis_label("x" * 40) == "x" * 40  # one word: nothing to break at
    assert all(len(line) <= Y_LABEL_CHARS for line in _axis_label("abc " * 20).split("\n"))
