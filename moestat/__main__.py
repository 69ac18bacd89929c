"""``python -m moestat <subcommand>``: the same as the installed ``moestat`` command."""

from moestat.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
