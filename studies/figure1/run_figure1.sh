#!/usr/bin/env bash
# Reproduce Nguyen et al. (2024), Figure 1(a) and 1(b), and the must-show checks of docs/guide/rates.rst.
# Usage: studies/figure1/run_figure1.sh [OUTDIR] [N_JOBS]
# Resumable: rerun the same command after an interruption.
# Writes to OUTDIR, not records/ (fig1a/fig1b's records: records/index.toml, serves "figure1").
set -euo pipefail
OUT=${1:-runs/rates}
JOBS=${2:-2}
export OMP_NUM_THREADS=1
python -m moestat rates --config studies/figure1/fig1a.toml --n-jobs "$JOBS" --out "$OUT/fig1a" --resume
python -m moestat rates --config studies/figure1/fig1b.toml --n-jobs "$JOBS" --out "$OUT/fig1b" --resume
python -m moestat rates --router perturbed --estimator null --n-jobs "$JOBS" --out "$OUT/null" --resume
python -m moestat plot "$OUT/fig1b" --losses voronoi,param_single,param_multi,regression_l2 --name fig1b_parameters
