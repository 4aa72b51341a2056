# ddprun --preload: the hook that turns `python3 -u script args` into a spare interpreter.
#
# ddprun starts each spare with exactly the worker's command line and PYTHONPATH led by a
# private folder holding this file as sitecustomize.py, so that Python's site module runs it
# during start-up, before the script. With DDPRUN_PRELOAD_FD set, it:
#   1. removes its own traces (that folder from sys.path, its variables, the user's PYTHONPATH
#      put back);
#   2. imports the preload modules on a helper thread, while the main thread waits on the
#      socket for the hand-over; the helper runs at SCHED_IDLE when ddprun says so (a spare made
#      while workers run must not slow them; a thread, because the main thread could not get
#      its priority back without CAP_SYS_NICE);
#   3. at the hand-over takes the start's whole environment and its stdout/stderr, joins the
#      helper and returns: Python then goes on exactly as for a cold start (sys.path[0], the
#      script or -m module, tracebacks, exit codes are Python's own, not emulated).
# The output a preload writes (a warning of torch's, say) is kept in the spare's own stdout /
# stderr (memory files from ddprun) and written to the real streams at the hand-over, where a
# cold start would have written it.
#
# Messages to ddprun (one SOCK_SEQPACKET message each): b"ready", b"failed\0MODULE\0ERROR" (an
# import failed), or b"cuda\0MODULES\0WHAT" (the imports touched CUDA).
# From ddprun: the hand-over, b"start\0" then KEY=VALUE\0 for every variable, with the stdout
# and stderr descriptors attached (SCM_RIGHTS). End of file: ddprun is gone, exit at once.
#
# With DDPRUN_PRELOAD_PROBE set it only exits 0, proving to ddprun that this interpreter runs
# sitecustomize (a wrapper with -E, -I or -S would not: the probe's -c code exits 3 then, and
# ddprun starts workers cold rather than run a script with a spare's environment).
import os
import sys


def _ddprun_next_sitecustomize():
    # The sitecustomize this file shadows (Debian's, or the user's on PYTHONPATH), imported in
    # its place. Whatever that import raises goes on to site.py, which then does what it does
    # for a cold start: a missing one (ModuleNotFoundError for 'sitecustomize') is passed over
    # in silence and leaves no entry in sys.modules; a failing one prints site's one-line
    # "Error in sitecustomize" message.
    del sys.modules["sitecustomize"]
    import sitecustomize  # noqa: F401


def _ddprun_cuda_touched():
    # The spare must leave the GPU alone until the hand-over: CUDA state made here would belong
    # to a process whose environment (CUDA_VISIBLE_DEVICES aside) is not yet the worker's, and
    # a forked or restarted context is unusable.
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "torch.cuda is initialised"
    except Exception:
        pass
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink("/proc/self/fd/" + fd).startswith("/dev/nvidia"):
                    return "a /dev/nvidia* device is open"
            except OSError:
                pass
    except OSError:
        pass
    return None


def _ddprun_spare(fd, hook_dir):
    import socket
    import threading  # here, on the main thread: threading.main_thread() must be this one
    import _thread

    environ = os.environb
    modules = [m for m in environ.pop(b"DDPRUN_PRELOAD_MODULES", b"").decode().split(",") if m]
    idle = environ.pop(b"DDPRUN_PRELOAD_IDLE", b"0") == b"1"
    saved_path = environ.pop(b"DDPRUN_PRELOAD_PYTHONPATH", None)
    if saved_path is None:
        environ.pop(b"PYTHONPATH", None)
    else:
        environ[b"PYTHONPATH"] = saved_path
    sys.path[:] = [p for p in sys.path if p != hook_dir]
    sys.path_importer_cache.pop(hook_dir, None)
    sock = socket.socket(fileno=fd)

    # Until Python puts the script's folder (or the working folder for -m) first on sys.path
    # after site, the preload imports see it there too, as the script's own imports will.
    if sys.argv and sys.argv[0] not in ("-m", "-c", ""):
        path0 = os.path.dirname(os.path.realpath(sys.argv[0]))
    else:
        path0 = os.getcwd()

    done = _thread.allocate_lock()
    done.acquire()
    # The helper's thread id, and whether the hand-over has come (then it must not go idle any
    # more): read and written under `state_lock`.
    state_lock = _thread.allocate_lock()
    state = {"tid": None, "handed_over": False}

    def preload():
        with state_lock:
            state["tid"] = _thread.get_native_id()
            if idle and not state["handed_over"]:
                try:
                    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                except (AttributeError, OSError):
                    pass
        report = b"ready"
        sys.path.insert(0, path0)
        try:
            for name in modules:
                try:
                    __import__(name)
                except BaseException as exc:  # SystemExit and KeyboardInterrupt too
                    text = ("%s: %s" % (exc.__class__.__name__, exc)).strip()
                    report = b"\0".join([b"failed", name.encode(), text.encode()])
                    break
            else:
                touched = _ddprun_cuda_touched()
                if touched is not None:
                    report = b"\0".join([b"cuda", ",".join(modules).encode(), touched.encode()])
        finally:
            if sys.path and sys.path[0] == path0:
                del sys.path[0]
            try:
                sock.send(report)
            except OSError:
                pass
            done.release()

    _thread.start_new_thread(preload, ())
    msg, fds = b"", []
    # Twice on ConnectionResetError: ddprun closes its end right after the hand-over, and when
    # it had not read this spare's report yet the kernel reports that before the hand-over
    # queued ahead of it (issue 40); the error is cleared once read.
    for _ in range(2):
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 22, 2)
            break
        except ConnectionResetError:
            continue
        except OSError:
            break
    if not msg.startswith(b"start\0") or len(fds) != 2:
        os._exit(0)  # ddprun is gone (or spoke nonsense): never run the script as a spare

    # The start's environment, whole: what the spare was started with and the start does not
    # have goes, the rest is set (os.environb also updates the C environment).
    wanted = {}
    for item in msg[len(b"start\0"):].split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            wanted[key] = value
    for key in list(environ):
        if key not in wanted:
            del environ[key]
    for key, value in wanted.items():
        if environ.get(key) != value:
            environ[key] = value

    # The helper may still be importing: ddprun has given it normal priority back before the
    # hand-over (it could hold the GIL this thread needs); it must not go idle now. Wait for it.
    with state_lock:
        state["handed_over"] = True
    done.acquire()
    # `done` is released as the helper's last act, just before its thread ends: the script must
    # not see that thread still there (/proc/self/task, a thread count), so wait until it is gone.
    import time
    deadline = time.monotonic() + 2.0
    while os.path.exists("/proc/self/task/%d" % state["tid"]) and time.monotonic() < deadline:
        time.sleep(0.0002)
    helper_ident = [i for i, t in list(threading._active.items())
                    if isinstance(t, threading._DummyThread) and t.native_id == state["tid"]]
    for ident in helper_ident:  # a helper that called threading.current_thread()
        threading._active.pop(ident, None)

    for target, new in ((1, fds[0]), (2, fds[1])):
        try:  # what the preload wrote, where a cold start would have written it
            size = os.fstat(target).st_size
            if size > 0:
                data = os.pread(target, size, 0)
                while data:
                    data = data[os.write(new, data):]
        except OSError:
            pass
        os.dup2(new, target)
        os.close(new)
    sock.close()
    _ddprun_next_sitecustomize()


def _ddprun_main():
    hook_dir = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("DDPRUN_PRELOAD_PROBE") is not None:
        os._exit(0 if sys.version_info >= (3, 9) else 4)  # socket.recv_fds: Python 3.9
    fd = os.environ.pop("DDPRUN_PRELOAD_FD", None)
    if fd is None:  # not a spare: this file is only ever on a spare's PYTHONPATH, but be inert
        sys.path[:] = [p for p in sys.path if p != hook_dir]
        _ddprun_next_sitecustomize()
        return
    _ddprun_spare(int(fd), hook_dir)


_ddprun_main()
