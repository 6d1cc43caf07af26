// Errors raised by etnp. Every failure is an etnp::Error with a kind and the context it happened in.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace etnp {

/// Every kind of failure, X(Name): the one list that ErrorKind, error_kind_name() (the name is the
/// enumerator's) and the Python binding's exception classes (one per name) are expanded from.
#define ETNP_ERROR_KINDS(X)                                                                                    \
  X(ProgramLoadError)    /* The file (or its .ptd data) is not a valid program, or a payload is malformed. */  \
  X(BackendNotAvailable) /* The program delegates to a backend this build does not have. */                    \
  X(OperatorNotFound)    /* The program calls operators this build does not have. */                           \
  X(ExecutionError)      /* A kernel or delegate failed while running. */                                      \
  X(InvalidArgument)     /* The caller passed a bad input, method name or option. */

/// The category of a failure; the CLI prints it and the Python package maps it to an exception class.
enum class ErrorKind : uint8_t {
#define ETNP_ERROR_KIND_ENUMERATOR(name) name,
  ETNP_ERROR_KINDS(ETNP_ERROR_KIND_ENUMERATOR)
#undef ETNP_ERROR_KIND_ENUMERATOR
};

const char* error_kind_name(ErrorKind kind);

/// Where a failure happened. Fields that do not apply stay empty / -1.
struct ErrorContext {
  std::string method;       ///< Method name.
  int64_t instruction = -1; ///< Index of the instruction in the method's chain.
  std::string op;           ///< Operator name ("aten::add.out") or, for delegate calls, empty.
  std::string backend;      ///< Backend id for delegate failures ("XnnpackBackend").
  int64_t input_index = -1; ///< Method input that was rejected.
};

/// The one exception type etnp throws. what() is the full message, context included.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string detail, ErrorContext context = {});

  ErrorKind kind() const noexcept { return kind_; }
  /// The message without the context prefix.
  const std::string& detail() const noexcept { return detail_; }
  const ErrorContext& context() const noexcept { return context_; }

  /// Returns a copy with blank context fields filled from `outer` (inner context wins).
  Error with_context(const ErrorContext& outer) const;

 private:
  ErrorKind kind_;
  std::string detail_;
  ErrorContext context_;
};

/// Formats the message that what() returns: "method 'forward', instruction 3 (aten::add.out): detail".
std::string format_error_message(const std::string& detail, const ErrorContext& context);

}  // namespace etnp
