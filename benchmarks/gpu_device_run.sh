#!/usr/bin/env bash
# Issue 36 on a lent CUDA machine, one command from the repository root (under 9 minutes):
#
#     bash benchmarks/gpu_device_run.sh
#
# 1. nvidia-smi and the versions        -> $OUT/nvidia-smi.txt, $OUT/versions.txt
# 2. the whole test suite, 16 workers   -> $OUT/pytest.log   (at most 300 s)
# 3. benchmarks/gpu_suite.py            -> $OUT/gpu_suite.json, $OUT/gpu_suite.log (at most 240 s)
# 4. nvidia-smi again (after the work)  -> $OUT/nvidia-smi-after.txt
#
# The package is used from this checkout (PYTHONPATH=.), not installed.  OUT defaults to ./gpu-out.
# A step that fails or runs out of time is recorded (its exit status in $OUT/status.txt) and the
# next step still runs.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
: > "$OUT/status.txt"
step() { echo "$1 exit $2 ($(date -u +%H:%M:%S))" | tee -a "$OUT/status.txt"; }

{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; } \
  > "$OUT/nvidia-smi.txt" 2>&1
step nvidia-smi $?
python3 - > "$OUT/versions.txt" 2>&1 <<'PY'
import os, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
      "cores", os.cpu_count(), "torch threads", torch.get_num_threads())
for m in ("numpy", "scipy", "sklearn", "statsmodels", "matplotlib", "pandas", "dask", "distributed", "hypothesis",
          "xdist", "pytest_timeout"):
    try:
        mod = __import__(m)
        print(m, getattr(mod, "__version__", "present"))
    except Exception as exc:
        print(m, "absent:", type(exc).__name__)
PY
step versions $?

# --maxfail bounds a broken run; --timeout stops one hung test
timeout -k 10 300 python3 -m pytest -n 16 -v -p no:cacheprovider --maxfail 30 --timeout 240 -rs tests \
  > "$OUT/pytest.log" 2>&1
step pytest $?
grep -E "FAILED|ERROR" "$OUT/pytest.log" | head -40; tail -n 5 "$OUT/pytest.log"

timeout -k 10 240 python3 benchmarks/gpu_suite.py --out "$OUT" 2>&1 | tee "$OUT/gpu_suite.log"
step gpu_suite "${PIPESTATUS[0]}"

nvidia-smi > "$OUT/nvidia-smi-after.txt" 2>&1
step nvidia-smi-after $?
cat "$OUT/status.txt"
