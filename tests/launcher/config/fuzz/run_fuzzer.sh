#!/usr/bin/env bash
# Builds and runs the Slurm hostlist fuzzer with clang's libFuzzer (needs clang++-14 and
# libclang-rt-14-dev). Usage: tests/launcher/config/fuzz/run_fuzzer.sh [seconds] [build dir]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${2:-$root/build-fuzz}
mkdir -p "$out/hostlist-corpus"
printf 'gpu-a[01-04,07],gpu-b[1-2]' >"$out/hostlist-corpus/seed1"
printf 'r[1-2]n[001-003]-ib,login' >"$out/hostlist-corpus/seed2"
clang++-14 -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -I"$root" \
  "$root/tests/launcher/config/fuzz/hostlist_fuzzer.cc" "$root/launcher/config/hostlist.cc" \
  $(pkg-config --libs absl_status absl_statusor absl_strings) \
  -o "$out/hostlist_fuzzer"
"$out/hostlist_fuzzer" -max_total_time="$seconds" -max_len=256 "$out/hostlist-corpus"
