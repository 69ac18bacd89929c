"""Which estimator fits which model: ``ESTIMATORS`` and the one rule that reads a scenario's declaration.

A scenario declares what it fits (:class:`~moestat.model.declaration.FitDeclaration`: the model
family, the fitted model, ``k``, the objectives its data allow) and never names an estimator
class; this module is where the declaration meets the registry:

* :data:`ESTIMATORS` -- command-line name -> class (``moestat rates --estimator NAME``), every
  estimator of the package, the joint GLLiM's included;
* :func:`estimator_class_for` -- the class of a name for a declaration, or a one-line
  ``ValueError`` when they do not go together (least squares on data drawn from the mixture, ...);
* :func:`estimator_for` -- that class built for a scenario with the defaults of ``moestat rates``
  (what :mod:`moestat.rates` and a notebook call);
* :func:`random_start_for` -- the random start (``--init random``) of a declared model.

Which of the two batched EM engines ``mle`` runs is :func:`moestat.estimators.mle.em_engine`.  The
table "Which estimator to use when" of ``docs/guide/estimators.rst`` lists every entry.
"""

from __future__ import annotations

import numpy as np

from moestat.estimators.base import MoEEstimator
from moestat.estimators.em import EMGaussianMoE
from moestat.estimators.generic_starts import random_start as generic_random_start
from moestat.estimators.gllim import GLLiMEM, random_gllim_start
from moestat.estimators.lse import LeastSquaresMoE
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.null import NullEstimator
from moestat.estimators.sgd import SGDMoE
from moestat.estimators.starts import random_init, random_partition_init
from moestat.model.declaration import FitDeclaration
from moestat.model.mixing import MixingMeasure

__all__ = ["ESTIMATORS", "OBJECTIVE", "LIKELIHOOD_ESTIMATORS", "MULTI_START_ESTIMATORS", "DEFAULT_MAX_ITER", "OVER_MAX_ITER",
           "default_estimator", "estimator_class_for", "estimator_for", "random_start_for"]

#: Command-line name -> estimator class (``moestat rates --estimator NAME``).
ESTIMATORS: dict[str, type[MoEEstimator]] = {
    "lse": LeastSquaresMoE,
    "sgd": SGDMoE,
    "null": NullEstimator,
    "em": EMGaussianMoE,
    "mle": MLEGaussianMoE,
    "gllim": GLLiMEM,
}
#: Name -> the objective the estimator maximises or minimises: ``lse`` least squares, ``mle`` maximum
#: likelihood; ``None``: the null control, which fits nothing and goes with any model.
OBJECTIVE: dict[str, str | None] = {"lse": "lse", "sgd": "lse", "null": None, "em": "mle", "mle": "mle", "gllim": "mle"}
#: The maximum-likelihood entries (a fit judged against the truth by the log-likelihood).
LIKELIHOOD_ESTIMATORS = tuple(name for name, objective in OBJECTIVE.items() if objective == "mle")
#: The names that fit several starts per replicate (``--starts``; the least-squares sweeps have ``--extra-starts``).
MULTI_START_ESTIMATORS = ("mle", "gllim")

#: ``max_iter`` of ``moestat rates`` for an exact fit (:class:`moestat.rates.config.FittingSpec`);
#: an over-specified one gets :data:`OVER_MAX_ITER`.
DEFAULT_MAX_ITER = 200
#: ``max_iter`` of ``moestat rates`` for an over-specified fit (the budget rule of
#: :mod:`moestat.rates.presets`, applied to scenario files too): its slow directions need the
#: longer budget to stop on a convergence criterion.
OVER_MAX_ITER = 1000


def default_estimator(declaration: FitDeclaration) -> str:
    """``mle`` for ``y`` drawn from the mixture, else ``lse`` (the batched least squares)."""
    return "mle" if declaration.mixture_data else "lse"


def estimator_class_for(declaration: FitDeclaration, name: str) -> type[MoEEstimator]:
    """The class of :data:`ESTIMATORS` that fits the declared model by ``name``.

    The rule, in order: the estimator's objective (:data:`OBJECTIVE`) must be one the data allow
    (``declaration.objectives``); several starts (``n_starts > 1``) are for ``mle`` and ``gllim``;
    the joint GLLiM (family ``gllim``) is fitted by :class:`~moestat.estimators.gllim.GLLiMEM`,
    asked for as ``gllim`` or ``mle`` (its maximum likelihood), and ``gllim`` fits nothing else;
    every other name is its registry entry (which may still refuse the model at
    :meth:`~moestat.estimators.base.MoEEstimator.for_scenario`, e.g. EM a Top-K gate).

    Parameters
    ----------
    declaration : FitDeclaration
    name : str
        A key of :data:`ESTIMATORS`.

    Returns
    -------
    type
        A subclass of :class:`~moestat.estimators.base.MoEEstimator`.

    Raises
    ------
    ValueError
        One line, saying what to use instead.
    """
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; expected one of {', '.join(sorted(ESTIMATORS))}")
    d = declaration
    objective = OBJECTIVE[name]
    if objective == "mle" and "mle" not in d.objectives:
        raise ValueError(f"--estimator {name} is maximum likelihood, but {d.source} draws y = g(x) + noise; use --estimator lse, "
                         "or declare [noise] model = \"mixture\" with a variance in every [[atoms]] table")
    if objective == "lse" and "lse" not in d.objectives:
        raise ValueError(f"{d.source} draws y from the mixture: fit it by maximum likelihood with --estimator mle, not {name!r}")
    if d.n_starts > 1 and name not in MULTI_START_ESTIMATORS:
        raise ValueError(f"--starts > 1 is for --estimator mle (the least-squares sweeps have --extra-starts), not {name!r}")
    if d.family == "gllim":
        if name not in ("mle", "gllim"):
            raise ValueError("a joint GLLiM scenario ([input] law = \"gate\") is fitted by its joint maximum likelihood: "
                             f"use --estimator mle, not {name!r}")
        return GLLiMEM
    if name == "gllim":
        raise ValueError(f"--estimator gllim fits the joint Gaussian-gated MoE of (x, y) ([input] law = \"gate\"); {d.source} "
                         f"declares {d.family}: use --estimator {default_estimator(d)}")
    return ESTIMATORS[name]


def estimator_for(scenario, name: str | None = None, *, max_iter: int | None = None, random_state=None,
                  device: str = "cpu") -> MoEEstimator:
    """The estimator ``name`` built for ``scenario`` (:func:`estimator_class_for` of its
    :attr:`~moestat.data.synthetic.ScenarioBase.declaration`, then
    :meth:`~moestat.estimators.base.MoEEstimator.for_scenario`).

    Every argument has the default of ``moestat rates``, so that a notebook can write
    ``estimator_for(sc).fit(X, Y, init=sc.near_truth_start())``; the rates sweep builds every fit
    here.

    Parameters
    ----------
    scenario : moestat.data.synthetic.ScenarioBase
        Any scenario (built-in, Gaussian MoE, joint GLLiM, file).
    name : str, optional
        A key of :data:`ESTIMATORS`; default :func:`default_estimator` (``mle`` for a scenario whose
        ``y`` is drawn from the mixture, else ``lse``).
    max_iter : int, optional
        Iteration budget; default :data:`DEFAULT_MAX_ITER` for an exact fit, :data:`OVER_MAX_ITER`
        for an over-specified one.
    random_state : None, int, SeedSequence or Generator
        Seed of the estimator's own randomness (random starts); ``None``: fresh entropy.
    device : str
        ``cpu`` (default), ``cuda``, ``cuda:N`` or ``auto``.

    Returns
    -------
    MoEEstimator
        Call ``fit(X [R, n, d], Y [R, n], init=...)``.  Without ``init`` an estimator uses its own
        start: least squares a data-free random start, maximum likelihood a random data-driven start
        per replicate; ``moestat rates`` passes the scenario's ``near_truth_start``.

    Raises
    ------
    ValueError
        One line, when the estimator does not fit the scenario's model.
    """
    declaration = scenario.declaration
    if name is None:
        name = default_estimator(declaration)
    if max_iter is None:
        max_iter = OVER_MAX_ITER if scenario.setting == "over" else DEFAULT_MAX_ITER
    return estimator_class_for(declaration, name).for_scenario(scenario, max_iter=max_iter, random_state=random_state,
                                                               device=device)


def random_start_for(declaration: FitDeclaration, X: np.ndarray | None, Y: np.ndarray | None,
                     rng: np.random.Generator) -> MixingMeasure:
    """A random start (``--init random``) of the declared model: unbatched, ``k_fit`` atoms.

    * ``regression``: data-free, from the law the truth is drawn from
      (:func:`~moestat.estimators.starts.random_init`, ``eta`` of ``n_eta`` entries); ``X`` and
      ``Y`` are not used;
    * ``gaussian-moe``: a random partition of ``(x, y)``
      (:func:`~moestat.estimators.starts.random_partition_init`);
    * ``likelihood``: the generic EM's data-driven start
      (:func:`moestat.estimators.generic_starts.random_start`);
    * ``gllim``: :func:`~moestat.estimators.gllim.random_gllim_start`.

    Parameters
    ----------
    declaration : FitDeclaration
    X : ndarray ``[n, d]`` or None
    Y : ndarray ``[n]`` or None
    rng : numpy.random.Generator
    """
    d = declaration
    if d.family == "regression":
        return random_init(int(d.k_fit), d.d, rng, n_eta=d.n_eta)
    if d.family == "gaussian-moe":
        return random_partition_init(X, Y, int(d.k_fit), rng)
    if d.family == "likelihood":
        return generic_random_start(d.model, X, Y, int(d.k_fit), rng)
    return random_gllim_start(np.asarray(X, float), np.asarray(Y, float), int(d.k_fit), rng)
