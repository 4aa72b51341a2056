#!/usr/bin/env bash
# Hang detection latency, ddprun vs torchrun (bench/hang/hang_bench.py); `make bench` runs it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${1:-build}
/usr/bin/python3 "$HERE/hang_bench.py" --build "$BUILD_DIR" \
    --torchrun "${TORCHRUN:-$HERE/../../tests/integration/scripts/torchrun_py311.py}" --runs "${HANG_BENCH_RUNS:-5}"
