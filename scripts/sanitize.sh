#!/usr/bin/env bash
# Builds the unit tests with each named sanitizer preset (CMakePresets.json: asan = Address +
# UndefinedBehavior, tsan = Thread) and runs them. Exit non-zero on the first finding: each one
# is a real bug (or, for uninstrumented system libraries only, a suppression in
# scripts/sanitizers/ that says why).   Usage: scripts/sanitize.sh [asan] [tsan]
# The asan preset sets intercept_tls_get_addr=0: GCC 12's sanitizer runtime (Debian 12) takes a
# dynamic TLS block whose address is 16 past a page boundary for a glibc 2.19 one and reads the
# two words before it as its range; LeakSanitizer's tracer then dies scanning it ("Tracer caught
# signal 11" after a passing test; google/sanitizers#1322, fixed after GCC 13). Which block lands
# there depends on the layout of the heap, so any change can set it off (it did on the plugin's
# HostingAgentServesItsRunAndAnswersQueries). Leaks are still checked, dynamic TLS only excepted.
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
