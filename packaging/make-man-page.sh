#!/usr/bin/env bash
# One man page, gzipped, from a program's --help and --version (help2man) plus the hand-written
# sections of packaging/man/NAME.h2m. Each SUBCOMMAND's own --help becomes a section of its own,
# so `man ddp-train` documents every flag of `ddp-train mnist` and `ddp-train imagenet`.
#
#   make-man-page.sh PROGRAM INCLUDE.h2m OUT.1.gz [SUBCOMMAND ...]
set -euo pipefail
program=$1 include=$2 out=$3
shift 3
name=$(basename "$program")
# Run by name, not by path: the usage lines then read "ddp-train mnist", not a build folder.
PATH="$(cd "$(dirname "$program")" && pwd):$PATH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$include" "$work/all.h2m"
for sub in "$@"; do
  {
    printf '[%s %s]\n.nf\n' "${name^^}" "${sub^^}"
    # roff: a backslash must be doubled, and a line must not start with . or '.
    "$name" "$sub" --help | sed -e 's/\\/\\\\/g' -e "s/^\([.']\)/\\\\\&\1/"
    printf '.fi\n'
  } >> "$work/all.h2m"
done
help2man --no-info --no-discard-stderr --include="$work/all.h2m" --output="$work/$name.1" "$name"
gzip -9n < "$work/$name.1" > "$out.tmp"
mv "$out.tmp" "$out"
