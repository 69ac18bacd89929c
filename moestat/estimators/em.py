"""EM for the Gaussian mixture of linear experts with one shared variance (Jordan & Jacobs, 1994).

The shared-variance special case of :class:`~moestat.estimators.mle.MLEGaussianMoE` (the same
batched EM, ``variance="shared"``) with the regression measure's atoms ``eta_i = (a_i, b_i)``,
i.e. the parametrisation of the least-squares and SGD estimators, so that its fits go through
the regression scenarios' losses unchanged.  Kept under its own name (``em`` in the registry)
for the rates sweeps that use it; new code should use ``MLEGaussianMoE``.
"""

from __future__ import annotations

from moestat.estimators.mle import MLEGaussianMoE

__all__ = ["EMGaussianMoE"]


class EMGaussianMoE(MLEGaussianMoE):
    """EM estimator of a softmax-gated Gaussian MoE regression with one shared noise variance.

    Parameters
    ----------
    model : moestat.model.regression.MoEModel, optional
        Must have the dense ``linear`` gate and ``identity`` experts (the default when ``None``);
        an integer here is read as ``n_components`` (``EMGaussianMoE(3)``).
    n_components : int
        Number of experts ``k`` (default 2).
    max_iter : int
        Maximum EM iterations per start.
    tol : float
        Convergence when the per-sample log-likelihood changes by at most ``tol``.
    random_state : None, int, SeedSequence or Generator
        Seeds the random-partition starts (one stream per start).
    n_init : int
        Starts per replicate without ``init`` (random partitions); with ``init``, jittered copies.
    gate_newton_steps : int
        Newton/IRLS steps of the gate per M-step.
    min_noise_var : float
        Floor of the noise variance relative to ``var(Y)``.

    Attributes
    ----------
    params_ : MixingMeasure
        ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 1]`` = ``(a, b)``.
    noise_var_ : ndarray, shape ``[R]``
        The shared variance.
    loglik_, loglik_path_, objective_, converged_, n_iter_, status_
        As in :class:`~moestat.estimators.mle.MLEGaussianMoE`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-2, 2, size=(1, 400, 1))
    >>> Y = np.where(X[..., 0] > 0, 2 * X[..., 0], -1.0) + 0.1 * rng.standard_normal((1, 400))
    >>> em = EMGaussianMoE(n_components=2, random_state=0, n_init=3).fit(X, Y)
    >>> em.params_.eta.shape, bool(em.converged_[0])
    ((1, 2, 2), True)
    """

    # the fixed choices of the parent's parameters (class attributes: not constructor arguments)
    variance = "shared"
    eta_variance = False
    init_jitter = 0.1
    device = "cpu"

    def __init__(
        self,
        model=None,
        n_components: int | None = None,
        *,
        max_iter: int = 500,
        tol: float = 1e-8,
        random_state=0,
        n_init: int = 3,
        gate_newton_steps: int = 3,
        min_noise_var: float = 1e-10,
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.n_init = n_init
        self.gate_newton_steps = gate_newton_steps
        self.min_noise_var = min_noise_var

    @property
    def var_floor(self) -> float:
        return self.min_noise_var

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "EMGaussianMoE":
        return cls(scenario.fit_model, scenario.k_fit, max_iter=max_iter, random_state=random_state)

    def fit(self, X, Y, init=None) -> "EMGaussianMoE":
        """Fit every replicate (see :meth:`MLEGaussianMoE.fit`); sets ``noise_var_`` too."""
        super().fit(X, Y, init=init)
        self.noise_var_ = self.variances_[:, 0].copy()
        return self
