#!/usr/bin/env python3
"""Lays the chaos soak's JSON reports (chaos-soak --json) side by side: cold vs in-process (vs
in-process with --preload=native spares).

  bench/inprocess/compare.py OUT_DIR

reads OUT_DIR/{fixed,elastic}-{cold,in-process,in-process-preload}.json (those present) and OUT_DIR/one-host.json
(sigkill_one_host.py), and prints Markdown tables: per fault kind the recovery p50/p99 (the
soak's outside measurement and the ledgers' first step), steps recomputed and the ledgers'
phase split per mode; then the effective training time ratio, peak memory and the invariants.
"""
import json
import os
import statistics
import sys

MODES = ("cold", "in-process", "in-process-preload")
LABELS = {"cold": "cold", "in-process": "in-process",
          "in-process-preload": "in-process + `--preload=native`"}


def fmt(v, digits=2, scale=1.0):
    return "-" if v is None else "%.*f" % (digits, v * scale)


def world_tables(world, runs):
    out = []
    modes = [m for m in MODES if m in runs]
    names = " / ".join(LABELS[m] for m in modes)

    def cells(get):
        return " / ".join(get(m) for m in modes)

    first = next(iter(runs.values()))
    out.append("#### %s, seed %d, a fault every %g-%g s\n" % (
        "Fixed world (`--nnodes=3`)" if world == "fixed" else "Elastic (`--nnodes=2:3`)",
        first["seed"], first["fault_interval_s"][0], first["fault_interval_s"][1]))
    out.append("| fault | count | recovery p50 s, soak | recovery p99 s, soak "
               "| first step p50 s, ledger | first step p99 s, ledger "
               "| steps recomputed, soak | steps lost, ledger |")
    out.append("|---|---|---|---|---|---|---|---|")
    for key, fig in first["kinds"].items():
        k = {m: runs[m]["kinds"][key] for m in runs}
        if not any(v["count"] for v in k.values()):
            continue

        def each(field, digits=2, scale=1.0):
            return cells(lambda m: fmt(k[m][field], digits, scale))

        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            fig["name"], cells(lambda m: str(k[m]["count"])),
            each("recovery_p50_s"), each("recovery_p99_s"),
            each("first_step_p50_ms", 2, 0.001), each("first_step_p99_ms", 2, 0.001),
            cells(lambda m: str(k[m]["recomputed"])), cells(lambda m: str(k[m]["steps_lost"]))))
    out.append("\nEach cell: " + names + ". Phase split (the ledger of the node that trained "
               "again last, medians in ms from its detection of the failure):\n")
    out.append("| fault | mode | stop | round formed | started | state restored | first step "
               "| ledger recoveries in-process / cold |")
    out.append("|---|---|---|---|---|---|---|---|")
    for key, fig in first["kinds"].items():
        for m in MODES:
            if m not in runs or not runs[m]["kinds"][key]["count"]:
                continue
            v = runs[m]["kinds"][key]
            if v["first_step_p50_ms"] is None:
                continue
            out.append("| %s | %s | %s | %s | %s | %s | %s | %d / %d |" % (
                fig["name"], LABELS[m], fmt(v["stop_ms"], 0), fmt(v["rendezvous_ms"], 0),
                fmt(v["start_ms"], 0), fmt(v["restore_ms"], 0), fmt(v["first_step_p50_ms"], 0),
                v["in_process"], v["cold"]))
    out.append("\n| %s | %s |\n|---|%s" % (world, " | ".join(LABELS[m] for m in modes),
                                          "---|" * len(modes)))
    rows = [
        ("faults injected", lambda r: str(r["faults"])),
        ("soak wall s (injection, excluding a fault-free run)", lambda r: fmt(r["wall_s"], 0)),
        ("steps recomputed in all (soak)", lambda r: str(r["recomputed"])),
        ("effective training time, agents' effective_ratio (median)",
         lambda r: fmt(r["effective_ratio_agents"], 1, 100) + " %"),
        ("effective training time, soak's (steps x steady step time / wall)",
         lambda r: fmt(r["effective_ratio_soak"], 1, 100) + " %"),
        ("steady step time s", lambda r: fmt(r["steady_step_s"], 3)),
        ("agent peak RSS, max MiB", lambda r: fmt(r["agent_peak_mib_max"], 1)),
        ("worker peak RSS, median / max MiB",
         lambda r: "%s / %s" % (fmt(r["worker_peak_mib_median"], 1),
                                fmt(r["worker_peak_mib_max"], 1))),
        ("worker processes seen", lambda r: str(r["worker_processes"])),
        ("invariants", lambda r: "held" if not r["violations"] else
         "%d violation(s): %s" % (len(r["violations"]),
                                  "; ".join(v.splitlines()[0][:160] for v in r["violations"]))),
    ]
    if world == "fixed":
        rows.append(("final model vs fault-free run",
                     lambda r: "byte-identical" if r["identical"] else "NOT identical"))
    for label, get in rows:
        out.append("| %s | %s |" % (label, " | ".join(get(runs[m]) for m in modes)))
    return "\n".join(out) + "\n"


def one_host_table(results):
    out = ["| worker SIGKILL, one host, 2 workers | kills | recovery p50 s | worst s "
           "| steps recomputed (all kills) |", "|---|---|---|---|---|"]
    for name, r in results.items():
        out.append("| %s | %d | %.2f | %.2f | %d |" % (
            name, len(r["recovery_s"]), statistics.median(r["recovery_s"]),
            max(r["recovery_s"]), sum(r["recomputed"])))
    return "\n".join(out) + "\n"


def main():
    d = sys.argv[1]
    for world in ("fixed", "elastic"):
        runs = {}
        for m in MODES:
            p = os.path.join(d, "%s-%s.json" % (world, m))
            if os.path.exists(p):
                runs[m] = json.load(open(p))
        if runs:
            print(world_tables(world, runs))
    p = os.path.join(d, "one-host.json")
    if os.path.exists(p):
        print(one_host_table(json.load(open(p))))


if __name__ == "__main__":
    main()
