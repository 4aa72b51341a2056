#!/usr/bin/env bash
# Runs a command where aarch64 programs run like native ones: in a user, mount and PID namespace
# of its own (the PID namespace lets the command mount a /proc, as tests/dist/run_static_tests.sh
# does), with a private binfmt_misc (Linux >= 6.7 gives each user namespace its own) in which
# qemu-user (Debian's qemu-user-static) is registered for aarch64 ELF files. Any process of the
# command, an emulated one too, can then execve an aarch64 program: tests/dist/aarch64_test.sh's
# emulated agents start aarch64 workers. Dynamic aarch64 programs find their loader and
# libraries in SYSROOT (QEMU_LD_PREFIX). Nothing changes outside the namespace: the host's
# binfmt_misc is untouched.
#
#   tests/dist/with_aarch64_binfmt.sh SYSROOT COMMAND [ARG...]
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 SYSROOT COMMAND [ARG...]" >&2
  exit 2
fi
sysroot=$1
shift
if [ ! -f "$sysroot/.complete" ]; then
  echo "with_aarch64_binfmt: $sysroot is not an arm64 sysroot (scripts/make-arm64-sysroot.sh)" >&2
  exit 2
fi
qemu=$(command -v qemu-aarch64-static) || {
  echo "with_aarch64_binfmt: qemu-aarch64-static not found (apt install qemu-user-static)" >&2
  exit 1
}

if [ "${DDPRUN_AARCH64_BINFMT_NS:-}" != 1 ]; then
  exec env DDPRUN_AARCH64_BINFMT_NS=1 unshare --user --map-root-user --mount --pid --fork \
    --mount-proc -- "$0" "$sysroot" "$@"
fi

binfmt=/proc/sys/fs/binfmt_misc
if ! mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null; then
  echo "with_aarch64_binfmt: cannot mount a private binfmt_misc in a user namespace" \
       "(needs Linux >= 6.7; this is $(uname -r))" >&2
  exit 1
fi
# The ELF header of an aarch64 executable: 64-bit, little-endian, e_machine 183 (EM_AARCH64).
# F: qemu is opened now, so it runs in any root. P: argv[0] is passed on as it was.
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
printf '%s' ":qemu-aarch64:M::$magic:$mask:$qemu:FP" >"$binfmt/register"
export QEMU_LD_PREFIX="$sysroot"
exec "$@"
