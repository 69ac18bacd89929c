"""The scenario pre-flight (moestat.rates.preflight, ``moestat check``)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from moestat.cli.main import main
from moestat.rates.preflight import COND_WARN, fisher_information, preflight

ROOT = Path(__file__).resolve().parents[2]

NEAR_SINGULAR = """
name = "near-singular"
[gate]
score = "linear"
normalisation = "sigmoid"
[expert]
kind = "gelu"
[fit]
k = 2
[[atoms]]
beta0 = 0.5
beta1 = [1.5, -1.0]
eta = [1.0, 0.5, 0.2]
[[atoms]]   # almost the same expert, with a gate almost the first one's: nearly unidentifiable
beta0 = 0.5
beta1 = [1.5, -0.98]
eta = [1.0, 0.52, 0.2]
"""


@pytest.mark.slow
def test_cramer_rao_sd_matches_the_fits():
    """At n = 20000 the least-squares fits' spread equals the Cramér--Rao sd within 30%."""
    from moestat.data.synthetic import make_scenario
    from moestat.estimators.jacobians import pack
    from moestat.rates.resolve import build_estimator

    sc = make_scenario("perturbed", "exact")
    n, R = 20000, 40
    rng = np.random.default_rng(7)
    data = [sc.sample(n, rng) for _ in range(R)]
    est = build_estimator("lse", sc, 200, 0, "cpu")
    est.fit(np.stack([d[0] for d in data]), np.stack([d[1] for d in data]), init=sc.truth.expand(R))
    assert np.all(np.asarray(est.converged_))
    theta = pack(est.params_.torch(), True).numpy()
    theta0 = pack(sc.truth.expand(1).torch(), True).numpy()[0]
    info, blocks = fisher_information(sc, m=20000, seed=1)
    cov = np.linalg.inv(info) / n
    err = theta - theta0
    # the whole parameter vector and every block with at least 3 coordinates (a 1-d block's RMS over 40 fits
    # has a relative sd of 11%: at 30% it would fail by chance one run in 100)
    checks = [("all", list(range(theta.shape[1])))] + [b for b in blocks if len(b[1]) >= 3]
    for name, idx in checks:
        cr = math.sqrt(np.trace(cov[np.ix_(idx, idx)]))
        emp = math.sqrt(np.mean(np.sum(err[:, idx] ** 2, axis=1)))
        assert abs(emp / cr - 1) < 0.3, (name, emp, cr)


def test_near_singular_truth_warns(tmp_path):
    from moestat.data.scenario_files import load_scenario

    p = tmp_path / "ns.toml"
    p.write_text(NEAR_SINGULAR)
    rep = preflight(load_scenario(str(p)), [2000, 8000, 32000], m=4000)
    assert rep["condition_number"] > COND_WARN
    assert any(w.startswith("near-singular") for w in rep["warnings"])
    assert any("whole grid lies below" in w for w in rep["warnings"])


def test_sd_scales_like_one_over_root_n_and_n_ok_is_where_it_meets_the_target():
    from moestat.data.synthetic import make_scenario

    rep = preflight(make_scenario("perturbed", "exact"), [1000, 4000], m=4000)
    for b in rep["blocks"]:
        assert b["sd"][0] == pytest.approx(2 * b["sd"][1])
        assert b["sd_1"] / math.sqrt(b["n_ok"]) == pytest.approx(rep["target_sd"])
    assert rep["n_ok"] == math.ceil(max(b["n_ok"] for b in rep["blocks"]))


def test_likelihood_scenario_has_a_fisher_information():
    from moestat.data.gaussian_scenarios import model1_scenario

    info, blocks = fisher_information(model1_scenario(), m=4000)
    w = np.linalg.eigvalsh(info)  # model 1 is identifiable: positive definite relative to the largest
    assert info.shape == (8, 8) and w[0] > 1e-8 * w[-1]  # (smallest/largest 4.8e-6 here; rounding ~1e-16)
    assert [b[0] for b in blocks] == ["atom 0 beta0", "atom 0 beta1", "atom 0 eta", "atom 1 eta"]


def test_a_mixture_noise_file_gets_the_likelihood_fisher_information_of_its_own_model():
    """A scenario file drawing y from the mixture is a likelihood scenario: the same truth as the
    built-in Gaussian MoE gives the same Fisher information (not the least-squares one of its mean
    function), and a multinomial-logistic file gets its own."""
    from moestat.data.gaussian_scenarios import GaussianMoEScenario
    from moestat.data.scenario_files import load_scenario, scenario_from_mapping
    from moestat.rates.preflight import preflight

    sc = load_scenario(str(ROOT / "examples" / "gaussian_moe_d2.toml"))

    class SameDraws(GaussianMoEScenario):  # the built-in likelihood branch on the file's own (x, y)
        def sample(self, n, rng):
            return sc.sample(n, rng)

    builtin = SameDraws(name="same", truth=sc.truth, k_fit=3)
    info_f, blocks_f = fisher_information(sc, m=3000, seed=1)
    info_b, blocks_b = fisher_information(builtin, m=3000, seed=1)
    assert blocks_f == blocks_b
    np.testing.assert_allclose(info_f, info_b, rtol=1e-10, atol=1e-12)
    assert preflight(sc, [1000], m=2000)["kind"] == "likelihood"
    multi = scenario_from_mapping({"gate": {}, "expert": {"kind": "multinomial", "classes": 3}, "noise": {"model": "mixture"},
                                   "atoms": [dict(beta0=0.5, beta1=[2.0, -1.0], eta=[2, 2, 0, -2, 0, 1]),
                                             dict(beta0=0.0, beta1=[0.0, 0.0], eta=[-2, 0, 1, 0, -2, 0])]})
    info_m, blocks_m = fisher_information(multi, m=3000)
    # identifiable (softmax gate with a reference atom, multinomial experts with a reference class):
    # positive definite, checked relative to the largest eigenvalue so that rounding cannot decide it
    # (smallest/largest is 3.9e-4 here, rounding is ~1e-16)
    w_m = np.linalg.eigvalsh(info_m)
    assert info_m.shape == (15, 15) and w_m[0] > 1e-8 * w_m[-1]
    gg = scenario_from_mapping({"gate": {"normalisation": "gaussian"}, "expert": {"kind": "linear"}, "noise": {"model": "mixture"},
                                "atoms": [dict(beta0=float(np.log(0.4)), beta1=[0.5, 0.5], eta=[1.0, -1.0, 0.5], variance=0.1),
                                          dict(beta0=float(np.log(0.6)), beta1=[-0.5, -0.3], eta=[-1.0, 1.0, -0.5], variance=0.2)]})
    info_g, blocks_g = fisher_information(gg, m=3000)
    assert info_g.shape == (1 + 4 + 8, 1 + 4 + 8)
    assert [b for b, _ in blocks_g].count("atom 1 beta0") == 0
    # The Gaussian gate's conditional model is not identifiable: its score -|x - mu_i|^2 / (2 v) + beta0_i
    # is x.mu_i / v - |mu_i|^2 / (2 v) + beta0_i plus a term common to all i, so moving every centre by
    # t u (u in R^d) changes the scores by t x.u / v (common to all atoms: the softmax ignores it) and by
    # -t mu_i.u / v, which beta0_i + t mu_i.u / v undoes.  With atom 1's beta0 the reference (fixed at 0),
    # the d directions  d beta1_i = u (every i),  d beta0_0 = (mu_0 - mu_1).u / v  leave the density
    # unchanged: I u = 0 exactly in exact arithmetic, the rest is positive definite.  The eigenvalues of
    # those directions are round-off (-2e-15 and 4e-16 here, -7.8e-16 and 4.2e-17 on another machine), so
    # what is asserted is the null space and positive semi-definiteness relative to the largest eigenvalue.
    v = 1.0  # the gate's default kernel variance
    mu = np.array([[0.5, 0.5], [-0.5, -0.3]])
    idx = dict(blocks_g)
    null = np.zeros((info_g.shape[0], 2))
    for j, u in enumerate(np.eye(2)):
        null[idx["atom 0 beta0"], j] = (mu[0] - mu[1]) @ u / v
        null[idx["atom 0 beta1"], j] = u
        null[idx["atom 1 beta1"], j] = u
    w_g = np.linalg.eigvalsh(info_g)
    scale = w_g[-1]
    assert np.linalg.norm(info_g @ null, axis=0).max() <= 1e-9 * scale * np.linalg.norm(null, axis=0).min()
    assert w_g[0] >= -1e-9 * scale  # positive semi-definite up to round-off
    # exactly d = 2 null directions: on the orthogonal complement of the shifts, positive definite
    # (third eigenvalue / largest = 4.7e-3 here)
    Q = np.linalg.qr(null, mode="complete")[0][:, 2:]
    assert np.linalg.eigvalsh(Q.T @ info_g @ Q)[0] > 1e-4 * scale


@pytest.mark.slow
def test_cli_check_prints_the_table_and_writes_json(tmp_path, capsys):
    p = tmp_path / "ns.toml"
    p.write_text(NEAR_SINGULAR)
    out = tmp_path / "rep.json"
    assert main(["check", str(p), "--n-max", "16000", "--draws", "3000", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert "Cramér-Rao sd" in cap.out and "near-singular" in cap.err
    assert json.loads(out.read_text())["warnings"]
    assert main(["check", str(tmp_path / "missing.toml")]) == 2
    with pytest.raises(SystemExit) as e:  # an argparse error: exit 2, one line
        main(["check", "--fraction", "2"])
    assert e.value.code == 2


@pytest.mark.parametrize("kind", ["chardev", "fifo", "folder", "symlink"])
def test_cli_check_never_replaces_a_json_path_that_is_not_a_regular_file(tmp_path, capsys, kind):
    # issue 35: --json on a copy of /dev/null turned the device node into a JSON file (exit 0)
    import os
    import stat

    path = tmp_path / "report.json"
    target = tmp_path / "outside.txt"
    if kind == "chardev":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        target.write_text("keep\n")
        path.symlink_to(target)
    mode = os.lstat(path).st_mode
    assert main(["check", "--router", "perturbed", "--n-max", "4000", "--draws", "50", "--json", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--json {path} exists and is a " in err, err
    assert os.lstat(path).st_mode == mode and (kind != "symlink" or target.read_text() == "keep\n")


@pytest.mark.slow
def test_the_door_hands_the_preflight_to_the_engine_which_writes_it(tmp_path):
    import json

    from moestat.cli.main import main
    from moestat.rates import RatesConfig, run_rates

    root = Path(__file__).resolve().parents[2]
    grid = ["--n-min", "300", "--n-max", "600", "--n-points", "3", "--reps", "2", "--quiet"]
    scenario = str(root / "examples" / "sigmoid_over.toml")
    assert main(["rates", "--scenario", scenario, *grid, "--out", str(tmp_path / "door")]) == 0
    rep = json.loads((tmp_path / "door" / "preflight.json").read_text())
    summary = json.loads((tmp_path / "door" / "summary.json").read_text())
    assert summary["preflight"]["n_ok"] == rep["n_ok"] and summary["preflight"]["warnings"] == rep["warnings"]
    # the engine computes no pre-flight of its own: without one handed in, it writes none
    cfg = RatesConfig.from_dict({"scenario_file": scenario, "n_min": 300, "n_max": 600, "n_points": 3, "reps": 2,
                                 "quiet": True})
    run_rates(cfg, tmp_path / "api", figure_formats="none")
    assert not (tmp_path / "api" / "preflight.json").exists()
    assert json.loads((tmp_path / "api" / "summary.json").read_text()).get("preflight") is None
