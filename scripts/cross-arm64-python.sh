#!/usr/bin/env bash
# Builds the executorch_numpy_runtime wheel for 64-bit Arm Linux (aarch64) on this x86-64 Debian machine
# (`pip wheel .` with scikit-build-core, cross-compiled) and runs the Python suite on it under qemu-aarch64 with
# Debian's arm64 Python and numpy: the wheel installed into a folder, imported by the emulated interpreter.
#   ./scripts/cross-arm64-python.sh               make what is missing, build the wheel, run the suite
#   ./scripts/cross-arm64-python.sh --build-only  the wheel only (printed: its path, build-arm64-wheel/dist/...)
#   ETNP_ARM64_PYTEST_ARGS='-k ...'               more pytest arguments for the emulated run
#   ETNP_ARM64_SYSROOT=DIR                        the sysroot (default ~/.cache/etnp/arm64-sysroot)
#   ETNP_ARM64_WHEEL_DIR=DIR                      the build folder (default build-arm64-wheel)
#   ETNP_BUILD_TOOLS_PYTHON=PYTHON                a Python with scikit-build-core and pybind11 (default: the dev
#                                                 venv's, scripts/dev-venv.sh; requirements-dev.txt pins them);
#                                                 without one the script skips (exit 0), except under CI=true
#
# The sysroot is scripts/cross-arm64.sh's, with a Python layer added: Debian's arm64 python3 (the release's
# default Python, the same version as the host's /usr/bin/python3), libpython3-dev (the headers the extension is
# compiled against) and python3-numpy, with what they need, and pytest with its pure-Python dependencies
# (Architecture: all), all unpacked, none installed. The layer has its own stamp: when the C++ sysroot is
# remade (its package list changed) the layer is unpacked again.
#
# The wheel: pip wheel . --no-build-isolation with the build tools' Python, CMake given
# cmake/toolchain-aarch64.cmake, the arm64 headers (Python3_INCLUDE_DIR), pybind11 told it cross-compiles
# (PYBIND11_USE_CROSSCOMPILING: no interpreter is run for the extension suffix), SETUPTOOLS_EXT_SUFFIX
# (.cpython-3XX-aarch64-linux-gnu.so) and _PYTHON_HOST_PLATFORM=linux-aarch64 (the wheel's tag, linux_aarch64).
# The CMake folder is kept (build-arm64-wheel/cmake): a rebuild is incremental. auditwheel repair (the build
# tools' auditwheel and patchelf, the libraries looked up in the sysroot) then vendors the arm64 libraries it
# links: build-arm64-wheel/dist/repaired/...-manylinux_2_34_aarch64.whl on Debian 12, the wheel that is tested.
#
# The emulated suite: no binfmt_misc registration (nothing changed on the host). Where the tests start a
# process of the target (sys.executable, the etnp binary), the path they are given is a shell script that runs
# it under qemu: the interpreter is started as build-arm64-wheel/emu/python3 (qemu's -0 sets its argv[0], so
# sys.executable names the script), and $ETNP_BUILD_DIR/etnp runs the wheel's etnp binary. Host programs
# (flatc, bash, zsh) run natively.
set -euo pipefail
cd "$(dirname "$0")/.."
sysroot="${ETNP_ARM64_SYSROOT:-$HOME/.cache/etnp/arm64-sysroot}"
out="${ETNP_ARM64_WHEEL_DIR:-build-arm64-wheel}"
out="$(mkdir -p "$out" && cd "$out" && pwd)"
log() { echo "cross-arm64-python: $*" >&2; }

# --- the sysroot and its Python layer ------------------------------------------------------------------------
ETNP_ARM64_SYSROOT="$sysroot" ./scripts/cross-arm64.sh --sysroot-only
simulate() { apt-get install -s --no-install-recommends "$@" 2>/dev/null |
             sed -n 's/^Inst \([^ ]*:arm64\) (\([^ ]*\) .*/\1=\2/p' | sort; }
# The arm64 packages the C++ sysroot lacks (the same list as cross-arm64.sh's gives the packages already there).
base=$(simulate libxnnpack-dev:arm64 libpthreadpool-dev:arm64 libcpuinfo-dev:arm64 libfp16-dev:arm64 \
                libsleef-dev:arm64 libflatbuffers-dev:arm64 libsentencepiece-dev:arm64 libpcre2-dev:arm64 \
                libutf8proc-dev:arm64 systemtap-sdt-dev:arm64 libgtest-dev:arm64 libssl-dev:arm64)
layer=$(comm -13 <(echo "$base") <(simulate python3:arm64 libpython3-dev:arm64 python3-numpy:arm64))
# pytest and its dependencies are Architecture: all, which apt counts as installed with the host's: each
# python3-* package of pytest's dependency tree, at its candidate version.
for p in $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
             --no-enhances python3-pytest 2>/dev/null | grep '^python3-' | sort -u); do
  fields=$(apt-cache show --no-all-versions "$p" 2>/dev/null | sed -n 's/^Architecture: //p; s/^Version: //p' | tr '\n' ' ')
  case "$fields" in *" all "*|"all "*) layer+=$'\n'"$p=${fields%% *}";; esac
done
if [ -z "$(echo "$layer" | grep '^python3:arm64=')" ] || [ -z "$(echo "$layer" | grep '^python3-pytest=')" ]; then
  log "apt found no arm64 python3 or no python3-pytest to unpack (apt-get update?)"
  exit 1
fi
key=$( (cat "$sysroot/.etnp-stamp"; echo "$layer") | sha256sum | cut -c1-16)
if [ "$(cat "$sysroot/.etnp-python-stamp" 2>/dev/null)" != "$key" ]; then
  log "unpacking $(echo "$layer" | wc -l) arm64 Python packages into $sysroot"
  rm -rf "$sysroot.pydebs"
  mkdir -p "$sysroot.pydebs"
  (cd "$sysroot.pydebs" && apt-get download -qq $layer)
  for deb in "$sysroot.pydebs"/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  rm -rf "$sysroot.pydebs"
  find "$sysroot" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$sysroot$target")" "$link"
  done
  # BLAS and LAPACK (numpy's) are chosen by update-alternatives when installed: the reference ones here.
  for lib in blas/libblas.so.3 lapack/liblapack.so.3; do
    [ -e "$sysroot/usr/lib/aarch64-linux-gnu/${lib#*/}" ] || ln -sfn "$lib" "$sysroot/usr/lib/aarch64-linux-gnu/${lib#*/}"
  done
  echo "$key" >"$sysroot/.etnp-python-stamp"
fi
pyver=$(readlink "$sysroot/usr/bin/python3")   # python3.11 (Debian 12), python3.13 (Debian 13)
pyver=${pyver#python}
suffix=".cpython-${pyver/./}-aarch64-linux-gnu.so"
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)

# --- the wheel -----------------------------------------------------------------------------------------------
tools="${ETNP_BUILD_TOOLS_PYTHON:-}"
if [ -z "$tools" ]; then
  venv=$(./scripts/dev-venv.sh --check 2>/dev/null) || venv=""
  [ -n "$venv" ] && tools="$venv/bin/python"
fi
if [ -z "$tools" ] || ! "$tools" -c "import scikit_build_core, pybind11" 2>/dev/null; then
  # As tests/python/test_packaging.py: skipped where the build tools cannot be had, but not under CI=true.
  log "no Python with scikit-build-core and pybind11 (set ETNP_BUILD_TOOLS_PYTHON or make the dev venv):" \
      "$([ "${CI:-}" = "true" ] && echo "failed (CI=true)" || echo "skipped")"
  [ "${CI:-}" = "true" ] && exit 1
  exit 0
fi
rm -rf "$out/dist"
jobs="${ETNP_JOBS:-$(nproc)}"
# The pybind11 of the build tools: the one requirements-dev.txt pins (numpy 2's layout understood).
ETNP_ARM64_SYSROOT="$sysroot" SETUPTOOLS_EXT_SUFFIX="$suffix" _PYTHON_HOST_PLATFORM=linux-aarch64 \
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
  "$tools" -m pip wheel . --no-build-isolation --no-deps -q -w "$out/dist" \
  -C build-dir="$out/cmake" \
  -C cmake.toolchain-file=cmake/toolchain-aarch64.cmake \
  -C cmake.define.ETNP_ARM64_SYSROOT="$sysroot" \
  -C cmake.define.PYBIND11_USE_CROSSCOMPILING=ON \
  -C cmake.define.Python3_INCLUDE_DIR="$sysroot/usr/include/python$pyver" \
  -C cmake.define.Python_INCLUDE_DIR="$sysroot/usr/include/python$pyver" \
  -C cmake.define.pybind11_DIR="$("$tools" -m pybind11 --cmakedir)"
wheel=$(ls "$out"/dist/executorch_numpy_runtime-*-linux_aarch64.whl)
# The extension and the CLI must be aarch64 code.
rm -rf "$out/check" && mkdir -p "$out/check"
(cd "$out/check" && "$tools" -m zipfile -e "$wheel" .)
for f in "$out"/check/executorch_numpy_runtime/_C"$suffix" "$out"/check/executorch_numpy_runtime/bin/etnp; do
  machine=$(readelf -h "$f" 2>/dev/null | sed -n 's/^ *Machine: *//p')  # binutils: file(1) may be absent
  [ "$machine" = "AArch64" ] || { log "$f is not aarch64 code (ELF machine: '${machine:-not ELF}')"; exit 1; }
done
log "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
# auditwheel repair, as for the x86-64 wheel (docs/python.md): the arm64 libraries it links (XNNPACK, cpuinfo,
# ...) looked up in the sysroot (--ldpaths), copied into executorch_numpy_runtime.libs/, and a manylinux tag
# from the symbol versions used. The repaired wheel is the one tested: the copies are renamed, so it runs on them.
if "$tools" -c "import auditwheel" 2>/dev/null; then
  if ! repair_log=$(PATH="$(dirname "$tools"):$PATH" "$tools" -m auditwheel repair -w "$out/dist/repaired" \
                      --ldpaths "$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu" "$wheel" 2>&1); then
    echo "$repair_log" >&2
    exit 1
  fi
  wheel=$(ls "$out"/dist/repaired/executorch_numpy_runtime-*-manylinux_2_*_aarch64.whl)
  log "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
elif [ "${CI:-}" = "true" ]; then
  log "$tools has no auditwheel (requirements-dev.txt pins it): the repaired wheel is not tested (CI=true: failed)"
  exit 1
fi
[ "${1:-}" = "--build-only" ] && { echo "$wheel"; exit 0; }

# --- the suite under qemu ------------------------------------------------------------------------------------
site="$out/site"
rm -rf "$site" && mkdir -p "$site"
# Installed as pip installs it (file modes kept: bin/etnp stays executable), for the target's Python.
plat=${wheel##*-}
"$tools" -m pip install -q --no-deps --target "$site" --platform "${plat%.whl}" --only-binary=:all: \
  --python-version "$pyver" --implementation cp "$wheel"
mkdir -p "$out/emu"
cat >"$out/emu/python3" <<EOF
#!/bin/sh
# Debian's arm64 Python of the sysroot under qemu; argv[0] (so sys.executable) is this script.
PYTHONHOME="$sysroot/usr" PYTHONNOUSERSITE=1 exec "$qemu" -cpu max -L "$sysroot" -0 "\$0" "$sysroot/usr/bin/python$pyver" "\$@"
EOF
cat >"$out/emu/etnp" <<EOF
#!/bin/sh
# The wheel's etnp binary under qemu.
exec "$qemu" -cpu max -L "$sysroot" "$site/executorch_numpy_runtime/bin/etnp" "\$@"
EOF
chmod +x "$out/emu/python3" "$out/emu/etnp"
log "running the Python suite under $qemu -cpu max with Debian's arm64 Python $pyver"
# ETNP_PYTHON_DIR: the installed wheel, first on sys.path. ETNP_BUILD_DIR: the folder of the etnp the CLI tests
# run (emu/etnp); no CMake build there, so test_cmake_package.py (the C++ package of a host build) skips.
# ETNP_TORCH_PYTHON is the host's Python: unset (test_numpy_abi.py looks for an arm64 Python with numpy 2).
env -u ETNP_TORCH_PYTHON -u PYTHONPATH ETNP_PYTHON_DIR="$site" ETNP_BUILD_DIR="$out/emu" \
  ETNP_FIXTURES="${ETNP_FIXTURES:-$PWD/../shared/fixtures}" \
  "$out/emu/python3" -m pytest tests/python -q -rfEs -p no:cacheprovider ${ETNP_ARM64_PYTEST_ARGS:-}
