"""Live exports: the zoo's models exported by the official ExecuTorch exporter and run by the official runtime.

Runs in the dev venv (scripts/dev-venv.sh), never in etnp's own environment:

    VENV/bin/python tests/live/export.py [--cache DIR] [--only NAME[:FORM]]...     export what is missing,
                                                                                   print each program's folder
    VENV/bin/python tests/live/export.py --official --progress F DIR...          (internal) official outputs

For each (model, form) of zoo.py it writes, under the cache folder, `<model>__<form>__<key>/`:
    program.pte (or program.bpte), *.ptd     the exported program and its external data
    <method>__<case>/input_<i>.npy           inputs (seeded), one folder per case
    <method>__<case>/torch_<i>.npy           PyTorch eager outputs on them (reference only)
    <method>__<case>/official_<i>.npy        the official runtime's outputs (the goldens)
    tokenizer.json, generation.json          language models: the tokenizer trained for the model, and the
                                             official runtime's greedy generation from a prompt
    export.json                              what was made, the cases, and how the official runtime fared
A stateful case (the KV-cache decoders) holds `call_<k>/` folders, run in order on one loaded method. The
language models (ExecuTorch's LLM export, optimum-executorch) have no eager reference: the official runtime is
their only golden.

Each folder is keyed (entry_keys) by this script, the zoo's entry and the definitions it uses, and the versions
of the packages that shape an export, so a change to any of them exports anew; an unchanged one costs nothing. The official runtime runs in child
processes: a crash or hang of it on a program is recorded (`official.status`), not fatal.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
OFFICIAL_TIMEOUT_S = 300
VERSIONED_PACKAGES = ("torch", "executorch", "torchvision", "transformers", "torchao", "numpy", "tokenizers",
                     "optimum-executorch")


def package_versions() -> dict:
    from importlib import metadata

    return {name: metadata.version(name) for name in VERSIONED_PACKAGES}


def entry_keys() -> dict:
    """{(model, form): key}. A key hashes this script, the package versions, the entry's `Model(...)` in zoo.py's
    MODELS and the source of every top-level definition of zoo.py that it reaches (its classes, functions and
    constants, and theirs in turn): editing one entry or one model's helper re-exports what uses it only."""
    import ast

    import zoo

    text = (HERE / "zoo.py").read_text()
    tree = ast.parse(text)
    defined = {}  # top-level name -> (source, names it refers to)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        else:
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        for name in names:
            defined[name] = (ast.get_source_segment(text, node), used)
    listing = next(node for node in tree.body if isinstance(node, ast.Assign)
                   and any(getattr(t, "id", None) == "MODELS" for t in node.targets))

    def closure(node):
        seen, todo = set(), [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
        while todo:
            name = todo.pop()
            if name in defined and name not in seen and name != "MODELS":
                seen.add(name)
                todo.extend(defined[name][1])
        return "".join(defined[name][0] for name in sorted(seen))

    entries = {ast.literal_eval(call.args[0]): ast.get_source_segment(text, call) + closure(call)
               for call in listing.value.elts}
    base = hashlib.sha256()
    base.update((HERE / "export.py").read_bytes())
    base.update(json.dumps(package_versions(), sort_keys=True).encode())
    keys = {}
    for name, form in zoo.cases():
        digest = base.copy()
        digest.update(("\0%s\0%s" % (entries[name], form)).encode())
        keys[(name, form)] = digest.hexdigest()[:12]
    return keys


def default_cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("ETNP_LIVE_CACHE", pathlib.Path.home() / ".cache" / "etnp" / "live-exports"))


# --- export -------------------------------------------------------------------------------------------------------

def _lower(programs, partition: bool, config=None):
    from executorch.exir import to_edge_transform_and_lower

    partitioner = []
    if partition:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    edge = to_edge_transform_and_lower(programs, partitioner=partitioner)
    return edge.to_executorch(config) if config is not None else edge.to_executorch()


def _pt2e(module, example, dynamic: bool, calibration_inputs):
    """PT2E quantization with the XNNPACK quantizer: static per-channel int8, or dynamic (qd8) activations."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                is_dynamic=dynamic))
    graph = torch.export.export(module, example).module()
    graph = prepare_pt2e(graph, quantizer)
    for batch in calibration_inputs:
        graph(*batch)
    return convert_pt2e(graph)


def _as_numpy(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().contiguous().numpy()
    return np.asarray(value)


def _flatten_outputs(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        flat = []
        for item in out:
            flat.extend(_flatten_outputs(item))
        return flat
    return [out]


def _write_arrays(folder: pathlib.Path, prefix: str, values) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, v in enumerate(values):
        name = "%s_%d.npy" % (prefix, i)
        np.save(folder / name, _as_numpy(v), allow_pickle=False)
        names.append(name)
    return names


# A short multilingual text: the language-model entries' tokenizers are trained on it (offline, at export time).
TOKENIZER_CORPUS = [
    "Once upon a time, a small robot walked through the quiet city at night.",
    "The quick brown fox jumps over the lazy dog; numbers like 1234 and 3.14159 appear too.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München!",
    "Le renard brun rapide saute par-dessus le chien paresseux, n'est-ce pas ?",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。今天天气很好。", "素早い茶色の狐がのろまな犬を飛び越える。",
    "def generate(tokens):\n    for t in tokens:\n        yield t * 2  # code, tabs\tand spaces",
    "Emoji too: 🤖🚀✨ and accents: café, naïve, coöperate.",
]
LLM_PROMPT = "Once upon a time, a small robot"
LLM_GREEDY_TOKENS = 24
LLM_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # ids 0, 1 (BOS) and 2 (EOS)


def _train_tokenizer(vocab_size: int, path: pathlib.Path) -> None:
    """A byte-level BPE tokenizer.json (GPT-2 / Llama 3 style) of `vocab_size` tokens, trained on the corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=LLM_SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TOKENIZER_CORPUS * 4, trainer)
    tokenizer.save(str(path))


def _random_checkpoint(params: dict, path: pathlib.Path) -> None:
    """Seeded weights for llama_transformer at `params`, scaled so that the attention and MLP outputs outweigh
    the embedding in the residual stream: the next token then depends on the context, not on the last token
    alone (PyTorch's default initialisation makes greedy decoding of a random model repeat one token)."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    model = construct_transformer(ModelArgs(**params))
    _scaled_random_weights(model)
    torch.save(model.state_dict(), path)


def _scaled_random_weights(model) -> None:
    """Seeded weights in place: matrices N(0, 1/fan_in), norm scales around 1, biases around 0.1."""
    import math

    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():  # parameters only: the RoPE tables are buffers
            if weight.dim() >= 2:
                weight.copy_(torch.randn(weight.shape, generator=generator) / math.sqrt(weight.shape[-1]))
            elif name.endswith("weight"):  # norm scales around 1
                weight.copy_(1 + 0.2 * torch.randn(weight.shape, generator=generator))
            else:  # biases
                weight.copy_(0.1 * torch.randn(weight.shape, generator=generator))


def export_llm(model, form: str, out: pathlib.Path) -> dict:
    """A language model through ExecuTorch's LLM export, with a tokenizer trained for it; the case is a prefill
    of zoo.LLM_PREFILL random tokens, then zoo.LLM_DECODE_STEPS single tokens, on one loaded method."""
    import torch
    import zoo
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig, ModelType

    spec, options = model.llm, zoo.LLM_FORM_OPTIONS[form]
    (out / "params.json").write_text(json.dumps(spec["params"]))
    _train_tokenizer(spec["params"]["vocab_size"], out / "tokenizer.json")
    _random_checkpoint(spec["params"], out / "checkpoint.pth")
    config = LlmConfig()
    # llama3 with a params file and a checkpoint: the architecture is the params' own (the named model classes
    # would download their checkpoints).
    config.base.model_class = ModelType.llama3
    config.base.params = str(out / "params.json")
    # export_llama reads "int8" or "8da4w" in the checkpoint's path as "already quantized": the form is in this
    # folder's name, so the checkpoint is passed through a link whose path has neither.
    link_dir = tempfile.mkdtemp(prefix="etnp-llm-")
    (pathlib.Path(link_dir) / "checkpoint.pth").symlink_to(out / "checkpoint.pth")
    config.base.checkpoint = str(pathlib.Path(link_dir) / "checkpoint.pth")
    config.base.metadata = json.dumps({"get_bos_id": 1, "get_eos_ids": [2]})
    config.model.use_kv_cache = True
    config.model.use_sdpa_with_kv_cache = True
    config.model.enable_dynamic_shape = True
    config.model.quantize_kv_cache = bool(options.get("quantize_kv_cache"))
    for key, value in spec["model"].items():
        setattr(config.model, key, value)
    config.export.max_seq_length = config.export.max_context_length = zoo.LLM_MAX_SEQ
    config.export.output_dir = str(out)
    config.export.output_name = str(out / "program.pte")  # a name ending in .pte is the path itself
    config.backend.xnnpack.enabled = config.backend.xnnpack.extended_ops = options["xnnpack"]
    if "qmode" in options:
        config.quantization.qmode = options["qmode"]
        config.quantization.group_size = options["group_size"]
    config.quantization.embedding_quantize = options.get("embedding_quantize")
    torch.manual_seed(0)
    try:
        export_llama(config)
    finally:
        shutil.rmtree(link_dir, ignore_errors=True)
    if not (out / "program.pte").is_file():
        raise RuntimeError("export_llama wrote no program.pte")

    return _llm_record(model, form, out, spec["params"]["vocab_size"], lambda start, n: torch.tensor([start]),
                       {"prompt": LLM_PROMPT, "max_new_tokens": LLM_GREEDY_TOKENS})


def _llm_record(model, form: str, out: pathlib.Path, vocab: int, positions, generation: dict) -> dict:
    """The record of a language model, with its stateful case written: a prefill of zoo.LLM_PREFILL random
    tokens, then zoo.LLM_DECODE_STEPS single tokens, on one loaded method; `positions(start, n)` is a call's
    position input (its start, or one position per token)."""
    import torch
    import zoo

    generator = torch.Generator().manual_seed(0)
    prefill = torch.randint(0, vocab, (1, zoo.LLM_PREFILL), generator=generator)
    calls = [(prefill, positions(0, zoo.LLM_PREFILL))]
    for k in range(zoo.LLM_DECODE_STEPS):
        token = torch.randint(0, vocab, (1, 1), generator=generator)
        calls.append((token, positions(zoo.LLM_PREFILL + k, 1)))
    record = {"model": model.name, "form": form, "stateful": True, "file": "program.pte", "data_files": [],
              "tokenizer": "tokenizer.json", "cases": [], "generation": generation}
    folder = out / "forward__0"
    record["cases"].append({"method": "forward", "dir": folder.name, "calls": [
        {"inputs": _write_arrays(folder / ("call_%02d" % c), "input", call), "outputs": 1, "dir": "call_%02d" % c}
        for c, call in enumerate(calls)]})
    return record


def export_optimum(model, form: str, out: pathlib.Path) -> dict:
    """A transformers decoder (zoo's `optimum` entries: a configuration, seeded weights) saved to a folder and
    exported by optimum-executorch's main_export, with a tokenizer trained for it. The program takes token ids
    [1, n] and one cache position per token [n]; the case is export_llm's prefill and decode steps."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder only: nothing may come from the hub
    import torch
    import transformers
    import zoo
    from optimum.exporters.executorch import main_export

    spec, options = model.optimum, dict(zoo.OPTIMUM_FORM_OPTIONS[form])
    params = spec["params"]
    _train_tokenizer(params["vocab_size"], out / "tokenizer.json")
    config = getattr(transformers, spec["config"])(**params)
    torch.manual_seed(0)
    decoder = transformers.AutoModelForCausalLM.from_config(config).eval()
    _scaled_random_weights(decoder)
    work = pathlib.Path(tempfile.mkdtemp(prefix="etnp-optimum-"))
    try:
        decoder.save_pretrained(work / "hf")
        torch.manual_seed(0)
        main_export(str(work / "hf"), task="text-generation", recipe=options.pop("recipe"),
                    output_dir=str(work / "pte"), attn_implementation="custom_sdpa", max_seq_len=zoo.LLM_MAX_SEQ,
                    local_files_only=True, **options)
        written = sorted(p.name for p in (work / "pte").iterdir())
        if written != ["model.pte"]:
            raise RuntimeError("optimum-executorch wrote %s, not one model.pte" % written)
        shutil.move(str(work / "pte" / "model.pte"), str(out / "program.pte"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    return _llm_record(model, form, out, params["vocab_size"], lambda start, n: torch.arange(start, start + n),
                       {"prompt": LLM_PROMPT, "max_new_tokens": LLM_GREEDY_TOKENS, "positions": "per_token"})


def export_one(model, form: str, out: pathlib.Path) -> dict:
    """Exports `model` in `form` into `out`; returns the export record (without official results)."""
    import torch
    import zoo

    if model.llm is not None:
        return export_llm(model, form, out)
    if model.optimum is not None:
        return export_optimum(model, form, out)

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    module = model.build()
    example = model.inputs(generator)
    stateful = model.calls is not None
    dynamic = model.dynamic_shapes() if model.dynamic_shapes else None
    methods = {"forward": [example] + (model.dynamic_inputs(generator) if model.dynamic_inputs else [])}
    if stateful:
        methods["forward"] = [model.calls(generator)]
    extra = {}
    for name, (factory, inputs) in model.extra_methods.items():
        extra[name] = (factory(module).eval(), inputs(generator))
        methods[name] = [extra[name][1]]

    # Eager outputs first: the quantizers rewrite the module in place.
    eager = {}
    with torch.no_grad():
        for name, cases in methods.items():
            target = module if name == "forward" else extra[name][0]
            if stateful:
                fresh = model.build()
                eager[name] = [[_flatten_outputs(fresh(*call)) for call in cases[0]]]
            else:
                eager[name] = [_flatten_outputs(target(*inputs)) for inputs in cases]

    data_files = []
    config = None
    if form in (zoo.INT8, zoo.QD8):
        calibration = [model.inputs(torch.Generator().manual_seed(100 + i)) for i in range(model.calibration)]
        module = _pt2e(module, example, dynamic=form == zoo.QD8, calibration_inputs=calibration)
    elif form == zoo.W4:
        from torchao.quantization.granularity import PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

        quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                                weight_granularity=PerGroup(32)))
    if form == zoo.PTD:
        from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

        graph = torch.export.export(module, example).module()
        delegate_external_constants_pass_unlifted(graph, gen_tag_fn=lambda node: "program")
        module = graph
    if form == zoo.PORTABLE_PTD:
        from executorch.exir import ExecutorchBackendConfig

        config = ExecutorchBackendConfig(external_constants=True)

    if hasattr(module, "torch_export"):
        exported = {"forward": module.torch_export(*example)}
    else:
        exported = {"forward": torch.export.export(module, example, dynamic_shapes=dynamic)}
    for name, (target, inputs) in extra.items():
        exported[name] = torch.export.export(target, inputs)
    partition = form not in (zoo.PORTABLE, zoo.PORTABLE_PTD)
    program = _lower(exported if len(exported) > 1 else exported["forward"], partition, config)

    record = {"model": model.name, "form": form, "stateful": stateful, "cases": [], "data_files": []}
    if form == zoo.BUNDLED:
        from executorch.devtools import BundledProgram
        from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
        from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

        suites = [MethodTestSuite(method_name=name, test_cases=[
            MethodTestCase(inputs=list(inputs), expected_outputs=eager[name][k])
            for k, inputs in enumerate(cases)]) for name, cases in methods.items()]
        bundled = BundledProgram(program, suites)
        (out / "program.bpte").write_bytes(serialize_from_bundled_program_to_flatbuffer(bundled))
        record["file"] = "program.bpte"
    else:
        (out / "program.pte").write_bytes(program.buffer)
        record["file"] = "program.pte"
    if form in (zoo.PTD, zoo.PORTABLE_PTD):
        program.write_tensor_data_to_file(str(out))
        data_files = sorted(p.name for p in out.glob("*.ptd"))
        if not data_files:
            raise RuntimeError("the exporter wrote no .ptd file")
    record["data_files"] = data_files

    for name, cases in methods.items():
        for k, inputs in enumerate(cases):
            case = "%s__%d" % (name, k)
            folder = out / case
            if stateful:
                calls = []
                for c, call in enumerate(inputs):
                    sub = folder / ("call_%02d" % c)
                    calls.append({"inputs": _write_arrays(sub, "input", call),
                                  "torch": _write_arrays(sub, "torch", eager[name][k][c]), "dir": sub.name})
                record["cases"].append({"method": name, "dir": case, "calls": calls})
            else:
                record["cases"].append({"method": name, "dir": case, "inputs": _write_arrays(folder, "input", inputs),
                                        "torch": _write_arrays(folder, "torch", eager[name][k])})
    return record


# --- the official runtime ----------------------------------------------------------------------------------------

def official_outputs(program_dir: pathlib.Path) -> None:
    """Runs every case of program_dir with the official runtime, writing official_<i>.npy."""
    import torch
    from executorch.runtime import Runtime

    # The official runtime runs the LLM exports' operators once their libraries are loaded.
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401

    record = json.loads((program_dir / "export.json").read_text())
    runtime = Runtime.get()
    loaded = {}
    path = program_dir / record["file"]
    data = str(program_dir / record["data_files"][0]) if record["data_files"] else None
    if record["file"].endswith(".bpte"):
        from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_bundled_program
        from executorch.extension.pybindings.portable_lib import _load_bundled_program_from_buffer

        bundle = _load_bundled_program_from_buffer(path.read_bytes())
        module = _load_for_executorch_from_bundled_program(bundle)

        def run(method, inputs):
            return module.run_method(method, tuple(inputs))
    else:
        program = runtime.load_program(path, data_path=data)

        def run(method, inputs):
            if method not in loaded:
                loaded[method] = program.load_method(method)
            return loaded[method].execute(inputs)

    def load(folder, names):
        return [torch.from_numpy(np.load(folder / n)) for n in names]

    for case in record["cases"]:
        folder = program_dir / case["dir"]
        if "calls" in case:
            loaded.pop(case["method"], None)  # a fresh method for each stateful case
            for call in case["calls"]:
                sub = folder / call["dir"]
                _write_arrays(sub, "official", _flatten_outputs(run(case["method"], load(sub, call["inputs"]))))
        else:
            _write_arrays(folder, "official", _flatten_outputs(run(case["method"], load(folder, case["inputs"]))))
    if "generation" in record:
        official_greedy(program_dir, record, runtime.load_program(path))


def official_greedy(program_dir: pathlib.Path, record: dict, program) -> None:
    """The reference for etnp's generators: the prompt (BOS, then the tokenizer's ids) prefilled in one call,
    then greedy decoding one token per call until EOS or max_new_tokens, with the official runtime. Writes
    generation.json: the prompt's ids and the generated ones. The position input is the call's start
    (ExecuTorch's LLM export), or one position per token where the record says "positions": "per_token"
    (transformers' static cache, optimum-executorch), whose logits are every token's."""
    import torch
    from tokenizers import Tokenizer

    spec = record["generation"]
    per_token = spec.get("positions") == "per_token"
    tokenizer = Tokenizer.from_file(str(program_dir / record["tokenizer"]))
    bos = program.load_method("get_bos_id").execute([])[0]
    # ExecuTorch's LLM export writes get_eos_ids, optimum-executorch get_eos_id (etnp reads either).
    eos_method = "get_eos_ids" if "get_eos_ids" in program.method_names else "get_eos_id"
    eos = set(program.load_method(eos_method).execute([]))
    prompt = [bos] + tokenizer.encode(spec["prompt"]).ids
    forward = program.load_method("forward")

    def step(ids, start):
        positions = torch.arange(start, start + len(ids)) if per_token else torch.tensor([start])
        logits = forward.execute([torch.tensor([ids]), positions])[0]
        return logits[0, -1] if per_token else logits[0]

    logits = step(prompt, 0)
    generated, pos = [], len(prompt)
    while len(generated) < spec["max_new_tokens"]:
        token = int(torch.argmax(logits))
        generated.append(token)
        if token in eos:
            break
        logits = step([token], pos)
        pos += 1
    (program_dir / "generation.json").write_text(json.dumps({"prompt_ids": prompt, "official_ids": generated,
                                                             "text": tokenizer.decode(generated)}))


def run_official(program_dirs) -> dict:
    """Official outputs for every folder, in child processes (importing torch costs seconds, so one child takes
    the folders in turn). A child that crashes, or spends over OFFICIAL_TIMEOUT_S on one folder, costs that
    folder a "crash" or "hang" status and the next child goes on after it.
    Returns {folder: {"status": "ok" | "error" | "crash" | "hang", "detail": ...}}."""
    results = {}
    pending = list(program_dirs)
    while pending:
        progress = pending[0].parent / ".official-progress"
        progress.unlink(missing_ok=True)
        log = pending[0].parent / ".official-stderr"
        with open(log, "w") as stderr:
            child = subprocess.Popen([sys.executable, str(HERE / "export.py"), "--official", "--progress",
                                      str(progress)] + [str(d) for d in pending],
                                     stdout=subprocess.DEVNULL, stderr=stderr)
            seen, last_change, failure = 0, time.time(), None
            while child.poll() is None:
                time.sleep(0.2)
                count = len(progress.read_text().splitlines()) if progress.is_file() else 0
                if count != seen:
                    seen, last_change = count, time.time()
                elif time.time() - last_change > OFFICIAL_TIMEOUT_S:
                    child.kill()
                    child.wait()
                    failure = {"status": "hang", "detail": "no result within %d s" % OFFICIAL_TIMEOUT_S}
        lines = progress.read_text().splitlines() if progress.is_file() else []
        for line in lines:
            entry = json.loads(line)
            results[pathlib.Path(entry.pop("dir"))] = entry
        rest = pending[len(lines):]
        if rest:
            if failure is None:
                code = child.returncode
                failure = {"status": "crash" if code < 0 else "error",
                           "detail": "signal %d" % -code if code < 0 else "exit status %d" % code}
            failure["stderr"] = log.read_text(errors="replace").strip().splitlines()[-12:]
            results[rest[0]] = failure
            rest = rest[1:]
        pending = rest
        progress.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
    return results


# --- driver -------------------------------------------------------------------------------------------------------

def ensure(cache: pathlib.Path, wanted) -> list:
    """Exports (and runs officially) every wanted (model, form) not already in `cache`; returns the records."""
    import zoo

    keys = entry_keys()
    fresh = []
    for name, form in wanted:
        out = cache / ("%s__%s__%s" % (name, form, keys[(name, form)]))
        if (out / "export.json").is_file():
            continue
        tmp = out.with_name(out.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        tmp.mkdir(parents=True)
        t0 = time.time()
        try:
            record = export_one(zoo.BY_NAME[name], form, tmp)
        except Exception as e:  # the exporter refused the model: recorded, reported by the tests
            record = {"model": name, "form": form, "export_error": "%s: %s" % (type(e).__name__, e),
                      "traceback": traceback.format_exc().splitlines()[-15:], "cases": []}
        record["export_s"] = round(time.time() - t0, 1)
        record["versions"] = package_versions()
        (tmp / "export.json").write_text(json.dumps(record, indent=1))
        print("exported %-40s %6.1f s  %s" % (out.name, record["export_s"], record.get("export_error", "")),
              file=sys.stderr, flush=True)
        fresh.append((tmp, out, record))
    official = run_official([tmp for tmp, _, record in fresh if "export_error" not in record])
    for tmp, out, record in fresh:
        if "export_error" not in record:
            record["official"] = official[tmp]
            print("official %-40s %s" % (out.name, record["official"]["status"]), file=sys.stderr, flush=True)
        (tmp / "export.json").write_text(json.dumps(record, indent=1))
        subprocess.run(["rm", "-rf", str(out)], check=True)
        tmp.rename(out)
    return [cache / ("%s__%s__%s" % (name, form, keys[(name, form)])) for name, form in wanted]


def main() -> int:
    sys.path.insert(0, str(HERE))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", help="cache root (default $ETNP_LIVE_CACHE or ~/.cache/etnp/live-exports)")
    parser.add_argument("--only", action="append", default=[], help="NAME or NAME:FORM (repeatable)")
    parser.add_argument("--official", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    parser.add_argument("folders", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.official:
        with open(args.progress, "a") as progress:
            for folder in args.folders:
                entry = {"dir": folder, "status": "ok"}
                try:
                    official_outputs(pathlib.Path(folder))
                except Exception as e:  # the official runtime refused the program or an input
                    entry = {"dir": folder, "status": "error", "detail": "%s: %s" % (type(e).__name__, e)}
                progress.write(json.dumps(entry) + "\n")
                progress.flush()
        return 0
    import zoo

    cache = pathlib.Path(args.cache) if args.cache else default_cache_root()
    wanted = zoo.cases()
    if args.only:
        keep = set(args.only)
        wanted = [(n, f) for n, f in wanted if n in keep or "%s:%s" % (n, f) in keep]
    cache.mkdir(parents=True, exist_ok=True)
    for folder in ensure(cache, wanted):
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
