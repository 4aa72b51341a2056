#!/usr/bin/env bash
# Start-up of the static ddprun (make static: build-static/) against today's dynamic build
# (build/), side by side in one run, the two interleaved so that both see the same machine:
#
#   standalone   ddprun --standalone --nproc-per-node=1 --no-python /bin/true  (a whole job)
#   version      ddprun --version  (exec, relocation and static constructors alone)
#   c10d         a 1-node c10d job through ddprun-rdzv (the dynamic build dlopens the gRPC plugin
#                for it; the static one has it linked in)
#
# Prints a markdown table: median and p90 wall time in ms over N runs, the agent's peak RSS
# (GNU time), and the binaries' sizes (as built, and stripped). The figures go into
# bench/RESULTS.md by hand. Usage: bench/startup_static.sh [DYNAMIC_BUILD [STATIC_BUILD [N]]]
set -euo pipefail
dynamic=${1:-build}
static=${2:-build-static}
runs=${3:-40}
for d in "$dynamic" "$static"; do
  [[ -x "$d/bin/ddprun" && -x "$d/bin/ddprun-rdzv" ]] || {
    echo "startup_static: no $d/bin/ddprun or ddprun-rdzv (make build; make static)" >&2
    exit 2
  }
done
[[ -x /usr/bin/time ]] || {
  echo "startup_static: no /usr/bin/time (apt install time)" >&2
  exit 2
}
work=$(mktemp -d)
rdzv_pids=()
cleanup() {
  for p in "${rdzv_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# One server per build for the c10d case (each build's client talks to its own server).
declare -A rdzv_port
for kind in dynamic static; do
  dir=$([[ $kind == dynamic ]] && echo "$dynamic" || echo "$static")
  "$dir/bin/ddprun-rdzv" --port 0 >"$work/rdzv-$kind.log" 2>&1 &
  rdzv_pids+=($!)
  for _ in $(seq 100); do
    rdzv_port[$kind]=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$work/rdzv-$kind.log")
    [[ -n "${rdzv_port[$kind]}" ]] && break
    sleep 0.1
  done
  [[ -n "${rdzv_port[$kind]}" ]] || {
    cat "$work/rdzv-$kind.log" >&2
    exit 1
  }
done

# Runs one case once; appends "ms rss_kib" to $work/<case>-<kind>.
run_once() {
  local case=$1 kind=$2 dir=$3 run=$4
  local -a cmd
  case $case in
    standalone) cmd=("$dir/bin/ddprun" --standalone --nproc-per-node=1 --no-python /bin/true) ;;
    version) cmd=("$dir/bin/ddprun" --version) ;;
    c10d)
      cmd=("$dir/bin/ddprun" --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d
        "--rdzv-endpoint=127.0.0.1:${rdzv_port[$kind]}" "--rdzv-id=bench-$kind-$run"
        --rdzv-conf is_host=0 --no-python /bin/true)
      ;;
  esac
  local start end
  start=$(date +%s%N)
  env -u DDPRUN_RDZV_TOKEN /usr/bin/time -f %M -o "$work/rss" "${cmd[@]}" >"$work/out" 2>&1 || {
    echo "startup_static: $case ($kind) failed:" >&2
    cat "$work/out" >&2
    exit 1
  }
  end=$(date +%s%N)
  echo "$(((end - start) / 1000)) $(cat "$work/rss")" >>"$work/$case-$kind"
}

# The value at fraction Q (0.5: the median) of column COL of FILE.
quantile() {
  sort -n -k "$2,$2" "$1" | awk -v q="$3" -v c="$2" '{ v[NR] = $c }
    END { i = int(NR * q + 0.5); if (i < 1) i = 1; print v[i] }'
}

# "median ms | p90 ms | median peak RSS MiB" of one case and build.
summarize() {
  awk -v m="$(quantile "$1" 1 0.5)" -v p="$(quantile "$1" 1 0.9)" -v r="$(quantile "$1" 2 0.5)" \
    'BEGIN { printf "%.1f | %.1f | %.1f", m / 1000, p / 1000, r / 1024 }'
}

for case in version standalone c10d; do
  for ((i = 0; i < runs; i++)); do
    # Interleaved, and which goes first alternates, so that neither gets a warmer machine.
    if ((i % 2)); then
      run_once "$case" static "$static" "$i"
      run_once "$case" dynamic "$dynamic" "$i"
    else
      run_once "$case" dynamic "$dynamic" "$i"
      run_once "$case" static "$static" "$i"
    fi
  done
done

size_of() { stat -L -c %s "$1" | awk '{ printf "%.1f MB", $1 / 1e6 }'; }
stripped_size() {
  strip -o "$work/stripped" "$1"
  size_of "$work/stripped"
}

echo "### Start-up: static vs dynamic ($runs runs each, interleaved; $(nproc) CPUs)"
echo
echo "| case | build | median ms | p90 ms | peak RSS MiB (median) | static / dynamic (median) |"
echo "|---|---|---|---|---|---|"
for case in version standalone c10d; do
  d=$(summarize "$work/$case-dynamic")
  s=$(summarize "$work/$case-static")
  ratio=$(awk -v a="${s%% *}" -v b="${d%% *}" 'BEGIN { printf "%.2fx", a / b }')
  echo "| $case | dynamic | $d | |"
  echo "| $case | static | $s | $ratio |"
done
echo
echo "| binary | dynamic as built | dynamic stripped | static as built | static stripped |"
echo "|---|---|---|---|---|"
for b in ddprun ddprun-rdzv; do
  echo "| $b | $(size_of "$dynamic/bin/$b") | $(stripped_size "$dynamic/bin/$b") |" \
    "$(size_of "$static/bin/$b") | $(stripped_size "$static/bin/$b") |"
done
plugin="$dynamic/lib/ddprun/libddprun_grpc.so"
if [[ -f "$plugin" ]]; then
  echo "| libddprun_grpc.so (dynamic only) | $(size_of "$plugin") | $(stripped_size "$plugin") | - | - |"
fi
