#!/usr/bin/env python3
"""ddprun's etcd v3 rendezvous against its built-in server (ddprun-rdzv), N agents on loopback,
alternating backends in one run.

  bench/etcd/etcd_bench.py [--build build] [--runs 3] [--nodes 2,4,8,16]

For each N and backend (medians of --runs):
1. rendezvous: N agents x 1 worker started at once (--nnodes=N); time from the launch to the
   start of the last worker (each worker writes its start time).
2. worker failure -> restart: rank 1 exits 1 once all N workers run; time from that exit to
   the start of the last of the N new workers (--max-restarts=1).
3. agent SIGKILL -> restart: --nnodes=N-1:N; one agent is SIGKILLed once N workers run; time
   to the start of the last of the N-1 new workers. The built-in server sees the TCP stream
   break at once; etcd only sees the agent's lease expire (keep_alive_interval 0.5 s x 3 = 1.5 s,
   which etcd rounds up to whole seconds: 2 s).
etcd: a 3-member cluster (Debian etcd 3.4) on loopback, heartbeat 50 ms, election 500 ms, the
same flags for both backends otherwise.
"""
import argparse, glob, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

TOKEN = "bench-token"
CONF = "keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=0.2"


def reserve_port():
    # Bound with SO_REUSEADDR and never listening: etcd (which sets SO_REUSEADDR too) can bind
    # it, nobody else can take it meanwhile.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


class Etcd:
    def __init__(self, tmp):
        self.socks = [(reserve_port(), reserve_port()) for _ in range(3)]
        ports = [(c.getsockname()[1], p.getsockname()[1]) for c, p in self.socks]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.procs = []
        for i, (c, p) in enumerate(ports):
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"m{i}", "--data-dir", f"{tmp}/etcd{i}",
                 "--listen-client-urls", f"http://127.0.0.1:{c}",
                 "--advertise-client-urls", f"http://127.0.0.1:{c}",
                 "--listen-peer-urls", f"http://127.0.0.1:{p}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.endpoint = ",".join(f"127.0.0.1:{c}" for c, _ in ports)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run(["etcdctl", f"--endpoints={self.endpoint}", "endpoint", "health"],
                               env=dict(os.environ, ETCDCTL_API="3"), capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.1)  # polling etcd's health; bounded by the deadline
        raise RuntimeError("etcd cluster did not become healthy")

    def close(self):
        for p in self.procs:
            p.kill(); p.wait()


class Builtin:
    def __init__(self, build):
        env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
        self.p = subprocess.Popen([f"{build}/bin/ddprun-rdzv", "--port=0", "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                  text=True)
        self.endpoint = re.search(r"listening on (\S+)", self.p.stdout.readline()).group(1)

    def close(self):
        self.p.terminate(); self.p.wait()


WORKER = r"""#!/bin/sh
d=%(dir)s
date +%%s.%%N > $d/start-$DDPRUN_ROUND-$RANK.tmp && mv $d/start-$DDPRUN_ROUND-$RANK.tmp $d/start-$DDPRUN_ROUND-$RANK
[ "$TORCHELASTIC_RESTART_COUNT" -ge 1 ] && exit 0
[ "$MODE" = start ] && exit 0
if [ "$MODE" = fail ] && [ "$RANK" = 1 ]; then
  i=0; while [ $(ls $d | grep -c "^start-$DDPRUN_ROUND-") -lt $WORLD_SIZE ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done
  date +%%s.%%N > $d/failed.tmp && mv $d/failed.tmp $d/failed; exit 1
fi
sleep 60 & wait $!
"""


def starts(d, rnd=None):
    out = {}
    for f in glob.glob(f"{d}/start-*-*"):
        m = re.search(r"start-(\d+)-(\d+)$", f)
        if m and (rnd is None or int(m.group(1)) == rnd):
            out.setdefault(int(m.group(1)), []).append(float(open(f).read()))
    return out


def wait_for(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.005)  # polling the workers' files; bounded by the deadline
    raise RuntimeError("timed out")


def run(backend, kind, n, mode, a, i):
    d = tempfile.mkdtemp(prefix="etcd-bench-")
    worker = f"{d}/w.sh"
    open(worker, "w").write(WORKER % {"dir": d}); os.chmod(worker, 0o755)
    if kind == "etcd":
        flags = ["--rdzv-backend=etcd", f"--rdzv-endpoint={backend.endpoint}",
                 f"--rdzv-conf={CONF},etcd_prefix=/bench"]
    else:
        flags = ["--rdzv-backend=c10d", f"--rdzv-endpoint={backend.endpoint}",
                 f"--rdzv-conf={CONF}"]
    nnodes = f"{n - 1}:{n}" if mode == "kill" else str(n)
    cmd = [f"{a.build}/bin/ddprun", f"--nnodes={nnodes}", "--nproc-per-node=1",
           "--max-restarts=1", f"--rdzv-id={kind}-{mode}-{n}-{i}", "--quiet"] + flags + \
          ["--no-python", worker]
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN, MODE=mode)
    t0 = time.time()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
             for _ in range(n)]
    try:
        if mode == "start":
            s = wait_for(lambda: [v for v in starts(d).values() if len(v) == n], 60)
            return max(s[0]) - t0
        if mode == "fail":
            wait_for(lambda: os.path.exists(f"{d}/failed"), 60)
            t_fail = float(open(f"{d}/failed").read())
            s = wait_for(lambda: [v for r, v in starts(d).items() if r >= 2 and len(v) == n], 60)
            return max(s[0]) - t_fail
        # kill: once one round has all N workers, SIGKILL one agent.
        full = wait_for(lambda: [r for r, v in starts(d).items() if len(v) == n], 60)[0]
        victim = procs[-1]
        t_kill = time.time()
        victim.send_signal(signal.SIGKILL)
        s = wait_for(lambda: [v for r, v in starts(d).items() if r > full and len(v) == n - 1],
                     60)
        return max(s[0]) - t_kill
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill(); p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "../../build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", default="2,4,8,16")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="etcd-bench-cluster-")
    backends = {"builtin": Builtin(a.build), "etcd": Etcd(tmp)}
    results = {}
    try:
        for n in [int(x) for x in a.nodes.split(",")]:
            for mode in ("start", "fail", "kill"):
                for i in range(a.runs):
                    for kind in ("builtin", "etcd"):  # alternating, so drift hits both
                        results.setdefault((n, mode, kind), []).append(
                            run(backends[kind], kind, n, mode, a, i))
                print(f"N={n} {mode}: " + ", ".join(
                    f"{k} {statistics.median(results[(n, mode, k)]) * 1000:.0f} ms"
                    for k in ("builtin", "etcd")), flush=True)
    finally:
        for b in backends.values():
            b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| N | rendezvous built-in | rendezvous etcd | worker failure -> restart built-in "
          "| ... etcd | agent SIGKILL -> restart built-in | ... etcd |")
    print("|---|---|---|---|---|---|---|")
    for n in [int(x) for x in a.nodes.split(",")]:
        cells = []
        for mode in ("start", "fail", "kill"):
            for kind in ("builtin", "etcd"):
                cells.append(f"{statistics.median(results[(n, mode, kind)]) * 1000:.0f} ms")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
