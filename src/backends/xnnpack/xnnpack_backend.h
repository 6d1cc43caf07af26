// The XNNPACK delegate ("XnnpackBackend"); the runtime registers it among the built-in backends.
#pragma once

#include <memory>

#include "etnp/backend.h"

namespace etnp::backends {

std::shared_ptr<Backend> make_xnnpack_backend();

}  // namespace etnp::backends
