"""benchmarks/gpu_suite.py in its smoke mode: the plumbing of the GPU measurements, on the CPU.

The suite runs its parts (main job, large-n least squares, the Gaussian-MoE design, LM steps) at
tiny sizes with the "GPU side" on the CPU, so the two sides of every comparison compute the same
thing on the same device: their results must agree exactly, and every timing must be a finite
positive number.  On a lent GPU the same script (without ``--smoke``) gives the figures of
docs/guide/performance.rst.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_smoke_mode_writes_every_part_with_finite_numbers(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--out", str(tmp_path), "--smoke"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    d = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert {"schema", "machine", "torch", "threads", "parts", "smoke", "finished_utc"} <= set(d)
    assert d["smoke"] is True and d["gpu_side_device"] == "cpu"
    assert d["torch"]["version"] and d["machine"]["cpu_count"] >= 1
    parts = d["parts"]
    assert set(parts) == {"main_job", "lse_large", "gmoe", "lm_step"}, parts
    assert not any("skipped" in p or "error" in p for p in parts.values()), parts

    main = parts["main_job"]
    for side in ("cpu", "cpu_side"):
        assert main[side]["repeats"] == 1
        assert _finite_positive(main[side]["median_wall_s"]) and _finite_positive(main[side]["median_fitting_s"])
        assert 0 < main[side]["fitting_share"] < 1
    assert _finite_positive(main["wall_ratio_cpu_over_gpu_side"])
    # same device, same seeds: the two runs' results are identical (only `time` differs)
    assert main["agreement"]["common_rows"] == 9 and main["agreement"]["max_rel_diff"] == 0.0
    assert main["agreement"]["nan_mismatches"] == 0

    lse = parts["lse_large"]
    assert lse["gpu_side"]["rc"] == 0 and lse["gpu_side"]["rows"] == 3 * 4
    assert lse["cpu"]["rc"] == 0 and lse["cpu"]["rows"] == 3 * 2
    assert _finite_positive(lse["wall_per_replicate_ratio_cpu_over_gpu_side"])
    # the CPU baseline's replicates are the first ones of the GPU side's: same streams, same fits,
    # up to the rounding of a batch of another size (--chunk 1 against 4: measured 1.5e-13)
    assert lse["agreement"]["common_rows"] == 3 * 2 and lse["agreement"]["max_rel_diff"] < 1e-9
    assert "skipped" in lse["big_1e7_x100"]

    g = parts["gmoe"]
    assert not g["gpu_side"]["timed_out"] and not g["cpu_n_jobs"]["timed_out"]
    assert g["gpu_side"]["rows"] == g["cpu_n_jobs"]["rows"] == 9  # gmoe_smoke: 3 sizes x 3 replicates
    assert g["results_agreement"]["max_rel_diff"] == 0.0  # results do not depend on --n-jobs
    assert g["loglik_max_rel_diff"] == 0.0
    assert all(math.isfinite(v) for v in g["loglik_batch"]["cpu"]["loglik"])

    lm = parts["lm_step"]
    for prec in ("fp32", "bf16"):
        assert lm[prec]["rc"] == 0 and _finite_positive(lm[prec]["chars_per_s"]), lm[prec]
        assert math.isfinite(lm[prec]["mean_loss"])
    assert _finite_positive(lm["bf16_over_fp32"])
