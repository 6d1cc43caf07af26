#!/bin/sh
# Builds the current XNNPACK from source (its production microkernels only) and the same-machine reference
# driver against it. Nothing here is part of etnp's build: it only serves bench/run_benchmarks.py
# --xnnpack-reference.
#
#   bench/xnnpack_reference/build.sh XNNPACK_SRC CPUINFO_SRC PTHREADPOOL_SRC FXDIV_SRC [BUILD_DIR]
#
# The four sources are checkouts of github.com/google/XNNPACK, pytorch/cpuinfo, google/pthreadpool and
# Maratyszcza/FXdiv (XNNPACK's CMake would otherwise download the last three). Needs cmake, ninja, a C++17
# compiler and libgtest-dev (XNNPACK's model definitions use its seeded random device). Prints the driver's path.
set -eu
if [ $# -lt 4 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
xnnpack=$(cd "$1" && pwd)
cpuinfo=$(cd "$2" && pwd)
pthreadpool=$(cd "$3" && pwd)
fxdiv=$(cd "$4" && pwd)
build=${5:-build-xnnpack-reference}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build"
build=$(cd "$build" && pwd)

cmake -S "$xnnpack" -B "$build/xnnpack" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DXNNPACK_BUILD_TESTS=OFF -DXNNPACK_BUILD_BENCHMARKS=OFF -DXNNPACK_BUILD_ALL_MICROKERNELS=OFF \
  -DXNNPACK_ENABLE_KLEIDIAI=OFF -DCPUINFO_SOURCE_DIR="$cpuinfo" -DPTHREADPOOL_SOURCE_DIR="$pthreadpool" \
  -DFXDIV_SOURCE_DIR="$fxdiv" -DPython_EXECUTABLE=/usr/bin/python3 >&2
cmake --build "$build/xnnpack" --target XNNPACK >&2

${CXX:-c++} -O2 -std=c++17 -I"$xnnpack" -I"$xnnpack/include" -I"$xnnpack/src" -I"$pthreadpool/include" \
  -I"$cpuinfo/include" "$here/xnnpack_reference.cc" "$xnnpack/bench/subgraph/fp32-mobilenet-v2.cc" \
  "$xnnpack/bench/subgraph/qs8-mobilenet-v2.cc" -o "$build/xnnpack_reference" \
  -Wl,--start-group "$build/xnnpack/libXNNPACK.a" "$build"/xnnpack/libxnnpack-*.a \
  "$build/xnnpack/cpuinfo/libcpuinfo.a" "$build/xnnpack/pthreadpool/libpthreadpool.a" -Wl,--end-group \
  -lgtest -lpthread -lm
echo "$build/xnnpack_reference"
