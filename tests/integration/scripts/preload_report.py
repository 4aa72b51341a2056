# What a worker can observe of how it was started, written as JSON to
# REPORT_DIR/report-<TORCHELASTIC_RESTART_COUNT>-<LOCAL_RANK>.json, and how long its
# `import torch` took to report-...-<LOCAL_RANK>.import-seconds (test helper for --preload:
# a cold start and a start from a spare must write the same report). Runs as a script or as
# the module preload_report (-m). Then it ends the way the 'plan' argument says for this
# attempt: plan is a comma-separated list, one item per restart count (the last one repeats):
#   ok            exit 0
#   exit=N        sys.exit(N)
#   message=TEXT  sys.exit(TEXT)
#   raise         an uncaught exception (traceback on stderr, exit 1)
#   record        an exception through torch's @record (TORCHELASTIC_ERROR_FILE)
#   wait=S        sleep S seconds first, then the next item's action (e.g. wait=3,exit=1)
# Only rank 0 fails as planned; the other ranks finish with it when the item is ok and otherwise
# wait to be stopped by the restart, so that rank 0's ending never races another's.
import json
import os
import signal
import stat
import sys
import threading
import time

before_import = time.monotonic()
import torch  # what a real worker does first; a no-op import in a ready spare

import_seconds = time.monotonic() - before_import


def describe_fd(fd):
    st = os.fstat(fd)
    return {"type": stat.S_IFMT(st.st_mode), "isatty": os.isatty(fd),
            "same_as_ddprun": os.path.realpath("/proc/%d/fd/%d" % (os.getppid(), fd)) ==
            os.path.realpath("/proc/self/fd/%d" % fd) if fd == 0 else None}


def pdeathsig():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
    return sig.value


def stream(s):
    return {"line_buffering": s.line_buffering, "write_through": s.write_through,
            "encoding": s.encoding, "errors": s.errors, "isatty": s.isatty()}


main = sys.modules["__main__"]
report = {
    "__name__": __name__,
    "main_is_this_module": main.__dict__ is globals(),
    "main_keys": sorted(k for k in main.__dict__ if k.startswith("__")),
    "__file__": __file__,
    "__package__": __package__,
    "__spec__": None if __spec__ is None else [__spec__.name, __spec__.origin],
    "__loader__": type(__loader__).__name__,
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\0"),
    "path": sys.path,
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    "flags": repr(sys.flags),
    "warnoptions": sys.warnoptions,
    "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                if isinstance(s, signal.Signals)},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "stdin": describe_fd(0),
    "stdout": [describe_fd(1), stream(sys.stdout)],
    "stderr": [describe_fd(2), stream(sys.stderr)],
    "own_process_group": os.getpgrp() == os.getpid(),
    "parent": open("/proc/%d/comm" % os.getppid()).read().strip(),
    "pdeathsig": pdeathsig(),
    "scheduler": [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)],
    "threads_sched": sorted(os.sched_getscheduler(int(t))
                            for t in os.listdir("/proc/self/task")),
    "affinity": sorted(os.sched_getaffinity(0)),
    "umask": os.umask(0o22),
    "main_thread": threading.main_thread() is threading.current_thread(),
    "thread_names": sorted(t.name for t in threading.enumerate()),
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
    "torch": [torch.get_num_threads(), torch.is_grad_enabled(), str(torch.get_default_dtype()),
              torch.cuda.is_initialized()],
    "faulthandler": __import__("faulthandler").is_enabled(),
}
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
path = os.path.join(os.environ["REPORT_DIR"],
                    "report-%d-%s.json" % (restart, os.environ["LOCAL_RANK"]))
with open(path + ".tmp", "w") as f:
    json.dump(report, f, indent=1, sort_keys=True)
os.rename(path + ".tmp", path)
with open(path[:-len(".json")] + ".import-seconds", "w") as f:
    f.write("%.6f\n" % import_seconds)
print("rank %s restart %d reported" % (os.environ["RANK"], restart), flush=True)


def fail_deeply():
    raise RuntimeError("worker %s failed on purpose" % os.environ["RANK"])


def act(items):
    item = items[0]
    if item.startswith("wait="):
        time.sleep(float(item[5:]))
        return act(items[1:])
    if item == "ok":
        return
    if item.startswith("exit="):
        sys.exit(int(item[5:]))
    if item.startswith("message="):
        sys.exit(item[8:])
    if item == "raise":
        fail_deeply()
    if item == "record":
        from torch.distributed.elastic.multiprocessing.errors import record
        record(fail_deeply)()


if __name__ == "__main__":
    plans = (sys.argv[1] if len(sys.argv) > 1 else "ok").split(",")
    # wait=S belongs to the item after it
    steps = []
    for p in plans:
        if steps and steps[-1][-1].startswith("wait="):
            steps[-1].append(p)
        else:
            steps.append([p])
    step = steps[min(restart, len(steps) - 1)]
    if os.environ["RANK"] == "0" or step == ["ok"]:
        act(step)
    else:
        time.sleep(120)
