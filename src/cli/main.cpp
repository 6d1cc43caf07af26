// `etnp`: inspect, run and benchmark ExecuTorch programs.
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace {

struct Command {
  const char* name;
  const char* summary;  // the line of `etnp --help`
  const char* usage;  // "usage: ..." and what the command does; printed by `etnp NAME --help`
  int (*run)(etnp::cli::Args&);
};

int run_completion(etnp::cli::Args& args);

int run_version(etnp::cli::Args& args) {
  if (!args.positionals().empty()) etnp::cli::usage_error("version takes no arguments");
  std::printf("etnp %s (reads ExecuTorch programs with schema %s; verified against ExecuTorch %s)\n",
              etnp::version(), etnp::schema_identifier(), etnp::executorch_version());
  for (const std::string& name : etnp::registered_backend_names()) {
    const std::shared_ptr<etnp::Backend> backend = etnp::find_backend(name);
    const std::string library = backend->library();
    std::printf("backend %s: %s%s\n", name.c_str(), library.empty() ? "etnp's own code" : library.c_str(),
                backend->is_available() ? "" : " (not available on this machine)");
  }
  return 0;
}

constexpr Command kCommands[] = {
    {"inspect", "show what a .pte holds and whether it runs here", R"(usage: etnp inspect FILE [--data F.ptd]... [--limit NAME=N]... [--verbose] [--json]
  Show a summary of a .pte: its schema, each method with its inputs and outputs, operators, delegates and
  planned memory, and the verdict: "runs here" when every method loads, otherwise every reason (missing
  backends or operators, missing .ptd data, payload nodes a backend rejects).
  --data F.ptd    external data (.ptd) the program refers to; repeat for several files
  --limit NAME=N  a bound for files that are not trusted, repeatable (every command takes it; docs/security.md):
                  max_method_bytes and max_tensor_bytes (bytes; K, M, G or T for powers of 1024),
                  max_instructions_per_execute, max_methods, max_values, max_instructions; 0 for none
  --verbose       also the container's segments and each method's plan (instructions, buffers)
  --json          one JSON object on stdout with every field (the same with or without --verbose)
)", etnp::cli::run_inspect},
    {"run", "run a method once (or on a batch of input sets) and print or save its outputs",
     R"(usage: etnp run FILE [--data F.ptd]... [--limit NAME=N]... [--method NAME] [--input X]... [--batch DIR]
                [--fill ones|zeros|random] [--seed S] [--shape I=D0xD1x...]... [--output-dir DIR]
                [--print none|summary|all] [--top K] [--no-progress]
  Run a method once and print its outputs; with --batch, once per input set of DIR.
  --method NAME     the method to run (default: forward)
  --input X         the next input(s), in order: a .npy file for a tensor input, a literal (2.0, 3, true, text)
                    for a non-tensor input; a .npz archive (numpy.savez: arr_0, arr_1, ...) or a directory
                    of .npy files (sorted by name) gives several
  --batch DIR       run on each input set of DIR: every subfolder of .npy files and every .npz, sorted by
                    name; outputs go to OUT/<set>/output_<i>.npy with --output-dir OUT (the method loads once)
  --fill F          supply the inputs not given: ones, zeros or random (tensors at their full, upper-bound
                    shape; integer inputs that index a table stay in its range, see docs/cli.md)
  --seed S          seed of --fill random (default 0)
  --shape I=AxB     the shape of filled input I (a dynamic input below its upper bound)
  --output-dir DIR  write output i to DIR/output_<i>.npy (DIR and its parents are created; non-tensor
                    outputs as 0-d arrays, strings as 0-d unicode arrays)
  --print P         none, summary (default: dtype, shape, min/max/mean) or all (every value)
  --top K           print the K largest entries (index: value) of each float32 output, e.g. class scores
  --no-progress     no progress bar on stderr for --batch (drawn only when stderr is a terminal)
)", etnp::cli::run_run},
    {"check", "run a bundled program's test cases, or a .pte on inputs, and compare the outputs",
     R"(usage: etnp check FILE.pte|FILE.bpte [--data F.ptd]... [--limit NAME=N]... [--method NAME] [--input X]... [--expect OUT]...
                  [--atol A] [--rtol R]
  Compare outputs with expected ones: for a bundled program (.bpte) run each test case on its bundled inputs
  and compare with its expected outputs; for a .pte run the method on --input and compare output i with the
  i-th --expect. One line per output (ok, or how many elements differ, the largest absolute and relative
  difference and where), then a summary. Exit 0 when every output matches, 1 when one does not.
  --method NAME  only this method's test cases (.bpte); the method to run (.pte, default: forward)
  --input X      the next input(s), as for run (.npy, literal, .npz, directory of .npy)
  --expect OUT   the next expected output(s): a .npy file, a .npz archive or a directory of .npy files
  --atol A       absolute tolerance of floating outputs (default 1e-08)
  --rtol R       relative tolerance of floating outputs (default 1e-05): an element matches when
                 |got - expected| <= atol + rtol * |expected|; integer and bool outputs must be equal
)", etnp::cli::run_check},
    {"bench", "time a method", R"(usage: etnp bench FILE [--data F.ptd]... [--limit NAME=N]... [--method NAME] [--warmup N] [--iters N] [--threads N]
                  [--input X]... [--fill ones|zeros|random] [--seed S] [--shape I=D0xD1x...]...
                  [--json] [--profile] [--no-progress]
  Time a method: min/median/p90/p99/max, throughput, load time and memory.
  --method NAME   the method to time (default: forward)
  --warmup N      untimed runs first (default 5)
  --iters N       timed runs (default 50)
  --threads N     threads of the runtime's pool (default 0: one per CPU it may run on)
  --input X       the first inputs, in order (.npy, .npz, directories or literals, as for run)
  --fill F        the other inputs: random (default), ones or zeros; integer inputs that index a table stay
                  in its range (docs/cli.md)
  --seed S        seed of --fill random (default 0)
  --shape I=AxB   the shape of filled input I, e.g. --shape 0=1x3x224x224
  --json          one JSON object on stdout
  --profile       time per operator and delegate node
  --no-progress   no progress bar on stderr (drawn only when stderr is a terminal, for 20 or more --iters)
)", etnp::cli::run_bench},
    {"generate", "generate text with a language-model program", R"(usage: etnp generate FILE --tokenizer TOKENIZER --prompt TEXT [--max-new-tokens N]
                     [--temperature T] [--top-p P] [--seed S] [--stop TEXT]... [--no-bos] [--threads N]
                     [--method NAME] [--data F.ptd]... [--limit NAME=N]... [--json]
  Generate text with a language-model program (ExecuTorch's LLM export, optimum-executorch): the prompt
  (after the program's BOS) is prefilled, then tokens are decoded until EOS, N new tokens, a --stop text or
  a full context. The text streams to stdout; prefill and decode tokens/s, time to first token and peak
  memory go to stderr.
  --tokenizer F       tokenizer.json, a SentencePiece .model or a tiktoken file (docs/llm.md)
  --prompt TEXT       the prompt
  --max-new-tokens N  at most N new tokens (default -1: until EOS or a full context)
  --temperature T     0 (default) is greedy; above 0 samples, seeded, in [0, 100]
  --top-p P           nucleus sampling in (0, 1] (default 1)
  --seed S            seed of the sampler (default 0)
  --stop TEXT         stop when TEXT appears (repeatable)
  --no-bos            do not put the program's BOS before the prompt
  --threads N         threads of the runtime's pool (default 0: one per CPU it may run on)
  --json              one JSON object on stdout with the text, ids and figures
)", etnp::cli::run_generate},
    {"completion", "print a shell completion script (bash or zsh)", R"(usage: etnp completion bash|zsh
  Print a completion script for bash or zsh on stdout: the commands, each command's options, file names
  for FILE and the options that take files, directories for --output-dir and --batch. Install:
    bash: etnp completion bash > ~/.local/share/bash-completion/completions/etnp
    zsh:  etnp completion zsh > ~/.zfunc/_etnp   (with fpath+=(~/.zfunc) before compinit in ~/.zshrc)
)", run_completion},
    {"version", "print the version", R"(usage: etnp version
  Print the etnp version, the program schema it reads and the ExecuTorch release it is verified against, then
  each backend with the library it runs on (its release decides some results, e.g. how NaN goes through).
)", run_version},
};

std::string usage_head() {
  std::string text = "usage: etnp <command> [options]\n\ncommands:\n";
  for (const auto& c : kCommands) {
    text += "  " + std::string(c.name) + std::string(12 - std::strlen(c.name), ' ') + c.summary + "\n";
  }
  text += R"(
`etnp <command> --help` shows a command's options (docs/cli.md has them all).
On failure the exit status is 1 (2 for a bad argument) and the first line on stderr is
"error: <Kind>: <message>".
)";
  return text;
}

std::string command_list() {
  std::string names;
  for (const auto& c : kCommands) names += (names.empty() ? "" : ", ") + std::string(c.name);
  return names;
}

const Command* find_command(const std::string& name) {
  for (const auto& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// Options followed by a value: "--prompt -h" asks for no help.
constexpr const char* kValueOptions[] = {"--data",  "--limit", "--method", "--input",  "--fill",      "--seed",
                                         "--shape", "--output-dir", "--print", "--top",    "--warmup",
                                         "--iters", "--threads", "--tokenizer", "--prompt", "--max-new-tokens",
                                         "--temperature", "--top-p", "--stop", "--batch", "--expect",
                                         "--atol", "--rtol"};

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") != 0 && std::strcmp(argv[i], "--help") != 0) continue;
    bool is_value = false;
    for (const char* option : kValueOptions) is_value = is_value || std::strcmp(argv[i - 1], option) == 0;
    if (!is_value) return true;
  }
  return false;
}

int run_completion(etnp::cli::Args& args) {
  const auto shells = args.positionals();
  if (shells.size() != 1 || (shells[0] != "bash" && shells[0] != "zsh")) {
    etnp::cli::usage_error("completion takes one shell: bash or zsh");
  }
  std::vector<etnp::cli::CommandText> commands;
  for (const auto& c : kCommands) commands.push_back({c.name, c.summary, c.usage});
  std::vector<std::string> value_options(std::begin(kValueOptions), std::end(kValueOptions));
  std::fputs(etnp::cli::completion_script(shells[0], commands, value_options).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(usage_head().c_str(), stderr);
    return 2;
  }
  std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    const Command* c = argc > 2 ? find_command(argv[2]) : nullptr;
    std::fputs(c != nullptr ? c->usage : usage_head().c_str(), stdout);
    return 0;
  }
  if (command == "--version") command = "version";
  try {
    const Command* c = find_command(command);
    if (c == nullptr) etnp::cli::usage_error("unknown command '" + etnp::cli::shortened(command) + "' (commands: " + command_list() + "; try: etnp --help)");
    if (asks_for_help(argc, argv)) {
      std::fputs(c->usage, stdout);
      return 0;
    }
    etnp::cli::Args args(argc, argv, 2);
    return c->run(args);
  } catch (const etnp::Error& e) {
    std::fprintf(stderr, "error: %s: %s\n", etnp::error_kind_name(e.kind()), e.what());
    return e.kind() == etnp::ErrorKind::InvalidArgument ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: ExecutionError: out of memory\n");
    return 1;
  } catch (const std::exception&) {
    // A standard-library failure that no check above caught: its text ("stoll", "vector") means nothing to a user.
    std::fprintf(stderr, "error: ExecutionError: an unexpected internal failure (please report it with the command "
                         "line)\n");
    return 1;
  }
}
