"""Toy generators of Krishnamurthy (2023), Sec. 3.1."""

import numpy as np
import pytest

from moestat.data.toy import (
    CLASSIFICATION_MEANS,
    ROTATION,
    SCALING,
    make_toy_classification,
    make_toy_regression,
)


def test_classification_shapes_balance_and_seeding():
    d = make_toy_classification(random_state=3)
    assert d.x_train.shape == (2400, 2) and d.x_test.shape == (600, 2)
    assert np.bincount(d.y_train).tolist() == [400] * 6 and np.bincount(d.y_test).tolist() == [100] * 6
    d2 = make_toy_classification(random_state=3)
    np.testing.assert_array_equal(d.x_train, d2.x_train)
    assert not np.array_equal(d.x_train, make_toy_classification(random_state=4).x_train)
    # each class is centred on its mean (400 draws: the mean is within 0.25 of the centre)
    for c in range(6):
        assert np.abs(d.x_train[d.y_train == c].mean(0) - CLASSIFICATION_MEANS[c]).max() < 0.25
    # the nearest-centre (Bayes) rule is about 97 % accurate, like the best thesis models
    nearest = ((d.x_test[:, None] - CLASSIFICATION_MEANS[None]) ** 2).sum(-1).argmin(1)
    assert 0.93 < (nearest == d.y_test).mean() < 0.995


def test_regression_maps():
    d = make_toy_regression(500, 100, random_state=0)
    assert d.y_train.shape == (500, 2) and set(np.unique(d.s_train)) == {0, 1}
    for s, A in ((0, ROTATION), (1, SCALING)):
        m = d.s_test == s
        np.testing.assert_allclose(d.y_test[m], d.x_test[m] @ A.T)
    np.testing.assert_allclose(ROTATION @ ROTATION.T, np.eye(2), atol=2e-4)  # R is a rotation
    noisy = make_toy_regression(500, 100, random_state=0, noise_std=0.1)
    assert not np.allclose(noisy.y_train, d.y_train)


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_train"):
        make_toy_classification(0)
    with pytest.raises(ValueError, match="random_state"):
        make_toy_classification(random_state=None)
    with pytest.raises(ValueError, match="means"):
        make_toy_regression(means=np.zeros(3))
    with pytest.raises(ValueError, match="noise_std"):
        make_toy_regression(noise_std=-1)
