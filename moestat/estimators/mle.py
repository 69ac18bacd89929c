"""Maximum likelihood for the softmax-gated Gaussian mixture of experts: batched EM in torch.

Model (:mod:`moestat.model.gaussian_moe`), with ``x~ = (x, 1)`` and the last atom the reference
(``beta0_k = 0``, ``beta1_k = 0``)::

    p(y | x) = sum_i softmax_i(V_i^T x~) N(y; E_i^T x~, sigma_i^2),   V_i = (beta1_i, beta0_i),
                                                                      E_i = (a_i, b_i).

Every replicate and every start of it is one entry of a leading batch axis ``B = R x S``; one
EM iteration is a handful of batched matrix products over that axis (no Python loop over
replicates), and a start that has converged leaves the batch (compaction), so the slowest start
alone sets the cost of the last iterations.  One iteration:

* **E-step** in log space: ``r_ni = exp(log pi_i + log N_i - logsumexp_j(...))``.
* **Experts** by batched weighted least squares (normal equations ``(X~^T R_i X~) E_i =
  X~^T R_i y``, one ``[p, p]`` solve per atom), then ``sigma_i^2 = sum_n r_ni (y_n - E_i^T
  x~_n)^2 / sum_n r_ni`` (``variance="per_expert"``) or the pooled ``sum_ni r_ni (...)^2 / n``
  (``"shared"``).  The variance is floored at ``var_floor * var(y)``: the likelihood of a
  Gaussian mixture is unbounded (a component collapsing on one point), and the floored update is
  still the exact maximiser of the expected complete-data log-likelihood over the allowed set
  (it is unimodal in ``sigma^2``), so the floor keeps EM monotone.
* **Gate** by one Newton/IRLS step on the concave ``Q_g(V) = sum_ni r_ni log pi_i(x_n; V)`` over
  the free rows ``V_1..V_{k-1}``, halved until the observed log-likelihood does not decrease.

The expert and variance updates are exact maximisers of the expected complete-data
log-likelihood, so with the gate held fixed (the last resort of the halving) the observed
log-likelihood cannot decrease (Dempster, Laird & Rubin 1977); the step control makes every
accepted iterate at least as likely as the last -- a hypothesis test checks every trace.  A start
stops when the per-sample log-likelihood changes by at most ``tol``.

Every iteration is one pass over the data (:func:`_em_pass`: the log-likelihood and all the
sufficient statistics of the next M-step), fused by ``torch.compile`` on the CPU for large
problems.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from moestat.devices import resolve_device
from moestat.estimators import generic_starts as gs, memory, mle_generic as mg
from moestat.estimators.base import MoEEstimator
from moestat.estimators.mle_fused import _COMPILED, _em_pass, _pass_function, fit_em, pass_loglik  # noqa: F401 (re-exported)
from moestat.estimators.starts import random_partition_init
from moestat.estimators.validation import prepare_data
from moestat.model.gaussian_moe import mean_function
from moestat.model.likelihood import LikelihoodModel, linear_expert
from moestat.model.mixing import MixingMeasure, ParameterBox
from moestat.model.protocol import ProtocolGate

__all__ = ["MLEGaussianMoE", "StartResults", "VARIANCES", "EM_ENGINES", "em_engine"]

VARIANCES = ("per_expert", "shared")
_LOG2PI = math.log(2.0 * math.pi)
#: Newton iterations after EM for an over-fitted Gaussian-MoE scenario (the rates pipeline's rule)
OVER_POLISH_ITER = 100


@dataclass(frozen=True)
class StartResults:
    """Every start's result of one :meth:`MLEGaussianMoE.fit` (``keep_starts=True``: ``starts_``).

    The ``E`` entries are the fit's batch: replicate-major, ``S`` starts per replicate (``E = R S``),
    then, for a Top-K gate of the generic EM, the starts it added
    (:func:`~moestat.estimators.generic_starts.idle_atom_starts`), each owned by one replicate.

    Attributes
    ----------
    replicate : ndarray of int, shape ``[E]``
        The replicate each entry fits.
    loglik : ndarray, shape ``[E]``
        Its final observed-data log-likelihood (sum over samples; NaN or -inf where it failed).
    status : list of str, length ``E``
        Its stopping status as the EM (or the Newton polish) left it: ``"tol"``, ``"newton"``,
        ``"max_iter"`` or ``"nonfinite"``.
    n_iter : ndarray of int, shape ``[E]``
        Its iterations (EM, then accepted Newton steps).
    params : MixingMeasure
        Its parameters in ``params_``'s layout: ``beta0 [E, k]``, ``beta1 [E, k, d]``, ``eta [E, k,
        d + 2]`` (or ``d + 1`` with ``eta_variance=False``).
    variances : ndarray, shape ``[E, k]``
        Its variances (NaN for experts without one).
    chosen : ndarray of int, shape ``[R]``
        The entry reported for each replicate (``params_``, ``loglik_``, ``status_``, ``n_iter_``):
        its best finite log-likelihood, the first one on a tie.
    """

    replicate: np.ndarray
    loglik: np.ndarray
    status: list
    n_iter: np.ndarray
    params: MixingMeasure
    variances: np.ndarray
    chosen: np.ndarray


def _concat_results(parts: list[dict]) -> dict:
    """The result dict of :func:`fit_em` / :func:`~moestat.estimators.mle_generic.fit_generic` over
    consecutive chunks of entries, as one batch's: arrays and lists joined in order; ``kernel`` the
    first chunk's, ``"compiled"``-style only if every chunk ran compiled (an eager fallback is global)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for key, first in parts[0].items():
        if key == "kernel":
            kinds = [p[key] for p in parts]
            out[key] = first if len(set(kinds)) == 1 else min(kinds, key=len)
        elif isinstance(first, list):
            out[key] = [x for p in parts for x in p[key]]
        elif isinstance(first, np.ndarray):
            out[key] = np.concatenate([p[key] for p in parts])
        else:
            out[key] = first
    return out


#: The two batched EM engines behind :class:`MLEGaussianMoE` (:func:`em_engine` says which fits a model).
EM_ENGINES = ("fused", "generic")


def em_engine(model, generic: bool = False) -> str:
    """Which batched EM fits ``model``: the one rule behind :class:`MLEGaussianMoE` (``--estimator mle``).

    * ``"fused"`` (:mod:`moestat.estimators.mle_fused`): the softmax-gated Gaussian MoE with linear
      experts -- ``model`` ``None``, a dense linear softmax :class:`~moestat.model.regression.MoEModel`
      with identity experts, or a :class:`~moestat.model.likelihood.LikelihoodModel` that is that
      model (``is_linear_softmax``).  One fused pass over the data per iteration (CPU: compiled),
      per-expert or shared variances, the CUDA path; the fastest.
    * ``"generic"`` (:mod:`moestat.estimators.mle_generic`): every other
      :class:`~moestat.model.likelihood.LikelihoodModel` (Top-K, Gaussian, Laplace, temperature or
      sigmoid gates; polynomial, FFN, MLP or multinomial-logistic experts): autograd-free closed
      forms where they exist, Newton steps on the gate, per-expert variances, CPU.
    * ``generic=True`` asks for the generic EM where the fused one applies (the check of one
      against the other, and its benchmark).

    Parameters
    ----------
    model : LikelihoodModel, MoEModel or None
    generic : bool

    Returns
    -------
    str
        ``"fused"`` or ``"generic"`` (:data:`EM_ENGINES`).

    Examples
    --------
    >>> em_engine(None)
    'fused'
    """
    if generic or (isinstance(model, LikelihoodModel) and not model.is_linear_softmax):
        return "generic"
    return "fused"


def _check_model(model, k: int) -> None:
    if model is None or isinstance(model, LikelihoodModel):  # any gate and expert: the generic EM
        return
    gate, expert = getattr(model, "gate", None), getattr(model, "expert", None)
    if gate is None or expert is None:
        raise ValueError(f"model must be a moestat.model.regression.MoEModel (gate, expert) or None, got {model!r}")
    kind, k_active = getattr(gate, "kind", None), getattr(gate, "k_active", None)
    # Top-K with K >= k activates every expert: the dense gate
    dense = k_active is None or k_active >= k
    if kind != "linear" or not dense or getattr(expert, "activation", None) != "identity":
        raise ValueError(
            f"the Gaussian-MoE MLE needs the dense linear softmax gate with identity (linear) experts, got {model!r}; "
            "for other gates and experts pass a moestat.model.likelihood.LikelihoodModel (the generic EM)"
        )


class MLEGaussianMoE(MoEEstimator):
    """Maximum-likelihood (EM) estimator of a softmax-gated Gaussian MoE, batched over replicates and starts.

    Parameters
    ----------
    model : LikelihoodModel, MoEModel or None
        ``None`` or a dense ``linear`` gate with ``identity`` experts: the softmax-gated Gaussian
        MoE with linear experts, fitted by the fused EM (:mod:`moestat.estimators.mle_fused`).  A
        :class:`~moestat.model.likelihood.LikelihoodModel`: any gate and expert of the protocol
        (Top-K, Gaussian, temperature or sigmoid gates; polynomial, FFN, MLP or multinomial-logistic
        experts), fitted by the generic EM (:mod:`moestat.estimators.mle_generic`) -- except the
        dense linear softmax gate with linear experts, which keeps the fused EM.  The rule is
        :func:`em_engine` (public, so a reader can ask which engine fits a model); ``kernel_`` says
        which one ran.  An integer here is read as ``n_components``.
    n_components : int
        Number of atoms ``k`` (default 2).
    variance : {"per_expert", "shared"}
        One variance per expert (Nguyen, Nguyen & Ho 2023) or one for all (Jordan & Jacobs 1994).
    eta_variance : bool
        ``True``: ``params_.eta`` is ``(a, b, sigma^2)`` per atom (``[R, k, d + 2]``, the
        Gaussian-MoE measure); ``False``: ``(a, b)`` only (``[R, k, d + 1]``, the regression
        measure of the other estimators) with the variances in ``variances_``.
    max_iter : int
        EM iterations per start.
    tol : float
        A start has converged when the per-sample log-likelihood changes by at most ``tol``.
    n_init : int
        Starts per replicate.  Without ``init``: random-partition starts; with an ``init [R]``:
        the given start plus ``n_init - 1`` jittered copies (``init_jitter``).  An ``init`` of batch
        shape ``[R, S]`` gives the ``S`` starts explicitly and ``n_init`` is ignored.  The generic EM
        adds, for a Top-K gate, a start for each start with a tied (split) atom, the atom re-seated
        as an idle one (:func:`~moestat.estimators.generic_starts.idle_atom_starts`); the best is kept.
    init_jitter : float
        Standard deviation of the noise of the jittered copies (on ``beta0``, ``beta1``, ``a``,
        ``b`` and ``log sigma^2``).
    var_floor : float
        Floor of every variance, relative to ``var(y)`` of the replicate.
    random_state : None, int, SeedSequence or Generator
        Seeds the random starts and jitters.
    device : str
        ``cpu`` (default), ``cuda[:N]`` or ``auto``.
    compile : bool, "auto" or "all"
        Fuse the EM pass (:func:`fit_em`: on the CPU an AOTInductor package of the pass, built once
        per cache folder, elsewhere ``torch.compile``; for the generic EM, ``torch.compile`` of its E-step and
        gate objective: :func:`moestat.estimators.mle_generic.use_compiled`); ``"auto"`` (default)
        compiles on the CPU for problems of at least :data:`COMPILE_MIN_SAMPLES` samples x starts;
        ``"all"`` compiles the fused EM's pass on the CPU whatever the size (what a large sweep
        asks, :func:`moestat.estimators.em_driver.sweep_compile`; the generic EM reads it as
        ``"auto"``).  Without a working compiler ``"auto"`` and ``"all"`` run eagerly (one warning).
    accelerate : bool
        SQUAREM extrapolation (Varadhan & Roland 2008) between pairs of EM steps, kept only where
        it does not lower the log-likelihood; for over-fitted models, where EM is sublinear.
    polish_iter : int
        Damped Newton iterations (:mod:`moestat.estimators.mle_newton`) after EM, for every finite
        start; a start that reaches the second-order certificate (negative Hessian positive
        definite, Newton decrement <= ``tol * n``) gets status ``"newton"``; the others keep EM's
        status.  0 (default): EM alone.
    generic : bool
        Fit with the generic EM even where the fused EM applies (its check against the fused EM
        and its benchmark); default ``False``.
    keep_starts : bool
        Keep every start's result in ``starts_`` (a :class:`StartResults`): the log-likelihood,
        status, iterations and parameters of each, e.g. to see which local maxima the starts reach.
        The fit reported is the same either way; default ``False`` (nothing more is stored).
    gate_box : ParameterBox or None
        Maximum likelihood over a compact set of the gate parameters (the gate family's
        ``box_limits``; the Laplace gate: every centre coordinate and intercept, see
        :mod:`moestat.model.laplace_gate`), by the generic EM with each gate step projected onto it;
        ``None`` (default): over all of ``R^m``.  A scenario file asks for it with ``[fit]
        gate_in_box = true`` and states the set in ``[box]``.
    max_memory : int, str or None
        Budget (bytes, or ``"1.5G"``-style text) of the EM's per-sample arrays: the batch entries
        (replicates x starts) are fitted in chunks whose estimate
        (:func:`moestat.estimators.memory.fit_bytes`) stays within it, with the same fits as one
        batch (the entries are independent and the compile decision is the whole batch's).
        ``"auto"`` (default): :data:`~moestat.estimators.memory.DEFAULT_MAX_MEMORY`, or half the
        available memory where that is less.  One entry is never cut.

    Attributes
    ----------
    params_ : MixingMeasure
        Best start of each replicate: ``beta0 [R, k]``, ``beta1 [R, k, d]``, ``eta [R, k, d + 2]``
        (or ``d + 1``, see ``eta_variance``); last atom the reference.  NaN where the fit failed.
    variances_ : ndarray, shape ``[R, k]``
    loglik_ : ndarray, shape ``[R]``
        Final observed-data log-likelihood (sum over samples) of the best start.
    loglik_path_ : list of ndarray
        Log-likelihood after every EM iteration (the start first) of the best start, per replicate.
    objective_ : ndarray, shape ``[R]``
        Mean squared residual of the fitted mean function (the estimator contract).
    converged_, n_iter_, status_
        Of the best start: ``"tol"`` (EM's stopping rule), ``"newton"`` (the Newton polish's
        certificate), ``"max_iter"`` or ``"nonfinite"``; ``converged_`` is ``"tol"`` or ``"newton"``.
    n_newton_ : ndarray, shape ``[R]``
        Accepted Newton steps of the best start (included in ``n_iter_``).
    model_ : LikelihoodModel or None
        The model the generic EM fitted (the linear softmax with linear experts for ``generic=True``
        without a model); ``None`` after the fused EM.
    kernel_ : str
        ``"compiled"`` or ``"eager"``: how the fused EM pass ran; ``"generic"`` or ``"generic-compiled"``:
        the generic EM, eager or with its E-step and gate objective compiled.
    on_box_ : ndarray of bool, shape ``[R]``
        Only with ``gate_box``: whether the reported fit has a gate parameter on the box's boundary.
    starts_ : StartResults
        Only with ``keep_starts=True``: every start's result, ``E`` entries (``[R S]`` plus any
        added Top-K starts), and which of them is reported per replicate.

    Examples
    --------
    >>> import numpy as np
    >>> from moestat.data.gaussian_scenarios import model1_scenario
    >>> sc = model1_scenario("exact")
    >>> X, Y = sc.sample(500, np.random.default_rng(0))
    >>> est = MLEGaussianMoE(n_components=2, random_state=0, n_init=3).fit(X, Y)
    >>> est.params_.eta.shape, est.status_
    ((1, 2, 3), ['tol'])
    """

    def __init__(
        self,
        model=None,
        n_components: int | None = None,
        *,
        variance: str = "per_expert",
        eta_variance: bool = True,
        max_iter: int = 1000,
        tol: float = 1e-10,
        n_init: int = 1,
        init_jitter: float = 0.1,
        var_floor: float = 1e-6,
        random_state=0,
        device: str = "cpu",
        compile: bool | str = "auto",
        accelerate: bool = False,
        polish_iter: int = 0,
        generic: bool = False,
        keep_starts: bool = False,
        gate_box: ParameterBox | None = None,
        max_memory: int | str | None = "auto",
    ) -> None:
        self.model = model
        self.n_components = n_components
        self.variance = variance
        self.eta_variance = eta_variance
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.init_jitter = init_jitter
        self.var_floor = var_floor
        self.random_state = random_state
        self.device = device
        self.compile = compile
        self.accelerate = accelerate
        self.polish_iter = polish_iter
        self.generic = generic
        self.keep_starts = keep_starts
        self.gate_box = gate_box
        self.max_memory = max_memory

    @classmethod
    def _from_scenario(cls, scenario, *, max_iter, random_state, device) -> "MLEGaussianMoE":
        # a scenario of y drawn from the mixture has atoms (a, b, sigma^2); a regression scenario (a, b)
        declared = scenario.declaration
        gaussian = declared.family in ("gaussian-moe", "likelihood")
        model = None if declared.family == "gaussian-moe" else scenario.fit_model
        # over-fitted Gaussian MoE: EM is sublinear where atoms share a cell, so SQUAREM steps, then
        # Newton steps to the second-order certificate, which EM alone does not reach above n ~ 3 000
        # in 5 000 iterations (docs/guide/gaussian_moe.rst); exact fits converge in a few EM steps
        over = gaussian and scenario.setting == "over"
        # the generic EM (any gate or expert but the linear softmax with linear Gaussian experts) can
        # crawl on exact fits too: a multinomial-logistic MoE took 300-900 EM steps and stopped on the
        # per-sample tolerance up to 0.013 nats below the optimum SQUAREM reached in 90-200
        return cls(model, scenario.k_fit, eta_variance=gaussian, max_iter=max_iter, random_state=random_state,
                   device=device, n_init=declared.n_starts, accelerate=over or em_engine(model) == "generic",
                   polish_iter=OVER_POLISH_ITER if over else 0,
                   gate_box=scenario.box if getattr(scenario, "gate_in_box", False) else None)

    def _k(self) -> int:
        model, k = self.model, self.n_components
        if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
            if k is not None:
                raise ValueError("give the number of experts once: MLEGaussianMoE(model, n_components) or MLEGaussianMoE(k)")
            k = model
        return 2 if k is None else k

    def _check_params(self) -> None:
        k = self._k()
        for nm, v in (("n_components", k), ("max_iter", self.max_iter), ("n_init", self.n_init)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}")
        if not isinstance(self.model, (int, np.integer)):
            _check_model(self.model, int(k))
        if self.variance not in VARIANCES:
            raise ValueError(f"variance must be one of {', '.join(VARIANCES)}, got {self.variance!r}")
        for nm, v, pos in (("tol", self.tol, False), ("init_jitter", self.init_jitter, False),
                           ("var_floor", self.var_floor, True)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (pos and v == 0):
                raise ValueError(f"{nm} must be a finite number {'> 0' if pos else '>= 0'}, got {v!r}")
        if isinstance(self.polish_iter, bool) or not isinstance(self.polish_iter, (int, np.integer)) or self.polish_iter < 0:
            raise ValueError(f"polish_iter must be an integer >= 0, got {self.polish_iter!r}")
        if self.gate_box is not None and not isinstance(self.gate_box, ParameterBox):
            raise TypeError(f"gate_box must be a ParameterBox or None, got {type(self.gate_box).__name__}")
        if self.gate_box is not None and not self._use_generic():
            raise ValueError("gate_box needs the generic EM (a gate with its own box_limits, e.g. the Laplace gate)")
        if not isinstance(self.generic, (bool, np.bool_)):
            raise ValueError(f"generic must be True or False, got {self.generic!r}")
        if not isinstance(self.accelerate, (bool, np.bool_)):
            raise ValueError(f"accelerate must be True or False, got {self.accelerate!r}")
        if not isinstance(self.keep_starts, (bool, np.bool_)):
            raise ValueError(f"keep_starts must be True or False, got {self.keep_starts!r}")
        if self.compile not in (True, False, "auto", "all"):
            raise ValueError(f"compile must be True, False, 'auto' or 'all', got {self.compile!r}")
        memory.parse_memory("auto" if self.max_memory is None else self.max_memory)
        resolve_device(self.device)
        self._rng()

    # ---- starts ----------------------------------------------------------------------------
    def _start_measures(self, X: np.ndarray, Y: np.ndarray, init, k: int, draw, eta_dims: tuple, gaussian,
                        hint: str = "") -> MixingMeasure:
        """Starts ``[R, S]`` of either EM, as one :class:`MixingMeasure` in the model's layout.

        Without ``init``: ``n_init`` random starts per replicate, ``draw(X_r, Y_r, rng)`` with one
        spawned stream each.  With ``init`` of batch shape ``()`` or ``(R,)``: the given start and
        ``n_init - 1`` jittered copies (:func:`~moestat.estimators.generic_starts.jitter`); of batch
        shape ``(R, S)``: the ``S`` starts as given.  ``eta_dims``: the allowed ``eta`` widths (``hint``
        says what they hold); ``gaussian(G)``: whether ``G``'s last ``eta`` column is a variance
        (jittered on the log scale).
        """
        R, n, d = X.shape
        rng = self._rng()
        if init is None:
            return MixingMeasure.stack([MixingMeasure.stack([draw(X[r], Y[r], g) for g in rng.spawn(self.n_init)])
                                        for r in range(R)])
        G = init.numpy()
        if G.n_atoms != k or G.dim != d or G.eta_dim not in eta_dims:
            want = " or ".join(str(w) for w in eta_dims)
            raise ValueError(f"init must have k={k} atoms, beta1 [..., {k}, {d}] and eta [..., {k}, {want}]{hint}, "
                             f"got beta1 {G.beta1.shape}, eta {G.eta.shape}")
        bs = G.batch_shape
        if bs in ((), (R,)):
            G = MixingMeasure(*(np.broadcast_to(a, (R,) + a.shape[len(bs):])[:, None] for a in (G.beta0, G.beta1, G.eta)))
            if self.n_init > 1:
                G = gs.jitter(G, self.n_init, float(self.init_jitter), rng, gaussian(G))
        elif len(bs) != 2 or bs[0] != R:
            raise ValueError(f"init must have batch shape (), ({R},) or ({R}, S), got {bs}")
        return G

    def _starts(self, X: np.ndarray, Y: np.ndarray, init, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The fused EM's starts ``V [R, S, k, p]``, ``E [R, S, k, p]``, ``s2 [R, S, k]`` (``None``: from the data)."""
        d = X.shape[2]
        G = self._start_measures(X, Y, init, k, lambda x, y, g: random_partition_init(x, y, k, g), (d + 1, d + 2),
                                 lambda G: G.eta_dim == d + 2)
        V = np.concatenate([G.beta1, G.beta0[..., None]], axis=-1)
        V = V - V[..., -1:, :]  # reference convention (softmax is invariant to a common shift)
        E = np.ascontiguousarray(G.eta[..., : d + 1])
        s2 = np.ascontiguousarray(G.eta[..., d + 1]) if G.eta_dim == d + 2 else None
        return V, E, s2

    # ---- fitting ---------------------------------------------------------------------------
    def fit(self, X, Y, init: MixingMeasure | None = None) -> "MLEGaussianMoE":
        """Fit every replicate (every start batched) and keep the best start of each.

        Parameters
        ----------
        X : array or Tensor, shape ``[R, n, d]`` (or ``[n, d]``)
        Y : array or Tensor, shape ``[R, n]`` (or ``[n]``)
        init : MixingMeasure, optional
            Batch shape ``()``, ``(R,)`` or ``(R, S)``; ``eta`` with ``d + 2`` columns (a, b,
            sigma^2) or ``d + 1`` (a, b; the starting variances are then the weighted residual
            variances under the start).

        Returns
        -------
        MLEGaussianMoE
        """
        self._check_params()
        k = int(self._k())
        dev = resolve_device(self.device)
        Xt, Yt = prepare_data(X, Y, k, torch.device("cpu"), min_samples=2)
        Xn, Yn = Xt.numpy(), Yt.numpy()
        R, n, d = Xn.shape
        if self._use_generic():
            return self._fit_generic(Xt, Yt, init, k)
        V0, E0, s20 = self._starts(Xn, Yn, init, k)
        S = V0.shape[1]
        # replicates in chunks within the memory budget (whole replicates: fit_em batches its S starts
        # itself); the compile decision is the whole batch's, so every chunk runs the same pass
        per = max(1, memory.entries_per_chunk(n, k, d, self.max_memory) // S)
        parts = []
        for a, b in memory.chunks(R, per):
            parts.append(fit_em(
                # torch.tensor copies: a start broadcast from one init is a read-only NumPy view, which
                # torch.as_tensor would wrap with a warning (fit_em clones its starts anyway)
                Xt[a:b].to(dev), Yt[a:b].to(dev), torch.tensor(V0[a:b], device=dev), torch.tensor(E0[a:b], device=dev),
                None if s20 is None else torch.tensor(s20[a:b], device=dev),
                shared=self.variance == "shared", max_iter=int(self.max_iter), tol=float(self.tol),
                var_floor=float(self.var_floor), compile=self.compile, accelerate=bool(self.accelerate),
                polish_iter=int(self.polish_iter), compile_size=R * S * n,
            ))
        res = _concat_results(parts)
        pick = self._best_starts(res, R, S)
        V, E, s2 = res["V"][pick], res["E"][pick], res["s2"][pick]
        eta = np.concatenate([E, s2[..., None]], axis=-1) if self.eta_variance else E
        self.variances_ = s2
        if self.keep_starts:  # every entry in the same layout as the chosen ones
            Va, Ea, s2a = res["V"], res["E"], res["s2"]
            eta_all = np.concatenate([Ea, s2a[..., None]], axis=-1) if self.eta_variance else Ea
            self._keep(res, pick, np.arange(R).repeat(S), MixingMeasure(Va[..., -1], Va[..., :-1], eta_all), s2a)
        return self._finish(MixingMeasure(V[..., -1], V[..., :-1], eta), res, pick, Xn, Yn, None)

    def _best_starts(self, res: dict, R: int, S: int, owner: np.ndarray | None = None) -> np.ndarray:
        """Flat indices ``[R]`` of each replicate's best start (largest finite log-likelihood) in a
        fit of ``R S`` entries (replicate-major), or of entries owned by ``owner [E]`` (their
        replicate; the generic EM's added Top-K starts, :func:`~moestat.estimators.generic_starts.idle_atom_starts`);
        sets the per-replicate fit attributes of the class docstring that come straight from ``res``."""
        ll = np.where(np.isfinite(res["loglik"]), res["loglik"], -np.inf)
        if owner is None:
            pick = np.arange(R) * S + np.argmax(ll.reshape(R, S), axis=1)
        else:  # the first best entry of each replicate: the given starts come first, so a tie keeps one of them
            pick = np.array([np.flatnonzero(owner == r)[np.argmax(ll[owner == r])] for r in range(R)])
        self.__dict__.pop("starts_", None)  # a refit without keep_starts leaves no stale starts
        self.kernel_ = res["kernel"]
        self.loglik_ = res["loglik"][pick]
        self.loglik_path_ = [res["paths"][i] for i in pick]
        self.n_starts_ = S
        self.n_newton_ = res["n_newton"][pick]
        return pick

    def _keep(self, res: dict, pick: np.ndarray, owner: np.ndarray, params: MixingMeasure, variances: np.ndarray) -> None:
        """Store ``starts_``: every entry of ``res`` (``owner [E]`` its replicate, ``params [E]`` in
        ``params_``'s layout, ``variances [E, k]``) and the entries ``pick [R]`` reported."""
        self.starts_ = StartResults(
            replicate=np.asarray(owner, dtype=np.int64).copy(), loglik=np.array(res["loglik"], dtype=float),
            status=[str(s) for s in res["status"]], n_iter=np.asarray(res["n_iter"]).astype(np.int64),
            params=MixingMeasure(*(np.array(a, dtype=float) for a in (params.beta0, params.beta1, params.eta))),
            variances=np.array(variances, dtype=float), chosen=np.asarray(pick, dtype=np.int64).copy())

    def _finish(self, params: MixingMeasure, res: dict, pick: np.ndarray, Xn: np.ndarray, Yn: np.ndarray,
                model: LikelihoodModel | None) -> "MLEGaussianMoE":
        """Store the best starts' ``params [R]`` (float64 NumPy arrays) and statuses, the model the
        generic EM fitted (``None``: the fused EM's linear softmax) and the estimator contract's objective."""
        d = Xn.shape[2]
        status = [res["status"][i] for i in pick]
        self.params_, self.n_features_in_, self.model_ = params, d, model
        # by chunks of replicates as the fit ran (the mean function's [R, n, k] temporaries); each
        # replicate's row is computed by the same operations, so the objective is the same bits
        R, n = Yn.shape
        per = memory.entries_per_chunk(n, params.n_atoms, d, self.max_memory)
        objective = np.concatenate([np.mean((Yn[a:b] - self._predict(torch.as_tensor(Xn[a:b]), slice(a, b))) ** 2, axis=1)
                                    for a, b in memory.chunks(R, per)])
        self._set_fit(params, objective, np.array([s in ("tol", "newton") for s in status]), res["n_iter"][pick], status, d)
        return self

    def _likelihood_model(self):
        if isinstance(self.model, LikelihoodModel):
            return self.model
        return LikelihoodModel(ProtocolGate(name="linear"), linear_expert(self.n_features_in_))

    def _use_generic(self) -> bool:
        return em_engine(self.model, bool(self.generic)) == "generic"

    def _fit_generic(self, Xt: torch.Tensor, Yt: torch.Tensor, init, k: int) -> "MLEGaussianMoE":
        """Fit with :func:`moestat.estimators.mle_generic.fit_generic` (per-expert variances, CPU)."""
        if self.variance != "per_expert":
            raise ValueError("the generic EM fits one variance per expert (variance='per_expert')")
        Xn, Yn = Xt.numpy(), Yt.numpy()
        R, n, d = Xn.shape
        self.n_features_in_ = d
        model = self._likelihood_model()
        em = mg.GenericEM(model, k, d)
        gauss = em.gaussian
        G = self._start_measures(Xn, Yn, init, k, lambda x, y, g: gs.random_start(model, x, y, k, g), (model.n_eta(d),),
                                 lambda G: gauss, f" (expert parameters{', then the variance' if gauss else ''})")
        S = G.beta0.shape[1]
        flat = MixingMeasure(*(a.reshape((R * S,) + a.shape[2:]) for a in (G.beta0, G.beta1, G.eta)))
        owner = np.arange(R).repeat(S)
        # a Top-K start with a split (tied) atom gets a second start, the atom re-seated as an idle one
        # (generic_starts.idle_atom_starts: the split start is not the truth under a Top-K gate)
        extra_of, extra = gs.idle_atom_starts(model, flat)
        if extra is not None:
            flat = MixingMeasure(*(np.concatenate([a, b]) for a, b in zip((flat.beta0, flat.beta1, flat.eta),
                                                                            (extra.beta0, extra.beta1, extra.eta))))
            owner = np.concatenate([owner, owner[extra_of]])
        fv, eta, ls2 = gs.to_free(em, flat)
        rep = torch.as_tensor(owner)
        # the entries in chunks within the memory budget, each chunk's data copied for it alone; the
        # starts are all drawn above and the compile decision is the whole batch's (compile_size), so
        # every entry's fit is the one it gets in a single batch.  A Top-K gate's score search refits
        # the entries it moved as one batch whose compile decision depends on how many moved: cut
        # into chunks, that set (hence the pass that refits it) would change, so it stays whole.
        E = int(rep.numel())
        per = E if em.topk else memory.entries_per_chunk(n, k, d, self.max_memory)
        parts = [mg.fit_generic(model, Xt[rep[a:b]], Yt[rep[a:b]], fv[a:b], eta[a:b], ls2[a:b], max_iter=int(self.max_iter),
                                tol=float(self.tol), var_floor=float(self.var_floor), accelerate=bool(self.accelerate),
                                polish_iter=int(self.polish_iter), compile=self.compile, gate_box=self.gate_box,
                                compile_size=E * n)
                 for a, b in memory.chunks(E, per)]
        res = _concat_results(parts)
        pick = self._best_starts(res, R, S, owner if extra is not None else None)
        if self.gate_box is not None:
            self.on_box_ = res["on_box"][pick]
        params = gs.from_free(em, res["fv"][pick], res["eta"][pick], res["ls2"][pick])
        self.variances_ = np.exp(res["ls2"][pick]) if gauss else np.full((R, k), np.nan)
        if not self.eta_variance and gauss:
            params = MixingMeasure(params.beta0, params.beta1, params.eta[..., :-1])
        if self.keep_starts:  # every entry through the same conversion as the chosen ones
            every = gs.from_free(em, res["fv"], res["eta"], res["ls2"])
            if not self.eta_variance and gauss:
                every = MixingMeasure(every.beta0, every.beta1, every.eta[..., :-1])
            self._keep(res, pick, owner, every, np.exp(res["ls2"]) if gauss else np.full((owner.size, k), np.nan))
        return self._finish(params, res, pick, Xn, Yn, model)

    def loglik_of(self, X, Y, G: MixingMeasure) -> np.ndarray | None:
        """The observed-data log-likelihood ``[R]`` of the measure ``G`` on ``X [R, n, d]``, ``Y [R, n]``,
        by the EM pass this fit ran (``kernel_``: the same arithmetic as ``loglik_``); ``None`` after
        the generic EM (its log-likelihood is its model's, not computed here).

        ``G``: batch shape ``()`` or ``(R,)``, ``eta [..., k, d + 2]`` = ``(a, b, sigma^2)`` per
        atom, last atom the reference (e.g. a simulation's truth, :mod:`moestat.rates.truth_check`).
        """
        if getattr(self, "kernel_", None) not in ("compiled", "eager"):
            return None
        Xt, Yt = prepare_data(X, Y, G.n_atoms, torch.device("cpu"), min_samples=1)
        R, n, d = Xt.shape
        G = G.numpy()
        if G.eta_dim != d + 2:
            raise ValueError(f"G must have eta [..., k, {d + 2}] = (a, b, sigma^2), got {G.eta.shape}")
        V = np.concatenate([G.beta1, G.beta0[..., None]], axis=-1)
        V = V - V[..., -1:, :]  # the reference convention of fit(): a no-op for a measure that has it
        dev = resolve_device(self.device)

        def per_replicate(a: np.ndarray, tail: int) -> torch.Tensor:  # [R, *a.shape[-tail:]]
            # copied: a broadcast view is read-only, and one already of that shape is not copied by
            # ascontiguousarray (torch warns about wrapping a non-writable array)
            return torch.tensor(np.broadcast_to(a, (R,) + a.shape[a.ndim - tail:]), device=dev)

        return pass_loglik(Xt.to(dev), Yt.to(dev), per_replicate(V, 2), per_replicate(G.eta[..., : d + 1], 2),
                           per_replicate(G.eta[..., d + 1], 1), self.kernel_)

    def predict(self, X) -> np.ndarray:
        """Fitted mean function ``sum_i pi_i(x) h(x, eta_i)`` (linear experts: ``a_i^T x + b_i``), shape ``[R, n]``."""
        return self._predict(self._check_X(X), slice(None))

    def _predict(self, Xt: torch.Tensor, rows: slice) -> np.ndarray:
        """:meth:`predict` of the replicates ``rows`` on their inputs ``Xt [len(rows), n, d]``."""
        p = self.params_
        p = MixingMeasure(p.beta0[rows], p.beta1[rows], p.eta[rows])
        variances = self.variances_[rows]
        if self.model_ is not None:  # the generic EM's model
            full = p if (self.eta_variance or not np.isfinite(variances).all()) else MixingMeasure(
                p.beta0, p.beta1, np.concatenate([p.eta, variances[..., None]], -1))
            return self.model_.predict(Xt, full).numpy()
        G = MixingMeasure(p.beta0, p.beta1, np.concatenate([p.eta[..., : self.n_features_in_ + 1],
                                                            variances[..., None]], axis=-1))
        return mean_function(Xt, G)
