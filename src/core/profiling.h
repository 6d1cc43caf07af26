// The runtime's side of delegate profiling (etnp/profiling.h): while a DelegateCall runs with profiling on,
// the parts its backend reports go to the sink this thread has set.
#pragma once

#include <vector>

#include "etnp/profiling.h"

namespace etnp::core {

/// Where report_delegate_part puts this thread's reports; nullptr stops recording.
void set_delegate_part_sink(std::vector<ProfileEvent>* sink);

}  // namespace etnp::core
