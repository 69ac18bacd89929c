"""Field checks shared by the specs of :mod:`moestat.rates.config` (one-line ``ValueError`` messages)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_int", "is_number", "canonical", "positive_ints", "set_field"]


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def canonical(value: Any, known: tuple[str, ...]) -> Any:
    """The canonical spelling of ``value`` if it is a known name (or an alias), else ``value``
    unchanged, so that :meth:`RatesConfig.validate` reports it with the field's own message."""
    from moestat.model.gates import canonical_name

    if not isinstance(value, str):
        return value
    try:
        return canonical_name(value, known)
    except ValueError:
        return value


def positive_ints(spec: Any, names: tuple[str, ...]) -> None:
    for name in names:
        v = getattr(spec, name)
        if not is_int(v) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def set_field(obj: Any, name: str, value: Any) -> None:
    # normalisation in __post_init__ of a frozen dataclass: the object is still being built
    object.__setattr__(obj, name, value)
