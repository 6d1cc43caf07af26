// Shared pieces of the `etnp` subcommands.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/number_text.h"  // parse_int, parse_double: whole-string numbers
#include "etnp/etnp.h"
#include "format/npy.h"

namespace etnp::cli {

/// Arguments after the subcommand, with helpers for "--flag value" options.
class Args {
 public:
  Args(int argc, char** argv, int first);
  bool has_flag(const std::string& flag);                           // consumes it
  std::vector<std::string> values(const std::string& option);      // consumes every "--option V"
  std::string value(const std::string& option, const std::string& fallback);
  /// The value of an option given at most once (nullopt when absent; InvalidArgument when repeated).
  std::optional<std::string> single_value(const std::string& option);
  /// The option's value as a number in [min, max]; InvalidArgument naming the option otherwise.
  int64_t int_value(const std::string& option, int64_t fallback, int64_t min = 0,
                    int64_t max = std::numeric_limits<int64_t>::max());
  double double_value(const std::string& option, double fallback, double min, double max);
  /// Remaining positional arguments; fails on unknown options.
  std::vector<std::string> positionals();

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

[[noreturn]] void usage_error(const std::string& message);
/// `s` cut to at most `max` bytes (at a UTF-8 character boundary) with "..." appended when cut, for messages.
std::string shortened(const std::string& s, size_t max = 60);

/// What an integer input feeds (input_uses.cpp), which decides the values --fill random gives it.
struct InputUse {
  enum class Kind : uint8_t {
    Values,   ///< only arithmetic (or not an integer input): values in [-100, 100]
    Index,    ///< indices into tables (embeddings, index, gather, ...), directly or through views: [0, bound)
    Unknown,  ///< a delegate, a size or position, an index computed from it, or the program could not be read: 0
  };
  Kind kind = Kind::Values;
  int64_t bound = 0;  ///< For Index: the smallest size of the dimensions it indexes.
};
/// One entry per input of `method` in the program at `path`; empty when the program cannot be read.
std::vector<InputUse> integer_input_uses(const std::string& path, const std::string& method);

/// One input as given: a .npy path or a literal (`array` null), or an array read from a .npz archive.
struct InputSpec {
  std::string text;                           ///< The path or literal; "ARCHIVE.npz:NAME" for an archive's array.
  std::shared_ptr<format::NpyArray> array;
};
/// The arrays of the .npz file at `path` (format::parse_npz).
std::vector<format::NamedNpyArray> read_npz(const std::string& path);
/// Each "--input X" as the inputs it stands for: a .npz gives its arrays, a directory its .npy files sorted by
/// name (natural_less), anything else itself. `flag` names the option in messages.
std::vector<InputSpec> expand_input_specs(const std::vector<std::string>& specs, const std::string& flag = "--input");
/// Names in order, runs of digits compared as numbers ("in2" < "in10").
bool natural_less(const std::string& a, const std::string& b);
/// The names in `dir` (no hidden ones), sorted with natural_less; InvalidArgument when it cannot be read.
std::vector<std::string> directory_entries(const std::string& dir);

/// Inputs for a method: from .npy paths and literals, then --fill for the rest. The arrays keep the data.
struct PreparedInputs {
  std::vector<std::shared_ptr<format::NpyArray>> arrays;
  std::vector<Value> values;
};
/// `fill`: as fill_value returns it (empty: every tensor input must be given). `uses` (integer_input_uses) bounds
/// the integers of --fill random; an input it lacks is Unknown.
PreparedInputs prepare_inputs(const MethodMeta& meta, const std::vector<InputSpec>& specs, const std::string& fill,
                              uint64_t seed, const std::vector<std::vector<int64_t>>& shape_overrides = {},
                              const std::vector<InputUse>& uses = {});
/// "--fill": empty when absent (unless `fallback`), else ones, zeros or random (InvalidArgument otherwise).
std::string fill_value(Args& args, const std::string& fallback);
/// Every "--shape I=D0xD1x..." of the command line, one entry per input (empty: the input's own shape).
std::vector<std::vector<int64_t>> parse_shapes(const std::vector<std::string>& specs, size_t num_inputs);

LoadOptions load_options_from(Args& args);
/// Program::load_file, with a hint when the file is a .ptd data file rather than a program.
Program load_program(const std::string& path, const LoadOptions& options);
/// Creates `dir` and its missing parents; InvalidArgument saying why when it cannot.
void make_directories(const std::string& dir, const std::string& flag);

/// Writes output `index` to DIR/output_<index>.npy (row-major; scalars as 0-d arrays; None: a note, no file).
void write_output(const std::string& dir, size_t index, const Value& v);
/// A tensor's elements in row-major order, whatever its dim order.
std::vector<uint8_t> row_major_bytes(const TensorRef& t);

/// A progress bar on stderr ("\r[####    ] 3/10 label"), drawn only when `enabled` (callers pass
/// isatty(stderr) && !--no-progress). clear() erases it before other output; finish() ends its line.
class Progress {
 public:
  Progress(int64_t total, bool enabled) : total_(total), enabled_(enabled && total > 0) {}
  ~Progress() { finish(); }
  void update(int64_t done, const std::string& label = "");
  void clear();
  void finish();
  bool enabled() const { return enabled_; }

 private:
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
};
/// Whether to draw progress: stderr is a terminal and --no-progress was not given (consumes the flag).
bool progress_wanted(Args& args);

/// A command of `etnp` as main.cpp lists it: its name, its line in `etnp --help` and its usage text.
struct CommandText {
  const char* name;
  const char* summary;
  const char* usage;
};
/// The options of a usage text: the "--flag"s of its synopsis (the first lines) and of its option lines
/// ("  --flag ..."), then --help.
std::vector<std::string> command_flags(const std::string& usage);
/// The completion script for `shell` (bash or zsh); `value_options` are the options followed by a value.
std::string completion_script(const std::string& shell, const std::vector<CommandText>& commands,
                              const std::vector<std::string>& value_options);

int run_inspect(Args& args);
int run_check(Args& args);
int run_run(Args& args);
int run_bench(Args& args);
int run_generate(Args& args);


std::string value_summary(const Value& v);

}  // namespace etnp::cli
