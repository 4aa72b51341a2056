#!/usr/bin/env python3
"""Issue 24: losing the agent that hosts the embedded rendezvous vs losing any other agent.

  bench/failover/failover_bench.py --ddprun build/bin/ddprun --runs 5 [--torchrun PATH]

Three agents on loopback, one worker each, --nnodes=2:3 --max-restarts=3, the c10d backend
with the server embedded in the first agent (is_host=1 at --rdzv-endpoint=127.0.0.1:PORT).
Once the world of 3 runs, one agent is SIGKILLed: the hosting one, or another one. Measured:
from the kill until both survivors' workers of the next round have started (their own
timestamps, date +%s.%N), for keep_alive_interval 1 s and 0.5 s (keep_alive_max_attempt 3,
last_call_timeout 0.2). Medians of --runs. With --torchrun, one run of torchrun's c10d with
its store's host killed, as the reference (its survivors cannot go on: pytorch 67742).
"""
import argparse, os, signal, socket, statistics, subprocess, sys, tempfile, time

WORKER = r'''
echo "$(date +%s.%N) start restart=$TORCHELASTIC_RESTART_COUNT group=$GROUP_RANK world=$WORLD_SIZE" >> "$1"
sleep 600 & wait $!
'''


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def lines(log):
    try:
        return open(log).read().splitlines()
    except FileNotFoundError:
        return []


def wait_for(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def kill_all(procs, log):
    """Every agent's process group, and whatever still writes `log`."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    subprocess.run(["pkill", "-f", log], stderr=subprocess.DEVNULL)


def one_run(a, victim, interval, i, tmp):
    """victim: host | other. Seconds from the kill until the survivors run again, or None."""
    log = os.path.join(tmp, f"{victim}-{interval}-{i}.log")
    script = os.path.join(tmp, "worker.sh")
    with open(script, "w") as f:
        f.write(WORKER)
    port = free_port()
    conf = (f"keep_alive_interval={interval},keep_alive_max_attempt=3,last_call_timeout=0.2")
    def agent(is_host):
        cmd = [a.ddprun, "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               f"--rdzv-id=fo-{victim}-{i}", f"--rdzv-conf=is_host={is_host},{conf}",
               "--nnodes=2:3", "--max-restarts=3", "--quiet", "--no-python", "/bin/sh", script, log]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    host = agent(1)
    procs = [host]
    try:
        # The host serves before the others connect (they would retry anyway).
        time.sleep(0.2)
        procs += [agent(0), agent(0)]
        if not wait_for(lambda: sum("restart=0" in l and "world=3" in l for l in lines(log)) == 3, 60):
            sys.exit(f"{victim}: the world of 3 never ran")
        target = host if victim == "host" else procs[1]
        t_kill = time.time()
        os.kill(target.pid, signal.SIGKILL)
        def survivors():
            return [float(l.split()[0]) for l in lines(log)
                    if "world=2" in l and "restart=0" not in l]
        if not wait_for(lambda: len(survivors()) == 2, 30):
            return None
        return max(survivors()) - t_kill
    finally:
        kill_all(procs, log)


def torchrun_reference(a, tmp):
    """torchrun's c10d with its store's host killed: what the survivors do within 60 s."""
    log = os.path.join(tmp, "torchrun.log")
    script = os.path.join(tmp, "worker.sh")
    port = free_port()
    def agent():
        cmd = [a.torchrun, "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
               "--rdzv_id=fo-torchrun", "--nnodes=2:3", "--max_restarts=3",
               "--rdzv_conf=last_call_timeout=1", "--monitor_interval=0.1", "--no_python",
               "/bin/sh", script, log]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    host = agent()
    time.sleep(3)  # the first agent binds the store (torchrun's is_host: the port is free)
    procs = [host, agent(), agent()]
    try:
        if not wait_for(lambda: sum("world=3" in l for l in lines(log)) == 3, 120):
            return "the world of 3 never ran"
        t_kill = time.time()
        os.kill(host.pid, signal.SIGKILL)
        def done():
            return all(p.poll() is not None for p in procs[1:])
        running_again = wait_for(
            lambda: sum("world=2" in l for l in lines(log)) == 2 or done(), 60)
        if sum("world=2" in l for l in lines(log)) == 2:
            return f"survivors running again after {time.time() - t_kill:.2f} s"
        if done():
            rcs = [p.returncode for p in procs[1:]]
            return f"the survivors exited ({rcs}) {time.time() - t_kill:.1f} s after the kill"
        return "no survivor running again within 60 s"
    finally:
        kill_all(procs, log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun", default="")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("## Losing the agent that hosts the rendezvous (issue 24)\n")
        print(f"3 agents x 1 worker on loopback, --nnodes=2:3, embedded c10d server; medians of "
              f"{a.runs} (kill -> both survivors' next workers started)\n")
        print("| keep_alive_interval (lease = 3x) | hosting agent killed | another agent killed |")
        print("|---|---|---|")
        for interval in (1, 0.5):
            res = {}
            for victim in ("host", "other"):
                times = []
                for i in range(a.runs):  # alternating would need two jobs at once: kept apart
                    t = one_run(a, victim, interval, i, tmp)
                    if t is None:
                        sys.exit(f"{victim} interval={interval}: the survivors did not run again")
                    times.append(t)
                res[victim] = times
            def cell(ts):
                return f"{statistics.median(ts):.2f} s (min {min(ts):.2f}, max {max(ts):.2f})"
            print(f"| {interval} s | {cell(res['host'])} | {cell(res['other'])} |")
        if a.torchrun:
            print(f"\ntorchrun (c10d, its store's host killed, 1 run): {torchrun_reference(a, tmp)}")


if __name__ == "__main__":
    main()
