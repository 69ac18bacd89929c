"""Render the catalogue's recorded verdicts into docs/guide/catalogue.rst, under the *current* rules.

Every verdict the page states of a recorded run is rendered here, never typed by hand (issue 33,
Scope 8): each entry's recorded full run is judged again from its rows by
:func:`moestat.rates.catalogue_views.rejudge_recorded` (no model is refitted), and the blocks of
``catalogue.rst`` between the markers ::

    .. rendered:begin NAME
    .. rendered:end NAME

are replaced by :func:`render_blocks`.  ``tests/rates/test_catalogue_docs.py`` fails when the page
differs from the rendering, so a rule change that moves a category shows up as a failing test until
the page is re-rendered.

Where the records are.  ``records/catalogue/<key>/<run>/`` (``results.csv``, ``extras.csv``,
``provenance.json``), the entry's one current record (``records/index.toml``).  A run's provenance
names the scenario file by the absolute path it ran from (another checkout); the rendering reads the
file the run ran with instead: ``scenario_as_run.toml`` in the run's folder where the catalogue's
file has changed since (the truths replaced by issue 33), else the shipped file of the same name.

Usage (from the repository root)::

    python studies/tools/render_catalogue_rst.py            # print the blocks
    python studies/tools/render_catalogue_rst.py --write    # rewrite them in docs/guide/catalogue.rst
    python studies/tools/render_catalogue_rst.py --check    # exit 1 when the page differs
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "records" / "catalogue"  # the catalogue's records
RST = ROOT / "docs" / "guide" / "catalogue.rst"
AS_RUN = "scenario_as_run.toml"
_BLOCK = re.compile(r"(\.\. rendered:begin (?P<name>[\w-]+)\n)(?P<body>.*?)(\.\. rendered:end (?P=name)\n)", re.S)


def _num(v, spec="+.2f"):
    return "-" if v is None else format(v, spec)


def run_folder(key: str, label: str) -> Path | None:
    """The folder holding run ``label`` of entry ``key``'s recorded full run (None: not recorded)."""
    d = HERE / key / label
    return d if (d / "results.csv").is_file() else None


def former_truth(key: str, label: str) -> bool:
    """Whether run ``label`` was recorded with a truth the catalogue has replaced since."""
    from moestat.rates.catalogue import catalogue_file, entry

    run = next(r for r in entry(key).runs if r.label == label)
    d, name = run_folder(key, label), run.base.get("catalogue_file")
    return bool(d and name and (d / AS_RUN).is_file() and (d / AS_RUN).read_bytes() != catalogue_file(name).read_bytes())


def rejudged(key: str) -> dict | None:
    """The report of entry ``key``'s recorded full run under the current rules (None: not recorded)."""
    from moestat.rates.catalogue import catalogue_file, entry
    from moestat.rates.catalogue_views import rejudge_recorded

    e = entry(key)
    folders = {r.label: run_folder(key, r.label) for r in e.runs}
    if not e.runs or any(f is None for f in folders.values()):
        return None
    with tempfile.TemporaryDirectory() as tmp:  # the rows as recorded, the scenario file as run
        for run in e.runs:
            src, dst = folders[run.label], Path(tmp) / run.label
            dst.mkdir()
            for name in ("results.csv", "extras.csv"):
                if (src / name).is_file():
                    (dst / name).symlink_to(src / name)
            prov = json.loads((src / "provenance.json").read_text(encoding="utf-8"))
            if prov["config"].get("scenario_file"):  # the router is named after the file's stem: keep the name
                name = Path(prov["config"]["scenario_file"]).name
                scen = catalogue_file(name)
                if (src / AS_RUN).is_file():
                    (Path(tmp) / "as_run" / run.label).mkdir(parents=True)
                    scen = Path(tmp) / "as_run" / run.label / name
                    scen.write_bytes((src / AS_RUN).read_bytes())
                prov["config"]["scenario_file"] = str(scen)
            (dst / "provenance.json").write_text(json.dumps(prov), encoding="utf-8")
        return rejudge_recorded(key, tmp)


def _recorded(key: str) -> tuple[dict, float] | None:
    """The report written when the full run ran (``catalogue.json``) and its wall time."""
    path = HERE / key / "catalogue.json"
    if not path.is_file():
        return None
    rep = json.loads(path.read_text(encoding="utf-8"))
    sweep = path.parent / "sweep.json"  # a report re-fitted from a recorded sweep: its time is the sweep's
    return rep, (json.loads(sweep.read_text())["sweep_elapsed_s"] if sweep.is_file() else rep["wall_s"])


def reports() -> dict[str, tuple[dict, dict, float]]:
    """Entry key -> (current-rules report, report as recorded, wall seconds), for every recorded entry."""
    from moestat.rates.catalogue import ENTRIES

    out = {}
    for key in ENTRIES:
        rec = _recorded(key)
        cur = rejudged(key) if rec is not None else None
        if cur is not None:
            out[key] = (cur, rec[0], rec[1])
    return out


def _table(title: str, header: list[str], rows: list[list[str]], widths: str) -> str:
    out = [f".. list-table:: {title}", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        out.append("   * - " + row[0])
        out.extend(f"     - {c}" for c in row[1:])
    return "\n".join(out) + "\n"


def _category(cur: dict, rec: dict | None) -> str:
    c = cur["category"] or "-"
    notes = []
    if cur.get("unjudged"):  # the truth fails its theorem's hypotheses (issue 59): the rules' verdict, not counted
        notes.append(f"not judged; the rules would give: {cur['unjudged']['category'] or '-'}")
    if cur.get("fixed_truth"):  # judged by the entry's instrument; the fixed-truth rule's verdict stays beside it
        notes.append(f"two-point bound; the fixed-truth rule: {cur['fixed_truth']['category'] or '-'}")
    m = cur.get("mean_statistic")
    # the expected loss's verdict, when it differs from the median's (for an instrument's row: from the
    # median's fixed-truth verdict, the one the mean is the counterpart of)
    if m and m.get("category") != (cur.get("fixed_truth") or cur.get("unjudged") or cur)["category"]:
        notes.append(f"the mean: {m.get('category') or '-'}")
    if rec is None:  # a prediction added after the run: judged on the recorded rows
        notes.append("a prediction added since the run")
    elif rec.get("category") != cur["category"]:
        notes.append(f"recorded as {rec.get('category') or '-'} when it ran")
    return c + (f" ({'; '.join(notes)})" if notes else "")


def full_table(reps: dict) -> str:
    """The full runs' table: one row per prediction, its source (the prediction's standing,
    :data:`moestat.rates.catalogue.STANDINGS`) and its category under the current rules."""
    rows = []
    for key, (cur, rec, wall) in reps.items():
        old = {(r["run"], r["loss"]): r for r in rec["predictions"]}
        for i, r in enumerate(cur["predictions"]):
            ci = f"[{_num(r['ci'][0])}, {_num(r['ci'][1])}]" if r.get("ci") and r["ci"][0] is not None else ""
            run = r["run"] + (" (former truth)" if former_truth(key, r["run"]) else "")
            rows.append([f"``{key}``" if i == 0 else "", f"{run} ``{r['loss']}``", r["prediction"], r.get("standing") or "-",
                         f"{_num(r['slope'])} {ci}".strip(), _category(r, old.get((r["run"], r["loss"]))),
                         f"{wall:.0f} s" if i == 0 else ""])
    return _table("Full runs (recorded in records/catalogue/), judged under the current rules",
                  ["entry", "run and loss", "prediction", "source", "slope of the per-n median [95% CI]", "category", "wall"],
                  rows, "13 20 17 9 20 13 8")


def verdicts(reps: dict) -> str:
    """One bullet per entry: every prediction's category with its reason, and the contrast."""
    out = []
    for key, (cur, _, _) in reps.items():
        former = sorted({r["run"] for r in cur["predictions"] if former_truth(key, r["run"])})
        head = f"- ``{key}``" + (f" (run{'s' if len(former) > 1 else ''} {', '.join(former)} recorded with the former "
                                  "truth, replaced before its next run)" if former else "") + ":"
        lines = [head, ""]
        for r in cur["predictions"]:
            ci = f" [{_num(r['ci'][0])}, {_num(r['ci'][1])}]" if r.get("ci") and r["ci"][0] is not None else ""
            line = (f"  - {r['run']} ``{r['loss']}``, predicted {r['prediction']}: slope {_num(r['slope'])}{ci}, "
                    f"*{r['category'] or 'not judged'}* -- {r['reason'] or '-'}.")
            m = r.get("mean_statistic")
            if m:  # the log-of-mean slope (the expected loss), reported beside the median's verdict
                mci = (f" [{_num(m['ci_low'])}, {_num(m['ci_high'])}]" if m.get("ci_low") is not None else "")
                mslope = f"slope {_num(m['slope'])}{mci}, " if m.get("slope") is not None else ""
                line += (f" The mean (expected loss), reported: {mslope}{m.get('category') or 'not judged'} -- "
                         f"{(m.get('reason') or '-').rstrip('.')}.")
            ft = r.get("fixed_truth")
            if ft:  # the slope's own verdict, replaced by the instrument's but not hidden
                line += (f" The fixed-truth rule on the same rows (reported, not the verdict): {ft['category'] or '-'} -- "
                         f"{(ft['reason'] or '-').rstrip('.')}.")
            lines.append(line)
        c = cur.get("contrast")
        if c:
            line = f"  - Contrast {c['slow']} vs {c['fast']} (``{c['loss']}``): *{c['category']}* -- {c['reason']}."
            if c.get("mean_statistic"):
                line += (f" On the per-n means, reported: {c['mean_statistic']['category']} -- "
                         f"{c['mean_statistic']['reason'].rstrip('.')}.")
            lines.append(line)
        # a reason is plain text: a "|" (``max |KL|``) would open an RST substitution reference
        out.append("\n".join(lines).replace("|", "\\|"))
    return "\n\n".join(out) + "\n"


def quick_table() -> str:
    """The ``--quick`` runs' wall time and categories (``quick_times.json``)."""
    data = json.loads((HERE / "quick_times.json").read_text(encoding="utf-8"))
    rows = [[f"``{r['key']}``", str(r["fits"]), f"{r['wall_s']:.0f}", "-" if r.get("cpu_s") is None else f"{r['cpu_s']:.0f}",
             r["load"], r["categories"]] for r in data["runs"]]
    return _table("--quick runs: wall and CPU time (categories as printed when each ran: on the per-n mean before "
                  "2026-12-02)", ["entry", "fits", "wall (s)", "CPU user+sys (s)",
                                                      "load average (1 min) at start/end", "categories"], rows, "18 8 10 12 18 34")


def truth_counts(results: Path) -> dict | None:
    """The truth check of one recorded run's ``results.csv`` (:mod:`moestat.rates.truth_check`), or
    None for a run written before its columns: ``fits``, ``first_below`` (first fit worse than the
    truth), ``answered`` (then lifted to the truth or above by the answer), ``below`` (still worse:
    status ``below_truth``, not counted as converged), ``unchecked`` (``n/a``, ``nonfinite``) and the
    smallest ``truth_gap`` after the answer."""
    import pandas as pd

    df = pd.read_csv(results)
    if "truth_check" not in df or (df["truth_check"] == "unknown").all():
        return None
    tc = df["truth_check"].astype(str)
    below = int((tc == "below_truth").sum())
    if below != int((df["status"] == "below_truth").sum()) or (df.loc[tc == "below_truth", "converged"].astype(bool)).any():
        raise ValueError(f"{results}: a fit below the truth is counted as converged or its status is not below_truth")
    return {"fits": len(df), "first_below": int(tc.isin(["answered", "below_truth"]).sum()),
            "answered": int((tc == "answered").sum()), "below": below,
            "unchecked": int(tc.isin(["n/a", "nonfinite"]).sum()),
            "min_gap": float(df["truth_gap"].min()) if df["truth_gap"].notna().any() else None}


def truth_table() -> str:
    """Every recorded full run's fits against the truth's objective on their own data (issue 33, Scope 1)."""
    from moestat.rates.catalogue import ENTRIES

    rows = []
    for key in ENTRIES:
        if _recorded(key) is None:
            continue
        for run in ENTRIES[key].runs:
            d = run_folder(key, run.label)
            c = truth_counts(d / "results.csv") if d is not None else None
            if c is None:
                rows.append([f"``{key}``", run.label, "-", "-", "-", "-", "the run predates the check"])
                continue
            rows.append([f"``{key}``", run.label, str(c["fits"]), str(c["first_below"]), str(c["answered"]), str(c["below"]),
                         f"{_num(c['min_gap'], '+.2f')}" + (f"; {c['unchecked']} not comparable" if c["unchecked"] else "")])
    return _table("Recorded full runs: fits against the truth's objective on the same data (log-likelihood in nats, or "
                  "the sum of squares)", ["entry", "run", "fits", "first fit below the truth", "answered (now at or above)",
                                          "still below (not converged)", "smallest margin over the truth after the answer (truth_gap)"],
                  rows, "16 12 8 14 14 14 22")


def render_blocks() -> dict[str, str]:
    """Block name -> its rendered text (the bodies between the page's markers)."""
    reps = reports()
    return {"full-runs": full_table(reps), "verdicts": verdicts(reps), "truth-checks": truth_table(),
            "quick-runs": quick_table()}


def page_blocks(text: str) -> dict[str, str]:
    """Block name -> its body as the page holds it."""
    return {m["name"]: m["body"] for m in _BLOCK.finditer(text)}


def rewrite(text: str, blocks: dict[str, str]) -> str:
    """``text`` with every marked block's body replaced by its rendering."""
    missing = set(blocks) - set(page_blocks(text))
    if missing:
        raise ValueError(f"catalogue.rst lacks the markers of {sorted(missing)}")
    return _BLOCK.sub(lambda m: m.group(1) + "\n" + blocks[m["name"]] + "\n" + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the blocks in docs/guide/catalogue.rst")
    ap.add_argument("--check", action="store_true", help="exit 1 when the page differs from the rendering")
    a = ap.parse_args(argv)
    blocks = render_blocks()
    text = RST.read_text(encoding="utf-8")
    new = rewrite(text, blocks) if a.write or a.check else text
    if a.write:
        RST.write_text(new, encoding="utf-8")
    elif a.check:
        if new != text:
            print("docs/guide/catalogue.rst differs from the rendering of the recorded runs; run "
                  "python studies/tools/render_catalogue_rst.py --write", file=sys.stderr)
            return 1
    else:
        for name, body in blocks.items():
            print(f".. rendered:begin {name}\n\n{body}\n.. rendered:end {name}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's moestat, not an installed one
    sys.exit(main())
