#!/usr/bin/env bash
# The aarch64 build under emulation (`make test-aarch64`; qemu-user through a private binfmt_misc,
# tests/dist/with_aarch64_binfmt.sh): its three programs are aarch64 ELF files, and they run real
# jobs whose workers are aarch64 programs too (the sysroot's busybox-static; each worker records
# `uname -m`, which qemu answers with aarch64):
#   1. a standalone job of 2 workers, one of which fails in the first round: ddprun restarts the
#      group and both finish in round 2;
#   2. a 2-node c10d job through ddprun-rdzv on 127.0.0.1 (a free port it picks and prints), one
#      node started as ddprun, the other as ddprun-launch, with a token.
#
#   tests/dist/aarch64_test.sh BUILD_DIR SYSROOT     (BUILD_DIR: build-aarch64)
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SYSROOT" >&2
  exit 2
fi
bin=$(realpath "$1")/bin
sysroot=$2
if [ "${DDPRUN_AARCH64_BINFMT_NS:-}" != 1 ]; then
  exec "$(dirname "$(realpath "$0")")/with_aarch64_binfmt.sh" "$sysroot" "$(realpath "$0")" "$@"
fi

# shellcheck source=../../scripts/lib/elf.sh
. "$(dirname "$(realpath "$0")")/../../scripts/lib/elf.sh"

fail() {
  echo "aarch64_test: FAIL: $*" >&2
  exit 1
}
pass() { echo "aarch64_test: ok: $*"; }

# 0. The programs are aarch64 executables; fully static (no NEEDED entry, no program interpreter)
#    when the build is DDPRUN_STATIC.
static=no
if grep -q '^DDPRUN_STATIC:BOOL=ON$' "$1/CMakeCache.txt" 2>/dev/null; then static=yes; fi
for program in ddprun ddprun-rdzv ddprun-launch; do
  [ -e "$bin/$program" ] || fail "$bin/$program does not exist"
  file=$(realpath "$bin/$program")
  machine=$(elf_machine "$file")
  [ "$machine" = AArch64 ] || fail "$program is built for '$machine', not AArch64"
  problem=$(elf_static_problem "$file")
  if [ -n "$problem" ]; then
    [ $static = no ] || fail "$program of a DDPRUN_STATIC build is dynamic: it $problem"
    linkage="dynamic (libraries from $sysroot)"
  else
    linkage=static
  fi
  version=$("$bin/$program" --version) || fail "$program --version failed under qemu"
  pass "$program: AArch64, $linkage, --version under qemu: $version"
done

tmp=$(mktemp -d)
rdzv_pid=""
cleanup() {
  if [ -n "$rdzv_pid" ]; then kill "$rdzv_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
cp "$sysroot/bin/busybox" "$tmp/busybox"
# The workers: sh scripts run by the aarch64 busybox (their #! line). ddprun-launch passes
# --local-rank=N to them as torch.distributed.launch does; they ignore it.
write_worker() {
  printf '#!%s sh\n%s\n' "$tmp/busybox" "$2" >"$tmp/$1"
  chmod +x "$tmp/$1"
}

# 1. Standalone, 2 workers; rank 1 fails once, the restart succeeds.
# shellcheck disable=SC2016 # the worker's variables, expanded by the worker
write_worker standalone.sh '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && exit 3
echo "$(uname -m) rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT" >'" $tmp/standalone-\$RANK"
timeout 120 "$bin/ddprun" --standalone --nproc-per-node=2 --max-restarts=1 --no-python \
  "$tmp/standalone.sh" >"$tmp/standalone.log" 2>&1 ||
  fail "standalone job exited $? (expected 0):$(printf '\n'; cat "$tmp/standalone.log")"
for rank in 0 1; do
  got=$(cat "$tmp/standalone-$rank" 2>/dev/null || true)
  [ "$got" = "aarch64 rank=$rank world=2 restart=1" ] ||
    fail "standalone rank $rank wrote '$got' (expected 'aarch64 rank=$rank world=2 restart=1')"
done
grep -q "restart" "$tmp/standalone.log" || fail "no restart in the agent's log"
pass "standalone job: 2 aarch64 workers, restarted once after rank 1 failed"

# 2. Two agents through ddprun-rdzv (port 0: it prints the one it bound).
export DDPRUN_RDZV_TOKEN=aarch64-test-token
"$bin/ddprun-rdzv" --port 0 >"$tmp/rdzv.log" 2>&1 &
rdzv_pid=$!
port=""
deadline=$((SECONDS + 60))
while [ -z "$port" ]; do
  port=$(sed -n 's/^ddprun-rdzv listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/rdzv.log")
  kill -0 "$rdzv_pid" 2>/dev/null || fail "ddprun-rdzv exited:$(printf '\n'; cat "$tmp/rdzv.log")"
  [ $SECONDS -lt $deadline ] || fail "ddprun-rdzv printed no port in 60 s"
  [ -n "$port" ] || sleep 0.1
done
# shellcheck disable=SC2016 # the worker's variables, expanded by the worker
write_worker c10d.sh 'echo "$(uname -m) rank=$RANK world=$WORLD_SIZE node=$GROUP_RANK" >'" $tmp/c10d-\$RANK"
agent_flags=(--rdzv-backend=c10d "--rdzv-endpoint=127.0.0.1:$port" --rdzv-id=aarch64 --nnodes=2
             --nproc-per-node=1 --no-python "$tmp/c10d.sh")
timeout 120 "$bin/ddprun" "${agent_flags[@]}" >"$tmp/agent-a.log" 2>&1 &
agent_a=$!
timeout 120 "$bin/ddprun-launch" "${agent_flags[@]}" >"$tmp/agent-b.log" 2>&1 &
agent_b=$!
wait "$agent_a" || fail "agent a (ddprun) exited $?:$(printf '\n'; cat "$tmp/agent-a.log")"
wait "$agent_b" || fail "agent b (ddprun-launch) exited $?:$(printf '\n'; cat "$tmp/agent-b.log")"
nodes=""
for rank in 0 1; do
  got=$(cat "$tmp/c10d-$rank" 2>/dev/null || true)
  [[ "$got" =~ ^aarch64\ rank=$rank\ world=2\ node=([01])$ ]] ||
    fail "c10d rank $rank wrote '$got' (expected 'aarch64 rank=$rank world=2 node=0|1')"
  nodes+=${BASH_REMATCH[1]}
done
[ "$nodes" = 01 ] || [ "$nodes" = 10 ] || fail "c10d ranks came from nodes '$nodes' (expected 0 and 1)"
pass "c10d job: 2 agents (ddprun, ddprun-launch) through ddprun-rdzv on 127.0.0.1:$port"
