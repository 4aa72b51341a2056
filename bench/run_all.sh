#!/usr/bin/env bash
# `make bench`: every benchmark, each printing a markdown section; results are copied into
# bench/RESULTS.md by hand with the figures of the run.
set -euo pipefail
BUILD_DIR=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TORCHRUN=${TORCHRUN:-$HERE/../tests/integration/scripts/torchrun_py311.py}
/usr/bin/python3 "$HERE/launcher_bench.py" --ddprun "$BUILD_DIR/bin/ddprun" --torchrun "$TORCHRUN"
/usr/bin/python3 "$HERE/multinode_bench.py" --ddprun "$BUILD_DIR/bin/ddprun" \
    --rdzv "$BUILD_DIR/bin/ddprun-rdzv" --torchrun "$TORCHRUN"
if [ -f "$HERE/etcd/etcd_bench.py" ]; then
  /usr/bin/python3 "$HERE/etcd/etcd_bench.py" --build "$BUILD_DIR"
fi
for extra in "$HERE"/*/run.sh; do
  [ -x "$extra" ] && "$extra" "$BUILD_DIR"
done
