#!/usr/bin/env bash
# Fencing and rejoin latency on namespaced hosts (bench/multihost/fence_bench.py); root only.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ]; then echo "bench/multihost: skipped (needs root for network namespaces)"; exit 0; fi
/usr/bin/python3 "$HERE/fence_bench.py" --build "${1:-build}" --runs "${FENCE_BENCH_RUNS:-5}"
