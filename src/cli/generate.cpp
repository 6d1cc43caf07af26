// `etnp generate`: text from a language-model program and its tokenizer, streamed as it is made, with the
// speed figures users compare runtimes by (prefill and decode tokens/s, time to first token, peak memory).
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "cli/json_output.h"
#include "etnp/generator.h"
#include "etnp/threadpool.h"
#include "etnp/tokenizer.h"

namespace etnp::cli {

int run_generate(Args& args) {
  LoadOptions options = load_options_from(args);
  const std::string tokenizer_path = args.value("--tokenizer", "");
  const auto prompts = args.values("--prompt");
  GenerationOptions gen;
  gen.max_new_tokens = args.int_value("--max-new-tokens", -1, -1);
  gen.temperature = args.double_value("--temperature", 0.0, 0.0, 100.0);
  gen.top_p = args.double_value("--top-p", 1.0, 0.0, 1.0);
  gen.seed = static_cast<uint64_t>(args.int_value("--seed", 0));
  gen.stop_strings = args.values("--stop");
  gen.add_bos = !args.has_flag("--no-bos");
  const int64_t threads = args.int_value("--threads", 0, 0, 1024);
  const std::string method_name = args.value("--method", "forward");
  const bool json = args.has_flag("--json");
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("generate takes one .pte file");
  if (tokenizer_path.empty()) usage_error("generate needs --tokenizer FILE (tokenizer.json, tokenizer.model or a tiktoken file)");
  if (prompts.size() != 1) usage_error("generate needs one --prompt TEXT");
  if (gen.top_p == 0.0) usage_error("--top-p must be above 0 and at most 1, got 0");

  if (threads > 0) ThreadPool::global().set_num_threads(static_cast<size_t>(threads));
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path);
  const Program program = load_program(files[0], options);
  Generator generator(program, method_name);
  const GenerationResult result = generator.generate(tokenizer, prompts[0], gen, [&](std::string_view text, int64_t) {
    if (!json) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  const GenerationStats& s = result.stats;
  if (json) {
    Json out;
    out["text"] = result.text;
    out["prompt_ids"] = result.prompt_ids;
    out["ids"] = result.ids;
    out["stop"] = stop_reason_name(result.stop);
    out["prompt_tokens"] = s.prompt_tokens;
    out["generated_tokens"] = s.generated_tokens;
    out["prefill_tokens_per_s"] = s.prefill_tokens_per_second();
    out["decode_tokens_per_s"] = s.decode_tokens_per_second();
    out["time_to_first_token_ms"] = s.first_token_seconds * 1e3;
    out["peak_rss_mb"] = static_cast<double>(s.peak_rss_bytes) / (1 << 20);
    out["threads"] = ThreadPool::global().num_threads();
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("\n");
  std::fprintf(stderr,
               "prompt %lld tokens, generated %lld (stop: %s); prefill %.1f tokens/s, decode %.1f tokens/s, "
               "first token %.1f ms, peak memory %.1f MiB, %zu threads\n",
               static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens),
               stop_reason_name(result.stop), s.prefill_tokens_per_second(), s.decode_tokens_per_second(),
               s.first_token_seconds * 1e3, static_cast<double>(s.peak_rss_bytes) / (1 << 20),
               ThreadPool::global().num_threads());
  return 0;
}

}  // namespace etnp::cli
