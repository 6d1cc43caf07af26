// The process-wide thread pool shared by kernels and the XNNPACK delegate (a pthreadpool underneath).
#pragma once

#include <cstddef>
#include <functional>

typedef struct pthreadpool* pthreadpool_t;

namespace etnp {

class ThreadPool {
 public:
  /// The shared pool. Created on first use with one thread per core.
  static ThreadPool& global();

  /// Threads the pool runs with (including the calling thread).
  size_t num_threads() const;
  /// Recreates the pool with `n` threads (n == 0: one per core). Not to be called while methods run.
  void set_num_threads(size_t n);
  /// The underlying pthreadpool, for XNNPACK.
  pthreadpool_t handle() const { return pool_; }

  /// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on all threads. Runs inline when
  /// the work is too small to split.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  ~ThreadPool();

 private:
  ThreadPool();
  pthreadpool_t pool_ = nullptr;
};

}  // namespace etnp
