"""Field checks shared by the specs of :mod:`moestat.rates.config` (one-line ``ValueError`` messages)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_int", "is_number", "canonical", "positive_ints", "set_field", "unhonoured_fields"]


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


#: scenario fields only the built-in regression scenarios read (see :func:`unhonoured_fields`)
_BUILTIN_ONLY = ("tau", "expert", "d", "k_true", "k_active", "k_active_fit", "noise_var", "truth_seed")


def unhonoured_fields(spec: Any) -> None:
    """Raise a one-line ``ValueError`` when a :class:`~moestat.rates.config.ScenarioSpec` sets a
    field its scenario cannot honour (the Gaussian-MoE family is model 1 of Nguyen, Nguyen & Ho
    (2023); a scenario file holds its own truth) -- never ignore a flag silently."""
    default = type(spec)()
    if spec.scenario_file:
        names = _BUILTIN_ONLY + ("setting", "k_fit", "input_law")
        what = "a scenario file (it states its own truth, fit and input law)"
    elif spec.family == "gaussian-moe":
        names = _BUILTIN_ONLY
        what = ("the gaussian-moe family (model 1 of Nguyen, Nguyen & Ho 2023: d = 1, k* = 2, its own variances); "
                "for another truth write a scenario file with [noise] model = \"mixture\" and use --scenario FILE")
    else:
        return
    bad = [n for n in names if getattr(spec, n) != getattr(default, n)]
    if bad:
        flags = ", ".join("--" + n.replace("_", "-") for n in bad)
        raise ValueError(f"{flags} cannot be honoured by {what}")
