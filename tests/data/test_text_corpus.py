"""Text corpora: the standard and fractional splits, encoding, user files, the offline corpus's error."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from moestat.data import text_corpus as tc
from moestat.data.text_corpus import encode, load_corpus, split_fractions, split_standard


def test_split_standard_is_consecutive_blocks_from_the_start():
    data = np.arange(30)
    tr, va, te = split_standard(data, (20, 4, 5))
    assert tr.tolist() == list(range(20)) and va.tolist() == list(range(20, 24)) and te.tolist() == list(range(24, 29))
    with pytest.raises(ValueError, match="fewer than"):
        split_standard(np.arange(28), (20, 4, 5))
    assert tc.STANDARD_SPLIT == (90_000_000, 5_000_000, 5_000_000)


def test_split_fractions_in_reading_order_and_covering_everything():
    data = np.arange(1000)
    tr, va, te = split_fractions(data)
    assert (len(tr), len(va), len(te)) == (900, 50, 50)
    assert np.array_equal(np.concatenate([tr, va, te]), data)
    with pytest.raises(ValueError):
        split_fractions(data, 0.6, 0.5)
    with pytest.raises(ValueError, match="too short"):
        split_fractions(np.arange(3))


def test_encode_roundtrip_and_unknown_symbol():
    ids, vocab = encode("abracadabra")
    assert vocab == ["a", "b", "c", "d", "r"]
    assert "".join(vocab[i] for i in ids) == "abracadabra"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        encode("abz", vocab)


def test_text8_and_enwik8_standard_split_on_a_generated_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tc, "STANDARD_SPLIT", (90, 5, 5))
    monkeypatch.setattr(tc.split_standard, "__defaults__", ((90, 5, 5),))
    rng = np.random.default_rng(0)
    text = "".join(rng.choice(list("abc de"), size=100))
    (tmp_path / "text8").write_text(text)
    c = load_corpus("text8", tmp_path)  # the folder works as well as the file
    assert (len(c.train), len(c.val), len(c.test)) == (90, 5, 5)
    assert "".join(c.vocab[i] for i in c.test) == text[95:]
    (tmp_path / "enwik8").write_bytes(bytes(range(100)))
    c = load_corpus("enwik8", tmp_path / "enwik8")
    assert c.vocab_size == 256 and c.val.tolist() == list(range(90, 95))
    with pytest.raises(ValueError, match="max_chars"):
        load_corpus("enwik8", tmp_path, max_chars=50)


def test_user_text_file_and_errors(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("hello world\n" * 100, encoding="utf-8")
    c = load_corpus("file", p, max_chars=600)
    assert len(c.train) + len(c.val) + len(c.test) == 600 and c.vocab_size == 9
    assert "600" not in c.describe() and "540" in c.describe()
    with pytest.raises(FileNotFoundError):
        load_corpus("file", tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="--data-path"):
        load_corpus("text8")
    with pytest.raises(ValueError, match="corpus must be"):
        load_corpus("wikitext")


def test_kjv_without_the_package_names_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="apt-get install bible-kjv"):
        load_corpus("kjv")


def test_kjv_when_installed():
    if shutil.which("bible") is None:
        pytest.skip("the Debian package bible-kjv is not installed")
    c = load_corpus("kjv", max_chars=200_000)
    text = "".join(c.vocab[i] for i in c.train[:80])
    assert text.startswith("Genesis 1\n\n1 In the beginning God created the heaven and the earth.")
    assert (len(c.train), len(c.val), len(c.test)) == (180_000, 10_000, 10_000)
