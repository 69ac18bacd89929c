"""Estimators of the mixing measure and their shared contract.

Every estimator derives from :class:`~moestat.estimators.base.MoEEstimator` (the contract:
``fit``/``predict``/``score`` on batches of replicates, common fitted attributes, failures
reported per replicate, :meth:`~moestat.estimators.base.MoEEstimator.for_scenario`).

* :class:`LeastSquaresMoE` -- batched least squares by Levenberg-Marquardt
  (:mod:`~moestat.estimators.lse`, :mod:`~moestat.estimators.levenberg_marquardt`,
  :mod:`~moestat.estimators.lse_kernel`); its scipy baseline is
  :mod:`~moestat.estimators.reference`.
* :class:`SGDMoE` -- minibatch SGD, the optimiser of Nguyen et al. (2024).
* :class:`EMGaussianMoE` -- EM for the Gaussian mixture of linear experts.
* :class:`MLEGaussianMoE` -- batched torch EM (maximum likelihood) for the Gaussian MoE with
  per-expert variances (:mod:`~moestat.estimators.mle`).
* :class:`GLLiMEM` -- the joint maximum likelihood of the Gaussian-gated MoE of ``(x, y)`` (GLLiM)
  by closed-form EM (:mod:`~moestat.estimators.gllim`).
* :class:`NullEstimator` -- returns its start (the control of the rate experiments).
* :mod:`~moestat.estimators.starts` -- starting points; :mod:`~moestat.estimators.validation` --
  the input checks they share.

``ESTIMATORS`` maps the command-line names to the classes; :mod:`~moestat.estimators.choice` holds
it with the one rule that picks the class a scenario's declared model is fitted by
(:func:`~moestat.estimators.choice.estimator_for`), and ``docs/guide/estimators.rst`` has the table
"Which estimator to use when".
"""

from moestat.estimators.base import FAILURE_STATUSES, MoEEstimator
from moestat.estimators.choice import ESTIMATORS, estimator_class_for, estimator_for, random_start_for
from moestat.estimators.em import EMGaussianMoE
from moestat.estimators.gllim import GLLiMEM
from moestat.estimators.lse import LeastSquaresMoE
from moestat.estimators.mle import MLEGaussianMoE
from moestat.estimators.null import NullEstimator
from moestat.estimators.sgd import SGDMoE
from moestat.estimators.starts import near_truth_init, random_init, random_starts

__all__ = [
    "MoEEstimator",
    "FAILURE_STATUSES",
    "LeastSquaresMoE",
    "SGDMoE",
    "EMGaussianMoE",
    "MLEGaussianMoE",
    "GLLiMEM",
    "NullEstimator",
    "near_truth_init",
    "random_init",
    "random_starts",
    "ESTIMATORS",
    "estimator_class_for",
    "estimator_for",
    "random_start_for",
]
