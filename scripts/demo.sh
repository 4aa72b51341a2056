#!/usr/bin/env bash
# `make demo`: ddprun's main job on this machine. Two local workers of the bundled C++ trainer
# (ddp-train) train the classic MNIST network on Fashion-MNIST (Debian's dataset-fashion-mnist)
# for one epoch under `ddprun --standalone`, with checkpoints and per-epoch metrics, then plot
# the metrics. About a minute on 2 cores. Without ddp-train (-DDDPRUN_BUILD_WORKER=OFF) it runs
# a small Python DDP job instead (Debian's python3-torch, gloo).
set -euo pipefail
BUILD_DIR=${1:-build}
BIN="$BUILD_DIR/bin"
OUT=${DEMO_OUT:-demo-out}
DATA=${DEMO_DATA:-/usr/share/datasets/fashion-mnist}
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}   # the interpreter that has Debian's torch

run() { echo "+ $*"; "$@"; }

if [ -x "$BIN/ddp-train" ]; then
  rm -rf "$OUT" && mkdir -p "$OUT"
  run "$BIN/ddprun" --standalone --nproc-per-node=2 --max-restarts=2 --no-python \
      "$BIN/ddp-train" mnist --data "$DATA" --epochs "${DEMO_EPOCHS:-1}" \
      --checkpoint-dir "$OUT/checkpoints" --metrics-file "$OUT/metrics.jsonl"
  echo "metrics:     $OUT/metrics.jsonl"; cat "$OUT/metrics.jsonl"
  echo "checkpoints: $OUT/checkpoints"
  if "$PYTHON_EXEC" -c 'import matplotlib' 2>/dev/null; then
    run "$PYTHON_EXEC" scripts/plot_metrics.py -o "$OUT/curves.png" --label "2 processes" \
        "$OUT/metrics.jsonl"
  fi
else
  run "$BIN/ddprun" --standalone --nproc-per-node=2 examples/allreduce_demo.py --steps 50
fi
