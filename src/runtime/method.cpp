// etnp::Method, the public face of Method::Impl (method_impl.h).
#include "etnp/program.h"
#include "runtime/method_impl.h"

namespace etnp {

Method::Method(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Method::~Method() = default;
const MethodMeta& Method::meta() const { return impl_->meta; }
const std::string& Method::name() const { return impl_->meta.name; }
size_t Method::num_inputs() const { return impl_->meta.inputs.size(); }
size_t Method::num_outputs() const { return impl_->meta.outputs.size(); }

std::vector<Value> Method::execute(std::span<const Value> inputs) {
  if (inputs.size() != impl_->meta.inputs.size()) {
    ErrorContext c;
    c.method = impl_->meta.name;
    throw Error(ErrorKind::InvalidArgument,
                "expected " + std::to_string(impl_->meta.inputs.size()) + " inputs, got " + std::to_string(inputs.size()), c);
  }
  for (size_t i = 0; i < inputs.size(); ++i) impl_->set_input(i, inputs[i]);
  impl_->run();
  std::vector<Value> outputs;
  outputs.reserve(impl_->meta.outputs.size());
  for (size_t i = 0; i < impl_->meta.outputs.size(); ++i) outputs.push_back(impl_->output(i));
  return outputs;
}

void Method::set_input(size_t index, const Value& value) { impl_->set_input(index, value); }
void Method::run() { impl_->run(); }
Value Method::output(size_t index) const { return impl_->output(index); }

void Method::set_output_buffer(size_t index, void* data, size_t nbytes) { impl_->set_output_buffer(index, data, nbytes); }

namespace {

// InvalidArgument unless `index` is below `count` (the method's inputs or outputs, `what`).
void check_index(size_t index, size_t count, const char* what, const ErrorContext& where) {
  if (index >= count) {
    throw Error(ErrorKind::InvalidArgument,
                "the method has " + std::to_string(count) + " " + what + "s, there is no " + what + " " +
                    std::to_string(index),
                where);
  }
}

}  // namespace

bool Method::writes_input(size_t index) const {
  check_index(index, impl_->written_inputs.size(), "input", impl_->context());
  return impl_->written_inputs[index];
}

const std::string& Method::output_buffer_refusal(size_t index) const {
  check_index(index, impl_->output_refusals.size(), "output", impl_->context());
  return impl_->output_refusals[index];
}

const std::vector<ProfileEvent>& Method::profile_events() const { return impl_->events; }
size_t Method::load_time_bytes() const { return impl_->load_time_bytes(); }
void Method::clear_profile_events() { impl_->events.clear(); }

}  // namespace etnp
