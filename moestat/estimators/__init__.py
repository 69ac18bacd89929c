"""Estimators of the mixing measure: batched least squares, SGD, the null control, starts.

``ESTIMATORS`` maps the command-line names to classes; ``"em"`` is added when
:mod:`moestat.estimators.em` is importable.
"""

from moestat.estimators.starts import near_truth_init, random_init
from moestat.estimators.lse import LeastSquaresMoE
from moestat.estimators.null import NullEstimator
from moestat.estimators.sgd import SGDMoE

__all__ = ["LeastSquaresMoE", "SGDMoE", "NullEstimator", "near_truth_init", "random_init", "ESTIMATORS"]

ESTIMATORS = {"lse": LeastSquaresMoE, "sgd": SGDMoE, "null": NullEstimator}

try:  # optional: written separately
    from moestat.estimators.em import EMGaussianMoE  # noqa: F401
except ImportError:  # pragma: no cover - depends on whether em.py exists yet
    pass
else:
    ESTIMATORS["em"] = EMGaussianMoE
    __all__.append("EMGaussianMoE")
