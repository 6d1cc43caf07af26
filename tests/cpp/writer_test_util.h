// Helpers for the writer and bad-input tests: loading written bytes, making inputs, reading outputs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "etnp/program.h"
#include "tools/writer/writer.h"

namespace etnp::writer_testing {

using format::TensorSpec;

inline TensorSpec f32(std::vector<int32_t> sizes, ShapeDynamism dynamism = ShapeDynamism::Static) {
  return {ScalarType::Float, std::move(sizes), {}, dynamism, {}};
}

/// Loads written bytes; the Program keeps its own copy alive.
inline Program load_bytes(const std::vector<uint8_t>& bytes, const LoadOptions& options = {}) {
  auto owned = std::make_shared<std::vector<uint8_t>>(bytes);
  return Program::load_buffer(*owned, owned, options);
}

inline Value tensor_input(const std::vector<float>& data, std::vector<int64_t> sizes) {
  TensorRef t;
  t.dtype = ScalarType::Float;
  t.sizes = std::move(sizes);
  t.data = data.data();
  return t;
}

/// Method::execute with a braced list of inputs.
inline std::vector<Value> exec(Method& method, std::vector<Value> inputs) { return method.execute(inputs); }

inline std::vector<float> floats(const Value& v) {
  const auto* t = std::get_if<TensorRef>(&v);
  EXPECT_NE(t, nullptr) << "output is not a tensor";
  if (t == nullptr || t->dtype != ScalarType::Float) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (!out.empty()) std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

inline std::vector<int64_t> sizes_of(const Value& v) {
  const auto* t = std::get_if<TensorRef>(&v);
  return t == nullptr ? std::vector<int64_t>{} : t->sizes;
}

/// x + y (+ a constant bias when `with_constant`): inputs [2, 3] float, one output.
inline std::vector<uint8_t> small_add_program(bool with_constant) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2, 3}));
  const int32_t y = m.planned_tensor(f32({2, 3}));
  const int32_t sum = m.planned_tensor(f32({2, 3}));
  const int32_t one = m.int_value(1);
  m.kernel("aten::add.out", {x, y, one, sum, sum});
  int32_t out = sum;
  if (with_constant) {
    const std::vector<float> bias = {0.5f, 1.5f, -2.0f};
    const int32_t b = m.constant_tensor(f32({3}), format::as_bytes(bias));
    out = m.planned_tensor(f32({2, 3}));
    m.kernel("aten::add.out", {sum, b, one, out, out});
  }
  m.set_inputs({x, y});
  m.set_outputs({out});
  return w.serialize();
}

/// forward(x) = x + layer.weight, a [2, 3] float tensor whose data lives in external named data; with
/// `ptd_out`, the .ptd that holds it.
inline std::vector<uint8_t> external_weight_program(format::PtdWriter* ptd_out = nullptr) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  TensorSpec spec = f32({2, 3});
  spec.name = "layer.weight";
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  const int32_t wv = m.external_tensor(spec, format::as_bytes(weight));
  const int32_t x = m.planned_tensor(f32({2, 3}));
  const int32_t y = m.planned_tensor(f32({2, 3}));
  m.kernel("aten::add.out", {x, wv, m.int_value(1), y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  if (ptd_out != nullptr) *ptd_out = w.external_data();
  return w.serialize();
}

}  // namespace etnp::writer_testing
