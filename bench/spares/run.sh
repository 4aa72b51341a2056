#!/usr/bin/env bash
# Issue 40, point 3: what a lost node costs with a spare ready, without one, and under torchrun
# 2.11 with the same extra node; then the whole spare test matrix (spare_integration_test, every
# server and fault, both restart modes). Root only (network namespaces).
#
#   bench/spares/run.sh [BUILD_DIR] [OUT_DIR]
#
# SPARES_FAULTS (10 per job), SPARES_MODES (in-process,cold), SPARES_KINDS (kill,freeze,cut),
# SPARES_VARIANTS (spare,no-spare), SPARES_RDZV_CONF (more ddprun --rdzv-conf; default none:
# ddprun's liveness=auto, whose UDP detector finds a frozen or cut-off member while a spare stands
# ready and leaves it to the 2 s lease without one; liveness=off: the lease always),
# SPARES_TORCHRUN (1: the torchrun 2.11 side, 0: not),
# SPARES_TORCHRUN_WORKER (the ddp-train torchrun runs, built against torch 2.11; default
# build-torch2/bin/ddp-train beside BUILD_DIR, which `make torch2-build` makes),
# SPARES_TORCHRUN_SHARED_STORE (1: torch 2.11's default shared store, with which a late extra node
# never joins; default 0: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1),
# SPARES_SERVER (rdzv: ddprun-rdzv, the default; built-in; etcd: a one-member etcd on host 1),
# SPARES_MATRIX (1: also the test matrix). Writes OUT_DIR/bench.log and matrix.log.
set -euo pipefail
BUILD_DIR=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-/tmp/ddprun-spares-$(date +%s)}")
if [ "$(id -u)" -ne 0 ]; then echo "bench/spares: needs root (network namespaces)" >&2; exit 1; fi
mkdir -p "$OUT"
TORCHRUN=""
WORKER=""
if [ "${SPARES_TORCHRUN:-1}" = 1 ]; then
  TORCHRUN="${DDPRUN_TORCH2_VENV:-$HOME/.cache/ddprun/venv-torch-2.11.0}/bin/torchrun"
  [ -x "$TORCHRUN" ] || { echo "bench/spares: $TORCHRUN missing (scripts/install-torch2.sh)" >&2; exit 1; }
  # ddp-train of LibTorch 1.13 cannot join torch 2.11's store: the torchrun rows need a torch 2.11 one.
  WORKER=$(realpath -m "${SPARES_TORCHRUN_WORKER:-$(dirname "$BUILD_DIR")/build-torch2/bin/ddp-train}")
  [ -x "$WORKER" ] || { echo "bench/spares: SPARES_TORCHRUN_WORKER: $WORKER missing (make torch2-build; SPARES_TORCHRUN=0 skips torchrun)" >&2; exit 1; }
  # torch 2.11's shared TCPStore (its default) keeps each agent's MASTER_ADDR from the agent's
  # first round: a node that joins later (the extra one) waits for a key rank 0 never writes and
  # the re-rendezvous dies after 60 s. SPARES_TORCHRUN_SHARED_STORE=1 measures that default.
  [ "${SPARES_TORCHRUN_SHARED_STORE:-0}" = 1 ] || export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
fi
# The binaries copied aside: builds may go on while the bench runs.
PRIVATE="$OUT/install"
mkdir -p "$PRIVATE/bin" "$PRIVATE/lib"
cp "$BUILD_DIR"/bin/{ddprun,ddprun-rdzv,ddp-train,spares-bench} "$PRIVATE/bin/"
cp -r "$BUILD_DIR/lib/ddprun" "$PRIVATE/lib/"  # ddprun's gRPC rendezvous plugin
if [ -n "$WORKER" ]; then  # its RUNPATH names the venv's torch/lib: it runs from anywhere
  mkdir -p "$PRIVATE/torch2" && cp "$WORKER" "$PRIVATE/torch2/ddp-train"
  WORKER="$PRIVATE/torch2/ddp-train"
fi
export DDPRUN_BIN_DIR="$PRIVATE/bin"
echo "bench/spares: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/bench.log"
"$PRIVATE/bin/spares-bench" --faults "${SPARES_FAULTS:-10}" --modes "${SPARES_MODES:-in-process,cold}" \
  --kinds "${SPARES_KINDS:-kill,freeze,cut}" --variants "${SPARES_VARIANTS:-spare,no-spare}" \
  --rdzv-conf "${SPARES_RDZV_CONF-}" --torchrun "$TORCHRUN" --torchrun-worker "$WORKER" \
  --server "${SPARES_SERVER:-rdzv}" \
  --work-dir "$OUT/work" \
  2>&1 | tee -a "$OUT/bench.log"
if [ "${SPARES_MATRIX:-1}" = 1 ]; then
  "$BUILD_DIR/tests/spare_integration_test" 2>&1 | tee "$OUT/matrix.log"
fi
