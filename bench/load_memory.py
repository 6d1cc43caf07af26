#!/usr/bin/env python3
"""Load time and memory: etnp and the official runtime on the programs of bench/run_benchmarks.py (one method
each, its first case's inputs), 1 thread, and the load time again with 2 threads; written as the section
"## Load time and memory" of bench/RESULTS.md.

Each measurement is a fresh process (bench/oracle_timing.py --load-memory): etnp's in /usr/bin/python3 with the
Python package, the official runtime's in the dev venv (with its LLM custom operators and quantized kernels). It
first loads and runs etnp_demo's one-element addition, portable and in an XNNPACK delegate, so that what a
runtime sets up once per process (its code's pages, kernel tables, thread pool, the delegate library) counts for
neither. After the imports, that and the inputs it times
load_program + load_method, then runs the method once, and reports the resident memory (VmRSS) the load and the
run added and the peak (VmHWM, reset after the imports) above where it started. Rounds are interleaved (every
program and runtime once per round, the runtimes' order alternating); the load time is the median of the
rounds, the memory figures (the same every round, to a page or two) too. The 2-thread measurements (each runtime's
pool of two threads, set before the warm-up: etnp packs large weights on it) give the second load column.

    /usr/bin/python3 bench/load_memory.py --build-dir build [--rounds 3] [--only SUBSTRING] [--output bench/RESULTS.md]
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import llm_bench  # noqa: E402  (read/replace a section of RESULTS.md; load average and CPU model)
import run_benchmarks as rb  # noqa: E402  (the rows, the dev venv, the Python package)

HEADING = "## Load time and memory"


def measure(python, runtime, row, env, warmup, threads):
    request = {"program": row["program"], "data": row["data"], "method": row["method"], "inputs": row["inputs"],
               "warmup": warmup, "threads": threads}
    proc = subprocess.run([python, os.path.join(HERE, "oracle_timing.py"), "--runtime", runtime, "--load-memory",
                           json.dumps(request)], capture_output=True, text=True, timeout=900, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": "exit %d: %s" % (proc.returncode, rb.first_error_line(proc))}
    return json.loads(lines[-1])


def aggregate(runs):
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0] if runs else {"error": "not measured"}
    return {key: statistics.median(r[key] for r in ok) for key in ("load_ms", "load_mib", "run_mib", "peak_mib")}


def threads_label(n):
    return "1 thread" if n == 1 else "%d threads" % n


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if b > 0 else "—"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))
    parser.add_argument("--live-cache", help="live-export cache root (default $ETNP_LIVE_CACHE or "
                                             "~/.cache/etnp/live-exports)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, action="append", default=[],
                        help="thread counts to time the load with (default: 1 and 2); memory is the first's")
    parser.add_argument("--only", action="append", default=[], help="programs whose id contains SUBSTRING")
    parser.add_argument("--output", help="a RESULTS.md whose section \"%s\" to write" % HEADING)
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    demo_dir = os.path.join(build, "demo")
    proc = rb.run([os.path.join(build, "etnp_demo"), "--output-dir", demo_dir])
    if proc.returncode != 0:
        sys.exit("etnp_demo failed: " + rb.first_error_line(proc))
    pkg, why = rb.try_import_python_package(build)
    if pkg is None:
        sys.exit("the etnp Python package is not built: %s" % why)
    etnp_env = dict(os.environ, ETNP_PYTHON_DIR=os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__))))
    venv_python, why = rb.dev_venv_python()
    if venv_python is None:
        sys.exit("no dev venv: %s" % why)

    notes = []
    options = argparse.Namespace(only=args.only, quick=False)
    rows, _ = rb.make_rows(options, demo_dir, args.fixtures, rb.live_cache_root(args.live_cache), notes)
    programs, seen = [], set()
    for row in rows:  # one row per program and method: the first case's inputs
        key = (row["program"], tuple(row["data"]), row["method"])
        if key not in seen:
            seen.add(key)
            programs.append(row)
    # The warm-up of every measurement: etnp_demo's one-element addition, portable and in an XNNPACK delegate,
    # loaded and run before the timed load.
    ones = os.path.join(demo_dir, "one_element.npy")
    np.save(ones, np.ones(1, dtype=np.float32))
    warmup = [{"program": os.path.join(demo_dir, name), "inputs": [ones, ones]}
              for name in ("tiny_add.pte", "tiny_add_xnnpack.pte")]
    thread_counts = args.threads or [1, 2]
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.time()
    loads = []
    runs = {}
    for rnd in range(args.rounds):
        loads.append(os.getloadavg()[0])
        order = [("etnp", sys.executable, etnp_env), ("official", venv_python, None)]
        if rnd % 2:
            order.reverse()
        for row in programs:
            rb.log("round %d/%d: %s %s" % (rnd + 1, args.rounds, row["id"], row["method"]))
            for threads in thread_counts:
                for name, python, env in order:
                    runs.setdefault((row["id"], row["method"], name, threads), []).append(
                        measure(python, name, row, env, warmup, threads))
    loads.append(os.getloadavg()[0])
    cells = {key: aggregate(value) for key, value in runs.items()}

    cpu, _ = rb.cpu_description()
    md = [HEADING + "\n"]
    md.append("Generated by `bench/load_memory.py` on %s in %.1f minutes: each program of section 1 (one method, its "
              "first case's inputs), loaded and run once with %s, in a fresh process per measurement that first "
              "loads and runs a one-element addition, portable and in an XNNPACK delegate (so that what a runtime "
              "sets up once per process, its code's pages, kernel tables, thread pool and delegate library, counts "
              "for neither), %d interleaved rounds (medians). **load** is `load_program` + `load_method` in ms; **MiB** are the "
              "resident memory (VmRSS) the load added, then the load and the first run, and the peak (VmHWM, reset "
              "after the imports) above where the process stood after its imports and inputs (torch, numpy and the "
              "arrays count for neither runtime); the memory figures are the %s measurement's. etnp: its Python "
              "package; official: ExecuTorch's pybindings. Ratios are etnp / official (below 1 = etnp less). "
              "Benchmarks are reported, never asserted.\n"
              % (started.strftime("%Y-%m-%d %H:%M UTC"), (time.time() - t_start) / 60,
                 " and ".join(threads_label(t) for t in thread_counts), args.rounds, threads_label(thread_counts[0])))
    md.append("Machine: %s, %d logical CPUs; 1-minute load at each round's start and at the end: %s.\n"
              % (cpu, os.cpu_count() or 0, ", ".join("%.1f" % x for x in loads)))
    md.append("```sh\n/usr/bin/python3 bench/load_memory.py --build-dir build --output bench/RESULTS.md\n```\n")
    load_heads = "".join("load ms%s etnp | official | ratio | " % ("" if i == 0 else ", " + threads_label(t))
                         for i, t in enumerate(thread_counts))
    md.append("| program | method | %sMiB after load etnp | official | ratio | MiB after run etnp | official | "
              "ratio | peak MiB etnp | official | ratio |" % load_heads)
    md.append("|---|---|" + "---|---|---|" * (len(thread_counts) + 3))
    errors = []
    summary = {("load_ms", t): [] for t in thread_counts}
    summary.update({("run_mib", thread_counts[0]): [], ("peak_mib", thread_counts[0]): []})
    for row in programs:
        cols = []
        columns = [("load_ms", t) for t in thread_counts] + [(k, thread_counts[0])
                                                             for k in ("load_mib", "run_mib", "peak_mib")]
        for t in thread_counts:
            for who in ("etnp", "official"):
                c = cells[row["id"], row["method"], who, t]
                if "error" in c:
                    errors.append("%s (%s), %s, %s: %s" % (row["id"], row["method"], who, threads_label(t),
                                                            rb.plain(c["error"])))
        for key, t in columns:
            e = cells[row["id"], row["method"], "etnp", t]
            o = cells[row["id"], row["method"], "official", t]
            ev = "%.1f" % e[key] if key in e else "error"
            ov = "%.1f" % o[key] if key in o else "error"
            ratio = fmt_ratio(e[key], o[key]) if key in e and key in o else "—"
            cols += [ev, ov, ratio]
            if (key, t) in summary and key in e and key in o and e[key] > 0 and o[key] > 0:
                summary[key, t].append(e[key] <= o[key])
        md.append("| %s | %s | %s |" % (row["id"], row["method"], " | ".join(cols)))
    md.append("")
    counts = ["load time with %s %d of %d" % (threads_label(t), sum(summary["load_ms", t]),
                                              len(summary["load_ms", t])) for t in thread_counts]
    first = thread_counts[0]
    counts += ["memory after the run %d of %d" % (sum(summary["run_mib", first]), len(summary["run_mib", first])),
               "peak %d of %d" % (sum(summary["peak_mib", first]), len(summary["peak_mib", first]))]
    md.append("Rows where etnp is at or under the official runtime: %s.\n" % ", ".join(counts))
    if errors:
        md.append("Cells without a figure: " + "; ".join(errors) + "\n")
    if notes:
        md.append("Notes: " + " ".join(notes) + "\n")
    section = "\n".join(md)
    if args.output:
        llm_bench.replace_section(pathlib.Path(args.output), section, HEADING)
        rb.log("wrote", args.output)
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
