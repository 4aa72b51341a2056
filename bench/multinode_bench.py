#!/usr/bin/env python3
"""ddprun vs torchrun's c10d rendezvous with real agents on loopback, alternating in one run.

  bench/multinode_bench.py --runs 3 --nodes 2,8,32

1. Start-up: N agents x 2 no-op workers (--no-python /bin/true) on 127.0.0.1, all started at
   once; time from the first start to the last exit. Medians of --runs.
2. Failure-to-restart latency across nodes (2 agents x 2 workers, --nnodes=1:2):
   a. a worker on node B exits 1 -> the first new worker runs on node A;
   b. agent B is SIGKILLed (its stream breaks) -> A's workers receive SIGTERM (loss detected);
   c. agent B is SIGSTOPped (silent; lease = keep_alive_interval 0.2 s x 3) -> A's workers get
      SIGTERM.
   Timestamps come from the workers themselves (date +%s.%N), so they include every hop.
torchrun's c10d backend needs --rdzv_endpoint's port free: a fresh port per run (ddprun uses
ddprun-rdzv on port 0 for the same reason).
"""
import argparse, os, re, signal, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "bench-token"


def free_port():
    # A port for torchrun's c10d store (torchrun cannot take port 0 with several agents).
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


class Rdzv:
    """ddprun-rdzv on port 0 for the ddprun agents."""
    def __init__(self, binary):
        env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
        self.p = subprocess.Popen([binary, "--port=0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env, text=True)
        line = self.p.stdout.readline()
        self.endpoint = re.search(r"listening on (\S+)", line).group(1)

    def close(self):
        self.p.terminate(); self.p.wait()


def agents_cmd(kind, a, n, run_id, endpoint, extra, worker):
    if kind == "ddprun":
        return [a.ddprun, f"--nnodes={n}", "--nproc-per-node=2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}", "--quiet"] + extra + \
               ["--no-python"] + worker
    return [a.torchrun, f"--nnodes={n}", "--nproc_per_node=2", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}", f"--rdzv_id={run_id}", "--monitor_interval=0.1"] + \
           extra + ["--no_python"] + worker


def startup(kind, a, n, rdzv, i):
    endpoint = rdzv.endpoint if kind == "ddprun" else f"127.0.0.1:{free_port()}"
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    cmd = agents_cmd(kind, a, n, f"start-{kind}-{n}-{i}", endpoint, [], ["/bin/true"])
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
             for _ in range(n)]
    rcs = [p.wait(timeout=300) for p in procs]
    dt = time.perf_counter() - t0
    if any(rcs):
        sys.exit(f"{kind} N={n} failed: {rcs}")
    return dt


WORKER = r'''
log="$1"; mode="$2"
echo "$(date +%s.%N) start restart=$TORCHELASTIC_RESTART_COUNT rank=$RANK group=$GROUP_RANK" >> "$log"
trap 'echo "$(date +%s.%N) term restart=$TORCHELASTIC_RESTART_COUNT rank=$RANK" >> "$log"; exit 143' TERM
# After the first failure (or in a smaller world) every worker just succeeds. torchrun does not
# count a restart it makes for a peer's failure in TORCHELASTIC_RESTART_COUNT, so the log decides.
if grep -q " fail " "$log" || [ "$WORLD_SIZE" = 2 ]; then exit 0; fi
if [ "$mode" = fail ] && [ "$GROUP_RANK" = 1 ] && [ "$LOCAL_RANK" = 0 ]; then
  sleep 1; echo "$(date +%s.%N) fail rank=$RANK" >> "$log"; exit 1
fi
sleep 60 & wait $!
'''


def latency(kind, a, mode, rdzv, i, tmp):
    """mode: fail | kill | stop. Returns seconds, or None when nothing happened within 30 s."""
    log = os.path.join(tmp, f"lat-{kind}-{mode}-{i}.log")
    script = os.path.join(tmp, "latency_worker.sh")
    with open(script, "w") as f:
        f.write(WORKER)
    endpoint = rdzv.endpoint if kind == "ddprun" else f"127.0.0.1:{free_port()}"
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    if kind == "ddprun":
        extra = ["--max-restarts=3", "--rdzv-conf=keep_alive_interval=0.2,keep_alive_max_attempt=3,"
                 "last_call_timeout=1"]
    else:  # torchrun takes whole seconds only; its lease stays at its default (5 s x 3)
        extra = ["--max_restarts=3", "--rdzv_conf=last_call_timeout=1"]
    cmd = agents_cmd(kind, a, "1:2", f"lat-{kind}-{mode}-{i}", endpoint, extra,
                     ["/bin/sh", script, log, mode])
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True) for _ in range(2)]
    try:
        def lines():
            try:
                return open(log).read().splitlines()
            except FileNotFoundError:
                return []
        deadline = time.time() + 60
        while sum(" start restart=0" in l and "group=" in l for l in lines()) < 4:
            if time.time() > deadline or any(p.poll() not in (None, 0) for p in procs):
                sys.exit(f"{kind} {mode}: the agents did not start their workers")
            time.sleep(0.01)
        # Node B: the agent whose workers have group=1. Find it by its workers' parent pid.
        b_rank = [l for l in lines() if "group=1" in l][0]
        t_event = None
        if mode in ("kill", "stop"):
            victim = None
            for p in procs:  # the agent with group rank 1 has ranks 2 and 3
                kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
                for k in kids:
                    try:
                        env_k = open(f"/proc/{k}/environ", "rb").read().split(b"\0")
                    except OSError:
                        continue
                    if b"GROUP_RANK=1" in env_k:
                        victim = p
            if victim is None:
                return None
            t_event = time.time()
            os.kill(victim.pid, signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        deadline = time.time() + 30
        while time.time() < deadline:
            ls = lines()
            if mode == "fail":
                fail = [float(l.split()[0]) for l in ls if " fail " in l]
                new = [float(l.split()[0]) for l in ls if " start " in l and "group=0" in l]
                new = [t for t in new if fail and t > fail[0]]
                if new:
                    return min(new) - fail[0]
            else:
                term = [float(l.split()[0]) for l in ls if " term " in l]
                if term:
                    return min(term) - t_event
            time.sleep(0.01)
        return None
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGCONT); os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        subprocess.run(["pkill", "-f", log], stderr=subprocess.DEVNULL)


def fmt(x):
    return "no restart in 30 s" if x is None else f"{x*1000:.0f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", default=os.path.join(HERE, "..", "build", "bin", "ddprun"))
    ap.add_argument("--rdzv", default=os.path.join(HERE, "..", "build", "bin", "ddprun-rdzv"))
    ap.add_argument("--torchrun", default=os.path.join(HERE, "..", "..", "shared", "tools", "torchrun113"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", default="2,8,32")
    ap.add_argument("--skip-latency", action="store_true")
    a = ap.parse_args()
    a.ddprun, a.rdzv, a.torchrun = map(os.path.abspath, (a.ddprun, a.rdzv, a.torchrun))
    rdzv = Rdzv(a.rdzv)
    try:
        ns = [int(x) for x in a.nodes.split(",")]
        res = {(k, n): [] for k in ("ddprun", "torchrun") for n in ns}
        for i in range(a.runs):
            for n in ns:
                for k in ("ddprun", "torchrun"):
                    res[(k, n)].append(startup(k, a, n, rdzv, i))
        print(f"## Multi-node on loopback (real agents, medians of {a.runs} alternating runs, {os.cpu_count()} cores)\n")
        print("| agents x 2 no-op workers | ddprun | torchrun c10d | torchrun / ddprun |")
        print("|---|---|---|---|")
        for n in ns:
            d = statistics.median(res[("ddprun", n)]); t = statistics.median(res[("torchrun", n)])
            print(f"| N = {n} | {d*1000:.0f} ms | {t:.2f} s | {t/d:.0f}x |")
        if not a.skip_latency:
            with tempfile.TemporaryDirectory() as tmp:
                lat = {}
                for mode in ("fail", "kill", "stop"):
                    for k in ("ddprun", "torchrun"):
                        vals = [latency(k, a, mode, rdzv, i, tmp) for i in range(a.runs)]
                        ok = [v for v in vals if v is not None]
                        lat[(k, mode)] = statistics.median(ok) if len(ok) * 2 > len(vals) else None
            print("\n| failure on node B (2 nodes x 2 workers) | ddprun | torchrun c10d |")
            print("|---|---|---|")
            print(f"| worker exits 1 on B -> first new worker on A | {fmt(lat[('ddprun','fail')])} | {fmt(lat[('torchrun','fail')])} |")
            print(f"| agent B SIGKILLed (stream breaks) -> A's workers stopped | {fmt(lat[('ddprun','kill')])} | {fmt(lat[('torchrun','kill')])} |")
            print(f"| agent B SIGSTOPped (lease 0.6 s) -> A's workers stopped | {fmt(lat[('ddprun','stop')])} | {fmt(lat[('torchrun','stop')])} |")
        print(f"\nCommand: `bench/multinode_bench.py --runs {a.runs} --nodes {a.nodes}`")
    finally:
        rdzv.close()


if __name__ == "__main__":
    main()
