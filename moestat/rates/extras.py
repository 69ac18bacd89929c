"""``extras.csv``: the optimum certificate and Theorem 5's per-cell quantities, beside ``results.csv``.

Written only when a sweep asks for them (``extra_starts > 0`` or ``cell_errors``), so the default
``results.csv`` and its columns never change.  One line per ``(router, n, replicate)``, appended in
the same callback as the ``results.csv`` rows (a kill between the two appends loses at most that
unit's extras; they are then NaN in the merged frame and the unit is not recomputed -- the
summary's counts say how many are missing).

Columns (:func:`extra_columns`):

``best_objective, best_start, n_starts, n_starts_converged, beaten``
    the certificate: the lowest objective over the near-truth start (``best_start = 0``) and the
    extra starts (``1..E``); ``beaten`` is 1 when an extra start reached an objective lower than
    the near-truth fit's by more than :data:`BEATEN_RTOL` (relative).
``best_<loss>``
    every loss of ``results.csv`` at the best-objective fit (the least-squares estimate the
    theorems speak of, as far as the starts can tell); for a scenario file also every loss it
    declares, as the last columns of the file (after the block columns, so that every earlier
    column keeps its place and its bootstrap stream; an ``extras.csv`` written before these
    columns existed is resumed with its own header, :meth:`ExtrasStore.create`).
``weighted_single, weighted_multi, beta1_radial, beta1_direction``
    :mod:`moestat.losses.cell_errors` at the near-truth fit.
the losses a scenario file declares (by their names)
    :mod:`moestat.losses.voronoi_spec` at the near-truth fit.
``alt_converged, alt_<loss>``
    start sensitivity (``alt_init_scale > 0``): every loss after a second near-truth fit whose start
    noise has the scale ``alt_init_scale`` (stream ``spawn_key=(n, replicate, 5)``).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from moestat.io import append_line, atomic_write_text
from moestat.rates.labels import LOSS_NAMES

__all__ = ["ALT_PREFIX", "BEATEN_RTOL", "CERTIFICATE_COLUMNS", "CELL_COLUMNS", "extra_columns", "legacy_columns", "ExtrasStore", "merge_extras", "certificate_summary"]

#: Relative margin by which an extra start must lower the objective to count as beating the
#: near-truth fit: far above the LM stopping tolerance on the objective (ftol = 1e-12 relative), far
#: below any difference between distinct local minima.
BEATEN_RTOL = 1e-6

KEY = ("router", "n", "replicate")
#: Prefix of the start-sensitivity columns (the same loss after a start with ``alt_init_scale``).
ALT_PREFIX = "alt_"
CERTIFICATE_COLUMNS = ("best_objective", "best_start", "n_starts", "n_starts_converged", "beaten")
CELL_COLUMNS = ("weighted_single", "weighted_multi", "beta1_radial", "beta1_direction")


def extra_columns(extra_starts: int, cell_errors: bool, declared: Sequence[str] = (), alt_start: bool = False,
                  blocks: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns of ``extras.csv`` for a configuration (empty: no file).

    ``declared``: the losses a scenario file declares (:func:`moestat.rates.resolve.declared_losses`);
    ``alt_start``: the start-sensitivity fit's ``alt_converged`` and ``alt_<loss>`` for every loss;
    ``blocks``: the over-fitted Gaussian MoE's per-block errors (:func:`moestat.rates.gmoe_blocks.block_columns`).
    """
    cols: list[str] = list(declared)
    if alt_start:
        cols += ["alt_converged", *(f"{ALT_PREFIX}{c}" for c in (*LOSS_NAMES, *declared))]
    if extra_starts > 0:
        cols += [*CERTIFICATE_COLUMNS, *(f"best_{c}" for c in LOSS_NAMES)]
    if cell_errors:
        cols += list(CELL_COLUMNS)
    cols += list(blocks)
    if extra_starts > 0:
        cols += [f"best_{c}" for c in declared]
    return (*KEY, *cols) if cols else ()


def legacy_columns(columns: Sequence[str], declared: Sequence[str]) -> tuple[str, ...]:
    """``columns`` as a moestat before the declared losses' ``best_<loss>`` wrote them (the same
    tuple when there are none)."""
    drop = {f"best_{c}" for c in declared}
    return tuple(c for c in columns if c not in drop)


class ExtrasStore:
    """Append-only ``extras.csv`` with a fixed header.

    Parameters
    ----------
    path : path-like
    columns : sequence of str
        :func:`extra_columns` of the configuration.
    """

    def __init__(self, path: str | os.PathLike, columns: Sequence[str], legacy: Sequence[str] | None = None):
        self.path = Path(path)
        self.columns = tuple(columns)
        self.legacy = None if legacy is None or tuple(legacy) == self.columns else tuple(legacy)
        self.adopted_legacy = False

    @classmethod
    def of_run(cls, out_dir: str | os.PathLike, experiment) -> "ExtrasStore | None":
        """The ``extras.csv`` of a run in ``out_dir``: the columns of ``experiment`` (a resolved
        :class:`~moestat.rates.resolve.Experiment`: its ``extra_columns``, and the
        :func:`legacy_columns` of its ``declared`` losses), or ``None`` when it writes none."""
        if not experiment.extra_columns:
            return None
        legacy = legacy_columns(experiment.extra_columns, experiment.declared)
        return cls(Path(out_dir) / "extras.csv", experiment.extra_columns, legacy)

    def create(self) -> None:
        """Write the header (new file) or cut a torn last line; refuse a file with another header.

        A file with the ``legacy`` header (:func:`legacy_columns`: written before the declared
        losses' ``best_<loss>`` existed) is continued with that header, so a resumed run's new
        lines match its old ones; those columns are then absent (``adopted_legacy``).
        """
        if not self.path.exists():
            atomic_write_text(self.path, ",".join(self.columns) + "\n")
            return
        text = self.path.read_text(encoding="utf-8")
        header = text.split("\n", 1)[0].split(",")
        if self.legacy is not None and header == list(self.legacy):
            self.columns, self.adopted_legacy = self.legacy, True
        elif header != list(self.columns):
            raise ValueError(f"{self.path} was written with other extras columns")
        if text and not text.endswith("\n"):
            atomic_write_text(self.path, text[: text.rfind("\n") + 1])

    def append(self, rows: Iterable[dict]) -> None:
        """One line per row (``repr`` of floats: exact round trip)."""
        for row in rows:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([repr(row[c]) if isinstance(row[c], float) else str(row[c]) for c in self.columns])
            append_line(self.path, buf.getvalue())


def merge_extras(df, path: str | os.PathLike):
    """``df`` (results) left-joined with ``extras.csv`` on ``(router, n, replicate)``; ``df`` if absent."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        return df
    ex = pd.read_csv(path)
    ex = ex.drop_duplicates(subset=list(KEY), keep="first")
    for c in ex.columns:
        if c not in ("router",):
            ex[c] = pd.to_numeric(ex[c], errors="coerce")
    ex["n"] = ex["n"].astype(int)
    ex["replicate"] = ex["replicate"].astype(int)
    return df.merge(ex, on=list(KEY), how="left")


def certificate_summary(df, routers: Sequence[str], extra_starts: int) -> dict | None:
    """Per router and ``n``: replicates whose near-truth fit was beaten by an extra start (``None``
    without extra starts, or when ``df`` has no ``beaten`` column).

    ``df`` is the results joined with ``extras.csv`` (:func:`merge_extras`); a replicate whose
    extras line is missing (a kill between the two appends) counts as ``missing``.
    """
    if extra_starts <= 0 or "beaten" not in df:
        return None
    out: dict = {"extra_starts": extra_starts, "beaten_rtol": BEATEN_RTOL, "by_router": {}}
    for router in routers:
        sub = df[df["router"] == router]
        rows = []
        for n, g in sub.groupby("n"):
            b = g["beaten"].to_numpy(float)
            have = b[~np.isnan(b)]
            rows.append({"n": int(n), "beaten": int(have.sum()), "certified": int(have.size), "missing": int(b.size - have.size),
                         "fraction_beaten": float(have.mean()) if have.size else None})
        out["by_router"][router] = rows
    return out
