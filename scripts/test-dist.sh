#!/usr/bin/env bash
# `make test-dist`: the x86_64 release files of `make dist` run on "any Linux" (issue 38):
#
#   a. the tarball's programs in a root that holds nothing but them, busybox-static, an
#      /etc/hosts and /proc (no libc, no /usr; chroot): a standalone job with a restart, a c10d
#      job of 2 agents on 2 namespaced hosts through ddprun-rdzv on a third, with a token and TLS
#      from a CA file, the server's name known only to that root's /etc/hosts;
#   b. the tarball in a Debian 11 root (bullseye, glibc 2.31; made once with debootstrap and
#      kept in /root/.cache/ddprun/debian11-root): a 2-node job whose workers are that root's
#      Python 3.9 scripts (standard library only);
#   c. the wheel in a fresh venv of the torch 2.11 venv's Python, no other ddprun on PATH:
#      `ddprun --standalone --nproc-per-node=2 train.py` (torch DDP, gloo), an in-process
#      recovery through the wheel's ddprun_inprocess, `python -m ddprun`, ddprun-launch, and
#      `pip uninstall ddprun` leaving nothing;
#   d. bad input: pip refuses a wheel for another architecture; ddprun in a root without /proc
#      says so in one line and exits 2;
#   and each program is fully static and at most 30 MB.
#
# Root only (chroot, mount, network namespaces). About a minute once the Debian 11 root exists.
#
#   scripts/test-dist.sh [DIST_DIR]      (default dist/; KEEP=1 keeps the work folder)
set -Eeuo pipefail  # -E: the ERR trap below also in functions
trap 'echo "test-dist: FAILED: line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR  # no silent set -e exit
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$(readlink -f "${1:-dist}")
VERSION=$(sed -n 's/^project(ddprun VERSION \([^ )]*\).*/\1/p' CMakeLists.txt)
TARBALL=$DIST/ddprun-$VERSION-linux-x86_64.tar.gz
WHEEL=$DIST/ddprun-$VERSION-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
CACHE=/root/.cache/ddprun
DEBIAN11=$CACHE/debian11-root
TORCH_VENV=$CACHE/venv-torch-2.11.0
MAX_BYTES=$((30 * 1024 * 1024))

# shellcheck source=lib/elf.sh
. "$(dirname "$(realpath "$0")")/lib/elf.sh"

step() { printf '\ntest-dist: == %s\n' "$*"; }
ok() { printf 'test-dist: ok: %s\n' "$*"; }
fail() { printf 'test-dist: FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || { echo "test-dist: needs root (chroot, mount, ip netns)" >&2; exit 2; }
for tool in busybox openssl ip unshare debootstrap readelf; do
  command -v "$tool" >/dev/null || { echo "test-dist: $tool missing (scripts/install-deps.sh)" >&2; exit 2; }
done
[ -f "$TARBALL" ] || { echo "test-dist: no $TARBALL (make dist)" >&2; exit 2; }
[ -f "$WHEEL" ] || { echo "test-dist: no $WHEEL (make dist)" >&2; exit 2; }
[ -x "$TORCH_VENV/bin/python" ] || { echo "test-dist: no $TORCH_VENV (scripts/install-deps.sh)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/ddprun-test-dist.XXXXXX)
NS=dd$$  # network namespaces dd<pid>-sw, -h1 .. -h3
PIDS=()
cleanup() {
  local pid m
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  # What runs in the hosts: a backgrounded on_host is a subshell whose pid is in PIDS, and
  # killing it left ddprun-rdzv (its grandchild, chrooted in h1) running after every run.
  for m in h1 h2 h3 sw; do
    ip netns pids "$NS-$m" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$NS-$m" 2>/dev/null || true
  done
  if [ "${KEEP:-0}" = 1 ]; then echo "test-dist: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Waits up to SECONDS for FILE to contain PATTERN (grep -E).
wait_for() {
  local file=$1 pattern=$2 seconds=$3 i
  for ((i = 0; i < seconds * 10; i++)); do
    grep -qE "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1  # polling a file another process writes; bounded by SECONDS
  done
  return 1
}

step "the programs: fully static, at most 30 MB, version $VERSION"
mkdir -p "$WORK/unpacked"
tar xzf "$TARBALL" -C "$WORK/unpacked"
TREE=$WORK/unpacked/ddprun-$VERSION
for p in ddprun ddprun-rdzv; do
  f=$TREE/bin/$p
  problem=$(elf_static_problem "$f")
  [ -z "$problem" ] || fail "bin/$p is not fully static: it $problem"
  size=$(stat -c %s "$f")
  [ "$size" -le "$MAX_BYTES" ] || fail "bin/$p is $size bytes, over 30 MB"
  ! elf_has_debug_info "$f" || fail "bin/$p is not stripped"
  ok "bin/$p: static, stripped, $((size / 1024)) KiB"
done
[ "$(readlink "$TREE/bin/ddprun-launch")" = ddprun ] || fail "bin/ddprun-launch is not a link to ddprun"
for f in share/man/man1/ddprun.1.gz share/man/man1/ddprun-rdzv.1.gz \
    share/bash-completion/completions/ddprun share/zsh/vendor-completions/_ddprun \
    lib/systemd/system/ddprun-rdzv.service share/ddprun/python/ddprun_inprocess.py README.md \
    share/doc/ddprun/licenses/glibc.copyright share/doc/ddprun/licenses/grpc.copyright; do
  [ -s "$TREE/$f" ] || fail "the tarball has no $f"
done
ok "man pages, completions, the unit, ddprun_inprocess.py, README, licences"

# ---------------------------------------------------------------------------------------------
step "a. a root with nothing but the programs, busybox-static, /etc/hosts and /proc"
BB=$WORK/bb
mkdir -p "$BB/bin" "$BB/etc" "$BB/proc" "$BB/tmp" "$BB/job" "$BB/out" "$BB/certs"
chmod 1777 "$BB/tmp"
cp -a "$TREE" "$BB/ddprun"
cp /bin/busybox "$BB/bin/busybox"
[ -z "$(elf_static_problem "$BB/bin/busybox")" ] || fail "/bin/busybox is not busybox-static's"
chroot "$BB" /bin/busybox --install -s /bin
RDZV_NAME=ddprun-dist-rdzv.test  # in this root's /etc/hosts only
getent hosts "$RDZV_NAME" >/dev/null && fail "$RDZV_NAME resolves on this machine: the test would prove nothing"
SUBNET=10.214.0
printf '127.0.0.1 localhost\n%s.1 %s h1\n%s.2 h2\n%s.3 h3\n' \
  "$SUBNET" "$RDZV_NAME" "$SUBNET" "$SUBNET" > "$BB/etc/hosts"
LIBS=$(find "$BB" \( -name 'libc.so*' -o -name 'ld-linux*' -o -name '*.so' -o -name '*.so.*' \) -print)
if [ -n "$LIBS" ] || [ -e "$BB/usr" ] || [ -e "$BB/lib" ]; then fail "the root holds libraries: $LIBS"; fi

step "d. without /proc: one line, exit 2"
MSG=$(chroot "$BB" /ddprun/bin/ddprun --standalone --nproc-per-node=1 --no-python /bin/true 2>&1) &&
  CODE=0 || CODE=$?
[ "$CODE" = 2 ] || fail "ddprun without /proc exited $CODE, not 2: $MSG"
[ "$(printf '%s\n' "$MSG" | wc -l)" = 1 ] || fail "ddprun without /proc said more than one line: $MSG"
printf '%s\n' "$MSG" | grep -q /proc || fail "ddprun without /proc does not name /proc: $MSG"
ok "exit 2: $MSG"
mount -t proc proc "$BB/proc"

step "a. standalone, 2 workers (busybox sh) failing in the first round: one restart, exit 0"
cat > "$BB/job/fail_once.sh" <<'EOF'
#!/bin/sh
# Every worker of the first round fails; the next round succeeds.
echo "rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT world=$WORLD_SIZE" >> /out/standalone.log
[ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || exit 3
EOF
chmod +x "$BB/job/fail_once.sh"
timeout 60 chroot "$BB" /ddprun/bin/ddprun --standalone --nproc-per-node=2 --max-restarts=2 \
  --no-python /job/fail_once.sh > "$WORK/standalone.out" 2>&1 ||
  fail "standalone job: exit $?: $(cat "$WORK/standalone.out")"
for r in 0 1; do
  grep -q "^rank=$r restart=1 world=2$" "$BB/out/standalone.log" ||
    fail "rank $r did not run again after the failure: $(cat "$BB/out/standalone.log")"
done
ok "exit 0 after one restart ($(wc -l < "$BB/out/standalone.log") worker starts)"

step "a. c10d: ddprun-rdzv on h1 (token, TLS), agents on h2 and h3, endpoint $RDZV_NAME"
(
  cd "$BB/certs"
  K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'
  # shellcheck disable=SC2086  # $K is several words
  openssl req -x509 $K -keyout ca.key -out ca.crt -subj /CN=ddprun-dist-ca -days 1
  # shellcheck disable=SC2086
  openssl req $K -keyout server.key -out server.csr -subj "/CN=$RDZV_NAME"
  printf 'subjectAltName=DNS:%s,IP:%s.1\n' "$RDZV_NAME" "$SUBNET" > server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile server.ext -out server.crt
  openssl rand -hex 32 > token
  rm ca.key server.csr
) > "$WORK/openssl.log" 2>&1 || fail "openssl: $(cat "$WORK/openssl.log")"
ip netns add "$NS-sw"
ip -n "$NS-sw" link add br0 type bridge
ip -n "$NS-sw" link set br0 up
for h in 1 2 3; do
  ip netns add "$NS-h$h"
  ip -n "$NS-h$h" link set lo up
  ip -n "$NS-h$h" link add eth0 type veth peer name "p$h"
  ip -n "$NS-h$h" link set "p$h" netns "$NS-sw"
  ip -n "$NS-sw" link set "p$h" master br0
  ip -n "$NS-sw" link set "p$h" up
  ip -n "$NS-h$h" addr add "$SUBNET.$h/24" dev eth0
  ip -n "$NS-h$h" link set eth0 up
done
# COMMAND... on host H of the root: its network namespace, its host name (busybox hostname).
on_host() {
  local h=$1
  shift
  # shellcheck disable=SC2016  # expanded by the root's sh
  ip netns exec "$NS-h$h" unshare --uts chroot "$BB" /bin/sh -c 'hostname "$0" && exec "$@"' "h$h" "$@"
}
on_host 1 /ddprun/bin/ddprun-rdzv --host "$SUBNET.1" --port=0 --token-file /certs/token \
  --tls-cert /certs/server.crt --tls-key /certs/server.key > "$WORK/rdzv.out" 2>&1 &
PIDS+=($!)
wait_for "$WORK/rdzv.out" 'listening' 20 || fail "ddprun-rdzv did not start: $(cat "$WORK/rdzv.out")"
PORT=$(grep -oE 'listening[^0-9]*[0-9.]+:[0-9]+' "$WORK/rdzv.out" | sed -n 1p | sed 's/.*://')
[ -n "$PORT" ] || fail "no port in: $(cat "$WORK/rdzv.out")"
cat > "$BB/job/c10d.sh" <<'EOF'
#!/bin/sh
echo "host=$(hostname) rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR" >> /out/c10d.log
EOF
chmod +x "$BB/job/c10d.sh"
AGENTS=()
for h in 2 3; do
  on_host "$h" /ddprun/bin/ddprun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \
    --rdzv-endpoint="$RDZV_NAME:$PORT" --rdzv-id=dist-c10d \
    --rdzv-conf=token_file=/certs/token,tls_ca=/certs/ca.crt \
    --no-python /job/c10d.sh > "$WORK/agent$h.out" 2>&1 &
  AGENTS+=($!)
  PIDS+=($!)
done
for i in 0 1; do
  wait "${AGENTS[$i]}" || fail "agent on h$((i + 2)) exited $?: $(cat "$WORK/agent$((i + 2)).out")"
done
for r in 0 1 2 3; do
  grep -q "rank=$r world=4 " "$BB/out/c10d.log" || fail "no rank $r in a world of 4: $(cat "$BB/out/c10d.log")"
done
for h in h2 h3; do
  [ "$(grep -c "^host=$h " "$BB/out/c10d.log")" = 2 ] || fail "not 2 workers on $h: $(cat "$BB/out/c10d.log")"
done
ok "a world of 4 on h2 and h3 through $RDZV_NAME:$PORT (TLS, token); both agents exit 0"

# ---------------------------------------------------------------------------------------------
step "b. Debian 11 (glibc 2.31): a 2-node job of Python 3.9 workers"
if [ ! -x "$DEBIAN11/usr/bin/python3" ]; then
  MIRROR=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | sed -n 1p)
  echo "test-dist: making $DEBIAN11 once (debootstrap bullseye, minbase + python3)"
  rm -rf "$DEBIAN11.tmp"
  debootstrap --variant=minbase --include=python3 bullseye "$DEBIAN11.tmp" \
    "${MIRROR:-http://deb.debian.org/debian}" > "$WORK/debootstrap.log" 2>&1 ||
    fail "debootstrap: $(tail -5 "$WORK/debootstrap.log")"
  mv "$DEBIAN11.tmp" "$DEBIAN11"
fi
D11=$WORK/debian11
mkdir -p "$D11" "$WORK/d11-upper" "$WORK/d11-work"
# The cached root stays as debootstrap made it: this run writes to an overlay.
mount -t overlay overlay -o "lowerdir=$DEBIAN11,upperdir=$WORK/d11-upper,workdir=$WORK/d11-work" "$D11"
mount -t proc proc "$D11/proc"
GLIBC=$(chroot "$D11" /usr/bin/ldd --version | sed -n 1p | grep -oE '[0-9]+\.[0-9]+$')
[ "$GLIBC" = 2.31 ] || fail "the Debian 11 root has glibc $GLIBC, not 2.31"
cp -a "$TREE" "$D11/opt/ddprun"
mkdir -p "$D11/out"
cat > "$D11/opt/worker.py" <<'EOF'
"""A worker of the test: standard library only. Checks torchrun's environment and that the
rendezvous' master address and port are usable (rank 0 listens, the others connect)."""
import os
import socket
import sys
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    with socket.create_server((addr, port + 1)) as server:
        seen = set()
        while len(seen) < world - 1:
            conn, _ = server.accept()
            with conn:
                seen.add(int(conn.recv(16).decode()))
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((addr, port + 1), timeout=5) as conn:
                conn.sendall(str(rank).encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # rank 0 not listening yet
with open(f"/out/rank{rank}", "w") as f:
    f.write(f"python={sys.version_info[0]}.{sys.version_info[1]} world={world}\n")
EOF
chroot "$D11" /opt/ddprun/bin/ddprun-rdzv --port=0 > "$WORK/d11-rdzv.out" 2>&1 &
PIDS+=($!)
wait_for "$WORK/d11-rdzv.out" 'listening' 20 || fail "ddprun-rdzv: $(cat "$WORK/d11-rdzv.out")"
PORT=$(grep -oE 'listening[^0-9]*[0-9.]+:[0-9]+' "$WORK/d11-rdzv.out" | sed -n 1p | sed 's/.*://')
AGENTS=()
for n in 1 2; do
  chroot "$D11" /usr/bin/env -i PATH=/usr/bin:/bin /opt/ddprun/bin/ddprun --nnodes=2 \
    --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$PORT" --rdzv-id=d11 \
    /opt/worker.py > "$WORK/d11-agent$n.out" 2>&1 &
  AGENTS+=($!)
  PIDS+=($!)
done
for n in 0 1; do
  wait "${AGENTS[$n]}" || fail "agent $((n + 1)) exited $?: $(cat "$WORK/d11-agent$((n + 1)).out")"
done
for r in 0 1 2 3; do
  [ "$(cat "$D11/out/rank$r" 2>/dev/null)" = "python=3.9 world=4" ] ||
    fail "rank $r: '$(cat "$D11/out/rank$r" 2>/dev/null)', not python=3.9 world=4"
done
ok "4 workers of Python 3.9 in a world of 4, 2 agents, glibc $GLIBC"

# ---------------------------------------------------------------------------------------------
step "c. the wheel in a fresh venv of the torch 2.11 venv's Python"
VENV=$WORK/venv
"$TORCH_VENV/bin/python" -m venv "$VENV"
# The torch venv's packages, seen through a .pth (--system-site-packages would show the base
# interpreter's, not the torch venv's); pip installs into and removes from $VENV only.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$TORCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > "$SITE/torch-venv.pth"
CLEAN_PATH=$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin
in_venv() { env -i HOME="$WORK" PATH="$CLEAN_PATH" LANG=C.UTF-8 "$@"; }
in_venv sh -c 'command -v ddprun' && fail "a ddprun is on PATH before the install"
find "$VENV" -path '*/__pycache__' -prune -o -print | sort > "$WORK/venv-before.txt"
in_venv "$VENV/bin/pip" install -q --no-index "$WHEEL" > "$WORK/pip.out" 2>&1 ||
  fail "pip install: $(cat "$WORK/pip.out")"
for p in ddprun ddprun-rdzv ddprun-launch; do
  [ "$(in_venv sh -c "command -v $p")" = "$VENV/bin/$p" ] || fail "$p is not on PATH from the venv"
done
[ "$(in_venv ddprun --version)" = "ddprun $VERSION" ] || fail "ddprun --version"
[ "$(in_venv ddprun-rdzv --version)" = "ddprun-rdzv $VERSION" ] || fail "ddprun-rdzv --version"
[ "$(in_venv ddprun-launch --version)" = "ddprun $VERSION" ] || fail "ddprun-launch --version"
[ "$(in_venv python -m ddprun --version)" = "ddprun $VERSION" ] || fail "python -m ddprun --version"
MOD=$(in_venv python -c 'import ddprun_inprocess, torch; print(ddprun_inprocess.__file__, torch.__version__)')
case $MOD in "$SITE/ddprun_inprocess.py 2.11."*) ;; *) fail "import ddprun_inprocess, torch: $MOD" ;; esac
ok "ddprun, ddprun-rdzv, ddprun-launch on PATH; python -m ddprun; ddprun_inprocess with torch ${MOD##* }"
# ddprun-launch (a sh script in the wheel) gives the worker torch.distributed.launch's
# --local-rank argument, as the link of the tarball does.
# shellcheck disable=SC2016  # expanded by the worker's sh
printf '#!/bin/sh\necho "$@" > "$0.out"\n' > "$WORK/args.sh"
chmod +x "$WORK/args.sh"
in_venv ddprun-launch --standalone --nproc-per-node=1 --no-python "$WORK/args.sh" a b > "$WORK/launch.out" 2>&1 ||
  fail "ddprun-launch: $(cat "$WORK/launch.out")"
[ "$(cat "$WORK/args.sh.out")" = "--local-rank=0 a b" ] || fail "ddprun-launch's worker got: $(cat "$WORK/args.sh.out")"
ok "ddprun-launch: the worker gets --local-rank=0"
cat > "$WORK/train.py" <<'EOF'
"""torch DDP on the CPU (gloo): 5 steps of a linear model; rank 0 writes the final weights."""
import os
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    opt.zero_grad()
    x = torch.full((8, 4), float(rank + step))
    model(x).sum().backward()
    opt.step()
if rank == 0:
    with open(sys.argv[1], "w") as f:
        f.write(f"world={world} torch={torch.__version__} w={model.module.weight.sum().item():.6f}\n")
dist.destroy_process_group()
EOF
(cd "$WORK" && in_venv timeout 120 ddprun --standalone --nproc-per-node=2 train.py "$WORK/train.txt") \
  > "$WORK/train.out" 2>&1 || fail "ddprun train.py: $(tail -20 "$WORK/train.out")"
grep -q "^world=2 torch=2.11" "$WORK/train.txt" || fail "train.py: $(cat "$WORK/train.txt" 2>&1)"
ok "ddprun --standalone --nproc-per-node=2 train.py: $(cat "$WORK/train.txt")"
in_venv timeout 180 ddprun --standalone --nproc-per-node=2 --max-restarts=1 --restart-mode=in-process \
  "$ROOT/tests/python/scripts/inprocess_worker.py" --steps 8 --out "$WORK/inproc" \
  --kill-at 3 --kill-rank 1 > "$WORK/inproc.out" 2>&1 || fail "in-process job: $(tail -30 "$WORK/inproc.out")"
grep -q "recovered (in-process) from worker_signal" "$WORK/inproc.out" ||
  fail "no in-process recovery: $(tail -30 "$WORK/inproc.out")"
ok "in-process recovery: $(grep -o 'in-process recovery, [^.;]*' "$WORK/inproc.out" | sed -n 1p)"
in_venv "$VENV/bin/pip" uninstall -q -y ddprun > "$WORK/pip-uninstall.out" 2>&1 ||
  fail "pip uninstall: $(cat "$WORK/pip-uninstall.out")"
find "$VENV" -path '*/__pycache__' -prune -o -print | sort > "$WORK/venv-after.txt"
LEFT=$(comm -13 "$WORK/venv-before.txt" "$WORK/venv-after.txt")
LEFT_PYC=$(find "$VENV" -path '*__pycache__*' -name 'ddprun*')
[ -z "$LEFT$LEFT_PYC" ] || fail "pip uninstall ddprun left: $LEFT $LEFT_PYC"
ok "pip uninstall ddprun leaves nothing"

step "d. pip refuses the wheel for another architecture"
OTHER=$DIST/ddprun-$VERSION-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl
if [ ! -f "$OTHER" ]; then
  # No aarch64 wheel in DIST: the x86_64 one under aarch64's tags is what pip sees of one.
  cp "$WHEEL" "$WORK/"
  "$CACHE/venv-dist/bin/wheel" tags --remove --platform-tag manylinux_2_17_aarch64 \
    "$WORK/$(basename "$WHEEL")" > /dev/null
  OTHER=$WORK/ddprun-$VERSION-py3-none-manylinux_2_17_aarch64.whl
fi
MSG=$(in_venv "$VENV/bin/pip" install --no-index "$OTHER" 2>&1) && CODE=0 || CODE=$?
[ "$CODE" != 0 ] || fail "pip installed the aarch64 wheel on $(uname -m)"
printf '%s\n' "$MSG" | grep -q "is not a supported wheel on this platform" || fail "pip said: $MSG"
ok "exit $CODE: $(printf '%s\n' "$MSG" | grep 'not a supported wheel')"

step "the ddprun_train wheel in fresh venvs (tests/dist/train_wheel_test.sh)"
TRAIN_WHEEL=$(ls "$DIST"/ddprun_train-"$VERSION"-*.whl 2>/dev/null) ||
  fail "no ddprun_train-$VERSION wheel in $DIST (make dist makes it unless DIST_TRAIN_WHEEL=0)"
"$ROOT/tests/dist/train_wheel_test.sh" "$TRAIN_WHEEL" "$TREE/bin/ddprun" || fail "the ddprun_train wheel"
ok "$(basename "$TRAIN_WHEEL")"

printf '\ntest-dist: OK: %s and %s run on any Linux\n' "$(basename "$TARBALL")" "$(basename "$WHEEL")"
