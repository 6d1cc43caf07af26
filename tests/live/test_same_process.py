"""etnp and the official runtime in one process: the dev venv's Python, with torch and executorch imported and
executorch_numpy_runtime built for that interpreter (scripts/build-python.sh) against its numpy 2.

What this adds to test_live_exports.py, which compares with outputs the official runtime recorded in a child
process: both runtimes loaded side by side (their XNNPACK builds and thread pools must not interfere), the
official outputs computed here and now, and the package working with the venv's numpy and Python. Runs only
under a Python that has torch and executorch (test.sh runs it in the venv); skipped elsewhere.
"""
import pathlib

import numpy as np
import pytest

from test_live_exports import QUANTIZED_FORMS, assert_close, load_arrays, tolerance

torch = pytest.importorskip("torch", reason="needs the dev venv's Python (torch and executorch)")
official_runtime = pytest.importorskip("executorch.runtime", reason="needs the official executorch package")


def test_numpy_2_and_torch_loaded_alongside():
    import executorch_numpy_runtime as et

    assert int(np.__version__.split(".")[0]) >= 2, np.__version__
    assert "torch" in __import__("sys").modules
    info = et.runtime_info()
    assert "XnnpackBackend" in str(info)


def test_same_inputs_same_outputs_in_one_process(live, runtime):
    if "export_error" in live or live["official"]["status"] != "ok" or live["file"].endswith(".bpte"):
        pytest.skip("compared in one process only where the official runtime runs the .pte (test_live_exports "
                    "covers the rest)")
    folder = pathlib.Path(live["dir"])
    data = [str(folder / name) for name in live["data_files"]]
    theirs_program = official_runtime.Runtime.get().load_program(folder / live["file"],
                                                                 data_path=data[0] if data else None)
    ours_program = runtime.load_program(str(folder / live["file"]), data_path=data or None)
    for case in live["cases"]:
        stateful = "calls" in case
        if stateful:  # fresh programs: the KV cache lives in the program's mutable buffers
            theirs_program = official_runtime.Runtime.get().load_program(folder / live["file"])
            ours_program = runtime.load_program(str(folder / live["file"]))
        theirs = theirs_program.load_method(case["method"])
        ours = ours_program.load_method(case["method"])
        calls = case["calls"] if stateful else [case]
        for k, call in enumerate(calls):
            call_dir = folder / case["dir"] / call.get("dir", "")
            inputs = load_arrays(call_dir, call["inputs"])
            expected = [np.asarray(t.numpy() if hasattr(t, "numpy") else t)
                        for t in theirs.execute([torch.from_numpy(x) for x in inputs])]
            actual = ours.execute(inputs)
            atol, rtol = tolerance(live["form"], expected)
            assert_close(actual, expected, atol, rtol, "%s, call %d (in-process official)" % (case["dir"], k))
        if live["form"] not in QUANTIZED_FORMS and not stateful:
            # What the child recorded is what this process computes: the official runtime is repeatable.
            recorded = load_arrays(folder / case["dir"], ["official_%d.npy" % i for i in range(len(expected))])
            for got, want in zip(expected, recorded):
                np.testing.assert_array_equal(got, want)
