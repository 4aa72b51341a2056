# Cross build for aarch64 Linux (CMakePresets.json: aarch64, `make aarch64`): Debian's cross
# compiler (g++-aarch64-linux-gnu) against a Debian 12 arm64 sysroot made by
# scripts/make-arm64-sysroot.sh, whose path DDPRUN_ARM64_SYSROOT names (the Makefile passes it).
# Code generators run on the build machine: protoc and grpc_cpp_plugin are the host's (amd64)
# programs, so programs are searched for outside the sysroot, libraries and headers only inside.
# Test programs run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR: ctest and GoogleTest's test
# discovery prefix it), with the sysroot as the root of their dynamic loader and libraries.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT DDPRUN_ARM64_SYSROOT)
  set(DDPRUN_ARM64_SYSROOT "$ENV{DDPRUN_ARM64_SYSROOT}")
endif()
if(NOT DDPRUN_ARM64_SYSROOT OR NOT EXISTS "${DDPRUN_ARM64_SYSROOT}/.complete")
  message(FATAL_ERROR "DDPRUN_ARM64_SYSROOT='${DDPRUN_ARM64_SYSROOT}' is not an arm64 sysroot: "
                      "set it to the path scripts/make-arm64-sysroot.sh prints")
endif()
# Try-compiles (CMake's compiler checks) see the variable too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DDPRUN_ARM64_SYSROOT)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_SYSROOT "${DDPRUN_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${DDPRUN_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (libmicrohttpd) reads the sysroot's .pc files and prefixes their paths with it.
set(ENV{PKG_CONFIG_DIR} "")
set(ENV{PKG_CONFIG_LIBDIR}
    "${DDPRUN_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${DDPRUN_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${DDPRUN_ARM64_SYSROOT}")

find_program(DDPRUN_QEMU_AARCH64 qemu-aarch64-static)
if(DDPRUN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${DDPRUN_QEMU_AARCH64};-L;${DDPRUN_ARM64_SYSROOT}")
endif()
