# A worker using torch's own FileTimer client, unchanged from what a torchrun user writes. In
# attempt HANG_ATTEMPT (default 0, the first), rank 1 enters a 2-second scope and never leaves
# it; the other ranks wait as peers in a collective would. Attempts before it end with rank 0
# failing after 3 s; every later attempt finishes at once.
import os
import sys
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
scope = sys.argv[1] if len(sys.argv) > 1 else None
print(f"rank {rank} attempt {attempt}", flush=True)


def load_batch_forever():
    time.sleep(120)


hang_attempt = int(os.environ.get("HANG_ATTEMPT", "0"))
if attempt < hang_attempt:
    time.sleep(3)
    sys.exit(1 if rank == 0 else 0)
if attempt == hang_attempt:
    if rank == 1:
        with expires(after=2, scope=scope):
            load_batch_forever()
    else:
        time.sleep(120)
print(f"rank {rank} done", flush=True)
