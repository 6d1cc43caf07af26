// Tokenizer::load (telling the format from the contents), the checks every format shares, and StreamDecoder.
#include <algorithm>
#include <cctype>

#include "etnp/error.h"
#include "format/byte_source.h"
#include "llm/text_util.h"
#include "llm/tokenizer_impl.h"

namespace etnp {

namespace {

enum class FileKind { Json, SentencePiece, Tiktoken, Unknown };

// A tiktoken file starts with a line "<base64> <rank>".
bool looks_like_tiktoken(std::string_view bytes) {
  const std::string_view line = bytes.substr(0, bytes.find('\n'));
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 >= line.size()) return false;
  for (char c : line.substr(0, space))
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return false;
  for (char c : line.substr(space + 1))
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '\r') return false;
  return true;
}

FileKind kind_of(std::string_view bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && bytes[first] == '{') return FileKind::Json;
  // A SentencePiece ModelProto starts with its first field, the repeated `pieces` message (field 1, length
  // delimited: tag byte 0x0A), or with `trainer_spec` (field 2: 0x12) when written in another order.
  if (!bytes.empty() && (bytes[0] == '\x0A' || bytes[0] == '\x12')) return FileKind::SentencePiece;
  if (looks_like_tiktoken(bytes)) return FileKind::Tiktoken;
  return FileKind::Unknown;
}

void check_id(int64_t id, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size)
    throw Error(ErrorKind::InvalidArgument,
                "token id " + std::to_string(id) + " is out of range (vocabulary of " + std::to_string(vocab_size) +
                    " tokens)");
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  std::shared_ptr<format::ByteSource> source;
  try {
    source = format::ByteSource::map_file(path);
  } catch (const Error& e) {
    throw Error(ErrorKind::InvalidArgument, "tokenizer: " + e.detail());
  }
  const auto span = source->bytes();
  const std::string_view bytes(reinterpret_cast<const char*>(span.data()), span.size());
  switch (kind_of(bytes)) {
    case FileKind::Json: return Tokenizer(llm::load_hf_json(bytes, path));
    case FileKind::SentencePiece: return Tokenizer(llm::load_sentencepiece(bytes, path));
    case FileKind::Tiktoken: return Tokenizer(llm::load_tiktoken(bytes, path));
    case FileKind::Unknown: break;
  }
  throw Error(ErrorKind::InvalidArgument,
              path + ": not a tokenizer: expected a Hugging Face tokenizer.json (a JSON object), a SentencePiece "
                     "model (protobuf) or a tiktoken file (lines of base64 token and rank)");
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = llm::invalid_utf8_at(text))
    throw Error(ErrorKind::InvalidArgument, "tokenizer: the text is not valid UTF-8 (byte " + std::to_string(*bad) +
                                                " of " + std::to_string(text.size()) + ")");
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(std::span<const int64_t> ids, bool skip_special_tokens) const {
  for (int64_t id : ids) check_id(id, impl_->vocab_size);
  return impl_->decode(ids, skip_special_tokens);
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int64_t> Tokenizer::bos_id() const { return impl_->bos; }
std::vector<int64_t> Tokenizer::eos_ids() const { return impl_->eos; }
std::optional<int64_t> Tokenizer::token_id(std::string_view piece) const { return impl_->token_id(piece); }
std::string Tokenizer::token_to_piece(int64_t id) const {
  check_id(id, impl_->vocab_size);
  return impl_->token_to_piece(id);
}
bool Tokenizer::is_special(int64_t id) const {
  check_id(id, impl_->vocab_size);
  return impl_->is_special(id);
}
const std::string& Tokenizer::format() const { return impl_->format; }

// --- StreamDecoder ------------------------------------------------------------------------------------------------
// Decoding is not per token (a Metaspace decoder drops the space of the first token only, byte-level tokens may
// end inside a character), so each step decodes the tokens of the last emitted text together with the pending
// ones, and emits what follows the last emitted text once it does not end in U+FFFD (an incomplete character).

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::step(int64_t id) {
  check_id(id, impl_->vocab_size);
  window_.push_back(id);
  const std::string text = impl_->decode(window_, skip_special_);
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  const bool incomplete = text.size() >= 3 && std::string_view(text).substr(text.size() - 3) == kReplacement;
  if (text.size() <= context_text_.size() || incomplete) return {};
  // The decoders only ever append, so the last emitted text is a prefix; were it not, emit from where they part.
  const size_t common = static_cast<size_t>(
      std::mismatch(context_text_.begin(), context_text_.end(), text.begin(), text.end()).first -
      context_text_.begin());
  std::string out = text.substr(common);
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_));
  context_ = window_.size();
  context_text_ = impl_->decode(window_, skip_special_);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  if (window_.size() > context_) {
    const std::string text = impl_->decode(window_, skip_special_);
    if (text.size() > context_text_.size()) out = text.substr(context_text_.size());
  }
  window_.clear();
  context_ = 0;
  context_text_.clear();
  return out;
}

}  // namespace etnp
