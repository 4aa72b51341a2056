#!/usr/bin/env bash
# Issue 41, point 2 on real processes (root: a cpu cgroup). Three scenarios, each 3 ddprun agents of
# one run against ddprun-rdzv on loopback, one ddp-train mnist worker each:
#   noise     both cores kept busy by 2 spinners for NOISE_SECONDS (300): ordinary noise, no
#             throttled rank; passes when the server names no node slow.
#   throttle  --evict-slow --restart-mode=in-process --preload=native and a 4th agent as the
#             spare; after THROTTLE_AFTER (60) s one member's worker moves into a cpu cgroup at 30 %
#             of a CPU (the worker only: a throttled agent would also be slow to heartbeat): seconds until the server names it, until round 2 forms with the
#             spare, and the job's steps/s before, throttled, and after the replacement.
#   baseline  the throttle scenario without the throttle (BASELINE=0 skips it): the job's steps/s
#             over the same windows, and that nobody is named.
#   bench/stragglers/run.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-/tmp/ddprun-stragglers-$(date +%s)}")
DATA=/usr/share/datasets/fashion-mnist
NOISE_SECONDS=${NOISE_SECONDS:-300}
THROTTLE_AFTER=${THROTTLE_AFTER:-60}
[ "$(id -u)" -eq 0 ] || { echo "bench/stragglers: needs root (cgroups)" >&2; exit 1; }
mkdir -p "$OUT"
export DDPRUN_RDZV_TOKEN=stragglers-bench OMP_NUM_THREADS=1
CORES=$(getconf _NPROCESSORS_ONLN)
pids=()
CG=""
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 3  # ddprun stops its workers
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  pkill -KILL -f -- "--rdzv-id=stragglers-bench" 2>/dev/null || true
  pids=()
  if [ -n "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT
secs() { date +%s.%N; }

start_daemon() {  # DIR
  "$BUILD/bin/ddprun-rdzv" --port 0 --http-port 0 > "$1/daemon.out" 2> "$1/daemon.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$1/daemon.out" 2>/dev/null && break; sleep 0.1; done
  EP=$(grep -o "listening on [0-9.:]*" "$1/daemon.out" | awk '{print $3}')
}
start_agent() {  # DIR NAME [ddprun flags...]; its pid in LAST_AGENT
  local dir=$1 name=$2; shift 2
  "$BUILD/bin/ddprun" --nnodes=3 --nproc-per-node=1 --rdzv-backend=c10d \
    --rdzv-endpoint="$EP" --rdzv-id=stragglers-bench "$@" --no-python "$BUILD/bin/ddp-train" \
    mnist --data "$DATA" --no-progress-bar --epochs 1000 --test-subset 1000 --batch-size 64 \
    > "$dir/$name.out" 2> "$dir/$name.err" &
  pids+=($!)
  LAST_AGENT=$!
}
# The job's global step now: the highest "step N" rank 0 printed (any agent's stdout).
step_now() {
  cat "$1"/*.out 2>/dev/null | grep -oE 'samples/s[[:space:]]+step [0-9]+' |
    awk '{ if ($NF > m) m = $NF } END { print m + 0 }'
}
# Samples "seconds step" every second into DIR/steps until seconds $2 (from T0).
sample_until() {
  while [ "$(echo "$(secs) - $T0 < $2" | bc)" = 1 ]; do
    echo "$(echo "$(secs) - $T0" | bc) $(step_now "$1")" >> "$1/steps"; sleep 1
  done
}
# Steps a second between seconds $2 and $3 of DIR/steps.
rate() { awk -v a="$2" -v b="$3" '$1>=a && $1<=b { if (!n++) { t0=$1; s0=$2 } t1=$1; s1=$2 }
  END { if (n > 1 && t1 > t0) printf "%.2f", (s1 - s0) / (t1 - t0); else printf "n/a" }' "$1/steps"; }
# Seconds from T0 of the daemon log's first line matching $2 ("[ddprun-rdzv HH:MM:SS.mmm] ...").
log_time() {
  local hms; hms=$(grep -m1 -- "$2" "$1/daemon.log" | sed -n 's/^\[ddprun-rdzv \([0-9:.]*\)\].*/\1/p')
  [ -n "$hms" ] || { echo "n/a"; return; }
  echo "$(date -d "$(date +%F) $hms" +%s.%N) - $T0" | bc
}

echo "bench/stragglers: $(date -u '+%Y-%m-%d %H:%M UTC'), $CORES cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"

# --- noise (NOISE_SECONDS=0 skips it) ---
if [ "$NOISE_SECONDS" -gt 0 ]; then
D="$OUT/noise"; mkdir -p "$D"; T0=$(secs)
start_daemon "$D"
for i in 1 2 3; do start_agent "$D" "agent$i"; done
for i in $(seq "$CORES"); do sh -c 'while :; do :; done' & pids+=($!); done
sample_until "$D" "$NOISE_SECONDS"
named=$(grep -c " is slow: " "$D/daemon.log" || true)
echo "noise: $NOISE_SECONDS s, 3 nodes + $CORES spinners on $CORES cores: nodes named slow: $named; job $(rate "$D" 20 "$NOISE_SECONDS") steps/s" | tee -a "$OUT/summary.txt"
cleanup
fi

# --- throttle, and the same run without it (BASELINE=0 skips that) ---
# throttle_run NAME PERCENT: 3 members and a spare with --evict-slow; after THROTTLE_AFTER s one
# member's worker moves into a cpu cgroup at PERCENT % of a CPU (0: it is left alone, the
# baseline). Sets t_throttle, t_named, t_replaced and t_end (seconds from T0) for D=$OUT/NAME.
throttle_run() {
  local name=$1 percent=$2
  D="$OUT/$name"; mkdir -p "$D"; T0=$(secs)
  if [ "$percent" -gt 0 ]; then
    if [ -d /sys/fs/cgroup/cpu ]; then CG=/sys/fs/cgroup/cpu/ddprun-stragglers-$$; else CG=/sys/fs/cgroup/ddprun-stragglers-$$; fi
    mkdir -p "$CG"
    if [ -f "$CG/cpu.cfs_quota_us" ]; then echo 100000 > "$CG/cpu.cfs_period_us"; echo $((percent * 1000)) > "$CG/cpu.cfs_quota_us"
    else echo "$((percent * 1000)) 100000" > "$CG/cpu.max"; fi
  fi
  start_daemon "$D"
  local flags=(--evict-slow --restart-mode=in-process --preload=native)
  for i in 1 2 3; do start_agent "$D" "agent$i" "${flags[@]}"; done
  local slow=$LAST_AGENT
  for _ in $(seq 600); do grep -q "round 1 formed" "$D/daemon.log" && break; sleep 0.1; done
  start_agent "$D" spare "${flags[@]}"
  sample_until "$D" "$THROTTLE_AFTER"
  t_throttle=$(echo "$(secs) - $T0" | bc)
  if [ "$percent" -gt 0 ]; then
    # Its worker: the agent's child that leads a process group of its own (the agent's helpers
    # stay in its group); its threads follow it (cgroup.procs).
    for p in $(pgrep -P "$slow" || true); do
      if [ "$(ps -o pgid= -p "$p" | tr -d ' ')" = "$p" ]; then
        echo "$p" > "$CG/cgroup.procs"
        echo "$(ps -o pid=,args= -p "$p")" >> "$D/throttled"
      fi
    done
    for _ in $(seq 120); do grep -q "round 2 formed" "$D/daemon.log" && break; sample_until "$D" "$(echo "$(secs) - $T0 + 1" | bc)"; done
    t_named=$(log_time "$D" " is slow: ")
    t_replaced=$(log_time "$D" "round 2 formed")
  else
    # No replacement to wait for: the windows of the throttled run, at the same offsets.
    t_named=n/a
    t_replaced=$(echo "$t_throttle + $REPLACED_AFTER" | bc)
    sample_until "$D" "$t_replaced"
  fi
  t_end=$(echo "$(secs) - $T0 + 40" | bc)
  sample_until "$D" "$t_end"
}

throttle_run throttle 30
if [ "$t_named" = n/a ] || [ "$t_replaced" = n/a ]; then
  echo "throttle: the throttled node was not named and replaced within 120 s (moved: $(cat "$D/throttled" 2>/dev/null || echo nothing); logs: $D)" | tee -a "$OUT/summary.txt"
  exit 1
fi
REPLACED_AFTER=$(echo "$t_replaced - $t_throttle" | bc)
{
  echo "throttle: one member's worker at 30 % of a CPU from $(printf %.1f "$t_throttle") s: named slow $(printf %.1f "$(echo "$t_named - $t_throttle" | bc)") s later, replaced by the spare (round 2 formed) $(printf %.1f "$REPLACED_AFTER") s later"
  echo "  $(grep -m1 ' is slow: ' "$D/daemon.log" | cut -d' ' -f3-)"
  echo "  job steps/s: before $(rate "$D" 20 "$t_throttle"), throttled $(rate "$D" "$t_throttle" "$t_replaced"), after the replacement $(rate "$D" "$(echo "$t_replaced + 5" | bc)" "$t_end")"
} | tee -a "$OUT/summary.txt"
cleanup
if [ "${BASELINE:-1}" != 0 ]; then
  throttle_run baseline 0
  named=$(grep -c " is slow: " "$D/daemon.log" || true)
  echo "baseline, the same run without the throttle: nodes named slow: $named; job steps/s in the same windows: $(rate "$D" 20 "$t_throttle"), $(rate "$D" "$t_throttle" "$t_replaced"), $(rate "$D" "$(echo "$t_replaced + 5" | bc)" "$t_end")" | tee -a "$OUT/summary.txt"
fi
echo "logs: $OUT"
