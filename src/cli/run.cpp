#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/cli.h"

namespace etnp::cli {
namespace {

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
void print_top_k(size_t index, const Value& v, int k, const std::string& prefix) {
  const auto* t = std::get_if<TensorRef>(&v);
  if (t == nullptr || t->data == nullptr || t->dtype != ScalarType::Float || t->numel() == 0) return;
  const auto* data = static_cast<const float*>(t->data);
  std::vector<int64_t> order(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const size_t n = std::min(order.size(), static_cast<size_t>(k));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int64_t a, int64_t b) { return data[a] > data[b] || (data[a] == data[b] && a < b); });
  std::printf("%stop-%zu of output %zu (index: value):", prefix.c_str(), n, index);
  for (size_t i = 0; i < n; ++i) std::printf("%s %lld: %.4g", i ? "," : "", static_cast<long long>(order[i]), data[order[i]]);
  std::printf("\n");
}


void print_outputs(const std::vector<Value>& outputs, const std::string& print, int top, const std::string& prefix) {
  if (print != "none") {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("%soutput %zu: %s\n", prefix.c_str(), i, value_summary(outputs[i]).c_str());
      if (print == "all") print_values(outputs[i]);
    }
  }
  if (top > 0) {
    for (size_t i = 0; i < outputs.size(); ++i) print_top_k(i, outputs[i], top, prefix);
  }
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The input sets of --batch DIR: each subfolder (its .npy files) or .npz archive, by name; other files are skipped.
struct InputSet {
  std::string name;
  std::string path;
};

std::vector<InputSet> batch_sets(const std::string& dir) {
  if (!is_dir(dir)) usage_error("--batch takes a directory, and '" + shortened(dir, 240) + "' is not one");
  std::vector<InputSet> sets;
  for (const auto& name : directory_entries(dir)) {
    const std::string path = dir + "/" + name;
    if (is_dir(path)) sets.push_back({name, path});
    else if (name.size() > 4 && name.ends_with(".npz")) sets.push_back({name.substr(0, name.size() - 4), path});
  }
  for (size_t i = 1; i < sets.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (sets[i].name == sets[j].name) {
        usage_error("--batch '" + shortened(dir, 240) + "' holds both '" + sets[j].name + "' and '" + sets[i].name +
                    ".npz': their outputs would share one folder");
      }
    }
  }
  if (sets.empty()) usage_error("--batch '" + shortened(dir, 240) + "' holds no input sets (subfolders of .npy files or .npz archives)");
  return sets;
}

}  // namespace

int run_run(Args& args) {
  LoadOptions options = load_options_from(args);
  const std::string method_name = args.value("--method", "forward");
  const auto input_args = args.values("--input");
  const auto batch = args.single_value("--batch");
  const std::string fill = fill_value(args, "");
  const auto seed = static_cast<uint64_t>(args.int_value("--seed", 0));
  const auto shape_specs = args.values("--shape");
  const std::string output_dir = args.value("--output-dir", "");
  const std::string print = args.value("--print", "summary");
  const auto top = static_cast<int>(args.int_value("--top", 0, 0, 1000000));
  const bool progress = progress_wanted(args);
  if (print != "none" && print != "summary" && print != "all") {
    usage_error("--print takes none, summary or all, got '" + shortened(print) + "'");
  }
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("run takes one .pte file");
  if (batch && !input_args.empty()) usage_error("--batch gives every input set; --input cannot be used with it");
  const std::vector<InputSet> sets = batch ? batch_sets(*batch) : std::vector<InputSet>{};
  const auto input_specs = expand_input_specs(input_args);

  Program program = load_program(files[0], options);
  auto method = program.load_method(method_name);
  const auto shapes = parse_shapes(shape_specs, method->meta().inputs.size());
  const std::vector<InputUse> uses = fill.empty() ? std::vector<InputUse>{} : integer_input_uses(files[0], method_name);
  if (!batch) {
    PreparedInputs inputs = prepare_inputs(method->meta(), input_specs, fill, seed, shapes, uses);
    if (!output_dir.empty()) make_directories(output_dir, "--output-dir");  // before the run: a bad DIR fails fast
    const std::vector<Value> outputs = method->execute(inputs.values);
    if (!output_dir.empty()) {
      for (size_t i = 0; i < outputs.size(); ++i) write_output(output_dir, i, outputs[i]);
    }
    print_outputs(outputs, print, top, "");
    return 0;
  }
  // A batch: the method is loaded once and runs on each set; outputs go to OUT/<set>/output_<i>.npy.
  if (!output_dir.empty()) make_directories(output_dir, "--output-dir");
  Progress bar(static_cast<int64_t>(sets.size()), progress);
  for (size_t s = 0; s < sets.size(); ++s) {
    bar.update(static_cast<int64_t>(s), sets[s].name);
    PreparedInputs inputs = prepare_inputs(method->meta(), expand_input_specs({sets[s].path}), fill, seed, shapes, uses);
    const std::vector<Value> outputs = method->execute(inputs.values);
    bar.clear();
    if (!output_dir.empty()) {
      const std::string dir = output_dir + "/" + sets[s].name;
      make_directories(dir, "--output-dir");
      for (size_t i = 0; i < outputs.size(); ++i) write_output(dir, i, outputs[i]);
    }
    print_outputs(outputs, print, top, sets[s].name + ": ");
    std::fflush(stdout);
  }
  bar.update(static_cast<int64_t>(sets.size()));
  bar.finish();
  return 0;
}

}  // namespace etnp::cli
