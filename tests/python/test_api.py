"""Runtime, Program, Method and MethodMeta: loading in every accepted form, method lookup, metadata, registries."""

import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import executorch_numpy_runtime as et
from executorch_numpy_runtime import (
    ExecuTorchError,
    InvalidInputError,
    MethodNotFoundError,
    ProgramLoadError,
    Runtime,
    ScalarType,
    Verification,
)

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, dtype=np.float32)


def check_add_mul(program):
    out = program.load_method("add_mul").execute([X, Y])
    np.testing.assert_array_equal(out[0], X + Y)
    np.testing.assert_array_equal(out[1], X * Y)


def test_runtime_is_a_singleton():
    assert Runtime.get() is Runtime.get()


@pytest.mark.parametrize("form", ["str", "path", "bytes", "bytearray", "memoryview", "file", "numpy"])
def test_load_program_accepts_every_form(runtime, programs, form):
    path = programs["arith"]
    data = path.read_bytes()
    source = {
        "str": str(path),
        "path": pathlib.Path(path),
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "file": io.BytesIO(data),
        "numpy": np.frombuffer(data, dtype=np.uint8),
    }[form]
    program = runtime.load_program(source)
    assert program.method_names == {"add_mul", "gather", "scalars", "dynamic"}
    check_add_mul(program)


def test_load_program_from_an_open_file(runtime, programs):
    with open(programs["arith"], "rb") as f:
        check_add_mul(runtime.load_program(f))


def test_buffer_is_kept_alive_not_copied(runtime, programs):
    data = bytearray(programs["arith"].read_bytes())
    program = runtime.load_program(data)
    # The program holds an export of the buffer: a bytearray cannot be resized while it is in use.
    with pytest.raises(BufferError):
        data.extend(b"0" * 16)
    del program
    import gc

    gc.collect()
    data.extend(b"0" * 16)  # released with the program


def test_buffer_outlives_the_caller_reference(runtime, programs):
    program = runtime.load_program(bytes(programs["arith"].read_bytes()))
    import gc

    gc.collect()
    check_add_mul(program)


def test_load_program_rejects_other_types(runtime):
    with pytest.raises(TypeError, match="got int"):
        runtime.load_program(42)
    with pytest.raises(TypeError, match="binary mode"):
        runtime.load_program(io.StringIO("text"))


def test_verification_levels(runtime, programs):
    for level in (Verification.Minimal, Verification.InternalConsistency):
        check_add_mul(runtime.load_program(programs["arith"], verification=level))
    with pytest.raises(TypeError):
        runtime.load_program(programs["arith"], verification="Minimal")


def test_method_names_is_a_set(runtime, programs):
    names = runtime.load_program(programs["layouts"]).method_names
    assert isinstance(names, set)
    assert names == {"identity_cl", "identity_contig", "passthrough"}


def test_load_method_is_cached(runtime, programs):
    program = runtime.load_program(programs["arith"])
    assert program.load_method("add_mul") is program.load_method("add_mul")


def test_unknown_method_is_a_key_error_and_an_executorch_error(runtime, programs):
    program = runtime.load_program(programs["arith"])
    with pytest.raises(KeyError) as info:
        program.load_method("nope")
    err = info.value
    assert isinstance(err, ExecuTorchError) and isinstance(err, MethodNotFoundError)
    for name in ("'nope'", "add_mul", "gather", "scalars", "dynamic"):
        assert name in str(err)
    assert err.method == "nope"
    with pytest.raises(MethodNotFoundError):
        program.metadata("nope")


def test_program_metadata_without_loading(runtime, programs):
    meta = runtime.load_program(programs["arith"]).metadata("add_mul")
    assert meta.name() == "add_mul"
    assert meta.num_inputs() == 2 and meta.num_outputs() == 2
    x = meta.input_tensor_meta(0)
    assert x.sizes() == (2, 3)
    assert x.dtype() == ScalarType.Float and x.dtype() == 6
    assert x.numpy_dtype() == np.float32
    assert x.dim_order() == (0, 1)
    assert x.nbytes() == 24
    assert x.is_memory_planned()
    assert x.dynamism() == "static"
    assert meta.output_tensor_meta(0).is_memory_planned()
    assert not meta.output_tensor_meta(1).is_memory_planned()
    assert meta.num_memory_planned_buffers() == 1
    assert meta.memory_planned_buffer_size(0) == 96
    assert meta.backends() == []
    assert meta.operators() == ["aten::add.out", "aten::mul.out"]
    assert meta.num_instructions() == 2
    assert "add_mul" in repr(meta) and "is_memory_planned=False" in repr(meta)
    with pytest.raises(IndexError):
        meta.input_tensor_meta(2)
    with pytest.raises(IndexError):
        meta.memory_planned_buffer_size(1)


def test_method_metadata(runtime, programs):
    program = runtime.load_program(programs["arith"])
    meta = program.load_method("scalars").metadata
    assert meta.name() == "scalars"
    assert [meta.input_tag(i) for i in range(3)] == ["Int", "Double", "Bool"]
    with pytest.raises(ValueError, match="not a tensor"):
        meta.input_tensor_meta(0)
    dyn = program.load_method("dynamic").metadata.input_tensor_meta(0)
    assert dyn.dynamism() == "dynamic_bound" and dyn.sizes() == (4, 3)
    cl = runtime.load_program(programs["layouts"]).metadata("identity_cl").input_tensor_meta(0)
    assert cl.dim_order() == (0, 2, 3, 1)


def test_method_metadata_names_backends(runtime, fixtures):
    meta = runtime.load_program(fixtures / "nprt" / "add.pte").metadata("forward")
    assert meta.backends() == ["XnnpackBackend"]
    assert meta.uses_backend("XnnpackBackend") and not meta.uses_backend("Other")


def test_backend_registry(runtime):
    registry = runtime.backend_registry
    names = registry.registered_backend_names
    assert "XnnpackBackend" in names
    assert registry.is_available("XnnpackBackend") is True
    assert registry.is_available("NoSuchBackend") is False
    # The documented form: a dict whose values give the expected types, answered with the current values.
    current = registry.get_option("XnnpackBackend", {"num_threads": 0, "workspace_sharing_mode": 0})
    assert current["num_threads"] == et.runtime_info()["num_threads"] and current["workspace_sharing_mode"] == 1
    registry.set_option("XnnpackBackend", current)  # writing the current values back is accepted
    assert registry.get_option("XnnpackBackend", {"num_threads": 0}) == {"num_threads": current["num_threads"]}
    with pytest.raises(et.BackendNotAvailable, match="NoSuchBackend") as info:
        registry.get_option("NoSuchBackend", {"num_threads": 0})
    assert info.value.backend == "NoSuchBackend"
    with pytest.raises(InvalidInputError, match="no_such_option"):
        registry.get_option("XnnpackBackend", {"no_such_option": 0})
    with pytest.raises(InvalidInputError, match="'num_threads' is int, not bool"):
        registry.get_option("XnnpackBackend", {"num_threads": True})


def test_backend_option_errors(runtime):
    registry = runtime.backend_registry
    with pytest.raises(InvalidInputError, match="workspace_sharing_mode"):
        registry.set_option("XnnpackBackend", {"workspace_sharing_mode": 7})
    with pytest.raises(InvalidInputError, match="must be a bool, int or str, got float"):
        registry.set_option("XnnpackBackend", {"workspace_sharing_mode": 1.5})
    with pytest.raises(InvalidInputError, match="must be a dict"):
        registry.set_option("XnnpackBackend", "num_threads")
    with pytest.raises(et.InvalidTypeError):
        registry.set_option(7, {"num_threads": 1})
    with pytest.raises(et.BackendNotAvailable):
        registry.option_names("NoSuchBackend")


def test_set_option_is_all_or_nothing(runtime):
    registry = runtime.backend_registry
    before = registry.get_option("XnnpackBackend", {"num_threads": 0})["num_threads"]
    wanted = 1 if before != 1 else 2
    # num_threads is set first (keys in order), then the bad value is refused: num_threads is put back.
    with pytest.raises(InvalidInputError, match="workspace_sharing_mode"):
        registry.set_option("XnnpackBackend", {"num_threads": wanted, "workspace_sharing_mode": 5})
    assert registry.get_option("XnnpackBackend", {"num_threads": 0})["num_threads"] == before
    try:
        registry.set_option("XnnpackBackend", {"num_threads": wanted})
        assert et.runtime_info()["num_threads"] == wanted
    finally:
        registry.set_option("XnnpackBackend", {"num_threads": before})


def test_backend_options_at_load(runtime, fixtures):
    path = fixtures / "nprt" / "add.pte"
    ones = np.ones(3, np.float32)
    program = runtime.load_program(path, backend_options={"XnnpackBackend": {"num_threads": 1}})
    np.testing.assert_array_equal(program.load_method("forward")([ones, ones])[0], 2 * ones)
    # 0 (each delegate its own intermediate values) and 1 (a method's delegates share them) give the same
    # results; 2 (one for the whole process) is refused.
    for mode in (0, 1):
        program = runtime.load_program(path, backend_options={"XnnpackBackend": {"workspace_sharing_mode": mode}})
        np.testing.assert_array_equal(program.load_method("forward")([ones, ones])[0], 2 * ones)
    shared = runtime.load_program(path, backend_options={"XnnpackBackend": {"workspace_sharing_mode": 2}})
    with pytest.raises(InvalidInputError, match=r"workspace_sharing_mode.*2 \(global\) is not available"):
        shared.load_method("forward")
    bad = runtime.load_program(path, backend_options={"XnnpackBackend": {"no_such_option": 1}})
    with pytest.raises(InvalidInputError, match="no_such_option") as info:
        bad.load_method("forward")
    assert info.value.backend == "XnnpackBackend"
    with pytest.raises(InvalidInputError, match="bool, int or str"):
        runtime.load_program(path, backend_options={"XnnpackBackend": {"workspace_sharing_mode": 1.5}})
    with pytest.raises(et.InvalidTypeError, match="backend_options"):
        runtime.load_program(path, backend_options=["XnnpackBackend"])


def test_operator_registry(runtime):
    names = runtime.operator_registry.operator_names
    assert isinstance(names, set)
    assert {"aten::add.out", "aten::mul.out", "aten::index_select.out"} <= names


def test_runtime_info():
    info = et.runtime_info()
    # executorch-numpy-runtime's keys, first and in its order, with its value types.
    documented = ["executorch_version", "backends", "operators", "kernel_libs", "supported_dtypes", "bfloat16"]
    assert list(info)[: len(documented)] == documented
    assert info["executorch_version"] == et.__et_version__ and isinstance(info["executorch_version"], str)
    assert isinstance(info["backends"], list) and "XnnpackBackend" in info["backends"]
    assert isinstance(info["operators"], list) and "aten::add.out" in info["operators"]
    assert len(info["operators"]) == len(set(info["operators"])) == len(et.Runtime.get().operator_registry.operator_names)
    # Each library is listed because its operators are there (etnp::lstm.out is the lstm library's op).
    assert info["kernel_libs"] == ["portable", "optimized", "quantized", "lstm"]
    assert "quantized_decomposed::quantize_per_tensor.out" in info["operators"] and "etnp::lstm.out" in info["operators"]
    for dtype in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        assert dtype in info["supported_dtypes"]
    assert info["bfloat16"] == ("ml_dtypes.bfloat16" if et.BFLOAT16_DTYPE is not None else "uint16-passthrough")
    # etnp's own keys after them.
    assert info["version"] == et.__version__ and info["version"].count(".") == 2
    assert info["schema"] == "ET12"
    assert info["available_backends"] == ["XnnpackBackend"]
    assert info["num_threads"] >= 1


def test_et_version_is_the_oracle_pin():
    pins = (pathlib.Path(__file__).parents[2] / "requirements-dev.txt").read_text()
    assert f"executorch=={et.__et_version__}\n" in pins


def test_import_never_imports_torch(programs):
    script = f"""
import sys
import numpy as np
import executorch_numpy_runtime as et
rt = et.Runtime.get()
p = rt.load_program({str(programs['arith'])!r})
out = p.load_method('add_mul')([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
assert out[0].sum() == 12.0
et.runtime_info()
assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))
print('ok')
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_default_thread_count_is_the_cpus_the_process_may_run_on():
    # taskset or a container's cpuset can allow fewer CPUs than the machine has; a pool sized for the machine
    # would spin two threads on one CPU (a MobileNetV2 run 20x slower).
    allowed = os.sched_getaffinity(0)
    script = "import executorch_numpy_runtime as et; print(et.runtime_info()['num_threads'])"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)

    def threads(cpus):
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        assert result.returncode == 0, result.stderr
        return int(result.stdout)

    assert threads({min(allowed)}) == 1
    assert threads(allowed) == len(allowed)

