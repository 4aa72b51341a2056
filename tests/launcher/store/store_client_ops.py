# Every operation of the installed torch's TCPStore client, against the store at HOST:PORT
# (store_server_test.cc runs it with torch 1.13 and torch 2.11). Prints "ok <op>" for each and
# exits 0 when every result is the one torch's own servers give; any other result raises.
#
#   python store_client_ops.py HOST PORT [libuv|classic]
#
# The optional third argument is torch 2.x's use_libuv. Keys go under a prefix of this run's pid,
# so runs against one server do not meet.
import datetime
import os
import sys
import threading
import time

import torch.distributed as dist

host, port = sys.argv[1], int(sys.argv[2])
kwargs = {}
if len(sys.argv) > 3:
    kwargs["use_libuv"] = sys.argv[3] == "libuv"
timeout = datetime.timedelta(seconds=20)


def client():
    return dist.TCPStore(host, port, world_size=None, is_master=False, timeout=timeout,
                         **kwargs)


def expect(op, got, want):
    if got != want:
        raise SystemExit(f"{op}: got {got!r}, want {want!r}")
    print(f"ok {op}", flush=True)


p = f"/ops-{os.getpid()}/"
s = client()  # torch >= 2.2: the VALIDATE handshake and a PING on connecting
s.set(p + "a", b"\x00\x01 bytes")
expect("set/get", s.get(p + "a"), b"\x00\x01 bytes")
s.set(p + "a", "again")
expect("set overwrites", s.get(p + "a"), b"again")
expect("add new", s.add(p + "n", 5), 5)
expect("add existing", s.add(p + "n", -7), -2)
expect("add stored as text", s.get(p + "n"), b"-2")
expect("compare_set absent, expecting empty", s.compare_set(p + "c", "", "one"), b"one")
expect("compare_set match", s.compare_set(p + "c", "one", "two"), b"two")
expect("compare_set mismatch", s.compare_set(p + "c", "one", "three"), b"two")
expect("compare_set absent, expecting a value", s.compare_set(p + "x", "e", "d"), b"e")
before = s.num_keys()
s.set(p + "d", "x")
expect("num_keys", s.num_keys(), before + 1)
expect("delete_key present", s.delete_key(p + "d"), True)
expect("delete_key absent", s.delete_key(p + "d"), False)
expect("num_keys after delete", s.num_keys(), before)

# WAIT blocks until another client sets every key; GET of an absent key waits for it too.
other = client()
got = {}


def waiter():
    s.wait([p + "w1", p + "w2"])
    got["get"] = s.get(p + "w3")


t = threading.Thread(target=waiter)
t.start()
time.sleep(0.2)  # let the wait reach the server before the keys exist (a sleep is the point)
other.set(p + "w1", "1")
other.add(p + "w2", 1)
other.set(p + "w3", "late")
t.join(20)
expect("wait + get of a key set later", got.get("get"), b"late")
s.wait([p + "a"])
print("ok wait on present keys", flush=True)

if hasattr(s, "check"):  # torch 2.x
    expect("check present", s.check([p + "a", p + "n"]), True)
    expect("check absent", s.check([p + "a", p + "nope"]), False)
    s.append(p + "ap", "x")
    s.append(p + "ap", "yz")
    expect("append", s.get(p + "ap"), b"xyz")
    s.multi_set([p + "m1", p + "m2"], ["v1", b"v2"])
    expect("multi_set/multi_get", s.multi_get([p + "m1", p + "m2", p + "a"]),
           [b"v1", b"v2", b"again"])
    # A wait that times out: the client sends CANCEL_WAIT and must stay usable.
    try:
        s.wait([p + "never"], datetime.timedelta(milliseconds=300))
        raise SystemExit("wait on a missing key did not time out")
    except dist.DistStoreError:
        pass
    expect("usable after a timed-out wait (cancel_wait)", s.get(p + "a"), b"again")
    keys = s.list_keys()
    expect("list_keys", sorted(k for k in keys if k.startswith(p)),
           sorted([p + k for k in ["a", "n", "c", "w1", "w2", "w3", "ap", "m1", "m2"]]))
    if kwargs.get("use_libuv") is False:
        # The one difference of torch 2.11's classic client: it refuses queues itself.
        try:
            s.queue_push(p + "q", "first")
            raise SystemExit("the classic client pushed to a queue")
        except NotImplementedError:
            print("ok queues refused by the classic client", flush=True)
        expect("second connection", client().get(p + "a"), b"again")
        print("all ok", flush=True)
        sys.exit(0)
    s.queue_push(p + "q", "first")
    s.queue_push(p + "q", b"second")
    expect("queue_len", s.queue_len(p + "q"), 2)
    expect("queue_pop", s.queue_pop(p + "q"), b"first")
    expect("queue_pop again", s.queue_pop(p + "q", block=False), b"second")
    expect("queue_len empty", s.queue_len(p + "q"), 0)
    popped = {}
    t = threading.Thread(target=lambda: popped.setdefault("v", s.queue_pop(p + "q2")))
    t.start()
    time.sleep(0.2)  # the blocking pop reaches the server first (the point of the check)
    other.queue_push(p + "q2", "woken")
    t.join(20)
    expect("blocking queue_pop woken by a push", popped.get("v"), b"woken")
    # A fresh connection's handshake again (PING with a new nonce).
    expect("second connection", client().get(p + "a"), b"again")
print("all ok", flush=True)
