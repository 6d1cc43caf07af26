// The user-kernel example (examples/custom_kernel/my_kernels.cpp) compiled into the test binary exactly as a
// user would compile it into theirs: its static KernelRegistrar must make the op callable through the registry.
// (So do not also pass that example through ETNP_EXTRA_KERNEL_SOURCES in a build of the tests: it would be
// registered twice.)
#include "../../examples/custom_kernel/my_kernels.cpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace etnp::testing {
namespace {

EValue T(const std::unique_ptr<OwnedTensor>& t) { return EValue::from_tensor(&t->tensor); }

TEST(CustomKernelExample, RegistrarRegistersTheKernel) {
  const KernelEntry* entry = runtime::kernel_registry().find("my_ops::scaled_add.out");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->num_args, 5);
  const auto names = registered_kernel_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "my_ops::scaled_add.out"), names.end());
}

TEST(CustomKernelExample, ComputesScaledAdd) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {3}, {1.f, 2.f, 3.f});
  auto y = OwnedTensor::make<float>(ScalarType::Float, {3}, {10.f, -4.f, 0.5f});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {3}, {});
  std::vector<EValue> args = {T(x), T(y), EValue::from_double(0.5), T(out), T(out)};
  call_kernel("my_ops::scaled_add.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{6.f, 0.f, 3.25f}));

  auto y_int = OwnedTensor::make<int32_t>(ScalarType::Int, {3}, {1, 2, 3});
  std::vector<EValue> bad = {T(x), T(y_int), EValue::from_double(0.5), T(out), T(out)};
  EXPECT_THROW(call_kernel("my_ops::scaled_add.out", bad), etnp::Error);
}

}  // namespace
}  // namespace etnp::testing
