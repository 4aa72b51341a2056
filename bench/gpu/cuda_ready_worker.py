# The worker of bench/gpu/gpu_bench.py's preload part: imports torch, initialises CUDA on its
# LOCAL_RANK device (BENCH_DEVICE=cuda; cpu in a dry run), then records (wall clock) that it is
# ready in BENCH_DIR/ready-<restart>-<rank> and its pid in BENCH_DIR/pid-<restart>-<rank>. In the
# first attempt rank 0 fails BENCH_FAIL_AFTER seconds after it is ready (recording the moment in
# BENCH_DIR/fail and leaving with os._exit(1): the recorded moment is its exit) and the others
# wait to be stopped; every other attempt ends at once.
import os
import time

import torch

if os.environ.get("BENCH_DEVICE", "cuda") == "cuda":
    # Workers share the GPUs there are (two on a machine with one).
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
now = time.time()
d = os.environ["BENCH_DIR"]
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
rank = os.environ["RANK"]
with open(os.path.join(d, "pid-%s-%s" % (restart, rank)), "w") as f:
    f.write(str(os.getpid()))
with open(os.path.join(d, "ready-%s-%s" % (restart, rank)), "w") as f:
    f.write(repr(now))
if restart == "0":
    time.sleep(float(os.environ.get("BENCH_FAIL_AFTER", "4")))
    if rank == "0":
        with open(os.path.join(d, "fail"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(600)
