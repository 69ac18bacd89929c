"""Voronoi losses of the Gaussian MoE (Nguyen, Nguyen & Ho 2023) through the loss specification."""

import pytest
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from moestat.data.gaussian_scenarios import RBAR, gaussian_loss_spec, gaussian_voronoi, model1_truth
from moestat.model.mixing import MixingMeasure


# An independent oracle: the loss written out atom by atom, as the paper states it (the
# implementation before the loss specification existed).
def _loop_normalised(b0: np.ndarray, b1: np.ndarray, cell_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift the gate so that the atoms of the reference cell carry mass 1 and mean slope 0."""
    w = np.exp(b0[cell_ref] - b0[cell_ref].max())
    w = w / w.sum()
    c0 = np.log(np.sum(np.exp(b0[cell_ref])))
    c1 = (w[:, None] * b1[cell_ref]).sum(0)
    return b0 - c0, b1 - c1


def _loop_gaussian_voronoi(fitted: MixingMeasure, truth: MixingMeasure, name: str = "D1") -> dict[str, np.ndarray]:
    """Voronoi loss ``D1`` or ``D2`` and per-atom errors of Gaussian-MoE fits.

    Parameters
    ----------
    fitted : MixingMeasure
        ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]`` (or unbatched).
    truth : MixingMeasure
        Unbatched, ``k*`` atoms.
    name : {"D1", "D2"}

    Returns
    -------
    dict of ndarray, each ``[R]``
        ``voronoi``, ``param_single``, ``param_multi`` (NaN when no atom is of that kind),
        ``mass``, ``empty_cells`` (number of true atoms with an empty cell), ``rate_terms``
        (``[R, k]`` the per-atom terms, their exponents already applied).
    """
    if name not in ("D1", "D2"):
        raise ValueError(f"name must be D1 or D2, got {name!r}")
    G = fitted.numpy()
    if not G.batch_shape:
        G = MixingMeasure(G.beta0[None], G.beta1[None], G.eta[None])
    T = truth.numpy()
    R, k = G.beta0.shape
    ks = T.n_atoms
    ref = ks - 1
    keys = ("voronoi", "param_single", "param_multi", "mass", "empty_cells")
    out = {key: np.full(R, np.nan) for key in keys}
    for r in range(R):
        b0, b1, eta = G.beta0[r], G.beta1[r], G.eta[r]
        if not (np.isfinite(b0).all() and np.isfinite(b1).all() and np.isfinite(eta).all()):
            continue
        dist = np.linalg.norm(eta[:, None, :] - T.eta[None], axis=-1)  # [k, k*]
        cell = dist.argmin(1)
        if np.any(cell == ref):
            b0, b1 = _loop_normalised(b0, b1, cell == ref)
        loss, single, multi, mass_err = 0.0, [], [], 0.0
        for j in range(ks):
            idx = np.flatnonzero(cell == j)
            mass_j = float(np.exp(b0[idx]).sum()) if idx.size else 0.0
            mass_err = max(mass_err, abs(mass_j - float(np.exp(T.beta0[j]))))
            loss += abs(mass_j - float(np.exp(T.beta0[j])))
            rb = RBAR[min(idx.size, len(RBAR)) - 1] if idx.size else 1
            num = den = 0.0  # a shared cell: the mass-weighted mean square (issue 33)
            for i in idx:
                dg = float(np.linalg.norm(b1[i] - T.beta1[j]))
                da = float(np.linalg.norm(eta[i, :-2] - T.eta[j, :-2]))
                db, dv = abs(eta[i, -2] - T.eta[j, -2]), abs(eta[i, -1] - T.eta[j, -1])
                if name == "D1" or idx.size == 1:
                    term = dg + da + db + dv
                else:  # Theorem 2: rbar for the gate slope and expert intercept, rbar/2 for slope and variance
                    term = dg**rb + da ** (rb / 2) + db**rb + dv ** (rb / 2)
                loss += float(np.exp(b0[i])) * term
                plain = float(np.sqrt(dg**2 + da**2 + db**2 + dv**2))
                if idx.size == 1:
                    single.append(plain)
                else:
                    num, den = num + float(np.exp(b0[i])) * plain**2, den + float(np.exp(b0[i]))
            if idx.size > 1:
                multi.append(float(np.sqrt(num / den)))
        out["voronoi"][r] = loss
        out["param_single"][r] = max(single) if single else np.nan
        out["param_multi"][r] = max(multi) if multi else np.nan
        out["mass"][r] = mass_err
        out["empty_cells"][r] = float(ks - np.unique(cell).size)
    return out



@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 5), st.sampled_from(["D1", "D2"]), st.sampled_from([0.01, 1.0, 10.0]))
def test_spec_loss_equals_the_atom_by_atom_loss(seed, k, name, spread):
    rng = np.random.default_rng(seed)
    T = model1_truth()
    R = 5
    pick = rng.integers(0, 2, (R, k))
    eta = np.concatenate([T.eta[pick][..., :2] + rng.normal(0, spread, (R, k, 2)),
                          np.abs(T.eta[pick][..., 2:] + rng.normal(0, 0.05, (R, k, 1)))], -1)
    b0 = rng.normal(0, 2, (R, k))
    b0[0, 0] = np.nan  # a failed fit stays NaN in every column
    G = MixingMeasure(b0, rng.normal(0, 10, (R, k, 1)), eta)
    new, ref = gaussian_voronoi(G, T, name), _loop_gaussian_voronoi(G, T, name)
    for key in ref:
        np.testing.assert_array_equal(np.isnan(new[key]), np.isnan(ref[key]))
        np.testing.assert_allclose(new[key], ref[key], rtol=1e-12, equal_nan=True)


def test_d2_exponent_tables_follow_theorem_2():
    spec = gaussian_loss_spec("D2")
    sizes = np.array([1, 2, 3, 4])
    ex = {b.label: b.exponent(sizes).tolist() for b in spec.blocks}
    assert ex["beta1"] == ex["b"] == [1.0, *RBAR[1:], RBAR[-1]]  # rbar(m) = 1, 4, 6
    assert ex["a"] == ex["variance"] == [1.0, 2.0, 3.0, 3.0]  # rbar(m) / 2, a lone atom at 1
    assert spec.cell_blocks == ("a", "b", "variance") and spec.mass == "softmax"
    assert {b.exponent(sizes).tolist()[1] for b in gaussian_loss_spec("D1").blocks} == {1.0}
