// The thread-safety contract: a Program is shared freely; each Method is used by one thread at a time.
// Run under TSan in CI (scripts/test.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "etnp/threadpool.h"
#include "fixtures.h"

namespace etnp::testing {
namespace {

std::vector<float> run_add(Method& method, float a, float b) {
  std::vector<float> x = {a}, y = {b};
  const std::vector<Value> inputs = {TensorRef{ScalarType::Float, {1}, {}, x.data()},
                                     TensorRef{ScalarType::Float, {1}, {}, y.data()}};
  const auto outputs = method.execute(inputs);
  const auto& t = std::get<TensorRef>(outputs.at(0));
  return {static_cast<const float*>(t.data)[0]};
}

TEST(Concurrency, ThreadsShareOneProgramWithTheirOwnMethods) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(fixtures_dir() + "/upstream/add.pte");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto method = program.load_method("forward");
      for (int i = 0; i < 200; ++i) {
        const float a = static_cast<float>(t), b = static_cast<float>(i);
        if (run_add(*method, a, b).at(0) != a + b) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Concurrency, ThreadsLoadMethodsConcurrently) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(fixtures_dir() + "/nprt/const_methods.pte");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto m = program.load_method("get_scalar");
        if (std::get<int64_t>(m->execute({}).at(0)) != 128) ++wrong;
        if (program.method_meta("forward").inputs.size() != 1) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Concurrency, ParallelKernelsFromSeveralThreads) {
  ETNP_REQUIRE_FIXTURES();
  // Softmax over 2x4096 splits work across the shared pool; several callers use the pool at once.
  const nlohmann::json* entry = manifest_entry("upstream/softmax");
  ASSERT_NE(entry, nullptr);
  Program program = Program::load_file(fixtures_dir() + "/upstream/softmax.pte");
  const auto& c = (*entry)["cases"][0];
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto method = program.load_method("forward");
      CaseInput in = load_case_inputs(c["inputs"]);
      for (int i = 0; i < 10; ++i) {
        const auto out = method->execute(in.values);
        if (!compare_output(out.at(0), c["outputs"][0], c["atol"], c["rtol"]).empty()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace etnp::testing
