#!/usr/bin/env bash
# ddp-train vs the Python DDP reference, one epoch of Fashion-MNIST with 2 processes each.
#   bench/mnist/run.sh [BUILD_DIR] [--repeat N] [--write-results bench/RESULTS.md]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${1:-build}
shift || true
exec /usr/bin/python3 "$HERE/mnist_bench.py" --build-dir "$BUILD_DIR" "$@"
