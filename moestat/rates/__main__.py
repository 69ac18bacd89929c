"""``python -m moestat.rates``: the same as ``moestat rates`` (the README's main door)."""

from moestat.cli.main import exit_process, main

if __name__ == "__main__":
    exit_process(main(["rates"], prog_suffix=True))
