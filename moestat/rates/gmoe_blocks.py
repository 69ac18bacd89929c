"""Per-block errors of the over-fitted cells of a softmax-gated Gaussian MoE (issue 33, Scope 3).

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

A sweep records them in ``extras.csv`` through three functions of one scenario: :func:`block_columns`
(the columns, empty unless the scenario is an over-fitted softmax-gated Gaussian MoE),
:func:`block_extras` (their values for one batch of fits, called where the sweep computes a fit's
extras) and :func:`block_predicted` (their exponents, merged into the experiment's predictions: a
cell of two atoms for ``K = k* + 1``; none stated for larger ``K``, whose cell sizes are the fit's).
"""

from __future__ import annotations

import numpy as np

from moestat.data.gaussian_scenarios import RBAR, _normalised, gaussian_loss_spec
from moestat.losses.voronoi import weighted_multi_error
from moestat.losses.voronoi_spec import cell_terms_from_spec
from moestat.model.mixing import MixingMeasure

__all__ = ["BLOCKS", "block_columns", "block_errors", "block_extras", "block_predicted", "block_predictions"]

#: column name -> (parameter block, "rbar" or "rbar/2": the exponent of the block in D2)
BLOCKS = {"multi_beta1": ("beta1", "rbar"), "multi_b": ("b", "rbar"), "multi_a": ("a", "rbar/2"),
          "multi_variance": ("variance", "rbar/2")}


def block_predictions(cell_size: int) -> dict[str, float]:
    """The exponent of ``n`` of every column of :data:`BLOCKS` for over-fitted cells of ``cell_size`` atoms.

    ``beta1`` and ``b``: ``-1/(2 rbar(M))``; ``a`` and ``variance``: ``-1/rbar(M)`` (Theorem 2 of
    Nguyen, Nguyen & Ho 2023; Han et al. 2024, Table 2).  ``cell_size`` must be 2 or 3, the sizes whose
    ``rbar`` the paper gives (4 and 6).
    """

    if cell_size not in (2, 3):
        raise ValueError(f"rbar(M) is stated for cells of 2 or 3 atoms, got M = {cell_size!r}")
    r = RBAR[cell_size - 1]
    return {col: (-1.0 / (2 * r) if how == "rbar" else -1.0 / r) for col, (_, how) in BLOCKS.items()}


def block_errors(fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, np.ndarray]:
    """One column per block of the over-fitted cells: ``multi_beta1``, ``multi_b``, ``multi_a``, ``multi_variance``.

    Parameters
    ----------
    fitted : MixingMeasure
        ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]`` (``eta = (a, b, variance)``), or unbatched.
    truth : MixingMeasure
        Unbatched, ``k*`` atoms, the last the softmax reference.

    Returns
    -------
    dict of ndarray, each ``[R]``
        The largest mass-weighted root mean square error of the block over the cells of two or more
        fitted atoms; NaN for a non-finite fit or one without such a cell (an exact fit).
    """

    G, T = fitted.numpy(), truth.numpy()
    if not G.batch_shape:
        G = MixingMeasure(G.beta0[None], G.beta1[None], G.eta[None])
    out = {col: np.full(G.beta0.shape[0], np.nan) for col in BLOCKS}
    ok = G.finite()
    if not ok.any():
        return out
    G = MixingMeasure(G.beta0[ok], G.beta1[ok], G.eta[ok])
    d, ref = T.dim, T.n_atoms - 1
    spec = gaussian_loss_spec("D2", d)
    cells = cell_terms_from_spec(spec, G, T)["cells"]  # the expert blocks decide the cells, as in gaussian_voronoi
    b0, b1 = G.beta0.copy(), G.beta1.copy()
    for r in range(b0.shape[0]):  # softmax's common shift fixed on the reference cell, as gaussian_voronoi does
        if np.any(cells[r] == ref):
            b0[r], b1[r] = _normalised(b0[r], b1[r], cells[r] == ref)
    sizes = (cells[..., :, None] == np.arange(T.n_atoms)).sum(-2)  # [R', k*]
    own = lambda x, xs: x - xs[cells]  # noqa: E731 - each fitted atom against its own true atom
    diffs = {"beta1": own(b1, T.beta1), "a": own(G.eta[..., :d], T.eta[:, :d]),
             "b": own(G.eta[..., d:d + 1], T.eta[:, d:d + 1]), "variance": own(G.eta[..., d + 1:d + 2], T.eta[:, d + 1:d + 2])}
    w = np.exp(b0)
    for col, (block, _) in BLOCKS.items():
        out[col][ok] = weighted_multi_error(np.linalg.norm(diffs[block], axis=-1), w, cells, sizes)
    return out


def _over_fitted_gmoe(scenario) -> bool:
    # the softmax-gated Gaussian MoE of moestat.data.gaussian_scenarios (the scenario protocol's flag),
    # fitted with more atoms than the truth's: the only model whose cells block_errors measures
    return bool(scenario.gaussian_moe) and scenario.k_fit > scenario.truth.n_atoms


def block_columns(scenario) -> tuple[str, ...]:
    """The ``extras.csv`` columns of :func:`block_extras` for ``scenario``: the keys of :data:`BLOCKS`
    for an over-fitted softmax-gated Gaussian MoE, else ``()`` (no column, nothing computed)."""

    return tuple(BLOCKS) if _over_fitted_gmoe(scenario) else ()


def block_extras(scenario, fitted: MixingMeasure) -> dict[str, np.ndarray]:
    """The per-block errors of one batch of fits, one array ``[R]`` per :func:`block_columns` entry.

    Parameters
    ----------
    scenario : scenario
        The sweep's scenario (:class:`moestat.data.synthetic.ScenarioBase` protocol); ``{}`` unless it
        is an over-fitted softmax-gated Gaussian MoE.
    fitted : MixingMeasure
        The batch of fits ``[R]`` (the fits of ``results.csv``, after the truth check's answer).

    Returns
    -------
    dict of ndarray
        :func:`block_errors` of the fits against the scenario's truth, or ``{}``.
    """

    return block_errors(fitted, scenario.truth) if _over_fitted_gmoe(scenario) else {}


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
