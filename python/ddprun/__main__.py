"""``python -m ddprun ARGS`` runs the wheel's ddprun binary with ARGS, as ``ddprun ARGS`` does.

The interpreter is replaced (exec), so signals, the exit code and the process id are ddprun's.
"""
import os
import sys

from ddprun import program


def main() -> None:
    try:
        binary = program("ddprun")
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    os.execv(binary, ["ddprun"] + sys.argv[1:])


if __name__ == "__main__":
    main()
