#!/usr/bin/env bash
# Live streams of the default model one GPU sustains (issue 64), in one call of the device tool
# (under 8 minutes): benchmarks.stream_capacity on the device, its result file (stream_capacity_cuda.json)
# and log under $OUT; copy the file into benchmarks/results/ and commit it.
#
#   OUT=out scripts/gpu_capacity.sh TEXT        # TEXT: IWSLT test2011 (word<TAB>LABEL), carried
#   DEVICE=cpu RUN_SECONDS=2 OUT=/tmp/out scripts/gpu_capacity.sh TEXT   # the same run on a CPU, small
#
# Inputs: the code and the default checkpoint (streampunct/checkpoints/default), and TEXT (96 KB).
set -euo pipefail
TEXT=$1 OUT=${OUT:-out} DEVICE=${DEVICE:-cuda} RUN_SECONDS=${RUN_SECONDS:-10}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>/dev/null || true
PYTHONUNBUFFERED=1 timeout 450 python3 -m benchmarks.stream_capacity --data "$TEXT" --device "$DEVICE" \
    --seconds "$RUN_SECONDS" --out "$OUT" 2>&1 | tee "$OUT/stream_capacity.log"
