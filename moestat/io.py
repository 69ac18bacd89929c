"""Small I/O helpers shared by every command: atomic writes so that no half-written file is
ever left behind, and an append that is atomic per row for long-running sweeps."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from moestat.faults import DISK_FULL, DiskFull, EnvironmentFault, as_environment_fault

__all__ = ["atomic_write_text", "atomic_write_json", "atomic_savefig", "append_line", "sync_file", "read_jsonl", "ensure_writable_dir",
           "RUN_CONFIG", "read_run_config", "write_run_config", "check_run_config", "regular_file", "not_text",
           "NotARegularFile", "OutputIsInput", "check_output_file", "refuse_links_in", "atomic_write_with", "begin_command",
           "end_command", "note_input", "note_out_root"]


def _not_regular_kind(mode: int) -> str | None:
    """What a file of ``mode`` (from ``lstat``) is when it is not a regular file, else ``None``."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover - no other kind on POSIX


class NotARegularFile(ValueError, EnvironmentFault):
    """An output path that exists and is not a regular file (a device, FIFO, folder or link).

    Never written through or replaced: an atomic rename over ``/dev/null`` would replace the
    device with a JSON file, and a link would send the write outside ``--out``.  A
    ``ValueError`` while a door validates its input (exit 2, nothing written) and an
    :class:`~moestat.faults.EnvironmentFault` when it appears while the work runs (someone
    put it there meanwhile: one line, exit 1, ``--resume`` continues).
    """


class OutputIsInput(NotARegularFile):
    """An output path that is one of the files the running command reads (the same file, by
    device and inode: a hard link or another spelling of the path included).  Writing it would
    replace the user's input with the command's output."""


# What the running command (between :func:`begin_command` and :func:`end_command`, i.e. one
# door run by ``run_main``) reads and where it writes; outside a command both stay empty, so the
# helpers used as a library check only the target itself.
_INPUTS: dict[tuple[int, int], str] = {}
_OUT_ROOTS: list[Path] = []
_IN_COMMAND = [False]


def begin_command() -> None:
    """Start recording the inputs and output folders of one command (:func:`note_input`, :func:`note_out_root`)."""
    _INPUTS.clear()
    _OUT_ROOTS.clear()
    _IN_COMMAND[0] = True


def end_command() -> None:
    """Forget what :func:`begin_command` started recording."""
    _INPUTS.clear()
    _OUT_ROOTS.clear()
    _IN_COMMAND[0] = False


def note_input(path: str | os.PathLike, what: str) -> None:
    """Record ``path`` (an existing file) as an input of the running command: no output of the
    command may then be that file (:func:`check_output_file`).  ``what`` names it in the message."""
    if not _IN_COMMAND[0]:
        return
    try:
        st = os.stat(path)
    except OSError:
        return
    _INPUTS.setdefault((st.st_dev, st.st_ino), f"{what} {path}")


def note_out_root(folder: str | os.PathLike) -> None:
    """Record ``folder`` as the running command's ``--out``: no write below it may pass through a
    symbolic link (:func:`check_output_file`), whatever the depth."""
    if not _IN_COMMAND[0]:
        return
    for form in (os.path.abspath(folder), os.path.realpath(folder)):
        if Path(form) not in _OUT_ROOTS:
            _OUT_ROOTS.append(Path(form))


def _refuse_link_below_out(path: Path) -> None:
    """Refuse ``path`` when a folder between the recorded ``--out`` and it is a symbolic link.

    The folders are checked without following links (``lstat``), one by one from ``--out`` down:
    a link anywhere below ``--out`` would take the write outside it.  A folder not there yet is
    created by the door itself (a real folder), so the walk stops there.
    """
    target = Path(os.path.abspath(path))
    for root in _OUT_ROOTS:
        try:
            parts = target.relative_to(root).parts[:-1]
        except ValueError:
            continue
        here = root
        for part in parts:
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except (FileNotFoundError, NotADirectoryError):
                break
            if stat.S_ISLNK(mode):
                raise NotARegularFile(f"{here} is a symbolic link inside --out {root}; moestat never writes through a "
                                      "link out of --out: remove it or choose another folder")


def check_output_file(path: str | os.PathLike, flag: str | None = None) -> Path:
    """Refuse an output path that exists and is not a regular file (links are not followed).

    Also refused, during a command: a path below ``--out`` reached through a symbolic link
    folder (:func:`note_out_root`), and a path that is one of the command's input files
    (:func:`note_input`).

    Parameters
    ----------
    path : path-like
        The file a command is about to write (absent, or a regular file it may replace).
    flag : str, optional
        The option that named it (``--json``), for the message.

    Raises
    ------
    NotARegularFile
        One line naming the path and what it is.
    OutputIsInput
        One line naming the path and the input it is.
    """
    path = Path(path)
    if _OUT_ROOTS:
        _refuse_link_below_out(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except NotADirectoryError:  # a parent is a file: the write fails with its own message
        return path
    what = f"{flag} {path}" if flag else str(path)
    kind = _not_regular_kind(st.st_mode)
    if kind is not None:
        raise NotARegularFile(f"{what} exists and is {kind}; moestat only replaces regular files: remove it or choose "
                              "another path")
    source = _INPUTS.get((st.st_dev, st.st_ino))
    if source is not None:
        raise OutputIsInput(f"{what} is the {source} this command reads; moestat never writes over its input: "
                            "choose another path")
    return path


def refuse_links_in(folder: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse a folder holding a symbolic link, device, FIFO or socket, at any depth.

    Everything a door writes into ``--out`` is a regular file or a folder of its own; anything
    else there was put by someone else, and following it would write outside ``--out`` (a link
    one folder down, ``OUT/rates/run -> elsewhere``, as much as one at the top).  Links are not
    followed by the walk.

    Raises
    ------
    NotARegularFile
        One line naming the first such entry (its path relative to ``folder``).
    """
    folder = Path(folder)
    for here, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            entry = Path(here) / name
            mode = os.lstat(entry).st_mode
            kind = None if stat.S_ISDIR(mode) else _not_regular_kind(mode)
            if kind is not None:
                raise NotARegularFile(f"{flag} {folder} holds {entry.relative_to(folder)}, which is {kind}, not a file "
                                      "moestat wrote: remove it or choose another folder")


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once, at import: os.umask can only be read by setting it, which must not race with threads
# that create files later.
_FILE_MODE = 0o666 & ~_read_umask()


@contextmanager
def _replacing(path: Path, suffix: str) -> Iterator[str]:
    """A temporary path next to ``path`` that becomes ``path`` when the block succeeds.

    The temporary file is in the same folder (so ``os.replace`` is atomic), gets the permissions
    a plain ``open`` would give (``mkstemp`` creates files readable by the owner only), and is
    removed when the block raises, so no half-written file is ever left behind.  A ``path``
    that exists and is not a regular file is refused before anything is written, and checked
    again just before the rename (:func:`check_output_file`).
    """
    check_output_file(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        check_output_file(path)  # the work took time: never rename over a device put there meanwhile
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, Exception) and not isinstance(exc, DiskFull) and isinstance(as_environment_fault(exc), DiskFull):
            # name the file being written, not its temporary (removed above); the cause may sit
            # under a library's own error (matplotlib's PDF writer: AttributeError)
            raise DiskFull(f"{DISK_FULL.replace('disk full', f'disk full writing {path}', 1)}") from exc
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    with _replacing(path, ".tmp") as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def atomic_write_with(path: str | os.PathLike, write: Any, suffix: str = ".tmp") -> Path:
    """Write ``path`` by calling ``write(tmp)`` on a temporary file beside it, then rename.

    For writers that take a file name (``torch.save``, ...): the same refusals as
    :func:`atomic_write_text` (a link, device or input at ``path``, a link below ``--out``), and
    no half-written file left behind.
    """
    path = Path(path)
    with _replacing(path, suffix) as tmp:
        write(tmp)
    return path


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    """Atomically write ``data`` as indented JSON (NaN/inf written as ``null``)."""

    def clean(o: Any) -> Any:
        if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
            return None
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        if hasattr(o, "item") and callable(o.item) and getattr(o, "ndim", 1) == 0:
            return clean(o.item())
        if hasattr(o, "tolist"):
            return clean(o.tolist())
        return o

    return atomic_write_text(path, json.dumps(clean(data), indent=2, sort_keys=False) + "\n")


def atomic_savefig(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    """``fig.savefig`` to a temporary file, then rename (format taken from ``path``'s suffix)."""
    path = Path(path)
    with _replacing(path, path.suffix) as tmp:
        fig.savefig(tmp, **kwargs)
    return path


def append_line(path: str | os.PathLike, line: str, *, sync: bool = True) -> None:
    """Append one newline-terminated line, whole or not at all, then ``fsync``.

    The line goes out in one ``write`` to a file opened with ``O_APPEND`` (not torn by a
    concurrent appender); ``write`` may still land only part of it (a disk that fills mid-row), so
    the rest is written until the line is complete.  When it cannot be completed the partial row
    is cut off again (``ftruncate`` back to the size before the append) and
    :class:`~moestat.faults.DiskFull` (or the ``OSError``) is raised: a row is never glued to the
    next one.  A kill *during* the write can still leave a partial last line, which readers skip
    (see :func:`moestat.rates.store.read_results`).

    ``sync=False`` leaves the ``fsync`` to the caller (:func:`sync_file`), e.g. once per unit.
    """
    if not line.endswith("\n"):
        line += "\n"
    data = line.encode("utf-8")
    check_output_file(path)  # a FIFO would block the open, a device or link would take the row elsewhere
    # O_NOFOLLOW: a link put in place after the check is refused (ELOOP), never followed
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)  # the umask decides, as for open()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # pragma: no cover - swapped between the check and the open
            raise NotARegularFile(f"{path} is not a regular file; moestat only appends to regular files")
        start = os.fstat(fd).st_size
        done = 0
        try:
            while done < len(data):
                k = _write(fd, data[done:])
                if k <= 0:  # no progress and no error: the device accepts nothing more
                    raise DiskFull(f"{DISK_FULL} ({path}: {done} of {len(data)} bytes of a row written)")
                done += k
            if sync:
                os.fsync(fd)
        except BaseException as exc:
            try:  # never leave part of a row for the next append to be glued to
                if os.fstat(fd).st_size != start:
                    os.ftruncate(fd, start)
            except OSError:
                pass
            if isinstance(exc, OSError) and isinstance(as_environment_fault(exc), DiskFull):
                raise DiskFull(f"{DISK_FULL} ({path}: {exc.strerror})") from exc
            raise
    finally:
        os.close(fd)


#: ``O_NOFOLLOW`` where the platform has it: the store's files are opened without following links.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _write(fd: int, data: bytes) -> int:
    """``os.write`` (a seam for the tests that inject short writes)."""
    return os.write(fd, data)


def sync_file(path: str | os.PathLike) -> None:
    """``fsync`` a file written with ``append_line(..., sync=False)`` (a unit boundary)."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The records of a JSON-lines file written by :func:`append_line` (``[]`` when it is absent).

    A kill during an append can leave a torn last line: it is skipped (the record it would have
    held was not finished).  An undecodable line anywhere else is not a torn append, so it is an
    error naming the file and the line.

    Raises
    ------
    ValueError
        A malformed line before the last one.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines):
                continue
            raise ValueError(f"{path}:{i}: not a JSON record") from None
    return records


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) if needed and check that it is a writable directory.

    Raises
    ------
    ValueError
        With a one-line message naming the path when it cannot be used.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create output directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"output directory {path} is not writable")
    return path


#: File in which a door with ``--resume`` records the configuration its stored runs were made with.
RUN_CONFIG = "run_config.json"


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def read_run_config(out_dir: str | os.PathLike) -> dict | None:
    """The configuration recorded by :func:`write_run_config` (``None`` when there is none).

    Raises
    ------
    ValueError
        The file exists but is not a JSON object (the message names it).
    """
    path = Path(out_dir) / RUN_CONFIG
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("result"), dict):
        raise ValueError(f"{path}: not a moestat run configuration")
    return data


def write_run_config(out_dir: str | os.PathLike, result: dict, extra: dict | None = None) -> Path:
    """Record ``result`` (every setting that changes a run's numbers) and ``extra`` (what only
    says which runs to do: gates, seeds, ...) in ``out_dir/run_config.json``."""
    return atomic_write_json(Path(out_dir) / RUN_CONFIG, {"result": _plain(result), "extra": _plain(extra or {})})


def check_run_config(out_dir: str | os.PathLike, result: dict, resume: bool, store: str = "runs.jsonl") -> dict | None:
    """Refuse to resume into ``out_dir`` when its runs were made with other settings.

    The runs of a resumable door are keyed by what they are (gate, seed, ...); the settings they
    share (data set, epochs, model sizes, ...) are recorded once in ``run_config.json``.  A resume
    with any of those settings changed would report the old runs under the new settings, so it
    is refused, naming the settings that differ (as ``moestat rates --resume`` does).

    Returns
    -------
    dict or None
        The stored configuration, when there is one.

    Raises
    ------
    ValueError
        One line naming the folder and the differing settings; or a store without a
        ``run_config.json`` to check it against.
    """
    out_dir = Path(out_dir)
    stored = read_run_config(out_dir)
    if not resume:
        return stored
    if stored is None:
        if read_jsonl(out_dir / store):
            raise ValueError(f"--resume: {out_dir} has {store} but no {RUN_CONFIG}; cannot check the settings its runs were made with")
        return None
    old, new = stored["result"], _plain(result)
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        shown = ", ".join(f"--{k.replace('_', '-')} ({old.get(k)!r} there, {new.get(k)!r} now)" for k in diff[:4])
        raise ValueError(f"--resume: {out_dir} was written with other settings (differs in: {shown}"
                         f"{', ...' if len(diff) > 4 else ''}); resume with those settings or choose a new --out")
    return stored


def regular_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` if it is a regular file; otherwise a one-line ``ValueError`` saying what it is.

    A folder, a FIFO or a device given where a file is read is named as such (reading a FIFO would
    block, ``/dev/zero`` never ends), not reported as missing.  ``what`` names the input
    (``--config``, ``config file``, ...) and starts the message.
    """
    import stat

    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"{what} {p} does not exist") from None
    except NotADirectoryError:
        raise ValueError(f"{what} {p}: a part of the path is not a folder") from None
    except PermissionError:
        raise ValueError(f"{what} {p} cannot be read (permission denied)") from None
    if stat.S_ISREG(mode):
        note_input(p, what)  # an output of this command must never replace it
        return p
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise ValueError(f"{what} {p} is {kind}, not a file")


def not_text(path: str | os.PathLike, exc: UnicodeDecodeError, what: str = "file", line: int | None = None) -> ValueError:
    """The one-line error for a file that is not UTF-8 text (binary, Latin-1, ...): names the file,
    the line if known and the first bad byte, instead of the codec's bare message."""
    where = f"{path}:{line}" if line else str(path)
    bad = exc.object[exc.start:exc.start + 1].hex() if isinstance(exc.object, (bytes, bytearray)) else "?"
    return ValueError(f"{what} {where} is not UTF-8 text (byte 0x{bad} at offset {exc.start}"
                      f"{' of the line' if line else ''}); convert it to UTF-8 or give another file")

