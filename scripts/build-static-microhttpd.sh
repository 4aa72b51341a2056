#!/usr/bin/env bash
# libmicrohttpd.a without HTTPS, for the static build (DDPRUN_STATIC; cmake/DdprunStatic.cmake).
#
# Why: Debian's libmicrohttpd.a is built with HTTPS, so it pulls in GnuTLS, whose global
# initialisation (run by libmicrohttpd's constructor) links PKCS#11 support from p11-kit — and
# Debian ships p11-kit only as a shared library (no libp11-kit.a). ddprun serves plain HTTP
# (/metrics and the status page on loopback or a private port; rendezvous/http), so this rebuilds
# the SAME Debian source package as the installed libmicrohttpd-dev (same version, Debian's
# patches applied) with --disable-https. It is fetched from Debian's archive by name and
# version through a private apt configuration (no change to the host's apt sources) and cached
# outside the checkout. Prints the folder holding lib/libmicrohttpd.a.
#
# Usage: scripts/build-static-microhttpd.sh [--host TRIPLET] [--sysroot DIR]   (TRIPLET for a
#        cross build; CC from the environment, default TRIPLET-gcc or gcc. DIR: the cross build's
#        sysroot, whose dpkg database says the version, e.g. scripts/make-arm64-sysroot.sh's)
set -euo pipefail

host=""
admindir=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --host) host="$2"; shift 2 ;;
    --sysroot) admindir=(--admindir="$2/var/lib/dpkg"); shift 2 ;;
    *) echo "build-static-microhttpd: unknown argument '$1' (--host TRIPLET, --sysroot DIR)" >&2; exit 2 ;;
  esac
done
# The -dev package of the target architecture (multiarch: libmicrohttpd-dev:arm64 for a cross
# build), whose version is the one rebuilt.
if [[ -n "$host" ]]; then
  arch=$(dpkg-architecture -t "$host" -q DEB_HOST_ARCH 2>/dev/null)
else
  arch=$(dpkg --print-architecture)
fi
package="libmicrohttpd-dev:$arch"
version=$(dpkg-query "${admindir[@]}" -W -f='${Version}' "$package" 2>/dev/null) || {
  echo "build-static-microhttpd: $package is not installed (scripts/install-deps.sh)" >&2
  exit 2
}
cache="${DDPRUN_CACHE:-$HOME/.cache/ddprun}"
out="$cache/libmicrohttpd-$version-nohttps${host:+-$host}"
if [[ -f "$out/lib/libmicrohttpd.a" ]]; then
  echo "$out"
  exit 0
fi

apt_dir="$cache/apt-src"
mkdir -p "$apt_dir/lists/partial"
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
echo "deb-src http://deb.debian.org/debian $codename main" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Sandbox::User=root" -q)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
  cd "$work"
  apt-get "${apt_opts[@]}" update >&2
  apt-get "${apt_opts[@]}" source --download-only "libmicrohttpd=$version" >&2
  dpkg-source -x ./*.dsc src >&2
  cd src
  ./configure ${host:+--host="$host"} --disable-https --enable-static --disable-shared --with-pic \
    --disable-doc --disable-examples --disable-curl --disable-nls --without-gnutls \
    --prefix="$out" >&2
  make -C src/microhttpd -j "$(nproc)" >&2
  make -C src/microhttpd install >&2
)
echo "$out"
