"""The catalogue files hold exactly the replacement truths committed in records/catalogue/hypotheses/proposals.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
import numpy as np
import pytest
from moestat.data.scenario_files import scenario_from_mapping
from moestat.rates.catalogue import catalogue_file
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _proposals():
    return load_script(ROOT / "records/catalogue/hypotheses/proposals.py")


@pytest.mark.parametrize("file, proposal", [("lse_sigmoid_over.toml", "lse_ffn_scaled_sigmoid"),
                                            ("gate_sigmoid_over.toml", "sigmoid_gate_scaled_gelu"),
                                            ("gate_softmax_over.toml", "softmax_gate_scaled_gelu")])
def test_catalogue_files_hold_exactly_the_committed_replacement_truths(file, proposal):
    """Issue 33: the truths of proposals.py, committed before any run, are the ones the catalogue runs."""
    sc = scenario_from_mapping(tomllib.loads(catalogue_file(file).read_text()), where=file)
    prop = getattr(_proposals(), proposal)()
    for a in ("beta0", "beta1", "eta"):
        np.testing.assert_array_equal(getattr(sc.truth, a), getattr(prop.truth, a))
    assert (sc.k_fit, sc.noise_var, sc.input_law) == (prop.k_fit, prop.noise_var, prop.input_law)
    assert sc.model.gate.normalisation == prop.model.gate.normalisation and sc.model.gate.reference == prop.model.gate.reference
    X = sc.holdout(500)
    np.testing.assert_allclose(sc.regression_function(X), prop.regression_function(X), rtol=1e-13, atol=1e-15)
