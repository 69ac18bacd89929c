"""Voronoi losses from a specification: parameter blocks, exponent tables and a mass term.

A theorem about parameter estimation in a mixture of experts states its rate through a Voronoi
loss (Nguyen et al. (2024), eq. (5); Nguyen, Nguyen & Ho (2023) for the Gaussian MoE).  Every such
loss has the same shape: fitted atoms are assigned to the nearest true atom (Voronoi cells
``A_j``), and each true atom ``j`` contributes::

    c_j = sum_{i in A_j} w_i * sum_b ||Delta_b(i, j)||^{e_b(|A_j|)}  +  gap_j

where ``b`` runs over **parameter blocks** (a slice of ``beta1``, ``eta`` or ``beta0``), each with
an **exponent table** ``e_b(m)`` of the cell size ``m``, ``w_i`` is the atom's weight and
``gap_j`` the mass gap of the cell.  The **mass term** fixes ``w`` and ``gap``:

============  ===========================  ==================================================
mass          weight ``w_i``               gap ``gap_j``
============  ===========================  ==================================================
``softmax``   ``exp(beta0_i)``             ``|sum_{i in A_j} exp(beta0_i) - exp(beta0*_j)|``
``sigmoid``   ``sigmoid(beta0_i)``         ``|sum_{i in A_j} sigmoid(beta0_i) - sigmoid(beta0*_j)|``
``none``      ``1``                        ``0``
============  ===========================  ==================================================

``softmax`` is the paper's term (Nguyen et al. (2024), eqs. (13), (16)).  ``sigmoid`` is moestat's
analogue for unnormalised sigmoid weights (a sigmoid weight is bounded by one, and the intercept is
identified because there is no translation invariance); it is not copied from an equation of
Nguyen, Ho & Rinaldo (2024) -- a user whose theorem writes ``beta0`` as a parameter instead adds a
``beta0`` block with ``mass = "none"``.

The loss is the sum of the ``K`` largest cell terms (the paper's maximum over ``K``-subsets of true
atoms, for a Top-K true model; every ``c_j >= 0`` depends only on its own cell), or of all of
them for a dense gate.

The built-in losses are entries (:func:`builtin_spec`): ``D1`` (constant ``r``), ``D2``
(``[1, 2]``), ``D3`` (``[1]``), each with blocks ``beta1`` and ``eta`` and the softmax mass; they
reproduce :func:`moestat.losses.voronoi.voronoi_loss` bit for bit.

Examples
--------
The Gaussian-MoE loss of Nguyen, Nguyen & Ho (2023) with ``eta = [a (d), b, sigma^2]``:

>>> spec = LossSpec("gaussian_D2", blocks=(
...     BlockSpec("beta1", "beta1", ExponentTable.named("rbar")),
...     BlockSpec("a", "eta[:d]", ExponentTable.named("rbar")),
...     BlockSpec("b", "eta[d]", ExponentTable.named("rbar")),
...     BlockSpec("variance", "eta[d+1]", ExponentTable.named("rbar", scale=0.5)),
... ))
>>> spec.blocks[3].exponent(np.array([1, 2, 3, 7])).tolist()
[0.5, 2.0, 3.0, 3.0]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from moestat.losses.voronoi import cell_sizes, check_k_active, direction_only, sum_of_largest
from moestat.model.mixing import MixingMeasure

__all__ = [
    "NAMED_TABLES",
    "BlockSpec",
    "ExponentTable",
    "LossSpec",
    "builtin_spec",
    "cell_terms_from_spec",
    "check_k_active",
    "spec_from_mapping",
    "voronoi_loss_from_spec",
]

#: Named exponent tables, by cell size ``m = 1, 2, ...`` (the last entry repeats).
#: ``rbar``: the ``rbar(m)`` of Ho & Nguyen (2016) for location-scale Gaussian mixtures, known for
#: ``m <= 3`` (1, 4, 6); repeating 6 for ``m >= 4`` is moestat's choice (the value is not known there).
NAMED_TABLES: dict[str, tuple[float, ...]] = {"rbar": (1.0, 4.0, 6.0)}

_MASSES = ("softmax", "sigmoid", "none")
_METRICS = ("euclidean", "block")
_SOURCES = ("beta0", "beta1", "eta")
_INDEX = re.compile(r"^\s*(-?\d+|d\s*([+-]\s*\d+)?)\s*$")
_SOURCE = re.compile(r"^\s*(beta0|beta1|eta)\s*(?:\[([^\]]*)\])?\s*$")


@dataclass(frozen=True)
class ExponentTable:
    """Exponent of a block as a function of the cell size ``m``.

    Parameters
    ----------
    values : tuple of float
        ``values[m - 1]`` for ``m = 1, 2, ...``; the last entry repeats for larger cells.  A
        one-entry tuple is a constant exponent.
    scale : float
        Multiplies every entry (e.g. ``rbar / 2`` for a Gaussian-MoE variance).
    name : str
        Display name (``"rbar"`` for a named table, else empty).
    """

    values: tuple[float, ...]
    scale: float = 1.0
    name: str = ""

    def __post_init__(self) -> None:
        vals = tuple(float(v) for v in self.values)
        if not vals:
            raise ValueError("an exponent table needs at least one value")
        if not all(np.isfinite(v) and v > 0 for v in vals) or not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"exponents must be finite and > 0, got {vals} x {self.scale}")
        object.__setattr__(self, "values", vals)

    @classmethod
    def constant(cls, r: float) -> "ExponentTable":
        """The same exponent ``r`` for every cell size."""
        return cls((float(r),))

    @classmethod
    def named(cls, name: str, scale: float = 1.0) -> "ExponentTable":
        """A table of :data:`NAMED_TABLES`, times ``scale``."""
        if name not in NAMED_TABLES:
            raise ValueError(f"unknown exponent table {name!r}; expected one of {tuple(NAMED_TABLES)}")
        return cls(NAMED_TABLES[name], scale=scale, name=name)

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        """Exponents for cell sizes ``sizes`` (any shape; empty cells get the ``m = 1`` entry).

        Parameters
        ----------
        sizes : ndarray of int, shape ``[...]``

        Returns
        -------
        ndarray of float, shape ``[...]``
        """
        table = np.asarray(self.values, dtype=np.float64)
        idx = np.clip(np.asarray(sizes) - 1, 0, table.size - 1)
        out = table[idx]
        # multiply only when scaled, so that D1/D2/D3 reproduce the legacy tables bit for bit
        return out if self.scale == 1.0 else out * self.scale


def _index(text: str, d: int, where: str) -> int:
    m = _INDEX.match(text)
    if not m:
        raise ValueError(f"bad index {text!r} in block source {where!r}; use an integer, d, d+1, d-1, ...")
    t = text.replace(" ", "")
    return d + int(t[1:] or 0) if t.startswith("d") else int(t)


@dataclass(frozen=True)
class BlockSpec:
    """One parameter block of a Voronoi loss.

    Parameters
    ----------
    label : str
        Name of the block (reported in per-block errors).
    source : str
        ``"beta1"``, ``"eta"`` or ``"beta0"``, optionally with a column index or range in which
        ``d`` is the input dimension: ``"eta[:d]"`` (an expert's slope), ``"eta[d]"`` (its
        intercept), ``"eta[d+1]"`` (a variance), ``"beta1[0:2]"``.
    exponent : ExponentTable
        Exponent as a function of the cell size.
    """

    label: str
    source: str
    exponent: ExponentTable = field(default_factory=lambda: ExponentTable.constant(1.0))

    def __post_init__(self) -> None:
        m = _SOURCE.match(self.source)
        if not m:
            raise ValueError(f"bad block source {self.source!r}; expected beta0, beta1 or eta, optionally eta[i], eta[i:j]")
        if m.group(2) is not None:  # check the index syntax now, not when the loss is first computed
            for part in m.group(2).split(":", 1):
                if part.strip() or ":" not in m.group(2):
                    _index(part, 0, self.source)

    def columns(self, G: MixingMeasure) -> np.ndarray:
        """This block of every atom of ``G`` (a NumPy measure), shape ``[..., k, width]``."""
        m = _SOURCE.match(self.source)
        name, idx = m.group(1), m.group(2)
        arr = G.beta0[..., None] if name == "beta0" else getattr(G, name)
        if idx is None:
            return arr
        d = G.dim
        if ":" in idx:
            lo, hi = (p.strip() for p in idx.split(":", 1))
            sl = slice(_index(lo, d, self.source) if lo else None, _index(hi, d, self.source) if hi else None)
        else:
            i = _index(idx, d, self.source)
            sl = slice(i, i + 1 if i != -1 else None)
        out = arr[..., sl]
        if out.shape[-1] == 0:
            raise ValueError(f"block source {self.source!r} selects no column of {name} (width {arr.shape[-1]})")
        return out


@dataclass(frozen=True)
class LossSpec:
    """A Voronoi loss: blocks, mass term, cell metric and the true model's K.

    Parameters
    ----------
    name : str
        Column name of the loss in results (e.g. ``"D3"``, ``"gaussian_D2"``).
    blocks : tuple of BlockSpec
        Parameter blocks (``beta1`` and ``eta`` for the paper's losses).
    mass : {"softmax", "sigmoid", "none"}
        Weight and mass-gap form (see the module docstring).
    metric : {"euclidean", "block"}
        Cell metric: ``euclidean`` is the norm of the concatenated blocks (eq. (5)); ``block`` the
        sum of the block norms.
    k_active : int or None
        K of the true model (sum of the K largest cell terms); ``None`` for a dense gate.
    direction : bool
        Compare ``beta1 / ||beta1||`` instead of ``beta1`` (vanilla cosine router).
    cell_blocks : tuple of str
        Labels of the blocks that assign atoms to cells (empty: all of them).  The Gaussian MoE
        of Nguyen, Nguyen & Ho (2023) takes its cells on the expert blocks only, which softmax
        translations of the gate leave unchanged.
    """

    name: str
    blocks: tuple[BlockSpec, ...]
    mass: str = "softmax"
    metric: str = "euclidean"
    k_active: int | None = None
    direction: bool = False
    cell_blocks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "cell_blocks", tuple(self.cell_blocks))
        if not self.blocks:
            raise ValueError(f"loss {self.name!r} needs at least one block")
        unknown = set(self.cell_blocks) - {b.label for b in self.blocks}
        if unknown:
            raise ValueError(f"cell_blocks of loss {self.name!r} name no block: {sorted(unknown)}")
        if self.mass not in _MASSES:
            raise ValueError(f"unknown mass term {self.mass!r} in loss {self.name!r}; expected one of {_MASSES}")
        if self.metric not in _METRICS:
            raise ValueError(f"unknown Voronoi metric {self.metric!r}; expected 'euclidean' or 'block'")
        if self.k_active is not None and (isinstance(self.k_active, bool) or int(self.k_active) != self.k_active or self.k_active < 1):
            raise ValueError(f"k_active must be a positive integer or None, got {self.k_active!r}")


def builtin_spec(
    loss: str = "D3", r: float = 1.0, metric: str = "euclidean", direction: bool = False, k_active: int | None = None
) -> LossSpec:
    """The paper's losses as specifications: ``D1`` (``D_{1,r}``), ``D2`` (eq. 13), ``D3`` (eq. 16).

    Parameters
    ----------
    loss : {"D1", "D2", "D3"}
    r : float
        The ``r >= 1`` of ``D_{1,r}`` (ignored by D2/D3).
    metric, direction, k_active
        See :class:`LossSpec`.

    Returns
    -------
    LossSpec
    """
    if loss == "D1":
        if not (np.isfinite(r) and r >= 1):
            raise ValueError(f"r must be >= 1, got {r!r}")
        table = ExponentTable.constant(r)
    elif loss == "D2":
        table = ExponentTable((1.0, 2.0))
    elif loss == "D3":
        table = ExponentTable((1.0,))
    else:
        raise ValueError(f"unknown Voronoi loss {loss!r}; expected one of ('D1', 'D2', 'D3')")
    blocks = (BlockSpec("beta1", "beta1", table), BlockSpec("eta", "eta", table))
    return LossSpec(loss, blocks, "softmax", metric, k_active, direction)


def _check_measure(G: Any, role: str) -> MixingMeasure:
    if not isinstance(G, MixingMeasure):
        raise TypeError(f"{role} must be a MixingMeasure, got {type(G).__name__}")
    return G.numpy()


def cell_terms_from_spec(spec: LossSpec, fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, Any]:
    """Per-cell terms of a specified Voronoi loss, with the pieces they are made of.

    Parameters
    ----------
    spec : LossSpec
    fitted : MixingMeasure
        Fitted measure, ``beta0 [..., k]`` (batched or not).
    truth : MixingMeasure
        True measure with ``k*`` atoms (unbatched, or with a batch shape broadcasting to the fit's).

    Returns
    -------
    dict
        ``terms [..., k*]`` (the ``c_j``), ``sizes [..., k*]``, ``cells [..., k]`` (true atom of
        each fitted atom), ``param_part [..., k*]``, ``mass_part [..., k*]``, ``weights [..., k]``
        (the ``w_i``), ``atom_errors [..., k]`` (plain cell-metric distance of each fitted atom to
        its true atom) and ``block_errors`` (label -> ``[..., k]`` plain norm per block).
    """

    fitted, truth = _check_measure(fitted, "fitted"), _check_measure(truth, "truth")
    if fitted.dim != truth.dim or fitted.eta_dim != truth.eta_dim:
        raise ValueError(
            f"fitted and true atoms differ in shape: beta1 {fitted.dim} vs {truth.dim}, eta {fitted.eta_dim} vs {truth.eta_dim}"
        )
    if spec.direction:
        fitted, truth = direction_only(fitted), direction_only(truth)
    tb, batch = truth.batch_shape, fitted.batch_shape
    if tb and tb != batch[-len(tb):] and tb != batch:
        raise ValueError(f"truth batch shape {tb} does not broadcast with fitted batch shape {batch}")
    norms = []
    for b in spec.blocks:
        f, t = b.columns(fitted), b.columns(truth)
        norms.append(np.linalg.norm(f[..., :, None, :] - t[..., None, :, :], axis=-1))  # [..., k, k*]

    def combine(ns):
        if spec.metric == "euclidean":  # norm of the concatenated blocks, eq. (5)
            sq = ns[0] ** 2
            for nb in ns[1:]:
                sq = sq + nb**2
            return np.sqrt(sq)
        out = ns[0]
        for nb in ns[1:]:
            out = out + nb
        return out

    dist = combine(norms)
    k_star = dist.shape[-1]
    by = dist if not spec.cell_blocks else combine([nb for b, nb in zip(spec.blocks, norms) if b.label in spec.cell_blocks])
    cells = np.argmin(by, axis=-1)
    sizes = cell_sizes(cells, k_star)
    member = cells[..., :, None] == np.arange(k_star)
    # a fit whose gate intercept left exp's range (a diverged fit) gets an infinite loss, which the
    # rate fit reports as non-finite: the overflow is the answer, not a fault to warn about
    with np.errstate(over="ignore"):
        if spec.mass == "softmax":
            w, w_true = np.exp(fitted.beta0), np.exp(truth.beta0)
        elif spec.mass == "sigmoid":
            w, w_true = 1.0 / (1.0 + np.exp(-fitted.beta0)), 1.0 / (1.0 + np.exp(-truth.beta0))
        else:
            w, w_true = np.ones_like(fitted.beta0), None
    per_atom = None
    for b, nb in zip(spec.blocks, norms):
        term = nb ** b.exponent(sizes)[..., None, :]
        per_atom = term if per_atom is None else per_atom + term
    per_atom = w[..., :, None] * per_atom
    param_part = np.where(member, per_atom, 0.0).sum(axis=-2)
    if w_true is None:
        mass_part = np.zeros_like(param_part)
    else:
        cell_mass = np.where(member, w[..., :, None], 0.0).sum(axis=-2)
        mass_part = np.abs(cell_mass - w_true)
    own = cells[..., None]
    return {
        "terms": param_part + mass_part,
        "sizes": sizes,
        "cells": cells,
        "param_part": param_part,
        "mass_part": mass_part,
        "weights": np.broadcast_to(w, cells.shape),
        "atom_errors": np.take_along_axis(dist, own, axis=-1)[..., 0],
        "block_errors": {b.label: np.take_along_axis(nb, own, axis=-1)[..., 0] for b, nb in zip(spec.blocks, norms)},
    }


def voronoi_loss_from_spec(spec: LossSpec, fitted: MixingMeasure, truth: MixingMeasure) -> np.ndarray:
    """A specified Voronoi loss ``D(G, G*)``.

    Parameters
    ----------
    spec : LossSpec
    fitted, truth : MixingMeasure
        See :func:`cell_terms_from_spec`.

    Returns
    -------
    ndarray, shape ``[...]``
        The loss, with the fitted measure's batch shape.

    Raises
    ------
    TypeError
        If ``fitted`` or ``truth`` is not a :class:`MixingMeasure`.
    ValueError
        If ``spec.k_active`` exceeds the number of true atoms.
    """
    if isinstance(truth, MixingMeasure):
        check_k_active(spec.k_active, truth.n_atoms)
    return sum_of_largest(cell_terms_from_spec(spec, fitted, truth)["terms"], spec.k_active)


def _table_from(value: Any, where: str) -> ExponentTable:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ExponentTable.constant(float(value))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return ExponentTable(tuple(float(v) for v in value))
    if isinstance(value, str):
        return ExponentTable.named(value)
    if isinstance(value, Mapping) and "table" in value:
        return ExponentTable.named(str(value["table"]), float(value.get("scale", 1.0)))
    raise ValueError(
        f"{where}: exponent must be a number, a list by cell size, a table name, or {{table = ..., scale = ...}}; got {value!r}"
    )


def spec_from_mapping(m: Mapping[str, Any], where: str = "loss") -> LossSpec:
    """Build a :class:`LossSpec` from a mapping (a scenario file's ``[[losses]]`` entry).

    Keys: ``name``; either ``builtin`` (``"D1"``/``"D2"``/``"D3"``, with optional ``r``) or
    ``blocks`` (a list of ``{label, source, exponent}``); ``mass``, ``metric``, ``k_active``,
    ``direction`` as in :class:`LossSpec`.  Other keys (e.g. ``predicted_exponent``) are ignored
    here.

    Parameters
    ----------
    m : mapping
    where : str
        Prefix for error messages (e.g. ``"losses[0] in file.toml"``).

    Returns
    -------
    LossSpec
    """
    try:
        name = str(m["name"])
        common = {
            "metric": str(m.get("metric", "euclidean")),
            "direction": bool(m.get("direction", False)),
            "k_active": m.get("k_active"),
        }
        if "builtin" in m:
            s = builtin_spec(str(m["builtin"]), float(m.get("r", 1.0)), **common)
            return LossSpec(name, s.blocks, str(m.get("mass", "softmax")), s.metric, s.k_active, s.direction)
        blocks = []
        for i, b in enumerate(m["blocks"]):
            blocks.append(BlockSpec(str(b["label"]), str(b["source"]), _table_from(b.get("exponent", 1.0), f"{where}.blocks[{i}]")))
        return LossSpec(name, tuple(blocks), str(m.get("mass", "softmax")), **common)
    except KeyError as e:
        raise ValueError(f"{where}: missing key {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


def specs_names(specs: Sequence[LossSpec]) -> list[str]:
    """Names of ``specs``; raises ``ValueError`` on a duplicate."""
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate loss names {sorted(dup)}")
    return names
