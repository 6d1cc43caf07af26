#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan; CMake option ETNP_BUILD_FUZZERS) into build-fuzz
# and runs each for a bounded time on its saved corpus, failing on any crash, leak, timeout or sanitizer report.
#   ETNP_FUZZ_TIME=60            seconds per target (libFuzzer -max_total_time)
#   ETNP_FUZZ_TARGETS="a b"      the targets to run (default: all of fuzz/CMakeLists.txt)
#   ETNP_FUZZ_CORPUS=DIR         the corpora, one folder per target (default ~/.cache/etnp/fuzz-corpus), kept
#                                between runs; seeded from the fixtures and writer-made files (fuzz_seeds)
#   ETNP_FUZZ_JOBS=2             build parallelism
#   ETNP_FUZZ_NEW=fail|report    what a crash that this run's search finds does (default fail). Every input of
#                                the corpus and the seeds is replayed first, and a crash there always fails: that
#                                is a regression. With report (scripts/test.sh, and so CI) a new finding is
#                                printed and its input kept in $ETNP_FUZZ_FINDINGS (default
#                                ~/.cache/etnp/fuzz-findings/<target>/) to become a regression test, and the run
#                                goes on: a gate on what a random search reached in its minute would block work
#                                that did not cause it.
# A crash leaves its input in build-fuzz/findings/<target>/ (reproduce: build-fuzz/fuzz/<target> FILE).
# Without clang the run is skipped with a message, except under CI=true, where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
fixtures="${ETNP_FIXTURES:-$PWD/../shared/fixtures}"
corpus_root="${ETNP_FUZZ_CORPUS:-$HOME/.cache/etnp/fuzz-corpus}"
seconds="${ETNP_FUZZ_TIME:-60}"
new_findings="${ETNP_FUZZ_NEW:-fail}"
findings_root="${ETNP_FUZZ_FINDINGS:-$HOME/.cache/etnp/fuzz-findings}"
case "$new_findings" in fail|report) ;; *) echo "fuzz: ETNP_FUZZ_NEW must be fail or report, got '$new_findings'" >&2; exit 2 ;; esac

cc="" cxx=""
for v in 19 14 ""; do
  if command -v "clang++${v:+-$v}" >/dev/null; then cc="clang${v:+-$v}" cxx="clang++${v:+-$v}"; break; fi
done
if [ -z "$cxx" ]; then
  echo "fuzz: clang is not installed (scripts/install-deps.sh --test installs it): fuzz targets not run"
  [ "${CI:-}" = "true" ] && exit 1
  exit 0
fi

CC="$cc" CXX="$cxx" cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETNP_BUILD_FUZZERS=ON \
  -DETNP_BUILD_TESTS=OFF -DETNP_BUILD_PYTHON=OFF -DETNP_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz -j"${ETNP_JOBS:-${ETNP_FUZZ_JOBS:-2}}" etnp_fuzzers

targets="${ETNP_FUZZ_TARGETS:-$(sed -n 's/^etnp_fuzzer(\([a-z_]*\).*/\1/p' fuzz/CMakeLists.txt)}"
seeds=build-fuzz/fuzz-seeds
rm -rf "$seeds"
./build-fuzz/fuzz/fuzz_seeds "$fixtures" "$seeds"

# Sanitizer reports are fatal; leaks too (LeakSanitizer runs at each input's end under libFuzzer).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in $targets; do
  corpus="$corpus_root/$t"
  mkdir -p "$corpus" "build-fuzz/findings/$t"
  echo "=== $t: ${seconds}s, corpus $corpus"
  log="build-fuzz/findings/$t.log"
  # The targets load with small resource limits (fuzz/fuzz_util.h); -rss_limit_mb and -timeout are the backstop.
  limits=(-timeout=25 -rss_limit_mb=4096 -max_len=1048576 -artifact_prefix="build-fuzz/findings/$t/")
  if ! ./build-fuzz/fuzz/"$t" "$corpus" "$seeds/$t" -runs=0 "${limits[@]}" >"$log.replay" 2>&1; then
    status=1
    echo "fuzz: $t FAILED on an input of its corpus or seeds, a regression (log: $log.replay; input: build-fuzz/findings/$t/)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log.replay" | head -5 || true
    continue
  fi
  if ./build-fuzz/fuzz/"$t" "$corpus" "$seeds/$t" -max_total_time="$seconds" -print_final_stats=1 "${limits[@]}" \
       >"$log" 2>&1; then
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units)' "$log" | tail -2 || true
  elif [ "$new_findings" = "report" ]; then
    mkdir -p "$findings_root/$t"
    cp build-fuzz/findings/"$t"/* "$findings_root/$t/" 2>/dev/null || true
    cp "$log" "$findings_root/$t/$(date +%Y%m%d-%H%M%S).log"
    echo "fuzz: FINDING in $t, new in this run's search (reported, not failed: ETNP_FUZZ_NEW=report); input and log"
    echo "      kept in $findings_root/$t/ for a regression test"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 || true
  else
    status=1
    echo "fuzz: $t FAILED (log: $log; inputs: build-fuzz/findings/$t/)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 || true
  fi
done
exit $status
