#!/usr/bin/env bash
# The venv of the tree's pinned Python tools (scripts/tools-requirements.txt: MkDocs for
# `make docs`, lizard for the code-size test), made once outside the checkout like the torch
# venv, and made again only when the requirements file changes (a copy of it in the venv is the
# stamp). Prints nothing when the venv is current.
#
#   DDPRUN_TOOLS_VENV   where the venv lives (default /root/.cache/ddprun/venv-tools for root,
#                       else ~/.cache/ddprun/venv-tools)
set -euo pipefail

HERE=$(dirname "$(realpath "$0")")
LOCK="$HERE/tools-requirements.txt"
VENV="${DDPRUN_TOOLS_VENV:-$HOME/.cache/ddprun/venv-tools}"
STAMP="$VENV/.requirements"

if cmp -s "$LOCK" "$STAMP" 2>/dev/null && [ -x "$VENV/bin/mkdocs" ]; then
  exit 0
fi
echo "install-tools: making $VENV ($LOCK)"
rm -rf "$VENV"
if ! /usr/bin/python3 -m venv "$VENV"; then
  echo "install-tools: cannot make a venv at $VENV with /usr/bin/python3 -m venv (python3-venv missing?)" >&2
  exit 1
fi
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$LOCK"
"$VENV/bin/pip" check >/dev/null || {
  echo "install-tools: $LOCK does not hold every dependency of its tools ($VENV/bin/pip check)" >&2
  exit 1
}
cp "$LOCK" "$STAMP"
