"""The contract every estimator of the mixing measure follows (:class:`MoEEstimator`).

The conventions are scikit-learn's (as in ``sklearn/mixture/_base.py``), adapted to a batch of
``R`` independent replicates fitted in one call:

* ``__init__`` only stores its arguments (so ``get_params``/``set_params``/``clone``/``repr``
  work); every parameter is checked at :meth:`~MoEEstimator.fit`.
* ``fit(X [R, n, d], Y [R, n], init=None)`` returns ``self``; ``predict(X) -> [R, n]``;
  ``score(X, Y) -> [R]``; calling either before ``fit`` raises
  :class:`sklearn.exceptions.NotFittedError`.
* ``random_state`` (``None``, int, :class:`~numpy.random.SeedSequence` or
  :class:`~numpy.random.Generator`) goes through :func:`moestat.seeding.numpy_generator` in every
  estimator (:meth:`~MoEEstimator._rng`), so the same value gives the same fit; a
  ``SeedSequence`` is never consumed, so fitting twice with one gives the same fit twice.
* Fitted attributes common to all: ``params_`` (:class:`~moestat.model.mixing.MixingMeasure`,
  NumPy, batch ``[R]``), ``objective_`` (``[R]``, the mean squared residual
  ``mean((Y - predict(X))**2, axis=1)``), ``converged_`` (``[R]`` bool), ``status_`` (list of
  ``R`` str), ``n_iter_`` (``[R]`` int) and ``n_features_in_``.
* One replicate whose fit fails numerically (non-finite objective, a linear-algebra error)
  gets a status in :data:`FAILURE_STATUSES`, ``objective_ = NaN`` and ``converged_ = False``;
  the batch never raises because of it and the other replicates are fitted as usual.  (Bad
  *input* -- wrong shapes, NaN in ``X`` or ``Y`` -- is still a ``ValueError`` at ``fit``.)
* :meth:`~MoEEstimator.for_scenario` builds an estimator for a synthetic scenario; the rates sweep
  calls it through :func:`moestat.estimators.choice.estimator_for`, which picks the class from the
  scenario's declared model (:class:`~moestat.model.declaration.FitDeclaration`).
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.estimators.validation import prepare_data
from moestat.model.mixing import MixingMeasure
from moestat.seeding import numpy_generator

__all__ = ["MoEEstimator", "FAILURE_STATUSES"]

#: Statuses of a replicate whose fit failed (its ``objective_`` is NaN).
FAILURE_STATUSES = ("nonfinite", "linalg_error")


class _ParamsAPI:
    """scikit-learn's parameter API (``get_params``, ``set_params``, ``repr``) without importing it.

    ``sklearn.base.BaseEstimator`` would do, but importing scikit-learn costs about a second and
    a half (a tenth of the main job ``python -m moestat.rates`` on two cores) for these three
    methods.  :func:`sklearn.base.clone` needs only ``get_params(deep=False)`` and the
    constructor, so it works on these estimators unchanged (``tests/estimators/test_contract.py``).
    """

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's parameter names, sorted (as scikit-learn's ``BaseEstimator``)."""
        init = cls.__init__
        if init is object.__init__:
            return []
        params = inspect.signature(init).parameters.values()
        for p in params:
            if p.kind == p.VAR_POSITIONAL:
                raise RuntimeError(f"{cls.__name__}.__init__ must not take *args (scikit-learn's convention)")
        return sorted(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor arguments as stored (``deep`` also lists a nested estimator's, ``name__param``)."""
        out: dict[str, Any] = {}
        for key in self._get_param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params: Any) -> "_ParamsAPI":
        """Set constructor arguments by name (checked at ``fit``, as every argument); return ``self``."""
        valid = self._get_param_names()
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for estimator {type(self).__name__}; valid: {valid}")
            if sub:
                getattr(self, name).set_params(**{sub: value})
            else:
                setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
        return f"{type(self).__name__}({args})"


def _check_is_fitted(est: "MoEEstimator") -> None:
    """Raise scikit-learn's ``NotFittedError`` (imported only then) when ``est`` has no ``params_``."""
    if not hasattr(est, "params_"):
        from sklearn.exceptions import NotFittedError

        raise NotFittedError(
            f"This {type(est).__name__} instance is not fitted yet. Call 'fit' with appropriate arguments "
            "before using this estimator."
        )


class MoEEstimator(_ParamsAPI):
    """Base class of the estimators of a mixing measure, batched over replicates.

    Subclasses implement ``__init__`` (storing every argument under its own name, nothing
    else), :meth:`fit` and :meth:`_check_params`, and may override :meth:`for_scenario` and
    :meth:`predict`.  The module docstring states the contract; ``tests/estimators/
    test_contract.py`` checks it for every entry of :data:`moestat.estimators.ESTIMATORS`.

    Attributes
    ----------
    params_ : MixingMeasure
        Fitted measures, NumPy, batch shape ``(R,)`` (``R = 1`` for unbatched input).
    objective_ : ndarray of float, shape ``[R]``
        Mean squared residual ``(1/n) sum_i (Y_i - g(X_i))^2`` of the fit, the same quantity for
        every estimator; NaN for a replicate whose fit failed.
    converged_ : ndarray of bool, shape ``[R]``
    status_ : list of str, length ``R``
        Each estimator's own words for how the fit stopped; a failed replicate's is one of
        :data:`FAILURE_STATUSES`.
    n_iter_ : ndarray of int, shape ``[R]``
    n_features_in_ : int
        Input dimension ``d`` seen at ``fit``.
    """

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def for_scenario(cls, scenario, *, max_iter: int, random_state, device: str = "cpu") -> "MoEEstimator":
        """An estimator of this class for a synthetic scenario, its parameters checked.

        The one constructor of the rates sweep: ``scenario.fit_model`` and ``scenario.k_fit``
        are the model and the number of atoms; each class documents which of ``scenario.box``,
        ``max_iter``, ``random_state`` and ``device`` it uses (the others are ignored).

        Parameters
        ----------
        scenario : moestat.data.synthetic.ScenarioBase
            Supplies ``declaration`` (the model family, starts per replicate), ``fit_model``,
            ``k_fit``, ``setting`` and ``box``.
        max_iter : int
            Iteration budget, for estimators that have one.
        random_state : None, int, SeedSequence or Generator
            Seed of the estimator's own randomness (random starts, minibatch order).
        device : str
            ``cpu``, ``cuda``, ``cuda:N`` or ``auto``, for estimators that run on torch.

        Returns
        -------
        MoEEstimator

        Raises
        ------
        ValueError, TypeError
            The scenario's model (or an argument) does not suit the estimator, e.g. EM with a
            Top-K gate -- raised here rather than at ``fit`` so that a sweep refuses a bad
            configuration before any work starts.
        """
        est = cls._from_scenario(scenario, max_iter=max_iter, random_state=random_state, device=device)
        est._check_params()
        return est

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "MoEEstimator":
        raise NotImplementedError(f"{cls.__name__} does not define _from_scenario")

    def _check_params(self) -> None:
        """Check every constructor argument (called by ``fit``); raise ``ValueError``/``TypeError``."""
        raise NotImplementedError

    def _rng(self) -> np.random.Generator:
        """The generator of this fit: ``random_state`` through :func:`~moestat.seeding.numpy_generator`.

        A ``SeedSequence`` is copied first: building a generator from it is deterministic, but a
        ``spawn`` on it (as EM does) would advance the caller's object and make a second fit with
        the same ``random_state`` differ from the first.
        """
        rs = self.random_state
        if isinstance(rs, np.random.SeedSequence):
            rs = np.random.SeedSequence(
                rs.entropy, spawn_key=rs.spawn_key, pool_size=rs.pool_size, n_children_spawned=rs.n_children_spawned
            )
        return numpy_generator(rs, allow_none=True)

    # ---- fitting -------------------------------------------------------------------------------
    def fit(self, X, Y, init: MixingMeasure | None = None) -> "MoEEstimator":  # pragma: no cover - abstract
        """Fit every replicate of ``X [R, n, d]``, ``Y [R, n]`` (optional start ``init``); return ``self``."""
        raise NotImplementedError

    def _start_fit(self, X, Y, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.device]:
        """The first steps of every ``fit``: check the constructor arguments, resolve the device
        (or use ``device``), and check the data.

        Returns
        -------
        X : Tensor, shape ``[R, n, d]``
        Y : Tensor, shape ``[R, n]``
        device : torch.device
        """
        self._check_params()
        dev = resolve_device(self.device) if device is None else device
        Xt, Yt = prepare_data(X, Y, self.n_components, dev)
        return Xt, Yt, dev

    def _set_fit(
        self,
        params: MixingMeasure,
        objective: np.ndarray,
        converged: np.ndarray,
        n_iter: np.ndarray,
        status: Sequence[str],
        d: int,
    ) -> None:
        """Store the common fitted attributes, marking every non-finite replicate as failed.

        A replicate whose objective is not finite gets ``objective_ = NaN``,
        ``converged_ = False`` and, unless its status already names a failure, ``"nonfinite"``.
        """
        objective = np.asarray(objective, dtype=np.float64).copy()
        converged = np.asarray(converged, dtype=bool).copy()
        status = [str(s) for s in status]
        bad = ~np.isfinite(objective)
        objective[bad] = np.nan
        converged[bad] = False
        for r in np.flatnonzero(bad):
            if status[r] not in FAILURE_STATUSES:
                status[r] = "nonfinite"
        self.params_ = params.numpy()
        self.objective_ = objective
        self.converged_ = converged
        self.status_ = status
        self.n_iter_ = np.asarray(n_iter).astype(np.int64)
        self.n_features_in_ = int(d)

    # ---- using a fit ---------------------------------------------------------------------------
    def _check_X(self, X) -> torch.Tensor:
        """``X`` as a float64 CPU tensor ``[R, n, d]``; an unbatched ``[n, d]`` is used for every replicate."""
        _check_is_fitted(self)
        if isinstance(X, torch.Tensor):
            Xt = X.detach().to(device="cpu", dtype=torch.float64)
        else:
            Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
        R = self.params_.batch_shape[0]
        if Xt.ndim == 2:
            Xt = Xt.unsqueeze(0).expand(R, -1, -1)
        if Xt.ndim != 3 or Xt.shape[0] != R or Xt.shape[-1] != self.n_features_in_:
            raise ValueError(
                f"X must have shape [R, n, d] = [{R}, n, {self.n_features_in_}] (or [n, d]), got {tuple(Xt.shape)}"
            )
        return Xt

    def predict(self, X) -> np.ndarray:
        """The fitted regression function ``g`` at ``X``.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` or ``[n, d]``
            Inputs; an unbatched ``X`` is evaluated under every replicate's fit.

        Returns
        -------
        ndarray, shape ``[R, n]``
        """
        Xt = self._check_X(X)
        return self.model.predict(Xt, self.params_).numpy()

    def score(self, X, Y) -> np.ndarray:
        """Negative mean squared residual per replicate, ``-mean((Y - predict(X))**2, axis=1)``.

        An array, not scikit-learn's scalar: the ``R`` replicates are independent fitting
        problems (``R`` data sets, ``R`` fits), so one number would mix them -- and a failed
        replicate (NaN) would hide the others.  On the training data it is ``-objective_``.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` or ``[n, d]``
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``, shared)

        Returns
        -------
        ndarray, shape ``[R]``
            Greater is better (scikit-learn's sign convention).
        """
        pred = self.predict(X)
        Yn = Y.detach().cpu().numpy() if isinstance(Y, torch.Tensor) else np.asarray(Y, dtype=np.float64)
        Yn = np.broadcast_to(Yn, pred.shape)
        return -np.mean((Yn - pred) ** 2, axis=-1)
