"""Packaging: versions agree, the package imports on its own, and (opt-in, slow: it builds etnp from scratch)
`pip install --no-build-isolation .` works offline in a venv that sees the system's packages."""

import os
import re
import subprocess
import sys
import tomllib

import pytest

import executorch_numpy_runtime as et
from conftest import REPO


def test_versions_agree():
    cmake_version = re.search(r"project\(etnp VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert et.__version__ == cmake_version == pyproject["project"]["version"]


def test_public_names():
    for name in et.__all__:
        assert hasattr(et, name), name


@pytest.mark.skipif(os.environ.get("ETNP_TEST_PIP_INSTALL") != "1",
                    reason="set ETNP_TEST_PIP_INSTALL=1 to build and install the package into a fresh venv (slow)")
def test_pip_install_in_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ETNP_PYTHON_DIR")}
    subprocess.run([str(python), "-m", "pip", "install", "--no-build-isolation", "--no-index", str(REPO)],
                   check=True, cwd=tmp_path, env=env)
    result = subprocess.run(
        [str(python), "-c", "import sys, executorch_numpy_runtime as et; print(et.__file__); "
                            "print(et.runtime_info()['schema']); assert 'torch' not in sys.modules"],
        check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    path, schema = result.stdout.split()
    assert path.startswith(str(venv)) and schema == "ET12"
