#!/usr/bin/env bash
# `make demo`: ddprun's main job on this machine — two local workers under ddprun --standalone.
# Uses the bundled C++ trainer (ddp-train) on Fashion-MNIST when it is built, otherwise a small
# Python DDP job (gloo all-reduce) with Debian's python3-torch.
set -euo pipefail
BUILD_DIR=${1:-build}
BIN="$BUILD_DIR/bin"
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}   # the interpreter that has Debian's torch
echo "+ ddprun --standalone --nproc-per-node=2 examples/allreduce_demo.py --steps 50"
"$BIN/ddprun" --standalone --nproc-per-node=2 examples/allreduce_demo.py --steps 50
