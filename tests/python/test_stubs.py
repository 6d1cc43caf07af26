"""The extension's type stubs: _C.pyi and py.typed lie beside _C, and mypy's stubtest finds the stubs in agreement
with the built extension. stubtest needs mypy (requirements-dev.txt pins it; the dev venv has it)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import executorch_numpy_runtime as et

PACKAGE_DIR = Path(et.__file__).resolve().parent
ALLOWLIST = Path(__file__).resolve().parent / "stubtest_allowlist.txt"


def test_stub_files_beside_the_extension():
    assert (PACKAGE_DIR / "_C.pyi").is_file()
    assert (PACKAGE_DIR / "py.typed").is_file()


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not importable by this Python (requirements-dev.txt pins it: run the tests with "
                           "the dev venv's Python, scripts/dev-venv.sh)")
def test_stubtest_agrees_with_the_extension(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent), MYPYPATH=str(PACKAGE_DIR.parent),
               MYPY_CACHE_DIR=str(tmp_path / "mypy-cache"))
    result = subprocess.run([sys.executable, "-m", "mypy.stubtest", "executorch_numpy_runtime",
                             "--allowlist", str(ALLOWLIST)],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
