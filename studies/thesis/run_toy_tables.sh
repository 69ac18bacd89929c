#!/usr/bin/env bash
# Toy tables of Krishnamurthy (2023) (Tables 3.1/3.2 layout) and the regression-toy expert recovery.
# CPU only, single-threaded; about 15-25 minutes on one busy core.
# Usage: bash studies/thesis/run_toy_tables.sh [OUTDIR]
set -euo pipefail
OUT=${1:-records/thesis/results}
export OMP_NUM_THREADS=1
moestat toy classify --method all --experts 3,5 --runs 10 --epochs 40 --seed 0 --out "$OUT/classify"
moestat toy regress --method all --runs 10 --epochs 40 --seed 0 --out "$OUT/regress"
