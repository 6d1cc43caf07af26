// The process-wide thread pool shared by kernels and the XNNPACK delegate (a pthreadpool underneath).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

typedef struct pthreadpool* pthreadpool_t;

namespace etnp {

class ThreadPool {
 public:
  /// The shared pool: default_threads() threads, started when work first splits (or set_num_threads).
  static ThreadPool& global();
  /// What a thread count of 0 means: one thread per CPU the calling thread may run on (its affinity mask, which
  /// taskset or a container's cpuset can make smaller than the machine), at least 1.
  static size_t default_threads();
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

  /// A pool of its own with `n` threads (n == 0: default_threads()), e.g. for a delegate loaded with its own
  /// thread count. Its threads start when work first needs them (lease(), or a parallel_for that splits).
  explicit ThreadPool(size_t n);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads the pool runs with now (including the calling thread).
  size_t num_threads() const;
  /// Recreates the pool with `n` threads (n == 0: default_threads()), starting them now (one thread: none, the
  /// caller's is the pool). Safe while methods run, from any thread: a
  /// parallel section (a parallel_for, or a Lease's holder) that started before finishes on the threads it
  /// started on, which are stopped when the last such section ends; sections that start afterwards get the
  /// new threads. Never waits for running sections.
  void set_num_threads(size_t n);

  struct Instance;
  /// The pthreadpool current when lease() was called, kept alive (its threads running) while the lease lives,
  /// whatever set_num_threads does meanwhile. For code that calls pthreadpool itself (XNNPACK operators).
  class Lease {
   public:
    pthreadpool_t handle() const;
    size_t num_threads() const;

   private:
    friend class ThreadPool;
    explicit Lease(std::shared_ptr<const Instance> instance) : instance_(std::move(instance)) {}
    std::shared_ptr<const Instance> instance_;
  };
  Lease lease() const;
  /// The pthreadpool current now. Valid until the next set_num_threads: code that may race one holds a
  /// lease() instead.
  pthreadpool_t handle() const;

  /// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on all threads. Runs inline when
  /// the work is too small to split.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  ~ThreadPool();

 private:
  mutable std::mutex mutex_;                   ///< Guards instance_ and requested_.
  mutable std::shared_ptr<const Instance> instance_;  ///< The current pthreadpool; null until the first lease().
  size_t requested_ = 0;                       ///< The count asked last (0: default_threads()).
  /// instance_'s thread count (before it starts: the count it will start), read without the lock.
  mutable std::atomic<size_t> threads_{1};
};

}  // namespace etnp
