# The shape of torch 2.11's test_init_method_env_with_torchelastic script (test/distributed/
# launcher): env:// init with gloo, one all_reduce that derives the world size, and an exit
# without destroy_process_group; everything in main(), as there. agent_store_test.cc runs it with
# the ranks exiting in different orders:
#   python env_init_no_destroy.py [together|rank0-first|rank0-last|restart] [hold]
# together: the script as it is. rank0-first: rank 0 exits at once; the others wait until its
# process is gone (same host), then use the job's store once more and exit: the order in which a
# store hosted by rank 0 left the others' clients without a server. rank0-last: rank 0 exits
# 0.3 s after the others. restart: rank 1 fails the first attempt (run it with
# --max-restarts=1); in the second, rank 0 checks that the store holds no key of the first (a
# cold start's store is fresh) and says so.
# hold: the all_reduce's Work is kept until the interpreter ends. Without it, torch 2.11 (under
# any launcher, torchrun 2.11 included) sometimes aborts at exit: its gloo worker thread drops the
# finished Work, whose tensor needs the GIL, while the main thread is finalizing the interpreter
# (pthread_exit in a noexcept destructor: "terminate called without an active exception"). The
# tests pass it, to check the store alone; the measurement of that abort runs without it.
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

_held = []


def use_store_after_rank0_exited(store, rank):
    if rank == 0:
        store.set("rank0_pid", str(os.getpid()))
        return
    pid = int(store.get("rank0_pid"))
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the process table: nothing to block on
    store.set(f"after_rank0/{rank}", "x")
    if store.get(f"after_rank0/{rank}") != b"x":
        raise RuntimeError("the store lost a key")
    print(f"rank {rank} used the store after rank 0 exited", flush=True)


def check_fresh_store(rank):
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0 and rank == 1:
        raise SystemExit("rank 1 fails the first attempt on purpose")
    if attempt == 1 and rank == 0:
        raw = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False)
        stale = [k for k in raw.list_keys() if "attempt_0" in k]
        print(f"keys of attempt 0 in the store: {len(stale)}", flush=True)


def main():
    order = sys.argv[1] if len(sys.argv) > 1 else "together"
    hold = "hold" in sys.argv[2:]
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    t = F.one_hot(torch.tensor(rank), num_classes=world_size)
    if hold:
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        _held.append(work)  # freed by the main thread at exit, never by gloo's worker thread
    else:
        dist.all_reduce(t)
    derived = int(torch.sum(t).item())
    if derived != world_size:
        raise RuntimeError(f"derived world size {derived} != {world_size}")
    if order == "rank0-first":
        use_store_after_rank0_exited(dist.distributed_c10d._get_default_store(), rank)
    elif order == "restart":
        check_fresh_store(rank)
    elif order == "rank0-last" and rank == 0:
        time.sleep(0.3)  # the order of exits is what the test is about
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
