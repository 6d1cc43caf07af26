"""Every entry of the shared fixtures' manifest.json, from Python: each case of an `expect: ok` program must
reproduce the official runtime's goldens within the case's tolerance, and each error entry must raise the
exception class of its kind with the manifest's `names` text in the message.

One test per case (per error entry); skipped when the fixtures folder is absent.
"""

import hashlib
import json

import numpy as np
import pytest

from conftest import fixtures_dir
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


def _input(root, spec):
    if "npy" in spec:
        return np.load(root / spec["npy"])
    kind, value = spec["type"], spec["value"]
    return {"int": int, "double": float, "bool": bool, "string": str}[kind](value)


def _compare(root, actual, spec, atol, rtol, where):
    if "value" in spec:
        expected = spec["value"]
        if spec["type"] == "double":
            assert isinstance(actual, float), where
            assert actual == pytest.approx(expected, rel=rtol, abs=atol) or (np.isnan(actual) and np.isnan(expected)), where
        else:
            assert type(actual) is {"int": int, "bool": bool, "string": str}[spec["type"]], where
            assert actual == expected, where
        return
    assert isinstance(actual, np.ndarray), f"{where}: got {type(actual).__name__}"
    assert list(actual.shape) == spec["shape"], f"{where}: shape {actual.shape} != {spec['shape']}"
    assert str(actual.dtype) == spec["dtype"], f"{where}: dtype {actual.dtype} != {spec['dtype']}"
    if "splat" in spec:  # djl/med_output: a huge output, every element equal to one value
        flat = actual.reshape(-1)
        assert np.all(flat == np.asarray(spec["splat"], dtype=actual.dtype)), where
        digest = hashlib.sha256(np.ascontiguousarray(actual).tobytes()).hexdigest()
        assert digest == spec["sha256"], where
        return
    expected = np.load(root / spec["npy"])
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=where)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)


def _run(method, root, inputs, outputs, atol, rtol, where):
    huge = any("splat" in o for o in outputs)
    actual = method.execute([_input(root, s) for s in inputs], clone_outputs=not huge)
    assert len(actual) == len(outputs), where
    for i, (a, spec) in enumerate(zip(actual, outputs)):
        _compare(root, a, spec, atol, rtol, f"{where} output {i}")


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
            _run(method, root, call["inputs"], call["outputs"], case["atol"], case["rtol"], f"{where} call {k}")
    else:
        _run(method, root, case["inputs"], case["outputs"], case["atol"], case["rtol"], where)
