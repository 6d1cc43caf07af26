// etnp::Generator and etnp::Generation in the extension (_C.Generator, _C.Generation): the package's LLM class
// (executorch_numpy_runtime/llm.py) drives them. Each step releases the GIL while the model runs; one mutex
// per Generator serializes the steps of its generations, which share its method and KV cache.
#include <mutex>

#include "binding.h"
#include "etnp/generator.h"
#include "etnp/tokenizer.h"

namespace etnp::python {

namespace {

struct PyGenerator {
  std::shared_ptr<ProgramState> program;  // keeps the program alive under the method
  Generator generator;
  std::mutex mutex;
  PyGenerator(std::shared_ptr<ProgramState> state, const std::string& method)
      : program(std::move(state)), generator(program->program, method) {}
};

struct PyGeneration {
  std::shared_ptr<PyGenerator> owner;
  Generation generation;
};

GenerationOptions options_from(int64_t max_new_tokens, double temperature, double top_p, uint64_t seed,
                               std::vector<std::string> stop, bool add_bos) {
  GenerationOptions o;
  o.max_new_tokens = max_new_tokens;
  o.temperature = temperature;
  o.top_p = top_p;
  o.seed = seed;
  o.stop_strings = std::move(stop);
  o.add_bos = add_bos;
  return o;
}

py::dict result_dict(const GenerationResult& r) {
  py::dict d;
  d["prompt_ids"] = r.prompt_ids;
  d["ids"] = r.ids;
  d["text"] = py::bytes(r.text).attr("decode")("utf-8", "replace");
  d["stop_reason"] = stop_reason_name(r.stop);
  const GenerationStats& s = r.stats;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["prefill_seconds"] = s.prefill_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["first_token_seconds"] = s.first_token_seconds;
  d["prefill_tokens_per_second"] = s.prefill_tokens_per_second();
  d["decode_tokens_per_second"] = s.decode_tokens_per_second();
  d["peak_rss_bytes"] = s.peak_rss_bytes;
  return d;
}

py::dict metadata_dict(const LlmMetadata& m) {
  py::dict d;
  d["max_seq_len"] = m.max_seq_len;
  d["max_context_len"] = m.max_context_len;
  d["bos_id"] = m.bos_id ? py::object(py::int_(*m.bos_id)) : py::object(py::none());
  d["eos_ids"] = m.eos_ids;
  d["vocab_size"] = m.vocab_size ? py::object(py::int_(*m.vocab_size)) : py::object(py::none());
  d["use_kv_cache"] = m.use_kv_cache;
  return d;
}

}  // namespace

void bind_generator(py::module_& m) {
  py::class_<PyGenerator, std::shared_ptr<PyGenerator>>(m, "Generator", "The prefill-then-decode loop over a method.")
      .def(py::init([](const PyProgram& program, const std::string& method) {
             return std::make_shared<PyGenerator>(program.state(), method);
           }),
           py::arg("program"), py::arg("method") = "forward")
      .def_property_readonly("metadata", [](PyGenerator& g) { return metadata_dict(g.generator.metadata()); })
      .def_property_readonly("position", [](PyGenerator& g) {
        std::lock_guard<std::mutex> lock(g.mutex);
        return g.generator.position();
      })
      .def("reset", [](PyGenerator& g) {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(g.mutex);
        g.generator.reset();
      })
      .def("feed", [](PyGenerator& g, std::vector<int64_t> ids) {
        std::vector<float> logits;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> lock(g.mutex);
          auto l = g.generator.feed(ids);
          logits.assign(l.begin(), l.end());
        }
        return py::array_t<float>(static_cast<py::ssize_t>(logits.size()), logits.data());
      }, py::arg("ids"), "Appends ids to the context; returns the next token's logits (a float32 copy).")
      .def("start_ids", [](const std::shared_ptr<PyGenerator>& g, std::vector<int64_t> ids, int64_t max_new_tokens,
                           double temperature, double top_p, uint64_t seed, bool add_bos) {
        const GenerationOptions o = options_from(max_new_tokens, temperature, top_p, seed, {}, add_bos);
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(g->mutex);
        return PyGeneration{g, g->generator.start(ids, o)};
      }, py::arg("ids"), py::arg("max_new_tokens"), py::arg("temperature"), py::arg("top_p"), py::arg("seed"),
         py::arg("add_bos"))
      .def("start_text", [](const std::shared_ptr<PyGenerator>& g, const Tokenizer& tokenizer, const std::string& prompt,
                            int64_t max_new_tokens, double temperature, double top_p, uint64_t seed,
                            std::vector<std::string> stop, bool add_bos) {
        const GenerationOptions o = options_from(max_new_tokens, temperature, top_p, seed, std::move(stop), add_bos);
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(g->mutex);
        return PyGeneration{g, g->generator.start(tokenizer, prompt, o)};
      }, py::arg("tokenizer"), py::arg("prompt"), py::arg("max_new_tokens"), py::arg("temperature"), py::arg("top_p"),
         py::arg("seed"), py::arg("stop"), py::arg("add_bos"));

  py::class_<PyGeneration>(m, "Generation", "One generation in progress.")
      .def("next", [](PyGeneration& g) -> py::object {
        std::optional<Generation::Step> step;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> lock(g.owner->mutex);
          step = g.generation.next();
        }
        if (!step) return py::none();
        return py::make_tuple(step->token, py::bytes(step->text).attr("decode")("utf-8", "replace"));
      }, "(token, text) of the next token, or None once generation has ended.")
      .def("stop", [](PyGeneration& g) {
        std::lock_guard<std::mutex> lock(g.owner->mutex);
        g.generation.stop();
      })
      .def_property_readonly("done", [](PyGeneration& g) {
        std::lock_guard<std::mutex> lock(g.owner->mutex);
        return g.generation.done();
      })
      .def("result", [](PyGeneration& g) {
        std::lock_guard<std::mutex> lock(g.owner->mutex);
        return result_dict(g.generation.result());
      });
}

}  // namespace etnp::python
