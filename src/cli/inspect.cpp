#include <cstdio>
#include <map>
#include <sstream>

#include "cli/cli.h"
#include "cli/json_writer.h"

namespace etnp::cli {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string scalar_text(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return json_number(*d);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v)) return json_string(*s);
  return "null";
}

std::string value_text(const ValueInfo& v) {
  if (v.tag == Tag::Tensor) {
    std::string s = std::string(scalar_type_name(v.tensor.dtype)) + shape_text(v.tensor.sizes);
    if (v.tensor.dynamism != ShapeDynamism::Static) s += " (dynamic, upper bound)";
    bool contiguous = true;
    for (size_t i = 0; i < v.tensor.dim_order.size(); ++i) contiguous = contiguous && v.tensor.dim_order[i] == i;
    if (!contiguous) {
      s += " dim_order [";
      for (size_t i = 0; i < v.tensor.dim_order.size(); ++i) s += (i ? ", " : "") + std::to_string(v.tensor.dim_order[i]);
      s += "]";
    }
    if (!v.tensor.memory_planned) s += " (not memory-planned)";
    return s;
  }
  std::string s = tag_name(v.tag);
  if (v.tag == Tag::Int || v.tag == Tag::Double || v.tag == Tag::Bool || v.tag == Tag::String) s += " = " + scalar_text(v.value);
  return s;
}

std::string value_json(const ValueInfo& v) {
  std::string s = "{\"type\": " + json_string(tag_name(v.tag));
  if (v.tag == Tag::Tensor) {
    s += ", \"dtype\": " + json_string(std::string(scalar_type_name(v.tensor.dtype)));
    s += ", \"sizes\": " + json_array(v.tensor.sizes, [](int64_t x) { return std::to_string(x); });
    s += ", \"dim_order\": " + json_array(v.tensor.dim_order, [](uint8_t x) { return std::to_string(x); });
    s += std::string(", \"dynamic\": ") + (v.tensor.dynamism != ShapeDynamism::Static ? "true" : "false");
    s += std::string(", \"memory_planned\": ") + (v.tensor.memory_planned ? "true" : "false");
    s += ", \"nbytes\": " + std::to_string(v.tensor.nbytes);
  } else if (v.tag == Tag::Int || v.tag == Tag::Double || v.tag == Tag::Bool || v.tag == Tag::String) {
    s += ", \"value\": " + scalar_text(v.value);
  }
  return s + "}";
}

}  // namespace

int run_inspect(Args& args) {
  const bool json = args.has_flag("--json");
  LoadOptions options = load_options_from(args);
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("inspect takes one .pte file");
  Program program = Program::load_file(files[0], options);
  const ProgramInfo info = program.info();
  const MissingDependencies missing = program.missing_dependencies();
  std::string verdict = "runs here";
  if (!missing.empty()) {
    verdict = "missing:";
    bool first = true;
    for (const auto& op : missing.operators) verdict += std::string(first ? " " : ", ") + "operator " + op, first = false;
    for (const auto& b : missing.backends) verdict += std::string(first ? " " : ", ") + "backend " + b, first = false;
  }
  std::vector<MethodMeta> metas;
  for (const auto& name : program.method_names()) metas.push_back(program.method_meta(name));

  if (json) {
    std::string out = "{";
    out += "\"file\": " + json_string(files[0]);
    out += ", \"file_size\": " + std::to_string(info.file_size);
    out += ", \"schema\": " + json_string(info.identifier);
    out += ", \"version\": " + std::to_string(info.version);
    out += std::string(", \"extended_header\": ") + (info.has_extended_header ? "true" : "false");
    out += ", \"program_size\": " + std::to_string(info.program_size);
    out += ", \"segment_base_offset\": " + std::to_string(info.segment_base_offset);
    out += ", \"segment_data_size\": " + std::to_string(info.segment_data_size);
    out += ", \"segments\": " + json_array(info.segments, [](const SegmentInfo& s) {
      return "{\"offset\": " + std::to_string(s.offset) + ", \"size\": " + std::to_string(s.size) + "}";
    });
    out += ", \"constant_bytes\": " + std::to_string(info.constant_bytes);
    out += std::string(", \"legacy_constant_buffer\": ") + (info.legacy_constant_buffer ? "true" : "false");
    out += ", \"named_data\": " + std::to_string(info.num_named_data);
    out += ", \"methods\": " + json_array(metas, [](const MethodMeta& m) {
      int64_t planned = 0;
      for (int64_t s : m.planned_buffer_sizes) planned += s;
      std::string s = "{\"name\": " + json_string(m.name);
      s += ", \"inputs\": " + json_array(m.inputs, value_json);
      s += ", \"outputs\": " + json_array(m.outputs, value_json);
      s += ", \"instructions\": " + std::to_string(m.num_instructions);
      s += ", \"planned_buffers\": " + json_array(m.planned_buffer_sizes, [](int64_t x) { return std::to_string(x); });
      s += ", \"planned_bytes\": " + std::to_string(planned);
      s += ", \"operators\": " + json_array(m.operators, json_string);
      s += ", \"delegates\": " + json_array(m.backends, json_string);
      return s + "}";
    });
    out += std::string(", \"runs_here\": ") + (missing.empty() ? "true" : "false");
    out += ", \"missing_operators\": " + json_array(missing.operators, json_string);
    out += ", \"missing_backends\": " + json_array(missing.backends, json_string);
    out += ", \"verdict\": " + json_string(verdict) + "}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  std::printf("file: %s (%llu bytes)\n", files[0].c_str(), static_cast<unsigned long long>(info.file_size));
  std::printf("schema: %s, version %u, extended header: %s\n", info.identifier.c_str(), info.version,
              info.has_extended_header ? "yes" : "no");
  std::printf("program data: %llu bytes", static_cast<unsigned long long>(info.program_size));
  if (!info.segments.empty()) {
    std::printf("; %zu segments at offset %llu (%llu bytes)\n", info.segments.size(),
                static_cast<unsigned long long>(info.segment_base_offset),
                static_cast<unsigned long long>(info.segment_data_size));
    for (size_t i = 0; i < info.segments.size(); ++i) {
      std::printf("  segment %zu: offset %llu, %llu bytes\n", i, static_cast<unsigned long long>(info.segments[i].offset),
                  static_cast<unsigned long long>(info.segments[i].size));
    }
  } else {
    std::printf("; no segments\n");
  }
  std::printf("constants: %llu bytes%s\n", static_cast<unsigned long long>(info.constant_bytes),
              info.legacy_constant_buffer ? " (legacy constant_buffer layout)" : "");
  if (info.num_named_data > 0) std::printf("named data: %zu entries\n", info.num_named_data);
  std::printf("methods: %zu\n", metas.size());
  for (const auto& m : metas) {
    int64_t planned = 0;
    for (int64_t s : m.planned_buffer_sizes) planned += s;
    std::printf("  %s: %zu inputs, %zu outputs, %zu instructions, planned memory %lld bytes in %zu buffers\n",
                m.name.c_str(), m.inputs.size(), m.outputs.size(), m.num_instructions, static_cast<long long>(planned),
                m.planned_buffer_sizes.size());
    for (size_t i = 0; i < m.inputs.size(); ++i) std::printf("    input %zu: %s\n", i, value_text(m.inputs[i]).c_str());
    for (size_t i = 0; i < m.outputs.size(); ++i) std::printf("    output %zu: %s\n", i, value_text(m.outputs[i]).c_str());
    if (!m.operators.empty()) {
      std::string ops;
      for (const auto& o : m.operators) ops += (ops.empty() ? "" : ", ") + o;
      std::printf("    operators: %s\n", ops.c_str());
    }
    if (!m.backends.empty()) {
      std::map<std::string, int> counts;
      for (const auto& b : m.backends) ++counts[b];
      std::string ds;
      for (const auto& [b, n] : counts) ds += (ds.empty() ? "" : ", ") + b + " x" + std::to_string(n);
      std::printf("    delegates: %s\n", ds.c_str());
    }
  }
  std::printf("verdict: %s\n", verdict.c_str());
  return 0;
}

}  // namespace etnp::cli
