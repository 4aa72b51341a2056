#!/usr/bin/env bash
# `make demo`: ddprun's main job on this machine, in three layouts. The bundled C++ trainer
# (ddp-train) trains the classic MNIST network on Fashion-MNIST (Debian's dataset-fashion-mnist)
# under `ddprun --standalone`, with checkpoints and per-epoch metrics:
#
#   1 process  x 2 threads   (one GPU, all the node's CPUs)
#   2 processes x 1 thread   (two GPUs, cpus-per-task 1)
#   4 processes x 1 thread   (four GPUs, fewer CPUs each than there are workers: oversubscribed)
#
# Each layout trains DEMO_EPOCHS epochs on the first DEMO_TRAIN_SUBSET training images (the
# same images and the same per-process batch for every layout, so a layout with more processes
# takes fewer, larger global steps), evaluating on DEMO_TEST_SUBSET test images after each
# epoch. One PNG (demo-out/curves.png) then shows test loss and accuracy against epochs for the
# three layouts, and their samples/s. About 3 minutes of training on 2 cores.
#
# Without ddp-train (-DDDPRUN_BUILD_WORKER=OFF) it runs a small Python DDP job instead (Debian's
# python3-torch, gloo).
set -euo pipefail
BUILD_DIR=${1:-build}
BIN="$BUILD_DIR/bin"
OUT=${DEMO_OUT:-demo-out}
DATA=${DEMO_DATA:-/usr/share/datasets/fashion-mnist}
EPOCHS=${DEMO_EPOCHS:-5}
TRAIN_SUBSET=${DEMO_TRAIN_SUBSET:-10000}
TEST_SUBSET=${DEMO_TEST_SUBSET:-2000}
# "procs:threads" per layout; DEMO_LAYOUTS="2:1" runs one.
LAYOUTS=${DEMO_LAYOUTS:-"1:2 2:1 4:1"}
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}   # the interpreter that has Debian's torch

run() { echo "+ $*"; "$@"; }

if [ ! -x "$BIN/ddp-train" ]; then
  run "$BIN/ddprun" --standalone --nproc-per-node=2 examples/allreduce_demo.py --steps 50
  exit 0
fi

rm -rf "$OUT" && mkdir -p "$OUT"
plot_args=()
for layout in $LAYOUTS; do
  procs=${layout%%:*}
  threads=${layout##*:}
  name="${procs}proc-${threads}thread"
  label="$procs process$([ "$procs" = 1 ] || echo es) x $threads thread$([ "$threads" = 1 ] || echo s)"
  echo "== $label"
  start=$(date +%s.%N)
  run "$BIN/ddprun" --standalone --nproc-per-node="$procs" --max-restarts=2 --no-python \
      "$BIN/ddp-train" mnist --data "$DATA" --epochs "$EPOCHS" --threads "$threads" \
      --train-subset "$TRAIN_SUBSET" --test-subset "$TEST_SUBSET" --log-interval 50 \
      --checkpoint-dir "$OUT/$name/checkpoints" --metrics-file "$OUT/$name/metrics.jsonl"
  end=$(date +%s.%N)
  echo "   $label: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
  plot_args+=(--label "$label" "$OUT/$name/metrics.jsonl")
done

for layout in $LAYOUTS; do
  name="${layout%%:*}proc-${layout##*:}thread"
  echo "metrics ($name): $OUT/$name/metrics.jsonl"
  tail -n 1 "$OUT/$name/metrics.jsonl"
done
if "$PYTHON_EXEC" -c 'import matplotlib' 2>/dev/null; then
  run "$PYTHON_EXEC" scripts/plot_metrics.py -o "$OUT/curves.png" \
      --title "ddp-train on Fashion-MNIST under ddprun: $EPOCHS epochs of $TRAIN_SUBSET images" \
      "${plot_args[@]}"
else
  echo "python3-matplotlib is missing: no plot (scripts/install-deps.sh --demo installs it)"
fi
