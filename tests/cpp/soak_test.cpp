// Soak (issue 18 item 4): every fixture program run many times, and load/unload cycles of the ones with
// delegates or .ptd data, with the resident set sampled: after a warm-up it must stay flat, and the outputs
// must still match the official runtime's at the end. Under AddressSanitizer, LeakSanitizer checks at exit
// that nothing leaked (scripts/test.sh runs this binary so); the RSS check is left out there, since ASan's
// quarantine holds freed memory on purpose.
//
// Short by default (CI); the long run of docs/security.md sets
//   ETNP_SOAK_ITERATIONS=10000 ETNP_SOAK_CYCLES=1000 ETNP_SOAK_SECONDS=0 ETNP_SOAK_REPORT=FILE
// (ETNP_SOAK_SECONDS bounds each program's time, 0 = none; ETNP_SOAK_REPORT appends one line per program).
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures.h"

#if defined(__SANITIZE_ADDRESS__)
#define ETNP_SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ETNP_SOAK_ASAN 1
#endif
#endif

namespace etnp::testing {
namespace {

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::strtod(v, nullptr);
}

// The resident set after glibc gives back the free memory it keeps (malloc_trim): what is live, less the
// allocator's own high-water marks, which move during a big program's first load/unload cycles.
uint64_t resident_bytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Growth of the resident set allowed after warm-up: allocator noise (a page here, a thread's arena there), 1 MiB
// plus 1% of the set, not a leak. A leak of 100 bytes per run passes it in the short run; LeakSanitizer sees
// every byte.
// (Unused where ASan builds skip the check.)
[[maybe_unused]] uint64_t rss_slack(uint64_t resident) { return (uint64_t{1} << 20) + resident / 100; }

struct Budget {
  int64_t iterations;
  double seconds;  // 0: none
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool spent(int64_t done) const {
    if (done >= iterations) return true;
    return seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds;
  }
};

void report(const std::string& line) {
  const char* path = std::getenv("ETNP_SOAK_REPORT");
  if (path == nullptr || *path == '\0') return;
  std::ofstream(path, std::ios::app) << line << "\n";
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// The program entries the soak runs: those that load and have cases this build can run.
bool soaked(const nlohmann::json& entry) {
  if (entry["kind"] != "program" || entry["expect"].is_object() || !entry.contains("cases")) return false;
  for (const auto& c : entry["cases"]) {
    if (!c.contains("requires_backend")) return true;
  }
  return false;
}

std::vector<std::string> soak_ids(bool cycles_only) {
  std::vector<std::string> ids;
  for (const auto& e : manifest()) {
    if (!soaked(e)) continue;
    if (cycles_only && e["data_files"].empty()) {
      bool delegates = false;
      try {
        const Program program = Program::load_file(fixtures_dir() + "/" + e["file"].get<std::string>());
        for (const auto& name : program.method_names()) delegates = delegates || !program.method_meta(name).backends.empty();
      } catch (const Error&) {
        delegates = true;  // the test reports why it does not load
      }
      if (!delegates) continue;
    }
    ids.push_back(e["id"]);
  }
  if (ids.empty()) ids.push_back("fixtures_absent");
  return ids;
}

// One run of every case of an entry on its loaded methods; with `check`, outputs are compared with the goldens
// (a stateful case's calls only on its first pass: later passes start from the state the earlier ones left).
void run_cases(const nlohmann::json& entry, std::vector<std::unique_ptr<Method>>& methods, bool check,
               bool first_pass) {
  size_t k = 0;
  for (const auto& c : entry["cases"]) {
    if (c.contains("requires_backend")) continue;
    Method& method = *methods[k++];
    const double atol = c["atol"], rtol = c["rtol"];
    const bool stateful = c.value("stateful", false);
    const nlohmann::json calls = stateful ? c["calls"] : nlohmann::json::array({c});
    for (const auto& call : calls) {
      CaseInput in = load_case_inputs(call["inputs"]);
      const std::vector<Value> out = method.execute(in.values);
      if (!check || (stateful && !first_pass)) continue;
      ASSERT_EQ(out.size(), call["outputs"].size());
      for (size_t i = 0; i < out.size(); ++i) {
        const std::string why = compare_output(out[i], call["outputs"][i], atol, rtol);
        ASSERT_TRUE(why.empty()) << c["method"].get<std::string>() << " output " << i << ": " << why;
      }
    }
  }
}

std::vector<std::unique_ptr<Method>> load_methods(const Program& program, const nlohmann::json& entry) {
  std::vector<std::unique_ptr<Method>> methods;
  for (const auto& c : entry["cases"]) {
    if (!c.contains("requires_backend")) methods.push_back(program.load_method(c["method"].get<std::string>()));
  }
  return methods;
}

// Warm-up (3 runs, then up to a tenth of the runs or of the time), then the rest of the budget; the resident
// set after warm-up and at the end.
template <typename Step>
void soak(const std::string& what, Budget budget, Step&& step) {
  const Budget warmup_budget{std::max<int64_t>(3, budget.iterations / 10), budget.seconds / 10, budget.start};
  int64_t done = 0;
  while (done < 3 || !warmup_budget.spent(done)) step(done++);
  [[maybe_unused]] const int64_t warmup = done;
  const uint64_t after_warmup = resident_bytes();
  uint64_t peak = after_warmup;
  while (!budget.spent(done)) {
    step(done++);
    if (done % 64 == 0) peak = std::max(peak, resident_bytes());
  }
  const uint64_t at_end = resident_bytes();
  peak = std::max(peak, at_end);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - budget.start).count();
  report("| " + what + " | " + std::to_string(done) + " | " + std::to_string(static_cast<int64_t>(seconds * 1000)) +
         " | " + mib(after_warmup) + " | " + mib(peak) + " | " + mib(at_end) + " |");
#ifndef ETNP_SOAK_ASAN
  EXPECT_LE(peak, after_warmup + rss_slack(after_warmup))
      << what << ": the resident set grew from " << after_warmup << " bytes after " << warmup << " warm-up runs to "
      << peak << " over " << done << " runs";
#endif
}

class Soak : public ::testing::TestWithParam<std::string> {};

TEST_P(Soak, RunsRepeatedlyWithFlatMemory) {
  ETNP_REQUIRE_FIXTURES();
  const nlohmann::json& entry = *manifest_entry(GetParam());
  const Program program = Program::load_file(fixtures_dir() + "/" + entry["file"].get<std::string>(),
                                             entry_load_options(entry));
  auto methods = load_methods(program, entry);
  const Budget budget{static_cast<int64_t>(env_number("ETNP_SOAK_ITERATIONS", 30)), env_number("ETNP_SOAK_SECONDS", 0.15)};
  soak(GetParam() + " runs", budget, [&](int64_t i) { run_cases(entry, methods, i == 0, i == 0); });
  run_cases(entry, methods, true, false);  // still right at the end
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Soak, ::testing::ValuesIn(soak_ids(false)), manifest_test_name);

class SoakCycles : public ::testing::TestWithParam<std::string> {};

TEST_P(SoakCycles, LoadRunUnloadWithFlatMemory) {
  ETNP_REQUIRE_FIXTURES();
  const nlohmann::json& entry = *manifest_entry(GetParam());
  const std::string path = fixtures_dir() + "/" + entry["file"].get<std::string>();
  const LoadOptions options = entry_load_options(entry);
  const Budget budget{static_cast<int64_t>(env_number("ETNP_SOAK_CYCLES", 10)), env_number("ETNP_SOAK_SECONDS", 0.15)};
  soak(GetParam() + " load/unload cycles", budget, [&](int64_t) {
    const Program program = Program::load_file(path, options);
    auto methods = load_methods(program, entry);
    run_cases(entry, methods, true, true);
  });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SoakCycles, ::testing::ValuesIn(soak_ids(true)), manifest_test_name);

}  // namespace
}  // namespace etnp::testing
