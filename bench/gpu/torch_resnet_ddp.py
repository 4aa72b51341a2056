#!/usr/bin/env python3
"""The reference for `ddp-train imagenet` on a GPU: PyTorch's own DDP ResNet under torchrun.

  torchrun --standalone --nproc-per-node=1 torch_resnet_ddp.py --data DIR --arch resnet50 \
      --batch-size 256 --epochs 4 --workers 14 --amp --channels-last --metrics-file m.jsonl

What pytorch/examples' imagenet/main.py does in training, with ddp-train's settings: a
torchvision model, DistributedDataParallel with NCCL, ImageFolder with RandomResizedCrop(224),
horizontal flip and normalisation decoded by DataLoader worker processes (pinned memory), SGD
with momentum 0.9 and weight decay 1e-4, bf16 autocast (--amp) and channels-last. One JSON line
per epoch: the images/s of that epoch (samples over the epoch's wall time, data loading
included), as ddp-train's --metrics-file writes. --synthetic trains on one random batch kept on
the GPU instead: the ceiling that no input pipeline can beat.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torchvision
import torchvision.transforms as T
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=False)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=32, help="with --synthetic")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--metrics-file")
    a = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", local_rank)
    model = getattr(torchvision.models, a.arch)(num_classes=1000).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    if a.synthetic:
        x0 = torch.randn(a.batch_size, 3, 224, 224, device=device)
        y0 = torch.randint(0, 1000, (a.batch_size,), device=device)
        loader, sampler = None, None
    else:
        norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
        ds = torchvision.datasets.ImageFolder(
            a.data, T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm]))
        sampler = torch.utils.data.distributed.DistributedSampler(ds)
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler,
                                             num_workers=a.workers, pin_memory=True, drop_last=False)
    metrics = open(a.metrics_file, "a") if a.metrics_file and rank == 0 else None
    for epoch in range(1, a.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        torch.cuda.synchronize()
        t0 = time.time()
        samples = 0
        batches = ((x0, y0) for _ in range(a.steps_per_epoch)) if a.synthetic else loader
        for x, y in batches:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            if a.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.amp):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            samples += x.shape[0] * world
        torch.cuda.synchronize()
        dt = time.time() - t0
        line = {"epoch": epoch, "images_per_s": samples / dt, "train_s": dt,
                "loss": float(loss), "world_size": world}
        if rank == 0:
            print(json.dumps(line), flush=True)
            if metrics:
                metrics.write(json.dumps(line) + "\n")
                metrics.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
