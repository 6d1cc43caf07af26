// The XNNPACK delegate ("XnnpackBackend"); the runtime registers it among the built-in backends.
#pragma once

#include <memory>
#include <vector>

#include "etnp/backend.h"

namespace etnp::backends {

std::shared_ptr<Backend> make_xnnpack_backend();

/// Threads an XnnpackBackend delegate runs on: its own pool's (num_threads given at load) or the shared one's.
/// Throws InvalidArgument for another backend's handle.
size_t xnnpack_delegate_threads(const DelegateHandle& handle);

/// The weights an XnnpackBackend delegate's own kernels packed at load, in build order (with
/// weight_cache_enabled, delegates holding equal packings hold the same pointer). Throws InvalidArgument for
/// another backend's handle.
const std::vector<const void*>& xnnpack_delegate_packed_weights(const DelegateHandle& handle);

}  // namespace etnp::backends
