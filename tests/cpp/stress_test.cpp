// Concurrency stress (issue 18 item 5): many threads, on shared programs and on several, run a random mix of
// loads and drops of programs and methods, executes (every output checked against an expected result computed
// once up front), thread-pool resizes, backend option changes, profiled runs written as ETDumps, and registry
// reads and registrations. Each item of the thread-safety contract (docs/architecture.md "Threads") has a test
// here that runs the mix that item allows; Concurrency.StressEverything runs them all at once.
//
// Short by default (about 4 s in all under ThreadSanitizer, where scripts/test.sh runs Concurrency*).
// ETNP_STRESS_SECONDS=N runs StressEverything for N seconds (and each item test for N/10);
// ETNP_STRESS_THREADS (default 8) and ETNP_STRESS_SEED (default: from the clock, printed) vary the run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "etnp/backend.h"
#include "etnp/kernel.h"
#include "etnp/threadpool.h"
#include "fixtures.h"
#include "format/etdump.h"
#include "tools/writer/xnnpack_writer.h"
#include "writer_test_util.h"

namespace etnp::testing {
namespace {

using writer_testing::f32;

// --- Settings -------------------------------------------------------------------------------------------

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return end != v && d > 0 ? d : fallback;
}

double everything_seconds() { return env_number("ETNP_STRESS_SECONDS", 1.5); }
double item_seconds() {
  const double s = env_number("ETNP_STRESS_SECONDS", 0);
  return s > 0 ? std::max(0.3, s / 10) : 0.3;
}
size_t stress_threads() { return static_cast<size_t>(env_number("ETNP_STRESS_THREADS", 8)); }
uint64_t stress_seed() {
  static const uint64_t seed = [] {
    const double s = env_number("ETNP_STRESS_SEED", 0);
    return s > 0 ? static_cast<uint64_t>(s)
                 : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007u;
  }();
  return seed;
}

// --- Subjects: programs with cases whose expected outputs are known before any thread starts ---------------

struct ExpectedOutput {
  std::vector<int64_t> sizes;
  std::vector<float> values;
  double atol = 0, rtol = 0;
};

struct Case {
  CaseInput input;
  std::vector<ExpectedOutput> outputs;
};

/// How a Program is loaded: the bytes (kept alive for buffer loads), a file of them, the .ptd to give.
struct Subject {
  std::string name;
  std::string method = "forward";
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  std::string path;
  std::vector<std::string> data_files;
  std::shared_ptr<const std::vector<uint8_t>> data_buffer;  ///< a .ptd given in memory (writer programs)
  std::map<std::string, BackendOptions, std::less<>> backend_options;
  bool xnnpack = false;
  std::deque<Case> cases;  ///< a deque: a Case's input values point into its own arrays

  LoadOptions options(bool profiling) const {
    LoadOptions o;
    o.data_files = data_files;
    if (data_buffer) o.data_buffers.emplace_back(*data_buffer);
    o.backend_options = backend_options;
    o.enable_profiling = profiling;
    return o;
  }
  /// Loads a fresh Program, from memory, from the file or from a descriptor (`way` picks).
  Program load(unsigned way, bool profiling) const {
    const LoadOptions o = options(profiling);
    switch (way % 3) {
      case 0:
        return Program::load_buffer(*bytes, bytes, o);
      case 1:
        return Program::load_file(path, o);
      default: {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw std::runtime_error("cannot open " + path);
        struct Closer {
          int fd;
          ~Closer() { ::close(fd); }
        } closer{fd};
        return Program::load_fd(fd, o);
      }
    }
  }
};

std::string temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string file = name;
  std::replace(file.begin(), file.end(), '/', '_');
  const std::string path = ::testing::TempDir() + "/etnp_stress_" + std::to_string(::getpid()) + "_" + file;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path;
}

void add_float_input(CaseInput& in, std::vector<int64_t> shape, const std::vector<float>& values) {
  format::NpyArray a;
  a.dtype = ScalarType::Float;
  a.shape = std::move(shape);
  a.data.resize(values.size() * sizeof(float));
  std::memcpy(a.data.data(), values.data(), a.data.size());
  in.arrays.push_back(std::move(a));
}

/// Makes the input values once every array is in place (they point into the arrays).
void finish_inputs(CaseInput& in) {
  in.values.clear();
  for (const format::NpyArray& a : in.arrays) in.values.emplace_back(TensorRef{a.dtype, a.shape, {}, a.data.data()});
}

/// Small integers: every sum of products here is exact in float32, whatever the order of the additions (so
/// results are bit-identical however the work is split across threads).
std::vector<float> small_ints(std::mt19937& rng, size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

Subject make_subject(std::string name, std::vector<uint8_t> bytes) {
  Subject s;
  s.name = std::move(name);
  s.path = temp_file(s.name + ".pte", bytes);
  s.bytes = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return s;
}

/// x + y + bias on [2, 3] (portable kernels, a constant).
Subject bias_add_subject(std::mt19937& rng) {
  Subject s = make_subject("writer/bias_add", writer_testing::small_add_program(true));
  const float bias[3] = {0.5f, 1.5f, -2.0f};
  for (int k = 0; k < 4; ++k) {
    Case& c = s.cases.emplace_back();
    const std::vector<float> x = small_ints(rng, 6, -50, 50), y = small_ints(rng, 6, -50, 50);
    add_float_input(c.input, {2, 3}, x);
    add_float_input(c.input, {2, 3}, y);
    finish_inputs(c.input);
    ExpectedOutput e{{2, 3}, std::vector<float>(6)};
    for (size_t i = 0; i < 6; ++i) e.values[i] = x[i] + y[i] + bias[i % 3];
    c.outputs.push_back(std::move(e));
  }
  return s;
}

/// x + layer.weight, the weight in a .ptd given in memory.
Subject ptd_add_subject(std::mt19937& rng) {
  format::PtdWriter ptd;
  Subject s = make_subject("writer/ptd_add", writer_testing::external_weight_program(&ptd));
  s.data_buffer = std::make_shared<const std::vector<uint8_t>>(ptd.serialize());
  for (int k = 0; k < 4; ++k) {
    Case& c = s.cases.emplace_back();
    const std::vector<float> x = small_ints(rng, 6, -50, 50);
    add_float_input(c.input, {2, 3}, x);
    finish_inputs(c.input);
    ExpectedOutput e{{2, 3}, std::vector<float>(6)};
    for (size_t i = 0; i < 6; ++i) e.values[i] = x[i] + static_cast<float>(i + 1);
    c.outputs.push_back(std::move(e));
  }
  return s;
}

/// x @ W, [96, 256] x [256, 128] with W a constant: a product large enough that the GEMM splits it across the
/// shared pool (and packs W at load).
Subject matmul_subject(std::mt19937& rng) {
  constexpr int32_t m = 96, k = 256, n = 128;
  const std::vector<float> w = small_ints(rng, size_t{k} * n, -2, 2);
  format::ProgramWriter pw;
  auto& mw = pw.add_method("forward");
  const int32_t x = mw.planned_tensor(f32({m, k}));
  const int32_t wv = mw.constant_tensor(f32({k, n}), format::as_bytes(w));
  const int32_t y = mw.planned_tensor(f32({m, n}));
  mw.kernel("aten::mm.out", {x, wv, y, y});
  mw.set_inputs({x});
  mw.set_outputs({y});
  Subject s = make_subject("writer/matmul", pw.serialize());
  for (int c_index = 0; c_index < 3; ++c_index) {
    Case& c = s.cases.emplace_back();
    const std::vector<float> xs = small_ints(rng, size_t{m} * k, -2, 2);
    add_float_input(c.input, {m, k}, xs);
    finish_inputs(c.input);
    ExpectedOutput e{{m, n}, std::vector<float>(size_t{m} * n)};
    for (int32_t i = 0; i < m; ++i)
      for (int32_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int32_t p = 0; p < k; ++p) acc += static_cast<int64_t>(xs[size_t(i) * k + p]) * static_cast<int64_t>(w[size_t(p) * n + j]);
        e.values[size_t(i) * n + j] = static_cast<float>(acc);
      }
    c.outputs.push_back(std::move(e));
  }
  return s;
}

/// XNNPACK: relu(x W^T + b), x [64, 512], W [256, 512], its constants in a .ptd (a file). `own_pool`: loaded
/// with the delegate load option num_threads=2 (a pool of its own instead of the shared one).
Subject xnnpack_fc_subject(std::mt19937& rng, bool own_pool) {
  constexpr uint32_t rows = 64, in = 512, out = 256;
  const std::vector<float> w = small_ints(rng, size_t{out} * in, -2, 2);
  const std::vector<float> b = small_ints(rng, out, -100, 100);
  format::XnnpackGraphWriter g;
  const uint32_t xi = g.input({rows, in}, 0), yo = g.output({rows, out}, 1);
  const uint32_t wi = g.constant({out, in}, w), bi = g.constant({out}, b);
  g.fully_connected(xi, wi, bi, yo, 0.0f);
  format::ProgramWriter pw;
  auto& mw = pw.add_method("forward");
  const int32_t x = mw.planned_tensor(f32({int32_t{rows}, int32_t{in}}));
  const int32_t y = mw.planned_tensor(f32({int32_t{rows}, int32_t{out}}));
  format::add_xnnpack_delegate(pw, mw, g.finish(), {x, y}, /*constants_in_ptd=*/true);
  mw.set_inputs({x});
  mw.set_outputs({y});
  Subject s = make_subject(own_pool ? "writer/xnnpack_fc_ptd_own_pool" : "writer/xnnpack_fc_ptd", pw.serialize());
  s.data_files.push_back(temp_file(s.name + ".ptd", pw.external_data().serialize()));
  s.xnnpack = true;
  if (own_pool) s.backend_options["XnnpackBackend"] = {{"num_threads", int64_t{2}}};
  for (int c_index = 0; c_index < 3; ++c_index) {
    Case& c = s.cases.emplace_back();
    const std::vector<float> xs = small_ints(rng, size_t{rows} * in, -2, 2);
    add_float_input(c.input, {rows, in}, xs);
    finish_inputs(c.input);
    ExpectedOutput e{{rows, out}, std::vector<float>(size_t{rows} * out)};
    for (uint32_t i = 0; i < rows; ++i)
      for (uint32_t j = 0; j < out; ++j) {
        int64_t acc = static_cast<int64_t>(b[j]);
        for (uint32_t p = 0; p < in; ++p) acc += static_cast<int64_t>(xs[size_t(i) * in + p]) * static_cast<int64_t>(w[size_t(j) * in + p]);
        e.values[size_t(i) * out + j] = static_cast<float>(std::max<int64_t>(acc, 0));
      }
    c.outputs.push_back(std::move(e));
  }
  return s;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// A fixture program whose cases have float outputs; its goldens are read once here.
std::optional<Subject> fixture_subject(const std::string& id) {
  if (fixtures_dir().empty()) return std::nullopt;
  const nlohmann::json* entry = manifest_entry(id);
  if (entry == nullptr) return std::nullopt;
  Subject s;
  s.name = id;
  s.path = fixtures_dir() + "/" + (*entry)["file"].get<std::string>();
  s.bytes = std::make_shared<const std::vector<uint8_t>>(read_bytes(s.path));
  for (const auto& d : (*entry)["data_files"]) s.data_files.push_back(fixtures_dir() + "/" + d.get<std::string>());
  s.xnnpack = (*entry)["description"].get<std::string>().find("XnnpackBackend") != std::string::npos;
  if (s.xnnpack && (find_backend("XnnpackBackend") == nullptr || !find_backend("XnnpackBackend")->is_available())) {
    return std::nullopt;
  }
  for (const auto& c : (*entry)["cases"]) {
    if (c["method"] != s.method) continue;
    Case& out = s.cases.emplace_back();
    out.input = load_case_inputs(c["inputs"]);
    for (const auto& o : c["outputs"]) {
      const format::NpyArray golden = format::read_npy(fixtures_dir() + "/" + o["npy"].get<std::string>());
      if (golden.dtype != ScalarType::Float) return std::nullopt;
      ExpectedOutput e{golden.shape, std::vector<float>(static_cast<size_t>(golden.numel()))};
      std::memcpy(e.values.data(), golden.data.data(), e.values.size() * sizeof(float));
      e.atol = c["atol"].get<double>();
      e.rtol = c["rtol"].get<double>();
      out.outputs.push_back(std::move(e));
    }
  }
  if (s.cases.empty()) return std::nullopt;
  return s;
}

/// Why `outputs` are not `c`'s expected outputs; empty when they are.
std::string mismatch(const std::vector<Value>& outputs, const Case& c) {
  if (outputs.size() != c.outputs.size()) return std::to_string(outputs.size()) + " outputs";
  for (size_t o = 0; o < outputs.size(); ++o) {
    const auto* t = std::get_if<TensorRef>(&outputs[o]);
    const ExpectedOutput& e = c.outputs[o];
    if (t == nullptr || t->dtype != ScalarType::Float) return "output " + std::to_string(o) + " is not a float tensor";
    if (t->sizes != e.sizes) return "output " + std::to_string(o) + " has another shape";
    const auto* v = static_cast<const float*>(t->data);
    for (size_t i = 0; i < e.values.size(); ++i) {
      const double a = v[i], x = e.values[i];
      if (std::isnan(a) && std::isnan(x)) continue;
      if (!(std::fabs(a - x) <= e.atol + e.rtol * std::fabs(x))) {
        return "output " + std::to_string(o) + " element " + std::to_string(i) + " is " + std::to_string(a) +
               ", expected " + std::to_string(x);
      }
    }
  }
  return {};
}

/// Every subject, built once per process; fixtures are added where they are present.
const std::deque<Subject>& subjects() {
  static const std::deque<Subject> all = [] {
    std::mt19937 rng(1234);
    std::deque<Subject> s;
    s.push_back(bias_add_subject(rng));
    s.push_back(ptd_add_subject(rng));
    s.push_back(matmul_subject(rng));
    if (find_backend("XnnpackBackend") != nullptr && find_backend("XnnpackBackend")->is_available()) {
      s.push_back(xnnpack_fc_subject(rng, false));
      s.push_back(xnnpack_fc_subject(rng, true));
    }
    std::vector<std::string> ids = {"nprt/add", "upstream/linear", "upstream/softmax",
                                    "exported/smallcnn_dynbatch_xnnpack_fp32", "exported/mlp_dq8_xnnpack"};
    // MobileNetV2 (XNNPACK, weights in a .ptd) takes long under TSan: in long runs only.
    if (env_number("ETNP_STRESS_SECONDS", 0) > 0) ids.push_back("exported/mobilenet_v2_xnnpack_fp32_ptd");
    for (const std::string& id : ids) {
      if (std::optional<Subject> f = fixture_subject(id)) s.push_back(std::move(*f));
    }
    return s;
  }();
  return all;
}

// --- The harness --------------------------------------------------------------------------------------------

enum Op : size_t {
  kExecuteOwn,       ///< a thread's own Method (of a shared Program) runs a random case
  kExecuteShared,    ///< one Method shared by every thread, used under a lock
  kReloadMethod,     ///< drops a thread's own Method and loads it again (from the Program current then)
  kReplaceProgram,   ///< loads a fresh Program into the shared slot; the old one goes with its last user
  kLoadRunDrop,      ///< loads a Program and a Method of its own, runs one case, drops both
  kProfile,          ///< a Method of a profiled Program: events checked, written as an ETDump and read back
  kSetThreads,       ///< ThreadPool::global().set_num_threads
  kBackendOption,    ///< XnnpackBackend options set (num_threads, weight_cache_enabled), refused, read
  kRegistry,         ///< registry reads, and registrations of new backends and kernels
  kNumOps
};
constexpr const char* kOpNames[kNumOps] = {"execute_own", "execute_shared", "reload_method", "replace_program",
                                           "load_run_drop", "profile", "set_threads", "backend_option",
                                           "registry"};
using Mix = std::array<unsigned, kNumOps>;  ///< weight of each operation (0: never)

/// A Program every thread uses, replaced now and then, and a Method shared under a lock.
struct Slot {
  std::mutex mutex;
  std::optional<Program> program;
  std::optional<Program> profiled;
  std::mutex method_mutex;
  std::unique_ptr<Method> shared_method;
};

class Harness {
 public:
  Harness(Mix mix, double seconds) : mix_(mix), seconds_(seconds), slots_(subjects().size()) {
    for (size_t i = 0; i < subjects().size(); ++i) {
      slots_[i].program.emplace(subjects()[i].load(0, false));
      slots_[i].profiled.emplace(subjects()[i].load(0, true));
    }
  }

  void run(size_t nthreads) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(seconds_));
    std::vector<std::thread> threads;
    for (size_t t = 0; t < nthreads; ++t) threads.emplace_back([this, t, deadline] { worker(t, deadline); });
    for (auto& th : threads) th.join();
  }

  uint64_t count(Op op) const { return counts_[op].load(); }
  uint64_t checked() const { return checked_.load(); }
  std::vector<std::string> failures() {
    std::lock_guard lock(failures_mutex_);
    return failures_;
  }
  std::string summary() const {
    std::string s;
    for (size_t op = 0; op < kNumOps; ++op) {
      if (mix_[op] == 0) continue;
      s += std::string(s.empty() ? "" : ", ") + kOpNames[op] + " " + std::to_string(counts_[op].load());
    }
    return s + "; " + std::to_string(checked_.load()) + " executes checked";
  }

 private:
  struct Own {
    std::unique_ptr<Method> method;
    std::unique_ptr<Method> profiled;
    size_t profile_events = 0;  ///< events per call of `profiled` (from its first call)
  };

  void fail(const std::string& what) {
    std::lock_guard lock(failures_mutex_);
    if (failures_.size() < 20) failures_.push_back(what);
  }

  Program program_of(size_t s, bool profiled) {
    std::lock_guard lock(slots_[s].mutex);
    return profiled ? *slots_[s].profiled : *slots_[s].program;
  }

  void check(const Subject& subject, const char* how, const std::vector<Value>& outputs, const Case& c) {
    ++checked_;
    const std::string why = mismatch(outputs, c);
    if (!why.empty()) fail(subject.name + " (" + how + "): " + why);
  }

  const Case& pick_case(const Subject& subject, std::mt19937& rng) {
    return subject.cases[std::uniform_int_distribution<size_t>(0, subject.cases.size() - 1)(rng)];
  }

  void worker(size_t index, std::chrono::steady_clock::time_point deadline) {
    std::mt19937 rng(static_cast<uint32_t>(stress_seed() * 1000003u + index));
    std::vector<Own> own(subjects().size());
    std::vector<size_t> enabled;
    for (size_t op = 0; op < kNumOps; ++op)
      if (mix_[op] > 0) enabled.push_back(op);
    std::discrete_distribution<size_t> pick(mix_.begin(), mix_.end());
    std::uniform_int_distribution<size_t> pick_subject(0, subjects().size() - 1);
    // Every thread starts with each enabled operation once, so that none goes untried in a short run.
    for (size_t i = 0; i < enabled.size() || std::chrono::steady_clock::now() < deadline; ++i) {
      const auto op = static_cast<Op>(i < enabled.size() ? enabled[(i + index) % enabled.size()] : pick(rng));
      const size_t s = pick_subject(rng);
      try {
        step(op, s, own[s], rng);
      } catch (const std::exception& e) {
        fail(std::string(kOpNames[op]) + " on " + subjects()[s].name + " threw: " + e.what());
      }
      ++counts_[op];
    }
  }

  void step(Op op, size_t s, Own& own, std::mt19937& rng) {
    const Subject& subject = subjects()[s];
    switch (op) {
      case kExecuteOwn: {
        if (!own.method) own.method = program_of(s, false).load_method(subject.method);
        const Case& c = pick_case(subject, rng);
        check(subject, "own method", own.method->execute(c.input.values), c);
        break;
      }
      case kExecuteShared: {
        Slot& slot = slots_[s];
        std::lock_guard lock(slot.method_mutex);
        if (!slot.shared_method || rng() % 8 == 0) slot.shared_method = program_of(s, false).load_method(subject.method);
        const Case& c = pick_case(subject, rng);
        check(subject, "shared method", slot.shared_method->execute(c.input.values), c);
        break;
      }
      case kReloadMethod: {
        own.method.reset();
        const Program program = program_of(s, false);
        if (!program.load_verdict(subject.method).loads()) fail(subject.name + ": load_verdict refuses the method");
        if (program.method_meta(subject.method).inputs.size() != subject.cases[0].input.values.size()) {
          fail(subject.name + ": method_meta has another input count");
        }
        own.method = program.load_method(subject.method);
        break;
      }
      case kReplaceProgram: {
        const bool profiled = rng() % 4 == 0;
        Program fresh = subject.load(static_cast<unsigned>(rng()), profiled);
        std::optional<Program> old;  // dropped outside the lock (possibly the last reference)
        std::lock_guard lock(slots_[s].mutex);
        auto& target = profiled ? slots_[s].profiled : slots_[s].program;
        old = std::move(target);
        target.emplace(std::move(fresh));
        break;
      }
      case kLoadRunDrop: {
        const Program program = subject.load(static_cast<unsigned>(rng()), false);
        auto method = program.load_method(subject.method);
        const Case& c = pick_case(subject, rng);
        check(subject, "fresh method", method->execute(c.input.values), c);
        break;
      }
      case kProfile:
        profile(subject, s, own, rng);
        break;
      case kSetThreads:
        ThreadPool::global().set_num_threads(rng() % 5);  // 0: ThreadPool::default_threads()
        if (ThreadPool::global().num_threads() < 1) fail("the pool reports no threads");
        break;
      case kBackendOption:
        backend_option(rng);
        break;
      case kRegistry:
        registry(rng);
        break;
      case kNumOps:
        break;
    }
  }

  void profile(const Subject& subject, size_t s, Own& own, std::mt19937& rng) {
    if (!own.profiled || rng() % 8 == 0) {
      own.profiled = program_of(s, true).load_method(subject.method);
      own.profile_events = 0;
    }
    Method& m = *own.profiled;
    m.clear_profile_events();
    const Case& c = pick_case(subject, rng);
    check(subject, "profiled", m.execute(c.input.values), c);
    const std::vector<ProfileEvent>& events = m.profile_events();
    // The events are this call's, of this method only: as many each call, each naming one of its instructions.
    if (own.profile_events == 0) own.profile_events = events.size();
    if (events.empty() || events.size() != own.profile_events) {
      fail(subject.name + ": " + std::to_string(events.size()) + " profile events, " +
           std::to_string(own.profile_events) + " before");
    }
    format::RunBlock block;
    block.name = "Execute";
    for (const ProfileEvent& ev : events) {
      if (ev.instruction < 0 || static_cast<size_t>(ev.instruction) >= m.meta().num_instructions ||
          ev.end_ns < ev.start_ns) {
        fail(subject.name + ": profile event '" + ev.name + "' of instruction " + std::to_string(ev.instruction));
      }
      format::EtdumpProfileEvent e;
      e.name = ev.name;
      e.chain_index = static_cast<int32_t>(ev.chain);
      e.instruction_id = static_cast<int32_t>(ev.instruction);
      e.delegate_debug_id_int = ev.delegate_part ? static_cast<int32_t>(ev.debug_handle) : -1;
      e.start_time = ev.start_ns;
      e.end_time = ev.end_ns;
      block.profile_events.push_back(std::move(e));
    }
    const std::vector<format::RunBlock> blocks = {block};
    const std::vector<uint8_t> etdump = format::write_etdump(blocks);
    if (format::parse_etdump(etdump) != blocks) fail(subject.name + ": the ETDump does not read back as written");
    m.clear_profile_events();
    if (!m.profile_events().empty()) fail(subject.name + ": clear_profile_events left events");
  }

  void backend_option(std::mt19937& rng) {
    const std::shared_ptr<Backend> xnnpack = find_backend("XnnpackBackend");
    if (xnnpack == nullptr) return;
    switch (rng() % 4) {
      case 0:
        xnnpack->set_option("num_threads", static_cast<int64_t>(rng() % 5));
        break;
      case 1:
        xnnpack->set_options({{"weight_cache_enabled", rng() % 2 == 0}});
        break;
      case 2:
        // Refused values change nothing and throw InvalidArgument naming the option.
        try {
          xnnpack->set_options({{"num_threads", int64_t{-1}}});
          fail("num_threads -1 was accepted");
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::InvalidArgument) fail(std::string("num_threads -1: ") + e.what());
        }
        break;
      default: {
        const BackendOptions values =
            xnnpack->get_options({{"num_threads", int64_t{0}}, {"weight_cache_enabled", false}});
        const int64_t n = std::get<int64_t>(values.at("num_threads"));
        if (n < 1 || n > 1024) fail("num_threads reads " + std::to_string(n));
        (void)std::get<bool>(values.at("weight_cache_enabled"));
      }
    }
  }

  class StressBackend final : public Backend {
   public:
    explicit StressBackend(std::string name) : name_(std::move(name)) {}
    std::string_view name() const override { return name_; }
    bool is_available() const override { return true; }
    std::unique_ptr<DelegateHandle> init(const BackendInitContext&, std::span<const uint8_t>,
                                         std::span<const CompileSpec>) override {
      return std::make_unique<DelegateHandle>();
    }
    void execute(DelegateHandle&, std::span<EValue* const>) override {}

   private:
    std::string name_;
  };

  static void noop_kernel(KernelContext&, KernelArgs) {}

  void registry(std::mt19937& rng) {
    const std::vector<std::string> names = registered_backend_names();
    if (!std::is_sorted(names.begin(), names.end())) fail("registered_backend_names is not sorted");
    if (!names.empty() && find_backend(names[rng() % names.size()]) == nullptr) fail("a listed backend is not found");
    // A bounded number of registrations per process: a backend or a kernel no program uses, while others load.
    static std::atomic<int> registrations{0};
    if (rng() % 4 == 0 && registrations.load() < 64) {
      const int n = registrations++;
      const std::string id = std::to_string(::getpid()) + "_" + std::to_string(n);
      if (n % 2 == 0) {
        register_backend(std::make_shared<StressBackend>("StressBackend" + id));
        if (find_backend("StressBackend" + id) == nullptr) fail("a registered backend is not found");
      } else {
        register_kernel({"stress::noop_" + id + ".out", noop_kernel, -1});
      }
    }
  }

  Mix mix_;
  double seconds_;
  std::deque<Slot> slots_;
  std::array<std::atomic<uint64_t>, kNumOps> counts_{};
  std::atomic<uint64_t> checked_{0};
  std::mutex failures_mutex_;
  std::vector<std::string> failures_;
};

Mix mix_of(std::initializer_list<std::pair<Op, unsigned>> weights) {
  Mix m{};
  for (auto [op, w] : weights) m[op] = w;
  return m;
}

/// Runs `mix` on stress_threads() threads for `seconds`, then checks: no failure (every output as expected),
/// each of `must_run` done, the process-wide settings put back, the packed-weight cache as before.
void stress(Mix mix, double seconds, std::initializer_list<Op> must_run) {
  ASSERT_FALSE(subjects().empty());
  // Each case, once on one thread first: what the threads will be held to.
  static const bool single_threaded_ok = [] {
    for (const Subject& s : subjects()) {
      auto m = s.load(0, false).load_method(s.method);
      for (const Case& c : s.cases) {
        const std::string why = mismatch(m->execute(c.input.values), c);
        if (!why.empty()) {
          ADD_FAILURE() << s.name << " on one thread: " << why;
          return false;
        }
      }
    }
    return true;
  }();
  ASSERT_TRUE(single_threaded_ok);
  const size_t cache_entries = packed_weight_cache_stats().entries;
  const size_t nthreads = stress_threads();
  {
    Harness h(mix, seconds);
    h.run(nthreads);
    const std::vector<std::string> failures = h.failures();
    for (const std::string& f : failures) ADD_FAILURE() << f;
    EXPECT_TRUE(failures.empty()) << "seed " << stress_seed() << " (ETNP_STRESS_SEED=" << stress_seed()
                                  << " repeats the choices, not the timing)";
    EXPECT_GT(h.checked(), 0u);
    for (Op op : must_run) EXPECT_GT(h.count(op), 0u) << kOpNames[op];
    std::printf("[ stress   ] %zu threads, %.1f s, %zu programs, seed %llu: %s\n", nthreads, seconds,
                subjects().size(), static_cast<unsigned long long>(stress_seed()), h.summary().c_str());
  }
  ThreadPool::global().set_num_threads(0);
  if (auto x = find_backend("XnnpackBackend")) x->set_options({{"weight_cache_enabled", true}});  // the default
  // Every Program and Method of the run is gone: so are the shared packed weights they used.
  EXPECT_EQ(packed_weight_cache_stats().entries, cache_entries);
}

/// Threads of this process now (/proc/self/task).
size_t process_threads() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory() ? 1 : 0;
  return n;
}

/// The thread count once it reads `expected`, or what it reads after two seconds. A joined thread can still be
/// listed for a moment: pthread_join returns when the kernel clears the thread's id, before the task is reaped.
/// Waiting never hides an extra thread, which stays listed.
size_t process_threads_settled_at(size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  size_t n = process_threads();
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    n = process_threads();
  }
  return n;
}

/// The thread count once threads an earlier test joined are gone: the same reading for 20 ms.
size_t process_threads_steady() {
  size_t n = process_threads();
  for (int same = 0; same < 10;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const size_t now = process_threads();
    same = now == n ? same + 1 : 0;
    n = now;
  }
  return n;
}

// A pool made with a count starts its workers when work first splits: none at construction, none for work too
// small to split (run inline), then count - 1 workers; a resize joins them.
TEST(ThreadPool, StartsItsWorkersWhenWorkFirstSplits) {
  const size_t before = process_threads_steady();
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_threads(), 3u);
  std::atomic<size_t> items{0};
  pool.parallel_for(8, 8, [&](size_t b, size_t e) { items += e - b; });  // one chunk: runs inline
  EXPECT_EQ(items.load(), 8u);
  EXPECT_EQ(process_threads_settled_at(before), before) << "no work has split yet";
  pool.parallel_for(64, 1, [&](size_t b, size_t e) { items += e - b; });
  EXPECT_EQ(items.load(), 72u);
  EXPECT_EQ(process_threads_settled_at(before + 2), before + 2) << "three threads: the caller and two workers";
  pool.set_num_threads(1);  // started already: replaced now, its workers joined
  EXPECT_EQ(process_threads_settled_at(before), before);
}

// A count that is set is started at once (one thread: nothing to start), and work then splits on those workers.
TEST(ThreadPool, StartsACountThatIsSetAtOnce) {
  const size_t before = process_threads_steady();
  ThreadPool pool(4);
  pool.set_num_threads(1);  // the caller's thread alone: nothing to start
  EXPECT_EQ(pool.num_threads(), 1u);
  EXPECT_EQ(process_threads_settled_at(before), before);
  pool.set_num_threads(3);  // started now, before any work
  EXPECT_EQ(pool.num_threads(), 3u);
  EXPECT_EQ(process_threads_settled_at(before + 2), before + 2);
  std::atomic<size_t> items{0};
  pool.parallel_for(64, 1, [&](size_t b, size_t e) { items += e - b; });
  EXPECT_EQ(items.load(), 64u);
  EXPECT_EQ(process_threads_settled_at(before + 2), before + 2) << "the same workers";
}

// Contract: a Program may be shared by any number of threads, and its load_method, method_meta and
// load_verdict called concurrently; Methods of one program or of several run in parallel, each on one thread.
TEST(Concurrency, StressSharedProgramsOwnMethods) {
  stress(mix_of({{kExecuteOwn, 10}, {kReloadMethod, 2}}), item_seconds(), {kExecuteOwn, kReloadMethod});
}

// Contract: a Method is used by one thread at a time; threads that take turns on it (here under a lock) each
// get the outputs of their own inputs.
TEST(Concurrency, StressOneMethodTakenInTurns) {
  stress(mix_of({{kExecuteShared, 10}, {kExecuteOwn, 2}}), item_seconds(), {kExecuteShared});
}

// Contract: a call of a Method made while another thread's call of it runs is refused (InvalidArgument, "already
// running on another thread") instead of racing; the method works on afterwards. The threads here read no
// outputs: those are the method's memory, which the next call (whichever thread makes it) overwrites.
TEST(Concurrency, StressOneMethodWithoutALockIsRefusedNotRaced) {
  const Subject& subject = subjects().front();
  auto method = subject.load(0, false).load_method(subject.method);
  std::atomic<uint64_t> ran{0}, refused{0}, wrong{0};
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(item_seconds()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < stress_threads(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 4 || std::chrono::steady_clock::now() < deadline; ++i) {
        const Case& c = subject.cases[(t + i) % subject.cases.size()];
        try {
          if (method->execute(c.input.values).size() != c.outputs.size()) ++wrong;
          ++ran;
        } catch (const Error& e) {
          const bool expected = e.kind() == ErrorKind::InvalidArgument &&
                                std::string(e.what()).find("already running on another thread") != std::string::npos;
          ++(expected ? refused : wrong);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(ran.load(), 0u);
  for (const Case& c : subject.cases) EXPECT_EQ(mismatch(method->execute(c.input.values), c), "");
  std::printf("[ stress   ] one method, %zu threads without a lock: %llu calls ran, %llu refused\n", stress_threads(),
              static_cast<unsigned long long>(ran.load()), static_cast<unsigned long long>(refused.load()));
}

// Contract: Programs are loaded (from memory, a file, a descriptor) and dropped while other threads run their
// methods; a Method keeps what it needs of its Program after the last Program handle is gone.
TEST(Concurrency, StressLoadAndDrop) {
  stress(mix_of({{kExecuteOwn, 6}, {kReplaceProgram, 3}, {kLoadRunDrop, 3}, {kReloadMethod, 2}}), item_seconds(),
         {kReplaceProgram, kLoadRunDrop});
}

// Contract: ThreadPool::global().set_num_threads may be called while methods run: running parallel sections
// finish on the threads they started on, later ones use the new count, and every result is unchanged.
TEST(Concurrency, StressThreadCountChanges) {
  stress(mix_of({{kExecuteOwn, 10}, {kExecuteShared, 2}, {kSetThreads, 3}}), item_seconds(), {kSetThreads});
}

// Contract: backend options (XnnpackBackend num_threads, weight_cache_enabled) may be set and read while
// methods load and run; a refused value throws InvalidArgument; methods loaded with either cache setting give
// the same results, and shared packed weights go with the last method using them.
TEST(Concurrency, StressBackendOptions) {
  stress(mix_of({{kExecuteOwn, 8}, {kReloadMethod, 3}, {kLoadRunDrop, 1}, {kBackendOption, 3}}), item_seconds(),
         {kBackendOption, kReloadMethod});
}

// Contract: methods of programs loaded with enable_profiling run in parallel with each other and with the
// rest; each records its own events only (as many per call, each naming one of its instructions), and the
// events written as an ETDump read back as written.
TEST(Concurrency, StressProfilingAndEtdump) {
  stress(mix_of({{kProfile, 8}, {kExecuteOwn, 3}, {kReplaceProgram, 1}, {kSetThreads, 1}}), item_seconds(),
         {kProfile});
}

// Contract: the registries may be read from several threads, and new backends and kernels registered while
// other threads load and run programs (that do not use them).
TEST(Concurrency, StressRegistries) {
  stress(mix_of({{kRegistry, 3}, {kReloadMethod, 3}, {kExecuteOwn, 4}, {kLoadRunDrop, 1}}), item_seconds(),
         {kRegistry});
}

// All of the above at once, for ETNP_STRESS_SECONDS (1.5 s by default).
TEST(Concurrency, StressEverything) {
  stress(mix_of({{kExecuteOwn, 12},
                 {kExecuteShared, 4},
                 {kReloadMethod, 3},
                 {kReplaceProgram, 2},
                 {kLoadRunDrop, 2},
                 {kProfile, 4},
                 {kSetThreads, 2},
                 {kBackendOption, 2},
                 {kRegistry, 1}}),
         everything_seconds(),
         {kExecuteOwn, kExecuteShared, kReloadMethod, kReplaceProgram, kLoadRunDrop, kProfile, kSetThreads,
          kBackendOption, kRegistry});
}

}  // namespace
}  // namespace etnp::testing
