"""Scenarios from files: a TOML file, or ``path/file.py:function`` returning a scenario.

A :class:`FileScenario` holds everything a rate study needs: the true atoms written out, the
gate and expert (built-in or of the protocol, :mod:`moestat.model.protocol`), the noise, the
input law (uniform box, clipped Gaussian, or inputs resampled from a user ``.npy``), the fitted
number of atoms and activated experts, and the losses to report with their predicted
exponents (:mod:`moestat.losses.voronoi_spec`).

TOML layout (every key is checked; an error names the key and the file)::

    name = "sigmoid-exact"    # the curve label (file:sigmoid-exact) and results.csv's scenario; default: the file's stem
    [gate]
    score = "linear"          # linear | cosine | perturbed (tau = [tau1, tau2])
    normalisation = "sigmoid" # softmax | sigmoid | gaussian (known kernel variance: variance = 1.0)
                              # | normalised-sigmoid | shared-sigmoid (last atom: a shared expert, weight 1)
    # k_active = 2            # Top-K (softmax only); temperature = 1.0
    # activation = "tanh"     # score act(beta1^T x): the activation variant of the temperature gate
    [expert]
    kind = "gelu"             # identity (linear) | gelu | relu | tanh | sigmoid | poly (degree) | mlp (hidden)
                              # | scaled_gelu | scaled_tanh | scaled_sigmoid: eta2 * phi(eta1^T x), eta = (eta1, eta2)
                              # | bare_gelu | bare_tanh | bare_sigmoid: phi(a^T x), eta = a (no bias, no scale)
                              # | multinomial (classes = C; noise.model = "mixture" only)
    [noise]
    model = "additive"        # additive: y = g(x) + N(0, variance); mixture: y drawn from the mixture
    variance = 0.01           # additive only; with mixture each atom has its own variance
    [input]
    law = "uniform"           # uniform | gaussian | npy (path = "x.npy", relative to the file)
                              # | gate: x from the Gaussian gate's mixture, the joint GLLiM (moestat.data.gllim_scenarios)
    [fit]
    k = 2                     # fitted atoms; k_active = K-bar (softmax Top-K)
    [[atoms]]                 # one table per true atom
    beta0 = 0.5
    beta1 = [1.0, -0.5]
    eta = [1.0, 0.0, 0.2]
    # variance = 0.25         # per-atom noise variance (noise.model = "mixture", Gaussian experts)
    [[losses]]                # a loss specification plus its predicted exponent (or omit it)
    name = "D3"
    builtin = "D3"
    predicted_exponent = -0.5

A softmax gate keeps the reference convention (the last atom has ``beta0 = 0`` and ``beta1 = 0``);
a Gaussian gate's ``exp(beta0_i)`` are its mixing weights ``pi_i`` (summing to one), its ``beta1_i``
the kernel centres.  With additive noise, a softmax gate with a built-in score and expert is a
:class:`~moestat.model.regression.MoEModel` (analytic kernel); anything else is a
:class:`~moestat.model.protocol.ProtocolModel` (:mod:`torch.func` Jacobians).  With
``noise.model = "mixture"`` the model is a :class:`~moestat.model.likelihood.LikelihoodModel`
(``y | x ~ sum_i w_i(x) N(h(x, eta_i), variance_i)``, or the multinomial expert's classes), fitted
by maximum likelihood (``--estimator mle``); the true measure's ``eta`` then ends with the atom's
variance, as in :mod:`moestat.model.gaussian_moe`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from moestat.data.gllim_scenarios import gllim_from_mapping
from moestat.data.likelihood_losses import default_likelihood_loss, default_likelihood_prediction, likelihood_loss_columns
from moestat.data.scenario_tables import (  # noqa: F401 - ScenarioFileError, KNOWN_KEYS, parse_losses: public here too
    KNOWN_KEYS,
    NOISE_MODELS,
    ScenarioFileError,
    _check_keys,
    _err,
    _number,
    parse_losses,
)
from moestat.data.synthetic import DEFAULT_INIT_SCALE, ScenarioBase, regression_loss_columns
from moestat.io import note_input, regular_file
from moestat.losses.voronoi_spec import LossSpec, builtin_spec
from moestat.model.experts import ACTIVATIONS, BARE_KINDS, Expert, SCALED_KINDS, activation_fn
from moestat.model.declaration import FitDeclaration
from moestat.model.gate_registry import GATES, SCORES, score_function
from moestat.model.gates import Gate
from moestat.model.likelihood import LikelihoodModel, MultinomialExpert, linear_expert
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.protocol import FunctionExpert, ProtocolGate, ProtocolModel, bare_expert, mlp_expert, scaled_expert
from moestat.model.regression import MoEModel
from moestat.seeding import numpy_generator

__all__ = ["FileScenario", "ScenarioFileError", "load_scenario", "scenario_digest", "scenario_from_mapping"]

INPUT_LAWS = ("uniform", "gaussian", "npy")


@dataclass(frozen=True)
class FileScenario(ScenarioBase):
    """A user scenario: truth, model, data law, fitted size and the losses to report.

    Parameters
    ----------
    truth : MixingMeasure
        Unbatched true atoms ``beta0 [k*]``, ``beta1 [k*, d]``, ``eta [k*, q]``.
    model : MoEModel or ProtocolModel
        The true model (gate with the true K).
    noise_var : float
        Variance of the Gaussian noise (shared by every expert).
    input_law : {"uniform", "gaussian", "npy"}
        Uniform ``[-1, 1]^d``, ``N(0, I/3)`` clipped to the box, or rows resampled with
        replacement from ``inputs``.
    inputs : ndarray, shape ``[m, d]``, optional
        The user's inputs for ``npy``.
    k_fit, k_active_fit : int or None
        Fitted atoms (default ``k*``) and fitted Top-K (default the true K).
    losses : tuple of LossSpec
        Losses to report (default D3 exact / D2 over-specified).
    predicted : dict
        Loss name -> predicted exponent of ``n`` (``None``: no polynomial rate stated).
    name : str
    box : ParameterBox
    noise_model : {"additive", "mixture"}
        ``additive``: ``y = g(x) + N(0, noise_var)``; ``mixture``: ``y`` drawn from the mixture of
        ``model`` (a :class:`~moestat.model.likelihood.LikelihoodModel`), each Gaussian atom with the
        variance in the last column of its ``eta``.
    """

    truth: MixingMeasure
    model: Any
    noise_var: float = 0.01
    input_law: str = "uniform"
    inputs: np.ndarray | None = None
    k_fit: int | None = None
    k_active_fit: int | None = None
    losses: tuple[LossSpec, ...] = ()
    predicted: Mapping[str, float | None] = field(default_factory=dict)
    name: str = "file"
    box: ParameterBox = field(default_factory=ParameterBox)
    noise_model: str = "additive"
    #: starts per replicate of a maximum-likelihood fit (``--starts``; the start and jittered copies)
    n_starts: int = 1
    #: ``[fit] gate_in_box``: maximum likelihood over the gate part of ``box`` (the compact parameter
    #: set of the theorem; :meth:`moestat.model.laplace_gate.LaplaceGate.box_limits`) instead of all of R^m
    gate_in_box: bool = False
    #: Loss name -> the theorem a *default* prediction comes from (a file that declares no
    #: ``[[losses]]`` but whose model meets a theorem's hypotheses; see
    #: :func:`moestat.data.likelihood_losses.default_likelihood_prediction`).
    prediction_sources: Mapping[str, str] = field(default_factory=dict)
    #: The name of the loss the file got by default (it declares no ``[[losses]]``), else ``None``: the
    #: loss that a theorem met by the truth predicts as its own D1/D2/D3 (:mod:`moestat.theorems.file_theorems`).
    default_loss: str | None = None

    @property
    def likelihood(self) -> bool:
        """Whether ``y`` is drawn from the mixture (fitted by maximum likelihood)."""
        return self.noise_model == "mixture"

    def __post_init__(self) -> None:
        t = self.truth.numpy()
        if t.batch_shape:
            raise ValueError("truth must be an unbatched mixing measure")
        object.__setattr__(self, "truth", t)
        if not all(np.all(np.isfinite(a)) for a in (t.beta0, t.beta1, t.eta)):
            raise ValueError("truth contains non-finite parameters")
        if self.noise_model not in ("additive", "mixture"):
            raise ValueError(f"noise_model must be 'additive' or 'mixture', got {self.noise_model!r}")
        if self.likelihood != isinstance(self.model, LikelihoodModel):
            raise ValueError("noise_model = 'mixture' goes with a moestat.model.likelihood.LikelihoodModel (and only it)")
        # the gate's own canonical form (softmax: the reference atom; Gaussian: weights summing to 1;
        # Laplace: the last beta0 pinned), so that every loss compares like with like
        family = self.model.gate.family if self._protocol else GATES["softmax"]
        msg = family.truth_error(t.beta0, t.beta1, bool(self.model.gate.reference) if self._protocol else True)
        if msg:
            raise ValueError(msg)
        if self.likelihood:
            q = self.model.n_eta(t.dim)
            if self.model.family == "gaussian" and not np.all(t.eta[:, -1] > 0):
                raise ValueError(f"every atom's variance must be > 0, got {t.eta[:, -1].tolist()}")
        else:
            q = self.model.n_expert_params(t.dim) if self._protocol else t.dim + 1
        if t.eta_dim != q:
            what = " (expert parameters, then the variance)" if self.likelihood and self.model.family == "gaussian" else ""
            raise ValueError(f"eta must have {q} entries per atom for this expert{what}, got {t.eta_dim}")
        if not (math.isfinite(self.noise_var) and self.noise_var > 0):
            raise ValueError(f"noise variance must be a positive finite number, got {self.noise_var!r}")
        if self.input_law not in INPUT_LAWS:
            raise ValueError(f"unknown input law {self.input_law!r}; expected one of {INPUT_LAWS}")
        if self.input_law == "npy":
            X = np.asarray(self.inputs, dtype=np.float64)
            if X.ndim != 2 or X.shape[1] != t.dim or X.shape[0] < 1 or not np.all(np.isfinite(X)):
                raise ValueError(f"inputs must be a finite [m, d={t.dim}] array, got shape {X.shape}")
            object.__setattr__(self, "inputs", X)
        k_fit = t.n_atoms if self.k_fit is None else int(self.k_fit)
        if k_fit < t.n_atoms:
            raise ValueError(f"fit k={k_fit} must be at least the true number of atoms k*={t.n_atoms}")
        object.__setattr__(self, "k_fit", k_fit)
        K = self.model.gate.k_active
        self.model.gate.check_n_experts(t.n_atoms)
        if self.k_active_fit is None and K is not None:
            object.__setattr__(self, "k_active_fit", min(k_fit, K + (k_fit - t.n_atoms)))
        if not self.losses:
            mass = self.model.gate.family.loss_mass if self._protocol else "softmax"
            if self.likelihood:
                spec = default_likelihood_loss(self.model, t, k_fit, mass)
                object.__setattr__(self, "losses", (spec,))
                theorem = default_likelihood_prediction(self.model, t, k_fit)
                if theorem is not None and spec.name not in self.predicted:  # the theorem's rate, named
                    object.__setattr__(self, "predicted", {**dict(self.predicted), spec.name: theorem[0]})
                    object.__setattr__(self, "prediction_sources", {**dict(self.prediction_sources), spec.name: theorem[1]})
            else:
                b = builtin_spec("D3" if k_fit == t.n_atoms else "D2", k_active=K)
                object.__setattr__(self, "losses", (replace(b, mass=mass),))
            object.__setattr__(self, "default_loss", self.losses[0].name)
        names = [s.name for s in self.losses]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate loss names {names}")
        for s in self.losses:
            if s.k_active is not None and s.k_active > t.n_atoms:
                raise ValueError(f"loss {s.name!r}: k_active={s.k_active} exceeds the number of true atoms k*={t.n_atoms}")
        object.__setattr__(self, "predicted", dict(self.predicted))
        object.__setattr__(self, "prediction_sources", dict(self.prediction_sources))

    @property
    def _protocol(self) -> bool:
        return not isinstance(self.model, MoEModel)

    @property
    def fit_model(self):
        """The fitted model (K-bar activated experts)."""
        return self.model.with_k_active(self.k_active_fit)

    def sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` inputs ``[n, d]`` from the input law."""
        if self.input_law == "uniform":
            return rng.uniform(-1.0, 1.0, size=(n, self.d))
        if self.input_law == "gaussian":
            return np.clip(rng.normal(0.0, math.sqrt(1.0 / 3.0), size=(n, self.d)), -1.0, 1.0)
        return self.inputs[rng.integers(0, self.inputs.shape[0], size=n)]

    def regression_function(self, X) -> np.ndarray:
        """``g_{G*}(X)`` ``[..., n]``."""
        return self.model.predict(torch.as_tensor(np.asarray(X, dtype=np.float64)), self.truth).numpy()

    def sample(self, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """``(X [n, d], Y [n])`` from the model, with the given stream."""
        rng = numpy_generator(rng)
        X = self.sample_x(n, rng)
        if self.likelihood:
            return X, self.model.sample_y(X, self.truth, rng)
        eps = rng.normal(0.0, math.sqrt(self.noise_var), size=n)
        return X, self.regression_function(X) + eps

    def holdout(self, n: int = 4096, seed: int = 20240523) -> np.ndarray:
        """A fixed held-out input sample for the L2 regression error."""
        return self.sample_x(n, np.random.default_rng(seed))

    # ---- the scenario protocol (moestat.data.synthetic.ScenarioBase) ----------------------------
    @property
    def mixture_data(self) -> bool:
        """``y`` drawn from the mixture (``noise.model = "mixture"``)."""
        return self.likelihood

    @property
    def variance_last(self) -> bool:
        """A Gaussian likelihood's atoms end with their variance."""
        return self.likelihood and self.model.family == "gaussian"

    @property
    def loss_specs(self) -> tuple:
        """The declared losses (``[[losses]]``)."""
        return tuple(self.losses or ())

    def loss_columns(self, fitted: MixingMeasure, X_holdout: np.ndarray) -> dict[str, np.ndarray]:
        """The sweep's loss columns: those of a mixture-noise model
        (:func:`moestat.data.likelihood_losses.likelihood_loss_columns`), else the regression
        scenario's (:func:`moestat.data.synthetic.regression_loss_columns`), declared losses included."""
        if self.likelihood:
            return likelihood_loss_columns(self, fitted, X_holdout)
        return regression_loss_columns(self, fitted, X_holdout)

    @property
    def declaration(self) -> FitDeclaration:
        """What the file fits: with ``[noise] model = "mixture"`` the ``likelihood`` family of its
        :class:`~moestat.model.likelihood.LikelihoodModel`, by maximum likelihood alone; else the
        ``regression`` family, by least squares alone (a likelihood estimator is refused: the file
        states no per-atom variance).  ``n_eta``: the expert's parameters (then the variance)."""
        if self.likelihood:
            return FitDeclaration("likelihood", self.fit_model, int(self.k_fit), self.d, self.model.n_eta(self.d), ("mle",),
                                  int(self.n_starts), 'this scenario file (noise.model = "mixture")')
        # the expert's own width (an MLP expert has more than d + 1 parameters)
        q = self.model.n_expert_params(self.d) if self._protocol else self.d + 1
        return FitDeclaration("regression", self.fit_model, int(self.k_fit), self.d, q, ("lse",), int(self.n_starts),
                              'this scenario file (noise.model = "additive")')

    def near_truth_start(self, scale: float = DEFAULT_INIT_SCALE, rng=None, *, n: int | None = None,
                         peer: bool = False) -> MixingMeasure:
        """A start at the truth plus ``N(0, scale^2)`` noise; extra atoms (over-specified fits)
        copy true atoms in turn, splitting the atom's mass between its ``m`` copies.

        Softmax gate: ``beta0 - log m`` (exact: the copies' weights sum to the atom's).  A sigmoid
        gate (normalised or not, :attr:`~moestat.model.gate_families.GateFamily.split_by_shift`
        false): each copy's weight is its own ``sigmoid``, so no
        shift halves it at every ``x``; each copy gets the intercept whose mean weight over the
        scenario's held-out inputs is ``1/m`` of the atom's (:meth:`_split_intercept`), so that
        the start's regression function stays near the truth's instead of counting the atom
        ``m`` times.  The reference atom of a softmax gate stays exactly at zero router.
        ``n`` is not used; ``peer`` (the peer code's schedule) is refused.
        """
        if peer:
            raise ValueError("init = 'peer' is not available for a scenario file; use 'near_truth' or 'random'")
        rng = numpy_generator(0 if rng is None else rng)  # None: seed 0, as ScenarioBase.near_truth_start
        t, k = self.truth, int(self.k_fit)
        owner = np.concatenate([np.arange(self.k_true), np.arange(k - self.k_true) % max(1, self.k_true - 1)])
        counts = np.bincount(owner, minlength=self.k_true)
        if not self._protocol or self.model.gate.family.split_by_shift:
            b0 = t.beta0[owner] - np.log(counts[owner])
        else:
            split = {j: self._split_intercept(j, int(c)) for j, c in enumerate(counts) if c > 1}
            b0 = np.array([split.get(j, t.beta0[j]) for j in owner], dtype=float)
        b0 = b0 + scale * rng.normal(size=k)
        b1 = t.beta1[owner] + scale * rng.normal(size=(k, self.d))
        eta = t.eta[owner] + scale * rng.normal(size=(k, t.eta_dim))
        if self.likelihood and self.model.family == "gaussian":  # variances jittered on the log scale
            eta[:, -1] = t.eta[owner, -1] * np.exp(scale * rng.normal(size=k))
        ref = self.model.gate.reference if self._protocol else True
        if ref:  # keep the reference atom last and exactly at zero
            order = np.concatenate([np.arange(k)[np.arange(k) != self.k_true - 1], [self.k_true - 1]])
            b0, b1, eta = b0[order], b1[order], eta[order]
            b0[-1], b1[-1] = 0.0, 0.0
        return MixingMeasure(b0, b1, eta)

    def _split_intercept(self, j: int, m: int) -> float:
        """The intercept ``b`` with ``mean_x w(x; b, beta1_j) = mean_x w(x; beta0_j, beta1_j) / m``
        over :meth:`holdout` (gates without a reference atom: each atom's weight is its own)."""
        from scipy.optimize import brentq

        x = torch.as_tensor(self.holdout(), dtype=torch.float64)
        b1 = torch.as_tensor(self.truth.beta1[j:j + 1], dtype=torch.float64)
        gate = self.model.gate

        def mass(b: float) -> float:
            return float(gate.family.split_weight(gate, x, torch.tensor([b], dtype=torch.float64), b1).mean())

        b0 = float(self.truth.beta0[j])
        target = mass(b0) / m
        lo = b0 - 1.0
        while mass(lo) > target:  # the mean weight decreases to 0 as b -> -inf
            lo -= 2.0 * (b0 - lo)
        return float(brentq(lambda b: mass(b) - target, lo, b0, xtol=1e-10))


def _expert(expert: Mapping[str, Any], d: int, where: str):
    kind = str(expert.get("kind", "gelu"))
    kind = "identity" if kind == "linear" else kind
    if kind == "multinomial":
        return MultinomialExpert(d, int(expert.get("classes", 0)))
    if "classes" in expert:
        raise _err(where, "expert.classes is for kind = 'multinomial'")
    if kind == "mlp":
        return mlp_expert(d, int(expert.get("hidden", 4)))
    if kind == "identity":
        return linear_expert(d)
    if kind in SCALED_KINDS:
        return scaled_expert(kind, d)
    if kind in BARE_KINDS:
        return bare_expert(kind, d)
    phi = activation_fn(kind, int(expert.get("degree", 2)))
    return FunctionExpert(lambda x, eta: phi(x @ eta[:-1] + eta[-1]), d + 1, kind)


def _model(gate: Mapping[str, Any], expert: Mapping[str, Any], d: int, where: str, mixture: bool = False):
    score = str(gate.get("score", "linear"))
    norm = str(gate.get("normalisation", "softmax"))
    k_active = gate.get("k_active")
    temperature = float(gate.get("temperature", 1.0))
    tau = gate.get("tau", 1.0)
    act = gate.get("activation")
    kind = str(expert.get("kind", "gelu"))
    kind = "identity" if kind == "linear" else kind
    kinds = ACTIVATIONS + SCALED_KINDS + BARE_KINDS + ("linear", "mlp", "multinomial")
    if score not in SCORES:
        raise _err(where, f"gate.score must be linear, cosine or perturbed, got {score!r}")
    if kind not in kinds:
        raise _err(where, f"expert.kind must be one of {kinds}, got {kind!r}")
    if kind == "multinomial" and not mixture:
        raise _err(where, "expert.kind = 'multinomial' (classification) needs noise.model = 'mixture'")
    if "variance" in gate and norm != "gaussian":
        raise _err(where, "gate.variance is the Gaussian gate's kernel variance: only with normalisation = 'gaussian'")
    if (not mixture and norm == "softmax" and temperature == 1.0 and act is None and kind in ACTIVATIONS):
        try:
            return MoEModel(Gate(score, tau=tau, k_active=k_active), Expert(kind, degree=int(expert.get("degree", 2))))
        except (TypeError, ValueError) as e:
            raise _err(where, f"[gate]/[expert]: {e}") from None
    sfn = score_function(score, tau)  # the built-in routers' scores (moestat.model.gate_registry)
    try:
        if act is not None:  # the activation variant of the dense-to-sparse gate: act(s(x)) / T
            phi, base = activation_fn(str(act)), sfn
            sfn = lambda x, beta1: phi(base(x, beta1))  # noqa: E731
            score = f"{act}({score})"
        pg = ProtocolGate(sfn, norm, k_active, temperature, None, score, float(gate.get("variance", 1.0)))
        ex = _expert(expert, d, where)
        if mixture:
            return LikelihoodModel(pg, ex)
    except (TypeError, ValueError) as e:
        raise _err(where, f"[gate]/[expert]: {e}") from None
    return ProtocolModel(pg, ex)


def scenario_from_mapping(m: Mapping[str, Any], where: str = "scenario", base: Path | None = None) -> FileScenario:
    """Build a :class:`FileScenario` from a parsed TOML mapping (see the module docstring); with
    ``[input] law = "gate"`` a :class:`~moestat.data.gllim_scenarios.GLLiMScenario` (the joint Gaussian-gated
    MoE, :func:`moestat.data.gllim_scenarios.gllim_from_mapping`).

    Raises
    ------
    ScenarioFileError
        Naming ``where`` (the file) and the key.
    """
    inp0 = m.get("input") if isinstance(m, Mapping) else None
    if isinstance(inp0, Mapping) and inp0.get("law") == "gate":  # x drawn from the gate's mixture: the joint GLLiM
        return gllim_from_mapping(m, where)
    m = _check_keys(m, "", where, "")
    tables = {t: _check_keys(m.get(t, {}), t, where, f"[{t}]") for t in ("gate", "expert", "noise", "input", "fit", "box")}
    atoms = m.get("atoms")
    if not isinstance(atoms, list) or not atoms:
        raise _err(where, "[[atoms]] must list at least one true atom")
    atoms = [_check_keys(a, "atoms", where, f"atoms[{i}]") for i, a in enumerate(atoms)]
    noise = tables["noise"]
    model_kind = str(noise.get("model", "additive"))
    if model_kind not in NOISE_MODELS:
        raise _err(where, f"noise.model must be one of {NOISE_MODELS}, got {model_kind!r}")
    mixture = model_kind == "mixture"
    multinomial = str(tables["expert"].get("kind", "")) == "multinomial"
    if mixture and "variance" in noise:
        raise _err(where, "noise.variance is the additive noise's; with noise.model = 'mixture' give each atom its variance")
    with_var = [("variance" in a) for a in atoms]
    if mixture and not multinomial and not all(with_var):
        raise _err(where, f"noise.model = 'mixture': every atom needs its variance (missing in atoms{[i for i, v in enumerate(with_var) if not v]})")
    if (not mixture or multinomial) and any(with_var):
        raise _err(where, "atoms[].variance is the per-atom variance of noise.model = 'mixture' with Gaussian experts")
    try:
        beta0 = np.array([float(a["beta0"]) for a in atoms])
        beta1 = np.array([[float(v) for v in a["beta1"]] for a in atoms])
        eta = np.array([[float(v) for v in a["eta"]] for a in atoms])
        if mixture and not multinomial:
            eta = np.column_stack([eta, [float(a["variance"]) for a in atoms]])
    except KeyError as e:
        raise _err(where, f"atoms: every atom needs beta0, beta1 and eta (missing {e.args[0]!r})") from None
    except (TypeError, ValueError):
        raise _err(where, "atoms: beta0 and variance must be numbers, beta1 and eta lists of numbers of equal length across atoms") from None
    if beta1.ndim != 2 or eta.ndim != 2:
        raise _err(where, "atoms: beta1 and eta must have the same length in every atom")
    d = beta1.shape[1]
    model = _model(tables["gate"], tables["expert"], d, where, mixture)
    inp = tables["input"]
    law = str(inp.get("law", "uniform"))
    inputs = None
    if law == "npy":
        if "path" not in inp:
            raise _err(where, "input.path is required with law = 'npy'")
        p = Path(inp["path"])
        p = p if p.is_absolute() or base is None else base / p
        try:
            inputs = np.load(p)
        except (OSError, ValueError) as e:
            raise _err(where, f"input.path: cannot read {str(p)!r} ({e.__class__.__name__})") from None
    fit = tables["fit"]
    gate_in_box = fit.get("gate_in_box", False)
    if not isinstance(gate_in_box, bool):
        raise _err(where, f"fit.gate_in_box must be true or false, got {gate_in_box!r}")
    losses, predicted = parse_losses(m.get("losses", []), where)
    nv = noise.get("variance", 0.01)
    if not _number(nv):
        raise _err(where, f"noise.variance must be a number, got {nv!r}")
    try:
        return FileScenario(
            MixingMeasure(beta0, beta1, eta), model, float(nv), law, inputs,
            fit.get("k"), fit.get("k_active"), losses, predicted, str(m.get("name", "file")),
            ParameterBox(**tables["box"]), model_kind, gate_in_box=gate_in_box,
        )
    except (TypeError, ValueError) as e:
        raise _err(where, str(e)) from None


def _scenario_path(path: str) -> Path:
    """``path`` if it is a regular file; a folder, FIFO or device is named as such, not as missing."""

    if not os.path.exists(path):
        raise ScenarioFileError(f"{path}: no such file")
    try:
        return regular_file(path, "scenario file")
    except ValueError as exc:
        raise ScenarioFileError(str(exc)) from None


def load_scenario(source: str) -> FileScenario:
    """A scenario from ``FILE.toml`` or ``path/file.py:function`` (the function returns a :class:`FileScenario`).

    Raises
    ------
    ScenarioFileError
        One line naming the file (and the key).
    """
    if ".py:" in source:
        path, func = source.rsplit(":", 1)
        p = _scenario_path(path)
        spec = importlib.util.spec_from_file_location(f"moestat_user_scenario_{p.stem}", p)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except SystemExit as e:  # sys.exit() in the user's file would end moestat with no word
            raise ScenarioFileError(f"{path}: importing it called sys.exit({e.code!r}); a scenario file must define "
                                    "the function, not run a program") from None
        except Exception as e:  # the user's code: report, do not crash
            raise ScenarioFileError(f"{path}: importing it failed: {e.__class__.__name__}: {e}") from None
        fn = getattr(mod, func, None)
        if not callable(fn):
            raise ScenarioFileError(f"{path}: no function {func!r}")
        try:
            sc = fn()
        except SystemExit as e:
            raise ScenarioFileError(f"{source}: the function called sys.exit({e.code!r}) instead of returning a "
                                    "FileScenario") from None
        except Exception as e:
            raise ScenarioFileError(f"{source}: the function raised {e.__class__.__name__}: {e}") from None
        if not isinstance(sc, FileScenario):
            raise ScenarioFileError(f"{source}: must return a moestat FileScenario, got {type(sc).__name__}")
        return sc
    p = _scenario_path(source)
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ScenarioFileError(f"{source}: not valid TOML ({e})") from None
    return scenario_from_mapping(data, where=source, base=p.parent)


def scenario_digest(source: str) -> str:
    """SHA-256 of the scenario file's bytes (for a config hash: a changed file is a new config)."""
    path = source.rsplit(":", 1)[0] if ".py:" in source else source
    note_input(path, "scenario file")  # read on every run (the scenario itself may come from a cache)
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise ScenarioFileError(f"{path}: cannot be read ({e.strerror or e})") from None
