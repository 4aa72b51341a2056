"""ddprun_inprocess's state hand-over (issue 43, D8) with CUDA tensors, on a lent GPU machine.

Two processes on one GPU (gloo's CUDA broadcast: NCCL refuses two ranks on one device): rank 0
trains a small model with Adam on the GPU for a few steps, rank 1 starts from other weights;
_broadcast_state carries rank 0's state to rank 1 on the device, and rank 1 checks every tensor
bit for bit against rank 0's checksum, on the GPU. Then the receive bound: on a GPU it includes
the device's free memory (torch.cuda.mem_get_info), and a source announcing more than that is
refused with StateError before anything is allocated. Prints one JSON line per check and
"ok: N checks"; exits 1 naming the first failed check. --cpu: the same on the CPU (a dry run).

    PYTHONPATH=python python3 bench/gpu/inprocess_state_cuda.py [--cpu]
"""
import hashlib
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ddprun_inprocess as dip


def digest(module_or_opt):
    h = hashlib.sha256()
    sd = module_or_opt.state_dict()
    items = sd["state"].items() if "state" in sd else sd.items()
    for k, v in sorted(items, key=lambda kv: str(kv[0])):
        tensors = v.values() if isinstance(v, dict) else [v]
        for t in tensors:
            if torch.is_tensor(t):
                h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def build(seed, device):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def worker(rank, init_file, use_cpu, out):
    device = torch.device("cpu") if use_cpu else torch.device("cuda", 0)
    if not use_cpu:
        torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    model, opt = build(rank, device)
    if rank == 0:
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(32, 64, device=device)).pow(2).mean().backward()
            opt.step()
    sums = [None, None]
    dist.all_gather_object(sums, (digest(model), digest(opt)))
    state = {"model": model, "optimizer": opt}
    t0 = time.perf_counter()
    dip._broadcast_state(state, 0, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    if rank == 1:
        result = {
            "device": str(device),
            "model_bit_for_bit": digest(model) == sums[0][0],
            "optimizer_bit_for_bit": digest(opt) == sums[0][1],
            "params_on_device": all(p.device == device for p in model.parameters()),
            "optimizer_state_on_device": all(
                t.device == device for s in opt.state.values() for t in s.values()
                if torch.is_tensor(t) and t.dim() > 0),
            "broadcast_s": round(took, 4),
        }
        limit = dip._receive_limit(device, None)
        result["receive_limit_bytes"], result["receive_limit_why"] = limit
        header = [dip._STATE_MAGIC, dip.STATE_FORMAT_VERSION, 0, 100, limit[0], 1]
        try:
            dip._check_header(header, 0, limit)
            result["oversized_refused"] = False
        except dip.StateError as e:
            result["oversized_refused"] = True
            result["oversized_error"] = str(e)
        with open(out, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    use_cpu = "--cpu" in sys.argv
    if not use_cpu and not torch.cuda.is_available():
        print("no CUDA here: run with --cpu for the dry run", flush=True)
        return 1
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        mp.spawn(worker, args=(os.path.join(d, "init"), use_cpu, out), nprocs=2)
        with open(out) as f:
            result = json.load(f)
    print(json.dumps(result), flush=True)
    checks = ["model_bit_for_bit", "optimizer_bit_for_bit", "params_on_device",
              "optimizer_state_on_device", "oversized_refused"]
    failed = [c for c in checks if not result.get(c)]
    if not use_cpu and "free memory on cuda" not in result["receive_limit_why"]:
        print(f"note: the bound was {result['receive_limit_why']}, not the GPU's free memory",
              flush=True)
    if failed:
        print(f"FAILED: {failed}", flush=True)
        return 1
    print(f"ok: {len(checks)} checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
