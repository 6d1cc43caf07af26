"""etnp's tokenizers against the reference libraries: tokenizers, sentencepiece, tiktoken and pytorch_tokenizers
train and run tokenizers in the dev venv (tokenizer_oracle.py, offline), and etnp must give the same ids and the
same decoded text for every line of a multilingual corpus. Skipped where the dev venv cannot be made (failed
instead under CI=true), like the rest of tests/live."""
import json
import subprocess

import pytest

from live_env import REPO, dev_python_or_skip

NAMES = ["llama3_bpe", "qwen2_bpe", "gpt2_bpe", "llama2_bpe", "mistral_bpe", "word_bpe", "split_bpe", "bert_bpe",
         "metaspace_always", "sentencepiece_bpe", "sentencepiece_unigram", "llama3_tiktoken"]


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    python = dev_python_or_skip()
    out = tmp_path_factory.mktemp("tokenizers")
    proc = subprocess.run([str(python), str(REPO / "tests" / "live" / "tokenizer_oracle.py"), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, "tokenizer_oracle.py failed:\n" + proc.stderr[-4000:]
    return json.loads((out / "expected.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_same_ids_and_text_as_the_library(expected, name):
    from executorch_numpy_runtime import StreamDecoder, Tokenizer

    record = expected[name]
    tok = Tokenizer(record["path"])
    assert tok.format == record["format"]
    assert tok.vocab_size == record["vocab_size"]
    if "bos_id" in record:
        assert tok.bos_id == record["bos_id"]
        assert tok.eos_ids == record["eos_ids"]
    problems = []
    for case in record["cases"]:
        text = case["text"]
        checks = [("ids with special tokens", tok.encode(text, bos=True), case["ids_bos"]),
                  ("ids", tok.encode(text, bos=False), case["ids"]),
                  ("decoded", tok.decode(case["ids_bos"]), case["decoded"]),
                  ("decoded without specials", tok.decode(case["ids_bos"], skip_special_tokens=True),
                   case["decoded_skip"])]
        stream = StreamDecoder(tok)
        pieces = [stream.step(i) for i in case["ids_bos"]] + [stream.flush()]
        checks.append(("streamed", "".join(pieces), case["decoded"]))
        for what, ours, theirs in checks:
            if ours != theirs:
                problems.append("%r: %s: etnp %r, library %r" % (text, what, ours, theirs))
    assert not problems, "%d mismatches:\n" % len(problems) + "\n".join(problems[:12])
    assert len(record["cases"]) >= 25
