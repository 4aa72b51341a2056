"""A worker that attacks ddprun's local channels (issue 43 D3-D6 and the NUL byte), for
tests/integration/hostile_control_test.cc. Run as `python3 hostile_control.py MODE OUT_DIR`.

Every local rank speaks the in-process control protocol (control/control_message.h) when
DDPRUN_CONTROL_SOCKET is set: hello, its round message, ready (then it writes
OUT_DIR/ready.<local rank>.<restart count>). Then it counts steps of 50 ms,
printing "rank=R step=S", until OUT_DIR/stop exists or 20 s have passed, and exits 0. A rank
whose channel the agent closes prints "local rank L lost its channel" and exits 7 (as
ddprun_inprocess does). Local rank 0 writes its pid to OUT_DIR/rank0.pid.

Local rank 1 misbehaves in the job's first start only (restart count 0), per MODE:
  impersonate  a child of it joins rank 0's process group and says hello as local rank 0;
               OUT_DIR/impersonation says "accepted" (it got a round) or "refused"
  stale-ready  floods ready messages for a round that is not the current one for 2 s
  step-flood   writes step reports naming made-up pids on its DDPRUN_PROGRESS_FILE for 2 s
  hide-hang    (rank 0 prints nothing and hangs) reports steps for rank 0's pid every 100 ms
  nul-hello    its hello line ends in a NUL byte; OUT_DIR/nul-hello says accepted or refused
  fail-on-go   exits 1 once OUT_DIR/go exists (its replacement behaves)
Every attack ends with OUT_DIR/<MODE>.done.

MODE spare-flood (with ddprun --preload=native): a spare sends "ready" as fast as it can for
1.5 s, then takes the hand-over as ddp-train does; the worker prints one line, waits 3 s (while
the next spare floods) and exits 0.
"""

import json
import os
import random
import select
import socket
import sys
import time

MODE, OUT = sys.argv[1], sys.argv[2]
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def write(name, text):
    with open(os.path.join(OUT, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(OUT, name + ".tmp"), os.path.join(OUT, name))


def wait_for(name, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(OUT, name)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["DDPRUN_CONTROL_SOCKET"])
    return s


def hello_line(local_rank):
    return json.dumps({"type": "hello", "version": 1, "local_rank": local_rank,
                       "pid": os.getpid()}).encode() + b"\n"


def read_round(s, timeout):
    """The first message (a round) from the agent, or None when it closes the channel."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
    except (socket.timeout, OSError):
        return None
    return json.loads(data.split(b"\n")[0])


def spare_flood():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET,
                         fileno=int(os.environ.pop("DDPRUN_PRELOAD_FD")))
    sock.setblocking(False)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and not select.select([sock], [], [], 0)[0]:
        try:
            sock.send(b"ready")
        except BlockingIOError:
            time.sleep(0.001)
        except BrokenPipeError:
            break  # the hand-over came, and ddprun closed its end
    sock.setblocking(True)
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 22, 2)
    if not msg.startswith(b"start\0") or len(fds) != 2:
        os._exit(0)
    os.environ.clear()
    for item in msg.split(b"\0")[1:]:
        if b"=" in item:
            key, value = item.split(b"=", 1)
            os.environb[key] = value
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)


def main():
    if MODE == "spare-flood":
        if "DDPRUN_PRELOAD_FD" in os.environ:
            try:
                spare_flood()
            except BaseException:
                import traceback
                write("spare-error.%d" % os.getpid(), traceback.format_exc())
                raise
        say("worker %d started" % os.getpid())
        time.sleep(3)
        return 0
    if LOCAL_RANK == 0:
        write("rank0.pid", str(os.getpid()))
    channel = None
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    round_message = {"round": 0, "restart_count": restarts}
    first_start = round_message["restart_count"] == 0
    if "DDPRUN_CONTROL_SOCKET" in os.environ:
        channel = connect()
        nul = MODE == "nul-hello" and LOCAL_RANK == 1
        channel.sendall(hello_line(LOCAL_RANK)[:-1] + (b"\0\n" if nul else b"\n"))
        round_message = read_round(channel, 10)
        if nul:
            write("nul-hello", "accepted" if round_message else "refused")
            write(MODE + ".done", "")
            return 0
        if round_message is None:
            say("local rank %d: no round from the agent" % LOCAL_RANK)
            return 3
        first_start = round_message["restart_count"] == 0
        channel.sendall(json.dumps({"type": "ready", "round": round_message["round"],
                                    "step": 0}).encode() + b"\n")
        channel.settimeout(None)
        write("ready.%d.%d" % (LOCAL_RANK, round_message["restart_count"]), "")
    if LOCAL_RANK == 1 and first_start:
        attack(channel, round_message)
    if LOCAL_RANK == 0 and MODE == "hide-hang":
        time.sleep(30)  # silent: a hang for ddprun to see
        return 0
    deadline = time.monotonic() + 20
    step = 0
    pending = b""
    while time.monotonic() < deadline:
        if channel is not None and select.select([channel], [], [], 0)[0]:
            chunk = channel.recv(4096)
            if not chunk:
                say("local rank %d lost its channel" % LOCAL_RANK)
                return 7
            pending += chunk
            while b"\n" in pending:  # a survivor re-forms: ready for every new round
                line, pending = pending.split(b"\n", 1)
                message = json.loads(line)
                if message["type"] == "round":
                    channel.sendall(json.dumps({"type": "ready", "round": message["round"],
                                                "step": step}).encode() + b"\n")
        if os.path.exists(os.path.join(OUT, "stop")):
            return 0
        step += 1
        say("rank=%d step=%d" % (LOCAL_RANK, step))
        time.sleep(0.05)
    return 0


def attack(channel, round_message):
    if MODE == "impersonate":
        wait_for("rank0.pid", 10)
        rank0 = int(open(os.path.join(OUT, "rank0.pid")).read())
        child = os.fork()
        if child == 0:
            os.setpgid(0, rank0)  # the same session: allowed
            s = connect()
            s.sendall(hello_line(0))
            write("impersonation", "accepted" if read_round(s, 5) else "refused")
            os._exit(0)
        os.waitpid(child, 0)
    elif MODE == "stale-ready":
        line = json.dumps({"type": "ready", "round": round_message["round"] + 1000,
                           "step": 5}).encode() + b"\n"
        deadline = time.monotonic() + 2
        try:
            while time.monotonic() < deadline:
                channel.sendall(line * 64)
        except OSError:
            pass  # the agent closed the channel
    elif MODE == "step-flood":
        fd = os.open(os.environ["DDPRUN_PROGRESS_FILE"], os.O_WRONLY | os.O_NONBLOCK)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            lines = b"".join(b'{"pid":%d,"step":1}\n' % random.randint(2, 2**22)
                             for _ in range(100))
            try:
                os.write(fd, lines)
            except BlockingIOError:
                time.sleep(0.001)
    elif MODE == "hide-hang":
        wait_for("rank0.pid", 10)
        rank0 = int(open(os.path.join(OUT, "rank0.pid")).read())
        fd = os.open(os.environ["DDPRUN_PROGRESS_FILE"], os.O_WRONLY | os.O_NONBLOCK)
        write(MODE + ".done", "")
        for step in range(300):
            os.write(fd, b'{"pid":%d,"step":%d}\n' % (rank0, step))
            say("rank=1 step=%d" % step)
            time.sleep(0.1)
    elif MODE == "fail-on-go":
        wait_for("go", 15)
        sys.exit(1)
    write(MODE + ".done", "")


if __name__ == "__main__":
    sys.exit(main())
