#!/usr/bin/env bash
# Builds the unit tests with each named sanitizer preset (CMakePresets.json: asan = Address +
# UndefinedBehavior, tsan = Thread) and runs them. Exit non-zero on the first finding: each one
# is a real bug (or, for uninstrumented system libraries only, a suppression in
# scripts/sanitizers/ that says why).   Usage: scripts/sanitize.sh [asan] [tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
[ $# -gt 0 ] || set -- asan tsan
for preset in "$@"; do
  case "$preset" in asan|tsan) ;; *) echo "sanitize: unknown preset '$preset' (asan, tsan)" >&2; exit 2 ;; esac
  start=$(date +%s)
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
  echo "sanitize: $preset passed in $(( $(date +%s) - start )) s"
done
