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
  /// The pool work started on this thread runs on: the one a ThreadPool::Use on this thread names, else
  /// global(). Kernels that split work take this one, so a caller can run them on a pool of its own.
  static ThreadPool& current();

  /// Makes `pool` this thread's current() pool while it lives (the previous one again afterwards).
  class Use {
   public:
    explicit Use(ThreadPool& pool);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    ThreadPool* previous_;
  };

  /// A pool of its own with `n` threads (n == 0: one per core), e.g. for a delegate loaded with its own
  /// thread count.
  explicit ThreadPool(size_t n);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

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
  pthreadpool_t pool_ = nullptr;
};

}  // namespace etnp
