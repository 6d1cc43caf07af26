// executorch_numpy_runtime.Tokenizer and StreamDecoder over include/etnp/tokenizer.h.
#include <string>
#include <vector>

#include "binding.h"
#include "etnp/tokenizer.h"

namespace etnp::python {

namespace {

Tokenizer load_tokenizer(const py::object& path) {
  const std::string file = path_arg(path, "path");
  py::gil_scoped_release release;
  return Tokenizer::load(file);
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer",
                        "A tokenizer loaded from a Hugging Face tokenizer.json, a SentencePiece .model or a tiktoken "
                        "file (the format is told from the contents). Immutable: threads may share one.")
      .def(py::init(&load_tokenizer), py::arg("path"))
      .def_static("load", &load_tokenizer, py::arg("path"), "Loads the tokenizer in path (str or os.PathLike).")
      .def(
          "encode",
          [](const Tokenizer& t, py::handle text, py::handle bos_arg) {
            const std::string utf8 = str_arg(text, "text");
            const bool bos = bool_arg(bos_arg, "bos");
            py::gil_scoped_release release;
            return t.encode(utf8, bos);
          },
          py::arg("text"), py::arg("bos") = true,
          "The ids of text. bos=True adds the tokens the format adds around a sequence: the post-processor's "
          "template for tokenizer.json, BOS for SentencePiece and tiktoken.")
      .def(
          "decode",
          [](const Tokenizer& t, py::handle ids_arg, py::handle skip) {
            const std::vector<int64_t> ids = int_list_arg(ids_arg, "ids");
            const bool skip_special_tokens = bool_arg(skip, "skip_special_tokens");
            py::gil_scoped_release release;
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false, "The text of ids.")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_ids", &Tokenizer::eos_ids)
      .def_property_readonly("format", &Tokenizer::format,
                             "'tokenizer.json', 'sentencepiece' or 'tiktoken'.")
      .def(
          "token_id", [](const Tokenizer& t, py::handle piece) { return t.token_id(str_arg(piece, "piece")); },
          py::arg("piece"), "The id of a token by its spelling, or None.")
      .def(
          "token_to_piece", [](const Tokenizer& t, py::handle id) { return py::bytes(t.token_to_piece(int_arg(id, "id"))); },
          py::arg("id"), "The vocabulary's spelling of a token, as bytes (byte-level tokens are not decoded).")
      .def("is_special", [](const Tokenizer& t, py::handle id) { return t.is_special(int_arg(id, "id")); }, py::arg("id"))
      .def(
          "stream_decoder",
          [](const Tokenizer& t, py::handle skip) { return StreamDecoder(t, bool_arg(skip, "skip_special_tokens")); },
          py::arg("skip_special_tokens") = false, "A StreamDecoder for one generation.");

  py::class_<StreamDecoder>(m, "StreamDecoder",
                            "Text of a generation as its tokens arrive: step(id) returns the text the token "
                            "completes ('' while a character is incomplete); flush() returns what is held back.")
      .def(py::init([](py::handle tokenizer, py::handle skip) {
             if (!py::isinstance<Tokenizer>(tokenizer)) {
               throw BindingError("InvalidType", "tokenizer must be a Tokenizer, got " + type_name(tokenizer));
             }
             return StreamDecoder(tokenizer.cast<const Tokenizer&>(), bool_arg(skip, "skip_special_tokens"));
           }), py::arg("tokenizer"), py::arg("skip_special_tokens") = false)
      .def("step", [](StreamDecoder& d, py::handle id) { return d.step(int_arg(id, "id")); }, py::arg("id"))
      .def("flush", &StreamDecoder::flush);
}

}  // namespace etnp::python
