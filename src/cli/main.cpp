// `etnp`: inspect, run and benchmark ExecuTorch programs.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/cli.h"

namespace {

constexpr const char* kUsage = R"(usage: etnp <command> [options]

commands:
  inspect FILE [--data F.ptd]... [--json]
      Show the container, methods, operators, delegates and memory of a .pte, and whether it runs here:
      "runs here" when every method loads, otherwise every reason (missing backends, operators, .ptd data,
      payload nodes a backend rejects).
  run FILE [--data F.ptd]... [--method NAME] [--input PATH.npy | --input LITERAL]...
           [--fill ones|zeros|random] [--seed S] [--output-dir DIR] [--print none|summary|all] [--top K]
      Run a method. Inputs in order: a .npy file, or a literal (2.0, 3, true) for a non-tensor input.
      --fill supplies the inputs not given (tensors at their full, upper-bound shape).
      Each output is written to DIR/output_<i>.npy (non-tensor outputs as 0-d arrays).
      --top K prints the K largest entries (index: value) of each float32 output, e.g. class scores.
  bench FILE [--data F.ptd]... [--method NAME] [--warmup N] [--iters N] [--threads N]
             [--shape I=1x3x224x224]... [--input PATH.npy]... [--json] [--profile]
      Time a method: min/median/p90/p99/max, throughput, load time and peak memory. Inputs are random
      unless given (in order) with --input.
  generate FILE --tokenizer TOKENIZER --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-p P]
           [--seed S] [--stop TEXT]... [--no-bos] [--threads N] [--method NAME] [--data F.ptd]... [--json]
      Generate text with a language-model program (ExecuTorch's LLM export, optimum-executorch): the prompt
      (after the program's BOS) is prefilled, then tokens are decoded until EOS, N new tokens, a --stop text
      or a full context. Greedy unless --temperature > 0 (then seeded, with nucleus --top-p). The text streams
      to stdout; prefill and decode tokens/s, time to first token and peak memory go to stderr (--json: one
      object on stdout with the text, ids and figures). TOKENIZER: tokenizer.json, a SentencePiece .model or
      a tiktoken file (docs/llm.md).
  version
      Print the etnp version and the program schema it reads.

On failure the exit status is non-zero and the first line on stderr is "error: <Kind>: <message>".
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    etnp::cli::Args args(argc, argv, 2);
    if (command == "inspect") return etnp::cli::run_inspect(args);
    if (command == "run") return etnp::cli::run_run(args);
    if (command == "bench") return etnp::cli::run_bench(args);
    if (command == "generate") return etnp::cli::run_generate(args);
    if (command == "version" || command == "--version") {
      std::printf("etnp %s (reads ExecuTorch programs with schema %s; verified against ExecuTorch %s)\n",
                  etnp::version(), etnp::schema_identifier(), etnp::executorch_version());
      return 0;
    }
    etnp::cli::usage_error("unknown command '" + command + "' (try: etnp --help)");
  } catch (const etnp::Error& e) {
    std::fprintf(stderr, "error: %s: %s\n", etnp::error_kind_name(e.kind()), e.what());
    return e.kind() == etnp::ErrorKind::InvalidArgument ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: ExecutionError: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: ExecutionError: %s\n", e.what());
    return 1;
  }
}
