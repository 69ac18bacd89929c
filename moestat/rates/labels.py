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

__all__ = [
    "ROUTER_NAMES",
    "LOSS_NAMES",
    "LOSS_LABELS",
    "SETTING_NAMES",
    "ESTIMATOR_NAMES",
    "VORONOI_VARIANT",
    "router_name",
    "loss_name",
    "loss_variant",
    "curve_label",
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
    "sgd": "SGD",
    "null": "no fit (the start)",
    "reference": "scipy least squares",
}
#: Which Voronoi loss the ``voronoi`` and ``voronoi_direction`` columns hold, per setting.
VORONOI_VARIANT = {"exact": "D3", "over": "D2"}
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


def curve_label(router: str, loss: str, setting: str, likelihood: bool = False) -> str:
    """``perturbed cosine, D3``: the router, and the loss when it is one of several Voronoi losses.

    ``likelihood``: a maximum-likelihood fit of a mixture (the Gaussian-MoE family or a
    ``[noise] model = "mixture"`` scenario file), whose Voronoi columns hold D1/D2 of Nguyen,
    Nguyen & Ho (2023), not D3/D2 of the regression losses."""
    variant = loss_variant(loss, setting)
    if variant and (router == "gaussian-moe" or likelihood):
        variant = GAUSSIAN_VARIANT.get(setting)
    return f"{router_name(router)}, {variant}" if variant else router_name(router)


def slope_label(slope: float, ci_low: float, ci_high: float) -> str:
    """``slope −0.56 (95% CI −0.62, −0.49)`` with true minus signs."""

    def f(v: float) -> str:
        return f"{v:.2f}".replace("-", "\u2212")

    return f"slope {f(slope)} (95% CI {f(ci_low)}, {f(ci_high)})"


def run_title(loss_words: str, setting: str, estimator: str) -> str:
    """``Voronoi loss against sample size: over-specified (k > k*), least squares``."""
    parts = [SETTING_NAMES.get(setting, setting), ESTIMATOR_NAMES.get(estimator, estimator)]
    return f"{loss_words} against sample size: " + ", ".join(p for p in parts if p)
