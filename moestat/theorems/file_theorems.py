"""Theorems for a user's scenario file: the predictions of every theorem whose hypotheses its truth meets.

``moestat check`` judges a truth against the theorems of its model class and setting
(:func:`moestat.theorems.hypotheses.check_hypotheses`).  ``moestat rates --scenario FILE`` uses the same
judgement: for each theorem met, its predicted exponents are attached to the loss columns it speaks
of, named by the theorem (:func:`file_theorems`), and the theorems whose hypotheses fail are reported
with the condition that failed -- they give no prediction.

Where the exponents come from (one place each, no figure written here)
-----------------------------------------------------------------------
- Nguyen et al. (2024), Theorems 6 (perturbed cosine router, exact) and 5 (over-specified): the rates
  pipeline's table of the perturbed router, :func:`moestat.rates.fit.predicted_exponent` (D3/D2, the
  single-atom cells, the masses at ``n^-1/2``; the shared cells at ``n^-1/4``, an upper bound), the
  table the built-in perturbed router is judged by and the catalogue's ``cosine-exact`` and
  ``cosine-over`` entries are tested against.
- Nguyen, Nguyen & Ho (2023), Theorems 1 and 2 (softmax-gated Gaussian MoE, linear experts):
  :func:`moestat.data.gaussian_scenarios.gmoe_predicted`, the table of their model 1 (the
  ``gmoe-exact``/``gmoe-over`` entries).
- A theorem that states only "slower than any polynomial rate" (the vanilla cosine router's
  Theorems 2 and 3; polynomial experts under softmax gating; vanishing multinomial expert
  parameters) labels its Voronoi loss and the parameter errors so, with no exponent.
- The classical theorem (:data:`moestat.theorems.hypotheses.CLASSICAL_KEY`): an exact fit by maximum
  likelihood with a nonsingular Fisher information at the truth -> ``n^-1/2`` on every parameter
  loss and the regression function (standing ``own derivation``).  It fills the losses no named
  theorem of the truth speaks of.

The standing of each prediction (:data:`moestat.theorems.registry.STANDINGS`) is the catalogue entry's
for the same theorem (its headline prediction, :attr:`moestat.theorems.registry.Theorem.headline`), so a
file's row says as much as the catalogue's; which table a theorem attaches is its
:attr:`~moestat.theorems.registry.Theorem.file_table`.

Theorems met whose exponents are not tabulated here (Top-K, Laplace and Gaussian gates, the strongly
identifiable least-squares theorems, shared experts, non-vanishing multinomial experts) are reported
as met with no prediction attached: their exponents are stated in the catalogue only for the
catalogue's own declared losses.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from moestat.data.gaussian_scenarios import gmoe_predicted
from moestat.data.likelihood_losses import THEOREM_1_GMOE
from moestat.rates.fit import predicted_exponent
from moestat.theorems.hypotheses import CLASSICAL_CITE, CLASSICAL_KEY, check_hypotheses
from moestat.rates.labels import LOSS_NAMES
from moestat.rates.resolve import Experiment
from moestat.theorems.registry import SLOWER, headline_prediction
from moestat.theorems.registry import theorem as registry_theorem

__all__ = ["PARAMETER_LOSSES", "file_theorems", "judge_scenario", "scenario_theorems"]

#: The built-in loss columns that measure the parameters (every one but the regression function's).
PARAMETER_LOSSES = tuple(c for c in LOSS_NAMES if c != "regression_l2")
#: The columns a "slower than any polynomial rate" theorem labels: its Voronoi loss and the parameter errors.
_SLOW_COLUMNS = ("voronoi", "param_single", "param_multi")
_CLASSICAL_STANDING = "own derivation"
_CLASSICAL_SOURCE = (f"{CLASSICAL_CITE}: an exact fit's maximum-likelihood estimate is asymptotically normal at "
                     "n^-1/2 in every parameter (textbook asymptotics of a regular MLE, e.g. van der Vaart 1998, "
                     "Theorem 5.39), so is every loss Lipschitz in the parameters near the truth")


def _table(theorem: str, scenario) -> dict[str, float | None]:
    """Column -> exponent (``None``: slower than any polynomial rate) of a met theorem; ``{}`` if none is tabulated
    (the theorem's :attr:`~moestat.theorems.registry.Theorem.file_table`)."""
    kind = registry_theorem(theorem).file_table
    if kind == "perturbed-router":
        table = {c: predicted_exponent("perturbed", scenario.setting, c) for c in PARAMETER_LOSSES}
        return {c: v for c, v in table.items() if v is not None}
    if kind == "gmoe":
        table = gmoe_predicted(int(scenario.k_fit), int(scenario.truth.n_atoms))
        return {c: v for c, v in table.items() if v is not None}
    if kind == "slow":
        return {c: None for c in _SLOW_COLUMNS}
    if kind == "classical":
        return {c: -0.5 for c in ("voronoi", "param_single", "mass", "regression_l2")}
    return {}


def _where(theorem: str, cite: str, setting: str) -> tuple[str, str, str]:
    """``(name, standing, source)`` of a theorem's predictions in a file's table."""
    if theorem == CLASSICAL_KEY:
        return CLASSICAL_CITE, _CLASSICAL_STANDING, _CLASSICAL_SOURCE
    p = headline_prediction(theorem, setting)
    if theorem == "gmoe-softmax":  # Theorems 1 and 2: the setting's one
        name = "Nguyen, Nguyen & Ho (2023), Theorem " + ("1" if setting == "exact" else "2")
        return name, p.standing, THEOREM_1_GMOE if setting == "exact" else f"{name}: over-specified softmax-gated " \
            "Gaussian MoE with linear experts, D2 and the single-atom cells at n^{-1/2}, a cell of two atoms at n^{-1/8}"
    if theorem == "cosine-thm2-3":
        name = "Nguyen et al. (2024), Theorem " + ("2" if setting == "exact" else "3")
        return name, p.standing, f"{name}: the vanilla cosine router, {p.text}"
    return cite, p.standing, f"{cite}: {p.text if p.exponent is None else p.source}"


def judge_scenario(scenario) -> dict[str, Any]:
    """The theorems of ``scenario``'s model class and setting, met or not, and what each attaches.

    Parameters
    ----------
    scenario : FileScenario
        A user's scenario (any object :func:`~moestat.theorems.hypotheses.check_hypotheses` reads).

    Returns
    -------
    dict
        ``met``: list of ``{theorem, cite, name, standing, source, losses}`` (``losses``: column ->
        exponent or ``None`` for "slower than any polynomial rate", before the file's own losses
        override); ``failed``: list of ``{theorem, cite, claim, failing}`` (no prediction from them);
        ``setting``; ``not_checked`` where the hypotheses are not checked (the joint GLLiM).
    """
    rep = check_hypotheses(scenario)
    out: dict[str, Any] = {"setting": str(scenario.setting), "met": [], "failed": []}
    if rep.get("not_checked"):
        out["not_checked"] = rep["not_checked"]
        return out
    for t in rep["theorems"]:
        if not t["met"]:
            out["failed"].append({"theorem": t["theorem"], "cite": t["cite"], "claim": t["claim"], "failing": t["failing"]})
            continue
        table = _table(t["theorem"], scenario)
        name, standing, source = _where(t["theorem"], t["cite"], scenario.setting) if table else (t["cite"], "", "")
        out["met"].append({"theorem": t["theorem"], "cite": t["cite"], "name": name, "standing": standing,
                           "source": source, "losses": table})
    return out


#: scenario key -> :func:`judge_scenario`'s report: a file is judged once per process (autograd on its truth)
_JUDGED: dict[str, dict[str, Any]] = {}


def _judge_key(key: str, scenario: Callable[[], Any]) -> dict[str, Any]:
    if key not in _JUDGED:
        if len(_JUDGED) >= 16:
            _JUDGED.pop(next(iter(_JUDGED)))
        _JUDGED[key] = judge_scenario(scenario())
    return _JUDGED[key]


def file_theorems(key: str, default_loss: str | None, own: Mapping[str, Any], voronoi_is_own: bool,
                  scenario: Callable[[], Any]) -> dict[str, Any]:
    """The predictions the theorems met attach to a scenario file's losses, and the report.

    Parameters
    ----------
    key : str
        The scenario's key (:meth:`moestat.rates.config.RatesConfig.scenario_key`; cached by it, so
        a file is judged once per process).
    default_loss : str or None
        The name of the loss the file got by default (it declares no ``[[losses]]``): it takes the
        theorem's ``voronoi`` prediction (it is the theorem's D1/D2/D3); ``None`` when it declares losses.
    own : mapping
        Loss name -> exponent the file states itself (its ``[[losses]]``): these override.
    voronoi_is_own : bool
        The ``voronoi`` column holds the file's own first loss (a mixture-noise file that declares
        losses): no theorem speaks of it.
    scenario : callable
        Returns the scenario of ``key`` (called only when the file was not judged yet in this process).

    Returns
    -------
    dict
        ``predicted`` (loss -> exponent or ``None``), ``details`` (loss -> ``{theorem, name, standing,
        source, claim}``; ``claim`` "slower than any polynomial rate" where there is no exponent), and
        ``report`` (:func:`judge_scenario`'s, each met theorem's ``attached`` columns added).
    """
    rep = _judge_key(key, scenario)
    predicted: dict[str, float | None] = {}
    details: dict[str, dict[str, Any]] = {}
    report = {**rep, "met": []}
    for t in rep["met"]:  # the named theorems in the catalogue's order, the classical one (listed last) fills the rest
        attached = []
        for col, x in t["losses"].items():
            targets = [col] + ([default_loss] if col == "voronoi" and default_loss else [])
            for c in targets:
                if c in own or c in details or (c == "voronoi" and voronoi_is_own):
                    continue
                predicted[c] = x
                details[c] = {"theorem": t["theorem"], "name": t["name"], "standing": t["standing"],
                              "source": t["source"], **({"claim": SLOWER} if x is None else {})}
                attached.append(c)
        report["met"].append({**t, "attached": attached})
    return {"predicted": predicted, "details": details, "report": report}


def scenario_theorems(experiment) -> dict[str, Any] | None:
    """The theorems of a rate experiment's scenario file, what :func:`moestat.rates.run_rates` takes as
    ``theorems`` (the doors ``moestat rates``, ``moestat reproduce``, ``moestat plot`` call this).

    Parameters
    ----------
    experiment : RatesConfig or Experiment
        The configuration (resolved here) or its :class:`~moestat.rates.resolve.Experiment`.

    Returns
    -------
    dict or None
        :func:`file_theorems`'s ``predicted``, ``details`` and ``report`` for the file's truth (judged
        once per process and file: autograd on the truth, about a second); ``None`` without a file.
    """
    experiment = Experiment.of(experiment)
    if experiment.theorem_key is None:
        return None
    first = experiment.scenarios[experiment.config.router[0]]
    default = getattr(first, "default_loss", None)
    # voronoi holds the file's own first loss only where it declared one (else its default, the theorem's)
    return file_theorems(experiment.theorem_key, default, experiment.own_predicted or {},
                         experiment.voronoi_holds is not None and default is None, lambda: first)
