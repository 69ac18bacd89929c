"""A start near the truth: the true measure plus noise, and the peer-code artefact.

:func:`near_truth_init` is what a scenario's ``near_truth_start`` returns for the regression MoE
of Nguyen et al. (2024) and the Gaussian MoE (:mod:`moestat.data.synthetic`): a function of the
true measure alone, so it lives with the model, and a scenario needs nothing of
:mod:`moestat.estimators` to state its start (:mod:`moestat.estimators.starts` re-exports it
beside the estimators' random starts).

The last atom of the start is the reference expert of Nguyen et al. (2024) (A.3): ``beta0 = 0``
and ``beta1 = 0`` exactly; its expert parameter ``eta`` is free and therefore perturbed like every
other free parameter.

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

__all__ = ["near_truth_init", "INIT_SCHEDULES", "PEER_EXPONENT", "check_count", "check_rng"]

INIT_SCHEDULES = ("constant", "peer")
#: Exponent of the peer code's n-shrinking initialisation noise (reference notes on Nguyen et
#: al. (2024), Section 8).
PEER_EXPONENT = -0.083


def check_rng(rng) -> np.random.Generator:
    """``rng`` itself, or a one-line ``TypeError`` when it is not a NumPy ``Generator``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def check_count(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int, or a one-line ``ValueError`` when it is not an integer ``>= minimum``."""
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
    k = check_count("n_components", n_components)
    if schedule not in INIT_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {INIT_SCHEDULES}")
    scale = float(scale)
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    rng = check_rng(rng)
    if schedule == "peer":
        if n is None:
            raise ValueError("n is required when schedule='peer'")
        n = check_count("n", n)
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
