"""An extension built with pybind11 before 2.12 reads numpy arrays in their numpy 1 layout; imported where numpy 2
is installed it must refuse to load with a clear ImportError (it used to hang or read garbage), and a build
with a newer pybind11 must load and run there."""
import os
import pathlib
import platform
import subprocess
import sys

import pytest

import executorch_numpy_runtime as etnp
from executorch_numpy_runtime import _C

def numpy2_python():
    """Another interpreter of this Python's version and machine with numpy 2 (the dev venv's), or None. (The
    machine: under qemu-aarch64, scripts/cross-arm64-python.sh, the dev venv's is an x86-64 one, which cannot
    load the aarch64 extension.)"""
    candidates = [os.environ.get("ETNP_TORCH_PYTHON"), str(pathlib.Path.home() / ".cache/etnp/dev-venv/bin/python")]
    for python in filter(None, candidates):
        if not pathlib.Path(python).exists():
            continue
        probe = subprocess.run([python, "-c", "import sys, platform, numpy; "
                                "print(sys.version_info[:2], platform.machine(), numpy.__version__)"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            continue
        version, machine, numpy_version = probe.stdout.rsplit(" ", 2)
        if (version == str(sys.version_info[:2]) and machine == platform.machine()
                and int(numpy_version.split(".")[0]) >= 2):
            return python
    return None


def test_a_build_loads_under_numpy_2_only_with_pybind11_2_12_or_later(programs):
    python = numpy2_python()
    if python is None:
        pytest.skip("no %s interpreter of Python %d.%d with numpy 2 here (the dev venv's, scripts/dev-venv.sh)"
                    % (platform.machine(), *sys.version_info[:2]))
    package_dir = str(pathlib.Path(etnp.__file__).resolve().parents[1])
    script = ("import executorch_numpy_runtime as e, numpy as np; "
              "print(e.Runtime.get().load_program(%r).load_method('forward')([np.ones((2, 2), np.float32)] * 2)[0].ravel())"
              % str(programs["add"]))
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=package_dir))
    if tuple(_C._pybind11_version) < (2, 12):
        assert proc.returncode != 0
        assert "ImportError: executorch_numpy_runtime: this build uses pybind11 2." in proc.stderr, proc.stderr
        assert "cannot read numpy 2 arrays" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[2. 2. 2. 2.]"
