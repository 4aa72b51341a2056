# Rank 1 stops printing and sleeps (a hang that says nothing); the other ranks print a line
# every 0.2 s, so only rank 1 is silent. Every later attempt finishes at once.
# With --ignore-signals every rank ignores SIGABRT, SIGTERM and SIGINT, as a worker with broken
# signal handling would.
import os
import signal
import sys
import time

if "--ignore-signals" in sys.argv:
    for sig in (signal.SIGABRT, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)

rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"rank {rank} attempt {attempt}", flush=True)


def wait_for_a_peer_that_never_answers():
    time.sleep(120)


if attempt == 0:
    if rank == 1:
        wait_for_a_peer_that_never_answers()
    for i in range(600):
        sys.stdout.write(f"\rrank {rank}: {i}")  # a progress bar: '\r' and no newline
        sys.stdout.flush()
        time.sleep(0.2)
print(f"rank {rank} done", flush=True)
