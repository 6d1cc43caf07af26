// etnp::Generator on programs whose logits depend only on the positions the generator passes: logits =
// table[position], the table's row p peaking at peak(p). The tokens it generates therefore say which positions
// each call received, for the three signatures the generator takes: ExecuTorch's export (dynamic tokens and a
// start position [1]), a static one-token export (the prompt fed a token a call) and transformers' export (one
// position per token [n], a logits row per token). (tests/python/test_llm.py covers the loop's options and the
// text path on a token-driven program.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

#include "etnp/generator.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using format::TensorSpec;
using writer_testing::load_bytes;

constexpr int64_t kVocab = 16, kMaxSeq = 32, kBos = 1, kEos = 15;

int64_t peak(int64_t position) { return 2 + position % 12; }  // never BOS or EOS

TensorSpec i64(std::vector<int32_t> sizes, ShapeDynamism d = ShapeDynamism::Static) {
  return {ScalarType::Long, std::move(sizes), {}, d, {}};
}

enum class Signature { StartPosition, OneTokenStatic, PerTokenPositions };

// logit(p, j): row p's logit of token j, over `vocab` tokens (default: peaked at peak(p)).
float peaked(int64_t p, int64_t j) { return -static_cast<float>(std::abs(j - peak(p))); }

std::vector<uint8_t> positional_program(Signature signature, bool with_metadata = true,
                                        float (*logit)(int64_t, int64_t) = peaked, int64_t vocab = kVocab) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  std::vector<float> table(static_cast<size_t>(kMaxSeq * vocab));
  for (int64_t p = 0; p < kMaxSeq; ++p) {
    for (int64_t j = 0; j < vocab; ++j) table[static_cast<size_t>(p * vocab + j)] = logit(p, j);
  }
  const int32_t weight = m.constant_tensor(writer_testing::f32({static_cast<int32_t>(kMaxSeq), static_cast<int32_t>(vocab)}),
                                           format::as_bytes(table));
  const auto bound = static_cast<int32_t>(kMaxSeq - 1);
  const bool per_token = signature == Signature::PerTokenPositions;
  const int32_t tokens = signature == Signature::OneTokenStatic
                             ? m.unplanned_tensor(i64({1, 1}))
                             : m.unplanned_tensor(i64({1, bound}, ShapeDynamism::DynamicBound));
  const int32_t positions = per_token ? m.unplanned_tensor(i64({bound}, ShapeDynamism::DynamicBound))
                                      : m.unplanned_tensor(i64({1}));
  const int32_t logits = per_token ? m.planned_tensor(writer_testing::f32({bound, static_cast<int32_t>(vocab)}, ShapeDynamism::DynamicBound))
                                   : m.planned_tensor(writer_testing::f32({1, static_cast<int32_t>(vocab)}));
  const int32_t pad = m.int_value(-1), no = m.bool_value(false);
  m.kernel("aten::embedding.out", {weight, positions, pad, no, no, logits, logits});
  m.set_inputs({tokens, positions});
  m.set_outputs({logits});
  if (with_metadata) {
    for (auto [name, value] : {std::pair<const char*, int64_t>{"get_max_seq_len", kMaxSeq}, {"get_bos_id", kBos},
                               {"get_eos_ids", kEos}, {"get_vocab_size", kVocab}}) {
      auto& c = w.add_method(name);
      const int32_t v = c.int_value(value);
      c.set_outputs({v});
    }
  }
  return w.serialize();
}

std::vector<int64_t> peaks_from(int64_t first_position, size_t count) {
  std::vector<int64_t> out;
  for (size_t k = 0; k < count; ++k) out.push_back(peak(first_position + static_cast<int64_t>(k)));
  return out;
}

TEST(Generator, StartPositionSignaturePrefillsInOneCallThenOnePositionPerStep) {
  const Program program = load_bytes(positional_program(Signature::StartPosition));
  Generator g(program);
  EXPECT_EQ(g.metadata().max_seq_len, kMaxSeq);
  EXPECT_EQ(g.metadata().bos_id, kBos);
  EXPECT_EQ(g.metadata().eos_ids, std::vector<int64_t>{kEos});
  EXPECT_TRUE(g.metadata().use_kv_cache);
  GenerationOptions o;
  o.max_new_tokens = 5;
  const std::vector<int64_t> prompt = {7, 8, 9};  // BOS + 3 tokens: positions 0..3 in one call (start 0)
  const GenerationResult r = g.generate(prompt, o);
  EXPECT_EQ(r.prompt_ids, (std::vector<int64_t>{kBos, 7, 8, 9}));
  // The prefill's call starts at 0; the decode calls feed positions 4, 5, 6, 7.
  std::vector<int64_t> expected = {peak(0)};
  for (int64_t p : peaks_from(4, 4)) expected.push_back(p);
  EXPECT_EQ(r.ids, expected);
  EXPECT_EQ(r.stop, StopReason::MaxNewTokens);
  EXPECT_EQ(g.position(), 8);
}

TEST(Generator, StaticOneTokenSignatureFeedsThePromptATokenACall) {
  const Program program = load_bytes(positional_program(Signature::OneTokenStatic));
  Generator g(program);
  GenerationOptions o;
  o.max_new_tokens = 3;
  const GenerationResult r = g.generate(std::vector<int64_t>{7, 8, 9}, o);
  EXPECT_EQ(r.ids, peaks_from(3, 3));  // the prompt's last call is at position 3
}

TEST(Generator, PerTokenPositionsSignatureReadsTheLastRow) {
  const Program program = load_bytes(positional_program(Signature::PerTokenPositions));
  Generator g(program);
  GenerationOptions o;
  o.max_new_tokens = 4;
  o.add_bos = false;
  const GenerationResult r = g.generate(std::vector<int64_t>{7, 8, 9, 10, 11}, o);
  EXPECT_EQ(r.ids, peaks_from(4, 4));
  // feed() by hand: the logits are the last row's, for position 5 + 2 - 1.
  g.reset();
  g.feed(std::vector<int64_t>{3, 3, 3, 3, 3});
  const auto logits = g.feed(std::vector<int64_t>{3, 3});
  ASSERT_EQ(logits.size(), static_cast<size_t>(kVocab));
  EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), peak(6));
}

TEST(Generator, NucleusSamplingDrawsOnlyFromTheNucleusHoweverLarge) {
  // 512 tokens whose probabilities fall slowly with the id (logit -j / 64): at top_p 0.9 the nucleus is the
  // first few hundred ids, far more than the first prefix the sampler sorts. Every draw must come from the
  // nucleus the definition gives, and over many draws ids past that first prefix must appear.
  constexpr int64_t vocab = 512;
  const Program program = load_bytes(positional_program(Signature::StartPosition, /*with_metadata=*/false,
                                                        [](int64_t, int64_t j) { return -static_cast<float>(j) / 64; },
                                                        vocab));
  double mass = 0, kept = 0;
  for (int64_t j = 0; j < vocab; ++j) mass += std::exp(-static_cast<double>(j) / 64);
  int64_t nucleus = 0;
  while (kept < 0.9 * mass) kept += std::exp(-static_cast<double>(nucleus++) / 64);
  ASSERT_GT(nucleus, 100);
  Generator g(program);
  GenerationOptions o;
  o.temperature = 1.0;
  o.top_p = 0.9;
  o.max_new_tokens = 20;
  int64_t highest = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    o.seed = seed;
    for (int64_t id : g.generate(std::vector<int64_t>{7}, o).ids) {
      ASSERT_LT(id, nucleus) << "seed " << seed;
      highest = std::max(highest, id);
    }
  }
  EXPECT_GT(highest, 64);
}

TEST(Generator, WithoutMetadataMethodsTheBoundsComeFromTheSignature) {
  const Program program = load_bytes(positional_program(Signature::StartPosition, /*with_metadata=*/false));
  Generator g(program);
  // ExecuTorch's dynamic export bounds the tokens at max_seq_len - 1.
  EXPECT_EQ(g.metadata().max_seq_len, kMaxSeq);
  EXPECT_FALSE(g.metadata().bos_id.has_value());
  EXPECT_TRUE(g.metadata().eos_ids.empty());
  GenerationOptions o;  // no EOS, no limit: until the context is full
  const GenerationResult r = g.generate(std::vector<int64_t>{7}, o);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(static_cast<int64_t>(r.ids.size()), kMaxSeq);  // 1 prompt token + 31 fed back; the last not fed
}

TEST(Generator, ContextOverflowAndBadSignaturesAreRefused) {
  const Program program = load_bytes(positional_program(Signature::StartPosition));
  Generator g(program);
  std::vector<int64_t> too_long(static_cast<size_t>(kMaxSeq + 1), 3);
  try {
    g.feed(too_long);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("above the program's context of 32 tokens"), std::string::npos) << e.what();
  }
  try {
    Generator bad(program, "get_bos_id");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("method 'get_bos_id' is not a language model's step"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Generator(program, "decode"), Error);
  GenerationOptions stops;
  stops.stop_strings = {"x"};
  EXPECT_THROW(g.generate(std::vector<int64_t>{3}, stops), Error);  // stop strings need text
}

TEST(Generator, AGenerationEndsWhenANewerOneStarts) {
  const Program program = load_bytes(positional_program(Signature::StartPosition));
  Generator g(program);
  GenerationOptions o;
  Generation first = g.start(std::vector<int64_t>{7}, o);
  ASSERT_TRUE(first.next().has_value());
  Generation second = g.start(std::vector<int64_t>{7, 7}, o);
  EXPECT_EQ(second.next()->token, peak(0));
  EXPECT_THROW(first.next(), Error);
  second.stop();
  EXPECT_TRUE(second.done());
  EXPECT_EQ(second.result().stop, StopReason::Callback);
  EXPECT_FALSE(second.next().has_value());
}

// The threads contract (docs/architecture.md "Threads"): Generators of one program run in parallel, each on
// one thread; each generation gives what it gives alone. (Named Concurrency.* so that scripts/test.sh runs it
// under ThreadSanitizer.)
TEST(Concurrency, GeneratorsOfOneProgramRunInParallel) {
  const Program program = load_bytes(positional_program(Signature::StartPosition));
  GenerationOptions o;
  o.max_new_tokens = 6;
  const std::vector<std::vector<int64_t>> prompts = {{7}, {7, 8}, {7, 8, 9}, {3, 4, 5, 6}};
  std::vector<std::vector<int64_t>> expected;
  for (const auto& p : prompts) expected.push_back(Generator(program).generate(p, o).ids);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Generator g(program);
      for (size_t i = 0; i < 20; ++i) {
        const size_t k = (t + i) % prompts.size();
        if (g.generate(prompts[k], o).ids != expected[k]) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace etnp
