"""Every example of the two documents the package answers to, run as the documents show them (only torch tensors
replaced with numpy arrays):

- seed 000, the ``executorch.runtime`` Python API reference (its names imported from executorch_numpy_runtime);
- seed 001, executorch-numpy-runtime's README (imported as ``en``, as it does).

Each test names the example it runs. /tmp/program.pte and /tmp/model.pte of the documents are a folder of the
test's own, holding the add program (forward(x, y) = x + y on float32[2, 2]); the examples that add float32[3]
vectors use executorch-numpy-runtime's own add.pte (the public fixture nprt/add.pte).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import executorch_numpy_runtime as en
from executorch_numpy_runtime import _C


@pytest.fixture
def folder(programs, tmp_path, monkeypatch):
    shutil.copy(programs["add"], tmp_path / "program.pte")
    shutil.copy(programs["add"], tmp_path / "model.pte")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def result_outputs():
    """Tensor outputs as ExecuTorchResult, as EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=executorch makes them."""
    _C._set_result_outputs(True)
    yield
    _C._set_result_outputs(False)


# --- seed 000: executorch.runtime ---------------------------------------------------------------------------------


def test_000_example_usage(folder, capsys):
    from executorch_numpy_runtime import Method, Program, Runtime

    et_runtime: Runtime = Runtime.get()
    program: Program = et_runtime.load_program(Path(folder / "program.pte"))
    print("Program methods:", program.method_names)
    forward: Method = program.load_method("forward")

    inputs = (np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    outputs = forward.execute(inputs)
    print(f"Ran forward({inputs})")
    print(f"  outputs: {outputs}")

    assert capsys.readouterr().out.startswith("Program methods: {'forward'}\n")
    assert len(outputs) == 1 and outputs[0].tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_000_example_etdump(folder):
    from executorch_numpy_runtime import Method, Program, Runtime

    et_runtime: Runtime = Runtime.get()
    program: Program = et_runtime.load_program(
        Path(folder / "program.pte"),
        enable_etdump=True,
        debug_buffer_size=int(1e7),  # 10MB buffer to capture all debug info
    )
    forward: Method = program.load_method("forward")
    inputs = (np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    forward.execute(inputs)

    etdump_file = str(folder / "etdump_output.etdp")
    debug_file = str(folder / "debug_output.bin")
    program.write_etdump_result_to_file(etdump_file, debug_file)

    assert os.path.exists(etdump_file) and os.path.exists(debug_file)
    assert sorted(os.listdir(folder)) == ["debug_output.bin", "etdump_output.etdp", "model.pte", "program.pte"]
    # What the files hold: one load block and one execute block whose debug events log the output, 2.0 each.
    blocks = en.parse_etdump(etdump_file)
    assert [b["name"] for b in blocks] == ["Default", "Execute"]
    debug = Path(debug_file).read_bytes()
    assert np.frombuffer(debug[-16:], np.float32).tolist() == [2.0] * 4


def test_000_example_introspection(capsys):
    from executorch_numpy_runtime import Runtime

    runtime = Runtime.get()
    backends = runtime.backend_registry.registered_backend_names
    print(f"Available backends: {backends}")
    if runtime.backend_registry.is_available("XnnpackBackend"):
        print("XNNPACK backend is available")
    operators = runtime.operator_registry.operator_names
    print(f"Number of registered operators: {len(operators)}")

    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Available backends: ['XnnpackBackend']"
    assert out[1] == "XNNPACK backend is available"
    assert out[2] == f"Number of registered operators: {len(en.runtime_info()['operators'])}"
    assert isinstance(backends, list) and isinstance(operators, set)


def test_000_set_option_example():
    from executorch_numpy_runtime import Runtime

    registry = Runtime.get().backend_registry
    before = registry.get_option("XnnpackBackend", {"weight_cache_enabled": False})
    try:
        registry.set_option("XnnpackBackend", {"weight_cache_enabled": True})
        assert registry.get_option("XnnpackBackend", {"weight_cache_enabled": False}) == {"weight_cache_enabled": True}
    finally:
        registry.set_option("XnnpackBackend", before)


@pytest.mark.parametrize("as_results", [False, True], ids=["numpy-outputs", "ExecuTorchResult-outputs"])
def test_000_example_without_pytorch(folder, capsys, as_results, request):
    if as_results:
        request.getfixturevalue("result_outputs")
    from executorch_numpy_runtime import Runtime

    method = Runtime.get().load_program("model.pte").load_method("forward")
    out = method.execute([np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)])[0]
    print(out.dtype)          # float32
    result = np.asarray(out)  # a NumPy view of the output, no copy
    print(result.tolist())    # [[2.0, 2.0], [2.0, 2.0]]

    assert capsys.readouterr().out == "float32\n[[2.0, 2.0], [2.0, 2.0]]\n"
    assert isinstance(out, en.ExecuTorchResult if as_results else np.ndarray)
    if as_results:
        assert np.shares_memory(result, np.asarray(out))  # a view of the result's own memory


def test_000_example_without_pytorch_memoryview_input(folder):
    method = en.Runtime.get().load_program("model.pte").load_method("forward")
    x = memoryview(np.full((2, 2), 3.0, np.float32))
    assert method.execute([x, x])[0].tolist() == [[6.0, 6.0], [6.0, 6.0]]


def test_000_env_switch_for_results(folder):
    code = (
        "import numpy as np, executorch_numpy_runtime as en\n"
        "m = en.Runtime.get().load_program('model.pte').load_method('forward')\n"
        "out = m.execute([np.ones((2, 2), np.float32)] * 2)[0]\n"
        "print(type(out).__name__, out.dtype, out.shape, out.strides, out.nbytes, out.device)\n"
    )
    package_parent = str(Path(en.__file__).resolve().parents[1])  # the package under test, wherever it is
    env = dict(os.environ, EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT="executorch", PYTHONPATH=package_parent)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ExecuTorchResult float32 (2, 2) (8, 4) 16 cpu\n"
    env[en.TENSOR_OUTPUT_VARIABLE] = "torch"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=folder)
    assert done.returncode != 0
    assert "EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT='torch' is not understood" in done.stderr


# --- seed 001: executorch-numpy-runtime ---------------------------------------------------------------------------


def test_001_quick_start(fixtures, monkeypatch):
    monkeypatch.chdir(fixtures / "nprt")
    import numpy as np, executorch_numpy_runtime as en  # noqa: E401 (as the README writes it)

    prog = en.Runtime.get().load_program("add.pte")
    out = prog.load_method("forward")([np.ones(3, np.float32), np.ones(3, np.float32)])
    assert isinstance(out, list) and out[0].tolist() == [2.0, 2.0, 2.0]


def test_001_kernel_libs():
    from executorch_numpy_runtime import runtime_info

    assert runtime_info()["kernel_libs"] == ["portable", "optimized", "quantized", "lstm"]


def test_001_introspection():
    info = en.runtime_info()
    assert list(info)[:6] == ["executorch_version", "backends", "operators", "kernel_libs", "supported_dtypes", "bfloat16"]
    assert info["executorch_version"] == en.__et_version__
    assert info["backends"] == ["XnnpackBackend"]
    assert info["bfloat16"] in ("uint16-passthrough", "ml_dtypes.bfloat16")


def test_001_errors_hierarchy():
    for cls in (en.ProgramLoadError, en.BackendNotAvailable, en.OperatorNotFound, en.ExecutionError):
        assert issubclass(cls, en.ExecuTorchError)


def test_001_corrupt_file_is_program_load_error(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a real pte" * 10)
    with pytest.raises(en.ProgramLoadError):
        en.Runtime.get().load_program(str(bad))


def test_001_shape_and_dtype_mismatch_are_execution_errors(fixtures):
    forward = en.Runtime.get().load_program(fixtures / "nprt" / "add.pte").load_method("forward")
    with pytest.raises(en.ExecutionError, match="dtype"):
        forward([np.ones(3, np.complex128), np.ones(3, np.complex128)])
    with pytest.raises(en.ExecutionError, match="shape"):
        forward([np.ones(4, np.float32), np.ones(4, np.float32)])


def test_001_missing_method_is_program_load_error(fixtures):
    program = en.Runtime.get().load_program(fixtures / "nprt" / "add.pte")
    with pytest.raises(en.ProgramLoadError, match="no method named 'backward'"):
        program.load_method("backward")


def test_001_dict_style_metadata(fixtures):
    meta = en.Runtime.get().load_program(fixtures / "nprt" / "add.pte").load_method("forward").metadata
    assert meta["num_inputs"] == 2
    assert meta["num_outputs"] == 1
    assert meta["inputs"][0]["scalar_type"] == 6  # Float
    assert meta["inputs"][0]["shape"] == [3]
    assert dict(meta) == {
        "num_inputs": 2,
        "num_outputs": 1,
        "inputs": [{"scalar_type": en.ScalarType.Float, "shape": [3], "tag": "Tensor"}] * 2,
        "outputs": [{"scalar_type": en.ScalarType.Float, "shape": [3], "tag": "Tensor"}],
    }
    assert len(meta) == 4 and list(meta) == list(meta.keys()) and "inputs" in meta and "name" not in meta and 3 not in meta
    assert meta.get("num_outputs") == 1 and meta.get("nothing", "fallback") == "fallback"
    assert dict(meta.items()) == dict(zip(meta.keys(), meta.values()))
    with pytest.raises(KeyError, match="nothing"):
        meta["nothing"]
    # The same object is executorch.runtime's MethodMeta.
    assert meta.num_inputs() == 2 and meta.input_tensor_meta(0).sizes() == (3,)


def test_001_outputs_are_fresh_copies(fixtures):
    forward = en.Runtime.get().load_program(fixtures / "nprt" / "add.pte").load_method("forward")
    ones = np.ones(3, np.float32)
    first = forward([ones, ones])[0]
    second = forward([2 * ones, ones])[0]
    assert first.tolist() == [2.0] * 3 and second.tolist() == [3.0] * 3
    assert first.flags.writeable and first.flags.owndata is False and not np.shares_memory(first, second)
