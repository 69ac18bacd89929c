"""studies/figure1/figure1_paired.py: the pooling, the paired contrast's sign, the median band, the start
scheme and the panel verdict on synthetic rows (no record read)."""

import numpy as np
import pandas as pd
import pytest

from script_loader import load_script

mod = load_script("studies/figure1/figure1_paired.py")

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
