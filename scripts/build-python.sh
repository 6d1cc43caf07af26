#!/usr/bin/env bash
# Builds the executorch_numpy_runtime package for the Python interpreter given (any CPython 3.9+ with numpy),
# into $ETNP_BUILD_DIR (default build-py)/python, importable with PYTHONPATH=<that folder>.
#   ./scripts/build-python.sh /path/to/python
# pybind11 comes from that interpreter's environment when it has one (`python -m pybind11`: a venv's pybind11
# knows its numpy 2), else from Debian's pybind11-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:?usage: $0 PYTHON}"
args=(-DETNP_BUILD_TESTS=OFF -DETNP_BUILD_PYTHON=ON)
if pybind11_dir=$("$python" -m pybind11 --cmakedir 2>/dev/null); then
  args+=("-Dpybind11_DIR=$pybind11_dir")
fi
build_dir="${ETNP_BUILD_DIR:-build-py}"
cmake -S . -B "$build_dir" -G Ninja -DPython3_EXECUTABLE="$python" -DCMAKE_BUILD_TYPE="${ETNP_BUILD_TYPE:-Release}" \
  "${args[@]}" >/dev/null
ninja -C "$build_dir" -j"${ETNP_JOBS:-$(nproc)}" etnp_python_ext
