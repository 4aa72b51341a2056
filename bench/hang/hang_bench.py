#!/usr/bin/env python3
"""Hang detection latency, ddprun vs torchrun side by side, alternating in one run.

  bench/hang/hang_bench.py --build build --torchrun tests/integration/scripts/torchrun_py311.py --runs 5

(a) torch FileTimer: 2 workers, rank 1 holds a 2 s scope forever (TORCHELASTIC_ENABLE_FILE_TIMER=1
    for both launchers). Latency: scope expiry -> first worker of the new group started; ddprun's
    includes taking the stacks of both workers.
(b) --hang-timeout=2 on an output-silent worker (rank 1 stops printing, rank 0 prints every
    0.1 s). Latency: silence + timeout -> first worker of the new group started. torchrun has no
    such detection: it is run with the same worker and a bound, and reported as detected or not.
(c) ddp-train mnist, 2 agents x 2 workers on the built-in rendezvous server, global rank 3 hangs
    after step 5 (--fault=hang@5:3), its peers wait in the next all-reduce; --hang-timeout=3.
    Latency: the fault's line on the console -> both agents' "starting" line of the next round,
    minus the timeout (stacks of 2 x 2 workers included). torchrun with the same job and a bound.
Medians over --runs. Target (issue 10): timeout + at most 1 s.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's, with python3-torch
BOUND_S = 20.0
DATA = "/usr/share/datasets/fashion-mnist"


class Watched:
    """A process group whose merged output lines are stamped (time.time()) on arrival."""

    def __init__(self, argv, env):
        self.lines = []
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in self.p.stdout:
            self.lines.append((time.time(), raw.decode(errors="replace")))

    def first(self, pattern, after=0.0):
        for t, l in list(self.lines):
            if t >= after and re.search(pattern, l):
                return t
        return None

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


def wait_for(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    return None


def read_float(path):
    try:
        return float(open(path).read())
    except (OSError, ValueError):
        return None


def python_case(kind, mode, a, tmp):
    """(a) and (b): seconds from the hang's deadline to the new group, or None within BOUND_S."""
    out = tempfile.mkdtemp(dir=tmp)
    logs = os.path.join(out, "logs")
    env = dict(os.environ, HANG_BENCH_OUT=out, PYTHON_EXEC=PY)
    worker = [os.path.join(HERE, "hang_worker.py"), mode]
    if mode == "file-timer":
        env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1"
    if kind == "ddprun":
        argv = [a.ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                "--log-dir=" + logs] + (["--hang-timeout=2"] if mode == "silent" else []) + worker
    else:
        argv = [a.torchrun, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                "--monitor_interval=0.1"] + worker
    w = Watched(argv, env)
    try:
        hung = wait_for(lambda: read_float(os.path.join(out, "hung")), 60)
        if hung is None:
            sys.exit(f"{kind} {mode}: the worker never reached its hang:\n" +
                     "".join(l for _, l in w.lines))
        deadline = hung + (2.0 if mode == "silent" else 0.0)
        restarted = wait_for(lambda: min(filter(None, (read_float(os.path.join(out, f"start-1-{r}"))
                                                       for r in (0, 1))), default=None),
                             deadline - time.time() + BOUND_S)
        stacks = len(glob.glob(os.path.join(logs, "*", "attempt_0", "*", "stacks.txt")))
        if restarted is None:
            return None, stacks
        w.p.wait(timeout=60)
        return restarted - deadline, stacks
    finally:
        w.kill()
        shutil.rmtree(out, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_train_case(kind, a, tmp, rdzv_endpoint):
    """(c): seconds from the fault line + timeout to the next round on both agents."""
    out = tempfile.mkdtemp(dir=tmp)
    train = [a.ddp_train, "mnist", "--data", DATA, "--no-progress-bar", "--test-subset", "1000",
             "--epochs", "1", "--train-subset", "2560", "--checkpoint-dir",
             os.path.join(out, "ckpt"), "--checkpoint-every", "2", "--fault=hang@5:3"]
    env = dict(os.environ, DDPRUN_RDZV_TOKEN="hang-bench", OMP_NUM_THREADS="1")
    run_id = os.path.basename(out)
    agents = []
    if kind == "ddprun":
        for node in range(2):
            agents.append(Watched(
                [a.ddprun, "--nnodes=2", "--nproc-per-node=2", "--max-restarts=1",
                 "--rdzv-backend=c10d", "--rdzv-endpoint=" + rdzv_endpoint, "--rdzv-id=" + run_id,
                 "--rdzv-conf=keep_alive_interval=0.5", f"--hang-timeout={a.c_timeout:g}",
                 "--log-dir=" + os.path.join(out, f"logs{node}"), "--no-python"] + train, env))
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        for node in range(2):
            agents.append(Watched(
                [a.torchrun, "--nnodes=2", "--nproc_per_node=2", "--max_restarts=1",
                 "--monitor_interval=0.1", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                 "--rdzv_id=" + run_id, "--no_python"] + train, env))
    try:
        fault = wait_for(lambda: min(filter(None, (w.first("fault injection: hanging") for w in agents)),
                                     default=None), 120)
        if fault is None:
            sys.exit(f"{kind} ddp-train: the fault never fired:\n" +
                     "".join(l for w in agents for _, l in w.lines))
        pattern = r"starting 2 worker" if kind == "ddprun" else r"Starting worker group|restart_count=1"
        def restarted():
            ts = [w.first(pattern, after=fault) for w in agents]
            return max(ts) if all(ts) else None
        t = wait_for(restarted, a.c_timeout + BOUND_S)
        stacks = len(glob.glob(os.path.join(out, "logs*", "*", "attempt_0", "*", "stacks.txt")))
        return (None if t is None else t - fault - a.c_timeout), stacks
    finally:
        for w in agents:
            w.kill()
        shutil.rmtree(out, ignore_errors=True)


def fmt(values):
    got = [v for v in values if v is not None]
    if not got:
        return f"not detected within {BOUND_S:.0f} s ({len(values)} runs)"
    med = statistics.median(got)
    return (f"{med * 1000:.0f} ms (min {min(got) * 1000:.0f}, max {max(got) * 1000:.0f}, "
            f"{len(got)}/{len(values)} detected)")


def main():
    root = os.path.join(HERE, "..", "..")
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--torchrun", default=os.path.join(root, "..", "shared", "tools", "torchrun113"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default="a,b,c")
    ap.add_argument("--no-torchrun", action="store_true", help="ddprun only (the make test smoke)")
    ap.add_argument("--c-timeout", type=float, default=3.0,
                    help="--hang-timeout of case (c); above the job's silent start-up")
    a = ap.parse_args()
    a.ddprun = os.path.join(a.build, "bin", "ddprun")
    a.ddp_train = os.path.join(a.build, "bin", "ddp-train")
    kinds = ["ddprun"] if a.no_torchrun else ["ddprun", "torchrun"]
    cases = a.cases.split(",")
    tmp = tempfile.mkdtemp(prefix="hang-bench-")
    results = {}
    rdzv = None
    try:
        if "c" in cases:
            rdzv = Watched([os.path.join(a.build, "bin", "ddprun-rdzv"), "--port=0"],
                           dict(os.environ, DDPRUN_RDZV_TOKEN="hang-bench"))
            endpoint = wait_for(lambda: next((m.group(1) for _, l in rdzv.lines
                                              for m in [re.search(r"listening on (\S+)", l)] if m),
                                             None), 10)
        for i in range(a.runs):
            for kind in kinds:
                # torchrun never detects (b) and (c): one bounded run shows it.
                if "a" in cases:
                    results.setdefault(("a", kind), []).append(python_case(kind, "file-timer", a, tmp))
                if "b" in cases and (kind == "ddprun" or i == 0):
                    results.setdefault(("b", kind), []).append(python_case(kind, "silent", a, tmp))
                if "c" in cases and (kind == "ddprun" or i == 0):
                    results.setdefault(("c", kind), []).append(ddp_train_case(kind, a, tmp, endpoint))
                print(f"run {i + 1}/{a.runs} {kind}: " +
                      ", ".join(f"{c}={r[-1][0]}" for (c, k), r in sorted(results.items()) if k == kind),
                      file=sys.stderr, flush=True)
    finally:
        if rdzv:
            rdzv.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    titles = {"a": "(a) FileTimer 2 s scope expired -> new group (stacks of 2 workers)",
              "b": "(b) --hang-timeout=2, silent worker: timeout -> new group (stacks of 2 workers)",
              "c": f"(c) ddp-train hung collective, 2 agents x 2: timeout {a.c_timeout:g} s -> "
                   "both restarted (stacks of 4 workers)"}
    print("| case | ddprun (after the deadline) | stacks files | torchrun 1.13 |")
    print("|---|---|---|---|")
    for c in cases:
        ours = results.get((c, "ddprun"), [])
        ref = results.get((c, "torchrun"), [])
        stacks = sorted({s for _, s in ours})
        print(f"| {titles[c]} | {fmt([v for v, _ in ours])} | {stacks} | "
              f"{fmt([v for v, _ in ref]) if ref else 'not run'} |")
    bad = [c for c in cases if any(v is None for v, _ in results.get((c, "ddprun"), []))]
    if bad:
        sys.exit(f"ddprun missed a hang in case(s) {bad}")


if __name__ == "__main__":
    main()
