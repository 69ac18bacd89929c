"""The paper-style synthetic scenario's regression function on a batch of data sets."""

import numpy as np
import pytest

from moestat.data.synthetic import make_scenario


@pytest.mark.parametrize("router", ["perturbed", "cosine", "linear"])
def test_batched_regression_function_equals_one_data_set_at_a_time(router):
    """A batch ``[..., n, d]`` is evaluated one data set at a time (issue 36); each value depends
    only on its own row, so the batch gives exactly the values of the single data sets (the
    truth's criterion on a work unit's stacked data repeats what sampling computed)."""
    sc = make_scenario(router)
    rng = np.random.default_rng(5)
    X = rng.uniform(-1.0, 1.0, size=(2, 3, 50, sc.d))
    out = sc.regression_function(X)
    assert out.shape == (2, 3, 50)
    for i in range(2):
        for j in range(3):
            assert np.array_equal(out[i, j], sc.regression_function(X[i, j]))
    # and it is the model's regression function at the truth
    Xs, Ys = sc.sample(40, 7)
    assert Xs.shape == (40, sc.d) and Ys.shape == (40,)
    noise = Ys - sc.regression_function(Xs)
    assert np.all(np.abs(noise) < 10 * np.sqrt(sc.noise_var))


def test_regression_function_rejects_wrong_width():
    sc = make_scenario("perturbed")
    with pytest.raises(ValueError, match="columns"):
        sc.regression_function(np.zeros((2, 5, sc.d + 1)))


@pytest.mark.parametrize("router", ["perturbed", "linear"])
def test_sample_with_mean_draws_what_sample_draws_and_the_truths_regression_function(router):
    """``sample_with_mean`` (issue 36: a work unit keeps ``g_{G*}(X)`` of its draw for the truth's
    criterion) gives the same ``(X, Y)`` as ``sample`` on the same stream, and its mean is the
    regression function at ``X`` -- bit for bit, as the unit's rows must not change."""
    sc = make_scenario(router)
    X0, Y0 = sc.sample(300, 11)
    X1, Y1, mean = sc.sample_with_mean(300, 11)
    assert np.array_equal(X0, X1) and np.array_equal(Y0, Y1)
    assert np.array_equal(mean, sc.regression_function(X1))


def test_knowing_mean_answers_for_that_array_only_and_leaves_the_scenario_alone():
    sc = make_scenario("perturbed")
    draws = [sc.sample_with_mean(200, s) for s in (1, 2, 3)]
    X = np.stack([d[0] for d in draws])
    mean = np.stack([d[2] for d in draws])
    # the stacked means are the batched regression function of the stacked inputs
    assert np.array_equal(mean, sc.regression_function(X))
    known = sc.knowing_mean(X, mean)
    assert known == sc and known is not sc
    planted = np.full_like(mean, 7.0)  # a recorded value is returned as recorded, for that very array
    assert np.array_equal(sc.knowing_mean(X, planted).regression_function(X), planted)
    # an equal copy of X, or another array, is computed
    assert np.array_equal(sc.knowing_mean(X, planted).regression_function(X.copy()), mean)
    assert np.array_equal(known.regression_function(X[:2]), mean[:2])
    # the scenario itself computes, and a caller's change to the answer does not reach the record
    assert np.array_equal(sc.regression_function(X), mean)
    out = known.regression_function(X)
    out[:] = 0.0
    assert np.array_equal(known.regression_function(X), mean)
    with pytest.raises(ValueError, match="shape"):
        sc.knowing_mean(X, mean[:, :10])
