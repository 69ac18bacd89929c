"""Plumbing shared by every subcommand of ``moestat``: one-line usage errors, exit codes, and the
options that mean the same thing wherever they appear.

Exit status, the same for every subcommand:

* ``0`` success (``moestat theory`` has its own codes for failed checks, see its help);
* ``1`` an unexpected error *after the work started*: the traceback is printed, because it is a
  bug or an environment failure, never the user's input;
* ``2`` bad input (arguments, files, an unusable output folder): one line on stderr, nothing
  written;
* ``130`` interrupted (Ctrl-C): the doors that write each finished unit as they go keep it
  (``--resume`` continues); the others say that nothing was kept.

Every door writes into ``--out`` (default ``moestat-out/<door>``); a folder that already holds
anything is refused unless ``--resume`` is given (:func:`prepare_out`).

The boundary between "bad input" and "work" is drawn by :func:`usage_errors`: a subcommand parses,
then validates inside ``with usage_errors():`` (where a ``ValueError`` or a missing file becomes a
:class:`UsageError`), and only then starts the work, where every exception is an internal error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

__all__ = [
    "UsageError",
    "usage_errors",
    "run_main",
    "ArgumentParser",
    "positive_int",
    "nonneg_int",
    "nonneg_float",
    "int_list",
    "name_choice",
    "add_seed",
    "add_out",
    "out_dir",
    "prepare_out",
    "cleaned_on_interrupt",
    "DEFAULT_OUT_ROOT",
    "KEEPS",
    "NOTHING_KEPT",
    "add_n_jobs",
    "apply_threads",
    "add_device",
    "add_quiet",
    "add_resume",
    "add_threads",
    "device_name",
]

#: Set by ``moestat --debug``: usage errors show their traceback too.
DEBUG_ENV = "MOESTAT_DEBUG"


class UsageError(ValueError):
    """Invalid user input; reported as ``<prog>: error: <message>`` with exit status 2."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)) and exc.filename:
        text = f"{exc.strerror or text}: {exc.filename}" if not text or text.startswith("[Errno") else text
    return text.splitlines()[0] if text else exc.__class__.__name__


@contextmanager
def usage_errors() -> Iterator[None]:
    """Turn what goes wrong while *validating* user input into a :class:`UsageError`.

    ``ValueError``, ``TypeError`` and the file errors (missing, unreadable, not a directory) raised
    inside the block are the user's input being refused; outside the block the same exceptions
    are internal errors (exit 1 with a traceback).
    """
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError, FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError) as exc:
        raise UsageError(_first_line(exc)) from exc


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples kept verbatim; every option's default shown (unless its help text
    already states it, or there is none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or any(default is v for v in (None, False, argparse.SUPPRESS))
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default {shown})" if text else f"(default {shown})"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with examples kept verbatim in ``--help``, shown defaults and one-line errors."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse prints usage + message; we keep it to one line
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


#: What Ctrl-C leaves, said by :func:`run_main`: doors that write each finished unit as they go...
KEEPS = "finished results are kept; --resume continues"
#: ... and doors that write their results at the end (they say so, rather than promise).
NOTHING_KEPT = "nothing was kept (this door writes its results when it finishes)"


def run_main(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None,
             prog: str = "moestat", on_interrupt: str = KEEPS) -> int:
    """Run ``main(argv)`` and map its outcome to an exit status (see the module docstring).

    ``on_interrupt`` is what Ctrl-C leaves on disk (:data:`KEEPS` or :data:`NOTHING_KEPT`, the
    ``ON_INTERRUPT`` of the door's module).
    """
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        rc = main(argv)
        return 0 if rc is None else int(rc)
    except UsageError as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: {_first_line(exc)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted; {on_interrupt}\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - shown in full: an internal error is not bad input
        traceback.print_exc()
        sys.stderr.write(f"{prog}: internal error ({type(exc).__name__}): {_first_line(exc)}\n"
                         "this is not a problem with your input; please report it with the traceback above\n")
        return 1


# ---------------------------------------------------------------------------------------------
# argument types
# ---------------------------------------------------------------------------------------------
def _int_at_least(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    parse.__name__ = what.replace(" ", "_")
    return parse


#: argparse type: an integer >= 1.
positive_int = _int_at_least(1, "a positive integer")
#: argparse type: an integer >= 0 (seeds).
nonneg_int = _int_at_least(0, "a non-negative integer")


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
        vals = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return vals


def name_choice(known: Sequence[str], aliases: dict[str, str] | None = None, *, many: bool = False):
    """argparse type for names from one vocabulary: hyphen and underscore both accepted, aliases
    mapped to the canonical spelling (see :func:`moestat.model.gates.canonical_name`).

    With ``many=True`` the value is a comma list and a list of canonical names is returned.
    """
    from moestat.model.gates import canonical_name

    def parse(text: str):
        parts = [t.strip() for t in text.split(",")] if many else [text.strip()]
        if many and len(parts) > 1 and not all(parts):
            raise argparse.ArgumentTypeError(f"an empty name in the comma list {text!r}")
        parts = [t for t in parts if t]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected {'a comma list of names' if many else 'a name'}, got {text!r}")
        try:
            vals = [canonical_name(t, known, aliases) for t in parts]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return vals if many else vals[0]

    parse.__name__ = "name"
    return parse


# ---------------------------------------------------------------------------------------------
# options that mean the same thing in every subcommand
# ---------------------------------------------------------------------------------------------
def add_seed(p, default: int | None = 0, help: str = "root seed of every random stream") -> None:
    p.add_argument("--seed", type=nonneg_int, default=default if default is not None else argparse.SUPPRESS,
                   help=f"{help} (default {default if default is not None else 0})")


#: Every door writes into ``--out``, by default ``moestat-out/<door>`` under the current folder.
DEFAULT_OUT_ROOT = "moestat-out"


def out_dir(text: str) -> str:
    """argparse type of ``--out``: a folder name (an empty string would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder name, got {text!r}")
    return text


def add_out(p, door: str, help: str = "output folder") -> None:
    """``--out DIR``, default ``moestat-out/<door>``: the one output-folder rule of every door."""
    default = f"{DEFAULT_OUT_ROOT}/{door}"
    p.add_argument("--out", metavar="DIR", type=out_dir, default=default, help=f"{help} (default {default})")


def prepare_out(out: str | os.PathLike, resume: bool | None) -> Path:
    """Check ``--out`` and create it: the last step of a door's validation.

    A folder that already holds anything is refused unless ``resume`` is true (the door then
    checks that what is there belongs to the same configuration); ``resume=None`` is a door without
    ``--resume``.

    Raises
    ------
    ValueError
        One line naming ``--out``.
    """
    from moestat.io import ensure_writable_dir

    path = Path(out)
    if str(out).strip() == "":
        raise ValueError("--out must name a folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} exists and is not a directory")
    if path.is_dir() and not resume and any(path.iterdir()):
        how = "pass --resume to continue the run in it, or choose" if resume is not None else "this door has no --resume; choose"
        raise ValueError(f"--out {path} is not empty; {how} an empty or new folder")
    return ensure_writable_dir(path)


@contextmanager
def cleaned_on_interrupt(out: str | os.PathLike) -> Iterator[None]:
    """For doors that write their results only at the end: on Ctrl-C, remove ``out`` if it is
    still empty (the door created it), so an interrupted run leaves nothing behind."""
    try:
        yield
    except KeyboardInterrupt:
        path = Path(out)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        raise


def add_n_jobs(p, default: int | None = 1) -> None:
    p.add_argument("--n-jobs", type=positive_int, default=default if default is not None else argparse.SUPPRESS,
                   help=f"parallel workers; results do not depend on it (default {default if default is not None else 1})")


def device_name(text: str) -> str:
    """argparse type: a device name :func:`moestat.devices.resolve_device` accepts on this machine
    (returned as given, so ``auto`` is resolved where the work runs)."""
    from moestat.devices import resolve_device

    try:
        resolve_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_device(p, default: str | None = "cpu") -> None:
    p.add_argument("--device", type=device_name, default=default if default is not None else argparse.SUPPRESS,
                   help=f"cpu, cuda[:N] or auto (default {default if default is not None else 'cpu'})")


def add_quiet(p) -> None:
    p.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS if p.argument_default is argparse.SUPPRESS else False,
                   help="no progress bar and no printed table")


def add_resume(p, help: str = "continue the run in --out, skipping what is finished (same settings only)") -> None:
    p.add_argument("--resume", action="store_true", default=argparse.SUPPRESS if p.argument_default is argparse.SUPPRESS else False,
                   help=help)


def add_threads(p) -> None:
    p.add_argument("--threads", type=nonneg_int, default=0,
                   help="torch and BLAS threads per worker (default 0: cores // n-jobs, so workers x threads never "
                        "exceed the cores)")


def apply_threads(args, n_jobs: int = 1) -> int:
    """Apply a door's ``--threads`` (:mod:`moestat.threads`: 0 means cores // ``n_jobs``)."""
    from moestat.threads import limit_threads, resolve_threads

    return limit_threads(resolve_threads(getattr(args, "threads", 0), n_jobs))
