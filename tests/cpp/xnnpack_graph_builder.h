// Test helper: builds XNNPACK delegate payloads (header + XNNGraph flatbuffer + constant region) and a
// named-data map, for the xnnpack_*_test.cpp suites.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "etnp/named_data.h"
#include "xnnpack_graph_generated.h"

namespace etnp::xnn::testing {

using fb_xnnpack::XNNDatatype;
using fb_xnnpack::XNodeUnion;

constexpr uint32_t kExtIn = 1;
constexpr uint32_t kExtOut = 2;
constexpr uint32_t kNoExt = 0xFFFFFFFFu;

class MapNamedData final : public NamedDataMap {
 public:
  std::map<std::string, std::vector<uint8_t>, std::less<>> entries;
  std::string description = "program named data";

  std::optional<std::span<const uint8_t>> get(std::string_view key) const override {
    auto it = entries.find(key);
    if (it == entries.end()) return std::nullopt;
    return std::span<const uint8_t>(it->second);
  }
  std::optional<TensorLayout> layout(std::string_view) const override { return std::nullopt; }
  size_t num_keys() const override { return entries.size(); }
  std::string_view key(size_t index) const override {
    auto it = entries.begin();
    std::advance(it, index);
    return it->first;
  }
  std::string describe() const override { return description; }
};

class GraphBuilder {
 public:
  GraphBuilder() { constants_.push_back(fb_xnnpack::CreateConstantDataOffset(fbb_, uint64_t{0}, uint64_t{0})); }

  /// Adds a value; returns its id (= its index).
  uint32_t value(XNNDatatype dt, std::vector<uint32_t> dims, uint32_t flags = 0, uint32_t external_id = kNoExt,
                 uint32_t constant = 0) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    auto tv = tensor(dt, dims, flags, external_id, constant, id);
    values_.push_back(fb_xnnpack::CreateXValue(fbb_, fb_xnnpack::XValueUnion::XNNTensorValue, tv.Union()));
    return id;
  }

  uint32_t input(std::vector<uint32_t> dims, uint32_t external_id, XNNDatatype dt = XNNDatatype::xnn_datatype_fp32) {
    return value(dt, std::move(dims), kExtIn, external_id);
  }
  uint32_t output(std::vector<uint32_t> dims, uint32_t external_id, XNNDatatype dt = XNNDatatype::xnn_datatype_fp32) {
    return value(dt, std::move(dims), kExtOut, external_id);
  }
  uint32_t internal(std::vector<uint32_t> dims, XNNDatatype dt = XNNDatatype::xnn_datatype_fp32) {
    return value(dt, std::move(dims));
  }
  uint32_t f32_constant(std::vector<uint32_t> dims, const std::vector<float>& data) {
    return value(XNNDatatype::xnn_datatype_fp32, std::move(dims), 0, kNoExt, constant(data.data(), data.size() * 4));
  }

  uint32_t per_tensor(XNNDatatype dt, std::vector<uint32_t> dims, float scale, int32_t zero_point, uint32_t flags = 0,
                      uint32_t external_id = kNoExt, uint32_t constant = 0) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    auto tv = tensor(dt, dims, flags, external_id, constant, id);
    auto q = fb_xnnpack::CreatePerTensorQuant(fbb_, scale, zero_point);
    auto qv = fb_xnnpack::CreateXNNQuantizedTensorValue(fbb_, tv, fb_xnnpack::XNNQuantParams::PerTensorQuant, q.Union());
    values_.push_back(fb_xnnpack::CreateXValue(fbb_, fb_xnnpack::XValueUnion::XNNQuantizedTensorValue, qv.Union()));
    return id;
  }

  uint32_t per_channel(XNNDatatype dt, std::vector<uint32_t> dims, const std::vector<float>& scales,
                       int32_t channel_dim, uint32_t constant) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    auto tv = tensor(dt, dims, 0, kNoExt, constant, id);
    const uint32_t scale_idx = this->constant(scales.data(), scales.size() * 4);
    auto q = fb_xnnpack::CreatePerChannelQuant(fbb_, 0, channel_dim, scale_idx, static_cast<uint32_t>(scales.size()));
    auto qv =
        fb_xnnpack::CreateXNNQuantizedTensorValue(fbb_, tv, fb_xnnpack::XNNQuantParams::PerChannelQuant, q.Union());
    values_.push_back(fb_xnnpack::CreateXValue(fbb_, fb_xnnpack::XValueUnion::XNNQuantizedTensorValue, qv.Union()));
    return id;
  }

  /// 4-bit blockwise weights [n, k]: bf16 scales [n, k / group_size] in the constant data.
  uint32_t blockwise(std::vector<uint32_t> dims, const std::vector<uint16_t>& bf16_scales, int32_t group_size,
                     uint32_t constant) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    auto tv = tensor(XNNDatatype::xnn_datatype_qbint4, dims, 0, kNoExt, constant, id);
    const uint32_t scale_idx = this->constant(bf16_scales.data(), bf16_scales.size() * 2);
    auto q = fb_xnnpack::CreatePerChannelGroupQuant(fbb_, 0, 0, group_size, scale_idx,
                                                    static_cast<uint32_t>(bf16_scales.size()));
    auto qv = fb_xnnpack::CreateXNNQuantizedTensorValue(fbb_, tv, fb_xnnpack::XNNQuantParams::PerChannelGroupQuant,
                                                        q.Union());
    values_.push_back(fb_xnnpack::CreateXValue(fbb_, fb_xnnpack::XValueUnion::XNNQuantizedTensorValue, qv.Union()));
    return id;
  }

  uint32_t dynamic_quant(std::vector<uint32_t> dims, int32_t num_nonbatch_dims) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    auto tv = tensor(XNNDatatype::xnn_datatype_qdint8, dims, 0, kNoExt, 0, id);
    auto q = fb_xnnpack::CreatePerTokenDynamicQuant(fbb_, num_nonbatch_dims);
    auto qv = fb_xnnpack::CreateXNNQuantizedTensorValue(fbb_, tv, fb_xnnpack::XNNQuantParams::PerTokenDynamicQuant,
                                                        q.Union());
    values_.push_back(fb_xnnpack::CreateXValue(fbb_, fb_xnnpack::XValueUnion::XNNQuantizedTensorValue, qv.Union()));
    return id;
  }

  /// Stores bytes in the payload's constant region; returns the constant index.
  uint32_t constant(const void* data, size_t bytes) {
    while (region_.size() % 16 != 0) region_.push_back(0);
    const uint64_t offset = region_.size();
    region_.insert(region_.end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    constants_.push_back(fb_xnnpack::CreateConstantDataOffset(fbb_, offset, bytes));
    return static_cast<uint32_t>(constants_.size() - 1);
  }

  /// A constant stored inline in the graph's legacy constant_buffer table (payloads without a header).
  uint32_t legacy_constant(const void* data, size_t bytes) {
    if (legacy_.empty()) legacy_.push_back(fb_xnnpack::CreateBuffer(fbb_));  // index 0: "no constant"
    fbb_.ForceVectorAlignment(bytes, 1, 16);
    auto storage = fbb_.CreateVector(static_cast<const uint8_t*>(data), bytes);
    legacy_.push_back(fb_xnnpack::CreateBuffer(fbb_, storage));
    return static_cast<uint32_t>(legacy_.size() - 1);
  }

  /// A constant fetched by key from the named data map.
  uint32_t named_constant(const std::string& key, size_t bytes) {
    constants_.push_back(fb_xnnpack::CreateConstantDataOffsetDirect(fbb_, std::numeric_limits<uint64_t>::max(), bytes,
                                                                    key.c_str()));
    return static_cast<uint32_t>(constants_.size() - 1);
  }

  void node(XNodeUnion type, flatbuffers::Offset<void> table, float min = -std::numeric_limits<float>::infinity(),
            float max = std::numeric_limits<float>::infinity()) {
    flatbuffers::Offset<fb_xnnpack::OutputMinMax> mm = 0;
    if (min != -std::numeric_limits<float>::infinity() || max != std::numeric_limits<float>::infinity()) {
      mm = fb_xnnpack::CreateOutputMinMax(fbb_, min, max);
    }
    nodes_.push_back(fb_xnnpack::CreateXNode(fbb_, type, table, static_cast<uint32_t>(nodes_.size()), mm));
  }
  void binary(XNodeUnion type, uint32_t a, uint32_t b, uint32_t out, uint32_t flags = 0,
              float min = -std::numeric_limits<float>::infinity(), float max = std::numeric_limits<float>::infinity()) {
    node(type, fb_xnnpack::Create_XNNNode2x1(fbb_, a, b, out, flags).Union(), min, max);
  }
  void unary(XNodeUnion type, uint32_t in, uint32_t out, float min = -std::numeric_limits<float>::infinity(),
             float max = std::numeric_limits<float>::infinity(), uint32_t flags = 0) {
    node(type, fb_xnnpack::Create_XNNNode1x1(fbb_, in, out, flags).Union(), min, max);
  }
  void transpose(std::vector<uint32_t> perm, uint32_t in, uint32_t out) {
    node(XNodeUnion::XNNStaticTranspose,
         fb_xnnpack::CreateXNNStaticTransposeDirect(fbb_, static_cast<uint32_t>(perm.size()), &perm, in, out).Union());
  }
  void reshape(std::vector<uint32_t> shape, uint32_t in, uint32_t out) {
    node(XNodeUnion::XNNStaticReshape,
         fb_xnnpack::CreateXNNStaticReshapeDirect(fbb_, static_cast<uint32_t>(shape.size()), &shape, in, out).Union());
  }
  void fully_connected(uint32_t in, uint32_t filter, uint32_t bias, uint32_t out,
                       float min = -std::numeric_limits<float>::infinity(),
                       float max = std::numeric_limits<float>::infinity(), uint32_t flags = 0) {
    node(XNodeUnion::XNNFullyConnected, fb_xnnpack::CreateXNNFullyConnected(fbb_, in, filter, bias, out, flags).Union(),
         min, max);
  }
  /// 2-D convolution with square kernel `k`, stride `s`, padding `p` on every side.
  void conv(XNodeUnion type, uint32_t k, uint32_t s, uint32_t p, uint32_t groups, uint32_t gin, uint32_t gout,
            uint32_t in, uint32_t filter, uint32_t bias, uint32_t out,
            float min = -std::numeric_limits<float>::infinity(), float max = std::numeric_limits<float>::infinity()) {
    node(type,
         fb_xnnpack::Create_XNNNodeConv(fbb_, p, p, p, p, k, k, s, s, 1, 1, gin, gout, groups, 0, 0, in, filter, bias,
                                        out, 0)
             .Union(),
         min, max);
  }
  void concat2(uint32_t axis, uint32_t a, uint32_t b, uint32_t out) {
    node(XNodeUnion::XNNConcatenate2, fb_xnnpack::Create_XNNCat(fbb_, axis, a, b, 0, 0, out, 0, 0).Union());
  }

  flatbuffers::FlatBufferBuilder& fbb() { return fbb_; }
  void set_num_externs(uint32_t n) { num_externs_ = n; }

  /// The XNNGraph flatbuffer alone.
  std::vector<uint8_t> flatbuffer(const char* identifier = "XN01") {
    uint32_t externs = num_externs_;
    if (externs == 0) externs = max_external_ + 1;
    auto graph = fb_xnnpack::CreateXNNGraph(fbb_, fbb_.CreateString("0"), fbb_.CreateVector(nodes_),
                                            fbb_.CreateVector(values_), externs, 0, 0,
                                            legacy_.empty() ? 0 : fbb_.CreateVector(legacy_), 0,
                                            fbb_.CreateVector(constants_));
    fbb_.Finish(graph, identifier);
    return std::vector<uint8_t>(fbb_.GetBufferPointer(), fbb_.GetBufferPointer() + fbb_.GetSize());
  }

  /// Header + flatbuffer + constant region, laid out as current exporters write it.
  std::vector<uint8_t> payload(const char* identifier = "XN01") { return wrap(flatbuffer(identifier), region_); }

  static std::vector<uint8_t> wrap(const std::vector<uint8_t>& fb, const std::vector<uint8_t>& region) {
    const uint16_t header_length = 30;
    const uint32_t fb_offset = 32, fb_size = static_cast<uint32_t>(fb.size());
    const uint32_t const_offset = 32 + ((fb_size + 15) & ~15u);
    const uint64_t const_size = region.size();
    std::vector<uint8_t> out(const_offset + region.size(), 0);
    std::copy_n("XH00", 4, out.begin() + 4);  // (a memcpy here trips a false -Warray-bounds in GCC 12)
    std::memcpy(out.data() + 8, &header_length, 2);
    std::memcpy(out.data() + 10, &fb_offset, 4);
    std::memcpy(out.data() + 14, &fb_size, 4);
    std::memcpy(out.data() + 18, &const_offset, 4);
    std::memcpy(out.data() + 22, &const_size, 8);
    if (!fb.empty()) std::memcpy(out.data() + fb_offset, fb.data(), fb.size());
    if (!region.empty()) std::memcpy(out.data() + const_offset, region.data(), region.size());
    return out;
  }

 private:
  flatbuffers::Offset<fb_xnnpack::XNNTensorValue> tensor(XNNDatatype dt, const std::vector<uint32_t>& dims,
                                                         uint32_t flags, uint32_t external_id, uint32_t constant,
                                                         uint32_t id) {
    if (flags != 0) max_external_ = std::max<int64_t>(max_external_, external_id);
    return fb_xnnpack::CreateXNNTensorValueDirect(fbb_, dt, static_cast<uint32_t>(dims.size()), &dims, constant,
                                                  external_id, flags, id);
  }

  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<flatbuffers::Offset<fb_xnnpack::XValue>> values_;
  std::vector<flatbuffers::Offset<fb_xnnpack::XNode>> nodes_;
  std::vector<flatbuffers::Offset<fb_xnnpack::ConstantDataOffset>> constants_;
  std::vector<flatbuffers::Offset<fb_xnnpack::Buffer>> legacy_;
  std::vector<uint8_t> region_;
  uint32_t num_externs_ = 0;
  int64_t max_external_ = -1;
};

}  // namespace etnp::xnn::testing
