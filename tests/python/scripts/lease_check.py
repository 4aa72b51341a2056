"""ddprun_inprocess's side of ddprun's local lease (DDPRUN_LEASE_FD), without an agent: the test
writes the lease page as the agent would (common/lease_page.h: "DDPL", version 1, valid_until in
CLOCK_MONOTONIC ns at byte 8) and moves valid_until itself (tests/python/inprocess_module_test.cc
runs it). A valid lease changes nothing; past it step_done counts nothing and gives the held
state up (step -1), raising LeaseExpired in-process (swallowed by ``with rnd:``) and exiting 75
without a control channel; may_commit() says False; a bad variable is an error naming it.
Prints "ok: N checks" and exits 0, or names the first failed check and exits 1.
"""
import mmap
import os
import struct
import sys
import tempfile
import time

import torch.distributed as dist

fd = os.memfd_create("test-lease", 0)
os.ftruncate(fd, 4096)
page = mmap.mmap(fd, 4096)
struct.pack_into("<IIq", page, 0, 0x4C504444, 1, 0)


def set_valid_until(ns):
    struct.pack_into("<q", page, 8, ns)


os.environ["DDPRUN_LEASE_FD"] = str(fd)
import ddprun_inprocess as dip  # noqa: E402  (after the variable, as under ddprun)
import script_checks  # noqa: E402
from script_checks import check  # noqa: E402



class StubControl:
    """What Round asks of a control channel while the round goes on."""

    def round_over(self, number):
        return False


class StubInfo:
    round = 3
    local_rank = 0
    restart_count = 0


with tempfile.TemporaryDirectory() as d:
    dist.init_process_group("gloo", init_method=f"file://{d}/store", rank=0, world_size=1)

    set_valid_until(time.monotonic_ns() + 60 * 10**9)
    check(dip.lease_valid(), "a lease 60 s ahead is valid")
    cold = dip.Round(None, None, -1)
    cold.step_done(0)
    check(cold.step == 0 and cold.may_commit(), "a valid lease counts the step")

    set_valid_until(time.monotonic_ns() - 1)
    check(not dip.lease_valid() and not cold.may_commit(), "an expired lease is not valid")
    try:
        cold.step_done(1)
        check(False, "cold: step_done past the lease returned")
    except SystemExit as e:
        check(e.code == dip.LEASE_EXPIRED_EXIT == 75, f"cold: exit code {e.code}, not 75")
    check(cold.step == -1, f"cold: the held step is {cold.step}, not given up (-1)")

    inproc = dip.Round(StubControl(), StubInfo(), 5)
    with inproc:
        inproc.step_done(6)
        check(False, "in-process: step_done past the lease returned")
    check(isinstance(inproc.failed, dip.LeaseExpired) and isinstance(inproc.failed, dip.RoundOver),
          f"in-process: the round failed with {inproc.failed!r}, not LeaseExpired")
    check("not committing step 6" in str(inproc.failed), f"message: {inproc.failed}")
    check(inproc.step == -1, f"in-process: the held step is {inproc.step}, not -1")

    set_valid_until(time.monotonic_ns() + 60 * 10**9)  # the agent renewed
    again = dip.Round(StubControl(), StubInfo(), 6)
    again.step_done(7)
    check(again.step == 7, "a renewed lease counts steps again")
    dist.destroy_process_group()

# Without the variable (torchrun, other backends): always valid.
dip._lease_page = None
del os.environ["DDPRUN_LEASE_FD"]
check(dip.lease_valid(), "no DDPRUN_LEASE_FD: valid")

dip._lease_page = None
os.environ["DDPRUN_LEASE_FD"] = "seven"
try:
    dip.lease_valid()
    check(False, "a bad DDPRUN_LEASE_FD was accepted")
except ValueError as e:
    check("DDPRUN_LEASE_FD=seven" in str(e), f"the error names the variable: {e}")

print(f"ok: {script_checks.count()} checks", flush=True)
