#!/usr/bin/python3
"""Same-machine benchmarks of etnp against the official ExecuTorch runtime, onnxruntime and PyTorch eager,
written to bench/RESULTS.md.

    ./scripts/build.sh                                   # build/etnp, build/etnp_demo, build/python
    VENV=$(./scripts/dev-venv.sh)                        # official ExecuTorch, torch, onnxruntime (baselines only)
    $VENV/bin/python tests/live/export.py                # the live exports (cached; only the first run exports)
    /usr/bin/python3 bench/run_benchmarks.py [--build-dir build] [--output bench/RESULTS.md] [--quick]
                                             [--only SUBSTRING]... [--rounds R] [--budget-s B]

Every runtime runs in this one process tree, in the same interleaved rounds, on the same files and input
arrays, at 1 and 2 threads:
  - etnp, twice: `etnp bench --json` (C++ Method::execute in a loop) and the Python package's Method.execute in a
    loop (a worker process of /usr/bin/python3, so that a crash of etnp on a program costs only that cell);
  - the official runtime: its pybindings' `Method.execute` in a loop (`executorch.runtime.Runtime`), one worker
    process per thread count, its pool set once with `_unsafe_reset_threadpool(N)` (checked with
    `_threadpool_get_thread_count()`);
  - onnxruntime (default CPU execution provider, intra_op_num_threads=N, inter_op_num_threads=1) on a
    `torch.onnx.export` of the same torch module, cached next to the live exports (`<cache>/onnx/`);
  - PyTorch eager (`torch.set_num_threads(N)`, `torch.inference_mode()`) on the same module.
The official, onnxruntime and PyTorch workers (bench/oracle_timing.py) run in the dev venv, one long-lived
process each, answering JSON requests; etnp never imports any of them.

Sections of RESULTS.md:
1. Every program on every runtime: the demo MobileNetV2 that `etnp_demo` writes (torch module: the same weights,
   bench/mobilenet_torch.py), every program of ../shared/fixtures/benchmarks.json (no torch module exists for
   them, so no onnxruntime or PyTorch cells; their figures from another CPU stay as a historical column), and
   every live export of tests/live (zoo.py's module; the quantized forms are compared with the float module).
   Median and minimum per cell, ratios etnp / official and etnp / onnxruntime (and etnp / eager), and how far
   etnp's outputs are from the official runtime's on the same inputs.
2. Outputs against PyTorch eager (etnp, official, onnxruntime), for the rows with a float torch module.
3. Portable operators against the XNNPACK delegate, for both runtimes (from section 1's rows).
4. Per-call overhead of a tiny program (x + y on one element): etnp C++ and Python, the official pybindings,
   onnxruntime and torch on the same addition.
5. Cold start: process start, import, load and first run for each runtime.
6. Where the time goes in each delegated fixture program (`etnp bench --profile`, 1 thread).
7. Efficiency: each float row's FLOPs (torch.utils.flop_counter on its module) over its time, against this
   machine's fp32 FMA peak measured in the same run (bench/machine_peak.cpp, etnp_bench_machine_peak).

Timing policy (every runtime alike, bench/oracle_timing.py `timed`): inputs are loaded once; one untimed call
probes the cost of a call, then up to W-1 more warm-up calls and up to I timed calls, stopping at B seconds of
timed calls (never fewer than 3). Each cell is made once per round, R rounds interleaved over all rows (a
neighbour's burst hits one round of each row, not all rounds of one); a cell reports the median of the round
medians and the smallest minimum. Benchmarks are reported, never asserted.
"""
import argparse
import compileall
import datetime
import hashlib
import json
import os
import pathlib
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
from oracle_timing import timed  # noqa: E402  (numpy only: the timing policy every runtime shares)

THREADS = (1, 2)


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, timeout=900, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def first_error_line(proc):
    for line in (proc.stderr or "").splitlines():
        if line.strip():
            return line.strip()
    return "exit status %d" % proc.returncode


def etnp_bench(etnp, pte, threads, warmup, iters, inputs=(), data=(), method="forward", profile=False):
    """The `etnp bench --json` record (with `--profile`: its per-operator and per-delegate-node times), or
    {"error": message}."""
    cmd = [etnp, "bench", pte, "--method", method, "--threads", str(threads), "--warmup", str(warmup),
           "--iters", str(iters), "--json"] + (["--profile"] if profile else [])
    for d in data:
        cmd += ["--data", d]
    for i in inputs:
        cmd += ["--input", i]
    try:
        proc = run(cmd, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if proc.returncode != 0:
        return {"error": first_error_line(proc)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wall_times(cmd, repeats, env=None):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        elapsed = (time.perf_counter() - t0) * 1e3
        if proc.returncode != 0:
            return None, first_error_line(proc)
        times.append(elapsed)
    return statistics.median(times), None


# A fresh Python's import, load and first run of the demo program, timed from inside: the parts the import
# target adds to `import numpy` (the process's own start and exit are common to both).
_COLD_PROBE = """
import json, sys, time
sys.path.insert(0, {path!r})
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import {pkg} as etnp
t2 = time.perf_counter()
method = etnp.Runtime.get().load_program({pte!r}).load_method("forward")
t3 = time.perf_counter()
x = np.random.rand(1, 3, 224, 224).astype(np.float32)
t4 = time.perf_counter()
method.execute([x])
t5 = time.perf_counter()
print(json.dumps({{"numpy": t1 - t0, "import": t2 - t1, "load": t3 - t2, "first run": t5 - t4}}))
"""


def python_cold_start(pkg_dir, pkg_name, pte, rounds):
    """Interleaved rounds of fresh processes: `import numpy`, `import <pkg>`, and import + load + first run.
    Returns the table rows (median wall ms) and the in-process medians of the last command's parts."""
    probe = _COLD_PROBE.format(pkg=pkg_name, path=pkg_dir, pte=pte)
    cmds = {"numpy": "import numpy",
            "import": "import sys; sys.path.insert(0, %r); import %s" % (pkg_dir, pkg_name),
            "full": probe}
    walls = {k: [] for k in cmds}
    parts = []
    for _ in range(rounds):
        for key, code in cmds.items():
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            elapsed = (time.perf_counter() - t0) * 1e3
            if proc.returncode != 0:
                return {"rows": [("etnp Python cold start", None, first_error_line(proc))], "parts": None}
            walls[key].append(elapsed)
            if key == "full":
                parts.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(v) for k, v in walls.items()}
    rows = [("Python: `import numpy` (the baseline of the two etnp Python rows)", med["numpy"], None),
            ("etnp Python: `import %s`" % pkg_name, med["import"], None),
            ("etnp Python: import, load, first run (demo XNNPACK)", med["full"], None)]
    part_med = {k: statistics.median(p[k] for p in parts) * 1e3 for k in parts[0]}
    return {"rows": rows, "parts": part_med, "rounds": rounds,
            "min": {k: min(v) for k, v in walls.items()}}


def fmt(ms, digits=3):
    if ms is None:
        return "n/a"
    if ms >= 100:
        return "%.1f" % ms
    if ms >= 1:
        return "%.2f" % ms
    return "%.*f" % (digits, ms)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return "%.2f" % (a / b)


def file_digest(paths):
    digest = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


# --- the dev venv's workers -----------------------------------------------------------------------------------

class Worker:
    """One bench/oracle_timing.py process in the dev venv: a JSON request per line, a JSON reply per line. A
    worker that dies or stops answering is restarted on the next request (at most eight times)."""

    def __init__(self, python, runtime, threads=None, stderr_path=None, env=None):
        self.cmd = [python, os.path.join(BENCH, "oracle_timing.py"), "--runtime", runtime]
        if threads is not None:
            self.cmd += ["--threads", str(threads)]
        self.name = runtime + ("-%d" % threads if threads else "")
        self.stderr_path = stderr_path
        self.env = env
        self.proc = None
        self.restarts = 0
        self.hello = None
        self.start()

    def start(self):
        stderr = open(self.stderr_path, "a") if self.stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     text=True, bufsize=1, env=self.env)
        self.lines = queue.Queue()
        out, lines = self.proc.stdout, self.lines
        threading.Thread(target=lambda: [lines.put(l) for l in out] + [lines.put(None)], daemon=True).start()

    def request(self, req, timeout=300):
        if self.proc is None or self.proc.poll() is not None:
            if self.restarts >= 8:
                return {"error": "worker %s gave up after %d restarts" % (self.name, self.restarts)}
            self.restarts += 1
            log("   restarting worker", self.name)
            self.start()
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.lines.get(timeout=timeout)
        except (BrokenPipeError, queue.Empty):
            line = None
            self.proc.kill()
        if line is None:
            self.proc.wait()
            code = self.proc.returncode
            self.proc = None
            return {"error": "the %s worker died (%s)" % (self.name, "signal %d" % -code if code and code < 0
                                                          else "no answer in %d s" % timeout if code is None or
                                                          code == -9 else "exit status %s" % code)}
        return json.loads(line)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def dev_venv_python():
    """The dev venv's interpreter, or (None, reason)."""
    try:
        proc = run([os.path.join(ROOT, "scripts", "dev-venv.sh")], timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if proc.returncode != 0:
        return None, "scripts/dev-venv.sh failed: " + first_error_line(proc)
    python = os.path.join(proc.stdout.strip().splitlines()[-1], "bin", "python")
    return (python, None) if os.access(python, os.X_OK) else (None, "no interpreter at " + python)


# --- the rows ---------------------------------------------------------------------------------------------------

def live_cache_root(arg):
    return arg or os.environ.get("ETNP_LIVE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "etnp",
                                                                     "live-exports")


def live_records(root):
    """The finished live exports under `root`: the newest folder per (model, form) holding an export.json (the
    cache's layout, `<model>__<form>__<key>/` or an older `<key>/<model>__<form>/`, does not matter)."""
    found = {}
    if not os.path.isdir(root):
        return []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = os.path.relpath(dirpath, root).count(os.sep)
        dirnames[:] = [d for d in dirnames if not d.endswith(".tmp") and d != "onnx" and depth < 1]
        if "export.json" not in filenames or dirpath.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(dirpath, "export.json")) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        key = (record.get("model"), record.get("form"))
        mtime = os.path.getmtime(os.path.join(dirpath, "export.json"))
        if key not in found or found[key][0] < mtime:
            record["dir"] = dirpath
            found[key] = (mtime, record)
    return [r for _, r in sorted(found.values(), key=lambda v: (v[1]["model"], v[1]["form"]))]


def zoo_models():
    """zoo.py's models in its order, read from its source (no torch here), each mapped to whether zoo.py builds
    its torch module (the language models are built by their exporters from a configuration: no module to give
    onnxruntime or eager): {} when it cannot be read."""
    import ast

    try:
        with open(os.path.join(ROOT, "tests", "live", "zoo.py")) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return []
    models = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            for call in node.value.elts:
                if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                    builder = call.args[1] if len(call.args) > 1 else None
                    models[call.args[0].value] = not (isinstance(builder, ast.Constant) and builder.value is None)
    return models


def make_rows(args, demo_dir, fixtures, live_root, notes):
    rows = []
    weights = os.path.join(demo_dir, "mobilenet_v2_weights.bin")
    demo_spec = {"demo": demo_dir}
    for form in ("xnnpack", "portable"):
        rows.append({"group": "demo", "id": "demo/mobilenet_v2_%s" % form, "case": "forward",
                     "program": os.path.join(demo_dir, "mobilenet_v2_%s.pte" % form), "data": [], "method": "forward",
                     "inputs": [os.path.join(demo_dir, "mobilenet_v2_input.npy")], "torch": demo_spec,
                     "onnx_name": "demo_mobilenet_v2__%s" % file_digest([weights]), "float": True})
    bench_json = os.path.join(fixtures, "benchmarks.json")
    official_about = None
    if os.path.exists(bench_json):
        with open(bench_json) as f:
            official = json.load(f)
        official_about = official.get("machine", {})
        for e in official["entries"]:
            rows.append({"group": "fixture", "id": e["id"], "case": e["inputs"].split("/")[-2],
                         "program": os.path.join(fixtures, e["file"]),
                         "data": [os.path.join(fixtures, d) for d in e["data_files"]], "method": e["method"],
                         "inputs": [os.path.join(fixtures, e["inputs"].replace("<i>", str(i)))
                                    for i in range(len(e["input_shapes"]))],
                         "torch": None, "historical": e})
    else:
        notes.append("%s not found: no fixture rows." % bench_json)
    records = live_records(live_root)
    zoo = zoo_models()
    order = {name: i for i, name in enumerate(zoo)}
    records.sort(key=lambda r: (order.get(r["model"], 999), r["model"], r["form"]))
    if not records:
        notes.append("No live exports under %s (run `$VENV/bin/python tests/live/export.py`): no live rows."
                     % live_root)
    missing = [name for name in order if name not in {r["model"] for r in records}]
    if records and missing:
        notes.append("zoo.py models with no finished export in %s when this ran (not timed): %s."
                     % (live_root, ", ".join(missing)))
    skipped = []
    for r in records:
        label = "%s__%s" % (r["model"], r["form"])
        if r.get("export_error"):
            skipped.append("%s (the official exporter failed: %s)" % (label, r["export_error"].splitlines()[0][:120]))
            continue
        if r["file"].endswith(".bpte"):
            skipped.append("%s (a BundledProgram around the same program as %s__xnnpack; not timed)"
                           % (label, r["model"]))
            continue
        seen_methods = set()
        for case in r["cases"]:
            if case["method"] in seen_methods:
                continue  # one case per method: the example inputs the program was exported with
            seen_methods.add(case["method"])
            folder = os.path.join(r["dir"], case["dir"])
            if "calls" in case:  # stateful: the first call, repeated (it writes the same cache rows each time)
                folder = os.path.join(folder, case["calls"][0]["dir"])
                names = case["calls"][0]["inputs"]
            else:
                names = case["inputs"]
            inputs = [os.path.join(folder, n) for n in names]
            # Exports of models zoo.py does not hold (llm_bench's configured SmolLM2 shapes) or does not build (its
            # language models): no torch module to give onnxruntime and eager.
            spec = {"zoo": r["model"], "method": case["method"]} if zoo.get(r["model"]) else None
            rows.append({"group": "live", "id": "live/" + label, "case": case["dir"],
                         "program": os.path.join(r["dir"], r["file"]),
                         "data": [os.path.join(r["dir"], d) for d in r.get("data_files", [])],
                         "method": case["method"], "inputs": inputs, "torch": spec,
                         "onnx_name": "%s__%s" % (r["model"], case["method"]),
                         "float": r["form"] in ("portable", "xnnpack", "xnnpack_ptd", "portable_ptd"),
                         "official_status": (r.get("official") or {}).get("status")})
    if skipped:
        notes.append("Live exports not timed: " + "; ".join(skipped) + ".")
    if args.only:
        rows = [row for row in rows if any(s in row["id"] + ":" + row["case"] for s in args.only)]
    if args.quick and not args.only:
        keep = {"demo/mobilenet_v2_xnnpack", "exported/mobilenet_v2_xnnpack_fp32", "exported/mlp_dq8_xnnpack",
                "exported/tiny_llama_kv_xnnpack_fp32"}
        live_models = []
        for row in rows:
            if row["group"] == "live" and row["torch"] and row["torch"]["zoo"] not in live_models and len(live_models) < 2:
                live_models.append(row["torch"]["zoo"])
        rows = [row for row in rows if row["id"] in keep or (row["group"] == "live" and row["torch"] and
                                                                row["torch"]["zoo"] in live_models)]
    for row in rows:
        if row.get("torch"):
            row["torch_key"] = json.dumps(row["torch"], sort_keys=True) + file_digest(row["inputs"])
    return rows, official_about


# --- measuring ----------------------------------------------------------------------------------------------------

def try_import_python_package(build_dir):
    """The etnp Python package if it can be imported (built in-tree or installed), else (None, reason)."""
    candidates = [os.environ.get("ETNP_PYTHON_DIR", ""), os.path.join(build_dir, "python"),
                  os.path.join(ROOT, "build", "python")]
    for path in candidates:
        if path and os.path.isdir(os.path.join(path, "executorch_numpy_runtime")):
            sys.path.insert(0, path)
            break
    try:
        return __import__("executorch_numpy_runtime"), "executorch_numpy_runtime"
    except ImportError as e:
        return None, str(e)


def outputs_diff(dir_a, dir_b):
    """Largest |a - b| over the outputs saved in two folders (float64), or None where they cannot be compared."""
    if not (dir_a and dir_b and os.path.isdir(dir_a) and os.path.isdir(dir_b)):
        return None
    names_a = sorted(os.listdir(dir_a))
    names_b = sorted(os.listdir(dir_b))
    if not names_a or names_a != names_b:
        return None
    worst = 0.0
    for n in names_a:
        a, b = np.load(os.path.join(dir_a, n)), np.load(os.path.join(dir_b, n))
        if a.shape != b.shape:
            if a.size != b.size:
                return None
            b = b.reshape(a.shape)
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return worst


def aggregate(runs):
    ok = [r for r in runs if r and "error" not in r]
    if not ok:
        errors = [r["error"] for r in runs if r and "error" in r]
        return {"error": errors[0] if errors else "not measured"}
    return {"median_ms": statistics.median(r["median_ms"] for r in ok), "min_ms": min(r["min_ms"] for r in ok),
            "rounds": len(ok), "threads": ok[-1].get("threads")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))
    parser.add_argument("--live-cache", help="live-export cache root (default $ETNP_LIVE_CACHE or "
                                             "~/.cache/etnp/live-exports)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=0.2, help="timed seconds per measurement, at most")
    parser.add_argument("--only", action="append", default=[], help="rows whose id:case contains SUBSTRING")
    parser.add_argument("--quick", action="store_true", help="a few rows, one round, short measurements (a smoke "
                                                             "run: noisy numbers)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.iters, args.budget_s = 1, 2, 10, 0.05

    build = os.path.abspath(args.build_dir)
    etnp = os.path.join(build, "etnp")
    demo_bin = os.path.join(build, "etnp_demo")
    for exe in (etnp, demo_bin):
        if not os.access(exe, os.X_OK):
            sys.exit("missing %s: build first (scripts/build.sh or cmake --build %s)" % (exe, build))
    demo_dir = os.path.join(build, "demo")
    proc = run([demo_bin, "--output-dir", demo_dir])
    if proc.returncode != 0:
        sys.exit("etnp_demo failed: " + first_error_line(proc))
    xnn_pte = os.path.join(demo_dir, "mobilenet_v2_xnnpack.pte")
    tiny_pte = os.path.join(demo_dir, "tiny_add.pte")
    started = datetime.datetime.now(datetime.timezone.utc)
    uptime_before = run(["uptime"]).stdout.strip()
    t_start = time.time()
    notes = []
    live_root = live_cache_root(args.live_cache)
    onnx_dir = os.path.join(live_root, "onnx")
    scratch = tempfile.mkdtemp(prefix="etnp-bench-")

    pkg, pkg_name = try_import_python_package(build)  # located and imported here; it runs in a worker
    workers = {}
    if pkg is not None:
        env = dict(os.environ, ETNP_PYTHON_DIR=os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__))))
        workers["etnp"] = Worker(sys.executable, "etnp", None, os.path.join(scratch, "etnp-worker.log"), env)
        hello = workers["etnp"].request({"op": "hello"}, timeout=120)
        if "error" in hello:
            notes.append("The etnp Python worker did not start: %s" % hello["error"])
            del workers["etnp"]
    else:
        notes.append("The etnp Python package is not built (%s): the etnp Python column is empty and the ratios "
                     "use `etnp bench`." % pkg_name)

    # ---- the workers (started first: importing torch takes a while) ------------------------------------------
    python, why = dev_venv_python()
    versions = {}
    if python is None:
        notes.append("No dev venv (%s): the official, onnxruntime and PyTorch columns are empty." % why)
    else:
        log("== starting the dev venv's workers")
        stderr_path = os.path.join(scratch, "workers.log")
        for n in THREADS:
            workers["official", n] = Worker(python, "official", n, stderr_path)
        workers["onnx"] = Worker(python, "onnx", None, stderr_path)
        workers["eager"] = Worker(python, "eager", None, stderr_path)
        for key, w in workers.items():
            if key == "etnp":
                continue
            w.hello = w.request({"op": "hello"}, timeout=600)
            if "error" in w.hello:
                notes.append("The %s worker did not start: %s" % (w.name, w.hello["error"]))
            else:
                versions.update(w.hello["versions"])
            if key[0] == "official" and w.hello.get("threads") not in (None, key[1]):
                notes.append("The official worker asked for %d threads has %s (`_threadpool_get_thread_count()`)."
                             % (key[1], w.hello.get("threads")))

    rows, official_about = make_rows(args, demo_dir, args.fixtures, live_root, notes)
    log("== %d rows" % len(rows))

    # ---- ONNX exports of the torch modules (cached) -------------------------------------------------------------
    onnx_paths = {}  # torch_key -> path or {"error"}
    if "eager" in workers:
        log("== ONNX exports (cached in %s)" % onnx_dir)
        for row in rows:
            if not row.get("torch") or row["torch_key"] in onnx_paths:
                continue
            path = os.path.join(onnx_dir, "%s__%s.onnx" % (row["onnx_name"], file_digest(
                [os.path.join(ROOT, "tests", "live", "zoo.py")]) + "_" + versions.get("torch", "?")))
            r = workers["eager"].request({"op": "export_onnx", "module": row["torch"], "inputs": row["inputs"],
                                          "path": path}, timeout=900)
            onnx_paths[row["torch_key"]] = r
            log("   %s: %s" % (row["onnx_name"], r.get("exporter") or r.get("error")))

    # ---- 7. (measured first, on a quiet machine) the physical limits, and each float row's FLOPs ----------------
    peak = None
    peak_tool = os.path.join(args.build_dir, "bench", "etnp_bench_machine_peak")
    if os.path.exists(peak_tool):
        log("== machine peak (%s)" % peak_tool)
        try:
            peak = json.loads(run([peak_tool]).stdout)
        except (ValueError, OSError) as e:
            notes.append("etnp_bench_machine_peak failed: %s" % e)
    else:
        notes.append("No %s (ETNP_BUILD_BENCH off?): section 7 has no peak." % peak_tool)
    flops = {}  # torch_key -> {"flops": N} or {"error"}
    if "eager" in workers:
        for row in rows:
            if row.get("torch") and row.get("float") and row["torch_key"] not in flops:
                flops[row["torch_key"]] = workers["eager"].request({"op": "flops", "module": row["torch"],
                                                                   "inputs": row["inputs"]})

    # ---- 1. Every row, every runtime, interleaved rounds ----------------------------------------------------------
    runtimes = ["etnp_cli", "etnp_py", "official", "onnx", "eager"]
    results = {}  # (row index, runtime, threads) -> [per-round records]
    by_torch = {}  # (torch_key, runtime, threads) -> the same list, shared by the rows of one module and inputs
    failed = {}  # (program key, runtime, threads) -> error: not retried in later rounds
    saved = {}  # (row index, runtime) -> the folder with its outputs of the first round
    round_loads = []
    for rnd in range(args.rounds):
        round_loads.append(os.getloadavg()[0])
        order = runtimes[rnd % len(runtimes):] + runtimes[:rnd % len(runtimes)]
        for index, row in enumerate(rows):
            log("   round %d/%d: %s %s" % (rnd + 1, args.rounds, row["id"], row["case"]))
            for threads in THREADS:
                estimate = None  # ms per call of etnp's Python run, to size the CLI run
                for rt in order:
                    if rt in ("onnx", "eager"):
                        if not row.get("torch") or rt not in workers:
                            continue
                        shared = by_torch.setdefault((row["torch_key"], rt, threads), [])
                        results[index, rt, threads] = shared
                        if len(shared) > rnd:
                            continue  # measured this round for an earlier row of the same module and inputs
                        store = shared
                        fail_key = (row["torch_key"], rt, threads)
                    else:
                        store = results.setdefault((index, rt, threads), [])
                        fail_key = (row["program"], row["method"], tuple(row["inputs"]), rt, threads)
                    if fail_key in failed:
                        store.append({"error": failed[fail_key]})
                        continue
                    save = None
                    if rnd == 0 and threads == 1 and rt != "etnp_cli":
                        save = os.path.join(scratch, "out", "%d_%s" % (index, rt))
                        saved[index, rt] = save
                    common = {"warmup": args.warmup, "iters": args.iters, "budget_s": args.budget_s, "save": save,
                              "inputs": row["inputs"], "threads": threads}
                    if rt == "etnp_py":
                        if "etnp" not in workers:
                            continue
                        r = workers["etnp"].request(dict(common, op="time", program=row["program"],
                                                         data=row["data"], method=row["method"]))
                        estimate = r.get("median_ms")
                    elif rt == "etnp_cli":
                        # The same policy as `timed`, sized from etnp's Python run of this round when there is one.
                        if not estimate:  # etnp's Python run comes later in this round's order: an earlier one
                            earlier = [r for r in results.get((index, "etnp_py", threads), []) if "median_ms" in r]
                            estimate = earlier[-1]["median_ms"] if earlier else None
                        per_call = estimate if estimate else 1.0
                        iters = int(max(3, min(args.iters, args.budget_s * 1e3 / max(per_call, 1e-4))))
                        warm = int(max(1, min(args.warmup, args.budget_s * 500 / max(per_call, 1e-4))))
                        r = etnp_bench(etnp, row["program"], threads, warm, iters, inputs=row["inputs"],
                                       data=row["data"], method=row["method"])
                        if "error" not in r:
                            r = {"median_ms": r["median_ms"], "min_ms": r["min_ms"], "iters": iters,
                                 "threads": r.get("threads", threads)}
                    elif rt == "official":
                        if ("official", threads) not in workers:
                            continue
                        r = workers["official", threads].request(
                            dict(common, op="time", program=row["program"], data=row["data"], method=row["method"]))
                    elif rt == "onnx":
                        path = onnx_paths.get(row["torch_key"], {"error": "not exported"})
                        r = dict(path) if "error" in path else workers["onnx"].request(
                            dict(common, op="time", onnx=path["path"]))
                    else:
                        r = workers["eager"].request(dict(common, op="time", module=row["torch"]))
                    if "error" in r:
                        failed[fail_key] = r["error"]
                    store.append(r)
                    if rt == "etnp_py" and rnd == 0 and "error" in r:
                        estimate = None
    round_loads.append(os.getloadavg()[0])
    cells = {key: aggregate(runs) for key, runs in results.items()}

    # ---- 4. Per-call overhead ----------------------------------------------------------------------------------
    log("== per-call overhead")
    overhead = []
    ones = []
    for i in range(2):
        ones.append(os.path.join(scratch, "one_%d.npy" % i))
        np.save(ones[-1], np.ones(1, dtype=np.float32))
    tiny_row = {"program": tiny_pte, "data": [], "method": "forward", "inputs": ones}
    warm_n, iters_n = (200, 2000) if args.quick else (1000, 20000)
    r = etnp_bench(etnp, tiny_pte, 1, warm_n, iters_n, inputs=ones)
    overhead.append(("etnp, C++ (`etnp bench`: Method::execute incl. setting inputs)", r))
    tiny_common = {"op": "time", "warmup": warm_n, "iters": iters_n, "budget_s": 1e9, "save": None, "inputs": ones,
                   "threads": 1}
    if "etnp" in workers:
        overhead.append(("etnp, Python (`%s` Method.execute)" % pkg_name,
                         workers["etnp"].request(dict(tiny_common, **tiny_row))))
    if ("official", 1) in workers:
        overhead.append(("official runtime, Python (pybindings Method.execute, same .pte)",
                         workers["official", 1].request(dict(tiny_common, program=tiny_pte, data=[],
                                                             method="forward"))))
    if "eager" in workers:
        add_spec = {"builtin": "add"}
        add_onnx = workers["eager"].request({"op": "export_onnx", "module": add_spec, "inputs": ones,
                                             "path": os.path.join(onnx_dir, "tiny_add__%s.onnx"
                                                                  % versions.get("torch", "?"))})
        if "error" not in add_onnx:
            overhead.append(("onnxruntime (InferenceSession.run, x + y exported from torch)",
                             workers["onnx"].request(dict(tiny_common, onnx=add_onnx["path"]))))
        else:
            overhead.append(("onnxruntime", add_onnx))
        overhead.append(("PyTorch eager (x + y on [1] tensors, inference_mode)",
                         workers["eager"].request(dict(tiny_common, module=add_spec))))

    # ---- 5. Cold start -----------------------------------------------------------------------------------------
    log("== cold start")
    cold = []
    repeats = 1 if args.quick else 3
    med, err = wall_times([etnp, "version"], repeats)
    cold.append(("`etnp version` (process start only)", med, err))
    med, err = wall_times([etnp, "run", xnn_pte, "--fill", "random", "--print", "none"], repeats)
    cold.append(("`etnp run` demo XNNPACK (process start, load, first run)", med, err))
    python_cold = None
    if pkg is not None:
        pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        # Bytecode for the package's modules, as pip writes at install (numpy's and the venv's packages have
        # theirs): under PYTHONDONTWRITEBYTECODE every import of the build tree's copy compiled them (4 ms).
        compileall.compile_dir(os.path.dirname(os.path.abspath(pkg.__file__)), quiet=1)
        python_cold = python_cold_start(pkg_dir, pkg_name, xnn_pte, 3 if args.quick else 21)
        for name, med, err in python_cold["rows"]:
            cold.append((name, med, err))
    if python is not None:
        code = "from executorch.runtime import Runtime"
        med, err = wall_times([python, "-c", code], repeats)
        cold.append(("official: `from executorch.runtime import Runtime` (imports torch)", med, err))
        code += ("; import torch; m = Runtime.get().load_program(%r).load_method('forward'); "
                 "m.execute([torch.rand(1, 3, 224, 224)])" % xnn_pte)
        med, err = wall_times([python, "-c", code], repeats)
        cold.append(("official: import, load, first run (same demo .pte)", med, err))
        med, err = wall_times([python, "-c", "import torch"], repeats)
        cold.append(("PyTorch: `import torch`", med, err))
        med, err = wall_times([python, "-c", "import onnxruntime"], repeats)
        cold.append(("onnxruntime: `import onnxruntime`", med, err))
        demo_onnx = onnx_paths.get(rows[0].get("torch_key")) if rows and rows[0]["group"] == "demo" else None
        if demo_onnx and "path" in demo_onnx:
            code = ("import onnxruntime as o, numpy as np; "
                    "s = o.InferenceSession(%r, providers=['CPUExecutionProvider']); "
                    "s.run(None, {s.get_inputs()[0].name: np.random.rand(1, 3, 224, 224).astype(np.float32)})"
                    % demo_onnx["path"])
            med, err = wall_times([python, "-c", code], repeats)
            cold.append(("onnxruntime: import, session, first run (demo network's ONNX export)", med, err))

    # ---- 6. Profiles ---------------------------------------------------------------------------------------------
    log("== profiles")
    profiles = []
    for row in rows:
        if row["group"] != "fixture" or "xnnpack" not in row["id"] or any(p[0] == row["id"] for p in profiles):
            continue
        r = etnp_bench(etnp, row["program"], 1, args.warmup, max(5, args.iters // 3), inputs=row["inputs"],
                       data=row["data"], method=row["method"], profile=True)
        profiles.append((row["id"], row["case"], r))

    for w in workers.values():
        w.close()
    uptime_after = run(["uptime"]).stdout.strip()
    elapsed_min = (time.time() - t_start) / 60
    write_results(args, rows, cells, saved, onnx_paths, overhead, cold, profiles, notes, official_about, versions,
                  pkg, started, uptime_before, uptime_after, round_loads, elapsed_min, repeats, live_root, peak, flops,
                  python_cold=python_cold)
    shutil.rmtree(scratch, ignore_errors=True)
    log("wrote", args.output)


# --- RESULTS.md -----------------------------------------------------------------------------------------------------

def cpu_description():
    import llm_bench  # the one reader of /proc/cpuinfo

    return llm_bench.cpu_model(), llm_bench.cpu_isa()


def plain(text):
    """`text` without terminal colour codes (exporters colour their messages) and table separators."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace("|", "/")


def cell(c):
    if c is None:
        return "—"
    if "error" in c:
        return "error: " + plain(c["error"])[:90]
    return "%s / %s" % (fmt(c["median_ms"]), fmt(c["min_ms"]))


def ratios(a, b):
    if not a or not b or "error" in a or "error" in b:
        return "—"
    return "%s / %s%s" % (ratio(a["median_ms"], b["median_ms"]), ratio(a["min_ms"], b["min_ms"]),
                          " (C++)" if a.get("cli") else "")


def etnp_cell(cells, index, threads):
    """etnp's Python cell, or its `etnp bench` cell (marked) where the Python one has no time."""
    py = cells.get((index, "etnp_py", threads))
    if py and "error" not in py:
        return py
    cli = cells.get((index, "etnp_cli", threads))
    return dict(cli, cli=True) if cli and "error" not in cli else py


def carried_headings(old_text, md):
    """The "## " sections of the previous RESULTS.md that this script does not write (the numbered ones, Reproduce
    and Notes are its own): other scripts' sections, kept as they were."""
    produced = {line.rstrip() for line in md if line.startswith("## ")} | {"## Notes", "## Reproduce"}
    return [line.rstrip() for line in old_text.splitlines()
            if line.startswith("## ") and not re.match(r"## \d+\. ", line) and line.rstrip() not in produced]


def efficiency_section(rows, cells, peak, flops):
    """Section 7: each float row's achieved GFLOP/s (torch's count of its matrix products and convolutions over
    etnp's C++ median) against the measured fp32 FMA peak of one core (1 thread) or of all (2 threads), for etnp
    and the official runtime."""
    md = ["## 7. Efficiency: achieved GFLOP/s against this machine's fp32 peak\n"]
    if not peak:
        md.append("No measurement of the peak (build the benchmark programs: ETNP_BUILD_BENCH).\n")
        return md
    md.append("Peak, measured in this run by `etnp_bench_machine_peak` (12 independent FMA chains per core, best of 5): "
              "%.1f GFLOP/s on one core (AVX2 %.1f, AVX-512 %.1f), %.1f on all %d; memcpy on one thread %.1f GB/s "
              "(bytes read plus written). FLOPs: `torch.utils.flop_counter` on the row's torch module and inputs "
              "(2 per multiply-add of the matrix products and convolutions; element-wise work uncounted), so a row "
              "far under the peak is bound by something else: memory (the bytes of weights or activations per "
              "multiply-add), or work the count leaves out (section 6 and `etnp bench --profile` say which), and a "
              "row above it does less work than counted (the taps of an atrous convolution that read only "
              "padding, which etnp's convolutions skip).\n"
              % (peak["fma_gflops_1"], peak["avx2_fma_gflops_1"], peak["avx512_fma_gflops_1"],
                 peak["fma_gflops_all"], peak["threads"], peak["memcpy_gbs_1"]))
    md.append("| program | case | MFLOP/run | thr | etnp ms (C++) | etnp GFLOP/s | % of peak | official ms | "
              "official GFLOP/s | % of peak |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for i, row in enumerate(rows):
        f = flops.get(row.get("torch_key"))
        if not row.get("float") or not f or "error" in f or not f.get("flops"):
            continue
        for threads in (1, 2):
            limit = peak["fma_gflops_1"] if threads == 1 else peak["fma_gflops_all"]
            cols = []
            for rt in ("etnp_cli", "official"):
                c = cells.get((i, rt, threads))
                if not c or "error" in c:
                    cols += ["—", "—", "—"]
                    continue
                gflops = f["flops"] / (c["median_ms"] * 1e6)
                cols += [fmt(c["median_ms"]), "%.1f" % gflops, "%.0f%%" % (100.0 * gflops / limit)]
            md.append("| %s | %s | %.1f | %d | %s |" % (row["id"], row["case"], f["flops"] / 1e6, threads,
                                                       " | ".join(cols)))
    md.append("")
    return md


def write_results(args, rows, cells, saved, onnx_paths, overhead, cold, profiles, notes, official_about, versions,
                  pkg, started, uptime_before, uptime_after, round_loads, elapsed_min, repeats, live_root, peak=None,
                  flops=None, python_cold=None):
    cpu, isa = cpu_description()
    md = []
    md.append("# etnp benchmark results\n")
    md.append("Generated by `bench/run_benchmarks.py` on %s in %.0f minutes. Times in milliseconds, each cell "
              "\"median / min\"; ratios are etnp / other (below 1 = etnp faster), \"of the medians / of the "
              "minimums\". Benchmarks are reported, never asserted.\n" % (started.strftime("%Y-%m-%d %H:%M UTC"),
                                                                         elapsed_min))
    md.append("Machine: %s (%s), %d logical CPUs. Load (uptime) at the start: `%s`; at the end: `%s`; 1-minute load "
              "at each round's start and at the end: %s. A shared machine: with the load at or above the core count "
              "the 2-thread cells especially carry noise well beyond ±20-30%%; compare the runtimes within a row "
              "(same rounds), not across runs.\n"
              % (cpu, isa, os.cpu_count() or 0, uptime_before, uptime_after,
                 ", ".join("%.1f" % x for x in round_loads)))
    md.append("Live exports: %s.\n" % live_root)
    md.append("Versions: etnp %s; %s. %d round%s; per measurement up to %d warm-up and %d timed calls, at most "
              "%.2f s of timed calls (never fewer than 3)%s.\n"
              % (getattr(pkg, "__version__", "?") if pkg else "?",
                 ", ".join("%s %s" % kv for kv in sorted(versions.items())) or "no dev venv", args.rounds,
                 "s" * (args.rounds > 1), args.warmup, args.iters, args.budget_s, " (--quick)" if args.quick else ""))
    md.append("## Reproduce\n")
    md.append("```sh\n./scripts/build.sh\nVENV=$(./scripts/dev-venv.sh)          # official ExecuTorch, torch, "
              "onnxruntime: baselines only\n$VENV/bin/python tests/live/export.py  # the live exports (cached)\n"
              "/usr/bin/python3 bench/run_benchmarks.py --build-dir build --output bench/RESULTS.md\n"
              "# a smoke run: --quick; some rows: --only mobilenet_v2\n# single measurements:\n"
              "build/etnp bench build/demo/mobilenet_v2_xnnpack.pte --threads 1 --warmup 5 --iters 30 "
              "--input build/demo/mobilenet_v2_input.npy\n# one kernel at a time, at each CPU level (depthwise, 1x1):\n"
              "build/bench/etnp_bench_layer_kernels --filter dw\n```\n")

    md.append("## 1. Same machine, same files: etnp, the official runtime, onnxruntime, PyTorch eager\n")
    md.append("Each row is one program and case: the same file and the same input arrays for etnp and the official "
              "runtime, the same torch module and inputs for onnxruntime (its `torch.onnx.export`) and PyTorch "
              "eager. **etnp / official** and **etnp / ORT** use etnp's Python column: a Python loop over "
              "`Method.execute`, like the official pybindings', onnxruntime's `InferenceSession.run` and the eager "
              "module call (marked (C++) where etnp's Python run has no time and `etnp bench`'s is used); "
              "`etnp bench` is the C++ loop (no Python in it). *demo*: the MobileNetV2 of `etnp_demo`, "
              "written by etnp's own `.pte` writer (its torch module: bench/mobilenet_torch.py, same weights); "
              "*exported/, xnnpack/*: the programs of shared/fixtures/benchmarks.json (made with the official "
              "exporter; no torch module exists for them, so no onnxruntime or eager cells); *live/*: "
              "tests/live's exports of zoo.py's modules (the quantized forms, int8 / qd8 / 8da4w, are compared "
              "with onnxruntime and eager running the float module; the language models, llm_* and optimum_*, have "
              "no such cells: their exporters build the module from a configuration). \"official, other CPU\" is "
              "the historical "
              "figure of benchmarks.json (ExecuTorch 1.4.1's C++ runtime on %s). \"etnp vs official\": the "
              "largest |difference| between their outputs on the row's inputs.\n"
              % ((official_about or {}).get("cpu", "?")))
    md.append("| program | case | thr | etnp (Python) | etnp bench (C++) | official | **etnp / official** | "
              "onnxruntime | **etnp / ORT** | PyTorch eager | etnp / eager | official, other CPU | "
              "etnp vs official |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows):
        diff = outputs_diff(saved.get((index, "etnp_py")), saved.get((index, "official")))
        for threads in THREADS:
            mine = etnp_cell(cells, index, threads)
            off = cells.get((index, "official", threads))
            ort = cells.get((index, "onnx", threads))
            eager = cells.get((index, "eager", threads))
            hist = row.get("historical", {}).get("threads_%d" % threads)
            md.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                row["id"], row["case"], threads, cell(cells.get((index, "etnp_py", threads))),
                cell(cells.get((index, "etnp_cli", threads))), cell(off), ratios(mine, off),
                cell(ort) if row.get("torch") else "—", ratios(mine, ort) if row.get("torch") else "—",
                cell(eager) if row.get("torch") else "—", ratios(mine, eager) if row.get("torch") else "—",
                "%s / %s" % (fmt(hist["median_ms"]), fmt(hist.get("min_ms"))) if hist else "—",
                ("%.2g" % diff if diff is not None else "n/a") if threads == 1 else ""))
    md.append("")
    # Summary: geometric means of the ratios of the medians, per thread count.
    md.append("Summary (geometric mean of the ratios of the medians, over the rows where both ran):\n")
    md.append("| threads | etnp / official | rows | etnp faster | etnp / onnxruntime | rows | etnp faster |")
    md.append("|---|---|---|---|---|---|---|")
    for threads in THREADS:
        parts = []
        for other in ("official", "onnx"):
            rs = []
            for index in range(len(rows)):
                mine = etnp_cell(cells, index, threads)
                o = cells.get((index, other, threads))
                if mine and o and "error" not in mine and "error" not in o:
                    rs.append(mine["median_ms"] / o["median_ms"])
            geo = float(np.exp(np.mean(np.log(rs)))) if rs else None
            parts += ["%.2f" % geo if geo else "n/a", str(len(rs)), str(sum(1 for x in rs if x < 1))]
        md.append("| %d | %s |" % (threads, " | ".join(parts)))
    md.append("")
    failures = []
    for index, row in enumerate(rows):
        for rt, name in (("etnp_py", "etnp"), ("official", "official"), ("onnx", "onnxruntime"),
                         ("eager", "PyTorch")):
            c = cells.get((index, rt, 1))
            if c and "error" in c:
                failures.append("%s (%s), %s: %s" % (row["id"], row["case"], name, c["error"]))
    if failures:
        md.append("Cells without a time (full messages):\n")
        seen = set()
        for f in failures:
            if f not in seen:
                seen.add(f)
                md.append("- " + plain(f))
        md.append("")

    md.append("## 2. Outputs against PyTorch eager (rows with a float torch module)\n")
    md.append("Largest |difference| from the eager module's outputs on the same inputs (first round, 1 thread).\n")
    md.append("| program | case | etnp | official | onnxruntime |\n|---|---|---|---|---|")
    for index, row in enumerate(rows):
        if not row.get("torch") or not row.get("float"):
            continue
        eager_dir = saved.get((index, "eager"))
        if eager_dir is None:
            for j, other in enumerate(rows):  # measured once for the rows of one module and inputs
                if other.get("torch_key") == row["torch_key"] and saved.get((j, "eager")):
                    eager_dir = saved[j, "eager"]
                    break
        ort_dir = saved.get((index, "onnx"))
        if ort_dir is None or not os.path.isdir(ort_dir):
            for j, other in enumerate(rows):
                if other.get("torch_key") == row["torch_key"] and saved.get((j, "onnx")) and \
                        os.path.isdir(saved[j, "onnx"]):
                    ort_dir = saved[j, "onnx"]
                    break
        vals = [outputs_diff(saved.get((index, rt)), eager_dir) for rt in ("etnp_py", "official")]
        vals.append(outputs_diff(ort_dir, eager_dir))
        md.append("| %s | %s | %s |" % (row["id"], row["case"],
                                        " | ".join("%.2g" % v if v is not None else "n/a" for v in vals)))
    md.append("")

    md.append("## 3. Portable operators against the XNNPACK delegate, both runtimes (from section 1)\n")
    md.append("| program | case | threads | etnp portable | etnp XNNPACK | etnp portable / XNNPACK | "
              "official portable | official XNNPACK | official portable / XNNPACK |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    index_of = {(row["id"], row["case"]): i for i, row in enumerate(rows)}
    pairs = []
    for row in rows:
        pid = row["id"]
        if pid.endswith("_portable"):  # demo/x_portable, exported/x_portable, live/x__portable
            twin = pid[:-len("portable")] + "xnnpack"
            for cand in (twin, twin + "_fp32"):
                if (cand, row["case"]) in index_of:
                    pairs.append((index_of[pid, row["case"]], index_of[cand, row["case"]]))
                    break
    for p, x in pairs:
        for threads in THREADS:
            med = lambda i, rt: (cells.get((i, rt, threads)) or {}).get("median_ms")
            mine_p = med(p, "etnp_py") or med(p, "etnp_cli")
            mine_x = med(x, "etnp_py") or med(x, "etnp_cli")
            md.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                rows[p]["id"], rows[p]["case"], threads, fmt(mine_p), fmt(mine_x), ratio(mine_p, mine_x),
                fmt(med(p, "official")), fmt(med(x, "official")), ratio(med(p, "official"), med(x, "official"))))
    md.append("")

    md.append("## 4. Per-call overhead (x + y on one-element float tensors, 1 thread)\n")
    md.append("etnp and the official runtime run the same `tiny_add.pte` (`etnp_demo` writes it); onnxruntime and "
              "PyTorch the same addition.\n")
    md.append("| caller | median µs | min µs | note |\n|---|---|---|---|")
    for name, r in overhead:
        if "error" in r:
            md.append("| %s | n/a | n/a | %s |" % (name, r["error"]))
        else:
            md.append("| %s | %.2f | %.2f | |" % (name, r["median_ms"] * 1e3, r["min_ms"] * 1e3))
    md.append("")

    md.append("## 5. Cold start (wall time of a fresh process, median of %d; files in the page cache)\n" % repeats)
    if python_cold and python_cold.get("parts"):
        md.append("The three Python rows of etnp and numpy: median of %d interleaved rounds (the others: %d rounds, "
                  "one command after the other).\n" % (python_cold["rounds"], repeats))
    md.append("| what | ms |\n|---|---|")
    for name, med, err in cold:
        md.append("| %s | %s |" % (name, fmt(med) if med is not None else "error: %s" % err))
    md.append("")
    if python_cold and python_cold.get("parts"):
        parts = python_cold["parts"]
        added = parts["import"] + parts["load"] + parts["first run"]
        wall = [med for _, med, _ in python_cold["rows"]]
        md.append("Inside the last Python row's process (`time.perf_counter` around each step, median of the "
                  "rounds): `import numpy` %.1f ms; then `import %s` %.2f, `load_program` + `load_method` %.2f, "
                  "the first `execute` %.2f: **%.1f ms added to `import numpy`** (target: at most 20). Between "
                  "whole processes the medians differ by %.1f ms (minimums: %.1f), which also holds the "
                  "interpreter's exit and this shared machine's noise.\n"
                  % (parts["numpy"], pkg.__name__, parts["import"], parts["load"], parts["first run"], added,
                     wall[2] - wall[0],
                     python_cold["min"]["full"] - python_cold["min"]["numpy"]))

    if profiles:
        md.append("## 6. Where the time goes (delegated fixture programs, 1 thread, `etnp bench --profile`)\n")
        md.append("Per program: the time per run of each instruction kind (delegate calls and the portable glue "
                  "between them), then inside the delegate calls the time per node kind and what ran it. Shares "
                  "are of the whole run; profiling adds a clock read per node, so the totals run a little above "
                  "section 1.\n")
        for pid, case, r in profiles:
            if "error" in r:
                md.append("- %s (%s): error: %s" % (pid, case, r["error"]))
                continue
            top = r.get("profile", [])
            total = sum(p["ms_per_run"] for p in top) or 1.0
            glue = sum(p["ms_per_run"] for p in top if not p["name"].startswith("DELEGATE_CALL"))
            calls = sum(p["calls_per_run"] for p in top if p["name"].startswith("DELEGATE_CALL"))
            md.append("**%s** (%s): %s ms per run; %d delegate calls, portable glue %s ms (%.0f%%)\n"
                      % (pid, case, fmt(total), calls, fmt(glue), 100.0 * glue / total))
            md.append("| inside the delegate calls | calls/run | ms/run | share |\n|---|---|---|---|")
            for part in r.get("delegate_profile", [])[:6]:
                md.append("| %s | %d | %s | %.0f%% |" % (part["name"].split(": ", 1)[-1], part["calls_per_run"],
                                                       fmt(part["ms_per_run"]), 100.0 * part["ms_per_run"] / total))
            md.append("")
    md += efficiency_section(rows, cells, peak, flops or {})
    mismatched = sorted({"%s %s" % (rt, t) for (i, rt, t), c in cells.items()
                         if c and "error" not in c and c.get("threads") not in (None, t)})
    if mismatched:
        notes.append("Thread counts reported other than asked for: %s." % ", ".join(mismatched))
    onnx_failures = sorted({"%s: %s" % (row["onnx_name"], onnx_paths[row["torch_key"]]["error"])
                            for row in rows if row.get("torch_key") in onnx_paths
                            and "error" in onnx_paths[row["torch_key"]]})
    if onnx_failures:
        notes.append("`torch.onnx.export` failed (dynamo, then the TorchScript exporter), so those rows have no "
                     "onnxruntime cell: " + "; ".join(onnx_failures) + ".")
    if notes:
        md.append("## Notes\n")
        for n in notes:
            md.append("- " + plain(n))
        md.append("")
    import llm_bench  # the sections other scripts write (llm_bench, scale_out, install_time, load_memory, ...): carried over

    old_text = pathlib.Path(args.output).read_text() if os.path.exists(args.output) else ""
    headings = carried_headings(old_text, md)
    kept = {heading: llm_bench.read_section(pathlib.Path(args.output), heading) for heading in headings}
    with open(args.output, "w") as f:
        f.write("\n".join(md))
    for heading in headings:
        if kept[heading]:
            llm_bench.replace_section(pathlib.Path(args.output), kept[heading], heading)


if __name__ == "__main__":
    main()
