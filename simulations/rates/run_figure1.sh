#!/usr/bin/env bash
# Reproduce Nguyen et al. (2024), Figure 1(a) and 1(b), and the must-show checks of docs/guide/rates.rst.
# Usage: simulations/rates/run_figure1.sh [OUTDIR] [N_JOBS]
# Resumable: rerun the same command after an interruption.
set -euo pipefail
OUT=${1:-runs/rates}
JOBS=${2:-2}
export OMP_NUM_THREADS=1
python -m moestat rates --config simulations/rates/fig1a.toml --n-jobs "$JOBS" --out "$OUT/fig1a" --resume
python -m moestat rates --config simulations/rates/fig1b.toml --n-jobs "$JOBS" --out "$OUT/fig1b" --resume
python -m moestat rates --router perturbed --estimator null --n-jobs "$JOBS" --out "$OUT/null" --resume
python -m moestat plot "$OUT/fig1b" --losses voronoi,param_single,param_multi,regression_l2 --name fig1b_parameters
