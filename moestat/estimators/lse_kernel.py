"""Residual, gradient and Gauss-Newton matrix of the batched least-squares fit.

This is the inner loop of :func:`moestat.estimators.levenberg_marquardt.levenberg_marquardt`;
everything else in the estimator is bookkeeping around it.  It computes, for ``R`` replicates at once,

* ``F = 0.5 sum_i (g(x_i) - y_i)^2`` (forward pass, every trial point), and
* ``A = J^T J`` and ``grad = J^T r`` (only at accepted points),

with the analytic derivatives of :mod:`moestat.estimators.levenberg_marquardt` (module
docstring there).

Why a separate, "component-major" kernel
----------------------------------------
Every per-sample array is stored as ``[R, k, n]`` (experts before samples), and the inputs are
turned once per fit into feature matrices ``[R, d(+1), n]``:

* ``Xs`` = the score features: ``x`` (linear gate), ``x / ||x||`` (cosine) or
  ``x / (||x|| + tau2)`` (perturbed, eq. (9)), so that a score is one batched matmul and a
  scalar factor per expert, ``s_i = beta1_i^T Xs / (||beta1_i|| + tau1)``;
* ``Xe`` = ``[x; 1]``, so that all expert pre-activations ``a_i^T x + b_i`` are one matmul.

Reductions over the ``k`` experts then run over contiguous slabs, the Jacobian is written
directly in the transposed layout ``J^T [R, P, n]`` (one broadcast product per block), and
``J^T J`` is one contiguous batched matmul.  The gradient ``J^T r`` is assembled from the
``[R, k, n]`` coefficients without touching ``J``.  On the reference slice of
``benchmarks/lse_batched_vs_scipy.py`` this is about 2.5 times faster per pass than building
``J [R, n, P]`` sample-major (``docs/guide/estimators.rst``).

The forward pass keeps its ``[R, k, n]`` coefficients (a few times smaller than ``J``), so a
rejected Levenberg-Marquardt trial point costs only the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from moestat.estimators.layout import n_params, unpack
from moestat.model.regression import MoEModel

__all__ = [
    "Design",
    "ForwardCache",
    "forward",
    "gauss_newton",
    "gradient_and_diagonal",
    "evaluate",
    "jacobian_t",
    "per_replicate",
    "residual_and_jacobian",
    "router_coefficients",
    "near_boundary",
]

# Memory bound for one chunk of J^T ([R, P, chunk] float64), in bytes.
CHUNK_BYTES = 1 << 25
# Keep the forward coefficients of all chunks only below this size (else recompute them).
# n = 128000, R = 20, k = 3 needs 250 MB.
CACHE_BYTES = 1 << 30
# Above this size of a chunk's batched J^T (bytes), gauss_newton forms J^T J one replicate at a
# time (per_replicate; measured on the main job's units, docs/guide/performance.rst).
PER_REPLICATE_BYTES = 1 << 22


def score_taus(model: MoEModel) -> tuple[float, float] | None:
    """``(tau1, tau2)`` of the score (cosine: ``(0, 0)``); ``None`` for the linear gate."""
    kind = model.gate.kind
    if kind == "linear":
        return None
    if kind == "cosine":
        return 0.0, 0.0
    return model.gate.tau1, model.gate.tau2


def _safe_recip(x: torch.Tensor) -> torch.Tensor:
    """``1 / x`` with ``0`` where ``x == 0`` (the zero-norm conventions of the gates)."""
    pos = x > 0
    return torch.where(pos, 1.0 / torch.where(pos, x, torch.ones_like(x)), torch.zeros_like(x))


def chunk_size(R: int, n: int, P: int) -> int:
    """Samples per chunk so that ``J^T`` of one chunk stays under :data:`CHUNK_BYTES`."""
    return int(max(64, min(n, CHUNK_BYTES // max(1, R * P * 8))))


@dataclass
class Design:
    """Per-fit feature matrices of the data, split into chunks along the sample axis.

    Attributes
    ----------
    xs, xe, y : list of Tensor
        Per chunk: score features ``[R, d, c]``, expert features ``[x; 1]`` ``[R, d+1, c]``
        and responses ``[R, c]``.
    n : int
        Total number of samples per replicate.
    """

    xs: list
    xe: list
    y: list
    n: int
    _buffers: dict = field(default_factory=dict, repr=False)

    def buffer(self, R: int, P: int, c: int, like: torch.Tensor) -> torch.Tensor:
        """A reusable ``[R, P, c]`` work array for ``J^T``.

        A fresh multi-megabyte array per pass costs page faults that, at ``n = 1000``, take
        as long as filling it; one buffer per fit avoids them.
        """
        key = (R, P, c)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = like.new_empty(R, P, c)
        return buf

    @classmethod
    def build(
        cls,
        model: MoEModel,
        X: torch.Tensor,
        Y: torch.Tensor,
        chunk: int | None = None,
        n_components: int = 2,
    ) -> "Design":
        """Features of ``X [R, n, d]`` and ``Y [R, n]`` for ``model``'s gate."""
        R, n, d = X.shape
        if chunk is None:
            chunk = chunk_size(R, n, n_params(n_components, d, d + 1, True))
        taus = score_taus(model)
        # ||x|| + tau2 is fixed by the data: divide once per fit, not once per pass
        scale = None if taus is None else _safe_recip(X.norm(dim=-1, keepdim=True) + taus[1])
        xs, xe, y = [], [], []
        # Chunk by chunk, into the chunk's own arrays: the same values as scaling the whole X and
        # appending its column of ones first, without those two [R, n, d(+1)] temporaries (each
        # as large as X: 82 MB in the main job's largest unit).
        for s in range(0, n, chunk):
            Xc = X[:, s : s + chunk]
            xs.append((Xc if scale is None else Xc * scale[:, s : s + chunk]).transpose(1, 2).contiguous())
            e = X.new_empty(R, d + 1, Xc.shape[1])
            e[:, :d] = Xc.transpose(1, 2)
            e[:, d] = 1.0
            xe.append(e)
            y.append(Y[:, s : s + chunk].contiguous())
        return cls(xs, xe, y, n)

    def select(self, idx: torch.Tensor) -> "Design":
        """The replicates ``idx`` only."""
        return Design([a[idx] for a in self.xs], [a[idx] for a in self.xe], [a[idx] for a in self.y], self.n)

    def chunk(self, c: int) -> "Design":
        """Chunk ``c`` alone, as a one-chunk design."""
        return Design([self.xs[c]], [self.xe[c]], [self.y[c]], self.y[c].shape[-1])


@dataclass
class ForwardCache:
    """What the Jacobian needs from a forward pass, per chunk (all ``[R, k, c]`` but ``r``)."""

    u_b: list  # dg/d(beta0_i)
    u_s: list  # dg/d(s_i) (equals u_b for the hard/dense gate)
    v: list  # w_i phi'(z_i) = dg/d(a_i^T x + b_i)
    s: list  # scores without bias
    r: list  # residuals [R, c]

    def select(self, idx: torch.Tensor) -> "ForwardCache":
        pick = lambda lst: [a[idx] for a in lst]  # noqa: E731
        return ForwardCache(pick(self.u_b), pick(self.u_s), pick(self.v), pick(self.s), pick(self.r))


def _router_factors(model: MoEModel, beta1: torch.Tensor):
    """Per-expert score scale ``1/(||beta1||+tau1)`` and ``1/(||beta1|| (||beta1||+tau1))``."""
    taus = score_taus(model)
    if taus is None:
        return None, None
    nb = beta1.norm(dim=-1)  # [R, k]; the reference atom's 0 gets the zero conventions below
    sig = _safe_recip(nb + taus[0])
    inv = _safe_recip(nb * (nb + taus[0]))
    return sig, inv


def _chunk_forward(model, xs, xe, beta0, beta1, eta, sig, K, k, temperature, want_parts):
    # In-place arithmetic wherever an intermediate is not needed afterwards: each in-place op is
    # the same elementwise kernel on the same operands as its out-of-place form (identical
    # results), and the chunk's [R, k, c] temporaries stay few and warm in cache.
    s = beta1 @ xs  # [R, k, c]
    if sig is not None:
        s.mul_(sig.unsqueeze(-1))
    logits = s + beta0.unsqueeze(-1)
    z = eta @ xe  # [R, k, c]
    h, dh = model.expert.phi_and_dphi(z)
    if temperature is not None:
        # smoothed Top-K: mask m = sigmoid((s - t)/T), t the midpoint of the K-th and (K+1)-th
        # scores; u_s adds the mask's derivative through s and through t (two scores move t)
        top = torch.topk(s, K + 1, dim=1)
        thr = 0.5 * (top.values[:, K - 1] + top.values[:, K])  # [R, c]
        m = torch.sigmoid((s - thr.unsqueeze(1)) / temperature)
        e = torch.exp(logits - logits.amax(1, keepdim=True))
        p = e / (m * e).sum(1, keepdim=True)
        w = m * p
        f = (w * h).sum(1)
        if not want_parts:
            return f, None
        hg = h - f.unsqueeze(1)
        u_b = w * hg
        q = p * hg * m * (1.0 - m) / temperature
        dthr = torch.zeros_like(s)
        dthr.scatter_(1, top.indices[:, K - 1 : K + 1], 0.5)
        u_s = u_b + q - q.sum(1, keepdim=True) * dthr
    else:
        if K is not None and K < k:
            # hard Top-K on the score without the bias (Nguyen et al. (2024), eq. (2))
            idx = torch.topk(s, K, dim=1).indices
            keep = torch.zeros_like(s, dtype=torch.bool).scatter_(1, idx, True)
            logits = logits.masked_fill(~keep, float("-inf"))
        w = logits.sub_(logits.amax(1, keepdim=True)).exp_()  # logits is this pass's own array
        w.div_(w.sum(1, keepdim=True))
        f = (w * h).sum(1)
        if not want_parts:
            return f, None
        u_b = u_s = h.sub_(f.unsqueeze(1)).mul_(w)  # w (h - g); h is not needed afterwards
        return f, (u_b, u_s, dh.mul_(w), s)
    return f, (u_b, u_s, w * dh, s)


def near_boundary(model: MoEModel, data: Design, theta: torch.Tensor, n_components: int, width: float) -> torch.Tensor:
    """How many samples of each replicate lie within ``width`` of their Top-K selection boundary.

    A sample's distance to the boundary is ``(s_(K) - s_(K+1)) / 2``, half the gap between its
    ``K``-th and ``(K+1)``-th largest scores (without the bias, eq. (2) of Nguyen et al. (2024)):
    the distance of both from the threshold ``t(x)`` of the smoothed mask ``sigmoid((s_i - t(x)) /
    T)`` (:func:`forward` with a temperature).  The continuation of
    :class:`~moestat.estimators.lse.LeastSquaresMoE` reads it to enter and leave its ladder.

    Parameters
    ----------
    model : MoEModel
        Gate with a sparse Top-K (``K = model.gate.k_active < n_components``).
    data : Design
        The fit's features.
    theta : Tensor, shape ``[R, P]``
        Free parameters (:func:`moestat.estimators.layout.pack`).
    n_components : int
        Number ``k`` of atoms.
    width : float
        Distance (in score units) within which a sample counts.

    Returns
    -------
    Tensor of int64, shape ``[R]``
    """
    k = n_components
    _, beta1, _, sig, K, _ = _forward_setup(model, data, theta, k, None)
    if K is None or K >= k:
        raise ValueError(f"near_boundary needs a sparse gate (k_active < {k}), got k_active={K}")
    count = torch.zeros(theta.shape[0], dtype=torch.long, device=theta.device)
    for xs in data.xs:
        s = beta1 @ xs  # the scores as the forward pass forms them
        if sig is not None:
            s.mul_(sig.unsqueeze(-1))
        top = torch.topk(s, K + 1, dim=1).values
        count += (0.5 * (top[:, K - 1] - top[:, K]) < width).sum(-1)
    return count


def _forward_setup(model, data: Design, theta, k: int, temperature):
    """Parameters, score scale, ``K`` and the effective temperature of a forward pass."""
    d = data.xs[0].shape[1]
    beta0, beta1, eta = unpack(theta, k, d, d + 1, True)  # linear experts: q = d + 1
    sig, _ = _router_factors(model, beta1)
    K = model.gate.k_active
    T = temperature if (temperature is not None and K is not None and K < k) else None
    return beta0, beta1, eta, sig, K, T


def _residuals(model, data: Design, theta, k: int, temperature) -> torch.Tensor:
    """Residuals ``[R, n]`` (chunks concatenated), no Jacobian coefficients."""
    beta0, beta1, eta, sig, K, T = _forward_setup(model, data, theta, k, temperature)
    r = [_chunk_forward(model, xs, xe, beta0, beta1, eta, sig, K, k, T, False)[0] - y
         for xs, xe, y in zip(data.xs, data.xe, data.y)]
    return r[0] if len(r) == 1 else torch.cat(r, dim=-1)


def forward(
    model: MoEModel,
    data: Design,
    theta: torch.Tensor,
    n_components: int,
    temperature: float | None = None,
    keep: bool = True,
    budget: int | None = CACHE_BYTES,
):
    """Half sum of squares ``F [R]`` and, if ``keep``, the :class:`ForwardCache`.

    ``temperature`` selects the smoothed Top-K gate (only for a sparse gate, ``K < k``).
    The cache is dropped (``None``) when it would exceed ``budget`` bytes.
    """
    k = n_components
    R = theta.shape[0]
    beta0, beta1, eta, sig, K, T = _forward_setup(model, data, theta, k, temperature)
    n_arrays = 5 if T is not None else 4  # u_b, (u_s,) v, s and r (~1/k of one)
    keep = keep and (budget is None or n_arrays * R * k * data.n * theta.element_size() <= budget)
    F = theta.new_zeros(R)
    parts = ([], [], [], [], [])
    for xs, xe, y in zip(data.xs, data.xe, data.y):
        f, pc = _chunk_forward(model, xs, xe, beta0, beta1, eta, sig, K, k, T, keep)
        r = f - y
        F += 0.5 * (r * r).sum(-1)
        if keep:
            for lst, a in zip(parts, (*pc, r)):
                lst.append(a)
    return F, (ForwardCache(*parts) if keep else None)


def score_derivative_factors(model: MoEModel, beta1: torch.Tensor, k: int):
    """Score scale ``sig [R, k]`` and radial term ``cb = beta1 / (||beta1|| (||beta1|| + tau1))``.

    ``ds_i / dbeta1_i = sig_i xs - s_i cb_i`` (eq. (9) differentiated; ``cb = None`` and
    ``ds_i/dbeta1_i = x`` for the linear gate).
    """
    sig, inv = _router_factors(model, beta1)
    cb = None if inv is None else beta1[:, : k - 1] * inv[:, : k - 1].unsqueeze(-1)  # [R, k-1, d]
    return sig, cb


def router_coefficients(u_s, s, sig, cb, k: int):
    """``a = u_s sig`` and ``us = u_s s`` of the free routers (``[R, k-1, c]``; ``us`` None
    for the linear gate): ``dg/dbeta1_i = a_i xs - us_i cb_i``."""
    u_s = u_s[:, : k - 1]
    a = u_s if sig is None else u_s * sig[:, : k - 1].unsqueeze(-1)
    us = None if cb is None else u_s * s[:, : k - 1]
    return a, us


def jacobian_t(xs, xe, u_b, a, us, v, cb, k: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``J^T [R, P, c]`` of one chunk.

    ``u_b``, ``v`` are the forward coefficients ``[R, k, c]`` and ``a``, ``us`` those of
    :func:`router_coefficients`.  ``out`` is an optional ``[R, P, c]`` work array.
    """
    R, d, n_c = xs.shape
    i0, i1 = k - 1, (k - 1) * (d + 1)
    Jt = xs.new_empty(R, n_params(k, d, d + 1, True), n_c) if out is None else out
    Jt[:, :i0] = u_b[:, :i0]
    J1 = Jt[:, i0:i1].view(R, k - 1, d, n_c)
    torch.mul(a.unsqueeze(2), xs.unsqueeze(1), out=J1)
    if cb is not None:
        J1.sub_(us.unsqueeze(2) * cb.unsqueeze(-1))
    J2 = Jt[:, i1:].view(R, k, d + 1, n_c)
    torch.mul(v.unsqueeze(2), xe.unsqueeze(1), out=J2)
    return Jt


def gauss_newton(
    model: MoEModel,
    data: Design,
    theta: torch.Tensor,
    n_components: int,
    cache: ForwardCache | None = None,
    temperature: float | None = None,
):
    """``A = J^T J [R, P, P]`` and ``grad = J^T r [R, P]`` at ``theta``.

    ``cache`` is the :func:`forward` cache at the same ``theta`` (recomputed when ``None``).
    (A float32 ``J^T J`` was tried: 10-20 per cent faster for the perturbed router, but more
    iterations for the vanilla cosine router, whose ``J^T J`` is exactly singular, PDE (4).)
    """
    k = n_components
    d = data.xs[0].shape[1]
    R = theta.shape[0]
    if cache is None:
        cache = forward(model, data, theta, k, temperature, keep=True)[1]
        if cache is None:  # too large to keep as a whole: one chunk at a time
            return _gauss_newton_chunked(model, data, theta, k, temperature)
    _, beta1, _ = unpack(theta, k, d, d + 1, True)
    sig, cb = score_derivative_factors(model, beta1, k)
    P = n_params(k, d, d + 1, True)
    A = theta.new_zeros(R, P, P)
    g = theta.new_zeros(R, P)
    for c in range(len(data.xs)):
        xs, xe = data.xs[c], data.xe[c]
        u_b, v, r = cache.u_b[c], cache.v[c], cache.r[c]
        a, us = router_coefficients(cache.u_s[c], cache.s[c], sig, cb, k)
        n_c = r.shape[-1]
        if per_replicate(R, P, n_c, r):
            # one replicate's J^T at a time, multiplied while it is still in cache: the same
            # products as the batched form below (each replicate's J^T J is its own matrix
            # product, the same kernel on the same operands; bit-identical, tested), without
            # writing and re-reading the whole [R, P, c] chunk through memory; the replicate's
            # J^T r too, from the same operands while they are cached (its rows of g, the same
            # batched operations on one replicate: the same bits)
            buf = data.buffer(1, P, n_c, r)
            for i in range(R):
                s = slice(i, i + 1)
                us_i, cb_i = (None, None) if cb is None else (us[s], cb[s])
                Jt = jacobian_t(xs[s], xe[s], u_b[s], a[s], us_i, v[s], cb_i, k, buf)
                A[s].baddbmm_(Jt, Jt.transpose(1, 2))
                _add_gradient(g[s], xs[s], xe[s], u_b[s], a[s], us_i, v[s], cb_i, r[s], k)
        else:
            Jt = jacobian_t(xs, xe, u_b, a, us, v, cb, k, data.buffer(R, P, n_c, r))
            A.baddbmm_(Jt, Jt.transpose(1, 2))
            _add_gradient(g, xs, xe, u_b, a, us, v, cb, r, k)
    return A, g


def per_replicate(R: int, P: int, n_c: int, like: torch.Tensor) -> bool:
    """Whether :func:`gauss_newton` forms ``J^T``, ``J^T J`` and ``J^T r`` one replicate at a time for a
    chunk of ``n_c`` samples: on the CPU, for more than one replicate, where the chunk's whole
    ``J^T [R, P, n_c]`` (float64) would exceed :data:`PER_REPLICATE_BYTES`.

    Why: the batched ``J^T`` of the main job's large units is 32 MiB per chunk, written
    by :func:`jacobian_t` and read back by the product after it has left the cache; one
    replicate's ``J^T`` (1.6 MiB) is read while still cached.  On an accelerator a loop over
    replicates would only add kernel launches, and for small chunks the loop's overhead is not
    paid back.
    """
    return like.device.type == "cpu" and R > 1 and R * P * n_c * like.element_size() > PER_REPLICATE_BYTES


def _add_gradient(g: torch.Tensor, xs, xe, u_b, a, us, v, cb, r, k: int) -> None:
    """Add one chunk's ``J^T r`` to ``g [R, P]``, from the ``[R, k, c]`` coefficients of
    :func:`jacobian_t` (cheaper than a pass over ``J``); :func:`gauss_newton` and
    :func:`gradient_and_diagonal` share it, so both report the same numbers."""
    R, d = xs.shape[0], xs.shape[1]
    i0, i1 = k - 1, (k - 1) * (d + 1)
    rr = r.unsqueeze(1)
    g[:, :i0] += (u_b[:, :i0] * rr).sum(-1)
    g1 = (a * rr) @ xs.transpose(1, 2)  # [R, k-1, d]
    if cb is not None:
        g1 = g1 - (us * rr).sum(-1).unsqueeze(-1) * cb
    g[:, i0:i1] += g1.reshape(R, -1)
    g[:, i1:] += ((v * rr) @ xe.transpose(1, 2)).reshape(R, -1)


def gradient_and_diagonal(
    model: MoEModel,
    data: Design,
    theta: torch.Tensor,
    n_components: int,
    cache: ForwardCache | None = None,
    temperature: float | None = None,
):
    """``diag(J^T J) [R, P]`` and ``grad = J^T r [R, P]`` at ``theta``, without ``J^T J`` itself.

    What a Levenberg--Marquardt iterate needs where its replicate stops there
    (:func:`moestat.estimators.levenberg_marquardt.levenberg_marquardt`): the gradient it reports
    and MINPACK's scaled gradient, whose column norms are ``sqrt(diag(J^T J))``.  The gradient is
    computed by the very operations of :func:`gauss_newton` (the same numbers); the diagonal
    from the Jacobian's blocks -- ``sum u_b^2``, ``sum (a xs - us cb)^2`` (expanded: ``(a^2)
    (xs^2)^T - 2 cb (a us) xs^T + cb^2 sum us^2``) and ``(v^2) (xe^2)^T`` -- not from the ``[R, P,
    P]`` product: the same sums of squares to rounding (relative 1e-13 on the main job's units,
    ``tests/estimators/test_lse_kernel.py``), at about 0.4 of the cost of :func:`gauss_newton`.
    """
    k = n_components
    d = data.xs[0].shape[1]
    R = theta.shape[0]
    if cache is None:
        cache = forward(model, data, theta, k, temperature, keep=True)[1]
        if cache is None:  # too large to keep as a whole: the chunked product, its diagonal
            A, g = _gauss_newton_chunked(model, data, theta, k, temperature)
            return torch.diagonal(A, dim1=-2, dim2=-1).clone(), g
    _, beta1, _ = unpack(theta, k, d, d + 1, True)
    sig, cb = score_derivative_factors(model, beta1, k)
    P = n_params(k, d, d + 1, True)
    i0, i1 = k - 1, (k - 1) * (d + 1)
    D = theta.new_zeros(R, P)
    g = theta.new_zeros(R, P)
    for c in range(len(data.xs)):
        xs, xe = data.xs[c], data.xe[c]
        u_b, v, r = cache.u_b[c], cache.v[c], cache.r[c]
        a, us = router_coefficients(cache.u_s[c], cache.s[c], sig, cb, k)
        _add_gradient(g, xs, xe, u_b, a, us, v, cb, r, k)  # J^T r exactly as gauss_newton forms it
        # diag(J^T J), block by block (the rows of jacobian_t) as products of the [R, k, c]
        # coefficients with the squared features: sum (a xs_j - us cb_j)^2 expanded, so that no
        # [R, k-1, d, c] array is formed (that alone cost more than J^T J)
        D[:, :i0] += (u_b[:, :i0] * u_b[:, :i0]).sum(-1)
        d1 = (a * a) @ (xs * xs).transpose(1, 2)  # [R, k-1, d]
        if cb is not None:
            d1 = d1 - 2.0 * ((a * us) @ xs.transpose(1, 2)) * cb + (us * us).sum(-1).unsqueeze(-1) * (cb * cb)
        D[:, i0:i1] += d1.clamp_(min=0.0).reshape(R, -1)  # a sum of squares: rounding never below 0
        D[:, i1:] += ((v * v) @ (xe * xe).transpose(1, 2)).reshape(R, -1)
    return D, g


def _gauss_newton_chunked(model, data, theta, k, temperature):
    A = g = None
    for c in range(len(data.xs)):
        sub = data.chunk(c)
        cache = forward(model, sub, theta, k, temperature, keep=True, budget=None)[1]
        Ac, gc = gauss_newton(model, sub, theta, k, cache, temperature)
        A = Ac if A is None else A + Ac
        g = gc if g is None else g + gc
    return A, g


def residual_and_jacobian(model, data: Design, theta, n_components: int, temperature=None, jacobian: bool = True):
    """Residuals ``r [R, n]`` and (if asked) ``J = dr/dtheta [R, n, P]`` (a transposed view).

    One-chunk designs only (``Design.build(..., chunk=n)``); used by
    :func:`~moestat.estimators.levenberg_marquardt.predict_and_jacobian` and the scipy reference.
    """
    if len(data.xs) != 1:
        raise ValueError("residual_and_jacobian needs a one-chunk Design (chunk=n)")
    k = n_components
    if not jacobian:  # scipy's ``fun``: the forward pass without the Jacobian's coefficients
        return _residuals(model, data, theta, k, temperature), None
    _, cache = forward(model, data, theta, k, temperature, keep=True, budget=None)
    r = cache.r[0]
    d = data.xs[0].shape[1]
    _, beta1, _ = unpack(theta, k, d, d + 1, True)
    sig, cb = score_derivative_factors(model, beta1, k)
    a, us = router_coefficients(cache.u_s[0], cache.s[0], sig, cb, k)
    Jt = jacobian_t(data.xs[0], data.xe[0], cache.u_b[0], a, us, cache.v[0], cb, k)
    return r, Jt.transpose(1, 2)


def evaluate(model, data: Design, theta, n_components, need_jac: bool = True, temperature=None):
    """``F [R]`` and, if ``need_jac``, ``A = J^T J`` and ``grad = J^T r``."""
    F, cache = forward(model, data, theta, n_components, temperature, keep=need_jac)
    if not need_jac:
        return F, None, None
    A, g = gauss_newton(model, data, theta, n_components, cache, temperature)
    return F, A, g
