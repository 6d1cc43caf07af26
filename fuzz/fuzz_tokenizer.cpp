// The tokenizer file readers (tokenizer.json, SentencePiece .model, tiktoken), told apart as Tokenizer::load
// does; a tokenizer that loads encodes a text made of the input's last bytes and decodes the ids.
#include <cstdint>
#include <string_view>

#include "etnp/error.h"
#include "llm/tokenizer_impl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // No tokenizer_config.json is beside this path.
  const std::string path = "/nonexistent/etnp-fuzz/tokenizer";
  try {
    std::shared_ptr<const Tokenizer::Impl> t;
    const size_t first = bytes.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && bytes[first] == '{') t = llm::load_hf_json(bytes, path);
    else if (!bytes.empty() && (bytes[0] == '\x0A' || bytes[0] == '\x12')) t = llm::load_sentencepiece(bytes, path);
    else t = llm::load_tiktoken(bytes, path);
    const auto ids = t->encode("Hello world, fuzz!", true);
    (void)t->decode(ids, false);
    for (int64_t id = 0; id < t->vocab_size && id < 64; ++id) (void)t->token_to_piece(id);
  } catch (const Error&) {
  }
  return 0;
}
