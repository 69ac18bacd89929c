"""Plumbing shared by every subcommand of ``moestat``: one-line usage errors, exit codes, and the
options that mean the same thing wherever they appear.

Exit status, the same for every subcommand:

* ``0`` success (``moestat theory`` has its own codes for failed checks, see its help);
* ``1`` an unexpected error *after the work started*: the traceback is printed, because it is a
  bug or an environment failure, never the user's input;
* ``2`` bad input (arguments, files, an unusable output folder): one line on stderr, nothing
  written;
* ``1`` also for a fault of the environment (disk full, lost or missing cluster workers, a
  scheduler lost while the work runs; :mod:`moestat.faults`): one line saying what happened and
  that ``--resume`` continues, no traceback (``--debug`` shows it).  A scheduler that cannot be
  reached when the command starts is checked while validating: bad input, exit ``2``;
* ``130`` interrupted (Ctrl-C), ``143`` terminated (SIGTERM, e.g. a job scheduler's cancel): the
  doors that write each finished unit as they go keep it (``--resume`` continues); the others say
  that nothing was kept.

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
from typing import Any, Callable, Iterator, Sequence

from moestat.devices import resolve_device
from moestat.faults import EnvironmentFault, as_environment_fault
from moestat.folder_lock import DOOR_NAME, LOCK_NAME, check_door, lock_out, mark_door, read_door, unlock_all, unlock_out
from moestat.io import begin_command, end_command, ensure_writable_dir, note_out_root, refuse_links_in, regular_file
from moestat.model.gates import canonical_name
from moestat.resources import max_n_jobs
from moestat import threads  # read at call time: the usable cores are the machine's (tests substitute them)

__all__ = [
    "UsageError",
    "Terminated",
    "usage_errors",
    "run_main",
    "ArgumentParser",
    "positive_int",
    "nonneg_int",
    "nonneg_float",
    "seed_int",
    "MAX_SEED",
    "n_jobs_int",
    "threads_int",
    "learning_rate",
    "positive_finite",
    "MAX_LR",
    "input_file",
    "int_list",
    "check_comma_list",
    "name_choice",
    "add_seed",
    "add_out",
    "out_dir",
    "prepare_out",
    "cleaned_on_interrupt",
    "interrupts_held",
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
    _CURRENT_DOOR[0] = prog.split()[1] if prog.startswith("moestat ") and len(prog.split()) > 1 else None
    restore = _terminate_like_ctrl_c()
    begin_command()  # record the inputs and --out of this run: no write replaces one or leaves the other
    try:
        rc = main(argv)
        return 0 if rc is None else int(rc)
    except UsageError as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: {_first_line(exc)}\n")
        return 2
    except Terminated:
        with interrupts_held():  # a second Ctrl-C or SIGTERM while ending: no traceback
            sys.stderr.write(f"{prog}: terminated (SIGTERM); {on_interrupt}\n")
        return 143
    except KeyboardInterrupt:
        with interrupts_held():
            sys.stderr.write(f"{prog}: interrupted; {on_interrupt}\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - shown in full: an internal error is not bad input
        fault = exc if isinstance(exc, EnvironmentFault) else as_environment_fault(exc)
        if fault is not None:  # the machine, the disk or the cluster, not the package: one line
            if debug:
                traceback.print_exc()
            text = _first_line(fault)
            if on_interrupt != KEEPS:  # a door without --resume: it is run again
                text = text.replace("run with --resume", "run it again")
            tail = on_interrupt if on_interrupt != KEEPS else "finished results are kept" if "--resume" in text else KEEPS
            sys.stderr.write(f"{prog}: {text}; {tail}\n")
            return 1
        traceback.print_exc()
        sys.stderr.write(f"{prog}: internal error ({type(exc).__name__}): {_first_line(exc)}\n"
                         "this is not a problem with your input; please report it with the traceback above\n")
        return 1
    finally:
        with interrupts_held():  # the lock is released whole, whatever is pressed meanwhile
            unlock_all()
            end_command()
            _CURRENT_DOOR[0] = None
        restore()


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while a command cleans up after itself.

    The first Ctrl-C already ends the command; a second one (a double press, or ``timeout``'s
    SIGTERM arriving just after) during the cleanup would interrupt it half-way -- a
    ``KeyboardInterrupt`` traceback from the lock's release, a lock file or a door marker left
    behind that makes the rerun refuse the folder.  The signals are ignored for the few
    milliseconds of the cleanup and the handlers restored after it; ``kill -9`` still ends the
    process (its lock is then recognised as stale).  Outside the main thread nothing is changed.
    """
    import signal
    import threading

    held = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                held[sig] = signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                pass
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's cancel, ``kill``): unwinds like Ctrl-C, so finished work is kept."""


def _terminate_like_ctrl_c() -> Callable[[], None]:
    """Make SIGTERM raise :class:`Terminated` in the main thread; return what restores the old handler."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, old)


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


from moestat.seeding import MAX_SEED  # noqa: E402  (one bound for every seed flag; see there)


def seed_int(text: str) -> int:
    """argparse type of every seed flag: an integer in ``[0, MAX_SEED]``."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    if v > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed of at most 2**63 - 1 = {MAX_SEED}, got {text!r}")
    return v


def n_jobs_int(text: str) -> int:
    """argparse type of ``--n-jobs``: a positive integer the machine can run
    (:func:`moestat.resources.max_n_jobs`: a few per usable core, under the process limit)."""
    v = positive_int(text)
    limit, why = max_n_jobs()
    if v > limit:
        raise argparse.ArgumentTypeError(f"{v} worker processes exceed this machine's limit of {limit} ({why})")
    return v


def threads_int(text: str) -> int:
    """argparse type of ``--threads``: 0 (the default rule) up to the usable cores (more threads than
    cores only wait on each other; 100 000 of them exhaust memory)."""
    v = nonneg_int(text)
    cores = threads.available_cores()
    if v > cores:
        raise argparse.ArgumentTypeError(f"{v} threads exceed the {cores} usable core{'s' if cores > 1 else ''} "
                                         "of this process (os.sched_getaffinity)")
    return v


def positive_finite(text: str) -> float:
    """argparse type: a finite number > 0 (``inf`` and ``nan`` refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (0 < v < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


#: Largest ``--lr`` of the network doors.  Adam and RMSprop move every weight by about ``lr`` per
#: step whatever the gradient's scale, so above 1 the first steps put weights of unit-scale
#: networks far out of range (``--lr 1e300`` overflows to inf at once); SGD's steps are
#: ``lr x gradient``, no safer.
MAX_LR = 1.0


def learning_rate(text: str) -> float:
    """argparse type of ``--lr``: a number in ``(0, MAX_LR]``."""
    v = positive_finite(text)
    if v > MAX_LR:
        raise argparse.ArgumentTypeError(f"expected a learning rate in (0, {MAX_LR:g}] (Adam/RMSprop move each weight by "
                                         f"about lr per step), got {text!r}")
    return v


def input_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` if it is a regular file, else a one-line ``ValueError`` saying what it is
    (:func:`moestat.io.regular_file`)."""
    return regular_file(path, flag)


def nonneg_float(text: str) -> float:
    """argparse type: a finite float >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return v


def check_comma_list(text: str | None, flag: str) -> None:
    """Refuse an empty name in a comma list (``dense,,cosine``: a typo, not a request), as
    :func:`name_choice` does for the lists it parses."""
    if text is not None and "," in text and not all(t.strip() for t in text.split(",")):
        raise ValueError(f"{flag}: an empty name in the comma list {text!r}")


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
    p.add_argument("--seed", type=seed_int, default=default if default is not None else argparse.SUPPRESS,
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


def prepare_out(out: str | os.PathLike, resume: bool | None, door: str | None = None) -> Path:
    """Check ``--out``, create it and take its lock: the last step of a door's validation.

    A folder that already holds anything is refused unless ``resume`` is true (the door then
    checks that what is there belongs to the same configuration); ``resume=None`` is a door without
    ``--resume``.  A folder another live run is writing into is refused naming that run, and a
    ``--resume`` into another door's folder is refused (:mod:`moestat.folder_lock`).  The lock is
    held until the command ends (:func:`run_main` releases it; a killed run's lock is stale and
    taken over); the door marker is written once the folder is accepted.

    ``door`` defaults to the subcommand :func:`run_main` is running.  A folder to resume that
    holds a symbolic link, device or FIFO at any depth (``results.csv`` linked to a file
    elsewhere, ``rates/run`` linked to a folder elsewhere, ...) is refused naming it: nothing in
    ``--out`` is ever written through a link.

    Raises
    ------
    ValueError
        One line naming ``--out``.
    """
    door = door or _CURRENT_DOOR[0]
    path = Path(out)
    if str(out).strip() == "":
        raise ValueError("--out must name a folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} exists and is not a directory")
    existed = path.is_dir()
    locked = False
    if existed and door and os.access(path, os.W_OK | os.X_OK):
        lock_out(path, door)  # first: a folder in use is refused naming its holder, whatever else it holds
        locked = True
    try:
        # a lock file counts as nothing only when it is one: a link of that name is not ours; nor does
        # this door's own marker alone (a start interrupted before it wrote anything left it)
        marker = path / DOOR_NAME  # read only when a regular file: a FIFO there would block the read
        own = existed and door and not marker.is_symlink() and marker.is_file() and read_door(path) == door
        ours = {LOCK_NAME} | ({DOOR_NAME} if own else set())
        if existed and not resume and any(p.name not in ours or p.is_symlink() or not p.is_file() for p in path.iterdir()):
            how = "pass --resume to continue the run in it, or choose" if resume is not None else "this door has no --resume; choose"
            raise ValueError(f"--out {path} is not empty; {how} an empty or new folder")
        if existed and resume:
            refuse_links_in(path)  # a link in --out, at any depth, would take a write (results.csv, ...) outside it
        if existed and resume and door:
            check_door(path, door)
        ensure_writable_dir(path)
        if door and not locked:
            lock_out(path, door)
            locked = True
        note_out_root(path)  # every later write below --out refuses a link folder put there meanwhile
        if door:
            mark_door(path, door)
    except BaseException:
        if locked:
            unlock_out(path)
        raise
    return path


#: The door :func:`run_main` is running (``rates``, ``softmoe``, ...): the owner :func:`prepare_out` records.
_CURRENT_DOOR: list = [None]


@contextmanager
def cleaned_on_interrupt(out: str | os.PathLike) -> Iterator[None]:
    """For doors that write their results only at the end: on Ctrl-C -- or any failure before the
    results are written -- remove ``out`` if it holds nothing but its lock and door marker (the door
    created it), so an interrupted or failed start leaves nothing behind that a rerun would refuse
    as "not empty" (a folder holding only ``.moestat-door``)."""
    try:
        yield
    except BaseException:
        with interrupts_held():  # a second Ctrl-C must not leave the marker half-removed
            path = Path(out)
            if path.is_dir() and not any(p.name not in (LOCK_NAME, DOOR_NAME) for p in path.iterdir()):
                unlock_out(path)
                (path / DOOR_NAME).unlink(missing_ok=True)
                if not any(path.iterdir()):
                    path.rmdir()
        raise


def add_n_jobs(p, default: int | None = 1) -> None:
    p.add_argument("--n-jobs", type=n_jobs_int, default=default if default is not None else argparse.SUPPRESS,
                   help=f"parallel workers; results do not depend on it (default {default if default is not None else 1})")


def device_name(text: str) -> str:
    """argparse type: a device name :func:`moestat.devices.resolve_device` accepts on this machine
    (returned as given, so ``auto`` is resolved where the work runs)."""
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
    p.add_argument("--threads", type=threads_int, default=0,
                   help="torch and BLAS threads per worker, at most the usable cores (default 0: cores // n-jobs, so "
                        "workers x threads never exceed the cores)")


def apply_threads(args, n_jobs: int = 1) -> int:
    """Apply a door's ``--threads`` (:mod:`moestat.threads`: 0 means cores // ``n_jobs``)."""
    return threads.limit_threads(threads.resolve_threads(getattr(args, "threads", 0), n_jobs))


def argtype(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a library check that raises ``ValueError`` (the message becomes argparse's)."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def check_config_file(parser: argparse.ArgumentParser, path: str, values: dict[str, Any]) -> None:
    """Check every value of a ``--config`` file with the type of its flag in ``parser``, whether or not
    a flag overrides it (a file must not hold a value the command line would refuse, unnoticed until the
    day the flag is dropped).  Keys the parser does not know are left to the configuration's own checks."""
    types = {a.dest: a.type for a in parser._actions if a.type is not None}
    for key, value in values.items():
        parse = types.get(key)
        if parse is None or isinstance(value, bool):
            continue
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        try:
            parse(text)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"config file {path}: {key} = {value!r}: {exc}") from None
