// The XNNPACK delegate's payload parser (parse_graph), its load-time checks (check_graph) and graph builder
// (Executor: XNNPACK operators and the delegate's own packed kernels). Constants addressed by key all get the
// same filler bytes. Graphs whose values need more than 64 MiB are not built (no memory limit yet).
#include <cstdint>
#include <vector>

#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "etnp/error.h"
#include "etnp/named_data.h"

namespace {

class FillerData final : public etnp::NamedDataMap {
 public:
  std::optional<std::span<const uint8_t>> get(std::string_view) const override {
    static const std::vector<uint8_t> filler(4u << 20, 0x3C);
    return std::span<const uint8_t>(filler);
  }
  std::optional<etnp::TensorLayout> layout(std::string_view) const override { return std::nullopt; }
  size_t num_keys() const override { return 0; }
  std::string_view key(size_t) const override { return {}; }
  std::string describe() const override { return "filler"; }
};

bool fits(const etnp::xnn::CheckedGraph& checked) {
  size_t total = 0;
  for (size_t i = 0; i < checked.graph.values.size() && i < checked.shapes.size(); ++i) {
    total += etnp::xnn::value_storage_bytes(checked.graph.values[i], checked.shapes[i]);
    if (total > (size_t{64} << 20)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  static const FillerData filler;
  try {
    std::vector<std::string> missing;
    xnn::CheckedGraph checked = xnn::check_graph(xnn::parse_graph({data, size}, &filler, &missing));
    if (checked.reasons.empty() && missing.empty() && fits(checked)) xnn::Executor executor(std::move(checked));
  } catch (const Error&) {
  }
  return 0;
}
