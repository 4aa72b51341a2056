#!/usr/bin/env bash
# The ddprun_train wheel as a user meets it (issue 38, point 3): installed into fresh venvs with pip,
# nothing from this checkout on PATH but ddprun itself.
#   1. a venv that sees the torch 2.11 venv: `ddp-train` is on PATH, names torch 2.11, runs with
#      LibTorch from that torch only (not Debian's 1.13), and trains 2 ranks under ddprun;
#      `python -m ddprun_train` is the same command; `pip uninstall` leaves the venv as it was;
#   2. a venv with Debian's torch 1.13: one line naming both releases, exit 2;
#   3. a venv with no torch: one line, exit 2.
#
#   tests/dist/train_wheel_test.sh WHEEL DDPRUN
set -euo pipefail
WHEEL=$(realpath "$1")
DDPRUN=$(realpath "$2")
TORCH2_VENV="${DDPRUN_TORCH2_VENV:-$HOME/.cache/ddprun/venv-torch-2.11.0}"
DATA=/usr/share/datasets/fashion-mnist
BASE_PYTHON=/usr/bin/python3 # the torch venv's base, and the one Debian's torch 1.13 is for
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

fail() {
  echo "train_wheel_test: FAIL: $*" >&2
  exit 1
}
new_venv() { # NAME [venv flags...]
  local dir="$WORK/$1"
  shift
  "$BASE_PYTHON" -m venv "$@" "$dir"
  echo "$dir"
}
install_wheel() { # VENV [pip flags...]
  local venv=$1
  shift
  "$venv/bin/pip" install --disable-pip-version-check -q --no-index "$@" "$WHEEL"
}

# 1. torch 2.11 seen through a .pth file, as a venv would have it from `pip install torch`; pip's
# resolver must find the wheel's torch==2.11.* requirement met (--no-index: nothing downloaded).
good=$(new_venv good)
site=$("$good/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_site=$("$TORCH2_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_site" > "$site/torch2.pth"
find "$good" -path '*/__pycache__' -prune -o -print | sort > "$WORK/before"
install_wheel "$good"
[ -x "$good/bin/ddp-train" ] || fail "pip install put no ddp-train into $good/bin"
"$good/bin/pip" show ddprun_train | grep -qx 'Requires: torch' || fail "the wheel does not require torch"
version=$("$good/bin/ddp-train" --version) || fail "ddp-train --version failed in a venv with torch 2.11"
[[ $version == *"built for torch 2.11."* ]] || fail "ddp-train --version says: $version"
[ "$("$good/bin/python" -m ddprun_train --version)" = "$version" ] ||
  fail "python -m ddprun_train --version differs from ddp-train --version"
# LibTorch from the torch 2.11 venv only: the libraries the binary resolves under the command's
# environment (the launcher's LD_LIBRARY_PATH), none of them missing or Debian's.
binary=$("$good/bin/python" -c 'import ddprun_train, os; print(os.path.join(os.path.dirname(ddprun_train.__file__), "bin", "ddp-train"))')
libs=$(LD_LIBRARY_PATH="$torch_site/torch/lib" ldd "$binary")
! grep -q 'not found' <<<"$libs" || fail "ddp-train misses libraries: $(grep 'not found' <<<"$libs" | tr -s ' \t\n' ' ')"
grep -q "$torch_site/torch/lib/libtorch_cpu.so" <<<"$libs" || fail "libtorch_cpu does not come from the torch venv"
! grep -E -q '/usr/lib/[^ ]*/lib(torch|c10)' <<<"$libs" || fail "ddp-train loads Debian's LibTorch"
# Two ranks train a few steps under ddprun, ddp-train found on PATH (no path given).
out=$(PATH="$good/bin:/usr/bin:/bin" "$DDPRUN" --standalone --nproc-per-node=2 --quiet --no-python \
  ddp-train mnist --data "$DATA" --epochs 1 --max-steps 10 --test-batch-size 1000 2>&1) ||
  fail "2 ranks of the wheel's ddp-train under ddprun: $out"
grep -q "replicas in sync: .* identical on 2 ranks" <<<"$out" || fail "no replicas-in-sync line: $out"
"$good/bin/pip" uninstall --disable-pip-version-check -q -y ddprun_train
find "$good" -path '*/__pycache__' -prune -o -print | sort > "$WORK/after"
diff "$WORK/before" "$WORK/after" >&2 || fail "pip uninstall left the files above"

# 2. Debian's torch 1.13 (the system site-packages): refused before the binary is loaded.
old=$(new_venv old --system-site-packages)
install_wheel "$old" --no-deps
set +e
err=$("$old/bin/ddp-train" --version 2>&1)
code=$?
set -e
[ "$code" = 2 ] || fail "ddp-train with torch 1.13 exited $code: $err"
[ "$(wc -l <<<"$err")" = 1 ] || fail "ddp-train with torch 1.13 printed more than one line: $err"
[[ $err == *"built for torch 2.11."*"has torch 1.13."* ]] || fail "ddp-train with torch 1.13 says: $err"

# 3. No torch at all.
bare=$(new_venv bare)
install_wheel "$bare" --no-deps
set +e
err=$("$bare/bin/ddp-train" mnist 2>&1)
code=$?
set -e
[ "$code" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && [[ $err == *"finds no torch"* ]] ||
  fail "ddp-train without torch exited $code: $err"
echo "train_wheel_test: OK ($version)"
