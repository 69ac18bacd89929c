"""Display names: one table of the words every figure, legend and title uses for the internal names.

Internal names (``perturbed``, ``lse``, ``voronoi``, ``over``) are short and stable, made for flags
and files; a reader of a figure gets words.  Every figure of the package takes its labels from
here, so one router is called the same on every page.

The Voronoi loss of a rates run is the loss of the setting (see
:func:`moestat.rates.sweep.compute_losses`): ``D3`` (eq. 16 of Nguyen et al. (2024), equal to
``D_{1,1}``) exact-specified, ``D2`` (eq. 13) over-specified.  Each curve is labelled with its
loss, so that two curves measured in different losses never share a label.
"""

from __future__ import annotations

from datetime import datetime

__all__ = [
    "REDEFINED",
    "former_definition",
    "withhold_former_definitions",
    "ROUTER_NAMES",
    "LOSS_NAMES",
    "LOSS_LABELS",
    "FILE_PREFIX",
    "SETTING_NAMES",
    "ESTIMATOR_NAMES",
    "VORONOI_VARIANT",
    "STATISTIC_NAMES",
    "router_name",
    "loss_name",
    "loss_variant",
    "curve_label",
    "voronoi_variant",
    "axis_label",
    "undefined_reason",
    "slope_label",
    "run_title",
]

#: Routers of the statistical model (:data:`moestat.rates.config.ROUTERS`).
ROUTER_NAMES = {
    "perturbed": "perturbed cosine",
    "cosine": "vanilla cosine",
    "linear": "linear (softmax)",
    "gaussian-moe": "Gaussian MoE, model 1",
}
#: Axis labels of the loss columns of ``results.csv``.
LOSS_LABELS = {
    "voronoi": "Voronoi loss",
    "voronoi_direction": "Voronoi loss, directions only",
    "param_single": "parameter error, single-atom cells",
    "param_multi": "parameter error, multi-atom cells (mass-weighted RMS)",
    "mass": "mass error",
    "regression_l2": r"regression error $\|g_{\hat G_n}-g_{G_*}\|_{L^2(\mu)}$",
}
#: The loss columns of ``results.csv``, in order (the one list; :mod:`moestat.rates.store` and the
#: sweep's loss columns of every scenario read it).
LOSS_NAMES = tuple(LOSS_LABELS)
#: The prefix of a scenario file's curve label (:func:`moestat.rates.config.file_label`); a router
#: named so is a file's.
FILE_PREFIX = "file:"
#: Settings of the fitted model.
SETTING_NAMES = {
    "exact": "exact-specified (k = k*)",
    "over": "over-specified (k > k*)",
}
#: Estimators (:data:`moestat.estimators.ESTIMATORS`).
ESTIMATOR_NAMES = {
    "lse": "least squares",
    "mle": "maximum likelihood",
    "em": "EM",
    "gllim": "joint maximum likelihood (GLLiM)",
    "sgd": "SGD",
    "null": "no fit (the start)",
    "reference": "scipy least squares",
}
#: Which Voronoi loss the ``voronoi`` and ``voronoi_direction`` columns hold, per setting.
VORONOI_VARIANT = {"exact": "D3", "over": "D2"}

#: The per-sample-size statistics a slope can be fitted to, by name: the words the configuration
#: accepts (``--statistic``); :data:`moestat.rates.verdicts.STATISTICS` maps each to its function.
STATISTIC_NAMES = ("mean", "median")
#: The same for the Gaussian MoE of Nguyen, Nguyen & Ho (2023) (their D1 and D2).
GAUSSIAN_VARIANT = {"exact": "D1", "over": "D2"}


def router_name(router: str) -> str:
    """``perturbed`` -> ``perturbed cosine``; unknown names are shown as they are."""
    return ROUTER_NAMES.get(router, router)


def loss_name(loss: str) -> str:
    """The axis label of a loss column."""
    return LOSS_LABELS.get(loss, loss.replace("_", " "))


def loss_variant(loss: str, setting: str) -> str | None:
    """The Voronoi loss (``D1``/``D2``/``D3``) a column holds in ``setting``; ``None`` for the
    losses that are not Voronoi losses."""
    if loss in ("voronoi", "voronoi_direction"):
        return VORONOI_VARIANT.get(setting)
    return None


def voronoi_variant(loss: str, setting: str, likelihood: bool = False, holds: str | None = None) -> str | None:
    """The name of the loss a ``voronoi`` (or ``voronoi_direction``) column holds; ``None`` for the
    other columns.

    ``holds``: the name when the run knows it -- a mixture-noise scenario file's ``voronoi`` column
    is its first declared (or default) loss, whatever its mass term
    (:func:`moestat.data.likelihood_losses.likelihood_loss_columns`).  Otherwise ``likelihood`` (a
    maximum-likelihood fit of a mixture) names D1/D2 of Nguyen, Nguyen & Ho (2023), and a
    regression run D3/D2 of Nguyen et al. (2024)."""
    variant = loss_variant(loss, setting)
    if variant is None:
        return None
    if holds:
        return holds
    return GAUSSIAN_VARIANT.get(setting) if likelihood else variant


def curve_label(router: str, loss: str, setting: str, likelihood: bool = False, holds: str | None = None) -> str:
    """``perturbed cosine, D3``: the router, and the loss when it is one of several Voronoi losses.

    ``likelihood``: a maximum-likelihood fit of a mixture (the Gaussian-MoE family or a
    ``[noise] model = "mixture"`` scenario file), whose Voronoi columns hold D1/D2 of Nguyen,
    Nguyen & Ho (2023), not D3/D2 of the regression losses; ``holds``: see :func:`voronoi_variant`."""
    variant = voronoi_variant(loss, setting, likelihood or router == "gaussian-moe", holds)
    return f"{router_name(router)}, {variant}" if variant else router_name(router)


def axis_label(loss: str, setting: str, likelihood: bool = False, holds: str | None = None) -> str:
    """The y-axis label of a loss panel: ``Voronoi loss D3`` names the Voronoi loss the column
    holds (several are in use, and the legend alone is easy to miss); other losses as :func:`loss_name`."""
    variant = voronoi_variant(loss, setting, likelihood, holds)
    if not variant:
        return loss_name(loss)
    head, sep, tail = loss_name(loss).partition(", ")  # "Voronoi loss D3, directions only"
    return f"{head} {variant}{sep}{tail}"


def undefined_reason(loss: str, setting: str) -> str:
    """Why a loss has no value in a run (every replicate NaN): ``param_multi`` of an exact fit has
    no cell holding several atoms, ``voronoi_direction`` exists for cosine routers only; any other
    such loss is named as having no finite value."""
    if loss == "param_multi" and setting == "exact":
        return "no shared cells in an exact fit"
    if loss == "voronoi_direction":
        return "a cosine router's direction loss, not defined for this model"
    return "no finite value in this setting"


def undefined_fits(fits) -> list[dict]:
    """The fit entries of losses that have no value at all in the run (see
    :func:`moestat.rates.fit.fit_rates`): the table and the figures leave them out, saying so."""
    return [f for f in fits if f.get("slope") is None and str(f.get("reason") or "").startswith("not defined in this setting")]


def slope_label(slope: float, ci_low: float, ci_high: float) -> str:
    """``slope −0.56 (95% CI −0.62, −0.49)`` with true minus signs."""

    def f(v: float) -> str:
        return f"{v:.2f}".replace("-", "\u2212")

    return f"slope {f(slope)} (95% CI {f(ci_low)}, {f(ci_high)})"


def run_title(loss_words: str, setting: str, estimator: str) -> str:
    """``Voronoi loss against sample size: over-specified (k > k*), least squares``."""
    parts = [SETTING_NAMES.get(setting, setting), ESTIMATOR_NAMES.get(estimator, estimator)]
    return f"{loss_words} against sample size: " + ", ".join(p for p in parts if p)


#: Loss columns whose definition changed after runs were recorded with them: the change's commit
#: time (UTC), its commit, and what the column held before.  A recorded row holds the quantity of
#: its day, so judging it against a prediction written for today's quantity would be judging a
#: different number (e.g. an unweighted shared-cell maximum judged against Theorem 5's ``n^-1/4``
#: for the mass-weighted error).
REDEFINED: dict[str, tuple[str, str, str]] = {
    "param_multi": ("2026-11-26T05:44:26+00:00", "0a31535",
                    "the unweighted maximum of ||omega_i - omega*_j|| over the atoms of shared cells"),
}


def former_definition(loss: str, started: str | None) -> str | None:
    """Why a run started at ``started`` (ISO 8601) holds a former definition of ``loss``, or None.

    A run whose start is unknown is taken as current (every recorded run has one).
    """
    if loss not in REDEFINED or not started:
        return None
    when, commit, before = REDEFINED[loss]
    if datetime.fromisoformat(started) >= datetime.fromisoformat(when):
        return None
    return (f"not judged: recorded {started[:10]}, before {commit} ({when[:10]}) redefined {loss}; the rows hold "
            f"{before}, not the quantity the prediction is for")


def withhold_former_definitions(fits: list[dict], provenance: dict) -> list[dict]:
    """``fits`` of a recorded run (``provenance`` its ``provenance.json``), each fit of a column the
    run recorded under a former definition keeping its slope and losing its verdict (category
    ``None``, :func:`former_definition`'s reason); changed in place and returned."""
    started = (provenance.get("runs") or [{}])[0].get("started")
    for f in fits:
        why = former_definition(f["loss"], started)
        if why is not None:
            f.update(category=None, reason=why)
            f.pop("mean_statistic", None)
    return fits
