"""Per-block errors of the over-fitted cells of a softmax-gated Gaussian MoE.

Theorem 2 of Nguyen, Nguyen & Ho (2023) bounds the over-fitted Voronoi loss ``D2``; block by block
(restated in Han et al. 2024, FuseMoE, Table 2), a cell ``A_j`` of ``M >= 2`` fitted atoms around
the true atom ``j`` has its summed weight ``sum_{i in A_j} exp(beta0_i)`` at ``n^{-1/2}``, the gate
slope ``beta1`` and the expert intercept ``b`` at ``n^{-1/(2 rbar(M))}``, the expert slope ``a``
and the variance ``nu`` at ``n^{-1/rbar(M)}``, with ``rbar(2) = 4`` and ``rbar(3) = 6``.

The recorded runs have one column for all blocks of the shared cells together (``param_multi``,
dominated by the slowest block) and one for the summed weights (``mass``).  :func:`block_errors`
gives one column per block, each measured as ``param_multi`` is
(:func:`moestat.losses.voronoi.weighted_multi_error`: the mass-weighted root mean square over a
cell, the largest over the cells of several atoms), on the cells and the softmax normalisation of
:func:`moestat.data.gaussian_scenarios.gaussian_voronoi`; so the four columns' squares add up to
``param_multi``'s square where a fit has one shared cell.

The errors are loss columns of the over-fitted Gaussian scenario itself
(:meth:`moestat.data.gaussian_scenarios.GaussianMoEScenario.loss_columns`, computed beside
``param_multi`` on the same cells), and the sweep records them in ``extras.csv``.  This module
says which columns an experiment has and what it predicts for them: :func:`block_columns` (empty
unless the scenario is an over-fitted softmax-gated Gaussian MoE) and :func:`block_predicted`
(their exponents, merged into the experiment's predictions: a cell of two atoms for ``K = k* + 1``;
none stated for larger ``K``, whose cell sizes are the fit's).
"""

from __future__ import annotations

import numpy as np

# the errors are the Gaussian scenario's own loss columns (GaussianMoEScenario.loss_columns); re-exported here
from moestat.data.gaussian_scenarios import BLOCKS, block_errors, block_predictions

__all__ = ["BLOCKS", "block_columns", "block_errors", "block_predicted", "block_predictions"]

def block_columns(scenario) -> tuple[str, ...]:
    """The per-block ``extras.csv`` columns of ``scenario``: the keys of :data:`BLOCKS` for an
    over-fitted softmax-gated Gaussian MoE, else ``()`` (no column, nothing computed) -- the
    scenario's own :attr:`~moestat.data.synthetic.ScenarioBase.extra_loss_columns`."""

    return tuple(scenario.extra_loss_columns)


def block_predicted(scenario) -> dict[str, float | None]:
    """The predicted exponents of :func:`block_columns`, column -> exponent or ``None``.

    ``K = k* + 1`` fitted atoms: the one over-fitted cell has two atoms, so :func:`block_predictions`
    of 2 (Theorem 2 of Nguyen, Nguyen & Ho 2023, ``rbar(2) = 4``).  A larger ``K`` can split the atoms
    into cells of several sizes (model 1, ``K = 4``: 2 + 2 or 3 + 1), and the slowest cell is the fit's,
    not the design's: ``None`` (no exponent stated).  ``{}`` where :func:`block_columns` is empty.
    """

    cols = block_columns(scenario)
    if not cols:
        return {}
    if scenario.k_fit == scenario.truth.n_atoms + 1:
        return block_predictions(2)
    return {c: None for c in cols}
