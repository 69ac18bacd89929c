"""Voronoi losses between a fitted and a true mixing measure (Nguyen et al. (2024), eqs. (5), (13), (16) and D_{1,r}).

One generic implementation serves every loss of the paper.  Fitted atoms ``omega_i = (beta1_i,
eta_i)`` are assigned to the nearest true atom ``omega*_j`` (Voronoi cells ``A_j``, eq. 5; the
bias ``beta0`` is *not* part of ``omega``).  Each true atom ``j`` then contributes the cell term::

    c_j = sum_{i in A_j} exp(beta0_i) (||dbeta1_ij||^e + ||deta_ij||^e) + |sum_{i in A_j} exp(beta0_i) - exp(beta0*_j)|

with an exponent ``e = e(|A_j|)`` that depends on the cell size only:

========  ================================  ==========================================
loss      exponent table ``e(m)``           used for
========  ================================  ==========================================
``D1``    ``r`` for every ``m``             vanilla cosine router (Thms 2/3), ``r >= 1``
``D2``    1 if ``m = 1``, 2 if ``m > 1``    perturbed, over-specified (eq. 13, Thm 5)
``D3``    1                                 perturbed, exact-specified (eq. 16, Thm 6)
========  ================================  ==========================================

The paper takes the maximum over K-subsets ``{l_1, ..., l_K}`` of ``[k*]`` of the sum of the
selected cell terms (to handle Top-K).  Because every ``c_j >= 0`` depends on its own cell only,
that maximum is the **sum of the K largest cell terms**; no loop over subsets is needed.

All functions accept batched measures (leading replicate dimensions on the fitted measure; the
truth may be batched or not) and return NumPy arrays with the batch shape.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from moestat.model.mixing import MixingMeasure

__all__ = [
    "EXPONENT_TABLES",
    "voronoi_cells",
    "cell_sizes",
    "cell_terms",
    "voronoi_loss",
    "cell_parameter_errors",
    "weighted_multi_error",
    "direction_only",
    "check_k_active",
    "sum_of_largest",
]


def _d1(r: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda m: np.full(m.shape, float(r))


#: Exponent tables ``e(cell size)`` of the paper's losses (see module docstring).
EXPONENT_TABLES: dict[str, Callable[..., Callable[[np.ndarray], np.ndarray]]] = {
    "D1": _d1,
    "D2": lambda r=1: (lambda m: np.where(m > 1, 2.0, 1.0)),
    "D3": lambda r=1: (lambda m: np.ones(m.shape)),
}


def direction_only(G: MixingMeasure) -> MixingMeasure:
    """Replace each ``beta1_i`` by ``beta1_i / ||beta1_i||`` (0 stays 0).

    Under the vanilla cosine router, PDE (4) makes ``g_G`` depend on ``beta1`` only through its
    direction, so ``||beta1||`` is not identifiable; the direction-only loss measures what the
    data can identify.

    Parameters
    ----------
    G : MixingMeasure
        Atoms ``beta1 [..., k, d]`` (batched or not).

    Returns
    -------
    MixingMeasure
        NumPy copy with unit (or zero) ``beta1 [..., k, d]``; ``beta0`` and ``eta`` unchanged.
    """
    m = G.numpy()
    nrm = np.linalg.norm(m.beta1, axis=-1, keepdims=True)
    unit = np.divide(m.beta1, nrm, out=np.zeros_like(m.beta1), where=nrm > 0)
    return MixingMeasure(m.beta0, unit, m.eta)


def _prepare(fitted: MixingMeasure, truth: MixingMeasure, direction: bool) -> tuple[MixingMeasure, MixingMeasure]:
    for G, role in ((fitted, "fitted"), (truth, "truth")):
        if not isinstance(G, MixingMeasure):  # an array would otherwise fail later with AttributeError
            raise TypeError(f"{role} must be a MixingMeasure, got {type(G).__name__}")
    fitted, truth = fitted.numpy(), truth.numpy()
    if fitted.dim != truth.dim or fitted.eta_dim != truth.eta_dim:
        raise ValueError(
            f"fitted and true atoms differ in shape: beta1 {fitted.dim} vs {truth.dim}, eta {fitted.eta_dim} vs {truth.eta_dim}"
        )
    if direction:
        fitted, truth = direction_only(fitted), direction_only(truth)
    batch = fitted.batch_shape
    tb = truth.batch_shape
    if tb and tb != batch[-len(tb):] and tb != batch:
        raise ValueError(f"truth batch shape {tb} does not broadcast with fitted batch shape {batch}")
    return fitted, truth


def _distances(fitted: MixingMeasure, truth: MixingMeasure, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-block distances ``[..., k, k*]`` for beta1 and eta, and the cell metric."""
    db1 = np.linalg.norm(fitted.beta1[..., :, None, :] - truth.beta1[..., None, :, :], axis=-1)
    deta = np.linalg.norm(fitted.eta[..., :, None, :] - truth.eta[..., None, :, :], axis=-1)
    if metric == "euclidean":  # ||omega_i - omega*_j|| on the concatenation, eq. (5)
        dist = np.sqrt(db1**2 + deta**2)
    elif metric == "block":  # ||dbeta1|| + ||deta||, the cell metric some public implementations use
        dist = db1 + deta
    else:
        raise ValueError(f"unknown Voronoi metric {metric!r}; expected 'euclidean' or 'block'")
    return db1, deta, dist


def voronoi_cells(fitted: MixingMeasure, truth: MixingMeasure, metric: str = "euclidean", direction: bool = False) -> np.ndarray:
    """Index of the true atom whose Voronoi cell contains each fitted atom (eq. 5).

    Parameters
    ----------
    fitted, truth, metric, direction
        See :func:`cell_terms`.

    Returns
    -------
    ndarray of int, shape ``[..., k]``
        ``cells[..., i] = j`` when fitted atom ``i`` is in ``A_j``.  Ties go to the lowest ``j``
        (one cell per atom: an atom equidistant from two true atoms is never counted twice).
    """
    fitted, truth = _prepare(fitted, truth, direction)
    return np.argmin(_distances(fitted, truth, metric)[2], axis=-1)


def cell_sizes(cells: np.ndarray, k_star: int) -> np.ndarray:
    """``|A_j|`` for each true atom (empty cells count 0).

    Parameters
    ----------
    cells : ndarray of int, shape ``[..., k]``
        Output of :func:`voronoi_cells`.
    k_star : int
        Number of true atoms.

    Returns
    -------
    ndarray of int, shape ``[..., k*]``
    """
    one_hot = cells[..., :, None] == np.arange(k_star)
    return one_hot.sum(axis=-2)


def _assign(dist: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Voronoi cells from distances ``[..., k, k*]``: ``cells [..., k]``, ``sizes [..., k*]`` and
    the membership mask ``[..., k, k*]``."""
    k_star = dist.shape[-1]
    cells = np.argmin(dist, axis=-1)
    return cells, cell_sizes(cells, k_star), cells[..., :, None] == np.arange(k_star)


def _mass_gaps(fitted: MixingMeasure, truth: MixingMeasure, member: np.ndarray) -> np.ndarray:
    """``|sum_{i in A_j} exp(beta0_i) - exp(beta0*_j)|`` per true atom, ``[..., k*]``."""
    cell_mass = np.where(member, np.exp(fitted.beta0)[..., :, None], 0.0).sum(axis=-2)
    return np.abs(cell_mass - np.exp(truth.beta0))


def cell_terms(
    fitted: MixingMeasure,
    truth: MixingMeasure,
    loss: str = "D3",
    r: float = 1.0,
    metric: str = "euclidean",
    direction: bool = False,
    exponent: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Per-cell terms of a Voronoi loss, with the pieces they are made of.

    Parameters
    ----------
    fitted, truth : MixingMeasure
        Fitted measure (batched ``[...]`` or not) and true measure (k* atoms).
    loss : {"D1", "D2", "D3"}
        Exponent table (ignored when ``exponent`` is given).
    r : float
        The ``r`` of ``D_{1,r}``.
    metric : {"euclidean", "block"}
        Distance used to form the cells: ``euclidean`` is ``||omega_i - omega*_j||`` on the
        concatenation (eq. (5)), ``block`` is ``||dbeta1|| + ||deta||``.
    direction : bool
        Compare ``beta1 / ||beta1||`` instead of ``beta1`` (see :func:`direction_only`).
    exponent : callable, optional
        Custom table ``e(cell_sizes) -> exponents``.

    Returns
    -------
    dict
        ``terms [..., k*]`` (the ``c_j``), ``sizes [..., k*]``, ``cells [..., k]``,
        ``param_part [..., k*]`` and ``mass_part [..., k*]``.
    """
    if exponent is None:
        if loss not in EXPONENT_TABLES:
            raise ValueError(f"unknown Voronoi loss {loss!r}; expected one of {tuple(EXPONENT_TABLES)}")
        if not (np.isfinite(r) and r >= 1):
            raise ValueError(f"r must be >= 1, got {r!r}")
        exponent = EXPONENT_TABLES[loss](r)
    fitted, truth = _prepare(fitted, truth, direction)
    db1, deta, dist = _distances(fitted, truth, metric)
    cells, sizes, member = _assign(dist)
    e = exponent(sizes)[..., None, :]  # exponent of each atom's cell, [..., 1, k*]
    mass = np.exp(fitted.beta0)[..., :, None]  # [..., k, 1]
    per_atom = mass * (db1**e + deta**e)
    param_part = np.where(member, per_atom, 0.0).sum(axis=-2)
    mass_part = _mass_gaps(fitted, truth, member)
    return {
        "terms": param_part + mass_part,
        "sizes": sizes,
        "cells": cells,
        "param_part": param_part,
        "mass_part": mass_part,
    }


def voronoi_loss(
    fitted: MixingMeasure,
    truth: MixingMeasure,
    loss: str = "D3",
    k_active: int | None = None,
    r: float = 1.0,
    metric: str = "euclidean",
    direction: bool = False,
) -> np.ndarray:
    """A Voronoi loss ``D(G, G*)`` of Nguyen et al. (2024).

    Parameters
    ----------
    fitted, truth : MixingMeasure
        See :func:`cell_terms`.
    loss : {"D1", "D2", "D3"}
        ``D1`` = ``D_{1,r}`` (vanilla router), ``D2`` eq. (13), ``D3`` eq. (16).
    k_active : int or None
        K of the **true** model (``1 <= K <= k*``): the maximum over K-subsets of true atoms,
        computed as the sum of the K largest cell terms.  ``None``: all ``k*`` cells (dense gate).
    r, metric, direction
        See :func:`cell_terms`.

    Returns
    -------
    ndarray
        The loss, with the fitted measure's batch shape.

    Raises
    ------
    TypeError
        If ``fitted`` or ``truth`` is not a :class:`MixingMeasure`.
    ValueError
        If ``k_active`` is not in ``1..k*``, or the loss name or ``r`` is invalid.

    See Also
    --------
    moestat.losses.voronoi_spec.voronoi_loss_from_spec : the same losses (and any other) from a
        specification; ``builtin_spec(loss, r)`` reproduces this function bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> from moestat import MixingMeasure
    >>> G = MixingMeasure(np.zeros(2), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    >>> float(voronoi_loss(G, G))
    0.0
    """
    t = cell_terms(fitted, truth, loss=loss, r=r, metric=metric, direction=direction)["terms"]
    return sum_of_largest(t, k_active)  # checks 1 <= K <= k* (K > k* would be a silent dense sum)


def check_k_active(k_active: int | None, k_star: int) -> None:
    """Raise ``ValueError`` unless ``k_active`` is None or in ``1..k*``."""
    if k_active is None:
        return
    if k_active < 1:
        raise ValueError(f"k_active must be >= 1, got {k_active}")
    if k_active > k_star:
        raise ValueError(f"k_active={k_active} exceeds the number of true atoms k*={k_star}")


def sum_of_largest(terms: np.ndarray, k_active: int | None) -> np.ndarray:
    """The max over K-subsets of true atoms of the summed cell terms: the sum of the K largest.

    Every cell term is non-negative and depends on its own cell only, so no loop over subsets
    is needed (module docstring of :mod:`moestat.losses.voronoi`).

    Parameters
    ----------
    terms : ndarray, shape ``[..., k*]``
    k_active : int or None
        K of the true model (``None``: every cell, a dense gate).

    Returns
    -------
    ndarray, shape ``[...]``
    """
    k_star = terms.shape[-1]
    check_k_active(k_active, k_star)
    if k_active is None or k_active == k_star:
        return terms.sum(axis=-1)
    return np.sort(terms, axis=-1)[..., -k_active:].sum(axis=-1)


def weighted_multi_error(atom_errors: np.ndarray, weights: np.ndarray, cells: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The parameter error of the cells with several fitted atoms, weighted as ``D_2`` weighs it.

    For each true atom ``j`` whose Voronoi cell ``A_j`` holds two or more fitted atoms, the
    mass-weighted root mean square ``sqrt(sum_{i in A_j} w_i ||omega_i - omega*_j||^2 / sum_{i in A_j} w_i)``;
    the largest over such cells.  Why weighted: ``D_2`` (Nguyen et al. (2024), eq. (13)) bounds
    ``sum_{i in A_j} w_i ||omega_i - omega*_j||^r`` (``r = 2`` there; ``r = rbar >= 2`` in the
    Gaussian MoE's ``D_2`` of Nguyen, Nguyen & Ho (2023)), and the cell's mass tends to the true
    ``w*_j > 0``, so this root mean square is at most ``(D_2 / sum_{A_j} w_i)^{1/r}`` (power-mean
    inequality) -- the rate ``n^{-1/(2r)}`` of Theorem 5 (i).  An *unweighted* maximum over the
    atoms is not bounded by ``D_2``: an atom whose mass vanishes may stay anywhere.  The ratio does
    not depend on softmax's common shift of ``beta0``.

    Parameters
    ----------
    atom_errors : ndarray, shape ``[..., k]``
        ``||omega_i - omega*_{j(i)}||`` of every fitted atom to its own true atom.
    weights : ndarray, shape ``[..., k]``
        The atoms' masses ``w_i`` (softmax: ``exp(beta0_i)``).
    cells : ndarray of int, shape ``[..., k]``
        The true atom of each fitted atom.
    sizes : ndarray of int, shape ``[..., k*]``
        Fitted atoms per cell.

    Returns
    -------
    ndarray, shape ``[...]``
        NaN where no cell has several atoms (an exact fit).
    """
    k_star = sizes.shape[-1]
    member = (cells[..., :, None] == np.arange(k_star)) & (sizes[..., None, :] > 1)  # [..., k, k*]
    w = np.broadcast_to(weights, atom_errors.shape)[..., :, None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        num = np.where(member, w * atom_errors[..., :, None] ** 2, 0.0).sum(axis=-2)
        den = np.where(member, w, 0.0).sum(axis=-2)
        per_cell = np.sqrt(num / den)  # [..., k*]
    per_cell = np.where(sizes > 1, per_cell, -np.inf)
    worst = per_cell.max(axis=-1)
    return np.where(np.isneginf(worst), np.nan, worst)


def cell_parameter_errors(
    fitted: MixingMeasure, truth: MixingMeasure, metric: str = "euclidean", direction: bool = False
) -> dict[str, np.ndarray]:
    """Plain parameter errors split by cell type (Theorem 5 (i)).

    ``single``: the largest ``||omega_i - omega*_j||`` over atoms alone in their cell (predicted
    rate ``n^{-1/2}``); ``multi``: over the cells shared by several atoms, the largest mass-weighted
    root mean square ``sqrt(sum_{A_j} exp(beta0_i) ||omega_i - omega*_j||^2 / sum_{A_j} exp(beta0_i))``
    (:func:`weighted_multi_error`: the quantity ``D_2`` bounds; predicted ``n^{-1/4}``);
    ``mass``: the largest ``|sum_{A_j} exp(beta0_i) - exp(beta0*_j)|``.  NaN where no atom is of
    that type (e.g. ``multi`` in an exact fit).  Plain distances, not squared.

    Parameters
    ----------
    fitted : MixingMeasure
        Fitted atoms, batched ``[...]`` or not.
    truth : MixingMeasure
        The k* true atoms.
    metric, direction
        As in :func:`cell_terms`.

    Returns
    -------
    dict of str to ndarray
        ``single``, ``multi`` and ``mass``, each with the fitted measure's batch shape.
    """
    fitted, truth = _prepare(fitted, truth, direction)
    _, _, dist = _distances(fitted, truth, metric)
    cells, sizes, member = _assign(dist)
    own = np.take_along_axis(dist, cells[..., None], axis=-1)[..., 0]  # distance to own true atom
    own_size = np.take_along_axis(sizes, cells, axis=-1)
    single = np.where(own_size == 1, own, -np.inf).max(axis=-1)
    with np.errstate(over="ignore"):  # a diverged fit's infinite mass is its answer
        multi = weighted_multi_error(own, np.exp(fitted.beta0), cells, sizes)
    mass = _mass_gaps(fitted, truth, member).max(axis=-1)
    return {
        "single": np.where(np.isfinite(single), single, np.nan),
        "multi": multi,
        "mass": mass,
    }
