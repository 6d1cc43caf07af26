"""pytest set-up for the executorch_numpy_runtime tests.

The package is taken from, in order: $ETNP_PYTHON_DIR (a folder holding executorch_numpy_runtime/, e.g.
build/python), an installed package, build/python, build-py/python. The public fixtures come from $ETNP_FIXTURES or
../shared/fixtures next to the repository; tests that need them are skipped when they are absent.
"""

import contextlib
import json
import os
import pathlib
import sys
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # programs.py


import etnp_test_locate  # noqa: E402

etnp_test_locate.locate_package()


def fixtures_dir():
    env = os.environ.get("ETNP_FIXTURES")
    path = pathlib.Path(env) if env else REPO.parent / "shared" / "fixtures"
    return path if (path / "manifest.json").is_file() else None


@pytest.fixture(scope="session")
def fixtures():
    path = fixtures_dir()
    if path is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    return path


@pytest.fixture(scope="session")
def manifest(fixtures):
    return json.loads((fixtures / "manifest.json").read_text())


@pytest.fixture(scope="session")
def programs(tmp_path_factory):
    """The test programs of programs.py, compiled with flatc (skipped when flatc is not installed)."""
    import programs as builder

    if builder.flatc() is None:
        pytest.skip("flatc not found: it compiles the test programs")
    return builder.build_all(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="session")
def runtime():
    from executorch_numpy_runtime import Runtime

    return Runtime.get()


@pytest.fixture(scope="session")
def etnp():
    """The built `etnp` tool: $ETNP_BUILD_DIR/etnp (default build/etnp), or a skip."""
    path = pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build")) / "etnp"
    if not os.access(path, os.X_OK):
        pytest.skip("etnp not built in %s (set ETNP_BUILD_DIR)" % path.parent)
    return str(path)


def fixture_path(fixtures, relative):
    """A file of the shared fixtures, or a skip naming it."""
    path = fixtures / relative
    if not path.is_file():
        pytest.skip(f"fixture {relative} not found in {fixtures}")
    return path


@contextlib.contextmanager
def python_thread_progress():
    """A pure-Python thread spins while the block runs (with a 1 ms switch interval) and yields the list of its
    progress times, one per 1000 turns: marks inside a span of the block show that the code there released the
    GIL."""
    progress = []
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 1000 == 0:
                progress.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.05)
        yield progress
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(old)
