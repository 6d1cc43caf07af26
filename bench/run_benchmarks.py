#!/usr/bin/python3
"""Side-by-side benchmarks of etnp, written to bench/RESULTS.md.

    /usr/bin/python3 bench/run_benchmarks.py [--build-dir build] [--output bench/RESULTS.md] [--quick]

1. The etnp_demo MobileNetV2 (XNNPACK-delegated) against PyTorch eager and TorchScript on the same weights, at 1
   and 2 threads, after checking that the outputs agree.
2. The portable-operator variant against the delegated one.
3. Per-call overhead of a tiny program (x + y on one element) from C++ (`etnp bench`) and from Python (when the
   Python package is built).
4. Cold start: process start, load and first run, against `import torch` (and a TorchScript load + first run).
5. Every program of shared/fixtures/benchmarks.json at 1 and 2 threads, with the ratio to the official
   ExecuTorch runtime's figures.
6. Own kernels against the official figures and the XNNPACK twins (from section 5's rows).
7. Where the time goes in each delegated program (`etnp bench --profile`).
8. With --xnnpack-reference DRIVER (bench/xnnpack_reference/build.sh makes it): the current XNNPACK, the library
   the official runtime hands these programs to, on the same networks on this machine, measured in the same
   rounds as section 5.

Benchmarks are reported, never asserted. PyTorch (Debian's python3-torch, python3-torchvision) is the baseline
only; etnp itself never uses it.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


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
        proc = run(cmd)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if proc.returncode != 0:
        return {"error": first_error_line(proc)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Fixture program and case -> the network the XNNPACK reference driver rebuilds for it.
XNNPACK_REFERENCE_MODELS = {
    ("exported/mobilenet_v2_xnnpack_fp32", "forward"): "mobilenet_v2_fp32",
    ("exported/mobilenet_v2_xnnpack_fp32_ptd", "forward"): "mobilenet_v2_fp32",
    ("exported/mobilenet_v2_xnnpack_int8", "forward"): "mobilenet_v2_qs8",
    ("exported/smallcnn_dynbatch_xnnpack_fp32", "forward__b1"): "smallcnn_b1",
    ("exported/smallcnn_dynbatch_xnnpack_fp32", "forward__b8"): "smallcnn_b8",
    ("exported/smallcnn_multimethod_xnnpack_fp32", "forward"): "smallcnn_b1",
    ("exported/smallcnn_multimethod_xnnpack_fp32", "features"): "smallcnn_features_b2",
    ("exported/mlp_dq8_xnnpack", "forward"): "mlp_dq8",
}


def xnnpack_reference(driver, model, threads):
    """The reference driver's record for one network ({"median_ms", "min_ms"}), or {"error": message}."""
    try:
        proc = run([driver, model, str(threads)])
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if proc.returncode != 0:
        return {"error": first_error_line(proc)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def time_calls(fn, warmup, iters):
    """Median and minimum of `iters` timed calls (ms) after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


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


def try_import_python_package(build_dir):
    """The etnp Python package if it can be imported (built in-tree or installed), else (None, reason)."""
    candidates = [os.environ.get("ETNP_PYTHON_DIR", ""), os.path.join(build_dir, "python"),
                  os.path.join(ROOT, "build", "python"), os.path.join(ROOT, "build-py", "python")]
    for path in candidates:
        if path and os.path.isdir(os.path.join(path, "executorch_numpy_runtime")):
            sys.path.insert(0, path)
            break
    last = "not built"
    try:
        return __import__("executorch_numpy_runtime"), "executorch_numpy_runtime"
    except ImportError as e:
        last = str(e)
    return None, last


def python_tiny_call(pkg, pte):
    """A zero-argument callable running the tiny program once through the Python package, or None."""
    a = np.ones(1, dtype=np.float32)
    b = np.ones(1, dtype=np.float32)
    try:
        method = pkg.Runtime.get().load_program(pte).load_method("forward")
        method.execute([a, b])
    except Exception as e:  # an API this script does not know
        log("python package call failed:", e)
        return None
    return lambda: method.execute([a, b])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run, noisy numbers)")
    parser.add_argument("--xnnpack-reference", metavar="DRIVER",
                        help="the driver bench/xnnpack_reference/build.sh makes: adds section 8")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.iters = 2, 5

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
    portable_pte = os.path.join(demo_dir, "mobilenet_v2_portable.pte")
    tiny_pte = os.path.join(demo_dir, "tiny_add.pte")
    input_npy = os.path.join(demo_dir, "mobilenet_v2_input.npy")
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    md = []
    notes = []

    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch = None
        torch_version = None
        notes.append("PyTorch is not installed (apt-get install python3-torch python3-torchvision): the PyTorch "
                     "columns are empty.")

    # ---- 1. Demo network: outputs, then latency ---------------------------------------------------------------
    log("== demo MobileNetV2: outputs")
    x = np.load(input_npy)
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, pte in (("etnp XNNPACK", xnn_pte), ("etnp portable", portable_pte)):
            out_dir = os.path.join(tmp, name.replace(" ", "_"))
            proc = run([etnp, "run", pte, "--input", input_npy, "--output-dir", out_dir, "--print", "none"])
            if proc.returncode == 0:
                outputs[name] = np.load(os.path.join(out_dir, "output_0.npy"))
            else:
                notes.append("`etnp run %s` failed: %s" % (os.path.basename(pte), first_error_line(proc)))
    model = traced = None
    agreement = []
    if torch is not None:
        import mobilenet_torch
        model, source = mobilenet_torch.load_model(demo_dir)
        with torch.inference_mode():
            xt = torch.from_numpy(x)
            ref = model(xt).numpy()
            traced = torch.jit.freeze(torch.jit.trace(model, xt))
            outputs["PyTorch TorchScript"] = traced(xt).numpy()
        top5_ref = list(np.argsort(-ref[0])[:5])
        for name, out in outputs.items():
            diff = float(np.max(np.abs(out - ref)))
            close = bool(np.allclose(out, ref, rtol=1e-3, atol=1e-3))
            top5 = list(np.argsort(-out[0])[:5])
            agreement.append((name, diff, close, top5 == top5_ref, top5))
    else:
        source = None

    log("== demo MobileNetV2: latency")
    demo_rows = []
    for threads in (1, 2):
        row = {"threads": threads}
        r = etnp_bench(etnp, xnn_pte, threads, args.warmup, args.iters, inputs=[input_npy])
        row["etnp"] = r.get("median_ms")
        row["etnp_error"] = r.get("error")
        if model is not None:
            torch.set_num_threads(threads)
            xt = torch.from_numpy(x)
            with torch.inference_mode():
                row["eager"], _ = time_calls(lambda: model(xt), args.warmup, args.iters)
                row["script"], _ = time_calls(lambda: traced(xt), args.warmup, args.iters)
        demo_rows.append(row)

    log("== portable vs delegated")
    portable_rows = []
    for threads in (1, 2):
        r_xnn = etnp_bench(etnp, xnn_pte, threads, args.warmup, args.iters, inputs=[input_npy])
        iters = max(3, args.iters // 3)
        r_port = etnp_bench(etnp, portable_pte, threads, min(args.warmup, 2), iters, inputs=[input_npy])
        portable_rows.append((threads, r_xnn.get("median_ms"), r_port.get("median_ms"), r_port.get("error")))

    # ---- 3. Per-call overhead ----------------------------------------------------------------------------------
    log("== per-call overhead")
    overhead = []
    r = etnp_bench(etnp, tiny_pte, 1, 1000, 20000)
    overhead.append(("etnp, C++ (`etnp bench`, Method::execute incl. setting inputs)",
                     r.get("median_ms"), r.get("min_ms"), r.get("error")))
    pkg, pkg_name = try_import_python_package(build)
    if pkg is not None:
        call = python_tiny_call(pkg, tiny_pte)
        if call is not None:
            med, mn = time_calls(call, 1000, 20000)
            overhead.append(("etnp, Python (`%s`)" % pkg_name, med, mn, None))
        else:
            overhead.append(("etnp, Python (`%s`)" % pkg_name, None, None, "could not find a load/run API to call"))
    else:
        overhead.append(("etnp, Python", None, None, "skipped: the Python package is not built (%s)" % pkg_name))
    if torch is not None:
        torch.set_num_threads(1)
        a = torch.ones(1)
        b = torch.ones(1)
        with torch.inference_mode():
            med, mn = time_calls(lambda: torch.add(a, b), 1000, 20000)
        overhead.append(("PyTorch eager `torch.add` on [1] tensors (reference)", med, mn, None))

    # ---- 4. Cold start -----------------------------------------------------------------------------------------
    log("== cold start")
    cold = []
    repeats = 3 if args.quick else 7
    med, err = wall_times([etnp, "run", xnn_pte, "--fill", "random", "--print", "none"], repeats)
    cold.append(("`etnp run` demo XNNPACK (process start, load, first run)", med, err))
    med, err = wall_times([etnp, "version"], repeats)
    cold.append(("`etnp version` (process start only)", med, err))
    if pkg is not None:
        pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        code = "import sys; sys.path.insert(0, %r); import %s" % (pkg_dir, pkg_name)
        med, err = wall_times([sys.executable, "-c", code], repeats)
        cold.append(("`python3 -c 'import %s'`" % pkg_name, med, err))
        code += ("; import numpy as np; m = %s.Runtime.get().load_program(%r).load_method('forward'); "
                 "m.execute([np.random.rand(1, 3, 224, 224).astype(np.float32)])" % (pkg_name, xnn_pte))
        med, err = wall_times([sys.executable, "-c", code], repeats)
        cold.append(("Python package: import, load, first run (demo XNNPACK)", med, err))
    if torch is not None:
        med, err = wall_times([sys.executable, "-c", "import torch"], repeats)
        cold.append(("`python3 -c 'import torch'`", med, err))
        with tempfile.TemporaryDirectory() as tmp:
            ts_path = os.path.join(tmp, "mobilenet_v2.pt")
            traced.save(ts_path)
            code = ("import torch; m = torch.jit.load(%r); torch.set_num_threads(1); "
                    "m(torch.rand(1, 3, 224, 224))" % ts_path)
            med, err = wall_times([sys.executable, "-c", code], repeats)
            cold.append(("PyTorch: import torch, torch.jit.load, first run (same network)", med, err))

    # ---- 5. Fixture programs vs the official runtime -----------------------------------------------------------
    log("== fixtures vs official figures")
    fixture_rows = []
    reference_rows = []
    profiles = []
    bench_json = os.path.join(args.fixtures, "benchmarks.json")
    official_about = None
    if os.path.exists(bench_json):
        with open(bench_json) as f:
            official = json.load(f)
        official_about = official.get("machine", {})
        # As the official figures were measured: each measurement made `rounds` times, interleaved over all
        # programs (a neighbour's burst then hits one round of each program, not all rounds of one), reporting
        # the median of the medians and the smallest minimum.
        rounds = 1 if args.quick else 3
        measured = {}
        reference = {}  # section 8, measured in the same rounds
        for round_index in range(rounds):
            for e in official["entries"]:
                pte = os.path.join(args.fixtures, e["file"])
                data = [os.path.join(args.fixtures, d) for d in e["data_files"]]
                inputs = [os.path.join(args.fixtures, e["inputs"].replace("<i>", str(i)))
                          for i in range(len(e["input_shapes"]))]
                for threads in (1, 2):
                    off = e["threads_%d" % threads]["median_ms"]
                    iters = args.iters if off < 200 else max(3, args.iters // 3)
                    log("   round %d: %s %d thread(s)" % (round_index + 1, e["id"], threads))
                    r = etnp_bench(etnp, pte, threads, args.warmup if off < 200 else 2, iters, inputs=inputs,
                                   data=data, method=e["method"])
                    measured.setdefault((e["id"], e["method"], e["inputs"], threads), []).append(r)
                    model = XNNPACK_REFERENCE_MODELS.get((e["id"], e["inputs"].split("/")[-2]))
                    if args.xnnpack_reference and model:
                        reference.setdefault((e["id"], e["inputs"], threads), []).append(
                            xnnpack_reference(args.xnnpack_reference, model, threads))
        for e in official["entries"]:
            case = e["inputs"].split("/")[-2]
            for threads in (1, 2):
                runs = measured[(e["id"], e["method"], e["inputs"], threads)]
                ok = [r for r in runs if "error" not in r]
                median = statistics.median(r["median_ms"] for r in ok) if ok else None
                minimum = min(r["min_ms"] for r in ok) if ok else None
                error = None if ok else runs[0]["error"]
                fixture_rows.append((e["id"], case, threads, median, e["threads_%d" % threads]["median_ms"], error,
                                     minimum, e["threads_%d" % threads].get("min_ms")))
                ref_runs = reference.get((e["id"], e["inputs"], threads))
                if ref_runs:
                    ref_ok = [r for r in ref_runs if "error" not in r]
                    reference_rows.append((e["id"], case, threads, median,
                                           statistics.median(r["median_ms"] for r in ref_ok) if ref_ok else None,
                                           e["threads_%d" % threads]["median_ms"],
                                           None if ref_ok else ref_runs[0]["error"],
                                           XNNPACK_REFERENCE_MODELS[(e["id"], case)], minimum,
                                           min(r["min_ms"] for r in ref_ok) if ref_ok else None))
        # ---- 7. Where the time goes: the delegated programs profiled at 1 thread (a run of its own: profiling
        # adds a clock read per node).
        log("== profiles")
        for e in official["entries"]:
            if "xnnpack" not in e["id"] or any(p[0] == e["id"] for p in profiles):
                continue
            pte = os.path.join(args.fixtures, e["file"])
            data = [os.path.join(args.fixtures, d) for d in e["data_files"]]
            inputs = [os.path.join(args.fixtures, e["inputs"].replace("<i>", str(i))) for i in range(len(e["input_shapes"]))]
            r = etnp_bench(etnp, pte, 1, args.warmup, max(5, args.iters // 3), inputs=inputs, data=data,
                           method=e["method"], profile=True)
            profiles.append((e["id"], e["inputs"].split("/")[-2], r))
    else:
        notes.append("%s not found: the fixture comparison is skipped." % bench_json)
    load_after = os.getloadavg()

    # ---- RESULTS.md ----------------------------------------------------------------------------------------------
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = ", ".join(x for x in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16") if x in flags) or "unknown"
    md.append("# etnp benchmark results\n")
    md.append("Generated by `bench/run_benchmarks.py` on %s. All times are medians in milliseconds unless noted; "
              "ratios are etnp / other (below 1 = etnp faster). Benchmarks are reported, never asserted.\n"
              % started.strftime("%Y-%m-%d %H:%M UTC"))
    md.append("Machine: %s (%s), %d logical CPUs, load average %.1f at the start and %.1f at the end "
              "(a shared machine: expect ±20-30%% noise, more when the load exceeds the core count). "
              "PyTorch %s. %d warm-up + %d timed runs per measurement%s.\n"
              % (cpu, isa, os.cpu_count() or 0, load_before[0], load_after[0], torch_version or "absent", args.warmup,
                 args.iters, " (--quick)" if args.quick else ""))
    md.append("## Reproduce\n")
    md.append("```sh\n./scripts/install-deps.sh        # includes python3-torch and python3-torchvision (baseline only)\n"
              "./scripts/build.sh\n/usr/bin/python3 bench/run_benchmarks.py --build-dir build --output bench/RESULTS.md\n"
              "# section 8 also needs the same-machine reference (bench/xnnpack_reference/README.md):\n"
              "#   ... --xnnpack-reference /tmp/xnnpack-reference/xnnpack_reference\n"
              "# single measurements:\nbuild/etnp_demo --output-dir build/demo\n"
              "build/etnp bench build/demo/mobilenet_v2_xnnpack.pte --threads 1 --warmup 5 --iters 30 "
              "--input build/demo/mobilenet_v2_input.npy\n```\n")

    md.append("## 1. Demo MobileNetV2: etnp vs PyTorch (same weights)\n")
    md.append("The network `etnp_demo` writes (torchvision's MobileNetV2, batch norm folded, seeded weights, input "
              "1x3x224x224 float32). etnp runs `mobilenet_v2_xnnpack.pte` (one XNNPACK delegate). PyTorch runs %s; "
              "TorchScript is `torch.jit.freeze(torch.jit.trace(model))`. Inputs are the same array "
              "(`mobilenet_v2_input.npy`).\n" % (source or "nothing (not installed)"))
    if agreement:
        md.append("Output agreement with PyTorch eager (`np.allclose(out, ref, rtol=1e-3, atol=1e-3)`):\n")
        md.append("| runtime | max abs diff | allclose | same top-5 | top-5 classes |\n|---|---|---|---|---|")
        for name, diff, close, same, top5 in agreement:
            md.append("| %s | %.3g | %s | %s | %s |" % (name, diff, "yes" if close else "**no**",
                                                       "yes" if same else "**no**", ", ".join(map(str, top5))))
        md.append("")
    md.append("| threads | etnp (XNNPACK) | PyTorch eager | TorchScript | etnp / eager | etnp / TorchScript |")
    md.append("|---|---|---|---|---|---|")
    for row in demo_rows:
        etnp_cell = fmt(row["etnp"]) if row["etnp"] is not None else "error: " + str(row["etnp_error"])
        md.append("| %d | %s | %s | %s | %s | %s |" % (row["threads"], etnp_cell, fmt(row.get("eager")),
                                                      fmt(row.get("script")), ratio(row["etnp"], row.get("eager")),
                                                      ratio(row["etnp"], row.get("script"))))
    md.append("")

    md.append("## 2. Portable operators vs the XNNPACK delegate (etnp, demo network)\n")
    md.append("`mobilenet_v2_portable.pte` runs the same network with aten::convolution, hardtanh, add, mean and "
              "addmm kernels (fewer timed runs: %d).\n" % max(3, args.iters // 3))
    md.append("| threads | XNNPACK delegate | portable operators | portable / XNNPACK |\n|---|---|---|---|")
    for threads, x_ms, p_ms, err in portable_rows:
        md.append("| %d | %s | %s | %s |" % (threads, fmt(x_ms), fmt(p_ms) if p_ms is not None else "error: %s" % err,
                                            ratio(p_ms, x_ms)))
    md.append("")

    md.append("## 3. Per-call overhead (`tiny_add.pte`: x + y on one-element float tensors)\n")
    md.append("| caller | median µs | min µs | note |\n|---|---|---|---|")
    for name, med, mn, err in overhead:
        md.append("| %s | %s | %s | %s |" % (name, "%.2f" % (med * 1e3) if med is not None else "n/a",
                                             "%.2f" % (mn * 1e3) if mn is not None else "n/a", err or ""))
    md.append("")

    md.append("## 4. Cold start (wall time of a fresh process, median of %d; files in the page cache)\n" % repeats)
    md.append("| what | ms |\n|---|---|")
    for name, med, err in cold:
        md.append("| %s | %s |" % (name, fmt(med) if med is not None else "error: %s" % err))
    md.append("")

    md.append("## 5. Fixture programs: etnp vs the official ExecuTorch runtime's figures\n")
    if official_about:
        md.append("Official figures: `shared/fixtures/benchmarks.json` (ExecuTorch 1.4.1, %s, %s; %s cores, %s). "
                  "Same inputs (the stored case), same warm-up/timed counts, and measured as they were: %d rounds "
                  "interleaved over all programs, the median of the round medians and the smallest minimum. The "
                  "machines differ (compare the instruction sets above), so the ratio is indicative.\n"
                  % (official_about.get("cpu_model", "?"), official_about.get("cpu", "?"),
                     official_about.get("cores", "?"), official_about.get("note", ""), 1 if args.quick else 3))
    md.append("| program | case | threads | etnp median | official median | etnp / official (target <= 0.95) | "
              "etnp min | official min |")
    md.append("|---|---|---|---|---|---|---|---|")
    for pid, case, threads, mine, off, err, mine_min, off_min in fixture_rows:
        md.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (pid, case, threads,
                                                                 fmt(mine) if mine is not None else "error: %s" % err,
                                                                 fmt(off), ratio(mine, off), fmt(mine_min), fmt(off_min)))
    met = [row for row in fixture_rows if row[3] is not None and row[3] <= 0.95 * row[4]]
    if fixture_rows:
        md.append("\n%d of %d rows meet the 0.95 target: %s.\n"
                  % (len(met), len(fixture_rows),
                     ", ".join("%s (%s, %d thread%s)" % (row[0].split("/")[-1], row[1], row[2], "s" * (row[2] > 1))
                               for row in met) or "none"))
    md.append("")

    # Targets that compare rows of section 5 with each other: our own kernels against our XNNPACK twins, and the
    # portable decoders against the official runtime's figures.
    by_key = {(row[0], row[1], row[2]): row[3] for row in fixture_rows}
    official_by_key = {(row[0], row[1], row[2]): row[4] for row in fixture_rows}
    twins = [("exported/mobilenet_v2_portable", "exported/mobilenet_v2_xnnpack_fp32"),
             ("exported/transformer_encoder_portable", "exported/transformer_encoder_xnnpack_fp32")]
    speedups = ["exported/tiny_llama_kv_portable", "exported/lstm2_portable"]
    if fixture_rows:
        md.append("## 6. Own kernels: portable programs against their XNNPACK-delegated twins and the official runtime\n")
        md.append("From the rows of section 5 (same run). Targets: a portable program within 2x of its delegated "
                  "twin on etnp; the portable decoders at least 10x faster than the official runtime.\n")
        md.append("| program | threads | etnp portable | etnp XNNPACK twin | portable / twin (target <= 2) |")
        md.append("|---|---|---|---|---|")
        for portable, twin in twins:
            for threads in (1, 2):
                p_ms = next((v for (pid, _, t), v in by_key.items() if pid == portable and t == threads), None)
                t_ms = next((v for (pid, _, t), v in by_key.items() if pid == twin and t == threads), None)
                md.append("| %s | %d | %s | %s | %s |" % (portable, threads, fmt(p_ms), fmt(t_ms), ratio(p_ms, t_ms)))
        md.append("")
        md.append("| program | threads | etnp | official | official / etnp (target >= 10) |\n|---|---|---|---|---|")
        for pid_target in speedups:
            for threads in (1, 2):
                keys = [k for k in by_key if k[0] == pid_target and k[2] == threads]
                for key in keys:
                    mine, off = by_key[key], official_by_key[key]
                    md.append("| %s (%s) | %d | %s | %s | %s |" % (key[0], key[1], threads, fmt(mine), fmt(off),
                                                                  ratio(off, mine)))
        md.append("")
    if profiles:
        md.append("## 7. Where the time goes (delegated programs, 1 thread, `etnp bench --profile`)\n")
        md.append("Per program: the time per run of each instruction kind (delegate calls and the portable glue "
                  "between them), then inside the delegate calls the time per node kind and what ran it (an "
                  "XNNPACK 2022 operator or the delegate's own kernel). Shares are of the whole run; profiling "
                  "adds a clock read per node, so the totals run a little above section 5.\n")
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
    if reference_rows:
        md.append("## 8. Same machine: the current XNNPACK on the same networks\n")
        md.append("The official figures of section 5 come from another CPU (%s) than this one (%s). For the "
                  "programs that miss the target there, `%s` runs the current XNNPACK (the library the official "
                  "runtime hands them to; built from source by bench/xnnpack_reference/build.sh) on the same "
                  "networks here, in the same rounds as section 5: XNNPACK's own MobileNetV2 definitions (fp32 and "
                  "qs8; NHWC input, so without the two layout changes the exported programs make) and the small "
                  "programs rebuilt node for node with random weights. It times the XNNPACK part alone, a lower "
                  "bound for the official runtime here. The last column is how much faster the official figures' "
                  "machine ran the same library.\n"
                  % (official_about.get("cpu", "?") if official_about else "?", isa,
                     os.path.basename(args.xnnpack_reference)))
        md.append("| program | case | threads | XNNPACK network | etnp median | XNNPACK here, median | "
                  "etnp / XNNPACK here | etnp min | XNNPACK here, min | etnp / XNNPACK here, mins | "
                  "official median (other CPU) | XNNPACK here / official |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for pid, case, threads, mine, ref, off, err, model, mine_min, ref_min in reference_rows:
            md.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                      % (pid, case, threads, model, fmt(mine), fmt(ref) if ref is not None else "error: %s" % err,
                         ratio(mine, ref), fmt(mine_min), fmt(ref_min), ratio(mine_min, ref_min), fmt(off),
                         ratio(ref, off)))
        md.append("")
    if notes:
        md.append("## Notes\n")
        for n in notes:
            md.append("- " + n)
        md.append("")
    with open(args.output, "w") as f:
        f.write("\n".join(md))
    log("wrote", args.output)


if __name__ == "__main__":
    main()
