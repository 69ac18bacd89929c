"""Character-level text corpora for the MoE language model (:mod:`moestat.experiments.lm`).

Nothing is downloaded: the user points at files, or uses the offline corpus a Debian package
installs.

* ``enwik8`` -- the first 10^8 bytes of an English Wikipedia XML dump (Hutter prize); symbols are
  bytes; the standard split is the first 90M / next 5M / last 5M bytes.  ``--data-path`` is the
  ``enwik8`` file (or the folder holding it).
* ``text8`` -- the first 10^8 characters of the cleaned Wikipedia text (27 symbols: ``a-z`` and
  space), same 90M / 5M / 5M split.  ``--data-path`` is the ``text8`` file or its folder.
* ``kjv`` -- the King James Version of the Bible (1611; the text's copyright has expired), about
  4.3 million characters of English prose, installed offline by the Debian packages
  ``bible-kjv-text`` (the compressed text, licence: "unrestricted use", see its copyright file)
  and ``bible-kjv`` (the reader ``bible``, GPL-2+) -- ``apt-get install bible-kjv``.  The text is
  the reader's output for ``Gen1:1-Rev22:21`` with unwrapped lines (chapter titles and verse
  numbers kept, leading blanks dropped); split 90% / 5% / 5% in reading order (the test part is
  the last 5% of the text, the end of the New Testament).
* ``file`` -- any UTF-8 text file at ``--data-path``, split 90% / 5% / 5% in order.

Symbols are numbered by sorted order over the whole corpus (so validation and test symbols always
have an id; with enwik8 the ids are the byte values).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moestat.io import not_text, note_input

__all__ = ["CORPORA", "TextCorpus", "split_standard", "split_fractions", "load_corpus", "kjv_text", "encode"]

CORPORA = ("kjv", "enwik8", "text8", "file")

#: the standard Enwik8 / Text8 split: 90M train, 5M validation, 5M test symbols
STANDARD_SPLIT = (90_000_000, 5_000_000, 5_000_000)

_KJV_HINT = "the corpus 'kjv' needs the Debian packages bible-kjv and bible-kjv-text: apt-get install bible-kjv"


@dataclass
class TextCorpus:
    """A corpus as symbol ids, split in reading order.

    Attributes
    ----------
    name : str
    train, val, test : ndarray of int64, shapes ``[n_train]``, ``[n_val]``, ``[n_test]``
    vocab : list of str
        ``vocab[i]`` is symbol ``i`` (a one-character string; enwik8: the byte as latin-1).
    source : str
        Where the text came from (a path or a package).
    """

    name: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    vocab: list
    source: str

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def describe(self) -> str:
        return (f"{self.name}: {len(self.train):,} / {len(self.val):,} / {len(self.test):,} train / val / test "
                f"symbols, {self.vocab_size} distinct ({self.source})")


def split_standard(data: np.ndarray, sizes: tuple[int, int, int] = STANDARD_SPLIT) -> tuple[np.ndarray, ...]:
    """``(train, val, test)``: consecutive blocks of ``sizes`` symbols from the start of ``data``.

    Raises ``ValueError`` when ``data`` is shorter than ``sum(sizes)`` (a truncated file).
    """
    n_tr, n_va, n_te = (int(s) for s in sizes)
    if min(n_tr, n_va, n_te) < 1:
        raise ValueError(f"split sizes must be positive, got {sizes}")
    if len(data) < n_tr + n_va + n_te:
        raise ValueError(f"the corpus has {len(data):,} symbols, fewer than the {n_tr + n_va + n_te:,} of the split")
    return data[:n_tr], data[n_tr:n_tr + n_va], data[n_tr + n_va:n_tr + n_va + n_te]


def split_fractions(data: np.ndarray, val: float = 0.05, test: float = 0.05) -> tuple[np.ndarray, ...]:
    """``(train, val, test)`` in reading order: the last ``test`` fraction is the test part, the
    ``val`` fraction before it the validation part (each at least one symbol)."""
    if not (0 < val < 1 and 0 < test < 1 and val + test < 1):
        raise ValueError(f"val and test must be fractions with val + test < 1, got {val}, {test}")
    n = len(data)
    n_te, n_va = max(1, int(round(n * test))), max(1, int(round(n * val)))
    if n - n_te - n_va < 2:
        raise ValueError(f"the corpus has {n} symbols: too short to split")
    return data[:n - n_va - n_te], data[n - n_va - n_te:n - n_te], data[n - n_te:]


def encode(text: str, vocab: list | None = None) -> tuple[np.ndarray, list]:
    """Symbol ids of ``text`` and the vocabulary (sorted distinct characters unless given)."""
    if vocab is None:
        vocab = sorted(set(text))
    lookup = {c: i for i, c in enumerate(vocab)}
    try:
        ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary") from None
    return ids, list(vocab)


def kjv_text(reader: str = "bible") -> str:
    """The King James Bible as one string, from the Debian package's reader (module docstring)."""
    exe = shutil.which(reader)
    if exe is None or not Path("/usr/lib/bible.data").exists() and reader == "bible":
        raise FileNotFoundError(_KJV_HINT)
    proc = subprocess.run([exe, "-l0", "Gen1:1-Rev22:21"], capture_output=True, check=False, timeout=120)
    if proc.returncode != 0 or len(proc.stdout) < 1_000_000:
        raise FileNotFoundError(f"{_KJV_HINT} (the reader returned status {proc.returncode})")
    lines = proc.stdout.decode("latin-1").splitlines()
    return "\n".join(line.strip() for line in lines).strip() + "\n"


def _resolve(path: str | os.PathLike | None, name: str) -> Path:
    if path is None:
        raise ValueError(f"--data-path is required for the corpus {name!r} (the {name} file or its folder)")
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / name
    if not p.is_file():
        raise FileNotFoundError(f"no {name} file at {p}")
    return p


def load_corpus(name: str, path: str | os.PathLike | None = None, *, max_chars: int | None = None) -> TextCorpus:
    """Load and split a corpus of :data:`CORPORA` (module docstring).

    Parameters
    ----------
    name : {"kjv", "enwik8", "text8", "file"}
    path : path, optional
        The file (or its folder) for ``enwik8`` / ``text8`` / ``file``; ``kjv`` needs none.
    max_chars : int, optional
        Keep only the first ``max_chars`` symbols before a fractional split (quick runs); not
        allowed with the standard Enwik8 / Text8 split.
    """
    if name not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {name!r}")
    if name in ("enwik8", "text8"):
        if max_chars is not None:
            raise ValueError("max_chars would break the standard 90M / 5M / 5M split of enwik8 / text8")
        p = _resolve(path, name)
        note_input(p, "--data-path")  # no output of the run may replace it
        raw = np.fromfile(p, dtype=np.uint8)
        if name == "enwik8":
            data, vocab = raw.astype(np.int64), [chr(i) for i in range(256)]
        else:
            data, vocab = encode(raw.tobytes().decode("ascii"))
        tr, va, te = split_standard(data)
        return TextCorpus(name, tr, va, te, vocab, str(p))
    if name == "kjv":
        text, source = kjv_text(), "Debian packages bible-kjv-text + bible-kjv"
    else:
        p = Path(path).expanduser() if path is not None else None
        if p is None:
            raise ValueError("--data-path is required for the corpus 'file'")
        if not p.is_file():
            raise FileNotFoundError(f"no text file at {p}")
        note_input(p, "--data-path")  # no output of the run may replace it
        try:
            text, source = p.read_text(encoding="utf-8"), str(p)
        except UnicodeDecodeError as exc:  # Latin-1 or binary: name the file, not only the codec
            raise not_text(p, exc, "--data-path") from None
    if max_chars is not None:
        if int(max_chars) < 100:
            raise ValueError(f"max_chars must be at least 100, got {max_chars}")
        text = text[:int(max_chars)]
    data, vocab = encode(text)
    tr, va, te = split_fractions(data)
    return TextCorpus(name, tr, va, te, vocab, source)
