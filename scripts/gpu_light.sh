#!/usr/bin/env bash
# The light model on a GPU (issue 49), distilled from the shipped default, in one call of the device
# tool (under 10 minutes): train, then the checkpoint and its log come back under $OUT.
#
#   OUT=out scripts/gpu_light.sh TRAIN.tsv DEV.tsv
#
# TRAIN: the speech-like mix (gpu_data/mix_train.tsv, 7.0 M words; carry it xz-compressed, 8.6 MB);
# DEV: dev2012's first 20,000 words. MINUTES (default 7) is the training budget.
set -euo pipefail
TRAIN=$1 DEV=$2 OUT=${OUT:-out} MINUTES=${MINUTES:-7}
[[ $TRAIN == *.xz ]] && { xz -dkf "$TRAIN"; TRAIN=${TRAIN%.xz}; }
python3 -m streampunct.training.light_train --train "$TRAIN" --dev "$DEV" --out "$OUT/light" \
    --minutes "$MINUTES" --device cuda --batch 256 --lr 3e-3 --eval-every 300 --threads 8 \
    --teacher streampunct/checkpoints/default --distill 0.5
rm -f "$OUT/light/last.pt"  # the optimiser state stays behind
