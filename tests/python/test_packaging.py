"""Packaging: versions agree, the package imports on its own, and (opt-in, slow: a cold build of the package) the
wheel that `pip wheel .` builds installs into a fresh venv holding only numpy, where the quick start runs without
torch and the `etnp` console command works.

ETNP_TEST_PIP_INSTALL=1 runs the wheel test. The wheel is built with --no-build-isolation (nothing is downloaded
for the build) by the Python of a venv holding the build tools (scikit-build-core, pybind11: requirements-dev.txt):
$ETNP_BUILD_TOOLS_PYTHON, else the dev venv's (scripts/dev-venv.sh). Where there is none the test skips, except
under CI=true, where it fails. $ETNP_PKG_BUILD_DIR keeps (and reuses) the CMake build folder; by default it is
a temporary one, so the build is cold.
"""

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import executorch_numpy_runtime as et
from conftest import REPO
import programs


def test_versions_agree():
    cmake_version = re.search(r"project\(etnp VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert et.__version__ == cmake_version == pyproject["project"]["version"]


def test_public_names():
    for name in et.__all__:
        assert hasattr(et, name), name


def test_build_backend_is_scikit_build_core():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["build-system"]["build-backend"] == "scikit_build_core.build"
    assert "scikit-build-core==1.1.2" in pyproject["build-system"]["requires"]
    assert pyproject["project"]["scripts"]["etnp"] == "executorch_numpy_runtime._cli:main"
    assert not (REPO / "setup.py").exists()


def _missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the wheel test must run)")
    pytest.skip(reason)


def _build_tools_python() -> str:
    """A Python that has scikit-build-core, to build the wheel without build isolation."""
    explicit = os.environ.get("ETNP_BUILD_TOOLS_PYTHON")
    if explicit:
        return explicit
    check = subprocess.run([str(REPO / "scripts" / "dev-venv.sh"), "--check"], capture_output=True, text=True)
    if check.returncode == 0 and check.stdout.strip():
        return str(Path(check.stdout.strip()) / "bin" / "python")
    if importlib.util.find_spec("scikit_build_core") is not None:
        return sys.executable
    _missing("no Python with scikit-build-core to build the wheel: set ETNP_BUILD_TOOLS_PYTHON or make the dev "
             "venv (scripts/dev-venv.sh)")
    raise AssertionError("not reached")


def _run(args, **kwargs):
    return subprocess.run([str(a) for a in args], check=True, **kwargs)


QUICK_START = """
import importlib.util, sys
import numpy as np
from executorch_numpy_runtime import Runtime

program = Runtime.get().load_program(sys.argv[1], data_path=None)
method = program.load_method("forward")
x = np.arange(4, dtype=np.float32).reshape(2, 2)
(out,) = method.execute([x, np.ones((2, 2), dtype=np.float32)])
assert np.array_equal(out, x + 1), out
assert "torch" not in sys.modules and importlib.util.find_spec("torch") is None
import executorch_numpy_runtime
print(executorch_numpy_runtime.__file__)
"""


@pytest.mark.skipif(os.environ.get("ETNP_TEST_PIP_INSTALL") != "1",
                    reason="set ETNP_TEST_PIP_INSTALL=1 to build the wheel and install it into a fresh venv (slow)")
def test_wheel_in_a_fresh_venv(tmp_path):
    tools = _build_tools_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ETNP_PYTHON_DIR", "PIP_REQUIRE_VIRTUALENV")}
    wheels = tmp_path / "wheels"
    build = ["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels]
    if os.environ.get("ETNP_PKG_BUILD_DIR"):
        build += [f"--config-settings=build-dir={os.environ['ETNP_PKG_BUILD_DIR']}"]
    _run([tools, *build, REPO], cwd=tmp_path, env=env)
    (wheel,) = wheels.glob("executorch_numpy_runtime-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("_C.pyi", "py.typed", "_cli.py", "bin/etnp", "__init__.py", "errors.py", "llm.py"):
        assert f"executorch_numpy_runtime/{member}" in names, member
    assert any(re.fullmatch(r"executorch_numpy_runtime/_C\..*\.so", n) for n in names), sorted(names)
    # Nothing of the C++ package (headers, static libraries, CMake files) goes into the wheel.
    assert not [n for n in names if n.endswith((".a", ".h", ".cmake", ".pc"))]

    # The fresh venv, from the build tools' interpreter, without system packages: numpy (a wheel of the tools'
    # own numpy version, from pip's cache or index) and the package, both installed from the wheels folder.
    base = _run([tools, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True).stdout.strip()
    numpy_version = _run([tools, "-c", "import numpy; print(numpy.__version__)"], capture_output=True,
                         text=True).stdout.strip()
    fetched = subprocess.run([tools, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                              f"numpy=={numpy_version}"], capture_output=True, text=True, env=env)
    if fetched.returncode != 0:
        _missing(f"no numpy {numpy_version} wheel for the fresh venv (offline and not in pip's cache): "
                 f"{fetched.stderr.strip()[-300:]}")
    venv = tmp_path / "venv"
    _run([Path(base) / "bin" / "python3", "-m", "venv", venv], env=env)
    python, etnp = venv / "bin" / "python", venv / "bin" / "etnp"
    _run([python, "-m", "pip", "install", "--no-index", "--find-links", wheels, wheel], env=env, cwd=tmp_path)
    installed = _run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                     env=env).stdout
    assert {line.split("==")[0].lower() for line in installed.split()} <= {"numpy", "executorch_numpy_runtime",
                                                                          "executorch-numpy-runtime", "pip",
                                                                          "setuptools", "wheel"}, installed

    model = programs.compile_program(programs.add_program(), tmp_path / "model.pte")
    result = _run([python, "-c", QUICK_START, model], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.stdout.strip().startswith(str(venv)), result.stdout

    helped = _run([etnp, "--help"], capture_output=True, text=True, env=env)
    assert "usage: etnp" in helped.stdout and "inspect" in helped.stdout, helped.stdout
    inspected = _run([etnp, "inspect", model], capture_output=True, text=True, env=env)
    assert "forward" in inspected.stdout and "runs here" in inspected.stdout, inspected.stdout
    # Exit codes and stderr are the C++ tool's: 2 and a usage message for a bad command line, 1 for a bad file.
    bare = subprocess.run([etnp], capture_output=True, text=True, env=env)
    assert bare.returncode == 2 and "usage" in bare.stderr, (bare.returncode, bare.stderr)
    missing = subprocess.run([etnp, "inspect", tmp_path / "missing.pte"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and missing.stderr.startswith("error: "), (missing.returncode, missing.stderr)
