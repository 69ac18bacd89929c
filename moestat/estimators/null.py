"""The null estimator: returns its start unchanged.

It is the control of the rate experiments: any slope its Voronoi loss shows against ``n``
comes from the initialisation (e.g. the peer code's ``n ** -0.083`` noise schedule; reference
notes on Nguyen et al. (2024), Section 9), not from the data.
"""

from __future__ import annotations

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel
from moestat.estimators.base import MoEEstimator
from moestat.estimators.levenberg_marquardt import objective_and_grad
from moestat.estimators.starts import random_starts
from moestat.estimators.validation import check_model, check_n_components, prepare_init

__all__ = ["NullEstimator"]


class NullEstimator(MoEEstimator):
    """Estimator that returns its initialisation (the "does nothing" control).

    Parameters
    ----------
    model : MoEModel
        Used only to compute ``objective_`` and ``grad_norm_`` at the start.
    n_components : int
        Number of atoms ``k``.
    random_state : None, int, SeedSequence or Generator
        Seed of the random start drawn when :meth:`fit` gets no ``init``.
    device : str
        Checked (:func:`moestat.devices.resolve_device`) for a uniform interface; the
        computation runs on the CPU.

    Attributes
    ----------
    params_ : MixingMeasure
        The start, batched ``[R]``.
    objective_ : ndarray, shape ``[R]``
        Mean squared residual at the start (NaN where it is not finite).
    converged_ : ndarray of bool, shape ``[R]``
        True, except where the objective is not finite.
    n_iter_ : ndarray of int, shape ``[R]``
        Always 0.
    status_ : list of str
        ``"null"``, or ``"nonfinite"`` where the objective at the start is not finite.
    grad_norm_ : ndarray, shape ``[R]``
        Gradient norm of the objective at the start.
    init_ : MixingMeasure
        The start (the same as ``params_``).
    n_features_in_ : int

    Notes
    -----
    :meth:`for_scenario` uses ``random_state`` and ``device`` (there is no iteration, so no
    ``max_iter``, and no box: the start is returned as it is).

    Examples
    --------
    >>> import numpy as np
    >>> from moestat import Gate, Expert, MoEModel
    >>> from moestat.estimators import random_init
    >>> model = MoEModel(Gate("perturbed", k_active=2), Expert("identity"))
    >>> G0 = random_init(3, 2, np.random.default_rng(0))
    >>> X = np.random.default_rng(1).uniform(-1, 1, (50, 2)); Y = np.zeros(50)
    >>> est = NullEstimator(model, 3).fit(X, Y, init=G0)
    >>> bool(np.allclose(est.params_.beta1[0], G0.beta1)), est.status_
    (True, ['null'])
    """

    def __init__(self, model: MoEModel, n_components: int, *, random_state=None, device: str = "cpu") -> None:
        self.model = model
        self.n_components = n_components
        self.random_state = random_state
        self.device = device

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "NullEstimator":
        return cls(scenario.fit_model, scenario.k_fit, random_state=random_state, device=device)

    def _check_params(self) -> None:
        check_model(self.model)
        check_n_components(self.n_components, self.model)
        resolve_device(self.device)
        self._rng()

    def fit(self, X, Y, init: MixingMeasure | None = None) -> "NullEstimator":
        """Record ``init`` (or a random start) as the fit.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]``)
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            The start, batched ``[R]`` or unbatched (shared); a random start per replicate
            (from ``random_state``) when not given.

        Returns
        -------
        self
        """
        Xt, Yt, _ = self._start_fit(X, Y, device=torch.device("cpu"))  # nothing to fit: the CPU is enough
        k = self.n_components
        R, n, d = Xt.shape
        if init is None:
            G = random_starts(R, k, d, self._rng())
        else:
            G = prepare_init(init, R, k, d)
        obj, gn = objective_and_grad(self.model, Xt, Yt, G, k)
        self._set_fit(G, obj.numpy(), np.ones(R, dtype=bool), np.zeros(R, dtype=int), ["null"] * R, d)
        self.init_ = G
        self.grad_norm_ = gn.numpy()
        return self
