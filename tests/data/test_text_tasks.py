"""Readers of the sparse-gating study's text data on small generated files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moestat.data import text_tasks as tt


def _conll(tmp_path, body: str):
    p = tmp_path / "train.txt"
    p.write_text(body, encoding="utf-8")
    return p


def test_read_conll_docstart_blank_lines_and_iob1_to_iob2(tmp_path):
    p = _conll(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\n"
                         "Peter NNP B-NP I-PER\nBlackburn NNP I-NP I-PER\n\n\n")
    s = tt.read_conll(p)
    assert [x.tokens for x in s] == [["EU", "rejects"], ["Peter", "Blackburn"]]
    # IOB1 "I-ORG" at an entity start becomes B-ORG; the continuation stays I-PER
    assert [[tt.CONLL_TAGS[t] for t in x.tags] for x in s] == [["B-ORG", "O"], ["B-PER", "I-PER"]]


@pytest.mark.parametrize("line,msg", [("EU NNP I-ORG\n", "expected 4 columns"), ("EU NNP B-NP B-XYZ\n", "unknown NER tag")])
def test_read_conll_malformed_line_names_file_and_line(tmp_path, line, msg):
    p = _conll(tmp_path, "-DOCSTART- -X- -X- O\n\nA NN B-NP O\n" + line)
    with pytest.raises(ValueError) as e:
        tt.read_conll(p)
    text = str(e.value)
    assert text.startswith(f"{p}:4: ") and msg in text and "\n" not in text


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="clips.uantwerpen.be"):
        tt.read_conll(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match="nlp.stanford.edu"):
        tt.read_glove(tmp_path / "nope.txt", [])


def test_encode_tagging_pads_ids_with_0_and_labels_with_minus_100():
    s = [tt.TaggedSentence(["A", "b"], [1, 0]), tt.TaggedSentence(["c"] * 5, [0] * 5)]
    vocab = ["<pad>", "<unk>", "a", "b"]
    x, y = tt.encode_tagging(s, vocab, max_len=4)
    assert x.tolist() == [[2, 3, 0, 0], [tt.UNK] * 4]  # lower-cased lookup, unknown -> UNK, truncated
    assert y.tolist() == [[1, 0, -100, -100], [0, 0, 0, 0]]


def test_glove_pruning_keeps_only_vocabulary_words_and_mean_unk(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("the 1 2\ncat 3 4\ndog 5 6\n", encoding="utf-8")
    vecs, unk = tt.read_glove(p, ["The", "cat", "zebra"])
    assert set(vecs) == {"the", "cat"}
    np.testing.assert_allclose(vecs["cat"], [3, 4])
    np.testing.assert_allclose(unk, [3, 4])  # mean over the whole file
    assert tt.build_vocab([["The", "zebra", "cat", "the"]], keep=set(vecs)) == ["<pad>", "<unk>", "the", "cat"]


def test_glove_malformed_line(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("the 1 2\ncat 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{p}:2: expected 2 numbers"):
        tt.read_glove(p, ["cat"])
    p.write_text("the 1 2\ncat 3 x\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{p}:2: a vector entry is not a number"):
        tt.read_glove(p, ["cat"])


def _squad(tmp_path, context, question, answer, start):
    d = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "1", "question": question, "answers": [{"text": answer, "answer_start": start}]}]}]}]}
    p = tmp_path / "train-v1.1.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    return p


def test_read_squad_converts_character_start_to_tokens_and_filters_long(tmp_path):
    ctx = "The Denver Broncos (AFC) won, 24-10."
    p = _squad(tmp_path, ctx, "Who won?", "Denver Broncos", ctx.index("Denver"))
    ex, dropped = tt.read_squad(p)
    assert dropped == 0 and ex[0].context[ex[0].start:ex[0].end + 1] == ["Denver", "Broncos"]
    assert ex[0].question == ["Who", "won", "?"]
    with pytest.raises(ValueError, match="all 1 filtered"):
        tt.read_squad(p, max_len=5)  # the context has 12 tokens
    x, y = tt.encode_squad(ex, tt.build_vocab([ex[0].context + ex[0].question]), max_len=16)
    assert x.shape == (1, 32) and y.tolist() == [[1, 2]] and int(x[0, 16]) != 0 and int(x[0, 15]) == 0


def test_read_squad_invalid_json_names_line(tmp_path):
    p = tmp_path / "dev.json"
    p.write_text('{"data": [\n  {"title": }\n]}', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{p}:2: invalid JSON"):
        tt.read_squad(p)


def test_write_conll_round_trip(tmp_path):
    s = tt.synthetic_tagging(20, random_state=3)
    back = tt.read_conll(tt.write_conll(s, tmp_path / "t.txt"))
    assert [x.tokens for x in back] == [x.tokens for x in s] and [x.tags for x in back] == [x.tags for x in s]
