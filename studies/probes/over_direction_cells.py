"""Which fitted atoms carry the over-specified beta1 direction error (the cause behind thm3's part (c)).

Record: none (a print-only check; its printed numbers are quoted in docs/guide/theory.rst).

Fits ``reps`` replicates of the over-specified scenario (``make_scenario(router, "over")``, the
rates engine's streams with seed 0, near-truth start with noise 0.05, least squares, 1000
iterations) and prints, for the start and the fit, each fitted atom's Voronoi cell, ``||beta1||``,
direction error ``||u - u*||`` and mass ``exp(beta0)``.  Usage (about a minute on one core)::

    PYTHONPATH=. python studies/probes/over_direction_cells.py cosine 4000 4
"""
from moestat.cli.common import ArgumentParser, positive_int

# parsed before the heavy imports: a bad option is one line, exit 2 (the doors' parser), at once
ap = ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("router", choices=("perturbed", "cosine", "linear"))  # moestat.model.gates.GATE_KINDS
ap.add_argument("n", type=positive_int)
ap.add_argument("reps", type=positive_int)
args = ap.parse_args()
router, n, reps = args.router, args.n, args.reps

import numpy as np  # noqa: E402
from moestat.data.synthetic import make_scenario  # noqa: E402
from moestat.estimators.starts import near_truth_init  # noqa: E402
from moestat.losses.cell_errors import beta1_decomposition  # noqa: E402
from moestat.model.mixing import MixingMeasure  # noqa: E402
from moestat.rates.resolve import build_estimator  # noqa: E402
from moestat.rates.sweep import replicate_streams  # noqa: E402
sc = make_scenario(router, "over")
T = sc.truth.numpy(); print("true norms", np.linalg.norm(T.beta1, axis=1))
Xs, Ys, st = [], [], []
for r in range(reps):
    d, i = replicate_streams(0, n, r)
    X, Y = sc.sample(n, np.random.default_rng(d)); Xs.append(X); Ys.append(Y)
    st.append(near_truth_init(sc.truth, sc.k_fit, 0.05, np.random.default_rng(i), n=n))
G0 = MixingMeasure.stack(st)
est = build_estimator("lse", sc, 1000, 1, "cpu"); est.fit(np.stack(Xs), np.stack(Ys), init=G0)
for tag, G in (("start", G0.numpy()), ("fit", est.params_.numpy())):
    dec = beta1_decomposition(G, sc.truth)
    for r in range(reps):
        cells = dec["cell"][r]
        print(tag, r, "cells", cells.tolist(), "norms", np.round(np.linalg.norm(G.beta1[r], axis=1), 3).tolist(),
              "dir err", np.round(dec["direction"][r], 3).tolist(), "w", np.round(np.exp(G.beta0[r]), 3).tolist())
