"""The selection study: P(k_hat = k*) against n for DSC, AIC, BIC and ICL, resumable.

For every sample size ``n`` and replicate ``r`` the data come from the rates sweep's data stream
(``SeedSequence(seed, spawn_key=(n, r, 0))``, :func:`moestat.rates.sweep.replicate_streams`: the
same data as a ``moestat rates`` run with the same seed); every fit with ``k = 1..max(K_bar)``
experts has its own start streams ``SeedSequence(seed, spawn_key=(n, r, 10 + k, s))`` for start
``s``, so no result depends on how replicates are grouped.  The fits are shared by every ``K_bar``:
``K_bar`` selects by DSC from the dendrogram of the ``K_bar``-expert fit, and by AIC/BIC/ICL among
the fits ``k = 1..K_bar``.

Work is done in units of ``(n, chunk of replicates)``, each appended as one JSON line per
replicate to ``records.jsonl`` (written, flushed and fsynced before the next unit starts); a torn
last line (a kill mid-write) is ignored on reading and cut before the next append, and
``resume`` recomputes only the missing ``(n, replicate)``.  ``config.json`` pins the model
settings (scenario, ``K_bar``, starts, seed, EM settings); a folder of other settings is refused.
The grid (``n``, replicates) and the chunk may change on ``resume``: a study grows by new sizes or
replicates and reuses every record it has (records outside the requested grid stay on disk and are
left out of the summary).

Each record keeps, per ``K_bar``: the status of every fit it uses, the picks of the criteria --
``DSC`` from the dendrogram with masses at the mean of the inputs, ``DSC0`` from the paper's rule
(masses at ``x = 0``; :func:`~moestat.selection.dendrogram.build_dendrogram`), AIC, BIC, ICL --,
the DSC path (heights, average log-likelihoods), the Voronoi loss D1 of the merged measure at
``k*`` atoms (the ``DSC`` tree) and D2 of the unmerged fit (Nguyen, Nguyen & Ho 2023), plus the
unit's process (core) time and wall time shared equally by its replicates.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from moestat.selection.criteria import (
    CONVERGED,
    dsc_path,
    fit_ladder,
    information_criteria,
    pick,
)
from moestat.selection.dendrogram import build_dendrogram
from moestat.data.gaussian_scenarios import gaussian_voronoi, model1_scenario, model1_truth
from moestat.data.scenario_files import load_scenario
from moestat.rates.backends import execute
from moestat.selection.summary import format_table, summarise, write_figures, write_summary
from moestat.threads import limit_threads

__all__ = ["SelectConfig", "SelectionError", "run_study", "read_records", "SCENARIOS"]

SCENARIOS = ("model1",)


class SelectionError(RuntimeError):
    """The study cannot select: e.g. no over-fitted fit of a (K_bar, n) cell converged."""


@dataclass(frozen=True)
class SelectConfig:
    """Settings of one selection study (all recorded in ``config.json``).

    Parameters
    ----------
    scenario : str
        ``"model1"`` (model 1 of Nguyen, Nguyen & Ho 2023, ``k* = 2``) or the path of a scenario
        file (TOML, or ``file.py:function``; :mod:`moestat.data.scenario_files`) that draws y from a
        softmax-gated Gaussian MoE with a linear gate score and linear experts (``[noise] model =
        "mixture"``, a variance per atom): its atoms are the truth, ``k*`` their number.  The file's
        SHA-256 is pinned in ``config.json`` with the other settings.
    k_bars : tuple of int
        Over-fitted numbers of experts; each must exceed ``k*``.
    ns : tuple of int
        Sample sizes (at least 20 each).
    replicates : int
    seed : int
    n_starts : int
        Starts per fit (near the truth for ``k >= k*``, random partitions below).
    chunk : int
        Replicates per unit of work (one batched fit per ``k``).
    init_scale, max_iter : float, int
        Noise of the near-truth starts; EM iterations before the Newton polish.
    """

    scenario: str = "model1"
    k_bars: tuple = (3, 4, 5)
    ns: tuple = (400, 2000, 10000)
    replicates: int = 40
    seed: int = 0
    n_starts: int = 1
    chunk: int = 10
    init_scale: float = 0.1
    max_iter: int = 1000
    version: int = field(default=1)
    #: set from the scenario file (its content identifies the study), never given
    scenario_sha256: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "k_bars", tuple(int(k) for k in self.k_bars))
        object.__setattr__(self, "ns", tuple(int(n) for n in self.ns))
        if self.scenario not in SCENARIOS:
            object.__setattr__(self, "scenario_sha256", _check_scenario_file(self.scenario))
        k_star = self.truth().n_atoms
        if not self.k_bars:
            raise ValueError("give at least one K_bar")
        for k in self.k_bars:
            if k <= k_star:
                raise ValueError(f"K_bar = {k} <= k* = {k_star}: the dendrogram needs an over-fitted fit (K_bar > k*)")
        if len(set(self.k_bars)) != len(self.k_bars) or len(set(self.ns)) != len(self.ns):
            raise ValueError("K_bar and n values must not repeat")
        if not self.ns or min(self.ns) < 20:
            raise ValueError(f"every n must be at least 20, got {list(self.ns)}")
        for nm in ("replicates", "n_starts", "chunk", "max_iter"):
            if int(getattr(self, nm)) < 1:
                raise ValueError(f"{nm} must be a positive integer, got {getattr(self, nm)!r}")
        if not (np.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")

    def scenario_object(self, k_fit: int | None = None):
        """The scenario whose ``sample(n, rng)`` draws the data (``k_fit`` is unused by a file's)."""
        if self.scenario not in SCENARIOS:
            return load_scenario(self.scenario)
        return model1_scenario("over", k_fit or max(self.k_bars))

    def truth(self):
        if self.scenario not in SCENARIOS:
            return self.scenario_object().truth
        return model1_truth()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["k_bars"], d["ns"] = list(self.k_bars), list(self.ns)
        return d

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _check_scenario_file(spec: str) -> str:
    """Load a scenario file, check that selection can fit its model; return its SHA-256."""
    path = Path(spec.rsplit(":", 1)[0]) if ".py:" in spec else Path(spec)
    if not path.is_file():
        raise ValueError(f"scenario must be model1 or a scenario file (TOML or file.py:function), got {spec!r}: "
                         "no such file")
    sc = load_scenario(spec)
    model = getattr(sc, "model", None)
    if not getattr(sc, "likelihood", False) or model is None or not model.is_linear_softmax:
        what = model.describe() if model is not None else "a least-squares regression scenario"
        raise ValueError(f"scenario {spec}: selection fits softmax-gated Gaussian MoEs with a linear gate and linear "
                         f"experts drawn from the mixture ([noise] model = \"mixture\"); this file is {what}")
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the store ---------------------------------------------------------------------------------
def read_records(path: str | os.PathLike) -> list[dict]:
    """The complete lines of ``records.jsonl`` (a torn last line is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1 or all(not x.strip() for x in lines[i + 1:]):
                continue  # the last line, torn by a kill
            raise ValueError(f"{path}: line {i + 1} is not JSON; the file is damaged") from None
    return out


def _cut_torn_tail(path: Path) -> None:
    if path.exists():
        text = path.read_text()
        if text and not text.endswith("\n"):
            path.write_text(text[: text.rfind("\n") + 1])


def _append(path: Path, records: list[dict]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        fh.flush()
        os.fsync(fh.fileno())


# Every record is one (n, replicate) with its own streams, so these may change between runs of
# one folder: a resumed study can grow its grid (more n, more replicates) and reuse what it has.
_GRID = ("ns", "replicates", "chunk")


def _model_settings(config_dict: dict) -> dict:
    # a scenario file is identified by its content (the same file under another path resumes)
    drop = _GRID + (("scenario",) if config_dict.get("scenario_sha256") else ())
    return {k: v for k, v in config_dict.items() if k not in drop}


def same_model_settings(recorded: dict, config: SelectConfig) -> bool:
    """Whether a folder's recorded ``config`` may be resumed by ``config`` (only the grid differs).
    A setting added to :class:`SelectConfig` after the folder was written counts at its default."""
    defaults = {f.name: f.default for f in fields(SelectConfig)}
    return _model_settings({**defaults, **recorded}) == _model_settings(config.to_dict())


def _check_folder(out: Path, config: SelectConfig, resume: bool) -> None:
    cfg = out / "config.json"
    if cfg.exists():
        old = json.loads(cfg.read_text())
        if not same_model_settings(old.get("config", {}), config):
            raise ValueError(f"{out} holds a study of other settings (config.json); choose another --out")
        if not resume:
            raise ValueError(f"{out} already holds this study; pass --resume to continue it")
    tmp = cfg.with_name(cfg.name + ".tmp")
    tmp.write_text(json.dumps({"hash": config.hash(), "config": config.to_dict()}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, cfg)


# ---- one unit --------------------------------------------------------------------------------
def _data(config: SelectConfig, n: int, reps: list[int]):
    sc = config.scenario_object()
    XY = [sc.sample(n, np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(n, r, 0)))) for r in reps]
    return np.stack([a for a, _ in XY]), np.stack([b for _, b in XY])


def run_unit(config: SelectConfig, n: int, reps: list[int]) -> list[dict]:
    """Fit ``k = 1..max(K_bar)`` to the replicates ``reps`` at ``n`` and score every ``K_bar``."""
    t0, w0 = time.process_time(), time.perf_counter()
    truth = config.truth()
    k_star = truth.n_atoms
    X, Y = _data(config, n, reps)
    fits = fit_ladder(X, Y, range(1, max(config.k_bars) + 1), truth=truth, n_starts=config.n_starts,
                      init_scale=config.init_scale, max_iter=config.max_iter,
                      streams=lambda r, k, s: np.random.SeedSequence(config.seed, spawn_key=(n, reps[r], 10 + k, s)))
    records = []
    for r, rep in enumerate(reps):
        ic = {k: {c: float(v) for c, v in information_criteria(X[r], Y[r], f["params"][r]).items()}
              for k, f in fits.items()}
        rec = {"n": n, "replicate": rep, "status": {str(k): f["status"][r] for k, f in fits.items()},
               "loglik": {str(k): float(f["loglik"][r]) for k, f in fits.items()}, "per_kbar": {}}
        for K in config.k_bars:
            G = fits[K]["params"][r]
            ok_fit = fits[K]["status"][r] in CONVERGED
            ok_all = all(fits[k]["status"][r] in CONVERGED for k in range(1, K + 1))
            entry = {"dsc_converged": ok_fit, "ic_converged": ok_all}
            for c in ("AIC", "BIC", "ICL"):
                entry[c] = pick({k: ic[k][c] for k in range(1, K + 1)})
            if np.isfinite(G.beta0).all() and np.isfinite(G.eta).all():
                dend = build_dendrogram(G, "gaussian", center=X[r].mean(0))
                path = dsc_path(dend, X[r], Y[r])
                path0 = dsc_path(build_dendrogram(G, "gaussian"), X[r], Y[r])
                entry.update(DSC=path["k_hat"], DSC0=path0["k_hat"], heights=path["height"].tolist(),
                             mean_loglik=path["mean_loglik"].tolist(), heights0=path0["height"].tolist(),
                             linkage=dend.linkage.tolist(),
                             D1_merged=float(gaussian_voronoi(dend.level(k_star), truth, "D1")["voronoi"][0]),
                             D2_over=float(gaussian_voronoi(G, truth, "D2")["voronoi"][0]))
            else:
                entry.update(DSC=None, DSC0=None, D1_merged=None, D2_over=None)
            rec["per_kbar"][str(K)] = entry
        records.append(rec)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    for rec in records:
        rec["cpu_s"], rec["wall_s"] = cpu / len(reps), wall / len(reps)
    return records


def units(config: SelectConfig, done: set[tuple[int, int]]) -> list[tuple[int, list[int]]]:
    """The ``(n, replicates)`` still to do, in chunks of ``config.chunk``, the largest ``n`` first (an
    interrupted study then has its most telling cell)."""
    out = []
    for n in sorted(config.ns, reverse=True):
        todo = [r for r in range(config.replicates) if (n, r) not in done]
        out += [(n, todo[i : i + config.chunk]) for i in range(0, len(todo), config.chunk)]
    return out


def _run_unit_in_worker(unit: tuple[SelectConfig, int, list[int], int | None]) -> list[dict]:
    """One unit ``(config, n, replicates, threads)`` in a joblib worker (``threads``: its torch/BLAS
    threads, ``None`` in the calling process, which has its own)."""
    config, n, reps, threads = unit
    if threads is not None:
        limit_threads(threads)
    return run_unit(config, n, reps)


def run_study(config: SelectConfig, out: str | os.PathLike, resume: bool = False, progress=None,
              n_jobs: int = 1, threads: int | None = None) -> list[dict]:
    """Run (or continue) the study in ``out``; returns every record (see the module docstring).

    ``n_jobs`` joblib workers fit the units (:func:`moestat.rates.backends.execute`, the rates
    door's executor, ``threads`` torch/BLAS threads each); the calling process appends each unit's
    records as it finishes.  Every fit draws from its own ``(n, replicate, k, start)`` stream, so the
    records do not depend on ``n_jobs`` (only the order of the lines in ``records.jsonl`` and the
    times do).

    Raises
    ------
    ValueError
        ``out`` holds another study, or this one without ``resume``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _check_folder(out, config, resume)
    path = out / "records.jsonl"
    _cut_torn_tail(path)
    done = {(int(r["n"]), int(r["replicate"])) for r in read_records(path)}
    todo = units(config, done)
    finished = [0]

    def on_result(unit, records):
        _append(path, records)
        finished[0] += 1
        if progress is not None:
            progress(finished[0], len(todo), unit[1], unit[2])

    execute(_run_unit_in_worker, [(config, n, reps, threads if n_jobs > 1 else None) for n, reps in todo], on_result,
            n_jobs=n_jobs, progress=False, total_fits=sum(len(reps) for _, reps in todo))
    records = read_records(path)
    keys = [(int(r["n"]), int(r["replicate"])) for r in records]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path} holds a (n, replicate) twice; the file was written by two runs at once")
    # Records of a larger grid run earlier in this folder stay on disk but are not this study's.
    records = [r for r in records if int(r["n"]) in config.ns and int(r["replicate"]) < config.replicates]
    return sorted(records, key=lambda r: (r["n"], r["replicate"]))


def check_selectable(records: list[dict], config: SelectConfig) -> None:
    """Raise :class:`SelectionError` when a ``(K_bar, n)`` cell has no converged over-fitted fit."""
    for K in config.k_bars:
        for n in config.ns:
            cell = [r["per_kbar"][str(K)] for r in records if r["n"] == n]
            if cell and not any(e["dsc_converged"] for e in cell):
                statuses = sorted({r["status"][str(K)] for r in records if r["n"] == n})
                raise SelectionError(f"no fit with K_bar = {K} converged at n = {n} ({len(cell)} replicates, "
                                     f"statuses {', '.join(statuses)}): nothing to select from")


__all__ += ["run_unit", "units", "check_selectable", "same_model_settings"]


def run_select(config: SelectConfig, out: str | os.PathLike, resume: bool = False, verbose: bool = True,
               n_jobs: int = 1, threads: int | None = None) -> dict:
    """Run the study, check that every cell can select, write ``summary.csv/json`` and the figures.

    ``n_jobs`` and ``threads``: see :func:`run_study`.  Returns the summary
    (:func:`moestat.selection.summary.summarise`) with ``"files"`` added; its ``time`` has
    ``wall_s_this_run`` (this call's fitting, resumed or not) beside ``wall_s_total`` (the units'
    wall times summed over every run that wrote the records).
    """
    def progress(i, m, n, reps):
        if verbose:
            print(f"unit {i}/{m}: n = {n}, replicates {reps[0]}..{reps[-1]}", flush=True)

    w0 = time.perf_counter()
    records = run_study(config, out, resume, progress, n_jobs=n_jobs, threads=threads)
    check_selectable(records, config)
    summary = summarise(records, config)
    summary["time"]["wall_s_this_run"] = time.perf_counter() - w0
    files = write_summary(summary, out, config) + write_figures(summary, records, out, config)
    if verbose:
        print(format_table(summary))
    summary["files"] = [str(f) for f in files]
    return summary


__all__ += ["run_select"]
