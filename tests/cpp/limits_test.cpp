// ResourceLimits (include/etnp/program.h): each bound refuses a program beyond it with the error kind and a
// message naming the bound and the sizes, and lets through one exactly at it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include "etnp/backend.h"
#include "etnp/error.h"
#include "etnp/program.h"
#include "fixtures.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using testing::expect_error;
using testing::fixtures_dir;
using writer_testing::exec;
using writer_testing::f32;
using writer_testing::floats;
using writer_testing::load_bytes;
using writer_testing::small_add_program;
using writer_testing::tensor_input;

LoadOptions with_limit(const char* name, uint64_t value) {
  LoadOptions options;
  EXPECT_TRUE(options.limits.set(name, value)) << name;
  return options;
}

void expect_message(const Error& e, ErrorKind kind, const std::string& part) {
  EXPECT_EQ(e.kind(), kind) << e.what();
  EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
}

TEST(ResourceLimits, DefaultsAndNames) {
  const ResourceLimits limits;
  const uint64_t physical = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(limits.max_method_bytes, physical / 2);
  EXPECT_EQ(limits.max_instructions_per_execute, 10'000'000u);
  EXPECT_EQ(limits.max_tensor_bytes, 0u);
  const std::vector<std::string_view> names(ResourceLimits::names().begin(), ResourceLimits::names().end());
  EXPECT_EQ(names, (std::vector<std::string_view>{"max_method_bytes", "max_tensor_bytes", "max_instructions_per_execute",
                                                  "max_methods", "max_values", "max_instructions"}));
  ResourceLimits changed;
  uint64_t v = 1;
  for (std::string_view name : names) {
    EXPECT_TRUE(changed.set(name, v));
    EXPECT_EQ(changed.get(name), v);
    ++v;
  }
  EXPECT_EQ(changed.max_method_bytes, 1u);
  EXPECT_EQ(changed.max_instructions, 6u);
  EXPECT_FALSE(changed.set("max_bytes", 1));
  EXPECT_FALSE(changed.get("max_bytes").has_value());
}

TEST(ResourceLimits, MethodMemory) {
  const std::vector<uint8_t> bytes = small_add_program(false);  // three planned f32[2, 3]
  const MethodMeta meta = load_bytes(bytes).method_meta("forward");
  ASSERT_EQ(meta.planned_buffer_sizes.size(), 1u);
  const auto planned = static_cast<uint64_t>(meta.planned_buffer_sizes[0]);
  ASSERT_GE(planned, 72u);

  const Error e = expect_error([&] { load_bytes(bytes, with_limit("max_method_bytes", planned - 1)).load_method("forward"); });
  expect_message(e, ErrorKind::ProgramLoadError,
                 "its memory plan needs " + std::to_string(planned) +
                     " bytes, and the method holds 0 already: more than the limit max_method_bytes = " +
                     std::to_string(planned - 1));
  EXPECT_EQ(e.context().method, "forward");

  auto method = load_bytes(bytes, with_limit("max_method_bytes", planned)).load_method("forward");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(floats(exec(*method, {tensor_input(x, {2, 3}), tensor_input(x, {2, 3})})[0]),
            (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST(ResourceLimits, HugePlanIsRefusedBeforeItIsAllocated) {
  // 512 GiB of planned memory (two 256 GiB tensors): within the format's sanity bound, far beyond half of this machine's memory.
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1 << 20, 1 << 16}));
  const int32_t y = m.planned_tensor(f32({1 << 20, 1 << 16}));
  m.kernel("aten::abs.out", {x, y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  const Program program = load_bytes(w.serialize());
  const Error e = expect_error([&] { program.load_method("forward"); });
  expect_message(e, ErrorKind::ProgramLoadError, "more than the limit max_method_bytes = " +
                                                     std::to_string(ResourceLimits::default_max_method_bytes()));
}

TEST(ResourceLimits, StorageKeptForUnplannedTensors) {
  // The output is not planned and not supplied by the caller: the method keeps 24 bytes for it.
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2, 3}));
  const int32_t y = m.unplanned_tensor(f32({2, 3}));
  m.kernel("aten::abs.out", {x, y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  const std::vector<uint8_t> bytes = w.serialize();
  const auto planned = static_cast<uint64_t>(load_bytes(bytes).method_meta("forward").planned_buffer_sizes.at(0));
  const Error e = expect_error([&] { load_bytes(bytes, with_limit("max_method_bytes", planned + 23)).load_method("forward"); });
  expect_message(e, ErrorKind::ProgramLoadError,
                 "value 1 needs 24 bytes, and the method holds " + std::to_string(planned) + " already");
  EXPECT_NO_THROW(load_bytes(bytes, with_limit("max_method_bytes", planned + 24)).load_method("forward"));
}

LoadOptions with_weight_cache(LoadOptions options, bool on) {
  options.backend_options["XnnpackBackend"]["weight_cache_enabled"] = on;
  return options;
}

TEST(ResourceLimits, PackedWeightsAndDelegatesCount) {
  // MobileNetV2 lowered to XNNPACK: the delegate packs its weights at load, memory the plan does not show. With
  // XnnpackBackend's weight_cache_enabled off, in the method's load_time_bytes; on (the default), in the weight
  // cache's figure instead, and held to the limit all the same.
  ETNP_REQUIRE_FIXTURES();
  const std::string path = fixtures_dir() + "/exported/mobilenet_v2_xnnpack_fp32.pte";
  uint64_t planned = 0;
  for (int64_t s : Program::load_file(path).method_meta("forward").planned_buffer_sizes) planned += static_cast<uint64_t>(s);
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "weight cache on" : "weight cache off");
    const PackedWeightCacheStats before = packed_weight_cache_stats();
    Program program = Program::load_file(path, with_weight_cache({}, shared));
    auto method = program.load_method("forward");
    const uint64_t in_cache = packed_weight_cache_stats().bytes - before.bytes;
    EXPECT_EQ(in_cache > (uint64_t{1} << 20), shared);
    const uint64_t held = planned + method->load_time_bytes() + in_cache;
    ASSERT_GT(held, planned + (uint64_t{4} << 20));
    const LoadOptions below = with_weight_cache(with_limit("max_method_bytes", held - 1), shared);
    const Error e = expect_error([&] { Program::load_file(path, below).load_method("forward"); });
    expect_message(e, ErrorKind::ProgramLoadError,
                   "the method holds " + std::to_string(held) + " bytes after building its delegates, more than the "
                   "limit max_method_bytes = " + std::to_string(held - 1));
    EXPECT_NO_THROW(Program::load_file(path, with_weight_cache(with_limit("max_method_bytes", held), shared)).load_method("forward"));
  }
}

TEST(ResourceLimits, PortablePackingsSharedThroughTheWeightCacheCount) {
  // MobileNetV2 without a delegate: its classifier's linear packs its weights into the weight cache, in no
  // method's load_time_bytes, but held to max_method_bytes all the same.
  ETNP_REQUIRE_FIXTURES();
  const std::string path = fixtures_dir() + "/exported/mobilenet_v2_portable.pte";
  uint64_t planned = 0;
  for (int64_t s : Program::load_file(path).method_meta("forward").planned_buffer_sizes) planned += static_cast<uint64_t>(s);
  const PackedWeightCacheStats before = packed_weight_cache_stats();
  Program program = Program::load_file(path);
  auto method = program.load_method("forward");
  const uint64_t shared = packed_weight_cache_stats().bytes - before.bytes;
  ASSERT_GT(shared, uint64_t{1} << 20);
  const uint64_t held = planned + method->load_time_bytes() + shared;
  const Error e = expect_error([&] { Program::load_file(path, with_limit("max_method_bytes", held - 1)).load_method("forward"); });
  expect_message(e, ErrorKind::ProgramLoadError,
                 "the method holds " + std::to_string(held) + " bytes after packing its kernels' weights, more than the "
                 "limit max_method_bytes = " + std::to_string(held - 1));
  EXPECT_NO_THROW(Program::load_file(path, with_limit("max_method_bytes", held)).load_method("forward"));
}

TEST(ResourceLimits, TensorBytes) {
  const std::vector<uint8_t> bytes = small_add_program(false);
  const Error e = expect_error([&] { load_bytes(bytes, with_limit("max_tensor_bytes", 23)).load_method("forward"); });
  expect_message(e, ErrorKind::ProgramLoadError,
                 "value 0 is a tensor of 24 bytes, more than the limit max_tensor_bytes = 23");
  EXPECT_NO_THROW(load_bytes(bytes, with_limit("max_tensor_bytes", 24)).load_method("forward"));
}

// A program whose only instruction jumps to itself: it never ends without the budget.
std::vector<uint8_t> endless_loop_program() {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2}));
  const int32_t y = m.planned_tensor(f32({2}));
  const int32_t never = m.bool_value(false);
  m.kernel("aten::abs.out", {x, y, y});  // 0
  m.jump_false(never, 1);                // 1: to itself
  m.set_inputs({x});
  m.set_outputs({y});
  return w.serialize();
}

TEST(ResourceLimits, InstructionsPerExecute) {
  const std::vector<uint8_t> bytes = endless_loop_program();
  const std::vector<float> x = {1, -2};
  auto method = load_bytes(bytes, with_limit("max_instructions_per_execute", 1000)).load_method("forward");
  for (int run = 0; run < 2; ++run) {  // the budget is per execute: the second fails the same way
    const Error e = expect_error([&] { exec(*method, {tensor_input(x, {2})}); });
    expect_message(e, ErrorKind::ExecutionError,
                   "the execute ran 1000 instructions, the limit max_instructions_per_execute, and had not finished");
    EXPECT_EQ(e.context().method, "forward");
    EXPECT_EQ(e.context().instruction, 1);
  }
  // The default budget stops it too.
  auto by_default = load_bytes(bytes).load_method("forward");
  expect_message(expect_error([&] { exec(*by_default, {tensor_input(x, {2})}); }), ErrorKind::ExecutionError,
                 "the execute ran 10000000 instructions");

  // A program that ends runs within a budget of exactly its length.
  const std::vector<uint8_t> straight = small_add_program(true);  // two instructions
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  auto two = load_bytes(straight, with_limit("max_instructions_per_execute", 2)).load_method("forward");
  EXPECT_EQ(exec(*two, {tensor_input(a, {2, 3}), tensor_input(a, {2, 3})}).size(), 1u);
  auto one = load_bytes(straight, with_limit("max_instructions_per_execute", 1)).load_method("forward");
  expect_message(expect_error([&] { exec(*one, {tensor_input(a, {2, 3}), tensor_input(a, {2, 3})}); }),
                 ErrorKind::ExecutionError, "the execute ran 1 instructions");
}

TEST(ResourceLimits, Counts) {
  format::ProgramWriter w;
  for (const char* name : {"forward", "other"}) {
    auto& m = w.add_method(name);
    const int32_t x = m.planned_tensor(f32({2}));
    const int32_t y = m.planned_tensor(f32({2}));
    const int32_t z = m.planned_tensor(f32({2}));
    m.kernel("aten::abs.out", {x, y, y});
    m.kernel("aten::abs.out", {y, z, z});
    m.set_inputs({x});
    m.set_outputs({z});
  }
  const std::vector<uint8_t> bytes = w.serialize();
  expect_message(expect_error([&] { load_bytes(bytes, with_limit("max_methods", 1)); }), ErrorKind::ProgramLoadError,
                 "the program declares methods: 2, more than the limit max_methods = 1");
  EXPECT_NO_THROW(load_bytes(bytes, with_limit("max_methods", 2)));
  expect_message(expect_error([&] { load_bytes(bytes, with_limit("max_values", 2)); }), ErrorKind::ProgramLoadError,
                 "method 'forward' declares values: 3, more than the limit max_values = 2");
  EXPECT_NO_THROW(load_bytes(bytes, with_limit("max_values", 3)));
  expect_message(expect_error([&] { load_bytes(bytes, with_limit("max_instructions", 1)); }),
                 ErrorKind::ProgramLoadError,
                 "method 'forward' declares instructions: 2, more than the limit max_instructions = 1");
  EXPECT_NO_THROW(load_bytes(bytes, with_limit("max_instructions", 2)));
}

TEST(ResourceLimits, ResizeBeyondTheBoundOrOverflowingIsRefused) {
  const int64_t bound[] = {4, 4};
  Tensor t(ScalarType::Float, bound, {}, nullptr, ShapeDynamism::DynamicBound);
  const int64_t smaller[] = {2, 3};
  EXPECT_TRUE(t.try_resize(smaller));
  EXPECT_EQ(t.numel(), 6);
  const int64_t larger[] = {5, 4};
  EXPECT_FALSE(t.try_resize(larger));
  const int64_t overflowing[] = {int64_t{1} << 32, int64_t{1} << 32};  // 2^64 elements: wraps to 0 unchecked
  EXPECT_FALSE(t.try_resize(overflowing));
  EXPECT_EQ(t.numel(), 6);
}

}  // namespace
}  // namespace etnp
