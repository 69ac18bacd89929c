"""One vocabulary of gate and router names: canonical_name, NAME_ALIASES and the one router tuple."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moestat.data import synthetic
from moestat.model.gates import GATE_KINDS, NAME_ALIASES, Gate, canonical_name

VOCABULARIES = [
    GATE_KINDS,
    ("dense", "naive_topk", "topk_mask", "noisy_topk", "cosine", "perturbed_cosine"),
    ("output_mixture", "input-mixture", "plain"),
]


def test_router_names_are_the_gate_kinds():
    # one tuple, one meaning: a router of the statistical model is a gate kind
    assert synthetic.ROUTERS is GATE_KINDS
    assert GATE_KINDS == ("perturbed", "cosine", "linear")
    for kind in GATE_KINDS:
        assert Gate(kind).kind == kind


@pytest.mark.parametrize("text, expected", [
    ("perturbed", "perturbed"),
    ("perturbed_cosine", "perturbed"),
    ("perturbed-cosine", "perturbed"),
    ("vanilla", "cosine"),
    ("vanilla-cosine", "cosine"),
    ("softmax", "linear"),
    ("  linear ", "linear"),
])
def test_aliases_of_the_gate_kinds(text, expected):
    assert canonical_name(text, GATE_KINDS) == expected


def test_canonical_name_wins_over_an_alias():
    # the neural routers call the perturbed router perturbed_cosine: no alias may rewrite it
    assert canonical_name("perturbed-cosine", VOCABULARIES[1]) == "perturbed_cosine"
    assert canonical_name("cosine", VOCABULARIES[1]) == "cosine"


def test_aliases_work_in_both_directions():
    # one name for one router on both sides: the statistical spelling reaches the neural one
    assert canonical_name("perturbed", VOCABULARIES[1]) == "perturbed_cosine"
    assert canonical_name("vanilla", VOCABULARIES[1]) == "cosine"
    assert canonical_name("vanilla-cosine", VOCABULARIES[1]) == "cosine"


def test_two_known_names_of_one_meaning_are_ambiguous():
    with pytest.raises(ValueError, match="ambiguous name 'vanilla': it could be cosine or vanilla_cosine"):
        canonical_name("vanilla", ("cosine", "vanilla_cosine", "linear"))


def test_alias_only_applies_when_its_target_is_known():
    with pytest.raises(ValueError, match="unknown name 'softmax'"):
        canonical_name("softmax", VOCABULARIES[1])


def test_extra_aliases_take_precedence_and_fold_hyphens():
    assert canonical_name("vanilla", GATE_KINDS, {"vanilla": "linear"}) == "linear"
    assert canonical_name("out_mix", VOCABULARIES[2], {"out-mix": "output-mixture"}) == "output_mixture"
    assert canonical_name("output-mixture", VOCABULARIES[2]) == "output_mixture"
    assert canonical_name("input_mixture", VOCABULARIES[2]) == "input-mixture"  # spelled as in known


def test_unknown_name_message_lists_the_known_names():
    with pytest.raises(ValueError) as ei:
        canonical_name("topk", GATE_KINDS)
    msg = str(ei.value)
    assert msg == "unknown name 'topk'; expected one of perturbed, cosine, linear"


@given(vocab=st.sampled_from(VOCABULARIES), data=st.data())
def test_any_hyphen_underscore_spelling_maps_back(vocab, data):
    name = data.draw(st.sampled_from(vocab))
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    spelled = "".join(("-" if f else "_") if c in "-_" else c for c, f in zip(name, flips))
    assert canonical_name(spelled, vocab) == name


@given(alias=st.sampled_from(sorted(NAME_ALIASES)), data=st.data())
def test_every_alias_reaches_a_gate_kind_in_any_spelling(alias, data):
    flips = data.draw(st.lists(st.booleans(), min_size=len(alias), max_size=len(alias)))
    spelled = "".join(("-" if f else "_") if c in "-_" else c for c, f in zip(alias, flips))
    assert canonical_name(spelled, GATE_KINDS) == NAME_ALIASES[alias]
