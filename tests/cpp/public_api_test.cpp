// What the public C++ API offers besides loading and running, the same capabilities the Python package exposes:
// backend options read and written as maps, backend lookup that names what is registered, the kernel libraries
// of the build, and method metadata (attributes included) without loading the method.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "etnp/backend.h"
#include "etnp/kernel.h"
#include "etnp/program.h"
#include "fixtures.h"

namespace etnp::testing {
namespace {

// A backend with two options and nothing to run: "level" takes 0-3, "verbose" a bool.
class OptionsBackend final : public Backend {
 public:
  std::string_view name() const override { return "EtnpTestOptionsBackend"; }
  bool is_available() const override { return true; }
  std::unique_ptr<DelegateHandle> init(const BackendInitContext&, std::span<const uint8_t>,
                                       std::span<const CompileSpec>) override {
    return std::make_unique<DelegateHandle>();
  }
  void execute(DelegateHandle&, std::span<EValue* const>) override {}
  void set_option(std::string_view key, const BackendOptionValue& value) override {
    if (key == "level") {
      const auto* n = std::get_if<int64_t>(&value);
      if (n == nullptr || *n < 0 || *n > 3) throw Error(ErrorKind::InvalidArgument, "level must be 0-3");
      level = *n;
      return;
    }
    if (key == "verbose") {
      const auto* b = std::get_if<bool>(&value);
      if (b == nullptr) throw Error(ErrorKind::InvalidArgument, "verbose is a bool");
      verbose = *b;
      return;
    }
    Backend::set_option(key, value);
  }
  BackendOptionValue get_option(std::string_view key) const override {
    if (key == "level") return level;
    if (key == "verbose") return verbose;
    return Backend::get_option(key);
  }
  std::vector<std::string> option_names() const override { return {"level", "verbose"}; }

  int64_t level = 1;
  bool verbose = false;
};

std::shared_ptr<OptionsBackend> options_backend() {
  static std::shared_ptr<OptionsBackend> backend = [] {
    auto b = std::make_shared<OptionsBackend>();
    register_backend(b);
    return b;
  }();
  backend->level = 1;
  backend->verbose = false;
  return backend;
}

TEST(PublicApi, BackendOptionsAreReadAsAMapOfTheRequestedTypes) {
  auto backend = options_backend();
  const BackendOptions values = require_backend("EtnpTestOptionsBackend")->get_options({{"level", int64_t{0}}, {"verbose", true}});
  EXPECT_EQ(values, (BackendOptions{{"level", int64_t{1}}, {"verbose", false}}));
  Error wrong_type = expect_error([&] { backend->get_options({{"level", std::string("1")}}); });
  EXPECT_EQ(wrong_type.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(std::string(wrong_type.what()).find("option 'level' is int, not str"), std::string::npos) << wrong_type.what();
  Error unknown = expect_error([&] { backend->get_options({{"colour", int64_t{0}}}); });
  EXPECT_NE(std::string(unknown.what()).find("has no option 'colour'"), std::string::npos) << unknown.what();
}

TEST(PublicApi, SetOptionsIsAllOrNothing) {
  auto backend = options_backend();
  backend->set_options({{"level", int64_t{3}}, {"verbose", true}});
  EXPECT_EQ(backend->level, 3);
  EXPECT_TRUE(backend->verbose);
  // Keys run in order: "level" is set, then "verbose" is refused, and "level" gets its value back.
  Error refused = expect_error([&] { backend->set_options({{"level", int64_t{2}}, {"verbose", int64_t{7}}}); });
  EXPECT_NE(std::string(refused.what()).find("verbose is a bool"), std::string::npos) << refused.what();
  EXPECT_EQ(backend->level, 3);
  EXPECT_TRUE(backend->verbose);
  // An unknown key is refused before anything changed.
  expect_error([&] { backend->set_options({{"level", int64_t{0}}, {"zzz", int64_t{0}}}); });
  EXPECT_EQ(backend->level, 3);
}

TEST(PublicApi, RequireBackendNamesTheRegisteredOnes) {
  options_backend();
  Error e = expect_error([] { require_backend("NoSuchBackend"); });
  EXPECT_EQ(e.kind(), ErrorKind::BackendNotAvailable);
  EXPECT_EQ(e.context().backend, "NoSuchBackend");
  EXPECT_NE(std::string(e.what()).find("'EtnpTestOptionsBackend'"), std::string::npos) << e.what();
  EXPECT_EQ(require_backend("EtnpTestOptionsBackend")->name(), "EtnpTestOptionsBackend");
}

TEST(PublicApi, KernelLibrariesFollowTheRegisteredOperators) {
  const std::vector<std::string> names = registered_kernel_names();
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  ASSERT_TRUE(has("aten::add.out") && has("quantized_decomposed::dequantize_per_tensor.out") && has("etnp::lstm.out"));
  EXPECT_EQ(kernel_libraries(), (std::vector<std::string>{"portable", "optimized", "quantized", "lstm"}));
}

// One object per type and context (a method's), kept from call to call; another context has its own.
TEST(PublicApi, KernelContextSharedScratchIsOnePerTypeAndMethod) {
  struct Rows {
    std::vector<float> floats;
  };
  KernelContext method(nullptr, nullptr), other_method(nullptr, nullptr);
  Rows& rows = method.shared_scratch<Rows>();
  EXPECT_TRUE(rows.floats.empty());  // default-constructed
  rows.floats.assign(100, 1.5f);
  EXPECT_EQ(&method.shared_scratch<Rows>(), &rows);
  EXPECT_EQ(method.shared_scratch<Rows>().floats.size(), 100u);  // what the last user left
  auto& ints = method.shared_scratch<std::vector<int>>();
  EXPECT_NE(static_cast<void*>(&ints), static_cast<void*>(&rows));
  EXPECT_TRUE(ints.empty());
  EXPECT_EQ(&method.shared_scratch<Rows>(), &rows);  // still the same after another type joined
  EXPECT_NE(&other_method.shared_scratch<Rows>(), &rows);
  EXPECT_TRUE(other_method.shared_scratch<Rows>().floats.empty());
}

TEST(PublicApi, VersionsAreNamed) {
  EXPECT_STREQ(schema_identifier(), "ET12");
  const std::string et = executorch_version();
  EXPECT_EQ(std::count(et.begin(), et.end(), '.'), 2) << et;
}

TEST(PublicApi, AttributesAreTheNamedTensorsWithoutLoading) {
  ETNP_REQUIRE_FIXTURES();
  // upstream/linear keeps its weight in linear.ptd and its bias in the program; the official runtime reports
  // the same two attributes (tests/live/test_same_process.py compares every live export).
  LoadOptions options;
  options.data_files = {fixtures_dir() + "/upstream/linear.ptd"};
  Program program = Program::load_file(fixtures_dir() + "/upstream/linear.pte", options);
  const MethodMeta meta = program.method_meta("forward");
  ASSERT_EQ(meta.attributes.size(), 2u);
  EXPECT_EQ(meta.attributes[0].sizes, (std::vector<int64_t>{3, 3}));
  EXPECT_FALSE(meta.attributes[0].memory_planned);
  EXPECT_EQ(meta.attributes[1].sizes, (std::vector<int64_t>{3}));
  EXPECT_TRUE(meta.attributes[1].memory_planned);
  for (const TensorInfo& t : meta.attributes) EXPECT_FALSE(t.name.empty());
}

}  // namespace
}  // namespace etnp::testing
