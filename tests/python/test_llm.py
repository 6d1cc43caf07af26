"""The LLM class and `etnp generate` on a program whose next token is known by construction
(programs.successor_lm_program: after token t comes t + 1, up to EOS), with a tokenizer.json written here.
The real language models (ExecuTorch's LLM export, against the official runtime's greedy loop) are in
tests/live/test_llm_generate.py."""
import json
import subprocess
import threading

import numpy as np
import pytest

import programs

VOCAB, MAX_SEQ, BOS, EOS = 16, 32, 1, 15
LETTERS = "abcdefghijklm"  # ids 2..14


def successor(t):
    return min(t + 1, VOCAB - 1)


@pytest.fixture(scope="module")
def lm_path(tmp_path_factory):
    if programs.flatc() is None:
        pytest.skip("flatc not found (needed to write the test program)")
    return str(programs.compile_program(programs.successor_lm_program(VOCAB, MAX_SEQ, BOS, EOS),
                                        tmp_path_factory.mktemp("lm") / "lm.pte"))


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    """A tokenizer.json whose tokens are single letters (no merges, no decoder: decode joins with spaces)."""
    vocab = {"<unk>": 0, "<s>": BOS, "</s>": EOS}
    vocab.update({c: 2 + i for i, c in enumerate(LETTERS)})
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}
                             for t, i in (("<unk>", 0), ("<s>", BOS), ("</s>", EOS))],
            "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(spec))
    return str(path)


@pytest.fixture()
def llm(lm_path, tokenizer_path):
    from executorch_numpy_runtime import LLM

    return LLM(lm_path, tokenizer_path)


def test_metadata_comes_from_the_constant_methods(llm):
    assert llm.metadata == {"max_seq_len": MAX_SEQ, "max_context_len": MAX_SEQ, "bos_id": BOS, "eos_ids": [EOS],
                            "vocab_size": VOCAB, "use_kv_cache": True}


def test_greedy_follows_the_table_to_eos(llm):
    result = llm.generate([5])
    assert result.prompt_ids == [BOS, 5]
    assert result.ids == list(range(6, EOS + 1))
    assert result.stop_reason == "eos"
    assert result.generated_tokens == len(result.ids) and result.prompt_tokens == 2
    assert result.prefill_tokens_per_second > 0 and result.decode_tokens_per_second > 0
    assert result.peak_rss_bytes > 0
    assert llm.generate([5], add_bos=False).prompt_ids == [5]


def test_max_new_tokens_and_a_full_context(llm):
    assert llm.generate([5], max_new_tokens=3).ids == [6, 7, 8]
    assert llm.generate([5], max_new_tokens=0).ids == [6]  # the prefill always yields one token
    # 30 prompt tokens after BOS fill 31 of 32 positions: one token is fed back, the next fills the context.
    result = llm.generate([2] * 30)
    assert result.ids == [3, 4] and result.stop_reason == "context_full"


def test_text_prompt_stop_strings_and_streaming(llm):
    result = llm.generate("d")  # 'd' is id 5
    assert result.prompt_ids == [BOS, 5] and result.ids == list(range(6, EOS + 1))
    assert result.text == " ".join(LETTERS[4:])  # EOS adds no text
    stopped = llm.generate("d", stop=["g h", "zz"])
    assert stopped.text == "e f g h" and stopped.stop_reason == "stop_string" and stopped.ids == [6, 7, 8, 9]
    steps = list(llm.stream("d", max_new_tokens=3))
    assert [(s.token, s.text) for s in steps] == [(6, "e"), (7, " f"), (8, " g")]


def test_closing_a_stream_early_and_a_newer_generation(llm):
    from executorch_numpy_runtime import InvalidInputError

    first = llm.stream([5])
    assert next(first).token == 6
    second = llm.stream([9])
    assert next(second).token == 10
    with pytest.raises(InvalidInputError, match="ended by a newer"):
        next(first)
    second.close()
    assert llm.generate([5], max_new_tokens=2).ids == [6, 7]


def test_sampling_is_seeded(llm):
    greedy = llm.generate([5]).ids
    a = llm.generate([5], temperature=1.0, seed=3).ids
    assert a == llm.generate([5], temperature=1.0, seed=3).ids
    assert a != greedy and a[-1] == EOS
    # every sampled token is within the table's nucleus: at temperature 1 a neighbour of t + 1 at most 3 away
    context = [BOS, 5] + a
    for prev, tok in zip(context[1:], a):
        assert abs(tok - successor(prev)) <= 3
    assert llm.generate([5], temperature=1.0, top_p=1e-6, seed=3).ids == greedy  # the nucleus is the argmax


def test_feeding_ids_by_hand_matches_the_table(lm_path):
    from executorch_numpy_runtime import _C, Runtime

    generator = _C.Generator(Runtime.get().load_program(lm_path))
    logits = generator.feed([3, 4])
    assert generator.position == 2
    np.testing.assert_array_equal(logits, -np.abs(np.arange(VOCAB) - 5).astype(np.float32))
    generator.reset()
    assert generator.position == 0


def test_bad_arguments(lm_path, llm):
    from executorch_numpy_runtime import LLM, InvalidInputError, InvalidTypeError

    with pytest.raises(InvalidInputError, match="needs a tokenizer"):
        LLM(lm_path).generate("d")
    with pytest.raises(InvalidInputError, match="token id 99 is outside the program's vocabulary of 16"):
        llm.generate([99])
    with pytest.raises(InvalidInputError, match="above the program's context of 32 tokens"):
        llm.generate([2] * 40)
    with pytest.raises(InvalidInputError, match="temperature must be >= 0"):
        llm.generate([5], temperature=-1.0)
    with pytest.raises(InvalidInputError, match="top_p"):
        llm.generate([5], top_p=0.0)
    with pytest.raises(InvalidInputError, match="stop strings need text"):
        llm.generate([5], stop="x")
    with pytest.raises(InvalidInputError, match="max_new_tokens must be >= -1"):
        llm.generate([5], max_new_tokens=-2)
    with pytest.raises(InvalidTypeError):
        llm.generate([5], max_new_tokens="3")
    with pytest.raises(InvalidTypeError):
        llm.generate(5)
    with pytest.raises(InvalidTypeError):
        LLM(lm_path, tokenizer=3)
    with pytest.raises(InvalidInputError, match="no method 'decode'"):
        LLM(lm_path, method="decode")
    with pytest.raises(InvalidInputError, match="method 'get_bos_id' is not a language model's step"):
        LLM(lm_path, method="get_bos_id")


def test_two_llms_on_one_program_in_threads(lm_path):
    from executorch_numpy_runtime import LLM, Runtime

    program = Runtime.get().load_program(lm_path)
    results = {}

    def run(start):
        llm = LLM(program)
        results[start] = [llm.generate([start]).ids for _ in range(50)]

    threads = [threading.Thread(target=run, args=(s,)) for s in (3, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(ids == list(range(4, EOS + 1)) for ids in results[3])
    assert all(ids == list(range(9, EOS + 1)) for ids in results[8])


def test_cli_generate(etnp, lm_path, tokenizer_path):
    out = subprocess.run([etnp, "generate", lm_path, "--tokenizer", tokenizer_path, "--prompt", "d", "--json"],
                         capture_output=True, text=True, check=True)
    record = json.loads(out.stdout)
    assert record["ids"] == list(range(6, EOS + 1)) and record["prompt_ids"] == [BOS, 5]
    assert record["text"] == " ".join(LETTERS[4:]) and record["stop"] == "eos"
    streamed = subprocess.run([etnp, "generate", lm_path, "--tokenizer", tokenizer_path, "--prompt", "d",
                               "--max-new-tokens", "3"], capture_output=True, text=True, check=True)
    assert streamed.stdout == "e f g\n"
    assert "prefill" in streamed.stderr and "decode" in streamed.stderr and "tokens/s" in streamed.stderr
    for flags, message in ((["--max-new-tokens", "x"], "--max-new-tokens takes an integer, got 'x'"),
                           (["--temperature", "-1"], "--temperature must be in"),
                           (["--top-p", "0"], "--top-p must be above 0"),
                           (["--seed", "-3"], "--seed must be >= 0")):
        bad = subprocess.run([etnp, "generate", lm_path, "--tokenizer", tokenizer_path, "--prompt", "d"] + flags,
                             capture_output=True, text=True)
        assert bad.returncode == 2 and message in bad.stderr, (flags, bad.stderr)
    missing = subprocess.run([etnp, "generate", lm_path, "--prompt", "d"], capture_output=True, text=True)
    assert missing.returncode == 2 and "--tokenizer" in missing.stderr
