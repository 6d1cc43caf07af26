#include "etnp/threadpool.h"

#include <pthreadpool.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <thread>
#include <utility>

// pthreadpool hands work to its threads with atomics and futexes that ThreadSanitizer does not see (the
// library is not instrumented). These annotations state the ordering it provides: the caller's writes before
// a parallel region happen before each chunk, and every chunk happens before the caller continues.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define ETNP_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define ETNP_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define ETNP_TSAN_ACQUIRE(addr) ((void)(addr))
#define ETNP_TSAN_RELEASE(addr) ((void)(addr))
#endif

namespace etnp {
namespace {

struct ChunkTask {
  const std::function<void(size_t, size_t)>* fn;
  size_t n;
  size_t chunk;
};

void run_chunk(void* ctx, size_t index) {
  ETNP_TSAN_ACQUIRE(ctx);
  auto* t = static_cast<ChunkTask*>(ctx);
  size_t begin = index * t->chunk;
  size_t end = begin + t->chunk < t->n ? begin + t->chunk : t->n;
  (*t->fn)(begin, end);
  ETNP_TSAN_RELEASE(ctx);
}

// The pool a ThreadPool::Use made current on this thread; nullptr: the global one. (A pool's worker threads
// have none: work they run does not start nested parallel regions.)
thread_local ThreadPool* current_pool = nullptr;

}  // namespace

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(0);
  return pool;
}

ThreadPool& ThreadPool::current() { return current_pool != nullptr ? *current_pool : global(); }

ThreadPool::Use::Use(ThreadPool& pool) : previous_(current_pool) { current_pool = &pool; }

ThreadPool::Use::~Use() { current_pool = previous_; }

size_t ThreadPool::default_threads() {
#if defined(__linux__)
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    return static_cast<size_t>(std::max(1, CPU_COUNT(&allowed)));
  }
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// One pthreadpool; destroyed (its threads joined) when the ThreadPool and every Lease of it have let go. n == 0
// is default_threads(), not pthreadpool's own default, which counts every CPU of the machine: with fewer allowed
// (taskset, a container's cpuset) its spinning threads share a CPU and wait out each other's time slices
// (MobileNetV2 on one allowed CPU of two: 424 ms a run instead of 20).
struct ThreadPool::Instance {
  explicit Instance(size_t n)
      : pool(pthreadpool_create(n == 0 ? default_threads() : n)),
        threads(pool == nullptr ? 1 : pthreadpool_get_threads_count(pool)) {}
  ~Instance() {
    if (pool != nullptr) pthreadpool_destroy(pool);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  pthreadpool_t pool;
  size_t threads;
};

pthreadpool_t ThreadPool::Lease::handle() const { return instance_->pool; }

size_t ThreadPool::Lease::num_threads() const { return instance_->threads; }

ThreadPool::ThreadPool(size_t n) : requested_(n), threads_(n == 0 ? default_threads() : n) {}

ThreadPool::~ThreadPool() = default;

size_t ThreadPool::num_threads() const { return threads_.load(std::memory_order_relaxed); }

ThreadPool::Lease ThreadPool::lease() const {
  std::lock_guard lock(mutex_);
  if (instance_ == nullptr) {
    // The default count starts on first use: a process that never splits work (only small operators) starts
    // no threads, and a count set before any work (`etnp bench --threads 1`) does not start the default
    // count's first (their workers spin for milliseconds after they start).
    instance_ = std::make_shared<const Instance>(requested_);
    threads_.store(instance_->threads, std::memory_order_relaxed);
  }
  return Lease(instance_);
}

pthreadpool_t ThreadPool::handle() const { return lease().handle(); }

void ThreadPool::set_num_threads(size_t n) {
  {
    std::lock_guard lock(mutex_);
    requested_ = n;
    const size_t count = n == 0 ? default_threads() : n;
    if (instance_ == nullptr && count <= 1) {  // nothing to start: work runs on the caller's thread
      threads_.store(1, std::memory_order_relaxed);
      return;
    }
  }
  // A count asked for is started now (as the official runtime's pool reset does), not inside the first load or
  // run that splits work. The new threads start outside the lock; the old instance is released outside it too
  // (its threads are joined here, or by the last running section that holds it).
  auto fresh = std::make_shared<const Instance>(n);
  std::shared_ptr<const Instance> old;
  {
    std::lock_guard lock(mutex_);
    old = std::exchange(instance_, std::move(fresh));
    threads_.store(instance_->threads, std::memory_order_relaxed);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  if (num_threads() <= 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // The section runs on the instance current now, kept alive by the lease (a set_num_threads meanwhile does
  // not stop its threads); one lock and reference count per parallel region, none per chunk.
  const Lease lease = this->lease();
  const size_t threads = lease.num_threads();
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  size_t chunks = (n + grain - 1) / grain;
  if (chunks > threads * 4) chunks = threads * 4;
  ChunkTask task{&fn, n, (n + chunks - 1) / chunks};
  const size_t count = (n + task.chunk - 1) / task.chunk;
  // Workers spin briefly before sleeping (pthreadpool's default, as XNNPACK's own calls use): a model's
  // next parallel region usually starts within microseconds, and a futex wake-up per region cost more
  // than the spinning on the measured 2-core machines (bench/RESULTS.md).
  ETNP_TSAN_RELEASE(&task);
  pthreadpool_parallelize_1d(lease.handle(), run_chunk, &task, count, 0);
  ETNP_TSAN_ACQUIRE(&task);
}

}  // namespace etnp
