# The two commands of the README: `make demo` and `make test`. Both install what they need.
BUILD_DIR  ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

# Every CMake build below (the presets, the scripts' builds, the wheels' scikit-build-core) compiles
# through ccache when it is installed (scripts/install-deps.sh installs it): CMake takes the
# launcher from these variables at a build folder's first configure. Paths are hashed relative to
# this checkout, so a fresh clone (CI) finds what an earlier one compiled, as it finds the torch
# venv: the static, aarch64 and wheel builds then cost minutes of linking, not of compiling.
ifneq ($(shell command -v ccache 2>/dev/null),)
export CMAKE_CXX_COMPILER_LAUNCHER ?= ccache
export CMAKE_C_COMPILER_LAUNCHER ?= ccache
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
endif

.PHONY: all deps configure build flag-reference test test-unit sanitize format-check thread-safety torch2-build static test-static aarch64 test-aarch64 dist test-dist demo bench package install format clean

all: build

deps:
	@scripts/install-deps.sh

# Configured on every build (about 2 s): a tree first configured by `make demo`, without the
# test packages, finds GoogleTest once `make test` has installed it.
configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# docs/reference/flags.md and environment.md, generated from the flag table and the table of
# environment variables (launcher/cmd/reference_main.cc); `make test` fails until they are.
flag-reference: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target flag-reference

# Every test: units and real-process integration tests (real torchrun, real data).
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 300 -j $(JOBS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit -j $(JOBS)

# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer
# (CMakePresets.json: build-asan/, build-tsan/), warnings as errors. CI runs it after `make test`.
sanitize: deps
	scripts/sanitize.sh asan tsan

format-check:
	scripts/check-format.sh

# The lock contracts of the headers (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED) checked by
# clang's -Wthread-safety as an error (preset thread-safety, build-thread-safety/; GCC stays the
# main compiler): every program and library, the trainer included, unoptimised and without the
# tests; then tests/thread_safety's probe, an unguarded read, must fail to build. CI runs it.
thread-safety: deps
	cmake --preset thread-safety $(CMAKE_ARGS)
	cmake --build build-thread-safety -j $(JOBS)
	cd build-thread-safety && ctest --output-on-failure

# ddp-train against LibTorch 2.11 from the torch 2.x venv with CUDA and NCCL compiled and linked,
# and its LibTorch tests on the CPU (build-torch2/; README, torch versions). CI runs it.
torch2-build: deps
	scripts/build-torch2.sh build-torch2

# ddprun, ddprun-rdzv and ddprun-launch fully static, the gRPC rendezvous linked in (preset
# `static`, build-static/bin/; README, "Static binaries"): they need nothing from the host but a
# kernel. Compiled as `make` compiles them (ccache serves both), only the link differs;
# libmicrohttpd is Debian's source package rebuilt without HTTPS
# (scripts/build-static-microhttpd.sh).
static: deps
	cmake --preset static $(CMAKE_ARGS)
	cmake --build build-static -j $(JOBS) --target ddprun ddprun-rdzv

# The static binaries' checks (tests/dist/run_static_tests.sh: no NEEDED/INTERP, size, roots with
# nothing but the binaries: /proc, /etc/hosts, TLS roots, time zones, locale), then the kernel
# log, cgroup, nvidia-smi and etcd TLS integration tests of $(BUILD_DIR) run against them. Needs
# root. CI runs it after `make test`: the static tree's compile (no tests, no trainer), then
# about 45 s of checks.
STATIC_PROJECT_TESTS = causes_integration_test health_check_integration_test etcd_integration_test
test-static: static configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(STATIC_PROJECT_TESTS)
	tests/dist/run_static_tests.sh build-static $(BUILD_DIR)

# ddprun, ddprun-rdzv and ddprun-launch for aarch64 Linux, fully static as `make static` makes them,
# in build-aarch64/bin/ (preset aarch64), and the unit tests: Debian's cross compiler against a
# sysroot of Debian's arm64 packages
# (scripts/make-arm64-sysroot.sh, cached under ~/.cache/ddprun; the host's packages are left as
# they are). README, "aarch64".
aarch64:
	@scripts/install-deps.sh --aarch64
	DDPRUN_ARM64_SYSROOT=$$(scripts/make-arm64-sysroot.sh) cmake --preset aarch64 $(CMAKE_ARGS)
	cmake --build build-aarch64 -j $(JOBS) --target ddprun ddprun-rdzv unit-tests

# The aarch64 build under qemu-user: its unit tests (ctest runs each under qemu, the toolchain
# file's CMAKE_CROSSCOMPILING_EMULATOR), a standalone and a 2-node c10d job with aarch64 workers
# (tests/dist/aarch64_test.sh), and the static binaries' checks of `make test-static` on the
# aarch64 binaries (tests/dist/run_static_tests.sh, its roots' programs run through qemu). CI
# runs it.
test-aarch64: aarch64
	cd build-aarch64 && ctest --output-on-failure -L unit -j $(JOBS)
	tests/dist/aarch64_test.sh build-aarch64 "$$(scripts/make-arm64-sysroot.sh)"
	OBJCOPY=aarch64-linux-gnu-objcopy STRIP=aarch64-linux-gnu-strip \
	  tests/dist/with_aarch64_binfmt.sh "$$(scripts/make-arm64-sysroot.sh)" \
	  tests/dist/run_static_tests.sh build-aarch64

# The release files in dist/ (scripts/make-dist.sh): ddprun-VERSION-linux-ARCH.tar.gz, its
# .debug.tar.gz and the wheel ddprun-VERSION-py3-none-manylinux_2_17_ARCH...whl, from the static
# build, for x86_64 and, where the tree has its preset, aarch64.
dist: deps
	CMAKE_ARGS='$(CMAKE_ARGS)' scripts/make-dist.sh

# The x86_64 release files on "any Linux" (scripts/test-dist.sh: a busybox-only root, a Debian
# 11 root, the wheel in a torch 2.11 venv; root, about 30 s). CI runs it.
test-dist: dist
	scripts/test-dist.sh dist

# Only what the demo needs: its packages and the three programs (not the tests).
demo:
	@scripts/install-deps.sh --demo
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j $(JOBS) --target ddprun ddprun-rdzv ddp-train ddprun_grpc
	scripts/demo.sh $(BUILD_DIR)

bench: build
	bench/run_all.sh $(BUILD_DIR)

# build-static/ddprun_VERSION_amd64.deb from the static programs: no library dependency, so it
# installs on Ubuntu as on Debian (packaging/CMakeLists.txt); scripts/check-package.sh installs
# it on a clean Debian 12 root.
package: static
	cmake --build build-static -j $(JOBS)
	cd build-static && cpack -G DEB

# Into CMAKE_INSTALL_PREFIX (/usr/local unless configured otherwise); PREFIX=... overrides.
install: build
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

# README.md and docs/ as a site in build/docs/ (open build/docs/index.html): MkDocs from the
# pinned venv of scripts/tools-requirements.txt (scripts/install-tools.sh), `mkdocs build --strict`
# (scripts/build-docs.py). CI runs it.
.PHONY: docs
docs:
	@scripts/install-deps.sh --tools
	NO_MKDOCS_2_WARNING=1 scripts/build-docs.py "$${DDPRUN_TOOLS_VENV:-$$HOME/.cache/ddprun/venv-tools}/bin/mkdocs"

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
