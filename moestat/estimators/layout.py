"""The one free-parameter layout of a mixing measure, shared by every least-squares path.

A measure ``G`` of ``k`` atoms with routers ``(beta0_i, beta1_i)`` (``beta1_i`` in ``R^d``) and
expert parameters ``eta_i`` in ``R^q`` is a vector ``theta [..., P]``: ``beta0`` of the free atoms,
then their ``beta1`` (row-major), then ``eta`` of every atom.  With a reference atom (a softmax
gate, assumption (A.3) of Nguyen et al. 2024) the last atom's router is fixed at zero and omitted;
without one (a sigmoid gate) every router is free.  The analytic kernel
(:mod:`moestat.estimators.lse_kernel`, linear experts: ``q = d + 1``), the :mod:`torch.func`
kernel (:mod:`moestat.estimators.jacobians`), Levenberg--Marquardt, the SGD baseline, the scipy
reference and the pre-flight's Fisher information all read and write ``theta`` through this
module, so a coordinate means the same thing in each.

The likelihood estimators order their Newton coordinates by atom and include log-variances
(:func:`moestat.estimators.mle_newton.pack`); they never exchange vectors with the paths here.
"""

from __future__ import annotations

import torch

from moestat.model.mixing import MixingMeasure, ParameterBox

__all__ = ["block_indices", "bounds", "n_params", "pack", "unpack"]


def n_params(k: int, d: int, q: int, reference: bool) -> int:
    """``P``: free router parameters of ``k - 1`` (reference) or ``k`` atoms, plus ``k q`` expert parameters."""
    kr = k - 1 if reference else k
    return kr * (d + 1) + k * q


def unpack(theta: torch.Tensor, k: int, d: int, q: int, reference: bool):
    """``theta [..., P]`` to ``(beta0 [..., k], beta1 [..., k, d], eta [..., k, q])``."""
    kr = k - 1 if reference else k
    lead = theta.shape[:-1]
    i0, i1 = kr, kr * (d + 1)
    beta0, beta1 = theta[..., :i0], theta[..., i0:i1].reshape(*lead, kr, d)
    if reference:
        beta0 = torch.cat([beta0, theta.new_zeros(*lead, 1)], dim=-1)
        beta1 = torch.cat([beta1, theta.new_zeros(*lead, 1, d)], dim=-2)
    return beta0, beta1, theta[..., i1:].reshape(*lead, k, q)


def pack(G: MixingMeasure, reference: bool) -> torch.Tensor:
    """Free parameters ``[R, P]`` of a batched torch measure (inverse of :func:`unpack`)."""
    R = G.beta0.shape[0]
    if reference:
        return torch.cat([G.beta0[:, :-1], G.beta1[:, :-1].reshape(R, -1), G.eta.reshape(R, -1)], dim=1)
    return torch.cat([G.beta0, G.beta1.reshape(R, -1), G.eta.reshape(R, -1)], dim=1)


def block_indices(k: int, d: int, q: int, reference: bool) -> list[tuple[str, list[int]]]:
    """``(name, indices)`` of every parameter block of the layout, atom by atom: ``atom i beta0``
    and ``atom i beta1`` of the free atoms (not the reference atom), ``atom i eta`` of every atom."""
    kr = k - 1 if reference else k
    out = []
    for i in range(kr):
        out.append((f"atom {i} beta0", [i]))
    for i in range(kr):
        out.append((f"atom {i} beta1", list(range(kr + i * d, kr + (i + 1) * d))))
    base = kr * (d + 1)
    for i in range(k):
        out.append((f"atom {i} eta", list(range(base + i * q, base + (i + 1) * q))))
    order = {f"atom {i}": i for i in range(k)}
    return sorted(out, key=lambda b: (order[" ".join(b[0].split()[:2])], ["beta0", "beta1", "eta"].index(b[0].split()[2])))


def bounds(box: ParameterBox, k: int, d: int, q: int, reference: bool, like: torch.Tensor):
    """Lower/upper bounds ``[P]`` of the free parameters inside ``box``."""
    kr = k - 1 if reference else k
    ub = torch.cat(
        [like.new_full((kr,), box.beta0), like.new_full((kr * d,), box.beta1), like.new_full((k * q,), box.eta)]
    )
    return -ub, ub
