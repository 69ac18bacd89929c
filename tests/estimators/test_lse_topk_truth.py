"""The least-squares fit of a sparse (Top-K) gate against the truth's sum of squares on the same data.

The seed paper's sparse setting (Nguyen et al. (2024), eq. (9) with Top-2-of-3 routing, tanh
experts, d = 4, exact fit).  The truth is a feasible point of the least-squares problem, so a fit
in its basin ends with a sum of squares at most the truth's.  What is *guaranteed* is narrower:
started at the truth itself, a method that accepts only steps that lower the objective (the hard
path of :class:`~moestat.estimators.lse.LeastSquaresMoE`, kept when it is the better one) never
ends above the truth's objective.  From a near-truth start the continuation on the Top-K
temperature has to carry the selection boundaries to the truth's; these data are ones where the
former fixed schedule (``T`` down to ``1e-3`` only) ended above the truth and the ladder does not.
"""

import numpy as np
import pytest
import torch

from moestat.data.synthetic import make_scenario
from moestat.estimators import LeastSquaresMoE
from moestat.model.mixing import MixingMeasure

N, R = 2000, 2


@pytest.fixture(scope="module")
def sparse_data():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every sweep work unit runs; the test is small
    sc = make_scenario("perturbed", "exact", d=4, k_true=3, k_active=2, expert="tanh")
    rng = np.random.default_rng(0)
    XY = [sc.sample(N, rng) for _ in range(R)]
    X = np.stack([a for a, _ in XY])
    Y = np.stack([b for _, b in XY])
    truth_sse = np.sum((Y - sc.regression_function(X)) ** 2, -1)
    near = MixingMeasure.stack([sc.near_truth_start(0.05, rng, n=N) for _ in range(R)])
    yield sc, X, Y, truth_sse, near
    torch.set_num_threads(threads)


def _sse(sc, X, Y, init, **kw):
    est = LeastSquaresMoE(sc.fit_model, sc.k_fit, box=sc.box, **kw).fit(X, Y, init=init)
    return N * est.objective_, est


def test_a_topk_fit_from_the_truth_never_ends_above_the_truths_objective(sparse_data):
    sc, X, Y, truth_sse, _ = sparse_data
    start = MixingMeasure.stack([sc.truth] * R)
    for temps in ("auto", None):  # with the continuation, and the hard gate alone
        sse, est = _sse(sc, X, Y, start, topk_temperatures=temps)
        # only the rounding of the two sums separates equal values
        assert np.all(sse <= truth_sse * (1 + 1e-12)), (temps, truth_sse - sse)


def test_a_topk_fit_from_a_near_truth_start_reaches_the_truths_objective(sparse_data):
    sc, X, Y, truth_sse, near = sparse_data
    sse, est = _sse(sc, X, Y, near)
    assert np.all(sse <= truth_sse), truth_sse - sse
    assert all(s in ("ftol", "xtol", "gtol") for s in est.status_)
    # the former fixed schedule stopped on the wrong side of the truth for one of these replicates
    old, _ = _sse(sc, X, Y, near, topk_temperatures=(0.1, 0.01, 0.001))
    assert np.any(old > truth_sse)
