#include "tools/writer/xnnpack_writer.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "etnp/error.h"
#include "xnnpack_graph_generated.h"

namespace etnp::format {
namespace {

namespace xf = ::fb_xnnpack;

constexpr uint32_t kExternalInput = 0x1;   // XNN_VALUE_FLAG_EXTERNAL_INPUT
constexpr uint32_t kExternalOutput = 0x2;  // XNN_VALUE_FLAG_EXTERNAL_OUTPUT

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

struct XnnpackGraphWriter::State {
  flatbuffers::FlatBufferBuilder fbb{1 << 14};
  std::vector<flatbuffers::Offset<xf::XValue>> values;
  std::vector<flatbuffers::Offset<xf::XNode>> nodes;
  std::vector<flatbuffers::Offset<xf::ConstantDataOffset>> constants;
  std::vector<uint32_t> input_ids, output_ids;
  uint32_t num_externs = 0;
  std::map<std::string, size_t> constant_index;  // key -> position in `named`
  std::vector<std::pair<std::string, std::vector<uint8_t>>> named;
  bool finished = false;

  uint32_t value(std::vector<uint32_t> dims, uint32_t flags, uint32_t external_id, uint32_t constant) {
    if (finished) throw Error(ErrorKind::InvalidArgument, "XnnpackGraphWriter used after finish()");
    const auto id = static_cast<uint32_t>(values.size());
    auto tv = xf::CreateXNNTensorValueDirect(fbb, xf::XNNDatatype::xnn_datatype_fp32,
                                             static_cast<uint32_t>(dims.size()), &dims, constant, external_id, flags,
                                             id);
    values.push_back(xf::CreateXValue(fbb, xf::XValueUnion::XNNTensorValue, tv.Union()));
    return id;
  }

  void node(xf::XNodeUnion type, flatbuffers::Offset<void> table, float min, float max) {
    flatbuffers::Offset<xf::OutputMinMax> mm = 0;
    if (min != kNoMin || max != kNoMax) mm = xf::CreateOutputMinMax(fbb, min, max);
    nodes.push_back(xf::CreateXNode(fbb, type, table, static_cast<uint32_t>(nodes.size()), mm));
  }
};

XnnpackGraphWriter::XnnpackGraphWriter() : state_(std::make_unique<State>()) {
  // constant_data[0] is the "no constant" placeholder.
  state_->constants.push_back(xf::CreateConstantDataOffset(state_->fbb, uint64_t{0}, uint64_t{0}));
}

XnnpackGraphWriter::~XnnpackGraphWriter() = default;

uint32_t XnnpackGraphWriter::input(std::vector<uint32_t> dims, uint32_t external_id) {
  const uint32_t id = state_->value(std::move(dims), kExternalInput, external_id, 0);
  state_->input_ids.push_back(id);
  state_->num_externs = std::max(state_->num_externs, external_id + 1);
  return id;
}

uint32_t XnnpackGraphWriter::output(std::vector<uint32_t> dims, uint32_t external_id) {
  const uint32_t id = state_->value(std::move(dims), kExternalOutput, external_id, 0);
  state_->output_ids.push_back(id);
  state_->num_externs = std::max(state_->num_externs, external_id + 1);
  return id;
}

uint32_t XnnpackGraphWriter::internal(std::vector<uint32_t> dims) {
  return state_->value(std::move(dims), 0, kInvalidId, 0);
}

uint32_t XnnpackGraphWriter::constant(std::vector<uint32_t> dims, std::span<const float> data) {
  const std::span<const uint8_t> bytes = as_bytes(data);
  std::string key = sha256_hex(bytes);
  if (state_->constant_index.emplace(key, state_->named.size()).second) {
    state_->named.emplace_back(key, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  // Writers mark named constants with offset UINT64_MAX.
  state_->constants.push_back(xf::CreateConstantDataOffsetDirect(state_->fbb, std::numeric_limits<uint64_t>::max(),
                                                                 bytes.size(), key.c_str()));
  const auto index = static_cast<uint32_t>(state_->constants.size() - 1);
  return state_->value(std::move(dims), 0, kInvalidId, index);
}

void XnnpackGraphWriter::conv2d(const XnnConv2dParams& p, uint32_t input, uint32_t filter, uint32_t bias,
                                uint32_t output, float min, float max) {
  auto t = xf::Create_XNNNodeConv(state_->fbb, p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                  p.kernel_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w,
                                  p.group_input_channels, p.group_output_channels, p.groups, 0, 0, input, filter,
                                  bias, output, 0);
  state_->node(xf::XNodeUnion::XNNConv2d, t.Union(), min, max);
}

void XnnpackGraphWriter::depthwise_conv2d(const XnnConv2dParams& p, uint32_t input, uint32_t filter, uint32_t bias,
                                          uint32_t output, float min, float max) {
  auto t = xf::Create_XNNNodeConv(state_->fbb, p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                  p.kernel_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w,
                                  p.group_input_channels, p.group_output_channels, p.groups, 0, 0, input, filter,
                                  bias, output, 0);
  state_->node(xf::XNodeUnion::XNNDepthwiseConv2d, t.Union(), min, max);
}

void XnnpackGraphWriter::clamp(uint32_t input, uint32_t output, float min, float max) {
  state_->node(xf::XNodeUnion::XNNClamp, xf::Create_XNNNode1x1(state_->fbb, input, output, 0).Union(), min, max);
}

void XnnpackGraphWriter::add(uint32_t a, uint32_t b, uint32_t output, float min, float max) {
  state_->node(xf::XNodeUnion::XNNAdd, xf::Create_XNNNode2x1(state_->fbb, a, b, output, 0).Union(), min, max);
}

void XnnpackGraphWriter::global_avg_pool2d(uint32_t input, uint32_t output, float min, float max) {
  state_->node(xf::XNodeUnion::XNNGlobalAvgPooling2d,
               xf::Create_XNNNode1x1(state_->fbb, input, output, kFlagKeepDims).Union(), min, max);
}

void XnnpackGraphWriter::fully_connected(uint32_t input, uint32_t filter, uint32_t bias, uint32_t output, float min,
                                         float max, uint32_t flags) {
  state_->node(xf::XNodeUnion::XNNFullyConnected,
               xf::CreateXNNFullyConnected(state_->fbb, input, filter, bias, output, flags).Union(), min, max);
}

void XnnpackGraphWriter::static_transpose(std::vector<uint32_t> perm, uint32_t input, uint32_t output) {
  auto t = xf::CreateXNNStaticTransposeDirect(state_->fbb, static_cast<uint32_t>(perm.size()), &perm, input, output, 0);
  state_->node(xf::XNodeUnion::XNNStaticTranspose, t.Union(), kNoMin, kNoMax);
}

void XnnpackGraphWriter::static_reshape(std::vector<uint32_t> new_shape, uint32_t input, uint32_t output) {
  auto t = xf::CreateXNNStaticReshapeDirect(state_->fbb, static_cast<uint32_t>(new_shape.size()), &new_shape, input,
                                            output, 0);
  state_->node(xf::XNodeUnion::XNNStaticReshape, t.Union(), kNoMin, kNoMax);
}

size_t XnnpackGraphWriter::num_values() const { return state_->values.size(); }
size_t XnnpackGraphWriter::num_nodes() const { return state_->nodes.size(); }

XnnpackPayload XnnpackGraphWriter::finish() {
  State& s = *state_;
  if (s.finished) throw Error(ErrorKind::InvalidArgument, "XnnpackGraphWriter::finish() called twice");
  s.finished = true;
  auto graph = xf::CreateXNNGraph(s.fbb, s.fbb.CreateString("0"), s.fbb.CreateVector(s.nodes),
                                  s.fbb.CreateVector(s.values), s.num_externs, s.fbb.CreateVector(s.input_ids),
                                  s.fbb.CreateVector(s.output_ids), 0, 0, s.fbb.CreateVector(s.constants));
  s.fbb.Finish(graph, "XN01");

  // XH00 header (30 bytes, padded to 32), the flatbuffer padded to 16, then the (empty) constant region.
  constexpr uint32_t kHeaderPadded = 32;
  const auto fb_size = static_cast<uint32_t>(s.fbb.GetSize());
  const uint32_t constant_offset = kHeaderPadded + ((fb_size + 15) & ~15u);
  XnnpackPayload out;
  out.bytes.assign(constant_offset, 0);
  std::memcpy(out.bytes.data() + 4, "XH00", 4);
  put_u16(out.bytes.data() + 8, 30);
  put_u32(out.bytes.data() + 10, kHeaderPadded);
  put_u32(out.bytes.data() + 14, fb_size);
  put_u32(out.bytes.data() + 18, constant_offset);
  put_u64(out.bytes.data() + 22, 0);
  std::memcpy(out.bytes.data() + kHeaderPadded, s.fbb.GetBufferPointer(), fb_size);
  out.named_constants = std::move(s.named);
  return out;
}

size_t add_xnnpack_delegate(ProgramWriter& program, MethodWriter& method, XnnpackPayload payload,
                            std::vector<int32_t> args, bool constants_in_ptd) {
  for (auto& [key, bytes] : payload.named_constants) {
    if (constants_in_ptd) {
      if (!program.external_data().contains(key)) program.external_data().add_blob(key, bytes, 16);
    } else {
      program.add_named_data(key, bytes, 16);
    }
  }
  return method.delegate("XnnpackBackend", std::move(payload.bytes), std::move(args));
}

}  // namespace etnp::format
