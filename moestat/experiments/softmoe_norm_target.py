"""The ``||X||_2`` target of the Soft MoE implicit-bias paper (2024), Appendix B and Theorem 1.

A Soft MoE layer with a summation head regresses ``||X||_2`` for ``X ~ N(0, 5 I_10)`` cut into
``m`` tokens of dimension ``d``, for several numbers of experts ``n`` at a fixed expert budget;
Theorem 1 says that with one expert (one slot) the error cannot vanish, and the witness pairs of
:mod:`moestat.data.norm_target` show it on the trained models.

``moestat softmoe norm-target`` runs :func:`run_norm_target` and writes :func:`write_norm_outputs`;
training is the package's one loop (:func:`moestat.nn.train.fit`) on fresh batches.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from moestat.data.norm_target import (
    constant_predictor_mse,
    sample_norm_target,
    slot_gap,
    theorem1_tolerance,
    witness_pairs,
)
from moestat.devices import resolve_device
from moestat.io import atomic_write_json, atomic_write_text, atomic_write_with, ensure_writable_dir
from moestat.nn.softmoe import SoftMoERegressor, parse_tokenisation
from moestat.nn.train import FreshBatches, fit
from moestat.seeding import spawn_int_seeds, torch_generator
from moestat.plotting import colours, mean_sd, save_figure

__all__ = [
    "fit_regressor",
    "evaluate_mse",
    "witness_check",
    "run_norm_target",
    "norm_target_table",
    "plot_norm_target",
    "plot_witness",
    "write_norm_outputs",
    "rst_table",
]


def fit_regressor(model: SoftMoERegressor, steps: int = 3000, batch_size: int = 256, lr: float = 1e-3,
                  random_state: int = 0, dim: int = 10, variance: float = 5.0,
                  device: str | torch.device = "cpu") -> np.ndarray:
    """Train on fresh ``N(0, variance I)`` batches with MSE and Adam (the paper's Appendix B).

    Every step draws a new batch, so the training loss is also a test loss.

    Parameters
    ----------
    model : SoftMoERegressor
    steps : int
        Adam steps (one fresh batch each).
    batch_size : int
    lr : float
        Adam learning rate (paper: 1e-3, other hyper-parameters default).
    random_state : int
        Seed of the batches.
    dim, variance : int, float
        Input law.
    device : str or torch.device

    Returns
    -------
    ndarray ``[steps]``
        Training MSE of every step.
    """
    device = torch.device(device)
    model.to(device)
    batches = FreshBatches(lambda b, g: sample_norm_target(b, g, dim, variance), batch_size, steps,
                           torch_generator(random_state, device))
    res = fit(model, lambda b: torch.mean((model(b.x) - b.y) ** 2), batches, epochs=1, optimizer="adam", lr=lr,
              record_steps=True)
    return res.step_losses


def evaluate_mse(model: SoftMoERegressor, X: torch.Tensor, y: torch.Tensor, batch_size: int = 8192) -> float:
    """Mean squared error of ``model`` on ``(X, y)``."""
    tot = 0.0
    with torch.no_grad():
        for i in range(0, X.shape[0], batch_size):
            tot += float(((model(X[i:i + batch_size]) - y[i:i + batch_size]) ** 2).sum())
    return tot / X.shape[0]


def witness_check(model: SoftMoERegressor, a_values: Sequence[float] = (10.0, 20.0, 40.0, 80.0)) -> list[dict]:
    """Evaluate a trained ``||X||`` regressor on Theorem 1's witness pairs.

    The pairs are built from the router column of the first slot (for ``n = 1`` the only one,
    which is Theorem 1's setting; for ``n > 1`` the same recipe, which no longer forces all slots
    to coincide).  For each ``a`` we report the norm gap ``|t(A) - t(B)|``, the prediction gap
    ``|g(A) - g(B)|``, the slot gap of the first slot, the pair error
    ``max(|g(A) - t(A)|, |g(B) - t(B)|)`` and its lower bound ``(norm gap - prediction gap) / 2``,
    and Theorem 1's tolerance ``max{1, t/20}`` for the larger-norm input.

    Parameters
    ----------
    model : SoftMoERegressor
    a_values : sequence of float

    Returns
    -------
    list of dict, one per ``a``.
    """
    layer = model.layer
    phi = layer.router_weight[0].detach().cpu()
    A, B, case = witness_pairs(phi, model.m, a_values)
    gap = slot_gap(phi, A, B)
    dev, dt = layer.router_weight.device, layer.router_weight.dtype
    with torch.no_grad():
        gA = layer(A.to(dev, dt)).sum(dim=(1, 2)).double().cpu()
        gB = layer(B.to(dev, dt)).sum(dim=(1, 2)).double().cpu()
    tA = torch.linalg.vector_norm(A.flatten(1), dim=1)
    tB = torch.linalg.vector_norm(B.flatten(1), dim=1)
    err = torch.maximum((gA - tA).abs(), (gB - tB).abs())
    rows = []
    for i, a in enumerate(a_values):
        ng, pg = float((tA[i] - tB[i]).abs()), float((gA[i] - gB[i]).abs())
        rows.append({
            "a": float(a), "case": case, "n_experts": layer.n_experts,
            "norm_gap": ng, "pred_gap": pg, "slot_gap": float(gap[i]),
            "pair_error": float(err[i]), "lower_bound": max(0.0, (ng - pg) / 2),
            "relative_pair_error": float(err[i]) / ng,
            "tolerance": float(theorem1_tolerance(torch.maximum(tA[i], tB[i]))),
        })
    return rows


def _norm_job(m: int, d: int, n: int, seed: int, steps: int, batch_size: int, lr: float, budget_factor: float,
              eval_seed: int, eval_size: int, curve_points: int, device: str, a_values) -> dict:
    torch.set_num_threads(1)
    dev = resolve_device(device)
    s_model, s_data = spawn_int_seeds(seed, 2)
    model = SoftMoERegressor(m, d, n, budget_factor=budget_factor, random_state=s_model).to(dev)
    t0 = time.perf_counter()
    losses = fit_regressor(model, steps, batch_size, lr, random_state=s_data, device=dev)
    elapsed = time.perf_counter() - t0
    Xe, ye = sample_norm_target(eval_size, torch_generator(eval_seed, dev))
    final = evaluate_mse(model, Xe, ye)
    # the curve: mean training loss over consecutive windows (fresh batches: a test loss too)
    w = max(1, int(steps) // int(curve_points))
    L = losses[: (len(losses) // w) * w].reshape(-1, w).mean(1)
    return {
        "tokens": f"{m}x{d}", "n_experts": n, "seed": seed, "hidden": model.layer.hidden,
        "expert_weights": model.layer.experts.n_weights(), "final_mse": final,
        "curve_steps": ((np.arange(len(L)) + 1) * w).tolist(), "curve": L.tolist(),
        "seconds": elapsed, "witness": witness_check(model, a_values),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }


def run_norm_target(tokens: Sequence[str] = ("5x2", "2x5"), experts: Sequence[int] = (1, 2, 5, 10), steps: int = 3000,
                    seeds: int = 5, batch_size: int = 256, lr: float = 1e-3, budget_factor: float = 10.0,
                    eval_size: int = 20000, random_state: int = 0, curve_points: int = 100,
                    a_values: Sequence[float] = (10.0, 20.0, 40.0, 80.0), device: str = "cpu",
                    n_jobs: int = 1) -> dict:
    """The paper's Appendix B: Soft MoE + summation head regressing ``||X||`` for several ``n``.

    Parameters
    ----------
    tokens : sequence of str
        Tokenisations ``"<m>x<d>"`` of ``R^10``.
    experts : sequence of int
        Numbers of experts; the expert width ``budget_factor d / n`` keeps the expert weight count
        at ``2 budget_factor d^2``.
    steps, seeds, batch_size : int
        Adam steps (fresh batch each), seeds per configuration, batch size.
    lr : float
    budget_factor : float
    eval_size : int
        Size of the held-out evaluation sample (same for every run) used for the final MSE.
    random_state : int
        Master seed; run ``s`` uses the ``s``-th child seed (the same for every ``(tokens, n)``).
    curve_points : int
        Number of points kept per loss curve (window means).
    a_values : sequence of float
        Scales of the Theorem 1 witness pairs.
    device : str
    n_jobs : int
        joblib workers.

    Returns
    -------
    dict with keys ``config``, ``runs`` (list of per-run dicts), ``constant_mse``.
    """
    for t in tokens:
        m, d = parse_tokenisation(t)
        if m * d != 10:
            raise ValueError(f"tokens {t!r} must multiply to 10, the dimension of X")
    if not experts or any(int(n) < 1 for n in experts):
        raise ValueError(f"experts must be positive integers, got {experts!r}")
    resolve_device(device)
    run_seeds = spawn_int_seeds(random_state, int(seeds) + 1)
    eval_seed, run_seeds = run_seeds[0], run_seeds[1:]
    jobs = [(m_d, int(n), s) for m_d in (parse_tokenisation(t) for t in tokens) for n in experts for s in run_seeds]
    args = dict(steps=steps, batch_size=batch_size, lr=lr, budget_factor=budget_factor, eval_seed=eval_seed,
                eval_size=eval_size, curve_points=curve_points, device=device, a_values=tuple(a_values))
    if n_jobs == 1:
        runs = [_norm_job(md[0], md[1], n, s, **args) for md, n, s in jobs]
    else:
        from joblib import Parallel, delayed
        runs = Parallel(n_jobs=n_jobs)(delayed(_norm_job)(md[0], md[1], n, s, **args) for md, n, s in jobs)
    for r in runs:
        r["seed_index"] = run_seeds.index(r["seed"])
    config = dict(tokens=list(tokens), experts=[int(n) for n in experts], steps=steps, seeds=seeds,
                  batch_size=batch_size, lr=lr, budget_factor=budget_factor, eval_size=eval_size,
                  random_state=random_state, variance=5.0, dim=10, loss="mse", optimiser="adam",
                  activation="relu", a_values=list(a_values), device=device)
    return {"config": config, "runs": runs, "constant_mse": constant_predictor_mse(10, 5.0)}


def norm_target_table(result: dict) -> list[dict]:
    """Final held-out MSE per (tokens, n): mean, sd over seeds, per-seed values, and the witness.

    The witness column is the mean relative pair error at the largest ``a``.
    """
    rows = []
    for t in result["config"]["tokens"]:
        for n in result["config"]["experts"]:
            rs = sorted((r for r in result["runs"] if r["tokens"] == t and r["n_experts"] == n), key=lambda r: r["seed_index"])
            v = np.array([r["final_mse"] for r in rs])
            wit = np.array([r["witness"][-1]["relative_pair_error"] for r in rs])
            rows.append({"tokens": t, "n_experts": n, "hidden": rs[0]["hidden"], "expert_weights": rs[0]["expert_weights"],
                         "mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                         "per_seed": v.tolist(), "witness_rel_error": float(wit.mean()),
                         "witness_pred_gap": float(np.mean([r["witness"][-1]["pred_gap"] / r["witness"][-1]["norm_gap"] for r in rs]))})
    return rows


def rst_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    cells = [[h for h, _ in columns]] + [[fmt.format(**r) if "{" in fmt else str(r[fmt]) for _, fmt in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    sep = "  ".join("=" * w for w in widths)
    lines = [sep, "  ".join(c.ljust(w) for c, w in zip(cells[0], widths)), sep]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells[1:]]
    lines.append(sep)
    return "\n".join(lines) + "\n"


def _experts_label(n: int) -> str:
    return f"{n} expert" + ("" if n == 1 else "s")


def _seeds_text(result: dict) -> str:
    k = len({r["seed_index"] for r in result["runs"]})
    return "1 seed" if k == 1 else f"mean \u00b1 sd over {k} seeds"


def plot_norm_target(result: dict, path: str | os.PathLike) -> list[Path]:
    """Loss curves (mean +- sd band over seeds per number of experts), one panel per tokenisation.

    Writes ``path`` with suffixes ``.pdf`` and ``.png``; the constant-predictor MSE is a dashed line.
    One colour per number of experts (the same in :func:`plot_witness`), titled, legend in words.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toks = result["config"]["tokens"]
    experts = result["config"]["experts"]
    cols = colours(len(experts))
    fig, axes = plt.subplots(1, len(toks), figsize=(3.4 * len(toks), 2.9), sharey=True, squeeze=False)
    for ax, t in zip(axes[0], toks):
        for ci, n in enumerate(experts):
            rs = [r for r in result["runs"] if r["tokens"] == t and r["n_experts"] == n]
            C = np.array([r["curve"] for r in rs])
            x = np.array(rs[0]["curve_steps"])
            mu, sd = C.mean(0), C.std(0)
            ax.plot(x, mu, color=cols[ci], lw=1.2, label=_experts_label(n))
            if len(rs) > 1:  # one seed has no spread to draw
                ax.fill_between(x, np.maximum(mu - sd, 1e-3), mu + sd, color=cols[ci], alpha=0.2, lw=0)
        ax.axhline(result["constant_mse"], color="k", ls="--", lw=0.8, label="constant predictor")
        ax.set_yscale("log")
        m, d = parse_tokenisation(t)
        ax.set_title(f"tokens m x d = {m} x {d}", fontsize=9)
        ax.set_xlabel("Adam step", fontsize=8)
        ax.tick_params(labelsize=7, which="both")
    axes[0][0].set_ylabel("MSE (fresh batches)", fontsize=8)
    axes[0][-1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"Soft MoE learning $\\|X\\|_2$ at a fixed expert budget: training MSE ({_seeds_text(result)})", fontsize=9)
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def plot_witness(result: dict, path: str | os.PathLike) -> list[Path]:
    """Theorem 1 witness: relative pair error ``max|g - t| / |t(A) - t(B)|`` against ``a``.

    One panel per tokenisation, mean over seeds per number of experts (bars: sd, drawn for more
    than one seed); the dotted line is the one-expert asymptote ``1/2`` implied by a vanishing
    prediction gap.  Writes ``.pdf`` and ``.png``.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toks = result["config"]["tokens"]
    experts = result["config"]["experts"]
    cols = colours(len(experts))
    fig, axes = plt.subplots(1, len(toks), figsize=(3.4 * len(toks), 2.8), sharey=True, squeeze=False)
    for ax, t in zip(axes[0], toks):
        for ci, n in enumerate(experts):
            rs = [r for r in result["runs"] if r["tokens"] == t and r["n_experts"] == n]
            a = [w["a"] for w in rs[0]["witness"]]
            E = np.array([[w["relative_pair_error"] for w in r["witness"]] for r in rs])
            ax.errorbar(a, E.mean(0), yerr=E.std(0) if len(rs) > 1 else None, marker="o", ms=3, lw=1, capsize=2,
                        color=cols[ci], label=_experts_label(n))
        ax.axhline(0.5, color="k", ls=":", lw=0.8, label="1/2: one expert, vanishing prediction gap")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(a)
        ax.set_xticklabels([f"{v:g}" for v in a])
        m, d = parse_tokenisation(t)
        ax.set_title(f"tokens m x d = {m} x {d}", fontsize=9)
        ax.set_xlabel("witness scale a", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("pair error / norm gap", fontsize=8)
    h, l = axes[0][-1].get_legend_handles_labels()
    axes[0][-1].legend(h[1:] + h[:1], l[1:] + l[:1], fontsize=7, frameon=False)  # the experts first, the asymptote last
    fig.suptitle(f"Theorem 1 witness: relative pair error against the witness scale ({_seeds_text(result)})", fontsize=9)
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def write_norm_outputs(result: dict, out: str | os.PathLike, echo: bool = True) -> None:
    """Write ``models.pt``, ``norm_target.json``, ``witness.csv``, ``norm_target_table.rst`` and the
    loss and witness figures into ``out`` (created); echo the table on stdout."""
    out = ensure_writable_dir(out)
    rows = norm_target_table(result)
    models = {f"{r['tokens']}_n{r['n_experts']}_s{r['seed_index']}": r["state_dict"] for r in result["runs"]}
    atomic_write_with(out / "models.pt", lambda tmp: torch.save(models, tmp), ".pt")
    slim = {"config": result["config"], "constant_mse": result["constant_mse"], "table": rows,
            "runs": [{k: v for k, v in r.items() if k != "state_dict"} for r in result["runs"]]}
    atomic_write_json(out / "norm_target.json", slim)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["tokens", "n_experts", "seed_index", "a", "case", "norm_gap", "pred_gap", "slot_gap", "pair_error",
                "lower_bound", "tolerance"])
    for r in result["runs"]:
        for wr in r["witness"]:
            w.writerow([r["tokens"], r["n_experts"], r["seed_index"], wr["a"], wr["case"], f"{wr['norm_gap']:.6g}",
                        f"{wr['pred_gap']:.6g}", f"{wr['slot_gap']:.3g}", f"{wr['pair_error']:.6g}",
                        f"{wr['lower_bound']:.6g}", f"{wr['tolerance']:.6g}"])
    atomic_write_text(out / "witness.csv", buf.getvalue())
    rows = [{**r, "mse_text": mean_sd(r["mean"], r["sd"], len(r["per_seed"]), 3, pm="+-")} for r in rows]
    cols = [("tokens", "tokens"), ("experts", "n_experts"), ("hidden", "hidden"), ("expert weights", "expert_weights"),
            ("final MSE (mean +- sd)", "mse_text"),
            ("witness err/gap", "{witness_rel_error:.3f}"), ("pred gap/norm gap", "{witness_pred_gap:.3f}")]
    text = rst_table(rows, cols) + f"\nconstant predictor MSE (Var ||X||) = {result['constant_mse']:.3f}\n"
    atomic_write_text(out / "norm_target_table.rst", text)
    plot_norm_target(result, out / "norm_target_loss")
    plot_witness(result, out / "norm_target_witness")
    if echo:
        sys.stdout.write(text)
