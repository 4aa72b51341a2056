#!/usr/bin/env python3
"""A worker that fails the same way at its first line (ImportError, as in pytorch issue 60910)
under --max-restarts=10: how many times each launcher starts it, how it exits and how long it
takes to give up. ddprun's crash-loop breaker (default --crash-loop=stop), ddprun with the
breaker off (--crash-loop=retry), and torchrun, each with its defaults otherwise. Prints a
markdown table of medians over --runs alternating runs."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKER = """import os, sys
with open(os.environ["STARTS_FILE"], "a") as f:
    f.write("start\\n")
import ddprun_bench_no_such_module  # fails at the first line, every time
"""


def run_once(argv, starts_file):
    if os.path.exists(starts_file):
        os.unlink(starts_file)
    env = dict(os.environ, STARTS_FILE=starts_file)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=900)
    took = time.monotonic() - t0
    with open(starts_file) as f:
        starts = sum(1 for _ in f)
    return starts, p.returncode, took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--torchrun", required=True)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="crash-loop-bench-")
    worker = os.path.join(tmp, "worker.py")
    with open(worker, "w") as f:
        f.write(WORKER)
    starts_file = os.path.join(tmp, "starts")
    ddprun = os.path.join(a.build, "bin", "ddprun")
    common = ["--standalone", "--nproc-per-node=1", "--max-restarts=10"]
    launchers = {
        "ddprun (--crash-loop=stop, the default)": [ddprun] + common + [worker],
        "ddprun --crash-loop=retry": [ddprun] + common + ["--crash-loop=retry", worker],
        "torchrun": [sys.executable, a.torchrun, "--standalone", "--nproc_per_node=1",
                     "--max_restarts=10", worker],
    }
    results = {name: [] for name in launchers}
    for _ in range(a.runs):
        for name, argv in launchers.items():
            results[name].append(run_once(argv, starts_file))
    print("| launcher | worker starts | exit code | time to give up (median) |")
    print("|---|---|---|---|")
    for name, rs in results.items():
        starts = sorted({r[0] for r in rs})
        codes = sorted({r[1] for r in rs})
        print(f"| {name} | {', '.join(map(str, starts))} | {', '.join(map(str, codes))} | "
              f"{statistics.median(r[2] for r in rs):.2f} s |")


if __name__ == "__main__":
    main()
