#!/usr/bin/env bash
# ddp-train against LibTorch 2.11 (the torch of the venv scripts/install-torch2.sh makes), with
# CUDA and NCCL on: the CUDA path compiles and links for real here (CUDA 13 toolkit, no GPU), and
# the LibTorch unit tests of ddp-train run on the CPU. `make torch2-build` runs this; CI does too.
#
#   scripts/build-torch2.sh [BUILD_DIR]     (default build-torch2)
#
# DDPRUN_TORCH2_VENV: the venv (default ~/.cache/ddprun/venv-torch-2.11.0). The result,
# BUILD_DIR/bin/ddp-train, finds LibTorch through its RUNPATH (the venv's torch/lib);
# scripts/ddp-train-torch2 runs it against another PyTorch 2.11 (docs/guide/torch-versions.md).
set -euo pipefail
HERE=$(dirname "$(realpath "$0")")
SRC=$(dirname "$HERE")
BUILD=$(realpath -m "${1:-$SRC/build-torch2}")
VENV="${DDPRUN_TORCH2_VENV:-$HOME/.cache/ddprun/venv-torch-2.11.0}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "build-torch2: no venv at $VENV (scripts/install-deps.sh makes it)" >&2
  exit 1
fi
TORCH=$("$VENV/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) || {
  echo "build-torch2: $VENV/bin/python cannot import torch" >&2
  exit 1
}
# Torch_ROOT (not Torch_DIR): find_library then searches the venv's torch/lib before the system
# paths, where Debian's LibTorch 1.13 would be found first.
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DDDPRUN_WITH_CUDA=ON -DTorch_ROOT="$TORCH" ${CMAKE_ARGS:-}
TESTS=(distributed_sampler_test grad_sync_test train_state_test resnet_test state_sync_test
       round_group_test group_reaper_test)
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target ddp-train "${TESTS[@]}"
# Proof that the CUDA path is linked in, not only type-checked: ddp-train needs torch_cuda.
if ! readelf -d "$BUILD/bin/ddp-train" | grep -q 'libtorch_cuda.so'; then
  echo "build-torch2: $BUILD/bin/ddp-train is not linked against libtorch_cuda.so" >&2
  exit 1
fi
for t in "${TESTS[@]}"; do
  "$BUILD/tests/$t" --gtest_brief=1 || { echo "build-torch2: $t failed against torch 2.11" >&2; exit 1; }
done
# The bundle for a machine with PyTorch 2.11 and a GPU: ddp-train, the libraries it needs that are
# neither LibTorch's (that machine's torch gives those) nor the C/C++ runtimes, and `run`
# (scripts/ddp-train-torch2), which puts that torch's lib folder first.
BUNDLE="$BUILD/ddp-train-torch2"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib"
cp "$BUILD/bin/ddp-train" "$BUNDLE/"
cp "$HERE/ddp-train-torch2" "$BUNDLE/run"
ldd "$BUILD/bin/ddp-train" | awk '/=> \// {print $3}' |
  grep -v -e "^$TORCH/" -e "/nvidia/" -e "/libc\.so" -e "/libm\.so" -e "/libstdc++" \
          -e "/libgcc_s" -e "/ld-linux" -e "/libpthread" -e "/libdl\.so" -e "/librt\.so" |
  xargs -r cp -L -t "$BUNDLE/lib"
# The bundle's own check: two ranks of it train a few steps on the CPU under ddprun (the one in
# build/, which `make test` builds), with the venv's torch.
DDPRUN="${DDPRUN:-$SRC/build/bin/ddprun}"
DATA=/usr/share/datasets/fashion-mnist
if [ -x "$DDPRUN" ] && [ -d "$DATA" ]; then
  PYTHON_EXEC="$VENV/bin/python" "$DDPRUN" --standalone --nproc-per-node=2 --quiet --no-python \
    "$BUNDLE/run" mnist --data "$DATA" --epochs 1 --max-steps 10 --test-batch-size 1000 |
    grep -q "replicas in sync: .* identical on 2 ranks" ||
    { echo "build-torch2: the bundle did not train 2 ranks under $DDPRUN" >&2; exit 1; }
else
  PYTHON_EXEC="$VENV/bin/python" "$BUNDLE/run" --version >/dev/null
  echo "build-torch2: $DDPRUN or $DATA missing: the bundle was only started, not trained"
fi
echo "build-torch2: $BUILD/bin/ddp-train built against LibTorch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($TORCH) with CUDA and NCCL; its LibTorch tests pass"
