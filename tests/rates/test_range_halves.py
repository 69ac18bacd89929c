"""The range-halves diagnostic (``studies/tools/range_halves.py``): slopes of a run's lower and upper sizes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from script_loader import load_script


def _run(tmp_path, exponent_low: float, exponent_high: float, n_break: int):
    # a loss C n^a with a kink at n_break and multiplicative noise whose median is 1 at every n:
    # the per-n median is exactly the power law, so each half's median slope is its exponent
    ns = np.unique(np.round(np.logspace(2, 5, 9)).astype(int))
    rng = np.random.default_rng(0)
    rows = []
    for n in ns:
        law = (n / n_break) ** (exponent_low if n <= n_break else exponent_high)
        noise = np.exp(rng.normal(size=21))
        noise /= np.median(noise)
        rows += [{"router": "r", "n": n, "replicate": j, "loss": law * noise[j]} for j in range(21)]
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    return ns


def test_halves_recover_each_side_of_a_kink_and_share_the_middle_size(tmp_path):
    mod = load_script("studies/tools/range_halves.py")
    ns = _run(tmp_path, -1.0, -0.5, n_break=3162)
    rep = mod.range_halves(tmp_path, ("loss",), statistic="median")
    assert rep["halves"]["lower"][-1] == rep["halves"]["upper"][0] == 3162 == ns[4]
    assert np.isclose(rep["loss"]["lower"]["slope"], -1.0, atol=1e-4)
    assert np.isclose(rep["loss"]["upper"]["slope"], -0.5, atol=1e-4)
    for half in ("lower", "upper"):
        lo, hi = rep["loss"][half]["ci"]
        assert lo <= rep["loss"][half]["slope"] <= hi


def test_n_min_drops_the_small_sizes(tmp_path):
    mod = load_script("studies/tools/range_halves.py")
    ns = _run(tmp_path, -1.0, -1.0, n_break=1)
    rep = mod.range_halves(tmp_path, ("loss",), statistic="median", n_min=int(ns[2]))
    assert rep["halves"]["lower"][0] == ns[2] and rep["halves"]["upper"][-1] == ns[-1]
    assert np.isclose(rep["loss"]["lower"]["slope"], -1.0, atol=1e-4)


def test_whole_is_the_slope_over_every_size_used_and_leaves_the_halves_unchanged(tmp_path):
    # above the kink the law is one line, so the whole slope over n >= n_break is its exponent; the halves keep the
    # numbers of a report without it (their own bootstrap stream)
    mod = load_script("studies/tools/range_halves.py")
    ns = _run(tmp_path, -1.0, -0.5, n_break=1000)
    plain = mod.range_halves(tmp_path, ("loss",), statistic="median", n_min=1000)
    rep = mod.range_halves(tmp_path, ("loss",), statistic="median", n_min=1000, whole=True)
    assert rep["whole"] == [int(n) for n in ns if n >= 1000]
    assert np.isclose(rep["loss"]["whole"]["slope"], -0.5, atol=1e-4)
    lo, hi = rep["loss"]["whole"]["ci"]
    assert lo <= -0.5 <= hi
    assert {h: rep["loss"][h] for h in ("lower", "upper")} == plain["loss"]
    # over the kink the whole slope lies between the two exponents
    both = mod.range_halves(tmp_path, ("loss",), statistic="median", whole=True)
    assert -1.0 < both["loss"]["whole"]["slope"] < -0.5
