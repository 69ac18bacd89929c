"""Growing a damaged record or onto a failing disk (``moestat rates --grow-from``, the package's
:mod:`moestat.rates.grow`): one line, nothing copied (everything is checked before the copy, and
the copy is whole or absent)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from moestat.cli.cmd_rates import main as rates_main
from moestat.cli.common import run_main
from moestat.rates import grow

TINY = dict(d=2, n_min=40, n_max=160, n_points=3, reps=2, chunk=2, max_iter=5, holdout=256, n_boot=100, quiet=True,
            extra_starts=1, n_jobs=1)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    from moestat.rates.config import RatesConfig
    from moestat.rates.sweep import run_sweep_rows

    src = tmp_path_factory.mktemp("record") / "small"
    src.mkdir()
    run_sweep_rows(RatesConfig.from_dict(TINY).validate(), src, progress=False)
    return src


@pytest.fixture
def src(record, tmp_path):
    return Path(shutil.copytree(record, tmp_path / "small"))


def _grow(src, dst, capsys):
    rc = run_main(rates_main, ["--grow-from", str(src), "--out", str(dst), "--reps", "4", "--figure-formats", "none"],
                  prog="moestat rates")
    return rc, capsys.readouterr().err


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _edit(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1].rstrip("\n").split(",")
    col = header.index("voronoi")
    cells[col] = repr(float(cells[col]) * 2 + 1.0)
    lines[1] = ",".join(cells) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("damage,word", [
    (lambda s: _edit(s / "results.csv"), "edited after they were written (line 2"),
    (lambda s: (s / "provenance.json").write_text((s / "provenance.json").read_text()[:40]), "provenance.json: not valid JSON"),
    (lambda s: (s / "results.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20), "results.csv"),
    (lambda s: (s / "results.csv").write_text((s / "results.csv").read_text() + "10,cosine,1,"), "last line is torn"),
    (lambda s: (s / "notes.txt").symlink_to(s / "absent"), "notes.txt, which is a symbolic link"),
], ids=["edited row", "truncated provenance", "binary results", "torn last line", "dangling link in the record"])
def test_a_damaged_record_is_refused_before_anything_is_copied(src, tmp_path, damage, word, capsys):
    damage(src)
    dst = tmp_path / "grown"
    rc, err = _grow(src, dst, capsys)
    assert rc == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err, err
    assert not dst.exists() and _left(tmp_path) == ["small"]


def test_a_dangling_link_at_the_new_folder_is_refused(src, tmp_path, capsys):
    dst = tmp_path / "grown"
    dst.symlink_to(tmp_path / "nowhere")
    rc, err = _grow(src, dst, capsys)
    assert rc == 2 and err.count("\n") == 1 and "exists" in err, err
    assert not (tmp_path / "nowhere").exists()


def test_two_growths_into_one_folder_only_one_copies(src, tmp_path):
    from moestat.rates.config import RatesConfig

    dst = tmp_path / "grown"
    dst.mkdir()  # the other growth claimed it after both checked that it was free
    config = RatesConfig.from_dict(TINY).validate()
    with pytest.raises(grow.GrowError, match="another growth"):
        grow.copy_and_fit(src, dst, config, [])
    assert _left(dst) == []


@pytest.mark.parametrize("code,word,rc", [(errno.ENOSPC, "disk full", 1), (errno.EROFS, "Read-only", 1)])
def test_a_disk_failing_during_the_copy_leaves_no_torn_copy(src, tmp_path, monkeypatch, capsys, code, word, rc):
    import os

    real = shutil.copy2
    calls = []

    def copy2(a, b, **kw):
        calls.append(a)
        if len(calls) == 2:  # the first file landed, the second does not
            raise OSError(code, os.strerror(code), str(b))
        return real(a, b, **kw)

    monkeypatch.setattr(grow.shutil, "copy2", copy2)
    dst = tmp_path / "grown"
    got, err = _grow(src, dst, capsys)
    assert got == rc and err.count("\n") == 1 and word in err and "Traceback" not in err, err
    assert not dst.exists() and _left(tmp_path) == ["small"]  # neither the copy nor its temporary folder
