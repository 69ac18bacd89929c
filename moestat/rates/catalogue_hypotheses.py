"""Every catalogue run's truth against the hypotheses of its own theorem.

:data:`CATALOGUE_THEOREMS` names, for each run of :mod:`moestat.rates.catalogue`, the theorem of
:mod:`moestat.rates.hypotheses` whose hypotheses its truth must meet; :func:`catalogue_hypotheses`
checks them, so that a run is never judged against a theorem whose hypotheses its truth breaks.
"""

from __future__ import annotations

from typing import Any

from moestat.rates.catalogue import ENTRIES, run_config
from moestat.rates.hypotheses import N_X, THEOREMS, check_hypotheses
from moestat.rates.resolve import Experiment

__all__ = ["CATALOGUE_THEOREMS", "catalogue_hypotheses"]

BY_KEY = {t.key: t for t in THEOREMS}

#: (catalogue entry, run label, router or None) -> the theorem whose hypotheses the run's truth must meet.
CATALOGUE_THEOREMS: dict[tuple[str, str, str | None], str] = {
    ("cosine-exact", "routers", "perturbed"): "cosine-thm6",
    ("cosine-exact", "routers", "cosine"): "cosine-thm2-3",
    ("cosine-over", "routers", "perturbed"): "cosine-thm5",
    ("cosine-over", "routers", "cosine"): "cosine-thm2-3",
    ("gmoe-exact", "gaussian-moe", None): "gmoe-softmax",
    ("gmoe-over3", "gaussian-moe", None): "gmoe-softmax",
    ("gmoe-over4", "gaussian-moe", None): "gmoe-softmax",
    ("lse-ffn-vs-linear", "ffn-sigmoid", None): "lse-strong",
    ("lse-ffn-vs-linear", "linear", None): "lse-polynomial",
    ("sigmoid-vs-softmax", "sigmoid", None): "sigmoid-strong",
    ("sigmoid-vs-softmax", "softmax", None): "lse-strong",
    ("topk-gmoe", "topk-exact", None): "topk-gmoe",
    ("multinomial-moe", "nonvanishing", None): "multinomial-nonvanishing",
    ("multinomial-moe", "vanishing", None): "multinomial-vanishing",
    ("gaussian-gated-moe", "gllim", None): "gaussian-gate-type1",
    ("laplace-gmoe", "exact", None): "laplace-gmoe",
    ("laplace-gmoe", "over", None): "laplace-gmoe",
    ("topk-over", "topk-over", None): "topk-gmoe-over",
    ("shared-sigmoid", "exact", None): "shared-sigmoid",
    ("shared-sigmoid", "over", None): "shared-sigmoid",
}


def catalogue_hypotheses(keys: list[str] | None = None, *, n: int = N_X, seed: int = 0) -> list[dict[str, Any]]:
    """Check every catalogue run's truth against its own theorem (:data:`CATALOGUE_THEOREMS`).

    Returns
    -------
    list of dict
        ``entry``, ``run``, ``router``, ``theorem``, ``met``, ``failing`` and the full report
        ``report`` of :func:`check_hypotheses`.  A run whose scenario has no conditional model (the
        joint GLLiM of ``gaussian-gated-moe``) has ``met = None`` and says it was not checked.
    """

    rows = []
    for (key, label, router), th in CATALOGUE_THEOREMS.items():
        if keys is not None and key not in keys:
            continue
        run = next(r for r in ENTRIES[key].runs if r.label == label)
        cfg = run_config(run, quick=True)
        sc = Experiment.of(cfg).scenarios[router if router is not None else cfg.router[0]]
        if getattr(sc, "model", True) is None:  # the joint GLLiM: x modelled by the gate's mixture, no conditional model
            rows.append({"entry": key, "run": label, "router": router, "theorem": th, "cite": BY_KEY[th].cite, "met": None,
                         "failing": ["not checked: the joint GLLiM has no conditional gate-expert model for these conditions"],
                         "report": {"conditions": {}}})
            continue
        rep = check_hypotheses(sc, n=n, seed=seed, theorem=th)
        t = rep["theorems"][0]
        rows.append({"entry": key, "run": label, "router": router, "theorem": th, "cite": t["cite"], "met": t["met"],
                     "failing": t["failing"], "report": rep})
    return rows
