"""ddprun from its wheel: where the installed programs are.

The wheel installs ddprun, ddprun-rdzv and ddprun-launch as programs (the static binaries
themselves, in the environment's scripts folder, so nothing of Python runs when they start) and
this package only for ``python -m ddprun ...`` (``__main__``), which runs the same binary. The
version is the distribution's, which the wheel takes from project(VERSION) in CMakeLists.txt.
"""
import importlib.metadata
import os

__version__ = importlib.metadata.version("ddprun")


def program(name: str = "ddprun") -> str:
    """The path of an installed program of this distribution (ddprun, ddprun-rdzv, ...).

    Found in the wheel's own record of its files, so it is right for a venv, ``--user`` and
    ``--prefix`` installs alike, whatever is on PATH.
    """
    for f in importlib.metadata.distribution("ddprun").files or ():
        if f.name == name and f.parent.name in ("bin", "Scripts"):
            path = os.path.realpath(f.locate())
            if os.access(path, os.X_OK):
                return path
    raise FileNotFoundError(f"ddprun: the program {name} of the ddprun wheel is not installed")
