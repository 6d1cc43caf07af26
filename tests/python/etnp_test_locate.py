"""Where the tests find executorch_numpy_runtime, in order: $ETNP_PYTHON_DIR (a folder holding
executorch_numpy_runtime/, e.g. build/python), an installed package, build/python, build-py/python."""
import importlib.util
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def locate_package() -> None:
    explicit = os.environ.get("ETNP_PYTHON_DIR")
    if explicit:
        sys.path.insert(0, explicit)
        return
    try:
        if importlib.util.find_spec("executorch_numpy_runtime") is not None:
            return
    except ImportError:
        pass
    for candidate in (REPO / "build" / "python", REPO / "build-py" / "python"):
        if (candidate / "executorch_numpy_runtime").is_dir():
            sys.path.insert(0, str(candidate))
            return
