// Whether a method loads here (Program::load_verdict, `etnp inspect`) and the checks load_method makes with the
// same lookups, so that "runs here" means exactly "loads here".
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/backend.h"
#include "etnp/named_data.h"
#include "etnp/program.h"
#include "format/pte_file.h"

namespace etnp::runtime {

/// What `plan` needs that this runtime or the given data lack: backends of its delegates, operators its
/// instructions call (in operator-table order) and tensors stored in external data, looked up in
/// `external_data` (the caller's .ptd files; null when none), as the method's load looks them up.
std::vector<LoadProblem> dependency_problems(const format::fb::ExecutionPlan& plan, const NamedDataMap* external_data);

/// Every reason each delegate's backend gives for rejecting its payload (Backend::supports), asked with the
/// context init() gets. Delegates whose backend is missing are dependency problems and skipped here.
std::vector<LoadProblem> payload_problems(const format::PteFile& file, const format::fb::ExecutionPlan& plan,
                                          std::string_view method, const NamedDataMap* delegate_data,
                                          const LoadOptions& options);

/// Throws what load_method reports for dependency problems, before it builds anything: BackendNotAvailable
/// when a backend is missing (listing every problem: the official runtime initializes delegates before it
/// resolves operators), else ProgramLoadError for external data, else OperatorNotFound.
void throw_dependency_problems(const std::vector<LoadProblem>& problems, const std::string& method);

/// load_method's init() of a delegate, asking supports() first so that a payload the verdict rejects never
/// loads: a rejected payload gets the error init() throws for it (with init()'s kind, e.g. InvalidArgument for
/// a bad load option), or ProgramLoadError listing supports()' reasons should init() take it after all.
std::unique_ptr<DelegateHandle> init_delegate(Backend& backend, const BackendInitContext& ctx,
                                              std::span<const uint8_t> payload,
                                              std::span<const CompileSpec> compile_specs);

/// The context init() and supports() get for delegate `index` of `method`: the data delegates see (the
/// caller's .ptd files, then the program's named data) and the load options given for the backend.
BackendInitContext delegate_init_context(std::string_view method, int index, std::string_view backend_id,
                                         const NamedDataMap* delegate_data, const LoadOptions& options);
/// The compile specs of a delegate entry, viewing the file's bytes.
std::vector<CompileSpec> delegate_compile_specs(const format::fb::BackendDelegate& delegate);

}  // namespace etnp::runtime
