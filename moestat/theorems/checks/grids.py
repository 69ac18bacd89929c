"""Rate-run configurations shared by the rate checks (one run feeds several checks).

Quick mode is sized for CI (a few minutes on 2 cores); full mode follows the paper's scale as far
as this machine allows (Nguyen et al. (2024) use 20 replicates per n; sample sizes are not recoverable).
The scenario is moestat's documented default (d = 4, k* = 3, GELU experts, tau = 0.5, nu = 0.01,
near-truth start with constant noise 0.05); dense gate in both settings, the over-specified
fit with k = k* + 1 (see :func:`moestat.data.synthetic.make_scenario`).
"""

from __future__ import annotations

from moestat.data.synthetic import make_scenario
from moestat.theorems.checks.framework import Context
from moestat.rates.spec_checks import check_scenario_memory
from moestat.rates.verdicts import DEFAULT_TOLERANCE

#: The band of :func:`moestat.rates.verdicts.judge_interval` (``near``), the same default as the rates engine.
TOLERANCE = DEFAULT_TOLERANCE

GRIDS = {
    "quick": dict(n_min=2000, n_max=32000, n_points=5, reps=8, n_boot=200),
    "full": dict(n_min=2000, n_max=128000, n_points=7, reps=20, n_boot=1000),  # Nguyen et al. (2024): 20 replicates per n
}


#: Where quick mode's over-specified run starts (a choice of the quick grid, not of a rule).
#: Measured on recorded runs: the over run on n = 2000..32000 (seed 0, 8 replicates) has the
#: perturbed single-atom error's local slope -1.33 over n <= 8000 (at n = 2000 a heavy tail, 0.48
#: to 8.2 over the replicates) and -0.64 over n >= 8000 (mass-weighted: -1.23 and -0.71), and the
#: same fit on n = 15 625 .. 1e6 (10 replicates) has local slopes -0.27 .. -0.91 around its fitted
#: -0.50.  The regime Theorem 5 speaks of therefore begins near n = 8000; a quick grid below it
#: would measure the pre-asymptotic descent.
#: (The pre-flight's n_ok of this truth, 1416, is the Cramer-Rao size of the *truth's* parameters;
#: the over-specified fit's information is singular at the truth by construction, so n_ok does not
#: say where the k* + 1 fit's asymptotics begin.)  Cost: the fits scale with the sum of n, 89 941
#: against 62 000 per replicate and router (x 1.45).  Full mode keeps 2000..128000 (it reaches far
#: into the regime); an --n-max override keeps the plain grid rule.
OVER_QUICK_N_MIN = 8000

#: Replicates of quick mode's Theorem 5 run: a sample size from a pilot, by the checks' width
#: rule of the time.  The five ``thm5`` checks are inconclusive on the quick over run (8 replicates) because
#: their intervals, the log-of-mean slope's t interval over 5 sizes, are 1.06 to 2.64 wide against a
#: width cap of 1 (the cap has since become :data:`moestat.rates.verdicts.MAX_CI_WIDTH`, 1/4, under
#: which these intervals are inconclusive again).  That interval's standard error
#: scales as 1 / sqrt(replicates) (the per-n means' noise), so the count that brings the widest of
#: the five to 1 is 8 * 2.637^2 = 55.6, rounded up to a multiple of the pilot's 8: 56
#: (:func:`thm5_quick_reps` recomputes it from the recorded pilot; a test checks it).  At that count the
#: widest two (D2, ``weighted_multi``) are expected at about the bound, so either can still come out
#: inconclusive: the rule is the pilot's, not a margin picked for a result.
THM5_QUICK_REPS = 56


def grid(ctx: Context) -> dict:
    """The mode's grid with the context's ``reps`` / ``n_max`` overrides applied."""
    g = dict(GRIDS[ctx.mode])
    if ctx.reps is not None:
        g["reps"] = int(ctx.reps)
    if ctx.n_max is not None:
        g["n_max"] = int(ctx.n_max)
        g["n_min"] = min(g["n_min"], int(ctx.n_max) // 8)
    return g


def exact_run(ctx: Context) -> tuple[str, dict]:
    """Exact-specified, perturbed and vanilla cosine routers on the same data (Thms 1/2/4/6)."""
    return f"{ctx.mode}-exact", ctx.rates("exact", router=["perturbed", "cosine"], setting="exact", estimator="lse",
                                          cell_errors=True, **grid(ctx))


def _over_settings(ctx: Context) -> dict:
    """The over-specified runs' settings but the routers: grid, estimator, budget and cell errors."""
    # the over-specified budget rule of moestat.rates.presets (max_iter = 1000): with 200, a fifth
    # of the fits stop at max_iter and every verdict on them is inconclusive
    g = grid(ctx)
    if ctx.quick and ctx.n_max is None:
        g["n_min"] = OVER_QUICK_N_MIN  # where the asymptotics begin (see OVER_QUICK_N_MIN)
    return dict(setting="over", estimator="lse", max_iter=1000, cell_errors=True, **g)


def over_run(ctx: Context) -> tuple[str, dict]:
    """Over-specified (k = k* + 1, dense gate), perturbed and vanilla cosine (Thms 3/5)."""
    return f"{ctx.mode}-over", ctx.rates("over", router=["perturbed", "cosine"], **_over_settings(ctx))


def thm5_quick_reps(widths: list[float], pilot_reps: int = 8, max_width: float = 1.0) -> int:
    """The replicate count of :data:`THM5_QUICK_REPS` from a pilot's interval widths.

    ``ceil(pilot_reps * (max(widths) / max_width) ** 2)`` rounded up to a multiple of ``pilot_reps``:
    the count at which the widest interval is expected at ``max_width`` when its standard error
    scales as ``1 / sqrt(replicates)``.
    """
    import math

    need = math.ceil(pilot_reps * (max(widths) / max_width) ** 2)
    return pilot_reps * math.ceil(need / pilot_reps)


def thm5_run(ctx: Context) -> tuple[str, dict]:
    """The run the Theorem 5 checks read (:mod:`moestat.theorems.checks.over_strong`).

    Quick mode without a ``--reps`` override: the perturbed router alone on :func:`over_run`'s
    grid, scenario, estimator and budget, with :data:`THM5_QUICK_REPS` replicates.  A replicate's
    data and start are keyed by ``(n, replicate)``, not by the router, so replicates 0-7 are the
    over run's perturbed fits.  Otherwise (``--full``, or ``--reps`` given) the over run itself.
    """
    if not ctx.quick or ctx.reps is not None:
        return over_run(ctx)
    return f"{ctx.mode}-over-thm5", ctx.rates("over-thm5", router=["perturbed"],
                                              **{**_over_settings(ctx), "reps": THM5_QUICK_REPS})


def null_run(ctx: Context) -> tuple[str, dict]:
    """The null estimator (returns its start) on the exact perturbed scenario."""
    return f"{ctx.mode}-null", ctx.rates("null", router=["perturbed"], setting="exact", estimator="null", **grid(ctx))


def check_grid_memory(mode: str, n_max: int, reps: int | None = None) -> None:
    """Raise a one-line ``ValueError`` when ``n_max`` cannot fit in memory (the largest check
    fits the default scenario, d = 4, over-specified with k* + 1 atoms, all replicates at once)."""

    default = max(GRIDS[mode]["reps"], THM5_QUICK_REPS) if mode == "quick" else GRIDS[mode]["reps"]
    check_scenario_memory(make_scenario("perturbed", "over"), n_max, reps or default, hint="or --reps")
