#!/usr/bin/env python3
"""Memory of loading one XNNPACK-delegated program N times, with XnnpackBackend's weight_cache_enabled off and on.

Each measurement is a fresh process (peak RSS is per process): it loads the program N times (a program and its
method each time, all kept alive) and runs each method once on zero inputs; its peak RSS and load time are
printed as the median of --repeats processes per mode, the modes interleaved. With the cache on, the packed
weights of the delegate's own kernels are held once instead of N times; what XNNPACK's operators pack is not
shared (src/backends/xnnpack/README.md).

  PYTHONPATH=build/python python3 bench/weight_cache_memory.py MODEL.pte [--copies 2] [--repeats 3]
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def child(path: str, copies: int, method_name: str, cache: bool) -> None:
    import numpy as np
    from executorch_numpy_runtime import Runtime

    runtime = Runtime.get()
    options = {"XnnpackBackend": {"weight_cache_enabled": cache}}
    kept = []
    start = time.perf_counter()
    for _ in range(copies):
        program = runtime.load_program(path, backend_options=options)
        kept.append((program, program.load_method(method_name)))
    load_ms = (time.perf_counter() - start) * 1000
    for _, method in kept:
        meta = method.metadata
        inputs = [np.zeros(meta.input_tensor_meta(i).sizes(), dtype=np.float32) for i in range(meta.num_inputs())]
        method.execute(inputs)
    print(json.dumps({"load_ms": load_ms, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--method", default="forward")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.copies, args.method, args.child == "on")
        return 0
    runs = {"off": [], "on": []}
    for _ in range(args.repeats):
        for mode in runs:
            out = subprocess.run([sys.executable, __file__, args.model, "--copies", str(args.copies), "--method",
                                  args.method, "--child", mode], check=True, capture_output=True, text=True).stdout
            runs[mode].append(json.loads(out))
    for mode, results in runs.items():
        rss = statistics.median(r["peak_rss_mib"] for r in results)
        load = statistics.median(r["load_ms"] for r in results)
        print(f"weight_cache_enabled={mode:3}: {args.copies} copies, peak RSS {rss:.1f} MiB, load {load:.0f} ms "
              f"(medians of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
