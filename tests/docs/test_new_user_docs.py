"""The guide agrees with the program where a new user checks it: what ``--list`` prints, which
losses get a prediction on a scenario file, the main job's time stated once, and whether the
reference atom's ``beta1 = 0`` is without loss of generality."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"


def test_list_prints_where_each_paper_was_read_as_the_catalogue_page_says():
    from moestat.rates.catalogue import ENTRIES
    from moestat.rates.catalogue_views import format_list

    text = format_list()
    assert "``moestat reproduce --list`` prints it" in (GUIDE / "catalogue.rst").read_text()
    for e in ENTRIES.values():
        assert f"read at: {e.paper.read_at}" in text, e.key


def test_weighted_cell_errors_are_predicted_for_the_perturbed_router_only_as_rates_rst_says():
    from moestat.rates.fit import predicted_exponent

    for loss in ("weighted_single", "weighted_multi"):
        assert predicted_exponent("perturbed", "over", loss, "lse") == -0.5
        assert predicted_exponent("cosine", "over", loss, "lse") is None
        assert predicted_exponent("file:mine", "over", loss, "lse", {}) is None
    text = " ".join((GUIDE / "rates.rst").read_text().split())
    assert "(both predicted -1/2)" not in text
    assert "both predicted -1/2 for the perturbed router, Theorem 5; the vanilla and linear routers and a scenario file get no prediction" in text


def test_the_main_jobs_time_is_stated_once_in_the_readme_and_referred_to_elsewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(re.findall(r"the run\s+itself takes about \d+ s", readme)) == 1
    rates = (GUIDE / "rates.rst").read_text()
    flat = " ".join(rates.split())
    i = flat.index("The default grid is")
    paragraph = flat[i: flat.index("Every fit against the truth", i)]
    assert not re.search(r"\d+ s wall", paragraph) and "stated once, in the README" in paragraph
    # no second figure for today's main job on that page (a historical row says "then")
    assert not re.search(r"\(now \d+ s\)", rates)
    for line in rates.splitlines():
        if "python -m moestat.rates --router perturbed --out runs/default" in line:
            assert "today: README" in line


def test_the_cosine_routers_reference_atom_is_a_constraint_not_a_normalisation():
    """The mathematics the guide states: a common shift of beta1 leaves a linear softmax gate's
    weights unchanged and changes a cosine one's; beta1 = 0 is then kept as a checked constraint."""
    from moestat.data.scenario_files import ScenarioFileError, scenario_from_mapping
    from moestat.model.gates import gate_scores, gate_weights

    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.uniform(-1, 1, size=(50, 2)))
    beta0 = torch.tensor([0.3, -0.2, 0.0], dtype=torch.float64)
    beta1 = torch.tensor([[1.0, -0.5], [-0.7, 1.2], [0.4, 0.9]], dtype=torch.float64)
    c = torch.tensor([0.4, 0.9], dtype=torch.float64)  # moves the last atom to beta1 = 0
    for kind, invariant in (("linear", True), ("cosine", False), ("perturbed", False)):
        w = gate_weights(gate_scores(x, beta1, kind), beta0)
        w_shift = gate_weights(gate_scores(x, beta1 - c, kind), beta0)
        assert torch.allclose(w, w_shift) == invariant, kind
    text = " ".join((GUIDE / "own_model.rst").read_text().split())
    assert "The reference atom is without loss of generality for a linear score only." in text
    assert "``beta1_k = 0`` is a *constraint* of the model" in text
    atoms = [dict(beta0=0.5, beta1=[1.0, -0.5], eta=[1.0, 0.0, 0.2]), dict(beta0=0.0, beta1=[0.3, 0.0], eta=[0.0, 1.0, 0.0])]
    with pytest.raises(ScenarioFileError, match="beta0 = 0 and beta1 = 0"):
        scenario_from_mapping({"gate": {"score": "cosine"}, "atoms": atoms})
