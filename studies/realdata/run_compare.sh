#!/usr/bin/env bash
# The recorded real-data comparisons of docs/guide/realdata.rst, as they were run.
#
# Fashion-MNIST: every gate, 3 seeds, 8 epochs (cosine learning-rate decay), shared 256-unit
# feature extractor + 8 experts of 32 hidden units, top-2.  On the shared 2-core machine the
# gates were split over several single-threaded processes, then their runs.jsonl were merged and
# summarised without training (--summarise-only; duplicate (gate, seed) rows, which are
# bit-identical because every run is seeded, count once).  Running it as one command is equivalent:
#   moestat realdata --dataset fashion-mnist --compare all $COMMON --out DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=records/realdata
COMMON="--shared-hidden 256 --expert-hidden 32 --experts 8 --k 2 --epochs 8 --seeds 3 --lr-schedule cosine --threads 1 --no-progress"

moestat realdata --dataset fashion-mnist $COMMON --out $OUT/fmnist_compare \
    --compare mlp,dense,perturbed,cosine,noisy_topk_load,topk_mask,naive_topk &
moestat realdata --dataset fashion-mnist $COMMON --out $OUT/fmnist_compare_part3 \
    --compare noisy_topk,dense_stochastic,topk_mask_importance,noisy_topk_importance_load &
wait
# Soft MoE last, one process per seed (--base-seed s --seeds 1 gives exactly seed s of --seeds 3)
for s in 0 1 2; do
    moestat realdata --dataset fashion-mnist ${COMMON/--seeds 3/--seeds 1} --seed $s \
        --out $OUT/fmnist_compare_softmoe_s$s --compare softmoe &
done
wait
cat $OUT/fmnist_compare_part3/runs.jsonl $OUT/fmnist_compare_softmoe_s{0,1,2}/runs.jsonl >> $OUT/fmnist_compare/runs.jsonl
moestat realdata --dataset fashion-mnist $COMMON --out $OUT/fmnist_compare --summarise-only \
    --compare mlp,dense,dense_stochastic,naive_topk,topk_mask,topk_mask_importance,noisy_topk,noisy_topk_load,noisy_topk_importance_load,cosine,perturbed,softmoe

# 20 epochs for the matched MLP and four gates, 3 seeds (one process per gate, then merged).
LONG="--shared-hidden 256 --expert-hidden 32 --experts 8 --k 2 --epochs 20 --seeds 3 --lr-schedule cosine --threads 1 --no-progress"
for g in mlp dense noisy_topk_load cosine perturbed; do
    moestat realdata --dataset fashion-mnist --compare $g $LONG --out $OUT/fmnist_long20_$g &
done
wait
mkdir -p $OUT/fmnist_long
cat $OUT/fmnist_long20_{mlp,dense,noisy_topk_load,cosine,perturbed}/runs.jsonl > $OUT/fmnist_long/runs.jsonl
moestat realdata --dataset fashion-mnist --compare mlp,dense,noisy_topk_load,cosine,perturbed $LONG \
    --summarise-only --out $OUT/fmnist_long

# Digits: every gate and every thesis training method, 3 seeds, 30 epochs.
moestat realdata --dataset digits --compare all,thesis --experts 8 --k 2 --expert-hidden 32 \
    --batch-size 64 --epochs 30 --seeds 3 --threads 1 --no-progress --out $OUT/digits_compare

# One-epoch timing on the full 60,000 training images.
python records/realdata/speed.py --threads 1 --out $OUT/speed_1thread.json
python records/realdata/speed.py --threads 2 --out $OUT/speed_2threads.json
