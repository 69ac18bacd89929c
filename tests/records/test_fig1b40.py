"""The successive designs of Figure 1(b) (fig1b40, fig1b40w, fig1b124w, fig1b124x, fig1b40wv): each is a
TOML file (``studies/figure1/NAME.toml``, ``moestat rates --config``), checked here to be a
valid configuration, to be what its window script chose, and to be what its recorded runs ran."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from moestat.cli.cmd_rates import build_parser, config_from_args
from moestat.rates import RatesConfig
from moestat.rates.presets import PRESETS, load_toml
from moestat.rates.spec_checks import sample_sizes

from json_close import same_numbers
from record_paths import resolve
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "studies" / "figure1"  # the drivers and the designs' configuration files
REC = ROOT / "records" / "figure1"  # the current Figure 1 records
ARCH = ROOT / "records" / "archive" / "figure1"  # the superseded ones and the one-off window analyses


DESIGNS = ["fig1b40", "fig1b40w", "fig1b124w", "fig1b124x", "fig1b40wv"]


def _same_as_recorded(now: dict, recorded: dict) -> bool:
    """``now`` equals the committed JSON, its ``runs`` (the run folders it read) compared by the paths as
    recorded (``simulations/...`` before the records moved), every number to round-off."""
    now, recorded = json.loads(json.dumps(now)), dict(recorded)
    runs_now, runs_then = now.pop("runs", None), recorded.pop("runs", None)
    same_runs = (runs_now is None and runs_then is None) or [resolve(r) for r in runs_then] == [ROOT / r for r in runs_now]
    return same_runs and same_numbers(now, recorded)


def _run(name: str):
    """The record folder of design ``name`` (current, or archived when superseded)."""
    return REC / name if (REC / name).is_dir() else ARCH / name


def _design(name: str) -> dict:
    """The flat keys of ``studies/figure1/NAME.toml``."""
    return load_toml(STUDY / f"{name}.toml")


def _config(name: str) -> RatesConfig:
    """The configuration ``studies/figure1/NAME.toml`` defines."""
    return RatesConfig.from_toml(STUDY / f"{name}.toml")


def _script(name: str):
    """The module of the script ``NAME.py`` (a driver under studies/figure1, or a window analysis in the archive)."""
    return load_script(STUDY / f"{name}.py" if (STUDY / f"{name}.py").is_file() else ARCH / f"{name}.py")


def _window():
    return _script("fig1b40_window")


@pytest.mark.parametrize("name", DESIGNS)
def test_design_toml_is_a_valid_config_for_moestat_rates(name):
    """``moestat rates --config studies/figure1/NAME.toml`` builds the file's configuration (no key
    unknown or malformed; the command adds only its own default n_jobs), and the design is a file, not a
    preset."""
    ns = build_parser().parse_args(["--config", str(STUDY / f"{name}.toml")])
    assert config_from_args(ns) == _config(name).replace(n_jobs="auto")
    assert name not in PRESETS


@pytest.mark.parametrize("name", DESIGNS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_design_toml_resolves_to_what_its_recorded_runs_ran(name, seed):
    """The file with ``--seed S`` resolves to the configuration hash of its recorded seed-S run (the resume
    guard's: every field that decides the rows), so ``--config NAME.toml --seed S --resume`` continues it."""
    from moestat.rates.resolve import Experiment

    summary = json.loads((_run(name) / f"seed{seed}" / "summary.json").read_text())
    assert summary["config"]["seed"] == seed
    assert Experiment.of(_config(name).replace(seed=seed)).hash == summary["config_hash"]


@pytest.mark.parametrize("name", ["fig1b40", "fig1b40w"])
def test_successor_keeps_fig1b_estimator_and_truth(name):
    """Only the design changes: router subset, sizes, replicates; the estimator, starts and truth are fig1b's."""
    new, old = _config(name), RatesConfig.from_preset("fig1b")
    for key in ("setting", "max_iter", "init", "init_scale", "truth_seed", "estimator", "tau", "d", "k_true",
                "noise_var", "expert", "extra_starts", "starts"):
        assert getattr(new, key) == getattr(old, key), key
    assert new.router == ("perturbed",) and new.reps == 40 and new.cell_errors


def test_fig1b124w_is_fig1b40w_with_the_replicates_its_plans_ask_for_a_tenth():
    """Only the replicates differ from fig1b40w; 124 is the largest reps_needed for +-0.05 that fig1b40w's
    three recorded seeds report for D2, the single-atom and the shared cells, divided by 4 (+-0.1) and
    rounded up to a multiple of the chunk."""
    new, old = _design("fig1b124w"), _design("fig1b40w")
    assert new.pop("reps") == 124 and old.pop("reps") == 40 and new == old
    needed = []
    for s in (0, 1, 2):
        fits = json.loads((_run("fig1b40w") / f"seed{s}" / "summary.json").read_text())["fits"]
        needed += [f["plan"]["reps_needed"] for f in fits if f["loss"] in ("voronoi", "param_single", "param_multi")]
    chunk = _design("fig1b124w")["chunk"]
    quarter = math.ceil(max(needed) / 4)  # the replicates for half the +-0.05 half-width
    assert _design("fig1b124w")["reps"] == chunk * math.ceil(quarter / chunk)


def test_fig1b124x_is_fig1b124w_on_its_plans_window_one_ladder_step_higher():
    """Only the grid differs from fig1b124w: it starts where seed 1's recorded plan asks the next run's window
    to start and ends at the --grow-n ladder's next size, so its first five sizes are fig1b124w's last five
    (the same streams) and it keeps six sizes."""
    new, old = _design("fig1b124x"), _design("fig1b124w")
    for key in ("n_min", "n_max"):
        new.pop(key), old.pop(key)
    assert new == old
    fits = json.loads((_run("fig1b124w") / "seed1" / "summary.json").read_text())["fits"]
    lines = [f["plan"]["line"] for f in fits if f["loss"] == "param_single"]
    assert len(lines) == 1 and "fit the window n >= 6986" in lines[0]
    w, x = _config("fig1b124w"), _config("fig1b124x")
    ladder = w.replace(grow_n=120_000).grid.ladder
    assert x.grid.ns == [n for n in w.grid.ns if n >= 6986] + ladder[:1]
    assert x.grid.ns == [6986, 12201, 21309, 37217, 65000, 113523]


def test_window_script_is_deterministic_and_is_the_preset():
    """The design recomputed from the recorded fig1b runs equals the committed JSON, and the preset's
    grid is the one it chose."""
    mod = _window()
    a, b = mod.design(), mod.design()
    assert a == b
    recorded = json.loads((ARCH / "fig1b40_window.json").read_text())
    assert _same_as_recorded(a, recorded)
    p = _design("fig1b40")
    assert sample_sizes(p["n_min"], p["n_max"], p["n_points"]) == a["sizes"]
    assert (p["n_min"], p["n_max"], p["reps"]) == (a["n_min"], a["n_max"], a["reps"])
    # the criterion: the window starts where the run-off share is within the limit from there on
    share = {int(n): s["pooled"] for n, s in a["runoff_share"].items()}
    assert all(v <= mod.MAX_RUNOFF_SHARE for n, v in share.items() if n >= a["n_min"])
    below = [n for n in share if n < a["n_min"]]
    assert below and share[max(below)] > mod.MAX_RUNOFF_SHARE
    assert a["predicted_cost_s"] <= mod.BUDGET_S


def test_window_threshold_is_half_the_truth_separation():
    """rho / 2 is the radius of a ball around each true atom that lies inside its Voronoi cell (eq. (5))."""
    import numpy as np

    from moestat.data.synthetic import make_scenario

    mod = _window()
    rho = mod.truth_separation()
    t = make_scenario("perturbed", "over").truth.numpy()
    om = np.concatenate([t.beta1, t.eta], axis=-1)
    rng = np.random.default_rng(0)
    # points within rho/2 of atom j are nearer atom j than any other atom
    for j in range(len(om)):
        u = rng.normal(size=(2000, om.shape[1]))
        u *= (0.999 * rho / 2) * rng.random((2000, 1)) / np.linalg.norm(u, axis=1, keepdims=True)
        d = np.linalg.norm((om[j] + u)[:, None, :] - om[None, :, :], axis=-1)
        assert (d.argmin(axis=1) == j).all()
    assert rho == pytest.approx(min(np.linalg.norm(om[i] - om[k]) for i in range(len(om)) for k in range(i + 1, len(om))))


def _window_w():
    return _script("fig1b40w_window")


def test_second_design_is_deterministic_and_is_the_preset():
    """fig1b40w's design recomputed from fig1b40's recorded runs equals its committed JSON: the lower end,
    replicates and budget are fig1b40's, the top the largest step within the budget."""
    mod = _window_w()
    a = mod.design()
    assert a == mod.design()
    assert _same_as_recorded(a, json.loads((ARCH / "fig1b40w_window.json").read_text()))
    first = _window().design()
    assert (a["n_min"], a["reps"], a["budget_s"]) == (first["n_min"], first["reps"], first["budget_s"])
    p = _design("fig1b40w")
    assert sample_sizes(p["n_min"], p["n_max"], p["n_points"]) == a["sizes"]
    assert (p["n_min"], p["n_max"], p["n_points"], p["reps"]) == (a["n_min"], a["n_max"], mod.N_SIZES, a["reps"])
    assert a["predicted_cost_s"] <= a["budget_s"]
    # one step more would exceed the budget (the top is the largest that fits)
    t = a["measured_time_per_fit_s"]
    last = max(map(int, t))
    more = sample_sizes(a["n_min"], a["n_max"] + mod.STEP, mod.N_SIZES)
    cost = a["seeds"] * a["reps"] * sum(
        t[str(n)] if str(n) in t else (float(np.exp(np.interp(np.log(n), np.log(sorted(map(int, t))),
                                                             np.log([t[str(m)] for m in sorted(map(int, t))]))))
                                       if n <= last else t[str(last)] * (n / last) ** a["time_exponent_used"])
        for n in more)
    assert cost > a["budget_s"]


def _figure1():
    return _script("figure1")


@pytest.mark.parametrize("name", ["fig1b40", "fig1b40w", "fig1b124w", "fig1b124x"])
def test_successor_seeds_record_is_the_runs_and_the_docs_table(tmp_path, name):
    """figure1.py --preset NAME --name NAME_seeds rebuilds the committed JSON from the three runs
    (slopes, categories, halves, certificate counts), and every cell of the docs table is the engine's
    (the guide page's for the current designs, records/theory/history.rst's for the superseded ones)."""
    import pandas as pd

    mod = _figure1()
    runs = [_run(name) / f"seed{s}" for s in (0, 1, 2)]
    assert mod.main(["--out", str(tmp_path), "--preset", name, "--name", f"{name}_seeds",
                     "--fig1b", *map(str, runs)]) == 0
    rec = json.loads((tmp_path / f"{name}_seeds.json").read_text())
    assert rec["preset"] == name and (tmp_path / f"{name}_seeds.png").is_file()
    recorded = json.loads((_run(name).parent / f"{name}_seeds.json").read_text())
    assert recorded["runs"].keys() == {f"simulations/rates/figure1/{name}/seed{s}" for s in (0, 1, 2)}  # the paths as recorded
    for run, r, rr in zip(runs, rec["runs"].values(), recorded["runs"].values()):
        summ = json.loads((run / "summary.json").read_text())
        res = pd.read_csv(run / "results.csv")
        ext = pd.read_csv(run / "extras.csv")
        # the certificate, counted here from the CSV files
        assert r["certificate"]["sse_below_truth"] == int((res["fit_objective"] < res["truth_objective"]).sum())
        assert r["certificate"]["possibly_on_box"] == int((ext["beta1_radial"] >= r["certificate"]["box_bound"]).sum())
        p = _design(name)
        assert sum(r["certificate"]["truth_check"].values()) == len(res) == r["fits"] == p["reps"] * p["n_points"]
        for col, _, _ in mod.FIG1B_LOSSES:
            f = next(f for f in summ["fits"] if f["router"] == "perturbed" and f["loss"] == col)
            assert r[col]["slope"]["slope"] == f["slope"] == rr[col]["slope"]["slope"]
            assert [h["category"] for h in r[col]["halves"]] == [h["category"] for h in f["halves"]]
        assert r["certificate"] == rr["certificate"]
    # fig1b40 and fig1b40w are superseded designs: their tables moved with the page's rounds to the
    # record of its history (issue 58); the current designs' tables stay on the guide page
    page = "records/theory/history.rst" if name in ("fig1b40", "fig1b40w") else "docs/guide/theory.rst"
    doc = (ROOT / page).read_text(encoding="utf-8")
    for line in mod.fig1b_table_rows(rec):
        for cell in line.split(" | ")[2:]:
            assert f"- {cell}" in doc, cell


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fig1b124x_is_fig1b124w_at_its_five_shared_sizes(seed):
    """The recorded fig1b124x run of each seed refits fig1b124w's data at the five shared sizes (streams keyed
    by (n, replicate)): the truth's sum of squares is the same to rounding, the fits' to 1e-5 relative (the
    least-squares code changed in its last digits between the runs, and a run-off atom's flat directions can
    move its loss at the same sum of squares); only n = 113 523 is new data."""
    import pandas as pd

    x = pd.read_csv(_run("fig1b124x") / f"seed{seed}" / "results.csv")
    w = pd.read_csv(_run("fig1b124w") / f"seed{seed}" / "results.csv")
    assert sorted(set(x.n)) == [6986, 12201, 21309, 37217, 65000, 113523] and len(x) == 6 * 124
    m = x.merge(w, on=["n", "replicate"], suffixes=("_x", "_w"))
    assert len(m) == 5 * 124 and set(x.n) - set(m.n) == {113523}
    assert np.allclose(m.truth_objective_x, m.truth_objective_w, rtol=1e-12, atol=0)
    assert np.allclose(m.fit_objective_x, m.fit_objective_w, rtol=1e-5, atol=0)


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden"])
def test_figure1_refuses_a_name_with_a_folder(tmp_path, bad, capsys):
    out = tmp_path / "out"
    runs = [_run("fig1b40") / "seed0"]
    with pytest.raises(SystemExit) as e:
        _figure1().main(["--out", str(out), "--name", bad, "--fig1b", *map(str, runs)])
    assert e.value.code == 2 and not out.exists()
    assert "--name" in capsys.readouterr().err


def test_vanilla_design_is_fig1b40w_with_the_vanilla_router():
    """fig1b40wv (Figure 1(b)'s vanilla curves) is fig1b40w's design with only the router changed: one
    design in panel (b)."""
    v, p = _config("fig1b40wv"), _config("fig1b40w")
    assert v.router == ("cosine",) and p.router == ("perturbed",)
    assert {k: x for k, x in _design("fig1b40wv").items() if k != "router"} == \
        {k: x for k, x in _design("fig1b40w").items() if k != "router"}
    import dataclasses
    for f in dataclasses.fields(RatesConfig):
        if f.name != "router":
            assert getattr(v, f.name) == getattr(p, f.name), f.name


def test_fig1b40wv_seed0_repeats_fig1b_vanilla_fits():
    """fig1b40wv's truth, streams and estimator are fig1b's: its seed-0 fits at n = 4000, replicates
    0-11, equal fig1b seed 0's vanilla fits there bit for bit (the router is not part of the stream key,
    and fig1b ran the same truth with both routers).  The recorded runs, compared as recorded."""
    import pandas as pd

    new = pd.read_csv(_run("fig1b40wv") / "seed0" / "results.csv")
    old = pd.read_csv(_run("fig1b") / "seed0" / "results.csv")
    a = new[(new.n == 4000) & (new.replicate < 12)].sort_values("replicate").reset_index(drop=True)
    b = old[(old.router == "cosine") & (old.n == 4000)].sort_values("replicate").reset_index(drop=True)
    assert len(a) == len(b) == 12 and set(new.router) == {"cosine"}
    for col in ("scenario", "replicate", "n_iter", "objective", "voronoi", "param_single", "param_multi"):
        assert a[col].tolist() == b[col].tolist(), col
