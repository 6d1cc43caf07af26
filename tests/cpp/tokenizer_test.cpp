// The tokenizers of include/etnp/tokenizer.h on small files written here, whose ids follow from the definitions
// by hand; tests/live/test_tokenizers_live.py compares them with the reference libraries on trained ones.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "etnp/error.h"
#include "etnp/tokenizer.h"

namespace etnp {
namespace {

using nlohmann::json;
using Ids = std::vector<int64_t>;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("etnp_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const auto path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  Tokenizer load_json(const json& j, const std::string& name = "tokenizer.json") {
    return Tokenizer::load(write(name, j.dump()));
  }
  /// Loading `bytes` fails with InvalidArgument and a message holding `needle`.
  void expect_refused(const std::string& bytes, const std::string& needle, const std::string& name = "t.json") {
    const std::string path = write(name, bytes);
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "loaded; expected a refusal with: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the message names the file: " << e.what();
    }
  }

  std::filesystem::path dir_;
};

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// A BPE model over `vocab` with `merges`, no other components.
json bpe_json(const json& vocab, const json& merges) {
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::string streamed(const Tokenizer& t, const Ids& ids, std::vector<std::string>* steps = nullptr) {
  StreamDecoder decoder(t);
  std::string all;
  for (int64_t id : ids) {
    std::string s = decoder.step(id);
    if (steps) steps->push_back(s);
    all += s;
  }
  all += decoder.flush();
  return all;
}

// --- tokenizer.json ---------------------------------------------------------------------------------------------

TEST_F(TokenizerTest, BpeMergesLowestRankLeftmostFirst) {
  // a b c a b: (a, b) has rank 0 at two places; the left one merges first, then the right one, then (ab, c).
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"ca", 5}};
  // "c a" would make "ca", but it ranks after "a b", which takes the a first. Both merge forms are accepted.
  const Tokenizer t = load_json(bpe_json(vocab, json::array({"a b", json::array({"ab", "c"}), "c a"})));
  EXPECT_EQ(t.encode("abcab", false), (Ids{4, 3}));
  EXPECT_EQ(t.encode("cab", false), (Ids{2, 3}));
  EXPECT_EQ(t.encode("ca", false), (Ids{5}));
  EXPECT_EQ(t.vocab_size(), 6);
  EXPECT_EQ(t.format(), "tokenizer.json");
  EXPECT_EQ(t.token_id("abc"), 4);
  EXPECT_EQ(t.token_id("zz"), std::nullopt);
  EXPECT_EQ(t.token_to_piece(3), "ab");
  // No decoder: the tokens joined by spaces, as the library does.
  EXPECT_EQ(t.decode(Ids{4, 3}), "abc ab");
  EXPECT_EQ(t.bos_id(), std::nullopt);
  EXPECT_TRUE(t.eos_ids().empty());
}

TEST_F(TokenizerTest, ByteLevelRoundTrip) {
  // GPT-2's byte alphabet: token id = byte value; printable bytes are themselves, space is U+0120 (Ġ).
  json vocab = json::object();
  std::vector<std::string> chars;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int c = printable ? b : next++;
    std::string s;
    if (c < 0x80) {
      s = std::string(1, static_cast<char>(c));
    } else {
      s = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    vocab[s] = b;
  }
  vocab["hi"] = 256;
  vocab["\xC4\xA0t"] = 257;  // "Ġt"
  json j = bpe_json(vocab, json::array({"h i", "\xC4\xA0 t"}));
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}};
  const Tokenizer t = load_json(j);
  EXPECT_EQ(t.encode("hi there", true), (Ids{256, 257, 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(t.decode(Ids{256, 257, 'h', 'e', 'r', 'e'}), "hi there");
  // "é" is C3 A9: two byte tokens; the first alone is an incomplete character.
  EXPECT_EQ(t.encode("é", false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t.decode(Ids{0xC3}), "\xEF\xBF\xBD");
  std::vector<std::string> steps;
  EXPECT_EQ(streamed(t, Ids{256, 0xE4, 0xB8, 0xAD, 257}, &steps), "hi\xE4\xB8\xAD t");
  EXPECT_EQ(steps, (std::vector<std::string>{"hi", "", "", "\xE4\xB8\xAD", " t"}));
  // An incomplete character at the end comes out of flush() as U+FFFD.
  StreamDecoder decoder(t);
  EXPECT_EQ(decoder.step(0xE4), "");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");
  // add_prefix_space puts a space before the text: " hi" is one piece, Ġ (byte 0x20) then the merged "hi".
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(load_json(j, "prefixed.json").encode("hi", false), (Ids{0x20, 256}));
}

/// Llama 2 / Mistral's tokenizer.json layout: Metaspace by normalizer, byte fallback, <s> by template.
json llama2_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = 3 + b;
  vocab["\xE2\x96\x81"] = 259;             // ▁
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab["\xE2\x96\x81h"] = 262;            // ▁h
  vocab["\xE2\x96\x81hi"] = 263;           // ▁hi
  json j = bpe_json(vocab, json::array({"\xE2\x96\x81 h", "\xE2\x96\x81h i"}));
  j["model"]["unk_token"] = "<unk>";
  j["model"]["byte_fallback"] = true;
  j["model"]["fuse_unk"] = true;
  const auto special = [](const char* content, int id) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  j["added_tokens"] = json::array({special("<unk>", 0), special("<s>", 1), special("</s>", 2)});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                                   {"content", "\xE2\x96\x81"}}})}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}},
                                             {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return j;
}

TEST_F(TokenizerTest, MetaspaceByteFallbackAndTemplate) {
  const Tokenizer t = load_json(llama2_json());
  // "hi é" -> "▁hi▁é": ▁ h i merge to ▁hi; é is not a token, so its bytes C3 A9 are (ids 3 + byte).
  const Ids ids = t.encode("hi \xC3\xA9", true);
  EXPECT_EQ(ids, (Ids{1, 263, 259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode("hi \xC3\xA9", false), (Ids{263, 259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), (Ids{2}));
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(263));
  EXPECT_EQ(t.decode(ids), "<s> hi \xC3\xA9");
  EXPECT_EQ(t.decode(ids, true), "hi \xC3\xA9");
  // A lone continuation byte is invalid: one U+FFFD per byte token.
  EXPECT_EQ(t.decode(Ids{3 + 0xA9, 3 + 0xA9}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Special tokens written in the text are matched before normalization.
  EXPECT_EQ(t.encode("hi</s>hi", false), (Ids{263, 2, 263}));
  // A character with neither a token nor byte tokens would be unk; here every byte has one.
  std::vector<std::string> steps;
  const Ids text_ids(ids.begin() + 1, ids.end());
  EXPECT_EQ(streamed(t, text_ids, &steps), "hi \xC3\xA9");
  EXPECT_EQ(steps, (std::vector<std::string>{"hi", " ", "", "\xC3\xA9"}));
}

TEST_F(TokenizerTest, TokenizerConfigNamesBosAndEos) {
  write("tokenizer_config.json", R"({"bos_token": {"content": "</s>"}, "eos_token": "<unk>"})");
  const Tokenizer t = load_json(llama2_json());
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_ids(), (Ids{0}));
}

TEST_F(TokenizerTest, UnknownAndFusedUnknown) {
  json j = bpe_json({{"<unk>", 0}, {"a", 1}}, json::array());
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load_json(j, "u1.json").encode("axya", false), (Ids{1, 0, 0, 1}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(load_json(j, "u2.json").encode("axya", false), (Ids{1, 0, 1}));
}

TEST_F(TokenizerTest, AddedTokenOptions) {
  json j = bpe_json({{"a", 0}, {" ", 1}, {"<m>", 2}, {"b", 3}}, json::array());
  j["added_tokens"] = json::array({{{"id", 2}, {"content", "<m>"}, {"single_word", false}, {"lstrip", true},
                                    {"rstrip", true}, {"normalized", false}, {"special", true}},
                                   {{"id", 4}, {"content", "ab"}, {"single_word", true}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", true}, {"special", false}}});
  const Tokenizer t = load_json(j);
  EXPECT_EQ(t.vocab_size(), 5);  // the added token "ab" extends the vocabulary
  // lstrip/rstrip: the spaces around <m> belong to it.
  EXPECT_EQ(t.encode("a  <m>  a", false), (Ids{0, 2, 0}));
  // single_word: "ab" only on its own, not inside "aab".
  EXPECT_EQ(t.encode("ab a", false), (Ids{4, 1, 0}));
  EXPECT_EQ(t.encode("aab", false), (Ids{0, 0, 3}));
  EXPECT_FALSE(t.is_special(4));
  EXPECT_EQ(t.decode(Ids{0, 2, 4}, true), "a ab");
}

TEST_F(TokenizerTest, NormalizedAddedTokensMatchAfterNormalizing) {
  json j = bpe_json({{"x", 0}}, json::array());
  j["normalizer"] = {{"type", "Lowercase"}};
  j["added_tokens"] = json::array({{{"id", 1}, {"content", "HELLO"}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", true}, {"special", false}}});
  const Tokenizer t = load_json(j);
  EXPECT_EQ(t.encode("xHeLLox", false), (Ids{0, 1, 0}));
  // As in the library: found by its content, decoded as its normalized form.
  EXPECT_EQ(t.token_id("HELLO"), 1);
  EXPECT_EQ(t.decode(Ids{1}), "hello");
}

TEST_F(TokenizerTest, SplitBehaviors) {
  const json vocab = {{"a", 0}, {"b", 1}, {"-", 2}, {"a-", 3}, {"-b", 4}, {"--", 5}};
  const json merges = json::array({"a -", "- b", "- -"});
  const auto with = [&](const char* behavior, bool invert, const char* name) {
    json j = bpe_json(vocab, merges);
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior},
                          {"invert", invert}};
    return load_json(j, name);
  };
  EXPECT_EQ(with("Isolated", false, "s1.json").encode("a-b", false), (Ids{0, 2, 1}));
  EXPECT_EQ(with("Removed", false, "s2.json").encode("a-b", false), (Ids{0, 1}));
  EXPECT_EQ(with("MergedWithPrevious", false, "s3.json").encode("a-b", false), (Ids{3, 1}));
  EXPECT_EQ(with("MergedWithNext", false, "s4.json").encode("a-b", false), (Ids{0, 4}));
  EXPECT_EQ(with("Contiguous", false, "s5.json").encode("a--b", false), (Ids{0, 5, 1}));
  EXPECT_EQ(with("Isolated", false, "s6.json").encode("a--b", false), (Ids{0, 2, 2, 1}));
  // invert: the pattern names what to keep; Removed then drops what lies between.
  EXPECT_EQ(with("Removed", true, "s7.json").encode("a-b", false), (Ids{2}));
  // A regex pattern with Unicode classes.
  json j = bpe_json(vocab, merges);
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+"}}}, {"behavior", "Removed"},
                        {"invert", false}};
  EXPECT_EQ(load_json(j, "s8.json").encode("a--b", false), (Ids{5}));
}

TEST_F(TokenizerTest, CharacterClassPreTokenizers) {
  const json vocab = {{"1", 0}, {"2", 1}, {"12", 2}, {"a", 3}, {"!", 4}, {"a!", 5}, {"1a", 6}};
  const json merges = json::array({"1 2", "a !", "1 a"});
  const auto with = [&](const json& pre, const char* name) {
    json j = bpe_json(vocab, merges);
    j["pre_tokenizer"] = pre;
    return load_json(j, name);
  };
  EXPECT_EQ(with({{"type", "Digits"}, {"individual_digits", false}}, "d1.json").encode("12a", false), (Ids{2, 3}));
  EXPECT_EQ(with({{"type", "Digits"}, {"individual_digits", true}}, "d2.json").encode("12a", false), (Ids{0, 1, 3}));
  EXPECT_EQ(with({{"type", "Punctuation"}, {"behavior", "Isolated"}}, "p.json").encode("a!", false), (Ids{3, 4}));
  EXPECT_EQ(with({{"type", "Whitespace"}}, "w.json").encode("1a a!", false), (Ids{6, 3, 4}));
  EXPECT_EQ(with({{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Whitespace"}},
                                                                       {{"type", "Digits"}}})}},
                 "seq.json")
                .encode("1a a!", false),
            (Ids{0, 3, 3, 4}));
}

TEST_F(TokenizerTest, MetaspacePreTokenizerSchemes) {
  const json vocab = {{"\xE2\x96\x81", 0}, {"a", 1}, {"\xE2\x96\x81" "a", 2}, {"<x>", 3}};
  const auto with = [&](const char* scheme, bool split, const char* name) {
    json j = bpe_json(vocab, json::array({"\xE2\x96\x81 a"}));
    j["added_tokens"] = json::array({{{"id", 3}, {"content", "<x>"}, {"single_word", false}, {"lstrip", false},
                                      {"rstrip", false}, {"normalized", false}, {"special", true}}});
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme},
                          {"split", split}};
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme},
                    {"split", split}};
    return load_json(j, name);
  };
  // always: every piece gets ▁; first: only the piece at the start of the text; never: none.
  EXPECT_EQ(with("always", true, "m1.json").encode("a<x>a", false), (Ids{2, 3, 2}));
  EXPECT_EQ(with("first", true, "m2.json").encode("a<x>a", false), (Ids{2, 3, 1}));
  EXPECT_EQ(with("never", true, "m3.json").encode("a a", false), (Ids{1, 2}));
  // split=false keeps "▁a▁a" one word, which merges left to right.
  EXPECT_EQ(with("always", false, "m4.json").encode("a a", false), (Ids{2, 2}));
  // The decoder drops the ▁ of the first token (prepend_scheme other than never).
  EXPECT_EQ(with("always", true, "m5.json").decode(Ids{2, 2}), "a a");
  EXPECT_EQ(with("never", true, "m6.json").decode(Ids{2, 2}), " a a");
}

TEST_F(TokenizerTest, Normalizers) {
  // The normalizer's effect shows in which tokens match: the vocabulary holds the normalized forms.
  const json vocab = {{"e\xCC\x81", 0}, {"\xC3\xA9", 1}, {"fi", 2}, {"\xEF\xAC\x81", 3}, {"ab", 4},
                      {"a", 5}, {"b", 6}, {"i\xCC\x87", 7}, {"X", 8}, {"_", 9}, {"f", 10}, {"i", 11},
                      {"\xCC\x87", 12}, {"e", 13}, {"\xCC\x81", 14}};
  const json merges = json::array({"a b", "f i", "i \xCC\x87", "e \xCC\x81"});
  const auto with = [&](const json& normalizer, const char* name) {
    json j = bpe_json(vocab, merges);
    if (!normalizer.is_null()) j["normalizer"] = normalizer;
    return load_json(j, name);
  };
  EXPECT_EQ(with(nullptr, "n0.json").encode("\xEF\xAC\x81", false), (Ids{3}));
  EXPECT_EQ(with({{"type", "NFKC"}}, "n1.json").encode("\xEF\xAC\x81", false), (Ids{2}));  // the ligature fi
  EXPECT_EQ(with({{"type", "NFC"}}, "n2.json").encode("e\xCC\x81", false), (Ids{1}));  // composes é
  EXPECT_EQ(with({{"type", "NFD"}}, "n3.json").encode("\xC3\xA9", false), (Ids{0}));   // decomposes é
  EXPECT_EQ(with({{"type", "Lowercase"}}, "n4.json").encode("AB", false), (Ids{4}));
  EXPECT_EQ(with({{"type", "Lowercase"}}, "n5.json").encode("\xC4\xB0", false), (Ids{7}));  // İ -> i + U+0307
  EXPECT_EQ(with({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, "n6.json").encode("  ab \t", false),
            (Ids{4}));
  EXPECT_EQ(with({{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "X"}}, "n7.json")
                .encode("a12b", false),
            (Ids{5, 8, 6}));
  EXPECT_EQ(with({{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Lowercase"}},
                                                                     {{"type", "Prepend"}, {"prepend", "_"}}})}},
                 "n8.json")
                .encode("AB", false),
            (Ids{9, 4}));
}

TEST_F(TokenizerTest, PostProcessorsAddTheirTokens) {
  json j = bpe_json({{"[CLS]", 0}, {"[SEP]", 1}, {"a", 2}}, json::array());
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", json::array({"[SEP]", 1})},
                         {"cls", json::array({"[CLS]", 0})}};
  EXPECT_EQ(load_json(j, "bert.json").encode("a", true), (Ids{0, 2, 1}));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"[SEP]", {{"id", "[SEP]"}, {"ids", {1}}, {"tokens", {"[SEP]"}}}}}}};
  EXPECT_EQ(load_json(j, "tpl.json").encode("a", true), (Ids{2, 1}));
  EXPECT_EQ(load_json(j, "tpl2.json").encode("a", false), (Ids{2}));
}

TEST_F(TokenizerTest, ContinuingSubwordPrefixAndSuffix) {
  // With a prefix, every character but the first carries it, and a merge drops the right one's.
  json j = bpe_json({{"a", 0}, {"##b", 1}, {"ab", 2}}, json::array({"a ##b"}));
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(load_json(j, "pre.json").encode("ab", false), (Ids{2}));
  json k = bpe_json({{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}}, json::array({"a b</w>"}));
  k["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(load_json(k, "suf.json").encode("ab", false), (Ids{2}));
}

TEST_F(TokenizerTest, IgnoreMerges) {
  json j = bpe_json({{"a", 0}, {"b", 1}, {"c", 2}, {"bc", 3}, {"abc", 4}}, json::array({"b c"}));
  EXPECT_EQ(load_json(j, "m.json").encode("abc", false), (Ids{0, 3}));
  j["model"]["ignore_merges"] = true;  // a word in the vocabulary is its token
  EXPECT_EQ(load_json(j, "i.json").encode("abc", false), (Ids{4}));
}

TEST_F(TokenizerTest, RefusesUnsupportedComponents) {
  json j = bpe_json({{"a", 0}}, json::array());
  const auto refused = [&](const char* key, const json& value, const std::string& needle) {
    json k = j;
    k[key] = value;
    expect_refused(k.dump(), needle);
  };
  refused("pre_tokenizer", {{"type", "UnicodeScripts"}}, "pre_tokenizer type 'UnicodeScripts' is not supported");
  refused("pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Digits"}},
                                                                                {{"type", "CharDelimiterSplit"}}})}},
          "pre_tokenizer.pretokenizers[1] type 'CharDelimiterSplit' is not supported");
  refused("normalizer", {{"type", "BertNormalizer"}}, "normalizer type 'BertNormalizer' is not supported");
  refused("normalizer", {{"type", "Precompiled"}, {"precompiled_charsmap", "AA=="}},
          "normalizer type 'Precompiled' is not supported");
  refused("decoder", {{"type", "WordPiece"}}, "decoder type 'WordPiece' is not supported");
  refused("post_processor", {{"type", "Mystery"}}, "post_processor type 'Mystery' is not supported");
  refused("truncation", {{"max_length", 512}}, "truncation is not supported");
  refused("padding", {{"strategy", "BatchLongest"}}, "padding is not supported");
  json model = j;
  model["model"]["type"] = "WordPiece";
  expect_refused(model.dump(), "model type 'WordPiece' is not supported");
  model["model"]["type"] = "Unigram";
  expect_refused(model.dump(), "model type 'Unigram' is not supported");
  model = j;
  model["model"]["dropout"] = 0.1;
  expect_refused(model.dump(), "model.dropout 0.1 is not supported");
  refused("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "("}}}, {"behavior", "Isolated"}},
          "pre_tokenizer.pattern: the pattern does not compile");
  refused("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
          "behavior 'Sideways' is not one of");
  refused("pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "ab"}}, "replacement must be one character");
}

TEST_F(TokenizerTest, RefusesMalformedJson) {
  const std::string good = bpe_json({{"a", 0}, {"b", 1}, {"ab", 2}}, json::array({"a b"})).dump();
  expect_refused(good.substr(0, good.size() / 2), "not valid JSON");
  expect_refused(R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})",
                 "model.vocab must be an object of token to id");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": "0"}, "merges": []}})",
                 "model.vocab['a'] must be a token id");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": {}}})", "model.merges must be an array");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a z"]}})",
                 "model.merges[0] names 'z', which is not in model.vocab");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}})",
                 "model.merges[0] names 'aa', which is not in model.vocab");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["aa"]}})",
                 "is not two tokens separated by a space");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})",
                 "model.merges[0] must be \"left right\" or [left, right]");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})",
                 "model.unk_token '<unk>' is not in model.vocab");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"}})",
                 "model.byte_fallback must be a boolean");
  expect_refused(R"({"added_tokens": [{"id": -1, "content": "x"}],
                     "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                 "added_tokens[0].id must be a token id");
  expect_refused(R"({"added_tokens": {}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                 "added_tokens must be an array");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"use_regex": true}})",
                 "pre_tokenizer has no 'type'");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": 3}})",
                 "pre_tokenizer.type must be a string");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                     "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
                     {"Sequence": {"id": "A"}}], "special_tokens": {}}})",
                 "names special token '<s>', which special_tokens lacks");
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                     "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 7], "cls": ["[CLS]", 0]}})",
                 "post_processor adds token id 7, which is not in the vocabulary");
  expect_refused("[1, 2]", "not a tokenizer");  // JSON, but not an object: nothing tells it from other text
  expect_refused("{}", "tokenizer.json has no 'model'");
}

// --- tiktoken ---------------------------------------------------------------------------------------------------

std::string base64(std::string_view bytes) {
  static constexpr char kTable[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kTable[v >> 18 & 63];
    out += kTable[v >> 12 & 63];
    out += i + 1 < bytes.size() ? kTable[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kTable[v & 63] : '=';
  }
  return out;
}

/// The 256 bytes at ranks 0-255, then `extra` tokens.
std::string tiktoken_file(const std::vector<std::string>& extra) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < extra.size(); ++i) text += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

TEST_F(TokenizerTest, TiktokenRanks) {
  // 256 bytes, then "ab" (256), "abc" (257), " a" (258); specials from 259.
  const Tokenizer t = Tokenizer::load(write("tokenizer.model", tiktoken_file({"ab", "abc", " a"})));
  EXPECT_EQ(t.format(), "tiktoken");
  EXPECT_EQ(t.vocab_size(), 259 + 256);
  EXPECT_EQ(t.encode("abc", false), (Ids{257}));  // a whole piece that is a token
  // "abcab" is one piece: a b c a b -> ab c a b -> ab c ab -> abc ab.
  EXPECT_EQ(t.encode("abcab", false), (Ids{257, 256}));
  // The Llama 3 pattern takes " ab" whole ([^\r\n\p{L}\p{N}]?\p{L}+); "ab" (256) outranks " a" (258).
  EXPECT_EQ(t.encode("x ab", false), (Ids{'x', ' ', 256}));
  EXPECT_EQ(t.bos_id(), 259);
  EXPECT_EQ(t.eos_ids(), (Ids{260, 259 + 8, 259 + 9}));
  EXPECT_EQ(t.token_id("<|eot_id|>"), 259 + 9);
  EXPECT_EQ(t.token_id("<|reserved_special_token_2|>"), 259 + 12);
  EXPECT_EQ(t.token_id("<|reserved_special_token_245|>"), 259 + 255);
  EXPECT_EQ(t.token_id("<|reserved_special_token_246|>"), std::nullopt);
  EXPECT_EQ(t.encode("ab<|eot_id|>", true), (Ids{259, 256, 259 + 9}));
  const std::string not_special = "<|not_special|>";  // ordinary text: one byte token each (no merges apply)
  EXPECT_EQ(t.encode(not_special, false), Ids(not_special.begin(), not_special.end()));
  EXPECT_EQ(t.decode(Ids{259, 257, 258}), "<|begin_of_text|>abc a");
  EXPECT_EQ(t.decode(Ids{259, 257, 258}, true), "abc a");
  EXPECT_TRUE(t.is_special(259));
  EXPECT_FALSE(t.is_special(258));
  EXPECT_EQ(t.token_to_piece(0xE4), std::string(1, '\xE4'));
  const std::string chinese = "\xE4\xB8\xAD\xE6\x96\x87";  // 中文: six byte tokens
  const Ids ids = t.encode(chinese, false);
  EXPECT_EQ(ids, (Ids{0xE4, 0xB8, 0xAD, 0xE6, 0x96, 0x87}));
  std::vector<std::string> steps;
  EXPECT_EQ(streamed(t, ids, &steps), chinese);
  EXPECT_EQ(steps, (std::vector<std::string>{"", "", "\xE4\xB8\xAD", "", "", "\xE6\x96\x87"}));
}

TEST_F(TokenizerTest, TiktokenRefusals) {
  const std::string good = tiktoken_file({"ab"});
  expect_refused(good + "!!!! 257\n", "line 258: '!!!!' is not base64", "bad64.model");
  expect_refused(good + base64("xy") + " 256\n", "rank 256 is given twice", "dup.model");
  expect_refused(good + base64("ab") + " 257\n", "token 'ab' (rank 257) is given twice", "duptoken.model");
  expect_refused(good + base64("xy") + " 999\n", "rank 999 is out of range", "range.model");
  expect_refused(good + base64("xy") + " 2x\n", "rank '2x' is not a non-negative integer", "rank.model");
  expect_refused(good + base64("xy") + "\n", "no rank after the token", "norank.model");
  // Every single byte must be a token: drop byte 0x41 ('A', rank 65) and renumber.
  std::string missing;
  for (int b = 0, rank = 0; b < 256; ++b)
    if (b != 0x41) missing += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  expect_refused(missing, "lacks the single-byte token 0x41", "missing.model");
}

// --- SentencePiece ----------------------------------------------------------------------------------------------

std::string varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string field_bytes(int field, const std::string& bytes) {
  return varint(field << 3 | 2) + varint(bytes.size()) + bytes;
}
std::string field_varint(int field, uint64_t v) { return varint(field << 3) + varint(v); }
std::string field_float(int field, float f) {
  std::string out = varint(field << 3 | 5);
  out.append(reinterpret_cast<const char*>(&f), 4);
  return out;
}

/// A BPE SentencePiece ModelProto: pieces (text, score, type), model type BPE, identity normalizer.
std::string sentencepiece_model() {
  enum { kNormal = 1, kUnknown = 2, kControl = 3 };
  const std::vector<std::tuple<std::string, float, int>> pieces = {
      {"<unk>", 0, kUnknown}, {"<s>", 0, kControl}, {"</s>", 0, kControl},
      {"\xE2\x96\x81hi", -1, kNormal}, {"\xE2\x96\x81h", -2, kNormal}, {"\xE2\x96\x81", -3, kNormal},
      {"h", -4, kNormal}, {"i", -5, kNormal}};
  std::string model;
  for (const auto& [text, score, type] : pieces)
    model += field_bytes(1, field_bytes(1, text) + field_float(2, score) + field_varint(3, type));
  model += field_bytes(2, field_varint(3, 2));           // trainer_spec.model_type = BPE
  model += field_bytes(3, field_bytes(1, "identity"));  // normalizer_spec.name
  return model;
}

TEST_F(TokenizerTest, SentencePieceModel) {
  const Tokenizer t = Tokenizer::load(write("tokenizer.bin", sentencepiece_model()));
  EXPECT_EQ(t.format(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 8);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), (Ids{2}));
  // "hi hi" -> "▁hi▁hi": ▁ h merges first (score -2 beats nothing else), then ▁h i.
  EXPECT_EQ(t.encode("hi hi", true), (Ids{1, 3, 3}));
  EXPECT_EQ(t.encode("hi hi", false), (Ids{3, 3}));
  EXPECT_EQ(t.decode(Ids{1, 3, 3}), "hi hi");
  EXPECT_EQ(t.token_id("\xE2\x96\x81h"), 4);
  EXPECT_EQ(t.token_id("zzz"), std::nullopt);
  EXPECT_TRUE(t.is_special(1));
  EXPECT_EQ(streamed(t, Ids{3, 3}), "hi hi");
  expect_refused(std::string("\x0A\x05garbage-not-a-proto"), "not a SentencePiece model", "bad.model");
}

// --- Every format ---------------------------------------------------------------------------------------------

TEST_F(TokenizerTest, FormatComesFromTheContentsNotTheName) {
  EXPECT_EQ(Tokenizer::load(write("tokenizer.json", tiktoken_file({}))).format(), "tiktoken");
  EXPECT_EQ(Tokenizer::load(write("tokenizer.txt", sentencepiece_model())).format(), "sentencepiece");
  EXPECT_EQ(Tokenizer::load(write("tokenizer.model", bpe_json({{"a", 0}}, json::array()).dump())).format(),
            "tokenizer.json");
}

TEST_F(TokenizerTest, RefusesOtherFilesAndBadArguments) {
  expect_refused("hello world\nthis is text\n", "not a tokenizer: expected a Hugging Face tokenizer.json", "t.txt");
  expect_refused("", "not a tokenizer", "empty.model");
  expect_invalid([] { Tokenizer::load("/nonexistent/tokenizer.json"); }, "/nonexistent/tokenizer.json");
  const Tokenizer t = Tokenizer::load(write("tokenizer.model", tiktoken_file({})));
  expect_invalid([&] { t.decode(Ids{0, 9999}); }, "token id 9999 is out of range (vocabulary of 512 tokens)");
  expect_invalid([&] { t.decode(Ids{-1}); }, "token id -1 is out of range");
  expect_invalid([&] { t.token_to_piece(512); }, "token id 512 is out of range");
  expect_invalid([&] { t.encode("ok \xC3(", false); }, "the text is not valid UTF-8 (byte 3 of 5)");
  StreamDecoder decoder(t);
  expect_invalid([&] { decoder.step(512); }, "token id 512 is out of range");
  EXPECT_EQ(decoder.step('o'), "o");  // the decoder still works after the refusal
}

TEST_F(TokenizerTest, SharedAcrossThreads) {
  const Tokenizer t = load_json(llama2_json());
  const Ids expected = t.encode("hi hi \xC3\xA9 hi", true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (t.encode("hi hi \xC3\xA9 hi", true) != expected || t.decode(expected, true) != "hi hi \xC3\xA9 hi")
          ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace etnp
