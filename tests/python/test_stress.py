"""Concurrency stress (issue 18 item 5), from Python: threads load and drop programs, run their methods with the
GIL released, change backend options and the thread count, and write ETDumps, all at once; every output is
checked against the result computed before the threads start, and every recorded call is found in exactly one
written ETDump. scripts/test.sh runs this file again against the extension built with ThreadSanitizer.

Short by default (about a second per test); ETNP_STRESS_SECONDS=N runs each test for N seconds."""

import os
import random
import threading
import time

import numpy as np
import pytest

from conftest import python_thread_progress
from executorch_numpy_runtime import InvalidInputError, parse_etdump, runtime_info

THREADS = int(os.environ.get("ETNP_STRESS_THREADS", "8"))
SECONDS = float(os.environ.get("ETNP_STRESS_SECONDS", "1.0"))


class Subject:
    """A program, how to load it, and cases whose outputs are known before the threads start."""

    def __init__(self, name, path, cases, data_path=None, backend_options=None):
        self.name, self.path, self.cases = name, path, cases
        self.data_path, self.backend_options = data_path, backend_options
        self.bytes = path.read_bytes()

    def load(self, runtime, rng, enable_etdump=False):
        source = self.bytes if rng.random() < 0.5 else self.path
        return runtime.load_program(source, data_path=self.data_path, backend_options=self.backend_options,
                                    enable_etdump=enable_etdump)

    def check(self, outputs, case):
        inputs, expected, atol, rtol = case
        assert len(outputs) == len(expected), self.name
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=self.name)


def arith_subject(programs, rng):
    cases = []
    for _ in range(4):
        x = rng.integers(-50, 50, (2, 3)).astype(np.float32)
        y = rng.integers(-50, 50, (2, 3)).astype(np.float32)
        cases.append(([x, y], [x + y, x * y], 0.0, 0.0))
    subject = Subject("arith", programs["arith"], cases)
    subject.method = "add_mul"
    return subject


def fixture_subject(fixtures, manifest, entry_id, **load):
    entry = next((e for e in manifest if e["id"] == entry_id), None)
    if entry is None or not (fixtures / entry["file"]).exists():
        return None
    cases = []
    for case in entry["cases"]:
        if case["method"] != "forward" or any("npy" not in i for i in case["inputs"]):
            continue
        inputs = [np.load(fixtures / i["npy"]) for i in case["inputs"]]
        outputs = [np.load(fixtures / o["npy"]) for o in case["outputs"]]
        cases.append((inputs, outputs, case["atol"], case["rtol"]))
    data = [str(fixtures / d) for d in entry["data_files"]] or None
    subject = Subject(entry_id, fixtures / entry["file"], cases, data_path=data, **load)
    subject.method = "forward"
    return subject


@pytest.fixture(scope="module")
def subjects(request, runtime):
    rng = np.random.default_rng(7)
    found = []
    try:
        found.append(arith_subject(request.getfixturevalue("programs"), rng))
    except pytest.skip.Exception:
        pass
    try:
        fixtures, manifest = request.getfixturevalue("fixtures"), request.getfixturevalue("manifest")
    except pytest.skip.Exception:
        fixtures = None
    if fixtures is not None:
        xnnpack = runtime.backend_registry.is_available("XnnpackBackend")
        for entry_id, load in [("upstream/linear", {}),  # weights in a .ptd
                               ("upstream/softmax", {}),  # splits across the thread pool
                               ("nprt/add", {}),  # XNNPACK
                               ("exported/smallcnn_dynbatch_xnnpack_fp32", {}),  # XNNPACK, three batch sizes
                               ("exported/smallcnn_dynbatch_xnnpack_fp32",
                                {"backend_options": {"XnnpackBackend": {"num_threads": 2}}})]:
            if "xnnpack" in entry_id.lower() or entry_id == "nprt/add":
                if not xnnpack:
                    continue
            subject = fixture_subject(fixtures, manifest, entry_id, **load)
            if subject is not None:
                found.append(subject)
    if not found:
        pytest.skip("neither flatc (for the test programs) nor the shared fixtures are available")
    # What the threads are held to: each case, once, on this thread.
    for subject in found:
        method = subject.load(runtime, random.Random(0)).load_method(subject.method)
        for case in subject.cases:
            subject.check(method(case[0]), case)
    return found


@pytest.fixture
def restore_settings(runtime):
    registry = runtime.backend_registry
    has_xnnpack = registry.is_available("XnnpackBackend")
    before = registry.get_option("XnnpackBackend", {"num_threads": 0, "weight_cache_enabled": False}) \
        if has_xnnpack else None
    yield
    if before is not None:
        registry.set_option("XnnpackBackend", before)


def run_threads(work, count=THREADS):
    """Runs work(index, rng, deadline) on `count` threads; re-raises the first failure."""
    errors = []
    deadline = time.monotonic() + SECONDS
    seed = int(os.environ.get("ETNP_STRESS_SEED", str(int(time.time()))))

    def body(index):
        try:
            work(index, random.Random(seed * 1000 + index), deadline)
        except BaseException as e:  # noqa: BLE001 - reported below, with the seed
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"{len(errors)} thread(s) failed (seed {seed}): {errors[0]!r}") from errors[0]


def test_stress_load_unload_execute_options(runtime, subjects, restore_settings):
    """Shared programs replaced (the old ones unloaded when their last user lets go) and private ones loaded and
    dropped, while threads run every program's method, set the XNNPACK thread count and weight cache and resize
    the pool: every output is the expected one."""
    registry = runtime.backend_registry
    has_xnnpack = registry.is_available("XnnpackBackend")
    slots = {s.name: s.load(runtime, random.Random(1)) for s in subjects}
    by_name = {s.name: s for s in subjects}
    counts = {"execute": 0, "replace": 0, "private": 0, "option": 0}
    lock = threading.Lock()

    def work(index, rng, deadline):
        done = dict.fromkeys(counts, 0)
        step = 0
        while step < len(counts) or time.monotonic() < deadline:
            name = rng.choice(list(by_name))
            subject = by_name[name]
            kind = list(counts)[step % len(counts)] if step < len(counts) else \
                rng.choices(list(counts), weights=[10, 2, 2, 2])[0]
            step += 1
            if kind == "execute":
                program = slots[name]  # one reference, taken atomically; the slot may be replaced meanwhile
                case = rng.choice(subject.cases)
                subject.check(program.load_method(subject.method)(case[0]), case)
            elif kind == "replace":
                slots[name] = subject.load(runtime, rng)
            elif kind == "private":
                program = subject.load(runtime, rng)
                case = rng.choice(subject.cases)
                subject.check(program.load_method(subject.method)(case[0]), case)
                del program
            elif has_xnnpack:
                which = rng.randrange(4)
                if which == 0:
                    registry.set_option("XnnpackBackend", {"num_threads": rng.randrange(5)})
                elif which == 1:
                    registry.set_option("XnnpackBackend", {"weight_cache_enabled": rng.random() < 0.5})
                elif which == 2:
                    with pytest.raises(InvalidInputError):
                        registry.set_option("XnnpackBackend", {"num_threads": -1})
                else:
                    got = registry.get_option("XnnpackBackend", {"num_threads": 0, "weight_cache_enabled": False})
                    assert got["num_threads"] >= 1 and isinstance(got["weight_cache_enabled"], bool)
                    assert runtime_info()["num_threads"] >= 1
            done[kind] += 1
        with lock:
            for k, v in done.items():
                counts[k] += v

    run_threads(work)
    assert all(v > 0 for v in counts.values()), counts
    print(f"[stress] {THREADS} threads, {SECONDS} s, {len(subjects)} programs: {counts}")


def test_stress_etdump_writes_race_executes(runtime, subjects, tmp_path):
    """Threads run the methods of programs loaded with enable_etdump=True while others write their ETDumps:
    every call is recorded in exactly one of the written files, and each file reads back."""
    programs = [s.load(runtime, random.Random(2), enable_etdump=True) for s in subjects]
    calls = [0] * len(subjects)
    written = [0] * len(subjects)
    lock = threading.Lock()

    def count_executes(path):
        return sum(1 for block in parse_etdump(path) if block["name"] == "Execute")

    def work(index, rng, deadline):
        step = 0
        while step < 2 or time.monotonic() < deadline:
            i = rng.randrange(len(subjects))
            subject = subjects[i]
            if (step + index) % 4 == 0:
                path = tmp_path / f"t{index}_{step}.etdp"
                programs[i].write_etdump_result_to_file(str(path))
                n = count_executes(path)
                path.unlink()
                with lock:
                    written[i] += n
            else:
                case = rng.choice(subject.cases)
                subject.check(programs[i].load_method(subject.method)(case[0]), case)
                with lock:
                    calls[i] += 1
            step += 1

    run_threads(work)
    for i, program in enumerate(programs):
        path = tmp_path / f"final{i}.etdp"
        program.write_etdump_result_to_file(str(path))
        written[i] += count_executes(path)
    assert written == calls
    assert sum(calls) > 0
    print(f"[stress] {THREADS} threads, {SECONDS} s: {sum(calls)} recorded calls, all in the written ETDumps")


def test_loads_release_the_gil(runtime, fixtures):
    """load_method releases the GIL while it loads: a pure-Python thread makes progress meanwhile (the portable
    MobileNetV2 folds its batch norms and packs its weights at load; loaded until 60 ms of it have passed).
    load_program releases it too, but maps and checks the file too quickly here to be timed."""
    path = fixtures / "exported" / "mobilenet_v2_portable.pte"
    if not path.exists():
        pytest.skip(f"{path} not found")
    spans = []
    with python_thread_progress() as progress:
        while sum(end - start for start, end in spans) < 0.06 and len(spans) < 200:
            program = runtime.load_program(path)  # a fresh program: its method is loaded anew
            start = time.perf_counter()
            program.load_method("forward")
            spans.append((start, time.perf_counter()))
            del program
    during = sum(1 for t in progress for start, end in spans if start < t < end)
    took = sum(end - start for start, end in spans)
    assert took >= 0.06
    assert during >= 5, f"{during} progress marks during {took:.3f}s of load_method"
