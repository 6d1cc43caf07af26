// SentencePiece .model files (Llama 2, Gemma), read and run by Debian's libsentencepiece.
#include <sentencepiece_processor.h>

#include <exception>

#include "core/printable.h"
#include "etnp/error.h"
#include "llm/tokenizer_impl.h"

namespace etnp::llm {

namespace {

class SentencePiece : public Tokenizer::Impl {
 public:
  void load(std::string_view bytes, const std::string& path) {
    sentencepiece::util::Status status;
    try {
      status = processor_.LoadFromSerializedProto({bytes.data(), bytes.size()});
    } catch (const std::exception& e) {
      // The library's builders throw on some malformed models (a zero-length piece makes its double-array trie
      // throw Darts::Details::Exception; found by fuzz_tokenizer) instead of returning a status.
      throw Error(ErrorKind::InvalidArgument, path + ": not a SentencePiece model: " + printable(e.what()));
    }
    if (!status.ok())
      throw Error(ErrorKind::InvalidArgument,
                  path + ": not a SentencePiece model: " + printable(status.ToString()));
    vocab_size = processor_.GetPieceSize();
    format = "sentencepiece";
    if (processor_.bos_id() >= 0) bos = processor_.bos_id();
    if (processor_.eos_id() >= 0) eos = {processor_.eos_id()};
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode({text.data(), text.size()}, &ids);
    if (!status.ok()) {
      throw Error(ErrorKind::InvalidArgument, "sentencepiece: encode failed: " + printable(status.ToString()));
    }
    std::vector<int64_t> out;
    if (add_special_tokens && bos) out.push_back(*bos);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const override {
    std::vector<int> list;
    for (int64_t id : ids)
      if (!skip_special_tokens || !is_special(id)) list.push_back(static_cast<int>(id));
    std::string text;
    const auto status = processor_.Decode(list, &text);
    if (!status.ok()) {
      throw Error(ErrorKind::InvalidArgument, "sentencepiece: decode failed: " + printable(status.ToString()));
    }
    return text;
  }
  std::optional<int64_t> token_id(std::string_view piece) const override {
    const int id = processor_.PieceToId({piece.data(), piece.size()});
    if (id < 0 || processor_.IdToPiece(id) != piece) return std::nullopt;  // unknown pieces map to unk's id
    return id;
  }
  std::string token_to_piece(int64_t id) const override { return processor_.IdToPiece(static_cast<int>(id)); }
  bool is_special(int64_t id) const override { return processor_.IsControl(static_cast<int>(id)); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_sentencepiece(std::string_view bytes, const std::string& path) {
  auto tokenizer = std::make_shared<SentencePiece>();
  tokenizer->load(bytes, path);
  return tokenizer;
}

}  // namespace etnp::llm
