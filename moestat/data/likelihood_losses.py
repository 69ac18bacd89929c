"""Loss columns of a likelihood scenario file (``noise.model = "mixture"``).

The rates sweep reports, for every batch of maximum-likelihood fits, the columns of
:mod:`moestat.rates.store` (``voronoi``, ``param_single``, ``param_multi``, ``mass``,
``regression_l2``, ...) and one column per declared loss.  For a mixture-noise scenario they are
computed as for the Gaussian MoE of Nguyen, Nguyen & Ho (2023)
(:func:`moestat.data.gaussian_scenarios.gaussian_voronoi`): Voronoi cells on the expert blocks
(``eta``, variance included), the gate compared after fixing softmax's translation freedom.

The default loss (when the file declares none): with linear experts and a softmax gate, ``D1``
(exact fit) or ``D2`` (over-fitted) of Nguyen, Nguyen & Ho (2023) (Theorems 1 and 2); otherwise
the first-order loss ``D1`` on the blocks ``beta1``, ``eta`` (and ``variance``), exponent 1
throughout (no theorem's exponents are assumed for another expert).
"""

from __future__ import annotations

import numpy as np

from moestat.data.gaussian_scenarios import declared_voronoi, gaussian_loss_spec
from moestat.losses.voronoi_spec import BlockSpec, ExponentTable, LossSpec
from moestat.model.mixing import MixingMeasure

__all__ = ["default_likelihood_loss", "default_likelihood_prediction", "THEOREM_1_GMOE", "likelihood_loss_columns"]

#: The theorem a user's exact-fit softmax-gated Gaussian MoE with linear experts falls under.
THEOREM_1_GMOE = ("Nguyen, Nguyen & Ho (2023), Theorem 1: exact-specified softmax-gated Gaussian MoE with linear "
                  "experts, D1 = O_P((log n / n)^{1/2})")


def default_likelihood_loss(model, truth: MixingMeasure, k_fit: int, mass: str = "softmax") -> LossSpec:
    """The default Voronoi loss of a likelihood scenario (see the module docstring)."""

    exact = k_fit == truth.n_atoms
    if model.family == "gaussian" and getattr(model.expert, "name", "") == "identity" and mass == "softmax":
        return gaussian_loss_spec("D1" if exact else "D2", truth.dim)
    q = model.n_expert_params(truth.dim)
    one = ExponentTable.constant(1.0)
    blocks = [BlockSpec("beta1", "beta1", one), BlockSpec("eta", f"eta[:{q}]", one)]
    cells = ["eta"]
    if model.family == "gaussian":
        blocks.append(BlockSpec("variance", f"eta[{q}]", one))
        cells.append("variance")
    return LossSpec("D1", tuple(blocks), mass, "euclidean", None, False, tuple(cells))


def default_likelihood_prediction(model, truth: MixingMeasure, k_fit: int) -> tuple[float, str] | None:
    """The predicted exponent of the default loss and the theorem it comes from, or ``None``.

    A file that declares no ``[[losses]]`` still states a model; when that model satisfies a
    catalogue theorem's hypotheses, the theorem's rate is the prediction.  Today: the dense
    softmax gate with a linear score (``beta1^T x + beta0``, a reference atom, temperature 1),
    linear experts ``a^T x + b`` and Gaussian noise with one variance per atom, fitted with
    ``k = k*`` atoms -- the setting of Nguyen, Nguyen & Ho (2023), Theorem 1, whose ``D1`` (the
    default loss, :func:`default_likelihood_loss`) converges at ``(log n / n)^{1/2}``: exponent -1/2.
    Its proof needs distinct true atoms, which every scenario file has (``k*`` atoms are given and
    the Voronoi loss is defined on them).  Anything else (Top-K, other gates or experts,
    over-specified fits) gets no default prediction.
    """
    if getattr(model, "is_linear_softmax", False) and int(k_fit) == truth.n_atoms:
        return -0.5, THEOREM_1_GMOE
    return None


def likelihood_loss_columns(scenario, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
    """Every loss column of a batch of fits ``[R]`` of a mixture-noise :class:`~moestat.data.scenario_files.FileScenario`.

    ``voronoi`` and the per-atom columns come from the scenario's first loss; each declared loss
    also gets its own column; ``regression_l2`` is ``||g_hat - g*||_{L2}`` of the mean functions
    on ``X_holdout``, ``g_hat`` with the fitted gate (``scenario.fit_model``: its K-bar active experts)
    and ``g*`` with the true one; ``voronoi_direction`` is NaN (a cosine-router notion).
    """

    import torch

    # softmax's translation freedom (beta0 and beta1) is fixed as for model 1; a Gaussian gate's
    # weights are normalised (exp(beta0) sums to one) and a sigmoid gate has no such freedom
    shift = bool(scenario.model.gate.reference)
    out = declared_voronoi(fitted, scenario.truth, scenario.losses, shift)
    G = fitted.numpy()
    ok = G.finite()
    Xh = torch.as_tensor(np.asarray(X_holdout, dtype=np.float64))
    g_star = scenario.model.predict(Xh, scenario.truth).numpy()
    safe = MixingMeasure(*(np.where(ok.reshape((-1,) + (1,) * (a.ndim - 1)), a, 0.0) for a in (G.beta0, G.beta1, G.eta)))
    if safe.eta.shape[-1] == scenario.truth.eta_dim and scenario.model.family == "gaussian":
        safe.eta[..., -1] = np.where(ok[:, None], safe.eta[..., -1], 1.0)
    # the fitted measure with the *fitted* gate (an over-specified Top-K fit activates K-bar > K
    # experts): the true gate would mean a function the estimator never fitted
    g_hat = scenario.fit_model.predict(Xh, safe).numpy()
    out["regression_l2"] = np.where(ok, np.sqrt(np.mean((g_hat - g_star) ** 2, axis=-1)), np.nan)
    out["voronoi_direction"] = np.full(ok.shape, np.nan)
    return out
