#!/usr/bin/env python3
"""ddprun vs torchrun on one node: start-up cost and restart cost, alternating in one run.

  bench/launcher_bench.py --ddprun build/bin/ddprun --torchrun tests/integration/scripts/torchrun_py311.py --runs 15

Job A (start-up): --standalone --nproc-per-node=2 --no-python /bin/true
Job B (one restart): the same with --max-restarts=1 and a worker that fails on its first attempt
  (/bin/sh -c 'test "$TORCHELASTIC_RESTART_COUNT" != 0'); its cost is B - A', where A' is the
  same /bin/sh worker succeeding at once, so the shell's own start-up cancels out.
Per run: wall time; CPU time (user+sys of the launcher and everything it waited for, from
wait4(2)); peak RSS (the largest of the launcher and its reaped descendants) as GNU time
(Debian's `time`) reports it. GNU time, not this script, forks the launcher: a child forked from a
Python process would report Python's own RSS as its floor. Medians reported.
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

FAIL_ONCE = 'test "$TORCHELASTIC_RESTART_COUNT" != 0'


def measure(argv):
    with tempfile.NamedTemporaryFile("r") as report:
        t0 = time.perf_counter()
        p = subprocess.Popen(["/usr/bin/time", "-o", report.name, "-f", "%M"] + argv,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)  # CPU in microseconds (GNU time rounds to 10 ms)
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        if rc != 0:
            sys.exit(f"benchmark command failed ({rc}): {' '.join(argv)}")
        max_kib = report.read().split()[-1]
    return wall, ru.ru_utime + ru.ru_stime, int(max_kib) / 1024.0


def jobs(ddprun, torchrun):
    return {
        "ddprun": {
            "start": [ddprun, "--standalone", "--nproc-per-node=2", "--no-python", "/bin/true"],
            "sh_ok": [ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                      "--no-python", "/bin/sh", "-c", "true"],
            "restart": [ddprun, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                        "--no-python", "/bin/sh", "-c", FAIL_ONCE],
        },
        "torchrun": {
            "start": [torchrun, "--standalone", "--nproc_per_node=2", "--monitor_interval=0.1",
                      "--no_python", "/bin/true"],
            "sh_ok": [torchrun, "--standalone", "--nproc_per_node=2", "--monitor_interval=0.1",
                      "--max_restarts=1", "--no_python", "/bin/sh", "-c", "true"],
            "restart": [torchrun, "--standalone", "--nproc_per_node=2", "--monitor_interval=0.1",
                        "--max_restarts=1", "--no_python", "/bin/sh", "-c", FAIL_ONCE],
        },
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", default=os.path.join(here, "..", "build", "bin", "ddprun"))
    ap.add_argument("--torchrun", default=os.path.join(here, "..", "..", "shared", "tools", "torchrun113"))
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    js = jobs(os.path.abspath(a.ddprun), os.path.abspath(a.torchrun))
    results = {name: {job: [] for job in js[name]} for name in js}
    for i in range(a.runs):  # alternate launchers and jobs inside every iteration
        for job in ("start", "sh_ok", "restart"):
            for name in ("ddprun", "torchrun"):
                results[name][job].append(measure(js[name][job]))
    med = lambda xs: statistics.median(xs)
    floor = med([measure(["/bin/true"])[2] for _ in range(3)])
    row = {}
    for name in js:
        r = results[name]
        row[name] = {
            "wall": med([x[0] for x in r["start"]]),
            "cpu": med([x[1] for x in r["start"]]),
            "rss": med([x[2] for x in r["start"]]),
            "restart": med([x[0] for x in r["restart"]]) - med([x[0] for x in r["sh_ok"]]),
        }
    d, t = row["ddprun"], row["torchrun"]
    print(f"## Launcher on one node (medians of {a.runs} alternating runs, {os.cpu_count()} cores)\n")
    print("| measure | ddprun | torchrun | torchrun / ddprun |")
    print("|---|---|---|---|")
    print(f"| wall time, 2 × /bin/true | {d['wall']*1000:.1f} ms | {t['wall']*1000:.0f} ms | {t['wall']/d['wall']:.0f}x |")
    print(f"| CPU time (user+sys) | {d['cpu']*1000:.1f} ms | {t['cpu']*1000:.0f} ms | {t['cpu']/max(d['cpu'],1e-4):.0f}x |")
    print(f"| peak RSS | {d['rss']:.1f} MiB | {t['rss']:.0f} MiB | {t['rss']/d['rss']:.0f}x |")
    print(f"| (peak RSS of /bin/true alone, the floor) | {floor:.1f} MiB | | |")
    print(f"| one restart (fail once, then succeed) | {d['restart']*1000:.1f} ms | {t['restart']*1000:.0f} ms | {t['restart']/max(d['restart'],1e-4):.0f}x |")
    print("\nWall and CPU include GNU time itself (about 1 ms), for both launchers alike.")
    print(f"\nCommand: `bench/launcher_bench.py --runs {a.runs}`")


if __name__ == "__main__":
    main()
