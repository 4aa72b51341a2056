#!/usr/bin/env bash
# The virtual environment with torch 2.11.0 (scripts/torch2-requirements.txt) that the torch 2.x
# tests run against: torchrun 2.11 as the reference launcher, torch 2.11 Python workers, and
# LibTorch 2.11 for `make torch2-build`. Called by scripts/install-deps.sh (not with --demo).
#
#   DDPRUN_TORCH2_VENV   where the venv lives (default ~/.cache/ddprun/venv-torch-2.11.0: outside
#                        the checkout, so that every clone reuses it; about 4.6 GB)
#   DDPRUN_NO_TORCH2=1   do not install it; the torch 2.x tests then report SKIPPED with this
#                        reason (without it, a venv that is missing or wrong fails them)
#
# Reused when it holds torch 2.11.0 and was made from this very lock file (a hash is kept in
# it); otherwise made again. Debian's python3 (the one Debian's torch 1.13 uses) is the base.
set -euo pipefail
HERE=$(dirname "$(realpath "$0")")
LOCK="$HERE/torch2-requirements.txt"
VERSION=2.11.0
VENV="${DDPRUN_TORCH2_VENV:-$HOME/.cache/ddprun/venv-torch-$VERSION}"
BASE_PYTHON=/usr/bin/python3

if [ "${DDPRUN_NO_TORCH2:-}" = 1 ]; then
  echo "install-torch2: skipped (DDPRUN_NO_TORCH2=1): the torch $VERSION tests will report SKIPPED"
  exit 0
fi

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
has_version() {
  "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$VERSION')" \
    >/dev/null 2>&1
}
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.ddprun-lock-sha256" 2>/dev/null)" = "$want" ] &&
   has_version; then
  echo "install-torch2: torch $VERSION present in $VENV"
  exit 0
fi

start=$(date +%s)
echo "install-torch2: making $VENV with torch $VERSION (a few GB from PyPI, once)"
mkdir -p "$(dirname "$VENV")"
if ! "$BASE_PYTHON" -m venv --clear "$VENV"; then
  echo "install-torch2: cannot make a venv at $VENV with $BASE_PYTHON -m venv (python3-venv missing?)" >&2
  exit 1
fi
if ! "$VENV/bin/pip" install --disable-pip-version-check -q -r "$LOCK"; then
  echo "install-torch2: pip could not install $LOCK into $VENV (see above); set DDPRUN_NO_TORCH2=1 to test without torch $VERSION" >&2
  exit 1
fi
if ! has_version; then
  echo "install-torch2: $VENV/bin/python does not import torch $VERSION after the install" >&2
  exit 1
fi
echo "$want" > "$VENV/.ddprun-lock-sha256"
echo "install-torch2: torch $VERSION installed into $VENV ($(du -sh "$VENV" | cut -f1)) in $(( $(date +%s) - start )) s"
