// XnnpackBackend's options do what they say or are refused: num_threads given at load runs the delegate (its
// XNNPACK operators and its own kernels) on a pool of that many threads; workspace_sharing_mode takes 0 and 1.
#include <gtest/gtest.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/xnnpack/xnnpack_backend.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"
#include "kernel_test_util.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using etnp::testing::OwnedTensor;
using testing::GraphBuilder;

std::shared_ptr<Backend> xnnpack() { return find_backend("XnnpackBackend"); }

// Threads that ran a chunk of a parallel_for on ThreadPool::current(). Each chunk waits (up to `patience`)
// until `wanted` threads have shown up, so a busy machine cannot make one thread run every chunk.
size_t threads_that_ran_work(size_t wanted, std::chrono::milliseconds patience) {
  std::mutex m;
  std::condition_variable cv;
  std::set<std::thread::id> ids;
  ThreadPool::current().parallel_for(4096, 1, [&](size_t, size_t) {
    std::unique_lock<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
    cv.notify_all();
    cv.wait_for(lock, patience, [&] { return ids.size() >= wanted; });
  });
  return ids.size();
}

// Runs `f`, expecting InvalidArgument with `needle` in its message.
template <typename F>
void expect_invalid_argument(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an InvalidArgument naming " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// init() with these load options.
std::unique_ptr<DelegateHandle> init_with(BackendOptions options, const std::vector<uint8_t>& payload) {
  BackendInitContext ctx;
  ctx.load_options = &options;
  return xnnpack()->init(ctx, payload, {});
}

TEST(XnnpackOptions, ThreadPoolUseRoutesCurrentWork) {
  ThreadPool three(3), one(1);
  {
    const ThreadPool::Use use(three);
    EXPECT_EQ(&ThreadPool::current(), &three);
    EXPECT_EQ(threads_that_ran_work(3, std::chrono::seconds(10)), 3u);
    {
      const ThreadPool::Use inner(one);
      EXPECT_EQ(threads_that_ran_work(2, std::chrono::milliseconds(300)), 1u);  // a second thread never comes
    }
    EXPECT_EQ(&ThreadPool::current(), &three);
  }
  EXPECT_EQ(&ThreadPool::current(), &ThreadPool::global());
}

// A fully-connected layer large enough that the delegate's GEMM splits it across threads.
struct Linear {
  static constexpr uint32_t kRows = 64, kIn = 256, kOut = 256;
  std::vector<uint8_t> payload = build();
  static std::vector<uint8_t> build() {
    GraphBuilder g;
    std::vector<float> w(kOut * kIn);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3.0f;
    const uint32_t x = g.input({kRows, kIn}, 0), out = g.output({kRows, kOut}, 1);
    g.fully_connected(x, g.f32_constant({kOut, kIn}, w), testing::kNoExt, out);
    return g.payload();
  }
  std::vector<float> run(DelegateHandle& handle) const {
    std::vector<float> in(kRows * kIn);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 5) * 0.5f;
    auto x = OwnedTensor::make<float>(ScalarType::Float, {kRows, kIn}, in);
    auto y = OwnedTensor::make<float>(ScalarType::Float, {kRows, kOut}, {});
    std::vector<EValue> args = {EValue::from_tensor(&x->tensor), EValue::from_tensor(&y->tensor)};
    std::vector<EValue*> ptrs = {&args[0], &args[1]};
    xnnpack()->execute(handle, ptrs);
    return y->values<float>();
  }
};

#if defined(__linux__)
// A thread count of 0 is one thread per CPU the calling thread may run on. Pinned to one CPU (taskset, a
// container's cpuset), that is one thread: pthreadpool's own default counts the machine's CPUs, and its spinning
// threads on one CPU wait out each other's time slices.
TEST(XnnpackOptions, DefaultThreadsAreTheCpusTheThreadMayRunOn) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  const auto count = static_cast<size_t>(CPU_COUNT(&allowed));
  EXPECT_EQ(ThreadPool::default_threads(), count);
  EXPECT_EQ(ThreadPool(0).num_threads(), count);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  int pinned = -1;
  size_t pinned_default = 0, pinned_pool = 0;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    pinned = sched_setaffinity(0, sizeof(one), &one);
    pinned_default = ThreadPool::default_threads();
    ThreadPool pool(0);
    pinned_pool = pool.num_threads();
    pool.set_num_threads(0);
    EXPECT_EQ(pool.num_threads(), 1u);
  }).join();
  ASSERT_EQ(pinned, 0) << "sched_setaffinity failed";
  EXPECT_EQ(pinned_default, 1u);
  EXPECT_EQ(pinned_pool, 1u);
}
#endif

TEST(XnnpackOptions, NumThreadsAtLoadGivesTheDelegateItsOwnPool) {
  const Linear linear;
  const size_t shared_threads = ThreadPool::global().num_threads();
  const auto shared = xnnpack()->init({}, linear.payload, {});
  EXPECT_EQ(backends::xnnpack_delegate_threads(*shared), shared_threads);
  for (int64_t n : {1, 3}) {
    const auto own = init_with({{"num_threads", n}}, linear.payload);
    EXPECT_EQ(backends::xnnpack_delegate_threads(*own), static_cast<size_t>(n));
    // The shared pool is left as it was, and the results do not depend on the pool.
    EXPECT_EQ(linear.run(*own), linear.run(*shared));
  }
  EXPECT_EQ(ThreadPool::global().num_threads(), shared_threads);
  expect_invalid_argument([&] { init_with({{"num_threads", int64_t{-1}}}, linear.payload); }, "'num_threads'");
}

TEST(XnnpackOptions, WorkspaceSharingModes) {
  const Linear linear;
  auto expect_refused = [&](const BackendOptionValue& value) {
    const std::string needle = "'workspace_sharing_mode' must be 0 (disabled";
    expect_invalid_argument([&] { xnnpack()->set_option("workspace_sharing_mode", value); }, needle);
    expect_invalid_argument([&] { init_with({{"workspace_sharing_mode", value}}, linear.payload); }, needle);
  };
  // 1 (per model) is the default; what sharing does is xnnpack_workspace_test.cpp's.
  EXPECT_EQ(std::get<int64_t>(xnnpack()->get_option("workspace_sharing_mode")), 1);
  expect_refused(int64_t{2});
  expect_refused(int64_t{-1});
  expect_refused(std::string("per_model"));
  expect_refused(true);
  EXPECT_EQ(std::get<int64_t>(xnnpack()->get_option("workspace_sharing_mode")), 1);  // refusals change nothing
  xnnpack()->set_option("workspace_sharing_mode", int64_t{0});
  EXPECT_EQ(std::get<int64_t>(xnnpack()->get_option("workspace_sharing_mode")), 0);
  xnnpack()->set_option("workspace_sharing_mode", int64_t{1});
  EXPECT_EQ(std::get<int64_t>(xnnpack()->get_option("workspace_sharing_mode")), 1);
  EXPECT_NE(init_with({{"workspace_sharing_mode", int64_t{0}}}, linear.payload), nullptr);
  EXPECT_NE(init_with({{"workspace_sharing_mode", int64_t{1}}}, linear.payload), nullptr);
}

}  // namespace
}  // namespace etnp::xnn
