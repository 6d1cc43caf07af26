// The XNNPACK delegate's view of a payload: the XNNGraph flatbuffer parsed and fully checked into plain
// structs (values with resolved constants and quantization, nodes with value indices and parameters).
// Nothing downstream touches the flatbuffer again, and nothing downstream sees an id that was not checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "compute/row_quant.h"

namespace etnp {
class NamedDataMap;
}

namespace etnp::xnn {

constexpr uint32_t kInvalidId = 0xFFFFFFFFu;
constexpr int kMaxDims = 6;  // XNN_MAX_TENSOR_DIMS

/// Serialized tensor element types (the schema's numbering, which is not XNNPACK's C enum).
enum class DataType : uint8_t {
  invalid = 0,
  fp32 = 1,
  fp16 = 2,
  qint8 = 3,
  quint8 = 4,
  qint32 = 5,
  qcint8 = 6,
  qcint32 = 7,
  qcint4 = 8,
  qdint8 = 9,
  qbint4 = 10,
  qpint8 = 11,
  int32 = 12,
  pfp32 = 13,
  bf16 = 14,
};

const char* datatype_name(DataType type);
/// Bytes per element for byte-addressable types; 0 for the packed 4-bit types and invalid.
size_t datatype_size(DataType type);
/// True for the 8-bit types whose bytes may be moved without interpretation.
bool is_int8_type(DataType type);

/// A shape in XNNPACK's physical order (NHWC for channels-last tensors).
struct Shape {
  uint8_t rank = 0;
  size_t dims[kMaxDims] = {};

  size_t numel() const {
    size_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  size_t operator[](int i) const { return dims[i]; }
  size_t& operator[](int i) { return dims[i]; }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i) {
      if (dims[i] != o.dims[i]) return false;
    }
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;
};

enum class QuantKind : uint8_t { None, PerTensor, PerChannel, PerToken, Blockwise };

struct Value {
  DataType dtype = DataType::invalid;
  Shape dims;  ///< As serialized: the static shape, or the upper bound of a dynamic one.
  QuantKind quant = QuantKind::None;
  float scale = 1.0f;          ///< PerTensor
  int32_t zero_point = 0;      ///< PerTensor (8 for the 4-bit types)
  std::vector<float> channel_scales;  ///< PerChannel
  uint32_t channel_dim = 0;           ///< PerChannel / Blockwise
  uint32_t num_nonbatch_dims = 0;     ///< PerToken
  uint32_t group_size = 0;            ///< Blockwise
  std::vector<float> block_scales;    ///< Blockwise: [dims[0], dims[1] / group_size], from bf16

  /// Constant bytes (nullptr for runtime values). They point into the payload, the named data or the
  /// graph's flatbuffer copy, so they are only valid while the delegate is being built; whatever is
  /// needed later must be copied.
  const uint8_t* data = nullptr;
  size_t data_bytes = 0;
  /// A constant whose named data was not found (parse_graph's `missing_data` mode): it counts as a constant
  /// for the support checks, but has no bytes, so no executor is ever built from it.
  bool data_missing = false;

  uint32_t external_id = kInvalidId;
  bool external_input = false;
  bool external_output = false;
  uint32_t serialized_id = 0;  ///< id_out, for messages.

  bool is_constant() const { return data != nullptr || data_missing; }
  bool is_external() const { return external_input || external_output; }
};

enum class NodeKind : uint8_t {
#define XNN_NODE_KIND(kind, name, member, layout, shape, rule, traits) kind,
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
};

const char* node_kind_name(NodeKind kind);

// Node kind traits (the last column of xnn_node_kinds.inc).
constexpr uint32_t kFusesClamp = 0x1;  ///< A clamp reading only this node's output folds into it.
constexpr uint32_t kWeighted = 0x2;    ///< A filter input: the node's work is outputs x reduction length.
uint32_t node_kind_traits(NodeKind kind);

/// Convolution and pooling geometry (pooling reuses kernel_* for the window and stride_* for its step).
struct WindowParams {
  uint32_t pad_top = 0, pad_right = 0, pad_bottom = 0, pad_left = 0;
  uint32_t kernel_h = 1, kernel_w = 1;
  uint32_t stride_h = 1, stride_w = 1;
  uint32_t dilation_h = 1, dilation_w = 1;
  uint32_t groups = 1, group_input_channels = 0, group_output_channels = 0;
  uint32_t adjustment_h = 0, adjustment_w = 0;
};

// Node flags the format uses (XNNPACK's values).
constexpr uint32_t kFlagTransposeWeights = 0x1;  // FullyConnected: filter is [K, N]; BatchMatMul: B is [.., N, K]
constexpr uint32_t kFlagAlignCorners = 0x8;      // ResizeBilinear
constexpr uint32_t kFlagKeepDims = 0x40;         // GlobalAvgPooling2d

struct Node {
  NodeKind kind = NodeKind::Add;
  /// Value indices. Optional inputs (a FullyConnected/convolution bias) are kInvalidId when absent.
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  float output_min = -std::numeric_limits<float>::infinity();
  float output_max = std::numeric_limits<float>::infinity();
  uint32_t flags = 0;
  uint32_t debug_handle = 0;
  uint32_t index = 0;  ///< Position in the serialized node list, for messages.

  WindowParams window;
  std::vector<size_t> list_a;  ///< perm | new_shape | slice offsets | pre paddings
  std::vector<size_t> list_b;  ///< slice sizes | post paddings
  float scalar = 0.0f;         ///< LeakyReLU slope | ELU alpha | pad value
  uint32_t axis = 0;           ///< Concatenate
  size_t new_height = 0, new_width = 0;  ///< ResizeBilinear

  std::string describe() const;  ///< "node 3 (XNNConv2d)", "node 3 (XNNConv2d, debug handle 12)"
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  uint32_t num_externs = 0;
  std::vector<uint32_t> input_values;   ///< Values flagged external input, by ascending external id.
  std::vector<uint32_t> output_values;  ///< Values flagged external output, by ascending external id.
  std::vector<uint64_t> flatbuffer_copy;  ///< Aligned copy of the flatbuffer (legacy constants live in it).
};

/// Parses and validates a delegate payload. Constants addressed by key are looked up in `named_data`
/// (may be null). Throws etnp::Error(ProgramLoadError) naming the problem for anything malformed or
/// unsupported. With `missing_data`, a key `named_data` lacks is not an error: its message is appended there,
/// the value is marked `data_missing` and parsing goes on (to list every missing key at once).
Graph parse_graph(std::span<const uint8_t> payload, const NamedDataMap* named_data,
                  std::vector<std::string>* missing_data = nullptr);

/// Bytes a value of `shape` occupies in the delegate's buffers (including the per-row parameters that a
/// dynamically quantized tensor carries after its data). 4-bit values hold two per byte, each row (last
/// dim) padded to a whole byte.
size_t value_storage_bytes(const Value& value, const Shape& shape);

/// Rows of a dynamically quantized (qdint8) tensor: the product of its batch (leading) dims.
size_t dynamic_quant_rows(const Value& value, const Shape& shape);

/// Per-row quantization parameters stored after the int8 data of a qdint8 tensor (XNNPACK's
/// xnn_quantization_params layout, so that its qd8 operators read them in place).
using DynamicQuantParams = compute::RowQuantParams;
/// Entries past the last row's a qdint8 tensor keeps (XNNPACK's qd8 operators read up to 10 more).
inline constexpr size_t kExtraDynamicQuantParams = 10;
/// Where a qdint8 tensor of `numel` codes keeps its per-row parameters: after the codes, 8-byte aligned.
inline size_t dynamic_quant_params_offset(size_t numel) { return (numel + 7) & ~size_t{7}; }

}  // namespace etnp::xnn
