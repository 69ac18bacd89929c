"""Toy-problem runs of Krishnamurthy (2023), Ch. 3: ``moestat toy classify|regress``.

Examples
--------
Reproduce the layout of Tables 3.1/3.2 (6-class toy, 3 and 5 experts, 10 runs each)::

    moestat toy classify --method all --experts 3,5 --runs 10 --out results/toy

Recover the rotation ``R`` and scaling ``S`` of the regression toy::

    moestat toy regress --method output_mixture,stochastic,em --runs 5 --out results/toy_reg

Every command writes, under ``--out``: ``<task>_table.md`` (accuracy +- std over runs, I(E;Y),
H_s, H_u in the thesis's column order), ``<task>_results.json`` (every run's metrics) and figures
(PDF + PNG): per-expert decision regions with the gate's partition shaded and misclassified test
points marked (thesis Figs. 3.2-3.7), or the learned expert matrices against ``R`` and ``S``.

The library functions behind the command (:func:`run_classification`, :func:`run_regression`,
:func:`toy_model`, :func:`plot_decision_regions`, :func:`plot_expert_matrices`) are usable from
Python with the same arguments.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from moestat.data.toy import ROTATION, SCALING, ToyData, make_toy_classification, make_toy_regression
from moestat.io import atomic_savefig, atomic_write_json, atomic_write_text, ensure_writable_dir
from moestat.nn.layer import MoELayer
from moestat.model.gates import canonical_name
from moestat.nn.methods import METHODS, Method, get_method, train_moe
from moestat.nn.predict import evaluate_moe, predict_moe
from moestat.plotting import mean_sd

__all__ = [
    "CLASSIFY_METHODS",
    "REGRESS_METHODS",
    "parse_methods",
    "toy_model",
    "run_classification",
    "run_regression",
    "format_table",
    "write_toy_outputs",
    "plot_decision_regions",
    "plot_expert_matrices",
]

#: Methods run by ``--method all`` on the 6-class toy.
CLASSIFY_METHODS = (
    "output_mixture", "stochastic", "top1", "top2", "pre_softmax", "em",
    "dual_temperature", "dual_temperature_stochastic", "loudest_expert", "peeking_expert",
    "attentive", "attentive_distilled", "expert_loss",
    "output_mixture_importance", "top2_importance", "output_mixture_similarity",
)
#: Methods run by ``--method all`` on the regression toy (the thesis compares these three).
REGRESS_METHODS = ("output_mixture", "stochastic", "em")
#: Hidden width of the attentive gate's body (a linear attentive gate cannot be distilled, see docs).
ATTENTIVE_GATE_HIDDEN = 16


def parse_methods(text: str, task: str) -> list[str]:
    """The thesis methods named in ``text``: ``all`` (:data:`CLASSIFY_METHODS` or
    :data:`REGRESS_METHODS`) or a comma list of names of :data:`moestat.nn.methods.METHODS`
    (``-`` and ``_`` interchangeable: ``output-mixture`` is ``output_mixture``).

    Raises
    ------
    ValueError
        An unknown name, or a method that needs class distributions on the regression toy.
    """
    if text.strip() == "all":
        return list(CLASSIFY_METHODS if task == "classification" else REGRESS_METHODS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--method: give a method name, a comma-separated list or 'all'")
    out = []
    for nm in names:
        try:
            nm = canonical_name(nm, tuple(METHODS))
        except ValueError:
            raise ValueError(f"--method: unknown method {nm!r}; expected 'all' or one of {', '.join(sorted(METHODS))}") from None
        if task == "regression" and METHODS[nm].gate == "entropy":
            raise ValueError(f"--method: {nm!r} needs class distributions and cannot run on the regression toy")
        out.append(nm)
    return out


def toy_model(method: "str | Method", n_experts: int, task: str, random_state) -> MoELayer:
    """The toy architecture of Krishnamurthy (2023), Sec. 3.1: linear experts and a linear softmax gate.

    Regression experts are bias-free 2x2 maps (the gate keeps its bias).  Attentive methods get a
    gate body with :data:`ATTENTIVE_GATE_HIDDEN` units and that attention width (the thesis never
    runs them on the toy; with a purely linear body the distilled router cannot represent the
    attentive partition, which is quadratic in ``x``).
    """
    m = get_method(method)
    att = m.gate == "attentive"
    if task == "classification":
        return MoELayer(2, 6, n_experts, gate_type="attentive" if att else "router",
                   gate_hidden=(ATTENTIVE_GATE_HIDDEN,) if att else (), attention_dim=ATTENTIVE_GATE_HIDDEN,
                   random_state=random_state)
    return MoELayer(2, 2, n_experts, task="regression", expert_bias=False,
               gate_type="attentive" if att else "router",
               gate_hidden=(ATTENTIVE_GATE_HIDDEN,) if att else (), attention_dim=ATTENTIVE_GATE_HIDDEN,
               random_state=random_state)


def _run_streams(seed: int, run: int) -> list[np.random.SeedSequence]:
    """``[init, train]`` streams of run ``run``: common random numbers, i.e. run ``r`` uses the same
    initialisation and shuffling streams for every method, so method differences are not seed noise."""
    return np.random.SeedSequence(entropy=seed, spawn_key=(1, run)).spawn(2)


def _progress(total: int, desc: str, progress: bool | None):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=None if progress is None else not progress, leave=False)


def run_classification(
    methods: Sequence[str],
    experts: Sequence[int],
    runs: int,
    *,
    epochs: int = 40,
    lr: float = 0.01,
    batch_size: int = 64,
    optimizer: str = "rmsprop",
    seed: int = 0,
    keep_models: bool = False,
    progress: bool | None = None,
) -> dict:
    """Train every (method, number of experts, run) on the 6-class toy and evaluate on its test set.

    Returns
    -------
    dict
        ``data`` (the :class:`~moestat.data.toy.ToyData`), ``rows`` (one dict per run with the
        metrics of :func:`~moestat.nn.predict.evaluate_moe` plus ``method``, ``experts``, ``run``,
        ``seconds``) and, with ``keep_models``, ``models[(method, M)]`` = run-0 trained model.
    """
    methods = [get_method(m).name for m in methods]
    data = make_toy_classification(random_state=np.random.SeedSequence(entropy=seed, spawn_key=(0,)))
    rows, models = [], {}
    bar = _progress(len(methods) * len(experts) * runs, "toy classify", progress)
    for name, M, r in itertools.product(methods, experts, range(runs)):
        init_ss, train_ss = _run_streams(seed, r)
        model = toy_model(name, M, "classification", init_ss)
        t0 = time.perf_counter()
        res = train_moe(model, data, name, epochs=epochs, lr=lr, batch_size=batch_size,
                        optimizer=optimizer, random_state=train_ss)
        secs = time.perf_counter() - t0
        ev = evaluate_moe(res.model, data.x_test, data.y_test, name)
        rows.append({"method": name, "experts": M, "run": r, "seconds": secs, **ev})
        if keep_models and r == 0:
            models[(name, M)] = res.model
        bar.update(1)
    bar.close()
    return {"data": data, "rows": rows, "models": models}


def _match_RS(A: np.ndarray) -> tuple[int, int, float, float]:
    """Expert indices closest to R and S (best assignment) and their Frobenius errors."""
    best = None
    for i, j in itertools.permutations(range(A.shape[0]), 2):
        eR, eS = np.linalg.norm(A[i] - ROTATION), np.linalg.norm(A[j] - SCALING)
        if best is None or eR + eS < best[2] + best[3]:
            best = (i, j, float(eR), float(eS))
    return best


def run_regression(
    methods: Sequence[str],
    runs: int,
    *,
    experts: int = 2,
    epochs: int = 40,
    lr: float = 0.01,
    batch_size: int = 64,
    optimizer: str = "rmsprop",
    seed: int = 0,
    keep_models: bool = False,
    progress: bool | None = None,
) -> dict:
    """Train each method on the rotation/scale toy; report Frobenius errors of the experts vs ``R``, ``S``.

    Returns
    -------
    dict
        ``data``, ``rows`` (per run: ``err_R``, ``err_S``, ``matrices``, ``mse``, ``I_EY`` between
        the selected expert and the latent regime, ...) and optionally ``models``.
    """
    if experts < 2:
        raise ValueError("the regression toy needs at least 2 experts")
    methods = [get_method(m).name for m in methods]
    data = make_toy_regression(random_state=np.random.SeedSequence(entropy=seed, spawn_key=(0,)))
    rows, models = [], {}
    bar = _progress(len(methods) * runs, "toy regress", progress)
    for name, r in itertools.product(methods, range(runs)):
        init_ss, train_ss = _run_streams(seed, r)
        model = toy_model(name, experts, "regression", init_ss)
        t0 = time.perf_counter()
        res = train_moe(model, data, name, epochs=epochs, lr=lr, batch_size=batch_size,
                        optimizer=optimizer, random_state=train_ss)
        secs = time.perf_counter() - t0
        ev = evaluate_moe(res.model, data.x_test, data.y_test, name, labels=data.s_test)
        A = res.model.expert_matrices().double().numpy()
        i, j, eR, eS = _match_RS(A)
        rows.append({"method": name, "experts": experts, "run": r, "seconds": secs, **ev,
                     "err_R": eR, "err_S": eS, "expert_R": i, "expert_S": j, "matrices": A.tolist()})
        if keep_models and r == 0:
            models[(name, experts)] = res.model
        bar.update(1)
    bar.close()
    return {"data": data, "rows": rows, "models": models}


def _ms(a: np.ndarray, digits: int) -> str:
    """``mean ± sd`` over runs; ``mean (1 seed)`` for a single run (no ``± 0``)."""
    return mean_sd(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None, len(a), digits)


def format_table(rows: list[dict], task: str) -> str:
    """Markdown table in the thesis's layout: one line per (method, experts), means over runs.

    Classification columns: ``Acc (%) mean +- std | I(E;Y) | H_s | H_u | H_s(gate) | runs | s/run``;
    regression: ``||A_R - R||_F | ||A_S - S||_F | test MSE | I(E;S) | H_s | H_u | runs | s/run``
    (means +- std over runs).
    """
    keys = list(dict.fromkeys((r["method"], r["experts"]) for r in rows))
    if task == "classification":
        lines = ["| Model | M | Acc (%) | I(E;Y) | H_s | H_u | H_s(gate) | runs | s/run |",
                 "|---|---|---|---|---|---|---|---|---|"]
    else:
        lines = ["| Model | M | err R (Frobenius) | err S (Frobenius) | test MSE | I(E;S) | H_s | H_u | runs | s/run |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
    for name, M in keys:
        rs = [r for r in rows if r["method"] == name and r["experts"] == M]
        f = lambda k: np.array([r[k] for r in rs], dtype=float)  # noqa: E731
        if task == "classification":
            acc = f("accuracy")
            lines.append(
                f"| {name} | {M} | {_ms(acc, 2)} | "
                f"{f('I_EY').mean():.3f} | {f('H_s').mean():.3f} | {f('H_u').mean():.3f} | "
                f"{f('H_s_gate').mean():.3f} | {len(rs)} | {f('seconds').mean():.1f} |")
        else:
            eR, eS = f("err_R"), f("err_S")
            lines.append(
                f"| {name} | {M} | {_ms(eR, 4)} | {_ms(eS, 4)} | "
                f"{f('mse').mean():.2e} | {f('I_EY').mean():.3f} | {f('H_s').mean():.3f} | "
                f"{f('H_u').mean():.3f} | {len(rs)} | {f('seconds').mean():.1f} |")
    return "\n".join(lines) + "\n"


def write_toy_outputs(res: dict, task: str, out: str | Path, config: dict, figures: bool = True) -> str:
    """Write ``<task>_results.json``, ``<task>_table.md`` and (``figures``) the figures into ``out``.

    Parameters
    ----------
    res : dict
        What :func:`run_classification` / :func:`run_regression` returned (with ``keep_models``
        for the decision-region figures).
    task : {"classification", "regression"}
    out : path-like
        Output folder (created).
    config : dict
        Settings recorded next to the rows.
    figures : bool

    Returns
    -------
    str
        The Markdown table.
    """
    out = ensure_writable_dir(out)
    stem = "classify" if task == "classification" else "regress"
    table = format_table(res["rows"], task)
    atomic_write_json(out / f"{stem}_results.json", {"config": config, "rows": res["rows"]})
    atomic_write_text(out / f"{stem}_table.md", table)
    if figures:
        if task == "classification":
            for (name, M), model in res["models"].items():
                plot_decision_regions(model, name, res["data"], out / f"regions_{name}_M{M}",
                                      title=f"{name.replace('_', ' ')}: decision regions of each of {M} experts (run 0)")
        else:
            plot_expert_matrices(res["rows"], out / "expert_matrices")
    return table


def plot_decision_regions(model: MoELayer, method: "str | Method", data: ToyData, path: str | Path, title: str | None = None) -> None:
    """Per-expert decision regions on the 2-D toy (thesis Figs. 3.2-3.7), saved as PDF and PNG.

    Panel ``i``: the background colour is expert ``i``'s predicted class everywhere, drawn strong
    inside the region the gate routes to expert ``i`` and faint elsewhere; the test points routed
    to expert ``i`` are shown in their class colour and misclassified ones (by the MoE) as red
    crosses.  ``path`` is the file name without suffix.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    x, y = data.x_test, data.y_test
    lo, hi = np.vstack([data.x_train, x]).min(0) - 1.0, np.vstack([data.x_train, x]).max(0) + 1.0
    g0, g1 = np.linspace(lo[0], hi[0], 220), np.linspace(lo[1], hi[1], 220)
    G0, G1 = np.meshgrid(g0, g1)
    grid = np.c_[G0.ravel(), G1.ravel()]
    pg, pt = predict_moe(model, grid, method), predict_moe(model, x, method)
    cols = np.array([to_rgba(c) for c in plt.get_cmap("tab10").colors[: data.n_outputs]])
    M = model.n_experts
    fig, axes = plt.subplots(1, M, figsize=(1.45 * M + 1.3, 1.95), squeeze=False)
    wrong = pt.y_pred != y
    for i, ax in enumerate(axes[0]):
        img = cols[pg.expert_predictions[:, i]].copy()
        img[:, 3] = np.where(pg.selected == i, 0.55, 0.08)
        ax.imshow(img.reshape(len(g1), len(g0), 4), origin="lower", extent=(lo[0], hi[0], lo[1], hi[1]),
                  aspect="auto", interpolation="nearest")
        sel = pt.selected == i
        ax.scatter(x[sel & ~wrong, 0], x[sel & ~wrong, 1], s=2, c=cols[y[sel & ~wrong]], linewidths=0)
        ax.scatter(x[sel & wrong, 0], x[sel & wrong, 1], s=9, c="red", marker="x", linewidths=0.6)
        ax.set_title(f"expert {i + 1} ({int(sel.sum())} test points)", fontsize=6)
        ax.set_xticks([]), ax.set_yticks([])
    # the legend says what the colours and crosses are (a reader cannot guess the class colours)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=cols[c], alpha=0.55, label=f"class {c + 1}") for c in range(data.n_outputs)]
    handles += [Line2D([], [], color="red", marker="x", ls="none", ms=4, mew=0.8, label="misclassified"),
                Patch(facecolor="0.5", alpha=0.55, label="routed here"),
                Patch(facecolor="0.5", alpha=0.08, label="routed elsewhere")]
    fig.legend(handles=handles, loc="center right", fontsize=5, frameon=False, handlelength=1.2, borderaxespad=0.2)
    if title:
        fig.suptitle(title, fontsize=7)
    fig.tight_layout(pad=0.3, rect=(0, 0, 1 - 1.1 / fig.get_figwidth(), 1))
    for ext in (".pdf", ".png"):
        atomic_savefig(fig, Path(str(path) + ext), dpi=200)
    plt.close(fig)


def plot_expert_matrices(rows: list[dict], path: str | Path) -> None:
    """Learned 2x2 expert matrices of run 0 of each method against ``R`` and ``S`` (PDF + PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = [r for r in rows if r["run"] == 0]
    panels = [("true R", ROTATION), ("true S", SCALING)]
    for r in first:
        A = np.asarray(r["matrices"])
        name = r["method"].replace("_", " ")
        panels += [(f"{name}: expert near R", A[r["expert_R"]]), (f"{name}: expert near S", A[r["expert_S"]])]
    ncol = 2
    nrow = len(panels) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.3, 1.25 * nrow + 0.35), squeeze=False)
    im = None
    for ax, (t, A) in zip(axes.ravel(), panels):
        im = ax.imshow(A, cmap="coolwarm", vmin=-1, vmax=1)
        for (a, b), v in np.ndenumerate(A):
            ax.text(b, a, f"{v:.4f}", ha="center", va="center", fontsize=6)
        ax.set_title(t, fontsize=6)
        ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle("Expert matrices of run 0 against the true rotation R and scaling S", fontsize=7)
    fig.tight_layout(pad=0.3, rect=(0, 0, 0.8, 1 - 0.3 / fig.get_figheight()))  # room for the title
    if im is not None:
        cb = fig.colorbar(im, cax=fig.add_axes((0.82, 0.3, 0.025, 0.4)))
        cb.ax.tick_params(labelsize=5)
        cb.set_label("matrix entry", fontsize=6)
    for ext in (".pdf", ".png"):
        atomic_savefig(fig, Path(str(path) + ext), dpi=200)
    plt.close(fig)
