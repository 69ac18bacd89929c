"""``em``: the EM of Jordan & Jacobs (1994) -- one shared noise variance -- as a name for the one EM.

The softmax-gated Gaussian mixture of linear experts with a shared variance,
``p(y | x) = sum_i pi_i(x) N(y; a_i^T x + b_i, sigma^2)``, is
:class:`~moestat.estimators.mle.MLEGaussianMoE` with ``variance="shared"`` and ``(a, b)`` atoms
(``eta_variance=False``): :class:`EMGaussianMoE` is that estimator under its historical name and
defaults (``tol = 1e-8``, three random starts), so the package has one EM (the batched torch EM of
:mod:`moestat.estimators.mle_fused`).  ``noise_var_`` is the fitted shared variance.

Only the dense linear softmax gate with identity (linear) experts is supported; other gates or
experts raise ``ValueError`` (the generic EM of :mod:`moestat.estimators.mle_generic` fits them
with one variance per expert, ``--estimator mle``).
"""

from __future__ import annotations

from moestat.estimators.mle import MLEGaussianMoE

__all__ = ["EMGaussianMoE"]


class EMGaussianMoE(MLEGaussianMoE):
    """EM for the softmax-gated Gaussian MoE with one shared variance (Jordan & Jacobs 1994).

    Parameters
    ----------
    model : MoEModel or None
        ``None`` or a dense ``linear`` gate with ``identity`` experts; an integer is read as ``n_components``.
    n_components : int
        Number of atoms (default 2).
    max_iter, tol, random_state, n_init, device
        As :class:`~moestat.estimators.mle.MLEGaussianMoE` (defaults ``500``, ``1e-8``, ``0``, ``3``, ``cpu``).

    Attributes
    ----------
    params_ : MixingMeasure
        ``eta [R, k, d + 1]`` = ``(a, b)``.
    noise_var_ : ndarray, shape ``[R]``
        The shared variance.
    loglik_, loglik_path_, converged_, n_iter_, status_, objective_
        As :class:`~moestat.estimators.mle.MLEGaussianMoE`.
    """

    def __init__(self, model=None, n_components: int | None = None, *, max_iter: int = 500, tol: float = 1e-8,
                 random_state=0, n_init: int = 3, device: str = "cpu") -> None:
        super().__init__(model, n_components, variance="shared", eta_variance=False, max_iter=max_iter, tol=tol,
                         n_init=n_init, random_state=random_state, device=device)

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "EMGaussianMoE":
        if scenario.declaration.family != "regression":
            raise ValueError("--estimator em fits one shared variance; this scenario's atoms have their own: use --estimator mle")
        # one start per replicate (the sweep's): jittered copies would be drawn for the whole batch at once
        return cls(scenario.fit_model, scenario.k_fit, max_iter=max_iter, random_state=random_state, n_init=1, device=device)

    def fit(self, X, Y, init=None) -> "EMGaussianMoE":
        super().fit(X, Y, init=init)
        self.noise_var_ = self.variances_[:, 0].copy()
        return self
