"""Prefill of a language-model program on etnp and on the official runtime, in one process, call after call.

llm_bench.py times each runtime in a process of its own, seconds apart; on these shared machines the speed
drifts by 20-40% within a minute, which moves a 5% difference either way. Here both runtimes live in the dev
venv's Python (etnp's package built for it) and run the same prefill alternately, the order swapping every
pair, so that each pair meets the same machine. It prints, per program, both runtimes' median and fastest
prefill and the median of the pairs' speed ratios (etnp over official, above 1 = etnp faster).

    VENV=$(./scripts/dev-venv.sh)
    ETNP_BUILD_DIR=build-venv ./scripts/build-python.sh "$VENV/bin/python"
    "$VENV/bin/python" bench/llm_prefill_pairs.py --python-dir build-venv/python \\
        --prompt ~/.cache/etnp/live-exports/llm-bench/smollm2_135m_L8.prompt.json \\
        ~/.cache/etnp/live-exports/llm-bench/smollm2_135m_L8__*/program.pte

At --threads 1 (the default) the process is pinned to CPU 1: the official runtime's _unsafe_reset_threadpool(1)
alone leaves it on both cores. Benchmarks are reported, never asserted.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="+", type=pathlib.Path)
    parser.add_argument("--python-dir", required=True, type=pathlib.Path,
                        help="the folder holding executorch_numpy_runtime built for this Python (build-venv/python)")
    parser.add_argument("--prompt", required=True, type=pathlib.Path,
                        help="a JSON file with the prompt's token ids under 'ids' (llm_bench.py writes one)")
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.threads == 1 and hasattr(os, "sched_setaffinity") and 1 in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {1})

    sys.path.insert(0, str(args.python_dir.resolve()))
    import numpy as np
    import torch
    import executorch_numpy_runtime as etnp
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (llama::* operators)
    import executorch.kernels.quantized  # noqa: F401  (quantized embedding operators)
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    _unsafe_reset_threadpool(args.threads)
    torch.set_num_threads(1)
    etnp.Runtime.get().backend_registry.set_option("XnnpackBackend", {"num_threads": args.threads})
    ids = json.loads(args.prompt.read_text())["ids"]
    tokens, pos = np.array([ids], dtype=np.int64), np.array([0], dtype=np.int64)
    tokens_t, pos_t = torch.from_numpy(tokens), torch.from_numpy(pos)

    print("| program | prefill tokens | official median, fastest (ms) | etnp median, fastest (ms) | "
          "etnp / official speed, median of %d pairs |" % args.pairs)
    print("|---|---|---|---|---|")
    for path in args.programs:
        official = Runtime.get().load_program(str(path)).load_method("forward")
        mine = etnp.Runtime.get().load_program(str(path)).load_method("forward")

        def run_official():
            t = time.perf_counter()
            official.execute([tokens_t, pos_t])
            return time.perf_counter() - t

        def run_etnp():
            t = time.perf_counter()
            mine.execute([tokens, pos])
            return time.perf_counter() - t

        for _ in range(2):  # warm-up: first-call allocations, caches
            run_official()
            run_etnp()
        times_official, times_etnp, ratios = [], [], []
        for i in range(args.pairs):
            if i % 2:
                a, b = run_official(), run_etnp()
            else:
                b, a = run_etnp(), run_official()
            times_official.append(a)
            times_etnp.append(b)
            ratios.append(a / b)
        print("| %s | %d | %.1f, %.1f | %.1f, %.1f | %.3f |" % (
            path.parent.name, len(ids), statistics.median(times_official) * 1e3, min(times_official) * 1e3,
            statistics.median(times_etnp) * 1e3, min(times_etnp) * 1e3, statistics.median(ratios)))
        del official, mine


if __name__ == "__main__":
    main()
