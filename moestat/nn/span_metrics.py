"""Entity-level scores for sequence tasks: CoNLL-style NER precision/recall/F1 and SQuAD EM/F1.

* :func:`bio_entities` -- the entities of a BIO tag sequence by the ``conlleval`` convention: an
  entity starts at ``B-X``, or at an ``I-X`` that does not continue an ``X`` entity (IOB1 files),
  and ends before ``O``, ``B-*`` or an ``I-Y`` of another type.
* :func:`entity_prf` -- micro precision, recall and F1 over exact (type, start, end) matches, the
  CoNLL-2003 shared-task measure; token accuracy (what Datta (2024) reports) is dominated by ``O``.
* :func:`span_em_f1` -- exact match and token-overlap F1 of predicted vs gold spans (SQuAD 1.1;
  on the token indices of one gold answer, without the official script's text normalisation).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

__all__ = ["bio_entities", "entity_prf", "span_em_f1"]


def bio_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Entities ``(type, start, end)`` (``end`` inclusive) of one tag sequence.

    Examples
    --------
    >>> sorted(bio_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC"]))
    [('LOC', 3, 3), ('LOC', 4, 4), ('PER', 0, 1)]
    """
    ents: set[tuple[str, int, int]] = set()
    typ, start = None, 0
    for i, t in enumerate(list(tags) + ["O"]):
        kind, _, name = t.partition("-")
        continues = kind == "I" and name == typ
        if typ is not None and not continues:
            ents.add((typ, start, i - 1))
            typ = None
        if kind in ("B", "I") and not continues:
            typ, start = name, i
    return ents


def entity_prf(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro entity precision, recall and F1 (percent) over sentences.

    Parameters
    ----------
    gold, pred : sequences of tag-name sequences
        One per sentence; ``pred[i]`` must have the length of ``gold[i]``.

    Returns
    -------
    dict
        ``precision``, ``recall``, ``f1`` (0 where undefined) and the counts ``n_gold``,
        ``n_pred``, ``n_correct``.
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold and pred hold {len(gold)} and {len(pred)} sentences")
    ng = npred = nc = 0
    for g, p in zip(gold, pred):
        if len(g) != len(p):
            raise ValueError("a predicted sentence differs in length from its gold sentence")
        eg, ep = bio_entities(g), bio_entities(p)
        ng, npred, nc = ng + len(eg), npred + len(ep), nc + len(eg & ep)
    prec = 100.0 * nc / npred if npred else 0.0
    rec = 100.0 * nc / ng if ng else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"precision": prec, "recall": rec, "f1": f1, "n_gold": ng, "n_pred": npred, "n_correct": nc}


def span_em_f1(gold: Sequence[tuple[int, int]], pred: Sequence[tuple[int, int]],
               tokens: Sequence[Sequence[int]] | None = None) -> dict[str, float]:
    """Exact match and mean token-overlap F1 (percent) of inclusive spans ``(start, end)``.

    The overlap is counted on the span's tokens (``tokens[i]`` the context ids of example ``i``)
    when given, else on positions.  An empty prediction (``end < start``) scores 0.

    Examples
    --------
    >>> span_em_f1([(2, 4)], [(3, 5)])
    {'exact_match': 0.0, 'f1': 66.66666666666667}
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold and pred hold {len(gold)} and {len(pred)} spans")
    em = f1 = 0.0
    for i, ((gs, ge), (ps, pe)) in enumerate(zip(gold, pred)):
        em += float(gs == ps and ge == pe)
        gt = list(range(gs, ge + 1)) if tokens is None else list(tokens[i][gs:ge + 1])
        pt = list(range(ps, pe + 1)) if tokens is None else list(tokens[i][ps:pe + 1])
        common = sum((Counter(gt) & Counter(pt)).values())
        if common:
            p, r = common / len(pt), common / len(gt)
            f1 += 2 * p * r / (p + r)
    n = max(len(gold), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}
