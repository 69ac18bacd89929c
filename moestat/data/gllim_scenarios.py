"""The joint Gaussian-gated MoE (GLLiM) scenario: truth, sampler, starts and the D-bar loss.

Nguyen, Nguyen, Nguyen & Ho (2024, AISTATS, "Towards Convergence Rates for Parameter Estimation in
Gaussian-gated Mixture of Experts") study the joint model of ``(x, y)``::

    x ~ sum_i pi_i N(c_i, Gamma_i),      y | x, i ~ N(a_i^T x + b_i, nu_i),

estimated by the joint maximum likelihood (:class:`moestat.estimators.gllim.GLLiMEM`, ``--estimator gllim``
or ``mle``; the scenario declares the family ``gllim`` and leaves the choice to the estimators).  Their
over-specified Type I setting (every true centre ``c*_j`` nonzero) has the loss D-bar of the
authors' code (CRPE-GMoE ``discrepancies.py: gauss_loss_GLLiM1``): fitted atoms go to the true atom
at the smallest *sum of block norms* ``|dc| + |dGamma| + |da| + |db| + |dnu|`` (every block: the
joint model leaves no parameter free), and::

    D-bar = sum_{|A_j| = 1} pi_i (|dc| + |dGamma| + |da| + |db| + |dnu|)
          + sum_{|A_j| > 1} pi_i (|dc|^rbar + |dGamma|^(rbar/2) + |da|^2 + |db|^rbar + |dnu|^(rbar/2))
          + sum_j |sum_{A_j} pi_i - pi*_j|,

``rbar(|A_j|) = 4, 6`` for cells of 2, 3 atoms (Ho & Nguyen 2016, Proposition 2.1, as their code
cites); the paper's theorem: D-bar(G_n, G*) = O(n^{-1/2}) up to a log factor.  As a
:class:`~moestat.losses.voronoi_spec.LossSpec` (:func:`gllim_dbar_spec`): blocks ``c = beta1``,
``Gamma = eta[d+2:]``, ``a = eta[:d]``, ``b = eta[d]``, ``nu = eta[d+1]`` with exponent tables
``[1, 4, 6]``, ``[1, 2, 3]``, ``[1, 2]``, ``[1, 4, 6]``, ``[1, 2, 3]``, metric ``block``, mass
``softmax`` (``exp(beta0) = pi``).

A scenario file selects this model with ``[input] law = "gate"`` (``x`` drawn from the gate's
mixture) and a Gaussian gate; every atom then gives its gate covariance ``gamma``::

    [gate]
    normalisation = "gaussian"
    [expert]
    kind = "linear"
    [noise]
    model = "mixture"
    [input]
    law = "gate"
    [fit]
    k = 4
    gamma_floor = 0.01             # eigenvalues of every fitted Gamma_i >= 0.01 var(x) (default 1e-6)
    [[atoms]]
    beta0 = -1.2039728043259361    # log pi
    beta1 = [-0.1]                 # c
    gamma = [[0.042824]]           # Gamma (d x d, symmetric positive definite)
    eta = [0.4045, 0.3405]         # a (d), b
    variance = 0.008876723         # nu
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from moestat.data.gaussian_scenarios import declared_voronoi
from moestat.data.scenario_tables import ScenarioFileError, parse_losses
from moestat.data.synthetic import DEFAULT_INIT_SCALE, ScenarioBase
from moestat.losses.voronoi_spec import BlockSpec, ExponentTable, LossSpec
from moestat.model.declaration import FitDeclaration
from moestat.model.gllim_model import gllim_loglik, gllim_mean, join_measure, split_measure
from moestat.model.mixing import MixingMeasure
from moestat.seeding import numpy_generator

__all__ = ["GLLiMScenario", "gllim_dbar_spec", "gllim_from_mapping", "sample_gllim"]


def gllim_dbar_spec(name: str = "Dbar") -> LossSpec:
    """D-bar of the Type I setting (module docstring; CRPE-GMoE ``gauss_loss_GLLiM1``)."""
    rbar = ExponentTable((1.0, 4.0, 6.0))
    half = ExponentTable((1.0, 2.0, 3.0))
    blocks = (BlockSpec("c", "beta1", rbar), BlockSpec("Gamma", "eta[d+2:]", half), BlockSpec("a", "eta[:d]", ExponentTable((1.0, 2.0))),
              BlockSpec("b", "eta[d]", rbar), BlockSpec("nu", "eta[d+1]", half))
    return LossSpec(name, blocks, "softmax", "block", None, False, ())


def sample_gllim(n: int, G: MixingMeasure, rng) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws ``(X [n, d], Y [n])`` of the joint GLLiM ``G`` (unbatched, normalised ``pi``)."""
    rng = numpy_generator(rng)
    G = G.numpy()
    d = G.dim
    logpi, c, Gamma, A, b, nu = split_measure(G, d)
    pi = np.exp(logpi - np.logaddexp.reduce(logpi))
    z = rng.choice(pi.size, size=n, p=pi / pi.sum())
    L = np.linalg.cholesky(Gamma)  # [k, d, d]
    X = c[z] + np.einsum("nij,nj->ni", L[z], rng.standard_normal((n, d)))
    Y = np.einsum("nd,nd->n", X, A[z]) + b[z] + np.sqrt(nu[z]) * rng.standard_normal(n)
    return X, Y


@dataclass(frozen=True)
class GLLiMScenario(ScenarioBase):
    """A joint Gaussian-gated MoE truth and its fit (what :mod:`moestat.rates.sweep` asks of a scenario).

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched, GLLiM layout (:func:`moestat.model.gllim_model.split_measure`): ``beta0 = log pi``
        (``exp`` summing to one), ``beta1 = c``, ``eta = (a, b, nu, vec Gamma)``.
    k_fit : int
        Fitted atoms (``k*``: exact; more: over-specified).
    losses : tuple of LossSpec
        Default: :func:`gllim_dbar_spec`.
    predicted : dict
        Loss name -> predicted exponent.
    n_starts : int
        Starts per replicate: the near-truth start and ``n_starts - 1`` random ones.
    gamma_floor : float
        Floor of the eigenvalues of every fitted ``Gamma_i``, relative to the sample's variance of
        ``x`` (``[fit] gamma_floor``; :class:`~moestat.estimators.gllim.GLLiMEM`): the compact
        parameter space of the theorems bounds the covariances away from 0, and without such a
        bound the joint likelihood has near-degenerate spurious maxima (an atom of a few points on
        an almost constant ``x`` with a steep expert).
    """

    truth: MixingMeasure
    k_fit: int | None = None
    losses: tuple = ()
    predicted: Mapping[str, float | None] = field(default_factory=dict)
    name: str = "gllim"
    n_starts: int = 1
    gamma_floor: float = 1e-6
    #: ``y`` is drawn from the mixture and fitted by maximum likelihood (``--estimator mle``)
    likelihood: bool = True
    noise_model: str = "mixture"
    #: the joint GLLiM (``x`` modelled too): the family ``gllim`` of its :attr:`declaration`
    gllim: bool = True
    input_law: str = "gate"
    box = None
    fit_model = None
    model = None

    def __post_init__(self) -> None:
        t = self.truth.numpy()
        if t.batch_shape:
            raise ValueError("truth must be an unbatched mixing measure")
        d = t.dim
        logpi, c, Gamma, A, b, nu = split_measure(t, d)
        if not all(np.all(np.isfinite(a)) for a in (t.beta0, t.beta1, t.eta)):
            raise ValueError("truth contains non-finite parameters")
        if abs(np.exp(logpi).sum() - 1.0) > 1e-9:
            raise ValueError(f"the weights exp(beta0) must sum to 1, got {np.exp(logpi).sum():.6g}")
        if not np.all(nu > 0):
            raise ValueError(f"every atom's variance must be > 0, got {nu.tolist()}")
        if not np.allclose(Gamma, np.swapaxes(Gamma, -1, -2)) or not np.all(np.linalg.eigvalsh(Gamma) > 0):
            raise ValueError("every atom's gamma must be a symmetric positive definite d x d matrix")
        object.__setattr__(self, "truth", t)
        k_fit = t.n_atoms if self.k_fit is None else int(self.k_fit)
        if k_fit < t.n_atoms:
            raise ValueError(f"fit k={k_fit} must be at least the true number of atoms k*={t.n_atoms}")
        object.__setattr__(self, "k_fit", k_fit)
        if not (isinstance(self.gamma_floor, (int, float)) and not isinstance(self.gamma_floor, bool)
                and math.isfinite(self.gamma_floor) and self.gamma_floor > 0):
            raise ValueError(f"fit.gamma_floor must be a number > 0, got {self.gamma_floor!r}")
        if not self.losses:
            object.__setattr__(self, "losses", (gllim_dbar_spec(),))
        names = [s.name for s in self.losses]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate loss names {names}")
        object.__setattr__(self, "predicted", dict(self.predicted))

    # ---- data ---------------------------------------------------------------------------------
    def sample(self, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """``(X [n, d], Y [n])`` from the joint model, with the given stream."""
        return sample_gllim(n, self.truth, rng)

    def sample_x(self, n: int, rng) -> np.ndarray:
        """``n`` inputs from the gate's mixture ``sum_i pi_i N(c_i, Gamma_i)``."""
        return self.sample(n, rng)[0]

    def holdout(self, n: int = 4096, seed: int = 20240207) -> np.ndarray:
        """A fixed held-out input sample (from the gate's mixture) for the L2 regression error."""
        return self.sample_x(n, np.random.default_rng(seed))

    def regression_function(self, X) -> np.ndarray:
        """``E[y | x]`` of the truth, ``[n]``."""
        return gllim_mean(np.asarray(X, dtype=np.float64), self.truth)[0]

    def loglik(self, X, Y, G: MixingMeasure | None = None) -> np.ndarray:
        """The joint log-likelihood of ``G`` (default: the truth) on ``(X [R, n, d], Y [R, n])``, ``[R]``."""
        return gllim_loglik(X, Y, self.truth if G is None else G)

    # ---- the scenario protocol (moestat.data.synthetic.ScenarioBase) ----------------------------
    mixture_data = True

    @property
    def loss_specs(self) -> tuple:
        """The declared losses (``[[losses]]``, D-bar by default)."""
        return tuple(self.losses or ())

    @property
    def declaration(self) -> FitDeclaration:
        """The joint GLLiM with ``k_fit`` atoms, fitted by maximum likelihood alone (family ``gllim``:
        :class:`~moestat.estimators.gllim.GLLiMEM`, ``--estimator gllim`` or ``mle``)."""
        d = self.d
        return FitDeclaration("gllim", None, int(self.k_fit), d, d + 2 + d * d, ("mle",), int(self.n_starts),
                              "this scenario file (noise.model = \"mixture\")")

    def loglik_at(self, X: np.ndarray, Y: np.ndarray, G: MixingMeasure, *, fitted: bool) -> np.ndarray:
        """The joint log-likelihood ``[R]`` of ``(x, y)`` (:meth:`loglik`): the criterion the joint
        maximum likelihood maximises, for the fit and the truth alike."""
        return np.asarray(self.loglik(X, Y, G), dtype=float)

    # ---- starts -------------------------------------------------------------------------------
    def near_truth_start(self, scale: float = DEFAULT_INIT_SCALE, rng=None, *, n: int | None = None,
                         peer: bool = False) -> MixingMeasure:
        """The truth plus noise: extra atoms (over-specified) copy the true atoms in turn and split
        their weight; ``N(0, scale^2)`` on ``log pi`` (renormalised), ``c``, ``a`` and ``b``, and
        ``exp(N(0, scale^2))`` factors on ``nu`` and ``Gamma`` (which stay positive definite).
        ``n`` is not used; ``peer`` (the peer code's schedule) is refused, as for every scenario file."""
        if peer:
            raise ValueError("init = 'peer' is not available for a scenario file; use 'near_truth' or 'random'")
        rng = numpy_generator(0 if rng is None else rng)  # None: seed 0, as ScenarioBase.near_truth_start
        t, k, ks, d = self.truth, int(self.k_fit), self.k_true, self.d
        owner = np.concatenate([np.arange(ks), np.arange(k - ks) % ks])
        counts = np.bincount(owner, minlength=ks)
        logpi, c, Gamma, A, b, nu = split_measure(t, d)
        lp = logpi[owner] - np.log(counts[owner]) + scale * rng.normal(size=k)
        lp = lp - np.logaddexp.reduce(lp)
        cc = c[owner] + scale * rng.normal(size=(k, d))
        GG = Gamma[owner] * np.exp(scale * rng.normal(size=k))[:, None, None]
        AA = A[owner] + scale * rng.normal(size=(k, d))
        bb = b[owner] + scale * rng.normal(size=k)
        nn = nu[owner] * np.exp(scale * rng.normal(size=k))
        return join_measure(lp, cc, GG, AA, bb, nn)

    # ---- losses -------------------------------------------------------------------------------
    def loss_columns(self, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
        """Every loss column of a batch of fits ``[R]``.

        ``voronoi`` and the per-atom columns (``param_single``, ``param_multi``, ``mass``) from the
        first loss (D-bar by default), one column per declared loss, ``regression_l2`` = ``||E_hat[y
        | x] - E*[y | x]||_{L2}`` on ``X_holdout``, ``voronoi_direction`` NaN.  No shift: the weights
        ``pi`` sum to one and the centres are identified.
        """

        out = declared_voronoi(fitted, self.truth, self.losses, shift=False)
        G = fitted.numpy()
        ok = G.finite()
        g_star = self.regression_function(X_holdout)
        l2 = np.full(ok.shape, np.nan)
        if ok.any():
            sub = MixingMeasure(G.beta0[ok], G.beta1[ok], G.eta[ok])
            l2[ok] = np.sqrt(np.mean((gllim_mean(X_holdout, sub) - g_star) ** 2, axis=-1))
        out["regression_l2"] = l2
        out["voronoi_direction"] = np.full(ok.shape, np.nan)
        return out


# ---- scenario files -----------------------------------------------------------------------------
_KEYS = {
    "": ("name", "gate", "expert", "noise", "input", "fit", "atoms", "losses"),
    "gate": ("score", "normalisation"),
    "expert": ("kind",),
    "noise": ("model",),
    "input": ("law",),
    "fit": ("k", "gamma_floor"),
    "atoms": ("beta0", "beta1", "gamma", "eta", "variance"),
    "losses": ("name", "builtin", "r", "blocks", "mass", "metric", "k_active", "direction", "predicted_exponent"),
    "losses.blocks": ("label", "source", "exponent"),
}


def _table(t: Any, kind: str, where: str, label: str) -> dict:
    if not isinstance(t, Mapping):
        raise ScenarioFileError(f"{where}: {label or 'the file'} must be a table, got {type(t).__name__}")
    extra = sorted(set(t) - set(_KEYS[kind]))
    if extra:
        raise ScenarioFileError(f"{where}: unknown key(s) {extra} in {label or 'the top level'} of a joint GLLiM file "
                                f"([input] law = \"gate\"); expected {sorted(_KEYS[kind])}")
    return dict(t)


def gllim_from_mapping(m: Mapping[str, Any], where: str = "scenario") -> GLLiMScenario:
    """A :class:`GLLiMScenario` from a parsed scenario file with ``[input] law = "gate"`` (module docstring).

    Raises
    ------
    moestat.data.scenario_files.ScenarioFileError
        Naming ``where`` (the file) and the key.
    """
    def err(msg: str) -> ScenarioFileError:
        return ScenarioFileError(f"{where}: {msg}")

    m = _table(m, "", where, "")
    tab = {t: _table(m.get(t, {}), t, where, f"[{t}]") for t in ("gate", "expert", "noise", "input", "fit")}
    if str(tab["gate"].get("normalisation", "softmax")) != "gaussian" or str(tab["gate"].get("score", "linear")) != "linear":
        raise err("[input] law = \"gate\" (x drawn from the gate's mixture: the joint GLLiM) needs the Gaussian gate: "
                  "[gate] normalisation = \"gaussian\" (its covariances are the atoms' gamma)")
    if str(tab["expert"].get("kind", "linear")) not in ("linear", "identity"):
        raise err("the joint GLLiM has linear experts: [expert] kind = \"linear\"")
    if str(tab["noise"].get("model", "mixture")) != "mixture":
        raise err("the joint GLLiM draws y from the mixture: [noise] model = \"mixture\"")
    atoms = m.get("atoms")
    if not isinstance(atoms, list) or not atoms:
        raise err("[[atoms]] must list at least one true atom")
    atoms = [_table(a, "atoms", where, f"atoms[{i}]") for i, a in enumerate(atoms)]
    try:
        logpi = np.array([float(a["beta0"]) for a in atoms])
        c = np.array([[float(v) for v in a["beta1"]] for a in atoms])
        d = c.shape[1]
        Gamma = np.array([np.atleast_2d(np.asarray(a["gamma"], dtype=float)) for a in atoms])
        eta = np.array([[float(v) for v in a["eta"]] for a in atoms])
        nu = np.array([float(a["variance"]) for a in atoms])
    except KeyError as e:
        raise err(f"atoms: every atom of a joint GLLiM needs beta0, beta1, gamma, eta and variance (missing {e.args[0]!r})") from None
    except (TypeError, ValueError):
        raise err("atoms: beta0 and variance must be numbers, beta1 and eta lists of numbers, gamma a d x d list of lists, "
                  "of equal sizes across atoms") from None
    if c.ndim != 2 or eta.ndim != 2 or eta.shape[1] != d + 1 or Gamma.shape != (len(atoms), d, d):
        raise err(f"atoms: beta1 has d entries, eta d + 1 (a, b) and gamma d x d; got beta1 {c.shape[1:]}, eta "
                  f"{eta.shape[1:]}, gamma {Gamma.shape[1:]}")
    losses, predicted = parse_losses(m.get("losses", []), where, check_keys=_table)
    try:
        truth = join_measure(logpi, c, Gamma, eta[:, :d], eta[:, d], nu)
        return GLLiMScenario(truth, tab["fit"].get("k"), losses, predicted, str(m.get("name", "gllim")),
                             gamma_floor=tab["fit"].get("gamma_floor", 1e-6))
    except (TypeError, ValueError) as e:
        raise err(str(e)) from None

