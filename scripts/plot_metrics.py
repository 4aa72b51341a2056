#!/usr/bin/python3
"""Plot ddp-train --metrics-file runs: loss and accuracy against epoch, one line per run, and
each run's training throughput (median samples/s over its epochs) as a bar.

  scripts/plot_metrics.py -o curves.png run-1proc.jsonl run-2proc.jsonl run-4proc.jsonl
  scripts/plot_metrics.py -o curves.png --label "1 process" a.jsonl --label "2 processes" b.jsonl

Each input file holds one JSON object per line (ddp-train writes one per epoch) with at least
epoch, train_loss, test_loss and test_acc. When a run was resumed and an epoch appears twice,
the last line for that epoch wins. Needs Debian's python3-matplotlib (scripts/install-deps.sh).
"""
import argparse
import json
import sys


def load(path):
    by_epoch = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
                by_epoch[int(row["epoch"])] = row
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{n}: not a ddp-train metrics line ({e})")
    if not by_epoch:
        raise SystemExit(f"{path}: no metrics lines")
    return [by_epoch[e] for e in sorted(by_epoch)]


def default_label(path, rows):
    ws = rows[-1].get("world_size")
    return f"{path} ({ws} proc)" if ws is not None else path


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="PNG to write")
    p.add_argument("--title", default="ddp-train MNIST")
    p.add_argument("--label", action="append", default=[],
                   help="label for the next file (repeatable, in file order)")
    p.add_argument("files", nargs="+", help="metrics files (JSON lines)")
    a = p.parse_intermixed_args(argv)  # labels may sit between the files
    if a.label and len(a.label) != len(a.files):
        raise SystemExit(f"--label given {len(a.label)} times for {len(a.files)} files")

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc, ax_speed) = plt.subplots(
        1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [3, 3, 2]})
    speeds = []  # (label, median samples/s, colour)
    for i, path in enumerate(a.files):
        rows = load(path)
        label = a.label[i] if a.label else default_label(path, rows)
        epochs = [r["epoch"] for r in rows]
        line, = ax_loss.plot(epochs, [r["test_loss"] for r in rows], marker="o", label=f"{label} test")
        if all("train_loss" in r for r in rows):
            ax_loss.plot(epochs, [r["train_loss"] for r in rows], linestyle="--", marker="x", color=line.get_color(),
                         label=f"{label} train")
        ax_acc.plot(epochs, [100.0 * r["test_acc"] for r in rows], marker="o", color=line.get_color(),
                    label=label)
        rates = sorted(r["samples_per_s"] for r in rows if "samples_per_s" in r)
        if rates:
            speeds.append((label, rates[len(rates) // 2], line.get_color()))
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("NLL loss")
    ax_loss.set_title("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.set_title("test accuracy")
    ax_acc.grid(alpha=0.3)
    ax_acc.legend(fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.xaxis.get_major_locator().set_params(integer=True)
    # Training throughput of each run: the median over its epochs (all processes together).
    if speeds:
        bars = ax_speed.bar(range(len(speeds)), [s for _, s, _ in speeds], color=[c for _, _, c in speeds])
        ax_speed.bar_label(bars, fmt="%.0f", fontsize=8)
        ax_speed.set_xticks(range(len(speeds)), [l for l, _, _ in speeds], rotation=15, fontsize=8)
        for label, rate, _ in speeds:
            print(f"{label}: {rate:.0f} samples/s (median over epochs)")
    ax_speed.set_ylabel("samples/s")
    ax_speed.set_title("training throughput")
    ax_speed.grid(alpha=0.3, axis="y")
    fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
