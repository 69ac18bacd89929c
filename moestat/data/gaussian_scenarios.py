"""Gaussian mixture-of-experts scenarios and their Voronoi losses (Nguyen, Nguyen & Ho 2023).

A :class:`GaussianMoEScenario` has what :mod:`moestat.rates.sweep` asks of a scenario (``name``,
``setting``, ``d``, ``k_fit``, ``truth``, ``box``, ``sample``, ``holdout``) and its own
:meth:`~GaussianMoEScenario.losses`.  Its measures are :class:`~moestat.model.mixing.MixingMeasure`
objects with ``eta_i = (a_i, b_i, sigma_i^2)`` (:mod:`moestat.model.gaussian_moe`).

Voronoi losses (Nguyen, Nguyen & Ho 2023, Section 3 (exact) and Section 4 (over-fitted)).  The
cell ``A_j`` of a true atom ``j`` holds the fitted atoms nearer to it than to any other true atom
(distance on the expert parameters ``(a, b, sigma^2)``, which softmax translations leave
unchanged).  With ``Delta`` the difference between a fitted atom and its cell's true atom::

    D1 = sum_j |sum_{A_j} exp(beta0_i) - exp(beta0*_j)|
       + sum_j sum_{A_j} exp(beta0_i) (|Dbeta1| + |Da| + |Db| + |Dsigma^2|)
    D2 = sum_j |sum_{A_j} exp(beta0_i) - exp(beta0*_j)|
       + sum_{j: |A_j| = 1} sum_{A_j} exp(beta0_i) (|Dbeta1| + |Da| + |Db| + |Dsigma^2|)
       + sum_{j: |A_j| > 1} sum_{A_j} exp(beta0_i) (|Dbeta1|^rbar + |Da|^(rbar/2) + |Db|^rbar + |Dsigma^2|^(rbar/2))

with ``rbar(|A_j|) = 1, 4, 6`` for cells of 1, 2, 3 atoms (their Theorem 2; the solvability
number of their system of polynomial equations); both losses go like ``n^{-1/2}`` (Theorems 1
and 2), hence an atom alone in its cell is estimated at ``n^{-1/2}``, and an atom sharing a cell
of two at ``n^{-1/8}`` (``beta1``, ``b``) and ``n^{-1/4}`` (``a``, ``sigma^2``).

The fitted gate is compared with the truth's after fixing softmax's translation freedom: the
shift that makes the fitted atom(s) in the reference atom's cell the reference (for a cell of
several atoms, the cell's total mass 1 and its mass-weighted ``beta1`` 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moestat.data.synthetic import ScenarioBase
from moestat.losses.voronoi import weighted_multi_error
from moestat.losses.voronoi_spec import BlockSpec, ExponentTable, LossSpec, cell_terms_from_spec
from moestat.model.declaration import FitDeclaration
from moestat.model.gaussian_moe import log_likelihood, mean_function, sample_y
from moestat.model.mixing import MixingMeasure
from moestat.seeding import numpy_generator

__all__ = ["GaussianMoEScenario", "model1_truth", "model1_scenario", "gmoe_predicted", "gaussian_voronoi", "declared_voronoi", "gaussian_loss_spec", "RBAR",
           "INPUT_LAWS"]

#: rbar(#A_j) for cells of 1, 2, 3 atoms (Nguyen, Nguyen & Ho 2023, Theorem 2); cells of more
#: atoms use the last entry (not covered by the theorem's table).
RBAR = (1, 4, 6)
INPUT_LAWS = ("uniform", "grid")


def model1_truth() -> MixingMeasure:
    """Model 1 of Nguyen, Nguyen & Ho (2023), Section 5: d = 1, K* = 2.

    Gate ``(beta0, beta1) = (-8, 25)`` for expert 1, the reference ``(0, 0)`` for expert 2;
    experts ``(b, a) = (15, -20)`` and ``(-5, 20)``; standard deviations 0.3 and 0.4.
    """
    return MixingMeasure(
        np.array([-8.0, 0.0]), np.array([[25.0], [0.0]]), np.array([[-20.0, 15.0, 0.09], [20.0, -5.0, 0.16]])
    )


@dataclass(frozen=True)
class GaussianMoEScenario(ScenarioBase):
    """A softmax-gated Gaussian MoE truth, its input law and the number of fitted atoms.

    Parameters
    ----------
    name : str
    truth : MixingMeasure
        Unbatched, ``eta [k*, d + 2]``, last atom the reference.
    k_fit : int
        Fitted atoms (``k*``: exact, more: over-fitted).
    input_law : {"uniform", "grid"}
        ``Uniform[0, 1]^d`` inputs, or the peers' deterministic ``linspace(0, 1, n)`` (d = 1).
    """

    name: str
    truth: MixingMeasure
    k_fit: int
    input_law: str = "uniform"
    #: predicted exponent of each loss column (Theorems 1 and 2; None: no prediction)
    predicted: dict = field(default_factory=dict)
    #: starts per replicate of the maximum-likelihood fit built for this scenario (the peers used 5)
    n_starts: int = 1
    gaussian_moe: bool = True
    box = None
    fit_model = None

    def __post_init__(self) -> None:
        if self.input_law not in INPUT_LAWS:
            raise ValueError(f"input_law must be one of {', '.join(INPUT_LAWS)}, got {self.input_law!r}")
        if self.input_law == "grid" and self.d != 1:
            raise ValueError("input_law 'grid' is the peers' linspace(0, 1, n) design, d = 1 only")
        if self.k_fit < self.truth.n_atoms:
            raise ValueError(f"k_fit ({self.k_fit}) must be >= the true number of atoms ({self.truth.n_atoms})")

    def sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` inputs, ``[n, d]``."""
        if self.input_law == "grid":
            return np.linspace(0.0, 1.0, n)[:, None]
        return rng.uniform(0.0, 1.0, size=(n, self.d))

    def sample(self, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """``(X [n, d], Y [n])``: inputs from the input law, then ``y`` from the mixture."""
        rng = numpy_generator(rng)
        X = self.sample_x(n, rng)
        return X, sample_y(X, self.truth, rng)

    def holdout(self, n: int = 4096, seed: int = 20231105) -> np.ndarray:
        """A fixed uniform held-out input sample for the L2 error of the mean function."""
        return np.random.default_rng(seed).uniform(0.0, 1.0, size=(n, self.d))

    # ---- the scenario protocol (moestat.data.synthetic.ScenarioBase) ----------------------------
    #: y is drawn from the mixture, and each atom's eta = (a, b, variance) ends with its variance
    mixture_data = True
    variance_last = True

    @property
    def extra_loss_columns(self) -> tuple[str, ...]:
        """The per-block error columns (:data:`BLOCKS`) of an over-fitted model, else none."""
        return tuple(BLOCKS) if self.k_fit > self.truth.n_atoms else ()

    def loss_columns(self, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
        """The sweep's loss columns (:meth:`losses`); an over-fitted model also gets the per-block
        errors of its shared cells (:func:`block_errors`, recorded in ``extras.csv``)."""
        out = self.losses(fitted, X_holdout)
        if self.extra_loss_columns:
            out |= block_errors(fitted, self.truth)
        return out

    def loglik_at(self, X: np.ndarray, Y: np.ndarray, G: MixingMeasure, *, fitted: bool) -> np.ndarray:
        """The log-likelihood ``[R]`` of model 1 (:func:`moestat.model.gaussian_moe.log_likelihood`)."""
        return np.asarray(log_likelihood(X, Y, G), dtype=float)

    @property
    def declaration(self) -> FitDeclaration:
        """Model 1's family (``gaussian-moe``: the dense softmax gate with linear Gaussian experts, one
        variance per expert) with ``k_fit`` atoms, fitted by maximum likelihood alone (``--estimator mle``)."""
        return FitDeclaration("gaussian-moe", None, int(self.k_fit), self.d, self.d + 2, ("mle",), int(self.n_starts))

    def losses(self, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
        """The sweep's loss columns for a batch of fits ``[R]`` (see the module docstring).

        ``voronoi``: D1 (exact) or D2 (over-fitted); ``voronoi_direction``: NaN (a cosine-router
        notion); ``param_single``: the largest plain error ``||omega_i - omega*_j||`` over atoms alone
        in their cell; ``param_multi``: over the shared cells, the largest mass-weighted root mean
        square error (:func:`moestat.losses.voronoi.weighted_multi_error`); ``mass``: the largest cell mass
        error; ``regression_l2``: ``||g_hat - g*||_{L2}`` of the mean functions on ``X_holdout``.
        """
        out = gaussian_voronoi(fitted, self.truth, "D1" if self.setting == "exact" else "D2")
        g_hat = mean_function(X_holdout, fitted)
        g_star = mean_function(X_holdout, self.truth)
        out["regression_l2"] = np.sqrt(np.mean((g_hat - g_star) ** 2, axis=-1))
        out["voronoi_direction"] = np.full_like(out["voronoi"], np.nan)
        return out


def _normalised(b0: np.ndarray, b1: np.ndarray, cell_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift the gate so that the atoms of the reference cell carry mass 1 and mean slope 0."""
    w = np.exp(b0[cell_ref] - b0[cell_ref].max())
    w = w / w.sum()
    c0 = np.log(np.sum(np.exp(b0[cell_ref])))
    c1 = (w[:, None] * b1[cell_ref]).sum(0)
    return b0 - c0, b1 - c1


def gaussian_loss_spec(name: str = "D1", d: int = 1) -> "LossSpec":
    """``D1`` or ``D2`` of Nguyen, Nguyen & Ho (2023) as an entry of the loss specification.

    Blocks ``beta1``, ``a = eta[:d]``, ``b = eta[d]``, ``variance = eta[d+1]``; cells on the expert
    blocks only (softmax translations leave them unchanged); softmax mass term.  ``D1``: exponent 1
    everywhere.  ``D2`` (their Theorem 2): a cell of ``m`` atoms weighs the gate slope and the expert
    intercept at ``rbar(m) = 1, 4, 6`` and the expert slope and the variance at ``rbar(m) / 2`` --
    except a cell of one atom, at exponent 1 throughout (``rbar(1) / 2`` would be 1/2).

    Parameters
    ----------
    name : {"D1", "D2"}
    d : int
        Input dimension (only checked; the block sources are written in terms of ``d``).

    Returns
    -------
    LossSpec
    """

    if name not in ("D1", "D2"):
        raise ValueError(f"name must be D1 or D2, got {name!r}")
    one = ExponentTable.constant(1.0)
    full = ExponentTable(RBAR) if name == "D2" else one
    half = ExponentTable((1.0, *(r / 2 for r in RBAR[1:]))) if name == "D2" else one
    blocks = (BlockSpec("beta1", "beta1", full), BlockSpec("a", "eta[:d]", half), BlockSpec("b", "eta[d]", full),
              BlockSpec("variance", "eta[d+1]", half))
    return LossSpec(f"gaussian_{name}", blocks, "softmax", "euclidean", None, False, ("a", "b", "variance"))


def gaussian_voronoi(fitted: MixingMeasure, truth: MixingMeasure, name: str = "D1", spec=None,
                     shift: bool = True) -> dict[str, np.ndarray]:
    """Voronoi loss ``D1`` or ``D2`` and per-atom errors of Gaussian-MoE fits.

    Computed from :func:`gaussian_loss_spec` by :func:`moestat.losses.voronoi_spec.cell_terms_from_spec`,
    after shifting each fitted gate so that the reference atom's cell is the reference.

    Parameters
    ----------
    fitted : MixingMeasure
        ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]`` (or unbatched).
    truth : MixingMeasure
        Unbatched, ``k*`` atoms.
    name : {"D1", "D2"}
    spec : LossSpec, optional
        Another loss of the same shape (the likelihood scenarios of :mod:`moestat.data.likelihood_losses`);
        default :func:`gaussian_loss_spec` ``(name)``.
    shift : bool
        Fix softmax's translation freedom as above (``False``: gates without it, e.g. a Gaussian gate
        whose weights ``exp(beta0)`` sum to one).

    Returns
    -------
    dict of ndarray, each ``[R]``
        ``voronoi``, ``param_single`` (the largest plain error ``||omega_i - omega*_j||`` over atoms
        alone in their cell), ``param_multi`` (over the shared cells, the largest mass-weighted root
        mean square error, :func:`moestat.losses.voronoi.weighted_multi_error`; NaN when no atom is
        of that kind),
        ``mass`` (the largest cell mass error), ``empty_cells`` (true atoms with an empty cell);
        NaN everywhere for a non-finite fit.
    """

    spec = gaussian_loss_spec(name) if spec is None else spec
    G = fitted.numpy()
    if not G.batch_shape:
        G = MixingMeasure(G.beta0[None], G.beta1[None], G.eta[None])
    T = truth.numpy()
    R = G.beta0.shape[0]
    ref = T.n_atoms - 1
    out = {key: np.full(R, np.nan) for key in ("voronoi", "param_single", "param_multi", "mass", "empty_cells")}
    ok = G.finite()
    if not ok.any():
        return out
    G = MixingMeasure(G.beta0[ok], G.beta1[ok], G.eta[ok])
    cells = cell_terms_from_spec(spec, G, T)["cells"]  # the expert blocks alone decide the cells
    b0, b1 = G.beta0.copy(), G.beta1.copy()
    for r in range(b0.shape[0] if shift else 0):
        if np.any(cells[r] == ref):
            b0[r], b1[r] = _normalised(b0[r], b1[r], cells[r] == ref)
    c = cell_terms_from_spec(spec, MixingMeasure(b0, b1, G.eta), T)
    shared = np.take_along_axis(c["sizes"], c["cells"], axis=-1) > 1  # [R', k]
    err = c["atom_errors"]
    with np.errstate(invalid="ignore"):
        single = np.where(~shared, err, -np.inf).max(-1)
    # shared cells: the mass-weighted root mean square D2 bounds, not an unweighted maximum
    multi = weighted_multi_error(err, c["weights"], c["cells"], c["sizes"])
    out["voronoi"][ok] = c["terms"].sum(-1)
    out["param_single"][ok] = np.where(np.isfinite(single), single, np.nan)
    out["param_multi"][ok] = np.where(np.isfinite(multi), multi, np.nan)
    out["mass"][ok] = c["mass_part"].max(-1)
    out["empty_cells"][ok] = (c["sizes"] == 0).sum(-1).astype(float)
    return out


def declared_voronoi(fitted: MixingMeasure, truth: MixingMeasure, specs, shift: bool = True) -> dict[str, np.ndarray]:
    """:func:`gaussian_voronoi` of the first declared loss (its ``voronoi`` and per-atom columns), plus
    one ``[R]`` column named after each declared loss.

    Parameters
    ----------
    specs : sequence of LossSpec
        The scenario's losses, at least one; the first gives the ``voronoi`` column.
    shift : bool
        As in :func:`gaussian_voronoi`.
    """
    out = gaussian_voronoi(fitted, truth, spec=specs[0], shift=shift)
    for spec in specs:
        out[spec.name] = out["voronoi"] if spec is specs[0] else gaussian_voronoi(fitted, truth, spec=spec, shift=shift)["voronoi"]
    return out


def model1_scenario(setting: str = "exact", k_fit: int | None = None, input_law: str = "uniform",
                    n_starts: int = 1) -> GaussianMoEScenario:
    """Model 1 of Nguyen, Nguyen & Ho (2023): exact (K = 2) or over-fitted (``k_fit``, default 3).

    Predicted exponents (their Theorems 1 and 2): D1 and D2 at -1/2; an atom alone in its cell at
    -1/2; atoms sharing a cell of two at -1/8 (gate slope, expert intercept; the largest plain
    error is dominated by these) -- stated in ``predicted``.
    """
    if setting not in ("exact", "over"):
        raise ValueError(f"setting must be exact or over, got {setting!r}")
    k = 2 if setting == "exact" else (3 if k_fit is None else int(k_fit))
    if setting == "exact" and k_fit not in (None, 2):
        raise ValueError(f"the exact-fitted model 1 has k_fit = 2, got {k_fit!r}")
    predicted = gmoe_predicted(k, 2)
    return GaussianMoEScenario(f"gaussian-moe-model1-{setting}-k{k}", model1_truth(), k, input_law, predicted, n_starts)


def gmoe_predicted(k_fit: int, k_true: int) -> dict[str, float | None]:
    """The predicted exponents of the loss columns of a dense softmax-gated Gaussian MoE with linear
    experts fitted with ``k_fit`` atoms for ``k_true`` (Nguyen, Nguyen & Ho 2023, Theorems 1 and 2).

    D1 (exact) or D2 (over-fitted) -- the ``voronoi`` column --, an atom alone in its cell, the cells'
    summed weights and the regression function at -1/2; over-fitted with ``k_fit = k_true + 1`` the one
    shared cell has two atoms, whose slowest blocks (gate slope, expert intercept) are at
    ``n^{-1/(2 rbar(2))} = n^{-1/8}``; a larger ``k_fit`` splits the atoms into cells whose sizes are
    the fit's, not the design's: ``param_multi`` ``None`` (no exponent stated).  The one table of
    model 1 (:func:`model1_scenario`) and of a user's file meeting the theorems' hypotheses
    (:mod:`moestat.theorems.file_theorems`).
    """
    predicted = {"voronoi": -0.5, "param_single": -0.5, "mass": -0.5, "regression_l2": -0.5}
    if k_fit > k_true:
        # a cell of 2 atoms: rbar = 4, gate slope and intercept at n^{-1/(2 rbar)}; of 3: rbar = 6
        predicted["param_multi"] = -1.0 / (2 * RBAR[1]) if k_fit == k_true + 1 else None
    return predicted


# ---- per-block errors of the over-fitted cells (moestat.rates.gmoe_blocks) ---------------------------------
#: column name -> (parameter block, "rbar" or "rbar/2": the exponent of the block in D2)
BLOCKS = {"multi_beta1": ("beta1", "rbar"), "multi_b": ("b", "rbar"), "multi_a": ("a", "rbar/2"),
          "multi_variance": ("variance", "rbar/2")}


def block_predictions(cell_size: int) -> dict[str, float]:
    """The exponent of ``n`` of every column of :data:`BLOCKS` for over-fitted cells of ``cell_size`` atoms.

    ``beta1`` and ``b``: ``-1/(2 rbar(M))``; ``a`` and ``variance``: ``-1/rbar(M)`` (Theorem 2 of
    Nguyen, Nguyen & Ho 2023; Han et al. 2024, Table 2).  ``cell_size`` must be 2 or 3, the sizes whose
    ``rbar`` the paper gives (4 and 6).
    """

    if cell_size not in (2, 3):
        raise ValueError(f"rbar(M) is stated for cells of 2 or 3 atoms, got M = {cell_size!r}")
    r = RBAR[cell_size - 1]
    return {col: (-1.0 / (2 * r) if how == "rbar" else -1.0 / r) for col, (_, how) in BLOCKS.items()}


def block_errors(fitted: MixingMeasure, truth: MixingMeasure) -> dict[str, np.ndarray]:
    """One column per block of the over-fitted cells: ``multi_beta1``, ``multi_b``, ``multi_a``, ``multi_variance``.

    Parameters
    ----------
    fitted : MixingMeasure
        ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]`` (``eta = (a, b, variance)``), or unbatched.
    truth : MixingMeasure
        Unbatched, ``k*`` atoms, the last the softmax reference.

    Returns
    -------
    dict of ndarray, each ``[R]``
        The largest mass-weighted root mean square error of the block over the cells of two or more
        fitted atoms; NaN for a non-finite fit or one without such a cell (an exact fit).
    """

    G, T = fitted.numpy(), truth.numpy()
    if not G.batch_shape:
        G = MixingMeasure(G.beta0[None], G.beta1[None], G.eta[None])
    out = {col: np.full(G.beta0.shape[0], np.nan) for col in BLOCKS}
    ok = G.finite()
    if not ok.any():
        return out
    G = MixingMeasure(G.beta0[ok], G.beta1[ok], G.eta[ok])
    d, ref = T.dim, T.n_atoms - 1
    spec = gaussian_loss_spec("D2", d)
    cells = cell_terms_from_spec(spec, G, T)["cells"]  # the expert blocks decide the cells, as in gaussian_voronoi
    b0, b1 = G.beta0.copy(), G.beta1.copy()
    for r in range(b0.shape[0]):  # softmax's common shift fixed on the reference cell, as gaussian_voronoi does
        if np.any(cells[r] == ref):
            b0[r], b1[r] = _normalised(b0[r], b1[r], cells[r] == ref)
    sizes = (cells[..., :, None] == np.arange(T.n_atoms)).sum(-2)  # [R', k*]
    own = lambda x, xs: x - xs[cells]  # noqa: E731 - each fitted atom against its own true atom
    diffs = {"beta1": own(b1, T.beta1), "a": own(G.eta[..., :d], T.eta[:, :d]),
             "b": own(G.eta[..., d:d + 1], T.eta[:, d:d + 1]), "variance": own(G.eta[..., d + 1:d + 2], T.eta[:, d + 1:d + 2])}
    w = np.exp(b0)
    for col, (block, _) in BLOCKS.items():
        out[col][ok] = weighted_multi_error(np.linalg.norm(diffs[block], axis=-1), w, cells, sizes)
    return out
