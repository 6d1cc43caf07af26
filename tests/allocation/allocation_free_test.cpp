// Method::set_input(TensorView), run() and output_view() allocate nothing once a method is loaded (the contract
// etnp/program.h states, which the Python package's per-call path relies on), where set_input(Value) and output()
// copy shapes into vectors. Its own executable: it replaces the C allocator to count calls, which the
// sanitizer builds (whose runtimes replace it themselves) and the main test binary must not.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "etnp/program.h"
#include "tools/writer/writer.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace {

// Counted on the thread that set it only: the pool's workers are not what the contract is about.
thread_local bool t_counting = false;
thread_local long t_allocations = 0;

void count() {
  if (t_counting) ++t_allocations;
}

}  // namespace

// glibc's allocator entry points, counted and forwarded (operator new calls malloc).
extern "C" {
void* malloc(size_t size) {
  count();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  count();
  return __libc_realloc(p, size);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace etnp {
namespace {

/// forward(x f32[3], y f32[<=4, 3]) = relu(y + x), x broadcast over y's rows: a static and a dynamic input.
/// Also channels_last (below).
Program add_relu_program() {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor({ScalarType::Float, {3}, {}, ShapeDynamism::Static, {}});
  const int32_t y = m.planned_tensor({ScalarType::Float, {4, 3}, {}, ShapeDynamism::DynamicBound, {}});
  const int32_t sum = m.planned_tensor({ScalarType::Float, {4, 3}, {}, ShapeDynamism::DynamicBound, {}});
  const int32_t out = m.planned_tensor({ScalarType::Float, {4, 3}, {}, ShapeDynamism::DynamicBound, {}});
  const int32_t one = m.int_value(1);
  m.kernel("aten::add.out", {y, x, one, sum, sum});
  m.kernel("aten::relu.out", {sum, out, out});
  m.set_inputs({x, y});
  m.set_outputs({out});
  // channels_last(z f32[1, 1, 2, 2] in dim order 0, 2, 3, 1) = relu(z): one channel, so a contiguous view has
  // the same strides and is accepted, a check made on every call.
  auto& cl = w.add_method("channels_last");
  const format::TensorSpec nhwc{ScalarType::Float, {1, 1, 2, 2}, {0, 2, 3, 1}, ShapeDynamism::Static, {}};
  const int32_t z = cl.planned_tensor(nhwc);
  const int32_t relu = cl.planned_tensor(nhwc);
  cl.kernel("aten::relu.out", {z, relu, relu});
  cl.set_inputs({z});
  cl.set_outputs({relu});
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.serialize());
  return Program::load_buffer(*bytes, bytes);
}

TEST(AllocationFree, TensorViewCallsAllocateNothing) {
  const Program program = add_relu_program();
  const auto method = program.load_method("forward");
  const std::vector<float> x = {1, -2, 3};
  const std::vector<float> y(12, 0.5f);
  const std::vector<int64_t> x_shape = {3};
  const std::vector<int64_t> shapes[] = {{2, 3}, {4, 3}};
  auto call = [&](int k) {
    method->set_input(0, TensorView{ScalarType::Float, x_shape, {}, x.data()});
    method->set_input(1, TensorView{ScalarType::Float, shapes[k % 2], {}, y.data()});
    method->run();
    return method->output_view(0);
  };
  for (int k = 0; k < 4; ++k) call(k);  // both shapes seen once
  t_allocations = 0;
  t_counting = true;
  float checksum = 0;
  for (int k = 0; k < 100; ++k) {
    const TensorView out = call(k);
    checksum += static_cast<const float*>(out.data)[out.numel() - 1];
  }
  t_counting = false;
  EXPECT_EQ(t_allocations, 0);
  EXPECT_EQ(checksum, 100 * 3.5f);  // relu(0.5 + 3), the last element at either shape

  // A contiguous view for a channels-last input whose strides it shares.
  const auto nhwc = program.load_method("channels_last");
  const std::vector<float> z = {-1, 2, -3, 4};
  const std::vector<int64_t> z_shape = {1, 1, 2, 2};
  auto call_nhwc = [&] {
    nhwc->set_input(0, TensorView{ScalarType::Float, z_shape, {}, z.data()});
    nhwc->run();
    return nhwc->output_view(0);
  };
  call_nhwc();
  t_allocations = 0;
  t_counting = true;
  float last = 0;
  for (int k = 0; k < 100; ++k) last = static_cast<const float*>(call_nhwc().data)[3];
  t_counting = false;
  EXPECT_EQ(t_allocations, 0);
  EXPECT_EQ(last, 4.0f);

  // The counter counts: the Value forms copy each shape into a vector.
  t_allocations = 0;
  t_counting = true;
  TensorRef ref;
  ref.sizes = x_shape;
  ref.data = x.data();
  method->set_input(0, ref);
  (void)method->output(0);
  t_counting = false;
  EXPECT_GE(t_allocations, 2);
}

}  // namespace
}  // namespace etnp
