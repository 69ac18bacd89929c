"""Starting points for the estimators: random, data-free or data-driven, and the near-truth start.

Every initialiser returns an **unbatched** :class:`~moestat.model.mixing.MixingMeasure`.  The
near-truth start (:func:`~moestat.model.near_truth.near_truth_init`, re-exported here) is the
model's: a scenario draws it from its truth without choosing an estimator.  The random starts of
each declared model are picked by :func:`moestat.estimators.choice.random_start_for`.
"""

from __future__ import annotations

import numpy as np

from moestat.model.mixing import MixingMeasure
from moestat.model.near_truth import INIT_SCHEDULES, PEER_EXPONENT, check_count, check_rng, near_truth_init

# near_truth_init is the model's (moestat.model.near_truth): a scenario states its start without this package
__all__ = ["near_truth_init", "random_init", "random_starts", "random_partition_init", "INIT_SCHEDULES", "PEER_EXPONENT"]


def random_init(
    n_components: int,
    d: int,
    rng: np.random.Generator,
    scale_router: float | None = None,
    scale_expert: float | None = None,
    n_eta: int | None = None,
) -> MixingMeasure:
    """A random start, independent of the data and of the truth.

    Parameters
    ----------
    n_components : int
        Number of atoms ``k``.
    d : int
        Input dimension (``eta`` has ``d + 1`` entries unless ``n_eta`` says otherwise).
    rng : numpy.random.Generator
        Source of every random draw.
    scale_router : float, optional
        Standard deviation of ``beta0`` and of the entries of ``beta1``; default ``1/sqrt(d)``,
        the isotropic law the paper's truth is drawn from (Appendix E.1 structure).
    scale_expert : float, optional
        Standard deviation of the entries of ``eta``; default ``1/sqrt(d)``.
    n_eta : int, optional
        Entries of each atom's ``eta`` (an expert of the protocol, e.g. an MLP); default ``d + 1``
        (the built-in experts).  The draws come in the same order, so ``d + 1`` gives the default's start.

    Returns
    -------
    MixingMeasure
        Unbatched, last atom the reference (``beta0 = 0``, ``beta1 = 0``).

    Examples
    --------
    >>> import numpy as np
    >>> G = random_init(3, 2, np.random.default_rng(1))
    >>> G.beta1.shape, G.eta.shape, G.satisfies_reference_convention()
    ((3, 2), (3, 3), True)
    """
    k = check_count("n_components", n_components)
    d = check_count("d", d)
    rng = check_rng(rng)
    sr = 1.0 / np.sqrt(d) if scale_router is None else float(scale_router)
    se = 1.0 / np.sqrt(d) if scale_expert is None else float(scale_expert)
    for name, v in (("scale_router", sr), ("scale_expert", se)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    beta0 = sr * rng.standard_normal(k)
    beta1 = sr * rng.standard_normal((k, d))
    eta = se * rng.standard_normal((k, d + 1 if n_eta is None else check_count("n_eta", n_eta)))
    beta0[-1] = 0.0
    beta1[-1] = 0.0
    return MixingMeasure(beta0, beta1, eta)


def random_starts(R: int, n_components: int, d: int, rng: np.random.Generator) -> MixingMeasure:
    """``R`` independent :func:`random_init` draws (in replicate order), batched ``[R]``.

    The estimators' default start when ``fit`` gets no ``init``.
    """
    return MixingMeasure.stack([random_init(n_components, d, rng) for _ in range(R)])


def random_partition_init(X: np.ndarray, Y: np.ndarray, n_components: int, rng: np.random.Generator) -> MixingMeasure:
    """A Gaussian-MoE start from a random partition of the data (:mod:`moestat.estimators.mle`).

    ``n_components`` samples drawn without replacement are the centres of a random Voronoi
    partition of the standardised ``(x, y)``; each cell gets its least-squares expert and residual
    variance, and the gate starts uniform (``beta0 = 0``, ``beta1 = 0``).

    Parameters
    ----------
    X : ndarray, shape ``[n, d]``
    Y : ndarray, shape ``[n]``
    n_components : int
    rng : numpy.random.Generator

    Returns
    -------
    MixingMeasure
        Unbatched, ``eta [k, d + 2]`` = ``(a, b, sigma^2)``; a cell with fewer than ``d + 2``
        samples gets the pooled least-squares fit.
    """
    k = check_count("n_components", n_components)
    rng = check_rng(rng)
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    n, d = X.shape
    Z = np.column_stack([X, Y])
    Z = (Z - Z.mean(0)) / np.where(Z.std(0) > 0, Z.std(0), 1.0)
    centres = Z[rng.choice(n, size=min(k, n), replace=False)]
    lab = ((Z[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
    Xe = np.column_stack([X, np.ones(n)])
    eta = np.empty((k, d + 2))
    for j in range(k):
        m = lab == j if np.sum(lab == j) >= d + 2 else np.ones(n, dtype=bool)
        coef = np.linalg.lstsq(Xe[m], Y[m], rcond=None)[0]
        eta[j, : d + 1] = coef
        eta[j, d + 1] = max(float(np.mean((Y[m] - Xe[m] @ coef) ** 2)), 1e-6 * float(np.var(Y)) + 1e-300)
    return MixingMeasure(np.zeros(k), np.zeros((k, d)), eta)
