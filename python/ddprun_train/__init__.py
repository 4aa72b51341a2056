"""ddp-train, ddprun's bundled C++ LibTorch worker, as a wheel (ddprun_train).

The binary in bin/ is linked against the LibTorch of one torch release: it runs with that
release's libraries, found in the torch package of the environment it is installed in. The
`ddp-train` command (and `python -m ddprun_train`) checks that torch first and refuses another
release with one line, before the dynamic linker would fail on a missing symbol.
"""

from ddprun_train._build_info import TORCH_VERSION, VERSION

__all__ = ["TORCH_VERSION", "VERSION"]
__version__ = VERSION
