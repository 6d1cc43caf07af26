// The state of a loaded Tokenizer: one implementation per format behind include/etnp/tokenizer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/tokenizer.h"

namespace etnp {

class Tokenizer::Impl {
 public:
  virtual ~Impl() = default;
  /// `text` is valid UTF-8 (Tokenizer::encode checked it).
  virtual std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  /// Every id is in [0, vocab_size) (Tokenizer::decode checked them).
  virtual std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const = 0;
  virtual std::optional<int64_t> token_id(std::string_view piece) const = 0;
  /// Empty for an id in range that names no token (a gap in the vocabulary).
  virtual std::string token_to_piece(int64_t id) const = 0;
  virtual bool is_special(int64_t id) const = 0;

  std::string format;
  int64_t vocab_size = 0;
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;
};

namespace llm {

/// Each reads one format from the file's bytes; `path` names the file in messages (and, for tokenizer.json,
/// locates the tokenizer_config.json beside it). All throw etnp::Error(InvalidArgument).
std::shared_ptr<const Tokenizer::Impl> load_hf_json(std::string_view bytes, const std::string& path);
std::shared_ptr<const Tokenizer::Impl> load_sentencepiece(std::string_view bytes, const std::string& path);
std::shared_ptr<const Tokenizer::Impl> load_tiktoken(std::string_view bytes, const std::string& path);

}  // namespace llm
}  // namespace etnp
