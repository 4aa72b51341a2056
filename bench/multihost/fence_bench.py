#!/usr/bin/env python3
"""Fencing, rejoin and server-restart latency on hosts made from network namespaces (root only).

  sudo bench/multihost/fence_bench.py --build build --runs 5

Runs the multi-host test that cuts one of three agents' links for longer than the lease
(keep_alive_interval 0.5 s x 3 = 1.5 s, --nnodes=2:3) and heals it, and collects what it
measures: cut -> the cut-off host's worker stopped (fencing), cut -> the survivors' new group
running, heal -> the world of 3 running again (rejoin). Then the test that kill -9s ddprun-rdzv
and starts a new one on its address 0.5 s later: kill -> every agent re-registered with round 1
going on (no worker restarted; the test checks the workers' pids). Medians over --runs.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

TEST = "MultiHostTest.ALinkCutLongerThanTheLeaseFencesRestartsTheSurvivorsAndTheHostRejoins"
SERVER_TEST = "MultiHostTest.ARestartedServerTakesTheRunBackWithoutRestartingAWorker"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(here, "..", "..", "build"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    binary = os.path.join(a.build, "tests", "multihost_integration_test")
    fence, survivors, rejoin = [], [], []
    for i in range(a.runs):
        out = subprocess.run([binary, "--gtest_filter=" + TEST], capture_output=True, text=True)
        text = out.stdout + out.stderr
        if out.returncode != 0 or "SKIPPED" in text:
            sys.exit(f"run {i + 1}: the test did not pass:\n{text[-3000:]}")
        m = re.search(r"worker stopped: ([\d.]+) s; survivors restarted: ([\d.]+) s", text)
        r = re.search(r"heal -> world of 3 running again: ([\d.]+) s", text)
        fence.append(float(m.group(1)))
        survivors.append(float(m.group(2)))
        rejoin.append(float(r.group(1)))
        print(f"run {i + 1}: fence {fence[-1]:.3f} s, survivors {survivors[-1]:.3f} s, "
              f"rejoin {rejoin[-1]:.3f} s", file=sys.stderr)

    resumed = []
    for i in range(a.runs):
        out = subprocess.run([binary, "--gtest_filter=" + SERVER_TEST], capture_output=True,
                             text=True)
        text = out.stdout + out.stderr
        if out.returncode != 0 or "SKIPPED" in text:
            sys.exit(f"server run {i + 1}: the test did not pass:\n{text[-3000:]}")
        m = re.search(r"round 1 going on: ([\d.]+) s", text)
        resumed.append(float(m.group(1)))
        print(f"server run {i + 1}: kill -> re-registered {resumed[-1]:.3f} s", file=sys.stderr)

    def fmt(v):
        return f"{statistics.median(v) * 1000:.0f} ms ({min(v) * 1000:.0f}-{max(v) * 1000:.0f})"

    print("| measure (lease 1.5 s, heartbeat 0.5 s) | median (min-max) | target |")
    print("|---|---|---|")
    print(f"| cut -> cut-off host's worker stopped (fencing) | {fmt(fence)} | lease + 1.5 s |")
    print(f"| cut -> survivors' new group running | {fmt(survivors)} | lease + 1.5 s |")
    print(f"| heal -> world of 3 running again (rejoin) | {fmt(rejoin)} | 6 s |")
    print(f"| ddprun-rdzv kill -9, new one 0.5 s later -> all 3 agents re-registered, round 1 "
          f"going on, no worker restarted | {fmt(resumed)} | no worker restart |")


if __name__ == "__main__":
    main()
