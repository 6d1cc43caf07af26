#!/usr/bin/python3
"""Language-model speed: prefill and decode tokens/s of etnp, the official ExecuTorch runtime and llama.cpp on
one benchmark-sized llama-architecture model, side by side in interleaved rounds, written as the section
"## Language models" of bench/RESULTS.md.

    ./scripts/build.sh                                    # build/etnp, build/python
    VENV=$(./scripts/dev-venv.sh)                         # official ExecuTorch + torch: export and baseline
    python3 -m venv ~/.cache/etnp/llama-venv && ~/.cache/etnp/llama-venv/bin/pip install \\
        llama-cpp-python==0.3.36 gguf==0.19.0            # llama.cpp (built from source) and the GGUF writer
    /usr/bin/python3 bench/llm_bench.py [--build-dir build] [--output bench/RESULTS.md] [--quick] [--rounds R]
                                        [--layers L]     # fewer than SmolLM2's 30 layers: a shorter export
                                        [--dim D]        # wider than SmolLM2's 576: 128 divides 640

What it does:
1. Exports, once (cached under `<live-export cache>/llm-bench/`), a SmolLM2-135M-shaped llama_transformer
   (dim 576 or --dim, 30 layers or --layers, 9 heads, 3 KV heads, hidden 1536, vocab 49152; --dim sets the heads
   too, below) with random seeded weights through
   ExecuTorch's LLM export, reusing tests/live/export.py's export_llm: fp32 (XNNPACK) and 8da4w in groups of
   32 and 128. The same checkpoint is written as GGUF files for llama.cpp: F32, and Q4_0 for the 4-bit rows.
2. Times, in the same rounds (every runtime once per round and cell, the order rotating), at 1 and 2 threads,
   a greedy generation of a fixed prompt (BOS + PROMPT_TOKENS ids) and DECODE_TOKENS new tokens:
   - etnp: `etnp generate --json` (a fresh process each time) and the Python package's `LLM.generate` on ids
     (a long-lived /usr/bin/python3 worker, threads set through the XNNPACK backend option);
   - the official runtime: a greedy loop over `executorch.runtime` Method.execute (the prompt in one call, then
     one call per token), its pool set with `_unsafe_reset_threadpool(N)`, in a dev-venv worker;
   - llama.cpp (llama-cpp-python): `Llama.eval` of the prompt ids, then one `eval` per greedy token, n_threads=N
     and n_threads_batch=N, in a llama-venv worker.
   Prefill tokens/s = prompt tokens / time of the prompt's call(s); decode tokens/s = the tokens after the first
   / their time (the first token comes from the prefill logits): the figures `etnp generate` prints.
3. Decode memory-bandwidth efficiency: the weight bytes one token reads (every linear, the output projection
   included, and the norms; one embedding row) times decode tokens/s, against the best plain read of 256 MiB on
   2 MiB pages at the same thread count (`etnp_bench_machine_peak`, at the start and the end: a decoding step
   only reads its weights, so that is its wall), and the best of several numpy copies of a 256 MiB array in the
   same run (read + write bytes).

Internal modes: `--export` (dev venv), `--worker official|llama|etnp_py` (JSON lines on stdin/stdout),
`--write-gguf` (llama venv). Benchmarks are reported, never asserted.
"""
import argparse
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
LIVE = ROOT / "tests" / "live"
DEV_VENV_PYTHON = pathlib.Path.home() / ".cache" / "etnp" / "dev-venv" / "bin" / "python"
LLAMA_VENV_PYTHON = pathlib.Path.home() / ".cache" / "etnp" / "llama-venv" / "bin" / "python"

MODEL_NAME = "smollm2_135m"  # with the layer count and width where they differ: smollm2_135m_L8_d640 (configure)
# SmolLM2-135M's shape (its tied embeddings are exported untied: see zoo._smollm).
PARAMS = {"dim": 576, "n_layers": 30, "n_heads": 9, "n_kv_heads": 3, "head_dim": 64, "hidden_dim": 1536,
          "vocab_size": 49152, "norm_eps": 1e-5, "rope_theta": 100000.0}
MAX_SEQ = 256
FORMS = {  # form -> (tests/live/zoo.py form options, GGUF type of the matching llama.cpp file)
    "fp32": ("llm_fp32", "F32"),
    "8da4w_g32": ("llm_8da4w_g32", "Q4_0"),
    "8da4w_g128": ("llm_8da4w_g128", "Q4_0"),
}
PROMPT_TOKENS = 96  # prompt ids after BOS
DECODE_TOKENS = 64
THREADS = (1, 2)
ARGS_LIVE_CACHE = None  # --live-cache
BOS = 1


def configure(layers: int, dim: int = 576) -> None:
    """SmolLM2-135M's shape with `layers` layers (30 is the real model; fewer export faster) and width `dim` (576
    is the real model's). The exporter quantizes in groups of 128 only the linears whose input size 128 divides,
    which 576 is not: a 640-wide model makes the groups-of-128 form 4-bit throughout. The width keeps the head
    size (64): dim / 64 heads, and as KV heads the largest divisor of that at most a third of it (SmolLM2's 9
    and 3; 10 and 2 at 640)."""
    global MODEL_NAME
    head_dim = PARAMS["head_dim"]
    if dim % head_dim:
        raise SystemExit("--dim %d: not a multiple of the head size %d" % (dim, head_dim))
    heads = dim // head_dim
    PARAMS.update(n_layers=layers, dim=dim, n_heads=heads,
                  n_kv_heads=max(k for k in range(1, heads + 1) if heads % k == 0 and 3 * k <= heads) if heads >= 3
                  else heads)
    MODEL_NAME = "smollm2_135m" + ("" if layers == 30 else "_L%d" % layers) + ("" if dim == 576 else "_d%d" % dim)


def shape_args(args) -> list:
    """The options that choose the model, for the sub-processes (export, GGUF writer, workers)."""
    return ["--layers", str(args.layers), "--dim", str(args.dim)] + \
        (["--live-cache", args.live_cache] if args.live_cache else [])


def cache_root(arg=None) -> pathlib.Path:
    base = arg or os.environ.get("ETNP_LIVE_CACHE") or pathlib.Path.home() / ".cache" / "etnp" / "live-exports"
    return pathlib.Path(base) / "llm-bench"


def log(*args):
    print("[llm_bench %s]" % time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


# --- export (dev venv) ---------------------------------------------------------------------------------------------

def _pad_tokenizer(path: pathlib.Path, vocab_size: int) -> None:
    """The trained tokenizer covers a few hundred ids of the model's vocabulary; entries `<extra_i>` fill the BPE
    vocabulary up to vocab_size, so that every id the random model generates decodes (to its name). They have
    no merges: encoding never yields them."""
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    for i in range(vocab_size):
        if i not in taken:
            vocab["<extra_%d>" % i] = i
    path.write_text(json.dumps(data))


def export_models(root: pathlib.Path, forms) -> None:
    import types

    sys.path.insert(0, str(LIVE))
    import export as live_export  # tests/live/export.py
    import zoo

    zoo.LLM_MAX_SEQ = MAX_SEQ  # export_llm reads the context length from the zoo module
    model = types.SimpleNamespace(name=MODEL_NAME, llm={"params": dict(PARAMS), "model": {}})
    for form in forms:
        zoo_form = FORMS[form][0]
        out = root / ("%s__%s" % (MODEL_NAME, form))
        if (out / "export.json").is_file():
            continue
        tmp = out.with_name(out.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        tmp.mkdir(parents=True)
        t0 = time.time()
        record = live_export.export_llm(model, zoo_form, tmp)
        _pad_tokenizer(tmp / "tokenizer.json", PARAMS["vocab_size"])
        record.update(export_s=round(time.time() - t0, 1), versions=live_export.package_versions(),
                      max_seq_len=MAX_SEQ, params=PARAMS)
        (tmp / "export.json").write_text(json.dumps(record, indent=1))
        if form != "fp32":  # the fp32 folder keeps the checkpoint (the same seeded weights) for the GGUF files
            (tmp / "checkpoint.pth").unlink()
        subprocess.run(["rm", "-rf", str(out)], check=True)
        tmp.rename(out)
        log("exported %s in %.0f s" % (out.name, time.time() - t0))


def exported_forms(root: pathlib.Path) -> list:
    return [form for form in FORMS if (root / ("%s__%s" % (MODEL_NAME, form)) / "export.json").is_file()]


def write_prompt(root: pathlib.Path) -> None:
    """prompt.json: a text of the tokenizer's own corpus whose encoding (with BOS) is PROMPT_TOKENS + 1 ids, and
    those ids; every runtime gets the same ids (`etnp generate` the text, which it must encode the same)."""
    from tokenizers import Tokenizer

    sys.path.insert(0, str(LIVE))
    import export as live_export

    tokenizer = Tokenizer.from_file(str(root / ("%s__fp32" % MODEL_NAME) / "tokenizer.json"))
    words = " ".join(live_export.TOKENIZER_CORPUS * 20).split(" ")
    text = ""
    for word in words:
        longer = (text + " " + word) if text else word
        if len(tokenizer.encode(longer).ids) > PROMPT_TOKENS:
            break
        text = longer
    ids = [BOS] + tokenizer.encode(text).ids
    (root / (MODEL_NAME + ".prompt.json")).write_text(json.dumps({"text": text, "ids": ids}))


# --- GGUF (llama venv) --------------------------------------------------------------------------------------------

# llama_transformer's state-dict names -> llama.cpp's (per layer: {i}).
GGUF_NAMES = {"tok_embeddings.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
              "output.weight": "output.weight"}
GGUF_LAYER_NAMES = {"attention.wq.weight": "attn_q.weight", "attention.wk.weight": "attn_k.weight",
                    "attention.wv.weight": "attn_v.weight", "attention.wo.weight": "attn_output.weight",
                    "feed_forward.w1.weight": "ffn_gate.weight", "feed_forward.w3.weight": "ffn_up.weight",
                    "feed_forward.w2.weight": "ffn_down.weight", "attention_norm.weight": "attn_norm.weight",
                    "ffn_norm.weight": "ffn_norm.weight"}


def gguf_path(root: pathlib.Path, kind: str) -> pathlib.Path:
    return root / ("%s__%s.gguf" % (MODEL_NAME, kind.lower()))


def write_gguf(root: pathlib.Path, weights_npz: pathlib.Path, kind: str) -> None:
    """The checkpoint (an .npz of its float32 tensors) as a llama-architecture GGUF: F32 throughout, or Q4_0 for
    every linear (the output projection too) with the embedding in Q8_0 and the norms in F32. The vocabulary is
    the export's byte-level BPE (tokenizer.json) as a "gpt2" tokenizer. llama.cpp's llama graph rotates
    interleaved pairs, the layout of llama_transformer's checkpoints, so q and k are written as they are."""
    import gguf
    import numpy as np

    tok = json.loads((root / ("%s__fp32" % MODEL_NAME) / "tokenizer.json").read_text())
    specials = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    by_id = {i: s for s, i in tok["model"]["vocab"].items()}
    for t in tok.get("added_tokens", []):
        by_id[t["id"]] = t["content"]
    tokens = [by_id[i] for i in range(PARAMS["vocab_size"])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]

    out = gguf_path(root, kind)
    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    p = PARAMS
    w.add_name(MODEL_NAME)
    w.add_context_length(MAX_SEQ)
    w.add_embedding_length(p["dim"])
    w.add_block_count(p["n_layers"])
    w.add_feed_forward_length(p["hidden_dim"])
    w.add_head_count(p["n_heads"])
    w.add_head_count_kv(p["n_kv_heads"])
    w.add_rope_dimension_count(p["head_dim"])
    w.add_key_length(p["head_dim"])
    w.add_value_length(p["head_dim"])
    w.add_layer_norm_rms_eps(p["norm_eps"])
    w.add_rope_freq_base(p["rope_theta"])
    w.add_vocab_size(p["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if kind == "F32" else gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL
                       for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    arrays = np.load(weights_npz)
    for name in arrays.files:
        if name.startswith("layers."):
            _, layer, rest = name.split(".", 2)
            if rest not in GGUF_LAYER_NAMES:
                continue
            target = "blk.%s.%s" % (layer, GGUF_LAYER_NAMES[rest])
        elif name in GGUF_NAMES:
            target = GGUF_NAMES[name]
        else:
            continue  # RoPE tables and other buffers
        data = arrays[name].astype(np.float32)
        qtype = gguf.GGMLQuantizationType.F32
        if kind == "Q4_0" and data.ndim == 2:
            qtype = gguf.GGMLQuantizationType.Q8_0 if target == "token_embd.weight" else gguf.GGMLQuantizationType.Q4_0
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(target, data)
        else:
            w.add_tensor(target, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.rename(out)


def checkpoint_npz(root: pathlib.Path) -> pathlib.Path:
    """(dev venv) The fp32 export's checkpoint.pth as float32 arrays, for the GGUF writer (which has no torch)."""
    import numpy as np
    import torch

    path = root / (MODEL_NAME + ".checkpoint.npz")
    if not path.is_file():
        state = torch.load(root / ("%s__fp32" % MODEL_NAME) / "checkpoint.pth", map_location="cpu")
        np.savez(path.with_suffix(".tmp.npz"), **{k: v.float().numpy() for k, v in state.items() if v.dim() >= 1})
        path.with_suffix(".tmp.npz").rename(path)
    return path


# --- workers: one long-lived process per (runtime, threads), JSON lines ---------------------------------------------

def _program(root: pathlib.Path, form: str) -> pathlib.Path:
    return root / ("%s__%s" % (MODEL_NAME, form)) / "program.pte"


class OfficialRunner:
    """The official runtime (dev venv): a greedy loop over Method.execute, the prompt in one call."""

    def __init__(self, root, threads):
        import torch
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (llama::* operators)
        import executorch.kernels.quantized  # noqa: F401  (quantized embedding operators)
        from executorch.extension.pybindings.portable_lib import (_threadpool_get_thread_count,
                                                                  _unsafe_reset_threadpool)
        from executorch.runtime import Runtime

        self.torch = torch
        # Set once, before any program is loaded: XNNPACK keeps the pool it was initialised with.
        _unsafe_reset_threadpool(threads)
        torch.set_num_threads(1)
        self.threads = _threadpool_get_thread_count()
        runtime = Runtime.get()
        self.programs = {form: runtime.load_program(str(_program(root, form))) for form in exported_forms(root)}
        self.methods = {form: p.load_method("forward") for form, p in self.programs.items()}

    def generate(self, form, ids, new_tokens):
        torch = self.torch
        forward = self.methods[form]
        t0 = time.perf_counter()
        logits = forward.execute([torch.tensor([ids], dtype=torch.long), torch.tensor([0], dtype=torch.long)])[0]
        token = int(torch.argmax(logits[0]))
        t1 = time.perf_counter()
        out, pos = [token], len(ids)
        while len(out) < new_tokens:
            logits = forward.execute([torch.tensor([[token]], dtype=torch.long),
                                      torch.tensor([pos], dtype=torch.long)])[0]
            token = int(torch.argmax(logits[0]))
            out.append(token)
            pos += 1
        t2 = time.perf_counter()
        return {"prefill_s": t1 - t0, "decode_s": t2 - t1, "prompt_tokens": len(ids), "ids": out}


class EtnpPythonRunner:
    """etnp's Python package: LLM.generate on ids (the C++ Generator's loop), threads through the backend option."""

    def __init__(self, root, threads, build_dir):
        sys.path.insert(0, str(pathlib.Path(build_dir).resolve() / "python"))
        import executorch_numpy_runtime as etnp

        etnp.Runtime.get().backend_registry.set_option("XnnpackBackend", {"num_threads": threads})
        self.threads = int(etnp.runtime_info()["num_threads"])
        self.llms = {form: etnp.LLM(str(_program(root, form))) for form in exported_forms(root)}

    def generate(self, form, ids, new_tokens):
        r = self.llms[form].generate(ids, max_new_tokens=new_tokens, add_bos=False)
        return {"prefill_s": r.prefill_seconds, "decode_s": r.decode_seconds, "prompt_tokens": r.prompt_tokens,
                "ids": list(r.ids), "stop": r.stop_reason}


class LlamaCppRunner:
    """llama.cpp through llama-cpp-python (llama venv): Llama.eval of the prompt ids, then one eval per greedy
    token, on the GGUF of the same checkpoint."""

    def __init__(self, root, threads):
        import numpy as np
        import llama_cpp

        self.np = np
        self.threads = threads
        self.version = llama_cpp.__version__
        files = {form: gguf_path(root, FORMS[form][1]) for form in exported_forms(root)}
        self.models = {}
        for form, path in files.items():
            self.models[form] = llama_cpp.Llama(model_path=str(path), n_ctx=MAX_SEQ, n_batch=MAX_SEQ,
                                                n_ubatch=MAX_SEQ, n_threads=threads, n_threads_batch=threads,
                                                verbose=False)

    def last_logits(self, llm):
        # The last evaluated token's logits, from the context: llama-cpp-python 0.3 no longer copies them into
        # Llama.scores unless logits_all=True (which would compute every prompt position's logits).
        return self.np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))

    def generate(self, form, ids, new_tokens):
        np, llm = self.np, self.models[form]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        token = int(np.argmax(self.last_logits(llm)))
        t1 = time.perf_counter()
        out = [token]
        while len(out) < new_tokens:
            llm.eval([token])
            token = int(np.argmax(self.last_logits(llm)))
            out.append(token)
        t2 = time.perf_counter()
        return {"prefill_s": t1 - t0, "decode_s": t2 - t1, "prompt_tokens": len(ids), "ids": out}


def worker_main(args) -> int:
    root = cache_root(args.live_cache)
    ids = json.loads((root / (MODEL_NAME + ".prompt.json")).read_text())["ids"]
    if args.worker == "official":
        runner = OfficialRunner(root, args.threads)
    elif args.worker == "etnp_py":
        runner = EtnpPythonRunner(root, args.threads, args.build_dir)
    else:
        runner = LlamaCppRunner(root, args.threads)
    for form in exported_forms(root):  # warm-up: first-call costs (allocation, page faults of the weights) are not timed
        runner.generate(form, ids, 4)
    print(json.dumps({"hello": args.worker, "threads": runner.threads, "version": getattr(runner, "version", None)}),
          flush=True)
    import resource

    def cpu_seconds():
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    for line in sys.stdin:
        req = json.loads(line)
        try:
            cpu0 = cpu_seconds()
            reply = runner.generate(req["form"], ids, req["new_tokens"])
            reply["cpu_s"] = cpu_seconds() - cpu0  # every thread of the process: how many cores it really used
        except Exception as e:  # reported in the table's cell
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(reply), flush=True)
    return 0


# The core every 1-thread measurement runs on. The official runtime's `_unsafe_reset_threadpool(1)` leaves it
# using both cores (its process's CPU time is twice the wall time during decoding), so thread counts alone do
# not make a 1-thread comparison: each 1-thread process is pinned to this core (the replies' cpu_s show it).
ONE_THREAD_CPU = 1


def pinned(threads):
    """preexec_fn for a process measured at `threads` threads: pinned to one core at 1 thread, free otherwise."""
    if threads != 1 or not hasattr(os, "sched_setaffinity") or ONE_THREAD_CPU not in os.sched_getaffinity(0):
        return None
    return lambda: os.sched_setaffinity(0, {ONE_THREAD_CPU})


class Worker:
    def __init__(self, python, runtime, threads, args, env=None):
        cmd = [str(python), str(HERE / "llm_bench.py"), "--worker", runtime, "--threads", str(threads),
               "--build-dir", args.build_dir] + shape_args(args)
        self.name = "%s-%d" % (runtime, threads)
        self.stderr = open("/tmp/llm_bench_%s.log" % self.name, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=env, preexec_fn=pinned(threads))
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("worker %s died at start (see %s)" % (self.name, self.stderr.name))
        self.hello = json.loads(line)

    def request(self, form, new_tokens):
        self.proc.stdin.write(json.dumps({"form": form, "new_tokens": new_tokens}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return {"error": "worker %s died (see %s)" % (self.name, self.stderr.name)}
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
        self.stderr.close()


def etnp_cli(args, root, form, threads, text, new_tokens):
    """`etnp generate --json` in a fresh process: its own prefill and decode figures."""
    pte = _program(root, form)
    cmd = [os.path.join(args.build_dir, "etnp"), "generate", str(pte), "--tokenizer",
           str(pte.parent / "tokenizer.json"), "--prompt", text, "--max-new-tokens", str(new_tokens),
           "--threads", str(threads), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, preexec_fn=pinned(threads))
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:200]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    prompt = r["prompt_tokens"]
    gen = r["generated_tokens"]
    return {"prefill_s": prompt / r["prefill_tokens_per_s"] if r["prefill_tokens_per_s"] else None,
            "decode_s": (gen - 1) / r["decode_tokens_per_s"] if r["decode_tokens_per_s"] else None,
            "prompt_tokens": prompt, "ids": r["ids"], "prompt_ids": r["prompt_ids"], "threads": r["threads"],
            "peak_rss_mb": r["peak_rss_mb"]}


# --- measurement ----------------------------------------------------------------------------------------------------

def read_stream_gbps(build_dir):
    """{threads: GB/s} of the best plain read of 256 MiB on 2 MiB pages (bench/machine_peak.cpp), at 1 thread and
    at the most THREADS, or {} where the tool is not built or fails."""
    tool = pathlib.Path(build_dir) / "bench" / "etnp_bench_machine_peak"
    try:
        r = json.loads(subprocess.run([str(tool), "--threads", str(max(THREADS))], capture_output=True, text=True,
                                      check=True, timeout=300).stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}
    return {1: r["read_gbs_1"], r["threads"]: r["read_gbs_all"]}


def memcpy_gbps(repeats=7):
    """Best of `repeats` numpy copies of a 256 MiB array (one thread), counting bytes read plus written."""
    import numpy as np

    src = np.ones(256 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # faults the pages in
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def weight_bytes_per_token(form: str) -> float:
    """Bytes of weights one decode step reads: every linear (the output projection included) and the norms,
    and one embedding row. fp32: 4 B a weight. 8da4w in groups of G: 0.5 B a weight and a bf16 scale per
    group, for the linears whose input size G divides; the exporter leaves the others fp32 (4 B a weight:
    with dim 576 and G = 128 that is every linear but the MLP's down projection). Q4_0 (llama.cpp): 18 B per
    32 weights (an fp16 scale per 32)."""
    p = PARAMS
    d, hd, kv, h = p["dim"], p["head_dim"], p["n_kv_heads"], p["hidden_dim"]
    # (input size, weights) of each linear one token multiplies
    linears = [(d, p["n_layers"] * (d * hd * p["n_heads"] + 2 * d * hd * kv + 2 * d * h)),
               (hd * p["n_heads"], p["n_layers"] * hd * p["n_heads"] * d), (h, p["n_layers"] * h * d),
               (d, d * p["vocab_size"])]
    norms = (2 * p["n_layers"] + 1) * d * 4
    count = sum(n for _, n in linears)
    if form == "fp32" or form == "F32":
        return count * 4 + norms + d * 4
    if form == "Q4_0":
        return count * 18 / 32 + norms + d * 34 / 32
    group = int(form.rsplit("_g", 1)[1])
    return sum(n * ((0.5 + 2 / group) if k % group == 0 else 4) for k, n in linears) + norms + d * 1


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def _cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_model():
    """The CPU's name, with its family and model where it has them: a virtual machine may call a Zen 1 and a Zen 4
    both "AMD EPYC"."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or "unknown"
    if "cpu family" in info and "model" in info:
        name += " (family %s, model %s)" % (info["cpu family"], info["model"])
    return name


def cpu_isa():
    """The vector extensions the kernels choose between, as /proc/cpuinfo lists them."""
    flags = set(_cpuinfo().get("flags", "").split())
    return ", ".join(x for x in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16") if x in flags) or "unknown"


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if n else None


RUNTIMES = ("etnp_cli", "etnp_py", "official", "llama")
RUNTIME_TITLES = {"etnp_cli": "etnp C++", "etnp_py": "etnp Py", "official": "official", "llama": "llama.cpp"}


def measure(args, root, worker_runtimes):
    prompt = json.loads((root / (MODEL_NAME + ".prompt.json")).read_text())
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    workers = {}
    pythons = {"etnp_py": "/usr/bin/python3", "official": DEV_VENV_PYTHON, "llama": LLAMA_VENV_PYTHON}
    notes = []
    for rt in worker_runtimes:
        for threads in THREADS:
            log("starting worker %s-%d" % (rt, threads))
            try:
                workers[rt, threads] = Worker(pythons[rt], rt, threads, args, env=env)
            except Exception as e:
                notes.append("%s at %d threads: %s" % (RUNTIME_TITLES[rt], threads, e))
                continue
            got = workers[rt, threads].hello.get("threads")
            if got != threads:
                notes.append("%s asked for %d threads runs %s." % (RUNTIME_TITLES[rt], threads, got))
    llama_version = next((w.hello.get("version") for (rt, _), w in workers.items() if rt == "llama"), None)
    results = {}  # (form, threads, runtime) -> [replies]
    ids_seen = {}  # (form, runtime) -> generated ids at 1 thread, first round
    round_loads = []
    bandwidth = [memcpy_gbps()]
    reads = [read_stream_gbps(args.build_dir)]
    for rnd in range(args.rounds):
        round_loads.append(float(load_average()[0]))
        log("round %d/%d (load %.1f)" % (rnd + 1, args.rounds, round_loads[-1]))
        cell = 0
        for form in exported_forms(root):
            for threads in THREADS:
                order = RUNTIMES[cell % 4:] + RUNTIMES[:cell % 4]  # who goes first rotates
                order = order if rnd % 2 == 0 else order[::-1]
                cell += 1
                for rt in order:
                    if rt == "etnp_cli":
                        r = etnp_cli(args, root, form, threads, prompt["text"], DECODE_TOKENS)
                        if "prompt_ids" in r and r["prompt_ids"] != prompt["ids"] and rnd == 0 and threads == 1:
                            notes.append("`etnp generate` encoded the prompt to %d ids, not the %d of tokenizers "
                                         "(%s)." % (len(r["prompt_ids"]), len(prompt["ids"]), form))
                    elif (rt, threads) in workers:
                        r = workers[rt, threads].request(form, DECODE_TOKENS)
                    else:
                        continue
                    r["round"] = rnd
                    results.setdefault((form, threads, rt), []).append(r)
                    if rnd == 0 and threads == 1 and "ids" in r:
                        ids_seen[form, rt] = r["ids"]
        bandwidth.append(memcpy_gbps())
    for w in workers.values():
        w.close()
    reads.append(read_stream_gbps(args.build_dir))
    read_walls = {t: max(r.get(t, 0.0) for r in reads) for t in THREADS}
    if not all(read_walls.values()):
        notes.append("The read stream was not measured (%s/bench/etnp_bench_machine_peak): the decode GB/s are "
                     "shown against the memcpy only." % args.build_dir)
    return results, ids_seen, bandwidth, read_walls, round_loads, notes, llama_version, prompt


def summarize(replies):
    ok = [r for r in replies if "error" not in r and r.get("prefill_s") and r.get("decode_s")]
    if not ok:
        return {"error": next((r["error"] for r in replies if "error" in r), "no figures")}
    prefill = [r["prompt_tokens"] / r["prefill_s"] for r in ok]
    decode = [(len(r["ids"]) - 1) / r["decode_s"] for r in ok]
    cores = [r["cpu_s"] / (r["prefill_s"] + r["decode_s"]) for r in ok if "cpu_s" in r]
    return {"prefill": median(prefill), "decode": median(decode), "prefill_best": max(prefill),
            "decode_best": max(decode), "rounds": len(ok), "cores": median(cores) if cores else None,
            "by_round": {r["round"]: {"prefill": p, "decode": d} for r, p, d in zip(ok, prefill, decode)}}


# --- RESULTS.md -----------------------------------------------------------------------------------------------------

def fmt_tps(s, key):
    if s is None:
        return "—"
    if "error" in s:
        return "error: " + s["error"].replace("|", "/")[:80]
    return "%.1f" % s[key]


def fmt_ratio(a, b, key):
    """The median over rounds of a's tokens/s over b's in the same round and cell: the two ran seconds apart,
    so a drift of the machine's speed over the run (here 20-30%) moves both sides of each ratio alike."""
    if not a or not b or "error" in a or "error" in b:
        return "—"
    paired = [a["by_round"][rnd][key] / b["by_round"][rnd][key] for rnd in a["by_round"] if rnd in b["by_round"]]
    return "%.2f" % median(paired) if paired else "—"


def markdown(args, summary, ids_seen, bandwidth, read_walls, round_loads, notes, llama_version, prompt, load_start,
             load_end, started, minutes, versions):
    best_bw = max(bandwidth)
    # The 1-minute figures: the 5- and 15-minute ones still count whatever ran before the benchmark started.
    loaded = max([float(load_start[0]), float(load_end[0])] + round_loads) > 2
    md = ["## Language models\n"]
    md.append("Generated by `bench/llm_bench.py` on %s in %.0f minutes%s. A greedy generation of the same prompt "
              "(BOS and %d ids) and %d new tokens, prefill and decode in tokens per second (higher is better), "
              "median of %d interleaved rounds (every runtime once per round and cell, the order rotating); ratios "
              "are etnp's Python tokens/s over the other's (above 1 = etnp faster), the median of the rounds' "
              "ratios (each of two runs seconds apart, so that the machine's drift over the run cancels). "
              "Benchmarks are reported, never asserted.\n" % (started.strftime("%Y-%m-%d %H:%M UTC"), minutes,
                                     " (--quick)" if args.quick else "", len(prompt["ids"]) - 1, DECODE_TOKENS,
                                     args.rounds))
    md.append("Machine: %s (%s), %d logical CPUs. Load average (1, 5, 15 min) at the start: %s; at the end: %s; 1-minute "
              "load at each round's start: %s.%s\n"
              % (cpu_model(), cpu_isa(), os.cpu_count() or 0, ", ".join(load_start), ", ".join(load_end),
                 ", ".join("%.1f" % x for x in round_loads),
                 " **These figures are from a loaded machine** (load above 2 on %d cores): other work shared the "
                 "cores, the 2-thread cells most of all." % (os.cpu_count() or 0) if loaded else ""))
    p = PARAMS
    md.append("Model: a SmolLM2-135M-shaped llama_transformer (dim %d, %d layers%s, %d heads, %d KV heads, head dim "
              "%d, hidden %d, vocab %d, output projection untied: %.0fM parameters), random seeded weights "
              "(tests/live/export.py `_random_checkpoint`), exported by ExecuTorch's LLM export (`export_llm`, KV "
              "cache, custom SDPA, dynamic shapes, max_seq_len %d) to XNNPACK: fp32, and 8da4w (int8 dynamic "
              "activations, int4 weights in groups of 32 with an 8-bit embedding, or of 128 with a 4-bit "
              "embedding in groups of 32; in groups of 128 the exporter quantizes only the linears whose input "
              "size 128 divides: %s). Cached in `%s`.\n"
              % (p["dim"], p["n_layers"], "" if p["n_layers"] == 30 else
                 " where the real model has 30, for a shorter export: %d layers took up to %.0f minutes a form "
                 "here" % (p["n_layers"], export_minutes()),
                 p["n_heads"], p["n_kv_heads"], p["head_dim"], p["hidden_dim"],
                 p["vocab_size"], total_params() / 1e6, MAX_SEQ, quantized_in_groups_of(128),
                 cache_root(args.live_cache)))
    md.append("Runtimes: **etnp C++** `etnp generate --json` (a fresh process per measurement: its first prefill "
              "call is also its first call); **etnp Py** `executorch_numpy_runtime.LLM.generate` on the ids (the "
              "same C++ Generator, warm); **official** ExecuTorch %s, a greedy loop over `executorch.runtime` "
              "Method.execute (the prompt in one call, one call per token, argmax in torch; pool set with "
              "`_unsafe_reset_threadpool`, and pinned: below); **llama.cpp** (%s) "
              "`Llama.eval` of the prompt ids and one `eval` per greedy token, n_threads = n_threads_batch = N, on "
              "a GGUF of the same checkpoint: F32 for the fp32 rows; Q4_0 for both 8da4w rows. What differs in "
              "the 4-bit rows: Q4_0 always groups 32 weights (an fp16 scale, values -8..7 scaled by max/-8) where "
              "8da4w's groups are 32 or 128 (symmetric, scale max/7); llama.cpp quantizes the activations to "
              "8 bits per block of 32, 8da4w per token; the embedding is Q8_0 in both GGUF rows. So the Q4_0 "
              "model is the same checkpoint rounded another way, not bit-identical weights. The Python loops "
              "(official, llama.cpp) pay a Python call per token; etnp's loop is C++ in both columns.\n"
              % (versions.get("executorch", "?"), "llama-cpp-python %s, built from source here" % llama_version
                 if llama_version else "not timed in this run: see the notes"))
    cores = []
    for rt in ("etnp_py", "official", "llama"):
        per_threads = [[s["cores"] for (_, t, r), s in summary.items() if t == threads and r == rt and s.get("cores")]
                       for threads in THREADS]
        if all(per_threads):
            cores.append("%s %s" % (RUNTIME_TITLES[rt], " / ".join("%.2f" % median(c) for c in per_threads)))
    md.append("Threads: every 1-thread measurement runs pinned to CPU %d (`sched_setaffinity`), since the official "
              "runtime's `_unsafe_reset_threadpool(1)` alone leaves it on both cores (its process CPU time is twice "
              "its wall time while decoding); the 2-thread ones run unpinned. Cores used (process CPU time over "
              "wall time, median over cells) at 1 / 2 threads: %s.\n" % (ONE_THREAD_CPU, "; ".join(cores) or "—"))
    walls = all(read_walls.values())
    md.append("Decode bandwidth: the weight bytes one token reads (every linear and the output projection, the "
              "norms, one embedding row; fp32 4 B a weight, 8da4w 0.5 B and a bf16 scale per group as XNNPACK "
              "packs it, Q4_0 18 B per 32) times decode tokens/s. %sAlso a numpy copy of 256 MiB in each round "
              "(best of 7, bytes read plus written, one thread): %s GB/s, best %.1f. Median over the rounds, and "
              "the best round's: a round on a quiet machine shows the wall itself, the medians what the other "
              "tenants of the memory bus left.\n"
              % ("The percentages are of the best plain read of 256 MiB on 2 MiB pages at the same thread count "
                 "(`etnp_bench_machine_peak`, at the start and at the end of the run), the most a step that only "
                 "reads its weights can stream: %s. " % ", ".join("%.1f GB/s at %d thread%s" % (read_walls[t], t,
                                                                 "s" if t > 1 else "") for t in THREADS)
                 if walls else "The percentages are of the best memcpy below (the read stream was not measured). ",
                 ", ".join("%.1f" % b for b in bandwidth), best_bw))
    md.append("```sh\n./scripts/build.sh && VENV=$(./scripts/dev-venv.sh)\npython3 -m venv ~/.cache/etnp/llama-venv "
              "&& ~/.cache/etnp/llama-venv/bin/pip install llama-cpp-python==0.3.36 gguf==0.19.0\n"
              "/usr/bin/python3 bench/llm_bench.py %s\n```\n" % " ".join(sys.argv[1:]))
    head = ["form", "threads"]
    head += ["prefill %s" % RUNTIME_TITLES[rt] for rt in RUNTIMES]
    head += ["decode %s" % RUNTIME_TITLES[rt] for rt in RUNTIMES]
    head += ["etnp / official prefill, decode", "etnp / llama.cpp prefill, decode",
             "decode GB/s etnp (%% of %s): median, best round" % ("the read stream" if walls else "memcpy"),
             "official", "llama.cpp"]
    md_notes = []
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "---|" * len(head))
    for form, (_, gguf_kind) in FORMS.items():
        if not any(key[0] == form for key in summary):
            md_notes.append("%s: not exported yet, not timed (`--exported-only`)." % form)
            continue
        for threads in THREADS:
            s = {rt: summary.get((form, threads, rt)) for rt in RUNTIMES}
            row = [form, str(threads)]
            row += [fmt_tps(s[rt], "prefill") for rt in RUNTIMES]
            row += [fmt_tps(s[rt], "decode") for rt in RUNTIMES]
            row.append("%s, %s" % (fmt_ratio(s["etnp_py"], s["official"], "prefill"),
                                   fmt_ratio(s["etnp_py"], s["official"], "decode")))
            row.append("%s, %s" % (fmt_ratio(s["etnp_py"], s["llama"], "prefill"),
                                   fmt_ratio(s["etnp_py"], s["llama"], "decode")))
            for rt, kind in (("etnp_py", form), ("official", form), ("llama", gguf_kind)):
                c = s[rt]
                if not c or "error" in c:
                    row.append("—")
                    continue
                gbps = weight_bytes_per_token(kind) * c["decode"] / 1e9
                best = weight_bytes_per_token(kind) * c["decode_best"] / 1e9
                wall = read_walls[threads] if walls else best_bw
                row.append("%.1f (%.0f%%), best %.1f (%.0f%%)" % (gbps, 100 * gbps / wall, best, 100 * best / wall))
            md.append("| " + " | ".join(row) + " |")
    md.append("")
    agree = []
    for form in FORMS:
        ref = ids_seen.get((form, "official"))
        if not ref:
            continue
        parts = []
        for rt in ("etnp_py", "etnp_cli", "llama"):
            got = ids_seen.get((form, rt))
            if got:
                same = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
                parts.append("%s %d" % (RUNTIME_TITLES[rt], same))
        agree.append("%s: %s" % (form, ", ".join(parts)))
    md.append("Greedy tokens equal to the official runtime's, from the start (of %d, 1 thread, first round): %s.\n"
              % (DECODE_TOKENS, "; ".join(agree) or "—"))
    bytes_rows = ", ".join("%s %.0f MB" % (k, weight_bytes_per_token(k) / 1e6)
                           for k in ("fp32", "8da4w_g32", "8da4w_g128", "Q4_0"))
    md.append("Weight bytes per decoded token: %s.\n" % bytes_rows)
    for note in md_notes + notes:
        md.append("- %s" % note)
    if md_notes or notes:
        md.append("")
    return "\n".join(md) + "\n"


def quantized_in_groups_of(group: int) -> str:
    """Which linears the exporter makes 4-bit in groups of `group` (those whose input size it divides), in words."""
    p = PARAMS
    inputs = {"the attention's q, k and v and the MLP's gate and up projections": p["dim"],
              "the attention's output projection": p["n_heads"] * p["head_dim"],
              "the MLP's down projection": p["hidden_dim"], "the output projection": p["dim"]}
    fits = [name for name, k in inputs.items() if k % group == 0]
    if len(fits) == len(inputs):
        return "here every one (dim %d)" % p["dim"]
    if not fits:
        return "here none: all stay fp32"
    return "here %s; the others stay fp32 (dim %d: `--dim 640` makes them all 4-bit)" % (" and ".join(fits), p["dim"])


def export_minutes():
    """The longest export of the forms timed, from their export.json."""
    root = cache_root(ARGS_LIVE_CACHE)
    times = [json.loads((root / ("%s__%s" % (MODEL_NAME, f)) / "export.json").read_text()).get("export_s", 0)
             for f in exported_forms(root)]
    return max(times, default=0) / 60


def total_params():
    p = PARAMS
    d, hd = p["dim"], p["head_dim"]
    per_layer = d * hd * p["n_heads"] * 2 + d * hd * p["n_kv_heads"] * 2 + 3 * d * p["hidden_dim"] + 2 * d
    return p["n_layers"] * per_layer + 2 * d * p["vocab_size"] + d


SECTION = "## Language models"


def read_section(path: pathlib.Path, heading: str = SECTION):
    """The file's `heading` section (up to the next "## " heading), or None."""
    lines = path.read_text().splitlines(keepends=True) if path.is_file() else []
    start = next((i for i, l in enumerate(lines) if l.rstrip() == heading), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[start:end]).rstrip("\n") + "\n"


def replace_section(path: pathlib.Path, section: str, heading: str = SECTION) -> None:
    """Puts `section` in place of the file's `heading` section (up to the next "## " heading), or before
    "## Notes", or at the end; the rest of the file is kept as it is."""
    text = path.read_text() if path.is_file() else "# etnp benchmark results\n\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if l.rstrip() == heading), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    else:
        start = end = next((i for i, l in enumerate(lines) if l.rstrip() == "## Notes"), len(lines))
        if start == len(lines) and lines and lines[-1].strip():
            section = "\n" + section
    path.write_text("".join(lines[:start]) + section + "\n" * (end < len(lines)) + "".join(lines[end:]))


def dev_venv_versions():
    code = ("import json; from importlib import metadata as m; "
            "print(json.dumps({n: m.version(n) for n in ('torch', 'executorch', 'torchao')}))")
    try:
        return json.loads(subprocess.run([str(DEV_VENV_PYTHON), "-c", code], capture_output=True, text=True,
                                         timeout=120).stdout)
    except Exception:
        return {}


def main() -> int:
    global DECODE_TOKENS, ARGS_LIVE_CACHE
    import datetime

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--live-cache", help="live-export cache root (default $ETNP_LIVE_CACHE or "
                                             "~/.cache/etnp/live-exports); the models go in its llm-bench/")
    parser.add_argument("--output", help="a RESULTS.md whose section \"## Language models\" to write")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=30, help="layers of the SmolLM2-135M shape (default 30, "
                                                               "the real model's; fewer export faster)")
    parser.add_argument("--dim", type=int, default=576, help="width of the SmolLM2-135M shape (default 576, the "
                        "real model's; 640 makes every linear's input a multiple of 128, for the groups-of-128 form)")
    parser.add_argument("--exported-only", action="store_true",
                        help="time the forms already exported, export none")
    parser.add_argument("--form", action="append", choices=tuple(FORMS), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="2 rounds of %d new tokens" % (DECODE_TOKENS // 2))
    parser.add_argument("--export", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-gguf", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("official", "etnp_py", "llama"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure(args.layers, args.dim)
    ARGS_LIVE_CACHE = args.live_cache
    root = cache_root(args.live_cache)
    if args.worker:
        return worker_main(args)
    if args.export:  # dev venv
        root.mkdir(parents=True, exist_ok=True)
        export_models(root, args.form or tuple(FORMS))
        if args.form and "fp32" not in args.form:
            return 0
        if not (root / (MODEL_NAME + ".prompt.json")).is_file():
            write_prompt(root)
        checkpoint_npz(root)
        return 0
    if args.write_gguf:  # llama venv
        for kind in sorted({FORMS[form][1] for form in exported_forms(root)}):
            if not gguf_path(root, kind).is_file():
                log("writing %s" % gguf_path(root, kind).name)
                write_gguf(root, root / (MODEL_NAME + ".checkpoint.npz"), kind)
        return 0

    if args.quick:
        args.rounds = 2
        DECODE_TOKENS //= 2
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = load_average()
    t0 = time.time()
    if (len(exported_forms(root)) < len(FORMS) and not args.exported_only) \
            or not (root / (MODEL_NAME + ".prompt.json")).is_file() \
            or not (root / (MODEL_NAME + ".checkpoint.npz")).is_file():
        log("exporting (once) into %s" % root)
        subprocess.run([str(DEV_VENV_PYTHON), str(HERE / "llm_bench.py"), "--export"] + shape_args(args),
                       check=True)
    runtimes = ["etnp_py", "official", "llama"]
    skipped = []
    probe = subprocess.run([str(LLAMA_VENV_PYTHON), "-c", "import gguf, llama_cpp"], capture_output=True) \
        if LLAMA_VENV_PYTHON.is_file() else None
    if probe is None or probe.returncode != 0:
        runtimes.remove("llama")
        skipped.append("llama.cpp: not timed, %s has no llama_cpp and gguf (install them as above)."
                       % LLAMA_VENV_PYTHON)
    elif not all(gguf_path(root, FORMS[form][1]).is_file() for form in exported_forms(root)):
        subprocess.run([str(LLAMA_VENV_PYTHON), str(HERE / "llm_bench.py"), "--write-gguf"] + shape_args(args),
                       check=True)
    versions = dev_venv_versions()
    results, ids_seen, bandwidth, read_walls, round_loads, notes, llama_version, prompt = measure(args, root,
                                                                                                  runtimes)
    notes = skipped + notes
    summary = {key: summarize(replies) for key, replies in results.items()}
    load_end = load_average()
    section = markdown(args, summary, ids_seen, bandwidth, read_walls, round_loads, notes, llama_version, prompt,
                       load_start, load_end, started, (time.time() - t0) / 60, versions)
    sys.stdout.write(section)
    if args.output:
        replace_section(pathlib.Path(args.output), section)
        log("wrote the section into %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
