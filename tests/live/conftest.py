"""pytest set-up for the live-export suite (what it is and how it finds its venv: live_env.py)."""
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))
import etnp_test_locate  # noqa: E402
from live_env import LiveUnavailable, in_ci, live_records  # noqa: E402

etnp_test_locate.locate_package()


def pytest_configure(config):
    config.addinivalue_line("markers", "language_models: parametrized over the zoo's language models only")


def pytest_generate_tests(metafunc):
    if "live" not in metafunc.fixturenames:
        return
    try:
        records = live_records()
    except LiveUnavailable as e:
        if in_ci():
            raise RuntimeError("CI=true: %s" % e) from None
        metafunc.parametrize("live", [pytest.param(None, marks=pytest.mark.skip(reason=str(e)))], ids=["unavailable"])
        return
    if metafunc.definition.get_closest_marker("language_models"):
        # The records of export.py's generation reference (the language models); a non-LLM export has no case.
        records = [r for r in records if "generation" in r]
    metafunc.parametrize("live", records, ids=["%s-%s" % (r["model"], r["form"]) for r in records])


@pytest.fixture(scope="session")
def runtime():
    from executorch_numpy_runtime import Runtime

    return Runtime.get()
