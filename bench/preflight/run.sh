#!/usr/bin/env bash
# Issue 41, points 1 and 4: the preflight on namespaced hosts (root: network namespaces, tc).
# ddprun-rdzv on host 1 of 5; ddprun agents on hosts 2-5 (--nnodes=3: three members and a spare),
# one ddp-train mnist worker each. First the links are measured (a preflight with no limit: the
# median node's send rate); then host 4's link is limited with tc (a token bucket both ways) to a
# tenth of that. Three scenarios, RUNS (3) times each, medians:
#   clean         no limit, --preflight=off: the start without a preflight;
#   limited-off   host 4 limited, --preflight=off: the slow host trains with the others;
#   limited-on    host 4 limited, the default preflight: it must be named and kept out (set aside)
#                 and the spare must take its place.
# For each: seconds from the agents' start to the first training step, and the job's steps/s
# over its first STEPS_SECONDS (20) s of training.
#   bench/preflight/run.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-/tmp/ddprun-preflight-$(date +%s)}")
DATA=/usr/share/datasets/fashion-mnist
RUNS=${RUNS:-3}
STEPS_SECONDS=${STEPS_SECONDS:-20}
[ "$(id -u)" -eq 0 ] || { echo "bench/preflight: needs root (namespaces, tc)" >&2; exit 1; }
mkdir -p "$OUT"
# The hosts' names resolve nowhere: gloo takes eth0, the store the address --local-addr says.
export DDPRUN_RDZV_TOKEN=preflight-bench OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0
P=pfb$$
SW=$P-sw
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 2
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for h in 1 2 3 4 5; do
    for p in $(ip netns pids "$P-h$h" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  pids=()
}
cleanup() {
  stop_all
  for h in 1 2 3 4 5; do ip netns del "$P-h$h" 2>/dev/null || true; done
  ip netns del "$SW" 2>/dev/null || true
}
trap cleanup EXIT
secs() { date +%s.%N; }

# Five hosts on a bridge in a namespace of its own: 10.214.0.N, nothing leaves the machine.
ip netns add "$SW"
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
for h in 1 2 3 4 5; do
  ip netns add "$P-h$h"
  ip -n "$P-h$h" link set lo up
  ip -n "$P-h$h" link add eth0 type veth peer name p$h
  ip -n "$P-h$h" link set p$h netns "$SW"
  ip -n "$SW" link set p$h master br0
  ip -n "$SW" link set p$h up
  ip -n "$P-h$h" addr add 10.214.0.$h/24 dev eth0
  ip -n "$P-h$h" link set eth0 up
done
on() { local h=$1; shift; ip netns exec "$P-h$h" unshare --uts sh -c "hostname n$h; exec \"\$@\"" sh "$@"; }
limit() {  # HOST MBIT: a token bucket on both ends of the host's cable
  tc -n "$P-h$1" qdisc replace dev eth0 root tbf rate "${2}mbit" burst 64kb latency 50ms
  tc -n "$SW" qdisc replace dev p$1 root tbf rate "${2}mbit" burst 64kb latency 50ms
}
unlimit() { tc -n "$P-h$1" qdisc del dev eth0 root 2>/dev/null || true; tc -n "$SW" qdisc del dev p$1 root 2>/dev/null || true; }

start_daemon() {  # DIR
  on 1 "$BUILD/bin/ddprun-rdzv" --host 10.214.0.1 --port 0 > "$1/daemon.out" 2> "$1/daemon.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$1/daemon.out" 2>/dev/null && break; sleep 0.1; done
  EP=$(grep -o "listening on [0-9.:]*" "$1/daemon.out" | awk '{print $3}')
}
start_agents() {  # DIR [ddprun flags...]: hosts 2-5 at once
  local dir=$1; shift
  for h in 2 3 4 5; do
    on $h "$BUILD/bin/ddprun" --nnodes=3 --nproc-per-node=1 --rdzv-backend=c10d \
      --local-addr=10.214.0.$h \
      --rdzv-endpoint="$EP" --rdzv-id=preflight-bench "$@" --no-python "$BUILD/bin/ddp-train" \
      mnist --data "$DATA" --no-progress-bar --epochs 1000 --test-subset 1000 --batch-size 64 \
      > "$dir/h$h.out" 2> "$dir/h$h.err" &
    pids+=($!)
  done
}
step_now() {
  cat "$1"/h*.out 2>/dev/null | grep -oE 'samples/s[[:space:]]+step [0-9]+' |
    awk '{ if ($NF > m) m = $NF } END { print m + 0 }'
}
# One scenario: DIR LABEL [ddprun flags...]. Prints "first-step-seconds steps/s".
scenario() {
  local dir=$1; shift
  mkdir -p "$dir"
  start_daemon "$dir"
  local t0; t0=$(secs)
  start_agents "$dir" "$@"
  local first=""
  for _ in $(seq 1200); do
    if [ "$(step_now "$dir")" -gt 0 ]; then first=$(echo "$(secs) - $t0" | bc); break; fi
    sleep 0.05
  done
  local s0; s0=$(step_now "$dir"); local t1; t1=$(secs)
  sleep "$STEPS_SECONDS"
  local s1; s1=$(step_now "$dir"); local t2; t2=$(secs)
  printf '%s %.2f\n' "$(printf '%.2f' "${first:-0}")" "$(echo "($s1 - $s0) / ($t2 - $t1)" | bc -l)"
  stop_all
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "bench/preflight: $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"

# The links as the preflight sees them: the median node's send rate.
D="$OUT/measure"; mkdir -p "$D"; start_daemon "$D"
start_agents "$D" --preflight=on
for _ in $(seq 300); do grep -q "preflight took" "$D/daemon.log" && break; sleep 0.1; done
stop_all
MEDIAN=$(grep -o "send [0-9.]* Mbit/s ([0-9.]*x)" "$D/daemon.log" | awk '{print $2}' | median | cut -d. -f1)
TENTH=$(echo "$MEDIAN / 10" | bc)
echo "links: the median node sends $MEDIAN Mbit/s; host 4 limited to $TENTH Mbit/s both ways" | tee -a "$OUT/summary.txt"

declare -A FIRST RATE
for name in clean limited-off limited-on; do
  firsts=(); rates=()
  for r in $(seq "$RUNS"); do
    unlimit 4
    case $name in
      clean) res=$(scenario "$OUT/$name-$r" --preflight=off) ;;
      limited-off) limit 4 "$TENTH"; res=$(scenario "$OUT/$name-$r" --preflight=off) ;;
      limited-on) limit 4 "$TENTH"; res=$(scenario "$OUT/$name-$r") ;;
    esac
    firsts+=("${res% *}"); rates+=("${res#* }")
    echo "  $name run $r: first step after ${res% *} s, ${res#* } steps/s" | tee -a "$OUT/summary.txt"
  done
  FIRST[$name]=$(printf '%s\n' "${firsts[@]}" | median)
  RATE[$name]=$(printf '%s\n' "${rates[@]}" | median)
done
unlimit 4
kept=0
for r in $(seq "$RUNS"); do
  grep -q "kept out by the preflight" "$OUT/limited-on-$r/h4.err" && kept=$((kept + 1))
done
{
  echo "medians of $RUNS runs (3 members + 1 spare, ddp-train mnist, first step from the agents' start; steps/s over ${STEPS_SECONDS} s):"
  echo "  clean, --preflight=off:       first step ${FIRST[clean]} s, ${RATE[clean]} steps/s"
  echo "  host 4 at a tenth, off:       first step ${FIRST[limited-off]} s, ${RATE[limited-off]} steps/s"
  echo "  host 4 at a tenth, preflight: first step ${FIRST[limited-on]} s, ${RATE[limited-on]} steps/s; host 4 kept out in $kept of $RUNS runs"
  echo "  the preflight's cost: +$(printf '%.2f' "$(echo "${FIRST[limited-on]} - ${FIRST[clean]}" | bc)") s to the first step"
  echo "  one run's verdict on host 4: $(grep -h '(n4): ' "$OUT/limited-on-1/daemon.log" | head -1 | cut -d' ' -f3-)"
} | tee -a "$OUT/summary.txt"
echo "logs: $OUT"
