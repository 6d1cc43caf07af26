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

namespace {

// A Method is used by one thread at a time: a call made while another is running (on another thread) throws
// InvalidArgument instead of racing on the method's memory. One atomic exchange per call.
class InUse {
 public:
  InUse(std::atomic<bool>& flag, const std::string& method) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire)) {
      ErrorContext c;
      c.method = method;
      throw Error(ErrorKind::InvalidArgument,
                  "the method is already running on another thread: a Method is used by one thread at a time "
                  "(load one per thread, or take turns under a lock)",
                  c);
    }
  }
  ~InUse() { flag_.store(false, std::memory_order_release); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  std::atomic<bool>& flag_;
};

}  // namespace

std::vector<Value> Method::execute(std::span<const Value> inputs) {
  const InUse in_use(impl_->in_use, impl_->meta.name);
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

void Method::set_input(size_t index, const Value& value) {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  impl_->set_input(index, value);
}

void Method::run() {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  impl_->run();
}

Value Method::output(size_t index) const {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  return impl_->output(index);
}

void Method::set_input(size_t index, const TensorView& tensor) {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  impl_->set_input(index, tensor);
}

TensorView Method::output_view(size_t index) const {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  return impl_->output_view(index);
}

void Method::set_output_buffer(size_t index, void* data, size_t nbytes) {
  const InUse in_use(impl_->in_use, impl_->meta.name);
  impl_->set_output_buffer(index, data, nbytes);
}

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
