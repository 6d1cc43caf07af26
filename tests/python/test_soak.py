"""Soak from Python (issue 18 item 4): every fixture program run many times through the package, and load/unload
cycles of the ones with delegates or .ptd data. After a warm-up the resident set must stay flat, the outputs
must still match the official runtime's goldens at the end, and an unloaded program must be freed (nothing
keeps it alive, and the bindings' count of live programs and methods returns to where it was).
tests/cpp/soak_test.cpp does the same in C++, where LeakSanitizer also checks every byte.

Short by default; the long run of docs/security.md sets ETNP_SOAK_ITERATIONS, ETNP_SOAK_CYCLES and
ETNP_SOAK_SECONDS (each program's time bound, 0: none) as for the C++ soak, and ETNP_SOAK_REPORT=FILE.
"""

import ctypes
import gc
import json
import os
import time
import weakref

import pytest

from conftest import fixtures_dir
from executorch_numpy_runtime import Runtime, _C
from fixture_cases import case_input, run_case

RSS_SLACK = 1 << 20  # allocator noise, plus 1% of the resident set; a leak shows as steady growth past it
ITERATIONS = int(os.environ.get("ETNP_SOAK_ITERATIONS", "30"))
CYCLES = int(os.environ.get("ETNP_SOAK_CYCLES", "10"))
SECONDS = float(os.environ.get("ETNP_SOAK_SECONDS", "0.15"))


try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc
    _LIBC = None


def resident_bytes():
    """The resident set, after glibc gives back the free memory it keeps (malloc_trim): what is live, less the
    allocator's own high-water marks, which move during a big program's first load/unload cycles."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _entries():
    root = fixtures_dir()
    if root is None:
        return []
    entries = []
    for e in json.loads((root / "manifest.json").read_text()):
        if e["kind"] != "program" or isinstance(e["expect"], dict):
            continue
        cases = [c for c in e.get("cases", []) if "requires_backend" not in c]
        if cases:
            entries.append((e, cases))
    return entries


def _params(cycles):
    if fixtures_dir() is None:
        return [pytest.param(None, None, id="fixtures_absent")]
    params = []
    for entry, cases in _entries():
        if cycles and not entry["data_files"] and "Delegates:" not in entry.get("description", ""):
            continue
        params.append(pytest.param(entry, cases, id=entry["id"]))
    return params


def _run_all(root, methods, cases, check):
    for method, case in zip(methods, cases):
        for k, call in enumerate(case["calls"] if case.get("stateful") else [case]):
            if check:
                run_case(method, root, call["inputs"], call["outputs"], case["atol"], case["rtol"],
                         f"{case['method']} call {k}")
            else:
                huge = any("splat" in o for o in call["outputs"])
                method.execute([case_input(root, s) for s in call["inputs"]], clone_outputs=not huge)


def _soak(label, budget, step):
    # Warm-up: 3 runs, then up to a tenth of the runs or of the time.
    start = time.monotonic()
    warmup = 0
    while warmup < 3 or (warmup < budget // 10 and not (SECONDS > 0 and time.monotonic() - start > SECONDS / 10)):
        step(warmup)
        warmup += 1
    after_warmup = peak = resident_bytes()
    done = warmup
    while done < budget and not (SECONDS > 0 and time.monotonic() - start > SECONDS):
        step(done)
        done += 1
        if done % 64 == 0:
            peak = max(peak, resident_bytes())
    gc.collect()
    at_end = resident_bytes()
    peak = max(peak, at_end)
    report = os.environ.get("ETNP_SOAK_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(f"| {label} | {done} | {int((time.monotonic() - start) * 1000)} | {after_warmup / 2**20:.1f} | "
                    f"{peak / 2**20:.1f} | {at_end / 2**20:.1f} |\n")
    assert peak <= after_warmup + RSS_SLACK + after_warmup // 100, (
        f"{label}: the resident set grew from {after_warmup} bytes after {warmup} warm-up runs to {peak} over "
        f"{done} runs")


@pytest.mark.parametrize("entry, cases", _params(cycles=False))
def test_runs_repeatedly_with_flat_memory(entry, cases):
    if entry is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    root = fixtures_dir()
    data_paths = [root / p for p in entry["data_files"]]
    # A program per case: a program gives one Method per name, and cases of one method would share its state.
    methods = [Runtime.get().load_program(root / entry["file"], data_path=data_paths).load_method(c["method"])
               for c in cases]
    first = [True]

    def step(_):
        # Stateful cases match their goldens on the first pass only: later ones start from the state left.
        check = first[0]
        first[0] = False
        _run_all(root, methods, cases, check)

    _soak(f"{entry['id']} runs (Python)", ITERATIONS, step)
    stateless = [(m, c) for m, c in zip(methods, cases) if not c.get("stateful")]
    _run_all(root, [m for m, _ in stateless], [c for _, c in stateless], True)  # still right at the end


@pytest.mark.parametrize("entry, cases", _params(cycles=True))
def test_load_run_unload_with_flat_memory(entry, cases):
    if entry is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    root = fixtures_dir()
    data_paths = [root / p for p in entry["data_files"]]
    freed = []

    def step(_):
        programs = [Runtime.get().load_program(root / entry["file"], data_path=data_paths) for _ in cases]
        methods = [p.load_method(c["method"]) for p, c in zip(programs, cases)]
        _run_all(root, methods, cases, True)
        refs = [weakref.ref(p) for p in programs]
        del programs, methods
        freed.append(all(r() is None for r in refs))

    gc.collect()
    before = _C._live_objects()
    _soak(f"{entry['id']} load/unload cycles (Python)", CYCLES, step)
    assert all(freed), f"{freed.count(False)} of {len(freed)} unloaded programs were still alive"
    gc.collect()
    assert _C._live_objects() == before  # the C++ programs and methods behind them are gone too
