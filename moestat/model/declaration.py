"""What a scenario fits, declared: the model family, its fitted gate and expert, and the objective.

A scenario (:mod:`moestat.data`) states *what* is fitted and leaves *how* to the estimators: its
:attr:`~moestat.data.synthetic.ScenarioBase.declaration` is a :class:`FitDeclaration`, and
:func:`moestat.estimators.choice.estimator_class_for` picks the class of
:data:`moestat.estimators.ESTIMATORS` that fits it (the table of ``docs/guide/estimators.rst``,
"Which estimator to use when").  So the data package never imports the estimators' package, and
the choice is written once, as scikit-learn keeps one ``fit`` per model in ``sklearn/mixture/``.

The four families (and the objective each is fitted by):

* ``regression`` -- ``y = g_G(x) + N(0, nu)``, the regression MoE of Nguyen et al. (2024), eq. (1),
  any gate and expert: least squares (and, for the built-in scenario, EM).
* ``gaussian-moe`` -- ``y | x ~ sum_i softmax_i(x) N(a_i^T x + b_i, sigma_i^2)``, model 1 of Nguyen,
  Nguyen & Ho (2023): maximum likelihood.
* ``likelihood`` -- ``y`` drawn from the mixture of a
  :class:`~moestat.model.likelihood.LikelihoodModel` (any gate; Gaussian or multinomial experts):
  maximum likelihood.
* ``gllim`` -- the joint Gaussian-gated MoE of ``(x, y)`` (Nguyen, Nguyen, Nguyen & Ho 2024;
  :mod:`moestat.model.gllim_model`): joint maximum likelihood.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FitDeclaration", "FIT_FAMILIES", "OBJECTIVES"]

#: The model families a scenario can declare (module docstring).
FIT_FAMILIES = ("regression", "gaussian-moe", "likelihood", "gllim")
#: Objectives: least squares (``lse``) or maximum likelihood (``mle``).
OBJECTIVES = ("lse", "mle")


@dataclass(frozen=True)
class FitDeclaration:
    """What a scenario fits (module docstring): the estimators read it, the scenario never picks one.

    Parameters
    ----------
    family : {"regression", "gaussian-moe", "likelihood", "gllim"}
        The model family (:data:`FIT_FAMILIES`).
    model : object or None
        The fitted model, with the fitted number of activated experts (K-bar): a
        :class:`~moestat.model.regression.MoEModel` or :class:`~moestat.model.protocol.ProtocolModel`
        (``regression``), a :class:`~moestat.model.likelihood.LikelihoodModel` (``likelihood``);
        ``None`` where the family fixes it (``gaussian-moe``: the dense softmax gate with linear
        Gaussian experts; ``gllim``).
    k_fit : int
        Fitted atoms.
    d : int
        Input dimension.
    n_eta : int
        Entries of each atom's ``eta`` in a start (the expert's parameters, then the variance where
        the family has one per atom; the GLLiM's ``(a, b, nu, vec Gamma)``).
    objectives : tuple of str
        What the scenario's data may be fitted by (:data:`OBJECTIVES`): ``("mle",)`` for ``y``
        drawn from the mixture; ``("lse",)`` for a scenario file's additive noise; ``("lse",
        "mle")`` for the built-in regression scenario, whose Gaussian noise EM also fits (the
        decomposition study, ``docs/guide/decomposition.rst``).
    n_starts : int
        Starts per replicate of a maximum-likelihood fit (``--starts``); 1 otherwise.
    source : str
        How an error names the scenario (``"this scenario"``, ``"this scenario file"``).
    """

    family: str
    model: Any
    k_fit: int
    d: int
    n_eta: int
    objectives: tuple[str, ...]
    n_starts: int = 1
    source: str = "this scenario"

    def __post_init__(self) -> None:
        if self.family not in FIT_FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; expected one of {', '.join(FIT_FAMILIES)}")
        bad = sorted(set(self.objectives) - set(OBJECTIVES))
        if bad or not self.objectives:
            raise ValueError(f"objectives must be a non-empty subset of {OBJECTIVES}, got {self.objectives!r}")

    @property
    def mixture_data(self) -> bool:
        """Whether ``y`` is drawn from the mixture (the families fitted by maximum likelihood alone)."""
        return self.family != "regression"

    def describe(self) -> str:
        """One line: the family, the fitted model and atoms (what an error message or a table names)."""
        if self.model is not None and hasattr(self.model, "describe"):
            what = self.model.describe()
        else:
            what = {"gaussian-moe": "softmax gate / linear Gaussian experts", "gllim": "joint Gaussian-gated MoE of (x, y)"}.get(
                self.family, "")
        return f"{self.family}: {what}, k = {self.k_fit}, d = {self.d}" if what else f"{self.family}: k = {self.k_fit}, d = {self.d}"
