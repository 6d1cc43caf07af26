#!/usr/bin/env bash
# Installs the Debian packages etnp builds with (the main job: scripts/quickstart.sh) and, with --test, those
# its tests need as well (scripts/test.sh). Runs apt-get only for what is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  flatbuffers-compiler libflatbuffers-dev
  libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libfp16-dev libsleef-dev nlohmann-json3-dev
  pybind11-dev python3-dev python3-numpy
  systemtap-sdt-dev  # <sys/sdt.h>: the USDT probes (docs/tracing.md)
  libpcre2-dev libutf8proc-dev libsentencepiece-dev  # the tokenizers (docs/tokenizers.md)
)
if [ "${1:-}" = "--test" ]; then
  packages+=(python3-pytest python3-venv libgtest-dev libbenchmark-dev libssl-dev
             bpftrace)  # traces the USDT probes (tests/usdt/trace_probes.py; skipped where tracing is not allowed)
  # clang and its sanitizer/libFuzzer runtime for the fuzz targets (scripts/fuzz.sh): Debian 12 has 14, 13 has 19.
  case "$(cut -d. -f1 /etc/debian_version 2>/dev/null)" in
    12) packages+=(clang-14 libclang-rt-14-dev) ;;
    13) packages+=(clang-19 libclang-rt-19-dev) ;;
    *) echo "install-deps: not Debian 12 or 13: install clang and its runtime yourself for scripts/fuzz.sh" >&2 ;;
  esac
fi
# torch, the official ExecuTorch and the other oracles are not Debian packages here: the tests and benchmarks
# take them from the dev venv (scripts/dev-venv.sh, requirements-dev.txt), never the runtime.

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Without the packages' Recommends: with them the list reaches about 1,100 packages on Debian 12 and 13 (Qt
  # among them), none of which etnp uses; without them about 200 (`apt-cache depends --recurse`).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
