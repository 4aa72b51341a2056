# The Python worker of bench/hang/hang_bench.py. Writes its start time first (before importing
# anything heavy), so the bench sees when a new worker group is running.
#   file-timer: rank 1 enters a 2 s torch FileTimer scope and never leaves it
#   silent:     rank 1 stops printing; the other ranks print every 0.1 s
# Later attempts exit at once.
import os
import sys
import time

t_start = time.time()
out = os.environ["HANG_BENCH_OUT"]
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
mode = sys.argv[1]


def put(name, value):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(repr(value))
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


put(f"start-{attempt}-{rank}", t_start)
if attempt > 0:
    sys.exit(0)
if mode == "file-timer":
    from torch.distributed.elastic.timer import FileTimerClient, configure, expires

    configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
    if rank == 1:
        put("hung", time.time() + 2.0)  # when the scope expires
        with expires(after=2, scope="bench_scope"):
            time.sleep(120)
    time.sleep(120)
else:
    if rank == 1:
        print("rank 1 goes silent", flush=True)  # its last sign of life
        put("hung", time.time())
        time.sleep(120)
    for _ in range(1200):
        print(f"rank {rank} alive", flush=True)
        time.sleep(0.1)
