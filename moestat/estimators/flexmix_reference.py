"""R's ``flexmix`` as an independent reference fit of the Gaussian MoE (Grün & Leisch 2008).

:func:`flexmix_fit` writes one data set and a start to a temporary directory, fits
``flexmix(y ~ x, model = FLXMRglm(~x), concomitant = FLXPmultinom(~x))`` through ``Rscript``
and reads back the log-likelihood, the parameters and the time flexmix took.

*Same start.*  flexmix is started from posterior probabilities (``cluster =``), not from
parameters, so the start given to both programs is the measure ``G0``: its E-step
responsibilities are written as flexmix's ``cluster`` matrix, and moestat's EM, started from
``G0``, computes the very same responsibilities in its first E-step -- the two EMs begin with the
same M-step.

*Parametrisation.*  flexmix's multinomial concomitant takes the **first** component as the
reference (its coefficients are 0) and reports ``sigma`` (a standard deviation); moestat takes the
**last** atom as the reference and stores ``sigma^2``.  :func:`flexmix_fit` maps back: the gate is
shifted by the last component's coefficients, and ``sigma`` is squared.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from moestat.model.gaussian_moe import component_log_joint
from moestat.model.mixing import MixingMeasure

__all__ = ["flexmix_available", "flexmix_fit"]

_SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(flexmix))
dat <- read.csv(file.path(args[1], "data.csv"))
post <- as.matrix(read.csv(file.path(args[1], "post.csv")))
xs <- grep("^x", names(dat), value = TRUE)
fx <- as.formula(paste("~", paste(xs, collapse = " + ")))
fy <- as.formula(paste("y ~", paste(xs, collapse = " + ")))
t0 <- proc.time()[["elapsed"]]
f <- flexmix(fy, data = dat, k = ncol(post), model = FLXMRglm(fx), concomitant = FLXPmultinom(fx),
             cluster = post, control = list(iter.max = as.integer(args[2]), tolerance = as.numeric(args[3]),
                                            minprior = 0))
el <- proc.time()[["elapsed"]] - t0
k <- f@k
p <- parameters(f)
g <- parameters(f, which = "concomitant")
out <- c(as.numeric(logLik(f)), el, f@iter, k, as.vector(p), as.vector(g))
writeLines(format(out, digits = 17), file.path(args[1], "out.txt"))
"""


def flexmix_available() -> bool:
    """Whether ``Rscript`` is on the PATH and R can load ``flexmix``."""
    if shutil.which("Rscript") is None:
        return False
    try:
        res = subprocess.run(["Rscript", "-e", "suppressMessages(library(flexmix))"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def flexmix_fit(X: np.ndarray, Y: np.ndarray, start: MixingMeasure, *, max_iter: int = 1000,
                tol: float = 1e-12) -> dict:
    """Fit one data set with flexmix from the responsibilities of ``start``.

    Parameters
    ----------
    X : ndarray, shape ``[n, d]``
    Y : ndarray, shape ``[n]``
    start : MixingMeasure
        Unbatched, ``eta [k, d + 2]`` (a, b, sigma^2).
    max_iter, tol : int, float
        flexmix's ``iter.max`` and ``tolerance`` (on the change of the log-likelihood).

    Returns
    -------
    dict
        ``loglik`` (float), ``time`` (seconds inside R, the fit alone), ``n_iter``, ``params``
        (MixingMeasure in moestat's convention: last atom the reference, ``eta = (a, b, sigma^2)``).

    Raises
    ------
    RuntimeError
        Rscript failed (its last stderr line is in the message).
    """
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    n, d = X.shape
    post = torch.softmax(component_log_joint(X, Y, start.numpy()), dim=-1).numpy()
    with tempfile.TemporaryDirectory(prefix="moestat-flexmix-") as tmp:
        tmp = Path(tmp)
        header = ",".join([f"x{j + 1}" for j in range(d)] + ["y"])
        np.savetxt(tmp / "data.csv", np.column_stack([X, Y]), delimiter=",", header=header, comments="", fmt="%.17g")
        np.savetxt(tmp / "post.csv", post, delimiter=",", header=",".join(f"p{i + 1}" for i in range(post.shape[1])),
                   comments="", fmt="%.17g")
        (tmp / "fit.R").write_text(_SCRIPT, encoding="utf-8")
        res = subprocess.run(["Rscript", str(tmp / "fit.R"), str(tmp), str(int(max_iter)), repr(float(tol))],
                             capture_output=True, text=True)
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"Rscript flexmix fit failed: {last}")
        vals = np.array([float(v) for v in (tmp / "out.txt").read_text().split()])
    ll, el, it, k = vals[0], vals[1], int(vals[2]), int(vals[3])
    q = d + 2  # rows of parameters(f): (Intercept), x1..xd, sigma
    p = vals[4: 4 + q * k].reshape(k, q)
    g = vals[4 + q * k:].reshape(k, d + 1)  # per component: (Intercept), x1..xd; component 1 is 0
    eta = np.column_stack([p[:, 1: d + 1], p[:, 0], p[:, d + 1] ** 2])
    gate = g - g[-1]  # make the last component the reference
    params = MixingMeasure(gate[:, 0], gate[:, 1:], eta)
    return {"loglik": float(ll), "time": float(el), "n_iter": it, "params": params}
