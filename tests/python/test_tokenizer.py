"""executorch_numpy_runtime.Tokenizer and StreamDecoder: the binding of include/etnp/tokenizer.h (the formats
themselves are tested in tests/cpp/tokenizer_test.cpp and against the libraries in tests/live)."""
import base64
import threading

import pytest

import executorch_numpy_runtime as et


@pytest.fixture
def tiktoken_file(tmp_path):
    """The 256 bytes at ranks 0-255, then "ab" (256) and "abc" (257); Llama 3's specials from 258."""
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b"abc"]
    path = tmp_path / "tokenizer.model"
    path.write_text("".join("%s %d\n" % (base64.b64encode(t).decode(), r) for r, t in enumerate(tokens)))
    return path


def test_encode_decode_and_specials(tiktoken_file):
    tok = et.Tokenizer(tiktoken_file)  # os.PathLike is accepted
    assert et.Tokenizer.load(str(tiktoken_file)).vocab_size == tok.vocab_size == 258 + 256
    assert tok.format == "tiktoken"
    assert tok.encode("abcab", bos=False) == [257, 256]
    assert tok.encode("abc<|eot_id|>") == [258, 257, 258 + 9]
    assert tok.bos_id == 258
    assert tok.eos_ids == [259, 258 + 8, 258 + 9]
    assert tok.token_id("<|eot_id|>") == 267
    assert tok.token_id("nope") is None
    assert tok.token_to_piece(0xE4) == b"\xe4"
    assert tok.is_special(258) and not tok.is_special(257)
    assert tok.decode([258, 257]) == "<|begin_of_text|>abc"
    assert tok.decode([258, 257], skip_special_tokens=True) == "abc"


def test_stream_decoder_holds_back_split_characters(tiktoken_file):
    tok = et.Tokenizer(tiktoken_file)
    ids = list("中文".encode())
    stream = tok.stream_decoder()
    assert [stream.step(i) for i in ids] == ["", "", "中", "", "", "文"]
    stream = et.StreamDecoder(tok)
    assert stream.step(0xE4) == ""
    assert stream.flush() == "\ufffd"


def test_errors_are_invalid_input(tiktoken_file, tmp_path):
    tok = et.Tokenizer(tiktoken_file)
    with pytest.raises(et.InvalidInputError, match="token id 9999 is out of range"):
        tok.decode([1, 9999])
    with pytest.raises(et.InvalidInputError, match="token id -1 is out of range"):
        tok.stream_decoder().step(-1)
    with pytest.raises(et.InvalidInputError, match="nonexistent"):
        et.Tokenizer(tmp_path / "nonexistent.json")
    (tmp_path / "notes.txt").write_text("just some text\n")
    with pytest.raises(et.InvalidInputError, match="not a tokenizer: expected a Hugging Face tokenizer.json"):
        et.Tokenizer(tmp_path / "notes.txt")
    (tmp_path / "bad.json").write_text('{"model": {"type": "WordPiece", "vocab": {}}}')
    with pytest.raises(et.InvalidInputError, match="model type 'WordPiece' is not supported"):
        et.Tokenizer(tmp_path / "bad.json")
    with pytest.raises(et.InvalidTypeError, match="text must be a str, got bytes"):
        tok.encode(b"bytes are not text")


def test_shared_between_threads(tiktoken_file):
    tok = et.Tokenizer(tiktoken_file)
    text = "abcab " * 200
    expected = tok.encode(text)
    results = []

    def work():
        results.append(all(tok.encode(text) == expected for _ in range(20)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4
