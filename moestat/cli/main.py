"""The ``moestat`` command: ``moestat <subcommand> [options]``.

Installed through ``[project.scripts]``; ``python -m moestat <subcommand>`` is the same, and
``python -m moestat.rates`` is kept as the README's main door.  Each subcommand lives in its own
module ``moestat.cli.cmd_<name>`` with a ``main(argv)`` that parses, validates (exit 2 on bad input)
and calls library functions; this module only dispatches.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn, Sequence

from moestat.cli.common import DEBUG_ENV, KEEPS, run_main
from moestat import __version__

__all__ = ["SUBCOMMANDS", "main"]

#: name -> (module, one-line summary), in the order ``moestat --help`` lists them.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "rates": ("moestat.cli.cmd_rates", "sweep n and replicates, fit rates with 95% CIs, compare with the theorems, plot"),
    "select": ("moestat.cli.cmd_select", "how many experts: DSC (dendrogram of mixing measures) against AIC/BIC/ICL over n"),
    "check": ("moestat.cli.cmd_check", "pre-flight of a scenario: Fisher information of the truth, Cramér-Rao sd per n"),
    "reproduce": ("moestat.cli.cmd_reproduce", "the rate catalogue: a published theorem reproduced in one command (--list)"),
    "plot": ("moestat.cli.cmd_plot", "re-draw a rates run's convergence figure from its results (no refit)"),
    "theory": ("moestat.cli.cmd_theory", "theorem -- predicted -- measured (CI) -- verdict table"),
    "softmoe": ("moestat.cli.cmd_softmoe", "Soft MoE: the ||X||_2 target and expert-subset selection"),
    "toy": ("moestat.cli.cmd_toy", "the thesis's toy task decompositions and training methods"),
    "realdata": ("moestat.cli.cmd_realdata", "every gate on Fashion-MNIST / digits"),
    "tagging": ("moestat.cli.cmd_tagging", "the sparse-gating study's BiLSTM + MoE on CoNLL-2003 NER / SQuAD 1.1 (or a demo)"),
    "lm": ("moestat.cli.cmd_lm", "linear / cosine / perturbed cosine routers in a character-level MoE Transformer"),
}


def _help() -> str:
    width = max(len(n) for n in SUBCOMMANDS)
    lines = [
        "usage: moestat [--version] [--debug] <subcommand> [options]",
        "",
        f"moestat {__version__}: statistical simulation and estimation rates of Mixture-of-Experts models.",
        "",
        "subcommands:",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()),
        "",
        "options:",
        "  -h, --help  show this message and exit",
        "  --version   print the version and exit",
        "  --debug     show the traceback of usage errors too",
        "",
        "`moestat <subcommand> --help` shows a subcommand's options; `python -m moestat` is the same command.",
    ]
    return "\n".join(lines) + "\n"


def _short_usage() -> str:
    """What a bare ``moestat`` prints: one line, as every other usage error, naming the
    subcommands and where their help is."""
    return (f"moestat: error: name a subcommand (usage: moestat <subcommand> [options]; subcommands: "
            f"{', '.join(SUBCOMMANDS)}); `moestat --help` says what each does\n")


def main(argv: Sequence[str] | None = None, *, prog_suffix: bool = False) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to a subcommand and return its exit status.

    ``prog_suffix`` is set by ``python -m moestat.rates``: the rest of ``sys.argv`` is appended to
    ``argv`` (which then names only the subcommand).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if prog_suffix:
        args = args + list(sys.argv[1:])
    while args and args[0] == "--debug":
        os.environ[DEBUG_ENV] = "1"
        args = args[1:]
    if not args:  # a missing subcommand is a usage error: a short usage on stderr, exit 2
        sys.stderr.write(_short_usage())
        return 2
    if sys.stdout is None:  # started with stdout closed (``>&-``): print() would drop the output without a word
        sys.stderr.write("moestat: error: standard output is closed, so what this command prints would be lost; "
                         "redirect it to a file (or to /dev/null) instead\n")
        return 2
    if args[0] in ("-h", "--help"):
        sys.stdout.write(_help())
        return 0
    if args[0] == "--version":
        print(f"moestat {__version__}")
        return 0
    name = args[0].replace("_", "-")
    if name not in SUBCOMMANDS:
        sys.stderr.write(f"moestat: error: unknown subcommand {args[0]!r}; expected one of {', '.join(SUBCOMMANDS)}\n")
        return 2
    # the CLI's lazy boundary: a subcommand's module (and the library under it) loads only when it runs
    module = importlib.import_module(SUBCOMMANDS[name][0])
    prog = f"moestat {name}"
    if len(args) > 1 and args[1] in getattr(module, "SUBCOMMANDS", ()):  # one prefix: argparse's and ours agree
        prog += f" {args[1]}"
    return run_main(module.main, args[1:], prog=prog, on_interrupt=getattr(module, "ON_INTERRUPT", KEEPS))


def release_for_exit() -> None:
    """Make the interpreter's exit cheap once a door has written everything.

    Measured on the main job (2 cores, quiet): about 2.9 s passed between the door's return and
    the process's end -- about 0.9 s joining the idle loky pool's threads (its workers wait out an
    idle timeout of 300 s) and 1-1.7 s of the final garbage collection over the objects of torch,
    matplotlib, pandas and scipy.  So: the reusable loky executor, if one was started, is shut
    down with its (idle) workers, and every live object is moved to the permanent generation
    (:func:`gc.freeze`), which the last collections skip; objects are still released by reference
    counting.  Called only at a process's exit, never by a door run in-process (tests, notebooks).
    """
    import gc

    # joblib's loky pool of the sweep (moestat.rates.backends), only if this process loaded it (a
    # door that never did pays no import); ``_executor`` is loky's private name, so looked up softly
    reusable_executor = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(reusable_executor, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)
    gc.freeze()


def exit_process(rc: int) -> NoReturn:
    """End the process with status ``rc`` after :func:`release_for_exit` (the entry points' exit).

    Where :func:`may_end_now` allows it the process ends at once (:func:`end_now`: the ``atexit``
    handlers, the standard streams flushed, then ``os._exit``); else by ``SystemExit``, the
    interpreter's own shutdown.
    """
    release_for_exit()
    if isinstance(rc, int) and may_end_now():
        end_now(rc)
    raise SystemExit(rc)


def may_end_now() -> bool:
    """Whether :func:`end_now` may end this process: no other thread that the interpreter's own
    shutdown would wait for (a non-daemon thread still working is joined by ``SystemExit``, killed
    by ``os._exit``), not an interactive session (``python -i``), and CPython's ``atexit`` runner
    at hand."""
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return False
    import atexit

    return not sys.flags.inspect and callable(getattr(atexit, "_run_exitfuncs", None))


def end_now(rc: int) -> NoReturn:
    """Run the ``atexit`` handlers, flush ``stdout`` and ``stderr`` and end the process with ``rc``
    (``os._exit``), skipping the interpreter's teardown of its modules.

    Why: after the main job has written everything, the teardown of the objects of torch,
    numpy and the package took 0.2-0.5 s of its wall time on the project's 2-core machine (the
    ``atexit`` handlers 0.01-0.02 s).  What an exit must still do is done here: the ``atexit``
    handlers run (multiprocessing joins its children, logging flushes, coverage saves its data), the
    standard streams are flushed, and an error flushing them gives status 120 as Python's own exit
    does; the package writes its files whole and closes them before a door returns.
    """
    import atexit

    atexit._run_exitfuncs()
    code = rc
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (``moestat ... | head``), a closed stream
            code = code or 120
    os._exit(code)


def console_main() -> None:
    """Entry point of the installed ``moestat`` script."""
    exit_process(main())
