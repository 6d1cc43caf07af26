// "XnnpackBackend": parses the delegate payload (xnn_graph), builds an executor (xnn_executor) per
// delegate at load and runs it on each DelegateCall.
#include <atomic>
#include <mutex>

#include "backends/xnnpack/xnnpack_backend.h"
#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_ops.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"

namespace etnp::backends {
namespace {

constexpr const char* kNumThreads = "num_threads";
constexpr const char* kWorkspaceSharingMode = "workspace_sharing_mode";

class XnnpackHandle final : public DelegateHandle {
 public:
  XnnpackHandle(std::unique_ptr<xnn::Executor> executor, int64_t workspace_mode)
      : executor_(std::move(executor)), workspace_mode_(workspace_mode) {}
  xnn::Executor& executor() { return *executor_; }
  int64_t workspace_mode() const { return workspace_mode_; }
  size_t bytes() const override { return executor_->bytes(); }

 private:
  std::unique_ptr<xnn::Executor> executor_;
  int64_t workspace_mode_;
};

int64_t workspace_mode_from(const BackendOptionValue& value) {
  const auto* mode = std::get_if<int64_t>(&value);
  if (mode == nullptr || *mode < 0 || *mode > 2) {
    throw Error(ErrorKind::InvalidArgument,
                "XnnpackBackend option 'workspace_sharing_mode' must be 0 (disabled), 1 (per model) or 2 (global)");
  }
  return *mode;
}

class XnnpackBackend final : public Backend {
 public:
  std::string_view name() const override { return "XnnpackBackend"; }

  bool is_available() const override {
    static const bool available = xnn::ops::initialize() == xnn_status_success;
    return available;
  }

  std::unique_ptr<DelegateHandle> init(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                       std::span<const CompileSpec> /*compile_specs*/) override {
    if (!is_available()) throw Error(ErrorKind::BackendNotAvailable, "XNNPACK cannot run on this machine");
    int64_t workspace_mode = workspace_mode_.load();
    if (ctx.load_options != nullptr) {
      for (const auto& [key, value] : *ctx.load_options) {
        if (key == kWorkspaceSharingMode) {
          workspace_mode = workspace_mode_from(value);
        } else if (key != kNumThreads) {
          throw Error(ErrorKind::InvalidArgument, "XnnpackBackend has no load option '" + key + "'");
        }
      }
    }
    xnn::Graph graph = xnn::parse_graph(payload, ctx.named_data);
    auto executor = std::make_unique<xnn::Executor>(std::move(graph));
    return std::make_unique<XnnpackHandle>(std::move(executor), workspace_mode);
  }

  void execute(DelegateHandle& handle, std::span<EValue* const> args) override {
    auto* h = dynamic_cast<XnnpackHandle*>(&handle);
    if (h == nullptr) throw Error(ErrorKind::ExecutionError, "XnnpackBackend: handle from another backend");
    h->executor().execute(args);
  }

  void set_option(std::string_view key, const BackendOptionValue& value) override {
    if (key == kNumThreads) {
      const auto* n = std::get_if<int64_t>(&value);
      if (n == nullptr || *n < 0 || *n > 1024) {
        throw Error(ErrorKind::InvalidArgument,
                    "XnnpackBackend option 'num_threads' must be an integer in [0, 1024] (0 = one per core)");
      }
      ThreadPool::global().set_num_threads(static_cast<size_t>(*n));
      return;
    }
    if (key == kWorkspaceSharingMode) {
      workspace_mode_.store(workspace_mode_from(value));
      return;
    }
    Backend::set_option(key, value);
  }

  BackendOptionValue get_option(std::string_view key) const override {
    if (key == kNumThreads) return static_cast<int64_t>(ThreadPool::global().num_threads());
    if (key == kWorkspaceSharingMode) return workspace_mode_.load();
    return Backend::get_option(key);
  }

  std::vector<std::string> option_names() const override { return {kNumThreads, kWorkspaceSharingMode}; }

 private:
  // The 2022 library has no workspaces; the mode is kept so callers can read back what they set.
  std::atomic<int64_t> workspace_mode_{0};
};

}  // namespace

std::shared_ptr<Backend> make_xnnpack_backend() { return std::make_shared<XnnpackBackend>(); }

}  // namespace etnp::backends
