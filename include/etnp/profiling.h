// Profile events: what Method::profile_events() returns, and how a backend reports the parts of its
// delegate calls.
#pragma once

#include <cstdint>
#include <string>

namespace etnp {

struct ProfileEvent {
  std::string name;          ///< Operator name, "DELEGATE_CALL <backend>", "MOVE_CALL", ...
  int64_t chain = 0;
  int64_t instruction = -1;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  /// The instruction ran once at load (constant folding, a batch norm folded into its convolution) and the
  /// run skipped it.
  bool folded = false;
  /// A part of the DELEGATE_CALL event just before it (a node of the delegate's graph, as the backend reported
  /// it: see report_delegate_part); its time is included in that event's.
  bool delegate_part = false;
  /// The part's debug handle in the delegate payload, -1 if none.
  int64_t debug_handle = -1;
};

/// Profiling inside a delegate call. While a method loaded with enable_profiling runs a DelegateCall, the
/// backend may time the parts of the call (the nodes of its graph) and report each; they appear in
/// Method::profile_events() right after that call's DELEGATE_CALL event, with ProfileEvent::delegate_part set
/// and the call's instruction. Reports from any other time or thread are dropped.
bool delegate_profiling_active();
/// `name`: what ran, e.g. "XNNFullyConnected (own kernel)"; `debug_handle`: the part's debug handle in the
/// payload (-1: none); times from profile_clock_ns().
void report_delegate_part(std::string name, int64_t debug_handle, uint64_t start_ns, uint64_t end_ns);
/// The clock of all profile events, in nanoseconds.
uint64_t profile_clock_ns();

}  // namespace etnp
