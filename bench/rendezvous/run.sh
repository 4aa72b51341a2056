#!/usr/bin/env bash
# Rendezvous load benchmark: 10,000 simulated agents against ddprun-rdzv, plus small runs for
# failure-to-restart latency. Usage: bench/rendezvous/run.sh [build dir]
set -euo pipefail
build=${1:-build}
for n in 8 32 1000; do
  "$build/bin/rdzv-load" --agents "$n" --channels "$(( n < 16 ? n : 16 ))" --heartbeat-seconds 0
done
"$build/bin/rdzv-load" --agents 10000 --channels 16 --heartbeat-seconds 10 --keep-alive 1
