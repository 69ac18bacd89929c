"""The result store of a sweep: a long-format, append-only ``results.csv`` and ``provenance.json``.

Finished fits are appended one line per fit (:class:`ResultStore`); a kill loses at most the
unit in flight, a torn last line is skipped on reading and cut before the next append, and
``resume`` recomputes only missing ``(router, n, replicate)`` rows.  ``provenance.json`` records
the package version, git commit, full configuration (and its :func:`config_hash`), platform,
torch version/device and the timestamps of every run into the folder; :func:`check_resumable`
refuses a folder written by another configuration.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import numpy as np

from moestat.rates.config import RatesConfig

__all__ = [
    "LOSS_NAMES",
    "RESULT_COLUMNS",
    "ResultStore",
    "read_results",
    "write_provenance",
    "check_resumable",
    "config_hash",
]

#: Loss columns of ``results.csv`` (see :func:`moestat.rates.sweep.compute_losses`).
LOSS_NAMES = ("voronoi", "voronoi_direction", "param_single", "param_multi", "mass", "regression_l2")
#: All columns of ``results.csv``, in order.
RESULT_COLUMNS = (
    "scenario",
    "router",
    "setting",
    "n",
    "replicate",
    "seed",
    "estimator",
    "converged",
    "status",
    "n_iter",
    "objective",
    *LOSS_NAMES,
    "time",
)


def config_hash(config: RatesConfig) -> str:
    """SHA-256 of the result-determining fields (see :meth:`RatesConfig.result_fields`)."""
    blob = json.dumps(config.result_fields(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)  # round-trips exactly, so a resumed sweep compares bit for bit
    return str(v)


class ResultStore:
    """Long-format ``results.csv``: one line per finished fit, appended atomically.

    Parameters
    ----------
    path : path-like
        The CSV file (created with its header on first use).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def create(self) -> None:
        """Write the header if the file is new; otherwise drop a torn last line (see :meth:`repair`)."""
        from moestat.io import atomic_write_text

        if not self.path.exists():
            atomic_write_text(self.path, ",".join(RESULT_COLUMNS) + "\n")
        else:
            self.repair()

    def repair(self) -> bool:
        """Cut a partial last line left by a kill during an append (rewrites the file atomically).

        Without this, the next appended row would be glued to the torn fragment.  Returns True
        when something was cut.
        """
        from moestat.io import atomic_write_text

        text = self.path.read_text(encoding="utf-8")
        if text.endswith("\n") or not text:
            return False
        atomic_write_text(self.path, text[: text.rfind("\n") + 1])
        return True

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows, one ``write`` + ``fsync`` per row (see :func:`moestat.io.append_line`)."""
        from moestat.io import append_line

        for row in rows:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([_fmt(row[c]) for c in RESULT_COLUMNS])
            append_line(self.path, buf.getvalue())

    def read(self):
        """The results as a :class:`pandas.DataFrame` (see :func:`read_results`)."""
        return read_results(self.path)

    def done(self) -> set[tuple[str, int, int]]:
        """``(router, n, replicate)`` of every complete row."""
        df = self.read()
        return set(zip(df["router"], df["n"].astype(int), df["replicate"].astype(int)))


def read_results(path: str | os.PathLike):
    """Read ``results.csv`` into a DataFrame, skipping a torn last line and duplicate rows.

    A kill during an append can leave a partial last line (no newline, or too few fields);
    such lines are ignored.  If a unit was recomputed after a kill, the first copy of each
    ``(router, n, replicate)`` is kept (the copies are identical by construction).
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results file {path}")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not lines or lines[0].split(",") != list(RESULT_COLUMNS):
        raise ValueError(f"{path} is not a moestat results file (unexpected header)")
    complete = lines[1:-1] if not text.endswith("\n") else lines[1:]
    rows = []
    for rec in csv.reader(complete):
        if len(rec) == len(RESULT_COLUMNS):
            rows.append(rec)
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for c in ("n", "replicate", "seed", "n_iter"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    df["converged"] = df["converged"].map({"1": True, "0": False, "True": True, "False": False})
    for c in ("objective", *LOSS_NAMES, "time"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df = df.dropna(subset=["n", "replicate"]).drop_duplicates(subset=["router", "n", "replicate"], keep="first")
    df["n"] = df["n"].astype(int)
    df["replicate"] = df["replicate"].astype(int)
    return df.reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# provenance
# ----------------------------------------------------------------------------------------------
def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (the timestamps of ``provenance.json``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_provenance(out_dir: Path, config: RatesConfig, *, started: str, finished: str | None = None, previous: dict | None = None) -> dict:
    """Write ``provenance.json``: version, git commit, config (+ hash), platform, torch, timestamps.

    ``previous`` (a resumed sweep's old provenance) keeps the earlier runs in ``runs``.
    """
    import torch

    from moestat import __version__
    from moestat.io import atomic_write_json

    runs = list(previous.get("runs", [])) if previous else []
    this_run = {"started": started, "finished": finished, "n_jobs": config.n_jobs, "backend": config.backend, "scheduler": config.scheduler}
    if runs and runs[-1].get("started") == started:
        runs[-1] = this_run
    else:
        runs.append(this_run)
    prov = {
        "package": "moestat",
        "version": __version__,
        "git_commit": _git_commit(),
        "config": config.to_dict(),
        "config_hash": config_hash(config),
        "platform": {
            "python": sys.version.split()[0],
            "system": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
        },
        "torch": {
            "version": torch.__version__,
            "device": config.device,
            "cuda_available": bool(torch.cuda.is_available()),
        },
        "numpy": np.__version__,
        "runs": runs,
    }
    atomic_write_json(out_dir / "provenance.json", prov)
    return prov


def check_resumable(out_dir: Path, config: RatesConfig, resume: bool) -> dict | None:
    """Refuse an output folder that belongs to another sweep; return its provenance on resume.

    Raises
    ------
    ValueError
        ``--out`` already holds results and ``resume`` is false, or its configuration differs.
    """
    prov_path = out_dir / "provenance.json"
    res_path = out_dir / "results.csv"
    if not resume:
        if res_path.exists():
            raise ValueError(f"--out {out_dir} already holds results.csv; pass --resume or choose an empty folder")
        return None
    if not prov_path.exists():
        if res_path.exists():
            raise ValueError(f"--resume: {out_dir} has results.csv but no provenance.json; cannot check its config")
        return None
    try:
        prev = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--resume: cannot read {prov_path}: {exc}") from None
    if prev.get("config_hash") != config_hash(config):
        old = prev.get("config", {})
        new = config.result_fields()
        diff = sorted(k for k in new if old.get(k) != (new[k] if not isinstance(new[k], tuple) else list(new[k])))
        raise ValueError(
            f"--resume: {out_dir} was written by a different config (differs in: {', '.join(diff) or 'unknown'})"
        )
    return prev
