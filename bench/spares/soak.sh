#!/usr/bin/env bash
# The false-detection soak of issue 40 point 2 (bench/spares/netem_soak.cc); root only.
#   bench/spares/soak.sh [BUILD_DIR] [--duration SECONDS] [netem-soak flags...]
# Default: 30 minutes, 3 member agents, 1 spare + ddprun-rdzv on namespaced hosts, every host's
# link at `loss 10% delay 50ms 50ms` (tc netem, or the user-space relay on a kernel without
# sch_netem), one spinner per core, then a frozen member host that must be found. SOAK_RDZV_CONF
# (default empty: ddprun's defaults, liveness=auto, under which a spare lets the detector judge)
# is the agents' --rdzv-conf; SOAK_RDZV_CONF=liveness=off soaks the lease path.
# The Markdown report is printed and appended to SOAK_REPORT if set.
set -euo pipefail
BUILD_DIR=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then BUILD_DIR=$1; shift; fi
DURATION=1800
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --duration=*) DURATION=${1#--duration=}; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then echo "bench/spares/soak.sh: needs root (network namespaces)" >&2; exit 1; fi
RDZV_CONF=${SOAK_RDZV_CONF-}
if [ -n "${SOAK_REPORT:-}" ]; then ARGS+=(--report "$SOAK_REPORT"); fi
if [ -n "$RDZV_CONF" ]; then ARGS+=(--rdzv-conf "$RDZV_CONF"); fi
exec "$BUILD_DIR/bin/netem-soak" --seconds "$DURATION" "${ARGS[@]}"
