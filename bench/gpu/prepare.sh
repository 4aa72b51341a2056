#!/usr/bin/env bash
# Makes .gpu/ in the repository root: what bench/gpu/run.sh needs on a GPU machine that has
# PyTorch 2.11 with CUDA but none of this project's build dependencies. Run it here, after
# `make` (build/) and `make torch2-build` (build-torch2/); .gpu/ is ignored by git and travels
# to the device machine as a carried path.
#
#   .gpu/bin/ddprun, .gpu/bin/eu-stack   RPATH $ORIGIN/../lib (patchelf): the workers inherit
#                                        no LD_LIBRARY_PATH from them
#   .gpu/lib/                            their libraries but the C/C++ runtimes (Abseil, yaml-cpp,
#                                        elfutils' libdw ...)
#   .gpu/ddp-train-torch2/               the bundle of scripts/build-torch2.sh (ddp-train against
#                                        LibTorch 2.11 + CUDA; `run` puts that machine's torch/lib
#                                        first)
# Debug sections are stripped (symbols stay, for stacks): the whole is about 30 MB.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
TORCH2=${TORCH2_BUILD_DIR:-$ROOT/build-torch2}
OUT=$ROOT/.gpu
command -v patchelf >/dev/null || { echo "prepare.sh: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
[ -x "$BUILD/bin/ddprun" ] || { echo "prepare.sh: no $BUILD/bin/ddprun (make)" >&2; exit 2; }
[ -x "$TORCH2/ddp-train-torch2/ddp-train" ] ||
  { echo "prepare.sh: no $TORCH2/ddp-train-torch2 (make torch2-build)" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
runtime='/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt)\.so'
for prog in "$BUILD/bin/ddprun" "$(command -v eu-stack)"; do
  cp "$prog" "$OUT/bin/"
  ldd "$prog" | awk '/=> \// {print $3}' | grep -Ev "$runtime" | xargs -r cp -L -t "$OUT/lib"
done
strip --strip-debug "$OUT/bin/ddprun"
# DT_RPATH (--force-rpath), not DT_RUNPATH: the loader applies it to the libraries' own needs too.
for f in "$OUT/bin/ddprun" "$OUT/bin/eu-stack"; do
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "$OUT"/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$f"; done
cp -r "$TORCH2/ddp-train-torch2" "$OUT/"
strip --strip-debug "$OUT/ddp-train-torch2/ddp-train"
du -sh "$OUT"
