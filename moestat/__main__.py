"""``python -m moestat <subcommand>``: the same as the installed ``moestat`` command."""

from moestat.cli.main import exit_process, main

if __name__ == "__main__":
    exit_process(main())
