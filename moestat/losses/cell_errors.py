"""The quantities Theorem 5 and PDE (4) of Nguyen et al. (2024) bound, per Voronoi cell type.

Theorem 5 bounds the Voronoi loss ``D_2`` (eq. 13), whose terms are mass-weighted: for a true atom
``j`` with Voronoi cell ``A_j`` (eq. 5),

* a cell with one fitted atom contributes ``exp(beta0_i) ||omega_i - omega*_j||`` (exponent ``e = 1``),
* a cell with several fitted atoms contributes ``sum_{i in A_j} exp(beta0_i) ||omega_i - omega*_j||^2``
  (``e = 2``),

where ``omega = (beta1, eta)``.  ``D_2 = O_P((log n / n)^{1/2})`` gives the plain per-atom rates
``n^{-1/2}`` (single) and ``n^{-1/4}`` (multi) only through these weighted sums, so the sums
themselves are the direct test: each is predicted to decay like ``n^{-1/2}``, whatever the cell.
:func:`weighted_cell_errors` returns them summed over the cells of each type.

For the vanilla cosine router, PDE (4) ``beta1^T dF/dbeta1 = 0`` says the regression function is
blind to ``||beta1||``: :func:`beta1_split` splits the beta1 error of each fitted atom into its radial
part ``| ||beta1_i|| - ||beta1*_j|| |`` (unidentified: predicted to stay at the start's noise, a
floor) and its directional part ``|| beta1_i/||beta1_i|| - beta1*_j/||beta1*_j|| ||`` (identified:
predicted ``n^{-1/2}`` in the exact-specified setting).
"""

from __future__ import annotations

import numpy as np

from moestat.losses.voronoi import cell_sizes, voronoi_cells
from moestat.model.mixing import MixingMeasure

__all__ = ["CELL_ERROR_DEFINITIONS", "weighted_cell_errors", "beta1_split", "beta1_decomposition"]

#: What each quantity measures (for summaries and docs).
CELL_ERROR_DEFINITIONS = {
    "weighted_single": "sum over one-atom cells of exp(beta0_i) ||omega_i - omega*_j|| (a D2 term, Thm 5: n^-1/2)",
    "weighted_multi": "sum over multi-atom cells of sum_{i in A_j} exp(beta0_i) ||omega_i - omega*_j||^2 (a D2 term, Thm 5: n^-1/2)",
    "beta1_radial": "max over fitted atoms of | ||beta1_i|| - ||beta1*_j|| | (PDE (4): unidentified under the cosine router)",
    "beta1_direction": "max over fitted atoms of || beta1_i/||beta1_i|| - beta1*_j/||beta1*_j|| || (identified)",
}


def _own(fitted: MixingMeasure, truth: MixingMeasure):
    """Cells ``[..., k]``, own cell size ``[..., k]`` and the true atom of each fitted atom."""
    fitted, truth = fitted.numpy(), truth.numpy()
    cells = voronoi_cells(fitted, truth)
    sizes = cell_sizes(cells, truth.n_atoms)
    own_size = np.take_along_axis(sizes, cells, axis=-1)
    b1 = np.broadcast_to(truth.beta1, fitted.beta1.shape[:-2] + truth.beta1.shape[-2:])
    et = np.broadcast_to(truth.eta, fitted.eta.shape[:-2] + truth.eta.shape[-2:])
    tb1 = np.take_along_axis(b1, cells[..., None], axis=-2)
    teta = np.take_along_axis(et, cells[..., None], axis=-2)
    return fitted, cells, own_size, tb1, teta


def weighted_cell_errors(fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, np.ndarray]:
    """Mass-weighted per-cell errors of Theorem 5, summed over the cells of each type.

    Parameters
    ----------
    fitted : MixingMeasure
        Fitted atoms, ``beta0 [..., k]``, ``beta1 [..., k, d]``, ``eta [..., k, q]``.
    truth : MixingMeasure
        The k* true atoms (unbatched, or with a batch shape broadcasting with ``fitted``'s).

    Returns
    -------
    dict of str to ndarray, each of shape ``[...]``
        ``weighted_single`` (``e = 1`` over one-atom cells) and ``weighted_multi`` (``e = 2`` over
        multi-atom cells); NaN when no cell is of that type.
    """
    fitted, cells, own_size, tb1, teta = _own(fitted, truth)
    dist = np.sqrt(np.sum((fitted.beta1 - tb1) ** 2, axis=-1) + np.sum((fitted.eta - teta) ** 2, axis=-1))  # [..., k]
    w = np.exp(fitted.beta0)
    single = np.where(own_size == 1, w * dist, 0.0).sum(axis=-1)
    multi = np.where(own_size > 1, w * dist**2, 0.0).sum(axis=-1)
    has_single = (own_size == 1).any(axis=-1)
    has_multi = (own_size > 1).any(axis=-1)
    return {"weighted_single": np.where(has_single, single, np.nan), "weighted_multi": np.where(has_multi, multi, np.nan)}


def beta1_split(fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, np.ndarray]:
    """The beta1 error split into its radial and directional parts (PDE (4)).

    Parameters
    ----------
    fitted, truth : MixingMeasure
        As in :func:`weighted_cell_errors`.

    Returns
    -------
    dict of str to ndarray, each of shape ``[...]``
        ``beta1_radial`` and ``beta1_direction``: the largest over fitted atoms (each against the
        true atom of its Voronoi cell).  A zero ``beta1`` has direction 0.
    """
    fitted, cells, own_size, tb1, teta = _own(fitted, truth)
    nf = np.linalg.norm(fitted.beta1, axis=-1)
    nt = np.linalg.norm(tb1, axis=-1)
    uf = np.divide(fitted.beta1, nf[..., None], out=np.zeros_like(fitted.beta1), where=nf[..., None] > 0)
    ut = np.divide(tb1, nt[..., None], out=np.zeros_like(tb1), where=nt[..., None] > 0)
    return {"beta1_radial": np.abs(nf - nt).max(axis=-1), "beta1_direction": np.linalg.norm(uf - ut, axis=-1).max(axis=-1)}


def beta1_decomposition(fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, np.ndarray]:
    """Per-atom radial and directional parts of the beta1 error, with the norm identity they satisfy.

    For a fitted ``b = beta1_i`` and the true ``b* = beta1*_j`` of its Voronoi cell (eq. 5), with
    unit vectors ``u = b / ||b||`` and ``u* = b* / ||b*||``,

    .. math::

        \\|b - b^*\\|^2 = (\\|b\\| - \\|b^*\\|)^2 + \\|b\\|\\,\\|b^*\\|\\,\\|u - u^*\\|^2

    (expand ``||b||^2 + ||b*||^2 - 2 ||b|| ||b*|| cos`` and use ``||u - u*||^2 = 2 - 2 cos``).  The
    first term is the radial part, which PDE (4) makes invisible to the vanilla cosine router;
    the second the directional part, which the data identify.

    Parameters
    ----------
    fitted : MixingMeasure
        Fitted atoms, ``beta1 [..., k, d]`` (batched or not).
    truth : MixingMeasure
        The k* true atoms.

    Returns
    -------
    dict of str to ndarray, each of shape ``[..., k]``
        ``radial`` (signed ``||b|| - ||b*||``), ``direction`` (``||u - u*||``; 0 for a zero
        vector), ``angle`` (radians between ``b`` and ``b*``; 0 when either is zero),
        ``directional_part`` (``sqrt(||b|| ||b*||) ||u - u*||``), ``error`` (``||b - b*||``) and
        ``cell`` (the true atom of each fitted atom, int).
    """
    fitted, cells, own_size, tb1, teta = _own(fitted, truth)
    nf = np.linalg.norm(fitted.beta1, axis=-1)
    nt = np.linalg.norm(tb1, axis=-1)
    uf = np.divide(fitted.beta1, nf[..., None], out=np.zeros_like(fitted.beta1), where=nf[..., None] > 0)
    ut = np.divide(tb1, nt[..., None], out=np.zeros_like(tb1), where=nt[..., None] > 0)
    direction = np.linalg.norm(uf - ut, axis=-1)
    # arccos of the clipped cosine loses accuracy near 0; 2 asin(||u - u*|| / 2) does not
    angle = np.where((nf > 0) & (nt > 0), 2.0 * np.arcsin(np.clip(direction / 2.0, 0.0, 1.0)), 0.0)
    return {
        "radial": nf - nt,
        "direction": direction,
        "angle": angle,
        "directional_part": np.sqrt(nf * nt) * direction,
        "error": np.linalg.norm(fitted.beta1 - tb1, axis=-1),
        "cell": cells,
    }
