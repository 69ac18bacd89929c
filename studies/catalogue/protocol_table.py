"""The catalogue under the one protocol, entry by entry: writes ``records/catalogue_protocol/summary.json``
``table.txt``, ``count.rst`` (the count as the catalogue page includes it) and ``forest.png`` (every
prediction with an exponent against its measured slope) from each entry's
``records/catalogue_protocol/KEY/catalogue.json``.

Per entry and per prediction: the category as it fell, the prediction's standing (where its exponent
comes from), and the hypotheses of each run's truth as ``moestat check`` computes them for the run's
own theorem (:func:`moestat.theorems.catalogue_hypotheses.catalogue_hypotheses`, on this checkout's
package; a report that carries its own hypotheses is read as it is).  The count: entries whose every
prediction is ``consistent``, and prediction rows by category, split by standing.  An entry not run
yet is listed as such; nothing is counted for it.

Usage (from the repository root)::

    PYTHONPATH=. python studies/catalogue/protocol_table.py                      # the table
    PYTHONPATH=. python studies/catalogue/protocol_table.py --record KEY OUTROOT  # record a finished run

``--record`` copies ``OUTROOT/KEY`` (written by ``run_protocol.sh``) into
``records/catalogue_protocol/KEY`` with a ``how.json`` (the command, the source commit from
``$SRC/COMMIT``, the dates from ``OUTROOT/log.txt``, wall and CPU from ``OUTROOT/KEY.time``) and adds
its ``[[record]]`` to ``records/index.toml``.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "records" / "catalogue_protocol"


def _hypotheses(key: str, report: dict) -> list[dict]:
    carried = [{"run": r["label"], **h} for r in report.get("runs", []) for h in (r.get("hypotheses") or [])]
    if carried:
        return carried
    from moestat.theorems.catalogue_hypotheses import catalogue_hypotheses

    return [{"run": h["run"], "router": h["router"], "theorem": h["theorem"], "met": h["met"], "failing": h["failing"]}
            for h in catalogue_hypotheses([key])]


def build() -> dict:
    from moestat.rates.catalogue import ENTRIES
    from moestat.rates.catalogue_protocol import describe

    entries, rows_all = [], []
    for key in ENTRIES:
        path = RECORD / key / "catalogue.json"
        if not path.is_file():
            entries.append({"key": key, "run": False})
            continue
        rep = json.loads(path.read_text(encoding="utf-8"))
        if rep.get("mode") != "protocol":
            raise ValueError(f"{path} was not written under the protocol (mode {rep.get('mode')!r})")
        rows = [{"entry": key, **{k: p.get(k) for k in ("run", "loss", "prediction", "predicted", "standing", "sided", "slope", "ci",
                                                        "category", "reason")},
                 "fixed_truth": (p.get("fixed_truth") or {}).get("category")} for p in rep["predictions"]]
        rows_all += rows
        entries.append({"key": key, "run": True, "paper": f"{rep['paper']['authors']} ({rep['paper']['year']})",
                        "all_consistent": bool(rows) and all(r["category"] == "consistent" for r in rows),
                        "counts": rep["counts"], "wall_s": rep.get("wall_s"),
                        "grid": [{"run": r["label"], "sample_sizes": r["sample_sizes"], "reps": r["reps"]} for r in rep["runs"]],
                        "hypotheses": _hypotheses(key, rep), "predictions": rows})
    ran = [e for e in entries if e["run"]]
    by_standing: dict[str, Counter] = {}
    for r in rows_all:
        by_standing.setdefault(r["standing"] or "unstated", Counter())[r["category"] or "none"] += 1
    return {"protocol": describe(), "entries_run": len(ran), "entries_total": len(entries),
            "not_run": [e["key"] for e in entries if not e["run"]],
            "entries_all_consistent": [e["key"] for e in ran if e["all_consistent"]],
            "rows_by_category": dict(Counter(r["category"] or "none" for r in rows_all)),
            "rows_by_standing_and_category": {k: dict(v) for k, v in by_standing.items()},
            "entries": entries}


def table(summary: dict) -> str:
    lines = [f"The catalogue under the one protocol ({summary['protocol']})",
             f"entries run: {summary['entries_run']} of {summary['entries_total']}"
             + (f" (not run: {', '.join(summary['not_run'])})" if summary["not_run"] else ""),
             f"entries whose every prediction is consistent: {len(summary['entries_all_consistent'])} of "
             f"{summary['entries_run']} run ({', '.join(summary['entries_all_consistent']) or 'none'})",
             "prediction rows by category: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["rows_by_category"].items())),
             "by standing: " + "; ".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                                         for s, c in summary["rows_by_standing_and_category"].items()), ""]
    head = f"{'entry':<20} {'run':<14} {'loss':<26} {'prediction':<34} {'standing':<14} {'slope':>7}  {'95% CI':<17} category"
    lines += [head, "-" * len(head)]
    for e in summary["entries"]:
        if not e["run"]:
            lines.append(f"{e['key']:<20} (not run yet)")
            continue
        for r in e["predictions"]:
            ci = "-" if not r["ci"] or r["ci"][0] is None else f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
            sl = "-" if r["slope"] is None else f"{r['slope']:+.3f}"
            lines.append(f"{e['key']:<20} {r['run']:<14} {r['loss']:<26} {r['prediction'][:34]:<34} {r['standing']:<14} "
                         f"{sl:>7}  {ci:<17} {r['category']}"
                         + (f" (by its two-point judge; the fixed-truth fit's own: {r['fixed_truth']})" if r["fixed_truth"] else ""))
        if not e["hypotheses"]:
            lines.append(f"{'':<20} hypotheses: its runs name no theorem whose conditions moestat check computes")
        for h in e["hypotheses"]:
            met = {True: "met", False: "NOT met", None: "not checked"}[h["met"]]
            lines.append(f"{'':<20} hypotheses of {h['run']}{' ' + h['router'] if h.get('router') else ''} "
                         f"against {h['theorem']}: {met}" + ("" if h["met"] else f" ({'; '.join(h['failing'])[:160]})"))
    return "\n".join(lines) + "\n"


def count_rst(summary: dict) -> str:
    """The count as it fell, in reStructuredText (``docs/guide/catalogue.rst`` includes it).

    A theorem reproduction is a ``consistent`` row whose prediction was read in the paper's full text
    (``moestat.theorems.registry.THEOREM_STANDING``); every other consistent row is a qualitative
    claim or of lower standing, and rows whose exponent was not read are counted apart."""
    from moestat.theorems.registry import THEOREM_STANDING, UNREAD_STANDING

    rows = [r for e in summary["entries"] if e["run"] for r in e["predictions"]]
    cons = [r for r in rows if r["category"] == "consistent"]
    theorem = [r for r in cons if r["standing"] == THEOREM_STANDING]
    unread = [r for r in rows if r["standing"] == UNREAD_STANDING]
    cats = Counter(r["category"] or "none" for r in rows)
    run, total = summary["entries_run"], summary["entries_total"]
    every = summary["entries_all_consistent"]
    lines = [f"**The count, as it fell** ({run} of {total} entries run"
             + (f"; not run: {', '.join('``' + k + '``' for k in summary['not_run'])}" if summary["not_run"] else "")
             + f").  Entries whose every prediction is *consistent*: **{len(every)} of {run}**"
             + (f" ({', '.join('``' + k + '``' for k in every)})" if every else "") + ".  "
             f"Prediction rows: {len(rows)}, of which "
             + ", ".join(f"{v} *{k}*" for k, v in sorted(cats.items(), key=lambda kv: (-kv[1], kv[0]))) + ".  "
             f"Theorem reproductions (a *consistent* row whose prediction was read in the paper's full text): "
             f"**{len(theorem)}**; the other {len(cons) - len(theorem)} *consistent* rows are qualitative claims or of "
             f"lower standing; {len(unread)} rows have no exponent (``{UNREAD_STANDING}``) and are reported, not judged.",
             "", "Why the *inconclusive* rows are: " + "; ".join(f"{v} {k}" for k, v in _why_inconclusive(rows).items()) + ".",
             "", ".. list-table:: Prediction rows by standing and category (the protocol's records)",
             "   :header-rows: 1", ""]
    order = sorted(cats, key=lambda c: (-cats[c], c))
    lines += ["   * - standing"] + [f"     - {c}" for c in order] + ["     - rows"]
    for st, c in summary["rows_by_standing_and_category"].items():
        lines += [f"   * - {st}"] + [f"     - {c.get(k, 0)}" for k in order] + [f"     - {sum(c.values())}"]
    return "\n".join(lines) + "\n"


#: The reasons an interval leaves a rate undecided, as :func:`moestat.rates.verdicts.judge_interval` and the
#: paired contrast word them (first match wins).
_WHY = (("wide (>", "an interval wider than the cap 0.25 (even at the replicates the plan reached)"),
        ("independent halves", "the two independent halves of the replicates disagree"),
        ("contains 0", "a paired contrast whose interval contains 0"))


def _why_inconclusive(rows: list[dict]) -> dict[str, int]:
    out: Counter = Counter()
    for r in rows:
        if r["category"] == "inconclusive":
            out[next((w for key, w in _WHY if key in (r.get("reason") or "")), "another reason (see the row's reason)")] += 1
    return dict(out)


def forest(summary: dict, path: Path) -> None:
    """Every prediction with an exponent: measured slope and 95% interval beside the predicted exponent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"consistent": "tab:green", "near": "tab:olive", "inconsistent": "tab:red", "inconclusive": "tab:grey",
               "pre-asymptotic": "tab:orange", "floor": "tab:purple", "hypotheses not met": "black"}
    rows = [r for e in summary["entries"] if e["run"] for r in e["predictions"]
            if isinstance(r.get("predicted"), (int, float)) and r["slope"] is not None and r["ci"] and r["ci"][0] is not None]
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(rows) + 1.6))
    for i, r in enumerate(reversed(rows)):
        c = colours.get(r["category"], "tab:blue")
        ax.plot(r["ci"], [i, i], color=c, lw=2.2)
        ax.plot(r["slope"], i, "o", color=c, ms=5)
        if r.get("sided") == "upper":  # one-sided: any slope at or below the bound is consistent with it
            ax.annotate("", xy=(r["predicted"] - 0.12, i), xytext=(r["predicted"], i),
                        arrowprops=dict(arrowstyle="->", color="k", lw=0.9))
        ax.plot(r["predicted"], i, "x", color="k", ms=7, mew=1.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['entry']} {r['run']} {r['loss']}" for r in reversed(rows)], fontsize=7)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel("slope of log(per-n median loss) on log n, 95% interval (x: the predicted exponent)")
    handles = [plt.Line2D([], [], color=c, lw=2.2, label=k) for k, c in colours.items()
               if any(r["category"] == k for r in rows)]
    handles.append(plt.Line2D([], [], color="k", marker="x", lw=0, label="predicted"))
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    ax.set_title(f"The catalogue under the one protocol: {len(rows)} predictions with an exponent "
                 f"({summary['entries_run']} of {summary['entries_total']} entries run)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _time_v(path: Path) -> dict:
    """Wall, user and system seconds and peak resident memory from ``/usr/bin/time -v``."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, val = line.strip().partition(": ")
        if key == "User time (seconds)":
            out["user_s"] = float(val)
        elif key == "System time (seconds)":
            out["sys_s"] = float(val)
        elif key.startswith("Elapsed (wall clock) time"):
            parts = [float(x) for x in val.split(":")]
            out["wall_s"] = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
        elif key == "Maximum resident set size (kbytes)":
            out["peak_rss_gb"] = round(int(val) / 1024 ** 2, 2)
        elif key == "Exit status":
            out["exit_status"] = int(val)
    return out


def record(key: str, outroot: Path, src: Path) -> None:
    import shutil

    folder, dest = outroot / key, RECORD / key
    rep = json.loads((folder / "catalogue.json").read_text(encoding="utf-8"))
    if rep.get("mode") != "protocol":
        raise SystemExit(f"{folder}: not a protocol run")
    timing = _time_v(outroot / f"{key}.time")
    if timing.get("exit_status") != 0:
        raise SystemExit(f"{key}: the run did not exit 0 ({timing})")
    parts = sorted(outroot.glob(f"{key}.time.part*"))  # a run stopped (SIGTERM) and continued with --resume
    if parts:
        earlier = [_time_v(p) for p in parts]
        timing = {"parts": earlier + [timing], "resumed": len(parts),
                  **{k: round(sum(t.get(k, 0.0) for t in earlier + [timing]), 2) for k in ("wall_s", "user_s", "sys_s")},
                  "peak_rss_gb": max(t.get("peak_rss_gb", 0.0) for t in earlier + [timing]), "exit_status": 0}
    log = [ln for ln in (outroot / "log.txt").read_text(encoding="utf-8").splitlines() if f"== {key} " in ln]
    commit = (src / "COMMIT").read_text().strip() if (src / "COMMIT").is_file() else "see the declaration"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(folder, dest)
    how = {"command": f"SRC=<git archive of {commit}> OUTROOT=<folder> studies/catalogue/run_protocol.sh {key} "
                      f"(OMP_NUM_THREADS=1 nice -n 10 python -m moestat reproduce {key} --protocol --n-jobs {os.environ.get('N_JOBS', '2')} --quiet "
                      "--out OUTROOT/KEY, timed by /usr/bin/time -v)",
           "commit": commit, "log": log, "time": timing,
           "machine": "the project's 2-core machine, shared with other jobs (load average 6 to 11 during the runs)",
           "declaration": "records/declarations/catalogue/24-one-protocol-for-every-entry.md"}
    (dest / "how.json").write_text(json.dumps(how, indent=1) + "\n", encoding="utf-8")
    index = ROOT / "records" / "index.toml"
    text = index.read_text(encoding="utf-8")
    rid = f"catalogue_protocol/{key}"
    if f'id = "{rid}"' not in text:
        date = log[-1].split()[-1][:10] if log else ""
        text += (f'\n[[record]]\nid = "{rid}"\npath = "records/catalogue_protocol/{key}"\nkind = "run"\n'
                 f'serves = ["catalogue:{key}", "docs/guide/catalogue.rst"]\nstatus = "current"\n'
                 f'declaration = "records/declarations/catalogue/24-one-protocol-for-every-entry.md"\n'
                 f'made_by = {{ command = "studies/catalogue/run_protocol.sh {key} (how.json)", commit = "{commit}", date = "{date}" }}\n'
                 f'made_by_from = ["catalogue_protocol/{key}/how.json"]\nrecorded_in = "this commit"\nformer_path = []\n')
    # the protocol run is now the entry's catalogue record; its own-design run stays current as the design's record
    text = _design_serves(text, key)
    text = _declaration_lists(text, rid)
    index.write_text(text, encoding="utf-8")
    print(f"recorded {dest} ({timing})")


DECLARATION = "records/declarations/catalogue/24-one-protocol-for-every-entry.md"


def _design_serves(text: str, key: str) -> str:
    """The index with the entry's own-design record (``records/catalogue/KEY``) serving ``catalogue-design:KEY``."""
    start = text.index(f'[[record]]\nid = "catalogue/{key}"\n')
    end = text.find("\n[[", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end].replace(f'"catalogue:{key}"', f'"catalogue-design:{key}"')
    return text[:start] + block + text[end:]


def _declaration_lists(text: str, rid: str) -> str:
    """The protocol declaration's ``records`` list in the index, with ``rid`` in it."""
    import re

    m = re.search(r'(\[\[declaration\]\]\npath = "' + re.escape(DECLARATION) + r'"\n(?:.*\n)*?records = )\[(.*)\]', text)
    if m is None:
        raise SystemExit(f"the index lists no declaration {DECLARATION}")
    ids = [x.strip().strip('"') for x in m.group(2).split(",") if x.strip()]
    if rid not in ids:
        ids.append(rid)
    return text[:m.start()] + m.group(1) + "[" + ", ".join(f'"{i}"' for i in ids) + "]" + text[m.end():]


def record_table() -> None:
    """The cross-entry table's record (``table.txt`` with ``summary.json``) in the index."""
    index = ROOT / "records" / "index.toml"
    text = index.read_text(encoding="utf-8")
    rid = "catalogue_protocol/table"
    if f'id = "{rid}"' not in text:
        text += (f'\n[[record]]\nid = "{rid}"\npath = "records/catalogue_protocol/table.txt"\n'
                 'files = ["records/catalogue_protocol/summary.json", "records/catalogue_protocol/count.rst", '
                 '"records/catalogue_protocol/forest.png"]\nkind = "report"\n'
                 'serves = ["catalogue-protocol", "docs/guide/catalogue.rst"]\nstatus = "current"\n'
                 f'declaration = "{DECLARATION}"\n'
                 'made_by = { command = "PYTHONPATH=. python studies/catalogue/protocol_table.py", commit = "this commit", date = "2026-12-06" }\n'
                 'made_by_from = ["studies/catalogue/protocol_table.py"]\nrecorded_in = "this commit"\nformer_path = []\n')
        index.write_text(_declaration_lists(text, rid), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    import os

    from moestat.cli.common import ArgumentParser  # the doors' parser: a bad option is one line, exit 2

    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", nargs=2, metavar=("KEY", "OUTROOT"), help="copy the finished run OUTROOT/KEY into the "
                    "records (SRC from the environment names its source); default: write the cross-entry table")
    args = ap.parse_args(argv)
    if args.record:
        key, outroot = args.record
        if not (Path(outroot) / key / "catalogue.json").is_file():
            ap.error(f"{outroot}/{key}: no catalogue.json (not a finished run)")
        record(key, Path(outroot), Path(os.environ.get("SRC", "/nonexistent")))
        return 0
    summary = build()
    RECORD.mkdir(parents=True, exist_ok=True)
    if RECORD == ROOT / "records" / "catalogue_protocol":
        record_table()
    (RECORD / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    text = table(summary)
    (RECORD / "table.txt").write_text(text, encoding="utf-8")
    (RECORD / "count.rst").write_text(count_rst(summary), encoding="utf-8")
    forest(summary, RECORD / "forest.png")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
