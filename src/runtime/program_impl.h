// What etnp::Program holds (include/etnp/program.h): the verified file and the data maps its methods read.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/program.h"
#include "format/byte_source.h"
#include "format/ptd_file.h"
#include "format/pte_file.h"

namespace etnp {

struct Program::Impl {
  std::unique_ptr<format::PteFile> file;
  std::vector<std::unique_ptr<format::PtdFile>> data_files;
  /// The caller's .ptd files (null when none): where EXTERNAL tensors are looked up.
  std::unique_ptr<format::MergedDataMap> external_data;
  /// The caller's .ptd files, then the program's named data: what delegates see (null when neither).
  std::unique_ptr<format::MergedDataMap> delegate_data;
  LoadOptions options;
  Verification verified = Verification::Minimal;

  /// Parses and verifies the program in `source` (a .pte, or a .bpte wrapping one) and its data files.
  static Program open(std::shared_ptr<format::ByteSource> source, const LoadOptions& options);
  size_t plan_index(std::string_view name) const;  // throws InvalidArgument naming the methods
  MethodMeta meta(size_t plan_index) const;
};

namespace runtime {

/// "namespace::name.overload": the operator's key in the kernel registry.
std::string operator_name(const format::fb::Operator& op);

/// Whether an operator (by name, with or without its overload) is executorch_prim::et_view, whose output
/// aliases its input: it has no storage of its own until the view runs, and the kernel points it there.
bool is_view_operator(const format::fb::Operator& op);

}  // namespace runtime
}  // namespace etnp
