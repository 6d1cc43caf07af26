// Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer, BPE model, post-processor and decoder,
// each component checked at load; whatever the file asks for and this reader does not do is refused, naming the
// component and its type.
#include <algorithm>
#include <array>
#include <bitset>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "core/printable.h"
#include "etnp/error.h"
#include "format/byte_source.h"
#include "llm/text_util.h"
#include "llm/tokenizer_impl.h"

namespace etnp::llm {

namespace {

using nlohmann::json;

// --- Reading the JSON -------------------------------------------------------------------------------------------

/// Field access that names the file and the field in every refusal.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorKind::InvalidArgument, path_ + ": " + message);
  }
  [[noreturn]] void unsupported(const std::string& component, const std::string& type) const {
    fail(component + " type " + quoted_name(type) + " is not supported");
  }
  const json* find(const json& object, const std::string& where, const char* key) const {
    if (!object.is_object()) fail(where + " must be an object");
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const json& object, const std::string& where, const char* key) const {
    const json* value = find(object, where, key);
    if (value == nullptr) fail(where + " has no '" + key + "'");
    return *value;
  }
  std::string string(const json& object, const std::string& where, const char* key,
                     std::optional<std::string> fallback = std::nullopt) const {
    const json* value = find(object, where, key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      fail(where + " has no '" + key + "'");
    }
    if (!value->is_string()) fail(where + "." + key + " must be a string, not " + value->type_name());
    return value->get<std::string>();
  }
  bool boolean(const json& object, const std::string& where, const char* key, bool fallback) const {
    const json* value = find(object, where, key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(where + "." + key + " must be a boolean, not " + value->type_name());
    return value->get<bool>();
  }
  int64_t integer(const json& value, const std::string& where) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
      fail(where + " must be a token id (an integer from 0 to 2^31-1), not " + value.dump());
    return value.get<int64_t>();
  }
  const json& array(const json& object, const std::string& where, const char* key) const {
    const json& value = need(object, where, key);
    if (!value.is_array()) fail(where + "." + key + " must be an array, not " + value.type_name());
    return value;
  }
  std::string type(const json& object, const std::string& where) const { return string(object, where, "type"); }
  /// The {"String": s} or {"Regex": r} pattern of Split and Replace, as a Regex.
  Regex pattern(const json& object, const std::string& where) const {
    const json& p = need(object, where, "pattern");
    if (p.is_object() && p.size() == 1 && p.contains("String") && p["String"].is_string())
      return Regex(regex_escape(p["String"].get<std::string>()), path_ + ": " + where + ".pattern");
    if (p.is_object() && p.size() == 1 && p.contains("Regex") && p["Regex"].is_string())
      return Regex(pcre2_from_oniguruma(p["Regex"].get<std::string>()), path_ + ": " + where + ".pattern");
    fail(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}, not " + p.dump());
  }
  char32_t single_char(const json& object, const std::string& where, const char* key) const {
    const std::string s = string(object, where, key);
    if (s.empty() || invalid_utf8_at(s) || next_char(s, 0).second != s.size())
      fail(where + "." + key + " must be one character, not " + quoted_name(s));
    return next_char(s, 0).first;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// --- Text pieces --------------------------------------------------------------------------------------------------

struct Piece {
  std::string text;
  bool at_start;  ///< Begins where the input text begins (Metaspace's prepend_scheme "first").
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const Reader& r, const json& object, const std::string& where, const char* fallback) {
  const std::string name = r.string(object, where, "behavior", std::string(fallback));
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  r.fail(where + ".behavior " + quoted_name(name) + " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                 "Contiguous");
}

using Ranges = std::vector<std::pair<size_t, size_t>>;

/// Splits `piece` around `matches` as the behavior says (the library's SplitDelimiterBehavior).
void split_piece(const Piece& piece, const Ranges& matches, Behavior behavior, bool invert, std::vector<Piece>& out) {
  struct Segment {
    size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;
  size_t previous = 0;
  for (const auto& [b, e] : matches) {
    if (previous < b) segments.push_back({previous, b, invert});
    segments.push_back({b, e, !invert});
    previous = e;
  }
  if (previous < piece.text.size()) segments.push_back({previous, piece.text.size(), invert});

  std::vector<std::pair<size_t, size_t>> parts;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Removed:
      for (const auto& s : segments)
        if (!s.match) parts.emplace_back(s.begin, s.end);
      break;
    case Behavior::Isolated:
      for (const auto& s : segments) parts.emplace_back(s.begin, s.end);
      break;
    case Behavior::MergedWithPrevious:
      for (const auto& s : segments) {
        if (s.match && !previous_match && !parts.empty()) parts.back().second = s.end;
        else parts.emplace_back(s.begin, s.end);
        previous_match = s.match;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->match && !previous_match && !parts.empty()) parts.back().first = it->begin;
        else parts.emplace_back(it->begin, it->end);
        previous_match = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    case Behavior::Contiguous:
      for (const auto& s : segments) {
        if (s.match == previous_match && !parts.empty()) parts.back().second = s.end;
        else parts.emplace_back(s.begin, s.end);
        previous_match = s.match;
      }
      break;
  }
  for (const auto& [b, e] : parts)
    if (e > b) out.push_back({piece.text.substr(b, e - b), piece.at_start && b == 0});
}

template <typename Predicate>
Ranges char_matches(std::string_view text, Predicate predicate) {
  Ranges matches;
  for (size_t pos = 0; pos < text.size();) {
    const auto [c, n] = next_char(text, pos);
    if (predicate(c)) matches.emplace_back(pos, pos + n);
    pos += n;
  }
  return matches;
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the others for U+0100 onwards.
const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& char_bytes() {
  static const std::unordered_map<std::string, uint8_t> table = [] {
    std::unordered_map<std::string, uint8_t> t;
    for (int b = 0; b < 256; ++b) t.emplace(byte_chars()[b], static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

std::string utf8_of(char32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// --- Normalizers ----------------------------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &out,
                                static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw Error(ErrorKind::InvalidArgument, std::string("tokenizer: normalization failed: ") +
                                                           utf8proc_errmsg(n));
    text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
      const auto [c, n] = next_char(text, pos);
      if (c == 0x130) {  // the one unconditional lowercase mapping to two characters: i + combining dot above
        out += "i\xCC\x87";
      } else {
        append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
      }
      pos += n;
    }
    text = std::move(out);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_)
      while (begin < end && is_whitespace(next_char(text, begin).first)) begin += next_char(text, begin).second;
    if (right_)
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        if (!is_whitespace(next_char(text, start).first)) break;
        end = start;
      }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content) {
  std::string out;
  size_t previous = 0;
  for (const auto& [b, e] : pattern.find_all(text)) {
    out.append(text.substr(previous, b - previous));
    out.append(content);
    previous = e;
  }
  out.append(text.substr(previous));
  return out;
}

class Replace : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = replace_all(pattern_, text, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class NormalizerSequence : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> read_normalizer(const Reader& r, const json& j, const std::string& where) {
  const std::string type = r.type(j, where);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(r.boolean(j, where, "strip_left", true), r.boolean(j, where, "strip_right", true));
  if (type == "Prepend") return std::make_unique<Prepend>(r.string(j, where, "prepend"));
  if (type == "Replace") return std::make_unique<Replace>(r.pattern(j, where), r.string(j, where, "content"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    const json& list = r.array(j, where, "normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(read_normalizer(r, list[i], where + ".normalizers[" + std::to_string(i) + "]"));
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  r.unsupported(where, type);
}

// --- Pre-tokenizers -------------------------------------------------------------------------------------------

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), regex_(use_regex ? std::optional<Regex>(Regex(kGpt2Pattern, "ByteLevel"))
                                                               : std::nullopt) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& piece : pieces) {
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' ')) piece.text = " " + piece.text;
      if (regex_) split_piece(piece, regex_->find_all(piece.text), Behavior::Isolated, false, out);
      else if (!piece.text.empty()) out.push_back(std::move(piece));
    }
    for (Piece& piece : out) {
      std::string mapped;
      for (char c : piece.text) mapped += byte_chars()[static_cast<uint8_t>(c)];
      piece.text = std::move(mapped);
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Regex pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& piece : pieces) split_piece(piece, pattern_.find_all(piece.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Regex pattern_;
  Behavior behavior_;
  bool invert_;
};

/// Splits on characters of a class: Digits, Punctuation, WhitespaceSplit.
class CharClassPre : public PreTokenizer {
 public:
  CharClassPre(bool (*predicate)(char32_t), Behavior behavior) : predicate_(predicate), behavior_(behavior) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& piece : pieces) split_piece(piece, char_matches(piece.text, predicate_), behavior_, false, out);
    pieces = std::move(out);
  }

 private:
  bool (*predicate_)(char32_t);
  Behavior behavior_;
};

enum class PrependScheme { Always, Never, First };

PrependScheme prepend_scheme_of(const Reader& r, const json& j, const std::string& where) {
  // Files older than prepend_scheme say add_prefix_space instead.
  const std::string fallback = r.boolean(j, where, "add_prefix_space", true) ? "always" : "never";
  const std::string name = r.string(j, where, "prepend_scheme", fallback);
  if (name == "always") return PrependScheme::Always;
  if (name == "never") return PrependScheme::Never;
  if (name == "first") return PrependScheme::First;
  r.fail(where + ".prepend_scheme " + quoted_name(name) + " is not one of always, never, first");
}

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(utf8_of(replacement)), scheme_(scheme), split_(split),
        marker_(regex_escape(replacement_), "Metaspace") {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& piece : pieces) {
      std::string text;
      for (char c : piece.text) {
        if (c == ' ') text += replacement_;
        else text += c;
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && piece.at_start)))
        text = replacement_ + text;
      Piece replaced{std::move(text), piece.at_start};
      if (split_) split_piece(replaced, marker_.find_all(replaced.text), Behavior::MergedWithNext, false, out);
      else if (!replaced.text.empty()) out.push_back(std::move(replaced));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Regex marker_;
};

class PreTokenizerSequence : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool is_space_char(char32_t c) { return is_whitespace(c); }

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const Reader& r, const json& j, const std::string& where) {
  const std::string type = r.type(j, where);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(r.boolean(j, where, "add_prefix_space", true),
                                          r.boolean(j, where, "use_regex", true));
  if (type == "Split")
    return std::make_unique<SplitPre>(r.pattern(j, where), behavior_of(r, j, where, "Isolated"),
                                      r.boolean(j, where, "invert", false));
  if (type == "Metaspace")
    return std::make_unique<MetaspacePre>(r.single_char(j, where, "replacement"), prepend_scheme_of(r, j, where),
                                          r.boolean(j, where, "split", true));
  if (type == "Digits")
    return std::make_unique<CharClassPre>(
        is_numeric, r.boolean(j, where, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous);
  if (type == "Punctuation")
    return std::make_unique<CharClassPre>(is_punctuation, behavior_of(r, j, where, "Isolated"));
  if (type == "WhitespaceSplit") return std::make_unique<CharClassPre>(is_space_char, Behavior::Removed);
  if (type == "Whitespace")
    return std::make_unique<SplitPre>(Regex(pcre2_from_oniguruma(R"(\w+|[^\w\s]+)"), "Whitespace"), Behavior::Removed,
                                      true);
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(std::make_unique<CharClassPre>(is_space_char, Behavior::Removed));
    steps.push_back(std::make_unique<CharClassPre>(is_punctuation, Behavior::Isolated));
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    const json& list = r.array(j, where, "pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(read_pre_tokenizer(r, list[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  r.unsupported(where, type);
}

// --- Decoders -------------------------------------------------------------------------------------------------

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

class ByteLevelDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string token_bytes;
      bool all_mapped = true;
      for (size_t pos = 0; pos < token.size() && all_mapped;) {
        const size_t n = next_char(token, pos).second;
        const auto it = char_bytes().find(token.substr(pos, n));
        if (it == char_bytes().end()) all_mapped = false;
        else token_bytes += static_cast<char>(it->second);
        pos += n;
      }
      bytes += all_mapped ? token_bytes : token;  // a token of other characters stands for its own bytes
    }
    tokens = {utf8_lossy(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, PrependScheme scheme) : scheme_(scheme) {
    append_utf8(replacement_, replacement);
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& token = tokens[i];
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (i > 0 || scheme_ == PrependScheme::Never) out += ' ';
          pos += replacement_.size();
        } else {
          out += token[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = replace_all(pattern_, token, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

/// The byte value of a "<0xAB>" token.
std::optional<uint8_t> byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;  // bytes of consecutive byte tokens
    size_t pending_count = 0;
    const auto flush = [&] {
      if (pending_count == 0) return;
      if (invalid_utf8_at(pending)) {
        for (size_t k = 0; k < pending_count; ++k) out.emplace_back("\xEF\xBF\xBD");
      } else {
        out.push_back(pending);
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& token : tokens) {
      if (const auto b = byte_token_value(token)) {
        pending += static_cast<char>(*b);
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens = {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(utf8_of(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t k = 0; k < start_ && token.compare(begin, content_.size(), content_) == 0 && begin < end; ++k)
        begin += content_.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k)
        end -= content_.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class DecoderSequence : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t count_field(const Reader& r, const json& j, const std::string& where, const char* key) {
  const json& v = r.need(j, where, key);
  if (!v.is_number_unsigned()) r.fail(where + "." + key + " must be a non-negative integer, not " + v.dump());
  return v.get<size_t>();
}

std::unique_ptr<Decoder> read_decoder(const Reader& r, const json& j, const std::string& where) {
  const std::string type = r.type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(r.single_char(j, where, "replacement"), prepend_scheme_of(r, j, where));
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(r.pattern(j, where), r.string(j, where, "content"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(r.single_char(j, where, "content"), count_field(r, j, where, "start"),
                                          count_field(r, j, where, "stop"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    const json& list = r.array(j, where, "decoders");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(read_decoder(r, list[i], where + ".decoders[" + std::to_string(i) + "]"));
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  r.unsupported(where, type);
}

// --- Post-processors ------------------------------------------------------------------------------------------

/// What a post-processor adds around a single sequence: ids before and after it.
struct Template {
  std::vector<int64_t> before, after;
};

void read_post_processor(const Reader& r, const json& j, const std::string& where, Template& t) {
  const std::string type = r.type(j, where);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    const json& specials = r.need(j, where, "special_tokens");
    if (!specials.is_object()) r.fail(where + ".special_tokens must be an object");
    const json& single = r.array(j, where, "single");
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string item = where + ".single[" + std::to_string(i) + "]";
      const json& piece = single[i];
      if (piece.is_object() && piece.contains("Sequence")) {
        const std::string id = r.string(piece["Sequence"], item + ".Sequence", "id");
        if (id != "A") r.fail(item + " names sequence " + quoted_name(id) + "; a single sequence is 'A'");
        if (seen_sequence) r.fail(item + ": sequence A appears twice");
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const std::string name = r.string(piece["SpecialToken"], item + ".SpecialToken", "id");
        const json* special = r.find(specials, where + ".special_tokens", name.c_str());
        if (special == nullptr) r.fail(item + " names special token " + quoted_name(name) + ", which special_tokens lacks");
        const json& ids = r.array(*special, where + ".special_tokens." + name, "ids");
        for (const json& id : ids)
          (seen_sequence ? t.after : t.before).push_back(r.integer(id, where + ".special_tokens." + name + ".ids"));
      } else {
        r.fail(item + " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}, not " + piece.dump());
      }
    }
    if (!seen_sequence) r.fail(where + ".single has no Sequence A");
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto token = [&](const char* key) {
      const json& pair = r.need(j, where, key);
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string())
        r.fail(where + "." + key + " must be [token, id], not " + pair.dump());
      return r.integer(pair[1], where + "." + key + "[1]");
    };
    t.before.push_back(token("cls"));
    t.after.push_back(token("sep"));
    return;
  }
  if (type == "Sequence") {
    const json& list = r.array(j, where, "processors");
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(r, list[i], where + ".processors[" + std::to_string(i) + "]", t);
    return;
  }
  r.unsupported(where, type);
}

// --- The BPE model ----------------------------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int64_t id;
  bool single_word, lstrip, rstrip, normalized, special;
};

class HfTokenizer : public Tokenizer::Impl {
 public:
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const override;
  std::optional<int64_t> token_id(std::string_view piece) const override {
    const auto it = token_ids_.find(std::string(piece));
    return it == token_ids_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::string token_to_piece(int64_t id) const override { return pieces_[static_cast<size_t>(id)]; }
  bool is_special(int64_t id) const override { return special_[static_cast<size_t>(id)]; }

  void load(const Reader& r, const json& root);
  /// BOS and EOS by the names tokenizer_config.json gives; without them, BOS is the first token the
  /// post-processor adds (or a known begin token), and EOS the known end tokens among the special tokens.
  void name_bos_eos(const std::optional<std::string>& bos_name, const std::optional<std::string>& eos_name);

 private:
  struct Match {
    size_t begin, end;
    int64_t id;
  };
  /// Added tokens (from `tokens`, longest first at each position) in `text`, with lstrip/rstrip/single_word.
  std::vector<Match> find_added(std::string_view text, const std::vector<const AddedToken*>& tokens) const;
  void encode_word(std::string_view word, std::vector<int64_t>& out) const;
  void read_model(const Reader& r, const json& model);
  void read_added_tokens(const Reader& r, const json& list);

  // The model.
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, std::pair<uint32_t, int64_t>> merges_;  ///< (left << 32 | right) -> rank, result
  std::optional<int64_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string continuing_prefix_, end_of_word_suffix_;

  // Everything else.
  std::vector<AddedToken> added_;
  std::vector<const AddedToken*> raw_added_, normalized_added_;  ///< Matched before / after normalizing.
  std::bitset<256> added_first_bytes_;  ///< The first bytes of all added tokens: positions to try.
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  Template template_;
  std::unordered_map<std::string, int64_t> token_ids_;  ///< vocab and added tokens
  std::vector<std::string> pieces_;                     ///< by id
  std::vector<bool> special_;                           ///< by id
};

void HfTokenizer::read_model(const Reader& r, const json& model) {
  const std::string where = "model";
  const json* type = r.find(model, where, "type");
  if (type != nullptr && !type->is_string()) r.fail("model.type must be a string");
  const std::string kind = type != nullptr ? type->get<std::string>() : (model.contains("merges") ? "BPE" : "?");
  if (kind != "BPE") r.unsupported("model", kind);

  if (const json* dropout = r.find(model, where, "dropout"))
    if (!dropout->is_number() || dropout->get<double>() != 0.0)
      r.fail("model.dropout " + dropout->dump() + " is not supported (encoding would be random)");
  const json& vocab = r.need(model, where, "vocab");
  if (!vocab.is_object()) r.fail(std::string("model.vocab must be an object of token to id, not ") + vocab.type_name());
  for (const auto& [token, id] : vocab.items()) {
    const int64_t value = r.integer(id, "model.vocab['" + token + "']");
    if (!vocab_.emplace(token, value).second) r.fail("model.vocab has token " + quoted_name(token) + " twice");
  }
  continuing_prefix_ = r.string(model, where, "continuing_subword_prefix", std::string());
  end_of_word_suffix_ = r.string(model, where, "end_of_word_suffix", std::string());
  fuse_unk_ = r.boolean(model, where, "fuse_unk", false);
  byte_fallback_ = r.boolean(model, where, "byte_fallback", false);
  ignore_merges_ = r.boolean(model, where, "ignore_merges", false);
  if (const json* unk = r.find(model, where, "unk_token")) {
    if (!unk->is_string()) r.fail("model.unk_token must be a string");
    const auto it = vocab_.find(unk->get<std::string>());
    if (it == vocab_.end()) r.fail("model.unk_token " + quoted_name(unk->get<std::string>()) + " is not in model.vocab");
    unk_ = it->second;
  }

  const json& merges = r.array(model, where, "merges");
  const auto id_of = [&](const std::string& token, size_t i) {
    const auto it = vocab_.find(token);
    if (it == vocab_.end())
      r.fail("model.merges[" + std::to_string(i) + "] names " + quoted_name(token) + ", which is not in model.vocab");
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size())
        r.fail("model.merges[" + std::to_string(i) + "] " + quoted_name(s) + " is not two tokens separated by a space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(i) + "] must be \"left right\" or [left, right], not " + m.dump());
    }
    const int64_t a = id_of(left, i), b = id_of(right, i);
    // With a continuing-subword prefix, the right token carries it and the merged one does not repeat it.
    std::string merged = left;
    merged += !continuing_prefix_.empty() && right.starts_with(continuing_prefix_)
                  ? right.substr(continuing_prefix_.size())
                  : right;
    const int64_t result = id_of(merged, i);
    merges_[static_cast<uint64_t>(a) << 32 | static_cast<uint64_t>(b)] = {static_cast<uint32_t>(i), result};
  }
}

void HfTokenizer::read_added_tokens(const Reader& r, const json& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    AddedToken token;
    token.content = r.string(t, where, "content");
    if (token.content.empty()) r.fail(where + ".content is empty");
    token.id = r.integer(r.need(t, where, "id"), where + ".id");
    token.special = r.boolean(t, where, "special", false);
    token.single_word = r.boolean(t, where, "single_word", false);
    token.lstrip = r.boolean(t, where, "lstrip", false);
    token.rstrip = r.boolean(t, where, "rstrip", false);
    token.normalized = r.boolean(t, where, "normalized", !token.special);
    added_.push_back(std::move(token));
  }
}

void HfTokenizer::load(const Reader& r, const json& root) {
  if (!root.is_object()) r.fail("the top level must be a JSON object");
  if (r.find(root, "tokenizer.json", "truncation") != nullptr)
    r.fail("truncation is not supported (generation needs every token of the prompt)");
  if (r.find(root, "tokenizer.json", "padding") != nullptr) r.fail("padding is not supported");
  read_model(r, r.need(root, "tokenizer.json", "model"));
  if (const json* list = r.find(root, "tokenizer.json", "added_tokens")) {
    if (!list->is_array()) r.fail("added_tokens must be an array");
    read_added_tokens(r, *list);
  }
  if (const json* j = r.find(root, "tokenizer.json", "normalizer")) normalizer_ = read_normalizer(r, *j, "normalizer");
  if (const json* j = r.find(root, "tokenizer.json", "pre_tokenizer"))
    pre_tokenizer_ = read_pre_tokenizer(r, *j, "pre_tokenizer");
  if (const json* j = r.find(root, "tokenizer.json", "post_processor"))
    read_post_processor(r, *j, "post_processor", template_);
  if (const json* j = r.find(root, "tokenizer.json", "decoder")) decoder_ = read_decoder(r, *j, "decoder");

  // The id space: the model's vocabulary, then the added tokens (which may reuse its ids or extend them).
  int64_t size = 0;
  for (const auto& [token, id] : vocab_) size = std::max(size, id + 1);
  for (const auto& t : added_) size = std::max(size, t.id + 1);
  pieces_.assign(static_cast<size_t>(size), std::string());
  special_.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : vocab_) pieces_[static_cast<size_t>(id)] = token;
  token_ids_ = vocab_;
  for (const auto& t : added_) {
    pieces_[static_cast<size_t>(t.id)] = t.content;
    special_[static_cast<size_t>(t.id)] = t.special;
    token_ids_[t.content] = t.id;
  }
  for (const auto* ids : {&template_.before, &template_.after})
    for (int64_t id : *ids)
      if (id >= size) r.fail("post_processor adds token id " + std::to_string(id) + ", which is not in the vocabulary");
  vocab_size = size;
  format = "tokenizer.json";

  for (auto& t : added_) {
    if (t.normalized && normalizer_) normalizer_->normalize(t.content);
    if (t.content.empty()) r.fail("added token " + std::to_string(t.id) + " normalizes to nothing");
    pieces_[static_cast<size_t>(t.id)] = t.content;  // the library decodes a normalized token as normalized
    (t.normalized ? normalized_added_ : raw_added_).push_back(&t);
    added_first_bytes_.set(static_cast<uint8_t>(t.content[0]));
  }
  // Longest first, so that the first token matching at a position is the longest.
  for (auto* list : {&raw_added_, &normalized_added_})
    std::stable_sort(list->begin(), list->end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
}

void HfTokenizer::name_bos_eos(const std::optional<std::string>& bos_name,
                               const std::optional<std::string>& eos_name) {
  const auto special = [this](const char* name) -> std::optional<int64_t> {
    const auto id = token_id(name);
    return id && is_special(*id) ? id : std::nullopt;
  };
  if (bos_name) bos = token_id(*bos_name);
  else if (!template_.before.empty()) bos = template_.before.front();
  for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"})
    if (!bos && !bos_name) bos = special(name);
  if (eos_name) {
    if (const auto id = token_id(*eos_name)) eos.push_back(*id);
    return;
  }
  for (const char* name : {"</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>",
                           "<|im_end|>", "<end_of_turn>", "<|end|>"})
    if (const auto id = special(name)) eos.push_back(*id);
}

bool ends_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  const char32_t c = next_char(text, start).first;
  return is_alphanumeric(c) || c == '_';
}

bool starts_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  const char32_t c = next_char(text, 0).first;
  return is_alphanumeric(c) || c == '_';
}

std::vector<HfTokenizer::Match> HfTokenizer::find_added(std::string_view text,
                                                        const std::vector<const AddedToken*>& tokens) const {
  std::vector<Match> matches;
  if (tokens.empty()) return matches;
  size_t covered = 0;  // the end of the last match, whitespace it took included
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* found = nullptr;
    if (!added_first_bytes_.test(static_cast<uint8_t>(text[pos]))) {
      ++pos;
      continue;
    }
    for (const AddedToken* t : tokens)
      if (text.compare(pos, t->content.size(), t->content) == 0) {
        found = t;
        break;
      }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + found->content.size();
    pos = end;
    if (found->single_word && (ends_with_word_char(text.substr(0, begin)) || starts_with_word_char(text.substr(end))))
      continue;
    if (found->lstrip) {
      while (begin > covered) {
        size_t start = begin - 1;
        while (start > covered && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        if (!is_whitespace(next_char(text, start).first)) break;
        begin = start;
      }
    }
    if (found->rstrip)
      while (end < text.size() && is_whitespace(next_char(text, end).first)) end += next_char(text, end).second;
    matches.push_back({begin, end, found->id});
    covered = end;
    pos = std::max(pos, end);
  }
  return matches;
}

void HfTokenizer::encode_word(std::string_view word, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int64_t> symbols;
  bool pending_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = next_char(word, pos).second;
    std::string s(word.substr(pos, n));
    if (pos > 0 && !continuing_prefix_.empty()) s = continuing_prefix_ + s;
    pos += n;
    if (pos == word.size() && !end_of_word_suffix_.empty()) s += end_of_word_suffix_;
    if (const auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk) symbols.push_back(*unk_);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (char c : s) {
        static constexpr char kHex[] = "0123456789ABCDEF";
        const auto b = static_cast<uint8_t>(c);
        const auto it = vocab_.find(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == s.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_) {
      if (pending_unk && !fuse_unk_) symbols.push_back(*unk_);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(*unk_);
  bpe_merge(symbols, [this](int64_t a, int64_t b) -> std::optional<std::pair<uint32_t, int64_t>> {
    const auto it = merges_.find(static_cast<uint64_t>(a) << 32 | static_cast<uint64_t>(b));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  });
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = template_.before;
  // Calls `piece(begin, end)` for the text between matches and pushes the matches' ids.
  const auto around = [&ids](std::string_view s, const std::vector<Match>& matches, const auto& piece) {
    size_t previous = 0;
    for (const Match& m : matches) {
      if (m.begin > previous) piece(previous, m.begin);
      ids.push_back(m.id);
      previous = m.end;
    }
    if (previous < s.size()) piece(previous, s.size());
  };
  around(text, find_added(text, raw_added_), [&](size_t begin, size_t end) {
    std::string normalized(text.substr(begin, end - begin));
    if (normalizer_) normalizer_->normalize(normalized);
    around(normalized, find_added(normalized, normalized_added_), [&](size_t b, size_t e) {
      std::vector<Piece> pieces{{normalized.substr(b, e - b), begin == 0 && b == 0}};
      if (pre_tokenizer_) pre_tokenizer_->split(pieces);
      for (const Piece& p : pieces) encode_word(p.text, ids);
    });
  });
  if (add_special_tokens) ids.insert(ids.end(), template_.after.begin(), template_.after.end());
  return ids;
}

std::string HfTokenizer::decode(std::span<const int64_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    const auto i = static_cast<size_t>(id);
    if (skip_special_tokens && special_[i]) continue;
    tokens.push_back(pieces_[i]);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode(tokens);
    for (const auto& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  return text;
}

/// The token named by a tokenizer_config.json entry: a string, or an object with "content".
std::optional<std::string> config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_hf_json(std::string_view bytes, const std::string& path) {
  const Reader reader(path);
  json root;
  try {
    root = json::parse(bytes);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large for a double
    reader.fail("not valid JSON: " + printable(e.what(), 240));  // the parser quotes the file's bytes
  }
  auto tokenizer = std::make_shared<HfTokenizer>();
  try {
    tokenizer->load(reader, root);
  } catch (const json::exception& e) {  // a type the accessors did not foresee
    reader.fail("malformed tokenizer.json: " + printable(e.what(), 240));
  }

  // BOS and EOS: tokenizer.json does not name them; its tokenizer_config.json does, when it lies beside it.
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::optional<std::string> bos_name, eos_name;
  if (std::filesystem::exists(config_path)) {
    json config;
    try {
      const auto source = format::ByteSource::map_file(config_path.string());
      const auto span = source->bytes();
      config = json::parse(std::string_view(reinterpret_cast<const char*>(span.data()), span.size()));
    } catch (const json::exception& e) {
      throw Error(ErrorKind::InvalidArgument, config_path.string() + ": not valid JSON: " + printable(e.what(), 240));
    } catch (const Error& e) {
      throw Error(ErrorKind::InvalidArgument, e.detail());
    }
    if (config.is_object()) {
      bos_name = config_token(config, "bos_token");
      eos_name = config_token(config, "eos_token");
    }
  }
  tokenizer->name_bos_eos(bos_name, eos_name);
  return tokenizer;
}

}  // namespace etnp::llm
