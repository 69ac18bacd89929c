"""moestat.seeding: the one place where seeds become numpy and torch generators."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from moestat.seeding import int_seed, numpy_generator, spawn_int_seeds, torch_generator

SEEDS = st.integers(0, 2**63 - 1)


# ---- numpy_generator -----------------------------------------------------------------------

@given(seed=SEEDS)
def test_numpy_same_int_same_stream(seed):
    a, b = numpy_generator(seed), numpy_generator(seed)
    assert np.array_equal(a.random(8), b.random(8))
    # the same stream as numpy's own constructor: switching a module to numpy_generator changes no number
    assert np.array_equal(numpy_generator(seed).random(8), np.random.default_rng(seed).random(8))


def test_numpy_numpy_integer_is_an_int_seed():
    assert np.array_equal(numpy_generator(np.int64(7)).random(4), numpy_generator(7).random(4))


def test_numpy_seed_sequence_same_stream_and_distinct_children():
    ss = np.random.SeedSequence(12345)
    assert np.array_equal(numpy_generator(ss).random(5), np.random.default_rng(ss).random(5))
    c1, c2 = np.random.SeedSequence(12345).spawn(2)
    assert not np.array_equal(numpy_generator(c1).random(5), numpy_generator(c2).random(5))


def test_numpy_generator_is_returned_as_is():
    g = np.random.default_rng(0)
    assert numpy_generator(g) is g


def test_numpy_none_only_when_allowed():
    with pytest.raises(ValueError, match="no global randomness"):
        numpy_generator(None)
    assert isinstance(numpy_generator(None, allow_none=True), np.random.Generator)


@pytest.mark.parametrize("bad, exc, match", [
    (True, TypeError, "bool"),
    (False, TypeError, "bool"),
    (1.5, TypeError, "float"),
    ("3", TypeError, "str"),
    (-1, ValueError, "non-negative"),
    (np.int64(-3), ValueError, "non-negative"),
])
def test_numpy_refuses_non_seeds(bad, exc, match):
    with pytest.raises(exc, match=match):
        numpy_generator(bad)


# ---- int_seed / spawn_int_seeds ------------------------------------------------------------

@given(entropy=st.integers(0, 2**128), key=st.lists(st.integers(0, 2**32 - 1), max_size=3))
def test_int_seed_is_first_state_word_shifted(entropy, key):
    ss = np.random.SeedSequence(entropy, spawn_key=tuple(key))
    word = int(np.random.SeedSequence(entropy, spawn_key=tuple(key)).generate_state(1, np.uint64)[0])
    s = int_seed(ss)
    assert s == word >> 1
    assert 0 <= s < 2**63
    assert int_seed(ss) == s  # reading a SeedSequence does not advance it


def test_int_seed_refuses_non_seed_sequence():
    with pytest.raises(TypeError, match="SeedSequence"):
        int_seed(3)


def test_spawn_int_seeds_children_and_prefix_property():
    seeds = spawn_int_seeds(2024, 4)
    children = np.random.SeedSequence(2024).spawn(4)
    assert seeds == [int_seed(c) for c in children]
    assert len(set(seeds)) == 4
    assert spawn_int_seeds(2024, 2) == seeds[:2]  # child i does not depend on how many are drawn
    assert spawn_int_seeds(2024, 0) == []


@pytest.mark.parametrize("bad, count, exc", [
    (True, 2, TypeError),
    (-1, 2, ValueError),
    (None, 2, TypeError),
    (np.random.SeedSequence(1), 2, TypeError),
    (1, -1, ValueError),
    (1, 2.0, ValueError),
])
def test_spawn_int_seeds_refusals(bad, count, exc):
    with pytest.raises(exc):
        spawn_int_seeds(bad, count)


# ---- torch_generator -----------------------------------------------------------------------

@given(seed=st.integers(0, 2**64 - 1))
def test_torch_same_int_same_stream(seed):
    a, b = torch_generator(seed), torch_generator(seed)
    assert a.initial_seed() == seed
    assert torch.equal(torch.rand(6, generator=a), torch.rand(6, generator=b))


def test_torch_seed_sequence_goes_through_int_seed():
    ss = np.random.SeedSequence(99)
    g = torch_generator(ss)
    assert g.initial_seed() == int_seed(np.random.SeedSequence(99))
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=torch_generator(np.random.SeedSequence(99))))


def test_torch_generator_is_returned_as_is_and_device():
    g = torch.Generator().manual_seed(1)
    assert torch_generator(g) is g
    assert torch_generator(3, device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize("bad, exc, match", [
    (None, ValueError, "no global randomness"),
    (True, TypeError, "bool"),
    (np.random.default_rng(0), TypeError, "numpy Generator"),
    (-5, ValueError, "non-negative"),
    (2**64, ValueError, "2\\*\\*64"),
    (2.0, TypeError, "float"),
])
def test_torch_refuses_non_seeds(bad, exc, match):
    with pytest.raises(exc, match=match):
        torch_generator(bad)
