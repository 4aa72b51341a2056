# A small DistributedDataParallel job for ddprun's demo: each worker trains a linear model on its
# shard of a synthetic regression problem with gloo; gradients are all-reduced by DDP, so every
# rank ends with identical weights. Run it the torchrun way:
#   ddprun --standalone --nproc-per-node=2 examples/allreduce_demo.py --steps 50
import argparse, os, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
a = p.parse_args()
t0 = time.time()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
true_w = torch.tensor([[2.0, -3.0, 0.5]])
model = DDP(torch.nn.Linear(3, 1, bias=False))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(100 + rank)  # each rank its own data shard
for step in range(a.steps):
    x = torch.randn(64, 3, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x @ true_w.T)
    opt.zero_grad(); loss.backward(); opt.step()
w = model.module.weight.detach().clone()
gathered = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(gathered, w)
same = all(torch.equal(gathered[0], t) for t in gathered)
if rank == 0:
    print(f"world={world} steps={a.steps} loss={loss.item():.5f} weights={w.flatten().tolist()} "
          f"identical_on_all_ranks={same} elapsed={time.time() - t0:.2f}s", flush=True)
dist.destroy_process_group()
if not same:
    raise SystemExit("weights differ across ranks")
