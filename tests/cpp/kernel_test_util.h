// Building tensors and calling registered kernels directly, for per-kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "etnp/kernel.h"
#include "etnp/threadpool.h"
#include "runtime/registry.h"

namespace etnp::testing {

/// `n` floats drawn uniformly from [lo, hi), the same for the same seed.
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A tensor that owns its storage (sized for its shape; `capacity` elements when larger).
struct OwnedTensor {
  std::vector<unsigned char> storage;
  Tensor tensor;

  template <typename T>
  static std::unique_ptr<OwnedTensor> make(ScalarType dtype, std::vector<int64_t> sizes, std::vector<T> values,
                                           ShapeDynamism dynamism = ShapeDynamism::Static, int64_t capacity = -1,
                                           std::vector<uint8_t> dim_order = {}) {
    auto t = std::make_unique<OwnedTensor>();
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    const int64_t cap = capacity < 0 ? n : capacity;
    t->storage.assign(static_cast<size_t>(std::max<int64_t>(cap, 1)) * element_size(dtype), 0);
    t->tensor = Tensor(dtype, sizes, dim_order, t->storage.data(), dynamism);
    t->tensor.set_capacity_numel(cap);
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < values.size(); ++i) t->storage[i] = values[i] ? 1 : 0;  // vector<bool> is packed
    } else if (!values.empty()) {
      std::memcpy(t->storage.data(), values.data(), values.size() * sizeof(T));
    }
    return t;
  }

  template <typename T>
  std::vector<T> values() const {
    std::vector<T> out(static_cast<size_t>(tensor.numel()));
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = storage[i] != 0;
    } else if (!out.empty()) {  // memcpy with a null pointer is undefined even for 0 bytes
      std::memcpy(out.data(), storage.data(), out.size() * sizeof(T));
    }
    return out;
  }
};

/// Runs the registered kernel `name` over `args` (EValues built by the test).
inline void call_kernel(const std::string& name, std::vector<EValue>& args) {
  const KernelEntry* entry = runtime::kernel_registry().find(name);
  ASSERT_NE(entry, nullptr) << "kernel not registered: " << name;
  std::vector<EValue*> ptrs;
  for (auto& a : args) ptrs.push_back(&a);
  std::unique_ptr<KernelState> state;
  if (entry->prepare) state = entry->prepare(KernelArgs(ptrs));
  KernelContext ctx(&ThreadPool::global(), state.get());
  entry->fn(ctx, KernelArgs(ptrs));
}

}  // namespace etnp::testing
