"""Batched least-squares estimator of Nguyen et al. (2024), eqs. (3) and (10).

:class:`LeastSquaresMoE` minimises the mean squared residual of ``R`` replicates at once with the
batched Levenberg-Marquardt of :mod:`moestat.estimators.levenberg_marquardt` (free parameters,
analytic Jacobian and the vanilla cosine router's flat direction are described there), over
the residual kernel of :mod:`moestat.estimators.lse_kernel`.  For a sparse (Top-K) gate it
runs a continuation on the gate's temperature first (see ``topk_temperatures``; its rules,
:data:`STAGE_ENTRY`, :data:`STAGE_PIECE` and :data:`STAGE_NEAR`, are measured in
docs/guide/rates.rst, "The sparse gate fitted").  The
independent scipy baseline is :func:`moestat.estimators.reference.scipy_reference_fit`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.model.gates import safe_norm
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel
from moestat.estimators.base import MoEEstimator
from moestat.estimators.layout import bounds, pack, unpack
from moestat.estimators.levenberg_marquardt import levenberg_marquardt
from moestat.estimators.lse_kernel import Design, forward as kernel_forward, near_boundary
from moestat.estimators.starts import random_starts
from moestat.estimators.validation import (
    check_model,
    check_n_components,
    check_positive_float,
    check_positive_int,
    prepare_init,
)
from moestat.estimators import jacobians as jac
from moestat.model.protocol import ProtocolModel

__all__ = ["LeastSquaresMoE", "AUTO_TEMPERATURES", "STAGE_AGREE_RTOL", "STAGE_FTOL", "STAGE_MAX_ITER", "STAGE_ENTRY",
           "STAGE_NEAR", "STAGE_PIECE", "STAGE_HARD_RTOL", "ON_BOX_RTOL", "on_box"]

_INIT_NAMES = ("random",)
#: The ladder of the default (``"auto"``) continuation for sparse (Top-K) gates: temperatures of
#: the smoothed mask, tenfold apart.  Each replicate enters it at the first rung whose smoothing
#: reaches few of its samples (:data:`STAGE_ENTRY`) and leaves it after the first stage at whose
#: end the smoothing reaches (almost) none (:data:`STAGE_NEAR`, :data:`STAGE_AGREE_RTOL`), so the
#: smallest temperatures run only where samples still lie within ``T`` of a selection boundary.
AUTO_TEMPERATURES = (0.1, 0.01, 0.001, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
#: The smoothed and the hard objective agree at a stage's end when they differ by at most this
#: much relative to the hard one: every sample then lies so far from its selection boundary that
#: its smoothed mask is the hard one to rounding, and further stages would fit the hard objective.
#: Why the ladder must run this far: with ``T`` fixed, the smoothed objective at the truth
#: exceeds the hard one by about ``n T`` times a constant (the samples within ``T`` of a
#: boundary), so a schedule that stops at a fixed ``T`` leaves the selection boundary where the
#: smoothed problem puts it, and the hard stage cannot move it (its Jacobian does not see it).
STAGE_AGREE_RTOL = 1e-8
#: Stopping tolerance and iteration budget of each smoothed stage (the final hard stage uses
#: ftol/xtol/gtol/max_iter).  Why a stage is solved to ``1e-8`` rather than only moved: the hard
#: stage cannot move a selection boundary (its Jacobian, taken inside a selection region, does not
#: see it), so the boundaries stay where the last smoothed stage left them.  A stage stopped after
#: a fixed 30 iterations (relative decrease ``1e-6``) leaves them where the previous, wider
#: temperature put them: Top-2-of-3, gelu experts, d = 4, n = 2 000, 20 near-truth starts (scale
#: 0.05): 2 of 20 fits reached the truth's sum of squares (median gap -0.46); with every stage
#: solved to ``1e-8`` (at most 200 iterations), 18 of 20 (median gap +0.14).  A stage also ends,
#: per replicate, once it no longer moves the hard objective (:data:`STAGE_PIECE`).
STAGE_FTOL = 1e-8
STAGE_MAX_ITER = 200
#: A replicate enters the ladder at the first temperature ``T`` at which at most this fraction of
#: its samples lies within ``T`` of its selection boundary (at its start): a wider smoothing blends
#: the experts of so many samples that it fits another model (a soft mixture), and its stage
#: moves the fit away from the hard optimum.  Top-2-of-3 tanh, d = 4, n = 16 000, near-truth starts
#: (scale 0.05): 45 per cent of the samples lay within ``T = 0.1`` of their boundary, and the stage
#: at ``T = 0.1`` took the hard sum of squares from 58 to 140 above the truth's (median); about 6
#: per cent lay within ``T = 0.01``, where every such start entered (docs/guide/rates.rst, "The
#: sparse gate fitted", also for random starts).
STAGE_ENTRY = 0.25
#: A replicate leaves the ladder after the first stage at whose end at most this many samples lie
#: within ``T`` of their selection boundary.  Why: the smoothed optimum pins a few samples onto a
#: boundary (their blended mask lowers the smoothed objective below the hard one), and at every
#: smaller ``T`` Levenberg-Marquardt crawls to keep them there (the mask's curvature grows as
#: ``1/T^2``) while the hard objective no longer changes: Top-2-of-3 tanh, d = 4, n = 2 000 to
#: 16 000, once at most 2 samples were left within ``T`` the further stages (down to ``1e-8``)
#: changed the hard sum of squares by less than 0.01 and cost about half of all iterations.
STAGE_NEAR = 2
#: A stage runs in pieces of this many iterations; a replicate leaves the stage after a piece that
#: changed its hard (true Top-K) objective by at most :data:`STAGE_HARD_RTOL` relative, or that
#: stopped by the stage's own tolerance.  Why: the stage is there for the hard objective (through
#: the selection boundaries); once a piece no longer changes it, the remaining smoothed iterations
#: only move the samples pinned on a boundary (above).  Each piece restarts Levenberg-Marquardt's
#: damping, which is all that differs from one call with the whole budget.
STAGE_PIECE = 15
STAGE_HARD_RTOL = 1e-4
#: A free parameter within ``ON_BOX_RTOL * bound`` of its bound counts as on the box (``on_box_``):
#: the projection of Levenberg-Marquardt puts a clipped coordinate exactly on it, an interior
#: optimum is farther away than any rounding.
ON_BOX_RTOL = 1e-9


def on_box(theta: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, rtol: float = ON_BOX_RTOL) -> np.ndarray:
    """Which replicates have a free parameter on the box.

    Parameters
    ----------
    theta : Tensor, shape ``[R, P]``
        Free parameters per replicate.
    lower, upper : Tensor, shape ``[P]`` (or ``[R, P]``)
        The box's bounds on the free parameters (:func:`~moestat.estimators.layout.bounds`).
    rtol : float
        Tolerance relative to the bound's magnitude.

    Returns
    -------
    ndarray of bool, shape ``[R]``
    """
    lo, up = lower.to(theta.device, theta.dtype), upper.to(theta.device, theta.dtype)
    hit = (theta <= lo + rtol * lo.abs()) | (theta >= up - rtol * up.abs())
    return hit.any(-1).cpu().numpy()


def _keep_better(best: dict, cur: dict, G0: MixingMeasure) -> None:
    """Replace, in ``best`` (in place), every replicate whose objective ``cur`` (one more start,
    ``G0``) lowers; ties keep the earlier start."""
    better = cur["objective"] < best["objective"]
    for r in np.flatnonzero(better):
        best["theta"][r] = cur["theta"][r]
        for key in ("objective", "converged", "n_iter", "grad_norm"):
            best[key][r] = cur[key][r]
        best["status"][r] = cur["status"][r]
        best["init"][r] = G0[r]


def _hard_forward(kernel):
    """The forward pass of the hard gate: the analytic kernel's, or ``kernel``'s (a protocol model)."""
    return kernel_forward if kernel is None else kernel.forward


class LeastSquaresMoE(MoEEstimator):
    """Least-squares estimator (eqs. (3), (10)) of a Top-K MoE, batched over replicates.

    Parameters
    ----------
    model : MoEModel
        Gate and expert family used in the fit.  Its gate's ``k_active`` is the number of
        activated experts (pass ``K-bar`` for the over-specified setting, eq. (7)/(12)).
    n_components : int
        Number ``k`` of fitted atoms (``k = k*`` exact, ``k > k*`` over-specified).
    box : ParameterBox
        Compact parameter space (A.1); trial points are projected onto it.
    max_iter : int
        Maximum number of Levenberg-Marquardt iterations (trial steps) per replicate.
    tol : float
        Default for ``ftol`` and ``xtol``.
    ftol, xtol, gtol : float, optional
        Stopping tolerances (relative objective decrease, relative step, MINPACK scaled
        gradient); ``ftol = xtol = tol`` and ``gtol = 1e-10`` when not given.
    n_init : int
        Number of starts per replicate; the one with the smallest objective is kept.
    init : {"random"} or MixingMeasure
        Default start when :meth:`fit` gets none: ``"random"`` draws
        :func:`~moestat.estimators.starts.random_init` starts; a measure (unbatched or ``[R]``)
        is used as given.
    random_state : None, int, SeedSequence or Generator
        Seed of the random starts (see :class:`~moestat.estimators.base.MoEEstimator`).
    device : {"cpu", "cuda", "cuda:N", "auto"}
        Where the tensors live (:func:`moestat.devices.resolve_device`).
    topk_temperatures : "auto", None or sequence of float
        Continuation schedule for a sparse gate (``K < k``): the fit first runs on the smoothed
        Top-K gate (mask ``sigmoid((s_i - t(x)) / T)``) for each temperature ``T`` in turn, then
        on the exact hard gate, whose objective is the one reported.  ``"auto"`` walks the
        ladder :data:`AUTO_TEMPERATURES` (``0.1`` down to ``1e-8``), per replicate: it enters at
        the first ``T`` within which at most :data:`STAGE_ENTRY` of its samples lie of their
        selection boundary; each stage runs in pieces of :data:`STAGE_PIECE` iterations (each
        towards a relative decrease of :data:`STAGE_FTOL`, at most :data:`STAGE_MAX_ITER` in all)
        and ends after a piece that changed the hard objective by at most
        :data:`STAGE_HARD_RTOL` relative; it leaves the ladder once the smoothed and the hard
        objectives agree (:data:`STAGE_AGREE_RTOL`) or at most :data:`STAGE_NEAR` samples lie
        within ``T`` of a boundary (distances:
        :func:`~moestat.estimators.lse_kernel.near_boundary`); its hard stage starts from the
        start or from the continuation's end, whichever has the lower hard objective.  For a
        protocol model (autograd kernel) the entry and the near-boundary exit are not used (the
        ladder starts at its first rung and leaves on agreement).  A given sequence is run in
        full (each stage one call with the whole budget), beside a hard-gate fit from the start.
        ``None`` fits the hard gate only (a local method then stalls near its start, see the user
        guide).  Ignored for a dense gate.

    Attributes
    ----------
    params_ : MixingMeasure
        Fitted measures, batched ``[R]`` NumPy (also for unbatched input, ``R = 1``).
    objective_ : ndarray, shape ``[R]``
        ``(1/n) sum_i (Y_i - g(X_i))^2`` at the fit (NaN where the fit failed).
    converged_ : ndarray of bool, shape ``[R]``
    n_iter_ : ndarray of int, shape ``[R]``
        Levenberg-Marquardt trial steps, continuation stages included.
    status_ : list of str
        ``"gtol"``, ``"ftol"``, ``"xtol"`` (converged), ``"max_iter"``, ``"stalled"``,
        ``"nonfinite"`` (failed: the objective at the start is not finite).
    n_features_in_ : int
    grad_norm_ : ndarray, shape ``[R]``
        Euclidean norm of the gradient of ``objective_`` in the free parameters.
    init_ : MixingMeasure
        The start that produced each kept fit, batched ``[R]``.
    on_box_ : ndarray of bool, shape ``[R]``
        The kept fit has a free parameter on the boundary of ``box`` (relative tolerance
        :data:`ON_BOX_RTOL`).  Such a fit is the least-squares estimate *on* the compact space of
        (A.1), but where it lies depends on the box's size: the objective still falls outward
        (e.g. the over-specified perturbed cosine router of Figure 1(b), whose score saturates,
        ``beta1 / (||beta1|| + tau1) -> beta1 / ||beta1||``, as ``||beta1|| -> infinity``),
        and the local rate analysis of Theorems 4-6
        does not apply to it.

    Notes
    -----
    :meth:`for_scenario` uses ``scenario.box``, ``max_iter``, ``random_state`` and ``device``.

    Examples
    --------
    >>> import numpy as np
    >>> from moestat import Gate, Expert, MoEModel
    >>> from moestat.estimators import random_init
    >>> model = MoEModel(Gate("perturbed", tau=1.0, k_active=2), Expert("gelu"))
    >>> rng = np.random.default_rng(0)
    >>> truth = random_init(3, 2, rng, scale_router=1.0, scale_expert=1.0)
    >>> X = rng.uniform(-1, 1, size=(2, 300, 2))
    >>> Y = model.predict(X, truth).numpy() + 0.1 * rng.standard_normal((2, 300))
    >>> est = LeastSquaresMoE(model, 3, n_init=2, random_state=0).fit(X, Y)
    >>> est.objective_.shape, est.params_.batch_shape
    ((2,), (2,))
    """

    def __init__(
        self,
        model: MoEModel,
        n_components: int,
        *,
        box: ParameterBox = ParameterBox(),
        max_iter: int = 200,
        tol: float = 1e-12,
        ftol: float | None = None,
        xtol: float | None = None,
        gtol: float | None = None,
        n_init: int = 1,
        init: str | MixingMeasure = "random",
        random_state=None,
        device: str = "cpu",
        topk_temperatures="auto",
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.box = box
        self.max_iter = max_iter
        self.tol = tol
        self.ftol = ftol
        self.xtol = xtol
        self.gtol = gtol
        self.n_init = n_init
        self.init = init
        self.random_state = random_state
        self.device = device
        self.topk_temperatures = topk_temperatures

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "LeastSquaresMoE":
        return cls(
            scenario.fit_model, scenario.k_fit, box=scenario.box, max_iter=max_iter, random_state=random_state,
            device=device,
        )

    def _check_params(self) -> None:
        if not isinstance(self.model, ProtocolModel):  # a protocol model goes through autograd
            check_model(self.model)
        check_n_components(self.n_components, self.model)
        if not isinstance(self.box, ParameterBox):
            raise TypeError(f"box must be a ParameterBox, got {type(self.box).__name__}")
        check_positive_int("max_iter", self.max_iter)
        check_positive_int("n_init", self.n_init)
        check_positive_float("tol", self.tol)
        for name in ("ftol", "xtol", "gtol"):
            if getattr(self, name) is not None:
                check_positive_float(name, getattr(self, name))
        if isinstance(self.init, str):
            if self.init not in _INIT_NAMES:
                raise ValueError(f"unknown init {self.init!r}; expected one of {_INIT_NAMES} or a MixingMeasure")
        elif not isinstance(self.init, MixingMeasure):
            raise TypeError(f"init must be 'random' or a MixingMeasure, got {type(self.init).__name__}")
        resolve_device(self.device)
        self._rng()
        self._temperatures()

    def _temperatures(self) -> tuple[float, ...]:
        """The continuation schedule actually used (empty for a dense gate)."""
        t = self.topk_temperatures
        K = self.model.gate.k_active
        sparse = K is not None and K < self.n_components
        if isinstance(t, str):
            if t != "auto":
                raise ValueError(f"unknown topk_temperatures {t!r}; expected 'auto', None or a sequence of floats")
            return AUTO_TEMPERATURES if sparse else ()
        if t is None:
            return ()
        try:
            vals = tuple(float(v) for v in t)
        except (TypeError, ValueError):
            raise TypeError("topk_temperatures must be 'auto', None or a sequence of positive floats") from None
        for v in vals:
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"topk_temperatures must be positive finite numbers, got {t!r}")
        return vals if sparse else ()

    def _starts(self, R, d, init, rng):
        k = self.n_components
        starts = []
        if init is not None:
            starts.append(prepare_init(init, R, k, d))
        elif isinstance(self.init, MixingMeasure):
            starts.append(prepare_init(self.init, R, k, d, name="init"))
        while len(starts) < self.n_init:
            starts.append(random_starts(R, k, d, rng))
        return starts

    def _auto_stage(self, Xt, Yt, theta, T, bounds, gtol, data, kernel):
        """One stage of the ``"auto"`` ladder at temperature ``T``, for ``theta [R, P]``.

        Levenberg-Marquardt on the smoothed gate in pieces of :data:`STAGE_PIECE` iterations, at
        most :data:`STAGE_MAX_ITER` (and ``max_iter``) in all, each to ``ftol = xtol =``
        :data:`STAGE_FTOL`; a replicate leaves after a piece that stopped by those tolerances, was
        not finite, or changed its hard objective by at most :data:`STAGE_HARD_RTOL` relative.

        Returns
        -------
        theta : Tensor ``[R, P]`` (a non-finite piece keeps its start); F : Tensor ``[R]``, the
        smoothed half sum of squares at the end; n_iter : Tensor ``[R]``; ok : Tensor ``[R]`` bool,
        every piece finite; F_hard : Tensor ``[R]``, the hard half sum of squares at the end.
        """
        k = self.n_components
        lower, upper = bounds
        hard_forward = _hard_forward(kernel)
        R = theta.shape[0]
        theta = theta.clone()
        n_iter = torch.zeros(R, dtype=torch.long, device=theta.device)
        F = torch.full((R,), float("nan"), dtype=theta.dtype, device=theta.device)
        ok = torch.ones(R, dtype=torch.bool, device=theta.device)
        F_hard, _ = hard_forward(self.model, data, theta, k, None, keep=False)
        live = torch.arange(R, device=theta.device)
        budget = min(self.max_iter, STAGE_MAX_ITER)
        used = 0
        while live.numel() and used < budget:
            m = min(STAGE_PIECE, budget - used)
            every = live.numel() == R
            th_l = theta if every else theta[live]
            d_l = data if every else data.select(live)
            st = levenberg_marquardt(
                self.model, Xt if every else Xt[live], Yt if every else Yt[live], th_l, k, lower, upper,
                max_iter=m, ftol=STAGE_FTOL, xtol=STAGE_FTOL, gtol=gtol, temperature=T, data=d_l, kernel=kernel,
            )
            fin = torch.isfinite(st["F"])
            th_new = torch.where(fin.unsqueeze(-1), st["theta"], th_l)
            theta[live], F[live], ok[live] = th_new, st["F"], fin
            n_iter[live] += st["n_iter"]
            Fh, _ = hard_forward(self.model, d_l, th_new, k, None, keep=False)
            moved = (Fh - F_hard[live]).abs() > STAGE_HARD_RTOL * F_hard[live].abs()
            F_hard[live] = Fh
            going = torch.tensor([s_ == "max_iter" for s_ in st["status"]], dtype=torch.bool, device=theta.device)
            live = live[fin & going & moved]
            used += m
        return theta, F, n_iter, ok, F_hard

    def _fit_path(self, Xt, Yt, theta, path, bounds, tols, data, kernel) -> dict:
        """One start ``theta [R, P]`` fitted along ``path``: a Levenberg-Marquardt stage at each
        Top-K temperature of ``path`` (continuation; a non-finite stage keeps its start), then
        the hard-gate fit with the full budget and ``tols = (ftol, xtol, gtol)``.

        Returns ``theta [R, P]`` (on the host), per replicate ``objective`` (mean squared residual,
        ``inf`` if not finite), ``converged``, ``n_iter`` (all stages), ``status`` and
        ``grad_norm``.
        """
        R, n, _ = Xt.shape
        k = self.n_components
        lower, upper = bounds
        ftol, xtol, gtol = tols
        iters = torch.zeros(R, dtype=torch.long, device=theta.device)
        adaptive = isinstance(self.topk_temperatures, str)  # "auto": leave the ladder on agreement
        hard_forward = _hard_forward(kernel)
        work = torch.arange(R, device=theta.device)  # the replicates still on the ladder
        # "auto" with the analytic kernel: a replicate enters the ladder at its first rung that
        # smooths few of its samples (STAGE_ENTRY); until then it waits (None: every rung runs)
        waiting = torch.ones(R, dtype=torch.bool, device=theta.device) if adaptive and kernel is None else None
        start = theta
        for T in path:
            if waiting is not None and bool(waiting[work].any()):
                wait = work[waiting[work]]
                near = near_boundary(self.model, data.select(wait), theta[wait], k, T)
                waiting[wait[near.double() <= STAGE_ENTRY * n]] = False
            run = work if waiting is None else work[~waiting[work]]
            if not run.numel():
                continue
            every = run.numel() == R
            th_w = theta if every else theta[run]
            d_w = data if every else data.select(run)
            X_w, Y_w = (Xt, Yt) if every else (Xt[run], Yt[run])
            if adaptive:
                th_w, F_w, it_w, ok, Fh = self._auto_stage(X_w, Y_w, th_w, T, bounds, gtol, d_w, kernel)
            else:
                st = levenberg_marquardt(
                    self.model, X_w, Y_w, th_w, k, lower, upper, max_iter=min(self.max_iter, STAGE_MAX_ITER),
                    ftol=STAGE_FTOL, xtol=STAGE_FTOL, gtol=gtol, temperature=T, data=d_w, kernel=kernel,
                )
                ok = torch.isfinite(st["F"])
                th_w = torch.where(ok.unsqueeze(-1), st["theta"], th_w)
                it_w = st["n_iter"]
            theta = th_w if every else theta.index_copy(0, run, th_w)
            iters.index_add_(0, run, it_w)
            if adaptive:
                # Leave the ladder where the smoothed and the hard objective agree at the stage's
                # end (no sample within reach of the smoothing) or where at most STAGE_NEAR samples
                # lie within T of a boundary (the ones the smoothing pins there); a non-finite
                # stage also leaves (its start is kept).  The hard stage below takes over.
                done = ~ok | ((F_w - Fh).abs() <= STAGE_AGREE_RTOL * Fh.abs())
                if kernel is None:
                    done = done | (near_boundary(self.model, d_w, th_w, k, T) <= STAGE_NEAR)
                left = run[done]
                work = work[~torch.isin(work, left)]
                if not work.numel():
                    break
        if adaptive and path:
            # The hard stage starts from the start itself where the continuation did not lower
            # the hard objective (e.g. a start at the truth, whose selection is already right):
            # Levenberg-Marquardt accepts only decreases, so the fit then never ends worse than
            # its start -- what the separate hard-gate path gave, for one forward pass.
            F_start, _ = hard_forward(self.model, data, start, k, None, keep=False)
            F_cont, _ = hard_forward(self.model, data, theta, k, None, keep=False)
            theta = torch.where((F_start <= F_cont).unsqueeze(-1), start, theta)
        res = levenberg_marquardt(
            self.model, Xt, Yt, theta, k, lower, upper, max_iter=self.max_iter, ftol=ftol, xtol=xtol, gtol=gtol,
            data=data, kernel=kernel,
        )
        res["n_iter"] = res["n_iter"] + iters
        obj = (2.0 * res["F"] / n).cpu().numpy()
        obj = np.where(np.isfinite(obj), obj, np.inf)
        return {
            "theta": res["theta"].cpu(),
            "objective": obj,
            "converged": res["converged"].cpu().numpy(),
            "n_iter": res["n_iter"].cpu().numpy(),
            "status": list(res["status"]),
            "grad_norm": safe_norm(2.0 * res["g"] / n).cpu().numpy(),
        }

    def fit(self, X, Y, init: MixingMeasure | None = None) -> "LeastSquaresMoE":
        """Fit every replicate.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]``)
            Inputs.
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
            Responses.
        init : MixingMeasure, optional
            Start, batched ``[R]`` (or unbatched, shared), ``n_components`` atoms, last atom
            the reference.  With ``n_init > 1``, ``n_init - 1`` random starts are added and the
            best fit per replicate is kept.

        Returns
        -------
        self
        """
        Xt, Yt, dev = self._start_fit(X, Y)
        k = self.n_components
        R, n, d = Xt.shape
        rng = self._rng()
        # built-in gate x expert: the analytic kernel; any protocol model: torch.func Jacobians
        kernel = jac.AutogradKernel(self.model, d) if isinstance(self.model, ProtocolModel) else None
        if kernel is None:
            starts = self._starts(R, d, init, rng)
        else:
            starts = jac.protocol_starts(self, R, d, kernel.q, kernel.reference, init, rng)
        ftol = self.tol if self.ftol is None else self.ftol
        xtol = self.tol if self.xtol is None else self.xtol
        gtol = 1e-10 if self.gtol is None else self.gtol
        # the built-in kernel's linear experts: q = d + 1 with a reference atom (A.3)
        q, reference = (d + 1, True) if kernel is None else (kernel.q, kernel.reference)
        lower, upper = bounds(self.box, k, d, q, reference, Xt)
        if kernel is None:
            data = Design.build(self.model, Xt, Yt, n_components=k)  # features once per fit
        else:
            data = kernel.build(self.model, Xt, Yt, n_components=k)
        temps = self._temperatures()
        best = None
        # With a sparse gate a start needs (a) continuation on the Top-K temperature -- the hard
        # mask is piecewise constant in beta1, so its Jacobian misses the first-order effect of
        # moving the selection boundary and a local method stalls near its start -- and (b) the
        # hard gate from the start itself, which wins when the start already has the right
        # selection boundaries: it accepts only decreases of the hard objective (the Top-K of
        # eq. (9) as the data see it), so a fit started at the truth never ends worse than the
        # truth, which the continuation alone does not guarantee (its smoothed problems move the
        # start).  A given schedule fits both paths and keeps, per replicate, the lower hard
        # objective; the auto ladder fits one path whose hard stage starts from the better of
        # the start and the continuation's end (_fit_path): (b)'s guarantee without a second fit.
        if not temps:
            paths = [()]
        elif isinstance(self.topk_temperatures, str):  # "auto"
            paths = [temps]
        else:
            paths = [temps, ()]
        candidates = [(G0, path) for G0 in starts for path in paths]
        for G0, path in candidates:
            cur = self._fit_path(Xt, Yt, pack(G0.torch(device=dev), reference), path, (lower, upper), (ftol, xtol, gtol),
                                 data, kernel)
            if best is None:
                best = cur
                best["init"] = [G0[r] for r in range(R)]
                continue
            _keep_better(best, cur, G0)
        beta0, beta1, eta = unpack(best["theta"], k, d, q, reference)
        self._set_fit(
            MixingMeasure(beta0.numpy(), beta1.numpy(), eta.numpy()),
            best["objective"], best["converged"], best["n_iter"], best["status"], d,
        )
        self.grad_norm_ = best["grad_norm"]
        self.init_ = MixingMeasure.stack(best["init"])
        self.on_box_ = on_box(best["theta"], lower, upper)
        return self
