#!/usr/bin/env python3
"""NCCL's abort and re-initialisation on one GPU (issue 42, item 3): what in-process recovery
pays per rank with the environment ddprun gives its workers.

  python3 bench/gpu/nccl_abort.py --out OUT/nccl.json          # on the GPU machine
  python3 bench/gpu/nccl_abort.py --backend gloo --repeats 2   # dry run on a CPU (plumbing only)

On this project's lent device the script travels in an ignored folder of the session's checkout
(e.g. build-gpu-nccl/, matched by .gitignore's /build-*/) named in the call's carry. Results and
the commands of 2026-11-26: bench/RESULTS.md, "NCCL's abort and re-initialisation".

Every part runs in a child process of this script (a part that hangs or is killed by the
watchdog is reported, and the next one runs). Each child's environment is this one plus
TORCH_NCCL_ASYNC_ERROR_HANDLING (ddprun sets 1 for its workers unless the user set it; ddprun
sets no other TORCH_NCCL_*/NCCL_* variable, so the watchdog and heartbeat monitor run with
torch's defaults) and NCCL_DEBUG=WARN. Stores are c10d TCPStores on 127.0.0.1, port 0.

Parts (one JSON line per measurement on stdout, all of them in --out):
  single       1 rank: import and CUDA start; init_process_group with device_id (eager: the
               communicator is built in init) and without (lazy: built by the first
               collective), the first in the process and warm ones; all-reduce of 4 B and
               64 MiB; destroy_process_group; then, per repeat, abort with a collective in
               flight (queued on the GPU behind a sleep kernel of --hold-ms, 500 by default,
               so it has not run when the abort comes): the abort call, the GPU's drain, the rebuilt group and its
               first all-reduce (checked), the free GPU memory before and after; once with a
               drain before the rebuild, once rebuilding at once; and the abort of an idle
               group. Run with TORCH_NCCL_ASYNC_ERROR_HANDLING 1 (ddprun) and 2 (clean-up only).
  timeout      1 rank, collective timeout 2 s, a collective held 6 s behind a sleep kernel: what
               the watchdog does at each TORCH_NCCL_ASYNC_ERROR_HANDLING (1: ddprun's, 2, 3:
               torch's default when unset), how long until the process or the work sees it,
               and, where the process lives on, destroy_process_group (8 s at most) and the
               rebuild. With --abort-after-s S the script aborts the group itself after S s
               without a result (what in-process recovery does), then drains and rebuilds.
  never_joins  world of 2, only rank 0 started (a replacement that never comes): the first
               all-reduce blocks building the communicator; _abort_process_group from another
               thread after 1 s: does it return, does the blocked call return, can a world of 1
               be built after; with TORCH_NCCL_USE_COMM_NONBLOCKING unset and 1.
  two_ranks    two processes on the one GPU (NCCL usually refuses: "Duplicate GPU"); if it
               works, rank 1 SIGKILLs itself and rank 0's next all-reduce is timed out,
               aborted and rebuilt as a world of 1.
"""
import argparse
import datetime
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

PROCESS_START = time.perf_counter()
PARTS = ("single", "timeout", "never_joins", "two_ranks")
TIMEOUT_S = 2.0  # the collective timeout of the timeout part
HOLD_MS = 6000  # how long the timeout part's collective is held (> TIMEOUT_S)
WARN_WORDS = ("NCCL WARN", "atchdog", "imeout", "abort", "Abort")  # stderr lines kept


def emit(rec):
    print(json.dumps(rec, sort_keys=True), flush=True)


def ms(t0):
    return round((time.perf_counter() - t0) * 1000.0, 3)


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


# ---------------------------------------------------------------------------------------------
# Child side: one part, in its own process.


class Child:
    """What every part needs: torch, the device, stores, groups, a sleep kernel."""

    def __init__(self, args):
        self.args = args
        self.part = args.child
        self.backend = args.backend
        t0 = time.perf_counter()
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        self.import_ms = ms(t0)
        t0 = time.perf_counter()
        if self.backend == "nccl":
            torch.cuda.set_device(0)
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            self.device = torch.device("cuda:0")
        else:
            self.device = torch.device("cpu")
        self.cuda_init_ms = ms(t0)
        self.cycles_per_ms = self._calibrate_sleep()
        self.rounds = 0

    def rec(self, what, **fields):
        r = {"part": self.part, "what": what, "backend": self.backend,
             "async_error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
             "rank": self.args.rank}
        r.update(fields)
        emit(r)

    def sync(self):
        if self.backend == "nccl":
            self.torch.cuda.synchronize()

    def _calibrate_sleep(self):
        if self.backend != "nccl":
            return None
        torch = self.torch
        torch.cuda._sleep(1000000)
        torch.cuda.synchronize()
        cycles = 200000000
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        return cycles / max(ms(t0), 1e-3)

    def hold_gpu(self, duration_ms):
        """Queues a kernel that keeps the current stream busy for about duration_ms (the GPU
        then runs a collective issued after it only once it is done). No-op on the CPU."""
        if self.backend == "nccl":
            self.torch.cuda._sleep(int(self.cycles_per_ms * duration_ms))

    def free_mib(self):
        if self.backend != "nccl":
            return None
        return round(self.torch.cuda.mem_get_info()[0] / 2**20, 1)

    def store(self, world_size, port=0, is_master=True):
        return self.dist.TCPStore("127.0.0.1", port, world_size, is_master,
                                  timeout=datetime.timedelta(seconds=30),
                                  wait_for_workers=False)

    def init(self, store, world_size=1, rank=0, eager=True, timeout_s=60.0):
        """A fresh group under a fresh store prefix (as ddprun's rounds do); returns ms."""
        self.rounds += 1
        kw = dict(backend=self.backend,
                  store=self.dist.PrefixStore("/bench/round_%d/" % self.rounds, store),
                  rank=rank, world_size=world_size,
                  timeout=datetime.timedelta(seconds=timeout_s))
        if eager and self.backend == "nccl":
            kw["device_id"] = self.device
        t0 = time.perf_counter()
        self.dist.init_process_group(**kw)
        return ms(t0)

    def allreduce_checked(self, world_size=1):
        """One all-reduce of ones, waited for on the host; (ms, result correct)."""
        t = self.torch.ones(4, device=self.device)
        t0 = time.perf_counter()
        self.dist.all_reduce(t)
        self.sync()
        took = ms(t0)
        return took, bool((t == world_size).all().item())

    def allreduce_latency(self, numel, n):
        t = self.torch.ones(numel, device=self.device)
        for _ in range(3):
            self.dist.all_reduce(t)
        self.sync()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.dist.all_reduce(t)
            self.sync()
            times.append(ms(t0))
        return times

    def abort_world(self):
        """_abort_process_group on WORLD (NCCL); gloo has no abort: destroy instead."""
        t0 = time.perf_counter()
        err = None
        try:
            if self.backend == "nccl":
                self.dist.distributed_c10d._abort_process_group()
            else:
                self.dist.destroy_process_group()
        except Exception as e:  # recorded: what 2.11 does is the measurement
            err = first_line(e)
        return ms(t0), err

    def cuda_ok(self):
        try:
            x = self.torch.arange(1000, device=self.device, dtype=self.torch.float32)
            return bool(x.sum().item() == 499500.0), None
        except Exception as e:
            return False, first_line(e)


def first_line(e):
    s = "%s: %s" % (type(e).__name__, e)
    lines = [ln for ln in s.splitlines() if ln.strip()]
    keep = lines[:1] + [ln for ln in lines[1:] if "Duplicate" in ln or "Last error" in ln][:2]
    return " | ".join(keep)[:400]


def part_single(c, repeats):
    c.rec("setup", import_ms=c.import_ms, cuda_init_ms=c.cuda_init_ms,
          sleep_cycles_per_ms=c.cycles_per_ms,
          device=(c.torch.cuda.get_device_name(0) if c.backend == "nccl" else "cpu"),
          torch=c.torch.__version__, cuda=c.torch.version.cuda,
          nccl=(".".join(map(str, c.torch.cuda.nccl.version())) if c.backend == "nccl" else None),
          nonblocking=os.environ.get("TORCH_NCCL_USE_COMM_NONBLOCKING"),
          env={k: v for k, v in os.environ.items() if k.startswith(("TORCH_NCCL", "NCCL_"))})
    store = c.store(1)
    # Init and tear-down: eager (device_id) and lazy, the first in the process and warm ones.
    for i in range(repeats + 1):
        for eager in (True, False):
            init_ms = c.init(store, eager=eager)
            first_ms, ok = c.allreduce_checked()
            if i == 0 and eager:
                small = c.allreduce_latency(1, 50)
                big = c.allreduce_latency(16 * 2**20, 10)
                c.rec("allreduce", bytes=4, median_ms=median(small), n=len(small))
                c.rec("allreduce", bytes=64 * 2**20, median_ms=median(big), n=len(big))
            t0 = time.perf_counter()
            c.dist.destroy_process_group()
            c.rec("init", eager=eager, first_in_process=(i == 0), init_ms=init_ms,
                  first_allreduce_ms=first_ms, correct=ok, destroy_ms=ms(t0))
    # Abort with a collective in flight, then rebuild.
    for i in range(repeats):
        for drain_first in (True, False):
            c.init(store)
            c.allreduce_checked()
            free_before = c.free_mib()
            t = c.torch.ones(4, device=c.device)
            t_hold = time.perf_counter()
            c.hold_gpu(c.args.hold_ms)
            work = c.dist.all_reduce(t, async_op=True)
            pending = not work.is_completed()
            abort_ms, abort_err = c.abort_world()
            completed_after_abort = work.is_completed()
            drain_ms = None
            if drain_first:
                t0 = time.perf_counter()
                c.sync()
                drain_ms = ms(t0)
            cuda_ok, cuda_err = c.cuda_ok()
            t0 = time.perf_counter()
            rebuild_ms = c.init(store)
            first_ms, ok = c.allreduce_checked()
            since_hold = ms(t_hold)
            c.rec("abort_inflight", drain_before_rebuild=drain_first, hold_ms=c.args.hold_ms,
                  pending_at_abort=pending, abort_ms=abort_ms, abort_error=abort_err,
                  work_completed_after_abort=completed_after_abort, drain_ms=drain_ms,
                  cuda_ok=cuda_ok, cuda_error=cuda_err, rebuild_init_ms=rebuild_ms,
                  first_allreduce_ms=first_ms, correct=ok, rebuild_total_ms=ms(t0),
                  hold_to_first_result_ms=since_hold, free_mib_before=free_before,
                  free_mib_after=c.free_mib(), repeat=i)
            c.dist.destroy_process_group()
        # The abort of an idle group, for comparison.
        c.init(store)
        c.allreduce_checked()
        abort_ms, abort_err = c.abort_world()
        c.rec("abort_idle", abort_ms=abort_ms, abort_error=abort_err, repeat=i)


def poll_work(work, deadline_s):
    """Polls work.is_completed() every 5 ms; (ms until completed or None, is_success, error)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < deadline_s:
        if work.is_completed():
            took = ms(t0)
            err = None
            try:
                work.wait()
            except Exception as e:
                err = first_line(e)
            try:
                success = work.is_success()
            except Exception:
                success = None
            return took, success, err
        time.sleep(0.005)
    return None, None, None


def bounded(fn, deadline_s):
    """Runs fn on a thread; (ms, error, fn's result), or (None, None, None) if it is still
    running at deadline_s."""
    out = {}

    def run():
        t0 = time.perf_counter()
        try:
            out["result"] = fn()
            out["error"] = None
        except Exception as e:
            out["error"] = first_line(e)
        out["ms"] = ms(t0)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(deadline_s)
    return out.get("ms"), out.get("error"), out.get("result")


def part_timeout(c):
    store = c.store(1)
    c.init(store, timeout_s=TIMEOUT_S)
    c.allreduce_checked()
    t = c.torch.ones(4, device=c.device)
    c.hold_gpu(HOLD_MS)
    work = c.dist.all_reduce(t, async_op=True)
    c.rec("issued", wall=time.time(), timeout_s=TIMEOUT_S, hold_ms=HOLD_MS)
    if c.args.abort_after_s is not None:
        # The script's own recovery: no result within abort_after_s -> abort the group.
        detected_ms, success, err = poll_work(work, c.args.abort_after_s)
        c.rec("detected", detected_ms=detected_ms, is_success=success, error=err)
        if detected_ms is None:
            took, _, result = bounded(c.abort_world, 8.0)
            # abort_world catches the abort's own exception: it is in the result.
            c.rec("user_abort", abort_ms=took, error=(result or (None, None))[1],
                  blocked_8s=(took is None))
            if took is None:
                return
            took, serr, _ = bounded(c.sync, 8.0)
            c.rec("drained", drain_ms=took, error=serr, blocked_8s=(took is None))
            if took is None:
                return
            cuda_ok, cuda_err = c.cuda_ok()
            rebuild_ms = c.init(store)
            first_ms, ok = c.allreduce_checked()
            c.rec("rebuilt", cuda_ok=cuda_ok, cuda_error=cuda_err, rebuild_init_ms=rebuild_ms,
                  first_allreduce_ms=first_ms, correct=ok)
            return
    else:
        detected_ms, success, err = poll_work(work, HOLD_MS / 1000.0 + 6)
        c.rec("detected", detected_ms=detected_ms, is_success=success, error=err)
    took, derr, _ = bounded(c.dist.destroy_process_group, 8.0)
    c.rec("destroyed", destroy_ms=took, error=derr, blocked_8s=(took is None))
    if took is None:
        return
    t0 = time.perf_counter()
    c.sync()
    drain_ms = ms(t0)
    cuda_ok, cuda_err = c.cuda_ok()
    rebuild_ms = c.init(store)
    first_ms, ok = c.allreduce_checked()
    c.rec("rebuilt", drain_ms=drain_ms, cuda_ok=cuda_ok, cuda_error=cuda_err,
          rebuild_init_ms=rebuild_ms, first_allreduce_ms=first_ms, correct=ok)


def part_never_joins(c):
    store = c.store(2)
    try:
        init_ms = c.init(store, world_size=2, eager=False, timeout_s=5.0)
    except Exception as e:  # gloo connects in init: the dry run ends here
        c.rec("init_world_of_2", error=first_line(e))
        return
    c.rec("init_world_of_2", init_ms=init_ms)
    result = {}

    def blocked():
        t0 = time.perf_counter()
        try:
            t = c.torch.ones(4, device=c.device)
            c.dist.all_reduce(t)
            c.sync()
            result["error"] = None
        except Exception as e:
            result["error"] = first_line(e)
        result["returned_after_ms"] = ms(t0)

    th = threading.Thread(target=blocked, daemon=True)
    t_issue = time.perf_counter()
    th.start()
    time.sleep(1.0)  # the collective is blocked building the communicator by now
    blocked_at_abort = th.is_alive()
    c.rec("aborting", wall=time.time(), blocked=blocked_at_abort)
    abort_ms, abort_err = c.abort_world()
    c.rec("aborted", blocked_at_abort=blocked_at_abort, abort_ms=abort_ms, abort_error=abort_err)
    th.join(10.0)
    c.rec("blocked_call", still_blocked_10s_after_abort=th.is_alive(),
          returned_after_ms=result.get("returned_after_ms"), error=result.get("error"),
          since_issue_ms=ms(t_issue))
    t0 = time.perf_counter()
    rebuild_ms = c.init(c.store(1))
    first_ms, ok = c.allreduce_checked()
    c.rec("rebuilt_world_of_1", rebuild_init_ms=rebuild_ms, first_allreduce_ms=first_ms,
          correct=ok, total_ms=ms(t0))


def part_two_ranks(c):
    rank = c.args.rank
    store = c.store(2, port=c.args.port, is_master=(rank == 0))
    t0 = time.perf_counter()
    try:
        init_ms = c.init(store, world_size=2, rank=rank, timeout_s=5.0)
        first_ms, ok = c.allreduce_checked(world_size=2)
        c.rec("two_ranks_one_gpu", works=True, init_ms=init_ms, first_allreduce_ms=first_ms,
              correct=ok)
    except Exception as e:
        c.rec("two_ranks_one_gpu", works=False, error=first_line(e), after_ms=ms(t0))
        return
    if rank == 1:
        c.rec("peer_killed", wall=time.time())
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    t = c.torch.ones(4, device=c.device)
    work = c.dist.all_reduce(t, async_op=True)
    c.rec("issued", wall=time.time(), timeout_s=5.0)
    detected_ms, success, err = poll_work(work, 15.0)
    c.rec("detected", detected_ms=detected_ms, is_success=success, error=err)
    abort_ms, abort_err = c.abort_world()
    t0 = time.perf_counter()
    rebuild_ms = c.init(c.store(1))
    first_ms, ok = c.allreduce_checked()
    c.rec("rebuilt_world_of_1", abort_ms=abort_ms, abort_error=abort_err,
          rebuild_init_ms=rebuild_ms, first_allreduce_ms=first_ms, correct=ok, total_ms=ms(t0))


def child_main(args):
    c = Child(args)
    code = 0
    try:
        if args.child == "single":
            part_single(c, args.repeats)
        elif args.child == "timeout":
            part_timeout(c)
        elif args.child == "never_joins":
            part_never_joins(c)
        elif args.child == "two_ranks":
            part_two_ranks(c)
    except Exception as e:  # the step that failed is the measurement: record it
        c.rec("part_error", error=first_line(e))
        code = 1
    c.rec("done", process_ms=ms(PROCESS_START))
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running destructors: a group left behind (aborted, or one the part hangs on
    # purpose) must not turn the end of the measurement into a hang or a crash (a Python exit
    # after a failed abort died of SIGSEGV on the H100, 2026-11-26).
    os._exit(code)


# ---------------------------------------------------------------------------------------------
# Parent side: runs the parts, collects their lines.


class ChildRun:
    """One child process: its JSON lines (each stamped with the parent's wall clock), the tail
    of its stderr, how and when it ended."""

    def __init__(self, argv, env, timeout_s):
        self.records = []
        self.stderr = []
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + argv, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.timeout_s = timeout_s
        self.exit_wall = None
        self.started = time.time()
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=self._wait, daemon=True)]
        for th in self._threads:
            th.start()

    def _read_out(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.records.append(json.loads(line))
                except ValueError:
                    self.stderr.append(line)
            elif line:
                self.stderr.append(line)

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def _wait(self):
        self.proc.wait()
        self.exit_wall = time.time()

    def finish(self):
        self._threads[2].join(self.timeout_s)
        timed_out = self._threads[2].is_alive()
        if timed_out:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the child's own session, started above
            self._threads[2].join(10)
        for th in self._threads[:2]:
            th.join(5)
        rc = self.proc.returncode
        return {"rc": rc, "signal": (signal.Signals(-rc).name if rc is not None and rc < 0
                                     else None),
                "timed_out": timed_out, "wall_s": round((self.exit_wall or time.time())
                                                        - self.started, 2)}

    def stderr_tail(self, n=12):
        keep = [ln for ln in self.stderr if ln.strip()]
        return [ln[:300] for ln in keep[-n:]]


def child_env(extra):
    env = dict(os.environ)
    env.setdefault("NCCL_DEBUG", "WARN")
    env["PYTHONUNBUFFERED"] = "1"
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def free_port():
    # Only two_ranks needs a port known in advance (rank 1 must find rank 0's store); the race
    # between this close and rank 0's bind is accepted in a benchmark.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_part(args, part, extra_env, timeout_s, label, rank_args=None):
    argv = ["--child", part, "--backend", args.backend, "--repeats", str(args.repeats),
            "--hold-ms", str(args.hold_ms)]
    if args.abort_after_s is not None:
        argv += ["--abort-after-s", str(args.abort_after_s)]
    runs = []
    for ra in (rank_args or [[]]):
        runs.append(ChildRun(argv + ra, child_env(extra_env), timeout_s))
    out = []
    for i, r in enumerate(runs):
        end = r.finish()
        summary = {"part": part, "what": "process", "label": label, "env": extra_env,
                   "child": i}
        summary.update(end)
        issued = [x for x in r.records if x.get("what") == "issued"]
        if issued and r.exit_wall is not None:
            summary["exit_after_issue_ms"] = round((r.exit_wall - issued[0]["wall"]) * 1000, 1)
        for x in r.records:
            x["label"] = label
            emit(x)
        if end["rc"] != 0 or end["timed_out"]:
            summary["stderr_tail"] = r.stderr_tail()
        summary["warnings"] = [ln[:300] for ln in r.stderr
                               if any(w in ln for w in WARN_WORDS)][:20]
        emit(summary)
        out.extend(r.records)
        out.append(summary)
    return out


def summarise(records):
    """The figures to read, one line each (printed last)."""
    lines = []

    def pick(what, label=None, **match):
        return [r for r in records if r.get("what") == what
                and (label is None or r.get("label") == label)
                and all(r.get(k) == v for k, v in match.items())]

    for r in pick("setup"):
        lines.append("%s: %s torch %s CUDA %s NCCL %s; import %.0f ms, CUDA init %.0f ms" % (
            r["label"], r["device"], r["torch"], r["cuda"], r["nccl"], r["import_ms"],
            r["cuda_init_ms"]))
    for label in sorted({r.get("label") for r in pick("init")}):
        for eager in (True, False):
            first = pick("init", label, eager=eager, first_in_process=True)
            warm = pick("init", label, eager=eager, first_in_process=False)
            name = "eager" if eager else "lazy"
            if first:
                lines.append("%s %s init: first %.1f + first all-reduce %.1f ms; warm median "
                             "%s + %s ms, destroy %s ms (n=%d)" % (
                                 label, name, first[0]["init_ms"], first[0]["first_allreduce_ms"],
                                 median([w["init_ms"] for w in warm]),
                                 median([w["first_allreduce_ms"] for w in warm]),
                                 median([w["destroy_ms"] for w in warm]), len(warm)))
        for r in pick("allreduce", label):
            lines.append("%s all-reduce %d B: median %s ms" % (label, r["bytes"], r["median_ms"]))
        for drain in (True, False):
            ab = pick("abort_inflight", label, drain_before_rebuild=drain)
            if ab:
                lines.append(
                    "%s abort in flight (%s): abort %s ms, drain %s, rebuild %s + first "
                    "all-reduce %s ms, correct %d/%d, cuda ok %d/%d, free MiB %s -> %s" % (
                        label, "drain, then rebuild" if drain else "rebuild at once",
                        median([a["abort_ms"] for a in ab]),
                        median([a["drain_ms"] for a in ab]),
                        median([a["rebuild_init_ms"] for a in ab]),
                        median([a["first_allreduce_ms"] for a in ab]),
                        sum(bool(a["correct"]) for a in ab), len(ab),
                        sum(bool(a["cuda_ok"]) for a in ab), len(ab),
                        ab[0]["free_mib_before"], ab[-1]["free_mib_after"]))
        idle = pick("abort_idle", label)
        if idle:
            lines.append("%s abort idle: %s ms" % (label, median([a["abort_ms"] for a in idle])))
    for r in pick("process"):
        if r["part"] != "single":
            lines.append("%s: rc %s signal %s timed_out %s%s" % (
                r["label"], r["rc"], r["signal"], r["timed_out"],
                ", exit %s ms after issue" % r["exit_after_issue_ms"]
                if "exit_after_issue_ms" in r else ""))
    for what in ("detected", "destroyed", "user_abort", "drained", "rebuilt", "part_error", "init_world_of_2", "aborting", "aborted", "blocked_call", "rebuilt_world_of_1",
                 "two_ranks_one_gpu"):
        for r in pick(what):
            keep = {k: v for k, v in r.items() if k not in ("part", "what", "backend", "label",
                                                             "rank", "async_error_handling")}
            lines.append("%s %s: %s" % (r["label"], what, json.dumps(keep, sort_keys=True)))
    return lines


def parse_env(spec):
    """'aeh=1,TORCH_NCCL_ENABLE_MONITORING=0' -> the child's extra environment (aeh:
    TORCH_NCCL_ASYNC_ERROR_HANDLING)."""
    env = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            sys.exit("nccl_abort.py: %r: expected KEY=VALUE[,KEY=VALUE...]" % spec)
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING" if key == "aeh" else key] = value
    return env


def parent_main(args):
    parts = args.parts.split(",")
    for p in parts:
        if p not in PARTS:
            sys.exit("nccl_abort.py: --parts: unknown part %r (expected some of %s)"
                     % (p, ",".join(PARTS)))
    t_all = time.perf_counter()
    header = {"part": "env", "what": "env", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "backend": args.backend, "argv": sys.argv[1:], "python": sys.version.split()[0]}
    try:
        header["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        header["nvidia_smi"] = first_line(e)
    emit(header)
    records = [header]
    aeh = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
    if "single" in parts:
        for spec in args.single_env or ["aeh=1", "aeh=2"]:
            records += run_part(args, "single", parse_env(spec), 60, "single " + spec)
    if "timeout" in parts:
        for spec in args.timeout_env or ["aeh=1", "aeh=2", "aeh=3"]:
            records += run_part(args, "timeout", parse_env(spec), 30, "timeout " + spec)
    if "never_joins" in parts:
        for nonblocking in (None, "1"):
            records += run_part(args, "never_joins",
                                {aeh: "2", "TORCH_NCCL_USE_COMM_NONBLOCKING": nonblocking}, 35,
                                "never_joins aeh=2 nonblocking=%s" % nonblocking)
    if "two_ranks" in parts:
        port = free_port()
        records += run_part(args, "two_ranks", {aeh: "2"}, 40, "two_ranks aeh=2",
                            rank_args=[["--rank", "0", "--port", str(port)],
                                       ["--rank", "1", "--port", str(port)]])
    lines = summarise(records)
    records.append({"part": "summary", "what": "summary", "lines": lines,
                    "total_s": round(time.perf_counter() - t_all, 1)})
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1, sort_keys=True)
    print("\n== summary (%.1f s) ==" % (time.perf_counter() - t_all))
    for ln in lines:
        print(ln)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write every record here (a JSON list)")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                    help="gloo: a dry run of the plumbing on a CPU")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each timed cycle")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--hold-ms", type=int, default=500,
                    help="single part: how long the in-flight collective is held on the GPU")
    ap.add_argument("--abort-after-s", type=float,
                    help="timeout part: abort the group (_abort_process_group) when the "
                         "collective has no result after this many seconds, then drain and "
                         "rebuild; default: wait for the work, then destroy_process_group")
    ap.add_argument("--single-env", action="append",
                    help="single part: one child per value, KEY=VALUE[,...] (aeh=N for "
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING); default aeh=1 and aeh=2")
    ap.add_argument("--timeout-env", action="append",
                    help="timeout part, likewise; default aeh=1, aeh=2, aeh=3")
    ap.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats: must be at least 1, got %d" % args.repeats)
    if args.child:
        child_main(args)
    else:
        parent_main(args)


if __name__ == "__main__":
    main()
