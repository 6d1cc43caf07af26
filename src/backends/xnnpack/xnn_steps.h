// What the executor runs: one step per node, built at load by the node's rule (xnn_rules.h). A step is either
// an XNNPACK operator (xnn_ops.h) or one of the delegate's own kernels.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_ops.h"
#include "compute/conv_indirect.h"
#include "compute/weight_cache.h"

namespace etnp::xnn {

/// Which kernels run the nodes that both XNNPACK and the delegate can run (README.md, "What runs where").
enum class Engines : uint8_t {
  Measured,  ///< the faster of the two on the machines measured, for this build's library (the default)
  Library,   ///< XNNPACK's operator wherever this build's library has one
  Own,       ///< the delegate's kernel wherever it has one
};

/// Buffers an own step may use while it runs, one set for all of an executor's steps (they run one at a time), so
/// that nothing in them outlives the step's run: held per step, the int8 convolutions' gathered rows were 3.4 MB
/// of ResNet-18's memory after a run.
struct StepScratch {
  std::vector<uint8_t> bytes;
  std::vector<int32_t> ints;
  std::vector<float> floats;
  compute::Conv2dScratch conv;
};

/// What a step reads during a run: per value, its data and current shape; the pool to run on; the scratch.
struct RunContext {
  void* const* data;
  const Shape* shapes;
  pthreadpool_t pool;
  StepScratch* scratch;
};

class Step {
 public:
  /// `runner`: what runs the node, for profiles ("XNNPACK", "own kernel").
  Step(const Node& node, const char* runner);
  virtual ~Step() = default;
  /// Called after the shapes changed, before run.
  virtual void reshape(const Shape* /*shapes*/) {}
  virtual void run(const RunContext& ctx) = 0;
  const Node& node() const { return node_; }
  /// "XNNConv2d (own kernel)": the name of the step's profile events.
  const std::string& label() const { return label_; }

 protected:
  /// Multiply-adds for weighted nodes (outputs x reduction length), elements read and written otherwise.
  size_t work_estimate(const Shape* shapes) const;
  Node node_;
  std::string label_;
};

/// A node run by one XNNPACK operator. Operators whose create-time parameters depend on shapes (the channel
/// count of a pooling, say) name that parameter with `key` and are recreated when it changes.
class XnnStep final : public Step {
 public:
  using Create = std::function<xnn_status(const Shape* shapes, ops::Operator& op)>;
  using Setup = std::function<xnn_status(ops::Operator& op, const RunContext& ctx)>;
  using Key = std::function<size_t(const Shape* shapes)>;

  XnnStep(const Node& node, const char* what, Create create, Setup setup, Key key, const Shape* shapes);
  void reshape(const Shape* shapes) override;
  void run(const RunContext& ctx) override;

 private:
  /// Whether the operator is set up for ctx's buffers of the node's values and pool (recording them if not).
  bool set_up_for(const RunContext& ctx);

  std::string what_;
  Create create_;
  Setup setup_;
  Key key_;
  size_t key_value_ = 0;
  ops::Operator op_;
  bool serial_ = false;
  /// The buffers of the node's inputs and outputs and the pool of the last setup; cleared by reshape.
  std::vector<const void*> bound_;
  pthreadpool_t bound_pool_ = nullptr;
  bool bound_valid_ = false;
};

/// A node run by the delegate's own kernels.
class OwnStep final : public Step {
 public:
  using Run = std::function<void(const RunContext& ctx)>;
  using Reshape = std::function<void(const Shape* shapes)>;
  OwnStep(const Node& node, Run run, Reshape reshape = nullptr, const char* runner = "own kernel")
      : Step(node, runner), run_(std::move(run)), reshape_(std::move(reshape)) {}
  void reshape(const Shape* shapes) override {
    if (reshape_) reshape_(shapes);
  }
  void run(const RunContext& ctx) override { run_(ctx); }

 private:
  Run run_;
  Reshape reshape_;
};

/// The weights an executor's own kernels packed at load.
struct PackedWeights {
  /// Packings go through compute::WeightCache::global() (XnnpackBackend option weight_cache_enabled): equal
  /// ones are held once in the process, and the cache, not the executor, reports their bytes.
  bool shared = false;
  size_t own_bytes = 0;              ///< Bytes of the packings this executor holds alone (none when shared).
  std::vector<const void*> objects;  ///< Every packing its steps use, in build order (tests compare them).
  std::vector<std::pair<const void*, size_t>> shared_objects;  ///< The cache's entries it holds, with their bytes.

  /// `packing` itself or, when shared, the cache's equal entry; the step keeps what this returns.
  template <typename T>
  std::shared_ptr<const T> hold(std::shared_ptr<const T> packing) {
    if (shared) {
      packing = compute::WeightCache::global().share(std::move(packing));
      shared_objects.emplace_back(packing.get(), packing->bytes());
    } else {
      own_bytes += packing->bytes();
    }
    objects.push_back(packing.get());
    return packing;
  }
};

[[noreturn]] void run_fail(const std::string& msg);

}  // namespace etnp::xnn
