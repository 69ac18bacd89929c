"""Least-squares kernel for any model of the protocol, with Jacobians from :mod:`torch.func`.

The batched Levenberg-Marquardt (:mod:`moestat.estimators.levenberg_marquardt`) needs, per
replicate, ``F = 0.5 ||r||^2``, ``A = J^T J`` and ``g = J^T r`` at the current parameters.  For
the built-in gates and experts :mod:`moestat.estimators.lse_kernel` writes ``J`` analytically;
for any other :class:`~moestat.model.protocol.ProtocolModel` this module gets it by forward-mode
differentiation, ``vmap(jacfwd(f))`` over the replicates, where ``f(theta_r, x) -> g(x)`` is one
replicate's regression function on one chunk of samples.  Chunks are sized so that ``J`` of one
chunk (``[R, c, P]`` float64) stays under :data:`~moestat.estimators.lse_kernel.CHUNK_BYTES`, so
memory is bounded for any ``n``.  Forward mode fits the shape of the problem: ``P`` (tens of
parameters) is much smaller than ``c`` (thousands of samples).

Free parameters ``theta [R, P]`` in the one least-squares layout of
:mod:`moestat.estimators.layout` (``beta0`` and ``beta1`` of the free atoms, then ``eta`` of every
atom), the same as the analytic kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import jacfwd, vmap

from moestat.estimators.layout import block_indices, bounds, n_params, pack, unpack  # noqa: F401 (the layout's home)
from moestat.estimators.lse_kernel import CHUNK_BYTES
from moestat.model.mixing import MixingMeasure, ParameterBox

__all__ = ["AutogradDesign", "AutogradKernel", "block_indices", "bounds", "free_parameters", "n_params", "pack", "protocol_starts",
           "unpack"]


def free_parameters(G: MixingMeasure, reference: bool):
    """One measure in the free-parameter layout, for differentiating a function of it at ``G``.

    Parameters
    ----------
    G : MixingMeasure
        Unbatched (numpy or torch), ``k`` atoms of dimension ``d`` with ``q`` expert parameters.
    reference : bool
        Whether the last atom's router is fixed at zero (softmax gates) and left out.

    Returns
    -------
    theta0 : torch.Tensor [P] float64
        ``G``'s free parameters (:func:`pack`).
    measure : callable
        ``theta [P] -> MixingMeasure`` (torch; :func:`unpack`): autograd flows through it.
    blocks : list of (str, list of int)
        :func:`block_indices` of the layout.
    """
    k, d, q = G.n_atoms, G.dim, G.eta_dim
    blocks = block_indices(k, d, q, reference)

    def measure(theta: torch.Tensor) -> MixingMeasure:
        return MixingMeasure(*unpack(theta, k, d, q, reference))

    return pack(G.expand(1).torch(), reference)[0], measure, blocks


@dataclass
class AutogradDesign:
    """Inputs ``x [R, c, d]`` and responses ``y [R, c]`` per chunk of samples."""

    x: list
    y: list
    n: int

    def select(self, idx: torch.Tensor) -> "AutogradDesign":
        """The replicates ``idx`` only."""
        return AutogradDesign([a[idx] for a in self.x], [a[idx] for a in self.y], self.n)


class AutogradKernel:
    """``F``, ``J^T J`` and ``J^T r`` of a protocol model by ``vmap(jacfwd(...))``.

    The methods have the signatures of :mod:`moestat.estimators.lse_kernel`'s ``Design.build``,
    ``forward``, ``gauss_newton`` and ``evaluate``, so Levenberg-Marquardt calls either kernel
    through one interface.

    Parameters
    ----------
    model : ProtocolModel
    d : int
        Input dimension.
    chunk_bytes : int
        Memory bound for one chunk's Jacobian ``[R, c, P]``.
    """

    radial_invariant = False  # no flat radial direction is assumed for a custom score

    def __init__(self, model, d: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.model = model
        self.d = d
        self.q = model.n_expert_params(d)
        self.reference = bool(model.gate.reference)
        self.chunk_bytes = chunk_bytes

    # -- the regression function of one replicate ------------------------------------------
    def _predict(self, theta: torch.Tensor, x: torch.Tensor, k: int, temperature) -> torch.Tensor:
        """``g(x [c, d]) [c]`` for one replicate's ``theta [P]``."""
        beta0, beta1, eta = unpack(theta, k, self.d, self.q, self.reference)
        gate = self.model.gate
        T = temperature if (temperature is not None and gate.k_active is not None and gate.k_active < k) else None
        w = gate.weights(x, beta0, beta1, smooth_topk=T)  # [c, k]
        h = self.model.expert(x, eta)  # [c, k]
        return (w * h).sum(-1)

    def residuals(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, k: int, temperature=None) -> torch.Tensor:
        """Residuals ``[R, c]`` for ``theta [R, P]``, ``x [R, c, d]``, ``y [R, c]``."""
        return vmap(lambda t, xx: self._predict(t, xx, k, temperature))(theta, x) - y

    def jacobian(self, theta: torch.Tensor, x: torch.Tensor, k: int, temperature=None) -> torch.Tensor:
        """``J = dg/dtheta`` ``[R, c, P]`` (forward mode, vmapped over replicates)."""
        return vmap(jacfwd(lambda t, xx: self._predict(t, xx, k, temperature)))(theta, x)

    # -- the kernel interface of Levenberg-Marquardt ----------------------------------------
    def build(self, model, X: torch.Tensor, Y: torch.Tensor, chunk: int | None = None, n_components: int = 2) -> AutogradDesign:
        """Split ``X [R, n, d]``, ``Y [R, n]`` into chunks of bounded Jacobian size."""
        R, n, _ = X.shape
        P = n_params(n_components, self.d, self.q, self.reference)
        if chunk is None:
            chunk = int(max(64, min(n, self.chunk_bytes // max(1, R * P * 8))))
        xs = [X[:, s : s + chunk] for s in range(0, n, chunk)]
        ys = [Y[:, s : s + chunk] for s in range(0, n, chunk)]
        return AutogradDesign(xs, ys, n)

    def forward(self, model, data: AutogradDesign, theta, n_components, temperature=None, keep=True, budget=None):
        """``F [R]`` and no cache (the Jacobian pass recomputes the forward pass)."""
        F = theta.new_zeros(theta.shape[0])
        for x, y in zip(data.x, data.y):
            r = self.residuals(theta, x, y, n_components, temperature)
            F = F + 0.5 * (r * r).sum(-1)
        return F, None

    def gauss_newton(self, model, data: AutogradDesign, theta, n_components, cache=None, temperature=None):
        """``A = J^T J [R, P, P]`` and ``g = J^T r [R, P]``, accumulated chunk by chunk."""
        R, P = theta.shape
        A, g = theta.new_zeros(R, P, P), theta.new_zeros(R, P)
        for x, y in zip(data.x, data.y):
            r = self.residuals(theta, x, y, n_components, temperature)
            J = self.jacobian(theta, x, n_components, temperature)
            A.baddbmm_(J.transpose(1, 2), J)
            g += (J * r.unsqueeze(-1)).sum(1)
        return A, g

    def evaluate(self, model, data: AutogradDesign, theta, n_components, need_jac: bool = True, temperature=None):
        """``F [R]`` and, if ``need_jac``, ``A`` and ``g``."""
        F, _ = self.forward(model, data, theta, n_components, temperature)
        if not need_jac:
            return F, None, None
        A, g = self.gauss_newton(model, data, theta, n_components, None, temperature)
        return F, A, g


def protocol_starts(est, R: int, d: int, q: int, reference: bool, init, rng) -> list[MixingMeasure]:
    """Starts of a protocol-model fit: the user's ``init`` (checked) and/or random draws.

    Random starts draw every free entry from ``N(0, 1/d)`` (the law of
    :func:`~moestat.estimators.starts.random_init`), one replicate after another from ``rng``;
    with a reference atom its router is zero.

    Parameters
    ----------
    est : LeastSquaresMoE
        Supplies ``n_components``, ``n_init`` and its own ``init``.
    R, d, q : int
        Replicates, input dimension, expert parameters.
    reference : bool
        The gate's identifiability convention.
    init : MixingMeasure or None
        The ``fit(..., init=...)`` argument.
    rng : numpy.random.Generator

    Returns
    -------
    list of MixingMeasure
        NumPy measures batched ``[R]``.
    """
    import numpy as np

    k = est.n_components
    starts = []
    for G, name in ((init, "init"), (est.init if isinstance(est.init, MixingMeasure) else None, "init")):
        if G is None:
            continue
        if not isinstance(G, MixingMeasure):
            raise TypeError(f"{name} must be a MixingMeasure, got {type(G).__name__}")
        m = G.numpy()
        if (m.n_atoms, m.dim, m.eta_dim) != (k, d, q):
            raise ValueError(f"{name} must have {k} atoms, beta1 of dimension {d} and eta of dimension {q}; got {m.n_atoms}, {m.dim}, {m.eta_dim}")
        if reference and (np.any(m.beta0[..., -1] != 0) or np.any(m.beta1[..., -1, :] != 0)):
            raise ValueError(f"{name}: the last atom is the reference of this gate (beta0 = 0, beta1 = 0)")
        if m.batch_shape == ():
            m = MixingMeasure(np.broadcast_to(m.beta0, (R, k)).copy(), np.broadcast_to(m.beta1, (R, k, d)).copy(), np.broadcast_to(m.eta, (R, k, q)).copy())
        elif m.batch_shape != (R,):
            raise ValueError(f"{name} must be unbatched or batched [{R}], got batch shape {m.batch_shape}")
        starts.append(m)
        break
    s = 1.0 / np.sqrt(d)
    while len(starts) < est.n_init:
        b0, b1, eta = (np.empty((R, k)), np.empty((R, k, d)), np.empty((R, k, q)))
        for r in range(R):
            b0[r], b1[r], eta[r] = s * rng.normal(size=k), s * rng.normal(size=(k, d)), s * rng.normal(size=(k, q))
        if reference:
            b0[:, -1], b1[:, -1] = 0.0, 0.0
        starts.append(MixingMeasure(b0, b1, eta))
    return starts
