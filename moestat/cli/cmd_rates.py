"""``moestat rates`` (also ``python -m moestat.rates``): argument parsing for :func:`moestat.rates.run_rates`.

The flags are the flat keys of :class:`moestat.rates.config.RatesConfig`.  The configuration is
built and validated, and ``--out`` checked, inside :func:`~moestat.cli.common.usage_errors` (bad
input: one line, exit 2, nothing written); the sweep runs outside it, where any exception is an
internal error (exit 1 with its traceback).

``--grow-from RECORD --out OUT`` grows a recorded run folder: its own configuration
(``provenance.json``) with only the grid (``--n-min``, ``--n-max``, ``--n-points``) and ``--reps``
given here; the record is checked (:func:`moestat.rates.grow.check_growable`) and ``OUT`` must be
new before anything is written, its rows are copied, only the missing ``(n, replicate)`` units
fitted, and the summary written as ``--resume`` writes it.

``--replay RUN --n N --replicate R [--router NAME] [--out FILE.json]`` refits one recorded fit of a
run folder exactly as its sweep did (:func:`moestat.rates.replay.replay_unit`), prints its starts
and whether the recorded row is reproduced, and writes the report to ``--out`` when given; nothing
else is written.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from moestat.cli.common import (
    ArgumentParser,
    add_device,
    n_jobs_int,
    add_out,
    add_quiet,
    add_resume,
    add_seed,
    name_choice,
    nonneg_float,
    nonneg_int,
    positive_int,
    seed_int,
    argtype,
    check_config_file,
    prepare_out,
    usage_errors,
)
from moestat.estimators.memory import parse_memory
from moestat.io import atomic_write_json, check_output_file
from moestat.rates.backends import ClusterOptions, check_scheduler, require_cluster_extra, scheduler_from_file
from moestat.rates.experiment import analysis_suffix, format_table, run_rates
from moestat.theorems.file_theorems import scenario_theorems
from moestat.rates.figures import DEFAULT_FIGURE_FORMATS, check_figure_formats
from moestat.rates.grow import GRID_KEYS, check_folders, check_growable, copy_and_fit, recorded_config
from moestat.rates.config import BARS, FAMILIES, ROUTERS, SETTINGS, RatesConfig
from moestat.rates.preflight import scenario_preflight
from moestat.rates.replay import format_replay, replay_unit
from moestat.rates.presets import PRESETS, load_toml, preset_dict, scenario_file_defaults
from moestat.rates.resolve import Experiment
from moestat.rates.store import check_resumable, stored_file_label
from moestat.rates.verdicts import STATISTICS

__all__ = ["build_parser", "config_from_args", "main"]


EXAMPLES = """\
examples:
  moestat rates --router perturbed
  moestat rates --router perturbed,cosine --setting exact --out runs/exact
  moestat rates --preset fig1b --n-jobs 2 --out runs/fig1b
  moestat rates --config fig1a.toml --out runs/fig1a --resume
  moestat rates --router perturbed --estimator null --out runs/null
  moestat rates --preset fig1a --backend dask --scheduler tcp://10.0.0.5:8786 --out runs/fig1a
  moestat rates --preset fig1a --scheduler-file ~/scheduler.json --out runs/fig1a --resume
  moestat rates --grow-from runs/fig1a --n-points 9 --reps 40 --out runs/fig1a-grown
  moestat rates --replay runs/fig1a --n 2000 --replicate 7 --out replay.json

Flags override --config, which overrides --preset, which overrides the defaults.
"""


def _k_active(text: str):
    if text in ("auto", "dense"):
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, 'auto' or 'dense', got {text!r}") from None


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def build_parser() -> ArgumentParser:
    """The argument parser (every option defaults to "not given", so presets can fill it)."""
    S = argparse.SUPPRESS
    p = ArgumentParser(
        prog="moestat rates",
        description="Sweep sample sizes and replicates, fit convergence rates with 95% intervals, "
        "compare them with the theorems of Nguyen et al. (2024) on cosine routers, and draw a paper-style convergence plot.",
        epilog=EXAMPLES,
        argument_default=S,
    )
    _add_scenario_options(p.add_argument_group("scenario"))
    _add_sweep_options(p.add_argument_group("sweep"))
    _add_execution_options(p.add_argument_group("execution"))
    _add_rate_fit_options(p.add_argument_group("rate fit"))
    return p


def _add_scenario_options(g) -> None:
    """The scenario: router, setting, expert, sizes, noise, or a scenario file / family."""
    g.add_argument("--router", type=name_choice(ROUTERS, many=True), help="perturbed, cosine, linear or a comma list (one curve each, same data); aliases perturbed-cosine, vanilla, softmax; default perturbed")
    g.add_argument("--setting", type=name_choice(SETTINGS), help="exact or over (over-specified, k = k* + 1); default exact")
    g.add_argument("--tau", type=_float, help="tau of the perturbed router (> 0); default 0.5")
    g.add_argument("--expert", help="expert activation: identity, gelu, relu, tanh, sigmoid, poly; default gelu")
    g.add_argument("--d", type=positive_int, help="input dimension; default 4")
    g.add_argument("--k-true", type=positive_int, help="true number of experts k*; default 3")
    g.add_argument("--k-active", type=_k_active, help="true activated experts K, 'auto' (2 exact, dense over) or 'dense'; default auto")
    g.add_argument("--k-fit", type=positive_int, help="fitted atoms (default k* exact, k*+1 over)")
    g.add_argument("--k-active-fit", type=_k_active, help="K-bar of the fit, 'auto' (Prop. 1 minimum) or 'dense'; default auto")
    g.add_argument("--noise-var", type=_float, help="noise variance nu; default 0.01")
    g.add_argument("--truth-seed", type=seed_int, help="seed of the true parameters; default 240514131")
    g.add_argument("--scenario", dest="scenario_file", metavar="FILE",
                   help="a user scenario, FILE.toml or path/file.py:function (docs: Add your own model); "
                        "replaces --router and the scenario flags above; default none (the built-in scenarios)")
    g.add_argument("--family", type=name_choice(FAMILIES),
                   help="regression (the routers above) or gaussian-moe (model 1 of Nguyen, Nguyen & Ho 2023, with "
                        "--setting, --k-fit, --input-law uniform|grid, --starts; --estimator mle); default regression")
    g.add_argument("--input-law", help="inputs: uniform or gaussian (regression), uniform or grid (gaussian-moe: the peers' "
                                       "linspace(0, 1, n)); default uniform")
    g.add_argument("--starts", type=positive_int, help="starts per replicate of the gaussian-moe maximum likelihood; default 1")


def _add_sweep_options(g) -> None:
    """The sweep: sample sizes, replicates, estimator and starts, adaptive growth, extras."""
    g.add_argument("--n-min", type=positive_int, help="smallest sample size; default 2000")
    g.add_argument("--n-max", type=positive_int, help="largest sample size; default 128000")
    g.add_argument("--n-points", type=positive_int, help="number of log-spaced sample sizes; default 7")
    g.add_argument("--reps", type=positive_int, help="replicates per sample size (>= 2); default 20")
    g.add_argument("--estimator", help="lse, sgd, null, em, mle (maximum likelihood of y drawn from the mixture) or gllim (the joint "
                   "Gaussian-gated MoE of a file with [input] law = \"gate\"; mle picks it there too); default lse, mle for a "
                   "mixture-noise scenario (docs/guide/estimators.rst: which estimator to use when)")
    g.add_argument("--max-iter", type=positive_int, help="estimator iteration budget; default 200")
    g.add_argument("--init", help="near (truth + N(0, s^2)), peer (s n^-0.083, the peer artefact) or random (gaussian-moe: a random "
                                  "partition of the data); default near")
    g.add_argument("--init-scale", type=nonneg_float, help="s of the near-truth start; default 0.05")
    add_seed(g, None)
    g.add_argument("--chunk", type=positive_int, help="replicates per work unit (default: all)")
    g.add_argument("--max-reps", type=nonneg_int,
                   help="adaptive replicates: grow --reps (at most doubling per round) until the plan's --halfwidth is met "
                        "or this many replicates are reached; resumable; default 0 (off)")
    g.add_argument("--grow-n", type=nonneg_int,
                   help="adaptive n-max: while a predicted rate's plan says a larger n-max is needed, add the next "
                        "log-spaced size (the grid's own ratio) up to this n; resumable; default 0 (off)")
    g.add_argument("--extra-starts", type=nonneg_int,
                   help="optimum certificate: extra starts per (n, replicate), random and perturbed truth, in extras.csv; default 0")
    g.add_argument("--alt-init-scale", type=nonneg_float,
                   help="start sensitivity: refit every replicate from a near-truth start of this noise scale (extras.csv "
                        "alt_<loss>) and say in each verdict's reason when the start moves the slope; default 0 (off)")
    g.add_argument("--no-answer", dest="answer", action="store_false", default=argparse.SUPPRESS,
                   help="report every fit as its one start left it: no more starts for a fit worse than the truth "
                        "(still counted below_truth, not converged); default: answered")
    g.add_argument("--sgd-lr", type=_float, help="learning rate of --estimator sgd; default 0.01")
    g.add_argument("--sgd-batch", type=positive_int, help="minibatch size of --estimator sgd; default 64")
    g.add_argument("--sgd-epochs", type=positive_int, help="epochs of --estimator sgd (its whole budget: SGD has no "
                                                           "stopping rule); default 20")
    g.add_argument("--sgd-schedule", help="learning-rate schedule of --estimator sgd: constant, cosine or step; default cosine")
    g.add_argument("--cell-errors", action="store_true", default=argparse.SUPPRESS,
                   help="also record Theorem 5's mass-weighted cell errors and the beta1 radial/direction split in extras.csv")


def _add_execution_options(g) -> None:
    """Where and how it runs: workers, backend and cluster, device, output, presets."""
    # the same type as every door's --n-jobs (tests/cli/test_main.py); without the flag: "auto"
    g.add_argument("--n-jobs", type=n_jobs_int, help="processes that fit work units; results do not depend on it; "
                   "a positive integer; default (flag left out): one per usable core, at most one per work unit and per "
                   "1e6 samples x replicates x starts (a smaller sweep runs in this process alone)")
    g.add_argument("--backend", help="loky (default) or dask")
    g.add_argument("--scheduler", metavar="ADDRESS", help="dask.distributed scheduler address (with --backend dask; no default: a cluster is never started for you)")
    g.add_argument("--scheduler-file", metavar="FILE", help="read the scheduler address from a dask scheduler file (dask scheduler "
                   "--scheduler-file, dask-jobqueue); implies --backend dask; default none")
    g.add_argument("--worker-timeout", type=nonneg_float, help="stop a dask sweep when no worker has been alive for this many "
                   "seconds; default 300")
    g.add_argument("--allow-worker-mismatch", action="store_true", default=argparse.SUPPRESS,
                   help="run on dask workers whose moestat, torch or numpy differ from this client's (recorded)")
    for key, what in (("ca-file", "CA certificate"), ("cert", "client certificate"), ("key", "client private key")):
        g.add_argument(f"--tls-{key}", metavar="FILE", help=f"{what} (PEM) for a tls:// scheduler; default: dask's configuration")
    g.add_argument("--max-memory", type=argtype(parse_memory),
                   help="memory a likelihood fit's per-sample arrays may hold in one process (e.g. 1.5G, 800M): the "
                        "replicates of a work unit are fitted in chunks within it, with the same rows; default auto "
                        "(1 GiB, or half the available memory if less)")
    add_device(g, None)
    add_out(g, "rates")
    add_resume(g)
    g.add_argument("--grow-from", metavar="RECORD", type=Path,
                   help="grow this recorded run folder by its own configuration: only --n-min, --n-max, --n-points, "
                        "--reps (and --n-jobs, --quiet, --figure-formats) may be given; its rows are copied into the new "
                        "--out and only the missing (n, replicate) units fitted; default none")
    g.add_argument("--replay", metavar="RUN", type=Path,
                   help="refit one recorded fit of this run folder exactly as its sweep did (with --n and --replicate; "
                        "--router where it fits several; --out FILE.json writes the report) and say whether its row is "
                        "reproduced; default none")
    g.add_argument("--n", dest="replay_n", type=positive_int, metavar="N",
                   help="sample size of the fit --replay refits; no default (required with --replay)")
    g.add_argument("--replicate", dest="replay_replicate", type=nonneg_int, metavar="R",
                   help="replicate of the fit --replay refits; no default (required with --replay)")
    # the list is read from the presets themselves, so that a new preset cannot be missing from --help
    g.add_argument("--preset", help=f"named preset: {', '.join(PRESETS)}; default none")
    g.add_argument("--config", metavar="FILE.toml", help="TOML file of settings (keys as the long flags, - or _); default none")
    add_quiet(g)
    g.add_argument("--figure-formats", type=argtype(check_figure_formats),
                   help="files of each convergence figure, a comma list of pdf, png, svg, or none "
                        "(moestat plot OUT draws them later); changes no number; default png (pdf,png for a paper's vector "
                        "figure: each file is a second or two of rendering)")


def _add_rate_fit_options(g) -> None:
    """The rate fit: fitting window, verdict tolerance, bootstrap, replicate plan."""
    g.add_argument("--window-min", type=positive_int, help="smallest n in the declared fitting window; default --n-min")
    g.add_argument("--window-max", type=positive_int, help="largest n in the declared fitting window; default --n-max")
    g.add_argument("--tolerance", type=nonneg_float, help="band within which a prediction the CI excludes is 'near' (never consistent); default 0.15")
    g.add_argument("--n-boot", type=positive_int, help="bootstrap resamples; default 1000")
    g.add_argument("--halfwidth", type=nonneg_float, help="target half-width of the slope CI for the replicate plan; default 0.05")
    g.add_argument("--bars", choices=BARS,
                   help="error bars of the figures: percentile (10th to 90th of the replicates; default) or sd2 (the "
                        "mean +- 2 standard deviations, Nguyen et al. (2024), Figure 1); changes no number")
    g.add_argument("--statistic", choices=tuple(STATISTICS),
                   help="fit the slope to the log of the per-n mean (the expected loss; default) or median (the theorems' "
                        "O_P statements bound quantiles); with median the mean's slope and category are reported beside")


#: Flags of the cluster connection: not part of the configuration (they never change a number).
CLUSTER_FLAGS = ("scheduler_file", "worker_timeout", "allow_worker_mismatch", "tls_ca_file", "tls_cert", "tls_key")
#: Flags of the outputs only: not part of the configuration either.
OUTPUT_FLAGS = ("figure_formats",)


def cluster_from_args(ns: argparse.Namespace) -> ClusterOptions:
    """The cluster options; the TLS files go to dask's configuration (which ``distributed.Client``
    reads for a ``tls://`` address)."""
    tls = {k: getattr(ns, f"tls_{k.replace('-', '_')}") for k in ("ca-file", "cert", "key") if hasattr(ns, f"tls_{k.replace('-', '_')}")}
    if tls:
        require_cluster_extra(f"--tls-{next(iter(tls))}")
        import dask

        for k, path in tls.items():
            if not Path(path).is_file():
                raise ValueError(f"--tls-{k} {path} does not exist")
        dask.config.set({"distributed.comm.tls.ca-file": tls.get("ca-file"), "distributed.comm.tls.client.cert": tls.get("cert"),
                         "distributed.comm.tls.client.key": tls.get("key")})
    return ClusterOptions(worker_timeout=getattr(ns, "worker_timeout", ClusterOptions.worker_timeout),
                          allow_mismatch=getattr(ns, "allow_worker_mismatch", False))


def config_from_args(ns: argparse.Namespace) -> RatesConfig:
    """Defaults < ``--preset`` < ``--config`` < explicit flags."""
    # the command's default (a preset, a file or the flag may set another); RatesConfig keeps 1
    data: dict[str, Any] = {"n_jobs": "auto"}
    if hasattr(ns, "preset"):
        data.update(preset_dict(ns.preset))
    if hasattr(ns, "config"):
        file_values = {str(k).replace("-", "_"): v for k, v in load_toml(ns.config).items()}
        check_config_file(build_parser(), ns.config, file_values)
        data.update(file_values)
        if "router" in file_values and "scenario_file" in file_values:
            raise ValueError(f"config file {ns.config}: router and scenario_file both set; the scenario file defines "
                             "the router")
    if hasattr(ns, "router") and (hasattr(ns, "scenario_file") or "scenario_file" in data):
        # the scenario file states its own gate: a --router next to it would be dropped without a word
        raise ValueError("--router cannot be combined with --scenario: the scenario file defines the router")
    for k, v in vars(ns).items():
        if k not in ("preset", "config", "out", "resume", *CLUSTER_FLAGS, *OUTPUT_FLAGS):
            data[k] = v
    if data.get("family") == "gaussian-moe" and "estimator" not in data:
        data["estimator"] = "mle"  # the family's only estimator: picked, not left to fail as 'lse'
    if getattr(ns, "scheduler_file", None):
        if hasattr(ns, "scheduler"):
            raise ValueError("give --scheduler or --scheduler-file, not both")
        data["scheduler"] = scheduler_from_file(ns.scheduler_file)
        data.setdefault("backend", "dask")
    return RatesConfig.from_dict(scenario_file_defaults(data))


#: Flags ``--grow-from`` takes beside the grid: they change no number of the grown run.
GROW_FLAGS = ("grow_from", "out", "n_jobs", "quiet", *OUTPUT_FLAGS)


def grown_config(ns: argparse.Namespace) -> RatesConfig:
    """The configuration ``--grow-from RECORD`` grows to: the record's own, with the grid and
    replicates given (:data:`moestat.rates.grow.GRID_KEYS`), ``--n-jobs`` and ``--quiet``.

    Raises
    ------
    ValueError
        Any other flag (another sweep is not a growth), ``--resume``, a missing record, or an
        impossible grid: one line.
    """
    other = sorted(f"--{k.replace('_', '-')}" for k in vars(ns) if k not in GROW_FLAGS and k not in GRID_KEYS)
    if other:
        raise ValueError(f"--grow-from keeps the record's configuration: only --n-min, --n-max, --n-points, --reps, "
                         f"--n-jobs, --quiet and --figure-formats may be given, not {', '.join(other)} (a stopped "
                         "growth is continued by the grown run's own options and --resume)")
    record = ns.grow_from
    if not record.is_dir():
        raise ValueError(f"--grow-from {record}: no such folder")
    changes = {k: getattr(ns, k) for k in ("n_jobs", "quiet", *sorted(GRID_KEYS)) if hasattr(ns, k)}
    return recorded_config(record).replace(**{"n_jobs": "auto", "quiet": False, **changes}).validate()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``moestat rates`` (and ``python -m moestat.rates``)."""
    ns = build_parser().parse_args(argv)
    out = Path(ns.out)
    resume = getattr(ns, "resume", False)
    if hasattr(ns, "grow_from"):
        return _grow(ns, out)
    if hasattr(ns, "replay") or hasattr(ns, "replay_n") or hasattr(ns, "replay_replicate"):
        return _replay(ns, argv)
    with usage_errors():
        config = config_from_args(ns)
        if config.backend == "dask":
            require_cluster_extra("--backend dask" if not getattr(ns, "scheduler_file", None) else "--scheduler-file")
        if resume and out.is_dir():
            config = stored_file_label(out, config)  # a folder written before labels came from ``name``
        config.validate()
        cluster = cluster_from_args(ns)
        if config.backend == "dask":  # reached now, within seconds, before anything is written
            check_scheduler(config.scheduler, cluster)
        if out.is_dir():
            check_resumable(out, config, resume)
        prepare_out(out, resume)
        if out.is_dir():
            check_resumable(out, config, resume)  # again, now that no other run can be writing it
    formats = getattr(ns, "figure_formats", DEFAULT_FIGURE_FORMATS)
    suffix = analysis_suffix(out, config, resume)  # as run_rates decides it, before it writes
    # the pre-flight of a scenario file's truth (a theorem instrument: the door runs it, the engine writes it)
    pre = scenario_preflight(Experiment.of(config)) if config.scenario_file else None
    # and the theorems its truth meets (the registry judges; the engine takes what it is handed)
    summary = run_rates(config, out, resume=resume, cluster=cluster, figure_formats=formats, preflight=pre,
                        theorems=scenario_theorems)
    if not config.quiet:
        print(format_table(summary))
        figs = f" and convergence{suffix}.{'/.'.join(formats)}" if formats else " (no figures: --figure-formats none)"
        print(f"wrote {out / f'summary{suffix}.json'}{figs} ({summary['elapsed_s']:.1f} s)")
    return 0


def _grow(ns: argparse.Namespace, out: Path) -> int:
    """``moestat rates --grow-from RECORD --out OUT`` (see the module's docstring)."""
    with usage_errors():
        config = grown_config(ns)
        check_folders(ns.grow_from, out, f"moestat rates with the grown run's options, --resume --out {out}")
        missing = check_growable(ns.grow_from, config)  # the whole record read and checked before the copy
    copy_and_fit(ns.grow_from, out, config, missing)
    prepare_out(out, True)  # the grown folder is now a rates run to resume: its lock for the summary
    formats = getattr(ns, "figure_formats", DEFAULT_FIGURE_FORMATS)
    suffix = analysis_suffix(out, config, True)
    pre = scenario_preflight(Experiment.of(config)) if config.scenario_file else None  # as a plain run does
    summary = run_rates(config, out, resume=True, figure_formats=formats, preflight=pre, theorems=scenario_theorems)
    if not config.quiet:
        print(f"{out.name}: copied from {ns.grow_from}, fitted sizes {missing}")
        print(format_table(summary))
        print(f"wrote {out / f'summary{suffix}.json'} ({summary['elapsed_s']:.1f} s)")
    return 0


#: Flags ``--replay`` takes: the fit and where its report goes (a replay changes nothing of the record).
REPLAY_FLAGS = ("replay", "replay_n", "replay_replicate", "router", "out")


def _replay(ns: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """``moestat rates --replay RUN --n N --replicate R [--out FILE.json]`` (see the module's docstring)."""
    given = sys.argv[1:] if argv is None else list(argv)
    out_given = any(a == "--out" or a.startswith("--out=") for a in given)  # --out has a folder default otherwise
    with usage_errors():
        other = sorted(f"--{k.replace('_', '-')}" for k in vars(ns) if k not in REPLAY_FLAGS)
        if other:
            raise ValueError(f"--replay refits a recorded fit by the record's own configuration: only --n, --replicate, "
                             f"--router and --out may be given, not {', '.join(other)}")
        missing = [f for f, k in (("--replay RUN", "replay"), ("--n", "replay_n"), ("--replicate", "replay_replicate"))
                   if not hasattr(ns, k)]
        if missing:
            raise ValueError(f"--replay needs {', '.join(missing)}")
        router = getattr(ns, "router", None)
        if router is not None and len(router) != 1:
            raise ValueError(f"--replay refits one fit: --router names one router, got {','.join(router)}")
        target = None
        if out_given:
            target = Path(ns.out)
            if target.suffix != ".json":
                raise ValueError(f"--out {target}: --replay writes a JSON report; name a FILE.json")
            if not target.parent.is_dir():
                raise ValueError(f"--out {target}: no folder {target.parent}")
            if ns.replay.resolve() in target.resolve().parents:  # a replay never writes into the record it reads
                raise ValueError(f"--out {target} is inside the record {ns.replay}; choose a path outside it")
            check_output_file(target, "--out")
        report = replay_unit(ns.replay, ns.replay_n, ns.replay_replicate, router=router[0] if router else None)
    print(format_replay(report))
    if target is not None:
        atomic_write_json(target, report)
        print(f"wrote {target}")
    return 0
