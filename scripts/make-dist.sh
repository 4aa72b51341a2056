#!/usr/bin/env bash
# `make dist`: ddprun's release files in dist/, from the static build (CMakePresets.json: static,
# build-static/) and, where the tree has the aarch64 preset, the static cross build
# (build-aarch64/, `make aarch64`; its tree is the x86_64 one with aarch64 programs, the man
# pages and completions being the same text). Without that preset it says so and writes the
# x86_64 files only; a build or check that fails for aarch64 fails make dist. Per ARCH:
#
#   ddprun-VERSION-linux-ARCH.tar.gz        ddprun-VERSION/{bin,share,lib,etc,README.md}: the
#                                           programs stripped, man pages, completions, the
#                                           systemd unit, ddprun_inprocess.py, the licences
#   ddprun-VERSION-linux-ARCH.debug.tar.gz  ddprun-VERSION/bin/.debug/*.debug (gdb finds them)
#   ddprun-VERSION-py3-none-manylinux_2_17_ARCH.manylinux2014_ARCH.whl
#
# VERSION is project(VERSION) of CMakeLists.txt; every program's --version and man page are
# checked against it. Each binary must be fully static (no NEEDED entry, no interpreter), so the
# manylinux2014 tag is honest: it needs no library of the host, only a kernel. The wheel is
# built by scikit-build-core (pyproject.toml, packaging/wheel/) from the tree staged here, in the
# pinned venv of scripts/dist-requirements.txt, then checked by `twine check --strict` and
# `auditwheel show`.
#
#   scripts/make-dist.sh                 both architectures where the tree has both presets
#   DIST_ARCHES=x86_64 scripts/make-dist.sh
#   DIST_BUILD_DIR=build DIST_ALLOW_DYNAMIC=1 scripts/make-dist.sh   (development only: packs a
#       dynamic build's binaries into dist-dev/, never dist/; no wheel tag is claimed for them)
set -Eeuo pipefail  # -E: the ERR trap below also in functions
shopt -s inherit_errexit  # and a failure inside $(...) fails the script too
trap 'echo "make-dist: error: line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR  # no silent set -e exit
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
VENV=${DIST_VENV:-/root/.cache/ddprun/venv-dist}
PROGRAMS=(ddprun ddprun-rdzv)  # ddprun-launch is a link to ddprun (a script in the wheel)

# shellcheck source=lib/elf.sh
. "$ROOT/scripts/lib/elf.sh"

say() { printf 'make-dist: %s\n' "$*"; }
die() { printf 'make-dist: error: %s\n' "$*" >&2; exit 1; }

VERSION=$(sed -n 's/^project(ddprun VERSION \([^ )]*\).*/\1/p' CMakeLists.txt)
[ -n "$VERSION" ] || die "no project(ddprun VERSION ...) in CMakeLists.txt"
OUT=$ROOT/dist
if [ "${DIST_ALLOW_DYNAMIC:-0}" = 1 ]; then OUT=$ROOT/dist-dev; fi
EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)  # reproducible tar entries

has_preset() { grep -q "\"name\": *\"$1\"" CMakePresets.json; }

# The pinned tools; made once, kept outside the checkout like the torch venv.
dist_venv() {
  local stamp="$VENV/.requirements"
  if ! cmp -s scripts/dist-requirements.txt "$stamp" 2>/dev/null; then
    say "making $VENV (scripts/dist-requirements.txt)"
    rm -rf "$VENV"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --no-deps -r scripts/dist-requirements.txt
    cp scripts/dist-requirements.txt "$stamp"
  fi
}

# build_dir ARCH -> the build folder, built (its default target: programs, man pages, completions).
build_arch() {
  local arch=$1
  if [ -n "${DIST_BUILD_DIR:-}" ]; then
    [ "$arch" = "$(uname -m)" ] || die "DIST_BUILD_DIR is for the host's architecture only"
    cmake --build "$DIST_BUILD_DIR" -j "$JOBS" >&2
    echo "$DIST_BUILD_DIR"
    return
  fi
  # Configured as `make static` / `make aarch64` configure them (CMAKE_ARGS from the Makefile),
  # so a tree they built is reused as it is, not rebuilt for a changed compile command.
  local cmake_args=()
  read -r -a cmake_args <<< "${CMAKE_ARGS:-}"
  case $arch in
    x86_64)
      has_preset static || die "CMakePresets.json has no preset 'static': no x86_64 release files"
      cmake --preset static "${cmake_args[@]}" >&2
      cmake --build build-static -j "$JOBS" >&2  # the programs, man pages, completions
      echo build-static
      ;;
    aarch64)
      # As `make aarch64` builds it, the programs only: the man pages and completions are text
      # the programs print, the same for every architecture, so they come from the x86_64 tree.
      has_preset aarch64 || die "CMakePresets.json has no preset 'aarch64': no aarch64 release files"
      scripts/install-deps.sh --aarch64 >&2
      local sysroot
      sysroot=$(scripts/make-arm64-sysroot.sh)
      DDPRUN_ARM64_SYSROOT=$sysroot cmake --preset aarch64 "${cmake_args[@]}" >&2
      cmake --build build-aarch64 -j "$JOBS" --target ddprun ddprun-rdzv >&2
      echo build-aarch64
      ;;
    *) die "no preset for the architecture $arch" ;;
  esac
}

# Fully static: no NEEDED entry and no program interpreter.
check_static() {
  local file=$1 problem
  problem=$(elf_static_problem "$file")
  if [ -n "$problem" ]; then
    [ "${DIST_ALLOW_DYNAMIC:-0}" = 1 ] && { say "warning: $file is dynamic ($problem)"; return; }
    die "$file is not fully static ($problem): make dist packs the static presets' binaries"
  fi
}

# The ELF machine of FILE is ARCH's (a tarball named aarch64 holds aarch64 programs).
check_machine() {
  local arch=$1 file=$2 machine
  machine=$(elf_machine "$file")
  case "$arch:$machine" in
    x86_64:*X86-64* | aarch64:AArch64) ;;
    *) die "$file is for '$machine', not $arch" ;;
  esac
}

# The archives (or, for a dynamic development build, the shared libraries) the programs were
# linked from, one path a line.
linked_files() {
  local build=$1 program cmd
  for program in "${PROGRAMS[@]}"; do
    if [ "${DIST_ALLOW_DYNAMIC:-0}" = 1 ] && [ -n "$(elf_static_problem "$build/bin/$program")" ]; then
      ldd "$build/bin/$program" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'
      continue
    fi
    if [ -f "$build/build.ninja" ]; then
      cmd=$(ninja -C "$build" -t commands "$program" | tail -1)
    else
      cmd=$(cat "$(find "$build" -path "*/$program.dir/link.txt" | sed -n 1p)")
    fi
    local cxx=() sysroot word
    # The compiler CMake found (a toolchain file's is not in the cache, it is in here).
    cxx=("$(sed -n 's/^set(CMAKE_CXX_COMPILER "\(.*\)")$/\1/p' \
      "$(find "$build/CMakeFiles" -name CMakeCXXCompiler.cmake | sed -n 1p)")")
    [ -n "${cxx[0]}" ] || die "$build: no C++ compiler in CMakeFiles/*/CMakeCXXCompiler.cmake"
    sysroot=$(sed -n 's/^DDPRUN_ARM64_SYSROOT:[A-Z]*=//p' "$build/CMakeCache.txt")
    [ -z "$sysroot" ] || cxx+=("--sysroot=$sysroot")
    for word in $cmd; do
      case $word in
        /*.a) echo "$word" ;;
        -l*) "${cxx[@]}" -print-file-name="lib${word#-l}.a" ;;
      esac
    done
    # What the compiler driver adds to a static link.
    for word in libstdc++.a libgcc.a libgcc_eh.a libc.a libm.a; do
      "${cxx[@]}" -print-file-name="$word"
    done
  done | while read -r f; do if [ -e "$f" ]; then echo "$f"; fi; done | sort -u
}

# The Debian package that owns FILE (by its path, its real path, or either under / for /usr:
# dpkg records /lib/... on a merged-/usr system).
owner_of() {
  local f=$1 real candidate
  real=$(readlink -f "$f" || echo "$f")
  for candidate in "$f" "$real" "${f#/usr}" "${real#/usr}"; do
    dpkg -S "$candidate" 2>/dev/null | sed -n 1p | cut -d: -f1 && return
  done
  return 0
}

# licenses/SOURCE.copyright for each Debian source package whose files were linked, and
# licenses/PACKAGES: package, version, the linked files.
collect_licenses() {
  local build=$1 dest=$2
  mkdir -p "$dest"
  : > "$dest/PACKAGES.tmp"
  local f pkg src ver doc
  linked_files "$build" > "$dest/linked.tmp"
  [ -s "$dest/linked.tmp" ] || die "$build: no archive found on the programs' link lines"
  while read -r f; do
    case $f in "$ROOT"/*) continue ;; esac  # the project's own archives
    pkg=$(owner_of "$f")
    if [ -z "$pkg" ]; then
      # An archive rebuilt from a Debian source package (scripts/build-static-microhttpd.sh)
      # or one of a cross build's sysroot: the licence is that of the package here that ships
      # an archive of the same name (the same Debian source).
      pkg=$(dpkg -S "*/$(basename "$f")" 2>/dev/null | sed -n 1p | cut -d: -f1) || true
      [ -n "$pkg" ] || die "$f is linked but no Debian package owns it (its licence is unknown)"
      f="$f (not in this system's dpkg database; $pkg ships an archive of that name)"
    fi
    src=$(dpkg-query -W -f='${source:Package}' "$pkg")
    ver=$(dpkg-query -W -f='${Version}' "$pkg")
    doc=/usr/share/doc/$pkg/copyright
    [ -e "$doc" ] || die "$pkg (linked: $f) has no $doc"
    cp -L "$doc" "$dest/$src.copyright"
    printf '%s\t%s\t%s\t%s\n' "$src" "$pkg" "$ver" "$f" >> "$dest/PACKAGES.tmp"
  done < "$dest/linked.tmp"
  rm "$dest/linked.tmp"
  {
    echo "# Debian source package, binary package, version, file linked into ddprun/ddprun-rdzv"
    sort -u "$dest/PACKAGES.tmp"
  } > "$dest/PACKAGES"
  rm "$dest/PACKAGES.tmp"
}

tool_for() {  # objcopy for ARCH (Debian's cross binutils for aarch64)
  if [ "$1" = "$(uname -m)" ]; then echo "$2"; else echo "$1-linux-gnu-$2"; fi
}

# stage ARCH BUILD_DIR STAGE: the release tree STAGE/ddprun-VERSION, stripped, debug info aside.
stage_tree() {
  local arch=$1 build=$2 stage=$3 objcopy
  objcopy=$(tool_for "$arch" objcopy)
  command -v "$objcopy" >/dev/null || die "$objcopy missing (binutils for $arch)"
  rm -rf "$stage"
  mkdir -p "$stage"
  local prefix=/opt/ddprun-$VERSION  # the unit's paths (docs/operations/systemd.md)
  local tree=$stage/ddprun-$VERSION
  if [ "$arch" = "$(uname -m)" ]; then
    DESTDIR=$stage/destdir cmake --install "$build" --prefix "$prefix" >/dev/null
    mv "$stage/destdir$prefix" "$tree"
    rm -rf "$stage/destdir"
  else
    # The host's tree (made first) with this architecture's programs and their licences.
    local host_tree
    host_tree=$ROOT/build-dist/$(uname -m)/ddprun-$VERSION
    [ -d "$host_tree" ] || die "$arch's tree is made from the $(uname -m) one: make that first"
    cp -a "$host_tree" "$tree"
    rm -rf "$tree/bin/.debug" "$tree/share/doc/ddprun/licenses" "$tree/README.md"
    cp "$build/bin/ddprun" "$build/bin/ddprun-rdzv" "$tree/bin/"
  fi
  # Only the launcher's programs (a development build also installs ddp-train and the plugin).
  find "$tree/bin" -mindepth 1 -maxdepth 1 ! -name ddprun ! -name ddprun-rdzv ! -name ddprun-launch \
    -exec rm -f {} +
  rm -rf "$tree/lib/ddprun" "$tree/share/man/man1/ddp-train.1.gz"
  [ "$(readlink "$tree/bin/ddprun-launch")" = ddprun ] || die "bin/ddprun-launch is not a link to ddprun"
  mkdir -p "$tree/bin/.debug"
  local p
  for p in "${PROGRAMS[@]}"; do
    check_static "$tree/bin/$p"
    check_machine "$arch" "$tree/bin/$p"
    "$objcopy" --only-keep-debug "$tree/bin/$p" "$tree/bin/.debug/$p.debug"
    (cd "$tree/bin" && "$objcopy" --strip-all --add-gnu-debuglink=".debug/$p.debug" "$p")
  done
  cp packaging/dist/README.md "$tree/README.md"
  collect_licenses "$build" "$tree/share/doc/ddprun/licenses"
  check_version "$arch" "$tree"
}

# Every program's --version and man page say VERSION (another architecture's under qemu-user).
check_version() {
  local arch=$1 tree=$2 p line
  for p in ddprun ddprun-rdzv; do
    zcat "$tree/share/man/man1/$p.1.gz" | grep -q "$p $VERSION" ||
      die "share/man/man1/$p.1.gz does not say $p $VERSION"
  done
  local run=()
  if [ "$arch" != "$(uname -m)" ]; then
    # A static program runs under qemu-user as it is (no library root, no binfmt needed).
    run=("qemu-$arch-static")
    command -v "${run[0]}" >/dev/null || die "${run[0]} missing (scripts/install-deps.sh --aarch64)"
  fi
  for p in ddprun ddprun-rdzv ddprun-launch; do
    line=$(cd "$tree/bin" && "${run[@]}" "./$p" --version)
    case $line in
      "ddprun $VERSION" | "ddprun-rdzv $VERSION") ;;
      *) die "bin/$p --version says '$line', not $VERSION" ;;
    esac
  done
}

tarballs() {
  local arch=$1 stage=$2
  local name=ddprun-$VERSION-linux-$arch
  local tar_flags=(--sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" -C "$stage")
  tar "${tar_flags[@]}" --exclude="ddprun-$VERSION/bin/.debug" -cf - "ddprun-$VERSION" |
    gzip -9n > "$OUT/$name.tar.gz"
  tar "${tar_flags[@]}" -cf - "ddprun-$VERSION/bin/.debug" | gzip -9n > "$OUT/$name.debug.tar.gz"
  say "$OUT/$name.tar.gz ($(du -k "$OUT/$name.tar.gz" | cut -f1) KiB)"
  say "$OUT/$name.debug.tar.gz ($(du -k "$OUT/$name.debug.tar.gz" | cut -f1) KiB)"
}

make_wheel() {
  local arch=$1 stage=$2
  local tag=manylinux_2_17_$arch.manylinux2014_$arch
  local tmp=$stage/wheel
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # In-tree build folder (ccache's base_dir and a warm CMake cache across runs).
  "$VENV/bin/python" -m pip wheel -q "$ROOT" --no-build-isolation --no-deps -w "$tmp" \
    --config-settings=cmake.define.DDPRUN_DIST_TREE="$stage/ddprun-$VERSION" \
    --config-settings=build-dir="build-wheel/$arch" >&2
  local built
  built=$(ls "$tmp"/ddprun-"$VERSION"-py3-none-*.whl)
  if [ "${DIST_ALLOW_DYNAMIC:-0}" = 1 ]; then
    mv "$built" "$OUT/"
    say "$OUT/$(basename "$built") (dynamic development build: no manylinux tag)"
    return
  fi
  # The platform tag scikit-build-core computes is this interpreter's (linux_x86_64). The
  # binaries are static: they need a kernel only, and glibc 2.36's static code wants 3.2 or
  # newer ("for GNU/Linux 3.2.0"), which manylinux2014 (CentOS 7, kernel 3.10) guarantees and
  # manylinux1 (kernel 2.6.18), which auditwheel would allow from the symbols alone, does not.
  "$VENV/bin/wheel" tags --remove --platform-tag "$tag" "$built" >/dev/null
  # wheel sorts the tags (manylinux2014 first); the usual name, auditwheel's, has 2_17 first.
  local whl=ddprun-$VERSION-py3-none-$tag.whl
  mv "$tmp"/ddprun-"$VERSION"-py3-none-manylinux*.whl "$OUT/$whl"
  "$VENV/bin/twine" check --strict "$OUT/$whl" >&2
  "$VENV/bin/auditwheel" show "$OUT/$whl" > "$stage/auditwheel.txt" 2>&1 ||
    { cat "$stage/auditwheel.txt" >&2; die "auditwheel show $whl failed"; }
  local policy
  policy=$(tr -d '\n' < "$stage/auditwheel.txt" | sed -n 's/.*platform tag: *"manylinux_2_\([0-9]*\)_.*/\1/p')
  if [ -z "$policy" ] || [ "$policy" -gt 17 ] ||
      ! grep -q "requires no external shared libraries" "$stage/auditwheel.txt"; then
    cat "$stage/auditwheel.txt" >&2
    die "auditwheel does not find $whl within manylinux_2_17 with no external library"
  fi
  say "$OUT/$whl ($(du -k "$OUT/$whl" | cut -f1) KiB); auditwheel show: manylinux_2_$policy, no external library"
}

main() {
  local arches
  if [ -n "${DIST_ARCHES:-}" ]; then
    read -r -a arches <<< "$DIST_ARCHES"  # x86_64 first: the aarch64 tree is made from it
  else
    arches=(x86_64)
    if has_preset aarch64; then
      arches+=(aarch64)
    else
      say "CMakePresets.json has no aarch64 preset: x86_64 release files only, none for aarch64"
    fi
  fi
  dist_venv
  # Only this run's files: an architecture that fails leaves none of an earlier run behind.
  rm -rf "$OUT"
  mkdir -p "$OUT"
  local arch build stage
  for arch in "${arches[@]}"; do
    say "== $arch"
    build=$(build_arch "$arch")
    stage=$ROOT/build-dist/$arch
    stage_tree "$arch" "$build" "$stage"
    tarballs "$arch" "$stage"
    make_wheel "$arch" "$stage"
  done
  # ddp-train for PyPI's torch 2.11 (x86_64: the torch venv's LibTorch is that architecture's).
  if [ "${DIST_TRAIN_WHEEL:-1}" = 1 ]; then
    say "== ddprun_train (ddp-train against LibTorch 2.11)"
    DDPRUN_DIST_VENV="$VENV" "$ROOT/scripts/make-train-wheel.sh" "$OUT" >&2
  fi
  say "release $VERSION in $OUT:"
  ls -l "$OUT"
}

main "$@"
