"""Regression error ``||g_{G_hat} - g_{G*}||_{L2(mu)}`` (Nguyen et al. (2024), Theorems 1 and 4)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from moestat.model.mixing import MixingMeasure
from moestat.model.regression import MoEModel

__all__ = ["regression_l2_error"]


def regression_l2_error(
    fit_model: MoEModel,
    fitted: MixingMeasure,
    true_model: MoEModel,
    truth: MixingMeasure,
    X_holdout: npt.ArrayLike,
) -> np.ndarray:
    """Monte-Carlo ``L2(mu)`` distance between fitted and true regression functions.

    Parameters
    ----------
    fit_model : MoEModel
        Model of the fit (K-bar activated experts in the over-specified setting, eq. 7/12).
    fitted : MixingMeasure
        Fitted measure, batched ``[R]`` or not.
    true_model : MoEModel
        Model of the truth (K activated experts).
    truth : MixingMeasure
        True measure (unbatched).
    X_holdout : array, shape ``[m, d]``
        A **fixed** held-out sample from ``mu`` (e.g. :meth:`Scenario.holdout`), the same for
        every fit so that replicate and sample-size differences are not Monte-Carlo noise.

    Returns
    -------
    ndarray
        ``sqrt(mean_x (g_fit(x) - g_true(x))^2)`` with the fitted batch shape.
    """
    X = torch.as_tensor(np.asarray(X_holdout, dtype=np.float64))
    if X.ndim != 2:
        raise ValueError(f"X_holdout must have shape [m, d], got {tuple(X.shape)}")
    g_true = true_model.predict(X, truth)
    fitted = fitted.torch()
    Xb = X.expand(*fitted.batch_shape, *X.shape) if fitted.batch_shape else X
    g_fit = fit_model.predict(Xb, fitted)
    return torch.sqrt(((g_fit - g_true) ** 2).mean(-1)).numpy()
