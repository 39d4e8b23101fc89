#!/usr/bin/env bash
# The light model's numbers (issue 49), from a trained run to every row the model table reads:
#
#   scripts/light_results.sh RUN DIR
#
# RUN: a python -m streampunct.training.light_train run (its best/); DIR: where the checkpoint is put and
# calibrated, named light (e.g. /tmp/ckpt/light): accuracy_light.json, stream_latency_light.json and
# stream_capacity_light.json are named after it. Offsets are tuned on dev2012's first 20,000 words
# (the words the run selected its checkpoint on); test2011 and test2011asr are scored once. The
# default model's capacity is measured again beside it, on the same machine, the same hour.
set -euo pipefail
RUN=$1 DIR=$2
DATA=${DATA:-../shared/data/iwslt}
mkdir -p "$DIR" && cp "$RUN"/best/* "$DIR"/
python3 -m streampunct calibrate --model "$DIR" --dev "$DATA/dev2012" --words 20000 --device cpu
python3 -m benchmarks.accuracy --data "$DATA" --model "$DIR"
python3 -m benchmarks.stream_latency --data "$DATA/test2011" --model "$DIR" --threads 1
python3 -m benchmarks.stream_capacity --data "$DATA/test2011" --model "$DIR" --seconds 10
python3 -m benchmarks.stream_capacity --data "$DATA/test2011" --seconds 10
