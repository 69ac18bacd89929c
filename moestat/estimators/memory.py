"""How much memory a likelihood fit holds, and how many of its batch entries to fit at once.

The maximum-likelihood EM (:class:`~moestat.estimators.mle.MLEGaussianMoE`, fused or generic)
fits every replicate x start of a call as one entry of a batch ``B``; each EM step makes
per-sample temporaries ``[B, k, n]`` (densities, posteriors, the gate's forward-mode Jacobian
over its free parameters), so its working memory grows as ``B n``.  A sigmoid-gated Gaussian MoE
(d = 2, k = 2) fitted on 20 replicates at n = 128 000 held 3.48 GB; at n = 10^6 it would not fit
a laptop.  The fit therefore runs its entries in chunks of at most :func:`entries_per_chunk`
entries, so that the estimate :func:`fit_bytes` of one chunk stays within a memory budget
(``max_memory``; default :data:`DEFAULT_MAX_MEMORY`, at most half of what is available).

The chunks do not change the fits: the entries of a batch are independent (their own EM steps,
stopping rule, SQUAREM extrapolation and Newton polish; their starts are drawn before the batch
is cut), and the one batch-wide decision -- whether the EM pass is compiled, which depends on the
batch's size -- is taken once for the whole batch (``tests/estimators/test_mle_memory.py``: the
fits are bit-identical with and without chunks).

The estimate is calibrated, not derived: peak resident memory of the generic EM on the
sigmoid-gated Gaussian MoE above (one thread; ``benchmarks/mle_peak_memory.py``) grew by 1.0 to
1.25 kB per entry and sample (eager and compiled) above a fixed 85 MB; :func:`fit_bytes` counts
1.6 kB at k = 2, d = 2 (``8 (40 k + 20 k (d + 1))`` bytes: the ``[B, k, n]`` temporaries, and the
gate Jacobian's ``k (d + 1)`` rows of a dense linear score), so that it errs on the safe side.
A single entry larger than the budget is still fitted whole: EM sums over all the samples of an
entry in every step, and cutting those sums into sample blocks would change their rounding, hence
the fits.
"""

from __future__ import annotations

import math
import re

from moestat.resources import available_memory, format_bytes

__all__ = ["DEFAULT_MAX_MEMORY", "floats_per_sample", "fit_bytes", "resolve_max_memory", "parse_memory",
           "entries_per_chunk", "chunks", "estimate_line", "scenario_line"]

#: The default budget of one fit's per-sample arrays: 1 GiB (with the interpreter, torch and the
#: data, a fitting process then peaks near 1.4 GB), or half the memory available when that is less.
DEFAULT_MAX_MEMORY = 1 << 30


def floats_per_sample(k: int, d: int) -> int:
    """float64 values the EM holds per entry and sample (module docstring: calibrated, generous)."""
    return 40 * int(k) + 20 * int(k) * (int(d) + 1)


def fit_bytes(n: int, entries: int, k: int, d: int) -> int:
    """Estimated working memory (bytes) of an EM step over ``entries`` entries of ``n`` samples."""
    return 8 * int(n) * int(entries) * floats_per_sample(k, d)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
          "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def parse_memory(text) -> int | str:
    """``"1.5G"``, ``"800MiB"``, ``"2GB"``, a number of bytes, or ``"auto"`` -> bytes (int) or ``"auto"``.

    ``K``, ``M``, ``G``, ``T`` and ``KiB`` ... are powers of 1024, ``KB`` ... powers of 1000.

    Raises
    ------
    ValueError
        Not a positive amount of memory (one line, for a command-line flag).
    """
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    if isinstance(text, bool):
        raise ValueError(f"max_memory must be an amount of memory such as 1.5G, or 'auto', got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"max_memory must be an amount of memory such as 1.5G, 800M or 2GiB, or 'auto', got {text!r}")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"max_memory must be a positive amount of memory, got {text!r}")
    return int(value)


def resolve_max_memory(max_memory) -> int:
    """The budget in bytes: ``max_memory`` as given, or for ``None`` / ``"auto"``
    :data:`DEFAULT_MAX_MEMORY`, lowered to half the available memory where that is less."""
    value = parse_memory("auto" if max_memory is None else max_memory)
    if value != "auto":
        return int(value)
    avail = available_memory()
    return DEFAULT_MAX_MEMORY if avail is None else max(1, min(DEFAULT_MAX_MEMORY, avail // 2))


def entries_per_chunk(n: int, k: int, d: int, max_memory) -> int:
    """The most entries of ``n`` samples whose :func:`fit_bytes` fits the budget (at least 1)."""
    per_entry = fit_bytes(n, 1, k, d)
    return max(1, resolve_max_memory(max_memory) // max(1, per_entry))


def chunks(total: int, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive slices of at most ``size`` of ``range(total)``."""
    size = max(1, int(size))
    return [(a, min(a + size, total)) for a in range(0, int(total), size)]


def estimate_line(n: int, entries: int, k: int, d: int, max_memory) -> str:
    """One line: what the largest likelihood fit of ``entries`` entries at ``n`` holds, and the chunks."""
    budget = resolve_max_memory(max_memory)
    whole = fit_bytes(n, entries, k, d)
    per = entries_per_chunk(n, k, d, budget)
    if per >= entries:
        how = f"fitted in one batch within --max-memory {format_bytes(budget)}"
    else:
        how = (f"fitted {per} at a time under --max-memory {format_bytes(budget)} "
               f"(about {format_bytes(fit_bytes(n, min(per, entries), k, d))} each)")
        if fit_bytes(n, 1, k, d) > budget:
            how += "; one alone exceeds the budget and is fitted whole"
    return (f"memory: the likelihood fit of {entries} replicate{'' if entries == 1 else 's'} x starts at n = {n} "
            f"(k = {k}, d = {d}) holds about {format_bytes(whole)} of per-sample arrays; {how}")


def scenario_line(scenario, n: int, reps: int, max_memory) -> str:
    """:func:`estimate_line` for a scenario's maximum-likelihood fit of ``reps`` replicates (each with
    the scenario's starts) at ``n``: what ``moestat rates`` prints at its start and ``moestat check``
    for the scenario."""
    starts = max(1, int(getattr(scenario, "n_starts", 1) or 1))
    return estimate_line(int(n), int(reps) * starts, int(scenario.k_fit), int(scenario.d), max_memory)
