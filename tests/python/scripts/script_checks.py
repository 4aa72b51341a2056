"""The check helper of the test scripts in this folder: counts checks, names the first that
fails and exits 1."""
import sys

_count = 0


def check(cond, what):
    global _count
    _count += 1
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def count():
    return _count
