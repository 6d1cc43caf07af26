// Runs a parsed XNNGraph. Nodes Debian's XNNPACK can run (the 2022 or the 2024 one, through xnn_ops.h) become
// XNNPACK operators created once at load (weights packed then); the rest run on the delegate's own kernels
// (xnn_kernels.h). The delegate
// propagates shapes itself, plans one arena for all intermediate values (re-planned only when the input
// shapes change) and binds the DelegateCall's tensors directly as graph inputs and outputs.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_steps.h"
#include "compute/large_pages.h"
#include "etnp/backend.h"
#include "etnp/error.h"
#include "etnp/threadpool.h"
#include "etnp/value.h"

namespace etnp::xnn {

/// What a built executor consists of, for tests and diagnostics.
struct ExecutorStats {
  size_t xnnpack_operators = 0;  ///< Nodes run by XNNPACK operators.
  size_t own_kernels = 0;        ///< Nodes run by the delegate's kernels.
  size_t fused_clamps = 0;       ///< Clamp nodes folded into their producer.
  size_t fused_pairs = 0;        ///< Node pairs run as one step (a depthwise convolution and its 1x1 reader).
};

/// A parsed graph after the checks an executor makes at load: shapes propagated from the serialized input
/// shapes, clamps fused into their producers, every node's rule (xnn_rules.h) checked.
struct CheckedGraph {
  Graph graph;
  std::vector<Shape> shapes;  ///< Per value, from the serialized input shapes.
  size_t fused_clamps = 0;
  /// Why no executor can be built from it, each naming the node ("node 3 (XNNConv2d, debug handle 7) with
  /// types ... is not supported by this runtime: why"); empty: it builds.
  std::vector<std::string> reasons;
};

/// Makes the load-time checks without building anything (no XNNPACK object is created, no weight packed).
/// A shape error stops the checks at that node; otherwise every unsupported node gives a reason.
CheckedGraph check_graph(Graph graph);

struct ExecutorOptions {
  /// The weights its own kernels pack are shared with every other executor through compute::WeightCache
  /// (XnnpackBackend option weight_cache_enabled); bytes() then leaves them out.
  bool share_weights = false;
  /// Which kernels run the nodes both XNNPACK and the delegate can run (ETNP_XNNPACK_ENGINE).
  Engines engines = Engines::Measured;
  /// Called with each constant's bytes once the last node reading it is built (BackendInitContext's
  /// release_file_pages): the build copies or packs what it keeps, so a file's pages need not stay resident
  /// beside what was made of them. May be empty.
  std::function<void(std::span<const uint8_t>)> release_constant;
  /// The method's memory (BackendInitContext::workspace), or null: inputs it holds are read in place however
  /// near a page's end they lie (else one that ends within XNN_EXTRA_BYTES of it is read from a padded copy).
  MethodWorkspace* workspace = nullptr;
  /// The intermediate values live in the workspace's shared scratch (XnnpackBackend's workspace_sharing_mode 1)
  /// instead of an arena of the executor's own. Needs a workspace.
  bool shared_arena = false;
};

class Executor {
 public:
  /// Builds the executor (creates XNNPACK operators, copies the constants it needs later). Constant bytes
  /// in `graph` need only be valid during the call. Throws etnp::Error(ProgramLoadError) with the first of
  /// check_graph's reasons.
  explicit Executor(Graph graph);
  explicit Executor(CheckedGraph checked, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Runs the graph on the DelegateCall's args (inputs then outputs); resizes the output tensors. XNNPACK's
  /// operators and the delegate's own kernels all run on `pool` (it is ThreadPool::current() meanwhile).
  /// Throws etnp::Error(ExecutionError) on bad args or shapes. Calls on one executor are serialized.
  void execute(std::span<EValue* const> args, ThreadPool& pool = ThreadPool::global());

  const ExecutorStats& stats() const { return stats_; }
  /// Bytes of the intermediate-value arena for the current input shapes.
  size_t arena_bytes() const { return arena_size_; }
  /// Memory the executor holds alone: its copies of constants, the weights its own kernels packed unless they
  /// are shared (then compute::WeightCache counts them, once), its own arena (once a run sized it; a shared one
  /// the method counts) and the padded copies of inputs it made. XNNPACK operators' packed weights are not
  /// included: the library does not report them.
  size_t bytes() const { return constant_bytes_ + packed_.own_bytes + arena_capacity_ + staging_bytes_; }
  /// The packings its own kernels use, in build order; with shared weights, equal ones are the same pointer.
  const std::vector<const void*>& packed_weights() const { return packed_.objects; }
  /// The weight cache's packings among them (ExecutorOptions::share_weights), with their bytes.
  const std::vector<std::pair<const void*, size_t>>& shared_packings() const { return packed_.shared_objects; }

 private:
  struct AlignedDeleter {
    void operator()(uint8_t* p) const;
  };
  using AlignedBytes = std::unique_ptr<uint8_t[], AlignedDeleter>;
  static AlignedBytes allocate(size_t bytes);

  void build_steps(const std::function<void(std::span<const uint8_t>)>& release_constant);
  void propagate_shapes();  ///< For the current input shapes; throws ExecutionError.
  void plan_memory();

  Graph graph_;
  std::vector<uint8_t> is_constant_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<AlignedBytes> constant_storage_;
  size_t constant_bytes_ = 0;  ///< in constant_storage_
  PackedWeights packed_;       ///< weights packed for the own kernels
  Engines engines_ = Engines::Measured;
  std::vector<void*> constant_data_;  ///< Per value: the delegate's copy of a constant used at run time.

  std::vector<Shape> shapes_;  ///< Current shape of every value.
  std::vector<Shape> input_shapes_;
  bool planned_ = false;
  std::vector<uint32_t> storage_root_;  ///< Value whose storage a value shares (itself if none).
  /// Per node: it runs in one step with the next node, so what it reads must outlive the next node's outputs'
  /// first write (the memory plan keeps its inputs live through the next node).
  std::vector<uint8_t> runs_with_next_;
  /// Values in the arena, with their offsets, for pointing them at where the arena lies.
  std::vector<std::pair<uint32_t, size_t>> arena_values_;
  MethodWorkspace* workspace_ = nullptr;  ///< ExecutorOptions::workspace
  bool shared_arena_ = false;             ///< the arena is workspace_'s shared scratch
  compute::ZeroedBuffer arena_;  ///< the intermediate values without a workspace (from 2 MiB on huge pages)
  size_t arena_capacity_ = 0;
  uint8_t* arena_base_ = nullptr;  ///< where arena_values_ point now (null: not yet, or re-planned since)
  StepScratch scratch_;  ///< RunContext::scratch
  size_t arena_size_ = 0;
  std::vector<void*> data_;            ///< Per value: constants' and the arena's set by a plan, the rest per run.
  std::vector<uint32_t> views_;        ///< Values sharing another's storage (storage_root_), set per run.
  std::vector<size_t> input_bytes_;    ///< Per external input: its bytes at the current shapes.
  std::vector<AlignedBytes> staging_;  ///< Per external input: padded copy when a caller buffer may over-read.
  std::vector<size_t> staging_capacity_;
  size_t staging_bytes_ = 0;  ///< the sum of staging_capacity_
  ExecutorStats stats_;
  std::mutex mutex_;
};

}  // namespace etnp::xnn
