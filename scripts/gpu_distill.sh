#!/usr/bin/env bash
# Distil the shipped base model (MPNet-base, conversation stage 2) into the default (MiniLM-L6) on
# a speech-like mix, on one GPU, in one call of the device tool (docs/training.md, stage 8).
#
#   scripts/gpu_distill.sh DATA OUT
#
# DATA holds mix_train.tsv.xz and mix_dev.tsv.xz (made as docs/training.md says); OUT receives the
# best checkpoint (its weights cut into 15 MB parts: the device tool brings back files of at most
# 16 MiB), its training.json and the run's history. Both checkpoints must be whole under
# streampunct/checkpoints/ when it starts. MINUTES (default 6) bounds the training steps; DEVICE
# (default cuda) and STEPS (default 100000) exist so that the same script is first run end to end
# on a CPU with a few steps.
set -euo pipefail
DATA=$1 OUT=$2
MINUTES=${MINUTES:-6} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-100000} WORKERS=${WORKERS:-6}
BATCH=${BATCH:-128} EVAL_EVERY=${EVAL_EVERY:-400}
RUN=$(mktemp -d)
xz -dc "$DATA/mix_train.tsv.xz" > "$RUN/mix_train.tsv"
xz -dc "$DATA/mix_dev.tsv.xz" > "$RUN/mix_dev.tsv"
(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv) || true
python3 -m streampunct train --init streampunct/checkpoints/default --teacher streampunct/checkpoints/base \
    --distill 0.7 --train "$RUN/mix_train.tsv" --dev "$RUN/mix_dev.tsv" --out "$RUN/run" \
    --batch "$BATCH" --lr 1e-4 --warmup 300 --max-steps "$STEPS" --max-minutes "$MINUTES" \
    --eval-every "$EVAL_EVERY" --dev-words 20000 --window-share 0.3 --workers "$WORKERS" --seed 9 \
    --device "$DEVICE" 2>&1 | tr '\r' '\n' | grep -v '%|' || true
BEST="$RUN/run/best"
test -f "$BEST/model.safetensors"
split -b 15M -d "$BEST/model.safetensors" "$OUT/model.safetensors.part"
cp "$BEST/config.json" "$BEST/training.json" "$OUT/"
cp "$RUN/run/history.jsonl" "$OUT/history.jsonl"
sha256sum "$BEST/model.safetensors" | tee "$OUT/sha256.txt"
