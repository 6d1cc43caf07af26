// Text generation over a language-model program: the prefill-then-decode loop around a method that maps
// token ids to next-token logits, as ExecuTorch's LLM export and optimum-executorch write them.
//
//   etnp::Program program = etnp::Program::load_file("llama.pte");
//   etnp::Tokenizer tokenizer = etnp::Tokenizer::load("tokenizer.json");
//   etnp::Generator generator(program);
//   etnp::GenerationOptions options;
//   options.max_new_tokens = 64;
//   generator.generate(tokenizer, "Once upon a time", options, [](std::string_view text, int64_t) {
//     std::fwrite(text.data(), 1, text.size(), stdout);
//     return true;  // false stops
//   });
//   // or a step at a time:
//   etnp::Generation g = generator.start(tokenizer, "Once upon a time", options);
//   while (auto step = g.next()) std::fwrite(step->text.data(), 1, step->text.size(), stdout);
//
// Thread safety: a Generator owns its loaded method and its KV cache; use one per thread (several may share a
// Program). The methods of one Generator must not be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/program.h"
#include "etnp/tokenizer.h"

namespace etnp {

/// What a language-model program says of itself through its constant methods, read once by the Generator.
/// Each field names the method it comes from; a method the program lacks leaves its default.
struct LlmMetadata {
  int64_t max_seq_len = 0;        ///< get_max_seq_len; else the token input's upper bound (+1 with a cache)
  int64_t max_context_len = 0;    ///< get_max_context_len; else max_seq_len
  std::optional<int64_t> bos_id;  ///< get_bos_id
  std::vector<int64_t> eos_ids;   ///< get_eos_ids, or get_eos_id
  std::optional<int64_t> vocab_size;  ///< get_vocab_size
  bool use_kv_cache = true;       ///< use_kv_cache; else whether the method takes a position input
};

struct GenerationOptions {
  /// Tokens to generate at most; -1: until the context is full.
  int64_t max_new_tokens = -1;
  /// 0 is greedy (argmax, the default: the same tokens every run); above 0 samples softmax(logits / T).
  double temperature = 0.0;
  /// Nucleus sampling: draws from the smallest set of tokens whose probability reaches top_p (1 = all).
  double top_p = 1.0;
  uint64_t seed = 0;  ///< The sampler's seed: the same seed, options and program give the same tokens.
  /// Prepend the program's (or the tokenizer's) BOS id to the prompt.
  bool add_bos = true;
  /// Generation stops once the text generated contains one of these (the text through it is returned).
  std::vector<std::string> stop_strings;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;      ///< the prompt's forward calls
  double decode_seconds = 0;       ///< the single-token calls after the first generated token
  double first_token_seconds = 0;  ///< from the start of generate() to the first generated token
  int64_t peak_rss_bytes = 0;      ///< the process's peak resident memory at the end
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  /// Tokens after the first (the first comes from the prefill), over the decode time.
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
};

/// Why generation ended (Callback: the caller stopped it).
enum class StopReason { Eos, MaxNewTokens, ContextFull, StopString, Callback };
const char* stop_reason_name(StopReason reason);

struct GenerationResult {
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> ids;  ///< generated, EOS included when it ended generation
  std::string text;          ///< the generated text (empty when generating from ids)
  StopReason stop = StopReason::MaxNewTokens;
  GenerationStats stats;
};

class Generator;

/// One generation in progress (Generator::start): next() decodes a token at a time, so that a caller can
/// stream, interleave or stop it. It uses its Generator's method: the Generator must outlive it, and starting
/// another generation (or feed/reset) ends this one (next() then throws InvalidArgument).
class Generation {
 public:
  struct Step {
    int64_t token;
    std::string text;  ///< the text this token completes (empty for EOS, or inside a UTF-8 sequence)
  };
  /// The next token, or nullopt once generation has ended (EOS, max_new_tokens, a full context, a stop string).
  std::optional<Step> next();
  bool done() const;
  /// What has been generated so far; the stop reason and figures are final once done().
  const GenerationResult& result() const;
  /// Ends the generation early (StopReason::Callback): what a caller does when it stops taking tokens.
  void stop();

  ~Generation();
  Generation(Generation&&) noexcept;
  Generation& operator=(Generation&&) noexcept;

 private:
  friend class Generator;

 public:
  struct State;

 private:
  explicit Generation(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Generator {
 public:
  /// Loads `method` of `program` and reads the metadata methods. The method must take token ids int64 [1, n]
  /// and, with a KV cache, the start position int64 [1] (ExecuTorch's LLM export) or the cache positions int64
  /// [n] (transformers' export); it returns logits [1, vocab] (the last token's) or [1, n, vocab]. Throws
  /// InvalidArgument naming the method and what differs otherwise.
  explicit Generator(const Program& program, std::string_view method = "forward");
  ~Generator();
  Generator(Generator&&) noexcept;
  Generator& operator=(Generator&&) noexcept;

  const LlmMetadata& metadata() const;

  /// Appends `tokens` to the context and returns the logits for the next token (valid until the next call).
  /// A program with dynamic shapes takes the whole chunk in one call; a static one takes a token per call.
  /// Throws InvalidArgument when the context would exceed max_context_len (naming both counts).
  std::span<const float> feed(std::span<const int64_t> tokens);
  /// Tokens in the context so far.
  int64_t position() const;
  /// Empties the context (the cache's old entries are overwritten as positions are reused).
  void reset();
  /// Picks the next token from `logits` per `options`: greedy, or temperature / top-p sampling drawn from
  /// a generator seeded with options.seed on each call (Generation keeps one sampler across its steps).
  int64_t sample(std::span<const float> logits, const GenerationOptions& options);

  /// Resets and prefills `prompt_ids` (with BOS prepended when options.add_bos and the program names one).
  /// stop_strings need text and are refused here (InvalidArgument).
  Generation start(std::span<const int64_t> prompt_ids, const GenerationOptions& options);
  /// The same from text: encodes `prompt` with `tokenizer` (BOS from the program, else the tokenizer), and
  /// decodes each step's text, honouring stop_strings. The tokenizer must outlive the Generation.
  Generation start(const Tokenizer& tokenizer, std::string_view prompt, const GenerationOptions& options);

  /// Called with each generated token; returning false stops generation.
  using TokenCallback = std::function<bool(int64_t token)>;
  /// Called with the text each token completes (possibly empty); returning false stops generation.
  using TextCallback = std::function<bool(std::string_view text, int64_t token)>;
  /// start() and every step to the end, through the callback.
  GenerationResult generate(std::span<const int64_t> prompt_ids, const GenerationOptions& options,
                            const TokenCallback& on_token = nullptr);
  GenerationResult generate(const Tokenizer& tokenizer, std::string_view prompt, const GenerationOptions& options,
                            const TextCallback& on_text = nullptr);

  struct Impl;

 private:
  Generation begin(std::unique_ptr<Generation::State> state, const GenerationOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace etnp
