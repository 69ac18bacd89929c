"""records/index.toml against the tree: every record listed once, every path there, the archive rule,
one current record per catalogue entry, every declaration listed (issue 58)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from moestat.rates.catalogue import ENTRIES

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "records"
TOML = tomllib.loads((RECORDS / "index.toml").read_text(encoding="utf-8"))
INDEX = TOML["record"]
DECLARATIONS = TOML["declaration"]
ARCHIVE = "records/archive/"
FIELDS = {"id", "path", "kind", "serves", "status", "made_by", "made_by_from", "recorded_in", "former_path"}


def _files() -> list[str]:
    """Every file under records/ that belongs to a record: all but README.md files, the index and the declarations."""
    try:
        out = subprocess.run(["git", "ls-files", "records"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the files on disk
        out = [p.relative_to(ROOT).as_posix() for p in RECORDS.rglob("*") if p.is_file()]
    return sorted(f for f in out if (ROOT / f).is_file() and Path(f).name != "README.md"
                  and f != "records/index.toml" and not f.startswith("records/declarations/"))


def _owners() -> dict[str, list[str]]:
    """Which records own each file: the records naming it (``path`` or ``files``), else the record whose
    folder ``path`` is the longest prefix of it."""
    named: dict[str, list[str]] = {}
    folders = {}
    for r in INDEX:
        for p in [r["path"], *r.get("files", [])]:
            if (ROOT / p).is_dir():
                folders[p] = r["id"]
            else:
                named.setdefault(p, []).append(r["id"])
    owners = {}
    for f in _files():
        if f in named:
            owners[f] = named[f]
        else:
            best = max((d for d in folders if f.startswith(d + "/")), key=len, default=None)
            owners[f] = [folders[best]] if best else []
    return owners


def test_every_record_has_its_fields_and_a_unique_id_and_path():
    ids = [r["id"] for r in INDEX]
    assert len(ids) == len(set(ids))
    paths = [p for r in INDEX for p in [r["path"], *r.get("files", [])]]
    assert len(paths) == len(set(paths)), "a path is listed twice"
    for r in INDEX:
        assert FIELDS <= r.keys(), (r["id"], FIELDS - r.keys())
        assert r["status"] in ("current", "superseded"), r["id"]
        assert {"command", "commit", "date"} <= r["made_by"].keys(), r["id"]
        assert r["serves"], r["id"]


def test_every_path_in_the_index_exists():
    missing = [p for r in INDEX for p in [r["path"], *r.get("files", []), *([r["declaration"]] if "declaration" in r else [])]
               if not (ROOT / p).exists()]
    assert not missing


def test_every_recorded_file_belongs_to_exactly_one_record():
    owners = _owners()
    assert not [f for f, o in owners.items() if not o], "files of no record: add them to records/index.toml"
    assert not {f: o for f, o in owners.items() if len(o) > 1}
    used = {i for o in owners.values() for i in o}
    assert {r["id"] for r in INDEX} == used, "a record that owns no file"


def test_superseded_records_are_archived_and_current_ones_are_not():
    ids = {r["id"]: r for r in INDEX}
    for r in INDEX:
        where = {p.startswith(ARCHIVE) for p in [r["path"], *r.get("files", [])]}
        if r["status"] == "superseded":
            assert where == {True}, r["id"]
            assert r.get("superseded_by") in ids, r["id"]
        else:
            assert where == {False}, r["id"]
            assert "superseded_by" not in r, r["id"]


def test_superseded_chains_end_at_a_current_record():
    ids = {r["id"]: r for r in INDEX}
    for r in INDEX:
        seen, cur = set(), r
        while cur["status"] == "superseded":
            assert cur["id"] not in seen, f"a cycle through {cur['id']}"
            seen.add(cur["id"])
            cur = ids[cur["superseded_by"]]


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_each_catalogue_entry_has_exactly_one_current_record(key):
    """The catalogue's record of an entry is its run under the one protocol once that has run
    (``records/catalogue_protocol/KEY``); the entry's own-design run stays current as ``catalogue-design:KEY``."""
    runs = [r for r in INDEX if r["kind"] == "run" and r["status"] == "current" and f"catalogue:{key}" in r["serves"]]
    protocol = (RECORDS / "catalogue_protocol" / key / "catalogue.json").is_file()
    assert [r["path"] for r in runs] == [f"records/catalogue_protocol/{key}" if protocol else f"records/catalogue/{key}"]
    design = [r for r in INDEX if r["kind"] == "run" and r["status"] == "current" and f"catalogue-design:{key}" in r["serves"]]
    assert [r["path"] for r in design] == ([f"records/catalogue/{key}"] if protocol else [])
    for run in ENTRIES[key].runs:  # the folders the catalogue's renderer reads
        assert (RECORDS / "catalogue" / key / run.label / "results.csv").is_file(), (key, run.label)


def test_each_declaration_file_is_listed_in_the_index_and_its_folders_readme():
    decl = sorted(p for p in (RECORDS / "declarations").rglob("*.md") if p.name != "README.md")
    assert len(decl) >= 29  # each listed below; declarations are only ever added
    for p in decl:
        readme = (p.parent / "README.md").read_text(encoding="utf-8")
        assert f"({p.name})" in readme, p
        assert p.read_text(encoding="utf-8").rstrip().splitlines()[-1].startswith("result: "), p
    listed = [d["path"] for d in DECLARATIONS]
    assert sorted(listed) == sorted(p.relative_to(ROOT).as_posix() for p in decl), "each declaration listed once in the index"
    named = {r["declaration"] for r in INDEX if "declaration" in r}
    assert named <= set(listed)
    ids = {r["id"] for r in INDEX}
    for d in DECLARATIONS:
        assert d["result"] in ("appended", "not recorded"), d["path"]
        assert set(d["records"]) <= ids, d["path"]
        assert sorted(d["records"]) == sorted(r["id"] for r in INDEX if r.get("declaration") == d["path"]), d["path"]
