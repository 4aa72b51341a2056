#!/usr/bin/python3
"""ddp-train vs the Python DDP reference on Fashion-MNIST, side by side in one run.

Both train the classic MNIST network (Adadelta lr 1.0, batch 64 per process) for one epoch with
2 processes under the same launcher (Debian's torchrun, patched: tests/integration/scripts/torchrun_py311.py),
and ddp-train once more under ddprun when it is built. Reports training samples/s (all ranks'
samples / rank 0's training seconds, evaluation excluded, the reference's own definition), test
accuracy and the whole command's wall time; then checkpoint save and load times of ddp-train.
Prints a markdown section; --write-results replaces only the "## ddp-train MNIST" section of
bench/RESULTS.md.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SECTION = "## ddp-train MNIST"
FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]


def prepare_data(src, dst):
    """torchvision wants gunzipped files under DIR/FashionMNIST/raw/; ddp-train reads both."""
    raw = os.path.join(dst, "FashionMNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    for f in FILES:
        out = os.path.join(raw, f)
        if not os.path.exists(out):
            with gzip.open(os.path.join(src, f + ".gz"), "rb") as i, open(out + ".part", "wb") as o:
                shutil.copyfileobj(i, o)
            os.rename(out + ".part", out)
    return dst


def free_port():
    # torchrun's --standalone is fixed to port 29400; a rendezvous of our own avoids meeting
    # another job there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args, nproc=2):
    return [args.torchrun, "--nnodes=1", f"--nproc_per_node={nproc}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{free_port()}", f"--rdzv_id=bench-{os.getpid()}-{time.time()}",
            "--monitor_interval=0.1"]


def run(cmd, env_extra=None):
    env = dict(os.environ)
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    env.update(env_extra or {})
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return p.stdout, wall


def parse_epoch_line(out):
    m = re.search(r"epoch 1 samples_per_s ([0-9.]+) train_s ([0-9.]+) test_acc ([0-9.]+)", out)
    if not m:
        raise SystemExit("no 'epoch 1 samples_per_s' line in:\n" + out[-3000:])
    return {"samples_per_s": float(m.group(1)), "train_s": float(m.group(2)),
            "test_acc": float(m.group(3))}


def python_run(args, data):
    out, wall = run(torchrun(args) + [args.py_worker, "--data", data, "--epochs", "1"],
                    {"PYTHON_EXEC": args.python})
    r = parse_epoch_line(out)
    r["wall_s"] = wall
    return r


def cpp_args(args, data, tmp, extra=(), epochs=1):
    return [args.ddp_train, "mnist", "--data", data, "--epochs", str(epochs), "--no-progress-bar",
            "--log-interval", "1000000"] + list(extra)


def cpp_torchrun(args, data, tmp):
    out, wall = run(torchrun(args) + ["--no_python"] + cpp_args(args, data, tmp))
    r = parse_epoch_line(out)
    r["wall_s"] = wall
    return r


def cpp_ddprun(args, data, tmp):
    out, wall = run([args.ddprun, "--standalone", "--nproc-per-node=2", "--no-python"] +
                    cpp_args(args, data, tmp))
    r = parse_epoch_line(out)
    r["wall_s"] = wall
    return r


def checkpoint_times(args, data, tmp):
    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=tmp)
    out, _ = run(torchrun(args) + ["--no_python"] +
                 cpp_args(args, data, tmp, ["--checkpoint-dir", ckpt, "--checkpoint-every", "10",
                                            "--max-steps", "50"]))
    saves = re.findall(r"checkpoint: saved step \d+ \(periodic.*?, ([0-9.]+) MB\) serialize "
                       r"([0-9.]+) ms, write\+fsync ([0-9.]+) ms", out)
    if not saves:
        raise SystemExit("no checkpoint lines in:\n" + out[-3000:])
    # A second run resumes from the last checkpoint (then trains nothing more: its epoch is over).
    out2, _ = run(torchrun(args) + ["--no_python"] +
                  cpp_args(args, data, tmp, ["--checkpoint-dir", ckpt, "--max-steps", "1"],
                           epochs=2))
    read = re.search(r"checkpoint: read .* in ([0-9.]+) ms", out2)
    load = re.search(r"resumed from checkpoint: .*\(load ([0-9.]+) ms\)", out2)
    if not read or not load:
        raise SystemExit("no resume lines in:\n" + out2[-3000:])
    return {"mb": float(saves[0][0]),
            "serialize_ms": statistics.median(float(s[1]) for s in saves),
            "write_ms": statistics.median(float(s[2]) for s in saves),
            "saves": len(saves),
            "read_ms": float(read.group(1)), "load_ms": float(load.group(1))}


def median_of(runs):
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--torchrun", default=os.path.join(ROOT, "..", "shared", "tools", "torchrun113"))
    p.add_argument("--py-worker", default=os.path.join(ROOT, "..", "shared", "tools", "py_mnist_ddp.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with Debian's torch")
    p.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--data", default=None, help="where to gunzip the data (default: BUILD/bench-data)")
    p.add_argument("--ddprun", default=None, help="ddprun binary (default: BUILD/bin/ddprun)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each; the median is reported")
    p.add_argument("--write-results", default=None, help="RESULTS.md whose section to replace")
    a = p.parse_args()
    a.ddp_train = os.path.join(a.build_dir, "bin", "ddp-train")
    a.ddprun = a.ddprun or os.path.join(a.build_dir, "bin", "ddprun")
    if not os.access(a.ddp_train, os.X_OK):
        raise SystemExit(f"{a.ddp_train}: not built")
    data = prepare_data(a.source, a.data or os.path.join(a.build_dir, "bench-data"))
    tmp = tempfile.mkdtemp(prefix="mnist-bench-")
    try:
        py, cpp, cppd = [], [], []
        for i in range(a.repeat):
            # Alternate so that load from other jobs on the machine hits both alike.
            py.append(python_run(a, data))
            print(f"python  run {i + 1}: {py[-1]}", file=sys.stderr)
            cpp.append(cpp_torchrun(a, data, tmp))
            print(f"ddp-train (torchrun) run {i + 1}: {cpp[-1]}", file=sys.stderr)
            if os.access(a.ddprun, os.X_OK):
                cppd.append(cpp_ddprun(a, data, tmp))
                print(f"ddp-train (ddprun) run {i + 1}: {cppd[-1]}", file=sys.stderr)
        ck = checkpoint_times(a, data, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    py_m, cpp_m = median_of(py), median_of(cpp)
    lines = [SECTION, "",
             f"One epoch of Fashion-MNIST (60,000 train / 10,000 test), 2 processes on "
             f"{os.cpu_count()} cores, gloo, batch 64 per process, Adadelta lr 1.0; median of "
             f"{a.repeat} run(s) each, alternating. `bench/mnist/run.sh` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).", "",
             "| worker | launcher | samples/s | test acc | train s | command wall s |",
             "|---|---|---:|---:|---:|---:|",
             f"| py_mnist_ddp.py (Python DDP) | torchrun113 | {py_m['samples_per_s']:.0f} | "
             f"{py_m['test_acc']:.4f} | {py_m['train_s']:.1f} | {py_m['wall_s']:.1f} |",
             f"| ddp-train mnist (C++) | torchrun113 | {cpp_m['samples_per_s']:.0f} | "
             f"{cpp_m['test_acc']:.4f} | {cpp_m['train_s']:.1f} | {cpp_m['wall_s']:.1f} |"]
    if cppd:
        d = median_of(cppd)
        lines.append(f"| ddp-train mnist (C++) | ddprun | {d['samples_per_s']:.0f} | "
                     f"{d['test_acc']:.4f} | {d['train_s']:.1f} | {d['wall_s']:.1f} |")
    ratios = [c["samples_per_s"] / q["samples_per_s"] for c, q in zip(cpp, py)]
    lines += ["", f"Speed-up (same launcher, run i of each taken back to back): median "
              f"**{statistics.median(ratios):.2f}x**, lowest {min(ratios):.2f}x samples/s; accuracy "
              f"{cpp_m['test_acc']:.4f} vs {py_m['test_acc']:.4f}.", "",
              f"Checkpoint ({ck['mb']:.1f} MB: model + Adadelta state + progress + RNG), rank 0, "
              f"median of {ck['saves']} saves: serialize {ck['serialize_ms']:.1f} ms, write + fsync + "
              f"rename + pointer {ck['write_ms']:.1f} ms; resume: read + CRC check "
              f"{ck['read_ms']:.1f} ms, deserialize {ck['load_ms']:.1f} ms (plus a broadcast to the "
              f"other ranks)."]
    try:
        load = "%.1f" % os.getloadavg()[0]
    except OSError:
        load = "?"
    lines += ["",
              "Each row runs `torchrun113 --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d "
              "--rdzv_endpoint=127.0.0.1:<free port> --monitor_interval=0.1 [--no_python] <worker>`, "
              "the worker being `py_mnist_ddp.py --data DIR --epochs 1` or `ddp-train mnist --data DIR "
              "--epochs 1 --no-progress-bar` (ddprun row: `ddprun --standalone --nproc-per-node=2 "
              "--no-python ddp-train ...`). Same data, network, optimizer, schedule and sampler "
              "order (ddp-train draws torch's own randperm).",
              "",
              f"Per-pair speed-ups (Python run i vs ddp-train run i, alternating): "
              f"{', '.join('%.2fx' % r for r in ratios)}. 1-minute load average at the end: {load} "
              f"on {os.cpu_count()} cores. Other jobs share this machine and their load changes within "
              f"minutes, so absolute figures and even the back-to-back ratios move with it (the "
              f"issue's idle-machine Python figure is 762 samples/s); the lowest ratio is the "
              f"conservative one. The ddprun row differs from the torchrun row only by such noise: "
              f"the launcher is not on the training path.",
              "",
              "Where the speed comes from: no per-sample PIL / ToTensor / DataLoader work (a batch is "
              "one `index_select` from a tensor normalised once), one intra-op thread per process, "
              "gradient buckets all-reduced while backward still runs, channels-last convolutions, "
              "and fc1 computed by oneDNN as a 12x12 convolution with the same weight: Debian's "
              "LibTorch is linked against the netlib reference BLAS, where that one GEMM took ~75% of "
              "a training step (the Python reference pays it)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write_results:
        old = open(a.write_results).read() if os.path.exists(a.write_results) else "# Benchmarks\n"
        start = old.find(SECTION + "\n")
        if start < 0:
            new = old.rstrip("\n") + "\n\n" + text
        else:
            nxt = old.find("\n## ", start + len(SECTION))
            new = old[:start] + text + (old[nxt:] if nxt >= 0 else "")
        with open(a.write_results + ".tmp", "w") as f:
            f.write(new)
        os.replace(a.write_results + ".tmp", a.write_results)


if __name__ == "__main__":
    main()
