"""Text data of the sparse-gating study (Datta (2024), Sec. B4): CoNLL-2003 NER, SQuAD 1.1, GloVe.

Nothing is downloaded: the user points at files.  Every reader refuses a malformed line with a
one-line ``ValueError`` naming the file and the line number.

* :func:`read_conll` -- CoNLL-2003 files (``-DOCSTART-`` lines skipped, a blank line ends a
  sentence, four columns ``token POS chunk NER``).  The original files use IOB1 (an entity starts
  with ``I-`` unless it touches another of the same type); tags are converted to IOB2 (``B-`` at
  every entity start) so that the nine labels of :data:`CONLL_TAGS` mean the same in every file.
* :func:`read_squad` -- SQuAD 1.1 JSON; the study's regex tokeniser (:func:`tokenize`, punctuation
  as separate tokens), the character answer start converted to token indices, over-long entries
  (context or question longer than ``max_len`` tokens) filtered out.
* :func:`read_glove` -- GloVe text format (``word v1 ... vd``), streamed and pruned to a
  vocabulary: only the vectors of words in it are kept.  GloVe 6B has no ``<unk>`` vector; the
  unknown vector is the mean of every vector in the file (Datta (2024) B4, inferred).
* :func:`build_vocab`, :func:`encode_tagging`, :func:`encode_squad` -- PAD = 0, UNK = 1,
  lower-cased lookup (GloVe 6B is lower-cased), post-padding, labels padded with ``-100``.
* :func:`synthetic_tagging` / :func:`synthetic_spans` -- the **synthetic demo tasks** used when no
  data file is given (they are not CoNLL or SQuAD); :func:`write_conll` writes sentences in the
  CoNLL format (tests; the CoNLL-sized timing file).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from moestat.seeding import numpy_generator
from moestat.io import not_text

__all__ = [
    "CONLL_TAGS", "PAD", "UNK", "IGNORE_INDEX", "CONLL_SOURCE", "SQUAD_SOURCE", "GLOVE_SOURCE",
    "TaggedSentence", "SquadExample", "TextTask", "tokenize", "read_conll", "read_squad", "read_glove",
    "build_vocab", "encode_tagging", "encode_squad", "synthetic_tagging", "synthetic_spans", "write_conll",
    "find_split",
]

#: The nine BIO tags of CoNLL-2003 (the order of the Hugging Face ``conll2003`` set).
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
PAD, UNK = 0, 1
#: ``ignore_index`` of ``torch.nn.functional.cross_entropy``: padded labels add nothing to the loss.
IGNORE_INDEX = -100
CONLL_SOURCE = "https://www.clips.uantwerpen.be/conll2003/ner/ (Reuters corpus licence needed)"
SQUAD_SOURCE = "https://rajpurkar.github.io/SQuAD-explorer/ (train-v1.1.json, dev-v1.1.json)"
GLOVE_SOURCE = "https://nlp.stanford.edu/projects/glove/ (glove.6B.50d.txt in glove.6B.zip)"

# the study's tokeniser: words, numbers, and each punctuation mark as its own token
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


@dataclass
class TaggedSentence:
    """One sentence: ``tokens`` and their tag ids (indices into :data:`CONLL_TAGS`)."""

    tokens: list[str]
    tags: list[int]


@dataclass
class SquadExample:
    """A tokenised question: answer span ``[start, end]`` (inclusive token indices into ``context``)."""

    context: list[str]
    question: list[str]
    start: int
    end: int


@dataclass
class TextTask:
    """Encoded splits of one task.

    Attributes
    ----------
    name : str
        ``"conll"``, ``"squad"``, ``"demo-tagging"`` or ``"demo-spans"``.
    x_train, x_val : LongTensor, shape ``[n, L]``
        Token ids (PAD = 0); for span tasks context and question concatenated (``L = 2 * max_len``).
    y_train, y_val : LongTensor
        ``[n, L]`` tag ids padded with -100 (tagging) or ``[n, 2]`` (start, end) (spans).
    vocab : list of str
        Token of each id (``vocab[0] = "<pad>"``, ``vocab[1] = "<unk>"``).
    embeddings : FloatTensor ``[V, e]`` or None
        GloVe rows for ``vocab`` (None: the model draws its own).
    n_labels : int
        Tags (tagging) or context positions (spans).
    description : str
        One line saying what the data are (the demo tasks say they are synthetic).
    kind : {"tagging", "spans"}
    label_names : tuple of str
        Tag names (tagging).
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    vocab: list[str]
    embeddings: torch.Tensor | None
    n_labels: int
    description: str
    kind: str = "tagging"
    label_names: tuple[str, ...] = field(default=CONLL_TAGS)


def _utf8_lines(path: Path, what: str):
    """``(line number, text)`` of a UTF-8 file (``\\r\\n`` read as ``\\n``, as text mode does); a line
    that is not UTF-8 (a binary or Latin-1 file) is one ``ValueError`` naming the file and line,
    not the codec's message."""
    with open(path, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            try:
                yield no, raw.decode("utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError as exc:
                raise not_text(path, exc, what, line=no) from None

def tokenize(text: str) -> list[str]:
    """The study's regex tokeniser: ``\\w+`` runs and single punctuation marks.

    Examples
    --------
    >>> tokenize("Denver Broncos' (AFC) won 24-10.")
    ['Denver', 'Broncos', "'", '(', 'AFC', ')', 'won', '24', '-', '10', '.']
    """
    return _TOKEN_RE.findall(text)


def _iob2(tags: list[str]) -> list[str]:
    """IOB1 or IOB2 -> IOB2: an ``I-X`` that does not continue an ``X`` entity becomes ``B-X``."""
    out, prev = [], "O"
    for t in tags:
        if t.startswith("I-") and prev[2:] != t[2:]:
            t = "B-" + t[2:]
        out.append(t)
        prev = t
    return out


def read_conll(path: str | Path) -> list[TaggedSentence]:
    """Read a CoNLL-2003 file (four whitespace-separated columns; the NER tag last).

    Raises
    ------
    FileNotFoundError
        The file is missing (the message says where CoNLL-2003 is obtained).
    ValueError
        ``<file>:<line>: ...`` for a line without four columns or with an unknown tag.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CoNLL-2003 file not found: {path}; the data set is obtained from {CONLL_SOURCE}")
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        if tokens:
            sentences.append(TaggedSentence(list(tokens), [CONLL_TAGS.index(t) for t in _iob2(tags)]))
        tokens.clear()
        tags.clear()

    # line by line: a binary or Latin-1 file is refused naming the file and the line
    for no, line in _utf8_lines(path, "CoNLL file"):
        parts = line.split()
        if not parts:
            flush()
            continue
        if parts[0] == "-DOCSTART-":
            flush()
            continue
        if len(parts) != 4:
            raise ValueError(f"{path}:{no}: expected 4 columns (token POS chunk NER), got {len(parts)}")
        if parts[3] not in CONLL_TAGS:
            raise ValueError(f"{path}:{no}: unknown NER tag {parts[3]!r}; expected one of {', '.join(CONLL_TAGS)}")
        tokens.append(parts[0])
        tags.append(parts[3])
    flush()
    if not sentences:
        raise ValueError(f"{path}: no sentence found")
    return sentences


def read_squad(path: str | Path, max_len: int = 256) -> tuple[list[SquadExample], int]:
    """Read SQuAD 1.1 JSON; returns ``(examples, n_filtered)``.

    The first answer of each question is used.  Examples whose context or question is longer than
    ``max_len`` tokens, or whose answer does not fall on token boundaries, are filtered (counted).

    Raises
    ------
    FileNotFoundError, ValueError
        Missing file; invalid JSON (``<file>:<line>``) or a missing field (named with its path).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD 1.1 file not found: {path}; the data set is obtained from {SQUAD_SOURCE}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise not_text(path, exc, "SQuAD file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    out: list[SquadExample] = []
    dropped = 0
    try:
        for a, art in enumerate(data["data"]):
            for p, par in enumerate(art["paragraphs"]):
                ctx = par["context"]
                spans = [(m.start(), m.end()) for m in _TOKEN_RE.finditer(ctx)]
                toks = [ctx[s:e] for s, e in spans]
                for q in par["qas"]:
                    ans = q["answers"][0]
                    c0 = int(ans["answer_start"])
                    c1 = c0 + len(ans["text"])
                    question = tokenize(q["question"])
                    inside = [i for i, (s, e) in enumerate(spans) if s < c1 and e > c0]
                    if len(toks) > max_len or len(question) > max_len or not inside:
                        dropped += 1
                        continue
                    out.append(SquadExample(toks, question, inside[0], inside[-1]))
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"{path}: not SQuAD 1.1 JSON (missing {exc} in data[{a}].paragraphs[{p}])") from None
    if not out:
        raise ValueError(f"{path}: no usable question (all {dropped} filtered)")
    return out, dropped


def read_glove(path: str | Path, words: Iterable[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Vectors of ``words`` (lower-cased) from a GloVe text file, and the mean of all vectors.

    Returns
    -------
    vectors : dict of str -> ndarray ``[e]`` (float32)
        Only the words of ``words`` found in the file (the pruned vocabulary).
    unk : ndarray ``[e]``
        Mean vector of the whole file (GloVe 6B has no ``<unk>`` entry).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GloVe file not found: {path}; GloVe 6B 50d is obtained from {GLOVE_SOURCE}")
    wanted = {w.lower() for w in words}
    vectors: dict[str, np.ndarray] = {}
    total, n, dim = None, 0, None
    # line by line: a binary or Latin-1 file is refused naming the file and the line
    for no, line in _utf8_lines(path, "GloVe file"):
        parts = line.rstrip("\n").split(" ")
        if dim is None:
            dim = len(parts) - 1
            if dim < 1:
                raise ValueError(f"{path}:{no}: expected 'word v1 ... vd', got one field")
        if len(parts) != dim + 1:
            raise ValueError(f"{path}:{no}: expected {dim} numbers after the word, got {len(parts) - 1}")
        try:
            v = np.asarray(parts[1:], dtype=np.float64)
        except ValueError:
            raise ValueError(f"{path}:{no}: a vector entry is not a number") from None
        total = v if total is None else total + v
        n += 1
        if parts[0] in wanted:
            vectors[parts[0]] = v.astype(np.float32)
    if n == 0:
        raise ValueError(f"{path}: empty GloVe file")
    return vectors, (total / n).astype(np.float32)


def build_vocab(token_lists: Iterable[Sequence[str]], keep: set[str] | None = None) -> list[str]:
    """``["<pad>", "<unk>", ...]``: lower-cased tokens in first-seen order, pruned to ``keep`` if given."""
    seen: dict[str, None] = {}
    for toks in token_lists:
        for t in toks:
            t = t.lower()
            if keep is None or t in keep:
                seen.setdefault(t, None)
    return ["<pad>", "<unk>"] + list(seen)


def _ids(tokens: Sequence[str], index: dict[str, int], max_len: int) -> list[int]:
    ids = [index.get(t.lower(), UNK) for t in tokens[:max_len]]
    return ids + [PAD] * (max_len - len(ids))


def encode_tagging(sentences: Sequence[TaggedSentence], vocab: Sequence[str], max_len: int = 128
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[n, max_len]`` (post-padded with 0, truncated) and tags padded with -100."""
    index = {w: i for i, w in enumerate(vocab)}
    x = torch.tensor([_ids(s.tokens, index, max_len) for s in sentences], dtype=torch.long)
    y = torch.full((len(sentences), max_len), IGNORE_INDEX, dtype=torch.long)
    for i, s in enumerate(sentences):
        t = s.tags[:max_len]
        y[i, :len(t)] = torch.tensor(t, dtype=torch.long)
    return x, y


def encode_squad(examples: Sequence[SquadExample], vocab: Sequence[str], max_len: int = 256
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Context and question each padded to ``max_len`` and concatenated: ``[n, 2 max_len]``; ``[n, 2]`` spans."""
    index = {w: i for i, w in enumerate(vocab)}
    x = torch.tensor([_ids(e.context, index, max_len) + _ids(e.question, index, max_len) for e in examples],
                     dtype=torch.long)
    y = torch.tensor([[e.start, e.end] for e in examples], dtype=torch.long)
    return x, y


def find_split(folder: str | Path, names: Sequence[str], what: str, source: str) -> Path:
    """The first of ``names`` that exists in ``folder``; else a one-line error naming both."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"--data-path {folder} is not a folder; {what} is obtained from {source}")
    for n in names:
        if (folder / n).is_file():
            return folder / n
    raise FileNotFoundError(f"no {what} file ({' or '.join(names)}) in {folder}; the data set is obtained from {source}")


# ---------------------------------------------------------------------------------------------
# synthetic demo tasks (clearly not CoNLL or SQuAD)
# ---------------------------------------------------------------------------------------------
_TYPES = ("PER", "ORG", "LOC", "MISC")


def synthetic_tagging(n: int, random_state=0, *, n_names: int = 40, n_filler: int = 200,
                      length: tuple[int, int] = (6, 24)) -> list[TaggedSentence]:
    """A synthetic NER task in CoNLL's tag set, for the demo and the timing file.

    Sentences of filler words (``w17``) hold entities of 1-3 name tokens.  A quarter of the name
    tokens are shared by two types; a cue word before the entity (``mr`` PER, ``corp`` ORG, ``in``
    LOC, ``the`` MISC, present with probability 0.7) disambiguates them, so context matters.  The
    lengths default to CoNLL-2003's range around its mean of 14.5 tokens per sentence.
    """
    rng = numpy_generator(random_state)
    cues = {"PER": "mr", "ORG": "corp", "LOC": "in", "MISC": "the"}
    names = {t: [f"{t.lower()}{i}" for i in range(n_names)] for t in _TYPES}
    for i, t in enumerate(_TYPES):  # shared names: ambiguous without the cue
        other = _TYPES[(i + 1) % 4]
        names[t] += [f"{other.lower()}{j}" for j in range(n_names // 4)]
    out = []
    for _ in range(n):
        L = int(rng.integers(length[0], length[1] + 1))
        toks: list[str] = []
        tags: list[str] = []
        while len(toks) < L:
            if rng.random() < 0.2:
                t = _TYPES[int(rng.integers(4))]
                if rng.random() < 0.7:
                    toks.append(cues[t])
                    tags.append("O")
                for j in range(int(rng.integers(1, 4))):
                    toks.append(str(rng.choice(names[t])))
                    tags.append(("B-" if j == 0 else "I-") + t)
            else:
                toks.append(f"w{int(rng.integers(n_filler))}")
                tags.append("O")
        out.append(TaggedSentence(toks, [CONLL_TAGS.index(t) for t in tags]))
    return out


def synthetic_spans(n: int, random_state=0, *, n_words: int = 60, length: tuple[int, int] = (12, 40)
                    ) -> list[SquadExample]:
    """A synthetic span task in SQuAD's shape: the question ``[q, key, lenJ]`` asks for the ``J``
    tokens that follow the first ``key`` in the context (which holds ``key`` once)."""
    rng = numpy_generator(random_state)
    out = []
    for _ in range(n):
        L = int(rng.integers(length[0], length[1] + 1))
        ctx = [f"c{int(v)}" for v in rng.integers(n_words, size=L)]
        key = f"k{int(rng.integers(10))}"
        span = int(rng.integers(1, 4))
        pos = int(rng.integers(0, L - span - 1))
        ctx[pos] = key
        out.append(SquadExample(ctx, ["q", key, f"len{span}"], pos + 1, pos + span))
    return out


def write_conll(sentences: Sequence[TaggedSentence], path: str | Path) -> Path:
    """Write sentences in the CoNLL-2003 format (``-DOCSTART-`` header, dummy POS/chunk columns)."""
    lines = ["-DOCSTART- -X- -X- O", ""]
    for s in sentences:
        lines += [f"{w} NN I-NP {CONLL_TAGS[t]}" for w, t in zip(s.tokens, s.tags)] + [""]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)
