"""``python -m moestat.rates``: the same as ``moestat rates`` (the README's main door)."""

from moestat.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["rates"], prog_suffix=True))
