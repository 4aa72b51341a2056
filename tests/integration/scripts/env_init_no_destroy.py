# The shape of torch 2.11's test_init_method_env_with_torchelastic script (test/distributed/
# launcher): env:// init with gloo, one all_reduce that derives the world size, and an exit
# without destroy_process_group. ddprun's teardown test (store_teardown_test.cc) runs it many
# times with the ranks exiting in different orders:
#   python env_init_no_destroy.py [rank0-first|rank0-last|together]
# rank0-first: rank 0 exits at once and the others 0.3 s later (the order in which a store
# hosted by rank 0 left the others' clients without a server); rank0-last: the reverse.
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
late = (order == "rank0-first" and rank != 0) or (order == "rank0-last" and rank == 0)
if late:
    time.sleep(0.3)  # the order of exits is what the test is about
print(f"rank {rank} done", flush=True)
