#include <unistd.h>

#include "etnp/program.h"
#include "core/printable.h"
#include "format/bundled_program.h"
#include "runtime/registry.h"
#include "runtime/method_impl.h"
#include "runtime/probes.h"
#include "runtime/program_impl.h"
#include "runtime/verdict.h"

namespace etnp {

namespace fb = format::fb;

namespace {

TensorInfo tensor_info(const fb::Tensor& t) {
  TensorInfo info;
  info.dtype = static_cast<ScalarType>(t.scalar_type());
  info.sizes.assign(t.sizes()->begin(), t.sizes()->end());
  info.dim_order.assign(t.dim_order()->begin(), t.dim_order()->end());
  info.dynamism = static_cast<ShapeDynamism>(t.shape_dynamism());
  info.memory_planned = t.allocation_info() != nullptr || t.data_buffer_idx() != 0;
  info.nbytes = format::serialized_tensor_nbytes(t);
  if (const auto* extra = t.extra_tensor_info(); extra != nullptr && extra->fully_qualified_name() != nullptr) {
    info.name = extra->fully_qualified_name()->str();
  }
  return info;
}

ValueInfo value_info(const fb::EValue& v) {
  ValueInfo info;
  switch (v.val_type()) {
    case fb::KernelTypes::Null: info.tag = Tag::None; break;
    case fb::KernelTypes::Tensor: info.tag = Tag::Tensor; info.tensor = tensor_info(*v.val_as_Tensor()); break;
    case fb::KernelTypes::Int: info.tag = Tag::Int; info.value = v.val_as_Int()->int_val(); break;
    case fb::KernelTypes::Double: info.tag = Tag::Double; info.value = v.val_as_Double()->double_val(); break;
    case fb::KernelTypes::Bool: info.tag = Tag::Bool; info.value = v.val_as_Bool()->bool_val(); break;
    case fb::KernelTypes::String: info.tag = Tag::String; info.value = v.val_as_String()->string_val()->str(); break;
    case fb::KernelTypes::IntList: info.tag = Tag::ListInt; break;
    case fb::KernelTypes::DoubleList: info.tag = Tag::ListDouble; break;
    case fb::KernelTypes::BoolList: info.tag = Tag::ListBool; break;
    case fb::KernelTypes::TensorList: info.tag = Tag::ListTensor; break;
    case fb::KernelTypes::OptionalTensorList: info.tag = Tag::ListOptionalTensor; break;
    default: break;
  }
  return info;
}

std::string composed_name(const fb::Operator& op) {
  std::string name = op.name()->str();
  if (op.overload() != nullptr && op.overload()->size() > 0) name += "." + op.overload()->str();
  return name;
}

}  // namespace

std::string runtime::operator_name(const fb::Operator& op) { return composed_name(op); }

bool runtime::is_view_operator(const fb::Operator& op) {
  return op.name() != nullptr && op.name()->string_view() == "executorch_prim::et_view";
}

size_t Program::Impl::plan_index(std::string_view name) const {
  if (auto i = file->find_plan(name)) return *i;
  std::string names;
  for (size_t i = 0; i < file->num_plans(); ++i) {
    const auto* n = file->plan(i).name();  // unchecked under Verification::Minimal
    names += (names.empty() ? "" : ", ") + (n == nullptr ? std::string("(unnamed)") : quoted_name(n->string_view()));
  }
  throw Error(ErrorKind::InvalidArgument,
              "no method named " + quoted_name(name) + "; the program has " + (names.empty() ? "none" : names));
}

MethodMeta Program::Impl::meta(size_t index) const {
  const fb::ExecutionPlan& plan = file->plan(index);
  if (verified != Verification::InternalConsistency) file->validate_plan(plan);
  MethodMeta m;
  m.name = plan.name()->str();
  const auto* values = plan.values();
  m.num_values = values->size();
  for (int32_t i : *plan.inputs()) m.inputs.push_back(value_info(*values->Get(i)));
  for (int32_t i : *plan.outputs()) m.outputs.push_back(value_info(*values->Get(i)));
  for (const auto* v : *values) {
    const auto* t = v->val_as_Tensor();
    if (t == nullptr || t->extra_tensor_info() == nullptr || t->extra_tensor_info()->fully_qualified_name() == nullptr) continue;
    m.attributes.push_back(tensor_info(*t));
  }
  if (const auto* sizes = plan.non_const_buffer_sizes(); sizes != nullptr) {
    for (size_t i = 1; i < sizes->size(); ++i) m.planned_buffer_sizes.push_back(sizes->Get(i));
  }
  if (const auto* ds = plan.delegates()) {
    for (const auto* d : *ds) m.backends.push_back(d->id()->str());
  }
  if (const auto* ops = plan.operators()) {
    for (const auto* op : *ops) m.operators.push_back(composed_name(*op));
  }
  for (const auto* chain : *plan.chains()) m.num_instructions += chain->instructions()->size();
  return m;
}

namespace {

// A .bpte wraps a whole .pte (plus test cases): run the embedded program, kept alive with its container.
std::shared_ptr<format::ByteSource> unwrap_bundled(std::shared_ptr<format::ByteSource> source) {
  if (!format::BundledProgram::is_bundled_program(source->bytes())) return source;
  auto bundled = std::make_shared<format::BundledProgram>(format::BundledProgram::parse(source->bytes(), source));
  const auto program = bundled->program();
  return format::ByteSource::from_buffer(program, bundled, source->name() + " (bundled program)");
}

std::string method_label(const fb::ExecutionPlan& plan, size_t index) {
  return plan.name() == nullptr ? "method " + std::to_string(index) : "method " + quoted_name(plan.name()->str());
}

// ResourceLimits' counts, read from the verified flatbuffer before any method is built.
void refuse_beyond_counts(const format::PteFile& file, const ResourceLimits& limits) {
  auto over = [](uint64_t n, uint64_t bound) { return bound != 0 && n > bound; };
  auto refuse = [](const std::string& what, uint64_t n, const char* bound_name, uint64_t bound) {
    throw Error(ErrorKind::ProgramLoadError, what + " " + std::to_string(n) + ", more than the limit " + bound_name +
                                                 " = " + std::to_string(bound));
  };
  if (over(file.num_plans(), limits.max_methods)) {
    refuse("the program declares methods:", file.num_plans(), "max_methods", limits.max_methods);
  }
  for (size_t i = 0; i < file.num_plans(); ++i) {
    const fb::ExecutionPlan& plan = file.plan(i);
    const uint64_t values = plan.values() == nullptr ? 0 : plan.values()->size();
    if (over(values, limits.max_values)) {
      refuse(method_label(plan, i) + " declares values:", values, "max_values", limits.max_values);
    }
    uint64_t instructions = 0;
    if (plan.chains() != nullptr) {
      for (const auto* chain : *plan.chains()) {
        if (chain != nullptr && chain->instructions() != nullptr) instructions += chain->instructions()->size();
      }
    }
    if (over(instructions, limits.max_instructions)) {
      refuse(method_label(plan, i) + " declares instructions:", instructions, "max_instructions",
             limits.max_instructions);
    }
  }
}

}  // namespace

uint64_t ResourceLimits::default_max_method_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2;
}

namespace {

struct LimitField {
  std::string_view name;
  uint64_t ResourceLimits::*field;
};
constexpr LimitField kLimitFields[] = {
    {"max_method_bytes", &ResourceLimits::max_method_bytes},
    {"max_tensor_bytes", &ResourceLimits::max_tensor_bytes},
    {"max_instructions_per_execute", &ResourceLimits::max_instructions_per_execute},
    {"max_methods", &ResourceLimits::max_methods},
    {"max_values", &ResourceLimits::max_values},
    {"max_instructions", &ResourceLimits::max_instructions},
};
constexpr std::string_view kLimitNames[] = {kLimitFields[0].name, kLimitFields[1].name, kLimitFields[2].name,
                                            kLimitFields[3].name, kLimitFields[4].name, kLimitFields[5].name};
static_assert(std::size(kLimitNames) == std::size(kLimitFields));

}  // namespace

std::span<const std::string_view> ResourceLimits::names() { return kLimitNames; }

bool ResourceLimits::set(std::string_view name, uint64_t value) {
  for (const LimitField& f : kLimitFields) {
    if (f.name == name) {
      this->*f.field = value;
      return true;
    }
  }
  return false;
}

std::optional<uint64_t> ResourceLimits::get(std::string_view name) const {
  for (const LimitField& f : kLimitFields) {
    if (f.name == name) return this->*f.field;
  }
  return std::nullopt;
}

Program Program::Impl::open(std::shared_ptr<format::ByteSource> source, const LoadOptions& options) {
  ETNP_PROBE(program_load_begin, source->name().c_str());
  source = unwrap_bundled(std::move(source));
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->file = format::PteFile::parse(std::move(source), options.verification);
  impl->verified = options.verification;
  refuse_beyond_counts(*impl->file, options.limits);
  for (const auto& path : options.data_files) {
    impl->data_files.push_back(format::PtdFile::parse(format::ByteSource::map_file(path)));
  }
  for (size_t i = 0; i < options.data_buffers.size(); ++i) {
    impl->data_files.push_back(format::PtdFile::parse(
        format::ByteSource::from_buffer(options.data_buffers[i], nullptr, "<data buffer " + std::to_string(i) + ">")));
  }
  std::vector<const NamedDataMap*> external;
  for (const auto& f : impl->data_files) external.push_back(f.get());
  if (!external.empty()) impl->external_data = std::make_unique<format::MergedDataMap>(external);
  std::vector<const NamedDataMap*> for_delegates = external;
  if (impl->file->named_data() != nullptr) for_delegates.push_back(impl->file->named_data());
  if (!for_delegates.empty()) impl->delegate_data = std::make_unique<format::MergedDataMap>(for_delegates);
  ETNP_PROBE(program_load_end, impl->file->source().name().c_str(), impl->file->source().bytes().size(),
             impl->file->num_plans());
  return Program(std::move(impl));
}

Program::Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Program Program::load_file(const std::string& path, const LoadOptions& options) {
  return Impl::open(format::ByteSource::map_file(path), options);
}

Program Program::load_buffer(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive,
                             const LoadOptions& options) {
  return Impl::open(format::ByteSource::from_buffer(bytes, std::move(keep_alive), "<buffer>"), options);
}

Program Program::load_fd(int fd, const LoadOptions& options) {
  return Impl::open(format::ByteSource::map_fd(fd, "<fd " + std::to_string(fd) + ">"), options);
}

std::vector<std::string> Program::method_names() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < impl_->file->num_plans(); ++i) {
    const auto* n = impl_->file->plan(i).name();
    names.push_back(n == nullptr ? std::string() : n->str());
  }
  return names;
}

bool Program::has_method(std::string_view name) const { return impl_->file->find_plan(name).has_value(); }

MethodMeta Program::method_meta(std::string_view name) const { return impl_->meta(impl_->plan_index(name)); }

std::unique_ptr<Method> Program::load_method(std::string_view name) const {
  auto m = std::make_unique<Method::Impl>();
  m->program = impl_;
  const size_t index = impl_->plan_index(name);
  m->plan = &impl_->file->plan(index);
  m->meta = impl_->meta(index);
  ETNP_PROBE(method_load_begin, m->meta.name.c_str());
  m->profiling = impl_->options.enable_profiling;
  runtime::throw_dependency_problems(runtime::dependency_problems(*m->plan, impl_->external_data.get()), m->meta.name);
  m->load();
  ETNP_PROBE(method_load_end, m->meta.name.c_str());
  return std::unique_ptr<Method>(new Method(std::move(m)));
}

ProgramInfo Program::info() const { return impl_->file->info(); }

LoadVerdict Program::load_verdict(std::string_view method) const {
  const size_t index = impl_->plan_index(method);
  LoadVerdict verdict;
  verdict.method = impl_->meta(index).name;  // meta() validates the plan first, as load_method does
  const auto& plan = impl_->file->plan(index);
  verdict.problems = runtime::dependency_problems(plan, impl_->external_data.get());
  auto rejected = runtime::payload_problems(*impl_->file, plan, verdict.method, impl_->delegate_data.get(),
                                            impl_->options);
  verdict.problems.insert(verdict.problems.end(), rejected.begin(), rejected.end());
  return verdict;
}

std::string Program::input_spec(std::string_view method) const {
  const auto& plan = impl_->file->plan(impl_->plan_index(method));
  const auto* c = plan.container_meta_type();
  return c && c->encoded_inp_str() ? c->encoded_inp_str()->str() : std::string();
}

std::string Program::output_spec(std::string_view method) const {
  const auto& plan = impl_->file->plan(impl_->plan_index(method));
  const auto* c = plan.container_meta_type();
  return c && c->encoded_out_str() ? c->encoded_out_str()->str() : std::string();
}

int64_t TensorRef::numel() const { return view().numel(); }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

const char* version() { return ETNP_VERSION; }
const char* schema_identifier() { return "ET12"; }
const char* executorch_version() { return ETNP_EXECUTORCH_VERSION; }

}  // namespace etnp
