#!/usr/bin/env bash
# The chaos soak (chaos_soak.cc); root only. CHAOS_FAULTS faults (default 200) or
# CHAOS_SECONDS seconds of injection, whichever comes first; CHAOS_FIXED=1 for the fixed-world
# variant with the bit-identical check; CHAOS_RESTART_MODE (cold or in-process), CHAOS_INTERVAL
# (MIN:MAX seconds of steady training between faults, default 2:5). The Markdown report is printed
# at the end. bench/inprocess/run.sh compares the two restart modes side by side.
set -euo pipefail
BUILD_DIR=${1:-build}
if [ "$(id -u)" -ne 0 ]; then echo "bench/chaos: skipped (needs root for network namespaces)"; exit 0; fi
ARGS=(--faults "${CHAOS_FAULTS:-200}" --seconds "${CHAOS_SECONDS:-7200}" --seed "${CHAOS_SEED:-1}"
      --steps "${CHAOS_STEPS:-400}" --restart-mode "${CHAOS_RESTART_MODE:-cold}"
      --fault-interval "${CHAOS_INTERVAL:-2:5}")
if [ "${CHAOS_FIXED:-0}" = 1 ]; then ARGS+=(--fixed); fi
"$BUILD_DIR/bin/chaos-soak" "${ARGS[@]}"
