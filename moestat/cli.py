"""Shared command-line plumbing: every ``python -m moestat.*`` door reports bad input as one
line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

__all__ = ["UsageError", "run_main", "positive_int", "nonneg_float", "int_list", "ArgumentParser"]


class UsageError(ValueError):
    """Invalid user input; reported as ``<prog>: error: <message>`` with exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with examples kept verbatim in ``--help`` and one-line errors."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse prints usage + message; we keep it to one line
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def run_main(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None, prog: str = "moestat") -> int:
    """Run ``main(argv)``; turn ``ValueError``/``TypeError``/``FileNotFoundError`` into exit 2.

    ``KeyboardInterrupt`` exits 130 with a one-line note: everything already finished is on disk.
    """
    try:
        rc = main(argv)
        return 0 if rc is None else int(rc)
    except (UsageError, ValueError, TypeError, FileNotFoundError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        sys.stderr.write(f"{prog}: error: {msg}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted; finished results are kept\n")
        return 130


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    """argparse type: a finite float >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return v


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated positive integers, e.g. ``1,2,5,10``."""
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return vals
