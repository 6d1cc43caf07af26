// tiktoken files (Llama 3's tokenizer.model): "base64(token) rank" lines, byte-pair merges by rank, the Llama 3
// pre-tokenizer pattern and special tokens as pytorch-tokenizers defines them.
#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "core/printable.h"
#include "etnp/error.h"
#include "llm/text_util.h"
#include "llm/tokenizer_impl.h"

namespace etnp::llm {

namespace {

// Llama 3's pre-tokenizer (cl100k's pattern).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Llama 3's 256 special tokens, numbered after the ranks: these twelve, then reserved ones up to 256 in all.
constexpr const char* kLlama3BasicSpecials[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>", "<|image|>"};
constexpr size_t kLlama3SpecialCount = 256;

class Tiktoken : public Tokenizer::Impl {
 public:
  Tiktoken() : pattern_(kLlama3Pattern, "tiktoken pre-tokenizer") {}

  void load(std::string_view bytes, const std::string& path);
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (int64_t id : ids)
      if (!skip_special_tokens || id < base_count_) bytes += pieces_[static_cast<size_t>(id)];
    return utf8_lossy(bytes);
  }
  std::optional<int64_t> token_id(std::string_view piece) const override {
    const auto it = ids_.find(std::string(piece));
    return it == ids_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::string token_to_piece(int64_t id) const override { return pieces_[static_cast<size_t>(id)]; }
  bool is_special(int64_t id) const override { return id >= base_count_; }

 private:
  void encode_ordinary(std::string_view text, std::vector<int64_t>& out) const;

  Regex pattern_;
  std::unordered_map<std::string, int64_t> ranks_;  ///< ordinary tokens' bytes -> rank (= id)
  std::unordered_map<std::string, int64_t> ids_;    ///< every token
  std::vector<std::string> pieces_;                 ///< by id
  std::vector<std::pair<std::string, int64_t>> specials_;  ///< longest first
  int64_t base_count_ = 0;
};

void Tiktoken::load(std::string_view bytes, const std::string& path) {
  const auto fail = [&](size_t line, const std::string& message) {
    throw Error(ErrorKind::InvalidArgument, path + ": line " + std::to_string(line) + ": " + message +
                                                " (a tiktoken file has lines of base64 token and rank)");
  };
  std::vector<std::pair<std::string, int64_t>> entries;
  size_t line_number = 0;
  for (size_t pos = 0; pos < bytes.size();) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view line = bytes.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) fail(line_number, "no rank after the token");
    const std::string_view token = line.substr(0, space);
    std::string_view rank_text = line.substr(space + 1);
    while (!rank_text.empty() && (rank_text.front() == ' ' || rank_text.front() == '\t')) rank_text.remove_prefix(1);
    const auto decoded = base64_decode(token);
    if (!decoded) fail(line_number, quoted_name(std::string(token)) + " is not base64");
    int64_t rank = -1;
    const auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || ptr != rank_text.data() + rank_text.size() || rank < 0)
      fail(line_number, "rank " + quoted_name(std::string(rank_text)) + " is not a non-negative integer");
    entries.emplace_back(*decoded, rank);
  }
  if (entries.empty()) throw Error(ErrorKind::InvalidArgument, path + ": the tiktoken file has no tokens");
  base_count_ = static_cast<int64_t>(entries.size());
  pieces_.assign(entries.size() + kLlama3SpecialCount, std::string());
  std::vector<bool> seen(entries.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [token, rank] = entries[i];
    if (rank >= base_count_)
      throw Error(ErrorKind::InvalidArgument, path + ": rank " + std::to_string(rank) + " is out of range: the " +
                                                  std::to_string(base_count_) + " tokens must have ranks 0 to " +
                                                  std::to_string(base_count_ - 1));
    if (seen[static_cast<size_t>(rank)])
      throw Error(ErrorKind::InvalidArgument, path + ": rank " + std::to_string(rank) + " is given twice");
    seen[static_cast<size_t>(rank)] = true;
    if (!ranks_.emplace(token, rank).second)
      throw Error(ErrorKind::InvalidArgument, path + ": token " + quoted_name(token) + " (rank " +
                                                  std::to_string(rank) + ") is given twice");
    pieces_[static_cast<size_t>(rank)] = token;
  }
  for (int b = 0; b < 256; ++b)
    if (!ranks_.contains(std::string(1, static_cast<char>(b)))) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      throw Error(ErrorKind::InvalidArgument, path + ": the tiktoken file lacks the single-byte token 0x" +
                                                  std::string{kHex[b >> 4], kHex[b & 15]} +
                                                  " (every byte must be a token)");
    }
  ids_ = ranks_;
  for (size_t i = 0; i < kLlama3SpecialCount; ++i) {
    const size_t basic = std::size(kLlama3BasicSpecials);
    const std::string name = i < basic ? kLlama3BasicSpecials[i]
                                       : "<|reserved_special_token_" + std::to_string(i - basic + 2) + "|>";
    const int64_t id = base_count_ + static_cast<int64_t>(i);
    pieces_[static_cast<size_t>(id)] = name;
    ids_[name] = id;  // a special token's text is never also an ordinary token in Llama 3's file
    specials_.emplace_back(name, id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  vocab_size = static_cast<int64_t>(pieces_.size());
  format = "tiktoken";
  bos = base_count_;
  eos = {base_count_ + 1, base_count_ + 8, base_count_ + 9};  // <|end_of_text|>, <|eom_id|>, <|eot_id|>
}

void Tiktoken::encode_ordinary(std::string_view text, std::vector<int64_t>& out) const {
  for (const auto& [begin, end] : pattern_.find_all(text)) {
    const std::string piece(text.substr(begin, end - begin));
    if (const auto it = ranks_.find(piece); it != ranks_.end()) {
      out.push_back(it->second);
      continue;
    }
    std::vector<int64_t> ids;
    for (char c : piece) ids.push_back(ranks_.at(std::string(1, c)));
    bpe_merge(ids, [this](int64_t a, int64_t b) -> std::optional<std::pair<uint32_t, int64_t>> {
      const auto it = ranks_.find(pieces_[static_cast<size_t>(a)] + pieces_[static_cast<size_t>(b)]);
      if (it == ranks_.end()) return std::nullopt;
      return std::pair<uint32_t, int64_t>{static_cast<uint32_t>(it->second), it->second};
    });
    out.insert(out.end(), ids.begin(), ids.end());
  }
}

std::vector<int64_t> Tiktoken::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids.push_back(*bos);
  size_t previous = 0;
  for (size_t pos = text.find("<|"); pos != std::string_view::npos; pos = text.find("<|", pos)) {
    const auto it = std::find_if(specials_.begin(), specials_.end(),
                                 [&](const auto& s) { return text.compare(pos, s.first.size(), s.first) == 0; });
    if (it == specials_.end()) {
      pos += 2;
      continue;
    }
    encode_ordinary(text.substr(previous, pos - previous), ids);
    ids.push_back(it->second);
    pos += it->first.size();
    previous = pos;
  }
  encode_ordinary(text.substr(previous), ids);
  return ids;
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_tiktoken(std::string_view bytes, const std::string& path) {
  auto tokenizer = std::make_shared<Tiktoken>();
  tokenizer->load(bytes, path);
  return tokenizer;
}

}  // namespace etnp::llm
