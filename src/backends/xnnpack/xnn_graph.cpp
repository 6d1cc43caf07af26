#include "backends/xnnpack/xnn_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "core/printable.h"
#include "etnp/error.h"
#include "etnp/named_data.h"
#include "xnnpack_graph_generated.h"

namespace etnp::xnn {
namespace {

constexpr size_t kHeaderSize = 30;
constexpr uint32_t kMaxExterns = 4096;
// Element counts beyond this are refused so that byte sizes can never overflow.
constexpr size_t kMaxNumel = size_t{1} << 40;

[[noreturn]] void fail(const std::string& msg) {
  throw Error(ErrorKind::ProgramLoadError, "XNNPACK payload: " + msg);
}

std::string describe_node(uint32_t index, const char* name, uint32_t debug_handle) {
  const std::string handle = debug_handle == 0 ? "" : "debug handle " + std::to_string(debug_handle);
  if (index == kInvalidId) return std::string("implicit ") + name + (handle.empty() ? "" : " (" + handle + ")");
  return "node " + std::to_string(index) + " (" + name + (handle.empty() ? "" : ", " + handle) + ")";
}

uint16_t read_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t read_u64(const uint8_t* p) { return read_u32(p) | (static_cast<uint64_t>(read_u32(p + 4)) << 32); }

struct PayloadParts {
  bool has_header = false;
  std::span<const uint8_t> flatbuffer;
  std::span<const uint8_t> constants;
};

PayloadParts split_payload(std::span<const uint8_t> payload) {
  PayloadParts parts;
  if (payload.size() >= 8 && std::memcmp(payload.data() + 4, "XH00", 4) == 0) {
    if (payload.size() < kHeaderSize) {
      fail("header is truncated (" + std::to_string(payload.size()) + " bytes, need " +
           std::to_string(kHeaderSize) + ")");
    }
    const uint8_t* h = payload.data();
    (void)read_u16(h + 8);  // header_length: writers emit 30; readers do not rely on it.
    const uint64_t fb_offset = read_u32(h + 10);
    const uint64_t fb_size = read_u32(h + 14);
    const uint64_t const_offset = read_u32(h + 18);
    const uint64_t const_size = read_u64(h + 22);
    const uint64_t total = payload.size();
    if (fb_size < 8) fail("header gives a flatbuffer size of " + std::to_string(fb_size) + " bytes");
    if (fb_offset > total || fb_size > total - fb_offset) {
      fail("header places the flatbuffer at [" + std::to_string(fb_offset) + ", +" + std::to_string(fb_size) +
           ") beyond the payload's " + std::to_string(total) + " bytes");
    }
    if (const_offset > total || const_size > total - const_offset) {
      fail("header places the constant data at [" + std::to_string(const_offset) + ", +" +
           std::to_string(const_size) + ") beyond the payload's " + std::to_string(total) + " bytes");
    }
    if (const_offset < fb_offset + fb_size) fail("header's constant data overlaps the flatbuffer");
    parts.has_header = true;
    parts.flatbuffer = payload.subspan(fb_offset, fb_size);
    parts.constants = payload.subspan(const_offset, const_size);
  } else {
    parts.flatbuffer = payload;
  }
  return parts;
}

DataType convert_datatype(fb_xnnpack::XNNDatatype t) {
  const int v = static_cast<int>(t);
  if (v < 0 || v > static_cast<int>(DataType::bf16)) return DataType::invalid;
  return static_cast<DataType>(v);
}

class GraphParser {
 public:
  GraphParser(const PayloadParts& parts, const fb_xnnpack::XNNGraph* fb, const NamedDataMap* named_data,
              std::vector<std::string>* missing_data)
      : parts_(parts), fb_(fb), named_data_(named_data), missing_data_(missing_data) {}

  Graph parse() {
    if (fb_->xvalues() == nullptr) fail("the graph has no value list");
    if (fb_->xnodes() == nullptr) fail("the graph has no node list");
    graph_.num_externs = fb_->num_externs();
    if (graph_.num_externs > kMaxExterns) {
      fail("num_externs " + std::to_string(graph_.num_externs) + " exceeds " + std::to_string(kMaxExterns));
    }
    for (uint32_t i = 0; i < fb_->xvalues()->size(); ++i) parse_value(i, fb_->xvalues()->Get(i));
    for (uint32_t i = 0; i < fb_->xnodes()->size(); ++i) parse_node(i, fb_->xnodes()->Get(i));
    check_dataflow();
    collect_externals();
    return std::move(graph_);
  }

 private:
  // ---- values ----------------------------------------------------------------------------------------

  void parse_value(uint32_t index, const fb_xnnpack::XValue* xv) {
    const std::string where = "value " + std::to_string(index);
    if (xv == nullptr) fail(where + " is null");
    const fb_xnnpack::XNNTensorValue* tv = nullptr;
    const fb_xnnpack::XNNQuantizedTensorValue* qv = nullptr;
    switch (xv->xvalue_union_type()) {
      case fb_xnnpack::XValueUnion::XNNTensorValue:
        tv = xv->xvalue_union_as_XNNTensorValue();
        break;
      case fb_xnnpack::XValueUnion::XNNQuantizedTensorValue:
        qv = xv->xvalue_union_as_XNNQuantizedTensorValue();
        if (qv != nullptr) tv = qv->tensor_value();
        break;
      default:
        fail(where + " has unknown value type " + std::to_string(static_cast<int>(xv->xvalue_union_type())));
    }
    if (tv == nullptr) fail(where + " has no tensor description");

    Value v;
    v.serialized_id = tv->id_out();
    v.dtype = convert_datatype(tv->datatype());
    if (v.dtype == DataType::invalid) {
      fail(where + " has an invalid datatype (" + std::to_string(static_cast<int>(tv->datatype())) + ")");
    }
    const uint32_t num_dims = tv->num_dims();
    const size_t listed = tv->dims() == nullptr ? 0 : tv->dims()->size();
    if (num_dims != listed) {
      fail(where + " says num_dims " + std::to_string(num_dims) + " but lists " + std::to_string(listed) + " dims");
    }
    if (num_dims > static_cast<uint32_t>(kMaxDims)) {
      fail(where + " has rank " + std::to_string(num_dims) + " (XNNPACK allows at most 6)");
    }
    v.dims.rank = static_cast<uint8_t>(num_dims);
    size_t numel = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      v.dims[d] = tv->dims()->Get(d);
      numel *= std::max<size_t>(v.dims[d], 1);
      if (numel > kMaxNumel) fail(where + " is too large " + v.dims.str());
    }

    const uint32_t flags = tv->flags();
    if ((flags & ~3u) != 0) fail(where + " has unknown flags 0x" + hex(flags));
    v.external_input = (flags & 1u) != 0;
    v.external_output = (flags & 2u) != 0;
    if (v.external_input && v.external_output) fail(where + " is flagged as both an external input and output");
    if (v.is_external()) {
      v.external_id = tv->external_id();
      if (v.external_id >= graph_.num_externs) {
        fail(where + " has external id " + std::to_string(v.external_id) + " but num_externs is " +
             std::to_string(graph_.num_externs));
      }
      for (const Value& other : graph_.values) {
        if (other.is_external() && other.external_id == v.external_id) {
          fail(where + " reuses external id " + std::to_string(v.external_id));
        }
      }
    }

    if (tv->constant_buffer_idx() != 0) {
      if (v.is_external()) fail(where + " is external but also has constant data");
      resolve_constant(where, tv->constant_buffer_idx(), v);
      // Exporters align constant data to 16 bytes or more; data at an address that is not a multiple of its
      // element size would make every read of it a misaligned load (found by fuzz_load_methods).
      const size_t element = std::min<size_t>(datatype_size(v.dtype), 8);
      if (v.data != nullptr && element > 1 && reinterpret_cast<uintptr_t>(v.data) % element != 0) {
        fail(where + " has constant data that is not aligned to its " + std::to_string(element) + "-byte elements");
      }
    }

    if (qv != nullptr) {
      parse_quantization(where, qv, v);
    } else if (v.dtype != DataType::fp32 && v.dtype != DataType::fp16 && v.dtype != DataType::bf16 &&
               v.dtype != DataType::int32) {
      fail(where + " has quantized datatype " + datatype_name(v.dtype) + " but no quantization parameters");
    }

    if (v.is_constant() && !v.data_missing) {
      const size_t needed = value_storage_bytes(v, v.dims);
      if (v.data_bytes < needed) {
        fail(where + " " + v.dims.str() + " " + datatype_name(v.dtype) + " needs " + std::to_string(needed) +
             " bytes of constant data but has " + std::to_string(v.data_bytes));
      }
    }

    const fb_xnnpack::XNNDatatype dq = tv->dq_datatype();
    if (dq != fb_xnnpack::XNNDatatype::xnn_datatype_invalid) {
      // Legacy form of dynamic quantization: an fp32 external input quantized per row inside the graph.
      if (dq != fb_xnnpack::XNNDatatype::xnn_datatype_qint8 || v.dtype != DataType::fp32 || !v.external_input ||
          v.is_constant()) {
        fail(where + " has an unsupported dq_datatype " + std::to_string(static_cast<int>(dq)));
      }
      const uint32_t fp_index = add_value(where, std::move(v), /*register_id=*/false);
      Value q;
      q.dtype = DataType::qdint8;
      q.dims = graph_.values[fp_index].dims;
      q.quant = QuantKind::PerToken;
      q.num_nonbatch_dims = 1;
      q.serialized_id = graph_.values[fp_index].serialized_id;
      const uint32_t q_index = add_value(where, std::move(q), /*register_id=*/true);
      Node convert;
      convert.kind = NodeKind::Convert;
      convert.inputs = {fp_index};
      convert.outputs = {q_index};
      convert.index = kInvalidId;
      pending_converts_.push_back(std::move(convert));
      return;
    }
    add_value(where, std::move(v), /*register_id=*/true);
  }

  uint32_t add_value(const std::string& where, Value v, bool register_id) {
    const auto index = static_cast<uint32_t>(graph_.values.size());
    if (register_id) {
      if (!id_map_.emplace(v.serialized_id, index).second) {
        fail(where + " reuses id_out " + std::to_string(v.serialized_id));
      }
    }
    graph_.values.push_back(std::move(v));
    return index;
  }

  void resolve_constant(const std::string& where, uint32_t idx, Value& v) {
    if (!parts_.has_header) {
      const auto* buffers = fb_->constant_buffer();
      if (buffers == nullptr || idx >= buffers->size()) {
        fail(where + " refers to constant buffer " + std::to_string(idx) + " which does not exist");
      }
      const auto* buffer = buffers->Get(idx);
      if (buffer == nullptr || buffer->storage() == nullptr || buffer->storage()->size() == 0) {
        fail(where + " refers to an empty constant buffer " + std::to_string(idx));
      }
      v.data = buffer->storage()->data();
      v.data_bytes = buffer->storage()->size();
      return;
    }
    const auto* table = fb_->constant_data();
    if (table == nullptr || idx >= table->size()) {
      fail(where + " refers to constant " + std::to_string(idx) + " but the graph lists " +
           std::to_string(table == nullptr ? 0 : table->size()) + " constants");
    }
    const auto* entry = table->Get(idx);
    if (entry == nullptr) fail(where + " refers to a null constant entry " + std::to_string(idx));
    if (entry->named_key() != nullptr && entry->named_key()->size() > 0) {
      const std::string key = entry->named_key()->str();
      std::optional<std::span<const uint8_t>> bytes;
      if (named_data_ != nullptr) bytes = named_data_->get(key);
      if (!bytes) {
        std::string msg = "constant data " + quoted_name(key) + " (for " + where + ") was not found: ";
        if (named_data_ == nullptr) {
          msg += "the program has no named data and no external data (.ptd) was provided";
        } else {
          // .ptd sources describe themselves by their quoted name ("'w.ptd', the program's named data").
          const std::string sources = named_data_->describe();
          msg += "it is not in " + sources;
          const bool has_ptd = sources.rfind('\'', 0) == 0 || sources.find(", '") != std::string::npos;
          if (!has_ptd) msg += "; no external data (.ptd) was provided";
        }
        if (missing_data_ == nullptr) fail(msg);
        missing_data_->push_back(std::move(msg));
        v.data_missing = true;
        return;
      }
      v.data = bytes->data();
      v.data_bytes = bytes->size();
      if (v.data == nullptr && v.data_bytes == 0) fail("constant data " + quoted_name(key) + " is empty");
      return;
    }
    const uint64_t offset = entry->offset();
    const uint64_t size = entry->size();
    if (offset > parts_.constants.size() || size > parts_.constants.size() - offset) {
      fail(where + " constant " + std::to_string(idx) + " at [" + std::to_string(offset) + ", +" +
           std::to_string(size) + ") lies outside the " + std::to_string(parts_.constants.size()) +
           "-byte constant region");
    }
    v.data = parts_.constants.data() + offset;
    v.data_bytes = size;
    if (size == 0) fail(where + " refers to an empty constant " + std::to_string(idx));
  }

  std::vector<float> load_scales(const std::string& where, const flatbuffers::Vector<float>* inline_scales,
                                 uint32_t buffer_idx, uint32_t num_scales) {
    std::vector<float> scales;
    if (buffer_idx != 0) {
      Value tmp;
      resolve_constant(where + " scales", buffer_idx, tmp);
      if (tmp.data_missing) return std::vector<float>(num_scales, 1.0f);  // placeholder: nothing is built
      if (tmp.data_bytes < size_t{num_scales} * sizeof(float)) {
        fail(where + " scale buffer holds " + std::to_string(tmp.data_bytes) + " bytes for " +
             std::to_string(num_scales) + " scales");
      }
      scales.resize(num_scales);
      std::memcpy(scales.data(), tmp.data, scales.size() * sizeof(float));
    } else if (inline_scales != nullptr) {
      scales.assign(inline_scales->begin(), inline_scales->end());
    }
    return scales;
  }

  static bool valid_scale(float s) { return std::isfinite(s) && s > 0.0f; }

  void parse_quantization(const std::string& where, const fb_xnnpack::XNNQuantizedTensorValue* qv, Value& v) {
    switch (qv->quant_params_type()) {
      case fb_xnnpack::XNNQuantParams::PerTensorQuant: {
        const auto* p = qv->quant_params_as_PerTensorQuant();
        if (p == nullptr) fail(where + " has empty per-tensor quantization parameters");
        v.quant = QuantKind::PerTensor;
        v.scale = p->scale();
        v.zero_point = p->zero_point();
        if (!valid_scale(v.scale)) fail(where + " has an invalid quantization scale " + std::to_string(v.scale));
        int32_t lo = 0, hi = 0;
        switch (v.dtype) {
          case DataType::qint8: lo = -128; hi = 127; break;
          case DataType::quint8: lo = 0; hi = 255; break;
          case DataType::qint32: break;
          default:
            fail(where + " has per-tensor quantization but datatype " + datatype_name(v.dtype));
        }
        if (v.zero_point < lo || v.zero_point > hi) {
          fail(where + " has zero point " + std::to_string(v.zero_point) + " outside [" + std::to_string(lo) +
               ", " + std::to_string(hi) + "] for " + datatype_name(v.dtype));
        }
        return;
      }
      case fb_xnnpack::XNNQuantParams::PerChannelQuant: {
        const auto* p = qv->quant_params_as_PerChannelQuant();
        if (p == nullptr) fail(where + " has empty per-channel quantization parameters");
        if (v.dtype != DataType::qcint8 && v.dtype != DataType::qcint32 && v.dtype != DataType::qcint4) {
          fail(where + " has per-channel quantization but datatype " + datatype_name(v.dtype));
        }
        if (p->channel_dim() < 0 || p->channel_dim() >= v.dims.rank) {
          fail(where + " has channel_dim " + std::to_string(p->channel_dim()) + " for rank " +
               std::to_string(v.dims.rank));
        }
        v.quant = QuantKind::PerChannel;
        v.channel_dim = static_cast<uint32_t>(p->channel_dim());
        const uint32_t channels = static_cast<uint32_t>(v.dims[static_cast<int>(v.channel_dim)]);
        const uint32_t count = p->scale_buffer_idx() != 0 ? p->num_scales()
                                                          : (p->scale() == nullptr ? 0 : p->scale()->size());
        if (count != channels) {
          fail(where + " has " + std::to_string(count) + " channel scales for " + std::to_string(channels) +
               " channels");
        }
        v.channel_scales = load_scales(where, p->scale(), p->scale_buffer_idx(), count);
        for (float s : v.channel_scales) {
          if (!valid_scale(s)) fail(where + " has an invalid channel scale " + std::to_string(s));
        }
        v.zero_point = v.dtype == DataType::qcint4 ? 8 : 0;
        return;
      }
      case fb_xnnpack::XNNQuantParams::PerTokenDynamicQuant: {
        const auto* p = qv->quant_params_as_PerTokenDynamicQuant();
        if (p == nullptr) fail(where + " has empty dynamic quantization parameters");
        if (v.dtype != DataType::qdint8) {
          fail(where + " has dynamic quantization but datatype " + datatype_name(v.dtype));
        }
        if (v.is_constant()) fail(where + " is dynamically quantized but has constant data");
        if (v.is_external()) fail(where + " is dynamically quantized but external");
        if (p->num_nonbatch_dims() < 1 || p->num_nonbatch_dims() > v.dims.rank) {
          fail(where + " has num_nonbatch_dims " + std::to_string(p->num_nonbatch_dims()) + " for rank " +
               std::to_string(v.dims.rank));
        }
        v.quant = QuantKind::PerToken;
        v.num_nonbatch_dims = static_cast<uint32_t>(p->num_nonbatch_dims());
        return;
      }
      case fb_xnnpack::XNNQuantParams::PerChannelGroupQuant: {
        const auto* p = qv->quant_params_as_PerChannelGroupQuant();
        if (p == nullptr) fail(where + " has empty blockwise quantization parameters");
        if (v.dtype != DataType::qbint4) {
          fail(where + " has blockwise quantization but datatype " + datatype_name(v.dtype));
        }
        if (v.dims.rank != 2) fail(where + " is blockwise quantized but has rank " + std::to_string(v.dims.rank));
        if (p->group_size() <= 0 || v.dims[1] % static_cast<size_t>(p->group_size()) != 0) {
          fail(where + " has group size " + std::to_string(p->group_size()) + " for " + std::to_string(v.dims[1]) +
               " input channels");
        }
        v.quant = QuantKind::Blockwise;
        v.channel_dim = static_cast<uint32_t>(std::max(p->channel_dim(), 0));
        v.group_size = static_cast<uint32_t>(p->group_size());
        v.zero_point = 8;
        const size_t expected = v.dims[0] * (v.dims[1] / v.group_size);
        if (p->scale_buffer_idx() != 0) {
          // bf16 scales from constant data.
          if (p->num_scales() != expected) {
            fail(where + " has " + std::to_string(p->num_scales()) + " block scales, expected " +
                 std::to_string(expected));
          }
          Value tmp;
          resolve_constant(where + " scales", p->scale_buffer_idx(), tmp);
          if (tmp.data_missing) {
            v.block_scales.assign(expected, 1.0f);  // placeholder: nothing is built
            return;
          }
          if (tmp.data_bytes < expected * 2) fail(where + " block scale buffer is too small");
          v.block_scales.resize(expected);
          for (size_t i = 0; i < expected; ++i) {
            uint16_t bits;
            std::memcpy(&bits, tmp.data + 2 * i, 2);
            const uint32_t f32 = static_cast<uint32_t>(bits) << 16;
            std::memcpy(&v.block_scales[i], &f32, 4);
          }
        } else {
          if (p->scale() == nullptr || p->scale()->size() != expected) {
            fail(where + " has " + std::to_string(p->scale() == nullptr ? 0 : p->scale()->size()) +
                 " block scales, expected " + std::to_string(expected));
          }
          // Inline fp32 scales are rounded to bf16, as the reference runtime does.
          v.block_scales.resize(expected);
          for (size_t i = 0; i < expected; ++i) {
            uint32_t bits;
            const float f = p->scale()->Get(static_cast<flatbuffers::uoffset_t>(i));
            std::memcpy(&bits, &f, 4);
            bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;  // round to nearest even
            std::memcpy(&v.block_scales[i], &bits, 4);
          }
        }
        for (float sc : v.block_scales) {
          if (!std::isfinite(sc) || sc <= 0.0f) fail(where + " has an invalid block scale " + std::to_string(sc));
        }
        return;
      }
      default:
        fail(where + " has unknown quantization parameters type " +
             std::to_string(static_cast<int>(qv->quant_params_type())));
    }
  }

  // ---- nodes -----------------------------------------------------------------------------------------

  uint32_t value_id(const Node& node, const char* field, uint32_t serialized, bool optional = false) {
    if (optional && serialized == kInvalidId) return kInvalidId;
    auto it = id_map_.find(serialized);
    if (it == id_map_.end()) {
      fail(node.describe() + ": " + field + " " + std::to_string(serialized) + " is not a defined value");
    }
    return it->second;
  }

  template <typename T>
  const T* require(const T* table, const Node& node) {
    if (table == nullptr) fail(node.describe() + " has no parameters");
    return table;
  }

  static void set_window(Node& n, const fb_xnnpack::_XNNNodeConv* c) {
    WindowParams& w = n.window;
    w.pad_top = c->padding_top();
    w.pad_right = c->padding_right();
    w.pad_bottom = c->padding_bottom();
    w.pad_left = c->padding_left();
    w.kernel_h = c->kernel_height();
    w.kernel_w = c->kernel_width();
    w.stride_h = c->subsampling_height();
    w.stride_w = c->subsampling_width();
    w.dilation_h = c->dilation_height();
    w.dilation_w = c->dilation_width();
    w.groups = c->groups();
    w.group_input_channels = c->group_input_channels();
    w.group_output_channels = c->group_output_channels();
    w.adjustment_h = c->adjustment_height();
    w.adjustment_w = c->adjustment_width();
  }

  static void set_window(Node& n, const fb_xnnpack::_XNNPooling2D* p) {
    WindowParams& w = n.window;
    w.pad_top = p->padding_top();
    w.pad_right = p->padding_right();
    w.pad_bottom = p->padding_bottom();
    w.pad_left = p->padding_left();
    w.kernel_h = p->pooling_height();
    w.kernel_w = p->pooling_width();
    w.stride_h = p->stride_height();
    w.stride_w = p->stride_width();
    w.dilation_h = p->dilation_height();
    w.dilation_w = p->dilation_width();
  }

  template <typename Vec>
  static std::vector<size_t> to_sizes(const Vec* v) {
    std::vector<size_t> out;
    if (v != nullptr) out.assign(v->begin(), v->end());
    return out;
  }

  void parse_node(uint32_t index, const fb_xnnpack::XNode* xn) {
    using U = fb_xnnpack::XNodeUnion;
    Node n;
    n.index = index;
    if (xn == nullptr) fail("node " + std::to_string(index) + " is null");
    n.debug_handle = xn->debug_handle();
    if (const auto* mm = xn->output_min_max()) {
      n.output_min = mm->output_min();
      n.output_max = mm->output_max();
      if (std::isnan(n.output_min) || std::isnan(n.output_max) || n.output_min > n.output_max) {
        fail(n.describe() + " has an invalid output range [" + std::to_string(n.output_min) + ", " +
             std::to_string(n.output_max) + "]");
      }
    }
    const U type = xn->xnode_union_type();
    switch (type) {
#define XNN_NODE_KIND(kind_, name, member, layout, shape, rule, traits) \
  case U::member:                                                      \
    n.kind = NodeKind::kind_;                                          \
    parse_##layout(n, xn);                                             \
    break;
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
      case U::XNNConcatenate3:
      case U::XNNConcatenate4:
      case U::XNNConcatenate5:
        n.kind = NodeKind::Concatenate;
        parse_concatenate(n, xn);
        break;
      case U::XNNScaledDotProductAttention:
        fail(describe_node(index, "XNNScaledDotProductAttention", n.debug_handle) +
             " is not implemented by XNNPACK delegates");
      default:
        fail("node " + std::to_string(index) + " has unknown node type " + std::to_string(static_cast<int>(type)));
    }
    graph_.nodes.push_back(std::move(n));
  }

  // ---- node layouts (the `layout` column of xnn_node_kinds.inc) ----------------------------------------

  void parse_node2x1(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(static_cast<const fb_xnnpack::_XNNNode2x1*>(xn->xnode_union()), n);
    n.inputs = {value_id(n, "input1_id", t->input1_id()), value_id(n, "input2_id", t->input2_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_node1x1(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(static_cast<const fb_xnnpack::_XNNNode1x1*>(xn->xnode_union()), n);
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_conv(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(static_cast<const fb_xnnpack::_XNNNodeConv*>(xn->xnode_union()), n);
    set_window(n, t);
    n.inputs = {value_id(n, "input1_id", t->input1_id()), value_id(n, "filter_id", t->filter_id()),
                value_id(n, "bias_id", t->bias_id(), /*optional=*/true)};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_pooling(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(static_cast<const fb_xnnpack::_XNNPooling2D*>(xn->xnode_union()), n);
    set_window(n, t);
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_concatenate(Node& n, const fb_xnnpack::XNode* xn) {
    using U = fb_xnnpack::XNodeUnion;
    const U type = xn->xnode_union_type();
    const int count = type == U::XNNConcatenate2 ? 2 : type == U::XNNConcatenate3 ? 3 : type == U::XNNConcatenate4 ? 4 : 5;
    const auto* t = require(static_cast<const fb_xnnpack::_XNNCat*>(xn->xnode_union()), n);
    const uint32_t ids[5] = {t->input1_id(), t->input2_id(), t->input3_id(), t->input4_id(), t->input5_id()};
    static const char* names[5] = {"input1_id", "input2_id", "input3_id", "input4_id", "input5_id"};
    for (int i = 0; i < count; ++i) n.inputs.push_back(value_id(n, names[i], ids[i]));
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.axis = t->axis();
    n.flags = t->flags();
  }

  void parse_fully_connected(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNFullyConnected(), n);
    n.inputs = {value_id(n, "input1_id", t->input1_id()), value_id(n, "filter_id", t->filter_id()),
                value_id(n, "bias_id", t->bias_id(), /*optional=*/true)};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_transpose(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNStaticTranspose(), n);
    if (t->perm() == nullptr) fail(n.describe() + " has no perm");
    n.list_a = to_sizes(t->perm());
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_reshape(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNStaticReshape(), n);
    if (t->new_shape() == nullptr) fail(n.describe() + " has no new_shape");
    n.list_a = to_sizes(t->new_shape());
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_slice(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNStaticSlice(), n);
    if (t->offsets() == nullptr || t->sizes() == nullptr) fail(n.describe() + " has no offsets or sizes");
    n.list_a = to_sizes(t->offsets());
    n.list_b = to_sizes(t->sizes());
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_pad(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNStaticConstantPad(), n);
    if (t->pre_paddings() == nullptr || t->post_paddings() == nullptr) fail(n.describe() + " has no paddings");
    n.list_a = to_sizes(t->pre_paddings());
    n.list_b = to_sizes(t->post_paddings());
    n.scalar = t->padding_value();
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_resize(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNStaticResizeBilinear2D(), n);
    n.new_height = t->new_height();
    n.new_width = t->new_width();
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
  }

  void parse_argmax_pooling(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNArgMaxPooling2d(), n);
    WindowParams& w = n.window;
    w.pad_top = t->padding_top();
    w.pad_right = t->padding_right();
    w.pad_bottom = t->padding_bottom();
    w.pad_left = t->padding_left();
    w.kernel_h = w.stride_h = t->pooling_height();
    w.kernel_w = w.stride_w = t->pooling_width();
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_value_id", t->output_value_id()),
                 value_id(n, "output_index_id", t->output_index_id())};
    n.flags = t->flags();
  }

  void parse_leaky_relu(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNLeakyReLU(), n);
    n.scalar = t->negative_slope();
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
    if (!std::isfinite(n.scalar)) fail(n.describe() + " has a non-finite parameter");
  }

  void parse_elu(Node& n, const fb_xnnpack::XNode* xn) {
    const auto* t = require(xn->xnode_union_as_XNNELU(), n);
    n.scalar = t->alpha();
    n.inputs = {value_id(n, "input_id", t->input_id())};
    n.outputs = {value_id(n, "output_id", t->output_id())};
    n.flags = t->flags();
    if (!std::isfinite(n.scalar)) fail(n.describe() + " has a non-finite parameter");
  }

  // Every value a node reads must exist by then (a constant, an external input or an earlier node's
  // output), each value is written at most once, and every external output is written.
  void check_dataflow() {
    if (!pending_converts_.empty()) {
      graph_.nodes.insert(graph_.nodes.begin(), pending_converts_.begin(), pending_converts_.end());
    }
    std::vector<uint8_t> ready(graph_.values.size(), 0);
    for (size_t i = 0; i < graph_.values.size(); ++i) {
      ready[i] = graph_.values[i].is_constant() || graph_.values[i].external_input;
    }
    for (const Node& n : graph_.nodes) {
      for (uint32_t in : n.inputs) {
        if (in == kInvalidId) continue;
        if (!ready[in]) {
          fail(n.describe() + " reads value " + std::to_string(graph_.values[in].serialized_id) +
               " before anything writes it");
        }
      }
      for (uint32_t out : n.outputs) {
        const Value& v = graph_.values[out];
        if (v.is_constant() || v.external_input) {
          fail(n.describe() + " writes value " + std::to_string(v.serialized_id) + ", which is " +
               (v.is_constant() ? "a constant" : "an external input"));
        }
        if (ready[out]) {
          fail(n.describe() + " writes value " + std::to_string(v.serialized_id) + ", which was already written");
        }
        ready[out] = 1;
      }
    }
    for (size_t i = 0; i < graph_.values.size(); ++i) {
      if (graph_.values[i].external_output && !ready[i]) {
        fail("external output value " + std::to_string(graph_.values[i].serialized_id) + " is never written");
      }
    }
  }

  void collect_externals() {
    for (uint32_t i = 0; i < graph_.values.size(); ++i) {
      if (graph_.values[i].external_input) graph_.input_values.push_back(i);
      if (graph_.values[i].external_output) graph_.output_values.push_back(i);
    }
    auto by_id = [&](uint32_t a, uint32_t b) { return graph_.values[a].external_id < graph_.values[b].external_id; };
    std::sort(graph_.input_values.begin(), graph_.input_values.end(), by_id);
    std::sort(graph_.output_values.begin(), graph_.output_values.end(), by_id);
  }

  static std::string hex(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%x", v);
    return buf;
  }

  const PayloadParts& parts_;
  const fb_xnnpack::XNNGraph* fb_;
  const NamedDataMap* named_data_;
  std::vector<std::string>* missing_data_;
  Graph graph_;
  std::unordered_map<uint32_t, uint32_t> id_map_;
  std::vector<Node> pending_converts_;
};

}  // namespace

const char* datatype_name(DataType type) {
  switch (type) {
    case DataType::invalid: return "invalid";
    case DataType::fp32: return "fp32";
    case DataType::fp16: return "fp16";
    case DataType::qint8: return "qint8";
    case DataType::quint8: return "quint8";
    case DataType::qint32: return "qint32";
    case DataType::qcint8: return "qcint8";
    case DataType::qcint32: return "qcint32";
    case DataType::qcint4: return "qcint4";
    case DataType::qdint8: return "qdint8";
    case DataType::qbint4: return "qbint4";
    case DataType::qpint8: return "qpint8";
    case DataType::int32: return "int32";
    case DataType::pfp32: return "pfp32";
    case DataType::bf16: return "bf16";
  }
  return "invalid";
}

size_t datatype_size(DataType type) {
  switch (type) {
    case DataType::fp32:
    case DataType::qint32:
    case DataType::qcint32:
    case DataType::int32:
    case DataType::pfp32:
      return 4;
    case DataType::fp16:
    case DataType::bf16:
      return 2;
    case DataType::qint8:
    case DataType::quint8:
    case DataType::qcint8:
    case DataType::qdint8:
    case DataType::qpint8:
      return 1;
    default:
      return 0;
  }
}

bool is_int8_type(DataType type) {
  return type == DataType::qint8 || type == DataType::quint8 || type == DataType::qcint8 ||
         type == DataType::qdint8 || type == DataType::qpint8;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const char* node_kind_name(NodeKind kind) {
  switch (kind) {
#define XNN_NODE_KIND(kind_, name, member, layout, shape, rule, traits) \
  case NodeKind::kind_:                                                \
    return name;
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
  }
  return "?";
}

uint32_t node_kind_traits(NodeKind kind) {
  switch (kind) {
#define XNN_NODE_KIND(kind_, name, member, layout, shape, rule, traits) \
  case NodeKind::kind_:                                                \
    return traits;
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
  }
  return 0;
}

std::string Node::describe() const { return describe_node(index, node_kind_name(kind), debug_handle); }

size_t dynamic_quant_rows(const Value& value, const Shape& shape) {
  size_t rows = 1;
  const int batch_dims = shape.rank - static_cast<int>(std::min<uint32_t>(value.num_nonbatch_dims, shape.rank));
  for (int i = 0; i < batch_dims; ++i) rows *= shape[i];
  return rows;
}

size_t value_storage_bytes(const Value& value, const Shape& shape) {
  const size_t numel = shape.numel();
  switch (value.dtype) {
    case DataType::qcint4:
    case DataType::qbint4: {
      if (shape.rank == 0) return 1;
      const size_t last = shape[shape.rank - 1];
      return last == 0 ? 0 : (numel / last) * ((last + 1) / 2);
    }
    case DataType::qdint8:
      // int8 data, padded to 8 bytes, then one parameter pair per row and the spare ones XNNPACK reads.
      return dynamic_quant_params_offset(numel) +
             (dynamic_quant_rows(value, shape) + kExtraDynamicQuantParams) * sizeof(DynamicQuantParams);
    default:
      return numel * datatype_size(value.dtype);
  }
}

Graph parse_graph(std::span<const uint8_t> payload, const NamedDataMap* named_data,
                  std::vector<std::string>* missing_data) {
  const PayloadParts parts = split_payload(payload);
  const std::span<const uint8_t> fb = parts.flatbuffer;
  if (fb.size() < 8) fail("flatbuffer is too small (" + std::to_string(fb.size()) + " bytes)");
  // FlatBuffers buffers are below 2 GiB; the bound also keeps the aligned copy's size from wrapping.
  if (fb.size() >= static_cast<size_t>(FLATBUFFERS_MAX_BUFFER_SIZE)) {
    fail("flatbuffer of " + std::to_string(fb.size()) + " bytes is larger than FlatBuffers allows");
  }
  if (std::memcmp(fb.data() + 4, "XN01", 4) != 0 && std::memcmp(fb.data() + 4, "XN00", 4) != 0) {
    std::string id;
    for (int i = 4; i < 8; ++i) id += (fb[i] >= 32 && fb[i] < 127) ? static_cast<char>(fb[i]) : '?';
    fail("flatbuffer identifier " + quoted_name(id) + " is not XN00 or XN01");
  }
  // FlatBuffers reads scalars in place; copy into 16-byte-aligned storage so those reads are aligned
  // whatever the payload's alignment. Constant bytes still point into the payload (read with memcpy or
  // handed to XNNPACK).
  std::vector<uint64_t> aligned((fb.size() + 15) / 8 + 1);
  auto* base = reinterpret_cast<uint8_t*>(aligned.data());
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) base += 8;
  std::memcpy(base, fb.data(), fb.size());
  flatbuffers::Verifier verifier(base, fb.size(), /*max_depth=*/64, /*max_tables=*/1000000);
  if (!verifier.VerifyBuffer<fb_xnnpack::XNNGraph>(nullptr)) fail("flatbuffer failed verification");
  const auto* graph = flatbuffers::GetRoot<fb_xnnpack::XNNGraph>(base);
  GraphParser parser(parts, graph, named_data, missing_data);
  Graph result = parser.parse();
  result.flatbuffer_copy = std::move(aligned);  // legacy inline constants point into it
  return result;
}

}  // namespace etnp::xnn
