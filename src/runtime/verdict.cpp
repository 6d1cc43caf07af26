#include "runtime/verdict.h"

#include <algorithm>

#include "core/printable.h"
#include "runtime/program_impl.h"  // operator_name
#include "runtime/registry.h"

namespace etnp {

namespace fb = format::fb;

const char* load_problem_kind_name(LoadProblem::Kind kind) {
  switch (kind) {
    case LoadProblem::Kind::MissingBackend: return "missing_backend";
    case LoadProblem::Kind::MissingOperator: return "missing_operator";
    case LoadProblem::Kind::ExternalData: return "external_data";
    case LoadProblem::Kind::UnsupportedPayload: return "unsupported_payload";
  }
  return "unknown";
}

namespace runtime {
namespace {

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string r;
  for (const auto& item : items) r += (r.empty() ? "" : separator) + item;
  return r;
}

// Names from the file, escaped for a message.
std::vector<std::string> printable_all(const std::vector<std::string>& items) {
  std::vector<std::string> r;
  for (const auto& item : items) r.push_back(printable(item));
  return r;
}

std::string available_backends() {
  std::vector<std::string> names;
  for (const auto& name : registered_backend_names()) {
    auto b = find_backend(name);
    if (b && b->is_available()) names.push_back(name);
  }
  return names.empty() ? "none" : joined(names, ", ");
}

bool backend_here(std::string_view id) {
  auto b = find_backend(id);
  return b && b->is_available();
}

void add_missing_backends(const fb::ExecutionPlan& plan, std::vector<LoadProblem>& problems) {
  const auto* delegates = plan.delegates();
  if (delegates == nullptr) return;
  std::vector<std::string> missing;
  for (const auto* d : *delegates) {
    const std::string id = d->id()->str();
    if (!backend_here(id) && std::find(missing.begin(), missing.end(), id) == missing.end()) missing.push_back(id);
  }
  if (missing.empty()) return;
  const std::string available = available_backends();
  for (const auto& id : missing) {
    problems.push_back({LoadProblem::Kind::MissingBackend, id,
                        "backend " + quoted_name(id) + " is not available in this runtime (available: " + available + ")"});
  }
}

// Only operators that instructions call count: load resolves those alone.
void add_missing_operators(const fb::ExecutionPlan& plan, std::vector<LoadProblem>& problems) {
  const auto* ops = plan.operators();
  if (ops == nullptr) return;
  std::vector<bool> called(ops->size(), false);
  for (const auto* chain : *plan.chains()) {
    for (const auto* instr : *chain->instructions()) {
      if (instr->instr_args_type() == fb::InstructionArguments::KernelCall) {
        called[instr->instr_args_as_KernelCall()->op_index()] = true;
      }
    }
  }
  const auto& registry = runtime::kernel_registry();
  std::vector<std::string> missing;
  for (size_t i = 0; i < ops->size(); ++i) {
    if (!called[i]) continue;
    std::string name = operator_name(*ops->Get(i));
    if (registry.find(name) == nullptr && std::find(missing.begin(), missing.end(), name) == missing.end()) {
      missing.push_back(std::move(name));
    }
  }
  for (const auto& name : missing) {
    problems.push_back({LoadProblem::Kind::MissingOperator, name,
                        "operator " + printable(name) + " is not available in this runtime"});
  }
}

// The lookups build_values makes for an EXTERNAL tensor: its key in the caller's .ptd files, the layout the
// file records, and enough bytes.
void add_external_data(const fb::ExecutionPlan& plan, const NamedDataMap* external, std::vector<LoadProblem>& problems) {
  for (const auto* v : *plan.values()) {
    if (v->val_type() != fb::KernelTypes::Tensor) continue;
    const auto* t = v->val_as_Tensor();
    const auto* extra = t->extra_tensor_info();
    if (extra == nullptr || extra->location() != fb::TensorDataLocation::EXTERNAL) continue;
    const std::string key = extra->fully_qualified_name()->str();
    auto problem = [&](std::string message) {
      problems.push_back({LoadProblem::Kind::ExternalData, key, std::move(message)});
    };
    if (external == nullptr) {
      problem("tensor " + quoted_name(key) + " is stored in external data, but no external data (.ptd) was provided; "
              "load the program with its .ptd file");
      continue;
    }
    const auto bytes = external->get(key);
    if (!bytes) {
      problem("tensor " + quoted_name(key) + " is not in the external data (" + external->describe() + ")");
      continue;
    }
    const auto dtype = static_cast<ScalarType>(t->scalar_type());
    const std::vector<int64_t> sizes(t->sizes()->begin(), t->sizes()->end());
    if (auto layout = external->layout(key)) {
      const bool same_order = layout->dim_order.empty() ||
                              std::equal(layout->dim_order.begin(), layout->dim_order.end(),
                                         t->dim_order()->begin(), t->dim_order()->end());
      if (layout->dtype != dtype || layout->sizes != sizes || !same_order) {
        problem("external tensor " + quoted_name(key) + " is " + std::string(scalar_type_name(layout->dtype)) +
                shape_string(layout->sizes) + " in " + external->describe() + ", the program expects " +
                std::string(scalar_type_name(dtype)) + shape_string(sizes));
        continue;
      }
    }
    const size_t nbytes = format::serialized_tensor_nbytes(*t);
    if (bytes->size() < nbytes) {
      problem("external tensor " + quoted_name(key) + " holds " + std::to_string(bytes->size()) + " bytes, the program needs " +
              std::to_string(nbytes));
    }
  }
}

std::vector<std::string> names_of(const std::vector<LoadProblem>& problems, LoadProblem::Kind kind) {
  std::vector<std::string> names;
  for (const auto& p : problems) {
    if (p.kind == kind) names.push_back(p.name);
  }
  return names;
}

std::vector<std::string> messages_of(const std::vector<LoadProblem>& problems, LoadProblem::Kind kind) {
  std::vector<std::string> messages;
  for (const auto& p : problems) {
    if (p.kind == kind) messages.push_back(p.message);
  }
  return messages;
}

}  // namespace

std::vector<LoadProblem> dependency_problems(const fb::ExecutionPlan& plan, const NamedDataMap* external_data) {
  std::vector<LoadProblem> problems;
  add_missing_backends(plan, problems);
  add_missing_operators(plan, problems);
  add_external_data(plan, external_data, problems);
  return problems;
}

std::vector<LoadProblem> payload_problems(const format::PteFile& file, const fb::ExecutionPlan& plan,
                                          std::string_view method, const NamedDataMap* delegate_data,
                                          const LoadOptions& options) {
  std::vector<LoadProblem> problems;
  const auto* delegates = plan.delegates();
  if (delegates == nullptr) return problems;
  for (size_t i = 0; i < delegates->size(); ++i) {
    const auto* d = delegates->Get(i);
    const std::string id = d->id()->str();
    auto backend = find_backend(id);
    if (!backend || !backend->is_available()) continue;
    const std::string where = "delegate " + std::to_string(i) + " (" + id + "): ";
    const auto specs = delegate_compile_specs(*d);
    try {
      const BackendInitContext ctx = delegate_init_context(method, static_cast<int>(i), id, delegate_data, options);
      const SupportVerdict verdict = backend->supports(ctx, file.delegate_payload(*d), specs);
      for (const auto& reason : verdict.reasons) {
        problems.push_back({LoadProblem::Kind::UnsupportedPayload, id, where + reason});
      }
    } catch (const Error& e) {
      // supports() reports rather than throws; a backend that throws anyway rejects the payload all the same.
      problems.push_back({LoadProblem::Kind::UnsupportedPayload, id, where + e.detail()});
    }
  }
  return problems;
}

void throw_dependency_problems(const std::vector<LoadProblem>& problems, const std::string& method) {
  if (problems.empty()) return;
  ErrorContext where;
  where.method = method;
  const auto backends = names_of(problems, LoadProblem::Kind::MissingBackend);
  const auto operators = names_of(problems, LoadProblem::Kind::MissingOperator);
  const auto data = messages_of(problems, LoadProblem::Kind::ExternalData);
  const std::string operators_text =
      std::to_string(operators.size()) + " operator" + (operators.size() == 1 ? " is" : "s are") +
      " not available in this runtime: " + joined(printable_all(operators), ", ");
  if (!operators.empty()) where.op = operators.front();
  if (!backends.empty()) {
    where.backend = backends.front();
    std::vector<std::string> names;
    for (const auto& b : backends) names.push_back(quoted_name(b));
    std::string detail = "the program delegates to backend" + std::string(backends.size() == 1 ? " " : "s ") +
                         joined(names, ", ") + (backends.size() == 1 ? ", which is" : ", which are") +
                         " not available in this runtime (available: " + available_backends() + ")";
    if (!operators.empty()) detail += "; " + operators_text;
    if (!data.empty()) detail += "; " + joined(data, "; ");
    throw Error(ErrorKind::BackendNotAvailable, detail, where);
  }
  if (!data.empty()) {
    where.op.clear();
    std::string detail = joined(data, "; ");
    if (!operators.empty()) detail += "; " + operators_text;
    throw Error(ErrorKind::ProgramLoadError, detail, where);
  }
  throw Error(ErrorKind::OperatorNotFound, operators_text, where);
}

std::unique_ptr<DelegateHandle> init_delegate(Backend& backend, const BackendInitContext& ctx,
                                              std::span<const uint8_t> payload,
                                              std::span<const CompileSpec> compile_specs) {
  // init() runs even on a rejected payload so that its own error kind (InvalidArgument for a bad option)
  // reaches the caller; a payload init() accepts but supports() rejects is a backend bug, refused here.
  const SupportVerdict verdict = backend.supports(ctx, payload, compile_specs);
  auto handle = backend.init(ctx, payload, compile_specs);
  if (!verdict.supported()) {
    throw Error(ErrorKind::ProgramLoadError,
                "the backend does not support this payload: " + joined(verdict.reasons, "; "));
  }
  return handle;
}

BackendInitContext delegate_init_context(std::string_view method, int index, std::string_view backend_id,
                                         const NamedDataMap* delegate_data, const LoadOptions& options) {
  BackendInitContext ctx;
  ctx.method_name = method;
  ctx.delegate_index = index;
  ctx.named_data = delegate_data;
  auto backend_options = options.backend_options.find(backend_id);
  if (backend_options != options.backend_options.end()) ctx.load_options = &backend_options->second;
  return ctx;
}

std::vector<CompileSpec> delegate_compile_specs(const fb::BackendDelegate& delegate) {
  std::vector<CompileSpec> specs;
  if (const auto* fs = delegate.compile_specs()) {
    for (const auto* s : *fs) {
      specs.push_back({s->key()->string_view(), s->value() ? std::span<const uint8_t>(s->value()->data(), s->value()->size())
                                                           : std::span<const uint8_t>()});
    }
  }
  return specs;
}

}  // namespace runtime
}  // namespace etnp
