"""Trains tokenizers offline and records what the reference libraries make of a multilingual corpus (run by
test_tokenizers_live.py in the dev venv; nothing is downloaded).

  tokenizer_oracle.py OUT_DIR    writes the tokenizer files and OUT_DIR/expected.json

Tokenizers: byte-level BPEs with the Llama 3 / Qwen 2 Split patterns and GPT-2's ByteLevel regex (`tokenizers`),
Metaspace byte-fallback BPEs laid out as Llama 2's and Mistral's tokenizer.json, one with Whitespace, Digits,
Punctuation and NFKC/Lowercase/Strip, SentencePiece BPE and unigram models (`sentencepiece`), and a tiktoken ranks
file made from the Llama 3-style BPE (`tiktoken` and pytorch_tokenizers). For each corpus line, expected.json holds
the library's ids (with and without the special tokens it adds) and its decoded text.
"""
import base64
import json
import pathlib
import sys

import sentencepiece as spm
import tiktoken
from pytorch_tokenizers import TiktokenTokenizer
from pytorch_tokenizers.constants import CL100K_PAT_STR, LLAMA_SPECIAL_TOKENS
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CORPUS = [
    "Hello, world! This is a test of the tokenizer.",
    "The quick brown fox jumps over the lazy dog; it's 42 degrees, isn't it? We'll see, they've said.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Mädchen, Größe.",
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ? Ça va très bien !",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。",
    "私はガラスを食べられます。それは私を傷つけません。カタカナとひらがな、漢字。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 한국어 문장입니다.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 ❤️ 🇩🇪 and ✨sparkles✨",
    "def f(x):\n    return x ** 2 + 3 * x - 1  # comment\n\tif x > 0: print(f\"{x:08.3f}\")",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // C++ && || != ==",
    "Digits: 0 1 12 123 1234 12345 3.14159 2,718,281 1e-10 ٣٤٥ ４５６",
    "Runs of spaces:    four, then\t\ttabs,\n\n\nnewlines\r\nand CRLF   \n  trailing   ",
    "  leading spaces and a trailing space ",
    "MiXeD CaSe ÀÉÎÕÜ ǅ İstanbul ﬁnance ﬂower Ⅻ ½ ⁵",
    "Ligatures and compatibility: ﬀ ﬃ ① ㈱ ｶﾀｶﾅ ℌ ℍ",
    "URLs: https://example.com/path?query=1&x=y#frag, email@example.org",
    "",
    " ",
    "\n",
    "a",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
]

def random_lines(count=100, seed=0):
    """Lines of characters drawn from the corpus, whitespace runs and random code points (seeded, so the same
    every run): what a hand-written corpus does not think of. The random code points are ones Unicode 3.2 already
    assigned: each library has its own Unicode data (tokenizers' regex classes are newer than Debian 12's PCRE2,
    its NFKC older than utf8proc's), and characters added lately are a letter to one and unassigned to another,
    or decompose in one only."""
    import random
    import unicodedata

    rng = random.Random(seed)
    pool = sorted(set("".join(CORPUS))) + [" ", "  ", "\n", "\t", "\r\n", "'s", "'LL", "12345"]
    lines = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.05:
                code = rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xD7FF), rng.randint(0x10000, 0x1FFFF)])
                if unicodedata.ucd_3_2_0.category(chr(code)) not in ("Cn", "Cs", "Co"):
                    parts.append(chr(code))
            else:
                parts.append(rng.choice(pool))
        lines.append("".join(parts))
    return lines


LLAMA3_SPECIAL = ["<|begin_of_text|> Hello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
                  "text <|end_of_text|> more <|reserved_special_token_5|>x<|not_a_special|>"]
LLAMA2_SPECIAL = ["<s> Hello</s> world <s>", "a<unk>b </s>c"]

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def training_text():
    return CORPUS * 20


def hf_cases(tok, lines):
    cases = []
    for line in lines:
        with_special = tok.encode(line, add_special_tokens=True).ids
        plain = tok.encode(line, add_special_tokens=False).ids
        cases.append({"text": line, "ids_bos": with_special, "ids": plain,
                      "decoded": tok.decode(with_special, skip_special_tokens=False),
                      "decoded_skip": tok.decode(with_special, skip_special_tokens=True)})
    return cases


def byte_level_bpe(pattern, special, bos, normalizer=None, gpt2=False):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    if gpt2:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    if bos is not None:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def with_byte_tokens(tok):
    """Adds Llama 2's <0x00>..<0xFF> tokens to the trained model's vocabulary (after its tokens)."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    return Tokenizer.from_str(json.dumps(data))


def metaspace_bpe(layout):
    special = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if layout == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:  # Mistral's later files: a Metaspace pre-tokenizer and decoder
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                                         decoders.Fuse()])
    # A small alphabet, so that rare characters (most CJK, emoji) go to bytes.
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=special, show_progress=False, limit_alphabet=120)
    tok.train_from_iterator(training_text(), trainer)
    tok = with_byte_tokens(tok)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def word_bpe():
    """Whitespace, Digits and Punctuation pre-tokenizers under an NFKC + Lowercase + Strip normalizer."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                           normalizers.Strip(left=True, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.Punctuation(behavior="isolated")])
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    tok.add_tokens([AddedToken("<m>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("WOLKEN", normalized=True),  # matched in the lowercased text
                    AddedToken("ing", single_word=True)])
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def trained(tok, vocab_size=900, special=("[UNK]", "[CLS]", "[SEP]")):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok


def split_bpe():
    """Split in every behavior, Digits and Punctuation grouped, under NFKD and a Replace."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Replace(Regex(r"\d{3}"), "#")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{N}+"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\p{P}"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{Han}"), behavior="isolated"),
        pre_tokenizers.Split(" ", behavior="removed"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Punctuation(behavior="merged_with_next")])
    tok.decoder = decoders.Fuse()
    return trained(tok)


def bert_bpe():
    """BertPreTokenizer, an inverted Split, RobertaProcessing and a Replace/Strip decoder."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(),
        pre_tokenizers.Split(Regex(r"[\p{L}\p{M}]+|\p{N}"), behavior="removed", invert=True),
        pre_tokenizers.WhitespaceSplit()])
    # Strip("E", 1, 1) would make the library panic on a token "E" (it strips past the end).
    tok.decoder = decoders.Sequence([decoders.Replace("e", "E"), decoders.Strip("E", 1, 0)])
    tok = trained(tok)
    tok.post_processor = processors.RobertaProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                      ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def metaspace_always():
    """Metaspace splitting on ▁ with prepend_scheme always (the older add_prefix_space files)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True),
                                     decoders.ByteFallback(), decoders.Fuse()])
    tok = with_byte_tokens(trained(tok, 700, ["<unk>", "<s>", "</s>"]))
    tok.add_special_tokens([AddedToken("<sep>", lstrip=False, rstrip=True, normalized=False)])
    return tok


def sentencepiece_model(out, name, model_type):
    prefix = str(out / name)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_text()), model_prefix=prefix, vocab_size=600,
                                   model_type=model_type, byte_fallback=True, character_coverage=0.98,
                                   bos_id=1, eos_id=2, unk_id=0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    cases = []
    for line in CORPUS + LLAMA2_SPECIAL + random_lines():
        ids = sp.encode(line)
        cases.append({"text": line, "ids": ids, "ids_bos": [sp.bos_id()] + ids, "decoded": sp.decode(ids),
                      "decoded_skip": sp.decode(ids)})
    return {"path": prefix + ".model", "format": "sentencepiece", "vocab_size": sp.get_piece_size(),
            "bos_id": sp.bos_id(), "eos_ids": [sp.eos_id()], "cases": cases}


def tiktoken_from(tok, out):
    """A ranks file from a byte-level BPE: its tokens' bytes, ranked in id order (merge order), specials left out."""
    byte_of = {ch: b for b, ch in enumerate(gpt2_byte_chars())}
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    tokens = sorted(((i, t) for t, i in tok.get_vocab(with_added_tokens=False).items() if t not in specials))
    ranks = {bytes(byte_of[c] for c in t): rank for rank, (_, t) in enumerate(tokens)}
    path = out / "llama3_tiktoken.model"
    path.write_text("".join("%s %d\n" % (base64.b64encode(t).decode(), r) for t, r in ranks.items()))
    enc = tiktoken.Encoding(name="oracle", pat_str=CL100K_PAT_STR, mergeable_ranks=ranks,
                            special_tokens={t: len(ranks) + i for i, t in enumerate(LLAMA_SPECIAL_TOKENS)})
    wrapper = TiktokenTokenizer(str(path))
    cases = []
    for line in CORPUS + LLAMA3_SPECIAL + random_lines():
        ids = enc.encode(line, allowed_special="all")
        with_bos = wrapper.encode(line, bos=True, eos=False, allowed_special="all")
        assert with_bos == [wrapper.bos_id] + ids, line
        cases.append({"text": line, "ids": ids, "ids_bos": with_bos, "decoded": enc.decode(with_bos),
                      "decoded_skip": enc.decode(ids_without(with_bos, len(ranks)))})
    return {"path": str(path), "format": "tiktoken", "vocab_size": len(ranks) + len(LLAMA_SPECIAL_TOKENS),
            "bos_id": wrapper.bos_id, "eos_ids": [len(ranks) + 1, len(ranks) + 8, len(ranks) + 9], "cases": cases}


def ids_without(ids, first_special):
    return [i for i in ids if i < first_special]


def gpt2_byte_chars():
    """The character GPT-2's byte-level alphabet uses for each byte: printable bytes stand for themselves, the
    others take U+0100 onwards in byte order (checked against the library's alphabet)."""
    result, n = [], 0
    for b in range(256):
        printable = (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)
        result.append(chr(b) if printable else chr(256 + n))
        n += not printable
    assert set(result) == set(pre_tokenizers.ByteLevel.alphabet())
    return result


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    expected = {}
    llama3_special = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>",
                      "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>"]
    hf = {
        "llama3_bpe": byte_level_bpe(CL100K_PAT_STR, llama3_special, "<|begin_of_text|>"),
        "qwen2_bpe": byte_level_bpe(QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None,
                                    normalizer=normalizers.NFC()),
        "gpt2_bpe": byte_level_bpe(None, ["<|endoftext|>"], None, gpt2=True),
        "llama2_bpe": metaspace_bpe("llama2"),
        "mistral_bpe": metaspace_bpe("mistral"),
        "word_bpe": word_bpe(),
        "split_bpe": split_bpe(),
        "bert_bpe": bert_bpe(),
        "metaspace_always": metaspace_always(),
    }
    extra = {"llama3_bpe": LLAMA3_SPECIAL, "qwen2_bpe": ["<|im_start|>user\nHi<|im_end|>\n<|endoftext|>"],
             "gpt2_bpe": ["a<|endoftext|>b"], "llama2_bpe": LLAMA2_SPECIAL, "mistral_bpe": LLAMA2_SPECIAL,
             "word_bpe": ["x <m> y", "[CLS] a [SEP]"], "split_bpe": ["[CLS]x"], "bert_bpe": ["[SEP] e"],
             "metaspace_always": ["a<sep>  b <s>c"]}
    for name, tok in hf.items():
        folder = out / name
        folder.mkdir(exist_ok=True)
        path = folder / "tokenizer.json"
        tok.save(str(path))
        expected[name] = {"path": str(path), "format": "tokenizer.json",
                          "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                          "cases": hf_cases(Tokenizer.from_file(str(path)), CORPUS + extra[name] + random_lines())}
    expected["sentencepiece_bpe"] = sentencepiece_model(out, "sp_bpe", "bpe")
    expected["sentencepiece_unigram"] = sentencepiece_model(out, "sp_unigram", "unigram")
    expected["llama3_tiktoken"] = tiktoken_from(hf["llama3_bpe"], out)
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False))
    print(out / "expected.json")


if __name__ == "__main__":
    main()
