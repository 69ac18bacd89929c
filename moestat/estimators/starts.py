"""Starting points for the estimators: near-truth, random, and the peer-code artefact.

Every initialiser returns an **unbatched** :class:`~moestat.model.mixing.MixingMeasure` whose last
atom is the reference expert of Nguyen et al. (2024) (A.3): ``beta0 = 0`` and ``beta1 = 0`` exactly; its
expert parameter ``eta`` is free and therefore perturbed like every other free parameter.

Why the noise scale does not depend on ``n`` by default
--------------------------------------------------------
The peer simulation code (reference notes on Nguyen et al. (2024), Section 8) starts near the
truth with noise of standard deviation ``0.005 * n ** -0.083``.  An estimator that does *nothing* then already has a
Voronoi loss that decreases like ``n ** -0.083`` (Section 9, item 1), and for the vanilla cosine
router, whose radial direction ``||beta1||`` is never corrected by the data (PDE (4)), that
artefact is the whole slope.  ``schedule="constant"`` (the default) removes it; ``"peer"`` is
kept only to demonstrate the artefact.
"""

from __future__ import annotations

import numpy as np

from moestat.model.mixing import MixingMeasure

__all__ = ["near_truth_init", "random_init", "random_starts", "random_partition_init", "INIT_SCHEDULES", "PEER_EXPONENT"]

INIT_SCHEDULES = ("constant", "peer")
#: Exponent of the peer code's n-shrinking initialisation noise (reference notes on Nguyen et
#: al. (2024), Section 8).
PEER_EXPONENT = -0.083


def _check_rng(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _check_count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def near_truth_init(
    truth: MixingMeasure,
    n_components: int,
    scale: float,
    rng: np.random.Generator,
    n: int | None = None,
    schedule: str = "constant",
    log_last: bool = False,
) -> MixingMeasure:
    """A start near the true mixing measure (Nguyen et al. (2024), Section 5: "near the true parameters").

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched true measure with ``k*`` atoms, the last one the reference (A.3).
    n_components : int
        Number ``k >= k*`` of fitted atoms.
    scale : float
        Standard deviation of the Gaussian noise added to every free parameter
        (``schedule="constant"``), or its prefactor (``schedule="peer"``).
    rng : numpy.random.Generator
        Source of every random draw.
    n : int, optional
        Sample size; only used (and required) by ``schedule="peer"``.
    schedule : {"constant", "peer"}
        ``"constant"``: noise standard deviation ``scale`` whatever ``n`` is (default).
        ``"peer"``: ``scale * n ** -0.083``, the peer code's schedule; provided only to
        demonstrate that it produces an artificial slope of about -0.083.
    log_last : bool
        The last column of ``eta`` is a variance (the Gaussian MoE, :mod:`moestat.model.gaussian_moe`):
        its noise is multiplicative, ``sigma^2 exp(s z)``, so the start stays a valid density.

    Returns
    -------
    MixingMeasure
        Unbatched, ``n_components`` atoms, the last atom the reference with ``beta0 = 0``,
        ``beta1 = 0``.

    Notes
    -----
    *Exact* (``n_components == k*``): the truth plus ``N(0, s^2)`` noise on every free
    parameter (all ``beta0``/``beta1`` of the non-reference atoms and every ``eta``).

    *Over-specified* (``n_components > k*``): a surjective assignment of the fitted atoms to
    the true ones.  The first ``k* - 1`` fitted atoms sit on the non-reference true atoms in
    order, the last fitted atom on the reference atom, and each of the ``k - k*`` extra atoms on
    a non-reference true atom drawn uniformly from ``rng``.  A true atom ``j`` carried by ``m_j``
    fitted atoms has its mass split evenly: ``beta0_i = beta0*_j - log m_j`` (so the masses
    ``exp(beta0_i)`` of the cell sum to ``exp(beta0*_j)``), as in the reference's suggested
    "duplicate one true atom into two, each with ``beta0 - log 2``".  Then the noise is added.

    Examples
    --------
    >>> import numpy as np
    >>> truth = MixingMeasure(np.array([0.3, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]]), np.ones((2, 3)))
    >>> G = near_truth_init(truth, 3, 0.05, np.random.default_rng(0))
    >>> G.n_atoms, G.satisfies_reference_convention()
    (3, True)
    """
    if not isinstance(truth, MixingMeasure):
        raise TypeError(f"truth must be a MixingMeasure, got {type(truth).__name__}")
    # the arguments first, then the truth's shape and convention
    k = _check_count("n_components", n_components)
    if schedule not in INIT_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {INIT_SCHEDULES}")
    scale = float(scale)
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    rng = _check_rng(rng)
    if schedule == "peer":
        if n is None:
            raise ValueError("n is required when schedule='peer'")
        n = _check_count("n", n)
        sd = scale * float(n) ** PEER_EXPONENT
    else:
        sd = scale
    truth = truth.numpy()
    if truth.batch_shape:
        raise ValueError(f"truth must be unbatched, got batch shape {truth.batch_shape}")
    if not truth.satisfies_reference_convention(atol=1e-12):
        raise ValueError("truth must have its last atom as the reference (beta0 = 0, beta1 = 0)")
    k_star = truth.n_atoms
    if k < k_star:
        raise ValueError(f"n_components ({k}) must be >= the number of true atoms ({k_star})")

    extra = k - k_star
    if extra > 0 and k_star < 2:
        raise ValueError(
            "an over-specified start needs a non-reference true atom to duplicate (k* >= 2); "
            f"got k* = {k_star}"
        )
    # Assignment of fitted atoms to true atoms: identity on the non-reference atoms, random
    # extra atoms on non-reference atoms, and the last fitted atom on the reference (A.3).
    extras = rng.integers(0, k_star - 1, size=extra) if extra > 0 else np.zeros(0, dtype=int)
    assign = np.concatenate([np.arange(k_star - 1), extras, [k_star - 1]]).astype(int)
    counts = np.bincount(assign, minlength=k_star)
    beta0 = truth.beta0[assign] - np.log(counts[assign])
    beta1 = truth.beta1[assign].copy()
    eta = truth.eta[assign].copy()
    d, q = truth.dim, truth.eta_dim
    # Noise on every free parameter; the reference's router stays exactly (0, 0).
    beta0[:-1] += sd * rng.standard_normal(k - 1)
    beta1[:-1] += sd * rng.standard_normal((k - 1, d))
    noise = sd * rng.standard_normal((k, q))
    if log_last:
        eta[:, :-1] += noise[:, :-1]
        eta[:, -1] *= np.exp(noise[:, -1])
    else:
        eta += noise
    beta0[-1] = 0.0
    beta1[-1] = 0.0
    return MixingMeasure(beta0, beta1, eta)


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
    k = _check_count("n_components", n_components)
    d = _check_count("d", d)
    rng = _check_rng(rng)
    sr = 1.0 / np.sqrt(d) if scale_router is None else float(scale_router)
    se = 1.0 / np.sqrt(d) if scale_expert is None else float(scale_expert)
    for name, v in (("scale_router", sr), ("scale_expert", se)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    beta0 = sr * rng.standard_normal(k)
    beta1 = sr * rng.standard_normal((k, d))
    eta = se * rng.standard_normal((k, d + 1 if n_eta is None else _check_count("n_eta", n_eta)))
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
    k = _check_count("n_components", n_components)
    rng = _check_rng(rng)
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
