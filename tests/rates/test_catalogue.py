"""The rate catalogue (``moestat reproduce``): entries, statuses, the door and its report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from moestat.cli.main import main as moestat
from moestat.rates import catalogue as cat
from moestat.rates.fit import predicted_exponent

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(n_min=200, n_max=800, n_points=3, reps=3, n_boot=100, holdout=256)


def _run(argv, capsys):
    try:
        rc = moestat(list(argv))
    except SystemExit as exc:  # argparse refuses from inside the parser
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_list_shows_at_least_eight_entries_each_with_paper_predictions_and_status(capsys):
    rc, out, _ = _run(["reproduce", "--list"], capsys)
    assert rc == 0
    assert len(cat.ENTRIES) >= 8
    for key, e in cat.ENTRIES.items():
        assert key in out and e.paper.cite in out
        assert e.predictions, key
    assert out.count("status: ") == len(cat.ENTRIES)
    assert f"{len(cat.ENTRIES)} entries" in out


def test_every_entry_is_distinct_and_names_its_paper_by_authors_and_year():
    papers = {e.paper.cite for e in cat.ENTRIES.values()}
    assert len(papers) >= 7  # eight papers, two of them by Nguyen, Ho & Rinaldo (2024)
    for e in cat.ENTRIES.values():
        assert e.paper.year >= 2023 and e.paper.arxiv and e.paper.read_at
        for run in e.runs:
            assert run.quick and run.full and run.quick != run.full
            assert run.quick["n_max"] <= run.full["n_max"] and run.quick["reps"] <= run.full["reps"]


def test_declared_exponents_are_the_ones_the_rates_pipeline_applies():
    # the catalogue's predictions must not drift from the verdicts of moestat rates
    from catalogue_cases import file_predictions

    from catalogue_cases import stated_predictions

    checked = 0
    for e, p, router, loss, cfg in stated_predictions():
        got = predicted_exponent(router, cfg.setting, loss, cfg.estimator, file_predictions(cfg))
        assert got == p.exponent, (e.key, p)
        checked += 1
    assert checked >= 10


def test_a_slower_than_polynomial_prediction_is_also_none_in_the_pipeline():
    from catalogue_cases import file_predictions

    e = cat.entry("lse-ffn-vs-linear")
    cfg = cat.run_config({r.label: r for r in e.runs}["linear"], quick=True)
    assert file_predictions(cfg)["D2_ls"] is None
    e = cat.entry("cosine-exact")
    assert predicted_exponent("cosine", "exact", "voronoi") is None


def test_an_entry_whose_scenario_is_missing_says_what_it_needs_and_is_refused(tmp_path, monkeypatch, capsys):
    e = cat.entry("lse-ffn-vs-linear")
    broken = cat.Entry(**{**e.__dict__, "key": "broken", "runs": (cat.Run("x", {"catalogue_file": "nowhere.toml"},
                                                                                 {"reps": 2}, {"reps": 2}, "a file"),)})
    assert cat.entry_status(broken).startswith("needs: a file")
    monkeypatch.setitem(cat.ENTRIES, "broken", broken)
    with pytest.raises(ValueError, match="cannot run: needs: a file"):
        cat.reproduce("broken", tmp_path / "o")
    rc, _, err = _run(["reproduce", "broken", "--quick", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "needs: a file" in err
    assert not (tmp_path / "o").exists()


def test_a_mixture_entry_on_an_additive_scenario_is_not_runnable(monkeypatch, tmp_path):
    # a likelihood entry must not silently run on y = g(x) + noise
    src = cat.catalogue_file("lse_sigmoid_over.toml")
    e = cat.entry("lse-ffn-vs-linear")
    fake = cat.Entry(**{**e.__dict__, "key": "fake-mixture", "runs": (
        cat.Run("m", {"scenario_file": str(src), "max_iter": 10}, {"reps": 2}, TINY, "a mixture scenario"),)})
    assert cat.entry_status(fake).startswith("needs: a mixture scenario")


def test_blocked_entries_state_why():
    e = cat.entry("temperature-gmoe")  # runnable since its gate fits the temperature; the mechanism stays
    fake = cat.Entry(**{**e.__dict__, "key": "fake-blocked", "blocked": "a parameter moestat cannot fit"})
    assert cat.entry_status(fake) == "needs: a parameter moestat cannot fit"


@pytest.mark.parametrize("ci,category", [([0.05, 0.4], "consistent"), ([-0.4, -0.05], "inconsistent"), ([-0.1, 0.3], "inconclusive")])
def test_contrast_is_decided_by_the_paired_interval(ci, category):
    paired = {"category": category, "reason": f"interval {ci}", "ci": ci, "difference": sum(ci) / 2}
    v = cat.contrast_verdict({"slope": -0.3, "category": "consistent"}, {"slope": -0.5, "category": "consistent"}, paired)
    assert v["category"] == category and v["paired"]["ci"] == ci


def test_no_fixed_margin_decides_a_contrast():
    # a slope gap of 0.45 alone (no paired interval) is not a verdict; nor is a missing slope
    v = cat.contrast_verdict({"slope": -0.05, "category": "consistent"}, {"slope": -0.5, "category": "consistent"})
    assert v["category"] == "inconclusive" and "paired" in v["reason"]
    assert cat.contrast_verdict(None, {"slope": -0.5})["category"] == "inconclusive"


@pytest.mark.slow
def test_reproduce_end_to_end_on_a_tiny_grid(tmp_path):
    e = cat.entry("gmoe-exact")
    runs = [(r, cat.run_config(r, True, quiet=True).replace(**TINY, starts=1, max_iter=100).validate()) for r in e.runs]
    out = tmp_path / "gmoe"
    report = cat.reproduce("gmoe-exact", out, quick=True, runs=runs)
    assert json.loads((out / "catalogue.json").read_text()) == json.loads(json.dumps(report))
    summary = json.loads((out / "gaussian-moe" / "summary.json").read_text())
    assert (out / "gaussian-moe" / "results.csv").is_file() and (out / "gaussian-moe" / "convergence.png").is_file()
    assert report["mode"] == "quick" and report["runs"][0]["counts"]["expected"] == 9
    fits = {f["loss"]: f for f in summary["fits"]}
    for row in report["predictions"]:  # the report repeats the pipeline's numbers, nothing else
        f = fits[row["loss"]]
        assert row["slope"] == f["slope"] and row["category"] == f["category"]
        assert row["pipeline_predicted"] == row["predicted"]
    text = cat.format_report(report)
    assert "gmoe-exact (quick)" in text and "wall:" in text
    # the slopes printed are the per-n median's (the catalogue's statistic); the mean's verdict follows each reason
    assert "slopes of the per-n median" in text
    for row in report["predictions"]:
        m = fits[row["loss"]]["mean_statistic"]
        assert f"{row['run']} {row['loss']} (the mean, reported): " in text and m["category"] in text


@pytest.mark.parametrize("argv,word", [
    (["reproduce"], "name an entry"),
    (["reproduce", "nonsense", "--out", "x"], "unknown catalogue entry"),
    (["reproduce", "--list", "gmoe-exact"], "not both"),
])
def test_bad_input_is_one_line_exit_2(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and err.count("\n") == 1 and word in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_out_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    rc, _, err = _run(["reproduce", "gmoe-exact", "--quick", "--out", str(out)], capsys)
    assert rc == 2 and "not empty" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_scenario_files_are_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"moestat.rates" = ["catalogue_files/*.toml"]' in text
    for e in cat.ENTRIES.values():
        if cat.entry_status(e) == "runnable":
            for r in e.runs:
                if "catalogue_file" in r.base:
                    assert cat.catalogue_file(r.base["catalogue_file"]).is_file()


def test_a_slow_fit_judged_by_the_pipeline_keeps_its_category():
    from moestat.rates import catalogue as cat

    slow = {"slope": -0.36, "category": "inconsistent", "reason": "straight at -0.36", "slow_rule": {"rule": "straight"}}
    v = cat.contrast_verdict(slow, {"slope": -0.55, "category": "consistent"})
    assert v["category"] == "inconsistent" and "straight at -0.36" in v["reason"]


def test_list_describes_each_run_from_the_scenario_it_builds(capsys):
    """Issue 33: --list said topk-gmoe is "K = 1 of k* = 2" while its file is Top-2 of 3; the model
    lines are now generated from each run's scenario file (read here independently with tomllib)."""
    import tomllib

    rc, out, _ = _run(["reproduce", "--list"], capsys)
    assert rc == 0
    blocks = {}
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.split()[0] in cat.ENTRIES:
            key = line.split()[0]
        if "key" in locals():
            blocks.setdefault(key, []).append(line)
    for key, e in cat.ENTRIES.items():
        text = "\n".join(blocks[key])
        for run in e.runs:
            name = run.base.get("catalogue_file")
            if not name:
                continue
            data = tomllib.loads(cat.catalogue_file(name).read_text())
            k_star, k = len(data["atoms"]), int(data.get("fit", {}).get("k", len(data["atoms"])))
            K = data["gate"].get("k_active")
            assert f"{run.label}: " in text, (key, run.label)
            line = next(ln for ln in blocks[key] if f"{run.label}: " in ln)
            assert f"k* = {k_star}, fitted k = {k} ({'exact' if k == k_star else 'over-specified'} fit)" in line, line
            assert (f"Top-{K} of k* = {k_star}" in line) if K is not None and K < k_star else ("dense gate" in line), line
    topk = "\n".join(blocks["topk-gmoe"])
    assert "Top-2 of k* = 3" in topk and "K = 1 of" not in topk


# ---- the entries of issue 33, Scope 6 ---------------------------------------------------------
NEW = {"laplace-gmoe": "runnable", "topk-over": "runnable", "shared-sigmoid": "runnable"}


@pytest.mark.slow
def test_the_new_entries_load_and_list_with_their_status(capsys):
    rc, out, _ = _run(["reproduce", "--list"], capsys)
    assert rc == 0
    for key, status in NEW.items():
        e = cat.entry(key)
        assert cat.entry_status(e).startswith(status), (key, cat.entry_status(e))
        block = out[out.index(f"\n{key} "):]
        block = block[: block.index("status: ")] + block[block.index("status: "):].split("\n", 1)[0]
        assert e.paper.cite in block and f"status: {status}" in block
    for key in NEW:  # the configurations build and validate (nothing run)
        assert [r.label for r, _ in cat.plan(key, quick=True)] == [r.label for r in cat.entry(key).runs]


def test_a_blocked_entry_is_listed_with_what_it_needs_and_refused(monkeypatch):
    # no shipped entry is blocked since shared-sigmoid runs (issue 33); the mechanism stays for the next one
    blocked = dataclasses.replace(cat.entry("shared-sigmoid"), blocked="a model class moestat lacks")
    monkeypatch.setitem(cat.ENTRIES, "shared-sigmoid", blocked)
    assert cat.entry_status(blocked) == "needs: a model class moestat lacks"
    with pytest.raises(ValueError, match="cannot run: needs: a model class moestat lacks"):
        cat.plan("shared-sigmoid")


def test_laplace_predictions_are_marked_as_figure_3_slopes_not_theorem_exponents():
    # Theorem 3.2 of Han et al. (2024) was not read: the exponents are a reading of Figure 3
    e = cat.entry("laplace-gmoe")
    assert {(p.run, p.loss): p.exponent for p in e.predictions} == {("exact", "D1"): -0.49, ("over", "D2"): -0.47}
    for p in e.predictions:
        assert "Figure 3" in p.source and "read from the figure" in p.source and "not read" in p.source
    for name in ("laplace_gmoe_exact.toml", "laplace_gmoe_over.toml"):
        assert "NOT a theorem's exponent" in cat.catalogue_file(name).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("key", ["laplace-gmoe", "topk-over", "shared-sigmoid"])
def test_the_new_truths_meet_their_theorem_and_the_grids_start_above_n_ok(key):
    from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses
    from moestat.rates.preflight import preflight
    from moestat.rates.resolve import build_scenario

    rows = catalogue_hypotheses([key], n=800)
    assert {r["run"] for r in rows} == {r.label for r in cat.entry(key).runs}
    assert all(r["met"] for r in rows), [(r["run"], r["failing"]) for r in rows]
    for run in cat.entry(key).runs:
        cfg = cat.run_config(run, quick=True)
        sc = build_scenario(cfg.scenario_key(cfg.router[0]))
        # 4 000 draws: the Monte Carlo error of n_ok is a few percent (396 and 1 766 with 20 000 draws),
        # far from the grids' first sizes (500 / 1 000 and 2 000)
        n_ok = preflight(sc, [run.quick["n_min"], run.full["n_min"]], m=4000)["n_ok"]
        assert n_ok is not None and n_ok < min(run.quick["n_min"], run.full["n_min"]), (key, run.label, n_ok)


@pytest.mark.slow
def test_the_catalogue_window_starts_at_the_first_size_above_the_preflight_n_ok():
    """Issue 33 Scope 4 (declared in HYPOTHESES.md): a run is judged from its first grid size at or above the
    largest finite pre-flight n_ok of its routers; a grid already above it, or one that would keep fewer than 3
    sizes, is judged whole; a window the configuration declares itself is kept."""
    from moestat.rates.preflight import preflight
    from moestat.rates.resolve import Experiment

    (run, cfg), = cat.plan("gmoe-over3")
    n_ok = preflight(Experiment.of(cfg).scenarios[cfg.router[0]], cfg.ns)["n_ok"]
    assert cfg.ns[0] < n_ok  # the recorded grid starts below its truth's n_ok (200 < 217)
    assert cfg.window_min == min(n for n in cfg.ns if n >= n_ok)
    bare = cat.run_config(run, False)
    assert bare.window_min is None and cat.preflight_window(bare) == (cfg.window_min, n_ok)
    assert cat.with_preflight_window(bare.replace(window_min=5000)).window_min == 5000
    assert cat.preflight_window(bare.replace(n_min=n_ok + 1))[0] is None  # the grid starts above it
    short = bare.replace(n_min=100, n_max=300, n_points=4)  # 100 .. 300: fewer than 3 sizes above 217
    assert cat.preflight_window(short)[0] is None
    (_, topk), = cat.plan("topk-gmoe")
    assert topk.window_min is None  # designed above its n_ok (1 766 < 2 000)
    # a router with a singular Fisher information (the temperature gate) sets no window
    assert all(c.window_min is None for _, c in cat.plan("temperature-gmoe"))


def test_every_prediction_states_the_standing_of_its_source_from_the_vocabulary():
    assert cat.STANDINGS[0] == cat.THEOREM_STANDING == "full text" and cat.UNREAD_STANDING in cat.STANDINGS
    assert {"full text", "abstract", "digest", "figure slope", "own derivation"} <= set(cat.STANDINGS)
    src = (ROOT / "moestat" / "theorems" / "registry.py").read_text(encoding="utf-8")
    for s in cat.STANDINGS:
        assert f"#: - ``{s}``:" in src, s  # the definitions live beside the constant
    for e in cat.ENTRIES.values():
        for p in e.predictions:
            assert p.standing in cat.STANDINGS, (e.key, p.run, p.loss)
            if p.standing == cat.UNREAD_STANDING:  # nothing read: no exponent
                assert p.exponent is None and "not read" in p.text, (e.key, p.loss)
    # the texts the standings were read from
    assert {p.standing for p in cat.entry("cosine-exact").predictions} == {"digest"}
    assert {p.standing for p in cat.entry("laplace-gmoe").predictions} == {"figure slope"}
    assert {p.standing for p in cat.entry("temperature-gmoe").predictions} == {"abstract"}
    for p in cat.entry("sigmoid-vs-softmax").predictions:  # borrowed exponents name where from
        if p.standing == "own derivation" and p.loss != "regression_l2":
            assert "Nguyen, Ho & Rinaldo 2024, least squares" in p.source
    p = cat.entry("gmoe-exact").predictions[0]
    with pytest.raises(ValueError, match="standing must be one of"):
        dataclasses.replace(p, standing="")
    with pytest.raises(ValueError, match="standing must be one of"):
        dataclasses.replace(p, standing="theorem")


def test_list_shows_each_predictions_source_in_an_aligned_column(capsys):
    from moestat.rates.catalogue_views import format_list

    text = format_list()
    lines = text.splitlines()
    srcs = [line for line in lines if line.startswith(" ") and "source: " in line]
    assert len(srcs) == sum(len(e.predictions) for e in cat.ENTRIES.values())
    assert len({line.index("source: ") for line in srcs}) == 1  # one column over the whole list
    for e in cat.ENTRIES.values():
        block = text[text.index(f"\n{e.key} ") if not text.startswith(e.key) else 0:]
        block = block[: block.index("status: ")]
        for p in e.predictions:
            assert any(f"{p.run}/{p.loss} " in line and line.rstrip().endswith(f"source: {p.standing}")
                       for line in block.splitlines()), (e.key, p.loss)
    last = lines[-1]
    assert last.startswith("predictions by source: full text 0") and "exponent not read 2 (entries: shared-sigmoid)" in last
    rc, out, _ = _run(["reproduce", "--list"], capsys)
    assert rc == 0 and out.strip() == text.strip()


def test_the_count_line_splits_consistent_rows_by_standing():
    def row(loss, standing, category):
        return {"run": "r", "loss": loss, "predicted": -0.5, "prediction": "n^-0.5", "standing": standing,
                "slope": -0.5, "ci": [-0.6, -0.4], "category": category, "reason": "-"}

    rows = [row("a", "full text", "consistent"), row("b", "full text", "inconclusive"),
            row("c", "abstract", "consistent"), row("d", "digest", "consistent"), row("e", "figure slope", "inconclusive"),
            row("f", "own derivation", "consistent"), {**row("g", "not read", None), "predicted": None}]
    c = cat.standing_counts(rows)
    assert (c["theorem_reproductions"], c["theorem_rows"]) == (1, 2)
    assert (c["lower_consistent"], c["lower_standing"], c["unread"], c["unstated"]) == (3, 4, 1, 0)
    assert c["by_standing"] == {"full text": 2, "abstract": 1, "digest": 1, "figure slope": 1, "own derivation": 1,
                                "not read": 1}
    assert cat.category_counts(rows)["reproduced"] == 4  # the category count is unchanged: consistent rows
    report = {"key": "k", "mode": "full", "paper": {"authors": "A", "year": 2024}, "figure": "Fig. 1",
              "predictions": rows, "contrast": None, "instrument": None, "runs": [], "wall_s": 1.0}
    text = cat.format_report(report)
    line = next(x for x in text.splitlines() if x.startswith("sources: "))
    assert line == ("sources: theorem reproductions 1 of 2 rows read in full text; qualitative claims / lower standing "
                    "3 consistent of 4 rows (abstract 1, digest 1, figure slope 1, own derivation 1); exponent not read 1 rows")
    head = text.splitlines()[1]
    assert "source" in head and all(x.index(r["standing"]) == head.index("source") for x, r in
                                    zip(text.splitlines()[3:10], rows))
    # a report written before the field: its rows are counted apart, never as a reproduction
    old = cat.standing_counts([{k: v for k, v in r.items() if k != "standing"} for r in rows])
    assert old["unstated"] == 7 and old["theorem_reproductions"] == 0
    assert "source not stated 7 rows" in cat.format_standing_counts(old)


def test_a_report_carries_each_rows_standing():
    e = cat.entry("gmoe-exact")
    fits = [{"router": "gaussian-moe", "loss": "voronoi", "slope": -0.5, "ci_low": -0.55, "ci_high": -0.45,
             "predicted": -0.5, "sided": "two", "category": "consistent", "reason": "inside"}]
    runs = [{"label": "gaussian-moe", "wall_s": 0.0, "counts": {"converged": 1, "expected": 1}, "summary": {"fits": fits}}]
    report = cat._report(e, False, runs)
    assert [r["standing"] for r in report["predictions"]] == [p.standing for p in e.predictions]
    assert report["standing_counts"]["theorem_reproductions"] == 0
    assert report["standing_counts"]["lower_consistent"] == 1
    json.dumps(report)


def test_where_a_paper_was_read_says_what_was_read_when_no_theorem_was_read_in_full():
    """``--list``'s "read at" agrees with the standings: a paper none of whose predictions was read in its
    full text names what was read (an abstract, a digest, a README, a page quoting it, nothing)."""
    for e in cat.ENTRIES.values():
        if all(p.standing != cat.THEOREM_STANDING for p in e.predictions):
            assert any(w in e.paper.read_at for w in ("abstract", "digest", "README", "quoting", "title and authors only")), e.key
