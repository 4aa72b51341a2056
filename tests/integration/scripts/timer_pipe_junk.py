# Writes everything a broken or hostile worker could into TORCHELASTIC_TIMER_FILE, then a valid
# acquire and release of its own, then exits 0: the agent must ignore the junk (one warning each
# kind), never stall, and finish the job.
import json
import os
import time

path = os.environ["TORCHELASTIC_TIMER_FILE"]
fd = os.open(path, os.O_WRONLY)
def send(data):
    os.write(fd, data)

send(b"this is not json\n")
send(b'{"version": 1, "pid": "x"}\n')
send(b"{" + b"x" * 10000 + b"}\n")  # oversized
send(json.dumps({"version": 1, "pid": 1, "scope_id": "init", "expiration_time": 0,
                 "signal": 9}).encode() + b"\n")  # another process: must never be signalled
start = time.time()
junk = b"garbage garbage garbage garbage garbage garbage garbage garbage\n" * 64
while time.time() - start < 1.5:
    send(junk)
me = os.getpid()
send(json.dumps({"version": 1, "pid": me, "scope_id": "ok", "expiration_time": time.time() + 60,
                 "signal": 9}).encode() + b"\n")
send(json.dumps({"version": 1, "pid": me, "scope_id": "ok", "expiration_time": -1,
                 "signal": 0}).encode() + b"\n")
os.close(fd)
print("junk sent", flush=True)
