"""Batched, box-projected Levenberg-Marquardt for the least-squares fit of Nguyen et al. (2024).

The solver of :class:`~moestat.estimators.lse.LeastSquaresMoE` (eqs. (3) and (10) of Nguyen et
al. (2024), "Statistical Advantages of Perturbing Cosine Router in Sparse Mixture of Experts").
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
:func:`predict_and_jacobian`).  ``tests/estimators/test_lse_jacobian.py`` checks all of this against
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

from typing import Any

import torch

from moestat.model.gates import safe_norm
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.regression import MoEModel
from moestat.estimators.layout import bounds, pack
from moestat.estimators.lse_kernel import (
    Design,
    evaluate as kernel_evaluate,
    forward as kernel_forward,
    gauss_newton,
    gradient_and_diagonal,
    residual_and_jacobian,
    score_taus,
)

__all__ = [
    "levenberg_marquardt",
    "box_bounds",
    "radial_invariant",
    "predict_and_jacobian",
    "objective_and_grad",
]

# ----------------------------------------------------------------------------------------------
# parameter packing
# ----------------------------------------------------------------------------------------------
def box_bounds(box: ParameterBox, k: int, d: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower/upper bound vectors ``[P]`` of the free parameters inside ``box`` (``k`` atoms, dimension
    ``d``, linear-expert ``eta`` of size ``d + 1``): :func:`moestat.estimators.layout.bounds`."""
    return bounds(box, k, d, d + 1, True, torch.empty(0, dtype=dtype, device=device))


# ----------------------------------------------------------------------------------------------
# model and Jacobian
# ----------------------------------------------------------------------------------------------
def radial_invariant(model: MoEModel) -> bool:
    """True when ``g`` does not depend on ``||beta1_i||`` (cosine score, ``tau1 = 0``; PDE (4))."""
    tau = score_taus(model)
    return tau is not None and tau[0] == 0.0



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
        Free parameters (:func:`moestat.estimators.layout.pack`).
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


def _branch_on_host(device: torch.device) -> bool:
    """Whether the iteration may read a tensor's value on the host to skip work (the box and
    Cholesky-failure branches).  On the CPU that read is free; on an accelerator it waits for the
    device (a synchronisation per read), so there the masked arithmetic runs unconditionally --
    the same numbers, because the masks are then all ones (``M * 1 * 1 + 0``, ``delta * 1``)."""
    return device.type == "cpu"


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


def _starting_statuses(theta, F, A, g, lower, upper, gtol: float, status: list, converged: list) -> list[int]:
    """The replicates that need a step at ``theta [R, P]``; the others get their status here.

    A start with a non-finite objective, ``J^T J [R, P, P]`` or ``J^T r [R, P]`` is
    ``"nonfinite"``; one already stationary (MINPACK's scaled gradient ``<= gtol`` on the free
    coordinates) is ``"gtol"`` and converged.  ``status`` and ``converged`` are written in place.
    """
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
    return keep


def _damped_step(theta, A, g, lam, lower, upper, inner, eye, on_host: bool, radial):
    """The box-projected damped Gauss-Newton trial point of every working replicate.

    Solves ``(J^T J + lam I) delta = -J^T r`` (``A [R, P, P]``, ``g [R, P]``, ``lam [R]``) by
    Cholesky, retracts the radius of each ``beta1`` block when ``radial = (k, d)`` (the cosine
    router's flat direction, PDE (4)) and clamps to the box.  ``inner = (lo_in, up_in)`` is the
    box shrunk by a relative 1e-12: a coordinate outside it may be at a bound.

    Returns
    -------
    trial : Tensor ``[R, P]``; delta : Tensor ``[R, P]`` (``trial - theta``, the projected step);
    okc : Tensor ``[R]`` bool, the Cholesky factorisation succeeded (a failed one gives a zero step).
    """
    lo_in, up_in = inner
    # active set of the box: a coordinate at a bound whose descent direction points out of
    # the box is held fixed (projecting a full step instead distorts it and stalls the
    # iteration); skipped when no coordinate is at a bound (the usual case)
    M = A + lam[:, None, None] * eye
    rhs = -g
    boxed = not on_host or bool(((theta <= lo_in) | (theta >= up_in)).any())
    if boxed:
        free = _free_mask(theta, g, lower, upper).to(eye.dtype)
        M = M * free.unsqueeze(-1) * free.unsqueeze(-2) + torch.diag_embed(1.0 - free)
        rhs = rhs * free
    L, info = torch.linalg.cholesky_ex(M)
    okc = info == 0
    chol_ok = on_host and bool(okc.all())
    if not chol_ok:
        L = torch.where(okc[:, None, None], L, eye)
    delta = torch.cholesky_solve(rhs.unsqueeze(-1), L).squeeze(-1)
    if not chol_ok:
        delta = delta * okc.unsqueeze(-1)
    trial = theta + delta
    if radial is not None:
        trial = _retract_radius(trial, theta, *radial)
    trial = torch.clamp(trial, lower, upper)
    return trial, trial - theta, okc


def _gain_ratio(A, g, delta, F, Ft):
    """Actual decrease ``F - Ft [R]``, the decrease predicted by the Gauss-Newton model,
    ``-(g.delta + delta'A delta / 2) [R]``, and their ratio ``rho [R]`` (``-1`` where the
    prediction is not positive)."""
    # written as an elementwise reduction because a batched mat-vec rounds differently for R = 1
    Ad = (A * delta.unsqueeze(-2)).sum(-1)
    pred = -((g * delta).sum(-1) + 0.5 * (delta * Ad).sum(-1))
    actual = F - Ft
    ppos = pred > 0
    rho = torch.where(ppos, actual / torch.where(ppos, pred, 1.0), -1.0)
    return actual, pred, rho


def _nielsen_damping(lam, nu, rho, accept):
    """Nielsen's update of the damping ``lam [R]`` and its growth factor ``nu [R]`` (both capped at
    1e30): an accepted step shrinks ``lam`` by ``max(1/3, 1 - (2 rho - 1)^3)``, a rejected one
    multiplies it by ``nu`` and doubles ``nu``."""
    lam_acc = lam * torch.clamp(1.0 - (2.0 * rho - 1.0) ** 3, min=1.0 / 3.0)
    lam = torch.clamp(torch.where(accept, lam_acc, lam * nu), max=1e30)
    nu = torch.clamp(torch.where(accept, 2.0, 2.0 * nu), max=1e30)
    return lam, nu


def _take_accepted(k_gn, model, data, k: int, temperature, accept, current, proposed, ending=None, k_gd=None):
    """The next iterate: the trial point where its step is accepted, the current one elsewhere.

    ``current = (theta [R, P], F [R], A [R, P, P], g [R, P])``, ``proposed = (trial [R, P],
    Ft [R], cache)`` (the kernel's forward cache).  ``J^T J`` and ``J^T r`` are formed only where
    the step is taken; a non-finite one undoes the acceptance (``accept [R]`` is cleared in place,
    so the damping update sees it).  Returns ``(theta, F, A, g)`` of the next iterate.

    ``ending [R]`` (with ``k_gd``, the kernel's :func:`~moestat.estimators.lse_kernel.gradient_and_diagonal`):
    the replicates that stop at this iterate whatever its ``J^T J`` (their ``ftol`` or ``xtol``
    test holds).  Where such a step is accepted only ``J^T r`` and ``diag(J^T J)`` are formed (the
    stopping tests read no more; ``A`` gets that diagonal): ``J^T J`` of a replicate's last
    iterate was about a sixth of the main job's ``J^T J`` work and is never used.
    """
    theta, F, A, g = current
    trial, Ft, cache = proposed
    acc = torch.nonzero(accept).flatten()
    m = acc.numel()
    if not m:
        return theta, F, A, g
    R = theta.shape[0]
    light = ending[acc] if (ending is not None and k_gd is not None) else None
    if light is not None and not bool(light.any()):
        light = None
    groups = [(acc, k_gn)] if light is None else [(acc[~light], k_gn), (acc[light], k_gd)]
    taken = []  # (replicates, A rows, g rows) of the finite ones
    for sub, fn in groups:
        if not sub.numel():
            continue
        every = sub.numel() == R
        At, gt = fn(
            model, data if every else data.select(sub), trial if every else trial[sub], k,
            None if cache is None else (cache if every else cache.select(sub)), temperature,
        )
        if fn is k_gd:
            At = torch.diag_embed(At)  # the diagonal is all the stopping tests read
        fin = torch.isfinite(At).flatten(1).all(1) & torch.isfinite(gt).all(1)
        if not bool(fin.all()):
            accept[sub[~fin]] = False
            At, gt, sub = At[fin], gt[fin], sub[fin]
        taken.append((sub, At, gt))
    if len(taken) == 1 and taken[0][0].numel() == R:
        return trial, Ft, taken[0][1], taken[0][2]
    theta_new, F_new, A_new, g_new = theta.clone(), F.clone(), A.clone(), g.clone()
    for sub, At, gt in taken:
        theta_new[sub], F_new[sub], A_new[sub], g_new[sub] = trial[sub], Ft[sub], At, gt
    return theta_new, F_new, A_new, g_new


def _record_stops(idx: list[int], flags: list[list[bool]], status: list, converged: list, n_iter: list) -> list[int]:
    """Count one iteration for each working replicate ``idx[j]`` and record why it stops, in the
    order of precedence of ``flags = [gtol, ftol, xtol, stalled]`` (each a list over ``j``).
    ``status``, ``converged`` and ``n_iter`` (indexed by replicate) are written in place.
    Returns the positions ``j`` of the replicates that go on."""
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
    return stay


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
    kernel: Any = None,
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

    ``kernel``: an object with ``build``/``evaluate``/``forward``/``gauss_newton`` (the
    signatures of :mod:`~moestat.estimators.lse_kernel`), e.g.
    :class:`~moestat.estimators.jacobians.AutogradKernel`; ``None`` is the analytic kernel.

    Returns
    -------
    dict
        ``theta [R, P]``, ``F [R]``, ``g [R, P]`` (``J^T r``), ``n_iter [R]``, ``status``
        (list of str), ``converged [R]`` bool.
    """
    R, n, d = X.shape
    k = n_components
    P = theta0.shape[1]
    build, k_eval, k_fwd, k_gn, k_gd = Design.build, kernel_evaluate, kernel_forward, gauss_newton, gradient_and_diagonal
    if kernel is not None:  # a model outside the analytic kernel
        build, k_eval, k_fwd, k_gn = kernel.build, kernel.evaluate, kernel.forward, kernel.gauss_newton
        k_gd = getattr(kernel, "gradient_and_diagonal", None)  # without it: J^T J at every accepted step
    if data is None:
        data = build(model, X, Y, chunk, n_components=k)
    # radial flat direction (PDE (4)) whenever the score is degree-0 homogeneous in beta1:
    # the vanilla cosine router, or a "perturbed" gate with tau1 = 0
    cosine = radial_invariant(model) if kernel is None else kernel.radial_invariant
    span = (upper - lower) * 1e-12
    lo_in, up_in = lower + span, upper - span
    theta = torch.clamp(theta0.clone(), lower, upper)
    F, A, g = k_eval(model, data, theta, k, True, temperature)
    # results, written back when a replicate stops
    out_theta, out_F, out_g = theta.clone(), F.clone(), g.clone()
    status = ["max_iter"] * R
    converged = [False] * R
    n_iter = [0] * R
    keep = _starting_statuses(theta, F, A, g, lower, upper, gtol, status, converged)
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
    on_host = _branch_on_host(X.device)
    for _ in range(max_iter):
        if not idx:
            break
        trial, delta, okc = _damped_step(theta, A, g, lam, lower, upper, (lo_in, up_in), eye, on_host,
                                         (k, d) if cosine else None)
        Ft, cache = k_fwd(model, data, trial, k, temperature)
        actual, pred, rho = _gain_ratio(A, g, delta, F, Ft)
        accept = okc & torch.isfinite(Ft) & (actual > 0) & (pred > 0)
        # stopping rules, per replicate (xtol on the proposed step, as scipy and MINPACK do); a
        # replicate whose ftol or xtol test holds stops here, so its new J^T J is not formed
        step_small = okc & (safe_norm(delta) <= xtol * (xtol + safe_norm(theta)))
        decrease_small = (actual <= ftol * F) & (rho > 0.25)
        theta_new, F_new, A_new, g_new = _take_accepted(k_gn, model, data, k, temperature, accept,
                                                        (theta, F, A, g), (trial, Ft, cache),
                                                        step_small | (accept & decrease_small), k_gd)
        lam, nu = _nielsen_damping(lam, nu, rho, accept)
        f_small = accept & decrease_small  # accept as _take_accepted left it (a non-finite J^T J undoes it)
        theta, F, A, g = theta_new, F_new, A_new, g_new
        g_small = _scaled_gradient(A, g * _free_mask(theta, g, lower, upper), F) <= gtol
        stalled = (lam >= 1e30) & ~accept
        stay = _record_stops(idx, torch.stack([g_small, f_small, step_small, stalled]).tolist(), status, converged,
                             n_iter)
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



def objective_and_grad(model: MoEModel, X: torch.Tensor, Y: torch.Tensor, G: MixingMeasure, n_components: int):
    """Mean squared residual and the Euclidean norm of its gradient at ``G``.

    Parameters
    ----------
    model : MoEModel
    X : Tensor, shape ``[R, n, d]``
    Y : Tensor, shape ``[R, n]``
    G : MixingMeasure
        Batched ``[R]``, the last atom the reference.
    n_components : int

    Returns
    -------
    objective : Tensor, shape ``[R]``
    grad_norm : Tensor, shape ``[R]``
    """
    theta = pack(G.torch(device=X.device), True)
    data = Design.build(model, X, Y, n_components=n_components)
    F, _, g = kernel_evaluate(model, data, theta, n_components, True)
    n = X.shape[1]
    return (2.0 * F / n), safe_norm(2.0 * g / n)

