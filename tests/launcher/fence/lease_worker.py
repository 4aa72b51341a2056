"""A worker that commits as fast as it can, each commit only while ddprun's local lease is valid
(DDPRUN_LEASE_FD; common/lease_page.h: valid_until, CLOCK_MONOTONIC ns, at byte 8): a "step"
line in LOG and a "checkpoint" (a file written then renamed over its pointer, CKPT-<host>),
both carrying "checked=NS", the CLOCK_MONOTONIC time of the lease check that let it through (a
process stopped between its check and its writes finishes a commit decided before the stop).
Past the lease it logs "lease-expired" and exits 75, as ddp-train does. Without the variable
it commits without asking. Runs until DONE exists. Standard library only.

usage: lease_worker.py LOG DONE CKPT
"""
import mmap
import os
import struct
import sys
import time

log, done, ckpt = sys.argv[1:4]
host = os.uname().nodename
tag = (f"host={host} restart={os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
       f"world={os.environ.get('WORLD_SIZE')}")


def out(line):
    with open(log, "a") as f:
        f.write(line + "\n")


fd = os.environ.get("DDPRUN_LEASE_FD", "")
page = mmap.mmap(int(fd), 4096, mmap.MAP_SHARED, mmap.PROT_READ) if fd else None
out(f"start {tag} lease={'yes' if page is not None else 'no'}")
step = 0
while not os.path.exists(done):
    checked = time.monotonic_ns()
    if page is not None and checked >= struct.unpack_from("<q", page, 8)[0]:
        out(f"lease-expired {tag} step={step}")
        sys.exit(75)
    step += 1
    out(f"step {tag} {step} checked={checked}")
    pointer = f"{ckpt}-{host}"
    with open(pointer + ".tmp", "w") as f:
        f.write(f"{step} checked={checked}\n")
    os.replace(pointer + ".tmp", pointer)
    time.sleep(0.01)
sys.exit(0)
