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
/// Whole-string number parsing: false on anything else (trailing text, overflow, inf/nan).
bool parse_int(const std::string& s, int64_t* out);
bool parse_double(const std::string& s, double* out);

/// Inputs for a method: from .npy paths and literals, then --fill for the rest. The arrays keep the data.
struct PreparedInputs {
  std::vector<format::NpyArray> arrays;
  std::vector<Value> values;
};
PreparedInputs prepare_inputs(const MethodMeta& meta, const std::vector<std::string>& specs, const std::string& fill,
                              uint64_t seed, const std::vector<std::vector<int64_t>>& shape_overrides = {});

LoadOptions load_options_from(Args& args);

int run_inspect(Args& args);
int run_run(Args& args);
int run_bench(Args& args);
int run_generate(Args& args);


std::string value_summary(const Value& v);

}  // namespace etnp::cli
