"""Shared by the Gaussian-MoE benchmarks: replicates of a model-1 scenario and their near-truth starts.

Data and start of replicate ``r`` come from the rates sweep's streams
(:func:`moestat.rates.sweep.replicate_streams`), so a benchmark fits the very data a
``moestat rates`` run with the same seed fits.
"""

from __future__ import annotations

import numpy as np

from moestat.estimators.starts import near_truth_init
from moestat.model.mixing import MixingMeasure
from moestat.rates.sweep import replicate_streams


def model1_batch(sc, n: int, reps: int, seed: int, init_scale: float):
    """``X [reps, n, d]``, ``Y [reps, n]`` and the near-truth starts (a batched MixingMeasure)."""
    Xs, Ys, G = [], [], []
    for r in range(reps):
        data_ss, init_ss = replicate_streams(seed, n, r)
        X, Y = sc.sample(n, np.random.default_rng(data_ss))
        Xs.append(X)
        Ys.append(Y)
        G.append(near_truth_init(sc.truth, sc.k_fit, init_scale, np.random.default_rng(init_ss), log_last=True))
    return np.stack(Xs), np.stack(Ys), MixingMeasure.stack(G)
