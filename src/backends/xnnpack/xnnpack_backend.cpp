// Placeholder until the XNNPACK delegate lands: registers "XnnpackBackend" as unavailable.
#include "backends/register.h"
#include "etnp/backend.h"

namespace etnp::backends {
namespace {

class XnnpackBackend final : public Backend {
 public:
  std::string_view name() const override { return "XnnpackBackend"; }
  bool is_available() const override { return false; }
  std::unique_ptr<DelegateHandle> init(const BackendInitContext&, std::span<const uint8_t>,
                                       std::span<const CompileSpec>) override {
    throw Error(ErrorKind::BackendNotAvailable, "XnnpackBackend is not implemented yet");
  }
  void execute(DelegateHandle&, std::span<EValue* const>) override {}
};

}  // namespace

std::shared_ptr<Backend> make_xnnpack_backend() { return std::make_shared<XnnpackBackend>(); }

}  // namespace etnp::backends
