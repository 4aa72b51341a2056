"""In-process recovery for torch.distributed scripts under ``ddprun --restart-mode=in-process``.

With ``--restart-mode=in-process`` a failure stops only what failed: the surviving workers keep
their processes and memory, form the next round's process group with the replacements, and
carry on from the newest state any rank holds. This module is the worker's side of that
(docs/design.md, "6b. In-process recovery"; docs/inprocess-python.md). ddprun writes it into a
private folder and puts that on the workers' PYTHONPATH; it is also installed as
share/ddprun/python/ddprun_inprocess.py. It needs only the standard library and torch
(1.13 and 2.x).

Usage::

    import ddprun_inprocess as dip

    model, opt = build()                       # same seed everywhere, as usual
    state = {"model": model, "optimizer": opt}

    def train(rnd):                            # called once per round
        ddp = DDP(model)                       # wrap anew in every round
        for step in range(rnd.step + 1, total_steps):
            opt.zero_grad()
            loss_fn(ddp(batch(step, rnd.rank))).backward()
            opt.step()
            rnd.step_done(step)                # right after opt.step()

    dip.run(train, backend="gloo", state=state)

or, the same as a loop::

    ctl = dip.connect()                        # None without DDPRUN_CONTROL_SOCKET
    for rnd in dip.rounds(ctl, backend="gloo", state=state):
        with rnd:                              # a failed round is swallowed here ...
            train(rnd)
        # ... and the loop goes on to the next round; after a round that ended
        # normally the loop ends.

The contract:

* Without ``DDPRUN_CONTROL_SOCKET`` (torchrun, ``ddprun --restart-mode=cold``) nothing changes:
  ``connect()`` returns None, ``rounds()`` yields one round after
  ``init_process_group(backend)`` with ``env://`` (skipped when the script already initialized
  it), ``step_done`` only records, and every exception propagates as it would without the
  module. No state is exchanged.
* With it: ``connect()`` says hello (``LOCAL_RANK``, pid) and waits for this worker's round. For
  every round, ``rounds()`` forms the group (the store rule below), agrees on the state, sends
  ready ``{round, step}`` to the agent and yields a :class:`Round`. A reader thread follows the
  agent's messages; when the round is over (abort, a newer round, the agent gone) it shuts the
  round's TCP connections down, so that a gloo collective blocked on a peer that vanished
  without a FIN fails at once instead of at its timeout, and ``step_done`` raises
  :class:`RoundOver`.
* ``with rnd:`` swallows :class:`RoundOver` and ``RuntimeError`` (what a failed collective
  raises; also a bug that raises one) when in-process: the round is abandoned (its connections
  shut, the default process group destroyed) and the loop waits for the next round message. If
  none comes within the round's ``deadline_ms`` the loop raises :class:`RecoveryError` chained to
  the original error, and the script exits non-zero: the agent replaces it like any failed
  worker. Any other exception propagates.
* The step: ``rnd.step`` is the global step of the last completed optimizer step this process
  holds (-1: none; ``start_step`` when resuming from a checkpoint). Call ``rnd.step_done(step)``
  right after ``optimizer.step()``: a step whose update was not applied was never done, and one
  that was applied must be counted, or a rank would hold a state it does not name.
* The local lease (``DDPRUN_LEASE_FD``, docs/design.md "Fencing"): ddprun's agent vouches, in a
  shared page, until when the rendezvous server has this node as a member. Past it nothing may
  be committed: ``step_done`` does not count the step, gives up the state this process holds
  (its step becomes -1, so the next round sends it the newest state instead of taking its
  own) and raises :class:`LeaseExpired` (a RoundOver: in-process, ``with rnd:`` swallows it
  and the loop waits for the next round); without a control channel it exits the process
  with code 75 (``LEASE_EXPIRED_EXIT``). Before writing a checkpoint, ask
  ``rnd.may_commit()`` (False past the lease). Without the variable (torchrun, other
  backends) the lease is always valid.
* Checkpoint advice (docs/design.md §3c): ``checkpoint_interval_advice()`` is the run's
  advised seconds of training between checkpoints, or None before any: the newest ``advice``
  message of the agent in-process (the hello says the worker takes them), else
  ``DDPRUN_CHECKPOINT_INTERVAL_ADVICE`` as the agent started the worker. The reader thread also
  keeps that variable in ``os.environ`` current.
* Slow nodes (docs/design.md §3b): ``time_compute(ddp)`` registers a communication hook on a
  DistributedDataParallel model (before its first step; again on the model of every round) that
  notes when the step's last gradient bucket goes to the all-reduce. Each step report then says
  how long the rank computed since its previous ``step_done`` before it waited for the others
  (``compute_ms``, as ddp-train reports it), which ddprun's slow-node judge compares across
  nodes. The hook runs DDP's default all-reduce, so the training is unchanged.
* The environment: every round sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
  TORCHELASTIC_RESTART_COUNT and DDPRUN_ROUND in ``os.environ`` to the round's values, as a cold
  start of that round would have them.
* The store: under ddprun (``TORCHELASTIC_USE_AGENT_STORE=True``) the agent serves the c10d
  TCPStore at ``master_addr:master_port`` for the whole job and no worker serves one; otherwise
  the worker of rank 0 serves it unless the port is taken (a surviving worker's store from an
  earlier round, which it keeps serving for as long as it lives). Every rank connects a fresh
  client per round, and the round's keys go under ``PrefixStore(store_prefix)``.
* The state agreement: every rank contributes its step and whether it survived an earlier
  round (an all_gather); when the steps differ, the lowest rank with the highest step sends its
  state to all others, so values arrive bit for bit. A step more than ``max_step_lead`` (1)
  ahead of every other rank's, while another survivor is there to contradict it, cannot be
  true: it is refused (logged on every rank) and the next is taken. ``state`` maps names to
  objects with ``state_dict()``/``load_state_dict()`` (loaded in place) or to plain values
  (replaced in the dict). Equal steps everywhere (the first round, or a round where no one has
  less) send nothing: the ranks already agree.
* What ``state`` may hold: dense tensors (cpu or cuda, any usual dtype), None, bool, int,
  float, str, bytes, and list, tuple, dict and OrderedDict of these (keys: None, bool, int,
  float, str or tuples of them), torch.dtype and torch.Size; that is, what a model's and an
  optimizer's state_dict() hold. It travels as JSON metadata and raw tensor bytes, never as a
  pickle: nothing a peer sends can run code here. Anything else (a function, a numpy array, an
  object of the script's own class) raises :class:`StateError` naming it on every rank, before
  anything is sent. A receiver checks every size and count a peer announces against the
  metadata and against the memory it has (``max_state_bytes``) before allocating; a state that
  fails a check raises StateError (the worker exits; the agent replaces it).
* Collective timeout: unless ``timeout`` is given, in-process rounds use the round's
  ``deadline_ms`` (the agent's ``--reform-timeout``, at least 10 s), so a collective that would
  outwait the agent's patience fails instead (a step that legitimately blocks longer in a
  collective, e.g. while rank 0 writes a checkpoint, needs a larger ``timeout``).

Limits:

* The interruption shuts down the TCP sockets this process opened while forming the round (its
  store client and gloo's pairs). A socket another thread of the script opened during those
  milliseconds would be shut down too. Linux only (/proc/self/fd); elsewhere a blocked gloo
  collective waits for its timeout.
* NCCL is not interrupted by this module (it talks over NVLink/InfiniBand, not those sockets),
  see docs/inprocess-python.md: set ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` so that the watchdog
  aborts communicators without killing the process, give a modest ``timeout``, and know that a
  CUDA error can leave the context unusable: then exit, and the agent replaces the worker cold.
  Untested here (no GPU).
* Per-rank state that only the failed rank held (its RNG, its data position) is gone: the
  replacement gets the source rank's values. Derive per-rank randomness and data from
  (seed, rank, step) instead of from a stream.
* DistributedDataParallel binds its process group when built: build it in every round.
"""

import base64
import collections
import datetime
import json
import mmap
import os
import socket
import stat
import struct
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

__all__ = [
    "ControlError",
    "Control",
    "LEASE_EXPIRED_EXIT",
    "LeaseExpired",
    "RecoveryError",
    "Round",
    "RoundInfo",
    "RoundOver",
    "StateError",
    "checkpoint_interval_advice",
    "connect",
    "lease_valid",
    "report_checkpoint",
    "rounds",
    "run",
]

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 4096  # control/control_message.h kMaxControlLineBytes
CONTROL_SOCKET_ENV = "DDPRUN_CONTROL_SOCKET"
ADVICE_ENV = "DDPRUN_CHECKPOINT_INTERVAL_ADVICE"
_MAX_ADVICE_S = 1e9  # control/control_message.cc: an advice beyond this is not one
_MAX_INT = 2**31 - 1
_MAX_ROUND = 2**53
_DEFAULT_DEADLINE_S = 60.0
_MIN_TIMEOUT_S = 10.0
LEASE_FD_ENV = "DDPRUN_LEASE_FD"
LEASE_EXPIRED_EXIT = 75  # trainer/io/commit_guard.h kExitLeaseExpired
_LEASE_MAGIC = 0x4C504444  # common/lease_page.h: "DDPL", version 1, valid_until at byte 8
_LEASE_PAGE = 4096
_lease_page = None  # the mapping, False when there is no lease


def _lease_until_ns():
    """The lease's valid_until (CLOCK_MONOTONIC ns), or None without DDPRUN_LEASE_FD."""
    global _lease_page
    if _lease_page is None:
        value = os.environ.get(LEASE_FD_ENV, "")
        if not value:
            _lease_page = False
        else:
            try:
                fd = int(value)
                page = mmap.mmap(fd, _LEASE_PAGE, mmap.MAP_SHARED, mmap.PROT_READ)
            except (ValueError, OSError) as e:
                raise ValueError(f"{LEASE_FD_ENV}={value}: not a ddprun lease page: {e}") from e
            magic, version = struct.unpack_from("<II", page, 0)
            if magic != _LEASE_MAGIC or version != 1:
                raise ValueError(f"{LEASE_FD_ENV}={value}: not a ddprun lease page (version 1)")
            _lease_page = page
    if _lease_page is False:
        return None
    return struct.unpack_from("<q", _lease_page, 8)[0]


def lease_valid():
    """True unless ddprun's local lease (DDPRUN_LEASE_FD) has expired: past it this node may
    have been given up by its run and must commit nothing. Always True without the variable."""
    until = _lease_until_ns()
    return until is None or time.monotonic_ns() < until


_progress_fd = None
_checkpoint_ms = None  # a save report_checkpoint() was told of, for the next step report


def report_checkpoint(seconds):
    """Tells ddprun's checkpoint advice (docs/design.md §3c) that this rank saved a checkpoint
    that took `seconds` (the whole save, which the other ranks wait for): it goes with the next
    step report, as ddp-train's "checkpoint_ms". Nothing without ddprun."""
    global _checkpoint_ms
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
        _checkpoint_ms = max(_checkpoint_ms or 0.0, float(seconds) * 1000)


class _ComputeTimer:
    """When this rank began its step (its previous step_done) and when the step's last gradient
    bucket went to the all-reduce (time_compute's hook, on autograd's thread): the time between
    is what the rank computed before it could only wait for the others."""
    began = None
    handed_over = None

    def take_ms(self):
        """The step's compute time in ms (None without both marks), and a new step begins."""
        began, handed, now = self.began, self.handed_over, time.monotonic()
        self.began, self.handed_over = now, None
        if began is None or handed is None or handed < began:
            return None
        return (handed - began) * 1000


_compute_timer = None


def time_compute(ddp_model):
    """Times each step's computation for ddprun's slow-node judge: registers a communication
    hook on `ddp_model` (a DistributedDataParallel, before its first forward) that notes when
    each gradient bucket is handed over and then runs DDP's default all-reduce, unchanged. The
    next step reports carry "compute_ms". Call it on the DDP model of every round."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    global _compute_timer
    if _compute_timer is None:
        _compute_timer = _ComputeTimer()
    timer = _compute_timer
    timer.began = timer.handed_over = None  # a new round: its first step starts the figures

    def timed_allreduce(process_group, bucket):
        timer.handed_over = time.monotonic()
        return default_hooks.allreduce_hook(process_group, bucket)

    ddp_model.register_comm_hook(None, timed_allreduce)


def _report_step(step):
    """Tells ddprun's goodput ledger and hang detection that the worker starts step `step`
    (DDPRUN_PROGRESS_FILE, one line {"pid":P,"step":S}, as ddp-train writes it; with
    "compute_ms" after time_compute() and "checkpoint_ms" after report_checkpoint()). Never
    waits and never fails the training: the FIFO is opened non-blocking, a full pipe drops the
    line, any other error turns the reports off."""
    global _checkpoint_ms
    compute_ms = _compute_timer.take_ms() if _compute_timer is not None else None
    global _progress_fd
    if _progress_fd is None:
        path = os.environ.get("DDPRUN_PROGRESS_FILE", "")
        try:
            _progress_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK) if path else -1
        except OSError:
            _progress_fd = -1
    if _progress_fd < 0:
        return
    try:
        computed = "" if compute_ms is None else f',"compute_ms":{compute_ms:.3f}'
        saved = "" if _checkpoint_ms is None else f',"checkpoint_ms":{_checkpoint_ms:.3f}'
        line = f'{{"pid":{os.getpid()},"step":{step}{computed}{saved}}}\n'
        os.write(_progress_fd, line.encode())
        _checkpoint_ms = None
    except BlockingIOError:
        pass
    except OSError:
        os.close(_progress_fd)
        _progress_fd = -1


class RoundOver(Exception):
    """This worker's round is over (aborted, superseded, or the agent is gone): abandon it."""


class LeaseExpired(RoundOver):
    """ddprun's local lease expired: this node may have been given up; nothing is committed."""


class ControlError(Exception):
    """The control channel failed: the agent is unreachable, silent, or sent garbage."""


class RecoveryError(Exception):
    """A round failed and no next round came within the deadline (the cause is chained)."""


class StateError(Exception):
    """The state cannot be handed over: it holds a value the hand-over cannot carry (raised on
    every rank before anything is sent), or what a peer sent is not a valid state. Not a
    RuntimeError: it is not a failed round, and the worker exits with it."""


def _first_line(error):
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _log(message):
    print(f"ddprun_inprocess[pid {os.getpid()}]: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The wire format (control/control_message.h): one JSON object per line, unknown fields ignored.


class RoundInfo:
    """One round message: the coordinates of this worker in round ``round``."""

    _INT_FIELDS = (
        "round", "rank", "world_size", "local_rank", "local_world_size", "group_rank",
        "group_world_size", "master_port", "restart_count", "deadline_ms",
    )
    __slots__ = _INT_FIELDS + ("master_addr", "store_prefix")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __repr__(self):
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"RoundInfo({inner})"


def _int_field(obj, name, lo, hi):
    if name not in obj:
        raise ValueError(f'no "{name}"')
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f'"{name}" is not an integer')
    if v < lo or v > hi:
        raise ValueError(f'"{name}"={v} is outside [{lo}, {hi}]')
    return v


def _str_field(obj, name, max_len):
    if name not in obj:
        raise ValueError(f'no "{name}"')
    v = obj[name]
    if not isinstance(v, str):
        raise ValueError(f'"{name}" is not a string')
    if len(v.encode("utf-8", "surrogatepass")) > max_len:
        raise ValueError(f'"{name}" is longer than {max_len}')
    return v


def parse_message(line):
    """Parses one line (bytes, no newline) from the agent: ("round", RoundInfo),
    ("abort", (round, reason)), ("advice", seconds), or ValueError naming what is wrong, as the
    C++ parser would."""
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"a line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not JSON") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ValueError('no "type" string')
    if kind == "round":
        f = {"round": _int_field(obj, "round", 0, _MAX_ROUND)}
        f["world_size"] = _int_field(obj, "world_size", 1, _MAX_INT)
        f["rank"] = _int_field(obj, "rank", 0, f["world_size"] - 1)
        f["local_world_size"] = _int_field(obj, "local_world_size", 1, _MAX_INT)
        f["local_rank"] = _int_field(obj, "local_rank", 0, f["local_world_size"] - 1)
        f["group_world_size"] = _int_field(obj, "group_world_size", 1, _MAX_INT)
        f["group_rank"] = _int_field(obj, "group_rank", 0, f["group_world_size"] - 1)
        f["master_port"] = _int_field(obj, "master_port", 0, 65535)
        f["restart_count"] = _int_field(obj, "restart_count", 0, _MAX_INT)
        f["master_addr"] = _str_field(obj, "master_addr", 256)
        f["store_prefix"] = _str_field(obj, "store_prefix", 256)
        f["deadline_ms"] = _int_field(obj, "deadline_ms", 0, _MAX_ROUND)
        return "round", RoundInfo(**f)
    if kind == "abort":
        return "abort", (_int_field(obj, "round", 0, _MAX_ROUND),
                         _str_field(obj, "reason", MAX_LINE_BYTES))
    if kind == "advice":
        seconds = obj.get("checkpoint_interval_s")
        if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                or not 0 < seconds <= _MAX_ADVICE_S):
            raise ValueError('advice: no valid "checkpoint_interval_s"')
        return "advice", float(seconds)
    if kind in ("hello", "ready"):
        raise ValueError(f'a "{kind}" message, which only a worker sends')
    raise ValueError(f'unknown message type "{kind}"')


def _encode(obj):
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


# ---------------------------------------------------------------------------------------------
# The round's TCP connections, so that a round that is over can be cut off under a blocked
# collective: sockets whose (fd, inode) appeared while the round was being formed.


def _socket_inodes():
    """{fd: inode} of this process's sockets; {} where /proc/self/fd is not there."""
    out = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            fd = int(name)
            st = os.fstat(fd)
        except (ValueError, OSError):
            continue
        if stat.S_ISSOCK(st.st_mode):
            out[fd] = st.st_ino
    return out


def _shutdown_socket(fd, inode, keep_ports):
    """Shuts down fd if it is still the TCP connection `inode` and its local port is not one of
    `keep_ports` (connections accepted by a store this process serves)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return
    try:
        if os.fstat(dup).st_ino != inode:
            return
        s = socket.socket(fileno=dup)
        dup = -1  # the socket object owns it now
        try:
            if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                return
            if s.getsockname()[1] in keep_ports:
                return
            s.getpeername()  # listening sockets have none: left alone
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.close()  # closes the duplicate only
    finally:
        if dup >= 0:
            os.close(dup)


class _RoundSockets:
    def __init__(self, keep_ports):
        self._keep_ports = frozenset(keep_ports)
        self._before = _socket_inodes()
        self._owned = None  # fixed once the round is formed

    def formed(self):
        self._owned = self._new()

    def _new(self):
        return {fd: ino for fd, ino in _socket_inodes().items() if self._before.get(fd) != ino}

    def shutdown(self):
        owned = self._owned if self._owned is not None else self._new()
        for fd, inode in owned.items():
            _shutdown_socket(fd, inode, self._keep_ports)


# ---------------------------------------------------------------------------------------------
# The control channel.


class Control:
    """The connection to this worker's ddprun agent (thread-safe). Made by :func:`connect`.

    A daemon thread reads the agent's messages; the newest round message and the highest
    aborted round are kept. A bad line, a line over 4096 bytes or EOF closes the channel: every
    wait then fails with :class:`ControlError` naming why.
    """

    def __init__(self, sock, local_rank):
        self._sock = sock
        self.local_rank = local_rank
        self._cond = threading.Condition()
        self._round = None  # newest RoundInfo
        self._aborted = -1  # highest round an abort named
        self._abort_reason = ""
        self._closed = None  # why the channel is closed, or None
        self._advice = None  # the newest checkpoint advice, seconds
        self._active = None  # (round number, _RoundSockets) being formed or run
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, name="ddprun-control",
                                        daemon=True)
        self._reader.start()

    # -- reader thread --

    def _read_loop(self):
        buffer = b""
        why = "the agent closed the control channel"
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    kind, value = parse_message(line)
                    with self._cond:
                        if kind == "round":
                            if self._round is None or value.round > self._round.round:
                                self._round = value  # an older round is stale: ignored
                        elif kind == "advice":
                            self._advice = value
                            os.environ[ADVICE_ENV] = f"{value:g}"
                        elif value[0] > self._aborted:
                            self._aborted, self._abort_reason = value
                        self._cond.notify_all()
                        self._interrupt_if_over()
                if len(buffer) > MAX_LINE_BYTES:
                    raise ValueError(f"a line over {MAX_LINE_BYTES} bytes")
        except ValueError as e:
            why = f"a bad message from the agent: {e}"
        except OSError as e:
            why = f"reading from the agent: {e}"
        except Exception as e:  # never leave a waiter without an answer
            why = f"the control channel's reader failed: {e!r}"
        with self._cond:
            self._closed = why
            self._cond.notify_all()
            self._interrupt_if_over()

    def _over_locked(self, number):
        return (self._closed is not None or self._aborted >= number
                or (self._round is not None and self._round.round > number))

    def _interrupt_if_over(self):
        # REQUIRES: self._cond held.
        if self._active is not None and self._over_locked(self._active[0]):
            _, sockets = self._active
            self._active = None
            sockets.shutdown()

    # -- any thread --

    def current_round(self):
        """The newest round message (None before the first)."""
        with self._cond:
            return self._round

    def round_over(self, number):
        """True once round `number` is over: aborted, superseded, or the channel closed."""
        with self._cond:
            return self._over_locked(number)

    def abort_reason(self):
        with self._cond:
            return self._abort_reason

    def checkpoint_advice(self):
        """The newest checkpoint advice the agent sent (seconds), or None."""
        with self._cond:
            return self._advice

    def wait_round(self, after, timeout_s):
        """The first round message newer than `after`, waiting up to `timeout_s`.
        ControlError when the channel closes or nothing comes in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._round is not None and self._round.round > after:
                    return self._round
                if self._closed is not None:
                    raise ControlError(f"control channel: {self._closed}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ControlError(f"no new round from the agent within {timeout_s:g} s")
                self._cond.wait(left)

    def send_ready(self, number, step):
        self._send({"type": "ready", "round": number, "step": step})

    def _send(self, obj):
        with self._write_lock:
            try:
                self._sock.sendall(_encode(obj))
            except OSError as e:
                raise ControlError(f"control channel: sending {obj['type']}: {e}") from None

    def _activate(self, number, sockets):
        """Marks round `number` as this process's, cut off (sockets shut down) once it is over."""
        with self._cond:
            self._active = (number, sockets)
            self._interrupt_if_over()

    def _abandon(self):
        """The main thread gives up the active round: its connections are shut down, so peers
        blocked on this process fail at once too."""
        with self._cond:
            if self._active is not None:
                _, sockets = self._active
                self._active = None
                sockets.shutdown()

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(timeout=5)
        self._sock.close()


_connected = None  # the Control of connect(), for checkpoint_interval_advice()


def checkpoint_interval_advice():
    """The run's advised seconds of training between checkpoints (ddprun's checkpoint advice,
    docs/design.md §3c), or None before any: the agent's newest advice message in-process, else
    DDPRUN_CHECKPOINT_INTERVAL_ADVICE as the worker was started with it."""
    if _connected is not None:
        advice = _connected.checkpoint_advice()
        if advice is not None:
            return advice
    try:
        value = float(os.environ.get(ADVICE_ENV, ""))
    except ValueError:
        return None
    return value if 0 < value <= _MAX_ADVICE_S else None


def connect(timeout=60.0):
    """Connects to the agent named by DDPRUN_CONTROL_SOCKET, says hello and waits up to
    `timeout` seconds for this worker's first round.

    Returns None when DDPRUN_CONTROL_SOCKET is unset or empty (not in-process mode: the script
    runs as it would without this module). Raises ControlError when the agent cannot be reached,
    does not answer in time, or answers with something that is not a round message."""
    path = os.environ.get(CONTROL_SOCKET_ENV, "")
    if not path:
        return None
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", ""))
    except ValueError:
        raise ControlError(f"{CONTROL_SOCKET_ENV} is set but LOCAL_RANK is not an integer: "
                           f"{os.environ.get('LOCAL_RANK')!r}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        raise ControlError(f"{CONTROL_SOCKET_ENV}={path}: connect: {e}") from None
    ctl = Control(sock, local_rank)
    try:
        ctl._send({"type": "hello", "version": PROTOCOL_VERSION, "local_rank": local_rank,
                   "pid": os.getpid(), "advice": True})
        ctl.wait_round(-1, timeout)
    except ControlError as e:
        ctl.close()
        raise ControlError(f"control channel {path}: no round from the agent: {e}") from None
    global _connected
    _connected = ctl
    return ctl


# ---------------------------------------------------------------------------------------------
# Rounds.


class Round:
    """One round of the job, as yielded by :func:`rounds` with the default process group formed.

    Attributes: ``round`` (number; 0 without ddprun), ``rank``, ``world_size``, ``local_rank``,
    ``restart_count``, ``info`` (the RoundInfo; None without ddprun), ``step`` (the last
    completed step this process holds), ``source`` (the rank whose state was taken; None when
    none was sent), ``failed`` (the exception that ended the round, set by ``with rnd:``).
    Used from the training thread only.
    """

    def __init__(self, ctl, info, step, source=None):
        self._ctl = ctl
        self.info = info
        self.round = info.round if info else 0
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = info.local_rank if info else int(os.environ.get("LOCAL_RANK", 0))
        self.restart_count = (info.restart_count if info
                              else int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))
        self.step = step
        self.source = source
        self.failed = None

    @property
    def in_process(self):
        """True under ddprun --restart-mode=in-process (a control channel)."""
        return self._ctl is not None

    def over(self):
        """True once this round is over (always False without ddprun)."""
        return self._ctl is not None and self._ctl.round_over(self.round)

    def step_done(self, step):
        """Records that optimizer step `step` is complete (call it right after
        ``optimizer.step()``). Raises RoundOver when the round is over, ControlError when the
        agent is gone (the worker should exit)."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step_done: step must be an int, not {type(step).__name__}")
        if not lease_valid():
            self._stop_on_lease(step)
        self.step = step
        _report_step(step + 1)
        if self.over():
            self._raise_over()

    def may_commit(self):
        """False once ddprun's local lease expired (ask before writing a checkpoint)."""
        return lease_valid()

    def _stop_on_lease(self, step):
        # The update of `step` may be applied already: the state this process holds is no
        # longer one it can name, so it claims none and takes the newest in the next round.
        self.step = -1
        message = (f"round {self.round}: rank {self.rank}: not committing step {step}: ddprun's "
                   f"local lease expired (this node may have been given up by its run)")
        _log(message)
        if self._ctl is None:
            raise SystemExit(LEASE_EXPIRED_EXIT)
        raise LeaseExpired(message)

    def _raise_over(self):
        ctl = self._ctl
        with ctl._cond:
            closed = ctl._closed
        if closed is not None:
            raise ControlError(f"control channel: {closed}")
        reason = ctl.abort_reason()
        raise RoundOver(f"round {self.round} is over" + (f": {reason}" if reason else ""))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or self._ctl is None:
            return False
        if isinstance(exc, (RoundOver, RuntimeError)):
            self.failed = exc
            return True
        return False


def _collective_timeout(info, timeout):
    if timeout is not None:
        return timeout
    seconds = info.deadline_ms / 1000.0 if info.deadline_ms > 0 else _DEFAULT_DEADLINE_S
    return datetime.timedelta(seconds=max(seconds, _MIN_TIMEOUT_S))


# Stores this process serves, by (addr, port), kept for the life of the process: ranks of later
# rounds may still be connected to them.
_served_stores = {}


def _serve_store_if_free(info, timeout):
    key = (info.master_addr, info.master_port)
    if key in _served_stores:
        return
    try:
        _served_stores[key] = dist.TCPStore(
            info.master_addr, info.master_port, world_size=None, is_master=True,
            timeout=timeout, wait_for_workers=False)
    except RuntimeError as e:  # the port is taken: a surviving worker's store, most likely
        _log(f"round {info.round}: not serving the store at "
             f"{info.master_addr}:{info.master_port} ({str(e).splitlines()[0]}); "
             "connecting to the one there")


def _comm_device(backend):
    if str(backend).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# The state hand-over (§6b.3). Nothing a peer sends is ever run or unpickled: the state travels
# as JSON metadata (plain values, containers, and each tensor's dtype, shape and device) and the
# tensors' raw bytes. A receiver checks every size and count against bounds, against what the
# metadata implies and against the memory it has, before it allocates anything.

STATE_FORMAT_VERSION = 1
_STATE_MAGIC = 0x64647073  # "ddps"
_HEADER_FIELDS = 6  # magic, version, status (0 ok, 1 the source failed), meta bytes,
#                     tensor bytes, tensor count
_MAX_META_BYTES = 64 << 20
_MAX_DEPTH = 64
_MAX_DIMS = 64
_MAX_STEP = 2**62
_ALLOWED = ("allowed: dense torch tensors on cpu or cuda, None, bool, int, float, str, bytes, "
            "list, tuple, dict and collections.OrderedDict of these, torch.dtype, torch.Size; "
            "and, as a value of `state` itself, an object with state_dict()/load_state_dict()")


def _dtype_table():
    sizes = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16,
             "complex64": 8, "complex32": 4, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
             "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}
    return {name: (getattr(torch, name), size) for name, size in sizes.items()
            if isinstance(getattr(torch, name, None), torch.dtype)}


_DTYPES = _dtype_table()
_DTYPE_NAMES = {dt: name for name, (dt, _) in _DTYPES.items()}


def _type_name(obj):
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class _Encoder:
    """The metadata of a state: JSON-ready values, dense tensors replaced by {"tensor": i}."""

    def __init__(self):
        self.tensors = []

    def value(self, obj, path, depth=0):
        if depth > _MAX_DEPTH:
            raise StateError(f"{path}: nested deeper than {_MAX_DEPTH} levels (a cycle?)")
        t = type(obj)
        if obj is None or t in (bool, int, str):
            return obj
        if t is float:
            return obj  # NaN and infinities too (JSON's NaN/Infinity tokens)
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj, path)
        if t is list:
            return {"list": [self.value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]}
        if t is tuple:
            return {"tuple": [self.value(v, f"{path}[{i}]", depth + 1)
                              for i, v in enumerate(obj)]}
        if t is dict or t is collections.OrderedDict:
            items = [[self.key(k, path), self.value(v, f"{path}[{k!r}]", depth + 1)]
                     for k, v in obj.items()]
            if t is dict:
                return {"dict": items}
            attrs = dict(vars(obj))
            metadata = attrs.pop("_metadata", None)  # what Module.state_dict() attaches
            if attrs:
                raise StateError(f"{path}: an OrderedDict with attributes {sorted(attrs)} "
                                 "cannot be handed over (only _metadata is carried)")
            out = {"odict": items}
            if metadata is not None:
                out["metadata"] = self.value(metadata, f"{path}._metadata", depth + 1)
            return out
        if t is torch.Size:
            return {"size": list(obj)}
        if t is torch.dtype and obj in _DTYPE_NAMES:
            return {"dtype": _DTYPE_NAMES[obj]}
        if t is bytes:
            return {"bytes": base64.b64encode(obj).decode("ascii")}
        raise StateError(f"{path}: a {_type_name(obj)} cannot be handed over to a replacement "
                         f"({_ALLOWED}); convert it, or keep it out of `state`")

    def key(self, k, path):
        if k is None or type(k) in (bool, int, float, str):
            return k
        if type(k) is tuple:
            return self.value(k, f"{path} key {k!r}", 1)
        raise StateError(f"{path}: a dict key of type {_type_name(k)} cannot be handed over "
                         "(keys: None, bool, int, float, str, or tuples of them)")

    def _tensor(self, t, path):
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise StateError(f"{path}: a tensor subclass {_type_name(t)} cannot be handed over "
                             f"({_ALLOWED})")
        if (t.layout != torch.strided or t.is_quantized or getattr(t, "is_nested", False)
                or t.device.type not in ("cpu", "cuda") or t.dtype not in _DTYPE_NAMES):
            raise StateError(f"{path}: a {t.layout} {t.dtype} tensor on {t.device.type} cannot be "
                             f"handed over ({_ALLOWED})")
        self.tensors.append(t)
        return {"tensor": len(self.tensors) - 1}


def _snapshot(state):
    return {name: (obj.state_dict() if hasattr(obj, "state_dict") else obj)
            for name, obj in state.items()}


def _encode_state(state):
    """(metadata bytes, tensors) of `state`; StateError naming the first value it cannot carry."""
    enc = _Encoder()
    names = []
    for name, value in _snapshot(state).items():
        if type(name) is not str:
            raise StateError(f"state key {name!r}: the names in `state` must be str")
        names.append([name, enc.value(value, f"state[{name!r}]")])
    specs = [{"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape), "device": t.device.type}
             for t in enc.tensors]
    meta = json.dumps({"state": names, "tensors": specs}, separators=(",", ":")).encode("utf-8")
    if len(meta) > _MAX_META_BYTES:
        raise StateError(f"the state's plain values take {len(meta)} bytes of metadata (at most "
                         f"{_MAX_META_BYTES}): put bulk data into tensors")
    return meta, enc.tensors


def _int_list(v, what, lo, hi, max_len):
    if type(v) is not list or len(v) > max_len:
        raise ValueError(f"{what} is not a list of at most {max_len} integers")
    for x in v:
        if type(x) is not int or x < lo or x > hi:
            raise ValueError(f"{what} holds {x!r}, not an integer in [{lo}, {hi}]")
    return v


def _tensor_layout(specs, count, tensor_bytes):
    """[(dtype, shape, device type, offset, nbytes)] from the metadata's tensor list, checked:
    known dtypes, at most _MAX_DIMS dimensions, sizes that add up to exactly `tensor_bytes`."""
    if type(specs) is not list or len(specs) != count:
        raise ValueError(f"the header announces {count} tensors, the metadata lists "
                         f"{len(specs) if type(specs) is list else 'none'}")
    out, offset = [], 0
    for i, spec in enumerate(specs):
        if type(spec) is not dict or set(spec) != {"dtype", "shape", "device"}:
            raise ValueError(f"tensor {i}: not a {{dtype, shape, device}} object")
        if spec["dtype"] not in _DTYPES:
            raise ValueError(f"tensor {i}: unknown dtype {str(spec['dtype'])[:40]!r}")
        if spec["device"] not in ("cpu", "cuda"):
            raise ValueError(f"tensor {i}: device {str(spec['device'])[:40]!r} (cpu or cuda)")
        dtype, itemsize = _DTYPES[spec["dtype"]]
        shape = _int_list(spec["shape"], f"tensor {i}'s shape", 0, 2**62, _MAX_DIMS)
        nbytes = itemsize
        for d in shape:
            nbytes *= d
        if nbytes > tensor_bytes - offset:
            raise ValueError(f"tensor {i} ({spec['dtype']} {shape}) needs {nbytes} bytes, more "
                             f"than the {tensor_bytes - offset} announced bytes left")
        out.append((dtype, shape, spec["device"], offset, nbytes))
        offset += nbytes
    if offset != tensor_bytes:
        raise ValueError(f"the tensors take {offset} bytes, the header announces {tensor_bytes}")
    return out


class _Decoder:
    """Values back from the metadata; each tensor index may be used once (no amplification)."""

    def __init__(self, make_tensor, count):
        self._make_tensor = make_tensor
        self._used = [False] * count

    def value(self, v, depth=0):
        if depth > _MAX_DEPTH:
            raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is not dict or not v:
            raise ValueError(f"a bare {type(v).__name__} where a tagged value was expected")
        if "odict" in v and set(v) <= {"odict", "metadata"}:
            out = collections.OrderedDict(self._items(v["odict"], depth))
            if "metadata" in v:
                out._metadata = self.value(v["metadata"], depth + 1)
            return out
        if len(v) != 1:
            raise ValueError(f"a tagged value with keys {sorted(v)[:4]}")
        tag, body = next(iter(v.items()))
        if tag in ("list", "tuple"):
            if type(body) is not list:
                raise ValueError(f'"{tag}" is not a JSON array')
            items = [self.value(x, depth + 1) for x in body]
            return items if tag == "list" else tuple(items)
        if tag == "dict":
            return dict(self._items(body, depth))
        if tag == "tensor":
            if type(body) is not int or not 0 <= body < len(self._used) or self._used[body]:
                raise ValueError(f"tensor reference {body!r} unknown or used twice")
            self._used[body] = True
            return self._make_tensor(body)
        if tag == "size":
            return torch.Size(_int_list(body, "a torch.Size", 0, 2**63 - 1, _MAX_DIMS))
        if tag == "dtype":
            if body not in _DTYPES:
                raise ValueError(f"unknown dtype {str(body)[:40]!r}")
            return _DTYPES[body][0]
        if tag == "bytes":
            if type(body) is not str:
                raise ValueError('"bytes" is not a string')
            return base64.b64decode(body.encode("ascii"), validate=True)
        raise ValueError(f"unknown tag {str(tag)[:40]!r}")

    def _items(self, body, depth):
        if type(body) is not list:
            raise ValueError("a mapping that is not a list of pairs")
        out = []
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("a mapping entry that is not a [key, value] pair")
            key = self.value(pair[0], depth + 1)
            try:
                hash(key)
            except TypeError:
                raise ValueError(f"an unhashable key of type {type(key).__name__}") from None
            out.append((key, self.value(pair[1], depth + 1)))
        return out


def _meminfo_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _cgroup_available():
    """memory.max - memory.current of this process's cgroup (v2); None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.split(":", 2)[2].strip() for line in f if line.startswith("0::")),
                        None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError, IndexError):
        return None


def _receive_limit(device, max_state_bytes):
    """The most bytes this process accepts from a peer, and what sets that bound."""
    bounds = []
    if max_state_bytes is not None:
        bounds.append((int(max_state_bytes), "max_state_bytes"))
    for value, what in ((_meminfo_available(), "memory available"),
                        (_cgroup_available(), "memory left in this cgroup")):
        if value is not None:
            bounds.append((value, what))
    if device.type == "cuda":
        bounds.append((torch.cuda.mem_get_info(device)[0], f"free memory on {device}"))
    return min(bounds) if bounds else (1 << 40, "1 TiB")


def _check_header(header, src, limit):
    """(meta bytes, tensor bytes, tensor count) from a source's header, or StateError: the
    format, the source's status, and sizes within bounds and within `limit` (bytes, why)."""
    magic, version, status, meta_len, tensor_bytes, count = header
    if magic != _STATE_MAGIC or version != STATE_FORMAT_VERSION:
        raise StateError(f"rank {src} sent no state of format {STATE_FORMAT_VERSION} "
                         f"(header {[magic, version]})")
    if status != 0:
        raise StateError(f"rank {src} could not serialise its state (its log says why)")
    if not 2 <= meta_len <= _MAX_META_BYTES or not 0 <= count <= meta_len or tensor_bytes < 0:
        raise StateError(f"rank {src} announces {meta_len} bytes of metadata (2 to "
                         f"{_MAX_META_BYTES}), {count} tensors, {tensor_bytes} tensor bytes")
    if meta_len + tensor_bytes > limit[0]:
        raise StateError(f"rank {src} announces a state of {meta_len + tensor_bytes} bytes, "
                         f"more than this process takes ({limit[0]} bytes: {limit[1]})")
    return meta_len, tensor_bytes, count


def _parse_meta(meta, src, count, tensor_bytes):
    """The metadata's JSON object and its tensors' layout (_tensor_layout), or StateError."""
    try:
        obj = json.loads(meta.decode("utf-8"))
        if type(obj) is not dict or set(obj) != {"state", "tensors"}:
            raise ValueError("not a {state, tensors} object")
        return obj, _tensor_layout(obj["tensors"], count, tensor_bytes)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise StateError(f"rank {src} sent invalid state metadata: {e}") from None


def _decode_state(obj, layout, payload, src):
    """{name: value} from parsed metadata and the CPU uint8 tensor of all tensors' bytes."""

    def make_tensor(i):
        dtype, shape, device_type, offset, nbytes = layout[i]
        raw = payload[offset:offset + nbytes]
        if dtype is torch.bool and nbytes and int(raw.max()) > 1:
            raise ValueError(f"tensor {i}: bool bytes other than 0 and 1")
        t = raw.clone().view(dtype).view(shape)
        if device_type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"tensor {i} is a CUDA tensor and this process has no CUDA")
            return t.to(torch.device("cuda", torch.cuda.current_device()))
        return t

    try:
        dec = _Decoder(make_tensor, len(layout))
        names = obj["state"]
        if type(names) is not list:
            raise ValueError("the state is not a list of [name, value] pairs")
        received = {}
        for pair in names:
            if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
                raise ValueError("a state entry that is not a [name, value] pair")
            received[pair[0]] = dec.value(pair[1])
        return received
    except (ValueError, RecursionError) as e:
        raise StateError(f"rank {src} sent an invalid state: {e}") from None


def _load_state(state, received, src):
    for name, value in received.items():
        target = state.get(name)
        if target is not None and hasattr(target, "load_state_dict"):
            try:
                target.load_state_dict(value)
            except Exception as e:
                raise StateError(f"state[{name!r}] from rank {src}: load_state_dict: "
                                 f"{_first_line(e)}") from e
        else:
            state[name] = value


def _broadcast_state(state, src, device, max_state_bytes=None):
    """Every rank takes rank `src`'s state: a fixed header, the metadata, the tensors' bytes."""
    if dist.get_rank() == src:
        _send_state(state, src, device)
        return
    header = torch.zeros(_HEADER_FIELDS, dtype=torch.int64, device=device)
    dist.broadcast(header, src)
    meta_len, tensor_bytes, count = _check_header(header.cpu().tolist(), src,
                                                  _receive_limit(device, max_state_bytes))
    meta = torch.empty(meta_len, dtype=torch.uint8, device=device)
    dist.broadcast(meta, src)
    obj, layout = _parse_meta(meta.cpu().numpy().tobytes(), src, count, tensor_bytes)
    payload = torch.empty(tensor_bytes, dtype=torch.uint8, device=device)
    if tensor_bytes:
        dist.broadcast(payload, src)
    _load_state(state, _decode_state(obj, layout, payload.cpu(), src), src)


def _pack_state(state, device):
    """(header, metadata bytes, [uint8 tensor per tensor]) of `state`, its tensors on `device`."""
    meta, tensors = _encode_state(state)
    raws = [t.detach().to(device).contiguous().view(-1).view(torch.uint8) for t in tensors]
    header = [_STATE_MAGIC, STATE_FORMAT_VERSION, 0, len(meta), sum(r.numel() for r in raws),
              len(raws)]
    return header, meta, raws


def _send_state(state, src, device):
    try:
        header, meta, raws = _pack_state(state, device)
        failure = None
    except Exception as e:  # the receivers must not wait for bytes that never come
        header = [_STATE_MAGIC, STATE_FORMAT_VERSION, 1, 0, 0, 0]
        failure = e
    dist.broadcast(torch.tensor(header, dtype=torch.int64, device=device), src)
    if failure is not None:
        raise failure
    dist.broadcast(torch.frombuffer(bytearray(meta), dtype=torch.uint8).to(device), src)
    if header[4]:
        dist.broadcast(torch.cat(raws), src)


def _choose_source(claims, max_step_lead):
    """Which rank's state the round takes, from every rank's (step, survivor) claim: the lowest
    rank with the highest step, unless that claim cannot be true. A survivor's step can lead the
    other survivors' by at most `max_step_lead` (1 under DDP: a rank cannot finish step s+2's
    all-reduce before every rank finished step s+1), so a claim more than that ahead of every
    other rank, while other survivors are there to contradict it, is refused, and the next is
    tried. Returns (source rank or None when nothing moves, agreed step, {rank: why refused})."""
    refused = {}
    for r, (step, survivor) in enumerate(claims):
        if not -1 <= step <= _MAX_STEP or survivor not in (0, 1):
            refused[r] = f"an invalid claim (step {step}, survivor {survivor})"
    while True:
        candidates = [r for r in range(len(claims)) if r not in refused]
        top = max((claims[r][0] for r in candidates), default=-1)
        if top < 0:
            return None, -1, refused
        src = next(r for r in candidates if claims[r][0] == top)
        others = [r for r in candidates if r != src]
        backed = any(claims[r][0] >= top - max_step_lead for r in others)
        survivors = [r for r in others if claims[r][1] == 1]
        if backed or not survivors:
            break
        best = max(survivors, key=lambda r: claims[r][0])
        refused[src] = (f"claims step {top}, more than {max_step_lead} ahead of every other "
                        f"rank (rank {best}, a survivor, holds step {claims[best][0]})")
    if not refused and all(s == top for s, _ in claims):
        return None, top, refused  # the ranks agree already
    return src, top, refused


def _agree(state, step, backend, survivor=False, max_step_lead=1, max_state_bytes=None):
    """The state agreement of §6b: returns (agreed step, source rank or None); `state` holds
    the agreed step's state on return. StateError when the state cannot be handed over."""
    device = _comm_device(backend)
    if state is not None:
        _encode_state(state)  # every rank, before any collective: a clear error, nobody waits
    world = dist.get_world_size()
    claims = [torch.zeros(2, dtype=torch.int64, device=device) for _ in range(world)]
    mine = torch.tensor([step, 1 if survivor else 0], dtype=torch.int64, device=device)
    dist.all_gather(claims, mine)
    claims = [tuple(int(x) for x in t.cpu().tolist()) for t in claims]
    src, top, refused = _choose_source(claims, max_step_lead)
    for r, why in sorted(refused.items()):
        _log(f"the state of rank {r} is not taken: it {why}")
    if src is not None and state is not None:
        _broadcast_state(state, src, device, max_state_bytes)
    return top, src


def _export_env(info):
    """The round's coordinates in the environment, as a cold start of this round would have
    them, for code that reads RANK & co. from os.environ (children inherit them too)."""
    os.environ.update({
        "RANK": str(info.rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
        "GROUP_RANK": str(info.group_rank),
        "GROUP_WORLD_SIZE": str(info.group_world_size),
        "ROLE_RANK": str(info.rank),
        "ROLE_WORLD_SIZE": str(info.world_size),
        "MASTER_ADDR": info.master_addr,
        "MASTER_PORT": str(info.master_port),
        "TORCHELASTIC_RESTART_COUNT": str(info.restart_count),
        "DDPRUN_ROUND": str(info.round),
    })


def _form(ctl, info, backend, state, held, timeout, handover):
    """Forms round `info`'s default process group and agrees on the state; returns a Round.
    Raises RuntimeError (a failed store, group or collective), RoundOver, or StateError (the
    state cannot be handed over). held["step"] is the step whose state this process holds,
    updated as soon as it took another rank's state (even if the round then fails: the next
    round must not count it as older); held["survivor"] is True once it took part in a round's
    state agreement. `handover`: _agree's max_step_lead and max_state_bytes."""
    pg_timeout = _collective_timeout(info, timeout)
    _export_env(info)
    if info.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        _serve_store_if_free(info, pg_timeout)
    keep_ports = {port for (_, port) in _served_stores}
    sockets = _RoundSockets(keep_ports)
    ctl._activate(info.round, sockets)
    if ctl.round_over(info.round):
        raise RoundOver(f"round {info.round} was over before it formed")
    client = dist.TCPStore(info.master_addr, info.master_port, world_size=None, is_master=False,
                           timeout=pg_timeout, wait_for_workers=False)
    store = dist.PrefixStore(info.store_prefix, client)
    dist.init_process_group(backend, store=store, rank=info.rank, world_size=info.world_size,
                            timeout=pg_timeout)
    sockets.formed()
    agreed, source = _agree(state, held["step"], backend, survivor=held["survivor"], **handover)
    held["step"] = agreed
    held["survivor"] = True
    if ctl.round_over(info.round):
        raise RoundOver(f"round {info.round} ended while it formed")
    ctl.send_ready(info.round, agreed)
    rnd = Round(ctl, info, agreed, source)
    rnd._store = client  # the round's store client lives as long as the round
    return rnd


def _drop_group(ctl):
    ctl._abandon()
    if dist.is_initialized():
        # After the round's sockets are shut down nothing the group waits on can block (gloo).
        dist.destroy_process_group()


def rounds(ctl, backend, state=None, timeout=None, start_step=-1, max_step_lead=1,
           max_state_bytes=None):
    """Yields the rounds of the job, each with torch.distributed's default group formed.

    ctl: from :func:`connect` (None: not in-process, one round with env:// init, no recovery).
    backend: "gloo", "nccl", ... as for init_process_group.
    state: {name: object with state_dict()/load_state_dict(), or a plain value}; when the
      ranks' steps differ, the lowest rank with the highest step sends its state. What may be
      in it (tensors, plain values, containers; see the module's docstring) is checked on every
      rank at every round: anything else raises StateError naming it.
    timeout: a datetime.timedelta for the process group (default: the round's deadline_ms, at
      least 10 s; without ddprun torch's own default).
    start_step: the step this process holds before the first round (-1: none; the checkpoint's
      step after loading one).
    max_step_lead: how many steps a survivor can be ahead of every other survivor (1 when
      every step all-reduces, as DDP does); a claim further ahead is refused as the source.
    max_state_bytes: the most bytes of state this process takes from a peer (default: the
      memory it has available).

    After a round whose body ended normally the generator ends. After one that failed (``with
    rnd:`` recorded it) it abandons the round and waits for the next round message, at most the
    round's deadline_ms; without one it raises RecoveryError from the failure.
    """
    if ctl is None:
        if not dist.is_initialized():
            if timeout is None:
                dist.init_process_group(backend)
            else:
                dist.init_process_group(backend, timeout=timeout)
        yield Round(None, None, start_step)
        return

    if dist.is_initialized():
        raise RuntimeError("ddprun_inprocess.rounds: the default process group is already "
                           "initialized; under ddprun's in-process mode rounds() forms it for "
                           "every round: do not call init_process_group yourself")
    if isinstance(max_step_lead, bool) or not isinstance(max_step_lead, int) or max_step_lead < 0:
        raise ValueError(f"rounds: max_step_lead must be an int >= 0, not {max_step_lead!r}")
    if max_state_bytes is not None and (isinstance(max_state_bytes, bool)
                                        or not isinstance(max_state_bytes, int)
                                        or max_state_bytes < 0):
        raise ValueError(f"rounds: max_state_bytes must be None or an int >= 0, not "
                         f"{max_state_bytes!r}")
    handover = {"max_step_lead": max_step_lead, "max_state_bytes": max_state_bytes}
    held = {"step": start_step, "survivor": False}
    info = ctl.current_round()
    while True:
        try:
            rnd = _form(ctl, info, backend, state, held, timeout, handover)
        except StateError as e:
            _log(f"round {info.round}: rank {info.rank}: {_first_line(e)}")
            _drop_group(ctl)  # the peers fail at once instead of waiting on this process
            raise
        except (RuntimeError, RoundOver) as e:
            failure = e
            _log(f"round {info.round}: rank {info.rank} could not form the group: "
                 f"{_first_line(e)}")
        else:
            _log(f"round {info.round}: rank {rnd.rank} of {rnd.world_size} ready at step "
                 f"{rnd.step}" + (f" (state from rank {rnd.source})"
                                  if rnd.source is not None else ""))
            yield rnd
            if rnd.failed is None:
                return
            failure = rnd.failed
            held["step"] = rnd.step
            rnd.failed = None
            # The traceback holds the failed round's frames, and with them its DDP wrapper (its
            # gradient buckets, its process group): clear their locals so they go now.
            traceback.clear_frames(failure.__traceback__)
            _log(f"round {info.round}: abandoned at step {rnd.step}: {_first_line(failure)}")
            rnd._store = None
        _drop_group(ctl)
        wait_s = info.deadline_ms / 1000.0 if info.deadline_ms > 0 else _DEFAULT_DEADLINE_S
        try:
            info = ctl.wait_round(info.round, wait_s)
        except ControlError as e:
            raise RecoveryError(f"round {info.round} failed and no next round came: {e}") \
                from failure


def run(train, backend, state=None, timeout=None, start_step=-1, ctl=None, connect_timeout=60.0,
        max_step_lead=1, max_state_bytes=None):
    """Runs ``train(rnd)`` once per round until one call returns; returns what it returned.

    The control channel is :func:`connect`'s unless `ctl` is given. Without ddprun's in-process
    mode this is ``init_process_group`` (env://) and one call of `train`, every exception
    propagating. See :func:`rounds` for the other arguments.
    """
    if ctl is None:
        ctl = connect(connect_timeout)
    result = None
    for rnd in rounds(ctl, backend, state=state, timeout=timeout, start_step=start_step,
                      max_step_lead=max_step_lead, max_state_bytes=max_state_bytes):
        with rnd:
            result = train(rnd)
    return result
