"""Batched least-squares estimator (seed 004 eqs. (3) and (10)) by Levenberg-Marquardt.

``R`` independent replicates ``(X_r, Y_r)`` are fitted in one call: every tensor carries a
leading replicate axis, every replicate has its own damping, its own accept/reject decision and
its own convergence test, and a replicate that has converged leaves the working set (the
arrays are compacted, so later iterations touch only the replicates still iterating).  The
residual, ``J^T J`` and ``J^T r`` come from :mod:`moestat.estimators.lse_kernel`; a trial point
costs one forward pass, ``J^T J`` is formed only where the step is accepted.

Free parameters
---------------
Per replicate the parameter vector ``theta`` (length ``P``) is::

    beta0_1..beta0_{k-1} | beta1_1..beta1_{k-1} (flattened, (k-1) d) | eta_1..eta_k (k (d+1))

The last atom is the reference expert of (A.3): its router ``(beta0, beta1) = (0, 0)`` is held
fixed, its expert parameter ``eta_k`` is free.  So ``P = (k-1)(d+1) + k(d+1)``.

Analytic Jacobian
-----------------
With ``w`` the Top-K softmax weights, ``h_i = phi(z_i)``, ``z_i = a_i^T x + b_i`` and
``g = sum_i w_i h_i`` (eq. (2)/(9)); the Top-K set depends on ``beta1`` only through a
piecewise-constant mask, so inside a selection region::

    dg/dbeta0_i = w_i (h_i - g)
    dg/dbeta1_i = w_i (h_i - g) ds_i/dbeta1_i
    dg/da_i     = w_i phi'(z_i) x,        dg/db_i = w_i phi'(z_i)

with ``ds/dbeta1 = x`` (linear) and, for ``s = beta1^T x / ((|beta1|+t1)(|x|+t2))``,
``ds/dbeta1 = x / ((|b|+t1)(|x|+t2)) - (b^T x) b / (|b| (|b|+t1)^2 (|x|+t2))``; the vanilla
cosine router is ``t1 = t2 = 0``.  With ``xs = x / (|x| + t2)`` (fixed by the data, computed
once per fit) this is ``ds/dbeta1 = xs / (|b|+t1) - s b / (|b| (|b|+t1))``, the form the kernel
uses.  The smoothed Top-K gate of the continuation adds the derivative of its mask (see
:func:`predict_and_jacobian`).  ``tests/test_estimators_jacobian.py`` checks all of this against
``torch.autograd`` (the smoothed gate against an independent sample-major implementation).

The vanilla cosine router's flat direction
------------------------------------------
By PDE (4), ``beta1_i^T dg/dbeta1_i = 0``: ``J^T J`` is exactly singular along each radial
direction and the data carry no information about ``||beta1_i||``.  Two choices keep the step
finite and the radius where it started: (i) the damping is isotropic (``lam I``), so the
damped step stays orthogonal to ``beta1_i``, and
(ii) after each step each ``beta1_i`` is rescaled to its previous norm, which leaves ``g`` -
hence the objective - exactly unchanged (degree-0 homogeneity, Lemma 4).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from moestat.model.gates import gate_weights, safe_norm
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel
from moestat.estimators.starts import random_init
from moestat.estimators.lse_kernel import Design, gauss_newton, n_free_params, residual_and_jacobian, score_taus, unpack_params
from moestat.estimators.lse_kernel import evaluate as kernel_evaluate
from moestat.estimators.lse_kernel import forward as kernel_forward

__all__ = [
    "LeastSquaresMoE",
    "n_free_params",
    "pack_params",
    "unpack_params",
    "predict_and_jacobian",
    "resolve_device",
    "DEVICES",
    "scipy_reference_fit",
]

DEVICES = ("cpu", "cuda", "auto")
_INIT_NAMES = ("random",)
#: Default continuation schedule for sparse (Top-K) gates: temperatures of the smoothed mask.
AUTO_TEMPERATURES = (0.1, 0.01, 0.001)
#: Stopping tolerance and iteration cap of the smoothed stages (they only need to carry the
#: fit across the selection boundaries; the final hard stage uses ftol/xtol/gtol/max_iter).
_STAGE_FTOL = 1e-6
_STAGE_MAX_ITER = 30


# ----------------------------------------------------------------------------------------------
# parameter packing
# ----------------------------------------------------------------------------------------------
def pack_params(G: MixingMeasure) -> torch.Tensor:
    """Free-parameter vectors ``[R, P]`` of a batched torch measure ``G`` ``[R]``.

    The reference atom's router (last ``beta0``/``beta1``) is not included.
    """
    R = G.beta0.shape[0]
    return torch.cat(
        [G.beta0[:, :-1], G.beta1[:, :-1, :].reshape(R, -1), G.eta.reshape(R, -1)], dim=1
    )


def _box_bounds(box: ParameterBox, k: int, d: int, device, dtype):
    """Lower/upper bound vectors ``[P]`` for the free parameters."""
    ub = torch.cat(
        [
            torch.full(((k - 1),), box.beta0, dtype=dtype, device=device),
            torch.full(((k - 1) * d,), box.beta1, dtype=dtype, device=device),
            torch.full((k * (d + 1),), box.eta, dtype=dtype, device=device),
        ]
    )
    return -ub, ub


# ----------------------------------------------------------------------------------------------
# model and Jacobian
# ----------------------------------------------------------------------------------------------
def radial_invariant(model: MoEModel) -> bool:
    """True when ``g`` does not depend on ``||beta1_i||`` (cosine score, ``tau1 = 0``; PDE (4))."""
    tau = score_taus(model)
    return tau is not None and tau[0] == 0.0


def _predict_parts(model: MoEModel, X: torch.Tensor, beta0, beta1, eta):
    """Sample-major forward pass through the shared gate/expert vocabulary (used by SGD)."""
    w = gate_weights(model.gate.scores(X, beta1), beta0, model.gate.k_active)
    z = model.expert.preactivation(X, eta)
    h = model.expert.phi(z)
    return w, z, h, (w * h).sum(-1)


def predict_and_jacobian(
    model: MoEModel,
    X: torch.Tensor,
    theta: torch.Tensor,
    n_components: int,
    jacobian: bool = True,
    temperature: float | None = None,
):
    """Regression function and its analytic Jacobian in the free parameters.

    Parameters
    ----------
    model : MoEModel
        Gate (kind, tau, K) and expert family.
    X : Tensor, shape ``[R, n, d]``
        Inputs.
    theta : Tensor, shape ``[R, P]``
        Free parameters (see :func:`pack_params`).
    n_components : int
        Number of atoms ``k``.
    jacobian : bool
        If False only the prediction is computed.
    temperature : float, optional
        If given (and the gate is sparse, ``K < k``), use the smoothed Top-K gate of
        temperature ``T`` (mask ``sigmoid((s_i - t(x)) / T)``, ``t(x)`` the midpoint of the K-th
        and (K+1)-th largest scores) instead of the hard one.

    Returns
    -------
    f : Tensor, shape ``[R, n]``
        ``g_G(x)`` for each replicate.
    J : Tensor, shape ``[R, n, P]`` or None
        ``dg/dtheta`` (formulas in the module docstring), a transposed view of the
        ``J^T [R, P, n]`` that :mod:`~moestat.estimators.lse_kernel` builds.
    """
    R, n, _ = X.shape
    # with Y = 0 the residual is the prediction itself
    data = Design.build(model, X, X.new_zeros(R, n), chunk=n)
    return residual_and_jacobian(model, data, theta, n_components, temperature, jacobian)


def _free_mask(theta, g, lower, upper, rtol: float = 1e-12):
    """Coordinates free to move: not at a bound that the descent direction ``-g`` points past."""
    span = (upper - lower) * rtol
    at_low = (theta <= lower + span) & (g > 0)
    at_up = (theta >= upper - span) & (g < 0)
    return ~(at_low | at_up)


def _scaled_gradient(A, g, F):
    """MINPACK's gtol measure: ``max_j |J_j^T r| / (||J_j|| ||r||)`` (cosine of the angle)."""
    colnorm = torch.sqrt(torch.clamp(torch.diagonal(A, dim1=-2, dim2=-1), min=0.0))
    rnorm = torch.sqrt(2.0 * torch.clamp(F, min=0.0)).unsqueeze(-1)
    den = colnorm * rnorm
    val = torch.where(den > 0, g.abs() / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(g))
    return val.amax(-1)


def _retract_radius(theta_new, theta_old, k, d):
    """Rescale each free ``beta1_i`` to its previous norm (objective unchanged, PDE (4))."""
    if k < 2:
        return theta_new
    i0, i1 = k - 1, (k - 1) * (d + 1)
    R = theta_new.shape[0]
    bn = theta_new[:, i0:i1].reshape(R, k - 1, d)
    bo = theta_old[:, i0:i1].reshape(R, k - 1, d)
    nn_ = safe_norm(bn, keepdim=True)
    no = safe_norm(bo, keepdim=True)
    fac = torch.where(nn_ > 0, no / torch.where(nn_ > 0, nn_, torch.ones_like(nn_)), torch.ones_like(nn_))
    out = theta_new.clone()
    out[:, i0:i1] = (bn * fac).reshape(R, -1)
    return out


def levenberg_marquardt(
    model: MoEModel,
    X: torch.Tensor,
    Y: torch.Tensor,
    theta0: torch.Tensor,
    n_components: int,
    lower: torch.Tensor,
    upper: torch.Tensor,
    *,
    max_iter: int = 200,
    ftol: float = 1e-12,
    xtol: float = 1e-12,
    gtol: float = 1e-10,
    chunk: int | None = None,
    temperature: float | None = None,
    data: Design | None = None,
) -> dict[str, Any]:
    """Batched, box-projected Levenberg-Marquardt on ``F(theta) = 0.5 sum_i r_i^2``.

    Per replicate: damped Gauss-Newton steps ``(J^T J + lam I) delta = -J^T r``, Nielsen's
    damping update,
    projection of the trial point onto the box, and scipy-like stopping rules: ``ftol`` (accepted
    step with relative decrease ``< ftol`` and gain ratio ``> 0.25``), ``xtol``
    (``||delta|| <= xtol (xtol + ||theta||)``) and ``gtol`` (MINPACK's scaled gradient).

    A trial point costs one forward pass; ``J^T J`` and ``J^T r`` are formed only for the
    replicates whose trial step is accepted (:mod:`~moestat.estimators.lse_kernel`).

    ``data`` may pass the :class:`~moestat.estimators.lse_kernel.Design` of ``(X, Y)`` built
    once for several calls (continuation stages).

    Returns
    -------
    dict
        ``theta [R, P]``, ``F [R]``, ``g [R, P]`` (``J^T r``), ``n_iter [R]``, ``status``
        (list of str), ``converged [R]`` bool.
    """
    R, n, d = X.shape
    k = n_components
    P = theta0.shape[1]
    if data is None:
        data = Design.build(model, X, Y, chunk, n_components=k)
    # radial flat direction (PDE (4)) whenever the score is degree-0 homogeneous in beta1:
    # the vanilla cosine router, or a "perturbed" gate with tau1 = 0
    cosine = radial_invariant(model)
    span = (upper - lower) * 1e-12
    lo_in, up_in = lower + span, upper - span
    theta = torch.clamp(theta0.clone(), lower, upper)
    F, A, g = kernel_evaluate(model, data, theta, k, True, temperature)
    # results, written back when a replicate stops
    out_theta, out_F, out_g = theta.clone(), F.clone(), g.clone()
    status = ["max_iter"] * R
    converged = [False] * R
    n_iter = [0] * R
    bad = ~(torch.isfinite(F) & torch.isfinite(A).flatten(1).all(1) & torch.isfinite(g).all(1))
    sg0 = _scaled_gradient(A, g * _free_mask(theta, g, lower, upper), F).tolist()
    keep = []
    for r, (b_r, s_r) in enumerate(zip(bad.tolist(), sg0)):
        if b_r:
            status[r] = "nonfinite"
        elif s_r <= gtol:  # a point that is already stationary needs no step
            status[r], converged[r] = "gtol", True
        else:
            keep.append(r)
    # Working set: only the replicates still iterating, compacted whenever one stops, so an
    # iteration touches no finished replicate (no gathers/scatters per iteration).
    idx = keep
    if len(idx) < R:
        sel = torch.tensor(idx, dtype=torch.long, device=X.device)
        theta, F, A, g, data = theta[sel], F[sel], A[sel], g[sel], data.select(sel)
    # Plain Levenberg damping (D = I, the analogue of scipy trf's default x_scale=1): in our
    # runs it followed scipy's trf more closely than Marquardt's diag(J^T J) scaling, and it is
    # isotropic inside every beta1 block, so for the cosine router the damped step stays
    # orthogonal to beta1 (PDE (4)).
    lam = torch.full((len(idx),), 1e-3, dtype=X.dtype, device=X.device)
    nu = torch.full((len(idx),), 2.0, dtype=X.dtype, device=X.device)
    eye = torch.eye(P, dtype=X.dtype, device=X.device)
    for _ in range(max_iter):
        if not idx:
            break
        # active set of the box: a coordinate at a bound whose descent direction points out of
        # the box is held fixed (projecting a full step instead distorts it and stalls the
        # iteration); skipped when no coordinate is at a bound (the usual case)
        M = A + lam[:, None, None] * eye
        rhs = -g
        boxed = bool(((theta <= lo_in) | (theta >= up_in)).any())
        if boxed:
            free = _free_mask(theta, g, lower, upper).to(X.dtype)
            M = M * free.unsqueeze(-1) * free.unsqueeze(-2) + torch.diag_embed(1.0 - free)
            rhs = rhs * free
        L, info = torch.linalg.cholesky_ex(M)
        okc = info == 0
        chol_ok = bool(okc.all())
        if not chol_ok:
            L = torch.where(okc[:, None, None], L, eye)
        delta = torch.cholesky_solve(rhs.unsqueeze(-1), L).squeeze(-1)
        if not chol_ok:
            delta = delta * okc.unsqueeze(-1)
        trial = theta + delta
        if cosine:
            trial = _retract_radius(trial, theta, k, d)
        trial = torch.clamp(trial, lower, upper)
        delta = trial - theta
        # predicted decrease of the Gauss-Newton model: -(g.delta + delta'A delta / 2); written
        # as an elementwise reduction because a batched mat-vec rounds differently for R = 1
        Ad = (A * delta.unsqueeze(-2)).sum(-1)
        pred = -((g * delta).sum(-1) + 0.5 * (delta * Ad).sum(-1))
        Ft, cache = kernel_forward(model, data, trial, k, temperature)
        actual = F - Ft
        ppos = pred > 0
        rho = torch.where(ppos, actual / torch.where(ppos, pred, 1.0), -1.0)
        accept = okc & torch.isfinite(Ft) & (actual > 0) & ppos
        # J^T J and J^T r only where the step is taken; a non-finite one undoes the acceptance
        acc = torch.nonzero(accept).flatten()
        m = acc.numel()
        if m:
            allacc = m == len(idx)
            At, gt = gauss_newton(
                model, data if allacc else data.select(acc), trial if allacc else trial[acc], k,
                None if cache is None else (cache if allacc else cache.select(acc)), temperature,
            )
            fin = torch.isfinite(At).flatten(1).all(1) & torch.isfinite(gt).all(1)
            if not bool(fin.all()):
                accept[acc[~fin]] = False
                At, gt, acc = At[fin], gt[fin], acc[fin]
                allacc = False
            if allacc:
                theta_new, F_new, A_new, g_new = trial, Ft, At, gt
            else:
                theta_new, F_new, A_new, g_new = theta.clone(), F.clone(), A.clone(), g.clone()
                theta_new[acc], F_new[acc], A_new[acc], g_new[acc] = trial[acc], Ft[acc], At, gt
        else:
            theta_new, F_new, A_new, g_new = theta, F, A, g
        # Nielsen's damping update
        lam_acc = lam * torch.clamp(1.0 - (2.0 * rho - 1.0) ** 3, min=1.0 / 3.0)
        lam = torch.clamp(torch.where(accept, lam_acc, lam * nu), max=1e30)
        nu = torch.clamp(torch.where(accept, 2.0, 2.0 * nu), max=1e30)
        # stopping rules, per replicate (xtol on the proposed step, as scipy and MINPACK do)
        step_small = okc & (safe_norm(delta) <= xtol * (xtol + safe_norm(theta)))
        f_small = accept & (actual <= ftol * F) & (rho > 0.25)
        theta, F, A, g = theta_new, F_new, A_new, g_new
        g_small = _scaled_gradient(A, g * _free_mask(theta, g, lower, upper), F) <= gtol
        stalled = (lam >= 1e30) & ~accept
        flags = torch.stack([g_small, f_small, step_small, stalled]).tolist()
        stay = []
        for j, r in enumerate(idx):
            n_iter[r] += 1
            if flags[0][j]:
                status[r], converged[r] = "gtol", True
            elif flags[1][j]:
                status[r], converged[r] = "ftol", True
            elif flags[2][j]:
                status[r], converged[r] = "xtol", True
            elif flags[3][j]:
                status[r] = "stalled"
            else:
                stay.append(j)
        if len(stay) < len(idx):
            kept = set(stay)
            gone = [j for j in range(len(idx)) if j not in kept]
            gsel = torch.tensor(gone, dtype=torch.long, device=X.device)
            osel = torch.tensor([idx[j] for j in gone], dtype=torch.long, device=X.device)
            out_theta[osel], out_F[osel], out_g[osel] = theta[gsel], F[gsel], g[gsel]
            idx = [idx[j] for j in stay]
            if idx:
                ssel = torch.tensor(stay, dtype=torch.long, device=X.device)
                theta, F, A, g, lam, nu = theta[ssel], F[ssel], A[ssel], g[ssel], lam[ssel], nu[ssel]
                data = data.select(ssel)
    if idx:  # hit max_iter
        osel = torch.tensor(idx, dtype=torch.long, device=X.device)
        out_theta[osel], out_F[osel], out_g[osel] = theta, F, g
    return {
        "theta": out_theta,
        "F": out_F,
        "g": out_g,
        "n_iter": torch.tensor(n_iter, dtype=torch.long, device=X.device),
        "status": status,
        "converged": torch.tensor(converged, dtype=torch.bool, device=X.device),
    }


# ----------------------------------------------------------------------------------------------
# validation helpers shared by the estimators
# ----------------------------------------------------------------------------------------------
def resolve_device(device: str) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"auto"`` (cuda when available) as a :class:`torch.device`."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but CUDA is not available; use 'cpu' or 'auto'")
    return torch.device(device)


def check_model(model) -> MoEModel:
    if not isinstance(model, MoEModel):
        raise TypeError(f"model must be a moestat.MoEModel, got {type(model).__name__}")
    return model


def check_n_components(n_components, model: MoEModel) -> int:
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    K = model.gate.k_active
    if K is not None and K > n_components:
        raise ValueError(
            f"n_components ({int(n_components)}) must be >= the model's number of activated "
            f"experts K = {K}"
        )
    return int(n_components)


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive_float(name: str, value, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {value!r}")
    return v


def prepare_data(X, Y, n_components: int, device: torch.device):
    """Validate and convert ``X [R, n, d]`` / ``Y [R, n]`` (or unbatched) to float64 tensors."""
    out = []
    for name, a in (("X", X), ("Y", Y)):
        if isinstance(a, torch.Tensor):
            t = a.detach().to(device=device, dtype=torch.float64)
        else:
            try:
                arr = np.asarray(a, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"{name} must be a numeric array or tensor, got {type(a).__name__}") from None
            t = torch.as_tensor(arr, dtype=torch.float64, device=device)
        out.append(t)
    Xt, Yt = out
    if Xt.ndim == 2 and Yt.ndim == 1:
        Xt, Yt = Xt.unsqueeze(0), Yt.unsqueeze(0)
    if Xt.ndim != 3:
        raise ValueError(f"X must have shape [R, n, d] or [n, d], got shape {tuple(Xt.shape)}")
    if Yt.ndim != 2:
        raise ValueError(f"Y must have shape [R, n] (or [n] with an unbatched X), got shape {tuple(Yt.shape)}")
    if tuple(Yt.shape) != tuple(Xt.shape[:2]):
        raise ValueError(f"Y has shape {tuple(Yt.shape)} but X has shape {tuple(Xt.shape)}; Y must be [R, n]")
    R, n, d = Xt.shape
    if R < 1 or d < 1:
        raise ValueError(f"X must have at least one replicate and one feature, got shape {tuple(Xt.shape)}")
    P = n_free_params(n_components, d)
    if n < P:
        raise ValueError(
            f"X has n = {n} samples per replicate, fewer than the {P} free parameters of a "
            f"{n_components}-atom fit in dimension {d}"
        )
    if not bool(torch.isfinite(Xt).all()):
        raise ValueError("X contains non-finite values (NaN or inf)")
    if not bool(torch.isfinite(Yt).all()):
        raise ValueError("Y contains non-finite values (NaN or inf)")
    return Xt, Yt


def prepare_init(init, R: int, n_components: int, d: int, name: str = "init") -> MixingMeasure:
    """Validate a user start: a (batched ``[R]`` or unbatched) measure; returns numpy ``[R]``."""
    if not isinstance(init, MixingMeasure):
        raise TypeError(f"{name} must be a MixingMeasure, got {type(init).__name__}")
    G = init.numpy()
    if G.batch_shape == ():
        G = G.expand(R)
    if len(G.batch_shape) != 1 or G.batch_shape[0] != R:
        raise ValueError(f"{name} must be unbatched or batched [R] with R = {R}, got batch shape {G.batch_shape}")
    if G.n_atoms != n_components:
        raise ValueError(f"{name} has {G.n_atoms} atoms but n_components = {n_components}")
    if G.dim != d or G.eta_dim != d + 1:
        raise ValueError(f"{name} has dimension d = {G.dim} (eta {G.eta_dim}) but X has d = {d}")
    if not (np.isfinite(G.beta0).all() and np.isfinite(G.beta1).all() and np.isfinite(G.eta).all()):
        raise ValueError(f"{name} contains non-finite values")
    if not G.satisfies_reference_convention(atol=0.0):
        raise ValueError(f"{name} must have the reference convention: last atom beta0 = 0 and beta1 = 0 (A.3)")
    return G


def as_rng(random_state) -> np.random.Generator:
    """``None``/int/SeedSequence/Generator to a :class:`numpy.random.Generator`."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, (int, np.integer, np.random.SeedSequence)):
        if isinstance(random_state, bool):
            raise TypeError("random_state must be None, an int, a SeedSequence or a Generator, got bool")
        return np.random.default_rng(random_state)
    raise TypeError(
        f"random_state must be None, an int, a SeedSequence or a Generator, got {type(random_state).__name__}"
    )


def random_starts(R: int, n_components: int, d: int, rng: np.random.Generator) -> MixingMeasure:
    """``R`` independent :func:`~moestat.estimators.starts.random_init` draws, batched."""
    return MixingMeasure.stack([random_init(n_components, d, rng) for _ in range(R)])


def objective_and_grad(model, X, Y, G: MixingMeasure, n_components: int):
    """Mean squared residual ``[R]`` and Euclidean norm of its gradient ``[R]`` at ``G``."""
    theta = pack_params(G.torch(device=X.device))
    data = Design.build(model, X, Y, n_components=n_components)
    F, _, g = kernel_evaluate(model, data, theta, n_components, True)
    n = X.shape[1]
    return (2.0 * F / n), safe_norm(2.0 * g / n)


# ----------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------
class LeastSquaresMoE:
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
        Seed of the random starts.
    device : {"cpu", "cuda", "auto"}
        Where the tensors live (``"auto"``: cuda when available).
    topk_temperatures : "auto", None or sequence of float
        Continuation schedule for a sparse gate (``K < k``): the fit first runs on the smoothed
        Top-K gate (mask ``sigmoid((s_i - t(x)) / T)``) for each temperature ``T`` in turn, then
        on the exact hard gate, whose objective is the one reported.  ``"auto"`` is
        ``(0.1, 0.01, 0.001)`` (at most 30 iterations each); ``None`` fits the hard gate only (a local method
        then stalls near its start, see the user guide).  Ignored for a dense gate.

    Attributes
    ----------
    params_ : MixingMeasure
        Fitted measures, batched ``[R]`` NumPy (also for unbatched input, ``R = 1``).
    objective_ : ndarray, shape ``[R]``
        ``(1/n) sum_i (Y_i - g(X_i))^2`` at the fit.
    converged_ : ndarray of bool, shape ``[R]``
    n_iter_ : ndarray of int, shape ``[R]``
    status_ : list of str
        ``"gtol"``, ``"ftol"``, ``"xtol"`` (converged), ``"max_iter"``, ``"stalled"``,
        ``"nonfinite"``.
    grad_norm_ : ndarray, shape ``[R]``
        Euclidean norm of the gradient of ``objective_`` in the free parameters.
    init_ : MixingMeasure
        The start that produced each kept fit, batched ``[R]``.

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
        self._validate_params()

    def _validate_params(self) -> None:
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
        as_rng(self.random_state)
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
        self._validate_params()
        dev = resolve_device(self.device)
        k = self.n_components
        Xt, Yt = prepare_data(X, Y, k, dev)
        R, n, d = Xt.shape
        rng = as_rng(self.random_state)
        starts = self._starts(R, d, init, rng)
        ftol = self.tol if self.ftol is None else self.ftol
        xtol = self.tol if self.xtol is None else self.xtol
        gtol = 1e-10 if self.gtol is None else self.gtol
        lower, upper = _box_bounds(self.box, k, d, dev, torch.float64)
        temps = self._temperatures()
        best = None
        # With a sparse gate every start is fitted along two paths, kept per replicate by the
        # hard objective: (a) continuation on the Top-K temperature -- the hard mask is
        # piecewise constant in beta1, so its Jacobian misses the first-order effect of moving
        # the selection boundary and a local method stalls near its start -- and (b) the hard
        # gate directly, which wins when the start already has the right selection boundaries.
        paths = [temps, ()] if temps else [()]
        candidates = [(G0, path) for G0 in starts for path in paths]
        data = Design.build(self.model, Xt, Yt, n_components=k)  # features once per fit
        for G0, path in candidates:
            theta = pack_params(G0.torch(device=dev))
            iters = torch.zeros(R, dtype=torch.long, device=dev)
            for T in path:
                st = levenberg_marquardt(
                    self.model, Xt, Yt, theta, k, lower, upper, max_iter=min(self.max_iter, _STAGE_MAX_ITER),
                    ftol=_STAGE_FTOL, xtol=_STAGE_FTOL, gtol=gtol, temperature=T, data=data,
                )
                ok = torch.isfinite(st["F"]).unsqueeze(-1)
                theta = torch.where(ok, st["theta"], theta)
                iters += st["n_iter"]
            res = levenberg_marquardt(
                self.model, Xt, Yt, theta, k, lower, upper, max_iter=self.max_iter, ftol=ftol, xtol=xtol, gtol=gtol,
                data=data,
            )
            res["n_iter"] = res["n_iter"] + iters
            obj = (2.0 * res["F"] / n).cpu().numpy()
            obj = np.where(np.isfinite(obj), obj, np.inf)
            cur = {
                "theta": res["theta"].cpu(),
                "objective": obj,
                "converged": res["converged"].cpu().numpy(),
                "n_iter": res["n_iter"].cpu().numpy(),
                "status": list(res["status"]),
                "grad_norm": safe_norm(2.0 * res["g"] / n).cpu().numpy(),
                "init": G0,
            }
            if best is None:
                best = cur
                best["init"] = [G0[r] for r in range(R)]
                continue
            better = cur["objective"] < best["objective"]
            for r in np.flatnonzero(better):
                best["theta"][r] = cur["theta"][r]
                for key in ("objective", "converged", "n_iter", "grad_norm"):
                    best[key][r] = cur[key][r]
                best["status"][r] = cur["status"][r]
                best["init"][r] = G0[r]
        beta0, beta1, eta = unpack_params(best["theta"], k, d)
        self.params_ = MixingMeasure(beta0.numpy(), beta1.numpy(), eta.numpy())
        obj = best["objective"].copy()
        obj[~np.isfinite(obj)] = np.nan
        self.objective_ = obj
        self.converged_ = best["converged"].astype(bool)
        self.n_iter_ = best["n_iter"].astype(int)
        self.status_ = best["status"]
        self.grad_norm_ = best["grad_norm"]
        self.init_ = MixingMeasure.stack(best["init"])
        self.n_features_in_ = d
        return self

    def predict(self, X) -> np.ndarray:
        """``g`` of the fitted measures at ``X [R, n, d]``; returns ``[R, n]``."""
        if not hasattr(self, "params_"):
            raise ValueError("this estimator is not fitted yet; call fit first")
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float64)) if not isinstance(X, torch.Tensor) else X.double()
        if Xt.ndim == 2:
            Xt = Xt.unsqueeze(0)
        return self.model.predict(Xt, self.params_).numpy()


# ----------------------------------------------------------------------------------------------
# independent reference: scipy.optimize.least_squares, one replicate at a time
# ----------------------------------------------------------------------------------------------
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
    same residual ``g(X) - Y``, the same analytic Jacobian (:func:`predict_and_jacobian`,
    checked against autograd), the same start, the same box (``method="trf"``; ``"lm"`` ignores
    the box) and, if ``temperatures`` is given, the same continuation stages (each stage with
    ``ftol = xtol = 1e-6`` and at most 30 Jacobian evaluations, as in
    :class:`LeastSquaresMoE`).

    Parameters
    ----------
    model, X, Y, init, n_components
        As for :meth:`LeastSquaresMoE.fit` (``init`` batched ``[R]`` or unbatched).
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
    th0 = pack_params(G0.torch()).numpy()
    lo, up = _box_bounds(box, k, d, None, torch.float64)
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
                kw = dict(ftol=_STAGE_FTOL, xtol=_STAGE_FTOL, gtol=gtol, max_nfev=_STAGE_MAX_ITER)
            res = least_squares(fun, x, jac=jac if use_analytic else jac_kind, bounds=bounds, method=method, **kw)
            x = res.x
            nfev += res.nfev
        out["theta"][r] = x
        out["objective"][r] = float(np.mean(res.fun**2))
        out["nfev"][r] = nfev
        out["status"][r] = res.status
    return out
