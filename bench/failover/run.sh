#!/usr/bin/env bash
# No single point of failure (issue 24): (1) the agent hosting the embedded rendezvous killed vs
# another agent killed (failover_bench.py, medians of FAILOVER_RUNS, default 5, and torchrun's
# c10d as the reference when TORCHRUN names it); (2) partitions healed on namespaced hosts (root
# only): the multihost test's 10 s cut against ddprun-rdzv and etcd, FAILOVER_HEAL_RUNS times
# (default 5), median seconds from the heal until the world of 3 runs again; (3) a host cut off
# from a job on the embedded server (no ddprun-rdzv, no etcd): the hosting host vs another,
# FAILOVER_HEAL_RUNS times, median seconds until the majority side runs a world of two, and from
# the heal until the world of three runs again.
#
#   bench/failover/run.sh [BUILD_DIR]
set -euo pipefail
BUILD_DIR=$(realpath "${1:-build}")
HERE=$(dirname "$(realpath "$0")")
RUNS=${FAILOVER_RUNS:-5}
HEAL_RUNS=${FAILOVER_HEAL_RUNS:-5}
args=(--ddprun "$BUILD_DIR/bin/ddprun" --runs "$RUNS")
[ -n "${TORCHRUN:-}" ] && args+=(--torchrun "$TORCHRUN")
/usr/bin/python3 "$HERE/failover_bench.py" "${args[@]}"
if [ "$(id -u)" != 0 ]; then
  echo; echo "partition heal: skipped (network namespaces need root)"; exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$BUILD_DIR/tests/multihost_integration_test" --gtest_filter='*TenSecondCutHeals*' \
    --gtest_repeat="$HEAL_RUNS" > "$out" 2>&1 || { cat "$out"; exit 1; }
echo
echo "### Partition heal: one host of three cut off for 10 s (lease 3 s), $HEAL_RUNS runs"
echo
echo "| backend | fenced after (median) | heal -> world of 3 again (median, max) |"
echo "|---|---|---|"
for backend in ddprun-rdzv etcd; do
  grep "^$backend: a 10 s cut" "$out" | /usr/bin/python3 -c '
import re, statistics, sys
b = sys.argv[1]
f, h = [], []
for line in sys.stdin:
    m = re.search(r"fenced after ([\d.]+) s; heal -> world of 3 again: ([\d.]+) s", line)
    if m:
        f.append(float(m.group(1))); h.append(float(m.group(2)))
print(f"| {b} | {statistics.median(f):.2f} s | {statistics.median(h):.2f} s, {max(h):.2f} s |")
' "$backend"
done

"$BUILD_DIR/tests/multihost_integration_test" \
    --gtest_filter='*TheHostingHostCutOffFailsOver*:*ANodeCutOffFromTheHostingAgent*' \
    --gtest_repeat="$HEAL_RUNS" > "$out" 2>&1 || { cat "$out"; exit 1; }
echo
echo "### A host cut off from an embedded-server job (1:3, lease 3 s), $HEAL_RUNS runs each"
echo
echo "| host cut off | the other two a world of 2 (median) | heal -> world of 3 again (median, max) |"
echo "|---|---|---|"
for host in 2 4; do
  /usr/bin/python3 -c '
import re, statistics, sys
host = sys.argv[1]
text = open(sys.argv[2]).read()
two = [float(x) for x in re.findall(rf"host {host} cut off: the others a world of two again after ([\d.]+) s", text)]
heal = [float(x) for x in re.findall(rf"host {host} cut off, 1:3: heal -> world of 3 again after ([\d.]+) s", text)]
name = "the hosting host (2)" if host == "2" else "another host (4)"
print(f"| {name} | {statistics.median(two):.2f} s | {statistics.median(heal):.2f} s, {max(heal):.2f} s |")
' "$host" "$out"
done
