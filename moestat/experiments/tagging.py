"""The sparse-gating study's own tasks (Datta (2024)): BiLSTM + MoE on NER and extractive QA.

One run trains :class:`moestat.nn.sequence.SequenceMoE` with one of the study's six models
(:data:`moestat.nn.sequence.GATES`: baseline, naive, mask, noisy, importance, load) through
:func:`moestat.nn.train.fit` (Adam, lr 1e-3: the study names no optimiser; inferred) and scores it
on the validation split.  Written to ``--out``:

- ``runs.jsonl``: one JSON line per (gate, seed) as soon as it finishes (``--resume`` skips those);
- ``summary.json`` / ``results.csv``: mean and sd over seeds per gate;
- ``expert_usage.png``: tokens per expert per gate (top-k assignments over the validation tokens,
  the study's Figures 3-7), and ``loss_curves.png`` (validation loss per epoch, its Figures 1-2).

Metrics: token accuracy over real tokens and validation loss (what the study reports); entity
precision/recall/F1 (NER) or exact match/F1 (spans) of :mod:`moestat.nn.span_metrics`; the
task-decomposition metrics of :mod:`moestat.nn.metrics` on the router's softmax over the
validation tokens (``H_s``, ``H_u``, and ``I(E;Y)`` between the top expert and the gold tag), and
``H_assign``, the entropy of the top-k assignment histogram (:func:`assignment_entropy`).

Tasks (:func:`load_task`): ``conll`` and ``squad`` from the user's files, or -- without
``--data-path`` -- the synthetic demo tasks of :mod:`moestat.data.text_tasks`, which are *not*
CoNLL or SQuAD and say so in every table.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from moestat.data import text_tasks as tt
from moestat.io import append_line, atomic_write_json, atomic_write_text, read_jsonl
from moestat.nn.metrics import count_matrix, entropy, expert_usage, gate_sparsity, mutual_information
from moestat.nn.sequence import GATES, SequenceMoE, sequence_loss
from moestat.nn.span_metrics import entity_prf, span_em_f1
from moestat.nn.train import Batch, ShuffledBatches, fit
from moestat.seeding import spawn_int_seeds, torch_generator
from moestat.plotting import PALETTE, colours, save_figure

__all__ = ["TASKS", "STUDY_TABLE", "load_task", "TrimmedBatches", "evaluate", "train_one", "run_experiment",
           "summarise", "format_table", "plot_usage", "plot_curves", "assignment_entropy", "parse_gates"]

TASKS = ("conll", "squad")

#: Datta (2024), Tables 2-3 (validation; one run each, no seeds given): accuracy %, loss.
STUDY_TABLE = {
    "baseline": {"conll_acc": 97.08, "conll_loss": 0.1179, "squad_acc": 11.45, "squad_loss": 8.770},
    "naive": {"conll_acc": 97.08, "conll_loss": 0.1142, "squad_acc": 11.62, "squad_loss": 8.710},
    "mask": {"conll_acc": 97.26, "conll_loss": 0.1173, "squad_acc": 11.47, "squad_loss": 8.766},
    "noisy": {"conll_acc": 97.31, "conll_loss": 0.1087, "squad_acc": 11.40, "squad_loss": 8.717},
    "importance": {"conll_acc": 97.40, "conll_loss": 0.1095, "squad_acc": 11.46, "squad_loss": 8.794},
    "load": {"conll_acc": 97.30, "conll_loss": 0.1133, "squad_acc": 11.76, "squad_loss": 8.710},
}


def load_task(task: str, data_path: str | None = None, glove: str | None = None, *, max_len: int | None = None,
              demo_train: int = 2000, demo_val: int = 500, max_train: int | None = None) -> tt.TextTask:
    """Read and encode ``task`` (``conll``/``squad``) from ``data_path``, or build its demo task.

    ``data_path`` is a folder: CoNLL ``train.txt``/``valid.txt`` (or ``eng.train``/``eng.testa``),
    SQuAD ``train-v1.1.json``/``dev-v1.1.json``.  With ``glove`` the vocabulary is pruned to GloVe's
    words (train and validation tokens, Datta (2024) B4) and the embeddings start from GloVe;
    without it the vocabulary is the training tokens and the embeddings are drawn.
    ``max_len`` defaults to 128 (CoNLL), 256 (SQuAD) and 40 for the demo spans.
    """
    if task not in TASKS:
        raise ValueError(f"--task must be one of {TASKS}, got {task!r}")
    demo = data_path is None
    if task == "conll":
        L = max_len or 128
        if demo:
            train, val = tt.synthetic_tagging(demo_train, 1), tt.synthetic_tagging(demo_val, 2)
        else:
            train = tt.read_conll(tt.find_split(data_path, ("train.txt", "eng.train"), "CoNLL-2003 training", tt.CONLL_SOURCE))
            val = tt.read_conll(tt.find_split(data_path, ("valid.txt", "eng.testa"), "CoNLL-2003 validation", tt.CONLL_SOURCE))
        train = train[:max_train] if max_train else train
        words = [s.tokens for s in train]
    else:
        L = max_len or (40 if demo else 256)
        if demo:
            train, val = tt.synthetic_spans(demo_train, 1), tt.synthetic_spans(demo_val, 2)
            train = [e for e in train if len(e.context) <= L]
            val = [e for e in val if len(e.context) <= L]
        else:
            train = tt.read_squad(tt.find_split(data_path, ("train-v1.1.json",), "SQuAD 1.1 training", tt.SQUAD_SOURCE), L)[0]
            val = tt.read_squad(tt.find_split(data_path, ("dev-v1.1.json",), "SQuAD 1.1 dev", tt.SQUAD_SOURCE), L)[0]
        train = train[:max_train] if max_train else train
        words = [e.context + e.question for e in train]
    emb = None
    if glove is not None:
        val_words = [s.tokens for s in val] if task == "conll" else [e.context + e.question for e in val]
        vecs, unk = tt.read_glove(glove, (w for ws in words + val_words for w in ws))
        vocab = tt.build_vocab(words + val_words, keep=set(vecs))
        emb = torch.tensor(np.stack([np.zeros_like(unk), unk] + [vecs[w] for w in vocab[2:]]))
    else:
        vocab = tt.build_vocab(words)
    enc = tt.encode_tagging if task == "conll" else tt.encode_squad
    xt, yt = enc(train, vocab, L)
    xv, yv = enc(val, vocab, L)
    what = ("SYNTHETIC DEMO tagging task (not CoNLL-2003)" if task == "conll" else "SYNTHETIC DEMO span task (not SQuAD)") \
        if demo else ("CoNLL-2003 from " + str(data_path) if task == "conll" else "SQuAD 1.1 from " + str(data_path))
    desc = (f"{what}: {len(xt)} train / {len(xv)} validation, vocabulary {len(vocab)}"
            f"{' (GloVe-pruned)' if glove else ''}, max length {L}")
    return tt.TextTask(("demo-" if demo else "") + task, xt, yt, xv, yv, vocab, emb,
                       len(tt.CONLL_TAGS) if task == "conll" else L, desc, kind="tagging" if task == "conll" else "spans")


class TrimmedBatches(ShuffledBatches):
    """:class:`~moestat.nn.train.ShuffledBatches` whose tagging batches are cut to their longest
    sentence: with packed LSTMs the numbers are unchanged and a CoNLL batch is ~4x shorter than 128."""

    def __iter__(self):
        for b in super().__iter__():
            n = max(int((b.x != tt.PAD).sum(1).max()), 1)
            yield Batch(b.x[:, :n], b.y[:, :n], b.idx)


def _batches(x, y, size):
    for s in range(0, len(x), size):
        xb, yb = x[s:s + size], y[s:s + size]
        if yb.ndim == 2 and yb.shape[1] == xb.shape[1]:  # tagging: trim as in training
            n = max(int((xb != tt.PAD).sum(1).max()), 1)
            xb, yb = xb[:, :n], yb[:, :n]
        yield xb, yb


@torch.no_grad()
def evaluate(model: SequenceMoE, task: tt.TextTask, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256) -> dict:
    """Validation metrics of ``model`` on ``(x, y)`` (module docstring); model left in eval mode."""
    model.eval()
    dev = next(model.parameters()).device
    loss_sum, n_items, correct, tokens = 0.0, 0, 0, 0
    probs, selected, mask_counts, labels = [], [], 0, []
    gold_tags, pred_tags, gold_spans, pred_spans, ctx = [], [], [], [], []
    for xb, yb in _batches(x, y, batch_size):
        xb, yb = xb.to(dev), yb.to(dev)
        out = model(xb)
        probs.append(out.probs.cpu())
        selected.append(out.weights.argmax(1).cpu())
        mask_counts = mask_counts + out.mask.sum(0).cpu()
        if task.kind == "tagging":
            real = yb != tt.IGNORE_INDEX
            lg = out.logits
            loss_sum += float(torch.nn.functional.cross_entropy(lg[real], yb[real], reduction="sum"))
            n_items += int(real.sum())
            pred = lg.argmax(-1)
            correct += int((pred[real] == yb[real]).sum())
            tokens += int(real.sum())
            labels.append(yb[out.token_mask].cpu().clamp(min=0))
            for i in range(len(xb)):
                r = real[i]
                gold_tags.append([task.label_names[t] for t in yb[i][r].tolist()])
                pred_tags.append([task.label_names[t] for t in pred[i][r].tolist()])
        else:
            lg = out.logits
            ce = torch.nn.functional.cross_entropy
            loss_sum += float(ce(lg[:, 0], yb[:, 0], reduction="sum") + ce(lg[:, 1], yb[:, 1], reduction="sum"))
            n_items += len(xb)
            # best span with start <= end < start + 30 (the usual SQuAD decoding)
            L = lg.shape[-1]
            score = lg[:, 0].unsqueeze(2) + lg[:, 1].unsqueeze(1)
            ok = torch.triu(torch.ones(L, L, dtype=torch.bool, device=dev)) & ~torch.triu(
                torch.ones(L, L, dtype=torch.bool, device=dev), 30)
            best = score.masked_fill(~ok, -math.inf).reshape(len(xb), -1).argmax(1)
            ps, pe = best // L, best % L
            correct += int(((ps == yb[:, 0]) & (pe == yb[:, 1])).sum())
            tokens += len(xb)
            gold_spans += [tuple(v) for v in yb.tolist()]
            pred_spans += list(zip(ps.tolist(), pe.tolist()))
            ctx += xb[:, :L].tolist()
    p = torch.cat(probs).double()
    row = {"val_loss": loss_sum / max(n_items, 1), "val_accuracy": 100.0 * correct / max(tokens, 1),
           "H_s": gate_sparsity(p), "H_u": expert_usage(p), "usage": [int(v) for v in np.atleast_1d(np.asarray(mask_counts))]}
    sel = torch.cat(selected).numpy()
    if task.kind == "tagging":
        row.update({f"entity_{k}": v for k, v in entity_prf(gold_tags, pred_tags).items()})
        C = count_matrix(sel, torch.cat(labels).numpy(), p.shape[1], len(task.label_names))
        row["I_EY"] = mutual_information(C)
    else:
        row.update(span_em_f1(gold_spans, pred_spans, ctx))
        row["I_EY"] = float("nan")
    return row


def train_one(task: tt.TextTask, gate: str, seed: int, *, epochs: int, batch_size: int = 32, lr: float = 1e-3,
              device: str = "cpu", n_experts: int = 8, k: int = 2, progress: bool | None = False,
              max_steps: int | None = None, eval_every_epoch: bool = True) -> dict:
    """Train one model and return its ``runs.jsonl`` row (validation metrics, history, timing).

    ``max_steps`` stops each epoch after that many batches (timing of a fraction of an epoch;
    ``seconds_per_epoch`` is then extrapolated to the full epoch and ``steps_per_epoch`` says so).
    """
    init_seed, batch_seed, dropout_seed = spawn_int_seeds(seed, 3)
    model = SequenceMoE(len(task.vocab), task.n_labels if task.kind == "tagging" else 1, gate,
                        task="tagging" if task.kind == "tagging" else "spans", embeddings=task.embeddings,
                        n_experts=n_experts, k=k, random_state=init_seed).to(device)
    gen = torch_generator(batch_seed)
    cls = TrimmedBatches if task.kind == "tagging" else ShuffledBatches
    batches = cls(task.x_train.to(device), task.y_train.to(device), batch_size, gen)
    full_steps = len(batches)
    if max_steps is not None:
        inner = batches

        class _Cut:
            def __len__(self):
                return min(max_steps, full_steps)

            def __iter__(self):
                for i, b in enumerate(inner):
                    if i >= max_steps:
                        break
                    yield b

        batches = _Cut()

    def step(b: Batch) -> torch.Tensor:
        return sequence_loss(model(b.x), b.y)

    def info(e: int) -> dict:
        if not eval_every_epoch and e < epochs - 1:
            return {}
        m = evaluate(model, task, task.x_val, task.y_val)
        return {"val_loss": m["val_loss"], "val_accuracy_epoch": m["val_accuracy"]}

    t0 = time.perf_counter()
    # dropout draws from torch's global generator: seed a forked copy so a run depends on its seed only
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(dropout_seed)
        if str(device).startswith("cuda"):
            torch.cuda.manual_seed_all(dropout_seed)
        res = fit(model, step, batches, epochs=epochs, optimizer="adam", lr=lr, epoch_info=info, progress=progress,
                  desc=f"{gate} seed {seed}")
    wall = time.perf_counter() - t0
    done = min(max_steps or full_steps, full_steps)
    row = {"task": task.name, "gate": gate, "seed": seed, "epochs": epochs,
           "n_params": sum(p.numel() for p in model.parameters()),
           "seconds_per_epoch": res.seconds_per_epoch * full_steps / done,
           "cpu_seconds_per_epoch": res.cpu_seconds_per_epoch * full_steps / done,
           "steps_timed": done, "steps_per_epoch": full_steps, "wall_seconds": wall, "threads": torch.get_num_threads(),
           "device": str(device), "history": res.history}
    row.update(evaluate(model, task, task.x_val, task.y_val))
    return row


def _read_done(path: Path) -> dict:
    return {(r["gate"], r["seed"]): r for r in read_jsonl(path)}


def run_experiment(task: tt.TextTask, gates: Sequence[str], out: str | Path, *, seeds: int = 1, base_seed: int = 0,
                   epochs: int = 10, batch_size: int = 32, lr: float = 1e-3, device: str = "cpu",
                   resume: bool = False, progress: bool | None = None, verbose: bool = True,
                   n_experts: int = 8, k: int = 2, max_steps: int | None = None) -> dict:
    """Every (gate, seed) run, then the summary, table and figures in ``out`` (module docstring).

    Run ``s`` of every gate uses seed ``base_seed + s``: the same seed gives the same batches and
    the same embedding/LSTM initialisation for every gate.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs_path = out / "runs.jsonl"
    done = _read_done(runs_path) if resume else {}
    if not resume and runs_path.exists():
        runs_path.unlink()
    rows = []
    for gate in gates:
        for s in range(seeds):
            key = (gate, base_seed + s)
            if key in done:
                rows.append(done[key])
                continue
            row = train_one(task, gate, base_seed + s, epochs=epochs, batch_size=batch_size, lr=lr, device=device,
                            n_experts=n_experts, k=k, progress=progress, max_steps=max_steps)
            append_line(runs_path, json.dumps(row))
            rows.append(row)
            if verbose:
                sys.stderr.write(f"{gate} seed {key[1]}: val acc {row['val_accuracy']:.2f}%, "
                                 f"{row['seconds_per_epoch']:.1f} s/epoch\n")
    summary = summarise(rows, task.description)
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "results.csv", _csv(summary))
    what = task.description.split(":")[0]  # "SYNTHETIC DEMO tagging task (not CoNLL-2003)", "CoNLL-2003 from ..."
    plot_usage(rows, out / "expert_usage", what=what)
    plot_curves(rows, out / "loss_curves", what=what)
    return summary


_METRICS = ("val_accuracy", "val_loss", "entity_precision", "entity_recall", "entity_f1", "exact_match", "f1",
            "H_s", "H_u", "H_assign", "I_EY", "seconds_per_epoch")


def assignment_entropy(usage: Sequence[int]) -> float:
    """Entropy in bits of the top-k assignment shares (the histogram of Figures 3-7): 1 bit for two
    equally used experts, 3 bits for 8.  ``H_u`` is taken on the full softmax, which can be near
    uniform while the top-k choice is concentrated."""
    u = np.asarray(usage, dtype=float)
    return float(entropy(u / u.sum())) if u.sum() > 0 else float("nan")


def summarise(rows: Sequence[dict], description: str = "") -> dict:
    """Mean, sd (ddof 1; 0 for one seed) and number of seeds of every metric per gate."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        r.setdefault("H_assign", assignment_entropy(r["usage"]))
        by.setdefault(r["gate"], []).append(r)
    table = {}
    for gate, rs in by.items():
        e = {"n_seeds": len(rs)}
        for m in _METRICS:
            v = np.array([r[m] for r in rs if r.get(m) is not None and not (isinstance(r[m], float) and math.isnan(r[m]))])
            if v.size:
                e[m] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}
        table[gate] = e
    return {"description": description, "gates": table, "study": STUDY_TABLE}


def format_table(summary: dict) -> str:
    """The summary as a plain-text table (mean +- sd over seeds), headed by the task description."""
    gates = summary["gates"]
    cols = [m for m in _METRICS if any(m in e for e in gates.values())]
    lines = [summary["description"], "gate        seeds  " + "  ".join(f"{c:>17}" for c in cols)]
    for g, e in gates.items():
        # one seed has no spread: "(1 seed)", never "± 0"
        cells = [("-" if c not in e else f"{e[c]['mean']:.4g} (1 seed)" if e["n_seeds"] == 1
                  else f"{e[c]['mean']:.4g} ± {e[c]['sd']:.2g}") for c in cols]
        lines.append(f"{g:<11} {e['n_seeds']:>5}  " + "  ".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


def _csv(summary: dict) -> str:
    lines = ["gate,metric,mean,sd,n_seeds"]
    for g, e in summary["gates"].items():
        lines += [f"{g},{m},{e[m]['mean']!r},{e[m]['sd']!r},{e['n_seeds']}" for m in _METRICS if m in e]
    return "\n".join(lines) + "\n"


def _title(what: str, text: str) -> str:
    """``what`` (the task, ``SYNTHETIC DEMO ...`` for the demo tasks) first, so no reader takes
    the demo for CoNLL-2003 or SQuAD."""
    return f"{what}: {text}" if what else text


def plot_usage(rows: Sequence[dict], stem: str | Path, what: str = "") -> None:
    """Tokens per expert (top-k assignments over the validation tokens) per gate, first seed of each
    gate, as in Datta (2024) Figures 3-7; written to ``<stem>.png``, titled with the task ``what``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first: dict[str, dict] = {}
    for r in rows:
        if r["gate"] != "baseline" and r["gate"] not in first:
            first[r["gate"]] = r
    if not first:
        return
    fig, axes = plt.subplots(1, len(first), figsize=(2.6 * len(first) + 0.4, 2.7), squeeze=False, sharey=True)
    for ax, (g, r) in zip(axes[0], first.items()):
        u = np.asarray(r["usage"], dtype=float)
        ax.bar(np.arange(len(u)) + 1, u / u.sum(), color=PALETTE[0])
        ax.set_title(f"{g} gate ({assignment_entropy(u):.2f} bits, seed {r['seed']})", fontsize=8)
        ax.set_xlabel("expert", fontsize=8)
        ax.set_xticks(np.arange(len(u)) + 1)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("share of assignments", fontsize=8)
    fig.suptitle(_title(what, "top-k assignments per expert"), fontsize=8)
    fig.tight_layout()
    save_figure(fig, stem, ("png",), dpi=150)
    plt.close(fig)


def plot_curves(rows: Sequence[dict], stem: str | Path, what: str = "") -> None:
    """Validation loss per epoch for every gate (first seed; one colour per gate), Datta (2024)
    Figures 1-2; ``<stem>.png``, titled with the task ``what``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 3.3))
    curves = {}
    for r in rows:
        h = [(x["epoch"], x["val_loss"]) for x in r.get("history", []) if "val_loss" in x]
        if r["gate"] not in curves and h:
            curves[r["gate"]] = (r["seed"], h)
    for c, (g, (seed, h)) in zip(colours(len(curves)), curves.items()):
        ax.plot(*zip(*h), marker="o", ms=3, color=c, label=f"{g} (seed {seed})")
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("validation loss")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(_title(what, "validation loss"), fontsize=8)
    fig.tight_layout()
    save_figure(fig, stem, ("png",), dpi=150)
    plt.close(fig)


def parse_gates(text: str) -> list[str]:
    """``all`` or a comma list of :data:`moestat.nn.sequence.GATES` names."""
    if text.strip() == "all":
        return list(GATES)
    gates = [t.strip().replace("-", "_") for t in text.split(",") if t.strip()]
    bad = [g for g in gates if g not in GATES]
    if bad or not gates:
        raise ValueError(f"unknown gate {bad[0] if bad else text!r}; expected 'all' or some of {', '.join(GATES)}")
    return list(dict.fromkeys(gates))
