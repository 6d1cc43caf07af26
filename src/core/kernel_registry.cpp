#include "core/kernel_registry.h"

#include <algorithm>


namespace etnp {

void KernelRegistry::add(KernelEntry entry) {
  if (entry.fn == nullptr) {
    throw Error(ErrorKind::InvalidArgument, "kernel '" + entry.name + "' has no function");
  }
  std::unique_lock lock(mutex_);
  auto [it, inserted] = entries_.try_emplace(entry.name, nullptr);
  if (!inserted) throw Error(ErrorKind::InvalidArgument, "kernel '" + entry.name + "' is already registered");
  it->second = std::make_unique<KernelEntry>(std::move(entry));
}

const KernelEntry* KernelRegistry::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  auto it = entries_.find(std::string(name));
  return it == entries_.end() ? nullptr : it->second.get();
}

std::vector<std::string> KernelRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void kernel_fail(std::string message) { throw Error(ErrorKind::ExecutionError, std::move(message)); }

void* KernelContext::scratch(size_t bytes) {
  // 64 extra bytes so the returned pointer can be aligned.
  if (scratch_.size() < bytes + 64) scratch_.resize(bytes + 64);
  auto p = reinterpret_cast<uintptr_t>(scratch_.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
}

}  // namespace etnp
