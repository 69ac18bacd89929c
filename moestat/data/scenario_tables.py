"""The tables of a scenario file shared by every kind: the error, the key checks, ``[[losses]]``.

Both the regression scenarios (:mod:`moestat.data.scenario_files`) and the joint GLLiM
(:mod:`moestat.data.gllim_scenarios`) read their ``[[losses]]`` tables here, so neither file
kind imports the other's module for them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from moestat.losses.voronoi_spec import LossSpec, spec_from_mapping

__all__ = ["ScenarioFileError", "KNOWN_KEYS", "NOISE_MODELS", "parse_losses"]


class ScenarioFileError(ValueError):
    """A scenario file that cannot be used; the message names the file and the key."""


def _err(where: str, msg: str) -> ScenarioFileError:
    return ScenarioFileError(f"{where}: {msg}")


#: the keys every table of a scenario file may hold (a misspelt key is an error naming it)
KNOWN_KEYS = {
    "": ("name", "gate", "expert", "noise", "input", "fit", "atoms", "losses", "box"),
    "gate": ("score", "normalisation", "k_active", "temperature", "tau", "variance", "activation"),
    "expert": ("kind", "degree", "hidden", "classes"),
    "noise": ("model", "variance"),
    "input": ("law", "path"),
    "fit": ("k", "k_active", "gate_in_box"),
    "atoms": ("beta0", "beta1", "eta", "variance"),
    "losses": ("name", "builtin", "r", "blocks", "mass", "metric", "k_active", "direction", "predicted_exponent"),
    "losses.blocks": ("label", "source", "exponent"),
    "box": ("beta0", "beta1", "eta"),
}
NOISE_MODELS = ("additive", "mixture")


def _check_keys(table: Any, kind: str, where: str, label: str) -> dict:
    """``table`` as a dict, after checking it is a table and holds only :data:`KNOWN_KEYS` of ``kind``."""
    if not isinstance(table, Mapping):
        raise _err(where, f"{label or 'the file'} must be a table, got {type(table).__name__}")
    extra = sorted(set(table) - set(KNOWN_KEYS[kind]))
    if extra:
        raise _err(where, f"unknown key(s) {extra} in {label or 'the top level'}; expected {sorted(KNOWN_KEYS[kind])}")
    return dict(table)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_losses(entries: Any, where: str, check_keys=_check_keys) -> tuple[tuple[LossSpec, ...], dict[str, float | None]]:
    """The ``[[losses]]`` tables of a scenario file: their specifications and predicted exponents.

    ``check_keys(table, kind, where, label)`` checks each table's keys (a file type with its own
    message passes its own); a misspelt key, a bad block or a non-numeric ``predicted_exponent`` is
    a :class:`ScenarioFileError` naming ``losses[i]``.
    """
    losses, predicted = [], {}
    for i, entry in enumerate(entries):
        entry = check_keys(entry, "losses", where, f"losses[{i}]")
        for j, blk in enumerate(entry.get("blocks", []) if isinstance(entry.get("blocks"), list) else []):
            check_keys(blk, "losses.blocks", where, f"losses[{i}].blocks[{j}]")
        try:
            spec = spec_from_mapping(entry, where=f"losses[{i}]")
        except ValueError as e:
            raise _err(where, str(e)) from None
        losses.append(spec)
        pe = entry.get("predicted_exponent")
        if pe is not None and not _number(pe):
            raise _err(where, f"losses[{i}].predicted_exponent must be a number, got {pe!r}")
        predicted[spec.name] = None if pe is None else float(pe)
    return tuple(losses), predicted
