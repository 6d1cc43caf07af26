#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/cli.h"
#include "cli/json_output.h"

namespace etnp::cli {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// "1846272 bytes (1.76 MiB)"; small sizes in bytes only.
std::string mib_text(uint64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (1u << 20)) {
    char mib[32];
    std::snprintf(mib, sizeof mib, " (%.2f MiB)", static_cast<double>(bytes) / (1 << 20));
    s += mib;
  }
  return s;
}

Json scalar_json(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return nullptr;
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
  if (v.tag == Tag::Int || v.tag == Tag::Double || v.tag == Tag::Bool || v.tag == Tag::String) {
    s += " = " + scalar_json(v.value).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return s;
}

Json value_json(const ValueInfo& v) {
  Json j;
  j["type"] = tag_name(v.tag);
  if (v.tag == Tag::Tensor) {
    j["dtype"] = scalar_type_name(v.tensor.dtype);
    j["sizes"] = v.tensor.sizes;
    j["dim_order"] = v.tensor.dim_order;
    j["dynamic"] = v.tensor.dynamism != ShapeDynamism::Static;
    j["memory_planned"] = v.tensor.memory_planned;
    j["nbytes"] = v.tensor.nbytes;
  } else if (v.tag == Tag::Int || v.tag == Tag::Double || v.tag == Tag::Bool || v.tag == Tag::String) {
    j["value"] = scalar_json(v.value);
  }
  return j;
}

Json values_json(const std::vector<ValueInfo>& values) {
  Json list = Json::array();
  for (const auto& v : values) list.push_back(value_json(v));
  return list;
}

Json problems_json(const LoadVerdict& verdict) {
  Json list = Json::array();
  for (const auto& p : verdict.problems) {
    list.push_back({{"kind", load_problem_kind_name(p.kind)}, {"name", p.name}, {"message", p.message}});
  }
  return list;
}

// The names of one kind of problem over all methods, each once, in the order first met.
std::vector<std::string> problem_names(const std::vector<LoadVerdict>& verdicts, LoadProblem::Kind kind) {
  std::vector<std::string> names;
  for (const auto& v : verdicts) {
    for (const auto& p : v.problems) {
      if (p.kind == kind && std::find(names.begin(), names.end(), p.name) == names.end()) names.push_back(p.name);
    }
  }
  return names;
}

}  // namespace

int run_inspect(Args& args) {
  const bool json = args.has_flag("--json");
  const bool verbose = args.has_flag("--verbose") || args.has_flag("-v");
  LoadOptions options = load_options_from(args);
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("inspect takes one .pte file");
  Program program = load_program(files[0], options);
  const ProgramInfo info = program.info();
  std::vector<MethodMeta> metas;
  std::vector<LoadVerdict> verdicts;
  for (const auto& name : program.method_names()) {
    metas.push_back(program.method_meta(name));
    verdicts.push_back(program.load_verdict(name));
  }
  // "runs here" exactly when load_method succeeds for every method; otherwise every reason, per method.
  const bool runs_here = std::all_of(verdicts.begin(), verdicts.end(), [](const LoadVerdict& v) { return v.loads(); });
  std::vector<std::string> reasons;
  for (const auto& v : verdicts) {
    for (const auto& p : v.problems) reasons.push_back(v.method + ": " + p.message);
  }
  const std::string verdict = runs_here ? "runs here" : "does not run here";

  if (json) {
    Json out;
    out["file"] = files[0];
    out["file_size"] = info.file_size;
    out["schema"] = info.identifier;
    out["version"] = info.version;
    out["extended_header"] = info.has_extended_header;
    out["program_size"] = info.program_size;
    out["segment_base_offset"] = info.segment_base_offset;
    out["segment_data_size"] = info.segment_data_size;
    out["segments"] = Json::array();
    for (const auto& seg : info.segments) out["segments"].push_back({{"offset", seg.offset}, {"size", seg.size}});
    out["constant_bytes"] = info.constant_bytes;
    out["legacy_constant_buffer"] = info.legacy_constant_buffer;
    out["named_data"] = info.num_named_data;
    out["methods"] = Json::array();
    for (size_t i = 0; i < metas.size(); ++i) {
      const MethodMeta& m = metas[i];
      int64_t planned = 0;
      for (int64_t s : m.planned_buffer_sizes) planned += s;
      Json method;
      method["name"] = m.name;
      method["inputs"] = values_json(m.inputs);
      method["outputs"] = values_json(m.outputs);
      method["instructions"] = m.num_instructions;
      method["planned_buffers"] = m.planned_buffer_sizes;
      method["planned_bytes"] = planned;
      method["operators"] = m.operators;
      method["delegates"] = m.backends;
      method["loads"] = verdicts[i].loads();
      method["problems"] = problems_json(verdicts[i]);
      out["methods"].push_back(std::move(method));
    }
    out["runs_here"] = runs_here;
    out["missing_operators"] = problem_names(verdicts, LoadProblem::Kind::MissingOperator);
    out["missing_backends"] = problem_names(verdicts, LoadProblem::Kind::MissingBackend);
    std::string verdict_line = verdict;
    for (size_t i = 0; i < reasons.size(); ++i) verdict_line += (i == 0 ? ": " : "; ") + reasons[i];
    out["verdict"] = verdict_line;
    print_json(out);
    return 0;
  }

  std::printf("file: %s (%llu bytes)\n", files[0].c_str(), static_cast<unsigned long long>(info.file_size));
  std::printf("schema: %s, version %u\n", info.identifier.c_str(), info.version);
  if (verbose) {
    std::printf("container: extended header: %s; program data: %llu bytes", info.has_extended_header ? "yes" : "no",
                static_cast<unsigned long long>(info.program_size));
    if (!info.segments.empty()) {
      std::printf("; %zu segment%s at offset %llu (%llu bytes)\n", info.segments.size(),
                  info.segments.size() == 1 ? "" : "s",
                  static_cast<unsigned long long>(info.segment_base_offset),
                  static_cast<unsigned long long>(info.segment_data_size));
      for (size_t i = 0; i < info.segments.size(); ++i) {
        std::printf("  segment %zu: offset %llu, %llu bytes\n", i, static_cast<unsigned long long>(info.segments[i].offset),
                    static_cast<unsigned long long>(info.segments[i].size));
      }
    } else {
      std::printf("; no segments\n");
    }
  }
  std::printf("constants: %s%s\n", mib_text(info.constant_bytes).c_str(),
              verbose && info.legacy_constant_buffer ? " (legacy constant_buffer layout)" : "");
  if (verbose && info.num_named_data > 0) std::printf("named data: %zu entries\n", info.num_named_data);
  std::printf("methods: %zu\n", metas.size());
  for (const auto& m : metas) {
    int64_t planned = 0;
    for (int64_t s : m.planned_buffer_sizes) planned += s;
    std::printf("  %s: %zu input%s, %zu output%s, planned memory %s\n", m.name.c_str(), m.inputs.size(),
                m.inputs.size() == 1 ? "" : "s", m.outputs.size(), m.outputs.size() == 1 ? "" : "s",
                mib_text(static_cast<uint64_t>(planned)).c_str());
    if (verbose) {
      std::string buffers;
      for (int64_t s : m.planned_buffer_sizes) buffers += (buffers.empty() ? "" : ", ") + std::to_string(s);
      std::printf("    plan: %zu instruction%s, %zu values, planned buffers [%s] bytes\n", m.num_instructions,
                  m.num_instructions == 1 ? "" : "s", m.num_values, buffers.c_str());
    }
    const auto uses = verbose ? integer_input_uses(files[0], m.name) : std::vector<InputUse>{};
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      std::string line = value_text(m.inputs[i]);
      if (verbose && m.inputs[i].tag == Tag::Tensor && !is_floating_type(m.inputs[i].tensor.dtype) &&
          m.inputs[i].tensor.dtype != ScalarType::Bool) {
        const InputUse use = i < uses.size() ? uses[i] : InputUse{InputUse::Kind::Unknown, 0};
        if (use.kind == InputUse::Kind::Index) {
          line += "; an index below " + std::to_string(use.bound) + ": --fill random draws from [0, " +
                  std::to_string(use.bound) + ")";
        } else if (use.kind == InputUse::Kind::Unknown) {
          line += "; use not determined: --fill random gives zeros";
        } else {
          line += "; --fill random draws from [-100, 100]";
        }
      }
      std::printf("    input %zu: %s\n", i, line.c_str());
    }
    for (size_t i = 0; i < m.outputs.size(); ++i) std::printf("    output %zu: %s\n", i, value_text(m.outputs[i]).c_str());
    if (!m.operators.empty()) {
      std::string ops;
      for (const auto& o : m.operators) ops += (ops.empty() ? "" : ", ") + o;
      std::printf("    operators (%zu): %s\n", m.operators.size(), ops.c_str());
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
  for (const auto& r : reasons) std::printf("  %s\n", r.c_str());
  return 0;
}

}  // namespace etnp::cli
