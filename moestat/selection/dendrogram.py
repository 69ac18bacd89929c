"""The dendrogram of an over-fitted mixing measure (Do, Do, McKinley, Terhorst & Nguyen 2024).

From a fitted measure ``G = sum_i p_i delta_(beta1_i, eta_i)`` with ``K`` atoms (``p_i =
exp(beta0_i)``), the dendrogram merges, ``K - 1`` times, the pair of atoms of least dissimilarity
(Do et al. 2024, their merging procedure; the same rule in the Dendrogram_SGMoE code)::

    p = p_i + p_j,     theta = (p_i theta_i + p_j theta_j) / (p_i + p_j)     (theta = beta1, a, b, sigma^2)

so each level carries the total mass of the level below, and the merged parameters are the
mass-weighted means (every coordinate).  The dissimilarity of two atoms is::

    d(i, j) = p_i p_j / (p_i + p_j) * sum_blocks ||theta_i,blk - theta_j,blk||^{e_blk}

with block exponents ``e`` from the Voronoi loss of the model for a cell of two atoms, scaled so
that the fastest blocks have exponent 2 (Do et al.'s ``||theta_i - theta_j||^2 / (1/p_i + 1/p_j)``
for strongly identifiable families):

* ``family="gaussian"`` (softmax-gated Gaussian MoE, ``eta = (a, b, sigma^2)``): the D2 loss of
  Nguyen, Nguyen & Ho (2023, Theorem 2) weighs ``beta1`` and ``b`` at ``rbar`` and ``a`` and
  ``sigma^2`` at ``rbar / 2``, hence ``e = (2, 1, 2, 1)`` for ``(beta1, a, b, sigma^2)``.  It is
  the dissimilarity written in the notes of the Dendrogram_SGMoE code (``||(beta1, a, b)_i -
  (beta1, a, b)_j||^2 + ||sigma^2_i - sigma^2_j||`` over ``exp(-beta0_i) + exp(-beta0_j)``) up to
  the expert slope's exponent, which we take from the loss.
* ``family="regression"`` (least-squares MoE, ``eta = (a, b)``): ``e = 2`` for every block (no
  theorem covers this family's dendrogram; the construction is the same).

**Where the masses are taken.**  ``exp(beta0_i)`` is atom ``i``'s gate weight at ``x = 0``; with a
steep gate (model 1 of Nguyen, Nguyen & Ho 2023 has ``beta1 = 25`` on inputs in ``[0, 1]``) the
weight at ``x = 0`` says little about the weight where the data are, and the merged gate
``(p_i + p_j) exp(beta1_bar^T x)`` drifts away from ``p_i exp(beta1_i^T x) + p_j exp(beta1_j^T x)``.
``center=c`` takes the masses at ``x = c`` instead (``p_i(c) = exp(beta0_i + beta1_i^T c)``, i.e.
the same rule on inputs ``x - c``): the merged gate then matches the sum of the two at ``c`` in
value and first derivative (its log-slope at ``c`` is the ``p(c)``-weighted mean of the slopes),
so the error is of second order in ``x - c``.  ``center=None`` is ``c = 0``, the paper's rule;
:mod:`moestat.selection.study` passes the mean of the inputs.

Masses are normalised to total 1 before merging (``beta0 - logsumexp(beta0)``): softmax's
translation freedom leaves the fitted gate unchanged and the masses of a plain mixture sum to 1,
so the heights do not depend on which atom the fit made the reference.  Merging commutes with
the translations (log-sum-exp and mass-weighted means), so the levels themselves do not either;
they are returned in moestat's reference convention (last atom ``beta0 = 0``, ``beta1 = 0``).

When the two merged atoms share their gate slope ``beta1``, the merged gate weight equals the
sum of theirs at every ``x``, so the gate of every other atom and -- experts being averaged with
the same weights -- the mixture's mean function ``sum_i pi_i(x) (a_i^T x + b_i)`` are unchanged
(a test checks both).  With different slopes the merge changes the mean function at second order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moestat.model.mixing import MixingMeasure

__all__ = ["FAMILIES", "Dendrogram", "block_exponents", "dissimilarity", "merge_pair", "build_dendrogram",
           "plot_dendrogram"]

FAMILIES = ("gaussian", "regression")


def block_exponents(family: str, d: int) -> tuple[list[slice], list[float]]:
    """The coordinate blocks of ``omega = (beta1, eta)`` and their exponents in the dissimilarity.

    Returns
    -------
    (blocks, exponents)
        ``blocks``: slices into ``omega [d + q]``; ``exponents``: one per block (module docstring).
    """
    if family == "gaussian":
        # omega = (beta1 [d], a [d], b, sigma^2): D2's rbar, rbar/2, rbar, rbar/2 scaled to 2, 1, 2, 1
        return [slice(0, d), slice(d, 2 * d), slice(2 * d, 2 * d + 1), slice(2 * d + 1, 2 * d + 2)], [2.0, 1.0, 2.0, 1.0]
    if family == "regression":
        return [slice(0, d), slice(d, 2 * d), slice(2 * d, 2 * d + 1)], [2.0, 2.0, 2.0]
    raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")


def _check(G: MixingMeasure, family: str) -> MixingMeasure:
    if not isinstance(G, MixingMeasure):
        raise TypeError(f"expected a MixingMeasure, got {type(G).__name__}")
    G = G.numpy()
    if G.batch_shape:
        raise ValueError(f"build the dendrogram of one measure at a time (batch shape {G.batch_shape}); index it: G[r]")
    want = G.dim + (2 if family == "gaussian" else 1)
    block_exponents(family, G.dim)  # checks family
    if G.eta_dim != want:
        raise ValueError(f"a {family} measure has eta of d + {want - G.dim} = {want} columns, got {G.eta_dim}")
    if not (np.isfinite(G.beta0).all() and np.isfinite(G.beta1).all() and np.isfinite(G.eta).all()):
        raise ValueError("the measure has non-finite atoms (a failed fit): no dendrogram")
    if family == "gaussian" and np.any(G.eta[:, -1] <= 0):
        raise ValueError("a Gaussian-MoE atom has a variance <= 0")
    return G


def dissimilarity(G: MixingMeasure, i: int, j: int, family: str = "gaussian") -> float:
    """``d(i, j)`` of the module docstring between atoms ``i`` and ``j`` of an unbatched ``G``.

    The masses are ``exp(beta0)`` as given (:func:`build_dendrogram` normalises them to total 1 first).
    """
    G = _check(G, family)
    blocks, exps = block_exponents(family, G.dim)
    om = G.omega()
    dist = sum(float(np.linalg.norm(om[i, b] - om[j, b])) ** e for b, e in zip(blocks, exps))
    # p_i p_j / (p_i + p_j) in logs: two masses that underflow exp (beta0 ~ -800) would give 0 / 0
    li, lj = float(G.beta0[i]), float(G.beta0[j])
    return float(np.exp(li + lj - np.logaddexp(li, lj)) * dist)


def merge_pair(G: MixingMeasure, i: int, j: int) -> MixingMeasure:
    """``G`` with atoms ``i < j`` replaced by their merge (masses add, parameters mass-weighted).

    The merged atom takes position ``i`` and atom ``j`` is removed; the measure is *not* shifted
    (so total mass is exactly preserved; :func:`build_dendrogram` shifts each level afterwards).
    """
    G = G.numpy()
    if not (0 <= i < j < G.n_atoms):
        raise ValueError(f"need 0 <= i < j < {G.n_atoms}, got i={i}, j={j}")
    b0 = np.logaddexp(G.beta0[i], G.beta0[j])
    wi, wj = np.exp(G.beta0[i] - b0), np.exp(G.beta0[j] - b0)
    keep = [t for t in range(G.n_atoms) if t != j]
    beta0, beta1, eta = G.beta0.copy(), G.beta1.copy(), G.eta.copy()
    beta0[i] = b0
    beta1[i] = wi * G.beta1[i] + wj * G.beta1[j]
    eta[i] = wi * G.eta[i] + wj * G.eta[j]
    return MixingMeasure(beta0[keep], beta1[keep], eta[keep])


def _reference(G: MixingMeasure) -> MixingMeasure:
    """Shift ``beta0`` and ``beta1`` so that the last atom is the reference (softmax translation)."""
    return MixingMeasure(G.beta0 - G.beta0[-1], G.beta1 - G.beta1[-1], G.eta)


@dataclass(frozen=True)
class Dendrogram:
    """The merge tree of one over-fitted measure.

    Attributes
    ----------
    levels : tuple of MixingMeasure
        ``levels[t]`` has ``K - t`` atoms (``levels[0]``: the fit, ``levels[-1]``: one atom), each in
        the reference convention.
    heights : ndarray, shape ``[K - 1]``
        ``heights[t]``: dissimilarity of the pair merged from level ``t`` to level ``t + 1``.
    linkage : ndarray, shape ``[K - 1, 4]``
        SciPy's linkage matrix (:func:`scipy.cluster.hierarchy.dendrogram`): the two merged cluster
        ids (leaves ``0..K-1``, merge ``t`` creates ``K + t``), the height, the number of leaves.
    members : tuple of tuple of tuple of int
        ``members[t][i]``: the fitted atoms (leaves) merged into atom ``i`` of level ``t``.
    family : str
    center : ndarray, shape ``[d]``
        Where the masses were taken.
    masses : tuple of ndarray
        ``masses[t] [K - t]``: the atoms' masses ``exp(beta0 + beta1^T c)`` at ``center``, normalised to
        total 1 on the fit (the quantities the rule adds; each level sums to 1).
    """

    levels: tuple
    heights: np.ndarray
    linkage: np.ndarray
    members: tuple
    family: str
    center: np.ndarray
    masses: tuple

    @property
    def n_leaves(self) -> int:
        return self.levels[0].n_atoms

    def level(self, k: int) -> MixingMeasure:
        """The merged measure with ``k`` atoms (``1 <= k <= K``)."""
        return tree_level(self, k)

    def height(self, k: int) -> float:
        """Height of the merge that takes ``k`` atoms to ``k - 1`` (``2 <= k <= K``)."""
        return tree_height(self, k)


def tree_level(tree, k: int):
    """``tree.levels`` indexed by the number of atoms ``k`` (``1 <= k <= tree.n_leaves``): level ``t``
    of a tree holds ``K - t`` atoms.  Shared by every dendrogram of :mod:`moestat.selection`."""
    if not 1 <= k <= tree.n_leaves:
        raise ValueError(f"k must be in 1..{tree.n_leaves}, got {k}")
    return tree.levels[tree.n_leaves - k]


def dsc_levels(tree, mean_loglik, n: int, omega: float | None = None) -> dict:
    """The dendrogram selection criterion of Do et al. (2024) on every level ``k = K..2`` of a tree.

    Level ``k`` scores ``-(h(k) + omega_n lbar(k))``: ``h(k)`` the height of the merge ``k -> k - 1``,
    ``lbar(k) = mean_loglik(tree.level(k))`` the merged measure's average log-likelihood, ``omega_n``
    (default ``log n``).  Shared by the Gaussian MoE (:func:`moestat.selection.criteria.dsc_path`)
    and the plain mixture (:func:`moestat.selection.mixture.dsc_scores`).

    Returns
    -------
    dict
        ``k``, ``height``, ``mean_loglik``, ``dsc`` (arrays over ``k = K..2``), ``omega`` and ``k_hat``.
    """
    w = math.log(n) if omega is None else float(omega)
    ks = np.arange(tree.n_leaves, 1, -1)
    h = np.array([tree_height(tree, int(k)) for k in ks])
    lbar = np.array([mean_loglik(tree_level(tree, int(k))) for k in ks], dtype=float)
    dsc = -(h + w * lbar)
    return {"k": ks, "height": h, "mean_loglik": lbar, "dsc": dsc, "omega": w, "k_hat": int(ks[int(np.argmin(dsc))])}


def tree_height(tree, k: int) -> float:
    """Height of the merge that takes ``k`` atoms to ``k - 1`` (``2 <= k <= tree.n_leaves``)."""
    if not 2 <= k <= tree.n_leaves:
        raise ValueError(f"k must be in 2..{tree.n_leaves}, got {k}")
    return float(tree.heights[tree.n_leaves - k])


def build_dendrogram(G: MixingMeasure, family: str = "gaussian", center=None) -> Dendrogram:
    """Merge the closest pair ``K - 1`` times (module docstring).

    Parameters
    ----------
    G : MixingMeasure
        Unbatched fitted measure, ``K >= 2`` atoms; ``eta [K, d + 2]`` (``gaussian``) or ``[K, d + 1]``
        (``regression``).
    family : {"gaussian", "regression"}
    center : array of shape ``[d]``, optional
        Where the masses are taken (module docstring); default ``0`` (the paper's rule).

    Returns
    -------
    Dendrogram
    """
    G = _check(G, family)
    c = np.zeros(G.dim) if center is None else np.asarray(center, dtype=float).reshape(-1)
    if c.shape != (G.dim,) or not np.isfinite(c).all():
        raise ValueError(f"center must be {G.dim} finite numbers, got {center!r}")
    # the rule on inputs x - c: intercepts at c, back to x's coordinates for every level
    G = MixingMeasure(G.beta0 + G.beta1 @ c, G.beta1, G.eta)
    back = lambda M: _reference(MixingMeasure(M.beta0 - M.beta1 @ c, M.beta1, M.eta))  # noqa: E731
    K = G.n_atoms
    if K < 2:
        raise ValueError(f"a dendrogram needs at least 2 atoms, got {K}")
    lse = np.logaddexp.reduce(G.beta0)
    cur = MixingMeasure(G.beta0 - lse, G.beta1, G.eta)  # total mass 1
    ids = list(range(K))
    groups: list[tuple[int, ...]] = [(i,) for i in range(K)]
    levels, members, masses = [back(cur)], [tuple(groups)], [np.exp(cur.beta0)]
    heights, rows = [], []
    for t in range(K - 1):
        k = cur.n_atoms
        best = None
        for i in range(k):
            for j in range(i + 1, k):
                h = dissimilarity(cur, i, j, family)
                if best is None or h < best[0]:
                    best = (h, i, j)
        h, i, j = best
        rows.append([min(ids[i], ids[j]), max(ids[i], ids[j]), h, len(groups[i]) + len(groups[j])])
        heights.append(h)
        cur = merge_pair(cur, i, j)
        groups = [tuple(sorted(groups[i] + groups[j])) if t2 == i else g for t2, g in enumerate(groups) if t2 != j]
        ids = [K + t if t2 == i else c for t2, c in enumerate(ids) if t2 != j]
        levels.append(back(cur))
        masses.append(np.exp(cur.beta0))
        members.append(tuple(groups))
    return Dendrogram(tuple(levels), np.asarray(heights), np.asarray(rows, dtype=float), tuple(members), family, c, tuple(masses))


def plot_dendrogram(dend: Dendrogram, ax=None, labels=None, title: str | None = None):
    """Draw the tree with :func:`scipy.cluster.hierarchy.dendrogram`; returns the axes.

    Leaves are labelled ``i: p=<mass>`` (the masses the rule used: at ``dend.center``, total 1) unless
    ``labels`` is given.
    Heights may be non-monotone (a merged atom can be closer to a third than its parts were); SciPy
    then draws crossing links, which is what the tree is.
    """
    import matplotlib.pyplot as plt
    from scipy.cluster.hierarchy import dendrogram

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.6))
    if labels is None:
        p = dend.masses[0]
        labels = [f"{i}: p={p[i]:.2g}" for i in range(len(p))]
    dendrogram(dend.linkage, labels=labels, ax=ax, color_threshold=0, above_threshold_color="C0", leaf_rotation=30)
    ax.set_ylabel("merge height d")
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.tight_layout()
    return ax
