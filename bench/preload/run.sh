#!/usr/bin/env bash
# `make bench` part: --preload=torch against ddprun without it and torchrun (markdown section).
set -euo pipefail
BUILD_DIR=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 "$HERE/preload_bench.py" --ddprun "$BUILD_DIR/bin/ddprun" --runs "${PRELOAD_RUNS:-5}"
