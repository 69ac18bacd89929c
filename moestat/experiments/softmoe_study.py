"""Seed 002 experiments: the ``||X||_2`` target (Appendix B, Theorem 1) and expert subsets (Alg. 1).

Command line::

    moestat softmoe norm-target [--steps 3000 --seeds 5 --tokens 5x2,2x5 --experts 1,2,5,10 --out DIR]
    moestat softmoe subsets --dataset digits|fashion-mnist|norm [--arch conv|patch --experts 4,8,16
                                      --split test|val --out DIR]

Every function the commands run is importable: :func:`run_norm_target`, :func:`witness_check`,
:func:`run_subsets`, :func:`evaluate_subsets`, :func:`fit_regressor`, :func:`fit_classifier`,
:func:`load_digits_images`, :func:`load_digits_tokens`, :func:`load_fashion_mnist_tokens`,
:func:`validation_split`.
"""

from __future__ import annotations

import math
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
    theorem1_tolerance,
    slot_gap,
    witness_pairs,
)
from moestat.data.images import find_idx_files, read_idx
from moestat.io import atomic_savefig, atomic_write_json, atomic_write_text, ensure_writable_dir
from moestat.nn.softmoe import (
    ConvSoftMoEClassifier,
    SoftMoEClassifier,
    SoftMoERegressor,
    make_generator,
    parse_tokenisation,
    patch_tokenize,
)
from moestat.nn.subsets import (
    algorithm1_select,
    combine_sum,
    csum_top_share,
    exhaustive_subset_search,
    random_subsets,
    subset_predictions,
)

__all__ = [
    "fit_regressor",
    "fit_classifier",
    "evaluate_mse",
    "witness_check",
    "run_norm_target",
    "norm_target_table",
    "plot_norm_target",
    "plot_witness",
    "write_norm_outputs",
    "write_subset_outputs",
    "load_digits_images",
    "load_digits_tokens",
    "validation_split",
    "read_idx",
    "load_fashion_mnist_tokens",
    "evaluate_subsets",
    "run_subsets",
    "subsets_table",
    "main",
]



def _seeds(random_state: int, count: int) -> list[int]:
    """``count`` independent 63-bit seeds from one integer via ``numpy.random.SeedSequence``."""
    return [int(s.generate_state(2, np.uint64)[0] >> np.uint64(1)) for s in np.random.SeedSequence(random_state).spawn(count)]


def _device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return torch.device(device)


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------


def fit_regressor(model: SoftMoERegressor, steps: int = 3000, batch_size: int = 256, lr: float = 1e-3,
                  random_state: int = 0, dim: int = 10, variance: float = 5.0,
                  device: str | torch.device = "cpu") -> np.ndarray:
    """Train on fresh ``N(0, variance I)`` batches with MSE and Adam (seed 002 Appendix B).

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
    g = make_generator(random_state, device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = torch.empty(int(steps), device=device)
    for step in range(int(steps)):
        X, y = sample_norm_target(batch_size, g, dim, variance)
        loss = torch.mean((model(X) - y) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
    return losses.cpu().numpy()


def evaluate_mse(model: SoftMoERegressor, X: torch.Tensor, y: torch.Tensor, batch_size: int = 8192) -> float:
    """Mean squared error of ``model`` on ``(X, y)``."""
    tot = 0.0
    with torch.no_grad():
        for i in range(0, X.shape[0], batch_size):
            tot += float(((model(X[i:i + batch_size]) - y[i:i + batch_size]) ** 2).sum())
    return tot / X.shape[0]


def fit_classifier(model: SoftMoEClassifier, X: torch.Tensor, y: torch.Tensor, epochs: int = 60,
                   batch_size: int = 64, lr: float = 1e-3, random_state: int = 0) -> list[float]:
    """Cross-entropy training with Adam (seed 002 Section 4.2: Adam, lr 1e-3, batch 256).

    Parameters
    ----------
    model : SoftMoEClassifier or ConvSoftMoEClassifier
    X : Tensor
        Model inputs (tokens ``[N, m, d]`` or images ``[N, H, W]``) on the model's device.
    y : LongTensor ``[N]``
    epochs, batch_size : int
    lr : float
    random_state : int
        Seed of the shuffling.

    Returns
    -------
    list of float
        Mean training loss per epoch.
    """
    g = make_generator(random_state)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    hist = []
    n = X.shape[0]
    for _ in range(int(epochs)):
        perm = torch.randperm(n, generator=g).to(X.device)
        tot = 0.0
        for i in range(0, n, int(batch_size)):
            idx = perm[i:i + int(batch_size)]
            loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * idx.numel()
        hist.append(tot / n)
    return hist


# --------------------------------------------------------------------------------------------
# the ||X|| experiment and the Theorem 1 witness
# --------------------------------------------------------------------------------------------


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
    dev = _device(device)
    s_model, s_data = _seeds(seed, 2)
    model = SoftMoERegressor(m, d, n, budget_factor=budget_factor, random_state=s_model).to(dev)
    t0 = time.perf_counter()
    losses = fit_regressor(model, steps, batch_size, lr, random_state=s_data, device=dev)
    elapsed = time.perf_counter() - t0
    Xe, ye = sample_norm_target(eval_size, make_generator(eval_seed, dev))
    final = evaluate_mse(model, Xe, ye)
    # the curve: mean training loss over consecutive windows (fresh batches: a test loss too)
    w = max(1, int(steps) // int(curve_points))
    L = losses[: (len(losses) // w) * w].reshape(-1, w).mean(1)
    return {
        "tokens": f"{m}x{d}", "n_experts": n, "seed": seed, "hidden": model.layer.experts.hidden,
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
    """Seed 002 Appendix B: Soft MoE + summation head regressing ``||X||`` for several ``n``.

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
    _device(device)
    run_seeds = _seeds(random_state, int(seeds) + 1)
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


def _table_rst(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    cells = [[h for h, _ in columns]] + [[fmt.format(**r) if "{" in fmt else str(r[fmt]) for _, fmt in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    sep = "  ".join("=" * w for w in widths)
    lines = [sep, "  ".join(c.ljust(w) for c, w in zip(cells[0], widths)), sep]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells[1:]]
    lines.append(sep)
    return "\n".join(lines) + "\n"


def plot_norm_target(result: dict, path: str | os.PathLike) -> list[Path]:
    """Loss curves (mean +- sd band over seeds per ``n``), one panel per tokenisation.

    Writes ``path`` with suffixes ``.pdf`` and ``.png``; the constant-predictor MSE is a dashed line.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toks = result["config"]["tokens"]
    fig, axes = plt.subplots(1, len(toks), figsize=(3.4 * len(toks), 2.6), sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, t in zip(axes[0], toks):
        for ci, n in enumerate(result["config"]["experts"]):
            rs = [r for r in result["runs"] if r["tokens"] == t and r["n_experts"] == n]
            C = np.array([r["curve"] for r in rs])
            x = np.array(rs[0]["curve_steps"])
            mu, sd = C.mean(0), C.std(0)
            c = colors[ci % len(colors)]
            ax.plot(x, mu, color=c, lw=1.2, label=f"n={n}")
            ax.fill_between(x, np.maximum(mu - sd, 1e-3), mu + sd, color=c, alpha=0.2, lw=0)
        ax.axhline(result["constant_mse"], color="k", ls="--", lw=0.8, label="constant")
        ax.set_yscale("log")
        m, d = parse_tokenisation(t)
        ax.set_title(f"m x d = {m} x {d}", fontsize=9)
        ax.set_xlabel("Adam step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("MSE (fresh batches)", fontsize=8)
    axes[0][-1].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    out = [atomic_savefig(fig, Path(str(path) + ".pdf")), atomic_savefig(fig, Path(str(path) + ".png"), dpi=200)]
    plt.close(fig)
    return out


def plot_witness(result: dict, path: str | os.PathLike) -> list[Path]:
    """Theorem 1 witness: relative pair error ``max|g - t| / |t(A) - t(B)|`` against ``a``.

    One panel per tokenisation, mean over seeds per ``n``; the dotted line is the ``n = 1``
    asymptote ``1/2`` implied by a vanishing prediction gap.  Writes ``.pdf`` and ``.png``.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toks = result["config"]["tokens"]
    fig, axes = plt.subplots(1, len(toks), figsize=(3.4 * len(toks), 2.5), sharey=True, squeeze=False)
    for ax, t in zip(axes[0], toks):
        for n in result["config"]["experts"]:
            rs = [r for r in result["runs"] if r["tokens"] == t and r["n_experts"] == n]
            a = [w["a"] for w in rs[0]["witness"]]
            E = np.array([[w["relative_pair_error"] for w in r["witness"]] for r in rs])
            ax.errorbar(a, E.mean(0), yerr=E.std(0), marker="o", ms=3, lw=1, capsize=2, label=f"n={n}")
        ax.axhline(0.5, color="k", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(a)
        ax.set_xticklabels([f"{v:g}" for v in a])
        ax.set_title(f"m x d = {t}", fontsize=9)
        ax.set_xlabel("witness scale a", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("pair error / norm gap", fontsize=8)
    axes[0][-1].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    out = [atomic_savefig(fig, Path(str(path) + ".pdf")), atomic_savefig(fig, Path(str(path) + ".png"), dpi=200)]
    plt.close(fig)
    return out


# --------------------------------------------------------------------------------------------
# data for the subset experiments (private loaders; to be switched to moestat.data.images)
# --------------------------------------------------------------------------------------------


def load_digits_images(test_size: float = 0.25, random_state: int = 0):
    """scikit-learn's 8x8 digits, pixels scaled to [0, 1], split into stratified train and test parts.

    Parameters
    ----------
    test_size : float
        Stratified test fraction.
    random_state : int
        Seed of the split.

    Returns
    -------
    (X_train, y_train, X_test, y_test) : tensors; X of shape ``[N, 8, 8]``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    ds = load_digits()
    imgs = torch.tensor(ds.images / 16.0, dtype=torch.float32)
    y = torch.tensor(ds.target, dtype=torch.long)
    itr, ite = train_test_split(np.arange(len(y)), test_size=test_size, stratify=ds.target, random_state=random_state)
    return imgs[itr], y[itr], imgs[ite], y[ite]


def load_digits_tokens(patch: int = 4, test_size: float = 0.25, random_state: int = 0):
    """scikit-learn's 8x8 digits as ``(64 / patch^2)`` patch tokens, pixels scaled to [0, 1].

    Parameters
    ----------
    patch : int
        Patch side (4 gives 4 tokens of dimension 16, the analogue of the paper's four 14x14
        MNIST patches).
    test_size : float
        Stratified test fraction.
    random_state : int
        Seed of the split (the same split as :func:`load_digits_images`).

    Returns
    -------
    (X_train, y_train, X_test, y_test) : tensors; X of shape ``[N, m, patch^2]``.
    """
    Xtr, ytr, Xte, yte = load_digits_images(test_size, random_state)
    return patch_tokenize(Xtr, patch), ytr, patch_tokenize(Xte, patch), yte


def validation_split(X: torch.Tensor, y: torch.Tensor, size: float | int = 0.25, random_state: int = 0):
    """Carve a stratified validation set out of a training set (the test set is never touched).

    Parameters
    ----------
    X : Tensor ``[N, ...]``
    y : LongTensor ``[N]``
    size : float or int
        Validation fraction (float) or count (int).
    random_state : int
        Seed of the split.

    Returns
    -------
    (X_fit, y_fit, X_val, y_val)
    """
    from sklearn.model_selection import train_test_split

    labels = y.cpu().numpy()
    ifit, ival = train_test_split(np.arange(len(labels)), test_size=size, stratify=labels, random_state=random_state)
    ifit, ival = torch.from_numpy(ifit), torch.from_numpy(ival)
    return X[ifit], y[ifit], X[ival], y[ival]


def load_fashion_mnist_tokens(path: str | os.PathLike | None = None, patch: int = 14):
    """Fashion-MNIST (IDX files) as patch tokens, pixels scaled to [0, 1].

    Parameters
    ----------
    path : path-like, optional
        Folder holding ``train-images-idx3-ubyte(.gz)`` etc.; default: the search order of
        :func:`moestat.data.images.find_idx_files` (``$MOESTAT_DATA``, then Debian's
        ``/usr/share/datasets/fashion-mnist`` from ``dataset-fashion-mnist``).
    patch : int
        Patch side (14 gives the paper's four 14x14 MNIST tokens of dimension 196).

    Returns
    -------
    (X_train, y_train, X_test, y_test)
    """
    files = find_idx_files("fashion-mnist", path)  # the shared loader's search order and error
    out = []
    for split in ("train", "test"):
        imgs = read_idx(files[f"{split}_images"])
        labels = read_idx(files[f"{split}_labels"])
        X = patch_tokenize(torch.tensor(imgs, dtype=torch.float32) / 255.0, patch)
        out += [X, torch.tensor(labels.astype(np.int64))]
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Algorithm 1 versus random and exhaustive subsets
# --------------------------------------------------------------------------------------------


def evaluate_subsets(model, X: torch.Tensor, y: torch.Tensor, ks: Sequence[int], n_random: int = 10,
                     random_state: int = 0, task: str = "classification", max_exhaustive: int = 5000,
                     batch_size: int = 2048) -> list[dict]:
    """Algorithm 1 versus random ``k``-subsets and the exhaustive existence test, on ``(X, y)``.

    Parameters
    ----------
    model : SoftMoEClassifier, ConvSoftMoEClassifier or SoftMoERegressor
        Trained model with a linear (or summation) head; ``model.tokens(X)`` is the input of its
        Soft MoE layer ``model.layer``.
    X : Tensor
        Inputs (tokens ``[N, m, d]`` for the patch classifier, images ``[N, H, W]`` for the conv
        classifier, vectors ``[N, m d]`` for the regressor).
    y : Tensor ``[N]``
    ks : sequence of int
        Subset sizes.
    n_random : int
        Seeds of the random baseline (paper: 10).
    random_state : int
    task : {"classification", "regression"}
        Metric: accuracy, or MSE together with ``R^2 = 1 - MSE / Var(y)`` (the retained share
        is taken on ``R^2``).
    max_exhaustive : int
        Skip the exhaustive search when ``C(n, k)`` exceeds this.
    batch_size : int

    Returns
    -------
    list of dict, one per ``k``: full-model metric, Algorithm 1, random mean and sd, z-statistic,
    exhaustive oracle, % of the full model retained, share of expert evaluations saved, the share
    of ``C_sum`` held by the kept experts, and the number of distinct oracle subsets.
    """
    model.eval()
    n = model.n_experts
    is_reg = task == "regression"
    with torch.no_grad():
        parts, biases, csums = [], None, []
        for i in range(0, X.shape[0], batch_size):
            c, b = model.expert_contributions(X[i:i + batch_size])
            parts.append(c)
            biases = b
            tok = model.tokens(X[i:i + batch_size])  # the Soft MoE layer's input
            csums.append(combine_sum(model.layer.combine_weights(tok), n))
        contrib, csum = torch.cat(parts), torch.cat(csums)

        def metric(pred):
            if is_reg:
                return float(torch.mean((pred[:, 0] - y) ** 2))
            return float((pred.argmax(-1) == y).float().mean())

        full = metric(biases + contrib.sum(1))
        var_y = float(torch.var(y.double(), unbiased=False)) if is_reg else None

        def score(v):  # higher is better, comparable to the full model
            return 1 - v / var_y if is_reg else v

        rows = []
        rand_seeds = _seeds(random_state, n_random)
        for k in ks:
            k = int(k)
            if not 1 <= k <= n:
                raise ValueError(f"k={k} must lie in [1, {n}]")
            idx = torch.topk(csum, k, dim=-1).indices
            # the compute-saving path (only k experts evaluated) on a slice, to check it matches
            xs = X[: min(256, X.shape[0])]
            sel = algorithm1_select(model.layer, model.tokens(xs), k)
            direct = model(xs, experts_idx=sel)
            via = subset_predictions(contrib[: xs.shape[0]], biases, idx[: xs.shape[0]])
            via = via[:, 0] if is_reg else via
            if not torch.allclose(direct, via, rtol=1e-4, atol=1e-4):
                raise RuntimeError("Algorithm 1 forward pass disagrees with the contribution sum")
            alg1 = metric(subset_predictions(contrib, biases, idx))
            rand = np.array([metric(subset_predictions(contrib, biases, random_subsets(X.shape[0], n, k, make_generator(s)).to(X.device)))
                             for s in rand_seeds])
            r_mean = float(rand.mean())
            r_sd = float(rand.std(ddof=1)) if len(rand) > 1 else float("nan")
            # z-statistic of Tables 2, 10a-13a, on the "higher is better" scale
            z = (score(alg1) - score(r_mean)) / (r_sd / var_y if is_reg else r_sd) if r_sd > 0 else float("nan")
            n_sub = math.comb(n, k)
            oracle, n_unique = None, None
            if n_sub <= max_exhaustive:
                ex = exhaustive_subset_search(contrib, biases, y, k, task)
                oracle = float(ex.success.float().mean()) if not is_reg else float(ex.best_error.mean())
                n_unique = ex.n_unique
            row = {
                "n_experts": n, "k": k, "n_test": int(X.shape[0]), "full": full, "alg1": alg1,
                "random_mean": r_mean, "random_sd": r_sd, "random_per_seed": rand.tolist(), "z": z,
                "oracle": oracle, "n_subsets": n_sub, "oracle_unique_subsets": n_unique,
                "pct_retained": 100 * score(alg1) / score(full),
                "random_pct_retained": 100 * score(r_mean) / score(full),
                "evals_saved": 1 - k / n, "csum_share": float(csum_top_share(csum, k).mean()),
                "metric": "mse" if is_reg else "accuracy",
            }
            if is_reg:
                row.update(r2_full=score(full), r2_alg1=score(alg1), r2_random=score(r_mean))
            rows.append(row)
    return rows


def _ks_for(n: int, k_fracs: Sequence[int] | None, ks: Sequence[int] | None) -> list[int]:
    if ks:
        return [int(k) for k in ks if int(k) <= n]
    return [n // f for f in k_fracs if n % f == 0 and n // f >= 1]


def run_subsets(dataset: str = "digits", experts: Sequence[int] = (4, 8, 16), k_fracs: Sequence[int] = (4, 8),
                ks: Sequence[int] | None = None, model_seeds: int = 3, n_random: int = 10, epochs: int | None = None,
                steps: int = 3000, batch_size: int | None = None, lr: float = 1e-3, budget_factor: float | None = None,
                patch: int | None = None, tokens: str = "5x2", data_path: str | None = None,
                max_exhaustive: int = 5000, random_state: int = 0, device: str = "cpu",
                normalize: bool = False, progress: bool | None = None, arch: str | None = None,
                channels: Sequence[int] = (32, 64), grid: int = 3, token_norm: bool = True,
                split: str = "test") -> dict:
    """Train Soft MoE models for several ``n`` and evaluate Algorithm 1 (seed 002 Sections 4.2-4.4).

    Parameters
    ----------
    dataset : {"digits", "fashion-mnist", "norm"}
        ``digits``: scikit-learn's 8x8 digits; ``fashion-mnist``: IDX files; ``norm``: the
        ``||X||`` regressor.
    experts : sequence of int
    k_fracs : sequence of int
        ``k = n / f`` for each ``f`` that divides ``n`` (ignored when ``ks`` is given).
    ks : sequence of int, optional
        Absolute subset sizes.
    model_seeds : int
        Models trained per ``n``, each from its own seed.
    n_random : int
        Seeds of the random baseline.
    epochs : int, optional
        Classifier epochs (default 60 for digits, 5 for Fashion-MNIST).
    steps : int
        Adam steps for the ``norm`` regressor.
    batch_size : int, optional
        Default 64 (digits), 256 (Fashion-MNIST, paper's MNIST value), 256 (norm).
    lr : float
    budget_factor : float, optional
        Expert width ``c d / n``: default 16 (digits patch model, d=16), 4 (conv model, d=64;
        Fashion-MNIST patch model, the paper's MNIST value), 16 (norm).
    patch : int, optional
        Patch side of the patch model (default 4 for digits, 14 for Fashion-MNIST).
    tokens : str
        Tokenisation for ``norm``.
    data_path : str, optional
        Fashion-MNIST folder.
    max_exhaustive : int
    random_state : int
    device : str
    normalize : bool
        Puigcerver et al.'s normalised router (off in seed 002).
    progress : bool, optional
        tqdm progress bar (None: only on a TTY).
    arch : {"conv", "patch"}, optional
        Classifier: ``patch`` is :class:`~moestat.nn.softmoe.SoftMoEClassifier` (patch tokens ->
        Soft MoE -> linear head, the paper's MNIST model); ``conv`` is
        :class:`~moestat.nn.softmoe.ConvSoftMoEClassifier` (conv stem -> ``grid^2`` tokens ->
        LayerNorm -> Soft MoE without residual -> linear head, after the paper's CIFAR-10 model).
        Default ``conv`` for digits, ``patch`` for Fashion-MNIST; not used for ``norm``.
    channels : sequence of int
        Conv stem channels (the last is the token dimension).
    grid : int
        Conv model: ``grid^2`` tokens.
    token_norm : bool
        Conv model: LayerNorm on the tokens before the Soft MoE layer.
    split : {"test", "val"}
        Evaluate on the test split, or on a stratified validation split carved out of the
        training split (25% for digits, 10,000 images for Fashion-MNIST, a fresh sample for
        ``norm``) with the models trained on the rest; use ``val`` to choose settings, so that
        the test split is used only once.

    Returns
    -------
    dict with ``config``, ``models`` (per model: n, seed, accuracy, training time) and ``rows``.
    """
    from tqdm.auto import tqdm

    if dataset not in ("digits", "fashion-mnist", "norm"):
        raise ValueError(f"dataset must be 'digits', 'fashion-mnist' or 'norm', got {dataset!r}")
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    task = "regression" if dataset == "norm" else "classification"
    if arch is None:
        arch = {"digits": "conv", "fashion-mnist": "patch", "norm": None}[dataset]
    elif task == "regression":
        raise ValueError("arch applies to the image datasets only, not to dataset 'norm'")
    elif arch not in ("conv", "patch"):
        raise ValueError(f"arch must be 'conv' or 'patch', got {arch!r}")
    channels = [int(c) for c in channels]
    if not channels or min(channels) < 1 or int(grid) < 1:
        raise ValueError(f"channels and grid must be positive, got {channels!r} and {grid!r}")
    dev = _device(device)
    defaults = {"digits": (60, 64, 16.0, 4), "fashion-mnist": (5, 256, 4.0, 14), "norm": (None, 256, 16.0, None)}[dataset]
    epochs = defaults[0] if epochs is None else epochs
    batch_size = defaults[1] if batch_size is None else batch_size
    if budget_factor is None:
        budget_factor = 4.0 if arch == "conv" else defaults[2]
    patch = (defaults[3] if patch is None else patch) if arch == "patch" else None
    master = _seeds(random_state, 3)
    if dataset == "digits":
        if arch == "patch":
            Xtr, ytr, Xte, yte = load_digits_tokens(patch, random_state=master[0] % (2**32))
        else:
            Xtr, ytr, Xte, yte = load_digits_images(random_state=master[0] % (2**32))
    elif dataset == "fashion-mnist":
        if arch == "patch":
            Xtr, ytr, Xte, yte = load_fashion_mnist_tokens(data_path, patch)
        else:  # one 28x28 "patch" is the image in raster order
            Xtr, ytr, Xte, yte = load_fashion_mnist_tokens(data_path, 28)
            Xtr, Xte = Xtr.reshape(-1, 28, 28), Xte.reshape(-1, 28, 28)
    else:
        m, d = parse_tokenisation(tokens)
        if m * d != 10:
            raise ValueError(f"tokens {tokens!r} must multiply to 10")
        # validation: an independent fresh sample, from the third master seed
        Xte, yte = sample_norm_target(10000, make_generator(master[2] if split == "val" else master[0]))
    if split == "val" and task == "classification":
        Xtr, ytr, Xte, yte = validation_split(Xtr, ytr, 0.25 if dataset == "digits" else 10000, master[2] % (2**32))
    Xte, yte = Xte.to(dev), yte.to(dev)
    rows, models = [], []
    seeds = _seeds(master[1], model_seeds)
    jobs = [(int(n), si, s) for n in experts for si, s in enumerate(seeds)]
    for n, si, s in tqdm(jobs, disable=None if progress is None else not progress, desc=f"subsets {dataset}"):
        k_list = _ks_for(n, k_fracs, ks)
        if not k_list:
            continue
        s_init, s_train, s_eval = _seeds(s, 3)
        t0 = time.perf_counter()
        if task == "regression":
            model = SoftMoERegressor(m, d, n, budget_factor=budget_factor, random_state=s_init,
                                     normalize=normalize).to(dev)
            fit_regressor(model, steps, batch_size, lr, random_state=s_train, device=dev)
            base = evaluate_mse(model, Xte, yte)
            d_tok, hidden = d, model.layer.experts.hidden
        else:
            n_classes = int(ytr.max()) + 1
            if arch == "conv":
                model = ConvSoftMoEClassifier(n, n_classes, channels=channels, grid=grid, budget_factor=budget_factor,
                                              token_norm=token_norm, random_state=s_init, normalize=normalize).to(dev)
            else:
                model = SoftMoEClassifier(Xtr.shape[1], Xtr.shape[2], n, n_classes, budget_factor=budget_factor,
                                          random_state=s_init, normalize=normalize).to(dev)
            fit_classifier(model, Xtr.to(dev), ytr.to(dev), epochs, batch_size, lr, random_state=s_train)
            model.eval()
            with torch.no_grad():
                base = float((model(Xte).argmax(-1) == yte).float().mean())
            d_tok, hidden = model.layer.d, model.layer.experts.hidden
        secs = time.perf_counter() - t0
        models.append({"n_experts": n, "seed_index": si, "seed": s, "hidden": hidden, "test_metric": base,
                       "expert_weights": model.layer.experts.n_weights(), "train_seconds": secs})
        for r in evaluate_subsets(model, Xte, yte, k_list, n_random, s_eval, task, max_exhaustive):
            r.update(seed_index=si, seed=s, hidden=hidden, token_dim=d_tok)
            rows.append(r)
    config = dict(dataset=dataset, experts=list(map(int, experts)), k_fracs=list(k_fracs), ks=list(ks) if ks else None,
                  model_seeds=model_seeds, n_random=n_random, epochs=epochs if task == "classification" else None,
                  steps=steps if task == "regression" else None, batch_size=batch_size, lr=lr,
                  budget_factor=budget_factor, patch=patch if task == "classification" else None,
                  tokens=tokens if task == "regression" else None, random_state=random_state, device=str(dev), normalize=normalize,
                  n_train=int(Xtr.shape[0]) if task == "classification" else None, n_test=int(Xte.shape[0]),
                  arch=arch, channels=channels if arch == "conv" else None, grid=int(grid) if arch == "conv" else None,
                  token_norm=bool(token_norm) if arch == "conv" else None, split=split)
    return {"config": config, "models": models, "rows": rows}


def subsets_table(result: dict) -> list[dict]:
    """Aggregate :func:`run_subsets` rows over model seeds: one row per ``(n, k)``."""
    out = []
    keys = sorted({(r["n_experts"], r["k"]) for r in result["rows"]}, key=lambda t: (t[0], -t[1]))
    for n, k in keys:
        rs = [r for r in result["rows"] if r["n_experts"] == n and r["k"] == k]

        def ms(key):
            v = np.array([r[key] for r in rs if r[key] is not None], dtype=float)
            if v.size == 0:
                return float("nan"), float("nan")
            return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0

        row = {"n_experts": n, "k": k, "models": len(rs)}
        for key in ("full", "alg1", "random_mean", "oracle", "pct_retained", "random_pct_retained", "z", "csum_share",
                    "evals_saved"):
            row[key], row[key + "_sd"] = ms(key)
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------------


def write_norm_outputs(result: dict, out: Path) -> None:
    import csv
    import io

    rows = norm_target_table(result)
    torch.save({f"{r['tokens']}_n{r['n_experts']}_s{r['seed_index']}": r["state_dict"] for r in result["runs"]},
               out / "models.pt.tmp")
    os.replace(out / "models.pt.tmp", out / "models.pt")
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
    cols = [("tokens", "tokens"), ("n", "n_experts"), ("hidden", "hidden"), ("expert weights", "expert_weights"),
            ("final MSE (mean +- sd)", "{mean:.3f} +- {sd:.3f}"),
            ("witness err/gap", "{witness_rel_error:.3f}"), ("pred gap/norm gap", "{witness_pred_gap:.3f}")]
    text = _table_rst(rows, cols) + f"\nconstant predictor MSE (Var ||X||) = {result['constant_mse']:.3f}\n"
    atomic_write_text(out / "norm_target_table.rst", text)
    plot_norm_target(result, out / "norm_target_loss")
    plot_witness(result, out / "norm_target_witness")
    sys.stdout.write(text)


def write_subset_outputs(result: dict, out: Path) -> None:
    table = subsets_table(result)
    atomic_write_json(out / "subsets.json", {**result, "table": table})
    reg = result["config"]["dataset"] == "norm"
    name = "MSE" if reg else "acc"
    cols = [("n", "n_experts"), ("k", "k"), (f"full {name}", "{full:.4f} +- {full_sd:.4f}"),
            (f"Alg.1 {name}", "{alg1:.4f} +- {alg1_sd:.4f}"), (f"random {name}", "{random_mean:.4f} +- {random_mean_sd:.4f}"),
            ("oracle", "{oracle:.4f}"), ("% retained" + (" (R2)" if reg else ""), "{pct_retained:.1f} +- {pct_retained_sd:.1f}"),
            ("random % retained", "{random_pct_retained:.1f}"), ("z", "{z:.1f} +- {z_sd:.1f}"),
            ("C_sum share", "{csum_share:.3f}"), ("evals saved", "{evals_saved:.3f}")]
    cfg = result["config"]
    what = f"dataset {cfg['dataset']}" + (f", arch {cfg.get('arch')}" if cfg.get("arch") else "") + \
        f", split {cfg.get('split', 'test')}, {cfg['model_seeds']} model(s) per n, evaluated on {cfg['n_test']} points"
    text = what + "\n\n" + _table_rst(table, cols)
    per = [("n", "n_experts"), ("k", "k"), ("seed", "seed_index"), ("full", "{full:.4f}"), ("Alg.1", "{alg1:.4f}"),
           ("random", "{random_mean:.4f} +- {random_sd:.4f}"), ("oracle", "{oracle:.4f}"), ("% retained", "{pct_retained:.1f}"),
           ("z", "{z:.1f}")]
    per_rows = [{**r, "oracle": float("nan") if r["oracle"] is None else r["oracle"]} for r in result["rows"]]
    text += "\nPer model seed:\n\n" + _table_rst(per_rows, per)
    atomic_write_text(out / "subsets_table.rst", text)
    sys.stdout.write(text)
