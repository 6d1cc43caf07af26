#include "etnp/error.h"

#include "core/printable.h"

namespace etnp {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
#define ETNP_ERROR_KIND_CASE(name) \
  case ErrorKind::name: return #name;
    ETNP_ERROR_KINDS(ETNP_ERROR_KIND_CASE)
#undef ETNP_ERROR_KIND_CASE
  }
  return "Error";
}

// Names in the context come from the file: printable() escapes and shortens them.
std::string format_error_message(const std::string& detail, const ErrorContext& c) {
  std::string where;
  auto add = [&](const std::string& part) {
    if (!where.empty()) where += ", ";
    where += part;
  };
  if (!c.method.empty()) add("method " + quoted_name(c.method));
  if (c.instruction >= 0) {
    std::string s = "instruction " + std::to_string(c.instruction);
    if (!c.op.empty()) s += " (" + printable(c.op) + ")";
    else if (!c.backend.empty()) s += " (delegate " + printable(c.backend) + ")";
    add(s);
  } else {
    if (!c.op.empty()) add("operator " + printable(c.op));
    if (!c.backend.empty()) add("backend " + printable(c.backend));
  }
  if (c.input_index >= 0) add("input " + std::to_string(c.input_index));
  return where.empty() ? detail : where + ": " + detail;
}

Error::Error(ErrorKind kind, std::string detail, ErrorContext context)
    : std::runtime_error(format_error_message(detail, context)),
      kind_(kind),
      detail_(std::move(detail)),
      context_(std::move(context)) {}

Error Error::with_context(const ErrorContext& outer) const {
  ErrorContext c = context_;
  if (c.method.empty()) c.method = outer.method;
  if (c.instruction < 0) c.instruction = outer.instruction;
  if (c.op.empty()) c.op = outer.op;
  if (c.backend.empty()) c.backend = outer.backend;
  if (c.input_index < 0) c.input_index = outer.input_index;
  return Error(kind_, detail_, std::move(c));
}

}  // namespace etnp
