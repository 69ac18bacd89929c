"""The independent reference fit: :func:`scipy.optimize.least_squares`, one replicate at a time.

The baseline that the batched :class:`~moestat.estimators.lse.LeastSquaresMoE` is checked
against (``tests/estimators/test_lse.py``) and timed against
(``benchmarks/lse_batched_vs_scipy.py``, ``docs/guide/estimators.rst``).
"""

from __future__ import annotations

import numpy as np
import torch

from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel
from moestat.estimators.layout import pack
from moestat.estimators.levenberg_marquardt import box_bounds
from moestat.estimators.lse import STAGE_FTOL, STAGE_MAX_ITER
from moestat.estimators.lse_kernel import Design, residual_and_jacobian
from moestat.estimators.validation import prepare_data, prepare_init

__all__ = ["scipy_reference_fit"]


def scipy_reference_fit(
    model: MoEModel,
    X,
    Y,
    init: MixingMeasure,
    n_components: int,
    *,
    box: ParameterBox = ParameterBox(),
    temperatures=(),
    method: str = "trf",
    ftol: float = 1e-12,
    xtol: float = 1e-12,
    gtol: float = 1e-10,
    max_nfev: int | None = None,
    jac: str = "analytic",
) -> dict[str, np.ndarray]:
    """Fit each replicate with :func:`scipy.optimize.least_squares` in a Python loop.

    The baseline of the acceptance tests and of ``benchmarks/lse_batched_vs_scipy.py``: the
    same residual ``g(X) - Y``, the same analytic Jacobian (the kernel behind
    :func:`~moestat.estimators.levenberg_marquardt.predict_and_jacobian`, checked against
    autograd), the same start, the same box (``method="trf"``; ``"lm"`` ignores the box) and,
    if ``temperatures`` is given, the same continuation stages (each stage with
    ``ftol = xtol =`` :data:`~moestat.estimators.lse.STAGE_FTOL` and at most
    :data:`~moestat.estimators.lse.STAGE_MAX_ITER` function evaluations, as in
    :class:`~moestat.estimators.lse.LeastSquaresMoE` with a given ``topk_temperatures``; the
    ``"auto"`` ladder's entry, pieces and exit are not reproduced).

    Parameters
    ----------
    model, X, Y, init, n_components
        As for :meth:`~moestat.estimators.lse.LeastSquaresMoE.fit` (``init`` batched ``[R]`` or unbatched).
    box : ParameterBox
        Bounds (trf only).
    temperatures : sequence of float
        Smoothed Top-K stages run before the final hard-gate fit.
    method : {"trf", "lm"}
        scipy method.
    ftol, xtol, gtol : float
        scipy tolerances of the final stage.
    max_nfev : int, optional
        scipy's evaluation cap of the final stage.
    jac : {"analytic", "2-point", "3-point"}
        ``analytic`` (default) hands scipy our Jacobian, the strongest baseline; ``2-point`` is
        scipy's own finite differences, i.e. scipy as it is usually called.

    Returns
    -------
    dict
        ``objective [R]`` (mean squared residual), ``theta [R, P]``, ``nfev [R]``,
        ``status [R]`` (scipy's status codes).
    """
    from scipy.optimize import least_squares

    if jac not in ("analytic", "2-point", "3-point"):
        raise ValueError(f"jac must be 'analytic', '2-point' or '3-point', got {jac!r}")
    use_analytic, jac_kind = jac == "analytic", jac
    Xt, Yt = prepare_data(X, Y, n_components, torch.device("cpu"))
    R, n, d = Xt.shape
    k = n_components
    G0 = prepare_init(init, R, k, d)
    th0 = pack(G0.torch(), True).numpy()
    lo, up = box_bounds(box, k, d, None, torch.float64)
    bounds = (lo.numpy(), up.numpy()) if method == "trf" else (-np.inf, np.inf)
    out = {"objective": np.empty(R), "theta": np.empty_like(th0), "nfev": np.zeros(R, int), "status": np.zeros(R, int)}
    for r in range(R):
        # the same kernel as the batched fit, with its features built once per replicate
        data_r = Design.build(model, Xt[r : r + 1], Yt[r : r + 1], chunk=n)
        x = np.clip(th0[r], bounds[0], bounds[1]) if method == "trf" else th0[r]
        nfev = 0
        for T in list(temperatures) + [None]:

            def fun(th, T=T):
                return residual_and_jacobian(model, data_r, torch.from_numpy(th)[None], k, T, False)[0][0].numpy()

            def jac(th, T=T):
                return residual_and_jacobian(model, data_r, torch.from_numpy(th)[None], k, T, True)[1][0].numpy()

            if T is None:
                kw = dict(ftol=ftol, xtol=xtol, gtol=gtol, max_nfev=max_nfev)
            else:
                kw = dict(ftol=STAGE_FTOL, xtol=STAGE_FTOL, gtol=gtol, max_nfev=STAGE_MAX_ITER)
            res = least_squares(fun, x, jac=jac if use_analytic else jac_kind, bounds=bounds, method=method, **kw)
            x = res.x
            nfev += res.nfev
        out["theta"][r] = x
        out["objective"][r] = float(np.mean(res.fun**2))
        out["nfev"][r] = nfev
        out["status"][r] = res.status
    return out
