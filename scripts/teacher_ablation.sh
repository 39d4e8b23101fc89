#!/usr/bin/env bash
# FFA's two-stream teacher and its ablation in the style of FFA's Table 3 (docs/training.md,
# "The teacher"): every variant continues the same checkpoint on the same batches for the same
# steps, then all are scored on the same dev words against the plain model continued alike
# (benchmarks/compare_models.py: paired bootstrap intervals).
#
#   scripts/teacher_ablation.sh TRAIN DEV SCORE OUT
#
# TRAIN and DEV: word<TAB>LABEL files (training, and the run's own selection); SCORE: the dev words
# the variants are compared on (not DEV); OUT: a folder for the runs, their logs and the comparison
# (written to benchmarks/results/compare_models.json). INIT (default: the shipped default) is where every
# variant starts; STEPS, BATCH, WINDOW, LR, DEVICE, THREADS, and MINUTES set the run, so that
# the same script runs on the 2-core CPU at the size it allows and on a GPU at the paper's.
set -euo pipefail
TRAIN=$1 DEV=$2 SCORE=$3 OUT=$4
INIT=${INIT:-streampunct/checkpoints/default} STEPS=${STEPS:-400} BATCH=${BATCH:-8} WINDOW=${WINDOW:-96}
LR=${LR:-5e-5} DEVICE=${DEVICE:-cpu} THREADS=${THREADS:-0} MINUTES=${MINUTES:-0}
MODES=${MODES:-"2 offline"}
mkdir -p "$OUT"

# name, then the flags that make it (FFA's Table 3 from the top, then its Table 1's "w/o MSA")
VARIANTS=(
  "plain|"
  "ffa|--interaction --masked-stream --stream-fusion --rdrop 1.0"
  "no_interaction|--no-interaction --masked-stream --stream-fusion --rdrop 1.0"
  "no_interaction_fusion|--no-interaction --masked-stream --no-stream-fusion --rdrop 1.0"
  "no_interaction_fusion_rdrop|--no-interaction --masked-stream --no-stream-fusion"
  "no_masked_stream|--interaction --rdrop 1.0"
)
runs=()
for v in "${VARIANTS[@]}"; do
  name=${v%%|*} flags=${v#*|}
  # shellcheck disable=SC2086  # the flags are words
  python3 -m streampunct train --init "$INIT" --train "$TRAIN" --dev "$DEV" --out "$OUT/$name" \
      --batch "$BATCH" --window "$WINDOW" --lr "$LR" --warmup 30 --max-steps "$STEPS" \
      --max-minutes "$MINUTES" --eval-every "$STEPS" --dev-words 5000 --seed 5 --device "$DEVICE" \
      --threads "$THREADS" $flags > "$OUT/$name.log" 2>&1 || { tail -n 20 "$OUT/$name.log"; exit 1; }
  echo "$name: $(tr '\r' '\n' < "$OUT/$name.log" | grep '"step"' | tail -n 1)"
  runs+=("$OUT/$name/best")
done
# shellcheck disable=SC2086  # the modes are words
python3 -m benchmarks.compare_models --data "$SCORE" --models "${runs[@]}" --modes $MODES --device "$DEVICE"

