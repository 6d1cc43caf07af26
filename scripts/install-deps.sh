#!/usr/bin/env bash
# Installs the Debian packages etnp builds and tests with. Runs apt-get only for what is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  flatbuffers-compiler libflatbuffers-dev
  libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libsleef-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-venv
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libssl-dev
)
# Test-only oracle and benchmark baseline (never a runtime dependency).
if [ "${ETNP_WITH_TORCH:-1}" = "1" ]; then
  packages+=(python3-torch python3-torchvision)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
