// The prefill-then-decode loop (include/etnp/generator.h). Everything a step needs is decided when the
// Generator is made: the method is loaded once, the position input is bound once to the generator's own
// int64, and the token input is re-bound only when a call's chunk length differs from the last one (never
// during decoding); the loop itself writes ids, runs and samples.
#include "etnp/generator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/half.h"
#include "etnp/error.h"

namespace etnp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::optional<int64_t> as_int(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  return std::nullopt;
}

bool is_int64_tensor(const ValueInfo& info, size_t rank) {
  return info.tag == Tag::Tensor && info.tensor.dtype == ScalarType::Long && info.tensor.sizes.size() == rank;
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::Eos: return "eos";
    case StopReason::MaxNewTokens: return "max_new_tokens";
    case StopReason::ContextFull: return "context_full";
    case StopReason::StopString: return "stop_string";
    case StopReason::Callback: return "callback";
  }
  return "unknown";
}

struct Generator::Impl {
  /// How the method takes positions: none (no cache: the whole context each call), a start position [1]
  /// (ExecuTorch's LLM export), or one position per token [n] (transformers' export).
  enum class Positions { None, Start, PerToken };

  Program program;
  std::unique_ptr<Method> method;
  std::string where;  // "method 'forward'", for messages
  LlmMetadata meta;
  Positions positions = Positions::None;
  int64_t chunk_limit = 1;    // tokens per call: the token input's bound (1 for a static [1, 1] input)
  bool dynamic_tokens = false;
  bool tokens_planned = false, positions_planned = false;
  std::vector<int64_t> context;     // every token fed so far (the whole input without a cache)
  std::vector<int64_t> call_positions;
  int64_t start_position = 0;
  int64_t bound_chunk = -1;         // the token input's shape now bound ([1, bound_chunk]), -1: none
  const int64_t* bound_tokens = nullptr;
  size_t bound_positions = 0;       // positions bound ([bound_positions]) for the per-token signature
  int64_t single_token = 0;         // a one-token call's id: one fixed address, bound once for decoding
  uint64_t generation_id = 0;       // which Generation may step: a newer start(), feed() or reset() ends the old
  std::vector<float> converted;     // logits of a half / bfloat16 program, as float
  std::mt19937_64 rng;
  std::vector<std::pair<float, int64_t>> ranked;  // top-p scratch

  Impl(const Program& p, std::string_view name) : program(p), where("method '" + std::string(name) + "'") {
    if (!program.has_method(name)) {
      throw Error(ErrorKind::InvalidArgument, "the program has no " + where + " (its methods: " + method_list() + ")");
    }
    method = program.load_method(name);
    const MethodMeta& m = method->meta();
    auto refuse = [&](const std::string& why) {
      throw Error(ErrorKind::InvalidArgument,
                  where + " is not a language model's step: " + why +
                      " (expected token ids int64 [1, n], with a KV cache a start position int64 [1] or cache "
                      "positions int64 [n], returning logits [1, vocab] or [1, n, vocab])");
    };
    if (m.inputs.empty() || m.inputs.size() > 2) refuse("it takes " + std::to_string(m.inputs.size()) + " inputs");
    if (!is_int64_tensor(m.inputs[0], 2) || m.inputs[0].tensor.sizes[0] != 1) refuse("input 0 is not int64 [1, n]");
    if (m.outputs.size() != 1 || m.outputs[0].tag != Tag::Tensor) refuse("it does not return one tensor");
    const TensorInfo& out = m.outputs[0].tensor;
    if (out.sizes.size() < 2 || out.sizes.size() > 3 ||
        (out.dtype != ScalarType::Float && out.dtype != ScalarType::Half && out.dtype != ScalarType::BFloat16)) {
      refuse("its output is not float logits of rank 2 or 3");
    }
    const TensorInfo& tokens = m.inputs[0].tensor;
    dynamic_tokens = tokens.dynamism != ShapeDynamism::Static;
    chunk_limit = tokens.sizes[1];
    tokens_planned = tokens.memory_planned;
    if (chunk_limit < 1) refuse("its token input holds no token");
    if (!dynamic_tokens && chunk_limit != 1) {
      refuse("its token input takes exactly " + std::to_string(chunk_limit) +
             " tokens a call (the generator needs a dynamic token dimension, or one token a call)");
    }
    if (m.inputs.size() == 2) {
      if (!is_int64_tensor(m.inputs[1], 1)) refuse("input 1 is not an int64 vector of positions");
      const TensorInfo& pos = m.inputs[1].tensor;
      positions_planned = pos.memory_planned;
      if (pos.dynamism == ShapeDynamism::Static && pos.sizes[0] == 1 && chunk_limit > 1) {
        positions = Positions::Start;
      } else if (pos.sizes[0] == chunk_limit) {
        positions = chunk_limit == 1 ? Positions::Start : Positions::PerToken;
      } else {
        refuse("input 1 has " + std::to_string(pos.sizes[0]) + " positions for " + std::to_string(chunk_limit) + " tokens");
      }
    }
    read_metadata();
    context.reserve(static_cast<size_t>(meta.max_context_len));
    call_positions.assign(static_cast<size_t>(chunk_limit), 0);
    if (positions == Positions::Start) bind_positions(1);
  }

  std::string method_list() const {
    std::string names;
    for (const auto& n : program.method_names()) names += (names.empty() ? "" : ", ") + n;
    return names.empty() ? "none" : names;
  }

  std::vector<Value> constant(std::string_view name) {
    if (!program.has_method(name)) return {};
    auto m = program.load_method(name);
    if (m->num_inputs() != 0) return {};
    return m->execute({});
  }

  void read_metadata() {
    meta.use_kv_cache = positions != Positions::None;
    if (auto v = constant("use_kv_cache"); !v.empty() && as_int(v[0])) meta.use_kv_cache = *as_int(v[0]) != 0;
    if (meta.use_kv_cache != (positions != Positions::None)) {
      throw Error(ErrorKind::InvalidArgument,
                  where + (meta.use_kv_cache ? " takes no position input, but use_kv_cache says the program has a cache"
                                             : " takes positions, but use_kv_cache says the program has no cache"));
    }
    // Without a max_seq_len method: ExecuTorch's dynamic export bounds the tokens at max_seq_len - 1.
    meta.max_seq_len = chunk_limit + (dynamic_tokens && meta.use_kv_cache ? 1 : 0);
    if (auto v = constant("get_max_seq_len"); !v.empty() && as_int(v[0])) meta.max_seq_len = *as_int(v[0]);
    meta.max_context_len = meta.max_seq_len;
    if (auto v = constant("get_max_context_len"); !v.empty() && as_int(v[0])) meta.max_context_len = *as_int(v[0]);
    if (!meta.use_kv_cache) meta.max_context_len = std::min(meta.max_context_len, chunk_limit);
    if (auto v = constant("get_bos_id"); !v.empty() && as_int(v[0])) meta.bos_id = *as_int(v[0]);
    for (const char* name : {"get_eos_ids", "get_eos_id"}) {
      for (const Value& v : constant(name)) {
        if (auto id = as_int(v)) meta.eos_ids.push_back(*id);
      }
      if (!meta.eos_ids.empty()) break;
    }
    if (auto v = constant("get_vocab_size"); !v.empty() && as_int(v[0])) meta.vocab_size = *as_int(v[0]);
    if (meta.max_context_len < 1) {
      throw Error(ErrorKind::InvalidArgument, "the program's context holds " + std::to_string(meta.max_context_len) + " tokens");
    }
  }

  void bind_positions(int64_t count) {
    method->set_input(1, TensorRef{ScalarType::Long, {count}, {}, call_positions.data()});
  }

  /// One forward call on context[begin, begin + n).
  void call(size_t begin, int64_t n) {
    // A single token goes through one fixed int64, so that decoding binds the token input once.
    const int64_t* ids = context.data() + begin;
    if (n == 1 && !tokens_planned) {
      single_token = *ids;
      ids = &single_token;
    }
    if (n != bound_chunk || ids != bound_tokens || tokens_planned) {
      method->set_input(0, TensorRef{ScalarType::Long, {1, n}, {}, ids});
      bound_chunk = n;
      bound_tokens = ids;
    }
    if (positions == Positions::Start) {
      call_positions[0] = static_cast<int64_t>(begin);
      if (positions_planned) bind_positions(1);
    } else if (positions == Positions::PerToken) {
      std::iota(call_positions.begin(), call_positions.begin() + n, static_cast<int64_t>(begin));
      if (positions_planned || n != static_cast<int64_t>(bound_positions)) {
        bind_positions(n);
        bound_positions = static_cast<size_t>(n);
      }
    }
    method->run();
  }

  std::span<const float> logits(int64_t n) {
    const Value out = method->output(0);
    const auto& t = std::get<TensorRef>(out);
    const int64_t vocab = t.sizes.back();
    // [1, n, vocab] holds every token's logits (the last one's are the next token's); [1, vocab] the last's.
    const int64_t rows = t.sizes.size() == 3 ? t.sizes[1] : t.sizes[0];
    if (rows < 1 || (t.sizes.size() == 3 && rows != n)) {
      throw Error(ErrorKind::ExecutionError, where + " returned logits of shape " + shape_string(t.sizes) + " for " +
                                                 std::to_string(n) + " tokens");
    }
    const size_t offset = static_cast<size_t>((rows - 1) * vocab);
    if (t.dtype == ScalarType::Float) return {static_cast<const float*>(t.data) + offset, static_cast<size_t>(vocab)};
    converted.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      converted[static_cast<size_t>(i)] =
          t.dtype == ScalarType::Half ? static_cast<float>(static_cast<const Half*>(t.data)[offset + static_cast<size_t>(i)])
                                      : static_cast<float>(static_cast<const BFloat16*>(t.data)[offset + static_cast<size_t>(i)]);
    }
    return converted;
  }

  static std::string shape_string(const std::vector<int64_t>& sizes) {
    std::string s = "[";
    for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
    return s + "]";
  }

  std::span<const float> feed(std::span<const int64_t> tokens) {
    if (tokens.empty()) throw Error(ErrorKind::InvalidArgument, "no tokens to feed " + where);
    const size_t total = context.size() + tokens.size();
    if (static_cast<int64_t>(total) > meta.max_context_len) {
      throw Error(ErrorKind::InvalidArgument,
                  std::to_string(tokens.size()) + " tokens after the " + std::to_string(context.size()) +
                      " in the context make " + std::to_string(total) + ", above the program's context of " +
                      std::to_string(meta.max_context_len) + " tokens (" + where + ")");
    }
    if (meta.vocab_size) {
      for (int64_t id : tokens) {
        if (id < 0 || id >= *meta.vocab_size) {
          throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(id) + " is outside the program's vocabulary of " +
                                                      std::to_string(*meta.vocab_size) + " (" + where + ")");
        }
      }
    }
    // context's storage never moves (reserved to the context's size), so a bound token input stays valid.
    const size_t first = context.size();
    context.insert(context.end(), tokens.begin(), tokens.end());
    if (!meta.use_kv_cache) {
      call(0, static_cast<int64_t>(context.size()));
      return logits(static_cast<int64_t>(context.size()));
    }
    int64_t n = 0;
    for (size_t begin = first; begin < context.size(); begin += static_cast<size_t>(n)) {
      n = std::min<int64_t>(chunk_limit, static_cast<int64_t>(context.size() - begin));
      call(begin, n);
    }
    return logits(n);
  }

  int64_t sample(std::span<const float> l, const GenerationOptions& o) {
    if (l.empty()) throw Error(ErrorKind::ExecutionError, where + " returned no logits");
    // Greedy: the first of equal maxima, as torch.argmax.
    const auto best = static_cast<int64_t>(std::max_element(l.begin(), l.end()) - l.begin());
    if (o.temperature == 0) return best;
    const float top = l[static_cast<size_t>(best)];
    ranked.resize(l.size());
    double mass = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      const float p = std::exp((l[i] - top) / static_cast<float>(o.temperature));
      ranked[i] = {p, static_cast<int64_t>(i)};
      mass += p;
    }
    size_t keep = ranked.size();
    if (o.top_p < 1) {
      // The most probable first (ties by id: a total order, so the kept prefix is what a full sort gives).
      // The nucleus is usually a few dozen of a vocabulary's tens of thousands: only a growing prefix is
      // sorted, until it holds the nucleus.
      auto before = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
      double kept = 0;
      for (size_t sorted = std::min<size_t>(64, ranked.size());; sorted = std::min(ranked.size(), sorted * 8)) {
        std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(sorted), ranked.end(), before);
        kept = 0;
        for (keep = 0; keep < sorted;) {
          kept += ranked[keep++].first;
          if (kept >= o.top_p * mass) break;
        }
        if (kept >= o.top_p * mass || sorted == ranked.size()) break;
      }
      mass = kept;
    }
    const double draw = std::uniform_real_distribution<double>(0.0, mass)(rng);
    double acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      acc += ranked[i].first;
      if (draw < acc) return ranked[i].second;
    }
    return ranked[keep - 1].second;
  }

  void reset() {
    context.clear();
    bound_chunk = -1;
    bound_tokens = nullptr;
    ++generation_id;  // ends a Generation in progress
  }

  static std::vector<int64_t> with_bos(std::vector<int64_t> ids, bool add, std::optional<int64_t> bos) {
    if (add && bos) ids.insert(ids.begin(), *bos);
    return ids;
  }

};

struct Generation::State {
  Generator::Impl* gen = nullptr;
  uint64_t id = 0;
  GenerationOptions options;
  std::vector<int64_t> eos;
  std::optional<StreamDecoder> decoder;  // with a tokenizer
  size_t longest_stop = 0;
  std::span<const float> logits;  // the next token's, from the last feed
  Clock::time_point start, decode_start;
  bool done = false;
  GenerationResult result;

  void finish(StopReason why) {
    done = true;
    result.stop = why;
    result.stats.generated_tokens = static_cast<int64_t>(result.ids.size());
    if (!result.ids.empty()) result.stats.decode_seconds = seconds_since(decode_start);
    result.stats.peak_rss_bytes = peak_rss_bytes();
  }
};

Generation::Generation(std::unique_ptr<State> state) : state_(std::move(state)) {}
Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;
Generation& Generation::operator=(Generation&&) noexcept = default;
bool Generation::done() const { return state_->done; }
const GenerationResult& Generation::result() const { return state_->result; }

void Generation::stop() {
  if (!state_->done) state_->finish(StopReason::Callback);
}

std::optional<Generation::Step> Generation::next() {
  State& g = *state_;
  if (g.done) return std::nullopt;
  Generator::Impl& gen = *g.gen;
  if (gen.generation_id != g.id) {
    throw Error(ErrorKind::InvalidArgument, "this generation was ended by a newer start(), feed() or reset() of its generator");
  }
  if (!g.result.ids.empty()) {
    const int64_t last = g.result.ids.back();
    g.logits = gen.feed(std::span<const int64_t>(&last, 1));  // Impl::feed: ends no generation
  }
  const int64_t token = gen.sample(g.logits, g.options);
  if (g.result.ids.empty()) {
    g.result.stats.first_token_seconds = seconds_since(g.start);
    g.decode_start = Clock::now();
  }
  g.result.ids.push_back(token);
  Step step{token, {}};
  if (std::find(g.eos.begin(), g.eos.end(), token) != g.eos.end()) {
    g.finish(StopReason::Eos);
  } else if (g.decoder) {
    step.text = g.decoder->step(token);
    // A stop string may end in this piece and start in earlier text: search the tail that could hold it.
    std::string& text = g.result.text;
    const size_t from = text.size() > g.longest_stop ? text.size() - g.longest_stop : 0;
    text += step.text;
    for (const auto& s : g.options.stop_strings) {
      const size_t at = text.find(s, from);
      if (at == std::string::npos) continue;
      const size_t keep = at + s.size();  // > from: the match ends inside this piece
      step.text.resize(step.text.size() - std::min(step.text.size(), text.size() - keep));
      text.resize(keep);
      g.finish(StopReason::StopString);
      return step;
    }
  }
  if (!g.done && g.options.max_new_tokens >= 0 && static_cast<int64_t>(g.result.ids.size()) >= g.options.max_new_tokens) {
    g.finish(StopReason::MaxNewTokens);
  }
  if (!g.done && static_cast<int64_t>(gen.context.size()) >= gen.meta.max_context_len) g.finish(StopReason::ContextFull);
  if (g.done && g.decoder) {
    const std::string rest = g.decoder->flush();
    step.text += rest;
    g.result.text += rest;
  }
  return step;
}

namespace {

void check_options(const GenerationOptions& o) {
  if (o.max_new_tokens < -1) throw Error(ErrorKind::InvalidArgument, "max_new_tokens must be >= -1, got " + std::to_string(o.max_new_tokens));
  if (!(o.temperature >= 0) || !(o.top_p > 0 && o.top_p <= 1)) {
    throw Error(ErrorKind::InvalidArgument, "temperature must be >= 0 and top_p in (0, 1]; got temperature " +
                                                std::to_string(o.temperature) + ", top_p " + std::to_string(o.top_p));
  }
  for (const auto& s : o.stop_strings) {
    if (s.empty()) throw Error(ErrorKind::InvalidArgument, "a stop string is empty");
  }
}

}  // namespace

Generator::Generator(const Program& program, std::string_view method) : impl_(std::make_unique<Impl>(program, method)) {}
Generator::~Generator() = default;
Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;

const LlmMetadata& Generator::metadata() const { return impl_->meta; }
std::span<const float> Generator::feed(std::span<const int64_t> tokens) {
  ++impl_->generation_id;
  return impl_->feed(tokens);
}
int64_t Generator::position() const { return static_cast<int64_t>(impl_->context.size()); }
void Generator::reset() { impl_->reset(); }
int64_t Generator::sample(std::span<const float> logits, const GenerationOptions& options) {
  check_options(options);
  impl_->rng.seed(options.seed);
  return impl_->sample(logits, options);
}

Generation Generator::start(std::span<const int64_t> prompt_ids, const GenerationOptions& options) {
  if (!options.stop_strings.empty()) {
    throw Error(ErrorKind::InvalidArgument, "stop strings need text: start the generation from a prompt with a tokenizer");
  }
  auto state = std::make_unique<Generation::State>();
  state->eos = impl_->meta.eos_ids;
  state->result.prompt_ids = Impl::with_bos({prompt_ids.begin(), prompt_ids.end()}, options.add_bos, impl_->meta.bos_id);
  return begin(std::move(state), options);
}

Generation Generator::start(const Tokenizer& tokenizer, std::string_view prompt, const GenerationOptions& options) {
  auto state = std::make_unique<Generation::State>();
  state->eos = impl_->meta.eos_ids.empty() ? tokenizer.eos_ids() : impl_->meta.eos_ids;
  const std::optional<int64_t> bos = impl_->meta.bos_id ? impl_->meta.bos_id : tokenizer.bos_id();
  state->result.prompt_ids = Impl::with_bos(tokenizer.encode(prompt, false), options.add_bos, bos);
  state->decoder.emplace(tokenizer, /*skip_special_tokens=*/true);
  for (const auto& s : options.stop_strings) state->longest_stop = std::max(state->longest_stop, s.size());
  return begin(std::move(state), options);
}

Generation Generator::begin(std::unique_ptr<Generation::State> state, const GenerationOptions& options) {
  check_options(options);
  Generation::State& g = *state;
  if (g.result.prompt_ids.empty()) throw Error(ErrorKind::InvalidArgument, "the prompt has no tokens (and no BOS is added)");
  g.gen = impl_.get();
  g.options = options;
  g.start = Clock::now();
  impl_->reset();
  impl_->rng.seed(options.seed);
  g.logits = impl_->feed(g.result.prompt_ids);
  g.id = impl_->generation_id;
  g.result.stats.prompt_tokens = static_cast<int64_t>(g.result.prompt_ids.size());
  g.result.stats.prefill_seconds = seconds_since(g.start);
  return Generation(std::move(state));
}

GenerationResult Generator::generate(std::span<const int64_t> prompt_ids, const GenerationOptions& options,
                                     const TokenCallback& on_token) {
  Generation g = start(prompt_ids, options);
  while (auto step = g.next()) {
    if (on_token && !on_token(step->token)) g.stop();
  }
  return g.result();
}

GenerationResult Generator::generate(const Tokenizer& tokenizer, std::string_view prompt,
                                     const GenerationOptions& options, const TextCallback& on_text) {
  Generation g = start(tokenizer, prompt, options);
  while (auto step = g.next()) {
    if (on_text && !on_text(step->text, step->token)) g.stop();
  }
  return g.result();
}

}  // namespace etnp
