#!/usr/bin/env bash
# Checks the Debian package on a clean system: builds BUILD_DIR/ddprun_VERSION_amd64.deb (`make
# package`: the static build, build-static/; a dynamic build/ works too), makes a fresh Debian
# 12 root with debootstrap (Debian's own packages, from the mirror this machine's apt uses),
# installs the .deb there with apt, and runs the installed programs inside it:
#   - `ddprun --standalone --nproc-per-node=2 --no-python /bin/true`, `ddprun-rdzv --help`,
#     `man ddprun`, every program's --version line, a one-node c10d job (the gRPC rendezvous
#     linked in, or the plugin found);
#   - the static package depends on no library; apt pulled no build tools (no -dev package, no
#     compiler, no cmake);
#   - an upgrade over an older version keeps an edited /etc/default/ddprun-rdzv;
#   - (dynamic build) with the plugin missing, a c10d job names the file and exits 3;
#   - removing the package stops nothing that is running (a ddprun-rdzv started before it).
# Root only; takes minutes (most of it downloading). Not part of `make test`.
#
#   scripts/check-package.sh [BUILD_DIR]      KEEP_ROOT=1 keeps the root for a look afterwards
set -euo pipefail
BUILD_DIR=${1:-build-static}
ROOT=${CHECK_ROOT:-/var/tmp/ddprun-check-root}
CACHE=${CHECK_CACHE:-/var/cache/ddprun-check-package}  # debootstrap's downloads, reused
SUITE=bookworm

if [ "$(id -u)" -ne 0 ]; then echo "check-package: needs root (debootstrap, chroot)" >&2; exit 2; fi
for tool in debootstrap cpack dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "check-package: $tool missing (scripts/install-deps.sh)" >&2; exit 2; }
done

step() { printf '\ncheck-package: == %s\n' "$*"; }
fail() { printf 'check-package: FAILED: %s\n' "$*" >&2; exit 1; }
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

cleanup() {
  for m in dev/pts dev proc sys; do
    mountpoint -q "$ROOT/$m" 2>/dev/null && umount -l "$ROOT/$m"
  done
  if [ "${KEEP_ROOT:-0}" != 1 ]; then rm -rf "$ROOT"; fi
}
trap cleanup EXIT

step "package"
cmake --build "$BUILD_DIR" -j "$(nproc)" >/dev/null
(cd "$BUILD_DIR" && cpack -G DEB >/dev/null)
DEB=$(ls -t "$BUILD_DIR"/ddprun_*_amd64.deb | head -1)
VERSION=$(dpkg-deb -f "$DEB" Version)
echo "$DEB: version $VERSION, $(du -k "$DEB" | cut -f1) KiB"
echo "Depends: $(dpkg-deb -f "$DEB" Depends)"
# The programs the package holds (the static build has no ddp-train and no plugin).
PROGRAMS=$(dpkg-deb -c "$DEB" | sed -n 's|.* \./usr/bin/\([^ ]*\).*|\1|p' | tr '\n' ' ')
HAS_PLUGIN=$(dpkg-deb -c "$DEB" | grep -c 'usr/lib/ddprun/libddprun_grpc.so' || true)
if [ "$HAS_PLUGIN" = 0 ]; then
  [ -z "$(dpkg-deb -f "$DEB" Depends)" ] || fail "the static package depends on libraries"
  echo "static package: no Depends; programs: $PROGRAMS"
fi

step "a fresh Debian 12 root ($ROOT)"
MIRROR=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
rm -rf "$ROOT"
mkdir -p "$CACHE"
debootstrap --variant=minbase --include=man-db --cache-dir="$CACHE" "$SUITE" "$ROOT" "$MIRROR" \
  > "$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log"; fail "debootstrap"; }
# The same suites as this machine (bookworm-updates, security), so the same library versions.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  cp /etc/apt/sources.list.d/debian.sources "$ROOT/etc/apt/sources.list.d/"
  rm -f "$ROOT/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
mount -t sysfs sysfs "$ROOT/sys"
in_root dpkg-query -W -f='${Package}\n' | sort > "$CACHE/before.txt"
echo "$(wc -l < "$CACHE/before.txt") packages in the fresh root"

step "install an older version first (the same package, version ${VERSION}~older)"
OLD=$(mktemp -d)
dpkg-deb -R "$DEB" "$OLD/pkg"
sed -i "s/^Version: .*/Version: ${VERSION}~older/" "$OLD/pkg/DEBIAN/control"
dpkg-deb -b "$OLD/pkg" "$ROOT/tmp/ddprun_older.deb" >/dev/null
rm -rf "$OLD"
cp "$DEB" "$ROOT/tmp/ddprun.deb"
in_root apt-get update -q >/dev/null
in_root apt-get install -y -q /tmp/ddprun_older.deb > "$CACHE/apt-install.log" 2>&1 ||
  { tail -20 "$CACHE/apt-install.log"; fail "apt-get install of the .deb"; }
in_root dpkg-query -W -f='${Package}\n' | sort > "$CACHE/after.txt"
ADDED=$(comm -13 "$CACHE/before.txt" "$CACHE/after.txt")
echo "apt installed $(echo "$ADDED" | wc -l) packages (ddprun and its dependencies)"
BUILD_TOOLS=$(echo "$ADDED" | grep -E -- '-dev$|^(gcc|g\+\+|cpp|cmake|make|binutils)(-|$)' || true)
[ -z "$BUILD_TOOLS" ] || fail "the package pulled build tools: $BUILD_TOOLS"
echo "no build tools among them"
echo 'DDPRUN_RDZV_HOST=10.1.2.3  # edited by check-package' >> "$ROOT/etc/default/ddprun-rdzv"

step "upgrade to $VERSION"
in_root apt-get install -y -q /tmp/ddprun.deb >> "$CACHE/apt-install.log" 2>&1 ||
  { tail -20 "$CACHE/apt-install.log"; fail "upgrade"; }
[ "$(in_root dpkg-query -W -f='${Version}' ddprun)" = "$VERSION" ] || fail "version after upgrade"
grep -q "edited by check-package" "$ROOT/etc/default/ddprun-rdzv" ||
  fail "the upgrade lost the edited /etc/default/ddprun-rdzv"
echo "installed $VERSION over ${VERSION}~older; the edited /etc/default/ddprun-rdzv was kept"

step "the installed programs"
in_root ddprun --standalone --nproc-per-node=2 --no-python /bin/true || fail "standalone job"
echo "ddprun --standalone --nproc-per-node=2 --no-python /bin/true: exit 0"
in_root ddprun-rdzv --help | head -3
for p in $PROGRAMS; do
  want="$p $VERSION"
  [ "$p" = ddprun-launch ] && want="ddprun $VERSION"
  got=$(in_root "$p" --version)
  # ddp-train also names the torch its LibTorch came from.
  [ "$p" = ddp-train ] && got=${got% (built for torch *)}
  [ "$got" = "$want" ] || fail "$p --version"
done
echo "$PROGRAMS--version: $VERSION"
in_root man ddprun 2>/dev/null | head -4
for p in $PROGRAMS; do
  [ "$p" = ddprun-launch ] && continue
  in_root man -w "$p" >/dev/null || fail "no man page of $p"
  in_root man "$p" 2>/dev/null | grep -q "$p $VERSION" || fail "the man page of $p does not say $VERSION"
done
in_root ddprun --nnodes=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29499 \
  --rdzv-conf=is_host=1 --quiet --no-python /bin/true || fail "a one-node c10d job"
echo "a one-node c10d job (the gRPC rendezvous $([ "$HAS_PLUGIN" = 0 ] && echo linked in || echo plugin from /usr/lib/ddprun)): exit 0"

if [ "$HAS_PLUGIN" != 0 ]; then
step "the plugin missing"
mv "$ROOT/usr/lib/ddprun/libddprun_grpc.so" "$ROOT/tmp/plugin.aside"
set +e
MSG=$(in_root ddprun --nnodes=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29499 \
  --rdzv-conf=is_host=1 --no-python /bin/true 2>&1)
CODE=$?
set -e
mv "$ROOT/tmp/plugin.aside" "$ROOT/usr/lib/ddprun/libddprun_grpc.so.tmp"
[ "$CODE" = 3 ] || fail "c10d without the plugin exited $CODE, not 3: $MSG"
echo "$MSG" | grep -q "/usr/lib/ddprun/libddprun_grpc.so" || fail "no path in: $MSG"
echo "c10d job: exit 3: $(echo "$MSG" | grep plugin)"
mv "$ROOT/usr/lib/ddprun/libddprun_grpc.so.tmp" "$ROOT/usr/lib/ddprun/libddprun_grpc.so"
fi

step "removing the package stops nothing"
chroot "$ROOT" /usr/bin/ddprun-rdzv --port=0 --quiet > "$CACHE/rdzv.out" 2>&1 &
RDZV=$!
for _ in $(seq 100); do grep -q listening "$CACHE/rdzv.out" && break; sleep 0.1; done
grep -q listening "$CACHE/rdzv.out" || fail "ddprun-rdzv did not start: $(cat "$CACHE/rdzv.out")"
in_root apt-get remove -y -q ddprun >> "$CACHE/apt-install.log" 2>&1 || fail "apt-get remove"
kill -0 "$RDZV" 2>/dev/null || fail "removing the package stopped a running ddprun-rdzv"
kill "$RDZV"; wait "$RDZV" 2>/dev/null || true
[ -f "$ROOT/etc/default/ddprun-rdzv" ] || fail "remove (not purge) deleted the settings file"
echo "ddprun-rdzv (pid $RDZV) kept running through apt-get remove; /etc/default/ddprun-rdzv kept"

printf '\ncheck-package: OK: %s installs on a clean Debian 12 root and works\n' "$(basename "$DEB")"
