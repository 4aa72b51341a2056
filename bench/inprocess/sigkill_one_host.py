#!/usr/bin/env python3
"""Worker SIGKILL on one host: torchrun vs ddprun cold vs ddprun in-process, side by side.

  bench/inprocess/sigkill_one_host.py --bin-dir DIR [--kills 5] [--json OUT]

The chaos soak runs on namespaced hosts with its own rendezvous server, which torchrun cannot
use (its c10d store lives in an agent); this driver measures the one fault all three launchers
share, on one host: ddp-train mnist (Fashion-MNIST, 2 workers, checkpoint every 5 steps) under
`torchrun113 --standalone` (Debian's torch 1.13, ../shared/tools), `ddprun --standalone
--restart-mode=cold`, `ddprun --standalone --restart-mode=in-process` and the same with
`--preload=native` (the replacement is a spare ddp-train, started and warmed up ahead). In one job per launcher,
--kills times: wait for steady training, SIGKILL the worker with LOCAL_RANK=1, and time from the
kill to training running again: the first step line printed after it that is not the step in
flight at the kill (a step S+1 printed within 0.2 s of the kill, S the highest before it).
Steps recomputed: S minus the step training resumed from. Prints a Markdown table (medians and
worst) and writes the figures as JSON with --json.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "..", "shared", "tools", "torchrun113")
DATA = "/usr/share/datasets/fashion-mnist"
STEP_RE = re.compile(r"\tstep (\d+)")
IN_FLIGHT_S = 0.2


class Job:
    """A launcher process whose stdout lines are timestamped as they arrive."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, start_new_session=True, text=True)
        self.lock = threading.Lock()
        self.steps = []  # (arrival time, step)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            m = STEP_RE.search(line)
            if m:
                with self.lock:
                    self.steps.append((time.monotonic(), int(m.group(1))))

    def steps_since(self, t):
        with self.lock:
            return [(at, s) for at, s in self.steps if at >= t]

    def highest(self):
        with self.lock:
            return max((s for _, s in self.steps), default=0)

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = open("/proc/%d/task/%d/children" % (p, p)).read().split()
        except OSError:
            continue
        for k in map(int, kids):
            out.append(k)
            todo.append(k)
    return out


def is_spare(pid):
    """A --preload=native spare not yet handed a start: its stdout is ddprun's memory file.
    (After the hand-over /proc still shows the environment it was started with.)"""
    try:
        return os.readlink("/proc/%d/fd/1" % pid).startswith("/memfd:ddprun-spare")
    except OSError:
        return False


def local_rank_1(launcher_pid):
    for pid in descendants(launcher_pid):
        try:
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
            exe = os.readlink("/proc/%d/exe" % pid)
        except OSError:
            continue
        if exe.endswith("ddp-train") and b"LOCAL_RANK=1" in env and not is_spare(pid):
            return pid
    return None


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    return None


def measure(name, argv, env, kills, steady_s):
    job = Job(argv, env)
    out = {"recovery_s": [], "recomputed": []}
    try:
        if not wait_for(lambda: job.highest() >= 5, 120):
            raise RuntimeError("%s: training never started" % name)
        for _ in range(kills):
            time.sleep(steady_s)  # steady training between kills
            victim = wait_for(lambda: local_rank_1(job.proc.pid), 30)
            if victim is None:
                raise RuntimeError("%s: no worker of local rank 1" % name)
            before = job.highest()
            killed_at = time.monotonic()
            os.kill(victim, signal.SIGKILL)

            def resumed():
                for at, s in job.steps_since(killed_at):
                    if s == before + 1 and at - killed_at < IN_FLIGHT_S:
                        continue  # the step in flight at the kill
                    return at, s
                return None

            r = wait_for(resumed, 120)
            if r is None:
                raise RuntimeError("%s: no recovery within 120 s" % name)
            out["recovery_s"].append(r[0] - killed_at)
            out["recomputed"].append(max(0, before - (r[1] - 1)))
            print("%s: kill at step %d -> step %d after %.2f s" % (name, before, r[1],
                                                                 r[0] - killed_at), flush=True)
    finally:
        job.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True, help="ddprun and ddp-train")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--steady", type=float, default=5.0, help="seconds of training between kills")
    ap.add_argument("--torchrun", default=os.path.abspath(TORCHRUN))
    ap.add_argument("--json")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        def train(tag):
            return [os.path.join(a.bin_dir, "ddp-train"), "mnist", "--data", DATA,
                    "--no-progress-bar", "--log-interval", "1", "--epochs", "1000",
                    "--max-steps", "100", "--test-subset", "500",
                    "--checkpoint-dir", os.path.join(tmp, tag), "--checkpoint-every", "5"]

        ddprun = os.path.join(a.bin_dir, "ddprun")
        launchers = {
            "torchrun 1.13": ["/usr/bin/python3", a.torchrun, "--standalone", "--nproc_per_node=2",
                              "--max_restarts=100", "--monitor_interval=0.1", "--no_python"],
            "ddprun cold": [ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=100",
                            "--restart-mode=cold", "--no-python"],
            "ddprun in-process": [ddprun, "--standalone", "--nproc-per-node=2",
                                  "--max-restarts=100", "--restart-mode=in-process",
                                  "--no-python"],
            "ddprun in-process --preload=native": [
                ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=100",
                "--restart-mode=in-process", "--preload=native", "--no-python"],
        }
        for i, (name, launcher) in enumerate(launchers.items()):
            if name.startswith("torchrun") and not os.path.exists(a.torchrun):
                print("%s: skipped (%s missing)" % (name, a.torchrun))
                continue
            results[name] = measure(name, launcher + train("ckpt%d" % i), env, a.kills, a.steady)
    print("\n| worker SIGKILL, one host, 2 workers | kills | recovery p50 s | worst s "
          "| steps recomputed (all kills) |\n|---|---|---|---|---|")
    for name, r in results.items():
        print("| %s | %d | %.2f | %.2f | %d |" % (name, len(r["recovery_s"]),
                                                 statistics.median(r["recovery_s"]),
                                                 max(r["recovery_s"]), sum(r["recomputed"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
