"""``python -m moestat.rates``: a scenario in, a convergence plot and an honest slope table out.

The command parses and validates its arguments, then calls the library: :mod:`moestat.sweep`
(seeds, work units, parallel execution, resumable ``results.csv``, ``provenance.json``),
:mod:`moestat.ratefit` (slopes with intervals, window sensitivity, verdicts) and
:mod:`moestat.plotting` (``convergence.pdf``/``.png``).  From Python::

    from moestat.rates import RatesConfig, run_rates
    summary = run_rates(RatesConfig(router=["perturbed", "cosine"], reps=10), "out/")
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

from .cli import ArgumentParser, nonneg_float, positive_int, run_main
from .sweep import RatesConfig, check_resumable, run_sweep

__all__ = ["RatesConfig", "run_rates", "format_table", "main", "build_parser"]

SUMMARY_SCHEMA = "moestat.rates.summary/1"


def _counts(df, config: RatesConfig) -> dict[str, Any]:
    import numpy as np

    expected = len(config.ns) * config.reps
    out: dict[str, Any] = {}
    total = {"expected": 0, "fits": 0, "converged": 0, "failed": 0, "nonfinite": 0}
    for router in config.router:
        sub = df[df["router"] == router]
        nonfinite = int((~np.isfinite(sub[["voronoi", "regression_l2"]].to_numpy(float))).any(axis=1).sum())
        c = {
            "expected": expected,
            "fits": int(len(sub)),
            "converged": int(sub["converged"].fillna(False).astype(bool).sum()),
            "failed": int((~sub["converged"].fillna(False).astype(bool)).sum()),
            "nonfinite": nonfinite,
        }
        out[router] = c
        for k in total:
            total[k] += c[k]
    return {**total, "by_router": out}


def run_rates(config: RatesConfig, out_dir, *, resume: bool = False) -> dict[str, Any]:
    """Run a rate experiment end to end and return the summary written to ``summary.json``.

    Parameters
    ----------
    config : RatesConfig
        The experiment; validated here (a bad field raises a one-line ``ValueError`` before
        anything is written).
    out_dir : path-like
        Output folder: ``results.csv``, ``provenance.json``, ``summary.json``,
        ``convergence.pdf``/``.png`` (the Voronoi loss) and ``convergence_all.pdf``/``.png``
        (every loss).
    resume : bool
        Continue a sweep in ``out_dir`` written by the same configuration, skipping finished
        fits.  Without it, a folder that already holds results is refused.

    Returns
    -------
    dict
        Exactly the content of ``summary.json``: ``schema``, ``config``, ``config_hash``,
        ``tolerance``, ``window``, ``counts``, ``fits`` (one entry per router and loss with
        ``router, setting, loss, slope, ci_low, ci_high, predicted, consistent`` and
        diagnostics), ``elapsed_s``.

    Examples
    --------
    >>> from moestat.rates import RatesConfig, run_rates
    >>> cfg = RatesConfig.from_preset("smoke").replace(quiet=True)
    >>> summary = run_rates(cfg, "/tmp/moestat-doc-rates")  # doctest: +SKIP
    >>> sorted(summary["fits"][0])[:3]  # doctest: +SKIP
    ['bootstrap', 'ci_high', 'ci_low']
    """
    from .io import atomic_write_json, ensure_writable_dir
    from .plotting import plot_convergence
    from .ratefit import DEFAULT_TOLERANCE, fit_rates
    from .sweep import config_hash

    if not isinstance(config, RatesConfig):
        raise TypeError(f"config must be a RatesConfig, got {type(config).__name__}")
    config.validate()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    if out.is_dir():
        check_resumable(out, config, resume)
    ensure_writable_dir(out)
    t0 = time.perf_counter()
    df = run_sweep(config, out, resume=resume, progress=False if config.quiet else None)
    fits = fit_rates(
        df,
        setting=config.setting,
        estimator=config.estimator,
        routers=config.router,
        window=(config.window_min, config.window_max),
        tolerance=config.tolerance,
        n_boot=config.n_boot,
        seed=config.seed,
    )
    summary = {
        "schema": SUMMARY_SCHEMA,
        "config": config.to_dict(),
        "config_hash": config_hash(config),
        "sample_sizes": config.ns,
        "tolerance": config.tolerance,
        "verdict_rule": (
            "consistent = predicted in [ci_low - tolerance, ci_high + tolerance]; "
            "within_band = [ci_low, ci_high] inside [predicted - tolerance, predicted + tolerance]; "
            "CI = envelope of the replicate bootstrap and the OLS t-interval of the log-of-mean fit"
        ),
        "default_tolerance": DEFAULT_TOLERANCE,
        "window": {"n_min": config.window_min or config.ns[0], "n_max": config.window_max or config.ns[-1]},
        "counts": _counts(df, config),
        "fits": fits,
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    path = atomic_write_json(out / "summary.json", summary)
    summary = json.loads(path.read_text(encoding="utf-8"))
    losses_all = [f["loss"] for f in summary["fits"] if f["router"] == config.router[0] and f["slope"] is not None]
    plot_convergence(df, summary["fits"], out / "convergence", losses=["voronoi"], routers=config.router,
                     title=f"{config.setting}-specified, {config.estimator}")
    if losses_all:
        plot_convergence(df, summary["fits"], out / "convergence_all", losses=losses_all, routers=config.router,
                         title=f"{config.setting}-specified, {config.estimator}")
    return summary


def _fmt(v, spec=".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def format_table(summary: dict[str, Any]) -> str:
    """The slope table printed by the command (one line per router and loss)."""
    head = f"{'router':<10} {'loss':<18} {'slope':>7}  {'95% CI':<17} {'per-rep':>7} {'pred':>6}  {'verdict':<12} window"
    lines = [head, "-" * len(head)]
    for f in summary["fits"]:
        ci = f"[{_fmt(f['ci_low'], '.3f')}, {_fmt(f['ci_high'], '.3f')}]" if f.get("slope") is not None else "-"
        v = f.get("consistent")
        verdict = "-" if v is None else ("consistent" if v else "INCONSISTENT")
        if f.get("judged_by") == "flatter_than_perturbed":
            verdict += "*"
        pr = f.get("per_replicate", {}).get("slope")
        win = f"{f['window'][0]}-{f['window'][1]}" if f.get("window") else "-"
        lines.append(
            f"{f['router']:<10} {f['loss']:<18} {_fmt(f.get('slope')):>7}  {ci:<17} {_fmt(pr):>7} "
            f"{_fmt(f.get('predicted'), '.2f'):>6}  {verdict:<12} {win}"
        )
    c = summary["counts"]
    lines.append(f"fits: {c['fits']}/{c['expected']}, converged {c['converged']}, not converged {c['failed']}, non-finite {c['nonfinite']}; "
                 f"tolerance {summary['tolerance']}" + ("; * vanilla Voronoi judged by being flatter than perturbed" if any(f.get("judged_by") == "flatter_than_perturbed" for f in summary["fits"]) else ""))
    return "\n".join(lines)


EXAMPLES = """\
examples:
  python -m moestat.rates --router perturbed
  python -m moestat.rates --router perturbed,cosine --setting exact --out runs/exact
  python -m moestat.rates --preset fig1b --n-jobs 2 --out runs/fig1b
  python -m moestat.rates --config simulations/rates/fig1a.toml --out runs/fig1a --resume
  python -m moestat.rates --router perturbed --estimator null --out runs/null
  python -m moestat.rates --preset fig1a --backend dask --scheduler tcp://10.0.0.5:8786 --out runs/fig1a

Flags override --config, which overrides --preset, which overrides the defaults.
"""


def _k_active(text: str):
    if text in ("auto", "dense"):
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, 'auto' or 'dense', got {text!r}") from None


def _routers(text: str) -> list[str]:
    vals = [t.strip() for t in text.split(",") if t.strip()]
    if not vals:
        raise argparse.ArgumentTypeError(f"expected a comma list of routers, got {text!r}")
    return vals


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def build_parser() -> ArgumentParser:
    """The argument parser (every option defaults to "not given", so presets can fill it)."""
    S = argparse.SUPPRESS
    p = ArgumentParser(
        prog="python -m moestat.rates",
        description="Sweep sample sizes and replicates, fit convergence rates with 95% intervals, "
        "compare them with seed 004's theorems, and draw a paper-style convergence plot.",
        epilog=EXAMPLES,
        argument_default=S,
    )
    g = p.add_argument_group("scenario")
    g.add_argument("--router", type=_routers, help="perturbed, cosine, linear or a comma list (one curve each, same data); default perturbed")
    g.add_argument("--setting", help="exact or over (over-specified, k = k* + 1); default exact")
    g.add_argument("--tau", type=_float, help="tau of the perturbed router (> 0); default 0.5")
    g.add_argument("--expert", help="expert activation: identity, gelu, relu, tanh, sigmoid, poly; default gelu")
    g.add_argument("--d", type=positive_int, help="input dimension; default 4")
    g.add_argument("--k-true", type=positive_int, help="true number of experts k*; default 3")
    g.add_argument("--k-active", type=_k_active, help="true activated experts K, 'auto' (2 exact, dense over) or 'dense'")
    g.add_argument("--k-fit", type=positive_int, help="fitted atoms (default k* exact, k*+1 over)")
    g.add_argument("--k-active-fit", type=_k_active, help="K-bar of the fit, 'auto' (Prop. 1 minimum) or 'dense'")
    g.add_argument("--noise-var", type=_float, help="noise variance nu; default 0.01")
    g.add_argument("--truth-seed", type=_nonneg_int, help="seed of the true parameters")
    g = p.add_argument_group("sweep")
    g.add_argument("--n-min", type=positive_int, help="smallest sample size")
    g.add_argument("--n-max", type=positive_int, help="largest sample size")
    g.add_argument("--n-points", type=positive_int, help="number of log-spaced sample sizes")
    g.add_argument("--reps", type=positive_int, help="replicates per sample size (>= 2)")
    g.add_argument("--estimator", help="lse, sgd, null (and em when available); default lse")
    g.add_argument("--max-iter", type=positive_int, help="estimator iteration budget; default 200")
    g.add_argument("--init", help="near (truth + N(0, s^2)), peer (s n^-0.083, the peer artefact) or random")
    g.add_argument("--init-scale", type=nonneg_float, help="s of the near-truth start; default 0.05")
    g.add_argument("--seed", type=_nonneg_int, help="root seed; default 0")
    g.add_argument("--chunk", type=positive_int, help="replicates per work unit (default: all)")
    g = p.add_argument_group("execution")
    g.add_argument("--n-jobs", type=positive_int, help="parallel work units (joblib); default 1")
    g.add_argument("--backend", help="loky (default) or dask")
    g.add_argument("--scheduler", metavar="ADDRESS", help="dask.distributed scheduler address (with --backend dask)")
    g.add_argument("--device", help="cpu (default), cuda or auto")
    g.add_argument("--out", metavar="DIR", help="output folder; default rates-out")
    g.add_argument("--resume", action="store_true", help="continue a sweep in --out, skipping finished fits")
    g.add_argument("--preset", help="named preset: default, fig1a, fig1b, smoke")
    g.add_argument("--config", metavar="FILE.toml", help="TOML file of settings (keys as the long flags, - or _)")
    g.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    g = p.add_argument_group("rate fit")
    g.add_argument("--window-min", type=positive_int, help="smallest n in the declared fitting window")
    g.add_argument("--window-max", type=positive_int, help="largest n in the declared fitting window")
    g.add_argument("--tolerance", type=nonneg_float, help="verdict tolerance added to the CI; default 0.15")
    g.add_argument("--n-boot", type=positive_int, help="bootstrap resamples; default 1000")
    return p


def config_from_args(ns: argparse.Namespace) -> RatesConfig:
    """Defaults < ``--preset`` < ``--config`` < explicit flags."""
    from .presets import load_toml, preset_dict

    data: dict[str, Any] = {}
    if hasattr(ns, "preset"):
        data.update(preset_dict(ns.preset))
    if hasattr(ns, "config"):
        data.update({str(k).replace("-", "_"): v for k, v in load_toml(ns.config).items()})
    for k, v in vars(ns).items():
        if k not in ("preset", "config", "out", "resume"):
            data[k] = v
    return RatesConfig.from_dict(data)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m moestat.rates``."""
    ns = build_parser().parse_args(argv)
    config = config_from_args(ns)
    summary = run_rates(config, getattr(ns, "out", "rates-out"), resume=getattr(ns, "resume", False))
    if not config.quiet:
        print(format_table(summary))
        print(f"wrote {Path(getattr(ns, 'out', 'rates-out')) / 'summary.json'} and convergence.pdf/.png ({summary['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="python -m moestat.rates"))
