"""Field checks shared by the specs of :mod:`moestat.rates.config` (one-line ``ValueError`` messages)."""

from __future__ import annotations

from typing import Any

import math

import numpy as np

from moestat.estimators.layout import n_params
from moestat.model.gates import canonical_name
from moestat.resources import check_memory

__all__ = ["sample_sizes", "is_int", "is_number", "canonical", "positive_ints", "set_field", "check_unit_memory", "check_scenario_memory",
           "check_truth_memory", "check_enough_samples", "unhonoured_fields"]


def sample_sizes(n_min: int, n_max: int, n_points: int) -> list[int]:
    """``n_points`` log-spaced integers from ``n_min`` to ``n_max`` (duplicates after rounding dropped).

    Returns
    -------
    list of int
        Sorted, distinct; length at most ``n_points``.
    """
    if n_points == 1 or n_min == n_max:
        return [int(n_min)]
    vals = np.rint(np.exp(np.linspace(math.log(n_min), math.log(n_max), n_points))).astype(int)
    return sorted(set(int(v) for v in vals))


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def canonical(value: Any, known: tuple[str, ...]) -> Any:
    """The canonical spelling of ``value`` if it is a known name (or an alias), else ``value``
    unchanged, so that :meth:`RatesConfig.validate` reports it with the field's own message."""

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


def physical_memory() -> int | None:
    """Bytes of RAM of this machine (``None`` where the OS does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_unit_memory(n: int, reps_per_unit: int, d: int, n_params: int,
                      hint: str = "or set --chunk to fit fewer replicates per unit") -> None:
    """Refuse a grid whose largest work unit cannot fit in this machine's memory.

    A unit holds ``reps_per_unit`` data sets of ``n`` samples and, in the least-squares and
    likelihood fits, a Jacobian or per-sample statistics of ``n`` rows by the number of parameters;
    ``8 (d + 2 + 2 P)`` bytes per sample and replicate is a lower bound on what the fit allocates
    (float64).  A grid over it would fail with ``MemoryError`` after the folder was written, so it is
    bad input, found before anything is written.  Compared with the memory available now
    (:func:`moestat.resources.available_memory`), not the machine's total: what other processes
    hold cannot be allocated either.
    """

    need = 8.0 * n * reps_per_unit * (d + 2 + 2 * n_params)
    check_memory(need, f"--n-max {n}: one work unit ({reps_per_unit} replicates of {n} samples) would",
                 f"lower --n-max {hint}")


def check_scenario_memory(scenario: Any, n: int, reps_per_unit: int, hint: str | None = None) -> None:
    """:func:`check_unit_memory` for a scenario: its dimension and fitted parameter count."""
    G = scenario.truth.numpy()
    n_par = int(np.size(G.beta0) + np.size(G.beta1) + np.size(G.eta)) * max(1, int(scenario.k_fit)) // max(1, G.n_atoms)
    kw = {} if hint is None else {"hint": hint}
    check_unit_memory(int(n), int(reps_per_unit), int(scenario.d), n_par, **kw)


def check_truth_memory(k_true: int, k_fit: int | None, d: int) -> None:
    """Refuse a built-in truth too large to draw: :func:`moestat.data.synthetic.draw_truth` compares
    every pair of atoms (a ``k x k`` cosine matrix and ``k x k x (d + 1)`` expert distances, float64),
    so ``--k-true 100000`` asked for 75 GiB and failed with ``MemoryError`` after the folder was
    written."""

    k = max(int(k_true), int(k_fit or 0))
    check_memory(8.0 * k * k * (int(d) + 2), f"--k-true {k_true}: the truth's {k} x {k} atom comparisons",
                 "lower --k-true (the theorems' scenarios use 2 to 5 atoms)")


def check_enough_samples(n_min: int, k_fit: int, d: int) -> None:
    """Refuse a grid whose smallest ``n`` is below the free parameters of the fit: the estimator
    refuses it too (:func:`moestat.estimators.validation`), but only inside the first work unit,
    after the folder was written."""

    P = n_params(int(k_fit), int(d), int(d) + 1, True)
    if n_min < P:
        raise ValueError(f"--n-min {n_min}: fewer samples than the {P} free parameters of a {k_fit}-atom fit in "
                         f"dimension {d}; use --n-min {P} or more")


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
