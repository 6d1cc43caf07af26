// Text pieces the tokenizers share: UTF-8, Unicode classes, regular expressions (PCRE2), base64 and the BPE
// merge loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace etnp::llm {

/// The code point at `text[pos]` and its length in bytes; `text` must be valid UTF-8.
std::pair<char32_t, size_t> next_char(std::string_view text, size_t pos);
void append_utf8(std::string& out, char32_t c);
/// Byte offset of the first invalid UTF-8 sequence, or nullopt when `text` is valid.
std::optional<size_t> invalid_utf8_at(std::string_view text);
/// `bytes` with each invalid sequence replaced by U+FFFD, one per maximal invalid subpart (as Rust's
/// String::from_utf8_lossy and Python's errors="replace" do).
std::string utf8_lossy(std::string_view bytes);

bool is_whitespace(char32_t c);  ///< The Unicode White_Space property.
bool is_alphanumeric(char32_t c);  ///< Letters (L*) and numbers (N*).
bool is_numeric(char32_t c);  ///< Numbers (Nd, Nl, No).
bool is_punctuation(char32_t c);  ///< ASCII punctuation and the Unicode P* categories.

/// A PCRE2 pattern compiled once (UTF, Unicode properties, JIT where available); matching is thread-safe.
class Regex {
 public:
  /// Throws InvalidArgument "`what`: ..." with PCRE2's message when `pattern` does not compile.
  Regex(const std::string& pattern, const std::string& what);
  /// The non-empty matches in `subject` (valid UTF-8), as [begin, end) byte offsets, left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

 private:
  std::shared_ptr<void> code_;  ///< pcre2_code_8, freed by pcre2_code_free.
};
/// A pattern written for Oniguruma (what the tokenizers library compiles tokenizer.json's patterns with) in
/// PCRE2's terms: Oniguruma's \w is letters, marks, decimal digits and connector punctuation, PCRE2's lacks marks.
std::string pcre2_from_oniguruma(std::string_view pattern);
/// `literal` escaped so that a Regex matches it literally.
std::string regex_escape(std::string_view literal);

/// Decodes standard base64 (with '=' padding); nullopt when `text` is not base64.
std::optional<std::string> base64_decode(std::string_view text);

/// Rank and resulting id of merging two adjacent symbols, or nullopt when they do not merge.
using MergeLookup = std::function<std::optional<std::pair<uint32_t, int64_t>>(int64_t left, int64_t right)>;
/// Merges adjacent symbols of `ids` in place, always the pair of lowest rank, the leftmost of equal ones, until
/// no pair merges.
void bpe_merge(std::vector<int64_t>& ids, const MergeLookup& lookup);

}  // namespace etnp::llm
