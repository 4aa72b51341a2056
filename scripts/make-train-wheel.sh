#!/usr/bin/env bash
# The ddprun_train wheel (issue 38): ddp-train against PyPI's LibTorch 2.11, built by
# scikit-build-core from packaging/wheel-train/pyproject.toml, then `auditwheel repair` copies in
# the libraries that are neither LibTorch's (the user's torch gives those) nor glibc's.
#
#   scripts/make-train-wheel.sh OUT_DIR
#
# DDPRUN_TORCH2_VENV: the torch 2.11 venv (scripts/install-torch2.sh; its LibTorch is linked).
# DDPRUN_DIST_VENV:   the venv with the pinned packaging tools (scripts/install-dist-tools.sh).
set -euo pipefail
HERE=$(dirname "$(realpath "$0")")
SRC=$(dirname "$HERE")
OUT=$(realpath -m "${1:?usage: make-train-wheel.sh OUT_DIR}")
TORCH2_VENV="${DDPRUN_TORCH2_VENV:-$HOME/.cache/ddprun/venv-torch-2.11.0}"
TOOLS="${DDPRUN_DIST_VENV:-$HOME/.cache/ddprun/venv-dist}"
for python in "$TORCH2_VENV/bin/python" "$TOOLS/bin/python"; do
  [ -x "$python" ] || { echo "make-train-wheel: no $python (scripts/install-deps.sh makes it)" >&2; exit 1; }
done
TORCH=$("$TORCH2_VENV/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')

RAW="$SRC/build-train-wheel/raw"
rm -rf "$RAW"
mkdir -p "$RAW" "$OUT"
# In-tree (no isolation: the tools are pinned in their venv, nothing is downloaded), with the
# build folder in the checkout (pyproject's build-dir) so that ccache reuses `make torch2-build`.
"$TOOLS/bin/python" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps \
  -w "$RAW" \
  --config-settings=cmake.define.Torch_ROOT="$TORCH" \
  --config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" \
  "$SRC/packaging/wheel-train"
wheel=$(ls "$RAW"/ddprun_train-*.whl)

# LibTorch and the CUDA libraries come from the user's torch (its nvidia-* wheels), so they stay
# out; everything else ddp-train links (Abseil, yaml-cpp, libjpeg, libpng, ...) is copied in.
# The tag auditwheel gives is the newest glibc symbol the binary uses: Debian 12's 2.36 here.
PATH="$TOOLS/bin:$PATH" LD_LIBRARY_PATH="$TORCH/lib" "$TOOLS/bin/auditwheel" repair -w "$OUT" \
  --exclude 'libtorch*.so*' --exclude 'libc10*.so*' --exclude 'libcu*.so*' \
  --exclude 'libnccl.so*' --exclude 'libnv*.so*' --exclude 'libgomp*.so*' "$wheel"
ls "$OUT"/ddprun_train-*.whl
