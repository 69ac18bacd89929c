"""Re-judge the recorded contrasts by the replicate-paired bootstrap interval (issue 33, Scope 5).

Reads the recorded rows (``results.csv``) of both arms of every catalogue contrast -- nothing is
simulated again -- pairs them on ``(n, replicate)`` (the same ``SeedSequence`` stream,
:func:`moestat.rates.sweep.replicate_streams`), and decides "slow arm slower than fast arm" by
:func:`moestat.rates.verdicts.paired_contrast` over the fit's window.  The vanilla-against-
perturbed cosine routers (two routers fitted to the same data in one run) are re-judged the same
way for comparison.  Writes ``paired_contrasts.json`` next to this file::

    PYTHONPATH=. python records/catalogue/paired_contrasts.py   # from the repository root
"""

from __future__ import annotations

import json
from pathlib import Path

from moestat.cli.common import ArgumentParser
from moestat.io import atomic_write_json
from moestat.rates.extras import merge_extras
from moestat.rates.store import read_results
from moestat.rates.verdicts import PAIRED_BOOT, paired_arrays, paired_contrast

HERE = Path(__file__).resolve().parent
#: (entry, slow run, fast run, loss, slow router, fast router): the catalogue's contrasts, then the cosine routers
CONTRASTS = [
    ("lse-ffn-vs-linear", "linear", "ffn-sigmoid", "D2_ls", None, None),
    ("sigmoid-vs-softmax", "softmax", "sigmoid", "param_multi", None, None),
    ("multinomial-moe", "vanishing", "nonvanishing", "D1", None, None),
    ("cosine-exact", "routers", "routers", "voronoi", "cosine", "perturbed"),
    ("cosine-over", "routers", "routers", "voronoi", "cosine", "perturbed"),
]


def _window(entry: str, run: str, loss: str, router: str | None) -> tuple[int, int]:
    fits = json.loads((HERE / entry / run / "summary.json").read_text())["fits"]
    f = next(f for f in fits if f["loss"] == loss and (router is None or f["router"] == router))
    return tuple(f["window"])


def _rows(entry: str, run: str):
    """The run's recorded rows with its file losses (``extras.csv``) joined, as ``moestat rates`` fits them."""
    return merge_extras(read_results(HERE / entry / run / "results.csv"), HERE / entry / run / "extras.csv")


def main(argv: list[str] | None = None) -> list[dict]:
    # no options: anything given is refused (one line, exit 2) before the recorded JSON is rewritten
    ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    out = []
    for entry, slow, fast, loss, r_slow, r_fast in CONTRASTS:
        ws, wf = _window(entry, slow, loss, r_slow), _window(entry, fast, loss, r_fast)
        window = (max(ws[0], wf[0]), min(ws[1], wf[1]))
        ns, a, b = paired_arrays(_rows(entry, slow), _rows(entry, fast), loss, window, r_slow, r_fast)
        res = paired_contrast(ns, a, b, n_boot=PAIRED_BOOT, seed=0)
        row = {"entry": entry, "slow": f"{slow}{'/' + r_slow if r_slow else ''}", "fast": f"{fast}{'/' + r_fast if r_fast else ''}",
               "loss": loss, "window": list(window), **res}
        out.append(row)
        print(f"{entry:<20} {row['slow']} vs {row['fast']} ({loss}): {res['category']} -- {res['reason']}")
    atomic_write_json(HERE / "paired_contrasts.json", {"rule": "moestat.rates.verdicts.paired_contrast", "contrasts": out})
    return out


if __name__ == "__main__":
    main()
