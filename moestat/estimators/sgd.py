"""Minibatch SGD on the least-squares objective, the optimiser of Nguyen et al. (2024), Section 5.

Batched over replicates: every replicate has its own minibatch stream (its own permutation per
epoch) and its own parameters; one summed loss gives each replicate exactly its own gradient
because the replicates share no parameters.

Known limitation (reference notes on Nguyen et al. (2024), Section 9, item 3): with a learning
rate that does not go to 0 the iterate fluctuates at a level set by ``lr`` and the batch size,
not by ``n``; this floor flattens rate curves at large ``n``.  Use ``lr_schedule="cosine"`` (default) and/or ``polish``.  The
hard Top-K mask also has zero derivative in ``beta1``, so SGD, like any local method, does not
see the first-order effect of moving the selection boundary (see
:class:`~moestat.estimators.lse.LeastSquaresMoE`, ``topk_temperatures``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.model.gates import gate_weights
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel
from moestat.estimators.base import MoEEstimator
from moestat.estimators.layout import pack, unpack
from moestat.estimators.levenberg_marquardt import box_bounds, levenberg_marquardt, objective_and_grad
from moestat.estimators.starts import random_starts
from moestat.estimators.validation import (
    check_model,
    check_n_components,
    check_positive_float,
    check_positive_int,
    prepare_init,
)

__all__ = ["SGDMoE", "LR_SCHEDULES", "POLISH_METHODS", "SGD_DEFAULTS"]

LR_SCHEDULES = ("constant", "cosine", "step")
POLISH_METHODS = (None, "lbfgs", "lm")
#: The defaults of :class:`SGDMoE` that ``moestat rates`` exposes (``--sgd-lr``, ``--sgd-batch``,
#: ``--sgd-epochs``, ``--sgd-schedule``; :class:`moestat.rates.config.FittingSpec`).
SGD_DEFAULTS = {"lr": 1e-2, "batch_size": 64, "epochs": 20, "lr_schedule": "cosine"}


def _predict(model: MoEModel, X: torch.Tensor, beta0, beta1, eta) -> torch.Tensor:
    """``g [R, n]`` at ``X [R, n, d]``, sample-major through the gate/expert vocabulary (autograd
    differentiates it; the least-squares kernel's analytic Jacobian is not needed here)."""
    w = gate_weights(model.gate.scores(X, beta1), beta0, model.gate.k_active)
    h = model.expert.phi(model.expert.preactivation(X, eta))
    return (w * h).sum(-1)


def _lr_at(lr: float, schedule: str, step: int, total: int) -> float:
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return 0.5 * lr * (1.0 + math.cos(math.pi * step / max(total, 1)))
    # "step": divide by 10 at 50% and again at 75% of the run
    return lr * (0.1 ** (int(step >= 0.5 * total) + int(step >= 0.75 * total)))


class SGDMoE(MoEEstimator):
    """Projected minibatch SGD for the MoE least-squares objective, batched over replicates.

    Parameters
    ----------
    model : MoEModel
        Gate and expert family (the gate's ``k_active`` is K, or K-bar when over-specified).
    n_components : int
        Number of fitted atoms ``k``.
    lr : float
        Initial learning rate (reference default ``1e-2``).
    batch_size : int
        Minibatch size (default 64).
    epochs : int
        Passes over the data (default 20).
    lr_schedule : {"cosine", "constant", "step"}
        Learning-rate decay per step.
    polish : {None, "lbfgs", "lm"}
        Optional full-batch refinement after SGD: torch L-BFGS (strong-Wolfe line search) on
        the sum of the replicates' objectives, or the batched Levenberg-Marquardt of
        :class:`~moestat.estimators.lse.LeastSquaresMoE` (hard gate).
    tol : float
        Convergence threshold on the Euclidean norm of the full-batch gradient of the mean
        squared residual at the end (default ``1e-3``).
    box : ParameterBox
        Iterates are projected onto the box after every step.
    random_state : None, int, SeedSequence or Generator
        Seeds the minibatch order and the random starts.
    device : {"cpu", "cuda", "cuda:N", "auto"}
        Tensor device (:func:`moestat.devices.resolve_device`).

    Attributes
    ----------
    params_, objective_, converged_, n_iter_, status_, grad_norm_, init_, n_features_in_
        As in :class:`~moestat.estimators.lse.LeastSquaresMoE`; ``n_iter_`` counts SGD steps
        (plus polish iterations).  SGD always runs its whole budget of ``epochs`` (it has no
        stopping rule of its own), and ``status_`` says where that budget left it: ``"grad_tol"``
        (converged: the full-batch gradient norm at the end is at most ``tol``), ``"max_epochs"``
        (stopped by the epoch budget with a larger gradient; not converged) or ``"nonfinite"``
        (failed; a non-finite replicate is left out of the polish so that it cannot spoil the
        others' line search).  ``grad_norm_`` holds the final gradient norms.

    Notes
    -----
    :meth:`for_scenario` uses ``scenario.box``, ``random_state`` and ``device``; SGD's budget is
    ``epochs``, so ``max_iter`` is not used.

    The minibatch order is drawn for the whole batch (``[R, n]`` per epoch), so a replicate's
    fit depends on how many replicates share its batch (not on their data).

    Examples
    --------
    >>> import numpy as np
    >>> from moestat import Gate, Expert, MoEModel
    >>> from moestat.estimators import random_init
    >>> model = MoEModel(Gate("perturbed", k_active=2), Expert("identity"))
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, (2, 200, 2)); Y = rng.standard_normal((2, 200))
    >>> est = SGDMoE(model, 3, epochs=2, random_state=0).fit(X, Y)
    >>> est.objective_.shape
    (2,)
    """

    def __init__(
        self,
        model: MoEModel,
        n_components: int,
        *,
        lr: float = SGD_DEFAULTS["lr"],
        batch_size: int = SGD_DEFAULTS["batch_size"],
        epochs: int = SGD_DEFAULTS["epochs"],
        lr_schedule: str = SGD_DEFAULTS["lr_schedule"],
        polish: str | None = None,
        tol: float = 1e-3,
        box: ParameterBox = ParameterBox(),
        random_state=None,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.lr = lr
        self.batch_size = batch_size
        self.epochs = epochs
        self.lr_schedule = lr_schedule
        self.polish = polish
        self.tol = tol
        self.box = box
        self.random_state = random_state
        self.device = device

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "SGDMoE":
        return cls(scenario.fit_model, scenario.k_fit, box=scenario.box, random_state=random_state, device=device)

    def _check_params(self) -> None:
        check_model(self.model)
        check_n_components(self.n_components, self.model)
        check_positive_float("lr", self.lr)
        check_positive_int("batch_size", self.batch_size)
        check_positive_int("epochs", self.epochs)
        check_positive_float("tol", self.tol)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown lr_schedule {self.lr_schedule!r}; expected one of {LR_SCHEDULES}")
        if self.polish not in POLISH_METHODS:
            raise ValueError(f"unknown polish {self.polish!r}; expected one of {POLISH_METHODS}")
        if not isinstance(self.box, ParameterBox):
            raise TypeError(f"box must be a ParameterBox, got {type(self.box).__name__}")
        resolve_device(self.device)
        self._rng()

    def fit(self, X, Y, init: MixingMeasure | None = None) -> "SGDMoE":
        """Fit every replicate.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]``)
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            Start, batched ``[R]`` or unbatched (shared); a random start per replicate (from
            ``random_state``) when not given.

        Returns
        -------
        self
        """
        Xt, Yt, dev = self._start_fit(X, Y)
        k = self.n_components
        R, n, d = Xt.shape
        rng = self._rng()
        G0 = random_starts(R, k, d, rng) if init is None else prepare_init(init, R, k, d)
        gen = torch.Generator(device="cpu").manual_seed(int(rng.integers(0, 2**63 - 1)))
        lower, upper = box_bounds(self.box, k, d, dev, torch.float64)
        theta = pack(G0.torch(device=dev), True).clone().requires_grad_(True)
        B = min(self.batch_size, n)
        steps_per_epoch = math.ceil(n / B)
        total = steps_per_epoch * self.epochs
        ridx = torch.arange(R, device=dev).unsqueeze(-1)
        step = 0
        for _ in range(self.epochs):
            # one independent permutation per replicate
            perm = torch.argsort(torch.rand(R, n, generator=gen), dim=1).to(dev)
            for s in range(0, n, B):
                idx = perm[:, s : s + B]
                xb, yb = Xt[ridx, idx], Yt[ridx, idx]
                beta0, beta1, eta = unpack(theta, k, d, d + 1, True)
                f = _predict(self.model, xb, beta0, beta1, eta)
                # sum over replicates of each replicate's minibatch mean: separable gradients
                loss = ((f - yb) ** 2).mean(-1).sum()
                (grad,) = torch.autograd.grad(loss, theta)
                with torch.no_grad():
                    theta -= _lr_at(self.lr, self.lr_schedule, step, total) * grad
                    theta.copy_(torch.maximum(torch.minimum(theta, upper), lower))
                step += 1
        n_iter = np.full(R, step, dtype=int)
        theta = theta.detach()
        if self.polish is not None:
            # A replicate whose loss is not finite stays out of the polish: L-BFGS minimises the
            # sum over replicates with one line search, which one NaN would spoil for all.
            with torch.no_grad():
                f = _predict(self.model, Xt, *unpack(theta, k, d, d + 1, True))
                ok = torch.isfinite(((f - Yt) ** 2).mean(-1)) & torch.isfinite(theta).all(-1)
            sel = None if bool(ok.all()) else torch.nonzero(ok).flatten()
            if sel is None or sel.numel():
                Xp, Yp, tp = (Xt, Yt, theta) if sel is None else (Xt[sel], Yt[sel], theta[sel])
                if self.polish == "lbfgs":
                    tp, it = self._lbfgs(Xp, Yp, tp, lower, upper)
                else:  # "lm"
                    res = levenberg_marquardt(self.model, Xp, Yp, tp, k, lower, upper, max_iter=200)
                    tp, it = res["theta"], res["n_iter"].cpu().numpy()
                if sel is None:
                    theta = tp
                    n_iter += it
                else:
                    theta = theta.clone()
                    theta[sel] = tp
                    n_iter[sel.cpu().numpy()] += it
        beta0, beta1, eta = unpack(theta, k, d, d + 1, True)
        G = MixingMeasure(beta0.cpu().numpy(), beta1.cpu().numpy(), eta.cpu().numpy())
        obj, gn = objective_and_grad(self.model, Xt, Yt, G, k)
        obj, gn = obj.cpu().numpy(), gn.cpu().numpy()
        finite = np.isfinite(obj) & np.isfinite(gn)
        converged = finite & (gn <= self.tol)
        status = ["nonfinite" if not fi else ("grad_tol" if c else "max_epochs") for fi, c in zip(finite, converged)]
        self._set_fit(G, np.where(finite, obj, np.nan), converged, n_iter, status, d)
        self.init_ = G0
        self.grad_norm_ = gn
        return self

    def _lbfgs(self, Xt, Yt, theta, lower, upper, max_iter: int = 200):
        """Full-batch L-BFGS on the summed objectives, then projection onto the box."""
        k, d = self.n_components, Xt.shape[-1]
        th = theta.clone().requires_grad_(True)
        opt = torch.optim.LBFGS(
            [th], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
        )

        def closure():
            opt.zero_grad()
            beta0, beta1, eta = unpack(th, k, d, d + 1, True)
            f = _predict(self.model, Xt, beta0, beta1, eta)
            loss = ((f - Yt) ** 2).mean(-1).sum()
            loss.backward()
            return loss

        opt.step(closure)
        it = int(opt.state[opt._params[0]].get("n_iter", 0))
        with torch.no_grad():
            out = torch.maximum(torch.minimum(th.detach(), upper), lower)
        return out, it
