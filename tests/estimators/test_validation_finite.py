"""``moestat.estimators.validation.all_finite``: the data check of every fit (issue 36: the sum first)."""

import math

import pytest
import torch

from moestat.estimators.validation import all_finite, prepare_data


@pytest.mark.parametrize("values,expected", [
    ([0.0, 1.0, -2.5], True),
    ([], True),
    ([1e308, 1e308, 1e308], True),  # finite entries whose sum overflows: the entrywise test decides
    ([-1e308, -1e308], True),
    ([1.0, math.nan], False),
    ([1.0, math.inf], False),
    ([-math.inf, 2.0], False),
    ([math.inf, -math.inf], False),  # the sum is NaN
    ([1e308, 1e308, math.nan], False),
])
def test_all_finite_is_the_entrywise_test(values, expected):
    t = torch.tensor(values, dtype=torch.float64)
    assert all_finite(t) is expected
    assert all_finite(t) == bool(torch.isfinite(t).all())


def test_prepare_data_still_refuses_non_finite_data():
    X = torch.zeros(2, 30, 2, dtype=torch.float64)
    Y = torch.zeros(2, 30, dtype=torch.float64)
    assert prepare_data(X, Y, 2, torch.device("cpu"))[0].shape == (2, 30, 2)
    X[1, 3, 0] = math.nan
    with pytest.raises(ValueError, match="X contains non-finite"):
        prepare_data(X, Y, 2, torch.device("cpu"))
    X[1, 3, 0] = 0.0
    Y[0, 0] = -math.inf
    with pytest.raises(ValueError, match="Y contains non-finite"):
        prepare_data(X, Y, 2, torch.device("cpu"))
