#!/usr/bin/env bash
# Builds etnp for 64-bit Arm Linux (aarch64) on this x86-64 Debian machine and runs its C++ suite under
# qemu-aarch64 with -cpu max (NEON, dotprod, i8mm and SVE available), the fixture conformance included.
#   ./scripts/cross-arm64.sh              install what is missing, make the sysroot, build, run the suite
#   ./scripts/cross-arm64.sh --build-only
#   ./scripts/cross-arm64.sh --sysroot-only   the host packages and the sysroot only (scripts/cross-arm64-python.sh)
#   ETNP_ARM64_FILTER='...'               a GoogleTest filter for the emulated run (default: every test)
#   ETNP_ARM64_SYSROOT=DIR                the sysroot (default ~/.cache/etnp/arm64-sysroot)
#   ETNP_ARM64_BUILD_DIR=DIR              the build folder (default build-arm64)
#
# What it uses, all from Debian: crossbuild-essential-arm64 (the cross GCC, its C library and libstdc++) and
# qemu-user-static on the host; the arm64 packages of etnp's dependencies (XNNPACK, pthreadpool, cpuinfo, Sleef,
# FlatBuffers, SentencePiece, PCRE2, utf8proc, GoogleTest, OpenSSL) with everything they depend on, downloaded
# and unpacked into the sysroot, not installed: several of them cannot be installed beside their amd64 twins
# (no Multi-Arch: same), and the host's build needs those. cmake/toolchain-aarch64.cmake points CMake there.
#
# The emulated tests start no aarch64 child process (the torch oracles' Python is the host's), so qemu runs the
# test binary directly: no binfmt_misc registration, nothing changed on the host beyond the packages above.
set -euo pipefail
cd "$(dirname "$0")/.."
sysroot="${ETNP_ARM64_SYSROOT:-$HOME/.cache/etnp/arm64-sysroot}"
build_dir="${ETNP_ARM64_BUILD_DIR:-build-arm64}"
SUDO=""
[ "$(id -u)" = "0" ] || SUDO="sudo"
log() { echo "cross-arm64: $*" >&2; }

# --- host packages -----------------------------------------------------------------------------------------
host_packages=(crossbuild-essential-arm64 qemu-user-static)
missing=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
update=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  log "adding the arm64 architecture to dpkg (to download arm64 packages; none is installed)"
  $SUDO dpkg --add-architecture arm64
  update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $update = 1 ]; then
  $SUDO apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the sysroot: the arm64 packages, with all they depend on, unpacked ---------------------------------------
arm64_packages=(libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libfp16-dev libsleef-dev libflatbuffers-dev
                libsentencepiece-dev libpcre2-dev libutf8proc-dev systemtap-sdt-dev libgtest-dev libssl-dev)
# apt's solution for installing them lists every arm64 package they need (with its version), libc6 included;
# architecture-independent ones (nlohmann-json3-dev, pybind11-dev) are the host's.
closure=$(apt-get install -s --no-install-recommends "${arm64_packages[@]/%/:arm64}" 2>/dev/null |
          sed -n 's/^Inst \([^ ]*:arm64\) (\([^ ]*\) .*/\1=\2/p' | sort)
if [ -z "$closure" ]; then
  log "apt found no arm64 packages to unpack (is the arm64 architecture's package list there? apt-get update)"
  exit 1
fi
key=$(echo "$closure" | sha256sum | cut -c1-16)
if [ "$(cat "$sysroot/.etnp-stamp" 2>/dev/null)" != "$key" ]; then
  log "unpacking $(echo "$closure" | wc -l) arm64 packages into $sysroot"
  rm -rf "$sysroot" "$sysroot.debs"
  mkdir -p "$sysroot" "$sysroot.debs"
  (cd "$sysroot.debs" && apt-get download -qq $closure)
  for deb in "$sysroot.debs"/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  rm -rf "$sysroot.debs"
  # Debian 13's packages put everything under /usr (merged /usr): the loader is still named /lib/ld-linux-....
  [ -e "$sysroot/lib" ] || ln -s usr/lib "$sysroot/lib"
  # Absolute links (libfoo.so -> /lib/aarch64-linux-gnu/libfoo.so.1) would point into the host: made relative.
  find "$sysroot" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$sysroot$target")" "$link"
  done
  echo "$key" >"$sysroot/.etnp-stamp"
fi
[ "${1:-}" = "--sysroot-only" ] && exit 0

# --- build -------------------------------------------------------------------------------------------------
ETNP_ARM64_SYSROOT="$sysroot" cmake -S . -B "$build_dir" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
  -DETNP_ARM64_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE="${ETNP_BUILD_TYPE:-Release}" \
  -DETNP_BUILD_TESTS=ON -DETNP_BUILD_PYTHON=OFF -DETNP_BUILD_BENCH=OFF >/dev/null
ninja -C "$build_dir" -j"${ETNP_JOBS:-$(nproc)}" etnp_tests etnp_cli
readelf -h "$build_dir/tests/etnp_tests" | sed -n "s/^ *Machine: *//p"  # binutils, which the cross compiler brings
[ "${1:-}" = "--build-only" ] && exit 0

# --- run under qemu ----------------------------------------------------------------------------------------
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
filter="${ETNP_ARM64_FILTER:-*}"
log "running the C++ suite under $qemu -cpu max (filter: $filter)"
ETNP_FIXTURES="${ETNP_FIXTURES:-$PWD/../shared/fixtures}" \
  "$qemu" -cpu max -L "$sysroot" "$build_dir/tests/etnp_tests" --gtest_filter="$filter"
