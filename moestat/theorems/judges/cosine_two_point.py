"""The two-point judges of the catalogue entries ``cosine-exact`` and ``cosine-over`` (Nguyen et al. (2024)).

Theorems 2 and 3 of Nguyen et al. (2024) say that under the vanilla cosine router the paper's
Voronoi loss has no polynomial rate.  They are **minimax** statements (an infimum over estimators,
a supremum over truths near the degenerate set), proved by Le Cam's two points along a witness
sequence; a slope at one fixed truth cannot test them (docs/guide/two_point.rst).  These judges
apply that instrument (:mod:`moestat.theorems.judges.two_point`) to the entries' ``cosine voronoi`` row:

- ``cosine-exact`` (:func:`judge_exact`): the radial witness of App. B.2,
  ``beta1_j -> (1 + t) beta1_j``, loss ``D3`` (the row's ``voronoi``, ``D_{1,1}`` in the exact
  setting);
- ``cosine-over`` (:func:`judge_over`): the split witness of App. B.3 (atom ``j`` carried by two
  half-mass atoms at radii ``1 -+ t``, ``k* + 1`` atoms), loss ``D2`` (eq. 13, the row's ``voronoi``).

Each computes the bound for both routers on the same construction
(:func:`moestat.theorems.judges.two_point.router_pair_verdict`): ``consistent`` when the vanilla router's is
flat and the perturbed router's falls at ``n^{-1/2}`` (Theorems 6 and 5: the instrument sees a rate
where the theory says there is one), ``inconsistent`` when the vanilla bound falls, ``inconclusive``
when it is flat but the perturbed one does not fall at the predicted rate.  The scenarios are the
ones the entry's run builds (its configuration, both routers on one truth).

What it proves: no estimator's worst-case risk over the pair falls with ``n`` under the vanilla
router (the radius is not identified, PDE (4)), which is stronger than "slower than any polynomial
rate".  What it does not: anything about the least-squares fit at the fixed truth of the run (its
slope, reported beside as ``fixed_truth``), about the directional or expert parameters (the Taylor
witness of eq. (26) is not built), or an upper rate for the perturbed router.
"""

from __future__ import annotations

from typing import Any

from moestat.rates.catalogue import entry, run_config
from moestat.rates.resolve import Experiment
from moestat.theorems.judges.two_point import router_pair_verdict

__all__ = ["entry_scenarios", "judge_exact", "judge_over", "ROW"]

#: The row of both entries that the instrument judges (run ``routers``); the other rows keep their slopes.
RUN, ROW = "routers", "cosine voronoi"


def entry_scenarios(key: str) -> dict:
    """``{"cosine": Scenario, "perturbed": Scenario}`` of entry ``key``'s run ``routers`` (its quick configuration:
    the grid does not enter the scenario)."""
    run = next(r for r in entry(key).runs if r.label == RUN)
    return dict(Experiment.of(run_config(run, quick=True)).scenarios)


def _judge(key: str, witness: str, loss: str, quick: bool) -> dict[str, dict[str, Any]]:
    v = router_pair_verdict(entry_scenarios(key), witness, loss, quick=quick)
    return {RUN: {**v, "loss": ROW}}


def judge_exact(quick: bool = True) -> dict[str, dict[str, Any]]:
    """``cosine-exact``'s ``cosine voronoi`` row by the radial witness (Theorem 2 vs Theorem 6), loss ``D3``."""
    return _judge("cosine-exact", "radial", "D3", quick)


def judge_over(quick: bool = True) -> dict[str, dict[str, Any]]:
    """``cosine-over``'s ``cosine voronoi`` row by the split witness (Theorem 3 vs Theorem 5), loss ``D2``."""
    return _judge("cosine-over", "split", "D2", quick)
