"""Builds the executorch_numpy_runtime package: setuptools drives CMake, which builds the _C extension (and the etnp
library it links statically); the package metadata is in pyproject.toml.

    /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install --no-build-isolation .

Environment: ETNP_CMAKE_BUILD_DIR (build in, and reuse, this CMake build folder), ETNP_BUILD_JOBS (parallel jobs,
default 2), CMAKE_ARGS (extra CMake options).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        explicit = os.environ.get("ETNP_CMAKE_BUILD_DIR")
        build_dir = Path(explicit or Path(self.build_temp) / "cmake").resolve()
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DETNP_BUILD_PYTHON=ON"]
        if not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja" if shutil.which("ninja") else "Unix Makefiles", "-DCMAKE_BUILD_TYPE=Release"]
        if not explicit or not (build_dir / "CMakeCache.txt").exists():
            # A venv's python is the same interpreter as the one it was made from; a given, already configured
            # build folder keeps the interpreter it was configured with.
            configure.append(f"-DPython3_EXECUTABLE={sys.executable}")
        if not explicit:
            configure.append("-DETNP_BUILD_TESTS=OFF")  # a private build folder: only what the package needs
        configure += os.environ.get("CMAKE_ARGS", "").split()
        subprocess.check_call(configure)
        jobs = os.environ.get("ETNP_BUILD_JOBS", "2")
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "etnp_python_ext", "--parallel", jobs])
        built = sorted((build_dir / "python" / "executorch_numpy_runtime").glob("_C.*"))
        if not built:
            raise RuntimeError(f"CMake did not produce the _C extension in {build_dir}/python")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


setup(
    ext_modules=[CMakeExtension("executorch_numpy_runtime._C")],
    cmdclass={"build_ext": CMakeBuild},
    # Keep setuptools' own build files out of build/, the default CMake build folder of the project.
    options={"build": {"build_base": "build-pip"}},
)
