"""bench/load_memory.py's measuring child (bench/oracle_timing.py --load-memory) on etnp: a fresh process loads a
fixture and runs it once, and its figures are consistent with what it loaded (the official runtime's side runs
only in the dev venv, with the benchmark)."""

import json
import os
import pathlib
import subprocess
import sys

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
    # The delegate packs 13.4 MiB of weights at load: they are resident after it, and the peak covers the run.
    assert 13 <= out["load_mib"] < 64
    assert out["peak_mib"] >= max(out["load_mib"], out["run_mib"]) - 0.1


def test_a_refused_program_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    out = measure({"program": str(bad), "data": [], "method": "forward", "inputs": []})
    assert out["error"].startswith("ProgramLoadError")
