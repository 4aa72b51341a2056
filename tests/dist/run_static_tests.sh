#!/usr/bin/env bash
# The static binaries' tests (make test-static; CI runs it). They run the binaries of
# build-static/bin (preset `static`) where a dynamic ddprun could not run at all: inside a root
# that holds nothing but them, busybox-static, an /etc/hosts and (unless a check removes it)
# /proc — no libc, no /usr, no /etc/nsswitch.conf.
#
#   dependencies   readelf: no NEEDED entry, no program interpreter; each stripped <= 30 MB,
#                  its debug info in a separate file (objcopy --only-keep-debug, debuglink)
#   no_proc        a root without /proc: one clear line, exit 2
#   old_kernel     uname saying 2.6 (setarch --uname-2.6): one clear line, exit 2
#   hosts          a c10d job through ddprun-rdzv whose endpoint is a name from the root's
#                  /etc/hosts (glibc's built-in files lookup, and gRPC's own resolver), with an
#                  /etc/nsswitch.conf that names modules (sss, ldap) the root does not have
#   http           ddprun-rdzv's /metrics (libmicrohttpd rebuilt without HTTPS), without /proc
#   tls_roots      protocol=https with no tls_ca: the CA found at Debian/Ubuntu, RHEL and SLES
#                  bundle paths, through SSL_CERT_FILE, SSL_CERT_DIR and
#                  GRPC_DEFAULT_SSL_ROOTS_FILE_PATH; refused with none
#   time_zone      log line times from /etc/localtime and from TZ (static glibc reads both)
#   locale         a job and --help under a locale the root does not have: same output
#   project tests  (with a second argument: the dynamic build with its tests) the integration
#                  tests of the kernel log (/dev/kmsg), memory cgroups (v1/v2), nvidia-smi
#                  discovery on PATH and etcd over TLS, run against the static binaries
#                  (DDPRUN_BIN_DIR)
#
# Usage: tests/dist/run_static_tests.sh BUILD_STATIC [BUILD_WITH_TESTS]. Needs root (chroot,
# mount), busybox-static and openssl (scripts/install-deps.sh); a missing one fails the run.
set -euo pipefail

static_dir=$(realpath "${1:?usage: run_static_tests.sh BUILD_STATIC [BUILD_WITH_TESTS]}")
tests_dir=${2:+$(realpath "$2")}
bin="$static_dir/bin"
max_stripped_bytes=$((30 * 1024 * 1024))

# shellcheck source=../../scripts/lib/elf.sh
. "$(dirname "$(realpath "$0")")/../../scripts/lib/elf.sh"

die() {
  echo "run_static_tests: $*" >&2
  exit 1
}
[[ $(id -u) == 0 ]] || die "needs root (chroot and mount)"
busybox=$(command -v busybox || true)
[[ -n "$busybox" ]] || die "no busybox: install busybox-static (scripts/install-deps.sh)"
[[ $(readelf -d "$busybox") == *"no dynamic section"* ]] ||
  die "$busybox is not static: install busybox-static"
command -v openssl >/dev/null || die "no openssl (scripts/install-deps.sh)"
for b in ddprun ddprun-rdzv ddprun-launch; do
  [[ -x "$bin/$b" ]] || die "$bin/$b missing: make static"
done

work=$(mktemp -d /tmp/ddprun-static-test.XXXXXX)
mounts=()
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

failures=()
root=""
port=""
result=""
pass() { echo "PASS $1"; }
fail() {
  echo "FAIL $1: $2"
  failures+=("$1")
}

# A root with the static binaries, busybox (sh, true, env, ...), /etc/hosts, /tmp and /proc;
# its path in $root. (Globals, not $(...): the mounts and servers must be known to cleanup.)
make_root() {
  root="$work/$1"
  local with_proc="${2:-proc}"
  mkdir -p "$root"/{bin,etc,tmp,proc}
  chmod 1777 "$root/tmp"
  cp "$bin/ddprun" "$bin/ddprun-rdzv" "$busybox" "$root/bin/"
  ln -s ddprun "$root/bin/ddprun-launch"
  for tool in sh true cat echo sleep env wget; do ln -s busybox "$root/bin/$tool"; done
  printf '127.0.0.1 localhost\n127.0.0.1 rdzv-host.test\n' >"$root/etc/hosts"
  if [[ "$with_proc" == proc ]]; then
    mount -t proc proc "$root/proc"
    mounts+=("$root/proc")
  fi
}

# Starts ddprun-rdzv in $root with ARGS; its port in $port.
start_rdzv() {
  local log="$root/tmp/rdzv.log"
  : >"$log"
  chroot "$root" /bin/env -i PATH=/bin /bin/ddprun-rdzv --port 0 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$log")
    [[ -n "$port" ]] && return 0
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

check_dependencies() {
  local b ok=1
  for b in ddprun ddprun-rdzv ddprun-launch; do
    local f="$bin/$b" stripped="$work/$b.stripped"
    local problem sections
    problem=$(elf_static_problem "$f")
    if [[ -n "$problem" ]]; then
      fail dependencies "$b $problem"
      ok=0
    fi
    # As a release ships them: stripped, the debug info in a file of its own that gdb finds
    # through the stripped binary's .gnu_debuglink.
    # OBJCOPY, STRIP: the target's binutils for another architecture's binaries (make
    # test-aarch64: aarch64-linux-gnu-objcopy, aarch64-linux-gnu-strip).
    "${OBJCOPY:-objcopy}" --only-keep-debug "$f" "$work/$b.debug"
    "${STRIP:-strip}" -o "$stripped" "$f"
    (cd "$work" && "${OBJCOPY:-objcopy}" --add-gnu-debuglink="$b.debug" "$stripped")
    sections=$(readelf -SW "$stripped")
    if [[ "$sections" != *gnu_debuglink* ]] || ! elf_has_debug_info "$work/$b.debug"; then
      fail dependencies "$b: no separate debug file (objcopy --only-keep-debug)"
      ok=0
    fi
    local size
    size=$(stat -L -c %s "$stripped")
    echo "  $b: $(stat -L -c %s "$f") bytes, stripped $size bytes"
    if ((size > max_stripped_bytes)); then
      fail dependencies "$b stripped is $size bytes, over $max_stripped_bytes"
      ok=0
    fi
  done
  if ((ok)); then pass dependencies; fi
}

# Whether a bad-input run ended as the project's standards say: exit 2 and one line with TEXT.
one_line_exit_2() {
  local rc="$1" out="$2" text="$3"
  [[ $rc == 2 && $(wc -l <<<"$out") == 1 && "$out" == *"$text"* ]]
}

check_no_proc() {
  local out rc=0
  make_root noproc noproc
  out=$(chroot "$root" /bin/env -i /bin/ddprun --standalone --nproc-per-node=1 --no-python \
    /bin/true 2>&1) || rc=$?
  if one_line_exit_2 "$rc" "$out" "/proc is not mounted"; then
    pass no_proc
  else
    fail no_proc "exit $rc, output: $out"
  fi
}

# A kernel older than 3.10 (setarch's UNAME26 personality makes uname say 2.6.x): one line, 2.
check_old_kernel() {
  local b out rc failed=""
  local -a args
  make_root oldkernel
  for b in ddprun ddprun-rdzv; do
    rc=0
    args=(--port 0)
    [[ $b == ddprun ]] && args=(--standalone --nproc-per-node=1 --no-python /bin/true)
    out=$(setarch "$(uname -m)" --uname-2.6 chroot "$root" /bin/env -i PATH=/bin "/bin/$b" \
      "${args[@]}" 2>&1) || rc=$?
    one_line_exit_2 "$rc" "$out" "is too old: ddprun needs Linux 3.10" ||
      failed+="$b: exit $rc, output: $out; "
  done
  if [[ -z "$failed" ]]; then pass old_kernel; else fail old_kernel "$failed"; fi
}

check_hosts() {
  local out rc=0
  make_root hosts
  # A cluster's switch file names modules a static binary cannot load (no libnss_*.so here):
  # glibc passes over them to its built-in files and dns.
  printf 'passwd: files sss\nhosts: files sss ldap dns\n' >"$root/etc/nsswitch.conf"
  start_rdzv || {
    fail hosts "ddprun-rdzv did not start"
    return
  }
  # gRPC's default resolver (c-ares, which reads /etc/hosts itself), then its native one
  # (glibc's getaddrinfo, as ddprun's own lookups).
  local resolver ok=1
  for resolver in ares native; do
    out=$(timeout 60 chroot "$root" /bin/env -i PATH=/bin GRPC_DNS_RESOLVER=$resolver \
      /bin/ddprun --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d \
      --rdzv-endpoint="rdzv-host.test:$port" --rdzv-id="hosts-$resolver" \
      --no-python /bin/sh -c "echo worker ran rank \$RANK" 2>&1) || rc=$?
    if [[ $rc != 0 || "$out" != *"worker ran rank 0"* ]]; then
      fail hosts "GRPC_DNS_RESOLVER=$resolver: exit $rc, output: $out"
      ok=0
    fi
  done
  if ((ok)); then pass hosts; fi
}

# ddprun-rdzv's /metrics from the libmicrohttpd rebuilt without HTTPS (a root without /proc).
check_http() {
  local out http_port="" log
  make_root http noproc
  log="$root/tmp/rdzv.log"
  start_rdzv --http-port 0 || {
    fail http "ddprun-rdzv did not start"
    return
  }
  for _ in $(seq 50); do
    http_port=$(sed -n 's/.*http on [^ ]*:\([0-9]*\).*/\1/p' "$log")
    [[ -n "$http_port" ]] && break
    sleep 0.1
  done
  out=$(chroot "$root" /bin/env -i /bin/wget -q -O - "http://127.0.0.1:$http_port/metrics" 2>&1) ||
    true
  if [[ "$out" == *"# TYPE ddprun_"* ]]; then
    pass http
  else
    fail http "GET /metrics on port '$http_port': $out"
  fi
}

make_certificates() {
  local d="$work/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ddprun-test-ca \
    -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=rdzv-host.test \
    -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:rdzv-host.test\n' >"$d/ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/ext" -out "$d/server.pem" 2>/dev/null
}

# One https job in a fresh root: CA_PATH (inside the root; "" for none) holds the CA, ENV...
# are set for ddprun. Its exit status and output in $result.
https_job() {
  local name="$1" ca_path="$2"
  shift 2
  make_root "tls-$name"
  mkdir -p "$root/srv"
  cp "$work/pki/server.pem" "$work/pki/server.key" "$root/srv/"
  if [[ -n "$ca_path" ]]; then
    mkdir -p "$(dirname "$root$ca_path")"
    cp "$work/pki/ca.pem" "$root$ca_path"
  fi
  start_rdzv --tls-cert /srv/server.pem --tls-key /srv/server.key || {
    result="ddprun-rdzv did not start"
    return
  }
  local rc=0 out
  out=$(timeout 60 chroot "$root" /bin/env -i PATH=/bin "$@" /bin/ddprun --nnodes=1 \
    --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="rdzv-host.test:$port" \
    --rdzv-id="tls-$name" --rdzv-conf protocol=https,is_host=0,join_timeout=10,read_timeout=5 \
    --no-python /bin/sh -c 'echo worker ran' 2>&1) || rc=$?
  result="exit $rc: $out"
}

check_tls_roots() {
  make_certificates
  local ok=1
  # name | where the CA lies in the root | variables
  local cases=(
    "debian|/etc/ssl/certs/ca-certificates.crt|"
    "rhel|/etc/pki/tls/certs/ca-bundle.crt|"
    "rhel-extracted|/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem|"
    "sles|/etc/ssl/ca-bundle.pem|"
    "ssl-cert-file|/certs/mine.pem|SSL_CERT_FILE=/certs/mine.pem"
    "ssl-cert-dir|/certdir/ca.pem|SSL_CERT_DIR=/nowhere:/certdir"
    "grpc-roots|/grpc/roots.pem|GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=/grpc/roots.pem"
  )
  for c in "${cases[@]}"; do
    IFS='|' read -r name ca_path vars <<<"$c"
    # shellcheck disable=SC2086 # vars is one optional NAME=VALUE word
    https_job "$name" "$ca_path" $vars
    if [[ "$result" != "exit 0: "*"worker ran"* ]]; then
      fail tls_roots "$name ($ca_path${vars:+, $vars}): $result"
      ok=0
    fi
  done
  # No CA anywhere: the server is not trusted and the job does not run.
  https_job none ""
  if [[ "$result" == "exit 0: "* || "$result" == *"worker ran"* ]]; then
    fail tls_roots "with no CA in the root the job still ran: $result"
    ok=0
  fi
  # A variable naming a missing file: one line naming it.
  https_job missing-file "" SSL_CERT_FILE=/no/such.pem
  if [[ "$result" != *"SSL_CERT_FILE"*"/no/such.pem"* ]]; then
    fail tls_roots "SSL_CERT_FILE=/no/such.pem was not named: $result"
    ok=0
  fi
  if ((ok)); then pass tls_roots; fi
}

# The minutes east of UTC that the first log line's time shows ([ddprun HH:MM:SS.mmm]).
log_offset_minutes() {
  local out="$1" utc_minutes="$2" hh mm
  hh=$(sed -n 's/^\[ddprun \([0-9][0-9]\):\([0-9][0-9]\).*/\1/p' <<<"$out" | head -1)
  mm=$(sed -n 's/^\[ddprun \([0-9][0-9]\):\([0-9][0-9]\).*/\2/p' <<<"$out" | head -1)
  [[ -n "$hh" ]] || return 1
  echo $(((((10#$hh * 60 + 10#$mm - utc_minutes) % 1440) + 1440 + 720) % 1440 - 720))
}

check_time_zone() {
  local ok=1 zone=/usr/share/zoneinfo/Asia/Kolkata
  [[ -f "$zone" ]] || die "no $zone (tzdata)"
  make_root tz
  cp "$zone" "$root/etc/localtime"
  # name | variables | expected minutes east of UTC
  local cases=("localtime||330" "tz-utc|TZ=UTC0|0" "tz-posix|TZ=<+03>-3|180")
  for c in "${cases[@]}"; do
    IFS='|' read -r name vars want <<<"$c"
    local utc out got
    utc=$((10#$(date -u +%H) * 60 + 10#$(date -u +%M)))
    # shellcheck disable=SC2086 # vars is one optional NAME=VALUE word
    out=$(chroot "$root" /bin/env -i PATH=/bin $vars /bin/ddprun --standalone --nproc-per-node=1 \
      --no-python /bin/true 2>&1) || true
    got=$(log_offset_minutes "$out" "$utc") || got="no log line"
    # One minute of slack: the clock may turn between `date` and the log line.
    if [[ "$got" != "$want" && "$got" != "$((want + 1))" ]]; then
      fail time_zone "$name: log times are $got minutes east of UTC, expected $want: $out"
      ok=0
    fi
  done
  if ((ok)); then pass time_zone; fi
}

check_locale() {
  local ok=1 c_help de_help out rc=0
  make_root locale
  c_help=$(chroot "$root" /bin/env -i LC_ALL=C /bin/ddprun --help 2>&1) || true
  de_help=$(chroot "$root" /bin/env -i LANG=de_DE.UTF-8 LC_ALL=de_DE.UTF-8 /bin/ddprun --help \
    2>&1) || true
  if [[ "$c_help" != *"Usage: ddprun"* || "$c_help" != "$de_help" ]]; then
    fail locale "--help differs under LC_ALL=de_DE.UTF-8"
    ok=0
  fi
  out=$(chroot "$root" /bin/env -i PATH=/bin LANG=de_DE.UTF-8 LC_ALL=de_DE.UTF-8 /bin/ddprun \
    --standalone --nproc-per-node=1 --no-python /bin/sh -c 'echo worker ran' 2>&1) || rc=$?
  if [[ $rc != 0 || "$out" != *"worker ran"* ]]; then
    fail locale "a job under LC_ALL=de_DE.UTF-8: exit $rc: $out"
    ok=0
  fi
  if ((ok)); then pass locale; fi
}

# The project's own integration tests of what the static build might lose, run against the
# static binaries: the kernel log and memory cgroups (OOM causes), nvidia-smi found on PATH, and
# TLS (mutual too) to a real etcd on this host (whose OpenSSL configuration the static OpenSSL
# reads).
check_project_tests() {
  local t filter
  for t in "causes_integration_test|CausesTest.*" \
    "health_check_integration_test|*ARestartWaitsUntilTheFailedWorkersGpuMemoryIsReleased" \
    "etcd_integration_test|EtcdTlsTest.*"; do
    IFS='|' read -r name filter <<<"$t"
    local exe="$tests_dir/tests/$name"
    if [[ ! -x "$exe" ]]; then
      fail project_tests "$exe missing (make build with the tests)"
      continue
    fi
    if (cd "$work" && DDPRUN_BIN_DIR="$bin" timeout 300 "$exe" --gtest_filter="$filter" \
      >"$work/$name.log" 2>&1); then
      pass "project_tests $name ($filter)"
    else
      tail -30 "$work/$name.log"
      fail project_tests "$name ($filter)"
    fi
  done
}

check_dependencies
check_no_proc
check_old_kernel
check_hosts
check_http
check_tls_roots
check_time_zone
check_locale
if [[ -n "$tests_dir" ]]; then
  check_project_tests
fi

if ((${#failures[@]})); then
  echo "run_static_tests: ${#failures[@]} failed: ${failures[*]}"
  exit 1
fi
echo "run_static_tests: all passed"
