"""Every entry of the shared fixtures' manifest.json, from Python: each case of an `expect: ok` program must
reproduce the official runtime's goldens within the case's tolerance, and each error entry must raise the
exception class of its kind with the manifest's `names` text in the message.

One test per case (per error entry); skipped when the fixtures folder is absent.
"""

import json

import pytest

from conftest import fixtures_dir
from fixture_cases import run_case
from executorch_numpy_runtime import (
    BackendNotAvailable,
    ExecutionError,
    ExecuTorchError,
    OperatorNotFound,
    ProgramLoadError,
    Runtime,
)

ERROR_CLASSES = {
    "ProgramLoadError": ProgramLoadError,
    "BackendNotAvailable": BackendNotAvailable,
    "OperatorNotFound": OperatorNotFound,
    "ExecutionError": ExecutionError,
}


def _params():
    root = fixtures_dir()
    if root is None:
        return [pytest.param(None, None, id="fixtures_absent")]
    params = []
    for entry in json.loads((root / "manifest.json").read_text()):
        if entry["kind"] == "etdump":
            params.append(pytest.param(entry, None, id=entry["id"]))
        elif isinstance(entry["expect"], dict) or entry["kind"] not in ("program", "bundled_program"):
            params.append(pytest.param(entry, None, id=entry["id"]))
        else:
            for i, case in enumerate(entry["cases"]):
                label = case["method"] + ("__" + case["case"] if "case" in case else "")
                params.append(pytest.param(entry, i, id=f"{entry['id']}:{label}"))
    return params


def _etdump_events(decoded):
    """The reference decoding's profile events, in file order."""
    events = []
    for block in decoded["run_data"]:
        for event in block["events"]:
            if event.get("profile_event"):
                events.append((block["name"], event["profile_event"]["name"], event["profile_event"]["start_time"],
                               event["profile_event"]["end_time"]))
    return events


@pytest.mark.parametrize("entry, case_index", _params())
def test_manifest(entry, case_index):
    if entry is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    from executorch_numpy_runtime import parse_etdump

    root = fixtures_dir()
    runtime = Runtime.get()

    if entry["kind"] == "etdump":
        blocks = parse_etdump(root / entry["file"])
        reference = json.loads((root / entry["decoded"]).read_text())
        ours = [(b["name"], e["name"], e["start_time"], e["end_time"]) for b in blocks for e in b["profile_events"]]
        assert ours == _etdump_events(reference)
        return
    # A bundled program (.bpte) loads like a .pte: the loader runs the program it carries.
    data_paths = [root / p for p in entry["data_files"]]
    if isinstance(entry["expect"], dict):
        expected = ERROR_CLASSES[entry["expect"]["error"]]
        with pytest.raises(ExecuTorchError) as info:
            program = runtime.load_program(root / entry["file"], data_path=data_paths)
            for name in sorted(program.method_names):
                program.load_method(name)
        assert type(info.value) is expected, f"{type(info.value).__name__}: {info.value}"
        assert entry["expect"]["names"] in str(info.value)
        return

    case = entry["cases"][case_index]
    if "requires_backend" in case:
        pytest.skip(f"needs {case['requires_backend']}")
    # Each case starts from a freshly loaded program, as the goldens were made (mutable state starts at zero).
    program = runtime.load_program(root / entry["file"], data_path=data_paths)
    method = program.load_method(case["method"])
    where = f"{entry['id']} {case['method']}" + (f"__{case['case']}" if "case" in case else "")
    if case.get("stateful"):
        for k, call in enumerate(case["calls"]):
            run_case(method, root, call["inputs"], call["outputs"], case["atol"], case["rtol"], f"{where} call {k}")
    else:
        run_case(method, root, case["inputs"], case["outputs"], case["atol"], case["rtol"], where)
