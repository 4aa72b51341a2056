#!/usr/bin/env bash
# Installs exactly the Debian 12 packages ddprun needs, and torch 2.11 from PyPI in a venv (pinned
# in scripts/torch2-requirements.txt). Idempotent: when everything is present it only checks and
# returns (about 2 s: the venv's torch is imported once to check its version).
#
#   scripts/install-deps.sh          build, test, demo and benchmarks (`make test`), and the
#                                    torch 2.11 venv of the torch 2.x tests (install-torch2.sh;
#                                    DDPRUN_NO_TORCH2=1 leaves it out)
#   scripts/install-deps.sh --demo   only what `make demo` needs: the build of the three programs,
#                                    the dataset and the plot (no test peers: Slurm, etcd, torch)
#   scripts/install-deps.sh --aarch64  only the aarch64 cross build's host tools (`make aarch64`)
#   scripts/install-deps.sh --tools  only the venv of the pinned Python tools (`make docs`:
#                                    install-tools.sh, scripts/tools-requirements.txt); the
#                                    default installs it too
set -euo pipefail

DEMO_PACKAGES=(
  # build
  cmake make g++ pkg-config
  # launcher + rendezvous
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libmicrohttpd-dev          # ddprun-rdzv's /metrics and status page
  # worker (LibTorch CPU with gloo) and its JPEG decoder
  libtorch-dev libgloo-dev libgoogle-glog-dev libturbojpeg0-dev libjpeg62-turbo-dev
  libpng-dev                 # ddp-train imagenet: PNG images in ImageFolder data
  dataset-fashion-mnist      # the demo's data
  python3-matplotlib         # scripts/plot_metrics.py (ddp-train metrics plots)
)

TEST_PACKAGES=(
  # tests and micro-benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format               # scripts/check-format.sh (CI)
  clang                      # make thread-safety: -Wthread-safety checks the lock annotations (CI)
  # real peers and data for tests and benchmarks
  python3-torch python3-torchvision
  python3-tqdm               # live progress bars through ddprun (agent_test)
  openssl                    # TLS test certificates (rendezvous_tls_test)
  etcd-server etcd-client    # the etcd v3 rendezvous backend's tests
  slurm-wlm munge            # tests/slurm: a private slurmctld + 2 slurmd on this host
  procps time
  elfutils                   # eu-stack: native stacks of hung workers (ddprun hang reports)
  iproute2                   # tests/integration/multihost_test: hosts from network namespaces
  prometheus                 # promtool and a real server scrape ddprun-rdzv's /metrics (tests)
  chromium                   # the status page in a real (headless) browser (tests)
  # packaging: man pages, the .deb and its dependencies, and their tests
  help2man                   # man pages from --help (packaging/make-man-page.sh)
  dpkg-dev                   # dpkg-shlibdeps: the package's dependencies from its binaries
  man-db zsh                 # tests/packaging: render the man pages, parse the zsh completion
  debootstrap                # scripts/check-package.sh: a clean Debian 12 root (not make test)
  busybox-static             # tests/dist: a root with nothing but the static binaries (make test-static)
  ninja-build python3-venv   # make dist: the wheel build's generator and the pinned tools' venv
)

# `make aarch64`: the cross build's host tools. Its arm64 libraries are not installed on the host
# but unpacked into a sysroot (scripts/make-arm64-sysroot.sh, which the Makefile runs).
AARCH64_PACKAGES=(
  cmake make pkg-config ccache
  protobuf-compiler protobuf-compiler-grpc   # the host's code generators
  g++-aarch64-linux-gnu      # Debian's cross compiler (and its arm64 libc, libstdc++)
  qemu-user-static           # the aarch64 tests run under qemu-user (tests/dist/)
  busybox-static openssl     # tests/dist/run_static_tests.sh on the aarch64 binaries
  libmicrohttpd-dev dpkg-dev # the static build's libmicrohttpd (scripts/build-static-microhttpd.sh)
)

case "${1:-}" in
  "") PACKAGES=("${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
  --aarch64) PACKAGES=("${AARCH64_PACKAGES[@]}") ;;
  --tools) PACKAGES=(python3-venv) ;;
  *) echo "install-deps: unknown argument '$1' (expected nothing, --demo, --aarch64 or --tools)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# torch 2.11 from PyPI in a venv of its own (the torch 2.x tests); not for the demo.
if [ -z "${1:-}" ]; then
  "$(dirname "$(realpath "$0")")/install-torch2.sh"
fi

# The pinned Python tools (MkDocs) in a venv of their own: `make docs`, and `make test`'s checks.
if [ -z "${1:-}" ] || [ "$1" = --tools ]; then
  "$(dirname "$(realpath "$0")")/install-tools.sh"
fi
