#!/usr/bin/env bash
# Configures and builds etnp into build/ (or $ETNP_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${ETNP_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 -DCMAKE_BUILD_TYPE="${ETNP_BUILD_TYPE:-Release}" "$@" >/dev/null
ninja -C "$build_dir" -j"${ETNP_JOBS:-$(nproc)}"
