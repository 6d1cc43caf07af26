#!/usr/bin/env python3
"""Scale-out throughput: inferences per second of one program, run by one worker process with one thread, by two
worker processes with one thread each (multiprocessing, Dask, Ray), and by one process with two threads, in the
same interleaved rounds; written as the section "## Scale-out" of bench/RESULTS.md.

    ETNP_BUILD_DIR=build-venv ./scripts/build-python.sh "$VENV/bin/python"      # a Python with ray and dask
    PYTHONPATH=build-venv/python "$VENV/bin/python" bench/scale_out.py [--model PTE] [--items N] [--rounds R]
                                 [--engines mp,dask,ray] [--output bench/RESULTS.md]

What it times, each configuration once per round, the order rotating from round to round:
  - in-process, 1 and 2 threads: this process runs the items one after another, the program loaded with
    backend_options={"XnnpackBackend": {"num_threads": T}} (and the shared pool set to T);
  - multiprocessing (the engine-free baseline): a spawn Pool of 1 or 2 processes, `pool.map` over the items;
  - Dask: a LocalCluster(n_workers=2, threads_per_worker=1, processes=True); `client.map` over the items, on
    one worker (`workers=[...]`) or both;
  - Ray: ray.init(num_cpus=2) and two actors (num_cpus=1); Ray's `ActorPool.map` over one or both.
Every worker loads the program once, 1 thread, before the timed rounds (an untimed warm-up round), and is
handed the `Method` (pickled by path, unpickled to the worker's cached program) with each item, as
docs/python.md's recipes do. A round's throughput is items / wall time of the whole map, inputs sent and
outputs returned included; a cell is the median of the rounds. Every worker's outputs are checked against the
in-process ones. The load average is recorded before and after, to say how quiet the machine was.
"""

import argparse
import datetime
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import llm_bench  # noqa: E402  (RESULTS.md sections; load average and CPU model)

DEFAULT_MODEL = "exported/mobilenet_v2_xnnpack_fp32.pte"
SECTION = "## Scale-out"


def fixtures_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("ETNP_FIXTURES", ROOT.parent / "shared" / "fixtures"))


def one_thread_options(threads: int) -> dict:
    return {"XnnpackBackend": {"num_threads": threads}}


def set_shared_pool(threads: int) -> None:
    from executorch_numpy_runtime import Runtime

    registry = Runtime.get().backend_registry
    if registry.is_available("XnnpackBackend"):
        registry.set_option("XnnpackBackend", {"num_threads": threads})


def run_item(method, x):
    """A worker's task: one inference. `method` unpickles to the program this process loaded first."""
    return method([x])[0]


def mp_run_item(args):
    return run_item(*args)


def worker_setup() -> int:
    set_shared_pool(1)
    return os.getpid()


class Actor:
    """A Ray actor's state: the method, unpickled once in the actor's process."""

    def __init__(self, method):
        set_shared_pool(1)
        self.method = method

    def run(self, x):
        return run_item(self.method, x)


def busy_note(load_before: str, round_loads: list) -> list:
    """A warning paragraph when other work had the cores: then two workers cannot find a second free core."""
    cpus = os.cpu_count() or 1
    busiest = max([float(load_before.split(",")[0])] + round_loads)
    if busiest < cpus:
        return []
    return [f"The machine was busy (1-minute load up to {busiest:.1f} on {cpus} CPUs): every "
            "configuration competed for the cores with that work, so the ratios show what a second worker or thread "
            "gains on a shared machine, not on idle cores.\n"]


def scaling(rates: dict) -> list:
    """'engine: x.xx' for each pair of configurations that differ only in 1 or 2 workers (or threads)."""
    pairs = [("in-process, 2 threads over 1 thread", "in-process, 2 threads", "in-process, 1 thread"),
             ("multiprocessing, 2 processes over 1", "multiprocessing, 2 processes", "multiprocessing, 1 process"),
             ("Dask, 2 workers over 1", "Dask, 2 workers", "Dask, 1 worker"),
             ("Ray, 2 actors over 1", "Ray, 2 actors", "Ray, 1 actor"),
             ("2 processes (multiprocessing) over 1 process with 2 threads", "multiprocessing, 2 processes",
              "in-process, 2 threads")]
    return [f"{label}: {statistics.median(a / b for a, b in zip(rates[two], rates[one])):.2f}"
            for label, two, one in pairs if two in rates and one in rates]


def engine_versions() -> str:
    versions = [f"{name} {sys.modules[name].__version__}" for name in ("dask", "distributed", "ray") if name in sys.modules]
    return ", " + ", ".join(versions) if versions else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help=f"a .pte with one tensor input (default: fixtures' {DEFAULT_MODEL})")
    parser.add_argument("--items", type=int, default=32, help="inferences a round and configuration (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--engines", default="mp,dask,ray", help="comma-separated: mp, dask, ray (default all)")
    parser.add_argument("--output", default=None, help="write the section into this RESULTS.md")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    model = pathlib.Path(args.model) if args.model else fixtures_root() / DEFAULT_MODEL
    model = model.resolve()

    import executorch_numpy_runtime as et
    from executorch_numpy_runtime import Runtime

    started = time.time()
    load_before = ", ".join(llm_bench.load_average())
    forward = {t: Runtime.get().load_program(str(model), backend_options=one_thread_options(t)).load_method("forward")
               for t in (1, 2)}
    info = forward[1].metadata.input_tensor_meta(0)
    rng = np.random.default_rng(0)
    items = [rng.standard_normal(info.sizes()).astype(info.numpy_dtype()) for _ in range(args.items)]
    set_shared_pool(1)
    reference = [run_item(forward[1], x) for x in items]

    configs = {}  # name -> (workers, threads, run(): list of outputs)

    def in_process(threads):
        def run():
            set_shared_pool(threads)
            return [run_item(forward[threads], x) for x in items]

        return run

    configs["in-process, 1 thread"] = (1, 1, in_process(1))
    configs["in-process, 2 threads"] = (1, 2, in_process(2))

    closers = []
    try:
        if "mp" in engines:
            import multiprocessing

            context = multiprocessing.get_context("spawn")
            for n in (1, 2):
                pool = context.Pool(n, initializer=worker_setup)
                closers.append(pool.terminate)
                configs[f"multiprocessing, {n} process{'es' if n > 1 else ''}"] = (
                    n, 1, lambda pool=pool: pool.map(mp_run_item, [(forward[1], x) for x in items], chunksize=1))
        if "dask" in engines:
            from dask.distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
            closers += [cluster.close, client.close]
            client.wait_for_workers(2)
            client.run(worker_setup)
            addresses = sorted(client.scheduler_info()["workers"])
            for n in (1, 2):
                configs[f"Dask, {n} worker{'s' if n > 1 else ''}"] = (
                    n, 1, lambda n=n: client.gather(client.map(run_item, [forward[1]] * len(items), items,
                                                               workers=addresses[:n], pure=False)))
        if "ray" in engines:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            import ray
            from ray.util import ActorPool

            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
            closers.append(ray.shutdown)
            actors = [ray.remote(num_cpus=1)(Actor).remote(forward[1]) for _ in range(2)]
            for n in (1, 2):
                configs[f"Ray, {n} actor{'s' if n > 1 else ''}"] = (
                    n, 1, lambda n=n: list(ActorPool(actors[:n]).map(lambda a, x: a.run.remote(x), items)))

        names = list(configs)
        for name in names:  # warm-up: every worker loads the program
            outputs = configs[name][2]()
            for got, want in zip(outputs, reference):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        rates = {name: [] for name in names}
        round_loads = []
        for r in range(args.rounds):
            round_loads.append(os.getloadavg()[0])
            for name in names[r % len(names):] + names[: r % len(names)]:
                start = time.perf_counter()
                configs[name][2]()
                rates[name].append(len(items) / (time.perf_counter() - start))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n}: {rates[n][-1]:.1f}/s" for n in names),
                  flush=True)
    finally:
        for close in reversed(closers):
            try:
                close()
            except Exception as error:  # noqa: BLE001 - report and go on closing the others
                print(f"closing: {error}", file=sys.stderr)

    load_after = ", ".join(llm_bench.load_average())
    base = statistics.median(rates["in-process, 1 thread"])
    rows = []
    for name in names:
        workers, threads, _ = configs[name]
        median = statistics.median(rates[name])
        rows.append(f"| {name} | {workers} | {threads} | {median:.1f} | {min(rates[name]):.1f} - "
                    f"{max(rates[name]):.1f} | {median / base:.2f} |")
    command = ("PYTHONPATH=build-venv/python $VENV/bin/python bench/scale_out.py "
               + " ".join(a for a in sys.argv[1:]))
    minutes = (time.time() - started) / 60
    md = [
        f"{SECTION}\n",
        f"Generated by `bench/scale_out.py` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC in "
        f"{minutes:.1f} minutes: throughput of `{model.name}` (input {list(info.sizes())} "
        f"{info.numpy_dtype()}), {args.items} inferences a round and configuration, median of {args.rounds} "
        "interleaved rounds (every configuration once a round, the order rotating), inputs sent and outputs "
        "returned included. Each worker process loads the program once (1 thread) before the timed rounds and "
        "gets the pickled `Method` with each item. Speed-up: over in-process with 1 thread. Benchmarks are "
        "reported, never asserted.\n",
        f"Machine: {llm_bench.cpu_model()}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}, numpy "
        f"{np.__version__}, etnp {et.__version__}{engine_versions()}. Load average (1, 5, 15 min) at the start: {load_before}; at the "
        f"end: {load_after}; 1-minute load at each round's start: "
        + ", ".join(f"{v:.1f}" for v in round_loads) + ".\n",
        *busy_note(load_before, round_loads),
        "```sh\n" + command.rstrip() + "\n```\n",
        "| configuration | processes | threads each | inferences/s (median) | range over rounds | speed-up |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "Scaling from one to two (median of the rounds' ratios, each round's two runs seconds apart): "
        + "; ".join(scaling(rates)) + ".",
        "",
    ]
    section = "\n".join(md) + "\n"
    print(section)
    if args.output:
        sys.path.insert(0, str(HERE))

        llm_bench.replace_section(pathlib.Path(args.output), section, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
