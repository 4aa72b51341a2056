"""The `ddp-train` command of the ddprun_train wheel: check the environment's torch, then exec.

The check reads torch/version.py as text instead of importing torch (an import costs seconds),
and it compares the release (major.minor): LibTorch's C++ ABI changes between releases, not
between their patch releases or CUDA flavours. exec keeps the process: a launcher such as
ddprun or torchrun sees and signals ddp-train itself.
"""

import importlib.util
import os
import re
import sys

from ddprun_train._build_info import TORCH_VERSION

EXIT_USAGE = 2  # what ddprun and ddp-train use for "cannot run as asked"


def _fail(message):
    sys.stderr.write("ddp-train: " + message + "\n")
    sys.exit(EXIT_USAGE)


def _release(version):
    """'2.11.0+cu130' -> (2, 11); None when the text is not a version."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _torch_folder():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _torch_version(folder):
    path = os.path.join(folder, "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        _fail("cannot read the torch version from %s: %s" % (path, e.strerror))
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    if match is None:
        _fail("%s names no __version__" % path)
    return match.group(1)


def checked_torch_lib():
    """The lib folder of this environment's torch, after checking it is the release built for."""
    built = _release(TORCH_VERSION)
    if built is None:
        _fail("this ddprun_train names no torch release it was built for (%r): rebuild the wheel"
              % TORCH_VERSION)
    want = "torch==%d.%d.*" % built
    folder = _torch_folder()
    if folder is None:
        _fail("built for torch %s, but %s finds no torch: pip install '%s'"
              % (TORCH_VERSION, sys.executable, want))
    found = _torch_version(folder)
    if _release(found) != built:
        _fail("built for torch %s, but this environment has torch %s (%s): pip install '%s'"
              % (TORCH_VERSION, found, folder, want))
    return os.path.join(folder, "lib")


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    torch_lib = checked_torch_lib()
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ddp-train")
    env = dict(os.environ)
    # The torch found above, even where its lib folder is not beside this package (a venv
    # that sees another's site-packages): LibTorch's own libraries find CUDA's from there.
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (torch_lib, env.get("LD_LIBRARY_PATH")) if p)
    try:
        os.execve(binary, [binary] + list(args), env)
    except OSError as e:
        _fail("cannot run %s: %s" % (binary, e.strerror))
