# The worker of bench/preload/preload_bench.py: imports torch, then records (wall clock) that it
# is ready in BENCH_DIR/ready-<restart>-<rank>. With BENCH_FAIL_AFTER=S, in the first attempt
# rank 0 fails S seconds after it is ready and the others wait to be stopped; every other
# attempt ends at once. Rank 0 records the moment in BENCH_DIR/fail and leaves at once with
# os._exit(1), so that the recorded moment is its exit: a sys.exit would first spend about
# 0.3 s in Python's own teardown of torch, which is the worker's time, not the launcher's.
import os
import time

import torch  # noqa: F401  (the cost being measured)

now = time.time()
d = os.environ["BENCH_DIR"]
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
rank = os.environ["RANK"]
with open(os.path.join(d, "ready-%s-%s" % (restart, rank)), "w") as f:
    f.write(repr(now))
fail_after = os.environ.get("BENCH_FAIL_AFTER")
if fail_after is not None and restart == "0":
    time.sleep(float(fail_after))
    if rank == "0":
        with open(os.path.join(d, "fail"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(600)
