"""Theory checks take the rates engine's verdict categories and may only tighten their rules."""

import pytest
from moestat.theorems.checks.framework import apply_category, slope_verdict, verdict


def _fit(slope, lo, hi, predicted, category, reason="r"):
    return {"slope": slope, "ci_low": lo, "ci_high": hi, "predicted": predicted, "consistent": True,
            "category": category, "reason": reason, "plan": {"line": "20 replicates"}}


def test_flat_multi_atom_slope_no_longer_passes():
    # thm5_param_multi as measured: slope -0.02, predicted -0.25; the widened interval contains it
    fit = _fit(-0.02, -0.12, 0.08, -0.25, "floor", "stops decreasing")
    r = slope_verdict("thm5_param_multi", "", fit, -0.25, 0.15)
    assert r.passed is False and r.status == "failed" and r.category == "floor" and r.reason == "stops decreasing"
    assert "floor" in r.line() and r.details["plan"] == "20 replicates"


def test_consistent_category_passes_and_others_do_not():
    assert slope_verdict("a", "", _fit(-0.5, -0.6, -0.4, -0.5, "consistent"), -0.5, 0.15).passed is True
    for cat, status in (("inconclusive", "inconclusive"), ("pre-asymptotic", "inconclusive"), ("inconsistent", "failed")):
        r = slope_verdict("a", "", _fit(-0.5, -0.6, -0.4, -0.5, cat), -0.5, 0.15)
        assert (r.passed, r.status, r.category) == (False, status, cat)


def test_failed_rule_is_not_rescued_by_a_category():
    r = slope_verdict("a", "", _fit(-1.0, -1.1, -0.9, -0.5, "consistent"), -0.5, 0.15)
    assert r.passed is False and r.status == "failed"


def test_other_prediction_ignores_the_engine_category():
    r = slope_verdict("a", "", _fit(-0.5, -0.6, -0.4, -0.25, "inconsistent"), -0.5, 0.15)
    assert r.passed is True and r.category is None and "not -0.5" in r.reason


def test_vanilla_floor_may_pass_but_inconclusive_may_not():
    base = lambda: verdict("thm2", "", -0.25, -0.05, -0.1, 0.0, True, "slope > -0.25")  # noqa: E731
    assert apply_category(base(), _fit(-0.05, -0.1, 0.0, None, "floor"), passing=("consistent", "floor")).passed is True
    r = apply_category(base(), _fit(-0.05, -0.1, 0.0, None, "inconclusive"), passing=("consistent", "floor"))
    assert r.passed is False and r.status == "inconclusive"


def test_per_n_means_reads_extras(tmp_path):
    from moestat.theorems.checks.framework import per_n_means

    d = tmp_path / "rates" / "quick-over"
    d.mkdir(parents=True)
    (d / "results.csv").write_text("router,n,replicate,voronoi\nperturbed,100,0,1.0\nperturbed,100,1,3.0\n")
    (d / "extras.csv").write_text("router,n,replicate,weighted_multi\nperturbed,100,0,0.5\nperturbed,100,1,1.5\n")
    assert per_n_means({}, tmp_path, "quick-over", "perturbed", "voronoi") == {100: 2.0}
    assert per_n_means({}, tmp_path, "quick-over", "perturbed", "weighted_multi") == {100: 1.0}
    assert per_n_means({}, tmp_path, "quick-over", "perturbed", "beta1_radial") == {}


def test_failed_rule_is_labelled_inconsistent_even_if_the_engine_agreed():
    r = apply_category(verdict("thm2", "", -0.25, -0.39, -0.5, -0.29, False, "slope > -0.25"),
                       _fit(-0.39, -0.5, -0.29, None, "consistent", "flatter than perturbed"))
    assert r.passed is False and r.status == "failed" and r.category == "inconsistent"
    assert "slope > -0.25" in r.reason and "flatter than perturbed" in r.reason


def _curve(lb):
    """A stand-in two-point curve with bound ``lb`` at n = 1e2 .. 1e7 (only what the checks read)."""
    import numpy as np
    from types import SimpleNamespace

    lb = np.asarray(lb, float)
    return SimpleNamespace(ns=np.logspace(2, 7, lb.size), lower_bound=lb, lower_bound_low=lb, t_star=np.ones_like(lb),
                           kappa=np.zeros(3), kappa_se=np.zeros(3), info={})


def test_thm2_thm3_are_judged_by_the_two_point_bound_and_the_mechanism(tmp_path, monkeypatch):
    """Issue 34: Theorems 2/3 pass when (a) the vanilla two-point bound is flat, (b) the perturbed one
    falls on the same pairs and (c) the fitted radial error is flat while the direction error falls;
    each part alone makes the check fail.  The fixed-truth category no longer decides."""
    import numpy as np

    from moestat.theorems.checks import lecam
    from moestat.theorems.checks.framework import Context
    from moestat.theorems.checks.vanilla_slow import _one

    flat, falling = _curve(np.full(6, 0.8)), _curve(0.1 * np.logspace(0, -2.5, 6))
    state = {"van": flat, "per": falling}
    monkeypatch.setattr(lecam, "curves", lambda ctx: {"cosine": state["van"], "perturbed": state["per"]})
    monkeypatch.setattr(lecam, "split_curves", lambda ctx: {"cosine": state["van"], "perturbed": state["per"]})

    def summary(radial, direction, category="inconsistent"):
        f = lambda loss, s: {"router": "cosine", "loss": loss, "slope": s, "ci_low": s - 0.1, "ci_high": s + 0.1}  # noqa: E731
        return {"fits": [f("beta1_radial", radial), f("beta1_direction", direction),
                         {"router": "cosine", "loss": "voronoi", "slope": -0.39, "category": category}]}

    ctx = Context("quick", tmp_path)
    good = summary(0.0, -0.5)
    for name, thm, key, witness in (("thm2_vanilla_exact_slow", "Theorem 2", "quick-exact", "radial"),
                                    ("thm3_vanilla_over_slow", "Theorem 3", "quick-over", "split")):
        r = _one(ctx, name, thm, key, good, witness)
        assert r.passed is True and r.measured == 1.0 and r.details["fixed_truth_category"] == "inconsistent"
        assert _one(ctx, name, thm, key, summary(-0.5, -0.5), witness).passed is False  # (c) the radius is corrected
        assert _one(ctx, name, thm, key, summary(0.0, 0.05), witness).passed is False  # (c) the direction does not fall
        state["van"] = falling  # (a) the vanilla bound falls
        assert _one(ctx, name, thm, key, good, witness).passed is False
        state["van"], state["per"] = flat, flat  # (b) the instrument sees nothing on either router
        assert _one(ctx, name, thm, key, good, witness).passed is False
        state["per"] = falling


def test_radial_floor_check_judges_no_decay_against_zero(tmp_path):
    """PDE (4): the vanilla radial error must not decay.  The engine gives no category to a loss with
    no stated rate, so the check judges the exponent 0 itself: a flat radial error passes, one that
    falls at -1/2 fails."""
    from types import SimpleNamespace

    from moestat.theorems.checks.vanilla_slow import _split

    def summary(slope, lo, hi):
        rad = {"router": "cosine", "loss": "beta1_radial", "slope": slope, "ci_low": lo, "ci_high": hi,
               "predicted": None, "category": None, "reason": "no rate stated by the theorem for this loss"}
        return {"fits": [rad]}

    ctx = SimpleNamespace(out_dir=tmp_path)
    flat = _split(ctx, "quick-exact", summary(0.05, -0.06, 0.16))[0]
    falling = _split(ctx, "quick-exact", summary(-0.5, -0.6, -0.4))[0]
    assert flat.name == "pde4_vanilla_radial_floor" and flat.passed is True
    assert falling.passed is False and falling.status == "failed"
    # an interval wider than the cap (1/4) cannot pass, however flat its slope
    wide = _split(ctx, "quick-exact", summary(0.05, -0.18, 0.28))[0]
    assert wide.passed is False and wide.status == "inconclusive"
    # a slope just short of 0 whose interval misses it within the tolerance is near, not passed
    near = _split(ctx, "quick-exact", summary(-0.15, -0.2, -0.1))[0]
    assert near.passed is False and near.status == "near"


def test_thm5_notes_carry_the_measured_curvature(tmp_path):
    """A non-passing Theorem 5 check reports the local slopes of the lower and upper half of n, the
    median's slope and the fit-vs-truth certificate in its note (issue 34); a passing one does not."""
    import numpy as np

    from moestat.theorems.checks import over_strong
    from moestat.theorems.checks.framework import Context

    d = tmp_path / "rates" / "quick-over"
    d.mkdir(parents=True)
    ns = [2000, 4000, 8000, 16000, 32000]
    # steep (-1.5) over the lower half, -1/2 over the upper half: a pre-asymptotic curve
    single = {2000: 8.0, 4000: 8.0 * 2 ** -1.5, 8000: 1.0, 16000: 2 ** -0.5, 32000: 0.5}
    rows = ["router,n,replicate,voronoi,param_single,param_multi,truth_check"]
    extras = ["router,n,replicate,weighted_single,weighted_multi,beta1_radial,beta1_direction"]
    for n in ns:
        for r in range(2):
            rows.append(f"perturbed,{n},{r},{n ** -0.5},{single[n]},{n ** -0.25},{'above' if r == 0 else 'below_truth'}")
            extras.append(f"perturbed,{n},{r},{single[n]},{n ** -0.5},0.1,0.1")
    (d / "results.csv").write_text("\n".join(rows) + "\n")
    (d / "extras.csv").write_text("\n".join(extras) + "\n")
    diag = over_strong._diagnostics(Context("quick", tmp_path), "quick-over", "param_single")
    lo, hi = diag["local_slopes"].values()
    assert np.isclose(lo, -1.5) and np.isclose(hi, -0.5) and diag["fits_not_worse_than_truth"] == "5/10"
    note = over_strong._note(diag)
    assert "-1.50 over n <= 8000" in note and "-0.50 over n >= 8000" in note and "5/10" in note
    assert over_strong._diagnostics(Context("quick", tmp_path), "quick-over", "no_such_loss") == {}


def test_thm5_checks_report_the_run_off_measured_on_their_own_fits(tmp_path, monkeypatch):
    """Issue 34, Scope 5: every thm5 check reports, from its own fits' beta1_radial, how many perturbed fits
    have an atom at a radius reaching the box's bound (per n), and the check's loss over those fits and the
    others; the sentence names the run-off as the cause only for a loss the run-off fits carry.  The verdict
    is not touched (the same slope and status with and without the measurement)."""
    import numpy as np

    from moestat.theorems.checks import over_strong
    from moestat.theorems.checks.framework import Context
    from moestat.data.synthetic import make_scenario

    sc = make_scenario("perturbed", "over")
    bound = sc.box.beta1
    r_min = min(r for r in np.linalg.norm(sc.truth.numpy().beta1, axis=-1) if r > 0)
    d = tmp_path / "rates" / "quick-over"
    d.mkdir(parents=True)
    ns = [8000, 16000, 32000]
    rows = ["router,n,replicate,voronoi,param_single,param_multi"]
    extras = ["router,n,replicate,weighted_single,weighted_multi,beta1_radial,beta1_direction"]
    runoff = {8000: 2, 16000: 1, 32000: 0}  # fits per n (of 3) with an atom beyond the bound
    for n in ns:
        for r in range(3):
            off = r < runoff[n]
            # just above / just below the threshold radial + r_min = bound
            radial = bound - r_min + (0.01 if off else -0.01)
            rows.append(f"perturbed,{n},{r},{50.0 if off else 1.0},0.3,1.0")
            extras.append(f"perturbed,{n},{r},0.4,{40.0 if off else 2.0},{radial},0.1")
            rows.append(f"cosine,{n},{r},9.0,9.0,9.0")  # the other router's rows are not counted
            extras.append(f"cosine,{n},{r},0.4,2.0,{bound + 5},0.1")
    (d / "results.csv").write_text("\n".join(rows) + "\n")
    (d / "extras.csv").write_text("\n".join(extras) + "\n")
    ctx = Context("quick", tmp_path)
    r = over_strong._runoff(ctx, "quick-over", ["voronoi", "param_single"])
    assert r["run_off"] == 3 and r["fits"] == 9 and r["box_beta1"] == bound
    assert {n: v["run_off"] for n, v in r["by_n"].items()} == runoff
    assert r["loss_means"]["voronoi"] == {"run_off": 50.0, "others": 1.0}
    carried = over_strong._runoff_sentence(r, "voronoi")
    assert "3/9 perturbed fits" in carried and "per n 2/3, 1/3, 0/3" in carried and "measured cause" in carried
    flat = over_strong._runoff_sentence(r, "param_single")
    assert "measured cause" not in flat and "not what moves this loss" in flat

    fit = {"router": "perturbed", "slope": -0.6, "ci_low": -2.0, "ci_high": 0.8, "predicted": -0.5, "category": "inconclusive",
           "reason": "wide"}
    summary = {"fits": [dict(fit, loss=loss) for loss in ("voronoi", "param_single", "param_multi", "weighted_single",
                                                          "weighted_multi")]}
    monkeypatch.setattr(over_strong, "thm5_run", lambda c: ("quick-over", summary))
    res = {x.name: x for x in over_strong.run(ctx)}
    d2 = res["thm5_over_D2"]
    assert d2.status == "inconclusive" and d2.measured == -0.6 and d2.category == "inconclusive"
    assert d2.details["runoff"]["run_off"] == 3 and d2.details["runoff"]["loss_means"] == {"run_off": 50.0, "others": 1.0}
    assert d2.reason.startswith("wide; run-off measured on these fits") and "measured cause" in d2.reason
    assert "measured cause" in res["thm5_weighted_multi"].reason  # 40 against 2
    assert "measured cause" not in res["thm5_param_single"].reason
    (d / "extras.csv").unlink()  # no beta1_radial: nothing is claimed
    assert over_strong._runoff(ctx, "quick-over", ["voronoi"]) == {}
    bare = {x.name: x for x in over_strong.run(ctx)}
    assert "runoff" not in bare["thm5_over_D2"].details and "run-off measured" not in bare["thm5_over_D2"].reason
    assert bare["thm5_over_D2"].reason.startswith("wide")  # then the causes results.csv alone gives (test_over_strong_causes.py)
    assert bare["thm5_over_D2"].status == d2.status and bare["thm5_over_D2"].measured == d2.measured


def test_cell_aggregates_keep_shared_cells_out_of_the_single_cell_errors():
    """Part (c') of thm3: an atom of a shared Voronoi cell never enters the single-cell maxima (the
    first rule's largest-over-all-atoms error did, issue 34), and the shared-cell sum is mass-weighted."""
    import numpy as np

    from moestat.theorems.checks.vanilla_slow import cell_aggregates

    # atoms 0, 1 share a cell (the light atom 1 far off in direction); atoms 2, 3 are alone
    a = cell_aggregates(radial=[0.3, 0.9, 0.2, 0.1], direction=[0.1, 0.8, 0.05, 0.02], cell_size=[2, 2, 1, 1],
                        mass=[0.6, 0.1, 0.5, 0.4])
    assert a["radial_single"] == 0.2 and a["direction_single"] == 0.05
    assert a["direction_shared"] == 0.8 and a["direction_all"] == 0.8
    assert np.isclose(a["weighted_direction_shared"], 0.6 * 0.1**2 + 0.1 * 0.8**2)
    none = cell_aggregates([0.1, 0.2], [0.1, 0.2], [2, 2], [0.5, 0.5])
    assert np.isnan(none["direction_single"]) and np.isnan(none["radial_single"])


def test_cell_rule_judges_single_cells_and_requires_the_refit_to_match(tmp_path):
    """(c') passes when the single-cell direction error falls and the radius does not move, whatever the
    shared cells do; it fails when the single-cell direction is flat, when the radius is corrected, and
    when the refit does not reproduce the recorded fits."""
    import numpy as np

    from moestat.theorems.checks.framework import Context
    from moestat.theorems.checks.vanilla_slow import cell_rule

    rng = np.random.default_rng(3)
    ns = [2000, 4000, 8000, 16000, 32000]

    def fits(dir_exp, rad_exp, recorded_shift=0.0):
        out = []
        for n in ns:
            for r in range(6):
                e = np.exp(0.05 * rng.standard_normal(3))
                d_single, rad = 5 * n ** dir_exp * e[0], 0.3 * n ** rad_exp * e[1]
                d_shared = 0.5 * e[2]  # a shared-cell atom that does not converge (not judged)
                out.append({"n": n, "replicate": r, "radial_single": rad, "direction_single": d_single,
                            "direction_shared": d_shared, "weighted_direction_shared": 0.1 * d_shared**2,
                            "direction_all": max(d_single, d_shared),
                            "recorded_direction_all": max(d_single, d_shared) * (1 + recorded_shift)})
        return out

    ctx = Context("quick", tmp_path)
    ok, det = cell_rule(ctx, fits(-0.5, 0.0), 200)
    assert ok and det["refit_matches_recorded"] == "30/30"
    assert np.isclose(det["direction_single"]["slope"], -0.5, atol=0.1)
    assert abs(det["shared_not_judged"]["direction_all"]["slope"]) < 0.1  # the first rule's quantity: flat
    assert not cell_rule(ctx, fits(0.0, 0.0), 200)[0]  # single-cell direction flat
    assert not cell_rule(ctx, fits(-0.5, -0.5), 200)[0]  # the radius is corrected
    bad_ok, bad = cell_rule(ctx, fits(-0.5, 0.0, recorded_shift=1e-3), 200)
    assert not bad_ok and bad["refit_matches_recorded"] == "0/30"


@pytest.mark.slow
def test_cell_mechanism_refits_the_recorded_vanilla_fits(tmp_path):
    """The refit of (c') runs the sweep's own data, start and estimator streams: on a tiny
    over-specified run its largest direction error equals the recorded ``beta1_direction``."""
    import numpy as np

    from moestat.theorems.checks.framework import Context
    from moestat.theorems.checks.vanilla_slow import cell_mechanism

    ctx = Context("quick", tmp_path)
    s = ctx.rates("over", router=["cosine"], setting="over", estimator="lse", max_iter=30, cell_errors=True,
                  n_min=200, n_max=800, n_points=3, reps=2, n_boot=20)
    fits = cell_mechanism(ctx, "quick-over", s)
    assert len(fits) == 6
    for f in fits:
        assert np.isfinite(f["recorded_direction_all"])
        assert np.isclose(f["direction_all"], f["recorded_direction_all"], rtol=1e-6, atol=0)


def test_quick_over_run_starts_where_the_asymptotics_begin(tmp_path):
    """Quick mode's over-specified run starts at OVER_QUICK_N_MIN (issue 34: the recorded local slope
    is -1.33 below n = 8000, -0.64 above); the exact run, full mode and an --n-max override keep
    the plain grid."""
    from moestat.theorems.checks import grids
    from moestat.theorems.checks.framework import Context

    seen = {}

    def capture(ctx):
        ctx.rates = lambda key, **cfg: seen.setdefault((ctx.mode, ctx.n_max, key), cfg)
        return ctx

    q = capture(Context("quick", tmp_path))
    grids.over_run(q), grids.exact_run(q)
    assert seen[("quick", None, "over")]["n_min"] == grids.OVER_QUICK_N_MIN == 8000
    assert seen[("quick", None, "over")]["n_max"] == 32000
    assert seen[("quick", None, "exact")]["n_min"] == 2000
    grids.over_run(capture(Context("full", tmp_path)))
    assert seen[("full", None, "over")]["n_min"] == 2000
    grids.over_run(capture(Context("quick", tmp_path, n_max=8000)))
    assert seen[("quick", 8000, "over")]["n_min"] == 1000
