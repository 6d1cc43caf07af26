#include "core/profiling.h"

#include <chrono>
#include <utility>

namespace etnp {
namespace {
thread_local std::vector<ProfileEvent>* t_delegate_parts = nullptr;
}  // namespace

void core::set_delegate_part_sink(std::vector<ProfileEvent>* sink) { t_delegate_parts = sink; }

uint64_t profile_clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

bool delegate_profiling_active() { return t_delegate_parts != nullptr; }

void report_delegate_part(std::string name, int64_t debug_handle, uint64_t start_ns, uint64_t end_ns) {
  if (t_delegate_parts == nullptr) return;
  ProfileEvent ev;
  ev.name = std::move(name);
  ev.start_ns = start_ns;
  ev.end_ns = end_ns;
  ev.delegate_part = true;
  ev.debug_handle = debug_handle;
  t_delegate_parts->push_back(std::move(ev));
}

}  // namespace etnp
