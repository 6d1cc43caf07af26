// Tokenizers for text generation: Hugging Face tokenizer.json (BPE), SentencePiece .model and tiktoken files
// (docs/tokenizers.md says what each format supports and what it refuses).
//
// Thread safety: a loaded Tokenizer is immutable; any number of threads may use one (or copies of it, which
// share the loaded state) at the same time. A StreamDecoder holds the state of one generation and is used by
// one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace etnp {

class Tokenizer {
 public:
  /// Loads the tokenizer in `path`; the format is told from the contents (a JSON object, a SentencePiece
  /// protobuf, or "base64 rank" text lines), not the file name. Throws etnp::Error(InvalidArgument) naming the
  /// path for a file that cannot be read, is none of the formats, or asks for a component this build does not
  /// support (naming the component and its type).
  static Tokenizer load(const std::string& path);

  /// The ids of `text` (UTF-8). With `add_special_tokens`, the tokens the format adds around a sequence: the
  /// post-processor's template for tokenizer.json, BOS for SentencePiece and tiktoken. Special tokens written in
  /// the text are recognized as such. Throws InvalidArgument for text that is not valid UTF-8.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// The text of `ids` (invalid UTF-8 from partial byte sequences becomes U+FFFD). Throws InvalidArgument
  /// naming an id outside the vocabulary.
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens = false) const;

  /// One past the largest token id.
  int64_t vocab_size() const;
  std::optional<int64_t> bos_id() const;
  /// The tokens that end a generation (tokenizer.json: its tokenizer_config.json's eos_token, else the known
  /// end tokens among its special tokens; tiktoken: <|end_of_text|>, <|eom_id|>, <|eot_id|>; SentencePiece: eos).
  std::vector<int64_t> eos_ids() const;
  /// The id of a token by its text as the vocabulary spells it ("<|eot_id|>", "▁the"), or nullopt.
  std::optional<int64_t> token_id(std::string_view piece) const;
  /// The vocabulary's spelling of token `id` (byte-level and byte-fallback tokens as stored, not decoded).
  std::string token_to_piece(int64_t id) const;
  bool is_special(int64_t id) const;
  /// "tokenizer.json", "sentencepiece" or "tiktoken".
  const std::string& format() const;

  class Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

/// Text of a generation as its tokens arrive: step() returns the text that the new token completes (empty
/// while it ends inside a multi-byte UTF-8 sequence or a run of byte-fallback pieces), so that the
/// concatenation of every step() and the final flush() equals decode() of all the tokens.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  /// Throws InvalidArgument for an id outside the vocabulary (the decoder is left as it was).
  std::string step(int64_t id);
  /// What is still held back (incomplete UTF-8 comes out as U+FFFD); the decoder then starts afresh.
  std::string flush();

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool skip_special_;
  std::vector<int64_t> window_;  ///< The tokens of the last emitted text, then the pending ones.
  size_t context_ = 0;           ///< How many of window_ are the last emitted text's.
  std::string context_text_;     ///< decode() of those.
};

}  // namespace etnp
