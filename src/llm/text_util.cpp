#include "llm/text_util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <queue>

#include "etnp/error.h"

namespace etnp::llm {

namespace {

// Length of the valid UTF-8 sequence at text[pos], or 0 when invalid; `subpart` gets the length of the longest
// prefix of a valid sequence there (at least 1), the bytes one U+FFFD replaces.
size_t valid_sequence_at(std::string_view text, size_t pos, size_t& subpart) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  subpart = 1;
  if (b0 < 0x80) return 1;
  size_t length;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return 0;
    const uint8_t b = byte(pos + i);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return 0;
    subpart = i + 1;
  }
  return length;
}

}  // namespace

std::pair<char32_t, size_t> next_char(std::string_view text, size_t pos) {
  utf8proc_int32_t c = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                                  static_cast<utf8proc_ssize_t>(text.size() - pos), &c);
  if (n <= 0) return {0xFFFD, 1};
  return {static_cast<char32_t>(c), static_cast<size_t>(n)};
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::optional<size_t> invalid_utf8_at(std::string_view text) {
  size_t subpart = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = valid_sequence_at(text, pos, subpart);
    if (n == 0) return pos;
    pos += n;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t subpart = 0;
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t n = valid_sequence_at(bytes, pos, subpart);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      pos += subpart;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_alphanumeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// --- Regex ------------------------------------------------------------------------------------------------------

Regex::Regex(const std::string& pattern, const std::string& what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(ErrorKind::InvalidArgument, what + ": the pattern does not compile at offset " +
                                                std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, pcre2_match interprets
  code_ = std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::vector<std::pair<size_t, size_t>> matches;
  size_t start = 0;
  uint32_t options = 0;
  while (start <= subject.size()) {
    int rc = pcre2_match(code, text, subject.size(), start, options | PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // a long subject: the interpreter uses the heap instead
      rc = pcre2_match(code, text, subject.size(), start, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(),
                       nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at `start` after an empty one: step over one character.
      start += next_char(subject, start).second;
      options = 0;
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(ErrorKind::InvalidArgument, std::string("regular expression match failed: ") +
                                                  reinterpret_cast<char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) matches.emplace_back(begin, end);
    start = end;
    options = end == begin ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    if (end == begin && begin == subject.size()) break;
  }
  return matches;
}

std::string pcre2_from_oniguruma(std::string_view pattern) {
  constexpr std::string_view kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 'w') {
        out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
      } else if (next == 'W' && !in_class) {
        out += "[^" + std::string(kWord) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class && out.back() != '[' && !out.ends_with("[^")) in_class = false;
    out += c;
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// --- base64 -----------------------------------------------------------------------------------------------------

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(text[i + k]);
      if (v < 0) return std::nullopt;
      bits = bits << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(bits >> 16);
    if (pad < 2) out += static_cast<char>(bits >> 8 & 0xFF);
    if (pad < 1) out += static_cast<char>(bits & 0xFF);
  }
  return out;
}

// --- BPE --------------------------------------------------------------------------------------------------------

void bpe_merge(std::vector<int64_t>& ids, const MergeLookup& lookup) {
  // A word can be a whole prompt (Llama 2's tokenizer.json has no pre-tokenizer), so merges come from a heap of
  // candidate pairs over a linked list of symbols: O(n log n). A candidate is stale once either symbol changed.
  const size_t n = ids.size();
  if (n < 2) return;
  std::vector<size_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i - 1;  // wraps to SIZE_MAX for the first: "none"
    next[i] = i + 1;  // n for the last: "none"
  }
  struct Candidate {
    uint32_t rank;
    size_t left;  // the left symbol's position: the leftmost of equal ranks merges first
    int64_t left_id, right_id, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](size_t left) {
    const size_t right = next[left];
    if (right >= n) return;
    if (const auto m = lookup(ids[left], ids[right])) heap.push({m->first, left, ids[left], ids[right], m->second});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t right = next[c.left];
    if (!alive[c.left] || right >= n || ids[c.left] != c.left_id || ids[right] != c.right_id) continue;
    ids[c.left] = c.result;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] < n) prev[next[right]] = c.left;
    if (prev[c.left] < n) consider(prev[c.left]);
    consider(c.left);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace etnp::llm
