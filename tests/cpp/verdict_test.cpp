// Program::load_verdict against Program::load_method: a verdict of "loads" exactly when load_method succeeds,
// and every reason it gives names what load_method's error names. On every shared fixture, then on programs
// written for each reason (a missing .ptd, operator or backend, both, and a payload a backend rejects).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "fixtures.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using writer_testing::f32;
using writer_testing::load_bytes;
using writer_testing::TensorSpec;
using writer_testing::external_weight_program;

/// The error kind load_method reports for a verdict: a missing backend first (the official runtime
/// initializes delegates before it resolves operators), then external data, then operators, then payloads.
ErrorKind expected_kind(const LoadVerdict& verdict) {
  auto has = [&](LoadProblem::Kind kind) {
    return std::any_of(verdict.problems.begin(), verdict.problems.end(),
                       [&](const LoadProblem& p) { return p.kind == kind; });
  };
  if (has(LoadProblem::Kind::MissingBackend)) return ErrorKind::BackendNotAvailable;
  if (has(LoadProblem::Kind::ExternalData)) return ErrorKind::ProgramLoadError;
  if (has(LoadProblem::Kind::MissingOperator)) return ErrorKind::OperatorNotFound;
  return ErrorKind::ProgramLoadError;
}

/// What load_method's message must contain for a problem: the thing it names and, for a rejected payload,
/// the backend's reason (the problem's message after "delegate N (Backend): ").
std::vector<std::string> named_in_error(const LoadProblem& p) {
  if (p.kind != LoadProblem::Kind::UnsupportedPayload) return {p.name};
  const size_t reason = p.message.find("): ");
  return {p.name, reason == std::string::npos ? p.message : p.message.substr(reason + 3)};
}

/// Loads `method` and checks that the outcome is what `verdict` says; returns the error's message ("" when
/// the method loaded).
std::string expect_agreement(const Program& program, const LoadVerdict& verdict) {
  std::string error;
  ErrorKind kind = ErrorKind::InvalidArgument;
  try {
    program.load_method(verdict.method);
  } catch (const Error& e) {
    error = e.what();
    kind = e.kind();
  }
  if (verdict.loads()) {
    EXPECT_EQ(error, "") << "the verdict says method '" << verdict.method << "' loads";
    return error;
  }
  EXPECT_NE(error, "") << "method '" << verdict.method << "' loaded, but the verdict says: "
                       << verdict.problems.front().message;
  if (error.empty()) return error;
  EXPECT_EQ(error_kind_name(kind), std::string(error_kind_name(expected_kind(verdict)))) << error;
  // The first problem is always in the error (dependency problems are all listed; a payload's reasons are
  // those of the first delegate rejected).
  for (const auto& needle : named_in_error(verdict.problems.front())) {
    EXPECT_NE(error.find(needle), std::string::npos) << "'" << needle << "' not in: " << error;
  }
  return error;
}

// --- Every fixture --------------------------------------------------------------------------------------

TEST(LoadVerdict, AgreesWithLoadMethodOnEveryFixture) {
  ETNP_REQUIRE_FIXTURES();
  size_t methods = 0, failing = 0;
  for (const auto& entry : testing::manifest()) {
    const std::string kind = entry["kind"];
    if (kind != "program" && kind != "bundled_program") continue;
    SCOPED_TRACE(entry["id"].get<std::string>());
    LoadOptions options;
    for (const auto& f : entry["data_files"]) {
      options.data_files.push_back(testing::fixtures_dir() + "/" + f.get<std::string>());
    }
    std::optional<Program> program;
    try {
      program = Program::load_file(testing::fixtures_dir() + "/" + entry["file"].get<std::string>(), options);
    } catch (const Error&) {
      continue;  // not a loadable program: there are no methods to judge (the conformance test checks why)
    }
    for (const auto& name : program->method_names()) {
      SCOPED_TRACE("method " + name);
      const LoadVerdict verdict = program->load_verdict(name);
      EXPECT_EQ(verdict.method, name);
      expect_agreement(*program, verdict);
      ++methods;
      failing += verdict.loads() ? 0 : 1;
    }
  }
  // The set holds programs that cannot load here (Ethos-U, OpenVINO, Cortex-M kernels, a missing .ptd).
  EXPECT_GT(methods, 150u);
  EXPECT_GE(failing, 4u);
}

// The manifest's own account of why some fixtures cannot run: the verdict names the same things.
TEST(LoadVerdict, NamesWhatTheManifestExpects) {
  ETNP_REQUIRE_FIXTURES();
  auto verdict_of = [](const std::string& id) {
    const nlohmann::json& entry = *testing::manifest_entry(id);
    LoadOptions options;
    for (const auto& f : entry["data_files"]) {
      options.data_files.push_back(testing::fixtures_dir() + "/" + f.get<std::string>());
    }
    return Program::load_file(testing::fixtures_dir() + "/" + entry["file"].get<std::string>(), options)
        .load_verdict("forward");
  };
  auto names = [](const LoadVerdict& v, LoadProblem::Kind kind) {
    std::vector<std::string> out;
    for (const auto& p : v.problems) {
      if (p.kind == kind) out.push_back(p.name);
    }
    return out;
  };
  EXPECT_EQ(names(verdict_of("backends/ethos_u_minimal"), LoadProblem::Kind::MissingBackend),
            std::vector<std::string>{"EthosUBackend"});
  EXPECT_EQ(names(verdict_of("djl/openvino_tiny"), LoadProblem::Kind::MissingBackend),
            std::vector<std::string>{"OpenvinoBackend"});
  // Every operator the official runtime reported missing, in the order it reported them, and no other.
  const auto& official = testing::manifest_entry("upstream/keyword_spotting")->at("official_error");
  const LoadVerdict kws = verdict_of("upstream/keyword_spotting");
  EXPECT_EQ(names(kws, LoadProblem::Kind::MissingOperator),
            official["missing_operators"].get<std::vector<std::string>>());
  EXPECT_EQ(kws.problems.size(), official["missing_operators"].size());
  // With its .ptd the MobileNetV2 loads; without it, XNNPACK's constants are missing.
  EXPECT_TRUE(verdict_of("exported/mobilenet_v2_xnnpack_fp32_ptd").loads());
  const LoadVerdict no_data = verdict_of("exported/mobilenet_v2_xnnpack_fp32_ptd__missing_data");
  ASSERT_FALSE(no_data.loads());
  const std::string key =
      testing::manifest_entry("exported/mobilenet_v2_xnnpack_fp32_ptd__missing_data")->at("expect")["names"];
  EXPECT_NE(no_data.problems.front().message.find(key), std::string::npos) << no_data.problems.front().message;
}

// --- Programs written for each reason ------------------------------------------------------------------

TEST(LoadVerdict, MissingPtd) {
  const Program p = load_bytes(external_weight_program());
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].kind, LoadProblem::Kind::ExternalData);
  EXPECT_EQ(v.problems[0].name, "layer.weight");
  EXPECT_NE(v.problems[0].message.find("no external data (.ptd) was provided"), std::string::npos)
      << v.problems[0].message;
  expect_agreement(p, v);
}

TEST(LoadVerdict, PtdWithoutTheKeyAndWithTheKey) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  format::PtdWriter other;
  other.add_tensor("other.weight", TensorLayout{ScalarType::Float, {2, 3}, {}}, format::as_bytes(w));
  const std::vector<uint8_t> other_bytes = other.serialize();
  LoadOptions options;
  options.data_buffers.push_back(other_bytes);
  const Program without = load_bytes(external_weight_program(), options);
  const LoadVerdict v = without.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].name, "layer.weight");
  EXPECT_NE(v.problems[0].message.find("is not in the external data"), std::string::npos) << v.problems[0].message;
  expect_agreement(without, v);

  format::PtdWriter right;
  right.add_tensor("layer.weight", TensorLayout{ScalarType::Float, {2, 3}, {}}, format::as_bytes(w));
  const std::vector<uint8_t> right_bytes = right.serialize();
  LoadOptions with_key;
  with_key.data_buffers.push_back(right_bytes);
  const Program with = load_bytes(external_weight_program(), with_key);
  EXPECT_TRUE(with.load_verdict("forward").loads());
  expect_agreement(with, with.load_verdict("forward"));
}

TEST(LoadVerdict, PtdWithTheWrongShape) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  format::PtdWriter wrong;
  wrong.add_tensor("layer.weight", TensorLayout{ScalarType::Float, {3, 2}, {}}, format::as_bytes(w));
  const std::vector<uint8_t> bytes = wrong.serialize();
  LoadOptions options;
  options.data_buffers.push_back(bytes);
  const Program p = load_bytes(external_weight_program(), options);
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].message.find("[3, 2]"), std::string::npos) << v.problems[0].message;
  expect_agreement(p, v);
}

/// forward: an optional delegate to `backend`, then an optional call of `op`, each on f32[2].
std::vector<uint8_t> program_needing(const std::string& backend, const std::string& op,
                                     std::vector<uint8_t> payload = {1, 2, 3, 4}) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2}));
  const int32_t y = m.planned_tensor(f32({2}));
  if (!backend.empty()) m.delegate(backend, std::move(payload), {x, y});
  if (!op.empty()) m.kernel(op, {x, y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  return w.serialize();
}

TEST(LoadVerdict, MissingOperator) {
  const Program p = load_bytes(program_needing("", "my_ops::frobnicate.out"));
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].kind, LoadProblem::Kind::MissingOperator);
  EXPECT_EQ(v.problems[0].name, "my_ops::frobnicate.out");
  EXPECT_EQ(expect_agreement(p, v),
            "method 'forward', operator my_ops::frobnicate.out: 1 operator is not available in this runtime: "
            "my_ops::frobnicate.out");
}

TEST(LoadVerdict, MissingBackend) {
  const Program p = load_bytes(program_needing("CoreMLBackend", ""));
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].kind, LoadProblem::Kind::MissingBackend);
  EXPECT_EQ(v.problems[0].name, "CoreMLBackend");
  const std::string error = expect_agreement(p, v);
  EXPECT_EQ(error.rfind("method 'forward', backend CoreMLBackend: the program delegates to backend 'CoreMLBackend', "
                        "which is not available in this runtime (available: ",
                        0),
            0u)
      << error;
}

TEST(LoadVerdict, MissingBackendAndOperatorIsBackendNotAvailableListingBoth) {
  const Program p = load_bytes(program_needing("CoreMLBackend", "my_ops::frobnicate.out"));
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 2u);
  EXPECT_EQ(v.problems[0].kind, LoadProblem::Kind::MissingBackend);
  EXPECT_EQ(v.problems[0].name, "CoreMLBackend");
  EXPECT_EQ(v.problems[1].kind, LoadProblem::Kind::MissingOperator);
  EXPECT_EQ(v.problems[1].name, "my_ops::frobnicate.out");
  try {
    p.load_method("forward");
    FAIL() << "loaded without its backend and operator";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendNotAvailable);
    EXPECT_EQ(e.context().backend, "CoreMLBackend");
    const std::string msg = e.what();
    EXPECT_NE(msg.find("backend 'CoreMLBackend', which is not available"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 operator is not available in this runtime: my_ops::frobnicate.out"), std::string::npos)
        << msg;
  }
  expect_agreement(p, v);
}

// A backend whose supports() rejects payload bytes 0xEE and 0xDD ("node i"). Its init() refuses 0xDD with an
// InvalidArgument of its own but takes 0xEE (laxer than supports()); it records what both were given.
class PickyBackend final : public Backend {
 public:
  struct Seen {
    std::string method;
    int delegate_index = -1;
    bool has_load_options = false;
    size_t payload_size = 0;
  };
  std::string_view name() const override { return "VerdictTestPickyBackend"; }
  bool is_available() const override { return true; }
  SupportVerdict supports(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                          std::span<const CompileSpec>) const override {
    last_supports = seen(ctx, payload);
    SupportVerdict v;
    for (size_t i = 0; i < payload.size(); ++i) {
      if (payload[i] == 0xEE || payload[i] == 0xDD) v.reasons.push_back(reason(i, payload[i]));
    }
    return v;
  }
  std::unique_ptr<DelegateHandle> init(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                       std::span<const CompileSpec>) override {
    ++init_calls;
    last_init = seen(ctx, payload);
    for (size_t i = 0; i < payload.size(); ++i) {
      if (payload[i] == 0xDD) throw Error(ErrorKind::InvalidArgument, reason(i, payload[i]));
    }
    return std::make_unique<DelegateHandle>();
  }
  void execute(DelegateHandle&, std::span<EValue* const>) override {}

  mutable Seen last_supports;
  Seen last_init;
  int init_calls = 0;

 private:
  static std::string reason(size_t i, uint8_t byte) {
    return "node " + std::to_string(i) + (byte == 0xEE ? " (Frobnicate) is not supported" : " (Configure) needs an option");
  }
  static Seen seen(const BackendInitContext& ctx, std::span<const uint8_t> payload) {
    return {std::string(ctx.method_name), ctx.delegate_index, ctx.load_options != nullptr, payload.size()};
  }
};

PickyBackend& picky_backend() {
  static const std::shared_ptr<PickyBackend> backend = [] {
    auto b = std::make_shared<PickyBackend>();
    register_backend(b);
    return b;
  }();
  return *backend;
}

TEST(LoadVerdict, PayloadTheBackendRejectsDoesNotLoadEvenWhereInitWouldTakeIt) {
  picky_backend();
  const Program p = load_bytes(program_needing("VerdictTestPickyBackend", "", {1, 0xEE, 3, 0xEE}));
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 2u);
  EXPECT_EQ(v.problems[0].kind, LoadProblem::Kind::UnsupportedPayload);
  EXPECT_EQ(v.problems[0].name, "VerdictTestPickyBackend");
  EXPECT_EQ(v.problems[0].message, "delegate 0 (VerdictTestPickyBackend): node 1 (Frobnicate) is not supported");
  EXPECT_EQ(v.problems[1].message, "delegate 0 (VerdictTestPickyBackend): node 3 (Frobnicate) is not supported");
  EXPECT_EQ(expect_agreement(p, v),
            "method 'forward', backend VerdictTestPickyBackend: delegate 0: the backend does not support this payload: "
            "node 1 (Frobnicate) is not supported; node 3 (Frobnicate) is not supported");
}

TEST(LoadVerdict, PayloadTheBackendRejectsFailsWithInitsOwnError) {
  picky_backend();
  const Program p = load_bytes(program_needing("VerdictTestPickyBackend", "", {0xDD, 2}));
  const LoadVerdict v = p.load_verdict("forward");
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0].message, "delegate 0 (VerdictTestPickyBackend): node 0 (Configure) needs an option");
  try {
    p.load_method("forward");
    FAIL() << "loaded a payload that supports() rejects";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);  // init()'s kind, kept
    EXPECT_EQ(std::string(e.what()),
              "method 'forward', backend VerdictTestPickyBackend: delegate 0: node 0 (Configure) needs an option");
  }
}

TEST(LoadVerdict, BackendThatAcceptsThePayloadIsAskedWhatInitGets) {
  PickyBackend& backend = picky_backend();
  const std::vector<uint8_t> bytes = program_needing("VerdictTestPickyBackend", "", {1, 2, 3});
  LoadOptions options;
  options.backend_options["VerdictTestPickyBackend"] = {{"flavour", std::string("plain")}};
  const Program p = load_bytes(bytes, options);
  const LoadVerdict v = p.load_verdict("forward");
  EXPECT_TRUE(v.loads());
  const PickyBackend::Seen asked = backend.last_supports;
  const int inits_before = backend.init_calls;
  expect_agreement(p, v);
  EXPECT_EQ(backend.init_calls, inits_before + 1);
  for (const PickyBackend::Seen& s : {asked, backend.last_supports, backend.last_init}) {
    EXPECT_EQ(s.method, "forward");
    EXPECT_EQ(s.delegate_index, 0);
    EXPECT_TRUE(s.has_load_options);
    EXPECT_EQ(s.payload_size, 3u);
  }
}

TEST(LoadVerdict, UnknownMethodIsInvalidArgument) {
  const Program p = load_bytes(program_needing("", ""));
  try {
    p.load_verdict("decode");
    FAIL() << "a verdict for a method that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'forward'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace etnp
