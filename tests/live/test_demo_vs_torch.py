"""The etnp_demo MobileNetV2 (written by etnp's own .pte writer), run by etnp, against PyTorch eager on the same
weights and against the official runtime on the same file (both in the dev venv: torch is the oracle only).

Needs the etnp and etnp_demo executables ($ETNP_BUILD_DIR, else build/) and the dev venv; skipped otherwise
(failed under CI=true, as the rest of the live suite).
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

from live_env import dev_python_or_skip

REPO = pathlib.Path(__file__).resolve().parents[2]


def _build_dir():
    return pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    build = _build_dir()
    etnp, demo_bin = build / "etnp", build / "etnp_demo"
    if not (os.access(etnp, os.X_OK) and os.access(demo_bin, os.X_OK)):
        pytest.skip("etnp / etnp_demo not built in %s (set ETNP_BUILD_DIR)" % build)
    python = dev_python_or_skip()
    out = tmp_path_factory.mktemp("demo")
    subprocess.run([str(demo_bin), "--output-dir", str(out), "--seed", "3"], check=True, capture_output=True)
    proc = subprocess.run([str(python), "-c", ORACLES, str(REPO / "bench"), str(out)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return etnp, out, np.load(out / "torch.npy")


# In the dev venv: PyTorch eager on the demo's weights, and the official runtime on both demo programs.
ORACLES = """
import sys, pathlib
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import mobilenet_torch
from executorch.runtime import Runtime
out = pathlib.Path(sys.argv[2])
x = np.load(out / "mobilenet_v2_input.npy")
model, _ = mobilenet_torch.load_model(str(out))
with torch.inference_mode():
    np.save(out / "torch.npy", model(torch.from_numpy(x)).numpy())
for variant in ("xnnpack", "portable"):
    method = Runtime.get().load_program(out / ("mobilenet_v2_%s.pte" % variant)).load_method("forward")
    np.save(out / ("official_%s.npy" % variant), method.execute([torch.from_numpy(x)])[0].numpy())
"""


def _run(etnp, pte, demo_dir, tmp_path):
    proc = subprocess.run([str(etnp), "run", str(pte), "--input", str(demo_dir / "mobilenet_v2_input.npy"),
                           "--output-dir", str(tmp_path), "--print", "none", "--top", "5"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return np.load(tmp_path / "output_0.npy"), proc.stdout


@pytest.mark.parametrize("variant", ["xnnpack", "portable"])
def test_demo_matches_pytorch(demo, variant, tmp_path):
    etnp, demo_dir, expected = demo
    actual, stdout = _run(etnp, demo_dir / ("mobilenet_v2_%s.pte" % variant), demo_dir, tmp_path)
    assert actual.shape == (1, 1000)
    assert actual.dtype == np.float32
    # The weights keep activations at a sane scale: the logits are neither vanishing nor exploding.
    assert 0.1 < float(np.std(expected)) < 100.0
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(expected))))
    order = np.argsort(-expected[0])
    top5 = [int(i) for i in order[:5]]
    mine = [int(i) for i in np.argsort(-actual[0])[:5]]
    # Same classes; same order wherever the reference scores are further apart than the tolerance.
    gaps = -np.diff(expected[0][order[:6]])
    if np.all(gaps > 1e-3):
        assert mine == top5
    else:
        assert set(mine[:4]) <= set(int(i) for i in order[:6])
    # `etnp run --top 5` prints the classes of etnp's own output, best first.
    line = next(l for l in stdout.splitlines() if l.startswith("top-5 of output 0"))
    printed = [int(item.split(":")[0]) for item in line.split("): ", 1)[1].split(", ")]
    assert printed == mine


@pytest.mark.parametrize("variant", ["xnnpack", "portable"])
def test_demo_matches_official_runtime(demo, variant, tmp_path):
    """The official runtime runs etnp's own writer's programs, and etnp agrees with it (the fixtures' fp32
    tolerance: 1e-5 of the largest logit, rtol 1e-4)."""
    etnp, demo_dir, _ = demo
    official = np.load(demo_dir / ("official_%s.npy" % variant))
    actual, _ = _run(etnp, demo_dir / ("mobilenet_v2_%s.pte" % variant), demo_dir, tmp_path)
    np.testing.assert_allclose(actual, official, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(official))))


def test_demo_ptd_variant_matches(demo, tmp_path):
    etnp, demo_dir, expected = demo
    build = _build_dir()
    subprocess.run([str(build / "etnp_demo"), "--output-dir", str(tmp_path / "ptd"), "--seed", "3", "--ptd"],
                   check=True, capture_output=True)
    pte = tmp_path / "ptd" / "mobilenet_v2_xnnpack_ptd.pte"
    data = tmp_path / "ptd" / "mobilenet_v2_xnnpack_ptd.ptd"
    assert pte.stat().st_size < 64 * 1024  # the weights live in the .ptd
    proc = subprocess.run([str(etnp), "run", str(pte), "--data", str(data), "--input",
                           str(demo_dir / "mobilenet_v2_input.npy"), "--output-dir", str(tmp_path / "out"),
                           "--print", "none"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    actual = np.load(tmp_path / "out" / "output_0.npy")
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(expected))))
