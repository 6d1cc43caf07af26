// Backends built into the library; the backend registry adds them on first use.
#pragma once

#include <memory>

namespace etnp {
class Backend;
}

namespace etnp::backends {

#ifdef ETNP_WITH_XNNPACK
/// The XNNPACK delegate ("XnnpackBackend"), src/backends/xnnpack/.
std::shared_ptr<Backend> make_xnnpack_backend();
#endif

}  // namespace etnp::backends
