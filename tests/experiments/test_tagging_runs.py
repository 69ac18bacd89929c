"""The tagging experiment on tiny demo tasks and generated CoNLL files: rows, resume, summary."""

from __future__ import annotations

import pytest
import json

import torch

from moestat.data import text_tasks as tt
from moestat.experiments.tagging import (
    STUDY_TABLE,
    format_table,
    load_task,
    parse_gates,
    run_experiment,
    train_one,
)


def test_load_task_from_generated_conll_files_with_glove(tmp_path):
    tt.write_conll(tt.synthetic_tagging(30, 1), tmp_path / "train.txt")
    tt.write_conll(tt.synthetic_tagging(10, 2), tmp_path / "valid.txt")
    (tmp_path / "g.txt").write_text("mr 1 0 0\nin 0 1 0\nper3 0 0 1\n", encoding="utf-8")
    task = load_task("conll", str(tmp_path), str(tmp_path / "g.txt"), max_len=32)
    assert task.name == "conll" and task.x_train.shape == (30, 32) and task.kind == "tagging"
    assert set(task.vocab[2:]) <= {"mr", "in", "per3"}  # pruned to GloVe's words
    assert torch.equal(task.embeddings[0], torch.zeros(3))
    torch.testing.assert_close(task.embeddings[1], torch.full((3,), 1 / 3))  # UNK = GloVe mean
    assert "SYNTHETIC" not in task.description


@pytest.mark.slow
def test_demo_run_every_gate_resume_and_table(tmp_path):
    task = load_task("conll", demo_train=40, demo_val=16)
    assert "SYNTHETIC DEMO" in task.description
    out = tmp_path / "run"
    s = run_experiment(task, parse_gates("all"), out, epochs=1, progress=False, verbose=False)
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["gate"] for r in rows] == list(STUDY_TABLE)
    for r in rows:
        assert 0 <= r["val_accuracy"] <= 100 and 0 <= r["entity_f1"] <= 100 and r["seconds_per_epoch"] > 0
        assert sum(r["usage"]) == (1 if r["gate"] == "baseline" else 2) * int((task.x_val != 0).sum())
    assert (out / "expert_usage.png").stat().st_size > 0 and (out / "loss_curves.png").stat().st_size > 0
    assert "SYNTHETIC DEMO" in format_table(s) and "entity_f1" in format_table(s)
    before = (out / "runs.jsonl").read_text()
    run_experiment(task, ["mask", "load"], out, epochs=1, resume=True, progress=False, verbose=False)
    assert (out / "runs.jsonl").read_text() == before  # nothing retrained


def test_same_seed_same_result_and_span_demo():
    task = load_task("squad", demo_train=24, demo_val=8, max_len=20)
    assert task.kind == "spans" and task.x_train.shape[1] == 40
    a = train_one(task, "noisy", 3, epochs=1, batch_size=8)
    b = train_one(task, "noisy", 3, epochs=1, batch_size=8)
    assert a["val_loss"] == b["val_loss"] and 0 <= a["exact_match"] <= 100 and "f1" in a


def test_assignment_entropy_hand_computed():
    from moestat.experiments.tagging import assignment_entropy

    assert assignment_entropy([5, 5, 0, 0]) == 1.0 and assignment_entropy([1] * 8) == 3.0
