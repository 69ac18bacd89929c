"""The null estimator: returns its start unchanged.

It is the control of the rate experiments: any slope its Voronoi loss shows against ``n``
comes from the initialisation (e.g. the peer code's ``n ** -0.083`` noise schedule, seed 004
reference Section 9), not from the data.
"""

from __future__ import annotations

import numpy as np

from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel
from moestat.estimators.lse import as_rng, check_model, check_n_components, objective_and_grad, prepare_data, prepare_init, random_starts

__all__ = ["NullEstimator"]


class NullEstimator:
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
        Accepted for interface compatibility; the computation runs on the CPU.

    Attributes
    ----------
    params_ : MixingMeasure
        The start, batched ``[R]``.
    objective_ : ndarray, shape ``[R]``
        Mean squared residual at the start.
    converged_ : ndarray of bool
        Always True.
    n_iter_ : ndarray of int
        Always 0.
    status_ : list of str
        ``"null"``.
    grad_norm_ : ndarray
        Gradient norm of the objective at the start.

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
        check_model(model)
        check_n_components(n_components, model)
        as_rng(random_state)

    def fit(self, X, Y, init: MixingMeasure | None = None) -> "NullEstimator":
        """Record ``init`` (or a random start) as the fit; see the class docstring."""
        import torch

        check_model(self.model)
        k = check_n_components(self.n_components, self.model)
        Xt, Yt = prepare_data(X, Y, k, torch.device("cpu"))
        R, n, d = Xt.shape
        if init is None:
            G = random_starts(R, k, d, as_rng(self.random_state))
        else:
            G = prepare_init(init, R, k, d)
        obj, gn = objective_and_grad(self.model, Xt, Yt, G, k)
        self.params_ = G
        self.init_ = G
        self.objective_ = obj.numpy()
        self.grad_norm_ = gn.numpy()
        self.converged_ = np.ones(R, dtype=bool)
        self.n_iter_ = np.zeros(R, dtype=int)
        self.status_ = ["null"] * R
        self.n_features_in_ = d
        return self
