#include <gtest/gtest.h>

#include "etnp/error.h"
#include "etnp/tensor.h"

namespace etnp {
namespace {

TEST(Tensor, StridesFollowDimOrder) {
  std::vector<int64_t> sizes = {2, 3, 4, 5};
  std::vector<uint8_t> nhwc = {0, 2, 3, 1};
  Tensor t(ScalarType::Float, sizes, nhwc, nullptr);
  EXPECT_EQ(t.stride(1), 1);
  EXPECT_EQ(t.stride(3), 3);
  EXPECT_EQ(t.stride(2), 15);
  EXPECT_EQ(t.stride(0), 60);
  EXPECT_TRUE(t.is_channels_last_order());
  EXPECT_FALSE(t.is_contiguous_order());
}

TEST(Tensor, ZeroSizeCountsAsOneInStrides) {
  std::vector<int64_t> sizes = {2, 0, 3};
  Tensor t(ScalarType::Float, sizes, {}, nullptr);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.stride(1), 3);
  EXPECT_EQ(t.stride(0), 3);
  EXPECT_EQ(t.numel(), 0);
}

TEST(Tensor, StaticTensorRejectsOtherShapes) {
  std::vector<int64_t> sizes = {2, 3};
  Tensor t(ScalarType::Float, sizes, {}, nullptr);
  std::vector<int64_t> same = {2, 3}, other = {3, 2};
  EXPECT_NO_THROW(t.resize(same));
  EXPECT_THROW(t.resize(other), Error);
}

TEST(Tensor, BoundedTensorAcceptsShapesWithinItsBound) {
  std::vector<int64_t> sizes = {8};
  Tensor t(ScalarType::Float, sizes, {}, nullptr, ShapeDynamism::DynamicBound);
  std::vector<int64_t> four = {4}, nine = {9}, rank2 = {2, 2};
  EXPECT_TRUE(t.try_resize(four));
  EXPECT_EQ(t.numel(), 4);
  EXPECT_FALSE(t.try_resize(nine));
  EXPECT_FALSE(t.try_resize(rank2));
}

TEST(Tensor, RejectsBadDimOrder) {
  std::vector<int64_t> sizes = {2, 3};
  std::vector<uint8_t> bad = {1, 1};
  EXPECT_THROW(Tensor(ScalarType::Float, sizes, bad, nullptr), Error);
}

}  // namespace
}  // namespace etnp
