#!/usr/bin/env bash
# bench/gpu on a GPU machine with PyTorch 2.11 (CUDA, NCCL, torchvision) as python3: every check
# of gpu_bench.py in one command, results under $OUT (results.json, summary.md, logs.tar.gz).
# Make .gpu/ first on the build machine (bench/gpu/prepare.sh); on this project's lent device:
#
#   run(command="bash bench/gpu/run.sh", carry=[".gpu"], timeout_s=600)
#
# GPU_BENCH_ARGS adds gpu_bench.py flags (e.g. --parts resnet50 --budget 300).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
WORK=${GPU_BENCH_WORK:-/tmp/gpu-bench}
mkdir -p "$OUT" "$WORK"
chmod +x "$ROOT"/.gpu/bin/* "$ROOT"/.gpu/ddp-train-torch2/ddp-train "$ROOT"/.gpu/ddp-train-torch2/run
export PATH="$ROOT/.gpu/bin:$PATH"   # ddprun finds eu-stack for hang stacks on PATH
PY=$(command -v python3)
export PYTHON_EXEC=$PY
"$ROOT/.gpu/bin/ddprun" --version || { echo "run.sh: .gpu/bin/ddprun does not start here" >&2; exit 2; }
PYTHONUNBUFFERED=1 "$PY" "$ROOT/bench/gpu/gpu_bench.py" --ddprun "$ROOT/.gpu/bin/ddprun" \
  --ddp-train "$ROOT/.gpu/ddp-train-torch2/run" --python "$PY" --out "$OUT" --work "$WORK" \
  ${GPU_BENCH_ARGS:-}
