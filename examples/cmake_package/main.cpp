// Runs a program's `forward` method on float inputs filled with ones and prints every output.
//
//   run_forward model.pte [model.ptd ...]
#include <etnp/etnp.h>

#include <cstdio>
#include <memory>
#include <string_view>
#include <variant>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model.pte [weights.ptd ...]\n", argv[0]);
    return 2;
  }
  try {
    etnp::LoadOptions options;
    for (int i = 2; i < argc; ++i) options.data_files.push_back(argv[i]);
    etnp::Program program = etnp::Program::load_file(argv[1], options);
    std::unique_ptr<etnp::Method> method = program.load_method("forward");

    // One buffer per input, kept alive until execute() returns (TensorRef points at the caller's memory).
    const etnp::MethodMeta& meta = method->meta();
    std::vector<std::vector<float>> buffers(meta.inputs.size());
    std::vector<etnp::Value> inputs;
    for (size_t i = 0; i < meta.inputs.size(); ++i) {
      const etnp::TensorInfo& info = meta.inputs[i].tensor;
      if (meta.inputs[i].tag != etnp::Tag::Tensor || info.dtype != etnp::ScalarType::Float) {
        std::fprintf(stderr, "input %zu is not a float tensor: this example feeds float tensors only\n", i);
        return 1;
      }
      int64_t numel = 1;
      for (int64_t size : info.sizes) numel *= size;
      buffers[i].assign(static_cast<size_t>(numel), 1.0f);
      inputs.push_back(etnp::TensorRef{etnp::ScalarType::Float, info.sizes, {}, buffers[i].data()});
    }

    std::vector<etnp::Value> outputs = method->execute(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("output %zu:", i);
      if (const auto* tensor = std::get_if<etnp::TensorRef>(&outputs[i])) {
        if (tensor->dtype == etnp::ScalarType::Float) {
          const float* data = static_cast<const float*>(tensor->data);
          for (int64_t k = 0; k < tensor->numel(); ++k) std::printf(" %g", data[k]);
        } else {
          const std::string_view dtype = etnp::scalar_type_name(tensor->dtype);
          std::printf(" %lld elements of %.*s", static_cast<long long>(tensor->numel()),
                      static_cast<int>(dtype.size()), dtype.data());
        }
      }
      std::printf("\n");
    }
  } catch (const etnp::Error& error) {
    std::fprintf(stderr, "%s: %s\n", etnp::error_kind_name(error.kind()), error.what());
    return 1;
  }
  return 0;
}
