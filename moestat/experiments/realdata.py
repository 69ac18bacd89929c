"""Real-data MoE runs: every gate and training method on Fashion-MNIST, MNIST and digits.

Command line::

    moestat realdata --dataset fashion-mnist --gate noisy_topk_load --experts 8 --k 2 \\
        --epochs 15 --seeds 3 --device auto --out runs/fmnist
    moestat realdata --dataset fashion-mnist --compare all --epochs 15 --seeds 3 --out runs/cmp

writes into ``--out``:

- ``runs.jsonl``: one JSON line per (gate, seed) as soon as it finishes (``--resume`` skips those);
- ``summary.csv`` / ``summary.md`` / ``summary.json``: test accuracy mean +- std over seeds,
  H_s, H_u, I(E;Y), expert-usage entropy, parameters, seconds per epoch, and the reference points
  (the Fashion-MNIST README's "MLP 256-128-100" line when the Debian package ships it);
- ``router_distribution.{png,pdf}``: tokens (top-k assignments) per expert on the test set, one
  panel per gate (Datta (2024)'s Figures 3-7);
- ``class_expert_heatmaps.{png,pdf}``: argmax expert by true class, one panel per gate (the
  thesis's expert-selection tables).

The library functions (:func:`run_experiment`, :func:`build_model`, :func:`summarise`,
:func:`plot_router_distribution`, :func:`plot_class_heatmaps`) do all the work.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from moestat.data.images import RealDataset
from moestat.model.gates import canonical_name
from moestat.io import (append_line, atomic_write_json, atomic_write_text, check_run_config,
                        ensure_writable_dir, read_jsonl, write_run_config)
from moestat.nn.classifier import (
    MLPClassifier,
    MoEClassifier,
    SoftMoEImageClassifier,
    count_parameters,
    evaluate_classifier,
    fit_classifier,
    matched_mlp_hidden,
)
from moestat.nn import metrics
from moestat.nn.layer import MoELayer
from moestat.nn.methods import METHODS, get_method, train_moe
from moestat.nn.predict import evaluate_moe
from moestat.plotting import PALETTE, PRINT_WIDTH_PX, mean_sd, panel_grid, save_figure

__all__ = [
    "GATE_SPECS",
    "COMPARE_ALL",
    "thesis_methods",
    "parse_gates",
    "readme_reference",
    "build_model",
    "run_experiment",
    "summarise",
    "format_table",
    "plot_router_distribution",
    "plot_class_heatmaps",
]

# name -> (router, router kwargs, training method); "mlp" and "softmoe" are handled apart.
# Balancing-loss weights are Datta (2024)'s (B3: w_importance = w_load = 0.1).  ``perturbed`` is
# the perturbed cosine router of Nguyen et al. (2024); ``perturbed_cosine`` is accepted for it.
GATE_SPECS: dict[str, tuple[str | None, dict, str]] = {
    "mlp": (None, {}, "mixture"),
    "dense": ("dense", {}, "mixture"),
    "dense_stochastic": ("dense", {}, "stochastic"),
    "naive_topk": ("naive_topk", {}, "mixture"),
    "topk_mask": ("topk_mask", {}, "mixture"),
    "topk_mask_importance": ("topk_mask", {"w_importance": 0.1}, "mixture"),
    "noisy_topk": ("noisy_topk", {}, "mixture"),
    "noisy_topk_load": ("noisy_topk", {"w_load": 0.1}, "mixture"),
    "noisy_topk_importance_load": ("noisy_topk", {"w_importance": 0.1, "w_load": 0.1}, "mixture"),
    "cosine": ("cosine", {}, "mixture"),
    "perturbed": ("perturbed", {}, "mixture"),
    "softmoe": (None, {}, "mixture"),
}

COMPARE_ALL = tuple(GATE_SPECS)

README_LOCATIONS = (
    Path("/usr/share/doc/dataset-fashion-mnist/README.md.gz"),
    Path("/usr/share/doc/dataset-fashion-mnist/README.md"),
    Path("/usr/share/datasets/fashion-mnist/README.md"),
)


def thesis_methods() -> tuple[str, ...]:
    """Names of the thesis training methods of :mod:`moestat.nn.methods`, as gates ``thesis:<name>``
    (e.g. ``thesis:peeking_expert``)."""
    return tuple(f"thesis:{m}" for m in METHODS)


def _run_thesis(gate: str, dataset: RealDataset, t: dict, *, seed: int, epochs: int, batch_size: int, lr: float,
                n_experts: int, k: int, expert_hidden: int, gate_hidden: int | None = None, **_ignored) -> dict:
    """Train one thesis method with :func:`moestat.nn.methods.train_moe` and evaluate it.

    The model is :class:`moestat.nn.layer.MoELayer` with MLP experts ``d -> expert_hidden -> C`` and a
    linear (or ``gate_hidden``) gate, Adam (thesis Sec. 3.8); the method keeps its own schedule
    and inference rule.  ``train_moe`` keeps the last epoch (no validation-based selection).
    """
    method = get_method(gate.split(":", 1)[1])
    if method.aggregation == "top_k" and method.k is not None and method.k > n_experts:
        raise ValueError(f"{gate} needs at least {method.k} experts")
    model = MoELayer(dataset.n_features, dataset.n_classes, n_experts, expert_hidden=(expert_hidden,),
                gate_hidden=(gate_hidden,) if gate_hidden else (),
                gate_type="attentive" if method.gate == "attentive" else "router", random_state=seed)
    t0 = time.perf_counter()
    res = train_moe(model, (t["X_train"], t["y_train"]), method, epochs=epochs, batch_size=batch_size, lr=lr,
                    optimizer="adam", random_state=seed)
    train_s = time.perf_counter() - t0
    ev = evaluate_moe(res.model, t["X_test"], t["y_test"], method)
    counts = np.asarray(ev["counts"], dtype=np.int64)
    usage = np.asarray(ev["usage"], dtype=np.int64)
    return {
        "n_params": count_parameters(res.model), "test_accuracy": ev["accuracy"] / 100.0,
        "test_loss": float("nan"), "val_accuracy": float("nan"), "best_epoch": epochs,
        "seconds_per_epoch": train_s / epochs, "history": res.history,
        "H_s": ev["H_s"], "H_u": ev["H_u"], "I_EY": ev["I_EY"],
        "usage_entropy": float(metrics.entropy(usage / max(usage.sum(), 1))),
        "counts": counts.tolist(), "tokens_per_expert": usage.tolist(),
    }


def readme_reference(label: str = "MLP 256-128-100") -> dict | None:
    """The Fashion-MNIST README's benchmark row ``label`` (as shipped by ``dataset-fashion-mnist``).

    Returns
    -------
    dict or None
        ``{"classifier", "preprocessing", "test_accuracy", "source"}``, or ``None`` when no
        README is installed or the row is absent.
    """
    for path in README_LOCATIONS:
        if not path.is_file():
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 3 and cells[0] == label:
                    try:
                        acc = float(cells[2])
                    except ValueError:
                        continue
                    return {"classifier": label, "preprocessing": cells[1], "test_accuracy": acc, "source": str(path)}
    return None


def build_model(
    gate: str,
    dataset: RealDataset,
    *,
    n_experts: int = 8,
    k: int = 2,
    expert_hidden: int = 64,
    gate_hidden: int | None = None,
    shared_hidden: int | None = None,
    combine: str = "probs",
    method: str | None = None,
    tau: float = 1.0,
    temperature: float = 1.0,
    k1_fix: bool = True,
    mlp_params: int | None = None,
    softmoe_patch: int | None = None,
    random_state: int = 0,
) -> torch.nn.Module:
    """Build the model of one gate spec (see :data:`GATE_SPECS`).

    ``mlp`` is a one-hidden-layer MLP whose width matches ``mlp_params`` parameters (default: the
    dense MoE with the same settings).  ``softmoe`` cuts the images into ``softmoe_patch``-sided
    patches (default: half the image side, i.e. 4 tokens, as the Soft MoE implicit-bias paper does for MNIST).
    """
    gate = canonical_name(gate, tuple(GATE_SPECS))
    d, C = dataset.n_features, dataset.n_classes
    router, rkw, default_method = GATE_SPECS[gate]
    if gate == "mlp":
        if mlp_params is None:
            ref = build_model("dense", dataset, n_experts=n_experts, k=k, expert_hidden=expert_hidden,
                              gate_hidden=gate_hidden, shared_hidden=shared_hidden)
            mlp_params = count_parameters(ref)
        return MLPClassifier(d, C, matched_mlp_hidden(mlp_params, d, C), random_state=random_state)
    if gate == "softmoe":
        patch = softmoe_patch or dataset.image_shape[0] // 2
        return SoftMoEImageClassifier(dataset.image_shape, C, n_experts, patch=patch, random_state=random_state)
    rkw = dict(rkw, k1_fix=k1_fix)
    if router in ("cosine", "perturbed"):
        rkw["temperature"] = temperature
    if router == "perturbed":
        rkw["tau"] = tau
    return MoEClassifier(
        d, C, n_experts, k, router, expert_hidden=expert_hidden, gate_hidden=gate_hidden,
        shared_hidden=shared_hidden, combine=combine, method=method or default_method,
        router_kwargs=rkw, random_state=random_state,
    )


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _read_done(path: Path) -> dict:
    done = {}
    for row in read_jsonl(path):
        # rows written before the names were unified say perturbed_cosine: read them as perturbed
        if not row["gate"].startswith("thesis:"):
            try:
                row["gate"] = canonical_name(row["gate"], tuple(GATE_SPECS))
            except ValueError:
                pass  # a gate of a later version: kept under its own name, never matched
        key = (row["gate"], int(row["seed"]))
        if key in done:  # never written by run_experiment: a merge gone wrong; which copy is right?
            raise ValueError(f"{path}: gate {key[0]} seed {key[1]} appears twice; keep one line and resume again")
        done[key] = row
    return done


def run_experiment(
    dataset: RealDataset,
    gates: Sequence[str],
    out_dir: str | Path,
    *,
    seeds: int = 3,
    base_seed: int = 0,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    lr_schedule: str = "constant",
    device: str = "cpu",
    resume: bool = False,
    summarise_only: bool = False,
    progress: bool | None = None,
    verbose: bool = True,
    settings: dict | None = None,
    **model_kwargs,
) -> dict:
    """Train every gate in ``gates`` for ``seeds`` seeds, evaluate on the test set, write files.

    Parameters
    ----------
    dataset : RealDataset
        Data (the split is fixed; the seeds change initialisation, shuffling and noise).
    gates : sequence of str
        Gate specs from :data:`GATE_SPECS`.
    out_dir : str or Path
        Output folder (created).
    seeds : int
        Seeds ``base_seed, ..., base_seed + seeds - 1`` per gate.
    epochs, batch_size, lr, lr_schedule
        Training settings (:func:`moestat.nn.classifier.fit_classifier`).
    device : str
        Torch device.
    resume : bool
        Keep the rows already in ``runs.jsonl`` and skip those runs.
    summarise_only : bool
        Train nothing: summarise and plot the rows already in ``runs.jsonl`` (implies
        ``resume``; e.g. after merging the ``runs.jsonl`` of runs done in parallel).
    progress : bool or None
        Progress bars (``None``: only on a terminal).
    verbose : bool
        One line on stderr per finished run.
    settings : dict, optional
        Every setting that changes a run's numbers, keyed by its flag (what ``moestat realdata``
        passes): recorded in ``run_config.json``, and a resume with other settings is refused
        naming them (:func:`moestat.io.check_run_config`).  ``None``: not recorded, not checked.
    **model_kwargs
        Passed to :func:`build_model`.

    Returns
    -------
    dict
        The summary written to ``summary.json``.
    """
    out = ensure_writable_dir(out_dir)
    runs_path = out / "runs.jsonl"
    resume = resume or summarise_only
    stored = check_run_config(out, settings, resume) if settings is not None else None
    done = _read_done(runs_path) if resume else {}
    if not resume and runs_path.exists():
        runs_path.unlink()
    if settings is not None and not summarise_only:
        # the gates of every run into this folder, so that --summarise-only summarises them all
        old_gates = list(stored.get("extra", {}).get("gates", [])) if stored and resume else []
        write_run_config(out, settings, {"gates": old_gates + [g for g in gates if g not in old_gates], "seeds": seeds,
                                         "seed": base_seed})
    t = dataset.tensors(device)
    mlp_params = None
    if "mlp" in gates:
        ref = build_model("dense", dataset, **{k: v for k, v in model_kwargs.items() if k != "mlp_params"})
        mlp_params = model_kwargs.pop("mlp_params", None) or count_parameters(ref)
    jobs = [(g, base_seed + s) for g in gates for s in range(seeds)]
    rows = []
    for i, (gate, seed) in enumerate(jobs, 1):
        if (gate, seed) in done:
            rows.append(done[(gate, seed)])
            continue
        if summarise_only:
            continue
        t0 = time.perf_counter()
        if gate.startswith("thesis:"):
            row = {"gate": gate, "seed": seed, "dataset": dataset.name, "epochs": epochs,
                   **_run_thesis(gate, dataset, t, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr,
                                 **model_kwargs)}
            row["history"] = json.loads(json.dumps(row["history"], default=lambda o: getattr(o, "tolist", str)()))
            row["wall_seconds"] = time.perf_counter() - t0
            append_line(runs_path, json.dumps(row))
            rows.append(row)
            if verbose:
                _log(f"[{i}/{len(jobs)}] {gate} seed {seed}: test acc {row['test_accuracy']:.4f} "
                     f"({row['seconds_per_epoch']:.1f} s/epoch)")
            continue
        model = build_model(gate, dataset, random_state=seed, mlp_params=mlp_params, **model_kwargs).to(device)
        fit = fit_classifier(
            model, t["X_train"], t["y_train"], t["X_val"], t["y_val"], epochs=epochs, batch_size=batch_size,
            lr=lr, lr_schedule=lr_schedule, random_state=seed, progress=progress, desc=f"{gate} seed {seed}",
        )
        ev = evaluate_classifier(model, t["X_test"], t["y_test"])
        row = {
            "gate": gate, "seed": seed, "dataset": dataset.name, "n_params": count_parameters(model),
            "test_accuracy": ev["accuracy"], "test_loss": ev["loss"],
            "val_accuracy": max((h.get("val_accuracy", float("nan")) for h in fit.history), default=float("nan")),
            "best_epoch": fit.best_epoch, "epochs": epochs, "seconds_per_epoch": fit.seconds_per_epoch,
            "cpu_seconds_per_epoch": fit.cpu_seconds_per_epoch, "wall_seconds": time.perf_counter() - t0, "history": fit.history,
        }
        for key in ("H_s", "H_u", "I_EY", "usage_entropy"):
            if key in ev:
                row[key] = ev[key]
        if "counts" in ev:
            row["counts"] = ev["counts"].tolist()
            row["tokens_per_expert"] = ev["tokens_per_expert"].tolist()
        append_line(runs_path, json.dumps(row))
        rows.append(row)
        if verbose:
            _log(f"[{i}/{len(jobs)}] {gate} seed {seed}: test acc {row['test_accuracy']:.4f} "
                 f"({row['seconds_per_epoch']:.1f} s/epoch, best epoch {row['best_epoch']})")
    summary = summarise(rows)
    summary["config"] = {
        "dataset": dataset.describe(), "gates": list(gates), "seeds": seeds, "base_seed": base_seed,
        "epochs": epochs, "batch_size": batch_size, "lr": lr, "lr_schedule": lr_schedule, "device": str(device),
        "torch_threads": torch.get_num_threads(), **{k: v for k, v in model_kwargs.items()},
    }
    ref = readme_reference() if dataset.name == "fashion-mnist" else None
    summary["references"] = {"readme_mlp_256_128_100": ref}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "summary.md", format_table(summary, markdown=True) + "\n")
    atomic_write_text(out / "summary.csv", _csv(summary))
    moe_rows = [r for r in rows if "counts" in r]
    if moe_rows:
        plot_router_distribution(moe_rows, out / "router_distribution", dataset=dataset.name)
        plot_class_heatmaps(moe_rows, out / "class_expert_heatmaps", class_names=dataset.class_names, dataset=dataset.name)
    return summary


_METRICS = ("test_accuracy", "H_s", "H_u", "I_EY", "usage_entropy", "seconds_per_epoch", "cpu_seconds_per_epoch",
            "n_params", "best_epoch")


def summarise(rows: Sequence[dict]) -> dict:
    """Mean and sample standard deviation (ddof = 1) over seeds per gate, in first-seen order.

    Returns
    -------
    dict
        ``{"gates": [{"gate", "n_seeds", "<metric>_mean", "<metric>_std", ...}, ...]}``.
    """
    order: list[str] = []
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r["gate"] not in by:
            order.append(r["gate"])
            by[r["gate"]] = []
        by[r["gate"]].append(r)
    out = []
    for g in order:
        rs = by[g]
        e = {"gate": g, "n_seeds": len(rs), "test_accuracy_runs": [r["test_accuracy"] for r in rs]}
        for m in _METRICS:
            vals = np.array([r[m] for r in rs if m in r and r[m] is not None], dtype=float)
            if len(vals):
                e[f"{m}_mean"] = float(vals.mean())
                e[f"{m}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        out.append(e)
    return {"gates": out}


def _fmt(e: dict, m: str, digits: int) -> str:
    if f"{m}_mean" not in e:
        return "-"
    return mean_sd(e[f"{m}_mean"], e.get(f"{m}_std"), e.get("n_seeds", 1), digits)


def format_table(summary: dict, markdown: bool = False) -> str:
    """The comparison table (one row per gate) as aligned text or Markdown."""
    head = ["gate", "seeds", "test acc", "H_s", "H_u", "I(E;Y)", "usage H", "params", "s/epoch"]
    body = []
    for e in summary["gates"]:
        body.append([
            e["gate"], str(e["n_seeds"]), _fmt(e, "test_accuracy", 4), _fmt(e, "H_s", 3), _fmt(e, "H_u", 3),
            _fmt(e, "I_EY", 3), _fmt(e, "usage_entropy", 3),
            f"{int(e['n_params_mean'])}" if "n_params_mean" in e else "-",
            f"{e['seconds_per_epoch_mean']:.1f}" if "seconds_per_epoch_mean" in e else "-",
        ])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head] + body)


def _csv(summary: dict) -> str:
    cols = ["gate", "n_seeds"] + [f"{m}_{s}" for m in _METRICS for s in ("mean", "std")]
    lines = [",".join(cols)]
    for e in summary["gates"]:
        lines.append(",".join(str(e.get(c, "")) for c in cols))
    return "\n".join(lines) + "\n"


_PRINT_IN = 7.0  # width of a print figure (a page), inches; written at >= PRINT_WIDTH_PX pixels


def _save(fig, stem: Path) -> None:
    # no bbox_inches="tight": it would crop the page width below PRINT_WIDTH_PX
    save_figure(fig, Path(stem), ("png", "pdf"), dpi=150, min_px=PRINT_WIDTH_PX)


def _cols(n: int) -> int:
    return min(4, n)


def _data_name(dataset: str | None) -> str:
    return f"{dataset}, " if dataset else ""


def _panel_title(gate: str, width: int = 20) -> str:
    """The gate in words, on two lines when long (``noisy topk importance load``), so that
    neighbouring titles of a page-wide grid never run into each other."""
    import textwrap

    return "\n".join(textwrap.wrap(gate.replace("_", " "), width))


def plot_router_distribution(rows: Sequence[dict], stem: str | Path, dataset: str | None = None) -> None:
    """Bar charts of tokens (top-k assignments) per expert on the test set, one panel per gate.

    Bars are the mean over seeds, error bars the min-max range (one seed: no bar, said in the
    title); experts are sorted by load within each seed first (expert indices are arbitrary), as in
    Datta (2024)'s Figures 3-7.  A print figure: a page wide, at least 1200 px, every panel
    labelled, a short last row centred (no blank slots).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gates = list(dict.fromkeys(r["gate"] for r in rows))
    nc = _cols(len(gates))
    nr = math.ceil(len(gates) / nc)
    fig = plt.figure(figsize=(_PRINT_IN, 1.9 * nr + 0.5))
    axes = panel_grid(fig, len(gates), nc)
    seeds = set()
    top = 0.0
    for ax, g in zip(axes, gates):
        tok = np.array([sorted(r["tokens_per_expert"], reverse=True) for r in rows if r["gate"] == g], dtype=float)
        seeds.add(len(tok))
        frac = tok / tok.sum(1, keepdims=True)
        mu = frac.mean(0)
        top = max(top, float(frac.max()))
        err = [mu - frac.min(0), frac.max(0) - mu] if len(tok) > 1 else None
        ax.bar(np.arange(len(mu)) + 1, mu, color=PALETTE[0], width=0.8, yerr=err, capsize=1.5, error_kw={"lw": 0.6})
        ax.set_title(_panel_title(g), fontsize=8)
        ax.set_xticks(np.arange(len(mu)) + 1)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("expert (by load)", fontsize=7)
        ax.set_ylabel("share of assignments", fontsize=7)
    for ax in axes:  # one scale for every gate
        ax.set_ylim(0, 1.05 * top)
    what = ("1 seed" if seeds == {1} else f"mean over {min(seeds)} seeds" if len(seeds) == 1
            else f"mean over {min(seeds)} to {max(seeds)} seeds per gate") + ("; bars: min to max" if max(seeds) > 1 else "")
    fig.suptitle(f"Expert load on the test set ({_data_name(dataset)}{what})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.15 / fig.get_figheight()))  # a gap under the title
    _save(fig, Path(stem))
    plt.close(fig)


def plot_class_heatmaps(rows: Sequence[dict], stem: str | Path, class_names: Sequence[str] | None = None,
                        dataset: str | None = None) -> None:
    """Heat maps of the argmax expert by true class (first seed of each gate), column-normalised,
    with one colour bar; a print figure as :func:`plot_router_distribution`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first: dict[str, dict] = {}
    for r in rows:
        first.setdefault(r["gate"], r)
    gates = list(first)
    one_seed = len({first[g]["seed"] for g in gates}) == 1  # then said once, in the title
    nc = _cols(len(gates))
    nr = math.ceil(len(gates) / nc)
    fig = plt.figure(figsize=(_PRINT_IN, 2.5 * nr + 0.6))
    axes = panel_grid(fig, len(gates), nc)
    im = None
    for ax, g in zip(axes, gates):
        c = np.asarray(first[g]["counts"], dtype=float)
        frac = c / np.maximum(c.sum(0, keepdims=True), 1)
        im = ax.imshow(frac, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_title(_panel_title(g) + ("" if one_seed else f" (seed {first[g]['seed']})"), fontsize=8)
        ax.set_yticks(range(c.shape[0]))
        ax.set_yticklabels([str(i + 1) for i in range(c.shape[0])], fontsize=6)
        ax.set_xticks(range(c.shape[1]))
        labels = list(class_names) if class_names is not None and len(class_names) == c.shape[1] else range(c.shape[1])
        names = [str(s)[:7] for s in labels]
        ax.set_xticklabels(names, fontsize=6, rotation=90 if max(map(len, names)) > 2 else 0)
        ax.set_xlabel("true class", fontsize=7)
        ax.set_ylabel("expert", fontsize=7)
    seed_text = f", seed {first[gates[0]]['seed']}" if one_seed and gates else ""
    fig.suptitle(f"Which expert each class goes to (test set, {_data_name(dataset)}argmax of the gate{seed_text})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 1 - 0.15 / fig.get_figheight()))
    if im is not None:
        cax = fig.add_axes((0.92, 0.25, 0.015, 0.5))
        cb = fig.colorbar(im, cax=cax)
        cb.ax.tick_params(labelsize=6)
        cb.set_label("share of the class", fontsize=7)
    _save(fig, Path(stem))
    plt.close(fig)


def parse_gates(text: str) -> list[str]:
    """The gates named in a comma list: names of :data:`GATE_SPECS` (aliases such as
    ``perturbed_cosine`` and ``-`` for ``_`` accepted), ``thesis:<method>``, ``all`` (every gate)
    and ``thesis`` (every thesis method).

    Raises
    ------
    ValueError
        An unknown name, or no name at all.
    """
    gates: list[str] = []
    for tok in (g.strip() for g in text.split(",")):
        if not tok:
            continue
        if tok == "all":
            gates += list(COMPARE_ALL)
        elif tok == "thesis":
            gates += list(thesis_methods())
        elif tok.startswith("thesis:"):
            try:
                gates.append("thesis:" + canonical_name(tok.split(":", 1)[1], tuple(METHODS)))
            except ValueError:
                raise ValueError(f"unknown thesis method {tok!r}; expected thesis:<one of {', '.join(METHODS)}>") from None
        else:
            try:
                gates.append(canonical_name(tok, tuple(GATE_SPECS)))
            except ValueError:
                raise ValueError(f"unknown gate {tok!r}; expected 'all', 'thesis', thesis:<method> or one of "
                                 f"{', '.join(GATE_SPECS)}") from None
    if not gates:
        raise ValueError(f"no gate given in {text!r}")
    return list(dict.fromkeys(gates))
