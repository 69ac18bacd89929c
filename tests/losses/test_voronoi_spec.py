"""Voronoi losses from a specification (issue 14) and the two issue-13 input checks."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moestat import MixingMeasure
from moestat.losses import cell_parameter_errors, cell_terms, voronoi_loss
from moestat.losses.voronoi_spec import (
    BlockSpec,
    ExponentTable,
    LossSpec,
    builtin_spec,
    cell_terms_from_spec,
    spec_from_mapping,
    voronoi_loss_from_spec,
)


def _random_pair(seed, k_star, k, d, q, batch=(4,)):
    rng = np.random.default_rng(seed)
    truth = MixingMeasure(rng.normal(size=k_star), rng.normal(size=(k_star, d)), rng.normal(size=(k_star, q)))
    # fitted atoms near random true atoms, so that cells of size 1, 2, 3 and empty cells all occur
    idx = rng.integers(0, k_star, size=batch + (k,))
    fitted = MixingMeasure(
        truth.beta0[idx] + 0.3 * rng.normal(size=idx.shape),
        truth.beta1[idx] + 0.3 * rng.normal(size=idx.shape + (d,)),
        truth.eta[idx] + 0.3 * rng.normal(size=idx.shape + (q,)),
    )
    return fitted, truth


@given(
    seed=st.integers(0, 2**32 - 1),
    k_star=st.integers(1, 4),
    extra=st.integers(0, 3),
    d=st.integers(1, 3),
    q=st.integers(1, 4),
    loss=st.sampled_from(["D1", "D2", "D3"]),
    r=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    metric=st.sampled_from(["euclidean", "block"]),
    direction=st.booleans(),
    data=st.data(),
)
def test_builtin_specs_reproduce_voronoi_loss_bit_for_bit(seed, k_star, extra, d, q, loss, r, metric, direction, data):
    fitted, truth = _random_pair(seed, k_star, k_star + extra, d, q)
    K = data.draw(st.one_of(st.none(), st.integers(1, k_star)))
    spec = builtin_spec(loss, r=r, metric=metric, direction=direction, k_active=K)
    got = voronoi_loss_from_spec(spec, fitted, truth)
    want = voronoi_loss(fitted, truth, loss, k_active=K, r=r, metric=metric, direction=direction)
    assert got.shape == want.shape == (4,)
    np.testing.assert_array_equal(got, want)  # bit for bit, not approximately
    ct, legacy = cell_terms_from_spec(spec, fitted, truth), cell_terms(fitted, truth, loss, r, metric, direction)
    for key in ("terms", "sizes", "cells", "param_part", "mass_part"):
        np.testing.assert_array_equal(ct[key], legacy[key])


def test_per_atom_errors_match_cell_parameter_errors():
    fitted, truth = _random_pair(3, 3, 6, 2, 3, batch=(50,))
    ct = cell_terms_from_spec(builtin_spec("D2"), fitted, truth)
    own_size = np.take_along_axis(ct["sizes"], ct["cells"], axis=-1)
    single = np.where(own_size == 1, ct["atom_errors"], -np.inf).max(axis=-1)
    single = np.where(np.isfinite(single), single, np.nan)
    np.testing.assert_array_equal(single, cell_parameter_errors(fitted, truth)["single"])
    # plain block errors recombine into the euclidean cell distance
    np.testing.assert_allclose(np.hypot(ct["block_errors"]["beta1"], ct["block_errors"]["eta"]), ct["atom_errors"], rtol=1e-14)
    np.testing.assert_allclose(ct["weights"], np.exp(fitted.beta0))


def test_gaussian_moe_loss_by_hand():
    """Nguyen, Nguyen & Ho (2023)-style table: location rbar(m), variance rbar(m)/2; eta = [a (d), b, sigma^2]."""
    rbar = ExponentTable.named("rbar")
    spec = LossSpec(
        "gauss",
        blocks=(
            BlockSpec("beta1", "beta1", rbar),
            BlockSpec("a", "eta[:d]", rbar),
            BlockSpec("b", "eta[d]", rbar),
            BlockSpec("var", "eta[d+1]", ExponentTable.named("rbar", scale=0.5)),
        ),
    )
    d = 1
    truth = MixingMeasure(np.array([0.0, 0.0]), np.array([[1.0], [-5.0]]), np.array([[1.0, 0.0, 1.0], [-1.0, 0.0, 1.0]]))
    half = math.log(0.5)
    fitted = MixingMeasure(
        np.array([half, half, 0.0]),
        np.array([[1.1], [0.9], [-5.0]]),
        np.array([[1.0, 0.2, 1.5], [1.0, 0.0, 1.0], [-1.0, 0.1, 0.64]]),
    )
    assert spec.blocks[1].columns(fitted).shape == (3, d) and spec.blocks[3].columns(fitted).tolist() == [[1.5], [1.0], [0.64]]
    # cell 0 has 2 atoms: exponents 4 (beta1, a, b) and 2 (variance); cell 1 has 1 atom: exponents 1 and 0.5
    c0 = 0.5 * (0.1**4 + 0 + 0.2**4 + 0.5**2) + 0.5 * (0.1**4 + 0 + 0 + 0)
    c1 = 1.0 * (0 + 0 + 0.1 + 0.36**0.5)
    assert voronoi_loss_from_spec(spec, fitted, truth) == pytest.approx(c0 + c1, rel=1e-13)
    assert voronoi_loss_from_spec(LossSpec("g1", spec.blocks, k_active=1), fitted, truth) == pytest.approx(max(c0, c1), rel=1e-13)


def test_mass_terms():
    truth = MixingMeasure(np.array([0.0]), np.array([[1.0]]), np.zeros((1, 1)))
    fitted = MixingMeasure(np.array([1.0]), np.array([[1.5]]), np.zeros((1, 1)))
    blocks = (BlockSpec("beta1", "beta1"),)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert voronoi_loss_from_spec(LossSpec("s", blocks, "softmax"), fitted, truth) == pytest.approx(math.e * 0.5 + math.e - 1)
    assert voronoi_loss_from_spec(LossSpec("s", blocks, "sigmoid"), fitted, truth) == pytest.approx(sig(1) * 0.5 + sig(1) - 0.5)
    assert voronoi_loss_from_spec(LossSpec("s", blocks, "none"), fitted, truth) == pytest.approx(0.5)
    # a beta0 block: the intercept as a parameter
    b0 = LossSpec("b0", (BlockSpec("beta0", "beta0", ExponentTable.constant(2.0)),), "none")
    assert voronoi_loss_from_spec(b0, fitted, truth) == pytest.approx(1.0)


def test_a_fit_whose_gate_intercept_left_exp_range_has_an_infinite_loss_without_a_warning():
    """A diverged fit (a separated class puts the MLE's intercept at infinity) gets D = inf, which
    the rate fit reports as non-finite; the overflow is not printed to the user as a RuntimeWarning."""
    import warnings

    truth = MixingMeasure(np.array([0.0]), np.array([[1.0]]), np.zeros((1, 1)))
    fitted = MixingMeasure(np.array([800.0]), np.array([[1.5]]), np.zeros((1, 1)))
    blocks = (BlockSpec("beta1", "beta1"),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert voronoi_loss_from_spec(LossSpec("s", blocks, "softmax"), fitted, truth) == math.inf


def test_exponent_tables():
    sizes = np.array([0, 1, 2, 3, 4, 9])
    assert ExponentTable((1, 4, 6))(sizes).tolist() == [1, 1, 4, 6, 6, 6]
    assert ExponentTable.constant(2.5)(sizes).tolist() == [2.5] * 6
    assert ExponentTable.named("rbar", 0.5)(sizes).tolist() == [0.5, 0.5, 2, 3, 3, 3]
    for bad in ((), (0.0,), (-1.0,), (float("nan"),)):
        with pytest.raises(ValueError):
            ExponentTable(bad)
    with pytest.raises(ValueError, match="unknown exponent table"):
        ExponentTable.named("nope")


def test_spec_from_mapping_and_errors():
    s = spec_from_mapping({"name": "D2", "builtin": "D2", "k_active": 2})
    assert s == builtin_spec("D2", k_active=2)
    g = spec_from_mapping(
        {"name": "g", "mass": "none", "blocks": [{"label": "v", "source": "eta[d+1]", "exponent": {"table": "rbar", "scale": 0.5}}, {"label": "a", "source": "eta[0:2]", "exponent": [1, 2]}]}
    )
    assert g.mass == "none" and g.blocks[0].exponent.scale == 0.5 and g.blocks[1].exponent.values == (1.0, 2.0)
    for bad, msg in (
        ({"builtin": "D2"}, "missing key 'name'"),
        ({"name": "x", "builtin": "D9"}, "unknown Voronoi loss"),
        ({"name": "x", "blocks": [{"label": "a", "source": "gamma"}]}, "bad block source"),
        ({"name": "x", "blocks": [{"label": "a", "source": "eta[q]"}]}, "bad index"),
        ({"name": "x", "blocks": [{"label": "a", "source": "eta", "exponent": True}]}, "exponent must be"),
        ({"name": "x", "mass": "tanh", "blocks": [{"label": "a", "source": "eta"}]}, "unknown mass"),
        ({"name": "x", "k_active": 0, "builtin": "D3"}, "k_active"),
    ):
        with pytest.raises(ValueError, match=msg) as e:
            spec_from_mapping(bad, where="losses[0] in f.toml")
        assert str(e.value).startswith("losses[0] in f.toml")


def test_block_selecting_no_column_is_an_error():
    fitted, truth = _random_pair(0, 2, 2, 2, 3, batch=())
    spec = LossSpec("x", (BlockSpec("v", "eta[d+5]"),))
    with pytest.raises(ValueError, match="selects no column"):
        voronoi_loss_from_spec(spec, fitted, truth)


# ---- issue 13: two inputs that used to give a wrong answer or a confusing error ---------------------
def test_voronoi_loss_rejects_arrays_with_type_error():
    G = MixingMeasure(np.zeros(2), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    with pytest.raises(TypeError, match="fitted must be a MixingMeasure, got ndarray"):
        voronoi_loss(np.zeros((2, 3)), G)
    with pytest.raises(TypeError, match="truth must be a MixingMeasure, got list"):
        voronoi_loss(G, [1, 2])
    with pytest.raises(TypeError, match="fitted must be a MixingMeasure"):
        voronoi_loss_from_spec(builtin_spec("D3"), np.zeros(3), G)


def test_k_active_above_k_star_raises():
    G = MixingMeasure(np.zeros(2), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 3)))
    F = MixingMeasure(np.zeros(2) + 0.1, G.beta1, G.eta)
    with pytest.raises(ValueError, match=r"k_active=99 exceeds the number of true atoms k\*=2"):
        voronoi_loss(F, G, k_active=99)
    with pytest.raises(ValueError, match="k_active=3 exceeds"):
        voronoi_loss_from_spec(builtin_spec("D3", k_active=3), F, G)
    with pytest.raises(ValueError, match="k_active must be >= 1"):
        voronoi_loss(F, G, k_active=0)
    assert voronoi_loss(F, G, k_active=2) == voronoi_loss(F, G)  # K = k* is the dense loss


def test_predicted_exponent_mapping_takes_precedence():
    from moestat.rates.fit import predicted_exponent

    assert predicted_exponent("linear", "exact", "D_sigmoid") is None
    assert predicted_exponent("linear", "exact", "D_sigmoid", predicted={"D_sigmoid": -0.5}) == -0.5
    assert predicted_exponent("perturbed", "exact", "voronoi", predicted={"voronoi": None}) is None
    assert predicted_exponent("perturbed", "exact", "voronoi", predicted={"other": -1.0}) == -0.5
