// "XnnpackBackend": parses the delegate payload (xnn_graph), checks it (xnn_executor's check_graph, the node
// rules of xnn_rules.h), builds an executor per delegate at load and runs it on each DelegateCall.
#include "backends/xnnpack/xnnpack_backend.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_ops.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"

namespace etnp::backends {
namespace {

constexpr const char* kNumThreads = "num_threads";
constexpr const char* kWorkspaceSharingMode = "workspace_sharing_mode";
constexpr const char* kWeightCacheEnabled = "weight_cache_enabled";
constexpr std::string_view kPayloadPrefix = "XNNPACK payload: ";

int64_t num_threads_from(const BackendOptionValue& value) {
  const auto* n = std::get_if<int64_t>(&value);
  if (n == nullptr || *n < 0 || *n > 1024) {
    throw Error(ErrorKind::InvalidArgument,
                "XnnpackBackend option 'num_threads' must be an integer in [0, 1024] (0 = one per CPU the process "
                "may run on)");
  }
  return *n;
}

// 0 (disabled): each delegate keeps an arena of its own for its intermediate values. 1 (per model, which the
// official runtime scopes to the delegates loaded with one method's allocator): the delegates of one method share
// one (MethodWorkspace::shared_scratch); a method runs one delegate at a time, so nothing waits. 2 (global, one
// for every delegate of the process) would make methods running on different threads wait for each other.
int64_t workspace_mode_from(const BackendOptionValue& value) {
  const auto* mode = std::get_if<int64_t>(&value);
  if (mode == nullptr || (*mode != 0 && *mode != 1)) {
    throw Error(ErrorKind::InvalidArgument,
                "XnnpackBackend option 'workspace_sharing_mode' must be 0 (disabled: each delegate keeps its own "
                "intermediate values) or 1 (per model: the delegates of one method share them, the default); 2 "
                "(global) is not available, it would make methods on different threads wait for each other");
  }
  return *mode;
}

bool weight_cache_from(const BackendOptionValue& value) {
  const auto* on = std::get_if<bool>(&value);
  if (on == nullptr) {
    throw Error(ErrorKind::InvalidArgument,
                std::string("XnnpackBackend option 'weight_cache_enabled' must be a bool (true: share packed "
                            "weights between methods and programs), not ") +
                    (std::holds_alternative<int64_t>(value) ? "int" : "str"));
  }
  return *on;
}
/// ETNP_XNNPACK_ENGINE, read at each load: which kernels run the nodes both XNNPACK and the delegate have
/// (a diagnostic and benchmarking switch; README.md of the delegate, "What runs where").
xnn::Engines engines_from_environment() {
  const char* value = std::getenv("ETNP_XNNPACK_ENGINE");
  if (value == nullptr || *value == '\0') return xnn::Engines::Measured;
  const std::string_view v(value);
  if (v == "measured") return xnn::Engines::Measured;
  if (v == "xnnpack") return xnn::Engines::Library;
  if (v == "own") return xnn::Engines::Own;
  throw Error(ErrorKind::InvalidArgument, "ETNP_XNNPACK_ENGINE='" + std::string(v) +
                                              "' is not one of measured (the default), xnnpack, own");
}

/// What the options given at load ask of one delegate.
struct LoadSettings {
  std::optional<size_t> num_threads;  ///< A pool of its own with this many threads; none: the shared pool.
  std::optional<bool> weight_cache;   ///< Share packed weights (compute::WeightCache); none: the global option.
  std::optional<int64_t> workspace_mode;  ///< workspace_sharing_mode; none: the global option.
  xnn::Engines engines = xnn::Engines::Measured;
};

LoadSettings load_settings(const BackendInitContext& ctx) {
  LoadSettings s;
  s.engines = engines_from_environment();
  if (ctx.load_options == nullptr) return s;
  for (const auto& [key, value] : *ctx.load_options) {
    if (key == kNumThreads) {
      s.num_threads = static_cast<size_t>(num_threads_from(value));
    } else if (key == kWorkspaceSharingMode) {
      s.workspace_mode = workspace_mode_from(value);
    } else if (key == kWeightCacheEnabled) {
      s.weight_cache = weight_cache_from(value);
    } else {
      throw Error(ErrorKind::InvalidArgument, "XnnpackBackend has no load option '" + key + "'");
    }
  }
  return s;
}

/// A problem that keeps a payload from loading, with the error init() raises for it.
struct Problem {
  ErrorKind kind;
  std::string text;  ///< without the "XNNPACK payload: " prefix
};

/// Everything init() checks, in its order, before it builds anything.
struct Checked {
  std::vector<Problem> problems;
  LoadSettings settings;
  std::optional<xnn::CheckedGraph> graph;
};

std::string without_prefix(std::string message) {
  if (message.rfind(kPayloadPrefix, 0) == 0) message.erase(0, kPayloadPrefix.size());
  return message;
}

class XnnpackHandle final : public DelegateHandle {
 public:
  XnnpackHandle(std::unique_ptr<ThreadPool> pool, std::unique_ptr<xnn::Executor> executor)
      : pool_(std::move(pool)), executor_(std::move(executor)) {}
  void execute(std::span<EValue* const> args) { executor_->execute(args, pool_ ? *pool_ : ThreadPool::global()); }
  size_t threads() const { return (pool_ ? *pool_ : ThreadPool::global()).num_threads(); }
  size_t bytes() const override { return executor_->bytes(); }
  std::vector<std::pair<const void*, size_t>> shared_packings() const override { return executor_->shared_packings(); }
  const std::vector<const void*>& packed_weights() const { return executor_->packed_weights(); }

 private:
  std::unique_ptr<ThreadPool> pool_;  ///< The delegate's own pool (num_threads given at load), or null.
  std::unique_ptr<xnn::Executor> executor_;
};

class XnnpackBackend final : public Backend {
 public:
  std::string_view name() const override { return "XnnpackBackend"; }

  bool is_available() const override {
    static const bool available = xnn::ops::initialize() == xnn_status_success;
    return available;
  }

  std::unique_ptr<DelegateHandle> init(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                       std::span<const CompileSpec> /*compile_specs*/) override {
    Checked c = check(ctx, payload);
    if (!c.problems.empty()) {
      const Problem& first = c.problems[0];
      const size_t more = c.problems.size() - 1;
      const std::string suffix = more == 0 ? "" : " (and " + std::to_string(more) + " more)";
      if (first.kind != ErrorKind::ProgramLoadError) throw Error(first.kind, first.text + suffix);
      throw Error(first.kind, std::string(kPayloadPrefix) + first.text + suffix);
    }
    auto pool = c.settings.num_threads ? std::make_unique<ThreadPool>(*c.settings.num_threads) : nullptr;
    const bool share = c.settings.weight_cache.value_or(weight_cache_enabled_.load());
    const bool per_model = c.settings.workspace_mode.value_or(workspace_mode_.load()) == 1;
    auto executor = std::make_unique<xnn::Executor>(
        std::move(*c.graph),
        xnn::ExecutorOptions{share, c.settings.engines, ctx.release_file_pages, ctx.workspace, per_model});
    return std::make_unique<XnnpackHandle>(std::move(pool), std::move(executor));
  }

  SupportVerdict supports(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                          std::span<const CompileSpec> /*compile_specs*/) const override {
    SupportVerdict verdict;
    for (Problem& p : check(ctx, payload).problems) verdict.reasons.push_back(std::move(p.text));
    return verdict;
  }

  std::string library() const override {
    return xnn::ops::reshape_api() ? "XNNPACK, create/reshape/setup operator API (2024 and later releases: Debian 13)"
                                   : "XNNPACK, create/setup operator API (the 2022 release: Debian 12)";
  }

  void execute(DelegateHandle& handle, std::span<EValue* const> args) override {
    auto* h = dynamic_cast<XnnpackHandle*>(&handle);
    if (h == nullptr) throw Error(ErrorKind::ExecutionError, "XnnpackBackend: handle from another backend");
    h->execute(args);
  }

  void set_option(std::string_view key, const BackendOptionValue& value) override {
    if (key == kNumThreads) {
      ThreadPool::global().set_num_threads(static_cast<size_t>(num_threads_from(value)));
      return;
    }
    if (key == kWorkspaceSharingMode) {
      workspace_mode_ = workspace_mode_from(value);
      return;
    }
    if (key == kWeightCacheEnabled) {
      weight_cache_enabled_ = weight_cache_from(value);
      return;
    }
    Backend::set_option(key, value);
  }

  BackendOptionValue get_option(std::string_view key) const override {
    if (key == kNumThreads) return static_cast<int64_t>(ThreadPool::global().num_threads());
    if (key == kWorkspaceSharingMode) return workspace_mode_.load();
    if (key == kWeightCacheEnabled) return weight_cache_enabled_.load();
    return Backend::get_option(key);
  }

  std::vector<std::string> option_names() const override {
    return {kNumThreads, kWorkspaceSharingMode, kWeightCacheEnabled};
  }

 private:
  /// Delegates initialized while it is on share their packed weights; already built ones keep theirs.
  std::atomic<bool> weight_cache_enabled_{true};
  /// workspace_sharing_mode for delegates initialized from now on (workspace_mode_from).
  std::atomic<int64_t> workspace_mode_{1};

  // What init() checks, in its order: availability, load options, the payload (every missing named-data
  // key, then the first malformed part, or every unsupported node). Builds nothing.
  Checked check(const BackendInitContext& ctx, std::span<const uint8_t> payload) const {
    Checked c;
    if (!is_available()) {
      c.problems.push_back({ErrorKind::BackendNotAvailable, "XNNPACK cannot run on this machine"});
      return c;
    }
    try {
      c.settings = load_settings(ctx);
    } catch (const Error& e) {
      c.problems.push_back({e.kind(), e.what()});
    }
    std::vector<std::string> missing;
    std::optional<xnn::Graph> graph;
    try {
      graph = xnn::parse_graph(payload, ctx.named_data, &missing);
    } catch (const Error& e) {
      for (std::string& m : missing) c.problems.push_back({ErrorKind::ProgramLoadError, std::move(m)});
      c.problems.push_back({e.kind(), without_prefix(e.what())});
      return c;
    }
    for (std::string& m : missing) c.problems.push_back({ErrorKind::ProgramLoadError, std::move(m)});
    c.graph = xnn::check_graph(std::move(*graph));
    for (std::string& r : c.graph->reasons) c.problems.push_back({ErrorKind::ProgramLoadError, r});
    return c;
  }
};

}  // namespace

std::shared_ptr<Backend> make_xnnpack_backend() { return std::make_shared<XnnpackBackend>(); }

size_t xnnpack_delegate_threads(const DelegateHandle& handle) {
  const auto* h = dynamic_cast<const XnnpackHandle*>(&handle);
  if (h == nullptr) throw Error(ErrorKind::InvalidArgument, "not an XnnpackBackend delegate");
  return h->threads();
}

const std::vector<const void*>& xnnpack_delegate_packed_weights(const DelegateHandle& handle) {
  const auto* h = dynamic_cast<const XnnpackHandle*>(&handle);
  if (h == nullptr) throw Error(ErrorKind::InvalidArgument, "not an XnnpackBackend delegate");
  return h->packed_weights();
}

}  // namespace etnp::backends
