#include "backends/xnnpack/xnn_steps.h"

#include <algorithm>

#include "backends/xnnpack/xnn_rules.h"
#include "compute/parallel.h"
#include "etnp/error.h"

namespace etnp::xnn {

void run_fail(const std::string& msg) { throw Error(ErrorKind::ExecutionError, "XNNPACK: " + msg); }

namespace {

[[noreturn]] void load_fail(const std::string& msg) {
  throw Error(ErrorKind::ProgramLoadError, "XNNPACK payload: " + msg);
}

/// Below this many elements read and written, an operator without weights (XNNPACK's element-wise operators,
/// pooling) runs on the calling thread. A lower bar than the weighted operators': they mostly follow a split
/// convolution, and on one thread they also read the share of their input the other core wrote through that
/// core's cache (EfficientNet-B0's 65 sigmoids and products: -6% at 2 threads against compute::kParallelWork).
constexpr size_t kElementwiseParallelWork = compute::kParallelWork / 16;

}  // namespace

Step::Step(const Node& node, const char* runner)
    : node_(node), label_(std::string(node_kind_name(node.kind)) + " (" + runner + ")") {}

size_t Step::work_estimate(const Shape* shapes) const {
  if (node_.outputs.empty()) return 0;
  const Shape& out = shapes[node_.outputs[0]];
  size_t work = out.numel();
  if ((node_kind_traits(node_.kind) & kWeighted) != 0) {
    if (node_.inputs.size() >= 2 && node_.inputs[1] != kInvalidId && out.rank > 0 && out[out.rank - 1] > 0) {
      work *= std::max<size_t>(1, shapes[node_.inputs[1]].numel() / out[out.rank - 1]);
    }
  } else if (!node_.inputs.empty() && node_.inputs[0] != kInvalidId) {
    work += shapes[node_.inputs[0]].numel();
  }
  return work;
}

XnnStep::XnnStep(const Node& node, const char* what, Create create, Setup setup, Key key, const Shape* shapes)
    : Step(node, "XNNPACK"), what_(what), create_(std::move(create)), setup_(std::move(setup)), key_(std::move(key)) {
  if (key_) key_value_ = key_(shapes);
  const xnn_status s = create_(shapes, op_);
  if (s != xnn_status_success || !op_.created()) {
    load_fail(node_.describe() + ": XNNPACK could not create its " + what_ + " operator (" + ops::status_name(s) +
              ")");
  }
  if (!key_) create_ = nullptr;  // it may hold pointers to load-time data
}

void XnnStep::reshape(const Shape* shapes) {
  bound_valid_ = false;
  const bool weighted = (node_kind_traits(node_.kind) & kWeighted) != 0;
  serial_ = work_estimate(shapes) < (weighted ? compute::kParallelWork : kElementwiseParallelWork);
  if (!key_) return;
  const size_t k = key_(shapes);
  if (k == key_value_) return;
  ops::Operator op;
  const xnn_status s = create_(shapes, op);
  if (s != xnn_status_success || !op.created()) {
    run_fail(node_.describe() + ": XNNPACK could not recreate its " + what_ + " operator (" + ops::status_name(s) +
             ")");
  }
  op_ = std::move(op);
  key_value_ = k;
}

bool XnnStep::set_up_for(const RunContext& ctx) {
  size_t i = 0;
  bool same = bound_valid_ && bound_pool_ == ctx.pool;
  for (const auto* ids : {&node_.inputs, &node_.outputs}) {
    for (uint32_t id : *ids) {
      const void* data = id == kInvalidId ? nullptr : ctx.data[id];
      if (i == bound_.size()) bound_.push_back(nullptr);
      same = same && bound_[i] == data;
      bound_[i++] = data;
    }
  }
  bound_pool_ = ctx.pool;
  return same;
}

void XnnStep::run(const RunContext& ctx) {
  // Small operators run on the calling thread: waking the pool costs more than they take.
  RunContext local = ctx;
  if (serial_) local.pool = nullptr;
  // XNNPACK keeps what a setup computed (the buffers, broadcast strides, indirection buffers): a node whose
  // shapes (no reshape since), buffers and pool are those of its last setup only runs. Most are: intermediates
  // live at fixed places in the arena.
  xnn_status s = xnn_status_success;
  if (!set_up_for(local)) {
    bound_valid_ = false;
    s = setup_(op_, local);
    bound_valid_ = s == xnn_status_success;
  }
  if (s == xnn_status_success) s = op_.run(local.pool);
  if (s != xnn_status_success) {
    run_fail(node_.describe() + ": XNNPACK " + what_ + " failed (" + ops::status_name(s) + ")");
  }
}

void StepBuilder::add_xnn(const char* what, XnnStep::Create create, XnnStep::Setup setup, XnnStep::Key key) {
  steps.push_back(std::make_unique<XnnStep>(view.node, what, std::move(create), std::move(setup), std::move(key),
                                            view.shapes));
  ++xnnpack_operators;
}

void StepBuilder::add_own(OwnStep::Run run, OwnStep::Reshape reshape, const char* runner) {
  steps.push_back(std::make_unique<OwnStep>(view.node, std::move(run), std::move(reshape), runner));
  ++own_kernels;
}

}  // namespace etnp::xnn
