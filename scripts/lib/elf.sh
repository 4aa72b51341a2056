# shellcheck shell=bash
# Shell functions on ELF files for the scripts that make and test the static release programs
# (scripts/make-dist.sh, scripts/test-dist.sh, tests/dist/*.sh): source it. readelf reads every
# architecture. Whole outputs are matched, never `readelf | grep -q`: grep's early exit kills
# readelf with SIGPIPE, and under pipefail a check written that way passes a file it should fail.

# What keeps FILE from being a fully static program, on one line ("needs libc.so.6 libm.so.6",
# "has a program interpreter (INTERP)"); nothing when it has no NEEDED entry and no INTERP.
elf_static_problem() {
  local dynamic program needed
  dynamic=$(readelf -dW "$1")
  program=$(readelf -lW "$1")
  needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic" | tr '\n' ' ')
  if [ -n "$needed" ]; then
    echo "needs ${needed% }"
  elif [[ $program == *INTERP* ]]; then
    echo "has a program interpreter (INTERP)"
  fi
}

# The ELF machine of FILE as readelf names it: "AArch64", "Advanced Micro Devices X86-64".
elf_machine() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }

# Whether FILE holds DWARF debug information (a .debug_info section).
elf_has_debug_info() { [[ $(readelf -SW "$1") == *.debug_info* ]]; }
