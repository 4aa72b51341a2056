"""A tiny deterministic DDP job with ddprun_inprocess (tests/python/inprocess_module_test.cc).

Rank r's batch at step s depends only on (s, r), so a run that loses or repeats no step ends
with the same parameters, bit for bit, as a fault-free run. Prints "rank R step S done" after
every step and writes the final parameters' bytes (hex) to OUT.rankR.

--hold-at K: after step K, print "holding at step K" and block forever (the test SIGSTOPs or
SIGKILLs this worker; its peers block in step K+1's allreduce).

--step-seconds S: sleep S seconds after each step (time for ddprun's --preload spares to get
ready before a fault).

--kill-at K --kill-rank R: rank R SIGKILLs itself right after step K, in the job's first round
only (under ddprun --restart-mode=in-process: the agent replaces it, its peers re-form).

--hostile pickle|size --marker PATH --lie-from-round R: this rank lies in the state agreement
from round R on (hostile_peer.py): what its peers must survive.

--print-advice: print "advice S" after every step, S being checkpoint_interval_advice().
--report-checkpoint: report_checkpoint(0.25) after step 1 (the next step report says 250 ms).

--time-compute: ddprun_inprocess.time_compute(ddp) on every round's DDP model (step reports say
"compute_ms"). --slow-rank R --slow-seconds S: rank R sleeps S seconds before each forward, a
slow node's computation (its peers wait for it in the all-reduce).

--rewrap-at S: build a new DistributedDataParallel before step S, as a recovered round does.
DDP's first iteration uses its initial bucket layout and later ones the rebuilt layout; gloo's
ring sums an element in an order that depends on where it lies in the bucket, so re-wrapping
alone changes the last bits. The fault-free reference for a recovery at step S re-wraps at S.
"""
import argparse
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddprun_inprocess as dip

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--out", required=True)
parser.add_argument("--hold-at", type=int, default=-1)
parser.add_argument("--rewrap-at", type=int, default=-1)
parser.add_argument("--kill-at", type=int, default=-1)
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--kill-rank", type=int, default=-1)
parser.add_argument("--api", choices=["run", "loop"], default="loop")
parser.add_argument("--connect-timeout", type=float, default=30.0)
parser.add_argument("--hostile", choices=["pickle", "size"])
parser.add_argument("--marker", default="")
parser.add_argument("--lie-from-round", type=int, default=1)
parser.add_argument("--print-advice", action="store_true",
                    help="print 'advice S' (checkpoint_interval_advice()) after every step")
parser.add_argument("--report-checkpoint", action="store_true",
                    help="report_checkpoint(0.25) after step 1, as if a save took 250 ms")
parser.add_argument("--time-compute", action="store_true")
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-seconds", type=float, default=0.0)
args = parser.parse_args()
if args.hostile:
    import hostile_peer
    hostile_peer.install(dip, args.hostile, args.marker, args.lie_from_round)

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
# Different initial weights per process would be hidden by DDP's broadcast from rank 0; a
# replacement that took nothing from its peers would still diverge through the optimizer's
# momentum, which DDP does not broadcast.
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
state = {"model": model, "optimizer": opt, "note": "initial"}


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)


def train(rnd):
    assert int(os.environ["RANK"]) == rnd.rank, (os.environ["RANK"], rnd.rank)
    ddp = DDP(model)
    if args.time_compute:
        dip.time_compute(ddp)
    for step in range(rnd.step + 1, args.steps):
        if step == args.rewrap_at:
            ddp = DDP(model)
        opt.zero_grad()
        if rnd.rank == args.slow_rank:
            time.sleep(args.slow_seconds)
        x, y = batch(step, rnd.rank)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        state["note"] = f"after step {step}"
        rnd.step_done(step)
        print(f"rank {rnd.rank} step {step} done", flush=True)
        if args.report_checkpoint and step == 1:
            dip.report_checkpoint(0.25)
        if args.print_advice:
            print(f"advice {dip.checkpoint_interval_advice()}", flush=True)
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
        if (step == args.kill_at and rnd.rank == args.kill_rank and rnd.restart_count == 0):
            os.kill(os.getpid(), 9)
        if step == args.hold_at:
            print(f"rank {rnd.rank} holding at step {step}", flush=True)
            threading.Event().wait()
    return rnd.rank


ctl = dip.connect(args.connect_timeout)
if args.api == "run":
    rank = dip.run(train, backend="gloo", state=state, ctl=ctl)
else:
    rank = None
    for rnd in dip.rounds(ctl, backend="gloo", state=state):
        with rnd:
            rank = train(rnd)
assert state["note"] == f"after step {args.steps - 1}", state["note"]
params = b"".join(p.detach().contiguous().numpy().tobytes() for p in model.parameters())
momenta = b"".join(opt.state[p]["momentum_buffer"].numpy().tobytes()
                   for p in model.parameters())
with open(f"{args.out}.rank{rank}", "w") as f:
    f.write(params.hex() + "\n" + momenta.hex() + "\n")
print(f"rank {rank} finished", flush=True)
dist.destroy_process_group()
sys.exit(0)
