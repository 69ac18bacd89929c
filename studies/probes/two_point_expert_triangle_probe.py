"""Spot check of the weak triangle inequality for the split of an expert (``lse-ffn-vs-linear``, ``D2_ls``).

Record: none (a print-only check; its printed numbers are quoted in docs/guide/theory.rst).

For the pair (G, G'_t) of :func:`moestat.theorems.judges.expert_two_point.expert_split_witness` (atom 0 of the
entry's linear truth, ``u = (1, 1, 1) / sqrt 3``), prints the smallest ratio
``[D2_ls(Gh, G) + D2_ls(Gh, G'_t)] / D2_ls(G'_t, G)`` over two families of candidate estimates ``Gh``:
20 000 split measures (halves at ``eta - a u`` and ``eta + b u`` with ``a, b`` in ``[-2t, 2t]``, masses
``w/2 (1 -+ m)`` with ``|m| <= 0.5``, every gate and expert coordinate jittered) and 2 000 ``k*``-atom
measures (expert ``eta + c u``, ``|c| <= 2t``).  A ratio >= 1 means ``C_D = 1`` holds on the family.
``D2_ls`` does not look at the expert's form, so the numbers hold for the FFN arm's pair as well.
A spot check, not a proof: other estimates are not tried.  Seconds on one core::

    PYTHONPATH=. python studies/probes/two_point_expert_triangle_probe.py
"""
from moestat.cli.common import ArgumentParser

# no options: anything given is refused (one line, exit 2, the doors' parser) before the heavy imports
ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

import numpy as np  # noqa: E402

from moestat.losses.voronoi_spec import voronoi_loss_from_spec  # noqa: E402
from moestat.model.mixing import MixingMeasure  # noqa: E402
from moestat.theorems.judges.expert_two_point import LINEAR_FILE, entry_scenario, expert_split_witness  # noqa: E402


def rep(G, M):
    return MixingMeasure(*(np.broadcast_to(v, (M,) + v.shape).copy() for v in (G.beta0, G.beta1, G.eta)))


sc = entry_scenario(LINEAR_FILE)
G, spec = sc.truth.numpy(), sc.losses[0]
u = np.ones(3) / np.sqrt(3.0)
rng = np.random.default_rng(0)
for t in (1.0, 0.3, 0.1, 0.01, 0.001):
    Gp = expert_split_witness(G, 0, [t], u)
    Gp1 = MixingMeasure(Gp.beta0[0], Gp.beta1[0], Gp.eta[0])
    sep = float(voronoi_loss_from_spec(spec, Gp, G)[0])
    M = 20000
    a, b, m = rng.uniform(-2 * t, 2 * t, M), rng.uniform(-2 * t, 2 * t, M), rng.uniform(-0.5, 0.5, M)
    H = rep(Gp1, M)
    H.eta[:, 0] = G.eta[0] - a[:, None] * u
    H.eta[:, 1] = G.eta[0] + b[:, None] * u
    H.beta0[:, 0] += np.log1p(-m)
    H.beta0[:, 1] += np.log1p(m)
    scale = np.array([1e-3, 1e-2, 1e-1])[rng.integers(0, 3, M)] * t
    H = MixingMeasure(H.beta0 + scale[:, None] * rng.normal(size=H.beta0.shape),
                      H.beta1 + scale[:, None, None] * rng.normal(size=H.beta1.shape),
                      H.eta + scale[:, None, None] * rng.normal(size=H.eta.shape))
    tot = voronoi_loss_from_spec(spec, H, G) + voronoi_loss_from_spec(spec, H, rep(Gp1, M))
    c = rng.uniform(-2 * t, 2 * t, 2000)
    S = rep(G, 2000)
    S.eta[:, 0] += c[:, None] * u
    tot2 = voronoi_loss_from_spec(spec, S, G) + voronoi_loss_from_spec(spec, S, rep(Gp1, 2000))
    print(f"t={t:g} sep={sep:.3e} min ratio split-candidates {tot.min() / sep:.3f}  k*-atom candidates {tot2.min() / sep:.3f}")
