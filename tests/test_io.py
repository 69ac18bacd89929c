"""moestat.io: atomic writes leave either the old file or the new one, never half of one."""

import json
import math
import os
import stat

import numpy as np
import pytest
import torch

from moestat.io import (NotARegularFile, append_line, atomic_savefig, atomic_write_json, atomic_write_text, check_output_file,
                        ensure_writable_dir, refuse_links_in)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_write_text_replaces_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    assert atomic_write_text(p, "new \u00e9") == p
    assert p.read_text(encoding="utf-8") == "new \u00e9"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_atomic_write_gets_umask_permissions_like_open(tmp_path):
    # mkstemp creates 0600 files; results must be as readable as a plain open() would make them
    atomic_write_text(tmp_path / "a.txt", "x")
    plain = tmp_path / "b.txt"
    plain.write_text("x")
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == stat.S_IMODE(os.stat(plain).st_mode)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o666 & ~_umask()


def test_failed_write_keeps_old_file_and_removes_temporary(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("{}")
    with pytest.raises(TypeError):
        atomic_write_json(p, {"x": object()})
    assert p.read_text() == "{}"
    assert os.listdir(tmp_path) == ["a.json"]


def test_atomic_write_json_cleans_non_finite_and_numpy_torch(tmp_path):
    data = {
        1: math.nan,
        "inf": [math.inf, -math.inf, 1.5],
        "np": np.array([1.0, np.nan]),
        "np32": np.float32("nan"),
        "scalar": np.int64(3),
        "tensor": torch.tensor([2.0, 3.0]),
        "t0": torch.tensor(4.0),
        "tuple": (1, 2),
    }
    text = atomic_write_json(tmp_path / "x.json", data).read_text()
    assert text.endswith("\n")
    assert json.loads(text) == {
        "1": None, "inf": [None, None, 1.5], "np": [1.0, None], "np32": None, "scalar": 3,
        "tensor": [2.0, 3.0], "t0": 4.0, "tuple": [1, 2],
    }


def test_atomic_savefig(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    p = atomic_savefig(fig, tmp_path / "f.png")
    plt.close(fig)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["f.png"]


def test_append_line_adds_newline_and_appends(tmp_path):
    p = tmp_path / "r.csv"
    append_line(p, "a,b")
    append_line(p, "1,2\n")
    assert p.read_text() == "a,b\n1,2\n"


def test_ensure_writable_dir(tmp_path):
    d = ensure_writable_dir(tmp_path / "x" / "y")
    assert d.is_dir()
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        ensure_writable_dir(f)
    with pytest.raises(ValueError, match="cannot create output directory") as ei:
        ensure_writable_dir(f / "sub")
    assert "\n" not in str(ei.value)


def test_read_jsonl_skips_only_a_torn_last_line(tmp_path):
    from moestat.io import append_line, read_jsonl

    path = tmp_path / "runs.jsonl"
    assert read_jsonl(path) == []
    append_line(path, '{"gate": "dense", "seed": 0}')
    append_line(path, '{"gate": "dense", "seed": 1}')
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"gate": "dense", "se')  # a kill during the third append
    assert read_jsonl(path) == [{"gate": "dense", "seed": 0}, {"gate": "dense", "seed": 1}]
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"runs\.jsonl:2: not a JSON record"):
        read_jsonl(path)


# -------------------------------------------------------------------------------------------------
# output paths that are not regular files (issue 35: a device node replaced by a JSON file)
# -------------------------------------------------------------------------------------------------
def _not_regular(tmp_path, kind: str):
    """A path of ``kind`` in ``tmp_path`` and a function that says it is still what it was."""
    path = tmp_path / kind
    if kind == "chardev":
        try:  # a copy of /dev/null (major 1, minor 3), as in the issue
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
        return path, lambda: stat.S_ISCHR(os.lstat(path).st_mode)
    if kind == "fifo":
        os.mkfifo(path)
        return path, lambda: stat.S_ISFIFO(os.lstat(path).st_mode)
    if kind == "folder":
        path.mkdir()
        return path, lambda: path.is_dir() and not any(path.iterdir())
    target = tmp_path / "outside.txt"
    target.write_text("keep me\n")
    path.symlink_to(target)
    return path, lambda: path.is_symlink() and target.read_text() == "keep me\n"


@pytest.mark.parametrize("kind", ["chardev", "fifo", "folder", "symlink"])
def test_the_atomic_writers_never_replace_what_is_not_a_regular_file(tmp_path, kind):
    path, unchanged = _not_regular(tmp_path, kind)
    for write in (lambda: atomic_write_text(path, "x"), lambda: atomic_write_json(path, {"a": 1})):
        with pytest.raises(NotARegularFile, match=f"{path} exists and is a "):
            write()
        assert unchanged()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


@pytest.mark.parametrize("kind", ["chardev", "fifo", "symlink"])
def test_append_line_never_writes_through_a_device_fifo_or_link(tmp_path, kind):
    path, unchanged = _not_regular(tmp_path, kind)
    with pytest.raises(NotARegularFile, match="exists and is a "):  # a FIFO without a reader would block
        append_line(path, "row")
    assert unchanged()


def test_a_not_regular_output_is_bad_input_while_validating_and_a_fault_during_the_work(tmp_path):
    from moestat.faults import EnvironmentFault

    path, _ = _not_regular(tmp_path, "fifo")
    with pytest.raises(NotARegularFile) as e:
        check_output_file(path, "--json")
    assert isinstance(e.value, ValueError) and isinstance(e.value, EnvironmentFault)
    assert str(e.value).startswith(f"--json {path} exists and is a FIFO")
    assert check_output_file(tmp_path / "absent.json") == tmp_path / "absent.json"
    (tmp_path / "plain.json").write_text("{}")
    assert check_output_file(tmp_path / "plain.json") == tmp_path / "plain.json"


def test_refuse_links_in_names_the_first_link_and_allows_files_and_folders(tmp_path):
    (tmp_path / "results.csv").write_text("x\n")
    (tmp_path / "rates").mkdir()
    refuse_links_in(tmp_path)
    (tmp_path / "summary.json").symlink_to(tmp_path / "results.csv")
    with pytest.raises(NotARegularFile, match="holds summary.json, which is a symbolic link"):
        refuse_links_in(tmp_path)
