"""``python -m theory_checks``: see :mod:`theory_checks.run`."""

from moestat.cli import run_main

from .run import main

if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="python -m theory_checks"))
