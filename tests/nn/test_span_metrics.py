"""Entity-level P/R/F1 (CoNLL convention) and span EM/F1 against hand-computed cases."""

from __future__ import annotations

import pytest

from moestat.nn.span_metrics import bio_entities, entity_prf, span_em_f1


def test_entities_by_the_conlleval_convention():
    # I- after O starts an entity; I- of another type starts a new one; B- splits adjacent ones
    tags = ["I-PER", "I-PER", "I-LOC", "O", "B-ORG", "B-ORG", "I-ORG", "B-MISC"]
    assert bio_entities(tags) == {("PER", 0, 1), ("LOC", 2, 2), ("ORG", 4, 4), ("ORG", 5, 6), ("MISC", 7, 7)}
    assert bio_entities(["O", "O"]) == set()


def test_entity_prf_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "B-MISC"]]
    # gold: PER(0,1) LOC(3,3) ORG(0,0) = 3; pred: PER(0,0) LOC ORG MISC = 4; correct: LOC, ORG = 2
    r = entity_prf(gold, pred)
    assert (r["n_gold"], r["n_pred"], r["n_correct"]) == (3, 4, 2)
    assert r["precision"] == pytest.approx(50.0) and r["recall"] == pytest.approx(200 / 3)
    assert r["f1"] == pytest.approx(2 * 50 * (200 / 3) / (50 + 200 / 3))


def test_entity_prf_all_o_predictions_score_zero_though_token_accuracy_is_high():
    gold = [["O"] * 9 + ["B-PER"]]
    pred = [["O"] * 10]
    assert entity_prf(gold, pred)["f1"] == 0.0  # token accuracy would be 90%


def test_span_em_f1_hand_computed():
    r = span_em_f1([(2, 4), (0, 0), (1, 1)], [(2, 4), (1, 1), (0, 2)])
    # EM: 1 of 3; F1: 1, 0, and (p=1/3, r=1 -> 0.5)
    assert r["exact_match"] == pytest.approx(100 / 3) and r["f1"] == pytest.approx(50.0)
    # counted on tokens: a prediction of other positions with the same words scores
    assert span_em_f1([(0, 0)], [(2, 2)], tokens=[[7, 8, 7]])["f1"] == pytest.approx(100.0)
    with pytest.raises(ValueError):
        entity_prf([["O"]], [])
