"""Routers inside a language model: linear, cosine and perturbed cosine in a character-level MoE Transformer.

The real-data half of Nguyen et al. (2024) (Table 1: X-MoE routing on a Switch-Transformer
backbone, Enwik8 / Text8 in bits per character) at the sizes this package can train:
:class:`moestat.nn.transformer.MoETransformerLM` on a corpus of :mod:`moestat.data.text_corpus`,
one run per (router, seed), trained by :func:`moestat.nn.train.fit` (Adam, cosine learning rate)
on random windows of the training text.

Per run: BPC (cross-entropy in bits per character) on the whole validation and test parts,
evaluated on non-overlapping windows of ``context`` characters (each window starts from an empty
context, so the numbers are slightly worse than sliding-window BPC); every ``eval_every`` steps
the training BPC, the BPC on the first ``eval_symbols`` validation characters and, per layer, the
expert usage (share of token-slots per expert), the mean per-token router entropy ``H_s`` and the
entropy of the mean routing distribution ``H_u`` (:mod:`moestat.nn.metrics`, bits) -- the
representation-collapse question that motivates cosine routers.  The weights of the best of those
validation checks are kept.

Outputs in ``out``:

* ``runs.jsonl`` -- one JSON line per (router, seed) as soon as it finishes; ``resume`` skips
  those (a run interrupted half-way is restarted: :func:`~moestat.nn.train.fit` owns the optimizer,
  so its state is not checkpointed);
* ``checkpoints/<router>_seed<s>.pt`` -- the kept weights and the configuration of every run;
* ``summary.json``, ``table.md`` -- BPC mean +- sd per router, wall time and tokens/s;
* ``curves.png`` (validation BPC over training), ``routing.png`` (per-layer ``H_s`` and ``H_u``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from moestat.data.text_corpus import TextCorpus
from moestat.io import append_line, atomic_write_json, atomic_write_text, atomic_write_with, ensure_writable_dir, read_jsonl
from moestat.nn.lm_routers import LM_ROUTERS
from moestat.nn.metrics import expert_usage, gate_sparsity
from moestat.nn.train import FreshBatches, fit
from moestat.nn.transformer import LMConfig, MoETransformerLM
from moestat.seeding import spawn_int_seeds, torch_generator
from moestat.plotting import PALETTE, curve_handle, legend, mean_sd, save_figure
from moestat.rates.figures import ROUTER_COLOURS

__all__ = ["PRESETS", "PAPER_TABLE1", "PRECISIONS", "lm_autocast", "sample_windows", "evaluate_bpc", "train_lm",
           "run_experiment", "format_table"]

LN2 = math.log(2.0)

#: Model and training sizes.  ``cpu`` trains in about two minutes per run on one core of the
#: development machine; ``small`` is our reading of the paper's "small" configuration (about 15M
#: parameters, 6 SMoE layers, 60k steps; the width and expert count are ours: the paper gives
#: only the parameter count), for a GPU.
PRESETS: dict[str, dict] = {
    "cpu": dict(model=dict(context=64, d_model=64, n_layers=2, n_heads=4, n_experts=4, k=2, expert_hidden=128),
                train=dict(steps=1000, batch_size=32, lr=2e-3, eval_every=100, eval_symbols=16384)),
    "small": dict(model=dict(context=512, d_model=256, n_layers=6, n_heads=8, n_experts=16, k=2, expert_hidden=256,
                             dropout=0.1),
                  train=dict(steps=60000, batch_size=48, lr=7e-4, eval_every=1000, eval_symbols=262144)),
}

#: Nguyen et al. (2024), Table 1: BPC (Enwik8, Text8) of the small / medium models, mean of 3 runs.
PAPER_TABLE1 = {
    "cosine": {"enwik8": (1.213, 1.161), "text8": (1.310, 1.271)},
    "perturbed": {"enwik8": (1.197, 1.147), "text8": (1.303, 1.251)},
}


#: Arithmetic of the training forward pass: ``fp32`` throughout, or ``bf16`` autocast (matrix
#: products and attention in bfloat16, weights, optimizer state and gradients in float32).
PRECISIONS = ("fp32", "bf16")


def lm_autocast(device: str | torch.device, precision: str = "fp32"):
    """The autocast context of a training forward pass (:data:`PRECISIONS`).

    ``bf16`` is mixed precision with float32 master weights (Micikevicius et al. 2018): the
    parameters stay float32 and autocast casts them to bfloat16 per operation, so the optimizer
    updates float32 weights; bfloat16 has float32's exponent range, so no loss scaling is needed.
    ``fp32`` returns a disabled context (the arithmetic is unchanged).

    Parameters
    ----------
    device : str or torch.device
        Where the model lives (autocast is per device type).
    precision : {"fp32", "bf16"}
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


def sample_windows(data: torch.Tensor, batch_size: int, context: int,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data`` ``[n]``: inputs and next-symbol targets ``[B, T]``."""
    if len(data) < context + 1:
        raise ValueError(f"the training text ({len(data)} symbols) is shorter than context + 1 = {context + 1}")
    start = torch.randint(0, len(data) - context, (batch_size,), generator=gen)
    idx = start[:, None] + torch.arange(context + 1)
    w = data[idx.to(data.device)]
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate_bpc(model: MoETransformerLM, data: torch.Tensor, *, batch_size: int = 64,
                 max_symbols: int | None = None) -> dict:
    """BPC of ``data`` ``[n]`` on non-overlapping windows, and the routing statistics per layer.

    Returns
    -------
    dict
        ``bpc`` (float), ``n_symbols`` (predicted symbols), and per layer lists ``usage``
        (``[M]`` shares of token-slots), ``H_s`` and ``H_u`` (bits).
    """
    T = model.cfg.context
    if max_symbols is not None:
        data = data[:max_symbols + 1]
    n_win = (len(data) - 1) // T
    if n_win < 1:
        raise ValueError(f"{len(data)} symbols do not fill one window of {T} + 1")
    was_training = model.training
    model.eval()
    xs = data[:n_win * T].view(n_win, T)
    ys = data[1:n_win * T + 1].view(n_win, T)
    nll, probs, counts = 0.0, [[] for _ in model.blocks], None
    for i in range(0, n_win, batch_size):
        out = model(xs[i:i + batch_size])
        logits = out.logits.reshape(-1, out.logits.shape[-1])
        nll += float(torch.nn.functional.cross_entropy(logits, ys[i:i + batch_size].reshape(-1), reduction="sum"))
        c = torch.stack([r.mask.sum(0) for r in out.routing]).double()
        counts = c if counts is None else counts + c
        for layer, r in enumerate(out.routing):
            probs[layer].append(r.probs.float().cpu())
    model.train(was_training)
    n = n_win * T
    p = [torch.cat(pl).numpy() for pl in probs]
    usage = (counts / counts.sum(1, keepdim=True)).cpu().numpy()
    return {"bpc": nll / n / LN2, "n_symbols": n, "usage": usage.tolist(),
            "H_s": [gate_sparsity(pl) for pl in p], "H_u": [expert_usage(pl) for pl in p]}


def train_lm(corpus: TextCorpus, cfg: LMConfig, *, steps: int, batch_size: int, lr: float, eval_every: int,
             eval_symbols: int, seed: int, device: str = "cpu", progress: bool | None = None,
             desc: str = "", precision: str = "fp32") -> tuple[MoETransformerLM, dict]:
    """Train one model and evaluate it; returns ``(model, row)`` (``row``: the ``runs.jsonl`` entry).

    The seed is split (:func:`moestat.seeding.spawn_int_seeds`) into the initialisation seed and
    the seed of the training windows, so runs of different routers with the same seed see the same
    batches.  ``precision`` (:data:`PRECISIONS`) is the arithmetic of the training forward and
    backward passes (:func:`lm_autocast`); the evaluations (BPC) always run in float32, so that
    runs of either precision are scored alike.
    """
    if steps < eval_every or steps % eval_every:
        raise ValueError(f"steps={steps} must be a positive multiple of eval_every={eval_every}")
    init_seed, batch_seed = spawn_int_seeds(int(seed), 2)
    model = MoETransformerLM(cfg, random_state=init_seed).to(device)
    train = torch.as_tensor(corpus.train, device=device)
    val = torch.as_tensor(corpus.val, device=device)
    test = torch.as_tensor(corpus.test, device=device)
    gen = torch_generator(batch_seed)
    tokens_per_step = batch_size * cfg.context
    bar = None
    if progress is not False:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps * tokens_per_step, unit="tok", unit_scale=True, desc=desc or None, leave=False,
                   disable=None if progress is None else not progress, mininterval=1.0)

    amp = lm_autocast(device, precision)  # checks precision before any work

    def step(batch):
        with amp:  # the backward pass follows the forward pass's casts
            ce, loss, _ = model.loss(batch.x, batch.y)
        if bar is not None:
            bar.update(tokens_per_step)
        return loss

    curve: list[dict] = []
    last: dict = {}

    def epoch_info(e: int) -> dict:
        ev = evaluate_bpc(model, val, max_symbols=eval_symbols)
        last.clear()
        last.update(ev)
        row = {"step": (e + 1) * eval_every, "val_bpc": ev["bpc"], "usage": ev["usage"], "H_s": ev["H_s"], "H_u": ev["H_u"]}
        curve.append(row)
        if bar is not None:
            bar.set_postfix(val_bpc=round(ev["bpc"], 3))
        return {"val_bpc": ev["bpc"]}

    t0 = time.perf_counter()
    try:
        res = fit(model, step, FreshBatches(lambda b, g: sample_windows(train, b, cfg.context, g), batch_size,
                                            eval_every, gen),
                  epochs=steps // eval_every, lr=lr, lr_schedule="cosine", epoch_info=epoch_info,
                  validate=lambda m: -last["bpc"], check_finite=True, progress=False)
    finally:
        if bar is not None:
            bar.close()
    train_seconds = time.perf_counter() - t0
    for row, h in zip(curve, res.history):
        row["train_bpc"] = h["train_loss"] / LN2  # includes the (small) balance loss
    ev_val = evaluate_bpc(model, val)
    ev_test = evaluate_bpc(model, test)
    row = {
        "router": cfg.router, "seed": int(seed), "corpus": corpus.name, "n_params": model.n_parameters(),
        "val_bpc": ev_val["bpc"], "test_bpc": ev_test["bpc"], "best_step": res.best_epoch * eval_every,
        "steps": steps, "tokens": steps * tokens_per_step, "train_seconds": train_seconds,
        "tokens_per_second": steps * tokens_per_step / train_seconds,
        "wall_seconds": time.perf_counter() - t0, "precision": precision, "test_usage": ev_test["usage"], "test_H_s": ev_test["H_s"],
        "test_H_u": ev_test["H_u"], "curve": curve,
    }
    return model, row


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _read_done(path: Path) -> dict:
    return {(r["router"], r["seed"]): r for r in read_jsonl(path)}


def run_experiment(corpus: TextCorpus, routers, out_dir, *, preset: str = "cpu", seeds: int = 3, base_seed: int = 0,
                   model_overrides: dict | None = None, train_overrides: dict | None = None, device: str = "cpu",
                   resume: bool = False, progress: bool | None = None, verbose: bool = True,
                   precision: str = "fp32") -> dict:
    """Train every (router, seed), write the outputs listed in the module docstring, return the summary.

    Parameters
    ----------
    corpus : TextCorpus
    routers : sequence of {"linear", "cosine", "perturbed"}
    out_dir : path
    preset : {"cpu", "small"}
        Sizes of :data:`PRESETS`; ``model_overrides`` / ``train_overrides`` replace single entries
        (e.g. ``{"n_layers": 1}``, ``{"steps": 200}``).
    seeds, base_seed : int
        Run ``s`` of a router uses seed ``base_seed + s``.
    device : str
    resume : bool
        Keep the runs already in ``runs.jsonl`` and skip them.
    progress : bool or None
        Progress bar (tokens/s); ``None`` = only on a terminal.
    verbose : bool
        One line per finished run on stderr.
    precision : {"fp32", "bf16"}
        Arithmetic of the training passes (:func:`lm_autocast`).
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    bad = [r for r in routers if r not in LM_ROUTERS]
    if bad or not routers:
        raise ValueError(f"routers must be among {LM_ROUTERS}, got {list(routers)!r}")
    mk = {**PRESETS[preset]["model"], **(model_overrides or {})}
    tk = {**PRESETS[preset]["train"], **(train_overrides or {})}
    base_cfg = LMConfig(vocab_size=corpus.vocab_size, **mk)
    out = ensure_writable_dir(out_dir)
    (out / "checkpoints").mkdir(exist_ok=True)
    runs_path = out / "runs.jsonl"
    done = _read_done(runs_path) if resume else {}
    if not resume and runs_path.exists():
        runs_path.unlink()
    # seed-major order: an interrupted comparison has the same seeds for every router
    jobs = [(r, base_seed + s) for s in range(seeds) for r in routers]
    rows = []
    for i, (router, seed) in enumerate(jobs, 1):
        if (router, seed) in done:
            rows.append(done[(router, seed)])
            continue
        cfg = replace(base_cfg, router=router)
        model, row = train_lm(corpus, cfg, seed=seed, device=device, progress=progress,
                              desc=f"{router} seed {seed}", precision=precision, **tk)
        state = {"config": asdict(cfg), "state_dict": model.state_dict(), "vocab": corpus.vocab}
        # atomically, never through a link put at the checkpoint's name (it would overwrite the file linked to)
        atomic_write_with(out / "checkpoints" / f"{router}_seed{seed}.pt", lambda tmp: torch.save(state, tmp), ".pt")
        append_line(runs_path, json.dumps(row))
        rows.append(row)
        if verbose:
            _log(f"[{i}/{len(jobs)}] {router} seed {seed}: val {row['val_bpc']:.4f} test {row['test_bpc']:.4f} BPC "
                 f"({row['wall_seconds']:.0f} s, {row['tokens_per_second']:.0f} tokens/s)")
    summary = summarise(rows)
    summary["config"] = {"preset": preset, "model": asdict(base_cfg), "train": tk, "seeds": seeds,
                         "base_seed": base_seed, "corpus": corpus.describe(), "device": device, "precision": precision,
                         "torch_threads": torch.get_num_threads()}
    summary["paper_table1"] = PAPER_TABLE1
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "table.md", format_table(summary) + "\n")
    _plots(rows, out)
    return summary


def summarise(rows: list) -> dict:
    """Per router: BPC mean and sd (ddof 1) over seeds, wall time and throughput."""
    by: dict = {}
    for r in rows:
        by.setdefault(r["router"], []).append(r)
    res = {}
    for router, rs in by.items():
        def ms(key):
            v = np.array([r[key] for r in rs], dtype=float)
            return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")

        res[router] = {"runs": len(rs), "val_bpc": ms("val_bpc"), "test_bpc": ms("test_bpc"),
                       "wall_seconds": float(sum(r["wall_seconds"] for r in rs)),
                       "tokens_per_second": ms("tokens_per_second")[0], "n_params": rs[0]["n_params"],
                       "test_H_s": np.mean([r["test_H_s"] for r in rs], axis=0).tolist(),
                       "test_H_u": np.mean([r["test_H_u"] for r in rs], axis=0).tolist()}
    return {"routers": res}


def format_table(summary: dict) -> str:
    """The results table (Markdown) of a summary; one seed is "(1 seed)", never "± nan"."""
    lines = ["| router | runs | val BPC | test BPC | H_s per layer (bits) | H_u per layer (bits) | tokens/s | wall (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for router, s in summary["routers"].items():
        f = lambda v: " / ".join(f"{x:.2f}" for x in v)  # noqa: E731
        lines.append(f"| {router} | {s['runs']} | {mean_sd(*s['val_bpc'], s['runs'])} | "
                     f"{mean_sd(*s['test_bpc'], s['runs'])} | {f(s['test_H_s'])} | {f(s['test_H_u'])} | "
                     f"{s['tokens_per_second']:.0f} | {s['wall_seconds']:.0f} |")
    return "\n".join(lines)


#: Fewer evaluation points than this and the curve figure says so in its title.
MIN_EVAL_POINTS = 5


def _router_colour(router: str, i: int) -> str:
    return ROUTER_COLOURS.get(router, PALETTE[(3 + i) % len(PALETTE)])  # the same colours as the rates figures


def _plots(rows: list, out: Path) -> None:
    """``curves.png`` (validation BPC per router: mean over seeds, band min to max, a marker per
    evaluation) and ``routing.png`` (H_s and H_u per layer); one colour per router in both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    routers = list(dict.fromkeys(r["router"] for r in rows))
    colour = {router: _router_colour(router, i) for i, router in enumerate(routers)}
    fig, ax = plt.subplots(figsize=(6, 4))
    n_points = 0
    n_seeds: dict = {}
    labels: list[str] = []
    for router in routers:
        curves = [r["curve"] for r in rows if r["router"] == router]
        steps = [c["step"] for c in curves[0]]
        n_points = max(n_points, len(steps))
        v = np.array([[c["val_bpc"] for c in cu] for cu in curves])
        what = "1 seed" if len(v) == 1 else f"mean of {len(v)} seeds, band: min to max"
        n_seeds[router] = len(v)
        labels.append(f"{router} ({what})")
        ax.plot(steps, v.mean(0), marker="o", ms=3, color=colour[router])
        if len(v) > 1:
            ax.fill_between(steps, v.min(0), v.max(0), color=colour[router], alpha=0.2, lw=0)
    ax.set_xlabel("training step")
    ax.xaxis.get_major_locator().set_params(integer=True)  # steps are integers: no 22.5
    ax.set_ylabel("validation BPC (first part of the validation text)")
    title = "Validation bits per character during training"
    if n_points < MIN_EVAL_POINTS:
        title += f"\n(only {n_points} evaluation point{'s' if n_points != 1 else ''}: lower --eval-every for a curve)"
    ax.set_title(title, fontsize=9)
    # one key per router: its line, markers and (several seeds) band together
    legend(ax, [curve_handle(colour[r], band=n_seeds[r] > 1, ms=3) for r in routers], labels, frameon=False)
    fig.tight_layout()
    save_figure(fig, out / "curves", ("png",), dpi=150)
    plt.close(fig)
    n_layers = len(rows[0]["curve"][0]["H_s"])
    styles = ("-", "--", ":", "-.")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for router in routers:
        curves = [r["curve"] for r in rows if r["router"] == router]
        steps = [c["step"] for c in curves[0]]
        for key, ax in zip(("H_s", "H_u"), axes):
            v = np.array([[c[key] for c in cu] for cu in curves]).mean(0)  # [evals, layers]
            for layer in range(n_layers):
                ax.plot(steps, v[:, layer], color=colour[router], ls=styles[layer % 4], marker="o", ms=2.5)
    axes[0].set_title("H_s: mean per-token router entropy", fontsize=9)
    axes[1].set_title("H_u: entropy of the mean routing", fontsize=9)
    for ax in axes:
        ax.set_xlabel("training step")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("bits")
    # two short legends instead of routers x layers entries: colour = router, line style = layer
    axes[0].legend([Line2D([], [], color=colour[r], marker="o", ms=2.5) for r in routers], routers, title="router",
                   fontsize=7, title_fontsize=7, frameon=False)
    axes[1].legend([Line2D([], [], color="0.3", ls=styles[layer % 4]) for layer in range(n_layers)],
                   [f"layer {layer + 1}" for layer in range(n_layers)], title="layer", fontsize=7, title_fontsize=7,
                   frameon=False)
    seeds = len(rows) // max(len(routers), 1)
    fig.suptitle(f"Router entropies during training ({'1 seed' if seeds == 1 else f'mean over {seeds} seeds'})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / "routing", ("png",), dpi=150)
    plt.close(fig)
