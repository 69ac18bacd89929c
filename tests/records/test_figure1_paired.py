"""studies/figure1/figure1_paired.py: the pooling, the paired contrast's sign, the median band, the start
scheme and the panel verdict on synthetic rows; the mechanism column's loaders, intervals, slopes and
per-cell split on toy inputs (moved with its functions from the retired composite figure's script, records/archive/figure1/); and the
committed record against its sources and the docs."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from record_paths import resolve
from script_loader import load_script

mod = load_script("studies/figure1/figure1_paired.py")
ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "records" / "figure1" / "figure1_paired.json"

NS = (1000, 4000, 16000, 64000)


def _rows(seed: int, reps: int, slope: dict[str, float], rng: np.random.Generator) -> pd.DataFrame:
    """Both routers on one draw per (n, replicate): loss = n^slope times a shared per-draw factor
    (the pairing) and a small per-router one."""
    out = []
    for n in NS:
        for r in range(reps):
            shared = np.exp(rng.normal(0, 0.5))
            for router, e in slope.items():
                out.append({"router": router, "seed": seed, "n": n, "replicate": r,
                            "voronoi": shared * n ** e * np.exp(rng.normal(0, 0.05)),
                            "voronoi_direction": shared * n ** -0.5 * np.exp(rng.normal(0, 0.05))})
    return pd.DataFrame(out)


def test_pool_seeds_keeps_seeds_replicates_apart_and_pairs_paired():
    rng = np.random.default_rng(0)
    t = [_rows(s, 3, {"cosine": -0.2, "perturbed": -0.5}, rng) for s in (0, 1)]
    pooled = mod.pool_seeds(t)
    assert pooled["replicate"].nunique() == 6  # two seeds' replicates 0-2 are six replicates
    assert not pooled.duplicated(["router", "n", "replicate"]).any()
    with pytest.raises(ValueError, match="one seed"):
        mod.pool_seeds([pd.concat(t)])


def test_contrast_is_vanilla_minus_perturbed_and_finds_the_flatter_vanilla():
    rng = np.random.default_rng(1)
    rows = _rows(0, 30, {"cosine": -0.2, "perturbed": -0.5}, rng)
    c = mod.contrast(rows, rows, "voronoi", n_boot=400)
    assert c["difference"] == pytest.approx(0.3, abs=0.05)  # -0.2 - (-0.5)
    assert c["ci"][0] > 0 and c["category"] == "consistent"
    assert c["slope_vanilla"] == pytest.approx(-0.2, abs=0.05) and c["slope_perturbed"] == pytest.approx(-0.5, abs=0.05)
    d = mod.contrast(rows, rows, "voronoi_direction", n_boot=400)  # same exponent in both arms: cannot tell
    assert d["ci"][0] < 0 < d["ci"][1] and d["category"] == "inconclusive"
    swapped = _rows(0, 30, {"cosine": -0.5, "perturbed": -0.2}, rng)
    assert mod.contrast(swapped, swapped, "voronoi", n_boot=400)["category"] == "inconsistent"


def test_median_band_brackets_the_median_and_refuses_a_wrong_shape():
    rng = np.random.default_rng(2)
    v = rng.lognormal(size=(2, 200))
    v[1, :5] = np.nan  # left out at its n
    b = mod.median_band([10, 20], v, np.random.default_rng(3), n_boot=500)
    assert b["count"] == [200, 195]
    for j in range(2):
        assert b["low"][j] < b["median"][j] < b["high"][j]
    assert b["median"][1] == pytest.approx(np.nanmedian(v[1]))
    with pytest.raises(ValueError, match="shape"):
        mod.median_band([10], v, rng)


def test_start_scheme_names_the_start_and_refuses_an_unknown_one():
    s = mod.start_scheme({"init": "near", "init_scale": 0.05, "starts": 1, "extra_starts": 0})
    assert "near the truth" in s and "0.05" in s and "1 start per fit" in s
    assert "3 starts" in mod.start_scheme({"init": "near", "init_scale": 0.05, "starts": 1, "extra_starts": 2})
    with pytest.raises(ValueError, match="start scheme"):
        mod.start_scheme({"init": "bogus"})


def test_panel_verdict_needs_every_seed_above_zero():
    up, none, down = ({"category": c} for c in ("consistent", "inconclusive", "inconsistent"))
    assert mod.panel_verdict([up, up, up]) == "reproduced"
    assert mod.panel_verdict([up, up, none]) == "not reproduced"
    assert mod.panel_verdict([down, down]) == "opposite"
    with pytest.raises(ValueError):
        mod.panel_verdict([])


def test_recorded_window_is_the_runs_one_and_refuses_two(tmp_path):
    import json

    for name, lo in (("a", 2000), ("b", 2000), ("c", 4000)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"window": {"n_min": lo, "n_max": 32000}}))
    assert mod.recorded_window(tmp_path, ["a", "b"]) == (2000, 32000)
    with pytest.raises(ValueError, match="different windows"):
        mod.recorded_window(tmp_path, ["a", "c"])
    rows = _rows(0, 10, {"cosine": -0.2, "perturbed": -0.5}, np.random.default_rng(4))
    assert mod.contrast(rows, rows, "voronoi", n_boot=200, window=(4000, None))["ns"] == [4000, 16000, 64000]


def test_theory_docs_quote_the_recorded_paired_contrasts_and_verdicts():
    """docs/guide/theory.rst states each seed's and the pooled paired contrast as the record holds them,
    and calls a panel reproduced exactly where the record's verdict is ``reproduced``."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rec = json.loads((root / "records" / "figure1" / "figure1_paired.json").read_text())
    doc = " ".join((root / "docs" / "guide" / "theory.rst").read_text(encoding="utf-8").split())
    for setting, panel in (("exact", "(a)"), ("over", "(b)")):
        P = rec[setting]
        for loss in mod.LOSSES:
            for c in [*P["per_seed"][loss], P["pooled"][loss]]:
                assert mod._fmt(c).replace("+", "") in doc.replace("+", ""), (setting, loss, mod._fmt(c))
        said = f"**Panel {panel}, " + ("exact fit: reproduced" if setting == "exact" else "over-specified fit: reproduced")
        assert (said in doc) == (P["verdict"]["voronoi"] == "reproduced"), (setting, P["verdict"])


# ------------------------------------------------------------------- the mechanism column (a4), (b4)


def test_interval_of_mean_brackets_the_mean_and_shrinks_with_replicates():
    rng = np.random.default_rng(0)
    small = rng.lognormal(size=10)
    large = rng.lognormal(size=1000)
    m, lo, hi = mod.interval_of_mean(small, np.random.default_rng(1))
    assert m == pytest.approx(small.mean()) and lo < m < hi
    m2, lo2, hi2 = mod.interval_of_mean(large, np.random.default_rng(1))
    assert lo2 < m2 < hi2 and (hi2 - lo2) < (hi - lo)
    # a constant sample has a zero-width interval at its value
    assert mod.interval_of_mean(np.full(7, 2.5), np.random.default_rng(1)) == (2.5, 2.5, 2.5)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # R^2 of the flat series: 0/0
def test_series_recovers_a_power_law_exponent():
    """Replicates c * n^-0.5 * (multiplicative noise with the same law at every n): the log-of-mean
    slope estimates -0.5; exactly when the noise factors are the same at every n."""
    ns = [1000, 2000, 4000, 8000, 16000]
    eps = np.random.default_rng(3).lognormal(sigma=0.3, size=8)
    exact = {n: 2.0 * n**-0.5 * eps for n in ns}
    rec = mod.series(exact, np.random.default_rng(0), n_boot=200)
    assert rec["slope"]["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert rec["slope"]["intercept"] == pytest.approx(np.log(2.0 * eps.mean()), abs=1e-10)
    assert rec["n"] == ns and rec["count"] == [8] * 5
    assert all(lo <= m <= hi for lo, m, hi in zip(rec["ci_low"], rec["mean"], rec["ci_high"]))
    assert all(a <= b <= c for a, b, c in zip(rec["q25"], rec["median"], rec["q75"]))
    flat = mod.series({n: np.full(5, 0.7) for n in ns}, np.random.default_rng(0), n_boot=200)
    assert flat["slope"]["slope"] == pytest.approx(0.0, abs=1e-12)


def test_cell_parts_splits_singleton_from_shared_cells():
    # atoms 0 and 3 share a cell (size 2), atoms 1 and 2 are alone
    got = mod.cell_parts([0.1, 0.2, 0.05, 9.0], [0.3, 0.01, 0.02, 0.5], [2, 1, 1, 2])
    assert got == {"radial_single": 0.2, "direction_single": 0.02, "radial_shared": 9.0, "direction_shared": 0.5}
    exact = mod.cell_parts([0.1, 0.2], [0.3, 0.4], [1, 1])  # no shared cell: NaN, not 0
    assert exact["radial_single"] == 0.2 and np.isnan(exact["radial_shared"]) and np.isnan(exact["direction_shared"])


def test_cells_by_n_groups_fits_and_skips_missing_kinds():
    rows = [{"router": "cosine", "n": 100, "replicate": 0, "radial": [0.1, 0.3, 5.0], "direction": [0.2, 0.1, 0.4],
             "cell_size": [1, 2, 2], "mass": [1, 1, 1]},
            {"router": "cosine", "n": 100, "replicate": 1, "radial": [0.2, 0.4], "direction": [0.1, 0.1],
             "cell_size": [1, 1], "mass": [1, 1]},
            {"router": "perturbed", "n": 100, "replicate": 0, "radial": [7.0], "direction": [0.1], "cell_size": [1],
             "mass": [1]}]
    np.testing.assert_array_equal(mod.cells_by_n(rows, "cosine", "radial_single")[100], [0.1, 0.4])
    np.testing.assert_array_equal(mod.cells_by_n(rows, "cosine", "radial_shared")[100], [5.0])  # replicate 1 has none
    np.testing.assert_array_equal(mod.cells_by_n(rows, "perturbed", "radial_single")[100], [7.0])


def test_runoff_by_n_takes_the_shared_cells_largest_radius_and_its_mass():
    rows = [{"router": "perturbed", "n": 100, "radial": [0.1, 3.0, 9.0], "cell_size": [1, 2, 2], "mass": [1.0, 0.5, 0.2]},
            {"router": "perturbed", "n": 100, "radial": [0.2, 5.0, 1.0], "cell_size": [1, 2, 2], "mass": [1.0, 0.4, 0.6]},
            {"router": "perturbed", "n": 100, "radial": [7.0, 0.1], "cell_size": [1, 1], "mass": [1.0, 1.0]},  # no shared cell
            {"router": "cosine", "n": 100, "radial": [0.1, 8.0], "cell_size": [2, 2], "mass": [0.5, 0.5]}]
    got = mod.runoff_by_n(rows, "perturbed")
    assert got == {"n": [100], "fits": [2], "median_radial": [7.0], "median_mass": [0.30000000000000004]}


def test_mechanism_by_n_reads_the_paired_record():
    mech = {"ns": [1000, 10000], "routers": {"cosine": {"per_replicate": {"fit_radial": [[0.1, 0.2], [0.3, 0.4]]}}}}
    got = mod.mechanism_by_n(mech, "cosine", "fit_radial")
    assert list(got) == [1000, 10000]
    np.testing.assert_array_equal(got[10000], [0.3, 0.4])


def test_cells_record_guard_flags_a_refit_that_differs(tmp_path):
    """figure1_cells.py writes nothing unless every refit repeats the recorded largest errors."""
    cells = load_script("studies/figure1/figure1_cells.py")
    (tmp_path / "extras.csv").write_text("router,n,replicate,beta1_radial,beta1_direction\ncosine,100,0,0.5,0.25\n")
    same = [{"router": "cosine", "n": 100, "replicate": 0, "radial": [0.1, 0.5], "direction": [0.25, 0.2]}]
    assert cells.check_against_record(same, tmp_path / "extras.csv") == []
    off = [{"router": "cosine", "n": 100, "replicate": 0, "radial": [0.1, 0.5 * (1 + 1e-4)], "direction": [0.25, 0.2]}]
    bad = cells.check_against_record(off, tmp_path / "extras.csv")
    assert len(bad) == 1 and "beta1_radial" in bad[0]


def test_the_recorded_cells_are_the_fig1b_seed0_fits():
    """The committed per-cell record of fig1b seed 0 (the vanilla curves of the mechanism before fig1b40wv)
    covers every fit of the run it names and says the refit matched."""
    rec = json.loads((ROOT / "records" / "archive" / "figure1" / "cells_over_seed0.json").read_text())
    assert rec["run"] == "simulations/rates/figure1/fig1b/seed0"  # the path as recorded
    res = pd.read_csv(resolve(rec["run"]) / "results.csv")
    assert {(r["router"], r["n"], r["replicate"]) for r in rec["rows"]} == set(zip(res.router, res.n, res.replicate))
    assert rec["refit_matches_recorded"] == f"{len(rec['rows'])}/{len(rec['rows'])}"
    for r in rec["rows"]:  # k = k* + 1 atoms, every atom in some cell
        assert len(r["radial"]) == len(r["direction"]) == len(r["cell_size"]) == 4 and min(r["cell_size"]) >= 1


@pytest.mark.parametrize("router", ["perturbed", "cosine"])
def test_the_seed0_cells_record_is_every_seed0_fit(router):
    """(b4)'s curves: the committed per-cell record of fig1b40w seed 0 (perturbed) and of fig1b40wv
    seed 0 (vanilla; the default seed) covers the run's 240 fits, each refit repeated the recorded
    extras.csv, and the largest per-atom errors are the recorded ones (checked here again, from the CSV)."""
    cells = load_script("studies/figure1/figure1_cells.py")
    preset = {"perturbed": "fig1b40w", "cosine": "fig1b40wv"}[router]
    assert mod.MECHANISM_SOURCES[f"over_{router}"] == f"records/figure1/cells_{preset}_seed0.json"
    rec = json.loads((ROOT / mod.MECHANISM_SOURCES[f"over_{router}"]).read_text())
    assert rec["run"] == f"simulations/rates/figure1/{preset}/seed0"  # the path as recorded
    res = pd.read_csv(resolve(rec["run"]) / "results.csv")
    assert len(rec["rows"]) == len(res) == 240 and {r["router"] for r in rec["rows"]} == {router}
    assert {(r["router"], r["n"], r["replicate"]) for r in rec["rows"]} == set(zip(res.router, res.n, res.replicate))
    assert rec["refit_matches_recorded"] == "240/240"
    assert cells.check_against_record(rec["rows"], resolve(rec["run"]) / "extras.csv") == []
    for r in rec["rows"]:
        assert len(r["radial"]) == len(r["direction"]) == len(r["cell_size"]) == 4 and min(r["cell_size"]) >= 1


def test_panel_b_is_one_design():
    """Panel (b)'s two routers come from one grid, data streams and starts (issue 34): every fig1b40wv run
    is its fig1b124w seed's configuration with only the router and the replicate count changed (40 and
    124: a replicate's data and start are keyed by (n, replicate), so replicates 0-39 are the same), and
    (b4)'s cells records are those runs' seed 0 at the same sizes."""
    for fv, fw in zip(mod.SOURCES["over"]["vanilla"], mod.SOURCES["over"]["perturbed"]):
        cv, cw = (json.loads((ROOT / f / "summary.json").read_text())["config"] for f in (fv, fw))
        assert (cv.pop("router"), cw.pop("router")) == (["cosine"], ["perturbed"])
        assert (cv.pop("reps"), cw.pop("reps")) == (40, 124)
        cv.pop("quiet"), cw.pop("quiet"), cv.pop("n_jobs"), cw.pop("n_jobs")  # progress output and workers only
        # fig1b40wv predates the statistic setting: its runs used the mean, the default
        assert cv.pop("statistic", "mean") == cw.pop("statistic", "mean") == "mean"
        assert cv == cw
    rec = json.loads(RECORD.read_text())
    sizes = [4000, 6986, 12201, 21309, 37217, 65000]
    assert rec["over"]["curves"]["voronoi"]["vanilla"]["pooled"]["n"] == sizes
    for key, d in rec["mechanism"]["over"]["series"].items():  # per cell: fits without an atom of that kind are left out
        assert d["n"] == sizes and max(d["count"]) <= 40, key


def test_b4_is_one_design_and_the_docs_table():
    """Panel (b4) in the committed figure1_paired.json: the perturbed curves are fig1b40w seed 0's cells,
    the vanilla ones fig1b40wv seed 0's (one design: same sizes, replicates and seed); per n the count and
    mean are those of the cells records' rows (recomputed here with cell_parts), the per-n intervals
    bracket the means, the slope is the log-of-mean OLS of those means (numpy here, not the engine), the
    design labels are the records', and every (b4) cell of the docs table is the record's."""
    from moestat.rates.config import GridSpec

    rec = json.loads(RECORD.read_text())
    b = rec["mechanism"]["over"]
    assert rec["mechanism"]["sources"] == mod.MECHANISM_SOURCES
    des = b["design"]
    assert (des["perturbed"]["preset"], des["perturbed"]["seed"], des["perturbed"]["replicates"]) == ("fig1b40w", 0, [40, 40])
    assert des["perturbed"]["n"] == [4000, 6986, 12201, 21309, 37217, 65000]
    assert (des["cosine"]["preset"], des["cosine"]["seed"], des["cosine"]["replicates"]) == ("fig1b40wv", 0, [40, 40])
    assert des["cosine"]["n"] == des["perturbed"]["n"]
    assert des["perturbed"]["seed"] == GridSpec().seed == b["default_seed"]  # the default seed
    for r in mod.ROUTERS:
        rows = json.loads((ROOT / mod.MECHANISM_SOURCES[f"over_{r}"]).read_text())["rows"]
        for part in mod.CELL_PARTS:
            d = b["series"][f"{r}:{part}"]
            by_n: dict[int, list[float]] = {}
            for row in rows:
                if row["router"] == r:
                    v = mod.cell_parts(row["radial"], row["direction"], row["cell_size"])[part]
                    if np.isfinite(v):
                        by_n.setdefault(row["n"], []).append(v)
            assert d["n"] == sorted(by_n) and d["count"] == [len(by_n[n]) for n in d["n"]]
            means = [np.mean(by_n[n]) for n in d["n"]]
            np.testing.assert_allclose(d["mean"], means, rtol=1e-12)
            assert all(lo <= m <= hi for lo, m, hi in zip(d["ci_low"], d["mean"], d["ci_high"]))
            slope = np.polyfit(np.log(d["n"]), np.log(means), 1)[0]
            assert d["slope"]["slope"] == pytest.approx(slope, rel=1e-9, abs=1e-12)
            assert d["slope"]["ci_low"] <= d["slope"]["slope"] <= d["slope"]["ci_high"]
    doc = (ROOT / "docs" / "guide" / "theory.rst").read_text(encoding="utf-8")
    for key, cell in mod.mechanism_cells(rec).items():
        assert f"- {cell}" in doc, (key, cell)
    for r in mod.ROUTERS:  # the caption names each design as the panel's title does
        label = mod.design_label(des[r], GridSpec().seed)
        assert " ".join(label.replace(des[r]["preset"], f"``{des[r]['preset']}``", 1).split()) in " ".join(doc.split())


def test_a4_is_the_paired_start_fit_record_and_the_docs_table():
    """Panel (a4): per router and part, the per-n means are those of two_point.json's per-replicate lists,
    the slope is the log-of-mean OLS of those means, the vanilla fit moved no radius (PDE (4): the
    least-squares solver has no gradient along it), and every (a4) slope of the docs table is the record's."""
    rec = json.loads(RECORD.read_text())
    a = rec["mechanism"]["exact"]
    tp = json.loads((ROOT / mod.MECHANISM_SOURCES["exact"]).read_text())["mechanism"]
    doc = " ".join((ROOT / "docs" / "guide" / "theory.rst").read_text(encoding="utf-8").split())
    for key, d in a["series"].items():
        router, part = key.split(":")
        per = tp["routers"]["cosine" if router == "start" else router]["per_replicate"][part]
        assert d["n"] == tp["ns"] and d["count"] == [tp["reps"]] * len(tp["ns"])
        np.testing.assert_allclose(d["mean"], [np.mean(v) for v in per], rtol=1e-12)
        slope = np.polyfit(np.log(d["n"]), np.log(d["mean"]), 1)[0]
        assert d["slope"]["slope"] == pytest.approx(slope, rel=1e-9, abs=1e-12)
        if router != "start":
            assert f"- {mod._slope_text(d['slope'])};" in doc, key
    assert a["radius_moved_max"]["cosine"] < 1e-12 < a["radius_moved_max"]["perturbed"]
    assert a["init_scale"] == tp["init_scale"]


def test_b4_runoff_record_and_the_docs_reading():
    """The run-off atom's medians per n recomputed from the fig1b40w cells rows, and the docs' per-cell
    paragraph quotes the record: the shared cell's slopes exclude -1/4 and contain 0, the singleton ones
    contain -1/2, the run-off radius stays while its mass falls."""
    rec = json.loads(RECORD.read_text())
    rows = json.loads((ROOT / mod.MECHANISM_SOURCES["over_perturbed"]).read_text())["rows"]
    ro = rec["mechanism"]["over"]["runoff"]
    assert ro == mod.runoff_by_n(rows, "perturbed") and ro["fits"] == [40] * 6
    m = rec["mechanism"]["over"]["series"]
    for part in ("radial_shared", "direction_shared"):
        s = m[f"perturbed:{part}"]["slope"]
        assert s["ci_low"] <= 0 <= s["ci_high"] and s["ci_low"] > -0.25
    for part in ("radial_single", "direction_single"):
        s = m[f"perturbed:{part}"]["slope"]
        assert s["ci_low"] <= -0.5 <= s["ci_high"]
    assert ro["median_mass"][-1] < ro["median_mass"][0] / 2 and min(ro["median_radial"]) > 10
    doc = " ".join((ROOT / "docs" / "guide" / "theory.rst").read_text(encoding="utf-8").split())
    assert (f"median radial error of {ro['median_radial'][0]:.3g} at :math:`n = {ro['n'][0]}` and "
            f"{ro['median_radial'][-1]:.3g} at {ro['n'][-1]}, while its median mass falls from "
            f"{ro['median_mass'][0]:.3g} to {ro['median_mass'][-1]:.3g}") in doc
    d = m["perturbed:radial_single"]
    assert f"its mean, {d['mean'][0]:.3g}, is twice its median, {d['median'][0]:.3g}" in doc
    assert 1.9 < d["mean"][0] / d["median"][0] < 2.2
    at_first = sorted(mod.cell_parts(r["radial"], r["direction"], r["cell_size"])["radial_single"]
                      for r in rows if r["n"] == d["n"][0])
    later = max(mod.cell_parts(r["radial"], r["direction"], r["cell_size"])["radial_single"]
                for r in rows if r["n"] > d["n"][0])
    assert f"{at_first[-2]:.3g} and {at_first[-1]:.3g}, none above {later:.3g} from" in doc


def test_the_drawn_figure_labels_the_mechanism_and_passes_the_reviewer_checks(monkeypatch, tmp_path):
    """The drawn figure: four columns, (a4) and (b4) titled as the mechanism, (b4) naming both designs in its
    title and every curve's legend entry, the two-point panels titled as lower bounds, not simulations,
    and the project's reviewer checks (blank slots, mixed tick styles) find nothing."""
    import matplotlib.figure

    import moestat.plotting as plotting

    rec = json.loads(RECORD.read_text())
    seen = {}

    def keep(fig, *args, **kwargs):  # the figure as saved, instead of the files
        seen.setdefault("axes", [(ax.get_title(), [t.get_text() for t in ax.get_legend().get_texts()])
                                 for ax in fig.axes])
        seen.setdefault("problems", plotting.figure_problems(fig))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    mod.figure(rec, tmp_path / "f")
    titles = [t for t, _ in seen["axes"]]
    assert len(titles) == 8 and "(a4) mechanism" in titles[3] and "(b4) mechanism" in titles[7]
    assert "(a3) two-point lower bound (not a simulation)" in titles[2] and "(b3) two-point lower bound (not a simulation)" in titles[6]
    assert "perturbed: fig1b40w seed 0 (default), 40 reps" in titles[7]
    assert "vanilla: fig1b40wv, the same seed, sizes, data and starts" in titles[7]
    curves = [t for t in seen["axes"][7][1] if not t.startswith("$n^")]
    assert len(curves) == 2 * len(mod.CELL_PARTS)
    assert all(t.startswith("perturbed [fig1b40w]") or t.startswith("vanilla [fig1b40wv]") for t in curves)
    assert seen["problems"] == []


def _summary_fit(folder: Path, router: str, loss: str) -> dict:
    summ = json.loads((folder / "summary.json").read_text())
    return next(f for f in summ["fits"] if f["router"] == router and f["loss"] == loss)


def _summary_cell(f: dict) -> str:
    return f"{f['slope']:.2f} [{f['ci_low']:.2f}, {f['ci_high']:.2f}] {f['category']}"


def test_the_docs_fixed_truth_rows_are_the_runs_summaries():
    """The theory.rst table's fixed-truth rows marked *summary* quote each run's own summary.json (the
    engine's slope, interval and category; the curvature's local slopes for the vanilla exact row) and
    the means of its results.csv at the first and last n (the rows the retired composite figure drew)."""
    from moestat.rates.config import GridSpec

    doc = " ".join((ROOT / "docs" / "guide" / "theory.rst").read_text(encoding="utf-8").split())
    default = GridSpec().seed

    def means(folder: Path, router: str, loss: str) -> str:
        t = pd.read_csv(folder / "results.csv")
        m = t[t.router == router].groupby("n")[loss].mean()
        return f"{m.iloc[0]:.3g} to {m.iloc[-1]:.3g}"

    a = ROOT / "records" / "figure1" / "fig1a1e6" / "seed0"
    assert f"- {_summary_cell(_summary_fit(a, 'perturbed', 'voronoi'))}; {means(a, 'perturbed', 'voronoi')}" in doc
    f = _summary_fit(a, "cosine", "voronoi")
    c = f["curvature"]
    assert c["significant"]  # judged by the slow-rate rule's curvature: the local slopes at both ends are quoted
    assert (f"- local slope {c['slope_start']:.2f} to {c['slope_end']:.2f} (curvature 99% CI [{c['c_ci'][0]:.3f}, "
            f"{c['c_ci'][1]:.3f}]) {f['category']}; {means(a, 'cosine', 'voronoi')}") in doc
    for preset, router, losses in (("fig1b124w", "perturbed", ("voronoi", "param_single", "param_multi")),
                                   ("fig1b40wv", "cosine", ("voronoi",))):
        for loss in losses:
            cells = []
            for s in (0, 1, 2):
                tag = " (default)" if s == default else ""
                cells.append(f"seed {s}{tag}: {_summary_cell(_summary_fit(ROOT / 'records' / 'figure1' / preset / f'seed{s}', router, loss))}")
            assert f"- {'; '.join(cells)}" in doc, (preset, loss)
    f = _summary_fit(ROOT / "records" / "over_1e6" / "reps10", "perturbed", "voronoi")
    t = pd.read_csv(ROOT / "records" / "over_1e6" / "reps10" / "results.csv")
    m = t[t.router == "perturbed"].groupby("n")["voronoi"].mean()
    assert f"- {_summary_cell(f)}; {m.iloc[0]:.2g} to {m.iloc[-1]:.2g} (10 replicates)" in doc
