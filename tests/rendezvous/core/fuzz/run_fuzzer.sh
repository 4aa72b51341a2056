#!/usr/bin/env bash
# Builds and runs the rendezvous state-machine fuzzer with clang's libFuzzer (needs clang++-14
# and libclang-rt-14-dev). Usage: tests/rendezvous/core/fuzz/run_fuzzer.sh [seconds] [build dir]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${2:-$root/build-fuzz}
mkdir -p "$out/corpus"
clang++-14 -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -I"$root" \
  "$root/tests/rendezvous/core/fuzz/server_state_fuzzer.cc" \
  "$root/rendezvous/core/run_state.cc" "$root/rendezvous/core/server_state.cc" \
  "$root/rendezvous/core/rank_assignment.cc" "$root/common/clock.cc" \
  $(pkg-config --libs absl_status absl_statusor absl_strings) \
  -o "$out/server_state_fuzzer"
"$out/server_state_fuzzer" -max_total_time="$seconds" -max_len=4096 "$out/corpus"
