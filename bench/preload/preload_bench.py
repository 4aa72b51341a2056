#!/usr/bin/env python3
"""Warm restarts with --preload=torch, side by side with ddprun without it and with torchrun.

  bench/preload/preload_bench.py --runs 5

A. Restart: one node, 2 workers that `import torch`, --max-restarts=1; in the first attempt rank
   0 fails BENCH_FAIL_AFTER seconds after it is ready (time a real job trains before a failure;
   the spares import meanwhile). Measured: from the failing worker's exit (the moment it
   records) to the last restarted worker having finished `import torch` (wall clock, written by
   the workers themselves: bench/preload/ready_worker.py).
B. First start: two agents on this machine (one worker each) started together, c10d
   rendezvous; from the launch to the last worker having finished `import torch`.
C. Memory of one ready spare: RSS and PSS (/proc/PID/smaps_rollup) of ddprun's spare processes
   during run A.
Launchers alternate inside every iteration; medians reported.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ready_worker.py")
PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_time(path):
    with open(path) as f:
        return float(f.read())


def children_of(pid):
    try:
        return [int(c) for c in open("/proc/%d/task/%d/children" % (pid, pid)).read().split()]
    except OSError:
        return []


def spare_memory(agent_pid, workers):
    """(RSS, PSS) in MiB of each python3 child of ddprun that is not a worker: its spares."""
    out = []
    for c in children_of(agent_pid):
        try:
            if c in workers or open("/proc/%d/comm" % c).read().strip() != "python3":
                continue
            fields = {}
            for line in open("/proc/%d/smaps_rollup" % c):
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":"):
                    fields[parts[0][:-1]] = parts[1]
            out.append((int(fields["Rss"]) / 1024.0, int(fields["Pss"]) / 1024.0))
        except (OSError, KeyError, ValueError):
            pass
    return out


def restart_run(name, argv, fail_after, memory):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, BENCH_DIR=d, BENCH_FAIL_AFTER=str(fail_after), PYTHON_EXEC=PYTHON)
        p = subprocess.Popen(argv + [WORKER], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        if memory is not None:
            # Spares are ready well before the failure; sample them halfway.
            deadline = time.time() + 60
            while not os.path.exists(os.path.join(d, "ready-0-1")) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(fail_after * 0.75)
            memory.extend(spare_memory(p.pid, workers_of(p.pid)))
        rc = p.wait(timeout=300)
        if rc != 0:
            sys.exit("%s: restart run failed (%d): %s" % (name, rc, " ".join(argv)))
        fail = read_time(os.path.join(d, "fail"))
        ready = max(read_time(os.path.join(d, "ready-1-%d" % r)) for r in (0, 1))
        return ready - fail


def workers_of(agent_pid):
    """The worker pids: children of ddprun whose environment has RANK (spares have none)."""
    out = set()
    for c in children_of(agent_pid):
        try:
            env = open("/proc/%d/environ" % c, "rb").read().split(b"\0")
            if any(e.startswith(b"RANK=") for e in env):
                out.add(c)
        except OSError:
            pass
    return out


def first_start_run(name, make_argv):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, BENCH_DIR=d, PYTHON_EXEC=PYTHON)
        port = free_port()
        t0 = time.time()
        logs = [open(os.path.join(d, "agent-%d.log" % node), "w+") for node in (0, 1)]
        procs = [subprocess.Popen(make_argv(port, node) + [WORKER], env=env,
                                  stdout=subprocess.DEVNULL, stderr=logs[node])
                 for node in (0, 1)]
        for node, p in enumerate(procs):
            if p.wait(timeout=300) != 0:
                logs[node].seek(0)
                sys.exit("%s: first-start run failed: %s\n%s" % (
                    name, " ".join(make_argv(port, node)), logs[node].read()[-3000:]))
        return max(read_time(os.path.join(d, "ready-0-%d" % r)) for r in (0, 1)) - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", default=os.path.join(HERE, "..", "..", "build", "bin", "ddprun"))
    ap.add_argument("--torchrun", default=os.path.join(
        HERE, "..", "..", "tests", "integration", "scripts", "torchrun_py311.py"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fail-after", type=float, default=5.0,
                    help="seconds the first attempt runs before rank 0 fails")
    ap.add_argument("--no-torchrun", action="store_true", help="ddprun only (a smoke run)")
    ap.add_argument("--parts", default="restart,first", help="restart, first or both")
    a = ap.parse_args()
    ddprun, torchrun = os.path.abspath(a.ddprun), os.path.abspath(a.torchrun)

    restart = {
        "torchrun": [torchrun, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                     "--monitor_interval=0.1"],
        "ddprun": [ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=1", "--quiet"],
        "ddprun --preload=torch": [ddprun, "--standalone", "--nproc-per-node=2",
                                   "--max-restarts=1", "--quiet", "--preload=torch"],
    }

    def ddprun_pair(extra):
        def argv(port, node):
            return ([ddprun, "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:%d" % port,
                     "--rdzv-id=bench", "--nnodes=2", "--nproc-per-node=1", "--quiet",
                     "--node-rank=%d" % node] + ["--rdzv-conf=is_host=%d" % (node == 0)]
                    + extra)
        return argv

    def torchrun_pair(port, node):
        return [torchrun, "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port,
                "--rdzv_id=bench", "--nnodes=2", "--nproc_per_node=1", "--monitor_interval=0.1"]

    first = {"torchrun": torchrun_pair, "ddprun": ddprun_pair([]),
             "ddprun --preload=torch": ddprun_pair(["--preload=torch"])}
    if a.no_torchrun:
        del restart["torchrun"], first["torchrun"]

    results = {n: {"restart": [], "first": []} for n in restart}
    memory = []
    for i in range(a.runs):
        for name in restart if "restart" in a.parts else []:
            results[name]["restart"].append(restart_run(
                name, restart[name], a.fail_after,
                memory if name == "ddprun --preload=torch" and i == 0 else None))
        for name in first if "first" in a.parts else []:
            results[name]["first"].append(first_start_run(name, first[name]))
        print("run %d/%d done" % (i + 1, a.runs), file=sys.stderr)

    med = statistics.median
    ref = "torchrun" if "torchrun" in results else "ddprun"
    print("## Warm restarts with --preload=torch (medians of %d alternating runs, %d cores)\n"
          % (a.runs, os.cpu_count()))
    print("| launcher | failure -> restarted workers ready | vs %s | first start, 2 agents -> all workers ready |" % ref)
    print("|---|---|---|---|")
    def cell(xs):
        if not xs:
            return "not run"
        return "%.0f ms (%s)" % (med(xs) * 1000, ", ".join("%.0f" % (x * 1000) for x in xs))

    for name, r in results.items():
        ratio = ("%.1fx" % (med(results[ref]["restart"]) / med(r["restart"]))
                 if r["restart"] else "")
        print("| %s | %s | %s | %s |" % (name, cell(r["restart"]), ratio, cell(r["first"])))
    if memory:
        rss = med([m[0] for m in memory])
        pss = med([m[1] for m in memory])
        print("\nOne ready spare (torch imported): RSS %.0f MiB, PSS %.0f MiB (median of %d "
              "spares; PSS counts shared pages pro rata, so it is what the spare adds)."
              % (rss, pss, len(memory)))
    print("\nRestart: 2 workers, rank 0 fails %.0f s after its start (the spares import "
          "meanwhile at SCHED_IDLE). First start: two agents started together on this machine, "
          "one worker each." % a.fail_after)
    print("\nCommand: `bench/preload/preload_bench.py --runs %d%s`"
          % (a.runs, "" if a.parts == "restart,first" else " --parts " + a.parts))


if __name__ == "__main__":
    main()
