"""The etnp_demo MobileNetV2, run by etnp, against PyTorch on the same weights (torch is the oracle only).

Needs the etnp and etnp_demo executables ($ETNP_BUILD_DIR, else build/) and python3-torch; skipped otherwise.
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))


def _build_dir():
    return pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    build = _build_dir()
    etnp, demo_bin = build / "etnp", build / "etnp_demo"
    if not (os.access(etnp, os.X_OK) and os.access(demo_bin, os.X_OK)):
        pytest.skip("etnp / etnp_demo not built in %s (set ETNP_BUILD_DIR)" % build)
    torch = pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("demo")
    subprocess.run([str(demo_bin), "--output-dir", str(out), "--seed", "3"], check=True, capture_output=True)
    import mobilenet_torch

    model, _ = mobilenet_torch.load_model(str(out))
    x = np.load(out / "mobilenet_v2_input.npy")
    with torch.inference_mode():
        expected = model(torch.from_numpy(x)).numpy()
    return etnp, out, expected


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
