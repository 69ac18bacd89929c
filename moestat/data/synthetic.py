"""Scenarios: a true mixing measure, a gate, an expert family, an input law and a noise level.

A :class:`Scenario` samples ``(X, Y)`` from the data model of Nguyen et al. (2024) (eq. (1) / eq. (8))::

    Y_i = g_{G*}(X_i) + eps_i,   eps_i ~ N(0, nu),   X_i ~ mu (default Uniform[-1, 1]^d)

and says how the model is fitted: with ``k_fit`` atoms and ``k_active_fit`` activated experts
(``k_fit = k*`` exact-specified; ``k_fit > k*`` over-specified with K-bar experts, eq. 7 / eq. 12).

:func:`make_scenario` builds the paper-style synthetic scenario of Section 5.1 / App. E.1.  The
constants we could not recover from the paper's text are our documented choices (see
``docs/guide/model.rst``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np
import numpy.typing as npt
import torch

from moestat.losses import cell_parameter_errors, regression_l2_error, voronoi_loss
from moestat.losses.voronoi_spec import voronoi_loss_from_spec
from moestat.model.declaration import FitDeclaration
from moestat.model.experts import ACTIVATIONS, Expert
from moestat.model.gates import GATE_KINDS, Gate
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.near_truth import near_truth_init
from moestat.model.regression import MoEModel
from moestat.seeding import numpy_generator

__all__ = [
    "INPUT_LAWS",
    "ROUTERS",
    "SETTINGS",
    "Scenario",
    "ScenarioBase",
    "regression_loss_columns",
    "draw_truth",
    "make_scenario",
    "default_scenario",
]

#: Laws of the inputs X (see :class:`Scenario`).
INPUT_LAWS = ("uniform", "gaussian")
#: The routers a scenario can use, and the one definition of the ``--router`` vocabulary of
#: ``moestat rates`` (import it from here).  It is the tuple
#: :data:`moestat.model.gates.GATE_KINDS` itself, since a router of the statistical model *is* a
#: gate kind: ``perturbed`` the perturbed cosine router (eq. (9), tau > 0), ``cosine`` the vanilla
#: cosine router (eq. (2), the paper's tau = 0), ``linear`` the softmax gate.
ROUTERS = GATE_KINDS
#: Exact-specified (``k_fit = k*``) or over-specified (``k_fit > k*``) fits.
SETTINGS = ("exact", "over")


def _check_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class TruthDescriptors:
    """``d``, ``k_true`` and ``setting`` of a scenario, derived from its ``truth`` and ``k_fit``.

    One rule for every scenario kind (built-in, file, Gaussian MoE): a subclass provides the
    unbatched true measure ``truth`` and the fitted number of atoms ``k_fit``.
    """

    @property
    def d(self) -> int:
        """Input dimension."""
        return self.truth.dim

    @property
    def k_true(self) -> int:
        """True number of atoms ``k*``."""
        return self.truth.n_atoms

    @property
    def setting(self) -> str:
        """``exact`` (``k_fit = k*``) or ``over`` (``k_fit > k*``)."""
        return "exact" if self.k_fit == self.k_true else "over"


#: ``init_scale`` of ``moestat rates``: the near-truth start's noise (:meth:`ScenarioBase.near_truth_start`).
DEFAULT_INIT_SCALE = 0.05


class ScenarioBase(TruthDescriptors):
    """The protocol of every scenario a rates sweep fits: built-in (:class:`Scenario`), Gaussian MoE
    (:class:`~moestat.data.gaussian_scenarios.GaussianMoEScenario`), joint GLLiM
    (:class:`~moestat.data.gllim_scenarios.GLLiMScenario`) and file
    (:class:`~moestat.data.scenario_files.FileScenario`).

    What the sweep asks of a scenario -- its data (``sample``, ``holdout``), its near-truth start,
    the loss columns of a batch of fits, the losses it declares, the model it fits
    (:attr:`declaration`), how its fits are judged against the truth -- is asked here, so
    :mod:`moestat.rates` never checks which kind it holds.  A scenario declares its model and
    never picks an estimator: :func:`moestat.estimators.choice.estimator_for` reads the declaration
    (as do the random starts, :func:`moestat.estimators.choice.random_start_for`).  The defaults
    are the least-squares regression MoE of Nguyen et al. (2024); a kind overrides what differs.
    """

    #: The Gaussian MoE of Nguyen, Nguyen & Ho (2023) (model 1): its own log-likelihood and losses.
    gaussian_moe = False
    #: The joint GLLiM (``x`` modelled too).
    gllim = False
    #: Columns :meth:`loss_columns` returns beside ``results.csv``'s losses and the declared ones,
    #: recorded in ``extras.csv`` (an over-fitted Gaussian MoE's per-block errors).
    extra_loss_columns: tuple[str, ...] = ()
    #: Loss name -> the theorem of a default prediction the scenario did not state (a scenario
    #: file's; see :func:`moestat.data.likelihood_losses.default_likelihood_prediction`).
    prediction_sources: Mapping[str, str] = MappingProxyType({})

    @property
    def mixture_data(self) -> bool:
        """Whether ``y`` is drawn from the mixture: fits are then judged against the truth by the
        log-likelihood (:mod:`moestat.rates.truth_check`), not by the sum of squares."""
        return False

    @property
    def variance_last(self) -> bool:
        """Whether each atom's ``eta`` ends with a variance (jittered on the log scale, kept positive)."""
        return False

    @property
    def loss_specs(self) -> tuple:
        """The :class:`~moestat.losses.voronoi_spec.LossSpec` s the scenario declares (one
        ``extras.csv`` column each, by name; none for a built-in scenario)."""
        return ()

    def loss_columns(self, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
        """Every loss column of a batch of fits ``[R]``: :func:`regression_loss_columns`."""
        return regression_loss_columns(self, fitted, X_holdout)

    @property
    def declaration(self) -> FitDeclaration:
        """What is fitted (:class:`~moestat.model.declaration.FitDeclaration`): the regression MoE of
        :attr:`fit_model` (K-bar activated experts) with ``k_fit`` atoms; the estimators pick their
        class from it (:func:`moestat.estimators.choice.estimator_class_for`).  The built-in
        scenario's Gaussian noise is fitted by least squares and, for the decomposition study
        (``docs/guide/decomposition.rst``), by EM: both objectives are allowed."""
        return FitDeclaration("regression", self.fit_model, int(self.k_fit), self.d, self.d + 1, ("lse", "mle"))

    def loglik_at(self, X: np.ndarray, Y: np.ndarray, G: MixingMeasure, *, fitted: bool) -> np.ndarray:
        """The observed-data log-likelihood ``[R]`` of ``G`` (batch ``[R]``, or unbatched) on
        ``(X [R, n, d], Y [R, n])``: what a maximum-likelihood fit is judged by against the truth
        (:mod:`moestat.rates.truth_check`).  ``fitted``: under the fitted model (K-bar activated
        experts), else the true one (K)."""
        model = self.fit_model if fitted else self.model
        with torch.no_grad():
            ll = model.loglik(torch.as_tensor(np.asarray(X, float)), torch.as_tensor(np.asarray(Y, float)), G)
        return np.asarray(ll.numpy(), dtype=float)

    def near_truth_start(self, scale: float = DEFAULT_INIT_SCALE, rng=None, *, n: int | None = None,
                         peer: bool = False) -> MixingMeasure:
        """The truth plus noise of scale ``scale`` (:func:`moestat.model.near_truth.near_truth_init`;
        ``peer``: the peer code's ``scale * n^-0.083``).

        Parameters
        ----------
        scale : float
            Standard deviation of the noise on every free parameter (default
            :data:`DEFAULT_INIT_SCALE`, that of ``moestat rates``).
        rng : Generator, int, SeedSequence or None
            Stream of the noise; ``None``: seed 0 (the same start at every call).

        Returns
        -------
        MixingMeasure
            Unbatched (``k_fit`` atoms): every estimator's ``fit`` takes it as the start of every
            replicate; stack several (:meth:`~moestat.model.mixing.MixingMeasure.stack`) for a
            start of their own per replicate.
        """
        rng = numpy_generator(0 if rng is None else rng)
        return near_truth_init(self.truth, self.k_fit, scale, rng, n=n, schedule="peer" if peer else "constant",
                               log_last=self.variance_last)


def regression_loss_columns(scenario, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
    """The loss columns of a least-squares regression scenario, each an array ``[R]``.

    ``voronoi``: the setting's Voronoi loss -- ``D3`` (eq. 16; equal to ``D_{1,1}``) when exact,
    ``D2`` (eq. 13) when over-specified -- with the max over K-subsets of the *true* model;
    ``voronoi_direction``: the same with ``beta1 / ||beta1||`` (what the vanilla router can
    identify, PDE (4)); ``param_single``: the largest plain distance
    ``||omega_i - omega*_j||`` over atoms alone in their Voronoi cell; ``param_multi``: over the cells
    shared by several atoms, the largest mass-weighted root mean square distance, the quantity D2
    bounds (:func:`moestat.losses.voronoi.weighted_multi_error`; Theorem 5 (i); NaN when no atom is
    of that kind); ``mass``: the largest ``|sum_{A_j} exp(beta0_i) -
    exp(beta0*_j)|``; ``regression_l2``: ``||g_hat - g*||_{L2(mu)}`` on a fixed held-out sample;
    then one column per declared loss (:attr:`ScenarioBase.loss_specs`, by name).
    """
    name = "D3" if scenario.setting == "exact" else "D2"
    K = scenario.model.gate.k_active
    pe = cell_parameter_errors(fitted, scenario.truth)
    out = {
        "voronoi": voronoi_loss(fitted, scenario.truth, name, K),
        "voronoi_direction": voronoi_loss(fitted, scenario.truth, name, K, direction=True),
        "param_single": pe["single"],
        "param_multi": pe["multi"],
        "mass": pe["mass"],
        "regression_l2": regression_l2_error(scenario.fit_model, fitted, scenario.model, scenario.truth, X_holdout),
    }
    for spec in scenario.loss_specs:  # a scenario's own losses (moestat.data.scenario_files)
        out[spec.name] = voronoi_loss_from_spec(spec, fitted, scenario.truth)
    return out


@dataclass(frozen=True)
class Scenario(ScenarioBase):
    """Truth + gate + expert + input law + noise, and how the model is fitted.

    Parameters
    ----------
    truth : MixingMeasure
        True atoms ``G*`` (unbatched), last atom the reference (``beta0 = 0``, ``beta1 = 0``).
    model : MoEModel
        Gate (with the true number of activated experts K) and expert family.
    noise_var : float
        Noise variance ``nu`` of eq. (1).
    input_law : {"uniform", "gaussian"}
        ``uniform``: Uniform[-1, 1]^d (bounded, as (A.1) needs). ``gaussian``: N(0, I/3) clipped
        to [-1, 1]^d (same variance as the uniform law, still bounded).
    k_fit : int
        Number of atoms of the fitted model (``k*`` exact, ``> k*`` over-specified).
    k_active_fit : int or None
        Activated experts K-bar of the fitted model (eq. 7); ``None`` means dense.
    name : str
        Label used in result files.
    box : ParameterBox
        Compact parameter space (A.1) used by the estimators.
    """

    truth: MixingMeasure
    model: MoEModel
    noise_var: float = 0.01
    input_law: str = "uniform"
    k_fit: int | None = None
    k_active_fit: int | None = None
    name: str = "custom"
    box: ParameterBox = field(default_factory=ParameterBox)

    def __post_init__(self) -> None:
        truth = self.truth.numpy()
        if truth.batch_shape:
            raise ValueError("Scenario.truth must be an unbatched mixing measure")
        object.__setattr__(self, "truth", truth)
        if not truth.satisfies_reference_convention():
            raise ValueError("Scenario.truth: the last atom must have beta0 = 0 and beta1 = 0 (Nguyen et al. (2024), A.3)")
        if truth.eta_dim != truth.dim + 1:
            raise ValueError(f"Scenario.truth: eta must have d + 1 = {truth.dim + 1} entries per atom, got {truth.eta_dim}")
        for a in (truth.beta0, truth.beta1, truth.eta):
            if not np.all(np.isfinite(a)):
                raise ValueError("Scenario.truth contains non-finite parameters")
        if not (isinstance(self.noise_var, (int, float)) and math.isfinite(self.noise_var) and self.noise_var > 0):
            raise ValueError(f"noise_var must be a positive finite number, got {self.noise_var!r}")
        if self.input_law not in INPUT_LAWS:
            raise ValueError(f"unknown input_law {self.input_law!r}; expected one of {INPUT_LAWS}")
        k_star = truth.n_atoms
        self.model.gate.check_n_experts(k_star)
        k_fit = k_star if self.k_fit is None else _check_int("k_fit", self.k_fit)
        if k_fit < k_star:
            raise ValueError(f"k_fit={k_fit} must be at least the true number of experts k*={k_star}")
        object.__setattr__(self, "k_fit", k_fit)
        if self.k_active_fit is None and self.model.gate.k_active is not None:
            # K-bar defaults to K in the exact setting and to the Proposition 1 minimum
            # K + (k_fit - k*) otherwise (every extra atom can join a selected cell).
            object.__setattr__(self, "k_active_fit", min(k_fit, self.model.gate.k_active + (k_fit - k_star)))
        if self.k_active_fit is not None:
            kaf = _check_int("k_active_fit", self.k_active_fit)
            if kaf > k_fit:
                raise ValueError(f"k_active_fit (K-bar={kaf}) must not exceed the number of fitted experts k_fit={k_fit}")
            if self.model.gate.k_active is not None and kaf < self.model.gate.k_active:
                raise ValueError(
                    f"k_active_fit (K-bar={kaf}) must be at least the true K={self.model.gate.k_active} (eq. 7: K <= K-bar <= k)"
                )

    # ---- descriptors -------------------------------------------------------------------
    @property
    def router(self) -> str:
        """``perturbed``, ``cosine`` or ``linear`` (a perturbed gate with tau = 0 is ``cosine``)."""
        g = self.model.gate
        if g.kind == "perturbed" and g.tau1 == 0 and g.tau2 == 0:
            return "cosine"
        return g.kind

    @property
    def fit_model(self) -> MoEModel:
        """The model used for fitting: same gate and experts, K-bar activated experts."""
        return self.model.with_k_active(self.k_active_fit)

    def with_router(self, router: str, tau: float | None = None) -> "Scenario":
        """The same truth, experts and data law under another router (same data seeds)."""
        gate = _gate_for(router, tau if tau is not None else (self.model.gate.tau1 if self.model.gate.kind == "perturbed" else 1.0), self.model.gate.k_active)
        return replace(self, model=replace(self.model, gate=gate))

    def describe(self) -> dict:
        """JSON-serialisable description (used in provenance files)."""
        g = self.model.gate
        return {
            "name": self.name,
            "router": self.router,
            "setting": self.setting,
            "gate": g.kind,
            "tau": list(g.tau),
            "k_active": g.k_active,
            "expert": self.model.expert.describe(),
            "d": self.d,
            "k_true": self.k_true,
            "k_fit": self.k_fit,
            "k_active_fit": self.k_active_fit,
            "noise_var": self.noise_var,
            "input_law": self.input_law,
            "truth": self.truth.to_dict(),
        }

    # ---- sampling ------------------------------------------------------------------------
    def sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` inputs from the input law, shape ``[n, d]``."""
        n = _check_int("n", n)
        if self.input_law == "uniform":
            return rng.uniform(-1.0, 1.0, size=(n, self.d))
        return np.clip(rng.normal(0.0, math.sqrt(1.0 / 3.0), size=(n, self.d)), -1.0, 1.0)

    def regression_function(self, X: npt.ArrayLike) -> np.ndarray:
        """``g_{G*}(X)``, shape ``[..., n]``, for ``X [..., n, d]`` (for the very array given to
        :meth:`knowing_mean`, the values recorded there)."""
        X = np.asarray(X, dtype=np.float64)
        known = self.__dict__.get("_known_mean")
        if known is not None and X is known[0]:
            return known[1].copy()
        if X.shape[-1] != self.d:
            raise ValueError(f"X must have d={self.d} columns, got {X.shape[-1]}")
        if X.ndim <= 2:
            return self.model.predict(torch.as_tensor(X), self.truth).numpy()
        # a batch [..., n, d] one data set at a time: the same numbers (each sample's value involves
        # only its own row), and the [n, k] temporaries of one data set stay in cache, where those of
        # the whole batch (20 x 128 000 x k in the main job) go to memory
        flat = X.reshape(-1, *X.shape[-2:])
        out = np.empty(flat.shape[:-1])
        for i, x in enumerate(flat):
            out[i] = self.model.predict(torch.as_tensor(x), self.truth).numpy()
        return out.reshape(X.shape[:-1])

    def sample(self, n: int, rng: np.random.Generator | np.random.SeedSequence | int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``(X [n, d], Y [n])`` from eq. (1) with the given random stream.

        ``rng`` may be a ``numpy.random.Generator``, a ``SeedSequence`` or an int seed; the same
        stream always gives the same data.
        """
        X, Y, _ = self.sample_with_mean(n, rng)
        return X, Y

    def sample_with_mean(self, n: int, rng: np.random.Generator | np.random.SeedSequence | int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`sample`'s ``(X [n, d], Y [n])`` (the same draws) and the truth's regression
        function at the inputs, ``g_{G*}(X) [n]``, which ``Y`` adds the noise to."""
        rng = numpy_generator(rng)
        X = self.sample_x(n, rng)
        eps = rng.normal(0.0, math.sqrt(self.noise_var), size=X.shape[0])
        mean = self.regression_function(X)
        return X, mean + eps, mean

    def knowing_mean(self, X: np.ndarray, mean: np.ndarray) -> "Scenario":
        """This scenario, whose :meth:`regression_function` of the array object ``X`` itself (not
        of an equal copy) returns ``mean`` instead of computing it again.

        Why: a work unit of a sweep draws ``Y = g_{G*}(X) + noise`` and then evaluates
        the truth's criterion on the same ``X`` (:func:`moestat.rates.truth_check.truth_criterion`),
        which computed ``g_{G*}(X)`` a second time -- about 1 CPU-s of the main job's 128 000-sample
        unit.  ``mean`` must be ``regression_function(X)`` (as :meth:`sample_with_mean` gives it,
        one data set at a time: the same numbers as the batched call); ``X`` must not be changed
        afterwards.  The scenario itself is unchanged; the copy is meant to live for one unit.

        Parameters
        ----------
        X : ndarray, shape ``[..., n, d]``
        mean : ndarray, shape ``[..., n]``
        """
        if np.shape(mean) != np.shape(X)[:-1]:
            raise ValueError(f"mean must have shape {np.shape(X)[:-1]}, got {np.shape(mean)}")
        copy = replace(self)
        object.__setattr__(copy, "_known_mean", (X, np.asarray(mean, dtype=np.float64)))
        return copy

    def sample_replicates(
        self, n: int, n_rep: int, rng: np.random.Generator | np.random.SeedSequence | int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n_rep`` independent data sets of size ``n``, drawn one after the other from one stream.

        Returns
        -------
        X : ndarray, shape ``[n_rep, n, d]``
        Y : ndarray, shape ``[n_rep, n]``
            Replicate ``r`` is the ``r``-th :meth:`sample` call on ``rng`` (the batched
            estimators' input layout).
        """
        n_rep = _check_int("n_rep", n_rep)
        rng = numpy_generator(rng)
        draws = [self.sample(n, rng) for _ in range(n_rep)]
        return np.stack([X for X, _ in draws]), np.stack([Y for _, Y in draws])

    def holdout(self, n: int = 4096, seed: int = 20240523) -> np.ndarray:
        """A fixed held-out input sample for the L2(mu) regression error (same for every fit)."""
        return self.sample_x(n, np.random.default_rng(seed))


def _gate_for(router: str, tau: float, k_active: int | None) -> Gate:
    if router not in ROUTERS:
        raise ValueError(f"unknown router {router!r}; expected one of {ROUTERS}")
    if router == "perturbed":
        if not tau > 0:
            raise ValueError(f"tau must be > 0 for the perturbed router (tau = 0 is the vanilla cosine router), got {tau!r}")
        return Gate("perturbed", tau=tau, k_active=k_active)
    return Gate("cosine" if router == "cosine" else "linear", k_active=k_active)


def draw_truth(
    d: int,
    k_true: int,
    rng: np.random.Generator,
    router_scale: float = 2.0,
    bias_scale: float = 0.5,
    expert_scale: float = 1.0,
    min_angle_deg: float = 40.0,
    min_expert_dist: float = 0.5,
    max_tries: int = 10_000,
) -> MixingMeasure:
    """Draw a true mixing measure in the style of Nguyen et al. (2024), App. E.1.

    Router rows ``beta1_i ~ N(0, router_scale^2 I_d / d)`` and biases ``beta0_i ~ N(0,
    bias_scale^2)`` for ``i < k*``; the last atom is the reference ``(0, 0_d)`` (A.3).  Experts
    ``(a_i, b_i) ~ N(0, expert_scale^2 I / d)`` for all atoms.  Draws are rejected until the
    router directions are pairwise at least ``min_angle_deg`` apart and the expert parameters at
    least ``min_expert_dist`` apart, so that the atoms are clearly distinct (A.2) and the rates
    are visible at moderate ``n``.
    """
    d = _check_int("d", d)
    k_true = _check_int("k_true", k_true)
    cos_max = math.cos(math.radians(min_angle_deg))
    for _ in range(max_tries):
        beta1 = rng.normal(0.0, router_scale / math.sqrt(d), size=(k_true, d))
        beta1[-1] = 0.0
        beta0 = rng.normal(0.0, bias_scale, size=k_true)
        beta0[-1] = 0.0
        eta = rng.normal(0.0, expert_scale / math.sqrt(d), size=(k_true, d + 1))
        u = beta1[:-1] / np.linalg.norm(beta1[:-1], axis=1, keepdims=True)
        cos = u @ u.T
        np.fill_diagonal(cos, -1.0)
        de = np.linalg.norm(eta[:, None, :] - eta[None, :, :], axis=-1)
        np.fill_diagonal(de, np.inf)
        if (k_true <= 2 or cos.max() <= cos_max) and de.min() >= min_expert_dist:
            return MixingMeasure(beta0, beta1, eta)
    raise ValueError(
        f"could not draw {k_true} well-separated atoms in d={d} after {max_tries} tries; lower min_angle_deg"
    )


#: Defaults of the documented paper-style scenario (Nguyen et al. (2024), Section 5.1; see docs/guide/model.rst).
DEFAULTS = dict(
    d=4, k_true=3, k_active=None, expert="gelu", tau=0.5, noise_var=0.01, truth_seed=2405_14131,
    router_scale=1.0, bias_scale=0.5, expert_scale=3.0,
)


def make_scenario(
    router: str = "perturbed",
    setting: str = "exact",
    *,
    d: int = DEFAULTS["d"],
    k_true: int = DEFAULTS["k_true"],
    k_active: int | None | str = "auto",
    router_scale: float = DEFAULTS["router_scale"],
    bias_scale: float = DEFAULTS["bias_scale"],
    expert_scale: float = DEFAULTS["expert_scale"],
    k_fit: int | None = None,
    k_active_fit: int | None = None,
    expert: str = DEFAULTS["expert"],
    degree: int = 2,
    tau: float = DEFAULTS["tau"],
    noise_var: float = DEFAULTS["noise_var"],
    input_law: str = "uniform",
    truth_seed: int = DEFAULTS["truth_seed"],
    truth: MixingMeasure | None = None,
    box: ParameterBox | None = None,
) -> Scenario:
    """The paper-style synthetic scenario for one router and setting.

    Parameters
    ----------
    router : {"perturbed", "cosine", "linear"}
        ``cosine`` is the vanilla cosine router (the paper's tau = 0).
    setting : {"exact", "over"}
        ``exact``: ``k_fit = k_true``; ``over``: ``k_fit = k_true + 1`` unless given, with
        ``k_active_fit = k_active + (k_fit - k_true)`` (the Proposition 1 minimum) unless given.
    d, k_true : int
        Input dimension and true number of experts k*.
    k_active : int, None or "auto"
        Activated experts K (``None``: dense).  ``"auto"`` is the dense gate (K = k*), the
        case where the least-squares problem is smooth.  Top-K sparse gates (an integer K) are
        supported, with two caveats documented in ``docs/guide/model.rst``: the hard selection
        puts a cusp into the objective at the truth, so no local optimiser certifies the LSE;
        and in the over-specified setting with K-bar = K + 1 the model cannot reproduce
        ``g_{G*}`` where the split cell is not among the true top K.
    router_scale, bias_scale, expert_scale : float
        Scales of the one-off draw of the true parameters (:func:`draw_truth`).
    expert : str
        Expert activation (one of :data:`moestat.model.experts.ACTIVATIONS`).
    tau : float
        ``tau1 = tau2 = tau`` of the perturbed router.
    noise_var : float
        Noise variance ``nu``.
    truth_seed : int
        Seed of the one-off draw of the true parameters (the paper keeps them fixed for all
        experiments). The same seed gives the same truth for every router, so router curves are
        comparable.
    truth : MixingMeasure, optional
        Use these true atoms instead of drawing them.

    Examples
    --------
    >>> s = make_scenario("perturbed", "over")
    >>> s.k_true, s.k_fit, s.k_active_fit
    (3, 4, None)
    >>> make_scenario("perturbed", "over", k_active=2).k_active_fit
    3
    """
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; expected one of {SETTINGS}")
    if expert not in ACTIVATIONS:
        raise ValueError(f"unknown expert {expert!r}; expected one of {ACTIVATIONS}")
    d = _check_int("d", d)
    k_true = _check_int("k_true", k_true)
    if isinstance(k_active, str):
        if k_active != "auto":
            raise ValueError(f"k_active must be an integer, None or 'auto', got {k_active!r}")
        k_active = DEFAULTS["k_active"]
    if k_active is not None:
        k_active = _check_int("k_active", k_active)
        if k_active > k_true:
            raise ValueError(f"k_active (K={k_active}) must not exceed k_true (k*={k_true})")
    if setting == "exact":
        if k_fit is not None and k_fit != k_true:
            raise ValueError(f"setting 'exact' needs k_fit == k_true ({k_true}), got k_fit={k_fit}")
        k_fit = k_true
    else:
        k_fit = k_true + 1 if k_fit is None else _check_int("k_fit", k_fit)
        if k_fit <= k_true:
            raise ValueError(f"setting 'over' needs k_fit > k_true ({k_true}), got k_fit={k_fit}")
    if truth is None:
        truth = draw_truth(
            d, k_true, np.random.default_rng(truth_seed),
            router_scale=router_scale, bias_scale=bias_scale, expert_scale=expert_scale,
        )
    gate = _gate_for(router, tau, k_active)
    model = MoEModel(gate, Expert(expert, degree))
    name = f"{router}-{setting}-d{d}-k{k_true}-K{k_active}-{Expert(expert, degree).describe()}"
    return Scenario(
        truth=truth,
        model=model,
        noise_var=noise_var,
        input_law=input_law,
        k_fit=k_fit,
        k_active_fit=k_active_fit,
        name=name,
        box=box or ParameterBox(),
    )


def default_scenario(router: str = "perturbed", setting: str = "exact") -> Scenario:
    """:func:`make_scenario` with every default: the scenario of ``python -m moestat.rates``."""
    return make_scenario(router, setting)
