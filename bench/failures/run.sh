#!/usr/bin/env bash
# The crash-loop breaker against torchrun (bench/failures/crash_loop_bench.py); `make bench` runs
# it. TORCHRUN: the torchrun to compare with (../shared/tools/torchrun113 in this project).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${1:-build}
/usr/bin/python3 "$HERE/crash_loop_bench.py" --build "$BUILD_DIR" \
    --torchrun "${TORCHRUN:-$HERE/../../tests/integration/scripts/torchrun_py311.py}" \
    --runs "${CRASH_LOOP_BENCH_RUNS:-3}"
