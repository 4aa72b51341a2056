#!/usr/bin/env bash
# No production function over 100 lines and no production file over 700 lines (issue 39): a
# reader finds one concept per file and a function fits on a screen. Production is every .cc
# and .h that git tracks outside tests/ (the tests' fixtures and tables read top to bottom) and
# bench/ (measurement programs that are run, not linked into anything users install).
#
# Functions are measured by lizard (pinned in scripts/tools-requirements.txt, installed in
# $DDPRUN_TOOLS_VENV, default ~/.cache/ddprun/venv-tools, by scripts/install-deps.sh): its
# "length" is the lines from a function's signature to its closing brace.
#
#   tests/layering/code_size_test.sh SOURCE_DIR
#
# Exceptions are listed below with their reason; there are none today. A missing lizard fails
# the test (it does not skip): run scripts/install-deps.sh.
set -euo pipefail

readonly MAX_FUNCTION_LINES=100
readonly MAX_FILE_LINES=700
# "path" for a file, "path:function" for a function (lizard's qualified name), each with why.
readonly EXCEPTIONS=(
)

cd "${1:?usage: code_size_test.sh SOURCE_DIR}"
venv="${DDPRUN_TOOLS_VENV:-$HOME/.cache/ddprun/venv-tools}"
lizard="$venv/bin/lizard"
if [[ ! -x "$lizard" ]]; then
  echo "code_size_test: $lizard is missing: run scripts/install-deps.sh" >&2
  exit 1
fi

excepted() {
  local entry
  for entry in "${EXCEPTIONS[@]}"; do
    [[ "$entry" == "$1" ]] && return 0
  done
  return 1
}

mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v -e '^tests/' -e '^bench/')
bad=0

while read -r lines path; do
  [[ "$path" == total ]] && continue
  if ((lines > MAX_FILE_LINES)) && ! excepted "$path"; then
    echo "$path: $lines lines (at most $MAX_FILE_LINES)"
    bad=1
  fi
done < <(wc -l "${files[@]}")

# One line per function: NLOC CCN tokens params length location, where location is
# "name@start-end@path".
while read -r _ _ _ _ length location; do
  name="${location%%@*}"
  path="${location##*@}"
  if ((length > MAX_FUNCTION_LINES)) && ! excepted "$path:$name"; then
    echo "$path: $name is $length lines (at most $MAX_FUNCTION_LINES)"
    bad=1
  fi
done < <("$lizard" --csv "${files[@]}" | awk -F, '{ gsub(/"/, ""); print $1, $2, $3, $4, $5, $6 }')

if ((bad)); then
  echo "code_size_test: split the functions and files above by concept (or name an exception" \
    "with its reason in tests/layering/code_size_test.sh)" >&2
  exit 1
fi
echo "code_size_test: ${#files[@]} files, none over $MAX_FILE_LINES lines, no function over" \
  "$MAX_FUNCTION_LINES lines"
