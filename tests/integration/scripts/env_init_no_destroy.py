# The shape of torch 2.11's test_init_method_env_with_torchelastic script (test/distributed/
# launcher): env:// init with gloo, one all_reduce that derives the world size, and an exit
# without destroy_process_group. ddprun's teardown test (store_teardown_test.cc) runs it many
# times with the ranks exiting in different orders:
#   python env_init_no_destroy.py [rank0-first|rank0-last|together|restart]
# rank0-first: rank 0 exits at once; the others wait until its process is gone (same host), then
# use the job's store once more and exit: the order in which a store hosted by rank 0 left the
# others' clients without a server. rank0-last: rank 0 exits 0.3 s after the others. restart:
# rank 1 fails the first attempt (run it with --max-restarts=1); in the second, rank 0 checks
# that the store holds no key of the first (a cold start's store is fresh) and says so.
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

order = sys.argv[1] if len(sys.argv) > 1 else "together"
rank = int(os.environ["RANK"])
world_size = int(os.environ["WORLD_SIZE"])
dist.init_process_group(backend="gloo", init_method="env://")
t = F.one_hot(torch.tensor(rank), num_classes=world_size)
dist.all_reduce(t)
derived = int(torch.sum(t).item())
if derived != world_size:
    raise RuntimeError(f"derived world size {derived} != {world_size}")
store = dist.distributed_c10d._get_default_store()
if order == "rank0-first":
    if rank == 0:
        store.set("rank0_pid", str(os.getpid()))
    else:
        pid = int(store.get("rank0_pid"))
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the process table: nothing to block on
        store.set(f"after_rank0/{rank}", "x")
        if store.get(f"after_rank0/{rank}") != b"x":
            raise RuntimeError("the store lost a key")
        print(f"rank {rank} used the store after rank 0 exited", flush=True)
elif order == "restart":
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0 and rank == 1:
        raise SystemExit("rank 1 fails the first attempt on purpose")
    if attempt == 1 and rank == 0:
        raw = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None,
                            False)
        stale = [k for k in raw.list_keys() if "attempt_0" in k]
        print(f"keys of attempt 0 in the store: {len(stale)}", flush=True)
elif order == "rank0-last" and rank == 0:
    time.sleep(0.3)  # the order of exits is what the test is about
print(f"rank {rank} done", flush=True)
