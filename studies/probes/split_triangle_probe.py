"""Spot check of Lemma 2's weak triangle inequality for the split witness (perturbed router, D_2).

Record: none (a print-only check; its printed numbers are quoted in docs/guide/theory.rst).

For the pair (G, G'_t) of :func:`moestat.theorems.judges.two_point.split_witness` (atom 1 of the default
over-specified scenario), prints the smallest ratio ``[D2(Gh, G) + D2(Gh, G'_t)] / D2(G'_t, G)``
over two families of candidate estimates ``Gh``: 20 000 split measures (radii ``1 - a``, ``1 + b``
with ``|a|, |b| <= 2t``, masses ``w/2 (1 -+ m)`` with ``|m| <= 0.5``, every coordinate jittered) and
2 000 ``k*``-atom measures (radius ``1 + u``).  A ratio >= 1 means ``C_D = 1`` holds on the family.
A spot check, not a proof: other estimates are not tried.  Seconds on one core::

    PYTHONPATH=. python studies/probes/split_triangle_probe.py
"""
from moestat.cli.common import ArgumentParser

# no options: anything given is refused (one line, exit 2, the doors' parser) before the heavy imports
ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

import numpy as np  # noqa: E402
from moestat.data.synthetic import make_scenario  # noqa: E402
from moestat.model.mixing import MixingMeasure  # noqa: E402
from moestat.losses.voronoi import voronoi_loss  # noqa: E402
from moestat.theorems.judges.two_point import split_witness  # noqa: E402
sc = make_scenario("perturbed", "over"); G = sc.truth.numpy(); j = 1
rng = np.random.default_rng(0)
for t in (0.3, 0.1, 0.03, 0.01, 0.003, 0.001):
    Gp = split_witness(G, j, [t])
    sep = float(voronoi_loss(Gp, G, "D2")[0])
    cands = []
    # split candidates: radii 1-a, 1+b, masses w/2*(1-m), w/2*(1+m) (plus random jitter in every coordinate)
    M = 20000
    a = rng.uniform(-2 * t, 2 * t, M); b = rng.uniform(-2 * t, 2 * t, M); m = rng.uniform(-0.5, 0.5, M)
    jit = rng.normal(size=(M, 1, 1)) * np.array([1e-3, 1e-2, 1e-1])[rng.integers(0, 3, M)][:, None, None] * t
    base = np.broadcast_to(Gp.beta0[0], (M, G.n_atoms + 1)).copy()
    b1 = np.broadcast_to(Gp.beta1[0], (M,) + Gp.beta1.shape[1:]).copy()
    eta = np.broadcast_to(Gp.eta[0], (M,) + Gp.eta.shape[1:]).copy()
    b1[:, j] = G.beta1[j] * (1 - a)[:, None]; b1[:, -1] = G.beta1[j] * (1 + b)[:, None]
    b1 = b1 + jit * rng.normal(size=b1.shape)
    base[:, j] += np.log1p(-m); base[:, -1] += np.log1p(m)
    Gh = MixingMeasure(base, b1, eta)
    # D2 against the batched truth G'_t: broadcast the truth
    Gpb = MixingMeasure(np.broadcast_to(Gp.beta0[0], base.shape).copy(), np.broadcast_to(Gp.beta1[0], b1.shape).copy(),
                        np.broadcast_to(Gp.eta[0], eta.shape).copy())
    tot = voronoi_loss(Gh, G, "D2") + voronoi_loss(Gh, Gpb, "D2")
    # single-atom candidates (k* atoms): radius 1 + u
    u = rng.uniform(-2 * t, 2 * t, 2000)
    Gs = MixingMeasure(np.broadcast_to(G.beta0, (2000, G.n_atoms)).copy(), np.broadcast_to(G.beta1, (2000,) + G.beta1.shape).copy(),
                       np.broadcast_to(G.eta, (2000,) + G.eta.shape).copy())
    Gs.beta1[:, j] *= (1 + u)[:, None]
    Gpb2 = MixingMeasure(np.broadcast_to(Gp.beta0[0], (2000, G.n_atoms + 1)).copy(), np.broadcast_to(Gp.beta1[0], (2000,) + Gp.beta1.shape[1:]).copy(),
                         np.broadcast_to(Gp.eta[0], (2000,) + Gp.eta.shape[1:]).copy())
    tot2 = voronoi_loss(Gs, G, "D2") + voronoi_loss(Gs, Gpb2, "D2")
    print(f"t={t:g} sep={sep:.3e} min ratio split-candidates {tot.min()/sep:.3f}  single-candidates {tot2.min()/sep:.3f}")
