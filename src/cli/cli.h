// Shared pieces of the `etnp` subcommands.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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
/// Whole-string number parsing: false on anything else (trailing text, overflow, inf/nan).
bool parse_int(const std::string& s, int64_t* out);
bool parse_double(const std::string& s, double* out);

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

/// Inputs for a method: from .npy paths and literals, then --fill for the rest. The arrays keep the data.
struct PreparedInputs {
  std::vector<format::NpyArray> arrays;
  std::vector<Value> values;
};
/// `uses` (integer_input_uses) bounds the integers of --fill random; an input it lacks is Unknown.
PreparedInputs prepare_inputs(const MethodMeta& meta, const std::vector<std::string>& specs, const std::string& fill,
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

int run_inspect(Args& args);
int run_run(Args& args);
int run_bench(Args& args);
int run_generate(Args& args);


std::string value_summary(const Value& v);

}  // namespace etnp::cli
