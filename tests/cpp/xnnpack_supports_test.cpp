// XnnpackBackend::supports(): every reason init() would reject a payload for, without building anything, and
// init() rejecting exactly those payloads with the first reason.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/xnnpack/xnnpack_backend.h"
#include "etnp/backend.h"
#include "fixtures.h"
#include "format/byte_source.h"
#include "format/ptd_file.h"
#include "format/pte_file.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using testing::GraphBuilder;
using testing::MapNamedData;
using testing::XNodeUnion;
using DT = fb_xnnpack::XNNDatatype;

std::shared_ptr<Backend> xnnpack() {
  std::shared_ptr<Backend> b = find_backend("XnnpackBackend");
  EXPECT_NE(b, nullptr);
  return b;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// supports() lists `count` reasons, the first containing every needle, and init() throws `kind` with the first
// reason in its message.
std::vector<std::string> expect_rejected(const std::vector<uint8_t>& payload, size_t count,
                                         std::initializer_list<std::string> needles, const BackendInitContext& ctx = {},
                                         ErrorKind kind = ErrorKind::ProgramLoadError) {
  const SupportVerdict verdict = xnnpack()->supports(ctx, payload, {});
  EXPECT_EQ(verdict.reasons.size(), count);
  if (verdict.reasons.empty()) return {};
  for (const std::string& n : needles) EXPECT_TRUE(contains(verdict.reasons[0], n)) << verdict.reasons[0];
  try {
    xnnpack()->init(ctx, payload, {});
    ADD_FAILURE() << "init() accepted a payload supports() rejects: " << verdict.reasons[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_TRUE(contains(e.what(), verdict.reasons[0])) << e.what() << "\nvs " << verdict.reasons[0];
  }
  return verdict.reasons;
}

std::vector<uint8_t> binary_graph(DT dt) {
  GraphBuilder g;
  const uint32_t a = g.input({2, 3}, 0, dt), b = g.input({2, 3}, 1, dt), out = g.output({2, 3}, 2, dt);
  g.binary(XNodeUnion::XNNAdd, a, b, out);
  return g.payload();
}

TEST(XnnpackSupports, AcceptsWhatInitBuilds) {
  const std::vector<uint8_t> payload = binary_graph(DT::xnn_datatype_fp32);
  EXPECT_TRUE(xnnpack()->supports({}, payload, {}).supported());
  EXPECT_NE(xnnpack()->init({}, payload, {}), nullptr);
}

TEST(XnnpackSupports, HalfAndBFloat16Graphs) {
  expect_rejected(binary_graph(DT::xnn_datatype_fp16), 1,
                  {"node 0 (XNNAdd)", "with types (fp16, fp16 -> fp16) is not supported"});
  expect_rejected(binary_graph(DT::xnn_datatype_bf16), 1, {"node 0 (XNNAdd)", "(bf16, bf16 -> bf16)"});
}

TEST(XnnpackSupports, ScaledDotProductAttention) {
  GraphBuilder g;
  const uint32_t q = g.input({1, 2, 4}, 0), k = g.input({1, 2, 4}, 1), v = g.input({1, 2, 4}, 2);
  const uint32_t out = g.output({1, 2, 4}, 3);
  g.node(XNodeUnion::XNNScaledDotProductAttention,
         fb_xnnpack::CreateXNNScaledDotProductAttention(g.fbb(), q, k, v, 0, 0, out, 0).Union());
  expect_rejected(g.payload(), 1, {"node 0 (XNNScaledDotProductAttention)", "not implemented"});
}

// int8 transposed convolutions load (XnnpackBackend.QuantizedTransposedConvolutions runs them); per-channel
// scales along the input channels do not.
TEST(XnnpackSupports, QuantizedTransposedConvolutionScalesMustFollowTheOutputs) {
  const std::vector<int8_t> w(2 * 3 * 3 * 2, 1);  // [cout 2, 3, 3, cin 2]
  for (uint32_t channel_dim : {0u, 3u}) {
    GraphBuilder g;
    const uint32_t x = g.per_tensor(DT::xnn_datatype_qint8, {1, 4, 4, 2}, 0.5f, 0, testing::kExtIn, 0);
    const uint32_t filter = g.per_channel(DT::xnn_datatype_qcint8, {2, 3, 3, 2}, {0.25f, 0.5f},
                                          static_cast<int32_t>(channel_dim), g.constant(w.data(), w.size()));
    const uint32_t out = g.per_tensor(DT::xnn_datatype_qint8, {1, 6, 6, 2}, 0.5f, 0, testing::kExtOut, 1);
    g.conv(XNodeUnion::XNNConvTranspose2d, 3, 1, 0, 1, 2, 2, x, filter, testing::kNoExt, out);
    if (channel_dim == 0) {
      BackendInitContext ctx;
      EXPECT_TRUE(xnnpack()->supports(ctx, g.payload(), {}).reasons.empty());
    } else {
      expect_rejected(g.payload(), 1, {"node 0 (XNNConvTranspose2d)", "per-channel scales must follow the outputs"});
    }
  }
}

TEST(XnnpackSupports, RuntimeConvolutionFilter) {
  GraphBuilder g;
  const uint32_t x = g.input({1, 4, 4, 2}, 0), filter = g.input({3, 1, 1, 2}, 1), out = g.output({1, 4, 4, 3}, 2);
  g.conv(XNodeUnion::XNNConv2d, 1, 1, 0, 1, 2, 3, x, filter, testing::kNoExt, out);
  expect_rejected(g.payload(), 1, {"node 0 (XNNConv2d)", "the filter must be constant"});
}

TEST(XnnpackSupports, EveryUnsupportedNodeWithItsDebugHandle) {
  GraphBuilder g;
  const DT h = DT::xnn_datatype_fp16;
  const uint32_t a = g.input({4}, 0), b = g.input({4}, 1, h), c = g.input({4}, 2, h);
  const uint32_t mid = g.internal({4}), out1 = g.output({4}, 3, h), out2 = g.output({4}, 4, h);
  g.unary(XNodeUnion::XNNAbs, a, mid);            // node 0: fine
  g.binary(XNodeUnion::XNNAdd, b, c, out1);       // node 1: fp16
  g.binary(XNodeUnion::XNNMultiply, b, c, out2);  // node 2: fp16
  const std::vector<std::string> reasons =
      expect_rejected(g.payload(), 2, {"node 1 (XNNAdd, debug handle 1)", "fp16"});
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_TRUE(contains(reasons[1], "node 2 (XNNMultiply, debug handle 2)")) << reasons[1];
  try {
    xnnpack()->init({}, g.payload(), {});
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "(and 1 more)")) << e.what();
  }
}

TEST(XnnpackSupports, ShapesThatDoNotFit) {
  GraphBuilder g;
  const uint32_t a = g.input({2, 3}, 0), b = g.input({2, 4}, 1), out = g.output({2, 4}, 2);
  g.binary(XNodeUnion::XNNAdd, a, b, out);
  expect_rejected(g.payload(), 1, {"node 0 (XNNAdd)", "do not broadcast"});
}

TEST(XnnpackSupports, MalformedPayload) {
  std::vector<uint8_t> payload = binary_graph(DT::xnn_datatype_fp32);
  payload.resize(20);
  expect_rejected(payload, 1, {"header is truncated"});
}

TEST(XnnpackSupports, EveryMissingNamedDataKey) {
  GraphBuilder g;
  const uint32_t x = g.input({1, 2}, 0);
  const uint32_t w = g.value(DT::xnn_datatype_fp32, {3, 2}, 0, testing::kNoExt, g.named_constant("weights_a", 24));
  const uint32_t bias = g.value(DT::xnn_datatype_fp32, {3}, 0, testing::kNoExt, g.named_constant("bias_b", 12));
  const uint32_t out = g.output({1, 3}, 1);
  g.fully_connected(x, w, bias, out);
  const std::vector<uint8_t> payload = g.payload();
  // No named data at all, then a map that has only the bias.
  std::vector<std::string> reasons = expect_rejected(payload, 2, {"weights_a", "was not found"});
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_TRUE(contains(reasons[1], "bias_b")) << reasons[1];
  MapNamedData named;
  named.entries["bias_b"] = std::vector<uint8_t>(12, 0);
  BackendInitContext ctx;
  ctx.named_data = &named;
  reasons = expect_rejected(payload, 1, {"weights_a"}, ctx);
  named.entries["weights_a"] = std::vector<uint8_t>(24, 0);
  EXPECT_TRUE(xnnpack()->supports(ctx, payload, {}).supported());
  EXPECT_NE(xnnpack()->init(ctx, payload, {}), nullptr);
}

TEST(XnnpackSupports, RefusedLoadOption) {
  BackendOptions options = {{"workspace_sharing_mode", int64_t{2}}};
  BackendInitContext ctx;
  ctx.load_options = &options;
  expect_rejected(binary_graph(DT::xnn_datatype_fp32), 1, {"workspace_sharing_mode"}, ctx,
                  ErrorKind::InvalidArgument);
}

// The programs of the shared fixtures that load with XNNPACK delegates: supports() accepts every delegate; the
// one loaded without its .ptd: one reason per missing key, the first the key the delegate looks up first.
TEST(XnnpackSupports, FixtureDelegates) {
  ETNP_REQUIRE_FIXTURES();
  size_t delegates = 0;
  bool saw_missing_data = false;
  for (const auto& entry : etnp::testing::manifest()) {
    if (entry.value("kind", "") != "program") continue;
    const std::string dir = etnp::testing::fixtures_dir() + "/";
    std::unique_ptr<format::PteFile> file;
    try {
      file = format::PteFile::parse(format::ByteSource::map_file(dir + entry["file"].get<std::string>()),
                                    Verification::Minimal);
    } catch (const Error&) {
      continue;  // the negative samples
    }
    std::vector<std::unique_ptr<format::PtdFile>> ptds;
    std::vector<const NamedDataMap*> maps;
    for (const auto& d : entry["data_files"]) {
      ptds.push_back(format::PtdFile::parse(format::ByteSource::map_file(dir + d.get<std::string>())));
      maps.push_back(ptds.back().get());
    }
    if (file->named_data() != nullptr) maps.push_back(file->named_data());
    format::MergedDataMap merged(maps);
    BackendInitContext ctx;
    ctx.named_data = maps.empty() ? nullptr : &merged;
    const bool missing_data = entry.contains("missing_data");
    for (size_t p = 0; p < file->num_plans(); ++p) {
      const auto* ds = file->plan(p).delegates();
      for (size_t i = 0; ds != nullptr && i < ds->size(); ++i) {
        if (ds->Get(i)->id()->str() != "XnnpackBackend") continue;
        const SupportVerdict v = xnnpack()->supports(ctx, file->delegate_payload(*ds->Get(i)), {});
        ++delegates;
        if (!missing_data) {
          EXPECT_TRUE(v.supported()) << entry["id"] << ": " << (v.reasons.empty() ? "" : v.reasons[0]);
          continue;
        }
        saw_missing_data = true;
        const auto& m = entry["missing_data"];
        ASSERT_EQ(v.reasons.size(), m["named_data_keys"].get<size_t>()) << entry["id"];
        EXPECT_TRUE(contains(v.reasons[0], m["first_key_in_delegate_constant_order"].get<std::string>()))
            << v.reasons[0];
      }
    }
  }
  EXPECT_GE(delegates, 10u);
  EXPECT_TRUE(saw_missing_data);
}

}  // namespace
}  // namespace etnp::xnn
