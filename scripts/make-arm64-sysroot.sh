#!/usr/bin/env bash
# Makes the Debian 12 arm64 sysroot of the aarch64 cross build (cmake/toolchain-aarch64-linux-gnu
# .cmake, `make aarch64`): the arm64 .debs of ddprun's build packages and everything they depend
# on, resolved by apt against an empty arm64 system and unpacked with `dpkg-deb -x`. The host's
# dpkg is not touched (no `dpkg --add-architecture`): libyaml-cpp-dev is not Multi-Arch, so its
# arm64 package would replace the amd64 one the normal build needs. The same root serves qemu-user
# as the aarch64 binaries' library root (qemu-aarch64-static -L, tests/dist/aarch64_test.sh).
#
# Cached outside the checkout like the torch venv, in /root/.cache/ddprun/sysroot-arm64-bookworm:
# one path for every version of the package list (the path is in every compile command, and
# ccache hits need it stable); the list's hash in the root's .complete says whether it is
# current, and an edit to the list makes the root again. Idempotent: when the root is current it
# only prints its path (the only thing on stdout).
#
#   scripts/make-arm64-sysroot.sh        prints the sysroot's path, making it first if needed
set -euo pipefail

# The -dev packages of the build (scripts/install-deps.sh's launcher, rendezvous and test
# packages, for arm64); their libraries come as dependencies. protobuf-compiler-grpc is never run
# (the host's amd64 protoc and grpc_cpp_plugin generate the code) but gRPC's CMake package checks
# that its grpc_cpp_plugin exists.
PACKAGES=(
  libc6-dev libstdc++-12-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev libprotoc-dev libabsl-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libmicrohttpd-dev libssl-dev zlib1g-dev
  libc-ares-dev libre2-dev libgtest-dev libgmock-dev
  libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev   # ddp-train's image code (unit tests)
  busybox-static   # the emulated tests' workers (tests/dist/aarch64_test.sh)
)

CACHE=${DDPRUN_CACHE:-/root/.cache/ddprun}
LAYOUT=3  # bump when what this script makes of the packages changes
key=$(printf '%s\n' "layout $LAYOUT" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
sysroot="$CACHE/sysroot-arm64-bookworm"
if [ "$(cat "$sysroot/.complete" 2>/dev/null)" = "$key" ]; then
  echo "$sysroot"
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "make-arm64-sysroot: $tool not found" >&2; exit 1; }
done

work="$CACHE/sysroot-arm64-work"
rm -rf "$work" "$sysroot.tmp"
mkdir -p "$work"/{state/lists/partial,cache/archives/partial} "$sysroot.tmp"
: >"$work/status"
# A private apt: the host's sources (Debian's archive), but arm64 as the only architecture and an
# empty dpkg status, so `install --download-only` fetches the whole dependency closure.
cat >"$work/apt.conf" <<EOF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
Dir::State "$work/state";
Dir::State::status "$work/status";
Dir::Cache "$work/cache";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Install-Recommends "false";
APT::Sandbox::User "root";
EOF
export APT_CONFIG="$work/apt.conf"
echo "make-arm64-sysroot: resolving ${#PACKAGES[@]} packages for arm64" >&2
apt-get -q update >&2
apt-get -q -y install --download-only "${PACKAGES[@]}" >&2

debs=("$work"/cache/archives/*.deb)
echo "make-arm64-sysroot: unpacking ${#debs[@]} packages into $sysroot" >&2
for deb in "${debs[@]}"; do
  dpkg-deb -x "$deb" "$sysroot.tmp"
done
# Absolute links (e.g. lib/aarch64-linux-gnu/libfoo.so -> /lib/...) would point into the host:
# make them relative to their own folder so they resolve inside the root.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  rel=$(realpath -m --relative-to="$(dirname "$link")" "$sysroot.tmp$target")
  ln -sfn "$rel" "$link"
done < <(find "$sysroot.tmp" -type l -lname '/*' -print0)
# A dpkg database of what is unpacked, so that `dpkg-query --admindir=<root>/var/lib/dpkg` answers
# which arm64 versions the root holds (scripts/build-static-microhttpd.sh --sysroot).
mkdir -p "$sysroot.tmp/var/lib/dpkg"
for deb in "${debs[@]}"; do
  dpkg-deb -f "$deb" Package Version Architecture Multi-Arch Source Maintainer Description
  printf 'Status: install ok installed\n\n'
done >"$sysroot.tmp/var/lib/dpkg/status"
echo "$key" >"$sysroot.tmp/.complete"
rm -rf "$sysroot"
mv "$sysroot.tmp" "$sysroot"
rm -rf "$work"
echo "$sysroot"
