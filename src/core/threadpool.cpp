#include "etnp/threadpool.h"

#include <pthreadpool.h>

#include <thread>

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

ThreadPool::ThreadPool(size_t n) { pool_ = pthreadpool_create(n); }

ThreadPool::~ThreadPool() {
  if (pool_ != nullptr) pthreadpool_destroy(pool_);
}

size_t ThreadPool::num_threads() const { return pool_ == nullptr ? 1 : pthreadpool_get_threads_count(pool_); }

void ThreadPool::set_num_threads(size_t n) {
  if (pool_ != nullptr) pthreadpool_destroy(pool_);
  pool_ = pthreadpool_create(n);
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  const size_t threads = num_threads();
  if (grain == 0) grain = 1;
  if (threads <= 1 || n <= grain) {
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
  pthreadpool_parallelize_1d(pool_, run_chunk, &task, count, 0);
  ETNP_TSAN_ACQUIRE(&task);
}

}  // namespace etnp
