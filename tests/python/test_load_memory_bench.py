"""bench/load_memory.py's measuring child (bench/oracle_timing.py --load-memory) on etnp: a fresh process loads a
fixture and runs it once, and its figures are consistent with what it loaded (the official runtime's side runs
only in the dev venv, with the benchmark)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import executorch_numpy_runtime as et

REPO = pathlib.Path(__file__).resolve().parents[2]


def measure(request):
    env = dict(os.environ, ETNP_PYTHON_DIR=str(pathlib.Path(et.__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "oracle_timing.py"), "--runtime", "etnp",
                           "--load-memory", json.dumps(request)], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_load_and_run_are_measured(fixtures):
    program = fixtures / "exported" / "mobilenet_v2_xnnpack_fp32.pte"
    manifest = json.loads((fixtures / "manifest.json").read_text())
    entry = next(e for e in manifest if e.get("id") == "exported/mobilenet_v2_xnnpack_fp32")
    inputs = [str(fixtures / value["npy"]) for value in entry["cases"][0]["inputs"]]
    out = measure({"program": str(program), "data": [], "method": "forward", "inputs": inputs})
    assert "error" not in out, out
    assert out["load_ms"] > 0
    # The delegate packs 13.4 MiB of weights at load: they are resident after it, and the peak covers the run
    # (read with it, in one read of /proc/self/status) and the load (an earlier read: the kernel's resident
    # counters are approximate between reads, by a fraction of a MiB).
    assert 13 <= out["load_mib"] < 64
    assert out["peak_mib"] >= out["run_mib"]
    assert out["peak_mib"] >= out["load_mib"] - 1


def test_a_refused_program_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    out = measure({"program": str(bad), "data": [], "method": "forward", "inputs": []})
    assert out["error"].startswith("ProgramLoadError")


def test_the_warm_up_programs_run_before_the_timed_load(etnp, tmp_path):
    """The measurement's warm-up: etnp_demo's one-element addition, portable and in an XNNPACK delegate (so that
    setting the delegate library up counts for no program), each x + y, run before the timed load."""
    demo = pathlib.Path(etnp).with_name("etnp_demo")
    if not demo.is_file():
        pytest.skip(f"etnp_demo not built beside {etnp}")
    subprocess.run([str(demo), "--output-dir", str(tmp_path)], check=True, capture_output=True)
    portable, delegated = tmp_path / "tiny_add.pte", tmp_path / "tiny_add_xnnpack.pte"
    x, y = np.array([2.5], dtype=np.float32), np.array([1.25], dtype=np.float32)
    for path in (portable, delegated):
        out = et.Runtime.get().load_program(str(path)).load_method("forward").execute([x, y])
        np.testing.assert_array_equal(out[0], x + y)
    inspect = subprocess.run([etnp, "inspect", str(delegated)], capture_output=True, text=True, check=True).stdout
    assert "delegates: XnnpackBackend x1" in inspect, inspect
    assert "delegates" not in subprocess.run([etnp, "inspect", str(portable)], capture_output=True, text=True,
                                             check=True).stdout
    ones = tmp_path / "one.npy"
    np.save(ones, np.ones(1, dtype=np.float32))
    warmup = [{"program": str(p), "inputs": [str(ones)] * 2} for p in (portable, delegated)]
    out = measure({"program": str(portable), "data": [], "method": "forward", "inputs": [str(ones)] * 2,
                   "warmup": warmup})
    assert "error" not in out, out
    assert out["load_ms"] > 0
    bad = measure({"program": str(portable), "data": [], "method": "forward", "inputs": [str(ones)] * 2,
                   "warmup": [{"program": str(tmp_path / "missing.pte"), "inputs": []}]})
    assert "error" in bad, bad
