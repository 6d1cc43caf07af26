#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/cli.h"

namespace etnp::cli {
namespace {

void write_output(const std::string& dir, size_t index, const Value& v) {
  const std::string path = dir + "/output_" + std::to_string(index) + ".npy";
  if (const auto* t = std::get_if<TensorRef>(&v)) {
    bool contiguous = true;
    for (size_t i = 0; i < t->dim_order.size(); ++i) contiguous = contiguous && t->dim_order[i] == i;
    if (!contiguous) {
      // Write in logical (row-major) order.
      const size_t elem = element_size(t->dtype);
      const size_t rank = t->sizes.size();
      std::vector<int64_t> strides(rank);
      strides_from_dim_order(t->sizes, t->dim_order, strides);
      std::vector<uint8_t> data(static_cast<size_t>(t->numel()) * elem);
      std::vector<int64_t> idx(rank, 0);
      for (int64_t i = 0; i < t->numel(); ++i) {
        int64_t off = 0;
        for (size_t d = 0; d < rank; ++d) off += idx[d] * strides[d];
        std::memcpy(data.data() + i * elem, static_cast<const uint8_t*>(t->data) + off * elem, elem);
        for (size_t d = rank; d-- > 0;) {
          if (++idx[d] < t->sizes[d]) break;
          idx[d] = 0;
        }
      }
      format::write_npy(path, t->dtype, t->sizes, data.data());
    } else {
      format::write_npy(path, t->dtype, t->sizes, t->data);
    }
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    format::write_npy(path, ScalarType::Long, {}, i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    format::write_npy(path, ScalarType::Double, {}, d);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    const uint8_t byte = *b ? 1 : 0;
    format::write_npy(path, ScalarType::Bool, {}, &byte);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    format::write_npy_string(path, *s);  // a 0-d unicode array, as numpy.save(np.array("text")) writes it
  } else {
    // None has no numeric or text form: no file, and a line that says so (the numbering stays the output's).
    std::fprintf(stderr, "note: output %zu is None: no %s written\n", index, path.c_str());
  }
}

void print_values(const Value& v) {
  const auto* t = std::get_if<TensorRef>(&v);
  if (t == nullptr || t->data == nullptr) return;
  const int64_t n = t->numel();
  std::printf("    [");
  for (int64_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const uint8_t*>(t->data) + i * static_cast<int64_t>(element_size(t->dtype));
    if (i) std::printf(", ");
    switch (t->dtype) {
      case ScalarType::Float: { float f; std::memcpy(&f, p, 4); std::printf("%.9g", f); break; }
      case ScalarType::Double: { double d; std::memcpy(&d, p, 8); std::printf("%.17g", d); break; }
      case ScalarType::Long: { int64_t x; std::memcpy(&x, p, 8); std::printf("%lld", static_cast<long long>(x)); break; }
      case ScalarType::Int: { int32_t x; std::memcpy(&x, p, 4); std::printf("%d", x); break; }
      case ScalarType::Bool: std::printf("%s", *p ? "true" : "false"); break;
      default: std::printf("%d", static_cast<int>(*p)); break;
    }
  }
  std::printf("]\n");
}

// "top-5 of output 0: 281 (9.53), 285 (8.91), ..." for a float tensor output (classifier logits).
void print_top_k(size_t index, const Value& v, int k) {
  const auto* t = std::get_if<TensorRef>(&v);
  if (t == nullptr || t->data == nullptr || t->dtype != ScalarType::Float || t->numel() == 0) return;
  const auto* data = static_cast<const float*>(t->data);
  std::vector<int64_t> order(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const size_t n = std::min(order.size(), static_cast<size_t>(k));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int64_t a, int64_t b) { return data[a] > data[b] || (data[a] == data[b] && a < b); });
  std::printf("top-%zu of output %zu (index: value):", n, index);
  for (size_t i = 0; i < n; ++i) std::printf("%s %lld: %.4g", i ? "," : "", static_cast<long long>(order[i]), data[order[i]]);
  std::printf("\n");
}

}  // namespace

int run_run(Args& args) {
  LoadOptions options = load_options_from(args);
  const std::string method_name = args.value("--method", "forward");
  const auto input_specs = args.values("--input");
  const std::string fill = fill_value(args, "");
  const auto seed = static_cast<uint64_t>(args.int_value("--seed", 0));
  const auto shape_specs = args.values("--shape");
  const std::string output_dir = args.value("--output-dir", "");
  const std::string print = args.value("--print", "summary");
  const auto top = static_cast<int>(args.int_value("--top", 0, 0, 1000000));
  if (print != "none" && print != "summary" && print != "all") {
    usage_error("--print takes none, summary or all, got '" + shortened(print) + "'");
  }
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("run takes one .pte file");

  Program program = load_program(files[0], options);
  auto method = program.load_method(method_name);
  const auto shapes = parse_shapes(shape_specs, method->meta().inputs.size());
  PreparedInputs inputs = prepare_inputs(method->meta(), input_specs, fill, seed, shapes,
                                         fill.empty() ? std::vector<InputUse>{} : integer_input_uses(files[0], method_name));
  if (!output_dir.empty()) make_directories(output_dir, "--output-dir");  // before the run: a bad DIR fails fast
  const std::vector<Value> outputs = method->execute(inputs.values);
  if (!output_dir.empty()) {
    for (size_t i = 0; i < outputs.size(); ++i) write_output(output_dir, i, outputs[i]);
  }
  if (print != "none") {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("output %zu: %s\n", i, value_summary(outputs[i]).c_str());
      if (print == "all") print_values(outputs[i]);
    }
  }
  if (top > 0) {
    for (size_t i = 0; i < outputs.size(); ++i) print_top_k(i, outputs[i], top);
  }
  return 0;
}

}  // namespace etnp::cli
