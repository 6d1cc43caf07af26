"""Generation from the zoo's language models (ExecuTorch's LLM export and optimum-executorch, tests/live/zoo.py):
etnp's LLM class and `etnp generate` must produce the tokens of the official runtime's greedy loop (export.py's
official_greedy: BOS, the prompt through the same tokenizer.json, one prefill call, then a token a call until EOS
or max_new_tokens) for the same prompt."""
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _greedy_case(live):
    assert "export_error" not in live, live.get("export_error")
    folder = pathlib.Path(live["dir"])
    if live["official"]["status"] != "ok":
        pytest.fail("the official runtime failed on %s: %s" % (folder.name, live["official"]))
    return folder, json.loads((folder / "generation.json").read_text())


@pytest.mark.language_models
def test_llm_generates_the_official_greedy_tokens(live):
    from executorch_numpy_runtime import LLM

    folder, reference = _greedy_case(live)
    llm = LLM(str(folder / live["file"]), str(folder / live["tokenizer"]))
    result = llm.generate(live["generation"]["prompt"], max_new_tokens=live["generation"]["max_new_tokens"])
    assert result.prompt_ids == reference["prompt_ids"]
    assert result.ids == reference["official_ids"], "%s: etnp %s, official %s" % (
        folder.name, result.ids, reference["official_ids"])
    assert len(set(result.ids)) > 1, "the greedy reference repeats one token: it does not test the context"


@pytest.mark.language_models
def test_cli_generates_the_official_greedy_tokens(live):
    folder, reference = _greedy_case(live)
    etnp = pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build")) / "etnp"
    if not os.access(etnp, os.X_OK):
        pytest.skip("etnp not built in %s (set ETNP_BUILD_DIR)" % etnp.parent)
    out = subprocess.run([str(etnp), "generate", str(folder / live["file"]), "--tokenizer",
                          str(folder / live["tokenizer"]), "--prompt", live["generation"]["prompt"],
                          "--max-new-tokens", str(live["generation"]["max_new_tokens"]), "--json"],
                         capture_output=True, text=True, check=True)
    record = json.loads(out.stdout)
    assert record["prompt_ids"] == reference["prompt_ids"] and record["ids"] == reference["official_ids"]
