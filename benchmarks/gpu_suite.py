"""Every GPU measurement of issue 36 with its CPU baseline, on the same machine, in one command.

Usage (from the repository root; the package need not be installed)::

    PYTHONPATH=. python3 benchmarks/gpu_suite.py --out DIR            # on a CUDA machine
    PYTHONPATH=. python3 benchmarks/gpu_suite.py --out DIR --smoke    # tiny sizes on CPU, seconds

Parts (each with a time budget; a part that would not fit is skipped with its reason recorded):

* ``main_job`` -- ``python -m moestat.rates --router perturbed``: wall time and fitting time (the
  sum of ``results.csv``'s ``time`` column), CPU and CUDA, interleaved, medians over
  ``--repeats``; the maximum relative difference of the results (every numeric column but
  ``time``) between the CPU and CUDA runs.
* ``lse_large`` -- n = 250k / 500k / 1e6 x 20 replicates of least squares on CUDA; the CPU
  baseline runs the same sizes with fewer replicates (``--cpu-reps``) on ``--n-jobs`` = cores,
  compared per replicate (and on the replicates both runs fitted).
* ``gmoe`` -- the Gaussian-MoE maximum-likelihood design ``--preset gmoe_exact`` (150 sizes x
  ``--gmoe-reps`` replicates x 5 starts; 40 replicates = the 30 000 fits of the design) whole
  run on CUDA and with ``--n-jobs`` = cores on CPU, with the log-likelihood agreement on the rows
  both runs wrote.  A run that passes its time limit is stopped; the rows it wrote are counted.
* ``lm_step`` -- optimizer steps of ``moestat lm --preset small`` (random windows of random
  symbols: a step costs the same on any text) in fp32 and in bf16 autocast: characters/s.
* peak device memory of every CUDA run (``torch.cuda.max_memory_allocated`` in the child).

Every command runs in a child process (``--child``), so each wall time is a whole run: the
interpreter, imports, CUDA start, sweep, fits and figures.  ``DIR/gpu_suite.json`` is rewritten
after every part, so a suite stopped by an outer time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:  # this checkout's moestat, not an installed one
    sys.path.insert(0, str(ROOT))
SCHEMA = 1

#: Columns of results.csv that are not results (bookkeeping or timing).
NOT_RESULTS = {"time", "crc32", "seed", "scenario", "router", "setting", "estimator", "status", "replicate", "n"}


def log(msg: str) -> None:
    print(f"[gpu_suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- child processes --------------------------------------------------------------------------
def child_main(argv: list[str]) -> int:
    """``--child FILE -- <moestat args>`` or ``--child FILE --lm PRECISION DEVICE SMOKE STEPS``:
    run, then write the peak device memory (and the LM figures) to FILE."""
    out_file = Path(argv[0])
    rest = argv[1:]
    import torch

    info: dict = {}
    if rest and rest[0] == "--lm":
        info.update(lm_steps(precision=rest[1], device=rest[2], smoke=rest[3] == "1", steps=int(rest[4])))
        rc = 0
    elif rest and rest[0] == "--mle":
        info.update(mle_logliks(device=rest[1], smoke=rest[2] == "1"))
        rc = 0
    else:
        from moestat.cli.main import main

        rc = main(rest[1:] if rest and rest[0] == "--" else rest)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        info["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
    info["rc"] = int(rc)
    out_file.write_text(json.dumps(info))
    return int(rc)


def lm_steps(*, precision: str, device: str, smoke: bool, steps: int) -> dict:
    """Time ``steps`` training steps of the LM (after 3 warm-up steps), as :func:`train_lm` takes them."""
    import torch

    from moestat.experiments.lm import PRESETS, lm_autocast
    from moestat.nn.train import make_optimizer
    from moestat.nn.transformer import LMConfig, MoETransformerLM

    preset = "cpu" if smoke else "small"
    mk = dict(PRESETS[preset]["model"])
    batch = PRESETS[preset]["train"]["batch_size"]
    if smoke:
        mk.update(context=32, d_model=32, n_layers=1, n_heads=2, expert_hidden=32)
        batch = 4
    cfg = LMConfig(vocab_size=200, router="perturbed", **mk)
    torch.manual_seed(0)
    model = MoETransformerLM(cfg, random_state=0).to(device)
    model.train()
    opt = make_optimizer(model.parameters(), "adam", PRESETS[preset]["train"]["lr"])
    gen = torch.Generator(device="cpu").manual_seed(1)
    data = torch.randint(0, cfg.vocab_size, (200_000,), generator=gen).to(device)
    amp = lm_autocast(device, precision)
    losses = []

    def one_step() -> torch.Tensor:
        start = torch.randint(0, len(data) - cfg.context - 1, (batch,), generator=gen).to(device)
        idx = start[:, None] + torch.arange(cfg.context + 1, device=device)
        w = data[idx]
        with amp:
            _, loss, _ = model.loss(w[:, :-1], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(3):
        one_step()
    sync()
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        losses.append(one_step())
    sync()
    dt = time.perf_counter() - t0
    final = float(torch.stack(losses).float().mean())
    return {"preset": preset, "precision": precision, "device": str(device), "steps": steps, "batch_size": batch,
            "context": cfg.context, "n_params": int(model.n_parameters()), "seconds": dt,
            "chars_per_s": steps * batch * cfg.context / dt, "mean_loss": final}


def mle_logliks(*, device: str, smoke: bool) -> dict:
    """Log-likelihoods of the gmoe_exact estimator (model 1, K = 2, 5 starts per replicate, the
    preset's ``max_iter``, ``init_scale`` and seeds) on one batch: results.csv has no
    log-likelihood column, so the agreement of the devices is measured here, fit by fit."""
    import numpy as np

    from moestat.data.gaussian_scenarios import model1_scenario
    from moestat.estimators.mle import MLEGaussianMoE
    from moestat.estimators.starts import near_truth_init
    from moestat.model.mixing import MixingMeasure

    R, S, n = (4, 2, 400) if smoke else (20, 5, 10_000)
    sc = model1_scenario("exact", 2)
    rng = np.random.default_rng(36)
    XY = [sc.sample(n, rng) for _ in range(R)]
    X, Y = np.stack([a for a, _ in XY]), np.stack([b for _, b in XY])
    init = MixingMeasure.stack([MixingMeasure.stack([near_truth_init(sc.truth, sc.k_fit, 0.1, rng, log_last=True)
                                                     for _ in range(S)]) for _ in range(R)])
    t0 = time.perf_counter()
    # eager on both devices: a CPU torch.compile would spend the part's budget compiling; the
    # compiled pass equals the eager one to 1e-9 (tests/estimators/test_mle.py)
    est = MLEGaussianMoE(n_components=2, max_iter=1000, device=device, compile=False).fit(X, Y, init=init)
    return {"replicates": R, "starts": S, "n": n, "fit_s": time.perf_counter() - t0,
            "loglik": [float(v) for v in est.loglik_], "kernel": str(getattr(est, "kernel_", ""))}


def run_child(args: list[str], timeout: float, env_extra: dict | None = None) -> dict:
    """Run ``gpu_suite.py --child`` with ``args``; wall, CPU user/system of the child tree, its JSON."""
    with tempfile.TemporaryDirectory() as td:
        info_file = Path(td) / "child.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(info_file), *args]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(env_extra or {})
        t_before = os.times()
        t0 = time.perf_counter()
        timed_out = False
        # a session of its own: on a time-out the whole group goes (a run with --n-jobs has
        # worker processes that would otherwise keep the cores busy during the next part)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            text, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            timed_out, rc = True, None
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            text, _ = proc.communicate()
        tail = (text or "")[-2000:]
        wall = time.perf_counter() - t0
        t_after = os.times()
        info = json.loads(info_file.read_text()) if info_file.exists() else {}
    res = {"wall_s": wall, "timed_out": timed_out, "rc": rc,
           "cpu_user_s": t_after.children_user - t_before.children_user,
           "cpu_system_s": t_after.children_system - t_before.children_system, **info}
    if rc not in (0, None) or timed_out:
        res["output_tail"] = tail
    return res


# ---- results.csv ------------------------------------------------------------------------------
def read_rows(path: Path) -> dict[tuple, dict]:
    """Rows of a results.csv keyed by (router, n, replicate) (and start, where present)."""
    if not path.exists():
        return {}
    out = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row.get("n") in (None, "n"):
                continue
            key = (row.get("router"), row.get("n"), row.get("replicate"), row.get("start"))
            out[key] = row
    return out


def fitting_seconds(rows: dict) -> float:
    return float(sum(float(r["time"]) for r in rows.values() if r.get("time") not in (None, "", "nan")))


def compare_rows(a: dict, b: dict, columns: list[str] | None = None) -> dict:
    """Largest relative difference ``|x - y| / max(|x|, |y|)`` over the common rows and numeric
    columns (NaN equal to NaN), overall and per column (``by_column``: an iteration count that moves
    by one must not hide how close the losses are); the number of common rows and of fields that
    differ in NaN-ness."""
    common = sorted(set(a) & set(b))
    worst, where, nan_mismatch, compared = 0.0, None, 0, 0
    by_column: dict[str, float] = {}
    for key in common:
        ra, rb = a[key], b[key]
        cols = columns or [c for c in ra if c not in NOT_RESULTS]
        for c in cols:
            try:
                x, y = float(ra[c]), float(rb[c])
            except (TypeError, ValueError, KeyError):
                continue
            compared += 1
            if math.isnan(x) or math.isnan(y):
                nan_mismatch += math.isnan(x) != math.isnan(y)
                continue
            scale = max(abs(x), abs(y))
            rel = 0.0 if scale == 0 else abs(x - y) / scale
            by_column[c] = max(by_column.get(c, 0.0), rel)
            if rel > worst:
                worst, where = rel, f"{c} at router={key[0]} n={key[1]} replicate={key[2]}"
    return {"common_rows": len(common), "values_compared": compared, "max_rel_diff": worst, "where": where,
            "nan_mismatches": nan_mismatch, "by_column": by_column}


def med(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# ---- parts ------------------------------------------------------------------------------------
class Suite:
    def __init__(self, args: argparse.Namespace):
        import torch

        self.args = args
        self.smoke = args.smoke
        self.cuda = torch.cuda.is_available() and not args.smoke
        self.gpu = "cuda" if self.cuda else "cpu"  # the smoke mode runs the "GPU" side on the CPU
        self.cores = os.cpu_count() or 1
        self.t_start = time.perf_counter()
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_suite_"))
        self.result = {
            "schema": SCHEMA,
            "smoke": self.smoke,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"node": platform.node(), "platform": platform.platform(), "processor": platform.processor(),
                        "cpu_count": self.cores, "python": platform.python_version()},
            "torch": {"version": torch.__version__, "cuda_version": torch.version.cuda,
                      "cuda_available": torch.cuda.is_available(),
                      "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                      "device_memory_bytes": (torch.cuda.get_device_properties(0).total_memory
                                              if torch.cuda.is_available() else None)},
            "threads": {"torch_num_threads": torch.get_num_threads(),
                        "torch_num_interop_threads": torch.get_num_interop_threads(),
                        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS")},
            "gpu_side_device": self.gpu,
            "budget_s": args.budget if math.isfinite(args.budget) else None,
            "parts": {},
        }
        self.save()

    # bookkeeping
    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.t_start)

    def save(self) -> None:
        self.result["elapsed_s"] = time.perf_counter() - self.t_start
        tmp = self.out / "gpu_suite.json.tmp"
        tmp.write_text(json.dumps(self.result, indent=2, default=str))
        tmp.replace(self.out / "gpu_suite.json")

    def skip(self, name: str, reason: str) -> None:
        log(f"{name}: skipped ({reason})")
        self.result["parts"][name] = {"skipped": reason}
        self.save()

    def fits(self, name: str, need: float) -> bool:
        """Whether ``need`` seconds (the part's own budget) remain of the suite's; else record a skip."""
        if need > self.left():
            self.skip(name, f"needs about {need:.0f} s, {max(self.left(), 0):.0f} s of the suite's "
                            f"{self.args.budget:.0f} s budget left")
            return False
        return True

    def limit(self, seconds: float) -> float:
        """A child's time limit: ``seconds``, or 300 s in the smoke mode (tiny sizes on a possibly
        shared CI machine: the limits are for the real sizes, the smoke mode checks the plumbing)."""
        return max(seconds, 300.0) if self.smoke else seconds

    def rates(self, tag: str, flags: list[str], device: str, timeout: float) -> tuple[dict, dict]:
        out = self.work / tag
        shutil.rmtree(out, ignore_errors=True)
        # the smoke mode checks the plumbing: no figures (seconds of matplotlib per run)
        flags = [*flags, "--figure-formats", "none"] if self.smoke else flags
        res = run_child(["--", "rates", *flags, "--device", device, "--quiet", "--out", str(out)], self.limit(timeout))
        rows = read_rows(out / "results.csv")
        res["rows"] = len(rows)
        res["fitting_s"] = fitting_seconds(rows)
        if device == "cpu":
            res.pop("peak_device_bytes", None)  # a CPU run's CUDA context (if any) is not its memory
        return res, rows

    # (a)
    def main_job(self) -> None:
        name, budget = "main_job", self.args.main_budget
        if not self.fits(name, budget):
            return
        flags = ["--router", "perturbed"] + (["--n-min", "200", "--n-max", "800", "--n-points", "3", "--reps", "3",
                                              "--n-boot", "100"]
                                             if self.smoke else [])
        per_run = budget / (2 * self.args.repeats)
        runs: dict[str, list] = {"cpu": [], self.gpu + "_side": []}
        rows_of: dict[str, dict] = {}
        t0 = time.perf_counter()
        for i in range(self.args.repeats):
            for side, dev in (("cpu", "cpu"), (self.gpu + "_side", self.gpu)):
                if i and time.perf_counter() - t0 > budget * (i / self.args.repeats) * 1.1:
                    continue  # repeats that would overrun the part's budget are left out (recorded below)
                log(f"{name}: {side} run {i + 1}/{self.args.repeats}")
                res, rows = self.rates(f"main-{side}-{i}", flags, dev, timeout=max(per_run * 1.5, 30))
                runs[side].append(res)
                rows_of.setdefault(side, rows)
                log(f"{name}: {side} run {i + 1}: wall {res['wall_s']:.1f} s, fitting {res['fitting_s']:.1f} s, "
                    f"rows {res['rows']}")
        part = {"command": "python -m moestat.rates " + " ".join(flags) + " --device {cpu|" + self.gpu + "}",
                "repeats_asked": self.args.repeats, "runs": runs}
        for side, rs in runs.items():
            ok = [r for r in rs if r.get("rc") == 0]
            part[side] = {"repeats": len(ok), "median_wall_s": med([r["wall_s"] for r in ok]),
                          "median_fitting_s": med([r["fitting_s"] for r in ok]),
                          "median_cpu_system_s": med([r["cpu_system_s"] for r in ok]),
                          "peak_device_bytes": max((r.get("peak_device_bytes", 0) for r in ok), default=None)}
            w, f = part[side]["median_wall_s"], part[side]["median_fitting_s"]
            part[side]["fitting_share"] = f / w if w and f is not None else None
        g = part[self.gpu + "_side"]
        part["wall_ratio_cpu_over_gpu_side"] = ratio(part["cpu"]["median_wall_s"], g["median_wall_s"])
        part["fitting_ratio_cpu_over_gpu_side"] = ratio(part["cpu"]["median_fitting_s"], g["median_fitting_s"])
        part["agreement"] = compare_rows(rows_of.get("cpu", {}), rows_of.get(self.gpu + "_side", {}))
        self.result["parts"][name] = part
        self.save()

    # (b)
    def lse_large(self) -> None:
        name, budget = "lse_large", self.args.lse_budget
        if not self.fits(name, budget):
            return
        if self.smoke:
            sizes, reps, cpu_reps = ["2000", "8000"], "4", "2"
        else:
            sizes, reps, cpu_reps = ["250000", "1000000"], "20", str(self.args.cpu_reps)
        grid = ["--router", "perturbed", "--n-min", sizes[0], "--n-max", sizes[1], "--n-points", "3"]
        grid += ["--n-boot", "100"] if self.smoke else []
        log(f"{name}: {self.gpu} side, n = {sizes[0]}..{sizes[1]} (3 sizes) x {reps} replicates")
        g, g_rows = self.rates("lse-gpu", grid + ["--reps", reps], self.gpu, timeout=budget - 20)
        log(f"{name}: {self.gpu} side wall {g['wall_s']:.1f} s, fitting {g['fitting_s']:.1f} s")
        jobs = str(min(self.cores, 3 * int(cpu_reps)))
        cpu_flags = grid + ["--reps", cpu_reps, "--chunk", "1", "--n-jobs", jobs]
        left_for_cpu = min(budget - g["wall_s"], self.left()) - 5
        part = {"gpu_side": {**g, "command": "rates " + " ".join(grid + ["--reps", reps])}}
        if left_for_cpu < 20 and not self.smoke:
            part["cpu"] = {"skipped": f"{left_for_cpu:.0f} s of the part's budget left"}
        else:
            log(f"{name}: cpu baseline, {cpu_reps} replicates per size, --n-jobs {jobs}")
            c, c_rows = self.rates("lse-cpu", cpu_flags, "cpu", timeout=max(left_for_cpu, 20))
            c["command"] = "rates " + " ".join(cpu_flags)
            part["cpu"] = c
            # per replicate from the rows written: defined even when the run passed its time limit
            for key, r in (("cpu", c), ("gpu_side", g)):
                part[f"{key}_fitting_per_replicate_s"] = r["fitting_s"] / r["rows"] if r["rows"] else None
            part["fitting_per_replicate_ratio_cpu_over_gpu_side"] = ratio(part["cpu_fitting_per_replicate_s"],
                                                                          part["gpu_side_fitting_per_replicate_s"])
            log(f"{name}: cpu wall {c['wall_s']:.1f} s, fitting {c['fitting_s']:.1f} s")
            if c.get("rc") == 0 and g.get("rc") == 0:
                part["cpu_wall_per_replicate_s"] = c["wall_s"] / (3 * int(cpu_reps))
                part["gpu_side_wall_per_replicate_s"] = g["wall_s"] / (3 * int(reps))
                part["wall_per_replicate_ratio_cpu_over_gpu_side"] = ratio(part["cpu_wall_per_replicate_s"],
                                                                            part["gpu_side_wall_per_replicate_s"])
                part["cpu_wall_for_all_replicates_estimate_s"] = part["cpu_wall_per_replicate_s"] * 3 * int(reps)
                part["agreement"] = compare_rows(c_rows, g_rows)
        part["big_1e7_x100"] = {"skipped": "n = 1e7 x 100 replicates (3 sizes) needs minutes alone; run it by hand: "
                                           "python -m moestat.rates --router perturbed --n-min 2500000 --n-max 10000000 "
                                           "--n-points 3 --reps 100 --device cuda"}
        self.result["parts"][name] = part
        self.save()

    # (c)
    def gmoe(self) -> None:
        name, budget = "gmoe", self.args.gmoe_budget
        if not self.fits(name, budget):
            return
        if self.smoke:
            flags = ["--preset", "gmoe_smoke"]
        else:
            flags = ["--preset", "gmoe_exact", "--reps", str(self.args.gmoe_reps)]
        jobs = str(self.cores if not self.smoke else 2)
        part: dict = {"design": " ".join(flags), "fits_in_design": None}
        each = 0.33 * budget  # each whole run; the rest for the log-likelihood batch on both devices
        log(f"{name}: {self.gpu} side, {' '.join(flags)} (time limit {each:.0f} s)")
        g, g_rows = self.rates("gmoe-gpu", flags, self.gpu, timeout=each)
        log(f"{name}: {self.gpu} side wall {g['wall_s']:.1f} s (timed out: {g['timed_out']}), rows {g['rows']}, "
            f"fitting {g['fitting_s']:.1f} s")
        log(f"{name}: cpu --n-jobs {jobs} (time limit {each:.0f} s)")
        c, c_rows = self.rates("gmoe-cpu", flags + ["--n-jobs", jobs], "cpu", timeout=min(each, max(self.left() - 5, 10)))
        log(f"{name}: cpu wall {c['wall_s']:.1f} s (timed out: {c['timed_out']}), rows {c['rows']}, "
            f"fitting {c['fitting_s']:.1f} s")
        part["gpu_side"] = g
        part["cpu_n_jobs"] = {**c, "n_jobs": int(jobs)}
        part["wall_ratio_cpu_over_gpu_side"] = (ratio(c["wall_s"], g["wall_s"])
                                                if not (c["timed_out"] or g["timed_out"]) else None)
        # results.csv has no log-likelihood: its columns (fitted losses, objective) are compared,
        # and one batch of the design's fits is refitted on both devices for the log-likelihoods
        part["results_agreement"] = compare_rows(c_rows, g_rows)
        lls = {}
        for side, dev in (("cpu", "cpu"), ("gpu_side", self.gpu)):
            if self.left() < 15:
                break
            lls[side] = run_child(["--mle", dev, "1" if self.smoke else "0"],
                                  timeout=self.limit(min(0.17 * budget, self.left() - 5)))
        part["loglik_batch"] = lls
        a, b = (lls.get("cpu") or {}).get("loglik"), (lls.get("gpu_side") or {}).get("loglik")
        if a and b:
            import numpy as np

            a, b = np.asarray(a), np.asarray(b)
            part["loglik_max_rel_diff"] = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), np.abs(b))))
        self.result["parts"][name] = part
        self.save()

    # (d)
    def lm_step(self) -> None:
        name, budget = "lm_step", self.args.lm_budget
        if not self.fits(name, budget):
            return
        steps = 2 if self.smoke else self.args.lm_steps
        part: dict = {}
        for prec in ("fp32", "bf16"):
            if prec == "bf16" and not self.smoke and not self.cuda:
                part[prec] = {"skipped": "no CUDA"}
                continue
            log(f"{name}: {prec} on {self.gpu}, {steps} steps")
            res = run_child(["--lm", prec, self.gpu, "1" if self.smoke else "0", str(steps)],
                            timeout=self.limit(budget / 2))
            part[prec] = res
            if res.get("chars_per_s"):
                log(f"{name}: {prec}: {res['chars_per_s']:.0f} characters/s")
        part["bf16_over_fp32"] = ratio((part.get("bf16") or {}).get("chars_per_s"),
                                       (part.get("fp32") or {}).get("chars_per_s"))
        self.result["parts"][name] = part
        self.save()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder of gpu_suite.json")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (seconds); for the test suite")
    p.add_argument("--budget", type=float, default=230.0, help="seconds for the whole suite (default 230)")
    p.add_argument("--parts", default="main_job,lse_large,gmoe,lm_step", help="comma list of parts to run")
    p.add_argument("--repeats", type=int, default=1,
                   help="interleaved repeats of the main job per device (default 1: the 240 s of the device run; raise --main-budget with it)")
    p.add_argument("--main-budget", type=float, default=45.0, help="seconds for the main-job part (default 45)")
    p.add_argument("--lse-budget", type=float, default=65.0, help="seconds for the large-n part (default 65)")
    p.add_argument("--cpu-reps", type=int, default=2, help="replicates per size of the large-n CPU baseline (default 2)")
    p.add_argument("--gmoe-budget", type=float, default=85.0, help="seconds for the Gaussian-MoE part (default 85)")
    p.add_argument("--gmoe-reps", type=int, default=8,
                   help="replicates per size of the gmoe_exact design (default 8 of 40: 6 000 fits)")
    p.add_argument("--lm-budget", type=float, default=30.0, help="seconds for the LM part (default 30)")
    p.add_argument("--lm-steps", type=int, default=20, help="timed LM steps per precision (default 20)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.smoke:  # tiny sizes: every part runs (the budgets are for the real sizes)
        args.budget = math.inf
        args.repeats = min(args.repeats, 1)
    suite = Suite(args)
    log(f"torch {suite.result['torch']['version']}, device {suite.result['torch']['device_name'] or 'cpu'}, "
        f"{suite.cores} cores, budget {args.budget:.0f} s, smoke={args.smoke}")
    if not suite.cuda and not args.smoke:
        suite.result["note"] = "CUDA is not available: the GPU side ran on the CPU"
    for name in [s.strip() for s in args.parts.split(",") if s.strip()]:
        fn = getattr(suite, name, None)
        if fn is None or name.startswith("_"):
            suite.skip(name, "unknown part")
            continue
        try:
            fn()
        except Exception as exc:  # one part's failure must not lose the others' numbers
            suite.result["parts"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            suite.save()
            log(f"{name}: error {type(exc).__name__}: {exc}")
    suite.result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suite.save()
    shutil.rmtree(suite.work, ignore_errors=True)
    log(f"wrote {suite.out / 'gpu_suite.json'} ({time.perf_counter() - suite.t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
