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
