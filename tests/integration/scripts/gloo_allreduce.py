# All-reduces the rank over gloo and writes "<world size> <sum>" to OUT_DIR/rank<RANK>.txt
# (test helper for the multi-node modes).
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], "rank%d.txt" % dist.get_rank()), "w") as f:
    f.write("%d %d\n" % (dist.get_world_size(), int(t.item())))
dist.destroy_process_group()
