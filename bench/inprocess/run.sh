#!/usr/bin/env bash
# In-process recovery vs cold (issue 23): the chaos soak (bench/chaos) with the same seed and
# fault schedule in --restart-mode=cold, in-process, and in-process with --preload=native
# (replacements are spare ddp-trains started ahead), fixed world (with the byte-identical
# check against one fault-free run, shared by both modes) and elastic; then a worker SIGKILL on
# one host under torchrun, ddprun cold and ddprun in-process (sigkill_one_host.py). Root only.
# Writes OUT_DIR/*.json, the soaks' logs and OUT_DIR/table.md (compare.py), and prints the table.
#
#   bench/inprocess/run.sh [BUILD_DIR] [OUT_DIR]
#
# INPROC_SEED (1), INPROC_INTERVAL (20:40 s of steady training between faults), INPROC_STEPS
# (300 steps per job: about 4 minutes of fault-free training here, so one job per mode spans the
# whole soak), INPROC_STEPS_PER_EPOCH (100), INPROC_KILLS (5, the one-host comparison),
# INPROC_WORLDS ("fixed elastic"), INPROC_MODES ("cold in-process in-process-preload"),
# INPROC_KINDS (chaos-soak --kinds: e.g. stop_agent,cut_link for lost nodes only; default all),
# INPROC_FAULTS (stop after this many faults per soak; default: the whole job).
set -euo pipefail
BUILD_DIR=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-/tmp/ddprun-inprocess-$(date +%s)}")
HERE=$(dirname "$(realpath "$0")")
if [ "$(id -u)" -ne 0 ]; then echo "bench/inprocess: skipped (needs root for network namespaces)"; exit 0; fi
mkdir -p "$OUT"

# The binaries copied aside: builds may go on while the soaks run.
PRIVATE="$OUT/install"
mkdir -p "$PRIVATE/bin" "$PRIVATE/lib"
cp "$BUILD_DIR"/bin/{ddprun,ddprun-rdzv,ddp-train,chaos-soak} "$PRIVATE/bin/"
cp -r "$BUILD_DIR/lib/ddprun" "$PRIVATE/lib/"  # ddprun's gRPC rendezvous plugin
export DDPRUN_BIN_DIR="$PRIVATE/bin"

SOAK=("$PRIVATE/bin/chaos-soak" --seed "${INPROC_SEED:-1}" --fault-interval "${INPROC_INTERVAL:-20:40}"
      --steps "${INPROC_STEPS:-300}" --steps-per-epoch "${INPROC_STEPS_PER_EPOCH:-100}"
      --segments 1 --seconds 3600)
[ -n "${INPROC_KINDS:-}" ] && SOAK+=(--kinds "$INPROC_KINDS")
[ -n "${INPROC_FAULTS:-}" ] && SOAK+=(--faults "$INPROC_FAULTS")
echo "load before: $(cat /proc/loadavg)" | tee "$OUT/load.txt"
for world in ${INPROC_WORLDS:-fixed elastic}; do
  for mode in ${INPROC_MODES:-cold in-process in-process-preload}; do
    case "$mode" in
      in-process-preload) restart=(--restart-mode in-process --preload native) ;;
      *) restart=(--restart-mode "$mode") ;;
    esac
    args=("${restart[@]}" --work-dir "$OUT/$world-$mode" --json "$OUT/$world-$mode.json")
    if [ "$world" = fixed ]; then
      args+=(--fixed)
      # One fault-free run for both modes: the first mode's, kept for the second.
      if [ -f "$OUT/reference.pt" ]; then args+=(--reference-model "$OUT/reference.pt");
      else args+=(--keep-reference "$OUT/reference.pt"); fi
    fi
    echo "== $world $mode: ${SOAK[*]} ${args[*]}"
    "${SOAK[@]}" "${args[@]}" > "$OUT/$world-$mode.log" 2>&1 || echo "   (exit $?: see $OUT/$world-$mode.log)"
    tail -n 20 "$OUT/$world-$mode.log"
    echo "load after $world $mode: $(cat /proc/loadavg)" | tee -a "$OUT/load.txt"
  done
done
python3 "$HERE/sigkill_one_host.py" --bin-dir "$PRIVATE/bin" --kills "${INPROC_KILLS:-5}" \
  --json "$OUT/one-host.json" | tee "$OUT/one-host.log" || echo "   (one-host comparison failed)"
echo "load after one host: $(cat /proc/loadavg)" | tee -a "$OUT/load.txt"
python3 "$HERE/compare.py" "$OUT" | tee "$OUT/table.md"
