#!/usr/bin/env bash
# Every test: installs what is missing, builds, and runs
#   1. the C++ suite (GoogleTest via ctest) and the Python suite (pytest) on a release build;
#   1b. the live exports: programs the official ExecuTorch exporter makes at test time, run by etnp and compared
#      with the official runtime (tests/live; the dev venv of scripts/dev-venv.sh holds torch and executorch),
#      and the Python package built for the venv's own Python, tested there beside the official runtime;
#   2. the C++ suite again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   2b. the Python package's wheel installed into a fresh venv with only numpy (tests/python/test_packaging.py);
#   3. the concurrency tests, C++ and Python, under ThreadSanitizer;
#   3b. an aarch64 cross build and its C++ suite under qemu (scripts/cross-arm64.sh), and the Python package's
#      aarch64 wheel with the Python suite on it under qemu (scripts/cross-arm64-python.sh);
#   4. the libFuzzer targets (fuzz/, scripts/fuzz.sh), about a minute each on their saved corpora.
# The end of the output names each step that failed, with the failing tests and sanitizer reports: CI keeps
# only the last lines of a run.
# Fixture-based tests read ../shared/fixtures (or $ETNP_FIXTURES) and skip with a message where it is absent.
# ETNP_TEST_QUICK=1 runs steps 1 and 1b only. ETNP_SKIP_LIVE=1 skips step 1b; where the venv cannot be made
# (offline) step 1b is skipped with the reason, except under CI=true, where that fails the run.
# ETNP_LIVE_RECORDS=FILE (exports made on another system, tests/live/live_env.py) runs step 1b's comparisons
# on those, without a venv (scripts/test-other-release.sh passes the host's exports so).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --test

status=0
failed_steps=()
current_step="set-up"
step() { current_step="$*"; echo; echo "=== $*"; }
failed() { status=1; failed_steps+=("$current_step"); }
# Everything printed is kept, so that the end of the run can list what failed: CI shows only the last lines.
run_log=$(mktemp)
trap 'rm -f "$run_log"' EXIT
exec > >(tee "$run_log") 2>&1

# The dev venv (torch and the official ExecuTorch, test oracles only): made here, so that the C++ suite's
# torch-oracle tests use its Python too (ETNP_TORCH_PYTHON).
venv_rc=0
venv=""
if [ "${ETNP_SKIP_LIVE:-0}" != "1" ] && [ -z "${ETNP_LIVE_RECORDS:-}" ]; then
  venv=$(./scripts/dev-venv.sh) || venv_rc=$?
  [ $venv_rc -eq 0 ] && export ETNP_TORCH_PYTHON="$venv/bin/python"
fi

step "release build"
# Explicit options: a build/ configured by quickstart.sh (tests off) keeps its cached settings otherwise.
ETNP_BUILD_DIR=build ./scripts/build.sh -DETNP_BUILD_TESTS=ON -DETNP_BUILD_PYTHON=ON
step "C++ tests (release)"
ctest --test-dir build --output-on-failure || failed
step "Python tests (release)"
if [ -d tests/python ]; then
  PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider || failed
fi

step "live exports: etnp beside the official ExecuTorch runtime"
if [ "${ETNP_SKIP_LIVE:-0}" = "1" ]; then
  echo "skipped: ETNP_SKIP_LIVE=1"
elif [ -n "${ETNP_LIVE_RECORDS:-}" ]; then
  echo "the $(grep -c . "$ETNP_LIVE_RECORDS") exports listed in ETNP_LIVE_RECORDS ($ETNP_LIVE_RECORDS), made elsewhere"
  PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest tests/live -q -p no:cacheprovider || failed
else
  if [ $venv_rc -ne 0 ]; then
    echo "the dev venv could not be made (scripts/dev-venv.sh exit $venv_rc): live exports not tested"
    [ "${CI:-}" = "true" ] && failed
  else
    # Export what the cache lacks first, showing progress (the tests would do it too, silently).
    { "$venv/bin/python" tests/live/export.py 2>&1 >/dev/null | grep -E '^(exported|official) '; } || true
    PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest tests/live -q -p no:cacheprovider || failed
    step "Python package built for the dev venv's Python (numpy 2), tested there beside the official runtime"
    ETNP_BUILD_DIR=build-venv ./scripts/build-python.sh "$venv/bin/python"
    # Two runs: each folder's conftest.py is imported as "conftest", and its tests import from it.
    ETNP_PYTHON_DIR="$PWD/build-venv/python" "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider \
      || failed
    ETNP_PYTHON_DIR="$PWD/build-venv/python" "$venv/bin/python" -m pytest tests/live/test_same_process.py -q \
      -p no:cacheprovider || failed
  fi
fi

if [ "${ETNP_TEST_QUICK:-0}" != "1" ]; then
  step "Python package: pip wheel ., installed into a fresh venv with only numpy; quick start and etnp there"
  # A build of the wheel (scikit-build-core, without build isolation: the dev venv's scikit-build-core and
  # pybind11), so not in the quick run: about 14 minutes of CPU cold, 7 or more on 2 idle cores. Its CMake
  # folder is build-wheel/, beside build-venv/, and its compilers are the ones CMake picks there (cc, c++; without
  # CC and CXX scikit-build-core would take the interpreter's gcc and g++), so that ccache serves the objects the
  # two share. Without the dev venv the test skips, and fails under CI=true.
  tools=()
  [ -n "$venv" ] && [ $venv_rc -eq 0 ] && tools=(ETNP_BUILD_TOOLS_PYTHON="$venv/bin/python")
  env "${tools[@]}" CC=cc CXX=c++ ETNP_TEST_PIP_INSTALL=1 ETNP_PKG_BUILD_DIR="$PWD/build-wheel" PYTHONPATH="$PWD/build/python" \
    /usr/bin/python3 -m pytest \
    tests/python/test_packaging.py -q -p no:cacheprovider || failed

  step "ASan + UBSan build"
  ETNP_BUILD_DIR=build-asan ETNP_BUILD_TYPE=RelWithDebInfo ./scripts/build.sh \
    -DETNP_SANITIZE=address,undefined -DETNP_BUILD_PYTHON=OFF
  step "C++ tests (ASan + UBSan)"
  # The 512 MiB-output fixture is left to the release run: ASan's shadow memory would triple it.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ./build-asan/tests/etnp_tests --gtest_filter='-*djl_med_output*' || failed

  step "TSan build"
  ETNP_BUILD_DIR=build-tsan ETNP_BUILD_TYPE=RelWithDebInfo ./scripts/build.sh \
    -DETNP_SANITIZE=thread -DETNP_BUILD_PYTHON=ON
  step "Concurrency tests (TSan)"
  # The contract's tests and the stress harness (Concurrency.Stress*, short here: ETNP_STRESS_SECONDS makes it
  # long), with the kernels that split one product across a pool's threads (the 4-bit GEMM's test checks the
  # bits, as does the batch matrix multiply's split by product; the depthwise + 1x1 bands, by rows, theirs and
  # the delegate step's) and a tokenizer shared by threads.
  TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/etnp_tests \
    --gtest_filter='Concurrency*:ThreadPool.*:Int4Gemm.SplitAcrossThreads*:TokenizerTest.SharedAcrossThreads:*XnnpackWorkspace*:XnnpackWeightCache.*:XnnpackKernels.BatchMatmulSplits*:DepthwiseConv.ThenPointwise*:XnnpackBackend.DepthwiseThenPointwise*' || failed
  step "Python thread tests (TSan)"
  # The extension is instrumented, the interpreter and numpy are not: TSan's runtime is preloaded so that it
  # sees every thread and the locks (the GIL is a pthread mutex and condition variable).
  LD_PRELOAD="$(gcc -print-file-name=libtsan.so)" TSAN_OPTIONS=halt_on_error=1 \
    ETNP_PYTHON_DIR="$PWD/build-tsan/python" /usr/bin/python3 -m pytest tests/python/test_threads.py \
    tests/python/test_stress.py -q -p no:cacheprovider \
    || failed

  step "aarch64: cross build, C++ suite under qemu-aarch64 -cpu max"
  # scripts/cross-arm64.sh: Debian's cross compiler and arm64 packages unpacked into a sysroot
  # (~/.cache/etnp/arm64-sysroot); the cold build about 10 minutes of CPU, the emulated suite about 2 minutes.
  ./scripts/cross-arm64.sh || failed

  step "aarch64: the Python package's wheel, cross-built; the Python suite on it under qemu-aarch64 -cpu max"
  # scripts/cross-arm64-python.sh: pip wheel . with the aarch64 toolchain (build-arm64-wheel/, linux_aarch64),
  # repaired by auditwheel (manylinux_2_34_aarch64), installed into a folder and tested by Debian's arm64 Python
  # and numpy of the sysroot (unpacked there on first use: about 40 packages). The cold wheel build about 15
  # minutes on 2 shared cores (incremental after), the emulated suite about 7 minutes (1938 tests).
  tools=()
  [ -n "$venv" ] && [ $venv_rc -eq 0 ] && tools=(ETNP_BUILD_TOOLS_PYTHON="$venv/bin/python")
  env "${tools[@]}" ./scripts/cross-arm64-python.sh || failed

  step "Fuzz targets (libFuzzer, ASan + UBSan)"
  # Adds a sanitized clang build of the library into build-fuzz (about 90 compiles: well over 25 minutes cold
  # on 2 shared cores, then incremental) and ETNP_FUZZ_TIME seconds per target (60 by default: 9 targets,
  # about 10 minutes). Skipped where clang is missing, but not under CI=true.
  ETNP_FUZZ_NEW=report ./scripts/fuzz.sh || failed
fi

if [ $status -ne 0 ]; then
  echo; echo "=== FAILED: ${#failed_steps[@]} step(s)"
  printf '  %s\n' "${failed_steps[@]}"
  # The failing tests' lines of pytest (-q prints "FAILED id - reason") and GoogleTest, and sanitizer reports.
  grep -E '^(FAILED |ERROR |[0-9]+ failed|\[  FAILED  \] [A-Za-z]|SUMMARY: |WARNING: ThreadSanitizer|==[0-9]+==ERROR|fuzz: .* FAILED)' "$run_log" | sort -u | head -40 || true
else
  echo; echo "=== every step passed"
fi
exit $status
