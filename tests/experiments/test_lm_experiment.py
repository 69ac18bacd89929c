"""The language-model experiment: a tiny end-to-end run whose loss falls; BPC evaluation; summary."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from moestat.data.text_corpus import TextCorpus, encode, split_fractions
from moestat.experiments.lm import evaluate_bpc, format_table, sample_windows, summarise, train_lm
from moestat.nn.transformer import LMConfig, MoETransformerLM


def _corpus(n=6000):
    # a learnable generated text: a repeated phrase with random word choices
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog"]
    text = " ".join(rng.choice(words, size=n // 3))[:n]
    ids, vocab = encode(text)
    tr, va, te = split_fractions(ids)
    return TextCorpus("generated", tr, va, te, vocab, "test")


def test_sample_windows_targets_are_the_next_symbols():
    data = torch.arange(100)
    x, y = sample_windows(data, 5, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 10)
    assert torch.equal(y, x + 1)
    with pytest.raises(ValueError, match="shorter"):
        sample_windows(torch.arange(5), 2, 10, torch.Generator())


def test_untrained_bpc_is_near_log2_vocab_and_routing_stats_are_bits():
    cfg = LMConfig(vocab_size=16, context=8, d_model=16, n_heads=2, n_experts=4, k=2, expert_hidden=8)
    m = MoETransformerLM(cfg, random_state=0)
    data = torch.randint(0, 16, (401,), generator=torch.Generator().manual_seed(0))
    ev = evaluate_bpc(m, data, batch_size=7)
    assert ev["n_symbols"] == 400
    assert ev["bpc"] == pytest.approx(4.0, abs=0.1)  # near-uniform predictions at N(0, 0.02^2) init
    assert len(ev["usage"]) == 2 and np.allclose(np.sum(ev["usage"], axis=1), 1.0)
    assert all(0 <= h <= 2 + 1e-9 for h in ev["H_s"] + ev["H_u"])
    ev2 = evaluate_bpc(m, data, batch_size=50, max_symbols=80)
    assert ev2["n_symbols"] == 80


@pytest.mark.slow
@pytest.mark.parametrize("router", ["linear", "perturbed"])
def test_tiny_training_run_loss_falls(router):
    torch.set_num_threads(1)
    c = _corpus()
    cfg = LMConfig(vocab_size=c.vocab_size, context=16, d_model=32, n_layers=1, n_heads=2, n_experts=4, k=2,
                   expert_hidden=32, router=router)
    model, row = train_lm(c, cfg, steps=120, batch_size=16, lr=3e-3, eval_every=40, eval_symbols=256, seed=0,
                          progress=False)
    curve = row["curve"]
    assert [p["step"] for p in curve] == [40, 80, 120]
    first_untrained = math.log2(c.vocab_size)
    assert curve[-1]["val_bpc"] < curve[0]["val_bpc"] < first_untrained
    assert row["val_bpc"] < 2.6 and row["test_bpc"] < 2.6  # the text has about 2 bits of word choice per word
    assert row["tokens_per_second"] > 0 and row["best_step"] in (40, 80, 120)
    assert len(row["test_H_s"]) == 1 and len(curve[0]["usage"][0]) == 4


def test_same_seed_same_run_and_other_seed_other_run():
    c = _corpus(3000)
    cfg = LMConfig(vocab_size=c.vocab_size, context=8, d_model=16, n_layers=1, n_heads=2, n_experts=3, k=2,
                   expert_hidden=8, router="cosine")
    kw = dict(steps=10, batch_size=8, lr=3e-3, eval_every=10, eval_symbols=64, progress=False)
    a = train_lm(c, cfg, seed=1, **kw)[1]
    b = train_lm(c, cfg, seed=1, **kw)[1]
    d = train_lm(c, cfg, seed=2, **kw)[1]
    assert a["val_bpc"] == b["val_bpc"] and a["test_H_s"] == b["test_H_s"]
    assert d["val_bpc"] != a["val_bpc"]


def test_summary_mean_and_sample_sd_and_table():
    rows = [{"router": "cosine", "val_bpc": v, "test_bpc": v + 0.1, "wall_seconds": 2.0, "tokens_per_second": 10.0,
             "n_params": 5, "test_H_s": [1.0], "test_H_u": [2.0]} for v in (1.0, 1.2)]
    s = summarise(rows)["routers"]["cosine"]
    assert s["val_bpc"][0] == pytest.approx(1.1) and s["val_bpc"][1] == pytest.approx(0.1414214, rel=1e-5)
    assert s["wall_seconds"] == 4.0
    assert "1.2000 ± 0.1414" in format_table({"routers": {"cosine": s}})
