"""``python -m moestat.plot DIR``: re-draw the convergence figure of a rates run without refitting.

Reads ``DIR/results.csv`` and the fitted lines of ``DIR/summary.json`` (no estimator and no
rate fit is rerun; when ``summary.json`` is missing, e.g. after an interrupted sweep, the rate
fits -- cheap regressions, not model fits -- are computed from ``results.csv``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from .cli import ArgumentParser, run_main

__all__ = ["main", "redraw"]

EXAMPLES = """\
examples:
  python -m moestat.plot runs/fig1a
  python -m moestat.plot runs/fig1b --losses voronoi,param_single,param_multi --name fig1b_params
  python -m moestat.plot runs/exact --routers perturbed
"""


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def redraw(run_dir, *, losses: Sequence[str] = ("voronoi",), routers: Sequence[str] | None = None, name: str = "convergence") -> list[Path]:
    """Draw ``run_dir/<name>.pdf`` and ``.png`` from a finished (or partial) rates run.

    Parameters
    ----------
    run_dir : path-like
        A ``--out`` folder of ``python -m moestat.rates``.
    losses, routers : sequence of str
        What to draw (routers default to every router in the results).
    name : str
        File stem of the figure.

    Returns
    -------
    list of Path
        The written PDF and PNG.
    """
    from .io import ensure_writable_dir
    from .plotting import plot_convergence
    from .ratefit import fit_rates
    from .sweep import LOSS_NAMES, read_results

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    for loss in losses:
        if loss not in LOSS_NAMES:
            raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSS_NAMES)}")
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--name must be a plain file stem, got {name!r}")
    df = read_results(run_dir / "results.csv")
    if df.empty:
        raise ValueError(f"{run_dir / 'results.csv'} holds no finished fits")
    present = sorted(df["router"].unique())
    if routers is not None:
        for r in routers:
            if r not in present:
                raise ValueError(f"router {r!r} is not in {run_dir / 'results.csv'} (has {', '.join(present)})")
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        fits = json.loads(summary_path.read_text(encoding="utf-8"))["fits"]
    else:
        fits = fit_rates(df, setting=str(df["setting"].iloc[0]), estimator=str(df["estimator"].iloc[0]), losses=list(losses))
    ensure_writable_dir(run_dir)
    return plot_convergence(df, fits, run_dir / name, losses=list(losses), routers=routers)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m moestat.plot``."""
    p = ArgumentParser(prog="python -m moestat.plot", description="Re-draw a rates run's convergence figure from results.csv.", epilog=EXAMPLES)
    p.add_argument("run_dir", metavar="DIR", help="output folder of python -m moestat.rates")
    p.add_argument("--losses", type=_list, default=["voronoi"], help="comma list of losses (voronoi, voronoi_direction, param_single, param_multi, mass, regression_l2)")
    p.add_argument("--routers", type=_list, default=None, help="comma list of routers (default: all in the run)")
    p.add_argument("--name", default="convergence", help="file stem of the figure (default convergence)")
    args = p.parse_args(argv)
    paths = redraw(args.run_dir, losses=args.losses, routers=args.routers, name=args.name)
    print("wrote " + ", ".join(str(x) for x in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="python -m moestat.plot"))
