// Damaged and hostile inputs, using small programs written by format::ProgramWriter: truncated files, random
// byte flips and field mutations must end in a clean etnp::Error (or a successful run), never a crash, leak or
// hang (CI runs this under ASan/UBSan); bad method inputs, missing or wrong .ptd data, unknown methods, missing
// operators and missing backends must each give the documented error kind with a precise message.
// ETNP_FUZZ_TRACE=1 prints each fuzz case before it runs (to name the case that crashes a broken build).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "etnp/backend.h"
#include "tools/writer/writer.h"
#include "program_generated.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

namespace fb = ::executorch_flatbuffer;

// --- Helpers ------------------------------------------------------------------------------------------------

/// Inputs that match the method's signature as the (possibly damaged) program describes it.
struct Inputs {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<Value> values;
};

/// Inputs matching `meta`, or nullopt when they would need more than 64 MiB (damaged sizes).
std::optional<Inputs> inputs_for(const MethodMeta& meta) {
  Inputs in;
  in.buffers.reserve(meta.inputs.size());
  for (const auto& info : meta.inputs) {
    switch (info.tag) {
      case Tag::Tensor: {
        TensorRef t;
        t.dtype = info.tensor.dtype;
        t.sizes = info.tensor.sizes;
        uint64_t n = element_size(t.dtype);
        for (int64_t s : t.sizes) {
          if (__builtin_mul_overflow(n, static_cast<uint64_t>(std::max<int64_t>(s, 0)), &n)) return std::nullopt;
        }
        if (n > (64u << 20)) return std::nullopt;
        in.buffers.emplace_back(static_cast<size_t>(n), 0x3f);
        t.data = in.buffers.back().data();
        in.values.push_back(t);
        break;
      }
      default:
        in.values.push_back(info.value);
    }
  }
  return in;
}

/// Loads, then (when the planned memory is modest) loads every method and runs it. Returns the error kind, or
/// nullopt on success. Anything other than an etnp::Error fails the test.
std::optional<ErrorKind> load_and_run(const std::vector<uint8_t>& bytes, Verification level, const std::string& label) {
  try {
    LoadOptions options;
    options.verification = level;
    Program p = load_bytes(bytes, options);
    for (const std::string& name : p.method_names()) {
      const MethodMeta meta = p.method_meta(name);
      int64_t planned = 0;
      for (int64_t s : meta.planned_buffer_sizes) planned += s;
      // Corrupted arena sizes can ask for up to the reader's 1 TiB sanity bound; allocating that is the OS's
      // business (and aborts under ASan), not what this test is about.
      if (planned > (64 << 20)) continue;
      auto method = p.load_method(name);
      std::optional<Inputs> in = inputs_for(method->meta());
      if (!in) continue;
      method->execute(in->values);
      method->execute(in->values);
    }
    return std::nullopt;
  } catch (const Error& e) {
    return e.kind();
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": a non-etnp exception escaped: " << e.what();
    return ErrorKind::ExecutionError;
  }
}

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/// Re-serializes a written program after `mutate` changed its flatbuffer tables; the segment data is kept.
std::vector<uint8_t> rebuild(const std::vector<uint8_t>& original, const std::function<void(fb::ProgramT&)>& mutate) {
  std::unique_ptr<fb::ProgramT> program(fb::GetProgram(original.data())->UnPack());
  mutate(*program);
  const std::vector<uint8_t> flat = format::pack_program(*program);
  const bool has_header = std::memcmp(original.data() + 8, "eh00", 4) == 0;
  if (!has_header) return flat;
  uint64_t old_base, data_size;
  std::memcpy(&old_base, original.data() + 24, 8);
  std::memcpy(&data_size, original.data() + 32, 8);
  std::vector<uint8_t> out(flat.begin(), flat.begin() + 8);
  out.insert(out.end(), original.begin() + 8, original.begin() + 40);  // the old header
  out.insert(out.end(), flat.begin() + 8, flat.end());
  uint32_t root;
  std::memcpy(&root, out.data(), 4);
  root += 32;
  std::memcpy(out.data(), &root, 4);
  const uint64_t program_size = out.size(), base = round_up(program_size, 128);
  std::memcpy(out.data() + 16, &program_size, 8);
  std::memcpy(out.data() + 24, &base, 8);
  out.resize(base, 0);
  out.insert(out.end(), original.begin() + static_cast<std::ptrdiff_t>(old_base),
             original.begin() + static_cast<std::ptrdiff_t>(old_base + data_size));
  return out;
}

/// A program with a constant (so it has an extended header and segments), two kernels and a delegate-free
/// second method with every scalar value kind, to give the mutations something to work on.
std::vector<uint8_t> fuzz_base_program() {
  format::ProgramWriter w;
  {
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(f32({2, 3}));
    const int32_t y = m.planned_tensor(f32({2, 3}));
    const std::vector<float> bias = {0.5f, 1.5f, -2.0f};
    const int32_t b = m.constant_tensor(f32({3}), format::as_bytes(bias));
    const int32_t sum = m.planned_tensor(f32({2, 3}));
    const int32_t out = m.planned_tensor(f32({2, 3}));
    const int32_t one = m.int_value(1);
    m.kernel("aten::add.out", {x, y, one, sum, sum});
    m.kernel("aten::add.out", {sum, b, one, out, out});
    const int32_t cat = m.planned_tensor(f32({4, 3}));
    m.kernel("aten::cat.out", {m.tensor_list({sum, out}), m.int_value(0), cat, cat});
    m.set_inputs({x, y});
    m.set_outputs({out, cat});
  }
  {
    auto& m = w.add_method("values");
    m.int_list({1, 2});
    m.set_outputs({m.int_value(3), m.double_value(0.5), m.bool_value(true), m.string_value("s"), m.none()});
  }
  return w.serialize();
}

// --- Truncation -----------------------------------------------------------------------------------------------

void expect_every_truncation_fails(const std::vector<uint8_t>& bytes) {
  ASSERT_FALSE(load_and_run(bytes, Verification::InternalConsistency, "full file").has_value());
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    try {
      Program p = load_bytes(cut);
      ADD_FAILURE() << "a file truncated to " << len << " of " << bytes.size() << " bytes loaded";
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::ProgramLoadError) << "length " << len << ": " << e.what();
    }
  }
}

TEST(BadInputTruncation, EveryLengthOfAProgramWithSegments) {
  const std::vector<uint8_t> bytes = small_add_program(true);
  ASSERT_EQ(std::memcmp(bytes.data() + 8, "eh00", 4), 0);
  expect_every_truncation_fails(bytes);
}

TEST(BadInputTruncation, EveryLengthOfAPlainFlatbuffer) {
  const std::vector<uint8_t> bytes = small_add_program(false);
  ASSERT_NE(std::memcmp(bytes.data() + 8, "eh00", 4), 0);
  expect_every_truncation_fails(bytes);
}

// --- Random damage --------------------------------------------------------------------------------------------

/// Each case has its own generator, so a failing case can be replayed alone. With ETNP_FUZZ_TRACE set, every case
/// is announced on stderr first, which names the culprit when one takes the process down.
std::mt19937_64 case_rng(uint64_t seed, int c) {
  if (std::getenv("ETNP_FUZZ_TRACE") != nullptr) std::fprintf(stderr, "fuzz seed %llu case %d\n", static_cast<unsigned long long>(seed), c);
  std::seed_seq seq{seed, static_cast<uint64_t>(c)};
  return std::mt19937_64(seq);
}

TEST(BadInputFuzz, SeededRandomByteFlips) {
  const std::vector<uint8_t> base = fuzz_base_program();
  ASSERT_FALSE(load_and_run(base, Verification::InternalConsistency, "base").has_value());
  int rejected = 0;
  constexpr int kCases = 4000;
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng = case_rng(20240601, c);
    std::vector<uint8_t> bytes = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t pos = rng() % bytes.size();
      if (rng() % 2) {
        bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else {
        bytes[pos] = static_cast<uint8_t>(rng());
      }
    }
    const Verification level = c % 4 == 3 ? Verification::Minimal : Verification::InternalConsistency;
    if (load_and_run(bytes, level, "flip case " + std::to_string(c)).has_value()) ++rejected;
  }
  // Most damage lands in bytes the reader checks; some lands in padding or values and still runs.
  EXPECT_GT(rejected, kCases / 10);
}

/// One structural mutation of the unpacked program, chosen and parameterised by `rng`.
void mutate_program(fb::ProgramT& p, std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  static const int64_t interesting[] = {-1, 0, 1, 2, 3, 7, 255, 65536, (1ll << 31) - 1, -(1ll << 31), (1ll << 32) + 1};
  auto odd_value = [&]() { return interesting[rng() % std::size(interesting)]; };
  auto& plan = *p.execution_plan[static_cast<size_t>(pick(0, static_cast<int64_t>(p.execution_plan.size()) - 1))];
  const auto nvalues = static_cast<int64_t>(plan.values.size());
  auto some_value = [&]() -> fb::EValueT* {
    return plan.values.empty() ? nullptr : plan.values[static_cast<size_t>(pick(0, nvalues - 1))].get();
  };
  auto some_tensor = [&]() -> fb::TensorT* {
    for (int tries = 0; tries < 16; ++tries) {
      fb::EValueT* v = some_value();
      if (v != nullptr && v->val.type == fb::KernelTypes::Tensor) return v->val.AsTensor();
    }
    return nullptr;
  };
  auto index_value = [&]() { return static_cast<int32_t>(rng() % 3 == 0 ? odd_value() : pick(-2, nvalues + 2)); };
  std::vector<fb::InstructionT*> instrs;
  for (auto& chain : plan.chains) {
    for (auto& i : chain->instructions) instrs.push_back(i.get());
  }
  fb::InstructionT* instr = instrs.empty() ? nullptr : instrs[rng() % instrs.size()];

  switch (rng() % 24) {
    case 0:
      if (auto* t = some_tensor(); t && !t->sizes.empty()) t->sizes[rng() % t->sizes.size()] = static_cast<int32_t>(odd_value());
      break;
    case 1:
      if (auto* t = some_tensor(); t && !t->dim_order.empty()) t->dim_order[rng() % t->dim_order.size()] = static_cast<uint8_t>(pick(0, 20));
      break;
    case 2:
      if (auto* t = some_tensor()) {
        if (rng() % 2) t->dim_order.push_back(0);
        else if (!t->dim_order.empty()) t->dim_order.pop_back();
        if (rng() % 2) t->sizes.push_back(2);
      }
      break;
    case 3:
      if (auto* t = some_tensor()) t->scalar_type = static_cast<fb::ScalarType>(pick(-3, 35));
      break;
    case 4:
      if (auto* t = some_tensor()) t->data_buffer_idx = static_cast<uint32_t>(rng() % 2 ? pick(0, 8) : odd_value());
      break;
    case 5:
      if (auto* t = some_tensor()) {
        if (!t->allocation_info) t->allocation_info = std::make_unique<fb::AllocationDetailsT>();
        t->allocation_info->memory_id = static_cast<uint32_t>(pick(0, 3));
        t->allocation_info->memory_offset_low = static_cast<uint32_t>(rng() % 2 ? pick(0, 256) : odd_value());
        t->allocation_info->memory_offset_high = static_cast<uint32_t>(pick(0, 2) == 2 ? 1 : 0);
      }
      break;
    case 6:
      if (auto* t = some_tensor()) t->allocation_info.reset();
      break;
    case 7:
      if (auto* t = some_tensor()) {
        t->shape_dynamism = static_cast<fb::TensorShapeDynamism>(pick(0, 4));
        t->storage_offset = static_cast<int32_t>(pick(0, 1));
      }
      break;
    case 8:
      if (auto* t = some_tensor()) {
        t->extra_tensor_info = std::make_unique<fb::ExtraTensorInfoT>();
        t->extra_tensor_info->location = static_cast<fb::TensorDataLocation>(pick(0, 3));
        if (rng() % 2) t->extra_tensor_info->fully_qualified_name = "w" + std::to_string(pick(0, 3));
      }
      break;
    case 9:
      if (instr && instr->instr_args.type == fb::InstructionArguments::KernelCall) {
        auto* k = instr->instr_args.AsKernelCall();
        if (!k->args.empty()) k->args[rng() % k->args.size()] = index_value();
      }
      break;
    case 10:
      if (instr && instr->instr_args.type == fb::InstructionArguments::KernelCall) {
        auto* k = instr->instr_args.AsKernelCall();
        if (rng() % 2) k->op_index = static_cast<int32_t>(pick(-2, static_cast<int64_t>(plan.operators.size()) + 1));
        else if (!k->args.empty()) k->args.pop_back();
      }
      break;
    case 11:
      if (instr) {  // replace with another instruction kind (no loops: the programs hold no Bool false)
        switch (rng() % 4) {
          case 0: {
            fb::MoveCallT mv;
            mv.move_from = index_value();
            mv.move_to = index_value();
            instr->instr_args.Set(std::move(mv));
            break;
          }
          case 1: {
            fb::JumpFalseCallT j;
            j.cond_value_index = index_value();
            j.destination_instruction = static_cast<int32_t>(pick(-2, static_cast<int64_t>(instrs.size()) + 2));
            instr->instr_args.Set(std::move(j));
            break;
          }
          case 2: {
            fb::FreeCallT f;
            f.value_index = index_value();
            instr->instr_args.Set(std::move(f));
            break;
          }
          default: {
            fb::DelegateCallT d;
            d.delegate_index = static_cast<int32_t>(pick(-1, 2));
            d.args = {index_value(), index_value()};
            instr->instr_args.Set(std::move(d));
          }
        }
      }
      break;
    case 12:
      if (rng() % 2 && !plan.inputs.empty()) plan.inputs[rng() % plan.inputs.size()] = index_value();
      else if (!plan.outputs.empty()) plan.outputs[rng() % plan.outputs.size()] = index_value();
      break;
    case 13:
      if (!plan.non_const_buffer_sizes.empty()) {
        plan.non_const_buffer_sizes[rng() % plan.non_const_buffer_sizes.size()] = pick(-5, 4096);
      }
      if (rng() % 3 == 0) plan.non_const_buffer_sizes.clear();
      break;
    case 14:
      if (p.constant_segment) {
        if (rng() % 2 && !p.constant_segment->offsets.empty()) {
          p.constant_segment->offsets[rng() % p.constant_segment->offsets.size()] = static_cast<uint64_t>(odd_value());
        } else {
          p.constant_segment->segment_index = static_cast<uint32_t>(pick(0, 3));
        }
      }
      break;
    case 15:
      if (!p.segments.empty()) {
        auto& s = *p.segments[rng() % p.segments.size()];
        if (rng() % 2) s.offset = static_cast<uint64_t>(odd_value());
        else s.size = static_cast<uint64_t>(odd_value());
      }
      break;
    case 16:
      if (fb::EValueT* v = some_value()) {
        switch (rng() % 6) {
          case 0: {
            fb::IntT x;
            x.int_val = odd_value();
            v->val.Set(std::move(x));
            break;
          }
          case 1: v->val.Set(fb::NullT{}); break;
          case 2: {
            fb::TensorListT x;
            x.items = {index_value(), index_value()};
            v->val.Set(std::move(x));
            break;
          }
          case 3: {
            fb::IntListT x;
            x.items = {index_value(), index_value()};
            v->val.Set(std::move(x));
            break;
          }
          case 4: {
            fb::OptionalTensorListT x;
            x.items = {-1, index_value()};
            v->val.Set(std::move(x));
            break;
          }
          default: v->val.Reset(); break;  // a value with no payload
        }
      }
      break;
    case 17:
      if (!plan.operators.empty()) {
        auto& op = *plan.operators[rng() % plan.operators.size()];
        if (rng() % 2) op.name = rng() % 2 ? "" : "aten::no_such_op";
        else op.overload = rng() % 2 ? "" : std::string(120, 'x');
      }
      break;
    case 18: {
      auto d = std::make_unique<fb::BackendDelegateT>();
      d->id = rng() % 2 ? "XnnpackBackend" : "NoSuchBackend";
      d->processed = std::make_unique<fb::BackendDelegateDataReferenceT>();
      d->processed->location = static_cast<fb::DataLocation>(pick(0, 2));
      d->processed->index = static_cast<uint32_t>(pick(0, 4));
      plan.delegates.push_back(std::move(d));
      break;
    }
    case 19:
      switch (rng() % 3) {
        case 0: plan.chains.clear(); break;
        case 1:
          if (!plan.chains.empty()) plan.chains[0]->instructions.clear();
          break;
        default: plan.values.resize(static_cast<size_t>(pick(0, nvalues)));
      }
      break;
    case 20:
      if (instr && instr->instr_args.type == fb::InstructionArguments::KernelCall) instr->instr_args.Reset();
      break;
    case 21: {
      auto nd = std::make_unique<fb::NamedDataT>();
      nd->key = "k";
      nd->segment_index = static_cast<uint32_t>(pick(0, 4));
      p.named_data.push_back(std::move(nd));
      break;
    }
    case 22: {
      auto m = std::make_unique<fb::SubsegmentOffsetsT>();
      m->segment_index = static_cast<uint32_t>(pick(0, 3));
      m->offsets = {0, static_cast<uint64_t>(pick(0, 64))};
      p.mutable_data_segments.push_back(std::move(m));
      if (auto* t = some_tensor()) t->data_buffer_idx = 1;
      break;
    }
    default:
      if (rng() % 2) p.execution_plan.clear();
      else plan.name = rng() % 2 ? "" : "forward";  // empty or duplicate method name
      break;
  }
}

TEST(BadInputFuzz, SeededFieldMutations) {
  const std::vector<uint8_t> base = fuzz_base_program();
  int rejected = 0;
  constexpr int kCases = 3000;
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng = case_rng(77, c);
    std::vector<uint8_t> bytes = rebuild(base, [&](fb::ProgramT& p) { mutate_program(p, rng); });
    if (load_and_run(bytes, Verification::InternalConsistency, "mutation case " + std::to_string(c)).has_value()) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, kCases / 4);
}

TEST(BadInputFuzz, RebuildWithoutChangesStillRuns) {
  // The mutation harness itself must produce loadable files, or the fuzz cases above prove nothing.
  const std::vector<uint8_t> base = fuzz_base_program();
  const std::vector<uint8_t> same = rebuild(base, [](fb::ProgramT&) {});
  EXPECT_FALSE(load_and_run(same, Verification::InternalConsistency, "rebuilt").has_value());
}

// --- Damage the fuzzers found, as deterministic cases ----------------------------------------------------------

// Minimal verification does not look inside methods; asking for one whose name is missing must still be an error.
TEST(BadInputDamage, MethodWithoutANameUnderMinimalVerification) {
  std::unique_ptr<fb::ProgramT> program(fb::GetProgram(small_add_program(false).data())->UnPack());
  program->execution_plan[0]->name.clear();
  flatbuffers::FlatBufferBuilder b;
  b.Finish(fb::Program::Pack(b, program.get()), "ET12");  // the generated Pack drops the empty name: no string
  const std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  LoadOptions options;
  options.verification = Verification::Minimal;
  try {
    Program p = load_bytes(bytes, options);
    EXPECT_THROW(p.method_meta("forward"), Error);
    EXPECT_THROW(p.load_method("forward"), Error);
  } catch (const Error&) {
    // Rejecting the file outright is fine too.
  }
}

// A FreeCall may release a planned input's storage. Freeing ends a lifetime within one run: the memory plan is
// static, so the next run gets the planned storage back instead of copying its input through a null pointer.
TEST(BadInputDamage, InputFreedByTheProgramThenRunAgain) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3}));
  const int32_t y = m.planned_tensor(f32({3}));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(2.0), y, y});
  m.free(x);
  m.set_inputs({x});
  m.set_outputs({y});
  Program p = load_bytes(w.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> in = {1, 2, 3};
  EXPECT_EQ(floats(exec(*method, {tensor_input(in, {3})})[0]), (std::vector<float>{2, 4, 6}));
  const std::vector<float> again = {5, 6, 7};
  EXPECT_EQ(floats(exec(*method, {tensor_input(again, {3})})[0]), (std::vector<float>{10, 12, 14}));
}

// Planned offsets that break the element alignment are a load error naming the offset, never misaligned
// float accesses (undefined behaviour; UBSan reports it).
TEST(BadInputDamage, MisalignedPlannedOffset) {
  const std::vector<uint8_t> bytes = rebuild(small_add_program(true), [](fb::ProgramT& p) {
    for (auto& v : p.execution_plan[0]->values) {
      if (auto* t = v->val.AsTensor(); t != nullptr && t->allocation_info) t->allocation_info->memory_offset_low += 2;
    }
    p.execution_plan[0]->non_const_buffer_sizes[1] += 16;
  });
  try {
    Program p = load_bytes(bytes);
    p.load_method("forward");
    FAIL() << "a misaligned planned offset was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a multiple of its element size (4 bytes)"), std::string::npos) << e.what();
  }
}

// A constant that a damaged file places off its element alignment is copied once at load and read correctly.
TEST(BadInputDamage, MisalignedConstantIsCopied) {
  uint64_t moved_to = 0, segment_offset = 0;
  std::vector<uint8_t> bytes = rebuild(small_add_program(true), [&](fb::ProgramT& p) {
    auto& offsets = p.constant_segment->offsets;
    ASSERT_GE(offsets.size(), 2u);
    moved_to = offsets[1] + 1;  // the bias, one byte on
    offsets[1] = moved_to;
    auto& segment = *p.segments[p.constant_segment->segment_index];
    segment_offset = segment.offset;
    segment.size += 16;  // room for the shifted bias (the bytes are appended below)
  });
  bytes.resize(bytes.size() + 16);
  // Put the bias's bytes where the damaged offset points, so the expected sums stay known.
  uint64_t segment_base = 0;
  std::memcpy(&segment_base, bytes.data() + 24, 8);  // extended header: segment base offset
  const uint64_t at = segment_base + segment_offset + moved_to;
  ASSERT_LE(at + 12, bytes.size());
  const std::vector<float> bias = {0.5f, 1.5f, -2.0f};
  std::memcpy(bytes.data() + at, bias.data(), 12);
  Program p = load_bytes(bytes);
  auto method = p.load_method("forward");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {10, 20, 30, 40, 50, 60};
  EXPECT_EQ(floats(exec(*method, {tensor_input(x, {2, 3}), tensor_input(y, {2, 3})})[0]),
            (std::vector<float>{11.5f, 23.5f, 31.0f, 44.5f, 56.5f, 64.0f}));
  EXPECT_EQ(method->load_time_bytes(), 12u);  // the aligned copy
}

// --- Method inputs --------------------------------------------------------------------------------------------

class BadInputArguments : public ::testing::Test {
 protected:
  void SetUp() override {
    format::ProgramWriter w;
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(f32({1, 2, 3, 4}));
    const int32_t y = m.planned_tensor(f32({1, 2, 3, 4}));
    const int32_t out = m.planned_tensor(f32({1, 2, 3, 4}));
    m.kernel("aten::add.out", {x, y, m.int_value(1), out, out});
    m.set_inputs({x, y});
    m.set_outputs({out});
    bytes_ = w.serialize();
  }

  void expect_invalid(const std::vector<Value>& inputs, int64_t input_index, const std::string& needle) {
    Program p = load_bytes(bytes_);
    auto method = p.load_method("forward");
    try {
      method->execute(inputs);
      ADD_FAILURE() << "accepted bad inputs (expected: " << needle << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      EXPECT_EQ(e.context().input_index, input_index) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }

  std::vector<uint8_t> bytes_;
  std::vector<float> data_ = std::vector<float>(24, 1.0f);
};

TEST_F(BadInputArguments, WrongInputCount) {
  Program p = load_bytes(bytes_);
  auto method = p.load_method("forward");
  try {
    exec(*method, {tensor_input(data_, {1, 2, 3, 4})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("expected 2 inputs, got 1"), std::string::npos) << e.what();
  }
}

TEST_F(BadInputArguments, WrongDtype) {
  std::vector<double> d(24, 1.0);
  TensorRef t;
  t.dtype = ScalarType::Double;
  t.sizes = {1, 2, 3, 4};
  t.data = d.data();
  expect_invalid({tensor_input(data_, {1, 2, 3, 4}), t}, 1, "dtype");
}

TEST_F(BadInputArguments, WrongRank) { expect_invalid({tensor_input(data_, {2, 3, 4}), tensor_input(data_, {1, 2, 3, 4})}, 0, "rank"); }

TEST_F(BadInputArguments, WrongShape) {
  expect_invalid({tensor_input(data_, {1, 2, 3, 4}), tensor_input(data_, {1, 3, 2, 4})}, 1, "shape");
}

TEST_F(BadInputArguments, WrongLayout) {
  TensorRef t = std::get<TensorRef>(tensor_input(data_, {1, 2, 3, 4}));
  t.dim_order = {0, 2, 3, 1};  // channels-last data for a contiguous input
  expect_invalid({t, tensor_input(data_, {1, 2, 3, 4})}, 0, "memory order");
}

TEST_F(BadInputArguments, NonTensorForATensor) {
  expect_invalid({tensor_input(data_, {1, 2, 3, 4}), Value(int64_t{3})}, 1, "expected a tensor");
}

// --- Program-level errors -------------------------------------------------------------------------------------

TEST(BadInputProgram, UnknownMethodListsTheMethods) {
  format::ProgramWriter w;
  w.add_method("forward").set_outputs({});
  w.add_method("encode").set_outputs({});
  Program p = load_bytes(w.serialize());
  for (auto call : {std::function<void()>([&] { p.load_method("decode"); }),
                    std::function<void()>([&] { p.method_meta("decode"); })}) {
    try {
      call();
      ADD_FAILURE() << "unknown method accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("decode"), std::string::npos) << msg;
      EXPECT_NE(msg.find("forward"), std::string::npos) << msg;
      EXPECT_NE(msg.find("encode"), std::string::npos) << msg;
    }
  }
}

TEST(BadInputProgram, MissingOperator) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2}));
  const int32_t y = m.planned_tensor(f32({2}));
  m.kernel("my_ops::frobnicate.out", {x, y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  Program p = load_bytes(w.serialize());
  const LoadVerdict verdict = p.load_verdict("forward");
  ASSERT_EQ(verdict.problems.size(), 1u);
  EXPECT_EQ(verdict.problems[0].kind, LoadProblem::Kind::MissingOperator);
  EXPECT_EQ(verdict.problems[0].name, "my_ops::frobnicate.out");
  try {
    p.load_method("forward");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OperatorNotFound);
    EXPECT_NE(std::string(e.what()).find("my_ops::frobnicate.out"), std::string::npos) << e.what();
  }
}

TEST(BadInputProgram, MissingBackend) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2}));
  const int32_t y = m.planned_tensor(f32({2}));
  m.delegate("CoreMLBackend", {1, 2, 3, 4}, {x, y});
  m.set_inputs({x});
  m.set_outputs({y});
  Program p = load_bytes(w.serialize());
  const LoadVerdict verdict = p.load_verdict("forward");
  ASSERT_EQ(verdict.problems.size(), 1u);
  EXPECT_EQ(verdict.problems[0].kind, LoadProblem::Kind::MissingBackend);
  EXPECT_EQ(verdict.problems[0].name, "CoreMLBackend");
  try {
    p.load_method("forward");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendNotAvailable);
    EXPECT_NE(std::string(e.what()).find("CoreMLBackend"), std::string::npos) << e.what();
  }
}

TEST(BadInputExternalData, MissingPtd) {
  Program p = load_bytes(external_weight_program(nullptr));
  try {
    p.load_method("forward");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find(".ptd"), std::string::npos) << msg;
  }
}

TEST(BadInputExternalData, MissingPtdFileOnDisk) {
  LoadOptions options;
  options.data_files = {"/nonexistent/dir/weights.ptd"};
  try {
    load_bytes(external_weight_program(nullptr), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/weights.ptd"), std::string::npos) << e.what();
  }
}

TEST(BadInputExternalData, PtdWithoutTheKey) {
  format::PtdWriter other;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  other.add_tensor("other.weight", TensorLayout{ScalarType::Float, {2, 3}, {}}, format::as_bytes(w));
  LoadOptions options;
  const std::vector<uint8_t> ptd = other.serialize();
  options.data_buffers.push_back(ptd);
  Program p = load_bytes(external_weight_program(nullptr), options);
  try {
    p.load_method("forward");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("layer.weight"), std::string::npos) << e.what();
  }
}

TEST(BadInputExternalData, PtdWithTheWrongShape) {
  format::PtdWriter wrong;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  wrong.add_tensor("layer.weight", TensorLayout{ScalarType::Float, {3, 2}, {}}, format::as_bytes(w));
  LoadOptions options;
  const std::vector<uint8_t> ptd = wrong.serialize();
  options.data_buffers.push_back(ptd);
  Program p = load_bytes(external_weight_program(nullptr), options);
  try {
    p.load_method("forward");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  }
}

TEST(BadInputExternalData, RightPtdRuns) {
  format::PtdWriter ptd;
  const std::vector<uint8_t> bytes = external_weight_program(&ptd);
  const std::vector<uint8_t> data = ptd.serialize();
  LoadOptions options;
  options.data_buffers.push_back(data);
  Program p = load_bytes(bytes, options);
  const std::vector<float> x = {1, 1, 1, 1, 1, 1};
  EXPECT_EQ(floats(exec(*p.load_method("forward"), {tensor_input(x, {2, 3})})[0]),
            (std::vector<float>{2, 3, 4, 5, 6, 7}));
}

TEST(BadInputExternalData, ProgramGivenAsPtd) {
  const std::vector<uint8_t> program = small_add_program(true);
  LoadOptions options;
  options.data_buffers.push_back(program);
  try {
    load_bytes(external_weight_program(nullptr), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("not .ptd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace etnp::writer_testing
