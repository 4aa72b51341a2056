#!/usr/bin/env python3
"""Synthetic data for bench/gpu, made on the machine that runs it (nothing is downloaded).

  make_data.py imagefolder DIR --classes 16 --per-class 512 --size 256
  make_data.py mnist DIR --train 6000 --test 1000

imagefolder: DIR/<class>/<n>.jpg, JPEG quality 90, each image a smooth random colour field
with noise (about the size a real photo of that side compresses to). mnist: the four IDX files
of MNIST's format (random 28x28 digits-to-be, labels 0-9), as ddp-train mnist reads them.
Deterministic: the same arguments give the same bytes.
"""
import argparse
import gzip
import os
import struct
from concurrent.futures import ProcessPoolExecutor

import numpy as np


def write_class(args):
    root, c, per_class, size = args
    from PIL import Image  # the worker processes import it themselves

    rng = np.random.default_rng(1000 + c)
    d = os.path.join(root, "class%03d" % c)
    os.makedirs(d, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    for i in range(per_class):
        a, b, ph = rng.uniform(1, 6, 3)
        base = np.stack([np.sin(a * xx * 6.28 + ph), np.cos(b * yy * 6.28 - ph),
                         np.sin((xx + yy) * (a + b))], axis=-1)
        img = (base * 60 + 128 + rng.normal(0, 25, (size, size, 3))).clip(0, 255)
        Image.fromarray(img.astype(np.uint8)).save(os.path.join(d, "%05d.jpg" % i), quality=90)
    return per_class


def imagefolder(a):
    jobs = [(a.dir, c, a.per_class, a.size) for c in range(a.classes)]
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        n = sum(pool.map(write_class, jobs))
    print("imagefolder: %d images of %dx%d in %d classes under %s" % (n, a.size, a.size,
                                                                      a.classes, a.dir))


def write_idx(path, magic, dims, data):
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims))
        f.write(data.tobytes())


def mnist(a):
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(7)
    for name, n in (("train", a.train), ("t10k", a.test)):
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        # A label-dependent blob plus noise: learnable, so the loss falls as in real training.
        yy, xx = np.mgrid[0:28, 0:28]
        cy, cx = 6 + (labels // 5) * 14, 3 + (labels % 5) * 5
        blob = np.exp(-(((yy[None] - cy[:, None, None]) ** 2) + ((xx[None] - cx[:, None, None]) ** 2)) / 18.0)
        images = (blob * 90 + rng.integers(0, 140, (n, 28, 28))).clip(0, 255).astype(np.uint8)
        write_idx(os.path.join(a.dir, "%s-images-idx3-ubyte.gz" % name), 0x803, (n, 28, 28), images)
        write_idx(os.path.join(a.dir, "%s-labels-idx1-ubyte.gz" % name), 0x801, (n,), labels)
    print("mnist: %d train and %d test images under %s" % (a.train, a.test, a.dir))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("imagefolder")
    f.add_argument("dir")
    f.add_argument("--classes", type=int, default=16)
    f.add_argument("--per-class", type=int, default=512)
    f.add_argument("--size", type=int, default=256)
    m = sub.add_parser("mnist")
    m.add_argument("dir")
    m.add_argument("--train", type=int, default=6000)
    m.add_argument("--test", type=int, default=1000)
    a = p.parse_args()
    imagefolder(a) if a.what == "imagefolder" else mnist(a)


if __name__ == "__main__":
    main()
