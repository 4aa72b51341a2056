# What a torch.distributed script sees of its launcher (test helper for the side-by-side tests
# of ddprun and torchrun, torch 1.13 and 2.x): writes OUT_DIR/report<RANK>.json.
#
#   torch_worker_report.py OUT_DIR env         init_process_group("gloo") from the environment
#   torch_worker_report.py OUT_DIR tcp         init_method=tcp://MASTER_ADDR:MASTER_PORT, rank and
#                                              world passed explicitly. Under torchrun 2.x the
#                                              workers connect to the agent's store there
#                                              (TORCHELASTIC_USE_AGENT_STORE=True; any other port
#                                              hangs: nobody hosts it); so do they under ddprun,
#                                              whose agent hosts the store there too.
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.elastic.utils.logging import get_logger


@record
def main():
    out_dir, how = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if how == "env":
        dist.init_process_group("gloo")
    else:
        dist.init_process_group(
            "gloo",
            init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
            rank=rank,
            world_size=world,
        )
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    gathered = [None] * world
    dist.all_gather_object(gathered, int(os.environ["LOCAL_RANK"]))
    launched = getattr(dist, "is_torchelastic_launched", None)
    report = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "all_reduce": t.item(),
        "local_ranks": gathered,
        "is_torchelastic_launched": launched() if launched else None,
        "logger": get_logger("worker").name,
        "backend": dist.get_backend(),
    }
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, "report%d.json" % rank), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
