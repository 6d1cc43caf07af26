"""Running a manifest case of the shared fixtures (manifest.json) and checking its outputs against the official
runtime's goldens, for the conformance and soak tests."""

import hashlib

import numpy as np
import pytest


def case_input(root, spec):
    if "npy" in spec:
        return np.load(root / spec["npy"])
    kind, value = spec["type"], spec["value"]
    return {"int": int, "double": float, "bool": bool, "string": str}[kind](value)


def check_output(root, actual, spec, atol, rtol, where):
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


def run_case(method, root, inputs, outputs, atol, rtol, where):
    huge = any("splat" in o for o in outputs)
    actual = method.execute([case_input(root, s) for s in inputs], clone_outputs=not huge)
    assert len(actual) == len(outputs), where
    for i, (a, spec) in enumerate(zip(actual, outputs)):
        check_output(root, a, spec, atol, rtol, f"{where} output {i}")
