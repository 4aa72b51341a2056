"""UDP round trips between two namespaced hosts (link_impairment_test.cc).

  udp_rtt.py echo PORT            answers every datagram to its sender, forever
  udp_rtt.py send HOST PORT N     sends N datagrams 5 ms apart, prints one JSON line:
                                  {"sent": N, "received": R, "rtt_ms": [...]} (sorted)
"""
import json
import socket
import sys
import time


def echo(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    while True:
        data, addr = s.recvfrom(64)
        s.sendto(data, addr)


def send(host, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    sent, rtt = {}, []

    def drain(until):
        while True:
            try:
                data, _ = s.recvfrom(64)
            except BlockingIOError:
                if time.monotonic() >= until:
                    return
                time.sleep(0.0005)
                continue
            i = int(data)
            if i >= 0:
                rtt.append(1000 * (time.monotonic() - sent[i]))

    # The first datagrams wait for ARP, itself lossy: not what is measured.
    for i in range(-100, n):
        sent[i] = time.monotonic()
        try:
            s.sendto(str(i).encode(), (host, port))
        except OSError:
            pass
        drain(time.monotonic() + (1.0 if i == -1 else 0.005))
    drain(time.monotonic() + 1.0)
    print(json.dumps({"sent": n, "received": len(rtt), "rtt_ms": sorted(rtt)}))


if __name__ == "__main__":
    if sys.argv[1] == "echo":
        echo(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
