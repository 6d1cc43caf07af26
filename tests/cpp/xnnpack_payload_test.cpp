// XNNPACK delegate payload parsing: header and flatbuffer validation, value/node checks and constant
// lookup. Every malformed payload must be a clean etnp::Error(ProgramLoadError) naming the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using testing::GraphBuilder;
using testing::MapNamedData;

// Parses (and builds an executor for) `payload`, expecting a ProgramLoadError whose message contains
// every string in `needles`.
void expect_load_error(const std::vector<uint8_t>& payload, std::initializer_list<std::string> needles,
                       const NamedDataMap* named = nullptr) {
  try {
    Executor executor(parse_graph(payload, named));
    FAIL() << "payload was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError) << e.what();
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::vector<uint8_t> add_payload() {
  GraphBuilder g;
  const uint32_t a = g.input({3}, 0), b = g.input({3}, 1), out = g.output({3}, 2);
  g.binary(testing::XNodeUnion::XNNAdd, a, b, out);
  return g.payload();
}

void put_u32(std::vector<uint8_t>& p, size_t at, uint32_t v) { std::memcpy(p.data() + at, &v, 4); }

TEST(XnnpackPayload, ParsesValidGraph) {
  const Graph g = parse_graph(add_payload(), nullptr);
  ASSERT_EQ(g.values.size(), 3u);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].kind, NodeKind::Add);
  EXPECT_EQ(g.num_externs, 3u);
  EXPECT_EQ(g.input_values, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(g.output_values, (std::vector<uint32_t>{2}));
  EXPECT_EQ(g.values[2].dims.str(), "[3]");
}

TEST(XnnpackPayload, AcceptsBareFlatbufferAndOldIdentifier) {
  GraphBuilder g;
  const uint32_t a = g.input({2}, 0), out = g.output({2}, 1);
  g.unary(testing::XNodeUnion::XNNAbs, a, out);
  const Graph parsed = parse_graph(g.flatbuffer("XN00"), nullptr);
  EXPECT_EQ(parsed.nodes.size(), 1u);
}

TEST(XnnpackPayload, RejectsBadHeaders) {
  std::vector<uint8_t> p = add_payload();
  // Truncated header.
  expect_load_error(std::vector<uint8_t>(p.begin(), p.begin() + 20), {"header is truncated"});
  // Flatbuffer beyond the payload.
  std::vector<uint8_t> q = p;
  put_u32(q, 14, static_cast<uint32_t>(p.size()));
  expect_load_error(q, {"beyond the payload"});
  // Flatbuffer size below 8.
  q = p;
  put_u32(q, 14, 4);
  expect_load_error(q, {"flatbuffer size"});
  // Constant region overlapping the flatbuffer.
  q = p;
  put_u32(q, 18, 40);
  expect_load_error(q, {"overlaps"});
  // Constant region beyond the payload (64-bit size).
  q = p;
  const uint64_t huge = ~uint64_t{0} - 8;
  std::memcpy(q.data() + 22, &huge, 8);
  expect_load_error(q, {"constant data"});
}

TEST(XnnpackPayload, RejectsTruncatedOrCorruptFlatbuffer) {
  std::vector<uint8_t> p = add_payload();
  uint32_t fb_size;
  std::memcpy(&fb_size, p.data() + 14, 4);
  // Declare only half the flatbuffer: offsets now point past its end.
  std::vector<uint8_t> q = p;
  put_u32(q, 14, fb_size / 2);
  expect_load_error(q, {"verification"});
  // A wrong identifier.
  q = p;
  std::memcpy(q.data() + 32 + 4, "ZZ99", 4);
  expect_load_error(q, {"identifier", "ZZ99"});
  // A root offset pointing far outside.
  q = p;
  put_u32(q, 32, 0x7FFFFFF0u);
  expect_load_error(q, {"verification"});
}

TEST(XnnpackPayload, RejectsUndefinedValueIds) {
  GraphBuilder g;
  const uint32_t a = g.input({3}, 0), out = g.output({3}, 1);
  g.binary(testing::XNodeUnion::XNNAdd, a, 42, out);
  expect_load_error(g.payload(), {"node 0 (XNNAdd)", "input2_id 42"});
}

TEST(XnnpackPayload, RejectsUnknownAndUnsupportedNodeTypes) {
  {
    GraphBuilder g;
    const uint32_t a = g.input({3}, 0), out = g.output({3}, 1);
    g.node(static_cast<testing::XNodeUnion>(200), fb_xnnpack::Create_XNNNode1x1(g.fbb(), a, out, 0).Union());
    expect_load_error(g.payload(), {"unknown node type 200"});
  }
  {
    GraphBuilder g;
    const uint32_t q = g.input({1, 2, 4}, 0), k = g.input({1, 2, 4}, 1), v = g.input({1, 2, 4}, 2);
    const uint32_t out = g.output({1, 2, 4}, 3);
    g.node(testing::XNodeUnion::XNNScaledDotProductAttention,
           fb_xnnpack::CreateXNNScaledDotProductAttention(g.fbb(), q, k, v, 0, 0, out, 0).Union());
    expect_load_error(g.payload(), {"XNNScaledDotProductAttention", "not implemented"});
  }
}

TEST(XnnpackPayload, RejectsBadExternalsAndDataflow) {
  {
    GraphBuilder g;
    const uint32_t a = g.input({3}, 5), out = g.output({3}, 1);
    g.unary(testing::XNodeUnion::XNNAbs, a, out);
    g.set_num_externs(2);
    expect_load_error(g.payload(), {"external id 5"});
  }
  {
    GraphBuilder g;  // reads an internal value nothing writes
    const uint32_t a = g.input({3}, 0), mid = g.internal({3}), out = g.output({3}, 1);
    g.binary(testing::XNodeUnion::XNNAdd, a, mid, out);
    expect_load_error(g.payload(), {"before anything writes it"});
  }
  {
    GraphBuilder g;  // an output nobody writes
    const uint32_t a = g.input({3}, 0), out = g.output({3}, 1), out2 = g.output({3}, 2);
    g.unary(testing::XNodeUnion::XNNAbs, a, out);
    (void)out2;
    expect_load_error(g.payload(), {"never written"});
  }
  {
    GraphBuilder g;  // unknown value flag bits
    const uint32_t a = g.value(fb_xnnpack::XNNDatatype::xnn_datatype_fp32, {3}, 0x10, 0);
    const uint32_t out = g.output({3}, 1);
    g.unary(testing::XNodeUnion::XNNAbs, a, out);
    expect_load_error(g.payload(), {"unknown flags"});
  }
}

TEST(XnnpackPayload, RejectsShapeMismatches) {
  {
    GraphBuilder g;  // declared output shape differs from what the node produces
    const uint32_t a = g.input({2, 3}, 0), b = g.input({3}, 1), out = g.output({2, 4}, 2);
    g.binary(testing::XNodeUnion::XNNAdd, a, b, out);
    expect_load_error(g.payload(), {"node 0 (XNNAdd)", "[2, 4]", "[2, 3]"});
  }
  {
    GraphBuilder g;  // inputs that do not broadcast
    const uint32_t a = g.input({2, 3}, 0), b = g.input({2}, 1), out = g.output({2, 3}, 2);
    g.binary(testing::XNodeUnion::XNNMultiply, a, b, out);
    expect_load_error(g.payload(), {"do not broadcast"});
  }
  {
    GraphBuilder g;  // filter shape inconsistent with the convolution parameters
    const uint32_t x = g.input({1, 4, 4, 2}, 0);
    const uint32_t f = g.f32_constant({3, 3, 3, 2}, std::vector<float>(54, 1.0f));
    const uint32_t out = g.output({1, 4, 4, 3}, 1);
    g.conv(testing::XNodeUnion::XNNConv2d, 3, 1, 1, 1, 2, 4, x, f, kInvalidId, out);
    expect_load_error(g.payload(), {"filter"});
  }
  {
    GraphBuilder g;  // a transpose whose perm repeats a dim
    const uint32_t x = g.input({2, 3}, 0), out = g.output({2, 2}, 1);
    g.transpose({0, 0}, x, out);
    expect_load_error(g.payload(), {"not a permutation"});
  }
  {
    GraphBuilder g;  // rank above XNNPACK's limit
    const uint32_t x = g.input({1, 1, 1, 1, 1, 1, 2}, 0), out = g.output({1, 1, 1, 1, 1, 1, 2}, 1);
    g.unary(testing::XNodeUnion::XNNAbs, x, out);
    expect_load_error(g.payload(), {"rank 7"});
  }
}

// x[4] + c[4], c an fp32 constant fetched from the named data by `key`.
std::vector<uint8_t> add_named_constant_payload(const std::string& key) {
  GraphBuilder g;
  const uint32_t x = g.input({4}, 0);
  const uint32_t c = g.value(fb_xnnpack::XNNDatatype::xnn_datatype_fp32, {4}, 0, testing::kNoExt,
                             g.named_constant(key, 16));
  const uint32_t out = g.output({4}, 1);
  g.binary(testing::XNodeUnion::XNNAdd, x, c, out);
  return g.payload();
}

TEST(XnnpackPayload, ConstantLookup) {
  // Constants in the payload's constant region and by key from the named data.
  {
    GraphBuilder g;
    const uint32_t x = g.input({4}, 0);
    const uint32_t c = g.f32_constant({4}, {1, 2, 3, 4});
    const uint32_t out = g.output({4}, 1);
    g.binary(testing::XNodeUnion::XNNAdd, x, c, out);
    const std::vector<uint8_t> payload = g.payload();  // constants point into it
    const Graph parsed = parse_graph(payload, nullptr);
    float second;
    std::memcpy(&second, parsed.values[c].data + 4, 4);
    EXPECT_EQ(second, 2.0f);
  }
  const std::vector<uint8_t> payload = add_named_constant_payload("weights_abc123");
  // No named data at all: the message names the key and says no .ptd was given.
  expect_load_error(payload, {"weights_abc123", "no external data (.ptd) was provided"});
  // Named data without the key: the message names the key and where it looked.
  MapNamedData named;
  named.description = "the program's named data";
  expect_load_error(payload, {"weights_abc123", "the program's named data", "no external data (.ptd) was provided"},
                    &named);
  // With a .ptd among the sources the message lists it instead.
  named.description = "'weights.ptd', the program's named data";
  try {
    parse_graph(payload, &named);
    FAIL() << "missing key accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'weights.ptd'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("no external data"), std::string::npos) << e.what();
  }
  // Too few bytes under the key.
  named.entries["weights_abc123"] = std::vector<uint8_t>(8, 0);
  expect_load_error(payload, {"needs 16 bytes"}, &named);
  named.entries["weights_abc123"] = std::vector<uint8_t>(16, 0);
  EXPECT_NO_THROW(parse_graph(payload, &named));
}

TEST(XnnpackPayload, RejectsBadQuantization) {
  {
    GraphBuilder g;  // zero point out of range for qint8
    const uint32_t x = g.input({4}, 0);
    const uint32_t q = g.per_tensor(fb_xnnpack::XNNDatatype::xnn_datatype_qint8, {4}, 0.5f, 300);
    const uint32_t out = g.output({4}, 1);
    g.unary(testing::XNodeUnion::XNNConvert, x, q);
    g.unary(testing::XNodeUnion::XNNConvert, q, out);
    expect_load_error(g.payload(), {"zero point 300"});
  }
  {
    GraphBuilder g;  // a scale of zero
    const uint32_t x = g.input({4}, 0);
    const uint32_t q = g.per_tensor(fb_xnnpack::XNNDatatype::xnn_datatype_qint8, {4}, 0.0f, 0);
    const uint32_t out = g.output({4}, 1);
    g.unary(testing::XNodeUnion::XNNConvert, x, q);
    g.unary(testing::XNodeUnion::XNNConvert, q, out);
    expect_load_error(g.payload(), {"invalid quantization scale"});
  }
  {
    GraphBuilder g;  // quantized datatype without parameters
    const uint32_t x = g.input({4}, 0, fb_xnnpack::XNNDatatype::xnn_datatype_qint8);
    const uint32_t out = g.output({4}, 1);
    g.unary(testing::XNodeUnion::XNNConvert, x, out);
    expect_load_error(g.payload(), {"no quantization parameters"});
  }
}

// Found by fuzz_load_methods: constant data at an address that is not a multiple of its element size (a
// mutated offset, or named data placed so) was read with misaligned float loads when the weights were packed.
TEST(XnnpackPayload, RejectsMisalignedConstantData) {
  class OffsetNamedData final : public NamedDataMap {
   public:
    std::optional<std::span<const uint8_t>> get(std::string_view) const override {
      return std::span<const uint8_t>(storage.data() + shift, 16);
    }
    std::optional<TensorLayout> layout(std::string_view) const override { return std::nullopt; }
    size_t num_keys() const override { return 1; }
    std::string_view key(size_t) const override { return "w"; }
    std::string describe() const override { return "offset named data"; }
    std::vector<uint8_t> storage = std::vector<uint8_t>(64, 0);
    size_t shift = 0;
  };
  const std::vector<uint8_t> payload = add_named_constant_payload("w");
  OffsetNamedData named;
  EXPECT_NO_THROW(parse_graph(payload, &named));
  for (size_t shift : {1, 2, 3, 5}) {
    named.shift = shift;
    expect_load_error(payload, {"constant data that is not aligned to its 4-byte elements"}, &named);
  }
}

}  // namespace
}  // namespace etnp::xnn
