"""Equality of recorded JSON-like values up to floating-point rounding.

A figure recomputed from recorded rows (a norm, a least-squares slope) goes through NumPy and BLAS
kernels whose last digits depend on the build: a fresh machine gave 3.737472110574567 where the
record holds 3.7374721105745667.  Tests that check such a record compare floats within a relative
tolerance far below any difference that could change a verdict, and everything else exactly.
"""

from __future__ import annotations

import math


def same_numbers(a, b, rel: float = 1e-9) -> bool:
    """``a == b`` for nested dicts, lists and scalars, floats within ``rel`` relative."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_numbers(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_numbers(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, float) or isinstance(b, float)):
        return a == b
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
