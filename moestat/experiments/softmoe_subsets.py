"""Expert subsets of a trained Soft MoE: Algorithm 1 of the Soft MoE implicit-bias paper (2024)
against random and exhaustive subsets (its Sections 4.2-4.4), on digits, Fashion-MNIST or the
``||X||`` regressor.

``moestat softmoe subsets`` runs :func:`run_subsets` and writes :func:`write_subset_outputs`.
Digits and Fashion-MNIST come from the one image loader, :func:`moestat.data.images.load_dataset`
(one documented split); the classifiers are trained by the package's one loop
(:func:`moestat.nn.train.fit`).
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Sequence

import numpy as np
import torch

from moestat.data.images import load_dataset
from moestat.data.norm_target import sample_norm_target
from moestat.devices import resolve_device
from moestat.experiments.softmoe_norm_target import evaluate_mse, fit_regressor, rst_table
from moestat.io import atomic_write_json, atomic_write_text, ensure_writable_dir
from moestat.nn.softmoe import (
    ConvSoftMoEClassifier,
    SoftMoEClassifier,
    SoftMoERegressor,
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
from moestat.nn.train import ShuffledBatches, fit
from moestat.seeding import spawn_int_seeds, torch_generator
from moestat.plotting import mean_sd

__all__ = [
    "fit_classifier",
    "load_image_tokens",
    "VAL_FRACTIONS",
    "evaluate_subsets",
    "subset_sizes",
    "run_subsets",
    "subsets_table",
    "write_subset_outputs",
]


def fit_classifier(model: SoftMoEClassifier, X: torch.Tensor, y: torch.Tensor, epochs: int = 60,
                   batch_size: int = 64, lr: float = 1e-3, random_state: int = 0) -> list[float]:
    """Cross-entropy training with Adam (the paper's Section 4.2: Adam, lr 1e-3, batch 256).

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
    res = fit(model, lambda b: torch.nn.functional.cross_entropy(model(b.x), b.y),
              ShuffledBatches(X, y, batch_size, torch_generator(random_state)), epochs=epochs, optimizer="adam", lr=lr)
    return [h["train_loss"] for h in res.history]


#: Validation part carved out of the training images by ``split="val"`` (digits: 25%; Fashion-MNIST:
#: 10,000 of the 60,000 training images), stratified, by :func:`moestat.data.images.load_dataset`.
VAL_FRACTIONS = {"digits": 0.25, "fashion-mnist": 1 / 6}


def load_image_tokens(dataset: str, *, arch: str = "patch", patch: int = 4, split: str = "test", split_seed: int = 0,
                      data_path: str | os.PathLike | None = None):
    """Train and evaluation images of ``dataset`` for the subset experiment, as model inputs.

    The images come from :func:`moestat.data.images.load_dataset` (its one documented split: for
    digits a stratified 20% test split drawn with ``split_seed``; for Fashion-MNIST the official
    60k/10k split).  With ``split="val"`` a stratified validation part (:data:`VAL_FRACTIONS`) is
    held out of the training images, with the same seed, and returned in place of the test split.

    Parameters
    ----------
    dataset : {"digits", "fashion-mnist"}
    arch : {"patch", "conv"}
        ``patch``: non-overlapping ``patch x patch`` tokens ``[N, m, patch^2]``; ``conv``: images
        ``[N, H, W]`` (the conv stem makes the tokens).
    patch : int
    split : {"test", "val"}
    split_seed : int
    data_path : path-like, optional
        Folder of the Fashion-MNIST IDX files.

    Returns
    -------
    (X_train, y_train, X_eval, y_eval) : tensors (float32 inputs in [0, 1], int64 labels)
    """
    vf = VAL_FRACTIONS[dataset] if split == "val" else 0.0
    ds = load_dataset(dataset, data_path, val_fraction=vf, random_state=split_seed)
    H, W = ds.image_shape

    def inputs(X: np.ndarray) -> torch.Tensor:
        imgs = torch.from_numpy(X).reshape(-1, H, W)
        return patch_tokenize(imgs, patch) if arch == "patch" else imgs

    Xev, yev = (ds.X_val, ds.y_val) if split == "val" else (ds.X_test, ds.y_test)
    return inputs(ds.X_train), torch.from_numpy(ds.y_train), inputs(Xev), torch.from_numpy(yev)


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
        rand_seeds = spawn_int_seeds(random_state, n_random)
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
            rand = np.array([metric(subset_predictions(contrib, biases, random_subsets(X.shape[0], n, k, torch_generator(s)).to(X.device)))
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


def subset_sizes(n: int, k_fracs: Sequence[int] | None, ks: Sequence[int] | None) -> list[int]:
    """The subset sizes ``k`` evaluated for ``n`` experts: the given ``ks`` up to ``n``, else
    ``n / f`` for each ``f`` of ``k_fracs`` that divides ``n``."""
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
                split: str = "test", split_seed: int = 0) -> dict:
    """Train Soft MoE models for several ``n`` and evaluate Algorithm 1 (the paper's Sections 4.2-4.4).

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
        Puigcerver et al.'s normalised router (off in the paper).
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
    split_seed : int
        Seed of the digits test split and of the validation split (:func:`load_image_tokens`);
        0 gives the split every other digits run uses.

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
    dev = resolve_device(device)
    defaults = {"digits": (60, 64, 16.0, 4), "fashion-mnist": (5, 256, 4.0, 14), "norm": (None, 256, 16.0, None)}[dataset]
    epochs = defaults[0] if epochs is None else epochs
    batch_size = defaults[1] if batch_size is None else batch_size
    if budget_factor is None:
        budget_factor = 4.0 if arch == "conv" else defaults[2]
    patch = (defaults[3] if patch is None else patch) if arch == "patch" else None
    master = spawn_int_seeds(random_state, 3)
    if task == "classification":
        Xtr, ytr, Xte, yte = load_image_tokens(dataset, arch=arch, patch=patch, split=split, split_seed=split_seed,
                                               data_path=data_path)
    else:
        m, d = parse_tokenisation(tokens)
        if m * d != 10:
            raise ValueError(f"tokens {tokens!r} must multiply to 10")
        # validation: an independent fresh sample, from the third master seed
        Xte, yte = sample_norm_target(10000, torch_generator(master[2] if split == "val" else master[0]))
    Xte, yte = Xte.to(dev), yte.to(dev)
    rows, models = [], []
    seeds = spawn_int_seeds(master[1], model_seeds)
    jobs = [(int(n), si, s) for n in experts for si, s in enumerate(seeds)]
    for n, si, s in tqdm(jobs, disable=None if progress is None else not progress, desc=f"subsets {dataset}"):
        k_list = subset_sizes(n, k_fracs, ks)
        if not k_list:
            continue
        s_init, s_train, s_eval = spawn_int_seeds(s, 3)
        t0 = time.perf_counter()
        if task == "regression":
            model = SoftMoERegressor(m, d, n, budget_factor=budget_factor, random_state=s_init,
                                     normalize=normalize).to(dev)
            fit_regressor(model, steps, batch_size, lr, random_state=s_train, device=dev)
            base = evaluate_mse(model, Xte, yte)
            d_tok, hidden = d, model.layer.hidden
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
            d_tok, hidden = model.layer.d, model.layer.hidden
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
                  token_norm=bool(token_norm) if arch == "conv" else None, split=split,
                  split_seed=split_seed if task == "classification" else None)
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


def write_subset_outputs(result: dict, out: str | os.PathLike, echo: bool = True) -> None:
    """Write ``subsets.json`` and ``subsets_table.rst`` into ``out`` (created); echo the table on stdout."""
    out = ensure_writable_dir(out)
    table = subsets_table(result)
    atomic_write_json(out / "subsets.json", {**result, "table": table})
    reg = result["config"]["dataset"] == "norm"
    name = "MSE" if reg else "acc"
    def cell(key: str, digits: int):  # mean +- sd over model seeds; "(1 seed)" for one
        return lambda r: mean_sd(r[key], r[key + "_sd"], r["models"], digits, pm="+-")

    shown = {"full": 4, "alg1": 4, "random_mean": 4, "pct_retained": 1, "z": 1}
    table_text = [{**r, **{f"{k}_text": cell(k, d)(r) for k, d in shown.items()}} for r in table]
    cols = [("experts", "n_experts"), ("k", "k"), (f"full {name}", "full_text"),
            (f"Alg.1 {name}", "alg1_text"), (f"random {name}", "random_mean_text"),
            ("oracle", "{oracle:.4f}"), ("% retained" + (" (R2)" if reg else ""), "pct_retained_text"),
            ("random % retained", "{random_pct_retained:.1f}"), ("z", "z_text"),
            ("C_sum share", "{csum_share:.3f}"), ("evals saved", "{evals_saved:.3f}")]
    cfg = result["config"]
    what = f"dataset {cfg['dataset']}" + (f", arch {cfg.get('arch')}" if cfg.get("arch") else "") + \
        f", split {cfg.get('split', 'test')}, {cfg['model_seeds']} model(s) per number of experts, evaluated on {cfg['n_test']} points"
    text = what + "\n\n" + rst_table(table_text, cols)
    per = [("experts", "n_experts"), ("k", "k"), ("seed", "seed_index"), ("full", "{full:.4f}"), ("Alg.1", "{alg1:.4f}"),
           ("random", "{random_mean:.4f} +- {random_sd:.4f}"), ("oracle", "{oracle:.4f}"), ("% retained", "{pct_retained:.1f}"),
           ("z", "{z:.1f}")]
    per_rows = [{**r, "oracle": float("nan") if r["oracle"] is None else r["oracle"]} for r in result["rows"]]
    text += "\nPer model seed:\n\n" + rst_table(per_rows, per)
    atomic_write_text(out / "subsets_table.rst", text)
    if echo:
        sys.stdout.write(text)
