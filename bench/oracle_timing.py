"""Timing worker for bench/run_benchmarks.py: the official ExecuTorch runtime, onnxruntime or PyTorch eager (in
the dev venv, scripts/dev-venv.sh, never in etnp's own environment), or etnp's Python package (in etnp's
Python, /usr/bin/python3, with ETNP_PYTHON_DIR pointing at build/python):

    /usr/bin/python3 bench/oracle_timing.py --runtime etnp                   etnp's Method.execute

    VENV/bin/python bench/oracle_timing.py --runtime official --threads N    the official pybindings, pool of N
    VENV/bin/python bench/oracle_timing.py --runtime onnx                    onnxruntime, default CPU EP
    VENV/bin/python bench/oracle_timing.py --runtime eager                   PyTorch eager (and ONNX export)

A long-lived worker (importing torch costs seconds): one JSON request per line on stdin, one JSON reply per
line on stdout (everything else the libraries print goes to stderr). Requests:

    {"op": "hello"}                                   -> {"versions": {...}, "threads": ...}
    {"op": "time", ... , "inputs": [npy...], "warmup": W, "iters": I, "budget_s": B, "save": DIR or null}
        -> {"median_ms", "min_ms", "iters", "warmup", "threads"} or {"error": message}
      etnp:     "program", "data", "method", "threads" (the shared pool, resized between measurements).
      official: "program", "data" (list of .ptd), "method"; the worker's thread pool was set once at start
                (`_unsafe_reset_threadpool(N)` replaces the pthreadpool that loaded XNNPACK delegates keep a
                pointer to, so a worker never changes it after loading anything: one worker per thread count).
      onnx:     "onnx" (a .onnx file), "threads" (a session per file and thread count: intra_op_num_threads=N,
                inter_op_num_threads=1).
      eager:    "module" ({"zoo": NAME, "method": M}, {"demo": DIR} or {"builtin": "add"}: x + y), "threads"
                (torch.set_num_threads), run under torch.inference_mode().
    {"op": "flops", "module": ..., "inputs": [...]}   (eager worker) -> {"flops": N}: the floating-point operations
      of one call as torch.utils.flop_counter counts them (matrix products and convolutions, 2 per multiply-add;
      element-wise work is not counted)
    {"op": "export_onnx", "module": ..., "inputs": [...], "path": P}   (eager worker) -> {"path", "exporter"}
      or {"error"}; a failure is remembered in P + ".error" so that later runs do not retry it.

Timing, the same for every runtime (and for etnp in run_benchmarks.py): inputs are loaded once; one untimed
call measures the cost of a call, then up to W-1 more warm-up calls and I timed calls, fewer when a call is slow
(the timed calls stop at B seconds, never fewer than 3). With "save", the first call's outputs go to
DIR/output_<i>.npy (for the agreement check).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def timed(call, warmup, iters, budget_s):
    """(median ms, min ms, timed calls, warm-up calls, first outputs) of `call` under the policy above."""
    t0 = time.perf_counter()
    first = call()
    probe = time.perf_counter() - t0
    warm = 1
    while warm < warmup and probe * warm < budget_s / 2:
        call()
        warm += 1
    n = int(max(3, min(iters, budget_s / max(probe, 1e-7))))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times), n, warm, first


def save_outputs(folder, outputs):
    os.makedirs(folder, exist_ok=True)
    for i, out in enumerate(outputs):
        np.save(os.path.join(folder, "output_%d.npy" % i), np.asarray(out), allow_pickle=False)


def flatten(out):
    if isinstance(out, (list, tuple)):
        flat = []
        for item in out:
            flat.extend(flatten(item))
        return flat
    if isinstance(out, dict):
        return flatten(list(out.values()))
    return [out]


class Etnp:
    """etnp's own Python package (run by /usr/bin/python3, not the venv: a worker of its own so that a crash of
    etnp on a program costs that cell, not the whole run). Methods stay loaded; the shared pool is resized
    (`backend_registry.set_option("XnnpackBackend", {"num_threads": N})`) between measurements."""

    def __init__(self):
        if os.environ.get("ETNP_PYTHON_DIR"):
            sys.path.insert(0, os.environ["ETNP_PYTHON_DIR"])
        import executorch_numpy_runtime as pkg

        self.pkg = pkg
        self.runtime = pkg.Runtime.get()
        self.methods = {}
        self.threads = None

    def versions(self):
        return {"etnp": self.pkg.__version__}

    def time(self, req):
        key = (req["program"], tuple(req.get("data") or ()), req["method"])
        if key not in self.methods:
            program = self.runtime.load_program(req["program"], data_path=req.get("data") or None)
            self.methods[key] = (program, program.load_method(req["method"]))
        method = self.methods[key][1]
        inputs = [np.load(p) for p in req["inputs"]]
        if req["threads"] != self.threads:
            self.runtime.backend_registry.set_option("XnnpackBackend", {"num_threads": req["threads"]})
            self.threads = req["threads"]
        med, mn, n, warm, first = timed(lambda: method.execute(inputs), req["warmup"], req["iters"], req["budget_s"])
        if req.get("save"):
            save_outputs(req["save"], first)
        return {"median_ms": med, "min_ms": mn, "iters": n, "warmup": warm,
                "threads": int(self.pkg.runtime_info()["num_threads"])}


def import_official_operator_libraries():
    """Registers the official wheel's LLM custom operators (llama::*) and quantized kernels (embedding_byte, ...)
    with its runtime, as its LLM runner does; without them it cannot load the language-model exports."""
    try:
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
        import executorch.kernels.quantized  # noqa: F401
    except ImportError:  # a wheel without them: those programs are reported as refused
        pass


class Official:
    def __init__(self, threads):
        import executorch.extension.pybindings.portable_lib as portable_lib
        from executorch.runtime import Runtime

        import_official_operator_libraries()

        portable_lib._unsafe_reset_threadpool(threads)
        self.threads = portable_lib._threadpool_get_thread_count()
        self.runtime = Runtime.get()
        self.methods = {}

    def versions(self):
        from importlib import metadata

        return {"executorch": metadata.version("executorch"), "torch": metadata.version("torch")}

    def time(self, req):
        import torch

        key = (req["program"], tuple(req.get("data") or ()), req["method"])
        if key not in self.methods:
            data = req.get("data") or []
            if len(data) > 1:
                raise RuntimeError("more than one .ptd file")
            program = self.runtime.load_program(req["program"], data_path=data[0] if data else None)
            self.methods[key] = (program, program.load_method(req["method"]))
        method = self.methods[key][1]
        inputs = [torch.from_numpy(np.load(p)) for p in req["inputs"]]
        med, mn, n, warm, first = timed(lambda: method.execute(inputs), req["warmup"], req["iters"], req["budget_s"])
        if req.get("save"):
            save_outputs(req["save"], [o.numpy() if hasattr(o, "numpy") else o for o in flatten(first)])
        return {"median_ms": med, "min_ms": mn, "iters": n, "warmup": warm, "threads": self.threads}


class Onnx:
    def __init__(self):
        import onnxruntime

        self.ort = onnxruntime
        self.sessions = {}

    def versions(self):
        return {"onnxruntime": self.ort.__version__}

    def time(self, req):
        key = (req["onnx"], req["threads"])
        if key not in self.sessions:
            options = self.ort.SessionOptions()
            options.intra_op_num_threads = req["threads"]
            options.inter_op_num_threads = 1
            self.sessions[key] = self.ort.InferenceSession(req["onnx"], sess_options=options,
                                                           providers=["CPUExecutionProvider"])
        session = self.sessions[key]
        names = [i.name for i in session.get_inputs()]
        arrays = [np.load(p) for p in req["inputs"]]
        if len(names) > len(arrays):
            raise RuntimeError("the ONNX graph takes %d inputs, the case has %d" % (len(names), len(arrays)))
        # An exporter may drop trailing inputs the graph does not read; the rest keep their order.
        feed = dict(zip(names, arrays))
        med, mn, n, warm, first = timed(lambda: session.run(None, feed), req["warmup"], req["iters"],
                                        req["budget_s"])
        if req.get("save"):
            save_outputs(req["save"], first)
        return {"median_ms": med, "min_ms": mn, "iters": n, "warmup": warm, "threads": req["threads"]}


class Eager:
    def __init__(self):
        import torch

        self.torch = torch
        self.modules = {}
        sys.path.insert(0, os.path.join(ROOT, "tests", "live"))
        sys.path.insert(0, HERE)

    def versions(self):
        return {"torch": self.torch.__version__}

    def module(self, spec):
        key = json.dumps(spec, sort_keys=True)
        if key not in self.modules:
            if spec.get("builtin") == "add":
                class Add(self.torch.nn.Module):
                    def forward(self, x, y):
                        return x + y

                module = Add()
            elif "demo" in spec:
                import mobilenet_torch

                module, _ = mobilenet_torch.load_model(spec["demo"])
            else:
                import zoo

                model = zoo.BY_NAME[spec["zoo"]]
                self.torch.manual_seed(0)
                module = model.build()
                if spec.get("method", "forward") != "forward":
                    factory, _ = model.extra_methods[spec["method"]]
                    module = factory(module)
            self.modules[key] = module.eval()
        return self.modules[key]

    def tensors(self, paths):
        return [self.torch.from_numpy(np.load(p)) for p in paths]

    def time(self, req):
        torch = self.torch
        module = self.module(req["module"])
        inputs = self.tensors(req["inputs"])
        torch.set_num_threads(req["threads"])
        with torch.inference_mode():
            med, mn, n, warm, first = timed(lambda: module(*inputs), req["warmup"], req["iters"], req["budget_s"])
        if req.get("save"):
            save_outputs(req["save"], [o.numpy() for o in flatten(first) if isinstance(o, torch.Tensor)])
        return {"median_ms": med, "min_ms": mn, "iters": n, "warmup": warm, "threads": torch.get_num_threads()}

    def flops(self, req):
        from torch.utils.flop_counter import FlopCounterMode

        module = self.module(req["module"])
        inputs = self.tensors(req["inputs"])
        counter = FlopCounterMode(display=False)
        with self.torch.inference_mode(), counter:
            module(*inputs)
        return {"flops": int(counter.get_total_flops())}

    def export_onnx(self, req):
        path = req["path"]
        if os.path.exists(path):
            return {"path": path, "exporter": "cached"}
        if os.path.exists(path + ".error"):
            with open(path + ".error") as f:
                return {"error": json.load(f)["error"]}
        torch = self.torch
        module = self.module(req["module"])
        inputs = tuple(self.tensors(req["inputs"]))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        errors = []
        tmp = path + ".tmp"
        for dynamo in (True, False):
            try:
                with torch.no_grad():
                    torch.onnx.export(module, inputs, tmp, dynamo=dynamo, external_data=False)
                os.replace(tmp, path)
                return {"path": path, "exporter": "dynamo" if dynamo else "torchscript"}
            except Exception as e:  # the exporter refused the module: try the other one, then give up
                errors.append("%s: %s: %s" % ("dynamo" if dynamo else "torchscript", type(e).__name__,
                                              str(e).strip().splitlines()[0][:200] if str(e).strip() else ""))
        message = re.sub(r"\x1b\[[0-9;]*m", "", "; ".join(errors))  # the exporter colours its messages
        with open(path + ".error", "w") as f:
            json.dump({"error": message}, f)
        return {"error": message}


def status_kib(*fields):
    """VmRSS / VmHWM lines of /proc/self/status, in KiB, from one read. The kernel sums its resident-page
    counters approximately (per-CPU batches), so two reads can disagree by a fraction of a MiB; within one read
    VmHWM is at least VmRSS (a peak read after the resident size once came out 0.3 MiB below it)."""
    with open("/proc/self/status") as f:
        values = {line.split(":")[0]: int(line.split()[1]) for line in f if line.split(":")[0] in fields}
    missing = [field for field in fields if field not in values]
    if missing:
        raise RuntimeError("no %s in /proc/self/status" % ", ".join(missing))
    return values[fields[0]] if len(fields) == 1 else tuple(values[field] for field in fields)


def load_memory(runtime, request):
    """One load and first run in this fresh process (bench/load_memory.py): the time of load_program plus
    load_method, and the resident memory they and the run add, measured from after the imports and the inputs
    (so torch, numpy and the input arrays count for neither runtime). The peak is the process's high-water mark,
    reset after the imports (writing 5 to /proc/self/clear_refs). The "warmup" programs (a list of program and
    inputs) are loaded and run first, so that what either runtime sets up once per process (its code's pages,
    kernel tables, the thread pool, the delegate library) counts for neither. "threads" (default 1): the thread
    pool's size, set before anything loads."""
    data = request.get("data") or []
    threads = int(request.get("threads", 1))
    arrays = [np.load(p) for p in request["inputs"]]
    warmups = [(w["program"], [np.load(p) for p in w["inputs"]]) for w in request.get("warmup") or []]
    if runtime == "etnp":
        if os.environ.get("ETNP_PYTHON_DIR"):
            sys.path.insert(0, os.environ["ETNP_PYTHON_DIR"])
        import executorch_numpy_runtime as pkg

        rt = pkg.Runtime.get()
        rt.backend_registry.set_option("XnnpackBackend", {"num_threads": threads})
        inputs = arrays
        load = lambda: rt.load_program(request["program"], data_path=data or None)  # noqa: E731
        for program, warmup_arrays in warmups:
            rt.load_program(program).load_method("forward").execute(warmup_arrays)
    else:
        import executorch.extension.pybindings.portable_lib as portable_lib
        import torch
        from executorch.runtime import Runtime

        import_official_operator_libraries()
        if len(data) > 1:
            raise RuntimeError("more than one .ptd file")
        portable_lib._unsafe_reset_threadpool(threads)
        rt = Runtime.get()
        inputs = [torch.from_numpy(a) for a in arrays]
        load = lambda: rt.load_program(request["program"], data_path=data[0] if data else None)  # noqa: E731
        for program, warmup_arrays in warmups:
            rt.load_program(program).load_method("forward").execute([torch.from_numpy(a) for a in warmup_arrays])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kib("VmRSS")
    t0 = time.perf_counter()
    program = load()
    method = program.load_method(request["method"])
    load_ms = (time.perf_counter() - t0) * 1e3
    after_load = status_kib("VmRSS")
    method.execute(inputs)
    after_run, peak = status_kib("VmRSS", "VmHWM")
    return {"load_ms": load_ms, "load_mib": (after_load - before) / 1024, "run_mib": (after_run - before) / 1024,
            "peak_mib": (peak - before) / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("etnp", "official", "onnx", "eager"), required=True)
    parser.add_argument("--threads", type=int, default=1, help="official: the thread pool's size, set once")
    parser.add_argument("--load-memory", metavar="JSON", help="measure one load and first run (a JSON request: "
                        "program, data, method, inputs, threads) in this process, print the JSON result and exit")
    args = parser.parse_args()
    if args.load_memory:
        try:
            out = load_memory(args.runtime, json.loads(args.load_memory))
        except Exception as e:  # a runtime refused the program or the inputs: reported in its cell
            text = str(e).strip().splitlines()
            out = {"error": "%s: %s" % (type(e).__name__, text[0][:300] if text else "")}
        print(json.dumps(out))
        return 0
    # Replies go to the real stdout; whatever the libraries print goes to stderr.
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    reply = os.fdopen(reply_fd, "w", buffering=1)
    worker = {"etnp": Etnp, "official": lambda: Official(args.threads), "onnx": Onnx,
              "eager": Eager}[args.runtime]()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            if req["op"] == "hello":
                out = {"versions": worker.versions(), "threads": getattr(worker, "threads", None)}
            elif req["op"] == "time":
                out = worker.time(req)
            elif req["op"] == "export_onnx":
                out = worker.export_onnx(req)
            elif req["op"] == "flops":
                out = worker.flops(req)
            else:
                out = {"error": "unknown op %r" % req["op"]}
        except Exception as e:  # a runtime refused the program or the inputs: reported in its cell
            text = str(e).strip().splitlines()
            out = {"error": "%s: %s" % (type(e).__name__, text[0][:300] if text else "")}
        reply.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
